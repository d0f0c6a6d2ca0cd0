/* safetensors.c — the safetensors container and Hugging Face GPT-2 weights export/import.
 *
 * Contents: the HF name map | writer (st_write) | parser (st_parse, st_read_f32) | HF model
 * image on raw buffers | the folder-level API (st_save_hf, st_load_hf_*). */
#include "ckpt/safetensors.h"
#include "data/bpe.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/half.h"

/* ======================================================================================== */
/* Hugging Face names                                                                        */
/* ======================================================================================== */

/* Our tensor leaf name → Hugging Face leaf name and whether the (out, in) weight is transposed
 * into Conv1D's (in, out). */
static const struct { const char *ours, *hf; int transpose; } BLOCK_MAP[BT_COUNT] = {
    {"ln1w", "ln_1.weight", 0},          {"ln1b", "ln_1.bias", 0},
    {"qkvw", "attn.c_attn.weight", 1},   {"qkvb", "attn.c_attn.bias", 0},
    {"attprojw", "attn.c_proj.weight", 1}, {"attprojb", "attn.c_proj.bias", 0},
    {"ln2w", "ln_2.weight", 0},          {"ln2b", "ln_2.bias", 0},
    {"fcw", "mlp.c_fc.weight", 1},       {"fcb", "mlp.c_fc.bias", 0},
    {"fcprojw", "mlp.c_proj.weight", 1}, {"fcprojb", "mlp.c_proj.bias", 0},
};

/* Llama: our leaf → LlamaForCausalLM's name under model.layers.N (nn.Linear (out, in) like ours:
 * no transpose; HF's q_proj/k_proj rows are already in the rotate-half order our RoPE uses). */
static const struct { const char *ours, *hf; } LLAMA_MAP[LB_COUNT] = {
    {"ln1w", "input_layernorm.weight"}, {"wq", "self_attn.q_proj.weight"}, {"wk", "self_attn.k_proj.weight"},
    {"wv", "self_attn.v_proj.weight"},  {"wo", "self_attn.o_proj.weight"}, {"ln2w", "post_attention_layernorm.weight"},
    {"wgate", "mlp.gate_proj.weight"},  {"wup", "mlp.up_proj.weight"},     {"wdown", "mlp.down_proj.weight"},
};

/* Our name of a Llama tensor → its Hugging Face name. */
static void llama_hf_name(const char *ours, char *out, size_t n) {
    if (!strcmp(ours, "wte")) snprintf(out, n, "model.embed_tokens.weight");
    else if (!strcmp(ours, "lm_head")) snprintf(out, n, "lm_head.weight");
    else if (!strcmp(ours, "lnfw")) snprintf(out, n, "model.norm.weight");
    else {
        int l = atoi(ours + 2);
        const char *leaf = strrchr(ours, '.') + 1;
        for (int j = 0; j < LB_COUNT; j++)
            if (!strcmp(leaf, LLAMA_MAP[j].ours)) snprintf(out, n, "model.layers.%d.%s", l, LLAMA_MAP[j].hf);
    }
}

/* The Hugging Face tensor list of a layout, in layout order, with data pointing into params
 * (may be NULL when only names and shapes are needed). Caller frees. */
static StTensorOut *hf_tensors(const ParamLayout *pl, const float *params) {
    StTensorOut *h = calloc((size_t)pl->ntensors, sizeof *h);
    if (!h) return NULL;
    for (int k = 0; k < pl->ntensors; k++) {
        const TensorInfo *t = &pl->tensors[k];
        StTensorOut *x = &h[k];
        if (pl->cfg.arch == ARCH_LLAMA) {
            llama_hf_name(t->name, x->name, sizeof x->name);
        } else if (!strcmp(t->name, "wte") || !strcmp(t->name, "wpe")) {
            snprintf(x->name, sizeof x->name, "%s.weight", t->name);
        } else if (!strcmp(t->name, "lnfw") || !strcmp(t->name, "lnfb")) {
            snprintf(x->name, sizeof x->name, "ln_f.%s", t->name[3] == 'w' ? "weight" : "bias");
        } else {
            int l = atoi(t->name + 2);
            const char *leaf = strrchr(t->name, '.') + 1;
            for (int j = 0; j < BT_COUNT; j++)
                if (!strcmp(leaf, BLOCK_MAP[j].ours)) {
                    snprintf(x->name, sizeof x->name, "h.%d.%s", l, BLOCK_MAP[j].hf);
                    x->transpose = BLOCK_MAP[j].transpose;
                }
        }
        x->ndim = t->ndim;
        x->shape[0] = x->transpose ? t->shape[1] : t->rows_real;
        x->shape[1] = x->transpose ? t->shape[0] : (t->ndim == 2 ? t->shape[1] : 1);
        x->data = params ? params + t->offset : NULL;
    }
    return h;
}

static size_t out_numel(const StTensorOut *x) { return (size_t)x->shape[0] * (x->ndim == 2 ? (size_t)x->shape[1] : 1); }

/* ======================================================================================== */
/* Writer                                                                                    */
/* ======================================================================================== */

typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} Buf;

static void buf_printf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(Buf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)n + 1;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s, b->cap = cap;
    }
}

/* JSON string body of s (names and metadata are ours, but escape anyway). */
static void buf_json_string(Buf *b, const char *s) {
    buf_printf(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') buf_printf(b, "\\%c", c);
        else if (c < 0x20) buf_printf(b, "\\u%04x", c);
        else buf_printf(b, "%c", c);
    }
    buf_printf(b, "\"");
}

Status st_write(const StTensorOut *t, int n, const char *const *metadata, StWriteFn w, void *ctx, Err *err) {
    Buf h = {0};
    buf_printf(&h, "{");
    size_t off = 0, maxne = 0;
    for (int i = 0; i < n; i++) {
        size_t ne = out_numel(&t[i]);
        if (t[i].transpose && ne > maxne) maxne = ne;
        buf_json_string(&h, t[i].name);
        size_t es = t[i].bf16 ? 2 : 4;
        if (t[i].bf16 && ne > maxne) maxne = ne;
        buf_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", t[i].bf16 ? "BF16" : "F32");
        for (int d = 0; d < t[i].ndim; d++) buf_printf(&h, d ? ",%d" : "%d", t[i].shape[d]);
        buf_printf(&h, "],\"data_offsets\":[%zu,%zu]},", off, off + ne * es);
        off += ne * es;
    }
    buf_printf(&h, "\"__metadata__\":{\"format\":\"pt\"");
    for (int i = 0; metadata && metadata[i]; i += 2) {
        buf_printf(&h, ",");
        buf_json_string(&h, metadata[i]);
        buf_printf(&h, ":");
        buf_json_string(&h, metadata[i + 1] ? metadata[i + 1] : "");
    }
    buf_printf(&h, "}}");
    while (!h.oom && h.len % 8) buf_printf(&h, " ");
    float *scratch = maxne ? malloc(maxne * sizeof(float)) : NULL;
    Status st = ST_OK;
    if (h.oom || (maxne && !scratch)) {
        st = err_set(err, ST_ERR_RUNTIME, "out of memory writing a safetensors header");
        goto done;
    }
    uint64_t hlen = h.len; /* little-endian on every platform we build for (x86-64, aarch64) */
    if ((st = w(ctx, &hlen, 8, err)) != ST_OK) goto done;
    if ((st = w(ctx, h.s, h.len, err)) != ST_OK) goto done;
    for (int i = 0; i < n; i++) {
        size_t ne = out_numel(&t[i]);
        const float *src = t[i].data;
        if (t[i].transpose) {
            int R = t[i].shape[1], Cc = t[i].shape[0]; /* source (R, Cc) → file (Cc, R) */
            for (int r = 0; r < R; r++)
                for (int c = 0; c < Cc; c++) scratch[(size_t)c * R + r] = t[i].data[(size_t)r * Cc + c];
            src = scratch;
        }
        if (t[i].bf16) { /* rounded in place into the scratch's first half (2 bytes per element) */
            uint16_t *b = (uint16_t *)scratch;
            for (size_t k = 0; k < ne; k++) b[k] = half_bf16(src[k]);
            st = w(ctx, b, ne * 2, err);
        } else if (t[i].transpose) {
            st = w(ctx, scratch, ne * sizeof(float), err);
        } else {
            st = w(ctx, t[i].data, ne * sizeof(float), err);
        }
        if (st != ST_OK) goto done;
    }
done:
    free(scratch);
    free(h.s);
    return st;
}

