/* parallel_internal.h — the Par state shared by the files of src/parallel (not for other modules).
 *
 * One sub-struct per mechanism, each owned (allocated, used, freed) by one file:
 *   parallel.c  the composition: the segment bookkeeping below, moments, the optimizer's pieces,
 *               the norm partition, the step's position (ParStep), par_init / par_free and the
 *               public step functions, which call into the parts
 *   zero.c      ZeRO 0–3: ZeroBuckets (stage 0/1), ZeroGrads (stage 2/3), ZeroParams (stage 3),
 *               the dp hooks (before_forward, before_backward, grads_ready), state in and out
 *   tp.c        the tp_* hooks, the pieces the norm counts on another rank (ParNorm.twice), and
 *               whole tensors from every rank's slices (par_full_tensors)
 *   pp_tied.c   the pipeline's tied-embedding gradient exchange (ParTied)
 *   dev_stage.c a device backend's dp collectives staged through host memory (DevStage)
 *   matopt.c    Muon's, Shampoo's and Sophia's sharded steps (ParMatopt)
 * Segment s is 0 (embeddings), 1..L (blocks) or L+1 (final norm); "block" of a segment means
 * the dp rank's owned part of it (parallel.h, "Ownership"). */
#ifndef ST_PARALLEL_PARALLEL_INTERNAL_H
#define ST_PARALLEL_PARALLEL_INTERNAL_H

#include "model/backend.h"
#include "parallel/parallel.h"

#define NORM_CHUNK 4096 /* fixed partition of the norm's partial sums (thread-count independent) */

/* One tensor intersected with this rank's owned block of its segment (stage >= 1). */
typedef struct {
    size_t p_off, g_off, m_off, n; /* offsets from the param / grad / moment bases of the piece */
    int decay;
    float lr_mult;  /* its tensor's (muP) */
    size_t flat;    /* flat offset of its first element (the Muon gather buffer's coordinates) */
    float mx_scale; /* Muon's shape scale of its tensor's matrices; 0: a flat (AdamW) range */
} Piece;

/* One of ZeRO's collectives split into pieces, each its own request (docs/parallel.md "Pieces"):
 *   ZC_ALLREDUCE       stage 0: a segment's gradient range; piece i is the contiguous floats
 *                      [i·piece, (i+1)·piece) of it (the buckets of bucket_floats)
 *   ZC_REDUCE_SCATTER  stage 1-3: a segment's dp blocks of `block` floats, in place; piece i is the
 *   ZC_ALLGATHER       floats [i·piece, (i+1)·piece) of every rank's block (comm's *_piece_f32), so
 *                      each rank's part stays in its own block and the ring's summation order is
 *                      the whole segment's: the pieces' result is bit-identical to the unsplit one
 * Its pieces start in order through the scheduler (ZeroSched). */
typedef enum { ZC_ALLREDUCE, ZC_REDUCE_SCATTER, ZC_ALLGATHER } ZcKind;
typedef struct {
    CommReq *req;     /* nmax pieces */
    long *seq;        /* nmax: when each started piece started (ZeroSched.nstarted then) */
    int nmax, n;      /* allocated; pieces of the current collective */
    int started;      /* pieces started (the next one to start) */
    int queued;       /* in the scheduler's queue (some pieces not started yet) */
    int hold;         /* test fault (Faults.gather_late): this piece is started neither by the queue
                         nor by zc_wait but after the forward that should have waited it; -1: none */
    int staged;       /* a device: each piece runs on one of dev_stage.c's host slots */
    ZcKind kind;
    float *buf;       /* all-reduce: the range; otherwise block 0 of the segment's dp blocks */
    size_t block;     /* floats from one rank's block to the next (reduce-scatter, all-gather) */
    size_t span;      /* floats the pieces cover: all-reduce the range, otherwise one block */
    size_t piece;     /* floats of a piece (all-reduce) or of each rank's part of a piece */
    const char *what; /* named in a timeout */
} ZColl;

/* Piece i of z: its offset from z->buf (in each rank's block for a reduce-scatter or all-gather)
 * and its floats (per rank). */
static inline void zc_piece(const ZColl *z, int i, size_t *off, size_t *n) {
    *off = (size_t)i * z->piece;
    *n = z->span - *off < z->piece ? z->span - *off : z->piece;
}

