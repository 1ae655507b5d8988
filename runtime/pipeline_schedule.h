// The order in which one pipeline stage runs the forward and backward passes
// of an iteration's G micro-batches: non-interleaved 1F1B.
//
// Stage s of S first runs w = min(S - s - 1, G) forwards (warm-up: the later
// stages need inputs before any backward can start), then alternates one
// forward and one backward until every forward is done, then runs the
// remaining backwards (cool-down). Micro-batches go through each phase in
// order 0, 1, ..., G-1.
//
// At most min(S - s, G) micro-batches have saved activations at once on stage
// s: the planner's memory model keeps p = min(S - s - 1, G - 1) extra ones in
// flight, p + 1 = min(S - s, G). With uniform stages of fwd + bwd time t the
// iteration takes (G + S - 1) * t, the planner's (G - 1) * max t + sum t.
#ifndef MIST_PIPELINE_SCHEDULE_H
#define MIST_PIPELINE_SCHEDULE_H

typedef enum { PIPE_FORWARD = 0, PIPE_BACKWARD = 1 } PipeKind;

typedef struct {
    PipeKind kind;
    int microbatch;  // 0 .. G-1
} PipeAction;

// The 2G actions of stage `stage` (0 .. stages-1) in execution order.
// out must hold 2*G entries. Returns 2*G, or -1 for stage outside [0, stages)
// or G < 1.
int pipeline_1f1b(int stage, int stages, int G, PipeAction *out);

// Forwards before the first backward on that stage: min(stages - stage - 1, G).
int pipeline_warmup(int stage, int stages, int G);

// Most micro-batches whose activations are held at once: min(stages - stage, G).
int pipeline_max_in_flight(int stage, int stages, int G);

#endif
