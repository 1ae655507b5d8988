// Dtype conversion and in-place scaling of storage tensors.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu_ops.h"

enum { CONVERT_MIN_PARALLEL = 65536 };

static void require_float_dtype(MistDtype t, const char *what) {
    if (t != MIST_F32 && t != MIST_BF16) {
        fprintf(stderr, "mist cpu backend: cast %s dtype %s is not supported (allowed: f32, bf16)\n",
                what, mist_dtype_name(t));
        abort();
    }
}

// dst (n elements of dst_t) = src (n elements of src_t); f32 -> bf16 rounds to nearest even
void cpu_cast(Backend *b, BackendStream *s, void *dst, MistDtype dst_t, const void *src,
              MistDtype src_t, size_t n) {
    require_float_dtype(dst_t, "destination");
    require_float_dtype(src_t, "source");
    if (dst_t == src_t) {
        if (n) memmove(dst, src, n * mist_dtype_size(src_t));
        return;
    }
    CPU_PRAGMA(omp parallel for schedule(static) if (n > CONVERT_MIN_PARALLEL))
    for (size_t i = 0; i < n; i++) cpu_st(dst, dst_t, i, cpu_ld(src, src_t, i));
}

// x X(n) *= alpha
void cpu_scale(Backend *b, BackendStream *s, void *x, float alpha, size_t n) {
    MistDtype dt = b->dtype;
    CPU_PRAGMA(omp parallel for schedule(static) if (n > CONVERT_MIN_PARALLEL))
    for (size_t i = 0; i < n; i++) cpu_st(x, dt, i, cpu_ld(x, dt, i) * alpha);
}
