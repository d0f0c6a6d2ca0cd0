/* lora_ckpt.c — PEFT adapter folders and LoRA checkpoints (see lora_ckpt.h). */
#include "ckpt/lora_ckpt.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckpt/ckpt_internal.h"
#include "ckpt/safetensors.h"
#include "core/fileio.h"

static Status atomic_sink(void *ctx, const void *p, size_t n, Err *err) {
    return file_atomic_write((FileAtomic *)ctx, p, n, err);
}

/* Writes the tensors to path atomically through st_write. */
static Status write_st(const char *path, const StTensorOut *t, int n, Err *err) {
    FileAtomic f;
    Status st = file_atomic_open(&f, path, err);
    if (st != ST_OK) return st;
    if ((st = st_write(t, n, NULL, atomic_sink, &f, err)) == ST_OK) st = file_atomic_commit(&f, err);
    if (st != ST_OK) file_atomic_abort(&f);
    return st;
}

static Status write_text(const char *path, const char *text, Err *err) {
    const void *b[1] = {text};
    size_t n[1] = {strlen(text)};
    return file_write_atomic(path, b, n, 1, err);
}

/* The adapter tensors of ll over buf (params or a moment), named prefix + PEFT name. Returns the count. */
static int adapter_tensors(const LoraLayout *ll, const float *buf, const char *prefix, StTensorOut *t) {
    int n = 0, r = ll->cfg.rank;
    for (int l = 0; l < ll->L; l++)
        for (int k = 0; k < ll->n; k++) {
            const LoraAdapter *a = &ll->ad[k];
            for (int b = 0; b < 2; b++, n++) {
                char name[128];
                lora_tensor_name(&ll->model, l, a->target, b, name, sizeof name);
                memset(&t[n], 0, sizeof t[n]);
                snprintf(t[n].name, sizeof t[n].name, "%s%s", prefix, name);
                t[n].ndim = 2;
                t[n].shape[0] = b ? a->out : r, t[n].shape[1] = b ? r : a->in;
                t[n].data = buf + (size_t)l * ll->block_floats + (b ? a->b_off : a->a_off);
            }
        }
    return n;
}

static Status read_adapter_file(const char *path, const LoraLayout *ll, const char *prefix, float *buf, Err *err) {
    char *data = NULL;
    size_t len = 0;
    Status st = file_read_all(path, &data, &len, err);
    if (st != ST_OK) return st;
    StFile f;
    if ((st = st_parse(&f, path, data, len, err)) != ST_OK) {
        free(data);
        return st;
    }
    int cap = 2 * ll->L * ll->n;
    StTensorOut *t = calloc((size_t)cap, sizeof *t);
    if (!t) st = err_set(err, ST_ERR_RUNTIME, "out of memory");
    memset(buf, 0, ll->total * sizeof(float));
    int n = t ? adapter_tensors(ll, buf, prefix, t) : 0;
    for (int i = 0; st == ST_OK && i < n; i++)
        st = st_read_f32(&f, t[i].name, 2, t[i].shape, 0, (float *)t[i].data, err);
    if (st == ST_OK && f.n != n)
        st = err_set(err, ST_ERR_INPUT, "%s: expected %d tensors (rank %d, targets of %d layers), found %d", path, n,
                     ll->cfg.rank, ll->L, f.n);
    free(t);
    st_file_free(&f);
    free(data);
    return st;
}

