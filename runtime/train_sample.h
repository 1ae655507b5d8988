// [log] sample_interval: mist-train prints a short sample of text from the
// model being trained, as llm.c does, every N iterations.
#ifndef MIST_TRAIN_SAMPLE_H
#define MIST_TRAIN_SAMPLE_H
#include <stdint.h>
#include "runtime/model_runtime.h"

// Tokens a sample holds (llm.c's genT).
#define TRAIN_SAMPLE_TOKENS 64

// Collective over the stage's ranks: the fp32 weights are gathered (dp, then
// tp) to world rank 0, which runs them on the CPU backend (runtime/sample.h)
// and prints "sample at iteration N: TEXT". One pipeline stage only: with
// several, rank 0 says once that it does not sample.
void train_sample_print(ModelRuntime *r, int root, int64_t iteration, uint64_t seed);

#endif