/* ======================================================================================== */
/* Parser                                                                                    */
/* ======================================================================================== */

static size_t dtype_size(const char *d) {
    static const struct { const char *n; size_t s; } T[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
        {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (!strcmp(d, T[i].n)) return T[i].s;
    return 0;
}

/* An exact non-negative integer <= limit from a JSON number; 0 if it is not one. */
static int json_uint(const cJSON *v, double limit, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= limit) || floor(d) != d) return 0;
    *out = (uint64_t)d;
    return 1;
}

static int cmp_begin(const void *a, const void *b) {
    const StEntry *x = *(const StEntry *const *)a, *y = *(const StEntry *const *)b;
    return x->begin != y->begin ? (x->begin < y->begin ? -1 : 1) : (x->end > y->end) - (x->end < y->end);
}

/* The format's rule (and the safetensors library's check): the tensors' byte ranges tile the data
 * section, without overlap (two tensors reading the same bytes loaded the wrong weights silently)
 * and without holes. */
static Status check_tiling(const StFile *f, Err *err) {
    if (f->n == 0) return ST_OK;
    const StEntry **o = malloc((size_t)f->n * sizeof *o);
    if (!o) return err_set(err, ST_ERR_RUNTIME, "%s: out of memory", f->path);
    for (int i = 0; i < f->n; i++) o[i] = &f->entries[i];
    qsort(o, (size_t)f->n, sizeof *o, cmp_begin);
    Status st = ST_OK;
    size_t at = 0;
    const StEntry *last = NULL; /* the tensor that reaches furthest so far */
    for (int i = 0; i < f->n && st == ST_OK; i++) {
        if (o[i]->begin < at)
            st = err_set(err, ST_ERR_INPUT, "%s: tensor %s: expected data offsets from byte %zu on, found [%zu, %zu), "
                         "overlapping tensor %s [%zu, %zu)", f->path, o[i]->name, at, o[i]->begin, o[i]->end, last->name,
                         last->begin, last->end);
        else if (o[i]->begin > at)
            st = err_set(err, ST_ERR_INPUT, "%s: tensor %s: expected data offsets starting at byte %zu, found %zu: a hole "
                         "in the data", f->path, o[i]->name, at, o[i]->begin);
        if (o[i]->end > at || !last) at = o[i]->end > at ? o[i]->end : at, last = o[i];
    }
    if (st == ST_OK && at != f->data_len)
        st = err_set(err, ST_ERR_INPUT, "%s: expected the tensors to cover the %zu data bytes, found %zu covered", f->path,
                     f->data_len, at);
    free(o);
    return st;
}

Status st_parse(StFile *f, const char *path, const void *buf, size_t len, Err *err) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    const unsigned char *b = buf;
    uint64_t hlen = 0;
    if (len < 8) return err_set(err, ST_ERR_INPUT, "%s: expected at least 8 bytes, found %zu (truncated?)", path, len);
    memcpy(&hlen, b, 8);
    if (hlen > len - 8)
        return err_set(err, ST_ERR_INPUT, "%s: header length %llu exceeds the file size %zu (truncated?)", path,
                       (unsigned long long)hlen, len);
    const char *hend = NULL;
    cJSON *hdr = cJSON_ParseWithLengthOpts((const char *)b + 8, (size_t)hlen, &hend, 0);
    if (!cJSON_IsObject(hdr)) {
        cJSON_Delete(hdr);
        return err_set(err, ST_ERR_INPUT, "%s: expected a JSON object header of %llu bytes, found unparsable bytes",
                       path, (unsigned long long)hlen);
    }
    /* After the object only padding (JSON white space; we write spaces), as the safetensors library
     * requires: bytes after it (a NUL, another object) were accepted and ignored. */
    for (const char *p = hend; p < (const char *)b + 8 + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(hdr);
            return err_set(err, ST_ERR_INPUT, "%s: expected the %llu-byte header to end with its JSON object (padded with "
                           "spaces), found byte 0x%02x at offset %zu after it", path, (unsigned long long)hlen,
                           (unsigned char)*p, (size_t)(p - (const char *)b));
        }
    /* __metadata__: the format's string-to-string map (or null) */
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(hdr, "__metadata__");
    int md_ok = !md || cJSON_IsNull(md) || cJSON_IsObject(md);
    for (const cJSON *m = md_ok && md ? md->child : NULL; m && md_ok; m = m->next) md_ok = cJSON_IsString(m);
    if (!md_ok) {
        cJSON_Delete(hdr);
        return err_set(err, ST_ERR_INPUT, "%s: __metadata__: expected an object of strings, found %s", path,
                       cJSON_IsObject(md) ? "a member that is not a string" : "another JSON value");
    }
    f->data = b + 8 + hlen;
    f->data_len = len - 8 - (size_t)hlen;
    int count = cJSON_GetArraySize(hdr);
    f->entries = calloc((size_t)count + 1, sizeof *f->entries);
    Status st = ST_OK;
    if (!f->entries) {
        st = err_set(err, ST_ERR_RUNTIME, "%s: out of memory parsing the header", path);
        goto done;
    }
    for (const cJSON *e = hdr->child; e; e = e->next) {
        const char *name = e->string ? e->string : "";
        if (!strcmp(name, "__metadata__")) continue;
        if (strlen(name) >= sizeof f->entries[0].name) {
            st = err_set(err, ST_ERR_INPUT, "%s: tensor name of %zu bytes is longer than %zu", path, strlen(name),
                         sizeof f->entries[0].name - 1);
            goto done;
        }
        StEntry *x = &f->entries[f->n];
        snprintf(x->name, sizeof x->name, "%s", name);
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
        const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        if (!cJSON_IsObject(e) || !cJSON_IsString(dt) || strlen(dt->valuestring) >= sizeof x->dtype ||
            !cJSON_IsArray(shape) || !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2) {
            st = err_set(err, ST_ERR_INPUT,
                         "%s: tensor %s: expected {dtype: string, shape: [ints], data_offsets: [begin, end]}", path,
                         x->name);
            goto done;
        }
        snprintf(x->dtype, sizeof x->dtype, "%s", dt->valuestring);
        x->ndim = cJSON_GetArraySize(shape);
        if (x->ndim > ST_MAX_DIMS) {
            st = err_set(err, ST_ERR_INPUT, "%s: tensor %s: expected at most %d dimensions, found %d", path, x->name,
                         ST_MAX_DIMS, x->ndim);
            goto done;
        }
        uint64_t numel = 1;
        int d = 0;
        for (const cJSON *s = shape->child; s; s = s->next, d++) {
            uint64_t v;
            if (!json_uint(s, 1099511627776.0, &v)) {
                st = err_set(err, ST_ERR_INPUT, "%s: tensor %s: dimension %d is not a non-negative integer", path,
                             x->name, d);
                goto done;
            }
            x->shape[d] = (int64_t)v;
            if (__builtin_mul_overflow(numel, v, &numel)) {
                st = err_set(err, ST_ERR_INPUT, "%s: tensor %s: element count overflows", path, x->name);
                goto done;
            }
        }
        uint64_t b0, b1;
        if (!json_uint(cJSON_GetArrayItem(offs, 0), 9007199254740992.0, &b0) ||
            !json_uint(cJSON_GetArrayItem(offs, 1), 9007199254740992.0, &b1) || b0 > b1 || b1 > f->data_len) {
            st = err_set(err, ST_ERR_INPUT, "%s: tensor %s: data offsets outside the %zu data bytes (truncated?)", path,
                         x->name, f->data_len);
            goto done;
        }
        size_t es = dtype_size(x->dtype);
        uint64_t want;
        if (es && (__builtin_mul_overflow(numel, (uint64_t)es, &want) || want != b1 - b0)) {
            st = err_set(err, ST_ERR_INPUT, "%s: tensor %s: shape needs %llu x %zu bytes, data offsets give %llu", path,
                         x->name, (unsigned long long)numel, es, (unsigned long long)(b1 - b0));
            goto done;
        }
        x->begin = (size_t)b0, x->end = (size_t)b1;
        f->n++;
    }
    if (st == ST_OK) st = check_tiling(f, err);
