/* train_ckpt.c — a run's checkpoints: finding and loading the one to resume from (any grid's, any
 * format), and saving (gathered on rank 0, or written by every rank; synchronous or asynchronous),
 * with the trainer's own state (health, batches, noise scale, loss scaler) in state.json's extra;
 * the final weights (--out). */
#include "train/train.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckpt/ckpt.h"
#include "ckpt/safetensors.h"
#include "ckpt/shard.h"
#include "core/fileio.h"
#include "core/mem.h"
#include "core/peak.h"
#include "core/progress.h"
#include "core/stats.h"
#include "core/stopsig.h"
#include "core/rng.h"
#include "core/timer.h"
#include "data/bpe.h"
#include "data/loader.h"
#include "model/backend.h"
#include "model/gpt.h"
#include "model/infer.h"
#include "model/layout.h"
#include "model/matmul.h"
#include "parallel/parallel.h"
#include "parallel/pp.h"
#include "parallel/schedule.h"
#include "plan/plan.h"
#include "train/events.h"
#include "train/train_internal.h"
#include "train/noise.h"

/* The seeds against the checkpoint's rng record (init_seed, data_seed: exact decimal strings in
 * every checkpoint): the config's numbers compare within a relative epsilon (cJSON_Compare), and a
 * seed above 2^53 was recorded rounded (now as a string), so another large seed used to resume
 * silently. A seed that matches exactly is copied into the saved config, so the representation
 * (an old rounded number, a new string) is not reported as a change; one that differs is refused
 * unless overridden. */
static Status resume_check_seeds(const TrainConfig *c, CkptMeta *meta, const cJSON *current, const char *const *ov,
                                 int nov, Err *err) {
    const struct { const char *field, *rng; uint64_t mine; } S[] = {{"seed", "init_seed", c->seed},
                                                                     {"data_seed", "data_seed", c->data_seed}};
    for (int i = 0; i < 2; i++) {
        uint64_t saved;
        if (!ckpt_meta_rng(meta, S[i].rng, &saved)) continue; /* none recorded: the config compares */
        int allowed = 0;
        for (int k = 0; k < nov; k++) allowed |= !strcmp(ov[k], S[i].field) || !strcmp(ov[k], "all");
        if (saved != S[i].mine && !allowed)
            return err_set(err, ST_ERR_INPUT, "config field %s (a trajectory field) changed: checkpoint has %llu, this "
                           "run has %llu; resuming would fork the run (allow it explicitly with --override %s)",
                           S[i].field, (unsigned long long)saved, (unsigned long long)S[i].mine, S[i].field);
        const cJSON *now = cJSON_GetObjectItemCaseSensitive(current, S[i].field);
        if (saved == S[i].mine && now && cJSON_GetObjectItemCaseSensitive(meta->config, S[i].field))
            cJSON_ReplaceItemInObjectCaseSensitive(meta->config, S[i].field, cJSON_Duplicate(now, 1));
    }
    return ST_OK;
}

/* A resume's note: on stdout with the progress, and when it says a newer checkpoint was skipped
 * (warn) on stderr under --quiet too, which silences progress, not what happened to the data. */
static void resume_note(const Run *r, const char *note, int warn) {
    if (r->comm->rank != 0) return;
    if (!r->cfg.quiet) printf("resume: %s\n", note);
    else if (warn) fprintf(stderr, "scaletrain train: resume: %s\n", note);
}

/* Checks the config recorded with checkpoint path against this run's (model fields equal,
 * trajectory fields equal unless overridden) and that it is before --steps; sets the step and batch
 * counters to its step. */
static Status resume_check(Run *r, const char *path, Err *err) {
    TrainConfig *c = &r->cfg;
    CkptMeta meta;
    memset(&meta, 0, sizeof meta);
    Status st = ckpt_read_meta(path, &meta, err);
    if (st != ST_OK) return st;
    char buf[512], report[2048] = "";
    snprintf(buf, sizeof buf, "%s", c->overrides);
    const char *ov[32];
    int nov = tr_split_list(buf, ov, 32);
    st = ckpt_check_override_names(meta.config, r->config, ov, nov, err);
    if (st == ST_OK) st = resume_check_seeds(c, &meta, r->config, ov, nov, err);
    if (st == ST_OK) st = ckpt_check_config(meta.config, r->config, ov, nov, report, sizeof report, err);
    /* the moments on disk are the recorded optimizer's: another one's would be read as its own */
    if (st == ST_OK && strcmp(meta.optimizer, optim_kind_name(c->optim.kind)))
        st = err_set(err, ST_ERR_INPUT, "optimizer.kind: expected this run's %s, found %s", optim_kind_name(c->optim.kind),
                     meta.optimizer);
    if (st != ST_OK) err_prefix(err, "--resume %s", path);
    else if (meta.step >= c->steps)
        st = err_set(err, ST_ERR_INPUT, "--steps %ld: the checkpoint %s is already at step %ld (extend --steps)", c->steps,
                     path, meta.step);
    if (st == ST_OK && report[0] && !c->quiet) printf("resume: %s\n", report);
    r->rs.step = r->rs.attempt = meta.step;
    ckpt_meta_free(&meta);
    return st;
}