/* Pieces in flight at once over all of ZeRO's collectives, counting the reductions (the MPI
 * library's and the ring's temporaries stay bounded, one per piece) and on a device every staged
 * piece (each holds one of DEV_STAGE_SLOTS host slots). Host all-gathers, in place, need nothing
 * and are not counted, so a step's parameter gathers all start within the step.
 * - ZERO_IN_FLIGHT: stage 0's bucket all-reduces (MPI's; 2 x 4 MiB kept ZeRO 0's RSS within 1% of
 *   its allocation, docs/parallel.md).
 * - ZERO_RS_IN_FLIGHT: the ring reduce-scatter pieces of stages 1-3 (a receive block of a rank's
 *   part, 4 MiB / dp, each, in slots counted as MEM_COMM: ZeroSched.rs_tmp). Over TCP each large
 *   message waits for its receiver's clear-to-send, which travels behind the bulk data the
 *   receiver sends the other way (one byte stream per pair): with
 *   2 pieces in flight the link idled during those handshakes and ZeRO 1's reduce-scatter ran at
 *   0.5-0.7 of the link's rate across 1 Gb/s; with 8 at 0.9-1.0, as the uncounted all-gathers do
 *   (bench/results/netsim.md). */
#define ZERO_IN_FLIGHT 2
#define ZERO_RS_IN_FLIGHT LAYOUT_RS_IN_FLIGHT /* 8 (model/layout.h: plan counts their slots) */

/* The scheduler: every collective in the order it was queued (the same on every rank, so the
 * pieces start in one order everywhere, as MPI and the ring's tags require). */
typedef struct {
    ZColl **all;  /* every ZColl of this Par (progress, waits) */
    int nall;
    ZColl **fifo; /* ring of the queued collectives, nall entries */
    int head, count;
    long nstarted; /* pieces started so far (their start order, ZColl.seq) */
    /* The ring reduce-scatter pieces' receive blocks (host, comm's ring, not staged): one slot per
     * piece in flight, rs_tmp_floats each (the largest piece), MEM_COMM; a slot is free once the
     * piece that held it (rs_tmp_req) is complete. NULL slots: comm allocates per piece. */
    float *rs_tmp[ZERO_RS_IN_FLIGHT];
    size_t rs_tmp_floats;
    const CommReq *rs_tmp_req[ZERO_RS_IN_FLIGHT];
} ZeroSched;

/* Stages 0-2 on the full buffers. */
typedef struct {
    ZColl *grad;   /* per segment: stage 0 its all-reduce (buckets of bucket_floats), stage 1 its
                      in-place reduce-scatter, started on the last micro-batch */
    ZColl *param;  /* per segment: stage 1-2 the parameter all-gather after the update, waited in
                      that segment's before_forward (overlap) or at once (--no-overlap, a device) */
    int *started;  /* segment s's gradient collective started this step */
    int *lp_stale; /* mixed precision, stage 1-2: segment s's working copy awaits its gather */
} ZeroBuckets;

/* Stage 2/3 gradients: the shard, the embedding bucket, two bucket slots for the other segments. */
typedef struct {
    float *shard, *b0, *buf[2];
    int slot_seg[2], slot_pending[2], next, b0_pending;
    ZColl slot_rs[2], b0_rs;
    int *seg_slot; /* slot holding segment s's gradients during its backward */
} ZeroGrads;

/* Stage 3 parameters: the shard, the embedding gather buffer, two gather slots. Mixed precision:
 * each gathered buffer also has its 2-byte working copy (lb0, lbuf), rounded once per gather. */
typedef struct {
    float *shard, *b0, *buf[2];
    int slot_seg[2], b0_valid;
    ZColl slot_ag[2], b0_ag;
    uint16_t *lb0, *lbuf[2];
    int lslot_ok[2], lb0_ok;
    long ahead;    /* gathers started before the hook that needs them (the two-slot prefetch; none
                      under --no-overlap): par_zero_gathers_ahead, the step record's */
} ZeroParams;

/* The global norm's fixed partition of the owned slices, and the pieces counted elsewhere. */
typedef struct {
    size_t *chunk_seg, *chunk_start; /* chunk ci: segment, start in the owned block */
    double *partials;
    size_t nchunks;
    /* Pieces another rank counts, subtracted from this rank's sum (tp.c): tensors every tp rank
     * holds whole (LayerNorms, wpe, row-parallel biases) count on tp rank 0; a tied wte on the
     * pipeline's embedding stage. (segment, start, end) in the owned block's coordinates. */
    size_t (*twice)[3];
    int ntwice;
} ParNorm;

