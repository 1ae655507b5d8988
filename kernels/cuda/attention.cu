// Causal grouped-query attention on tensor cores, flash-attention style: the
// T x T score matrix is never stored, only per-row log-sum-exp (lse).
//
// Tiles: a block of 4 warps owns 64 rows (queries in the forward and dQ
// kernels, keys in the dK/dV kernel); each warp owns 16 of them and steps
// over the other axis 64 at a time with mma.sync m16n8k16 (bf16 in, fp32
// accumulate). Fragment layout of m16n8k16 (g = lane/4, q = lane%4):
//   A 16x16 row-major: a0 (g, 2q..2q+1), a1 (g+8, 2q..), a2 (g, 2q+8..), a3 (g+8, 2q+8..)
//   B 16x8 (k, n):     b0 (k = 2q..2q+1, n = g), b1 (k = 2q+8.., n = g)
//   C 16x8 fp32:       c0,c1 (g, 2q..2q+1), c2,c3 (g+8, 2q..)
// so the C fragments of two adjacent n-tiles are exactly the A fragment of
// the next product (P @ V reuses the probabilities in registers), and a
// B operand stored (k, n) row-major in shared memory is read with
// ldmatrix.trans.
//
// Forward, per query row (online softmax in base 2, x = s * scale * log2 e):
//   m' = max(m, max_j x_j), l' = l 2^(m-m') + sum_j 2^(x_j-m'), O' = O 2^(m-m') + P V
//   out = O / l, lse = (m + log2 l) ln 2
// Backward, with P = exp(s - lse), D = rowsum(dout * out):
//   dV = P^T dO, dP = dO V^T, dS = P (dP - D), dQ = scale dS K, dK = scale dS^T Q
// dQ and dK/dV are computed by two kernels (the scores are recomputed in
// each) so every gradient element is owned by one warp: no atomics, and the
// bits do not depend on scheduling. GQA: the dK/dV kernel loops over the
// query heads of its group in order.
#include <math.h>
#include <stdint.h>
#include "kernels/cuda/cuda_common.cuh"

#define ATT_ROWS 64   // rows of a block tile
#define ATT_WARPS 4
#define ATT_THREADS (ATT_WARPS * 32)
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

static __device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// four 8x8 b16 matrices, transposed: r0,r1 = B fragment (b0,b1) of one 8-column
// tile, r2,r3 of the next (addresses: see the callers)
static __device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const bf16 *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// four 8x8 b16 matrices as stored: for a (key, d) tile row-major this gives the
// B fragments (b0, b1) of two consecutive 16-wide k steps (addresses: callers)
static __device__ __forceinline__ void ldsm_x4(uint32_t r[4], const bf16 *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

static __device__ __forceinline__ uint32_t ld32(const bf16 *p) { return *(const uint32_t *)p; }

// rows [row0, row0+64) of a (T, stride) bf16 matrix (HS columns from gbase) into
// smem (64, HS+8); rows >= T are zero
template <int HS>
static __device__ __forceinline__ void load_tile(bf16 *sm, const bf16 *gbase, size_t stride, int row0, int T) {
    constexpr int CHUNKS = HS / 8;  // 16-byte pieces per row
    for (int i = threadIdx.x; i < ATT_ROWS * CHUNKS; i += ATT_THREADS) {
        int r = i / CHUNKS, c = (i % CHUNKS) * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (row0 + r < T) v = *(const uint4 *)(gbase + (size_t)(row0 + r) * stride + c);
        *(uint4 *)(sm + r * (HS + 8) + c) = v;
    }
}

// the same tile copied with cp.async (16 bytes per thread and step, rows >= T
// zero-filled by a source size of 0), so the next tile streams in while the
// current one is multiplied; the caller commits and waits
template <int HS>
static __device__ __forceinline__ void load_tile_async(bf16 *sm, const bf16 *gbase, size_t stride, int row0, int T) {
    constexpr int CHUNKS = HS / 8;
    for (int i = threadIdx.x; i < ATT_ROWS * CHUNKS; i += ATT_THREADS) {
        int r = i / CHUNKS, c = (i % CHUNKS) * 8;
        int valid = row0 + r < T;
        const bf16 *src = gbase + (size_t)(valid ? row0 + r : 0) * stride + c;
        uint32_t dst = (uint32_t)__cvta_generic_to_shared(sm + r * (HS + 8) + c);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
    }
    asm volatile("cp.async.commit_group;\n" ::);
}
static __device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }

