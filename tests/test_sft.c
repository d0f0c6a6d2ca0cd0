/* test_sft.c — supervised fine-tuning end to end (issue 27): chat rendering with loss masks, the mask
 * files, the loader's masked targets and the masked loss of training and eval against PyTorch.
 *
 * Usage: test_sft MPIEXEC SCALETRAIN
 *
 * 1. loss (oracle: tests/fixtures/sft_ref.bin + sft_init/, written by gen_sft_ref.py with Debian's
 *    python3-torch in float64 from the same float32 weights): a 4-row token stream with a mask
 *    training 1, 6, 3 and 8 targets of its rows; 3 SGD steps (lr 0.5, no momentum, decay or clip)
 *    whose every step takes all 4 rows. The step loss (mean over the step's trained targets, across
 *    accumulation and ranks) of one process at accumulation 1, 2 and 4, and of 2 ranks under mpirun at
 *    accumulation 1 and 2 (and with --tp 2 and --pp 2: the vocabulary-parallel loss and the pipeline's
 *    label routing), equals PyTorch's masked cross-entropy within 1e-6 (absolute, every step; steps
 *    2 and 3 see the gradient, so a gradient normalised per micro-batch or rank also shows); each step
 *    record's `tokens` is the 18 trained targets. eval of the initial weights on the masked shard gives
 *    step 1's loss and 18 targets. Negative control: the same tokens with an all-ones mask (and with no
 *    mask) give PyTorch's unmasked losses (within 1e-6) and differ from the masked ones by > 1e-4.
 * 2. loader: the targets of the 4 rows are the tokens where the fixture's mask is 1 and -1 where it is 0;
 *    a dataset where one shard has a mask and another has none, a mask of another shard's tokens (same
 *    count: the hash), and a mask of another length are refused naming the file. Control: the same
 *    shards with their own masks open.
 * 3. prepare --format chat: the documents of the shard and its mask, as a multiset (prepare orders
 *    documents by key), equal an independent rendering by gen_sft_chat.py: plain with GPT-2
 *    (sft_chat_expected.txt: its own template code, the tokenizer CLI, byte offsets from encoder.json)
 *    and llama3 with Meta's Llama 3 tokenizer (sft_chat_llama3_expected.txt: Meta's reference
 *    ChatFormat, each piece encoded on its own; the tokenizer.model is fetched, as for
 *    test_llama3_tokenizer, and its absence FAILS). Negative control: the expectation with one mask bit
 *    flipped does not match. auto picks llama3 for that tokenizer; llama3 with GPT-2 is refused. The validation
 *    split gets masks too and the manifest records them. Bad input: each malformed line is refused with
 *    exit 2 and one line naming file:line and what was found; --skip-bad counts and warns instead.
 * 4. eval --exact-match: a tiny byte-level model fine-tuned on two conversations until it has memorized
 *    them answers all 80 lines of its training file exactly (oracle: the answers it was trained on);
 *    control: the same prompts with the answers swapped score 0 of 2. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/loader.h"
#include "data/shard.h"
#include "fixture.h"
#include "runcmp.h"
#include "testutil.h"

#define DIR ST_BINARY_DIR "/test_sft"
#define FIX ST_SOURCE_DIR "/tests/fixtures"

static const char *g_mpi, *g_bin;
static Fixture g_fx;
static int g_T, g_rows, g_steps, g_ntok;
static const int32_t *g_tokens, *g_mask;
static const double *g_masked, *g_ones;

static const FixtureEntry *need(const char *name) {
    const FixtureEntry *e = fixture_get(&g_fx, name);
    if (!e) {
        printf("%s/sft_ref.bin: entry %s missing (regenerate: /usr/bin/python3 tests/fixtures/gen_sft_ref.py)\n", FIX,
               name);
        exit(1);
    }
    return e;
}

/* dir/train.bin with the fixture's tokens; mask: 0 none, 1 the fixture's, 2 all ones. */
static void write_shard(const char *dir, const char *name, int mask) {
    char p[1024];
    snprintf(p, sizeof p, "mkdir -p %s", dir);
    tu_shell(p);
    uint32_t *t = malloc(sizeof *t * (size_t)g_ntok);
    uint8_t *bits = calloc((size_t)g_ntok / 8 + 1, 1);
    for (int i = 0; i < g_ntok; i++) {
        t[i] = (uint32_t)g_tokens[i];
        if (mask == 2 || (mask == 1 && g_mask[i])) bits[i >> 3] |= (uint8_t)(1u << (i & 7));
    }
    ShardMeta m = {0};
    m.vocab_size = 64;
    Err e;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    char mp[1100];
    shard_mask_path(mp, sizeof mp, p);
    remove(mp);
    int ok = shard_write(p, t, (size_t)g_ntok, &m, &e) == ST_OK;
    if (ok && mask) ok = shard_mask_write(p, bits, (size_t)g_ntok, &e) == ST_OK;
    if (!ok) tu_check(0, "write shard", "%s: %s", p, e.msg);
    free(t);
    free(bits);
}

