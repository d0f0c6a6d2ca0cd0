/* test_comm_fault.c — a stuck or killed rank ends the whole job, in bounded time, with a clear message.
 *
 * Usage: test_comm_fault MPIEXEC NP TEST_COMM MODE
 * Runs `MPIEXEC --allow-run-as-root --oversubscribe -np NP TEST_COMM ARG` in its own process group
 * with stdout+stderr captured, under an overall bound of 40 s (past it the job is declared hung and
 * killed). ARG is MODE for timeout and kill (see test_comm.c), NP + 1 for wrongnp, none for nonp.
 * Oracle:
 *   timeout  non-zero exit within 2 s (comm timeout) + 13 s slack, and the output names the
 *            collective ("grad bucket 3 (all-reduce)"), the step ("step 7") and the timeout;
 *   kill     non-zero exit within 15 s, and the output says a rank was killed (signal 9);
 *   wrongnp  (negative control of test_comm's world check) non-zero exit, and the output reports
 *            the world check failed against the wrong expectation;
 *   nonp     non-zero exit, and the output says the expected world size is missing;
 *   badwait  ST_COMM_WAIT=sometimes: non-zero exit, and the output names the variable, the values
 *            it takes and the one found (comm_init refuses it on every rank);
 *   abort    (TEST_COMM is heap_comm_stress, argv[5] glibc's checking malloc libc_malloc_debug.so.0)
 *            a 1-byte heap overflow under the checking malloc (--fault-overflow) aborts a rank:
 *            non-zero exit within 15 s, and the output shows glibc's report. Open MPI's backtrace
 *            printer on SIGABRT calls malloc inside that abort and hangs the rank; comm_init leaves
 *            SIGABRT out of its list (OMPI_MCA_opal_signal);
 *   abort_control  (negative control) the same with SIGABRT put back in the list by the user's
 *            OMPI_MCA_opal_signal (which comm_init respects): the job must still be running after
 *            8 s (then it is killed). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/timer.h"
#include "testutil.h"

int main(int argc, char **argv) {
    const char *mode = argc > 4 ? argv[4] : "";
    int abort_mode = !strcmp(mode, "abort") || !strcmp(mode, "abort_control");
    if (argc != 5 + abort_mode) {
        fprintf(stderr, "usage: test_comm_fault MPIEXEC NP TEST_COMM timeout|kill|wrongnp|nonp|badwait\n"
                        "       test_comm_fault MPIEXEC NP HEAP_COMM_STRESS abort|abort_control LIBC_MALLOC_DEBUG\n");
        return 2;
    }
    if (abort_mode && access(argv[5], R_OK) != 0) { /* a missing dependency fails, never passes */
        tu_check(0, "abort: glibc's checking malloc", "expected %s (libc6), not found", argv[5]);
        return tu_exit();
    }
    char preload[600];
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s", abort_mode ? argv[5] : "");
    if (!strcmp(mode, "abort_control")) setenv("OMPI_MCA_opal_signal", "6,7,8,11", 1); /* SIGABRT included */
    char out_path[] = "/tmp/test_comm_fault_XXXXXX";
    int fd = mkstemp(out_path);
    if (fd < 0) {
        perror("mkstemp");
        return 1;
    }
    double t0 = timer_ms();
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        char arg[32];
        snprintf(arg, sizeof arg, "%s", mode);
        if (strcmp(mode, "wrongnp") == 0) snprintf(arg, sizeof arg, "%d", atoi(argv[2]) + 1);
        if (strcmp(mode, "badwait") == 0) {
            snprintf(arg, sizeof arg, "%s", argv[2]);
            execl(argv[1], argv[1], "--allow-run-as-root", "--oversubscribe", "-np", argv[2], "-x",
                  "ST_COMM_WAIT=sometimes", argv[3], arg, (char *)NULL);
        }
        if (abort_mode) {
            char *av[24];
            int n = 0;
            const char *fixed[] = {argv[1], "--allow-run-as-root", "--oversubscribe", "-np", argv[2], "-x",
                                   "OMP_NUM_THREADS=1", "-x", preload, "-x", "MALLOC_CHECK_=3", "-x", "MALLOC_PERTURB_=165"};
            for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) av[n++] = (char *)fixed[i];
            if (!strcmp(mode, "abort_control")) av[n++] = "-x", av[n++] = "OMPI_MCA_opal_signal";
            av[n++] = argv[3], av[n++] = "--fault-overflow", av[n] = NULL;
            execv(argv[1], av);
        } else if (strcmp(mode, "nonp") == 0)
            execl(argv[1], argv[1], "--allow-run-as-root", "--oversubscribe", "-np", argv[2], argv[3], (char *)NULL);
        else
            execl(argv[1], argv[1], "--allow-run-as-root", "--oversubscribe", "-np", argv[2], argv[3], arg, (char *)NULL);
        perror("execl");
        _exit(127);
    }
    setpgid(pid, pid);
    const double bound_ms = !strcmp(mode, "abort_control") ? 8e3 : 40e3;
    int status = 0, hung = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) break;
        if (timer_ms() - t0 > bound_ms) {
            hung = 1;
            kill(-pid, SIGTERM); /* mpirun forwards it to its ranks */
            usleep(2000000);
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        usleep(20000);
    }
    double secs = (timer_ms() - t0) / 1e3;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);

    static char out[1 << 16];
    FILE *f = fopen(out_path, "r");
    size_t len = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[len] = 0;
    if (f) fclose(f);
    close(fd);
    unlink(out_path);

    int ok;
    char name[64];
    snprintf(name, sizeof name, "fault_%s_np%s", mode, argv[2]);
    if (strcmp(mode, "timeout") == 0) {
        ok = !hung && code != 0 && secs < 15 && strstr(out, "grad bucket 3 (all-reduce)") && strstr(out, "step 7") &&
             strstr(out, "did not complete within 2 s");
    } else if (strcmp(mode, "kill") == 0) {
        ok = !hung && code != 0 && secs < 15 && (strstr(out, "signal 9") || strstr(out, "Killed"));
    } else if (!strcmp(mode, "abort")) {
        ok = !hung && code != 0 && secs < 15 && (strstr(out, "free()") || strstr(out, "corrupt"));
    } else if (!strcmp(mode, "abort_control")) {
        ok = hung && (strstr(out, "free()") || strstr(out, "corrupt"));
    } else if (strcmp(mode, "wrongnp") == 0) {
        char want[96];
        snprintf(want, sizeof want, "world_equals_launched_np: FAIL world=%s expected np=%d", argv[2], atoi(argv[2]) + 1);
        ok = !hung && code != 0 && strstr(out, want) != NULL;
    } else if (strcmp(mode, "badwait") == 0) {
        ok = !hung && code != 0 && strstr(out, "ST_COMM_WAIT: expected auto, spin or yield, found 'sometimes'") != NULL;
    } else {
        ok = !hung && code != 0 && strstr(out, "expected the world size the launcher was asked for") != NULL;
    }
    /* One line of evidence: the scaletrain message (or mpirun's) that the user would see. */
    const char *line = strstr(out, "scaletrain: rank");
    if (!line) line = strstr(out, "world_equals_launched_np");
    if (!line) line = strstr(out, "test_comm: expected");
    if (!line) line = strstr(out, "ST_COMM_WAIT");
    if (!line) line = strstr(out, "mpirun noticed");
    if (!line) line = out;
    char first[400];
    snprintf(first, sizeof first, "%.*s", (int)strcspn(line, "\n"), line);
    tu_check(ok, name, "exit=%d after %.1f s%s; message: %s", code, secs, hung ? " (HUNG, killed)" : "", first);
    if (!ok) fprintf(stderr, "---- captured output ----\n%s\n----\n", out);
    return tu_exit();
}
