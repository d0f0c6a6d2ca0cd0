/* fit_json.h — a scaling-law fit as one JSON object (`scaletrain fit --json`, schema in docs/fit.md
 * "JSON"; `plan --scaling` and the scaling page read it back). cli prints it. */
#ifndef ST_FIT_FIT_JSON_H
#define ST_FIT_FIT_JSON_H

#include <cjson/cJSON.h>

#include "fit/fit.h"

/* The whole result r of fitting table t (read from path) with options o as one JSON object
 * (docs/fit.md "JSON"); non-finite numbers and intervals without a bootstrap are null. The caller
 * owns it (cJSON_Delete). */
cJSON *fit_json(const char *path, const FitTable *t, const FitOptions *o, const FitResult *r);

#endif
