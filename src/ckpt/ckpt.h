/* ckpt.h — training checkpoints: crash-safe save, verified load, resolve/fallback, retention,
 * config-field kinds, asynchronous save, weight import (HF safetensors, llm.c) and export.
 *
 * A checkpoint is a directory CKPT_DIR/step_%08ld/ (byte-level specification:
 * docs/checkpoint.md):
 *   model.safetensors      fp32 weights, Hugging Face GPT-2 names and shapes (unpadded vocabulary)
 *   config.json            Hugging Face GPT-2 config (+ "scaletrain": {"tokenizer"})
 *   optimizer.safetensors  per tensor name, unpadded, our (out, in) orientation:
 *                          "m.<name>", "v.<name>", "master.<name>" (e.g. "m.h.3.qkvw" (3C, C))
 *   state.json             step, tokens, schedule, RNG, loader, loss scaler, parallel layout, the
 *                          full config, size + xxHash3-64 of every other file, and its own
 *                          checksum as the last member
 * and CKPT_DIR/latest holds the name of the newest completed checkpoint ("step_00001000\n").
 *
 * Save: everything is written into CKPT_DIR/.tmp-step_%08ld/, each file fsynced, the directory
 * fsynced, renamed to step_%08ld (atomically), CKPT_DIR fsynced, then `latest` replaced by
 * temp + fsync + rename, then old checkpoints are pruned. A process killed at any instant leaves
 * every previously completed checkpoint intact. Only one process (rank 0) writes a CKPT_DIR.
 *
 * Fault injection for tests (CkptOptions.faults, core/fault.h; the CLI fills it from
 * ST_CKPT_FAIL_AT=<stage>[:exit|:stop|:slow]): ckpt_fail_stage aborts a save at that stage (see
 * CKPT_STAGES in ckpt.c and docs/checkpoint.md): mode 0 → the save returns ST_ERR_RUNTIME;
 * 1 → _exit(3); 2 → raise(SIGSTOP) (a parent then kill -9s the stopped process); 3 → a 1 s sleep.
 *
 * Library code: never prints or exits (except the fault hook above); errors name the file. */
#ifndef ST_CKPT_CKPT_H
#define ST_CKPT_CKPT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "core/fault.h"
#include "core/mem.h"
#include "core/status.h"
#include "data/loader.h"
#include "model/gpt.h"

#define CKPT_MAX_NAMED 16
#define CKPT_NAME_LEN 48

typedef struct {
    char name[CKPT_NAME_LEN];
    uint64_t value;
} CkptU64;

typedef struct {
    char name[CKPT_NAME_LEN];
    double value;
} CkptF64;

/* Everything in state.json except checksums. On save it is read only; on load it is filled. */
typedef struct {
    long step;               /* optimizer steps completed (names the directory) */
    uint64_t tokens_seen;    /* training tokens consumed by the whole run */
    long sched_step;         /* schedule position: the LR of the next step is sched_lr(s, sched_step + 1) */
    LoaderState loader;      /* data-order seed and samples consumed */
    char optimizer[16];      /* "adamw" | "adam" | "sgd" | "lion" (informative; config has it too) */
    long optim_step;         /* optimizer step count (bias correction) */
    int dp, tp, pp, zero;    /* parallel layout the checkpoint was written with (0 → written as 1/1/1/0) */
    int nrng;                /* named RNG seeds and counters, e.g. {"init_seed", 1337} */
    CkptU64 rng[CKPT_MAX_NAMED];
    int nscaler;             /* loss-scaler state, e.g. {"scale", 65536}; 0 = no scaler */
    CkptF64 scaler[CKPT_MAX_NAMED];
    cJSON *extra;            /* caller's extra state (e.g. the health detectors), saved verbatim as
                                "extra" in state.json. Save: borrowed (may be NULL). Load: owned. */
    cJSON *config;           /* full resolved config. Save: borrowed (may be NULL). Load: owned,
                                released by ckpt_meta_free. */
} CkptMeta;

