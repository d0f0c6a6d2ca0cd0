/* comm.c — process grid and collectives over Open MPI, with a single-process fallback.
 *
 * The only file of the project that includes <mpi.h>. Every collective, blocking or not, is started
 * as an MPI nonblocking collective and completed by polling MPI_Test (comm_wait), which is what
 * gives a timeout instead of an endless hang and lets the trainer overlap buckets with compute.
 * Conventions are in comm.h; measurements and the choice of forms are in docs/comm.md.
 *
 * Contents: helpers · lifecycle · grid and checks · requests · float collectives · small
 * collectives · accounting. */
#include "comm/comm.h"

#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "core/stopsig.h"
#include "core/timer.h"

_Static_assert(sizeof(MPI_Request) <= sizeof(((CommReq *)0)->handle), "CommReq.handle too small for MPI_Request");

struct CommMpi {
    MPI_Comm world;     /* duplicate of MPI_COMM_WORLD, MPI_ERRORS_RETURN */
    MPI_Comm dp;        /* data-parallel group of this rank (a split of world) */
    MPI_Comm tp;        /* tensor-parallel group (MPI_COMM_NULL until comm_set_grid) */
    MPI_Comm pp;        /* pipeline group: same dp and tp coordinates, ordered by pp_rank */
    int we_initialized; /* comm_init called MPI_Init_thread, so comm_finalize finalizes */
    uint64_t *u64;      /* world entries: scratch for comm_check_same_u64 (allocated at init) */
    /* The progress thread (see "progress thread" below); all zero while it does not run. */
    MPI_Comm prog;          /* private duplicate of world the thread probes (never carries a message) */
    pthread_mutex_t lock;   /* held around every MPI call once the thread runs (MPI_THREAD_SERIALIZED) */
    pthread_t thread;
    int thread_on;          /* 1 between the thread's start and its join (written by the main thread) */
    atomic_int stop;        /* 1: the thread ends at its next poll */
    atomic_int pending;     /* nonblocking requests started and not yet seen complete (polls only then) */
    atomic_ullong polls;    /* progress calls the thread made (comm_progress_polls) */
};

/* ================================================================ helpers */

/* Sets err from an MPI return code: "<call> (<kind>) at step S on rank R: <MPI message>". */
static Status mpi_fail(const Comm *c, Err *err, int rc, const char *call, const char *what) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error code %d", rc);
    return err_set(err, ST_ERR_RUNTIME, "%s (%s) at step %ld failed on rank %d of %d: %s", call, what ? what : "",
                   c->step, c->rank, c->world, s);
}

static void req_put(CommReq *req, MPI_Request r) { memcpy(req->handle, &r, sizeof r); }
static MPI_Request req_get(const CommReq *req) {
    MPI_Request r;
    memcpy(&r, req->handle, sizeof r);
    return r;
}

/* Every MPI call made after comm_init holds m->lock while the progress thread runs, so the two
 * threads never call MPI at once (what MPI_THREAD_SERIALIZED asks). Without the thread: no lock. */
static void mpi_lock(const Comm *c) {
    if (c->mpi && c->mpi->thread_on) pthread_mutex_lock(&c->mpi->lock);
}
static void mpi_unlock(const Comm *c) {
    if (c->mpi && c->mpi->thread_on) pthread_mutex_unlock(&c->mpi->lock);
}
static int mpi_locked_end(const Comm *c, int rc) {
    mpi_unlock(c);
    return rc;
}
/* rc = CALL made under the lock: rc = MPI_CALL(c, MPI_Isend(...)). */
#define MPI_CALL(c, call) mpi_locked_end((c), (mpi_lock(c), (call)))

/* The request is now in MPI's hands (active until comm_test/comm_wait see it complete); the
 * progress thread polls while any is. */
static void req_go(CommReq *req) {
    req->active = 1;
    if (req->comm && req->comm->mpi) atomic_fetch_add(&req->comm->mpi->pending, 1);
}
/* The request left MPI's hands (completed or failed). */
static void req_gone(CommReq *req) {
    req->active = 0;
    if (req->comm && req->comm->mpi) atomic_fetch_sub(&req->comm->mpi->pending, 1);
}

/* Prepares req for a new operation and books calls and bytes. */
static void req_init(Comm *c, CommReq *req, CommKind k, uint64_t bytes) {
    ST_CHECK_MSG(!req->active, "CommReq reused while its collective is still pending");
    memset(req, 0, sizeof *req);
    req->comm = c;
    req->kind = k;
    req->bytes = bytes;
    req->t_start_ms = timer_ms();
}

static void req_begin(Comm *c, CommReq *req, CommKind k, uint64_t bytes) {
    req_init(c, req, k, bytes);
    c->stats.calls[k]++;
    c->stats.bytes[k] += bytes;
}

static Status check_count(const Comm *c, size_t n, const char *what, Err *err) {
    if (n > (size_t)INT_MAX)
        return err_set(err, ST_ERR_INPUT, "%s of %zu elements exceeds MPI's int count limit %d: split it into buckets",
                       what, n, INT_MAX);
    return ST_OK;
}

/* After MPI reported completion: the in-place reduce-scatter result moves to the caller's block. */
static void req_finish(CommReq *req) {
    if (req->move_n && req->move_dst != req->move_src)
        memmove(req->move_dst, req->move_src, req->move_n * sizeof(float));
    req_gone(req);
}

/* ---------------------------------------------------------------- ring reduce-scatter
 *
 * Open MPI 4.1's nonblocking reduce-scatter (libnbc) reduces the whole buffer to one root and
 * scatters it back: over a network the root's link carries 1.5·S for 2 ranks where the ring
 * carries S/2 (measured 3.3x the α-β time on a shaped TCP link, bench/results/netsim.md). Ours is the
 * bandwidth-optimal ring: p−1 steps; at step s rank r sends block (r−1−s) mod p to r+1 and adds the
 * block (r−2−s) mod p received from r−1 into its own copy, so after the last step block r holds the
 * sum of every rank's block r. In place only (the blocks in between are overwritten by partial
 * sums). Progressed by comm_test/comm_wait: each call tests the step's two messages and, once both
 * are done, adds and starts the next step. The sum of block r is the same on every run (a fixed
 * order: the ranks r+1, r+2, …, r−1 added in turn, then r). */
/* Message tags: ring k's step s is tag (k mod RING_TAG_SPANS)·RING_MAX_RANKS + s, below the 32767
 * every MPI allows; a dp group of more ranks uses MPI_Ireduce_scatter_block. */
#define RING_MAX_RANKS COMM_RING_MAX_RANKS
#define RING_TAG_SPANS 255

typedef struct {
    float *buf;        /* the p blocks: block k at buf + k·stride */
    float *tmp;        /* the block received at this step */
    int own_tmp;       /* tmp was allocated here (freed at the end); else the caller's */
    size_t block;      /* floats of each block */
    size_t stride;     /* floats from one block's start to the next: block for a whole buffer, more
                          for one piece of a segment's blocks (comm_ireduce_scatter_piece_f32) */
    int p, r, step, tag, fault;
    MPI_Comm comm;
    MPI_Request rq[2]; /* send, receive */
} Ring;

