/* heap_comm_stress.c — the trainer's dp communication pattern, alone, under a checking malloc.
 *
 * A tool for the rare glibc heap corruption of 2-rank dp runs (docs/debugging.md): it repeats what
 * ZeRO 0 and 1 do each step, without the model, thousands of times a second, so that a fault of the
 * comm layer or of Open MPI's nonblocking collectives shows up in seconds instead of once in 30
 * training runs. Each iteration, on every rank:
 *   - a gradient buffer of L1 buckets gets rank-dependent values (exact in fp32), and its buckets
 *     are all-reduced in place with comm_iallreduce_f32, at most 2 in flight (ZERO_BUCKETS_IN_FLIGHT),
 *     or reduce-scattered in place with the ring (comm_ireduce_scatter_f32, ZeRO 1) on odd
 *     iterations;
 *   - while they are in flight, malloc/free churn of the sizes oneDNN's GEMM packing buffers have
 *     (64 KiB - 8 MiB, written whole), and comm_test progress between allocations;
 *   - the results are compared with their closed form (every element, maxdiff 0), and a scalar
 *     all-reduce agrees on the verdict.
 * Run it with glibc's checking malloc (scripts/heapcheck.sh --comm does): a corrupted chunk aborts
 * at the next free that touches it. Exit 0: all iterations exact and no abort.
 * Test-only faults: --fault-free-early frees a receive block while its collective is in flight
 * (the pattern suspected; it must crash); --fault-overflow writes one byte past a block and frees
 * it, which the checking malloc must abort (heapcheck.sh runs it first: without the preload in
 * effect the check would be off without a word).
 *
 * usage: mpirun -np 2 heap_comm_stress [ITERATIONS] [--fault-free-early | --fault-overflow] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"

#define NBUCKET 6
#define BUCKET (1u << 18) /* floats per bucket: 1 MiB */

/* Element i's value at iteration it on rank 0 (rank r holds (r+1) times it): multiples of 1/4, exact sums. */
static float val(size_t i, int it) { return (float)((i + (size_t)it) % 13 + 1) * 0.25f; }

/* Allocation churn between progress calls: sizes of GEMM packing buffers, each written whole. */
static void churn(CommReq *reqs, int n, uint64_t *seed) {
    void *held[8] = {0};
    for (int k = 0; k < 8; k++) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        size_t sz = (size_t)(64u << 10) << ((*seed >> 33) % 8); /* 64 KiB .. 8 MiB */
        held[k] = malloc(sz);
        if (held[k]) memset(held[k], (int)k, sz);
        for (int i = 0; i < n; i++) comm_test(&reqs[i]);
        if (k % 3 == 2) free(held[k - 1]), held[k - 1] = NULL;
    }
    for (int k = 0; k < 8; k++) free(held[k]);
}

int main(int argc, char **argv) {
    Comm *c = NULL;
    Err err = {0};
    if (comm_init(&c, &argc, &argv, &err) != ST_OK) {
        fprintf(stderr, "heap_comm_stress: %s\n", err.msg);
        return 1;
    }
    long iters = argc > 1 && argv[1][0] != '-' ? atol(argv[1]) : 200;
    int fault = 0;
    for (int i = 1; i < argc; i++) fault |= !strcmp(argv[i], "--fault-free-early");
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--fault-overflow")) {
            /* The checking malloc's own control: one byte past a block, then free. glibc's checking
             * malloc aborts here at any size; plain glibc only for some (4104 bytes: 'corrupted
             * size vs. prev_size', 4096: nothing). Reaching the line below means no check ran. */
            size_t n = 4096;
            /* A size the compiler cannot see and a barrier: gcc -O2 otherwise drops the overflowing
             * memset of a block that is freed unread (measured), and the control would test nothing. */
            volatile size_t extra = 1;
            char *a = malloc(n), *b = malloc(n);
            if (a) memset(a, 1, n + extra);
            __asm__ volatile("" : : "r"(a), "r"(b) : "memory");
            free(a), free(b);
            fprintf(stderr, "heap_comm_stress: a 1-byte overflow went unnoticed: the checking malloc is not active\n");
            comm_finalize(c);
            return 3;
        }
    int p = c->world, r = c->rank;
    if (p < 2) {
        fprintf(stderr, "heap_comm_stress: expected mpirun -np 2 or more, found a world of %d\n", p);
        comm_finalize(c);
        return 2;
    }
    size_t n = (size_t)NBUCKET * BUCKET;
    float *g = malloc(n * sizeof(float));
    CommReq reqs[NBUCKET];
    memset(reqs, 0, sizeof reqs);
    uint64_t seed = 12345 + (uint64_t)r;
    long bad = 0;
    float tri = (float)(p * (p + 1) / 2); /* Σ over ranks of (r+1) */
    for (long it = 0; it < iters && g; it++) {
        int ring = it % 2 == 1;
        for (size_t i = 0; i < n; i++) g[i] = val(i, (int)it) * (float)(r + 1);
        CommReq early = {0};
        if (fault && it == iters / 2) { /* a receive buffer freed while its collective runs */
            float *probe = malloc(BUCKET * sizeof(float));
            for (size_t i = 0; i < BUCKET; i++) probe[i] = val(i, (int)it) * (float)(r + 1);
            if (comm_iallreduce_f32(c, probe, probe, BUCKET, &early, &err) != ST_OK) comm_abort(c, 1, err.msg);
            free(probe);
        }
        /* the buckets in order, at most 2 in flight, churn between progress calls */
        for (int next = 0; next < NBUCKET;) {
            int active = 0;
            for (int b = 0; b < NBUCKET; b++) active += reqs[b].active && !comm_test(&reqs[b]);
            for (; active < 2 && next < NBUCKET; next++, active++) {
                float *b = g + (size_t)next * BUCKET;
                Status st = ring ? comm_ireduce_scatter_f32(c, b, b + (size_t)r * (BUCKET / p), BUCKET / p, &reqs[next], &err)
                                 : comm_iallreduce_f32(c, b, b, BUCKET, &reqs[next], &err);
                if (st != ST_OK) comm_abort(c, 1, err.msg);
            }
            churn(reqs, NBUCKET, &seed);
        }
        churn(reqs, NBUCKET, &seed);
        if (early.active && comm_wait(&early, 60, "stress probe", it, &err) != ST_OK) comm_abort(c, 1, err.msg);
        churn(reqs, NBUCKET, &seed);
        if (comm_wait_all(reqs, NBUCKET, 60, "stress bucket", it, &err) != ST_OK) comm_abort(c, 1, err.msg);
        /* the closed form: Σ_ranks val(rank) = val(0)·p(p+1)/2; the ring: this rank's block only */
        for (int b = 0; b < NBUCKET; b++) {
            size_t lo = (size_t)b * BUCKET + (ring ? (size_t)r * (BUCKET / p) : 0);
            size_t hi = ring ? lo + BUCKET / p : (size_t)(b + 1) * BUCKET;
            for (size_t i = lo; i < hi; i++) bad += g[i] != val(i, (int)it) * tri;
        }
    }
    int64_t v = bad;
    if (comm_allreduce_i64(c, &v, 1, COMM_SUM, &err) != ST_OK) v = -1;
    if (r == 0) printf("heap_comm_stress: %ld iterations x %d buckets on %d ranks: %s (%lld wrong elements)\n", iters,
                       NBUCKET, p, v == 0 ? "OK" : "FAIL", (long long)v);
    free(g);
    comm_finalize(c);
    return v == 0 ? 0 : 1;
}
