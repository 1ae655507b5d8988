// The CPU backend: host memory stands in for device and pinned memory, every
// stream runs its work synchronously in call order (so an op has finished
// when it returns), and events are wall-clock timestamps. The ops live in one
// file per family (embedding.c, norm.c, ...), declared in cpu_ops.h.
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L  // clock_gettime
#endif
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"

enum { CPU_ALIGN = 64 };  // a cache line, and enough for any SIMD load
enum { WIDEN_MIN_PARALLEL = 65536 };  // below this, threads cost more than they save

struct BackendStream { int unused; };       // work is done when the call returns
struct BackendEvent { double ms; int recorded; };  // wall time at record

// The backend's context: the grow-only workspace (cpu_ops.h says why).
#define CPU_DEVICE_BLOCKS 64  // alloc_device blocks remembered (arenas: a few per run)

typedef struct {
    void *slot[CPU_WS_SLOTS];         // 64-byte aligned, NULL until first used
    size_t slot_bytes[CPU_WS_SLOTS];  // capacity of each slot
    // the "device" memory: host memory here, but told apart from pinned memory so
    // that code which must treat device memory differently runs its path on the CPU too
    const char *device_block[CPU_DEVICE_BLOCKS];
    size_t device_block_bytes[CPU_DEVICE_BLOCKS];
} CpuContext;