/* ---------------------------------------------------------------- 1. the masked loss */

#define COMMON                                                                                                     \
    "train --init-from " FIX "/sft_init --seq-len 8 --optimizer sgd --momentum 0 --weight-decay 0 --grad-clip 0 " \
    "--lr 0.5 --schedule constant --warmup 0 --steps 3 --val-every 0 --threads 1 --quiet"

/* Runs `train` on data with B rows per micro-batch, k micro-batches, np ranks (0: no mpirun). */
static int train(const char *name, const char *data, int np, int B, int k, const char *extra) {
    char cmd[4096], launch[1024] = "";
    if (np > 0)
        snprintf(launch, sizeof launch, "timeout 120 %s --allow-run-as-root --oversubscribe -np %d -x OMP_NUM_THREADS=1 ",
                 g_mpi, np);
    char common[1024];
    snprintf(cmd, sizeof cmd, "rm -f %s/%s.jsonl; %s%s %s --data %s --micro-batch %d --grad-accum %d --log %s/%s.jsonl %s",
             DIR, name, launch, g_bin, tu_less_given(common, sizeof common, COMMON, extra), data, B, k, DIR, name,
             extra ? extra : "");
    int rc = rc_run(DIR, name, cmd, NULL);
    if (rc != 0) tu_check(0, name, "exit %d (see %s/%s.out)", rc, DIR, name);
    return rc == 0;
}

/* Max |loss_s - ref_s| over the steps of run `name`; NAN if its log lacks a step. *tokens_ok: every
 * step record's tokens == want_tokens. */
static double loss_diff(const char *name, const double *ref, int want_tokens, int *tokens_ok) {
    RcLog lg;
    *tokens_ok = 0;
    if (!rc_read_log(DIR, name, &lg) || lg.n != g_steps) return NAN;
    double worst = 0;
    *tokens_ok = 1;
    for (int s = 0; s < g_steps; s++) {
        double d = fabs(lg.loss[s] - ref[s]);
        worst = d > worst || isnan(d) ? d : worst;
        *tokens_ok &= lg.tokens[s] == want_tokens;
    }
    return worst;
}

static void check_run_x(const char *name, const char *data, int np, int B, int k, const double *ref, int want_tokens,
                        const char *what, const char *extra) {
    if (!train(name, data, np, B, k, extra)) return;
    int tok_ok;
    double d = loss_diff(name, ref, want_tokens, &tok_ok);
    tu_check(d <= 1e-6, name, "%s: %d rank(s), micro-batch %d x accumulation %d: max |loss - PyTorch| = %.3g over %d "
             "steps (tol 1e-6)", what, np ? np : 1, B, k, d, g_steps);
    tu_check(tok_ok, name, "every step record's tokens = %d (the step's trained targets)", want_tokens);
}

static void check_run(const char *name, const char *data, int np, int B, int k, const double *ref, int want_tokens,
                      const char *what) {
    check_run_x(name, data, np, B, k, ref, want_tokens, what, NULL);
}

