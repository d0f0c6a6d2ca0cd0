/* test_schedule.c — the pipeline schedules (src/parallel/schedule.h) against closed forms, a
 * second simulator and hand-written lists. No MPI: the schedule is data.
 *
 * Grid: P ∈ {2, 4, 8}, m ∈ {1, 2, 4, 8, 16}, v ∈ {1, 2}, every schedule (interleaved with v = 2;
 * v = 2 with the others must be refused, as must interleaved with m not a multiple of P).
 *
 * Bubble convention: bubble = Σ_r idle_r / (P · makespan), idle_r = makespan − busy_r (all ranks
 * start at 0); with equal work per rank this is idle / total time of any one rank.
 *
 * Oracles (each check names its own):
 *  - completeness counted here, independently of sched_check: every rank runs each F, B (and W
 *    for zb-h1) of every (micro-batch, chunk) exactly once;
 *  - a tick-by-tick simulator written here (integer durations, its own statement of the
 *    dependencies) gives the same makespan as sched_simulate, latency 0 and 1;
 *  - closed forms, exact to 1e-12: gpipe and 1f1b bubble = (P−1)/(m+P−1) with tF = tB = 1 and with
 *    tF = 1, tB = 2; gpipe with latency λ: makespan = (m+P−1)(tF+tB) + 2(P−1)λ; interleaved
 *    (tF = tB = 1 per chunk op) idle_r / busy_r = (P−1)/(v·m) on every rank (Megatron's bubble
 *    relative to the ideal time), i.e. bubble = (P−1)/(v·m + P−1) = plan_bubble(P, m, v);
 *    zb-h1 (tF = tB = tW = 1) below 1f1b with tB = 2 (the same total backward), and for m ≥ P
 *    its makespan = 3m + (P−1)(tF + tB − tW) (Qi et al. 2023, ZB-H1's bubble);
 *  - peaks: 1f1b rank r holds min(P−r, m) micro-batches, gpipe m on every rank, zb-h1
 *    min(P, m) on every rank (1f1b's maximum), interleaved rank 0 min(2(P−1) + (v−1)P + 1, m·v) chunk
 *    activation sets (m·v when m == P: Megatron's warm-up + 1);
 *  - the printer against hand-written lines;
 *  - per-virtual-stage times (stage_f/b/w, plan's interleaved pricing): interleaved P = 2, v = 2,
 *    m = 4 with every op free except those of the last virtual stage (F 1, B 2): makespan 3m = 12
 *    (that stage alone, never waiting); the same times given per rank (rank 1's chunks both
 *    F 1, B 2) must give more (control: the per-virtual-stage times are read), and per-stage
 *    times equal to the per-rank ones the same makespan as rank_f/rank_b.
 * Negative controls (the test fails if one passes): a 1f1b with two ops swapped into a cross-rank
 * deadlock, a self-deadlock, a missing op, a repeated op; the closed forms applied to the wrong
 * schedule (interleaved's to 1f1b, 1f1b's peak to gpipe); the tick oracle with a latency the
 * simulator was not given. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/schedule.h"
#include "testutil.h"

static const int PS[] = {2, 4, 8}, MS[] = {1, 2, 4, 8, 16}, VS[] = {1, 2};

/* ---- the independent oracles ---- */

/* 1 if every rank runs every op of the schedule's kinds exactly once (counted here). */
static int complete(const PipeSchedule *s) {
    int kinds = s->type == SCHED_ZB_H1 ? 3 : 2;
    int *cnt = calloc((size_t)3 * s->v * s->m, sizeof *cnt), ok = 1;
    for (int r = 0; r < s->p; r++) {
        memset(cnt, 0, (size_t)3 * s->v * s->m * sizeof *cnt);
        for (int i = 0; i < s->n[r]; i++) {
            SchedOp o = s->ops[r][i];
            if (o.kind < 0 || o.kind >= kinds || o.mb < 0 || o.mb >= s->m || o.chunk < 0 || o.chunk >= s->v) ok = 0;
            else cnt[(o.kind * s->v + o.chunk) * s->m + o.mb]++;
        }
        for (int i = 0; i < kinds * s->v * s->m; i++) ok &= cnt[i] == 1;
        ok &= s->n[r] == kinds * s->v * s->m;
    }
    free(cnt);
    return ok;
}

