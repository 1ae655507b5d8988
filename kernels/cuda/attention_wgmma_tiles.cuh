// Internal to the wgmma attention kernels (attention_wgmma.cu: forward,
// attention_wgmma_backward.cu: dQ and dK/dV): the shared-memory tile layout
// Hopper's warpgroup MMA reads, its descriptors, and the two products every
// kernel is made of. Device code exists only in builds for sm_90a
// (MIST_ATT_WGMMA); elsewhere the kernels compile to a trap and the host asks
// cuda_attention_wgmma_available() before launching any.
//
// A tile is 64 rows (keys or queries) of HS bf16 columns, stored as HS/64
// sub-tiles of 64 rows x 128 B, the 16-byte chunk c of row r at chunk
// c ^ (r % 8) (128-byte swizzle; the tile starts 1024-byte aligned). The same
// bytes serve two ways:
//  - K-major (rows are the operand's M or N, the head dim its K): A or B of a
//    product over the head dim (S = Q K^T, dP = dO V^T, S^T = K Q^T, ...);
//    8-row atoms 1024 B apart (SBO), a k16 step +32 B inside a sub-tile;
//  - MN-major (rows are the product's K, the head dim its contiguous N): B of
//    a product over the rows (O = P V, dQ = dS K, dV = P^T dO, dK = dS^T Q);
//    8-row k atoms 1024 B apart, 64-column n blocks 64 * 128 B apart.
// benchmarks/gpu/wgmma_probe.cu checks both on a GPU with the same wrappers.
#ifndef MIST_ATTENTION_WGMMA_TILES_CUH
#define MIST_ATTENTION_WGMMA_TILES_CUH
#include "kernels/cuda/attention_tiles.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MIST_ATT_WGMMA 1
#include "kernels/cuda/wgmma.cuh"
#endif

// Which descriptor field holds an MN-major operand's k-atom stride is the one
// layout fact the K-major cases do not settle; the probe's cases 5-8 print
// which holds, and this flag follows it.
#define ATT_V_KATOM_IN_SBO 1
// The forward issues the next key block's scores with this block's P V, and runs the
// softmax while P V is in flight (attention_wgmma.cu); 0 = the plain order
#define ATT_WGMMA_OVERLAP 1
enum {
    ATT_K_LBO = 16, ATT_K_SBO = 1024,
    ATT_V_LBO = ATT_V_KATOM_IN_SBO ? ATT_ROWS * 128 : 1024,
    ATT_V_SBO = ATT_V_KATOM_IN_SBO ? 1024 : ATT_ROWS * 128,
};

// dynamic shared memory rounded up to 1024 bytes (each launch adds 1024 B of slack)
static __device__ __forceinline__ unsigned char *wgmma_smem_align(unsigned char *raw) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(raw);
    return raw + ((1024 - a % 1024) % 1024);
}
static __device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