static size_t round_up_align(size_t bytes) { return (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN; }

void *cpu_scratch(Backend *b, CpuWorkspaceSlot slot, size_t bytes) {
    CpuContext *ctx = b->ctx;
    if (slot < 0 || slot >= CPU_WS_SLOTS) {
        fprintf(stderr, "mist cpu backend: workspace slot %d does not exist (allowed: 0..%d)\n", (int)slot,
                CPU_WS_SLOTS - 1);
        abort();
    }
    size_t rounded = round_up_align(bytes ? bytes : 1);
    if (rounded > ctx->slot_bytes[slot]) {
        // grow only: the old contents are not needed (each request starts a new buffer)
        free(ctx->slot[slot]);
        ctx->slot[slot] = aligned_alloc(CPU_ALIGN, rounded);
        if (!ctx->slot[slot]) {
            fprintf(stderr, "mist cpu backend: out of host memory growing workspace slot %d to %zu bytes\n"
                            "  hint: reduce the micro-batch size or sequence length\n", (int)slot, rounded);
            abort();
        }
        ctx->slot_bytes[slot] = rounded;
    }
    return ctx->slot[slot];
}

void *cpu_scratch_per_thread(Backend *b, CpuWorkspaceSlot slot, size_t per_thread, size_t *stride) {
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();  // an OpenMP team opened after this has at most this many
#endif
    *stride = round_up_align(per_thread ? per_thread : 1);
    return cpu_scratch(b, slot, (size_t)threads * *stride);
}

void *cpu_thread_part(void *base, size_t stride) {
    int thread = 0;
#ifdef _OPENMP
    thread = omp_get_thread_num();
#endif
    return (char *)base + (size_t)thread * stride;
}

void cpu_to_f32(float *dst, const void *src, MistDtype t, size_t n) {
    if (t == MIST_F32) { memcpy(dst, src, n * sizeof(float)); return; }
    CPU_PRAGMA(omp parallel for schedule(static) if (n > WIDEN_MIN_PARALLEL))
    for (size_t i = 0; i < n; i++) dst[i] = cpu_ld(src, t, i);
}

void cpu_from_f32(void *dst, MistDtype t, const float *src, size_t n) {
    if (t == MIST_F32) { memcpy(dst, src, n * sizeof(float)); return; }
    CPU_PRAGMA(omp parallel for schedule(static) if (n > WIDEN_MIN_PARALLEL))
    for (size_t i = 0; i < n; i++) cpu_st(dst, t, i, src[i]);
}

float *cpu_as_f32(Backend *b, CpuWorkspaceSlot slot, const void *p, MistDtype t, size_t n) {
    if (t == MIST_F32) return (float *)p;
    float *copy = cpu_scratch(b, slot, n * sizeof(float));
    cpu_to_f32(copy, p, t, n);
    return copy;
}

// ---- memory ----
static void *cpu_alloc(Backend *b, size_t bytes) {
    size_t rounded = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    return aligned_alloc(CPU_ALIGN, rounded ? rounded : CPU_ALIGN);
}
static void cpu_free(Backend *b, void *p) { free(p); }
static void *cpu_alloc_device(Backend *b, size_t bytes) {
    CpuContext *ctx = b->ctx;
    void *p = cpu_alloc(b, bytes);
    for (int i = 0; p && i < CPU_DEVICE_BLOCKS; i++)
        if (!ctx->device_block[i]) {
            ctx->device_block[i] = p, ctx->device_block_bytes[i] = bytes;
            break;
        }
    return p;
}
static void cpu_free_device(Backend *b, void *p) {
    CpuContext *ctx = b->ctx;
    for (int i = 0; p && i < CPU_DEVICE_BLOCKS; i++)
        if (ctx->device_block[i] == p) ctx->device_block[i] = NULL;
    free(p);
}
// (a block beyond the 64 remembered reads as host memory, which on the CPU it is)
static int cpu_is_device_memory(Backend *b, const void *p) {
    const CpuContext *ctx = b->ctx;
    const char *c = p;
    for (int i = 0; i < CPU_DEVICE_BLOCKS; i++)
        if (ctx->device_block[i] && c >= ctx->device_block[i] && c < ctx->device_block[i] + ctx->device_block_bytes[i])
            return 1;
    return 0;
}
static void cpu_copy(Backend *b, void *dst, const void *src, size_t bytes, BackendStream *s) {
    if (bytes) memmove(dst, src, bytes);
}
static void cpu_memset(Backend *b, void *p, int value, size_t bytes, BackendStream *s) {
    if (bytes) memset(p, value, bytes);
}
// the workspace is the only host memory the backend holds outside the arenas
static size_t cpu_reserved_bytes(Backend *b) {
    const CpuContext *ctx = b->ctx;
    size_t total = 0;
    for (int i = 0; i < CPU_WS_SLOTS; i++) total += ctx->slot_bytes[i];
    return total;
}

// ---- ordering: nothing is ever pending ----
static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
static BackendStream *cpu_stream_create(Backend *b) { return calloc(1, sizeof(BackendStream)); }
static void cpu_stream_destroy(Backend *b, BackendStream *s) { free(s); }
static void cpu_stream_synchronize(Backend *b, BackendStream *s) {}
static BackendEvent *cpu_event_create(Backend *b) { return calloc(1, sizeof(BackendEvent)); }
static void cpu_event_destroy(Backend *b, BackendEvent *e) { free(e); }
static void cpu_event_record(Backend *b, BackendEvent *e, BackendStream *s) {
    e->ms = now_ms();
    e->recorded = 1;
}
static void cpu_stream_wait_event(Backend *b, BackendStream *s, BackendEvent *e) {}
static void cpu_event_synchronize(Backend *b, BackendEvent *e) {}
static int cpu_event_query(Backend *b, BackendEvent *e) { return 1; }
static int cpu_device_free_bytes(Backend *b, size_t *free) { return -1; }  // host memory: not a device's
static void *cpu_native_stream(Backend *b, BackendStream *s) { return NULL; }
// milliseconds between two recorded events; 0 if either was never recorded
static float cpu_event_elapsed_ms(Backend *b, BackendEvent *start, BackendEvent *end) {
    if (!start->recorded || !end->recorded) return 0.0f;
    return (float)(end->ms - start->ms);
}
static void cpu_synchronize(Backend *b) {}
// every op, at every shape where it is defined (the kernels have no size limits)
static int cpu_supports_op(Backend *b, const BackendOpShape *shape) { return backend_op_defined(shape); }
static void cpu_destroy(Backend *b) {
    CpuContext *ctx = b->ctx;
    for (int i = 0; i < CPU_WS_SLOTS; i++) free(ctx->slot[i]);
    free(ctx);
    free(b);
}

Backend *backend_cpu_create(MistDtype dtype, char *err, size_t errlen) {
    if (dtype != MIST_F32 && dtype != MIST_BF16) {
        if (err)
            snprintf(err, errlen, "cpu backend: storage dtype %s is not supported (allowed: f32, bf16)",
                     mist_dtype_name(dtype));
        return NULL;
    }
    Backend *b = calloc(1, sizeof(Backend));
    CpuContext *ctx = calloc(1, sizeof(CpuContext));  // empty workspace: grows on first use
    if (!b || !ctx) {
        free(b);
        free(ctx);
        if (err) snprintf(err, errlen, "cpu backend: out of host memory");
        return NULL;
    }
    b->name = "cpu";
    b->dtype = dtype;
    b->device = 0;
    b->ctx = ctx;
    b->device_memory_is_host = 1;
    b->alloc_device = cpu_alloc_device;
    b->free_device = cpu_free_device;
    b->is_device_memory = cpu_is_device_memory;
    b->alloc_pinned = cpu_alloc;
    b->free_pinned = cpu_free;
    b->copy_h2d = cpu_copy;
    b->copy_d2h = cpu_copy;
    b->copy_d2d = cpu_copy;
    b->memset_device = cpu_memset;
    b->reserved_bytes = cpu_reserved_bytes;
    b->stream_create = cpu_stream_create;
    b->stream_destroy = cpu_stream_destroy;
    b->stream_synchronize = cpu_stream_synchronize;
    b->event_create = cpu_event_create;
    b->event_destroy = cpu_event_destroy;
    b->event_record = cpu_event_record;
    b->stream_wait_event = cpu_stream_wait_event;
    b->event_synchronize = cpu_event_synchronize;
    b->event_query = cpu_event_query;
    b->device_free_bytes = cpu_device_free_bytes;
    b->native_stream = cpu_native_stream;
    b->event_elapsed_ms = cpu_event_elapsed_ms;
    b->synchronize = cpu_synchronize;
    b->supports_op = cpu_supports_op;
    b->destroy = cpu_destroy;

    b->embedding_forward = cpu_embedding_forward;
    b->embedding_backward = cpu_embedding_backward;
    b->norm_forward = cpu_norm_forward;
    b->norm_backward = cpu_norm_backward;
    b->matmul_forward = cpu_matmul_forward;
    b->matmul_backward = cpu_matmul_backward;
    b->matmul_dinp_gelu = cpu_matmul_dinp_gelu;
    b->matmul_forward_ld = cpu_matmul_forward_ld;
    b->matmul_backward_ld = cpu_matmul_backward_ld;
    b->attention_forward = cpu_attention_forward;
    b->attention_backward = cpu_attention_backward;
    b->rotary_forward = cpu_rotary_forward;
    b->rotary_backward = cpu_rotary_backward;
    b->gelu_forward = cpu_gelu_forward;
    b->gelu_backward = cpu_gelu_backward;
    b->gelu_forward_mask = cpu_gelu_forward_mask;
    b->gelu_backward_from_output = cpu_gelu_backward_from_output;
    b->norm_backward_from_output = cpu_norm_backward_from_output;
    b->swiglu_forward = cpu_swiglu_forward;
    b->swiglu_backward = cpu_swiglu_backward;
    b->residual_forward = cpu_residual_forward;
    b->crossentropy_forward_backward = cpu_crossentropy_forward_backward;
    b->embedding_forward_range = cpu_embedding_forward_range;
    b->embedding_backward_range = cpu_embedding_backward_range;
    b->crossentropy_vocab_max = cpu_crossentropy_vocab_max;
    b->crossentropy_vocab_stats = cpu_crossentropy_vocab_stats;
    b->crossentropy_vocab_finish = cpu_crossentropy_vocab_finish;
    b->adamw_update = cpu_adamw_update;
    b->norm_squared_accumulate = cpu_norm_squared_accumulate;
    b->cast = cpu_cast;
    b->scale = cpu_scale;
    return b;
}
