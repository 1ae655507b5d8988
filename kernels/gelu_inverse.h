// gelu_tanh's inverse on one of its branches, for the memory-lean layers'
// GELU backward from its output ([stage.N] lean; docs/lean-layers.md): one
// definition for the CPU backend (kernels/cpu/lean.c) and the CUDA one
// (kernels/cuda/lean.cu), plain C in double that nvcc compiles for host and
// device (MIST_HD).
//
// y = gelu_tanh(x) falls from 0 to y_min on (-inf, x*] and rises on
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
#ifndef MIST_GELU_INVERSE_H
#define MIST_GELU_INVERSE_H
#include <math.h>
#include "kernels/backend.h"  // GELU_TANH_XMIN, GELU_TANH_YMIN

// a function both the host and a CUDA kernel call (nothing outside nvcc)
#ifdef __CUDACC__
#define MIST_HD __host__ __device__
#else
#define MIST_HD
#endif

// gelu_tanh(x) and gelu'(x) in double; 0.5 (1 + tanh u) = sigmoid(2u) keeps the left tail accurate
static inline MIST_HD void gelu_tanh_d(double x, double *y, double *dy) {
    const double k = 0.7978845608028654, c = 0.044715;  // sqrt(2/pi), the cubic's coefficient
    double u = k * (x + c * x * x * x), sg = 1.0 / (1.0 + exp(-2.0 * u));
    *y = x * sg;
    // d/dx [x sigmoid(2u)] = sigmoid(2u) + x * 2 sigmoid(2u) (1 - sigmoid(2u)) u'
    *dy = sg + x * 2.0 * sg * (1.0 - sg) * k * (1.0 + 3.0 * c * x * x);
}

// x = gelu_tanh^-1(y) on the branch left (1: x < x*, 0: x >= x*); -inf for the
// left tail's 0 (gelu' = 0 there). A y at or below y_min gives x*.
static inline MIST_HD double gelu_tanh_inverse(double y, int left) {
    if (left && y >= 0.0) return -INFINITY;  // the left tail's 0: gelu' = 0 there
    if (y <= GELU_TANH_YMIN) return GELU_TANH_XMIN;
    double lo = left ? -12.0 : GELU_TANH_XMIN, hi = left ? GELU_TANH_XMIN : (y > 0.0 ? y : 0.0) + 1.0;
    double x = left ? lo : (y > 0.0 ? y : 0.0);  // start at the end where the function is steep
    for (int it = 0; it < 200; it++) {
        double f, df;
        gelu_tanh_d(x, &f, &df);
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

#endif
