/* fuzz_readers.c — the readers of untrusted files as fuzzing harnesses (fuzz_readers.h).
 *
 * Every seed is a file one of the project's writers produced (st_save_hf, ckpt_save, ckpt_shard_save,
 * ckpt_lora_save, ckpt_export_llmc, bpe_train, shard_write, shard_mask_write,
 * plan_hardware_to_json) or one the repository ships (data/, tests/fixtures/). Contents:
 * helpers | models and weights | safetensors and Hugging Face folders | checkpoints (single, sharded,
 * LoRA, llm.c) | token shards and masks | tokenizers | prepare's inputs | fit's table | hardware
 * profiles | the table of readers and the public functions. */
#include "fuzz_readers.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>
#include <zlib.h>
#include <zstd.h>

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_internal.h"
#include "ckpt/lora_ckpt.h"
#include "ckpt/safetensors.h"
#include "ckpt/shard.h"
#include "cli/hwprobe.h"
#include "comm/comm.h"
#include "core/fileio.h"
#include "data/bpe.h"
#include "data/chat.h"
#include "data/docsource.h"
#include "data/loader.h"
#include "data/shard.h"
#include "fit/fit.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/lora.h"
#include "plan/plan.h"
#include "train/health.h"

/* ======================================================================================== */
/* Helpers                                                                                   */
/* ======================================================================================== */

static Status put(const char *path, const void *b, size_t n, Err *err) {
    FILE *f = fopen(path, "wb");
    if (!f) return err_set(err, ST_ERR_RUNTIME, "%s: cannot create: %s", path, strerror(errno));
    size_t w = n ? fwrite(b, 1, n, f) : 0;
    int bad = fclose(f) != 0 || w != n;
    return bad ? err_set(err, ST_ERR_RUNTIME, "%s: write failed", path) : ST_OK;
}

static Status get(const char *path, uint8_t **b, size_t *n, Err *err) {
    char *t = NULL;
    Status st = file_read_all(path, &t, n, err);
    *b = (uint8_t *)t;
    return st;
}

/* The seed of r: a copy of the file at path. */
static Status seed_from(FzReader *r, const char *path, Err *err) {
    free(r->seed);
    r->seed = NULL;
    return get(path, &r->seed, &r->seed_len, err);
}

/* a/b into out (cap bytes; "" when it does not fit: every path here is short) */
static void join(char *out, size_t cap, const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la + 1 + lb >= cap) {
        out[0] = '\0';
        return;
    }
    memcpy(out, a, la), out[la] = '/', memcpy(out + la + 1, b, lb + 1);
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static void fill_random(float *p, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++) p[i] = (float)((double)(rng_next(&s) >> 11) / 9007199254740992.0 - 0.5) * 0.2f;
}

static uint64_t mix(uint64_t h, const void *p, size_t n) { return XXH3_64bits_withSeed(p, n, h); }

/* The strict flags of a safetensors image: its 8-byte length and its JSON header, but for the
 * __metadata__ object's value (a free string map) — what no accepted change may touch. */
static uint8_t *st_strict(const uint8_t *b, size_t n) {
    uint8_t *s = calloc(n ? n : 1, 1);
    if (!s || n < 8) return s;
    uint64_t hl;
    memcpy(&hl, b, 8);
    if (hl > n - 8) return s;
    memset(s, 1, 8 + (size_t)hl);
    const char *h = (const char *)b + 8, *m = memmem(h, (size_t)hl, "\"__metadata__\":{", 16);
    if (m) {
        const char *e = memchr(m, '}', (size_t)(h + hl - m));
        if (e) memset(s + (m + 15 - (const char *)b), 0, (size_t)(e - (m + 15)) + 1);
    }
    return s;
}

static const char *g_srcdir = "."; /* the repository (fz_setup's srcdir) */

/* The shared small tokenizer: `tokenizer train --vocab-size 320` on the start of Tiny Shakespeare,
 * written once per process under workdir/_tokenizer (encoder.json, vocab.bpe). */
static char tok_dir[1100];

static Status shared_tokenizer(const char *workdir, const char *srcdir, Err *err) {
    if (tok_dir[0]) return ST_OK;
    char dir[1100], src[1100];
    join(dir, sizeof dir, workdir, "_tokenizer");
    file_rm_tree(dir);
    join(src, sizeof src, srcdir, "data/tinyshakespeare/input.txt");
    uint8_t *text;
    size_t n;
    Status st = get(src, &text, &n, err);
    if (st != ST_OK) return st;
    const uint8_t *texts[1] = {text};
    size_t lens[1] = {n < 20000 ? n : 20000};
    BpeTrainOptions o = bpe_train_default_options();
    o.vocab_size = 320;
    o.threads = 1;
    st = bpe_train(texts, lens, 1, &o, dir, NULL, err);
    free(text);
    if (st == ST_OK) snprintf(tok_dir, sizeof tok_dir, "%s", dir);
    return st;
}

static Status load_shared_tokenizer(Tokenizer **t, Err *err) {
    char e[1200], b[1200];
    join(e, sizeof e, tok_dir, "encoder.json");
    join(b, sizeof b, tok_dir, "vocab.bpe");
    return tokenizer_load_files(t, e, b, err);
}

/* A sample the tokenizers must round-trip: decode(encode(x)) == x for any tokenizer that loads. */
static const char ROUNDTRIP[] = "First Citizen:\nBefore we proceed any further, hear me speak. "
                                 "\xc3\xa9t\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac 123 <|endoftext|>\n\n\t x";

/* Encodes and decodes ROUNDTRIP with t; sets r->broken when the bytes differ. digest: the ids. */
static uint64_t tokenizer_check(FzReader *r, const Tokenizer *t) {
    uint32_t *ids = NULL;
    size_t nids = 0, cap = 0, len = 0, ocap = 0;
    uint8_t *out = NULL;
    Err e;
    uint64_t h = tokenizer_hash(t);
    if (tokenizer_encode(t, (const uint8_t *)ROUNDTRIP, sizeof ROUNDTRIP - 1, &ids, &nids, &cap, &e) != ST_OK ||
        tokenizer_decode(t, ids, nids, &out, &len, &ocap, &e) != ST_OK)
        snprintf(r->broken, sizeof r->broken, "a tokenizer that loads failed to encode or decode: %.200s", e.msg);
    else if (len != sizeof ROUNDTRIP - 1 || memcmp(out, ROUNDTRIP, len))
        snprintf(r->broken, sizeof r->broken, "a tokenizer that loads does not round-trip text (%zu bytes back of %zu)",
                 len, sizeof ROUNDTRIP - 1);
    for (size_t i = 0; i < nids; i++)
        if (ids[i] >= tokenizer_vocab_size(t))
            snprintf(r->broken, sizeof r->broken, "encode gave id %u, beyond the vocabulary %u", ids[i],
                     tokenizer_vocab_size(t));
    h = mix(h, ids, nids * sizeof *ids);
    free(ids);
    free(out);
    return h;
}

/* ======================================================================================== */
/* Models and weights                                                                        */
/* ======================================================================================== */

/* The model of every weights seed: GPT-2 (or Llama), 1 layer, 2 heads, 16 channels, 96 ids, 16 positions. */
static ModelConfig tiny_config(int arch) {
    ModelConfig c;
    memset(&c, 0, sizeof c);
    c.arch = arch, c.n_layer = 1, c.n_head = 2, c.n_embd = 16, c.vocab = 96, c.max_seq = 16;
    if (arch == ARCH_LLAMA) {
        c.n_kv_head = 1, c.untied = 1, c.rope_theta = 500000.0f;
        c.rope_type = ROPE_LLAMA3, c.rope_factor = 8, c.rope_low_freq_factor = 1, c.rope_high_freq_factor = 4;
        c.rope_orig_max_seq = 8;
    }
    Err e;
    model_config_validate(&c, &e);
    return c;
}

static int weights_new(GptWeights *w, const ModelConfig *cfg, uint64_t seed) {
    memset(w, 0, sizeof *w);
    w->cfg = *cfg;
    w->last = cfg->n_layer;
    if (layout_init(&w->layout, cfg, 1) != 0) return -1;
    w->params = calloc(w->layout.total, sizeof(float));
    if (!w->params) return -1;
    if (seed) {
        fill_random(w->params, w->layout.total, seed);
        for (int k = 0; k < w->layout.ntensors; k++) { /* padded vocabulary rows are zero in every file */
            const TensorInfo *t = &w->layout.tensors[k];
            if (t->rows_real < t->shape[0])
                memset(w->params + t->offset + (size_t)t->rows_real * t->shape[1], 0,
                       (size_t)(t->shape[0] - t->rows_real) * t->shape[1] * sizeof(float));
        }
    }
    return 0;
}

static void weights_free(GptWeights *w) {
    free(w->params);
    layout_free(&w->layout);
    memset(w, 0, sizeof *w);
}

/* ======================================================================================== */
/* safetensors and Hugging Face folders                                                      */
/* ======================================================================================== */

typedef struct {
    GptWeights w;     /* the model the reader loads into */
    char dir[1100];
    cJSON *state;     /* checkpoints: state.json without its checksum member (fixups rewrite it) */
    cJSON *run;       /* the real run's config and extra (run_fixture) */
    char state_path[1200], ckpt[1100];
    const char *listed; /* checkpoints: the file whose size and hash state.json records (fixups) */
    float *m, *v;
    ParamLayout pl2;  /* sharded checkpoints: a tp 2 slice loaded as well */
    float *p2;
    LoraLayout ll;
    ModelConfig cfg;
    Tokenizer *tok, *tok2;
    ChatFormat f1, f2;
} Priv;

static Priv *priv_new(FzReader *r, const char *workdir) {
    Priv *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    join(p->dir, sizeof p->dir, workdir, r->name);
    r->priv = p;
    return p;
}

