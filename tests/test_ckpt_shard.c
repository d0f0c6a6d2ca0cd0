/* test_ckpt_shard.c — sharded checkpoints (issue 14): written by every rank under mpirun, loaded
 * on every other grid, two-phase failure, corruption, async, export.
 *
 * Oracle: one full-model buffer per kind (params, m, v) whose every real element is a hash of
 * (kind, tensor id, row, column), padding zero. A rank of any grid (dp × tp × pp, interleaved
 * stages) holds its slice of it, cut by the test's own index arithmetic from the tensor names and
 * the model's dimensions (oracle_slice_ex: Q, K, V heads' rows, the projections' columns, MLP rows,
 * vocabulary rows; not the loader's layout_tp_copy); every load is compared with that slice bit for
 * bit (memcmp of the whole buffer, padding included). Tolerance: none.
 *
 * Parts (one CTest, the driver; it launches itself as the MPI worker):
 *   saves     1-process sharded and single-format saves; mpirun -np 2 (tp 2), -np 4 (dp 2 × pp 2),
 *             -np 8 (dp 2 × tp 2 × pp 2) sharded saves; each checkpoint loaded on 11 grids
 *             (1 process, dp 2, tp 2, tp 4, pp 2, pp 4, interleaved pp 2, dp2×tp2×pp2, tp2×pp4,
 *             tp4×pp2, dp2×pp2), every rank of each;
 *   faults    (-np 2) a rank failing at each stage (shard on rank 1, agree, begin, manifest, state,
 *             sync, rename on rank 0): every rank returns the same error naming the rank and file,
 *             `latest` and the previous checkpoint unchanged, no step dir, no .tmp dir; a tensor
 *             written twice / by nobody is refused; then a rank _exit()s mid-write (:exit);
 *   corrupt   a byte flipped in each rank file (and manifest.json): load and ckpt_verify name the
 *             file; ckpt_resolve auto falls back to the previous step;
 *   async     (-np 2) the staging copy is what is written (live buffers scribbled before the
 *             commit), the save is invisible until the commit, a writer failure aborts everywhere;
 *   export    `scaletrain export` of the sharded checkpoint == export of the single-format one
 *             (byte-identical model.safetensors), `sample` greedy output identical.
 *   llama     a Llama with grouped-query attention (4 heads over 2 KV heads, untied head): sharded
 *             saves in one process, at tp 2 and at dp 2 × tp 2 × pp 2, each loaded on the 9 grids
 *             whose tp divides the 2 KV heads (K/V heads resharded between tp 1 and 2);
 * Negative controls (run here, each must make its check fail): Faults.ckpt_wrong_slice (tp slices
 * placed one rank off) must break the bit-exact comparison; .ckpt_skip_verify must let a flipped
 * byte through the load (so the checksum is what catches it); the comparator must catch one
 * flipped bit; the Llama tp 2 load against the slices with the two KV heads' rows of wk and wv
 * swapped must differ. The save faults are CkptOptions.faults (core/fault.h). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/shard.h"
#include "comm/comm.h"
#include "core/fault.h"
#include "testutil.h"

static Faults g_faults; /* the loads' test faults (load_grid's; zero: none) */

/* GPT-2, or (llama) a Llama with grouped-query attention: 4 heads over 2 KV heads, F = 48, untied head. */
static ModelConfig model_cfg(int llama) {
    ModelConfig c = {0};
    c.n_layer = 4, c.n_head = 4, c.n_embd = 32, c.vocab = 257, c.max_seq = 16; /* V = 257: the bytes tokenizer */
    if (llama) c.arch = ARCH_LLAMA, c.n_kv_head = 2, c.ffn = 48, c.untied = 1;
    Err e;
    if (model_config_validate(&c, &e) != ST_OK) {
        fprintf(stderr, "config: %s\n", e.msg);
        exit(1);
    }
    return c;
}

/* ---- the oracle ---- */

static float oracle_value(int kind, int id, int row, int col) {
    uint64_t x = ((uint64_t)kind << 56) ^ ((uint64_t)id << 40) ^ ((uint64_t)row << 20) ^ (uint64_t)col;
    x ^= x >> 33, x *= 0xff51afd7ed558ccdULL, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ULL, x ^= x >> 33;
    return (float)((double)(x >> 40) / (double)(1 << 24)) - 0.5f + (float)kind;
}

typedef struct {
    ParamLayout full;
    float *buf[3]; /* params, m, v in the full layout */
} Oracle;

static void oracle_init(Oracle *o, const ModelConfig *c) {
    if (layout_init(&o->full, c, 1) != 0) exit(1);
    for (int k = 0; k < 3; k++) {
        o->buf[k] = calloc(o->full.total, sizeof(float));
        for (int i = 0; i < o->full.ntensors; i++) {
            const TensorInfo *t = &o->full.tensors[i];
            for (int r = 0; r < t->rows_real; r++)
                for (int col = 0; col < t->shape[1]; col++)
                    o->buf[k][t->offset + (size_t)r * t->shape[1] + col] = oracle_value(k, t->id, r, col);
        }
    }
}

/* ---- grids ---- */

typedef struct {
    const char *name;
    int dp, tp, pp;
    int interleave; /* 2: each pp rank holds 2 chunks of one block (L = 4, pp = 2) */
} Grid;

static const Grid GRIDS[] = {
    {"1", 1, 1, 1, 0},        {"dp2", 2, 1, 1, 0},     {"tp2", 1, 2, 1, 0},        {"tp4", 1, 4, 1, 0},
    {"pp2", 1, 1, 2, 0},      {"pp4", 1, 1, 4, 0},     {"pp2i", 1, 1, 2, 2},       {"dp2tp2pp2", 2, 2, 2, 0},
    {"tp2pp4", 1, 2, 4, 0},   {"tp4pp2", 1, 4, 2, 0},  {"dp2pp2", 2, 1, 2, 0},
};
enum { NGRIDS = sizeof GRIDS / sizeof GRIDS[0] };

