// The cost model's memory terms against hand computations and published
// formulas: ZeRO state sizes (the runtime's padding and offload rounding),
// checkpointed activations, monotonicity in ckpt and offload, a tiny stage's
// memory peak by hand (one stage and pipeline stages: in-flight slots,
// boundary buffers, the tied wte copy), and sequence parallelism's kept
// activations. The time terms: tests/test_cost.c.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "models/model.h"
#include "planner/cost_terms.h"  // memory_act_levels, memory_sp_terms
#include "planner/stage_model.h"
#include "tests/cost_fixture.h"
#include "tests/tap.h"

static int64_t part_param_count(const ModelConfig *m, ModelPart part) {
    ParamSpec spec[64];
    int n = model_params(m, part, spec, 64);
    int64_t t = 0;
    for (int i = 0; i < n; i++) t += spec[i].rows * spec[i].cols;
    return t;
}

// weights + grads + optimizer of a single stage holding the whole model
static double states(const StageModel *m, StageConfig c) {
    double o[ST_OUTPUTS];
    stage_eval_scalar(m, &c, o);
    return o[ST_WEIGHTS] + o[ST_GRADS] + o[ST_OPTIMIZER];
}

static void test_zero(const MistConfig *cfg, const HwProfile *hw) {
    StageModel m;
    char err[256];
    if (!cost_model_built(&m, cfg, hw, 1, 1, "stage")) return;
    double psi = (double)model_param_count(&cfg->model);
    int L = cfg->model.layers, N = 4;
    // rounding slack: one ceil per part (pre, post, each block) and state
    double slack = 16.0 * (L + 2);
    ok(near(states(&m, stage(L, 2, N, 1, 0, 0, 1, 0)), 16 * psi, 0, 0, "ZeRO-0"), "ZeRO-0: 16 psi exactly");
    ok(near(states(&m, stage(L, 2, N, 1, 1, 0, 1, 0)), 4 * psi + 12 * psi / N, slack, 0, "ZeRO-1"), "ZeRO-1: 4 psi + 12 psi/N");
    ok(near(states(&m, stage(L, 2, N, 1, 2, 0, 1, 0)), 2 * psi + 14 * psi / N, slack, 0, "ZeRO-2"), "ZeRO-2: 2 psi + 14 psi/N");
    ok(near(states(&m, stage(L, 2, N, 1, 3, 0, 1, 0)), 16 * psi / N, slack, 0, "ZeRO-3"), "ZeRO-3: 16 psi / N");
    // exact arithmetic: shards are ceil-divided per part
    int64_t pre = part_param_count(&cfg->model, PART_PRE), blk = part_param_count(&cfg->model, PART_BLOCK);
    int64_t post = part_param_count(&cfg->model, PART_POST);
    int dp = 3;
    double want = 16.0 * ((pre + dp - 1) / dp + L * ((blk + dp - 1) / dp) + (post + dp - 1) / dp);
    ok(states(&m, stage(L, 2, dp, 1, 3, 0, 1, 0)) == want, "ZeRO-3 over dp=3: ceil(P/3)*16 per part, to the byte");
    // ZeRO-1, 2 as the runtime lays them out (runtime/zero.h): every part is
    // padded to dp * ceil(P/dp) elements, so unsharded weights (and grads)
    // store the padded count, sharded states one ceil(P/dp) shard
    int64_t parts[3] = {pre, blk, post}, times[3] = {1, L, 1};
    double want1 = 0, want2 = 0;
    for (int i = 0; i < 3; i++) {
        int64_t shard = (parts[i] + dp - 1) / dp, padded = shard * dp;
        want1 += (double)times[i] * (2 * padded + 2 * padded + 12 * shard);
        want2 += (double)times[i] * (2 * padded + 2 * shard + 12 * shard);
    }
    ok(states(&m, stage(L, 2, dp, 1, 1, 0, 1, 0)) == want1, "ZeRO-1 over dp=3: W, G padded to 3 ceil(P/3), O shard");
    ok(states(&m, stage(L, 2, dp, 1, 2, 0, 1, 0)) == want2, "ZeRO-2 over dp=3: W padded, G and O shards");
    // offload moves floor(ratio * n) elements of each part's stored state to the host
    StageConfig off = stage(L, 2, dp, 1, 3, 0, 1, 0);
    off.plan.wo = 0.3, off.plan.oo = 0.7;
    double o[ST_OUTPUTS], wdev = 0, odev = 0, host = 0;
    stage_eval_scalar(&m, &off, o);
    for (int i = 0; i < 3; i++) {
        int64_t shard = (parts[i] + dp - 1) / dp;
        double hw = floor(0.3 * (double)shard), ho = floor(0.7 * (double)shard);
        wdev += (double)times[i] * 2 * ((double)shard - hw);
        odev += (double)times[i] * 12 * ((double)shard - ho);
        host += (double)times[i] * (2 * hw + 12 * ho);
    }
    double tok = 2.0 * cfg->model.seq_len;  // tokens per micro-batch (b = 2): ids, targets, losses, each rank's losses
    ok(o[ST_WEIGHTS] == wdev && o[ST_OPTIMIZER] == odev && o[ST_HOST] == host + (3 + dp) * 4 * tok,
       "offload: each part keeps n - floor(ratio n) on the device; host = the rest + token staging");
    stage_model_free(&m);

    MistConfig f32 = *cfg;
    f32.train.precision = PREC_FP32;
    if (stage_model_build(&m, &f32, hw, NULL, 1, 1, err, sizeof err) == 0) {
        double o[ST_OUTPUTS];
        StageConfig c = stage(L, 2, 1, 1, 0, 0, 1, 0);
        stage_eval_scalar(&m, &c, o);
        ok(o[ST_WEIGHTS] == 4 * psi && o[ST_GRADS] == 4 * psi && o[ST_OPTIMIZER] == 8 * psi,
           "fp32 training: weights 4, grads 4, Adam m+v 8 bytes per parameter");
        stage_model_free(&m);
    }
}

