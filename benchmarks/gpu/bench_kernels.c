// Times every heavy op of the CUDA backend with CUDA events after warm-up and
// prints, per op and shape, the time and the achieved TFLOP/s (GEMMs,
// attention) or GB/s (memory-bound ops) against the H100 SXM peaks
// (bf16 dense 989 TFLOP/s, HBM3 3.35 TB/s).
//   bench_kernels [--json PATH] [--quick] [--only attention,matmul,memory]
// --only: those groups of ops (default: all). Attention at the shape
// (B=4, T=2048, 16 heads, HS=128) comes first for every variant, before the
// GEMMs and the other shapes, so that a run cut short still has those rows.
// FLOP counts: GEMM 2 N C OC; causal attention forward 2 x 2 B NH T^2 HS / 2
// (two products, half the matrix), backward 2.5 x forward (the usual count of
// five products; this backend recomputes the scores twice, which is not
// counted). Bytes: each tensor read or written once.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/backend.h"

int cuda_attention_wgmma_available(void);  // kernels/cuda/attention_wgmma.cu
void cuda_attention_wgmma_forward_overlap(int on);
long cuda_matmul_epilogue_fallbacks(void);  // kernels/cuda/matmul.cu
#include "kernels/cuda/attention_cudnn.h"

#define PEAK_TFLOPS 989.0
#define PEAK_GBS 3350.0

static Backend *gpu;
static FILE *json;
static int json_first = 1, quick;


static void *dev_random(size_t bytes) {
    void *p = gpu->alloc_device(gpu, bytes);
    if (!p) { fprintf(stderr, "bench: out of device memory (%zu bytes)\n", bytes); exit(1); }
    // a fixed bit pattern of small bf16 values (0x3c00..: ~0.0078..) keeps softmax and GEMMs finite
    uint16_t *h = malloc(bytes);
    for (size_t i = 0; i < bytes / 2; i++) h[i] = (uint16_t)(0x3c00 + (i * 2654435761u >> 20) % 0x300) ^ (i & 1 ? 0x8000 : 0);
    gpu->copy_h2d(gpu, p, h, bytes / 2 * 2, NULL);
    gpu->synchronize(gpu);
    free(h);
    return p;
}

static void report(const char *op, const char *shape, double ms, double flops, double bytes) {
    double tflops = flops / (ms * 1e-3) / 1e12, gbs = bytes / (ms * 1e-3) / 1e9;
    if (flops > 0)
        printf("%-28s %-34s %9.3f ms %9.1f TFLOP/s %6.1f%% of peak\n", op, shape, ms, tflops, 100.0 * tflops / PEAK_TFLOPS);
    else
        printf("%-28s %-34s %9.3f ms %9.1f GB/s    %6.1f%% of peak\n", op, shape, ms, gbs, 100.0 * gbs / PEAK_GBS);
    fflush(stdout);
    if (json) {
        fprintf(json, "%s\n  {\"op\": \"%s\", \"shape\": \"%s\", \"ms\": %.5f, \"tflops\": %.2f, \"gbs\": %.1f}",
                json_first ? "" : ",", op, shape, ms, flops > 0 ? tflops : 0.0, flops > 0 ? 0.0 : gbs);
        json_first = 0;
    }
}

typedef void (*RunFn)(void *arg);
static double time_ms(RunFn fn, void *arg) {
    int warm = 3, iters = quick ? 5 : 20;
    for (int i = 0; i < warm; i++) fn(arg);
    BackendEvent *e0 = gpu->event_create(gpu), *e1 = gpu->event_create(gpu);
    gpu->event_record(gpu, e0, NULL);
    for (int i = 0; i < iters; i++) fn(arg);
    gpu->event_record(gpu, e1, NULL);
    gpu->event_synchronize(gpu, e1);
    double ms = gpu->event_elapsed_ms(gpu, e0, e1) / iters;
    gpu->event_destroy(gpu, e0);
    gpu->event_destroy(gpu, e1);
    return ms;
}

