/* weights_arg.c — the WEIGHTS argument of sample, eval and export (cmds_ckpt.h): one resolution for
 * the three, so that what one accepts the others do. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/lora_ckpt.h"
#include "ckpt/safetensors.h"
#include "cli/cmds_ckpt.h"
#include "model/backend.h"
#include "model/gpt.h"

Status cli_resolve_weights(const char *cmd, const char *arg, char *src, size_t len, int *plain, int quiet, Err *err) {
    *plain = ckpt_is_weights_folder(arg);
    char cj[4200], sj[4200];
    snprintf(cj, sizeof cj, "%s/config.json", arg);
    snprintf(sj, sizeof sj, "%s/state.json", arg);
    if (*plain) { /* half a weights folder is named as such, not as a file that cannot be opened */
        if (access(cj, F_OK) != 0)
            return err_set(err, ST_ERR_INPUT, "%s: expected config.json beside the weights (the model's shape), found "
                           "none", arg);
        snprintf(src, len, "%s", arg);
        return ST_OK;
    }
    struct stat sb;
    if (stat(arg, &sb) != 0)
        return err_set(err, ST_ERR_INPUT, "%s: expected a weights folder (train --out), a checkpoint or a --ckpt-dir, "
                       "but it does not exist", arg);
    size_t al = strlen(arg);
    if (!S_ISDIR(sb.st_mode))
        return err_set(err, ST_ERR_INPUT, "%s: expected a weights folder (train --out), a checkpoint or a --ckpt-dir, "
                       "found a file%s", arg, al > 4 && !strcmp(arg + al - 4, ".bin")
                           ? " (if it is llm.c's weights: train --init-from reads those)" : "");
    /* A LoRA checkpoint holds adapters, not weights (export --merge makes weights of them) */
    char lpath[4096];
    if (strcmp(cmd, "export") && ckpt_lora_locate(arg, lpath, sizeof lpath))
        return err_set(err, ST_ERR_INPUT, "%s: expected weights, found a LoRA checkpoint (adapters over a base): "
                       "scaletrain export %s --merge -o DIR writes the merged weights, then give DIR", arg, arg);
    char note[1536];
    Status st = ckpt_resolve(NULL, arg, src, len, note, sizeof note, err);
    if (st != ST_OK) return st;
    if (!src[0] && access(cj, F_OK) == 0 && access(sj, F_OK) != 0)
        return err_set(err, ST_ERR_INPUT, "%s: expected model.safetensors (or model.safetensors.index.json) beside "
                       "config.json, found none", arg);
    if (!src[0])
        return err_set(err, ST_ERR_INPUT, "%s: expected model.safetensors + config.json (train --out), a checkpoint "
                       "step_NNNNNNNN/ or a --ckpt-dir holding them, found none of these", arg);
    if (note[0] && !quiet) fprintf(stderr, "scaletrain %s: %s\n", cmd, note);
    return ST_OK;
}

/* The weights are checked finite after the load: a NaN or an infinity in them (a diverged run's
 * checkpoint, a corrupted export) made eval report a NaN loss and sample print token 0 forever,
 * both with exit 0. */
Status cli_load_weights(Gpt *g, const char *src, Err *err) {
    Status st;
    if (g->be->host_addressable) {
        st = ckpt_load_weights(&g->w, src, err);
        return st == ST_OK ? st_check_finite(&g->w.layout, g->w.params, src, err) : st;
    }
    GptWeights view = g->w; /* the same layout over a host buffer */
    size_t bytes = g->w.layout.total * sizeof(float);
    if (!(view.params = calloc(1, bytes)))
        return err_set(err, ST_ERR_RUNTIME, "out of memory for the weights' host copy (%zu bytes)", bytes);
    st = ckpt_load_weights(&view, src, err);
    if (st == ST_OK) st = st_check_finite(&view.layout, view.params, src, err);
    if (st == ST_OK) g->be->from_host(g->w.params, view.params, bytes), gpt_sync_lp(g);
    free(view.params);
    return st;
}
