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
#include <stdlib.h>
#include <string.h>
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
// past T), turned into unnormalised probabilities in place; o is rescaled to
// the new running max.
template <int HS>
static __device__ __forceinline__ void softmax_tile(float s[8][4], float o[HS / 8][4], RowPair &rp, int row0, int key0, int T,
                                                    bool diagonal, float scale_log2) {
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
    rp.m_lo = m_lo;
    rp.m_hi = m_hi;
    rp.l_lo = l_lo;
    rp.l_hi = l_hi;
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
    int warp = threadIdx.x / 32;
    size_t stride = (size_t)(NH + 2 * NKV) * HS;
    const bf16 *base = qkv + (size_t)bb * T * stride;
    const bf16 *kbase = base + (size_t)(NH + kvh) * HS, *vbase = base + (size_t)(NH + NKV + kvh) * HS;
    const int row0 = qb * ATT_ROWS + warp * 16, r_lo = row0 + (threadIdx.x % 32) / 4;  // this warp's 16 queries
    RowPair rp = row_pair();

    uint32_t qf[HS / 16][4];
    query_fragments<HS>(qf, base, stride, h, r_lo, T);
    float o_[1][HS / 8][4] = {}, (&o)[HS / 8][4] = o_[0];

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
        float s_[1][8][4], (&s)[8][4] = s_[0];
        scores_regs<HS>(s, qf, Ks);
        bool diagonal = kb == qb || (kb + 1) * ATT_ROWS > T;
        softmax_tile<HS>(s, o, rp, row0, kb * ATT_ROWS, T, diagonal, scale_log2);
        accumulate_pv<HS, 1>(o_, s_, Vs);
        __syncthreads();  // every warp is done with this stage before it is refilled
    }
    store_rows<HS>(out, lse, o, rp, row0, bb, h, T, NH);
}

// ---------------------------------------------------------------- forward, wgmma scores (sm_90a)
// The default forward with both products on Hopper's warpgroup MMA (wgmma, built only for
// sm_90a): the block's 4 warps are one warpgroup; S = Q K^T with Q in registers as the A
// operand (the same fragments as mma.sync's A, warp w holding rows 16w..16w+15) and K read by
// the tensor cores straight from a 128-byte-swizzled shared-memory tile (no ldmatrix into
// registers: the shared-memory traffic that caps the default forward); the accumulator comes
// back in mma.sync's C layout (d[4j + e] = s[j][e]), so softmax_tile runs unchanged; then
// O += P V with P packed to bf16 in registers (as accumulate_pv packs it) and V read from the
// same swizzled layout as an MN-major operand (imm-trans-b). The layouts assumed here are the
// ones benchmarks/gpu/wgmma_probe.cu checks. Experimental: MIST_CUDA_ATTENTION=wgmma.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MIST_ATT_WGMMA 1
#endif

// whether this build's device code has the wgmma kernel (sm_90a); read once by the host
__device__ int att_wgmma_built;
__global__ void attention_wgmma_built_kernel(void) {
#ifdef MIST_ATT_WGMMA
    att_wgmma_built = 1;
#else
    att_wgmma_built = 0;
#endif
}

#ifdef MIST_ATT_WGMMA
#include "kernels/cuda/wgmma.cuh"
#endif

// K as the B operand of S = Q K^T is K-major (keys are its N rows, head dim its K): 8-row atoms
// 1024 B apart in SBO, LBO unused. V as the B operand of O = P V is MN-major (keys are its K
// rows, head dim its contiguous N): k atoms (8 keys) 1024 B apart, 64-column head-dim blocks
// ATT_ROWS * 128 B apart. Which descriptor field holds which of those two strides for an
// MN-major operand is the one layout fact not settled by the K-major cases;
// benchmarks/gpu/wgmma_probe.cu (cases 5-8) prints which holds, and this flag follows it.
#define ATT_V_KATOM_IN_SBO 1
enum {
    ATT_K_LBO = 16, ATT_K_SBO = 1024,
    ATT_V_LBO = ATT_V_KATOM_IN_SBO ? ATT_ROWS * 128 : 1024,
    ATT_V_SBO = ATT_V_KATOM_IN_SBO ? 1024 : ATT_ROWS * 128,
};