Status ckpt_lora_write_adapter(const char *dir, const LoraLayout *ll, const float *params, const char *base, Err *err) {
    Status st = file_mkdirs(dir, err);
    if (st != ST_OK) return st;
    int cap = 2 * ll->L * ll->n;
    StTensorOut *t = calloc((size_t)cap, sizeof *t);
    if (!t) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    int n = adapter_tensors(ll, params, "", t);
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    st = write_st(path, t, n, err);
    free(t);
    if (st != ST_OK) return st;
    /* adapter_config.json: PEFT's LoraConfig fields. GPT-2's layers are Conv1D (weight (in, out)):
     * fan_in_fan_out true tells PEFT to transpose B·A when merging into them. */
    cJSON *c = cJSON_CreateObject(), *tm = cJSON_CreateArray();
    cJSON_AddStringToObject(c, "peft_type", "LORA");
    cJSON_AddStringToObject(c, "task_type", "CAUSAL_LM");
    cJSON_AddStringToObject(c, "base_model_name_or_path", base ? base : "");
    cJSON_AddNumberToObject(c, "r", ll->cfg.rank);
    cJSON_AddNumberToObject(c, "lora_alpha", ll->cfg.alpha);
    cJSON_AddNumberToObject(c, "lora_dropout", ll->cfg.dropout);
    cJSON_AddBoolToObject(c, "fan_in_fan_out", ll->model.arch != ARCH_LLAMA);
    cJSON_AddStringToObject(c, "bias", "none");
    cJSON_AddBoolToObject(c, "inference_mode", 1);
    cJSON_AddBoolToObject(c, "use_rslora", 0);
    cJSON_AddBoolToObject(c, "init_lora_weights", 1);
    for (int k = 0; k < ll->n; k++) cJSON_AddItemToArray(tm, cJSON_CreateString(lora_module_name(&ll->model, ll->ad[k].target)));
    cJSON_AddItemToObject(c, "target_modules", tm);
    char *text = cJSON_Print(c);
    cJSON_Delete(c);
    if (!text) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    st = write_text(path, text, err);
    free(text);
    return st;
}

Status ckpt_lora_read_adapter(const char *dir, const LoraLayout *ll, float *params, Err *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    return read_adapter_file(path, ll, "", params, err);
}

static Status hash_file(const char *path, uint64_t *h, Err *err) {
    char *data = NULL;
    size_t len = 0;
    Status st = file_read_all(path, &data, &len, err);
    if (st != ST_OK) return st;
    *h = XXH3_64bits(data, len);
    free(data);
    return ST_OK;
}

static const char *const FILES[] = {"adapter_model.safetensors", "adapter_config.json", "optimizer.safetensors",
                                    "config.json"};
#define NFILES 4

static Status save_into(const char *ckpt_dir, const char *fin, const char *tmp, const ModelConfig *cfg,
                        const LoraLayout *ll, const LoraCkptMeta *meta, const float *params, const float *m,
                        const float *v, Err *err) {
    char path[4400];
    Status st;
    /* 1. the files, each written to a temporary name, fsynced and renamed inside step_N.tmp */
    if ((st = ckpt_lora_write_adapter(tmp, ll, params, meta->init_from, err)) != ST_OK) return st;
    int cap = 4 * ll->L * ll->n;
    StTensorOut *t = calloc((size_t)cap, sizeof *t);
    if (!t) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    int n = adapter_tensors(ll, m, "exp_avg.", t);
    n += adapter_tensors(ll, v, "exp_avg_sq.", t + n);
    snprintf(path, sizeof path, "%s/optimizer.safetensors", tmp);
    st = write_st(path, t, n, err);
    free(t);
    if (st != ST_OK) return st;
    char cfgtext[8192];
    st_hf_config_text(cfg, meta->tokenizer, cfgtext, sizeof cfgtext);
    snprintf(path, sizeof path, "%s/config.json", tmp);
    if ((st = write_text(path, cfgtext, err)) != ST_OK) return st;
    /* 2. state.json with every file's checksum */
    cJSON *s = cJSON_CreateObject(), *lo = cJSON_CreateObject(), *base = cJSON_CreateObject(), *fl = cJSON_CreateObject();
    char buf[64], tg[64];
    cJSON_AddStringToObject(s, "format", "scaletrain-lora");
    cJSON_AddNumberToObject(s, "version", 2); /* 2: the state_checksum member (ckpt_state_seal) */
    cJSON_AddNumberToObject(s, "step", (double)meta->step);
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)meta->loader.seed);
    cJSON_AddStringToObject(s, "loader_seed", buf);
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)meta->loader.consumed);
    cJSON_AddStringToObject(s, "loader_consumed", buf);
    cJSON_AddNumberToObject(lo, "rank", ll->cfg.rank);
    cJSON_AddNumberToObject(lo, "alpha", ll->cfg.alpha);
    cJSON_AddNumberToObject(lo, "dropout", ll->cfg.dropout);
    lora_targets_string(ll->cfg.targets, tg, sizeof tg);
    cJSON_AddStringToObject(lo, "targets", tg);
    if (ll->cfg.base_bf16) cJSON_AddStringToObject(lo, "base_precision", "bf16"); /* absent: fp32 */
    cJSON_AddItemToObject(s, "lora", lo);
    cJSON_AddStringToObject(base, "init_from", meta->init_from);
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)meta->base_seed);
    cJSON_AddStringToObject(base, "seed", buf);
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long)meta->base_hash);
    cJSON_AddStringToObject(base, "xxh3", buf);
    cJSON_AddItemToObject(s, "base", base);
    if (meta->config) cJSON_AddItemToObject(s, "config", cJSON_Duplicate(meta->config, 1));
    for (int i = 0; i < NFILES && st == ST_OK; i++) {
        uint64_t h;
        snprintf(path, sizeof path, "%s/%s", tmp, FILES[i]);
        if ((st = hash_file(path, &h, err)) != ST_OK) break;
        snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
        cJSON_AddStringToObject(fl, FILES[i], buf);
    }
    cJSON_AddItemToObject(s, "files", fl);
    char *plain = st == ST_OK ? cJSON_Print(s) : NULL, *text = plain ? ckpt_state_seal(plain) : NULL;
    free(plain);
    cJSON_Delete(s);
    if (st != ST_OK) return st;
    if (!text) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    snprintf(path, sizeof path, "%s/state.json", tmp);
    st = write_text(path, text, err);
    free(text);
    if (st != ST_OK) return st;
    /* 3. publish the directory as the full checkpoint's (never a moment without step_N, even when
     * re-saving one); 4. move `latest` */
    char name[64];
    snprintf(name, sizeof name, "step_%08ld", meta->step);
    if ((st = ckpt_publish_dir(ckpt_dir, tmp, fin, NULL, err)) != ST_OK) return st;
    return ckpt_write_latest(ckpt_dir, name, NULL, err);
}