// ---- GEMMs
typedef struct { int N, C, OC, gelu, which; void *inp, *w, *bias, *out, *pre, *dout, *dinp, *dw; } MM;
static void run_mm(void *p) {
    MM *m = p;
    int ld = (m->OC + 7) / 8 * 8;  // the LM head's logits stride (which 3..5)
    if (m->which == 3) gpu->matmul_forward_ld(gpu, NULL, m->out, m->inp, m->w, m->N, m->C, m->OC, ld);
    else if (m->which == 4) gpu->matmul_backward_ld(gpu, NULL, m->dinp, NULL, m->dout, m->inp, m->w, m->N, m->C, m->OC, ld);
    else if (m->which == 5) gpu->matmul_backward_ld(gpu, NULL, NULL, m->dw, m->dout, m->inp, m->w, m->N, m->C, m->OC, ld);
    else if (m->which == 6) gpu->matmul_dinp_gelu(gpu, NULL, m->dinp, m->dout, m->w, m->pre, m->N, m->C, m->OC);
    else if (m->which == 7) {  // the same in two ops: the product, then the GELU's backward over N C elements
        gpu->matmul_backward(gpu, NULL, m->dinp, NULL, NULL, m->dout, m->inp, m->w, NULL, m->N, m->C, m->OC);
        gpu->gelu_backward(gpu, NULL, m->dinp, m->pre, m->dinp, (size_t)m->N * m->C);
    } else if (m->which == 8) gpu->matmul_backward(gpu, NULL, NULL, NULL, m->bias, m->dout, m->inp, m->w, NULL, m->N, m->C, m->OC);
    else if (m->which == 0) gpu->matmul_forward(gpu, NULL, m->out, m->gelu ? m->pre : NULL, m->inp, m->w, m->bias, m->N, m->C, m->OC);
    else if (m->which == 1) gpu->matmul_backward(gpu, NULL, m->dinp, NULL, NULL, m->dout, m->inp, m->w, NULL, m->N, m->C, m->OC);
    else gpu->matmul_backward(gpu, NULL, NULL, m->dw, NULL, m->dout, m->inp, m->w, NULL, m->N, m->C, m->OC);
}
// lm_head: the strided LM-head products (matmul_*_ld) instead
static void bench_matmul(int N, int C, int OC, int gelu, int lm_head) {
    MM m = {N, C, OC, gelu, lm_head ? 3 : 0, dev_random((size_t)N * C * 2), dev_random((size_t)OC * C * 2), dev_random((size_t)OC * 2),
            dev_random((size_t)N * (OC + 7) * 2), dev_random((size_t)N * OC * 2), dev_random((size_t)N * (OC + 7) * 2),
            dev_random((size_t)N * C * 2), dev_random((size_t)OC * C * 2)};
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d C=%d OC=%d", N, C, OC);
    double fl = 2.0 * N * C * OC;
    long fb = cuda_matmul_epilogue_fallbacks();
    double ms = time_ms(run_mm, &m);
    const char *fwd = gelu && cuda_matmul_epilogue_fallbacks() > fb ? "matmul_fwd+bias, gelu apart"  // no GELU_AUX algorithm
                      : gelu                                          ? "matmul_fwd+bias+gelu"
                                                                      : "matmul_fwd+bias";
    report(lm_head ? "lm_head fwd (strided)" : fwd, shape, ms, fl, 0);
    m.which = lm_head ? 4 : 1;
    report("matmul_bwd dinp", shape, time_ms(run_mm, &m), fl, 0);
    m.which = lm_head ? 5 : 2;
    report("matmul_bwd dweight", shape, time_ms(run_mm, &m), fl, 0);
    void *all[] = {m.inp, m.w, m.bias, m.out, m.pre, m.dout, m.dinp, m.dw};
    for (int i = 0; i < 8; i++) gpu->free_device(gpu, all[i]);
}