// rows [row0, row0+64) of K or V (HS columns) with cp.async into the wgmma operand layout:
// 64-column sub-tiles of 64 rows x 128 B, the 16-byte chunk c of row r stored at chunk c ^ (r % 8);
// rows >= T zero-filled. The tile must start 1024-byte aligned. (The same bytes serve K as a
// K-major operand and V as an MN-major one: rows are keys either way.)
template <int HS>
static __device__ __forceinline__ void load_tile_swizzled_async(bf16 *sm, const bf16 *gbase, size_t stride, int row0,
                                                                int T) {
    constexpr int CHUNKS = HS / 8;
    for (int i = threadIdx.x; i < ATT_ROWS * CHUNKS; i += ATT_THREADS) {
        int r = i / CHUNKS, ch = i % CHUNKS;
        int valid = row0 + r < T;
        const bf16 *src = gbase + (size_t)(valid ? row0 + r : 0) * stride + ch * 8;
        bf16 *d = sm + (ch / 8) * (ATT_ROWS * 64) + r * 64 + ((ch % 8) ^ (r % 8)) * 8;
        uint32_t dst = (uint32_t)__cvta_generic_to_shared(d);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

// a stage: the swizzled K tile, then the swizzled V tile (each a multiple of 1024 bytes)
template <int HS> struct WgmmaStage {
    static constexpr int K_ELEMS = ATT_ROWS * HS, V_ELEMS = ATT_ROWS * HS;
    static constexpr int BYTES = (K_ELEMS + V_ELEMS) * 2;
    static_assert(K_ELEMS * 2 % 1024 == 0 && BYTES % 1024 == 0, "stages keep the tiles 1024-byte aligned");
};

template <int HS>
// 2 blocks per SM: with 3 (<= 168 registers) the HS 128 instance spills 124 B
__global__ void __launch_bounds__(ATT_THREADS, 2) attention_forward_wgmma_kernel(bf16 *out, float *lse, const bf16 *qkv,
                                                                              int T, int NH, int NKV, float scale_log2) {
#ifdef MIST_ATT_WGMMA
    extern __shared__ __align__(16) unsigned char att_smem_wg[];
    // the dynamic shared memory is rounded up to 1024 bytes (the launch adds the slack)
    uint32_t raw = (uint32_t)__cvta_generic_to_shared(att_smem_wg);
    unsigned char *smem = att_smem_wg + ((1024 - raw % 1024) % 1024);
    constexpr int STAGE = WgmmaStage<HS>::BYTES;
    int qb = gridDim.x - 1 - blockIdx.x;  // longest (latest) query blocks first
    int h = blockIdx.y, bb = blockIdx.z, kvh = h / (NH / NKV);
    int warp = threadIdx.x / 32;
    size_t stride = (size_t)(NH + 2 * NKV) * HS;
    const bf16 *base = qkv + (size_t)bb * T * stride;
    const bf16 *kbase = base + (size_t)(NH + kvh) * HS, *vbase = base + (size_t)(NH + NKV + kvh) * HS;
    const int row0 = qb * ATT_ROWS + warp * 16, r_lo = row0 + (threadIdx.x % 32) / 4;
    RowPair rp = row_pair();

    uint32_t qf[HS / 16][4];
    query_fragments<HS>(qf, base, stride, h, r_lo, T);
    float o_[1][HS / 8][4] = {}, (&o)[HS / 8][4] = o_[0];

    load_tile_swizzled_async<HS>((bf16 *)smem, kbase, stride, 0, T);
    load_tile_swizzled_async<HS>((bf16 *)(smem + WgmmaStage<HS>::K_ELEMS * 2), vbase, stride, 0, T);
    for (int kb = 0; kb <= qb; kb++) {
        unsigned char *cur = smem + (kb & 1) * STAGE;
        if (kb < qb) {
            unsigned char *next = smem + ((kb + 1) & 1) * STAGE;
            load_tile_swizzled_async<HS>((bf16 *)next, kbase, stride, (kb + 1) * ATT_ROWS, T);
            load_tile_swizzled_async<HS>((bf16 *)(next + WgmmaStage<HS>::K_ELEMS * 2), vbase, stride, (kb + 1) * ATT_ROWS, T);
            asm volatile("cp.async.wait_group 2;\n" ::);  // this tile's K and V groups have landed
        } else {
            cp_async_wait_all();
        }
        // the tile was written through the generic proxy; wgmma reads it through the async one
        wgmma_fence_smem();
        __syncthreads();
        float s_[1][8][4] = {}, (&s)[8][4] = s_[0];  // (the first step ignores it: scale_d = 0)
        uint32_t kaddr = (uint32_t)__cvta_generic_to_shared(cur), vaddr = kaddr + WgmmaStage<HS>::K_ELEMS * 2;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < HS / 16; kk++)  // k16 steps: +32 B inside a 64-column sub-tile
            wgmma_rs_n64<0>(&s[0][0], qf[kk],
                            wgmma_desc(kaddr + (kk / 4) * (ATT_ROWS * 128) + (kk % 4) * 32, ATT_K_LBO, ATT_K_SBO), kk > 0);
        wgmma_commit();
        wgmma_wait();
        bool diagonal = kb == qb || (kb + 1) * ATT_ROWS > T;
        softmax_tile<HS>(s, o, rp, row0, kb * ATT_ROWS, T, diagonal, scale_log2);
        // o += P V: P (bf16, this warp's 16 rows) as the A operand from registers, as
        // accumulate_pv packs it; V MN-major, one k16 step per 16 keys (+2048 B)
        uint32_t pa[4][4];  // all packed before the fence: registers a wgmma reads are not written mid-group
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            pa[kk][0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]), pa[kk][1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
            pa[kk][2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pa[kk][3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        }
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            uint64_t dv = wgmma_desc(vaddr + kk * 16 * 128, ATT_V_LBO, ATT_V_SBO);
            if constexpr (HS == 128) wgmma_rs_n128<1>(&o[0][0], pa[kk], dv, 1);
            else wgmma_rs_n64<1>(&o[0][0], pa[kk], dv, 1);
        }
        wgmma_commit();
        wgmma_wait();
        __syncthreads();  // every warp is done with this stage before it is refilled
    }
    store_rows<HS>(out, lse, o, rp, row0, bb, h, T, NH);
#else
    __trap();  // never launched: the host asks cuda_attention_wgmma_available() first
#endif
}

// Forward with 128-query tiles: each warp owns 32 queries as two 16-row MMA
// tiles (RT = 2) that share every K and V fragment read from shared memory.
// Per 64-key tile a warp then issues 80 ldmatrix.x4 (512 B each) for 256
// mma.sync instead of 64 for 128: at 128 B per clock of shared memory per SM,
// the 64-row kernel above spends 4 clocks of loads per 2 products (about 3
// clocks of tensor-core work), which is what caps it; here it is 1.25 per 4.
// Registers hold 2 x 16 x HS output and 2 x 16 x 64 score accumulators (192
// of 255 per thread at HS 128), so Q is read from shared memory too.
// Key tiles past a warp's last query are skipped (every score masked); the
// barriers stay outside that branch.
#define ATT_WIDE_ROWS 128
#define ATT_WIDE_RT 2
template <int HS>
__global__ void __launch_bounds__(ATT_THREADS, 2) attention_forward_wide_kernel(bf16 *out, float *lse, const bf16 *qkv,
                                                                             int T, int NH, int NKV, float scale_log2) {
    // Q tile (128 rows), then two stages of (K, V) 64-row tiles
    extern __shared__ __align__(16) unsigned char att_smem[];
    constexpr int TILE = ATT_ROWS * (HS + 8), STAGE = 2 * TILE;
    bf16 *Qs = (bf16 *)att_smem, *stages = Qs + 2 * TILE;
    int qb = gridDim.x - 1 - blockIdx.x;  // longest (latest) query blocks first
    int h = blockIdx.y, bb = blockIdx.z, kvh = h / (NH / NKV);
    int warp = threadIdx.x / 32;
    size_t stride = (size_t)(NH + 2 * NKV) * HS;
    const bf16 *base = qkv + (size_t)bb * T * stride;
    const bf16 *kbase = base + (size_t)(NH + kvh) * HS, *vbase = base + (size_t)(NH + NKV + kvh) * HS;
    int q0 = qb * ATT_WIDE_ROWS, w0 = warp * 16 * ATT_WIDE_RT;  // block's and warp's first query (warp: in the tile)
    int last = min(q0 + ATT_WIDE_ROWS, T) - 1;                  // the block's last query
    int nkb = last / ATT_ROWS + 1;                              // key tiles it attends to

    RowPair rp[ATT_WIDE_RT];
    float o[ATT_WIDE_RT][HS / 8][4];
#pragma unroll
    for (int rt = 0; rt < ATT_WIDE_RT; rt++) {
        rp[rt] = row_pair();
#pragma unroll
        for (int i = 0; i < HS / 8; i++) o[rt][i][0] = o[rt][i][1] = o[rt][i][2] = o[rt][i][3] = 0.0f;
    }

    load_tile_async<HS>(Qs, base + (size_t)h * HS, stride, q0, T);
    load_tile_async<HS>(Qs + TILE, base + (size_t)h * HS, stride, q0 + ATT_ROWS, T);
    load_tile_async<HS>(stages, kbase, stride, 0, T);
    load_tile_async<HS>(stages + TILE, vbase, stride, 0, T);
    for (int kb = 0; kb < nkb; kb++) {
        const bf16 *Ks = stages + (kb & 1) * STAGE, *Vs = Ks + TILE;
        if (kb + 1 < nkb) {
            bf16 *next = stages + ((kb + 1) & 1) * STAGE;
            load_tile_async<HS>(next, kbase, stride, (kb + 1) * ATT_ROWS, T);
            load_tile_async<HS>(next + TILE, vbase, stride, (kb + 1) * ATT_ROWS, T);
            asm volatile("cp.async.wait_group 2;\n" ::);  // Q and this tile's K, V have landed
        } else {
            cp_async_wait_all();
        }
        __syncthreads();
        int key0 = kb * ATT_ROWS;
        if (key0 <= q0 + w0 + 16 * ATT_WIDE_RT - 1) {  // some key of the tile is at or before the warp's last query
            float s[ATT_WIDE_RT][8][4];
            scores_smem<HS, ATT_WIDE_RT>(s, Qs, w0, Ks);
            bool diagonal = key0 + ATT_ROWS - 1 > q0 + w0 || key0 + ATT_ROWS > T;
#pragma unroll
            for (int rt = 0; rt < ATT_WIDE_RT; rt++) softmax_tile<HS>(s[rt], o[rt], rp[rt], q0 + w0 + rt * 16, key0, T, diagonal, scale_log2);
            accumulate_pv<HS, ATT_WIDE_RT>(o, s, Vs);
        }
        __syncthreads();  // every warp is done with this stage before it is refilled
    }
#pragma unroll
    for (int rt = 0; rt < ATT_WIDE_RT; rt++) store_rows<HS>(out, lse, o[rt], rp[rt], q0 + w0 + rt * 16, bb, h, T, NH);
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
    float dq_[1][HS / 8][4], (&dq)[HS / 8][4] = dq_[0];
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
        float p_[1][8][4], (&p)[8][4] = p_[0], dp[8][4];
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
        accumulate_pv<HS, 1>(dq_, p_, Ks);  // dQ += dS K
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

// The query tile qb of head h for the dK/dV kernel: Q and dO rows (64) into
// Qs, Ds and their lse, D into lse_s, d_s (rows >= T: zeros, masked by the
// caller). ASYNC: with cp.async, in two commit groups (the statistics ride
// with Q), so that the tile streams in while the previous one is computed.
template <int HS, bool ASYNC>
static __device__ __forceinline__ void load_query_tile(bf16 *Qs, bf16 *Ds, float *lse_s, float *d_s, const bf16 *qbase,
                                                       size_t stride, const bf16 *dbase, size_t ostride,
                                                       const float *lrow, const float *drow, int qb, int T) {
    int i = threadIdx.x, t = qb * ATT_ROWS + i;
    if (ASYNC) {
        if (i < ATT_ROWS) {
            int n = t < T ? 4 : 0;  // bytes read; the rest of the 4 is zero-filled
            uint32_t dl = (uint32_t)__cvta_generic_to_shared(lse_s + i), dd = (uint32_t)__cvta_generic_to_shared(d_s + i);
            asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dl), "l"(lrow + (n ? t : 0)), "r"(n));
            asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dd), "l"(drow + (n ? t : 0)), "r"(n));
        }
        load_tile_async<HS>(Qs, qbase, stride, qb * ATT_ROWS, T);
        load_tile_async<HS>(Ds, dbase, ostride, qb * ATT_ROWS, T);
    } else {
        load_tile<HS>(Qs, qbase, stride, qb * ATT_ROWS, T);
        load_tile<HS>(Ds, dbase, ostride, qb * ATT_ROWS, T);
        if (i < ATT_ROWS) {
            lse_s[i] = t < T ? lrow[t] : 0.0f;
            d_s[i] = t < T ? drow[t] : 0.0f;
        }
    }
}

