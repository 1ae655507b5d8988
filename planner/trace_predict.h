// The predicted schedule of one iteration (docs/traces.md): every stage's
// forwards and backwards in 1F1B order (an interleaved plan: every pipeline
// rank's chunk passes in the interleaved order), placed on a timeline from the stage
// model's per-micro-batch times, the bubbles between them, and the side
// streams' work (collectives, host<->device copies) under each pass.
#ifndef MIST_TRACE_PREDICT_H
#define MIST_TRACE_PREDICT_H
#include "planner/analyze.h"
#include "planner/trace.h"

// The 1F1B order the predicted trace places a plain stage's passes in
// (interleaved_order with v = 1), which should be the runtime's
// (runtime/pipeline_schedule.h): w = min(S - s - 1, G) forwards, then one
// forward and one backward until the forwards are done, then the remaining
// backwards. out[k] = microbatch for a forward, -1 - microbatch for a
// backward; 2G entries. 0, or -1 (out of memory, a bad shape).
int trace_1f1b_order(int stage, int S, int G, int *out);

// Fills t (empty on entry) from an analysis. 0, or -1 when out of memory.
int trace_predict(Trace *t, const PlanAnalysis *a);

#endif