// The MLP projection's input gradient through the GELU (pre: N x C), fused
// and in two ops; then the bias gradient alone (a column sum of dout).
static void bench_mlp_backward(int N, int C, int OC) {
    MM m = {N, C, OC, 0, 6, dev_random((size_t)N * C * 2), dev_random((size_t)OC * C * 2), dev_random((size_t)OC * 2),
            NULL, dev_random((size_t)N * C * 2), dev_random((size_t)N * OC * 2), dev_random((size_t)N * C * 2), NULL};
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d C=%d OC=%d", N, C, OC);
    double fl = 2.0 * N * C * OC;
    long fb = cuda_matmul_epilogue_fallbacks();
    double ms = time_ms(run_mm, &m);
    // without a DGELU algorithm for the shape the "fused" op runs the two ops below
    report(cuda_matmul_epilogue_fallbacks() > fb ? "matmul_dinp_gelu (NOT fused)" : "matmul_dinp_gelu (fused)", shape,
           ms, fl, 0);
    m.which = 7;
    report("matmul_bwd dinp + gelu_bwd", shape, time_ms(run_mm, &m), fl, 0);
    m.which = 8;
    report("bias gradient (column sum)", shape, time_ms(run_mm, &m), 0, (double)N * OC * 2);
    void *all[] = {m.inp, m.w, m.bias, m.pre, m.dout, m.dinp};
    for (int i = 0; i < 6; i++) gpu->free_device(gpu, all[i]);
}

// ---- attention
typedef struct { int B, T, NH, NKV, HS, bwd; void *qkv, *out, *lse, *dout, *dqkv; } ATT;
static void run_att(void *p) {
    ATT *a = p;
    if (!a->bwd) gpu->attention_forward(gpu, NULL, a->out, a->lse, a->qkv, a->B, a->T, a->NH, a->NKV, a->HS);
    else gpu->attention_backward(gpu, NULL, a->dqkv, a->dout, a->qkv, a->out, a->lse, a->B, a->T, a->NH, a->NKV, a->HS);
}
// variant: 0 the default kernels, 1 MIST_CUDA_ATTENTION=wide (attention_fwd_wide /
// attention_bwd_wide), 2 MIST_CUDA_ATTENTION=wgmma (attention_fwd_wgmma / attention_bwd_wgmma,
// and attention_fwd_wgmma_plain: the forward without overlapping scores and P V), 3
// MIST_CUDA_ATTENTION=cudnn (attention_fwd_cudnn / attention_bwd_cudnn: cuDNN's SDPA
// graphs; not timed, with the reason, where cuDNN is missing or refuses the shape)
static void bench_attention(int B, int T, int NH, int NKV, int HS, int variant) {
    static const char *const names[4][2] = {{"attention_fwd", "attention_bwd"},
                                            {"attention_fwd_wide", "attention_bwd_wide"},
                                            {"attention_fwd_wgmma", "attention_bwd_wgmma"},
                                            {"attention_fwd_cudnn", "attention_bwd_cudnn"}};
    static const char *const env[4] = {NULL, "wide", "wgmma", "cudnn"};
    char why[1100];
    if (variant == 3 && cuda_attention_cudnn_ready(B, T, NH, NKV, HS, why, sizeof why) != 1) {
        printf("(attention_fwd_cudnn / attention_bwd_cudnn B=%d T=%d NH=%d NKV=%d HS=%d not timed: %s)\n", B, T, NH,
               NKV, HS, why);
        return;
    }
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * HS, nout = (size_t)B * T * NH * HS;
    ATT a = {B, T, NH, NKV, HS, 0, dev_random(nqkv * 2), dev_random(nout * 2), dev_random((size_t)B * NH * T * 4),
             dev_random(nout * 2), dev_random(nqkv * 2)};
    char shape[64];
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d NKV=%d HS=%d", B, T, NH, NKV, HS);
    double fl = 4.0 * B * NH * (double)T * T * HS / 2.0;
    if (env[variant]) setenv("MIST_CUDA_ATTENTION", env[variant], 1);
    report(names[variant][0], shape, time_ms(run_att, &a), fl, 0);
    run_att(&a);  // a real lse for the backward
    a.bwd = 1;
    report(names[variant][1], shape, time_ms(run_att, &a), 2.5 * fl, 0);
    if (variant == 2) {  // the wgmma forward without the overlap of scores and P V
        a.bwd = 0;
        cuda_attention_wgmma_forward_overlap(0);
        report("attention_fwd_wgmma_plain", shape, time_ms(run_att, &a), fl, 0);
        cuda_attention_wgmma_forward_overlap(1);
    }
    unsetenv("MIST_CUDA_ATTENTION");
    void *all[] = {a.qkv, a.out, a.lse, a.dout, a.dqkv};
    for (int i = 0; i < 5; i++) gpu->free_device(gpu, all[i]);
}

