// Hopper's warpgroup MMA (wgmma, PTX ISA "asynchronous warpgroup level matrix
// multiply-accumulate"), for code compiled for sm_90a only: the include site
// guards it. One warpgroup (4 warps, 128 threads) computes D (64 x N, fp32)
// += A (64 x 16, bf16) B (16 x N, bf16) per instruction:
//  - the accumulator d: warp w holds rows 16w..16w+15, d[4j + e] at (g, 8j + 2q + e)
//    and d[4j + 2 + e] at (g + 8, 8j + 2q + e), g = lane / 4, q = lane % 4 (mma.sync's
//    C layout, repeated over the N / 8 column tiles);
//  - A from registers (rs): per k16 step the mma.sync m16n8k16 A fragment of the
//    warp's 16 rows; or from shared memory (ss) through a descriptor;
//  - B through a shared-memory descriptor; TB = 1 reads it MN-major (transposed);
//  - scale_d = 0: d = A B (the old d is ignored), 1: d += A B.
// Issue wgmma_fence() before a group whose registers other instructions wrote,
// then the instructions, wgmma_commit(), and wgmma_wait() before reading d.
// benchmarks/gpu/wgmma_probe.cu checks these layouts on a GPU.
#ifndef MIST_WGMMA_CUH
#define MIST_WGMMA_CUH
#include <stdint.h>

// descriptor of a shared-memory operand with 128-byte swizzle: start address,
// leading and stride byte offsets (bits 0-13, 16-29, 32-45, each >> 4), swizzle
// mode 1 (bits 62-63); the swizzle atoms (8 rows of 128 B) must be 1024-byte aligned
static __device__ __forceinline__ uint64_t wgmma_desc(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((smem_addr & 0x3FFFF) >> 4) | (uint64_t)((lbo >> 4) & 0x3FFF) << 16 |
           (uint64_t)((sbo >> 4) & 0x3FFF) << 32 | 1ull << 62;
}

static __device__ __forceinline__ void wgmma_fence(void) { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void wgmma_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void wgmma_wait(void) { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// waits until at most N of this thread's committed groups are pending (the older ones are done)
template <int N>
static __device__ __forceinline__ void wgmma_wait_n(void) {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Pins d[0..N) for the compiler. Just before a wgmma_fence(): other instructions' writes of
// these registers (an accumulator's zeroing) stay above the fence; left free, nvcc sank
// them between the fence and the first wgmma, where the PTX ISA allows no such access.
// Just after the wait that ends the wgmma writing them: reads of d stay below the wait (to
// the compiler the wgmma's asm wrote d when it was issued, not when the result landed).
template <int N>
static __device__ __forceinline__ void wgmma_fence_operand(float *d) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
// The same for the registers of an A operand (uint32_t a[N]). Before the fence: the code that
// fills them stays above it. After the wait that ends the wgmma reading them: their registers
// stay live until then (to the compiler the asm read them at issue, and code after it could
// reuse them while the tensor cores still read them)
template <int N>
static __device__ __forceinline__ void wgmma_fence_operand(uint32_t *a) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+r"(a[i])::"memory");
}
// shared memory written through the generic proxy (stores, cp.async) becomes visible to wgmma's reads
static __device__ __forceinline__ void wgmma_fence_smem(void) { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// the accumulator operands d[0..7, +8, ...] and, in the instruction, their placeholders
#define WGMMA_ACC8(i) \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define WGMMA_ACC32(i) WGMMA_ACC8(i), WGMMA_ACC8(i + 8), WGMMA_ACC8(i + 16), WGMMA_ACC8(i + 24)
#define WGMMA_REGS32 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "\
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WGMMA_REGS64 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "\
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "\
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "\
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
// scale-d is a predicate: set from operand n (0 or 1)
#define WGMMA_SCALE(n) "{\n.reg .pred p;\nsetp.ne.b32 p, %" #n ", 0;\n"
#define WGMMA_OP(N) "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 "

template <int TB>
static __device__ __forceinline__ void wgmma_ss_n64(float d[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(WGMMA_SCALE(34) WGMMA_OP(64) WGMMA_REGS32 ", %32, %33, p, 1, 1, 0, %35;\n}\n"
                 : WGMMA_ACC32(0)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TB));
}
template <int TB>
static __device__ __forceinline__ void wgmma_rs_n64(float d[32], const uint32_t a[4], uint64_t desc_b, int scale_d) {
    asm volatile(WGMMA_SCALE(37) WGMMA_OP(64) WGMMA_REGS32 ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                 : WGMMA_ACC32(0)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
}
template <int TB>
static __device__ __forceinline__ void wgmma_ss_n128(float d[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(WGMMA_SCALE(66) WGMMA_OP(128) WGMMA_REGS64 ", %64, %65, p, 1, 1, 0, %67;\n}\n"
                 : WGMMA_ACC32(0), WGMMA_ACC32(32)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TB));
}
template <int TB>
static __device__ __forceinline__ void wgmma_rs_n128(float d[64], const uint32_t a[4], uint64_t desc_b, int scale_d) {
    asm volatile(WGMMA_SCALE(69) WGMMA_OP(128) WGMMA_REGS64 ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
                 : WGMMA_ACC32(0), WGMMA_ACC32(32)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
}

#endif
