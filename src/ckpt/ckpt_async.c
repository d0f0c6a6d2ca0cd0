/* ckpt_async.c — asynchronous checkpoint save: copy the state into staging buffers (memory
 * category MEM_CKPT_STAGING), then write it from a background pthread while training goes on.
 *
 * One write is in flight at a time: the next save, ckpt_async_wait and ckpt_async_free wait for
 * it. The worker touches only the staging copies and its own copy of the layout and meta.
 *
 * The staging buffers are allocated and every page of them touched in ckpt_async_init, before
 * training: the first touch of fresh anonymous memory costs a page fault per 4 KiB, which on
 * gpt2-124m (1.48 GB of state) made the first save block its step for 5.4 s against 73 ms for
 * the later ones (issue 12). Every save thus blocks only for the copy. */
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_internal.h"
#include "core/timer.h"

struct CkptAsync {
    MemStats *mem;
    ParamLayout pl;                    /* private copy: the worker must not share the trainer's */
    size_t bytes;                      /* bytes of one flat buffer */
    float *params, *m, *v, *master;    /* staging (MEM_CKPT_STAGING), touched at init; NULL if unused */
    int want_m, want_v, want_master;   /* which optimizer buffers the run has */
    pthread_t thread;
    int started;                       /* a thread was created and not yet joined */
    atomic_int finished;               /* the worker is done */
    CkptMeta meta;                     /* deep copy (config owned) */
    CkptOptions opts;
    char dir[4096], tokenizer[256];
    Status status;                     /* result of the last write */
    Err err;
    CkptSaveInfo info;
    double ms_copy;
    CkptCopyOut copy; /* NULL: memcpy (ckpt_async_set_copy) */
    void *copy_ctx;
};

void ckpt_async_set_copy(CkptAsync *a, CkptCopyOut fn, void *ctx) { a->copy = fn, a->copy_ctx = ctx; }

/* Writes one float per 4 KiB page, so the kernel maps every page now and not during a copy
 * (mem_alloc zero-fills, but that is its business: this does not rely on it). */
static void touch_pages(float *p, size_t n) {
    volatile float *q = p;
    for (size_t i = 0; i < n; i += 4096 / sizeof(float)) q[i] = 0.0f;
}

Status ckpt_async_init(CkptAsync **out, const GptWeights *w, const CkptOptState *opt, MemStats *mem, Err *err) {
    *out = NULL;
    CkptAsync *a = calloc(1, sizeof *a);
    if (!a || layout_init(&a->pl, &w->cfg, w->layout.shard_multiple) != 0) {
        free(a);
        return err_set(err, ST_ERR_RUNTIME, "out of memory creating the asynchronous checkpoint saver");
    }
    ST_CHECK(a->pl.total == w->layout.total);
    a->mem = mem;
    a->bytes = w->layout.total * sizeof(float);
    a->want_m = opt && opt->m, a->want_v = opt && opt->v, a->want_master = opt && opt->master;
    float **bufs[4] = {&a->params, &a->m, &a->v, &a->master};
    int want[4] = {1, a->want_m, a->want_v, a->want_master};
    for (int i = 0; i < 4; i++) {
        if (!want[i]) continue;
        if (!(*bufs[i] = mem_alloc(a->mem, MEM_CKPT_STAGING, a->bytes))) {
            size_t bytes = a->bytes;
            ckpt_async_free(a);
            return err_set(err, ST_ERR_RUNTIME, "out of memory allocating %zu bytes of checkpoint staging", bytes);
        }
        touch_pages(*bufs[i], w->layout.total);
    }
    *out = a;
    return ST_OK;
}

static void *worker(void *arg) {
    CkptAsync *a = arg;
    CkptSnap s = {&a->pl, a->params, a->want_m ? a->m : NULL, a->want_v ? a->v : NULL,
                  a->want_master ? a->master : NULL};
    a->status = ckpt_save_snap(&s, &a->meta, &a->opts, &a->info, &a->err);
    a->info.ms_copy = a->ms_copy;
    atomic_store(&a->finished, 1);
    return NULL;
}

