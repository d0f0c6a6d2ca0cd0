/* comm.h — the process grid and the collectives of a run (DESIGN.md §3, issue 6).
 *
 * One Comm per process, created by comm_init and passed explicitly (no globals). Under a launcher
 * (mpirun, srun, any PMI/PMIx environment) it wraps Open MPI; otherwise it is a single-process
 * implementation with identical semantics (world = 1, every collective an identity or a copy), so
 * everything builds and runs without MPI. comm.c is the only file of the project that includes
 * <mpi.h>.
 *
 * Conventions
 * - Threads: only the thread that called comm_init may call comm_* (OpenMP regions must not); that
 *   is what the trainer does (communication is started and progressed between kernels, never
 *   inside them). MPI is initialised with MPI_THREAD_SERIALIZED because comm's own progress
 *   thread (ST_COMM_PROGRESS, on by default when the ranks span nodes) also calls MPI, under a
 *   lock every comm call takes: it keeps nonblocking collectives moving while the caller
 *   computes, and changes when bytes move, never what is added in which order.
 * - Errors: MPI_ERRORS_RETURN is set on every communicator, so an MPI failure becomes a Status and
 *   a message naming the collective; nothing here prints, except comm_abort and a comm_wait timeout
 *   (the one documented exception to "only cli prints": the job has to end on every rank and the
 *   reason must reach the user before MPI_Abort kills the processes).
 * - Groups: float collectives (gradients, parameters) run over the data-parallel group of the
 *   caller (the ranks with the same tp and pp coordinates); scalar collectives, byte broadcasts and
 *   consistency checks run over the whole world. With tp = pp = 1 both are the world.
 * - In place: passing the same pointer (or, for reduce-scatter / all-gather, the caller's own
 *   block of the full buffer) selects MPI_IN_PLACE, which the benchmark found fastest
 *   (docs/comm.md).
 * - Sizes: element counts are size_t but one call moves at most INT_MAX elements per block (MPI
 *   counts are int); larger calls are refused with ST_ERR_INPUT (split into buckets).
 * - Accounting: each call adds to c->stats the bytes this rank sends by the bandwidth-optimal
 *   (ring) formula for the collective, independent of the algorithm Open MPI picks, and the time
 *   spent blocked waiting for completion (exposed communication time). */
#ifndef ST_COMM_COMM_H
#define ST_COMM_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "core/collective.h"
#include "core/status.h"

/* CommKind (the kinds booked in CommStats), comm_kind_name, comm_kind_is_tp and comm_ring_bytes are
 * declared in core/collective.h, which plan shares. */

typedef enum { COMM_SUM, COMM_MAX } CommOp;

/* Cumulative counters; the trainer diffs two snapshots for a per-step record. */
typedef struct {
    uint64_t calls[COMM_NKIND]; /* collectives started */
    uint64_t bytes[COMM_NKIND]; /* bytes sent by this rank, ring formula (see comm_ring_bytes) */
    double wait_ms[COMM_NKIND]; /* wall time blocked in comm_wait / blocking calls, per kind */
    double wait_ms_total;       /* exposed communication time: sum of wait_ms */
    double test_ms;             /* wall time inside comm_test (progress work done while overlapping) */
    double test_ms_by_kind[COMM_NKIND]; /* test_ms split by the kind of the request tested */
    uint64_t test_done[COMM_NKIND]; /* requests whose completion comm_test observed (they completed
                                   while the caller overlapped them, before any comm_wait) */
    uint64_t tp_nonblocking;    /* tp collectives started by the comm_tp_i* forms (overlapped by the
                                   caller with computation; the blocking forms do not count) */
} CommStats;

typedef struct CommMpi CommMpi; /* private to comm.c: MPI handles */