done:
    cJSON_Delete(hdr);
    if (st != ST_OK) st_file_free(f);
    return st;
}

void st_file_free(StFile *f) {
    free(f->entries);
    f->entries = NULL;
    f->n = 0;
}

const StEntry *st_find(const StFile *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->entries[i].name, name)) return &f->entries[i];
    for (int i = 0; i < f->n; i++)
        if (!strncmp(f->entries[i].name, "transformer.", 12) && !strcmp(f->entries[i].name + 12, name))
            return &f->entries[i];
    return NULL;
}

static void shape_str(char *s, size_t n, int ndim, const int64_t *shape) {
    size_t o = 0;
    o += (size_t)snprintf(s + o, n - o, "[");
    for (int d = 0; d < ndim && o < n; d++) o += (size_t)snprintf(s + o, n - o, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (o < n) snprintf(s + o, n - o, "]");
}

/* Element i of a tensor's data as fp32: F32 as is, BF16 and F16 widened exactly. */
static float elem_f32(const unsigned char *src, size_t i, int kind) {
    if (kind == 0) {
        float v;
        memcpy(&v, src + i * 4, 4);
        return v;
    }
    uint16_t h;
    memcpy(&h, src + i * 2, 2);
    if (kind == 1) {
        uint32_t u = (uint32_t)h << 16;
        float v;
        memcpy(&v, &u, 4);
        return v;
    }
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
    return h & 0x8000 ? -v : v;
}

Status st_read_f32(const StFile *f, const char *name, int ndim, const int *shape, int transpose, float *dst,
                   Err *err) {
    const StEntry *e = st_find(f, name);
    if (!e) return err_set(err, ST_ERR_INPUT, "%s: tensor %s missing", f->path, name);
    int kind = !strcmp(e->dtype, "F32") ? 0 : !strcmp(e->dtype, "BF16") ? 1 : !strcmp(e->dtype, "F16") ? 2 : -1;
    if (kind < 0)
        return err_set(err, ST_ERR_INPUT, "%s: tensor %s: expected dtype F32, BF16 or F16, found %s", f->path, name,
                       e->dtype);
    int ok = e->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = e->shape[d] == shape[d];
    if (!ok) {
        int64_t want[ST_MAX_DIMS];
        for (int d = 0; d < ndim; d++) want[d] = shape[d];
        char a[96], b[96];
        shape_str(a, sizeof a, ndim, want);
        shape_str(b, sizeof b, e->ndim, e->shape);
        return err_set(err, ST_ERR_INPUT, "%s: tensor %s: expected shape %s, found %s", f->path, name, a, b);
    }
    const unsigned char *src = f->data + e->begin;
    size_t ne = (e->end - e->begin) / (kind == 0 ? 4 : 2);
    if (transpose && ndim == 2) {
        size_t R = (size_t)shape[0], Cc = (size_t)shape[1]; /* file (R, Cc) → dst (Cc, R) */
        for (size_t r = 0; r < R; r++)
            for (size_t c = 0; c < Cc; c++) dst[c * R + r] = elem_f32(src, r * Cc + c, kind);
    } else if (kind == 0) {
        memcpy(dst, src, ne * 4);
    } else {
        for (size_t i = 0; i < ne; i++) dst[i] = elem_f32(src, i, kind);
    }
    return ST_OK;
}

/* ======================================================================================== */
/* Hugging Face model image on raw buffers                                                   */
/* ======================================================================================== */

Status st_hf_write_model(const ParamLayout *pl, const float *params, StWriteFn w, void *ctx, Err *err) {
    StTensorOut *h = hf_tensors(pl, params);
    if (!h) return err_set(err, ST_ERR_RUNTIME, "out of memory writing model.safetensors");
    Status st = st_write(h, pl->ntensors, NULL, w, ctx, err);
    free(h);
    return st;
}

Status st_check_finite(const ParamLayout *pl, const float *params, const char *what, Err *err) {
    for (int k = 0; k < pl->ntensors; k++) {
        const TensorInfo *t = &pl->tensors[k];
        size_t bad = 0;
        for (size_t i = 0; i < t->numel; i++) bad += !isfinite(params[t->offset + i]);
        if (!bad) continue;
        StTensorOut *h = hf_tensors(pl, NULL);
        size_t real = (size_t)t->rows_real * (t->ndim == 2 ? (size_t)t->shape[1] : 1); /* without padding rows */
        Status st = err_set(err, ST_ERR_INPUT, "%s: tensor %s: expected finite weights, found %zu of its %zu values NaN or "
                            "infinite (a diverged run's weights?)", what, h ? h[k].name : t->name, bad, real);
        free(h);
        return st;
    }
    return ST_OK;
}

/* A per-layer buffer Hugging Face keeps beside the parameters (name without "transformer."):
 * h.{l}.attn.bias, the causal mask, and h.{l}.attn.masked_bias, its fill value, for l < L. We
 * apply our own causal mask, so they are ignored. */
static int hf_buffer(const char *name, int L) {
    if (strncmp(name, "h.", 2) != 0 || name[2] < '0' || name[2] > '9') return 0;
    char *end;
    long l = strtol(name + 2, &end, 10);
    return l < L && (!strcmp(end, ".attn.bias") || !strcmp(end, ".attn.masked_bias"));
}

/* lm_head.weight (GPT2LMHeadModel) is accepted only as the tied copy of wte: GPT-2 has no other
 * output head, and an untied one would be silently replaced by wte. */
static Status hf_check_tied_head(const StFile *f, const StEntry *e, const ParamLayout *pl, const float *params,
                                 Err *err) {
    int k = layout_find(pl, "wte");
    if (k < 0) return err_set(err, ST_ERR_INPUT, "%s: tensor %s: expected no output head here", f->path, e->name);
    const TensorInfo *wte = &pl->tensors[k];
    size_t n = (size_t)wte->rows_real * wte->shape[1];
    int shape[2] = {wte->rows_real, wte->shape[1]};
    float *head = malloc(n * sizeof(float));
    if (!head) return err_set(err, ST_ERR_RUNTIME, "%s: out of memory", f->path);
    Status st = st_read_f32(f, e->name, 2, shape, 0, head, err);
    int same = st == ST_OK && memcmp(head, params + wte->offset, n * sizeof(float)) == 0;
    free(head);
    if (st != ST_OK) return st;
    if (!same)
        return err_set(err, ST_ERR_INPUT,
                       "%s: tensor %s differs from the embedding: expected the output head tied to it (the "
                       "model's config), found an untied one%s",
                       f->path, e->name, pl->cfg.arch == ARCH_LLAMA ? " (tie_word_embeddings false: load it untied)" :
                                                                      " (not supported by GPT-2)");
    return ST_OK;
}

Status st_hf_read_model(const StFile *f, const ParamLayout *pl, float *params, Err *err) {
    return st_hf_read_files(f, 1, pl, params, err);
}

Status st_hf_read_files(const StFile *files, int nfiles, const ParamLayout *pl, float *params, Err *err) {
    StTensorOut *h = hf_tensors(pl, NULL);
    if (!h) return err_set(err, ST_ERR_RUNTIME, "%s: out of memory", files[0].path);
    memset(params, 0, pl->total * sizeof(float));
    Status st = ST_OK;
    for (int i = 0; i < pl->ntensors && st == ST_OK; i++) {
        int k = 0; /* the file holding it (a missing one is reported against the first) */
        while (k + 1 < nfiles && !st_find(&files[k], h[i].name)) k++;
        if (!st_find(&files[k], h[i].name)) k = 0;
        for (int k2 = k + 1; k2 < nfiles && st == ST_OK; k2++) /* a second copy: which one is meant? */
            if (st_find(&files[k], h[i].name) && st_find(&files[k2], h[i].name))
                st = err_set(err, ST_ERR_INPUT, "%s: tensor %s is also in %s: expected each tensor in one file", files[k].path,
                             h[i].name, files[k2].path);
        if (st != ST_OK) break;
        st = st_read_f32(&files[k], h[i].name, h[i].ndim, h[i].shape, h[i].transpose, params + pl->tensors[i].offset,
                         err);
    }
    /* Every other tensor of the files must be one we know to ignore: an unused one means the file
     * holds another model (more layers, another architecture), or a name twice. */
    for (int fi = 0; fi < nfiles; fi++) {
    const StFile *f = &files[fi];
    for (int j = 0; j < f->n && st == ST_OK; j++) {
        const StEntry *e = &f->entries[j];
        int used = 0;
        for (int i = 0; i < pl->ntensors && !used; i++) used = st_find(f, h[i].name) == e;
        const char *bare = strncmp(e->name, "transformer.", 12) ? e->name : e->name + 12;
        if (used || hf_buffer(bare, pl->cfg.n_layer)) continue;
        if (!strcmp(e->name, "lm_head.weight")) {
            st = hf_check_tied_head(f, e, pl, params, err);
            continue;
        }
        if (pl->cfg.arch == ARCH_LLAMA)
            st = err_set(err, ST_ERR_INPUT,
                         "%s: tensor %s is not used: expected only the tensors of a Llama with %d layers%s", f->path,
                         e->name, pl->cfg.n_layer, pl->cfg.untied ? "" : " and a tied head");
        else
            st = err_set(err, ST_ERR_INPUT,
                         "%s: tensor %s is not used: expected only the tensors of a GPT-2 with %d layers (and attn.bias, "
                         "attn.masked_bias, lm_head.weight)",
                         f->path, e->name, pl->cfg.n_layer);
    }
    }
    free(h);
    return st;
}

/* x as the shortest decimal that reads back as the same float (1e-05, not 9.99999975e-06: a config
 * that Hugging Face's readers and people see as the value that was set). buf: 32 bytes. */
static const char *float_text(float x, char *buf) {
    for (int p = 6; p <= 9; p++) {
        snprintf(buf, 32, "%.*g", p, x);
        if (strtof(buf, NULL) == x) break;
    }
    return buf;
}

/* muP's multipliers in config.json's "scaletrain" object: without them the weights are not the
 * model (docs/mup.md); standard models write nothing (their files are as before). */
/* The "scaletrain" object's optional members: "mup" (muP runs), "doc_mask" (document masking,
 * {"eot": id}); nothing for a standard run without masking (its config.json as before). */
static void mup_json(const ModelConfig *c, char *buf, size_t len) {
    buf[0] = '\0';
    if (c->param == PARAM_MUP)
    {
        char w[32], a[32], b[32];
        snprintf(buf, len, ", \"mup\": {\"base_width\": %s, \"input_alpha\": %s, \"output_alpha\": %s}",
                 float_text(c->mup_base_width, w), float_text(c->mup_input_alpha, a),
                 float_text(c->mup_output_alpha, b));
    }
    if (c->doc_mask) {
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, ", \"doc_mask\": {\"eot\": %d}", c->doc_eot);
    }
}

