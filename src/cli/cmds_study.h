/* cmds_study.h — `scaletrain study NAME`: the commands of the studies (src/study, studies.h).
 * Each returns the exit code: 0 (also when interrupted: the same command resumes), 2 on bad input,
 * 1 on a runtime failure, with one line "scaletrain study NAME: <why>" on stderr. */
#ifndef ST_CLI_CMDS_STUDY_H
#define ST_CLI_CMDS_STUDY_H

#include "comm/comm.h"
#include "study/studies.h"

/* `study optimizers` (cmd_study_opt.c), dispatched by cmd_study. */
int cmd_study_optimizers(int argc, char **argv, Comm *comm);

/* The end of a study command: prints res's findings (then frees them), and on rank 0 the
 * interrupted line or "study NAME: wrote OUT/index.html and OUT/summary.json"; an error through
 * cli_fail. Returns the exit code. */
int study_finish(const char *study, const char *out, const Comm *comm, Status st, StudyOutcome *res, Err *err);

#endif
