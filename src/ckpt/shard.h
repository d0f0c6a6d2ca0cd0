/* shard.h — sharded checkpoints: written by every rank of an MPI job in parallel, loaded on any
 * other grid by resharding tensors by name and tensor-parallel slice (issue 14).
 *
 * A sharded checkpoint is a directory CKPT_DIR/step_%08ld/ (byte-level specification:
 * docs/checkpoint.md, "Sharded checkpoints"):
 *   rank%05d.safetensors   one per rank that writes anything: its slices, keys "<kind>.<name>"
 *                          (kind params | m | v), each (rows_real, cols) in our (out, in) orientation
 *   manifest.json          the grid, every file (bytes, xxh3) and every tensor by name: its full
 *                          unpadded shape and the list of its slices (file, key, kind, split,
 *                          groups, tp, tp_rank, local shape, rows real)
 *   config.json            Hugging Face GPT-2 config, as in the single-process format
 *   state.json             as the single-process format's, with format "scaletrain-checkpoint-sharded"
 *                          and the size + xxh3 of config.json, manifest.json and every rank file
 * It has no model.safetensors: `export` assembles one (ckpt_load and ckpt_init_from read both
 * formats). The single-process format (ckpt.h) stays what one process writes.
 *
 * Save protocol (two-phase, collective over the Comm's world; only the calling thread uses comm):
 *   1. rank 0 removes stale .tmp-* / .del-* and creates .tmp-step_%08ld; all ranks agree;
 *   2. every rank writes and fsyncs its rank file (phase 1: nothing visible yet);
 *   3. all ranks agree on success: if any rank failed, every rank returns ST_ERR_RUNTIME naming
 *      that rank and its file, rank 0 removes the temporary directory, `latest` is unchanged;
 *   4. rank 0 gathers every rank's manifest entries, checks that every (tensor, kind) is covered
 *      exactly once, writes manifest.json, config.json, state.json, fsyncs, renames the directory
 *      into place, fsyncs CKPT_DIR, replaces `latest` and prunes (phase 2: the commit point is
 *      the rename); its status is broadcast so every rank returns the same.
 * Fault injection: ST_CKPT_FAIL_AT (ckpt.h; stages begin, shard, agree, manifest, state, sync,
 * rename, latest, prune) with ST_CKPT_FAIL_RANK=r restricting it to world rank r.
 *
 * Resharding on load: for each tensor of the target layout (any stage, tp slice, shard_multiple),
 * a saved slice identical to the wanted one is copied; otherwise the full tensor is assembled from
 * its saved slices (layout_tp_copy_tensor) and the wanted slice cut from it. Only the files that
 * hold needed slices are read, each verified (size, xxh3) before use. */
#ifndef ST_CKPT_SHARD_H
#define ST_CKPT_SHARD_H

#include "ckpt/ckpt.h"
#include "comm/comm.h"

/* What this rank writes. Buffers are in pl's layout (pl->total floats). */
typedef struct {
    const ParamLayout *pl;      /* this rank's layout: a pipeline stage's tensors, a tp slice of each */
    const float *params;        /* fp32 weights (the master weights under mixed precision) */
    const float *m, *v;         /* optimizer moments; NULL = absent (must be the same on every rank) */
    const unsigned char *write; /* pl->ntensors flags: 1 = this rank writes this tensor's slice. Every
                                   (tensor, tp slice) must be written by exactly one rank of the job
                                   (ckpt_shard_assign arranges it); the save refuses otherwise. */
    const float *extra;         /* optimizer state outside the layout (CkptOptState.extra), written by
                                   world rank 0 alone into CKPT_EXTRA_FILE; NULL: none. The
                                   asynchronous save refuses it. */
    size_t extra_n;
    const char *extra_name;
} CkptShardSrc;

/* Fills write (pl->ntensors flags) for dp rank dp_rank of a data-parallel group of dp ranks that
 * all hold layout pl: the tensors this (tp, pp) position must write — replicated tensors only on
 * tp rank 0, the tied wte only on the stage holding the embeddings — split between the dp ranks,
 * balanced by bytes (largest first, each to the least-loaded rank, ties to the lower rank).
 * Deterministic: every rank of the group computes the same split. */