static void part_loss(void) {
    int trained = 0;
    for (int r = 0; r < g_rows; r++)
        for (int t = 1; t <= g_T; t++) trained += g_mask[r * g_T + t] != 0;
    const char *M = DIR "/masked/train.bin", *O = DIR "/ones/train.bin", *N = DIR "/nomask/train.bin";
    check_run("masked_k1", M, 0, 4, 1, g_masked, trained, "masked");
    check_run("masked_k2", M, 0, 2, 2, g_masked, trained, "masked");
    check_run("masked_k4", M, 0, 1, 4, g_masked, trained, "masked");
    check_run("masked_dp2_k1", M, 2, 2, 1, g_masked, trained, "masked");
    check_run("masked_dp2_k2", M, 2, 1, 2, g_masked, trained, "masked");
    /* the other consumers of targets: the vocabulary-parallel loss (tp) and pipeline label routing (pp) */
    check_run_x("masked_tp2", M, 2, 2, 2, g_masked, trained, "masked, --tp 2", "--tp 2");
    check_run_x("masked_pp2", M, 2, 2, 2, g_masked, trained, "masked, --pp 2", "--pp 2");
    /* negative control: all targets trained */
    check_run("ones_k2", O, 0, 2, 2, g_ones, g_rows * g_T, "all-ones mask (control)");
    check_run("nomask_dp2", N, 2, 2, 1, g_ones, g_rows * g_T, "no mask (control)");
    int tok_ok;
    double d = loss_diff("ones_k2", g_masked, g_rows * g_T, &tok_ok);
    tu_check(d > 1e-4, "control_differs", "the all-ones mask run against the masked reference: max diff %.3g (must "
             "exceed 1e-4, else the masked comparison could not tell masks apart)", d);
    /* validation on the masked shard after step s = the loss before step s + 1 */
    char extra[512];
    snprintf(extra, sizeof extra, "--val-data %s --val-every 1 --val-batches 2", M);
    if (train("masked_val", M, 0, 2, 2, extra)) {
        cJSON *all = rc_records(DIR, "masked_val"), *o;
        double worst = 0;
        int n = 0, tok_ok = 1;
        cJSON_ArrayForEach(o, all) {
            const char *ev = rc_event(o);
            double sd = rc_num(o, "step"); /* NaN: no step member (converting it is undefined) */
            long st = isfinite(sd) ? (long)sd : -1;
            if (!ev || strcmp(ev, "val") || st < 1 || st >= g_steps) continue;
            double d = fabs(rc_num(o, "loss") - g_masked[st]);
            worst = d > worst || isnan(d) ? d : worst;
            tok_ok &= rc_num(o, "tokens") == trained;
            n++;
        }
        tu_check(n == g_steps - 1 && worst <= 1e-6 && tok_ok, "val_masked",
                 "%d validation records after steps 1..%d: max |val loss - PyTorch's next-step loss| = %.3g (tol 1e-6), "
                 "tokens = %d: %s", n, g_steps - 1, worst, trained, tok_ok ? "yes" : "no");
        cJSON_Delete(all);
    }
    /* eval: the masked mean of the initial weights on the masked shard = step 1's loss */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s eval " FIX "/sft_init --data %s --seq-len 8 --micro-batch 3 --json --quiet", g_bin, M);
    cJSON *j = rc_command_json(cmd);
    double el = j ? rc_num(j, "loss") : NAN, et = j ? rc_num(j, "targets") : NAN;
    tu_check(fabs(el - g_masked[0]) <= 1e-6 && et == trained, "eval_masked",
             "eval loss %.9f vs PyTorch %.9f (tol 1e-6), targets %.0f (expected %d)", el, g_masked[0], et, trained);
    cJSON_Delete(j);
}

/* ---------------------------------------------------------------- 2. the loader */

static void expect_open_error(const char *spec, const char *want, const char *name) {
    Loader ld;
    Err e = {0};
    Status st = loader_open(&ld, spec, g_T, 64, 0, 1, 0, &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, want) != NULL, name, "%s -> \"%s\" (expected an error with \"%s\")",
             spec, st == ST_OK ? "(opened)" : e.msg, want);
    loader_close(&ld);
}

