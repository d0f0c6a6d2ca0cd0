/* config.c — presets and validation of the model blueprint. */
#include "model/config.h"

#include "model/kernels.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *model_arch_name(int arch) { return arch == ARCH_LLAMA ? "llama" : "gpt2"; }

int model_arch_parse(const char *name) {
    if (!strcmp(name, "gpt2")) return ARCH_GPT2;
    if (!strcmp(name, "llama")) return ARCH_LLAMA;
    return -1;
}

const char *model_rope_type_name(int rope_type) {
    return rope_type == ROPE_LINEAR ? "linear" : rope_type == ROPE_LLAMA3 ? "llama3" : "default";
}

int model_rope_type_parse(const char *name) {
    if (!strcmp(name, "default")) return ROPE_DEFAULT;
    if (!strcmp(name, "linear")) return ROPE_LINEAR;
    if (!strcmp(name, "llama3")) return ROPE_LLAMA3;
    return -1;
}

void model_rope_inv_freq(const ModelConfig *cfg, double *inv_freq) {
    int hs = cfg->n_embd / cfg->n_head;
    rope_inv_freq(inv_freq, hs, cfg->rope_theta);
    if (cfg->rope_type == ROPE_LINEAR) {
        for (int i = 0; i < hs / 2; i++) inv_freq[i] /= (double)cfg->rope_factor;
    } else if (cfg->rope_type == ROPE_LLAMA3) {
        /* transformers' _compute_llama3_parameters, step by step */
        double factor = cfg->rope_factor, lo = cfg->rope_low_freq_factor, hi = cfg->rope_high_freq_factor;
        double old_ctx = cfg->rope_orig_max_seq;
        double low_freq_wavelen = old_ctx / lo, high_freq_wavelen = old_ctx / hi;
        for (int i = 0; i < hs / 2; i++) {
            double f = inv_freq[i], wavelen = 2.0 * M_PI / f;
            double fl = wavelen > low_freq_wavelen ? f / factor : f; /* long wavelengths: scaled */
            double smooth = (old_ctx / wavelen - lo) / (hi - lo);
            double smoothed = (1.0 - smooth) * fl / factor + smooth * fl;
            int medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
            inv_freq[i] = medium ? smoothed : fl;
        }
    }
}

const char *model_param_name(int param) { return param == PARAM_MUP ? "mup" : "sp"; }

int model_param_parse(const char *name) {
    if (!strcmp(name, "sp")) return PARAM_SP;
    if (!strcmp(name, "mup")) return PARAM_MUP;
    return -1;
}

double model_width_mult(const ModelConfig *cfg) {
    return cfg->param == PARAM_MUP ? (double)cfg->n_embd / (double)cfg->mup_base_width : 1.0;
}

float model_logit_mult(const ModelConfig *cfg) {
    return cfg->param == PARAM_MUP ? (float)(cfg->mup_output_alpha / model_width_mult(cfg)) : 1.0f;
}

float model_input_mult(const ModelConfig *cfg) { return cfg->param == PARAM_MUP ? cfg->mup_input_alpha : 1.0f; }

float model_attn_scale(const ModelConfig *cfg) {
    int hs = cfg->n_embd / cfg->n_head;
    return cfg->param == PARAM_MUP ? 1.0f / (float)hs : 1.0f / sqrtf((float)hs);
}

/* The published Llama shapes (Llama 2 7B/13B/70B, Llama 3 8B, Llama 3.1 8B, Llama 3.2 1B/3B: their
 * Hugging Face config.json files), for train, plan and --init-from. rope: 0 plain, else llama3 with
 * factor `factor`, low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192. */
