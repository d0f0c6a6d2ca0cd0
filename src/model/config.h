/* config.h — the model blueprint (GPT-2 architecture) and its named presets.
 *
 * Dimension letters used across the model code: L layers, NH heads, C channels, hs = C/NH head
 * size, V vocabulary (as the tokenizer sees it), Vp = V rounded up to a multiple of 64 (internal
 * padding for speed, never visible outside: padded logits are masked, padded rows stay zero),
 * maxT maximum sequence length, B micro-batch, T sequence length. */
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
} ModelConfig;

/* Fills cfg from a preset name: "d2","d4","d6","d12",... (dN: N layers, N heads, 64·N channels),
 * "gpt2-124m" (12/12/768), "gpt2-350m" (24/16/1024), "gpt2-774m" (36/20/1280), "gpt2-1558m"
 * (48/25/1600). vocab and max_seq are left as they are. ST_ERR_INPUT on an unknown name. */
Status model_config_preset(ModelConfig *cfg, const char *name, Err *err);

/* Checks ranges and divisibility (heads divide channels, ...) and derives vocab_padded.
 * Messages name the flag: "--heads 5 does not divide --channels 384". */
Status model_config_validate(ModelConfig *cfg, Err *err);

/* Number of parameters as GPT-2 counts them (unpadded vocabulary, tied head counted once). */
long long model_config_num_params(const ModelConfig *cfg);

#endif