static void part_loader(void) {
    Loader ld;
    Err e;
    if (loader_open(&ld, DIR "/masked/train.bin", g_T, 64, 0, 1, 0, &e) != ST_OK) {
        tu_check(0, "loader_open", "%s", e.msg);
        return;
    }
    int32_t inp[64], tgt[64];
    loader_fill(&ld, 0, g_rows, inp, tgt);
    int bad = 0;
    for (int r = 0; r < g_rows; r++)
        for (int t = 0; t < g_T; t++) {
            int g = r * g_T + t + 1;
            int32_t want = g_mask[g] ? g_tokens[g] : -1;
            bad += tgt[r * g_T + t] != want || inp[r * g_T + t] != g_tokens[g - 1];
        }
    tu_check(bad == 0 && ld.masked, "loader_targets", "%d of %d targets differ from token-or--1 by the mask", bad,
             g_rows * g_T);
    loader_close(&ld);
    /* half-masked: a/x.bin with a mask, a/y.bin without */
    write_shard(DIR "/half", "x.bin", 1);
    write_shard(DIR "/half", "y.bin", 0);
    expect_open_error(DIR "/half/*.bin", "y.mask is missing", "loader_half_masked");
    /* a mask of other tokens (same count) */
    write_shard(DIR "/other", "x.bin", 1);
    tu_shell("cp " DIR "/other/x.bin " DIR "/other/y.bin");
    Shard sh;
    if (shard_open(&sh, DIR "/other/y.bin", &e) == ST_OK) { /* y = x with its first token changed */
        uint32_t *t = malloc(sizeof *t * sh.ntok);
        for (size_t i = 0; i < sh.ntok; i++) t[i] = shard_token(&sh, i);
        t[0] = (t[0] + 1) % 64;
        ShardMeta m = {0};
        m.vocab_size = 64;
        size_t n = sh.ntok;
        shard_close(&sh);
        shard_write(DIR "/other/y.bin", t, n, &m, &e);
        free(t);
    }
    tu_shell("cp " DIR "/other/x.mask " DIR "/other/y.mask");
    expect_open_error(DIR "/other/*.bin", "written for other tokens", "loader_mask_hash");
    /* a mask of another length */
    tu_shell("mkdir -p " DIR "/len && cp " DIR "/masked/train.bin " DIR "/len/a.bin && cp " DIR "/half/x.mask " DIR "/len/a.mask");
    {
        uint32_t t[40] = {0};
        ShardMeta m = {0};
        m.vocab_size = 64;
        uint8_t bits[5] = {0xff, 0, 0, 0, 0};
        shard_write(DIR "/len/b.bin", t, 40, &m, &e);
        shard_mask_write(DIR "/len/b.bin", bits, 40, &e);
        tu_shell("cp " DIR "/len/b.mask " DIR "/len/a.mask");
    }
    expect_open_error(DIR "/len/a.bin", "expected a mask of", "loader_mask_length");
    /* every mask gone, beside a manifest that says the shards have them (prepare's): refused (the
     * dataset trained its prompts); control: the same shard without such a manifest opens */
    tu_shell("mkdir -p " DIR "/masks_gone && cp " DIR "/masked/train.bin " DIR "/masks_gone/a.bin");
    Status nst = loader_open(&ld, DIR "/masks_gone/a.bin", g_T, 64, 0, 1, 0, &e);
    tu_check(nst == ST_OK, "control_loader_unmasked_without_manifest", "%s", nst ? e.msg : "opens");
    if (nst == ST_OK) loader_close(&ld);
    tu_shell("printf '{\"result\": {\"loss_masks\": true}}\\n' > " DIR "/masks_gone/manifest.json");
    expect_open_error(DIR "/masks_gone/a.bin", "expected its loss mask", "loader_masks_removed_beside_manifest");
    /* control: the same files with their own masks open */
    write_shard(DIR "/half", "y.bin", 1);
    int ok = loader_open(&ld, DIR "/half/*.bin", g_T, 64, 0, 1, 0, &e) == ST_OK;
    tu_check(ok, "loader_control", "a dataset whose every shard has its own mask opens%s%s", ok ? "" : ": ", ok ? "" : e.msg);
    if (ok) loader_close(&ld);
}

/* ---------------------------------------------------------------- 3. prepare --format chat */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The documents of shard `path` and its mask as "ids|mask" lines (each ends with its EOT); returns the
 * count (at most cap), -1 on error. */
