/* test_head_bounds.c — the LM head writes nothing outside its buffers at GPT-2's vocabulary.
 *
 * A suspect of the rare heap corruption of 2-rank runs (docs/debugging.md): report 2 aborted in a
 * free inside oneDNN's GEMM called from the head, and the logits chunk is the last buffer of the
 * workspace block, so a write past it would land in the heap's next chunk. ASan does not see writes
 * made by oneDNN's JIT kernels, so this test puts guard zones (a byte pattern) around every buffer
 * the head writes (logits chunk, dx, dwte, losses) and checks them after the call.
 *
 * Shapes: report 2's (C = 384, V = 50257, padded 50304, chunks of layout_head_chunk_rows = 320
 * rows, 333 until 2026-11-30) on 2 full chunks + a tail of 50 rows (a B·T that is not a multiple
 * of the chunk), fp32, 1 thread, the forward + backward path the trainer runs.
 * Oracle: every guard byte unchanged, and the results finite.
 * Negative control: the same call with the logits buffer 4 floats short of the last row's V
 * columns (its guard then starts inside what the head writes) must be reported. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "model/kernels.h"
#include "model/layout.h"
#include "model/matmul.h"
#include "testutil.h"

#define GUARD 4096 /* bytes before and after each buffer */
#define PATTERN 0xA5

typedef struct {
    unsigned char *raw;
    size_t bytes;
} Guarded;

static float *guarded(Guarded *g, size_t bytes) {
    g->bytes = bytes;
    g->raw = malloc(bytes + 2 * GUARD);
    if (!g->raw) return NULL;
    memset(g->raw, PATTERN, bytes + 2 * GUARD);
    return (float *)(g->raw + GUARD);
}

/* Bytes of the guard zones that changed. */
static size_t guard_damage(const Guarded *g) {
    size_t bad = 0;
    for (size_t i = 0; i < GUARD; i++) bad += g->raw[i] != PATTERN;
    for (size_t i = 0; i < GUARD; i++) bad += g->raw[GUARD + g->bytes + i] != PATTERN;
    return bad;
}

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) / 9007199254740992.0 - 0.5);
}

/* Runs the head on n rows with a logits buffer of `logit_floats` floats; returns the guard bytes
 * hit (all buffers), and in *finite whether the outputs are finite. */
static size_t run_head(int n, int C, int V, int Vp, int chunk, size_t logit_floats, int *finite) {
    Guarded gx, gw, gl, gdx, gdw, gloss, gt;
    float *x = guarded(&gx, (size_t)n * C * sizeof(float));
    float *w = guarded(&gw, (size_t)Vp * C * sizeof(float));
    float *logits = guarded(&gl, logit_floats * sizeof(float));
    float *dx = guarded(&gdx, (size_t)n * C * sizeof(float));
    float *dw = guarded(&gdw, (size_t)Vp * C * sizeof(float));
    float *losses = guarded(&gloss, (size_t)n * sizeof(float));
    int32_t *tgt = (int32_t *)guarded(&gt, (size_t)n * sizeof(int32_t));
    size_t bad = (size_t)-1;
    *finite = 0;
    if (x && w && logits && dx && dw && losses && tgt) {
        uint64_t s = 7;
        for (size_t i = 0; i < (size_t)n * C; i++) x[i] = frand(&s);
        for (size_t i = 0; i < (size_t)Vp * C; i++) w[i] = i < (size_t)V * C ? 0.1f * frand(&s) : 0.0f;
        memset(dw, 0, (size_t)Vp * C * sizeof(float));
        for (int i = 0; i < n; i++) tgt[i] = i % 7 == 3 ? -1 : (int32_t)((i * 7919u) % (unsigned)V);
        head_forward_backward_p(NULL, losses, dx, dw, logits, x, w, NULL, tgt, n, C, V, Vp, 1.0f / n, chunk, 0, 1, NULL,
                                NULL, NULL, NULL);
        Err e;
        int ok = mm_take_error(&e) == ST_OK;
        for (int i = 0; i < n && ok; i++) ok = isfinite(losses[i]);
        for (size_t i = 0; i < (size_t)n * C && ok; i++) ok = isfinite(dx[i]);
        *finite = ok;
        bad = guard_damage(&gx) + guard_damage(&gw) + guard_damage(&gl) + guard_damage(&gdx) + guard_damage(&gdw) +
              guard_damage(&gloss) + guard_damage(&gt);
    }
    free(gx.raw), free(gw.raw), free(gl.raw), free(gdx.raw), free(gdw.raw), free(gloss.raw), free(gt.raw);
    return bad;
}

int main(void) {
    mm_set_threads(1);
    ModelConfig cfg;
    Err e;
    memset(&cfg, 0, sizeof cfg);
    if (model_config_preset(&cfg, "d6", &e) != ST_OK) {
        tu_check(0, "the d6 preset", "%s", e.msg);
        return tu_exit();
    }
    cfg.vocab = 50257, cfg.max_seq = 1024;
    if (model_config_validate(&cfg, &e) != ST_OK) {
        tu_check(0, "d6 at V=50257", "%s", e.msg);
        return tu_exit();
    }
    int C = cfg.n_embd, V = cfg.vocab, Vp = cfg.vocab_padded;
    int chunk = layout_head_chunk_rows(&cfg, 8, 256); /* report 2's micro-batch 8 x seq 256 */
    int n = 2 * chunk + 50; /* two whole chunks and a tail */
    int finite = 0;
    size_t bad = run_head(n, C, V, Vp, chunk, (size_t)chunk * Vp, &finite);
    tu_check(bad == 0 && finite, "head at V=50257 (padded 50304), C=384, chunks of 320 + a tail of 50: no write outside its buffers",
             "guard bytes changed=%zu finite=%d chunk=%d n=%d", bad, finite, chunk, n);
    /* negative control: a logits buffer 4 floats short of the last row's V columns must hit its
     * guard (a small overrun: inside the guard zone, so the heap itself stays whole) */
    bad = run_head(n, C, V, Vp, chunk, (size_t)(chunk - 1) * Vp + V - 4, &finite);
    tu_check(bad > 0 && bad != (size_t)-1, "negative control: a logits buffer 4 floats short of the chunk's last row is caught",
             "guard bytes changed=%zu", bad);
    return tu_exit();
}
