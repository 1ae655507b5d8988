// Fused residual + LayerNorm / RMSNorm, forward and backward, and the
// deterministic column sums that weight and bias gradients need.
//
// Forward (one warp per row): x = inp (+ res_in), then
//   LayerNorm: mean = sum x / C, rstd = 1/sqrt(sum (x-mean)^2 / C + eps), y = (x-mean) rstd w + b
//   RMSNorm:   rstd = 1/sqrt(sum x^2 / C + eps),                      y = x rstd w
// Backward with xhat = (x - mean) rstd (mean = 0 for RMSNorm), g = dout * w:
//   dx = rstd (g - mean(g) - xhat mean(g xhat))   (RMSNorm drops the mean(g) term)
//   dw += sum_rows dout xhat, dbias += sum_rows dout
// The column sums run in two passes over fixed row chunks (partials in scratch,
// then added in chunk order): same bits on every run, no atomics.
#include <math.h>
#include "kernels/cuda/cuda_common.cuh"

enum { NORM_WARPS = 4, COLSUM_THREADS = 256, COLSUM_MAX_CHUNKS = 64 };

// one warp per row; each lane handles V consecutive channels at a time
template <int V>
__global__ void norm_forward_kernel(int is_ln, bf16 *res_out, bf16 *out, float *mean, float *rstd,
                                    const bf16 *inp, const bf16 *res_in, const bf16 *w, const bf16 *bias,
                                    int N, int C, float eps) {
    int row = blockIdx.x * NORM_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    size_t o = (size_t)row * C;
    float a[V], b[V];
    // the summed row is rounded to bf16 first: that rounded tensor is what gets normalised
    const bf16 *x = inp;
    if (res_in) {
        for (int c = lane * V; c < C; c += 32 * V) {
            ldv<V>(a, inp + o + c), ldv<V>(b, res_in + o + c);
            for (int i = 0; i < V; i++) a[i] += b[i];
            stv<V>(res_out + o + c, a);
        }
        __syncwarp();
        x = res_out;
    }
    float sum = 0.0f;
    for (int c = lane * V; c < C; c += 32 * V) {
        ldv<V>(a, x + o + c);
        for (int i = 0; i < V; i++) sum += a[i];
    }
    float mu = is_ln ? warp_sum(sum) / C : 0.0f;
    float var = 0.0f;
    for (int c = lane * V; c < C; c += 32 * V) {
        ldv<V>(a, x + o + c);
        for (int i = 0; i < V; i++) var += (a[i] - mu) * (a[i] - mu);
    }
    float r = rsqrtf(warp_sum(var) / C + eps);
    for (int c = lane * V; c < C; c += 32 * V) {
        ldv<V>(a, x + o + c), ldv<V>(b, w + c);
        for (int i = 0; i < V; i++) a[i] = (a[i] - mu) * r * b[i];
        if (bias) {
            ldv<V>(b, bias + c);
            for (int i = 0; i < V; i++) a[i] += b[i];
        }
        stv<V>(out + o + c, a);
    }
    if (lane == 0) {
        if (is_ln && mean) mean[row] = mu;
        if (rstd) rstd[row] = r;
    }
}

template <int V>
__global__ void norm_backward_kernel(int is_ln, bf16 *dinp, const bf16 *dout, const bf16 *inp, const bf16 *w,
                                     const float *mean, const float *rstd, int N, int C) {
    int row = blockIdx.x * NORM_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    size_t o = (size_t)row * C;
    float mu = is_ln ? mean[row] : 0.0f, r = rstd[row];
    float d[V], x[V], g[V];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int c = lane * V; c < C; c += 32 * V) {
        ldv<V>(d, dout + o + c), ldv<V>(x, inp + o + c), ldv<V>(g, w + c);
        for (int i = 0; i < V; i++) {
            float gi = d[i] * g[i];
            sum_g += gi;
            sum_gx += gi * (x[i] - mu) * r;
        }
    }
    float mg = is_ln ? warp_sum(sum_g) / C : 0.0f, mgx = warp_sum(sum_gx) / C;
    // the second pass re-reads the row: 2 C bytes per tensor, still in L1/L2
    for (int c = lane * V; c < C; c += 32 * V) {
        ldv<V>(d, dout + o + c), ldv<V>(x, inp + o + c), ldv<V>(g, w + c);
        float acc[V];
        ldv<V>(acc, dinp + o + c);
        for (int i = 0; i < V; i++) acc[i] += r * (d[i] * g[i] - mg - (x[i] - mu) * r * mgx);
        stv<V>(dinp + o + c, acc);
    }
}

