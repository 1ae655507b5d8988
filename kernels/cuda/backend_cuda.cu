// The CUDA backend: construction, memory, streams and events (CUDA runtime
// API only; no driver library), and the op table. The ops live in one file
// per family (norm.cu, matmul.cu, attention.cu, ...).
//
// Storage is bf16 only: every op reads bf16 and computes in fp32. fp32
// storage is the CPU backend's job (it is the reference); asking for it here
// fails cleanly with a reason.
#include <string.h>
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/device_probe.h"
#include "kernels/cuda/attention_cudnn.h"

enum {
    SCRATCH_BYTES = 64 << 20,       // reduction partials (see cuda_common.cuh)
    LT_WORKSPACE_BYTES = 32 << 20,  // cuBLASLt: Hopper kernels want >= 32 MiB
};

void *cuda_scratch(Backend *b, size_t bytes, const char *who) {
    CudaCtx *ctx = cuda_ctx(b);
    if (bytes > ctx->scratch_bytes) {
        fprintf(stderr, "mist cuda backend: %s needs %zu bytes of scratch, the backend holds %zu "
                        "(raise SCRATCH_BYTES in kernels/cuda/backend_cuda.cu)\n", who, bytes, ctx->scratch_bytes);
        abort();
    }
    return ctx->scratch;
}

static void *cu_alloc_device(Backend *b, size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}
static void cu_free_device(Backend *b, void *p) { if (p) CUDA_CHECK(cudaFree(p)); }
static void *cu_alloc_pinned(Backend *b, size_t bytes) {
    void *p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}
static void cu_free_pinned(Backend *b, void *p) { if (p) CUDA_CHECK(cudaFreeHost(p)); }
static void cu_copy_h2d(Backend *b, void *dst, const void *src, size_t n, BackendStream *s) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, cuda_stream(s)));
}
static void cu_copy_d2h(Backend *b, void *dst, const void *src, size_t n, BackendStream *s) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, cuda_stream(s)));
}
static void cu_copy_d2d(Backend *b, void *dst, const void *src, size_t n, BackendStream *s) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, cuda_stream(s)));
}
static void cu_memset(Backend *b, void *p, int value, size_t n, BackendStream *s) {
    CUDA_CHECK(cudaMemsetAsync(p, value, n, cuda_stream(s)));
}
// memory MPI cannot read: cudaMalloc'd (managed and pinned host memory it can)
static int cu_is_device_memory(Backend *b, const void *p) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();  // a plain host pointer on old runtimes: not an error to keep
        return 0;
    }
    return a.type == cudaMemoryTypeDevice;
}
static size_t cu_reserved_bytes(Backend *b) {
    CudaCtx *ctx = cuda_ctx(b);
    // + the embedding backward's sort buffers and cuDNN attention's plans: allocated by
    // cu_prepare_op before the run, or else at each shape's first call
    return ctx->scratch_bytes + ctx->lt_workspace_bytes + ctx->token_sort_bytes + cuda_attention_cudnn_reserved_bytes();
}

static int cu_set_attention(Backend *b, const char *name, char *said, size_t n) {
    return cuda_attention_set(name, said, n);
}
static int cu_prepare_op(Backend *b, const BackendOpShape *s, char *why, size_t n) {
    if (s->op == OP_EMBEDDING) cuda_embedding_prepare(b, s->B * s->T);
    if (s->op == OP_ATTENTION) return cuda_attention_prepare(s->B, s->T, s->NH, s->NKV, s->HS, why, n);
    return 0;
}