Status ckpt_lora_save(const char *ckpt_dir, const ModelConfig *cfg, const LoraLayout *ll, const LoraCkptMeta *meta,
                      const float *params, const float *m, const float *v, char *out, size_t out_len, Err *err) {
    char fin[4200], tmp[4300];
    snprintf(fin, sizeof fin, "%s/step_%08ld", ckpt_dir, meta->step);
    snprintf(tmp, sizeof tmp, "%s.tmp", fin);
    Status st = file_mkdirs(ckpt_dir, err);
    if (st != ST_OK) return st;
    file_rm_tree(tmp);
    st = save_into(ckpt_dir, fin, tmp, cfg, ll, meta, params, m, v, err);
    /* a failed save takes its partial copy with it (as the full checkpoint's) */
    if (st != ST_OK) file_rm_tree(tmp);
    else if (out) snprintf(out, out_len, "%s", fin);
    return st;
}

int ckpt_lora_is_checkpoint(const char *dir) {
    char path[4200], *data = NULL;
    size_t len;
    Err e;
    snprintf(path, sizeof path, "%s/state.json", dir);
    if (file_read_all(path, &data, &len, &e) != ST_OK) return 0;
    int yes = strstr(data, "\"scaletrain-lora\"") != NULL;
    free(data);
    return yes;
}

int ckpt_lora_locate(const char *arg, char *out, size_t out_len) {
    Err e;
    out[0] = 0;
    if (ckpt_lora_is_checkpoint(arg)) snprintf(out, out_len, "%s", arg);
    else if (ckpt_lora_resolve(arg, "auto", out, out_len, &e) != ST_OK) out[0] = 0;
    return out[0] != 0;
}

static const char *jstr(const cJSON *o, const char *k);

/* What dir holds instead of a LoRA checkpoint, for --resume's refusal ("found ..."). */
static void describe_not_lora(const char *dir, char *out, size_t cap) {
    char path[4200], *data = NULL;
    size_t len;
    Err e;
    struct stat sb;
    snprintf(path, sizeof path, "%s/state.json", dir);
    if (stat(dir, &sb) != 0) {
        snprintf(out, cap, "nothing there (%s)", strerror(errno));
    } else if (!S_ISDIR(sb.st_mode)) {
        snprintf(out, cap, "a file");
    } else if (file_read_all(path, &data, &len, &e) == ST_OK) {
        cJSON *s = cJSON_ParseWithLength(data, len);
        const char *fmt = s ? jstr(s, "format") : NULL;
        if (!s) snprintf(out, cap, "a state.json that is not JSON (a damaged checkpoint)");
        else if (fmt && !strcmp(fmt, "scaletrain-checkpoint"))
            snprintf(out, cap, "an ordinary checkpoint (format scaletrain-checkpoint: resume it without --lora-rank, "
                     "or start LoRA from it with --init-from)");
        else snprintf(out, cap, "a state.json of format %.100s", fmt ? fmt : "(none)");
        cJSON_Delete(s);
        free(data);
    } else {
        long steps[1];
        snprintf(path, sizeof path, "%s/latest", dir);
        if (access(path, F_OK) == 0 || ckpt_lora_steps(dir, steps, 1) > 0)
            snprintf(out, cap, "a directory of checkpoints (give --ckpt-dir %s --resume auto, or one of its step_N)", dir);
        else snprintf(out, cap, "no state.json");
    }
}

