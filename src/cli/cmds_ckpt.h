/* cmds_ckpt.h — the checkpoint subcommands: `scaletrain export CKPT --format hf|llmc -o OUT`.
 *
 * Takes the arguments after the subcommand name, prints its own one-line errors to stderr as
 * "scaletrain export: <message>" and returns the exit code: 0 ok, 1 runtime failure, 2 bad input. */
#ifndef ST_CLI_CMDS_CKPT_H
#define ST_CLI_CMDS_CKPT_H

#include <stddef.h>

#include "core/status.h"
#include "model/gpt.h"

int cmd_export(int argc, char **argv);

/* The WEIGHTS argument of sample, eval and export, resolved one way: a plain weights folder
 * (model.safetensors + config.json without a state.json, e.g. `train --out`; *plain = 1), a
 * checkpoint directory (verified) or a --ckpt-dir (its newest valid checkpoint; a note on stderr
 * "scaletrain CMD: ..." when newer ones were skipped, unless quiet). The folder to read into src.
 * Errors (ST_ERR_INPUT): one line naming arg and the three forms expected. */
Status cli_resolve_weights(const char *cmd, const char *arg, char *src, size_t len, int *plain, int quiet, Err *err);

/* The weights of folder src into g (gpt_init'ed) wherever its backend keeps them: in place on a
 * host-addressable backend; on a device read into a host buffer first, then one from_host and
 * gpt_sync_lp (sample and eval --device cuda). ckpt_load_weights' errors (a NaN or infinity in a
 * tensor included: refused naming it); out of memory. */
Status cli_load_weights(Gpt *g, const char *src, Err *err);

#endif