static float *ring_blk(const Ring *g, int k) { return g->buf + (size_t)(((k % g->p) + g->p) % g->p) * g->stride; }

/* Starts step g->step's messages. */
static int ring_post(Ring *g) {
    int right = (g->r + 1) % g->p, left = (g->r - 1 + g->p) % g->p;
    int rc = MPI_Irecv(g->tmp, (int)g->block, MPI_FLOAT, left, g->tag + g->step, g->comm, &g->rq[1]);
    if (rc != MPI_SUCCESS) return rc;
    return MPI_Isend(ring_blk(g, g->r - 1 - g->step), (int)g->block, MPI_FLOAT, right, g->tag + g->step, g->comm,
                     &g->rq[0]);
}

/* Tests the ring; *done = 1 once its last step is added. Returns an MPI code. */
static int ring_test(CommReq *req, int *done) {
    Ring *g = req->ring;
    *done = 0;
    int flag = 0, rc = MPI_Testall(2, g->rq, &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS || !flag) return rc;
    float *dst = ring_blk(g, g->r - 2 - g->step);
    int last = g->step == g->p - 2;
    if (!(last && g->fault))
        for (size_t i = 0; i < g->block; i++) dst[i] += g->tmp[i];
    if (last) {
        if (g->own_tmp) free(g->tmp);
        free(g);
        req->ring = NULL;
        *done = 1;
        return MPI_SUCCESS;
    }
    g->step++;
    return ring_post(g);
}

/* One test of a started request, whatever carries it: 1 = complete; MPI's code in *rc. */
static int req_test(CommReq *req, int *rc) {
    int flag = 0;
    mpi_lock(req->comm);
    if (req->ring) {
        *rc = ring_test(req, &flag);
    } else {
        MPI_Request r = req_get(req);
        *rc = MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
        req_put(req, r);
    }
    mpi_unlock(req->comm);
    return flag;
}

/* Starts a ring reduce-scatter of buf's p blocks (block floats each, `stride` floats apart) over
 * comm (this rank = rank); req is begun; *seq counts the rings started on comm (their tags), the
 * same on all its ranks. tmp: the receive block (block floats, the caller's until the ring is
 * complete), or NULL to allocate one here. */
static Status ring_start(Comm *c, CommReq *req, float *buf, size_t block, size_t stride, int p, int rank,
                         MPI_Comm comm, uint32_t *seq, float *tmp, Err *err) {
    if (block == 0) return ST_OK; /* nothing to add (req_begin left it inactive) */
    Ring *g = calloc(1, sizeof *g);
    int own = tmp == NULL;
    if (own) tmp = malloc(block * sizeof(float));
    if (!g || !tmp) {
        free(g);
        if (own) free(tmp);
        return err_set(err, ST_ERR_RUNTIME, "out of memory for the reduce-scatter's receive block (%zu floats)", block);
    }
    *g = (Ring){.buf = buf, .tmp = tmp, .own_tmp = own, .block = block, .stride = stride, .p = p, .r = rank,
                .tag = (int)((*seq)++ % RING_TAG_SPANS) * RING_MAX_RANKS, .fault = c->test_ring_fault, .comm = comm};
    req->ring = g;
    int rc = MPI_CALL(c, ring_post(g));
    if (rc == MPI_SUCCESS) req_go(req);
    else {
        if (g->own_tmp) free(g->tmp);
        free(g);
        req->ring = NULL;
        return mpi_fail(c, err, rc, "MPI_Isend/MPI_Irecv", "reduce-scatter ring");
    }
    return ST_OK;
}

/* ================================================================ progress thread
 *
 * Open MPI moves a nonblocking collective's bytes only inside MPI calls (its TCP transport, and
 * libnbc's schedule rounds, advance in opal_progress). The trainer tests its requests between
 * blocks, which over shared memory is enough but over TCP leaves nearly all of a gradient
 * all-reduce for the final wait (bench/results/netsim.md: 313 of 369 ms exposed at 1 Gb/s). The
 * thread calls MPI every PROGRESS_POLL_US while any request is pending (an MPI_Iprobe on a private
 * communicator: ob1 runs one opal_progress per call), so the transfer runs while the main thread
 * computes. It does no arithmetic and starts nothing: every collective is still started, reduced
 * (the ring's additions, libnbc's fixed schedule) and finished by the main thread's calls in
 * the same order, so results are bit-identical with or without it; only when the bytes move
 * changes. The two threads never call MPI at once (m->lock, MPI_THREAD_SERIALIZED). The thread is
 * created with every signal blocked (core/stopsig.h: the stop signals reach stopsig's waiter only).
 * ST_COMM_PROGRESS=auto (default: on when the ranks span more than one node, where the transport
 * is a network) | on | off. */
#define PROGRESS_POLL_US 50   /* between progress calls while requests are pending */
#define PROGRESS_IDLE_US 1000 /* between checks for pending requests while none is */

