/* cuemu.cc — CUDA emulated on the CPU, for tests (docs/cuda.md section 4, "The CUDA emulation").
 *
 * Why. The CUDA backend (the .cu files of src/model) is compiled on every machine but only a GPU
 * runs it, and this project's machines rarely have one. The emulator runs the backend's own source — its
 * kernels, its launches, its host code and its cuBLASLt calls — on the CPU, so CTest checks them
 * against the same oracles as the GPU suite (test_backend_kernels, test_cuda_model, the trainer's
 * device runs). It is a test tool with its own build of the backend (cu2cc.pl rewrites the two
 * non-C++ constructs; the shim headers in include/ supply the rest); it is never the CUDA backend
 * of a user's build and says so in its device name.
 *
 * How a launch runs. Blocks run one after another on the calling thread; each thread of a block
 * is a fiber (its own stack, switched by cuemu_swap below). A fiber runs until it reaches a
 * barrier (__syncthreads, __syncthreads_or) or a warp exchange (__shfl_sync, __shfl_xor_sync,
 * __ballot_sync, __syncwarp) or returns. Each warp in turn runs its lanes in order and completes
 * its exchanges once every lane the mask names has arrived, until its lanes have exited or wait
 * at the block barrier; the barrier opens when every live thread of the block is at it.
 * Running each thread as far as it can before the others start is the harshest legal interleaving
 * for a missing barrier: a thread that reads shared memory another thread has not yet written
 * reads the NaN the block's dynamic shared memory is filled with. CUEMU_ORDER=reverse runs blocks,
 * warps and lanes in descending order: a kernel whose result depends on the order (a thread reading
 * what a lower thread wrote without a barrier, a block reading another block's output) gives a
 * different answer in the two orders, so CTest runs the kernel tests in both (a racecheck of sorts).
 *
 * What it checks, where a GPU would fault, hang or silently misbehave (each reported on stderr):
 *  - launch configuration: block size 1..1024, grid limits, dynamic shared memory <= 48 KiB (the
 *    limit without cudaFuncSetAttribute): recorded for cudaGetLastError and nothing runs, as on a
 *    GPU;
 *  - deadlock (a barrier some live thread never reaches), a warp exchange whose mask names a lane
 *    that has exited or does not exist, lanes of one warp waiting at different exchanges, a
 *    shuffle reading a lane outside the mask, a write past the dynamic shared memory: the process
 *    aborts with the kernel, block and thread;
 *  - a kernel's pointer arguments: NULL or inside device memory (cuemu_check_args, at each launch);
 *  - runtime calls: a copy or memset must lie inside one device allocation on its device side and
 *    outside device memory on its host side, cudaFree takes only what cudaMalloc returned; new
 *    device memory is filled with NaN bytes (0xFF), as uninitialised GPU memory is not zero;
 *  - cuBLASLt: attribute sizes as documented, matching shapes and types, leading dimensions,
 *    every operand inside device memory, pointers aligned to the minimum the heuristic was
 *    promised, the workspace in device memory. The product is computed in double from the
 *    operands as stored (bf16 widened exactly) and rounded once to the output type; with beta 0
 *    C is not read (cuBLAS's rule: a NaN there does not propagate).
 * Under AddressSanitizer (the ASan tree), device memory is heap memory, so a kernel that reads or
 * writes past an allocation is caught as compute-sanitizer's memcheck would.
 *
 * What it does not model: timing, and races beyond what the two orders show (blocks overlapping in
 * time, interleavings inside a warp between exchanges: compute-sanitizer's racecheck on the GPU
 * stays necessary), the GPU's own expf/logf ulps, the order of cuBLASLt's fp32 accumulation, TF32,
 * streams other than the default one. One host thread launches at a time (a second one aborts). */
#include <dlfcn.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <map>

#include "cublasLt.h"
#include "cuda_runtime.h"
#undef dlopen
#undef dlsym
#undef dlerror
#undef dlclose

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define CUEMU_ASAN 1
#define CUEMU_STACK (512u << 10)
#else
#define CUEMU_ASAN 0
#define CUEMU_STACK (64u << 10)
#endif

#define CUEMU_SMEM_MAX 49152 /* dynamic shared memory without cudaFuncSetAttribute */
#define CUEMU_GUARD 64       /* canary bytes after the dynamic shared memory */

/* One line on stderr: "cuemu: " prefix message. */
static void say(const char *prefix, const char *fmt, va_list ap) {
    fprintf(stderr, "cuemu: %s", prefix);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    fflush(stderr);
}
#define SAY(prefix)                                                                                         \
    do {                                                                                                    \
        va_list ap;                                                                                         \
        va_start(ap, fmt);                                                                                  \
        say(prefix, fmt, ap);                                                                               \
        va_end(ap);                                                                                         \
    } while (0)
/* What a GPU would not run as written: the process aborts. */
static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
    SAY("");
    abort();
}
/* A call a GPU refuses with an error code: the caller returns it. */
static void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void warn(const char *fmt, ...) { SAY(""); }

/* ------------------------------------------------------------------------------------------ */
/* Errors and device memory                                                                   */
/* ------------------------------------------------------------------------------------------ */

static cudaError_t g_last = cudaSuccess; /* what cudaGetLastError returns and clears */
static cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) g_last = e;
    return e;
}

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static std::map<uintptr_t, size_t> g_dev; /* device allocations: base -> bytes */

