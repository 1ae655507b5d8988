// Pointwise activations: GELU (tanh form), SwiGLU, and the residual add.
// GELU:   y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
//         y' = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3*0.044715 x^2)
// SwiGLU: y = silu(g) * u with silu(g) = g * sigmoid(g)
//         dy/dg = u * sigmoid(g) (1 + g (1 - sigmoid(g))),  dy/du = silu(g)
// Every element is computed independently, so any thread split gives the same bits.
#include <math.h>
#include "kernels/cpu/cpu_ops.h"

enum { POINTWISE_MIN_PARALLEL = 32768 };  // below this, threads cost more than they save

static const float GELU_K = 0.7978845608028654f;  // sqrt(2/pi)
static const float GELU_C = 0.044715f;

float cpu_gelu(float x) {
    float u = GELU_K * (x + GELU_C * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

float cpu_gelu_grad(float x) {
    float u = GELU_K * (x + GELU_C * x * x * x);
    float th = tanhf(u);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * GELU_C * x * x);
}

// out X(n) = gelu_tanh(inp X(n))
void cpu_gelu_forward(Backend *b, BackendStream *s, void *out, const void *inp, size_t n) {
    MistDtype dt = b->dtype;
    CPU_PRAGMA(omp parallel for schedule(static) if (n > POINTWISE_MIN_PARALLEL))
    for (size_t i = 0; i < n; i++) cpu_st(out, dt, i, cpu_gelu(cpu_ld(inp, dt, i)));
}

// dinp X(n) = dout X(n) * gelu'(inp X(n)); dinp may alias dout (each element read before written)
void cpu_gelu_backward(Backend *b, BackendStream *s, void *dinp, const void *inp, const void *dout,
                       size_t n) {
    MistDtype dt = b->dtype;
    CPU_PRAGMA(omp parallel for schedule(static) if (n > POINTWISE_MIN_PARALLEL))
    for (size_t i = 0; i < n; i++)
        cpu_st(dinp, dt, i, cpu_ld(dout, dt, i) * cpu_gelu_grad(cpu_ld(inp, dt, i)));
}

static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// inp X(N,2F) rows [gate | up]; out X(N,F) = silu(gate) * up
void cpu_swiglu_forward(Backend *b, BackendStream *s, void *out, const void *inp, int N, int F) {
    MistDtype dt = b->dtype;
    CPU_PRAGMA(omp parallel for schedule(static) if ((size_t)N * F > POINTWISE_MIN_PARALLEL))
    for (int i = 0; i < N; i++) {
        size_t in_row = (size_t)i * 2 * F, out_row = (size_t)i * F;
        for (int f = 0; f < F; f++) {
            float g = cpu_ld(inp, dt, in_row + f), u = cpu_ld(inp, dt, in_row + F + f);
            cpu_st(out, dt, out_row + f, g * sigmoid(g) * u);
        }
    }
}

// dinp X(N,2F) = [dgate | dup] (overwrite); dout X(N,F); inp X(N,2F)
void cpu_swiglu_backward(Backend *b, BackendStream *s, void *dinp, const void *dout, const void *inp,
                         int N, int F) {
    MistDtype dt = b->dtype;
    CPU_PRAGMA(omp parallel for schedule(static) if ((size_t)N * F > POINTWISE_MIN_PARALLEL))
    for (int i = 0; i < N; i++) {
        size_t in_row = (size_t)i * 2 * F, out_row = (size_t)i * F;
        for (int f = 0; f < F; f++) {
            float g = cpu_ld(inp, dt, in_row + f), u = cpu_ld(inp, dt, in_row + F + f);
            float d = cpu_ld(dout, dt, out_row + f), sg = sigmoid(g);
            cpu_st(dinp, dt, in_row + f, d * u * sg * (1.0f + g * (1.0f - sg)));
            cpu_st(dinp, dt, in_row + F + f, d * g * sg);
        }
    }
}

// out X(n) = a X(n) + c X(n); out may alias a or c
void cpu_residual_forward(Backend *b, BackendStream *s, void *out, const void *a, const void *c,
                          size_t n) {
    MistDtype dt = b->dtype;
    CPU_PRAGMA(omp parallel for schedule(static) if (n > POINTWISE_MIN_PARALLEL))
    for (size_t i = 0; i < n; i++) cpu_st(out, dt, i, cpu_ld(a, dt, i) + cpu_ld(c, dt, i));
}
