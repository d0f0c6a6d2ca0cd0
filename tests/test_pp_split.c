/* test_pp_split.c — the pipeline stage split (layout_pp_split), each stage's FLOPs per token
 * (layout_pp_stage_flops) and parameters (layout_pp_stage_params). No MPI.
 *
 * Oracles (each check names its own):
 *  - closed forms: a head cheaper than one block splits L = k·pp blocks evenly, one unit dearer
 *    does not (the last stage gets fewer); --pp-layers counts reproduced as given;
 *  - brute force: every contiguous split of L blocks into pp non-empty stages, costed by this
 *    test's own formula (forward 24C² + 4TC per block, 2VC for the head on the last stage, in
 *    integers): the function's largest stage cost equals the optimum, and its split is the first
 *    in lexicographic order among those with the optimal maximum and the least sum of squares
 *    (the documented tie rule);
 *  - layout_flops_per_token (the project's one FLOPs formula): the stages' costs sum to it exactly;
 *  - layout_init's tensors (the allocator's layout): elements per stage, counted from the real
 *    rows of each segment's tensors, plus the tied wte copy on the last stage;
 *  - every refusal: status ST_ERR_INPUT, the exact one-line message, first/last untouched.
 * Negative controls (run here; the test fails if they pass): a deliberately unbalanced split has a
 * strictly larger maximum, so the optimality check fails on it; brute force over a cost model
 * without the head picks a different split for the large vocabulary; the parameter oracle without
 * the tied copy disagrees on the last stage.
 * It also prints the table of docs/plan.md ("Pipeline stages: the split"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "model/layout.h"
#include "testutil.h"

#define MAXS 64

static ModelConfig mkcfg(int L, int C, int V) {
    ModelConfig c = {0};
    c.n_layer = L, c.n_head = 1, c.n_embd = C, c.vocab = V, c.max_seq = 1024;
    Err e;
    if (model_config_validate(&c, &e) != ST_OK) {
        fprintf(stderr, "config: %s\n", e.msg);
        exit(1);
    }
    return c;
}

/* ---- the test's own cost model: forward FLOPs per token, integers ---- */
typedef struct {
    long long block, head; /* one block's forward FLOPs; the head's (0 in the wrong model) */
} Cost;

static Cost cost_of(const ModelConfig *c, int T, int with_head) {
    long long C = c->n_embd;
    Cost k = {24 * C * C + 4 * (long long)T * C, with_head ? 2LL * c->vocab * C : 0};
    return k;
}

static long long stage_cost(Cost k, const int n[], int s, int pp) { return n[s] * k.block + (s == pp - 1 ? k.head : 0); }

static long long max_cost(Cost k, const int n[], int pp) {
    long long m = 0;
    for (int s = 0; s < pp; s++)
        if (stage_cost(k, n, s, pp) > m) m = stage_cost(k, n, s, pp);
    return m;
}

static long double sumsq(Cost k, const int n[], int pp) {
    long double q = 0;
    for (int s = 0; s < pp; s++) q += (long double)stage_cost(k, n, s, pp) * stage_cost(k, n, s, pp);
    return q;
}

/* Brute force: every composition of L into pp positive counts, in lexicographic order; keeps the
 * first with the least (max, sum of squares). */
typedef struct {
    Cost k;
    int L, pp, cur[MAXS], best[MAXS];
    long long best_max;
    long double best_sq;
    long count;
} Brute;

static void brute_rec(Brute *b, int s, int left) {
    if (s == b->pp - 1) {
        b->cur[s] = left;
        b->count++;
        long long m = max_cost(b->k, b->cur, b->pp);
        long double q = sumsq(b->k, b->cur, b->pp);
        if (b->best_max < 0 || m < b->best_max || (m == b->best_max && q < b->best_sq)) {
            b->best_max = m, b->best_sq = q;
            memcpy(b->best, b->cur, sizeof b->cur);
        }
        return;
    }
    for (int n = 1; n <= left - (b->pp - 1 - s); n++) {
        b->cur[s] = n;
        brute_rec(b, s + 1, left - n);
    }
}

static Brute brute(Cost k, int L, int pp) {
    Brute b;
    memset(&b, 0, sizeof b);
    b.k = k, b.L = L, b.pp = pp, b.best_max = -1;
    brute_rec(&b, 0, L);
    return b;
}

/* The function's split as counts; 0 if it refused (the message printed). */
static int split_counts(const ModelConfig *c, int T, int pp, const char *explicit_layers, int n[]) {
    int first[MAXS], last[MAXS];
    Err e;
    if (layout_pp_split(c, T, pp, explicit_layers, first, last, &e) != ST_OK) {
        printf("  layout_pp_split refused: %s\n", e.msg);
        return 0;
    }
    for (int s = 0; s < pp; s++) n[s] = last[s] - first[s];
    return 1;
}