/* Finds the checkpoint to continue from and checks the config against it, before allocation. The
 * candidates' data is not read here (ckpt_resolve_unread: state.json and the files' sizes): the
 * load reads and verifies it once (tr_resume_load), and falls back to an older checkpoint if it
 * fails. Nothing found under --resume auto is a fresh start, said on the console and in the start
 * record; nothing found at an explicit path is an error. */
static Status resume_find_here(Run *r, Err *err) {
    TrainConfig *c = &r->cfg;
    if (!c->resume[0]) return ST_OK;
    int is_auto = !strcmp(c->resume, "auto");
    if (is_auto && !c->ckpt_dir[0])
        return err_set(err, ST_ERR_INPUT, "--resume auto: expected --ckpt-dir to search, found none");
    r->rs.read0 = file_process_read_bytes();
    const char *where = is_auto ? c->ckpt_dir : c->resume;
    Status st = c->faults.resume_verify_first /* test-only: the old double read */
                    ? ckpt_resolve(where, "auto", r->rs.path, sizeof r->rs.path, r->rs.note, sizeof r->rs.note, err)
                    : ckpt_resolve_unread(where, "auto", LONG_MAX, r->rs.path, sizeof r->rs.path, r->rs.note,
                                          sizeof r->rs.note, err);
    if (st != ST_OK) { /* ckpt's error names the path, not the flag: "--resume PATH: ..." or "--resume auto: ..." */
        char why[sizeof err->msg];
        size_t wl = strlen(where);
        snprintf(why, sizeof why, "%s", err->msg);
        int named = !strncmp(why, where, wl) && !strncmp(why + wl, ": ", 2);
        return named ? err_set(err, st, "--resume %s", why) : err_set(err, st, "--resume %s: %s", c->resume, why);
    }
    /* an explicit path with nothing there is only the error: its note ("starting from scratch") was
     * printed before it, saying the opposite */
    if (!r->rs.path[0] && !is_auto)
        return err_set(err, ST_ERR_INPUT, "--resume %s: expected a checkpoint, found none", c->resume);
    if (r->rs.note[0]) resume_note(r, r->rs.note, r->rs.path[0] != '\0'); /* with a path: a newer one skipped */
    if (!r->rs.path[0]) { /* ckpt's note says so already; the start record gets one either way */
        if (!r->rs.note[0]) {
            snprintf(r->rs.note, sizeof r->rs.note, "no checkpoint in %s, starting from scratch", c->ckpt_dir);
            if (!c->quiet) printf("resume: %s\n", r->rs.note);
        }
        return ST_OK;
    }
    return resume_check(r, r->rs.path, err);
}

/* tr_resume_find on every rank, agreed: each rank looks in its own view of the directory (a
 * node-local disk, a copy), so a rank that finds nothing, or another step than the others, is
 * refused on every rank here, before the model is allocated, instead of one rank ending alone while
 * the others wait in their next collective (or start fresh beside a resumed one under --resume auto).
 * Copies of the same checkpoint on each node are fine: only the step must agree. */
Status tr_resume_find(Run *r, Err *err) {
    Status st = tr_agree_setup(r, resume_find_here(r, err), "resume", err);
    if (st != ST_OK || r->comm->world == 1 || !r->cfg.resume[0]) return st;
    int64_t step = r->rs.path[0] ? r->rs.step : -1, v[2] = {step, -step};
    Err ce;
    if (comm_allreduce_i64(r->comm, v, 2, COMM_MAX, &ce) != ST_OK) return *err = ce, ce.status;
    if (v[0] == -v[1]) return ST_OK;
    r->res->err_everywhere = 1; /* the same text on every rank: printed once */
    return err_set(err, ST_ERR_INPUT, "--resume %s: expected every rank to find the same checkpoint, found steps %lld "
                   "to %lld across the ranks (-1: none); every rank must see the same checkpoints (a shared "
                   "--ckpt-dir, or the same copy on each node)", r->cfg.resume, (long long)-v[1], (long long)v[0]);
}

/* Transient buffers of a layout (initialisation, checkpoints, final weights) are staging memory:
 * n buffers of this rank's layout, or with tp > 1 of the whole network's (r->full). mem_alloc
 * zeroes them. */
float *tr_run_staging(Run *r, const ParamLayout *pl, int n) {
    return mem_alloc(&r->mem, MEM_CKPT_STAGING, pl->total * sizeof(float) * (size_t)n);
}

void tr_run_staging_free(Run *r, const ParamLayout *pl, float *p, int n) {
    mem_free(&r->mem, MEM_CKPT_STAGING, p, pl->total * sizeof(float) * (size_t)n);
}

void tr_slices_from_full(Run *r, float *local, const float *full, int n) {
    for (int i = 0; i < n; i++)
        layout_tp_copy(&r->g.w.layout, local + i * r->g.w.layout.total, &r->full, (float *)full + i * r->full.total, 0,
                       1);
}

/* A progress bar for long checkpoint reads and writes: on a terminal, or for 256 MiB and more of
 * parameters in logs. NULL when none is wanted. */
static Progress *run_ckpt_bar(Run *r, Progress *bar, const char *what) {
    if (r->cfg.quiet || !(isatty(2) || r->g.w.layout.total * 4 >= ((size_t)256 << 20))) return NULL;
    progress_init(bar, what, "bytes", "MB/s", 1e-6);
    return bar;
}

