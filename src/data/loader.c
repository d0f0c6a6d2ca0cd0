/* loader.c — datasets, mixing pattern, epoch permutations, packed and no-pack rows (see loader.h).
 *
 * Contents: 1. the --data spec  2. opening a dataset (shards, no-pack rows)  3. the mixing pattern
 *           4. open / close / queries  5. sample -> row -> tokens. */
#include "data/loader.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fileio.h"
#include "core/rng.h"

/* ================================================================== 1. the --data spec */

/* Splits item "PATTERN:W" into pattern and weight; *has_weight = 0 when there is no ":number"
 * suffix (a colon that is part of a path is kept). */
static int parse_item(const char *item, size_t len, char *pat, size_t patlen, double *w, int *has_weight) {
    *has_weight = 0;
    size_t pl = len;
    const char *colon = NULL;
    for (size_t i = len; i > 0; i--)
        if (item[i - 1] == ':') {
            colon = item + i - 1;
            break;
        }
    if (colon) {
        char num[64];
        size_t nl = len - (size_t)(colon + 1 - item);
        if (nl > 0 && nl < sizeof num) {
            memcpy(num, colon + 1, nl);
            num[nl] = 0;
            char *end;
            errno = 0;
            double v = strtod(num, &end);
            if (!errno && *end == 0) {
                *w = v;
                *has_weight = 1;
                pl = (size_t)(colon - item);
            }
        }
    }
    if (pl == 0 || pl >= patlen) return -1;
    memcpy(pat, item, pl);
    pat[pl] = 0;
    return 0;
}

/* ================================================================== 2. one dataset */

/* The --tokenizer a shard was prepared with, from the manifest.json prepare wrote beside it: its
 * tokenizer.name (since 2026-11-29), else the value of --tokenizer in its "command" (prepare's
 * default gpt2 when absent), else its tokenizer.kind; only when the manifest's hash is the shard's.
 * 0 when unknown. */
/* name in the directory of shard_path ("dir/name", or "name" for a bare file name). */
static void beside_shard(char *out, size_t cap, const char *shard_path, const char *name) {
    const char *slash = strrchr(shard_path, '/');
    if (slash) snprintf(out, cap, "%.*s/%s", (int)(slash - shard_path), shard_path, name);
    else snprintf(out, cap, "%s", name);
}

/* The manifest.json prepare wrote beside shard_path, parsed (the caller deletes it), or NULL. */
static cJSON *manifest_beside(const char *shard_path) {
    char path[1100];
    beside_shard(path, sizeof path, shard_path, "manifest.json");
    char *text = NULL;
    size_t len = 0;
    Err e;
    if (file_read_all(path, &text, &len, &e) != ST_OK) return NULL;
    cJSON *m = cJSON_ParseWithLength(text, len);
    free(text);
    return m;
}

int loader_shard_tokenizer_name(const char *shard_path, uint64_t hash, char *out, size_t cap) {
    cJSON *m = manifest_beside(shard_path);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(m, "tokenizer");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(t, "hash"), *k = cJSON_GetObjectItemCaseSensitive(t, "kind"),
                *nm = cJSON_GetObjectItemCaseSensitive(t, "name");
    const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(m, "command");
    char hex[32];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)hash);
    int found = 0;
    if (cJSON_IsString(h) && !strcmp(h->valuestring, hex) && cJSON_IsString(nm) && nm->valuestring[0]) {
        snprintf(out, cap, "%s", nm->valuestring), found = 1;
    } else if (cJSON_IsString(h) && !strcmp(h->valuestring, hex)) {
        const char *c = cJSON_IsString(cmd) ? cmd->valuestring : NULL, *a = c ? strstr(c, " --tokenizer") : NULL;
        if (a && (a[12] == ' ' || a[12] == '=')) {
            a += 13;
            snprintf(out, cap, "%.*s", (int)strcspn(a, " "), a);
            found = out[0] != 0;
        } else if (c && strstr(c, "prepare")) {
            snprintf(out, cap, "gpt2"), found = 1;
        } else if (cJSON_IsString(k)) {
            snprintf(out, cap, "%s", k->valuestring), found = 1;
        }
    }
    cJSON_Delete(m);
    return found;
}

