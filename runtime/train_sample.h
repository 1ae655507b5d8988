// [log] sample_interval: mist-train prints a short sample of text from the
// model being trained, as llm.c does, every N iterations.
#ifndef MIST_TRAIN_SAMPLE_H
#define MIST_TRAIN_SAMPLE_H
#include <stdint.h>
#include "runtime/model_runtime.h"

// Tokens a sample holds (llm.c's genT).
#define TRAIN_SAMPLE_TOKENS 64

// Prints "sample at iteration N: TEXT" from the whole model's fp32 weights
// (layout: a one-stage runtime whose Pglobal floats `weights` holds, global
// shapes), run on the CPU backend (runtime/sample.h). The caller is world rank 0.
void train_sample_show(const ModelRuntime *layout, const float *weights, int64_t iteration, uint64_t seed);

// One pipeline stage, collective over its ranks: the fp32 weights are gathered
// (dp, then tp) to world rank 0, which prints the sample (train_sample_show).
// Several stages gather through the checkpoint's path (runtime/train_checkpoint.c).
void train_sample_print(ModelRuntime *r, int root, int64_t iteration, uint64_t seed);

#endif
