// Does this GPU's wgmma (sm_90a) read its operands the way a Hopper
// attention kernel would assume? Each case multiplies small-integer bf16
// matrices (exact in fp32) with one hypothesis about the shared-memory
// descriptor and register layouts and compares every element with a CPU
// product: a first contact with the layouts before any kernel is built on them.
// Standalone (CUDA runtime only): benchmarks/gpu/run.sh builds it with
// -gencode arch=compute_90a,code=sm_90a and runs it first.
//
// Layouts under test (PTX ISA, "asynchronous warpgroup level matrix"):
//  - descriptor: bits 0-13 start address >> 4, 16-29 leading byte offset
//    (LBO) >> 4, 32-45 stride byte offset (SBO) >> 4, 62-63 swizzle (1 = 128 B);
//  - K-major operand, 128-byte swizzle: rows of 64 bf16 (128 B), 8-row atoms of
//    1024 B (SBO = 1024, LBO unused), 16-byte chunk c of row r stored at chunk
//    c ^ (r % 8); a k16 step inside the atom = start address + 32 B; wider K
//    as separate 64-column sub-tiles;
//  - MN-major operand (V as stored, imm-trans-b = 1): rows of 64 N-consecutive
//    elements per k, 8-k atoms of 1024 B, 64-wide N blocks K * 128 B apart;
//    which of LBO / SBO is the k-atom stride is what cases 5-8 find out;
//  - accumulator (64 x N, fp32): warp w rows 16w..16w+15, d[4j..4j+3] at
//    (g, 8j+2q..+1) and (g+8, 8j+2q..+1), g = lane/4, q = lane%4 (as mma.sync);
//  - A from registers: per k16 step the m16n8k16 A fragment of the warp's 16 rows.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cuda/wgmma.cuh"

enum { M = 64, THREADS = 128, A_BYTES = 16384, B_BYTES = 32768, MAX_STEPS = 8 };


typedef struct {
    int a_off[MAX_STEPS], b_off[MAX_STEPS];  // bytes from the image's start, per k16 step
    int steps;
    uint32_t lbo_a, sbo_a, lbo_b, sbo_b;
} Steps;

// one warpgroup: images copied verbatim into 1024-aligned shared memory, the
// k16 steps issued back to back into one accumulator, then stored as laid out
template <int N, int AREG, int TB>
__global__ void __launch_bounds__(THREADS) probe_kernel(float *out, const uint4 *a_img, const uint4 *b_img,
                                                        const uint32_t *a_regs, Steps st) {
    extern __shared__ unsigned char raw[];
    uint32_t raw_addr = (uint32_t)__cvta_generic_to_shared(raw);
    unsigned char *sm = raw + ((1024 - raw_addr % 1024) % 1024);
    uint32_t base = (uint32_t)__cvta_generic_to_shared(sm);
    for (int i = threadIdx.x; i < A_BYTES / 16; i += THREADS) ((uint4 *)sm)[i] = a_img[i];
    for (int i = threadIdx.x; i < B_BYTES / 16; i += THREADS) ((uint4 *)(sm + A_BYTES))[i] = b_img[i];
    wgmma_fence_smem();  // generic-proxy stores -> wgmma's reads
    __syncthreads();
    float d[N / 2];
    for (int i = 0; i < N / 2; i++) d[i] = 0.0f;
    wgmma_fence();
    for (int kk = 0; kk < st.steps; kk++) {
        uint64_t db = wgmma_desc(base + A_BYTES + st.b_off[kk], st.lbo_b, st.sbo_b);
        if constexpr (AREG) {
            uint32_t a[4];
            for (int i = 0; i < 4; i++) a[i] = a_regs[((size_t)kk * THREADS + threadIdx.x) * 4 + i];
            if constexpr (N == 64) wgmma_rs_n64<TB>(d, a, db, kk > 0);
            else wgmma_rs_n128<TB>(d, a, db, kk > 0);
        } else {
            uint64_t da = wgmma_desc(base + st.a_off[kk], st.lbo_a, st.sbo_a);
            if constexpr (N == 64) wgmma_ss_n64<TB>(d, da, db, kk > 0);
            else wgmma_ss_n128<TB>(d, da, db, kk > 0);
        }
    }
    wgmma_commit();
    wgmma_wait();
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    for (int j = 0; j < N / 8; j++) {
        int r = 16 * w + g, c = 8 * j + 2 * q;
        out[r * N + c] = d[4 * j], out[r * N + c + 1] = d[4 * j + 1];
        out[(r + 8) * N + c] = d[4 * j + 2], out[(r + 8) * N + c + 1] = d[4 * j + 3];
    }
}

