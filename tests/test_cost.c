// The cost and memory model against hand computations and published formulas:
// the overlap window rule, the 1F1B total, ZeRO state sizes (the runtime's
// padding and offload rounding), the Megatron FLOPs formula, checkpointed
// activations, a tiny stage's time and memory peak by hand (one stage and
// pipeline stages: in-flight slots, boundary buffers, the tied wte copy),
// monotonicity in ckpt and offload, batched == scalar evaluation, and models
// specialised to a ZeRO / offload pattern == the general model; the op names a
// measured op table accepts are those of the model description.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "models/model.h"
#include "models/model_flops.h"
#include "models/ops.h"
#include "planner/cost_terms.h"  // overlap_seconds, overlap_expr
#include "planner/stage_model.h"
#include "planner/optable.h"
#include "tests/tap.h"

static void tiny_config(MistConfig *c, Precision prec) {
    memset(c, 0, sizeof *c);
    snprintf(c->source, sizeof c->source, "test");
    c->model = model_family_config(FAMILY_GPT, 4, 64, 4, 256, 32);
    c->train.global_batch = 8;
    c->train.precision = prec;
    c->cluster.nodes = 1;
    c->cluster.gpus_per_node = 8;
}

static StageConfig stage(int L, int b, int dp, int tp, int zero, int ckpt, int G, int p) {
    StageConfig s = {{.layers = L, .dp = dp, .tp = tp, .b = b, .zero = zero, .ckpt = ckpt}, G, p};
    return s;
}

static int64_t part_param_count(const ModelConfig *m, ModelPart part) {
    ParamSpec spec[64];
    int n = model_params(m, part, spec, 64);
    int64_t t = 0;
    for (int i = 0; i < n; i++) t += spec[i].rows * spec[i].cols;
    return t;
}

static double frand(unsigned *state) {
    *state = *state * 1103515245u + 12345u;
    return ((*state >> 8) & 0xffff) / 65536.0;
}

static void test_overlap(void) {
    HwProfile p;
    profile_preset(&p, "gcp-l4");
    // two streams, compute slowed 1.1676x by NCCL: C + N - N/1.1676 (docs/design.md §4)
    double x[4] = {10e-3, 4e-3, 0, 0};
    ok(near(overlap_seconds(&p, x), 10e-3 + 4e-3 - 4e-3 / 1.1676, 1e-15, 1e-12, "C+N"), "L4 C+N window: C + N(1 - 1/1.1676)");
    // three streams by hand with the L4 [C,N,H2D] and then [C,H2D] factors
    double y[4] = {6, 1, 1, 0};
    double w1 = fmin(fmin(6 * 2.087, 1 * 1.001), 1 * 2.393);  // N finishes first
    double c1 = 6 - w1 / 2.087, h1 = 1 - w1 / 2.393;
    double w2 = fmin(c1 * 1.0152, h1 * 1.0005);               // then H2D
    double c2 = c1 - w2 / 1.0152;
    ok(near(overlap_seconds(&p, y), w1 + w2 + c2, 1e-12, 1e-12, "C+N+H"), "L4 three-stream window by hand");
    // no interference: the longest stream
    HwProfile q = p;
    for (unsigned m = 0; m < STREAM_SUBSETS; m++)
        for (int s = 0; s < STREAM_COUNT; s++) q.slowdown[m][s] = 1.0;
    double z[4] = {3, 2, 5, 1};
    ok(near(overlap_seconds(&q, z), 5, 0, 1e-12, "max"), "factors 1: window = longest stream");
    HwProfile cpu;
    profile_preset(&cpu, "cpu");
    ok(near(overlap_seconds(&cpu, z), 11, 0, 1e-12, "sum"), "serialised streams: window = sum");
    double one[4] = {0, 0, 2.5, 0};
    ok(overlap_seconds(&p, one) == 2.5, "a single stream runs alone");

    // symbolic == scalar on random inputs (with zeros)
    ExprCtx *ctx = expr_ctx_new();
    const char *names[4] = {"xc", "xn", "xh", "xd"};
    Expr in[4];
    int idx[4];
    for (int s = 0; s < 4; s++) {
        in[s] = ex_sym(ctx, names[s]);
        idx[s] = expr_sym_index(ctx, names[s]);
    }
    Expr e = overlap_expr(ctx, &p, in);
    unsigned seed = 7;
    int agree = 1;
    for (int trial = 0; trial < 2000 && agree; trial++) {
        double v[64] = {0}, xs[4];
        for (int s = 0; s < 4; s++) {
            xs[s] = frand(&seed) < 0.3 ? 0 : frand(&seed) * 1e-2;
            v[idx[s]] = xs[s];
        }
        double a = overlap_seconds(&p, xs), b = expr_eval(ctx, e, v);
        agree = memcmp(&a, &b, sizeof a) == 0;  // the same operations in the same order
        if (!agree) diag("x = %g %g %g %g: scalar %.17g symbolic %.17g", xs[0], xs[1], xs[2], xs[3], a, b);
    }
    ok(agree, "symbolic overlap == scalar overlap bitwise on 2000 random windows");
    expr_ctx_free(ctx);
}

