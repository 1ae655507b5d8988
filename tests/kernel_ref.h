// Shared by the CPU kernel tests: a seeded random source, storage helpers that
// move fp32 test data into a backend's storage dtype and back, naive reference
// forwards written as plain loops in double, and a central-difference gradient
// check that runs through those references.
//
// Every reference is the textbook formula, written independently of the
// kernels (no blocking, no online softmax, no fused shortcuts).
#ifndef MIST_KERNEL_REF_H
#define MIST_KERNEL_REF_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "kernels/backend.h"
#include "base/dtype.h"
#include "tests/tap.h"

// ---- random source: splitmix64, seeded per run (MIST_TEST_SEED repeats a run) ----
static uint64_t ref_rng_state;

static inline uint64_t ref_seed_from_env_or_clock(void) {
    const char *env = getenv("MIST_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10)
                        : (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid() * 7919u;
    ref_rng_state = seed;
    diag("seed %llu (repeat this run with MIST_TEST_SEED=%llu)", (unsigned long long)seed,
         (unsigned long long)seed);
    return seed;
}

static inline uint64_t ref_next(void) {
    uint64_t z = (ref_rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// uniform in [lo, hi)
static inline float ref_uniform(float lo, float hi) {
    return (float)(lo + (hi - (double)lo) * (double)(ref_next() >> 11) * (1.0 / 9007199254740992.0));
}

static inline int ref_randint(int n) { return (int)(ref_next() % (uint64_t)n); }

static inline float *ref_random(size_t n, float lo, float hi) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = ref_uniform(lo, hi);
    return x;
}

// x rounded through bf16 in place, so fp32 and bf16 runs can share inputs exactly
static inline void ref_round_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = mist_bf16_to_f32(mist_f32_to_bf16(x[i]));
}

// ---- storage helpers ----
// a new buffer in b's storage dtype holding x (NULL stays NULL)
static inline void *ref_store(const Backend *b, const float *x, size_t n) {
    if (!x) return NULL;
    size_t es = mist_dtype_size(b->dtype);
    void *p = malloc((n ? n : 1) * es);
    for (size_t i = 0; i < n; i++) {
        if (b->dtype == MIST_BF16)
            ((uint16_t *)p)[i] = mist_f32_to_bf16(x[i]);
        else
            ((float *)p)[i] = x[i];
    }
    return p;
}

// storage buffer p (b's dtype) as fp32 into dst
static inline void ref_load(const Backend *b, float *dst, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = b->dtype == MIST_BF16 ? mist_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

// a new fp32 array with the contents of storage buffer p
static inline float *ref_loaded(const Backend *b, const void *p, size_t n) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    ref_load(b, x, p, n);
    return x;
}

static inline double *ref_to_double(const float *x, size_t n) {
    if (!x) return NULL;
    double *d = malloc((n ? n : 1) * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

// max |got - want| / max(max |want|, floor): error relative to the tensor's scale
static inline double ref_rel_err(const float *got, const double *want, size_t n, double floor) {
    double err = 0.0, scale = floor;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (e > err || isnan(e)) err = isnan(e) ? INFINITY : e;
        if (fabs(want[i]) > scale) scale = fabs(want[i]);
    }
    return err / scale;
}

// the same metric between two fp32 arrays (bf16 run vs fp32 run)
static inline double ref_rel_err_f(const float *got, const float *want, size_t n) {
    double err = 0.0, scale = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (e > err || isnan(e)) err = isnan(e) ? INFINITY : e;
        if (fabs(want[i]) > scale) scale = fabs(want[i]);
    }
    return err / scale;
}

// sum_i out_i * r_i: the scalar loss whose gradient w.r.t. out is r
static inline double ref_dot(const double *out, const float *r, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += out[i] * r[i];
    return s;
}

// ---- finite differences ----
// loss(ctx) evaluates a double reference forward on the arrays held in ctx
typedef double (*RefLossFn)(void *ctx);

enum { FD_SAMPLES = 24 };
static const double FD_STEP = 1e-4;  // central differences: O(h^2) truncation, ~1e-12 cancellation

// Central-difference check of an analytic gradient `grad` (n floats, from the
// backend) of loss w.r.t. the double array x (n) that loss reads through ctx.
// Samples min(n, FD_SAMPLES) random entries. Returns max |grad - fd| over the
// samples divided by max |grad| over the whole tensor (floor 1e-6).
static inline double ref_fd_check(double *x, size_t n, const float *grad, RefLossFn loss, void *ctx) {
    double scale = 1e-6, err = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs(grad[i]) > scale) scale = fabs(grad[i]);
    size_t samples = n < FD_SAMPLES ? n : FD_SAMPLES;
    for (size_t k = 0; k < samples; k++) {
        size_t i = n <= FD_SAMPLES ? k : (size_t)(ref_next() % n);
        double saved = x[i];
        x[i] = saved + FD_STEP;
        double up = loss(ctx);
        x[i] = saved - FD_STEP;
        double down = loss(ctx);
        x[i] = saved;
        double fd = (up - down) / (2.0 * FD_STEP);
        double e = fabs(grad[i] - fd);
        if (isnan(e)) return INFINITY;
        if (e > err) err = e;
    }
    return err / scale;
}

// ---- naive references in double ----
static inline double ref_gelu(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

// sum_i gelu(x_i) r_i: a scalar loss whose gradient is gelu'(x) r, for ref_fd_check
typedef struct { double *x; const float *r; size_t n; } GeluCtx;
static inline double ref_gelu_loss(void *p) {
    GeluCtx *c = p;
    double s = 0.0;
    for (size_t i = 0; i < c->n; i++) s += ref_gelu(c->x[i]) * c->r[i];
    return s;
}

static inline double ref_silu(double x) { return x / (1.0 + exp(-x)); }

// out (N,OC) = inp (N,C) @ w (OC,C)^T + bias (OC or NULL); gelu_tanh applied when gelu
static inline void ref_matmul(double *out, const double *inp, const double *w, const double *bias,
                              int N, int C, int OC, int gelu) {
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++) s += inp[(size_t)i * C + c] * w[(size_t)o * C + c];
            out[(size_t)i * OC + o] = gelu ? ref_gelu(s) : s;
        }
}