/* A shard beside DIR/.prepare/manifest.json belongs to a directory that `prepare` was moving its new
 * shards into when it stopped (prepare.c, publish_finish): old and new shards may stand side by side,
 * from different splits of the documents. Refused, saying how to finish the move. */
static Status check_not_publishing(const char *shard_path, Err *err) {
    char path[4200], dir[4200];
    beside_shard(path, sizeof path, shard_path, ".prepare/manifest.json");
    struct stat sb;
    if (stat(path, &sb) != 0) return ST_OK;
    beside_shard(dir, sizeof dir, shard_path, ""); /* "dir/" ("/" at the root, "" beside the cwd) */
    size_t dl = strlen(dir);
    if (dl > 1) dir[dl - 1] = '\0';
    else if (dl == 0) snprintf(dir, sizeof dir, ".");
    return err_set(err, ST_ERR_INPUT,
                   "%s: expected shards of a finished prepare, found %s: a prepare stopped while moving its new shards "
                   "into %s, beside old ones; run prepare into that directory again (it finishes the move first)",
                   shard_path, path, dir);
}

static Status set_add_glob(LoaderSet *s, const char *pattern, uint64_t expected_hash, const char *expected_name,
                           int for_weights, Err *err) {
    glob_t gl;
    int rc = glob(pattern, 0, NULL, &gl);
    if (rc != 0) {
        if (rc == GLOB_NOMATCH)
            return err_set(err, ST_ERR_INPUT, "%s: no such file (expected a token shard or a glob matching shards)",
                           pattern);
        return err_set(err, ST_ERR_RUNTIME, "%s: cannot expand the pattern", pattern);
    }
    Status st = ST_OK;
    Shard *ns = realloc(s->shards, (size_t)(s->nshards + (int)gl.gl_pathc) * sizeof *ns);
    size_t *nst = ns ? realloc(s->start, (size_t)(s->nshards + (int)gl.gl_pathc + 1) * sizeof *nst) : NULL;
    if (ns) s->shards = ns;
    if (nst) s->start = nst;
    if (!ns || !nst) {
        globfree(&gl);
        return err_set(err, ST_ERR_RUNTIME, "out of memory opening %s", pattern);
    }
    if (s->nshards == 0) s->start[0] = 0;
    for (size_t i = 0; i < gl.gl_pathc; i++) {
        Shard *sh = &s->shards[s->nshards];
        if ((st = check_not_publishing(gl.gl_pathv[i], err)) != ST_OK) break;
        if ((st = shard_open(sh, gl.gl_pathv[i], err)) != ST_OK) break;
        s->nshards++;
        if ((st = shard_mask_open(sh, err)) != ST_OK) break;
        if (expected_hash && sh->meta.tokenizer_hash && sh->meta.tokenizer_hash != expected_hash) {
            /* Names, not hashes, and the two ways out. */
            char made[256] = "", want[300], redo[300];
            const char *en = expected_name && expected_name[0] ? expected_name : NULL;
            if (en) snprintf(redo, sizeof redo, "--tokenizer %s", en);
            else snprintf(redo, sizeof redo, "the run's --tokenizer");
            if (en) snprintf(want, sizeof want, "this run's tokenizer is %s", en);
            else snprintf(want, sizeof want, "this run's tokenizer is another");
            if (for_weights) { /* eval: the weights' own tokenizer, recorded with them; no train flags to name */
                int known = loader_shard_tokenizer_name(sh->path, sh->meta.tokenizer_hash, made, sizeof made);
                st = err_set(err, ST_ERR_INPUT, "%s: prepared with %s%s, the weights were trained on %s (recorded with "
                             "them; hashes %016llx vs %016llx): prepare the text again with --tokenizer %s, or evaluate "
                             "weights trained on %s",
                             sh->path, known ? "tokenizer " : "another tokenizer (no manifest.json beside the shard names it)",
                             known ? made : "", en ? en : "another tokenizer", (unsigned long long)sh->meta.tokenizer_hash,
                             (unsigned long long)expected_hash, en ? en : "theirs", known ? made : "the shards' tokenizer");
            }
            else if (loader_shard_tokenizer_name(sh->path, sh->meta.tokenizer_hash, made, sizeof made))
                st = err_set(err, ST_ERR_INPUT,
                             "%s: prepared with tokenizer %s, %s (its --tokenizer, or the one recorded with its "
                             "--init-from weights; hashes %016llx vs %016llx): prepare the text again with %s, or "
                             "train with --tokenizer %s",
                             sh->path, made, want, (unsigned long long)sh->meta.tokenizer_hash,
                             (unsigned long long)expected_hash, redo, made);
            else
                st = err_set(err, ST_ERR_INPUT,
                             "%s: prepared with another tokenizer, %s (hashes %016llx vs %016llx; no manifest.json beside "
                             "the shard names its tokenizer): prepare the text again with %s, or train with the "
                             "--tokenizer the shards were prepared with",
                             sh->path, want, (unsigned long long)sh->meta.tokenizer_hash,
                             (unsigned long long)expected_hash, redo);
            break;
        }
        s->start[s->nshards] = s->start[s->nshards - 1] + sh->ntok;
    }
    globfree(&gl);
    return st;
}