// dK, dV: blocks over (key block, kv head, batch); loops over the query heads of
// the group and, for each, over the query blocks >= its own. PIPE: the query
// tiles are double-buffered (tile n + 1 loads while n is computed; 6 tiles of
// shared memory instead of 4); without it each tile is loaded, then computed.
template <int HS, bool PIPE>
__global__ void __launch_bounds__(ATT_THREADS) attention_dkv_kernel(bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
                                                                    const float *lse, const float *D, int T, int NH,
                                                                    int NKV, float scale) {
    constexpr int TILE = ATT_ROWS * (HS + 8), STAGES = PIPE ? 2 : 1;
    extern __shared__ __align__(16) unsigned char att_smem[];
    bf16 *Ks = (bf16 *)att_smem, *Vs = Ks + TILE;
    bf16 *stage_q = Vs + TILE;                                    // stage s: Q tile at s * 2 * TILE, dO tile after it
    float *stat = (float *)(stage_q + STAGES * 2 * TILE);         // stage s: lse at s * 2 * ATT_ROWS, D after it
    int nblocks = gridDim.x, kb = nblocks - 1 - blockIdx.x;  // earliest key blocks see the most queries
    int kvh = blockIdx.y, bb = blockIdx.z, group = NH / NKV, per_head = nblocks - kb, steps = group * per_head;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    size_t stride = (size_t)(NH + 2 * NKV) * HS, ostride = (size_t)NH * HS;
    const bf16 *base = qkv + (size_t)bb * T * stride, *dbase = dout + (size_t)bb * T * ostride;
    int k0 = warp * 16, key_lo = kb * ATT_ROWS + k0 + g, key_hi = key_lo + 8;
    float dk_[1][HS / 8][4], dv_[1][HS / 8][4], (&dk)[HS / 8][4] = dk_[0], (&dv)[HS / 8][4] = dv_[0];
#pragma unroll
    for (int i = 0; i < HS / 8; i++)
        dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] = dv[i][0] = dv[i][1] = dv[i][2] = dv[i][3] = 0.0f;
    float scale_log2 = scale * LOG2E;

    // step n: query head kvh * group + n / per_head, query block kb + n % per_head
