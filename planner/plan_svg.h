// A picture of a plan as one SVG file, drawn without external tools
// (docs/traces.md): the predicted 1F1B timeline of one iteration, one row per
// stage (an interleaved plan: per pipeline rank, its chunks' passes) with its
// bubbles and the side streams under compute, and per stage (pipeline rank) a
// bar of its device memory (weights, gradients, optimizer state, activations,
// buffers, transient working set) against the device's capacity.
#ifndef MIST_PLAN_SVG_H
#define MIST_PLAN_SVG_H
#include <stdio.h>
#include "planner/analyze.h"
#include "planner/trace.h"

// predicted: trace_predict's events of the same analysis. 0, or -1 on a write error.
int plan_svg_write(const PlanAnalysis *a, const Trace *predicted, const char *title, FILE *f);

#endif