/* Finish tick of (kind, rank, chunk, mb) or -1. */
static int *tick_done;
static int tick_at(const PipeSchedule *s, int k, int r, int c, int j) {
    return tick_done[((k * s->p + r) * s->v + c) * s->m + j];
}

/* Makespan by stepping time one tick at a time: at tick t a free rank starts its next op if each
 * dependency finished at or before t − lat (lat across ranks only). Virtual stage c·P + r.
 * Returns -1 if nothing can ever start again (deadlock). Durations are integers. */
static long tick_makespan(const PipeSchedule *s, int tf, int tb, int tw, int lat) {
    int P = s->p, S = s->p * s->v, dur[3] = {tf, tb, tw};
    tick_done = malloc(sizeof(int) * 3 * P * s->v * s->m);
    for (int i = 0; i < 3 * P * s->v * s->m; i++) tick_done[i] = -1;
    int pos[64] = {0}, busy_until[64] = {0}, left = 0;
    for (int r = 0; r < P; r++) left += s->n[r];
    long t = 0, bound = 0;
    for (int r = 0; r < P; r++) bound += (long)s->n[r] * (tf + tb + tw + 2 * lat + 1);
    for (; left > 0 && t <= bound; t++)
        for (int r = 0; r < P; r++) {
            if (pos[r] == s->n[r] || busy_until[r] > t) continue;
            SchedOp o = s->ops[r][pos[r]];
            int st = o.chunk * P + r, ok = 1;
            /* A dependency met by tick t: finished, and the message (if it crosses ranks) arrived. */
#define MET(k, rr, cc) (tick_at(s, k, rr, cc, o.mb) >= 0 && tick_at(s, k, rr, cc, o.mb) + ((rr) != r ? lat : 0) <= t)
            if (o.kind == SCHED_F && st > 0) ok = MET(SCHED_F, (st - 1) % P, (st - 1) / P);
            if (o.kind == SCHED_B) {
                ok = MET(SCHED_F, r, o.chunk);
                if (st < S - 1) ok = ok && MET(SCHED_B, (st + 1) % P, (st + 1) / P);
            }
            if (o.kind == SCHED_W) ok = MET(SCHED_B, r, o.chunk);
#undef MET
            if (!ok) continue;
            busy_until[r] = (int)t + dur[o.kind];
            tick_done[((o.kind * P + r) * s->v + o.chunk) * s->m + o.mb] = busy_until[r];
            pos[r]++;
            left--;
        }
    long mk = -1;
    if (left == 0)
        for (int r = 0; r < P; r++) mk = busy_until[r] > mk ? busy_until[r] : mk;
    free(tick_done);
    return mk;
}

static double rel(double a, double b) { return fabs(a - b) / (fabs(b) > 0 ? fabs(b) : 1); }

/* ---- the grid ---- */

typedef struct {
    int fails;       /* cases that failed the check */
    int cases;       /* cases checked */
    double maxdiff;  /* worst relative difference among the checked cases */
    char first[256]; /* the first failure */
} Acc;

static void acc(Acc *a, int ok, double diff, const char *fmt, int P, int m, int v, double got, double want) {
    a->cases++;
    if (diff > a->maxdiff) a->maxdiff = diff;
    if (!ok && a->fails++ == 0) {
        snprintf(a->first, sizeof a->first, fmt, P, m, v);
        size_t l = strlen(a->first);
        snprintf(a->first + l, sizeof a->first - l, ": got %.12g want %.12g", got, want);
    }
}

