/* collective.c — names of the collective kinds and the ring formula (collective.h). */
#include "core/collective.h"

static const char *kind_names[COMM_NKIND] = {"all-reduce", "reduce-scatter", "all-gather", "broadcast",
                                             "scalar collective", "tp all-reduce", "tp all-gather",
                                             "tp reduce-scatter", "pp send"};

const char *comm_kind_name(CommKind k) { return (unsigned)k < COMM_NKIND ? kind_names[k] : "?"; }

int comm_kind_is_tp(CommKind k) { return k == COMM_TP_ALLREDUCE || k == COMM_TP_ALLGATHER || k == COMM_TP_REDUCE_SCATTER; }

uint64_t comm_ring_bytes(CommKind k, uint64_t bytes, int p) {
    if (p <= 1) return 0;
    switch (k) {
    case COMM_ALLREDUCE:
    case COMM_TP_ALLREDUCE:
    case COMM_SCALAR: return 2 * bytes * (uint64_t)(p - 1) / (uint64_t)p;
    case COMM_REDUCE_SCATTER:
    case COMM_TP_REDUCE_SCATTER:
    case COMM_TP_ALLGATHER:
    case COMM_ALLGATHER: return bytes * (uint64_t)(p - 1) / (uint64_t)p;
    case COMM_BCAST:
    case COMM_PP_SEND: return bytes;
    default: return 0;
    }
}