static const struct { const char *name; int L, NH, KV, C, F, V, maxT; float theta; int tied; float factor; } LLAMA[] = {
    {"llama-7b", 32, 32, 32, 4096, 11008, 32000, 4096, 10000.0f, 0, 0},
    {"llama-13b", 40, 40, 40, 5120, 13824, 32000, 4096, 10000.0f, 0, 0},
    {"llama-70b", 80, 64, 8, 8192, 28672, 32000, 4096, 10000.0f, 0, 0},
    {"llama3-8b", 32, 32, 8, 4096, 14336, 128256, 8192, 500000.0f, 0, 0},
    {"llama3.1-8b", 32, 32, 8, 4096, 14336, 128256, 131072, 500000.0f, 0, 8.0f},
    {"llama3.2-1b", 16, 32, 8, 2048, 8192, 128256, 131072, 500000.0f, 1, 32.0f},
    {"llama3.2-3b", 28, 24, 8, 3072, 8192, 128256, 131072, 500000.0f, 1, 32.0f},
    /* Llama 3.1 405B (Dubey et al. 2024, Table 3; its released config.json) */
    {"llama-405b", 126, 128, 8, 16384, 53248, 128256, 131072, 500000.0f, 0, 8.0f},
};

/* The one list of preset names, for --help and for the error on an unknown name (train and plan). */
#define PRESET_NAMES                                                                                                  \
    "d1..d64, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m (alias gpt2-1.5b), llama-d1..llama-d64, llama-7b, "       \
    "llama-13b, llama-70b, llama-405b, llama3-8b, llama3.1-8b, llama3.2-1b, llama3.2-3b"

const char *model_preset_names(void) { return PRESET_NAMES; }

Status model_config_preset(ModelConfig *cfg, const char *name_in, Err *err) {
    char name[32]; /* names compare case-insensitively: "LLaMA-7B" is llama-7b */
    size_t nl = strlen(name_in);
    if (nl >= sizeof name) return err_set(err, ST_ERR_INPUT, "--model: expected a preset (%s), found '%s'", PRESET_NAMES, name_in);
    for (size_t i = 0; i <= nl; i++) name[i] = (char)tolower((unsigned char)name_in[i]);
    if (!strcmp(name, "gpt2-1.5b")) snprintf(name, sizeof name, "gpt2-1558m");
    for (size_t i = 0; i < sizeof LLAMA / sizeof LLAMA[0]; i++) {
        if (strcmp(name, LLAMA[i].name) == 0) {
            cfg->arch = ARCH_LLAMA, cfg->untied = 1;
            cfg->n_layer = LLAMA[i].L, cfg->n_head = LLAMA[i].NH, cfg->n_kv_head = LLAMA[i].KV;
            cfg->n_embd = LLAMA[i].C, cfg->ffn = LLAMA[i].F, cfg->vocab = LLAMA[i].V, cfg->max_seq = LLAMA[i].maxT;
            cfg->rope_theta = LLAMA[i].theta, cfg->untied = !LLAMA[i].tied;
            cfg->rope_type = ROPE_DEFAULT, cfg->rope_factor = 0.0f;
            cfg->rope_low_freq_factor = cfg->rope_high_freq_factor = 0.0f, cfg->rope_orig_max_seq = 0;
            if (LLAMA[i].factor > 0.0f) {
                cfg->rope_type = ROPE_LLAMA3, cfg->rope_factor = LLAMA[i].factor;
                cfg->rope_low_freq_factor = 1.0f, cfg->rope_high_freq_factor = 4.0f, cfg->rope_orig_max_seq = 8192;
            }
            return ST_OK;
        }
    }
    if (!strncmp(name, "llama-d", 7) && name[7] >= '1' && name[7] <= '9') {
        char *end;
        long n = strtol(name + 7, &end, 10);
        if (*end == '\0' && n >= 1 && n <= 64) {
            cfg->arch = ARCH_LLAMA, cfg->untied = 1;
            cfg->n_layer = cfg->n_head = (int)n;
            cfg->n_kv_head = n >= 2 ? (int)n / 2 : 1;
            if (n % cfg->n_kv_head) cfg->n_kv_head = (int)n; /* odd N: plain multi-head attention */
            cfg->n_embd = 64 * (int)n;
            cfg->ffn = 0; /* derived */
            return ST_OK;
        }
    }
    static const struct { const char *name; int L, NH, C; } P[] = {
        {"gpt2-124m", 12, 12, 768}, {"gpt2-350m", 24, 16, 1024},
        {"gpt2-774m", 36, 20, 1280}, {"gpt2-1558m", 48, 25, 1600},
    };
    for (size_t i = 0; i < sizeof P / sizeof P[0]; i++) {
        if (strcmp(name, P[i].name) == 0) {
            cfg->arch = ARCH_GPT2;
            cfg->n_layer = P[i].L, cfg->n_head = P[i].NH, cfg->n_embd = P[i].C;
            return ST_OK;
        }
    }
    if (name[0] == 'd' && name[1] >= '1' && name[1] <= '9') {
        char *end;
        long n = strtol(name + 1, &end, 10);
        if (*end == '\0' && n >= 1 && n <= 64) {
            cfg->arch = ARCH_GPT2;
            cfg->n_layer = cfg->n_head = (int)n;
            cfg->n_embd = 64 * (int)n;
            return ST_OK;
        }
    }
    return err_set(err, ST_ERR_INPUT, "--model: expected a preset (%s), found '%s'", PRESET_NAMES, name_in);
}