static void test_pipeline(void) {
    double t1[1] = {2}, d1[1] = {3};
    ok(near(pipeline_1f1b_seconds(1, 8, t1, d1), 8 * 2 + 3, 0, 1e-15, "one stage"), "one stage: G*t + d");
    double t[3] = {1, 2, 1}, d[3] = {3, 1, 5};
    // (G-1)*max t + sum t + max(0, 3 - 0, 1 - 1, 5 - 3) = 3*2 + 4 + 3
    ok(near(pipeline_1f1b_seconds(3, 4, t, d), 13, 0, 1e-15, "3 stages"), "1F1B by hand: 3 stages, G=4 -> 13");
    double t2[2] = {2, 2}, d2[2] = {0.5, 1};
    ok(near(pipeline_1f1b_seconds(2, 2, t2, d2), 2 + 4 + 0.5, 0, 1e-15, "hidden extra"),
       "1F1B: a later stage's extra hides behind the fill (2 stages)");
}

// Interleaved 1F1B (docs/pipeline.md): v = 1 is the 1F1B total, and with uniform
// chunks the bubble is (P - 1)/v of a rank's micro-batch (tests/test_interleave.c
// checks the order itself on a timed simulation)
static void test_pipeline_interleaved(void) {
    double t[3] = {1, 2, 1}, d[3] = {3, 1, 5};
    double a = pipeline_interleaved_seconds(3, 1, 4, t, d), b = pipeline_1f1b_seconds(3, 4, t, d);
    ok(memcmp(&a, &b, sizeof a) == 0, "interleaved, v = 1: the 1F1B total bit for bit (%g)", a);
    double tc[8], dc[8] = {0};
    for (int c = 0; c < 8; c++) tc[c] = 0.5;  // P 4 ranks of 2 chunks: a rank's micro-batch takes 1
    double T = pipeline_interleaved_seconds(4, 2, 8, tc, dc);
    ok(near(T, 8 * 1.0 + (4 - 1) / 2.0 * 1.0, 0, 1e-15, "bubble"), "interleaved, P 4, v 2, G 8: G + (P - 1)/v = 9.5 (%g)",
       T);
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
    if (stage_model_build(&m, cfg, hw, NULL, 1, 1, err, sizeof err) != 0) {
        ok(0, "stage model builds: %s", err);
        return;
    }
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

static void test_flops(const MistConfig *cfg) {
    MistConfig c = *cfg;
    c.model.vocab = 50304;
    c.model.hidden = 2048;
    c.model.heads = 16;
    c.model.kv_heads = 16;
    c.model.ffn_hidden = 8192;
    c.model.layers = 24;
    c.model.seq_len = 2048;
    c.train.global_batch = 512;
    double B = 512, s = 2048, L = 24, h = 2048, V = 50304;
    double megatron = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h));
    ok(near(model_flops_per_iteration(&c), megatron, 0, 1e-12, "megatron"),
       "model FLOPs = 72 B s L h^2 (1 + s/6h + V/12Lh) for GPT-3 1.3B");
}

