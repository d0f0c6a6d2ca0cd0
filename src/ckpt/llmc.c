/* llmc.c — weight import (--init-from: Hugging Face safetensors or llm.c .bin) and llm.c export.
 *
 * llm.c's fp32 checkpoint (train_gpt2.c): a header of 256 little-endian int32 — [0] magic
 * 20240326, [1] version 3 (fp32), [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp — then the
 * parameters tensor by tensor with all layers stacked: wte (Vp, C), wpe (maxT, C), ln1w (L, C),
 * ln1b (L, C), qkvw (L, 3C, C), qkvb (L, 3C), attprojw (L, C, C), attprojb (L, C), ln2w (L, C),
 * ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C), fcprojw (L, C, 4C), fcprojb (L, C), lnfw (C), lnfb (C).
 * Weights are (out, in) like ours, and the per-layer order is our BT_* order, so layer l of
 * llm.c tensor j is our tensor 2 + 12 l + j. Padded vocabulary rows are zero on export and
 * ignored on import (the file's Vp may differ from ours). */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/lora_ckpt.h"
#include "ckpt/safetensors.h"
#include "core/fileio.h"

#define LLMC_MAGIC 20240326
#define LLMC_VERSION_FP32 3

/* Reads the llm.c header if path starts with its magic: 1 yes (hdr filled), 0 not llm.c, -1 unreadable. */
static int llmc_header(const char *path, int hdr[256]) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t n = fread(hdr, sizeof(int), 256, f);
    fclose(f);
    if (n >= 1 && hdr[0] == LLMC_MAGIC) return n == 256 ? 1 : 2;
    return 0;
}

/* For a file that is not llm.c's (llmc_header 0): ST_OK when it can be a safetensors file (an 8-byte
 * header length within the file, then '{'), else one line saying what was expected. A .bin with
 * another magic was taken for safetensors and refused as "DIR/config.json: cannot open". */
static Status not_llmc(const char *path, const int *hdr, Err *err) {
    FILE *f = fopen(path, "rb");
    unsigned char b[9];
    uint64_t n = 0;
    struct stat sb;
    int ok = f && fread(b, 1, 9, f) == 9 && fstat(fileno(f), &sb) == 0;
    if (f) fclose(f);
    if (ok) memcpy(&n, b, 8);
    if (ok && n + 8 <= (uint64_t)sb.st_size && b[8] == '{') return ST_OK;
    if (!ok)
        return err_set(err, ST_ERR_INPUT, "%s: expected llm.c weights (magic %d) or a safetensors file, found a file of "
                       "fewer than 9 bytes", path, LLMC_MAGIC);
    return err_set(err, ST_ERR_INPUT, "%s: expected llm.c weights (magic %d) or a safetensors file, found neither "
                   "(first int32 %d)", path, LLMC_MAGIC, hdr[0]);
}

