/* devemu.c — the test-only emulated device backend (devemu.h): the CPU table's entries, each
 * wrapped so the device's pages are readable and writable only inside it. The wrappers of the
 * kernel entries are mechanical (one per backend.h entry, generated from its declarations). */
#include "train/devemu.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "optim/optim.h"

static Backend base, emu;
static int built;

/* The allocations: whole pages carved from one reserved range (the arena), so that opening and
 * closing the device is one mprotect per run of adjacent live regions, not one per allocation.
 * The arena asks for transparent huge pages, and the run that ends at the arena's top is opened
 * and closed up to the next 2 MiB boundary, so that mprotect never splits a huge page there: on a
 * VM with shadow page tables each 4 KiB page touched after an mprotect costs an exit to the
 * hypervisor, and a 512^3 GEMM on the device ran at a quarter of the CPU's rate (test_device_plan's
 * peak check; 0.96x with huge pages). Freed pages go back to the kernel (remapped PROT_NONE,
 * zero-filled when reused) and stay closed inside table entries, as an unmapped region was. */
typedef struct {
    size_t off, len;
} EmuRegion;
static EmuRegion *regions, *holes; /* regions sorted by offset; holes: freed ranges, unsorted */
static int nregions, capregions, nholes, capholes, depth;
static char *arena;
static size_t arena_top;
#define EMU_ARENA_BYTES ((size_t)1 << 38) /* 256 GiB of addresses, none committed until used */
#define EMU_HUGE ((size_t)2 << 20)

static size_t page_round(size_t n) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (n + pg - 1) / pg * pg;
}

static void protect_all(int prot) {
    for (int i = 0; i < nregions;) {
        int j = i + 1;
        size_t end = regions[i].off + regions[i].len;
        while (j < nregions && regions[j].off == end) end += regions[j++].len;
        if (end == arena_top) /* nothing above it: round up to a whole huge page */
            end = (end + EMU_HUGE - 1) / EMU_HUGE * EMU_HUGE;
        if (mprotect(arena + regions[i].off, end - regions[i].off, prot) != 0)
            abort();
        i = j;
    }
}

/* Entering a table entry opens every device page; leaving the outermost closes them again. */
static void emu_enter(void) {
    if (depth++ == 0)
        protect_all(PROT_READ | PROT_WRITE);
}
static void emu_leave(void) {
    if (--depth == 0)
        protect_all(PROT_NONE);
}

static int grow(EmuRegion **a, int *cap, int n) {
    if (n < *cap)
        return 1;
    int c = *cap ? *cap * 2 : 64;
    EmuRegion *r = realloc(*a, (size_t)c * sizeof *r);
    if (!r)
        return 0;
    *a = r, *cap = c;
    return 1;
}

/* A free range of len bytes: the first hole that holds it (split), else the top of the arena. */
static int take_range(size_t len, size_t *off) {
    for (int i = 0; i < nholes; i++)
        if (holes[i].len >= len) {
            *off = holes[i].off;
            holes[i].off += len, holes[i].len -= len;
            if (holes[i].len == 0)
                holes[i] = holes[--nholes];
            return 1;
        }
    if (len > EMU_ARENA_BYTES - arena_top)
        return 0;
    *off = arena_top, arena_top += len;
    return 1;
}