/* Reads the "scaletrain" object's "mup" member (absent: the standard parameterization) and its
 * "doc_mask" (absent: no document masking). */
static Status mup_read(const cJSON *sc, const char *path, ModelConfig *cfg, Err *err) {
    const cJSON *dm = sc ? cJSON_GetObjectItemCaseSensitive(sc, "doc_mask") : NULL;
    if (dm && !cJSON_IsNull(dm)) {
        const cJSON *eot = cJSON_GetObjectItemCaseSensitive(dm, "eot");
        if (!cJSON_IsNumber(eot) || !(eot->valuedouble >= 0 && eot->valuedouble <= INT_MAX) ||
            eot->valuedouble != floor(eot->valuedouble)) /* in range before the cast (1e300: undefined) */
            return err_set(err, ST_ERR_INPUT, "%s: scaletrain.doc_mask: expected {\"eot\": an integer token id}, found "
                           "another value", path);
        cfg->doc_mask = 1, cfg->doc_eot = (int)eot->valuedouble;
    }
    const cJSON *mu = sc ? cJSON_GetObjectItemCaseSensitive(sc, "mup") : NULL;
    if (!mu || cJSON_IsNull(mu)) return ST_OK;
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(mu, "base_width");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(mu, "input_alpha");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(mu, "output_alpha");
    if (!cJSON_IsNumber(w) || !cJSON_IsNumber(a) || !cJSON_IsNumber(b))
        return err_set(err, ST_ERR_INPUT, "%s: scaletrain.mup: expected numbers base_width, input_alpha and "
                       "output_alpha, found another value", path);
    cfg->param = PARAM_MUP, cfg->mup_base_width = (float)w->valuedouble;
    cfg->mup_input_alpha = (float)a->valuedouble, cfg->mup_output_alpha = (float)b->valuedouble;
    return ST_OK;
}

/* The RoPE type's parameters as JSON members after "rope_type" (", \"factor\": 32, ..."): empty for
 * the default RoPE. buf: 256 bytes. */
static const char *rope_members(const ModelConfig *c, char *buf) {
    char f[32], lo[32], hi[32];
    buf[0] = '\0';
    if (c->rope_type == ROPE_LINEAR)
        snprintf(buf, 256, ", \"factor\": %s", float_text(c->rope_factor, f));
    else if (c->rope_type == ROPE_LLAMA3)
        snprintf(buf, 256, ", \"factor\": %s, \"low_freq_factor\": %s, \"high_freq_factor\": %s, "
                 "\"original_max_position_embeddings\": %d", float_text(c->rope_factor, f),
                 float_text(c->rope_low_freq_factor, lo), float_text(c->rope_high_freq_factor, hi), c->rope_orig_max_seq);
    return buf;
}

size_t st_hf_config_text(const ModelConfig *c, const char *tokenizer, char *buf, size_t len) {
    int n;
    char mup[224], eps[32], theta[32], rm[256], scaling[320];
    mup_json(c, mup, sizeof mup);
    /* eos = EOT: the named tokenizer's (cl100k/o200k/llama3: not the last id), else the last id; bos =
     * the same, except llama3's <|begin_of_text|> */
    long named = tokenizer_named_eot(tokenizer), named_bos = tokenizer_named_bos(tokenizer);
    int eot = named >= 0 && named < c->vocab ? (int)named : c->vocab - 1;
    int bos = named_bos >= 0 && named_bos < c->vocab ? (int)named_bos : eot;
    if (c->arch == ARCH_LLAMA) {
        /* Both generations' keys with one meaning: transformers 4 reads rope_theta and rope_scaling
         * (null for the default RoPE), transformers 5 reads rope_parameters. */
        rope_members(c, rm);
        if (c->rope_type == ROPE_DEFAULT) snprintf(scaling, sizeof scaling, "null");
        else snprintf(scaling, sizeof scaling, "{\"rope_type\": \"%s\"%s}", model_rope_type_name(c->rope_type), rm);
        n = snprintf(buf, len,
                     "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
                     "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
                     "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n"
                     "  \"head_dim\": %d,\n  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %s,\n"
                     "  \"rope_theta\": %s,\n  \"rope_scaling\": %s,\n"
                     "  \"rope_parameters\": {\"rope_theta\": %s, \"rope_type\": \"%s\"%s},\n  \"hidden_act\": \"silu\",\n"
                     "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n  \"attention_dropout\": %g,\n"
                     "  \"tie_word_embeddings\": %s,\n  \"initializer_range\": 0.02,\n"
                     "  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n  \"torch_dtype\": \"float32\",\n"
                     "  \"dtype\": \"float32\",\n"
                     "  \"scaletrain\": {\"tokenizer\": \"%s\", \"dropout\": %g%s}\n}\n",
                     c->vocab, c->n_embd, c->ffn, c->n_layer, c->n_head, c->n_kv_head, c->n_embd / c->n_head,
                     c->max_seq, float_text(c->norm_eps, eps), float_text((float)c->rope_theta, theta), scaling,
                     theta, model_rope_type_name(c->rope_type), rm, c->dropout, c->untied ? "false" : "true", bos,
                     eot, tokenizer ? tokenizer : "", c->dropout, mup);
        if (n < 0) return 0;
        return (size_t)n < len ? (size_t)n : len - 1;
    }
    n = snprintf(buf, len,
                     "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                     "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n"
                     "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": null,\n"
                     "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
                     "  \"resid_pdrop\": %g,\n  \"embd_pdrop\": %g,\n  \"attn_pdrop\": %g,\n"
                     "  \"initializer_range\": 0.02,\n  \"tie_word_embeddings\": true,\n"
                     "  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n  \"torch_dtype\": \"float32\",\n"
                     "  \"dtype\": \"float32\",\n  \"scaletrain\": {\"tokenizer\": \"%s\"%s}\n}\n",
                     c->vocab, c->max_seq, c->max_seq, c->n_embd, c->n_layer, c->n_head, c->dropout, c->dropout,
                     c->dropout, bos, eot, tokenizer ? tokenizer : "", mup);
    if (n < 0) return 0;
    return (size_t)n < len ? (size_t)n : len - 1;
}

