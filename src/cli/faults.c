/* faults.c — the test-only Faults from the environment (faults.h). */
#include "cli/faults.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1 when the variable is set to exactly "1" (as the tests set them). */
static int env_is_1(const char *name) {
    const char *e = getenv(name);
    return e && atoi(e) == 1;
}

Status cli_faults_from_env(Faults *f, Err *err) {
    memset(f, 0, sizeof *f);
    const char *e;
    if ((e = getenv("ST_PAR_TEST_GRAD_SCALE"))) f->grad_scale = strtof(e, NULL);
    if ((e = getenv("ST_PAR_TEST_KILL")) && sscanf(e, "%d:%ld", &f->kill_rank, &f->kill_step) != 2)
        f->kill_rank = 0, f->kill_step = 0;
    f->tp_skip_backward = env_is_1("ST_PAR_TEST_TP_FAULT");
    f->tp_nowait = env_is_1("ST_PAR_TEST_TP_NOWAIT");
    f->tp_nowait_fwd = env_is_1("ST_PAR_TEST_TP_NOWAIT_FWD");
    f->tp_blocking = env_is_1("ST_PAR_TEST_TP_BLOCKING");
    f->tp_no_progress = env_is_1("ST_PAR_TEST_TP_NOPROGRESS");
    f->pp_skip_tied = env_is_1("ST_PAR_TEST_PP_FAULT");
    f->matrix_no_share = env_is_1("ST_PAR_TEST_MATRIX_FAULT");
    if ((e = getenv("ST_PAR_TEST_MATRIX_RESET"))) f->matrix_reset = atoi(e);
    f->hess_rank_local = env_is_1("ST_TRAIN_TEST_HESS_FAULT");
    f->device_bypass = env_is_1("ST_PAR_TEST_DEVICE_BYPASS");
    f->gather_late = env_is_1("ST_PAR_TEST_GATHER_FAULT");
    f->zero_prefetch = env_is_1("ST_PAR_TEST_ZERO_PREFETCH");
    if ((e = getenv("ST_PAR_TEST_BUCKET")) && *e) {
        char *end;
        long v = strtol(e, &end, 10);
        if (*end || v < 1) return err_set(err, ST_ERR_INPUT, "ST_PAR_TEST_BUCKET=%s: expected a number of floats >= 1", e);
        f->bucket_floats = v;
    }
    f->stage_skip = env_is_1("ST_PAR_TEST_STAGE_FAULT");
    f->emulated_device = env_is_1("ST_TRAIN_TEST_EMULATED_DEVICE");
    f->resume_verify_first = env_is_1("ST_TRAIN_TEST_RESUME_VERIFY");
    if ((e = getenv("ST_TRAIN_TEST_PEAK_FAULT")) && *e) {
        if (!strcmp(e, "probe")) f->peak_probe_scale = 0.1;
        else if (!strcmp(e, "probe-nogemm")) f->peak_probe_scale = 0.1, f->peak_no_gemm = 1, f->peak_no_guard = 1;
        else if (!strcmp(e, "low")) f->peak_probe_scale = 0.01, f->peak_gemm_scale = 0.01;
        else if (!strcmp(e, "low-noguard")) f->peak_probe_scale = 0.01, f->peak_gemm_scale = 0.01, f->peak_no_guard = 1;
        else return err_set(err, ST_ERR_INPUT, "ST_TRAIN_TEST_PEAK_FAULT=%s: expected probe, probe-nogemm, low or "
                            "low-noguard", e);
    }
    if ((e = getenv("ST_CKPT_FAIL_AT")) && *e) {
        snprintf(f->ckpt_fail_stage, sizeof f->ckpt_fail_stage, "%s", e);
        char *colon = strchr(f->ckpt_fail_stage, ':');
        if (colon) {
            *colon = '\0';
            if (!strcmp(colon + 1, "exit")) f->ckpt_fail_mode = 1;
            else if (!strcmp(colon + 1, "stop")) f->ckpt_fail_mode = 2;
            else if (!strcmp(colon + 1, "slow")) f->ckpt_fail_mode = 3;
            else if (!strncmp(colon + 1, "slow", 4) && atoi(colon + 5) >= 1 && atoi(colon + 5) <= 60)
                f->ckpt_fail_mode = 3, f->ckpt_slow_ms = 1000 * atoi(colon + 5);
            else return err_set(err, ST_ERR_INPUT, "ST_CKPT_FAIL_AT=%s: expected STAGE, STAGE:exit, STAGE:stop, STAGE:slow or STAGE:slowN (N seconds, 1..60)", e);
        }
    }
    if ((e = getenv("ST_CKPT_FAIL_RANK")) && *e) {
        char *end;
        long v = strtol(e, &end, 10);
        if (*end || v < 0) return err_set(err, ST_ERR_INPUT, "ST_CKPT_FAIL_RANK=%s: expected a rank number", e);
        f->ckpt_fail_only_rank = 1, f->ckpt_fail_rank = (int)v;
    }
    if ((e = getenv("ST_CKPT_ASYNC_SYNC"))) f->ckpt_async_sync = e[0] == '1';
    if ((e = getenv("ST_CKPT_SHARD_TEST"))) {
        f->ckpt_skip_verify = !strcmp(e, "skip-verify");
        f->ckpt_wrong_slice = !strcmp(e, "wrong-slice");
    }
    return ST_OK;
}
