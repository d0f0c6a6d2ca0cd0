/* ckpt_load.c — loading either checkpoint format: the dispatch that sits above both (ckpt.h's
 * ckpt_load, ckpt_load_progress, ckpt_load_weights). The single-process format (ckpt.c) and the
 * sharded one (shard.c, built on ckpt.c's internals) never call each other's loaders, and the
 * safetensors layer (safetensors.c) below both knows neither: issue 24 took the circle
 * ckpt.c -> shard.c -> ckpt.c and safetensors.c -> shard.c out. */
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_internal.h"
#include "ckpt/safetensors.h"
#include "ckpt/shard.h"

Status ckpt_load(const char *ckpt_path, GptWeights *w, const CkptOptState *opt, CkptMeta *meta, Err *err) {
    return ckpt_load_progress(ckpt_path, w, opt, meta, NULL, NULL, err);
}

Status ckpt_load_progress(const char *ckpt_path, GptWeights *w, const CkptOptState *opt, CkptMeta *meta,
                          CkptProgressFn progress, void *progress_ctx, Err *err) {
    CkptOptState none = {0};
    if (!opt) opt = &none;
    if (ckpt_is_sharded(ckpt_path)) {
        /* A sharded checkpoint's "params" are the fp32 weights (the master under mixed precision). */
        Status st = ckpt_shard_load(ckpt_path, &w->layout, w->params, opt->m, opt->v, meta, NULL, err);
        if (st == ST_OK && opt->master) memcpy(opt->master, w->params, w->layout.total * sizeof(float));
        return st;
    }
    return ckpt_load_single(ckpt_path, &w->layout, w->params, opt->m, opt->v, opt->master, meta, progress,
                            progress_ctx, err);
}

Status ckpt_load_weights(GptWeights *w, const char *dir, Err *err) {
    /* A sharded checkpoint has no model.safetensors: assemble the weights from its rank files. */
    if (ckpt_is_sharded(dir)) return ckpt_shard_load(dir, &w->layout, w->params, NULL, NULL, NULL, NULL, err);
    return st_load_hf_weights(w, dir, err);
}
