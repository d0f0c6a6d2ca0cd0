/* optim.c — AdamW, Adam (L2), SGD with momentum, Lion, Sophia's elementwise rule; clipping; schedules. */
#include "optim/optim.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "core/half.h"

OptimConfig optim_default_config(OptimKind kind) {
    OptimConfig c = {kind, 0.9f, 0.95f, 1e-8f, 0.1f, 0.9f};
    if (kind == OPT_LION) c.beta1 = 0.9f, c.beta2 = 0.99f, c.weight_decay = 1.0f;
    if (kind == OPT_SGD) c.weight_decay = 0.0f;
    c.muon_lr = 0.02f, c.muon_momentum = 0.95f;
    c.shampoo_block = 512, c.precond_every = 10, c.shampoo_eps = 1e-6f;
    /* Liu et al.'s GPT-2 settings (their code's SophiaG defaults and paper §4): β1 0.965, β2 0.99,
     * γ (their ρ) 0.04, k 10, decoupled decay 0.2; ε floors the denominator as their 1e-15 does. */
    if (kind == OPT_SOPHIA) c.beta1 = 0.965f, c.beta2 = 0.99f, c.eps = 1e-15f, c.weight_decay = 0.2f;
    c.sophia_gamma = 0.04f, c.hess_every = 10;
    return c;
}

Status optim_parse_kind(const char *s, OptimKind *kind, Err *err) {
    static const char *const N[OPTIM_NKINDS] = {"adamw", "adam", "sgd", "lion", "muon", "shampoo", "sophia"};
    for (int i = 0; i < OPTIM_NKINDS; i++)
        if (!strcmp(s, N[i])) return *kind = (OptimKind)i, ST_OK;
    return err_set(err, ST_ERR_INPUT, "--optimizer: expected adamw, adam, sgd, lion, muon, shampoo or sophia, found '%s'",
                   s);
}

const char *optim_kind_name(OptimKind kind) {
    static const char *const N[OPTIM_NKINDS] = {"adamw", "adam", "sgd", "lion", "muon", "shampoo", "sophia"};
    return N[kind];
}

int optim_num_moments(const OptimConfig *c) {
    return (c->kind == OPT_ADAMW || c->kind == OPT_ADAM || c->kind == OPT_MUON || c->kind == OPT_SHAMPOO ||
            c->kind == OPT_SOPHIA) ? 2 : 1;
}

int optim_hess_due(const OptimConfig *c, long step) {
    return c->kind == OPT_SOPHIA && c->hess_every > 0 && (step - 1) % c->hess_every == 0;
}

void optim_hess_update(const OptimConfig *c, float *h, const float *g, const OptimRange *ranges, int nranges,
                       float scale, int nt) {
    const float b2 = c->beta2, f = (1.0f - c->beta2) * scale;
    for (int r = 0; r < nranges; r++) {
        float *hh = h + ranges[r].offset;
        const float *gr = g + ranges[r].offset;
        const long n = (long)ranges[r].n;
#pragma omp parallel for simd num_threads(nt) schedule(static)
        for (long i = 0; i < n; i++) hh[i] = b2 * hh[i] + f * gr[i] * gr[i];
    }
}

int optim_is_matrix(OptimKind kind) { return kind == OPT_MUON || kind == OPT_SHAMPOO; }

