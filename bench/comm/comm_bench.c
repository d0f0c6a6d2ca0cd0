/* comm_bench.c — time of all-reduce, reduce-scatter and all-gather against message size, per form.
 *
 * Run under mpirun (bench/comm/run.sh does it with 2 ranks and each malloc setting). For each
 * collective and each size S (the full buffer: the all-reduce vector, the reduce-scatter input, the
 * all-gather output) it times several forms: blocking MPI out of place and with MPI_IN_PLACE,
 * nonblocking MPI (I*, polled with MPI_Test as comm does) and the comm API itself; for
 * reduce-scatter also "all-reduce then keep the own block". Each form is first checked once
 * against the closed form (sum over ranks of (rank+1)·v), then timed: `reps` back-to-back calls,
 * each call after a barrier, the slowest rank's time, minimum and median over calls. Finally T = α + β·S is fitted per form (least squares
 * on relative error, so small and large sizes weigh alike).
 *
 * Usage: comm_bench [--malloc default|threshold|nommap] [--max-mb N] [--quick] [--only 0|1|2 (ar|rs|ag)]
 *   threshold: mallopt(M_MMAP_THRESHOLD, 32 MiB) (glibc's maximum) and a large trim threshold;
 *   nommap:    mallopt(M_MMAP_MAX, 0): every malloc from the heap, never returned to the OS.
 * Both are set before MPI_Init so Open MPI's own temporary buffers follow them.
 * Output: markdown rows "| form | S | µs | GB/s |" then the fit per form, on rank 0. */
#include <malloc.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"

typedef enum { AR, RS, AG } Coll;
typedef enum {
    F_BLOCK,     /* MPI_Allreduce / MPI_Reduce_scatter_block / MPI_Allgather, separate buffers */
    F_INPLACE,   /* the same with MPI_IN_PLACE */
    F_NB_INPLACE,/* MPI_I* with MPI_IN_PLACE, MPI_Test polling */
    F_COMM,      /* comm_*_f32 in place (what the trainer calls) */
    F_AR_SLICE,  /* reduce-scatter only: MPI_Allreduce in place, keep own block */
    F_COMM_AR,   /* reduce-scatter only: comm API with rs_as_allreduce = 1 */
    F_NFORMS
} Form;
static const char *coll_names[] = {"all-reduce", "reduce-scatter", "all-gather"};
static const char *form_names[] = {"MPI blocking, separate buffers", "MPI blocking, MPI_IN_PLACE",
                                   "MPI nonblocking, MPI_IN_PLACE + MPI_Test", "comm API (nonblocking, in place; reduce-scatter: rs_as_allreduce=0)",
                                   "MPI_Allreduce in place, keep own block",
                                   "comm API, rs_as_allreduce=1 (MPI_Iallreduce)"};

static int rank, world;
static Comm *comm;

static void wait_req(MPI_Request *r) {
    int flag = 0;
    while (!flag) MPI_Test(r, &flag, MPI_STATUS_IGNORE);
}

