/* mma.h — the CPU emulation of CUDA (tests/cuemu): the warp matrix API (nvcuda::wmma) for 16×16×16
 * tiles of bf16 operands with fp32 accumulators. A fragment's element-to-lane mapping is
 * unspecified on a GPU, so code that only loads, stores, fills and multiplies fragments cannot
 * depend on it: here every lane holds the whole tile. Each call is warp-collective on a GPU; here it
 * starts with a __syncwarp (every lane must reach it) and checks what the GPU requires of its
 * pointer (256-bit alignment) and leading dimension (a multiple of 16 bytes). Every lane stores the
 * whole tile, so a missing __syncwarp between a store and other lanes' reads cannot show here. */
#ifndef CUEMU_MMA_H
#define CUEMU_MMA_H
#include <string.h>
#include "cuda_bf16.h"
#include "cuda_runtime.h"

void cuemu_wmma_check(const void *p, unsigned ldm, unsigned elem_bytes, const char *what);

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K> struct shape_of;
template <int M, int N, int K> struct shape_of<matrix_a, M, N, K> { enum { R = M, C = K }; };
template <int M, int N, int K> struct shape_of<matrix_b, M, N, K> { enum { R = K, C = N }; };
template <int M, int N, int K> struct shape_of<accumulator, M, N, K> { enum { R = M, C = N }; };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    enum { R = shape_of<Use, M, N, K>::R, C = shape_of<Use, M, N, K>::C, num_elements = R * C };
    T x[R * C];
};

static inline float cuemu_wf(float v) { return v; }
static inline float cuemu_wf(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class Use, int M, int N, int K, class T>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, row_major> &f, const T *p, unsigned ldm) {
    __syncwarp();
    cuemu_wmma_check(p, ldm, sizeof(T), "load_matrix_sync");
    for (int i = 0; i < f.R; i++)
        for (int j = 0; j < f.C; j++) f.x[i * f.C + j] = p[(size_t)i * ldm + j];
}
template <class Use, int M, int N, int K, class T>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, col_major> &f, const T *p, unsigned ldm) {
    __syncwarp();
    cuemu_wmma_check(p, ldm, sizeof(T), "load_matrix_sync");
    for (int i = 0; i < f.R; i++)
        for (int j = 0; j < f.C; j++) f.x[i * f.C + j] = p[(size_t)j * ldm + i];
}
template <int M, int N, int K>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, float> &f, const float *p, unsigned ldm,
                                    layout_t l) {
    __syncwarp();
    cuemu_wmma_check(p, ldm, sizeof(float), "load_matrix_sync");
    for (int i = 0; i < f.R; i++)
        for (int j = 0; j < f.C; j++)
            f.x[i * f.C + j] = l == mem_row_major ? p[(size_t)i * ldm + j] : p[(size_t)j * ldm + i];
}
template <int M, int N, int K>
static inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f, unsigned ldm,
                                     layout_t l) {
    __syncwarp();
    cuemu_wmma_check(p, ldm, sizeof(float), "store_matrix_sync");
    for (int i = 0; i < f.R; i++)
        for (int j = 0; j < f.C; j++)
            (l == mem_row_major ? p[(size_t)i * ldm + j] : p[(size_t)j * ldm + i]) = f.x[i * f.C + j];
}
template <class Use, int M, int N, int K, class T, class L>
static inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, T v) {
    for (int i = 0; i < f.num_elements; i++) f.x[i] = v;
}
/* d = a·b + c in fp32: the products of bf16 operands are exact in fp32, summed in k order.
 * Every lane of a warp holds the same tiles here and its lanes run one after the other between two
 * exchanges, so the first lane computes the product and the others find it in a one-entry memo of
 * this OS thread, keyed on the operands byte for byte (a lane whose operands differ computes its
 * own): the result is the same function of the operands, 32 times cheaper (under the sanitizers
 * the tensor-core attention's products were most of test_backend_kernels_cuemu's time). */
template <int M, int N, int K, class T> struct cuemu_mma_memo {
    T a[M * K], b[K * N];
    float c[M * N], d[M * N];
    int valid;
};
template <int M, int N, int K, class T, class LA, class LB>
static inline void mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, T, LA> &a,
                            const fragment<matrix_b, M, N, K, T, LB> &b,
                            const fragment<accumulator, M, N, K, float> &c) {
    __syncwarp();
    static thread_local cuemu_mma_memo<M, N, K, T> memo;
    if (memo.valid && !memcmp(memo.a, a.x, sizeof memo.a) && !memcmp(memo.b, b.x, sizeof memo.b) &&
        !memcmp(memo.c, c.x, sizeof memo.c)) {
        memcpy(d.x, memo.d, sizeof memo.d);
        return;
    }
    float af[M * K], bt[N * K]; /* b transposed: both operands read along k */
    for (int i = 0; i < M * K; i++) af[i] = cuemu_wf(a.x[i]);
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++) bt[j * K + k] = cuemu_wf(b.x[k * N + j]);
    memcpy(memo.a, a.x, sizeof memo.a), memcpy(memo.b, b.x, sizeof memo.b), memcpy(memo.c, c.x, sizeof memo.c);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = memo.c[i * N + j];
            for (int k = 0; k < K; k++) s += af[i * K + k] * bt[j * K + k];
            memo.d[i * N + j] = s;
        }
    memo.valid = 1;
    memcpy(d.x, memo.d, sizeof memo.d);
}
} // namespace wmma
} // namespace nvcuda
#endif