static void *progress_main(void *arg) {
    CommMpi *m = arg;
    pthread_setname_np(pthread_self(), "st-progress"); /* shown by top -H; test_comm finds it so */
    while (!atomic_load(&m->stop)) {
        int busy = atomic_load(&m->pending) > 0;
        if (busy) {
            int flag = 0;
            pthread_mutex_lock(&m->lock);
            MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, m->prog, &flag, MPI_STATUS_IGNORE);
            pthread_mutex_unlock(&m->lock);
            atomic_fetch_add(&m->polls, 1);
        }
        struct timespec ts = {0, (busy ? PROGRESS_POLL_US : PROGRESS_IDLE_US) * 1000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* The mode ST_COMM_PROGRESS asks for: 1 on, 0 off, -1 auto; -2 and err set for anything else. */
static int progress_mode(Err *err) {
    const char *v = getenv("ST_COMM_PROGRESS");
    if (!v || !*v || strcmp(v, "auto") == 0) return -1;
    if (strcmp(v, "on") == 0) return 1;
    if (strcmp(v, "off") == 0) return 0;
    err_set(err, ST_ERR_INPUT, "ST_COMM_PROGRESS: expected auto, on or off, found '%s'", v);
    return -2;
}

/* Starts the thread if the mode says so (after the world and its groups exist). */
static Status progress_start(Comm *c, Err *err) {
    CommMpi *m = c->mpi;
    int mode = progress_mode(err);
    if (mode == -2) return ST_ERR_INPUT;
    if (mode == -1) mode = !c->one_node && c->world > 1 && c->thread_level >= MPI_THREAD_SERIALIZED;
    if (!mode) return ST_OK;
    if (c->thread_level < MPI_THREAD_SERIALIZED)
        return err_set(err, ST_ERR_RUNTIME,
                       "ST_COMM_PROGRESS=on: MPI provides thread level %d, the progress thread needs "
                       "MPI_THREAD_SERIALIZED (%d)", c->thread_level, MPI_THREAD_SERIALIZED);
    int rc = MPI_Comm_dup(m->world, &m->prog);
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "MPI_Comm_dup", "progress thread");
    if (pthread_mutex_init(&m->lock, NULL) != 0)
        return err_set(err, ST_ERR_RUNTIME, "comm: cannot create the progress thread's mutex");
    atomic_store(&m->stop, 0);
    m->thread_on = 1; /* before the thread exists: from here on every MPI call takes the lock */
    int prc = stopsig_thread_create(&m->thread, progress_main, m);
    if (prc != 0) {
        m->thread_on = 0;
        pthread_mutex_destroy(&m->lock);
        return err_set(err, ST_ERR_RUNTIME, "comm: cannot start the progress thread (pthread_create error %d)", prc);
    }
    c->progress_thread = 1;
    return ST_OK;
}

/* An Open MPI boolean parameter from the environment (OMPI_MCA_<name>): 1 true, 0 false or unset. */
static int ompi_env_true(const char *name) {
    const char *v = getenv(name);
    if (!v) return 0;
    return strcmp(v, "1") == 0 || strcasecmp(v, "true") == 0 || strcasecmp(v, "yes") == 0 ||
           strcasecmp(v, "enabled") == 0;
}

/* ST_COMM_WAIT=auto|spin|yield: how comm_wait waits (comm.h, wait_yield). auto yields early where a
 * rank shares its core: Open MPI was told so (mpirun sets OMPI_MCA_mpi_oversubscribe=1 when it
 * places more ranks than slots; OMPI_MCA_mpi_yield_when_idle=1 is the user's way to say it, and
 * makes Open MPI's own blocking waits yield too), or this node has more ranks than online CPUs. */
static Status wait_mode_set(Comm *c, int node_ranks, Err *err) {
    const char *v = getenv("ST_COMM_WAIT");
    if (v && *v && strcmp(v, "auto") != 0) {
        if (strcmp(v, "spin") == 0) c->wait_yield = 0;
        else if (strcmp(v, "yield") == 0) c->wait_yield = 1;
        else return err_set(err, ST_ERR_INPUT, "ST_COMM_WAIT: expected auto, spin or yield, found '%s'", v);
        return ST_OK;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    c->wait_yield = ompi_env_true("OMPI_MCA_mpi_oversubscribe") || ompi_env_true("OMPI_MCA_mpi_yield_when_idle") ||
                    (cpus > 0 && node_ranks > cpus);
    return ST_OK;
}

static void progress_stop(Comm *c) {
    CommMpi *m = c->mpi;
    if (!m || !m->thread_on) return;
    atomic_store(&m->stop, 1);
    pthread_join(m->thread, NULL);
    m->thread_on = 0;
    pthread_mutex_destroy(&m->lock);
    c->progress_thread = 0;
}

uint64_t comm_progress_polls(const Comm *c) { return c->mpi ? atomic_load(&c->mpi->polls) : 0; }

/* ================================================================ lifecycle */

/* 1 if the environment says a launcher started us (so MPI_Init will join a multi-process job). */
static int launcher_detected(void) {
    const char *force = getenv("ST_COMM");
    if (force && strcmp(force, "single") == 0) return 0;
    if (force && strcmp(force, "mpi") == 0) return 1;
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

Status comm_init_local(Comm **out, Err *err) {
    *out = NULL;
    Comm *c = calloc(1, sizeof *c);
    if (!c) return err_set(err, ST_ERR_RUNTIME, "comm_init: out of memory");
    c->world = 1;
    c->dp = 1;
    c->tp = c->pp = 1;
    c->timeout_s = 600;
    c->step = -1;
    c->abort_on_timeout = 1;
    *out = c;
    return ST_OK;
}

Status comm_init(Comm **out, int *argc, char ***argv, Err *err) {
    Status st = comm_init_local(out, err);
    if (st != ST_OK || !launcher_detected()) return st;
    Comm *c = *out;
    *out = NULL;

    CommMpi *m = calloc(1, sizeof *m);
    if (!m) {
        free(c);
        return err_set(err, ST_ERR_RUNTIME, "comm_init: out of memory");
    }
    m->world = m->dp = m->tp = m->pp = m->prog = MPI_COMM_NULL;
    c->mpi = m;
    c->is_mpi = 1;
    int inited = 0, rc;
    MPI_Initialized(&inited);
    if (!inited) {
        /* Open MPI 4.1's automatic choice for MPI_Iallreduce (libnbc) runs at half the speed of the
         * blocking all-reduce on 256 KiB-4 MiB buckets; its ring algorithm matches it (docs/comm.md).
         * Only a default: a value set by the user (environment or mpirun --mca) wins. */
        setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
        /* Open MPI's backtrace printer stays on SIGBUS, SIGFPE and SIGSEGV but not SIGABRT: on the
         * abort of a corrupted heap it calls malloc inside glibc's abort and the rank hangs instead
         * of ending (measured: 3 of 3 runs of heap_comm_stress --fault-overflow under the checking
         * malloc hung until killed at 60 s; 2.3 s without SIGABRT in the list; docs/debugging.md).
         * A value set by the user wins. */
        char sigs[32];
        snprintf(sigs, sizeof sigs, "%d,%d,%d", SIGBUS, SIGFPE, SIGSEGV);
        setenv("OMPI_MCA_opal_signal", sigs, 0);
        /* SERIALIZED: the progress thread may call MPI, never at the same time as the main thread
         * (Open MPI takes its multi-thread locks only under MPI_THREAD_MULTIPLE). */
        rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &c->thread_level);
        if (rc != MPI_SUCCESS) {
            st = mpi_fail(c, err, rc, "MPI_Init_thread", "init");
            free(m);
            free(c);
            return st;
        }
        m->we_initialized = 1;
    } else {
        MPI_Query_thread(&c->thread_level);
    }
    if (c->thread_level < MPI_THREAD_FUNNELED) {
        st = err_set(err, ST_ERR_RUNTIME, "MPI provides thread level %d, scaletrain needs MPI_THREAD_FUNNELED",
                     c->thread_level);
        goto fail;
    }
    /* Errors must come back as codes (then a Status), not kill the process silently. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->world)) != MPI_SUCCESS) {
        st = mpi_fail(c, err, rc, "MPI_Comm_dup", "init");
        goto fail;
    }
    MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->world, &c->rank);
    MPI_Comm_size(m->world, &c->world);
    if ((rc = MPI_Comm_dup(m->world, &m->dp)) != MPI_SUCCESS) {
        st = mpi_fail(c, err, rc, "MPI_Comm_dup", "init");
        goto fail;
    }
    c->dp = c->world;
    c->dp_rank = c->rank;
    /* All ranks on one node (shared memory): the plan prices every group there (train_setup.c). */
    MPI_Comm node;
    int nsize = 1;
    if (MPI_Comm_split_type(m->world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        int all_one_node = 0;
        MPI_Comm_size(node, &nsize);
        MPI_Comm_free(&node);
        c->node_ranks = nsize;
        int mine = nsize == c->world;
        if (MPI_Allreduce(&mine, &all_one_node, 1, MPI_INT, MPI_MIN, m->world) == MPI_SUCCESS)
            c->one_node = all_one_node;
    }
    /* srun without an MPI plugin starts N singletons that each see world 1: say so, do not train N
     * independent copies. */
    const char *ntasks = getenv("SLURM_STEP_NUM_TASKS");
    if (ntasks && atoi(ntasks) > 1 && c->world == 1 && !getenv("OMPI_COMM_WORLD_SIZE")) {
        st = err_set(err, ST_ERR_INPUT,
                     "srun started %s tasks but MPI sees a world of 1: launch with srun --mpi=pmix (or pmi2)", ntasks);
        goto fail;
    }
    m->u64 = calloc((size_t)c->world, sizeof *m->u64);
    if (!m->u64) {
        st = err_set(err, ST_ERR_RUNTIME, "comm_init: out of memory");
        goto fail;
    }
    if ((st = wait_mode_set(c, nsize, err)) != ST_OK) goto fail;
    if ((st = progress_start(c, err)) != ST_OK) goto fail;
    *out = c;
    return ST_OK;
fail:
    comm_finalize(c);
    return st;
}

void comm_finalize(Comm *c) {
    if (!c) return;
    CommMpi *m = c->mpi;
    if (m) {
        progress_stop(c);
        if (m->prog != MPI_COMM_NULL) MPI_Comm_free(&m->prog);
        if (m->dp != MPI_COMM_NULL) MPI_Comm_free(&m->dp);
        if (m->tp != MPI_COMM_NULL) MPI_Comm_free(&m->tp);
        if (m->pp != MPI_COMM_NULL) MPI_Comm_free(&m->pp);
        if (m->world != MPI_COMM_NULL) MPI_Comm_free(&m->world);
        int fin = 0;
        MPI_Finalized(&fin);
        if (m->we_initialized && !fin) MPI_Finalize();
        free(m->u64);
        free(m);
    }
    free(c);
}

void comm_abort(Comm *c, int code, const char *msg) {
    fprintf(stderr, "scaletrain: rank %d: %s\n", c ? c->rank : 0, msg ? msg : "aborting");
    fflush(stderr);
    if (c && c->mpi) MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
    _exit(code ? code : 1);
}

int comm_serialized(const Comm *c) { return c->mpi && c->thread_level >= MPI_THREAD_SERIALIZED; }

void comm_describe(const Comm *c, char *buf, size_t cap) {
    if (!c->mpi) {
        snprintf(buf, cap, "single-process world=1 dp=1 tp=1 pp=1 (no MPI launcher detected)");
        return;
    }
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_CALL(c, MPI_Get_library_version(lib, &len)) != MPI_SUCCESS) lib[0] = 0;
    char *comma = strchr(lib, ',');
    if (comma) *comma = 0;
    const char *lvl = c->thread_level == MPI_THREAD_SINGLE       ? "single"
                      : c->thread_level == MPI_THREAD_FUNNELED   ? "funneled"
                      : c->thread_level == MPI_THREAD_SERIALIZED ? "serialized"
                                                                 : "multiple";
    snprintf(buf, cap, "mpi world=%d dp=%d tp=%d pp=%d thread=%s%s%s (%s)", c->world, c->dp, c->tp, c->pp, lvl,
             c->progress_thread ? ", progress thread" : "", c->wait_yield ? ", yields when idle" : "", lib);
}

/* ================================================================ requests */

int comm_test(CommReq *req) {
    if (!req->active) return 1;
    if (req->mpi_rc != MPI_SUCCESS) return 1;
    Comm *c = req->comm;
    double t0 = timer_ms();
    int rc = MPI_SUCCESS, flag = req_test(req, &rc);
    double dt = timer_ms() - t0;
    c->stats.test_ms += dt;
    c->stats.test_ms_by_kind[req->kind] += dt;
    if (rc != MPI_SUCCESS) {
        req->mpi_rc = rc;
        return 1;
    }
    if (flag) {
        c->stats.test_done[req->kind]++;
        req_finish(req);
    }
    return flag;
}

Status comm_wait(CommReq *req, double timeout_s, const char *what, long step, Err *err) {
    Comm *c = req->comm;
    if (!req->active) return ST_OK;
    char name[256];
    if (what && *what)
        snprintf(name, sizeof name, "%s (%s)", what, comm_kind_name(req->kind));
    else
        snprintf(name, sizeof name, "%s", comm_kind_name(req->kind));
    double t0 = timer_ms(), limit_ms = timeout_s > 0 ? timeout_s * 1e3 : 0, now = t0;
    long spins = 0;
    Status st = ST_OK;
    for (;;) {
        if (req->mpi_rc != MPI_SUCCESS) {
            st = mpi_fail(c, err, req->mpi_rc, "MPI_Test", name);
            req_gone(req);
            break;
        }
        int rc = MPI_SUCCESS, flag = req_test(req, &rc);
        if (rc != MPI_SUCCESS) {
            req->mpi_rc = rc;
            continue;
        }
        if (flag) {
            req_finish(req);
            break;
        }
        now = timer_ms();
        if (limit_ms > 0 && now - t0 > limit_ms) {
            st = err_set(err, ST_ERR_RUNTIME,
                         "collective %s at step %ld did not complete within %g s on rank %d of %d "
                         "(another rank is stuck, slow or dead); ending the job",
                         name, step, timeout_s, c->rank, c->world);
            c->stats.wait_ms[req->kind] += now - t0;
            c->stats.wait_ms_total += now - t0;
            if (c->abort_on_timeout) comm_abort(c, 1, err ? err->msg : "collective timed out");
            return st;
        }
        /* A rank with its own core spins for latency, and yields after 10 ms so a stuck peer can
         * run; a rank that shares its core (c->wait_yield) yields after a few polls, or it would
         * spin away the time slice its peer needs to arrive (docs/comm.md, "Waiting"). */
        if (++spins > 64 && (c->wait_yield || now - t0 > 10.0)) sched_yield();
    }
    now = timer_ms();
    c->stats.wait_ms[req->kind] += now - t0;
    c->stats.wait_ms_total += now - t0;
    return st;
}

Status comm_wait_all(CommReq *reqs, int n, double timeout_s, const char *what, long step, Err *err) {
    for (int i = 0; i < n; i++) {
        Status st = comm_wait(&reqs[i], timeout_s, what, step, err);
        if (st != ST_OK) return st;
    }
    return ST_OK;
}

/* Blocking form of a started request: wait with the Comm's timeout and step. */
static Status finish_blocking(Comm *c, CommReq *req, Status st, Err *err) {
    if (st != ST_OK) return st;
    return comm_wait(req, c->timeout_s, NULL, c->step, err);
}

/* ================================================================ grid and checks */

Status comm_check_same_u64(Comm *c, uint64_t value, const char *what, Err *err) {
    if (!c->mpi) {
        c->stats.calls[COMM_SCALAR]++;
        return ST_OK;
    }
    CommMpi *m = c->mpi;
    CommReq req = {0};
    req_begin(c, &req, COMM_SCALAR, (uint64_t)(c->world - 1) * sizeof(uint64_t));
    MPI_Request r;
    int rc = MPI_CALL(c, MPI_Iallgather(&value, 1, MPI_UINT64_T, m->u64, 1, MPI_UINT64_T, m->world, &r));
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "MPI_Iallgather", what);
    req_put(&req, r);
    req_go(&req);
    Status st = comm_wait(&req, c->timeout_s, what, c->step, err);
    if (st != ST_OK) return st;
    int ndiff = 0;
    for (int i = 1; i < c->world; i++) ndiff += m->u64[i] != m->u64[0];
    if (ndiff == 0) return ST_OK;
    char msg[sizeof err->msg];
    int len = snprintf(msg, sizeof msg, "%s differs across ranks: rank 0 has 0x%llx", what,
                       (unsigned long long)m->u64[0]);
    int shown = 0;
    for (int i = 1; i < c->world && len < (int)sizeof msg - 64; i++) {
        if (m->u64[i] == m->u64[0]) continue;
        if (shown == 8) {
            len += snprintf(msg + len, sizeof msg - len, ", and %d more ranks", ndiff - shown);
            break;
        }
        len += snprintf(msg + len, sizeof msg - len, ", rank %d has 0x%llx", i, (unsigned long long)m->u64[i]);
        shown++;
    }
    return err_set(err, ST_ERR_INPUT, "%s", msg);
}

/* Replaces *group by the split of the world with this color and key (MPI_ERRORS_RETURN set). */
static Status split_group(Comm *c, MPI_Comm *group, int color, int key, const char *what, Err *err) {
    MPI_Comm g;
    int rc = MPI_CALL(c, MPI_Comm_split(c->mpi->world, color, key, &g));
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "MPI_Comm_split", what);
    mpi_lock(c);
    MPI_Comm_set_errhandler(g, MPI_ERRORS_RETURN);
    if (*group != MPI_COMM_NULL) MPI_Comm_free(group);
    mpi_unlock(c);
    *group = g;
    return ST_OK;
}

