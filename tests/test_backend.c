/* test_backend.c — the model's backend seam (model/backend.h).
 *
 * Oracles:
 *  1. Nothing bypasses the table: the undefined symbols of the model's composition objects (gpt.c.o,
 *     infer.c.o, read with nm) name none of the kernels or GEMMs the table carries. Control: the
 *     CPU backend's object, which fills the table, must name at least 40 of them (so the symbol
 *     reading works and the list is the right one).
 *  2. The table is what runs: a GPT-2 (dropout on) and a Llama (GQA, bf16) built on a copy of the
 *     CPU table with counting alloc/free give the same loss and gradients, bit for bit, as the
 *     default; the counted bytes equal the MemStats the model reports, and everything allocated is
 *     freed. Control: the same copy with one kernel's output scaled by 1.001 (GELU for GPT-2,
 *     SwiGLU for Llama; the CUDA issue's control) must change the loss.
 *  3. Selection: backend_find accepts "cpu" (and "cuda" in a CUDA build, which gpt_init then refuses
 *     until the trainer's device paths exist) and refuses anything else with one line naming
 *     --device, what was expected and what was found; a backend whose memory is not
 *     host-addressable is refused by gpt_init (backend.h's contract).
 *  4. Which GPU a process uses (backend_device_index, the CUDA backend's rule for ranks under mpirun
 *     or srun): a table of cases written from the rule (ST_CUDA_DEVICE first, else the local rank
 *     modulo the GPUs, else 0; bad values refused naming the variable). Control: the rule without
 *     the modulo (a rank's index as is), written here, must miss some of the cases. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/backend.h"
#include "model/gpt.h"
#include "testutil.h"

/* ---- 1. the symbols ---- */

static const char *SYMS[] = {
    "encoder_forward", "encoder_backward", "encoder_forward_vp", "encoder_backward_vp", "layernorm_forward",
    "layernorm_forward_bf16", "residual_layernorm_forward", "residual_layernorm_forward_bf16", "layernorm_backward",
    "rmsnorm_forward", "rmsnorm_forward_bf16", "residual_rmsnorm_forward", "residual_rmsnorm_forward_bf16",
    "rmsnorm_backward", "rope_table", "rope_forward", "rope_backward", "swiglu_forward", "swiglu_forward_bf16",
    "swiglu_backward", "swiglu_backward_bf16", "attention_gqa_forward", "attention_gqa_backward",
    "attention_forward", "attention_backward", "gelu_forward", "gelu_backward", "gelu_forward_bf16",
    "gelu_backward_bf16", "bias_add_rows", "residual_forward", "dropout_backward", "cast_bf16", "cast_bf16_colsum",
    "cast_fp16", "matmul_forward", "matmul_backward", "matmul_forward_lp", "matmul_backward_lp",
    "matmul_forward_p", "matmul_backward_p", "head_forward_backward", "head_forward_backward_p",
    "head_forward_backward_vp", "scale_inplace", "sum_ordered", "add_or_set", "mm_sgemm", "mm_gemm_bf16",
    "mm_linear", "mm_linear_bf16", "mm_take_error", "mem_alloc", "mem_free",
};
#define NSYMS (sizeof SYMS / sizeof SYMS[0])

/* How many of SYMS the object's undefined symbols name (-1 when nm cannot read it); the first
 * one found goes to first. */
static int undefined_kernels(const char *obj, char *first, size_t cap) {
    char cmd[1200], line[120];
    snprintf(cmd, sizeof cmd, "nm -u '%s' 2>/dev/null", obj);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    int n = 0, lines = 0;
    first[0] = 0;
    while (fgets(line, sizeof line, f)) {
        lines++;
        char *name = strrchr(line, ' ');
        name = name ? name + 1 : line;
        name[strcspn(name, "\r\n")] = 0;
        for (size_t i = 0; i < NSYMS; i++)
            if (!strcmp(name, SYMS[i])) {
                if (!n) snprintf(first, cap, "%s", name);
                n++;
            }
    }
    int rc = pclose(f);
    return rc == 0 && lines > 0 ? n : -1;
}