static void fmt_counts(const int n[], int pp, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = 0;
    for (int s = 0; s < pp && o < cap; s++) o += (size_t)snprintf(buf + o, cap - o, "%s%d", s ? "," : "", n[s]);
}

static int same_counts(const int a[], const int b[], int pp) { return memcmp(a, b, (size_t)pp * sizeof *a) == 0; }

/* ---- closed forms ---- */

static void test_even(void) {
    static const int cases[][2] = {{12, 1}, {12, 2}, {12, 3}, {12, 4}, {12, 6}, {12, 12}, {24, 8}, {48, 8}, {48, 16}};
    int bad = 0, ncase = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < ncase; i++) {
        int L = cases[i][0], pp = cases[i][1], n[MAXS];
        ModelConfig c = mkcfg(L, 64, 64); /* head 2·64·64 < block 24·64² + 4·64·64 */
        if (!split_counts(&c, 64, pp, NULL, n)) {
            bad++;
            continue;
        }
        for (int s = 0; s < pp; s++) bad += n[s] != L / pp;
    }
    tu_check(bad == 0, "even split: head cheaper than a block, L = k·pp → k blocks per stage (closed form)",
             "%d cases, %d stages off", ncase, bad);

    /* The threshold: head = block ± 2C FLOPs (V = 12C + 2T ± 1). Below it 3,3,3,3 (max 3b + h < 4b);
     * above it 3b + h > 4b, so the last stage drops to 2 blocks and the maximum is 4b. */
    int C = 64, T = 64, n[4] = {0};
    ModelConfig lo = mkcfg(12, C, 12 * C + 2 * T - 1), hi = mkcfg(12, C, 12 * C + 2 * T + 1);
    int ok_lo = split_counts(&lo, T, 4, NULL, n) && n[0] == 3 && n[1] == 3 && n[2] == 3 && n[3] == 3;
    char a[64], b[64];
    fmt_counts(n, 4, a, sizeof a);
    int ok_hi = split_counts(&hi, T, 4, NULL, n) && n[3] == 2 && max_cost(cost_of(&hi, T, 1), n, 4) == 4 * cost_of(&hi, T, 1).block;
    fmt_counts(n, 4, b, sizeof b);
    tu_check(ok_lo && ok_hi, "even split threshold: V = 12C+2T-1 → 3,3,3,3; V = 12C+2T+1 → last stage 2, max 4 blocks",
             "below %s, above %s", a, b);
}

/* ---- brute force ---- */

static void test_large_vocab(void) {
    /* gpt2-124m's shape: the head (2VC = 4.46 blocks) makes the last stage the heavy one. */
    int L = 12, T = 1024, pp = 4, n[4] = {0};
    ModelConfig c = mkcfg(L, 768, 50257);
    Cost k = cost_of(&c, T, 1);
    Brute b = brute(k, L, pp);
    int ok = split_counts(&c, T, pp, NULL, n);
    char got[64], want[64];
    fmt_counts(n, pp, got, sizeof got);
    fmt_counts(b.best, pp, want, sizeof want);
    long long m = ok ? max_cost(k, n, pp) : -1;
    tu_check(ok && n[pp - 1] < L / pp && m == b.best_max && same_counts(n, b.best, pp),
             "large vocabulary L=12 C=768 V=50257 T=1024 pp=4: last stage fewer blocks, max = brute-force optimum",
             "split %s (brute force %s over %ld splits), max %lld vs optimum %lld FLOPs/token forward", got, want,
             b.count, m, b.best_max);

    /* Negative control 1: all but pp−1 blocks on stage 0. Its maximum must be strictly larger, so
     * the optimality check (max == brute-force optimum) fails on it. */
    int u[4] = {L - pp + 1, 1, 1, 1};
    long long mu = max_cost(k, u, pp);
    tu_check(mu > m && mu != b.best_max, "negative control: unbalanced 9,1,1,1 fails the optimality check",
             "max %lld > %lld (%.2fx)", mu, m, (double)mu / (double)m);

    /* Negative control 2: brute force over a model without the head must disagree (3,3,3,3), and
     * its split costs more under the true model. */
    Brute w = brute(cost_of(&c, T, 0), L, pp);
    char wrong[64];
    fmt_counts(w.best, pp, wrong, sizeof wrong);
    long long mw = max_cost(k, w.best, pp);
    tu_check(!same_counts(w.best, n, pp) && mw > m, "negative control: brute force without the head disagrees",
             "head-less optimum %s costs %lld under the true model vs %lld for %s", wrong, mw, m, got);
}