/* The update of elements [i0, i1) of one range: the five rules, each one vectorized loop. */
static void update_block(const OptimConfig *c, float *p, const float *gr, float *mm, float *vv, long i0, long i1,
                         long step, float lr, float wd, float grad_scale, float bc1, float bc2) {
    const float b1 = c->beta1, b2 = c->beta2, eps = c->eps;
    switch (c->kind) {
    case OPT_MUON:    /* their flat ranges (embeddings, head, biases, norms) run AdamW */
    case OPT_SHAMPOO:
    case OPT_ADAMW:
#pragma omp simd
        for (long i = i0; i < i1; i++) {
            float g = gr[i] * grad_scale;
            float m1 = b1 * mm[i] + (1.0f - b1) * g;
            float v1 = b2 * vv[i] + (1.0f - b2) * g * g;
            mm[i] = m1, vv[i] = v1;
            float mhat = m1 / bc1, vhat = v1 / bc2;
            p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
        }
        break;
    case OPT_ADAM: /* L2-coupled decay: the decay term passes through the moments */
#pragma omp simd
        for (long i = i0; i < i1; i++) {
            float g = gr[i] * grad_scale + wd * p[i];
            float m1 = b1 * mm[i] + (1.0f - b1) * g;
            float v1 = b2 * vv[i] + (1.0f - b2) * g * g;
            mm[i] = m1, vv[i] = v1;
            p[i] -= lr * ((m1 / bc1) / (sqrtf(v1 / bc2) + eps));
        }
        break;
    case OPT_SGD: /* PyTorch semantics: buf = mu·buf + g (buf = g at step 1); p -= lr·buf */
#pragma omp simd
        for (long i = i0; i < i1; i++) {
            float g = gr[i] * grad_scale + wd * p[i];
            float b = (c->momentum > 0 && step > 1) ? c->momentum * mm[i] + g : g;
            mm[i] = b;
            p[i] -= lr * b;
        }
        break;
    case OPT_LION: /* Chen et al. 2023: u = sign(b1·m + (1-b1)·g); m = b2·m + (1-b2)·g */
#pragma omp simd
        for (long i = i0; i < i1; i++) {
            float g = gr[i] * grad_scale;
            float u = b1 * mm[i] + (1.0f - b1) * g;
            float s = (u > 0.0f) - (u < 0.0f);
            p[i] -= lr * (s + wd * p[i]);
            mm[i] = b2 * mm[i] + (1.0f - b2) * g;
        }
        break;
    case OPT_SOPHIA: /* Liu et al. 2023, Algorithm 1: p -= lr·wd·p; p -= lr·clip(m / max(γ·h, ε), 1) */
    {
        const float gam = c->sophia_gamma;
#pragma omp simd
        for (long i = i0; i < i1; i++) {
            float g = gr[i] * grad_scale;
            float m1 = b1 * mm[i] + (1.0f - b1) * g;
            mm[i] = m1;
            float d = gam * vv[i];
            float u = m1 / (d > eps ? d : eps);
            u = u > 1.0f ? 1.0f : u < -1.0f ? -1.0f : u;
            p[i] -= lr * (u + wd * p[i]);
        }
        break;
    }
    }
}

/* p[i0, i1) rounded to nearest even into bf16 or fp16 bits. */
static void round_block(uint16_t *dst, const float *p, long i0, long i1, OptimLowp kind) {
    if (kind == OPTIM_LOWP_BF16) {
#pragma omp simd
        for (long i = i0; i < i1; i++) dst[i] = half_bf16(p[i]);
    } else {
#pragma omp simd
        for (long i = i0; i < i1; i++) dst[i] = half_fp16(p[i]);
    }
}

/* Elements per task: the low-precision copy of a block is written while the block is still in
 * L1/L2, so the fused step reads the master once instead of twice. */
#define OPT_BLOCK 4096

void optim_step_lowp(const OptimConfig *c, float *params, const float *grads, float *m, float *v,
                     const OptimRange *ranges, int nranges, long step, float lr, float grad_scale, uint16_t *lowp,
                     OptimLowp lowp_kind, int nt) {
    const float bc1 = 1.0f - powf(c->beta1, (float)step), bc2 = 1.0f - powf(c->beta2, (float)step);
    for (int r = 0; r < nranges; r++) {
        size_t off = ranges[r].offset;
        float *p = params + off, *mm = m + off, *vv = v ? v + off : NULL;
        const float *gr = grads + off;
        uint16_t *lp = lowp && lowp_kind != OPTIM_LOWP_NONE ? lowp + off : NULL;
        const float wd = ranges[r].decay ? c->weight_decay : 0.0f;
        const long n = (long)ranges[r].n, nblk = (n + OPT_BLOCK - 1) / OPT_BLOCK;
#pragma omp parallel for num_threads(nt) schedule(static)
        for (long b = 0; b < nblk; b++) {
            long i0 = b * OPT_BLOCK, i1 = i0 + OPT_BLOCK < n ? i0 + OPT_BLOCK : n;
            update_block(c, p, gr, mm, vv, i0, i1, step, lr * ranges[r].lr_mult, wd, grad_scale, bc1, bc2);
            if (lp) round_block(lp, p, i0, i1, lowp_kind);
        }
    }
}

