// One training step of bench_train recorded with the runtime's own marks
// (runtime/trace_measure.h: the pass, block and pre / post marks mist-train's
// [log] trace writes), as a Chrome trace and a summary of where the step's
// time goes (benchmarks/gpu/bench_timeline.c).
#ifndef MIST_BENCH_TIMELINE_H
#define MIST_BENCH_TIMELINE_H
#include <stdint.h>
#include "runtime/model_runtime.h"

// One optimizer step of r (its optimizer set up, as bench_train's cases have it) on the
// tokens in[N], targets tg[N] (losses: room for N floats), recorded: the Chrome trace
// goes to path, the summary to stdout with `label` (the case and its attention), ending
// in one line "timeline_json {...}" for benchmarks/gpu/last_json.sh. 0, or 1 with a
// message on stderr.
int timeline_step(ModelRuntime *r, Backend *be, const int32_t *in, const int32_t *tg, int N, float *losses,
                  const char *path, const char *model, const char *attention);

#endif