/* The shard holding global token g (hint: the last one found, updated). */
static int set_shard_of(const LoaderSet *s, size_t g, int *hint) {
    int k = *hint;
    if (g < s->start[k] || g >= s->start[k + 1]) {
        int lo = 0, hi = s->nshards - 1;
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (s->start[mid] <= g) lo = mid;
            else hi = mid - 1;
        }
        k = *hint = lo;
    }
    return k;
}

static uint32_t set_token(const LoaderSet *s, size_t g, int *hint) {
    int k = set_shard_of(s, g, hint);
    return shard_token(&s->shards[k], g - s->start[k]);
}

/* Global token g as a target: its id, or -1 when its shard's loss mask says it is not trained. */
static int32_t set_target(const LoaderSet *s, size_t g, int *hint) {
    int k = set_shard_of(s, g, hint);
    const Shard *sh = &s->shards[k];
    size_t i = g - s->start[k];
    if (sh->mask && !shard_mask_bit(sh, i)) return -1;
    return (int32_t)shard_token(sh, i);
}

/* 1 when the manifest.json beside shard_path (prepare's) records result.loss_masks true. */
static int manifest_says_masks(const char *shard_path) {
    cJSON *m = manifest_beside(shard_path);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "result");
    int yes = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "loss_masks"));
    cJSON_Delete(m);
    return yes;
}

/* The shards of one dataset all have loss masks or none has (a half-masked set would train the
 * prompts of some conversations: refused, naming a shard of each kind). */
static Status set_check_masks(LoaderSet *s, Err *err) {
    int with = -1, without = -1;
    for (int i = 0; i < s->nshards; i++) {
        if (s->shards[i].mask) with = with < 0 ? i : with;
        else without = without < 0 ? i : without;
    }
    s->masked = with >= 0;
    /* every mask gone: the manifest prepare wrote beside the shards still says they had them (with
     * none, a chat dataset trained its prompts silently) */
    if (without >= 0 && with < 0 && manifest_says_masks(s->shards[without].path)) {
        char mp[1100];
        shard_mask_path(mp, sizeof mp, s->shards[without].path);
        return err_set(err, ST_ERR_INPUT, "%s: expected its loss mask %s (the manifest.json beside it says the shards "
                       "have loss masks), found none", s->shards[without].path, mp);
    }
    if (with >= 0 && without >= 0) {
        char mp[1100];
        shard_mask_path(mp, sizeof mp, s->shards[without].path);
        return err_set(err, ST_ERR_INPUT,
                       "%s: expected a loss mask beside every shard of the dataset (as beside %s), found none (%s is "
                       "missing)", s->shards[without].path, s->shards[with].path, mp);
    }
    return ST_OK;
}

/* Calls fn(ctx, first, n_targets) for every document of the stream: [s, e) content, e the EOT (or
 * the end of the stream, then no EOT target). Documents without content are skipped. */
static void set_for_each_doc(const LoaderSet *s, uint32_t eot, void (*fn)(void *, size_t, uint64_t), void *ctx) {
    size_t g = 0, begin = 0;
    for (int k = 0; k < s->nshards; k++) {
        const Shard *sh = &s->shards[k];
        for (size_t i = 0; i < sh->ntok; i++, g++)
            if (shard_token(sh, i) == eot) {
                if (g > begin) fn(ctx, begin, (uint64_t)(g - begin) + 1);
                begin = g + 1;
            }
    }
    if (s->total_tokens > begin) fn(ctx, begin, (uint64_t)(s->total_tokens - begin));
}

