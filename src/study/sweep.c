/* sweep.c — the spec of a sweep → runs (train flags), their execution through train_run, the
 * results table. Contract and file layout: sweep.h, docs/sweep.md.
 *
 * Contents: helpers | the spec (keys, values → flags) | grid expansion | command lines and the
 * dry run | execution (skip, resume, done.json) | the results table. */
#define _XOPEN_SOURCE 700
#include "study/sweep.h"

#include <errno.h>
#include <ctype.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ckpt/ckpt.h"
#include "core/fileio.h"
#include "core/shellword.h"
#include "core/timer.h"
#include "data/shard.h"
#include "model/layout.h"
#include "plan/plan.h"
#include "report/figures.h"
#include "train/train.h"

/* ================================================================ helpers */

static int is_root(const Comm *c) { return !c || c->rank == 0; }

static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* A number as a flag value: integers without a decimal point, others with enough digits. */
static void num_str(double v, char *buf, size_t cap) {
    if (v == floor(v) && fabs(v) < 1e15) snprintf(buf, cap, "%.0f", v);
    else snprintf(buf, cap, "%.10g", v);
}

/* A compact label for run ids: 65536, 2.5e9 → "2.5e9" (no '+'). */
static void label_num(double v, char *buf, size_t cap) {
    if (v == floor(v) && fabs(v) < 1e9) {
        snprintf(buf, cap, "%.0f", v);
        return;
    }
    char t[64];
    snprintf(t, sizeof t, "%.4g", v);
    size_t k = 0;
    for (const char *p = t; *p && k + 1 < cap; p++)
        if (*p != '+') buf[k++] = *p;
    buf[k] = '\0';
}

/* Appends to the NUL-terminated buf of cap bytes (silently cut at cap: labels only). */
static void append(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t cap, const char *fmt, ...) {
    size_t k = strlen(buf);
    if (k + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + k, cap - k, fmt, ap);
    va_end(ap);
}

/* Keeps [A-Za-z0-9._-], turns anything else into '_'. */
static void sanitize(char *s) {
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '.' ||
              *s == '-' || *s == '_'))
            *s = '_';
}

/* A spec key as a train option name: '_' → '-'. */
static void opt_name(const char *key, char *out, size_t cap) {
    snprintf(out, cap, "%s", key);
    for (char *p = out; *p; p++)
        if (*p == '_') *p = '-';
}

/* Flags the sweep sets per run: refused in base, models and vary (one line saying why). */
static const char *owned_flag(const char *name) {
    static const struct { const char *name, *why; } O[] = {
        {"data", "the spec's top-level \"data\""},
        {"val-data", "the spec's top-level \"val_data\""},
        {"tokenizer", "the spec's top-level \"tokenizer\""},
        {"steps", "tokens / batch tokens of each run"},
        {"warmup", "schedule.warmup_frac x the run's steps"},
        {"min-lr", "schedule.min_lr_frac x lr"},
        {"seed", "the spec's \"seeds\""},
        {"log", "OUT/runs/<id>/log.jsonl"},
        {"ckpt-dir", "OUT/runs/<id>/ckpt"},
        {"resume", "auto (a re-run resumes)"},
        {"stop-after", "the run's own length"},
        {"config", "the spec itself"},
        {"out", "the run directory (no final weights are kept)"},
        {"quiet", "sweep --verbose"},
    };
    for (size_t i = 0; i < sizeof O / sizeof O[0]; i++)
        if (!strcmp(O[i].name, name)) return O[i].why;
    return NULL;
}

/* A growable list of flags. */
typedef struct {
    int n;
    char *a[SWEEP_MAX_ARGS];
} Args;

static void args_clear(Args *a) {
    for (int i = 0; i < a->n; i++) free(a->a[i]);
    a->n = 0;
}

static Status args_push(Args *a, const char *s, Err *err) {
    if (a->n >= SWEEP_MAX_ARGS) return err_set(err, ST_ERR_INPUT, "too many flags for one run (at most %d)", SWEEP_MAX_ARGS);
    if (!(a->a[a->n] = strdup(s))) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    a->n++;
    return ST_OK;
}

static Status args_copy(Args *dst, const Args *src, Err *err) {
    Status st = ST_OK;
    for (int i = 0; i < src->n && st == ST_OK; i++) st = args_push(dst, src->a[i], err);
    return st;
}

/* Removes flag (and its value when it takes one) from a: a later layer of the spec (a model entry,
 * a vary value) replaces base's, as train takes each flag once. */
static void args_remove(Args *a, const char *flag, int has_value) {
    for (int i = 0; i < a->n; i++) {
        if (strcmp(a->a[i], flag)) continue;
        int k = has_value && i + 1 < a->n ? 2 : 1;
        for (int j = i; j < i + k; j++) free(a->a[j]);
        memmove(&a->a[i], &a->a[i + k], (size_t)(a->n - i - k) * sizeof a->a[0]);
        a->n -= k;
        i--;
    }
}

/* ================================================================ the spec */

/* One key: value of a JSON object as train flags appended to a. where: "base", "grid.models[2]",
 * ... for the message. Unknown options, owned flags and values of the wrong kind are refused. */
static Status flag_from_json(const TrainFlagsParser *tp, Args *a, const char *file, const char *where, const cJSON *it,
                              Err *err) {
    char name[128], val[256];
    opt_name(it->string, name, sizeof name);
    int kind = tp->option(name);
    if (kind < 0)
        return err_set(err, ST_ERR_INPUT, "%s: %s.%s: expected an option of scaletrain train (train --help lists them), "
                       "found an unknown key", file, where, it->string);
    const char *why = owned_flag(name);
    if (why) return err_set(err, ST_ERR_INPUT, "%s: %s.%s: set by the sweep (%s); expected it absent", file, where, it->string, why);
    char flag[160];
    snprintf(flag, sizeof flag, "--%s", name);
    args_remove(a, flag, kind != 1); /* this layer's value replaces an earlier one (false: removes it) */
    if (cJSON_IsBool(it)) {
        if (kind != 1)
            return err_set(err, ST_ERR_INPUT, "%s: %s.%s: expected a value for --%s, found a boolean", file, where,
                           it->string, name);
        return cJSON_IsTrue(it) ? args_push(a, flag, err) : ST_OK;
    }
    if (kind == 1)
        return err_set(err, ST_ERR_INPUT, "%s: %s.%s: --%s takes no value: expected true or false", file, where, it->string, name);
    if (cJSON_IsNumber(it)) num_str(it->valuedouble, val, sizeof val);
    else if (cJSON_IsString(it)) snprintf(val, sizeof val, "%s", it->valuestring);
    else
        return err_set(err, ST_ERR_INPUT, "%s: %s.%s: expected a string or a number, found another JSON type", file,
                       where, it->string);
    Status st = args_push(a, flag, err);
    return st == ST_OK ? args_push(a, val, err) : st;
}

/* Refuses any key of object o not in allowed (NULL-terminated). */
static Status only_keys(const cJSON *o, const char *const *allowed, const char *file, const char *where,
                        const char *expected, Err *err) {
    for (const cJSON *it = o->child; it; it = it->next) {
        int ok = 0;
        for (int i = 0; allowed[i] && !ok; i++) ok = !strcmp(allowed[i], it->string);
        if (!ok)
            return err_set(err, ST_ERR_INPUT, "%s: %s\"%s\": expected one of %s, found an unknown key", file, where,
                           it->string, expected);
    }
    return ST_OK;
}

/* A JSON number as the spec wrote it, for error messages (one buffer: one call per message). */
static const char *num_text(const cJSON *n) {
    static char buf[40];
    snprintf(buf, sizeof buf, "%.17g", n->valuedouble);
    return buf;
}

