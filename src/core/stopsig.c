/* stopsig.c — see stopsig.h. */
#include "core/stopsig.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

static atomic_int g_active, g_graceful, g_pending;

/* The parts of the line a second signal prints (stopsig_set_program, _activity, _last_checkpoint),
 * set by the main thread, read by the waiting thread under g_mu (never held across anything slow). */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_prog[128] = "scaletrain";
static char g_activity[256];
static char g_last_ckpt[1024];

static void copy_str(char *dst, size_t cap, const char *src) {
    size_t n = 0;
    if (src)
        while (src[n] && n + 1 < cap) n++;
    memcpy(dst, src ? src : "", n);
    dst[n] = '\0';
}

void stopsig_set_program(const char *prog) {
    pthread_mutex_lock(&g_mu);
    copy_str(g_prog, sizeof g_prog, prog && *prog ? prog : "scaletrain");
    pthread_mutex_unlock(&g_mu);
}

void stopsig_set_activity(const char *activity) {
    pthread_mutex_lock(&g_mu);
    copy_str(g_activity, sizeof g_activity, activity);
    pthread_mutex_unlock(&g_mu);
}

void stopsig_set_last_checkpoint(const char *path) {
    pthread_mutex_lock(&g_mu);
    copy_str(g_last_ckpt, sizeof g_last_ckpt, path);
    pthread_mutex_unlock(&g_mu);
}

/* Appends src to buf (length *n, capacity cap, one byte kept for the newline). */
static void put(char *buf, size_t *n, size_t cap, const char *src) {
    while (*src && *n + 2 < cap) buf[(*n)++] = *src++;
}

static const char *sig_name(int sig) {
    return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : "stop signal";
}

/* The second stop signal while graceful: one line on stderr, then the process ends at once. This
 * runs on the waiting thread, not in a handler, but other threads may hold any lock (malloc's,
 * stdio's): only memcpy-like copies, write(2) and _exit. */
static void second_signal(int sig) {
    char line[1700], code[4] = {(char)('0' + (128 + sig) / 100), (char)('0' + (128 + sig) / 10 % 10),
                                (char)('0' + (128 + sig) % 10), 0};
    size_t n = 0;
    pthread_mutex_lock(&g_mu);
    put(line, &n, sizeof line, g_prog);
    put(line, &n, sizeof line, ": a second ");
    put(line, &n, sizeof line, sig_name(sig));
    if (g_activity[0]) {
        put(line, &n, sizeof line, " during ");
        put(line, &n, sizeof line, g_activity);
    } else
        put(line, &n, sizeof line, " before the graceful stop the first one asked for finished");
    put(line, &n, sizeof line, ": exiting now (status ");
    put(line, &n, sizeof line, code);
    put(line, &n, sizeof line, ")");
    if (g_last_ckpt[0]) {
        put(line, &n, sizeof line, "; the last complete checkpoint is ");
        put(line, &n, sizeof line, g_last_ckpt);
    }
    pthread_mutex_unlock(&g_mu);
    line[n++] = '\n';
    for (const char *p = line; n > 0;) {
        ssize_t w = write(STDERR_FILENO, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        p += w, n -= (size_t)w;
    }
    _exit(128 + sig);
}

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
        if (!atomic_compare_exchange_strong(&g_pending, &expected, sig)) second_signal(sig);
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
