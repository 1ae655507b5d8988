// Reading model.ini: parse (inih), apply -o overrides, fill family defaults,
// resolve relative paths, validate. Rank 0 calls config_load() and
// broadcasts the resulting MistConfig; other ranks never open the file.
//
// Every error is one message naming where the bad value came from (the
// file and line, or the -o override), the key, the value, what is allowed,
// and a hint. The functions return 0 or 2 (= the configuration exit code).
#ifndef MIST_CONFIG_LOAD_H
#define MIST_CONFIG_LOAD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "core/schema.h"

#define MIST_EXIT_CONFIG 2

// Every field at its documented default (family gpt, no plan stages).
void config_defaults(MistConfig *cfg);

// Parse `path`, then apply `overrides` ("section.key=value", in order, after
// the file). world_size: ranks in the job; a fixed plan must need exactly
// that many (0 = do not check). Returns 0, or 2 with the message in err.
int config_load(MistConfig *cfg, const char *path, const char *const *overrides, int n_overrides,
                int world_size, char *err, size_t errlen);

// A plan file: [plan] G, stages (mode = fixed allowed) and one [stage.N] per stage. 0 or 2.
int plan_file_load(Plan *plan, const char *path, char *err, size_t errlen);

// The same, then the checks of plan_validate against the model, each message at
// the plan file's line (world_size 0: no rank-count check). 0 or 2.
int plan_file_load_checked(Plan *plan, const char *path, const ModelConfig *m, int64_t global_batch, int world_size,
                           char *err, size_t errlen);

// Checks a plan against the model and batch: stage count, every stage's
// dp/tp/b/zero/ckpt/offload, layers summing to the model's, b*dp*G equal to
// the global batch, tp dividing heads/kv_heads/ffn, and (world_size > 0)
// the rank count. `where` prefixes the message (a file name). 0 or 2.
int plan_validate(const Plan *plan, const ModelConfig *m, int64_t global_batch, int world_size,
                  const char *where, char *err, size_t errlen);

// The plan as [plan] + [stage.N] sections that plan_file_load() reads back.
void plan_write_ini(const Plan *plan, FILE *f);

// A readable summary of the whole configuration (for --dry-run).
void config_print_summary(const MistConfig *cfg, FILE *f);

// The hardware profile the run prices plans with: the measured one when mist-train
// measured it ([cluster] measure_transfers), else [cluster] hardware (default cpu).
int config_profile(const MistConfig *cfg, HwProfile *out, char *err, size_t errlen);

// Names of enum values, for messages and summaries.
const char *config_family_name(ModelFamily f);
const char *config_precision_name(Precision p);

#endif