/* An array of numbers > 0 (or >= 0 when zero_ok): *n values into a malloc'd *v. */
static Status num_array(const cJSON *arr, const char *file, const char *key, int positive, double **v, int *n, Err *err) {
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) < 1)
        return err_set(err, ST_ERR_INPUT, "%s: %s: expected a non-empty array of numbers, found %s", file, key,
                       arr ? "another JSON type or an empty array" : "nothing");
    *n = cJSON_GetArraySize(arr);
    if (!(*v = calloc((size_t)*n, sizeof **v))) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    int i = 0;
    for (const cJSON *it = arr->child; it; it = it->next, i++) {
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || (positive && !(it->valuedouble > 0)) || it->valuedouble < 0)
            return err_set(err, ST_ERR_INPUT, "%s: %s[%d]: expected a %s number, found %s", file, key, i,
                           positive ? "positive" : "non-negative",
                           cJSON_IsNumber(it) ? num_text(it) : cJSON_IsString(it) ? "a string" : "another JSON type");
        (*v)[i] = it->valuedouble;
    }
    return ST_OK;
}

/* ================================================================ grid expansion */

/* The axes of the grid after the spec is read. */
typedef struct {
    const char *file;
    const TrainFlagsParser *tp; /* train's flag parser (the sweep's) */
    Args common;              /* base flags (and --data/--val-data/--tokenizer) */
    int nmodels;
    Args *model_args;         /* per model */
    char (*model_label)[64];
    int nsizes;               /* tokens or budgets */
    double *sizes;
    int isoflop;
    int nvary;                /* axes */
    const cJSON *vary[16];
    int nseeds;
    double *seeds;
    int have_seeds;
    double warmup_frac, min_lr_frac;
    const cJSON *base;        /* the spec's base object (NULL: none), read before the models */
    unsigned data_vocab;      /* the training shards' header vocabulary (0: unknown) */
    char data_first[1024];    /* the first training shard, which gave it */
} Grid;

static void grid_free(Grid *g) {
    args_clear(&g->common);
    for (int i = 0; i < g->nmodels && g->model_args; i++) args_clear(&g->model_args[i]);
    free(g->model_args);
    free(g->model_label);
    free(g->sizes);
    free(g->seeds);
}

/* Parses the flags as `scaletrain train` would (quietly, no tokenizer kept). */
static Status parse_flags(const TrainFlagsParser *tp, Args *a, const Comm *comm, TrainFlags *ta, Err *err) {
    Status st = tp->parse(a->n, a->a, comm, ta, err);
    if (st == ST_OK && ta->help) st = err_set(err, ST_ERR_INPUT, "--help in a sweep spec");
    return st;
}

static long long batch_tokens_of(const TrainConfig *c, const Comm *comm) {
    int world = comm ? comm->world : 1, tp = c->tp > 1 ? c->tp : 1, pp = c->pp > 1 ? c->pp : 1;
    int dp = train_grid_dp(world, c->dp, tp, pp); /* 0: a grid train refuses */
    if (dp < 1) dp = 1;
    return (long long)c->micro_batch * c->seq_len * c->grad_accum * dp;
}