// one block, G = 1, dp = tp = 1 on a profile with unbounded bandwidth and no
// launch cost: every op costs flops / peak, backward 2x forward
static void test_hand_time(const MistConfig *cfg) {
    HwProfile hw;
    profile_preset(&hw, "cpu");
    hw.peak_flops[DT_BF16] = 1e12;
    hw.flops_efficiency = 1.0;
    hw.mem_bandwidth = 1e30;
    hw.launch_seconds = 0;
    MistConfig c = *cfg;
    c.model.layers = 1;
    c.train.global_batch = 2;
    StageModel m;
    char err[256];
    if (stage_model_build(&m, &c, &hw, NULL, 1, 1, err, sizeof err) != 0) {
        ok(0, "stage model builds: %s", err);
        return;
    }
    double T = 2 * 32, h = 64, s = 32, F = 256, V = 256;
    // The roofline uses the FLOPs the kernels execute (models/ops.h hw_flops),
    // with infinite bandwidth the compute term alone. Block forward: ln1 8Th,
    // qkv 6Th^2, causal flash attention 2Th(s+1) (only the s(s+1)/2 pairs on
    // or below the diagonal, QK^T and PV), attn_proj 2Th^2, ln2 fused with the
    // first residual add 9Th, fc 2ThF with its GELU epilogue 10TF, fc_proj
    // 2TFh, the second residual add Th. Backward: matmuls 2x, attention 2.5x
    // (five products), layernorms 12Th, GELU 15TF, residual adds none.
    double blk_f = 8 * T * h + 6 * T * h * h + 2 * T * h * (s + 1) + 2 * T * h * h + 9 * T * h + 2 * T * h * F +
                   10 * T * F + 2 * T * F * h + T * h;
    double blk_b = 12 * T * h + 12 * T * h * h + 5 * T * h * (s + 1) + 4 * T * h * h + 12 * T * h + 4 * T * h * F +
                   15 * T * F + 4 * T * F * h;
    // pre: token + position lookup-add Th forward, 2Th backward (gradient scatter);
    // post: final layernorm 8Th / 12Th, LM head 2ThV / 4ThV, fused cross-entropy 5TV forward only
    double pre = T * h + 2 * T * h;
    double post = 8 * T * h + 2 * T * h * V + 5 * T * V + 12 * T * h + 4 * T * h * V;
    double want = (blk_f + blk_b + pre + post) / 1e12;
    double o[ST_OUTPUTS];
    StageConfig sc = stage(1, 2, 1, 1, 0, 0, 1, 0);
    stage_eval_scalar(&m, &sc, o);
    ok(near(o[ST_T], want, 1e-15, 1e-9, "t"), "one block, one stage, G=1: t = executed FLOPs / peak (%.6g s)", want);
    ok(o[ST_D] == 0, "G = 1: d = 0");
    // dp = 2 with ZeRO-0, G = 2: the extra of the last micro-batch is the
    // exposed all-reduce of every part's grads (one block: nothing to hide under)
    c.train.global_batch = 8;
    stage_model_free(&m);
    if (stage_model_build(&m, &c, &hw, NULL, 1, 1, err, sizeof err) != 0) return;
    sc = stage(1, 2, 2, 1, 0, 0, 2, 0);
    stage_eval_scalar(&m, &sc, o);
    double P = (double)model_param_count(&c.model);
    LinkFit f = profile_coll_fit(&hw, 1, 2);
    double ar = 2.1 * (2 * P / f.k * 0.5 + f.beta * 3);  // three parts, each with its own beta
    ok(near(o[ST_D], ar, 1e-12, 1e-9, "d"), "dp=2, G=2: d = all-reduce of the grads, 2.1 (2P/k/2 + 3 beta)");
    stage_model_free(&m);
}

// The GEMM model by hand (docs/design.md, "Compute time"): out (m x n), inner
// k, on tm x tn tiles over S SMs takes ceil(ceil(m/tm) ceil(n/tn) / S) waves
// of 2 tm tn (k + k0) S / (peak eff) each.
static double gemm_by_hand(double m, double n, double k, const HwProfile *hw) {
    double tiles = ceil(m / hw->gemm_tile_m) * ceil(n / hw->gemm_tile_n);
    double S = hw->gemm_sms;
    return ceil(tiles / S) * S * 2 * hw->gemm_tile_m * hw->gemm_tile_n * (k + hw->gemm_k_overhead) /
           (hw->peak_flops[DT_BF16] * hw->gemm_efficiency);
}