static void test_memory_shape(const MistConfig *cfg, const HwProfile *hw) {
    StageModel m;
    if (!cost_model_built(&m, cfg, hw, 0, 0, "middle stage")) return;
    // checkpointed blocks keep only their input: 2 s b h bytes in bf16
    int L = 3, b = 2;
    double o[ST_OUTPUTS];
    StageConfig sc = stage(L, b, 1, 1, 0, L, 4, 0);
    stage_eval_scalar(&m, &sc, o);
    double sbh = (double)cfg->model.seq_len * b * cfg->model.hidden;
    ok(o[ST_ACTIVATIONS] == L * 2 * sbh, "full recompute: activations = L * 2sbh (Megatron)");
    sc.p = 2;
    stage_eval_scalar(&m, &sc, o);
    ok(o[ST_ACTIVATIONS] == 3 * L * 2 * sbh, "two more micro-batches in flight: 3x the saved activations");

    // monotonicity: more ckpt -> less memory, more time
    int mono_mem = 1, mono_time = 1;
    double prev_peak = INFINITY, prev_t = 0;
    for (int c = 0; c <= L; c++) {
        sc = stage(L, b, 2, 1, 1, c, 4, 1);
        stage_eval_scalar(&m, &sc, o);
        double peak = fmax(o[ST_PEAK_FWD], o[ST_PEAK_BWD]);
        if (!(peak < prev_peak)) mono_mem = 0;
        if (!(o[ST_T] > prev_t)) mono_time = 0;
        prev_peak = peak;
        prev_t = o[ST_T];
    }
    ok(mono_mem, "each extra checkpointed block lowers the peak");
    ok(mono_time, "each extra checkpointed block raises t");
    // more offload -> less device memory, more host memory
    const int which[4] = {SYM_WO, SYM_GO, SYM_OO, SYM_AO};
    const char *names[4] = {"wo", "go", "oo", "ao"};
    for (int k = 0; k < 4; k++) {
        int mono = 1, host_up = 1;
        double prev = INFINITY, prev_host = -1;
        for (int step = 0; step <= 4; step++) {
            sc = stage(L, b, 2, 1, 1, 1, 4, 1);
            double r = step / 4.0;
            // weights offload with grads (their buffers move together)
            if (which[k] == SYM_WO) sc.plan.wo = r, sc.plan.go = r;
            if (which[k] == SYM_GO) sc.plan.go = r;
            if (which[k] == SYM_OO) sc.plan.oo = r;
            if (which[k] == SYM_AO) sc.plan.ao = r;
            stage_eval_scalar(&m, &sc, o);
            double dev = o[ST_WEIGHTS] + o[ST_GRADS] + o[ST_OPTIMIZER] + o[ST_ACTIVATIONS];
            if (step > 0 && !(dev < prev)) mono = 0;
            if (step > 0 && !(o[ST_HOST] > prev_host)) host_up = 0;
            prev = dev;
            prev_host = o[ST_HOST];
        }
        ok(mono && host_up, "more %s offload: less resident device memory, more host memory", names[k]);
    }
    stage_model_free(&m);
}

