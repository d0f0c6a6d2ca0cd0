/* ckpt_internal.h — what the checkpoint sources share (not part of the API).
 *
 * A snapshot is the state one save writes: a layout and flat buffers in it, whether they are
 * the live training buffers (synchronous save) or staging copies (asynchronous save). The file
 * helpers below are ckpt.c's crash-safe writing, hashing and verifying, which the sharded format
 * (shard.c) reuses so that both formats fail, fsync and check the same way. */
#ifndef ST_CKPT_INTERNAL_H
#define ST_CKPT_INTERNAL_H

#include "ckpt/ckpt.h"
#include "ckpt/safetensors.h"

/* state.json "format" of the two layouts (docs/checkpoint.md). */
#define CKPT_FORMAT_SINGLE "scaletrain-checkpoint"
#define CKPT_FORMAT_SHARDED "scaletrain-checkpoint-sharded"
#define CKPT_MANIFEST "manifest.json"

typedef struct {
    const ParamLayout *pl;
    const float *params, *m, *v, *master; /* pl->total floats each; m, v, master may be NULL */
    const float *extra;                   /* CkptOptState's extra tensor (NULL: none) */
    size_t extra_n;
    const char *extra_name;
} CkptSnap;

/* Producer of CKPT_EXTRA_FILE: arg is a CkptSnap whose extra is set. */
Status ckpt_extra_producer(const void *arg, StWriteFn w, void *ctx, Err *err);

/* The whole save (write, rename, latest, prune) of a snapshot; info may be NULL. */
Status ckpt_save_snap(const CkptSnap *s, const CkptMeta *meta, const CkptOptions *o, CkptSaveInfo *info, Err *err);

/* Deep copy of meta (config duplicated, owned by dst). */
int ckpt_meta_copy(CkptMeta *dst, const CkptMeta *src);

/* ---- fault injection (Faults.ckpt_fail_stage, ckpt_fail_mode; core/fault.h) ---- */
typedef struct {
    char stage[32]; /* "" = no fault */
    int mode;       /* 0 return an error, 1 _exit(3), 2 raise(SIGSTOP), 3 sleep slow_ms and go on (a slow disk) */
    int slow_ms;    /* mode 3's milliseconds (1000 unless `slowN` or a test sets Faults.ckpt_slow_ms) */
} Fault;

/* f from src's ckpt_fail_stage and ckpt_fail_mode (src NULL: no fault); ST_ERR_INPUT for a stage
 * that is not one of CKPT_STAGES. */
Status ckpt_fault_parse(Fault *f, const Faults *src, Err *err);
/* ST_OK unless f names stage (then: an error, _exit, SIGSTOP or a 1 s sleep, by f->mode). */
Status ckpt_fault_hit(const Fault *f, const char *stage, Err *err);

/* ---- files ---- */

/* Recorded size and hash (XXH3-64) of one file. */
typedef struct {
    size_t bytes;
    uint64_t xxh3;
} FileSum;

/* Streams a file's bytes into the writer it is given. */
typedef Status (*Producer)(const void *arg, StWriteFn w, void *ctx, Err *err);

/* Creates dir/name, streams prod's bytes into it (hashing them), fsyncs and closes it; the fault
 * `stage` (NULL: none) fires after fault_after writes; o's progress callback (o may be NULL) sees
 * *done of total. sum receives the size and hash. */
Status ckpt_write_file(const char *dir, const char *name, Producer prod, const void *arg, const Fault *fault,
                       const char *stage, int fault_after, const CkptOptions *o, uint64_t *done, uint64_t total,
                       FileSum *sum, Err *err);
Status ckpt_fsync_dir(const char *dir, Err *err);
int ckpt_rm_tree(const char *path); /* rm -rf; 0 ok (or absent) */
void ckpt_hex64(char out[17], uint64_t x);

