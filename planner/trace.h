// One iteration's schedule as a list of timed events, and its Chrome
// trace-event JSON (opens in Perfetto and chrome://tracing; docs/traces.md).
// The planner fills it with the predicted schedule (planner/trace_predict.h),
// the runtime with the measured one (runtime/trace_measure.h); both use the
// kinds below, so the two files carry the same event names and lie side by side.
#ifndef MIST_TRACE_H
#define MIST_TRACE_H
#include <stddef.h>
#include <stdio.h>

// What an event is; its name in the JSON is trace_kind_names[kind].
typedef enum {
    TRACE_FORWARD,      // a micro-batch's forward on the stage (compute)
    TRACE_BACKWARD,     // its backward
    TRACE_BUBBLE,       // the compute stream idle: waiting for a neighbour stage
    TRACE_GRAD_NORM,    // after the last backward: gradient norm and the step's scheduling
    TRACE_COLLECTIVES,  // side stream: DP weight gathers and gradient sync
    TRACE_H2D,          // side stream: host->device copies (offloaded states, activations)
    TRACE_D2H,          // side stream: device->host copies
    TRACE_TOP_KINDS,    // the kinds above tile a stage's rows; those below nest inside a pass
    TRACE_BLOCK_FORWARD = TRACE_TOP_KINDS,  // block `block`'s forward inside a forward pass
    TRACE_BLOCK_BACKWARD,                   // its backward inside a backward pass
    TRACE_BLOCK_RECOMPUTE,                  // a checkpointed block's forward again, before its backward
    TRACE_PRE_FORWARD,                      // the embedding (first stage)
    TRACE_PRE_BACKWARD,
    TRACE_POST_FORWARD,                     // final norm, head and loss (last stage)
    TRACE_POST_BACKWARD,
    TRACE_BLOCK_RECOMPUTE_ATT,              // selective recompute: the attention core's forward again, before the
                                            // backward of a block not checkpointed
    TRACE_KINDS
} TraceKind;
// The block kinds' names hold the model's block index ("block %d forward", 0-based).
extern const char *const trace_kind_names[TRACE_KINDS];

// The rows of a stage in the trace ("thread" ids): compute, then one per side stream.
typedef enum { TRACE_TRACK_COMPUTE, TRACE_TRACK_COLLECTIVES, TRACE_TRACK_H2D, TRACE_TRACK_D2H, TRACE_TRACKS } TraceTrack;

typedef struct {
    int stage;       // pipeline stage: the trace's "process"
    int rank;        // world rank that ran it; -1 for the predicted schedule (every rank of the stage)
    int track;       // TraceTrack
    int kind;        // TraceKind
    int microbatch;  // 0..G-1, -1 for none
    double start, dur;  // seconds from the iteration's start
    int block;       // the model's block (0-based) of a block kind; -1 for the others
    int chunk;       // interleaved plans ([plan] virtual > 1): 1 + the model chunk ([stage.N]) the event belongs
                     // to, so that 0, what initializers leaving it out give, means a plain pipeline's event
} TraceEvent;
// An event's name: trace_kind_names with its block number filled in; an
// interleaved plan's passes carry their chunk's stage index ("stage 2 forward"),
// as a rank runs several chunks' passes on one row.
void trace_event_name(const TraceEvent *e, char *dst, size_t len);

typedef struct {
    TraceEvent *ev;
    int n, cap;
    int stages, G;             // the processes: the stages, or an interleaved plan's pipeline ranks
    int virtual_chunks;        // [plan] virtual: chunks per pipeline rank (0 or 1: a plain pipeline)
    double iteration_seconds;  // the iteration the events cover
    const char *source;        // "predicted" or "measured"
} Trace;

// 0, or -1 when out of memory.
int trace_add(Trace *t, TraceEvent e);
void trace_free(Trace *t);
// Seconds of the top-level events of one stage and rank on the compute track (rank -1: every rank).
double trace_compute_track_seconds(const Trace *t, int stage, int rank);
// src as the inside of a JSON string (quotes and backslashes escaped, control
// characters dropped), cut to fit dst.
void trace_json_escape(char *dst, size_t len, const char *src);
// The trace as one JSON object; `about` is added to "otherData" verbatim (a JSON
// object's members without braces, or NULL). 0, or -1 on a write error.
int trace_write_json(const Trace *t, const char *about, FILE *f);

#endif