static void report(const char *name, const Acc *a, const char *oracle) {
    tu_check(a->fails == 0 && a->cases > 0, name, "%s; %d cases, maxdiff=%.3g%s%s", oracle, a->cases, a->maxdiff,
             a->fails ? "; first failure: " : "", a->fails ? a->first : "");
}

static void grid(void) {
    Acc refuse = {0}, compl = {0}, tick = {0}, tick_lat = {0}, b_std = {0}, b_std2 = {0}, lat_gp = {0},
        b_il = {0}, b_il2 = {0}, pk_il = {0}, zb_lt = {0}, zb_cf = {0}, pk_1f1b = {0}, pk_gp = {0}, pk_zb = {0};
    Acc ctl_il = {0}, ctl_pk = {0}, ctl_tick = {0};
    for (size_t ip = 0; ip < sizeof PS / sizeof *PS; ip++)
        for (size_t im = 0; im < sizeof MS / sizeof *MS; im++)
            for (size_t iv = 0; iv < sizeof VS / sizeof *VS; iv++)
                for (int type = SCHED_GPIPE; type <= SCHED_ZB_H1; type++) {
                    int P = PS[ip], m = MS[im], v = VS[iv];
                    PipeSchedule s;
                    Err err = {0};
                    Status st = sched_build(&s, (SchedType)type, P, m, v, &err);
                    char want[64];
                    /* Refusals: v > 1 outside interleaved; interleaved with m % P != 0. */
                    if (v > 1 && type != SCHED_INTERLEAVED) {
                        acc(&refuse, st == ST_ERR_INPUT && strstr(err.msg, "--interleave"), 0,
                            "P=%d m=%d v=%d non-interleaved accepted", P, m, v, st, ST_ERR_INPUT);
                        sched_free(&s);
                        continue;
                    }
                    if (type == SCHED_INTERLEAVED && m % P != 0) {
                        snprintf(want, sizeof want, "--pp %d, found %d micro-batches", P, m);
                        acc(&refuse, st == ST_ERR_INPUT && strstr(err.msg, want), 0,
                            "P=%d m=%d v=%d interleaved not refused with the flag and count", P, m, v, st, ST_ERR_INPUT);
                        sched_free(&s);
                        continue;
                    }
                    if (type == SCHED_INTERLEAVED && v == 1) { /* = 1f1b; covered there */
                        sched_free(&s);
                        continue;
                    }
                    if (st != ST_OK) {
                        tu_check(0, "sched_build", "P=%d m=%d v=%d %s: %s", P, m, v, sched_type_name(type), err.msg);
                        continue;
                    }
                    acc(&compl, complete(&s) && sched_check(&s, &err) == ST_OK, 0, "P=%d m=%d v=%d incomplete", P, m, v, 0, 1);

                    int zb = type == SCHED_ZB_H1;
                    /* Unit ops: F = B = 1 (zb: F = B = W = 1, the 1f1b backward of 2 split in halves). */
                    SchedTimes t1 = {1, 1, 1, 0};
                    SchedSim sim;
                    if (sched_simulate(&s, &t1, &sim, &err) != ST_OK) {
                        tu_check(0, "sched_simulate", "P=%d m=%d v=%d %s: %s", P, m, v, sched_type_name(type), err.msg);
                        sched_free(&s);
                        continue;
                    }
                    long tk = tick_makespan(&s, 1, 1, 1, 0);
                    acc(&tick, tk == (long)sim.makespan, rel(sim.makespan, (double)tk), "P=%d m=%d v=%d", P, m, v,
                        sim.makespan, (double)tk);
                    /* Control: the tick oracle with latency 1 must see a later finish than latency 0. */
                    acc(&ctl_tick, tick_makespan(&s, 1, 1, 1, 1) != (long)sim.makespan, 0,
                        "P=%d m=%d v=%d: latency invisible to the tick oracle", P, m, v, 0, 1);
                    SchedTimes tl = {1, 2, 1, 1};
                    SchedSim siml;
                    sched_simulate(&s, &tl, &siml, &err);
                    long tkl = tick_makespan(&s, 1, 2, 1, 1);
                    acc(&tick_lat, tkl == (long)siml.makespan, rel(siml.makespan, (double)tkl), "P=%d m=%d v=%d (tB=2, lat=1)",
                        P, m, v, siml.makespan, (double)tkl);

                    double f_std = (double)(P - 1) / (m + P - 1);
                    if (type == SCHED_GPIPE || type == SCHED_1F1B) {
                        acc(&b_std, rel(sim.bubble, f_std) < 1e-12, rel(sim.bubble, f_std), "P=%d m=%d v=%d", P, m, v,
                            sim.bubble, f_std);
                        SchedTimes t2 = {1, 2, 0, 0};
                        SchedSim s2;
                        sched_simulate(&s, &t2, &s2, &err);
                        acc(&b_std2, rel(s2.bubble, f_std) < 1e-12, rel(s2.bubble, f_std), "P=%d m=%d v=%d", P, m, v,
                            s2.bubble, f_std);
                        /* Control: interleaved's expression (v = 2) must not fit 1f1b / gpipe. */
                        double f_il2 = (double)(P - 1) / (2.0 * m + P - 1);
                        acc(&ctl_il, rel(sim.bubble, f_il2) > 1e-6, 0, "P=%d m=%d v=%d: v=2 formula fits v=1", P, m, v,
                            sim.bubble, f_il2);
                    }
                    if (type == SCHED_GPIPE) {
                        SchedTimes t3 = {1, 2, 0, 0.25};
                        SchedSim s3;
                        sched_simulate(&s, &t3, &s3, &err);
                        double want_mk = (m + P - 1) * 3.0 + 2 * (P - 1) * 0.25;
                        acc(&lat_gp, rel(s3.makespan, want_mk) < 1e-12, rel(s3.makespan, want_mk), "P=%d m=%d v=%d", P, m, v,
                            s3.makespan, want_mk);
                        int okp = 1;
                        for (int r = 0; r < P; r++) okp &= sim.peak_inflight[r] == m;
                        acc(&pk_gp, okp, 0, "P=%d m=%d v=%d", P, m, v, sim.peak_inflight[0], m);
                        /* Control: 1f1b's peak formula must not fit gpipe when m > P. */
                        if (m > P)
                            acc(&ctl_pk, sim.peak_inflight[0] != P, 0, "P=%d m=%d v=%d: gpipe fits 1f1b's peak", P, m, v,
                                sim.peak_inflight[0], P);
                    }
                    if (type == SCHED_1F1B) {
                        int okp = 1;
                        for (int r = 0; r < P; r++) okp &= sim.peak_inflight[r] == (P - r < m ? P - r : m);
                        acc(&pk_1f1b, okp, 0, "P=%d m=%d v=%d", P, m, v, sim.peak_inflight[0], P < m ? P : m);
                    }
                    if (type == SCHED_INTERLEAVED) {
                        double f_meg = (double)(P - 1) / (v * m), worst = 0;
                        for (int r = 0; r < P; r++) worst = fmax(worst, rel(sim.idle[r] / sim.busy[r], f_meg));
                        acc(&b_il, worst < 1e-12, worst, "P=%d m=%d v=%d idle/busy", P, m, v, sim.idle[0] / sim.busy[0], f_meg);
                        double f_il = (double)(P - 1) / ((double)v * m + P - 1);
                        acc(&b_il2, rel(sim.bubble, f_il) < 1e-12, rel(sim.bubble, f_il), "P=%d m=%d v=%d", P, m, v,
                            sim.bubble, f_il);
                        /* Rank 0 holds its warm-up plus one chunk activation sets (each 1/v of a stage's):
                         * min(2(P-1) + (v-1)P + 1, m·v), or all m·v when m == P. */
                        int want_pk = m == P ? m * v : 2 * (P - 1) + (v - 1) * P + 1;
                        if (want_pk > m * v) want_pk = m * v;
                        acc(&pk_il, sim.peak_inflight[0] == want_pk, 0, "P=%d m=%d v=%d", P, m, v, sim.peak_inflight[0], want_pk);
                    }
                    if (zb) {
                        /* 1f1b with the same total backward time (tB = 2 unsplit). */
                        PipeSchedule o;
                        SchedSim so;
                        SchedTimes t2 = {1, 2, 0, 0};
                        sched_build(&o, SCHED_1F1B, P, m, 1, &err);
                        sched_simulate(&o, &t2, &so, &err);
                        acc(&zb_lt, sim.bubble < so.bubble && rel(sim.busy[0], so.busy[0]) < 1e-12, 0,
                            "P=%d m=%d v=%d zb-h1 not below 1f1b", P, m, v, sim.bubble, so.bubble);
                        if (m >= P) {
                            double want_mk = 3.0 * m + (P - 1) * (1 + 1 - 1);
                            acc(&zb_cf, rel(sim.makespan, want_mk) < 1e-12, rel(sim.makespan, want_mk), "P=%d m=%d v=%d", P,
                                m, v, sim.makespan, want_mk);
                        }
                        /* Every rank holds min(P, m): rank r's r delayed W's keep r more than 1f1b's
                         * P - r, so the maximum over ranks is 1f1b's (rank 0's). */
                        int okp = 1;
                        for (int r = 0; r < P; r++) okp &= sim.peak_inflight[r] == (P < m ? P : m);
                        acc(&pk_zb, okp, 0, "P=%d m=%d v=%d", P, m, v, sim.peak_inflight[P - 1], P < m ? P : m);
                        printf("  zb-h1 P=%d m=%2d: bubble %.4f (1f1b with tB=2: %.4f), makespan %g\n", P, m, sim.bubble,
                               so.bubble, sim.makespan);
                        sched_free(&o);
                    }
                    sched_free(&s);
                }
    report("refusals", &refuse, "v>1 without interleaved, interleaved with m % P != 0 (message names --pp and m)");
    report("complete", &compl, "every F/B[/W] of every (mb, chunk) exactly once per rank, counted here, and sched_check");
    report("tick_oracle", &tick, "makespan == the tick-by-tick simulator's (tF=tB=tW=1, latency 0)");
    report("tick_oracle_latency", &tick_lat, "makespan == the tick-by-tick simulator's (tF=1 tB=2 tW=1, latency 1)");
    report("bubble_gpipe_1f1b", &b_std, "(P-1)/(m+P-1), tF=tB=1");
    report("bubble_gpipe_1f1b_tb2", &b_std2, "(P-1)/(m+P-1), tF=1 tB=2");
    report("gpipe_latency", &lat_gp, "makespan == (m+P-1)(tF+tB) + 2(P-1)·lat, lat=0.25");
    report("bubble_interleaved_megatron", &b_il, "idle_r/busy_r == (P-1)/(v·m) on every rank, v=2");
    report("bubble_interleaved", &b_il2, "bubble == (P-1)/(v·m+P-1) (plan_bubble), v=2");
    report("zb_h1_below_1f1b", &zb_lt, "bubble < 1f1b's with tB=2 and the same busy time");
    report("zb_h1_closed_form", &zb_cf, "makespan == 3m + (P-1)(tF+tB-tW) for m >= P");
    report("peak_1f1b", &pk_1f1b, "rank r holds min(P-r, m)");
    report("peak_gpipe", &pk_gp, "every rank holds m");
    report("peak_zb_h1", &pk_zb, "every rank == min(P, m) (1f1b's rank 0)");
    report("peak_interleaved", &pk_il, "rank 0 == min(2(P-1)+(v-1)P+1, m·v) chunk sets (m·v when m == P)");
    report("control_interleaved_formula", &ctl_il, "(P-1)/(2m+P-1) must NOT fit gpipe/1f1b");
    report("control_peak_formula", &ctl_pk, "1f1b's peak P must NOT fit gpipe for m > P");
    report("control_tick_latency", &ctl_tick, "tick oracle with latency 1 must NOT match the latency-0 makespan");
}

