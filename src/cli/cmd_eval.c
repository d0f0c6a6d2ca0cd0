/* cmd_eval.c — placeholder, replaced below. */
#include "cli/cmds.h"
#include "cli/cmds_report.h"
int cmd_eval(int argc, char **argv) { return cli_fail("eval", 2, "not yet"); }
