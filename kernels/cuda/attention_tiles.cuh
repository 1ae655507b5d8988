// Internal to the CUDA backend's attention (attention.cu and the wgmma kernels):
// the tile size, mma.sync / ldmatrix wrappers, tile loaders, and the pieces of
// the flash-attention loops that the kernels share (score products, P V,
// online softmax, output rows).
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
#ifndef MIST_ATTENTION_TILES_CUH
#define MIST_ATTENTION_TILES_CUH
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
// S (RT x 16 x 64) = A (RT x 16 rows from r0 of arows, HS columns) @ tile^T, both in
// smem (row pitch HS+8). With RT = 2 every K fragment read from shared memory
// feeds four products instead of two. One 16-wide k step at a time (the A
// fragments of one step live at once: 4 RT registers); each ldmatrix.x4 of
// the tile gives the B fragments of two adjacent 8-key column tiles.
template <int HS, int RT>
static __device__ __forceinline__ void scores_smem(float s[RT][8][4], const bf16 *arows, int r0, const bf16 *tile) {
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int rt = 0; rt < RT; rt++)
#pragma unroll
        for (int j = 0; j < 8; j++) s[rt][j][0] = s[rt][j][1] = s[rt][j][2] = s[rt][j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++) {
        uint32_t a[RT][4];
#pragma unroll
        for (int rt = 0; rt < RT; rt++) afrag_smem<HS>(a[rt], arows, r0 + rt * 16, kk);
#pragma unroll
        for (int j = 0; j < 8; j += 2) {
            // lanes 0-7: keys j*8.., columns kk*16+0..7 (b0 of tile j); 8-15: +8.. (b1);
            // 16-23, 24-31: the same for keys (j+1)*8..
            uint32_t b[4];
            ldsm_x4(b, tile + (j * 8 + (lane & 7) + (lane >> 4) * 8) * (HS + 8) + kk * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
            for (int rt = 0; rt < RT; rt++) {
                mma16816(s[rt][j], a[rt], b[0], b[1]);
                mma16816(s[rt][j + 1], a[rt], b[2], b[3]);
            }
        }
    }
}