static void priv_free(FzReader *r) {
    Priv *p = r->priv;
    if (!p) return;
    weights_free(&p->w);
    cJSON_Delete(p->state);
    cJSON_Delete(p->run);
    free(p->m), free(p->v), free(p->p2);
    layout_free(&p->pl2);
    tokenizer_free(p->tok), tokenizer_free(p->tok2);
    free(p);
    r->priv = NULL;
}

static uint64_t params_digest(const GptWeights *w) {
    return XXH3_64bits(w->params, w->layout.total * sizeof(float)) | 1;
}

/* safetensors: model.safetensors of `train --out` (st_save_hf) -> st_load_hf_file. */
static Status st_setup(FzReader *r, Err *err) {
    Priv *p = r->priv;
    ModelConfig c = tiny_config(ARCH_GPT2);
    GptWeights src;
    if (weights_new(&src, &c, 11) || weights_new(&p->w, &c, 0)) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    Status st = st_save_hf(&src, p->dir, "gpt2", err);
    weights_free(&src);
    join(r->path, sizeof r->path, p->dir, "model.safetensors");
    if (st == ST_OK) st = seed_from(r, r->path, err);
    if (st == ST_OK) r->strict = st_strict(r->seed, r->seed_len);
    r->names[0] = "model.safetensors";
    return st;
}

static Status st_run(FzReader *r, const uint8_t *b, size_t n, uint64_t *digest, Err *err) {
    Priv *p = r->priv;
    Status st = put(r->path, b, n, err);
    if (st == ST_OK) st = st_load_hf_file(&p->w, r->path, err);
    if (st == ST_OK) *digest = params_digest(&p->w);
    return st;
}

/* hf_index / hf_shard: a Hugging Face sharded folder in bf16 (st_save_hf_opts: 4 files of at most
 * 4 KiB of tensors) -> st_load_hf_weights; the index, or the second file, mutated. */
static Status hf_sharded_setup(FzReader *r, int index, Err *err) {
    Priv *p = r->priv;
    ModelConfig c = tiny_config(ARCH_GPT2);
    GptWeights src;
    if (weights_new(&src, &c, 12) || weights_new(&p->w, &c, 0)) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    Status st = st_save_hf_opts(&src, p->dir, "gpt2", 1, 4096, err);
    weights_free(&src);
    char probe[1200];
    join(probe, sizeof probe, p->dir, "model-00002-of-00004.safetensors");
    if (st == ST_OK && access(probe, F_OK) != 0)
        st = err_set(err, ST_ERR_RUNTIME, "%s: expected st_save_hf_opts to write 4 files, found another count", p->dir);
    join(r->path, sizeof r->path, p->dir, index ? "model.safetensors.index.json" : "model-00002-of-00004.safetensors");
    if (st == ST_OK) st = seed_from(r, r->path, err);
    if (st == ST_OK && !index) r->strict = st_strict(r->seed, r->seed_len);
    r->names[0] = index ? "model.safetensors.index.json" : "model-00002-of-00004.safetensors";
    r->names[1] = index ? "/hf_index/" : "/hf_shard/"; /* the index's errors may name a file of its folder */
    return st;
}

static Status hf_index_setup(FzReader *r, Err *err) { return hf_sharded_setup(r, 1, err); }
static Status hf_shard_setup(FzReader *r, Err *err) { return hf_sharded_setup(r, 0, err); }

static Status hf_sharded_run(FzReader *r, const uint8_t *b, size_t n, uint64_t *digest, Err *err) {
    Priv *p = r->priv;
    Status st = put(r->path, b, n, err);
    if (st == ST_OK) st = st_load_hf_weights(&p->w, p->dir, err);
    if (st == ST_OK) *digest = params_digest(&p->w);
    return st;
}

/* hf_config / hf_config_llama: config.json as `train --out` writes it (st_hf_config_text) ->
 * st_load_hf_config (what --init-from, sample, eval and export read first). */
static Status hf_config_setup_arch(FzReader *r, int arch, Err *err) {
    Priv *p = r->priv;
    ModelConfig c = tiny_config(arch);
    char text[4096];
    size_t n = st_hf_config_text(&c, arch == ARCH_LLAMA ? "llama3" : "gpt2", text, sizeof text);
    Status st = file_mkdirs(p->dir, err);
    join(r->path, sizeof r->path, p->dir, "config.json");
    if (st == ST_OK) st = put(r->path, text, n, err);
    if (st == ST_OK) st = seed_from(r, r->path, err);
    r->names[0] = "config.json";
    return st;
}

static Status hf_config_setup(FzReader *r, Err *err) { return hf_config_setup_arch(r, ARCH_GPT2, err); }
static Status hf_config_llama_setup(FzReader *r, Err *err) { return hf_config_setup_arch(r, ARCH_LLAMA, err); }

static Status hf_config_run(FzReader *r, const uint8_t *b, size_t n, uint64_t *digest, Err *err) {
    Priv *p = r->priv;
    Status st = put(r->path, b, n, err);
    ModelConfig c;
    char tok[256];
    memset(&c, 0, sizeof c);
    if (st == ST_OK) st = st_load_hf_config(p->dir, &c, tok, sizeof tok, err);
    if (st == ST_OK) *digest = mix(XXH3_64bits(&c, sizeof c), tok, strlen(tok)) | 1;
    return st;
}

/* ======================================================================================== */
/* Checkpoints                                                                               */
/* ======================================================================================== */

/* The state.json of a checkpoint: body (as cJSON_Print writes it, ending "\n}") sealed with its
 * checksum member (ckpt_state_seal, the writers' own). */
static Status state_write(Priv *p, Err *err) {
    char *text = cJSON_Print(p->state);
    char *sealed = text ? ckpt_state_seal(text) : NULL;
    Status st = sealed ? put(p->state_path, sealed, strlen(sealed), err)
                       : err_set(err, ST_ERR_RUNTIME, "out of memory");
    free(text);
    free(sealed);
    return st;
}

/* Reads ckpt/state.json into p->state without its checksum member, and checks that sealing it
 * again gives the same bytes (else a fixup would change more than the file it records). */
static Status state_load(Priv *p, Err *err) {
    join(p->state_path, sizeof p->state_path, p->ckpt, "state.json");
    uint8_t *b;
    size_t n;
    Status st = get(p->state_path, &b, &n, err);
    if (st != ST_OK) return st;
    cJSON_Delete(p->state);
    p->state = cJSON_ParseWithLength((const char *)b, n);
    cJSON_DeleteItemFromObjectCaseSensitive(p->state, "state_checksum");
    char *text = p->state ? cJSON_Print(p->state) : NULL;
    char *sealed = text ? ckpt_state_seal(text) : NULL;
    if (!sealed || strlen(sealed) != n || memcmp(sealed, b, n))
        st = err_set(err, ST_ERR_RUNTIME, "%s: sealing the parsed state.json again does not give its bytes",
                     p->state_path);
    free(text), free(sealed), free(b);
    return st;
}

/* Fixup: state.json records the size and XXH3-64 of b[0, n) for file p->listed (the single-process
 * and sharded formats: files.NAME {bytes, xxh3}; LoRA's: files.NAME "xxh3 hex"), sealed again. */
static Status state_record(Priv *p, const uint8_t *b, size_t n, int lora, Err *err) {
    cJSON *files = cJSON_GetObjectItemCaseSensitive(p->state, "files");
    char hx[17];
    snprintf(hx, sizeof hx, "%016llx", (unsigned long long)XXH3_64bits(b, n));
    if (lora) {
        cJSON_ReplaceItemInObjectCaseSensitive(files, p->listed, cJSON_CreateString(hx));
    } else {
        cJSON *e = cJSON_GetObjectItemCaseSensitive(files, p->listed);
        cJSON_ReplaceItemInObjectCaseSensitive(e, "bytes", cJSON_CreateNumber((double)n));
        cJSON_ReplaceItemInObjectCaseSensitive(e, "xxh3", cJSON_CreateString(hx));
    }
    return state_write(p, err);
}

/* Fixup of a state.json's own text: sealed again as its writer seals it (ckpt_state_verify's rule):
 * the text before its checksum member (or, without one, before a closing "\n}"), the member with the
 * XXH3-64 of what precedes its value, the closing brace. Returns a malloc'd copy (*m bytes). */
static uint8_t *state_reseal(const uint8_t *b, size_t n, size_t *m) {
    static const char marker[] = ",\n\t\"state_checksum\":\t\"", tail[] = "\"\n}\n";
    size_t ml = sizeof marker - 1, tl = sizeof tail - 1, body = n;
    const uint8_t *at = NULL;
    for (const uint8_t *q = b; (q = memmem(q, (size_t)(b + n - q), marker, ml)) != NULL; q++) at = q;
    if (at) body = (size_t)(at - b);
    else if (n >= 3 && !memcmp(b + n - 3, "\n}\n", 3)) body = n - 3;
    else if (n >= 2 && !memcmp(b + n - 2, "\n}", 2)) body = n - 2;
    uint8_t *c = malloc(body + ml + 16 + tl + 1);
    if (!c) return NULL;
    memcpy(c, b, body);
    memcpy(c + body, marker, ml);
    char hx[17];
    snprintf(hx, sizeof hx, "%016llx", (unsigned long long)XXH3_64bits(c, body + ml));
    memcpy(c + body + ml, hx, 16);
    memcpy(c + body + ml + 16, tail, tl);
    *m = body + ml + 16 + tl;
    return c;
}

static Status opt_bufs(Priv *p, size_t n, Err *err) {
    p->m = calloc(n, sizeof(float)), p->v = calloc(n, sizeof(float));
    return p->m && p->v ? ST_OK : err_set(err, ST_ERR_RUNTIME, "out of memory");
}

