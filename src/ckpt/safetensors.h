/* safetensors.h — model weights as Hugging Face GPT-2 safetensors (+ config.json).
 *
 * Tensor names and shapes are Hugging Face GPT-2's: wte.weight (V, C) with the unpadded
 * vocabulary, wpe.weight, h.{l}.ln_1.{weight,bias}, h.{l}.attn.c_attn.{weight,bias} with the
 * Conv1D layout (in, out) = (C, 3C), h.{l}.attn.c_proj, h.{l}.ln_2, h.{l}.mlp.c_fc (C, 4C),
 * h.{l}.mlp.c_proj (4C, C), ln_f. Our (out, in) weights are transposed on the way in and out.
 * Byte layout of the file: docs/formats.md. Writes are crash-safe (temporary, fsync, rename). */
#ifndef ST_CKPT_SAFETENSORS_H
#define ST_CKPT_SAFETENSORS_H

#include "core/status.h"
#include "model/gpt.h"

/* Writes dir/model.safetensors and dir/config.json (dir is created if missing). `tokenizer` is
 * recorded in config.json under "scaletrain" so `sample` can decode. */
Status st_save_hf(const Gpt *g, const char *dir, const char *tokenizer, Err *err);

/* Reads the model config (and tokenizer spec, may be NULL) from dir/config.json. */
Status st_load_hf_config(const char *dir, ModelConfig *cfg, char *tokenizer, size_t tokenizer_len, Err *err);

/* Loads dir/model.safetensors into g's parameters (shapes must match g's config). Accepts names
 * with or without the "transformer." prefix. */
Status st_load_hf_weights(Gpt *g, const char *dir, Err *err);

#endif
