// Analyze a fixed plan: per-stage time and memory from the cost model, the
// 1F1B iteration time, throughput, MFU/HFU, and whether every stage fits.
// Printed as a table or as one JSON object (schema: docs/plan-analyze.md).
#ifndef MIST_ANALYZE_H
#define MIST_ANALYZE_H

#include <stdint.h>
#include <stdio.h>
#include "planner/stage_model.h"
#include "planner/optable_report.h"
#include "base/plan.h"
#include "base/profile.h"
#include "base/schema.h"

typedef struct {
    int first_layer, last_layer;  // inclusive block indices
    StagePlan sp;
    int p;                        // extra in-flight micro-batches, min(S - i - 1, G - 1)
    double out[ST_OUTPUTS];       // the stage model's outputs (per rank)
    int64_t peak;                 // max(fwd, bwd) peak bytes
    int fits;                     // device and host both
    int64_t shortfall;            // peak - capacity when the device does not fit, else 0
    int64_t host;                 // host bytes per rank
    int64_t host_shortfall;       // host - host_capacity when the host does not fit, else 0
} StageAnalysis;

typedef struct {
    int num_stages, G;
    StageAnalysis stage[MIST_MAX_STAGES];
    int64_t params_total;        // whole model, exact
    int64_t capacity;            // device bytes per rank
    int64_t host_capacity;       // host bytes per rank; 0 = not checked
    int ranks_per_node;          // the ranks that share a node's host memory
    double iteration_seconds;    // 1F1B total
    double tokens_per_second;
    double model_flops;          // per iteration, Megatron convention
    double hw_flops;             // per iteration, all ranks, recompute included
    double peak_flops;           // per device, the training dtype's dense peak
    int world;                   // ranks
    double mfu, hfu;
    int all_fit;
    int first_bad;               // first stage that does not fit, -1 if all fit
    char hardware[64];
    int staged_collectives;  // the profile's: collectives through host memory, copies on the critical path
    OptableMisses table_misses;  // the shapes the op table does not cover (none without a table)
    // [plan] virtual = v > 1 (interleaved 1F1B): the stages above are chunks, chunk c on pipeline
    // rank c mod P; a rank holds its chunks together (docs/pipeline.md, "Interleaved 1F1B"):
    // its peak is the sum of its chunks' peaks, and it fits when that sum does
    int virtual_chunks, pipeline_ranks;  // v (1: plain 1F1B) and P = stages / v
    int64_t rank_peak[MIST_MAX_STAGES], rank_host[MIST_MAX_STAGES];  // per pipeline rank (v > 1)
} PlanAnalysis;

// Host bytes each rank may keep (offloaded states and activations, I/O and
// pipeline buffers): the node's host memory ([cluster] host_memory, else the
// profile's) shared evenly by the node's ranks; 0 = not checked.
int64_t host_capacity_per_rank(const MistConfig *cfg, const HwProfile *hw, int ranks_per_node);

// Check the plan against the config (layers, batch, world) and evaluate it.
// Returns 0, or -1 with err for a plan that is inconsistent (a usage error).
int plan_analyze(PlanAnalysis *a, const MistConfig *cfg, const Plan *plan, const HwProfile *hw, const OpTable *table,
                 char *err, size_t errlen);

void analysis_print_text(const PlanAnalysis *a, const MistConfig *cfg, FILE *f);
// "100.625 s", "708.868 ms" or "12.5 us": a time as the tables print it
const char *analysis_seconds_text(double s, char *buf, size_t len);
void analysis_print_json(const PlanAnalysis *a, const MistConfig *cfg, FILE *f);

#endif
