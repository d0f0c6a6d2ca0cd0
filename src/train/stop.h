/* stop.h — a training run's graceful stop on SIGTERM, SIGINT and SIGUSR1 (docs/checkpoint.md,
 * "Preemption"): the first signal is recorded and read between steps (the run saves and ends), a
 * second ends the process at once. With core/stopsig.h initialised by main (the CLI) the signals
 * are taken by its waiting thread; otherwise (a library caller) a handler that only records. */
#ifndef ST_TRAIN_STOP_H
#define ST_TRAIN_STOP_H

#include <signal.h>

typedef struct {
    int mode; /* 0 off, 1 stopsig's waiting thread, 2 the recording handler */
    struct sigaction old_term, old_int, old_usr1;
    stack_t old_stack; /* mode 2: the calling thread's alternate signal stack before ours */
    int set_stack;     /* mode 2: ours was installed (restored by tr_signals_off) */
} TrSignals;

void tr_signals_on(TrSignals *s);
void tr_signals_off(TrSignals *s);
/* The stop signal received since tr_signals_on (0: none). */
int tr_stop_pending(void);
/* Forgets a recorded stop signal of mode 2 (tests: one signal after another without ending). */
void tr_signals_clear(void);

#endif
