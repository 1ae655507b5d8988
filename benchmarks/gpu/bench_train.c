// End-to-end training on one GPU without MPI: the runtime's own model code
// (runtime/model_runtime.c) on the cuda backend.
//
// 1. Tracking: a small GPT, a small Llama and a small Falcon-style model (parallel
//    blocks, one kv head) train 30 steps on the cpu and the
//    cuda backend (both bf16 storage, same init, same tokens); the per-step
//    losses must agree within 0.05 (bf16 rounding of activations differs in
//    the order of operations), and the checkpointed run must give the same
//    losses as the plain one on the GPU (recompute is bit-exact).
// 2. Throughput: GPT-2 124M (s = 1024; B 16 and 64; and B 16 with the vocabulary
//    not padded, vocab_pad = 1: 50257 rows instead of 50304, the A/B of [model]
//    vocab_pad) and GPT-3 1.3B (s = 2048), one
//    micro-batch per step (fwd + bwd + grad norm + AdamW), synthetic tokens,
//    timed with CUDA events after warm-up. Reports tokens/s, MFU against the
//    profile's dense bf16 peak (Megatron model FLOPs, models/model_flops.h),
//    peak device memory: predicted (runtime memory plan), the arena's count and
//    the device's own (cudaMemGetInfo sampled after every step, runtime/device_peak.h), the
//    backend's reserved bytes after preparing the case's shapes (runtime/backend_prepare.h:
//    scratch, cuBLASLt workspace, sort buffers, cuDNN's plans), so that predicted + reserved
//    compares with the device's count + reserved (held before its baseline), and the
//    cost model's predicted iteration time (planner/analyze.h, dgx-h100), with
//    the roofline and with this GPU's op table (runtime/calibrate.h). Each case
//    then prints where its own time went (plan, weight init, op table, warm-up,
//    timed steps, the rest), so that a slow run shows what is slow.
//
// usage: bench_train [--quick] [--json PATH] [--only LIST] [--attention LIST] [--no-op-table]
//                    [--timeline FILE] [--cpu]
//   --only: comma-separated cases (gpt2-124m, gpt2-124m-b64, gpt2-124m-v50257, gpt3-1.3b,
//   tiny) and / or `tracking`; without it, tracking and every case but tiny
//   --attention base,wide,wgmma,cudnn: run tracking and throughput once per attention
//   variant (MIST_CUDA_ATTENTION; default: base); wgmma is skipped, saying why,
//   where the build or the GPU lacks it
//   --no-op-table: no op-table prediction. Measuring the op table (every op of the
//   model at the case's shape) is most of a case's time beyond its steps: its
//   inputs are drawn on the host (the LM head's logits alone are B s Vp values),
//   and the prediction is the same for every run of a case, so the runbook
//   measures it in one step (gpt2) and the other steps skip it
//   --timeline FILE: after the first case's timed steps, one more step with the
//   runtime's own marks: Chrome trace in FILE, a summary of its phases
//   (benchmarks/gpu/bench_timeline.c)
//   --cpu: the cpu backend (bf16) instead of the GPU: checks this program where there
//   is no GPU; with --only tiny (the GPT-2 cases take minutes a step there)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kernels/backend.h"
#include "models/model.h"
#include "models/model_flops.h"
#include "planner/analyze.h"
#include "base/profile.h"
#include "runtime/calibrate.h"
#include "runtime/backend_prepare.h"
#include "runtime/device_peak.h"
#include "runtime/model_runtime.h"
#include "benchmarks/gpu/bench_timeline.h"

int cuda_attention_wgmma_available(void);  // kernels/cuda/attention_wgmma.cu

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

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
    double plan_s, init_s;  // host seconds: layout and memory plan, weight init
} Run;

static int setup(Run *u, Backend *be, const ModelConfig *m, int B, int ckpt) {
    char err[512];
    memset(u, 0, sizeof *u);
    double t0 = now_s();
    if (mr_layout(&u->r, m, B, ckpt, 1, err, sizeof err) || mr_plan_memory(&u->r, be, err, sizeof err)) {
        fprintf(stderr, "bench_train: %s\n", err);
        return 1;
    }
    int64_t host;
    mr_memory_predict(&u->r, &u->predicted_peak, &host);
    double t1 = now_s();
    mr_init_params(&u->r, 1234);
    u->plan_s = t1 - t0, u->init_s = now_s() - t1;
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
    int named_only;  // runs only when --only names it
} Case;

