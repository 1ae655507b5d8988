// The backend interface: where memory lives, how work is ordered, and what
// computes. A backend is a table of function pointers plus an opaque context
// (the ggml split): `cpu` (kernels/cpu) and `cuda` (kernels/cuda) implement it,
// and the runtime never asks which one it holds: it asks supports_op with the
// shape it would run an op at, and reads device_memory_is_host.
//
// Conventions for every op below:
//  - `X` marks tensors stored in the backend's storage dtype `b->dtype`
//    (MIST_F32 or MIST_BF16; bf16 is always computed in fp32). `f32` marks
//    tensors that are always fp32 (norm statistics, losses, optimizer state).
//  - Dimension names: B batch, T sequence, C channels (hidden), N = B*T rows,
//    OC output channels, NH query heads, NKV key/value heads, HS head size,
//    F MLP inner width, V vocabulary, Vp padded vocabulary (row stride).
//  - Gradient semantics: parameter gradients ACCUMULATE (+=), activation
//    gradients OVERWRITE (=), except where a comment says "+=" (residual
//    junctions accumulate into the residual-stream gradient).
//  - All pointers are device pointers of this backend (host pointers on cpu);
//    ops are enqueued on `s` (NULL = the default stream) and may return
//    before they finish; `synchronize` waits.
//  - Deterministic: the same inputs give the same bits run after run (no
//    atomics in gradient paths).
#ifndef MIST_BACKEND_H
#define MIST_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "base/dtype.h"

typedef struct Backend Backend;
typedef struct BackendStream BackendStream;  // in-order queue of work
typedef struct BackendEvent BackendEvent;    // a point in a stream

typedef enum {
    OP_EMBEDDING, OP_NORM, OP_MATMUL, OP_MATMUL_GELU, OP_ATTENTION, OP_ROTARY,
    OP_GELU, OP_SWIGLU, OP_RESIDUAL, OP_CROSSENTROPY, OP_ADAMW, OP_NORM_SQ,
    OP_CAST,
    OP_VOCAB_PARALLEL,  // the *_range embedding ops and the crossentropy_vocab_* passes
    OP_COUNT
} BackendOp;

typedef enum { NORM_OP_LAYERNORM = 0, NORM_OP_RMSNORM = 1 } NormOp;

// gelu_tanh's minimum: gelu'(x*) = 0 at x* below, y_min = gelu_tanh(x*) (to double precision);
// gelu''(x*) = 0.4304. Left of x* gelu_tanh falls from 0 to y_min, right of it rises.
#define GELU_TANH_XMIN (-0.7524614220710163)
#define GELU_TANH_YMIN (-0.170040750571254)

// What supports_op is asked: an op and the shape it would run at. A dimension
// left 0 is not asked about (the caller does not know it yet, or the op has
// none): the answer then holds for every value of it.
typedef struct {
    BackendOp op;
    int B, T;         // batch, sequence
    int NH, NKV, HS;  // query heads, key/value heads, head size
} BackendOpShape;

// Whether the op is defined at this shape at all, on any backend: rotary pairs
// (i, i + HS/2) need an even head size; grouped-query attention maps query head h
// to kv head h / (NH/NKV), so NKV must divide NH. Backends answer supports_op
// with this and their own limits.
static inline int backend_op_defined(const BackendOpShape *s) {
    if (s->op < 0 || s->op >= OP_COUNT) return 0;
    if ((s->op == OP_ROTARY || s->op == OP_ATTENTION) && s->NH > 0 && s->NKV > 0 && s->NH % s->NKV != 0) return 0;
    return s->op != OP_ROTARY || s->HS % 2 == 0;
}

struct Backend {
    const char *name;   // "cpu" or "cuda"
    MistDtype dtype;    // storage dtype of params, grads and activations
    int device;         // device index (cuda), 0 on cpu
    void *ctx;          // backend-private state
    // 1 when alloc_device returns host memory (the CPU backend, whose device is
    // emulated: its memory is the accounted arena), which host libraries (MPI)
    // read directly; 0 when device memory is the GPU's
    int device_memory_is_host;

