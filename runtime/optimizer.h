// AdamW over the flat parameter buffers, the learning-rate schedule, and
// global gradient-norm clipping.
//
// Storage: params and grads in the backend's dtype X; Adam m, v always fp32;
// when X is bf16 an fp32 master copy is the real weight and the bf16 params
// are re-rounded from it after every update (so a resume from the fp32
// master reproduces the bf16 params bit for bit).
// Weight decay is decoupled (AdamW) and applies to matrices only (ndim >= 2:
// embeddings and linear weights), never to norm weights or biases.
#ifndef MIST_OPTIMIZER_H
#define MIST_OPTIMIZER_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/backend.h"
#include "base/schema.h"

// One parameter tensor inside the flat buffers (offsets and counts in elements).
typedef struct {
    size_t offset, count;
    int decay;   // 1: apply weight decay (matrices)
} OptimTensor;

typedef struct {
    Backend *backend;
    BackendStream *stream;
    void *params;         // X(P)
    void *grads;          // X(P)
    float *master;        // f32(P) or NULL when X is fp32 (params are the master)
    float *m, *v;         // f32(P)
    float *norm_acc;      // f32[1] on the device: sum of squared grads
    size_t num_params;    // P
    const OptimTensor *tensors;
    int num_tensors;
    double beta1, beta2, eps, weight_decay;
    int64_t t;            // Adam steps taken (bias correction), 0 before the first
} Optimizer;

// Learning rate for 0-based iteration `it`: linear warmup from lr/warmup to lr over
// `warmup` iterations, then decay to min_lr at iteration steps-1 (cosine or linear),
// or constant lr. Pure function of the config, so a resumed run continues the curve.
double lr_at(const TrainConfig *tc, int64_t it);

// Global L2 norm of the gradient buffer (waits for the device). Every rank
// holding the same (all-reduced) gradient gets the same bits.
double optimizer_grad_norm(Optimizer *o);

// Multiplier that clips the gradient to norm `clip` (1 when clip <= 0 or norm <= clip).
float optimizer_clip_scale(double norm, double clip);

// One AdamW step over every tensor (t is incremented first, so the first step uses t=1).
void optimizer_step(Optimizer *o, float lr, float grad_scale);

#endif
