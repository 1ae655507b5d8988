// Memory-lean layers ([stage.N] lean; docs/lean-layers.md) on the GPU: the
// GELU's forward with its branch mask and its backward from the output, and
// the norms' backward from their output. The GELU's inverse, its math and
// error bound are kernels/gelu_inverse.h's (the CPU backend's); these are plain
// forms (one thread per mask byte, element or column; deterministic sums
// in row order), not tuned.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/gelu_inverse.h"

enum { LEAN_THREADS = 256, LEAN_NORM_WARPS = 4 };

// gelu'(gelu^-1(y)) on the branch `left` (x < x*) with gelu_tanh_grad's fp32 formula: the
// inverse is kernels/gelu_inverse.h's, the CPU backend's; -inf (the left tail's 0): 0
static __device__ float lean_gelu_grad_from_output(float y, int left) {
    double x = gelu_tanh_inverse(y, left);
    return isinf(x) ? 0.0f : gelu_tanh_grad((float)x);
}

__global__ void lean_gelu_forward_mask_kernel(bf16 *out, uint8_t *mask, const bf16 *inp, size_t n) {
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= (n + 7) / 8) return;
    unsigned bits = 0;
    for (size_t i = 8 * k; i < 8 * k + 8 && i < n; i++) {
        float x = ld(inp, i);
        bits |= (unsigned)(x < (float)GELU_TANH_XMIN) << (i - 8 * k);
        st(out, i, gelu_tanh(x));
    }
    mask[k] = (uint8_t)bits;
}

__global__ void lean_gelu_backward_kernel(bf16 *dinp, const bf16 *out, const uint8_t *mask, const bf16 *dout,
                                          size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    st(dinp, i, ld(dout, i) * lean_gelu_grad_from_output(ld(out, i), mask[i / 8] >> (i % 8) & 1));
}

static __device__ __forceinline__ float lean_xhat(const bf16 *out, const bf16 *w, const bf16 *bias, size_t o,
                                                  int c) {
    float wc = ld(w, c);
    return wc == 0.0f ? 0.0f : (ld(out, o + c) - (bias ? ld(bias, c) : 0.0f)) / wc;
}

// one warp per row: dinp += rstd (g - mean(g) - xhat mean(g xhat)), g = dout w
__global__ void lean_norm_dinp_kernel(int is_ln, bf16 *dinp, const bf16 *dout, const bf16 *out, const bf16 *w,
                                      const bf16 *bias, const float *rstd, int N, int C) {
    int row = blockIdx.x * LEAN_NORM_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    size_t o = (size_t)row * C;
    float r = rstd[row], sum_g = 0.0f, sum_gx = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float g = ld(dout, o + c) * ld(w, c);
        sum_g += g;
        sum_gx += g * lean_xhat(out, w, bias, o, c);
    }
    float mg = is_ln ? warp_sum(sum_g) / C : 0.0f, mgx = warp_sum(sum_gx) / C;
    for (int c = lane; c < C; c += 32) {
        float g = ld(dout, o + c) * ld(w, c);
        st(dinp, o + c, ld(dinp, o + c) + r * (g - mg - lean_xhat(out, w, bias, o, c) * mgx));
    }
}

// one thread per column: dw += sum_i dout xhat, dbias += sum_i dout (rows in order)
__global__ void lean_norm_dw_kernel(bf16 *dw, bf16 *dbias, const bf16 *dout, const bf16 *out, const bf16 *w,
                                    const bf16 *bias, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float aw = 0.0f, ab = 0.0f;
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        float d = ld(dout, o + c);
        aw += d * lean_xhat(out, w, bias, o, c);
        ab += d;
    }
    if (dw) st(dw, c, ld(dw, c) + aw);
    if (dbias) st(dbias, c, ld(dbias, c) + ab);
}

extern "C" void cuda_gelu_forward_mask(Backend *b, BackendStream *s, void *out, uint8_t *mask, const void *inp,
                                       size_t n) {
    if (!n) return;
    lean_gelu_forward_mask_kernel<<<cuda_blocks((n + 7) / 8, LEAN_THREADS), LEAN_THREADS, 0, cuda_stream(s)>>>(
        (bf16 *)out, mask, (const bf16 *)inp, n);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_gelu_backward_from_output(Backend *b, BackendStream *s, void *dinp, const void *out,
                                               const uint8_t *mask, const void *dout, size_t n) {
    if (!n) return;
    lean_gelu_backward_kernel<<<cuda_blocks(n, LEAN_THREADS), LEAN_THREADS, 0, cuda_stream(s)>>>(
        (bf16 *)dinp, (const bf16 *)out, mask, (const bf16 *)dout, n);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_norm_backward_from_output(Backend *b, BackendStream *s, NormOp kind, void *dinp, void *dw,
                                               void *dbias, const void *dout, const void *out, const void *w,
                                               const void *bias, const float *rstd, int N, int C) {
    if (N <= 0) return;
    cudaStream_t st = cuda_stream(s);
    if (dinp) {
        lean_norm_dinp_kernel<<<(N + LEAN_NORM_WARPS - 1) / LEAN_NORM_WARPS, LEAN_NORM_WARPS * 32, 0, st>>>(
            kind == NORM_OP_LAYERNORM, (bf16 *)dinp, (const bf16 *)dout, (const bf16 *)out, (const bf16 *)w,
            (const bf16 *)bias, rstd, N, C);
        CUDA_CHECK_LAUNCH();
    }
    if (dw || dbias) {
        lean_norm_dw_kernel<<<cuda_blocks(C, LEAN_THREADS), LEAN_THREADS, 0, st>>>(
            (bf16 *)dw, (bf16 *)dbias, (const bf16 *)dout, (const bf16 *)out, (const bf16 *)w, (const bf16 *)bias, N,
            C);
        CUDA_CHECK_LAUNCH();
    }
}
