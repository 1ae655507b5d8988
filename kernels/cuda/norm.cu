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

enum { NORM_WARPS = 4 };

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

// Column sums in two passes, the same bits on every run (no atomics):
// pass 1 sums fixed row chunks into partial[chunk][c], pass 2 adds the chunks
// in order onto out. A pass-1 block covers 32 V columns (one warp reads 32
// V consecutive elements of a row: 512-byte accesses at V = 8) and the
// chunk's rows dealt to its COLSUM_WARPS warps (warp w: rows w, w + 8, ...);
// the warps' sums are then added in warp order through shared memory. The
// chunk size depends on N, C and the access width only (never on the GPU),
// chosen so that about COLSUM_TARGET_BLOCKS blocks keep enough loads in
// flight (the earlier one-column-per-thread form with 2-byte loads and 64
// chunks ran at ~1 TB/s on an H100), with at most COLSUM_MAX_CHUNKS chunks
// for pass 2 to add (scratch: at most 128 C floats per tensor).
enum { COLSUM_WARPS = 8, COLSUM_TARGET_BLOCKS = 512, COLSUM_MAX_CHUNKS = 128, COLSUM_MIN_ROWS = 32 };

typedef struct {
    int rows_per_chunk, chunks, col_blocks, vec;
} ColsumShape;

static ColsumShape colsum_shape(int N, int C, int vec) {
    ColsumShape s;
    s.vec = vec;
    s.col_blocks = (C + 32 * vec - 1) / (32 * vec);
    int want = (COLSUM_TARGET_BLOCKS + s.col_blocks - 1) / s.col_blocks;
    if (want > COLSUM_MAX_CHUNKS) want = COLSUM_MAX_CHUNKS;  // pass 2 reads chunks serially per warp
    int rpc = (N + want - 1) / want;
    rpc = (rpc + COLSUM_WARPS - 1) / COLSUM_WARPS * COLSUM_WARPS;
    s.rows_per_chunk = rpc < COLSUM_MIN_ROWS ? COLSUM_MIN_ROWS : rpc;
    s.chunks = (N + s.rows_per_chunk - 1) / s.rows_per_chunk;
    return s;
}

// pass 1: partial[chunk][c] = sum over the chunk's rows of dout, and partial_x
// the same of dout * xhat (xhat = (inp - mean) rstd) when inp != NULL
template <int V>
__global__ void __launch_bounds__(COLSUM_WARPS * 32)
colsum_partial_kernel(float *partial, float *partial_x, const bf16 *dout, const bf16 *inp, const float *mean,
                      const float *rstd, int N, int C, int rows_per_chunk) {
    __shared__ float sh[2][COLSUM_WARPS][32 * V];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, chunk = blockIdx.y;
    int c0 = blockIdx.x * 32 * V + lane * V;  // this lane's first column
    int r0 = chunk * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float s[V], sx[V], d[V], x[V];
    for (int i = 0; i < V; i++) s[i] = sx[i] = 0.0f;
    if (c0 < C) {
#pragma unroll 4
        for (int r = r0 + warp; r < r1; r += COLSUM_WARPS) {
            size_t o = (size_t)r * C + c0;
            ldv<V>(d, dout + o);
            for (int i = 0; i < V; i++) s[i] += d[i];
            if (inp) {
                float mu = mean ? mean[r] : 0.0f, rs = rstd[r];
                ldv<V>(x, inp + o);
                for (int i = 0; i < V; i++) sx[i] += d[i] * ((x[i] - mu) * rs);
            }
        }
    }
    for (int i = 0; i < V; i++) sh[0][warp][lane * V + i] = s[i], sh[1][warp][lane * V + i] = sx[i];
    __syncthreads();
    // each column of the block: the warps' sums in warp order
    for (int k = threadIdx.x; k < 32 * V; k += COLSUM_WARPS * 32) {
        int c = blockIdx.x * 32 * V + k;
        if (c >= C) continue;
        float t = 0.0f, tx = 0.0f;
        for (int w = 0; w < COLSUM_WARPS; w++) t += sh[0][w][k], tx += sh[1][w][k];
        partial[(size_t)chunk * C + c] = t;
        if (partial_x) partial_x[(size_t)chunk * C + c] = tx;
    }
}

// pass 2: out[c] += sum over chunks in a fixed order (out may be NULL to skip).
// A block covers 32 columns; its warps take chunks w, w + 8, ... in order
// (a warp reads 32 consecutive floats of a chunk), then the warps' sums are
// added in warp order.
__global__ void __launch_bounds__(COLSUM_WARPS * 32) colsum_final_kernel(bf16 *out, const float *partial, int chunks,
                                                                           int C) {
    __shared__ float sh[COLSUM_WARPS][32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, c = blockIdx.x * 32 + lane;
    float s = 0.0f;
    if (c < C)
        for (int k = warp; k < chunks; k += COLSUM_WARPS) s += partial[(size_t)k * C + c];
    sh[warp][lane] = s;
    __syncthreads();
    if (warp || c >= C || !out) return;
    float t = 0.0f;
    for (int w = 0; w < COLSUM_WARPS; w++) t += sh[w][lane];
    st(out, c, ld(out, c) + t);
}

// pass 1 over dout (and inp when given) into scratch; returns the shape, partial
// (and partial_x) point at (chunks, C) floats each
static ColsumShape colsum_partials(Backend *b, cudaStream_t st, float **partial, float **partial_x, const bf16 *dout,
                                   const bf16 *inp, const float *mean, const float *rstd, int N, int C,
                                   const char *who) {
    int vec8 = cuda_rows_vec8(C, dout, inp, 0, 0, 0);
    ColsumShape s = colsum_shape(N, C, vec8 ? 8 : 1);
    size_t per = (size_t)s.chunks * C;
    *partial = (float *)cuda_scratch(b, (inp ? 2 : 1) * per * sizeof(float), who);
    *partial_x = inp ? *partial + per : NULL;
    dim3 grid(s.col_blocks, s.chunks);
    auto kernel = vec8 ? colsum_partial_kernel<8> : colsum_partial_kernel<1>;
    kernel<<<grid, COLSUM_WARPS * 32, 0, st>>>(*partial, *partial_x, dout, inp, mean, rstd, N, C, s.rows_per_chunk);
    CUDA_CHECK_LAUNCH();
    return s;
}

static void colsum_final(cudaStream_t st, bf16 *out, const float *partial, const ColsumShape *s, int C) {
    colsum_final_kernel<<<(C + 31) / 32, COLSUM_WARPS * 32, 0, st>>>(out, partial, s->chunks, C);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_column_sum_accumulate(Backend *b, cudaStream_t st, bf16 *out, const bf16 *in, int N, int C) {
    if (N <= 0 || C <= 0) return;
    float *partial, *unused;
    ColsumShape s = colsum_partials(b, st, &partial, &unused, in, NULL, NULL, NULL, N, C, "bias gradient");
    colsum_final(st, out, partial, &s, C);
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
    float *partial, *partial_x;
    ColsumShape cs = colsum_partials(b, st, &partial, &partial_x, (const bf16 *)dout, (const bf16 *)inp,
                                     is_ln ? mean : NULL, rstd, N, C, "norm weight gradient");
    colsum_final(st, (bf16 *)dw, partial_x, &cs, C);
    if (dbias) colsum_final(st, (bf16 *)dbias, partial, &cs, C);
}
