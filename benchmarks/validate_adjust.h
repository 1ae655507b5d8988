// The stated runtime differences of benchmarks/bench_validate: what a published
// run's runtime did that ours does not, each priced by the cost model's own
// rates (the row's hardware profile) and added to the plan's stage times, so
// the table can print the raw prediction and the prediction of the published
// runtime side by side. The vocabulary, its math and sources: RESULTS.md,
// "Validation", and the comments in validate_adjust.c.
#ifndef MIST_VALIDATE_ADJUST_H
#define MIST_VALIDATE_ADJUST_H

#include <stddef.h>
#include "base/profile.h"
#include "base/schema.h"
#include "planner/analyze.h"

typedef enum {
    ADJ_PLAIN_ATTENTION,         // softmax attention with the s x s scores in memory, no causal skipping
    ADJ_ATTENTION_DROPOUT,       // dropout on the attention probabilities (the s x s mask)
    ADJ_GRAD_ALLREDUCE_AFTER_BW, // the DP gradient all-reduce after the last backward, not overlapped
    ADJ_FP32_GRAD_ALLREDUCE_AFTER_BW,  // the same of fp32 gradients (a bf16 run accumulating in fp32)
    ADJ_GRAD_ACCUMULATION_ADD,   // each micro-batch's gradients added into the accumulated ones by a separate add
    ADJ_FP32_GRAD_ACCUMULATION_ADD,  // the same into fp32 gradients, through an fp32 copy (DeepSpeed's bf16 optimizer)
    ADJ_COUNT
} AdjustKind;

extern const char *const adjust_names[ADJ_COUNT];

// Parse one `adjust = NAME` value; returns the kind, or -1 (then `allowed` lists the names).
int adjust_parse(const char *name, char *allowed, size_t cap);

// The iteration time with the adjustments of `mask` (bit k = AdjustKind k) applied to the
// analysed plan: every stage's steady and edge times grow by the adjustments' terms and the
// 1F1B total is taken again. `each[k]` gets what adjustment k alone adds (seconds; 0 when not in
// the mask). Returns the adjusted iteration time.
double adjust_iteration(const PlanAnalysis *a, const MistConfig *cfg, const HwProfile *hw, unsigned mask,
                        double each[ADJ_COUNT]);

#endif
