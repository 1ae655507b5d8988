// End-to-end training on one GPU without MPI: the runtime's own model code
// (runtime/model_runtime.c) on the cuda backend.
//
// 1. Tracking: a small GPT, a small Llama and a small Falcon-style model (parallel
//    blocks, one kv head) train 30 steps on the cpu and the
//    cuda backend (both bf16 storage, same init, same tokens); the per-step
//    losses must agree within 0.05 (bf16 rounding of activations differs in
//    the order of operations), and the checkpointed run must give the same
//    losses as the plain one on the GPU (recompute is bit-exact).
// 2. Throughput: GPT-2 124M (s = 1024; B 16 and 64) and GPT-3 1.3B (s = 2048), one
//    micro-batch per step (fwd + bwd + grad norm + AdamW), synthetic tokens,
//    timed with CUDA events after warm-up. Reports tokens/s, MFU against the
//    profile's dense bf16 peak (Megatron model FLOPs, models/model_flops.h),
//    peak device memory: predicted (runtime memory plan), the arena's count and
//    the device's own (cudaMemGetInfo sampled after every step, runtime/device_peak.h), the
//    backend's reserved bytes after preparing the case's shapes (runtime/backend_prepare.h:
//    scratch, cuBLASLt workspace, sort buffers, cuDNN's plans), so that predicted + reserved
//    compares with the device's count + reserved (held before its baseline), and the
//    cost model's predicted iteration time (planner/analyze.h, dgx-h100), with
//    the roofline and with this GPU's op table (runtime/calibrate.h).
//
// usage: bench_train [--quick] [--json PATH] [--only MODEL] [--attention LIST]
//   --only gpt2-124m|gpt2-124m-b64|gpt3-1.3b: just that throughput case, no tracking (for
//   a profiler run)
//   --attention base,wide,wgmma: run tracking and throughput once per attention
//   variant (MIST_CUDA_ATTENTION; default: base); wgmma is skipped, saying why,
//   where the build or the GPU lacks it
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/backend.h"
#include "models/model.h"
#include "models/model_flops.h"
#include "planner/analyze.h"
#include "base/profile.h"
#include "runtime/calibrate.h"
#include "runtime/backend_prepare.h"
#include "runtime/device_peak.h"
#include "runtime/model_runtime.h"

int cuda_attention_wgmma_available(void);  // kernels/cuda/attention_wgmma.cu

static ModelConfig model(int family, int L, int h, int heads, int kv, int ffn, int V, int s) {
    ModelConfig m = model_family_config((ModelFamily)family, L, h, heads, V, s);
    m.kv_heads = kv, m.ffn_hidden = ffn;
    return m;
}

typedef struct {
    ModelRuntime r;
    int N;
    int32_t *in, *tg;
    float *losses;
    int64_t predicted_peak;
} Run;

