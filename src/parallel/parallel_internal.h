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

/* Stage 0/1: the collectives on the full gradient buffer (and stage 1–2's parameter all-gather). */
typedef struct {
    CommReq *req;             /* stage 0: all-reduce buckets of <= bucket_floats; else one per segment */
    int nreq;
    int *seg_req0, *seg_nreq; /* segment s's requests: req[seg_req0[s]] .. + seg_nreq[s] */
    int *started;             /* segment s's gradient collective started this step */
    /* Stage 0: the buckets whose gradients are ready wait in this queue (request indices, in the
     * order the backward finished them) and at most ZERO_BUCKETS_IN_FLIGHT all-reduces run at
     * once, so the MPI library's temporaries stay bounded (one per request in flight). */
    int *queue, qhead, qtail;
    size_t *req_off, *req_n;  /* request i's range of the gradient buffer */
} ZeroBuckets;

/* Stage 0's all-reduce buckets in flight at once (each up to bucket_floats; default 4 MiB). */
#define ZERO_BUCKETS_IN_FLIGHT 2

/* Stage 2/3 gradients: the shard, the embedding bucket, two bucket slots for the other segments. */
typedef struct {
    float *shard, *b0, *buf[2];
    int slot_seg[2], slot_pending[2], next, b0_pending;
    CommReq slot_req[2], b0_req;
    int *seg_slot; /* slot holding segment s's gradients during its backward */
} ZeroGrads;

/* Stage 3 parameters: the shard, the embedding gather buffer, two gather slots. Mixed precision:
 * each gathered buffer also has its 2-byte working copy (lb0, lbuf), rounded once per gather. */
typedef struct {
    float *shard, *b0, *buf[2];
    int slot_seg[2], b0_valid;
    CommReq slot_req[2], b0_req;
    uint16_t *lb0, *lbuf[2];
    int lslot_ok[2], lb0_ok;
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

/* A device backend under dp > 1 (dev_stage.c): each dp collective runs on a host slot that the
 * device range is copied into (to_host) and its result copied back from (from_host). */
#define DEV_STAGE_SLOTS 2 /* = ZERO_BUCKETS_IN_FLIGHT; the slot not just taken is the older one */
enum { STAGE_ALLREDUCE, STAGE_REDUCE_SCATTER, STAGE_PARAMS };
typedef struct {
    int on;                                /* a device and dp > 1 */
    float *slot[DEV_STAGE_SLOTS];          /* host memory (MEM_COMM), slot_floats each */
    size_t slot_floats;
    int req[DEV_STAGE_SLOTS];              /* the ZeroBuckets request slot a's collective runs in; -1: free */
    int kind[DEV_STAGE_SLOTS], oldest;     /* STAGE_*; the slot taken first of those in use */
    const char *what[DEV_STAGE_SLOTS];     /* the collective's name for comm_wait's timeout message */
    float *back_dev[DEV_STAGE_SLOTS];      /* where the result goes on the device ... */
    size_t back_off[DEV_STAGE_SLOTS], back_n[DEV_STAGE_SLOTS]; /* ... from slot + back_off, back_n floats */
    float *hb0, *hbuf[2];                  /* ZeRO 2: host twins of ZeroGrads' b0 and buf[2] (MEM_COMM) */
    float *hp0, *hpbuf[2];                 /* ZeRO 3: host twins of ZeroParams' b0 and buf[2] (MEM_COMM) */
    int gather_seg[3];                     /* the segment gathered on twin 0 (hp0), 1, 2 not yet copied back; -1 */
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
Status zero_params_sync(Par *p, Err *err);
/* The reduced gradients the optimizer reads: the shard (stage >= 2) or the full buffer. */
float *zero_grads(Par *p);
/* The fp32 parameters the optimizer writes: the shard (stage 3) or the full buffer. */
float *zero_params(Par *p);
/* This rank's owned block of segment s's reduced gradient. */
const float *zero_owned_grad(const Par *p, int s);

/* ---- dev_stage.c (a device backend, dp > 1; ZeroBuckets' requests carry the collectives) ---- */
/* Allocates the host slots when p->dev and dp > 1 (sets DevStage.on). 0 when out of memory. */
int stage_init(Par *p);
void stage_free(Par *p);
/* ZeRO 0: stage-0 request i (a bucket of the gradient buffer) all-reduced on a host slot. */
Status stage_allreduce(Par *p, int i, Err *err);
/* ZeRO 1: segment s's gradients reduce-scattered on a host slot; its owned block goes back. */
Status stage_reduce_scatter(Par *p, int s, Err *err);
/* ZeRO 1: segment s's parameters all-gathered from every rank's owned block on a host slot. */
Status stage_allgather_params(Par *p, int s, Err *err);
/* Copies back the results of the complete collectives (wait: of every one, waiting for them). */
Status stage_reap(Par *p, int wait, Err *err);
/* ZeRO 2: a device bucket (ZeroGrads' b0 or buf[a]) holding segment s copied to its host twin, whose
 * reduce-scatter starts into req; once req is complete, _finish adds the reduced owned block into the
 * device's gradient shard (through the bucket's own block). */
Status stage_bucket_rs_start(Par *p, float *bucket, int s, CommReq *req, Err *err);
void stage_bucket_rs_finish(Par *p, float *bucket, int s);
/* ZeRO 3: segment s gathered into a device gather buffer (ZeroParams' b0 or buf[a]): this rank's
 * block of the device shard copied to the buffer's host twin, all-gathered there into req; once req
 * is complete, _finish copies the segment into the buffer (once per gather). */
Status stage_gather_start(Par *p, int s, float *buf, CommReq *req, Err *err);
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