// ---- memory-bound ops
typedef struct { int op; int64_t N, C; void *x, *y, *z, *w; float *f1, *f2, *f3; } MB;
static void run_mb(void *p) {
    MB *m = p;
    switch (m->op) {
    // x holds 2 N C elements: [inp | res_in]; w holds [weight | bias]
    case 0: gpu->norm_forward(gpu, NULL, NORM_OP_LAYERNORM, m->z, m->y, m->f1, m->f2, m->x, (uint16_t *)m->x + m->N * m->C,
                              m->w, (uint16_t *)m->w + m->C, m->N, m->C, 1e-5f); break;
    case 1: gpu->norm_backward(gpu, NULL, NORM_OP_LAYERNORM, m->z, m->w, (uint16_t *)m->w + m->C, m->x, m->y, m->w,
                               m->f1, m->f2, m->N, m->C); break;
    case 2: gpu->gelu_forward(gpu, NULL, m->y, m->x, m->N * m->C); break;
    case 3: gpu->swiglu_forward(gpu, NULL, m->y, m->x, m->N, m->C); break;
    case 4: gpu->crossentropy_forward_backward(gpu, NULL, m->f1, m->x, (const int32_t *)m->w, m->N, m->C - 47, m->C, 1.0f / m->N); break;
    case 5: gpu->adamw_update(gpu, NULL, m->x, m->f1, m->y, m->f2, m->f3, m->N, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1); break;
    case 6: gpu->norm_squared_accumulate(gpu, NULL, m->f1, m->x, m->N); break;
    case 7: gpu->rotary_forward(gpu, NULL, m->x, 1, m->N, 32, 8, 128, 10000.0f); break;
    }
}
static void bench_memory(int op, const char *name, int64_t N, int64_t C, double bytes) {
    size_t n = (size_t)N * C;
    MB m = {op, N, C, dev_random(n * 2 * 2), dev_random(n * 2 * 2), dev_random(n * 2), dev_random((size_t)C * 2 * 2 + (size_t)N * 4),
            dev_random(n * 4), dev_random(n * 4), dev_random(n * 4)};
    if (op == 4) {  // valid targets
        int32_t *t = malloc(N * 4);
        for (int64_t i = 0; i < N; i++) t[i] = (int32_t)(i * 7919 % (C - 47));
        gpu->copy_h2d(gpu, m.w, t, N * 4, NULL);
        free(t);
    }
    if (op == 1)  // real statistics of y for the backward
        gpu->norm_forward(gpu, NULL, NORM_OP_LAYERNORM, NULL, m.z, m.f1, m.f2, m.y, NULL, m.w, (uint16_t *)m.w + C, N, C, 1e-5f);
    char shape[64];
    snprintf(shape, sizeof shape, op >= 5 && op <= 6 ? "n=%lld" : "N=%lld C=%lld", (long long)(op >= 5 && op <= 6 ? (int64_t)n : N), (long long)C);
    if (op == 7) snprintf(shape, sizeof shape, "T=%lld NH=32 NKV=8 HS=128", (long long)N);
    report(name, shape, time_ms(run_mb, &m), 0, bytes);
    void *all[] = {m.x, m.y, m.z, m.w, m.f1, m.f2, m.f3};
    for (int i = 0; i < 7; i++) gpu->free_device(gpu, all[i]);
}

// 1 when `group` is one of --only's comma-separated names (or there is no --only)
static int wanted(const char *only, const char *group) {
    size_t n = strlen(group);
    for (const char *p = only; p && *p;) {
        size_t k = strcspn(p, ",");
        if (k == n && !strncmp(p, group, n)) return 1;
        p += k + (p[k] == ',');
    }
    return !only;
}