/* tests/fixtures/fuzz_state_config.json: the "config" and "extra" members of the state.json that
 * `scaletrain train --data 'shards/train_*.bin' --tokenizer bytes --layers 1 --heads 2 --channels 32
 * --max-seq-len 32 --seq-len 32 --micro-batch 2 --steps 1 --ckpt-dir ck --ckpt-every 1 --threads 1`
 * wrote (shards: `prepare --tokenizer bytes --separator "" --val-fraction 0.1` of Tiny Shakespeare's
 * first 30000 bytes): the trainer's config and its health detectors' state. */
static Status run_fixture(Priv *p, Err *err) {
    char src[1200];
    join(src, sizeof src, g_srcdir, "tests/fixtures/fuzz_state_config.json");
    uint8_t *b;
    size_t n;
    Status st = get(src, &b, &n, err);
    if (st != ST_OK) return st;
    p->run = cJSON_ParseWithLength((const char *)b, n);
    free(b);
    return cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(p->run, "config"))
               ? ST_OK : err_set(err, ST_ERR_RUNTIME, "%s: expected {\"config\": {...}, \"extra\": {...}}", src);
}

/* A single-process checkpoint (ckpt_save) of the tiny GPT-2 with AdamW's moments, at step 1 under
 * p->dir, and the reader's target file in it; its config and extra a real run's (run_fixture). */
static Status ckpt_single_setup(FzReader *r, const char *file, Err *err) {
    Priv *p = r->priv;
    Status rs = run_fixture(p, err);
    if (rs != ST_OK) return rs;
    ModelConfig c = tiny_config(ARCH_GPT2);
    GptWeights src;
    if (weights_new(&src, &c, 13) || weights_new(&p->w, &c, 0)) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    Status st = opt_bufs(p, src.layout.total, err);
    float *m = malloc(src.layout.total * sizeof(float)), *v = malloc(src.layout.total * sizeof(float));
    if (st == ST_OK && (!m || !v)) st = err_set(err, ST_ERR_RUNTIME, "out of memory");
    if (st == ST_OK) {
        fill_random(m, src.layout.total, 14), fill_random(v, src.layout.total, 15);
        for (size_t i = 0; i < src.layout.total; i++) v[i] = v[i] * v[i];
        CkptOptState opt = {.m = m, .v = v};
        CkptMeta meta;
        memset(&meta, 0, sizeof meta);
        meta.step = 1, meta.tokens_seen = 256, meta.sched_step = 1, meta.loader.seed = 7, meta.loader.consumed = 16;
        snprintf(meta.optimizer, sizeof meta.optimizer, "adamw");
        meta.optim_step = 1;
        ckpt_meta_set_rng(&meta, "init_seed", 1337);
        ckpt_meta_set_rng(&meta, "dropout_seed", 42);
        ckpt_meta_set_scaler(&meta, "scale", 65536), ckpt_meta_set_scaler(&meta, "good_steps", 3);
        meta.config = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(p->run, "config"), 1);
        meta.extra = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(p->run, "extra"), 1);
        CkptOptions o = ckpt_default_options();
        o.dir = p->dir;
        o.tokenizer = "gpt2";
        file_rm_tree(p->dir);
        st = ckpt_save(&src, &opt, &meta, &o, NULL, err);
        cJSON_Delete(meta.config);
        cJSON_Delete(meta.extra);
    }
    free(m), free(v);
    weights_free(&src);
    join(p->ckpt, sizeof p->ckpt, p->dir, "step_00000001");
    join(r->path, sizeof r->path, p->ckpt, file);
    if (st == ST_OK) st = state_load(p, err);
    if (st == ST_OK) st = seed_from(r, r->path, err);
    r->names[0] = "step_00000001";
    p->listed = file;
    return st;
}

static uint64_t meta_digest(uint64_t h, const CkptMeta *m) {
    h = mix(h, &m->step, sizeof m->step), h = mix(h, &m->tokens_seen, sizeof m->tokens_seen);
    h = mix(h, &m->sched_step, sizeof m->sched_step), h = mix(h, &m->loader, sizeof m->loader);
    h = mix(h, m->optimizer, sizeof m->optimizer), h = mix(h, &m->optim_step, sizeof m->optim_step);
    int g[4] = {m->dp, m->tp, m->pp, m->zero};
    h = mix(h, g, sizeof g);
    for (int i = 0; i < m->nrng; i++) h = mix(mix(h, m->rng[i].name, strlen(m->rng[i].name)), &m->rng[i].value, 8);
    for (int i = 0; i < m->nscaler; i++)
        h = mix(mix(h, m->scaler[i].name, strlen(m->scaler[i].name)), &m->scaler[i].value, 8);
    for (int k = 0; k < 2; k++) {
        char *c = (k ? m->extra : m->config) ? cJSON_PrintUnformatted(k ? m->extra : m->config) : NULL;
        if (c) h = mix(h, c, strlen(c));
        free(c);
    }
    return h | 1;
}

/* ckpt_load of p->ckpt (weights, m, v, meta), then what `train --resume` checks of the meta (its
 * resume_check, src/train/train_ckpt.c): the saved config against this run's (the fixture's, with
 * --override lr) and the health detectors' state, refusals prefixed with "--resume CKPT" as there. */
static Status ckpt_single_load(Priv *p, uint64_t *digest, Err *err) {
    CkptOptState opt = {.m = p->m, .v = p->v};
    CkptMeta meta;
    memset(&meta, 0, sizeof meta);
    Status st = ckpt_load(p->ckpt, &p->w, &opt, &meta, err);
    if (st == ST_OK) {
        const cJSON *cur = cJSON_GetObjectItemCaseSensitive(p->run, "config");
        const char *ov[1] = {"lr"};
        char report[1024];
        const cJSON *hj = meta.extra ? cJSON_GetObjectItemCaseSensitive(meta.extra, "health") : NULL;
        HealthState h;
        st = ckpt_check_override_names(meta.config, cur, ov, 1, err);
        if (st == ST_OK) st = ckpt_check_config(meta.config, cur, ov, 1, report, sizeof report, err);
        if (st == ST_OK && hj) st = health_state_from_json(&h, hj, 64, err);
        if (st != ST_OK) {
            err_prefix(err, "--resume %s", p->ckpt);
            ckpt_meta_free(&meta);
        }
    }
    if (st == ST_OK) {
        uint64_t h = params_digest(&p->w);
        h = mix(h, p->m, p->w.layout.total * sizeof(float)), h = mix(h, p->v, p->w.layout.total * sizeof(float));
        *digest = meta_digest(h, &meta);
        ckpt_meta_free(&meta);
    }
    return st;
}

/* ckpt_state: state.json (resealed) -> ckpt_load. */
static Status ckpt_state_setup(FzReader *r, Err *err) { return ckpt_single_setup(r, "state.json", err); }

static Status ckpt_state_run(FzReader *r, const uint8_t *b, size_t n, uint64_t *digest, Err *err) {
    size_t m;
    uint8_t *c = state_reseal(b, n, &m);
    if (!c) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    Status st = put(r->path, c, m, err);
    free(c);
    return st == ST_OK ? ckpt_single_load(r->priv, digest, err) : st;
}

/* ckpt_optim: optimizer.safetensors (state.json's record of it rewritten) -> ckpt_load. */
static Status ckpt_optim_setup(FzReader *r, Err *err) {
    Status st = ckpt_single_setup(r, "optimizer.safetensors", err);
    if (st == ST_OK) r->strict = st_strict(r->seed, r->seed_len);
    return st;
}

static Status ckpt_file_run(FzReader *r, const uint8_t *b, size_t n, uint64_t *digest, Err *err) {
    Priv *p = r->priv;
    Status st = put(r->path, b, n, err);
    if (st == ST_OK) st = state_record(p, b, n, 0, err);
    return st == ST_OK ? ckpt_single_load(p, digest, err) : st;
}

/* ckpt_manifest / ckpt_rankfile: a sharded checkpoint (ckpt_shard_save on one rank) ->
 * ckpt_shard_load into the whole model (params, m, v) and into tp rank 1 of 2 (params). */
static Status ckpt_sharded_setup(FzReader *r, const char *file, Err *err) {
    Priv *p = r->priv;
    ModelConfig c = tiny_config(ARCH_GPT2);
    GptWeights src;
    if (weights_new(&src, &c, 16) || weights_new(&p->w, &c, 0)) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    Status st = opt_bufs(p, src.layout.total, err);
    float *m = malloc(src.layout.total * sizeof(float)), *v = malloc(src.layout.total * sizeof(float));
    unsigned char *write = calloc((size_t)src.layout.ntensors, 1);
    if (st == ST_OK && (!m || !v || !write)) st = err_set(err, ST_ERR_RUNTIME, "out of memory");
    if (st == ST_OK && (layout_init_tp(&p->pl2, &c, 1, 2, 1) != 0 || !(p->p2 = calloc(p->pl2.total, sizeof(float)))))
        st = err_set(err, ST_ERR_RUNTIME, "out of memory");
    Comm *comm = NULL;
    if (st == ST_OK) st = comm_init_local(&comm, err);
    if (st == ST_OK) {
        fill_random(m, src.layout.total, 17), fill_random(v, src.layout.total, 18);
        ckpt_shard_assign(&src.layout, 1, 0, write);
        CkptShardSrc s = {.pl = &src.layout, .params = src.params, .m = m, .v = v, .write = write};
        CkptMeta meta;
        memset(&meta, 0, sizeof meta);
        meta.step = 1, meta.tokens_seen = 128, meta.sched_step = 1, meta.loader.seed = 3, meta.loader.consumed = 8;
        snprintf(meta.optimizer, sizeof meta.optimizer, "adamw");
        meta.optim_step = 1;
        ckpt_meta_set_rng(&meta, "init_seed", 1337);
        CkptOptions o = ckpt_default_options();
        o.dir = p->dir;
        o.tokenizer = "gpt2";
        file_rm_tree(p->dir);
        st = ckpt_shard_save(comm, &s, &meta, &o, NULL, err);
    }
    if (comm) comm_finalize(comm);
    free(m), free(v), free(write);
    weights_free(&src);
    join(p->ckpt, sizeof p->ckpt, p->dir, "step_00000001");
    join(r->path, sizeof r->path, p->ckpt, file);
    if (st == ST_OK) st = state_load(p, err);
    if (st == ST_OK) st = seed_from(r, r->path, err);
    r->names[0] = "step_00000001";
    p->listed = file;
    return st;
}