Status ckpt_lora_resolve(const char *ckpt_dir, const char *spec, char *out, size_t out_len, Err *err) {
    out[0] = 0;
    if (spec[0] && strcmp(spec, "auto")) {
        if (!ckpt_lora_is_checkpoint(spec)) {
            char found[512];
            describe_not_lora(spec, found, sizeof found);
            return err_set(err, ST_ERR_INPUT, "--resume %s: expected a LoRA checkpoint directory (state.json with format "
                           "scaletrain-lora), found %s", spec, found);
        }
        snprintf(out, out_len, "%s", spec);
        return ST_OK;
    }
    char path[4200], *data = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/latest", ckpt_dir);
    struct stat sb;
    if (stat(path, &sb) != 0) { /* no `latest` (lost, or never written): the newest LoRA step_N, else a fresh start */
        long steps[1];
        if (ckpt_lora_steps(ckpt_dir, steps, 1) > 0) snprintf(out, out_len, "%s/step_%08ld", ckpt_dir, steps[0]);
        return ST_OK;
    }
    Status st = file_read_all(path, &data, &len, err);
    if (st != ST_OK) return st;
    while (len && (data[len - 1] == '\n' || data[len - 1] == ' ')) data[--len] = 0;
    snprintf(out, out_len, "%s/%s", ckpt_dir, data);
    free(data);
    if (!ckpt_lora_is_checkpoint(out)) { /* out stays set: --resume auto falls back to an older one */
        char found[512];
        describe_not_lora(out, found, sizeof found);
        return err_set(err, ST_ERR_INPUT, "%s/latest names %s, which is not a LoRA checkpoint: found %s", ckpt_dir, out,
                       found);
    }
    return ST_OK;
}

static int cmp_desc(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int ckpt_lora_steps(const char *ckpt_dir, long *steps, int max) {
    /* every step first, then the newest max (readdir's order is arbitrary: stopping at max kept any) */
    DIR *d = opendir(ckpt_dir);
    long *all = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        long step;
        char tail, p[4096];
        if (sscanf(e->d_name, "step_%ld%c", &step, &tail) != 1) continue; /* step_N.tmp and others: no */
        if (snprintf(p, sizeof p, "%s/%s", ckpt_dir, e->d_name) >= (int)sizeof p) continue;
        if (!ckpt_lora_is_checkpoint(p)) continue;
        if (n == cap) {
            long *x = realloc(all, (cap = cap ? 2 * cap : 64) * sizeof *x);
            if (!x) break;
            all = x;
        }
        all[n++] = step;
    }
    if (d) closedir(d);
    if (n) qsort(all, n, sizeof *all, cmp_desc);
    int k = max < 0 ? 0 : n < (size_t)max ? (int)n : max;
    if (k) memcpy(steps, all, (size_t)k * sizeof *steps);
    free(all);
    return k;
}

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}
static int jnum(const cJSON *o, const char *k, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(x)) return 0;
    *v = x->valuedouble;
    return 1;
}

/* A u64 written as decimal digits (what save writes): 1 and *v, else 0 (strtoull took "" and "abc"
 * as 0 and "-1" as 2^64 - 1). */
static int dec_u64(const char *s, uint64_t *v) {
    if (!s[0] || s[0] < '0' || s[0] > '9') return 0;
    char *end;
    errno = 0;
    unsigned long long u = strtoull(s, &end, 10);
    if (*end || errno) return 0;
    *v = u;
    return 1;
}