enum { REF_MAX_C = 4096 };  // widest row ref_norm accepts

// out (N,C) = norm(x + res (or x alone when res is NULL)); mean/rstd (N) may be NULL
static inline void ref_norm(NormOp kind, double *out, double *mean, double *rstd, const double *x,
                            const double *res, const double *w, const double *bias, int N, int C,
                            double eps) {
    for (int i = 0; i < N; i++) {
        const double *xi = x + (size_t)i * C;
        double row[REF_MAX_C];
        for (int c = 0; c < C; c++) row[c] = xi[c] + (res ? res[(size_t)i * C + c] : 0.0);
        double mu = 0.0;
        if (kind == NORM_OP_LAYERNORM) {
            for (int c = 0; c < C; c++) mu += row[c];
            mu /= C;
        }
        double var = 0.0;
        for (int c = 0; c < C; c++) var += (row[c] - mu) * (row[c] - mu);
        var /= C;
        double r = 1.0 / sqrt(var + eps);
        for (int c = 0; c < C; c++)
            out[(size_t)i * C + c] = (row[c] - mu) * r * w[c] + (bias ? bias[c] : 0.0);
        if (mean) mean[i] = mu;
        if (rstd) rstd[i] = r;
    }
}

// Causal GQA attention, the full T x T softmax per (batch, head).
// qkv (B,T,(NH+2NKV)HS); out (B,T,NH*HS); lse (B,NH,T) or NULL.
static inline void ref_attention(double *out, double *lse, const double *qkv, int B, int T, int NH,
                                 int NKV, int HS) {
    size_t row = (size_t)(NH + 2 * NKV) * HS;
    double scale = 1.0 / sqrt((double)HS);
    double *p = malloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int g = h / (NH / NKV);
            for (int t = 0; t < T; t++) {
                const double *q = qkv + ((size_t)b * T + t) * row + (size_t)h * HS;
                double mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * row + (size_t)(NH + g) * HS;
                    double s = 0.0;
                    for (int d = 0; d < HS; d++) s += q[d] * k[d];
                    p[j] = s * scale;
                    if (p[j] > mx) mx = p[j];
                }
                double sum = 0.0;
                for (int j = 0; j <= t; j++) sum += exp(p[j] - mx);
                double *o = out + ((size_t)b * T + t) * NH * HS + (size_t)h * HS;
                for (int d = 0; d < HS; d++) o[d] = 0.0;
                for (int j = 0; j <= t; j++) {
                    const double *v = qkv + ((size_t)b * T + j) * row + (size_t)(NH + NKV + g) * HS;
                    double pj = exp(p[j] - mx) / sum;
                    for (int d = 0; d < HS; d++) o[d] += pj * v[d];
                }
                if (lse) lse[((size_t)b * NH + h) * T + t] = mx + log(sum);
            }
        }
    free(p);
}

