/* schedule.c — the pipeline schedule generators, the completeness check, the in-order simulator
 * and the printer (see schedule.h for the ops, dependencies and each schedule's order).
 *
 * Contents: names · building (one generator per schedule) · the check · the simulator · printing. */
#include "parallel/schedule.h"

#include <stdlib.h>
#include <string.h>

/* ---- names ---- */

static const char *const NAMES[] = {"gpipe", "1f1b", "interleaved", "zb-h1"};

const char *sched_type_name(SchedType t) {
    return (t >= SCHED_GPIPE && t <= SCHED_ZB_H1) ? NAMES[t] : "?";
}

SchedType sched_default_type(int v) { return v > 1 ? SCHED_INTERLEAVED : SCHED_1F1B; }

Status sched_type_parse(const char *name, SchedType *t, Err *err) {
    for (int i = 0; i <= SCHED_ZB_H1; i++)
        if (name && strcmp(name, NAMES[i]) == 0) {
            *t = (SchedType)i;
            return ST_OK;
        }
    return err_set(err, ST_ERR_INPUT, "--pp-schedule: expected gpipe, 1f1b, interleaved or zb-h1, found '%s'",
                   name ? name : "");
}

/* ---- building ---- */

Status sched_init_empty(PipeSchedule *s, SchedType type, int p, int m, int v, int split_backward, Err *err) {
    memset(s, 0, sizeof *s);
    if (p < 1 || p > SCHED_MAX_P) return err_set(err, ST_ERR_INPUT, "--pp %d: expected 1..%d", p, SCHED_MAX_P);
    if (m < 1) return err_set(err, ST_ERR_INPUT, "pipeline micro-batches %d: expected at least 1", m);
    if (v < 1) return err_set(err, ST_ERR_INPUT, "--interleave %d: expected at least 1", v);
    s->type = type;
    s->p = p;
    s->m = m;
    s->v = v;
    s->split_backward = split_backward;
    s->cap = 3 * m * v;
    s->n = calloc((size_t)p, sizeof *s->n);
    s->ops = calloc((size_t)p, sizeof *s->ops);
    if (!s->n || !s->ops) goto oom;
    for (int r = 0; r < p; r++)
        if (!(s->ops[r] = malloc((size_t)s->cap * sizeof(SchedOp)))) goto oom;
    return ST_OK;
oom:
    sched_free(s);
    return err_set(err, ST_ERR_RUNTIME, "schedule of %d ranks × %d micro-batches: out of memory", p, m);
}

void sched_free(PipeSchedule *s) {
    if (s->ops)
        for (int r = 0; r < s->p; r++) free(s->ops[r]);
    free(s->ops);
    free(s->n);
    memset(s, 0, sizeof *s);
}

static void push(PipeSchedule *s, int r, int kind, int mb, int chunk) {
    ST_CHECK(s->n[r] < s->cap);
    s->ops[r][s->n[r]++] = (SchedOp){kind, mb, chunk};
}

static void build_gpipe(PipeSchedule *s, int r) {
    for (int j = 0; j < s->m; j++) push(s, r, SCHED_F, j, 0);
    for (int j = 0; j < s->m; j++) push(s, r, SCHED_B, j, 0);
}

/* 1f1b, and zb-h1 when s->split_backward: the same F/B order; zb-h1 adds a W after each steady or
 * cool-down B, except that rank r's first r W's wait until the end (they fill the cool-down
 * bubble, which on rank r is r·(tF + tB) long in 1f1b: the W's move there, the B's that gate the
 * previous rank move earlier). W's always run oldest first, so the one after B(k) is W(k - held). */
static void build_1f1b(PipeSchedule *s, int r) {
    int m = s->m, warm = s->p - r - 1 < m ? s->p - r - 1 : m;
    int nw = 0; /* W's issued so far (W's run in micro-batch order) */
    int nb = 0; /* B's issued so far */
    for (int j = 0; j < warm; j++) push(s, r, SCHED_F, j, 0);
    for (int k = 0; k < m - warm; k++) {
        push(s, r, SCHED_F, warm + k, 0);
        push(s, r, SCHED_B, k, 0);
        nb++;
        if (s->split_backward && nb > r) push(s, r, SCHED_W, nw++, 0);
    }
    for (int k = m - warm; k < m; k++) {
        push(s, r, SCHED_B, k, 0);
        nb++;
        if (s->split_backward && nb > r) push(s, r, SCHED_W, nw++, 0);
    }
    while (s->split_backward && nw < m) push(s, r, SCHED_W, nw++, 0);
}

