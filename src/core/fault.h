/* fault.h — test-only fault injection: one struct of switches, all zero = no fault.
 *
 * Each switch breaks one thing on purpose so that a test can show its check catches the break (a
 * negative control) or can exercise a failure path (a rank killed mid-step, a checkpoint torn at a
 * stage). The struct travels explicitly through the options of the modules it affects
 * (TrainConfig.faults → ParOptions.faults, CkptOptions.faults, the checkpoint loaders); library
 * code never reads the environment. It is filled in one place: the command line's
 * cli_faults_from_env (src/cli/args.c) reads the ST_*_TEST / ST_CKPT_* environment variables named
 * below, so the tests that launch the binary set those; tests that call the libraries set the
 * fields directly. */
#ifndef ST_CORE_FAULT_H
#define ST_CORE_FAULT_H

typedef struct {
    /* ---- parallel (src/parallel) ---- */
    float grad_scale;     /* ST_PAR_TEST_GRAD_SCALE=F: the reduced gradients times F on every rank (a
                             sum-vs-mean error that Adam and clipping hide from the losses); 0 = off.
                             test_dp (dp_scale), test_llama_grid */
    int kill_rank;        /* ST_PAR_TEST_KILL=RANK:STEP: world rank RANK raises SIGKILL in the backward */
    long kill_step;       /* of step STEP (when block 1's gradients are ready); 0 = off. test_dp (dp_fault) */
    int tp_skip_backward; /* ST_PAR_TEST_TP_FAULT=1: the tp all-reduces of the backward pass skipped
                             (Megatron's f operator missing: the first loss stays right, every gradient
                             below the head is wrong). test_tp, test_tp_plan, test_llama_grid */
    int tp_nowait;        /* ST_PAR_TEST_TP_NOWAIT=1: an overlapped tp collective's wait returns at once
                             (the model reads its buffer before the sum or gather arrived); the request
                             is completed at the next tp hook. test_tp (overlap) */
    int tp_nowait_fwd;    /* ST_PAR_TEST_TP_NOWAIT_FWD=1: as tp_nowait for the forward's overlapped sums
                             only (the row-parallel layers' chunked all-reduces / reduce-scatters, issue
                             28's second part), so the control fails if that path reads early. test_tp */
    int tp_blocking;      /* ST_PAR_TEST_TP_BLOCKING=1: the nonblocking tp hooks left unset, so the model
                             takes the blocking path it took before issue 28 (the overlap's reference).
                             test_tp (overlap), bench/tp_speed.sh */
    int tp_no_progress;   /* ST_PAR_TEST_TP_NOPROGRESS=1: no tp_progress hook, so an overlapped collective
                             moves only at its start and wait (the progress design's alternative,
                             measured by bench/tp_speed.sh) */
    int pp_skip_tied;     /* ST_PAR_TEST_PP_FAULT=1: the pipeline's tied wte gradient exchange skipped
                             (each end updates with its own part). test_pp, test_pp_plan, test_llama_grid */
    int matrix_no_share;  /* ST_PAR_TEST_MATRIX_FAULT=1: Muon's and Shampoo's owners do not share their
                             results (each rank applies only its own matrices). test_matopt */
    int matrix_reset;     /* ST_PAR_TEST_MATRIX_RESET=1: the process's first update zeroes the matrices'
                             optimizer state (Muon's momentum; Shampoo's moments and block state;
                             Sophia's Hessian EMA), a resume that lost it; =2: Shampoo's block state only
                             (what the checkpoint's extra file carries). test_matopt */
    int gather_late;      /* ST_PAR_TEST_GATHER_FAULT=1: the first piece of block 1's parameter all-gather
                             is not waited before block 1's forward; it starts only after that forward
                             (stages 1-2: the forward reads the previous step's values there; stage 3:
                             what the slot held). The negative control of the deferred gathers. test_dp (overlap) */
    int zero_prefetch;    /* ST_PAR_TEST_ZERO_PREFETCH=1: ZeRO 3 gathers the next segment ahead also under
                             --no-overlap (what it did before issue 28's netsim found it: its bytes
                             moved during compute). The control of test_dp (prefetch) */
    long bucket_floats;   /* ST_PAR_TEST_BUCKET=N: ZeRO's collectives split at N floats instead of
                             4 MiB (a tiny test model then has many pieces per segment); 0 = off. test_dp (overlap) */
    int device_bypass;    /* ST_PAR_TEST_DEVICE_BYPASS=1: on a device backend the full-state copy out
                             (checkpoints, exports) reads the parameters with memcpy instead of the
                             backend's to_host, and generation (sample, train --sample-every) copies
                             the logits out the same way: the emulated device must stop both
                             (test_device_train, test_device_sample) */
    int stage_skip;       /* ST_PAR_TEST_STAGE_FAULT=1: on a device under dp > 1 (parallel/dev_stage.c)
                             the reduced first gradient bucket is not copied back to the device (each
                             rank keeps its own gradients there). test_device_train (dp) */
    /* ---- train (src/train) ---- */
    int emulated_device;  /* ST_TRAIN_TEST_EMULATED_DEVICE=1: `--device emu` is the emulated device
                             (train/devemu.h): the CPU table behind a device's contract. test_device_train */
    int hess_rank_local;  /* ST_TRAIN_TEST_HESS_FAULT=1: Sophia's sampled labels keyed by rank-local rows
                             (every rank draws the same labels for its own rows). test_matopt (sophia) */
    int resume_verify_first; /* ST_TRAIN_TEST_RESUME_VERIFY=1: --resume verifies each candidate's data
                                (ckpt_resolve) before the load reads it again: the double read the
                                one-pass resume replaced (test_resume's negative control) */
    double peak_probe_scale; /* ST_TRAIN_TEST_PEAK_FAULT=probe: the FMA probe reports a tenth of what it
                                measured (0 = off); =probe-nogemm: and peak_no_gemm; =low: see below.
                                test_dp (mfu) */
    int peak_no_gemm;     /* no GEMM measurement of the peak (the probe alone: the old peak, the
                             bound's negative control; with peak_no_guard) */
    double peak_gemm_scale; /* =low: the probe and the GEMM both report a hundredth (a peak measured
                               on a loaded machine; a tenth was not always beaten by an ASan step
                               beside another test); the achieved-rate guard must keep MFU <= 1 */
    int peak_no_guard;    /* =low-noguard and =probe-nogemm: no achieved-rate guard (a step's MFU can
                             pass 1: the guard's negative control) */
    /* ---- checkpoints (src/ckpt; docs/checkpoint.md, "Fault injection") ---- */
    char ckpt_fail_stage[32]; /* ST_CKPT_FAIL_AT=STAGE[:MODE]: a save aborts at STAGE (ckpt.c's
                                 CKPT_STAGES; an unknown name fails the save with ST_ERR_INPUT); "" = off */
    int ckpt_fail_mode;   /* MODE: 0 the save returns ST_ERR_RUNTIME, 1 `exit` _exit(3), 2 `stop`
                             raise(SIGSTOP) (the test's parent kill -9s it), 3 `slow` sleep 1 s and go on
                             (`slowN`: N seconds, 1..60). test_ckpt, test_ckpt_shard, test_pp (resume),
                             test_newcomer (a save longer than mpirun's grace period) */
    int ckpt_slow_ms;     /* `slowN`: N s in ms (0: 1 s); test_ckpt sets it to fit its bound */
    int ckpt_fail_only_rank; /* 1 with ST_CKPT_FAIL_RANK=R (sharded saves): the fault fires only on */
    int ckpt_fail_rank;      /* world rank R (0: on every rank) */
    int ckpt_async_sync;  /* ST_CKPT_ASYNC_SYNC=1: an asynchronous save waits for its own write (the
                             negative control of test_ckpt's blocking check) */
    int ckpt_skip_verify; /* ST_CKPT_SHARD_TEST=skip-verify: a sharded load skips the files' xxh3 check */
    int ckpt_wrong_slice; /* ST_CKPT_SHARD_TEST=wrong-slice: a sharded load takes the next tp rank's slice
                             (both test_ckpt_shard's negative controls) */
} Faults;

#endif