/* The allocation holding p (its base, bytes), or 0. */
static int dev_find(const void *p, uintptr_t *base, size_t *bytes) {
    pthread_mutex_lock(&g_mu);
    int ok = 0;
    auto it = g_dev.upper_bound((uintptr_t)p);
    if (it != g_dev.begin()) {
        --it;
        if ((uintptr_t)p < it->first + it->second) *base = it->first, *bytes = it->second, ok = 1;
    }
    pthread_mutex_unlock(&g_mu);
    return ok;
}
/* [p, p + n) lies inside one device allocation. */
static int dev_range(const void *p, size_t n) {
    uintptr_t b;
    size_t sz;
    return dev_find(p, &b, &sz) && (uintptr_t)p + n <= b + sz;
}
static int is_dev(const void *p) {
    uintptr_t b;
    size_t sz;
    return dev_find(p, &b, &sz);
}

cudaError_t cudaGetDeviceCount(int *n) {
    const char *e = getenv("CUEMU_DEVICES"); /* "0": the machine without a GPU, for the refusal paths */
    *n = e && !strcmp(e, "0") ? 0 : 1;
    return ret(*n ? cudaSuccess : cudaErrorNoDevice);
}
cudaError_t cudaSetDevice(int dev) {
    int n;
    cudaGetDeviceCount(&n);
    return ret(dev >= 0 && dev < n ? cudaSuccess : cudaErrorInvalidDevice);
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev) {
    if (dev != 0) return ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cuemu (CUDA emulated on the CPU, tests only)");
    p->totalGlobalMem = (size_t)80 << 30;
    p->sharedMemPerBlock = CUEMU_SMEM_MAX;
    p->multiProcessorCount = 132;
    p->major = 9, p->minor = 0;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; } /* every launch ran to its end */
cudaError_t cudaGetLastError(void) {
    cudaError_t e = g_last;
    g_last = cudaSuccess;
    return e;
}
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    }
    return "unknown error";
}

cudaError_t cudaMalloc(void **p, size_t bytes) {
    *p = NULL;
    if (bytes == 0) return cudaSuccess;
    void *m = NULL; /* exactly `bytes`, so ASan's redzone starts where the allocation ends */
    if (posix_memalign(&m, 256, bytes)) return ret(cudaErrorMemoryAllocation);
    memset(m, 0xFF, bytes); /* uninitialised device memory reads as NaN, not as zero */
    pthread_mutex_lock(&g_mu);
    g_dev[(uintptr_t)m] = bytes;
    pthread_mutex_unlock(&g_mu);
    *p = m;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    pthread_mutex_lock(&g_mu);
    auto it = g_dev.find((uintptr_t)p);
    int found = it != g_dev.end();
    if (found) g_dev.erase(it);
    pthread_mutex_unlock(&g_mu);
    if (!found) {
        warn("cudaFree(%p): not a pointer cudaMalloc returned", p);
        return ret(cudaErrorInvalidDevicePointer);
    }
    free(p);
    return cudaSuccess;
}
/* Bytes of device memory allocated and not freed (cuemu_held). */
static size_t cuemu_device_bytes(void) {
    pthread_mutex_lock(&g_mu);
    size_t n = 0;
    for (auto &kv : g_dev) n += kv.second;
    pthread_mutex_unlock(&g_mu);
    return n;
}

cudaError_t cudaMallocHost(void **p, size_t bytes) {
    const char *f = getenv("CUEMU_FAIL"); /* "malloc_host": pinned memory refused (an open failing part-way) */
    if (f && !strcmp(f, "malloc_host")) return *p = NULL, ret(cudaErrorMemoryAllocation);
    *p = malloc(bytes ? bytes : 1);
    return *p ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}
cudaError_t cudaFreeHost(void *p) {
    free(p);
    return cudaSuccess;
}