/* Adds or replaces a named value (returns 0, or -1 when CKPT_MAX_NAMED are used). */
int ckpt_meta_set_rng(CkptMeta *m, const char *name, uint64_t value);
int ckpt_meta_set_scaler(CkptMeta *m, const char *name, double value);
/* Looks a named value up: 1 found, 0 absent (*value untouched). */
int ckpt_meta_rng(const CkptMeta *m, const char *name, uint64_t *value);
int ckpt_meta_scaler(const CkptMeta *m, const char *name, double *value);
/* Frees meta->config; safe on a zeroed meta. */
void ckpt_meta_free(CkptMeta *m);

/* Optimizer buffers in the weights' ParamLayout (layout.total floats each); NULL when absent. */
typedef struct {
    float *m;      /* first moment (AdamW/Adam/Lion/SGD momentum) */
    float *v;      /* second moment (Adam family) */
    float *master; /* fp32 master weights when the working copy is lower precision */
    /* Optimizer state outside the layout (Shampoo's blocks, docs/optimizers.md): one 1-D fp32 tensor
     * `extra_name` of extra_n floats, saved in CKPT_EXTRA_FILE (listed and checksummed in
     * state.json like every file) and read back with ckpt_read_extra; extra NULL: none. Saves only
     * (ckpt_save; the asynchronous save refuses it). */
    const float *extra;
    size_t extra_n;
    const char *extra_name;
} CkptOptState;

#define CKPT_EXTRA_FILE "optimizer-extra.safetensors"

/* Reads the 1-D tensor `name` of n floats from CKPT_EXTRA_FILE of a checkpoint (either format),
 * verified against state.json. ST_ERR_INPUT naming the file when the checkpoint has no such file or
 * tensor (its optimizer named) or the tensor holds another count. */
Status ckpt_read_extra(const char *ckpt_path, const char *name, float *buf, size_t n, Err *err);

typedef struct {
    const char *dir;       /* --ckpt-dir (created if missing) */
    int keep_last;         /* K: keep the newest K checkpoints (<= 0: keep all) */
    int keep_every;        /* M: also keep every checkpoint whose step % M == 0 forever (<= 0: none) */
    const char *tokenizer; /* recorded in config.json for `sample` (NULL = "") */
    /* Optional progress of a save: bytes written so far and the expected total (may be NULL). */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
    Faults faults;         /* test-only: ckpt_fail_* (a save torn at a stage), ckpt_async_sync (all zero: none) */
} CkptOptions;

CkptOptions ckpt_default_options(void); /* dir NULL, keep_last 3, keep_every 0 */

typedef struct {
    char path[4096];   /* the new checkpoint directory */
    size_t bytes;      /* bytes written (all files) */
    double ms_copy;    /* async: copying the state into staging (0 for a synchronous save) */
    double ms_write;   /* writing, fsyncing, renaming, latest pointer */
    double ms_prune;   /* retention */
    int pruned;        /* checkpoints removed */
} CkptSaveInfo;

/* ---- save / load ---- */

/* Writes checkpoint meta->step of the weights w, the optimizer buffers and meta under o->dir,
 * then prunes (retention). info may be NULL. Errors: ST_ERR_RUNTIME naming the file (the previous
 * checkpoints stay valid; a leftover .tmp-* directory is removed by the next save). */
Status ckpt_save(const GptWeights *w, const CkptOptState *opt, const CkptMeta *meta, const CkptOptions *o,
                 CkptSaveInfo *info, Err *err);

/* Reads and verifies state.json of a checkpoint directory (its own checksum) into meta (call
 * ckpt_meta_free after). Use it before building the model to check the config. */
Status ckpt_read_meta(const char *ckpt_path, CkptMeta *meta, Err *err);