static int shard_docs(const char *path, uint32_t eot, char **out, int cap) {
    Shard s;
    Err e;
    if (shard_open(&s, path, &e) != ST_OK || shard_mask_open(&s, &e) != ST_OK || !s.mask) {
        tu_check(0, "shard_docs", "%s: %s", path, s.mask ? e.msg : "no mask");
        return -1;
    }
    int n = 0;
    size_t begin = 0;
    for (size_t i = 0; i < s.ntok && n < cap; i++) {
        if (shard_token(&s, i) != eot) continue;
        size_t len = 0, sz = (i - begin + 1) * 16 + 2;
        char *l = malloc(sz);
        for (size_t k = begin; k <= i; k++) len += (size_t)snprintf(l + len, sz - len, k > begin ? " %u" : "%u", shard_token(&s, k));
        len += (size_t)snprintf(l + len, sz - len, "|");
        for (size_t k = begin; k <= i; k++) len += (size_t)snprintf(l + len, sz - len, k > begin ? " %d" : "%d", shard_mask_bit(&s, k));
        out[n++] = l;
        begin = i + 1;
    }
    shard_close(&s);
    return n;
}

/* 1 if the multisets of lines a (na) and b (nb) are equal (both are sorted here). */
static int same_docs(char **a, int na, char **b, int nb) {
    if (na != nb) return 0;
    qsort(a, (size_t)na, sizeof *a, cmp_str);
    qsort(b, (size_t)nb, sizeof *b, cmp_str);
    for (int i = 0; i < na; i++)
        if (strcmp(a[i], b[i])) return 0;
    return 1;
}