static void symbols(void) {
    static const char *MODEL[] = {"gpt.c.o", "infer.c.o"};
    char obj[1024], first[128];
    for (int i = 0; i < 2; i++) {
        snprintf(obj, sizeof obj, "%s/CMakeFiles/st_model.dir/src/model/%s", ST_BINARY_DIR, MODEL[i]);
        int n = undefined_kernels(obj, first, sizeof first);
        char what[160];
        snprintf(what, sizeof what, "seam_no_bypass_%s", MODEL[i]);
        tu_check(n == 0, what, "%d kernel/GEMM/alloc symbols called directly%s%s (nm -u %s)", n, n > 0 ? ", first " : "",
                 first, obj);
    }
    snprintf(obj, sizeof obj, "%s/CMakeFiles/st_model.dir/src/model/backend_cpu.c.o", ST_BINARY_DIR);
    int n = undefined_kernels(obj, first, sizeof first);
    tu_check(n >= 40, "seam_symbols_control_backend_cpu", "the CPU table names %d of the %zu symbols (want >= 40)", n,
             NSYMS);
}

/* ---- 2. a copy of the table ---- */

static long g_allocs, g_frees;
static size_t g_bytes;
static void *count_alloc(MemStats *ms, MemCategory c, size_t bytes) {
    void *p = backend_cpu()->alloc(ms, c, bytes);
    if (p) g_allocs++, g_bytes += bytes;
    return p;
}
static void count_free(MemStats *ms, MemCategory c, void *p, size_t bytes) {
    if (p) g_frees++, g_bytes -= bytes;
    backend_cpu()->free(ms, c, p, bytes);
}
static void gelu_off(float *out, const float *inp, size_t n, int nt) {
    backend_cpu()->gelu_forward(out, inp, n, nt);
    for (size_t i = 0; i < n; i++) out[i] *= 1.001f;
}
static void swiglu_off_bf16(uint16_t *out, const float *h, int N, int F, int nt) {
    /* bf16 SwiGLU: the fp32 values scaled, then rounded as the kernel rounds them. */
    float *tmp = malloc((size_t)N * F * sizeof *tmp);
    backend_cpu()->swiglu_forward(tmp, h, N, F, nt);
    for (size_t i = 0; i < (size_t)N * F; i++) tmp[i] *= 1.001f;
    backend_cpu()->cast_bf16(out, tmp, (size_t)N * F, nt);
    free(tmp);
}

typedef struct {
    double loss;
    float *grads;
    size_t n;
    size_t mem_bytes;   /* MemStats' bytes of the built model */
    size_t table_bytes; /* bytes the counting table saw allocated (0 for another table) */
} Pass;

/* One training forward + backward of a fixed batch on backend be (NULL: the default). */
static int run_pass(const ModelConfig *mc, GptPrecision prec, const Backend *be, Pass *out) {
    enum { B = 2, T = 16 };
    GptOptions o = gpt_default_options();
    o.backend = be, o.B = B, o.T = T, o.precision = prec, o.threads = 2;
    MemStats ms = {0};
    Gpt g;
    Err e;
    if (gpt_init(&g, mc, &o, &ms, &e) != ST_OK) {
        printf("gpt_init: %s\n", e.msg);
        return -1;
    }
    gpt_init_params(&g, 5);
    gpt_sync_lp(&g);
    int32_t inp[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) inp[i] = (i * 7 + 3) % mc->vocab, tgt[i] = (i * 11 + 1) % mc->vocab;
    tgt[5] = -1;
    gpt_zero_grads(&g);
    out->loss = gpt_forward(&g, inp, tgt, B, T, 1.0f / (B * T - 1), 1, 3);
    gpt_backward(&g);
    Status st = gpt_status(&g, &e);
    out->n = g.w.layout.total;
    out->grads = malloc(out->n * sizeof(float));
    memcpy(out->grads, g.d.grads, out->n * sizeof(float));
    out->mem_bytes = 0;
    for (int c = 0; c < MEM_NCAT; c++) out->mem_bytes += ms.bytes[c];
    out->table_bytes = be && be->alloc == count_alloc ? g_bytes : 0;
    gpt_free(&g);
    return st == ST_OK ? 0 : -1;
}