static void *emu_alloc(MemStats *ms, MemCategory c, size_t bytes) {
    if (bytes == 0)
        return NULL;
    if (!arena) { /* reserved with room to start it on a huge-page boundary */
        char *a = mmap(NULL, EMU_ARENA_BYTES + EMU_HUGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (a == MAP_FAILED)
            return NULL;
        arena = (char *)(((uintptr_t)a + EMU_HUGE - 1) / EMU_HUGE * EMU_HUGE);
        (void)madvise(arena, EMU_ARENA_BYTES, MADV_HUGEPAGE); /* a hint: without THP, 4 KiB pages */
    }
    size_t len = page_round(bytes), off;
    if (!grow(&regions, &capregions, nregions) || !take_range(len, &off))
        return NULL;
    int i = nregions++;
    while (i > 0 && regions[i - 1].off > off) regions[i] = regions[i - 1], i--;
    regions[i] = (EmuRegion){off, len};
    if (depth) /* inside a table entry: open it with its run */
        protect_all(PROT_READ | PROT_WRITE);
    if (ms) {
        ms->bytes[c] += bytes;
        if (ms->bytes[c] > ms->peak[c])
            ms->peak[c] = ms->bytes[c];
    }
    return arena + off; /* zero-filled: fresh or remapped pages */
}

static void emu_free(MemStats *ms, MemCategory c, void *p, size_t bytes) {
    if (!p)
        return;
    for (int i = 0; i < nregions; i++)
        if (arena + regions[i].off == (char *)p) {
            EmuRegion r = regions[i];
            /* the pages back to the kernel, the addresses kept (closed) for a later allocation */
            if (mmap(p, r.len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED)
                abort();
            memmove(regions + i, regions + i + 1, (size_t)(nregions - i - 1) * sizeof *regions);
            nregions--;
            if (r.off + r.len == arena_top)
                arena_top = r.off;
            else if (grow(&holes, &capholes, nholes))
                holes[nholes++] = r; /* (without room, these addresses are simply not reused) */
            if (ms)
                ms->bytes[c] -= bytes;
            return;
        }
    abort(); /* not the emulated device's memory */
}

static void emu_to_host(void *host, const void *src, size_t bytes) {
    emu_enter();
    memcpy(host, src, bytes);
    emu_leave();
}
static void emu_from_host(void *dst, const void *host, size_t bytes) {
    emu_enter();
    memcpy(dst, host, bytes);
    emu_leave();
}
static void emu_sync(void) {}
/* Its GEMMs are the CPU's: the peak measured through it is this CPU's GEMM rate (machine_peak.h). */
static const char *emu_device_name(void) { return "emulated device (the CPU table)"; }
static Status emu_take_error(Err *err) { return base.take_error(err); }

/* optim.c's rule on one range, as backend.h's optim_update describes it. */
static void emu_optim_update(const BackendOptStep *s, float *p, const float *g, float *m, float *v, uint16_t *lowp,
                             size_t n) {
    emu_enter();
    OptimConfig c = optim_default_config((OptimKind)s->kind);
    c.beta1 = s->beta1, c.beta2 = s->beta2, c.eps = s->eps, c.momentum = s->momentum, c.weight_decay = s->wd;
    OptimRange r = {0, n, s->wd != 0.0f, 1.0f};
    optim_step_lowp(&c, p, g, m, v, &r, 1, s->step, s->lr, s->grad_scale, lowp,
                    s->lowp == 1   ? OPTIM_LOWP_BF16
                    : s->lowp == 2 ? OPTIM_LOWP_FP16
                                   : OPTIM_LOWP_NONE,
                    1);
    emu_leave();
}

/* Σ x² in optim_l2_norm's partition (4096-element chunks, each in double, added in order). */
static double emu_sumsq(const float *x, size_t n) {
    emu_enter();
    double s = 0;
    for (size_t c0 = 0; c0 < n; c0 += 4096) {
        size_t c1 = c0 + 4096 < n ? c0 + 4096 : n;
        double a = 0;
        for (size_t i = c0; i < c1; i++)
            a += (double)x[i] * x[i];
        s += a;
    }
    emu_leave();
    return s;
}

/* ---- the kernel entries, each inside emu_enter / emu_leave ---- */
static void w_copy(void *dst, const void *src, size_t bytes) {
    emu_enter();
    base.copy(dst, src, bytes);
    emu_leave();
}
static void w_zero(void *dst, size_t bytes) {
    emu_enter();
    base.zero(dst, bytes);
    emu_leave();
}
static void w_scale_inplace(float *x, size_t n, float a, int nt) {
    emu_enter();
    base.scale_inplace(x, n, a, nt);
    emu_leave();
}
static double w_sum_ordered(const float *x, size_t n) {
    emu_enter();
    double r = base.sum_ordered(x, n);
    emu_leave();
    return r;
}
static void w_add_or_set(float *dst, const float *src, size_t n, int acc) {
    emu_enter();
    base.add_or_set(dst, src, n, acc);
    emu_leave();
}
static void w_encoder_forward(float *out, const int32_t *inp, const int32_t *pos, const float *wte, const float *wpe,
                              int B, int T, int C, Dropout d, int nt) {
    emu_enter();
    base.encoder_forward(out, inp, pos, wte, wpe, B, T, C, d, nt);
    emu_leave();
}
static void w_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, const int32_t *pos,
                               int B, int T, int C, Dropout d, int nt) {
    emu_enter();
    base.encoder_backward(dwte, dwpe, dout, inp, pos, B, T, C, d, nt);
    emu_leave();
}
static void w_encoder_forward_vp(float *out, const int32_t *inp, const int32_t *pos, const float *wte, const float *wpe,
                                 int B, int T, int C, int v0, int vn, int nt) {
    emu_enter();
    base.encoder_forward_vp(out, inp, pos, wte, wpe, B, T, C, v0, vn, nt);
    emu_leave();
}
static void w_encoder_backward_vp(float *dwte, float *dwpe, const float *dout, const int32_t *inp, const int32_t *pos,
                                  int B, int T, int C, int v0, int vn, int nt) {
    emu_enter();
    base.encoder_backward_vp(dwte, dwpe, dout, inp, pos, B, T, C, v0, vn, nt);
    emu_leave();
}
static void w_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                                int N, int C, int nt) {
    emu_enter();
    base.layernorm_forward(out, mean, rstd, inp, w, b, N, C, nt);
    emu_leave();
}
static void w_layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const float *inp, const float *w,
                                     const float *b, int N, int C, int nt) {
    emu_enter();
    base.layernorm_forward_bf16(out, mean, rstd, inp, w, b, N, C, nt);
    emu_leave();
}
static void w_residual_layernorm_forward(float *res, float *out, float *mean, float *rstd, const float *a,
                                         const float *b, Dropout d, const float *w, const float *bias, int N, int C,
                                         int nt) {
    emu_enter();
    base.residual_layernorm_forward(res, out, mean, rstd, a, b, d, w, bias, N, C, nt);
    emu_leave();
}
static void w_residual_layernorm_forward_bf16(float *res, uint16_t *out, float *mean, float *rstd, const float *a,
                                              const float *b, Dropout d, const float *w, const float *bias, int N,
                                              int C, int nt) {
    emu_enter();
    base.residual_layernorm_forward_bf16(res, out, mean, rstd, a, b, d, w, bias, N, C, nt);
    emu_leave();
}
static void w_layernorm_backward(float *dinp, float *dw, float *db, float *scratch, const float *dout, const float *inp,
                                 const float *w, const float *mean, const float *rstd, int N, int C, int acc, int nt) {
    emu_enter();
    base.layernorm_backward(dinp, dw, db, scratch, dout, inp, w, mean, rstd, N, C, acc, nt);
    emu_leave();
}
static void w_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps,
                              int nt) {
    emu_enter();
    base.rmsnorm_forward(out, rstd, inp, w, N, C, eps, nt);
    emu_leave();
}
static void w_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *inp, const float *w, int N, int C,
                                   float eps, int nt) {
    emu_enter();
    base.rmsnorm_forward_bf16(out, rstd, inp, w, N, C, eps, nt);
    emu_leave();
}
static void w_residual_rmsnorm_forward(float *res, float *out, float *rstd, const float *a, const float *b, Dropout d,
                                       const float *w, int N, int C, float eps, int nt) {
    emu_enter();
    base.residual_rmsnorm_forward(res, out, rstd, a, b, d, w, N, C, eps, nt);
    emu_leave();
}
static void w_residual_rmsnorm_forward_bf16(float *res, uint16_t *out, float *rstd, const float *a, const float *b,
                                            Dropout d, const float *w, int N, int C, float eps, int nt) {
    emu_enter();
    base.residual_rmsnorm_forward_bf16(res, out, rstd, a, b, d, w, N, C, eps, nt);
    emu_leave();
}
static void w_rmsnorm_backward(float *dinp, float *dw, float *scratch, const float *dout, const float *inp,
                               const float *w, const float *rstd, int N, int C, int acc, int nt) {
    emu_enter();
    base.rmsnorm_backward(dinp, dw, scratch, dout, inp, w, rstd, N, C, acc, nt);
    emu_leave();
}
static void w_rope_table(float *cs, int T, int hs, const double *inv_freq) {
    emu_enter();
    base.rope_table(cs, T, hs, inv_freq);
    emu_leave();
}
static void w_rope_forward(float *qkv, const float *cs, const int32_t *pos, int B, int T, int NH, int KV, int hs,
                           int pos0, int nt) {
    emu_enter();
    base.rope_forward(qkv, cs, pos, B, T, NH, KV, hs, pos0, nt);
    emu_leave();
}
static void w_rope_backward(float *dqkv, const float *cs, const int32_t *pos, int B, int T, int NH, int KV, int hs,
                            int pos0, int nt) {
    emu_enter();
    base.rope_backward(dqkv, cs, pos, B, T, NH, KV, hs, pos0, nt);
    emu_leave();
}
static void w_swiglu_forward(float *out, const float *h, int N, int F, int nt) {
    emu_enter();
    base.swiglu_forward(out, h, N, F, nt);
    emu_leave();
}
static void w_swiglu_forward_bf16(uint16_t *out, const float *h, int N, int F, int nt) {
    emu_enter();
    base.swiglu_forward_bf16(out, h, N, F, nt);
    emu_leave();
}
static void w_swiglu_backward(float *dh, const float *dout, const float *h, int N, int F, int nt) {
    emu_enter();
    base.swiglu_backward(dh, dout, h, N, F, nt);
    emu_leave();
}
static void w_swiglu_backward_bf16(uint16_t *dh, const float *dout, const float *h, int N, int F, int nt) {
    emu_enter();
    base.swiglu_backward_bf16(dh, dout, h, N, F, nt);
    emu_leave();
}
static void w_attention_forward(float *out, float *lse, float *scratch, const float *qkv, const int32_t *pos, int B,
                                int T, int NH, int KV, int hs, float scale, Dropout d, int lowp, int nt) {
    emu_enter();
    base.attention_forward(out, lse, scratch, qkv, pos, B, T, NH, KV, hs, scale, d, lowp, nt);
    emu_leave();
}
static void w_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                                 const float *lse, const int32_t *pos, int B, int T, int NH, int KV, int hs,
                                 float scale, Dropout d, int lowp, int nt) {
    emu_enter();
    base.attention_backward(dqkv, scratch, dout, qkv, out, lse, pos, B, T, NH, KV, hs, scale, d, lowp, nt);
    emu_leave();
}
static void w_attention_decode(float *out, float *scores, const float *q, const float *K, const float *V, int pos,
                               int NH, int KV, int hs, float scale, int nt) {
    emu_enter();
    base.attention_decode(out, scores, q, K, V, pos, NH, KV, hs, scale, nt);
    emu_leave();
}
static void w_gelu_forward(float *out, const float *inp, size_t n, int nt) {
    emu_enter();
    base.gelu_forward(out, inp, n, nt);
    emu_leave();
}
static void w_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n, int nt) {
    emu_enter();
    base.gelu_backward(dinp, dout, inp, n, nt);
    emu_leave();
}
static void w_gelu_forward_bf16(uint16_t *out, const float *inp, size_t n, int nt) {
    emu_enter();
    base.gelu_forward_bf16(out, inp, n, nt);
    emu_leave();
}
static void w_gelu_backward_bf16(uint16_t *dinp_lp, float *colsum, float *sums, const float *dout, const float *inp,
                                 int N, int OC, int acc, int nt) {
    emu_enter();
    base.gelu_backward_bf16(dinp_lp, colsum, sums, dout, inp, N, OC, acc, nt);
    emu_leave();
}
static void w_bias_add_rows(float *x, const float *bias, int N, int C, int nt) {
    emu_enter();
    base.bias_add_rows(x, bias, N, C, nt);
    emu_leave();
}
static void w_residual_forward(float *out, const float *a, const float *b, size_t n, Dropout d, int nt) {
    emu_enter();
    base.residual_forward(out, a, b, n, d, nt);
    emu_leave();
}
static void w_dropout_backward(float *out, const float *dout, size_t n, Dropout d, int nt) {
    emu_enter();
    base.dropout_backward(out, dout, n, d, nt);
    emu_leave();
}
static void w_cast_bf16(uint16_t *dst, const float *src, size_t n, int nt) {
    emu_enter();
    base.cast_bf16(dst, src, n, nt);
    emu_leave();
}
static void w_cast_bf16_colsum(uint16_t *dst, float *colsum, float *sums, const float *src, int N, int OC, int acc,
                               int nt) {
    emu_enter();
    base.cast_bf16_colsum(dst, colsum, sums, src, N, OC, acc, nt);
    emu_leave();
}
static void w_cast_fp16(uint16_t *dst, const float *src, size_t n, int nt) {
    emu_enter();
    base.cast_fp16(dst, src, n, nt);
    emu_leave();
}
static void w_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC,
                             int nt) {
    emu_enter();
    base.matmul_forward(out, inp, w, bias, N, C, OC, nt);
    emu_leave();
}
static void w_matmul_forward_lp(float *out, const uint16_t *inp_lp, const uint16_t *w_lp, const float *bias, int N,
                                int C, int OC) {
    emu_enter();
    base.matmul_forward_lp(out, inp_lp, w_lp, bias, N, C, OC);
    emu_leave();
}
static void w_matmul_backward_lp(float *dinp, float *dw, const uint16_t *dout_lp, const uint16_t *inp_lp,
                                 const uint16_t *w_lp, int N, int C, int OC, int acc) {
    emu_enter();
    base.matmul_backward_lp(dinp, dw, dout_lp, inp_lp, w_lp, N, C, OC, acc);
    emu_leave();
}
static void w_matmul_forward_p(const MatPrec *mp, float *out, const float *inp, const float *w, const uint16_t *w_lp,
                               const float *bias, int N, int C, int OC, int nt) {
    emu_enter();
    base.matmul_forward_p(mp, out, inp, w, w_lp, bias, N, C, OC, nt);
    emu_leave();
}
static void w_matmul_backward_p(const MatPrec *mp, float *dinp, float *dw, float *dbias, const float *dout,
                                const float *inp, const float *w, const uint16_t *w_lp, int N, int C, int OC, int acc,
                                int nt) {
    emu_enter();
    base.matmul_backward_p(mp, dinp, dw, dbias, dout, inp, w, w_lp, N, C, OC, acc, nt);
    emu_leave();
}
static void w_head_forward_backward(float *losses, float *dx, float *dwte, float *logits, const float *x,
                                    const float *wte, const int32_t *targets, int n, int C, int V, int Vp, float dscale,
                                    int chunk, int acc, int nt, float *probs_out, double *ms_fwd, double *ms_bwd) {
    emu_enter();
    base.head_forward_backward(losses, dx, dwte, logits, x, wte, targets, n, C, V, Vp, dscale, chunk, acc, nt,
                               probs_out, ms_fwd, ms_bwd);
    emu_leave();
}
static void w_head_forward_backward_p(const MatPrec *mp, float *losses, float *dx, float *dwte, float *logits,
                                      const float *x, const float *wte, const uint16_t *wte_lp, const int32_t *targets,
                                      int n, int C, int V, int Vp, float dscale, int chunk, int acc, int nt,
                                      float *probs_out, const HeadSample *smp, double *ms_fwd, double *ms_bwd) {
    emu_enter();
    base.head_forward_backward_p(mp, losses, dx, dwte, logits, x, wte, wte_lp, targets, n, C, V, Vp, dscale, chunk, acc,
                                 nt, probs_out, smp, ms_fwd, ms_bwd);
    emu_leave();
}
static void w_head_forward_backward_vp(const MatPrec *mp, float *losses, float *dx, float *dwte, float *logits,
                                       float *stats, const float *x, const float *wte, const uint16_t *wte_lp,
                                       const int32_t *targets, int n, int C, int v0, int Vr, int Vl, float dscale,
                                       int chunk, int acc, int nt, HeadReduceFn reduce, void *ctx, double *ms_fwd,
                                       double *ms_bwd) {
    emu_enter();
    base.head_forward_backward_vp(mp, losses, dx, dwte, logits, stats, x, wte, wte_lp, targets, n, C, v0, Vr, Vl,
                                  dscale, chunk, acc, nt, reduce, ctx, ms_fwd, ms_bwd);
    emu_leave();
}

