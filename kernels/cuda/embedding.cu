// Token + position embedding, forward and backward; the vocabulary-parallel
// forms (tensor parallelism: this rank holds wte rows [v0, v0 + Vt)) are the
// same kernels with tokens outside the range contributing nothing.
//
// The backward adds each output row's gradient into the wte row of its token.
// Many positions can share a token, so a parallel scatter would need atomics
// (and their order would change the bits). Instead the positions are grouped
// by token on the host (a stable sort of B*T ints: tokens are tiny next to
// the activations), and one thread per (token, channel) sums its positions in
// position order, then adds the sum to wte once. Deterministic, no atomics;
// the cost is one stream synchronisation per call.
#include <stdint.h>
#include <algorithm>
#include <vector>
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

// grid (U unique tokens, channel blocks); order = positions sorted by token,
// seg[u]..seg[u+1] the positions of token uniq[u]
__global__ void embedding_wte_backward_kernel(bf16 *dwte, const bf16 *dout, const int32_t *order,
                                              const int32_t *uniq, const int32_t *seg, int C) {
    int u = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int k = seg[u]; k < seg[u + 1]; k++) s += ld(dout, (size_t)order[k] * C + c);
    size_t o = (size_t)uniq[u] * C + c;
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
    size_t need = 3 * (size_t)N + 1;  // order (<= N) | uniq (<= N) | seg (<= N+1)
    if (need > ctx->token_capacity) {
        CUDA_CHECK(cudaStreamSynchronize(st));
        if (ctx->host_tokens) CUDA_CHECK(cudaFreeHost(ctx->host_tokens));
        if (ctx->dev_order) CUDA_CHECK(cudaFree(ctx->dev_order));
        CUDA_CHECK(cudaMallocHost((void **)&ctx->host_tokens, need * sizeof(int32_t)));
        CUDA_CHECK(cudaMalloc((void **)&ctx->dev_order, need * sizeof(int32_t)));
        ctx->token_capacity = need;
    }
    CUDA_CHECK(cudaMemcpyAsync(ctx->host_tokens, tokens, (size_t)N * sizeof(int32_t), cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    // the positions whose token this rank holds, grouped by token (stable: in position order)
    std::vector<int32_t> tok(ctx->host_tokens, ctx->host_tokens + N), order;
    order.reserve(N);
    for (int i = 0; i < N; i++) {
        int64_t local = (int64_t)tok[i] - v0;
        if (local >= 0 && local < Vt) order.push_back(i);
    }
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t c) { return tok[a] < tok[c]; });
    int M = (int)order.size(), U = 0;
    int32_t *h = ctx->host_tokens, *uniq = h + M, *seg = nullptr;
    std::vector<int32_t> segs;
    for (int k = 0; k < M; k++) {
        if (k == 0 || tok[order[k]] != tok[order[k - 1]]) {
            uniq[U++] = tok[order[k]] - v0;  // the rank's row of that token
            segs.push_back(k);
        }
    }
    if (U == 0) return;  // no token of this rank's rows: dwte unchanged
    segs.push_back(M);
    for (int k = 0; k < M; k++) h[k] = order[k];
    seg = uniq + U;
    for (int u = 0; u <= U; u++) seg[u] = segs[u];
    CUDA_CHECK(cudaMemcpyAsync(ctx->dev_order, h, (size_t)(M + 2 * U + 1) * sizeof(int32_t), cudaMemcpyHostToDevice, st));
    dim3 grid(U, (C + 127) / 128);
    embedding_wte_backward_kernel<<<grid, 128, 0, st>>>((bf16 *)dwte, (const bf16 *)dout, ctx->dev_order,
                                                        ctx->dev_order + M, ctx->dev_order + M + U, C);
    CUDA_CHECK_LAUNCH();
    // the pinned staging buffer is reused by the next call: wait for the upload
    CUDA_CHECK(cudaStreamSynchronize(st));
}

extern "C" void cuda_embedding_backward(Backend *b, BackendStream *s, void *dwte, void *dwpe, const void *dout,
                                        const int32_t *tokens, int B, int T, int C) {
    cuda_embedding_backward_range(b, s, dwte, dwpe, dout, tokens, 0, INT32_MAX, B, T, C);
}