/* Adds run (model m, size z, vary combination idx[], seed q) to s. */
static Status add_run(Sweep *s, const Grid *g, int m, int z, const int *vidx, int q, const Comm *comm, Err *err) {
    Args a = {0};
    TrainFlags tf = {0}, *ta = &tf;
    Status st = ST_OK;
    SweepRun *r = &s->runs[s->nruns];
    memset(r, 0, sizeof *r);
    double steps_d = 0; /* tokens / batch tokens before rounding */
    char vary[256] = "", idtail[256] = "";
    if (st == ST_OK) st = args_copy(&a, &g->common, err);
    if (st == ST_OK) st = args_copy(&a, &g->model_args[m], err);
    for (int v = 0; v < g->nvary && st == ST_OK; v++) {
        const cJSON *axis = g->vary[v], *it = cJSON_GetArrayItem(axis, vidx[v]);
        char name[128];
        opt_name(axis->string, name, sizeof name);
        /* flag_from_json reads it->string: a copy of the element named as its axis. */
        cJSON *tmp = cJSON_Duplicate(it, 1);
        if (!tmp) {
            st = err_set(err, ST_ERR_RUNTIME, "out of memory");
            break;
        }
        tmp->string = strdup(axis->string);
        st = flag_from_json(g->tp, &a, g->file, "vary", tmp, err);
        char val[128];
        if (cJSON_IsNumber(it)) label_num(it->valuedouble, val, sizeof val);
        else if (cJSON_IsString(it)) snprintf(val, sizeof val, "%s", it->valuestring);
        else snprintf(val, sizeof val, "%s", cJSON_IsTrue(it) ? "on" : "off");
        cJSON_Delete(tmp);
        append(vary, sizeof vary, "%s%s=%s", vary[0] ? ";" : "", name, val);
        append(idtail, sizeof idtail, "-%s%s", name, val);
    }
    if (st == ST_OK && g->have_seeds) {
        char v[64];
        num_str(g->seeds[q], v, sizeof v);
        if ((st = args_push(&a, "--seed", err)) == ST_OK) st = args_push(&a, v, err);
        append(idtail, sizeof idtail, "-s%s", v);
    }
    /* The run's name and files (before the first parse: --ckpt-every needs --ckpt-dir). */
    if (st == ST_OK) {
        snprintf(r->model, sizeof r->model, "%s", g->model_label[m]);
        snprintf(r->vary, sizeof r->vary, "%s", vary);
        char zl[64], v[1300];
        label_num(g->sizes[z], zl, sizeof zl);
        snprintf(r->id, sizeof r->id, "%s-%s%s%s", r->model, g->isoflop ? "c" : "t", zl, idtail);
        sanitize(r->id);
        snprintf(r->dir, sizeof r->dir, "%s/runs/%s", s->out, r->id);
        for (int i = 0; i < s->nruns && st == ST_OK; i++)
            if (!strcmp(s->runs[i].id, r->id))
                st = err_set(err, ST_ERR_INPUT, "%s: runs %d and %d of the grid are both named %s (model, %s, vary value "
                             "and seed as their ids print them): expected distinct model names, %s, vary values and seeds",
                             g->file, i + 1, s->nruns + 1, r->id, g->isoflop ? "budget" : "tokens",
                             g->isoflop ? "budgets" : "token counts");
        snprintf(v, sizeof v, "%s/log.jsonl", r->dir);
        if (st == ST_OK && (st = args_push(&a, "--log", err)) == ST_OK) st = args_push(&a, v, err);
        snprintf(v, sizeof v, "%s/ckpt", r->dir);
        if (st == ST_OK && (st = args_push(&a, "--ckpt-dir", err)) == ST_OK) st = args_push(&a, v, err);
        if (st == ST_OK && (st = args_push(&a, "--resume", err)) == ST_OK) st = args_push(&a, "auto", err);
    }
    /* First parse: the batch, the model and its FLOPs per token. */
    if (st == ST_OK && (st = parse_flags(g->tp, &a, comm, ta, err)) != ST_OK)
        err_prefix(err, "%s: run %s", g->file, r->id);
    if (st == ST_OK) {
        TrainConfig *c = ta->cfg;
        ModelConfig mc = c->model;
        if (mc.vocab <= 0)
            st = err_set(err, ST_ERR_INPUT, "%s: the vocabulary is unknown before training (FLOPs and parameters need it): "
                         "expected \"tokenizer\" or base.vocab", g->file);
        else if ((st = model_config_validate(&mc, err)) != ST_OK)
            err_prefix(err, "%s: grid.models[%d] (%s)", g->file, m, g->model_label[m]);
        else if (g->data_vocab && (unsigned)mc.vocab < g->data_vocab) /* train would stop at the first batch */
            st = err_set(err, ST_ERR_INPUT, "%s: run %s: a vocabulary of %d: the training shards' tokenizer has %u ids (%s's "
                         "header); expected at least %u", g->file, r->id, mc.vocab, g->data_vocab, g->data_first,
                         g->data_vocab);
        if (st == ST_OK) {
            r->fpt = layout_flops_per_token(&mc, c->seq_len);
            r->params = model_config_num_params(&mc);
            r->batch_tokens = batch_tokens_of(c, comm);
            r->layers = mc.n_layer, r->heads = mc.n_head, r->channels = mc.n_embd;
            char lrs[32];
            snprintf(lrs, sizeof lrs, "%.7g", c->sched.lr); /* the float as written, not its binary tail */
            r->lr = strtod(lrs, NULL);
            r->seed = c->seed;
            r->budget = g->isoflop ? g->sizes[z] : 0;
            r->tokens_requested = g->isoflop ? g->sizes[z] / r->fpt : g->sizes[z];
            /* How many steps a run may have is train's to say: its parser refuses --steps above its
             * limit (the second parse below names the grid value behind it), so the sweep has no
             * limit of its own (it had 1e12 against train's 1e9). A count past a long saturates
             * (llround overflowed into "less than one batch"); train refuses that too. */
            steps_d = r->tokens_requested / (double)r->batch_tokens;
            r->steps = steps_d < 9e18 ? (long)llround(steps_d) : LONG_MAX;
            if (r->steps < 1)
                st = err_set(err, ST_ERR_INPUT, "%s: grid.%s[%d] = %g gives %s %.0f tokens, less than one batch of %lld "
                             "tokens: expected a larger value", g->file, g->isoflop ? "budgets" : "tokens", z, g->sizes[z],
                             g->model_label[m], r->tokens_requested, r->batch_tokens);
            r->tokens = (double)r->steps * (double)r->batch_tokens;
            r->flops = r->fpt * r->tokens;
        }
        /* The sweep's own flags: the run's length and schedule. */
        char v[1300];
        if (st == ST_OK) {
            snprintf(v, sizeof v, "%ld", r->steps);
            if ((st = args_push(&a, "--steps", err)) == ST_OK) st = args_push(&a, v, err);
        }
        if (st == ST_OK) {
            snprintf(v, sizeof v, "%ld", (long)llround(g->warmup_frac * (double)r->steps));
            if ((st = args_push(&a, "--warmup", err)) == ST_OK) st = args_push(&a, v, err);
        }
        if (st == ST_OK && c->sched.kind != SCHED_CONSTANT) {
            snprintf(v, sizeof v, "%.7g", g->min_lr_frac * r->lr); /* a float flag: 7 digits hold it */
            if ((st = args_push(&a, "--min-lr", err)) == ST_OK) st = args_push(&a, v, err);
        }
        if (st == ST_OK) st = args_push(&a, "--quiet", err); /* the last flag: sweep --verbose drops it */
    }
    g->tp->release(ta);
    /* Second parse: the complete command must be one `scaletrain train` accepts, and its config one
     * train_run accepts (checked here for every run, so that a bad value is refused before the
     * first run trains, and by --dry-run and --list). */
    if (st == ST_OK) {
        st = parse_flags(g->tp, &a, comm, ta, err);
        if (st == ST_OK) st = train_validate(ta->cfg, err);
        g->tp->release(ta);
        if (st != ST_OK && !strncmp(err->msg, "--steps:", 8)) { /* the sweep set --steps: name the grid value behind it */
            char *found = strstr(err->msg, ", found "); /* the count is said in the prefix (a saturated one is not it) */
            if (found) *found = '\0';
            char count[48];
            if (r->steps < LONG_MAX) snprintf(count, sizeof count, "%ld", r->steps);
            else snprintf(count, sizeof count, "%.3g", steps_d);
            err_prefix(err, "%s: run %s: grid.%s[%d] = %g gives %s %s steps of %lld tokens", g->file, r->id,
                       g->isoflop ? "budgets" : "tokens", z, g->sizes[z], g->model_label[m], count, r->batch_tokens);
        } else if (st != ST_OK) err_prefix(err, "%s: run %s", g->file, r->id);
    }
    if (st != ST_OK) {
        args_clear(&a);
        return st;
    }
    r->nargs = a.n;
    memcpy(r->args, a.a, sizeof(char *) * (size_t)a.n);
    s->nruns++;
    return ST_OK;
}

/* The models of the grid: a preset name or an object of train options (+ "name"). */
static Status read_models(Grid *g, const cJSON *arr, Err *err) {
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) < 1)
        return err_set(err, ST_ERR_INPUT, "%s: grid.models: expected a non-empty array of presets (\"d2\") or objects "
                       "({\"layers\":..,\"heads\":..,\"channels\":..}), found %s", g->file, arr ? "something else" : "nothing");
    g->nmodels = cJSON_GetArraySize(arr);
    g->model_args = calloc((size_t)g->nmodels, sizeof *g->model_args);
    g->model_label = calloc((size_t)g->nmodels, sizeof *g->model_label);
    if (!g->model_args || !g->model_label) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    int i = 0;
    for (const cJSON *m = arr->child; m; m = m->next, i++) {
        char where[64];
        snprintf(where, sizeof where, "grid.models[%d]", i);
        Args *a = &g->model_args[i];
        Status st = ST_OK;
        if (cJSON_IsString(m)) {
            snprintf(g->model_label[i], sizeof g->model_label[i], "%s", m->valuestring);
            if ((st = args_push(a, "--model", err)) == ST_OK) st = args_push(a, m->valuestring, err);
        } else if (cJSON_IsObject(m)) {
            int L = 0, C = 0;
            for (const cJSON *it = m->child; it && st == ST_OK; it = it->next) {
                if (!strcmp(it->string, "name")) {
                    if (!cJSON_IsString(it))
                        return err_set(err, ST_ERR_INPUT, "%s: %s.name: expected a string", g->file, where);
                    snprintf(g->model_label[i], sizeof g->model_label[i], "%s", it->valuestring);
                    continue;
                }
                /* a key both here and in base: the model's value won without a word */
                const cJSON *bv = g->base ? cJSON_GetObjectItemCaseSensitive(g->base, it->string) : NULL;
                if (bv && !cJSON_Compare(bv, it, 1)) {
                    char *x = cJSON_PrintUnformatted(it), *y = cJSON_PrintUnformatted(bv);
                    st = err_set(err, ST_ERR_INPUT, "%s: %s.%s %s and base.%s %s: expected one of them (the model's "
                                 "would win)", g->file, where, it->string, x ? x : "?", it->string, y ? y : "?");
                    free(x), free(y);
                    return st;
                }
                if (!strcmp(it->string, "layers") && cJSON_IsNumber(it)) L = it->valueint;
                if (!strcmp(it->string, "channels") && cJSON_IsNumber(it)) C = it->valueint;
                if (!strcmp(it->string, "model") && cJSON_IsString(it) && !g->model_label[i][0])
                    snprintf(g->model_label[i], sizeof g->model_label[i], "%s", it->valuestring);
                st = flag_from_json(g->tp, a, g->file, where, it, err);
            }
            if (st == ST_OK && !g->model_label[i][0]) {
                if (!L || !C)
                    return err_set(err, ST_ERR_INPUT, "%s: %s: expected \"layers\" and \"channels\" (or \"model\" or "
                                   "\"name\") to name the model, found neither", g->file, where);
                snprintf(g->model_label[i], sizeof g->model_label[i], "L%dC%d", L, C);
            }
        } else {
            return err_set(err, ST_ERR_INPUT, "%s: %s: expected a preset name or an object, found another JSON type",
                           g->file, where);
        }
        if (st != ST_OK) return st;
        sanitize(g->model_label[i]);
    }
    return ST_OK;
}

