// The experimental attention backward on Hopper's warpgroup MMA
// (MIST_CUDA_ATTENTION=wgmma; device code only in builds for sm_90a): the
// default backward's two kernels (dQ; dK and dV) with every product on wgmma.
// Per 64 x 64 tile pair, with P = exp(s - lse), D = rowsum(dout * out):
//   dQ kernel (64 queries, over the key tiles <= its own):
//     S = Q K^T, dP = dO V^T      (Q, dO, K, V tiles read K-major)
//     dS = P (dP - D);  dQ += dS K (dS from registers, K read MN-major)
//   dK/dV kernel (64 keys, over the query heads of its group and the query tiles >= its own):
//     S^T = K Q^T, dP^T = V dO^T  (all read K-major)
//     dV += P^T dO, dK += dS^T Q  (P^T, dS^T from registers, dO, Q read MN-major)
// so every operand layout is one the forward uses and the probe checks, and
// every gradient element is owned by one thread of one block: no atomics, the
// same bits on every run. Keeping the score tiles transposed in the dK/dV
// kernel puts P^T and dS^T in the accumulator layout that is already the A
// operand of the next product.
#include "kernels/cuda/attention_wgmma_tiles.cuh"

template <int HS>
__global__ void __launch_bounds__(ATT_THREADS, 2) attention_dq_wgmma_kernel(bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
                                                                         const float *lse, const float *D, int T, int NH,
                                                                         int NKV, float scale) {
#ifdef MIST_ATT_WGMMA
    extern __shared__ __align__(16) unsigned char att_smem_wg[];
    unsigned char *smem = wgmma_smem_align(att_smem_wg);
    constexpr int TILE = ATT_ROWS * HS * 2;  // bytes; Q, dO, then two stages of (K, V)
    unsigned char *stages = smem + 2 * TILE;
    auto [qb, h, bb, stride, base, kbase, vbase] = head_block<HS>(qkv, T, NH, NKV);
    int warp = threadIdx.x / 32;
    size_t ostride = (size_t)NH * HS;
    const int row0 = qb * ATT_ROWS + warp * 16, r_lo = row0 + (threadIdx.x % 32) / 4, r_hi = r_lo + 8;
    const float *lrow = lse + ((size_t)bb * NH + h) * T, *drow = D + ((size_t)bb * NH + h) * T;
    float lse_lo = r_lo < T ? lrow[r_lo] * LOG2E : INFINITY, lse_hi = r_hi < T ? lrow[r_hi] * LOG2E : INFINITY;
    float d_lo = r_lo < T ? drow[r_lo] : 0.0f, d_hi = r_hi < T ? drow[r_hi] : 0.0f;
    float scale_log2 = scale * LOG2E;
    float dq[HS / 8][4] = {};

    load_tile_swizzled_async<HS>(smem, base + (size_t)h * HS, stride, qb * ATT_ROWS, T);
    load_tile_swizzled_async<HS>(smem + TILE, dout + (size_t)bb * T * ostride + (size_t)h * HS, ostride, qb * ATT_ROWS, T);
    kv_stage_load<HS>(stages, kbase, vbase, stride, 0, T);
    const uint32_t qaddr = smem_addr(smem), daddr = qaddr + TILE;
    for (int kb = 0; kb <= qb; kb++) {
        unsigned char *cur = kv_stage_next<HS>(stages, kbase, vbase, stride, kb, qb, T);  // Q, dO landed too
        uint32_t kaddr = smem_addr(cur), vaddr = kaddr + TILE;
        float p[8][4] = {}, dp[8][4] = {};
        wgmma_fence_operand<32>(&p[0][0]);
        wgmma_fence_operand<32>(&dp[0][0]);
        wgmma_fence();
        scores_wgmma_ss<HS>(p, qaddr, kaddr);   // S = Q K^T
        scores_wgmma_ss<HS>(dp, daddr, vaddr);  // dP = dO V^T
        wgmma_commit();
        wgmma_wait();
        wgmma_fence_operand<32>(&p[0][0]);
        wgmma_fence_operand<32>(&dp[0][0]);
        dscores_query_rows(p, dp, kb * ATT_ROWS, r_lo, T, lse_lo, lse_hi, d_lo, d_hi, scale_log2);  // p = dS
        uint32_t pa[4][4];
        pack_a_operand(pa, p);
        wgmma_fence_operand<16>(&pa[0][0]);
        wgmma_fence_operand<HS / 2>(&dq[0][0]);
        wgmma_fence();
        accumulate_wgmma_rs<HS>(dq, pa, kaddr);  // dQ += dS K
        wgmma_commit();
        wgmma_wait();
        wgmma_fence_operand<HS / 2>(&dq[0][0]);
        wgmma_fence_operand<16>(&pa[0][0]);
        __syncthreads();  // every warp is done with this stage before it is refilled
    }
    bf16 *dq_rows = dqkv + (size_t)bb * T * stride + (size_t)h * HS;
    store_fragment_rows<HS>(dq_rows + (size_t)r_lo * stride, dq_rows + (size_t)r_hi * stride, dq, scale, scale, r_lo, T);
#else
    __trap();  // never launched: the host asks cuda_attention_wgmma_available() first
#endif
}