static Status ckpt_manifest_setup(FzReader *r, Err *err) { return ckpt_sharded_setup(r, "manifest.json", err); }
static Status ckpt_rankfile_setup(FzReader *r, Err *err) {
    Status st = ckpt_sharded_setup(r, "rank00000.safetensors", err);
    if (st == ST_OK) r->strict = st_strict(r->seed, r->seed_len);
    return st;
}

static Status ckpt_sharded_run(FzReader *r, const uint8_t *b, size_t n, uint64_t *digest, Err *err) {
    Priv *p = r->priv;
    Status st = put(r->path, b, n, err);
    if (st == ST_OK) st = state_record(p, b, n, 0, err);
    CkptMeta meta;
    memset(&meta, 0, sizeof meta);
    if (st == ST_OK) st = ckpt_shard_load(p->ckpt, &p->w.layout, p->w.params, p->m, p->v, &meta, NULL, err);
    if (st != ST_OK) return st;
    uint64_t h = params_digest(&p->w);
    h = mix(h, p->m, p->w.layout.total * sizeof(float)), h = mix(h, p->v, p->w.layout.total * sizeof(float));
    h = meta_digest(h, &meta);
    ckpt_meta_free(&meta);
    st = ckpt_shard_load(p->ckpt, &p->pl2, p->p2, NULL, NULL, NULL, NULL, err);
    if (st == ST_OK) *digest = mix(h, p->p2, p->pl2.total * sizeof(float)) | 1;
    return st;
}

/* llmc: an llm.c fp32 checkpoint (ckpt_export_llmc) -> ckpt_peek_config, then ckpt_init_from. */
static Status llmc_setup(FzReader *r, Err *err) {
    Priv *p = r->priv;
    ModelConfig c = tiny_config(ARCH_GPT2);
    GptWeights src;
    if (weights_new(&src, &c, 19) || weights_new(&p->w, &c, 0)) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    Status st = file_mkdirs(p->dir, err);
    join(r->path, sizeof r->path, p->dir, "gpt2_tiny.bin");
    if (st == ST_OK) st = ckpt_export_llmc(&src, r->path, err);
    weights_free(&src);
    if (st == ST_OK) st = seed_from(r, r->path, err);
    if (st == ST_OK && !(r->strict = calloc(r->seed_len, 1))) st = err_set(err, ST_ERR_RUNTIME, "out of memory");
    if (st == ST_OK) memset(r->strict, 1, r->seed_len < 1024 ? r->seed_len : 1024); /* the header */
    r->names[0] = "gpt2_tiny.bin";
    return st;
}

/* Both readers of the header, each on its own (train --init-from with shape flags calls only
 * ckpt_init_from): what ckpt_peek_config refuses (it reads the header alone), ckpt_init_from must. */
static Status llmc_run(FzReader *r, const uint8_t *b, size_t n, uint64_t *digest, Err *err) {
    Priv *p = r->priv;
    Status st = put(r->path, b, n, err);
    if (st != ST_OK) return st;
    ModelConfig c;
    memset(&c, 0, sizeof c);
    Err e2;
    st = ckpt_init_from(&p->w, r->path, err);
    Status st2 = ckpt_peek_config(r->path, &c, &e2);
    if (st == ST_OK && st2 != ST_OK)
        snprintf(r->broken, sizeof r->broken, "ckpt_init_from accepted what ckpt_peek_config refused: %.200s", e2.msg);
    if (st == ST_OK && st2 != ST_OK) *err = e2, st = st2;
    if (st == ST_OK) *digest = mix(params_digest(&p->w), &c, sizeof c) | 1;
    return st;
}

/* lora_state / lora_adapter: a LoRA checkpoint (ckpt_lora_save, rank 2 on every target of the tiny
 * GPT-2) -> ckpt_lora_read_meta, its LoRA layout, ckpt_lora_load (adapters and moments), as
 * `export --merge` and `train --resume` read it. */
static Status lora_setup(FzReader *r, const char *file, Err *err) {
    Priv *p = r->priv;
    ModelConfig c = tiny_config(ARCH_GPT2);
    LoraConfig lc = {.rank = 2, .alpha = 4, .dropout = 0};
    Status st = lora_parse_targets("all", &c, &lc.targets, err);
    if (st == ST_OK) st = lora_layout_init(&p->ll, &c, &lc, 1, err);
    if (st != ST_OK) return st;
    size_t n = p->ll.total;
    float *a = malloc(n * sizeof(float)), *m = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
    if (!a || !m || !v) st = err_set(err, ST_ERR_RUNTIME, "out of memory");
    char out[1200] = "";
    if (st == ST_OK) {
        fill_random(a, n, 21), fill_random(m, n, 22), fill_random(v, n, 23);
        for (size_t i = 0; i < n; i++) v[i] = v[i] * v[i];
        LoraCkptMeta meta;
        memset(&meta, 0, sizeof meta);
        meta.step = 2, meta.loader.seed = 5, meta.loader.consumed = 8, meta.base_seed = 1337;
        meta.base_hash = 0x0123456789abcdefULL;
        snprintf(meta.tokenizer, sizeof meta.tokenizer, "gpt2");
        file_rm_tree(p->dir);
        st = ckpt_lora_save(p->dir, &c, &p->ll, &meta, a, m, v, out, sizeof out, err);
    }
    free(a), free(m), free(v);
    memcpy(p->ckpt, out, sizeof p->ckpt - 1);
    join(r->path, sizeof r->path, p->ckpt, file);
    if (st == ST_OK) st = state_load(p, err);
    if (st == ST_OK) st = seed_from(r, r->path, err);
    r->names[0] = "step_00000002";
    p->listed = file;
    return st;
}

static Status lora_load(Priv *p, uint64_t *digest, Err *err) {
    LoraCkptMeta meta;
    LoraConfig lc;
    ModelConfig c;
    memset(&lc, 0, sizeof lc), memset(&c, 0, sizeof c);
    Status st = ckpt_lora_read_meta(p->ckpt, &meta, &lc, &c, err);
    if (st != ST_OK) return st;
    LoraLayout ll;
    float *a = NULL, *m = NULL, *v = NULL;
    uint64_t h = 0;
    st = lora_layout_init(&ll, &c, &lc, 1, err);
    if (st == ST_OK && ll.total > ((size_t)1 << 26))
        st = err_set(err, ST_ERR_INPUT, "harness: %zu adapter floats for a rank-2 checkpoint of a 16-wide model",
                     ll.total);
    if (st == ST_OK && (!(a = malloc(ll.total * 4)) || !(m = malloc(ll.total * 4)) || !(v = malloc(ll.total * 4))))
        st = err_set(err, ST_ERR_RUNTIME, "out of memory");
    if (st == ST_OK) st = ckpt_lora_load(p->ckpt, &ll, a, m, v, err);
    if (st == ST_OK) {
        h = mix(XXH3_64bits(a, ll.total * 4), m, ll.total * 4), h = mix(h, v, ll.total * 4);
        h = mix(h, &lc, sizeof lc), h = mix(h, &c, sizeof c), h = mix(h, &meta.step, sizeof meta.step);
        h = mix(h, &meta.loader, sizeof meta.loader), h = mix(h, &meta.base_seed, 8), h = mix(h, &meta.base_hash, 8);
        h = mix(h, meta.init_from, strlen(meta.init_from)), h = mix(h, meta.tokenizer, strlen(meta.tokenizer));
        *digest = h | 1;
    }
    free(a), free(m), free(v);
    ckpt_lora_meta_free(&meta);
    return st;
}

static Status lora_state_setup(FzReader *r, Err *err) { return lora_setup(r, "state.json", err); }
static Status lora_adapter_setup(FzReader *r, Err *err) {
    Status st = lora_setup(r, "adapter_model.safetensors", err);
    if (st == ST_OK) r->strict = st_strict(r->seed, r->seed_len);
    return st;
}

static Status lora_state_run(FzReader *r, const uint8_t *b, size_t n, uint64_t *digest, Err *err) {
    size_t m;
    uint8_t *c = state_reseal(b, n, &m);
    if (!c) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    Status st = put(r->path, c, m, err);
    free(c);
    return st == ST_OK ? lora_load(r->priv, digest, err) : st;
}

static Status lora_adapter_run(FzReader *r, const uint8_t *b, size_t n, uint64_t *digest, Err *err) {
    Priv *p = r->priv;
    Status st = put(r->path, b, n, err);
    if (st == ST_OK) st = state_record(p, b, n, 1, err);
    return st == ST_OK ? lora_load(p, digest, err) : st;
}

/* ======================================================================================== */
/* Token shards and loss masks                                                               */
/* ======================================================================================== */

/* A shard of the start of Tiny Shakespeare in the shared tokenizer (its documents the blank-line
 * speeches, each followed by EOT: what `prepare --separator ""` writes) and, with mask, its loss mask
 * (a seeded third of the targets trained). */
