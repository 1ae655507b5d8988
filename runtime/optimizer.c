// AdamW, the LR schedule and gradient clipping.
#include "runtime/optimizer.h"
#include <math.h>

static const double PI = 3.14159265358979323846;

double lr_at(const TrainConfig *tc, int64_t it) {
    double lr = tc->lr, min_lr = tc->min_lr;
    // warmup: (it+1)/warmup * lr, so the first iteration already moves the weights
    if (it < tc->warmup) return lr * (double)(it + 1) / (double)tc->warmup;
    if (tc->schedule == SCHED_CONSTANT) return lr;
    int64_t span = tc->steps - 1 - tc->warmup;  // iterations of decay after warmup
    if (span <= 0) return lr;
    double frac = (double)(it - tc->warmup) / (double)span;
    if (frac > 1.0) frac = 1.0;
    // cosine: coeff goes 1 -> 0 as 0.5 * (1 + cos(pi * frac)); linear: 1 - frac
    double coeff = tc->schedule == SCHED_COSINE ? 0.5 * (1.0 + cos(PI * frac)) : 1.0 - frac;
    return min_lr + coeff * (lr - min_lr);
}

double optimizer_grad_norm(Optimizer *o) {
    Backend *b = o->backend;
    float acc = 0.0f;
    b->memset_device(b, o->norm_acc, 0, sizeof(float), o->stream);
    // one pass over the whole flat buffer: the backend sums deterministically
    b->norm_squared_accumulate(b, o->stream, o->norm_acc, o->grads, o->num_params);
    b->copy_d2h(b, &acc, o->norm_acc, sizeof(float), o->stream);
    b->stream_synchronize(b, o->stream);
    return sqrt((double)acc);
}

float optimizer_clip_scale(double norm, double clip) {
    if (clip <= 0.0 || !(norm > clip)) return 1.0f;
    return (float)(clip / norm);
}

void optimizer_step(Optimizer *o, float lr, float grad_scale) {
    Backend *b = o->backend;
    size_t x = mist_dtype_size(b->dtype);
    o->t++;
    // adjacent tensors with the same weight decay are one update (AdamW is elementwise:
    // the same bits, fewer launches)
    for (int i = 0; i < o->num_tensors;) {
        const OptimTensor *t = &o->tensors[i];
        size_t off = t->offset, count = t->count;
        int decay = t->decay;
        for (i++; i < o->num_tensors && o->tensors[i].offset == off + count && o->tensors[i].decay == decay; i++)
            count += o->tensors[i].count;
        float wd = decay ? (float)o->weight_decay : 0.0f;
        b->adamw_update(b, o->stream, (char *)o->params + off * x, o->master ? o->master + off : NULL,
                        (const char *)o->grads + off * x, o->m + off, o->v + off, count, lr, (float)o->beta1,
                        (float)o->beta2, (float)o->eps, wd, grad_scale, (int)o->t);
    }
}