/* ======================================================================================== */
/* Folder-level API                                                                          */
/* ======================================================================================== */

typedef struct {
    int fd;
    const char *path;
} FdSink;

static Status fd_sink(void *ctx, const void *p, size_t n, Err *err) {
    FdSink *s = ctx;
    return file_write_fd(s->fd, p, n, s->path, err);
}

/* Streams tensors t[0..n) into dir/name through a temporary file, then fsync and rename. */
static Status write_st_file(const char *dir, const char *name, const StTensorOut *t, int n, Err *err) {
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    /* Stream through a temporary file (no second copy of the weights in memory), then rename. */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return err_set(err, ST_ERR_RUNTIME, "%s: cannot create: %s", tmp, strerror(errno));
    FdSink s = {fd, tmp};
    Status st = st_write(t, n, NULL, fd_sink, &s, err);
    if (st == ST_OK && fsync(fd) != 0) st = err_set(err, ST_ERR_RUNTIME, "%s: fsync failed: %s", tmp, strerror(errno));
    if (close(fd) != 0 && st == ST_OK) st = err_set(err, ST_ERR_RUNTIME, "%s: close failed: %s", tmp, strerror(errno));
    if (st == ST_OK && rename(tmp, path) != 0)
        st = err_set(err, ST_ERR_RUNTIME, "%s: cannot rename from %s: %s", path, tmp, strerror(errno));
    if (st != ST_OK) unlink(tmp);
    return st;
}

Status st_save_hf(const GptWeights *w, const char *dir, const char *tokenizer, Err *err) {
    return st_save_hf_opts(w, dir, tokenizer, 0, 0, err);
}

Status st_save_hf_opts(const GptWeights *w, const char *dir, const char *tokenizer, int bf16, uint64_t max_shard_bytes,
                       Err *err) {
    Status st = file_mkdirs(dir, err);
    if (st != ST_OK) return st;
    const ParamLayout *pl = &w->layout;
    StTensorOut *h = hf_tensors(pl, w->params);
    if (!h) return err_set(err, ST_ERR_RUNTIME, "out of memory writing %s", dir);
    /* Files: consecutive tensors in layout order, a new file when the next would pass the limit. */
    int n = pl->ntensors, *file_of = calloc((size_t)(n > 0 ? n : 1), sizeof(int)), nfiles = 1;
    uint64_t cur = 0, total = 0;
    for (int i = 0; i < n && file_of; i++) {
        h[i].bf16 = bf16;
        uint64_t b = (uint64_t)out_numel(&h[i]) * (bf16 ? 2 : 4);
        if (max_shard_bytes && cur > 0 && cur + b > max_shard_bytes) nfiles++, cur = 0;
        file_of[i] = nfiles - 1, cur += b, total += b;
    }
    char path[4096];
    if (!file_of) st = err_set(err, ST_ERR_RUNTIME, "out of memory writing %s", dir);
    else if (nfiles == 1) st = write_st_file(dir, "model.safetensors", h, n, err);
    for (int f = 0, i = 0; st == ST_OK && nfiles > 1 && f < nfiles; f++) {
        int j = i;
        while (j < n && file_of[j] == f) j++;
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", f + 1, nfiles);
        st = write_st_file(dir, name, h + i, j - i, err);
        i = j;
    }
    if (st == ST_OK && nfiles > 1) {
        cJSON *ix = cJSON_CreateObject(), *md = cJSON_AddObjectToObject(ix, "metadata"),
              *wm = cJSON_AddObjectToObject(ix, "weight_map");
        cJSON_AddNumberToObject(md, "total_size", (double)total);
        for (int i = 0; i < n; i++) {
            char name[64];
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", file_of[i] + 1, nfiles);
            cJSON_AddStringToObject(wm, h[i].name, name);
        }
        char *text = cJSON_Print(ix);
        cJSON_Delete(ix);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        if (!text) st = err_set(err, ST_ERR_RUNTIME, "out of memory writing %s", path);
        else {
            const void *b[1] = {text};
            size_t l[1] = {strlen(text)};
            st = file_write_atomic(path, b, l, 1, err);
        }
        free(text);
    }
    free(file_of);
    free(h);
    if (st != ST_OK) return st;
    /* The weights files an earlier export into dir left that this one did not write: a sharded
     * export over a single file (or the reverse, or other shard counts) kept both, and readers took
     * the stale ones (ours the index, transformers model.safetensors). Removed after the new files
     * are in place, before config.json names them. */
    DIR *dd = opendir(dir);
    for (struct dirent *e; dd && (e = readdir(dd));) {
        int a, b, stale = 0;
        char tail[8];
        if (!strcmp(e->d_name, "model.safetensors")) stale = nfiles > 1;
        else if (!strcmp(e->d_name, "model.safetensors.index.json")) stale = nfiles == 1;
        else if (sscanf(e->d_name, "model-%5d-of-%5d.safetensor%7s", &a, &b, tail) == 3 && !strcmp(tail, "s"))
            stale = nfiles == 1 || b != nfiles;
        if (!stale) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) != 0) st = err_set(err, ST_ERR_RUNTIME, "%s: cannot remove the earlier export's file: %s", path, strerror(errno));
    }
    if (dd) closedir(dd);
    if (st != ST_OK) return st;
    char cfg[4096];
    size_t len = st_hf_config_text(&w->cfg, tokenizer, cfg, sizeof cfg - 4);
    /* torch_dtype (transformers 4) and dtype (5): "float32" → "bfloat16", one byte more each */
    for (char *dt = cfg; bf16 && (dt = strstr(dt, "dtype\": \"float32\"")) != NULL; dt += 18) {
        memmove(dt + 17, dt + 16, len - (size_t)(dt + 16 - cfg) + 1); /* from the closing quote, with the NUL */
        memcpy(dt + 9, "bfloat16", 8);
        len++;
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    const void *cb[1] = {cfg};
    size_t cl[1] = {len};
    /* file_write_atomic fsyncs the directory, which also makes the model rename durable. */
    return file_write_atomic(path, cb, cl, 1, err);
}

static int json_int(const cJSON *o, const char *k, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    uint64_t u;
    if (!json_uint(v, 2147483647.0, &u)) return 0;
    *out = (int)u;
    return 1;
}

/* The GPT2Config fields that change the computation without changing a shape: when present,
 * each must have the value our model computes with, else the weights would load and compute
 * something else. */