/* ---- negative controls on the checker ---- */

static void controls(void) {
    Err err = {0};
    SchedTimes t = {1, 1, 1, 0};
    SchedSim sim;
    for (int P = 4; P <= 8; P *= 2) {
        /* Rank 0 runs B0 where F1 was: rank 1 needs F1 (after B0 on rank 0) before its own B0, which
         * rank 0's B0 needs: a cycle across two ranks. */
        PipeSchedule s;
        sched_build(&s, SCHED_1F1B, P, 8, 1, &err);
        int ib = 0;
        while (s.ops[0][ib].kind != SCHED_B) ib++;
        SchedOp tmp = s.ops[0][1];
        s.ops[0][1] = s.ops[0][ib];
        s.ops[0][ib] = tmp;
        Status st = sched_simulate(&s, &t, &sim, &err);
        tu_check(st == ST_ERR_INPUT && strstr(err.msg, "deadlocks") && strstr(err.msg, "rank 0") && strstr(err.msg, "(B0)"),
                 "control_deadlock_swap", "P=%d 1f1b with rank 0's F1 and B0 swapped must be rejected: %s", P,
                 st == ST_OK ? "ACCEPTED" : err.msg);
        /* The same swap undone is accepted (the rejection is the order's, not the op set's). */
        tmp = s.ops[0][1];
        s.ops[0][1] = s.ops[0][ib];
        s.ops[0][ib] = tmp;
        tu_check(sched_simulate(&s, &t, &sim, &err) == ST_OK, "control_deadlock_unswapped", "P=%d accepted", P);
        sched_free(&s);
    }
    /* A rank running its backward before its own forward. */
    PipeSchedule s;
    sched_build(&s, SCHED_ZB_H1, 2, 4, 1, &err);
    SchedOp tmp = s.ops[1][0];
    s.ops[1][0] = s.ops[1][1];
    s.ops[1][1] = tmp;
    Status st = sched_simulate(&s, &t, &sim, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "rank 1") && strstr(err.msg, "waiting for F0"), "control_self_deadlock",
             "zb-h1 rank 1 with B0 before F0 must be rejected: %s", st == ST_OK ? "ACCEPTED" : err.msg);
    sched_free(&s);
    /* A missing op: rank 1's last W dropped. */
    sched_build(&s, SCHED_ZB_H1, 4, 8, 1, &err);
    s.n[1]--;
    st = sched_simulate(&s, &t, &sim, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "rank 1 never runs W7"), "control_missing_op",
             "zb-h1 without rank 1's W7 must be rejected: %s", st == ST_OK ? "ACCEPTED" : err.msg);
    sched_free(&s);
    /* A repeated op in place of another: interleaved rank 2's op 3 becomes a copy of op 0. */
    sched_build(&s, SCHED_INTERLEAVED, 4, 8, 2, &err);
    s.ops[2][3] = s.ops[2][0];
    st = sched_check(&s, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "rank 2 runs F0.0 twice"), "control_repeated_op",
             "interleaved with rank 2 running F0.0 twice must be rejected: %s", st == ST_OK ? "ACCEPTED" : err.msg);
    sched_free(&s);
    /* A W in a schedule without split backward. */
    sched_build(&s, SCHED_1F1B, 2, 2, 1, &err);
    s.ops[0][s.n[0] - 1].kind = SCHED_W;
    st = sched_check(&s, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "without W passes"), "control_w_in_1f1b", "%s",
             st == ST_OK ? "ACCEPTED" : err.msg);
    sched_free(&s);
    SchedType ty;
    st = sched_type_parse("zb-h2", &ty, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "--pp-schedule"), "parse_unknown", "%s", err.msg);
    tu_check(sched_type_parse("zb-h1", &ty, &err) == ST_OK && ty == SCHED_ZB_H1, "parse_zb_h1", "ok");
}