/* The layout of world rank r of grid g (rank = (pp_rank·dp + dp_rank)·tp + tp_rank). */
static void grid_layout(const Grid *g, int r, const ModelConfig *c, ParamLayout *pl, int *dp_rank) {
    int tp_rank = r % g->tp, dpr = (r / g->tp) % g->dp, ppr = r / (g->tp * g->dp);
    StageBlocks sb = {0};
    int L = c->n_layer;
    if (g->interleave) { /* chunks {ppr}, {ppr + pp} */
        sb.n = 2;
        sb.first[0] = ppr, sb.last[0] = ppr + 1, sb.first[1] = ppr + g->pp, sb.last[1] = ppr + g->pp + 1;
    } else {
        sb.n = 1;
        sb.first[0] = ppr * L / g->pp, sb.last[0] = (ppr + 1) * L / g->pp;
    }
    if (layout_init_stage(pl, c, g->dp, g->tp, tp_rank, &sb) != 0) {
        fprintf(stderr, "layout_init_stage failed for grid %s rank %d\n", g->name, r);
        exit(1);
    }
    if (dp_rank) *dp_rank = dpr;
}

static const Grid *grid_find(int dp, int tp, int pp) {
    for (int i = 0; i < NGRIDS; i++)
        if (GRIDS[i].dp == dp && GRIDS[i].tp == tp && GRIDS[i].pp == pp && !GRIDS[i].interleave) return &GRIDS[i];
    fprintf(stderr, "no grid %dx%dx%d\n", dp, tp, pp);
    exit(1);
}

/* The oracle's slice for a layout, per kind (caller frees), cut here by index arithmetic from the
 * tensor names and the model's dimensions, not with the loader's layout_tp_copy: for tp rank r of
 * tp ranks (C channels, NH heads of hs = C/NH channels, KV key/value heads, F MLP rows):
 *   replicated (norms, wpe, attprojb, fcprojb): the whole tensor;
 *   wte, lm_head: vocabulary rows [r·Vl, r·Vl + Vl), Vl = V rounded up to 64·tp, over tp (tp 1: to
 *               64), the rows past V zero;
 *   qkvw, qkvb (GPT-2): for each of Q, K, V (full rows p·C ..), the rows of the rank's heads
 *               [p·C + r·C/tp, p·C + (r+1)·C/tp), in that order;
 *   wq (Llama): rows [r·C/tp, (r+1)·C/tp); wk, wv: the rank's KV heads' rows
 *               [r·KV/tp·hs, (r+1)·KV/tp·hs) (swap_kv: the other half, the control);
 *   fcw, fcb, wgate, wup: MLP rows [r·F/tp, (r+1)·F/tp);
 *   attprojw, fcprojw, wo, wdown: the columns of the rank's heads or MLP rows, every row.
 * Every local tensor's shape must be the one these rules give (else *bad is set). Padding zero. */
static float *oracle_slice_ex(const Oracle *o, const ParamLayout *pl, int kind, int swap_kv, int *bad) {
    const ModelConfig *c = &o->full.cfg;
    int tp = pl->tp, r = pl->tp_rank, C = c->n_embd, hs = C / c->n_head, F = c->ffn, V = c->vocab;
    int KV = c->n_kv_head ? c->n_kv_head : c->n_head;
    int Vl = tp == 1 ? (V + 63) / 64 * 64 : (V + 64 * tp - 1) / (64 * tp) * 64;
    float *b = calloc(pl->total + 1, sizeof(float));
    for (int k = 0; k < pl->ntensors; k++) {
        const TensorInfo *t = &pl->tensors[k];
        int fk = layout_find(&o->full, t->name);
        if (fk < 0) {
            *bad = 1;
            continue;
        }
        const TensorInfo *f = &o->full.tensors[fk];
        const float *src = o->buf[kind] + f->offset;
        float *dst = b + t->offset;
        const char *dot = strrchr(t->name, '.'), *base = dot ? dot + 1 : t->name;
        int fw = (int)(f->numel / (size_t)f->shape[0]); /* full row width (1 for a vector) */
        int rows = f->shape[0], cols = fw, row0 = 0, col0 = 0, groups = 1, real = f->rows_real;
        if (!strcmp(base, "wte") || !strcmp(base, "lm_head")) {
            rows = Vl, row0 = r * Vl, real = V - row0 < 0 ? 0 : V - row0 < Vl ? V - row0 : Vl;
        } else if (!strcmp(base, "qkvw") || !strcmp(base, "qkvb")) {
            rows = C / tp, row0 = r * C / tp, groups = 3, real = 3 * rows;
        } else if (!strcmp(base, "wq")) {
            rows = real = C / tp, row0 = r * C / tp;
        } else if (!strcmp(base, "wk") || !strcmp(base, "wv")) {
            rows = real = KV / tp * hs, row0 = (swap_kv ? tp - 1 - r : r) * KV / tp * hs;
        } else if (!strcmp(base, "fcw") || !strcmp(base, "fcb") || !strcmp(base, "wgate") || !strcmp(base, "wup")) {
            rows = real = F / tp, row0 = r * F / tp;
        } else if (!strcmp(base, "attprojw") || !strcmp(base, "wo")) {
            cols = C / tp, col0 = r * C / tp;
        } else if (!strcmp(base, "fcprojw") || !strcmp(base, "wdown")) {
            cols = F / tp, col0 = r * F / tp;
        }
        int lrows = rows * groups, lw = cols;
        if (t->shape[0] != lrows || (int)(t->numel / (size_t)t->shape[0]) != lw || t->rows_real != real) {
            if (!*bad) printf("oracle slice: %s on tp %d rank %d is %d x %zu (%d real), the rules give %d x %d (%d real)\n",
                              t->name, tp, r, t->shape[0], t->numel / (size_t)t->shape[0], t->rows_real, lrows, lw, real);
            *bad = 1;
            continue;
        }
        for (int j = 0; j < real; j++) {
            int g = j / rows, fr = g * f->shape[0] / groups + row0 + j % rows;
            memcpy(dst + (size_t)j * lw, src + (size_t)fr * fw + col0, (size_t)lw * sizeof(float));
        }
    }
    return b;
}

