/* stopsig.c — see stopsig.h. */
#include "core/stopsig.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>

static atomic_int g_active, g_graceful, g_pending;

static void stop_set(sigset_t *s) {
    sigemptyset(s);
    sigaddset(s, SIGTERM);
    sigaddset(s, SIGINT);
    sigaddset(s, SIGUSR1);
}

/* The default action of sig, from this thread: unblocked here and raised, so the process ends the
 * way it would have without stopsig (killed by the signal; SIGUSR1's default is also to end). */
static void default_action(int sig) {
    struct sigaction sa = {0};
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    raise(sig);
    _exit(128 + sig); /* not reached: the default action of these three ends the process */
}

static void *waiter(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "st-stopsig"); /* shown by ps/top -H; the tests find it so */
    sigset_t s;
    stop_set(&s);
    for (;;) {
        int sig = 0;
        if (sigwait(&s, &sig) != 0) continue;
        if (!atomic_load(&g_graceful)) default_action(sig);
        int expected = 0;
        if (!atomic_compare_exchange_strong(&g_pending, &expected, sig)) _exit(128 + sig); /* the second */
    }
    return NULL;
}

int stopsig_init(void) {
    if (atomic_load(&g_active)) return 0;
    sigset_t s, old;
    stop_set(&s);
    if (pthread_sigmask(SIG_BLOCK, &s, &old) != 0) return -1;
    pthread_attr_t a;
    pthread_t t;
    int ok = pthread_attr_init(&a) == 0;
    ok = ok && pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED) == 0;
    ok = ok && pthread_create(&t, &a, waiter, NULL) == 0;
    pthread_attr_destroy(&a);
    if (!ok) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return -1;
    }
    atomic_store(&g_active, 1);
    return 0;
}

int stopsig_active(void) { return atomic_load(&g_active); }

void stopsig_graceful(int on) {
    if (on) atomic_store(&g_pending, 0);
    atomic_store(&g_graceful, on);
}

int stopsig_pending(void) { return atomic_load(&g_pending); }

int stopsig_thread_create(pthread_t *t, void *(*fn)(void *), void *arg) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}