static void check_bad(const char *name, const char *content, int line, const char *want) {
    char p[1024], cmd[4096];
    snprintf(p, sizeof p, DIR "/%s.jsonl", name);
    FILE *f = fopen(p, "w");
    if (!f) return tu_check(0, name, "cannot write %s", p);
    fputs(content, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s prepare --quiet --format chat --out " DIR "/bad_out %s > " DIR "/%s.out 2>&1", g_bin, p, name);
    int rc = system(cmd);
    snprintf(p, sizeof p, DIR "/%s.out", name);
    char *out = tu_slurp(p), loc[256];
    snprintf(loc, sizeof loc, "%s.jsonl:%d: ", name, line);
    int lines = 0;
    for (char *c = out; c && *c; c++) lines += *c == '\n';
    int ok = WIFEXITED(rc) && WEXITSTATUS(rc) == 2 && out && strstr(out, loc) && strstr(out, want) && lines == 1;
    tu_check(ok, name, "exit %d, one line naming \"%s\" and \"%s\": %s", WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, loc, want,
             out ? out : "(no output)");
    free(out);
}

/* prepare --format chat of the fixture with `tok_args` against the expectation file `expected`
 * (documents end with EOT `eot`), and the control with one mask bit flipped. */
static void check_render(const char *name, const char *tok_args, const char *expected, uint32_t eot) {
    char cmd[4096], out_dir[1024], shard[1100];
    snprintf(out_dir, sizeof out_dir, DIR "/%s", name);
    snprintf(cmd, sizeof cmd, "rm -rf %s && %s prepare --quiet --format chat %s --val-fraction 0 --no-dedup --out %s "
             FIX "/sft_chat.jsonl > %s.out 2>&1", out_dir, g_bin, tok_args, out_dir, out_dir);
    if (!tu_shell(cmd)) return;
    char *exp_text = tu_slurp(expected);
    if (!exp_text) return tu_check(0, name, "cannot read %s (regenerate: tests/fixtures/gen_sft_chat.py)", expected);
    char *want[64], *got[64];
    int nw = 0;
    for (char *l = strtok(exp_text, "\n"); l && nw < 64; l = strtok(NULL, "\n")) want[nw++] = l;
    snprintf(shard, sizeof shard, "%s/train_000000.bin", out_dir);
    int ng = shard_docs(shard, eot, got, 64);
    int ok = ng > 0 && same_docs(got, ng, want, nw);
    tu_check(ok, name, "%s: %d documents of the shard + mask against %d rendered independently "
             "(gen_sft_chat.py): %s", tok_args, ng, nw, ok ? "equal" : "differ");
    if (ng > 0) { /* negative control: one mask bit flipped in the expectation */
        char *copy = strdup(want[0]);
        char *bar = strchr(copy, '|');
        if (bar && bar[1]) bar[1] = bar[1] == '0' ? '1' : '0';
        char *want2[64];
        memcpy(want2, want, sizeof want);
        want2[0] = copy;
        char cname[128];
        snprintf(cname, sizeof cname, "%s_control", name);
        tu_check(!same_docs(got, ng, want2, nw), cname, "an expectation with one mask bit flipped must not match");
        free(copy);
    }
    for (int i = 0; i < (ng > 0 ? ng : 0); i++) free(got[i]);
    free(exp_text);
}

static void part_prepare(void) {
    char cmd[4096];
    check_render("render_plain", "--tokenizer gpt2", FIX "/sft_chat_expected.txt", 50256);
    /* llama3: Meta's tokenizer.model is not in the repository (as test_llama3_tokenizer: without it this fails) */
    const char *env = getenv("ST_LLAMA3_DIR");
    char l3[1024], model[1100], args[1200];
    snprintf(l3, sizeof l3, "%s", env && *env ? env : ST_SOURCE_DIR "/data/tokenizers/llama3");
    snprintf(model, sizeof model, "%s/tokenizer.model", l3);
    FILE *mf = fopen(model, "rb");
    if (!mf)
        tu_check(0, "render_llama3", "%s: expected Meta's Llama 3 tokenizer, found none (scripts/fetch-llama3-tokenizer.sh, "
                 "which `make test` runs through scripts/install-deps.sh --test; or set ST_LLAMA3_DIR)", model);
    else {
        fclose(mf);
        snprintf(args, sizeof args, "--tokenizer llama3 --tokenizer-dir %s", l3);
        check_render("render_llama3", args, FIX "/sft_chat_llama3_expected.txt", 128001);
        /* auto picks llama3 for the Llama 3 tokenizer; --chat-template plain overrides it */
        char *man = tu_slurp(DIR "/render_llama3/manifest.json");
        tu_check(man && strstr(man, "\"chat_template\":\t\"llama3\""), "render_llama3_auto",
                 "--chat-template auto with --tokenizer llama3 is llama3 (manifest)");
        free(man);
        snprintf(args, sizeof args, "--tokenizer llama3 --tokenizer-dir %s --chat-template plain", l3);
        snprintf(cmd, sizeof cmd, "rm -rf " DIR "/l3plain && %s prepare --quiet --format chat %s --out " DIR "/l3plain "
                 FIX "/sft_chat.jsonl > " DIR "/l3plain.out 2>&1", g_bin, args);
        man = tu_shell(cmd) ? tu_slurp(DIR "/l3plain/manifest.json") : NULL;
        tu_check(man && strstr(man, "\"chat_template\":\t\"plain\""), "render_llama3_plain",
                 "--chat-template plain with --tokenizer llama3 is plain");
        free(man);
    }
    /* llama3 needs its special tokens: refused with GPT-2 */
    snprintf(cmd, sizeof cmd, "%s prepare --quiet --format chat --chat-template llama3 --out " DIR "/l3gpt2 " FIX
             "/sft_chat.jsonl > " DIR "/l3gpt2.out 2>&1", g_bin);
    int rc0 = system(cmd);
    char *o0 = tu_slurp(DIR "/l3gpt2.out");
    tu_check(WIFEXITED(rc0) && WEXITSTATUS(rc0) == 2 && o0 && strstr(o0, "<|begin_of_text|>"), "llama3_needs_specials",
             "--chat-template llama3 with gpt2: exit 2 naming the missing token: %s", o0 ? o0 : "");
    free(o0);
    /* the validation split gets masks; the manifest records them */
    snprintf(cmd, sizeof cmd, "rm -rf " DIR "/chatv && %s prepare --quiet --format chat --val-docs 3 --out " DIR "/chatv "
             FIX "/sft_chat.jsonl > " DIR "/chatv.out 2>&1", g_bin);
    if (tu_shell(cmd)) {
        Loader ld;
        Err e;
        int okv = loader_open(&ld, DIR "/chatv/val_*.bin", 4, 0, 0, 1, 0, &e) == ST_OK;
        int masked = okv && ld.masked;
        if (okv) loader_close(&ld);
        char *man = tu_slurp(DIR "/chatv/manifest.json");
        tu_check(masked && man && strstr(man, "\"loss_masks\":\ttrue") && strstr(man, "\"chat_template\":\t\"plain\""),
                 "prepare_val_masks", "val shards open with masks (%s), manifest records loss_masks and the template",
                 okv ? "opened" : e.msg);
        free(man);
    }
    /* bad input */
    const char *good = "{\"prompt\": \"a\", \"response\": \"b\"}\n";
    char buf[1024];
    snprintf(buf, sizeof buf, "%s{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, \n", good);
    check_bad("bad_json", buf, 2, "found invalid JSON");
    snprintf(buf, sizeof buf, "%s%s{\"prompt\": \"a\"}\n", good, good);
    check_bad("bad_fields", buf, 3, "found \"prompt\" without \"response\""); /* it said "neither ... nor" */
    check_bad("bad_two_schemas", "{\"prompt\": \"p\", \"response\": \"r\", \"messages\": [{\"role\": \"user\", \"content\": "
              "\"x\"}, {\"role\": \"assistant\", \"content\": \"y\"}]}\n", 1, "\"messages\" beside \"prompt\"");
    check_bad("bad_prompt_type", "{\"prompt\": 1, \"response\": \"y\"}\n", 1, "a non-string \"prompt\"");
    check_bad("bad_role", "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}, {\"role\": \"assistant\", \"content\": \"y\"}]}\n",
              1, "role \"tool\"");
    check_bad("bad_empty", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"content\": \" \\n\"}]}\n",
              1, "assistant message with empty content");
    check_bad("bad_untrained", "\n{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}\n", 2, "nothing to train");
    check_bad("bad_message", "{\"messages\": [{\"role\": \"user\"}, {\"role\": \"assistant\", \"content\": \"y\"}]}\n", 1,
              "without a string \"role\" and \"content\"");
    /* a second object or text after the object: the line used to be read as its first object */
    snprintf(buf, sizeof buf, "%s{\"prompt\": \"a\", \"response\": \"b\"} {\"prompt\": \"c\"}\n", good);
    check_bad("bad_two_objects", buf, 2, "found more text after the object at byte 34");
    /* \u0000 in a string: cJSON's C string ended there and the message was cut */
    check_bad("bad_nul_content", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", "
              "\"content\": \"y\\u0000z\"}]}\n", 1, "message 2 with a NUL character (\\u0000) in its content");
    check_bad("bad_nul_response", "{\"prompt\": \"a\", \"response\": \"b\\u0000\"}\n", 1,
              "a NUL character (\\u0000) in \"response\"");
    /* --skip-bad: counted and warned, the good lines kept */
    snprintf(cmd, sizeof cmd, "rm -rf " DIR "/skip && %s prepare --quiet --format chat --skip-bad --val-fraction 0 --out "
             DIR "/skip " DIR "/bad_role.jsonl " DIR "/bad_fields.jsonl > " DIR "/skip.out 2>&1", g_bin);
    int rc = system(cmd);
    char *out = tu_slurp(DIR "/skip.out");
    tu_check(rc == 0 && out && strstr(out, "warning: skipped (--skip-bad): 0 lines not JSON objects, 1 with neither") &&
                 strstr(out, "1 bad conversations") && strstr(out, "documents 2 read"),
             "prepare_skip_bad", "two bad lines counted in a warning, two good conversations kept: %s", out ? out : "");
    free(out);
}

/* ---------------------------------------------------------------- 4. eval --exact-match */

/* A tiny byte-level model fine-tuned until it has memorized two conversations ("abc" -> "cba", "xyz"
 * -> "zyx"): greedy answers to their prompts must be exactly the trained answers (2 of 2), and the
 * same prompts with the answers swapped must score 0 of 2 (the control: the comparison can fail). */
static void part_exact(void) {
    FILE *f = fopen(DIR "/memo.jsonl", "w");
    if (!f) return tu_check(0, "exact_match", "cannot write " DIR "/memo.jsonl");
    for (int i = 0; i < 40; i++)
        fputs("{\"prompt\": \"abc\", \"response\": \"cba\"}\n{\"prompt\": \"xyz\", \"response\": \"zyx\"}\n", f);
    fclose(f);
    f = fopen(DIR "/memo_swapped.jsonl", "w");
    if (!f) return tu_check(0, "exact_match", "cannot write " DIR "/memo_swapped.jsonl");
    fputs("{\"prompt\": \"abc\", \"response\": \"zyx\"}\n{\"prompt\": \"xyz\", \"response\": \"cba\"}\n", f);
    fclose(f);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf " DIR "/memo " DIR "/memo_model && %s prepare --quiet --tokenizer bytes --format chat "
             "--no-dedup --val-fraction 0 --out " DIR "/memo " DIR "/memo.jsonl > " DIR "/memo.out 2>&1 && %s train --data "
             "'" DIR "/memo/train_*.bin' --tokenizer bytes --layers 1 --heads 2 --channels 32 --max-seq-len 64 --seq-len 32 "
             "--micro-batch 8 --steps 150 --lr 1e-2 --warmup 0 --val-every 0 --threads 1 --quiet --out " DIR "/memo_model "
             ">> " DIR "/memo.out 2>&1", g_bin, g_bin);
    if (!tu_shell(cmd)) return;
    const char *files[2] = {DIR "/memo.jsonl", DIR "/memo_swapped.jsonl"};
    double want[2][2] = {{80, 80}, {2, 0}}; /* conversations, matches */
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s eval " DIR "/memo_model --exact-match %s --max-new-tokens 8 --threads 1 --json", g_bin,
                 files[k]);
        cJSON *j = rc_command_json(cmd);
        double nc = j ? rc_num(j, "conversations") : NAN, nm = j ? rc_num(j, "exact_matches") : NAN;
        tu_check(nc == want[k][0] && nm == want[k][1], k ? "exact_match_control" : "exact_match",
                 "%s: %.0f of %.0f greedy answers exact (expected %.0f of %.0f)", files[k], nm, nc, want[k][1], want[k][0]);
        cJSON_Delete(j);
    }
    /* a bad line: one line naming it, without prepare's --skip-bad hint (eval has no such option) */
    tu_shell("printf '{\"messages\": [{\"role\": \"user\"}]}\\n' > " DIR "/em_bad.jsonl");
    snprintf(cmd, sizeof cmd, "%s eval " DIR "/memo_model --exact-match " DIR "/em_bad.jsonl --quiet > " DIR
             "/em_bad.out 2>&1", g_bin);
    int brc = system(cmd);
    char *bt = tu_slurp(DIR "/em_bad.out");
    tu_check(WIFEXITED(brc) && WEXITSTATUS(brc) == 2 && bt && strstr(bt, "em_bad.jsonl:1: expected a chat object") &&
                 !strstr(bt, "--skip-bad"), "exact_match_bad_line_without_prepare_hint", "%s", bt ? bt : "");
    free(bt);
    /* --doc-mask / --no-doc-mask would change nothing with --exact-match (one prompt is one
     * document): refused, as --tokens is (they were accepted and ignored) */
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s eval " DIR "/memo_model --exact-match " DIR "/memo.jsonl --%s > " DIR
                 "/em_dm.out 2>&1", g_bin, k ? "no-doc-mask" : "doc-mask");
        int rc = system(cmd);
        char *t = tu_slurp(DIR "/em_dm.out");
        tu_check(WIFEXITED(rc) && WEXITSTATUS(rc) == 2 && t && strstr(t, "would change nothing with --exact-match"),
                 k ? "exact_match_no_doc_mask_refused" : "exact_match_doc_mask_refused", "%s", t ? t : "");
        free(t);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        printf("usage: test_sft MPIEXEC SCALETRAIN\n");
        return 2;
    }
    g_mpi = argv[1], g_bin = argv[2];
    char msg[512];
    if (fixture_load(&g_fx, FIX "/sft_ref.bin", msg, sizeof msg) != 0) {
        printf("%s\n", msg);
        return 1;
    }
    const int32_t *cfg = need("config")->data;
    g_T = cfg[5], g_rows = cfg[6], g_steps = cfg[7];
    g_tokens = need("tokens")->data, g_mask = need("mask")->data, g_ntok = (int)need("tokens")->numel;
    g_masked = need("loss_masked")->data, g_ones = need("loss_ones")->data;
    if (g_ntok != g_rows * g_T + 1 || g_steps > RC_MAXSTEPS) {
        printf("sft_ref.bin: expected rows*T+1 tokens and at most %d steps\n", RC_MAXSTEPS);
        return 1;
    }
    tu_shell("rm -rf " DIR " && mkdir -p " DIR);
    write_shard(DIR "/masked", "train.bin", 1);
    write_shard(DIR "/ones", "train.bin", 2);
    write_shard(DIR "/nomask", "train.bin", 0);
    part_loader();
    part_prepare();
    part_loss();
    part_exact();
    fixture_free(&g_fx);
    return tu_exit();
}