/* Many shapes, every (L, pp) with L <= 14, pp <= 6: maximum and exact split against brute force. */
static void test_sweep(void) {
    static const int shapes[][3] = {{64, 64, 64}, {768, 50257, 1024}, {128, 5000, 256}, {1600, 50257, 1024},
                                    {64, 50257, 16}, {32, 900, 8}};
    int cases = 0, bad_max = 0, bad_split = 0;
    long splits = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int L = 1; L <= 14; L++)
            for (int pp = 1; pp <= L && pp <= 6; pp++) {
                int C = shapes[i][0], V = shapes[i][1], T = shapes[i][2], n[MAXS];
                ModelConfig c = mkcfg(L, C, V);
                Cost k = cost_of(&c, T, 1);
                Brute b = brute(k, L, pp);
                splits += b.count, cases++;
                if (!split_counts(&c, T, pp, NULL, n)) {
                    bad_max++, bad_split++;
                    continue;
                }
                if (max_cost(k, n, pp) != b.best_max) {
                    bad_max++;
                    char g[128], w[128];
                    fmt_counts(n, pp, g, sizeof g), fmt_counts(b.best, pp, w, sizeof w);
                    printf("  C=%d V=%d T=%d L=%d pp=%d: %s (max %lld) vs brute force %s (max %lld)\n", C, V, T, L, pp,
                           g, max_cost(k, n, pp), w, b.best_max);
                }
                bad_split += !same_counts(n, b.best, pp);
            }
    tu_check(bad_max == 0, "sweep: max stage cost = brute-force optimum (6 shapes, L <= 14, pp <= 6)",
             "%d cases, %ld splits enumerated, %d off", cases, splits, bad_max);
    tu_check(bad_split == 0, "sweep: the split is brute force's first (max, sum of squares) minimiser (tie rule)",
             "%d cases, %d differ", cases, bad_split);
}

/* layout_pp_stage_flops: 3 × the test's forward cost per stage, and the sum is layout_flops_per_token. */
static void test_stage_flops(void) {
    static const int shapes[][4] = {{12, 768, 50257, 1024}, {48, 1600, 50257, 1024}, {7, 64, 300, 32}};
    int bad = 0, cases = 0;
    double worst = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int pp = 1; pp <= 8 && pp <= shapes[i][0]; pp++) {
            ModelConfig c = mkcfg(shapes[i][0], shapes[i][1], shapes[i][2]);
            int T = shapes[i][3], first[MAXS], last[MAXS], n[MAXS];
            Err e;
            if (layout_pp_split(&c, T, pp, NULL, first, last, &e) != ST_OK) {
                bad++;
                continue;
            }
            Cost k = cost_of(&c, T, 1);
            double sum = 0;
            for (int s = 0; s < pp; s++) n[s] = last[s] - first[s];
            for (int s = 0; s < pp; s++) {
                double f = layout_pp_stage_flops(&c, T, first, last, s, pp);
                bad += f != 3.0 * (double)stage_cost(k, n, s, pp);
                sum += f;
            }
            double fpt = layout_flops_per_token(&c, T), d = sum > fpt ? sum - fpt : fpt - sum;
            if (d > worst) worst = d;
            bad += sum != fpt;
            cases++;
        }
    tu_check(bad == 0, "stage FLOPs = 3 x (blocks 24C²+4TC, head 2VC); sum = layout_flops_per_token exactly",
             "%d splits, max |sum - fpt| = %g", cases, worst);
}

/* ---- --pp-layers and refusals ---- */

static void test_explicit(void) {
    ModelConfig c14 = mkcfg(14, 64, 64), c12 = mkcfg(12, 768, 50257), c4 = mkcfg(4, 64, 64);
    int first[MAXS], last[MAXS];
    Err e;
    int ok = layout_pp_split(&c14, 64, 4, "4,4,3,3", first, last, &e) == ST_OK && first[0] == 0 && last[0] == 4 &&
             first[1] == 4 && last[1] == 8 && first[2] == 8 && last[2] == 11 && first[3] == 11 && last[3] == 14;
    /* An unbalanced explicit split is the user's choice: taken as given. */
    ok = ok && layout_pp_split(&c12, 1024, 4, "9,1,1,1", first, last, &e) == ST_OK && last[0] == 9 && last[1] == 10 &&
         last[2] == 11 && last[3] == 12;
    ok = ok && layout_pp_split(&c12, 1024, 1, "12", first, last, &e) == ST_OK && first[0] == 0 && last[0] == 12;
    ok = ok && layout_pp_split(&c4, 64, 4, "1,1,1,1", first, last, &e) == ST_OK && last[0] == 1 && last[3] == 4;
    /* An empty string means "balanced", as NULL. */
    ok = ok && layout_pp_split(&c14, 64, 2, "", first, last, &e) == ST_OK && last[0] == 7 && last[1] == 14;
    tu_check(ok, "--pp-layers 4,4,3,3 / 9,1,1,1 / 12 / 1,1,1,1 reproduced as given; \"\" is balanced", "%s", "");
}