/* The optimizer's state outside the layout (Shampoo's blocks) from checkpoint `path`, if it has any:
 * every rank reads the whole vector and keeps its own blocks. */
static Status run_load_extra(Run *r, const char *path, Err *err) {
    size_t n = par_extra_state_floats(r->par);
    if (!n) return ST_OK;
    float *buf = mem_alloc(&r->mem, MEM_CKPT_STAGING, n * sizeof(float));
    if (!buf) return err_set(err, ST_ERR_RUNTIME, "out of memory (optimizer state staging)");
    Status st = ckpt_read_extra(path, par_extra_state_name(r->par), buf, n, err);
    if (st == ST_OK) par_set_extra_state(r->par, buf);
    mem_free(&r->mem, MEM_CKPT_STAGING, buf, n * sizeof(float));
    return st;
}

/* Loads a checkpoint (written by any grid) into this rank's parameters and moments: in place when
 * the state is whole here, else through full-layout staging that par scatters. */
Status tr_run_load_ckpt(Run *r, const char *path, CkptMeta *meta, Err *err) {
    if (r->local) {
        Progress bar, *pb = run_ckpt_bar(r, &bar, "checkpoint load");
        CkptProgressFn fn = pb ? progress_cb : NULL;
        CkptOptState opt = {par_moment(r->par, 0), par_moment(r->par, 1), NULL};
        Status st = ckpt_load_progress(path, &r->g.w, &opt, meta, fn, pb, err);
        gpt_sync_lp(&r->g);
        return st == ST_OK ? run_load_extra(r, path, err) : st;
    }
    /* Any checkpoint (one process's or sharded, any grid) resliced into this rank's layout, then par
     * keeps its shards. */
    int nv = par_moment(r->par, 1) ? 1 : 0;
    const ParamLayout *pl = &r->g.w.layout;
    float *buf = tr_run_staging(r, pl, 2 + nv);
    if (!buf) return err_set(err, ST_ERR_RUNTIME, "out of memory (checkpoint staging)");
    size_t n = pl->total;
    Status st = ckpt_load_any(path, pl, buf, buf + n, nv ? buf + 2 * n : NULL, meta, &r->cfg.faults, err);
    if (st == ST_OK) par_set_full(r->par, buf, buf + n, nv ? buf + 2 * n : NULL);
    tr_run_staging_free(r, pl, buf, 2 + nv);
    return st == ST_OK ? run_load_extra(r, path, err) : st;
}

/* The noise scale's averages in state.json's "extra", so a resumed run smooths B_simple on from
 * where the checkpoint left it. The doubles are written as "%.17g" strings: cJSON prints numbers with
 * 15 digits whenever they read back within an epsilon, which is not the same double. */
static void add_exact(cJSON *o, const char *name, double v) {
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", v);
    cJSON_AddStringToObject(o, name, buf);
}

static int get_exact(const cJSON *o, const char *name, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, name);
    char *end = NULL;
    if (cJSON_IsString(x)) *v = strtod(x->valuestring, &end);
    return cJSON_IsString(x) && end != x->valuestring && *end == '\0';
}

static cJSON *noise_to_json(const NoiseScale *n) {
    cJSON *o = cJSON_CreateObject();
    add_exact(o, "g2_ema", n->g2_ema);
    add_exact(o, "trs_ema", n->trs_ema);
    cJSON_AddNumberToObject(o, "n", (double)n->n);
    return o;
}

static Status noise_from_json(NoiseScale *n, const cJSON *o, const char *path, Err *err) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "n");
    double g = 0, t = 0;
    if (!get_exact(o, "g2_ema", &g) || !get_exact(o, "trs_ema", &t) || !cJSON_IsNumber(k) || k->valuedouble < 0)
        return err_set(err, ST_ERR_INPUT, "%s/state.json: extra.noise_scale: expected g2_ema and trs_ema as decimal "
                       "strings and n >= 0, found another value", path);
    n->g2_ema = g, n->trs_ema = t, n->n = (long)k->valuedouble;
    return ST_OK;
}

/* Applies the checkpoint found by tr_resume_find: weights, moments, loader position, loss scaler,
 * health detectors, the noise scale's averages, and the batches consumed and skipped. */
/* Loads r->rs.path, verifying its data as it reads it. Every rank reads its own part, so the ranks
 * agree on the outcome (one small all-reduce); under --resume auto a checkpoint whose data fails
 * verification on any rank is refused and the newest older one that is whole is loaded instead (its
 * config checked again), as ckpt_resolve's fallback did before the data was read only once. */
