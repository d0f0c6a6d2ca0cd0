/* ckpt_config.c — config-field kinds on resume (DESIGN.md §5): model fields must match,
 * trajectory fields must match unless overridden (reported), free fields may change (reported).
 *
 * Field names are the dotted paths of the trainer's config_json() (src/train/train.c), the
 * source of truth: "model.layers", "lr", "threads", ... plus the derived "global_batch" =
 * micro_batch × grad_accum × dp (dp 1 when absent). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"

static const char *const MODEL_FIELDS[] = {
    "model.layers", "model.heads", "model.channels", "model.vocab", "model.vocab_padded", "model.max_seq_len",
    "model.arch", "model.kv_heads", "model.ffn", "model.norm_eps", "model.rope_theta", "model.tie_embeddings",
    "model.rope_type", "model.rope_factor", "model.rope_low_freq_factor", "model.rope_high_freq_factor",
    "model.rope_original_max_seq_len",
    "model.param", "model.mup_base_width", "model.mup_input_alpha", "model.mup_output_alpha",
    "tokenizer", "tokenizer_hash",
};

static const char *const FREE_FIELDS[] = {
    /* how the same global batch is split and where it runs */
    "micro_batch", "grad_accum", "dp", "tp", "sp", "pp", "pp_schedule", "pp_layers", "interleave", "zero", "threads", "recompute",
    "device", /* a checkpoint written on one backend resumes on another (same files) */
    /* run length (an extension also stretches the schedule's total; reported) */
    "steps",
    /* observation and bookkeeping: do not change the trajectory */
    "val_data", "val_every", "val_batches", "log", "out", "quiet", "peak_flops", "ckpt_dir", "ckpt_every",
    "keep_last", "keep_every", "ckpt_async", "resume", "init_from", "mtbf", "override", "overrides",
};

CkptFieldKind ckpt_field_kind(const char *path) {
    for (size_t i = 0; i < sizeof MODEL_FIELDS / sizeof *MODEL_FIELDS; i++)
        if (!strcmp(path, MODEL_FIELDS[i])) return CKPT_FIELD_MODEL;
    for (size_t i = 0; i < sizeof FREE_FIELDS / sizeof *FREE_FIELDS; i++)
        if (!strcmp(path, FREE_FIELDS[i])) return CKPT_FIELD_FREE;
    /* Everything else (data, seeds, optimizer, schedule, lr, dropout, precision, global_batch and
     * any field added later) is trajectory: refusing is recoverable, a silent fork is not. */
    return CKPT_FIELD_TRAJECTORY;
}


static void value_str(const cJSON *v, char *buf, size_t n) {
    if (!v) snprintf(buf, n, "(absent)");
    else if (cJSON_IsNumber(v)) snprintf(buf, n, "%.9g", v->valuedouble);
    else if (cJSON_IsString(v)) snprintf(buf, n, "\"%s\"", v->valuestring);
    else if (cJSON_IsBool(v)) snprintf(buf, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNull(v)) snprintf(buf, n, "null");
    else {
        char *s = cJSON_PrintUnformatted(v);
        snprintf(buf, n, "%s", s ? s : "?");
        free(s);
    }
}

static int values_equal(const cJSON *a, const cJSON *b) {
    if (!a || !b) return a == b;
    return cJSON_Compare(a, b, 1);
}

typedef struct {
    const char *const *overrides;
    int noverrides;
    char *report;
    size_t len;
    Err first;        /* first refusal */
    int refused;      /* number of refused fields */
    CkptFieldKind first_kind;
} Cmp;

static int overridden(const Cmp *c, const char *path) {
    for (int i = 0; i < c->noverrides; i++)
        if (c->overrides[i] && (!strcmp(c->overrides[i], path) || !strcmp(c->overrides[i], "all"))) return 1;
    return 0;
}

static void report_add(Cmp *c, const char *what, const char *path, const char *a, const char *b) {
    if (!c->report || !c->len) return;
    size_t used = strlen(c->report);
    if (used + 1 >= c->len) return;
    snprintf(c->report + used, c->len - used, "%s%s %s: %s -> %s", used ? "; " : "", what, path, a, b);
}

static void compare_field(Cmp *c, const char *path, const cJSON *a, const cJSON *b) {
    if (values_equal(a, b)) return;
    char sa[256], sb[256];
    value_str(a, sa, sizeof sa);
    value_str(b, sb, sizeof sb);
    CkptFieldKind k = ckpt_field_kind(path);
    if (k == CKPT_FIELD_FREE) {
        report_add(c, "free", path, sa, sb);
        return;
    }
    if (k == CKPT_FIELD_TRAJECTORY && overridden(c, path)) {
        report_add(c, "override", path, sa, sb);
        return;
    }
    /* A model refusal outranks a trajectory one: overriding the trajectory would not help. */
    if (c->refused == 0 || (k == CKPT_FIELD_MODEL && c->first_kind != CKPT_FIELD_MODEL)) {
        if (k == CKPT_FIELD_MODEL)
            err_set(&c->first, ST_ERR_INPUT, "config field %s (a model field) changed: checkpoint has %s, this run has %s; "
                    "a model field cannot change on resume", path, sa, sb);
        else
            err_set(&c->first, ST_ERR_INPUT, "config field %s (a trajectory field) changed: checkpoint has %s, this run "
                    "has %s; resuming would fork the run (allow it explicitly with --override %s)", path, sa, sb, path);
        c->first_kind = k;
    }
    c->refused++;
}