/* Verifies every file of a checkpoint (size and xxHash3-64 against state.json). ST_ERR_INPUT
 * names the file and the mismatch ("step_00000100/model.safetensors: xxh3 expected ..., found
 * ..."; "... expected 1234 bytes, found 1000 (truncated)"). */
Status ckpt_verify(const char *ckpt_path, Err *err);

/* Verifies and loads a checkpoint into the weights w (w's config must match the checkpoint's shapes) and the
 * non-NULL buffers of opt (each must be present in optimizer.safetensors); meta (may be NULL)
 * receives state.json. Every loaded buffer is zeroed first, so padding stays zero and a resumed
 * state is bit-identical to the saved one. */
Status ckpt_load(const char *ckpt_path, GptWeights *w, const CkptOptState *opt, CkptMeta *meta, Err *err);
/* The same, reporting bytes read and verified so far against the total of the two data files
 * (model and optimizer, sizes from state.json) after every chunk of up to 32 MiB. */
typedef void (*CkptProgressFn)(void *ctx, uint64_t done, uint64_t total);
Status ckpt_load_progress(const char *ckpt_path, GptWeights *w, const CkptOptState *opt, CkptMeta *meta,
                          CkptProgressFn progress, void *progress_ctx, Err *err);

/* Model weights alone from any folder into w: our sharded checkpoint (ckpt_shard_load, assembled
 * from its rank files), else st_load_hf_weights (a single-process checkpoint, a Hugging Face
 * folder, one file or sharded). No optimizer state, no state.json. Errors name the folder and file. */
Status ckpt_load_weights(GptWeights *w, const char *dir, Err *err);

/* 1 if dir is a plain weights folder (model.safetensors without a checkpoint's state.json, e.g.
 * `train --out`), 0 otherwise. */
int ckpt_is_weights_folder(const char *dir);

/* 1 if dir holds checkpoints as a --ckpt-dir does (`latest` or a step_* entry), the first one seen
 * named into found; 0 when it holds none or cannot be read. */
int ckpt_dir_holds_checkpoints(const char *dir, char *found, size_t cap);

/* Picks the checkpoint to resume from. spec "auto": the newest checkpoint directory under dir
 * that verifies; if newer ones are corrupt they are skipped and note says which and why. No
 * checkpoint at all: ST_OK with out[0] == '\0' (start from scratch). All corrupt: ST_ERR_INPUT.
 * spec PATH: a checkpoint directory (verified; no fallback) or a CKPT_DIR (treated as auto).
 * A checkpoint directory given as dir with spec "auto" counts as spec PATH. spec NULL = "auto".
 * note (may be NULL) receives a one-line human note ("" if nothing to say). */
/* The same without reading the checkpoints' data: each candidate's state.json verifies (its own
 * checksum) and every file it lists is there with its recorded size; the loader then verifies the
 * contents as it reads them (one pass over the data, where ckpt_resolve + a load read it twice).
 * Only checkpoints of steps < before_step count (LONG_MAX: all): a caller whose load of step S
 * failed asks again with before_step S. */
Status ckpt_resolve_unread(const char *dir, const char *spec, long before_step, char *out, size_t out_len, char *note,
                           size_t note_len, Err *err);
/* The structural check of ckpt_resolve_unread (ST_ERR_INPUT naming the file that fails it). */
Status ckpt_check_structure(const char *ckpt_path, Err *err);

Status ckpt_resolve(const char *dir, const char *spec, char *out, size_t out_len, char *note, size_t note_len,
                    Err *err);

/* Applies retention to dir now (ckpt_save calls it after each successful save): keeps the newest
 * keep_last, every keep_every-th step and the one `latest` names; removes the rest. */
Status ckpt_prune(const char *dir, int keep_last, int keep_every, int *removed, Err *err);

/* ---- config-field kinds (DESIGN.md §5) ---- */

typedef enum { CKPT_FIELD_MODEL, CKPT_FIELD_TRAJECTORY, CKPT_FIELD_FREE } CkptFieldKind;

