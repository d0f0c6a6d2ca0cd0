/* test_rc_retry.c — rc_run (tests/runcmp.c) runs a job once more only when Open MPI could not start it.
 *
 * Oracle: Open MPI's own output. A job started with a BTL that does not exist fails in MPI_Init the
 * way a machine's fault would (its launcher and run-time print their banner, no scaletrain code
 * runs): rc_mpi_start_failure must recognise that output, and a command that fails so once and then
 * succeeds must come back from rc_run with exit 0 after exactly two attempts, the first output kept.
 * Negative controls: a job that scaletrain itself refuses (an unknown flag, under the same mpirun)
 * runs exactly once and keeps its exit code; a command that fails to start every time is tried
 * twice, never more, and its failure is returned.
 *
 * Usage: test_rc_retry MPIEXEC SCALETRAIN */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runcmp.h"
#include "testutil.h"

#define DIR ST_BINARY_DIR "/test_rc_retry"

static const char *g_mpi, *g_bin;

/* The number of lines in DIR/name.count: how many times the command ran. */
static int attempts(const char *name) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s.count", DIR, name);
    char *t = tu_slurp(path);
    int n = 0;
    for (const char *p = t; p && *p; p++) n += *p == '\n';
    free(t);
    return n;
}

/* A shell command that counts its runs in DIR/name.count and, while the count is at most
 * start_fails, runs scaletrain under mpirun with a BTL that does not exist (MPI_Init fails), after
 * that `then` (a shell command). */
static void flaky(char *cmd, size_t cap, const char *name, int start_fails, const char *then) {
    snprintf(cmd, cap, "echo x >> %s/%s.count; if [ $(wc -l < %s/%s.count) -le %d ]; then OMPI_MCA_btl=no_such_btl "
             "%s --allow-run-as-root --oversubscribe -np 2 -x OMPI_MCA_btl %s train --steps 1; else %s; fi",
             DIR, name, DIR, name, start_fails, g_mpi, g_bin, then);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_rc_retry MPIEXEC SCALETRAIN\n");
        return 2;
    }
    g_mpi = argv[1], g_bin = argv[2];
    if (!tu_shell("rm -rf " DIR " && mkdir -p " DIR)) return tu_exit();
    char cmd[4096], path[700];

    /* The phrases match what this Open MPI prints when MPI_Init fails. */
    flaky(cmd, sizeof cmd, "probe", 1, "true");
    int rc = rc_run(DIR, "probe", cmd, NULL);
    snprintf(path, sizeof path, "%s/probe.out.mpi-start-failed", DIR);
    char *first = tu_slurp(path);
    const char *why = rc_mpi_start_failure(first);
    tu_check(first && why, "Open MPI's MPI_Init failure is recognised", "exit %d; phrase %s in the first attempt's "
             "output (%zu bytes)", rc, why ? why : "NONE", first ? strlen(first) : 0);
    free(first);

    /* It fails to start once, then succeeds: exit 0 after two attempts. */
    flaky(cmd, sizeof cmd, "once", 1, "echo done");
    rc = rc_run(DIR, "once", cmd, NULL);
    snprintf(path, sizeof path, "%s/once.out", DIR);
    char *out = tu_slurp(path);
    tu_check(rc == 0 && attempts("once") == 2 && out && strstr(out, "done"), "a job Open MPI could not start runs "
             "once more and its second result counts", "exit %d after %d attempt(s), output '%.40s'", rc,
             attempts("once"), out ? out : "(none)");
    free(out);

    /* Control: scaletrain's own refusal under mpirun is never retried. */
    snprintf(cmd, sizeof cmd, "echo x >> %s/own.count; %s --allow-run-as-root --oversubscribe -np 2 %s train "
             "--no-such-flag 1", DIR, g_mpi, g_bin);
    rc = rc_run(DIR, "own", cmd, NULL);
    snprintf(path, sizeof path, "%s/own.out", DIR);
    out = tu_slurp(path);
    tu_check(rc != 0 && attempts("own") == 1 && out && strstr(out, "no-such-flag") && !rc_mpi_start_failure(out),
             "negative control: a job scaletrain refuses runs once and keeps its exit code", "exit %d after %d "
             "attempt(s); its output names the flag: %s", rc, attempts("own"),
             out && strstr(out, "no-such-flag") ? "yes" : "NO");
    free(out);

    /* Control: a job that never starts is tried twice, not more, and fails. */
    flaky(cmd, sizeof cmd, "never", 99, "true");
    rc = rc_run(DIR, "never", cmd, NULL);
    tu_check(rc != 0 && attempts("never") == 2, "negative control: a job that never starts fails after two attempts",
             "exit %d after %d attempt(s)", rc, attempts("never"));
    return tu_exit();
}