/* Whether data_files entries carry a content fingerprint ([name, bytes, fingerprint]; written since
 * 2026-11-29, [name, bytes] before): the first file's entry says. */
static int has_fingerprints(const cJSON *files) {
    const cJSON *set = cJSON_GetArrayItem(files, 0);
    const cJSON *f = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(set, "files"), 0);
    return cJSON_GetArraySize(f) >= 3;
}

/* The first shard whose entry differs between two data_files of the same layout, as "NAME's
 * contents differ from the checkpoint's (same size)" (the one difference a size does not show); 0
 * when the difference is elsewhere (names, sizes, weights, counts: the arrays say it). */
static int changed_contents(const cJSON *sf, const cJSON *cf, char *why, size_t cap) {
    if (cJSON_GetArraySize(sf) != cJSON_GetArraySize(cf)) return 0;
    for (int i = 0; i < cJSON_GetArraySize(sf); i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(sf, i), "files"),
                    *b = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cf, i), "files");
        if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b)) return 0;
        for (int j = 0; j < cJSON_GetArraySize(a); j++) {
            const cJSON *x = cJSON_GetArrayItem(a, j), *y = cJSON_GetArrayItem(b, j);
            if (values_equal(x, y)) continue;
            if (!values_equal(cJSON_GetArrayItem(x, 0), cJSON_GetArrayItem(y, 0)) ||
                !values_equal(cJSON_GetArrayItem(x, 1), cJSON_GetArrayItem(y, 1)))
                return 0;
            const cJSON *name = cJSON_GetArrayItem(x, 0);
            snprintf(why, cap, "%s's contents differ from the checkpoint's (same size; prepared again?)",
                     cJSON_IsString(name) ? name->valuestring : "a shard");
            return 1;
        }
    }
    return 0;
}

/* The training data: the files it resolved to (data_files: name, size and content fingerprint per
 * shard, the weight per dataset) when both configs record them, the --data text only as a free
 * field (the same files spelled another way); a checkpoint written before data_files compares the
 * text as before, one written before the fingerprints names and sizes. A --override data allows a
 * change of either. */
static void data(Cmp *c, const cJSON *saved, const cJSON *current) {
    const cJSON *sf = cJSON_GetObjectItemCaseSensitive(saved, "data_files"),
                *cf = cJSON_GetObjectItemCaseSensitive(current, "data_files"),
                *sd = cJSON_GetObjectItemCaseSensitive(saved, "data"), *cd = cJSON_GetObjectItemCaseSensitive(current, "data");
    if (!sf || !cf) {
        compare_field(c, "data", sd, cd);
        return;
    }
    cJSON *older = NULL; /* this run's entries without their fingerprints, for an older checkpoint */
    if (!has_fingerprints(sf) && has_fingerprints(cf) && (older = cJSON_Duplicate(cf, 1))) {
        cJSON *set;
        cJSON_ArrayForEach(set, older) {
            cJSON *f;
            cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(set, "files")) cJSON_DeleteItemFromArray(f, 2);
        }
        cf = older;
    }
    char why[600];
    int same = values_equal(sf, cf);
    if (!same && overridden(c, "data"))
        report_add(c, "override", "data_files", "(the checkpoint's files)", "(this run's)");
    else if (!same && changed_contents(sf, cf, why, sizeof why)) {
        if (c->refused++ == 0)
            err_set(&c->first, ST_ERR_INPUT, "config field data_files (a trajectory field) changed: %s; resuming would "
                    "fork the run (allow it explicitly with --override data)", why),
                c->first_kind = CKPT_FIELD_TRAJECTORY;
    } else
        compare_field(c, "data_files", sf, cf);
    cJSON_Delete(older);
    if (!same && overridden(c, "data")) return;
    if (!values_equal(sd, cd)) {
        char a[256], b[256];
        value_str(sd, a, sizeof a), value_str(cd, b, sizeof b);
        report_add(c, "free", "data", a, b); /* the same files */
    }
}