typedef struct {
    LoaderSet *s;
    int T;
    int fill; /* 0: count rows, 1: write them */
} RowCtx;

static void add_doc_rows(void *vctx, size_t begin, uint64_t n_targets) {
    RowCtx *c = vctx;
    uint64_t rows = loader_nopack_rows(n_targets, c->T);
    if (c->fill)
        for (uint64_t r = 0; r < rows; r++) {
            uint64_t left = n_targets - r * (uint64_t)c->T;
            /* first input = token begin - 1 + r·T, stored + 1 (so 0 is the synthetic EOT) */
            c->s->row_first[c->s->nrows + r] = (uint64_t)begin + r * (uint64_t)c->T;
            c->s->row_len[c->s->nrows + r] = (uint32_t)(left < (uint64_t)c->T ? left : (uint64_t)c->T);
        }
    c->s->nrows += rows;
    c->s->real_targets += n_targets;
}

static Status set_build_rows(LoaderSet *s, int T, int no_pack, uint32_t eot, Err *err) {
    if (!no_pack) {
        if (s->total_tokens < (size_t)T + 1)
            return err_set(err, ST_ERR_INPUT, "%s: %zu tokens in all, expected at least --seq-len + 1 = %d",
                           s->pattern, s->total_tokens, T + 1);
        s->nrows = (s->total_tokens - 1) / (size_t)T;
        s->real_targets = s->nrows * (uint64_t)T;
        return ST_OK;
    }
    RowCtx c = {s, T, 0};
    set_for_each_doc(s, eot, add_doc_rows, &c);
    if (s->nrows == 0)
        return err_set(err, ST_ERR_INPUT, "%s: no document with any token (expected text between the EOT %u tokens)",
                       s->pattern, eot);
    s->row_first = malloc(s->nrows * sizeof *s->row_first);
    s->row_len = malloc(s->nrows * sizeof *s->row_len);
    if (!s->row_first || !s->row_len)
        return err_set(err, ST_ERR_RUNTIME, "%s: out of memory for %llu no-pack rows", s->pattern,
                       (unsigned long long)s->nrows);
    s->nrows = s->real_targets = 0;
    c.fill = 1;
    set_for_each_doc(s, eot, add_doc_rows, &c);
    return ST_OK;
}

static void set_free(LoaderSet *s) {
    for (int i = 0; i < s->nshards; i++) shard_close(&s->shards[i]);
    free(s->shards);
    free(s->start);
    free(s->row_first);
    free(s->row_len);
    free(s->perm[0]);
    free(s->perm[1]);
    memset(s, 0, sizeof *s);
}

/* ================================================================== 3. the mixing pattern */

/* Quotas by largest remainder (each >= 1), then smooth weighted round robin over the period. */
static Status build_mix(Loader *ld, Err *err) {
    int D = ld->nsets;
    const uint32_t P = LOADER_MIX_PERIOD;
    if (D > (int)P) return err_set(err, ST_ERR_INPUT, "--data: expected at most %u datasets, found %d", P, D);
    uint32_t sum = 0;
    double rem[LOADER_MAX_SETS];
    for (int d = 0; d < D; d++) {
        double x = ld->sets[d].weight * P;
        uint32_t q = (uint32_t)x;
        if (q < 1) q = 1;
        ld->sets[d].quota = q;
        rem[d] = x - (double)q;
        sum += q;
    }
    while (sum < P) { /* hand the missing slots to the largest remainders (lowest index on ties) */
        int best = 0;
        for (int d = 1; d < D; d++)
            if (rem[d] > rem[best]) best = d;
        ld->sets[best].quota++;
        rem[best] -= 1.0;
        sum++;
    }
    while (sum > P) { /* only when many tiny weights were raised to 1: take from the largest quota */
        int best = 0;
        for (int d = 1; d < D; d++)
            if (ld->sets[d].quota > ld->sets[best].quota) best = d;
        ld->sets[best].quota--;
        sum--;
    }
    ld->mix_set = malloc(P * sizeof *ld->mix_set);
    ld->mix_rank = malloc(P * sizeof *ld->mix_rank);
    if (!ld->mix_set || !ld->mix_rank) return err_set(err, ST_ERR_RUNTIME, "out of memory for the mixing pattern");
    int64_t credit[LOADER_MAX_SETS] = {0};
    uint32_t taken[LOADER_MAX_SETS] = {0};
    for (uint32_t slot = 0; slot < P; slot++) {
        int best = 0;
        for (int d = 0; d < D; d++) {
            credit[d] += ld->sets[d].quota;
            if (credit[d] > credit[best]) best = d;
        }
        credit[best] -= P;
        ld->mix_set[slot] = (uint16_t)best;
        ld->mix_rank[slot] = taken[best]++;
    }
    for (int d = 0; d < D; d++) ST_CHECK(taken[d] == ld->sets[d].quota);
    return ST_OK;
}