Status comm_set_grid(Comm *c, int dp, int tp, int pp, Err *err) {
    if (dp < 1 || tp < 1 || pp < 1)
        return err_set(err, ST_ERR_INPUT, "process grid --dp %d --tp %d --pp %d: each must be at least 1", dp, tp, pp);
    long long prod = (long long)dp * tp * pp;
    if (prod != c->world)
        return err_set(err, ST_ERR_INPUT,
                       "process grid dp*tp*pp = %d*%d*%d = %lld does not equal the world size %d (ranks launched)", dp,
                       tp, pp, prod, c->world);
    /* Every rank must agree on the grid before splitting communicators. */
    uint64_t h = ((uint64_t)dp << 42) ^ ((uint64_t)tp << 21) ^ (uint64_t)pp;
    Status st = comm_check_same_u64(c, h, "process grid (dp, tp, pp)", err);
    if (st != ST_OK) return st;
    int tp_rank = c->rank % tp;
    int dp_rank = (c->rank / tp) % dp;
    int pp_rank = c->rank / (tp * dp);
    if (c->mpi) {
        /* Each group: the ranks that share the other two coordinates, ordered by their own. The
         * tp group is consecutive ranks (tp fastest-varying, so a group sits inside a node). */
        if ((st = split_group(c, &c->mpi->dp, pp_rank * tp + tp_rank, dp_rank, "data-parallel group", err)) != ST_OK ||
            (st = split_group(c, &c->mpi->tp, pp_rank * dp + dp_rank, tp_rank, "tensor-parallel group", err)) != ST_OK ||
            (st = split_group(c, &c->mpi->pp, dp_rank * tp + tp_rank, pp_rank, "pipeline group", err)) != ST_OK)
            return st;
    }
    c->dp = dp;
    c->tp = tp;
    c->pp = pp;
    c->dp_rank = dp_rank;
    c->tp_rank = tp_rank;
    c->pp_rank = pp_rank;
    return ST_OK;
}