static Status read_grid(Grid *g, const cJSON *grid, Err *err) {
    if (!cJSON_IsObject(grid))
        return err_set(err, ST_ERR_INPUT, "%s: grid: expected an object {\"kind\": \"sizes_tokens\" | \"isoflop\", ...}, "
                       "found %s", g->file, grid ? "another JSON type" : "nothing");
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(grid, "kind");
    if (!cJSON_IsString(kind) || (strcmp(kind->valuestring, "sizes_tokens") && strcmp(kind->valuestring, "isoflop")))
        return err_set(err, ST_ERR_INPUT, "%s: grid.kind: expected \"sizes_tokens\" or \"isoflop\", found %s", g->file,
                       cJSON_IsString(kind) ? kind->valuestring : "none");
    g->isoflop = !strcmp(kind->valuestring, "isoflop");
    static const char *const K1[] = {"kind", "models", "tokens", NULL}, *const K2[] = {"kind", "models", "budgets", NULL};
    Status st = only_keys(grid, g->isoflop ? K2 : K1, g->file, "grid.",
                          g->isoflop ? "kind, models, budgets (isoflop)" : "kind, models, tokens (sizes_tokens)", err);
    if (st != ST_OK) return st;
    if ((st = read_models(g, cJSON_GetObjectItemCaseSensitive(grid, "models"), err)) != ST_OK) return st;
    const char *key = g->isoflop ? "budgets" : "tokens";
    char where[32];
    snprintf(where, sizeof where, "grid.%s", key);
    return num_array(cJSON_GetObjectItemCaseSensitive(grid, key), g->file, where, 1, &g->sizes, &g->nsizes, err);
}

static Status read_data(Grid *g, const cJSON *root, const Comm *comm, Err *err) {
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    const cJSON *val = cJSON_GetObjectItemCaseSensitive(root, "val_data");
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(root, "tokenizer");
    if (!cJSON_IsString(data) || !data->valuestring[0])
        return err_set(err, ST_ERR_INPUT, "%s: data: expected training shards (a path or glob) or \"bundled\", found %s",
                       g->file, data ? "another JSON type" : "nothing");
    if (val && !cJSON_IsString(val)) return err_set(err, ST_ERR_INPUT, "%s: val_data: expected a path or glob", g->file);
    if (tok && !cJSON_IsString(tok)) return err_set(err, ST_ERR_INPUT, "%s: tokenizer: expected gpt2, bytes or a directory", g->file);
    Status st = ST_OK;
    if (!strcmp(data->valuestring, "bundled")) {
        if (val || tok)
            return err_set(err, ST_ERR_INPUT, "%s: %s: the bundled corpus brings its validation split and tokenizer "
                           "(bytes): expected it absent", g->file, val ? "val_data" : "tokenizer");
        /* Resolve (and prepare once) the bundled corpus, then name its files explicitly. */
        TrainFlags tf = {0}, *ta = &tf;
        char *none[1] = {NULL};
        st = g->tp->parse(0, none, comm, ta, err);
        if (st == ST_OK && (st = args_push(&g->common, "--data", err)) == ST_OK) st = args_push(&g->common, ta->cfg->data, err);
        if (st == ST_OK && (st = args_push(&g->common, "--val-data", err)) == ST_OK)
            st = args_push(&g->common, ta->cfg->val_data, err);
        if (st == ST_OK && (st = args_push(&g->common, "--tokenizer", err)) == ST_OK)
            st = args_push(&g->common, ta->cfg->tokenizer, err);
        g->tp->release(ta);
        return st;
    }
    const cJSON *globs[2] = {data, val};
    const char *names[2] = {"data", "val_data"};
    for (int i = 0; i < 2; i++) {
        if (!globs[i] || !globs[i]->valuestring[0])
            return err_set(err, ST_ERR_INPUT, "%s: val_data: expected validation shards (each run's loss is its final "
                           "validation loss), found nothing", g->file);
        glob_t gl;
        int rc = glob(globs[i]->valuestring, 0, NULL, &gl);
        size_t n = rc == 0 ? gl.gl_pathc : 0;
        Shard sh;
        Err se;
        if (i == 0 && n && shard_open(&sh, gl.gl_pathv[0], &se) == ST_OK) { /* its tokenizer's size, for base.vocab */
            g->data_vocab = sh.meta.vocab_size;
            snprintf(g->data_first, sizeof g->data_first, "%s", gl.gl_pathv[0]);
            shard_close(&sh);
        }
        if (rc == 0) globfree(&gl);
        if (n == 0)
            return err_set(err, ST_ERR_INPUT, "%s: %s: expected shard files, found none matching %s", g->file, names[i],
                           globs[i]->valuestring);
    }
    if ((st = args_push(&g->common, "--data", err)) == ST_OK) st = args_push(&g->common, data->valuestring, err);
    if (st == ST_OK && (st = args_push(&g->common, "--val-data", err)) == ST_OK) st = args_push(&g->common, val->valuestring, err);
    if (st == ST_OK && tok && (st = args_push(&g->common, "--tokenizer", err)) == ST_OK)
        st = args_push(&g->common, tok->valuestring, err);
    return st;
}

