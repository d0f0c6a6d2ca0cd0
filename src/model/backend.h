/* backend.h — the compute backend seam of the model: every kernel and GEMM the model runs, and the
 * allocation of the buffers it runs them on, behind one table of functions chosen at gpt_init.
 *
 * Why a table. The model (gpt.c, infer.c) is the composition: which kernel runs on which buffer in
 * which order, the hooks, pipeline slots, tensor-parallel slices. A second backend (CUDA, issue 25)
 * must be able to enter as new files that fill this table, not as #ifdefs in model/ or train/.
 * The CPU backend (backend_cpu.c) fills it with kernels.h and matmul.h; its entries ARE those
 * functions, so going through the table changes no result (scripts/bitcheck.sh).
 *
 * The contract a backend signs (docs/design-notes.md, "The backend seam"):
 *  - Each kernel entry has the name, arguments and contract of its kernels.h declaration (shapes,
 *    overwrite vs accumulate, bf16 rounding, fixed reduction order) and must give the same result
 *    to the tolerance of its precision: bit for bit is not required of another backend, but the
 *    same run twice on one backend must give the same bits (no atomics in reductions).
 *  - Sizes are not the backend's: every buffer is sized by model/layout (the function `plan` shares),
 *    scratch included (attention's scratch as attention_gqa_scratch_floats says), so a backend that
 *    needs other workspace must extend the layout, and with it the plan.
 *  - Pointers given to kernels are backend memory: what `alloc` returned, offsets into it, or the
 *    caller's buffers mapped into the model (external parameters and gradients, whose owner then
 *    allocated them through the same backend). Kernels never allocate; `nt` is a CPU thread count
 *    that other backends ignore. A kernel may run asynchronously; `sync` waits for all of them.
 *  - Buffers cross to the host only through `to_host` / `from_host` (a GEMM's failure, the loss sum
 *    and the logits of gpt_logits are the model's only reads). `host_addressable` says whether
 *    host code may read and write backend memory directly: 1 for the CPU backend, where the
 *    optimizer (optim/), parallel/ (collectives, ZeRO shards), ckpt/ and the trainer use the
 *    model's buffers in place. A backend with host_addressable = 0 must be paired with device-side
 *    optimizer, norm and staging paths in those modules before the trainer accepts it; gpt_init
 *    refuses it until then with one line naming the backend.
 *  - Errors: a kernel that cannot run (a GEMM library refusing a shape, out of device memory) does
 *    not abort; it records the first failure, which `take_error` returns and forgets (matmul.h's
 *    contract), and the model collects it after each forward and backward (gpt_status).
 *  - Memory is counted: `alloc` and `free` account bytes per MemCategory in the MemStats given
 *    (NULL: not counted), so `plan`'s per-category bytes are compared with what the backend holds. */
#ifndef ST_MODEL_BACKEND_H
#define ST_MODEL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "core/mem.h"
#include "core/status.h"
#include "model/kernels.h"

/* One optimizer step's constants for Backend.optim_update: optim.c's update rule of `kind` with
 * these numbers, on one range. The kinds are optim.h's OptimKind values (model/ does not include
 * optim/: DESIGN's direction), checked equal by test_cuda_optim. */
enum { BACKEND_OPT_ADAMW = 0, BACKEND_OPT_ADAM = 1, BACKEND_OPT_SGD = 2, BACKEND_OPT_LION = 3 };
typedef struct {
    int kind;            /* BACKEND_OPT_*: the kinds a device runs (Muon, Shampoo, Sophia: not here) */
    float lr;            /* this range's rate: lr · lr_mult */
    float wd;            /* weight decay of this range (0 where the range has none) */
    float grad_scale;    /* every gradient is multiplied by it first (clipping) */
    float beta1, beta2, eps, momentum;
    float bc1, bc2;      /* bias corrections 1 − beta1^step, 1 − beta2^step (powf, as optim.c) */
    long step;           /* from 1 (SGD's momentum starts at step 1 with buf = g) */
    int lowp;            /* 0: none; 1: round each updated parameter to bf16, 2: to fp16 (OptimLowp) */
} BackendOptStep;

