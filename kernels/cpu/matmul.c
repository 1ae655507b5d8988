// Matmul with fused bias and optional GELU, forward and backward.
// The GEMM goes through OpenBLAS cblas_sgemm when the build has it, else
// through a cache-blocked loop; bf16 operands are widened to fp32 scratch
// first (bf16 is computed in fp32), results rounded once on the way out.
// All scratch (fp32 copies, accumulators, packing panels) is carved from the
// backend's grow-only workspace: nothing is allocated inside a step (cpu_ops.h).
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#include <stdlib.h>
#include "kernels/cpu/cpu_ops.h"
#ifdef HAVE_OPENBLAS
#include <cblas.h>
#endif

// Block sizes: a (KB x NB) panel of B is 256 KiB of fp32, an (MB x KB) panel
// of A 64 KiB, so both stay in L2 while one C block (MB x NB) is updated.
enum { GEMM_MB = 64, GEMM_NB = 256, GEMM_KB = 256, BIAS_COLS_PER_TASK = 64 };
enum { GEMM_TILE_ROWS = 4, GEMM_TILE_COLS = 64 };  // register/L1 tile of the inner kernel
// C tiles handed to single-threaded OpenBLAS calls (big enough to run at full speed)
enum { BLAS_TILE_M = 128, BLAS_TILE_N = 512 };

#ifdef HAVE_OPENBLAS
static int gemm_blas_enabled = 1;
#else
static int gemm_blas_enabled = 0;
#endif

int cpu_gemm_use_blas(int enabled) {
    int previous = gemm_blas_enabled;
#ifdef HAVE_OPENBLAS
    gemm_blas_enabled = enabled != 0;
#endif
    return previous;
}

// element (i,k) of op(A) and (k,j) of op(B), honouring the transposes
#define A_AT(i, k) (transA ? A[(size_t)(k) * lda + (i)] : A[(size_t)(i) * lda + (k)])
#define B_AT(k, j) (transB ? B[(size_t)(j) * ldb + (k)] : B[(size_t)(k) * ldb + (j)])

// C (mb,nb) += Ap (mb,kb) @ Bp (kb,nb) for packed panels. A (TILE_ROWS x
// TILE_COLS) tile of C is summed over kk = 0..kb-1 in order in a local
// accumulator (it stays in registers / L1), then added to C once.
static void gemm_panel(const float *restrict Ap, const float *restrict Bp, int mb, int nb, int kb,
                       float *restrict C, int ldc) {
    for (int i0 = 0; i0 < mb; i0 += GEMM_TILE_ROWS) {
        int rows = mb - i0 < GEMM_TILE_ROWS ? mb - i0 : GEMM_TILE_ROWS;
        for (int j0 = 0; j0 < nb; j0 += GEMM_TILE_COLS) {
            int cols = nb - j0 < GEMM_TILE_COLS ? nb - j0 : GEMM_TILE_COLS;
            float acc[GEMM_TILE_ROWS][GEMM_TILE_COLS] = {{0}};
            if (rows == GEMM_TILE_ROWS && cols == GEMM_TILE_COLS) {
                // full tile: constant trip counts, which compilers vectorize even at -O2
                for (int kk = 0; kk < kb; kk++) {
                    const float *brow = Bp + (size_t)kk * nb + j0;
                    for (int r = 0; r < GEMM_TILE_ROWS; r++) {
                        float a = Ap[(size_t)(i0 + r) * kb + kk];
                        for (int jj = 0; jj < GEMM_TILE_COLS; jj++) acc[r][jj] += a * brow[jj];
                    }
                }
            } else {
                for (int kk = 0; kk < kb; kk++) {
                    const float *brow = Bp + (size_t)kk * nb + j0;
                    for (int r = 0; r < rows; r++) {
                        float a = Ap[(size_t)(i0 + r) * kb + kk];
                        for (int jj = 0; jj < cols; jj++) acc[r][jj] += a * brow[jj];
                    }
                }
            }
            for (int r = 0; r < rows; r++) {
                float *crow = C + (size_t)(i0 + r) * ldc + j0;
                for (int jj = 0; jj < cols; jj++) crow[jj] += acc[r][jj];
            }
        }
    }
}

