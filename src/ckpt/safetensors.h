/* safetensors.h — the safetensors container (write/parse) and model weights as Hugging Face
 * GPT-2 or Llama (LlamaForCausalLM) safetensors (+ config.json; docs/llama.md for Llama's names).
 *
 * Tensor names and shapes are Hugging Face GPT-2's: wte.weight (V, C) with the unpadded
 * vocabulary, wpe.weight, h.{l}.ln_1.{weight,bias}, h.{l}.attn.c_attn.{weight,bias} with the
 * Conv1D layout (in, out) = (C, 3C), h.{l}.attn.c_proj, h.{l}.ln_2, h.{l}.mlp.c_fc (C, 4C),
 * h.{l}.mlp.c_proj (4C, C), ln_f. Our (out, in) weights are transposed on the way in and out.
 * Byte layout of the file: docs/checkpoint.md. st_save_hf is crash-safe (temporary, fsync,
 * rename); the checkpoint module writes through st_write with its own hashing writer.
 *
 * The parser (st_parse) treats every byte of the file as untrusted: any header, shape or offset
 * that does not fit the file is an ST_ERR_INPUT naming the file, never a crash. */
#ifndef ST_CKPT_SAFETENSORS_H
#define ST_CKPT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "model/gpt.h"

/* ---- model weights as a Hugging Face GPT-2 folder (stable API) ---- */

/* Writes dir/model.safetensors and dir/config.json (dir is created if missing). `tokenizer` is
 * recorded in config.json under "scaletrain" so `sample` can decode. */
Status st_save_hf(const GptWeights *w, const char *dir, const char *tokenizer, Err *err);
/* The same with the tensors stored as BF16 (bf16 = 1; F32 otherwise) and split into files of at most
 * max_shard_bytes of tensor data each (0: no limit): more than one file gives Hugging Face's sharded
 * layout, model-0000k-of-0000n.safetensors and model.safetensors.index.json ("metadata": total_size,
 * "weight_map": tensor → file). A tensor larger than the limit gets a file of its own. */
Status st_save_hf_opts(const GptWeights *w, const char *dir, const char *tokenizer, int bf16, uint64_t max_shard_bytes,
                       Err *err);

/* Reads the model config (and tokenizer spec, may be NULL) from dir/config.json. Fields that would
 * change the computation without changing a shape (activation_function, layer_norm_epsilon,
 * scale_attn_*, tie_word_embeddings, n_inner, model_type) must be GPT-2's when present. */
Status st_load_hf_config(const char *dir, ModelConfig *cfg, char *tokenizer, size_t tokenizer_len, Err *err);

/* Loads dir/model.safetensors, or the files of dir/model.safetensors.index.json, into w's
 * parameters (shapes must match w's config; F32, BF16 or F16 tensors). Accepts names with or
 * without the "transformer." prefix. Our sharded checkpoints are ckpt_load_weights' (ckpt.h): this
 * layer sits below both checkpoint formats and knows neither. */
Status st_load_hf_weights(GptWeights *w, const char *dir, Err *err);

/* Same for a safetensors file given by its path. */
Status st_load_hf_file(GptWeights *w, const char *path, Err *err);

/* ---- the container ---- */

#define ST_MAX_DIMS 8

/* One tensor to write, F32 or (bf16 = 1) BF16 rounded to nearest even. The file shape is
 * shape[0..ndim); data holds the fp32 values in the file's row-major order, or, with transpose (2-D
 * only), in the transposed order (ours (out, in) → file (in, out)). */
typedef struct {
    char name[128];
    int ndim;
    int shape[2];
    const float *data;
    int transpose;
    int bf16;
} StTensorOut;

/* Sink for the bytes of a file; returns a status (and fills err) on failure. */
typedef Status (*StWriteFn)(void *ctx, const void *p, size_t n, Err *err);

/* Writes the whole file (8-byte header length, JSON header padded with spaces to a multiple of
 * 8, tensor data in the order given) through w. metadata: NULL or pairs of strings (key, value)
 * ending with a NULL key, recorded in "__metadata__" (always with "format": "pt"). */
Status st_write(const StTensorOut *t, int n, const char *const *metadata, StWriteFn w, void *ctx, Err *err);

/* One tensor of a parsed file. */
typedef struct {
    char name[128];
    char dtype[16];
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t begin, end; /* byte range in the data section */
} StEntry;

typedef struct {
    char path[1024];           /* for messages */
    const unsigned char *data; /* data section (borrowed from the buffer given to st_parse) */
    size_t data_len;
    StEntry *entries;
    int n;
} StFile;

/* Parses and validates the header of a safetensors image buf[0..len) (borrowed; must outlive f):
 * header length within the file, a JSON object, every tensor with a dtype string, a shape of
 * non-negative integers and data offsets inside the data section matching the shape's size
 * (for the dtypes whose size is known). Errors name path and the first problem. */
Status st_parse(StFile *f, const char *path, const void *buf, size_t len, Err *err);
void st_file_free(StFile *f);

/* The entry named name, or "transformer." + name; NULL if absent. */
const StEntry *st_find(const StFile *f, const char *name);

/* Copies F32 tensor name with the expected shape (shape[0..ndim)) into dst; with transpose
 * (2-D) dst receives the transpose (file (a, b) → dst (b, a)). Errors: missing tensor, dtype,
 * shape (expected and found). */
Status st_read_f32(const StFile *f, const char *name, int ndim, const int *shape, int transpose, float *dst,
                   Err *err);

/* ---- Hugging Face GPT-2 mapping on raw buffers (used by the checkpoint module) ---- */

/* Writes the model.safetensors image of the flat params buffer in layout pl through w. */
Status st_hf_write_model(const ParamLayout *pl, const float *params, StWriteFn w, void *ctx, Err *err);

/* Fills params (pl->total floats; gaps and padded vocabulary rows set to 0) from a parsed
 * model.safetensors; shapes must match pl. Besides the parameters the file may hold only the
 * buffers Hugging Face keeps (h.{l}.attn.bias, h.{l}.attn.masked_bias: ignored) and a tied
 * lm_head.weight (equal to wte); a missing or any other tensor is an error naming it. */
Status st_hf_read_model(const StFile *f, const ParamLayout *pl, float *params, Err *err);
/* The same over the files of a sharded Hugging Face folder: each tensor read from the file that
 * holds it; every tensor of every file must be used (or one known to ignore). */
Status st_hf_read_files(const StFile *files, int nfiles, const ParamLayout *pl, float *params, Err *err);

/* ST_OK when every parameter of the layout (padding included) is finite; otherwise ST_ERR_INPUT
 * naming `what` (the weights' path), the first tensor holding a NaN or an infinity by its Hugging
 * Face name, and how many of its values are not finite. Weights that load are not checked for this:
 * eval and sample call it, as their results from such weights mean nothing (a NaN loss, token 0). */
Status st_check_finite(const ParamLayout *pl, const float *params, const char *what, Err *err);

/* config.json text for cfg (what st_save_hf writes); returns its length (truncated to len-1). */
size_t st_hf_config_text(const ModelConfig *cfg, const char *tokenizer, char *buf, size_t len);

#endif