// A fragments (16 rows from r0, all HS columns) of a smem tile with row pitch HS+8
template <int HS>
static __device__ __forceinline__ void afrag_smem(uint32_t a[4], const bf16 *sm, int r0, int kk) {
    // matrices: (rows +0..7, cols +0..7) = a0, (rows +8.., cols +0..) = a1, (+0.., +8..) = a2, (+8.., +8..) = a3
    int lane = threadIdx.x % 32;
    ldsm_x4(a, sm + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * (HS + 8) + kk * 16 + (lane >> 4) * 8);
}

// S (16 x 64) = A (16 x HS, fragments af or smem rows) @ tile^T, tile (64, HS+8) in smem
template <int HS>
static __device__ __forceinline__ void scores_regs(float s[8][4], const uint32_t af[HS / 16][4], const bf16 *tile) {
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HS / 16; kk += 2) {
            uint32_t b[4];  // lanes 8i..8i+7 address rows j*8.. at column block i (8 wide)
            ldsm_x4(b, tile + (j * 8 + (lane & 7)) * (HS + 8) + kk * 16 + (lane >> 3) * 8);
            mma16816(s[j], af[kk], b[0], b[1]);
            mma16816(s[j], af[kk + 1], b[2], b[3]);
        }
    }
}
template <int HS>
static __device__ __forceinline__ void scores_smem(float s[8][4], const bf16 *arows, int r0, const bf16 *tile) {
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk += 2) {
        uint32_t a0[4], a1[4];
        afrag_smem<HS>(a0, arows, r0, kk);
        afrag_smem<HS>(a1, arows, r0, kk + 1);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            uint32_t b[4];
            ldsm_x4(b, tile + (j * 8 + (lane & 7)) * (HS + 8) + kk * 16 + (lane >> 3) * 8);
            mma16816(s[j], a0, b[0], b[1]);
            mma16816(s[j], a1, b[2], b[3]);
        }
    }
}

// acc (16 x HS) += P (16 x 64, C fragments p) @ tile (64, HS+8) in smem
template <int HS>
static __device__ __forceinline__ void accumulate_pv(float acc[HS / 8][4], const float p[8][4], const bf16 *tile) {
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        uint32_t a[4] = {pack_bf16(p[2 * kk][0], p[2 * kk][1]), pack_bf16(p[2 * kk][2], p[2 * kk][3]),
                         pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]), pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
        for (int dt = 0; dt < HS / 16; dt++) {
            uint32_t b[4];
            ldsm_x4_trans(b, tile + (kk * 16 + (lane & 15)) * (HS + 8) + dt * 16 + (lane >> 4) * 8);
            mma16816(acc[2 * dt], a, b[0], b[1]);
            mma16816(acc[2 * dt + 1], a, b[2], b[3]);
        }
    }
}

