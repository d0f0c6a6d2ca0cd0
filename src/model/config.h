/* config.h — the model blueprint (GPT-2 or Llama architecture) and its named presets.
 *
 * Dimension letters used across the model code: L layers, NH heads, C channels, hs = C/NH head
 * size, V vocabulary (as the tokenizer sees it), Vp = V rounded up to a multiple of 64 (internal
 * padding for speed, never visible outside: padded logits are masked, padded rows stay zero),
 * maxT maximum sequence length, B micro-batch, T sequence length; Llama adds KV the key/value
 * heads (grouped-query attention: each KV head serves NH/KV query heads) and F the MLP width. */
#ifndef ST_MODEL_CONFIG_H
#define ST_MODEL_CONFIG_H

#include "core/status.h"

#define VOCAB_PAD_MULTIPLE 64

typedef struct {
    int n_layer;      /* L */
    int n_head;       /* NH */
    int n_embd;       /* C */
    int vocab;        /* V: ids 0..V-1 */
    int vocab_padded; /* Vp: derived by model_config_validate */
    int max_seq;      /* maxT */
    float dropout;    /* on embeddings, attention probabilities, residual branches; 0 = off */
    /* Architecture. Fields a positional initialiser leaves 0 get their defaults from
     * model_config_validate (GPT-2: KV = NH, F = 4C, tied head, eps 1e-5; Llama: F = 8C/3 rounded up
     * to ffn_multiple, eps 1e-5, theta 10000). */
    int arch;         /* ARCH_GPT2 (LayerNorm, learned positions, GELU MLP, biases, tied head) or
                         ARCH_LLAMA (RMSNorm, RoPE on Q and K, SwiGLU MLP, no biases, GQA) */
    int n_kv_head;    /* KV: divides NH (GPT-2: NH) */
    int ffn;          /* F: the MLP hidden width (GPT-2: 4C) */
    int ffn_multiple; /* Llama's default F is 8C/3 rounded up to a multiple of this (default 256) */
    int untied;       /* 1: the LM head has its own weight (lm_head, Llama's default); 0: it reads wte */
    float norm_eps;   /* RMSNorm epsilon (Llama; GPT-2's LayerNorm uses 1e-5) */
    float rope_theta; /* RoPE base (Llama) */
    /* RoPE frequency scaling (Llama; Hugging Face's rope_type, docs/llama.md). All 0 = ROPE_DEFAULT,
     * plain RoPE, computed exactly as before these fields existed. */
    int rope_type;               /* ROPE_DEFAULT, ROPE_LINEAR (inv_freq / factor) or ROPE_LLAMA3 */
    float rope_factor;           /* linear, llama3: factor (> 0); default: 0 */
    float rope_low_freq_factor;  /* llama3: low_freq_factor (> 0); else 0 */
    float rope_high_freq_factor; /* llama3: high_freq_factor (> low_freq_factor); else 0 */
    int rope_orig_max_seq;       /* llama3: original_max_position_embeddings (>= 1); else 0 */
    /* Parameterization (docs/mup.md). Under muP (Yang et al. 2022, the Adam table in its tied-
     * embedding-friendly form) with width multiplier m = C / mup_base_width: logits multiplied by
     * mup_output_alpha / m, the embedding output by mup_input_alpha, attention scores by 1/hs instead
     * of 1/sqrt(hs), hidden matrices initialised with variance / m and updated with the Adam learning
     * rate / m; embeddings, the output head, biases and norms unchanged. Standard (PARAM_SP): none of
     * it, and the three muP fields stay 0. */
    int param;              /* PARAM_SP or PARAM_MUP */
    float mup_base_width;   /* W0 (muP): the width at which muP equals the standard parameterization's
                               learning rate and init */
    float mup_input_alpha;  /* muP: embedding output multiplier (validate: 0 -> 1) */
    float mup_output_alpha; /* muP: logit multiplier before the 1/m (validate: 0 -> 1) */
    /* Document masking (--doc-mask; docs/doc-mask.md): in each row a document starts at the row's
     * start and after every doc_eot token (the EOT closes, and belongs to, the document before it);
     * attention never crosses a document start and positions restart at 0 there. 0: one document
     * per row (causal over the whole row), and doc_eot unused. How the model computes, so it is
     * recorded with the weights (config.json's "scaletrain" object) and the checkpoint's config. */
    int doc_mask;
    int doc_eot;            /* the EOT id, 0..vocab-1 (the shards' header) */
} ModelConfig;

