// Causal grouped-query self-attention, flash style: the forward keeps only
// lse_t = log(sum_{j<=t} exp(s_tj)) per query row; the backward recomputes
// p_tj = exp(s_tj - lse_t) from q, k and lse, one row at a time, with O(T)
// (forward) or O(HS) (backward) scratch per thread. No T x T matrix exists.
//
// qkv X(B,T,(NH+2*NKV)*HS), per token [q heads | k heads | v heads];
// query head h reads kv head g = h / (NH/NKV); s_tj = q_t . k_j / sqrt(HS), j <= t.
// bf16 tensors are widened to fp32 copies once per call (bf16 is computed in
// fp32); f32 tensors are used in place. Copies and per-thread rows live in the
// backend's workspace (no allocation inside a step, cpu_ops.h).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "kernels/cpu/cpu_ops.h"

typedef struct {
    int B, T, NH, NKV, HS;
    size_t row;  // elements per token in qkv: (NH + 2*NKV) * HS
} AttnShape;

// offsets of head vectors: q head h, k / v head g of token (b, t); o: out head h
static size_t q_at(const AttnShape *a, int b, int t, int h) {
    return ((size_t)b * a->T + t) * a->row + (size_t)h * a->HS;
}
static size_t k_at(const AttnShape *a, int b, int t, int g) { return q_at(a, b, t, a->NH + g); }
static size_t v_at(const AttnShape *a, int b, int t, int g) { return q_at(a, b, t, a->NH + a->NKV + g); }
static size_t o_at(const AttnShape *a, int b, int t, int h) {
    return ((size_t)b * a->T + t) * a->NH * a->HS + (size_t)h * a->HS;
}

// every query head must map to one kv head: NH a multiple of NKV
static void check_heads(const char *op, int NH, int NKV, int HS) {
    if (NKV < 1 || NH < NKV || NH % NKV != 0 || HS < 1) {
        fprintf(stderr, "mist cpu backend: %s with NH=%d query heads, NKV=%d kv heads, HS=%d: NH must be a "
                        "positive multiple of NKV and HS >= 1\n", op, NH, NKV, HS);
        abort();
    }
}

// x . y with DOT_LANES partial sums (lane l sums i = l mod DOT_LANES in order),
// added up lane by lane at the end: a fixed order that compilers vectorize
enum { DOT_LANES = 8 };
static float dot(const float *restrict x, const float *restrict y, int n) {
    float lane[DOT_LANES] = {0};
    int i = 0;
    for (; i + DOT_LANES <= n; i += DOT_LANES)
        for (int l = 0; l < DOT_LANES; l++) lane[l] += x[i + l] * y[i + l];
    for (; i < n; i++) lane[i % DOT_LANES] += x[i] * y[i];
    float acc = 0.0f;
    for (int l = 0; l < DOT_LANES; l++) acc += lane[l];
    return acc;
}

// y += alpha * x
static void axpy(float *restrict y, float alpha, const float *restrict x, int n) {
    for (int i = 0; i < n; i++) y[i] += alpha * x[i];
}

// out X(B,T,NH*HS) = softmax(causal scores) @ v; lse f32(B,NH,T) (may be NULL)
void cpu_attention_forward(Backend *b, BackendStream *s, void *out, float *lse, const void *qkv,
                           int B, int T, int NH, int NKV, int HS) {
    check_heads("attention_forward", NH, NKV, HS);
    MistDtype dt = b->dtype;
    AttnShape a = {B, T, NH, NKV, HS, (size_t)(NH + 2 * NKV) * HS};
    int group = NH / NKV;
    float scale = 1.0f / sqrtf((float)HS);
    size_t n_out = (size_t)B * T * NH * HS;
    const float *x = cpu_as_f32(b, CPU_WS_IN0, qkv, dt, (size_t)B * T * a.row);  // (B, T, (NH+2NKV)*HS)
    float *o32 = dt == MIST_F32 ? out : cpu_scratch(b, CPU_WS_OUT, n_out * sizeof(float));  // (B, T, NH*HS)
    size_t p_stride;
    char *p_rows = cpu_scratch_per_thread(b, CPU_WS_THREAD, (size_t)T * sizeof(float), &p_stride);
    CPU_PRAGMA(omp parallel)
    {
        float *p = cpu_thread_part(p_rows, p_stride);  // (T) one causal row of scores
        CPU_PRAGMA(omp for schedule(dynamic, 8))
        for (long row = 0; row < (long)B * NH * T; row++) {
            int t = row % T, h = row / T % NH, bb = row / T / NH, g = h / group;
            const float *q = x + q_at(&a, bb, t, h);
            float mx = -INFINITY;
            for (int j = 0; j <= t; j++) {
                p[j] = scale * dot(q, x + k_at(&a, bb, j, g), HS);
                if (p[j] > mx) mx = p[j];
            }
            float sum = 0.0f;
            for (int j = 0; j <= t; j++) {
                p[j] = expf(p[j] - mx);
                sum += p[j];
            }
            float *o = o32 + o_at(&a, bb, t, h);
            for (int d = 0; d < HS; d++) o[d] = 0.0f;
            float inv = 1.0f / sum;
            for (int j = 0; j <= t; j++) axpy(o, p[j] * inv, x + v_at(&a, bb, j, g), HS);
            if (lse) lse[((size_t)bb * NH + h) * T + t] = mx + logf(sum);
        }
    }
    if (o32 != out) cpu_from_f32(out, dt, o32, n_out);
}

