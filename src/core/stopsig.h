/* stopsig.h — the stop signals (SIGTERM, SIGINT, SIGUSR1) received by one thread that waits for
 * them, never by an interrupted one.
 *
 * Why: an asynchronous handler runs on whichever thread the kernel picks, in the middle of a GEMM,
 * an MPI progress loop or a system call of a library thread, and every library in the process has
 * to cope with the interruption. A 2-rank job signalled under mpirun aborted about once in 30 runs
 * with glibc heap corruption at the step the signal arrived (Open MPI 4.1.4, oneDNN). Blocked in
 * every thread and taken by sigwait() in a thread of its own, a signal interrupts nothing.
 *
 * Use: stopsig_init() first thing in main, before MPI or OpenMP create threads (they inherit the
 * mask). Until stopsig_graceful(1) a stop signal ends the process as it would without any of this
 * (its default action); while graceful, the first one is recorded for stopsig_pending() and a
 * second ends the process at once with status 128 + signal, printing one line on stderr first:
 *   "<program>: a second SIGTERM during <activity>: exiting now (status 143); the last complete
 *    checkpoint is <path>"
 * ("before the graceful stop the first one asked for finished" when no activity is set; the part
 * after ';' only when a checkpoint was set). */
#ifndef ST_CORE_STOPSIG_H
#define ST_CORE_STOPSIG_H

#include <pthread.h>

/* Blocks the stop signals in the calling thread and starts the waiting thread. Once per process;
 * returns 0, or -1 when the thread could not start (the signals are then left unblocked). */
int stopsig_init(void);
/* 1 once stopsig_init succeeded: the signals reach the waiting thread only. */
int stopsig_active(void);
/* on = 1: record the first stop signal (and clear an earlier record); on = 0: default actions again. */
void stopsig_graceful(int on);
/* The signal recorded since stopsig_graceful(1), or 0. */
int stopsig_pending(void);
/* pthread_create with every signal blocked in the new thread (the caller's mask is kept): for the
 * project's own worker threads, which no handler may interrupt (the stop signals go to the waiting
 * thread; docs/debugging.md: a handler frame on a oneDNN kernel's heap stack). Returns
 * pthread_create's result. */
int stopsig_thread_create(pthread_t *t, void *(*fn)(void *), void *arg);

/* The parts of the second signal's line (copied; NULL or "" clears): the prefix (default
 * "scaletrain"; the CLI sets "scaletrain COMMAND"), what the process is doing (e.g. "a checkpoint
 * write", set around the save and cleared after) and the path of the newest complete checkpoint
 * (set after a save completes or a resume loads one). Cheap; any thread. */
void stopsig_set_program(const char *prog);
void stopsig_set_activity(const char *activity);
void stopsig_set_last_checkpoint(const char *path);

#endif
