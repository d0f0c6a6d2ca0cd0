/* test_loader.c — the loader's order, rank slicing, resume, epochs, mixing and no-pack rows.
 *
 * Oracle: shards whose token at global position g is g itself (uint32 shards), so every row
 * names the window it came from and its contents can be checked exactly; rank slices are compared
 * with the single-rank batch; resume with the uninterrupted run; mixing proportions with the
 * quotas (exact per period of LOADER_MIX_PERIOD samples, smoothness within 1 sample); no-pack rows
 * with an independent reconstruction of the document stream. Tolerances: none (exact). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/loader.h"
#include "data/shard.h"
#include "testutil.h"

static char tmpdir[] = "/tmp/test_loader_XXXXXX";

static const char *tpath(const char *name) {
    static char p[8][600];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}

/* Writes shards name_0.bin ... with token(g) = base + g, of the given sizes. */
static void write_counting(const char *name, uint32_t base, const size_t *sizes, int n) {
    size_t g = 0;
    for (int i = 0; i < n; i++) {
        uint32_t *t = malloc(sizes[i] * sizeof *t);
        for (size_t j = 0; j < sizes[i]; j++) t[j] = base + (uint32_t)(g + j);
        g += sizes[i];
        char f[64];
        snprintf(f, sizeof f, "%s_%d.bin", name, i);
        ShardMeta m = {0, 0, 0};
        Err e;
        if (shard_write(tpath(f), t, sizes[i], &m, &e)) printf("setup: %s\n", e.msg);
        free(t);
    }
}

#define T 16

/* Checks a packed row: inputs base + w·T + t, targets + 1; returns the window or -1. */
static long row_window(const int32_t *in, const int32_t *tg, uint32_t base) {
    long w = ((long)in[0] - (long)base) / T;
    for (int t = 0; t < T; t++)
        if (in[t] != (int32_t)(base + w * T + t) || tg[t] != (int32_t)(base + w * T + t + 1)) return -1;
    return w;
}