// ---------------------------------------------------------------- forward
template <int HS>
// 3 blocks per SM (<= 168 registers per thread) hide the softmax latency of one
// block behind the tensor-core work of the others
__global__ void __launch_bounds__(ATT_THREADS, 3) attention_forward_kernel(bf16 *out, float *lse, const bf16 *qkv,
                                                                        int T, int NH, int NKV, float scale_log2) {
    // two stages of (K, V) tiles: stage kb & 1 is computed while kb + 1 loads
    extern __shared__ __align__(16) unsigned char att_smem[];
    constexpr int TILE = ATT_ROWS * (HS + 8), STAGE = 2 * TILE;  // a stage: K tile then V tile
    bf16 *stages = (bf16 *)att_smem;
    int qb = gridDim.x - 1 - blockIdx.x;  // longest (latest) query blocks first
    int h = blockIdx.y, bb = blockIdx.z, kvh = h / (NH / NKV);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    size_t stride = (size_t)(NH + 2 * NKV) * HS;
    const bf16 *base = qkv + (size_t)bb * T * stride;
    const bf16 *kbase = base + (size_t)(NH + kvh) * HS, *vbase = base + (size_t)(NH + NKV + kvh) * HS;
    int row0 = qb * ATT_ROWS + warp * 16;  // first query of this warp
    int r_lo = row0 + g, r_hi = row0 + g + 8;

    uint32_t qf[HS / 16][4];
    {
        const bf16 *qlo = base + (size_t)r_lo * stride + (size_t)h * HS, *qhi = base + (size_t)r_hi * stride + (size_t)h * HS;
#pragma unroll
        for (int kk = 0; kk < HS / 16; kk++) {
            int c = kk * 16 + 2 * q;
            qf[kk][0] = r_lo < T ? ld32(qlo + c) : 0u;
            qf[kk][1] = r_hi < T ? ld32(qhi + c) : 0u;
            qf[kk][2] = r_lo < T ? ld32(qlo + c + 8) : 0u;
            qf[kk][3] = r_hi < T ? ld32(qhi + c + 8) : 0u;
        }
    }
    float o[HS / 8][4];
#pragma unroll
    for (int i = 0; i < HS / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;

    load_tile_async<HS>(stages, kbase, stride, 0, T);
    load_tile_async<HS>(stages + TILE, vbase, stride, 0, T);
    for (int kb = 0; kb <= qb; kb++) {
        const bf16 *Ks = stages + (kb & 1) * STAGE, *Vs = Ks + TILE;
        if (kb < qb) {
            bf16 *next = stages + ((kb + 1) & 1) * STAGE;
            load_tile_async<HS>(next, kbase, stride, (kb + 1) * ATT_ROWS, T);
            load_tile_async<HS>(next + TILE, vbase, stride, (kb + 1) * ATT_ROWS, T);
            asm volatile("cp.async.wait_group 2;\n" ::);  // this tile's K and V groups have landed
        } else {
            cp_async_wait_all();
        }
        __syncthreads();
        float s[8][4];
        scores_regs<HS>(s, qf, Ks);
        bool diagonal = kb == qb || (kb + 1) * ATT_ROWS > T;
        float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
        for (int j = 0; j < 8; j++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int key = kb * ATT_ROWS + j * 8 + 2 * q + e;
                float x0 = s[j][e] * scale_log2, x1 = s[j][2 + e] * scale_log2;
                if (diagonal) {
                    if (key > r_lo || key >= T) x0 = -INFINITY;
                    if (key > r_hi || key >= T) x1 = -INFINITY;
                }
                s[j][e] = x0;
                s[j][2 + e] = x1;
                mx_lo = fmaxf(mx_lo, x0);
                mx_hi = fmaxf(mx_hi, x1);
            }
        }
        mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, 1));
        mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, 2));
        mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, 1));
        mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, 2));
        float mn_lo = fmaxf(m_lo, mx_lo), mn_hi = fmaxf(m_hi, mx_hi);
        // a row with no valid key yet keeps m = -inf: use 0 so that 2^(x - m) = 0, not NaN
        float ref_lo = mn_lo == -INFINITY ? 0.0f : mn_lo, ref_hi = mn_hi == -INFINITY ? 0.0f : mn_hi;
        float alpha_lo = exp2f(m_lo - ref_lo), alpha_hi = exp2f(m_hi - ref_hi);
        m_lo = mn_lo;
        m_hi = mn_hi;
        float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            s[j][0] = exp2f(s[j][0] - ref_lo);
            s[j][1] = exp2f(s[j][1] - ref_lo);
            s[j][2] = exp2f(s[j][2] - ref_hi);
            s[j][3] = exp2f(s[j][3] - ref_hi);
            sum_lo += s[j][0] + s[j][1];
            sum_hi += s[j][2] + s[j][3];
        }
        l_lo = l_lo * alpha_lo + sum_lo;  // per-thread partial sums; the quad is summed at the end
        l_hi = l_hi * alpha_hi + sum_hi;