/* The RoPE type's parameters: each type's own in range, every other one 0 (a value that would
 * change nothing is refused, as an inert flag is). Messages name the flag and Hugging Face's key. */
static Status rope_validate(const ModelConfig *c, Err *err) {
    if (c->rope_type != ROPE_DEFAULT && c->rope_type != ROPE_LINEAR && c->rope_type != ROPE_LLAMA3)
        return err_set(err, ST_ERR_INPUT, "--rope-type: expected default, linear or llama3, found type %d", c->rope_type);
    const char *t = model_rope_type_name(c->rope_type);
    if (c->rope_type == ROPE_DEFAULT ? c->rope_factor != 0.0f
                                     : !(isfinite(c->rope_factor) && c->rope_factor > 0.0f))
        return err_set(err, ST_ERR_INPUT, "--rope-factor (rope factor): expected %s under --rope-type %s, found %g",
                       c->rope_type == ROPE_DEFAULT ? "none (a factor is linear's or llama3's)" : "a positive number", t,
                       c->rope_factor);
    if (c->rope_type != ROPE_LLAMA3) {
        if (c->rope_low_freq_factor != 0.0f || c->rope_high_freq_factor != 0.0f || c->rope_orig_max_seq != 0)
            return err_set(err, ST_ERR_INPUT, "--rope-low-freq-factor, --rope-high-freq-factor, "
                           "--rope-original-max-seq-len: expected none under --rope-type %s (they are llama3's), found "
                           "%g, %g, %d", t, c->rope_low_freq_factor, c->rope_high_freq_factor, c->rope_orig_max_seq);
        return ST_OK;
    }
    if (!(isfinite(c->rope_low_freq_factor) && c->rope_low_freq_factor > 0.0f))
        return err_set(err, ST_ERR_INPUT, "--rope-low-freq-factor (low_freq_factor): expected a positive number under "
                       "--rope-type llama3, found %g", c->rope_low_freq_factor);
    if (!(isfinite(c->rope_high_freq_factor) && c->rope_high_freq_factor > c->rope_low_freq_factor))
        return err_set(err, ST_ERR_INPUT, "--rope-high-freq-factor (high_freq_factor): expected a number above "
                       "low_freq_factor %g, found %g", c->rope_low_freq_factor, c->rope_high_freq_factor);
    if (c->rope_orig_max_seq < 1)
        return err_set(err, ST_ERR_INPUT, "--rope-original-max-seq-len (original_max_position_embeddings): expected a "
                       "positive integer under --rope-type llama3, found %d", c->rope_orig_max_seq);
    return ST_OK;
}