static BackendStream *cu_stream_create(Backend *b) {
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    return (BackendStream *)st;
}
static void cu_stream_destroy(Backend *b, BackendStream *s) { if (s) CUDA_CHECK(cudaStreamDestroy(cuda_stream(s))); }
static void cu_stream_synchronize(Backend *b, BackendStream *s) { CUDA_CHECK(cudaStreamSynchronize(cuda_stream(s))); }
static BackendEvent *cu_event_create(Backend *b) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreate(&e));
    return (BackendEvent *)e;
}
static void cu_event_destroy(Backend *b, BackendEvent *e) { if (e) CUDA_CHECK(cudaEventDestroy((cudaEvent_t)e)); }
static void cu_event_record(Backend *b, BackendEvent *e, BackendStream *s) {
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)e, cuda_stream(s)));
}
static void cu_stream_wait_event(Backend *b, BackendStream *s, BackendEvent *e) {
    CUDA_CHECK(cudaStreamWaitEvent(cuda_stream(s), (cudaEvent_t)e, 0));
}
static void cu_event_synchronize(Backend *b, BackendEvent *e) { CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)e)); }
static int cu_event_query(Backend *b, BackendEvent *e) {
    cudaError_t rc = cudaEventQuery((cudaEvent_t)e);
    if (rc == cudaErrorNotReady) {
        (void)cudaGetLastError();  // "not ready" is an answer, not an error to keep
        return 0;
    }
    CUDA_CHECK(rc);
    return 1;
}
static void *cu_native_stream(Backend *b, BackendStream *s) { return (void *)cuda_stream(s); }
static int cu_device_free_bytes(Backend *b, size_t *free) {
    size_t total = 0;
    if (cudaMemGetInfo(free, &total) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return 0;
}
static float cu_event_elapsed_ms(Backend *b, BackendEvent *start, BackendEvent *end) {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)start, (cudaEvent_t)end));
    return ms;
}
static void cu_synchronize(Backend *b) { CUDA_CHECK(cudaDeviceSynchronize()); }
// Every op where it is defined; attention at the head sizes its kernels are
// built for only (64 and 128: attention.cu).
static int cu_supports_op(Backend *b, const BackendOpShape *shape) {
    if (!backend_op_defined(shape)) return 0;
    return shape->op != OP_ATTENTION || shape->HS == 0 || cuda_attention_head_size_supported(shape->HS);
}

static void cu_destroy(Backend *b) {
    if (!b) return;
    CudaCtx *ctx = cuda_ctx(b);
    if (ctx) {
        cudaDeviceSynchronize();
        cuda_matmul_destroy(b);
        if (ctx->scratch) cudaFree(ctx->scratch);
        if (ctx->lt_workspace) cudaFree(ctx->lt_workspace);
        if (ctx->token_sort) cudaFree(ctx->token_sort);
        free(ctx);
    }
    free(b);
}

