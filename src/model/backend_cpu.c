/* backend_cpu.c — the CPU backend of the model's seam (backend.h): the layer kernels of kernels.c,
 * oneDNN's GEMMs through matmul.c, OpenMP threads, host memory counted by core/mem. Its entries
 * are those functions themselves, so the model computes through the table exactly what it computed
 * calling them directly. */
#include "model/backend.h"

#include <stdlib.h>
#include <string.h>

#include "model/matmul.h"

static void cpu_copy(void *dst, const void *src, size_t bytes) {
    if (bytes) memcpy(dst, src, bytes);
}
static void cpu_zero(void *dst, size_t bytes) {
    if (bytes) memset(dst, 0, bytes);
}
static void cpu_sync(void) {} /* every CPU kernel returns when its work is done */

static const Backend CPU = {
    .name = "cpu",
    .host_addressable = 1,
    .alloc = mem_alloc,
    .free = mem_free,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .to_host = cpu_copy,
    .from_host = cpu_copy,
    .sync = cpu_sync,
    .take_error = mm_take_error,
    .scale_inplace = scale_inplace,
    .sum_ordered = sum_ordered,
    .add_or_set = add_or_set,
    .encoder_forward = encoder_forward,
    .encoder_backward = encoder_backward,
    .encoder_forward_vp = encoder_forward_vp,
    .encoder_backward_vp = encoder_backward_vp,
    .layernorm_forward = layernorm_forward,
    .layernorm_forward_bf16 = layernorm_forward_bf16,
    .residual_layernorm_forward = residual_layernorm_forward,
    .residual_layernorm_forward_bf16 = residual_layernorm_forward_bf16,
    .layernorm_backward = layernorm_backward,
    .rmsnorm_forward = rmsnorm_forward,
    .rmsnorm_forward_bf16 = rmsnorm_forward_bf16,
    .residual_rmsnorm_forward = residual_rmsnorm_forward,
    .residual_rmsnorm_forward_bf16 = residual_rmsnorm_forward_bf16,
    .rmsnorm_backward = rmsnorm_backward,
    .rope_table = rope_table,
    .rope_forward = rope_forward,
    .rope_backward = rope_backward,
    .swiglu_forward = swiglu_forward,
    .swiglu_forward_bf16 = swiglu_forward_bf16,
    .swiglu_backward = swiglu_backward,
    .swiglu_backward_bf16 = swiglu_backward_bf16,
    .attention_forward = attention_gqa_forward,
    .attention_backward = attention_gqa_backward,
    .gelu_forward = gelu_forward,
    .gelu_backward = gelu_backward,
    .gelu_forward_bf16 = gelu_forward_bf16,
    .gelu_backward_bf16 = gelu_backward_bf16,
    .bias_add_rows = bias_add_rows,
    .residual_forward = residual_forward,
    .dropout_backward = dropout_backward,
    .cast_bf16 = cast_bf16,
    .cast_bf16_colsum = cast_bf16_colsum,
    .cast_fp16 = cast_fp16,
    .matmul_forward = matmul_forward,
    .matmul_forward_lp = matmul_forward_lp,
    .matmul_backward_lp = matmul_backward_lp,
    .matmul_forward_p = matmul_forward_p,
    .matmul_backward_p = matmul_backward_p,
    .head_forward_backward = head_forward_backward,
    .head_forward_backward_p = head_forward_backward_p,
    .head_forward_backward_vp = head_forward_backward_vp,
    /* optim_update, sumsq: NULL, the optimizer runs in optim/ on the host memory of this backend */
};

const Backend *backend_cpu(void) { return &CPU; }

#ifdef ST_HAVE_CUDA
const char *backend_names(void) { return "cpu, cuda"; }
#else
const char *backend_names(void) { return "cpu"; }
#endif

/* A non-negative decimal integer (the whole string), else -1. */
static long parse_index(const char *s) {
    if (!s || *s < '0' || *s > '9') return -1;
    char *end;
    long v = strtol(s, &end, 10);
    return *end ? -1 : v;
}

int backend_device_index(const char *device, const char *local_rank, int ndev, Err *err) {
    if (ndev < 1) return err_set(err, ST_ERR_RUNTIME, "no GPU to choose from (%d devices)", ndev), -1;
    if (device) {
        long d = parse_index(device);
        if (d < 0 || d >= ndev)
            return err_set(err, ST_ERR_INPUT, "ST_CUDA_DEVICE: expected a device index in [0, %d), found '%s'", ndev,
                           device), -1;
        return (int)d;
    }
    if (local_rank) {
        long r = parse_index(local_rank);
        if (r < 0)
            return err_set(err, ST_ERR_INPUT, "the launcher's local rank: expected a non-negative integer, found '%s'",
                           local_rank), -1;
        return (int)(r % ndev);
    }
    return 0;
}

Status backend_find(const char *name, const Backend **out, Err *err) {
    if (name && !strcmp(name, "cpu")) return *out = &CPU, ST_OK;
#ifdef ST_HAVE_CUDA
    if (name && !strcmp(name, "cuda")) return *out = backend_cuda(), ST_OK;
#endif
    if (name && !strcmp(name, "cuda"))
        return err_set(err, ST_ERR_INPUT, "--device: expected one of %s, found cuda: this build has no CUDA backend",
                       backend_names());
    return err_set(err, ST_ERR_INPUT, "--device: expected one of %s, found '%s'", backend_names(), name ? name : "");
}