typedef struct {
    int rank, world;              /* this process in MPI_COMM_WORLD (0, 1 without MPI) */
    int dp, tp, pp;               /* process grid, dp*tp*pp == world; default world × 1 × 1 */
    int dp_rank, tp_rank, pp_rank;/* coordinates: rank = (pp_rank*dp + dp_rank)*tp + tp_rank */
    int is_mpi;                   /* 1 when running under a launcher with MPI initialised */
    int thread_level;             /* MPI thread support provided (MPI_THREAD_* value; 0 without MPI) */
    double timeout_s;             /* blocking calls end the job after this many seconds; <= 0 = never.
                                     Default 600; the trainer sets it from --comm-timeout */
    long step;                    /* current optimizer step, named in timeout/error messages; the
                                     trainer sets it at the start of every step (default -1) */
    int abort_on_timeout;         /* 1 (default): a timeout prints and MPI_Aborts the job; 0: comm_wait
                                     returns ST_ERR_RUNTIME and the caller must call comm_abort */
    int rs_as_allreduce;          /* 1: an in-place reduce-scatter runs as an all-reduce of the whole
                                     buffer and keeps the own block (counts 2(p-1)/p·S bytes); 0
                                     (default): our ring of point-to-point messages (in place) or
                                     MPI_Ireduce_scatter_block (out of place). See docs/comm.md */
    int one_node;                 /* 1: every rank of the world shares one node (shared memory) */
    int node_ranks;               /* the ranks on this rank's node, itself included (0 or 1: alone) */
    int wait_yield;               /* 1: comm_wait yields the CPU after a few polls (this rank shares
                                     its core: ST_COMM_WAIT=auto|spin|yield, comm.c); 0: it spins
                                     10 ms first */
    int progress_thread;          /* 1 while comm's progress thread runs (comm.c; ST_COMM_PROGRESS=auto|on|off,
                                     auto = on when the ranks span nodes) */
    int test_ring_fault;          /* tests only: 1 = the ring reduce-scatter drops its last step's
                                     addition (a negative control for test_comm) */
    uint32_t ring_seq[2];         /* ring reduce-scatters started on the dp [0] and tp [1] groups (their
                                     message tags; the same on every rank of the group) */
    CommStats stats;              /* cumulative accounting */
    CommMpi *mpi;                 /* NULL in single-process mode */
} Comm;

/* A pending nonblocking collective. Caller-owned (e.g. one per gradient bucket, allocated once);
 * never copy an active one. Zero-initialised or completed requests are inactive: comm_test returns
 * 1 and comm_wait returns ST_OK at once. The buffers of an active request belong to MPI until it
 * completes: do not read or write them. */
typedef struct {
    uint64_t handle[2];   /* MPI_Request storage (opaque; comm.c checks it fits) */
    Comm *comm;
    CommKind kind;
    int active;           /* 1 from start until completion is observed */
    int mpi_rc;           /* first MPI error seen by comm_test (reported by comm_wait) */
    uint64_t bytes;       /* ring-formula bytes of this operation */
    double t_start_ms;    /* when it was started (timer_ms) */
    float *move_dst;      /* after completion, move move_n floats move_src -> move_dst (in-place */
    const float *move_src;/* reduce-scatter: MPI leaves the result at the start of the buffer) */
    size_t move_n;
    void *ring;           /* comm.c's state of a ring reduce-scatter in progress (NULL otherwise) */
} CommReq;

/* ---------------------------------------------------------------- lifecycle */

/* Creates *c. If a launcher is detected (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK/PMI_SIZE,
 * SLURM_STEP_NUM_TASKS with SLURM_PROCID, or ST_COMM=mpi) calls MPI_Init_thread(SERIALIZED) (unless
 * MPI is already initialised), sets MPI_ERRORS_RETURN and duplicates the world communicator;
 * otherwise single-process mode (ST_COMM=single forces it). argc/argv are passed to MPI (may be
 * NULL). Grid defaults to dp = world. Then the progress thread starts where ST_COMM_PROGRESS says
 * (auto, the default: when the ranks span more than one node; on; off); a value other than
 * auto|on|off is refused (ST_ERR_INPUT naming the variable), and `on` where MPI provides less than
 * MPI_THREAD_SERIALIZED too. On failure *c is NULL and err says why. */