/* Walks the union of the members of two objects; nested objects recurse, others are leaves. */
static void walk(Cmp *c, const char *prefix, const cJSON *a, const cJSON *b) {
    char path[256];
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *x = pass == 0 ? a : b, *y = pass == 0 ? b : a;
        for (const cJSON *e = x ? x->child : NULL; e; e = e->next) {
            if (!e->string) continue;
            const cJSON *o = y ? cJSON_GetObjectItemCaseSensitive(y, e->string) : NULL;
            if (pass == 1 && o) continue; /* already compared in pass 0 */
            if (!prefix[0] && (!strcmp(e->string, "data") || !strcmp(e->string, "data_files"))) continue; /* data() */
            snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", e->string);
            const cJSON *va = pass == 0 ? e : o, *vb = pass == 0 ? o : e;
            if (cJSON_IsObject(va) && cJSON_IsObject(vb)) walk(c, path, va, vb);
            else compare_field(c, path, va, vb);
        }
    }
}

static int num(const cJSON *o, const char *k, double dflt, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!x) return *v = dflt, 1;
    if (!cJSON_IsNumber(x)) return 0;
    *v = x->valuedouble;
    return 1;
}

Status ckpt_check_config(const cJSON *saved, const cJSON *current, const char *const *overrides, int noverrides,
                         char *report, size_t len, Err *err) {
    if (report && len) report[0] = '\0';
    if (!cJSON_IsObject(saved) || !cJSON_IsObject(current))
        return err_set(err, ST_ERR_INPUT, "checkpoint config: expected a JSON object on both sides, found %s",
                       cJSON_IsObject(saved) ? "none in this run" : "none in the checkpoint's state.json");
    Cmp c = {overrides, noverrides, report, len, {0}, 0, CKPT_FIELD_FREE};
    /* The global batch decides which samples each step sees: trajectory, even when its split
     * (micro_batch, grad_accum, dp: free) changes. */
    double mb[2], ga[2], dp[2];
    if (num(saved, "micro_batch", 0, &mb[0]) && num(saved, "grad_accum", 1, &ga[0]) && num(saved, "dp", 1, &dp[0]) &&
        num(current, "micro_batch", 0, &mb[1]) && num(current, "grad_accum", 1, &ga[1]) &&
        num(current, "dp", 1, &dp[1]) && mb[0] > 0 && mb[1] > 0) {
        cJSON *g0 = cJSON_CreateNumber(mb[0] * ga[0] * dp[0]), *g1 = cJSON_CreateNumber(mb[1] * ga[1] * dp[1]);
        compare_field(&c, "global_batch", g0, g1);
        cJSON_Delete(g0);
        cJSON_Delete(g1);
    }
    data(&c, saved, current);
    walk(&c, "", saved, current);
    if (c.refused == 0) return ST_OK;
    if (c.refused > 1) {
        char more[64];
        snprintf(more, sizeof more, " (and %d more changed field%s)", c.refused - 1, c.refused > 2 ? "s" : "");
        size_t used = strlen(c.first.msg);
        snprintf(c.first.msg + used, sizeof c.first.msg - used, "%s", more);
    }
    return err_set(err, ST_ERR_INPUT, "%s", c.first.msg);
}

/* 1 if want is the dotted path of a trajectory leaf of o (under prefix); with list, also appends
 * every such path to list (", "-separated, cut at len). */
static int trajectory_paths(const cJSON *o, const char *prefix, const char *want, char *list, size_t len) {
    int found = 0;
    char path[256];
    for (const cJSON *e = o ? o->child : NULL; e; e = e->next) {
        if (!e->string) continue;
        snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", e->string);
        if (cJSON_IsObject(e)) {
            /* a whole object of trajectory fields (health) is a name too: present in one config and
             * absent from the other, it is the field compare_field names */
            found |= want && !strcmp(path, want) && ckpt_field_kind(path) == CKPT_FIELD_TRAJECTORY;
            found |= trajectory_paths(e, path, want, list, len);
            continue;
        }
        if (ckpt_field_kind(path) != CKPT_FIELD_TRAJECTORY) continue;
        found |= want && !strcmp(path, want);
        size_t used = list ? strlen(list) : 0;
        if (list && used + 1 < len) snprintf(list + used, len - used, ", %s", path);
    }
    return found;
}

Status ckpt_check_override_names(const cJSON *saved, const cJSON *current, const char *const *overrides,
                                 int noverrides, Err *err) {
    for (int i = 0; i < noverrides; i++) {
        const char *name = overrides[i];
        if (!strcmp(name, "all") || !strcmp(name, "global_batch")) continue;
        if (trajectory_paths(current, "", name, NULL, 0) || trajectory_paths(saved, "", name, NULL, 0)) continue;
        char list[700] = "all, global_batch";
        trajectory_paths(current, "", NULL, list, sizeof list);
        /* a model or free field is named as such: overriding it is not the fix */
        CkptFieldKind k = ckpt_field_kind(name);
        return err_set(err, ST_ERR_INPUT, "--override %s: expected a trajectory field of the config (%s), found %s",
                       name, list, k == CKPT_FIELD_MODEL  ? "a model field (it cannot change on resume)"
                                   : k == CKPT_FIELD_FREE ? "a free field (it may change without --override)"
                                                          : "no such field");
    }
    return ST_OK;
}
