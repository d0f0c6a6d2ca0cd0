/* stop.c — see stop.h. */
#include "train/stop.h"

#include <string.h>
#include <unistd.h>

#include "core/stopsig.h"

static volatile sig_atomic_t stop_signal = 0; /* the recording handler's (mode 2) */

/* Mode 2's handler runs on this alternate stack, never on the interrupted code's: oneDNN 2.6's AVX2
 * sgemm kernels point rsp into a heap block while they run, and a signal frame pushed there lands
 * on the heap below it ("corrupted size vs. prev_size": the 2-rank aborts of 2026-11-25/26,
 * docs/debugging.md; test_gemm_signal). Only the installing thread gets it: threads that compute
 * must block the signals, which is what core/stopsig does for the CLI. */
static char alt_stack[1 << 16];

static void on_stop_signal(int sig) {
    if (stop_signal) { /* the CLI's line (core/stopsig.h) without its parts: they are read under a lock */
        static const char line[] = "scaletrain: a second stop signal before the graceful stop the first one asked for "
                                   "finished: exiting now\n";
        ssize_t w = write(STDERR_FILENO, line, sizeof line - 1);
        (void)w;
        _exit(128 + sig);
    }
    stop_signal = sig;
}

void tr_signals_on(TrSignals *s) {
    memset(s, 0, sizeof *s);
    stop_signal = 0;
    if (stopsig_active()) {
        stopsig_graceful(1);
        s->mode = 1;
        return;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    stack_t ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_sp = alt_stack, ss.ss_size = sizeof alt_stack;
    if (sigaltstack(&ss, &s->old_stack) == 0) s->set_stack = 1;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGTERM, &sa, &s->old_term);
    sigaction(SIGINT, &sa, &s->old_int);
    /* mpirun turns its own SIGTERM/SIGINT into SIGKILL for the ranks a second later, but forwards
     * SIGUSR1 untouched: `kill -USR1 <mpirun>` (scripts/launch does it on TERM/INT) stops every
     * rank the same way, and the job exits 0. */
    sigaction(SIGUSR1, &sa, &s->old_usr1);
    s->mode = 2;
}

void tr_signals_off(TrSignals *s) {
    if (s->mode == 1) stopsig_graceful(0);
    if (s->mode == 2) {
        sigaction(SIGTERM, &s->old_term, NULL);
        sigaction(SIGINT, &s->old_int, NULL);
        sigaction(SIGUSR1, &s->old_usr1, NULL);
        if (s->set_stack) sigaltstack(&s->old_stack, NULL);
    }
    s->mode = 0, s->set_stack = 0;
}

int tr_stop_pending(void) {
    int sig = stopsig_active() ? stopsig_pending() : 0;
    return sig ? sig : (int)stop_signal;
}

void tr_signals_clear(void) { stop_signal = 0; }
