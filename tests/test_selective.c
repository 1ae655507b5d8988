// Selective recompute ([stage.N] recompute = selective) in the model
// description and the stage model, against hand computations: which tensors a
// block stops keeping (att and lse), their bytes per tp (GPT-2 small at b = 1,
// s = 1024 as the worked example of docs/design.md), the memory peak of a tiny
// stage by hand with and without checkpointed blocks, the host bytes under
// activation offload (the scan over the smaller kept set), the extra time and
// FLOPs (one attention forward per selective block and micro-batch), and
// batched == scalar evaluation with the knob drawn.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "models/model.h"
#include "planner/stage_model.h"
#include "tests/tap.h"

static double frand(unsigned *state) {
    *state = *state * 1103515245u + 12345u;
    return (double)(*state >> 8) / (double)(1u << 24);
}

// bytes of a block's saved tensors (not checkpointed), and of those selective recompute drops
static void block_saved(const ModelConfig *m, int b, int tp, int elt, double *saved, double *sel, int *n_sel) {
    ActSpec a[MODEL_MAX_ACTS];
    int n = model_acts(m, PART_BLOCK, b, m->seq_len, tp, a, MODEL_MAX_ACTS);
    *saved = *sel = 0;
    *n_sel = 0;
    for (int i = 0; i < n; i++) {
        double bytes = (double)a[i].elems * (a[i].f32 ? 4 : elt);
        if (a[i].saved) *saved += bytes;
        if (a[i].sel_recompute) {
            *sel += bytes;
            *n_sel += a[i].saved && !a[i].ckpt_saved && (!strcmp(a[i].name, "att") || !strcmp(a[i].name, "lse"));
        }
    }
}

// GPT-2 small (h 768, a 12 heads of d 64, s 1024) in bf16 at b = 1:
// selective recompute drops att X(bs, a_t d) and lse f32(b, a_t, s), a_t =
// ceil(a / t) heads per rank: 2bs a_t d + 4b a_t s bytes (2sbh/t + 4abs/t when
// t divides a).
static void test_gpt2_bytes(void) {
    ModelConfig m = model_family_config(FAMILY_GPT, 12, 768, 12, 50257, 1024);
    double d = 64, s = 1024, a = 12, b = 1;
    int all = 1;
    for (int tp = 1; tp <= 8; tp *= 2) {
        double saved, sel;
        int n_sel;
        block_saved(&m, 1, tp, 2, &saved, &sel, &n_sel);
        double at = ceil(a / tp), want = 2 * b * s * at * d + 4 * b * at * s;
        diag("GPT-2 small block, b=1 s=1024 bf16 tp=%d: saved %.0f B without selective, %.0f B with (-%.0f B)", tp,
             saved, saved - sel, sel);
        all &= n_sel == 2 && sel == want;
    }
    ok(all, "GPT-2 small: selective recompute drops exactly att and lse, 2bs a_t d + 4b a_t s bytes per block, "
       "tp 1..8");
}

static int build(StageModel *m, const MistConfig *c, const HwProfile *hw) {
    char err[256];
    if (stage_model_build(m, c, hw, NULL, 1, 1, err, sizeof err) == 0) return 0;
    ok(0, "stage model builds: %s", err);
    return 1;
}

static StageConfig one_stage(int L, int ckpt, int sel) {
    StageConfig s = {{.layers = L, .dp = 1, .tp = 1, .b = 1, .ckpt = ckpt, .recompute = sel}, 1, 0};
    return s;
}

