// Causal grouped-query attention on tensor cores, flash-attention style: the
// T x T score matrix is never stored, only per-row log-sum-exp (lse). The
// kernels' shared pieces, the fragment layouts and the math are in
// attention_tiles.cuh; the experimental wgmma kernels are in attention_wgmma.cu
// (forward) and attention_wgmma_backward.cu.
#include <stdlib.h>
#include <string.h>
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/attention_cudnn.h"

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
    auto [qb, h, bb, stride, base, kbase, vbase] = head_block<HS>(qkv, T, NH, NKV);
    int warp = threadIdx.x / 32;
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
    auto [qb, h, bb, stride, base, kbase, vbase] = head_block<HS>(qkv, T, NH, NKV);
    int warp = threadIdx.x / 32;
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

    uint32_t qf[HS / 16][4], df[HS / 16][4];  // this warp's Q and dO rows, as A fragments
    query_fragments<HS>(qf, base, stride, h, r_lo, T);
    query_fragments<HS>(df, dout + (size_t)bb * T * ostride, ostride, h, r_lo, T);
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
        dscores_query_rows(p, dp, kb * ATT_ROWS, r_lo, T, lse_lo, lse_hi, d_lo, d_hi, scale_log2);  // p = dS
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
        load_query_stats_async(lse_s, d_s, lrow, drow, qb * ATT_ROWS, T);
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
    int nblocks = gridDim.x, kb = blockIdx.x;  // earliest key blocks see the most queries: first
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
        dscores_key_rows(p, dp, qb * ATT_ROWS, key_lo, T, lse_s, d_s, scale_log2);  // p = P^T, dp = dS^T
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
// the template instances below (and those of attention_wgmma*.cu): supports_op says so
extern "C" int cuda_attention_head_size_supported(int HS) { return HS == 64 || HS == 128; }

static void check_shape(const char *who, int NH, int NKV, int HS) {
    if (!cuda_attention_head_size_supported(HS)) {
        fprintf(stderr, "mist cuda backend: %s: head size %d is not supported (allowed: 64, 128)\n", who, HS);
        abort();
    }
    if (NKV <= 0 || NH % NKV != 0) {
        fprintf(stderr, "mist cuda backend: %s: NH=%d query heads must be a multiple of NKV=%d kv heads\n", who, NH, NKV);
        abort();
    }
}

// Which attention kernels run. "base": 64-query forward tiles, dK/dV loading
// each query tile before computing it. "wide" (experimental): 128-query forward
// tiles (attention_forward_wide_kernel) and double-buffered dK/dV query tiles.
// "wgmma" (sm_90a builds on Hopper): every product of the forward and the
// backward on wgmma (attention_wgmma.cu, attention_wgmma_backward.cu).
// "cudnn" (optional): cuDNN's fused SDPA graphs (attention_cudnn.cu), loaded at run
// time; where cuDNN is missing or refuses a shape it says why once and the base
// kernels run. "auto": wgmma where it can run, else base.
// The run's choice comes from cuda_attention_set ([runtime] attention, before the
// first call); MIST_CUDA_ATTENTION, when set, overrides it at every call (a getenv is
// nothing next to a launch), so that one process can check and time each variant.
// Without either: base. A change of variant is said once.
enum { ATT_AUTO, ATT_BASE, ATT_WIDE, ATT_WGMMA, ATT_CUDNN };  // the order of [runtime] attention's names
static const char *const att_names[] = {"auto", "base", "wide", "wgmma", "cudnn"};
static int att_configured = ATT_BASE, att_announced = -1;
static const char *const wgmma_needs =
    "wgmma needs a Hopper GPU and the backend built for sm_90a (./configure CUDA_ARCH=sm_90a)";

static int variant_index(const char *v) {
    for (int i = 0; i < (int)(sizeof att_names / sizeof *att_names); i++)
        if (!strcmp(v, att_names[i])) return i;
    return -1;
}

static int attention_variant(void) {
    const char *v = getenv("MIST_CUDA_ATTENTION");
    int variant = att_configured;
    if (v && *v) {
        variant = variant_index(v);
        if (variant < 0) {
            fprintf(stderr, "mist cuda backend: MIST_CUDA_ATTENTION='%s' is not allowed (allowed: auto, base, wide, "
                            "wgmma, cudnn); hint: unset it for [runtime] attention\n", v);
            abort();
        }
        if (variant == ATT_AUTO) variant = cuda_attention_wgmma_available() ? ATT_WGMMA : ATT_BASE;
        if (variant == ATT_WGMMA && !cuda_attention_wgmma_available()) {
            fprintf(stderr, "mist cuda backend: MIST_CUDA_ATTENTION=wgmma: %s; hint: unset it, or auto\n", wgmma_needs);
            abort();
        }
    }
    if (variant != att_announced) {
        fprintf(stderr, "mist cuda backend: attention: %s\n", att_names[variant]);
        att_announced = variant;
    }
    return variant;
}