static Status llmc_config(const char *path, const int *h, ModelConfig *cfg, Err *err) {
    if (h[1] != LLMC_VERSION_FP32)
        return err_set(err, ST_ERR_INPUT, "%s: llm.c checkpoint version %d: expected 3 (fp32)%s", path, h[1],
                       h[1] == 5 ? "; version 5 is bf16, not supported" : "");
    memset(cfg, 0, sizeof *cfg);
    cfg->max_seq = h[2], cfg->vocab = h[3], cfg->n_layer = h[4], cfg->n_head = h[5], cfg->n_embd = h[6];
    if (h[7] < h[3])
        return err_set(err, ST_ERR_INPUT, "%s: padded vocabulary %d is smaller than the vocabulary %d", path, h[7], h[3]);
    /* llm.c (train_gpt2.c, train_gpt2.py) writes zeros past word [7]: anything else is a damaged or
     * foreign header, not one to read weights by */
    for (int i = 8; i < 256; i++)
        if (h[i] != 0)
            return err_set(err, ST_ERR_INPUT, "%s: llm.c header word [%d]: expected 0 (reserved), found %d", path, i, h[i]);
    Status st = model_config_validate(cfg, err);
    if (st == ST_OK) return ST_OK;
    /* The check names train's flags ("--layers: expected 1..1024"); here each value is a header
     * word: "--layers" becomes "layers (word [4])". */
    static const struct { const char *flag, *word; } W[] = {{"--max-seq-len", "max_seq (word [2])"},
        {"--vocab", "vocab (word [3])"}, {"--layers", "layers (word [4])"}, {"--heads", "heads (word [5])"},
        {"--channels", "channels (word [6])"}};
    char msg[sizeof err->msg], out[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    for (size_t i = 0; i < sizeof W / sizeof W[0]; i++) {
        size_t n = strlen(W[i].flag), o = 0;
        for (const char *q = msg; *q && o + 1 < sizeof out;) {
            if (!strncmp(q, W[i].flag, n) && !(q[n] == '-' || (q[n] >= 'a' && q[n] <= 'z'))) {
                o += (size_t)snprintf(out + o, sizeof out - o, "%s", W[i].word), q += n;
                if (o >= sizeof out) o = sizeof out - 1;
            } else
                out[o++] = *q++;
        }
        out[o] = '\0';
        snprintf(msg, sizeof msg, "%s", out);
    }
    return err_set(err, st, "%s: llm.c header: %s", path, msg);
}

Status ckpt_peek_config(const char *path, ModelConfig *cfg, Err *err) {
    if (file_is_dir(path)) return st_load_hf_config(path, cfg, NULL, 0, err);
    int h[256];
    int r = llmc_header(path, h);
    if (r < 0) return err_set(err, ST_ERR_INPUT, "--init-from %s: cannot open: %s", path, strerror(errno));
    if (r == 2) return err_set(err, ST_ERR_INPUT, "%s: llm.c header truncated (expected 1024 bytes)", path);
    if (r == 1) return llmc_config(path, h, cfg, err);
    Status st = not_llmc(path, h, err);
    if (st != ST_OK) return st;
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    return st_load_hf_config(dirname(buf), cfg, NULL, 0, err);
}

/* Compares one header dimension with the model's. */
static Status dim_check(const char *path, const char *what, int file, int model, Err *err) {
    if (file == model) return ST_OK;
    return err_set(err, ST_ERR_INPUT, "%s: %s: file has %d, model has %d", path, what, file, model);
}

/* The config.json in dir (beside Hugging Face weights), when there is one: the head count, which
 * no tensor shape shows, and the other dimensions must be the model's, and the fields that change
 * the computation GPT-2's (st_load_hf_config). Without one, only the shapes are checked. */
static Status hf_config_check(const GptWeights *w, const char *dir, Err *err) {
    char p[4200];
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (access(p, F_OK) != 0) return ST_OK;
    ModelConfig f;
    Status st = st_load_hf_config(dir, &f, NULL, 0, err);
    if (st != ST_OK) return st;
    const ModelConfig *c = &w->cfg;
    if (f.arch != c->arch)
        return err_set(err, ST_ERR_INPUT, "%s: model_type: the file holds a %s, this run builds a %s (--arch %s)", p,
                       model_arch_name(f.arch), model_arch_name(c->arch), model_arch_name(c->arch));
    /* muP's multipliers change the computation, not a shape: the weights mean something else under
     * the other parameterization. */
    if (f.param != c->param || f.mup_base_width != c->mup_base_width || f.mup_input_alpha != c->mup_input_alpha ||
        f.mup_output_alpha != c->mup_output_alpha)
        return err_set(err, ST_ERR_INPUT, "%s: scaletrain.mup: the file's model is %s (base width %g, alphas %g, %g), "
                       "this run's is %s (base width %g, alphas %g, %g): expected the same parameterization", p,
                       model_param_name(f.param), f.mup_base_width, f.mup_input_alpha, f.mup_output_alpha,
                       model_param_name(c->param), c->mup_base_width, c->mup_input_alpha, c->mup_output_alpha);
    if (f.arch == ARCH_LLAMA) {
        if ((st = dim_check(p, "num_hidden_layers", f.n_layer, c->n_layer, err)) != ST_OK ||
            (st = dim_check(p, "num_attention_heads", f.n_head, c->n_head, err)) != ST_OK ||
            (st = dim_check(p, "num_key_value_heads", f.n_kv_head, c->n_kv_head, err)) != ST_OK ||
            (st = dim_check(p, "hidden_size", f.n_embd, c->n_embd, err)) != ST_OK ||
            (st = dim_check(p, "intermediate_size", f.ffn, c->ffn, err)) != ST_OK ||
            (st = dim_check(p, "vocab_size", f.vocab, c->vocab, err)) != ST_OK ||
            (st = dim_check(p, "tie_word_embeddings (0 tied, 1 untied)", f.untied, c->untied, err)) != ST_OK)
            return st;
        /* eps and theta change the computation, not a shape: they must be the run's. */
        if (f.norm_eps != c->norm_eps || f.rope_theta != c->rope_theta)
            return err_set(err, ST_ERR_INPUT, "%s: rms_norm_eps %g, rope_theta %g: expected this run's --norm-eps %g and "
                           "--rope-theta %g", p, f.norm_eps, f.rope_theta, c->norm_eps, c->rope_theta);
        /* so does the RoPE scaling (Llama 3.1/3.2's llama3, linear) */
        if (f.rope_type != c->rope_type || f.rope_factor != c->rope_factor ||
            f.rope_low_freq_factor != c->rope_low_freq_factor || f.rope_high_freq_factor != c->rope_high_freq_factor ||
            f.rope_orig_max_seq != c->rope_orig_max_seq)
            return err_set(err, ST_ERR_INPUT, "%s: rope_parameters: the file's RoPE is %s (factor %g), this run's is %s "
                           "(factor %g): expected the same (the --rope-* flags, the file's --model preset, or no shape flags)", p,
                           model_rope_type_name(f.rope_type), f.rope_factor, model_rope_type_name(c->rope_type),
                           c->rope_factor);
        return ST_OK;
    }
    if ((st = dim_check(p, "n_layer", f.n_layer, c->n_layer, err)) != ST_OK ||
        (st = dim_check(p, "n_head", f.n_head, c->n_head, err)) != ST_OK ||
        (st = dim_check(p, "n_embd", f.n_embd, c->n_embd, err)) != ST_OK ||
        (st = dim_check(p, "vocab_size", f.vocab, c->vocab, err)) != ST_OK ||
        (st = dim_check(p, "n_positions", f.max_seq, c->max_seq, err)) != ST_OK)
        return st;
    return ST_OK;
}

static Status llmc_load(GptWeights *w, const char *path, const int *h, Err *err) {
    const ModelConfig *c = &w->cfg;
    ModelConfig hc; /* the header as ckpt_peek_config reads it: version, padded vocabulary, reserved words */
    Status st = llmc_config(path, h, &hc, err);
    if (st != ST_OK) return st;
    if ((st = dim_check(path, "layers", h[4], c->n_layer, err)) != ST_OK ||
        (st = dim_check(path, "heads", h[5], c->n_head, err)) != ST_OK ||
        (st = dim_check(path, "channels", h[6], c->n_embd, err)) != ST_OK ||
        (st = dim_check(path, "vocab", h[3], c->vocab, err)) != ST_OK ||
        (st = dim_check(path, "max-seq-len", h[2], c->max_seq, err)) != ST_OK)
        return st;
    size_t L = (size_t)c->n_layer, C = (size_t)c->n_embd, Vpf = (size_t)h[7];
    const ParamLayout *pl = &w->layout;
    size_t want = 1024 + 4 * (Vpf * C + pl->tensors[1].numel + C * 2);
    for (int j = 0; j < BT_COUNT; j++) want += 4 * L * pl->tensors[2 + j].numel;
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, ST_ERR_INPUT, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || (size_t)sb.st_size != want) {
        fclose(f);
        return err_set(err, ST_ERR_INPUT, "%s: expected %zu bytes for L=%zu C=%zu Vp=%zu maxT=%d, found %lld%s", path,
                       want, L, C, Vpf, h[2], (long long)sb.st_size, (size_t)sb.st_size < want ? " (truncated)" : "");
    }
    memset(w->params, 0, pl->total * sizeof(float));
    int ok = fseek(f, 1024, SEEK_SET) == 0;
    /* wte: the V real rows, then skip the file's padding rows */
    ok = ok && fread(w->params + pl->tensors[0].offset, 4, (size_t)c->vocab * C, f) == (size_t)c->vocab * C;
    ok = ok && fseek(f, (long)((Vpf - (size_t)c->vocab) * C * 4), SEEK_CUR) == 0;
    ok = ok && fread(w->params + pl->tensors[1].offset, 4, pl->tensors[1].numel, f) == pl->tensors[1].numel;
    for (int j = 0; ok && j < BT_COUNT; j++)
        for (size_t l = 0; ok && l < L; l++) {
            const TensorInfo *t = &pl->tensors[2 + l * BT_COUNT + (size_t)j];
            ok = fread(w->params + t->offset, 4, t->numel, f) == t->numel;
        }
    for (int j = 0; ok && j < 2; j++) {
        const TensorInfo *t = &pl->tensors[2 + L * BT_COUNT + (size_t)j];
        ok = fread(w->params + t->offset, 4, t->numel, f) == t->numel;
    }
    fclose(f);
    if (!ok) return err_set(err, ST_ERR_INPUT, "%s: read failed", path);
    return ST_OK;
}