static int setup(Run *u, Backend *be, const ModelConfig *m, int B, int ckpt) {
    char err[512];
    memset(u, 0, sizeof *u);
    if (mr_layout(&u->r, m, B, ckpt, 1, err, sizeof err) || mr_plan_memory(&u->r, be, err, sizeof err)) {
        fprintf(stderr, "bench_train: %s\n", err);
        return 1;
    }
    int64_t host;
    mr_memory_predict(&u->r, &u->predicted_peak, &host);
    mr_init_params(&u->r, 1234);
    ModelRuntime *r = &u->r;
    r->opt = (Optimizer){.backend = be, .stream = r->stream, .params = arena_ptr(&r->t_params),
                         .grads = arena_ptr(&r->t_grads), .master = r->t_master.bytes ? arena_ptr(&r->t_master) : NULL,
                         .m = arena_ptr(&r->t_m), .v = arena_ptr(&r->t_v), .norm_acc = arena_ptr(&r->t_norm_acc),
                         .num_params = r->P, .tensors = r->opt_tensors, .num_tensors = r->num_tensors,
                         .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    u->N = B * m->seq_len;
    u->in = malloc((size_t)u->N * 4), u->tg = malloc((size_t)u->N * 4), u->losses = malloc((size_t)u->N * 4);
    return !u->in || !u->tg || !u->losses;
}

// one optimizer step on tokens derived from `step`; returns the mean loss
static double step(Run *u, Backend *be, int step_index, int V, float lr) {
    ModelRuntime *r = &u->r;
    for (int i = 0; i < u->N; i++) {
        uint32_t k = (uint32_t)(i + step_index * 7919) * 2654435761u;
        u->in[i] = (int32_t)((k >> 8) % (uint32_t)V);
        u->tg[i] = (int32_t)(((k >> 8) + 1) % (uint32_t)V);
    }
    be->copy_h2d(be, arena_ptr(&r->t_inputs), u->in, (size_t)u->N * 4, r->stream);
    be->copy_h2d(be, arena_ptr(&r->t_targets), u->tg, (size_t)u->N * 4, r->stream);
    be->memset_device(be, r->opt.grads, 0, r->P * r->x, r->stream);
    mr_forward_backward(r, 1.0f / (float)u->N);
    double norm = optimizer_grad_norm(&r->opt);
    optimizer_step(&r->opt, lr, optimizer_clip_scale(norm, 1.0));
    be->copy_d2h(be, u->losses, arena_ptr(&r->t_losses), (size_t)u->N * 4, r->stream);
    be->stream_synchronize(be, r->stream);
    double sum = 0;
    for (int i = 0; i < u->N; i++) sum += u->losses[i];
    return sum / u->N;
}

// Where one step's time goes: events around each phase (after warm-up).
static void breakdown(Run *u, Backend *be, int step_index, int V) {
    ModelRuntime *r = &u->r;
    BackendEvent *e[5];
    for (int i = 0; i < 5; i++) e[i] = be->event_create(be);
    for (int i = 0; i < u->N; i++) u->in[i] = i % V, u->tg[i] = (i + 1) % V;
    be->event_record(be, e[0], r->stream);
    be->copy_h2d(be, arena_ptr(&r->t_inputs), u->in, (size_t)u->N * 4, r->stream);
    be->copy_h2d(be, arena_ptr(&r->t_targets), u->tg, (size_t)u->N * 4, r->stream);
    be->memset_device(be, r->opt.grads, 0, r->P * r->x, r->stream);
    be->event_record(be, e[1], r->stream);
    mr_forward_backward(r, 1.0f / (float)u->N);
    be->event_record(be, e[2], r->stream);
    double norm = optimizer_grad_norm(&r->opt);
    be->event_record(be, e[3], r->stream);
    optimizer_step(&r->opt, 1e-4f, optimizer_clip_scale(norm, 1.0));
    be->event_record(be, e[4], r->stream);
    be->event_synchronize(be, e[4]);
    printf("    step %d phases (ms): upload + zero grads %.2f | forward + backward %.2f | grad norm %.2f | AdamW %.2f\n",
           step_index, be->event_elapsed_ms(be, e[0], e[1]), be->event_elapsed_ms(be, e[1], e[2]),
           be->event_elapsed_ms(be, e[2], e[3]), be->event_elapsed_ms(be, e[3], e[4]));
    for (int i = 0; i < 5; i++) be->event_destroy(be, e[i]);
}

static void teardown(Run *u) {
    mr_free(&u->r);
    free(u->in), free(u->tg), free(u->losses);
}

static int tracking(Backend *gpu) {
    char err[512];
    int fail = 0;
    enum { S = 30 };
    static const char *const names[] = {"gpt", "llama", "falcon"};
    for (int k = 0; k < 3; k++) {
        int llama = k == 1;
        ModelConfig m = llama ? model(FAMILY_LLAMA, 2, 128, 2, 1, 344, 256, 64) : model(FAMILY_GPT, 2, 128, 2, 2, 512, 256, 64);
        if (k == 2)  // Falcon-style: parallel blocks, rotary, one kv head, no biases
            m.parallel_block = 1, m.position = POS_ROTARY, m.kv_heads = 1, m.bias = 0;
        double lc[S], lg[S], lk[S];
        static Run u;
        Backend *cpu = backend_cpu_create(MIST_BF16, err, sizeof err);
        if (!cpu || setup(&u, cpu, &m, 4, 0)) return 1;
        for (int s = 0; s < S; s++) lc[s] = step(&u, cpu, s, m.vocab, 3e-3f);
        teardown(&u);
        cpu->destroy(cpu);
        if (setup(&u, gpu, &m, 4, 0)) return 1;
        for (int s = 0; s < S; s++) lg[s] = step(&u, gpu, s, m.vocab, 3e-3f);
        int mem_exact = (int64_t)arena_peak_bytes(&u.r.dev) == u.predicted_peak;
        teardown(&u);
        if (setup(&u, gpu, &m, 4, 2)) return 1;
        for (int s = 0; s < S; s++) lk[s] = step(&u, gpu, s, m.vocab, 3e-3f);
        teardown(&u);
        double worst = 0;
        int same = 1;
        for (int s = 0; s < S; s++) worst = fmax(worst, fabs(lc[s] - lg[s])), same &= lg[s] == lk[s];
        int good = worst <= 0.05 && same && mem_exact && lg[S - 1] < lg[0] - 0.5;
        printf("%s %-6s bf16, 30 steps: loss %.4f -> %.4f (cpu %.4f -> %.4f), max |cpu - cuda| %.4f (tolerance 0.05), "
               "ckpt=2 identical: %s, predicted peak == measured: %s\n",
               good ? "ok    " : "FAIL  ", names[k], lg[0], lg[S - 1], lc[0], lc[S - 1], worst,
               same ? "yes" : "no", mem_exact ? "yes" : "no");
        fail |= !good;
    }
    return fail;
}

typedef struct {
    const char *name;
    ModelConfig m;
    int B;
} Case;

// GPT-2 124M and GPT-3 1.3B: tokens/s, MFU, measured vs predicted peak memory and time;
// one JSON object per case (attention: the MIST_CUDA_ATTENTION variant)
static int throughput(Backend *gpu, const char *attention, const char *only, int quick, FILE *js, int *emitted) {
    char err[512];
    int fail = 0;
    HwProfile hw;
    int have_hw = profile_preset(&hw, "dgx-h100") == 0;
    Case cases[] = {
        {"gpt2-124m", model(FAMILY_GPT, 12, 768, 12, 12, 3072, 50257, 1024), 16},
        // the batch llm.c trains GPT-2 124M with: the per-step costs (AdamW, grad norm) over 4x the tokens
        {"gpt2-124m-b64", model(FAMILY_GPT, 12, 768, 12, 12, 3072, 50257, 1024), 64},
        {"gpt3-1.3b", model(FAMILY_GPT, 24, 2048, 16, 16, 8192, 50304, 2048), 8},
    };
    printf("\n== throughput (attention %s): one GPU, bf16, one micro-batch per step (fwd + bwd + AdamW)\n", attention);
    printf("%-14s %5s %6s %10s %12s %8s %7s %14s %14s %14s %12s %12s %14s\n", "model", "B", "seq", "ms/iter",
           "tokens/s", "TFLOP/s", "MFU", "peak arena", "peak pred.", "peak device", "pred. ms", "pred./meas.",
           "op-table ms");
    for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        static Run u;
        Case *k = &cases[c];
        if (only && strcmp(only, k->name)) continue;
        // the case's cuDNN plans and sort buffers now, before the baseline: counted to the byte
        char note[1200];
        size_t reserved = backend_prepare_shapes(gpu, k->B, k->m.seq_len, k->m.heads, k->m.kv_heads,
                                                 k->m.hidden / k->m.heads, 1, note, sizeof note);
        if (note[0]) printf("  (%s)\n", note);
        DevicePeak dpeak;
        device_peak_start(&dpeak, gpu);  // before the arenas
        if (setup(&u, gpu, &k->m, k->B, 0)) { fail = 1; continue; }
        int warm = 3, timed = quick ? 5 : 20;
        for (int s = 0; s < warm; s++) step(&u, gpu, s, k->m.vocab, 1e-4f), device_peak_sample(&dpeak, gpu);
        BackendEvent *e0 = gpu->event_create(gpu), *e1 = gpu->event_create(gpu);
        gpu->event_record(gpu, e0, u.r.stream);
        for (int s = 0; s < timed; s++) step(&u, gpu, warm + s, k->m.vocab, 1e-4f);
        gpu->event_record(gpu, e1, u.r.stream);
        gpu->event_synchronize(gpu, e1);
        double ms = gpu->event_elapsed_ms(gpu, e0, e1) / timed;
        double tokens = (double)k->B * k->m.seq_len;
        double flops = model_flops_train(&k->m, k->B, k->m.seq_len);
        double tflops = flops / (ms * 1e-3) / 1e12;
        double peak_tflops = have_hw ? hw.peak_flops[DT_BF16] / 1e12 : 989.0;
        // the cost model's view of the same run: one stage, dp = tp = 1, b = B, G = 1
        double pred_ms = NAN, pred_table_ms = NAN;
        if (have_hw) {
            static MistConfig cfg;
            memset(&cfg, 0, sizeof cfg);
            cfg.model = k->m;
            cfg.train.global_batch = k->B;
            cfg.train.precision = PREC_BF16;
            cfg.cluster.nodes = 1, cfg.cluster.gpus_per_node = 1;
            snprintf(cfg.cluster.hardware, sizeof cfg.cluster.hardware, "dgx-h100");
            Plan plan;
            memset(&plan, 0, sizeof plan);
            plan.G = 1, plan.num_stages = 1;
            plan.stage[0] = (StagePlan){.layers = k->m.layers, .dp = 1, .tp = 1, .b = k->B};
            cfg.plan.mode = PLAN_FIXED, cfg.plan.plan = plan;
            static PlanAnalysis a;
            if (plan_analyze(&a, &cfg, &plan, &hw, NULL, err, sizeof err) == 0) pred_ms = a.iteration_seconds * 1e3;
            else fprintf(stderr, "bench_train: cost model: %s\n", err);
            // the same with the GEMMs and attention measured on this GPU (mist-calibrate's table)
            CalibEntry ce[CALIB_OPS + CALIB_FUSED];
            OpTimeEntry te[CALIB_OPS + CALIB_FUSED];
            int one = 1, nce = calibrate_ops(gpu, &k->m, &k->B, 1, &one, 1, 2, 5, ce, CALIB_OPS, err, sizeof err);
            if (nce > 0) nce = calibrate_add_fused(&k->m, ce, nce, CALIB_OPS + CALIB_FUSED);
            for (int i = 0; i < nce; i++) {
                memset(&te[i], 0, sizeof te[i]);
                snprintf(te[i].op, sizeof te[i].op, "%s", ce[i].op);
                te[i].b = ce[i].b, te[i].s = ce[i].s, te[i].tp = ce[i].tp;
                te[i].fwd_seconds = ce[i].fwd_us * 1e-6, te[i].bwd_seconds = ce[i].bwd_us * 1e-6;
            }
            OpTable table = {.n = nce > 0 ? nce : 0, .cap = CALIB_OPS + CALIB_FUSED, .entry = te};
            if (nce > 0 && plan_analyze(&a, &cfg, &plan, &hw, &table, err, sizeof err) == 0)
                pred_table_ms = a.iteration_seconds * 1e3;
            else fprintf(stderr, "bench_train: cost model with the op table: %s\n", err);
        }
        size_t measured = arena_peak_bytes(&u.r.dev);
        device_peak_sample(&dpeak, gpu);  // the timed steps ran one after another: their allocations stay
        long long device_peak = (long long)device_peak_bytes(&dpeak);
        long long total_pred = (long long)u.predicted_peak + (long long)reserved, total_dev = device_peak + (long long)reserved;
        printf("    device memory: predicted %lld B (arena %lld + backend reserved %zu) vs the device's count + "
               "reserved %lld B: %+.3f%%\n", total_pred, (long long)u.predicted_peak, reserved, total_dev,
               100.0 * (double)(total_dev - total_pred) / (double)total_pred);
        printf("%-14s %5d %6d %10.2f %12.0f %8.1f %6.1f%% %14zu %14lld %14lld %12.2f %12.2f %8.2f (%.2f)\n", k->name,
               k->B, k->m.seq_len, ms, tokens / (ms * 1e-3), tflops, 100 * tflops / peak_tflops, measured,
               (long long)u.predicted_peak, device_peak, pred_ms, pred_ms / ms, pred_table_ms, pred_table_ms / ms);
        if (js)
            fprintf(js, "%s\n  {\"attention\": \"%s\", \"model\": \"%s\", \"B\": %d, \"seq\": %d, \"ms_per_iter\": %.4f, \"tokens_per_s\": %.1f, "
                        "\"tflops\": %.2f, \"mfu\": %.4f, \"peak_measured_bytes\": %zu, \"peak_predicted_bytes\": %lld, "
                        "\"device_peak_bytes\": %lld, \"backend_reserved_bytes\": %zu, \"predicted_ms\": %.4f, "
                        "\"predicted_ms_op_table\": %.4f}",
                    (*emitted)++ ? "," : "", attention, k->name, k->B, k->m.seq_len, ms, tokens / (ms * 1e-3), tflops, tflops / peak_tflops,
                    measured, (long long)u.predicted_peak, device_peak, reserved, pred_ms, pred_table_ms);
        fail |= (int64_t)measured != u.predicted_peak;
        breakdown(&u, gpu, warm + timed, k->m.vocab);
        gpu->event_destroy(gpu, e0), gpu->event_destroy(gpu, e1);
        teardown(&u);
    }
    return fail;
}