typedef struct {
    const char *only;      // --only: comma-separated names, or NULL
    int quick, op_table;
    const char *timeline;  // --timeline FILE, or NULL
    int timeline_done;
    const char *device;    // "cuda:0" or "cpu"
    FILE *js;
    int emitted;
} Opts;

// 1 when `name` is one of the comma-separated names of list
static int listed(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        size_t k = strcspn(p, ",");
        if (k == n && !strncmp(p, name, n)) return 1;
        p += k + (p[k] == ',');
    }
    return 0;
}

static ModelConfig unpadded(ModelConfig m) {
    m.vocab_pad = 1;  // [model] vocab_pad = 1: the embedding and LM head hold V rows, as GPT-2 has them
    return m;
}

enum { NUM_CASES = 5 };
static Case cases[NUM_CASES];
static void init_cases(void) {
    ModelConfig gpt2 = model(FAMILY_GPT, 12, 768, 12, 12, 3072, 50257, 1024);
    cases[0] = (Case){"gpt2-124m", gpt2, 16, 0};
    // the batch llm.c trains GPT-2 124M with: the per-step costs (AdamW, grad norm) over 4x the tokens
    cases[1] = (Case){"gpt2-124m-b64", gpt2, 64, 0};
    // the vocabulary A/B: the same model and batch with 50257 rows instead of 50304 (benchmarks/gpu/last_json.sh)
    cases[2] = (Case){"gpt2-124m-v50257", unpadded(gpt2), 16, 0};
    cases[3] = (Case){"gpt3-1.3b", model(FAMILY_GPT, 24, 2048, 16, 16, 8192, 50304, 2048), 8, 0};
    // small enough for the cpu backend (--cpu): tenths of a second a step on two cores
    cases[4] = (Case){"tiny", model(FAMILY_GPT, 2, 128, 2, 2, 512, 256, 64), 4, 1};
}

// The cost model's iteration time for a case (one stage, dp = tp = 1, b = B, G = 1) with the
// roofline and, with op_table, with the GEMMs and attention measured on this device
// (mist-calibrate's table); NAN where not predicted.
static void predict(Backend *gpu, const Case *k, int op_table, double *pred_ms, double *pred_table_ms) {
    char err[512];
    HwProfile hw;
    *pred_ms = *pred_table_ms = NAN;
    if (profile_preset(&hw, "dgx-h100") != 0) return;
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
    if (plan_analyze(&a, &cfg, &plan, &hw, NULL, err, sizeof err) == 0) *pred_ms = a.iteration_seconds * 1e3;
    else fprintf(stderr, "bench_train: cost model: %s\n", err);
    if (!op_table) return;
    CalibEntry ce[CALIB_OPS + CALIB_FUSED];
    OpTimeEntry te[CALIB_OPS + CALIB_FUSED];
    int one = 1, B = k->B, nce = calibrate_ops(gpu, &k->m, &B, 1, &one, 1, 2, 5, ce, CALIB_OPS, err, sizeof err);
    if (nce > 0) nce = calibrate_add_fused(&k->m, ce, nce, CALIB_OPS + CALIB_FUSED);
    for (int i = 0; i < nce; i++) {
        memset(&te[i], 0, sizeof te[i]);
        snprintf(te[i].op, sizeof te[i].op, "%s", ce[i].op);
        te[i].b = ce[i].b, te[i].s = ce[i].s, te[i].tp = ce[i].tp;
        te[i].fwd_seconds = ce[i].fwd_us * 1e-6, te[i].bwd_seconds = ce[i].bwd_us * 1e-6;
    }
    OpTable table = {.n = nce > 0 ? nce : 0, .cap = CALIB_OPS + CALIB_FUSED, .entry = te};
    if (nce > 0 && plan_analyze(&a, &cfg, &plan, &hw, &table, err, sizeof err) == 0) *pred_table_ms = a.iteration_seconds * 1e3;
    else fprintf(stderr, "bench_train: cost model with the op table: %s\n", err);
}

