// Softmax cross-entropy fused with its gradient, one block per row.
// With lse = log sum_{v<V} exp(z_v): loss = lse - z_target and
// dz_v = dloss (exp(z_v - lse) - [v == target]) for v < V, 0 for padding v >= V.
// Pass 1 keeps a running (max, sum) per thread (online softmax), merged across
// the block in a fixed order; pass 2 overwrites the logits with the gradient.
#include <math.h>
#include "kernels/cuda/cuda_common.cuh"

enum { CE_THREADS = 512 };

__global__ void crossentropy_kernel(float *losses, bf16 *logits, const int32_t *targets, int V, int Vp, float dloss) {
    __shared__ float sh_m[CE_THREADS / 32], sh_s[CE_THREADS / 32];
    int row = blockIdx.x, tid = threadIdx.x, lane = tid % 32, wid = tid / 32;
    bf16 *z = logits + (size_t)row * Vp;
    int target = targets[row];
    float m = -INFINITY, s = 0.0f;
    for (int v = tid; v < V; v += CE_THREADS) {
        float x = ld(z, v);
        if (x > m) {
            s = s * expf(m - x) + 1.0f;
            m = x;
        } else {
            s += expf(x - m);
        }
    }
    // merge (m, s) pairs: warp, then block
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        float mm = fmaxf(m, m2);
        s = (m == -INFINITY ? 0.0f : s * expf(m - mm)) + (m2 == -INFINITY ? 0.0f : s2 * expf(m2 - mm));
        m = mm;
    }
    if (lane == 0) { sh_m[wid] = m; sh_s[wid] = s; }
    __syncthreads();
    float M = -INFINITY, S = 0.0f;
    for (int w = 0; w < CE_THREADS / 32; w++) {
        float mm = fmaxf(M, sh_m[w]);
        S = (M == -INFINITY ? 0.0f : S * expf(M - mm)) + (sh_m[w] == -INFINITY ? 0.0f : sh_s[w] * expf(sh_m[w] - mm));
        M = mm;
    }
    float lse = M + logf(S);
    __syncthreads();  // every thread has read z[target] below before pass 2 overwrites it
    float zt = target >= 0 ? ld(z, target) : 0.0f;
    __syncthreads();
    if (tid == 0) losses[row] = target >= 0 ? lse - zt : 0.0f;
    if (dloss != 0.0f) {
        for (int v = tid; v < Vp; v += CE_THREADS) {
            float g = 0.0f;
            if (target >= 0 && v < V) g = dloss * (expf(ld(z, v) - lse) - (v == target ? 1.0f : 0.0f));
            st(z, v, g);
        }
    }
}

extern "C" void cuda_crossentropy_forward_backward(Backend *b, BackendStream *s, float *losses, void *logits,
                                                   const int32_t *targets, int N, int V, int Vp, float dloss) {
    if (N <= 0) return;
    crossentropy_kernel<<<N, CE_THREADS, 0, cuda_stream(s)>>>(losses, (bf16 *)logits, targets, V, Vp, dloss);
    CUDA_CHECK_LAUNCH();
}