/* Kind of a config field by its dotted path in the trainer's config_json() ("model.layers", "lr",
 * "threads"); unknown fields are trajectory (a silent fork is the worse failure). */
CkptFieldKind ckpt_field_kind(const char *path);

/* Compares the saved config with the current one. Model field changed → ST_ERR_INPUT naming the
 * field and both values. Trajectory field changed (including global_batch = micro_batch ×
 * grad_accum × dp) → ST_ERR_INPUT unless its name (or "all") is in overrides. report (may be
 * NULL) receives one line per accepted change ("override lr: 0.0006 -> 0.0003; free threads: 2
 * -> 4"), "" if nothing changed. */
Status ckpt_check_config(const cJSON *saved, const cJSON *current, const char *const *overrides, int noverrides,
                         char *report, size_t len, Err *err);

/* Each name of --override must be "all", "global_batch" or a trajectory field of the saved or the
 * current config: a typo ("lrr") used to be accepted and never reported. ST_ERR_INPUT naming the
 * first other name and listing the current config's trajectory fields. */
Status ckpt_check_override_names(const cJSON *saved, const cJSON *current, const char *const *overrides,
                                 int noverrides, Err *err);

/* ---- asynchronous save ---- */

typedef struct CkptAsync CkptAsync;

/* Creates a saver whose staging buffers (MEM_CKPT_STAGING in mem, may be NULL) are sized for w's
 * layout and the buffers opt has. They are allocated and their pages touched here, before
 * training, so that no save (the first included) pays page faults inside a step. */
Status ckpt_async_init(CkptAsync **a, const GptWeights *w, const CkptOptState *opt, MemStats *mem, Err *err);

/* Waits for the previous save (returning its error if it failed), copies params, opt and meta
 * into staging (info->ms_copy is the time training is blocked) and starts writing them from a
 * background thread; training may modify w and opt as soon as this returns. */
Status ckpt_async_save(CkptAsync *a, const GptWeights *w, const CkptOptState *opt, const CkptMeta *meta,
                       const CkptOptions *o, Err *err);

/* How the saver copies each buffer out of the weights' memory: by default memcpy (host memory); a
 * device run's weights and moments are not host-addressable, so the trainer sets its backend's copy
 * to the host (its errors included: fn returns 0 on success, else fills err). */
typedef int (*CkptCopyOut)(void *ctx, float *dst, const float *src, size_t n, Err *err);
void ckpt_async_set_copy(CkptAsync *a, CkptCopyOut fn, void *ctx);

/* 1 while a write is in flight. */
int ckpt_async_busy(CkptAsync *a);

/* Waits for the write in flight (if any); returns its status and fills info (may be NULL) with
 * its timings. ST_OK with info->path "" if nothing was in flight. */
Status ckpt_async_wait(CkptAsync *a, CkptSaveInfo *info, Err *err);

/* Waits for the write in flight, frees the staging buffers; safe on NULL. */
void ckpt_async_free(CkptAsync *a);

/* ---- weights import / export ---- */

/* Reads the model shape of an --init-from source without loading it: a directory (config.json),
 * a .safetensors file (config.json beside it) or an llm.c .bin (header). vocab_padded derived. */
Status ckpt_peek_config(const char *path, ModelConfig *cfg, Err *err);

/* Loads weights into w from a directory holding model.safetensors, a .safetensors file, or an
 * llm.c checkpoint (magic 20240326, version 3 = fp32). Shapes are checked against w's config:
 * "gpt2_124M.bin: layers: file has 12, model has 6", and so is the config.json beside Hugging
 * Face weights when there is one (the head count is in no shape). */
Status ckpt_init_from(GptWeights *w, const char *path, Err *err);

/* Writes the weights w as an llm.c fp32 checkpoint (header of 256 int32, then llm.c's order). */
Status ckpt_export_llmc(const GptWeights *w, const char *path, Err *err);

#endif
