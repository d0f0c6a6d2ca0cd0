/* plan_json.h — a plan's pipeline schedule summary and the plan as one JSON object (docs/plan.md).
 *
 * Built from plan_compute's PlanInput and PlanResult; nothing here prints or reads files (cli/
 * parses the flags, calls these and prints). The schedule is parallel/schedule.h's data (the pure
 * st_schedule target), the stage split model/layout's layout_pp_split: the trainer's own. */
#ifndef ST_PLAN_PLAN_JSON_H
#define ST_PLAN_PLAN_JSON_H

#include <cjson/cJSON.h>

#include "core/status.h"
#include "model/layout.h"
#include "parallel/schedule.h"
#include "plan/plan.h"

/* The pipeline schedule of a plan with pp > 1, as data (parallel/schedule.h): built, checked and
 * simulated with unit op times (F 1, B 2, or B 1 + W 1 for zb-h1) for its bubble and the peak
 * micro-batches of activations stage 0 holds; its ops per rank when printed. */
typedef struct {
    int have;
    SchedType type;
    double bubble;
    int peak0;
    char **lines; /* p lines "rank r: F0 F1 B0 ..." (--pp-print-schedule), else NULL */
    int p;
    /* Our GPT-2 models: the split into S = pp·v virtual stages as the trainer makes it
     * (layout_pp_split: balanced by FLOPs, or --pp-layers with S counts), each virtual stage's FLOPs
     * per token and parameters; rank r holds virtual stages c·pp + r. */
    int have_split, S;
    int first[LAYOUT_MAX_CHUNKS * SCHED_MAX_P], last[LAYOUT_MAX_CHUNKS * SCHED_MAX_P];
    double flops[LAYOUT_MAX_CHUNKS * SCHED_MAX_P];
    long long params[LAYOUT_MAX_CHUNKS * SCHED_MAX_P];
} PlanSched;

/* Builds, checks and simulates the schedule `type` for in->pp stages and m = in->pp_microbatches
 * (or in->grad_accum) micro-batches into *ps (zeroed first): have, type, bubble, peak0, p, and with
 * want_lines each rank's ops as a line. Errors: sched_build's / sched_simulate's (ps then holds
 * nothing to free). */
Status plan_sched_build(PlanSched *ps, const PlanInput *in, SchedType type, int want_lines, Err *err);

/* Adds the trainer's split into pp·v virtual stages (layout_pp_split; `layers` is --pp-layers, ""
 * for balanced by FLOPs) when in->model is one of our models (plan_model_to_config); otherwise
 * nothing, or ST_ERR_INPUT naming --pp-layers when one was given. */
Status plan_sched_split(PlanSched *ps, const PlanInput *in, const char *layers, Err *err);

/* Frees the printed lines. Safe on a zeroed PlanSched. */
void plan_sched_free(PlanSched *ps);

/* The plan as one JSON object (the schema of docs/plan.md, `plan --json`); ps may be zeroed (pp = 1).
 * The caller owns the result (cJSON_Delete); NULL only when cJSON cannot allocate. */
cJSON *plan_json(const PlanInput *in, const PlanResult *r, const PlanSched *ps);

#endif
