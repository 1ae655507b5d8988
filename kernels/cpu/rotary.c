// Rotary position embedding on the q and k heads of qkv, in place.
// Pairs are half-split: (x_i, x_{i+HS/2}) for i < HS/2, rotated by the angle
// t * freq_i with freq_i = theta^(-2i/HS):
//   forward:  (x1 cos - x2 sin, x1 sin + x2 cos)
//   backward: the transpose (inverse) rotation, (g1 cos + g2 sin, -g1 sin + g2 cos)
// Angles are computed in double so that long sequences keep full fp32 accuracy.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "kernels/cpu/cpu_ops.h"

// direction +1 rotates forward, -1 applies the inverse rotation
static void rotary_apply(MistDtype dt, void *qkv, int B, int T, int NH, int NKV, int HS,
                         float theta, int direction) {
    if (HS % 2 != 0) {
        fprintf(stderr, "mist cpu backend: rotary needs an even head size (half-split pairs), got HS=%d\n", HS);
        abort();
    }
    int half = HS / 2, heads = NH + NKV;  // q and k heads are contiguous in each token row
    size_t row = (size_t)(NH + 2 * NKV) * HS;
    CPU_PRAGMA(omp parallel for schedule(static))
    for (long bt = 0; bt < (long)B * T; bt++) {
        int t = bt % T;
        for (int i = 0; i < half; i++) {
            double angle = t * pow((double)theta, -2.0 * i / HS);
            float c = (float)cos(angle), sn = direction * (float)sin(angle);
            for (int h = 0; h < heads; h++) {
                size_t p = (size_t)bt * row + (size_t)h * HS + i;
                float x1 = cpu_ld(qkv, dt, p), x2 = cpu_ld(qkv, dt, p + half);
                cpu_st(qkv, dt, p, x1 * c - x2 * sn);
                cpu_st(qkv, dt, p + half, x1 * sn + x2 * c);
            }
        }
    }
}

void cpu_rotary_forward(Backend *b, BackendStream *s, void *qkv, int B, int T, int NH, int NKV,
                        int HS, float theta) {
    rotary_apply(b->dtype, qkv, B, T, NH, NKV, HS, theta, +1);
}

void cpu_rotary_backward(Backend *b, BackendStream *s, void *dqkv, int B, int T, int NH, int NKV,
                         int HS, float theta) {
    rotary_apply(b->dtype, dqkv, B, T, NH, NKV, HS, theta, -1);
}
