// Internal to the CUDA backend: the context, bf16 load/store helpers, error
// checks and the launchers of the op files. Storage is bf16 (every kernel
// computes in fp32); norm statistics, losses and optimizer state are fp32.
#ifndef MIST_CUDA_COMMON_CUH
#define MIST_CUDA_COMMON_CUH

#include <cuda_runtime_api.h>
#include <cuda_bf16.h>
#include <stdio.h>
#include <stdlib.h>
// backend.h is a C header: its constructors must keep C linkage here
extern "C" {
#include "kernels/backend.h"
}

typedef __nv_bfloat16 bf16;

// A failed CUDA call inside an op is a programming or hardware error the
// caller cannot recover from: name the call, file and line, then abort.
#define CUDA_CHECK(call)                                                                     \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "mist cuda backend: %s failed at %s:%d: %s\n", #call, __FILE__,  \
                    __LINE__, cudaGetErrorString(e_));                                       \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

// Backend-private state. The scratch buffer holds the partial sums of the
// deterministic two-pass reductions (bias / norm-weight gradients, squared
// norms, attention's D); ops that use it are ordered on their stream, so
// the runtime must not run two of them concurrently on different streams.
typedef struct {
    void *scratch;          // device scratch for reduction partials
    size_t scratch_bytes;
    void *lt_workspace;     // cuBLASLt workspace
    size_t lt_workspace_bytes;
    void *lt_handle;        // cublasLtHandle_t
    void *token_sort;       // embedding backward: tokens and positions sorted on the device, CUB's temporaries
    size_t token_sort_bytes;
    int sm_count;
} CudaCtx;

static inline CudaCtx *cuda_ctx(Backend *b) { return (CudaCtx *)b->ctx; }
static inline cudaStream_t cuda_stream(BackendStream *s) { return (cudaStream_t)s; }

// scratch of at least `bytes` (aborts with a hint when the fixed buffer is too small)
void *cuda_scratch(Backend *b, size_t bytes, const char *who);

static __device__ __forceinline__ float ld(const bf16 *p, size_t i) { return __bfloat162float(p[i]); }
static __device__ __forceinline__ void st(bf16 *p, size_t i, float v) { p[i] = __float2bfloat16_rn(v); }

// V consecutive bf16 as floats: V = 8 is one 16-byte access (the row-wise
// kernels use it when C % 8 == 0 and the rows are 16-byte aligned, which
// turns a warp's 64-byte transactions into 512-byte ones), V = 1 the fallback.
template <int V> static __device__ __forceinline__ void ldv(float *f, const bf16 *p) {
    if constexpr (V == 8) {
        uint4 u = *(const uint4 *)p;
        const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
        for (int i = 0; i < 4; i++) {
            float2 t = __bfloat1622float2(h[i]);
            f[2 * i] = t.x, f[2 * i + 1] = t.y;
        }
    } else {
        for (int i = 0; i < V; i++) f[i] = __bfloat162float(p[i]);
    }
}
template <int V> static __device__ __forceinline__ void stv(bf16 *p, const float *f) {
    if constexpr (V == 8) {
        uint4 u;
        __nv_bfloat162 *h = (__nv_bfloat162 *)&u;
        for (int i = 0; i < 4; i++) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
        *(uint4 *)p = u;
    } else {
        for (int i = 0; i < V; i++) p[i] = __float2bfloat16_rn(f[i]);
    }
}
// whether rows of C elements starting at these pointers allow 16-byte access (NULL pointers pass)
static inline int cuda_rows_vec8(int C, const void *a, const void *b, const void *c, const void *d, const void *e) {
    const void *p[5] = {a, b, c, d, e};
    if (C % 8) return 0;
    for (int i = 0; i < 5; i++)
        if ((size_t)p[i] % 16) return 0;
    return 1;
}

static __device__ __forceinline__ float gelu_tanh(float x) {
    const float k = 0.7978845608028654f;  // sqrt(2/pi)
    float u = k * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}
// d/dx of 0.5 x (1 + tanh u), u = k (x + 0.044715 x^3)
static __device__ __forceinline__ float gelu_tanh_grad(float x) {
    const float k = 0.7978845608028654f;
    float u = k * (x + 0.044715f * x * x * x);
    float t = tanhf(u);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x * x);
}

static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static inline unsigned cuda_blocks(size_t n, int threads) {
    size_t g = (n + threads - 1) / threads;
    return (unsigned)(g > 0x7fffffff ? 0x7fffffff : (g ? g : 1));
}