static Status read_spec(Sweep *s, Grid *g, const cJSON *root, const Comm *comm, Err *err) {
    const char *f = g->file;
    if (!cJSON_IsObject(root)) return err_set(err, ST_ERR_INPUT, "%s: expected a JSON object (the sweep spec), found another JSON value", f);
    static const char *const TOP[] = {"name", "data", "val_data", "tokenizer", "base", "grid", "schedule", "seeds", "vary", NULL};
    Status st = only_keys(root, TOP, f, "", "name, data, val_data, tokenizer, base, grid, schedule, seeds, vary", err);
    if (st != ST_OK) return st;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
    if (!cJSON_IsString(name) || !name->valuestring[0])
        return err_set(err, ST_ERR_INPUT, "%s: name: expected a non-empty string, found %s", f, name ? "another value" : "nothing");
    for (const char *c = name->valuestring; *c; c++) /* it names the default OUT folder, sweep-<name> */
        if (!(isalnum((unsigned char)*c) || *c == '-' || *c == '_' || *c == '.') || !strcmp(name->valuestring, ".."))
            return err_set(err, ST_ERR_INPUT, "%s: name: expected letters, digits, '-', '_' or '.' (it names the folder "
                           "sweep-<name>), found \"%.80s\"", f, name->valuestring);
    snprintf(s->name, sizeof s->name, "%s", name->valuestring);
    if ((st = read_data(g, root, comm, err)) != ST_OK) return st;
    const cJSON *base = cJSON_GetObjectItemCaseSensitive(root, "base");
    if (base && !cJSON_IsObject(base)) return err_set(err, ST_ERR_INPUT, "%s: base: expected an object of train options", f);
    for (const cJSON *it = base ? base->child : NULL; it && st == ST_OK; it = it->next)
        st = flag_from_json(g->tp, &g->common, f, "base", it, err);
    g->base = base;
    if (st != ST_OK) return st;
    if ((st = read_grid(g, cJSON_GetObjectItemCaseSensitive(root, "grid"), err)) != ST_OK) return st;
    snprintf(s->kind, sizeof s->kind, "%s", g->isoflop ? "isoflop" : "sizes_tokens");
    g->warmup_frac = 0.0, g->min_lr_frac = 0.1;
    const cJSON *sch = cJSON_GetObjectItemCaseSensitive(root, "schedule");
    if (sch) {
        static const char *const K[] = {"warmup_frac", "min_lr_frac", NULL};
        if (!cJSON_IsObject(sch)) return err_set(err, ST_ERR_INPUT, "%s: schedule: expected an object {\"warmup_frac\", \"min_lr_frac\"}", f);
        if ((st = only_keys(sch, K, f, "schedule.", "warmup_frac, min_lr_frac", err)) != ST_OK) return st;
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(sch, "warmup_frac"), *m = cJSON_GetObjectItemCaseSensitive(sch, "min_lr_frac");
        if (w && (!cJSON_IsNumber(w) || w->valuedouble < 0 || w->valuedouble >= 1))
            return err_set(err, ST_ERR_INPUT, "%s: schedule.warmup_frac: expected a number in [0, 1), found %s", f,
                           cJSON_IsNumber(w) ? num_text(w) : "another JSON type");
        if (m && (!cJSON_IsNumber(m) || m->valuedouble < 0 || m->valuedouble > 1))
            return err_set(err, ST_ERR_INPUT, "%s: schedule.min_lr_frac: expected a number in [0, 1], found %s", f,
                           cJSON_IsNumber(m) ? num_text(m) : "another JSON type");
        if (w) g->warmup_frac = w->valuedouble;
        if (m) g->min_lr_frac = m->valuedouble;
    }
    const cJSON *seeds = cJSON_GetObjectItemCaseSensitive(root, "seeds");
    if (seeds) {
        if ((st = num_array(seeds, f, "seeds", 0, &g->seeds, &g->nseeds, err)) != ST_OK) return st;
        for (int i = 0; i < g->nseeds; i++)
            if (g->seeds[i] != floor(g->seeds[i]))
                return err_set(err, ST_ERR_INPUT, "%s: seeds[%d]: expected an integer, found %g", f, i, g->seeds[i]);
        g->have_seeds = 1;
    } else {
        g->nseeds = 1;
    }
    const cJSON *vary = cJSON_GetObjectItemCaseSensitive(root, "vary");
    if (vary) {
        if (!cJSON_IsObject(vary)) return err_set(err, ST_ERR_INPUT, "%s: vary: expected an object {\"option\": [values]}", f);
        for (const cJSON *it = vary->child; it; it = it->next) {
            if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) < 1)
                return err_set(err, ST_ERR_INPUT, "%s: vary.%s: expected a non-empty array of values", f, it->string);
            if (g->nvary >= 16) return err_set(err, ST_ERR_INPUT, "%s: vary: expected at most 16 axes", f);
            static const char *const SHAPE[] = {"model", "layers", "channels", "heads", "kv_heads", "ffn", "arch", NULL};
            for (int k = 0; SHAPE[k]; k++) /* the model's name and columns are its grid entry's */
                if (!strcmp(it->string, SHAPE[k]))
                    return err_set(err, ST_ERR_INPUT, "%s: vary.%s: a model's shape; expected one grid.models entry per "
                                   "shape (the runs were labelled with the model's, not the varied one)", f, it->string);
            g->vary[g->nvary++] = it;
        }
    }
    return ST_OK;
}

/* The first key that appears twice in one object of the tree at o (NULL: none), its object's path
 * ("base.", "grid.models[1].") into path: cJSON keeps both, and `base` passed both to train. */
static const char *dup_key(const cJSON *o, char *path, size_t cap) {
    if (cJSON_IsObject(o))
        for (const cJSON *a = o->child; a; a = a->next)
            for (const cJSON *b = a->next; b; b = b->next)
                if (a->string && b->string && !strcmp(a->string, b->string)) return a->string;
    size_t l = strlen(path);
    int i = 0;
    for (const cJSON *c = o ? o->child : NULL; c; c = c->next, i++) {
        if (!cJSON_IsObject(c) && !cJSON_IsArray(c)) continue;
        if (cJSON_IsObject(o)) snprintf(path + l, cap - l, "%s.", c->string);
        else if (l > 0) snprintf(path + l - 1, cap - l + 1, "[%d].", i);
        else snprintf(path, cap, "[%d].", i);
        const char *d = dup_key(c, path, cap);
        if (d) return d;
        path[l] = '\0';
    }
    return NULL;
}

Status sweep_load(Sweep *s, const char *path, const char *out, const Comm *comm, const TrainFlagsParser *tp, Err *err) {
    memset(s, 0, sizeof *s);
    s->tp = tp;
    snprintf(s->path, sizeof s->path, "%s", path);
    snprintf(s->out, sizeof s->out, "%s", out);
    char *text = NULL;
    size_t len = 0;
    Status st = file_read_all(path, &text, &len, err);
    if (st != ST_OK) { /* file_read_all's reason, after the path it names first */
        char why[sizeof err->msg];
        size_t pl = strlen(path);
        snprintf(why, sizeof why, "%s", !strncmp(err->msg, path, pl) && !strncmp(err->msg + pl, ": ", 2) ? err->msg + pl + 2 : err->msg);
        if (!strncmp(why, "expected a file, found ", 23))
            return err_set(err, ST_ERR_INPUT, "%s: expected a sweep spec (JSON), found %s", path, why + 23);
        return err_set(err, ST_ERR_INPUT, "%s: expected a sweep spec (JSON), found none (%s)", path, why);
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        int line = 1;
        for (const char *p = text; end && p < end; p++) line += *p == '\n';
        free(text);
        return err_set(err, ST_ERR_INPUT, "%s: expected JSON, found invalid JSON near line %d", path, line);
    }
    free(text);
    char dpath[256] = "";
    const char *dup = dup_key(root, dpath, sizeof dpath);
    if (dup) {
        st = err_set(err, ST_ERR_INPUT, "%s: %s\"%s\": expected each key once, found it twice (JSON keeps both; which "
                     "one would count?)", path, dpath, dup);
        cJSON_Delete(root);
        return st;
    }
    Grid g;
    memset(&g, 0, sizeof g);
    g.file = path, g.tp = tp;
    st = read_spec(s, &g, root, comm, err);
    long total = (long)g.nmodels * g.nsizes * g.nseeds;
    for (int v = 0; v < g.nvary; v++) total *= cJSON_GetArraySize(g.vary[v]);
    if (st == ST_OK && total > 4096) st = err_set(err, ST_ERR_INPUT, "%s: the grid has %ld runs: expected at most 4096", path, total);
    if (st == ST_OK && !(s->runs = calloc((size_t)total, sizeof *s->runs))) st = err_set(err, ST_ERR_RUNTIME, "out of memory");
    /* Models outermost, then sizes, vary axes (last fastest), seeds. */
    for (int m = 0; m < g.nmodels && st == ST_OK; m++)
        for (int z = 0; z < g.nsizes && st == ST_OK; z++) {
            int idx[16] = {0};
            for (;;) {
                for (int q = 0; q < g.nseeds && st == ST_OK; q++) st = add_run(s, &g, m, z, idx, q, comm, err);
                int v = g.nvary - 1;
                while (v >= 0 && ++idx[v] == cJSON_GetArraySize(g.vary[v])) idx[v--] = 0;
                if (v < 0 || st != ST_OK) break;
            }
        }
    grid_free(&g);
    cJSON_Delete(root);
    if (st != ST_OK) sweep_free(s);
    return st;
}

void sweep_free(Sweep *s) {
    for (int i = 0; s->runs && i < s->nruns; i++)
        for (int k = 0; k < s->runs[i].nargs; k++) free(s->runs[i].args[k]);
    free(s->runs);
    s->runs = NULL;
    s->nruns = 0;
}