#define DKV_LOAD(n_, s_)                                                                                            \
    do {                                                                                                            \
        int h_ = kvh * group + (n_) / per_head;                                                                     \
        size_t row_ = ((size_t)bb * NH + h_) * T;                                                                   \
        load_query_tile<HS, PIPE>(stage_q + (s_) * 2 * TILE, stage_q + (s_) * 2 * TILE + TILE, stat + (s_) * 2 * ATT_ROWS, \
                                  stat + (s_) * 2 * ATT_ROWS + ATT_ROWS, base + (size_t)h_ * HS, stride,            \
                                  dbase + (size_t)h_ * HS, ostride, lse + row_, D + row_, kb + (n_) % per_head, T); \
    } while (0)
    if (PIPE) {
        load_tile_async<HS>(Ks, base + (size_t)(NH + kvh) * HS, stride, kb * ATT_ROWS, T);
        load_tile_async<HS>(Vs, base + (size_t)(NH + NKV + kvh) * HS, stride, kb * ATT_ROWS, T);
        DKV_LOAD(0, 0);
    } else {
        load_tile<HS>(Ks, base + (size_t)(NH + kvh) * HS, stride, kb * ATT_ROWS, T);
        load_tile<HS>(Vs, base + (size_t)(NH + NKV + kvh) * HS, stride, kb * ATT_ROWS, T);
    }
    for (int n = 0; n < steps; n++) {
        int st = PIPE ? n & 1 : 0, qb = kb + n % per_head;
        if (PIPE) {
            if (n + 1 < steps) {
                DKV_LOAD(n + 1, st ^ 1);  // into the stage step n - 1 used (all warps are past it)
                asm volatile("cp.async.wait_group 2;\n" ::);  // step n's groups (and K, V) have landed
            } else {
                cp_async_wait_all();
            }
        } else {
            __syncthreads();  // every warp is done with the previous tile
            DKV_LOAD(n, 0);
        }
        __syncthreads();
        const bf16 *Qs = stage_q + st * 2 * TILE, *Ds = Qs + TILE;
        const float *lse_s = stat + st * 2 * ATT_ROWS, *d_s = lse_s + ATT_ROWS;
        float p_[1][8][4], dp_[1][8][4], (&p)[8][4] = p_[0], (&dp)[8][4] = dp_[0];
        scores_smem<HS, 1>(p_, Ks, k0, Qs);   // S^T = K Q^T   (16 keys x 64 queries)
        scores_smem<HS, 1>(dp_, Vs, k0, Ds);  // dP^T = V dO^T
#pragma unroll
        for (int j = 0; j < 8; j++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int qi = j * 8 + 2 * q + e, query = qb * ATT_ROWS + qi;
                float l2 = lse_s[qi] * LOG2E, dd = d_s[qi];
                bool out_lo = query < key_lo || query >= T, out_hi = query < key_hi || query >= T;
                float p0 = out_lo ? 0.0f : exp2f(p[j][e] * scale_log2 - l2);
                float p1 = out_hi ? 0.0f : exp2f(p[j][2 + e] * scale_log2 - l2);
                p[j][e] = p0;
                p[j][2 + e] = p1;
                dp[j][e] = p0 * (dp[j][e] - dd);  // dS^T
                dp[j][2 + e] = p1 * (dp[j][2 + e] - dd);
            }
        }
        accumulate_pv<HS, 1>(dv_, p_, Ds);   // dV += P^T dO
        accumulate_pv<HS, 1>(dk_, dp_, Qs);  // dK += dS^T Q
        if (PIPE) __syncthreads();  // every warp is done with this stage before step n + 2 refills it
    }