// Gradient of sum(out * dout) w.r.t. qkv through the full probability matrix:
// P = softmax(S), dP = dout V^T, dS = P .* (dP - rowsum(P .* dP)),
// dQ = dS K * scale, dK = dS^T Q * scale, dV = P^T dout (summed over a kv group's heads).
static inline void ref_attention_backward(double *dqkv, const double *dout, const double *qkv, int B,
                                          int T, int NH, int NKV, int HS) {
    size_t row = (size_t)(NH + 2 * NKV) * HS;
    double scale = 1.0 / sqrt((double)HS);
    memset(dqkv, 0, (size_t)B * T * row * sizeof(double));
    double *P = malloc((size_t)T * T * sizeof(double));   // (T, T)
    double *dS = malloc((size_t)T * T * sizeof(double));  // (T, T)
#define REF_Q(b, t, h) (qkv + ((size_t)(b) * T + (t)) * row + (size_t)(h) * HS)
#define REF_K(b, t, g) (qkv + ((size_t)(b) * T + (t)) * row + (size_t)(NH + (g)) * HS)
#define REF_V(b, t, g) (qkv + ((size_t)(b) * T + (t)) * row + (size_t)(NH + NKV + (g)) * HS)
#define REF_DO(b, t, h) (dout + ((size_t)(b) * T + (t)) * NH * HS + (size_t)(h) * HS)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int g = h / (NH / NKV);
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j < T; j++) {
                    double s = -INFINITY;
                    if (j <= t) {
                        s = 0.0;
                        for (int d = 0; d < HS; d++) s += REF_Q(b, t, h)[d] * REF_K(b, j, g)[d];
                        s *= scale;
                    }
                    P[(size_t)t * T + j] = s;
                    if (s > mx) mx = s;
                }
                for (int j = 0; j < T; j++) sum += (P[(size_t)t * T + j] = exp(P[(size_t)t * T + j] - mx));
                for (int j = 0; j < T; j++) P[(size_t)t * T + j] /= sum;
                double rowsum = 0.0;
                for (int j = 0; j < T; j++) {
                    double dp = 0.0;
                    for (int d = 0; d < HS; d++) dp += REF_DO(b, t, h)[d] * REF_V(b, j, g)[d];
                    dS[(size_t)t * T + j] = dp;
                    rowsum += P[(size_t)t * T + j] * dp;
                }
                for (int j = 0; j < T; j++)
                    dS[(size_t)t * T + j] = P[(size_t)t * T + j] * (dS[(size_t)t * T + j] - rowsum);
            }
            for (int t = 0; t < T; t++)
                for (int j = 0; j < T; j++) {
                    double *dq = dqkv + ((size_t)b * T + t) * row + (size_t)h * HS;
                    double *dk = dqkv + ((size_t)b * T + j) * row + (size_t)(NH + g) * HS;
                    double *dv = dqkv + ((size_t)b * T + j) * row + (size_t)(NH + NKV + g) * HS;
                    for (int d = 0; d < HS; d++) {
                        dq[d] += dS[(size_t)t * T + j] * REF_K(b, j, g)[d] * scale;
                        dk[d] += dS[(size_t)t * T + j] * REF_Q(b, t, h)[d] * scale;
                        dv[d] += P[(size_t)t * T + j] * REF_DO(b, t, h)[d];
                    }
                }
        }
#undef REF_Q
#undef REF_K
#undef REF_V
#undef REF_DO
    free(dS);
    free(P);
}

// rotary on the q and k heads of qkv (B,T,(NH+2NKV)HS), in place, half-split pairs
static inline void ref_rotary(double *qkv, int B, int T, int NH, int NKV, int HS, double theta) {
    size_t row = (size_t)(NH + 2 * NKV) * HS;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH + NKV; h++)
                for (int i = 0; i < HS / 2; i++) {
                    double ang = t / pow(theta, 2.0 * i / HS);
                    double *x = qkv + ((size_t)b * T + t) * row + (size_t)h * HS;
                    double x1 = x[i], x2 = x[i + HS / 2];
                    x[i] = x1 * cos(ang) - x2 * sin(ang);
                    x[i + HS / 2] = x1 * sin(ang) + x2 * cos(ang);
                }
}

// losses (N) of softmax cross-entropy over the first V columns of logits (N,Vp)
static inline void ref_crossentropy(double *losses, const double *logits, const int32_t *targets,
                                    int N, int V, int Vp) {
    for (int i = 0; i < N; i++) {
        if (targets[i] < 0) { losses[i] = 0.0; continue; }
        double sum = 0.0;
        for (int v = 0; v < V; v++) sum += exp(logits[(size_t)i * Vp + v]);
        losses[i] = log(sum) - logits[(size_t)i * Vp + targets[i]];
    }
}

// a backend of the given storage dtype, or a bail-out that names the reason
static inline Backend *ref_backend(MistDtype dt) {
    char err[256] = "";
    Backend *b = backend_cpu_create(dt, err, sizeof err);
    if (!b) {
        printf("Bail out! backend_cpu_create(%s): %s\n", mist_dtype_name(dt), err);
        exit(1);
    }
    return b;
}

#endif