/* One call of form f on buffers a (full size n floats) and b (n floats scratch). */
static int run_once(Coll c, Form f, float *a, float *b, size_t n) {
    size_t blk = n / world;
    float *own = a + (size_t)rank * blk;
    MPI_Request r;
    Err err = {0};
    switch (c) {
    case AR:
        if (f == F_BLOCK) return MPI_Allreduce(a, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (f == F_INPLACE) return MPI_Allreduce(MPI_IN_PLACE, a, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (f == F_NB_INPLACE) {
            int rc = MPI_Iallreduce(MPI_IN_PLACE, a, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
            wait_req(&r);
            return rc;
        }
        if (f == F_COMM) return comm_allreduce_f32(comm, a, a, n, &err);
        return -1;
    case RS:
        if (f == F_BLOCK) return MPI_Reduce_scatter_block(a, b, (int)blk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (f == F_INPLACE) {
            int rc = MPI_Reduce_scatter_block(MPI_IN_PLACE, a, (int)blk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            if (rank) memmove(own, a, blk * sizeof(float)); /* result lands at a[0:blk] */
            return rc;
        }
        if (f == F_NB_INPLACE) {
            int rc = MPI_Ireduce_scatter_block(MPI_IN_PLACE, a, (int)blk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
            wait_req(&r);
            if (rank) memmove(own, a, blk * sizeof(float));
            return rc;
        }
        if (f == F_COMM) {
            comm->rs_as_allreduce = 0;
            return comm_reduce_scatter_f32(comm, a, own, blk, &err);
        }
        if (f == F_COMM_AR) {
            comm->rs_as_allreduce = 1;
            int rc = comm_reduce_scatter_f32(comm, a, own, blk, &err);
            comm->rs_as_allreduce = 0;
            return rc;
        }
        if (f == F_AR_SLICE) return MPI_Allreduce(MPI_IN_PLACE, a, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        return -1;
    case AG:
        if (f == F_BLOCK) return MPI_Allgather(b, (int)blk, MPI_FLOAT, a, (int)blk, MPI_FLOAT, MPI_COMM_WORLD);
        if (f == F_INPLACE) return MPI_Allgather(MPI_IN_PLACE, 0, MPI_FLOAT, a, (int)blk, MPI_FLOAT, MPI_COMM_WORLD);
        if (f == F_NB_INPLACE) {
            int rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_FLOAT, a, (int)blk, MPI_FLOAT, MPI_COMM_WORLD, &r);
            wait_req(&r);
            return rc;
        }
        if (f == F_COMM) return comm_allgather_f32(comm, own, a, blk, &err);
        return -1;
    }
    return -1;
}

static float val(size_t i) { return (float)(i % 13 + 1) * 0.5f; }

/* Runs form f once on known data and checks the closed form; 1 if correct on every rank. */
static int verify(Coll c, Form f, float *a, float *b, size_t n) {
    size_t blk = n / world;
    double tri = world * (world + 1) / 2.0;
    for (size_t i = 0; i < n; i++) a[i] = (float)(rank + 1) * val(i);
    if (c == AG) {
        for (size_t j = 0; j < blk; j++) a[(size_t)rank * blk + j] = b[j] = (float)(rank * 100) + val(j);
    }
    /* F_BLOCK: input a, output b (all-reduce) or b[0:blk] (reduce-scatter); all-gather sends b. */
    int ok = run_once(c, f, a, b, n) == MPI_SUCCESS;
    if (c == AR) {
        const float *res = f == F_BLOCK ? b : a;
        for (size_t i = 0; ok && i < n; i++) ok = res[i] == (float)(tri * val(i));
    } else if (c == RS) {
        const float *res = f == F_BLOCK ? b : a + (size_t)rank * blk;
        for (size_t j = 0; ok && j < blk; j++) ok = res[j] == (float)(tri * val((size_t)rank * blk + j));
    } else {
        for (int q = 0; ok && q < world; q++)
            for (size_t j = 0; ok && j < blk; j++) ok = a[(size_t)q * blk + j] == (float)(q * 100) + val(j);
    }
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

/* Seconds per call: each of reps calls starts after a barrier and is timed on every rank; a
 * call's time is its slowest rank; returns the minimum over calls (the machine is shared, so the
 * minimum is the uncontended estimate) and the median in *median. */
static double time_form(Coll c, Form f, float *a, float *b, size_t n, int reps, double *median) {
    double t[64], tmax[64];
    if (reps > 64) reps = 64;
    memset(a, 0, n * sizeof(float)); /* repeated in-place sums of zeros stay finite */
    memset(b, 0, n * sizeof(float));
    run_once(c, f, a, b, n); /* warm-up: first-touch, registration */
    for (int i = 0; i < reps; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        run_once(c, f, a, b, n);
        t[i] = MPI_Wtime() - t0;
    }
    MPI_Allreduce(t, tmax, reps, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    for (int i = 1; i < reps; i++) /* insertion sort */
        for (int j = i; j > 0 && tmax[j] < tmax[j - 1]; j--) {
            double x = tmax[j];
            tmax[j] = tmax[j - 1];
            tmax[j - 1] = x;
        }
    *median = tmax[reps / 2];
    return tmax[0];
}

/* Least squares of T = a + b S minimizing sum ((T_i - a - b S_i)/T_i)^2. */
static void fit(const double *S, const double *T, int m, double *alpha, double *beta) {
    double sww = 0, swws = 0, swwss = 0, swwt = 0, swwst = 0;
    for (int i = 0; i < m; i++) {
        double w2 = 1.0 / (T[i] * T[i]);
        sww += w2;
        swws += w2 * S[i];
        swwss += w2 * S[i] * S[i];
        swwt += w2 * T[i];
        swwst += w2 * S[i] * T[i];
    }
    double det = sww * swwss - swws * swws;
    *alpha = (swwt * swwss - swws * swwst) / det;
    *beta = (sww * swwst - swws * swwt) / det;
}

int main(int argc, char **argv) {
    const char *malloc_mode = "default";
    int max_mb = 64, quick = 0, only = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--malloc") && i + 1 < argc) malloc_mode = argv[++i];
        else if (!strcmp(argv[i], "--max-mb") && i + 1 < argc) max_mb = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = atoi(argv[++i]); /* 0 ar, 1 rs, 2 ag */
    }
    if (!strcmp(malloc_mode, "threshold")) {
        mallopt(M_MMAP_THRESHOLD, 32 << 20);
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
    } else if (!strcmp(malloc_mode, "nommap")) {
        mallopt(M_MMAP_MAX, 0);
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
    }
    Err err = {0};
    /* The MPI forms below call MPI directly, outside comm's lock: comm's progress thread (on by
     * default across nodes) must not run beside them. The comm API's times are then those of a
     * blocking wait, which progresses by itself. */
    setenv("ST_COMM_PROGRESS", "off", 1);
    if (comm_init(&comm, &argc, &argv, &err) != ST_OK || !comm->is_mpi) {
        fprintf(stderr, "comm_bench: run under mpirun (%s)\n", err.msg);
        return 1;
    }
    rank = comm->rank;
    world = comm->world;
    comm->timeout_s = 120;
    size_t maxn = (size_t)max_mb << 18; /* floats */
    float *a = malloc(maxn * sizeof(float)), *b = malloc(maxn * sizeof(float));
    enum { MAXS = 16 };
    double S[MAXS], T[3][F_NFORMS][MAXS];
    int ns = 0;
    /* S from 4 KiB to max-mb MiB, x4 (x16 with --quick) */
    for (size_t n = 1024; n <= maxn && ns < MAXS; n *= quick ? 16 : 4) S[ns++] = (double)n * 4;
    char desc[200];
    comm_describe(comm, desc, sizeof desc);
    if (rank == 0) {
        printf("# comm_bench: %s, malloc=%s\n\n", desc, malloc_mode);
        printf("| collective | form | S (bytes) | min time (µs) | median (µs) | S/T_min (GB/s) | correct |\n|---|---|---:|---:|---:|---:|---|\n");
    }
    for (int c = 0; c < 3; c++)
        for (int f = 0; f < F_NFORMS; f++) {
            if ((f == F_AR_SLICE || f == F_COMM_AR) && c != RS) continue;
            if (only >= 0 && c != only) continue;
            for (int si = 0; si < ns; si++) {
                size_t n = (size_t)(S[si] / 4);
                int ok = verify((Coll)c, (Form)f, a, b, n);
                int reps = S[si] > (1 << 24) ? 7 : S[si] > (1 << 20) ? 15 : 41;
                double med, t = time_form((Coll)c, (Form)f, a, b, n, reps, &med);
                T[c][f][si] = t;
                if (rank == 0)
                    printf("| %s | %s | %.0f | %.1f | %.1f | %.2f | %s |\n", coll_names[c], form_names[f], S[si],
                           t * 1e6, med * 1e6, S[si] / t / 1e9, ok ? "yes" : "NO");
                fflush(stdout);
            }
        }
    if (rank == 0) {
        printf("\n| collective | form | α (µs) | 1/β (GB/s) | T(S_max) measured (ms) |\n|---|---|---:|---:|---:|\n");
        for (int c = 0; c < 3; c++)
            for (int f = 0; f < F_NFORMS; f++) {
                if ((f == F_AR_SLICE || f == F_COMM_AR) && c != RS) continue;
                if (only >= 0 && c != only) continue;
                double al, be;
                fit(S, T[c][f], ns, &al, &be);
                printf("| %s | %s | %.2f | %.2f | %.2f |\n", coll_names[c], form_names[f], al * 1e6, 1.0 / be / 1e9,
                       T[c][f][ns - 1] * 1e3);
            }
    }
    free(a);
    free(b);
    comm_finalize(comm);
    return 0;
}
