/* loader.c — windows, epoch permutations and validation of the token stream. */
#include "data/loader.h"

#include <glob.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

Status loader_open(Loader *ld, const char *pattern, int T, uint32_t vocab, uint64_t expected_hash, uint64_t seed,
                   int shuffle, Err *err) {
    memset(ld, 0, sizeof *ld);
    ld->T = T, ld->shuffle = shuffle, ld->st.seed = seed;
    ld->perm_epoch[0] = ld->perm_epoch[1] = UINT64_MAX;
    glob_t gl;
    int rc = glob(pattern, 0, NULL, &gl);
    if (rc != 0) {
        if (rc == GLOB_NOMATCH)
            return err_set(err, ST_ERR_INPUT, "%s: no such file (expected a token shard or a glob matching shards)",
                           pattern);
        return err_set(err, ST_ERR_RUNTIME, "%s: cannot expand the pattern", pattern);
    }
    Status st = ST_OK;
    ld->shards = calloc(gl.gl_pathc, sizeof *ld->shards);
    ld->start = calloc(gl.gl_pathc + 1, sizeof *ld->start);
    if (!ld->shards || !ld->start) {
        st = err_set(err, ST_ERR_RUNTIME, "out of memory opening %s", pattern);
        goto done;
    }
    uint64_t bytes = 0;
    int bytes_known = 1;
    for (size_t i = 0; i < gl.gl_pathc; i++) {
        Shard *s = &ld->shards[ld->nshards];
        if ((st = shard_open(s, gl.gl_pathv[i], err)) != ST_OK) goto done;
        ld->nshards++;
        if (expected_hash && s->meta.tokenizer_hash && s->meta.tokenizer_hash != expected_hash) {
            st = err_set(err, ST_ERR_INPUT,
                         "%s: made with tokenizer hash %016llx, expected %016llx (the --tokenizer of this run)", s->path,
                         (unsigned long long)s->meta.tokenizer_hash, (unsigned long long)expected_hash);
            goto done;
        }
        if (!s->meta.source_bytes) bytes_known = 0;
        bytes += s->meta.source_bytes;
        ld->start[i + 1] = ld->start[i] + s->ntok;
    }
    ld->total_tokens = ld->start[ld->nshards];
    ld->source_bytes = bytes_known ? bytes : 0;
    if (ld->total_tokens < (size_t)T + 1) {
        st = err_set(err, ST_ERR_INPUT, "%s: %zu tokens in all, expected at least --seq-len + 1 = %d", pattern,
                     ld->total_tokens, T + 1);
        goto done;
    }
    ld->nwin = (ld->total_tokens - 1) / (size_t)T;
    if (vocab) st = loader_check_vocab(ld, vocab, err);
done:
    globfree(&gl);
    if (st != ST_OK) loader_close(ld);
    return st;
}

Status loader_check_vocab(const Loader *ld, uint32_t vocab, Err *err) {
    for (int i = 0; i < ld->nshards; i++) {
        const Shard *s = &ld->shards[i];
        size_t bad = shard_find_token_at_least(s, vocab);
        if (bad != SIZE_MAX)
            return err_set(err, ST_ERR_INPUT,
                           "%s: token id %u at position %zu is not below the vocabulary size %u (expected ids < --vocab)",
                           s->path, shard_token(s, bad), bad, vocab);
    }
    return ST_OK;
}

void loader_close(Loader *ld) {
    for (int i = 0; i < ld->nshards; i++) shard_close(&ld->shards[i]);
    free(ld->shards);
    free(ld->start);
    free(ld->perm[0]);
    free(ld->perm[1]);
    memset(ld, 0, sizeof *ld);
}

uint32_t loader_header_vocab(const Loader *ld) {
    uint32_t v = ld->nshards ? ld->shards[0].meta.vocab_size : 0;
    for (int i = 1; i < ld->nshards; i++)
        if (ld->shards[i].meta.vocab_size != v) return 0;
    return v;
}

/* Fisher–Yates with draws from the counter RNG: the permutation depends on (seed, epoch) only. */
static const uint64_t *epoch_perm(Loader *ld, uint64_t epoch) {
    for (int i = 0; i < 2; i++)
        if (ld->perm_epoch[i] == epoch) return ld->perm[i];
    int slot = ld->perm_next;
    ld->perm_next ^= 1;
    if (!ld->perm[slot]) {
        ld->perm[slot] = malloc(ld->nwin * sizeof(uint64_t));
        ST_CHECK_MSG(ld->perm[slot] != NULL, "out of memory for the epoch permutation");
    }
    uint64_t *p = ld->perm[slot];
    for (uint64_t i = 0; i < ld->nwin; i++) p[i] = i;
    for (uint64_t i = ld->nwin - 1; i > 0; i--) {
        uint64_t j = rng_below(ld->st.seed, 0x10ad000000000000ull + epoch, i, i + 1);
        uint64_t t = p[i];
        p[i] = p[j], p[j] = t;
    }
    ld->perm_epoch[slot] = epoch;
    return p;
}

static uint32_t token_at(const Loader *ld, size_t g, int *shard_hint) {
    int s = *shard_hint;
    if (g < ld->start[s] || g >= ld->start[s + 1]) {
        int lo = 0, hi = ld->nshards - 1;
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (ld->start[mid] <= g) lo = mid;
            else hi = mid - 1;
        }
        s = *shard_hint = lo;
    }
    return shard_token(&ld->shards[s], g - ld->start[s]);
}

void loader_fill(Loader *ld, uint64_t first, int count, int32_t *inp, int32_t *tgt) {
    int T = ld->T, hint = 0;
    for (int b = 0; b < count; b++) {
        uint64_t n = first + (uint64_t)b;
        uint64_t w = ld->shuffle ? epoch_perm(ld, n / ld->nwin)[n % ld->nwin] : n % ld->nwin;
        size_t g0 = (size_t)w * T;
        for (int t = 0; t < T; t++) inp[(size_t)b * T + t] = (int32_t)token_at(ld, g0 + t, &hint);
        for (int t = 0; t < T; t++) tgt[(size_t)b * T + t] = (int32_t)token_at(ld, g0 + t + 1, &hint);
    }
}
