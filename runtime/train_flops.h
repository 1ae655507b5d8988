// FLOP rates for the training log: model FLOPs (Megatron convention) and
// the FLOPs the kernels execute (recompute included), both from the planner's
// model of the running plan, against the [cluster] hardware profile's peak.
#ifndef MIST_TRAIN_FLOPS_H
#define MIST_TRAIN_FLOPS_H
#include <stddef.h>
#include <stdint.h>
#include "base/schema.h"

typedef struct {
    double model_flops;        // per iteration, whole job
    double hw_flops;           // per iteration, whole job, recompute included
    double peak_flops;         // per device, the training dtype's dense peak; 0: unknown
    double predicted_seconds;  // the planner's iteration time for this plan
    int staged_collectives;    // the profile prices collectives as staged through host memory
    int world;                 // ranks
    char hardware[64];         // profile name
    // the planner's fit test of the plan on that profile: "" when it fits, else
    // which stage misses device or host memory and by how much
    char misfit[256];
    int64_t capacity;          // the planner's device capacity on that profile, bytes per device
} TrainFlops;

// Evaluates the running plan (cfg->plan.plan) with the planner's cost model.
// Returns 0, or -1 with err (then rates fall back to model FLOPs without a peak).
int train_flops_init(TrainFlops *f, const MistConfig *cfg, int world, char *err, size_t errlen);

// Rates for an iteration that took `seconds`: model TFLOP/s per device, and
// MFU / HFU as fractions of the peak (0 when the peak is unknown).
void train_flops_rates(const TrainFlops *f, double seconds, double *tflops_per_device, double *mfu, double *hfu);

#endif