// a time for the JSON: null where not predicted (JSON has no NaN)
static const char *json_ms(char *buf, double ms) {
    if (isfinite(ms)) snprintf(buf, 32, "%.4f", ms);
    else snprintf(buf, 32, "null");
    return buf;
}

// One case: tokens/s, MFU, measured vs predicted peak memory and time, where the case's
// own time went; its JSON object (attention: the MIST_CUDA_ATTENTION variant). 1 on failure.
static int run_case(Backend *gpu, const char *attention, Case *k, Opts *o) {
    static Run u;
    double t_case = now_s();
    // the case's cuDNN plans and sort buffers now, before the baseline: counted to the byte
    char note[1200];
    size_t reserved = backend_prepare_shapes(gpu, k->B, k->m.seq_len, k->m.heads, k->m.kv_heads,
                                             k->m.hidden / k->m.heads, 1, note, sizeof note);
    if (note[0]) printf("  (%s)\n", note);
    DevicePeak dpeak;
    device_peak_start(&dpeak, gpu);  // before the arenas
    if (setup(&u, gpu, &k->m, k->B, 0)) return 1;
    int warm = 3, timed = o->quick ? 5 : 20;
    double t_warm = now_s();
    for (int s = 0; s < warm; s++) step(&u, gpu, s, k->m.vocab, 1e-4f), device_peak_sample(&dpeak, gpu);
    double t_timed = now_s();
    BackendEvent *e0 = gpu->event_create(gpu), *e1 = gpu->event_create(gpu);
    gpu->event_record(gpu, e0, u.r.stream);
    for (int s = 0; s < timed; s++) step(&u, gpu, warm + s, k->m.vocab, 1e-4f);
    gpu->event_record(gpu, e1, u.r.stream);
    gpu->event_synchronize(gpu, e1);
    double t_table = now_s();
    double ms = gpu->event_elapsed_ms(gpu, e0, e1) / timed;
    double tokens = (double)k->B * k->m.seq_len;
    double flops = model_flops_train(&k->m, k->B, k->m.seq_len);
    double tflops = flops / (ms * 1e-3) / 1e12;
    HwProfile hw;
    double peak_tflops = profile_preset(&hw, "dgx-h100") == 0 ? hw.peak_flops[DT_BF16] / 1e12 : 989.0;
    double pred_ms, pred_table_ms;
    predict(gpu, k, o->op_table, &pred_ms, &pred_table_ms);
    double t_rest = now_s();
    size_t measured = arena_peak_bytes(&u.r.dev);
    device_peak_sample(&dpeak, gpu);  // the timed steps ran one after another: their allocations stay
    long long device_peak = (long long)device_peak_bytes(&dpeak);
    long long total_pred = (long long)u.predicted_peak + (long long)reserved, total_dev = device_peak + (long long)reserved;
    if (device_peak < 0)  // no device count (the cpu backend)
        printf("    device memory: predicted %lld B (arena %lld + backend reserved %zu); no device count here\n",
               total_pred, (long long)u.predicted_peak, reserved);
    else
        printf("    device memory: predicted %lld B (arena %lld + backend reserved %zu) vs the device's count + "
               "reserved %lld B: %+.3f%%\n", total_pred, (long long)u.predicted_peak, reserved, total_dev,
               100.0 * (double)(total_dev - total_pred) / (double)total_pred);
    printf("%-17s %5d %6d %10.2f %12.0f %8.1f %6.1f%% %14zu %14lld %14lld %12.2f %12.2f %8.2f (%.2f)\n", k->name,
           k->B, k->m.seq_len, ms, tokens / (ms * 1e-3), tflops, 100 * tflops / peak_tflops, measured,
           (long long)u.predicted_peak, device_peak, pred_ms, pred_ms / ms, pred_table_ms, pred_table_ms / ms);
    int fail = (int64_t)measured != u.predicted_peak;
    breakdown(&u, gpu, warm + timed, k->m.vocab);
    if (o->timeline && !o->timeline_done) {
        o->timeline_done = 1;
        fail |= timeline_step(&u.r, gpu, u.in, u.tg, u.N, u.losses, o->timeline, k->name, attention);
    }
    gpu->event_destroy(gpu, e0), gpu->event_destroy(gpu, e1);
    teardown(&u);
    double end = now_s(), op_table_s = o->op_table ? t_rest - t_table : 0;
    // where the case's time went: a slow step of the runbook shows which part is slow
    printf("    time (s): plan %.2f | weight init %.2f | warm-up (%d) %.2f | timed steps (%d) %.2f | op table %s%.2f | "
           "breakdown%s, teardown %.2f | case %.2f\n", u.plan_s, u.init_s, warm, t_timed - t_warm, timed,
           t_table - t_timed, o->op_table ? "" : "(off) ", t_rest - t_table, o->timeline ? ", timeline" : "",
           end - t_rest, end - t_case);
    char pm[32], ptm[32];
    if (o->js)
        fprintf(o->js, "%s\n  {\"attention\": \"%s\", \"model\": \"%s\", \"B\": %d, \"seq\": %d, \"vocab_rows\": %d, "
                       "\"ms_per_iter\": %.4f, \"tokens_per_s\": %.1f, \"tflops\": %.2f, \"mfu\": %.4f, "
                       "\"peak_measured_bytes\": %zu, \"peak_predicted_bytes\": %lld, \"device_peak_bytes\": %lld, "
                       "\"backend_reserved_bytes\": %zu, \"predicted_ms\": %s, \"predicted_ms_op_table\": %s, \"plan_s\": %.3f, \"init_s\": %.3f, "
                       "\"op_table_s\": %.3f, \"warmup_s\": %.3f, \"timed_s\": %.3f, \"case_s\": %.3f}",
                o->emitted++ ? "," : "", attention, k->name, k->B, k->m.seq_len, model_vocab_padded(&k->m), ms,
                tokens / (ms * 1e-3), tflops, tflops / peak_tflops, measured, (long long)u.predicted_peak, device_peak,
                reserved, json_ms(pm, pred_ms), json_ms(ptm, pred_table_ms), u.plan_s, u.init_s, op_table_s, t_timed - t_warm, t_table - t_timed, end - t_case);
    return fail;
}