static double block_time(const MistConfig *cfg, const HwProfile *hw, int b) {
    MistConfig c = *cfg;
    c.model.layers = 1;
    c.train.global_batch = b;
    StageModel m;
    char err[256];
    if (stage_model_build(&m, &c, hw, NULL, 0, 0, err, sizeof err) != 0) return NAN;
    double o[ST_OUTPUTS];
    StageConfig sc = stage(1, b, 1, 1, 0, 0, 1, 0);
    stage_eval_scalar(&m, &sc, o);
    stage_model_free(&m);
    return o[ST_T];
}

// One block with the GEMM model on against the fixed-fraction roofline at
// efficiency 1, bandwidth unbounded: the difference is the four GEMMs' model
// time (forward out = inp W^T; backward dinp (m x k, inner n) and dW (n x k,
// inner m)) less their 6 m n k / peak. Tiles that do not divide the shapes and
// an SM count that does not divide the tiles (dinp of qkv: 16 tiles on 3 SMs,
// 6 waves), so both quantizations count.
static void test_gemm_model(const MistConfig *cfg) {
    HwProfile flat;
    profile_preset(&flat, "cpu");
    flat.peak_flops[DT_BF16] = 1e12;
    flat.flops_efficiency = 1.0;
    flat.mem_bandwidth = 1e30;
    flat.launch_seconds = 0;
    HwProfile tiled = flat;
    tiled.gemm_sms = 3, tiled.gemm_tile_m = 24, tiled.gemm_tile_n = 16;
    tiled.gemm_efficiency = 0.5, tiled.gemm_k_overhead = 8;
    double h = 64, F = 256, M = 3 * 32;  // b = 3, s = 32
    const double shape[4][2] = {{3 * h, h}, {h, h}, {F, h}, {h, F}};  // qkv, attn_proj, fc, fc_proj: n, k
    double want = 0;
    for (int i = 0; i < 4; i++) {
        double n = shape[i][0], k = shape[i][1];
        want += gemm_by_hand(M, n, k, &tiled) + gemm_by_hand(M, k, n, &tiled) + gemm_by_hand(n, k, M, &tiled);
        want -= 6 * M * n * k / 1e12;
    }
    double got = block_time(cfg, &tiled, 3) - block_time(cfg, &flat, 3);
    ok(near(got, want, 1e-15, 1e-9, "gemm"), "GEMM model: one block's four GEMMs by hand, tiles and waves (%.6g s)", want);
    // attention on its own curve: attention_efficiency * s/(s + seq_half) *
    // hd/(hd + head_half) is the same time as a flat fraction of that value
    HwProfile curve = tiled, flat_att = tiled;
    curve.attention_efficiency = 0.6, curve.attention_seq_half = 32, curve.attention_head_half = 16;
    flat_att.flops_efficiency = 0.6 * 32.0 / (32 + 32) * 16.0 / (16 + 16);  // s = 32, head size 64 / 4 = 16
    double a = block_time(cfg, &curve, 2), b = block_time(cfg, &flat_att, 2);
    ok(near(a, b, 1e-15, 1e-12, "att"), "attention curve: 0.6 s/(s+32) hd/(hd+16) at s 32, hd 16 = a flat 0.15 (%.6g s)", a);
}

