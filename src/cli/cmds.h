/* cmds.h — the subcommands of the scaletrain binary. Each returns the process exit code
 * (0 success, 1 runtime failure, 2 bad input or usage) and prints its own one-line error. */
#ifndef ST_CLI_CMDS_H
#define ST_CLI_CMDS_H

#include "comm/comm.h"

int cmd_train(int argc, char **argv);
/* cmd_train on a process grid (main.c creates it with comm_init; NULL = one process). */
int cmd_train_comm(int argc, char **argv, Comm *comm);
int cmd_sample(int argc, char **argv);
/* `sweep SPEC.json` (cmd_sweep.c) and `study spike|lr-transfer|optimizers` (cmd_study.c, cmd_study_opt.c) on a
 * process grid. */
int cmd_sweep(int argc, char **argv, Comm *comm);
int cmd_study(int argc, char **argv, Comm *comm);

/* Prints "scaletrain <cmd>: <message>" to stderr and returns the exit code for status. */
int cli_fail(const char *cmd, int status, const char *msg);

#endif