/* ================================================================ float collectives (dp group) */

Status comm_iallreduce_f32(Comm *c, const float *send, float *recv, size_t n, CommReq *req, Err *err) {
    Status st = check_count(c, n, "all-reduce", err);
    if (st != ST_OK) return st;
    req_begin(c, req, COMM_ALLREDUCE, comm_ring_bytes(COMM_ALLREDUCE, (uint64_t)n * 4, c->dp));
    if (!c->mpi) {
        if (send != recv && n) memcpy(recv, send, n * sizeof(float));
        return ST_OK;
    }
    MPI_Request r;
    int rc = MPI_CALL(c, MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)n, MPI_FLOAT, MPI_SUM, c->mpi->dp, &r));
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "MPI_Iallreduce", "all-reduce");
    req_put(req, r);
    req_go(req);
    return ST_OK;
}

static Status ireduce_scatter(Comm *c, const float *send, float *recv, size_t block, float *tmp, CommReq *req, Err *err) {
    Status st = check_count(c, block, "reduce-scatter block", err);
    if (st != ST_OK) return st;
    const float *own = send + (size_t)c->dp_rank * block;
    size_t total = block * (size_t)c->dp;
    if (c->mpi && recv == own && c->rs_as_allreduce) {
        /* Same result in the own block, twice the bytes, but Open MPI 4.1's all-reduce over shared
         * memory can beat its reduce-scatter (docs/comm.md); the bytes booked are the all-reduce's. */
        st = check_count(c, total, "reduce-scatter (as all-reduce)", err);
        if (st != ST_OK) return st;
        req_begin(c, req, COMM_REDUCE_SCATTER, comm_ring_bytes(COMM_ALLREDUCE, (uint64_t)total * 4, c->dp));
        MPI_Request r;
        int rc = MPI_CALL(c, MPI_Iallreduce(MPI_IN_PLACE, (float *)send, (int)total, MPI_FLOAT, MPI_SUM, c->mpi->dp, &r));
        if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "MPI_Iallreduce", "reduce-scatter as all-reduce");
        req_put(req, r);
        req_go(req);
        return ST_OK;
    }
    req_begin(c, req, COMM_REDUCE_SCATTER, comm_ring_bytes(COMM_REDUCE_SCATTER, (uint64_t)total * 4, c->dp));
    if (!c->mpi) {
        if (own != recv && block) memcpy(recv, own, block * sizeof(float));
        return ST_OK;
    }
    if (recv == own && c->dp > 1 && c->dp <= RING_MAX_RANKS)
        return ring_start(c, req, (float *)send, block, block, c->dp, c->dp_rank, c->mpi->dp, &c->ring_seq[0], tmp, err);
    MPI_Request r;
    int rc;
    if (recv == own) {
        /* MPI_IN_PLACE leaves the result at the start of the buffer; move it after completion. */
        rc = MPI_CALL(c, MPI_Ireduce_scatter_block(MPI_IN_PLACE, (float *)send, (int)block, MPI_FLOAT, MPI_SUM, c->mpi->dp, &r));
        req->move_dst = recv;
        req->move_src = send;
        req->move_n = block;
    } else {
        rc = MPI_CALL(c, MPI_Ireduce_scatter_block(send, recv, (int)block, MPI_FLOAT, MPI_SUM, c->mpi->dp, &r));
    }
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "MPI_Ireduce_scatter_block", "reduce-scatter");
    req_put(req, r);
    req_go(req);
    return ST_OK;
}