static void test_refusals(void) {
    ModelConfig c4 = mkcfg(4, 64, 64), c14 = mkcfg(14, 64, 64);
    static const struct {
        int L, pp, T;
        const char *layers, *msg;
    } R[] = {
        {4, 5, 64, NULL, "--pp 5: expected at most the 4 layers (--layers), found 5"},
        {4, 0, 64, NULL, "--pp 0: expected a positive number of pipeline stages"},
        {4, -2, 64, NULL, "--pp -2: expected a positive number of pipeline stages"},
        {4, 2, 0, NULL, "--seq-len 0: expected a positive sequence length"},
        {14, 4, 64, "4,4,3", "--pp-layers 4,4,3: expected 4 counts (--pp 4), found 3"},
        {14, 4, 64, "4,4,3,2,1", "--pp-layers 4,4,3,2,1: expected 4 counts (--pp 4), found 5"},
        {14, 4, 64, "4,4,3,4", "--pp-layers 4,4,3,4: expected counts summing to 14 layers (--layers), found 15"},
        {14, 4, 64, "1,1,1,1", "--pp-layers 1,1,1,1: expected counts summing to 14 layers (--layers), found 4"},
        {14, 4, 64, "4,x,3,3", "--pp-layers 4,x,3,3: expected comma-separated positive layer counts, found \"x\""},
        {14, 4, 64, "4,,3,3", "--pp-layers 4,,3,3: expected comma-separated positive layer counts, found \"\""},
        {14, 4, 64, "4,4,3,3,", "--pp-layers 4,4,3,3,: expected comma-separated positive layer counts, found \"\""},
        {14, 4, 64, "4,-4,3,3", "--pp-layers 4,-4,3,3: expected comma-separated positive layer counts, found \"-4\""},
        {14, 4, 64, " 4,4,3,3", "--pp-layers  4,4,3,3: expected comma-separated positive layer counts, found \" 4\""},
        {14, 4, 64, "4.5,4,3,3", "--pp-layers 4.5,4,3,3: expected comma-separated positive layer counts, found \"4.5\""},
        {14, 4, 64, "99999999999,1,1,1",
         "--pp-layers 99999999999,1,1,1: expected comma-separated positive layer counts, found \"99999999999\""},
        {14, 4, 64, "4,0,7,3", "--pp-layers 4,0,7,3: expected at least 1 layer per stage, found 0 for stage 1"},
    };
    int bad = 0, n = (int)(sizeof R / sizeof R[0]);
    for (int i = 0; i < n; i++) {
        int first[MAXS], last[MAXS];
        for (int s = 0; s < MAXS; s++) first[s] = last[s] = -7;
        Err e = {0};
        Status st = layout_pp_split(R[i].L == 4 ? &c4 : &c14, R[i].T, R[i].pp, R[i].layers, first, last, &e);
        int untouched = 1;
        for (int s = 0; s < MAXS; s++) untouched &= first[s] == -7 && last[s] == -7;
        if (st != ST_ERR_INPUT || strcmp(e.msg, R[i].msg) != 0 || !untouched || strchr(e.msg, '\n')) {
            bad++;
            printf("  case %d: status %d untouched %d\n    got  %s\n    want %s\n", i, (int)st, untouched, e.msg, R[i].msg);
        }
    }
    tu_check(bad == 0, "refusals: ST_ERR_INPUT, the exact one-line message, first/last untouched", "%d cases, %d wrong", n,
             bad);
}

/* ---- parameters per stage against layout_init's tensors ---- */

/* Elements of layout segments [a, b) counted from the tensors' real rows (no padding). */
static long long seg_elems(const ParamLayout *pl, int a, int b) {
    long long e = 0;
    for (int i = 0; i < pl->ntensors; i++) {
        const TensorInfo *t = &pl->tensors[i];
        if (t->segment >= a && t->segment < b) e += (long long)t->rows_real * t->shape[1];
    }
    return e;
}

