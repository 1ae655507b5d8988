// Reading model.ini: parse (inih), apply -o overrides, fill family defaults,
// resolve relative paths, validate. Rank 0 calls config_load() and
// broadcasts the resulting MistConfig; other ranks never open the file.
//
// Every error is one message naming where the bad value came from (the
// file and line, or the -o override), the key, the value, what is allowed,
// and a hint. The functions return 0 or 2 (= the configuration exit code).
// Plan files (a [plan] and its [stage.N] sections on their own): base/plan_file.h.
#ifndef MIST_CONFIG_LOAD_H
#define MIST_CONFIG_LOAD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "base/schema.h"

#define MIST_EXIT_CONFIG 2

// Every field at its documented default (family gpt, no plan stages).
void config_defaults(MistConfig *cfg);

// Parse `path`, then apply `overrides` ("section.key=value", in order, after
// the file). world_size: ranks in the job; a fixed plan must need exactly
// that many (0 = do not check). Returns 0, or 2 with the message in err.
int config_load(MistConfig *cfg, const char *path, const char *const *overrides, int n_overrides,
                int world_size, char *err, size_t errlen);

// A readable summary of the whole configuration (for --dry-run).
void config_print_summary(const MistConfig *cfg, FILE *f);

// The hardware profile the run prices plans with: the measured one when mist-train
// measured it ([cluster] measure_transfers), else [cluster] hardware (default cpu).
int config_profile(const MistConfig *cfg, HwProfile *out, char *err, size_t errlen);

// Names of enum values, for messages and summaries.
const char *config_family_name(ModelFamily f);
const char *config_precision_name(Precision p);

#endif