/* Megatron's interleaved 1F1B (forward_backward_pipelining_with_interleaving, micro-batch group
 * size P): virtual micro-batch k of the m·v the rank runs maps to (micro-batch, chunk) as below. */
static void virt(const PipeSchedule *s, int k, int forward, int *mb, int *chunk) {
    int pv = s->p * s->v, c = (k % pv) / s->p;
    *chunk = forward ? c : s->v - 1 - c;
    *mb = (k / pv) * s->p + k % s->p;
}

static void build_interleaved(PipeSchedule *s, int r) {
    int total = s->m * s->v, mb, c;
    /* Earlier ranks run more forwards before their first backward: 2 per rank of distance to the
     * last (a forward has to travel there and its backward back) plus a full round of the other
     * v-1 chunks. With m == P every forward fits before the first backward arrives: all of them. */
    int warm = s->m == s->p ? total : 2 * (s->p - r - 1) + (s->v - 1) * s->p;
    if (warm > total) warm = total;
    for (int k = 0; k < warm; k++) {
        virt(s, k, 1, &mb, &c);
        push(s, r, SCHED_F, mb, c);
    }
    for (int k = 0; k < total - warm; k++) {
        virt(s, warm + k, 1, &mb, &c);
        push(s, r, SCHED_F, mb, c);
        virt(s, k, 0, &mb, &c);
        push(s, r, SCHED_B, mb, c);
    }
    for (int k = total - warm; k < total; k++) {
        virt(s, k, 0, &mb, &c);
        push(s, r, SCHED_B, mb, c);
    }
}

Status sched_build(PipeSchedule *s, SchedType type, int p, int m, int v, Err *err) {
    memset(s, 0, sizeof *s);
    if (type < SCHED_GPIPE || type > SCHED_ZB_H1) return err_set(err, ST_ERR_INPUT, "unknown pipeline schedule %d", (int)type);
    if (v > 1 && type != SCHED_INTERLEAVED)
        return err_set(err, ST_ERR_INPUT, "--interleave %d: expected --pp-schedule interleaved, found %s", v, NAMES[type]);
    if (type == SCHED_INTERLEAVED && p >= 1 && m >= 1 && m % p != 0)
        return err_set(err, ST_ERR_INPUT,
                       "--pp-schedule interleaved: expected a micro-batch count that is a multiple of --pp %d, found %d "
                       "micro-batches",
                       p, m);
    Status st = sched_init_empty(s, type, p, m, v, type == SCHED_ZB_H1, err);
    if (st != ST_OK) return st;
    for (int r = 0; r < p; r++) {
        if (type == SCHED_GPIPE) build_gpipe(s, r);
        else if (type == SCHED_INTERLEAVED && v > 1) build_interleaved(s, r);
        else build_1f1b(s, r);
    }
    return ST_OK;
}

/* ---- the check ---- */

int sched_op_format(const PipeSchedule *s, SchedOp op, char *buf, size_t cap) {
    char k = op.kind == SCHED_F ? 'F' : op.kind == SCHED_B ? 'B' : op.kind == SCHED_W ? 'W' : '?';
    return s->v > 1 ? snprintf(buf, cap, "%c%d.%d", k, op.mb, op.chunk) : snprintf(buf, cap, "%c%d", k, op.mb);
}

/* Index of (kind, rank, chunk, mb) in per-op tables of 3·p·v·m entries. */
static size_t op_index(const PipeSchedule *s, int kind, int r, int chunk, int mb) {
    return (((size_t)kind * s->p + r) * s->v + chunk) * s->m + mb;
}

