// Softmax cross-entropy when the vocabulary is split over tensor-parallel
// ranks (kernels/cpu/crossentropy_vocab_parallel.c has the math): rank r holds
// logits columns [v0, v0 + Vt) of every row, and the caller reduces over the
// ranks between the three passes:
//   1. m_r = max over the rank's columns            -> M = all-reduce MAX
//   2. S_r = sum exp(z - M), z_target if it is here -> S, Z = all-reduce SUM
//   3. loss = log S + M - Z; dz = dloss (exp(z - M) / S - [v == target]).
// One block per row; a row's partial maxima and sums are combined over the
// block in a fixed order (the same bits every run, no atomics).
#include <math.h>
#include <stdint.h>
#include "kernels/cuda/cuda_common.cuh"

enum { VP_THREADS = 256 };

// the block's combination of every thread's v under op (max or sum), in a
// fixed order: warps by shuffles, then warp 0 over the warps' results
template <bool MAX>
__device__ float block_combine(float v, float *sh) {
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? fmaxf(v, u) : v + u;
    }
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    float r = MAX ? -INFINITY : 0.0f;
    for (int w = 0; w < VP_THREADS / 32; w++) r = MAX ? fmaxf(r, sh[w]) : r + sh[w];
    __syncthreads();  // sh is reused by the caller's next combination
    return r;
}

__global__ void vocab_max_kernel(float *rowmax, const bf16 *logits, int Vt, int Vp) {
    __shared__ float sh[VP_THREADS / 32];
    const bf16 *z = logits + (size_t)blockIdx.x * Vp;
    float m = -INFINITY;
    for (int v = threadIdx.x; v < Vt; v += VP_THREADS) m = fmaxf(m, ld(z, v));
    m = block_combine<true>(m, sh);
    if (threadIdx.x == 0) rowmax[blockIdx.x] = m;
}

__global__ void vocab_stats_kernel(float *stats, const bf16 *logits, const float *rowmax, const int32_t *targets,
                                   int v0, int N, int Vt, int Vp) {
    __shared__ float sh[VP_THREADS / 32];
    int row = blockIdx.x, target = targets[row];
    const bf16 *z = logits + (size_t)row * Vp;
    float M = rowmax[row], s = 0.0f;
    if (target >= 0)  // an ignored row sums nothing (its loss and gradient are 0)
        for (int v = threadIdx.x; v < Vt; v += VP_THREADS) s += expf(ld(z, v) - M);
    s = block_combine<false>(s, sh);
    if (threadIdx.x == 0) {
        int64_t local = (int64_t)target - v0;
        stats[row] = s;
        stats[N + row] = target >= 0 && local >= 0 && local < Vt ? ld(z, (int)local) : 0.0f;
    }
}

__global__ void vocab_finish_kernel(float *losses, bf16 *logits, const float *rowmax, const float *stats,
                                    const int32_t *targets, int v0, int N, int Vt, int Vp, float dloss) {
    int row = blockIdx.x, target = targets[row];
    bf16 *z = logits + (size_t)row * Vp;
    if (target < 0) {
        if (losses && threadIdx.x == 0) losses[row] = 0.0f;
        if (dloss != 0.0f)
            for (int v = threadIdx.x; v < Vp; v += VP_THREADS) st(z, v, 0.0f);
        return;
    }
    float lse = rowmax[row] + logf(stats[row]);
    if (losses && threadIdx.x == 0) losses[row] = lse - stats[N + row];
    if (dloss == 0.0f) return;
    int64_t local = (int64_t)target - v0;
    for (int v = threadIdx.x; v < Vp; v += VP_THREADS) {
        float g = v < Vt ? dloss * (expf(ld(z, v) - lse) - (v == local ? 1.0f : 0.0f)) : 0.0f;
        st(z, v, g);
    }
}

extern "C" void cuda_crossentropy_vocab_max(Backend *b, BackendStream *s, float *rowmax, const void *logits, int N,
                                            int Vt, int Vp) {
    if (N <= 0) return;
    vocab_max_kernel<<<N, VP_THREADS, 0, cuda_stream(s)>>>(rowmax, (const bf16 *)logits, Vt, Vp);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_crossentropy_vocab_stats(Backend *b, BackendStream *s, float *stats, const void *logits,
                                              const float *rowmax, const int32_t *targets, int v0, int N, int Vt,
                                              int Vp) {
    if (N <= 0) return;
    vocab_stats_kernel<<<N, VP_THREADS, 0, cuda_stream(s)>>>(stats, (const bf16 *)logits, rowmax, targets, v0, N, Vt,
                                                             Vp);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_crossentropy_vocab_finish(Backend *b, BackendStream *s, float *losses, void *logits,
                                               const float *rowmax, const float *stats, const int32_t *targets, int v0,
                                               int N, int Vt, int Vp, float dloss) {
    if (N <= 0) return;
    vocab_finish_kernel<<<N, VP_THREADS, 0, cuda_stream(s)>>>(losses, (bf16 *)logits, rowmax, stats, targets, v0, N,
                                                              Vt, Vp, dloss);
    CUDA_CHECK_LAUNCH();
}