/* The "model" object of state.json and of a sharded checkpoint's manifest: the shape, Llama's
 * architecture fields (GPT-2 writes none, as before Llama) and muP's multipliers (standard
 * models write none). */
void ckpt_model_json(cJSON *md, const ModelConfig *mc);
int ckpt_parse_hex64(const char *s, size_t n, uint64_t *out);
const char *ckpt_base_name(const char *p);
void ckpt_step_name(char *buf, size_t n, long step); /* "step_%08ld" */
long ckpt_parse_step_name(const char *name);          /* step of "step_<digits>", or -1 */
void ckpt_remove_leftovers(const char *dir);          /* .tmp-step_* and .del-step_* */
Status ckpt_write_latest(const char *dir, const char *name, const Fault *fault, Err *err);
/* Publishes a finished checkpoint directory tmp (its files fsynced) as fin in dir: tmp fsynced, the
 * fault "rename" (fault may be NULL), then renamed to fin, or swapped with an existing fin at once
 * (RENAME_EXCHANGE) and the old copy removed after, dir fsynced: fin is at every instant the old
 * checkpoint or the new one, never neither. */
Status ckpt_publish_dir(const char *dir, const char *tmp, const char *fin, const Fault *fault, Err *err);

typedef void (*CkptProgressFn)(void *ctx, uint64_t done, uint64_t total);
typedef struct {
    CkptProgressFn fn;
    void *ctx;
    uint64_t done, total;
} ReadProgress;

/* Reads ckpt/name in chunks, checking size and hash against sum; *buf (if buf) receives the
 * whole file, NUL-terminated. Errors (ST_ERR_INPUT) name "step_x/name" and the mismatch. */
Status ckpt_check_file(const char *ckpt, const char *name, const FileSum *sum, char **buf, size_t *len,
                       ReadProgress *pg, Err *err);

/* ---- state.json ---- */

typedef struct {
    char name[64];
    FileSum sum;
} CkptFileEntry;

/* The "files" member of a state.json, and which format it declared. */
typedef struct {
    int n;
    CkptFileEntry *e;
    int sharded; /* format CKPT_FORMAT_SHARDED */
} CkptFileList;

void ckpt_files_free(CkptFileList *f);
const FileSum *ckpt_files_find(const CkptFileList *f, const char *name);

/* state.json text without its closing "\n}" handled by ckpt_state_producer: meta, the model shape,
 * format (CKPT_FORMAT_*) and the size + hash of nfiles files. Caller frees. */
char *ckpt_state_text(const CkptMeta *m, const ModelConfig *mc, const char *format, const char *const *names,
                      const FileSum *sums, int nfiles);

typedef struct {
    const char *body; /* state text without its closing "\n}" */
    size_t body_len;
} StateArg;

/* A state.json's self checksum (the full checkpoint's, and the LoRA checkpoint's from version 2):
 * seal returns text (cJSON_Print's, ending "\n}") with the state_checksum member last (malloc'd,
 * NULL when out of memory); verify checks it on a read text. */
char *ckpt_state_seal(const char *text);
Status ckpt_state_verify(const char *path, const char *text, size_t len, Err *err);

/* Writes a StateArg's body, the marker, its self checksum and the tail. */
Status ckpt_state_producer(const void *arg, StWriteFn w, void *ctx, Err *err);

/* Reads and verifies ckpt/state.json (self checksum) into m and files (may be NULL; then free it
 * with ckpt_files_free). Errors are ST_ERR_INPUT naming "step_x/state.json". */
Status ckpt_state_read(const char *ckpt, CkptMeta *m, CkptFileList *files, Err *err);

/* The single-process format into any full layout pl (tensors by name; the buffers that are
 * non-NULL, zeroed first). */
Status ckpt_load_single(const char *ckpt_path, const ParamLayout *pl, float *params, float *m, float *v,
                        float *master, CkptMeta *meta, CkptProgressFn progress, void *progress_ctx, Err *err);

#endif
