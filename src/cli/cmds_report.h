/* cmds_report.h — the run-inspection subcommands:
 *   `scaletrain report RUN.jsonl [more.jsonl ...] -o report.html`  (HTML charts of metrics logs)
 *   `scaletrain eval WEIGHTS_DIR --data SHARDS [...]`               (loss, perplexity, bits per byte)
 *
 * Each takes the arguments after the subcommand name, prints its own one-line errors to stderr as
 * "scaletrain <cmd>: <message>" and returns the exit code: 0 ok, 1 runtime failure, 2 bad input.
 * Details: docs/report.md. */
#ifndef ST_CLI_CMDS_REPORT_H
#define ST_CLI_CMDS_REPORT_H

int cmd_report(int argc, char **argv);
int cmd_eval(int argc, char **argv);

#endif
