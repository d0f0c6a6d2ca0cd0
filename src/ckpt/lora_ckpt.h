/* lora_ckpt.h — LoRA files (docs/lora.md, docs/formats.md "LoRA"):
 *
 *   PEFT adapter folder   adapter_model.safetensors (F32, PEFT's tensor names, e.g.
 *                         base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight (r, in),
 *                         ...lora_B.weight (out, r)) + adapter_config.json (peft_type LORA, r,
 *                         lora_alpha, lora_dropout, target_modules, fan_in_fan_out, task_type
 *                         CAUSAL_LM, base_model_name_or_path). What `export --adapter` and
 *                         `train --lora-rank ... --out` write, and what PEFT's from_pretrained reads.
 *   LoRA checkpoint       ckpt_dir/step_NNNNNNNN/ holding the adapter folder's two files, config.json
 *                         (the base model's Hugging Face config), optimizer.safetensors (AdamW's
 *                         exp_avg.<name>, exp_avg_sq.<name> per adapter tensor, F32) and state.json
 *                         (format "scaletrain-lora" version 1: step, loader state, the LoRA config,
 *                         the base reference and every file's XXH3-64). The base weights are NOT
 *                         saved: state.json references them (the --init-from path, or the seed of a
 *                         random base) with the XXH3-64 of their fp32 values, which resume and export
 *                         recompute and compare. Written as step_N.tmp, every file fsynced, renamed,
 *                         the parent fsynced, then `latest` ("step_NNNNNNNN\n") replaced atomically. */
#ifndef ST_CKPT_LORA_CKPT_H
#define ST_CKPT_LORA_CKPT_H

#include <stdint.h>

#include "core/status.h"
#include "data/loader.h"
#include "model/config.h"
#include "model/lora.h"

/* What state.json holds beside the LoRA config. */
typedef struct {
    long step;               /* optimizer steps done */
    LoaderState loader;      /* the training loader's state after them */
    char init_from[1024];    /* the base: an --init-from path, "" = initialised from base_seed */
    uint64_t base_seed;      /* the initialisation seed of a random base */
    uint64_t base_hash;      /* XXH3-64 of the base's fp32 parameters (layout order, padding included) */
    char tokenizer[256];     /* recorded in config.json */
    struct cJSON *config;    /* the run's trainer config (events_config_json) as state.json records it,
                                for the resume's trajectory check; NULL: none (written before
                                2026-11-29, or not given to save). read_meta allocates it:
                                ckpt_lora_meta_free */
} LoraCkptMeta;
void ckpt_lora_meta_free(LoraCkptMeta *meta);

/* Writes dir/adapter_model.safetensors and dir/adapter_config.json (each atomically) for the
 * adapters params (ll->total floats). base: base_model_name_or_path ("" allowed). */
Status ckpt_lora_write_adapter(const char *dir, const LoraLayout *ll, const float *params, const char *base, Err *err);
/* Reads dir/adapter_model.safetensors into params (ll->total floats; padding zeroed): every
 * tensor of ll by PEFT name and shape; an extra or a missing tensor is an error naming it. */
Status ckpt_lora_read_adapter(const char *dir, const LoraLayout *ll, float *params, Err *err);

/* Saves step meta->step under ckpt_dir (see above); out (may be NULL) receives the directory. */
Status ckpt_lora_save(const char *ckpt_dir, const ModelConfig *cfg, const LoraLayout *ll, const LoraCkptMeta *meta,
                      const float *params, const float *m, const float *v, char *out, size_t out_len, Err *err);
/* spec "auto" (or "") with ckpt_dir: the checkpoint `latest` names, or without `latest` the newest
 * step_N holding a LoRA state.json (out "" when there is none: a fresh start); when `latest` names
 * something that is not a LoRA checkpoint the error says what it is and out keeps its path (so
 * that --resume auto can fall back to an older one). Otherwise spec itself, which must be a LoRA
 * checkpoint directory (the error says what it is instead). */
Status ckpt_lora_resolve(const char *ckpt_dir, const char *spec, char *out, size_t out_len, Err *err);
/* Reads path's state.json (checksums of its files verified) and config.json: the meta, the LoRA
 * config and the base model config. Every value is checked as the flags would be (version 1 or 2,
 * step, rank within the narrowest targeted layer, alpha, dropout, targets, seeds as decimal digits):
 * ST_ERR_INPUT naming the file and the member. */
Status ckpt_lora_read_meta(const char *path, LoraCkptMeta *meta, LoraConfig *lc, ModelConfig *cfg, Err *err);
/* Loads the adapters and (m, v not NULL) the moments of checkpoint path for layout ll. */
Status ckpt_lora_load(const char *path, const LoraLayout *ll, float *params, float *m, float *v, Err *err);
/* The steps of the step_N directories under ckpt_dir that hold a LoRA checkpoint's state.json,
 * the newest max, newest first: --resume auto's fallbacks when the newest does not verify. */
int ckpt_lora_steps(const char *ckpt_dir, long *steps, int max);
/* 1 if dir holds a LoRA checkpoint's state.json ("format": "scaletrain-lora"). */
int ckpt_lora_is_checkpoint(const char *dir);

/* A command's CKPT argument as a LoRA checkpoint: arg itself, or the one a --ckpt-dir's `latest`
 * names. 1 with its path in out, or 0 (another kind of folder, or nothing readable). */
int ckpt_lora_locate(const char *arg, char *out, size_t out_len);

#endif
