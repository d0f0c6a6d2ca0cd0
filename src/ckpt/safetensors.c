/* safetensors.c — Hugging Face GPT-2 safetensors export/import of the model weights. */
#include "ckpt/safetensors.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"

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

typedef struct {
    char hf[96];
    int tensor;    /* index in the layout */
    int transpose;
    int ndim;
    int shape[2];  /* Hugging Face shape */
} HfTensor;

/* The Hugging Face tensor list for a layout, in the order we write them. Caller frees. */
static HfTensor *hf_tensors(const ParamLayout *pl, int *count) {
    HfTensor *h = calloc((size_t)pl->ntensors, sizeof *h);
    if (!h) return NULL;
    for (int k = 0; k < pl->ntensors; k++) {
        const TensorInfo *t = &pl->tensors[k];
        HfTensor *x = &h[k];
        x->tensor = k;
        if (!strcmp(t->name, "wte") || !strcmp(t->name, "wpe")) {
            snprintf(x->hf, sizeof x->hf, "%s.weight", t->name);
        } else if (!strcmp(t->name, "lnfw") || !strcmp(t->name, "lnfb")) {
            snprintf(x->hf, sizeof x->hf, "ln_f.%s", t->name[3] == 'w' ? "weight" : "bias");
        } else {
            int l = atoi(t->name + 2);
            const char *leaf = strrchr(t->name, '.') + 1;
            for (int j = 0; j < BT_COUNT; j++)
                if (!strcmp(leaf, BLOCK_MAP[j].ours)) {
                    snprintf(x->hf, sizeof x->hf, "h.%d.%s", l, BLOCK_MAP[j].hf);
                    x->transpose = BLOCK_MAP[j].transpose;
                }
        }
        x->ndim = t->ndim;
        x->shape[0] = x->transpose ? t->shape[1] : t->rows_real;
        x->shape[1] = x->transpose ? t->shape[0] : t->shape[1];
    }
    *count = pl->ntensors;
    return h;
}

static size_t hf_numel(const HfTensor *x) { return (size_t)x->shape[0] * (x->ndim == 2 ? x->shape[1] : 1); }

Status st_save_hf(const Gpt *g, const char *dir, const char *tokenizer, Err *err) {
    Status st = file_mkdirs(dir, err);
    if (st != ST_OK) return st;
    int n = 0;
    HfTensor *h = hf_tensors(&g->layout, &n);
    cJSON *hdr = cJSON_CreateObject();
    char *json = NULL;
    float *data = NULL;
    if (!h || !hdr) goto oom;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += hf_numel(&h[i]);
    data = malloc(total * sizeof(float) + 1);
    if (!data) goto oom;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const TensorInfo *t = &g->layout.tensors[h[i].tensor];
        const float *src = g->params + t->offset;
        size_t ne = hf_numel(&h[i]);
        if (h[i].transpose) {
            int R = t->shape[0], Cc = t->shape[1]; /* ours (R, Cc) → theirs (Cc, R) */
            for (int r = 0; r < R; r++)
                for (int c = 0; c < Cc; c++) data[off + (size_t)c * R + r] = src[(size_t)r * Cc + c];
        } else {
            memcpy(data + off, src, ne * sizeof(float));
        }
        cJSON *e = cJSON_AddObjectToObject(hdr, h[i].hf);
        cJSON_AddStringToObject(e, "dtype", "F32");
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < h[i].ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber(h[i].shape[d]));
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off * sizeof(float))));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)((off + ne) * sizeof(float))));
        off += ne;
    }
    cJSON *meta = cJSON_AddObjectToObject(hdr, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    json = cJSON_PrintUnformatted(hdr);
    if (!json) goto oom;
    size_t jlen = strlen(json), padded = (jlen + 7) / 8 * 8;
    char *jbuf = malloc(padded);
    if (!jbuf) goto oom;
    memcpy(jbuf, json, jlen);
    memset(jbuf + jlen, ' ', padded - jlen);
    uint64_t hlen = padded; /* little-endian on every platform we build for (x86-64, aarch64) */
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const void *bufs[3] = {&hlen, jbuf, data};
    size_t lens[3] = {8, padded, total * sizeof(float)};
    st = file_write_atomic(path, bufs, lens, 3, err);
    free(jbuf);
    if (st == ST_OK) {
        const ModelConfig *c = &g->cfg;
        char cfg[2048];
        int len = snprintf(cfg, sizeof cfg,
                 "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                 "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n"
                 "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": null,\n"
                 "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
                 "  \"resid_pdrop\": %g,\n  \"embd_pdrop\": %g,\n  \"attn_pdrop\": %g,\n"
                 "  \"initializer_range\": 0.02,\n  \"tie_word_embeddings\": true,\n"
                 "  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n  \"torch_dtype\": \"float32\",\n"
                 "  \"scaletrain\": {\"tokenizer\": \"%s\"}\n}\n",
                 c->vocab, c->max_seq, c->max_seq, c->n_embd, c->n_layer, c->n_head, c->dropout, c->dropout,
                 c->dropout, c->vocab - 1, c->vocab - 1, tokenizer ? tokenizer : "");
        snprintf(path, sizeof path, "%s/config.json", dir);
        const void *cb[1] = {cfg};
        size_t cl[1] = {(size_t)len};
        st = file_write_atomic(path, cb, cl, 1, err);
    }
    free(h);
    free(data);
    free(json);
    cJSON_Delete(hdr);
    return st;
oom:
    free(h);
    free(data);
    free(json);
    cJSON_Delete(hdr);
    return err_set(err, ST_ERR_RUNTIME, "%s: out of memory writing model.safetensors", dir);
}