template <int HS>
__global__ void __launch_bounds__(ATT_THREADS, 2) attention_dkv_wgmma_kernel(bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
                                                                          const float *lse, const float *D, int T, int NH,
                                                                          int NKV, float scale) {
#ifdef MIST_ATT_WGMMA
    extern __shared__ __align__(16) unsigned char att_smem_wg[];
    unsigned char *smem = wgmma_smem_align(att_smem_wg);
    // K, V, then two stages of (Q, dO) tiles, then two stages of (lse, D) rows
    constexpr int TILE = ATT_ROWS * HS * 2, STAGE = 2 * TILE;
    unsigned char *stages = smem + 2 * TILE;
    float *stats = (float *)(stages + 2 * STAGE);
    int nblocks = gridDim.x, kb = blockIdx.x;  // earliest key tiles see the most queries: first
    int kvh = blockIdx.y, bb = blockIdx.z, group = NH / NKV, per_head = nblocks - kb, steps = group * per_head;
    int warp = threadIdx.x / 32;
    size_t stride = (size_t)(NH + 2 * NKV) * HS, ostride = (size_t)NH * HS;
    const bf16 *base = qkv + (size_t)bb * T * stride, *dbase = dout + (size_t)bb * T * ostride;
    const int key_lo = kb * ATT_ROWS + warp * 16 + (threadIdx.x % 32) / 4, key_hi = key_lo + 8;
    float scale_log2 = scale * LOG2E;
    float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};

    // step n: query head kvh * group + n / per_head, query tile kb + n % per_head, into stage s;
    // its statistics ride in the Q tile's commit group (rows >= T read nothing: zeros, masked)
    auto load_step = [&](int n, int s) {
        int h = kvh * group + n / per_head, t0 = (kb + n % per_head) * ATT_ROWS;
        size_t row = ((size_t)bb * NH + h) * T;
        load_query_stats_async(stats + s * 2 * ATT_ROWS, stats + s * 2 * ATT_ROWS + ATT_ROWS, lse + row, D + row, t0, T);
        load_tile_swizzled_async<HS>(stages + s * STAGE, base + (size_t)h * HS, stride, t0, T);
        load_tile_swizzled_async<HS>(stages + s * STAGE + TILE, dbase + (size_t)h * HS, ostride, t0, T);
    };
    load_tile_swizzled_async<HS>(smem, base + (size_t)(NH + kvh) * HS, stride, kb * ATT_ROWS, T);
    load_tile_swizzled_async<HS>(smem + TILE, base + (size_t)(NH + NKV + kvh) * HS, stride, kb * ATT_ROWS, T);
    load_step(0, 0);
    const uint32_t kaddr = smem_addr(smem), vaddr = kaddr + TILE;
    for (int n = 0; n < steps; n++) {
        int s = n & 1, qb = kb + n % per_head;
        if (n + 1 < steps) {
            load_step(n + 1, s ^ 1);  // into the stage step n - 1 used (every warp is past it)
            asm volatile("cp.async.wait_group 2;\n" ::);  // step n's groups (and K, V) have landed
        } else {
            cp_async_wait_all();
        }
        wgmma_fence_smem();
        __syncthreads();
        uint32_t qaddr = smem_addr(stages + s * STAGE), daddr = qaddr + TILE;
        const float *lse_s = stats + s * 2 * ATT_ROWS, *d_s = lse_s + ATT_ROWS;
        float p[8][4] = {}, dp[8][4] = {};
        wgmma_fence_operand<32>(&p[0][0]);
        wgmma_fence_operand<32>(&dp[0][0]);
        wgmma_fence();
        scores_wgmma_ss<HS>(p, kaddr, qaddr);   // S^T = K Q^T   (64 keys x 64 queries)
        scores_wgmma_ss<HS>(dp, vaddr, daddr);  // dP^T = V dO^T
        wgmma_commit();
        wgmma_wait();
        wgmma_fence_operand<32>(&p[0][0]);
        wgmma_fence_operand<32>(&dp[0][0]);
        dscores_key_rows(p, dp, qb * ATT_ROWS, key_lo, T, lse_s, d_s, scale_log2);  // p = P^T, dp = dS^T
        uint32_t pa[4][4], da[4][4];
        pack_a_operand(pa, p);
        pack_a_operand(da, dp);
        wgmma_fence_operand<16>(&pa[0][0]);
        wgmma_fence_operand<16>(&da[0][0]);
        wgmma_fence_operand<HS / 2>(&dv[0][0]);
        wgmma_fence_operand<HS / 2>(&dk[0][0]);
        wgmma_fence();
        accumulate_wgmma_rs<HS>(dv, pa, daddr);  // dV += P^T dO
        accumulate_wgmma_rs<HS>(dk, da, qaddr);  // dK += dS^T Q
        wgmma_commit();
        wgmma_wait();
        wgmma_fence_operand<HS / 2>(&dv[0][0]);
        wgmma_fence_operand<HS / 2>(&dk[0][0]);
        wgmma_fence_operand<16>(&pa[0][0]);
        wgmma_fence_operand<16>(&da[0][0]);
        __syncthreads();  // every warp is done with this stage before step n + 2 refills it
    }
    bf16 *klo = dqkv + ((size_t)bb * T + key_lo) * stride + (size_t)(NH + kvh) * HS;
    bf16 *khi = dqkv + ((size_t)bb * T + key_hi) * stride + (size_t)(NH + kvh) * HS;
    size_t voff = (size_t)NKV * HS;
    store_fragment_rows<HS>(klo, khi, dk, scale, scale, key_lo, T);
    store_fragment_rows<HS>(klo + voff, khi + voff, dv, 1.0f, 1.0f, key_lo, T);