/* Joins the worker if one was started; returns its status. */
static Status join(CkptAsync *a, CkptSaveInfo *info, Err *err) {
    if (info) memset(info, 0, sizeof *info);
    if (!a->started) return ST_OK;
    pthread_join(a->thread, NULL);
    a->started = 0;
    ckpt_meta_free(&a->meta);
    if (info) *info = a->info;
    if (a->status != ST_OK && err) *err = a->err;
    return a->status;
}

/* memcpy of n floats split over the OpenMP threads (staging copies are memory-bound). */
static void copy_par(float *dst, const float *src, size_t n) {
    const size_t chunk = 1 << 18;
    long nchunks = (long)((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
    for (long c = 0; c < nchunks; c++) {
        size_t b = (size_t)c * chunk, e = b + chunk < n ? b + chunk : n;
        memcpy(dst + b, src + b, (e - b) * sizeof(float));
    }
}

Status ckpt_async_save(CkptAsync *a, const GptWeights *w, const CkptOptState *opt, const CkptMeta *meta,
                       const CkptOptions *o, Err *err) {
    Status st = join(a, NULL, err);
    if (st != ST_OK) return st;
    if (!o || !o->dir || !o->dir[0]) return err_set(err, ST_ERR_INPUT, "--ckpt-dir: expected a directory, found none");
    if (opt && opt->extra)
        return err_set(err, ST_ERR_INPUT, "--ckpt-async: expected an optimizer without extra state, found %s",
                       opt->extra_name ? opt->extra_name : "some");
    ST_CHECK(w->layout.total == a->pl.total);
    double t0 = timer_ms();
    float **bufs[4] = {&a->params, &a->m, &a->v, &a->master};
    const float *src[4] = {w->params, opt ? opt->m : NULL, opt ? opt->v : NULL, opt ? opt->master : NULL};
    int want[4] = {1, a->want_m, a->want_v, a->want_master};
    for (int i = 0; i < 4; i++) {
        if (!want[i]) continue;
        if (!src[i]) return err_set(err, ST_ERR_INPUT, "asynchronous checkpoint: an optimizer buffer given at init is missing");
        if (!a->copy) copy_par(*bufs[i], src[i], w->layout.total);
        else if (a->copy(a->copy_ctx, *bufs[i], src[i], w->layout.total, err)) return ST_ERR_RUNTIME;
    }
    if (ckpt_meta_copy(&a->meta, meta) != 0) return err_set(err, ST_ERR_RUNTIME, "out of memory copying checkpoint meta");
    a->opts = *o;
    snprintf(a->dir, sizeof a->dir, "%s", o->dir);
    snprintf(a->tokenizer, sizeof a->tokenizer, "%s", o->tokenizer ? o->tokenizer : "");
    a->opts.dir = a->dir, a->opts.tokenizer = a->tokenizer;
    a->ms_copy = timer_ms() - t0;
    atomic_store(&a->finished, 0);
    if (pthread_create(&a->thread, NULL, worker, a) != 0) {
        ckpt_meta_free(&a->meta);
        return err_set(err, ST_ERR_RUNTIME, "cannot start the checkpoint writer thread");
    }
    a->started = 1;
    /* Test-only: the negative control of test_ckpt's blocking check (a save that writes in the
     * foreground must be caught). */
    if (o->faults.ckpt_async_sync) return join(a, NULL, err);
    return ST_OK;
}

int ckpt_async_busy(CkptAsync *a) { return a && a->started && !atomic_load(&a->finished); }

Status ckpt_async_wait(CkptAsync *a, CkptSaveInfo *info, Err *err) { return join(a, info, err); }

void ckpt_async_free(CkptAsync *a) {
    if (!a) return;
    join(a, NULL, NULL);
    mem_free(a->mem, MEM_CKPT_STAGING, a->params, a->bytes);
    mem_free(a->mem, MEM_CKPT_STAGING, a->m, a->bytes);
    mem_free(a->mem, MEM_CKPT_STAGING, a->v, a->bytes);
    mem_free(a->mem, MEM_CKPT_STAGING, a->master, a->bytes);
    layout_free(&a->pl);
    free(a);
}