static int g_slice_bad; /* a layout whose shapes are not the rules' (reported once by main) */

static float *oracle_slice(const Oracle *o, const ParamLayout *pl, int kind) {
    return oracle_slice_ex(o, pl, kind, 0, &g_slice_bad);
}

/* Loads ckpt on every rank of grid g and compares with the oracle; returns the number of ranks
 * whose load failed or differed (msg receives the first problem). */
static int load_grid(const char *ckpt, const Grid *g, const Oracle *o, int with_moments, char *msg, size_t cap) {
    ModelConfig c = o->full.cfg;
    int bad = 0, world = g->dp * g->tp * g->pp;
    for (int r = 0; r < world; r++) {
        ParamLayout pl;
        grid_layout(g, r, &c, &pl, NULL);
        float *b[3], *want[3];
        for (int k = 0; k < 3; k++) {
            b[k] = malloc((pl.total + 1) * sizeof(float));
            memset(b[k], 0x7f, (pl.total + 1) * sizeof(float)); /* the loader must zero the padding */
            want[k] = oracle_slice(o, &pl, k);
        }
        Err e = {0};
        Status st = ckpt_load_any(ckpt, &pl, b[0], with_moments ? b[1] : NULL, with_moments ? b[2] : NULL, NULL,
                                  &g_faults, &e);
        int ok = st == ST_OK;
        for (int k = 0; k < (with_moments ? 3 : 1) && ok; k++) ok = !memcmp(b[k], want[k], pl.total * sizeof(float));
        if (!ok && !bad++)
            snprintf(msg, cap, "grid %s rank %d: %s", g->name, r, st != ST_OK ? e.msg : "values differ from the oracle");
        for (int k = 0; k < 3; k++) free(b[k]), free(want[k]);
        layout_free(&pl);
    }
    return bad;
}

/* ---- worker (under mpirun) ---- */

typedef struct {
    Comm *c;
    ParamLayout pl;
    float *b[3];
    unsigned char *write;
    CkptShardSrc src;
} Rank;

static void rank_init(Rank *r, Comm *c, const Oracle *o, int dp, int tp, int pp) {
    memset(r, 0, sizeof *r);
    r->c = c;
    int dpr;
    grid_layout(grid_find(dp, tp, pp), c->rank, &o->full.cfg, &r->pl, &dpr);
    for (int k = 0; k < 3; k++) r->b[k] = oracle_slice(o, &r->pl, k);
    r->write = calloc((size_t)r->pl.ntensors + 1, 1);
    ckpt_shard_assign(&r->pl, dp, dpr, r->write);
    r->src = (CkptShardSrc){&r->pl, r->b[0], r->b[1], r->b[2], r->write};
}

static CkptMeta meta_for(long step, const Comm *c) {
    CkptMeta m;
    memset(&m, 0, sizeof m);
    m.step = step, m.sched_step = step, m.optim_step = step, m.tokens_seen = (uint64_t)step * 1000;
    snprintf(m.optimizer, sizeof m.optimizer, "adamw");
    m.dp = c->dp, m.tp = c->tp, m.pp = c->pp;
    ckpt_meta_set_rng(&m, "init_seed", 1337);
    return m;
}

static CkptOptions opts_for(const char *dir) {
    CkptOptions o = ckpt_default_options();
    o.dir = dir, o.keep_last = 0, o.tokenizer = "bytes";
    return o;
}

/* The outcome must be the same on every rank: status and message. */
static int same_everywhere(Comm *c, Status st, const char *msg) {
    uint64_t h = (uint64_t)st * 1000003u;
    for (const char *p = msg; *p; p++) h = h * 131 + (unsigned char)*p;
    Err e;
    return comm_check_same_u64(c, h, "save outcome", &e) == ST_OK;
}

