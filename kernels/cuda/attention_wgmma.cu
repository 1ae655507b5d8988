// The experimental attention forward on Hopper's warpgroup MMA
// (MIST_CUDA_ATTENTION=wgmma; device code only in builds for sm_90a). The
// tile layout, descriptors and products are in attention_wgmma_tiles.cuh.
#include "kernels/cuda/attention_wgmma_tiles.cuh"

// whether this build's device code has the wgmma kernels (sm_90a); read once by the host
__device__ int att_wgmma_built;
__global__ void attention_wgmma_built_kernel(void) {
#ifdef MIST_ATT_WGMMA
    att_wgmma_built = 1;
#else
    att_wgmma_built = 0;
#endif
}

// The default forward with both products on wgmma: the block's 4 warps are one warpgroup;
// S = Q K^T with Q in registers as the A operand (the same fragments as mma.sync's A, warp w
// holding rows 16w..16w+15) and K read by the tensor cores straight from a swizzled
// shared-memory tile (no ldmatrix into registers: the shared-memory traffic that caps the
// default forward); the accumulator comes back in mma.sync's C layout (d[4j + e] = s[j][e]),
// so softmax_tile runs unchanged; then O += P V with P packed to bf16 in registers and V read
// from the same kind of tile as an MN-major operand.
//
// OVERLAP (the default, ATT_WGMMA_OVERLAP): the tensor cores do not wait for the softmax.
// Key block kb + 1's S = Q K^T is issued together with block kb's O += P V; the softmax of
// block kb + 1 runs while P V is in flight (it touches neither o nor P's registers), and o is
// rescaled to the new running max once P V has landed. o sees the same operations in the
// same order as without OVERLAP (scale by alpha_kb, add P_kb V_kb, ...), so both give the same
// bits; tests/test_cuda_kernels checks that. (K, V) stream through three stages: block kb + 2
// loads while kb + 1's scores and kb's P V run.
template <int HS, bool OVERLAP>
// 2 blocks per SM: with 3 (<= 168 registers) the HS 128 instance spills 124 B
__global__ void __launch_bounds__(ATT_THREADS, 2) attention_forward_wgmma_kernel(bf16 *out, float *lse, const bf16 *qkv,
                                                                              int T, int NH, int NKV, float scale_log2) {
#ifdef MIST_ATT_WGMMA
    extern __shared__ __align__(16) unsigned char att_smem_wg[];
    unsigned char *smem = wgmma_smem_align(att_smem_wg);
    constexpr int TILE = ATT_ROWS * HS * 2;  // bytes; a stage: K tile then V tile
    auto [qb, h, bb, stride, base, kbase, vbase] = head_block<HS>(qkv, T, NH, NKV);
    int warp = threadIdx.x / 32;
    const int row0 = qb * ATT_ROWS + warp * 16, r_lo = row0 + (threadIdx.x % 32) / 4;
    RowPair rp = row_pair();

    uint32_t qf[HS / 16][4];
    query_fragments<HS>(qf, base, stride, h, r_lo, T);
    float o[HS / 8][4] = {};

    if constexpr (!OVERLAP) {
        kv_stage_load<HS>(smem, kbase, vbase, stride, 0, T);
        for (int kb = 0; kb <= qb; kb++) {
            unsigned char *cur = kv_stage_next<HS>(smem, kbase, vbase, stride, kb, qb, T);
            float s[8][4] = {};  // (the first step ignores it: scale_d = 0)
            uint32_t kaddr = smem_addr(cur), vaddr = kaddr + TILE;
            wgmma_fence_operand<32>(&s[0][0]);
            wgmma_fence();
            scores_wgmma_rs<HS>(s, qf, kaddr);
            wgmma_commit();
            wgmma_wait();
            wgmma_fence_operand<32>(&s[0][0]);
            bool diagonal = kb == qb || (kb + 1) * ATT_ROWS > T;
            softmax_tile<HS>(s, o, rp, row0, kb * ATT_ROWS, T, diagonal, scale_log2);
            uint32_t pa[4][4];
            pack_a_operand(pa, s);
            wgmma_fence_operand<16>(&pa[0][0]);
            wgmma_fence_operand<HS / 2>(&o[0][0]);
            wgmma_fence();
            accumulate_wgmma_rs<HS>(o, pa, vaddr);  // O += P V
            wgmma_commit();
            wgmma_wait();
            wgmma_fence_operand<HS / 2>(&o[0][0]);
            wgmma_fence_operand<16>(&pa[0][0]);
            __syncthreads();  // every warp is done with this stage before it is refilled
        }
    } else {
        auto stage = [&](int kb) { return smem + (kb % 3) * 2 * TILE; };
        // blocks 0 and 1 start loading; wait for block 0 (block 1's two groups may be in flight)
        kv_stage_load<HS>(stage(0), kbase, vbase, stride, 0, T);
        if (qb >= 1) {
            kv_stage_load<HS>(stage(1), kbase, vbase, stride, 1, T);
            asm volatile("cp.async.wait_group 2;\n" ::);
        } else {
            cp_async_wait_all();
        }
        wgmma_fence_smem();
        __syncthreads();
        uint32_t pa[4][4];  // P of block kb, the A operand of its P V
        {
            float s[8][4] = {};
            wgmma_fence_operand<32>(&s[0][0]);
            wgmma_fence();
            scores_wgmma_rs<HS>(s, qf, smem_addr(stage(0)));
            wgmma_commit();
            wgmma_wait();
            wgmma_fence_operand<32>(&s[0][0]);
            softmax_tile<HS>(s, o, rp, row0, 0, T, qb == 0 || ATT_ROWS > T, scale_log2);
            pack_a_operand(pa, s);
            wgmma_fence_operand<16>(&pa[0][0]);
        }
        // steps kb < qb: block kb + 1's scores and block kb's P V in flight together (the
        // last block's P V is peeled off below, so every step commits the same two groups)
        for (int kb = 0; kb < qb; kb++) {
            // block kb + 2 into the stage block kb - 1 used (every warp passed the barrier ending step kb - 1)
            if (kb + 2 <= qb) {
                kv_stage_load<HS>(stage(kb + 2), kbase, vbase, stride, kb + 2, T);
                asm volatile("cp.async.wait_group 2;\n" ::);  // block kb + 1 landed
            } else {
                cp_async_wait_all();
            }
            wgmma_fence_smem();
            __syncthreads();
            float sn[8][4] = {};  // block kb + 1's scores
            wgmma_fence_operand<32>(&sn[0][0]);
            wgmma_fence();
            scores_wgmma_rs<HS>(sn, qf, smem_addr(stage(kb + 1)));
            wgmma_commit();
            wgmma_fence_operand<HS / 2>(&o[0][0]);
            wgmma_fence();
            accumulate_wgmma_rs<HS>(o, pa, smem_addr(stage(kb)) + TILE);  // O += P V of block kb
            wgmma_commit();
            wgmma_wait_n<1>();  // the scores (committed first) are done; P V may still run
            wgmma_fence_operand<32>(&sn[0][0]);
            float alpha_lo, alpha_hi;
            bool diagonal = kb + 1 == qb || (kb + 2) * ATT_ROWS > T;
            softmax_scores(sn, rp, row0, (kb + 1) * ATT_ROWS, T, diagonal, scale_log2, alpha_lo, alpha_hi);
            wgmma_wait();
            wgmma_fence_operand<HS / 2>(&o[0][0]);
            wgmma_fence_operand<16>(&pa[0][0]);  // block kb's P V read pa until here
            rescale_rows<HS>(o, alpha_lo, alpha_hi);
            pack_a_operand(pa, sn);
            wgmma_fence_operand<16>(&pa[0][0]);  // filled above the next step's fence
            __syncthreads();  // every warp is done with block kb's stage before step kb + 1 refills it
        }
        wgmma_fence_operand<HS / 2>(&o[0][0]);
        wgmma_fence();
        accumulate_wgmma_rs<HS>(o, pa, smem_addr(stage(qb)) + TILE);  // the last block's P V
        wgmma_commit();
        wgmma_wait();
        wgmma_fence_operand<HS / 2>(&o[0][0]);
    }
    store_rows<HS>(out, lse, o, rp, row0, bb, h, T, NH);
#else
    __trap();  // never launched: the host asks cuda_attention_wgmma_available() first
#endif
}