static Status shard_setup(FzReader *r, int mask, Err *err) {
    Priv *p = r->priv;
    Status st = load_shared_tokenizer(&p->tok, err);
    if (st != ST_OK) return st;
    char src[1100];
    join(src, sizeof src, g_srcdir, "data/tinyshakespeare/input.txt");
    uint8_t *text;
    size_t n;
    if ((st = get(src, &text, &n, err)) != ST_OK) return st;
    if (n > 6000) n = 6000;
    uint32_t *ids = NULL;
    size_t nids = 0, cap = 0;
    for (size_t a = 0; a < n && st == ST_OK;) {
        const uint8_t *e = memmem(text + a, n - a, "\n\n", 2);
        size_t b = e ? (size_t)(e - text) + 2 : n;
        st = tokenizer_encode(p->tok, text + a, b - a, &ids, &nids, &cap, err);
        uint32_t eot = tokenizer_eot(p->tok);
        if (st == ST_OK && nids == cap) {
            uint32_t *q = realloc(ids, (cap + 16) * sizeof *ids);
            if (!q) st = err_set(err, ST_ERR_RUNTIME, "out of memory");
            else ids = q, cap += 16;
        }
        if (st == ST_OK) ids[nids++] = eot;
        a = b;
    }
    free(text);
    ShardMeta meta = {.tokenizer_hash = tokenizer_hash(p->tok), .source_bytes = n,
                      .vocab_size = tokenizer_vocab_size(p->tok)};
    if (st == ST_OK) st = file_mkdirs(p->dir, err);
    char shard[1200];
    join(shard, sizeof shard, p->dir, "train_000000.bin");
    if (st == ST_OK) st = shard_write(shard, ids, nids, &meta, err);
    if (st == ST_OK && mask) {
        size_t nb = (nids + 7) / 8;
        uint8_t *bits = calloc(nb, 1);
        uint64_t s = 99;
        for (size_t i = 0; bits && i < nids; i++)
            if (rng_next(&s) % 3 == 0) bits[i >> 3] |= (uint8_t)(1u << (i & 7));
        st = bits ? shard_mask_write(shard, bits, nids, err) : err_set(err, ST_ERR_RUNTIME, "out of memory");
        free(bits);
    }
    free(ids);
    join(r->path, sizeof r->path, p->dir, mask ? "train_000000.mask" : "train_000000.bin");
    if (st == ST_OK) st = seed_from(r, r->path, err);
    size_t hdr = mask ? SHARD_MASK_HEADER : SHARD_HEADER_INTS * 4;
    if (st == ST_OK && !(r->strict = calloc(r->seed_len, 1))) st = err_set(err, ST_ERR_RUNTIME, "out of memory");
    if (st == ST_OK) memset(r->strict, 1, hdr < r->seed_len ? hdr : r->seed_len);
    /* header words 5 and 6 record how many bytes of text the shard came from: any value is one; words 7
     * and 8 (the tokenizer's vocabulary and EOT) may name another vocabulary of the same tokenizer hash
     * as far as the loader can tell (it is told the model's vocabulary, not the tokenizer's): it checks
     * that every id and the EOT it pads with are below the model's */
    if (st == ST_OK && !mask) memset(r->strict + 20, 0, 16);
    r->names[0] = mask ? "train_000000.mask" : "train_000000.bin";
    r->names[1] = "train_*.bin"; /* the loader's errors about the whole --data name its spec */
    return st;
}

static Status token_shard_setup(FzReader *r, Err *err) { return shard_setup(r, 0, err); }
static Status token_mask_setup(FzReader *r, Err *err) { return shard_setup(r, 1, err); }

/* loader_open_named as `train --tokenizer DIR` opens --data (the tokenizer's hash and vocabulary
 * expected), packed and no-pack, and the first rows of each. */
static Status shard_run(FzReader *r, const uint8_t *b, size_t n, uint64_t *digest, Err *err) {
    Priv *p = r->priv;
    Status st = put(r->path, b, n, err);
    char spec[1200];
    join(spec, sizeof spec, p->dir, "train_*.bin");
    uint64_t h = 1;
    for (int k = 0; k < 2 && st == ST_OK; k++) {
        Loader ld;
        st = loader_open_named(&ld, spec, 16, tokenizer_vocab_size(p->tok), tokenizer_hash(p->tok), "fuzz", 1,
                               k ? LOADER_NO_PACK : LOADER_SHUFFLE, err);
        if (st != ST_OK) break;
        int32_t inp[4 * 16], tgt[4 * 16];
        loader_fill(&ld, 0, 4, inp, tgt);
        for (int i = 0; i < 4 * 16; i++)
            if (inp[i] < 0 || (uint32_t)inp[i] >= tokenizer_vocab_size(p->tok) || tgt[i] < -1 ||
                tgt[i] >= (int32_t)tokenizer_vocab_size(p->tok))
                snprintf(r->broken, sizeof r->broken, "the loader gave input %d / target %d at %d: outside the vocabulary",
                         inp[i], tgt[i], i);
        h = mix(mix(mix(h, inp, sizeof inp), tgt, sizeof tgt), &ld.nwin, sizeof ld.nwin);
        loader_close(&ld);
    }
    if (st == ST_OK) *digest = h | 1;
    return st;
}

/* ======================================================================================== */
/* Tokenizers                                                                                */
/* ======================================================================================== */

/* gpt2_encoder / gpt2_merges: a trained tokenizer's encoder.json and vocab.bpe (GPT-2's format) ->
 * tokenizer_load_files, then a round trip. */
static Status gpt2_files_setup(FzReader *r, int encoder, Err *err) {
    Priv *p = r->priv;
    Status st = file_mkdirs(p->dir, err);
    char src[1200], other[1200];
    join(src, sizeof src, tok_dir, encoder ? "encoder.json" : "vocab.bpe");
    join(r->path, sizeof r->path, p->dir, encoder ? "encoder.json" : "vocab.bpe");
    if (st == ST_OK) st = seed_from(r, src, err);
    if (st == ST_OK) st = put(r->path, r->seed, r->seed_len, err);
    uint8_t *o = NULL;
    size_t on = 0;
    join(src, sizeof src, tok_dir, encoder ? "vocab.bpe" : "encoder.json");
    join(other, sizeof other, p->dir, encoder ? "vocab.bpe" : "encoder.json");
    if (st == ST_OK) st = get(src, &o, &on, err);
    if (st == ST_OK) st = put(other, o, on, err);
    free(o);
    r->names[0] = encoder ? "encoder.json" : "vocab.bpe";
    return st;
}

static Status gpt2_encoder_setup(FzReader *r, Err *err) { return gpt2_files_setup(r, 1, err); }
static Status gpt2_merges_setup(FzReader *r, Err *err) { return gpt2_files_setup(r, 0, err); }

static Status gpt2_files_run(FzReader *r, const uint8_t *b, size_t n, uint64_t *digest, Err *err) {
    Priv *p = r->priv;
    Status st = put(r->path, b, n, err);
    char e[1200], v[1200];
    join(e, sizeof e, p->dir, "encoder.json");
    join(v, sizeof v, p->dir, "vocab.bpe");
    Tokenizer *t = NULL;
    if (st == ST_OK) st = tokenizer_load_files(&t, e, v, err);
    if (st == ST_OK) *digest = tokenizer_check(r, t) | 1;
    tokenizer_free(t);
    return st;
}

/* tok_stamp: the files.xxh3 stamp of a `tokenizer train` folder (the hashes of vocab.bpe,
 * encoder.json and pattern, written before them) -> tokenizer_load of the folder. */
static Status tok_stamp_setup(FzReader *r, Err *err) {
    Priv *p = r->priv;
    static const char *const files[] = {"encoder.json", "vocab.bpe", BPE_FILES_STAMP};
    Status st = file_mkdirs(p->dir, err);
    for (int k = 0; k < 3 && st == ST_OK; k++) {
        char a[1200], b[1200];
        uint8_t *t = NULL;
        size_t n = 0;
        join(a, sizeof a, tok_dir, files[k]);
        join(b, sizeof b, p->dir, files[k]);
        if ((st = get(a, &t, &n, err)) == ST_OK) st = put(b, t, n, err);
        free(t);
    }
    join(r->path, sizeof r->path, p->dir, BPE_FILES_STAMP);
    if (st == ST_OK) st = seed_from(r, r->path, err);
    /* every byte says which file has which hash: no accepted change */
    if (st == ST_OK && !(r->strict = malloc(r->seed_len))) st = err_set(err, ST_ERR_RUNTIME, "out of memory");
    if (st == ST_OK) memset(r->strict, 1, r->seed_len);
    r->names[0] = BPE_FILES_STAMP;
    r->names[1] = "/tok_stamp"; /* a hash that differs names the folder and the file */
    return st;
}