Status comm_init(Comm **c, int *argc, char ***argv, Err *err);

/* Creates a single-process *c (world 1) whatever the environment: for library callers that run
 * one process of their own, e.g. a test under a launcher. */
Status comm_init_local(Comm **c, Err *err);

/* Frees the communicators and finalizes MPI if comm_init initialised it. Safe on NULL. Active
 * requests must have completed. */
void comm_finalize(Comm *c);

/* Sets the grid dp × tp × pp. Refuses (ST_ERR_INPUT, no allocation, c unchanged) any
 * product != world size, with the product and the world size in the message; values < 1 refused.
 * Splits the dp, tp and pp groups; collective over the world (every rank must call it with the same grid). */
Status comm_set_grid(Comm *c, int dp, int tp, int pp, Err *err);

/* Every rank checks that all ranks passed the same value (e.g. a config hash); a mismatch returns
 * ST_ERR_INPUT on every rank, naming each differing rank and value against rank 0's, e.g.
 * "config hash differs across ranks: rank 0 has 0x1234, rank 2 has 0xbad". Collective (world). */
Status comm_check_same_u64(Comm *c, uint64_t value, const char *what, Err *err);

/* Ends the job on every rank: prints "scaletrain: rank R: msg" once to stderr and calls MPI_Abort
 * (single-process mode: prints and _exit(code)). Never returns. For the trainer after a comm_wait
 * error when abort_on_timeout is 0, or when one rank fails and the others would wait forever. */
void comm_abort(Comm *c, int code, const char *msg) __attribute__((noreturn));

/* ---------------------------------------------------------------- float collectives (dp group)
 * Blocking forms wait with c->timeout_s and name c->step on timeout. Nonblocking forms (comm_i*)
 * start the collective into *req; progress it with comm_test and finish with comm_wait. */

/* recv[i] = sum over dp ranks of send[i], i < n. send == recv: in place (MPI_IN_PLACE). */
Status comm_allreduce_f32(Comm *c, const float *send, float *recv, size_t n, Err *err);
Status comm_iallreduce_f32(Comm *c, const float *send, float *recv, size_t n, CommReq *req, Err *err);

/* send holds dp blocks of `block` floats (rank-major); recv (block floats) gets the sum over ranks
 * of block dp_rank. In place: recv == send + dp_rank*block; then the other blocks of send are
 * undefined afterwards (MPI uses them; the ring leaves partial sums there, c->rs_as_allreduce the all-reduced sums). */
Status comm_reduce_scatter_f32(Comm *c, const float *send, float *recv, size_t block, Err *err);
Status comm_ireduce_scatter_f32(Comm *c, const float *send, float *recv, size_t block, CommReq *req, Err *err);

/* recv (dp*block floats) gets every rank's `send` block at offset rank*block.
 * In place: send == recv + dp_rank*block. */
Status comm_allgather_f32(Comm *c, const float *send, float *recv, size_t block, Err *err);
Status comm_iallgather_f32(Comm *c, const float *send, float *recv, size_t block, CommReq *req, Err *err);

/* One piece of an in-place reduce-scatter or all-gather of dp blocks split into pieces (ZeRO's
 * pieces of a segment; docs/parallel.md "Pieces"): the piece is the same n floats of every rank's
 * block, at buf + k·stride for dp rank k (buf points at the piece's part of block 0; stride is the
 * block size). Each rank's part stays inside its own block, so ownership and the ring's order are
 * those of the whole collective: a segment reduce-scattered in pieces is bit-identical to the
 * segment reduce-scattered at once. n == stride is the whole collective (comm_ireduce_scatter_f32 /
 * comm_iallgather_f32 in place).
 *   reduce-scatter: afterwards buf + dp_rank·stride holds the sum over ranks of the parts; the
 *     other parts are undefined. The ring (comm.c), over blocks `stride` apart; booked as the
 *     reduce-scatter of n·dp floats. A piece smaller than the block is the ring's only: refused
 *     (ST_ERR_INPUT) above COMM_RING_MAX_RANKS dp ranks and with c->rs_as_allreduce.
 *   all-gather: afterwards every rank's part holds that rank's values (MPI_Iallgather over a
 *     strided type); booked as the all-gather of n·dp floats.
 * Pieces of n·dp floats book exactly their share of the whole collective's ring bytes. */
