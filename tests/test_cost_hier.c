// The price of the hierarchical collectives (cost_hier_collective_seconds,
// planner/cost_terms.h; docs/paro.md "The price") against the levels computed
// here from the profile's fits, on a hand-made profile whose every shape has
// its own line, and on the presets: the flat fallback, the sum of the levels,
// the pipeline formula, the chunk rule.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "base/profile.h"
#include "planner/cost_terms.h"
#include "tests/tap.h"

static int close_to(double a, double b) { return fabs(a - b) <= 1e-12 * (fabs(a) + fabs(b)) + 1e-18; }

// one ring level by hand: factor * (bytes/k * (m-1)/m + beta), m = nodes * gpus
static double level(const HwProfile *p, CollKind k, double bytes, int nodes, int gpus) {
    LinkFit f = p->coll[profile_shape_index(nodes)][profile_shape_index(gpus)];
    int m = nodes * gpus;
    return p->coll_factor[k] * (bytes / f.k * (m - 1) / m + f.beta);
}

// cost_dp_collective_hier (symbolic) against the numeric price on the DP group's shape: a stage of
// dp x tp ranks on M-GPU nodes has min(dp, ceil(dp tp / M)) nodes of ceil(dp / that) GPUs
static void test_expression(void) {
    static MistConfig cfg;  // zeroed: only cluster.gpus_per_node is read
    HwProfile hw;
    profile_preset(&hw, "dgx-a100-80g");
    const int cases[][3] = {{16, 1, 8}, {4, 1, 2}, {8, 2, 4}, {4, 2, 8}, {8, 8, 8}, {2, 1, 2}};
    const double sizes[] = {0, 3e6, 64.0 * 1048576, 1e9};
    int good = 1, two_level = 0;
    for (int c = 0; c < 6; c++) {
        int dp = cases[c][0], tp = cases[c][1], M = cases[c][2];
        cfg.cluster.gpus_per_node = M;
        int stage_nodes = (dp * tp + M - 1) / M, nodes = dp < stage_nodes ? dp : stage_nodes;
        int gpus = (dp + nodes - 1) / nodes;
        two_level += nodes >= 2 && gpus >= 2;
        for (int k = 0; k < COLL_COUNT; k++)
            for (int o = 0; o < 2; o++)
                for (int b = 0; b < 4; b++) {
                    ExprCtx *x = expr_ctx_new();
                    StageBuild sb = {.x = x, .hw = &hw, .cfg = &cfg};
                    sb.zero = ex_num(x, 0), sb.one = ex_num(x, 1);
                    for (int i = 0; i < STAGE_SYMS; i++) sb.s[i] = sb.one;
                    sb.s[SYM_DP] = ex_num(x, dp), sb.s[SYM_TP] = ex_num(x, tp);
                    double got = expr_eval(x, cost_dp_collective_hier(&sb, (CollKind)k, ex_num(x, sizes[b]), o), NULL);
                    double want = cost_hier_collective_seconds(&hw, (CollKind)k, sizes[b], nodes, gpus, o);
                    if (!close_to(got, want)) {
                        diag("dp %d tp %d M %d kind %d overlap %d bytes %g: expression %.9g, numeric %.9g", dp, tp, M,
                             k, o, sizes[b], got, want);
                        good = 0;
                    }
                    expr_ctx_free(x);
                }
    }
    ok(good && two_level == 3, "cost_dp_collective_hier = cost_hier_collective_seconds on the DP group's shape (6 "
       "stages, %d of them two-level; every kind, with and without overlap, 4 sizes)", two_level);
}

