// Text generation from a trained model on the CPU backend: the model as
// training runs it (runtime/model_runtime.h, one rank, fp32), one forward
// over the last `window` (at most seq_len) tokens per new token (causal attention: the logits
// at position t see tokens 0..t only, so the positions after the last token
// may hold anything), then a draw from softmax(logits / temperature) over
// the top_k most likely tokens.
#ifndef MIST_SAMPLE_H
#define MIST_SAMPLE_H
#include <stddef.h>
#include <stdint.h>
#include "runtime/checkpoint.h"
#include "runtime/model_runtime.h"

typedef struct {
    ModelRuntime r;
    Backend *be;
} Sampler;

// The model m with the weights of checkpoint ck (param/NAME tensors), laid
// out for `window` positions (0 or >= seq_len: seq_len): a generation of at
// most `window` tokens in all costs forwards of that length, not seq_len.
// 0, or -1 with err.
int sampler_open(Sampler *s, const ModelConfig *m, int window, CkptReader *ck, char *err, size_t errlen);
// The same from whole-model fp32 weights in memory: global holds src->Pglobal
// floats in the layout of src, a one-stage runtime of the same model.
int sampler_open_weights(Sampler *s, const ModelRuntime *src, const float *global, int window, char *err,
                         size_t errlen);
// The next-token logits (V floats, valid until the next call) after tokens[0..len), len >= 1.
const float *sampler_logits(Sampler *s, const int32_t *tokens, int len);
// Appends n tokens to tokens[0..*len) (capacity *len + n), drawing with the
// xorshift generator seeded by seed: the same seed gives the same tokens.
// temperature 0 takes the most likely token; top_k 0 keeps every token.
void sampler_generate(Sampler *s, int32_t *tokens, int *len, int n, double temperature, int top_k, uint64_t seed);
void sampler_close(Sampler *s);

// One draw from logits (V): index of the chosen token. rng advances.
int sample_pick(const float *logits, int V, double temperature, int top_k, uint64_t *rng);

#endif