Status sched_check(const PipeSchedule *s, Err *err) {
    size_t nidx = (size_t)3 * s->p * s->v * s->m;
    unsigned char *seen = calloc(nidx, 1);
    if (!seen) return err_set(err, ST_ERR_RUNTIME, "schedule check: out of memory");
    int kinds = s->split_backward ? 3 : 2;
    char a[32];
    Status st = ST_OK;
    for (int r = 0; r < s->p && st == ST_OK; r++)
        for (int i = 0; i < s->n[r]; i++) {
            SchedOp op = s->ops[r][i];
            if (op.kind < 0 || op.kind >= kinds || op.mb < 0 || op.mb >= s->m || op.chunk < 0 || op.chunk >= s->v) {
                sched_op_format(s, op, a, sizeof a);
                st = err_set(err, ST_ERR_INPUT, "pipeline schedule %s: rank %d op %d (%s) is not an op of %d micro-batches × %d chunks%s",
                             sched_type_name(s->type), r, i, a, s->m, s->v, s->split_backward ? "" : " without W passes");
                break;
            }
            if (seen[op_index(s, op.kind, r, op.chunk, op.mb)]++) {
                sched_op_format(s, op, a, sizeof a);
                st = err_set(err, ST_ERR_INPUT, "pipeline schedule %s: rank %d runs %s twice (op %d)",
                             sched_type_name(s->type), r, a, i);
                break;
            }
        }
    for (int r = 0; r < s->p && st == ST_OK; r++)
        for (int k = 0; k < kinds && st == ST_OK; k++)
            for (int c = 0; c < s->v && st == ST_OK; c++)
                for (int j = 0; j < s->m; j++)
                    if (!seen[op_index(s, k, r, c, j)]) {
                        sched_op_format(s, (SchedOp){k, j, c}, a, sizeof a);
                        st = err_set(err, ST_ERR_INPUT, "pipeline schedule %s: rank %d never runs %s",
                                     sched_type_name(s->type), r, a);
                        break;
                    }
    free(seen);
    return st;
}

/* ---- the simulator ---- */

typedef struct {
    int kind, r, chunk, mb; /* the op depended on */
    int cross;              /* on another rank: costs the latency */
} Dep;

/* The dependencies of op on rank r (schedule.h's table); returns how many (≤ 2). */
static int deps_of(const PipeSchedule *s, int r, SchedOp op, Dep d[2]) {
    int stage = op.chunk * s->p + r, S = s->p * s->v, n = 0;
    if (op.kind == SCHED_F && stage > 0)
        d[n++] = (Dep){SCHED_F, (stage - 1) % s->p, (stage - 1) / s->p, op.mb, (stage - 1) % s->p != r};
    if (op.kind == SCHED_B) {
        d[n++] = (Dep){SCHED_F, r, op.chunk, op.mb, 0};
        if (stage < S - 1) d[n++] = (Dep){SCHED_B, (stage + 1) % s->p, (stage + 1) / s->p, op.mb, (stage + 1) % s->p != r};
    }
    if (op.kind == SCHED_W) d[n++] = (Dep){SCHED_B, r, op.chunk, op.mb, 0};
    return n;
}