Status comm_ireduce_scatter_f32(Comm *c, const float *send, float *recv, size_t block, CommReq *req, Err *err) {
    return ireduce_scatter(c, send, recv, block, NULL, req, err);
}

Status comm_iallgather_f32(Comm *c, const float *send, float *recv, size_t block, CommReq *req, Err *err) {
    Status st = check_count(c, block, "all-gather block", err);
    if (st != ST_OK) return st;
    req_begin(c, req, COMM_ALLGATHER, comm_ring_bytes(COMM_ALLGATHER, (uint64_t)block * 4 * (uint64_t)c->dp, c->dp));
    float *own = recv + (size_t)c->dp_rank * block;
    if (!c->mpi) {
        if (own != send && block) memcpy(own, send, block * sizeof(float));
        return ST_OK;
    }
    MPI_Request r;
    int rc = MPI_CALL(c, MPI_Iallgather(send == own ? MPI_IN_PLACE : send, (int)block, MPI_FLOAT, recv, (int)block, MPI_FLOAT,
                            c->mpi->dp, &r));
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "MPI_Iallgather", "all-gather");
    req_put(req, r);
    req_go(req);
    return ST_OK;
}

/* The MPI datatype of one rank's part of a piece: n floats whose extent is `stride` floats, so the
 * p parts of a piece are p elements of it (MPI copies the type: it is freed at once). */
static int piece_type(size_t n, size_t stride, MPI_Datatype *t) {
    MPI_Datatype cont;
    int rc = MPI_Type_contiguous((int)n, MPI_FLOAT, &cont);
    if (rc != MPI_SUCCESS) return rc;
    rc = MPI_Type_create_resized(cont, 0, (MPI_Aint)(stride * sizeof(float)), t);
    MPI_Type_free(&cont);
    if (rc == MPI_SUCCESS) rc = MPI_Type_commit(t);
    return rc;
}

/* Checks a piece's arguments (n floats of each of dp blocks `stride` apart). */
static Status piece_check(const Comm *c, size_t stride, size_t n, const char *what, Err *err) {
    Status st = check_count(c, n, what, err);
    if (st != ST_OK) return st;
    if (n > stride)
        return err_set(err, ST_ERR_INPUT, "%s piece of %zu floats per rank: expected at most the block stride %zu", what, n, stride);
    return ST_OK;
}

Status comm_ireduce_scatter_piece_f32(Comm *c, float *buf, size_t stride, size_t n, CommReq *req, Err *err) {
    return comm_ireduce_scatter_piece_tmp_f32(c, buf, stride, n, NULL, req, err);
}

Status comm_ireduce_scatter_piece_tmp_f32(Comm *c, float *buf, size_t stride, size_t n, float *tmp, CommReq *req,
                                          Err *err) {
    if (n == stride) return ireduce_scatter(c, buf, buf + (size_t)c->dp_rank * stride, n, tmp, req, err);
    Status st = piece_check(c, stride, n, "reduce-scatter", err);
    if (st != ST_OK) return st;
    /* A piece is the ring's only: MPI's reduce-scatter and all-reduce take no strided parts. */
    if (c->mpi && c->dp > 1 && c->rs_as_allreduce)
        return err_set(err, ST_ERR_INPUT, "reduce-scatter piece of %zu of %zu floats per rank: rs_as_allreduce runs whole collectives only", n, stride);
    if (c->mpi && c->dp > RING_MAX_RANKS)
        return err_set(err, ST_ERR_INPUT, "reduce-scatter piece of %zu of %zu floats per rank: pieces need the ring, which runs on at most %d dp ranks, found %d",
                       n, stride, RING_MAX_RANKS, c->dp);
    req_begin(c, req, COMM_REDUCE_SCATTER, comm_ring_bytes(COMM_REDUCE_SCATTER, (uint64_t)n * (uint64_t)c->dp * 4, c->dp));
    if (!c->mpi || c->dp == 1) return ST_OK; /* one rank: its part is the sum */
    return ring_start(c, req, buf, n, stride, c->dp, c->dp_rank, c->mpi->dp, &c->ring_seq[0], tmp, err);
}

Status comm_iallgather_piece_f32(Comm *c, float *buf, size_t stride, size_t n, CommReq *req, Err *err) {
    if (n == stride) return comm_iallgather_f32(c, buf + (size_t)c->dp_rank * stride, buf, n, req, err);
    Status st = piece_check(c, stride, n, "all-gather", err);
    if (st != ST_OK) return st;
    req_begin(c, req, COMM_ALLGATHER, comm_ring_bytes(COMM_ALLGATHER, (uint64_t)n * (uint64_t)c->dp * 4, c->dp));
    if (!c->mpi || n == 0) return ST_OK;
    MPI_Datatype t;
    MPI_Request r;
    mpi_lock(c);
    int rc = piece_type(n, stride, &t);
    if (rc == MPI_SUCCESS) {
        rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, 1, t, c->mpi->dp, &r);
        MPI_Type_free(&t);
    }
    mpi_unlock(c);
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "MPI_Iallgather", "all-gather piece");
    req_put(req, r);
    req_go(req);
    return ST_OK;
}

Status comm_ibcast_f32(Comm *c, float *buf, size_t n, int root, CommReq *req, Err *err) {
    Status st = check_count(c, n, "broadcast", err);
    if (st != ST_OK) return st;
    if (root < 0 || root >= c->dp)
        return err_set(err, ST_ERR_INPUT, "broadcast root %d is not a dp rank (dp = %d)", root, c->dp);
    req_begin(c, req, COMM_BCAST, comm_ring_bytes(COMM_BCAST, (uint64_t)n * 4, c->dp));
    if (!c->mpi) return ST_OK;
    MPI_Request r;
    int rc = MPI_CALL(c, MPI_Ibcast(buf, (int)n, MPI_FLOAT, root, c->mpi->dp, &r));
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "MPI_Ibcast", "broadcast");
    req_put(req, r);
    req_go(req);
    return ST_OK;
}

Status comm_allreduce_f32(Comm *c, const float *send, float *recv, size_t n, Err *err) {
    CommReq req = {0};
    return finish_blocking(c, &req, comm_iallreduce_f32(c, send, recv, n, &req, err), err);
}

Status comm_reduce_scatter_f32(Comm *c, const float *send, float *recv, size_t block, Err *err) {
    CommReq req = {0};
    return finish_blocking(c, &req, comm_ireduce_scatter_f32(c, send, recv, block, &req, err), err);
}

Status comm_allgather_f32(Comm *c, const float *send, float *recv, size_t block, Err *err) {
    CommReq req = {0};
    return finish_blocking(c, &req, comm_iallgather_f32(c, send, recv, block, &req, err), err);
}

Status comm_bcast_f32(Comm *c, float *buf, size_t n, int root, Err *err) {
    CommReq req = {0};
    return finish_blocking(c, &req, comm_ibcast_f32(c, buf, n, root, &req, err), err);
}