Status comm_ireduce_scatter_piece_f32(Comm *c, float *buf, size_t stride, size_t n, CommReq *req, Err *err);
/* The same with the ring's receive block given: tmp (n floats) stays the caller's and must not be
 * touched until req completes; NULL allocates one per piece (as above). ZeRO's scheduler passes
 * slots of its own, counted in the run's memory (MEM_COMM), so its pieces in flight add no
 * untracked heap. */
Status comm_ireduce_scatter_piece_tmp_f32(Comm *c, float *buf, size_t stride, size_t n, float *tmp, CommReq *req,
                                          Err *err);
Status comm_iallgather_piece_f32(Comm *c, float *buf, size_t stride, size_t n, CommReq *req, Err *err);
/* buf (n floats) on every dp rank gets the values of dp rank `root`. */
Status comm_bcast_f32(Comm *c, float *buf, size_t n, int root, Err *err);
Status comm_ibcast_f32(Comm *c, float *buf, size_t n, int root, CommReq *req, Err *err);

/* ---------------------------------------------------------------- tensor-parallel collectives
 * Over the tp group (the tp consecutive world ranks with the same dp and pp coordinates), in
 * place, blocking or (comm_tp_i*) nonblocking. No-ops when tp == 1. Bytes
 * are booked under the COMM_TP_* kinds, so a step record splits dp from tp communication. */

/* buf (n floats) = the sum (or max) over the tp group. */
Status comm_tp_allreduce_f32(Comm *c, float *buf, size_t n, CommOp op, Err *err);
/* buf holds tp blocks of `block` floats; each rank's own block (at tp_rank·block) is sent to all. */
Status comm_tp_allgather_f32(Comm *c, float *buf, size_t block, Err *err);
/* buf holds tp blocks; afterwards the own block holds the sum over ranks of that block (the other
 * blocks are undefined). */
Status comm_tp_reduce_scatter_f32(Comm *c, float *buf, size_t block, Err *err);

/* Nonblocking forms of the three (issue 28: the model overlaps them with independent GEMMs):
 * start into *req, progress with comm_test, finish with comm_wait (which books the exposed wait
 * under the kind; comm_test's time goes to stats.test_ms_by_kind). Same semantics, bytes and
 * MPI calls as the blocking forms, one request each: counts above INT_MAX elements (the
 * all-reduce's n, the others' block) are refused with ST_ERR_INPUT. tp == 1 or no MPI: *req is left
 * inactive. Each start adds 1 to stats.tp_nonblocking. */
Status comm_tp_iallreduce_f32(Comm *c, float *buf, size_t n, CommOp op, CommReq *req, Err *err);
Status comm_tp_iallgather_f32(Comm *c, float *buf, size_t block, CommReq *req, Err *err);
Status comm_tp_ireduce_scatter_f32(Comm *c, float *buf, size_t block, CommReq *req, Err *err);

/* ---------------------------------------------------------------- pipeline point-to-point
 * Between stages of the pp group (the ranks with the same dp and tp coordinates, ordered by
 * pp_rank), nonblocking: start with these, progress with comm_test, finish with comm_wait. A send's
 * bytes are booked under COMM_PP_SEND; a receive books nothing (the sender did). `tag` tells apart
 * messages between the same two stages (e.g. activation vs gradient, micro-batch); a send and its
 * receive must use the same n and tag. Refused (ST_ERR_INPUT) for a peer outside 0..pp-1 or itself. */