static int exists(const char *dir, const char *name) {
    char p[8400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat sb;
    return stat(p, &sb) == 0;
}

static void read_latest(const char *dir, char *out, size_t cap) {
    char p[8400];
    snprintf(p, sizeof p, "%s/latest", dir);
    char *t = tu_slurp(p);
    snprintf(out, cap, "%s", t ? t : "");
    free(t);
}

/* "save DIR STEPS DP TP PP [exit-rank=R]": saves each step of the comma list (rank R _exits while it
 * writes its file: Faults.ckpt_fail_* at stage shard). */
static int worker_save(Comm *c, const Oracle *o, char **argv) {
    const char *dir = argv[0];
    Rank r;
    rank_init(&r, c, o, atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
    if (g_slice_bad) return fprintf(stderr, "rank %d: the oracle's slicing rules do not fit the layout\n", c->rank), 1;
    CkptOptions op = opts_for(dir);
    if (argv[5] && !strncmp(argv[5], "exit-rank=", 10)) { /* that rank _exits while it writes its file */
        snprintf(op.faults.ckpt_fail_stage, sizeof op.faults.ckpt_fail_stage, "shard");
        op.faults.ckpt_fail_mode = 1, op.faults.ckpt_fail_only_rank = 1, op.faults.ckpt_fail_rank = atoi(argv[5] + 10);
    }
    int fails = 0;
    for (char *s = argv[1]; s && *s;) {
        long step = strtol(s, &s, 10);
        if (*s == ',') s++;
        CkptMeta m = meta_for(step, c);
        Err e = {0};
        CkptSaveInfo info;
        Status st = ckpt_shard_save(c, &r.src, &m, &op, &info, &e);
        if (st != ST_OK) fprintf(stderr, "rank %d: save step %ld: %s\n", c->rank, step, e.msg), fails++;
        /* Round trip on the writing grid itself. */
        char msg[1100] = "";
        if (st == ST_OK && c->rank == 0 && load_grid(info.path, grid_find(c->dp, c->tp, c->pp), o, 1, msg, sizeof msg))
            fprintf(stderr, "round trip: %s\n", msg), fails++;
    }
    return fails ? 1 : 0;
}

/* "faults DIR": -np 2, grid dp 2. */
static int worker_faults(Comm *c, const Oracle *o, char **argv) {
    const char *dir = argv[0];
    Rank r;
    rank_init(&r, c, o, 2, 1, 1);
    CkptOptions op = opts_for(dir);
    int bad = 0;
    Err e = {0};
    CkptMeta m1 = meta_for(1, c);
    if (ckpt_shard_save(c, &r.src, &m1, &op, NULL, &e) != ST_OK) {
        fprintf(stderr, "rank %d: the first save failed: %s\n", c->rank, e.msg);
        return 1;
    }
    static const struct {
        const char *stage;
        int rank;
        const char *names; /* the message must contain this */
    } F[] = {{"shard", 1, "rank 1 could not write .tmp-step_00000002/rank00001.safetensors"},
             {"agree", 0, "rank 0 could not write .tmp-step_00000002/rank00000.safetensors"},
             {"begin", 1, "rank 1 could not start the save"},
             {"manifest", 0, "rank 0 could not commit step_00000002: checkpoint save aborted at stage 'manifest'"},
             {"state", 0, "stage 'state'"},
             {"sync", 0, "stage 'sync'"},
             {"rename", 0, "stage 'rename'"}};
    for (size_t i = 0; i < sizeof F / sizeof F[0]; i++) {
        CkptOptions fop = op; /* the save torn at F[i].stage on rank F[i].rank */
        snprintf(fop.faults.ckpt_fail_stage, sizeof fop.faults.ckpt_fail_stage, "%s", F[i].stage);
        fop.faults.ckpt_fail_only_rank = 1, fop.faults.ckpt_fail_rank = F[i].rank;
        CkptMeta m2 = meta_for(2, c);
        Err e2 = {0};
        Status st = ckpt_shard_save(c, &r.src, &m2, &fop, NULL, &e2);
        int same = same_everywhere(c, st, e2.msg);
        char latest[64];
        read_latest(dir, latest, sizeof latest);
        int ok = st == ST_ERR_RUNTIME && strstr(e2.msg, F[i].names) && same && !strcmp(latest, "step_00000001\n") &&
                 !exists(dir, "step_00000002") && !exists(dir, ".tmp-step_00000002") && exists(dir, "step_00000001");
        if (c->rank == 0)
            tu_check(ok, "shard_fault_aborts_everywhere", "stage %s on rank %d: status %d same on all ranks %d, latest %.13s; %s",
                     F[i].stage, F[i].rank, st, same, latest, e2.msg);
        else if (!ok)
            fprintf(stderr, "rank %d: stage %s: status %d, same %d, latest %.13s, step 2 %d, tmp %d, step 1 %d: %s\n",
                    c->rank, F[i].stage, st, same, latest, exists(dir, "step_00000002"),
                    exists(dir, ".tmp-step_00000002"), exists(dir, "step_00000001"), e2.msg);
        /* No rank starts the next save (whose rank 0 creates the same temporary directory again)
         * before every rank has looked at the directory. */
        Err eb;
        comm_barrier(c, &eb);
        bad += !ok;
    }
    /* Coverage refused at save: every tensor written by both ranks, or by neither. */
    for (int v = 0; v < 2; v++) {
        unsigned char *w = malloc((size_t)r.pl.ntensors);
        memset(w, v == 0 ? 1 : 0, (size_t)r.pl.ntensors);
        CkptShardSrc s = r.src;
        s.write = w;
        CkptMeta m2 = meta_for(2, c);
        Err e2 = {0};
        Status st = ckpt_shard_save(c, &s, &m2, &op, NULL, &e2);
        const char *want = v == 0 ? "written 2 times" : "missing";
        int ok = st == ST_ERR_INPUT && strstr(e2.msg, want) && same_everywhere(c, st, e2.msg) &&
                 !exists(dir, "step_00000002");
        if (c->rank == 0) tu_check(ok, "shard_save_refuses_bad_coverage", "%s: %s", want, e2.msg);
        else if (!ok) fprintf(stderr, "rank %d: coverage %s: status %d: %s\n", c->rank, want, st, e2.msg);
        Err eb;
        comm_barrier(c, &eb); /* as above: the next save must not start before every rank looked */
        bad += !ok;
        free(w);
    }
    /* And then a clean save of step 2 works. */
    CkptMeta m2 = meta_for(2, c);
    Status st = ckpt_shard_save(c, &r.src, &m2, &op, NULL, &e);
    char latest[64];
    read_latest(dir, latest, sizeof latest);
    int ok = st == ST_OK && !strcmp(latest, "step_00000002\n");
    if (c->rank == 0) tu_check(ok, "shard_save_after_faults", "latest %.13s", latest);
    else if (!ok) fprintf(stderr, "rank %d: save after faults: status %d, latest %.13s: %s\n", c->rank, st, latest, e.msg);
    return bad + !ok || tu_exit();
}

/* "async DIR": -np 2, grid tp 2. */
static int worker_async(Comm *c, const Oracle *o, char **argv) {
    const char *dir = argv[0];
    Rank r;
    rank_init(&r, c, o, 1, 2, 1);
    CkptOptions op = opts_for(dir);
    CkptShardAsync *a;
    Err e = {0};
    if (ckpt_shard_async_init(&a, &r.src, NULL, &e) != ST_OK) return fprintf(stderr, "%s\n", e.msg), 1;
    int bad = 0;
    CkptMeta m1 = meta_for(1, c);
    Status st = ckpt_shard_async_save(a, c, &r.src, &m1, &op, NULL, &e);
    int invisible = !exists(dir, "step_00000001") && ckpt_shard_async_pending(a);
    for (int k = 0; k < 3; k++) /* the live state moves on; the checkpoint must hold the copy */
        for (size_t i = 0; i < r.pl.total; i++) r.b[k][i] = 7.0f;
    CkptSaveInfo info;
    Status st2 = ckpt_shard_async_wait(a, c, &info, &e);
    int ok = st == ST_OK && st2 == ST_OK && invisible && exists(dir, "step_00000001") && !ckpt_shard_async_pending(a);
    if (c->rank == 0) tu_check(ok, "shard_async_commit", "invisible before the commit %d, path %s: %s", invisible, info.path, e.msg);
    bad += !ok;
    /* A writer failure on rank 1 surfaces at the commit, on every rank. */
    CkptOptions fop = op;
    snprintf(fop.faults.ckpt_fail_stage, sizeof fop.faults.ckpt_fail_stage, "shard");
    fop.faults.ckpt_fail_only_rank = 1, fop.faults.ckpt_fail_rank = 1;
    CkptMeta m2 = meta_for(2, c);
    Err e2 = {0};
    st = ckpt_shard_async_save(a, c, &r.src, &m2, &fop, NULL, &e2);
    st2 = ckpt_shard_async_wait(a, c, NULL, &e2);
    char latest[64];
    read_latest(dir, latest, sizeof latest);
    ok = st == ST_OK && st2 == ST_ERR_RUNTIME && strstr(e2.msg, "rank00001.safetensors") &&
         same_everywhere(c, st2, e2.msg) && !exists(dir, "step_00000002") && !strcmp(latest, "step_00000001\n");
    if (c->rank == 0) tu_check(ok, "shard_async_failure_aborts", "%s", e2.msg);
    bad += !ok;
    ckpt_shard_async_free(a);
    return bad || tu_exit();
}

static int worker(int argc, char **argv, const Oracle *o) {
    Comm *c;
    Err e = {0};
    if (comm_init(&c, NULL, NULL, &e) != ST_OK) return fprintf(stderr, "comm_init: %s\n", e.msg), 1;
    int rc = 1;
    const char *mode = argv[0];
    int dp = 1, tp = 1, pp = 1;
    if (!strcmp(mode, "save")) dp = atoi(argv[3]), tp = atoi(argv[4]), pp = atoi(argv[5]);
    else if (!strcmp(mode, "faults")) dp = 2;
    else if (!strcmp(mode, "async")) tp = 2;
    if (comm_set_grid(c, dp, tp, pp, &e) != ST_OK) fprintf(stderr, "grid: %s\n", e.msg);
    else if (!strcmp(mode, "save") && argc >= 6) rc = worker_save(c, o, argv + 1);
    else if (!strcmp(mode, "faults")) rc = worker_faults(c, o, argv + 1);
    else if (!strcmp(mode, "async")) rc = worker_async(c, o, argv + 1);
    comm_finalize(c);
    return rc;
}

/* ---- driver ---- */

static const char *g_mpiexec, *g_self, *g_scaletrain;

/* Runs the worker under mpirun with np ranks; xenv (may be NULL) extra "-x K=V" options. Returns
 * the exit status (-1 if it did not exit). */
static int mpirun(int np, const char *xenv, const char *args) {
    char full[8400];
    snprintf(full, sizeof full, "%s --allow-run-as-root --oversubscribe -np %d -x OMP_NUM_THREADS=1 %s %s worker %s",
             g_mpiexec, np, xenv ? xenv : "", g_self, args);
    int s = system(full);
    return WIFEXITED(s) ? WEXITSTATUS(s) : -1;
}

static int run(const char *cmd) {
    int s = system(cmd);
    return WIFEXITED(s) ? WEXITSTATUS(s) : -1;
}

/* Flips one byte at offset (from the end if negative) of dir/name; returns its old value or -1. */
static int flip(const char *dir, const char *name, long off) {
    char p[8400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "r+b");
    if (!f) return -1;
    fseek(f, off, off < 0 ? SEEK_END : SEEK_SET);
    long at = ftell(f);
    int b = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(b ^ 0x5a, f);
    fclose(f);
    return b;
}

static void unflip(const char *dir, const char *name, long off, int b) {
    char p[8400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "r+b");
    if (!f) return;
    fseek(f, off, off < 0 ? SEEK_END : SEEK_SET);
    fputc(b, f);
    fclose(f);
}

/* Loads ckpt on every grid the model allows (tp dividing its KV heads: Llama's 2 leave out tp 4). */
static void part_loads(const char *what, const char *ckpt, const Oracle *o) {
    int bad = 0, n = 0;
    char msg[1200] = "";
    for (int g = 0; g < NGRIDS; g++) {
        if (o->full.cfg.n_kv_head % GRIDS[g].tp) continue;
        n++;
        bad += load_grid(ckpt, &GRIDS[g], o, 1, msg, sizeof msg) != 0;
    }
    tu_check(bad == 0 && n > 0, "shard_reshard_bit_exact", "%s on %d grids: %d grids failed %s", what, n, bad, msg);
}

static void part_corrupt(const char *root, const char *ckpt, const char *dir, const Oracle *o) {
    /* Every rank file of the 8-rank checkpoint, and its manifest. */
    static const char *const names[] = {"rank00000.safetensors", "rank00001.safetensors", "rank00002.safetensors",
                                        "rank00003.safetensors", "rank00004.safetensors", "rank00005.safetensors",
                                        "rank00006.safetensors", "rank00007.safetensors", "manifest.json"};
    int caught = 0, n = 0;
    char first[1100] = "";
    ModelConfig c = o->full.cfg;
    ParamLayout full;
    layout_init(&full, &c, 1);
    float *b = calloc(full.total, sizeof(float));
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!exists(ckpt, names[i])) continue;
        n++;
        long off = -5;
        int old = flip(ckpt, names[i], off);
        Err e1 = {0}, e2 = {0};
        Status s1 = ckpt_shard_load(ckpt, &full, b, NULL, NULL, NULL, NULL, &e1);
        Status s2 = ckpt_verify(ckpt, &e2);
        int ok = s1 == ST_ERR_INPUT && strstr(e1.msg, names[i]) && s2 == ST_ERR_INPUT && strstr(e2.msg, names[i]);
        caught += ok;
        if (!ok && !first[0]) snprintf(first, sizeof first, "%s: load %.400s / verify %.400s", names[i], e1.msg, e2.msg);
        unflip(ckpt, names[i], off, old);
    }
    tu_check(n == 9 && caught == n, "shard_byte_flip_detected", "%d of %d files (load and verify name the file) %s", caught,
             n, first);
    /* Resolve auto falls back over a corrupt newest checkpoint (dir holds steps 1 and 2). */
    char step2[4400], out[4200], note[2048];
    snprintf(step2, sizeof step2, "%s/step_00000002", dir);
    int old = flip(step2, "rank00001.safetensors", -5);
    Err e = {0};
    Status st = ckpt_resolve(dir, "auto", out, sizeof out, note, sizeof note, &e);
    tu_check(st == ST_OK && strstr(out, "step_00000001") && strstr(note, "rank00001.safetensors"),
             "shard_resolve_falls_back", "%s (%s)", out, note);
    unflip(step2, "rank00001.safetensors", -5, old);
    st = ckpt_resolve(dir, "auto", out, sizeof out, note, sizeof note, &e);
    tu_check(st == ST_OK && strstr(out, "step_00000002"), "shard_resolve_newest", "%s", out);
    /* Negative control: without verification the same flip goes through the load unnoticed. */
    old = flip(ckpt, "rank00003.safetensors", -5);
    Faults skip = {0};
    skip.ckpt_skip_verify = 1;
    Err e3 = {0};
    float *want = oracle_slice(o, &full, 0);
    float *bm = calloc(full.total, sizeof(float)), *bv = calloc(full.total, sizeof(float));
    float *wm = oracle_slice(o, &full, 1), *wv = oracle_slice(o, &full, 2);
    Status s3 = ckpt_shard_load(ckpt, &full, b, bm, bv, NULL, &skip, &e3);
    int differs = memcmp(b, want, full.total * sizeof(float)) || memcmp(bm, wm, full.total * sizeof(float)) ||
                  memcmp(bv, wv, full.total * sizeof(float));
    free(bm), free(bv), free(wm), free(wv);
    unflip(ckpt, "rank00003.safetensors", -5, old);
    tu_check(s3 == ST_OK && differs, "shard_control_skip_verify_lets_flip_through",
             "load %d, values differ %d (the checksum is what catches the flip)", s3, differs);
    free(want);
    free(b);
    layout_free(&full);
    (void)root;
}