static Status tok_stamp_run(FzReader *r, const uint8_t *b, size_t n, uint64_t *digest, Err *err) {
    Priv *p = r->priv;
    Status st = put(r->path, b, n, err);
    Tokenizer *t = NULL;
    if (st == ST_OK) st = tokenizer_load(&t, p->dir, NULL, err);
    if (st == ST_OK) *digest = tokenizer_check(r, t) | 1;
    tokenizer_free(t);
    return st;
}

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void wr32(uint8_t *p, uint32_t v) {
    for (int k = 0; k < 4; k++) p[k] = (uint8_t)(v >> (8 * k));
}
static uint64_t fnv1a64(const uint8_t *b, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

/* tiktoken: a rank file (docs/tokenizer.md §3b) of cl100k_base's first 600 ranks and its
 * <|endoftext|> (as id 600), cut from data/tokenizers/cl100k_base.tkr -> tokenizer_load_ranks. The
 * fixup writes the file size and the FNV-1a checksum of the mutated bytes. */
enum { TKR_RANKS = 600 };

static Status tiktoken_setup(FzReader *r, Err *err) {
    Priv *p = r->priv;
    char src[1200];
    join(src, sizeof src, g_srcdir, "data/tokenizers/cl100k_base.tkr");
    uint8_t *b;
    size_t n;
    Status st = get(src, &b, &n, err);
    if (st != ST_OK) return st;
    size_t pos = 20;
    for (int k = 0; k < 2 && pos + 4 <= n; k++) pos += 4 + rd32(b + pos);
    size_t hdr = pos;
    for (int k = 0; k < TKR_RANKS && pos < n; k++) pos += 1 + (size_t)b[pos];
    static const char eot[] = "<|endoftext|>";
    size_t out_n = pos + 5 + (sizeof eot - 1) + 8;
    uint8_t *o = pos < n ? malloc(out_n) : NULL;
    if (!o) {
        free(b);
        return err_set(err, ST_ERR_INPUT, "%s: expected a rank file of more than %d ranks", src, TKR_RANKS);
    }
    memcpy(o, b, pos);
    wr32(o + 12, TKR_RANKS), wr32(o + 16, 1);
    wr32(o + pos, TKR_RANKS), o[pos + 4] = sizeof eot - 1;
    memcpy(o + pos + 5, eot, sizeof eot - 1);
    wr32(o + 8, (uint32_t)out_n);
    uint64_t h = fnv1a64(o, out_n - 8);
    for (int k = 0; k < 8; k++) o[out_n - 8 + k] = (uint8_t)(h >> (8 * k));
    free(b);
    st = file_mkdirs(p->dir, err);
    join(r->path, sizeof r->path, p->dir, "small.tkr");
    if (st == ST_OK) st = put(r->path, o, out_n, err);
    r->seed = o, r->seed_len = out_n;
    /* strict: magic, counts, pattern name and pat_str, every rank's length byte, the special record;
     * a rank's bytes may be any other token's and the special's id any id past the ranks (the format
     * cannot tell), size and checksum are the fixup's */
    if (st == ST_OK && !(r->strict = calloc(out_n, 1))) st = err_set(err, ST_ERR_RUNTIME, "out of memory");
    if (st == ST_OK) {
        memset(r->strict, 1, hdr);
        memset(r->strict + 8, 0, 4);
        for (size_t q = hdr; q < pos; q += 1 + (size_t)o[q]) r->strict[q] = 1;
        memset(r->strict + pos + 4, 1, out_n - 8 - pos - 4); /* the special's id may be any id above the ranks */
    }
    r->names[0] = "small.tkr";
    return st;
}

static Status tiktoken_run(FzReader *r, const uint8_t *b, size_t n, uint64_t *digest, Err *err) {
    uint8_t *c = malloc(n ? n : 1);
    if (!c) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    memcpy(c, b, n);
    if (n >= 28) {
        wr32(c + 8, (uint32_t)n);
        uint64_t h = fnv1a64(c, n - 8);
        for (int k = 0; k < 8; k++) c[n - 8 + k] = (uint8_t)(h >> (8 * k));
    }
    Status st = put(r->path, c, n, err);
    free(c);
    Tokenizer *t = NULL;
    if (st == ST_OK) st = tokenizer_load_ranks(&t, r->path, BPE_PATTERN_FILE, err);
    if (st == ST_OK) *digest = tokenizer_check(r, t) | 1;
    tokenizer_free(t);
    return st;
}

/* llama3_tok: Meta's tokenizer.model (data/tokenizers/llama3, fetched by
 * scripts/fetch-llama3-tokenizer.sh as for test_llama3_tokenizer) -> tokenizer_load_llama3. */
static Status llama3_setup(FzReader *r, Err *err) {
    Priv *p = r->priv;
    char src[1200];
    join(src, sizeof src, g_srcdir, "data/tokenizers/llama3/tokenizer.model");
    Status st = seed_from(r, src, err);
    if (st != ST_OK)
        return err_set(err, ST_ERR_INPUT, "%s: missing (scripts/fetch-llama3-tokenizer.sh fetches Meta's file; "
                       "test_llama3_tokenizer needs it too)", src);
    st = file_mkdirs(p->dir, err);
    join(r->path, sizeof r->path, p->dir, "tokenizer.model");
    if (st == ST_OK) st = put(r->path, r->seed, r->seed_len, err);
    /* strict: the layout of every line (the space, the rank's digits, the LF); a token's base64 (its
     * padding too) may spell any other token's bytes */
    if (st == ST_OK && !(r->strict = calloc(r->seed_len, 1))) st = err_set(err, ST_ERR_RUNTIME, "out of memory");
    for (size_t i = 0, sp = 0; st == ST_OK && i < r->seed_len; i++) {
        uint8_t c = r->seed[i];
        if (c == '\n') sp = 0, r->strict[i] = 1;
        else if (c == ' ') sp = 1, r->strict[i] = 1;
        else r->strict[i] = (uint8_t)sp;
    }
    r->names[0] = "tokenizer.model";
    return st;
}

static Status llama3_run(FzReader *r, const uint8_t *b, size_t n, uint64_t *digest, Err *err) {
    Status st = put(r->path, b, n, err);
    Tokenizer *t = NULL;
    if (st == ST_OK) st = tokenizer_load_llama3(&t, r->path, BPE_PATTERN_FILE, err);
    if (st == ST_OK) *digest = tokenizer_check(r, t) | 1;
    tokenizer_free(t);
    return st;
}

/* ======================================================================================== */
/* prepare's inputs                                                                          */
/* ======================================================================================== */

/* The first `lines` lines of a repository file as the seed, written to r->path. */
static Status lines_seed(FzReader *r, const char *rel, size_t lines, const char *name, Err *err) {
    Priv *p = r->priv;
    char src[1200];
    join(src, sizeof src, g_srcdir, rel);
    Status st = seed_from(r, src, err);
    size_t cut = 0;
    for (size_t k = 0; st == ST_OK && cut < r->seed_len && k < lines; k++) {
        const uint8_t *nl = memchr(r->seed + cut, '\n', r->seed_len - cut);
        cut = nl ? (size_t)(nl - r->seed) + 1 : r->seed_len;
    }
    if (st == ST_OK) r->seed_len = cut;
    if (st == ST_OK) st = file_mkdirs(p->dir, err);
    join(r->path, sizeof r->path, p->dir, name);
    if (st == ST_OK) st = put(r->path, r->seed, r->seed_len, err);
    r->names[0] = name;
    return st;
}

/* Every document of path through docreader (as prepare reads it); digest: the documents. With a
 * chat format, each conversation rendered too (plain and llama3 templates). */
static Status docs_run_opts(FzReader *r, const DocReaderOptions *o, uint64_t *digest, Err *err) {
    Priv *p = r->priv;
    DocReader *d = NULL;
    Status st = docreader_open(&d, r->path, o, err);
    uint64_t h = 1;
    uint32_t *ids = NULL;
    uint8_t *mask = NULL;
    size_t cap = 0, mcap = 0;
    while (st == ST_OK) {
        const uint8_t *doc;
        size_t n;
        if ((st = docreader_next(d, &doc, &n, err)) != ST_OK || !doc) break;
        h = mix(h, doc, n);
        for (int k = 0; o->format == PREP_FORMAT_CHAT && k < 2 && st == ST_OK; k++) {
            size_t nids = 0;
            int eot_trained = 0;
            st = chat_render(k ? &p->f2 : &p->f1, k ? p->tok2 : p->tok, doc, n, 0, &ids, &nids, &cap, &mask, &mcap,
                             &eot_trained, err);
            if (st == ST_OK) h = mix(mix(h, ids, nids * 4), mask, nids);
            else
                snprintf(r->broken, sizeof r->broken, "chat_render refused a conversation docreader gave: %.180s",
                         err->msg);
        }
    }
    free(ids), free(mask);
    docreader_close(d);
    if (st == ST_OK) *digest = h | 1;
    return st;
}

static Status jsonl_setup(FzReader *r, Err *err) {
    return lines_seed(r, "tests/fixtures/prepare_small.jsonl", 24, "docs.jsonl", err);
}
static Status jsonl_run(FzReader *r, const uint8_t *b, size_t n, uint64_t *digest, Err *err) {
    Status st = put(r->path, b, n, err);
    DocReaderOptions o = {.format = PREP_FORMAT_JSONL, .field = "text", .no_hints = 1};
    return st == ST_OK ? docs_run_opts(r, &o, digest, err) : st;
}

/* jsonl_gz / jsonl_zst: the same documents compressed (gzip by zlib, zstd level 3): the streams'
 * own checks (CRC, sizes, frame checksums) against corrupt and truncated input. */
static Status compressed_setup(FzReader *r, int zstd, Err *err) {
    Status st = lines_seed(r, "tests/fixtures/prepare_small.jsonl", 24, zstd ? "docs.jsonl.zst" : "docs.jsonl.gz", err);
    if (st != ST_OK) return st;
    size_t cap = zstd ? ZSTD_compressBound(r->seed_len) : compressBound(r->seed_len) + 64, n = 0;
    uint8_t *c = malloc(cap);
    if (!c) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    if (zstd) {
        ZSTD_CCtx *z = ZSTD_createCCtx();
        ZSTD_CCtx_setParameter(z, ZSTD_c_checksumFlag, 1);
        n = z ? ZSTD_compress2(z, c, cap, r->seed, r->seed_len) : 0;
        ZSTD_freeCCtx(z);
        if (ZSTD_isError(n)) n = 0;
    } else {
        z_stream s;
        memset(&s, 0, sizeof s);
        if (deflateInit2(&s, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) == Z_OK) {
            s.next_in = r->seed, s.avail_in = (uInt)r->seed_len, s.next_out = c, s.avail_out = (uInt)cap;
            if (deflate(&s, Z_FINISH) == Z_STREAM_END) n = s.total_out;
            deflateEnd(&s);
        }
    }
    if (!n) {
        free(c);
        return err_set(err, ST_ERR_RUNTIME, "%s: compressing the seed failed", r->path);
    }
    free(r->seed);
    r->seed = c, r->seed_len = n;
    return put(r->path, c, n, err);
}

static Status jsonl_gz_setup(FzReader *r, Err *err) { return compressed_setup(r, 0, err); }
static Status jsonl_zst_setup(FzReader *r, Err *err) { return compressed_setup(r, 1, err); }

/* text: Tiny Shakespeare's first speeches, documents at blank lines (`prepare --separator ""`). */
static Status text_setup(FzReader *r, Err *err) {
    return lines_seed(r, "data/tinyshakespeare/input.txt", 60, "plays.txt", err);
}
static Status text_run(FzReader *r, const uint8_t *b, size_t n, uint64_t *digest, Err *err) {
    Status st = put(r->path, b, n, err);
    DocReaderOptions o = {.format = PREP_FORMAT_TEXT, .separator = "", .no_hints = 1};
    return st == ST_OK ? docs_run_opts(r, &o, digest, err) : st;
}

/* chat: tests/fixtures/sft_chat.jsonl (`prepare --format chat`) -> docreader, then each conversation
 * rendered with the plain template (the shared tokenizer) and llama3's (Meta's tokenizer). */
static Status chat_setup(FzReader *r, Err *err) {
    Priv *p = r->priv;
    Status st = lines_seed(r, "tests/fixtures/sft_chat.jsonl", 1000, "chat.jsonl", err);
    if (st == ST_OK) st = load_shared_tokenizer(&p->tok, err);
    char l3[1200];
    join(l3, sizeof l3, g_srcdir, "data/tokenizers/llama3/tokenizer.model");
    if (st == ST_OK) st = tokenizer_load_llama3(&p->tok2, l3, BPE_PATTERN_FILE, err);
    if (st == ST_OK) st = chat_format_init(&p->f1, CHAT_TEMPLATE_PLAIN, p->tok, err);
    if (st == ST_OK) st = chat_format_init(&p->f2, CHAT_TEMPLATE_LLAMA3, p->tok2, err);
    return st;
}

static Status chat_run(FzReader *r, const uint8_t *b, size_t n, uint64_t *digest, Err *err) {
    Status st = put(r->path, b, n, err);
    DocReaderOptions o = {.format = PREP_FORMAT_CHAT, .no_hints = 1};
    return st == ST_OK ? docs_run_opts(r, &o, digest, err) : st;
}

/* ======================================================================================== */
/* fit's table and plan's hardware profiles                                                  */
/* ======================================================================================== */

/* fit_csv: a results table with sweep's columns (study/sweep.c) over a Chinchilla-like grid ->
 * fit_table_load (what `scaletrain fit` reads). */
static Status fit_csv_setup(FzReader *r, Err *err) {
    Priv *p = r->priv;
    char text[8192];
    size_t o = (size_t)snprintf(text, sizeof text, "run,params,tokens,flops,loss,steps,batch_tokens,flops_per_token,"
                                "budget,tokens_requested,model,layers,heads,channels,lr,seed,vary,train_loss,wall_s,"
                                "resumed_from_step,status\n");
    for (int i = 0; i < 12; i++) {
        double N = 1e6 * (1 << (i % 4)), C = i < 6 ? 1e15 : 4e15, D = C / (6 * N);
        double L = 1.7 + 400 / pow(N, 0.34) + 410 / pow(D, 0.28);
        o += (size_t)snprintf(text + o, sizeof text - o, "r%02d,%.0f,%.0f,%.6g,%.6f,%d,4096,%.0f,%.6g,%.0f,d%d,%d,%d,%d,"
                              "0.0006,1337,channels=%d,%.6f,12.5,,done\n", i, N, D, C, L, (int)(D / 4096), 6 * N, C,
                              D, i % 4 + 1, i % 4 + 1, i % 4 + 1, 64 * (i % 4 + 1), 64 * (i % 4 + 1), L + 0.01);
    }
    Status st = file_mkdirs(p->dir, err);
    join(r->path, sizeof r->path, p->dir, "results.csv");
    if (st == ST_OK) st = put(r->path, text, o, err);
    if (st == ST_OK) st = seed_from(r, r->path, err);
    r->names[0] = "results.csv";
    return st;
}

static Status fit_csv_run(FzReader *r, const uint8_t *b, size_t n, uint64_t *digest, Err *err) {
    Status st = put(r->path, b, n, err);
    FitTable t;
    if (st == ST_OK) st = fit_table_load(&t, r->path, err);
    if (st != ST_OK) return st;
    uint64_t h = mix(1, &t.n, sizeof t.n);
    h = mix(mix(mix(mix(h, t.N, t.n * 8), t.D, t.n * 8), t.C, t.n * 8), t.L, t.n * 8);
    if (t.has_budget) h = mix(h, t.B, t.n * 8);
    for (size_t i = 0; i < t.n; i++)
        if (!(t.N[i] > 0 && t.D[i] > 0 && t.C[i] > 0 && t.L[i] > 0) || !isfinite(t.N[i]) || !isfinite(t.D[i]) ||
            !isfinite(t.C[i]) || !isfinite(t.L[i]))
            snprintf(r->broken, sizeof r->broken, "fit_table_load gave row %zu a value that is not a positive finite "
                     "number", i);
    fit_table_free(&t);
    *digest = h | 1;
    return ST_OK;
}

/* hw_profile: `plan --measure-hardware FILE`'s profile (plan_hardware_to_json of the cpu-zen4-2c
 * preset) -> hw_resolve (plan --hardware, train --hardware). */
static Status hw_setup(FzReader *r, Err *err) {
    Priv *p = r->priv;
    PlanHardware hw;
    Status st = plan_hardware_preset(&hw, "cpu-zen4-2c", err);
    if (st != ST_OK) return st;
    cJSON *j = plan_hardware_to_json(&hw);
    char *text = j ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    st = text ? file_mkdirs(p->dir, err) : err_set(err, ST_ERR_RUNTIME, "out of memory");
    join(r->path, sizeof r->path, p->dir, "hardware.json");
    if (st == ST_OK) st = put(r->path, text, strlen(text), err);
    free(text);
    if (st == ST_OK) st = seed_from(r, r->path, err);
    r->names[0] = "hardware.json";
    return st;
}

static Status hw_run(FzReader *r, const uint8_t *b, size_t n, uint64_t *digest, Err *err) {
    Status st = put(r->path, b, n, err);
    PlanHardware hw;
    memset(&hw, 0, sizeof hw);
    if (st == ST_OK) st = hw_resolve(&hw, r->path, err);
    if (st == ST_OK) *digest = XXH3_64bits(&hw, sizeof hw) | 1;
    return st;
}

/* ======================================================================================== */
/* The readers                                                                               */
/* ======================================================================================== */

/* Keys whose values may change without a refusal (fuzz_readers.h, FZ_JSON), each with its reason.
 * "key" frees every judged mutation of it, "key/KINDS" only those kinds: n -1, h huge, f a fraction,
 * t another JSON type, e an empty string. */
static const char *const FREE_HF_CONFIG[] = {
    "architectures", "initializer_range", /* not read: transformers' own */
    "n_ctx",                               /* GPT2Config's unused alias of n_positions */
    "resid_pdrop", "embd_pdrop", "attn_pdrop", "dropout", /* training-time dropout, no effect on the weights' meaning */
    "bos_token_id", "eos_token_id", "torch_dtype", "dtype", /* generation and storage hints for other tools */
    "tokenizer/e",                          /* scaletrain.tokenizer: "" = none recorded */
    "hidden_act/e",                         /* refused unless "silu"; an empty one is refused too */
    NULL};
static const char *const FREE_HF_INDEX[] = {"total_size", NULL}; /* metadata: transformers' own bookkeeping */
static const char *const FREE_STATE[] = {
    /* config: its free fields (ckpt_config.c: how the same run is split and observed; a resume reports
     * them) and lr, which the resume here overrides */
    "micro_batch", "grad_accum", "dp", "tp", "sp", "pp", "pp_schedule", "pp_layers", "interleave", "zero", "threads",
    "recompute", "device", "steps", "val_data", "val_every", "val_batches", "log", "out", "ckpt_dir", "ckpt_every",
    "keep_last", "keep_every", "ckpt_async", "init_from", "lr",
    "data",                                /* the data's path may change when its files do not (data_files) */
    "loss_window", "grad_norm_window",     /* extra.health: the detectors' windows hold any finite numbers */
    "best_median/t",                       /* extra.health.best_median: a number or null */
    "batches", "skipped_batches",          /* extra: read by train_ckpt.c's resume alone, which this harness
                                              does not run (its unchecked casts: reported) */
    "scale/hf",                            /* loss_scaler.scale: any positive float */
    "kind/e",                              /* optimizer.kind: informative (the config names the optimizer) */
    NULL};
static const char *const FREE_MANIFEST[] = {NULL};
static const char *const FREE_LORA_STATE[] = {
    "alpha/hf",                            /* lora.alpha: any positive number (the scale is alpha / rank) */
    "init_from/e",                         /* base.init_from: "" = a randomly initialised base */
    "tokenizer/e", NULL};
static const char *const FREE_ENCODER[] = {NULL};
static const char *const FREE_JSONL[] = {"id", "text/e", NULL}; /* prepare reads "text" only; "" is an empty document */
static const char *const FREE_CHAT[] = {"content/e", "system/e", "prompt/e", NULL}; /* empty user/system text: text */
static const char *const FREE_CSV[] = {
    "run", "steps", "batch_tokens", "flops_per_token", "tokens_requested", "model", "layers", "heads", "channels",
    "lr", "seed", "vary", "train_loss", "wall_s", "resumed_from_step", "status", /* columns fit does not read */
    "params/hf", "tokens/hf", "flops/hf", "loss/hf", "budget/hf", /* any positive finite decimal (docs/fit.md: a
                                              table in millions of parameters is one) */
    "loss/e",                              /* an empty loss: a run that failed, left out (fit.h) */
    "budget/e",                            /* an empty budget: the rows are grouped by flops instead */
    NULL};
static const char *const FREE_HW[] = {
    "name",                                /* the profile's name: any string */
    "peak_fp32/hf", "peak_bf16/hf", "peak_fp16/hf", "memory/hf", "mem_bw/hf", "intra_bw/hf", "inter_bw/hf",
    "intra_lat/hf", "inter_lat/hf", "storage_bw/hf", "backend_bytes/hf", "drop_rate/hf", /* rates, sizes and
                                              times: any finite number >= 0 is one */
    "matmul_eff_bf16/f",                   /* a fraction of peak_bf16 in [0, 1] (0: matmul_eff prices bf16) */
    NULL};

static FzReader READERS[] = {
    {"safetensors", "model.safetensors (F32, GPT-2's names) -> st_load_hf_file", FZ_BINARY, 0, 3000, NULL,
     .setup = st_setup, .run = st_run},
    {"hf_index", "model.safetensors.index.json of a sharded bf16 folder -> st_load_hf_weights", FZ_JSON, 0, 1000,
     FREE_HF_INDEX, .setup = hf_index_setup, .run = hf_sharded_run},
    {"hf_shard", "model-00002-of-00004.safetensors (BF16) of a sharded folder -> st_load_hf_weights", FZ_BINARY, 0, 1400,
     NULL, .setup = hf_shard_setup, .run = hf_sharded_run},
    {"hf_config", "GPT-2's config.json -> st_load_hf_config", FZ_JSON, 0, 1600, FREE_HF_CONFIG, .setup = hf_config_setup,
     .run = hf_config_run},
    {"hf_config_llama", "Llama's config.json (llama3 RoPE scaling) -> st_load_hf_config", FZ_JSON, 0, 1600, FREE_HF_CONFIG,
     .setup = hf_config_llama_setup, .run = hf_config_run},
    {"ckpt_state", "a checkpoint's state.json (resealed) -> ckpt_load", FZ_JSON, 1, 1400, FREE_STATE,
     .setup = ckpt_state_setup, .run = ckpt_state_run},
    {"ckpt_optim", "a checkpoint's optimizer.safetensors (state.json's record rewritten) -> ckpt_load", FZ_BINARY, 1, 1400,
     NULL, .setup = ckpt_optim_setup, .run = ckpt_file_run},
    {"ckpt_manifest", "a sharded checkpoint's manifest.json (recorded anew) -> ckpt_shard_load, whole and tp 2",
     FZ_JSON, 1, 1400, FREE_MANIFEST, .setup = ckpt_manifest_setup, .run = ckpt_sharded_run},
    {"ckpt_rankfile", "a sharded checkpoint's rank00000.safetensors (recorded anew) -> ckpt_shard_load", FZ_BINARY, 1,
     1200, NULL, .setup = ckpt_rankfile_setup, .run = ckpt_sharded_run},
    {"llmc", "an llm.c fp32 checkpoint -> ckpt_peek_config, ckpt_init_from", FZ_BINARY, 0, 1600, NULL,
     .setup = llmc_setup, .run = llmc_run},
    {"lora_state", "a LoRA checkpoint's state.json (resealed) -> ckpt_lora_read_meta, ckpt_lora_load", FZ_JSON, 1, 1000,
     FREE_LORA_STATE, .setup = lora_state_setup, .run = lora_state_run},
    {"lora_adapter", "a LoRA checkpoint's adapter_model.safetensors (recorded anew) -> ckpt_lora_load", FZ_BINARY, 1,
     1000, NULL, .setup = lora_adapter_setup, .run = lora_adapter_run},
    {"token_shard", "a token shard (uint16) -> loader_open_named packed and no-pack, first rows", FZ_BINARY, 0, 1800,
     NULL, .setup = token_shard_setup, .run = shard_run},
    {"token_mask", "a shard's loss mask -> loader_open_named packed and no-pack, first rows", FZ_BINARY, 0, 1200, NULL,
     .setup = token_mask_setup, .run = shard_run},
    {"gpt2_encoder", "a trained tokenizer's encoder.json -> tokenizer_load_files, round trip", FZ_JSON, 0, 800,
     FREE_ENCODER, .setup = gpt2_encoder_setup, .run = gpt2_files_run},
    {"gpt2_merges", "a trained tokenizer's vocab.bpe -> tokenizer_load_files, round trip", FZ_LINES, 0, 800, NULL,
     .setup = gpt2_merges_setup, .run = gpt2_files_run},
    {"tok_stamp", "a trained tokenizer folder's files.xxh3 stamp -> tokenizer_load of the folder", FZ_BINARY, 0, 600,
     NULL, .setup = tok_stamp_setup, .run = tok_stamp_run},
    {"tiktoken", "a rank file (cl100k's first 600 ranks; size and checksum rewritten) -> tokenizer_load_ranks",
     FZ_BINARY, 1, 1600, NULL, .setup = tiktoken_setup, .run = tiktoken_run},
    {"llama3_tok", "Meta's Llama 3 tokenizer.model -> tokenizer_load_llama3", FZ_BINARY, 0, 90, NULL,
     .setup = llama3_setup, .run = llama3_run},
    {"jsonl", "JSON Lines (prepare --format jsonl) -> docreader", FZ_LINES, 0, 1800, FREE_JSONL, .setup = jsonl_setup,
     .run = jsonl_run},
    {"jsonl_gz", "gzip'd JSON Lines -> docreader", FZ_BINARY, 0, 1200, NULL, .setup = jsonl_gz_setup, .run = jsonl_run},
    {"jsonl_zst", "zstd'd JSON Lines -> docreader", FZ_BINARY, 0, 1200, NULL, .setup = jsonl_zst_setup, .run = jsonl_run},
    {"text", "text with blank-line documents -> docreader", FZ_LINES, 0, 1000, NULL, .setup = text_setup, .run = text_run},
    {"chat", "chat JSON Lines -> docreader, chat_render (plain, llama3)", FZ_LINES, 0, 1400, FREE_CHAT,
     .setup = chat_setup, .run = chat_run},
    {"fit_csv", "fit's results table (sweep's columns) -> fit_table_load", FZ_LINES, 0, 1400, FREE_CSV,
     .setup = fit_csv_setup, .run = fit_csv_run},
    {"hw_profile", "a hardware profile (plan --measure-hardware) -> hw_resolve", FZ_JSON, 0, 1200, FREE_HW,
     .setup = hw_setup, .run = hw_run},
    {NULL, NULL, 0, 0, 0, NULL, .setup = NULL, .run = NULL},
};

FzReader *fz_reader(int i) {
    if (i < 0 || i >= (int)(sizeof READERS / sizeof READERS[0])) return NULL;
    return READERS[i].name ? &READERS[i] : NULL;
}

FzReader *fz_reader_find(const char *name) {
    for (int i = 0; READERS[i].name; i++)
        if (!strcmp(READERS[i].name, name)) return &READERS[i];
    return NULL;
}

Status fz_setup(FzReader *r, const char *workdir, const char *srcdir, Err *err) {
    g_srcdir = srcdir;
    fz_teardown(r);
    Status st = file_mkdirs(workdir, err);
    if (st == ST_OK) st = shared_tokenizer(workdir, srcdir, err);
    if (st != ST_OK) return st;
    Priv *p = priv_new(r, workdir);
    if (!p) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    file_rm_tree(p->dir);
    st = file_mkdirs(p->dir, err);
    if (st == ST_OK) st = r->setup(r, err);
    if (st != ST_OK) {
        err_prefix(err, "fuzz setup of %s", r->name);
        fz_teardown(r);
        return st;
    }
    r->ready = 1;
    return ST_OK;
}

void fz_teardown(FzReader *r) {
    if (r->teardown) r->teardown(r);
    priv_free(r);
    free(r->seed);
    free(r->strict);
    r->seed = NULL, r->strict = NULL, r->seed_len = 0, r->ready = 0;
    memset(r->names, 0, sizeof r->names);
}

Status fz_run(FzReader *r, const uint8_t *buf, size_t len, uint64_t *digest, Err *err) {
    uint64_t d = 0;
    r->broken[0] = '\0';
    err->status = ST_OK, err->msg[0] = '\0';
    Status st = r->run(r, buf, len, &d, err);
    if (digest) *digest = st == ST_OK ? d : 0;
    return st;
}

int fz_contract(const FzReader *r, Status st, const Err *err, char *why, size_t cap) {
    if (r->broken[0]) return snprintf(why, cap, "%s", r->broken), 0;
    if (st == ST_OK) return 1;
    if (st != ST_ERR_INPUT && st != ST_ERR_RUNTIME) return snprintf(why, cap, "status %d is not a Status", (int)st), 0;
    size_t n = strnlen(err->msg, sizeof err->msg);
    if (n == 0) return snprintf(why, cap, "status %d with an empty message", (int)st), 0;
    if (n == sizeof err->msg) return snprintf(why, cap, "a message without its NUL"), 0;
    for (size_t i = 0; i < n; i++)
        if (err->msg[i] == '\n' || err->msg[i] == '\r')
            return snprintf(why, cap, "a message of more than one line: \"%.*s\"", (int)(n < 300 ? n : 300), err->msg),
                   0;
    for (int k = 0; k < 4 && r->names[k]; k++)
        if (strstr(err->msg, r->names[k])) return 1;
    return snprintf(why, cap, "a message that names no file of the reader (%s): \"%.300s\"", r->names[0] ? r->names[0] : "?",
                    err->msg), 0;
}