// The tiny fp32 GPT (h 64, a 4, s 32, F 256, V 256), 2 blocks, b = 1, as
// test_cost.c's peak by hand, with A = att + lse: a selective block keeps
// R - A, and the one running holds A in the selective workspace (forward,
// and backward after its recompute).
static void test_memory_hand(const MistConfig *cfg, const HwProfile *hw) {
    StageModel m;
    if (build(&m, cfg, hw)) return;
    const ModelConfig *mc = &cfg->model;
    double b = 1, s = mc->seq_len, C = mc->hidden, F = mc->ffn_hidden, V = mc->vocab, a = mc->heads, f = 4;
    double N = b * s, L = 2;
    double X = N * C * f, S = N * C * f;
    double R = N * C * f + 2 * N * 4 + 3 * N * C * f + N * C * f + b * a * s * 4 + N * C * f + N * C * f + 2 * N * 4 +
               N * F * f + N * F * f;
    double A = N * C * f + b * a * s * 4;  // att, lse
    double D = (N * C + N * C + N * C + 3 * N * C + N * F + N * F) * f;
    double H = X + N * C * f + 2 * N * 4 + N * V * f;
    double states = 16.0 * (double)model_param_count(mc), io = 4 + 3 * N * 4;
    double o[ST_OUTPUTS];
    StageConfig sc = one_stage(2, 0, 1);
    stage_eval_scalar(&m, &sc, o);
    double want = states + io + L * (X + R - A) + fmax(fmax(X + S + A, D + A), fmax(H, H + D));
    ok(fmax(o[ST_PEAK_FWD], o[ST_PEAK_BWD]) == want, "peak by hand, selective, no checkpointing: %.0f bytes (got %.0f)",
       want, fmax(o[ST_PEAK_FWD], o[ST_PEAK_BWD]));
    double act_sel = o[ST_ACTIVATIONS];
    sc = one_stage(2, 0, 0);
    stage_eval_scalar(&m, &sc, o);
    ok(o[ST_ACTIVATIONS] - act_sel == L * A, "selective keeps L A = %.0f bytes less at the turn", L * A);
    sc = one_stage(2, 1, 1);  // block 1 checkpointed (recomputes all), block 0 selective
    stage_eval_scalar(&m, &sc, o);
    want = states + io + L * X + (R - A) + fmax(fmax(X + S + R, D + R + S), fmax(H, H + D));
    ok(fmax(o[ST_PEAK_FWD], o[ST_PEAK_BWD]) == want, "peak by hand, selective with ckpt = 1 of 2: %.0f bytes", want);
    // ao = 1: every saved tensor is chosen; a selective block moves R - A of them, R without
    sc = one_stage(2, 0, 1);
    sc.plan.ao = 1;
    stage_eval_scalar(&m, &sc, o);
    double host_sel = o[ST_HOST];
    sc.plan.recompute = 0;
    stage_eval_scalar(&m, &sc, o);
    ok(o[ST_HOST] - host_sel == L * A, "ao = 1: the host holds L (R - A) under selective, L A = %.0f bytes less",
       L * A);
    stage_model_free(&m);
}

// With infinite bandwidth and no launch cost the roofline is FLOPs / peak: a
// selective block's backward runs one more causal attention forward, 2Th(s+1)
// executed FLOPs (T = b s rows); a checkpointed one does not (it recomputes all).
static void test_time_hand(const MistConfig *cfg) {
    HwProfile hw;
    profile_preset(&hw, "cpu");
    hw.peak_flops[DT_BF16] = 1e12;
    hw.flops_efficiency = 1.0;
    hw.attention_efficiency = 0;  // attention at the matmul fraction
    hw.mem_bandwidth = 1e30;
    hw.launch_seconds = 0;
    MistConfig c = *cfg;
    c.train.precision = PREC_BF16;
    c.train.global_batch = 1;
    StageModel m;
    if (build(&m, &c, &hw)) return;
    double T = c.model.seq_len, h = c.model.hidden, s = c.model.seq_len;
    double att = 2 * T * h * (s + 1);
    int all_t = 1, all_f = 1;
    for (int ck = 0; ck <= 2; ck++) {
        double o0[ST_OUTPUTS], o1[ST_OUTPUTS];
        StageConfig sc = one_stage(2, ck, 0);
        stage_eval_scalar(&m, &sc, o0);
        sc.plan.recompute = 1;
        stage_eval_scalar(&m, &sc, o1);
        double n_sel = 2 - ck;
        all_t &= fabs((o1[ST_T] - o0[ST_T]) - n_sel * att / 1e12) <= 1e-9 * o0[ST_T];
        all_f &= o1[ST_HW_FLOPS] - o0[ST_HW_FLOPS] == n_sel * att;
        diag("ckpt %d of 2: t %.6g s -> %.6g s with selective", ck, o0[ST_T], o1[ST_T]);
    }
    ok(all_t, "selective adds one attention forward (2Th(s+1) / peak) per block not checkpointed, ckpt 0..2");
    ok(all_f, "executed FLOPs add 2Th(s+1) per selective block");
    stage_model_free(&m);
}

