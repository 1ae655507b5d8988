// AdamW and the squared gradient norm.
//
// AdamW (decoupled weight decay, bias-corrected), at step t >= 1, with g = grad * grad_scale:
//   m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2
//   m^ = m / (1 - beta1^t),        v^ = v / (1 - beta2^t)
//   w = w - lr (m^ / (sqrt(v^) + eps) + weight_decay w)
// w is the fp32 master copy when one is given (bf16 parameters), else the f32
// parameter itself; the stored parameter is rewritten from the updated w.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "kernels/cpu/cpu_ops.h"

enum {
    ADAMW_MIN_PARALLEL = 32768,
    // sum of squares: fixed chunks summed in double, then the chunk sums added in
    // chunk order, so the result is the same bits for any number of threads
    NORM_SQ_CHUNK = 8192,
};

void cpu_adamw_update(Backend *b, BackendStream *s, void *param, float *master, const void *grad,
                      float *m, float *v, size_t n, float lr, float beta1, float beta2,
                      float eps, float weight_decay, float grad_scale, int t) {
    if (t < 1) {
        fprintf(stderr, "mist cpu backend: adamw step t = %d, but steps count from 1 "
                        "(bias correction divides by 1 - beta^t)\n", t);
        abort();
    }
    MistDtype dt = b->dtype;
    float correction1 = 1.0f - powf(beta1, (float)t);
    float correction2 = 1.0f - powf(beta2, (float)t);
    CPU_PRAGMA(omp parallel for schedule(static) if (n > ADAMW_MIN_PARALLEL))
    for (size_t i = 0; i < n; i++) {
        float g = cpu_ld(grad, dt, i) * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float w = master ? master[i] : cpu_ld(param, dt, i);
        float m_hat = mi / correction1, v_hat = vi / correction2;
        w -= lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * w);
        if (master) master[i] = w;
        cpu_st(param, dt, i, w);
    }
}

// acc f32[1] += sum_i grad_i^2 over X(n)
void cpu_norm_squared_accumulate(Backend *b, BackendStream *s, float *acc, const void *grad, size_t n) {
    MistDtype dt = b->dtype;
    size_t chunks = (n + NORM_SQ_CHUNK - 1) / NORM_SQ_CHUNK;
    double *partial = cpu_scratch(b, CPU_WS_AUX0, (chunks ? chunks : 1) * sizeof(double));  // (chunks)
    CPU_PRAGMA(omp parallel for schedule(static) if (chunks > 1))
    for (size_t c = 0; c < chunks; c++) {
        size_t i0 = c * NORM_SQ_CHUNK, i1 = i0 + NORM_SQ_CHUNK < n ? i0 + NORM_SQ_CHUNK : n;
        double sum = 0.0;
        for (size_t i = i0; i < i1; i++) {
            double g = cpu_ld(grad, dt, i);
            sum += g * g;
        }
        partial[c] = sum;
    }
    double total = 0.0;
    for (size_t c = 0; c < chunks; c++) total += partial[c];
    acc[0] = (float)((double)acc[0] + total);
}
