// Causal attention through cuDNN's fused SDPA graphs (forward, and backward
// from the forward's log-sum-exp), beside the backend's own kernels:
// [runtime] attention = cudnn or MIST_CUDA_ATTENTION=cudnn selects it (attention.cu). cuDNN is loaded at run
// time; without it, or when cuDNN refuses a shape, the calls return -1 after
// printing why once, and the caller runs its own kernels.
// Layouts and math are the backend's attention op's (kernels/backend.h).
#pragma once
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

// 0 when cuDNN ran the op on stream (a cudaStream_t), -1 when the caller must run its own kernels
int cuda_attention_cudnn_forward(void *stream, void *out, float *lse, const void *qkv, int B, int T, int NH, int NKV,
                                 int HS);
int cuda_attention_cudnn_backward(void *stream, void *dqkv, const void *dout, const void *qkv, const void *out,
                                  const float *lse, int B, int T, int NH, int NKV, int HS);
// 1 when both graphs of this shape have an execution plan (built now if not yet); else the
// reason in why and 0 when cuDNN refused a graph, -1 when there is no cuDNN to ask (no
// library, no handle, or a build without its headers)
int cuda_attention_cudnn_ready(int B, int T, int NH, int NKV, int HS, char *why, size_t n);
// both graphs' descriptors and operation graphs built and finalized without a device (no plan): 1
// when cuDNN accepts them all, else the reason in why and 0 for the first refusal (the
// call, cuDNN's status and its text), -1 when there is no cuDNN library to ask
int cuda_attention_cudnn_describe(int B, int T, int NH, int NKV, int HS, char *why, size_t n);
// 1 when cuDNN's library loads and gives a handle on this device; else 0 with why
int cuda_attention_cudnn_available(char *why, size_t n);
// device bytes the cached plans hold: workspaces and the backward's fp32 dQ accumulators
size_t cuda_attention_cudnn_reserved_bytes(void);
// executions cuDNN ran (forward + backward): lets a check tell cuDNN's results from the fallback's
long cuda_attention_cudnn_runs(void);

#ifdef __cplusplus
}
#endif