/* The CUDA backend's private device memory: allocated once when the device opens, outside every
 * MemStats (the layout does not size it): the cuBLASLt workspace and the reduction scratch (column
 * partial sums, the norms' chunk partials, the head's probabilities). `plan` adds their sum to a
 * GPU's bytes (PlanHardware.backend_bytes, PlanResult.mem.backend); backend_cuda.cu allocates them. */
#define BACKEND_CUDA_GEMM_WS_BYTES ((size_t)32 << 20)
#define BACKEND_CUDA_REDUCE_BYTES ((size_t)32 << 20)
#define BACKEND_CUDA_PRIVATE_BYTES (BACKEND_CUDA_GEMM_WS_BYTES + BACKEND_CUDA_REDUCE_BYTES)

typedef struct Backend {
    const char *name;     /* "cpu", "cuda" */
    int host_addressable; /* 1: host code may use backend memory in place (see above) */

    /* ---- memory ---- */
    /* bytes of zeroed backend memory counted under category c in ms (may be NULL); NULL when out of
     * memory or bytes is 0. free takes the same size and category; safe on NULL. */
    void *(*alloc)(MemStats *ms, MemCategory c, size_t bytes);
    void (*free)(MemStats *ms, MemCategory c, void *p, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes); /* within backend memory; no overlap */
    void (*zero)(void *dst, size_t bytes);
    void (*to_host)(void *host, const void *src, size_t bytes);
    void (*from_host)(void *dst, const void *host, size_t bytes);
    void (*sync)(void);                    /* waits for every kernel launched so far */
    /* The device's name, for the measured peak's cache key (train/machine_peak.h; "NVIDIA H100 80GB
     * HBM3"); NULL on host-addressable backends (the CPU's key is the host's). */
    const char *(*device_name)(void);
    Status (*take_error)(Err *err);        /* the first kernel/GEMM failure since the last call */

    /* ---- elementwise and reductions the model needs beyond the layer kernels ---- */
    void (*scale_inplace)(float *x, size_t n, float a, int nt);                 /* x *= a */
    double (*sum_ordered)(const float *x, size_t n);                           /* Σ x in index order, in double */
    void (*add_or_set)(float *dst, const float *src, size_t n, int acc);       /* dst (+)= src */

    /* ---- the layer kernels (kernels.h) ---- */
    /* `pos` (here, in rope_* and attention_*): the per-token document positions of document masking
     * (kernels.h, "Document masking"; B·T int32 in backend memory), NULL: positions 0..T-1 and plain
     * causal attention, exactly as without the argument. */
    void (*encoder_forward)(float *out, const int32_t *inp, const int32_t *pos, const float *wte, const float *wpe,
                            int B, int T, int C, Dropout d, int nt);
    void (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *inp, const int32_t *pos,
                             int B, int T, int C, Dropout d, int nt);
    void (*encoder_forward_vp)(float *out, const int32_t *inp, const int32_t *pos, const float *wte, const float *wpe,
                               int B, int T, int C, int v0, int vn, int nt);
    void (*encoder_backward_vp)(float *dwte, float *dwpe, const float *dout, const int32_t *inp, const int32_t *pos,
                                int B, int T, int C, int v0, int vn, int nt);
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                              int N, int C, int nt);
    void (*layernorm_forward_bf16)(uint16_t *out, float *mean, float *rstd, const float *inp, const float *w,
                                   const float *b, int N, int C, int nt);
    void (*residual_layernorm_forward)(float *res, float *out, float *mean, float *rstd, const float *a,
                                       const float *b, Dropout d, const float *w, const float *bias, int N, int C,
                                       int nt);
    void (*residual_layernorm_forward_bf16)(float *res, uint16_t *out, float *mean, float *rstd, const float *a,
                                            const float *b, Dropout d, const float *w, const float *bias, int N,
                                            int C, int nt);
    void (*layernorm_backward)(float *dinp, float *dw, float *db, float *scratch, const float *dout, const float *inp,
                               const float *w, const float *mean, const float *rstd, int N, int C, int acc, int nt);
    void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps, int nt);
    void (*rmsnorm_forward_bf16)(uint16_t *out, float *rstd, const float *inp, const float *w, int N, int C, float eps,
                                 int nt);
    void (*residual_rmsnorm_forward)(float *res, float *out, float *rstd, const float *a, const float *b, Dropout d,
                                     const float *w, int N, int C, float eps, int nt);
    void (*residual_rmsnorm_forward_bf16)(float *res, uint16_t *out, float *rstd, const float *a, const float *b,
                                          Dropout d, const float *w, int N, int C, float eps, int nt);
    void (*rmsnorm_backward)(float *dinp, float *dw, float *scratch, const float *dout, const float *inp,
                             const float *w, const float *rstd, int N, int C, int acc, int nt);
    void (*rope_table)(float *cs, int T, int hs, const double *inv_freq);
    void (*rope_forward)(float *qkv, const float *cs, const int32_t *pos, int B, int T, int NH, int KV, int hs,
                         int pos0, int nt);
    void (*rope_backward)(float *dqkv, const float *cs, const int32_t *pos, int B, int T, int NH, int KV, int hs,
                          int pos0, int nt);
    void (*swiglu_forward)(float *out, const float *h, int N, int F, int nt);
    void (*swiglu_forward_bf16)(uint16_t *out, const float *h, int N, int F, int nt);
    void (*swiglu_backward)(float *dh, const float *dout, const float *h, int N, int F, int nt);
    void (*swiglu_backward_bf16)(uint16_t *dh, const float *dout, const float *h, int N, int F, int nt);
    void (*attention_forward)(float *out, float *lse, float *scratch, const float *qkv, const int32_t *pos, int B,
                              int T, int NH, int KV, int hs, float scale, Dropout d, int lowp,
                              int nt);                                             /* attention_gqa_forward */
    void (*attention_backward)(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                               const float *lse, const int32_t *pos, int B, int T, int NH, int KV, int hs, float scale,
                               Dropout d, int lowp, int nt);                       /* attention_gqa_backward */
    void (*attention_decode)(float *out, float *scores, const float *q, const float *K, const float *V, int pos,
                             int NH, int KV, int hs, float scale, int nt);       /* attention_decode_forward */
    void (*gelu_forward)(float *out, const float *inp, size_t n, int nt);
    void (*gelu_backward)(float *dinp, const float *dout, const float *inp, size_t n, int nt);
    void (*gelu_forward_bf16)(uint16_t *out, const float *inp, size_t n, int nt);
    void (*gelu_backward_bf16)(uint16_t *dinp_lp, float *colsum, float *sums, const float *dout, const float *inp, int N,
                               int OC, int acc, int nt);
    void (*bias_add_rows)(float *x, const float *bias, int N, int C, int nt);
    void (*residual_forward)(float *out, const float *a, const float *b, size_t n, Dropout d, int nt);
    void (*dropout_backward)(float *out, const float *dout, size_t n, Dropout d, int nt);
    void (*cast_bf16)(uint16_t *dst, const float *src, size_t n, int nt);
    void (*cast_bf16_colsum)(uint16_t *dst, float *colsum, float *sums, const float *src, int N, int OC, int acc, int nt);
    void (*cast_fp16)(uint16_t *dst, const float *src, size_t n, int nt);

    /* ---- GEMMs (kernels.h's linear layers over matmul.h) ---- */
    void (*matmul_forward)(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC,
                           int nt);
    void (*matmul_forward_lp)(float *out, const uint16_t *inp_lp, const uint16_t *w_lp, const float *bias, int N,
                              int C, int OC);
    void (*matmul_backward_lp)(float *dinp, float *dw, const uint16_t *dout_lp, const uint16_t *inp_lp,
                               const uint16_t *w_lp, int N, int C, int OC, int acc);
    void (*matmul_forward_p)(const MatPrec *mp, float *out, const float *inp, const float *w, const uint16_t *w_lp,
                             const float *bias, int N, int C, int OC, int nt);
    void (*matmul_backward_p)(const MatPrec *mp, float *dinp, float *dw, float *dbias, const float *dout,
                              const float *inp, const float *w, const uint16_t *w_lp, int N, int C, int OC, int acc,
                              int nt);
    void (*head_forward_backward)(float *losses, float *dx, float *dwte, float *logits, const float *x,
                                  const float *wte, const int32_t *targets, int n, int C, int V, int Vp, float dscale,
                                  int chunk, int acc, int nt, float *probs_out, double *ms_fwd, double *ms_bwd);
    void (*head_forward_backward_p)(const MatPrec *mp, float *losses, float *dx, float *dwte, float *logits,
                                    const float *x, const float *wte, const uint16_t *wte_lp, const int32_t *targets,
                                    int n, int C, int V, int Vp, float dscale, int chunk, int acc, int nt,
                                    float *probs_out, const HeadSample *smp, double *ms_fwd, double *ms_bwd);
    void (*head_forward_backward_vp)(const MatPrec *mp, float *losses, float *dx, float *dwte, float *logits,
                                     float *stats, const float *x, const float *wte, const uint16_t *wte_lp,
                                     const int32_t *targets, int n, int C, int v0, int Vr, int Vl, float dscale,
                                     int chunk, int acc, int nt, HeadReduceFn reduce, void *ctx, double *ms_fwd,
                                     double *ms_bwd);

    /* ---- the optimizer on backend memory (NULL on host-addressable backends: optim/ runs there) ----
     * optim_update: optim_step_lowp's rule on n elements of one range (params p, grads g, moments m,
     * v; lowp: the working copy, rounded from the updated p when s->lowp, may be NULL), elementwise.
     * sumsq: Σ x² in optim_l2_norm's partition (4096-element chunks, the chunks' sums added in double
     * in order); within a chunk the backend's order and accumulator (CUDA: fp32, thread strides then
     * a fixed tree; the CPU emulator, train/devemu.c: double in index order, the host trainer's
     * par_grad_norm, so its runs equal the host's bit for bit); the caller takes sqrt over its ranges. */
    void (*optim_update)(const BackendOptStep *s, float *p, const float *g, float *m, float *v, uint16_t *lowp,
                         size_t n);
    double (*sumsq)(const float *x, size_t n);
} Backend;