// rows [row0, row0+64) of a (T, stride) bf16 matrix (HS columns from gbase) into a
// swizzled tile with cp.async, one commit group; rows >= T zero-filled
template <int HS>
static __device__ __forceinline__ void load_tile_swizzled_async(unsigned char *sm, const bf16 *gbase, size_t stride,
                                                                int row0, int T) {
    constexpr int CHUNKS = HS / 8;
    for (int i = threadIdx.x; i < ATT_ROWS * CHUNKS; i += ATT_THREADS) {
        int r = i / CHUNKS, ch = i % CHUNKS;
        int valid = row0 + r < T;
        const bf16 *src = gbase + (size_t)(valid ? row0 + r : 0) * stride + ch * 8;
        uint32_t dst = smem_addr(sm + (ch / 8) * (ATT_ROWS * 128) + r * 128 + ((ch % 8) ^ (r % 8)) * 16);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

// P (this warp's 16 rows x 64, C fragments) packed to bf16 as the A operand of
// four k16 steps, the same packing as accumulate_pv's. All packed before the
// wgmma_fence: registers a wgmma reads must not be written while it runs.
static __device__ __forceinline__ void pack_a_operand(uint32_t pa[4][4], const float s[8][4]) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        pa[kk][0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]), pa[kk][1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
        pa[kk][2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[kk][3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
}

#ifdef MIST_ATT_WGMMA
// The (K, V) tiles of key block kb (rows kb*64..) into a stage of two swizzled tiles, one
// commit group each.
template <int HS>
static __device__ __forceinline__ void kv_stage_load(unsigned char *stage, const bf16 *kbase, const bf16 *vbase,
                                                     size_t stride, int kb, int T) {
    load_tile_swizzled_async<HS>(stage, kbase, stride, kb * ATT_ROWS, T);
    load_tile_swizzled_async<HS>(stage + ATT_ROWS * HS * 2, vbase, stride, kb * ATT_ROWS, T);
}

// Key block kb of a loop over kb = 0..last whose (K, V) tiles stream through two stages
// (block 0 loaded before the loop): starts loading block kb + 1 into the other stage,
// waits for block kb and everything committed before it, and makes it visible to
// wgmma (cp.async wrote it through the generic proxy; wgmma reads through the async
// one). Returns block kb's stage. The caller ends each step with a barrier, so the
// stage refilled here is one every warp is done with.
template <int HS>
static __device__ __forceinline__ unsigned char *kv_stage_next(unsigned char *stages, const bf16 *kbase,
                                                               const bf16 *vbase, size_t stride, int kb, int last, int T) {
    constexpr int STAGE = 2 * ATT_ROWS * HS * 2;
    if (kb < last) {
        kv_stage_load<HS>(stages + ((kb + 1) & 1) * STAGE, kbase, vbase, stride, kb + 1, T);
        asm volatile("cp.async.wait_group 2;\n" ::);  // all but block kb + 1's two groups have landed
    } else {
        cp_async_wait_all();
    }
    wgmma_fence_smem();
    __syncthreads();
    return stages + (kb & 1) * STAGE;
}

// the k16 step kk of a tile read K-major
static __device__ __forceinline__ uint64_t kmajor_step(uint32_t tile, int kk) {
    return wgmma_desc(tile + (kk / 4) * (ATT_ROWS * 128) + (kk % 4) * 32, ATT_K_LBO, ATT_K_SBO);
}
// the k16 step kk (rows 16 kk .. 16 kk + 15) of a tile read MN-major
static __device__ __forceinline__ uint64_t mnmajor_step(uint32_t tile, int kk) {
    return wgmma_desc(tile + kk * 16 * 128, ATT_V_LBO, ATT_V_SBO);
}

// d (64 x 64, fp32) = Q K^T over the head dim: Q the forward's register fragments (A),
// the key tile read K-major (the first step overwrites d). The caller fences and commits.
template <int HS>
static __device__ __forceinline__ void scores_wgmma_rs(float d[8][4], const uint32_t qf[HS / 16][4], uint32_t k_tile) {
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++) wgmma_rs_n64<0>(&d[0][0], qf[kk], kmajor_step(k_tile, kk), kk > 0);
}

// d (64 x 64, fp32) = A B^T over the head dim, both 64-row tiles read K-major from
// shared memory (the first step overwrites d). The caller fences and commits.
template <int HS>
static __device__ __forceinline__ void scores_wgmma_ss(float d[8][4], uint32_t a_tile, uint32_t b_tile) {
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++) wgmma_ss_n64<0>(&d[0][0], kmajor_step(a_tile, kk), kmajor_step(b_tile, kk), kk > 0);
}

// acc (64 x HS) += P (64 x 64, the packed A operand) @ tile (64 rows x HS) read
// MN-major: the row axis is the product's k. The caller fences and commits.
template <int HS>
static __device__ __forceinline__ void accumulate_wgmma_rs(float acc[HS / 8][4], const uint32_t pa[4][4], uint32_t tile) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        if constexpr (HS == 128) wgmma_rs_n128<1>(&acc[0][0], pa[kk], mnmajor_step(tile, kk), 1);
        else wgmma_rs_n64<1>(&acc[0][0], pa[kk], mnmajor_step(tile, kk), 1);
    }
}
#endif

#endif
