// Softmax cross-entropy when the vocabulary is split over tensor-parallel
// ranks: rank r holds logits columns [v0, v0 + Vt) of every row. The row's
// log-sum-exp needs every rank's columns, so it is assembled from two
// reductions the caller runs between the three passes:
//   1. m_r = max over the rank's columns                 -> M = all-reduce MAX m_r
//   2. S_r = sum exp(z - M) over them, and z_target if the target column is the
//      rank's (else 0)                                    -> S, Z = all-reduce SUM
//   3. loss = log S + M - Z;  dz = dloss * (exp(z - M) / S - [v == target]).
// With one rank this is the fused op, up to the rounding of S to fp32 between
// passes (the fused op keeps it in double).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "kernels/cpu/cpu_ops.h"

// rowmax f32(N) = max of logits X(N,Vp) columns 0..Vt-1 (-inf when Vt = 0)
void cpu_crossentropy_vocab_max(Backend *b, BackendStream *s, float *rowmax, const void *logits, int N, int Vt,
                                int Vp) {
    MistDtype dt = b->dtype;
    CPU_PRAGMA(omp parallel for schedule(static))
    for (int i = 0; i < N; i++) {
        float mx = -INFINITY;
        for (int v = 0; v < Vt; v++) {
            float z = cpu_ld(logits, dt, (size_t)i * Vp + v);
            if (z > mx) mx = z;
        }
        rowmax[i] = mx;
    }
}

// stats f32(2N): [0, N) sum of exp(z - rowmax) over this rank's columns,
// [N, 2N) the target's logit when v0 <= target < v0 + Vt, else 0.
// rowmax is the global maximum (after the MAX reduction).
void cpu_crossentropy_vocab_stats(Backend *b, BackendStream *s, float *stats, const void *logits,
                                  const float *rowmax, const int32_t *targets, int v0, int N, int Vt, int Vp) {
    MistDtype dt = b->dtype;
    CPU_PRAGMA(omp parallel for schedule(static))
    for (int i = 0; i < N; i++) {
        double sum = 0.0;
        if (targets[i] >= 0)
            for (int v = 0; v < Vt; v++) sum += exp((double)cpu_ld(logits, dt, (size_t)i * Vp + v) - rowmax[i]);
        int local = targets[i] - v0;
        stats[i] = (float)sum;
        stats[N + i] = targets[i] >= 0 && local >= 0 && local < Vt ? cpu_ld(logits, dt, (size_t)i * Vp + local) : 0.0f;
    }
}

// losses f32(N) = log S + M - Z (0 for ignored targets < 0); when dloss != 0,
// logits X(N,Vp) = dloss * (softmax - onehot) over this rank's columns, padding
// columns Vt..Vp-1 set to 0. stats is pass 2's output after the SUM reduction.
void cpu_crossentropy_vocab_finish(Backend *b, BackendStream *s, float *losses, void *logits, const float *rowmax,
                                   const float *stats, const int32_t *targets, int v0, int N, int Vt, int Vp,
                                   float dloss) {
    MistDtype dt = b->dtype;
    CPU_PRAGMA(omp parallel for schedule(static))
    for (int i = 0; i < N; i++) {
        size_t row = (size_t)i * Vp;
        if (targets[i] < 0) {
            if (losses) losses[i] = 0.0f;
            if (dloss != 0.0f)
                for (int v = 0; v < Vp; v++) cpu_st(logits, dt, row + v, 0.0f);
            continue;
        }
        double lse = rowmax[i] + log((double)stats[i]);
        if (losses) losses[i] = (float)(lse - stats[N + i]);
        if (dloss == 0.0f) continue;
        int local = targets[i] - v0;
        for (int v = 0; v < Vt; v++) {
            double p = exp((double)cpu_ld(logits, dt, row + v) - lse);
            cpu_st(logits, dt, row + v, (float)(dloss * (p - (v == local ? 1.0 : 0.0))));
        }
        for (int v = Vt; v < Vp; v++) cpu_st(logits, dt, row + v, 0.0f);
    }
}