#undef DKV_LOAD
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

// Which attention kernels run. "base" (the default): 64-query forward tiles,
// dK/dV loading each query tile before computing it. "wide" (experimental,
// MIST_CUDA_ATTENTION=wide): 128-query forward tiles
// (attention_forward_wide_kernel) and double-buffered dK/dV query tiles.
// "wgmma" (experimental, sm_90a builds on Hopper): the forward's scores on
// wgmma (attention_forward_wgmma_kernel), the backward as in base. Read at
// every call (a getenv is nothing next to a launch), so that one process can
// check and time each.
enum { ATT_BASE, ATT_WIDE, ATT_WGMMA };

// 1 when this build has the wgmma forward and the current device runs it (asked
// once: a kernel writes a flag compiled in only for sm_90a; any error means no)
extern "C" int cuda_attention_wgmma_available(void) {
    static int known = -1;
    if (known >= 0) return known;
    int flag = 0;
    attention_wgmma_built_kernel<<<1, 1>>>();
    known = cudaGetLastError() == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess &&
            cudaMemcpyFromSymbol(&flag, att_wgmma_built, sizeof flag) == cudaSuccess && flag == 1;
    cudaGetLastError();  // a build without this architecture's code leaves an error: clear it
    return known;
}
static int attention_variant(void) {
    const char *v = getenv("MIST_CUDA_ATTENTION");
    if (!v || !*v || !strcmp(v, "base")) return ATT_BASE;
    if (!strcmp(v, "wide")) return ATT_WIDE;
    if (!strcmp(v, "wgmma")) {
        if (!cuda_attention_wgmma_available()) {
            fprintf(stderr, "mist cuda backend: MIST_CUDA_ATTENTION=wgmma needs a Hopper GPU and the backend built for "
                            "sm_90a (./configure CUDA_ARCH=sm_90a); hint: unset it for the default (base)\n");
            abort();
        }
        return ATT_WGMMA;
    }
    fprintf(stderr, "mist cuda backend: MIST_CUDA_ATTENTION='%s' is not allowed (allowed: base, wide, wgmma); "
                    "hint: unset it for the default (base)\n", v);
    abort();
}
static int attention_wide(void) { return attention_variant() == ATT_WIDE; }