static int json_int(const cJSON *o, const char *k, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v)) return 0;
    *out = v->valueint;
    return 1;
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
    memset(cfg, 0, sizeof *cfg);
    int ok = json_int(j, "vocab_size", &cfg->vocab) && json_int(j, "n_positions", &cfg->max_seq) &&
             json_int(j, "n_embd", &cfg->n_embd) && json_int(j, "n_layer", &cfg->n_layer) &&
             json_int(j, "n_head", &cfg->n_head);
    if (tokenizer && tokenizer_len) {
        tokenizer[0] = '\0';
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "scaletrain");
        const cJSON *t = s ? cJSON_GetObjectItemCaseSensitive(s, "tokenizer") : NULL;
        if (cJSON_IsString(t)) snprintf(tokenizer, tokenizer_len, "%s", t->valuestring);
    }
    cJSON_Delete(j);
    if (!ok)
        return err_set(err, ST_ERR_INPUT,
                       "%s: expected integer fields vocab_size, n_positions, n_embd, n_layer, n_head; some are missing",
                       path);
    st = model_config_validate(cfg, err);
    if (st != ST_OK) return err_prefix(err, "%s", path);
    return ST_OK;
}

Status st_load_hf_weights(Gpt *g, const char *dir, Err *err) {
    char path[4096], *buf;
    size_t len;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    Status st = file_read_all(path, &buf, &len, err);
    if (st != ST_OK) return st;
    cJSON *hdr = NULL;
    HfTensor *h = NULL;
    uint64_t hlen = 0;
    if (len < 8) {
        st = err_set(err, ST_ERR_INPUT, "%s: expected at least 8 bytes, found %zu", path, len);
        goto done;
    }
    memcpy(&hlen, buf, 8);
    if (hlen > len - 8) {
        st = err_set(err, ST_ERR_INPUT, "%s: header length %llu exceeds the file size %zu (truncated?)", path,
                     (unsigned long long)hlen, len);
        goto done;
    }
    hdr = cJSON_ParseWithLength(buf + 8, (size_t)hlen);
    if (!hdr) {
        st = err_set(err, ST_ERR_INPUT, "%s: expected a JSON header, found unparsable bytes", path);
        goto done;
    }
    const char *data = buf + 8 + hlen;
    size_t dlen = len - 8 - hlen;
    int n = 0;
    h = hf_tensors(&g->layout, &n);
    ST_CHECK(h != NULL);
    memset(g->params, 0, g->layout.total * sizeof(float));
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(hdr, h[i].hf);
        if (!e) {
            char pre[128];
            snprintf(pre, sizeof pre, "transformer.%s", h[i].hf);
            e = cJSON_GetObjectItemCaseSensitive(hdr, pre);
        }
        if (!e) {
            st = err_set(err, ST_ERR_INPUT, "%s: tensor %s missing", path, h[i].hf);
            goto done;
        }
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
        const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        if (!cJSON_IsString(dt) || strcmp(dt->valuestring, "F32") != 0) {
            st = err_set(err, ST_ERR_INPUT, "%s: tensor %s: expected dtype F32, found %s", path, h[i].hf,
                         cJSON_IsString(dt) ? dt->valuestring : "none");
            goto done;
        }
        int nd = cJSON_GetArraySize(shape), s0 = 0, s1 = 1;
        if (nd >= 1) s0 = cJSON_GetArrayItem(shape, 0)->valueint;
        if (nd >= 2) s1 = cJSON_GetArrayItem(shape, 1)->valueint;
        if (nd != h[i].ndim || s0 != h[i].shape[0] || (nd == 2 && s1 != h[i].shape[1])) {
            st = err_set(err, ST_ERR_INPUT, "%s: tensor %s: expected shape [%d%s%d], found %d dims [%d, %d]", path,
                         h[i].hf, h[i].shape[0], h[i].ndim == 2 ? ", " : "", h[i].ndim == 2 ? h[i].shape[1] : 0,
                         nd, s0, s1);
            goto done;
        }
        double b0 = cJSON_GetArrayItem(offs, 0) ? cJSON_GetArrayItem(offs, 0)->valuedouble : -1;
        double b1 = cJSON_GetArrayItem(offs, 1) ? cJSON_GetArrayItem(offs, 1)->valuedouble : -1;
        size_t ne = hf_numel(&h[i]);
        if (b0 < 0 || b1 > (double)dlen || b1 - b0 != (double)(ne * sizeof(float))) {
            st = err_set(err, ST_ERR_INPUT, "%s: tensor %s: data offsets [%.0f, %.0f] outside the %zu data bytes", path,
                         h[i].hf, b0, b1, dlen);
            goto done;
        }
        const TensorInfo *t = &g->layout.tensors[h[i].tensor];
        float *dst = g->params + t->offset;
        const char *src = data + (size_t)b0;
        if (h[i].transpose) {
            int R = t->shape[0], Cc = t->shape[1];
            for (int r = 0; r < R; r++)
                for (int c = 0; c < Cc; c++) memcpy(&dst[(size_t)r * Cc + c], src + ((size_t)c * R + r) * 4, 4);
        } else {
            memcpy(dst, src, ne * sizeof(float));
        }
    }
done:
    cJSON_Delete(hdr);
    free(h);
    free(buf);
    return st;
}