// ---------------------------------------------------------------- host
static uint16_t bf(int v) {  // small integers are exact in bf16
    __nv_bfloat16 h = __float2bfloat16((float)v);
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}
static void put(unsigned char *img, size_t off, int v) {
    uint16_t u = bf(v);
    memcpy(img + off, &u, 2);
}
// (r, k) of a K-major matrix with R rows: 64-column sub-tiles of R * 128 bytes
static size_t kmajor_off(int r, int k, int R) {
    int half = k / 64, kc = k % 64;
    return (size_t)half * R * 128 + r * 128 + (((kc / 8) ^ (r % 8)) * 16) + (kc % 8) * 2;
}
// (k, n) of an MN-major matrix with K rows of N: 64-wide n blocks of K * 128 bytes
static size_t mnmajor_off(int k, int n, int K) {
    int nb = n / 64, nc = n % 64;
    return (size_t)nb * K * 128 + k * 128 + (((nc / 8) ^ (k % 8)) * 16) + (nc % 8) * 2;
}

typedef struct {
    const char *name;
    int n, k, areg, mn_major_b;  // mn_major_b: B stored (K, N) with N contiguous, imm-trans-b = 1
    uint32_t lbo_b, sbo_b;
    int required;  // 1: the documented K-major layouts (must pass); 0: one of two hypotheses
} Case;

static int run_case(const Case *c) {
    int N = c->n, K = c->k;
    int *A = (int *)malloc(sizeof(int) * M * K), *B = (int *)malloc(sizeof(int) * N * K);  // B (N, K): D = A B^T
    for (int i = 0; i < M * K; i++) A[i] = rand() % 7 - 3;
    for (int i = 0; i < N * K; i++) B[i] = rand() % 7 - 3;
    unsigned char *ai = (unsigned char *)calloc(A_BYTES, 1), *bi = (unsigned char *)calloc(B_BYTES, 1);
    for (int r = 0; r < M; r++)
        for (int k = 0; k < K; k++) put(ai, kmajor_off(r, k, M), A[r * K + k]);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            put(bi, c->mn_major_b ? mnmajor_off(k, n, K) : kmajor_off(n, k, N), B[n * K + k]);
    Steps st;
    memset(&st, 0, sizeof st);
    st.steps = K / 16;
    for (int kk = 0; kk < st.steps; kk++) {
        st.a_off[kk] = (kk / 4) * M * 128 + (kk % 4) * 32;
        st.b_off[kk] = c->mn_major_b ? kk * 16 * 128 : (kk / 4) * N * 128 + (kk % 4) * 32;
    }
    st.lbo_a = 16, st.sbo_a = 1024, st.lbo_b = c->lbo_b, st.sbo_b = c->sbo_b;
    uint32_t *regs = (uint32_t *)malloc(sizeof(uint32_t) * MAX_STEPS * THREADS * 4);
    for (int kk = 0; kk < st.steps; kk++)
        for (int t = 0; t < THREADS; t++) {
            int w = t / 32, g = (t % 32) / 4, q = t % 4, r0 = 16 * w + g, k0 = kk * 16 + 2 * q;
            int rows[4] = {r0, r0 + 8, r0, r0 + 8}, cols[4] = {k0, k0, k0 + 8, k0 + 8};
            for (int i = 0; i < 4; i++)
                regs[((size_t)kk * THREADS + t) * 4 + i] =
                    bf(A[rows[i] * K + cols[i]]) | (uint32_t)bf(A[rows[i] * K + cols[i] + 1]) << 16;
        }
    float *out_d, *out = (float *)malloc(sizeof(float) * M * N);
    uint4 *ad, *bd;
    uint32_t *rd;
    cudaMalloc(&out_d, sizeof(float) * M * N);
    cudaMalloc(&ad, A_BYTES);
    cudaMalloc(&bd, B_BYTES);
    cudaMalloc(&rd, sizeof(uint32_t) * MAX_STEPS * THREADS * 4);
    cudaMemcpy(ad, ai, A_BYTES, cudaMemcpyHostToDevice);
    cudaMemcpy(bd, bi, B_BYTES, cudaMemcpyHostToDevice);
    cudaMemcpy(rd, regs, sizeof(uint32_t) * MAX_STEPS * THREADS * 4, cudaMemcpyHostToDevice);
    cudaMemset(out_d, 0xff, sizeof(float) * M * N);  // NaN: elements never written show up
    size_t shm = A_BYTES + B_BYTES + 1024;
    void (*k)(float *, const uint4 *, const uint4 *, const uint32_t *, Steps);
    if (N == 64) k = c->areg ? (c->mn_major_b ? probe_kernel<64, 1, 1> : probe_kernel<64, 1, 0>)
                             : (c->mn_major_b ? probe_kernel<64, 0, 1> : probe_kernel<64, 0, 0>);
    else k = c->areg ? (c->mn_major_b ? probe_kernel<128, 1, 1> : probe_kernel<128, 1, 0>)
                     : (c->mn_major_b ? probe_kernel<128, 0, 1> : probe_kernel<128, 0, 0>);
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm);
    k<<<1, THREADS, shm>>>(out_d, ad, bd, rd, st);
    cudaError_t e = cudaDeviceSynchronize();
    int bad = -1;
    if (e == cudaSuccess) {
        cudaMemcpy(out, out_d, sizeof(float) * M * N, cudaMemcpyDeviceToHost);
        bad = 0;
        for (int r = 0; r < M; r++)
            for (int n = 0; n < N; n++) {
                int want = 0;
                for (int kk = 0; kk < K; kk++) want += A[r * K + kk] * B[n * K + kk];
                if (!(out[r * N + n] == (float)want)) bad++;
            }
    }
    printf("%-4s %-62s LBO %5u SBO %5u: %s", bad == 0 ? "ok" : "FAIL", c->name, c->lbo_b, c->sbo_b,
           e != cudaSuccess ? cudaGetErrorString(e) : "");
    if (e == cudaSuccess) printf("%d of %d elements wrong", bad, M * N);
    printf("\n");
    cudaFree(out_d), cudaFree(ad), cudaFree(bd), cudaFree(rd);
    free(A), free(B), free(ai), free(bi), free(regs), free(out);
    if (e != cudaSuccess) {  // a fault leaves the context unusable: stop here
        printf("the context is lost after a fault; later cases not run\n");
        exit(2);
    }
    return bad == 0;
}