#pragma unroll
        for (int i = 0; i < HS / 8; i++) {
            o[i][0] *= alpha_lo;
            o[i][1] *= alpha_lo;
            o[i][2] *= alpha_hi;
            o[i][3] *= alpha_hi;
        }
        accumulate_pv<HS>(o, s, Vs);
        __syncthreads();  // every warp is done with this stage before it is refilled
    }
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 1);
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 2);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 1);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 2);
    float inv_lo = 1.0f / l_lo, inv_hi = 1.0f / l_hi;
    size_t ostride = (size_t)NH * HS;
    bf16 *olo = out + ((size_t)bb * T + r_lo) * ostride + (size_t)h * HS;
    bf16 *ohi = out + ((size_t)bb * T + r_hi) * ostride + (size_t)h * HS;
#pragma unroll
    for (int i = 0; i < HS / 8; i++) {
        int c = i * 8 + 2 * q;
        if (r_lo < T) *(uint32_t *)(olo + c) = pack_bf16(o[i][0] * inv_lo, o[i][1] * inv_lo);
        if (r_hi < T) *(uint32_t *)(ohi + c) = pack_bf16(o[i][2] * inv_hi, o[i][3] * inv_hi);
    }
    if (lse && q == 0) {
        float *lrow = lse + ((size_t)bb * NH + h) * T;
        if (r_lo < T) lrow[r_lo] = (m_lo + log2f(l_lo)) * LN2;
        if (r_hi < T) lrow[r_hi] = (m_hi + log2f(l_hi)) * LN2;
    }
}

// ---------------------------------------------------------------- backward
// D (B, NH, T) = rowsum(dout * out) per head, one warp per (token, head)
__global__ void attention_rowdot_kernel(float *D, const bf16 *dout, const bf16 *out, int B, int T, int NH, int HS) {
    size_t w = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (w >= (size_t)B * T * NH) return;
    int h = w % NH;
    size_t bt = w / NH;
    const bf16 *a = dout + bt * NH * HS + (size_t)h * HS, *c = out + bt * NH * HS + (size_t)h * HS;
    float sum = 0.0f;
    for (int i = lane; i < HS; i += 32) sum += ld(a, i) * ld(c, i);
    sum = warp_sum(sum);
    if (lane == 0) D[((size_t)(bt / T) * NH + h) * T + bt % T] = sum;
}