#else
    __trap();  // never launched: the host asks cuda_attention_wgmma_available() first
#endif
}

template <int HS>
static void launch(cudaStream_t st, bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse, const float *D,
                   int B, int T, int NH, int NKV) {
    float scale = 1.0f / sqrtf((float)HS);
    int tiles = (T + ATT_ROWS - 1) / ATT_ROWS;
    // each: two resident tiles and two stages of two tiles, 1024 B of alignment slack; dK/dV
    // also two stages of (lse, D) rows
    size_t tile = (size_t)ATT_ROWS * HS * 2, smem_q = 6 * tile + 1024, smem_kv = smem_q + 4 * ATT_ROWS * sizeof(float);
    static int attribute_set;  // one per head size (template instance)
    if (!attribute_set) {
        CUDA_CHECK(cudaFuncSetAttribute(attention_dq_wgmma_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem_q));
        CUDA_CHECK(cudaFuncSetAttribute(attention_dkv_wgmma_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem_kv));
        attribute_set = 1;
    }
    attention_dq_wgmma_kernel<HS><<<dim3(tiles, NH, B), ATT_THREADS, smem_q, st>>>(dqkv, dout, qkv, lse, D, T, NH, NKV, scale);
    CUDA_CHECK_LAUNCH();
    attention_dkv_wgmma_kernel<HS><<<dim3(tiles, NKV, B), ATT_THREADS, smem_kv, st>>>(dqkv, dout, qkv, lse, D, T, NH, NKV,
                                                                                      scale);
    CUDA_CHECK_LAUNCH();
}

void attention_backward_wgmma(cudaStream_t st, bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse,
                              const float *D, int B, int T, int NH, int NKV, int HS) {
    if (HS == 64) launch<64>(st, dqkv, dout, qkv, lse, D, B, T, NH, NKV);
    else launch<128>(st, dqkv, dout, qkv, lse, D, B, T, NH, NKV);
}