static void table_copy(const char *name, ModelConfig mc, GptPrecision prec) {
    Err e;
    if (model_config_validate(&mc, &e) != ST_OK) {
        tu_check(0, name, "config: %s", e.msg);
        return;
    }
    Pass ref, cpy, bad;
    Backend b = *backend_cpu();
    b.alloc = count_alloc, b.free = count_free;
    g_allocs = g_frees = 0, g_bytes = 0;
    int ok = run_pass(&mc, prec, NULL, &ref) == 0;
    long allocs0 = g_allocs;
    ok = ok && run_pass(&mc, prec, &b, &cpy) == 0;
    char what[128];
    snprintf(what, sizeof what, "%s_table_copy_bitwise", name);
    int same = ok && ref.loss == cpy.loss && !memcmp(ref.grads, cpy.grads, ref.n * sizeof(float));
    tu_check(same, what, "loss %.17g vs %.17g, %zu gradients %s", ref.loss, cpy.loss, ref.n,
             ok && !memcmp(ref.grads, cpy.grads, ref.n * sizeof(float)) ? "identical" : "differ");
    snprintf(what, sizeof what, "%s_alloc_through_table", name);
    tu_check(ok && allocs0 == 0 && g_allocs > 0 && g_allocs == g_frees && g_bytes == 0 && cpy.table_bytes > 0 &&
                 cpy.table_bytes == cpy.mem_bytes,
             what, "%ld allocations, %ld frees, %zu bytes counted by the table = %zu by MemStats, %zu left after free",
             g_allocs, g_frees, cpy.table_bytes, cpy.mem_bytes, g_bytes);
    /* Control: one kernel off by 1.001 must show. */
    Backend off = *backend_cpu();
    if (mc.arch == ARCH_LLAMA) off.swiglu_forward_bf16 = swiglu_off_bf16;
    else off.gelu_forward = gelu_off;
    int okb = run_pass(&mc, prec, &off, &bad) == 0;
    snprintf(what, sizeof what, "%s_control_kernel_x1.001", name);
    tu_check(okb && bad.loss != ref.loss, what, "loss %.9g with the scaled kernel vs %.9g (must differ)", bad.loss,
             ref.loss);
    free(ref.grads), free(cpy.grads), free(bad.grads);
}

/* ---- 3. selection ---- */

static void selection(void) {
    const Backend *be = NULL;
    Err e = {0};
    Status found = backend_find("cpu", &be, &e);
    tu_check(found == ST_OK && be == backend_cpu() && !strcmp(be->name, "cpu"), "backend_find_cpu", "%s",
             be ? be->name : "(none)");
#ifdef ST_HAVE_CUDA
    /* A CUDA build offers "cuda" (opening no device yet); the trainer's paths for it are not there,
     * so gpt_init refuses it with one line naming --device cuda (backend.h). */
    be = NULL;
    found = backend_find("cuda", &be, &e);
    tu_check(found == ST_OK && be == backend_cuda() && !strcmp(be->name, "cuda") && !be->host_addressable &&
                 !strcmp(backend_names(), "cpu, cuda"),
             "backend_find_cuda", "%s", found == ST_OK ? be->name : e.msg);
    {
        ModelConfig mc = {2, 4, 32, 97, 0, 32, 0};
        model_config_validate(&mc, &e);
        GptOptions o = gpt_default_options();
        o.backend = be;
        Gpt g;
        Status st = gpt_init(&g, &mc, &o, NULL, &e);
        tu_check(st == ST_ERR_INPUT && strstr(e.msg, "--device cuda") && !strchr(e.msg, '\n'),
                 "gpt_init_refuses_cuda_for_now", "%s", st == ST_OK ? "accepted" : e.msg);
        if (st == ST_OK) gpt_free(&g);
    }
    static const char *BAD[] = {"tpu", ""};
#else
    static const char *BAD[] = {"cuda", "tpu", ""};
#endif
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        be = NULL;
        Status st = backend_find(BAD[i], &be, &e);
        char what[64];
        snprintf(what, sizeof what, "backend_find_refuses_'%s'", BAD[i]);
        tu_check(st == ST_ERR_INPUT && strstr(e.msg, "--device") && strstr(e.msg, "expected") &&
                     strstr(e.msg, "found") && !strchr(e.msg, '\n'),
                 what, "%s", e.msg);
    }
    Backend dev = *backend_cpu();
    dev.name = "device", dev.host_addressable = 0;
    ModelConfig mc = {2, 4, 32, 97, 0, 32, 0};
    model_config_validate(&mc, &e);
    GptOptions o = gpt_default_options();
    o.backend = &dev;
    Gpt g;
    Status st = gpt_init(&g, &mc, &o, NULL, &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "--device device"), "gpt_init_refuses_non_host_backend", "%s",
             st == ST_OK ? "accepted" : e.msg);
    if (st == ST_OK) gpt_free(&g);
}