void cpu_gemm_blocked(Backend *b, int transA, int transB, int M, int N, int K, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc) {
    if (beta != 1.0f) {
        CPU_PRAGMA(omp parallel for schedule(static))
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
    }
    int mblocks = (M + GEMM_MB - 1) / GEMM_MB, nblocks = (N + GEMM_NB - 1) / GEMM_NB;
    // one thread owns each C block and walks k in a fixed order: bit-identical for any thread count
    size_t pack_stride;  // per thread: the A panel, then the B panel
    char *packs = cpu_scratch_per_thread(b, CPU_WS_GEMM_PACK,
                                         ((size_t)GEMM_MB * GEMM_KB + (size_t)GEMM_KB * GEMM_NB) * sizeof(float),
                                         &pack_stride);
    CPU_PRAGMA(omp parallel)
    {
        float *Ap = cpu_thread_part(packs, pack_stride);  // (MB, KB)
        float *Bp = Ap + (size_t)GEMM_MB * GEMM_KB;       // (KB, NB)
        CPU_PRAGMA(omp for schedule(static))
        for (int blk = 0; blk < mblocks * nblocks; blk++) {
            int i0 = blk / nblocks * GEMM_MB, j0 = blk % nblocks * GEMM_NB;
            int mb = M - i0 < GEMM_MB ? M - i0 : GEMM_MB;
            int nb = N - j0 < GEMM_NB ? N - j0 : GEMM_NB;
            for (int k0 = 0; k0 < K; k0 += GEMM_KB) {
                int kb = K - k0 < GEMM_KB ? K - k0 : GEMM_KB;
                for (int ii = 0; ii < mb; ii++)
                    for (int kk = 0; kk < kb; kk++) Ap[ii * kb + kk] = A_AT(i0 + ii, k0 + kk);
                for (int kk = 0; kk < kb; kk++)
                    for (int jj = 0; jj < nb; jj++) Bp[kk * nb + jj] = B_AT(k0 + kk, j0 + jj);
                gemm_panel(Ap, Bp, mb, nb, kb, C + (size_t)i0 * ldc + j0, ldc);
            }
        }
    }
}

#ifdef HAVE_OPENBLAS
// OpenBLAS splits one GEMM differently for different thread counts, and the
// sums come out in a different order (measured: 1 vs 2 threads differ in the
// last bits). So OpenBLAS always runs single-threaded here, on C tiles of a
// fixed size, and the tiles are spread over OpenMP threads: the tiling never
// depends on the thread count, hence neither do the bits.
static void gemm_blas_tiled(int transA, int transB, int M, int N, int K, const float *A, int lda,
                            const float *B, int ldb, float beta, float *C, int ldc) {
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);  // whoever changed it
    int mtiles = (M + BLAS_TILE_M - 1) / BLAS_TILE_M, ntiles = (N + BLAS_TILE_N - 1) / BLAS_TILE_N;
    CPU_PRAGMA(omp parallel for schedule(static) if (mtiles * ntiles > 1))
    for (int tile = 0; tile < mtiles * ntiles; tile++) {
        int i0 = tile / ntiles * BLAS_TILE_M, j0 = tile % ntiles * BLAS_TILE_N;
        int mb = M - i0 < BLAS_TILE_M ? M - i0 : BLAS_TILE_M;
        int nb = N - j0 < BLAS_TILE_N ? N - j0 : BLAS_TILE_N;
        // rows i0.. of op(A): A is (M,K) row-major, or (K,M) when transposed
        const float *a = transA ? A + i0 : A + (size_t)i0 * lda;
        // columns j0.. of op(B): B is (K,N) row-major, or (N,K) when transposed
        const float *bm = transB ? B + (size_t)j0 * ldb : B + j0;
        cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                    mb, nb, K, 1.0f, a, lda, bm, ldb, beta, C + (size_t)i0 * ldc + j0, ldc);
    }
}
#endif