template <int HS>
static void launch_forward(cudaStream_t st, bf16 *out, float *lse, const bf16 *qkv, int B, int T, int NH, int NKV) {
    float scale_log2 = LOG2E / sqrtf((float)HS);
    static int attribute_set[3];  // per kernel, one per head size (template instance)
    int variant = attention_variant();
    if (variant == ATT_WGMMA) {
        dim3 grid((T + ATT_ROWS - 1) / ATT_ROWS, NH, B);
        size_t smem = 2 * WgmmaStage<HS>::BYTES + 1024;  // two stages, and slack to align them to 1024 B
        if (!attribute_set[2]) {
            CUDA_CHECK(cudaFuncSetAttribute(attention_forward_wgmma_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)smem));
            attribute_set[2] = 1;
        }
        attention_forward_wgmma_kernel<HS><<<grid, ATT_THREADS, smem, st>>>(out, lse, qkv, T, NH, NKV, scale_log2);
    } else if (variant == ATT_WIDE) {
        dim3 grid((T + ATT_WIDE_ROWS - 1) / ATT_WIDE_ROWS, NH, B);
        size_t smem = 6 * ATT_ROWS * (HS + 8) * sizeof(bf16);  // Q (2 tiles) + 2 stages of (K, V)
        if (!attribute_set[1]) {
            CUDA_CHECK(cudaFuncSetAttribute(attention_forward_wide_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            attribute_set[1] = 1;
        }
        attention_forward_wide_kernel<HS><<<grid, ATT_THREADS, smem, st>>>(out, lse, qkv, T, NH, NKV, scale_log2);
    } else {
        dim3 grid((T + ATT_ROWS - 1) / ATT_ROWS, NH, B);
        size_t smem = 4 * ATT_ROWS * (HS + 8) * sizeof(bf16);
        if (!attribute_set[0]) {
            CUDA_CHECK(cudaFuncSetAttribute(attention_forward_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            attribute_set[0] = 1;
        }
        attention_forward_kernel<HS><<<grid, ATT_THREADS, smem, st>>>(out, lse, qkv, T, NH, NKV, scale_log2);
    }
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_attention_forward(Backend *b, BackendStream *s, void *out, float *lse, const void *qkv,
                                       int B, int T, int NH, int NKV, int HS) {
    check_shape("attention_forward", NH, NKV, HS);
    if (B <= 0 || T <= 0) return;
    if (HS == 64)
        launch_forward<64>(cuda_stream(s), (bf16 *)out, lse, (const bf16 *)qkv, B, T, NH, NKV);
    else
        launch_forward<128>(cuda_stream(s), (bf16 *)out, lse, (const bf16 *)qkv, B, T, NH, NKV);
}

template <int HS>
static void launch_backward(cudaStream_t st, bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse,
                            const float *D, int B, int T, int NH, int NKV) {
    float scale = 1.0f / sqrtf((float)HS);
    dim3 gq((T + ATT_ROWS - 1) / ATT_ROWS, NH, B), gk((T + ATT_ROWS - 1) / ATT_ROWS, NKV, B);
    size_t tile = ATT_ROWS * (HS + 8) * sizeof(bf16), stats = 2 * ATT_ROWS * sizeof(float);
    size_t smem_q = 4 * tile;
    static int attribute_set;  // one per head size (template instance)
    if (!attribute_set) {
        CUDA_CHECK(cudaFuncSetAttribute(attention_dq_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_q));
        CUDA_CHECK(cudaFuncSetAttribute(attention_dkv_kernel<HS, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)(4 * tile + stats)));
        CUDA_CHECK(cudaFuncSetAttribute(attention_dkv_kernel<HS, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)(6 * tile + 2 * stats)));
        attribute_set = 1;
    }
    attention_dq_kernel<HS><<<gq, ATT_THREADS, smem_q, st>>>(dqkv, dout, qkv, lse, D, T, NH, NKV, scale);
    CUDA_CHECK_LAUNCH();
    if (attention_wide())  // K, V + two stages of (Q, dO) tiles and their statistics
        attention_dkv_kernel<HS, true><<<gk, ATT_THREADS, 6 * tile + 2 * stats, st>>>(dqkv, dout, qkv, lse, D, T, NH, NKV, scale);
    else
        attention_dkv_kernel<HS, false><<<gk, ATT_THREADS, 4 * tile + stats, st>>>(dqkv, dout, qkv, lse, D, T, NH, NKV, scale);
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
        launch_backward<64>(st, (bf16 *)dqkv, (const bf16 *)dout, (const bf16 *)qkv, lse, D, B, T, NH, NKV);
    else
        launch_backward<128>(st, (bf16 *)dqkv, (const bf16 *)dout, (const bf16 *)qkv, lse, D, B, T, NH, NKV);
}