// acc (RT x 16 x HS) += P (RT x 16 x 64, C fragments p) @ tile (64, HS+8) in smem;
// each V fragment feeds RT row tiles
template <int HS, int RT>
static __device__ __forceinline__ void accumulate_pv(float acc[RT][HS / 8][4], const float p[RT][8][4], const bf16 *tile) {
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        uint32_t a[RT][4];
#pragma unroll
        for (int rt = 0; rt < RT; rt++) {
            a[rt][0] = pack_bf16(p[rt][2 * kk][0], p[rt][2 * kk][1]);
            a[rt][1] = pack_bf16(p[rt][2 * kk][2], p[rt][2 * kk][3]);
            a[rt][2] = pack_bf16(p[rt][2 * kk + 1][0], p[rt][2 * kk + 1][1]);
            a[rt][3] = pack_bf16(p[rt][2 * kk + 1][2], p[rt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dt = 0; dt < HS / 16; dt++) {
            uint32_t b[4];
            ldsm_x4_trans(b, tile + (kk * 16 + (lane & 15)) * (HS + 8) + dt * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int rt = 0; rt < RT; rt++) {
                mma16816(acc[rt][2 * dt], a[rt], b[0], b[1]);
                mma16816(acc[rt][2 * dt + 1], a[rt], b[2], b[3]);
            }
        }
    }
}

// The online-softmax state of the two rows (r_lo = g, r_hi = g + 8 of a 16-row
// tile) a thread holds: running max m (base 2) and this thread's partial sum l
struct RowPair {
    float m_lo, m_hi, l_lo, l_hi;
};

static __device__ __forceinline__ RowPair row_pair(void) {
    RowPair r = {-INFINITY, -INFINITY, 0.0f, 0.0f};
    return r;
}

// One 64-key tile (keys from key0) of the forward's online softmax for one
// 16-row tile: scores s to base 2 (masked past the row on diagonal tiles and
// past T), turned into unnormalised probabilities in place; rp moves to the new
// running max, and alpha = 2^(m_old - m_new) is what the output rows must be
// scaled by (softmax_tile does it at once; the overlapped wgmma forward once
// the previous tile's P V has landed).
static __device__ __forceinline__ void softmax_scores(float s[8][4], RowPair &rp, int row0, int key0, int T,
                                                      bool diagonal, float scale_log2, float &alpha_lo,
                                                      float &alpha_hi) {
    int q = threadIdx.x % 4;
    const int r_lo = row0 + (threadIdx.x % 32) / 4, r_hi = r_lo + 8;
    float m_lo = rp.m_lo, m_hi = rp.m_hi, l_lo = rp.l_lo, l_hi = rp.l_hi;
    float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; j++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            int key = key0 + j * 8 + 2 * q + e;
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
    alpha_lo = exp2f(m_lo - ref_lo), alpha_hi = exp2f(m_hi - ref_hi);
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
    rp.m_lo = m_lo;
    rp.m_hi = m_hi;
    rp.l_lo = l_lo;
    rp.l_hi = l_hi;
}

// the output rows of the two rows a thread holds, to the new running max
template <int HS>
static __device__ __forceinline__ void rescale_rows(float o[HS / 8][4], float alpha_lo, float alpha_hi) {
#pragma unroll
    for (int i = 0; i < HS / 8; i++) {
        o[i][0] *= alpha_lo;
        o[i][1] *= alpha_lo;
        o[i][2] *= alpha_hi;
        o[i][3] *= alpha_hi;
    }
}

template <int HS>
static __device__ __forceinline__ void softmax_tile(float s[8][4], float o[HS / 8][4], RowPair &rp, int row0, int key0, int T,
                                                    bool diagonal, float scale_log2) {
    float alpha_lo, alpha_hi;
    softmax_scores(s, rp, row0, key0, T, diagonal, scale_log2, alpha_lo, alpha_hi);
    rescale_rows<HS>(o, alpha_lo, alpha_hi);
}

// The query block, head and batch entry of a forward block (latest query blocks
// first: they attend to the most key tiles, so they start first), and where its rows start in
// the packed qkv (B, T, NH + 2 NKV, HS): stride elements between tokens, this entry's qkv, and
// its kv head's K and V columns.
struct HeadBlock {
    int qb, h, bb;
    size_t stride;
    const bf16 *base, *kbase, *vbase;
};
template <int HS>
static __device__ __forceinline__ HeadBlock head_block(const bf16 *qkv, int T, int NH, int NKV) {
    int h = blockIdx.y, bb = blockIdx.z, kvh = h / (NH / NKV);
    size_t stride = (size_t)(NH + 2 * NKV) * HS;
    const bf16 *base = qkv + (size_t)bb * T * stride;
    return HeadBlock{(int)(gridDim.x - 1 - blockIdx.x), h, bb, stride, base, base + (size_t)(NH + kvh) * HS,
                     base + (size_t)(NH + NKV + kvh) * HS};
}

// Rows r_lo and r_hi = r_lo + 8 (those below T) of a bf16 output from a 16-row tile's C
// fragments f, times s_lo and s_hi; lo and hi point at each row's HS columns.
template <int HS>
static __device__ __forceinline__ void store_fragment_rows(bf16 *lo, bf16 *hi, const float f[HS / 8][4], float s_lo,
                                                           float s_hi, int r_lo, int T) {
    int q = threadIdx.x % 4;
#pragma unroll
    for (int i = 0; i < HS / 8; i++) {
        int c = i * 8 + 2 * q;
        if (r_lo < T) *(uint32_t *)(lo + c) = pack_bf16(f[i][0] * s_lo, f[i][1] * s_lo);
        if (r_lo + 8 < T) *(uint32_t *)(hi + c) = pack_bf16(f[i][2] * s_hi, f[i][3] * s_hi);
    }
}

// out rows = o / l (bf16) and lse = (m + log2 l) ln 2, for the rows below T
template <int HS>
static __device__ __forceinline__ void store_rows(bf16 *out, float *lse, const float o[HS / 8][4], RowPair rp, int row0, int bb,
                                                  int h, int T, int NH) {
    int q = threadIdx.x % 4;
    const int r_lo = row0 + (threadIdx.x % 32) / 4, r_hi = r_lo + 8;
    float m_lo = rp.m_lo, m_hi = rp.m_hi, l_lo = rp.l_lo, l_hi = rp.l_hi;
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 1);
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 2);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 1);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 2);
    float inv_lo = 1.0f / l_lo, inv_hi = 1.0f / l_hi;
    size_t ostride = (size_t)NH * HS;
    store_fragment_rows<HS>(out + ((size_t)bb * T + r_lo) * ostride + (size_t)h * HS,
                            out + ((size_t)bb * T + r_hi) * ostride + (size_t)h * HS, o, inv_lo, inv_hi, r_lo, T);
    if (lse && q == 0) {
        float *lrow = lse + ((size_t)bb * NH + h) * T;
        if (r_lo < T) lrow[r_lo] = (m_lo + log2f(l_lo)) * LN2;
        if (r_hi < T) lrow[r_hi] = (m_hi + log2f(l_hi)) * LN2;
    }
}

