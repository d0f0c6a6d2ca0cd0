/* ckpt_internal.h — what the checkpoint sources share (not part of the API).
 *
 * A snapshot is the state one save writes: a layout and flat buffers in it, whether they are
 * the live training buffers (synchronous save) or staging copies (asynchronous save). */
#ifndef ST_CKPT_INTERNAL_H
#define ST_CKPT_INTERNAL_H

#include "ckpt/ckpt.h"

typedef struct {
    const ParamLayout *pl;
    const float *params, *m, *v, *master; /* pl->total floats each; m, v, master may be NULL */
} CkptSnap;

/* The whole save (write, rename, latest, prune) of a snapshot; info may be NULL. */
Status ckpt_save_snap(const CkptSnap *s, const CkptMeta *meta, const CkptOptions *o, CkptSaveInfo *info, Err *err);

/* Deep copy of meta (config duplicated, owned by dst). */
int ckpt_meta_copy(CkptMeta *dst, const CkptMeta *src);

#endif
