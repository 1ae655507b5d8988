// What a measured op table does not cover for one plan (docs/plan-analyze.md,
// "Measured op table"): each (op, b, s, tp) of the plan's stages the table
// neither lists nor interpolates, once, with the rule that prices it instead.
#ifndef MIST_OPTABLE_REPORT_H
#define MIST_OPTABLE_REPORT_H

#include <stdio.h>
#include "base/plan.h"
#include "base/schema.h"
#include "planner/optable.h"

#define OPTABLE_MAX_MISSES 128

typedef struct {
    char op[32];
    int b, s, tp;
    OptableRule rule;  // OPTABLE_MODEL (a fallback) or OPTABLE_EXTRAPOLATED
} OptableMiss;

typedef struct {
    int n, more;  // more: misses beyond OPTABLE_MAX_MISSES, not listed
    OptableMiss miss[OPTABLE_MAX_MISSES];
} OptableMisses;

// The misses of plan's stages (none without a table).
void optable_plan_misses(const OpTable *t, const MistConfig *cfg, const Plan *plan, OptableMisses *out);
// One stderr line per miss: a fallback to the model, or an extrapolation (a warning).
void optable_misses_print_text(const OptableMisses *m, FILE *f);
// The JSON array of the misses: [{"op": ..., "b": ..., "s": ..., "tp": ..., "rule": "model"|"extrapolated"}]
void optable_misses_print_json(const OptableMisses *m, FILE *f);

#endif