static Status hf_config_semantics(const cJSON *j, const char *path, Err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "activation_function");
    if (v && !(cJSON_IsString(v) && (!strcmp(v->valuestring, "gelu_new") || !strcmp(v->valuestring, "gelu_pytorch_tanh"))))
        return err_set(err, ST_ERR_INPUT, "%s: activation_function: expected \"gelu_new\" (GPT-2's tanh GELU), found %s",
                       path, cJSON_IsString(v) ? v->valuestring : "a non-string");
    v = cJSON_GetObjectItemCaseSensitive(j, "layer_norm_epsilon");
    if (v && !(cJSON_IsNumber(v) && fabs(v->valuedouble - 1e-5) <= 1e-12))
        return err_set(err, ST_ERR_INPUT, "%s: layer_norm_epsilon: expected 1e-05, found %g", path,
                       cJSON_IsNumber(v) ? v->valuedouble : NAN);
    v = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (v && !(cJSON_IsString(v) && !strcmp(v->valuestring, "gpt2")))
        return err_set(err, ST_ERR_INPUT, "%s: model_type: expected \"gpt2\", found %s", path,
                       cJSON_IsString(v) ? v->valuestring : "a non-string");
    static const struct { const char *key; int want; } FLAGS[] = {
        {"scale_attn_weights", 1}, {"scale_attn_by_inverse_layer_idx", 0}, {"tie_word_embeddings", 1}};
    for (size_t i = 0; i < sizeof FLAGS / sizeof FLAGS[0]; i++) {
        v = cJSON_GetObjectItemCaseSensitive(j, FLAGS[i].key);
        if (v && !(cJSON_IsBool(v) && cJSON_IsTrue(v) == FLAGS[i].want))
            return err_set(err, ST_ERR_INPUT, "%s: %s: expected %s (GPT-2), found another value", path, FLAGS[i].key,
                           FLAGS[i].want ? "true" : "false");
    }
    /* n_inner != 4 n_embd would also show as a shape mismatch; say it here with the field's name. */
    v = cJSON_GetObjectItemCaseSensitive(j, "n_inner");
    const cJSON *ne = cJSON_GetObjectItemCaseSensitive(j, "n_embd");
    if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && cJSON_IsNumber(ne) && v->valuedouble == 4 * ne->valuedouble))
        return err_set(err, ST_ERR_INPUT, "%s: n_inner: expected null or 4 x n_embd, found another value", path);
    return ST_OK;
}

/* One RoPE dictionary of a Llama config.json: transformers 4's "rope_scaling" or 5's
 * "rope_parameters" (docs/llama.md). */
typedef struct {
    int present;       /* a dictionary (not absent, not null) */
    int type;          /* ROPE_* */
    int has_theta;     /* rope_theta given (rope_parameters) */
    double theta, factor, low, high;
    int orig;          /* original_max_position_embeddings */
} HfRope;

/* A number key of a RoPE dictionary: 1 and *out when present (not null), 0 when absent; -1 for
 * another value. */
static int rope_num(const cJSON *d, const char *k, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, k);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return -1;
    *out = v->valuedouble;
    return 1;
}

/* Reads j[key] into r: null or absent leaves r->present 0. Every key must be one whose meaning we
 * implement for the dictionary's rope_type; a type, key or value we do not compute with is refused
 * with one line naming it (a RoPE we would compute differently loads silently otherwise). */
static Status hf_rope_dict(const cJSON *j, const char *key, const char *path, HfRope *r, Err *err) {
    memset(r, 0, sizeof *r);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!d || cJSON_IsNull(d)) return ST_OK;
    if (!cJSON_IsObject(d))
        return err_set(err, ST_ERR_INPUT, "%s: %s: expected null or a dictionary, found another value", path, key);
    r->present = 1;
    const cJSON *t1 = cJSON_GetObjectItemCaseSensitive(d, "rope_type"), *t2 = cJSON_GetObjectItemCaseSensitive(d, "type");
    const cJSON *t = t1 ? t1 : t2;
    if ((t1 && !cJSON_IsString(t1)) || (t2 && !cJSON_IsString(t2)))
        return err_set(err, ST_ERR_INPUT, "%s: %s.rope_type: expected a string, found another value", path, key);
    if (t1 && t2 && strcmp(t1->valuestring, t2->valuestring))
        return err_set(err, ST_ERR_INPUT, "%s: %s: rope_type \"%s\" and type \"%s\" disagree", path, key,
                       t1->valuestring, t2->valuestring);
    if (!t && strcmp(key, "rope_scaling"))
        r->type = ROPE_DEFAULT; /* rope_parameters without a type: the default RoPE */
    else if (!t)
        return err_set(err, ST_ERR_INPUT, "%s: %s.rope_type: expected default, linear or llama3, found no type", path, key);
    else if ((r->type = model_rope_type_parse(t->valuestring)) < 0)
        return err_set(err, ST_ERR_INPUT, "%s: %s.rope_type: expected default, linear or llama3 (the RoPE types we "
                       "compute), found \"%s\"", path, key, t->valuestring);
    static const char *const KEYS[] = {"rope_type", "type", "rope_theta", "factor", "low_freq_factor",
                                       "high_freq_factor", "original_max_position_embeddings", "attention_factor",
                                       "partial_rotary_factor"};
    for (const cJSON *e = d->child; e; e = e->next) {
        size_t i = 0;
        while (i < sizeof KEYS / sizeof *KEYS && strcmp(e->string, KEYS[i])) i++;
        int llama3_key = i >= 4 && i <= 6, factor_key = i == 3;
        if (i == sizeof KEYS / sizeof *KEYS || (llama3_key && r->type != ROPE_LLAMA3) ||
            (factor_key && r->type == ROPE_DEFAULT && !cJSON_IsNull(e)))
            return err_set(err, ST_ERR_INPUT, "%s: %s.%s: not a parameter of rope_type %s that we compute with "
                           "(refused rather than ignored)", path, key, e->string, model_rope_type_name(r->type));
    }
    double one;
    static const char *const UNIT[] = {"attention_factor", "partial_rotary_factor"};
    for (int i = 0; i < 2; i++) {
        int k = rope_num(d, UNIT[i], &one);
        if (k < 0 || (k > 0 && one != 1.0))
            return err_set(err, ST_ERR_INPUT, "%s: %s.%s: expected 1 (not implemented otherwise), found %s", path, key,
                           UNIT[i], k < 0 ? "another value" : "a different number");
    }
    int k = rope_num(d, "rope_theta", &r->theta);
    if (k < 0) return err_set(err, ST_ERR_INPUT, "%s: %s.rope_theta: expected a number, found another value", path, key);
    r->has_theta = k;
    if (r->type == ROPE_DEFAULT) return ST_OK;
    if (rope_num(d, "factor", &r->factor) != 1)
        return err_set(err, ST_ERR_INPUT, "%s: %s.factor: expected a number (rope_type %s), found %s", path, key,
                       model_rope_type_name(r->type), cJSON_GetObjectItemCaseSensitive(d, "factor") ? "another value" : "none");
    if (r->type != ROPE_LLAMA3) return ST_OK;
    static const char *const L3[] = {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
    double *dst[] = {&r->low, &r->high, NULL}, o = 0;
    for (int i = 0; i < 3; i++)
        if (rope_num(d, L3[i], dst[i] ? dst[i] : &o) != 1 || (!dst[i] && !(o >= 1 && o <= 2147483647.0 && o == floor(o))))
            return err_set(err, ST_ERR_INPUT, "%s: %s.%s: expected a number%s (rope_type llama3), found %s", path, key,
                           L3[i], dst[i] ? "" : " (a positive integer)",
                           cJSON_GetObjectItemCaseSensitive(d, L3[i]) ? "another value" : "none");
    r->orig = (int)o;
    return ST_OK;
}