static Status resume_load_verified(Run *r, CkptMeta *m, Err *err) {
    TrainConfig *c = &r->cfg;
    for (;;) {
        memset(m, 0, sizeof *m);
        Status st = tr_run_load_ckpt(r, r->rs.path, m, err);
        int64_t v[2] = {st == ST_ERR_INPUT, st != ST_OK && st != ST_ERR_INPUT};
        Err ce;
        if (comm_allreduce_i64(r->comm, v, 2, COMM_SUM, &ce) != ST_OK) {
            if (st == ST_OK) ckpt_meta_free(m);
            return *err = ce, ST_ERR_RUNTIME;
        }
        if (!v[0] && !v[1]) return ST_OK;
        if (st == ST_OK) {
            ckpt_meta_free(m);
            st = err_set(err, ST_ERR_INPUT, "%s: failed to load on %lld other rank(s) (their messages say why)",
                         r->rs.path, (long long)(v[0] + v[1]));
            r->res->err_everywhere = 1; /* rank 0 says it once; the failing ranks print their own */
        } else {
            r->res->err_everywhere = 0; /* this rank's own reason */
        }
        if (v[1] || strcmp(c->resume, "auto")) return v[1] && st == ST_ERR_INPUT ? ST_ERR_RUNTIME : st;
        char refused[4096], why[1024];
        snprintf(refused, sizeof refused, "%s", r->rs.path);
        snprintf(why, sizeof why, "%s", err->msg);
        Err e2 = {0};
        if (ckpt_resolve_unread(c->ckpt_dir, "auto", r->rs.step, r->rs.path, sizeof r->rs.path, NULL, 0, &e2) != ST_OK ||
            !r->rs.path[0])
            return err_set(err, ST_ERR_INPUT, "--resume auto: %s refused on load (%s) and no older checkpoint loads (%s)",
                           refused, why, e2.msg[0] ? e2.msg : "none left");
        snprintf(r->rs.note, sizeof r->rs.note, "%.700s refused on load (%.500s); falling back to %.700s", refused, why,
                 r->rs.path);
        resume_note(r, r->rs.note, 1);
        Status cs = resume_check(r, r->rs.path, err);
        if (cs != ST_OK) return cs;
    }
}

Status tr_resume_load(Run *r, Err *err) {
    TrainConfig *c = &r->cfg;
    if (!r->rs.path[0]) return ST_OK;
    CkptMeta m;
    Status st = resume_load_verified(r, &m, err);
    if (st != ST_OK) return st;
    unsigned long long rd = file_process_read_bytes();
    r->res->resume_read_bytes = rd > r->rs.read0 ? rd - r->rs.read0 : 0;
    loader_set_state(&r->train, m.loader);
    const cJSON *hj = m.extra ? cJSON_GetObjectItemCaseSensitive(m.extra, "health") : NULL;
    const cJSON *bj = m.extra ? cJSON_GetObjectItemCaseSensitive(m.extra, "batches") : NULL;
    const cJSON *sj = m.extra ? cJSON_GetObjectItemCaseSensitive(m.extra, "skipped_batches") : NULL;
    /* The batches consumed (at least the steps: a skipped batch is consumed without a step) and the
     * skipped ones (each at most that count). Taken as written until 2026-11-30: 1e300 was cast to a
     * long (undefined), -1 made the loader's batch counter run behind the step. */
    const double max_whole = 9007199254740992.0;
    if (bj) {
        double v = cJSON_IsNumber(bj) ? bj->valuedouble : NAN;
        if (!(v >= (double)r->rs.step && v <= max_whole && v == floor(v))) {
            char got[40] = "another value";
            if (cJSON_IsNumber(bj)) snprintf(got, sizeof got, "%.15g", v);
            ckpt_meta_free(&m); /* bj with it */
            return err_set(err, ST_ERR_INPUT, "%s/state.json: extra.batches: expected a whole number in [%ld (the step), "
                           "9007199254740992], found %s", r->rs.path, r->rs.step, got);
        }
        r->rs.attempt = (long)v;
    }
    for (const cJSON *x = sj ? (cJSON_IsArray(sj) ? sj->child : sj) : NULL; x; x = x->next) {
        double v = cJSON_IsNumber(x) && cJSON_IsArray(sj) ? x->valuedouble : NAN;
        if (!(v >= 0 && v <= (double)r->rs.attempt && v == floor(v))) {
            char got[40] = "another value";
            if (cJSON_IsArray(sj) && cJSON_IsNumber(x)) snprintf(got, sizeof got, "%.15g", x->valuedouble);
            ckpt_meta_free(&m); /* sj and x with it */
            return err_set(err, ST_ERR_INPUT, "%s/state.json: extra.skipped_batches: expected an array of whole numbers "
                           "in [0, %ld] (the batches consumed), found %s", r->rs.path, r->rs.attempt, got);
        }
    }
    double sv;
    if (c->fp16 && ckpt_meta_scaler(&m, "scale", &sv)) {
        r->scaler.scale = (float)sv;
        if (ckpt_meta_scaler(&m, "good_steps", &sv)) r->scaler.good = (long)sv;
        if (ckpt_meta_scaler(&m, "skips", &sv)) r->scaler.skips = (long)sv;
        /* --loss-scale changed under --override loss_scale (resume_check refuses it otherwise): the
         * given scale replaces the checkpoint's from here on, as an override must do something */
        const cJSON *ls = m.config ? cJSON_GetObjectItemCaseSensitive(m.config, "loss_scale") : NULL;
        float was = cJSON_IsNumber(ls) ? (float)ls->valuedouble : train_default_config().loss_scale;
        if (was != c->loss_scale) r->scaler.scale = c->loss_scale, r->scaler.good = 0;
    }
    if (hj && (st = health_state_from_json(&r->health, hj, c->health.window, err)) != ST_OK)
        err_prefix(err, "%s/state.json: health", r->rs.path);
    const cJSON *nj = m.extra ? cJSON_GetObjectItemCaseSensitive(m.extra, "noise_scale") : NULL;
    if (st == ST_OK && nj && r->ns.on) st = noise_from_json(&r->ns.avg, nj, r->rs.path, err);
    for (const cJSON *x = sj ? sj->child : NULL; x && r->rs.nskipped < SKIP_RECORD_MAX; x = x->next)
        r->rs.skipped[r->rs.nskipped++] = (long)x->valuedouble;
    ckpt_meta_free(&m);
    if (st == ST_OK) stopsig_set_last_checkpoint(r->rs.path);
    if (st == ST_OK && !c->quiet) printf("resume: continuing from %s (step %ld)\n", r->rs.path, r->rs.step);
    return st;
}

