// The plan search (docs/design.md §3, §7): the fastest plan that fits, for a model,
// a batch, a cluster of nodes x gpus_per_node devices and a hardware profile.
//
//   search_space.c  the discrete space: stage counts, meshes, G, what each
//                   --space allows, the offload grid, the runtime's limits
//   search_stage.c  intra-stage: one batched evaluation per class of
//                   candidates, the memory filter, the (t, d) Pareto frontier
//   search_cand.c   a packed candidate <-> the stage plan (StagePlan) it is
//   search_uniform.c  the uniform spaces: one configuration for every stage
//   search_combo.c  one (stages, G, meshes) combination: its frontiers per
//                   layer count and the inter-stage solve (label-setting DP)
//   search.c        the outer loop over the combinations with bounds, warm
//                   starts and threads; the winner confirmed by lp_solve
//   search_closest.c  the closest plan when nothing fits
//   search_report.c the statistics and the "nothing fits" explanation
//
// How it works and why each pruning is safe: docs/plan-search.md.
#ifndef MIST_SEARCH_H
#define MIST_SEARCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "planner/optable.h"
#include "base/plan.h"
#include "base/profile.h"
#include "base/schema.h"

// What the executor can run. mist-plan searches without limits; mist-train
// passes what its runtime executes today (runtime/train.h), and the limits
// widen as the runtime grows. Zero fields mean "no limit".
typedef struct SearchLimits {
    int max_stages;   // pipeline stages, 0 = any
    int max_tp;       // tensor-parallel degree, 0 = any
    int max_tp_staged;  // tensor-parallel degree in plans with several stages, 0 = any
    int zero_levels;  // bit z set: ZeRO level z allowed; 0 = all four
    int no_offload;   // 1: every offload ratio stays 0
    int no_ckpt;      // 1: no activation checkpointing
    int interleave_min_ranks;  // interleaved 1F1B only with at least this many pipeline ranks; 0 = 2
    int no_lean;      // 1: no memory-lean layers ([stage.N] lean stays 0)
} SearchLimits;

typedef struct {
    int nodes, gpus_per_node;  // the cluster: nodes x gpus_per_node devices (TP stays inside a node)
    PlanSpace space;           // megatron | zero | ckpt | offload | full
    SearchLimits limits;
    int64_t capacity;          // device bytes per rank; 0: [cluster] device_memory, else the profile's
    int frontier_max;          // > 0: keep a bounded sample of each frontier (both ends kept); 0: all of it
    int offload_steps_wg;      // grid of wo and go: multiples of 1/steps; 0: 4 (quarters), at most 4
    int offload_steps_oa;      // grid of oo and ao; 0: 8 (eighths), at most 8
    int confirm_lp;            // 1: re-solve the winning inter-stage problem with lp_solve (milp.h)
    int progress;              // 1: a progress line on stderr once the search runs longer than a second
    int threads;               // > 1: that many threads search the combinations (same plan as one thread)
} SearchOptions;

// Defaults: the config's [cluster] nodes x gpus_per_node and [plan] space,
// no limits, the whole frontier, lp_solve confirmation on, no progress line,
// one thread.
void search_options_default(SearchOptions *o, const MistConfig *cfg);

typedef struct {
    long long candidates;          // stage configurations evaluated (one per batch column)
    long long candidates_fit;      // of those, within device (and host) memory
    long long time_evaluations;    // of those, rows whose time (t, d) was evaluated (the rest: memory only)
    long long classes;             // batched evaluations: (G, mesh, layers, ckpt / in-flight) groups
    long long frontiers;           // (stage position, layer count) frontiers built
    long long frontier_points;     // points over all of them
    int frontier_max_points;       // largest frontier
    long long combos;              // (stages, G, mesh set) combinations of the space
    long long combos_searched;     // ... searched (the rest were bounded out)
    long long dp_solves;           // inter-stage solves with the label-setting DP (milp_solve_dp)
    double dp_seconds;
    long long lp_solves;           // confirmations with lp_solve (milp_solve)
    double lp_seconds;
    int lp_agrees;                 // 1: lp_solve found the same optimum (relative 1e-9); -1: not run
    long long models_built;        // stage models compiled (one per stage kind x ZeRO x offload pattern)
    double model_seconds;          // time compiling them
    double eval_seconds;           // time in stage_eval_batch
    double seconds;                // wall time of the whole search
} SearchStats;

typedef struct {
    int found;                 // 1: plan is the fastest plan that fits
    Plan plan;
    double iteration_seconds;  // its predicted 1F1B iteration time (pattern-specialised evaluation)
    // nothing fits (found == 0): the plan that came closest and by how much
    int have_closest;
    Plan closest;
    int closest_stage;         // its stage that misses by the most
    int64_t shortfall;         // bytes over capacity on that stage
    int closest_host;          // 1: that shortfall is of host memory (per rank), 0: of device memory
    int64_t capacity;          // the capacity searched against
    int64_t host_capacity;     // host bytes per rank searched against (analyze.h); 0 = not checked
    // nothing can fit, found before searching: the model's states alone (states_bytes:
    // parameters x (weight + gradient + optimizer) bytes) exceed every device's and host's
    // memory together (cluster_bytes); 0 when not the case or the host is not checked
    double states_bytes, cluster_bytes;
    int ranks;                 // devices searched over (nodes x GPUs per node)
    PlanSpace space;           // the space searched (a hint never proposes the one already used)
} SearchResult;

// Search. Returns 0 when a plan fits (result->found), 3 when nothing in the
// space fits (result->closest, shortfall), 2 with a message in err for a
// request that cannot be searched (e.g. no stage count divides the devices).
int plan_search(const MistConfig *cfg, const HwProfile *hw, const OpTable *table, const SearchOptions *opt,
                SearchResult *result, SearchStats *stats, char *err, size_t errlen);

// Name of a space ("megatron" .. "full").
const char *search_space_name(PlanSpace s);
// Parse a space name; returns 0 or -1.
int search_space_parse(const char *name, PlanSpace *out);

// Statistics as text lines, and as the members of a JSON object (no braces).
void search_stats_print_text(const SearchStats *s, const SearchOptions *o, FILE *f);
void search_stats_print_json(const SearchStats *s, const SearchOptions *o, FILE *f);
// "nothing fits" explanation (closest plan, shortfall) for stderr.
void search_print_no_fit(const SearchResult *r, const MistConfig *cfg, FILE *f);

#endif
