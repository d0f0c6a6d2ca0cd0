/* test_llama3_tokenizer.c — Meta's Llama 3 tokenizer (`--tokenizer llama3`) against npm tiktoken, its
 * special tokens, its error messages, and `prepare` / `train` with it.
 *
 * Needs Meta's tokenizer.model in data/tokenizers/llama3 (not in the repository: make test's deps
 * step runs scripts/fetch-llama3-tokenizer.sh; $ST_LLAMA3_DIR overrides the directory). Without it
 * the test FAILS, naming the script.
 *
 * Oracles (exact, no tolerance):
 *   - tests/fixtures/llama3_vectors.jsonl (gen_llama3_vectors.cjs): ids = encode_ordinary of npm
 *     tiktoken 1.0.22's Tiktoken built from the same tokenizer.model and Meta's pat_str, on text no
 *     other fixture holds (languages, code, numbers, whitespace runs, contractions in both cases,
 *     special tokens' text typed as user text, 300 seeded random strings); tiktoken's id for each of
 *     the 256 special tokens (encode(name, "all")); token count + FNV-1a-64 of tiktoken's ids of
 *     Tiny Shakespeare and GPT-2's encoder.json;
 *   - ranks 0..100255 have the bytes of cl100k_base's (data/tokenizers/cl100k_base.tkr, another file
 *     from another source: Meta built Llama 3's vocabulary on cl100k's), the loader reads the file's
 *     format right;
 *   - decode(encode(x)) == x on random bytes (invalid UTF-8 included) and encode never yields an id
 *     >= 128000.
 * Negative controls run here, each must make its oracle fail: the vectors under TEST_LLAMA3_CASE
 * (case-sensitive contractions) and under GPT-2's pattern; a tokenizer.model with two ranks swapped
 * (vectors and the Tiny Shakespeare checksum; encoder.json has neither " the" nor " and").
 * Errors: missing file, wrong line count, bad base64, rank out of order, a malformed line: one line
 * naming the file (and line), what was expected and what was found; the same through the CLI
 * (exit 2). tokenizer_special_id on gpt2, cl100k, o200k, bytes. End to end: `prepare --tokenizer
 * llama3` writes uint32 shards with vocabulary 128256, EOT word 128002 and the encoder's ids +
 * <|end_of_text|>; `train --tokenizer llama3` trains 2 steps on them (V=128256); `tokenizer train
 * --pattern llama3` makes a BPE directory that loads as such; `tokenizer --help` lists llama3. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/fileio.h"
#include "data/bpe.h"
#include "data/shard.h"
#include "testutil.h"

#define WORK ST_BINARY_DIR "/test_llama3_tokenizer"

static char model_dir[1024], model_path[1100];

static uint64_t fnv_ids(const uint32_t *ids, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) h = (h ^ ((ids[i] >> (8 * k)) & 255)) * 0x100000001b3ULL;
    return h;
}

static int run(const char *args, const char *out) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s/scaletrain %s >%s 2>&1", ST_BINARY_DIR, args, out);
    return system(cmd);
}

/* Compares the tokenizer with the fixture: returns the number of mismatching text vectors (*ntext set)
 * and of corpus checksums (*badc, *nc). */
static int compare(const Tokenizer *t, cJSON *vec, int *ntext, int *badc, int *nc, int verbose) {
    int bad = 0;
    *ntext = *badc = *nc = 0;
    uint32_t *ids = NULL;
    size_t cap = 0;
    Err err;
    for (cJSON *v = vec->child; v; v = v->next) {
        cJSON *text = cJSON_GetObjectItem(v, "text"), *corpus = cJSON_GetObjectItem(v, "corpus");
        if (cJSON_IsString(text)) {
            cJSON *want = cJSON_GetObjectItem(v, "ids");
            size_t n = 0;
            tokenizer_encode(t, (const uint8_t *)text->valuestring, strlen(text->valuestring), &ids, &n, &cap, &err);
            int ok = (int)n == cJSON_GetArraySize(want);
            for (size_t i = 0; ok && i < n; i++) ok = ids[i] == (uint32_t)cJSON_GetArrayItem(want, (int)i)->valuedouble;
            if (!ok && verbose && bad < 5) printf("  vector differs: %.80s\n", text->valuestring);
            bad += !ok;
            (*ntext)++;
        } else if (cJSON_IsString(corpus)) {
            char path[2048];
            snprintf(path, sizeof path, "%s/%s", ST_SOURCE_DIR, corpus->valuestring);
            char *buf = tu_slurp(path);
            size_t n = 0;
            if (buf) tokenizer_encode(t, (const uint8_t *)buf, strlen(buf), &ids, &n, &cap, &err);
            char hex[32];
            snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv_ids(ids, n));
            int ok = buf && (double)n == cJSON_GetObjectItem(v, "tokens")->valuedouble &&
                     !strcmp(hex, cJSON_GetObjectItem(v, "fnv")->valuestring);
            if (!ok && verbose) printf("  corpus %s: %zu tokens fnv %s\n", corpus->valuestring, n, hex);
            *badc += !ok;
            (*nc)++;
            free(buf);
        }
    }
    free(ids);
    return bad;
}