int main(void) {
    test_expression();
    HwProfile p;
    profile_preset(&p, "dgx-h100");
    // every cell its own line: a mix-up of the intra (1 x g) and inter (n x 1) cells shows
    for (int n = 0; n < PROFILE_SHAPES; n++)
        for (int g = 0; g < PROFILE_SHAPES; g++)
            p.coll[n][g] = (LinkFit){(1 + n + 3 * g) * 1e9, (1 + 2 * n + g) * 1e-5};
    double S = 64.0 * 1048576;

    // a group inside one node, or one rank per node: the flat ring
    ok(close_to(cost_hier_collective_seconds(&p, COLL_ALL_REDUCE, S, 1, 8, 1),
            profile_collective_seconds(&p, COLL_ALL_REDUCE, S, 1, 8)) &&
           close_to(cost_hier_collective_seconds(&p, COLL_REDUCE_SCATTER, S, 4, 1, 0),
                profile_collective_seconds(&p, COLL_REDUCE_SCATTER, S, 4, 1)),
       "one node (1 x 8) and one rank per node (4 x 1) are priced flat");
    ok(cost_hier_collective_seconds(&p, COLL_ALL_REDUCE, 0, 2, 2, 1) == 0 &&
           cost_hier_collective_seconds(&p, COLL_ALL_GATHER, S, 1, 1, 0) == 0,
       "0 bytes and a group of one cost nothing");

    // the levels back to back
    int n = 4, g = 2;
    double ar = level(&p, COLL_REDUCE_SCATTER, S, 1, g) + level(&p, COLL_ALL_REDUCE, S / g, n, 1) +
                level(&p, COLL_ALL_GATHER, S, 1, g);
    double got = cost_hier_collective_seconds(&p, COLL_ALL_REDUCE, S, n, g, 0);
    ok(close_to(got, ar), "all-reduce 4 x 2, 64 MiB: RS(1 x 2) + AR(S/2; 4 x 1) + AG(1 x 2) = %.6g s (got %.6g)", ar, got);
    LinkFit across = p.coll[1][0];
    double msg = S / (n * g) / across.k + across.beta;
    double rs = level(&p, COLL_REDUCE_SCATTER, S, 1, g) + level(&p, COLL_REDUCE_SCATTER, S / g, n, 1) + msg;
    double ag = level(&p, COLL_ALL_GATHER, S, 1, g) + level(&p, COLL_ALL_GATHER, S / g, n, 1) + msg;
    ok(close_to(cost_hier_collective_seconds(&p, COLL_REDUCE_SCATTER, S, n, g, 0), rs) &&
           close_to(cost_hier_collective_seconds(&p, COLL_ALL_GATHER, S, n, g, 1), ag),
       "reduce-scatter and all-gather: two levels and the message over the 2 x 1 line (overlap ignored)");

    // the pipeline: K chunks, a + b + (K-1) max(a, b)
    int K = cost_hier_chunks(S);
    double a = level(&p, COLL_REDUCE_SCATTER, S / K, 1, g) + level(&p, COLL_ALL_GATHER, S / K, 1, g);
    double b = level(&p, COLL_ALL_REDUCE, S / K / g, n, 1);
    double pipe = a + b + (K - 1) * (a > b ? a : b);
    got = cost_hier_collective_seconds(&p, COLL_ALL_REDUCE, S, n, g, 1);
    ok(K == 4 && close_to(got, pipe), "pipelined all-reduce of 64 MiB: %d chunks, %.6g s (got %.6g)", K, pipe, got);
    ok(cost_hier_chunks(1.0) == 1 && cost_hier_chunks(16.0 * 1048576) == 1 && cost_hier_chunks(32.0 * 1048576) == 2 &&
           cost_hier_chunks(1e12) == COST_HIER_MAX_CHUNKS,
       "chunks: one per 16 MiB, 1 .. %d", COST_HIER_MAX_CHUNKS);
    // with no latency the pipeline can only help; with a large one it can only hurt
    for (int i = 0; i < PROFILE_SHAPES * PROFILE_SHAPES; i++) p.coll[i / PROFILE_SHAPES][i % PROFILE_SHAPES].beta = 0;
    int helps = cost_hier_collective_seconds(&p, COLL_ALL_REDUCE, S, n, g, 1) <
                cost_hier_collective_seconds(&p, COLL_ALL_REDUCE, S, n, g, 0);
    for (int i = 0; i < PROFILE_SHAPES * PROFILE_SHAPES; i++) p.coll[i / PROFILE_SHAPES][i % PROFILE_SHAPES].beta = 1;
    int hurts = cost_hier_collective_seconds(&p, COLL_ALL_REDUCE, S, n, g, 1) >
                cost_hier_collective_seconds(&p, COLL_ALL_REDUCE, S, n, g, 0);
    ok(helps && hurts, "overlap: faster with no latency, slower with 1 s of it per level");

    // the presets: a positive, finite price next to the flat ring's for every kind
    const char *presets[] = {"gcp-l4", "dgx-a100-80g", "dgx-h100"};
    for (int i = 0; i < 3; i++) {
        profile_preset(&p, presets[i]);
        int good = 1;
        for (int k = 0; k < COLL_COUNT; k++)
            for (int o = 0; o < 2; o++) {
                double h = cost_hier_collective_seconds(&p, (CollKind)k, S, 2, 8, o);
                good = good && h > 0 && isfinite(h);
            }
        ok(good, "%s: 2 x 8, 64 MiB: all-reduce %.3g ms hierarchical (%.3g overlapped), %.3g ms flat", presets[i],
           1e3 * cost_hier_collective_seconds(&p, COLL_ALL_REDUCE, S, 2, 8, 0),
           1e3 * cost_hier_collective_seconds(&p, COLL_ALL_REDUCE, S, 2, 8, 1),
           1e3 * profile_collective_seconds(&p, COLL_ALL_REDUCE, S, 2, 8));
    }
    return tap_done();
}