static void test_params(void) {
    static const int shapes[][3] = {{12, 768, 50257}, {48, 1600, 50257}, {5, 64, 300}};
    int bad = 0, bad_nocopy = 0, cases = 0, bad_total = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int pp = 1; pp <= 8 && pp <= shapes[i][0]; pp++) {
            ModelConfig c = mkcfg(shapes[i][0], shapes[i][1], shapes[i][2]);
            ParamLayout pl;
            int first[MAXS], last[MAXS], L = c.n_layer;
            Err e;
            if (layout_init(&pl, &c, 1) != 0 || layout_pp_split(&c, 1024, pp, NULL, first, last, &e) != ST_OK) {
                bad++;
                continue;
            }
            int wte = layout_find(&pl, "wte");
            long long wte_n = (long long)pl.tensors[wte].rows_real * pl.tensors[wte].shape[1], sum = 0;
            for (int s = 0; s < pp; s++) {
                /* Oracle: segment 0 (embeddings) on stage 0, segments 1 + [first, last) for the blocks,
                 * segment L + 1 (lnf) and the tied wte's copy on the last stage (pp > 1). */
                long long want = seg_elems(&pl, 1 + first[s], 1 + last[s]), nocopy;
                if (s == 0) want += seg_elems(&pl, 0, 1);
                if (s == pp - 1) want += seg_elems(&pl, L + 1, L + 2);
                nocopy = want;
                if (s == pp - 1 && pp > 1) want += wte_n;
                long long got = layout_pp_stage_params(&c, first, last, s, pp);
                bad += got != want;
                /* Negative control: the oracle without the tied copy must disagree on the last stage. */
                if (s == pp - 1 && pp > 1) bad_nocopy += got == nocopy;
                sum += got;
            }
            long long total = model_config_num_params(&c) + (pp > 1 ? (long long)c.vocab * c.n_embd : 0);
            bad_total += sum != total;
            cases++;
            layout_free(&pl);
        }
    tu_check(bad == 0, "stage parameters = layout_init's tensors per stage (+ tied wte on the last stage)",
             "%d splits, %d stages off", cases, bad);
    tu_check(bad_total == 0, "stage parameters sum = model_config_num_params (+ V·C when pp > 1)", "%d splits, %d off",
             cases, bad_total);
    tu_check(bad_nocopy == 0, "negative control: the parameter oracle without the tied wte copy disagrees",
             "%d last stages matched it", bad_nocopy);
}

/* The docs/plan.md table: blocks per stage and each stage's cost relative to the mean (total/pp),
 * balanced and uniform (L/pp each). */
static void print_table(void) {
    static const char *const models[] = {"gpt2-124m", "gpt2-1558m"};
    printf("\n| model | pp | balanced: blocks per stage | stage cost / mean | max | uniform L/pp: max |\n"
           "|---|---|---|---|---|---|\n");
    for (int m = 0; m < 2; m++)
        for (int pp = 4; pp <= 8; pp += 4) {
            ModelConfig c = {0};
            Err e;
            model_config_preset(&c, models[m], &e);
            c.vocab = 50257, c.max_seq = 1024;
            model_config_validate(&c, &e);
            int first[MAXS], last[MAXS], T = 1024, L = c.n_layer;
            layout_pp_split(&c, T, pp, NULL, first, last, &e);
            double mean = layout_flops_per_token(&c, T) / pp, mx = 0;
            char counts[128], rel[256];
            size_t o = 0, r = 0;
            for (int s = 0; s < pp; s++) {
                double f = layout_pp_stage_flops(&c, T, first, last, s, pp) / mean;
                if (f > mx) mx = f;
                o += (size_t)snprintf(counts + o, sizeof counts - o, "%s%d", s ? " " : "", last[s] - first[s]);
                r += (size_t)snprintf(rel + r, sizeof rel - r, "%s%.3f", s ? " " : "", f);
            }
            /* Uniform: L/pp each; its maximum is the last stage's. */
            int uf[MAXS], ul[MAXS];
            for (int s = 0; s < pp; s++) uf[s] = s * L / pp, ul[s] = (s + 1) * L / pp;
            double umx = 0;
            for (int s = 0; s < pp; s++) {
                double f = layout_pp_stage_flops(&c, T, uf, ul, s, pp) / mean;
                if (f > umx) umx = f;
            }
            printf("| %s | %d | %s | %s | %.3f | %.3f |\n", models[m], pp, counts, rel, mx, umx);
        }
    printf("\n");
}

int main(void) {
    test_even();
    test_large_vocab();
    test_sweep();
    test_stage_flops();
    test_explicit();
    test_refusals();
    test_params();
    print_table();
    return tu_exit();
}