// ---- op launchers (same signatures as the Backend table) ----
extern "C" {
void cuda_embedding_forward(Backend *b, BackendStream *s, void *out, const int32_t *tokens,
                            const void *wte, const void *wpe, int B, int T, int C);
void cuda_embedding_backward(Backend *b, BackendStream *s, void *dwte, void *dwpe, const void *dout,
                             const int32_t *tokens, int B, int T, int C);
void cuda_embedding_forward_range(Backend *b, BackendStream *s, void *out, const int32_t *tokens, const void *wte,
                                  const void *wpe, int v0, int Vt, int B, int T, int C);
void cuda_embedding_backward_range(Backend *b, BackendStream *s, void *dwte, void *dwpe, const void *dout,
                                   const int32_t *tokens, int v0, int Vt, int B, int T, int C);
void cuda_norm_forward(Backend *b, BackendStream *s, NormOp kind, void *res_out, void *out,
                       float *mean, float *rstd, const void *inp, const void *res_in,
                       const void *w, const void *bias, int N, int C, float eps);
// lean.cu ([stage.N] lean)
void cuda_gelu_forward_mask(Backend *b, BackendStream *s, void *out, uint8_t *mask, const void *inp, size_t n);
void cuda_gelu_backward_from_output(Backend *b, BackendStream *s, void *dinp, const void *out,
                                    const uint8_t *mask, const void *dout, size_t n);
void cuda_norm_backward_from_output(Backend *b, BackendStream *s, NormOp kind, void *dinp, void *dw,
                                    void *dbias, const void *dout, const void *out, const void *w,
                                    const void *bias, const float *rstd, int N, int C);
void cuda_norm_backward(Backend *b, BackendStream *s, NormOp kind, void *dinp, void *dw, void *dbias,
                        const void *dout, const void *inp, const void *w,
                        const float *mean, const float *rstd, int N, int C);
void cuda_matmul_forward(Backend *b, BackendStream *s, void *out, void *pre_gelu, const void *inp,
                         const void *weight, const void *bias, int N, int C, int OC);
void cuda_matmul_forward_ld(Backend *b, BackendStream *s, void *out, const void *inp, const void *weight,
                            int N, int C, int OC, int ld);
void cuda_matmul_backward_ld(Backend *b, BackendStream *s, void *dinp, void *dweight, const void *dout,
                             const void *inp, const void *weight, int N, int C, int OC, int ld);
void cuda_matmul_dinp_gelu(Backend *b, BackendStream *s, void *dinp, const void *dout, const void *weight,
                           const void *pre_gelu, int N, int C, int OC);
void cuda_matmul_backward(Backend *b, BackendStream *s, void *dinp, void *dweight, void *dbias,
                          void *dout, const void *inp, const void *weight, const void *pre_gelu,
                          int N, int C, int OC);
void cuda_attention_forward(Backend *b, BackendStream *s, void *out, float *lse, const void *qkv,
                            int B, int T, int NH, int NKV, int HS);
// 1 for the head sizes the attention kernels are built for (64, 128: their tiles are compile-time)
int cuda_attention_head_size_supported(int HS);
// whether the wgmma attention can run: the backend built for sm_90a, on a Hopper GPU
int cuda_attention_wgmma_available(void);
// The attention kernels of the run (Backend.set_attention): name one of auto, base, wide, wgmma,
// cudnn. 0 with what runs and why in said; -1 with why (an unknown name, wgmma where it cannot run).
// MIST_CUDA_ATTENTION, when set, overrides it at each call (attention.cu).
int cuda_attention_set(const char *name, char *said, size_t n);
// Builds what the chosen attention keeps per shape (cuDNN's plans) now: 0, or -1 with why when
// cuDNN refused the shape (its calls then run the base kernels)
int cuda_attention_prepare(int B, int T, int NH, int NKV, int HS, char *why, size_t n);
// The embedding backward's sort buffers for N tokens, allocated now (embedding.cu)
void cuda_embedding_prepare(Backend *b, int N);
// the wgmma forward with the next block's scores overlapped with P V (1, the default) or the
// plain order (0): the same bits; tests compare them, benchmarks time both
void cuda_attention_wgmma_forward_overlap(int on);
void cuda_attention_backward(Backend *b, BackendStream *s, void *dqkv, const void *dout,
                             const void *qkv, const void *out, const float *lse,
                             int B, int T, int NH, int NKV, int HS);
void cuda_rotary_forward(Backend *b, BackendStream *s, void *qkv, int B, int T, int NH, int NKV,
                         int HS, float theta);
void cuda_rotary_backward(Backend *b, BackendStream *s, void *dqkv, int B, int T, int NH, int NKV,
                          int HS, float theta);
void cuda_gelu_forward(Backend *b, BackendStream *s, void *out, const void *inp, size_t n);
void cuda_gelu_backward(Backend *b, BackendStream *s, void *dinp, const void *inp, const void *dout, size_t n);
void cuda_swiglu_forward(Backend *b, BackendStream *s, void *out, const void *inp, int N, int F);
void cuda_swiglu_backward(Backend *b, BackendStream *s, void *dinp, const void *dout, const void *inp, int N, int F);
void cuda_residual_forward(Backend *b, BackendStream *s, void *out, const void *a, const void *c, size_t n);
void cuda_crossentropy_forward_backward(Backend *b, BackendStream *s, float *losses, void *logits,
                                        const int32_t *targets, int N, int V, int Vp, float dloss);
void cuda_crossentropy_vocab_max(Backend *b, BackendStream *s, float *rowmax, const void *logits, int N, int Vt,
                                 int Vp);
void cuda_crossentropy_vocab_stats(Backend *b, BackendStream *s, float *stats, const void *logits,
                                   const float *rowmax, const int32_t *targets, int v0, int N, int Vt, int Vp);
void cuda_crossentropy_vocab_finish(Backend *b, BackendStream *s, float *losses, void *logits, const float *rowmax,
                                    const float *stats, const int32_t *targets, int v0, int N, int Vt, int Vp,
                                    float dloss);
void cuda_adamw_update(Backend *b, BackendStream *s, void *param, float *master, const void *grad,
                       float *m, float *v, size_t n, float lr, float beta1, float beta2,
                       float eps, float weight_decay, float grad_scale, int t);
void cuda_norm_squared_accumulate(Backend *b, BackendStream *s, float *acc, const void *grad, size_t n);
void cuda_cast(Backend *b, BackendStream *s, void *dst, MistDtype dst_t, const void *src, MistDtype src_t, size_t n);
void cuda_scale(Backend *b, BackendStream *s, void *x, float alpha, size_t n);
// deterministic column sums: out bf16 X(C) += sum over rows of in X(N,C), summed in fp32 (used by matmul)
void cuda_column_sum_accumulate(Backend *b, cudaStream_t st, bf16 *out, const bf16 *in, int N, int C);
// cuBLASLt state (matmul.cu)
int cuda_matmul_init(Backend *b, char *err, size_t errlen);
void cuda_matmul_destroy(Backend *b);
}

#endif
