/* test_rank_errors.c — an input error that only one rank finds reaches stderr (mpirun -np 2).
 *
 * Every rank runs the same command line, but each opens the shards itself: a file that differs on
 * one node is seen by that rank alone. Until 2026-11-26 only rank 0 printed input errors, so a
 * shard bad for rank 1 alone ended the job non-zero without a word from scaletrain.
 *
 * Oracle: the exit status and stderr of the real binary under mpirun, each rank started in its own
 * working directory (mpirun's MPMD form, -wdir) with the same relative --data path, so the two
 * ranks read different files under one command line:
 *   - rank 1's file bad (wrong magic): exit 2 from the job, rank 1's own line
 *     `scaletrain train: rank 1: ...magic...`, rank 0's line saying data was refused on 1 other
 *     rank, nothing killed by the launcher;
 *   - both files bad (a replicated error): exactly one copy of the message, and no `rank 1:` line
 *     (the oracle tells the two apart);
 *   - a flag value bad on rank 1's command line alone (MPMD): rank 1's own line, rank 0's saying the
 *     command line was refused on 1 other rank;
 *   - `--help` on rank 1's command line alone: its usage printed once, every rank ends, exit 0;
 *   - `--resume ck` (relative) where only rank 0's directory has the checkpoint: rank 1's own
 *     "expected a checkpoint, found none", rank 0's saying resume was refused on 1 other rank;
 *   - `--resume auto --ckpt-dir ck` where the two directories hold checkpoints of different steps
 *     (1 and 2): one line, naming both steps, exit 2 (before, each rank loaded its own);
 * Controls: both files good: exit 0; both directories holding the same step-2 checkpoint (copies,
 * as on node-local disks) resume from it and exit 0 (without --ckpt-dir: a sharded save needs one
 * directory that every rank sees, and says so when it is not).
 * Usage: test_rank_errors MPIEXEC (no MPIEXEC: the test fails, it does not pass). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/fileio.h"
#include "data/shard.h"
#include "testutil.h"

#define BIN ST_BINARY_DIR "/scaletrain"
#define TMP ST_BINARY_DIR "/test_rank_errors"

static const char *g_mpi;

/* A valid 2000-token shard (vocabulary 257) at path; or, bad, the same with a wrong magic. */
static void write_shard(const char *path, int bad) {
    uint16_t t16[2000];
    for (int i = 0; i < 2000; i++) t16[i] = (uint16_t)((i * 7 + 3) % 257);
    int32_t hdr[256] = {bad ? 12345 : SHARD_MAGIC_U16, SHARD_VERSION_U16, 2000};
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(hdr, 4, 256, f);
    fwrite(t16, 2, 2000, f);
    fclose(f);
}

static int count(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, needle)); p++) n++;
    return n;
}

#define ARGS                                                                                                  \
    "train --data shard.bin --layers 1 --heads 2 --channels 32 --vocab 257 --max-seq-len 64 --seq-len 32 "      \
    "--micro-batch 2 --peak-gflops 100 --threads 1 --quiet"

/* Runs the job with rank 0 in TMP/dir0 and rank 1 in TMP/dir1, both command lines ending with extra
 * and rank 1's with extra1 after it; returns the exit status (-1: not exited) and the stderr text in
 * *err (caller frees). */
static int run_job2(const char *dir0, const char *dir1, const char *extra, const char *extra1, char **err) {
    const char *args = ARGS;
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "timeout 120 %s --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -np 1 -wdir %s/%s %s %s %s : "
             "-np 1 -wdir %s/%s %s %s %s %s >%s/out.txt 2>%s/err.txt",
             g_mpi, TMP, dir0, BIN, args, extra, TMP, dir1, BIN, args, extra, extra1, TMP, TMP);
    int rc = system(cmd);
    *err = tu_slurp(TMP "/err.txt");
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* One process in TMP/dir writes checkpoints to dir/ck at steps 1..steps (the global batch of the
 * 2-rank jobs: 2 micro-batches of 2); 1 when it did. */
static int make_ckpt(const char *dir, int steps) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd %s/%s && rm -rf ck && OMP_NUM_THREADS=1 %s " ARGS " --steps %d --grad-accum 2 --ckpt-dir ck "
             "--ckpt-every 1 >/dev/null 2>&1", TMP, dir, BIN, steps);
    return system(cmd) == 0;
}

/* Runs the job with rank 0 in TMP/dir0 and rank 1 in TMP/dir1, rank 1's command line ending with
 * extra1. */
static int run_job(const char *dir0, const char *dir1, const char *extra1, char **err) {
    return run_job2(dir0, dir1, "--steps 1", extra1, err);
}