    // ---- memory: where it lives. Arenas call these once each at start. ----
    void *(*alloc_device)(Backend *b, size_t bytes);   // NULL on failure
    void (*free_device)(Backend *b, void *p);
    void *(*alloc_pinned)(Backend *b, size_t bytes);   // page-locked host memory
    void (*free_pinned)(Backend *b, void *p);
    // copies: dst/src kinds are implied by the name; async on s
    void (*copy_h2d)(Backend *b, void *dst, const void *src, size_t bytes, BackendStream *s);
    void (*copy_d2h)(Backend *b, void *dst, const void *src, size_t bytes, BackendStream *s);
    void (*copy_d2d)(Backend *b, void *dst, const void *src, size_t bytes, BackendStream *s);
    void (*memset_device)(Backend *b, void *p, int value, size_t bytes, BackendStream *s);
    // bytes the backend itself holds outside the arenas (library workspaces, context)
    size_t (*reserved_bytes)(Backend *b);
    // the device's free bytes now (every process and library included): 0 and *free set,
    // or -1 where the backend cannot tell (the CPU backend)
    int (*device_free_bytes)(Backend *b, size_t *free);
    // 1 when p lies in memory from alloc_device (memory a host library such as MPI
    // cannot read on a GPU); the staged comm backend (runtime/comm_staged.h) asks this
    int (*is_device_memory)(Backend *b, const void *p);

    // ---- ordering ----
    BackendStream *(*stream_create)(Backend *b);
    void (*stream_destroy)(Backend *b, BackendStream *s);
    void (*stream_synchronize)(Backend *b, BackendStream *s);
    BackendEvent *(*event_create)(Backend *b);
    void (*event_destroy)(Backend *b, BackendEvent *e);
    void (*event_record)(Backend *b, BackendEvent *e, BackendStream *s);
    void (*stream_wait_event)(Backend *b, BackendStream *s, BackendEvent *e);
    void (*event_synchronize)(Backend *b, BackendEvent *e);
    // 1 when the work recorded before e has completed, 0 while it runs; never blocks
    int (*event_query)(Backend *b, BackendEvent *e);
    // the platform's handle of s, for a library that enqueues its own work in order
    // with ours (NCCL): the cudaStream_t (a NULL s: the default stream); NULL on the CPU
    void *(*native_stream)(Backend *b, BackendStream *s);
    float (*event_elapsed_ms)(Backend *b, BackendEvent *start, BackendEvent *end);
    void (*synchronize)(Backend *b);
    // 1 when the backend runs the op at this shape (its kernels' limits: the CUDA
    // attention's head sizes, say), 0 when the caller must not call it
    int (*supports_op)(Backend *b, const BackendOpShape *shape);
    void (*destroy)(Backend *b);

    // ---- before a run (optional: NULL where there is nothing to choose or prepare, the CPU) ----
    // The attention kernels: name one of auto, base, wide, wgmma, cudnn ([runtime] attention,
    // docs/cuda-backend.md). 0 with what runs and why in said (auto resolved, or the reason of
    // a fallback); -1 with why in said when the choice cannot run here.
    int (*set_attention)(Backend *b, const char *name, char *said, size_t n);
    // Allocates now what the op keeps for the process from its first call at this shape
    // (CUDA: cuDNN's attention plans for OP_ATTENTION, the embedding backward's sort buffers
    // for OP_EMBEDDING at B*T tokens), so that reserved_bytes counts it before the run.
    // 0, or -1 with why: the op then falls back at run time (it still runs).
    int (*prepare_op)(Backend *b, const BackendOpShape *shape, char *why, size_t n);

    // ---- ops ----
    // out X(B,T,C) = wte[tokens] + wpe[t]; wpe may be NULL (rotary models)
    void (*embedding_forward)(Backend *b, BackendStream *s, void *out, const int32_t *tokens,
                              const void *wte, const void *wpe, int B, int T, int C);
    // dwte X(V,C) +=, dwpe X(maxT,C) += (may be NULL); dout X(B,T,C)
    void (*embedding_backward)(Backend *b, BackendStream *s, void *dwte, void *dwpe, const void *dout,
                               const int32_t *tokens, int B, int T, int C);