Status ckpt_lora_read_meta(const char *path, LoraCkptMeta *meta, LoraConfig *lc, ModelConfig *cfg, Err *err) {
    char p[4200], *data = NULL;
    size_t len;
    memset(meta, 0, sizeof *meta);
    snprintf(p, sizeof p, "%s/state.json", path);
    Status st = file_read_all(p, &data, &len, err);
    if (st != ST_OK) return st;
    cJSON *s = cJSON_ParseWithLength(data, len);
    /* from version 2 the text carries its own checksum (an edited step or loader position was taken
     * as written); version 1, from before, has none, so one that has it was a version 2 with its
     * version edited (which skipped the check: any edit then loaded) and is verified as one */
    double ver = 0;
    int v1 = s && jnum(s, "version", &ver) && ver == 1 && !cJSON_GetObjectItemCaseSensitive(s, "state_checksum");
    if (s && !v1 && (st = ckpt_state_verify(p, data, len, err)) != ST_OK) {
        free(data), cJSON_Delete(s);
        return st;
    }
    free(data);
    const cJSON *lo = s ? cJSON_GetObjectItemCaseSensitive(s, "lora") : NULL;
    const cJSON *base = s ? cJSON_GetObjectItemCaseSensitive(s, "base") : NULL;
    const cJSON *fl = s ? cJSON_GetObjectItemCaseSensitive(s, "files") : NULL;
    double step, rank, alpha, drop;
    const char *fmt = s ? jstr(s, "format") : NULL, *tg = lo ? jstr(lo, "targets") : NULL;
    const char *seed = jstr(s, "loader_seed"), *cons = jstr(s, "loader_consumed");
    const char *bseed = base ? jstr(base, "seed") : NULL, *bh = base ? jstr(base, "xxh3") : NULL;
    const char *bi = base ? jstr(base, "init_from") : NULL;
    if (!fmt || strcmp(fmt, "scaletrain-lora") || !jnum(s, "step", &step) || !lo || !jnum(lo, "rank", &rank) ||
        !jnum(lo, "alpha", &alpha) || !jnum(lo, "dropout", &drop) || !tg || !seed || !cons || !bseed || !bh || !bi || !fl) {
        cJSON_Delete(s);
        return err_set(err, ST_ERR_INPUT, "%s: expected a LoRA checkpoint's state.json (format scaletrain-lora with step, "
                       "loader, lora and base), found something else", p);
    }
    /* Every value as save writes it, each refused by name otherwise: a version after 2 (or an edited
     * text resealed) read as 2, a fractional or huge rank cast to int, a dropout of 2 refused as the
     * --lora-dropout flag, loader and base seeds "" or "abc" read as 0. */
    const cJSON *cf = cJSON_GetObjectItemCaseSensitive(s, "config");
    const cJSON *bpv = cJSON_GetObjectItemCaseSensitive(lo, "base_precision");
    const char *bp = jstr(lo, "base_precision"), *bad = NULL;
    char found[96] = "";
    if (ver != 1 && ver != 2) {
        bad = "version: expected 1 or 2";
        snprintf(found, sizeof found, "%g", ver);
    } else if (!(step >= 0 && step <= 9007199254740992.0 && step == floor(step))) {
        bad = "step: expected a whole number >= 0";
        snprintf(found, sizeof found, "%g", step);
    } else if (!(rank >= 1 && rank <= 1 << 20 && rank == floor(rank))) {
        bad = "lora.rank: expected a positive integer";
        snprintf(found, sizeof found, "%g", rank);
    } else if (!(alpha > 0 && alpha <= FLT_MAX && (float)alpha > 0)) {
        bad = "lora.alpha: expected a positive number (a float)";
        snprintf(found, sizeof found, "%g", alpha);
    } else if (!(drop >= 0 && drop < 1)) {
        bad = "lora.dropout: expected a probability in [0, 1)";
        snprintf(found, sizeof found, "%g", drop);
    } else if (bpv && !(bp && (!strcmp(bp, "bf16") || !strcmp(bp, "fp32")))) {
        bad = "lora.base_precision: expected \"bf16\" or \"fp32\"";
        snprintf(found, sizeof found, "another value");
    } else if (!dec_u64(seed, &meta->loader.seed) || !dec_u64(cons, &meta->loader.consumed)) {
        bad = "loader_seed, loader_consumed: expected decimal digits";
        snprintf(found, sizeof found, "\"%.30s\", \"%.30s\"", seed, cons);
    } else if (!dec_u64(bseed, &meta->base_seed) || !ckpt_parse_hex64(bh, strlen(bh), &meta->base_hash)) {
        bad = "base.seed, base.xxh3: expected decimal digits and 16 hex digits";
        snprintf(found, sizeof found, "\"%.30s\", \"%.30s\"", bseed, bh);
    } else if (cf && !cJSON_IsObject(cf) && !cJSON_IsNull(cf)) {
        bad = "config: expected the run's config object";
        snprintf(found, sizeof found, "another value");
    }
    if (bad) {
        cJSON_Delete(s);
        return err_set(err, ST_ERR_INPUT, "%s: %s, found %s", p, bad, found);
    }
    /* the directory's name, where it has the saver's form, says the same step */
    const char *base_name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    long named;
    char tail;
    if (sscanf(base_name, "step_%ld%c", &named, &tail) == 1 && named != (long)step) {
        cJSON_Delete(s);
        return err_set(err, ST_ERR_INPUT, "%s: expected step %ld (the directory's name), found step %.0f", p, named, step);
    }
    meta->step = (long)step;
    snprintf(meta->init_from, sizeof meta->init_from, "%s", bi);
    meta->config = cJSON_IsObject(cf) ? cJSON_Duplicate(cf, 1) : NULL;
    char targets[64];
    snprintf(targets, sizeof targets, "%s", tg);
    int base_bf16 = bp && !strcmp(bp, "bf16");
    /* Every file against its checksum. */
    for (int i = 0; i < NFILES && st == ST_OK; i++) {
        const char *want = jstr(fl, FILES[i]);
        uint64_t h;
        snprintf(p, sizeof p, "%s/%s", path, FILES[i]);
        if (!want) st = err_set(err, ST_ERR_INPUT, "%s/state.json: no checksum for %s", path, FILES[i]);
        else if ((st = hash_file(p, &h, err)) == ST_OK && h != strtoull(want, NULL, 16))
            st = err_set(err, ST_ERR_INPUT, "%s: checksum %016llx, state.json records %s (a damaged checkpoint)", p,
                         (unsigned long long)h, want);
    }
    cJSON_Delete(s);
    if (st == ST_OK) st = st_load_hf_config(path, cfg, meta->tokenizer, sizeof meta->tokenizer, err);
    if (st != ST_OK) {
        ckpt_lora_meta_free(meta);
        return st;
    }
    lc->rank = (int)rank, lc->alpha = (float)alpha, lc->dropout = (float)drop, lc->base_bf16 = base_bf16;
    /* the flags' own checks (targets, a rank within the narrowest targeted layer), their messages
     * said of the file: a rank of 3000000 read here was allocated by export until the OOM killer */
    LoraLayout probe;
    if ((st = lora_parse_targets(targets, cfg, &lc->targets, err)) != ST_OK ||
        (st = lora_layout_init(&probe, cfg, lc, 1, err)) != ST_OK) {
        err_prefix(err, "%s/state.json: lora", path);
        ckpt_lora_meta_free(meta);
    }
    return st;
}