/* Muon (ParOptions.muon) and Shampoo (ParOptions.shampoo); docs/optimizers.md. */
typedef struct {
    /* Muon: the hidden matrices, their owner ranks. */
    LayoutMatrix *mx;
    int nmx, *owner;
    CommReq *req;    /* one broadcast per matrix */
    float *scale_t;  /* per tensor: Muon's shape scale (Shampoo: 1), 0 for the flat ranges */
    /* One MEM_MOMENTS allocation (layout_muon_bytes or layout_shampoo_bytes): the gather buffer
     * (segments 1..L, flat coordinates from off[1]), Shampoo's owned block state, the scratch. */
    float *buf;
    void *scratch;
    size_t bytes;
    /* Shampoo: the blocks and their owners. */
    LayoutBlock *sb;
    int nsb;
    float **sh_state; /* per block: its state (L, R, P_L, P_R, D) when owned here, else NULL */
    int reset;        /* Faults.matrix_reset, until the first update takes it */
} ParMatopt;

/* Pipeline: a rank holding wte at one end of a pp > 1 pipeline sums its wte gradient with the other
 * end's (the tied embedding and head) before the dp reduction, through buf. */
typedef struct {
    int on, peer;
    float *buf;    /* MEM_COMM, `floats` of them */
    size_t floats; /* chunk of the exchange (<= bucket_floats) */
} ParTied;

/* Tensor parallelism's nonblocking collectives (tp.c): the model's tp_start / tp_wait handles are
 * indices into req. At most two are in flight (a gather and a sum, or two row chunks' sums, docs/parallel.md "Overlap"). */
#define PAR_TP_REQS 4
typedef struct {
    CommReq req[PAR_TP_REQS];
    int busy[PAR_TP_REQS];    /* started and not yet waited */
    int deferred[PAR_TP_REQS];/* Faults.tp_nowait: waited late, at the next tp hook */
    int fwd_sum[PAR_TP_REQS]; /* a sum started in the forward (Faults.tp_nowait_fwd defers its wait) */
} ParTp;

/* A device backend under dp > 1 (dev_stage.c): each staged piece of a dp collective runs on a host
 * slot that the device range is copied into (to_host) and its result copied back from (from_host). */
#define DEV_STAGE_SLOTS 2 /* the scheduler's cap on a device: a slot is free when a piece starts */
typedef struct {
    int on;                            /* a device and dp > 1 (or ZeRO >= 1) */
    float *slot[DEV_STAGE_SLOTS];      /* host memory (MEM_COMM), slot_floats each */
    size_t slot_floats;
    const ZColl *z[DEV_STAGE_SLOTS];   /* the collective whose piece holds slot a; NULL: free */
    int piece[DEV_STAGE_SLOTS];        /* which piece */
    int oldest;                        /* the slot taken first of those in use */
    float *hb0, *hbuf[2];              /* ZeRO 2: host twins of ZeroGrads' b0 and buf[2] (MEM_COMM) */
    float *hp0, *hpbuf[2];             /* ZeRO 3: host twins of ZeroParams' b0 and buf[2] (MEM_COMM) */
    int gather_seg[3];                 /* the segment gathered on twin 0 (hp0), 1, 2 not yet copied back; -1 */
} DevStage;

/* Where the step is. */
typedef struct {
    int k, j, last, in_step; /* micro-batches, the current one, it is the last, inside a step */
    int in_bwd;              /* between the backward's first hook and the next forward */
    double noise_sumsq;      /* ParOptions.noise: this step's first micro-batch, summed per segment */
} ParStep;

struct Par {
    Comm *c;
    Gpt *g;
    ParOptions o;
    MemStats *mem;
    const ParamLayout *pl;
    const Backend *dev;             /* a backend that is not host-addressable (one process, ZeRO 0), else NULL:
                                       moments in its memory, norm and update through its table */
    int dp, r, zero, nseg, L;
    size_t *off, *len, *blk, *soff; /* per segment: flat offset, length, block = len/dp, shard offset */
    size_t S, E, X;                 /* shard floats, embedding segment floats, largest other segment */

    float *m, *v;        /* moments: full layout (stage 0) or shard order */
    size_t mom_floats;
    Piece *pieces;       /* optimizer pieces of the owned range (stage >= 1) */
    int npieces;
    OptimRange *ranges;  /* stage 0: every tensor of the flat rule (the matrix optimizer's left out) */
    int nranges;

    ZeroSched zs;
    ZeroBuckets zb;
    ZeroGrads zg;
    ZeroParams zp;
    ParNorm norm;
    ParMatopt mo;
    ParTied tied;
    ParTp tp;
    DevStage stage;
    ParStep st;

    void (*progress_fn)(void *);
    void *progress_ctx;
    Status hook_st;
    Err hook_err;
};

/* ---- parallel.c: shared helpers ---- */
/* Keeps the first error a hook met (hooks cannot return one) for par_grads_finish. */
void par_hook_fail(Par *p, Status st, const Err *e);
/* dst[i] += src[i], n elements, nt threads. */
void par_add_into(float *dst, const float *src, size_t n, int nt);
/* n floats of category c from p->mem (NULL for n = 0); *ok = 0 when out of memory. */
float *par_alloc_f(Par *p, MemCategory c, size_t n, int *ok);

