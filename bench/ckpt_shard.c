/* ckpt_shard.c — one checkpoint save of gpt2-124m-sized state (fp32 params, m, v) from the ranks of
 * an MPI job, by one of two methods (bench/ckpt_shard.sh runs it; results: bench/results/ckpt_shard.md):
 *
 *   shard    ckpt_shard_save: every rank writes its own slices in parallel (ckpt_shard_assign's split);
 *   gather   what the trainer did before (train.c's run_save_gathered with tp): every rank places its
 *            slices into a zeroed full-layout buffer per kind, a tp all-reduce sums them, rank 0 calls
 *            ckpt_save (the single-process format).
 *
 * usage: mpirun -np 2 ckpt_shard_bench shard|gather DIR TP
 * The grid is dp = world / TP × TP (TP = 2 with 2 ranks: each rank holds half of every split tensor).
 * Rank 0 prints one JSON line: {"method", "world", "tp", "ms", "bytes", "vmhwm_kb"} where ms is the
 * save's wall time (from a barrier before to the return on rank 0, the gather included) and vmhwm_kb
 * rank 0's peak resident set (/proc/self/status VmHWM) over the whole process. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt/shard.h"
#include "comm/comm.h"
#include "core/timer.h"

static long vmhwm_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    return kb;
}

int main(int argc, char **argv) {
    if (argc != 4) return fprintf(stderr, "usage: ckpt_shard_bench shard|gather DIR TP\n"), 2;
    const char *method = argv[1], *dir = argv[2];
    int tp = atoi(argv[3]);
    Comm *c;
    Err e = {0};
    if (comm_init(&c, &argc, &argv, &e) != ST_OK) return fprintf(stderr, "%s\n", e.msg), 1;
    int rc = 1;
    if (comm_set_grid(c, c->world / tp, tp, 1, &e) != ST_OK) goto out;
    ModelConfig cfg = {0};
    cfg.vocab = 50257, cfg.max_seq = 1024;
    if (model_config_preset(&cfg, "gpt2-124m", &e) != ST_OK || model_config_validate(&cfg, &e) != ST_OK) goto out;
    ParamLayout pl, full;
    layout_init_tp(&pl, &cfg, c->dp, tp, c->tp_rank);
    layout_init(&full, &cfg, 1);
    float *b[3];
    for (int k = 0; k < 3; k++) {
        b[k] = malloc(pl.total * sizeof(float));
        for (size_t i = 0; i < pl.total; i++) b[k][i] = (float)((i * 2654435761u + (size_t)k) % 1000) * 1e-3f;
    }
    CkptMeta meta;
    memset(&meta, 0, sizeof meta);
    meta.step = 1, meta.dp = c->dp, meta.tp = tp, meta.pp = 1;
    snprintf(meta.optimizer, sizeof meta.optimizer, "adamw");
    CkptOptions o = ckpt_default_options();
    o.dir = dir, o.keep_last = 1, o.tokenizer = "gpt2";
    CkptSaveInfo info;
    memset(&info, 0, sizeof info);
    if (comm_barrier(c, &e) != ST_OK) goto out;
    double t0 = timer_ms();
    Status st;
    if (!strcmp(method, "shard")) {
        unsigned char *w = calloc((size_t)pl.ntensors, 1);
        ckpt_shard_assign(&pl, c->dp, c->dp_rank, w);
        CkptShardSrc src = {&pl, b[0], b[1], b[2], w};
        st = ckpt_shard_save(c, &src, &meta, &o, &info, &e);
        free(w);
    } else {
        /* train.c's gather: full-layout buffers on every rank, slices placed, a tp all-reduce. */
        float *f[3];
        st = ST_OK;
        for (int k = 0; k < 3 && st == ST_OK; k++) {
            f[k] = calloc(full.total, sizeof(float));
            layout_tp_copy(&pl, b[k], &full, f[k], 1, c->tp_rank == 0);
            st = comm_tp_allreduce_f32(c, f[k], full.total, COMM_SUM, &e);
        }
        int64_t fail = 0;
        if (st == ST_OK && c->rank == 0) {
            GptWeights gw;
            memset(&gw, 0, sizeof gw);
            gw.cfg = cfg, gw.layout = full, gw.params = f[0];
            CkptOptState opt = {f[1], f[2], NULL};
            st = ckpt_save(&gw, &opt, &meta, &o, &info, &e);
            fail = st != ST_OK;
        }
        comm_allreduce_i64(c, &fail, 1, COMM_MAX, &e);
        if (fail) st = ST_ERR_RUNTIME;
        for (int k = 0; k < 3; k++) free(f[k]);
    }
    double ms = timer_ms() - t0;
    if (st != ST_OK) {
        fprintf(stderr, "rank %d: %s\n", c->rank, e.msg);
        goto out;
    }
    if (c->rank == 0)
        printf("{\"method\": \"%s\", \"world\": %d, \"tp\": %d, \"ms\": %.1f, \"bytes\": %zu, \"vmhwm_kb\": %ld}\n", method,
               c->world, tp, ms, info.bytes, vmhwm_kb());
    rc = 0;
out:
    if (rc) fprintf(stderr, "ckpt_shard_bench: %s\n", e.msg);
    comm_finalize(c);
    return rc;
}