// dQ: blocks over (query block, head, batch); loops over the key blocks <= its own
template <int HS>
__global__ void __launch_bounds__(ATT_THREADS) attention_dq_kernel(bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
                                                                   const float *lse, const float *D, int T, int NH,
                                                                   int NKV, float scale) {
    extern __shared__ __align__(16) unsigned char att_smem[];  // two (K, V) stages, as in the forward
    constexpr int TILE = ATT_ROWS * (HS + 8), STAGE = 2 * TILE;  // a stage: K tile then V tile
    bf16 *stages = (bf16 *)att_smem;
    int qb = gridDim.x - 1 - blockIdx.x;
    int h = blockIdx.y, bb = blockIdx.z, kvh = h / (NH / NKV);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    size_t stride = (size_t)(NH + 2 * NKV) * HS, ostride = (size_t)NH * HS;
    const bf16 *base = qkv + (size_t)bb * T * stride;
    const bf16 *kbase = base + (size_t)(NH + kvh) * HS, *vbase = base + (size_t)(NH + NKV + kvh) * HS;
    int row0 = qb * ATT_ROWS + warp * 16, r_lo = row0 + g, r_hi = row0 + g + 8;
    const float *lrow = lse + ((size_t)bb * NH + h) * T, *drow = D + ((size_t)bb * NH + h) * T;
    float lse_lo = r_lo < T ? lrow[r_lo] * LOG2E : INFINITY, lse_hi = r_hi < T ? lrow[r_hi] * LOG2E : INFINITY;
    float d_lo = r_lo < T ? drow[r_lo] : 0.0f, d_hi = r_hi < T ? drow[r_hi] : 0.0f;

    uint32_t qf[HS / 16][4], df[HS / 16][4];
    {
        const bf16 *qlo = base + (size_t)r_lo * stride + (size_t)h * HS, *qhi = base + (size_t)r_hi * stride + (size_t)h * HS;
        const bf16 *dlo = dout + ((size_t)bb * T + r_lo) * ostride + (size_t)h * HS;
        const bf16 *dhi = dout + ((size_t)bb * T + r_hi) * ostride + (size_t)h * HS;
#pragma unroll
        for (int kk = 0; kk < HS / 16; kk++) {
            int c = kk * 16 + 2 * q;
            qf[kk][0] = r_lo < T ? ld32(qlo + c) : 0u;
            qf[kk][1] = r_hi < T ? ld32(qhi + c) : 0u;
            qf[kk][2] = r_lo < T ? ld32(qlo + c + 8) : 0u;
            qf[kk][3] = r_hi < T ? ld32(qhi + c + 8) : 0u;
            df[kk][0] = r_lo < T ? ld32(dlo + c) : 0u;
            df[kk][1] = r_hi < T ? ld32(dhi + c) : 0u;
            df[kk][2] = r_lo < T ? ld32(dlo + c + 8) : 0u;
            df[kk][3] = r_hi < T ? ld32(dhi + c + 8) : 0u;
        }
    }
    float dq[HS / 8][4];
#pragma unroll
    for (int i = 0; i < HS / 8; i++) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;
    float scale_log2 = scale * LOG2E;

    load_tile_async<HS>(stages, kbase, stride, 0, T);
    load_tile_async<HS>(stages + TILE, vbase, stride, 0, T);
    for (int kb = 0; kb <= qb; kb++) {
        const bf16 *Ks = stages + (kb & 1) * STAGE, *Vs = Ks + TILE;
        if (kb < qb) {
            bf16 *next = stages + ((kb + 1) & 1) * STAGE;
            load_tile_async<HS>(next, kbase, stride, (kb + 1) * ATT_ROWS, T);
            load_tile_async<HS>(next + TILE, vbase, stride, (kb + 1) * ATT_ROWS, T);
            asm volatile("cp.async.wait_group 2;\n" ::);
        } else {
            cp_async_wait_all();
        }
        __syncthreads();
        float p[8][4], dp[8][4];
        scores_regs<HS>(p, qf, Ks);
        scores_regs<HS>(dp, df, Vs);  // dP = dO V^T
#pragma unroll
        for (int j = 0; j < 8; j++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int key = kb * ATT_ROWS + j * 8 + 2 * q + e;
                float p0 = (key > r_lo || key >= T) ? 0.0f : exp2f(p[j][e] * scale_log2 - lse_lo);
                float p1 = (key > r_hi || key >= T) ? 0.0f : exp2f(p[j][2 + e] * scale_log2 - lse_hi);
                p[j][e] = p0 * (dp[j][e] - d_lo);  // dS
                p[j][2 + e] = p1 * (dp[j][2 + e] - d_hi);
            }
        }
        accumulate_pv<HS>(dq, p, Ks);  // dQ += dS K
        __syncthreads();
    }
    bf16 *qlo = dqkv + ((size_t)bb * T + r_lo) * stride + (size_t)h * HS;
    bf16 *qhi = dqkv + ((size_t)bb * T + r_hi) * stride + (size_t)h * HS;
#pragma unroll
    for (int i = 0; i < HS / 8; i++) {
        int c = i * 8 + 2 * q;
        if (r_lo < T) *(uint32_t *)(qlo + c) = pack_bf16(dq[i][0] * scale, dq[i][1] * scale);
        if (r_hi < T) *(uint32_t *)(qhi + c) = pack_bf16(dq[i][2] * scale, dq[i][3] * scale);
    }
}