static void emu_wrap_all(Backend *t) {
    t->copy = w_copy;
    t->zero = w_zero;
    t->scale_inplace = w_scale_inplace;
    t->sum_ordered = w_sum_ordered;
    t->add_or_set = w_add_or_set;
    t->encoder_forward = w_encoder_forward;
    t->encoder_backward = w_encoder_backward;
    t->encoder_forward_vp = w_encoder_forward_vp;
    t->encoder_backward_vp = w_encoder_backward_vp;
    t->layernorm_forward = w_layernorm_forward;
    t->layernorm_forward_bf16 = w_layernorm_forward_bf16;
    t->residual_layernorm_forward = w_residual_layernorm_forward;
    t->residual_layernorm_forward_bf16 = w_residual_layernorm_forward_bf16;
    t->layernorm_backward = w_layernorm_backward;
    t->rmsnorm_forward = w_rmsnorm_forward;
    t->rmsnorm_forward_bf16 = w_rmsnorm_forward_bf16;
    t->residual_rmsnorm_forward = w_residual_rmsnorm_forward;
    t->residual_rmsnorm_forward_bf16 = w_residual_rmsnorm_forward_bf16;
    t->rmsnorm_backward = w_rmsnorm_backward;
    t->rope_table = w_rope_table;
    t->rope_forward = w_rope_forward;
    t->rope_backward = w_rope_backward;
    t->swiglu_forward = w_swiglu_forward;
    t->swiglu_forward_bf16 = w_swiglu_forward_bf16;
    t->swiglu_backward = w_swiglu_backward;
    t->swiglu_backward_bf16 = w_swiglu_backward_bf16;
    t->attention_forward = w_attention_forward;
    t->attention_backward = w_attention_backward;
    t->attention_decode = w_attention_decode;
    t->gelu_forward = w_gelu_forward;
    t->gelu_backward = w_gelu_backward;
    t->gelu_forward_bf16 = w_gelu_forward_bf16;
    t->gelu_backward_bf16 = w_gelu_backward_bf16;
    t->bias_add_rows = w_bias_add_rows;
    t->residual_forward = w_residual_forward;
    t->dropout_backward = w_dropout_backward;
    t->cast_bf16 = w_cast_bf16;
    t->cast_bf16_colsum = w_cast_bf16_colsum;
    t->cast_fp16 = w_cast_fp16;
    t->matmul_forward = w_matmul_forward;
    t->matmul_forward_lp = w_matmul_forward_lp;
    t->matmul_backward_lp = w_matmul_backward_lp;
    t->matmul_forward_p = w_matmul_forward_p;
    t->matmul_backward_p = w_matmul_backward_p;
    t->head_forward_backward = w_head_forward_backward;
    t->head_forward_backward_p = w_head_forward_backward_p;
    t->head_forward_backward_vp = w_head_forward_backward_vp;
}

const Backend *devemu_backend(void) {
    if (!built) {
        base = *backend_cpu();
        emu = base;
        emu_wrap_all(&emu);
        emu.name = "emu";
        emu.host_addressable = 0;
        emu.alloc = emu_alloc, emu.free = emu_free, emu.to_host = emu_to_host, emu.from_host = emu_from_host;
        emu.sync = emu_sync, emu.take_error = emu_take_error, emu.device_name = emu_device_name;
        emu.optim_update = emu_optim_update, emu.sumsq = emu_sumsq;
        built = 1;
    }
    return &emu;
}

Status devemu_find(const char *name, int emulated, const Backend **out, Err *err) {
    if (emulated && !strcmp(name, "emu")) {
        *out = devemu_backend();
        return ST_OK;
    }
    return backend_find(name, out, err);
}

Status devemu_open(const Backend *be, const char *name, Err *err) {
    if (be->host_addressable) return ST_OK;
    (void)be->device_name();
    Status st = be->take_error(err);
    return st == ST_OK ? ST_OK : err_prefix(err, "--device %s", name);
}