Status model_config_validate(ModelConfig *cfg, Err *err) {
    if (cfg->n_layer < 1 || cfg->n_layer > 1024)
        return err_set(err, ST_ERR_INPUT, "--layers: expected 1..1024, found %d", cfg->n_layer);
    if (cfg->n_head < 1)
        return err_set(err, ST_ERR_INPUT, "--heads: expected a positive integer, found %d", cfg->n_head);
    if (cfg->n_embd < 1 || cfg->n_embd > 65536)
        return err_set(err, ST_ERR_INPUT, "--channels: expected 1..65536, found %d", cfg->n_embd);
    if (cfg->n_embd % cfg->n_head != 0)
        return err_set(err, ST_ERR_INPUT, "--heads %d does not divide --channels %d (expected channels a multiple of heads)",
                       cfg->n_head, cfg->n_embd);
    if (cfg->vocab < 2 || cfg->vocab > (1 << 30))
        return err_set(err, ST_ERR_INPUT, "--vocab: expected 2..2^30, found %d", cfg->vocab);
    if (cfg->max_seq < 1 || cfg->max_seq > (1 << 20))
        return err_set(err, ST_ERR_INPUT, "--max-seq-len: expected 1..1048576, found %d", cfg->max_seq);
    if (!(cfg->dropout >= 0.0f && cfg->dropout < 1.0f))
        return err_set(err, ST_ERR_INPUT, "--dropout: expected a value in [0, 1), found %g", cfg->dropout);
    if (cfg->arch != ARCH_GPT2 && cfg->arch != ARCH_LLAMA)
        return err_set(err, ST_ERR_INPUT, "--arch: expected gpt2 or llama, found architecture %d", cfg->arch);
    int C = cfg->n_embd;
    if (cfg->arch == ARCH_GPT2) {
        /* GPT-2 has one shape per (L, NH, C); anything else set means a flag that does not apply. */
        if ((cfg->n_kv_head && cfg->n_kv_head != cfg->n_head) || (cfg->ffn && cfg->ffn != 4 * C) || cfg->untied)
            return err_set(err, ST_ERR_INPUT, "--arch gpt2: expected no --kv-heads, --ffn or untied head (they are "
                           "Llama options; use --arch llama), found kv-heads %d, ffn %d, untied %d", cfg->n_kv_head,
                           cfg->ffn, cfg->untied);
        cfg->n_kv_head = cfg->n_head, cfg->ffn = 4 * C;
        if (cfg->norm_eps == 0.0f) cfg->norm_eps = 1e-5f;
        if (cfg->rope_theta == 0.0f) cfg->rope_theta = 10000.0f;
        if (cfg->rope_type != ROPE_DEFAULT)
            return err_set(err, ST_ERR_INPUT, "--rope-type: expected default (GPT-2 has no RoPE), found %s",
                           model_rope_type_name(cfg->rope_type));
        Status st = rope_validate(cfg, err);
        if (st != ST_OK) return st;
    } else {
        if (cfg->n_kv_head == 0) cfg->n_kv_head = cfg->n_head;
        if (cfg->n_kv_head < 1 || cfg->n_head % cfg->n_kv_head)
            return err_set(err, ST_ERR_INPUT, "--kv-heads %d: expected a divisor of the %d attention heads (--heads)",
                           cfg->n_kv_head, cfg->n_head);
        if ((C / cfg->n_head) % 2)
            return err_set(err, ST_ERR_INPUT, "--heads %d: expected an even head size for RoPE, found %d channels / %d "
                           "heads = %d", cfg->n_head, C, cfg->n_head, C / cfg->n_head);
        if (cfg->ffn_multiple == 0) cfg->ffn_multiple = 256;
        if (cfg->ffn_multiple < 1)
            return err_set(err, ST_ERR_INPUT, "--ffn-multiple: expected a positive integer, found %d", cfg->ffn_multiple);
        if (cfg->ffn == 0) cfg->ffn = model_llama_ffn(C, cfg->ffn_multiple); /* Llama: 2/3 of 4C, rounded up */
        if (cfg->ffn < 1 || cfg->ffn > (1 << 20))
            return err_set(err, ST_ERR_INPUT, "--ffn: expected 1..1048576, found %d", cfg->ffn);
        if (cfg->norm_eps == 0.0f) cfg->norm_eps = 1e-5f;
        if (!(cfg->norm_eps > 0.0f && cfg->norm_eps < 1.0f))
            return err_set(err, ST_ERR_INPUT, "--norm-eps: expected a value in (0, 1), found %g", cfg->norm_eps);
        if (cfg->rope_theta == 0.0f) cfg->rope_theta = 10000.0f;
        if (!(cfg->rope_theta > 1.0f))
            return err_set(err, ST_ERR_INPUT, "--rope-theta: expected a value above 1, found %g", cfg->rope_theta);
        Status st = rope_validate(cfg, err);
        if (st != ST_OK) return st;
        if (cfg->untied != 0 && cfg->untied != 1)
            return err_set(err, ST_ERR_INPUT, "--tie-embeddings: expected on or off, found %d", cfg->untied);
    }
    if (cfg->doc_mask != 0 && cfg->doc_mask != 1)
        return err_set(err, ST_ERR_INPUT, "--doc-mask: expected on or off, found %d", cfg->doc_mask);
    if (cfg->doc_mask && (cfg->doc_eot < 0 || cfg->doc_eot >= cfg->vocab))
        return err_set(err, ST_ERR_INPUT, "--doc-mask: expected the EOT id in 0..%d (the vocabulary), found %d",
                       cfg->vocab - 1, cfg->doc_eot);
    if (cfg->param == PARAM_SP) {
        if (cfg->mup_base_width != 0.0f || cfg->mup_input_alpha != 0.0f || cfg->mup_output_alpha != 0.0f)
            return err_set(err, ST_ERR_INPUT, "--param sp: expected no --mup-base-width, --mup-input-alpha or "
                           "--mup-output-alpha (they are muP's; use --param mup), found %g, %g, %g",
                           cfg->mup_base_width, cfg->mup_input_alpha, cfg->mup_output_alpha);
    } else if (cfg->param == PARAM_MUP) {
        if (!(cfg->mup_base_width >= 1.0f && cfg->mup_base_width <= 1048576.0f))
            return err_set(err, ST_ERR_INPUT, "--mup-base-width: expected the base model's width (channels, 1.."
                           "1048576) under --param mup, found %g", cfg->mup_base_width);
        if (cfg->mup_input_alpha == 0.0f) cfg->mup_input_alpha = 1.0f;
        if (cfg->mup_output_alpha == 0.0f) cfg->mup_output_alpha = 1.0f;
        if (!(isfinite(cfg->mup_input_alpha) && cfg->mup_input_alpha > 0.0f))
            return err_set(err, ST_ERR_INPUT, "--mup-input-alpha: expected a positive number, found %g",
                           cfg->mup_input_alpha);
        if (!(isfinite(cfg->mup_output_alpha) && cfg->mup_output_alpha > 0.0f))
            return err_set(err, ST_ERR_INPUT, "--mup-output-alpha: expected a positive number, found %g",
                           cfg->mup_output_alpha);
    } else {
        return err_set(err, ST_ERR_INPUT, "--param: expected sp or mup, found parameterization %d", cfg->param);
    }
    cfg->vocab_padded = (cfg->vocab + VOCAB_PAD_MULTIPLE - 1) / VOCAB_PAD_MULTIPLE * VOCAB_PAD_MULTIPLE;
    return ST_OK;
}

long long model_config_num_params(const ModelConfig *cfg) {
    long long L = cfg->n_layer, C = cfg->n_embd;
    if (cfg->arch == ARCH_LLAMA) {
        long long hs = C / cfg->n_head, KV = cfg->n_kv_head, F = cfg->ffn, V = cfg->vocab;
        long long block = C * (C + 2 * KV * hs) + C * C + 3 * C * F + 2 * C; /* q k v o, gate up down, 2 norms */
        return V * C * (cfg->untied ? 2 : 1) + L * block + C;
    }
    return (long long)cfg->vocab * C + (long long)cfg->max_seq * C + L * (12 * C * C + 13 * C) + 2 * C;
}

int model_llama_ffn(int C, int multiple) {
    long f = (8L * C + 2) / 3;
    return (int)((f + multiple - 1) / multiple * multiple);
}
