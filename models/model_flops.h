// FLOPs of a whole model per iteration, summed from the op list (models/ops.h),
// so SwiGLU, GQA, parallel blocks and tied heads count what they really do.
//
// Model FLOPs (MFU): Megatron convention, 2 per multiply-add, matmuls and the
// full s x s attention scores, backward 2x forward. For a GPT with a 4h MLP,
// no GQA and a vocab-sized head this is exactly
//   72*B*s*L*h^2*(1 + s/(6h) + V/(12*L*h))   for B sequences.
// Hardware FLOPs (HFU) add one more forward of every checkpointed block.
// Kernel FLOPs are what the kernels execute (causal flash attention computes
// about half the score matrix, its backward 2.5x its forward; elementwise ops
// count), plus the recompute forwards.
#ifndef MIST_MODEL_FLOPS_H
#define MIST_MODEL_FLOPS_H
#include <stdint.h>
#include "base/schema.h"

// forward + backward model FLOPs of `sequences` sequences of length s (tp = 1); -1 on a bad config
double model_flops_train(const ModelConfig *m, double sequences, int64_t s);
// the same for one iteration of a run: [train] global_batch sequences of [model] seq_len (MFU's
// numerator in mist-plan --analyze, the search's comparison and the training log)
double model_flops_per_iteration(const MistConfig *cfg);
// the same per token
double model_flops_per_token(const ModelConfig *m, int64_t s);
// model FLOPs plus the recompute forward of `ckpt_blocks` checkpointed blocks
// (of m->layers) in each sequence's backward (HFU numerator)
double model_flops_hardware(const ModelConfig *m, double sequences, int64_t s, int ckpt_blocks);
// FLOPs the kernels execute, with recompute (see above)
double model_flops_kernels(const ModelConfig *m, double sequences, int64_t s, int ckpt_blocks);

#endif