/* ================================================================== 4. open / close / queries */

/* "tokenizer NAME (hash H)", or "tokenizer hash H" where no manifest names it. */
static void tokenizer_words(const Shard *s, char *out, size_t cap) {
    char name[256] = "";
    if (loader_shard_tokenizer_name(s->path, s->meta.tokenizer_hash, name, sizeof name))
        snprintf(out, cap, "tokenizer %s (hash %016llx)", name, (unsigned long long)s->meta.tokenizer_hash);
    else
        snprintf(out, cap, "tokenizer hash %016llx", (unsigned long long)s->meta.tokenizer_hash);
}

/* Every shard of a loader (each set of a mixture too) from one tokenizer: ids of two tokenizers
 * stand for different text. Headers that record no tokenizer (hash 0) or no vocabulary (0: shards
 * written elsewhere) are not compared. */
static Status check_one_tokenizer(const Loader *ld, const char *spec, Err *err) {
    const Shard *h = NULL, *v = NULL;
    for (int d = 0; d < ld->nsets; d++)
        for (int i = 0; i < ld->sets[d].nshards; i++) {
            const Shard *s = &ld->sets[d].shards[i];
            if (s->meta.tokenizer_hash && !h) h = s;
            if (s->meta.vocab_size && !v) v = s;
            if (s->meta.tokenizer_hash && s->meta.tokenizer_hash != h->meta.tokenizer_hash) {
                char a[300], b[300];
                tokenizer_words(h, a, sizeof a), tokenizer_words(s, b, sizeof b);
                return err_set(err, ST_ERR_INPUT,
                               "%s: expected shards of one tokenizer, found %s prepared with %s and %s with %s: prepare "
                               "them with one tokenizer", spec, h->path, a, s->path, b);
            }
            if (s->meta.vocab_size && s->meta.vocab_size != v->meta.vocab_size)
                return err_set(err, ST_ERR_INPUT,
                               "%s: expected shards of one vocabulary, found %s with %u ids and %s with %u (their headers)",
                               spec, v->path, v->meta.vocab_size, s->path, s->meta.vocab_size);
        }
    return ST_OK;
}

/* The first shard whose header records a tokenizer, or NULL. */
static const Shard *first_hashed(const Loader *ld) {
    for (int d = 0; d < ld->nsets; d++)
        for (int i = 0; i < ld->sets[d].nshards; i++)
            if (ld->sets[d].shards[i].meta.tokenizer_hash) return &ld->sets[d].shards[i];
    return NULL;
}

uint64_t loader_tokenizer_hash(const Loader *ld) {
    const Shard *s = first_hashed(ld);
    return s ? s->meta.tokenizer_hash : 0;
}

Status loader_check_same_tokenizer(const Loader *train, const Loader *val, const char *val_spec, Err *err) {
    const Shard *ts = first_hashed(train), *vs = first_hashed(val);
    if (!ts || !vs || ts->meta.tokenizer_hash == vs->meta.tokenizer_hash) return ST_OK;
    char a[300], b[300];
    tokenizer_words(ts, a, sizeof a), tokenizer_words(vs, b, sizeof b);
    return err_set(err, ST_ERR_INPUT,
                   "--val-data %s: expected shards of the training shards' %s (%s), found %s (%s): prepare both with "
                   "one tokenizer", val_spec, a, ts->path, b, vs->path);
}

Status loader_open(Loader *ld, const char *spec, int T, uint32_t vocab, uint64_t expected_hash, uint64_t seed,
                   int flags, Err *err) {
    return loader_open_named(ld, spec, T, vocab, expected_hash, NULL, seed, flags, err);
}