extern "C" Backend *backend_cuda_create(MistDtype dtype, int device, char *err, size_t errlen) {
    if (dtype != MIST_BF16) {
        snprintf(err, errlen, "cuda backend: storage dtype %s is not supported (allowed: bf16; "
                 "hint: use the cpu backend for f32)", mist_dtype_name(dtype));
        return NULL;
    }
    CudaProbe probe;
    mist_cuda_probe(&probe);
    if (probe.count == 0) {
        snprintf(err, errlen, "cuda backend: no usable GPU: %s", probe.reason);
        return NULL;
    }
    if (device < 0 || device >= probe.count) {
        snprintf(err, errlen, "cuda backend: device %d does not exist (allowed: 0..%d)", device, probe.count - 1);
        return NULL;
    }
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "cuda backend: cudaSetDevice(%d) failed: %s", device, cudaGetErrorString(e));
        cudaGetLastError();
        return NULL;
    }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess || prop.major < 8) {
        snprintf(err, errlen, "cuda backend: device %d has compute capability %d.%d; bf16 tensor cores need >= 8.0",
                 device, prop.major, prop.minor);
        cudaGetLastError();
        return NULL;
    }
    Backend *b = (Backend *)calloc(1, sizeof *b);
    CudaCtx *ctx = (CudaCtx *)calloc(1, sizeof *ctx);
    if (!b || !ctx) {
        free(b);
        free(ctx);
        snprintf(err, errlen, "cuda backend: out of host memory");
        return NULL;
    }
    b->ctx = ctx;
    ctx->sm_count = prop.multiProcessorCount;
    if (cudaMalloc(&ctx->scratch, SCRATCH_BYTES) != cudaSuccess ||
        cudaMalloc(&ctx->lt_workspace, LT_WORKSPACE_BYTES) != cudaSuccess) {
        cudaGetLastError();
        snprintf(err, errlen, "cuda backend: cannot allocate %d MiB of scratch on device %d",
                 (SCRATCH_BYTES + LT_WORKSPACE_BYTES) >> 20, device);
        cu_destroy(b);
        return NULL;
    }
    ctx->scratch_bytes = SCRATCH_BYTES;
    ctx->lt_workspace_bytes = LT_WORKSPACE_BYTES;
    if (cuda_matmul_init(b, err, errlen) != 0) {
        cu_destroy(b);
        return NULL;
    }
    b->name = "cuda";
    b->dtype = dtype;
    b->device = device;
    b->device_memory_is_host = 0;
    b->alloc_device = cu_alloc_device;
    b->free_device = cu_free_device;
    b->alloc_pinned = cu_alloc_pinned;
    b->free_pinned = cu_free_pinned;
    b->copy_h2d = cu_copy_h2d;
    b->copy_d2h = cu_copy_d2h;
    b->copy_d2d = cu_copy_d2d;
    b->memset_device = cu_memset;
    b->reserved_bytes = cu_reserved_bytes;
    b->is_device_memory = cu_is_device_memory;
    b->stream_create = cu_stream_create;
    b->stream_destroy = cu_stream_destroy;
    b->stream_synchronize = cu_stream_synchronize;
    b->event_create = cu_event_create;
    b->event_destroy = cu_event_destroy;
    b->event_record = cu_event_record;
    b->stream_wait_event = cu_stream_wait_event;
    b->event_synchronize = cu_event_synchronize;
    b->event_query = cu_event_query;
    b->native_stream = cu_native_stream;
    b->device_free_bytes = cu_device_free_bytes;
    b->event_elapsed_ms = cu_event_elapsed_ms;
    b->synchronize = cu_synchronize;
    b->supports_op = cu_supports_op;
    b->destroy = cu_destroy;
    b->set_attention = cu_set_attention;
    b->prepare_op = cu_prepare_op;
    b->embedding_forward = cuda_embedding_forward;
    b->embedding_backward = cuda_embedding_backward;
    b->norm_forward = cuda_norm_forward;
    b->norm_backward = cuda_norm_backward;
    b->matmul_forward = cuda_matmul_forward;
    b->matmul_backward = cuda_matmul_backward;
    b->matmul_dinp_gelu = cuda_matmul_dinp_gelu;
    b->matmul_forward_ld = cuda_matmul_forward_ld;
    b->matmul_backward_ld = cuda_matmul_backward_ld;
    b->attention_forward = cuda_attention_forward;
    b->attention_backward = cuda_attention_backward;
    b->rotary_forward = cuda_rotary_forward;
    b->rotary_backward = cuda_rotary_backward;
    b->gelu_forward = cuda_gelu_forward;
    b->gelu_backward = cuda_gelu_backward;
    b->gelu_forward_mask = cuda_gelu_forward_mask;
    b->gelu_backward_from_output = cuda_gelu_backward_from_output;
    b->norm_backward_from_output = cuda_norm_backward_from_output;
    b->swiglu_forward = cuda_swiglu_forward;
    b->swiglu_backward = cuda_swiglu_backward;
    b->residual_forward = cuda_residual_forward;
    b->crossentropy_forward_backward = cuda_crossentropy_forward_backward;
    b->embedding_forward_range = cuda_embedding_forward_range;
    b->embedding_backward_range = cuda_embedding_backward_range;
    b->crossentropy_vocab_max = cuda_crossentropy_vocab_max;
    b->crossentropy_vocab_stats = cuda_crossentropy_vocab_stats;
    b->crossentropy_vocab_finish = cuda_crossentropy_vocab_finish;
    b->adamw_update = cuda_adamw_update;
    b->norm_squared_accumulate = cuda_norm_squared_accumulate;
    b->cast = cuda_cast;
    b->scale = cuda_scale;
    return b;
}