/* Gathers the full parameters (and moments when opt_too) into staging; rank 0 writes. The others
 * learn rank 0's outcome, so a failed write ends the run everywhere instead of a hang. */
static Status run_save_gathered(Run *r, const CkptMeta *meta, const CkptOptions *o, CkptSaveInfo *info,
                                const char *out_dir, Err *err) {
    int nv = par_moment(r->par, 1) ? 1 : 0, nb = out_dir ? 1 : 2 + nv;
    float *buf = tr_run_staging(r, &r->g.w.layout, nb), *fbuf = r->sliced ? tr_run_staging(r, &r->full, nb) : NULL;
    if (!buf || (r->sliced && !fbuf)) {
        tr_run_staging_free(r, &r->g.w.layout, buf, nb);
        return err_set(err, ST_ERR_RUNTIME, "out of memory (checkpoint staging)");
    }
    size_t n = r->g.w.layout.total;
    Status st = par_get_full(r->par, buf, out_dir ? NULL : buf + n, out_dir || !nv ? NULL : buf + 2 * n, err);
    float *wr = buf;
    if (st == ST_OK && r->sliced) { /* full tensors on world rank 0 (parallel/tp.c) */
        st = par_full_tensors(r->par, &r->full, buf, fbuf, nb, r->step, err);
        wr = fbuf, n = r->full.total;
    }
    int64_t fail = 0;
    if (st == ST_OK && r->comm->rank == 0) {
        GptWeights view = r->g.w;
        if (r->sliced) view.layout = r->full;
        view.params = wr;
        CkptOptState opt = {out_dir ? NULL : wr + n, out_dir || !nv ? NULL : wr + 2 * n, NULL};
        if (!out_dir) opt.extra = r->ck.xstate, opt.extra_n = r->ck.xstate_n, opt.extra_name = par_extra_state_name(r->par);
        st = out_dir ? st_save_hf(&view, out_dir, r->cfg.tokenizer, err) : ckpt_save(&view, &opt, meta, o, info, err);
        fail = st != ST_OK;
    }
    tr_run_staging_free(r, &r->g.w.layout, buf, nb);
    tr_run_staging_free(r, &r->full, fbuf, nb);
    Err e2;
    Status st2 = comm_allreduce_i64(r->comm, &fail, 1, COMM_MAX, &e2);
    if (st != ST_OK) return st;
    if (st2 != ST_OK) return *err = e2, st2;
    if (fail) return err_set(err, ST_ERR_RUNTIME, "%s: rank 0 could not write it (its message says why)",
                             out_dir ? out_dir : "checkpoint");
    return ST_OK;
}

/* Young/Daly needs the full write time of a checkpoint: a synchronous save's, or the background
 * write's, learnt when the next save or the end of the run waits for it (never by waiting early). */
void tr_note_write_time(Run *r, const CkptSaveInfo *info) {
    if (!r->ck.first_ms && info->path[0]) r->ck.first_ms = info->ms_write + info->ms_prune;
}

/* A checkpoint written by every rank (ckpt/shard.h): each rank's tensors of its own layout (a stage,
 * a tp slice), split between the ranks of its dp group; the ZeRO shards of the group are gathered
 * into staging of that layout first (none at ZeRO 0, where every rank holds its layout whole).
 * Collective over the world; every rank returns the same status. */
static Status run_save_sharded(Run *r, const CkptMeta *meta, const CkptOptions *o, CkptSaveInfo *info, Err *err) {
    const ParamLayout *pl = &r->g.w.layout;
    /* A device's state reaches the host only through par_get_full's to_host: staged at ZeRO 0 too. */
    int nv = par_moment(r->par, 1) ? 1 : 0, staged = r->cfg.zero > 0 || !r->g.be->host_addressable;
    size_t n = pl->total;
    float *buf = staged ? tr_run_staging(r, pl, 2 + nv) : NULL;
    Status st = buf || !staged ? ST_OK : err_set(err, ST_ERR_RUNTIME, "out of memory (checkpoint staging)");
    /* A rank that cannot stage still takes part in the collectives: the save then fails everywhere. */
    int64_t bad = st != ST_OK;
    Err e2;
    if (comm_allreduce_i64(r->comm, &bad, 1, COMM_MAX, &e2) != ST_OK || bad) {
        if (st == ST_OK) st = err_set(err, ST_ERR_RUNTIME, "checkpoint: another rank could not stage its state");
    } else if (staged) {
        st = par_get_full(r->par, buf, buf + n, nv ? buf + 2 * n : NULL, err);
    }
    if (st == ST_OK) {
        CkptShardSrc src = {pl, staged ? buf : r->g.w.params, staged ? buf + n : par_moment(r->par, 0),
                            nv ? (staged ? buf + 2 * n : par_moment(r->par, 1)) : NULL, r->ck.write};
        src.extra = r->ck.xstate, src.extra_n = r->ck.xstate_n, src.extra_name = par_extra_state_name(r->par);
        if (r->ck.sasync) { /* commits the previous save (collective), then copies and writes behind training */
            CkptSaveInfo prev;
            memset(&prev, 0, sizeof prev);
            st = ckpt_shard_async_save(r->ck.sasync, r->comm, &src, meta, o, &prev, err);
            tr_note_write_time(r, &prev);
        } else {
            st = ckpt_shard_save(r->comm, &src, meta, o, info, err);
        }
    }
    if (staged) tr_run_staging_free(r, pl, buf, 2 + nv);
    return st;
}