// Activation bytes of one micro-batch of the tiny fp32 GPT at b = 1, from the
// tensor shapes the runtime carves (models/model.h).
typedef struct {
    double N, X, R, S, D, H;  // rows; block input, other saved, scratch, grad buffers, head
} HandActs;

static HandActs hand_acts(const ModelConfig *mc) {
    double b = 1, s = mc->seq_len, C = mc->hidden, F = mc->ffn_hidden, V = mc->vocab, a = mc->heads;
    double N = b * s, f = 4;  // rows, bytes per element (fp32; statistics are fp32 too)
    HandActs h;
    h.N = N;
    h.X = N * C * f;
    // ln1, its mean and rstd, qkv, att, lse (b, a, s), mid, ln2 + stats, fc (pre-GELU), act
    h.R = N * C * f + 2 * N * 4 + 3 * N * C * f + N * C * f + b * a * s * 4 + N * C * f + N * C * f + 2 * N * 4 +
          N * F * f + N * F * f;
    h.S = N * C * f;
    h.D = (N * C + N * C + N * C + 3 * N * C + N * F + N * F) * f;  // d_res d_ln d_att d_qkv d_act d_fc
    h.H = h.X + N * C * f + 2 * N * 4 + N * V * f;                  // x_out, lnf + stats, logits
    return h;
}

// One stage holding the whole model, fp32, dp = 1, ZeRO-0, no offload: the
// peak by hand with the runtime's order of life (runtime/model_runtime.c):
// every block keeps its input X and its other saved tensors R, the last
// block's forward adds its output and scratch, the head adds the final norm
// and the logits, backward adds the gradient buffers D; a checkpointed block
// keeps X only and recomputes R (+ scratch) in backward.
static void test_memory_hand(const MistConfig *cfg, const HwProfile *hw) {
    MistConfig c = *cfg;
    c.train.precision = PREC_FP32;
    c.model.layers = 2;
    StageModel m;
    if (!cost_model_built(&m, &c, hw, 1, 1, "stage")) return;
    const ModelConfig *mc = &c.model;
    HandActs a = hand_acts(mc);
    double L = 2, N = a.N, X = a.X, R = a.R, S = a.S, D = a.D, H = a.H;
    double states = 16.0 * (double)model_param_count(mc);  // W 4 + G 4 + Adam m, v 8
    double io = 4 + 3 * N * 4;  // grad-norm accumulator, token ids, targets, losses
    double o[ST_OUTPUTS];
    StageConfig sc = stage(2, 1, 1, 1, 0, 0, 1, 0);
    stage_eval_scalar(&m, &sc, o);
    double want = states + io + L * (X + R) + fmax(fmax(X + S, D), fmax(H, H + D));
    ok(fmax(o[ST_PEAK_FWD], o[ST_PEAK_BWD]) == want, "peak by hand, no checkpointing: %.0f bytes", want);
    sc.plan.ckpt = 2;
    stage_eval_scalar(&m, &sc, o);
    want = states + io + L * X + fmax(fmax(X + S + R, D + R + S), fmax(H, H + D));
    ok(fmax(o[ST_PEAK_FWD], o[ST_PEAK_BWD]) == want, "peak by hand, every block checkpointed: %.0f bytes", want);
    stage_model_free(&m);
}

