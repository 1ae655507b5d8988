// Token + position embedding, forward and backward; the vocabulary-parallel
// forms (tensor parallelism: this rank holds wte rows [v0, v0 + Vt)) are the
// same kernels with tokens outside the range contributing nothing.
//
// The backward adds each output row's gradient into the wte row of its token.
// Many positions can share a token, so a parallel scatter would need atomics
// (and their order would change the bits). Instead the positions are grouped
// by token on the device: a stable radix sort of the (token, position) pairs
// (CUB, stream-ordered), then one block per sorted position; the block that
// starts a run of equal tokens sums the run's rows in position order (stable
// sort) and adds the sum to wte once. Deterministic, no atomics, no host copy
// and no synchronisation: the tokens never leave the device.
#include <stdint.h>
#include <cub/device/device_radix_sort.cuh>
#include "kernels/cuda/cuda_common.cuh"

__global__ void embedding_forward_kernel(bf16 *out, const int32_t *tokens, const bf16 *wte, const bf16 *wpe,
                                         int v0, int Vt, int N, int T, int C) {
    size_t n = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t bt = i / C, c = i % C;
        int64_t local = (int64_t)tokens[bt] - v0;
        float v = local >= 0 && local < Vt ? ld(wte, (size_t)local * C + c) : 0.0f;
        if (wpe) v += ld(wpe, (size_t)(bt % T) * C + c);
        st(out, i, v);
    }
}

__global__ void iota_kernel(int32_t *v, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v[i] = i;
}

// grid (N sorted positions, channel blocks); keys = tokens sorted (stable),
// pos = their positions. Block k works only when k starts a run of one token
// inside this rank's rows [v0, v0 + Vt): dwte[token - v0] += sum of the run.
__global__ void embedding_wte_backward_kernel(bf16 *dwte, const bf16 *dout, const int32_t *keys, const int32_t *pos,
                                              int N, int v0, int Vt, int C) {
    int k = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    int32_t tok = keys[k];
    int64_t local = (int64_t)tok - v0;
    if (c >= C || (k > 0 && keys[k - 1] == tok) || local < 0 || local >= Vt) return;
    float s = 0.0f;
    for (int j = k; j < N && keys[j] == tok; j++) s += ld(dout, (size_t)pos[j] * C + c);
    size_t o = (size_t)local * C + c;
    st(dwte, o, ld(dwte, o) + s);
}

// dwpe[t, c] += sum over b of dout[b, t, c], in b order
__global__ void embedding_wpe_backward_kernel(bf16 *dwpe, const bf16 *dout, int B, int T, int C) {
    size_t n = (size_t)T * C;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = 0.0f;
    for (int bb = 0; bb < B; bb++) s += ld(dout, (size_t)bb * n + i);
    st(dwpe, i, ld(dwpe, i) + s);
}

extern "C" void cuda_embedding_forward_range(Backend *b, BackendStream *s, void *out, const int32_t *tokens,
                                             const void *wte, const void *wpe, int v0, int Vt, int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    if (!n) return;
    embedding_forward_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream(s)>>>(
        (bf16 *)out, tokens, (const bf16 *)wte, (const bf16 *)wpe, v0, Vt, B * T, T, C);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_embedding_forward(Backend *b, BackendStream *s, void *out, const int32_t *tokens,
                                       const void *wte, const void *wpe, int B, int T, int C) {
    cuda_embedding_forward_range(b, s, out, tokens, wte, wpe, 0, INT32_MAX, B, T, C);
}

// The embedding backward's device buffers for N tokens: sorted tokens | positions | sorted
// positions (the lists, rounded up to 256 bytes) | CUB's temporary storage. Grown when N
// needs more; kept for the process (reserved_bytes counts them).
static void sort_buffers(CudaCtx *ctx, int N, cudaStream_t st, size_t *lists, size_t *temp) {
    *temp = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, *temp, (const int32_t *)nullptr, (int32_t *)nullptr,
                                               (const int32_t *)nullptr, (int32_t *)nullptr, N, 0, 32, st));
    *lists = ((3 * (size_t)N * sizeof(int32_t)) + 255) / 256 * 256;
    size_t need = *lists + *temp;
    if (need > ctx->token_sort_bytes) {
        CUDA_CHECK(cudaStreamSynchronize(st));  // an earlier call may still read the old buffer
        if (ctx->token_sort) CUDA_CHECK(cudaFree(ctx->token_sort));
        CUDA_CHECK(cudaMalloc(&ctx->token_sort, need));
        ctx->token_sort_bytes = need;
    }
}

// before the run (Backend.prepare_op): the buffers of a backward of N tokens
extern "C" void cuda_embedding_prepare(Backend *b, int N) {
    size_t lists, temp;
    if (N > 0) sort_buffers(cuda_ctx(b), N, 0, &lists, &temp);
}

extern "C" void cuda_embedding_backward_range(Backend *b, BackendStream *s, void *dwte, void *dwpe, const void *dout,
                                              const int32_t *tokens, int v0, int Vt, int B, int T, int C) {
    CudaCtx *ctx = cuda_ctx(b);
    cudaStream_t st = cuda_stream(s);
    int N = B * T;
    if (N <= 0) return;
    if (dwpe) {
        size_t n = (size_t)T * C;
        embedding_wpe_backward_kernel<<<cuda_blocks(n, 256), 256, 0, st>>>((bf16 *)dwpe, (const bf16 *)dout, B, T, C);
        CUDA_CHECK_LAUNCH();
    }
    size_t lists, temp;
    sort_buffers(ctx, N, st, &lists, &temp);
    int32_t *keys = (int32_t *)ctx->token_sort, *pos = keys + N, *pos_sorted = pos + N;
    iota_kernel<<<cuda_blocks((size_t)N, 256), 256, 0, st>>>(pos, N);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs((char *)ctx->token_sort + lists, temp, tokens, keys, pos, pos_sorted, N,
                                               0, 32, st));
    dim3 grid(N, (C + 127) / 128);
    embedding_wte_backward_kernel<<<grid, 128, 0, st>>>((bf16 *)dwte, (const bf16 *)dout, keys, pos_sorted, N, v0, Vt,
                                                        C);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_embedding_backward(Backend *b, BackendStream *s, void *dwte, void *dwpe, const void *dout,
                                        const int32_t *tokens, int B, int T, int C) {
    cuda_embedding_backward_range(b, s, dwte, dwpe, dout, tokens, 0, INT32_MAX, B, T, C);
}