Status ckpt_init_from(GptWeights *w, const char *path, Err *err) {
    Status st;
    if (file_is_dir(path)) {
        char p[4200], lat[4200];
        snprintf(p, sizeof p, "%s/adapter_config.json", path);
        Err le;
        /* a LoRA --ckpt-dir: its latest names a LoRA checkpoint (ckpt_lora_resolve reads it) */
        int lora_dir = ckpt_lora_resolve(path, "auto", lat, sizeof lat, &le) == ST_OK && lat[0];
        if (ckpt_lora_is_checkpoint(path) || lora_dir)
            return err_set(err, ST_ERR_INPUT, "%s: a LoRA checkpoint (adapters on a base, no base weights): "
                           "export it with --merge for a full model, or continue it with its --lora-rank flags and "
                           "--resume", path);
        snprintf(lat, sizeof lat, "%s/model.safetensors", path);
        if (access(p, R_OK) == 0 && access(lat, R_OK) != 0)
            return err_set(err, ST_ERR_INPUT, "%s: a PEFT adapter folder (a LoRA run's --out: adapters only, no "
                           "base weights); expected the base's weights folder (and export --merge of the run's checkpoint "
                           "for the merged model)", path);
        snprintf(p, sizeof p, "%s/model.safetensors", path);
        if ((st = hf_config_check(w, path, err)) != ST_OK) return st;
        (void)p;
        return ckpt_load_weights(w, path, err); /* one file, HF's sharded files, or our sharded checkpoint */
    }
    int h[256];
    int r = llmc_header(path, h);
    if (r < 0) return err_set(err, ST_ERR_INPUT, "--init-from %s: cannot open: %s", path, strerror(errno));
    if (r == 2) return err_set(err, ST_ERR_INPUT, "%s: llm.c header truncated (expected 1024 bytes)", path);
    if (r == 1 && w->cfg.arch != ARCH_GPT2)
        return err_set(err, ST_ERR_INPUT, "%s: an llm.c file holds a GPT-2; this run builds a %s", path,
                       model_arch_name(w->cfg.arch));
    if (r == 1) return llmc_load(w, path, h, err);
    if ((st = not_llmc(path, h, err)) != ST_OK) return st;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    if ((st = hf_config_check(w, dirname(dir), err)) != ST_OK) return st;
    return st_load_hf_file(w, path, err);
}