/* ---- zero.c ---- */
/* Allocates the requests and the stage 2/3 buffers. 0 when out of memory. */
int zero_init(Par *p);
void zero_free(Par *p);
void zero_set_hooks(Par *p); /* before_forward, before_backward, grads_ready */
void zero_step_begin(Par *p);
/* Starts the segments the hooks did not start, waits for every gradient collective. */
Status zero_grads_finish(Par *p, Err *err);
/* Stage 1-2: starts the parameter all-gathers in forward order (waited in before_forward; here with
 * --no-overlap and on a device); stage 3: invalidates the gathered copies. */
Status zero_params_sync(Par *p, Err *err);
/* Waits for every pending parameter all-gather (and rounds the working copies): before anything
 * outside a forward reads or writes the full parameters. */
Status zero_params_wait(Par *p, Err *err);
/* The reduced gradients the optimizer reads: the shard (stage >= 2) or the full buffer. */
float *zero_grads(Par *p);
/* The fp32 parameters the optimizer writes: the shard (stage 3) or the full buffer. */
float *zero_params(Par *p);
/* This rank's owned block of segment s's reduced gradient. */
const float *zero_owned_grad(const Par *p, int s);

/* ---- dev_stage.c (a device backend, dp > 1; zero.c's ZColl pieces carry the collectives) ---- */
/* Allocates the host slots when p->dev and dp > 1 (sets DevStage.on). 0 when out of memory. */
int stage_init(Par *p);
void stage_free(Par *p);
/* Piece i of the staged collective z (ZeRO 0-1 gradients, ZeRO 1-2 parameters, on the device's
 * buffers): takes a host slot (reaping finished ones, else waiting for the oldest), copies the
 * piece's device ranges into it packed (rank k's part at k·n) and starts the whole collective of the
 * packed slot into z->req[i]; the result goes back when the piece is reaped. */
Status stage_piece_start(Par *p, const ZColl *z, int i, Err *err);
/* Copies back the results of the complete pieces (wait: of every one, waiting for them). */
Status stage_reap(Par *p, int wait, Err *err);
/* ZeRO 2: a device bucket (ZeroGrads' b0 or buf[a]) holding segment s copied to its host twin, which
 * is returned for the reduce-scatter's pieces; once they are complete, _finish adds the reduced
 * owned block into the device's gradient shard (through the bucket's own block). */
float *stage_bucket_rs_host(Par *p, float *bucket, int s);
void stage_bucket_rs_finish(Par *p, float *bucket, int s);
/* ZeRO 3: segment s to be gathered into a device gather buffer (ZeroParams' b0 or buf[a]): this
 * rank's block of the device shard copied to the buffer's host twin, which is returned for the
 * all-gather's pieces; once they are complete, _finish copies the segment into the buffer (once per
 * gather). */
float *stage_gather_host(Par *p, int s, float *buf);
void stage_gather_finish(Par *p, float *buf);

/* ---- tp.c ---- */
void tp_set_hooks(Par *p); /* tp_allreduce, tp_allgather, tp_reduce_scatter, tp_start, tp_wait, tp_progress */
/* Completes the tp requests still open (Faults.tp_nowait's deferred waits) before the step ends. */
Status tp_finish(Par *p, Err *err);
/* Fills ParNorm.twice. 0 when out of memory. */
int tp_norm_init(Par *p);
/* local less the sum of squares of each piece in ParNorm.twice, subtracted piece by piece. */
double tp_norm_subtract(Par *p, double local);

/* ---- pp_tied.c ---- */
/* Sets ParTied for a rank holding one end of a tied wte in a pipeline. 0 when out of memory. */
int tied_init(Par *p);
void tied_free(Par *p);
Status tied_exchange(Par *p, Err *err);

/* ---- matopt.c ---- */
/* Builds Muon's or Shampoo's state (ParOptions.muon / .shampoo). ST_ERR_INPUT with err set for a
 * grid or option they cannot run on; ST_ERR_RUNTIME, err not set, when out of memory. */
Status matopt_init(Par *p, Err *err);
void matopt_free(Par *p);
/* Sophia's test fault (Faults.matrix_reset): its Hessian EMA zeroed before the first update. */
void matopt_sophia_reset(Par *p, const OptimConfig *oc);
/* The matrix optimizer's part of par_optim_step (none: ST_OK). */
Status matopt_step(Par *p, const OptimConfig *oc, long step, float matrix_lr, float lr, float gs, Err *err);

#endif
