// The cost model's time terms and its evaluation against hand computations
// and published formulas: the overlap window rule, the 1F1B total (and the
// interleaved one), the Megatron FLOPs formula, a tiny stage's time by hand,
// the GEMM model's tiles and waves, the pipeline boundaries' sends,
// batched == scalar evaluation, and models specialised to a ZeRO / offload
// pattern == the general model; the op names a measured op table accepts are
// those of the model description. The memory terms: tests/test_cost_memory.c.
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
#include "tests/cost_fixture.h"
#include "tests/tap.h"

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
    if (!cost_model_built(&m, &c, &hw, 1, 1, "stage")) return;
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
        if (!cost_model_built(&m, &c, &h, 0, 0, "middle stage")) return;
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
    int fails = 0;
    for (int variant = 0; variant < 4; variant++) {
        int has_pre = variant & 1, has_post = variant >> 1;
        if (!cost_model_built(&m, cfg, hw, has_pre, has_post, "stage")) return;
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
        if (!cost_model_built(&general, cfg, hw, edge, edge, "stage")) return;
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

int main(void) {
    MistConfig cfg;
    HwProfile hw;
    cost_fixture(&cfg, &hw);
    test_overlap();
    test_pipeline();
    test_pipeline_interleaved();
    test_flops(&cfg);
    test_hand_time(&cfg);
    test_gemm_model(&cfg);
    test_boundary_time(&cfg, &hw);
    test_batched(&cfg, &hw);
    test_specialised(&cfg, &hw);
    test_optable_names(&cfg);
    return tap_done();
}