void ckpt_lora_meta_free(LoraCkptMeta *meta) {
    cJSON_Delete(meta->config);
    meta->config = NULL;
}

Status ckpt_lora_load(const char *path, const LoraLayout *ll, float *params, float *m, float *v, Err *err) {
    char p[4200];
    Status st = ckpt_lora_read_adapter(path, ll, params, err);
    if (st != ST_OK || !m) return st;
    snprintf(p, sizeof p, "%s/optimizer.safetensors", path);
    char *data = NULL;
    size_t len;
    if ((st = file_read_all(p, &data, &len, err)) != ST_OK) return st;
    StFile f;
    if ((st = st_parse(&f, p, data, len, err)) != ST_OK) {
        free(data);
        return st;
    }
    int cap = 4 * ll->L * ll->n;
    StTensorOut *t = calloc((size_t)cap, sizeof *t);
    if (!t) st = err_set(err, ST_ERR_RUNTIME, "out of memory");
    memset(m, 0, ll->total * sizeof(float)), memset(v, 0, ll->total * sizeof(float));
    int n = t ? adapter_tensors(ll, m, "exp_avg.", t) : 0;
    n += t ? adapter_tensors(ll, v, "exp_avg_sq.", t + n) : 0;
    for (int i = 0; st == ST_OK && i < n; i++)
        st = st_read_f32(&f, t[i].name, 2, t[i].shape, 0, (float *)t[i].data, err);
    if (st == ST_OK && f.n != n) st = err_set(err, ST_ERR_INPUT, "%s: expected %d tensors, found %d", p, n, f.n);
    free(t);
    st_file_free(&f);
    free(data);
    return st;
}