void cpu_gemm(Backend *b, int transA, int transB, int M, int N, int K, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
#ifdef HAVE_OPENBLAS
    if (gemm_blas_enabled && K > 0) {
        gemm_blas_tiled(transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#endif
    cpu_gemm_blocked(b, transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

// out X(N,OC) = inp X(N,C) @ weight X(OC,C)^T + bias X(OC);
// with pre_gelu X(N,OC): pre_gelu = that sum, out = gelu_tanh(sum). GELU reads
// the fp32 sum (before bf16 rounding), as a fused GEMM epilogue would.
// (out and pre_gelu with row stride ld)
static void matmul_forward(Backend *b, void *out, void *pre_gelu, const void *inp, const void *weight,
                           const void *bias, int N, int C, int OC, int ld) {
    MistDtype dt = b->dtype;
    const float *inp32 = cpu_as_f32(b, CPU_WS_IN0, inp, dt, (size_t)N * C);   // (N, C)
    const float *w32 = cpu_as_f32(b, CPU_WS_IN1, weight, dt, (size_t)OC * C); // (OC, C)
    float *acc = dt == MIST_F32 ? out : cpu_scratch(b, CPU_WS_OUT, (size_t)N * ld * sizeof(float));  // (N, ld)
    cpu_gemm(b, 0, 1, N, OC, C, inp32, C, w32, C, 0.0f, acc, ld);
    CPU_PRAGMA(omp parallel for schedule(static))
    for (int i = 0; i < N; i++) {
        for (int o = 0; o < OC; o++) {
            size_t k = (size_t)i * ld + o;
            float y = acc[k] + (bias ? cpu_ld(bias, dt, o) : 0.0f);
            if (pre_gelu) {
                cpu_st(pre_gelu, dt, k, y);
                y = cpu_gelu(y);
            }
            cpu_st(out, dt, k, y);
        }
    }
}

void cpu_matmul_forward(Backend *b, BackendStream *s, void *out, void *pre_gelu, const void *inp,
                        const void *weight, const void *bias, int N, int C, int OC) {
    matmul_forward(b, out, pre_gelu, inp, weight, bias, N, C, OC, OC);
}

void cpu_matmul_forward_ld(Backend *b, BackendStream *s, void *out, const void *inp, const void *weight,
                           int N, int C, int OC, int ld) {
    matmul_forward(b, out, NULL, inp, weight, NULL, N, C, OC, ld);
}

// dinp X(N,C) = dout @ weight (skipped when NULL); dweight X(OC,C) += dout^T @ inp,
// dout with row stride ld (columns OC..ld-1 are converted along but never used)
static void matmul_backward_products(Backend *b, void *dinp, void *dweight, const void *dout, const void *inp,
                                     const void *weight, int N, int C, int OC, int ld) {
    if (N <= 0) return;
    MistDtype dt = b->dtype;
    // workspace slots: dout32 stays in IN0 throughout; the dinp and dweight
    // products run one after the other, so they reuse IN1 and OUT
    const float *dout32 = cpu_as_f32(b, CPU_WS_IN0, dout, dt, (size_t)(N - 1) * ld + OC);  // (N, ld)
    if (dinp) {
        const float *w32 = cpu_as_f32(b, CPU_WS_IN1, weight, dt, (size_t)OC * C);  // (OC, C)
        float *dinp32 = dt == MIST_F32 ? dinp : cpu_scratch(b, CPU_WS_OUT, (size_t)N * C * sizeof(float));  // (N, C)
        cpu_gemm(b, 0, 0, N, C, OC, dout32, ld, w32, C, 0.0f, dinp32, C);
        if (dinp32 != dinp) cpu_from_f32(dinp, dt, dinp32, (size_t)N * C);
    }
    if (dweight) {
        const float *inp32 = cpu_as_f32(b, CPU_WS_IN1, inp, dt, (size_t)N * C);  // (N, C)
        float *dw32 = cpu_as_f32(b, CPU_WS_OUT, dweight, dt, (size_t)OC * C);     // (OC, C)
        cpu_gemm(b, 1, 0, OC, C, N, dout32, ld, inp32, C, 1.0f, dw32, C);
        if (dw32 != dweight) cpu_from_f32(dweight, dt, dw32, (size_t)OC * C);
    }
}

// dinp, dweight as above (dout contiguous);
// dbias X(OC) += column sums of dout. pre_gelu: dout *= gelu'(pre_gelu) in place first.
void cpu_matmul_backward(Backend *b, BackendStream *s, void *dinp, void *dweight, void *dbias,
                         void *dout, const void *inp, const void *weight, const void *pre_gelu,
                         int N, int C, int OC) {
    MistDtype dt = b->dtype;
    size_t n_out = (size_t)N * OC;
    if (pre_gelu) {
        CPU_PRAGMA(omp parallel for schedule(static))
        for (size_t k = 0; k < n_out; k++)
            cpu_st(dout, dt, k, cpu_ld(dout, dt, k) * cpu_gelu_grad(cpu_ld(pre_gelu, dt, k)));
    }
    if (dbias) {
        // each column block is summed over rows in order by one thread
        int tasks = (OC + BIAS_COLS_PER_TASK - 1) / BIAS_COLS_PER_TASK;
        CPU_PRAGMA(omp parallel for schedule(static))
        for (int task = 0; task < tasks; task++) {
            int o0 = task * BIAS_COLS_PER_TASK;
            int o1 = o0 + BIAS_COLS_PER_TASK < OC ? o0 + BIAS_COLS_PER_TASK : OC;
            float acc[BIAS_COLS_PER_TASK] = {0};
            for (int i = 0; i < N; i++)
                for (int o = o0; o < o1; o++) acc[o - o0] += cpu_ld(dout, dt, (size_t)i * OC + o);
            for (int o = o0; o < o1; o++) cpu_st(dbias, dt, o, cpu_ld(dbias, dt, o) + acc[o - o0]);
        }
    }
    matmul_backward_products(b, dinp, dweight, dout, inp, weight, N, C, OC, OC);
}

// the product, rounded to the storage type, then times gelu'(pre_gelu) and
// rounded again: the same values as matmul_backward's dinp followed by
// gelu_backward on it
void cpu_matmul_dinp_gelu(Backend *b, BackendStream *s, void *dinp, const void *dout, const void *weight,
                          const void *pre_gelu, int N, int C, int OC) {
    MistDtype dt = b->dtype;
    matmul_backward_products(b, dinp, NULL, dout, NULL, weight, N, C, OC, OC);
    size_t n = (size_t)N * C;
    CPU_PRAGMA(omp parallel for schedule(static))
    for (size_t k = 0; k < n; k++) cpu_st(dinp, dt, k, cpu_ld(dinp, dt, k) * cpu_gelu_grad(cpu_ld(pre_gelu, dt, k)));
}

void cpu_matmul_backward_ld(Backend *b, BackendStream *s, void *dinp, void *dweight, const void *dout,
                            const void *inp, const void *weight, int N, int C, int OC, int ld) {
    matmul_backward_products(b, dinp, dweight, dout, inp, weight, N, C, OC, ld);
}
