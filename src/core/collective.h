/* collective.h — the vocabulary of a run's collectives and their cost by the ring formula: pure
 * data and arithmetic, no MPI. comm books every call it makes with comm_ring_bytes (its per-kind
 * statistics); plan predicts a step's traffic with the same function, so the trainer's record and
 * the plan cannot drift apart (one source; plan links core and model only, never comm). The names
 * keep their comm_ prefix: they are comm's accounting, declared here so that plan can share them. */
#ifndef ST_CORE_COLLECTIVE_H
#define ST_CORE_COLLECTIVE_H

#include <stdint.h>

typedef enum {
    COMM_ALLREDUCE,      /* float sum over the dp group */
    COMM_REDUCE_SCATTER, /* float sum, equal blocks, over the dp group */
    COMM_ALLGATHER,      /* float, equal blocks, over the dp group */
    COMM_BCAST,          /* float (dp group) or bytes (world) */
    COMM_SCALAR,         /* small double / int64 all-reduces, all-gathers and checks (world) */
    COMM_TP_ALLREDUCE,   /* float sum or max over the tp group (tensor parallelism) */
    COMM_TP_ALLGATHER,   /* float, equal blocks, over the tp group (sequence parallelism) */
    COMM_TP_REDUCE_SCATTER, /* float sum, equal blocks, over the tp group (sequence parallelism) */
    COMM_PP_SEND,        /* float point-to-point to another pipeline stage (sends only are booked) */
    COMM_NKIND
} CommKind;

const char *comm_kind_name(CommKind k); /* "all-reduce", "reduce-scatter", ... */
int comm_kind_is_tp(CommKind k);        /* 1 for the tensor-parallel kinds (a step's tp part) */

/* Bytes one rank sends for a collective of `bytes` total payload over p ranks by the ring formula:
 * all-reduce 2(p-1)/p·S, reduce-scatter and all-gather (p-1)/p·S (S = the full, all-blocks size),
 * broadcast S (pipelined chain), 0 when p == 1. */
uint64_t comm_ring_bytes(CommKind k, uint64_t bytes, int p);

/* The most ranks comm's ring reduce-scatter runs on (its message tags); a larger dp group takes
 * MPI_Ireduce_scatter_block, and ZeRO's collectives are then not split into pieces. */
#define COMM_RING_MAX_RANKS 128

#endif