static const char *kind_name(cudaMemcpyKind k) {
    static const char *names[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice", "Default"};
    return (unsigned)k <= 4 ? names[k] : "?";
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    if (n == 0) return cudaSuccess;
    if (kind == cudaMemcpyDefault)
        kind = is_dev(dst) ? (is_dev(src) ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                           : (is_dev(src) ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    int dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    int src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if ((unsigned)kind > 3) return ret(cudaErrorInvalidMemcpyDirection);
    if (dst_dev ? !dev_range(dst, n) : is_dev(dst)) {
        warn("cudaMemcpy %s of %zu bytes: destination %p is %s", kind_name(kind), n, dst,
             dst_dev ? "not inside one device allocation" : "device memory");
        return ret(cudaErrorInvalidValue);
    }
    if (src_dev ? !dev_range(src, n) : is_dev(src)) {
        warn("cudaMemcpy %s of %zu bytes: source %p is %s", kind_name(kind), n, src,
             src_dev ? "not inside one device allocation" : "device memory");
        return ret(cudaErrorInvalidValue);
    }
    memmove(dst, src, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t) {
    return cudaMemcpy(dst, src, n, kind);
}
cudaError_t cudaMemset(void *dst, int value, size_t n) {
    if (n == 0) return cudaSuccess;
    if (!dev_range(dst, n)) {
        warn("cudaMemset of %zu bytes at %p: not inside one device allocation", n, dst);
        return ret(cudaErrorInvalidValue);
    }
    memset(dst, value, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *dst, int value, size_t n, cudaStream_t) { return cudaMemset(dst, value, n); }

/* ------------------------------------------------------------------------------------------ */
/* Fibers                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* cuemu_swap(save, to): saves the callee-saved registers and the stack pointer (into *save), then
 * resumes the context whose stack pointer is `to`. A new fiber's stack is laid out as if cuemu_swap
 * had saved it, returning into cuemu_tramp, which calls r13. (The SSE and x87 control words are
 * not switched: no kernel changes them.) */
extern "C" void cuemu_swap(void **save, void *to);
extern "C" void cuemu_tramp(void);
__asm__(".text\n"
        ".globl cuemu_swap\n"
        ".type cuemu_swap,@function\n"
        "cuemu_swap:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size cuemu_swap, .-cuemu_swap\n"
        ".globl cuemu_tramp\n"
        ".type cuemu_tramp,@function\n"
        "cuemu_tramp:\n"
        "  callq *%r13\n"
        "  ud2\n"
        ".size cuemu_tramp, .-cuemu_tramp\n");

enum { F_RUN, F_BAR, F_WARP, F_DONE };
enum { W_SHFL_IDX = 0, W_SHFL_XOR = 1, W_BALLOT = 2, W_SYNCWARP = 3 };
static const char *const W_NAMES[] = {"__shfl_sync", "__shfl_xor_sync", "__ballot_sync", "__syncwarp"};

typedef struct {
    void *sp;
    char *stack; /* lowest usable byte (a guard page lies below) */
    int state;
    uint3 tid;
    /* the exchange or barrier it waits at */
    int op, arg, width, pred;
    unsigned mask;
    uint64_t val, res;
} Fiber;

static struct {
    Fiber *f;
    int cap, n;
    char *stacks;
    Fiber *cur;
    void *main_sp;
    const char *kname;
    char *smem;
    size_t smem_bytes, smem_cap;
    void (*body)(void *);
    void *ctx;
    int reverse; /* CUEMU_ORDER=reverse: blocks, warps and lanes in descending order */
#if CUEMU_ASAN
    const void *main_bottom;
    size_t main_size;
#endif
} S;

CuemuCoords cuemu_xy;
static int g_launching; /* a launch is running (from any host thread) */

static void where(char *buf, size_t n, const Fiber *f) {
    snprintf(buf, n, "kernel %s, block (%u,%u,%u), thread (%u,%u,%u)", S.kname, cuemu_xy.block.x, cuemu_xy.block.y,
             cuemu_xy.block.z, f->tid.x, f->tid.y, f->tid.z);
}

static void grow(int n) {
    if (n <= S.cap) return;
    if (S.stacks) munmap(S.stacks, (size_t)S.cap * (CUEMU_STACK + 4096));
    free(S.f);
    size_t each = CUEMU_STACK + 4096, total = (size_t)n * each;
    S.stacks = (char *)mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (S.stacks == MAP_FAILED) die("mmap of %zu bytes of fiber stacks failed", total);
    S.f = (Fiber *)calloc((size_t)n, sizeof(Fiber));
    if (!S.f) die("out of memory");
    for (int i = 0; i < n; i++) {
        mprotect(S.stacks + (size_t)i * each, 4096, PROT_NONE); /* a stack overflow faults */
        S.f[i].stack = S.stacks + (size_t)i * each + 4096;
    }
    S.cap = n;
}

extern "C" void cuemu_fiber_main(void);

/* From the running fiber to the next runnable lane of its warp (lanes chain without passing
 * through the scheduler: half the switches), else back to the scheduler; returns when resumed. */
static void to_main(void) {
    Fiber *f = S.cur, *next = NULL;
    int i = (int)(f - S.f), w0 = i & ~31, end = w0 + 32 < S.n ? w0 + 32 : S.n;
    if (S.reverse) {
        for (int j = i - 1; j >= w0; j--)
            if (S.f[j].state == F_RUN) {
                next = &S.f[j];
                break;
            }
    } else {
        for (int j = i + 1; j < end; j++)
            if (S.f[j].state == F_RUN) {
                next = &S.f[j];
                break;
            }
    }
    if (next) S.cur = next, cuemu_xy.thread = next->tid;
#if CUEMU_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(f->state == F_DONE ? NULL : &fake, next ? (const void *)next->stack : S.main_bottom,
                                   next ? CUEMU_STACK : S.main_size);
    cuemu_swap(&f->sp, next ? next->sp : S.main_sp);
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#else
    cuemu_swap(&f->sp, next ? next->sp : S.main_sp);
#endif
}

extern "C" void cuemu_fiber_main(void) {
#if CUEMU_ASAN
    __sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
    S.body(S.ctx);
    S.cur->state = F_DONE;
    to_main();
    __builtin_unreachable();
}

static void fiber_start(Fiber *f) {
    uintptr_t top = ((uintptr_t)f->stack + CUEMU_STACK - 16) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 72); /* 7 words popped: rsp = top - 16 (16-aligned) before the call */
    sp[0] = 0, sp[1] = 0;                          /* r15, r14 */
    sp[2] = (uint64_t)(uintptr_t)&cuemu_fiber_main; /* r13: what the trampoline calls */
    sp[3] = 0, sp[4] = 0, sp[5] = 0;               /* r12, rbx, rbp */
    sp[6] = (uint64_t)(uintptr_t)&cuemu_tramp;      /* the return address */
    f->sp = sp;
    f->state = F_RUN;
#if CUEMU_ASAN
    __asan_unpoison_memory_region(f->stack, CUEMU_STACK);
#endif
}

static void resume(Fiber *f) {
    S.cur = f;
    cuemu_xy.thread = f->tid;
#if CUEMU_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, f->stack, CUEMU_STACK);
    cuemu_swap(&S.main_sp, f->sp);
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#else
    cuemu_swap(&S.main_sp, f->sp);
#endif
    S.cur = NULL;
}

static Fiber *self(const char *what) {
    if (!S.cur) die("%s called outside a kernel", what);
    return S.cur;
}

void __syncthreads(void) {
    Fiber *f = self("__syncthreads");
    f->state = F_BAR, f->pred = 0;
    to_main();
}
int __syncthreads_or(int pred) {
    Fiber *f = self("__syncthreads_or");
    f->state = F_BAR, f->pred = pred != 0;
    to_main();
    return (int)f->res;
}
static uint64_t warp_op(const char *what, int op, unsigned mask, uint64_t v, int arg, int width) {
    Fiber *f = self(what);
    if (width < 1 || width > 32 || (width & (width - 1))) die("%s with width %d (a power of two <= 32)", what, width);
    f->state = F_WARP, f->op = op, f->mask = mask, f->val = v, f->arg = arg, f->width = width;
    to_main();
    return f->res;
}
void __syncwarp(unsigned mask) { warp_op("__syncwarp", W_SYNCWARP, mask, 0, 0, 32); }
uint64_t cuemu_shfl(unsigned mask, uint64_t v, int arg, int width, int kind) {
    return warp_op(W_NAMES[kind], kind, mask, v, arg, width);
}
unsigned __ballot_sync(unsigned mask, int pred) {
    return (unsigned)warp_op("__ballot_sync", W_BALLOT, mask, (uint64_t)(pred != 0), 0, 32);
}

/* Warp w's exchange, if every lane its mask names has arrived: results handed out, lanes runnable.
 * Returns 1 if released. Dies on what a GPU would not run as written (see the file comment). */
static int release_warp(int w0) {
    char at[256];
    int lanes = S.n - w0 < 32 ? S.n - w0 : 32, first = -1;
    for (int l = 0; l < lanes; l++)
        if (S.f[w0 + l].state == F_WARP) {
            first = l;
            break;
        }
    if (first < 0) return 0;
    Fiber *lead = &S.f[w0 + first];
    unsigned mask = lead->mask;
    int ready = 1;
    for (int l = 0; l < 32; l++) {
        Fiber *f = l < lanes ? &S.f[w0 + l] : NULL;
        int named = (mask >> l) & 1;
        if (f && f->state == F_WARP) {
            if (f->op != lead->op || f->mask != mask) {
                where(at, sizeof at, f);
                die("%s: lanes of one warp wait at different exchanges (%s mask %08x; lane %d: %s mask %08x)", at,
                    W_NAMES[f->op], f->mask, first, W_NAMES[lead->op], mask);
            }
            if (!named) {
                where(at, sizeof at, f);
                die("%s: %s with mask %08x that does not name the calling lane %d", at, W_NAMES[f->op], mask, l);
            }
        }
        if (!named) continue;
        if (!f) {
            where(at, sizeof at, lead);
            die("%s: %s mask %08x names lane %d, which this block (%d threads) does not have", at, W_NAMES[lead->op],
                mask, l, S.n);
        }
        if (f->state == F_DONE) {
            where(at, sizeof at, lead);
            die("%s: %s mask %08x names lane %d, which has exited", at, W_NAMES[lead->op], mask, l);
        }
        if (f->state != F_WARP) ready = 0;
    }
    if (!ready) return 0;
    unsigned ballot = 0;
    for (int l = 0; l < lanes; l++)
        if ((mask >> l) & 1 && S.f[w0 + l].val) ballot |= 1u << l;
    for (int l = 0; l < lanes; l++) {
        Fiber *f = &S.f[w0 + l];
        if (!((mask >> l) & 1)) continue;
        int w = f->width, seg = l & ~(w - 1), src = l;
        if (f->op == W_SHFL_IDX) src = seg + (f->arg & (w - 1));
        if (f->op == W_SHFL_XOR) src = (l ^ f->arg) >= seg + w ? l : l ^ f->arg;
        if ((f->op == W_SHFL_IDX || f->op == W_SHFL_XOR) && !((mask >> src) & 1)) {
            where(at, sizeof at, f);
            die("%s: %s reads lane %d, outside the mask %08x", at, W_NAMES[f->op], src, mask);
        }
        f->res = f->op == W_BALLOT ? ballot : f->op == W_SYNCWARP ? 0 : S.f[w0 + src].val;
    }
    for (int l = 0; l < lanes; l++)
        if ((mask >> l) & 1) S.f[w0 + l].state = F_RUN;
    return 1;
}

/* One block: each warp in turn runs its lanes (in lane order, each as far as it goes) and completes
 * its exchanges until every lane has exited or waits at the block barrier; then the barrier opens. */
static void run_block(void) {
    for (int i = 0; i < S.n; i++) fiber_start(&S.f[i]);
    if (S.smem_bytes) memset(S.smem, 0xFF, S.smem_bytes + CUEMU_GUARD);
    for (;;) {
        int nw = (S.n + 31) / 32;
        for (int wi = 0; wi < nw; wi++) {
            int w0 = 32 * (S.reverse ? nw - 1 - wi : wi), lanes = S.n - w0 < 32 ? S.n - w0 : 32;
            do {
                for (int li = 0; li < lanes; li++) {
                    int l = S.reverse ? lanes - 1 - li : li;
                    if (S.f[w0 + l].state == F_RUN) resume(&S.f[w0 + l]);
                }
            } while (release_warp(w0));
        }
        int live = 0, at_bar = 0, orv = 0;
        for (int i = 0; i < S.n; i++) {
            live += S.f[i].state != F_DONE;
            at_bar += S.f[i].state == F_BAR;
            orv |= S.f[i].state == F_BAR && S.f[i].pred;
        }
        if (!live) break;
        if (at_bar == live) { /* threads that exited count as arrived, as on sm_70 and later */
            for (int i = 0; i < S.n; i++)
                if (S.f[i].state == F_BAR) S.f[i].res = (uint64_t)orv, S.f[i].state = F_RUN;
            continue;
        }
        /* Some lanes wait at an exchange their warp cannot complete (a named lane is at the barrier). */
        char at[256];
        for (int i = 0; i < S.n; i++)
            if (S.f[i].state == F_WARP) {
                where(at, sizeof at, &S.f[i]);
                break;
            }
        die("%s: deadlock: %d of %d live threads wait at __syncthreads, the others at a warp exchange whose lanes "
            "wait at the barrier",
            at, at_bar, live);
    }
    if (S.smem_bytes)
        for (int i = 0; i < CUEMU_GUARD; i++)
            if ((unsigned char)S.smem[S.smem_bytes + i] != 0xFF)
                die("kernel %s, block (%u,%u,%u): a write past its %zu bytes of dynamic shared memory", S.kname,
                    cuemu_xy.block.x, cuemu_xy.block.y, cuemu_xy.block.z, S.smem_bytes);
}

void cuemu_check_ptr(const char *kernel, int index, const void *p) {
    if (p && !is_dev(p))
        die("kernel %s: argument %d (%p) is not device memory (a GPU faults on it: an illegal address)", kernel, index,
            p);
}

void *cuemu_dyn_smem(void) {
    self("dynamic shared memory");
    return S.smem_bytes ? S.smem : NULL;
}

#define CUEMU_SMEM_OPTIN 232448 /* 227 KiB: the H100's and H200's most per block */
static std::map<const void *, int> g_smem_optin; /* cudaFuncSetAttribute's per-kernel limits */

cudaError_t cuemu_func_set_attribute(const void *fn, int attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > CUEMU_SMEM_OPTIN) {
        warn("cudaFuncSetAttribute(attribute %d, %d): not the shared-memory opt-in, or above %d bytes", attr, value,
             CUEMU_SMEM_OPTIN);
        return ret(cudaErrorInvalidValue);
    }
    pthread_mutex_lock(&g_mu);
    g_smem_optin[fn] = value;
    pthread_mutex_unlock(&g_mu);
    return cudaSuccess;
}

void cuemu_wmma_check(const void *p, unsigned ldm, unsigned elem_bytes, const char *what) {
    self(what);
    if ((uintptr_t)p % 32) die("kernel %s: wmma::%s at %p, not 256-bit aligned", S.kname, what, p);
    if ((ldm * elem_bytes) % 16)
        die("kernel %s: wmma::%s with ldm %u (elements of %u bytes): not a multiple of 16 bytes", S.kname, what, ldm,
            elem_bytes);
}

void cuemu_run(const void *fn, const char *name, void (*body)(void *), void *ctx, dim3 grid, dim3 block, size_t smem,
               cudaStream_t s) {
    if (S.cur) die("kernel %s launched from inside kernel %s (dynamic parallelism is not emulated)", name, S.kname);
    unsigned long threads = (unsigned long)block.x * block.y * block.z;
    const char *bad = NULL;
    if (threads < 1 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
        bad = "block size outside 1..1024 threads";
    else if (grid.x < 1 || grid.x > 0x7fffffffu || grid.y < 1 || grid.y > 65535 || grid.z < 1 || grid.z > 65535)
        bad = "grid outside 1..2^31-1 x 1..65535 x 1..65535";
    pthread_mutex_lock(&g_mu);
    auto opt = g_smem_optin.find(fn);
    size_t smem_max = opt != g_smem_optin.end() && opt->second > CUEMU_SMEM_MAX ? (size_t)opt->second : CUEMU_SMEM_MAX;
    pthread_mutex_unlock(&g_mu);
    if (!bad && smem > smem_max)
        bad = smem_max > CUEMU_SMEM_MAX ? "more dynamic shared memory than its cudaFuncSetAttribute allowed"
                                         : "more than 48 KiB of dynamic shared memory without cudaFuncSetAttribute";
    if (!bad && s != 0) bad = "a stream other than the default one";
    if (bad) {
        warn("launch of %s <<<(%u,%u,%u), (%u,%u,%u), %zu>>> refused: %s", name, grid.x, grid.y, grid.z, block.x,
             block.y, block.z, smem, bad);
        ret(cudaErrorInvalidConfiguration);
        return;
    }
    if (__atomic_exchange_n(&g_launching, 1, __ATOMIC_ACQUIRE))
        die("kernel %s launched while another host thread's launch of %s runs (one launcher at a time)", name,
            S.kname ? S.kname : "?");
    grow((int)threads);
#if CUEMU_ASAN
    if (!S.main_bottom) { /* the launching thread's stack, for ASan's fiber switches back to it */
        pthread_attr_t attr;
        void *addr;
        pthread_getattr_np(pthread_self(), &attr);
        pthread_attr_getstack(&attr, &addr, &S.main_size);
        pthread_attr_destroy(&attr);
        S.main_bottom = addr;
    }
#endif
    if (smem + CUEMU_GUARD > S.smem_cap) {
        free(S.smem);
        S.smem_cap = smem + CUEMU_GUARD;
        S.smem = NULL; /* 128-aligned, as a block's shared memory is (wmma needs 32) */
        if (posix_memalign((void **)&S.smem, 128, S.smem_cap)) S.smem = NULL;
        if (!S.smem) die("out of memory");
    }
    S.n = (int)threads, S.kname = name, S.body = body, S.ctx = ctx, S.smem_bytes = smem;
    for (unsigned i = 0; i < threads; i++) {
        S.f[i].tid.x = i % block.x;
        S.f[i].tid.y = i / block.x % block.y;
        S.f[i].tid.z = i / (block.x * block.y);
    }
    cuemu_xy.block_dim = uint3{block.x, block.y, block.z}, cuemu_xy.grid_dim = uint3{grid.x, grid.y, grid.z};
    const char *order = getenv("CUEMU_ORDER");
    S.reverse = order && !strcmp(order, "reverse");
    unsigned long nblocks = (unsigned long)grid.x * grid.y * grid.z;
    for (unsigned long bi = 0; bi < nblocks; bi++) {
        unsigned long b = S.reverse ? nblocks - 1 - bi : bi;
        cuemu_xy.block.x = (unsigned)(b % grid.x);
        cuemu_xy.block.y = (unsigned)(b / grid.x % grid.y);
        cuemu_xy.block.z = (unsigned)(b / ((unsigned long)grid.x * grid.y));
        run_block();
    }
    S.kname = NULL;
    __atomic_store_n(&g_launching, 0, __ATOMIC_RELEASE);
}

/* ------------------------------------------------------------------------------------------ */
/* cuBLASLt                                                                                   */
/* ------------------------------------------------------------------------------------------ */

struct CuemuLtContext {
    int open;
};
struct CuemuLtDesc {
    cublasComputeType_t compute;
    cudaDataType scale;
    int32_t ta, tb;
};
struct CuemuLtLayout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
};
struct CuemuLtPref {
    uint64_t ws;
    uint32_t schemes, align[4];
};
#define ALGO_MAGIC 0x63756575u

static cublasStatus_t lt_bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static cublasStatus_t lt_bad(const char *fmt, ...) {
    SAY("cuBLASLt: ");
    return CUBLAS_STATUS_INVALID_VALUE;
}

static int g_lt_handles; /* cublasLtCreate'd and not destroyed (cuemu_held) */

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = new CuemuLtContext{1};
    __atomic_add_fetch(&g_lt_handles, 1, __ATOMIC_RELAXED);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    if (h) __atomic_sub_fetch(&g_lt_handles, 1, __ATOMIC_RELAXED);
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale) {
    if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32)
        return lt_bad("compute type %d is not emulated", (int)compute);
    *d = new CuemuLtDesc{compute, scale, CUBLAS_OP_N, CUBLAS_OP_N};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t bytes) {
    if (attr != CUBLASLT_MATMUL_DESC_TRANSA && attr != CUBLASLT_MATMUL_DESC_TRANSB)
        return lt_bad("matmul descriptor attribute %d is not emulated", (int)attr);
    if (bytes != sizeof(int32_t)) return lt_bad("TRANSA/TRANSB take an int32_t, given %zu bytes", bytes);
    int32_t op;
    memcpy(&op, buf, 4);
    if (op != CUBLAS_OP_N && op != CUBLAS_OP_T && op != CUBLAS_OP_C) return lt_bad("operation %d", op);
    if (op == CUBLAS_OP_C) op = CUBLAS_OP_T; /* real types: conjugate transpose is the transpose */
    (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->ta : d->tb) = op;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    if (type != CUDA_R_32F && type != CUDA_R_16BF && type != CUDA_R_16F)
        return lt_bad("matrix type %d is not emulated", (int)type);
    *l = new CuemuLtLayout{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(const cublasLtMatrixLayout_t l) {
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = new CuemuLtPref{0, CUBLASLT_REDUCTION_SCHEME_MASK, {256, 256, 256, 256}};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t bytes) {
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        if (bytes != sizeof(uint64_t)) return lt_bad("MAX_WORKSPACE_BYTES takes a uint64_t, given %zu bytes", bytes);
        memcpy(&p->ws, buf, 8);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
        if (bytes != sizeof(uint32_t)) return lt_bad("REDUCTION_SCHEME_MASK takes a uint32_t, given %zu bytes", bytes);
        memcpy(&p->schemes, buf, 4);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
        if (bytes != sizeof(uint32_t)) return lt_bad("MIN_ALIGNMENT_*_BYTES take a uint32_t, given %zu bytes", bytes);
        memcpy(&p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, 4);
        return CUBLAS_STATUS_SUCCESS;
    }
    return lt_bad("preference attribute %d is not emulated", (int)attr);
}

static size_t type_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

/* The shapes and types cuBLASLt accepts: D (m, n) = op(A) (m, k) · op(B) (k, n), C like D. */
static cublasStatus_t lt_check(const CuemuLtDesc *d, const CuemuLtLayout *a, const CuemuLtLayout *b,
                               const CuemuLtLayout *c, const CuemuLtLayout *dl) {
    if (!d || !a || !b || !c || !dl) return lt_bad("a NULL descriptor or layout");
    uint64_t m = dl->rows, n = dl->cols;
    uint64_t am = d->ta ? a->cols : a->rows, ak = d->ta ? a->rows : a->cols;
    uint64_t bk = d->tb ? b->cols : b->rows, bn = d->tb ? b->rows : b->cols;
    if (am != m || bn != n || ak != bk)
        return lt_bad("shapes do not match: op(A) %llux%llu, op(B) %llux%llu, D %llux%llu", (unsigned long long)am,
                      (unsigned long long)ak, (unsigned long long)bk, (unsigned long long)bn, (unsigned long long)m,
                      (unsigned long long)n);
    if (c->rows != m || c->cols != n || c->type != dl->type) return lt_bad("C's layout differs from D's");
    const CuemuLtLayout *ls[4] = {a, b, c, dl};
    for (int i = 0; i < 4; i++)
        if (ls[i]->ld < (int64_t)(ls[i]->rows ? ls[i]->rows : 1))
            return lt_bad("matrix %c: leading dimension %lld below its %llu rows", "ABCD"[i], (long long)ls[i]->ld,
                          (unsigned long long)ls[i]->rows);
    if (a->type != b->type) return lt_bad("A and B types differ (%d, %d)", (int)a->type, (int)b->type);
    if (d->scale != CUDA_R_32F) return lt_bad("scale type %d with compute 32F", (int)d->scale);
    if (a->type == CUDA_R_32F && dl->type != CUDA_R_32F) return lt_bad("fp32 A, B with a non-fp32 D");
    if (a->type != CUDA_R_32F && dl->type != CUDA_R_32F && dl->type != a->type)
        return lt_bad("16-bit A, B with D of type %d", (int)dl->type);
    if (a->type != CUDA_R_32F && d->compute != CUBLAS_COMPUTE_32F) return lt_bad("16-bit inputs need COMPUTE_32F");
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dl, cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *returned) {
    *returned = 0;
    if (!h || !p) return lt_bad("heuristic without a handle or preference");
    if (requested < 1) return lt_bad("requestedAlgoCount %d", requested);
    cublasStatus_t s = lt_check(d, a, b, c, dl);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (p->schemes & ~(uint32_t)CUBLASLT_REDUCTION_SCHEME_MASK) return lt_bad("reduction scheme mask %#x", p->schemes);
    for (int i = 0; i < 4; i++) {
        uint32_t al = p->align[i];
        size_t eb = type_bytes(i < 2 ? a->type : dl->type);
        if (al == 0 || (al & (al - 1)))
            return lt_bad("minimum alignment %u of %c is not a power of two", al, "ABCD"[i]);
        if (al < eb) return CUBLAS_STATUS_NOT_SUPPORTED; /* no kernel reads elements misaligned to their size */
    }
    memset(&results[0], 0, sizeof results[0]);
    results[0].algo.data[0] = ALGO_MAGIC;
    for (int i = 0; i < 4; i++) results[0].algo.data[1 + i] = p->align[i];
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

static float lt_get(const void *p, cudaDataType t, size_t i) {
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    if (t == CUDA_R_16F) return _cvtsh_ss(h);
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}
static void lt_put(void *p, cudaDataType t, size_t i, double v) {
    float x = (float)v;
    if (t == CUDA_R_32F) {
        ((float *)p)[i] = x;
    } else if (t == CUDA_R_16F) {
        ((uint16_t *)p)[i] = (uint16_t)_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
        uint32_t u;
        memcpy(&u, &x, 4);
        ((uint16_t *)p)[i] = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    }
}

/* The operand's bytes from its first to its last element, which must lie in device memory. */
static int lt_in_dev(char which, const void *p, const CuemuLtLayout *l) {
    if (l->rows == 0 || l->cols == 0) return 1;
    size_t bytes = ((size_t)(l->cols - 1) * (size_t)l->ld + l->rows) * type_bytes(l->type);
    if (dev_range(p, bytes)) return 1;
    lt_bad("matrix %c (%llux%llu, ld %lld) at %p: its %zu bytes are not inside one device allocation", which,
           (unsigned long long)l->rows, (unsigned long long)l->cols, (long long)l->ld, p, bytes);
    return 0;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha_p, const void *A,
                              cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b, const void *beta_p,
                              const void *C, cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes, cudaStream_t s) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    cublasStatus_t st = lt_check(d, a, b, c, dl);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (!algo || algo->data[0] != ALGO_MAGIC) return lt_bad("an algorithm the heuristic did not return");
    if (s != 0) return lt_bad("a stream other than the default one");
    const void *ptrs[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)ptrs[i] % algo->data[1 + i])
            return lt_bad("matrix %c at %p is not aligned to the %llu bytes the heuristic was promised", "ABCD"[i],
                          ptrs[i], (unsigned long long)algo->data[1 + i]);
    float alpha, beta;
    memcpy(&alpha, alpha_p, 4);
    memcpy(&beta, beta_p, 4);
    if (!lt_in_dev('A', A, a) || !lt_in_dev('B', B, b) || !lt_in_dev('D', D, dl) ||
        (beta != 0.0f && !lt_in_dev('C', C, c)))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (ws_bytes && !dev_range(ws, ws_bytes))
        return lt_bad("workspace of %zu bytes at %p is not inside one device allocation", ws_bytes, ws);
    size_t m = dl->rows, n = dl->cols, k = d->ta ? a->rows : a->cols;
    /* op(A) as rows of k, op(B) as columns of k, then one dot product per element of D */
    float *ar = (float *)malloc((m * k + 1) * sizeof(float)), *bc = (float *)malloc((n * k + 1) * sizeof(float));
    double *out = (double *)malloc((m * n + 1) * sizeof(double));
    if (!ar || !bc || !out) return CUBLAS_STATUS_ALLOC_FAILED;
    for (size_t i = 0; i < m; i++)
        for (size_t l = 0; l < k; l++)
            ar[i * k + l] = lt_get(A, a->type, d->ta ? i * (size_t)a->ld + l : l * (size_t)a->ld + i);
    for (size_t j = 0; j < n; j++)
        for (size_t l = 0; l < k; l++)
            bc[j * k + l] = lt_get(B, b->type, d->tb ? l * (size_t)b->ld + j : j * (size_t)b->ld + l);
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < m; i++) {
            const float *x = ar + i * k, *y = bc + j * k;
            double acc[4] = {0, 0, 0, 0}; /* four chains in a fixed order: fast, and the same bits every run */
            size_t l = 0;
            for (; l + 4 <= k; l += 4)
                for (int u = 0; u < 4; u++) acc[u] += (double)x[l + u] * y[l + u];
            for (; l < k; l++) acc[0] += (double)x[l] * y[l];
            double v = (double)alpha * ((acc[0] + acc[1]) + (acc[2] + acc[3]));
            if (beta != 0.0f) v += (double)beta * lt_get(C, c->type, j * (size_t)c->ld + i);
            out[j * m + i] = v;
        }
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < m; i++) lt_put(D, dl->type, j * (size_t)dl->ld + i, out[j * m + i]);
    free(ar), free(bc), free(out);
    return CUBLAS_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* The loader                                                                                 */