static int same_output(const char *a, const char *b) {
    char *x = tu_slurp(a), *y = tu_slurp(b);
    int same = x && y && !strcmp(x, y) && strlen(x) > 0;
    free(x), free(y);
    return same;
}

/* The Llama part: GQA's K and V heads resharded across tp. Saves of the Llama (4 heads over 2 KV
 * heads) in one process (sharded), at tp 2 (-np 2) and at dp 2 x tp 2 x pp 2 (-np 8), each loaded on
 * every grid with tp dividing 2 against the oracle's slices; control: the tp 2 load of rank 0
 * against the slices with the two KV heads' rows of wk and wv swapped must differ (and equal the
 * unswapped ones). */
static void part_llama(const char *root) {
    ModelConfig lc = model_cfg(1);
    Oracle ol;
    oracle_init(&ol, &lc);
    char d1[4096], d2[4096], d8[4096], cmd[8400], c1[4300], c2[4300], c8[4300];
    snprintf(d1, sizeof d1, "%s/llama_one", root), snprintf(d2, sizeof d2, "%s/llama_np2", root);
    snprintf(d8, sizeof d8, "%s/llama_np8", root);
    Comm *c;
    Err e = {0};
    comm_init_local(&c, &e);
    Rank r;
    rank_init(&r, c, &ol, 1, 1, 1);
    CkptMeta m = meta_for(1, c);
    CkptOptions op = opts_for(d1);
    Status st = ckpt_shard_save(c, &r.src, &m, &op, NULL, &e);
    tu_check(st == ST_OK, "llama_shard_save_one_process", "%s", e.msg);
    comm_finalize(c);
    snprintf(cmd, sizeof cmd, "save %s 1 1 2 1 llama", d2);
    tu_check(mpirun(2, NULL, cmd) == 0, "llama_shard_save_np2_tp2", "mpirun -np 2 (round trip on tp 2)");
    snprintf(cmd, sizeof cmd, "save %s 1 2 2 2 llama", d8);
    tu_check(mpirun(8, NULL, cmd) == 0, "llama_shard_save_np8_dp2_tp2_pp2", "mpirun -np 8 --oversubscribe");
    snprintf(c1, sizeof c1, "%s/step_00000001", d1), snprintf(c2, sizeof c2, "%s/step_00000001", d2);
    snprintf(c8, sizeof c8, "%s/step_00000001", d8);
    part_loads("llama 1-process sharded", c1, &ol);
    part_loads("llama np2 tp2", c2, &ol);
    part_loads("llama np8 dp2 tp2 pp2", c8, &ol);
    /* Control: K/V heads' slices swapped between the tp ranks. */
    ParamLayout pl;
    grid_layout(&GRIDS[2], 0, &lc, &pl, NULL); /* tp 2, rank 0 */
    float *b = calloc(pl.total + 1, sizeof(float));
    int bad = 0;
    float *want = oracle_slice_ex(&ol, &pl, 0, 0, &bad), *swapped = oracle_slice_ex(&ol, &pl, 0, 1, &bad);
    Err e2 = {0};
    st = ckpt_load_any(c8, &pl, b, NULL, NULL, NULL, NULL, &e2);
    int equal = st == ST_OK && !memcmp(b, want, pl.total * sizeof(float));
    int caught = st == ST_OK && memcmp(b, swapped, pl.total * sizeof(float)) != 0;
    tu_check(equal && caught && !bad, "llama_control_swapped_kv_heads_caught",
             "tp 2 rank 0 load of the 8-rank checkpoint: %s the oracle's slice, %s the one with the KV heads of wk and "
             "wv swapped (%s)", equal ? "equals" : "DIFFERS FROM", caught ? "differs from" : "EQUALS", e2.msg);
    free(b), free(want), free(swapped);
    layout_free(&pl);
}

