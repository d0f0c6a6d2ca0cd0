/* cmds_ckpt.h — the checkpoint subcommands: `scaletrain export CKPT --format hf|llmc -o OUT`.
 *
 * Takes the arguments after the subcommand name, prints its own one-line errors to stderr as
 * "scaletrain export: <message>" and returns the exit code: 0 ok, 1 runtime failure, 2 bad input. */
#ifndef ST_CLI_CMDS_CKPT_H
#define ST_CLI_CMDS_CKPT_H

int cmd_export(int argc, char **argv);

#endif
