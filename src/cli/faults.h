/* faults.h — the one place that fills the test-only Faults (core/fault.h) of a run: from the
 * environment variables the tests set when they launch the binary. */
#ifndef ST_CLI_FAULTS_H
#define ST_CLI_FAULTS_H

#include "core/fault.h"
#include "core/status.h"

/* f gets every switch from its environment variable (all unset: all zero, no fault):
 *   ST_PAR_TEST_GRAD_SCALE=F          grad_scale
 *   ST_PAR_TEST_KILL=RANK:STEP        kill_rank, kill_step
 *   ST_PAR_TEST_TP_FAULT=1            tp_skip_backward
 *   ST_PAR_TEST_TP_NOWAIT=1           tp_nowait
 *   ST_PAR_TEST_TP_NOWAIT_FWD=1       tp_nowait_fwd
 *   ST_PAR_TEST_TP_BLOCKING=1         tp_blocking
 *   ST_PAR_TEST_TP_NOPROGRESS=1       tp_no_progress
 *   ST_PAR_TEST_PP_FAULT=1            pp_skip_tied
 *   ST_PAR_TEST_MATRIX_FAULT=1        matrix_no_share
 *   ST_PAR_TEST_MATRIX_RESET=N        matrix_reset
 *   ST_PAR_TEST_GATHER_FAULT=1        gather_late
 *   ST_PAR_TEST_ZERO_PREFETCH=1       zero_prefetch
 *   ST_PAR_TEST_BUCKET=N              bucket_floats
 *   ST_TRAIN_TEST_HESS_FAULT=1        hess_rank_local
 *   ST_CKPT_FAIL_AT=STAGE[:MODE]      ckpt_fail_stage, ckpt_fail_mode (MODE exit | stop | slow | slowN)
 *   ST_CKPT_FAIL_RANK=R               ckpt_fail_only_rank, ckpt_fail_rank
 *   ST_CKPT_ASYNC_SYNC=1              ckpt_async_sync
 *   ST_CKPT_SHARD_TEST=skip-verify|wrong-slice   ckpt_skip_verify, ckpt_wrong_slice
 * ST_ERR_INPUT naming the variable for a value it cannot read (a checkpoint stage name is checked
 * by the save, which knows the stages). */
Status cli_faults_from_env(Faults *f, Err *err);

#endif