    // Fused residual + norm. If res_in != NULL: res_out X(N,C) = inp + res_in, then
    // normalise res_out; else normalise inp (res_out unused, may be NULL).
    // out X(N,C); mean f32(N) (layernorm only, NULL for rmsnorm); rstd f32(N);
    // w X(C); bias X(C) or NULL. LayerNorm: (x-mean)*rstd*w+bias; RMSNorm: x*rstd*w.
    void (*norm_forward)(Backend *b, BackendStream *s, NormOp kind, void *res_out, void *out,
                         float *mean, float *rstd, const void *inp, const void *res_in,
                         const void *w, const void *bias, int N, int C, float eps);
    // dinp X(N,C) += (the residual stream's gradient); dw X(C) +=; dbias X(C) += or NULL;
    // inp X(N,C) is the tensor that was normalised (res_out when fused).
    void (*norm_backward)(Backend *b, BackendStream *s, NormOp kind, void *dinp, void *dw, void *dbias,
                          const void *dout, const void *inp, const void *w,
                          const float *mean, const float *rstd, int N, int C);
    // The same from the norm's output ([stage.N] lean): xhat = (out - bias) / w (bias NULL:
    // 0), so neither the input nor the mean is read. A column with w = 0 has lost xhat (out =
    // bias there): it is taken as 0, so that column's dinp and dw are not the true ones and a
    // caller must not use this form while a weight is 0 (docs/lean-layers.md).
    void (*norm_backward_from_output)(Backend *b, BackendStream *s, NormOp kind, void *dinp, void *dw,
                                      void *dbias, const void *dout, const void *out, const void *w,
                                      const void *bias, const float *rstd, int N, int C);

    // out X(N,OC) = inp X(N,C) @ weight X(OC,C)^T + bias X(OC) (bias may be NULL).
    // If pre_gelu != NULL: pre_gelu X(N,OC) gets the pre-activation and out = gelu_tanh(pre_gelu).
    void (*matmul_forward)(Backend *b, BackendStream *s, void *out, void *pre_gelu, const void *inp,
                           const void *weight, const void *bias, int N, int C, int OC);
    // dinp X(N,C) = dout @ weight (skipped when dinp == NULL); dweight X(OC,C) +=;
    // dbias X(OC) += (NULL to skip). If pre_gelu != NULL, dout is first turned in place
    // into the gradient w.r.t. pre_gelu (dout *= gelu'(pre_gelu)).
    void (*matmul_backward)(Backend *b, BackendStream *s, void *dinp, void *dweight, void *dbias,
                            void *dout, const void *inp, const void *weight, const void *pre_gelu,
                            int N, int C, int OC);
    // dinp X(N,C) = (dout X(N,OC) @ weight X(OC,C)) * gelu'(pre_gelu X(N,C)): the input
    // gradient of a layer whose input was gelu_tanh(pre_gelu), carried through the GELU
    // (GPT's MLP projection: the result is dL/d(fc output)). One product with the GELU's
    // backward in its epilogue where the backend can, instead of a product then a pass
    // over N*C elements; dinp must not alias dout, weight or pre_gelu.
    void (*matmul_dinp_gelu)(Backend *b, BackendStream *s, void *dinp, const void *dout, const void *weight,
                             const void *pre_gelu, int N, int C, int OC);
    // The same two products with out / dout stored with row stride ld >= OC, no bias, no
    // GELU. The LM head uses them: its logits rows get a stride that is a multiple of 8
    // elements, so each row starts 16-byte aligned as tensor-core GEMMs require even when
    // the vocabulary is odd (GPT-2's 50257). Columns OC..ld-1 are never read or written.
    void (*matmul_forward_ld)(Backend *b, BackendStream *s, void *out, const void *inp, const void *weight,
                              int N, int C, int OC, int ld);
    void (*matmul_backward_ld)(Backend *b, BackendStream *s, void *dinp, void *dweight, const void *dout,
                               const void *inp, const void *weight, int N, int C, int OC, int ld);

