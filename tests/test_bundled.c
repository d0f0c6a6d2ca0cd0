/* test_bundled.c — `scaletrain train` without --data under mpirun on a fresh machine: the bundled Tiny
 * Shakespeare is prepared once into the cache and both ranks train on it.
 *
 * Before 2026-11-26 both ranks of `mpirun -np 2 scaletrain train` prepared the same cache directory
 * at once and one of them failed in 2 of 3 tries ("cannot rename ... .tmp.PID"); each printed the
 * data line. Now a flock on the cache's .lock lets one prepare while the other waits.
 *
 * Oracle: three jobs, each with a fresh XDG_CACHE_HOME, exit 0 with exactly one "data: no --data
 * given" line, and the cached shards are byte-equal to `scaletrain prepare --tokenizer bytes
 * --separator "" --val-fraction 0.1` of the bundled input run alone. Control: the shards of a
 * preparation with --val-fraction 0.2 differ from the cache's (the comparison can fail).
 * Usage: test_bundled MPIEXEC (none: the test fails). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "testutil.h"

#define BIN ST_BINARY_DIR "/scaletrain"
#define TMP ST_BINARY_DIR "/test_bundled"
#define INPUT ST_SOURCE_DIR "/data/tinyshakespeare/input.txt"

static int count(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, needle)); p++) n++;
    return n;
}

static int run(const char *cmd) {
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

int main(int argc, char **argv) {
    const char *mpi = argc > 1 ? argv[1] : NULL;
    if (!mpi || !mpi[0]) {
        tu_check(0, "bundled corpus under mpirun", "no mpiexec given to the test (MPI missing)");
        return tu_exit();
    }
    char cmd[4096];
    if (!tu_shell("rm -rf " TMP " && mkdir -p " TMP)) return tu_exit();
    const char *ref[2] = {"ref", "ref02"}, *frac[2] = {"0.1", "0.2"};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "%s prepare --tokenizer bytes --separator \"\" --val-fraction %s --out %s/%s %s "
                 ">/dev/null 2>&1", BIN, frac[i], TMP, ref[i], INPUT);
        tu_check(run(cmd) == 0, ref[i], "scaletrain prepare --val-fraction %s of %s", frac[i], INPUT);
    }
    for (int k = 0; k < 3; k++) {
        snprintf(cmd, sizeof cmd,
                 "XDG_CACHE_HOME=%s/cache%d timeout 120 %s --allow-run-as-root --oversubscribe -np 2 -x XDG_CACHE_HOME "
                 "-x OMP_NUM_THREADS=1 %s train --steps 1 --layers 1 --heads 2 --channels 32 --max-seq-len 64 "
                 "--seq-len 32 --micro-batch 2 --peak-gflops 100 --threads 1 >%s/out%d.txt 2>&1",
                 TMP, k, mpi, BIN, TMP, k);
        int rc = run(cmd);
        char p[1024], a[1200], b[1200];
        snprintf(p, sizeof p, "%s/out%d.txt", TMP, k);
        char *out = tu_slurp(p);
        int lines = count(out, "data: no --data given"); /* stdout and stderr together */
        int same = 1;
        const char *files[2] = {"train_000000.bin", "val_000000.bin"};
        for (int f = 0; f < 2; f++) {
            snprintf(a, sizeof a, "%s/cache%d/scaletrain/tinyshakespeare-bytes/%s", TMP, k, files[f]);
            snprintf(b, sizeof b, "%s/ref/%s", TMP, files[f]);
            same = same && tu_same_file(a, b);
        }
        char what[256];
        snprintf(what, sizeof what, "job %d: mpirun -np 2 train without --data on a fresh cache", k + 1);
        tu_check(rc == 0 && lines == 1 && same, what, "exit %d, %d data line(s) (want 1), shards %s prepare's%s%s", rc,
                 lines, same ? "equal to" : "DIFFERENT FROM", rc ? "; output: " : "", rc && out ? out : "");
        free(out);
    }
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/cache0/scaletrain/tinyshakespeare-bytes/val_000000.bin", TMP);
    snprintf(b, sizeof b, "%s/ref02/val_000000.bin", TMP);
    tu_check(!tu_same_file(a, b), "negative control: the shards of --val-fraction 0.2 differ from the cache's",
             "%s against %s", a, b);
    /* sweep --list of a spec on the bundled data: stdout holds only the runs' commands (the bundled
     * corpus's notice went to stdout first, and a Slurm array reading line N ran it as a task).
     * Control: the notice is on stderr. */
    FILE *f = fopen(TMP "/bundled_spec.json", "wb");
    fputs("{\"name\": \"b\", \"data\": \"bundled\", \"base\": {\"seq_len\": 32, \"max_seq_len\": 32, "
          "\"micro_batch\": 2, \"threads\": 1}, \"grid\": {\"kind\": \"sizes_tokens\", \"models\": [\"d1\"], "
          "\"tokens\": [640, 1280]}}\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "XDG_CACHE_HOME=%s/cache0 %s sweep %s/bundled_spec.json --out %s/sw --list >%s/list.txt "
             "2>%s/list.err", TMP, BIN, TMP, TMP, TMP, TMP);
    int rc = run(cmd);
    char *lt = tu_slurp(TMP "/list.txt"), *le = tu_slurp(TMP "/list.err");
    int n = 0, commands = 0;
    for (char *p = lt; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p))
        n++, commands += !strncmp(p, "scaletrain train ", 17);
    tu_check(rc == 0 && n == 2 && commands == 2, "sweep --list on the bundled data: only commands on stdout",
             "exit %d, %d lines, %d commands: %.200s", rc, n, commands, lt ? lt : "");
    tu_check(le && strstr(le, "data: no --data given"), "control: the bundled data's notice is on stderr", "%.200s",
             le ? le : "");
    free(lt), free(le);
    return tu_exit();
}