Status ckpt_export_llmc(const GptWeights *w, const char *path, Err *err) {
    const ModelConfig *c = &w->cfg;
    if (c->arch != ARCH_GPT2)
        return err_set(err, ST_ERR_INPUT, "--format llmc: llm.c's format holds GPT-2 only, found a %s (use --format hf)",
                       model_arch_name(c->arch));
    if (c->param != PARAM_SP)
        return err_set(err, ST_ERR_INPUT, "--format llmc: llm.c's format has no place for muP's multipliers (the weights "
                       "would compute another model), found --param mup (use --format hf)");
    const ParamLayout *pl = &w->layout;
    int L = c->n_layer;
    int n = 1 + 2 + BT_COUNT * L + 2;
    const void **bufs = calloc((size_t)n, sizeof *bufs);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    if (!bufs || !lens) {
        free(bufs);
        free(lens);
        return err_set(err, ST_ERR_RUNTIME, "%s: out of memory", path);
    }
    int hdr[256] = {0};
    hdr[0] = LLMC_MAGIC, hdr[1] = LLMC_VERSION_FP32, hdr[2] = c->max_seq, hdr[3] = c->vocab, hdr[4] = L;
    hdr[5] = c->n_head, hdr[6] = c->n_embd, hdr[7] = c->vocab_padded;
    int k = 0;
    bufs[k] = hdr, lens[k++] = sizeof hdr;
    for (int t = 0; t < 2; t++) bufs[k] = w->params + pl->tensors[t].offset, lens[k++] = pl->tensors[t].numel * 4;
    for (int j = 0; j < BT_COUNT; j++)
        for (int l = 0; l < L; l++) {
            const TensorInfo *t = &pl->tensors[2 + l * BT_COUNT + j];
            bufs[k] = w->params + t->offset, lens[k++] = t->numel * 4;
        }
    for (int j = 0; j < 2; j++) {
        const TensorInfo *t = &pl->tensors[2 + L * BT_COUNT + j];
        bufs[k] = w->params + t->offset, lens[k++] = t->numel * 4;
    }
    Status st = file_write_atomic(path, bufs, lens, n, err);
    free(bufs);
    free(lens);
    return st;
}