int sweep_find(const Sweep *s, const char *id) {
    for (int i = 0; i < s->nruns; i++)
        if (!strcmp(s->runs[i].id, id)) return i;
    return -1;
}

/* ================================================================ command lines, dry run */

void sweep_command_line(const SweepRun *r, const char *exe, char *buf, size_t cap) {
    buf[0] = '\0';
    shell_word_append(buf, cap, exe);
    shell_word_append(buf, cap, "train");
    for (int i = 0; i < r->nargs; i++) shell_word_append(buf, cap, r->args[i]);
}

/* The run's training settings as train words: its command less the flags the sweep derives from
 * where OUT is (--log, --ckpt-dir), --resume and --quiet. done.json records them; a finished run is
 * skipped only while they are the spec's (the same run id can be trained by other settings: a base
 * lr, a model's heads, a study's flags outside its ids). */
static void run_settings(const SweepRun *r, char *buf, size_t cap) {
    buf[0] = '\0';
    for (int i = 0; i < r->nargs; i++) {
        const char *a = r->args[i];
        if (!strcmp(a, "--quiet")) continue;
        if ((!strcmp(a, "--log") || !strcmp(a, "--ckpt-dir") || !strcmp(a, "--resume")) && i + 1 < r->nargs) {
            i++;
            continue;
        }
        shell_word_append(buf, cap, a);
    }
}

/* The flags (with their values) of settings a that b lacks, into out: "--lr 0.003 --heads 2". Words
 * split at spaces (a quoted value with a space splits too: the message stays readable). */
static void settings_missing(const char *a, const char *b, char *out, size_t cap) {
    out[0] = '\0';
    char wa[8192], wb[8192];
    snprintf(wa, sizeof wa, " %s ", a), snprintf(wb, sizeof wb, " %s ", b);
    for (char *p = wa + 1; *p;) {
        char *e = strchr(p, ' ');
        if (!e) break;
        char *f = e; /* a flag takes the word after it, unless that is a flag */
        if (!strncmp(p, "--", 2) && f[1] && strncmp(f + 1, "--", 2)) f = strchr(f + 1, ' ');
        if (!f) break;
        char item[1024];
        snprintf(item, sizeof item, " %.*s ", (int)(f - p), p);
        if (!strstr(wb, item)) append(out, cap, "%s%.*s", out[0] ? " " : "", (int)(f - p), p);
        p = f + 1;
    }
}

/* A finished run's done.json against the spec: ST_OK when it records these settings (or none: written
 * before they were recorded), else ST_ERR_INPUT naming the file, both settings and the way out. A
 * done.json that is not a finished run's record is the same error: skipped, it would fail the table. */
static Status check_done(const SweepRun *r, const char *path, Err *err) {
    char *text = NULL;
    size_t len = 0;
    if (file_read_all(path, &text, &len, err) != ST_OK) return ST_ERR_INPUT;
    cJSON *o = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *set = o ? cJSON_GetObjectItemCaseSensitive(o, "settings") : NULL;
    Status st = ST_OK;
    if (!cJSON_IsObject(o) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "run")))
        st = err_set(err, ST_ERR_INPUT, "%s: expected a finished run's record (JSON with \"run\"), found something else; "
                     "remove it (or the run's folder %s) to train the run again", path, r->dir);
    else if (set) {
        char want[8192];
        run_settings(r, want, sizeof want);
        if (!cJSON_IsString(set) || strcmp(set->valuestring, want)) {
            char had[2048] = "?", now[2048] = "";
            if (cJSON_IsString(set)) settings_missing(set->valuestring, want, had, sizeof had);
            settings_missing(want, cJSON_IsString(set) ? set->valuestring : "", now, sizeof now);
            st = err_set(err, ST_ERR_INPUT, "%s: run %s was trained with other settings (%s) than the spec gives now "
                         "(%s); remove %s to train it again, or give another --out", path, r->id, had[0] ? had : "fewer flags",
                         now[0] ? now : "fewer flags", r->dir);
        }
    }
    cJSON_Delete(o);
    return st;
}

Status sweep_plan_run(const Sweep *s, int i, const Comm *comm, SweepRunPlan *out, Err *err) {
    const SweepRun *r = &s->runs[i];
    TrainFlags tf = {0}, *ta = &tf;
    Args a = {0};
    a.n = r->nargs;
    memcpy(a.a, r->args, sizeof(char *) * (size_t)r->nargs);
    Status st = parse_flags(s->tp, &a, comm, ta, err);
    PlanInput pi;
    PlanResult *pr = calloc(1, sizeof *pr);
    if (st == ST_OK && !pr) st = err_set(err, ST_ERR_RUNTIME, "out of memory");
    if (st == ST_OK) {
        ModelConfig mc = ta->cfg->model;
        model_config_validate(&mc, err);
        ta->cfg->model = mc;
        int world = comm ? comm->world : 1, tp = ta->cfg->tp > 1 ? ta->cfg->tp : 1, pp = ta->cfg->pp > 1 ? ta->cfg->pp : 1;
        int dp = train_grid_dp(world, ta->cfg->dp, tp, pp);
        train_plan_input(ta->cfg, dp < 1 ? 1 : dp, tp, pp, comm && comm->one_node ? world : 1, 0, &pi);
        st = plan_predict_step(&pi, pr, err);
    }
    s->tp->release(ta);
    if (st != ST_OK) {
        free(pr);
        return err_prefix(err, "run %s: plan", r->id), st;
    }
    char done[1300];
    snprintf(done, sizeof done, "%s/done.json", r->dir);
    out->memory_bytes = pr->mem.total;
    out->predicted_s = pr->compute.step * (double)r->steps;
    out->done = file_exists(done);
    free(pr);
    return out->done ? check_done(r, done, err) : ST_OK;
}

/* ================================================================ execution */

/* The step of the newest valid checkpoint in dir (0: none). */
static long newest_ckpt_step(const char *dir) {
    char path[4096] = "", note[512];
    Err e;
    if (!file_exists(dir) || ckpt_resolve(dir, "auto", path, sizeof path, note, sizeof note, &e) != ST_OK || !path[0])
        return 0;
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    long step = 0;
    return sscanf(b, "step_%ld", &step) == 1 ? step : 0;
}

/* done.json of a finished run (rank 0), written atomically. */
static Status write_done(const SweepRun *r, const TrainResult *res, double wall_s, const char *failure, Err *err) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    /* a failed run: the steps it trained (its start's and this call's), not the ones planned */
    long steps = failure ? res->start_step + res->steps_done : r->steps;
    double tokens = failure ? (double)steps * (double)r->batch_tokens : r->tokens;
    cJSON_AddStringToObject(o, "run", r->id);
    cJSON_AddNumberToObject(o, "params", (double)r->params);
    cJSON_AddNumberToObject(o, "tokens", tokens);
    cJSON_AddNumberToObject(o, "flops", failure ? r->fpt * tokens : r->flops);
    if (isfinite(res->last_val) && !failure) cJSON_AddNumberToObject(o, "loss", res->last_val);
    else cJSON_AddNullToObject(o, "loss");
    cJSON_AddNumberToObject(o, "steps", (double)steps);
    cJSON_AddNumberToObject(o, "batch_tokens", (double)r->batch_tokens);
    cJSON_AddNumberToObject(o, "flops_per_token", r->fpt);
    cJSON_AddNumberToObject(o, "budget", r->budget);
    cJSON_AddNumberToObject(o, "tokens_requested", r->tokens_requested);
    cJSON_AddStringToObject(o, "model", r->model);
    cJSON_AddNumberToObject(o, "layers", r->layers);
    cJSON_AddNumberToObject(o, "heads", r->heads);
    cJSON_AddNumberToObject(o, "channels", r->channels);
    cJSON_AddNumberToObject(o, "lr", r->lr);
    cJSON_AddNumberToObject(o, "seed", (double)r->seed);
    cJSON_AddStringToObject(o, "vary", r->vary);
    if (isfinite(res->last_loss)) cJSON_AddNumberToObject(o, "train_loss", res->last_loss);
    else cJSON_AddNullToObject(o, "train_loss");
    cJSON_AddNumberToObject(o, "wall_s", wall_s);
    cJSON_AddNumberToObject(o, "resumed_from_step", (double)res->start_step);
    cJSON_AddNumberToObject(o, "spikes", (double)res->spikes);
    char status[1100];
    snprintf(status, sizeof status, "failed: %s", failure ? failure : "");
    cJSON_AddStringToObject(o, "status", failure ? status : "ok");
    char cmd[8192];
    sweep_command_line(r, "scaletrain", cmd, sizeof cmd);
    cJSON_AddStringToObject(o, "command", cmd);
    run_settings(r, cmd, sizeof cmd);
    cJSON_AddStringToObject(o, "settings", cmd);
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!txt) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    char path[1300];
    snprintf(path, sizeof path, "%s/done.json", r->dir);
    const void *bufs[2] = {txt, "\n"};
    size_t lens[2] = {strlen(txt), 1};
    Status st = file_write_atomic(path, bufs, lens, 2, err);
    free(txt);
    return st;
}