/* ================================================================ tensor-parallel collectives (tp group) */

/* Starts one in-place collective of kind k over the tp group into *req (n floats in all; the blocks
 * are n / tp). The caller checked n <= INT_MAX (all-reduce) or the block (the others). */
static Status tp_start(Comm *c, CommKind k, float *buf, size_t n, MPI_Op op, CommReq *req, Err *err) {
    req_begin(c, req, k, comm_ring_bytes(k, (uint64_t)n * 4, c->tp));
    int rc;
    const char *call;
    MPI_Request r;
    size_t block = n / (size_t)c->tp;
    if (k == COMM_TP_ALLREDUCE) {
        call = "MPI_Iallreduce";
        rc = MPI_CALL(c, MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, op, c->mpi->tp, &r));
    } else if (k == COMM_TP_ALLGATHER) {
        call = "MPI_Iallgather";
        rc = MPI_CALL(c, MPI_Iallgather(MPI_IN_PLACE, (int)block, MPI_FLOAT, buf, (int)block, MPI_FLOAT, c->mpi->tp, &r));
    } else if (c->tp <= RING_MAX_RANKS) { /* comm's ring (see comm_ireduce_scatter_f32) */
        return ring_start(c, req, buf, block, block, c->tp, c->tp_rank, c->mpi->tp, &c->ring_seq[1], NULL, err);
    } else {
        /* In place the result lands at the start of buf; it moves to the own block after. */
        call = "MPI_Ireduce_scatter_block";
        rc = MPI_CALL(c, MPI_Ireduce_scatter_block(MPI_IN_PLACE, buf, (int)block, MPI_FLOAT, MPI_SUM, c->mpi->tp, &r));
        req->move_dst = buf + (size_t)c->tp_rank * block, req->move_src = buf, req->move_n = block;
    }
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, call, comm_kind_name(k));
    req_put(req, r);
    req_go(req);
    return ST_OK;
}

/* One blocking in-place collective over the tp group, in pieces of at most INT_MAX elements. */
static Status tp_call(Comm *c, CommKind k, float *buf, size_t n, MPI_Op op, Err *err) {
    if (c->tp <= 1 || !c->mpi || n == 0) return ST_OK;
    Status st = ST_OK;
    if (k == COMM_TP_ALLREDUCE) {
        for (size_t done = 0; done < n && st == ST_OK; done += (size_t)INT_MAX) {
            size_t m = n - done < (size_t)INT_MAX ? n - done : (size_t)INT_MAX;
            CommReq req = {0};
            st = tp_start(c, k, buf + done, m, op, &req, err);
            if (st == ST_OK) st = comm_wait(&req, c->timeout_s, "tp all-reduce", c->step, err);
        }
        return st;
    }
    if ((st = check_count(c, n / (size_t)c->tp, comm_kind_name(k), err)) != ST_OK) return st;
    CommReq req = {0};
    st = tp_start(c, k, buf, n, op, &req, err);
    return st == ST_OK ? comm_wait(&req, c->timeout_s, comm_kind_name(k), c->step, err) : st;
}

Status comm_tp_allreduce_f32(Comm *c, float *buf, size_t n, CommOp op, Err *err) {
    return tp_call(c, COMM_TP_ALLREDUCE, buf, n, op == COMM_MAX ? MPI_MAX : MPI_SUM, err);
}

Status comm_tp_allgather_f32(Comm *c, float *buf, size_t block, Err *err) {
    return tp_call(c, COMM_TP_ALLGATHER, buf, block * (size_t)c->tp, MPI_SUM, err);
}

Status comm_tp_reduce_scatter_f32(Comm *c, float *buf, size_t block, Err *err) {
    return tp_call(c, COMM_TP_REDUCE_SCATTER, buf, block * (size_t)c->tp, MPI_SUM, err);
}

/* The nonblocking forms: one request each (no splitting), booked as started-nonblocking. */
static Status tp_istart(Comm *c, CommKind k, float *buf, size_t n, size_t count, MPI_Op op, CommReq *req, Err *err) {
    memset(req, 0, sizeof *req);
    if (c->tp <= 1 || !c->mpi || n == 0) return ST_OK;
    Status st = check_count(c, count, comm_kind_name(k), err);
    if (st != ST_OK) return st;
    c->stats.tp_nonblocking++;
    return tp_start(c, k, buf, n, op, req, err);
}

Status comm_tp_iallreduce_f32(Comm *c, float *buf, size_t n, CommOp op, CommReq *req, Err *err) {
    return tp_istart(c, COMM_TP_ALLREDUCE, buf, n, n, op == COMM_MAX ? MPI_MAX : MPI_SUM, req, err);
}

Status comm_tp_iallgather_f32(Comm *c, float *buf, size_t block, CommReq *req, Err *err) {
    return tp_istart(c, COMM_TP_ALLGATHER, buf, block * (size_t)c->tp, block, MPI_SUM, req, err);
}

Status comm_tp_ireduce_scatter_f32(Comm *c, float *buf, size_t block, CommReq *req, Err *err) {
    return tp_istart(c, COMM_TP_REDUCE_SCATTER, buf, block * (size_t)c->tp, block, MPI_SUM, req, err);
}

/* ================================================================ pipeline point-to-point (pp group) */

static Status pp_peer(Comm *c, int peer, size_t n, const char *what, Err *err) {
    if (peer < 0 || peer >= c->pp || peer == c->pp_rank)
        return err_set(err, ST_ERR_INPUT, "%s: expected a pipeline stage 0..%d other than this rank's %d, found %d", what,
                       c->pp - 1, c->pp_rank, peer);
    return check_count(c, n, what, err);
}

Status comm_pp_isend_f32(Comm *c, const float *buf, size_t n, int to_pp_rank, int tag, CommReq *req, Err *err) {
    Status st = pp_peer(c, to_pp_rank, n, "pp send", err);
    if (st != ST_OK) return st;
    req_begin(c, req, COMM_PP_SEND, (uint64_t)n * 4);
    MPI_Request r;
    int rc = MPI_CALL(c, MPI_Isend(buf, (int)n, MPI_FLOAT, to_pp_rank, tag, c->mpi->pp, &r));
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "MPI_Isend", "pp send");
    req_put(req, r);
    req_go(req);
    return ST_OK;
}

Status comm_pp_irecv_f32(Comm *c, float *buf, size_t n, int from_pp_rank, int tag, CommReq *req, Err *err) {
    Status st = pp_peer(c, from_pp_rank, n, "pp receive", err);
    if (st != ST_OK) return st;
    req_init(c, req, COMM_PP_SEND, 0); /* nothing booked: the sender's call and bytes count */
    MPI_Request r;
    int rc = MPI_CALL(c, MPI_Irecv(buf, (int)n, MPI_FLOAT, from_pp_rank, tag, c->mpi->pp, &r));
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "MPI_Irecv", "pp receive");
    req_put(req, r);
    req_go(req);
    return ST_OK;
}

/* ================================================================ small collectives (world) */