/* ---- the printer, against hand-derived lists ---- */

static void printer(void) {
    static const struct {
        SchedType type;
        int p, m, v;
        const char *want;
    } cases[] = {
        {SCHED_GPIPE, 2, 2, 1, "rank 0: F0 F1 B0 B1\nrank 1: F0 F1 B0 B1\n"},
        {SCHED_1F1B, 2, 3, 1, "rank 0: F0 F1 B0 F2 B1 B2\nrank 1: F0 B0 F1 B1 F2 B2\n"},
        {SCHED_ZB_H1, 2, 3, 1, "rank 0: F0 F1 B0 W0 F2 B1 W1 B2 W2\nrank 1: F0 B0 F1 B1 W0 F2 B2 W1 W2\n"},
        /* m == P: all forwards first; backwards walk the chunks in reverse. */
        {SCHED_INTERLEAVED, 2, 2, 2,
         "rank 0: F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0\nrank 1: F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0\n"},
        /* m = 2P: rank 0 warms up 2(P-1) + P = 4, rank 1 only (v-1)P = 2. */
        {SCHED_INTERLEAVED, 2, 4, 2,
         "rank 0: F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0\n"
         "rank 1: F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        PipeSchedule s;
        Err err = {0};
        char *buf = NULL;
        size_t len = 0;
        sched_build(&s, cases[i].type, cases[i].p, cases[i].m, cases[i].v, &err);
        FILE *f = open_memstream(&buf, &len);
        sched_print(&s, f);
        fclose(f);
        tu_check(strcmp(buf, cases[i].want) == 0, "printer", "%s P=%d m=%d v=%d:\n%s", sched_type_name(cases[i].type),
                 cases[i].p, cases[i].m, cases[i].v, buf);
        free(buf);
        sched_free(&s);
    }
}

static void stage_times(void) {
    PipeSchedule s;
    Err err;
    int P = 2, v = 2, m = 4;
    if (sched_build(&s, SCHED_INTERLEAVED, P, m, v, &err) != ST_OK) {
        tu_check(0, "per-virtual-stage times", "interleaved P 2 v 2 m 4: %s", err.msg);
        return;
    }
    double f[4] = {0, 0, 0, 1}, b[4] = {0, 0, 0, 2}, w[4] = {0}, rf[2] = {0, 1}, rb[2] = {0, 2}, rw[2] = {0};
    double uf[4] = {0, 1, 0, 1}, ub[4] = {0, 2, 0, 2};
    SchedTimes ts = {9, 9, 9, 0, NULL, NULL, NULL, f, b, w}, tr = {9, 9, 9, 0, rf, rb, rw};
    SchedTimes tu = {9, 9, 9, 0, NULL, NULL, NULL, uf, ub, w};
    SchedSim a, c, d;
    int ok = sched_simulate(&s, &ts, &a, &err) == ST_OK && sched_simulate(&s, &tr, &c, &err) == ST_OK &&
             sched_simulate(&s, &tu, &d, &err) == ST_OK;
    sched_free(&s);
    tu_check(ok && a.makespan == 3.0 * m && d.makespan == c.makespan,
             "per-virtual-stage op times (interleaved P 2 v 2 m 4)",
             "only the last virtual stage costs (F 1, B 2): makespan %g (want %d); per-stage = per-rank times: %g vs %g",
             ok ? a.makespan : -1, 3 * m, ok ? d.makespan : -1, ok ? c.makespan : -1);
    tu_check(ok && c.makespan > a.makespan, "negative control: the same costs on both of rank 1's chunks take longer",
             "%g > %g", ok ? c.makespan : -1, ok ? a.makespan : -1);
}

int main(void) {
    grid();
    stage_times();
    controls();
    printer();
    return tu_exit();
}
