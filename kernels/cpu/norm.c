// Fused residual add + LayerNorm / RMSNorm, forward and backward.
// LayerNorm: y = (x - mean) * rstd * w + bias, rstd = 1/sqrt(var + eps)
// RMSNorm:   y = x * rstd * w,                 rstd = 1/sqrt(mean(x^2) + eps)
#include <math.h>
#include <stdlib.h>
#include "kernels/cpu/cpu_ops.h"

enum { NORM_COLS_PER_TASK = 64 };  // column block owned by one thread in the dw reduction

void cpu_norm_forward(Backend *b, BackendStream *s, NormOp kind, void *res_out, void *out,
                      float *mean, float *rstd, const void *inp, const void *res_in,
                      const void *w, const void *bias, int N, int C, float eps) {
    MistDtype dt = b->dtype;
    size_t x_stride;  // per-thread rows from the backend's workspace (no allocation in a step)
    char *x_rows = cpu_scratch_per_thread(b, CPU_WS_THREAD, (size_t)C * sizeof(float), &x_stride);
    CPU_PRAGMA(omp parallel)
    {
        float *x = cpu_thread_part(x_rows, x_stride);  // (C) the row being normalised
        CPU_PRAGMA(omp for schedule(static))
        for (int i = 0; i < N; i++) {
            size_t o = (size_t)i * C;
            if (res_in) {
                // normalise the stored (rounded) sum: backward sees exactly that tensor
                for (int c = 0; c < C; c++) {
                    cpu_st(res_out, dt, o + c, cpu_ld(inp, dt, o + c) + cpu_ld(res_in, dt, o + c));
                    x[c] = cpu_ld(res_out, dt, o + c);
                }
            } else {
                for (int c = 0; c < C; c++) x[c] = cpu_ld(inp, dt, o + c);
            }
            float mu = 0.0f;
            if (kind == NORM_OP_LAYERNORM) {
                for (int c = 0; c < C; c++) mu += x[c];
                mu /= C;
            }
            float ss = 0.0f;  // sum of squares about mu (mu = 0 for RMSNorm)
            for (int c = 0; c < C; c++) ss += (x[c] - mu) * (x[c] - mu);
            float r = 1.0f / sqrtf(ss / C + eps);
            for (int c = 0; c < C; c++) {
                float y = (x[c] - mu) * r * cpu_ld(w, dt, c);
                if (bias) y += cpu_ld(bias, dt, c);
                cpu_st(out, dt, o + c, y);
            }
            if (mean && kind == NORM_OP_LAYERNORM) mean[i] = mu;
            if (rstd) rstd[i] = r;
        }
    }
}

// Where x̂ comes from: the input, (x - mean) * rstd, or (out set) the norm's output,
// (y - bias) / w, for the lean layers (docs/lean-layers.md; w = 0 loses the value: 0).
typedef struct {
    const void *inp;
    const float *mean;  // LayerNorm's, NULL for RMSNorm
    const void *out, *w, *bias;
} NormXhat;

static inline float norm_xhat(const NormXhat *x, MistDtype dt, size_t o, int c, float mu, float r) {
    if (!x->out) return (cpu_ld(x->inp, dt, o + c) - mu) * r;
    float wc = cpu_ld(x->w, dt, c);
    if (wc == 0.0f) return 0.0f;
    return (cpu_ld(x->out, dt, o + c) - (x->bias ? cpu_ld(x->bias, dt, c) : 0.0f)) / wc;
}