// dK, dV: blocks over (key block, kv head, batch); loops over the query heads of
// the group and, for each, over the query blocks >= its own
template <int HS>
__global__ void __launch_bounds__(ATT_THREADS) attention_dkv_kernel(bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
                                                                    const float *lse, const float *D, int T, int NH,
                                                                    int NKV, float scale) {
    extern __shared__ __align__(16) unsigned char att_smem[];
    bf16 *Ks = (bf16 *)att_smem, *Vs = Ks + ATT_ROWS * (HS + 8);
    bf16 *Qs = Vs + ATT_ROWS * (HS + 8), *Ds = Qs + ATT_ROWS * (HS + 8);  // Ds: the dO tile
    float *lse_s = (float *)(Ds + ATT_ROWS * (HS + 8)), *d_s = lse_s + ATT_ROWS;
    int nblocks = gridDim.x, kb = nblocks - 1 - blockIdx.x;  // earliest key blocks see the most queries
    int kvh = blockIdx.y, bb = blockIdx.z, group = NH / NKV;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    size_t stride = (size_t)(NH + 2 * NKV) * HS, ostride = (size_t)NH * HS;
    const bf16 *base = qkv + (size_t)bb * T * stride;
    load_tile<HS>(Ks, base + (size_t)(NH + kvh) * HS, stride, kb * ATT_ROWS, T);
    load_tile<HS>(Vs, base + (size_t)(NH + NKV + kvh) * HS, stride, kb * ATT_ROWS, T);
    int k0 = warp * 16, key_lo = kb * ATT_ROWS + k0 + g, key_hi = key_lo + 8;
    float dk[HS / 8][4], dv[HS / 8][4];
#pragma unroll
    for (int i = 0; i < HS / 8; i++)
        dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] = dv[i][0] = dv[i][1] = dv[i][2] = dv[i][3] = 0.0f;
    float scale_log2 = scale * LOG2E;

    for (int hh = 0; hh < group; hh++) {
        int h = kvh * group + hh;
        const float *lrow = lse + ((size_t)bb * NH + h) * T, *drow = D + ((size_t)bb * NH + h) * T;
        for (int qb = kb; qb < nblocks; qb++) {
            __syncthreads();
            load_tile<HS>(Qs, base + (size_t)h * HS, stride, qb * ATT_ROWS, T);
            load_tile<HS>(Ds, dout + (size_t)bb * T * ostride + (size_t)h * HS, ostride, qb * ATT_ROWS, T);
            if (threadIdx.x < ATT_ROWS) {
                int t = qb * ATT_ROWS + threadIdx.x;
                lse_s[threadIdx.x] = t < T ? lrow[t] * LOG2E : INFINITY;
                d_s[threadIdx.x] = t < T ? drow[t] : 0.0f;
            }
            __syncthreads();
            float p[8][4], dp[8][4];
            scores_smem<HS>(p, Ks, k0, Qs);   // S^T = K Q^T   (16 keys x 64 queries)
            scores_smem<HS>(dp, Vs, k0, Ds);  // dP^T = V dO^T
#pragma unroll
            for (int j = 0; j < 8; j++) {
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    int qi = j * 8 + 2 * q + e, query = qb * ATT_ROWS + qi;
                    float l2 = lse_s[qi], dd = d_s[qi];
                    bool out_lo = query < key_lo || query >= T, out_hi = query < key_hi || query >= T;
                    float p0 = out_lo ? 0.0f : exp2f(p[j][e] * scale_log2 - l2);
                    float p1 = out_hi ? 0.0f : exp2f(p[j][2 + e] * scale_log2 - l2);
                    p[j][e] = p0;
                    p[j][2 + e] = p1;
                    dp[j][e] = p0 * (dp[j][e] - dd);  // dS^T
                    dp[j][2 + e] = p1 * (dp[j][2 + e] - dd);
                }
            }
            accumulate_pv<HS>(dv, p, Ds);   // dV += P^T dO
            accumulate_pv<HS>(dk, dp, Qs);  // dK += dS^T Q
        }
    }
    bf16 *klo = dqkv + ((size_t)bb * T + key_lo) * stride + (size_t)(NH + kvh) * HS;
    bf16 *khi = dqkv + ((size_t)bb * T + key_hi) * stride + (size_t)(NH + kvh) * HS;
    size_t voff = (size_t)NKV * HS;
#pragma unroll
    for (int i = 0; i < HS / 8; i++) {
        int c = i * 8 + 2 * q;
        if (key_lo < T) {
            *(uint32_t *)(klo + c) = pack_bf16(dk[i][0] * scale, dk[i][1] * scale);
            *(uint32_t *)(klo + voff + c) = pack_bf16(dv[i][0], dv[i][1]);
        }
        if (key_hi < T) {
            *(uint32_t *)(khi + c) = pack_bf16(dk[i][2] * scale, dk[i][3] * scale);
            *(uint32_t *)(khi + voff + c) = pack_bf16(dv[i][2], dv[i][3]);
        }
    }
}