// dqkv X(B,T,(NH+2*NKV)*HS) = (overwrite). With p_tj = exp(s_tj - lse_t),
// dp_tj = dout_t . v_j and D_t = dout_t . out_t = sum_j p_tj dp_tj:
//   ds_tj = p_tj (dp_tj - D_t)
//   dq_t = scale * sum_{j<=t} ds_tj k_j
//   dk_j = scale * sum_{h in group} sum_{t>=j} ds_tj q_t
//   dv_j = sum_{h in group} sum_{t>=j} p_tj dout_t
// Query rows and key rows are separate passes (each recomputes p_tj), so that
// every output row is written by one thread in a fixed summation order.
void cpu_attention_backward(Backend *b, BackendStream *s, void *dqkv, const void *dout,
                            const void *qkv, const void *out, const float *lse,
                            int B, int T, int NH, int NKV, int HS) {
    check_heads("attention_backward", NH, NKV, HS);
    MistDtype dt = b->dtype;
    AttnShape a = {B, T, NH, NKV, HS, (size_t)(NH + 2 * NKV) * HS};
    int group = NH / NKV;
    float scale = 1.0f / sqrtf((float)HS);
    long q_rows = (long)B * NH * T, kv_rows = (long)B * NKV * T;
    size_t n_qkv = (size_t)B * T * a.row, n_out = (size_t)B * T * NH * HS;
    const float *x = cpu_as_f32(b, CPU_WS_IN0, qkv, dt, n_qkv);     // (B, T, (NH+2NKV)*HS)
    const float *dy = cpu_as_f32(b, CPU_WS_IN1, dout, dt, n_out);   // (B, T, NH*HS)
    const float *y = cpu_as_f32(b, CPU_WS_IN2, out, dt, n_out);     // (B, T, NH*HS)
    float *dx = dt == MIST_F32 ? dqkv : cpu_scratch(b, CPU_WS_OUT, n_qkv * sizeof(float));  // (B, T, (NH+2NKV)*HS)
    float *D = cpu_scratch(b, CPU_WS_AUX0, (size_t)q_rows * sizeof(float));  // (B, NH, T)

    CPU_PRAGMA(omp parallel)
    {
        CPU_PRAGMA(omp for schedule(static))
        for (long row = 0; row < q_rows; row++) {
            int t = row % T, h = row / T % NH, bb = row / T / NH;
            D[row] = dot(dy + o_at(&a, bb, t, h), y + o_at(&a, bb, t, h), HS);
        }

        // dq: one query row per task
        CPU_PRAGMA(omp for schedule(dynamic, 8))
        for (long row = 0; row < q_rows; row++) {
            int t = row % T, h = row / T % NH, bb = row / T / NH, g = h / group;
            const float *q = x + q_at(&a, bb, t, h), *go = dy + o_at(&a, bb, t, h);
            float *dq = dx + q_at(&a, bb, t, h);
            for (int d = 0; d < HS; d++) dq[d] = 0.0f;
            for (int j = 0; j <= t; j++) {
                const float *k = x + k_at(&a, bb, j, g);
                float p = expf(scale * dot(q, k, HS) - lse[row]);
                float ds = p * (dot(go, x + v_at(&a, bb, j, g), HS) - D[row]);
                axpy(dq, ds, k, HS);
            }
            for (int d = 0; d < HS; d++) dq[d] *= scale;
        }

        // dk, dv: one key row per task, summing the group's heads and later queries in order
        CPU_PRAGMA(omp for schedule(dynamic, 8))
        for (long row = 0; row < kv_rows; row++) {
            int j = row % T, g = row / T % NKV, bb = row / T / NKV;
            const float *k = x + k_at(&a, bb, j, g), *v = x + v_at(&a, bb, j, g);
            float *dk = dx + k_at(&a, bb, j, g), *dv = dx + v_at(&a, bb, j, g);
            for (int d = 0; d < HS; d++) dk[d] = dv[d] = 0.0f;
            for (int h = g * group; h < (g + 1) * group; h++) {
                for (int t = j; t < T; t++) {
                    const float *q = x + q_at(&a, bb, t, h), *go = dy + o_at(&a, bb, t, h);
                    size_t r = ((size_t)bb * NH + h) * T + t;
                    float p = expf(scale * dot(q, k, HS) - lse[r]);
                    float ds = p * (dot(go, v, HS) - D[r]);
                    axpy(dk, ds, q, HS);
                    axpy(dv, p, go, HS);
                }
            }
            for (int d = 0; d < HS; d++) dk[d] *= scale;
        }
    }
    if (dx != dqkv) cpu_from_f32(dqkv, dt, dx, n_qkv);
}