// pass 1: partial[chunk][c] = sum over rows of the chunk of dout (and of dout * xhat when inp != NULL)
__global__ void colsum_partial_kernel(float *partial, float *partial_x, const bf16 *dout, const bf16 *inp,
                                      const float *mean, const float *rstd, int N, int C, int rows_per_chunk) {
    int c = blockIdx.x * COLSUM_THREADS + threadIdx.x, chunk = blockIdx.y;
    if (c >= C) return;
    int r0 = chunk * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float s = 0.0f, sx = 0.0f;
    for (int r = r0; r < r1; r++) {
        float d = ld(dout, (size_t)r * C + c);
        s += d;
        if (inp) sx += d * (ld(inp, (size_t)r * C + c) - (mean ? mean[r] : 0.0f)) * rstd[r];
    }
    partial[(size_t)chunk * C + c] = s;
    if (partial_x) partial_x[(size_t)chunk * C + c] = sx;
}

// pass 2: out[c] += sum over chunks in order (out may be NULL to skip)
__global__ void colsum_final_kernel(bf16 *out, const float *partial, int chunks, int C) {
    int c = blockIdx.x * COLSUM_THREADS + threadIdx.x;
    if (c >= C || !out) return;
    float s = 0.0f;
    for (int k = 0; k < chunks; k++) s += partial[(size_t)k * C + c];
    st(out, c, ld(out, c) + s);
}

static int colsum_rows_per_chunk(int N) {
    int r = (N + COLSUM_MAX_CHUNKS - 1) / COLSUM_MAX_CHUNKS;
    return r < 64 ? 64 : r;
}

extern "C" void cuda_column_sum_accumulate(Backend *b, cudaStream_t st, bf16 *out, const bf16 *in, int N, int C) {
    if (N <= 0 || C <= 0) return;
    int rpc = colsum_rows_per_chunk(N), chunks = (N + rpc - 1) / rpc;
    float *partial = (float *)cuda_scratch(b, (size_t)chunks * C * sizeof(float), "bias gradient");  // (chunks, C)
    dim3 grid((C + COLSUM_THREADS - 1) / COLSUM_THREADS, chunks);
    colsum_partial_kernel<<<grid, COLSUM_THREADS, 0, st>>>(partial, NULL, in, NULL, NULL, NULL, N, C, rpc);
    CUDA_CHECK_LAUNCH();
    colsum_final_kernel<<<grid.x, COLSUM_THREADS, 0, st>>>(out, partial, chunks, C);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_norm_forward(Backend *b, BackendStream *s, NormOp kind, void *res_out, void *out,
                                  float *mean, float *rstd, const void *inp, const void *res_in,
                                  const void *w, const void *bias, int N, int C, float eps) {
    if (N <= 0) return;
    int blocks = (N + NORM_WARPS - 1) / NORM_WARPS;
    auto kernel = cuda_rows_vec8(C, res_out, out, inp, res_in, w) && cuda_rows_vec8(C, bias, 0, 0, 0, 0)
                      ? norm_forward_kernel<8> : norm_forward_kernel<1>;
    kernel<<<blocks, NORM_WARPS * 32, 0, cuda_stream(s)>>>(kind == NORM_OP_LAYERNORM, (bf16 *)res_out, (bf16 *)out,
                                                           mean, rstd, (const bf16 *)inp, (const bf16 *)res_in,
                                                           (const bf16 *)w, (const bf16 *)bias, N, C, eps);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_norm_backward(Backend *b, BackendStream *s, NormOp kind, void *dinp, void *dw, void *dbias,
                                   const void *dout, const void *inp, const void *w,
                                   const float *mean, const float *rstd, int N, int C) {
    if (N <= 0) return;
    int is_ln = kind == NORM_OP_LAYERNORM;
    cudaStream_t st = cuda_stream(s);
    auto kernel = cuda_rows_vec8(C, dinp, dout, inp, w, 0) ? norm_backward_kernel<8> : norm_backward_kernel<1>;
    kernel<<<(N + NORM_WARPS - 1) / NORM_WARPS, NORM_WARPS * 32, 0, st>>>(
        is_ln, (bf16 *)dinp, (const bf16 *)dout, (const bf16 *)inp, (const bf16 *)w, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH();
    int rpc = colsum_rows_per_chunk(N), chunks = (N + rpc - 1) / rpc;
    float *partial = (float *)cuda_scratch(b, 2 * (size_t)chunks * C * sizeof(float), "norm weight gradient");
    float *partial_x = partial + (size_t)chunks * C;  // (chunks, C) each
    dim3 grid((C + COLSUM_THREADS - 1) / COLSUM_THREADS, chunks);
    colsum_partial_kernel<<<grid, COLSUM_THREADS, 0, st>>>(partial, partial_x, (const bf16 *)dout, (const bf16 *)inp,
                                                           is_ln ? mean : NULL, rstd, N, C, rpc);
    CUDA_CHECK_LAUNCH();
    colsum_final_kernel<<<grid.x, COLSUM_THREADS, 0, st>>>((bf16 *)dw, partial_x, chunks, C);
    CUDA_CHECK_LAUNCH();
    if (dbias) {
        colsum_final_kernel<<<grid.x, COLSUM_THREADS, 0, st>>>((bf16 *)dbias, partial, chunks, C);
        CUDA_CHECK_LAUNCH();
    }
}
