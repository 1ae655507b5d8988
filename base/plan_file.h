// Plan files: a [plan] section (G, stages, mode = fixed) and one [stage.N]
// section per stage, read, checked, written and printed. Every per-stage key
// comes from the [stage.N] rows of base/config_keys.c: a new knob there is
// read, range-checked, written and printed here without further code.
// The functions return 0 or 2 (MIST_EXIT_CONFIG) with the message in err.
#ifndef MIST_PLAN_FILE_H
#define MIST_PLAN_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "base/schema.h"

// A plan file: [plan] G, stages (mode = fixed allowed) and one [stage.N] per stage. 0 or 2.
int plan_file_load(Plan *plan, const char *path, char *err, size_t errlen);

// The same, then the checks of plan_validate against the model, each message at
// the plan file's line (world_size 0: no rank-count check). 0 or 2.
int plan_file_load_checked(Plan *plan, const char *path, const ModelConfig *m, int64_t global_batch, int world_size,
                           char *err, size_t errlen);

// Checks a plan against the model and batch: stage count, every stage's
// knobs in range, layers summing to the model's, b*dp*G equal to the global
// batch, tp dividing heads/kv_heads/ffn, and (world_size > 0) the rank
// count. `where` prefixes the message (a file name). 0 or 2.
int plan_validate(const Plan *plan, const ModelConfig *m, int64_t global_batch, int world_size,
                  const char *where, char *err, size_t errlen);

// The plan as [plan] + [stage.N] sections that plan_file_load() reads back.
void plan_write_ini(const Plan *plan, FILE *f);

// Whether two stage plans hold the same value, bit for bit, in every [stage.N] knob
// (memcmp would also compare the struct's padding, which an int knob may add).
int stage_plan_equal(const StagePlan *a, const StagePlan *b);

// The stages as a table, one row per stage and one column per [stage.N] key (the
// configuration summary's plan lines).
void plan_print_stages(const Plan *plan, FILE *f);

#endif
