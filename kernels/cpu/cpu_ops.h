// Internal to the CPU backend: load/store helpers for the storage dtype and
// the prototypes of the op files. Every kernel is written once over float:
// it reads storage elements with cpu_ld and writes them with cpu_st, so f32
// and bf16 share one code path and bf16 is always computed in fp32.
#ifndef MIST_CPU_OPS_H
#define MIST_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>
#include "kernels/backend.h"
#include "base/dtype.h"

// OpenMP work sharing that compiles away (without unknown-pragma warnings)
// when the build has no OpenMP: CPU_PRAGMA(omp parallel for ...)
#ifdef _OPENMP
#define CPU_PRAGMA(directive) _Pragma(#directive)
#else
#define CPU_PRAGMA(directive)
#endif

// element i of a storage tensor p of dtype t (MIST_F32 or MIST_BF16), as float
static inline float cpu_ld(const void *p, MistDtype t, size_t i) {
    return t == MIST_BF16 ? mist_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

// store v into element i (bf16: round to nearest even)
static inline void cpu_st(void *p, MistDtype t, size_t i, float v) {
    if (t == MIST_BF16)
        ((uint16_t *)p)[i] = mist_f32_to_bf16(v);
    else
        ((float *)p)[i] = v;
}

// whole rows between storage and fp32 scratch
void cpu_to_f32(float *dst, const void *src, MistDtype t, size_t n);
void cpu_from_f32(void *dst, MistDtype t, const float *src, size_t n);

// ---- workspace (backend_cpu.c). The runtime sizes every buffer before step 0
// and carves it from arenas; nothing may be allocated inside a step. Ops still
// need temporaries (fp32 copies of bf16 tensors, GEMM packing panels, sort
// arrays), so the backend owns a grow-only workspace, like a cuBLAS workspace:
// each slot is reallocated only when an op asks for more than it holds, so
// after the first step with a given shape no op allocates. reserved_bytes
// reports the workspace's total. One op uses each slot for one buffer at a
// time; ops on a backend run one after another (streams are synchronous).
typedef enum {
    CPU_WS_IN0, CPU_WS_IN1, CPU_WS_IN2,     // fp32 copies of bf16 inputs
    CPU_WS_OUT,                             // fp32 result before rounding to storage
    CPU_WS_AUX0, CPU_WS_AUX1, CPU_WS_AUX2,  // op-specific arrays (row stats, sort buffers, partial sums)
    CPU_WS_THREAD,                          // per-thread rows inside an OpenMP region
    CPU_WS_GEMM_PACK,                       // per-thread packing panels of the blocked GEMM
    CPU_WS_SLOTS
} CpuWorkspaceSlot;

// 64-byte aligned buffer of at least `bytes` in `slot`, valid until the next
// request for the same slot; aborts with a message when the host is out of memory
void *cpu_scratch(Backend *b, CpuWorkspaceSlot slot, size_t bytes);

// Per-thread buffers: one region of (max threads) x per_thread bytes, each
// part rounded up to 64 bytes. Call outside the parallel region; inside it,
// cpu_thread_part(base, stride) is the calling thread's part (stride from here).
void *cpu_scratch_per_thread(Backend *b, CpuWorkspaceSlot slot, size_t per_thread, size_t *stride);
void *cpu_thread_part(void *base, size_t stride);

// a storage tensor X(n) as fp32: the tensor itself when t is f32, else a
// widened copy in the workspace slot
float *cpu_as_f32(Backend *b, CpuWorkspaceSlot slot, const void *p, MistDtype t, size_t n);

// ---- GEMM (matmul.c). Row-major, C(M,N) = op(A)(M,K) @ op(B)(K,N) + beta*C.
// transA: A is stored (K,M); transB: B is stored (N,K). beta == 0 ignores C's
// old contents. Both paths give the same bits for any thread count: the
// blocked loop sums each C element over k in order on one thread, and OpenBLAS
// runs single-threaded on C tiles of a fixed size (matmul.c says why). The
// blocked loop packs its panels in b's workspace (CPU_WS_GEMM_PACK).
void cpu_gemm(Backend *b, int transA, int transB, int M, int N, int K, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);
// the portable cache-blocked loop (used when OpenBLAS is absent or disabled)
void cpu_gemm_blocked(Backend *b, int transA, int transB, int M, int N, int K, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc);
// route cpu_gemm through OpenBLAS (when built with it) or the blocked loop;
// returns the previous setting. Default: OpenBLAS when available.
int cpu_gemm_use_blas(int enabled);

// gelu_tanh and its derivative (activation.c), shared with matmul's fused GELU
float cpu_gelu(float x);
float cpu_gelu_grad(float x);
// lean.c: gelu'(x) with cpu_gelu_grad's formula at x = gelu_tanh^-1(y) on the branch
// left (1: x < x*; kernels/gelu_inverse.h), 0 on the left tail's 0
float cpu_gelu_grad_from_output(float y, int left);

// ---- ops: same signatures as the Backend table (kernels/backend.h) ----
void cpu_embedding_forward(Backend *b, BackendStream *s, void *out, const int32_t *tokens,
                           const void *wte, const void *wpe, int B, int T, int C);
void cpu_embedding_backward(Backend *b, BackendStream *s, void *dwte, void *dwpe, const void *dout,
                            const int32_t *tokens, int B, int T, int C);
void cpu_norm_forward(Backend *b, BackendStream *s, NormOp kind, void *res_out, void *out,
                      float *mean, float *rstd, const void *inp, const void *res_in,
                      const void *w, const void *bias, int N, int C, float eps);
void cpu_norm_backward(Backend *b, BackendStream *s, NormOp kind, void *dinp, void *dw, void *dbias,
                       const void *dout, const void *inp, const void *w,
                       const float *mean, const float *rstd, int N, int C);
void cpu_matmul_forward(Backend *b, BackendStream *s, void *out, void *pre_gelu, const void *inp,
                        const void *weight, const void *bias, int N, int C, int OC);
void cpu_matmul_forward_ld(Backend *b, BackendStream *s, void *out, const void *inp, const void *weight,
                           int N, int C, int OC, int ld);
void cpu_matmul_backward_ld(Backend *b, BackendStream *s, void *dinp, void *dweight, const void *dout,
                            const void *inp, const void *weight, int N, int C, int OC, int ld);
void cpu_matmul_dinp_gelu(Backend *b, BackendStream *s, void *dinp, const void *dout, const void *weight,
                          const void *pre_gelu, int N, int C, int OC);
void cpu_matmul_backward(Backend *b, BackendStream *s, void *dinp, void *dweight, void *dbias,
                         void *dout, const void *inp, const void *weight, const void *pre_gelu,
                         int N, int C, int OC);
void cpu_attention_forward(Backend *b, BackendStream *s, void *out, float *lse, const void *qkv,
                           int B, int T, int NH, int NKV, int HS);
void cpu_attention_backward(Backend *b, BackendStream *s, void *dqkv, const void *dout,
                            const void *qkv, const void *out, const float *lse,
                            int B, int T, int NH, int NKV, int HS);
void cpu_rotary_forward(Backend *b, BackendStream *s, void *qkv, int B, int T, int NH, int NKV,
                        int HS, float theta);
void cpu_rotary_backward(Backend *b, BackendStream *s, void *dqkv, int B, int T, int NH, int NKV,
                         int HS, float theta);
void cpu_gelu_forward(Backend *b, BackendStream *s, void *out, const void *inp, size_t n);
void cpu_gelu_backward(Backend *b, BackendStream *s, void *dinp, const void *inp, const void *dout,
                       size_t n);
void cpu_gelu_forward_mask(Backend *b, BackendStream *s, void *out, uint8_t *mask, const void *inp, size_t n);
void cpu_gelu_backward_from_output(Backend *b, BackendStream *s, void *dinp, const void *out,
                                   const uint8_t *mask, const void *dout, size_t n);
void cpu_norm_backward_from_output(Backend *b, BackendStream *s, NormOp kind, void *dinp, void *dw, void *dbias,
                                   const void *dout, const void *out, const void *w, const void *bias,
                                   const float *rstd, int N, int C);
void cpu_swiglu_forward(Backend *b, BackendStream *s, void *out, const void *inp, int N, int F);
void cpu_swiglu_backward(Backend *b, BackendStream *s, void *dinp, const void *dout, const void *inp,
                         int N, int F);
void cpu_residual_forward(Backend *b, BackendStream *s, void *out, const void *a, const void *c,
                          size_t n);
void cpu_crossentropy_forward_backward(Backend *b, BackendStream *s, float *losses, void *logits,
                                       const int32_t *targets, int N, int V, int Vp, float dloss);
void cpu_embedding_forward_range(Backend *b, BackendStream *s, void *out, const int32_t *tokens, const void *wte,
                                 const void *wpe, int v0, int Vt, int B, int T, int C);
void cpu_embedding_backward_range(Backend *b, BackendStream *s, void *dwte, void *dwpe, const void *dout,
                                  const int32_t *tokens, int v0, int Vt, int B, int T, int C);
void cpu_crossentropy_vocab_max(Backend *b, BackendStream *s, float *rowmax, const void *logits, int N, int Vt,
                                int Vp);
void cpu_crossentropy_vocab_stats(Backend *b, BackendStream *s, float *stats, const void *logits,
                                  const float *rowmax, const int32_t *targets, int v0, int N, int Vt, int Vp);
void cpu_crossentropy_vocab_finish(Backend *b, BackendStream *s, float *losses, void *logits, const float *rowmax,
                                   const float *stats, const int32_t *targets, int v0, int N, int Vt, int Vp,
                                   float dloss);
void cpu_adamw_update(Backend *b, BackendStream *s, void *param, float *master, const void *grad,
                      float *m, float *v, size_t n, float lr, float beta1, float beta2,
                      float eps, float weight_decay, float grad_scale, int t);
void cpu_norm_squared_accumulate(Backend *b, BackendStream *s, float *acc, const void *grad, size_t n);
void cpu_cast(Backend *b, BackendStream *s, void *dst, MistDtype dst_t, const void *src,
              MistDtype src_t, size_t n);
void cpu_scale(Backend *b, BackendStream *s, void *x, float alpha, size_t n);

#endif
