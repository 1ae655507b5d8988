// Softmax cross-entropy fused with its gradient, one row of logits at a time.
// With lse = log sum_{v<V} exp(z_v):  loss = lse - z_target,
//   dloss/dz_v = softmax(z)_v - [v == target] = exp(z_v - lse) - [v == target].
// Columns V..Vp-1 are padding (a vocabulary rounded up for fast matmuls): they
// take no part in the softmax and their gradient is 0. Each row belongs to one
// thread and is summed left to right, so the result does not depend on threads.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "kernels/cpu/cpu_ops.h"

// losses f32(N); logits X(N,Vp), overwritten with dloss * dlogits when dloss != 0;
// targets int32(N), < 0 = ignored (loss 0, gradient row 0)
void cpu_crossentropy_forward_backward(Backend *b, BackendStream *s, float *losses, void *logits,
                                       const int32_t *targets, int N, int V, int Vp, float dloss) {
    MistDtype dt = b->dtype;
    CPU_PRAGMA(omp parallel for schedule(static))
    for (int i = 0; i < N; i++) {
        size_t row = (size_t)i * Vp;
        int target = targets[i];
        if (target >= V) {
            fprintf(stderr, "mist cpu backend: crossentropy target %d at row %d is outside the vocabulary "
                            "(allowed: 0..%d, or < 0 to ignore)\n", target, i, V - 1);
            abort();
        }
        if (target < 0) {
            if (losses) losses[i] = 0.0f;
            if (dloss != 0.0f)
                for (int v = 0; v < Vp; v++) cpu_st(logits, dt, row + v, 0.0f);
            continue;
        }
        float mx = -INFINITY;
        for (int v = 0; v < V; v++) {
            float z = cpu_ld(logits, dt, row + v);
            if (z > mx) mx = z;
        }
        // the sum of V exponentials in double: a 50k vocabulary loses no digits to it
        double sum = 0.0;
        for (int v = 0; v < V; v++) sum += exp((double)cpu_ld(logits, dt, row + v) - mx);
        double lse = mx + log(sum);
        if (losses) losses[i] = (float)(lse - cpu_ld(logits, dt, row + target));
        if (dloss == 0.0f) continue;
        for (int v = 0; v < V; v++) {
            double p = exp((double)cpu_ld(logits, dt, row + v) - lse);
            cpu_st(logits, dt, row + v, (float)(dloss * (p - (v == target ? 1.0 : 0.0))));
        }
        for (int v = V; v < Vp; v++) cpu_st(logits, dt, row + v, 0.0f);
    }
}