/* RoPE of a Llama config.json, either generation: transformers 4 writes a top-level "rope_theta"
 * and "rope_scaling" (null or a dictionary with "rope_type" or legacy "type"), transformers 5
 * writes "rope_parameters" (rope_theta and rope_type inside). Where both generations' keys are
 * present they must mean the same RoPE (a file that v4 and v5 readers would read differently is
 * refused), except a "rope_scaling": null beside "rope_parameters", which only v5 writes. */
static Status hf_rope_config(const cJSON *j, const char *path, ModelConfig *cfg, Err *err) {
    HfRope v4, v5;
    Status st = hf_rope_dict(j, "rope_scaling", path, &v4, err);
    if (st == ST_OK) st = hf_rope_dict(j, "rope_parameters", path, &v5, err);
    if (st != ST_OK) return st;
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(j, "rope_theta");
    if (th && !cJSON_IsNull(th) && !(cJSON_IsNumber(th) && isfinite(th->valuedouble)))
        return err_set(err, ST_ERR_INPUT, "%s: rope_theta: expected a number, found another value", path);
    int top = th && cJSON_IsNumber(th);
    if (v4.has_theta) /* transformers 4 keeps theta outside rope_scaling */
        return err_set(err, ST_ERR_INPUT, "%s: rope_scaling.rope_theta: expected the base in the top-level rope_theta "
                       "(transformers 4) or in rope_parameters (transformers 5), found it in rope_scaling", path);
    if (top && v5.has_theta && th->valuedouble != v5.theta)
        return err_set(err, ST_ERR_INPUT, "%s: rope_theta %g and rope_parameters.rope_theta %g disagree", path,
                       th->valuedouble, v5.theta);
    if (v4.present && v5.present &&
        (v4.type != v5.type || v4.factor != v5.factor || v4.low != v5.low || v4.high != v5.high || v4.orig != v5.orig))
        return err_set(err, ST_ERR_INPUT, "%s: rope_scaling and rope_parameters disagree (rope_type %s and %s, factor %g "
                       "and %g, ...): expected the same RoPE in both", path, model_rope_type_name(v4.type),
                       model_rope_type_name(v5.type), v4.factor, v5.factor);
    const HfRope *r = v5.present ? &v5 : &v4;
    cfg->rope_theta = (float)(v5.has_theta ? v5.theta : top ? th->valuedouble : 10000.0);
    cfg->rope_type = r->present ? r->type : ROPE_DEFAULT;
    cfg->rope_factor = (float)r->factor;
    cfg->rope_low_freq_factor = (float)r->low, cfg->rope_high_freq_factor = (float)r->high;
    cfg->rope_orig_max_seq = r->orig;
    /* Outside the dictionaries: a rotary fraction below 1 (transformers 4's place for it) */
    double prf;
    int k = rope_num(j, "partial_rotary_factor", &prf);
    if (k < 0 || (k > 0 && prf != 1.0))
        return err_set(err, ST_ERR_INPUT, "%s: partial_rotary_factor: expected 1 (RoPE on the whole head; not "
                       "implemented otherwise), found %s", path, k < 0 ? "another value" : "a different number");
    return ST_OK;
}

/* config.json's "scaletrain" object sc (absent: a file another tool wrote): its "tokenizer" into
 * tokenizer (may be NULL; "" when absent) and, with dropout, its "dropout" (Llama's files). A
 * member of another type is refused by name: it was taken as absent (a sample without the
 * tokenizer, a run without its dropout). */
static Status hf_scaletrain(const cJSON *sc, const char *path, char *tokenizer, size_t tokenizer_len, float *dropout,
                            Err *err) {
    if (tokenizer && tokenizer_len) tokenizer[0] = '\0';
    if (!sc || cJSON_IsNull(sc)) return ST_OK;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(sc, "tokenizer"), *d = cJSON_GetObjectItemCaseSensitive(sc, "dropout");
    if (!cJSON_IsObject(sc) || (t && !cJSON_IsString(t)) || (dropout && d && !cJSON_IsNumber(d)))
        return err_set(err, ST_ERR_INPUT, "%s: scaletrain%s: expected %s, found another value", path,
                       !cJSON_IsObject(sc) ? "" : t && !cJSON_IsString(t) ? ".tokenizer" : ".dropout",
                       !cJSON_IsObject(sc)               ? "an object"
                       : t && !cJSON_IsString(t)         ? "a string (the tokenizer's name)"
                                                         : "a number");
    if (t && tokenizer && tokenizer_len) snprintf(tokenizer, tokenizer_len, "%s", t->valuestring);
    if (d && dropout) *dropout = (float)d->valuedouble;
    return ST_OK;
}

/* LlamaForCausalLM's config.json: the shape, and every field that would change the computation
 * without changing a shape must be a value our Llama computes with (refused with its name otherwise). */
static Status hf_llama_config(const cJSON *j, const char *path, ModelConfig *cfg, char *tokenizer,
                              size_t tokenizer_len, Err *err) {
    cfg->arch = ARCH_LLAMA;
    int ok = json_int(j, "vocab_size", &cfg->vocab) && json_int(j, "hidden_size", &cfg->n_embd) &&
             json_int(j, "intermediate_size", &cfg->ffn) && json_int(j, "num_hidden_layers", &cfg->n_layer) &&
             json_int(j, "num_attention_heads", &cfg->n_head) &&
             json_int(j, "max_position_embeddings", &cfg->max_seq);
    if (!ok)
        return err_set(err, ST_ERR_INPUT, "%s: expected integer fields vocab_size, hidden_size, intermediate_size, "
                       "num_hidden_layers, num_attention_heads, max_position_embeddings; some are missing", path);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "num_key_value_heads");
    if (v && !cJSON_IsNull(v) && !(json_int(j, "num_key_value_heads", &cfg->n_kv_head) && cfg->n_kv_head > 0))
        return err_set(err, ST_ERR_INPUT, "%s: num_key_value_heads: expected a positive integer (or null: one per head)",
                       path);
    if (cfg->n_kv_head > 0 && cfg->n_head % cfg->n_kv_head)
        return err_set(err, ST_ERR_INPUT, "%s: num_key_value_heads: expected a divisor of num_attention_heads %d, found %d",
                       path, cfg->n_head, cfg->n_kv_head);
    v = cJSON_GetObjectItemCaseSensitive(j, "rms_norm_eps");
    if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble > 0)) /* a string was taken as absent */
        return err_set(err, ST_ERR_INPUT, "%s: rms_norm_eps: expected a positive number, found another value", path);
    cfg->norm_eps = cJSON_IsNumber(v) ? (float)v->valuedouble : 1e-6f; /* LlamaConfig's default */
    Status st = hf_rope_config(j, path, cfg, err);
    if (st != ST_OK) return st;
    v = cJSON_GetObjectItemCaseSensitive(j, "tie_word_embeddings");
    if (v && !cJSON_IsBool(v))
        return err_set(err, ST_ERR_INPUT, "%s: tie_word_embeddings: expected true or false, found another value", path);
    cfg->untied = !(v && cJSON_IsTrue(v)); /* LlamaConfig's default is untied */
    v = cJSON_GetObjectItemCaseSensitive(j, "sliding_window");
    if (v && !cJSON_IsNull(v))
        return err_set(err, ST_ERR_INPUT, "%s: sliding_window: expected null (full causal attention; a sliding window "
                       "is not implemented), found another value", path);
    v = cJSON_GetObjectItemCaseSensitive(j, "use_sliding_window");
    if (v && !cJSON_IsFalse(v))
        return err_set(err, ST_ERR_INPUT, "%s: use_sliding_window: expected false (a sliding window is not implemented), "
                       "found another value", path);
    v = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
    if (v && !(cJSON_IsString(v) && !strcmp(v->valuestring, "silu")))
        return err_set(err, ST_ERR_INPUT, "%s: hidden_act: expected \"silu\" (SwiGLU), found %s", path,
                       cJSON_IsString(v) ? v->valuestring : "a non-string");
    static const char *const NOBIAS[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2; i++) {
        v = cJSON_GetObjectItemCaseSensitive(j, NOBIAS[i]);
        if (v && !cJSON_IsFalse(v))
            return err_set(err, ST_ERR_INPUT, "%s: %s: expected false (our Llama has no biases), found another value",
                           path, NOBIAS[i]);
    }
    v = cJSON_GetObjectItemCaseSensitive(j, "head_dim");
    if (v && !cJSON_IsNull(v) && cfg->n_head > 0 &&
        !(cJSON_IsNumber(v) && v->valuedouble == (double)(cfg->n_embd / cfg->n_head)))
        return err_set(err, ST_ERR_INPUT, "%s: head_dim: expected hidden_size / num_attention_heads = %d, found another "
                       "value", path, cfg->n_embd / cfg->n_head);
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(j, "scaletrain");
    if ((st = hf_scaletrain(sc, path, tokenizer, tokenizer_len, &cfg->dropout, err)) != ST_OK) return st;
    st = mup_read(sc, path, cfg, err);
    if (st != ST_OK) return st;
    st = model_config_validate(cfg, err);
    if (st != ST_OK) return err_prefix(err, "%s", path);
    return ST_OK;
}