/* The CPU backend: kernels.h over oneDNN (matmul.h), OpenMP threads, host memory. */
const Backend *backend_cpu(void);

/* The CUDA backend (backend_cuda.cu; docs/cuda.md): cuBLASLt GEMMs and the .cu kernels on device
 * memory of GPU 0, host_addressable = 0. Defined only in a build with ST_CUDA (ST_HAVE_CUDA); the
 * device is opened at the first call that needs it, so a machine without a GPU can hold the table,
 * and every entry then records the failure (take_error) instead of running. */
const Backend *backend_cuda(void);

/* The backend called `name` ("cpu"; "cuda" where the program was built with it), for --device.
 * ST_ERR_INPUT naming --device, what was expected and what was found, for any other name. */
Status backend_find(const char *name, const Backend **out, Err *err);

/* The names this build offers, for --help and error messages ("cpu" or "cpu, cuda"). */
const char *backend_names(void);

/* Which of ndev GPUs a process uses (docs/cuda.md §6, "Which GPU a rank uses"): `device`
 * (ST_CUDA_DEVICE) when not NULL, which must be an index below ndev; else the process's rank on its
 * node (`local_rank`: the launcher's OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID) modulo ndev, so
 * ranks spread over a node's GPUs and share them round robin (two ranks on one GPU: both 0); else 0.
 * -1 with err set (naming the variable and the value) when a value is not a valid index. */
int backend_device_index(const char *device, const char *local_rank, int ndev, Err *err);

#endif