static Status iallreduce_scalar(Comm *c, void *buf, int n, MPI_Datatype t, size_t esize, CommOp op, CommReq *req,
                                Err *err) {
    if (n < 0) return err_set(err, ST_ERR_INPUT, "scalar all-reduce of %d values", n);
    req_begin(c, req, COMM_SCALAR, comm_ring_bytes(COMM_SCALAR, (uint64_t)n * esize, c->world));
    if (!c->mpi) return ST_OK;
    MPI_Request r;
    int rc = MPI_CALL(c, MPI_Iallreduce(MPI_IN_PLACE, buf, n, t, op == COMM_MAX ? MPI_MAX : MPI_SUM, c->mpi->world, &r));
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "MPI_Iallreduce", "scalar all-reduce");
    req_put(req, r);
    req_go(req);
    return ST_OK;
}

Status comm_iallreduce_f64(Comm *c, double *buf, int n, CommOp op, CommReq *req, Err *err) {
    return iallreduce_scalar(c, buf, n, MPI_DOUBLE, sizeof(double), op, req, err);
}

Status comm_iallreduce_i64(Comm *c, int64_t *buf, int n, CommOp op, CommReq *req, Err *err) {
    return iallreduce_scalar(c, buf, n, MPI_INT64_T, sizeof(int64_t), op, req, err);
}

Status comm_allreduce_f64(Comm *c, double *buf, int n, CommOp op, Err *err) {
    CommReq req = {0};
    return finish_blocking(c, &req, comm_iallreduce_f64(c, buf, n, op, &req, err), err);
}

Status comm_allreduce_i64(Comm *c, int64_t *buf, int n, CommOp op, Err *err) {
    CommReq req = {0};
    return finish_blocking(c, &req, comm_iallreduce_i64(c, buf, n, op, &req, err), err);
}

Status comm_allgather_f64(Comm *c, double value, double *all, Err *err) {
    CommReq req = {0};
    req_begin(c, &req, COMM_SCALAR, (uint64_t)(c->world - 1) * sizeof(double));
    if (!c->mpi) {
        all[0] = value;
        return ST_OK;
    }
    MPI_Request r;
    int rc = MPI_CALL(c, MPI_Iallgather(&value, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, c->mpi->world, &r));
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "MPI_Iallgather", "scalar all-gather");
    req_put(&req, r);
    req_go(&req);
    return comm_wait(&req, c->timeout_s, "scalar all-gather", c->step, err);
}

Status comm_bcast_bytes(Comm *c, void *buf, size_t n, int root, Err *err) {
    Status st = check_count(c, n, "byte broadcast", err);
    if (st != ST_OK) return st;
    if (root < 0 || root >= c->world)
        return err_set(err, ST_ERR_INPUT, "broadcast root %d is not a rank (world = %d)", root, c->world);
    CommReq req = {0};
    req_begin(c, &req, COMM_BCAST, comm_ring_bytes(COMM_BCAST, n, c->world));
    if (!c->mpi) return ST_OK;
    MPI_Request r;
    int rc = MPI_CALL(c, MPI_Ibcast(buf, (int)n, MPI_BYTE, root, c->mpi->world, &r));
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "MPI_Ibcast", "byte broadcast");
    req_put(&req, r);
    req_go(&req);
    return comm_wait(&req, c->timeout_s, "byte broadcast", c->step, err);
}

Status comm_gather_bytes(Comm *c, const void *send, size_t n, void **all, size_t *lens, Err *err) {
    *all = NULL;
    Status st = check_count(c, n, "byte gather", err);
    if (st != ST_OK) return st;
    if (!c->mpi) {
        if (!(*all = malloc(n ? n : 1))) return err_set(err, ST_ERR_RUNTIME, "byte gather: out of memory (%zu bytes)", n);
        memcpy(*all, send, n);
        lens[0] = n;
        return ST_OK;
    }
    /* The counts first (a gather of one int each), then the bytes (a gatherv at their displacements). */
    int mine = (int)n, *counts = NULL, *displs = NULL;
    char *buf = NULL;
    if (c->rank == 0) {
        counts = calloc((size_t)c->world, sizeof *counts);
        displs = calloc((size_t)c->world, sizeof *displs);
        if (!counts || !displs) st = err_set(err, ST_ERR_RUNTIME, "byte gather: out of memory");
    }
    /* A rank that cannot allocate still takes part, or the others would wait forever. */
    CommReq req = {0};
    req_begin(c, &req, COMM_SCALAR, sizeof(int));
    MPI_Request r;
    int rc = MPI_CALL(c, MPI_Igather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, c->mpi->world, &r));
    if (rc != MPI_SUCCESS) {
        free(counts), free(displs);
        return mpi_fail(c, err, rc, "MPI_Igather", "byte gather (counts)");
    }
    req_put(&req, r);
    req_go(&req);
    Status wst = comm_wait(&req, c->timeout_s, "byte gather (counts)", c->step, err);
    if (wst != ST_OK) {
        free(counts), free(displs);
        return wst;
    }
    size_t total = 0;
    if (c->rank == 0 && st == ST_OK) {
        for (int i = 0; i < c->world; i++) {
            displs[i] = (int)total;
            total += (size_t)counts[i];
            if (total > (size_t)INT_MAX) {
                st = err_set(err, ST_ERR_INPUT, "byte gather: %zu bytes in all, more than one call moves", total);
                break;
            }
        }
        if (st == ST_OK && !(buf = malloc(total ? total : 1)))
            st = err_set(err, ST_ERR_RUNTIME, "byte gather: out of memory (%zu bytes)", total);
        if (st != ST_OK) /* receive nothing rather than overflow: the data is dropped, the error kept */
            for (int i = 0; i < c->world; i++) counts[i] = 0, displs[i] = 0;
    }
    req_begin(c, &req, COMM_SCALAR, (uint64_t)n);
    rc = MPI_CALL(c, MPI_Igatherv(send, mine, MPI_BYTE, buf, counts, displs, MPI_BYTE, 0, c->mpi->world, &r));
    if (rc != MPI_SUCCESS) {
        free(counts), free(displs), free(buf);
        return mpi_fail(c, err, rc, "MPI_Igatherv", "byte gather");
    }
    req_put(&req, r);
    req_go(&req);
    wst = comm_wait(&req, c->timeout_s, "byte gather", c->step, err);
    if (wst == ST_OK && st == ST_OK && c->rank == 0) {
        for (int i = 0; i < c->world; i++) lens[i] = (size_t)counts[i];
        *all = buf, buf = NULL;
    }
    free(counts), free(displs), free(buf);
    return wst != ST_OK ? wst : st;
}

Status comm_barrier(Comm *c, Err *err) {
    if (!c->mpi) return ST_OK;
    CommReq req = {0};
    req_begin(c, &req, COMM_SCALAR, 0);
    MPI_Request r;
    int rc = MPI_CALL(c, MPI_Ibarrier(c->mpi->world, &r));
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "MPI_Ibarrier", "barrier");
    req_put(&req, r);
    req_go(&req);
    return comm_wait(&req, c->timeout_s, "barrier", c->step, err);
}