// Every case --only asks for (all but the named-only ones without it)
static int throughput(Backend *gpu, const char *attention, Opts *o) {
    int fail = 0;
    printf("\n== throughput (attention %s): one %s, bf16, one micro-batch per step (fwd + bwd + AdamW)\n", attention,
           o->device);
    printf("%-17s %5s %6s %10s %12s %8s %7s %14s %14s %14s %12s %12s %14s\n", "model", "B", "seq", "ms/iter",
           "tokens/s", "TFLOP/s", "MFU", "peak arena", "peak pred.", "peak device", "pred. ms", "pred./meas.",
           "op-table ms");
    for (int c = 0; c < NUM_CASES; c++)
        if (o->only ? listed(o->only, cases[c].name) : !cases[c].named_only) fail |= run_case(gpu, attention, &cases[c], o);
    return fail;
}

static const char *const attention_names[] = {"base", "wide", "wgmma", "cudnn"};
#define NUM_ATTENTION (int)(sizeof attention_names / sizeof *attention_names)

static int usage(const char *argv0) {
    fprintf(stderr, "usage: %s [--quick] [--json PATH] [--only LIST] [--attention base,wide,wgmma,cudnn] "
                    "[--no-op-table] [--timeline FILE] [--cpu]\n", argv0);
    return 2;
}

// --only's names: each a case or `tracking`; 0, or 2 with the message
static int check_only(const char *only, int *any_case) {
    *any_case = 0;
    for (const char *p = only; *p;) {
        size_t n = strcspn(p, ",");
        int found = n == 8 && !strncmp(p, "tracking", 8);
        for (int c = 0; c < NUM_CASES; c++)
            if (strlen(cases[c].name) == n && !strncmp(p, cases[c].name, n)) found = 1, *any_case = 1;
        if (!found) {
            fprintf(stderr, "bench_train: --only '%s': '%.*s' is not a case (allowed: tracking, gpt2-124m, gpt2-124m-b64, "
                            "gpt2-124m-v50257, gpt3-1.3b, tiny, comma-separated)\n", only, (int)n, p);
            return 2;
        }
        p += n + (p[n] == ',');
    }
    return 0;
}

