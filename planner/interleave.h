// The interleaved 1F1B order (Narayanan et al. 2021, section 2.2.2; Megatron-LM's
// forward_backward_pipelining_with_interleaving) and what it holds in flight.
//
// A plan with [plan] virtual = v > 1 has S = P * v model chunks ([stage.N] in
// model order) on P pipeline ranks: chunk c runs on pipeline rank c mod P, so
// rank r holds chunks r, r + P, ..., r + (v - 1) P. A micro-batch's forward
// visits chunks 0, 1, ..., S - 1 (rank 0, 1, ..., P - 1, back to rank 0 for
// chunk P, ...), its backward the reverse.
//
// Each rank runs G * v forward and G * v backward chunk-passes. Its k-th
// forward runs, with n = k mod (P v),
//     chunk (n div P) * P + r  on micro-batch (k div (P v)) * P + (n mod P),
// its k-th backward the chunk (v - 1 - n div P) * P + r on the same micro-batch
// formula: groups of P consecutive micro-batches go through the rank's chunks
// one chunk at a time (hence G must be a multiple of P). Rank r first runs
//     w = min((P - r - 1) * 2 + (v - 1) * P, G v)
// forwards (warm-up), then alternates one forward and one backward, then runs
// the remaining backwards (cool-down). With every chunk taking f forward and b
// backward the iteration takes G v (f + b) + (P - 1)(f + b): the bubble is
// (P - 1)/v of a micro-batch's fwd + bwd on a rank (v (f + b)), v times smaller
// than plain 1F1B's (tests/test_interleave.c checks it on a timed simulation).
//
// v = 1 is plain 1F1B (runtime/pipeline_schedule.h): w = min(P - r - 1, G).
#ifndef MIST_INTERLEAVE_H
#define MIST_INTERLEAVE_H

typedef struct {
    int backward;    // 0 forward, 1 backward
    int microbatch;  // 0 .. G-1
    int chunk;       // model chunk 0 .. P v - 1 (its [stage.N]); on this rank: chunk mod P = r
} ChunkPass;

// Forward chunk-passes rank r of P runs before its first backward.
int interleaved_warmup(int rank, int P, int v, int G);

// The 2 G v passes of pipeline rank `rank` in execution order; out holds 2 G v
// entries. Returns 2 G v, or -1 when rank is outside [0, P), v < 1, G < 1, or
// v > 1 and G is not a multiple of P.
int interleaved_order(int rank, int P, int v, int G, ChunkPass *out);

// Extra micro-batches (beyond the one in its pass) whose activations chunk
// `chunk` holds at its own peak under the interleaved order: the most it ever
// holds, minus 1 - the planner's p (v = 1: min(P - chunk - 1, G - 1), as
// stage_p). A rank's memory is the sum over its chunks of each chunk's peak
// with its p (docs/pipeline.md, "Interleaved 1F1B"). -1 for a bad shape.
int stage_p_interleaved(int chunk, int P, int v, int G);

#endif