Status comm_pp_isend_f32(Comm *c, const float *buf, size_t n, int to_pp_rank, int tag, CommReq *req, Err *err);
Status comm_pp_irecv_f32(Comm *c, float *buf, size_t n, int from_pp_rank, int tag, CommReq *req, Err *err);

/* ---------------------------------------------------------------- small collectives (world) */

/* In place over n values (token counts, norms, loss sums, flags). */
Status comm_allreduce_f64(Comm *c, double *buf, int n, CommOp op, Err *err);
Status comm_iallreduce_f64(Comm *c, double *buf, int n, CommOp op, CommReq *req, Err *err);
Status comm_allreduce_i64(Comm *c, int64_t *buf, int n, CommOp op, Err *err);
Status comm_iallreduce_i64(Comm *c, int64_t *buf, int n, CommOp op, CommReq *req, Err *err);

/* all[r] = value of world rank r (all has world entries): per-rank step times for max/median. */
Status comm_allgather_f64(Comm *c, double value, double *all, Err *err);

/* buf (n bytes) on every rank gets world rank root's bytes (config text, paths, RNG state). */
Status comm_bcast_bytes(Comm *c, void *buf, size_t n, int root, Err *err);

/* Gathers a variable number of bytes from every rank to world rank 0 (the manifest entries of a
 * sharded checkpoint): rank r sends send[0..n); on rank 0 *all receives a malloc'ed buffer (caller
 * frees) holding rank 0's bytes, then rank 1's, ..., and lens[r] (world entries) each rank's count;
 * on other ranks *all is NULL and lens is untouched (may be NULL). At most INT_MAX bytes in all. */
Status comm_gather_bytes(Comm *c, const void *send, size_t n, void **all, size_t *lens, Err *err);

Status comm_barrier(Comm *c, Err *err);

/* ---------------------------------------------------------------- requests */

/* Progresses outstanding collectives (one MPI_Test: Open MPI progresses all pending nonblocking
 * collectives of the process, not only this one, and only inside MPI calls) and returns 1 if req is
 * complete or inactive, 0 if still pending. Never fails: an MPI error is kept in req and returned
 * by comm_wait. Cheap enough to call between blocks of the backward pass. */
int comm_test(CommReq *req);

/* Polls req until complete, adding the time to stats.wait_ms. After timeout_s seconds (<= 0: no
 * limit) sets err to "collective <what> (<kind>) at step <step> did not complete within <t> s on
 * rank R of W" and, if req->comm->abort_on_timeout, prints it once to stderr and MPI_Aborts the job
 * on every rank (does not return); otherwise returns ST_ERR_RUNTIME with req still active.
 * An MPI error returns ST_ERR_RUNTIME naming the collective. */
Status comm_wait(CommReq *req, double timeout_s, const char *what, long step, Err *err);

/* comm_wait on each of n requests in order (inactive ones are skipped). */
Status comm_wait_all(CommReq *reqs, int n, double timeout_s, const char *what, long step, Err *err);

/* ---------------------------------------------------------------- accounting */

/* The kinds, their names and the ring formula: core/collective.h. */

/* One-line description of the grid and mode for the start record, e.g.
 * "mpi world=4 dp=4 tp=1 pp=1 thread=serialized (Open MPI v4.1.4)", with ", progress thread" after
 * the thread level while it runs. */
void comm_describe(const Comm *c, char *buf, size_t cap);

/* 1 when MPI runs and gave MPI_THREAD_SERIALIZED or more: a second thread may call comm's functions
 * while the first calls none (tp's progress beside a multi-threaded GEMM, model/gpt.c). */
int comm_serialized(const Comm *c);

/* Progress calls comm's progress thread has made so far (0 without it): the thread polls only
 * while a nonblocking request is pending. */
uint64_t comm_progress_polls(const Comm *c);

#endif