extern "C" int cuda_attention_set(const char *name, char *said, size_t n) {
    int want = variant_index(name);
    if (want < 0) {
        snprintf(said, n, "'%s' is not an attention variant (allowed: auto, base, wide, wgmma, cudnn)", name);
        return -1;
    }
    int wgmma = cuda_attention_wgmma_available(), got = want;
    char why[700] = "";
    if (want == ATT_AUTO) {
        got = wgmma ? ATT_WGMMA : ATT_BASE;
        snprintf(why, sizeof why, "auto: %s", wgmma ? "a Hopper GPU and an sm_90a build" : wgmma_needs);
    } else if (want == ATT_WGMMA && !wgmma) {
        snprintf(said, n, "%s", wgmma_needs);
        return -1;
    } else if (want == ATT_CUDNN && !cuda_attention_cudnn_available(why, sizeof why)) {
        got = ATT_BASE;  // said now, not at the first call
        snprintf(why + strlen(why), sizeof why - strlen(why), "; the base kernels run");
    } else if (want == ATT_CUDNN) {
        snprintf(why, sizeof why, "not deterministic: its backward sums dQ with fp32 atomics");
    }
    att_configured = att_announced = got;
    snprintf(said, n, "%s%s%s%s", att_names[got], why[0] ? " (" : "", why, why[0] ? ")" : "");
    return 0;
}

// cuDNN's plans for this shape, built now (cuda_common.cuh)
extern "C" int cuda_attention_prepare(int B, int T, int NH, int NKV, int HS, char *why, size_t n) {
    if (attention_variant() != ATT_CUDNN || B <= 0 || T <= 0) return 0;
    return cuda_attention_cudnn_ready(B, T, NH, NKV, HS, why, n) == 1 ? 0 : -1;
}

template <int HS>
static void launch_forward(cudaStream_t st, bf16 *out, float *lse, const bf16 *qkv, int B, int T, int NH, int NKV) {
    float scale_log2 = LOG2E / sqrtf((float)HS);
    static int attribute_set[2];  // per kernel, one per head size (template instance)
    int variant = attention_variant();
    if (variant == ATT_WGMMA) {  // attention_wgmma.cu
        attention_forward_wgmma(st, out, lse, qkv, B, T, NH, NKV, HS);
        return;
    }
    if (variant == ATT_WIDE) {
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
    if (attention_variant() == ATT_CUDNN &&
        cuda_attention_cudnn_forward(cuda_stream(s), out, lse, qkv, B, T, NH, NKV, HS) == 0)
        return;
    if (HS == 64)
        launch_forward<64>(cuda_stream(s), (bf16 *)out, lse, (const bf16 *)qkv, B, T, NH, NKV);
    else
        launch_forward<128>(cuda_stream(s), (bf16 *)out, lse, (const bf16 *)qkv, B, T, NH, NKV);
}

template <int HS>
static void launch_backward(cudaStream_t st, bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse,
                            const float *D, int B, int T, int NH, int NKV) {
    int variant = attention_variant();
    if (variant == ATT_WGMMA) {  // attention_wgmma_backward.cu
        attention_backward_wgmma(st, dqkv, dout, qkv, lse, D, B, T, NH, NKV, HS);
        return;
    }
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
    if (variant == ATT_WIDE)  // K, V + two stages of (Q, dO) tiles and their statistics
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
    // cuDNN computes D = rowsum(dout * out) itself
    if (attention_variant() == ATT_CUDNN &&
        cuda_attention_cudnn_backward(st, dqkv, dout, qkv, out, lse, B, T, NH, NKV, HS) == 0)
        return;
    float *D = (float *)cuda_scratch(b, (size_t)B * NH * T * sizeof(float), "attention_backward D");  // (B, NH, T)
    size_t rows = (size_t)B * T * NH;
    attention_rowdot_kernel<<<cuda_blocks(rows * 32, 256), 256, 0, st>>>(D, (const bf16 *)dout, (const bf16 *)out, B, T, NH, HS);
    CUDA_CHECK_LAUNCH();
    if (HS == 64)
        launch_backward<64>(st, (bf16 *)dqkv, (const bf16 *)dout, (const bf16 *)qkv, lse, D, B, T, NH, NKV);
    else
        launch_backward<128>(st, (bf16 *)dqkv, (const bf16 *)dout, (const bf16 *)qkv, lse, D, B, T, NH, NKV);
}