Status sweep_execute(const Sweep *s, Comm *comm, const SweepExecOptions *o, SweepExecResult *res, Err *err) {
    memset(res, 0, sizeof *res);
    Status st = file_mkdirs(s->out, err);
    if (st != ST_OK) return st;
    int root = is_root(comm), n = o->only >= 0 ? 1 : s->nruns;
    TrainFlags tf = {0}, *ta = &tf;
    /* Every finished run's record against the spec before anything trains: a mismatch found after
     * hours of other runs would be found late. */
    for (int k = 0; k < n && st == ST_OK; k++) {
        const SweepRun *r = &s->runs[o->only >= 0 ? o->only : k];
        char done[1300];
        snprintf(done, sizeof done, "%s/done.json", r->dir);
        if (file_exists(done)) st = check_done(r, done, err);
    }
    for (int k = 0; k < n && st == ST_OK; k++) {
        int i = o->only >= 0 ? o->only : k;
        const SweepRun *r = &s->runs[i];
        char done[1300], ckdir[1300], log[1300];
        snprintf(done, sizeof done, "%s/done.json", r->dir);
        snprintf(ckdir, sizeof ckdir, "%s/ckpt", r->dir);
        snprintf(log, sizeof log, "%s/log.jsonl", r->dir);
        if (file_exists(done)) {
            if (root) printf("sweep: [%d/%d] %s: done (done.json), skipped\n", i + 1, s->nruns, r->id);
            res->skipped++;
            continue;
        }
        if ((st = file_mkdirs(r->dir, err)) != ST_OK) break;
        /* A final checkpoint without done.json: the run ended but its final validation was not
         * recorded (done.json deleted, or a crash in between). Resuming there would train no step
         * and validate nothing, so the run starts again from scratch. */
        long have = newest_ckpt_step(ckdir);
        if (have >= r->steps) {
            if (comm) comm_barrier(comm, err);
            if (root) {
                file_rm_tree(ckdir);
                remove(log);
                printf("sweep: [%d/%d] %s: a final checkpoint (step %ld) but no done.json: trained again from scratch\n",
                       i + 1, s->nruns, r->id, have);
            }
            if (comm) comm_barrier(comm, err);
            res->restarted++;
            have = 0;
        }
        Args a = {0};
        a.n = r->nargs;
        memcpy(a.a, r->args, sizeof(char *) * (size_t)r->nargs);
        if (o->verbose) a.n--; /* the trailing --quiet */
        st = parse_flags(s->tp, &a, comm, ta, err);
        if (st != ST_OK) {
            s->tp->release(ta);
            err_prefix(err, "run %s", r->id);
            break;
        }
        TrainConfig c = *ta->cfg;
        c.comm = comm;
        c.handle_signals = 1;
        if (o->test_stop_after > 0) c.stop_after = o->test_stop_after;
        if (root) {
            if (have > 0) printf("sweep: [%d/%d] %s: resuming from its checkpoint at step %ld of %ld\n", i + 1, s->nruns, r->id, have, r->steps);
            else printf("sweep: [%d/%d] %s: %lld params, %.0f tokens, %ld steps, %.3e FLOPs\n", i + 1, s->nruns, r->id,
                        r->params, r->tokens, r->steps, r->flops);
            fflush(stdout);
        }
        double t0 = timer_ms();
        TrainResult tr;
        memset(&tr, 0, sizeof tr);
        st = train_run(&c, &tr, err);
        s->tp->release(ta);
        double wall = (timer_ms() - t0) * 1e-3;
        if (st == ST_ERR_RUNTIME && tr.steps_done > 0) {
            /* The run trained and then failed (diverged past --max-nonfinite, a spike cap): a
             * result of the grid, recorded as such; the sweep goes on. */
            if (root) {
                printf("sweep: [%d/%d] %s: failed after step %ld: %s\n", i + 1, s->nruns, r->id, tr.steps_done, err->msg);
                if ((st = write_done(r, &tr, wall, err->msg, err)) != ST_OK) break;
                int rows = 0;
                if ((st = sweep_write_results(s, &rows, err)) != ST_OK) break;
            }
            st = ST_OK;
            res->failed++;
            continue;
        }
        if (st != ST_OK) {
            err_prefix(err, "run %s", r->id);
            break;
        }
        if (tr.preempted) {
            res->interrupted = 1;
            snprintf(res->interrupted_id, sizeof res->interrupted_id, "%s", r->id);
            break;
        }
        res->trained++;
        if (root) {
            if ((st = write_done(r, &tr, wall, NULL, err)) != ST_OK) break;
            int rows = 0;
            if ((st = sweep_write_results(s, &rows, err)) != ST_OK) break;
            printf("sweep: [%d/%d] %s: validation loss %.4f after %ld steps (%.1f s); results: %d rows\n", i + 1, s->nruns,
                   r->id, tr.last_val, r->steps, wall, rows);
            fflush(stdout);
        }
    }
    if (st == ST_OK && root && res->trained == 0) {
        int rows = 0;
        st = sweep_write_results(s, &rows, err); /* the table exists even when every run was skipped */
    }
    return st;
}

/* ================================================================ the results table */

/* Columns of results.csv, in order; each is also a key of results.jsonl and done.json. */
static const char *const COLS[] = {"run", "params", "tokens", "flops", "loss", "steps", "batch_tokens",
                                   "flops_per_token", "budget", "tokens_requested", "model", "layers", "heads",
                                   "channels", "lr", "seed", "vary", "train_loss", "wall_s", "resumed_from_step", "status"};
#define NCOLS (sizeof COLS / sizeof COLS[0])

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} Text;

static void text_add(Text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(Text *t, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(t->p ? t->p + t->n : NULL, t->p ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            t->oom = 1;
            return;
        }
        if (t->p && t->n + (size_t)k < t->cap) {
            t->n += (size_t)k;
            return;
        }
        size_t cap = (t->cap + (size_t)k + 1) * 2;
        char *q = realloc(t->p, cap);
        if (!q) {
            t->oom = 1;
            return;
        }
        t->p = q, t->cap = cap;
    }
}