// --attention's variants, in order, into want; their count, or -1 with the message
static int parse_attention(const char *attention, int *want, int max) {
    int nwant = 0;
    for (const char *p = attention; *p && nwant < max;) {
        size_t n = strcspn(p, ",");
        int found = -1;
        for (int v = 0; v < NUM_ATTENTION; v++)
            if (strlen(attention_names[v]) == n && !strncmp(p, attention_names[v], n)) found = v;
        if (found < 0) {
            fprintf(stderr, "bench_train: --attention '%s': '%.*s' is not a variant (allowed: base, wide, wgmma, "
                            "cudnn, comma-separated)\n", attention, (int)n, p);
            return -1;
        }
        want[nwant++] = found;
        p += n + (p[n] == ',');
    }
    return nwant;
}

int main(int argc, char **argv) {
    const char *json = NULL;
    const char *attention = "base";
    Opts o = {.op_table = 1, .device = "cuda:0"};
    int cpu = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else if (!strcmp(argv[i], "--quick")) o.quick = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) o.only = argv[++i];
        else if (!strcmp(argv[i], "--attention") && i + 1 < argc) attention = argv[++i];
        else if (!strcmp(argv[i], "--no-op-table")) o.op_table = 0;
        else if (!strcmp(argv[i], "--timeline") && i + 1 < argc) o.timeline = argv[++i];
        else if (!strcmp(argv[i], "--cpu")) cpu = 1;
        else return usage(argv[0]);
    }
    init_cases();
    int want[8], any_case = 1;
    int nwant = parse_attention(attention, want, 8);
    if (nwant < 0 || (o.only && check_only(o.only, &any_case))) return 2;
    int track = !o.only || listed(o.only, "tracking");
    if (cpu && (track || !o.only)) {
        fprintf(stderr, "bench_train: --cpu: tracking compares the cpu backend with the GPU, and the GPT cases take "
                        "minutes a step on the cpu (hint: --cpu --only tiny)\n");
        return 2;
    }
    if (o.timeline && !any_case) {
        fprintf(stderr, "bench_train: --timeline %s: records a step of a throughput case; --only '%s' names none "
                        "(hint: --only gpt2-124m)\n", o.timeline, o.only);
        return 2;
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    char err[512];
    Backend *gpu = cpu ? backend_cpu_create(MIST_BF16, err, sizeof err) : backend_cuda_create(MIST_BF16, 0, err, sizeof err);
    if (!gpu) { printf("SKIP no GPU: %s\n", err); return 0; }
    if (cpu) o.device = "cpu";
    int fail = 0;
    FILE *js = json ? fopen(json, "w") : NULL;
    if (json && !js) { fprintf(stderr, "bench_train: cannot write %s\n", json); return 1; }
    // each case's object on disk as soon as it is measured: a run cut by a timeout keeps the
    // cases that finished (benchmarks/gpu/run.sh closes the list)
    if (js) setvbuf(js, NULL, _IONBF, 0);
    if (js) fprintf(js, "{\"device\": \"%s\", \"results\": [", o.device);
    o.js = js;
    for (int w = 0; w < nwant; w++) {
        const char *name = attention_names[want[w]];
        if (!cpu && want[w] == 2 && !cuda_attention_wgmma_available()) {
            printf("\n== attention %s: SKIP (needs a Hopper GPU and a build for sm_90a)\n", name);
            continue;
        }
        if (want[w] == 0) unsetenv("MIST_CUDA_ATTENTION");
        else setenv("MIST_CUDA_ATTENTION", name, 1);
        if (track) printf("\n== tracking (attention %s): cuda vs cpu backend\n", name), fail |= tracking(gpu);
        if (any_case) fail |= throughput(gpu, name, &o);
    }
    unsetenv("MIST_CUDA_ATTENTION");
    if (js) fprintf(js, "\n]}\n"), fclose(js);
    gpu->destroy(gpu);
    return fail;
}