// Pipeline stages by hand (fp32, 2 blocks per stage, b = 1, dp = 2, ZeRO-0,
// no offload), from what a stage of runtime/pipeline_run.c holds: K = p + 1
// slots of saved activations (1F1B: the K-th forward runs while K - 1
// micro-batches wait for their backward, the backward of the oldest starts
// with K saved sets) and K slots of token ids on every stage, targets and
// losses on every stage, and per neighbouring stage three (b, s, h) boundary
// buffers (one receive, two sends: the pipeline sends device to device);
// host: token ids, targets, losses, every dp rank's losses; the last stage of
// a tied GPT keeps a copy of wte.
static void test_memory_pipeline_hand(const MistConfig *cfg, const HwProfile *hw) {
    MistConfig c = *cfg;
    c.train.precision = PREC_FP32;
    const ModelConfig *mc = &c.model;
    HandActs a = hand_acts(mc);
    double L = 2, dp = 2, N = a.N, X = a.X, M = L * (a.X + a.R);
    double blk = (double)part_param_count(mc, PART_BLOCK), pre = (double)part_param_count(mc, PART_PRE);
    double post = (double)part_param_count(mc, PART_POST), wte = (double)mc->vocab * mc->hidden;
    double host_io = (3 + dp) * 4 * N;
    struct {
        int has_pre, has_post, p;
        double states, transient, boundary;
        const char *what;
    } cases[] = {
        {1, 0, 1, 16 * (pre + L * blk), fmax(a.X + a.S, a.D), 3 * X, "first of 2 stages, G = 4 (K = 2)"},
        {0, 0, 2, 16 * L * blk, fmax(a.X + a.S, a.D), 6 * X, "second of 4 stages, G = 4 (K = 3)"},
        {0, 1, 0, 16 * (L * blk + post + wte), a.H + a.D, 3 * X, "last stage, tied head (wte copy)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        StageModel m;
        if (!cost_model_built(&m, &c, hw, cases[i].has_pre, cases[i].has_post, "stage")) continue;
        double K = cases[i].p + 1, o[ST_OUTPUTS];
        // norm accumulator, K token slots, targets, losses, boundary buffers
        double io = 4 + (K + 1) * 4 * N + 4 * N + cases[i].boundary;
        StageConfig sc = stage((int)L, 1, (int)dp, 1, 0, 0, 4, cases[i].p);
        stage_eval_scalar(&m, &sc, o);
        double want = cases[i].states + io + K * M + cases[i].transient;
        ok(fmax(o[ST_PEAK_FWD], o[ST_PEAK_BWD]) == want && o[ST_HOST] == host_io,
           "%s: device peak %.0f (states + I/O + boundary + K M + transient), host %.0f by hand (got %.0f, %.0f)",
           cases[i].what, want, host_io, fmax(o[ST_PEAK_FWD], o[ST_PEAK_BWD]), o[ST_HOST]);
        stage_model_free(&m);
    }
}

// Sequence parallelism (symbol sp): a middle stage's kept activations are L
// times a block's saved bytes from model_acts_sp (1/tp of the tp = 1 block's),
// the time changes (all-gathers + reduce-scatters, norms on N/tp rows), and
// sp at tp = 1 never fits.
static void test_sequence_parallel(const MistConfig *cfg, const HwProfile *hw) {
    StageModel m;
    if (!cost_model_built(&m, cfg, hw, 0, 0, "stage")) return;
    int L = cfg->model.layers, tp = 4;
    double o[2][ST_OUTPUTS], one[ST_OUTPUTS], bad[ST_OUTPUTS], want[2] = {0, 0}, want_tp1 = 0;
    for (int sp = 0; sp < 2; sp++) {
        StageConfig c = stage(L, 2, 1, tp, 0, 0, 1, 0);
        c.plan.sp = sp;
        stage_eval_scalar(&m, &c, o[sp]);
        ActSpec a[MODEL_MAX_ACTS];
        int n = model_acts_sp(&cfg->model, PART_BLOCK, 2, cfg->model.seq_len, tp, sp, a, MODEL_MAX_ACTS);
        for (int i = 0; i < n; i++) want[sp] += a[i].saved ? (double)a[i].elems * (a[i].f32 ? 4 : 2) : 0;
    }
    StageConfig c1 = stage(L, 2, 1, 1, 0, 0, 1, 0);
    stage_eval_scalar(&m, &c1, one);
    ActSpec a[MODEL_MAX_ACTS];
    int n = model_acts(&cfg->model, PART_BLOCK, 2, cfg->model.seq_len, 1, a, MODEL_MAX_ACTS);
    for (int i = 0; i < n; i++) want_tp1 += a[i].saved ? (double)a[i].elems * (a[i].f32 ? 4 : 2) : 0;
    ok(o[0][ST_ACTIVATIONS] == L * want[0] && o[1][ST_ACTIVATIONS] == L * want[1] &&
           o[1][ST_ACTIVATIONS] * tp == one[ST_ACTIVATIONS] && one[ST_ACTIVATIONS] == L * want_tp1,
       "sp at tp = %d: kept activations %g = L x model_acts_sp's block = 1/tp of tp = 1's %g (sp = 0: %g)", tp,
       o[1][ST_ACTIVATIONS], one[ST_ACTIVATIONS], o[0][ST_ACTIVATIONS]);
    ok(o[1][ST_PEAK_BWD] < o[0][ST_PEAK_BWD] && o[1][ST_BLOCK_BWD] != o[0][ST_BLOCK_BWD] && isfinite(o[1][ST_T]) &&
           o[1][ST_T] > 0,
       "sp: lower peak (%g < %g), another block backward time (%g vs %g s)", o[1][ST_PEAK_BWD], o[0][ST_PEAK_BWD],
       o[1][ST_BLOCK_BWD], o[0][ST_BLOCK_BWD]);
    // the memory model's closed form of the sp classes holds for these models (else it selects tables)
    ModelConfig ms[3] = {cfg->model, model_family_config(FAMILY_LLAMA, 2, 64, 4, 256, 32), cfg->model};
    ms[1].kv_heads = 2;
    ms[2].parallel_block = 1;
    int affine = 1;
    for (int k = 0; k < 3; k++) {
        ActLevel plain[MEM_TP_LEVELS], with_sp[MEM_TP_LEVELS];
        SpTerms t;
        memory_act_levels(&ms[k], PART_BLOCK, 2, plain);
        memory_act_levels_sp(&ms[k], PART_BLOCK, 2, with_sp);
        memory_sp_terms(&ms[k], 2, plain, with_sp, &t);
        affine &= t.affine && !t.valid[0] && t.valid[1];
    }
    ok(affine, "sp's memory classes in closed form (GPT, Llama GQA, parallel blocks), tp = 1 not valid");
    c1.plan.sp = 1;
    stage_eval_scalar(&m, &c1, bad);
    ok(bad[ST_PEAK_FWD] >= 1e29, "sp at tp = 1 is an impossible plan (peak %g bytes)", bad[ST_PEAK_FWD]);
    stage_model_free(&m);
}

int main(void) {
    MistConfig cfg;
    HwProfile hw;
    cost_fixture(&cfg, &hw);
    test_zero(&cfg, &hw);
    test_memory_shape(&cfg, &hw);
    test_memory_hand(&cfg, &hw);
    test_memory_pipeline_hand(&cfg, &hw);
    test_sequence_parallel(&cfg, &hw);
    return tap_done();
}