Status loader_open_named(Loader *ld, const char *spec, int T, uint32_t vocab, uint64_t expected_hash,
                         const char *expected_name, uint64_t seed, int flags, Err *err) {
    memset(ld, 0, sizeof *ld);
    ld->T = T, ld->flags = flags, ld->shuffle = (flags & LOADER_SHUFFLE) != 0, ld->st.seed = seed;
    if (T < 1) return err_set(err, ST_ERR_INPUT, "--seq-len: expected a positive integer, found %d", T);
    if (!spec || !*spec) return err_set(err, ST_ERR_INPUT, "--data: expected a token shard path or glob, found none");
    /* items */
    char pats[LOADER_MAX_SETS][1024];
    double w[LOADER_MAX_SETS];
    int nitems = 0, nweighted = 0;
    for (const char *p = spec;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (nitems == LOADER_MAX_SETS)
            return err_set(err, ST_ERR_INPUT, "--data %s: expected at most %d comma-separated items", spec,
                           LOADER_MAX_SETS);
        int hw;
        if (parse_item(p, len, pats[nitems], sizeof pats[nitems], &w[nitems], &hw))
            return err_set(err, ST_ERR_INPUT, "--data %s: expected PATH_OR_GLOB[:WEIGHT] items, found '%.*s'", spec,
                           (int)len, p);
        if (hw && !(w[nitems] > 0 && w[nitems] < 1e9))
            return err_set(err, ST_ERR_INPUT, "--data %s: expected a weight > 0, found %g for %s", spec, w[nitems],
                           pats[nitems]);
        nweighted += hw;
        nitems++;
        if (!comma) break;
        p = comma + 1;
    }
    if (nweighted && nitems == 1) /* a mixture of one: the weight would change nothing */
        return err_set(err, ST_ERR_INPUT, "--data %s: a :WEIGHT mixes several datasets, found one; expected %s without "
                       "it, or more items", spec, pats[0]);
    if (nweighted && nweighted != nitems)
        return err_set(err, ST_ERR_INPUT,
                       "--data %s: expected a :WEIGHT on every item of a mixture (or on none), found %d of %d", spec,
                       nweighted, nitems);
    int nsets = nweighted ? nitems : 1;
    ld->sets = calloc((size_t)nsets, sizeof *ld->sets);
    if (!ld->sets) return err_set(err, ST_ERR_RUNTIME, "out of memory opening %s", spec);
    ld->nsets = nsets;
    double wsum = 0;
    for (int i = 0; i < nitems; i++) wsum += nweighted ? w[i] : 0;
    Status st = ST_OK;
    for (int i = 0; i < nitems && st == ST_OK; i++) {
        LoaderSet *s = &ld->sets[nweighted ? i : 0];
        if (nweighted || i == 0) {
            snprintf(s->pattern, sizeof s->pattern, "%s", nweighted ? pats[i] : spec);
            s->weight = nweighted ? w[i] / wsum : 1.0;
            s->perm_epoch[0] = s->perm_epoch[1] = UINT64_MAX;
        }
        st = set_add_glob(s, pats[i], expected_hash, expected_name, (flags & LOADER_FOR_WEIGHTS) != 0, err);
    }
    for (int d = 0; d < nsets && st == ST_OK; d++) {
        st = set_check_masks(&ld->sets[d], err);
        ld->masked |= ld->sets[d].masked;
    }
    if (st == ST_OK) st = check_one_tokenizer(ld, spec, err);
    /* totals, EOT, rows */
    uint32_t hv = 0;
    for (int d = 0; d < nsets && st == ST_OK; d++) {
        LoaderSet *s = &ld->sets[d];
        s->total_tokens = s->start[s->nshards];
        int known = 1;
        for (int i = 0; i < s->nshards; i++) {
            known &= s->shards[i].meta.source_bytes != 0;
            s->source_bytes += s->shards[i].meta.source_bytes;
        }
        if (!known) s->source_bytes = 0;
        ld->nshards += s->nshards;
        ld->total_tokens += s->total_tokens;
    }
    if (st == ST_OK) hv = loader_header_vocab(ld);
    if (st == ST_OK && (flags & LOADER_NO_PACK)) {
        if (!hv && !vocab)
            st = err_set(err, ST_ERR_INPUT,
                         "%s: --no-pack needs the EOT id, but the shard headers record no vocabulary size (give --vocab)",
                         spec);
        uint32_t he = loader_header_eot(ld);
        ld->eot = he != UINT32_MAX ? he : vocab - 1;
        /* the padding input of every row: an id past the model's vocabulary (a header word 7 above
         * it, words 7 and 8 damaged) was handed to the model as a token */
        if (st == ST_OK && vocab && ld->eot >= vocab)
            st = err_set(err, ST_ERR_INPUT, "%s: expected the EOT id of its header (words 7, 8) below the vocabulary size "
                         "%u (--no-pack pads rows with it), found %u", ld->sets[0].shards[0].path, vocab, ld->eot);
    }
    int known_bytes = 1;
    for (int d = 0; d < nsets && st == ST_OK; d++) {
        st = set_build_rows(&ld->sets[d], T, (flags & LOADER_NO_PACK) != 0, ld->eot, err);
        ld->nwin += ld->sets[d].nrows;
        known_bytes &= ld->sets[d].source_bytes != 0;
        ld->source_bytes += ld->sets[d].source_bytes;
    }
    if (!known_bytes) ld->source_bytes = 0;
    if (st == ST_OK && nsets > 1) st = build_mix(ld, err);
    if (st == ST_OK && vocab) st = loader_check_vocab(ld, vocab, err);
    if (st != ST_OK) loader_close(ld);
    return st;
}

