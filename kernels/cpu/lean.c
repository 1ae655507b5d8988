// Memory-lean layers ([stage.N] lean; docs/lean-layers.md): the GELU's and the
// norms' backward from their outputs, so that their inputs need not be kept.
//
// GELU. y = gelu_tanh(x) falls from 0 to y_min on (-inf, x*] and rises on
// [x*, inf), so x = gelu^-1(y) is found on the branch the forward's mask bit
// names by a safeguarded Newton iteration in double: the bracket is kept, a
// Newton step that leaves it is replaced by bisection, and it stops when the
// bracket is below 2^-40 (relative to max(1, |x|)). Brackets: right branch
// [x*, max(y, 0) + 1] (x - gelu(x) = x (1 - sigmoid(2u)) < 0.2 for x >= 0);
// left branch [-12, x*] (gelu(-12) = -1e-40 in double, below any fp32 y: a y
// in fp32 between it and 0 is 0, whose preimage is taken as -inf, gelu' = 0,
// as fp32's tanhf already gives for x < -5.2). The error is that of y's
// rounding carried through the inverse: |dx| = |dy| / |gelu'(x)| away from
// x*, and near x* (gelu' -> 0) |dx| <= sqrt(2 |dy| / gelu''(x*)), so the
// derivative is off by at most gelu''(x*) |dx| = sqrt(2 gelu''(x*) |dy|)
// (= 1.1e-4 for fp32's dy = 2^-24 * 0.17; docs/lean-layers.md).
#include <math.h>
#include "kernels/cpu/cpu_ops.h"

enum { LEAN_MIN_PARALLEL = 32768 };  // below this, threads cost more than they save

static const double LEAN_K = 0.7978845608028654;  // sqrt(2/pi)
static const double LEAN_C = 0.044715;

// gelu_tanh(x) and gelu'(x) in double; 0.5 (1 + tanh u) = sigmoid(2u) keeps the left tail accurate
static void gelu_d(double x, double *y, double *dy) {
    double u = LEAN_K * (x + LEAN_C * x * x * x), sg = 1.0 / (1.0 + exp(-2.0 * u));
    *y = x * sg;
    // d/dx [x sigmoid(2u)] = sigmoid(2u) + x * 2 sigmoid(2u) (1 - sigmoid(2u)) u'
    *dy = sg + x * 2.0 * sg * (1.0 - sg) * LEAN_K * (1.0 + 3.0 * LEAN_C * x * x);
}

double cpu_gelu_inverse(double y, int left) {
    if (left && y >= 0.0) return -INFINITY;  // the left tail's 0: gelu' = 0 there
    if (y <= GELU_TANH_YMIN) return GELU_TANH_XMIN;
    double lo = left ? -12.0 : GELU_TANH_XMIN, hi = left ? GELU_TANH_XMIN : (y > 0.0 ? y : 0.0) + 1.0;
    double x = left ? lo : (y > 0.0 ? y : 0.0);  // start at the end where the function is steep
    for (int it = 0; it < 200; it++) {
        double f, df;
        gelu_d(x, &f, &df);
        f -= y;
        // f(lo) and f(hi) have opposite signs: keep the half that holds the root
        if ((f > 0.0) == !left) hi = x;
        else lo = x;
        if (f == 0.0 || hi - lo <= ldexp(fmax(1.0, fabs(x)), -40)) break;
        double nx = df != 0.0 ? x - f / df : lo;
        x = nx > lo && nx < hi ? nx : 0.5 * (lo + hi);
    }
    return x;
}

// gelu'(x) with fp32's formula (cpu_gelu_grad) at the recovered x; -inf: 0
float cpu_gelu_grad_from_output(float y, int left) {
    double x = cpu_gelu_inverse(y, left);
    return isinf(x) ? 0.0f : cpu_gelu_grad((float)x);
}

// out X(n) = gelu_tanh(inp) (may alias inp); mask bit i = inp[i] < x*. One byte (8
// elements) per iteration, so each byte has one writer.
void cpu_gelu_forward_mask(Backend *b, BackendStream *s, void *out, uint8_t *mask, const void *inp, size_t n) {
    MistDtype dt = b->dtype;
    size_t nbytes = (n + 7) / 8;
    CPU_PRAGMA(omp parallel for schedule(static) if (n > LEAN_MIN_PARALLEL))
    for (size_t k = 0; k < nbytes; k++) {
        uint8_t bits = 0;
        for (size_t i = 8 * k; i < 8 * k + 8 && i < n; i++) {
            float x = cpu_ld(inp, dt, i);
            bits |= (uint8_t)((x < (float)GELU_TANH_XMIN) << (i - 8 * k));
            cpu_st(out, dt, i, cpu_gelu(x));
        }
        mask[k] = bits;
    }
}

// dinp X(n) = dout * gelu'(gelu^-1(out)); dinp may alias dout
void cpu_gelu_backward_from_output(Backend *b, BackendStream *s, void *dinp, const void *out,
                                   const uint8_t *mask, const void *dout, size_t n) {
    MistDtype dt = b->dtype;
    CPU_PRAGMA(omp parallel for schedule(static) if (n > LEAN_MIN_PARALLEL / 16))
    for (size_t i = 0; i < n; i++) {
        float g = cpu_gelu_grad_from_output(cpu_ld(out, dt, i), mask[i / 8] >> (i % 8) & 1);
        cpu_st(dinp, dt, i, cpu_ld(dout, dt, i) * g);
    }
}

// (the norm's backward from its output is cpu_norm_backward_from_output, kernels/cpu/norm.c: the same
// sums as cpu_norm_backward, with x̂ recovered from the output)
