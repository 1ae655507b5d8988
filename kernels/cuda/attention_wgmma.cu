// The experimental attention forward on Hopper's warpgroup MMA
// (MIST_CUDA_ATTENTION=wgmma; device code only in builds for sm_90a).
#include "kernels/cuda/attention_tiles.cuh"

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
    auto [qb, h, bb, stride, base, kbase, vbase] = head_block<HS>(qkv, T, NH, NKV);
    int warp = threadIdx.x / 32;
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

template <int HS>
static void launch(cudaStream_t st, bf16 *out, float *lse, const bf16 *qkv, int B, int T, int NH, int NKV) {
    float scale_log2 = LOG2E / sqrtf((float)HS);
    static int attribute_set;  // one per head size (template instance)
    dim3 grid((T + ATT_ROWS - 1) / ATT_ROWS, NH, B);
    size_t smem = 2 * WgmmaStage<HS>::BYTES + 1024;  // two stages, and slack to align them to 1024 B
    if (!attribute_set) {
        CUDA_CHECK(cudaFuncSetAttribute(attention_forward_wgmma_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
        attribute_set = 1;
    }
    attention_forward_wgmma_kernel<HS><<<grid, ATT_THREADS, smem, st>>>(out, lse, qkv, T, NH, NKV, scale_log2);
    CUDA_CHECK_LAUNCH();
}

void attention_forward_wgmma(cudaStream_t st, bf16 *out, float *lse, const bf16 *qkv, int B, int T, int NH, int NKV,
                             int HS) {
    if (HS == 64) launch<64>(st, out, lse, qkv, B, T, NH, NKV);
    else launch<128>(st, out, lse, qkv, B, T, NH, NKV);
}