// The A fragments (mma.sync m16n8k16 layout, one per 16-wide k step) of the 16 query rows
// r_lo - g .. r_lo - g + 15 of head h that this thread's warp owns; rows >= T are zero
template <int HS>
static __device__ __forceinline__ void query_fragments(uint32_t qf[HS / 16][4], const bf16 *base, size_t stride, int h,
                                                       int r_lo, int T) {
    int q = threadIdx.x % 4, r_hi = r_lo + 8;
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

// The backward's elementwise step on a 16 x 64 score tile in C fragments, rows as
// the dQ kernel holds them (queries r_lo, r_hi = r_lo + 8; keys key0 + column):
// p = S, dp = dO V^T in; p = dS = P (dP - D) out, P = 2^(s scale log2e - lse log2e),
// masked past each row and past T. lse2_* are lse log2 e (+inf past T).
static __device__ __forceinline__ void dscores_query_rows(float p[8][4], const float dp[8][4], int key0, int r_lo, int T,
                                                          float lse2_lo, float lse2_hi, float d_lo, float d_hi,
                                                          float scale_log2) {
    int q = threadIdx.x % 4, r_hi = r_lo + 8;
#pragma unroll
    for (int j = 0; j < 8; j++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            int key = key0 + j * 8 + 2 * q + e;
            float p0 = (key > r_lo || key >= T) ? 0.0f : exp2f(p[j][e] * scale_log2 - lse2_lo);
            float p1 = (key > r_hi || key >= T) ? 0.0f : exp2f(p[j][2 + e] * scale_log2 - lse2_hi);
            p[j][e] = p0 * (dp[j][e] - d_lo);
            p[j][2 + e] = p1 * (dp[j][2 + e] - d_hi);
        }
    }
}

// The same step on a transposed tile, rows as the dK/dV kernel holds them (keys key_lo,
// key_lo + 8; queries query0 + column, their lse and D in shared memory): p = S^T in,
// P^T out; dp = dP^T in, dS^T out.
static __device__ __forceinline__ void dscores_key_rows(float p[8][4], float dp[8][4], int query0, int key_lo, int T,
                                                        const float *lse_s, const float *d_s, float scale_log2) {
    int q = threadIdx.x % 4, key_hi = key_lo + 8;
#pragma unroll
    for (int j = 0; j < 8; j++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            int qi = j * 8 + 2 * q + e, query = query0 + qi;
            float l2 = lse_s[qi] * LOG2E, dd = d_s[qi];
            bool out_lo = query < key_lo || query >= T, out_hi = query < key_hi || query >= T;
            float p0 = out_lo ? 0.0f : exp2f(p[j][e] * scale_log2 - l2);
            float p1 = out_hi ? 0.0f : exp2f(p[j][2 + e] * scale_log2 - l2);
            p[j][e] = p0;
            p[j][2 + e] = p1;
            dp[j][e] = p0 * (dp[j][e] - dd);
            dp[j][2 + e] = p1 * (dp[j][2 + e] - dd);
        }
    }
}

// lse and D of the 64 queries from t0 (rows of one head) into lse_s, d_s with cp.async,
// uncommitted: they ride in the caller's next commit group; rows >= T read nothing (zeros)
static __device__ __forceinline__ void load_query_stats_async(float *lse_s, float *d_s, const float *lrow,
                                                              const float *drow, int t0, int T) {
    int i = threadIdx.x, t = t0 + i;
    if (i >= ATT_ROWS) return;
    int n = t < T ? 4 : 0;  // bytes read; the rest of the 4 is zero-filled
    uint32_t dl = (uint32_t)__cvta_generic_to_shared(lse_s + i), dd = (uint32_t)__cvta_generic_to_shared(d_s + i);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dl), "l"(lrow + (n ? t : 0)), "r"(n));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dd), "l"(drow + (n ? t : 0)), "r"(n));
}

// the wgmma kernels, launched for MIST_CUDA_ATTENTION=wgmma once cuda_attention_wgmma_available()
// has said yes: the forward (attention_wgmma.cu) and the backward's dQ and dK/dV
// (attention_wgmma_backward.cu) from D = rowsum(dout * out), which the caller computes
void attention_forward_wgmma(cudaStream_t st, bf16 *out, float *lse, const bf16 *qkv, int B, int T, int NH, int NKV,
                             int HS);
void attention_backward_wgmma(cudaStream_t st, bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse,
                              const float *D, int B, int T, int NH, int NKV, int HS);

#endif
