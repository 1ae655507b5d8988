// What each feature buys: the best plan of every space from megatron-mist up to
// the one searched (megatron-mist ⊂ megatron ⊂ zero ⊂ ckpt ⊂ offload ⊂ full, docs/plan-search.md),
// each searched with the same cluster, hardware, batch and options, so the
// step from one row to the next is what the added feature is worth under the
// cost model. `mist-plan --compare` prints it; bench_quality sweeps it.
#ifndef MIST_SEARCH_COMPARE_H
#define MIST_SEARCH_COMPARE_H

#include <stdio.h>
#include "planner/search.h"

typedef struct {
    int found;                 // 1: a plan of this space fits
    int no_layout;             // 1: the space has no layout for this cluster and batch (memory aside)
    double iteration_seconds;  // its predicted iteration time (INFINITY when none fits)
    Plan plan;                 // the plan found, or the closest one (have_closest)
    int have_closest;          // nothing fits, but this plan came closest
    int closest_stage;         // ... its stage short by the most
    int64_t shortfall;         // ... by this many bytes
    int closest_host;          // ... of host memory (1) or device memory (0)
    double seconds;            // search wall time
    double mfu;                // model FLOPs / (devices x dense peak x iteration time); 0 when none fits
} SpaceBest;

// the full space without one of the seeds' techniques (search_compare_seeds)
enum { WITHOUT_PARO = 0, WITHOUT_LEAN = 1, WITHOUT_COUNT = 2 };

typedef struct {
    int count;                      // spaces compared: megatron-mist .. `upto`
    SpaceBest space[SPACE_FULL + 1];
    int have_without;               // search_compare_seeds filled `without`
    SpaceBest without[WITHOUT_COUNT];  // full without PaRO's I-scope codes; full without lean layers
} SpaceComparison;

// Searches every space from megatron-mist to `upto` with options `so` (its space is
// replaced per row, its progress line turned off). `known`, when not NULL, is
// the result already found for `upto` with the same options: it is taken as
// that row instead of searching again. Returns 0, or 2 with err set when a
// space cannot be searched at all (the same layouts exist in every space, so
// that is the caller's first search failing too); a smaller space without a layout (uniform
// stages need S | L) is a row with no_layout set.
int search_compare_spaces(const MistConfig *cfg, const HwProfile *hw, const OpTable *table, const SearchOptions *so,
                          PlanSpace upto, const SearchResult *known, double known_seconds, SpaceComparison *out,
                          char *err, size_t errlen);

// When the comparison reaches `full`: the full space again without PaRO's sharding codes
// (ZeRO 0-3 only) and without lean layers, so that what each buys shows (rows printed after
// full's). 0, or 2 with err set.
int search_compare_seeds(const MistConfig *cfg, const HwProfile *hw, const OpTable *table, const SearchOptions *so,
                         SpaceComparison *out, char *err, size_t errlen);

// The time of space `base` (megatron-mist or megatron) over row i's: NAN when either fits nothing
// (or base was not compared).
double search_compare_speedup(const SpaceComparison *c, PlanSpace base, int i);

// One line describing a plan's shape for a table cell: stages, G, meshes,
// micro-batch sizes, ZeRO levels, checkpointed blocks, offloaded states.
void plan_summary(const Plan *p, char *buf, size_t len);

// The table (one row per space) and the JSON array members of "compare".
void search_compare_print_text(const SpaceComparison *c, FILE *f);
void search_compare_print_json(const SpaceComparison *c, FILE *f);
// The rows of search_compare_seeds as JSON array members (nothing when it did not run).
void search_compare_print_without_json(const SpaceComparison *c, FILE *f);

#endif