/* Loads a tokenizer.model from `path` with `pattern` and expects an ST_ERR_INPUT whose message holds
 * every one of the NULL-terminated fragments. */
static void expect_error(const char *name, const char *path, const char *const *frags) {
    Tokenizer *t = NULL;
    Err err = {0};
    Status st = tokenizer_load_llama3(&t, path, BPE_PATTERN_FILE, &err);
    int ok = st == ST_ERR_INPUT && !t && !strchr(err.msg, '\n');
    for (int k = 0; ok && frags[k]; k++) ok = strstr(err.msg, frags[k]) != NULL;
    tu_check(ok, name, "%s", st ? err.msg : "(loaded)");
    tokenizer_free(t);
}

/* Writes `model` (n bytes) with edit applied: the bytes [at, at + len) replaced by rep. */
static int write_edit(const char *path, const char *model, size_t n, size_t at, size_t len, const char *rep) {
    size_t rl = strlen(rep), m = n - len + rl;
    char *b = malloc(m);
    if (!b) return -1;
    memcpy(b, model, at);
    memcpy(b + at, rep, rl);
    memcpy(b + at + rl, model + at + len, n - at - len);
    Err e;
    const void *bufs[1] = {b};
    Status st = file_write_atomic(path, bufs, &m, 1, &e);
    free(b);
    return st ? -1 : 0;
}

/* Offset of the start of line k (0-based) of s. */
static size_t line_start(const char *s, size_t k) {
    size_t o = 0;
    while (k--) o = (size_t)(strchr(s + o, '\n') - s) + 1;
    return o;
}

static void test_errors(const char *model, size_t n) {
    char p[1200];
    snprintf(p, sizeof p, "%s/missing.model", WORK);
    expect_error("error_missing", p, (const char *[]){p, "cannot open", NULL});
    /* the last line dropped */
    size_t last = line_start(model, 127999);
    snprintf(p, sizeof p, "%s/short.model", WORK);
    write_edit(p, model, n, last, n - last, "");
    expect_error("error_line_count", p, (const char *[]){p, "expected 128000 lines", "found 127999 lines", NULL});
    /* bad base64 at line 501 (rank 500) */
    size_t l500 = line_start(model, 500);
    snprintf(p, sizeof p, "%s/b64.model", WORK);
    write_edit(p, model, n, l500, 1, "*");
    expect_error("error_base64", p, (const char *[]){p, ":501:", "expected the token's bytes in base64", "found \"*", NULL});
    /* ranks out of order: line 1001 says rank 1001 */
    size_t l1000 = line_start(model, 1000), sp = (size_t)(strchr(model + l1000, ' ') - model);
    snprintf(p, sizeof p, "%s/order.model", WORK);
    write_edit(p, model, n, sp + 1, 4, "1001");
    expect_error("error_rank_order", p, (const char *[]){p, ":1001:", "expected rank 1000", "found \"1001\"", NULL});
    /* a line without its rank */
    snprintf(p, sizeof p, "%s/norank.model", WORK);
    write_edit(p, model, n, sp, 5, "");
    expect_error("error_no_rank", p, (const char *[]){p, ":1001:", "expected `base64(token) rank`", NULL});
    /* two lines with the same token: rank 1000's token replaced by rank 999's */
    size_t l999 = line_start(model, 999), sp999 = (size_t)(strchr(model + l999, ' ') - model);
    char dup[256];
    snprintf(dup, sizeof dup, "%.*s", (int)(sp999 - l999), model + l999);
    snprintf(p, sizeof p, "%s/dup.model", WORK);
    write_edit(p, model, n, l1000, sp - l1000, dup);
    expect_error("error_duplicate", p, (const char *[]){p, "expected distinct tokens", "rank 1000", NULL});
    /* the same through the CLI: one line, exit 2 */
    char dir[1100], args[2600], out[1200];
    snprintf(dir, sizeof dir, "%s/badcli", WORK);
    snprintf(args, sizeof args, "mkdir -p %s && cp %s/short.model %s/tokenizer.model", dir, WORK, dir);
    tu_shell(args);
    snprintf(args, sizeof args, "tokenizer encode --tokenizer llama3 --tokenizer-dir %s %s/short.model", dir, WORK);
    snprintf(out, sizeof out, "%s/badcli.log", WORK);
    int rc = run(args, out);
    char *log = tu_slurp(out);
    int lines = 0;
    for (const char *q = log; q && *q; q++) lines += *q == '\n';
    tu_check(WIFEXITED(rc) && WEXITSTATUS(rc) == 2 && log && strstr(log, "tokenizer.model") && strstr(log, "expected 128000 lines") &&
                 lines == 1, "error_cli", "exit %d: %s", WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, log ? log : "");
    free(log);
}