static const char *const attention_names[] = {"base", "wide", "wgmma", "cudnn"};
#define NUM_ATTENTION (int)(sizeof attention_names / sizeof *attention_names)

int main(int argc, char **argv) {
    const char *json = NULL;
    const char *only = NULL;
    const char *attention = "base";
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--attention") && i + 1 < argc) attention = argv[++i];
        else { fprintf(stderr, "usage: %s [--quick] [--json PATH] [--only MODEL] [--attention base,wide,wgmma,cudnn]\n", argv[0]); return 2; }
    }
    // the variants asked for, in order; each must be one of attention_names
    int want[8], nwant = 0;
    for (const char *p = attention; *p && nwant < 8;) {
        size_t n = strcspn(p, ",");
        int found = -1;
        for (int v = 0; v < NUM_ATTENTION; v++)
            if (strlen(attention_names[v]) == n && !strncmp(p, attention_names[v], n)) found = v;
        if (found < 0) {
            fprintf(stderr, "bench_train: --attention '%s': '%.*s' is not a variant (allowed: base, wide, wgmma, "
                            "cudnn, comma-separated)\n", attention, (int)n, p);
            return 2;
        }
        want[nwant++] = found;
        p += n + (p[n] == ',');
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    char err[512];
    Backend *gpu = backend_cuda_create(MIST_BF16, 0, err, sizeof err);
    if (!gpu) { printf("SKIP no GPU: %s\n", err); return 0; }
    int fail = 0, emitted = 0;
    FILE *js = json ? fopen(json, "w") : NULL;
    if (json && !js) { fprintf(stderr, "bench_train: cannot write %s\n", json); return 1; }
    // each case's object on disk as soon as it is measured: a run cut by a timeout keeps the
    // cases that finished (benchmarks/gpu/run.sh closes the list)
    if (js) setvbuf(js, NULL, _IONBF, 0);
    if (js) fprintf(js, "{\"device\": \"%s\", \"results\": [", "cuda:0");
    for (int w = 0; w < nwant; w++) {
        const char *name = attention_names[want[w]];
        if (want[w] == 2 && !cuda_attention_wgmma_available()) {
            printf("\n== attention %s: SKIP (needs a Hopper GPU and a build for sm_90a)\n", name);
            continue;
        }
        if (want[w] == 0) unsetenv("MIST_CUDA_ATTENTION");
        else setenv("MIST_CUDA_ATTENTION", name, 1);
        if (!only) printf("\n== tracking (attention %s): cuda vs cpu backend\n", name), fail |= tracking(gpu);
        fail |= throughput(gpu, name, only, quick, js, &emitted);
    }
    unsetenv("MIST_CUDA_ATTENTION");
    if (js) fprintf(js, "\n]}\n"), fclose(js);
    gpu->destroy(gpu);
    return fail;
}