int main(int argc, char **argv) {
    ModelConfig cfg = model_cfg(argc > 2 && !strcmp(argv[argc - 1], "llama")); /* a worker of the Llama part */
    Oracle o;
    oracle_init(&o, &cfg);
    if (argc >= 3 && !strcmp(argv[1], "worker")) return worker(argc - 2, argv + 2, &o);
    if (argc < 3) {
        fprintf(stderr, "usage: test_ckpt_shard MPIEXEC SCALETRAIN\n");
        return 2;
    }
    g_mpiexec = argv[1], g_scaletrain = argv[2], g_self = argv[0];
    char root[] = "/tmp/test_ckpt_shard_XXXXXX";
    if (!mkdtemp(root)) return perror("mkdtemp"), 1;
    char d1[4096], ds[4096], d2[4096], d4[4096], d8[4096], df[4096], da[4096], cmd[16384];
    snprintf(d1, sizeof d1, "%s/one", root), snprintf(ds, sizeof ds, "%s/single", root);
    snprintf(d2, sizeof d2, "%s/np2", root), snprintf(d4, sizeof d4, "%s/np4", root);
    snprintf(d8, sizeof d8, "%s/np8", root), snprintf(df, sizeof df, "%s/faults", root);
    snprintf(da, sizeof da, "%s/async", root);

    /* Comparator control: one flipped bit must be seen. */
    {
        ParamLayout pl;
        grid_layout(&GRIDS[2], 1, &cfg, &pl, NULL);
        float *a = oracle_slice(&o, &pl, 0), *b = oracle_slice(&o, &pl, 0);
        ((unsigned char *)b)[pl.total * 2] ^= 1;
        tu_check(memcmp(a, b, pl.total * 4) != 0, "shard_control_comparator", "one flipped bit is seen");
        free(a), free(b);
        layout_free(&pl);
    }

    /* 1-process saves: the sharded format through a local Comm, and the single-process format. */
    {
        Comm *c;
        Err e = {0};
        comm_init_local(&c, &e);
        Rank r;
        rank_init(&r, c, &o, 1, 1, 1);
        CkptMeta m = meta_for(1, c);
        CkptOptions op = opts_for(d1);
        Status st = ckpt_shard_save(c, &r.src, &m, &op, NULL, &e);
        tu_check(st == ST_OK, "shard_save_one_process", "%s", e.msg);
        GptWeights w;
        memset(&w, 0, sizeof w);
        w.cfg = cfg, w.layout = o.full, w.params = o.buf[0];
        CkptOptState opt = {o.buf[1], o.buf[2], NULL};
        op = opts_for(ds);
        st = ckpt_save(&w, &opt, &m, &op, NULL, &e);
        tu_check(st == ST_OK, "single_save_one_process", "%s", e.msg);
        comm_finalize(c);
    }
    /* Saves under mpirun. */
    snprintf(cmd, sizeof cmd, "save %s 1,2 1 2 1", d2);
    tu_check(mpirun(2, NULL, cmd) == 0, "shard_save_np2_tp2", "mpirun -np 2 (steps 1, 2, round trip)");
    snprintf(cmd, sizeof cmd, "save %s 1 2 1 2", d4);
    tu_check(mpirun(4, NULL, cmd) == 0, "shard_save_np4_dp2_pp2", "mpirun -np 4");
    snprintf(cmd, sizeof cmd, "save %s 1 2 2 2", d8);
    tu_check(mpirun(8, NULL, cmd) == 0, "shard_save_np8_dp2_tp2_pp2", "mpirun -np 8 --oversubscribe");

    char c1[4300], cs[4300], c2[4300], c4[4300], c8[4300];
    snprintf(c1, sizeof c1, "%s/step_00000001", d1), snprintf(cs, sizeof cs, "%s/step_00000001", ds);
    snprintf(c2, sizeof c2, "%s/step_00000002", d2), snprintf(c4, sizeof c4, "%s/step_00000001", d4);
    snprintf(c8, sizeof c8, "%s/step_00000001", d8);
    part_loads("1-process sharded", c1, &o);
    part_loads("1-process single format", cs, &o);
    part_loads("np2 tp2", c2, &o);
    part_loads("np4 dp2 pp2", c4, &o);
    part_loads("np8 dp2 tp2 pp2", c8, &o);
    {
        Err e = {0};
        tu_check(ckpt_verify(c8, &e) == ST_OK, "shard_verify_clean", "%s", e.msg);
        CkptMeta m;
        Status st = ckpt_read_meta(c8, &m, &e);
        tu_check(st == ST_OK && m.step == 1 && m.dp == 2 && m.tp == 2 && m.pp == 2, "shard_read_meta",
                 "step %ld grid %d x %d x %d %s", m.step, m.dp, m.tp, m.pp, e.msg);
        ckpt_meta_free(&m);
    }
    /* Negative control: tp slices placed one rank off must break the comparison. */
    {
        char msg[1200] = "";
        g_faults.ckpt_wrong_slice = 1;
        int bad = load_grid(c2, &GRIDS[0], &o, 1, msg, sizeof msg) + load_grid(c8, &GRIDS[3], &o, 1, msg, sizeof msg);
        /* A stage without wte (pp 4, rank 1: block 1 only): no slice falls outside its tensor, so
         * only the bit-exact comparison can catch the misplaced rows and columns. */
        ParamLayout pl;
        grid_layout(&GRIDS[5], 1, &cfg, &pl, NULL);
        float *b = calloc(pl.total, sizeof(float)), *want = oracle_slice(&o, &pl, 0);
        Err e = {0};
        Status st = ckpt_load_any(c8, &pl, b, NULL, NULL, NULL, &g_faults, &e);
        int differs = memcmp(b, want, pl.total * sizeof(float)) != 0;
        g_faults.ckpt_wrong_slice = 0;
        free(b), free(want);
        layout_free(&pl);
        tu_check(bad > 0 && st == ST_OK && differs, "shard_control_wrong_slice_caught",
                 "%d grid ranks failed (%s); blocks-only stage: load %d, values differ %d", bad, msg, st, differs);
    }
    /* A model of another shape is refused, naming the field. */
    {
        ModelConfig other = cfg;
        other.n_layer = 2;
        Err e = {0};
        model_config_validate(&other, &e);
        ParamLayout pl;
        layout_init(&pl, &other, 1);
        float *b = calloc(pl.total, sizeof(float));
        Status st = ckpt_shard_load(c8, &pl, b, NULL, NULL, NULL, NULL, &e);
        tu_check(st == ST_ERR_INPUT && strstr(e.msg, "layers: checkpoint has 4, model has 2"), "shard_load_refuses_shape",
                 "%s", e.msg);
        free(b);
        layout_free(&pl);
    }
    part_corrupt(root, c8, d2, &o);

    /* Failures: every stage on one rank, then a rank that exits mid-write. */
    snprintf(cmd, sizeof cmd, "faults %s", df);
    tu_check(mpirun(2, NULL, cmd) == 0, "shard_faults_np2", "mpirun -np 2 (see the shard_fault_* lines)");
    {
        char latest[64];
        snprintf(cmd, sizeof cmd, "save %s 3 2 1 1 exit-rank=1", df); /* rank 1 _exits mid-write (Faults) */
        int rc = mpirun(2, NULL, cmd);
        read_latest(df, latest, sizeof latest);
        char s2[4300];
        snprintf(s2, sizeof s2, "%s/step_00000002", df);
        Err e = {0};
        int ok = rc != 0 && !strcmp(latest, "step_00000002\n") && !exists(df, "step_00000003") &&
                 ckpt_verify(s2, &e) == ST_OK;
        tu_check(ok, "shard_rank_exit_keeps_previous", "mpirun exit %d, latest %.13s, step 3 %s, step 2 verifies: %s",
                 rc, latest, exists(df, "step_00000003") ? "present" : "absent", e.msg);
    }
    snprintf(cmd, sizeof cmd, "async %s", da);
    tu_check(mpirun(2, NULL, cmd) == 0, "shard_async_np2", "mpirun -np 2 (see the shard_async_* lines)");
    {
        char ca[4300];
        snprintf(ca, sizeof ca, "%s/step_00000001", da);
        part_loads("async np2 tp2 (live buffers scribbled before the commit)", ca, &o);
    }

    part_llama(root);
    tu_check(!g_slice_bad, "oracle_slice_rules_match_every_layout", "every local tensor's shape is the one the test's "
             "slicing rules give (a mismatch is printed above)");

    /* Export and sample: the sharded checkpoint against the single-format one of the same weights. */
    snprintf(cmd, sizeof cmd, "%s export %s --format hf -o %s/exp_single > %s/exp.log 2>&1 && %s export %s --format hf -o "
             "%s/exp_shard >> %s/exp.log 2>&1", g_scaletrain, cs, root, root, g_scaletrain, c8, root, root);
    int rc = run(cmd);
    char a[4400], b[4400];
    snprintf(a, sizeof a, "%s/exp_single/model.safetensors", root);
    snprintf(b, sizeof b, "%s/exp_shard/model.safetensors", root);
    tu_check(rc == 0 && tu_same_file(a, b), "shard_export_equals_single", "export exit %d, model.safetensors identical %d",
             rc, tu_same_file(a, b));
    snprintf(cmd, sizeof cmd, "%s sample %s --tokens 8 --temperature 0 --prompt hi > %s/s1.txt 2>&1 && %s sample %s "
             "--tokens 8 --temperature 0 --prompt hi > %s/s2.txt 2>&1", g_scaletrain, cs, root, g_scaletrain, c8, root);
    rc = run(cmd);
    snprintf(a, sizeof a, "%s/s1.txt", root);
    snprintf(b, sizeof b, "%s/s2.txt", root);
    tu_check(rc == 0 && same_output(a, b), "shard_sample_equals_single", "sample exit %d", rc);

    if (tu_exit() == 0) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", root);
        run(cmd);
    } else {
        printf("left %s for inspection\n", root);
    }
    return tu_exit();
}