// 1 when this build has the wgmma kernels and the current device runs them (asked
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

// which forward MIST_CUDA_ATTENTION=wgmma runs: the overlapped one (default) or the plain
// one (tests compare their bits, benchmarks time both)
static int wgmma_forward_overlap = ATT_WGMMA_OVERLAP;
extern "C" void cuda_attention_wgmma_forward_overlap(int on) { wgmma_forward_overlap = on != 0; }

template <int HS, bool OVERLAP>
static void launch(cudaStream_t st, bf16 *out, float *lse, const bf16 *qkv, int B, int T, int NH, int NKV) {
    float scale_log2 = LOG2E / sqrtf((float)HS);
    static int attribute_set;  // one per template instance
    dim3 grid((T + ATT_ROWS - 1) / ATT_ROWS, NH, B);
    // (K, V) stages (two, or three overlapped), and slack to align them to 1024 B
    size_t smem = (OVERLAP ? 3 : 2) * 2 * ATT_ROWS * HS * 2 + 1024;
    if (!attribute_set) {
        CUDA_CHECK(cudaFuncSetAttribute(attention_forward_wgmma_kernel<HS, OVERLAP>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attribute_set = 1;
    }
    attention_forward_wgmma_kernel<HS, OVERLAP><<<grid, ATT_THREADS, smem, st>>>(out, lse, qkv, T, NH, NKV, scale_log2);
    CUDA_CHECK_LAUNCH();
}

void attention_forward_wgmma(cudaStream_t st, bf16 *out, float *lse, const bf16 *qkv, int B, int T, int NH, int NKV,
                             int HS) {
    if (HS == 64) {
        if (wgmma_forward_overlap) launch<64, true>(st, out, lse, qkv, B, T, NH, NKV);
        else launch<64, false>(st, out, lse, qkv, B, T, NH, NKV);
    } else {
        if (wgmma_forward_overlap) launch<128, true>(st, out, lse, qkv, B, T, NH, NKV);
        else launch<128, false>(st, out, lse, qkv, B, T, NH, NKV);
    }
}