int main(int argc, char **argv) {
    g_mpi = argc > 1 ? argv[1] : NULL;
    if (!g_mpi || !g_mpi[0]) {
        tu_check(0, "rank-local input errors under mpirun", "no mpiexec given to the test (MPI missing)");
        return tu_exit();
    }
    Err e;
    const char *dirs[] = {"good_a", "good_b", "bad_a", "bad_b"};
    for (int i = 0; i < 4; i++) {
        char d[512], p[600];
        snprintf(d, sizeof d, TMP "/%s", dirs[i]);
        file_mkdirs(d, &e);
        snprintf(p, sizeof p, "%s/shard.bin", d);
        write_shard(p, i >= 2);
    }
    char *err = NULL;

    /* rank 1 alone reads a bad shard */
    int rc = run_job("good_a", "bad_a", "", &err);
    const char *t = err ? err : "";
    int own = count(t, "scaletrain train: rank 1: ") == 1 && strstr(t, "shard.bin") && strstr(t, "magic");
    int summary = count(t, "scaletrain train: data: refused on 1 other rank(s) of 2") == 1;
    tu_check(rc == 2 && own && summary && !strstr(t, "rank 0:"),
             "rank 1's own input error reaches stderr (rank 1 names itself, rank 0 says data was refused elsewhere)",
             "exit=%d own=%d summary=%d stderr=\"%s\"", rc, own, summary, t);
    free(err);

    /* the same bad shard on both ranks: one copy, from rank 0 */
    rc = run_job("bad_a", "bad_b", "", &err);
    t = err ? err : "";
    int copies = count(t, "magic");
    tu_check(rc == 2 && copies == 1 && !strstr(t, "rank 1: ") && !strstr(t, "refused on"),
             "a replicated input error: one copy, no rank-1 line", "exit=%d copies=%d stderr=\"%s\"", rc, copies, t);
    free(err);

    /* a flag only rank 1's command line has (MPMD): refused by rank 1 alone, before any data */
    rc = run_job("good_a", "good_b", "--lr abc", &err);
    t = err ? err : "";
    own = count(t, "scaletrain train: rank 1: --lr: expected a number, found 'abc'") == 1;
    summary = count(t, "scaletrain train: command line: refused on 1 other rank(s) of 2") == 1;
    tu_check(rc == 2 && own && summary, "a flag bad on rank 1 alone: rank 1 names itself, rank 0 says the command line was refused",
             "exit=%d own=%d summary=%d stderr=\"%s\"", rc, own, summary, t);
    free(err);

    /* --help on rank 1's command line alone: every rank ends (before, rank 0 waited in the
     * command line's agreement until the timeout) */
    rc = run_job("good_a", "good_b", "--help", &err);
    char *out = tu_slurp(TMP "/out.txt");
    int usage = count(out, "usage: scaletrain train") == 1;
    tu_check(rc == 0 && usage, "--help on rank 1 alone: its usage once, every rank ends, exit 0", "exit=%d usage lines %d",
             rc, count(out, "usage: scaletrain train"));
    free(out), free(err);

    /* --resume ck (relative): only rank 0's directory has it */
    int made = make_ckpt("good_a", 2);
    char rm[1024];
    snprintf(rm, sizeof rm, "rm -rf %s/good_b/ck", TMP);
    made = made && system(rm) == 0;
    rc = run_job2("good_a", "good_b", "--steps 3 --resume ck/step_00000002", "", &err);
    t = err ? err : "";
    own = count(t, "scaletrain train: rank 1: --resume ck/step_00000002: expected a checkpoint, found none") == 1;
    summary = count(t, "scaletrain train: resume: refused on 1 other rank(s) of 2") == 1;
    tu_check(made && rc == 2 && own && summary, "a checkpoint only rank 0 sees: rank 1 names itself, rank 0 says resume was refused",
             "checkpoint made %d, exit=%d own=%d summary=%d stderr=\"%s\"", made, rc, own, summary, t);
    free(err);

    /* --resume auto over directories holding different steps */
    made = make_ckpt("good_b", 1);
    rc = run_job2("good_a", "good_b", "--steps 3 --resume auto --ckpt-dir ck", "", &err);
    t = err ? err : "";
    int one = count(t, "expected every rank to find the same checkpoint, found steps 1 to 2") == 1;
    tu_check(made && rc == 2 && one, "checkpoints of different steps on the two ranks: refused once, naming both steps",
             "checkpoint made %d, exit=%d stderr=\"%s\"", made, rc, t);
    free(err);

    /* control: copies of the same checkpoint on both ranks resume */
    snprintf(rm, sizeof rm, "rm -rf %s/good_b/ck && cp -r %s/good_a/ck %s/good_b/ck", TMP, TMP, TMP);
    made = system(rm) == 0;
    rc = run_job2("good_a", "good_b", "--steps 3 --resume ck/step_00000002", "", &err);
    tu_check(made && rc == 0, "control: the same checkpoint copied to both ranks' directories resumes",
             "exit=%d stderr=\"%s\"", rc, err ? err : "");
    free(err);

    /* control: good shards on both ranks train */
    rc = run_job("good_a", "good_b", "", &err);
    tu_check(rc == 0, "control: good shards on both ranks train", "exit=%d stderr=\"%s\"", rc, err ? err : "");
    free(err);
    return tu_exit();
}