Status st_load_hf_config(const char *dir, ModelConfig *cfg, char *tokenizer, size_t tokenizer_len, Err *err) {
    char path[4096], *text;
    size_t len;
    snprintf(path, sizeof path, "%s/config.json", dir);
    Status st = file_read_all(path, &text, &len, err);
    if (st != ST_OK) return st;
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) return err_set(err, ST_ERR_INPUT, "%s: expected a JSON object, found unparsable text", path);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return err_set(err, ST_ERR_INPUT, "%s: expected a JSON object, found another JSON value", path);
    }
    memset(cfg, 0, sizeof *cfg);
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    /* absent: a GPT-2 config from before the field */
    if (mt && !(cJSON_IsString(mt) && (!strcmp(mt->valuestring, "llama") || !strcmp(mt->valuestring, "gpt2")))) {
        char found[96];
        snprintf(found, sizeof found, cJSON_IsString(mt) ? "\"%.80s\"" : "a non-string", cJSON_IsString(mt) ? mt->valuestring : "");
        cJSON_Delete(j);
        return err_set(err, ST_ERR_INPUT, "%s: model_type: expected \"gpt2\" or \"llama\" (the architectures this trainer "
                       "builds), found %s", path, found);
    }
    if (cJSON_IsString(mt) && !strcmp(mt->valuestring, "llama")) {
        st = hf_llama_config(j, path, cfg, tokenizer, tokenizer_len, err);
        cJSON_Delete(j);
        return st;
    }
    int ok = json_int(j, "vocab_size", &cfg->vocab) && json_int(j, "n_positions", &cfg->max_seq) &&
             json_int(j, "n_embd", &cfg->n_embd) && json_int(j, "n_layer", &cfg->n_layer) &&
             json_int(j, "n_head", &cfg->n_head);
    if (tokenizer && tokenizer_len) tokenizer[0] = '\0';
    st = ok ? hf_scaletrain(cJSON_GetObjectItemCaseSensitive(j, "scaletrain"), path, tokenizer, tokenizer_len, NULL, err)
            : ST_OK;
    if (st == ST_OK && ok) st = hf_config_semantics(j, path, err);
    if (st == ST_OK && ok) st = mup_read(cJSON_GetObjectItemCaseSensitive(j, "scaletrain"), path, cfg, err);
    cJSON_Delete(j);
    if (!ok)
        return err_set(err, ST_ERR_INPUT,
                       "%s: expected integer fields vocab_size, n_positions, n_embd, n_layer, n_head; some are missing",
                       path);
    if (st != ST_OK) return st;
    st = model_config_validate(cfg, err);
    if (st != ST_OK) return err_prefix(err, "%s", path);
    return ST_OK;
}

Status st_load_hf_file(GptWeights *w, const char *path, Err *err) {
    char *buf;
    size_t len;
    Status st = file_read_all(path, &buf, &len, err);
    if (st != ST_OK) return st;
    StFile f;
    st = st_parse(&f, path, buf, len, err);
    if (st == ST_OK) st = st_hf_read_model(&f, &w->layout, w->params, err);
    st_file_free(&f);
    free(buf);
    return st;
}

/* A Hugging Face sharded folder: the files named by model.safetensors.index.json's weight_map, each
 * tensor read from the file the map names (checked), every file's tensors used. */
static Status load_hf_index(GptWeights *w, const char *dir, const char *ixpath, Err *err) {
    char *text;
    size_t len;
    Status st = file_read_all(ixpath, &text, &len, err);
    if (st != ST_OK) return st;
    cJSON *ix = cJSON_Parse(text);
    free(text);
    const cJSON *wm = ix ? cJSON_GetObjectItemCaseSensitive(ix, "weight_map") : NULL;
    if (!cJSON_IsObject(wm)) {
        cJSON_Delete(ix);
        return err_set(err, ST_ERR_INPUT, "%s: expected a JSON object with a weight_map object, found none", ixpath);
    }
    enum { MAXF = 1024 };
    char (*names)[256] = calloc(MAXF, 256);
    StFile *files = calloc(MAXF, sizeof *files);
    char **bufs = calloc(MAXF, sizeof *bufs);
    int nf = 0;
    if (!names || !files || !bufs) st = err_set(err, ST_ERR_RUNTIME, "%s: out of memory", ixpath);
    for (const cJSON *e = wm->child; e && st == ST_OK; e = e->next) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || !e->valuestring[0]) {
            st = err_set(err, ST_ERR_INPUT, "%s: weight_map %s: expected a file name in the folder", ixpath, e->string);
            break;
        }
        int k = 0;
        while (k < nf && strcmp(names[k], e->valuestring)) k++;
        if (k == nf) {
            if (nf == MAXF) {
                st = err_set(err, ST_ERR_INPUT, "%s: expected at most %d files, found more", ixpath, MAXF);
                break;
            }
            snprintf(names[nf], 256, "%s", e->valuestring);
            char path[4400];
            snprintf(path, sizeof path, "%s/%s", dir, names[nf]);
            if ((st = file_read_all(path, &bufs[nf], &len, err)) != ST_OK) break;
            if ((st = st_parse(&files[nf], path, bufs[nf], len, err)) != ST_OK) break;
            nf++;
        }
        if (!st_find(&files[k], e->string))
            st = err_set(err, ST_ERR_INPUT, "%s: weight_map puts %s in %s, which does not hold it", ixpath, e->string,
                         names[k]);
    }
    if (st == ST_OK && nf == 0) st = err_set(err, ST_ERR_INPUT, "%s: weight_map: expected tensors, found none", ixpath);
    /* the map is the index of the files: every tensor they hold is listed, and where it is */
    for (int k = 0; k < nf && st == ST_OK; k++)
        for (int j = 0; j < files[k].n && st == ST_OK; j++) {
            const cJSON *m = cJSON_GetObjectItemCaseSensitive(wm, files[k].entries[j].name);
            if (!cJSON_IsString(m))
                st = err_set(err, ST_ERR_INPUT, "%s: expected weight_map to list every tensor of its files, found %s in %s "
                             "unlisted", ixpath, files[k].entries[j].name, names[k]);
            else if (strcmp(m->valuestring, names[k]))
                st = err_set(err, ST_ERR_INPUT, "%s: weight_map puts %s in %s, found it in %s too", ixpath,
                             files[k].entries[j].name, m->valuestring, names[k]);
        }
    if (st == ST_OK) st = st_hf_read_files(files, nf, &w->layout, w->params, err);
    for (int i = 0; files && i < nf; i++) st_file_free(&files[i]);
    for (int i = 0; bufs && i < MAXF; i++) free(bufs[i]);
    free(names), free(files), free(bufs);
    cJSON_Delete(ix);
    return st;
}

Status st_load_hf_weights(GptWeights *w, const char *dir, Err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (access(path, F_OK) == 0) return load_hf_index(w, dir, path, err);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    return st_load_hf_file(w, path, err);
}