static void bench_matmuls(void) {
    bench_matmul(8192, 4096, 4096, 0, 0);
    bench_matmul(8192, 4096, 16384, 1, 0);
    bench_matmul(8192, 768, 3072, 1, 0);
    bench_mlp_backward(8192, 16384, 4096);  // GPT-3 6.7B-like MLP projection (dinp: N x 4h)
    bench_mlp_backward(16384, 3072, 768);   // GPT-2 124M at B 16, T 1024
    bench_matmul(16384, 768, 50257, 0, 1);  // GPT-2's odd vocabulary
    bench_matmul(16384, 2048, 50304, 0, 1);
}

static void bench_memories(void) {
    int64_t N = 8192, C = 4096;
    bench_memory(0, "layernorm_fwd+residual", N, C, 4.0 * N * C * 2);
    bench_memory(1, "layernorm_bwd", N, C, (4.0 * N * C + 2.0 * N * C) * 2);  // kernel + weight-grad pass
    bench_memory(2, "gelu_fwd", N, C * 4, 2.0 * N * C * 4 * 2);
    bench_memory(3, "swiglu_fwd", N, 11008, 3.0 * N * 11008 * 2);
    bench_memory(4, "crossentropy_fwd_bwd", 8192, 50304, 8192.0 * 50304 * 2 * 3);  // two reads, one write
    bench_memory(5, "adamw", 64 << 20, 1, (64 << 20) * 28.0);  // bf16 param+grad, f32 master, m, v: 2+2+3*(4+4)
    bench_memory(6, "norm_squared", 256 << 20, 1, (256 << 20) * 2.0);
    bench_memory(7, "rotary_fwd", 16384, 128 * 48, 16384.0 * 40 * 128 * 2 * 2);
}

int main(int argc, char **argv) {
    const char *json_path = NULL, *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else { fprintf(stderr, "usage: %s [--json PATH] [--quick] [--only attention,matmul,memory]\n", argv[0]); return 2; }
    }
    for (const char *p = only; p && *p;) {
        size_t k = strcspn(p, ",");
        if (!(k == 9 && !strncmp(p, "attention", 9)) && !(k == 6 && !strncmp(p, "matmul", 6)) &&
            !(k == 6 && !strncmp(p, "memory", 6))) {
            fprintf(stderr, "bench_kernels: --only '%s': '%.*s' is not a group (allowed: attention, matmul, memory, "
                            "comma-separated)\n", only, (int)k, p);
            return 2;
        }
        p += k + (p[k] == ',');
    }
    char err[256];
    gpu = backend_cuda_create(MIST_BF16, 0, err, sizeof err);
    if (!gpu) { printf("# SKIP no GPU: %s\n", err); return 0; }
    if (json_path && !(json = fopen(json_path, "w"))) { fprintf(stderr, "bench: cannot write %s\n", json_path); return 1; }
    if (json) setvbuf(json, NULL, _IONBF, 0);  // rows on disk as they come: a run cut short keeps them
    if (json) fprintf(json, "{\"peak_tflops\": %.0f, \"peak_gbs\": %.0f, \"results\": [", PEAK_TFLOPS, PEAK_GBS);
    printf("%-28s %-34s %12s %17s %s\n", "op", "shape", "time", "achieved", "vs peak");
    int att = wanted(only, "attention"), wgmma = cuda_attention_wgmma_available();
    if (att && !wgmma) printf("(attention_fwd_wgmma / attention_bwd_wgmma not timed: needs a Hopper GPU and a build for sm_90a)\n");
    for (int variant = 0; att && variant < 4; variant++)  // the shape, every variant
        if (variant != 2 || wgmma) bench_attention(4, 2048, 16, 16, 128, variant);
    if (wanted(only, "matmul")) bench_matmuls();
    for (int variant = 0; att && variant < 4; variant++) {
        if (variant == 2 && !wgmma) continue;
        bench_attention(8, 1024, 12, 12, 64, variant);
        bench_attention(2, 4096, 32, 8, 128, variant);
    }
    if (att && cuda_attention_cudnn_reserved_bytes())
        printf("(cuDNN attention plans: %.1f MiB of device memory: workspaces and fp32 dQ accumulators)\n",
               cuda_attention_cudnn_reserved_bytes() / 1048576.0);
    if (wanted(only, "memory")) bench_memories();
    if (json) { fprintf(json, "\n]}\n"); fclose(json); }
    gpu->destroy(gpu);
    return 0;
}