// dinp X(N,C) +=, dw X(C) +=, dbias X(C) += (or NULL).
// With g = dout * w and xhat the normalised input:
//   LayerNorm: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//   RMSNorm:   dx = rstd * (g - xhat * mean(g * xhat))
// dw[c] = sum_i dout[i,c] * xhat[i,c], dbias[c] = sum_i dout[i,c]: each column
// block is owned by one thread and sums rows in order (thread-count independent).
// Both entries share it: the sums are the same, in the same order, whichever way x̂ is found.
static void norm_backward(Backend *b, NormOp kind, void *dinp, void *dw, void *dbias, const void *dout,
                          const NormXhat *src, const float *rstd, int N, int C) {
    MistDtype dt = b->dtype;
    int is_ln = kind == NORM_OP_LAYERNORM;
    const float *mean = src->out ? NULL : src->mean;
    if (dinp) {
        size_t stride;  // per thread: g then xhat, from the backend's workspace
        char *rows = cpu_scratch_per_thread(b, CPU_WS_THREAD, 2 * (size_t)C * sizeof(float), &stride);
        CPU_PRAGMA(omp parallel)
        {
            float *g = cpu_thread_part(rows, stride);  // (C) dout * w
            float *xhat = g + C;                        // (C)
            CPU_PRAGMA(omp for schedule(static))
            for (int i = 0; i < N; i++) {
                size_t o = (size_t)i * C;
                float mu = is_ln && mean ? mean[i] : 0.0f, r = rstd[i];
                float g_mean = 0.0f, gx_mean = 0.0f;
                for (int c = 0; c < C; c++) {
                    xhat[c] = norm_xhat(src, dt, o, c, mu, r);
                    g[c] = cpu_ld(dout, dt, o + c) * cpu_ld(src->w, dt, c);
                    g_mean += g[c];
                    gx_mean += g[c] * xhat[c];
                }
                g_mean = is_ln ? g_mean / C : 0.0f;
                gx_mean /= C;
                for (int c = 0; c < C; c++) {
                    float dx = r * (g[c] - g_mean - xhat[c] * gx_mean);
                    cpu_st(dinp, dt, o + c, cpu_ld(dinp, dt, o + c) + dx);
                }
            }
        }
    }
    if (!dw && !dbias) return;
    int tasks = (C + NORM_COLS_PER_TASK - 1) / NORM_COLS_PER_TASK;
    CPU_PRAGMA(omp parallel for schedule(static))
    for (int task = 0; task < tasks; task++) {
        int c0 = task * NORM_COLS_PER_TASK;
        int c1 = c0 + NORM_COLS_PER_TASK < C ? c0 + NORM_COLS_PER_TASK : C;
        float acc_w[NORM_COLS_PER_TASK] = {0}, acc_b[NORM_COLS_PER_TASK] = {0};
        for (int i = 0; i < N; i++) {
            size_t o = (size_t)i * C;
            float mu = is_ln && mean ? mean[i] : 0.0f, r = rstd[i];
            for (int c = c0; c < c1; c++) {
                float d = cpu_ld(dout, dt, o + c);
                acc_w[c - c0] += d * norm_xhat(src, dt, o, c, mu, r);
                acc_b[c - c0] += d;
            }
        }
        for (int c = c0; c < c1; c++) {
            if (dw) cpu_st(dw, dt, c, cpu_ld(dw, dt, c) + acc_w[c - c0]);
            if (dbias) cpu_st(dbias, dt, c, cpu_ld(dbias, dt, c) + acc_b[c - c0]);
        }
    }
}

void cpu_norm_backward(Backend *b, BackendStream *s, NormOp kind, void *dinp, void *dw, void *dbias,
                       const void *dout, const void *inp, const void *w,
                       const float *mean, const float *rstd, int N, int C) {
    (void)s;
    const NormXhat src = {inp, mean, NULL, w, NULL};
    norm_backward(b, kind, dinp, dw, dbias, dout, &src, rstd, N, C);
}

// As cpu_norm_backward (the same sums in the same order), with xhat from the output.
void cpu_norm_backward_from_output(Backend *b, BackendStream *s, NormOp kind, void *dinp, void *dw, void *dbias,
                                   const void *dout, const void *out, const void *w, const void *bias,
                                   const float *rstd, int N, int C) {
    (void)s;
    const NormXhat src = {NULL, NULL, out, w, bias};
    norm_backward(b, kind, dinp, dw, dbias, dout, &src, rstd, N, C);
}