Status sweep_write_results(const Sweep *s, int *rows, Err *err) {
    Text csv = {0}, jl = {0};
    *rows = 0;
    for (size_t c = 0; c < NCOLS; c++) text_add(&csv, "%s%s", c ? "," : "", COLS[c]);
    text_add(&csv, "\n");
    text_add(&jl, "%s", "");
    for (int i = 0; i < s->nruns; i++) {
        char path[1300], *txt = NULL;
        size_t len;
        Err e;
        snprintf(path, sizeof path, "%s/done.json", s->runs[i].dir);
        if (!file_exists(path) || file_read_all(path, &txt, &len, &e) != ST_OK) continue;
        cJSON *o = cJSON_Parse(txt);
        free(txt);
        if (!cJSON_IsObject(o)) {
            cJSON_Delete(o);
            free(csv.p), free(jl.p);
            return err_set(err, ST_ERR_RUNTIME, "%s: expected a JSON object (a finished run's record), found something else", path);
        }
        cJSON *row = cJSON_CreateObject();
        for (size_t c = 0; c < NCOLS; c++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, COLS[c]);
            if (c) text_add(&csv, ",");
            if (cJSON_IsString(v) && strpbrk(v->valuestring, ",\"\n")) { /* RFC 4180 quoting */
                text_add(&csv, "\"");
                for (const char *q = v->valuestring; *q; q++) text_add(&csv, *q == '"' ? "\"\"" : *q == '\n' ? " " : "%c", *q);
                text_add(&csv, "\"");
            } else if (cJSON_IsString(v)) text_add(&csv, "%s", v->valuestring);
            else if (cJSON_IsNumber(v)) text_add(&csv, "%.17g", v->valuedouble);
            cJSON_AddItemToObject(row, COLS[c], v ? cJSON_Duplicate(v, 1) : cJSON_CreateNull());
        }
        text_add(&csv, "\n");
        char *line = cJSON_PrintUnformatted(row);
        if (line) text_add(&jl, "%s\n", line);
        else jl.oom = 1;
        free(line);
        cJSON_Delete(row);
        cJSON_Delete(o);
        (*rows)++;
    }
    Status st = csv.oom || jl.oom ? err_set(err, ST_ERR_RUNTIME, "out of memory") : ST_OK;
    char path[1100];
    if (st == ST_OK) {
        snprintf(path, sizeof path, "%s/results.csv", s->out);
        const void *b[1] = {csv.p};
        size_t l[1] = {csv.n};
        st = file_write_atomic(path, b, l, 1, err);
    }
    if (st == ST_OK) {
        snprintf(path, sizeof path, "%s/results.jsonl", s->out);
        const void *b[1] = {jl.p ? jl.p : ""};
        size_t l[1] = {jl.n};
        st = file_write_atomic(path, b, l, 1, err);
    }
    free(csv.p), free(jl.p);
    return st;
}

/* ================================================================ the page */

Status sweep_write_page(const Sweep *s, Err *err) {
    int n = s->nruns;
    double *tok = calloc((size_t)n * 4, sizeof(double)), *flops = tok + n, *loss = tok + 2 * n, *params = tok + 3 * n;
    char (*label)[400] = calloc((size_t)n, sizeof *label);
    const char **cells = calloc((size_t)n * 7, sizeof *cells);
    char (*text)[7][160] = calloc((size_t)n, sizeof *text);
    if (!tok || !label || !cells || !text) {
        free(tok), free(label), free(cells), free(text);
        return err_set(err, ST_ERR_RUNTIME, "out of memory");
    }
    int rows = 0;
    for (int i = 0; i < n; i++) {
        char path[1300], *t = NULL;
        size_t len;
        Err e;
        tok[i] = flops[i] = loss[i] = params[i] = NAN;
        snprintf(path, sizeof path, "%s/done.json", s->runs[i].dir);
        if (!file_exists(path) || file_read_all(path, &t, &len, &e) != ST_OK) continue;
        cJSON *o = cJSON_Parse(t);
        free(t);
        const cJSON *l = cJSON_GetObjectItem(o, "loss");
        tok[i] = s->runs[i].tokens, flops[i] = s->runs[i].flops, params[i] = (double)s->runs[i].params;
        loss[i] = cJSON_IsNumber(l) ? l->valuedouble : NAN;
        cJSON_Delete(o);
        snprintf(text[rows][0], 160, "%s", s->runs[i].id);
        snprintf(text[rows][1], 160, "%lld", s->runs[i].params);
        snprintf(text[rows][2], 160, "%.0f", s->runs[i].tokens);
        snprintf(text[rows][3], 160, "%.4g", s->runs[i].flops);
        snprintf(text[rows][4], 160, "%ld", s->runs[i].steps);
        snprintf(text[rows][5], 160, "%.4g", s->runs[i].lr);
        if (isfinite(loss[i])) snprintf(text[rows][6], 160, "%.4f", loss[i]);
        else snprintf(text[rows][6], 160, "failed");
        for (int c = 0; c < 7; c++) cells[rows * 7 + c] = text[rows][c];
        rows++;
    }
    char sub[2200];
    snprintf(sub, sizeof sub, "scaletrain sweep %s: %d of %d runs done; the table is %s/results.csv", s->path, rows,
             s->nruns, s->out);
    FigPage *page = fig_page_new(s->name, sub);
    int iso = !strcmp(s->kind, "isoflop");
    /* One series per model (and vary setting) over tokens and FLOPs; IsoFLOP: one per budget over params. */
    FigChart *c1 = iso ? fig_chart(page, "chart-isoflop", "Validation loss vs parameters at fixed compute",
                                   "One line per compute budget C (D = C / FLOPs per token).", "parameters",
                                   "validation loss", 1, 0)
                       : fig_chart(page, "chart-loss-tokens", "Validation loss vs tokens", "One line per model.",
                                   "tokens", "validation loss", 1, 0);
    FigChart *c2 = fig_chart(page, "chart-loss-flops", "Validation loss vs training FLOPs",
                             "FLOPs = layout_flops_per_token(model, T) x tokens.", "FLOPs", "validation loss", 1, 0);
    for (int i = 0; i < n; i++) {
        if (iso) snprintf(label[i], sizeof label[i], "C=%.3g%s%s", s->runs[i].budget, s->runs[i].vary[0] ? " " : "", s->runs[i].vary);
        else snprintf(label[i], sizeof label[i], "%s%s%s", s->runs[i].model, s->runs[i].vary[0] ? " " : "", s->runs[i].vary);
    }
    double *xs = malloc(sizeof(double) * (size_t)n * 3), *ys = xs + n, *zs = xs + 2 * n;
    for (int i = 0; xs && i < n; i++) {
        int first = 1;
        for (int j = 0; j < i && first; j++) first = strcmp(label[j], label[i]) != 0;
        if (!first) continue;
        size_t m = 0;
        for (int j = i; j < n; j++)
            if (!strcmp(label[j], label[i]) && isfinite(loss[j])) xs[m] = iso ? params[j] : tok[j], ys[m] = loss[j], zs[m++] = flops[j];
        if (!m) continue;
        fig_series(c1, label[i], xs, ys, m, 0);
        fig_series(c2, label[i], zs, ys, m, 0);
    }
    free(xs);
    const char *hdr[7] = {"run", "params", "tokens", "FLOPs", "steps", "lr", "val loss"};
    fig_table(page, "results", hdr, 7, cells, rows);
    char *html = NULL;
    size_t len = 0;
    Status st = fig_render(page, &html, &len, err);
    if (st == ST_OK) {
        char path[1100];
        snprintf(path, sizeof path, "%s/index.html", s->out);
        const void *b[1] = {html};
        size_t l[1] = {len};
        st = file_write_atomic(path, b, l, 1, err);
    }
    free(html);
    fig_page_free(page);
    free(tok), free(label), free(cells), free(text);
    return st;
}