static void test_special_other(void) {
    struct { const char *spec, *sub, *text; long id; } cases[] = {
        {"gpt2", "gpt2_tokenizer", "<|endoftext|>", 50256},   {"gpt2", "gpt2_tokenizer", "<|eot_id|>", -1},
        {"gpt2", "gpt2_tokenizer", "hello", -1},              {"gpt2", "gpt2_tokenizer", "!", -1},
        {"cl100k", "tokenizers", "<|endoftext|>", 100257},    {"cl100k", "tokenizers", "<|fim_prefix|>", 100258},
        {"cl100k", "tokenizers", "<|fim_suffix|>", 100260},   {"cl100k", "tokenizers", "<|endofprompt|>", 100276},
        {"cl100k", "tokenizers", "<|end_of_text|>", -1},      {"cl100k", "tokenizers", "the", -1},
        {"o200k", "tokenizers", "<|endoftext|>", 199999},     {"o200k", "tokenizers", "<|endofprompt|>", 200018},
        {"o200k", "tokenizers", "<|fim_prefix|>", -1},        {"bytes", NULL, "<|endoftext|>", 256},
        {"bytes", NULL, "a", -1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/data/%s", ST_SOURCE_DIR, cases[k].sub ? cases[k].sub : "");
        Tokenizer *t = NULL;
        Err err;
        uint32_t id = 7;
        int r = -2;
        if (!tokenizer_load(&t, cases[k].spec, dir, &err)) r = tokenizer_special_id(t, cases[k].text, &id);
        int ok = cases[k].id < 0 ? r == -1 && id == 7 : r == 0 && id == (uint32_t)cases[k].id;
        tu_check(ok, "special_id_other", "%s %s -> %d %u (want %ld)", cases[k].spec, cases[k].text, r, id, cases[k].id);
        tokenizer_free(t);
    }
}

static void test_end_to_end(const Tokenizer *t) {
    static const char TEXT[] = "It's 2024: the Llama's <|eot_id|> is text here.\nÜber 12345 façades — naïve café!\n";
    char args[4096], out[1200];
    snprintf(args, sizeof args, "%s/text.txt", WORK);
    Err err;
    size_t n = sizeof TEXT - 1;
    const void *bufs[1] = {TEXT};
    if (file_write_atomic(args, bufs, &n, 1, &err)) {
        tu_check(0, "prepare_setup", "%s", err.msg);
        return;
    }
    snprintf(args, sizeof args, "prepare --tokenizer llama3 --tokenizer-dir %s --val-docs 0 --quiet --out %s/shards %s/text.txt",
             model_dir, WORK, WORK);
    snprintf(out, sizeof out, "%s/prepare.log", WORK);
    int rc = run(args, out);
    uint32_t *ids = NULL;
    size_t nids = 0, cap = 0;
    tokenizer_encode(t, (const uint8_t *)TEXT, n, &ids, &nids, &cap, &err);
    Shard s = {0};
    Status so = rc == 0 ? shard_open(&s, WORK "/shards/train_000000.bin", &err) : ST_ERR_INPUT;
    int same = !so && s.ntok == nids + 1 && shard_token(&s, nids) == 128001;
    for (size_t i = 0; same && i < nids; i++) same = shard_token(&s, i) == ids[i];
    tu_check(rc == 0 && same && s.meta.version == SHARD_VERSION_U32 && s.meta.vocab_size == 128256 && s.meta.eot_plus1 == 128002 &&
                 s.meta.tokenizer_hash == tokenizer_hash(t),
             "prepare_llama3", "rc=%d version=%u vocab=%u eot+1=%u tokens=%zu (encoder %zu + <|end_of_text|>) %s", rc,
             so ? 0 : s.meta.version, so ? 0 : s.meta.vocab_size, so ? 0 : s.meta.eot_plus1, so ? 0 : s.ntok, nids,
             same ? "identical" : "DIFFERENT");
    shard_close(&s);
    free(ids);
    /* train 2 steps on them with the tokenizer named: the vocabulary and hash come from it */
    snprintf(args, sizeof args,
             "train --data '%s/shards/train_*.bin' --layers 1 --heads 1 --channels 8 --seq-len 8 --micro-batch 2 "
             "--steps 2 --tokenizer llama3 --tokenizer-dir %s", WORK, model_dir);
    snprintf(out, sizeof out, "%s/train.log", WORK);
    rc = run(args, out);
    char *log = tu_slurp(out);
    tu_check(rc == 0 && log && strstr(log, "V=128256") && strstr(log, "step     2/2"), "train_llama3", "rc=%d (log %s)", rc, out);
    free(log);
    /* a plain --tokenizer DIR (tokenizer.model + pattern) is the same tokenizer */
    Tokenizer *d = NULL;
    Status sd = tokenizer_load(&d, model_dir, NULL, &err);
    tu_check(!sd && tokenizer_hash(d) == tokenizer_hash(t) && !strcmp(tokenizer_kind(d), "llama3"), "load_plain_dir", "%s",
             sd ? err.msg : tokenizer_kind(d));
    tokenizer_free(d);
    /* a tokenizer trained with --pattern llama3 is a BPE directory with that pattern, not Meta's */
    snprintf(args, sizeof args, "tokenizer train --pattern llama3 --vocab-size 300 --holdout 0 --out %s/trained %s/text.txt",
             WORK, WORK);
    snprintf(out, sizeof out, "%s/trained.log", WORK);
    rc = run(args, out);
    char *pf = tu_slurp(WORK "/trained/pattern");
    Status sb = rc == 0 ? tokenizer_load(&d, WORK "/trained", NULL, &err) : ST_ERR_INPUT;
    tu_check(rc == 0 && pf && !strcmp(pf, "llama3\n") && !sb && !strcmp(tokenizer_kind(d), "bpe") &&
                 tokenizer_pattern(d) == BPE_PATTERN_LLAMA3 && tokenizer_vocab_size(d) == 300,
             "train_pattern_llama3", "rc=%d pattern file %s kind %s", rc, pf ? "llama3" : "(none)", sb ? err.msg : tokenizer_kind(d));
    free(pf);
    if (!sb) tokenizer_free(d);
    d = NULL;
    snprintf(out, sizeof out, "%s/help.log", WORK);
    rc = run("tokenizer --help", out);
    log = tu_slurp(out);
    tu_check(rc == 0 && log && strstr(log, "llama3") && strstr(log, "o200k") && strstr(log, "cl100k") && strstr(log, "bytes") &&
                 !strstr(log, "GPT-2's pre-tokenization"),
             "tokenizer_help", "lists gpt2, cl100k, o200k, llama3, bytes");
    free(log);
}

int main(void) {
    const char *env = getenv("ST_LLAMA3_DIR");
    snprintf(model_dir, sizeof model_dir, "%s", env && *env ? env : ST_SOURCE_DIR "/data/tokenizers/llama3");
    snprintf(model_path, sizeof model_path, "%s/tokenizer.model", model_dir);
    Err err;
    if (file_mkdirs(WORK, &err)) {
        tu_check(0, "setup", "%s", err.msg);
        return tu_exit();
    }
    Tokenizer *t = NULL;
    Status st = tokenizer_load(&t, "llama3", model_dir, &err);
    if (st) {
        tu_check(0, "load", "%s (Meta's tokenizer.model is fetched by scripts/fetch-llama3-tokenizer.sh, which "
                            "`make test` runs through scripts/install-deps.sh --test)", err.msg);
        return tu_exit();
    }
    tu_check(tokenizer_vocab_size(t) == 128256 && tokenizer_eot(t) == 128001 && !strcmp(tokenizer_kind(t), "llama3") &&
                 tokenizer_pattern(t) == BPE_PATTERN_LLAMA3 && tokenizer_special_count(t) == 256 &&
                 tokenizer_special_at(t, 0) == 128000 && tokenizer_special_at(t, 255) == 128255,
             "load", "vocab %u eot %u kind %s specials %u", tokenizer_vocab_size(t), tokenizer_eot(t), tokenizer_kind(t),
             tokenizer_special_count(t));

    /* ranks 0..100255 = cl100k_base's */
    Tokenizer *c = NULL;
    uint32_t same = 0;
    if (!tokenizer_load(&c, "cl100k", ST_SOURCE_DIR "/data/tokenizers", &err))
        for (uint32_t r = 0; r < 100256; r++) {
            size_t la, lb;
            const uint8_t *a = tokenizer_token_bytes(t, r, &la), *b = tokenizer_token_bytes(c, r, &lb);
            same += a && b && la == lb && !memcmp(a, b, la);
        }
    tu_check(same == 100256 && tokenizer_hash(c) != tokenizer_hash(t), "ranks_equal_cl100k", "%u of 100256 ranks equal", same);
    tokenizer_free(c);

    char *vtext = tu_slurp(ST_SOURCE_DIR "/tests/fixtures/llama3_vectors.jsonl");
    cJSON *vec = cJSON_CreateArray();
    int nspecial = 0, badspecial = 0;
    for (char *line = vtext; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        cJSON *v = cJSON_Parse(line);
        if (v) cJSON_AddItemToArray(vec, v);
        line = nl ? nl + 1 : line + strlen(line);
    }
    /* special tokens: tiktoken's ids, by name both ways */
    for (cJSON *v = vec->child; v; v = v->next) {
        cJSON *name = cJSON_GetObjectItem(v, "special");
        if (!cJSON_IsString(name)) continue;
        uint32_t want = (uint32_t)cJSON_GetArrayItem(cJSON_GetObjectItem(v, "id"), 0)->valuedouble, id = 0;
        size_t l = 0;
        const uint8_t *b = tokenizer_token_bytes(t, want, &l);
        int ok = tokenizer_special_id(t, name->valuestring, &id) == 0 && id == want && b && l == strlen(name->valuestring) &&
                 !memcmp(b, name->valuestring, l);
        if (!ok && badspecial < 5) printf("  special %s: ours %u, tiktoken %u\n", name->valuestring, id, want);
        badspecial += !ok;
        nspecial++;
    }
    uint32_t eotid = 0, boh = 0, eoh = 0, bos = 0, eom = 0, pad = 0, py = 0;
    int named = !tokenizer_special_id(t, "<|eot_id|>", &eotid) && !tokenizer_special_id(t, "<|begin_of_text|>", &bos) &&
                !tokenizer_special_id(t, "<|start_header_id|>", &boh) && !tokenizer_special_id(t, "<|end_header_id|>", &eoh) &&
                !tokenizer_special_id(t, "<|eom_id|>", &eom) && !tokenizer_special_id(t, "<|finetune_right_pad_id|>", &pad) &&
                !tokenizer_special_id(t, "<|python_tag|>", &py) && tokenizer_special_id(t, "<|endoftext|>", &py) == -1 &&
                tokenizer_special_id(t, "hello", &py) == -1 && tokenizer_special_id(t, "<|reserved_special_token_246|>", &py) == -1;
    tu_check(nspecial == 256 && badspecial == 0 && named && eotid == 128009 && bos == 128000 && boh == 128006 && eoh == 128007 &&
                 eom == 128008 && pad == 128004 && py == 128010,
             "special_ids", "%d of %d special tokens differ from tiktoken's; eot_id %u begin_of_text %u headers %u %u", badspecial,
             nspecial, eotid, bos, boh, eoh);

    int ntext, badc, nc;
    int bad = compare(t, vec, &ntext, &badc, &nc, 1);
    tu_check(ntext >= 300 && bad == 0 && nc == 2 && badc == 0, "vectors_tiktoken", "%d of %d vectors and %d of %d corpora differ",
             bad, ntext, badc, nc);

    /* encode never yields a special id; decode(encode(x)) == x on random bytes */
    uint64_t seed = 0x9E3779B97F4A7C15ULL;
    int rt_bad = 0;
    for (int k = 0; k < 300; k++) {
        uint8_t buf[200];
        size_t n = 1 + (size_t)(k % 199);
        for (size_t i = 0; i < n; i++) {
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
            buf[i] = (uint8_t)(k % 3 == 0 ? seed : k % 3 == 1 ? (uint8_t)"<|eot_id> 'sS\n\t1a\xc3\xa9"[seed % 16] : 0x20 + seed % 95);
        }
        uint32_t *ids = NULL;
        size_t nids = 0, cap = 0, len = 0, bcap = 0;
        uint8_t *back = NULL;
        tokenizer_encode(t, buf, n, &ids, &nids, &cap, &err);
        int ok = !tokenizer_decode(t, ids, nids, &back, &len, &bcap, &err) && len == n && !memcmp(back, buf, n);
        for (size_t i = 0; i < nids; i++) ok &= ids[i] < 128000;
        rt_bad += !ok;
        free(ids);
        free(back);
    }
    tu_check(rt_bad == 0, "round_trip", "%d of 300 random byte strings fail decode(encode(x)) == x or yield a special id", rt_bad);

    /* negative controls: wrong pre-tokenizers */
    BpePattern wrong[] = {BPE_PATTERN_TEST_LLAMA3_CASE, BPE_PATTERN_GPT2};
    for (int k = 0; k < 2; k++) {
        Tokenizer *w = NULL;
        int wb = -1;
        if (!tokenizer_load_llama3(&w, model_path, wrong[k], &err)) wb = compare(w, vec, &ntext, &badc, &nc, 0);
        tu_check(wb > 0 && tokenizer_hash(w) != tokenizer_hash(t), "negative_control_pattern",
                 "%s: %d of %d vectors differ from tiktoken (must be > 0)", k ? "gpt2's pattern" : "TEST_LLAMA3_CASE", wb, ntext);
        tokenizer_free(w);
    }
    /* negative control: ranks 279 (" the") and 323 (" and") swapped, both 4 bytes */
    size_t mn = 0;
    char *model = NULL;
    if (file_read_all(model_path, &model, &mn, &err) == ST_OK) {
        size_t a = line_start(model, 279), b = line_start(model, 323);
        size_t ae = (size_t)(strchr(model + a, ' ') - model), be = (size_t)(strchr(model + b, ' ') - model);
        char *sw = malloc(mn);
        memcpy(sw, model, mn);
        int swappable = ae - a == be - b;
        if (swappable) {
            memcpy(sw + a, model + b, ae - a);
            memcpy(sw + b, model + a, ae - a);
        }
        Err e2;
        const void *bufs[1] = {sw};
        file_write_atomic(WORK "/swapped.model", bufs, &mn, 1, &e2);
        Tokenizer *w = NULL;
        int wb = -1;
        if (!tokenizer_load_llama3(&w, WORK "/swapped.model", BPE_PATTERN_FILE, &err)) wb = compare(w, vec, &ntext, &badc, &nc, 0);
        tu_check(swappable && wb > 0 && badc >= 1 && nc == 2, "negative_control_swapped_ranks",
                 "ranks 279 and 323 swapped: %d of %d vectors and %d of %d corpora differ", wb, ntext, badc, nc);
        tokenizer_free(w);
        free(sw);
        test_errors(model, mn);
        free(model);
    } else {
        tu_check(0, "read_model", "%s", err.msg);
    }
    cJSON_Delete(vec);
    free(vtext);

    /* the hash: distinct from every other tokenizer's, and a regression value (computed by this code) */
    tu_check(tokenizer_hash(t) == 0x8547ecaad72185f3ULL, "hash", "0x%016llx", (unsigned long long)tokenizer_hash(t));

    test_special_other();
    test_end_to_end(t);
    tokenizer_free(t);
    return tu_exit();
}
