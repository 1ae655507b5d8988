// Moving a micro-batch's activations (forward) or their gradients (backward)
// between neighbouring pipeline stages whose meshes differ.
//
// Every stage sees the same micro-batch of B = b * dp sequences (b * dp * G is
// the global batch on every stage). DP rank d of a stage holds sequences
// [d * b, (d + 1) * b); the tensor crossing a stage boundary (the residual
// stream, or its gradient) is replicated over the stage's TP ranks. So a rank
// of the receiving stage needs its b sequences whole, and they may come from
// several DP ranks of the sending stage when the two stages' b differ:
//
//   sender dp ranks:   | 0 . . . | 1 . . . | 2 . . . | 3 . . . |   b = 4
//   receiver ranks:    | 0 . . . . . . . . | 1 . . . . . . . . |   b' = 8
//
// Of the sender's tp copies, the receiver at tp index t' takes the one at tp
// index t' mod tp_src, which spreads the sending over every TP rank when the
// receiver's TP group is at least as large. Each (sender, receiver) pair moves
// one contiguous range of sequences, so a piece is one message.
#ifndef MIST_PIPELINE_RESHARD_H
#define MIST_PIPELINE_RESHARD_H

#include <stdint.h>
#include "base/plan.h"

typedef struct {
    int peer;          // world rank of the other side
    int first;         // first sequence of the piece, within the micro-batch (0 .. B-1)
    int count;         // sequences in the piece
    int local_offset;  // first sequence of the piece within this rank's b sequences
} ReshardPiece;

// The pieces the rank at (dp_index, tp_index) of stage `src` sends to stage
// `dst` (forward: dst = src + 1; backward: dst = src - 1), in order of
// `first`. out must hold max entries. Returns the count, or -1 for a bad stage
// index, mismatched micro-batches (b * dp differs) or max too small.
int reshard_sends(const Plan *plan, int src, int dst, int dp_index, int tp_index, ReshardPiece *out, int max);

// The pieces the rank at (dp_index, tp_index) of stage `dst` receives from
// stage `src`, in order of `first`; they tile its b sequences exactly.
int reshard_recvs(const Plan *plan, int src, int dst, int dp_index, int tp_index, ReshardPiece *out, int max);

#endif