void optim_step(const OptimConfig *c, float *params, const float *grads, float *m, float *v,
                const OptimRange *ranges, int nranges, long step, float lr, float grad_scale, int nt) {
    optim_step_lowp(c, params, grads, m, v, ranges, nranges, step, lr, grad_scale, NULL, OPTIM_LOWP_NONE, nt);
}

#define NORM_CHUNK 4096

double optim_sumsq(const float *x, size_t n, int nt) {
    size_t nchunk = (n + NORM_CHUNK - 1) / NORM_CHUNK;
    double total = 0;
    /* Partial sums per fixed chunk, then an ordered sum: identical for any thread count. */
    enum { BATCH = 1024 };
    double part[BATCH];
    for (size_t c0 = 0; c0 < nchunk; c0 += BATCH) {
        size_t c1 = c0 + BATCH < nchunk ? c0 + BATCH : nchunk;
#pragma omp parallel for num_threads(nt) schedule(static)
        for (size_t c = c0; c < c1; c++) {
            size_t i0 = c * NORM_CHUNK, i1 = i0 + NORM_CHUNK < n ? i0 + NORM_CHUNK : n;
#if defined(__SANITIZE_ADDRESS__)
            /* The sanitizers keep GCC from vectorising this reduction, and 4096 fp32 additions in
             * one chain erred by up to 1.1e-6 relative (test_cuda_optim's tolerance is 1e-6; the
             * vectorised sum's 16 chains stay near 1e-7): the sanitizer build sums in double. Same
             * memory accesses; its bits already differed from the release build's. */
            double s = 0;
            for (size_t i = i0; i < i1; i++) s += (double)x[i] * x[i];
#else
            float s = 0;
#pragma omp simd reduction(+ : s)
            for (size_t i = i0; i < i1; i++) s += x[i] * x[i];
#endif
            part[c - c0] = s;
        }
        for (size_t c = c0; c < c1; c++) total += part[c - c0];
    }
    return total;
}

double optim_l2_norm(const float *x, size_t n, int nt) { return sqrt(optim_sumsq(x, n, nt)); }

double optim_chunk_sumsq(const float *x, size_t n) {
    double acc = 0;
    for (size_t i = 0; i < n; i++) acc += (double)x[i] * x[i];
    return acc;
}

/* A float's square is exact in double (24-bit significand, 48-bit product), so a fused
 * multiply-add, a multiply then an add, and a vector lane all give the same sum as the scalar
 * loop above: only the order of the additions matters, and each lane keeps its chunk's order. */
void optim_chunk_sumsq8(const float *const x[8], size_t n, double out[8]) {
    size_t i = 0;
#if defined(__AVX512F__)
    /* Lane k of acc is chunk k's sum. Each step loads 8 floats of every chunk, transposes the
     * 8 x 8 block (element i + j of all chunks in vector j) and adds the squares for j = 0..7. */
    __m512d acc = _mm512_setzero_pd();
    for (; i + 8 <= n; i += 8) {
        __m256 r0 = _mm256_loadu_ps(x[0] + i), r1 = _mm256_loadu_ps(x[1] + i), r2 = _mm256_loadu_ps(x[2] + i),
               r3 = _mm256_loadu_ps(x[3] + i), r4 = _mm256_loadu_ps(x[4] + i), r5 = _mm256_loadu_ps(x[5] + i),
               r6 = _mm256_loadu_ps(x[6] + i), r7 = _mm256_loadu_ps(x[7] + i);
        __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
               t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
               t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
        __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE),
               s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE),
               s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE),
               s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
        const __m256 c[8] = {_mm256_permute2f128_ps(s0, s4, 0x20), _mm256_permute2f128_ps(s1, s5, 0x20),
                             _mm256_permute2f128_ps(s2, s6, 0x20), _mm256_permute2f128_ps(s3, s7, 0x20),
                             _mm256_permute2f128_ps(s0, s4, 0x31), _mm256_permute2f128_ps(s1, s5, 0x31),
                             _mm256_permute2f128_ps(s2, s6, 0x31), _mm256_permute2f128_ps(s3, s7, 0x31)};
        for (int j = 0; j < 8; j++) {
            __m512d d = _mm512_cvtps_pd(c[j]);
            acc = _mm512_add_pd(acc, _mm512_mul_pd(d, d));
        }
    }
    _mm512_storeu_pd(out, acc);
