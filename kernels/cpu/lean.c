// Memory-lean layers ([stage.N] lean; docs/lean-layers.md): the GELU's and the
// norms' backward from their outputs, so that their inputs need not be kept.
//
// GELU: x = gelu^-1(y) on the branch the forward's mask bit names
// (kernels/gelu_inverse.h, shared with the CUDA backend), then gelu'(x) with
// fp32's formula.
#include <math.h>
#include "kernels/cpu/cpu_ops.h"
#include "kernels/gelu_inverse.h"

enum { LEAN_MIN_PARALLEL = 32768 };  // below this, threads cost more than they save

// gelu'(x) with fp32's formula (cpu_gelu_grad) at the recovered x; -inf: 0
float cpu_gelu_grad_from_output(float y, int left) {
    double x = gelu_tanh_inverse(y, left);
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