enum { ARCH_GPT2 = 0, ARCH_LLAMA = 1 };
enum { PARAM_SP = 0, PARAM_MUP = 1 };
enum { ROPE_DEFAULT = 0, ROPE_LINEAR = 1, ROPE_LLAMA3 = 2 };
/* "default" / "linear" / "llama3" and back (-1: unknown name). */
const char *model_rope_type_name(int rope_type);
int model_rope_type_parse(const char *name);

/* The RoPE inverse frequencies of a validated Llama config, hs/2 doubles (hs = C/NH), as Hugging
 * Face's rope init functions define them, computed in double: default theta^(-2i/hs) (the same
 * doubles as rope_inv_freq); linear those / factor; llama3 (_compute_llama3_parameters): with
 * wavelen = 2π/f, low = orig/low_freq_factor, high = orig/high_freq_factor: f/factor where
 * wavelen > low, f where wavelen < high, and between them (1 − s)·f/factor + s·f with
 * s = (orig/wavelen − low_freq_factor)/(high_freq_factor − low_freq_factor). */
void model_rope_inv_freq(const ModelConfig *cfg, double *inv_freq);
/* "sp" / "mup" and back (-1: unknown name). */
const char *model_param_name(int param);
int model_param_parse(const char *name);

/* The multipliers the forward applies (all 1, and 1/sqrt(hs), under the standard
 * parameterization): m = C / W0; the hidden matrices' learning-rate and init-variance factor 1/m;
 * logits × model_logit_mult; embedding output × model_input_mult; attention scores × model_attn_scale. */
double model_width_mult(const ModelConfig *cfg);
float model_logit_mult(const ModelConfig *cfg);
float model_input_mult(const ModelConfig *cfg);
float model_attn_scale(const ModelConfig *cfg);
/* "gpt2" / "llama" and back (-1: unknown name). */
const char *model_arch_name(int arch);
int model_arch_parse(const char *name);

/* Fills cfg from a preset name: "d2","d4","d6","d12",... (dN: N layers, N heads, 64·N channels),
 * "gpt2-124m" (12/12/768), "gpt2-350m" (24/16/1024), "gpt2-774m" (36/20/1280), "gpt2-1558m"
 * (48/25/1600): arch GPT-2, vocab and max_seq left as they are. Llama presets set arch ARCH_LLAMA:
 * "llama-dN" (N layers, N heads, max(1, N/2) KV heads, 64·N channels, F derived; vocab and max_seq
 * left as they are) and the published shapes with their vocabulary, context and theta: "llama-7b"
 * (32 layers, 32/32 heads, 4096, F 11008, V 32000, 4096), "llama-13b" (40, 40/40, 5120, 13824),
 * "llama-70b" (80, 64/8, 8192, 28672), "llama3-8b" (32, 32/8, 4096, 14336, V 128256, 8192,
 * theta 500000), and with llama3 RoPE scaling (low 1, high 4, original 8192 positions; V 128256,
 * 131072 positions, theta 500000): "llama3.1-8b" (32, 32/8, 4096, 14336, factor 8, untied),
 * "llama3.2-1b" (16, 32/8, 2048, 8192, factor 32, tied), "llama3.2-3b" (28, 24/8, 3072, 8192,
 * factor 32, tied), "llama-405b" (126, 128/8, 16384, 53248, factor 8, untied). A published shape
 * sets the RoPE type and head tying too. Names compare case-insensitively; "gpt2-1.5b" is
 * gpt2-1558m. ST_ERR_INPUT on an unknown name. The one preset table of train, plan and sweep. */
Status model_config_preset(ModelConfig *cfg, const char *name, Err *err);

/* The preset names as one line for --help and errors: "d1..d64, gpt2-124m, ...". */
const char *model_preset_names(void);

/* Llama's default MLP width for C channels: 8C/3 rounded up, then up to a multiple of `multiple`
 * (ffn_multiple; 256 by default): 4096 → 11008. The one formula model_config_validate and plan use. */
int model_llama_ffn(int C, int multiple);

/* Checks ranges and divisibility (heads divide channels, ...) and derives vocab_padded.
 * Messages name the flag: "--heads 5 does not divide --channels 384". */
Status model_config_validate(ModelConfig *cfg, Err *err);

/* Number of parameters (unpadded vocabulary; a tied head counted once, an untied one as V·C more). */
long long model_config_num_params(const ModelConfig *cfg);

#endif