Status loader_check_vocab(const Loader *ld, uint32_t vocab, Err *err) {
    for (int d = 0; d < ld->nsets; d++)
        for (int i = 0; i < ld->sets[d].nshards; i++) {
            const Shard *s = &ld->sets[d].shards[i];
            /* a header's vocabulary below the model's: the shard's own ids must fit it (a damaged header
             * or ids written over) */
            if (s->meta.vocab_size && s->meta.vocab_size < vocab) {
                size_t hb = shard_find_token_at_least(s, s->meta.vocab_size);
                if (hb != SIZE_MAX)
                    return err_set(err, ST_ERR_INPUT,
                                   "%s: expected token ids below the vocabulary size %u its header records, found id %u "
                                   "at position %zu", s->path, s->meta.vocab_size, shard_token(s, hb), hb);
                continue;
            }
            size_t bad = shard_find_token_at_least(s, vocab);
            if (bad != SIZE_MAX)
                return err_set(err, ST_ERR_INPUT,
                               "%s: token id %u at position %zu is not below the vocabulary size %u (expected ids < --vocab)",
                               s->path, shard_token(s, bad), bad, vocab);
        }
    return ST_OK;
}

void loader_close(Loader *ld) {
    for (int d = 0; d < ld->nsets; d++) set_free(&ld->sets[d]);
    free(ld->sets);
    free(ld->mix_set);
    free(ld->mix_rank);
    memset(ld, 0, sizeof *ld);
}

uint32_t loader_header_vocab(const Loader *ld) {
    uint32_t v = 0;
    int first = 1;
    for (int d = 0; d < ld->nsets; d++)
        for (int i = 0; i < ld->sets[d].nshards; i++) {
            uint32_t x = ld->sets[d].shards[i].meta.vocab_size;
            if (first) v = x, first = 0;
            else if (x != v) return 0;
        }
    return v;
}

uint32_t loader_header_eot(const Loader *ld) {
    uint32_t e = UINT32_MAX;
    int first = 1;
    for (int d = 0; d < ld->nsets; d++)
        for (int i = 0; i < ld->sets[d].nshards; i++) {
            const ShardMeta *m = &ld->sets[d].shards[i].meta;
            uint32_t x = m->eot_plus1 ? m->eot_plus1 - 1 : m->vocab_size ? m->vocab_size - 1 : UINT32_MAX;
            if (first) e = x, first = 0;
            else if (x != e) return UINT32_MAX;
        }
    return e;
}

LoaderState loader_get_state(const Loader *ld) { return ld->st; }

void loader_set_state(Loader *ld, LoaderState st) {
    if (st.seed != ld->st.seed)
        for (int d = 0; d < ld->nsets; d++) ld->sets[d].perm_epoch[0] = ld->sets[d].perm_epoch[1] = UINT64_MAX;
    ld->st = st;
}