static void test_batched(const MistConfig *cfg, const HwProfile *hw) {
    StageModel m;
    if (build(&m, cfg, hw)) return;
    enum { N = 400 };
    static double col[STAGE_SYMS][N], res[ST_OUTPUTS][N];
    static StageConfig cs[N];
    unsigned seed = 7;
    for (int i = 0; i < N; i++) {
        StageConfig *c = &cs[i];
        memset(c, 0, sizeof *c);
        c->plan.layers = 1 + (int)(frand(&seed) * 4);
        c->plan.b = 1 << (int)(frand(&seed) * 3);
        c->plan.dp = 1 << (int)(frand(&seed) * 3);
        c->plan.tp = 1 << (int)(frand(&seed) * 3);
        c->plan.zero = (int)(frand(&seed) * 4);
        c->plan.ckpt = (int)(frand(&seed) * (c->plan.layers + 1));
        c->plan.recompute = frand(&seed) < 0.5 ? RECOMPUTE_SELECTIVE : RECOMPUTE_NONE;
        c->G = 1 + (int)(frand(&seed) * 4);
        c->p = (int)(frand(&seed) * c->G);
        c->plan.ao = frand(&seed) < 0.5 ? 0 : frand(&seed);
        double v[STAGE_SYMS];
        stage_sym_values(c, v);
        for (int s = 0; s < STAGE_SYMS; s++) col[s][i] = v[s];
    }
    const double *cols[STAGE_SYMS];
    double *outs[ST_OUTPUTS];
    for (int s = 0; s < STAGE_SYMS; s++) cols[s] = col[s];
    for (int k = 0; k < ST_OUTPUTS; k++) outs[k] = res[k];
    stage_eval_batch(&m, cols, outs, N);
    int fails = 0, lower = 0, sels = 0, slower = 0, no_ao = 0;
    for (int i = 0; i < N; i++) {
        double o[ST_OUTPUTS], o0[ST_OUTPUTS];
        stage_eval_scalar(&m, &cs[i], o);
        for (int k = 0; k < ST_OUTPUTS; k++)
            if (!(fabs(o[k] - res[k][i]) <= 1e-9 * fabs(o[k]) + 1e-15) && fails++ < 5)
                diag("candidate %d output %s: scalar %.17g batched %.17g", i, stage_output_names[k], o[k], res[k][i]);
        if (cs[i].plan.recompute != RECOMPUTE_SELECTIVE || cs[i].plan.ckpt >= cs[i].plan.layers) continue;
        StageConfig c0 = cs[i];
        c0.plan.recompute = RECOMPUTE_NONE;
        stage_eval_scalar(&m, &c0, o0);
        sels++;
        // the device keeps no more (as much when the offload took att and lse), device + host less,
        // the peaks no higher
        lower += o[ST_ACTIVATIONS] <= o0[ST_ACTIVATIONS] &&
                 o[ST_ACTIVATIONS] + o[ST_HOST] < o0[ST_ACTIVATIONS] + o0[ST_HOST] &&
                 o[ST_PEAK_FWD] <= o0[ST_PEAK_FWD] && o[ST_PEAK_BWD] <= o0[ST_PEAK_BWD];
        // (with ao > 0 it may be faster: it offloads a fraction of less)
        if (cs[i].plan.ao == 0) no_ao++, slower += o[ST_T] > o0[ST_T];
    }
    ok(fails == 0, "batched == scalar with recompute drawn, %d candidates (%d mismatches)", N, fails);
    ok(sels > 0 && lower == sels, "every selective candidate with a block not checkpointed: device activations and "
       "peaks no higher, device + host activations lower than without (%d of %d)", lower, sels);
    ok(no_ao > 0 && slower == no_ao, "without offload each of them takes longer (%d of %d)", slower, no_ao);
    stage_model_free(&m);
}

int main(void) {
    MistConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.source, sizeof cfg.source, "test");
    cfg.model = model_family_config(FAMILY_GPT, 2, 64, 4, 256, 32);
    cfg.train.global_batch = 1;
    cfg.train.precision = PREC_FP32;
    cfg.cluster.nodes = 1;
    cfg.cluster.gpus_per_node = 8;
    HwProfile hw;
    profile_preset(&hw, "gcp-a100-80g");
    test_gpt2_bytes();
    test_memory_hand(&cfg, &hw);
    test_time_hand(&cfg);
    test_batched(&cfg, &hw);
    return tap_done();
}