int main(void) {
    if (!mkdtemp(tmpdir)) return 1;
    Err err;
    size_t sizes[3] = {1000, 777, 1500}; /* 3277 tokens -> (3277-1)/16 = 204 windows */
    write_counting("a", 0, sizes, 3);
    char glob_a[700];
    snprintf(glob_a, sizeof glob_a, "%s/a_*.bin", tmpdir);
    const uint64_t nwin = 204;
    const int B = 2, G = 24; /* global batch: 24 rows = B·k·dp for (k, dp) = (12,1), (6,2), (3,4) */

    /* ---- 1. exactly once per epoch across ranks; 2 and 4 ranks reassemble the 1-rank batch ---- */
    int dps[3] = {1, 2, 4};
    long *seq[3];
    int ok_content = 1, ok_disjoint = 1;
    const int steps = 20; /* 480 samples: more than two epochs */
    for (int c = 0; c < 3; c++) {
        int dp = dps[c], k = G / (B * dp);
        Loader ld[4];
        for (int r = 0; r < dp; r++)
            if (loader_open(&ld[r], glob_a, T, 0, 0, 99, LOADER_SHUFFLE, &err)) printf("open: %s\n", err.msg);
        seq[c] = malloc((size_t)steps * G * sizeof(long));
        int32_t in[B * T], tg[B * T];
        for (int s = 0; s < steps; s++) {
            for (int r = 0; r < dp; r++) {
                for (int j = 0; j < k; j++) {
                    loader_fill_rank(&ld[r], r, dp, j, B, k, in, tg);
                    for (int b = 0; b < B; b++) {
                        long w = row_window(in + b * T, tg + b * T, 0);
                        ok_content &= w >= 0 && w < (long)nwin;
                        seq[c][(long)s * G + r * B * k + j * B + b] = w;
                    }
                }
                loader_step_done(&ld[r], dp, B, k);
            }
            /* two ranks never share a window inside a step (the step lies inside <= 2 epochs, so
             * check only pairs drawn from the same epoch) */
            for (int r1 = 0; r1 < dp; r1++)
                for (int r2 = r1 + 1; r2 < dp; r2++)
                    for (int x = 0; x < B * k; x++)
                        for (int y = 0; y < B * k; y++) {
                            long n1 = (long)s * G + r1 * B * k + x, n2 = (long)s * G + r2 * B * k + y;
                            if (n1 / (long)nwin == n2 / (long)nwin && seq[c][n1] == seq[c][n2]) ok_disjoint = 0;
                        }
        }
        for (int r = 0; r < dp; r++) loader_close(&ld[r]);
    }
    tu_check(ok_content, "loader_window_contents", "every row is window w: inputs w*T+t, targets +1 (across shards)");
    int once = 1;
    for (int c = 0; c < 3; c++)
        for (uint64_t e = 0; e < 2; e++) {
            int seen[204] = {0};
            for (uint64_t i = 0; i < nwin; i++) seen[seq[c][e * nwin + i]]++;
            for (uint64_t w = 0; w < nwin; w++) once &= seen[w] == 1;
        }
    tu_check(once, "loader_epoch_exactly_once", "epochs 0 and 1 on 1, 2 and 4 ranks: each of %llu windows once",
             (unsigned long long)nwin);
    tu_check(ok_disjoint, "loader_ranks_disjoint", "2 and 4 ranks: no window shared by two ranks within an epoch");
    int same = memcmp(seq[0], seq[1], (size_t)steps * G * sizeof(long)) == 0 &&
               memcmp(seq[0], seq[2], (size_t)steps * G * sizeof(long)) == 0;
    tu_check(same, "loader_ranks_union_equals_single", "steps 0..%d: concat over ranks of 2 and 4 = 1-rank batch",
             steps - 1);
    int differ = 0;
    for (uint64_t i = 0; i < nwin; i++) differ += seq[0][i] != seq[0][nwin + i];
    tu_check(differ > (int)nwin / 2, "loader_epochs_reshuffled", "%d of %llu positions differ between epochs 0 and 1",
             differ, (unsigned long long)nwin);

    /* ---- 3. epoch boundary inside one fill, and a different seed gives a different order ---- */
    Loader l1;
    loader_open(&l1, glob_a, T, 0, 0, 99, LOADER_SHUFFLE, &err);
    int32_t in[12 * T], tg[12 * T];
    loader_fill(&l1, nwin - 6, 12, in, tg); /* 6 rows of epoch 0, 6 of epoch 1 */
    int ok_straddle = 1;
    for (int b = 0; b < 12; b++) ok_straddle &= row_window(in + b * T, tg + b * T, 0) == seq[0][nwin - 6 + b];
    tu_check(ok_straddle, "loader_epoch_boundary", "a fill of samples %llu..%llu equals the per-sample sequence",
             (unsigned long long)nwin - 6, (unsigned long long)nwin + 5);
    loader_close(&l1);
    loader_open(&l1, glob_a, T, 0, 0, 100, LOADER_SHUFFLE, &err);
    int dseed = 0;
    for (uint64_t n = 0; n < nwin; n++) {
        int d;
        dseed += (long)loader_sample_row(&l1, n, &d) != seq[0][n];
    }
    tu_check(dseed > (int)nwin / 2, "loader_seed_changes_order", "%d of %llu differ for seed 100 vs 99", dseed,
             (unsigned long long)nwin);
    loader_close(&l1);

    /* ---- 4. stop and resume from the saved state (on another world size) ---- */
    {
        Loader a;
        loader_open(&a, glob_a, T, 0, 0, 99, LOADER_SHUFFLE, &err);
        for (int s = 0; s < 7; s++) loader_step_done(&a, 2, B, 6);
        LoaderState saved = loader_get_state(&a);
        loader_close(&a);
        int ok = saved.seed == 99 && saved.consumed == 7 * (uint64_t)G;
        /* resume on 4 ranks (dp 2 before): each rank opens, restores, continues */
        for (int r = 0; r < 4; r++) {
            Loader b;
            loader_open(&b, glob_a, T, 0, 0, 12345 /* overridden by the state */, LOADER_SHUFFLE, &err);
            loader_set_state(&b, saved);
            for (int s = 7; s < steps; s++) {
                for (int j = 0; j < 3; j++) {
                    int32_t i2[B * T], t2[B * T];
                    loader_fill_rank(&b, r, 4, j, B, 3, i2, t2);
                    for (int x = 0; x < B; x++)
                        ok &= row_window(i2 + x * T, t2 + x * T, 0) == seq[0][(long)s * G + r * B * 3 + j * B + x];
                }
                loader_step_done(&b, 4, B, 3);
            }
            loader_close(&b);
        }
        tu_check(ok, "loader_resume_identical", "state {seed 99, consumed %llu} saved at step 7 on 2 ranks, resumed "
                 "on 4: steps 7..%d identical", (unsigned long long)saved.consumed, steps - 1);
    }
    for (int c = 0; c < 3; c++) free(seq[c]);

    /* ---- 5. mixing: proportions, smoothness, per-dataset epochs, determinism, rank independence ---- */
    size_t sb[2] = {600, 333}; /* dataset b: 933 tokens -> 58 windows, tokens 1,000,000 + g */
    write_counting("b", 1000000, sb, 2);
    size_t sc[1] = {2000}; /* dataset c: 124 windows, tokens 2,000,000 + g */
    write_counting("c", 2000000, sc, 1);
    char mix[2200];
    snprintf(mix, sizeof mix, "%s:0.7,%s/b_*.bin:0.3", glob_a, tmpdir);
    Loader m1, m2;
    Status st = loader_open(&m1, mix, T, 0, 0, 5, LOADER_SHUFFLE, &err);
    tu_check(!st && m1.nsets == 2 && m1.sets[0].quota == 7000 && m1.sets[1].quota == 3000, "loader_mix_open",
             "%s sets=%d quotas=%u/%u", st ? err.msg : "", m1.nsets, m1.nsets == 2 ? m1.sets[0].quota : 0,
             m1.nsets == 2 ? m1.sets[1].quota : 0);
    const long NS = 100000;
    long cnt[2] = {0, 0}, run_a = 0;
    double worst = 0;
    int *which = malloc(NS * sizeof *which);
    long *rowof = malloc(NS * sizeof *rowof);
    int mix_content = 1;
    for (long n = 0; n < NS; n += 10) { /* via loader_fill: contents name the dataset */
        int32_t i3[10 * T], t3[10 * T];
        loader_fill(&m1, (uint64_t)n, 10, i3, t3);
        for (int b = 0; b < 10; b++) {
            int d = i3[b * T] >= 1000000;
            long w = row_window(i3 + b * T, t3 + b * T, d ? 1000000u : 0u);
            mix_content &= w >= 0 && w < (long)m1.sets[d].nrows;
            which[n + b] = d, rowof[n + b] = w;
            cnt[d]++;
        }
    }
    for (long n = 0; n < NS; n++) { /* smoothness: |count_a(0..n) - 0.7 (n+1)| stays below 1 */
        run_a += which[n] == 0;
        double dev = run_a - 0.7 * (double)(n + 1);
        if (dev < 0) dev = -dev;
        if (dev > worst) worst = dev;
    }
    tu_check(mix_content && cnt[0] == 70000 && cnt[1] == 30000 && worst < 1.0, "loader_mix_proportions",
             "%ld samples: a %ld (0.7 -> 70000), b %ld; max |count_a - 0.7 n| = %.3f", NS, cnt[0], cnt[1],
             worst);
    /* per-dataset epochs: the first nrows samples of each dataset visit each of its windows once */
    int per_once = 1;
    for (int d = 0; d < 2; d++) {
        long nr = (long)m1.sets[d].nrows, got = 0;
        int *seen = calloc((size_t)nr, sizeof *seen);
        for (long n = 0; n < NS && got < nr; n++)
            if (which[n] == d) seen[rowof[n]]++, got++;
        for (long w = 0; w < nr; w++) per_once &= seen[w] == 1;
        free(seen);
    }
    tu_check(per_once, "loader_mix_dataset_epochs", "each dataset's first epoch (%llu and %llu windows) once each",
             (unsigned long long)m1.sets[0].nrows, (unsigned long long)m1.sets[1].nrows);
    /* determinism and rank independence: a second loader, 4 ranks from an odd offset */
    loader_open(&m2, mix, T, 0, 0, 5, LOADER_SHUFFLE, &err);
    LoaderState at = {5, 1234 * 24};
    int mix_same = 1;
    for (int r = 0; r < 4; r++) {
        loader_set_state(&m2, at);
        for (int j = 0; j < 3; j++) {
            int32_t i4[B * T], t4[B * T];
            loader_fill_rank(&m2, r, 4, j, B, 3, i4, t4);
            for (int b = 0; b < B; b++) {
                long n = (long)at.consumed + r * 6 + j * B + b;
                int d = i4[b * T] >= 1000000;
                mix_same &= d == which[n] && row_window(i4 + b * T, t4 + b * T, d ? 1000000u : 0u) == rowof[n];
            }
        }
    }
    tu_check(mix_same, "loader_mix_deterministic", "a second loader on 4 ranks at sample %llu: same datasets and rows",
             (unsigned long long)at.consumed);
    loader_close(&m1);
    loader_close(&m2);
    free(which);
    free(rowof);
    /* three datasets with unnormalized weights 1:2:1 */
    snprintf(mix, sizeof mix, "%s:1,%s/b_*.bin:2,%s/c_*.bin:1", glob_a, tmpdir, tmpdir);
    st = loader_open(&m1, mix, T, 0, 0, 5, LOADER_SHUFFLE, &err);
    long c3[3] = {0, 0, 0};
    for (long n = 0; !st && n < 20000; n++) {
        int d;
        loader_sample_row(&m1, (uint64_t)n, &d);
        c3[d]++;
    }
    tu_check(!st && c3[0] == 5000 && c3[1] == 10000 && c3[2] == 5000, "loader_mix_three_weights",
             "1:2:1 over 20000 samples: %ld %ld %ld", c3[0], c3[1], c3[2]);
    loader_close(&m1);

    /* ---- 6. bad specs ---- */
    snprintf(mix, sizeof mix, "%s:0.7,%s/b_*.bin", glob_a, tmpdir);
    st = loader_open(&m1, mix, T, 0, 0, 5, LOADER_SHUFFLE, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "WEIGHT on every item"), "loader_mix_partial_weights", "%s",
             err.msg);
    snprintf(mix, sizeof mix, "%s:0,%s/b_*.bin:1", glob_a, tmpdir);
    st = loader_open(&m1, mix, T, 0, 0, 5, LOADER_SHUFFLE, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "weight > 0"), "loader_mix_zero_weight", "%s", err.msg);
    snprintf(mix, sizeof mix, "%s:0.5,%s/nothing_*.bin:0.5", glob_a, tmpdir);
    st = loader_open(&m1, mix, T, 0, 0, 5, LOADER_SHUFFLE, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "nothing_*.bin: no such file"), "loader_mix_missing", "%s",
             err.msg);
    /* one weighted item: a mixture of one, whose weight would change nothing (it was accepted and
     * ignored by train and eval until 2026-11-29) */
    snprintf(mix, sizeof mix, "%s:0.5", glob_a);
    st = loader_open(&m1, mix, T, 0, 0, 5, LOADER_SHUFFLE, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "a :WEIGHT mixes several datasets, found one"), "loader_one_weighted_item",
             "%s", st ? err.msg : "(opened)");
    loader_close(&m1);
    /* an unweighted list is one dataset: a + b concatenated */
    snprintf(mix, sizeof mix, "%s,%s/b_*.bin", glob_a, tmpdir);
    st = loader_open(&m1, mix, T, 0, 0, 5, LOADER_SHUFFLE, &err);
    tu_check(!st && m1.nsets == 1 && m1.total_tokens == 3277 + 933 && m1.nwin == (3277 + 933 - 1) / T,
             "loader_list_concatenates", "sets=%d tokens=%zu", m1.nsets, m1.total_tokens);
    loader_close(&m1);

    /* ---- 7. no-pack: rows per document, padding masked, nothing else masked ---- */
    {
        const uint32_t V = 300, EOT = V - 1;
        int lens[] = {5, 40, 16, 0, 33, 1, 15, 7}; /* the last document has no closing EOT */
        int nd = (int)(sizeof lens / sizeof *lens);
        uint32_t stream[400];
        size_t n = 0;
        uint32_t v = 0;
        for (int i = 0; i < nd; i++) {
            for (int j = 0; j < lens[i]; j++) stream[n++] = v++ % 290;
            if (i + 1 < nd) stream[n++] = EOT;
        }
        ShardMeta meta = {0, 0, V};
        shard_write(tpath("np_0.bin"), stream, 70, &meta, &err); /* a document crosses the shards */
        shard_write(tpath("np_1.bin"), stream + 70, n - 70, &meta, &err);
        Loader np;
        char g[700];
        snprintf(g, sizeof g, "%s/np_*.bin", tmpdir);
        st = loader_open(&np, g, T, V, 0, 0, LOADER_NO_PACK, &err);
        /* oracle: document i has lens[i] + 1 targets (+0 for the last), rows = ceil(targets / T);
         * empty documents have no rows */
        uint64_t rows = 0, real = 0;
        for (int i = 0; i < nd; i++) {
            uint64_t tt = (uint64_t)lens[i] + (i + 1 < nd);
            if (lens[i] == 0) continue;
            rows += (tt + T - 1) / T;
            real += tt;
        }
        tu_check(!st && np.nwin == rows, "loader_nopack_rows", "%s rows=%llu expected %llu", st ? err.msg : "",
                 (unsigned long long)np.nwin, (unsigned long long)rows);
        /* unshuffled rows in order: real targets concatenated = the stream without empty docs'
         * EOTs; each row's inputs are EOT-then-targets shifted by one; padding = exactly the tail */
        int32_t *ri = malloc(rows * T * sizeof *ri), *rt = malloc(rows * T * sizeof *rt);
        loader_fill(&np, 0, (int)rows, ri, rt);
        uint32_t expect[400];
        size_t ne = 0, prev_eot = 1;
        for (size_t i = 0; i < n; i++) {
            if (stream[i] == EOT && prev_eot) continue; /* EOT of an empty document */
            expect[ne++] = stream[i];
            prev_eot = stream[i] == EOT;
        }
        size_t got = 0, masked = 0;
        int ok = 1;
        uint32_t last_target = EOT;
        for (uint64_t r = 0; r < rows; r++) {
            int32_t *in = ri + r * T, *tg = rt + r * T;
            int t = 0;
            for (; t < T && tg[t] >= 0; t++) {
                ok &= got < ne && (uint32_t)tg[t] == expect[got];
                ok &= (uint32_t)in[t] == (t == 0 ? last_target : (uint32_t)tg[t - 1]);
                got++;
            }
            last_target = (uint32_t)tg[t - 1];
            int real_here = t;
            for (; t < T; t++) {
                ok &= tg[t] == -1 && (uint32_t)in[t] == EOT;
                masked++;
            }
            /* a row is padded only where its document ends (last target EOT or end of stream) */
            if (real_here < T) ok &= (uint32_t)tg[real_here - 1] == EOT || got == ne;
        }
        double util = loader_utilization(&np);
        tu_check(ok && got == ne && got == real && masked == rows * T - real &&
                     util == (double)real / (double)(rows * T),
                 "loader_nopack_masks_padding", "targets %zu (expected %llu), masked %zu = padding, utilization %.4f",
                 got, (unsigned long long)real, masked, util);
        loader_close(&np);
        /* shuffled no-pack: a permutation of the same rows */
        st = loader_open(&np, g, T, V, 0, 3, LOADER_NO_PACK | LOADER_SHUFFLE, &err);
        int32_t *si = malloc(rows * T * sizeof *si), *stt = malloc(rows * T * sizeof *stt);
        loader_fill(&np, 0, (int)rows, si, stt);
        int perm_ok = 1;
        for (uint64_t r = 0; r < rows; r++) {
            int found = 0;
            for (uint64_t q = 0; q < rows && !found; q++)
                found = !memcmp(si + r * T, ri + q * T, T * sizeof *si) && !memcmp(stt + r * T, rt + q * T, T * sizeof *si);
            perm_ok &= found;
        }
        tu_check(!st && perm_ok, "loader_nopack_shuffled", "every shuffled row is one of the %llu rows",
                 (unsigned long long)rows);
        loader_close(&np);
        /* packed utilization is 1 */
        loader_open(&np, g, T, V, 0, 3, LOADER_SHUFFLE, &err);
        tu_check(loader_utilization(&np) == 1.0, "loader_packed_utilization", "%.4f", loader_utilization(&np));
        loader_close(&np);
        free(ri), free(rt), free(si), free(stt);
    }

    /* ---- one tokenizer per loader, by the headers: shards of two tokenizers or two vocabularies are
     * refused (ids of two tokenizers stand for different text), in one glob and across a mixture, and
     * --val-data against --data; headers recording none are not compared. Header words a writer never
     * produces are refused when the shard opens. Controls: the same files with agreeing headers load. */
    {
        uint32_t t[40];
        for (int i = 0; i < 40; i++) t[i] = (uint32_t)i;
        const ShardMeta ma = {0x1111, 0, 100, 0, 0}, mb = {0x2222, 0, 100, 0, 0}, mv = {0x1111, 0, 200, 0, 0},
                        m0 = {0, 0, 0, 0, 0};
        Loader l, l2;
        char gl[700], mix[1500];
        snprintf(gl, sizeof gl, "%s/tk_*.bin", tmpdir);
        snprintf(mix, sizeof mix, "%s/tk_0.bin:1,%s/tk_1.bin:1", tmpdir, tmpdir);
        const struct { const ShardMeta *second; int ok; const char *what, *needle; } cases[] = {
            {&mb, 0, "loader_two_tokenizers_refused", "expected shards of one tokenizer"},
            {&mv, 0, "loader_two_vocabularies_refused", "expected shards of one vocabulary"},
            {&ma, 1, "control_loader_one_tokenizer_loads", ""},
            {&m0, 1, "control_loader_header_without_tokenizer_loads", ""},
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            shard_write(tpath("tk_0.bin"), t, 40, &ma, &err);
            shard_write(tpath("tk_1.bin"), t, 40, cases[c].second, &err);
            for (int m = 0; m < 2; m++) {
                Status s1 = loader_open(&l, m ? mix : gl, T, 0, 0, 0, 0, &err);
                if (!s1) loader_close(&l);
                char lbl[128];
                snprintf(lbl, sizeof lbl, "%s%s", cases[c].what, m ? "_mixture" : "");
                tu_check(cases[c].ok ? !s1 : s1 == ST_ERR_INPUT && strstr(err.msg, cases[c].needle) != NULL, lbl, "%s",
                         s1 ? err.msg : "loaded");
            }
        }
        /* --val-data against --data */
        shard_write(tpath("tv_a.bin"), t, 40, &ma, &err);
        shard_write(tpath("tv_b.bin"), t, 40, &mb, &err);
        loader_open(&l, tpath("tv_a.bin"), T, 0, 0, 0, 0, &err);
        loader_open(&l2, tpath("tv_b.bin"), T, 0, 0, 0, 0, &err);
        Status s2 = loader_check_same_tokenizer(&l, &l2, "tv_b.bin", &err);
        tu_check(s2 == ST_ERR_INPUT && strstr(err.msg, "--val-data tv_b.bin: expected shards of the training shards' tokenizer"),
                 "loader_val_data_of_another_tokenizer_refused", "%s", s2 ? err.msg : "accepted");
        tu_check(!loader_check_same_tokenizer(&l, &l, "tv_a.bin", &err), "control_loader_val_data_same_tokenizer", "%s",
                 err.msg);
        loader_close(&l2);
        /* ids at or above the header's own vocabulary (below the model's): a damaged header */
        const ShardMeta m30 = {0x1111, 0, 30, 0, 0}, m50 = {0x1111, 0, 50, 0, 0};
        shard_write(tpath("hv_0.bin"), t, 40, &m30, &err);
        loader_open(&l2, tpath("hv_0.bin"), T, 0, 0, 0, 0, &err);
        s2 = loader_check_vocab(&l2, 100, &err);
        tu_check(s2 == ST_ERR_INPUT && strstr(err.msg, "below the vocabulary size 30 its header records, found id 30"),
                 "loader_ids_beyond_header_vocabulary_refused", "%s", s2 ? err.msg : "accepted");
        loader_close(&l2);
        shard_write(tpath("hv_0.bin"), t, 40, &m50, &err);
        loader_open(&l2, tpath("hv_0.bin"), T, 0, 0, 0, 0, &err);
        tu_check(!loader_check_vocab(&l2, 100, &err), "control_loader_ids_within_header_vocabulary", "%s", err.msg);
        loader_close(&l2);
        loader_close(&l);
        /* header words no writer produces: a vocabulary over 2^30, an EOT beyond the vocabulary */
        const ShardMeta mbig = {0x1111, 0, 0xFFFFFFFFu, 0, 7}, meot = {0x1111, 0, 100, 200, 0};
        shard_write(tpath("hw_0.bin"), t, 40, &mbig, &err);
        s2 = loader_open(&l2, tpath("hw_0.bin"), T, 0, 0, 0, 0, &err);
        tu_check(s2 == ST_ERR_INPUT && strstr(err.msg, "hw_0.bin: expected a vocabulary size of at most 2^30"),
                 "shard_header_vocabulary_over_2p30_refused", "%s", s2 ? err.msg : "accepted");
        if (!s2) loader_close(&l2);
        shard_write(tpath("hw_0.bin"), t, 40, &meot, &err);
        s2 = loader_open(&l2, tpath("hw_0.bin"), T, 0, 0, 0, 0, &err);
        tu_check(s2 == ST_ERR_INPUT && strstr(err.msg, "expected an EOT id below the vocabulary size 100"),
                 "shard_header_eot_beyond_vocabulary_refused", "%s", s2 ? err.msg : "accepted");
        if (!s2) loader_close(&l2);
    }

    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", tmpdir);
    return tu_exit();
}