void ckpt_shard_assign(const ParamLayout *pl, int dp, int dp_rank, unsigned char *write);

/* Writes sharded checkpoint meta->step (see the protocol above). Collective over c's world: every
 * rank calls it with the same meta (rank 0 writes it) and options. info (may be NULL) is the same
 * on every rank: path, bytes of all files, timings of this rank. Errors: ST_ERR_RUNTIME naming the
 * failing rank and file (the previous checkpoints stay valid and `latest` unchanged);
 * ST_ERR_INPUT for a bad argument or a coverage error (a tensor written twice or not at all). */
Status ckpt_shard_save(Comm *c, const CkptShardSrc *src, const CkptMeta *meta, const CkptOptions *o,
                       CkptSaveInfo *info, Err *err);

/* 1 if path is a sharded checkpoint directory (holds manifest.json). */
int ckpt_is_sharded(const char *path);

/* Loads this rank's layout pl (any stage, tp slice and shard_multiple) from a sharded checkpoint
 * written on any grid: params (required), m and v (NULL: not loaded; non-NULL: must be in the
 * checkpoint). Every buffer is zeroed first (padding stays zero). meta (may be NULL) receives
 * state.json (ckpt_meta_free after). Not collective. Errors (ST_ERR_INPUT) name the checkpoint and
 * file: a size or xxh3 mismatch in any file read, a model shape that differs from pl's, a missing
 * tensor or kind, slices that do not cover a tensor. faults (NULL: none): the test-only
 * ckpt_skip_verify and ckpt_wrong_slice (core/fault.h). */
Status ckpt_shard_load(const char *path, const ParamLayout *pl, float *params, float *m, float *v, CkptMeta *meta,
                       const Faults *faults, Err *err);

/* Either format into any layout: a sharded checkpoint as ckpt_shard_load; a single-process one by
 * reading its full tensors (model.safetensors, optimizer.safetensors' m and v) and cutting pl's
 * slices (the trainer resuming a 1-process checkpoint on a tp/pp grid). */
Status ckpt_load_any(const char *path, const ParamLayout *pl, float *params, float *m, float *v, CkptMeta *meta,
                     const Faults *faults, Err *err);

/* ---- asynchronous sharded save ----
 *
 * Contract (MPI is used only by the thread that calls these; the background thread never calls
 * comm): ckpt_shard_async_save first commits the previous save if one is pending (join its writer,
 * then the collective steps 3-4 above), then runs step 1 (collective), copies this rank's slices
 * into staging (MEM_CKPT_STAGING, allocated and touched at init), and starts a thread writing the
 * rank file (step 2). Training may modify its buffers as soon as it returns. The commit of that
 * save runs at the next ckpt_shard_async_save or at ckpt_shard_async_wait — both collective: every
 * rank must call them at the same point of the run. Until then the save is invisible (the
 * previous checkpoint is `latest`); a job that dies before the commit leaves only a .tmp-*
 * directory, removed by the next save. ckpt_shard_async_free does not commit (it joins the writer
 * and drops the pending save). */
typedef struct CkptShardAsync CkptShardAsync;

/* Sizes the staging for the slices src->write selects of src->pl (params, and m, v when non-NULL). */
Status ckpt_shard_async_init(CkptShardAsync **a, const CkptShardSrc *src, MemStats *mem, Err *err);

/* Commits the pending save (its status is returned, and its info in *prev if prev), then starts
 * this one. info->ms_copy of the new save is the time training was blocked for the copy. */
Status ckpt_shard_async_save(CkptShardAsync *a, Comm *c, const CkptShardSrc *src, const CkptMeta *meta,
                             const CkptOptions *o, CkptSaveInfo *prev, Err *err);

/* Commits the pending save (collective); ST_OK with info->path "" if none was pending. */
Status ckpt_shard_async_wait(CkptShardAsync *a, Comm *c, CkptSaveInfo *info, Err *err);

/* 1 while a save is started and not yet committed. */
int ckpt_shard_async_pending(const CkptShardAsync *a);

/* Joins the writer (no commit), frees the staging; safe on NULL. */
void ckpt_shard_async_free(CkptShardAsync *a);

#endif
