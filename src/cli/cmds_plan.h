/* cmds_plan.h — `scaletrain plan`: the training-plan review (no training).
 *
 * Takes the arguments after the subcommand name, prints the review (or, with --json, one JSON
 * object whose schema is in docs/plan.md) to stdout, and returns the exit code: 0 when the plan
 * passes its launch checklist, 2 on bad input or when the checklist has an error (then one line
 * "scaletrain plan: <first error>" goes to stderr after the review). */
#ifndef ST_CLI_CMDS_PLAN_H
#define ST_CLI_CMDS_PLAN_H

int cmd_plan(int argc, char **argv);

#endif