Status sched_simulate(const PipeSchedule *s, const SchedTimes *t, SchedSim *out, Err *err) {
    memset(out, 0, sizeof *out);
    Status st = sched_check(s, err);
    if (st != ST_OK) return st;
    size_t nidx = (size_t)3 * s->p * s->v * s->m;
    double *done = malloc(nidx * sizeof *done); /* finish time of each op; < 0: not run yet */
    int *pos = calloc((size_t)s->p, sizeof *pos);
    double *free_at = calloc((size_t)s->p, sizeof *free_at);
    if (!done || !pos || !free_at) {
        st = err_set(err, ST_ERR_RUNTIME, "schedule simulation: out of memory");
        goto out;
    }
    for (size_t i = 0; i < nidx; i++) done[i] = -1;
    const double dur[3] = {t->t_f, t->t_b, t->t_w};
    /* Start times depend only on finish times already fixed, so running every rank as far as it
     * can, round after round, gives the in-order timeline; a round without progress before every
     * rank is done is a cycle in (program order ∪ dependencies): a deadlock. */
    for (int progress = 1; progress;) {
        progress = 0;
        for (int r = 0; r < s->p; r++)
            while (pos[r] < s->n[r]) {
                SchedOp op = s->ops[r][pos[r]];
                Dep d[2];
                int nd = deps_of(s, r, op, d), ok = 1;
                double start = free_at[r];
                for (int i = 0; i < nd && ok; i++) {
                    double f = done[op_index(s, d[i].kind, d[i].r, d[i].chunk, d[i].mb)];
                    if (f < 0) ok = 0;
                    else if (f + (d[i].cross ? t->t_p2p : 0) > start) start = f + (d[i].cross ? t->t_p2p : 0);
                }
                if (!ok) break;
                const double *per = op.kind == SCHED_F ? t->rank_f : op.kind == SCHED_B ? t->rank_b : t->rank_w;
                const double *vs = op.kind == SCHED_F ? t->stage_f : op.kind == SCHED_B ? t->stage_b : t->stage_w;
                double du = vs ? vs[op.chunk * s->p + r] : per ? per[r] : dur[op.kind];
                free_at[r] = start + du;
                done[op_index(s, op.kind, r, op.chunk, op.mb)] = free_at[r];
                out->busy[r] += du;
                pos[r]++;
                progress = 1;
            }
    }
    for (int r0 = 0; r0 < s->p; r0++) {
        if (pos[r0] == s->n[r0]) continue;
        /* Deadlocked. Every blocked rank waits for an op of a rank that is blocked too (the check
         * above guarantees the op is in that rank's list), so following the waits from the first
         * blocked rank reaches a cycle: report the first rank found on it, its op, the op it waits
         * for, and where that op's rank is blocked. */
        int on_path[SCHED_MAX_P] = {0}, r = r0;
        Dep unmet;
        for (;;) {
            SchedOp op = s->ops[r][pos[r]];
            Dep d[2];
            int nd = deps_of(s, r, op, d), i = 0;
            while (i < nd && done[op_index(s, d[i].kind, d[i].r, d[i].chunk, d[i].mb)] >= 0) i++;
            ST_CHECK_MSG(i < nd && pos[d[i].r] < s->n[d[i].r], "a blocked rank must wait for a blocked rank");
            unmet = d[i];
            if (on_path[r]) break;
            on_path[r] = 1;
            r = unmet.r;
        }
        char a[32], b[32], c[32];
        sched_op_format(s, s->ops[r][pos[r]], a, sizeof a);
        sched_op_format(s, (SchedOp){unmet.kind, unmet.mb, unmet.chunk}, b, sizeof b);
        sched_op_format(s, s->ops[unmet.r][pos[unmet.r]], c, sizeof c);
        st = err_set(err, ST_ERR_INPUT,
                     "pipeline schedule %s deadlocks: rank %d is blocked at op %d (%s), waiting for %s of rank %d, "
                     "which is blocked at op %d (%s)",
                     sched_type_name(s->type), r, pos[r], a, b, unmet.r, pos[unmet.r], c);
        goto out;
    }
    for (int r = 0; r < s->p; r++)
        if (free_at[r] > out->makespan) out->makespan = free_at[r];
    double idle = 0;
    for (int r = 0; r < s->p; r++) {
        out->idle[r] = out->makespan - out->busy[r];
        idle += out->idle[r];
        /* Activations held, in program order (the rank runs in order, so this is also in time). */
        int held = 0, release = s->split_backward ? SCHED_W : SCHED_B;
        for (int i = 0; i < s->n[r]; i++) {
            int k = s->ops[r][i].kind;
            held += k == SCHED_F ? 1 : k == release ? -1 : 0;
            if (held > out->peak_inflight[r]) out->peak_inflight[r] = held;
        }
    }
    out->bubble = out->makespan > 0 ? idle / (s->p * out->makespan) : 0;
out:
    free(done);
    free(pos);
    free(free_at);
    return st;
}

/* ---- printing ---- */

void sched_print(const PipeSchedule *s, FILE *f) {
    char a[32];
    for (int r = 0; r < s->p; r++) {
        fprintf(f, "rank %d:", r);
        for (int i = 0; i < s->n[r]; i++) {
            sched_op_format(s, s->ops[r][i], a, sizeof a);
            fprintf(f, " %s", a);
        }
        fputc('\n', f);
    }
}