/* The final weights (model.safetensors + config.json in out_dir). */
Status tr_save_weights(Run *r, const char *out_dir, Err *err) {
    if (r->local) return st_save_hf(&r->g.w, out_dir, r->cfg.tokenizer, err);
    return run_save_gathered(r, NULL, NULL, NULL, out_dir, err);
}

/* Writes a checkpoint of the state after `step` completed steps; *ms is its cost to the step. */
Status tr_save_checkpoint(Run *r, long step, double *ms, CkptSaveInfo *info, Err *err) {
    const TrainConfig *c = &r->cfg;
    double t0 = timer_ms();
    long attempt = r->attempt;
    CkptMeta meta;
    memset(&meta, 0, sizeof meta);
    meta.step = step;
    meta.tokens_seen = (uint64_t)attempt * (uint64_t)r->acct.batch_tokens;
    meta.sched_step = step;
    meta.loader = loader_get_state(&r->train);
    snprintf(meta.optimizer, sizeof meta.optimizer, "%s", optim_kind_name(c->optim.kind));
    meta.optim_step = step;
    meta.dp = r->dp, meta.tp = r->tp, meta.pp = r->pp, meta.zero = c->zero;
    ckpt_meta_set_rng(&meta, "init_seed", c->seed);
    ckpt_meta_set_rng(&meta, "data_seed", c->data_seed);
    ckpt_meta_set_rng(&meta, "dropout_seed", r->g.s.dropout_seed);
    ckpt_meta_set_rng(&meta, "dropout_counter", (uint64_t)attempt * c->grad_accum * r->dp);
    meta.config = r->config;
    /* Health detectors, the batch counter and the skipped batches travel in "extra". */
    cJSON *extra = cJSON_CreateObject();
    cJSON_AddItemToObject(extra, "health", health_state_to_json(&r->health));
    if (r->ns.on) cJSON_AddItemToObject(extra, "noise_scale", noise_to_json(&r->ns.avg));
    cJSON_AddNumberToObject(extra, "batches", (double)attempt);
    cJSON *sk = cJSON_AddArrayToObject(extra, "skipped_batches");
    for (int i = 0; i < r->rs.nskipped; i++) cJSON_AddItemToArray(sk, cJSON_CreateNumber((double)r->rs.skipped[i]));
    meta.extra = extra;
    if (c->fp16) {
        ckpt_meta_set_scaler(&meta, "scale", r->scaler.scale);
        ckpt_meta_set_scaler(&meta, "good_steps", (double)r->scaler.good);
        ckpt_meta_set_scaler(&meta, "skips", (double)r->scaler.skips);
    }
    CkptOptState opt = {par_moment(r->par, 0), par_moment(r->par, 1), NULL};
    /* Shampoo's block state, gathered from its owners (collective: every rank saves). */
    r->ck.xstate_n = par_extra_state_floats(r->par);
    if (r->ck.xstate_n) {
        Status xs = (r->ck.xstate = mem_alloc(&r->mem, MEM_CKPT_STAGING, r->ck.xstate_n * sizeof(float)))
                        ? ST_OK : err_set(err, ST_ERR_RUNTIME, "out of memory (optimizer state staging)");
        int64_t bad = xs != ST_OK;
        Err e2;
        if (comm_allreduce_i64(r->comm, &bad, 1, COMM_MAX, &e2) != ST_OK || bad) {
            if (xs == ST_OK) err_set(err, ST_ERR_RUNTIME, "checkpoint: another rank could not stage the optimizer state");
            mem_free(&r->mem, MEM_CKPT_STAGING, r->ck.xstate, r->ck.xstate_n * sizeof(float));
            r->ck.xstate = NULL;
            cJSON_Delete(extra);
            return ST_ERR_RUNTIME;
        }
        if ((xs = par_get_extra_state(r->par, r->ck.xstate, err)) != ST_OK) {
            mem_free(&r->mem, MEM_CKPT_STAGING, r->ck.xstate, r->ck.xstate_n * sizeof(float));
            r->ck.xstate = NULL;
            cJSON_Delete(extra);
            return xs;
        }
        opt.extra = r->ck.xstate, opt.extra_n = r->ck.xstate_n, opt.extra_name = par_extra_state_name(r->par);
    }
    CkptOptions o = ckpt_default_options();
    o.dir = c->ckpt_dir, o.keep_last = c->keep_last, o.keep_every = c->keep_every, o.tokenizer = c->tokenizer;
    o.faults = c->faults;
    /* Synchronous saves show progress; an asynchronous one runs behind training. */
    Progress bar, *pb = r->ck.async || r->ck.sasync || r->world > 1 ? NULL : run_ckpt_bar(r, &bar, "checkpoint");
    if (pb) o.progress = progress_cb, o.progress_ctx = pb;
    Status st;
    memset(info, 0, sizeof *info);
    /* what a second stop signal's line says (stopsig): the write under way, the last one done */
    stopsig_set_activity("a checkpoint write");
    if (r->ck.async) {
        /* The previous background write must be complete (and its errors seen) first. */
        CkptSaveInfo prev;
        memset(&prev, 0, sizeof prev);
        if ((st = ckpt_async_wait(r->ck.async, &prev, err)) == ST_OK) {
            if (prev.path[0]) stopsig_set_last_checkpoint(prev.path);
            tr_note_write_time(r, &prev);
            st = ckpt_async_save(r->ck.async, &r->g.w, &opt, &meta, &o, err);
        }
    } else if (r->local) {
        st = ckpt_save(&r->g.w, &opt, &meta, &o, info, err);
    } else if (r->world > 1) { /* every rank writes its own part */
        st = run_save_sharded(r, &meta, &o, info, err);
    } else {
        st = run_save_gathered(r, &meta, &o, info, NULL, err);
    }
    stopsig_set_activity(NULL);
    if (st == ST_OK && info->path[0]) stopsig_set_last_checkpoint(info->path);
    if (r->ck.xstate) mem_free(&r->mem, MEM_CKPT_STAGING, r->ck.xstate, r->ck.xstate_n * sizeof(float));
    r->ck.xstate = NULL, r->ck.xstate_n = 0;
    cJSON_Delete(extra);
    *ms = timer_ms() - t0;
    return st;
}

