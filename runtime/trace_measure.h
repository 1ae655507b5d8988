// The measured schedule of one training iteration (docs/traces.md): [log]
// trace = FILE records iteration [log] trace_iteration with the backend's own
// timers (CUDA events on a GPU, the clock on the CPU), and rank 0 writes every
// rank's events into one Chrome trace with the predicted trace's event names
// (planner/trace.h): forward and backward passes, the bubbles between them and
// the gradient norm at the end. Each rank's times count from its own start of
// the iteration, which a barrier lines up across ranks.
#ifndef MIST_TRACE_MEASURE_H
#define MIST_TRACE_MEASURE_H
#include <stddef.h>
#include <stdint.h>
#include "base/schema.h"
#include "kernels/backend.h"
#include "planner/trace.h"

struct Grid;
struct CommBackend;

typedef struct TraceMeasure {
    Backend *be;
    BackendStream *stream;  // the stream whose work the marks time
    int64_t iteration;      // 0-based iteration to record; -1: none
    const char *path;       // where the trace goes ([log] trace)
    int G;
    int virtual_chunks;     // [plan] virtual: the rank's model chunks (0 or 1: a plain stage)
    int recording;
    int n, cap;
    BackendEvent **ev;      // the marks, in order
    int *what, *microbatch; // per mark: TraceKind of what begins there, TRACE_BUBBLE for "a pass ended",
                            // TRACE_PART_END for "the nested part begun by the mark before ended"
    int *block;             // per mark: the block of a block kind
    int *chunk;             // per mark: the model chunk ([stage.N]) of a pass (trace_measure_pass), else -1
    double host_seconds;    // the iteration as the training loop's clock measured it (trace_measure_end)
} TraceMeasure;

// A nested part's end mark (trace_measure_part_end).
enum { TRACE_PART_END = -2 };

// Off (iteration < 0) or ready to record 0-based `iteration` of G micro-batches,
// each of at most `parts` nested parts (blocks, recomputes, pre / post) over its
// forward and backward. 0, or -1 when out of memory.
int trace_measure_init(TraceMeasure *m, Backend *be, BackendStream *s, int64_t iteration, int G, int parts);
// [log] trace (empty: off) and trace_iteration (1-based, as the log counts) for a
// run of iterations start+1 .. steps: the iteration is clamped into the run, so a
// trace is always written. v: the rank's model chunks ([plan] virtual; 1 for a
// plain stage), each running G forwards and G backwards; parts: the nested parts
// of one micro-batch over all of them. root checks that the path can be written.
// log must outlive m. 0, or -1 with err.
int trace_measure_setup(TraceMeasure *m, Backend *be, BackendStream *s, const LogConfig *log, int64_t start,
                        int64_t steps, int G, int v, int parts, int root, char *err, size_t errlen);
void trace_measure_free(TraceMeasure *m);
// At the top of iteration `it` (collective over the world when it is the one
// recorded: a barrier lines the ranks up). 1 when recording it.
int trace_measure_begin(TraceMeasure *m, int64_t it, const struct CommBackend *comm, const struct Grid *grid);
// A mark in the stream: `what` (TRACE_FORWARD, TRACE_BACKWARD, TRACE_GRAD_NORM) begins
// now, or TRACE_BUBBLE: the pass before has ended. NULL m or not recording: nothing.
void trace_measure_mark(TraceMeasure *m, int what, int microbatch);
// trace_measure_mark of a pass (TRACE_FORWARD, TRACE_BACKWARD) of model chunk `chunk`
// (its [stage.N]): an interleaved rank's passes, and the parts inside them, carry it.
void trace_measure_pass(TraceMeasure *m, int what, int microbatch, int chunk);
// A nested part of the pass in progress (kind TRACE_BLOCK_FORWARD ...
// TRACE_POST_BACKWARD, block: the model's block index or -1) begins / ends now.
// The model runtime calls them only with a trace (ModelRuntime.trace non-NULL).
void trace_measure_part(TraceMeasure *m, int kind, int block);
void trace_measure_part_end(TraceMeasure *m);
// The end of the recorded iteration, which the loop's clock measured as
// host_seconds (written beside the events: what they should add up to). Waits for the marks.
void trace_measure_end(TraceMeasure *m, double host_seconds);
// After each iteration (collective over the world after the recorded one): ends
// the recording and writes the trace; a write error ends the job.
void trace_measure_finish(TraceMeasure *m, double host_seconds, const struct CommBackend *comm,
                          const struct Grid *grid);
// Collective over the world after trace_measure_end: rank 0 writes every rank's
// events to path, with each rank's host_seconds as "rank_iteration_seconds". 0,
// or -1 with err on rank 0 (a write error).
int trace_measure_write(TraceMeasure *m, const struct CommBackend *comm, const struct Grid *grid, int G,
                        const char *path, char *err, size_t errlen);

#endif