    // Causal self-attention, scale 1/sqrt(HS), grouped-query (query head h reads kv head
    // h / (NH/NKV)). qkv X(B,T,(NH+2*NKV)*HS): per token [q heads | k heads | v heads].
    // out X(B,T,NH*HS); lse f32(B,NH,T) = log-sum-exp of each score row (saved for backward;
    // the T x T matrix is never kept).
    void (*attention_forward)(Backend *b, BackendStream *s, void *out, float *lse, const void *qkv,
                              int B, int T, int NH, int NKV, int HS);
    // dqkv X(B,T,(NH+2*NKV)*HS) = (overwritten): the gradient w.r.t. q, k and v; the scores are
    // recomputed per row from qkv and lse, with D = rowsum(dout * out) (no T x T matrix kept).
    void (*attention_backward)(Backend *b, BackendStream *s, void *dqkv, const void *dout,
                               const void *qkv, const void *out, const float *lse,
                               int B, int T, int NH, int NKV, int HS);

    // Rotary embedding on the q and k parts of qkv X(B,T,(NH+2*NKV)*HS), in place,
    // positions t = 0..T-1, half-split pairs (i, i+HS/2), freq_i = theta^(-2i/HS).
    void (*rotary_forward)(Backend *b, BackendStream *s, void *qkv, int B, int T, int NH, int NKV,
                           int HS, float theta);
    // the inverse rotation applied in place to dq, dk inside dqkv
    void (*rotary_backward)(Backend *b, BackendStream *s, void *dqkv, int B, int T, int NH, int NKV,
                            int HS, float theta);

    // out X(n) = gelu_tanh(inp); dinp X(n) = dout * gelu'(inp) (dinp may alias dout)
    void (*gelu_forward)(Backend *b, BackendStream *s, void *out, const void *inp, size_t n);
    void (*gelu_backward)(Backend *b, BackendStream *s, void *dinp, const void *inp, const void *dout, size_t n);
    // Memory-lean GELU ([stage.N] lean; docs/lean-layers.md): the backward from the output.
    // gelu_tanh has its minimum y_min = GELU_TANH_YMIN at x* = GELU_TANH_XMIN, so a y in
    // (y_min, 0) has two preimages; one bit per element says which: mask u8(ceil(n/8)),
    // bit i (byte i/8, bit i%8) = inp[i] < x*. out X(n) = gelu_tanh(inp) (out may alias inp).
    void (*gelu_forward_mask)(Backend *b, BackendStream *s, void *out, uint8_t *mask, const void *inp, size_t n);
    // dinp X(n) = dout * gelu'(x), x = gelu^-1(out) on the branch mask gives (dinp may alias dout)
    void (*gelu_backward_from_output)(Backend *b, BackendStream *s, void *dinp, const void *out,
                                      const uint8_t *mask, const void *dout, size_t n);
    // inp X(N,2F) rows are [gate | up]; out X(N,F) = silu(gate) * up
    void (*swiglu_forward)(Backend *b, BackendStream *s, void *out, const void *inp, int N, int F);
    // dinp X(N,2F) = (overwritten) [dgate | dup]: dgate = dout*up*silu'(gate), dup = dout*silu(gate)
    void (*swiglu_backward)(Backend *b, BackendStream *s, void *dinp, const void *dout, const void *inp, int N, int F);
    // out X(n) = a + c (out may alias a)
    void (*residual_forward)(Backend *b, BackendStream *s, void *out, const void *a, const void *c, size_t n);

    // Softmax cross-entropy fused with its gradient. logits X(N,Vp), columns >= V ignored.
    // losses f32(N) = -log softmax(logits)[target]. If dloss != 0, logits are overwritten
    // with dloss * (softmax - onehot(target)) (padding columns set to 0). Targets < 0 are
    // ignored (loss 0, gradient 0).
    void (*crossentropy_forward_backward)(Backend *b, BackendStream *s, float *losses, void *logits,
                                          const int32_t *targets, int N, int V, int Vp, float dloss);