/* ---- outputs that would overwrite inputs (tr_check_outputs) ---- */

/* 1 when a and b name the same existing file or folder. */
static int same_node(const char *a, const char *b) {
    struct stat x, y;
    return a[0] && b[0] && stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* The input (a file, or a folder's files one level down) that `out` is, or NULL; its path in buf. */
static const char *input_hit(const char *out, const char *in, char *buf, size_t cap) {
    struct stat sb;
    if (!in[0] || stat(in, &sb) != 0) return NULL;
    if (!S_ISDIR(sb.st_mode)) return same_node(out, in) ? snprintf(buf, cap, "%s", in), buf : NULL;
    DIR *d = opendir(in);
    const struct dirent *e;
    const char *hit = NULL;
    while (d && !hit && (e = readdir(d)))
        if (e->d_name[0] != '.' && snprintf(buf, cap, "%s/%s", in, e->d_name) < (int)cap && same_node(out, buf)) hit = buf;
    if (d) closedir(d);
    return hit;
}

static const char *shard_hit(const char *out, const Loader *l) {
    for (int i = 0; l && i < l->nsets; i++)
        for (int j = 0; j < l->sets[i].nshards; j++)
            if (same_node(out, l->sets[i].shards[j].path)) return l->sets[i].shards[j].path;
    return NULL;
}

/* The folder holding path (its trailing slashes dropped; "." for a bare name) into buf; the last
 * component's start in *base (when not NULL). */
static void dir_of(const char *path, char *buf, size_t cap, const char **base) {
    snprintf(buf, cap, "%s", path);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/') buf[--n] = '\0';
    char *slash = strrchr(buf, '/');
    if (base) *base = slash ? path + (slash + 1 - buf) : path;
    if (slash) *slash = '\0';
    else snprintf(buf, cap, ".");
}

/* tr_claim_outputs' refusals: what --log and --out would overwrite. */
static Status check_outputs(const TrainConfig *c, const Loader *train, const Loader *val, const char *resume_dir,
                            Err *err) {
    char buf[2200];
    const char *hit;
    if (c->log_path[0]) {
        if ((hit = shard_hit(c->log_path, train)))
            return err_set(err, ST_ERR_INPUT, "--log %s: expected a file that is not one of the run's inputs, found the "
                           "training shard %s (it would be overwritten)", c->log_path, hit);
        if ((hit = shard_hit(c->log_path, val)))
            return err_set(err, ST_ERR_INPUT, "--log %s: expected a file that is not one of the run's inputs, found the "
                           "validation shard %s (it would be overwritten)", c->log_path, hit);
        if ((hit = input_hit(c->log_path, c->init_from, buf, sizeof buf)))
            return err_set(err, ST_ERR_INPUT, "--log %s: expected a file that is not one of the run's inputs, found %s of "
                           "--init-from %s (it would be overwritten)", c->log_path, hit, c->init_from);
        if ((hit = input_hit(c->log_path, resume_dir, buf, sizeof buf)))
            return err_set(err, ST_ERR_INPUT, "--log %s: expected a file outside the checkpoint resumed, found its %s (it "
                           "would be overwritten)", c->log_path, hit);
    }
    if (c->out_dir[0]) {
        struct stat sb;
        char from[1100], parent[1100];
        const char *base;
        /* --init-from names a folder, or a weights file in one */
        if (c->init_from[0] && stat(c->init_from, &sb) == 0 && !S_ISDIR(sb.st_mode)) dir_of(c->init_from, from, sizeof from, NULL);
        else snprintf(from, sizeof from, "%s", c->init_from);
        if (same_node(c->out_dir, from))
            return err_set(err, ST_ERR_INPUT, "--out %s: expected a folder other than the weights it starts from, found "
                           "--init-from %s's (they would be overwritten)", c->out_dir, c->init_from);
        if (same_node(c->out_dir, resume_dir))
            return err_set(err, ST_ERR_INPUT, "--out %s: expected a folder other than the checkpoint it resumes, found "
                           "that checkpoint (it would be overwritten and fail its checksums)", c->out_dir);
        /* a step_ folder of --ckpt-dir: a checkpoint a later --resume auto would take, overwritten */
        dir_of(c->out_dir, parent, sizeof parent, &base);
        if (!strncmp(base, "step_", 5) && c->ckpt_dir[0] && same_node(parent, c->ckpt_dir))
            return err_set(err, ST_ERR_INPUT, "--out %s: expected a folder outside --ckpt-dir %s's checkpoints, found one of "
                           "its step_ folders", c->out_dir, c->ckpt_dir);
        /* any other checkpoint (a state.json there): the files --out writes replaced its own, and it
         * failed its checksums (found for LoRA and for the full trainer, 2026-11-29) */
        snprintf(buf, sizeof buf, "%s/state.json", c->out_dir);
        if (access(buf, F_OK) == 0)
            return err_set(err, ST_ERR_INPUT, "--out %s: expected a folder for the %s of its own, found a checkpoint (%s)",
                           c->out_dir, c->lora.rank > 0 ? "adapter (adapter_model.safetensors, adapter_config.json)"
                                                        : "weights (model.safetensors, config.json)", buf);
    }
    return ST_OK;
}

cJSON *tr_data_files_json(const Loader *l) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < l->nsets; i++) {
        cJSON *o = cJSON_CreateObject(), *f = o ? cJSON_AddArrayToObject(o, "files") : NULL;
        if (!f) return cJSON_Delete(o), cJSON_Delete(a), NULL;
        cJSON_AddNumberToObject(o, "weight", l->sets[i].weight);
        for (int j = 0; j < l->sets[i].nshards; j++) {
            const Shard *sh = &l->sets[i].shards[j];
            const char *slash = strrchr(sh->path, '/');
            struct stat sb;
            cJSON *e = cJSON_CreateArray();
            cJSON_AddItemToArray(e, cJSON_CreateString(slash ? slash + 1 : sh->path));
            cJSON_AddItemToArray(e, cJSON_CreateNumber(stat(sh->path, &sb) == 0 ? (double)sb.st_size : -1.0));
            char fp[17];
            snprintf(fp, sizeof fp, "%016llx", (unsigned long long)shard_fingerprint(sh));
            cJSON_AddItemToArray(e, cJSON_CreateString(fp));
            cJSON_AddItemToArray(f, e);
        }
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

/* --ckpt-dir's lock for this process (creating the folder): flock on DIR/.lock, which then holds its
 * pid; the descriptor stays open until the process exits. A folder another run holds is refused
 * (ST_ERR_INPUT naming its pid): two runs writing one --ckpt-dir delete each other's temporaries and
 * interleave their checkpoints. *fd = -1 when dir is "". */
static Status lock_ckpt_dir(const char *dir, int *fd, Err *err) {
    *fd = -1;
    if (!dir[0]) return ST_OK;
    char who[32];
    int got = file_lock_dir(dir, ".lock", fd, who, sizeof who, err);
    if (got < 0) return err_prefix(err, "--ckpt-dir");
    if (got == 0)
        return err_set(err, ST_ERR_INPUT, "--ckpt-dir %s: expected a folder no other run is writing, found it in use by "
                       "process %s (%s/.lock held)", dir, who, dir);
    return ST_OK;
}

/* A run given no --resume writes its step_ folders and `latest` into --ckpt-dir from step 0: where
 * another run's checkpoints are, it replaced them one save at a time and retention deleted the rest,
 * without a word (a user who forgot --resume auto lost the run). Refused, naming what is there
 * (`latest` or a step_ folder), unless --resume was given (auto over a folder with nothing valid
 * starts afresh, as documented). */
static Status check_fresh_ckpt_dir(const TrainConfig *c, Err *err) {
    char found[300];
    if (!c->ckpt_dir[0] || c->resume[0] || !ckpt_dir_holds_checkpoints(c->ckpt_dir, found, sizeof found)) return ST_OK;
    return err_set(err, ST_ERR_INPUT, "--ckpt-dir %s: expected a folder without checkpoints for a run that does not "
                   "resume, found %s/%s; continue that run with --resume auto, or give this one another --ckpt-dir",
                   c->ckpt_dir, c->ckpt_dir, found);
}

Status tr_claim_outputs(Comm *comm, const TrainConfig *c, const Loader *train, const Loader *val, const char *resume_dir,
                        int *lock, int *err_everywhere, Err *err) {
    Status st = check_outputs(c, train, c->val_data[0] ? val : NULL, resume_dir ? resume_dir : "", err);
    /* rank 0 holds --ckpt-dir for the job (the other ranks write their parts under it) */
    if (st == ST_OK && comm->rank == 0) st = lock_ckpt_dir(c->ckpt_dir, lock, err);
    if (st == ST_OK && comm->rank == 0) st = check_fresh_ckpt_dir(c, err);
    return train_agree(comm, st, "--ckpt-dir", err, err_everywhere);
}