/* ---- 4. which GPU ---- */

typedef struct {
    const char *device, *local; /* ST_CUDA_DEVICE, the launcher's local rank (NULL: unset) */
    int ndev, want;             /* want -1: refused */
    const char *names;          /* refused: what the message must name */
} DevCase;

static const DevCase DEV_CASES[] = {
    {NULL, NULL, 1, 0, NULL},  {NULL, "0", 1, 0, NULL},   {NULL, "1", 1, 0, NULL}, /* two ranks, one GPU */
    {NULL, "1", 2, 1, NULL},   {NULL, "3", 2, 1, NULL},   {NULL, "5", 4, 1, NULL},
    {"1", "0", 2, 1, NULL},    {"0", "1", 2, 0, NULL},    /* ST_CUDA_DEVICE wins over the rank */
    {"2", NULL, 2, -1, "ST_CUDA_DEVICE"}, {"x", NULL, 2, -1, "ST_CUDA_DEVICE"}, {"-1", "0", 2, -1, "'-1'"},
    {NULL, "r1", 2, -1, "local rank"},    {NULL, NULL, 0, -1, "0 devices"},
};

/* The control: a rank's index taken as the device with no modulo. */
static int index_no_modulo(const char *device, const char *local, int ndev, Err *err) {
    int d = device ? atoi(device) : local ? atoi(local) : 0;
    if (ndev < 1 || d < 0 || d >= ndev) return err_set(err, ST_ERR_INPUT, "ST_CUDA_DEVICE or local rank '%d'", d), -1;
    return d;
}

static int dev_cases_pass(int (*fn)(const char *, const char *, int, Err *), int report) {
    int all = 1;
    for (size_t i = 0; i < sizeof DEV_CASES / sizeof DEV_CASES[0]; i++) {
        const DevCase *c = &DEV_CASES[i];
        Err e = {0};
        int got = fn(c->device, c->local, c->ndev, &e);
        int ok = got == c->want && (c->want >= 0 || (strstr(e.msg, c->names) && !strchr(e.msg, '\n')));
        all = all && ok;
        if (report) {
            char name[64];
            snprintf(name, sizeof name, "device_index_%zu", i);
            tu_check(ok, name, "ST_CUDA_DEVICE %s, local rank %s, %d GPUs: got %d (expected %d)%s%s",
                     c->device ? c->device : "unset", c->local ? c->local : "unset", c->ndev, got, c->want,
                     got < 0 ? ": " : "", got < 0 ? e.msg : "");
        }
    }
    return all;
}

static void device_index(void) {
    dev_cases_pass(backend_device_index, 1);
    tu_check(!dev_cases_pass(index_no_modulo, 0), "device_index_control_no_modulo",
             "the rule without the modulo misses cases (two ranks on one GPU would ask for device 1)");
}

int main(void) {
    symbols();
    ModelConfig gpt2 = {2, 4, 32, 97, 0, 32, 0.1f};
    table_copy("gpt2_fp32_dropout", gpt2, GPT_FP32);
    ModelConfig llama = {2, 4, 32, 97, 0, 32, 0};
    llama.arch = ARCH_LLAMA, llama.n_kv_head = 2;
    table_copy("llama_gqa_bf16", llama, GPT_BF16);
    selection();
    device_index();
    return tu_failures ? 1 : 0;
}