/* ------------------------------------------------------------------------------------------ */

static int g_lt_token, g_lt_loads; /* the emulated library's handle; dlopen'd and not closed */
static const char *g_dlerr;

void *cuemu_dlopen(const char *file, int flags) {
    if (file && strstr(file, "libcublasLt")) return __atomic_add_fetch(&g_lt_loads, 1, __ATOMIC_RELAXED), &g_lt_token;
    return dlopen(file, flags);
}
int cuemu_dlclose(void *handle) {
    if (handle != &g_lt_token) return dlclose(handle);
    __atomic_sub_fetch(&g_lt_loads, 1, __ATOMIC_RELAXED);
    return 0;
}

/* What is held now: device bytes allocated and not freed, cuBLASLt handles, loads of the library
 * (a test's check that a failed open of the backend gave back what it got). */
extern "C" void cuemu_held(size_t *device_bytes, int *lt_handles, int *lt_loads) {
    *device_bytes = cuemu_device_bytes();
    *lt_handles = __atomic_load_n(&g_lt_handles, __ATOMIC_RELAXED);
    *lt_loads = __atomic_load_n(&g_lt_loads, __ATOMIC_RELAXED);
}
void *cuemu_dlsym(void *handle, const char *name) {
    if (handle != &g_lt_token) return dlsym(handle, name);
    static const struct {
        const char *name;
        void *fn;
    } T[] = {
        {"cublasLtCreate", (void *)&cublasLtCreate},
        {"cublasLtDestroy", (void *)&cublasLtDestroy},
        {"cublasLtMatmulDescCreate", (void *)&cublasLtMatmulDescCreate},
        {"cublasLtMatmulDescDestroy", (void *)&cublasLtMatmulDescDestroy},
        {"cublasLtMatmulDescSetAttribute", (void *)&cublasLtMatmulDescSetAttribute},
        {"cublasLtMatrixLayoutCreate", (void *)&cublasLtMatrixLayoutCreate},
        {"cublasLtMatrixLayoutDestroy", (void *)&cublasLtMatrixLayoutDestroy},
        {"cublasLtMatmulPreferenceCreate", (void *)&cublasLtMatmulPreferenceCreate},
        {"cublasLtMatmulPreferenceDestroy", (void *)&cublasLtMatmulPreferenceDestroy},
        {"cublasLtMatmulPreferenceSetAttribute", (void *)&cublasLtMatmulPreferenceSetAttribute},
        {"cublasLtMatmulAlgoGetHeuristic", (void *)&cublasLtMatmulAlgoGetHeuristic},
        {"cublasLtMatmul", (void *)&cublasLtMatmul},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (!strcmp(T[i].name, name)) return T[i].fn;
    g_dlerr = "cuemu: the emulated cuBLASLt has no such symbol";
    return NULL;
}
char *cuemu_dlerror(void) {
    if (g_dlerr) {
        const char *e = g_dlerr;
        g_dlerr = NULL;
        return (char *)e;
    }
    return dlerror();
}
