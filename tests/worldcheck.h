/* worldcheck.h — checks under MPI that must hold on every rank (test_comm, test_tp_block). */
#ifndef ST_WORLDCHECK_H
#define ST_WORLDCHECK_H

#include "comm/comm.h"

/* comm_init for a test: the job's communicator, which tu_world_check then uses; on failure prints
 * "comm_init: <why>" and exits 1. */
Comm *tu_world_init(int *argc, char ***argv);

/* Records a check that must hold on every rank: the ranks' verdicts are combined with an
 * all-reduce (a failed all-reduce counts as a failure); rank 0 prints it through tu_check with
 * "world=N " before the detail, other ranks print their own failures and count the world's. Every
 * rank must call it the same number of times. */
void tu_world_check(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