    // ---- vocabulary-parallel forms (tensor parallelism): this rank holds rows
    // [v0, v0 + Vt) of wte and of the LM head, i.e. logits columns [v0, v0 + Vt).
    // Only backends whose supports_op answers OP_VOCAB_PARALLEL with 1 fill these.
    // out X(B,T,C) = (v0 <= token < v0 + Vt ? wte X(Vt,C)[token - v0] : 0) + wpe[t] (wpe may
    // be NULL); the sum over ranks is the full embedding.
    void (*embedding_forward_range)(Backend *b, BackendStream *s, void *out, const int32_t *tokens,
                                    const void *wte, const void *wpe, int v0, int Vt, int B, int T, int C);
    // dwte X(Vt,C) += for tokens in [v0, v0 + Vt) only; dwpe X(maxT,C) += (may be NULL)
    void (*embedding_backward_range)(Backend *b, BackendStream *s, void *dwte, void *dwpe, const void *dout,
                                     const int32_t *tokens, int v0, int Vt, int B, int T, int C);
    // Cross-entropy over logits X(N,Vp) whose columns 0..Vt-1 are vocabulary v0..v0+Vt-1, in
    // three passes; the caller reduces over the vocabulary's ranks between them:
    //   vocab_max:    rowmax f32(N) = max of the rank's columns      -> all-reduce MAX
    //   vocab_stats:  stats f32(2N) = [sum exp(z - rowmax) | target logit or 0] -> all-reduce SUM
    //   vocab_finish: losses f32(N) = log(stats[i]) + rowmax - stats[N+i]; if dloss != 0 the
    //                 logits become dloss * (softmax - onehot) (padding columns 0).
    // Targets < 0 are ignored (loss 0, gradient 0), as in the fused op.
    void (*crossentropy_vocab_max)(Backend *b, BackendStream *s, float *rowmax, const void *logits, int N, int Vt,
                                   int Vp);
    void (*crossentropy_vocab_stats)(Backend *b, BackendStream *s, float *stats, const void *logits,
                                     const float *rowmax, const int32_t *targets, int v0, int N, int Vt, int Vp);
    void (*crossentropy_vocab_finish)(Backend *b, BackendStream *s, float *losses, void *logits, const float *rowmax,
                                      const float *stats, const int32_t *targets, int v0, int N, int Vt, int Vp,
                                      float dloss);

    // AdamW with decoupled weight decay and bias correction at step t (1-based).
    // grad X(n) is multiplied by grad_scale first (clipping). master f32(n) holds the
    // fp32 weights when param is bf16 (NULL when param is f32: then param is the master).
    // m, v f32(n). param X(n) is rewritten from the updated master.
    void (*adamw_update)(Backend *b, BackendStream *s, void *param, float *master, const void *grad,
                         float *m, float *v, size_t n, float lr, float beta1, float beta2,
                         float eps, float weight_decay, float grad_scale, int t);
    // acc f32[1] (a device scalar) += sum(grad^2) over X(n), deterministically
    void (*norm_squared_accumulate)(Backend *b, BackendStream *s, float *acc, const void *grad, size_t n);
    // dst = src converted between dtypes (f32 <-> bf16, or same-type copy)
    void (*cast)(Backend *b, BackendStream *s, void *dst, MistDtype dst_t, const void *src, MistDtype src_t, size_t n);
    // x X(n) *= alpha
    void (*scale)(Backend *b, BackendStream *s, void *x, float alpha, size_t n);
};

// Constructors. `dtype` is the storage dtype (MIST_F32 or MIST_BF16).
// Each returns NULL and writes a reason to err when it cannot start.
Backend *backend_cpu_create(MistDtype dtype, char *err, size_t errlen);
Backend *backend_cuda_create(MistDtype dtype, int device, char *err, size_t errlen);

#endif