static void test_memory_shape(const MistConfig *cfg, const HwProfile *hw) {
    StageModel m;
    char err[256];
    if (stage_model_build(&m, cfg, hw, NULL, 0, 0, err, sizeof err) != 0) {
        ok(0, "middle stage model builds: %s", err);
        return;
    }
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

// One stage holding the whole model, fp32, dp = 1, ZeRO-0, no offload: the
// peak by hand from the tensor shapes the runtime carves (models/model.h),
// with the runtime's order of life (runtime/model_runtime.c): every block
// keeps its input X and its other saved tensors R, the last block's forward
// adds its output and scratch, the head adds the final norm and the logits,
// backward adds the gradient buffers D; a checkpointed block keeps X only and
// recomputes R (+ scratch) in backward.
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
    char err[256];
    if (stage_model_build(&m, &c, hw, NULL, 1, 1, err, sizeof err) != 0) {
        ok(0, "stage model builds: %s", err);
        return;
    }
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
        char err[256];
        if (stage_model_build(&m, &c, hw, NULL, cases[i].has_pre, cases[i].has_post, err, sizeof err) != 0) {
            ok(0, "stage model builds: %s", err);
            continue;
        }
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

// The pipeline sends of a middle stage by hand (planner/schedule.c, docs/pipeline.md): per
// micro-batch and neighbour one message of A = b s h bytes on the critical path, A / k + beta
// on the profile's two-member line (inside a node here: dp tp < M), and two device copies of
// A (2A bytes of traffic each); a profile with staged collectives pays at least the host round
// trip d2h(A) + h2d(A). t minus the blocks' own passes leaves the two boundaries.
static void test_boundary_time(const MistConfig *cfg, const HwProfile *hw) {
    for (int staged = 0; staged < 2; staged++) {
        HwProfile h = *hw;
        h.staged_collectives = staged;
        if (staged) h.d2h.k = h.h2d.k = 1e8;  // slow host copies: the round trip is the larger term
        MistConfig c = *cfg;
        c.cluster.gpus_per_node = 8;
        StageModel m;
        char err[256];
        if (stage_model_build(&m, &c, &h, NULL, 0, 0, err, sizeof err) != 0) {
            ok(0, "middle stage model builds: %s", err);
            return;
        }
        double o[ST_OUTPUTS];
        StageConfig sc = stage(2, 1, 2, 1, 0, 0, 4, 2);
        stage_eval_scalar(&m, &sc, o);
        double A = 1.0 * c.model.seq_len * c.model.hidden * 2;  // bf16 (b, s, h)
        LinkFit f = profile_coll_fit(&h, 1, 2);
        double message = A / f.k + f.beta;
        if (staged) message = fmax(message, A / h.d2h.k + h.d2h.beta + A / h.h2d.k + h.h2d.beta);
        double copy = 2 * A / (h.mem_bandwidth * h.bandwidth_efficiency) + h.launch_seconds;
        double want = 2 * (message + 2 * copy), got = o[ST_T] - o[ST_FWD_OTHER] - o[ST_BWD_OTHER];
        ok(near(got, want, 1e-15, 1e-9, "boundaries"),
           "middle stage, %s: two boundaries of one message (%.3g s) and two device copies (%.3g s) each: %.6g s",
           staged ? "staged profile" : "device-direct", message, copy, want);
        stage_model_free(&m);
    }
}

static void test_batched(const MistConfig *cfg, const HwProfile *hw) {
    StageModel m;
    char err[256];
    int fails = 0;
    for (int variant = 0; variant < 4; variant++) {
        int has_pre = variant & 1, has_post = variant >> 1;
        if (stage_model_build(&m, cfg, hw, NULL, has_pre, has_post, err, sizeof err) != 0) {
            ok(0, "stage model builds: %s", err);
            return;
        }
        enum { N = 500 };
        static double col[STAGE_SYMS][N], res[ST_OUTPUTS][N];
        StageConfig cs[N];
        unsigned seed = 11 + variant;
        for (int i = 0; i < N; i++) {
            StageConfig *c = &cs[i];
            memset(c, 0, sizeof *c);  // every knob the draws below leave out is 0
            c->plan.layers = 1 + (int)(frand(&seed) * 4);
            c->plan.b = 1 << (int)(frand(&seed) * 3);
            c->plan.dp = 1 << (int)(frand(&seed) * 5);
            c->plan.tp = 1 << (int)(frand(&seed) * 4);
            c->plan.zero = (int)(frand(&seed) * 4);
            c->plan.ckpt = (int)(frand(&seed) * (c->plan.layers + 1));
            c->G = 1 + (int)(frand(&seed) * 8);
            c->p = (int)(frand(&seed) * c->G);
            c->plan.wo = frand(&seed) < 0.5 ? 0 : frand(&seed);
            c->plan.go = frand(&seed) < 0.5 ? 0 : frand(&seed);
            c->plan.oo = frand(&seed) < 0.5 ? 0 : frand(&seed);
            c->plan.ao = frand(&seed) < 0.5 ? 0 : frand(&seed);
            c->plan.sp = frand(&seed) < 0.5;  // sequence parallelism; at tp = 1 an impossible plan (1e30 bytes)
            double v[STAGE_SYMS];
            stage_sym_values(c, v);
            for (int s = 0; s < STAGE_SYMS; s++) col[s][i] = v[s];
        }
        const double *cols[STAGE_SYMS];
        double *outs[ST_OUTPUTS];
        for (int s = 0; s < STAGE_SYMS; s++) cols[s] = col[s];
        for (int k = 0; k < ST_OUTPUTS; k++) outs[k] = res[k];
        stage_eval_batch(&m, cols, outs, N);
        for (int i = 0; i < N; i++) {
            double o[ST_OUTPUTS];
            stage_eval_scalar(&m, &cs[i], o);
            for (int k = 0; k < ST_OUTPUTS; k++)
                if (!(fabs(o[k] - res[k][i]) <= 1e-9 * fabs(o[k]) + 1e-15)) {
                    if (fails++ < 5) diag("candidate %d output %s: scalar %.17g batched %.17g", i, stage_output_names[k], o[k], res[k][i]);
                }
        }
        stage_model_free(&m);
    }
    ok(fails == 0, "batched == scalar on 2000 random candidates over 4 stage kinds (%d mismatches)", fails);
}

// A model specialised to a pattern (ZeRO level, which offload ratios are
// nonzero) must give the general model's results on that pattern's
// configurations: every one of the 64 patterns, first+last and middle stages.
static void test_specialised(const MistConfig *cfg, const HwProfile *hw) {
    int fails = 0, smaller = 1, built = 0;
    char err[256];
    for (int variant = 0; variant < 2; variant++) {
        int edge = variant == 0;  // 1: a single stage (pre and post); 0: a middle stage
        StageModel general;
        if (stage_model_build(&general, cfg, hw, NULL, edge, edge, err, sizeof err) != 0) {
            ok(0, "stage model builds: %s", err);
            return;
        }
        int general_instr = expr_program_num_instructions(general.prog);
        for (int pat = 0; pat < 64; pat++) {
            StagePattern sp = {pat & 3, (pat >> 2) & 1, (pat >> 3) & 1, (pat >> 4) & 1, (pat >> 5) & 1};
            StageModel m;
            if (stage_model_build_pattern(&m, cfg, hw, NULL, edge, edge, &sp, err, sizeof err) != 0) {
                fails++;
                diag("pattern %d does not build: %s", pat, err);
                continue;
            }
            built++;
            if (expr_program_num_instructions(m.prog) > general_instr) smaller = 0;
            enum { N = 40 };
            static double col[STAGE_SYMS][N], res[ST_OUTPUTS][N];
            StageConfig cs[N];
            unsigned seed = 101 + pat + 64 * variant;
            for (int i = 0; i < N; i++) {
                StageConfig *c = &cs[i];
                c->plan.layers = 1 + (int)(frand(&seed) * 4);
                c->plan.b = 1 << (int)(frand(&seed) * 3);
                c->plan.dp = 1 << (int)(frand(&seed) * 5);
                c->plan.tp = 1 << (int)(frand(&seed) * 4);
                c->plan.zero = sp.zero;
                c->plan.ckpt = (int)(frand(&seed) * (c->plan.layers + 1));
                c->G = 1 + (int)(frand(&seed) * 8);
                c->p = (int)(frand(&seed) * c->G);
                // a nonzero ratio in (0, 1]
                c->plan.wo = sp.wo ? 1 - frand(&seed) : 0;
                c->plan.go = sp.go ? 1 - frand(&seed) : 0;
                c->plan.oo = sp.oo ? 1 - frand(&seed) : 0;
                c->plan.ao = sp.ao ? 1 - frand(&seed) : 0;
                if (!stage_pattern_has(&sp, c)) fails++;
                double v[STAGE_SYMS];
                stage_sym_values(c, v);
                for (int s = 0; s < STAGE_SYMS; s++) col[s][i] = v[s];
            }
            const double *cols[STAGE_SYMS];
            double *outs[ST_OUTPUTS];
            for (int s = 0; s < STAGE_SYMS; s++) cols[s] = col[s];
            for (int k = 0; k < ST_OUTPUTS; k++) outs[k] = res[k];
            stage_eval_batch(&m, cols, outs, N);
            for (int i = 0; i < N; i++) {
                double o[ST_OUTPUTS];
                stage_eval_scalar(&general, &cs[i], o);
                for (int k = 0; k < ST_OUTPUTS; k++)
                    if (!(fabs(o[k] - res[k][i]) <= 1e-12 * fabs(o[k]))) {
                        if (fails++ < 5)
                            diag("pattern %d candidate %d output %s: general %.17g specialised %.17g", pat, i,
                                 stage_output_names[k], o[k], res[k][i]);
                    }
            }
            stage_model_free(&m);
        }
        stage_model_free(&general);
    }
    ok(built == 128 && fails == 0,
       "specialised == general (1e-12 relative) on 40 candidates of each of 64 patterns x 2 stage kinds (%d mismatches)",
       fails);
    ok(smaller, "no specialised program is longer than the general one");
}

// An op table entry is looked up by op name: the names it accepts
// (optable_op_names) must be the ops of the model description, every op of
// GPT, Llama and a parallel block, and none that no model has.
static void test_optable_names(const MistConfig *cfg) {
    ModelConfig m[3] = {cfg->model, cfg->model, cfg->model};
    m[1].family = FAMILY_LLAMA;
    m[1].norm = NORM_RMSNORM;
    m[1].activation = ACT_SWIGLU;
    m[1].position = POS_ROTARY;
    m[1].bias = 0;
    m[1].tied_embeddings = 0;
    m[2].parallel_block = 1;
    int names = 0;
    while (optable_op_names[names]) names++;
    int used[64] = {0}, known = 1, built = 1;
    for (int i = 0; i < 3; i++)
        for (int part = PART_PRE; part <= PART_POST; part++) {
            ExprCtx *cx = expr_ctx_new();
            ModelOpList ops;
            if (model_build(cx, &m[i], (ModelPart)part, &ops) != 0) built = 0;
            else
                for (int k = 0; k < ops.n_ops; k++) {
                    int found = -1;
                    for (int j = 0; j < names; j++)
                        if (!strcmp(ops.op[k].name, optable_op_names[j])) found = j;
                    if (found < 0) {
                        diag("model %d part %d: op %s is not in optable_op_names", i, part, ops.op[k].name);
                        known = 0;
                    } else {
                        used[found] = 1;
                    }
                }
            expr_ctx_free(cx);
        }
    int all_used = names <= 64;
    for (int j = 0; j < names && j < 64; j++)
        if (!used[j]) {
            diag("optable_op_names has %s, which no model has", optable_op_names[j]);
            all_used = 0;
        }
    ok(built && known, "every op of GPT, Llama and a parallel block is a name the op table accepts");
    ok(built && all_used, "every name the op table accepts is an op of one of them (%d names)", names);
}

// Sequence parallelism (symbol sp): a middle stage's kept activations are L
// times a block's saved bytes from model_acts_sp (1/tp of the tp = 1 block's),
// the time changes (all-gathers + reduce-scatters, norms on N/tp rows), and
// sp at tp = 1 never fits.
static void test_sequence_parallel(const MistConfig *cfg, const HwProfile *hw) {
    StageModel m;
    char err[256];
    if (stage_model_build(&m, cfg, hw, NULL, 0, 0, err, sizeof err) != 0) {
        ok(0, "stage model builds: %s", err);
        return;
    }
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
    tiny_config(&cfg, PREC_BF16);
    HwProfile hw;
    profile_preset(&hw, "gcp-a100-80g");
    test_overlap();
    test_pipeline();
    test_pipeline_interleaved();
    test_zero(&cfg, &hw);
    test_flops(&cfg);
    test_hand_time(&cfg);
    test_gemm_model(&cfg);
    test_memory_shape(&cfg, &hw);
    test_memory_hand(&cfg, &hw);
    test_memory_pipeline_hand(&cfg, &hw);
    test_boundary_time(&cfg, &hw);
    test_batched(&cfg, &hw);
    test_specialised(&cfg, &hw);
    test_sequence_parallel(&cfg, &hw);
    test_optable_names(&cfg);
    return tap_done();
}