#else
    for (int k = 0; k < 8; k++) out[k] = 0;
#endif
    /* The rest (all of it without AVX-512): eight independent chains, element by element. */
    double a[8];
    for (int k = 0; k < 8; k++) a[k] = out[k];
    for (; i < n; i++)
        for (int k = 0; k < 8; k++) a[k] += (double)x[k][i] * x[k][i];
    for (int k = 0; k < 8; k++) out[k] = a[k];
}

float optim_clip_scale(double norm, float clip) {
    if (clip <= 0 || !(norm > clip)) return 1.0f;
    return (float)(clip / norm);
}

Status sched_parse_kind(const char *s, SchedKind *k, Err *err) {
    static const char *const N[] = {"cosine", "wsd", "linear", "constant"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, N[i])) return *k = (SchedKind)i, ST_OK;
    return err_set(err, ST_ERR_INPUT, "--schedule: expected cosine, wsd, linear or constant, found '%s'", s);
}

Status sched_parse_shape(const char *s, DecayShape *d, Err *err) {
    static const char *const N[] = {"linear", "cosine", "1-sqrt"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, N[i])) return *d = (DecayShape)i, ST_OK;
    return err_set(err, ST_ERR_INPUT, "--decay-shape: expected linear, cosine or 1-sqrt, found '%s'", s);
}

const char *sched_kind_name(SchedKind k) {
    static const char *const N[] = {"cosine", "wsd", "linear", "constant"};
    return N[k];
}

const char *sched_shape_name(DecayShape d) {
    static const char *const N[] = {"linear", "cosine", "1-sqrt"};
    return N[d];
}

float sched_lr(const Schedule *s, long step) {
    if (step <= s->warmup) return s->lr * (float)step / (float)s->warmup;
    if (s->kind == SCHED_CONSTANT) return s->lr;
    long span = s->total - s->warmup;
    if (span <= 0) return s->lr;
    double lr = s->lr, lo = s->min_lr;
    if (s->kind == SCHED_WSD) {
        long decay = (long)llround(s->decay_frac * (double)s->total);
        long start = s->total - decay; /* last stable step */
        if (decay <= 0 || step <= start) return s->lr;
        double f = (double)(step - start) / (double)decay; /* (0, 1] */
        double w = s->decay_shape == DECAY_LINEAR   ? 1.0 - f
                   : s->decay_shape == DECAY_COSINE ? 0.5 * (1.0 + cos(M_PI * f))
                                                    : 1.0 - sqrt(f);
        return (float)(lo + (lr - lo) * w);
    }
    double f = (double)(step - s->warmup) / (double)span; /* (0, 1] */
    double w = s->kind == SCHED_COSINE ? 0.5 * (1.0 + cos(M_PI * f)) : 1.0 - f;
    return (float)(lo + (lr - lo) * w);
}

void scaler_init(LossScaler *s, float init_scale, int growth_interval) {
    s->scale = init_scale;
    s->growth_interval = growth_interval;
    s->good = 0;
    s->skips = 0;
}

int scaler_update(LossScaler *s, int finite) {
    if (!finite) {
        s->scale *= 0.5f;
        if (s->scale < 1.0f / 65536.0f) s->scale = 1.0f / 65536.0f;
        s->good = 0;
        s->skips++;
        return 0;
    }
    if (++s->good >= s->growth_interval) {
        s->scale *= 2.0f;
        s->good = 0;
    }
    return 1;
}