// ---------------------------------------------------------------- launchers
static void check_shape(const char *who, int NH, int NKV, int HS) {
    if (HS != 64 && HS != 128) {
        fprintf(stderr, "mist cuda backend: %s: head size %d is not supported (allowed: 64, 128)\n", who, HS);
        abort();
    }
    if (NKV <= 0 || NH % NKV != 0) {
        fprintf(stderr, "mist cuda backend: %s: NH=%d query heads must be a multiple of NKV=%d kv heads\n", who, NH, NKV);
        abort();
    }
}

extern "C" void cuda_attention_forward(Backend *b, BackendStream *s, void *out, float *lse, const void *qkv,
                                       int B, int T, int NH, int NKV, int HS) {
    check_shape("attention_forward", NH, NKV, HS);
    if (B <= 0 || T <= 0) return;
    dim3 grid((T + ATT_ROWS - 1) / ATT_ROWS, NH, B);
    float scale_log2 = LOG2E / sqrtf((float)HS);
    size_t smem = 4 * ATT_ROWS * (HS + 8) * sizeof(bf16);
    static int attribute_set[2];
    if (!attribute_set[HS == 128]) {
        CUDA_CHECK(cudaFuncSetAttribute(HS == 64 ? attention_forward_kernel<64> : attention_forward_kernel<128>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attribute_set[HS == 128] = 1;
    }
    if (HS == 64)
        attention_forward_kernel<64><<<grid, ATT_THREADS, smem, cuda_stream(s)>>>((bf16 *)out, lse, (const bf16 *)qkv, T, NH, NKV, scale_log2);
    else
        attention_forward_kernel<128><<<grid, ATT_THREADS, smem, cuda_stream(s)>>>((bf16 *)out, lse, (const bf16 *)qkv, T, NH, NKV, scale_log2);
    CUDA_CHECK_LAUNCH();
}

template <int HS>
static void launch_backward(Backend *b, cudaStream_t st, bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
                            const float *lse, const float *D, int B, int T, int NH, int NKV) {
    float scale = 1.0f / sqrtf((float)HS);
    dim3 gq((T + ATT_ROWS - 1) / ATT_ROWS, NH, B), gk((T + ATT_ROWS - 1) / ATT_ROWS, NKV, B);
    size_t smem_q = 4 * ATT_ROWS * (HS + 8) * sizeof(bf16);
    size_t smem = 4 * ATT_ROWS * (HS + 8) * sizeof(bf16) + 2 * ATT_ROWS * sizeof(float);
    static int attribute_set;  // one per head size (template instance)
    if (!attribute_set) {
        CUDA_CHECK(cudaFuncSetAttribute(attention_dq_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_q));
        CUDA_CHECK(cudaFuncSetAttribute(attention_dkv_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attribute_set = 1;
    }
    attention_dq_kernel<HS><<<gq, ATT_THREADS, smem_q, st>>>(dqkv, dout, qkv, lse, D, T, NH, NKV, scale);
    CUDA_CHECK_LAUNCH();
    attention_dkv_kernel<HS><<<gk, ATT_THREADS, smem, st>>>(dqkv, dout, qkv, lse, D, T, NH, NKV, scale);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_attention_backward(Backend *b, BackendStream *s, void *dqkv, const void *dout,
                                        const void *qkv, const void *out, const float *lse,
                                        int B, int T, int NH, int NKV, int HS) {
    check_shape("attention_backward", NH, NKV, HS);
    if (B <= 0 || T <= 0) return;
    cudaStream_t st = cuda_stream(s);
    float *D = (float *)cuda_scratch(b, (size_t)B * NH * T * sizeof(float), "attention_backward D");  // (B, NH, T)
    size_t rows = (size_t)B * T * NH;
    attention_rowdot_kernel<<<cuda_blocks(rows * 32, 256), 256, 0, st>>>(D, (const bf16 *)dout, (const bf16 *)out, B, T, NH, HS);
    CUDA_CHECK_LAUNCH();
    if (HS == 64)
        launch_backward<64>(b, st, (bf16 *)dqkv, (const bf16 *)dout, (const bf16 *)qkv, lse, D, B, T, NH, NKV);
    else
        launch_backward<128>(b, st, (bf16 *)dqkv, (const bf16 *)dout, (const bf16 *)qkv, lse, D, B, T, NH, NKV);
}