double loader_utilization(const Loader *ld) {
    double u = 0;
    for (int d = 0; d < ld->nsets; d++) {
        const LoaderSet *s = &ld->sets[d];
        double share = ld->nsets > 1 ? (double)s->quota / LOADER_MIX_PERIOD : 1.0;
        if (s->nrows) u += share * (double)s->real_targets / ((double)s->nrows * ld->T);
    }
    return u;
}

/* ================================================================== 5. sample -> row -> tokens */

/* Fisher–Yates with draws from the counter RNG: the permutation depends on (seed, dataset, epoch)
 * only (dataset 0 uses the streams of the single-dataset loader, so adding mixing changed nothing
 * for one dataset). */
static const uint64_t *epoch_perm(LoaderSet *s, uint64_t seed, int d, uint64_t epoch) {
    for (int i = 0; i < 2; i++)
        if (s->perm_epoch[i] == epoch) return s->perm[i];
    int slot = s->perm_next;
    s->perm_next ^= 1;
    if (!s->perm[slot]) {
        s->perm[slot] = malloc(s->nrows * sizeof(uint64_t));
        ST_CHECK_MSG(s->perm[slot] != NULL, "out of memory for the epoch permutation");
    }
    uint64_t *p = s->perm[slot];
    uint64_t stream = 0x10ad000000000000ull + ((uint64_t)d << 40) + epoch;
    for (uint64_t i = 0; i < s->nrows; i++) p[i] = i;
    for (uint64_t i = s->nrows - 1; i > 0; i--) {
        uint64_t j = rng_below(seed, stream, i, i + 1);
        uint64_t t = p[i];
        p[i] = p[j], p[j] = t;
    }
    s->perm_epoch[slot] = epoch;
    return p;
}

uint64_t loader_sample_row(Loader *ld, uint64_t n, int *set) {
    int d = 0;
    uint64_t m = n;
    if (ld->nsets > 1) {
        uint64_t slot = n % LOADER_MIX_PERIOD;
        d = ld->mix_set[slot];
        m = (n / LOADER_MIX_PERIOD) * ld->sets[d].quota + ld->mix_rank[slot];
    }
    *set = d;
    LoaderSet *s = &ld->sets[d];
    return ld->shuffle ? epoch_perm(s, ld->st.seed, d, m / s->nrows)[m % s->nrows] : m % s->nrows;
}

void loader_fill(Loader *ld, uint64_t first, int count, int32_t *inp, int32_t *tgt) {
    int T = ld->T, hint = 0, last_set = -1;
    for (int b = 0; b < count; b++) {
        int d;
        uint64_t row = loader_sample_row(ld, first + (uint64_t)b, &d);
        const LoaderSet *s = &ld->sets[d];
        if (d != last_set) hint = 0, last_set = d;
        int32_t *in = inp + (size_t)b * T, *tg = tgt + (size_t)b * T;
        if (!(ld->flags & LOADER_NO_PACK)) {
            size_t g0 = (size_t)row * T;
            for (int t = 0; t < T; t++) in[t] = (int32_t)set_token(s, g0 + t, &hint);
            for (int t = 0; t < T; t++) tg[t] = set_target(s, g0 + t + 1, &hint);
            continue;
        }
        uint64_t f = s->row_first[row]; /* global index of the first target */
        int n = (int)s->row_len[row];
        for (int t = 0; t < n; t++) {
            in[t] = f + t == 0 ? (int32_t)ld->eot : (int32_t)set_token(s, f + t - 1, &hint);
            tg[t] = set_target(s, f + t, &hint);
        }
        for (int t = n; t < T; t++) in[t] = (int32_t)ld->eot, tg[t] = -1;
    }
}

void loader_fill_rank(Loader *ld, int rank, int dp, int micro, int B, int k, int32_t *inp, int32_t *tgt) {
    ST_CHECK(rank >= 0 && rank < dp && micro >= 0 && micro < k && B > 0);
    uint64_t first = ld->st.consumed + (uint64_t)rank * B * k + (uint64_t)micro * B;
    loader_fill(ld, first, B, inp, tgt);
}

void loader_step_done(Loader *ld, int dp, int B, int k) { ld->st.consumed += (uint64_t)B * k * dp; }