int main(void) {
    int count = 0;
    cudaDeviceProp prop;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 || cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        printf("SKIP: no GPU\n");
        return 0;
    }
    if (prop.major != 9) {
        printf("SKIP: wgmma needs compute capability 9.0 (this is %d.%d, %s)\n", prop.major, prop.minor, prop.name);
        return 0;
    }
    printf("%s: wgmma layout probe\n", prop.name);
    srand(12345);
    // K-major B: SBO = 1024 (8-row atoms), LBO unused with swizzling; MN-major B: the two
    // assignments of (k-atom stride 1024, n-block stride K * 128 = 8192 at K = 64)
    const Case cases[] = {
        {"ss m64n64, K 64: A and B K-major (Q K^T)", 64, 64, 0, 0, 16, 1024, 1},
        {"ss m64n64, K 128 in two 64-column sub-tiles (head dim 128)", 64, 128, 0, 0, 16, 1024, 1},
        {"ss m64n128, K 64: B with 16 row atoms", 128, 64, 0, 0, 16, 1024, 1},
        {"rs m64n64, K 64: A from registers (P V), B K-major", 64, 64, 1, 0, 16, 1024, 1},
        {"rs m64n64, K 64: B MN-major (V as stored), LBO = k-atom stride", 64, 64, 1, 1, 1024, 8192, 0},
        {"rs m64n64, K 64: B MN-major, SBO = k-atom stride", 64, 64, 1, 1, 8192, 1024, 0},
        {"rs m64n128, K 64: B MN-major in two n blocks, LBO = k-atom stride", 128, 64, 1, 1, 1024, 8192, 0},
        {"rs m64n128, K 64: B MN-major in two n blocks, SBO = k-atom stride", 128, 64, 1, 1, 8192, 1024, 0},
    };
    int ncase = (int)(sizeof cases / sizeof cases[0]), required_ok = 1, ok[16];
    for (int i = 0; i < ncase; i++) {
        ok[i] = run_case(&cases[i]);
        if (cases[i].required && !ok[i]) required_ok = 0;
    }
    int mn64 = ok[4] || ok[5], mn128 = ok[6] || ok[7];
    printf("K-major layouts: %s; MN-major B: %s\n", required_ok ? "as assumed" : "NOT as assumed",
           mn64 && mn128 ? (ok[6] ? "LBO is the k-atom stride" : "SBO is the k-atom stride") : "neither hypothesis");
    return required_ok && mn64 && mn128 ? 0 : 1;
}
