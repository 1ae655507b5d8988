// The terms of a stage model (planner/cost_terms.h): symbolic helpers, per-op
// compute time (GEMM model, attention curve, roofline, or a measured table), the optimizer step, and the
// times of collectives, pipeline sends and host copies, as expressions of a
// stage configuration (docs/design.md §4). stage_model.c, schedule.c and memory.c
// build a stage's times and memory from them.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "planner/cost_terms.h"

// ---- small symbolic helpers

Expr cost_gt0(StageBuild *sb, Expr a) { return ex_select(sb->x, a, sb->one, sb->zero); }

Expr cost_ge(StageBuild *sb, Expr a, Expr b) {
    // integers: a >= b  <=>  a - b + 0.5 > 0
    return ex_select(sb->x, ex_add(sb->x, ex_sub(sb->x, a, b), ex_num(sb->x, 0.5)), sb->one, sb->zero);
}

Expr cost_shard_bytes(StageBuild *sb, Expr elems, Expr divisor, int bytes_per_elem) {
    ExprCtx *x = sb->x;
    return ex_mul(x, ex_ceil(x, ex_div(x, elems, divisor)), ex_num(x, bytes_per_elem));
}

Expr cost_select_power_of_two(ExprCtx *x, Expr sym, const Expr *value_at, int n) {
    Expr e = value_at[n - 1];
    for (int i = n - 2; i >= 0; i--)
        e = ex_select(x, ex_sub(x, ex_num(x, 1.5 * (1 << i)), sym), value_at[i], e);
    return e;
}

Expr cost_bytes_by_tp(ExprCtx *x, Expr b, Expr tp, const double *at1, const double *at2, const int *valid, int n) {
    enum { MAX_LEVELS = 16 };
    if (n > MAX_LEVELS) abort();  // the callers' level counts are constants far below
    Expr at[MAX_LEVELS], per_b[MAX_LEVELS];
    int proportional = 1;
    for (int l = 0; l < n; l++) {
        double slope = at2[l] - at1[l], intercept = at1[l] - slope;
        at[l] = valid[l] ? ex_add(x, ex_num(x, intercept), ex_mul(x, ex_num(x, slope), b)) : ex_num(x, 1e30);
        per_b[l] = ex_num(x, at1[l]);
        proportional &= valid[l] && intercept == 0;
    }
    // Every shipped model's activations are b times a per-sequence size
    // (intercept 0): then pick the size and multiply once, the same product
    // as picking one of the products (an exact pick), and a lookup of
    // constants instead of a chain of selects over n products
    if (proportional) return ex_mul(x, cost_select_power_of_two(x, tp, per_b, n), b);
    return cost_select_power_of_two(x, tp, at, n);
}

// ---- compute (docs/design.md, "Compute time")

static Expr memory_time(StageBuild *sb, Expr bytes) {
    return ex_mul(sb->x, bytes, ex_num(sb->x, 1.0 / (sb->hw->mem_bandwidth * sb->hw->bandwidth_efficiency)));
}

// One GEMM, out (m x n) with inner dimension k, on the tile-and-wave model:
// the library cuts the output into tm x tn tiles, one per SM at a time; the
// tiles run in waves = ceil(tiles / sms), and each wave takes as long as one
// tile: 2 tm tn (k + k0) FLOPs at peak * efficiency / sms, k0 being the tile's
// fixed prologue and epilogue. A partial last wave costs a whole wave, a
// small m or n wastes a tile's unused rows: both fall out of the two ceils.
static Expr gemm_time(StageBuild *sb, Expr m, Expr n, Expr k) {
    ExprCtx *x = sb->x;
    const HwProfile *hw = sb->hw;
    double sms = hw->gemm_sms, tm = hw->gemm_tile_m, tn = hw->gemm_tile_n;
    Expr tiles = ex_mul(x, ex_ceil(x, ex_div(x, m, ex_num(x, tm))), ex_ceil(x, ex_div(x, n, ex_num(x, tn))));
    Expr waves = ex_ceil(x, ex_div(x, tiles, ex_num(x, sms)));
    double wave_per_k = sms * 2 * tm * tn / (hw->peak_flops[sb->me->compute] * hw->gemm_efficiency);
    return ex_mul(x, ex_mul(x, waves, ex_add(x, k, ex_num(x, hw->gemm_k_overhead))), ex_num(x, wave_per_k));
}

// The fraction of peak attention runs at: its own curve in the sequence
// length and head size (flash-style kernels keep one query tile against the
// whole key sequence; short sequences and narrow heads leave the tensor cores
// waiting on softmax and loads), or the matmul fraction without one.
static double attention_efficiency(const StageBuild *sb) {
    const HwProfile *hw = sb->hw;
    if (hw->attention_efficiency <= 0) return hw->flops_efficiency;
    double s = sb->cfg->model.seq_len, hd = (double)sb->cfg->model.hidden / sb->cfg->model.heads;
    return hw->attention_efficiency * s / (s + hw->attention_seq_half) * hd / (hd + hw->attention_head_half);
}

// The model's time of one op, forward or backward: compute or memory bound,
// whichever is longer, plus one launch.
static Expr op_model_time(StageBuild *sb, const OpExprs *op, int backward) {
    ExprCtx *x = sb->x;
    const HwProfile *hw = sb->hw;
    Expr flops = backward ? op->bwd_flops : op->fwd_flops, bytes = backward ? op->bwd_bytes : op->fwd_bytes;
    Expr t_compute;
    if (op->cls == OPC_GEMM && hw->gemm_sms > 0) {
        // forward out = inp W^T; backward dinp (m x k, inner n) and dW (n x k, inner m)
        t_compute = backward ? ex_add(x, gemm_time(sb, op->gemm_m, op->gemm_k, op->gemm_n),
                                      gemm_time(sb, op->gemm_n, op->gemm_k, op->gemm_m))
                             : gemm_time(sb, op->gemm_m, op->gemm_n, op->gemm_k);
    } else {
        double eff = op->cls == OPC_GEMM ? hw->flops_efficiency : op->cls == OPC_ATTENTION ? attention_efficiency(sb) : 1.0;
        // a rate as a multiply by its reciprocal: cheaper than a divide in batched evaluation
        t_compute = ex_mul(x, flops, ex_num(x, 1.0 / (hw->peak_flops[sb->me->compute] * eff)));
    }
    return ex_add(x, ex_max(x, t_compute, memory_time(sb, bytes)), ex_num(x, hw->launch_seconds));
}

// 1 when the integer symbol v equals c, else 0 (as selects on v - c +- 0.5)
static Expr equals(StageBuild *sb, Expr v, double c, Expr yes, Expr no) {
    ExprCtx *x = sb->x;
    return ex_select(x, ex_sub(x, v, ex_num(x, c - 0.5)), ex_select(x, ex_sub(x, ex_num(x, c + 0.5), v), yes, no), no);
}

// A measured table overrides the model per op and shape (docs/plan-analyze.md,
// "Measured op table"): at one tp, the entries measured at b_1 < ... < b_n
// give the time at b_i exactly, linear interpolation between neighbours, and
// beyond b_n the line through the last two (mist-plan warns). Below b_1, at a
// single measured b other than b, or at an unmeasured tp the model's time
// stands (a fallback, reported); with --strict-op-table a fallback or an
// extrapolation costs OPTABLE_REFUSED_SECONDS, so the search never picks it.
static Expr with_table(StageBuild *sb, const char *op, Expr model, int backward) {
    const OpTable *t = sb->table;
    if (!t) return model;
    ExprCtx *x = sb->x;
    Expr b = sb->s[SYM_B];
    Expr refused = ex_num(x, OPTABLE_REFUSED_SECONDS), fallback = t->strict ? refused : model;
    OptableCurve curve;
    Expr e = fallback;
    for (int from = 0; optable_curve(t, op, sb->cfg->model.seq_len, &from, &curve);) {
        Expr v = fallback;
        const double *tv = backward ? curve.bwd_seconds : curve.fwd_seconds;
        if (curve.n == 1) v = equals(sb, b, curve.b[0], ex_num(x, tv[0]), v);
        for (int k = 0; k + 1 < curve.n; k++) {  // the segment from b_k on (the last one extends past b_n)
            double slope = (tv[k + 1] - tv[k]) / (curve.b[k + 1] - curve.b[k]);
            Expr line = ex_add(x, ex_num(x, tv[k]), ex_mul(x, ex_num(x, slope), ex_sub(x, b, ex_num(x, curve.b[k]))));
            // a line falling below zero past b_n (a noisy last point) is floored at the last time
            if (k + 2 == curve.n && slope < 0) line = ex_max(x, line, ex_num(x, tv[k + 1]));
            v = ex_select(x, ex_sub(x, b, ex_num(x, curve.b[k] - 0.5)), line, v);
        }
        if (t->strict && curve.n > 1) v = ex_select(x, ex_sub(x, b, ex_num(x, curve.b[curve.n - 1] + 0.5)), refused, v);
        e = equals(sb, sb->s[SYM_TP], curve.tp, v, e);
    }
    return e;
}

static Expr part_compute(StageBuild *sb, const PartExprs *part, int backward) {
    Expr sum = sb->zero;
    for (int i = 0; i < part->n_ops; i++) {
        const OpExprs *op = &part->op[i];
        sum = ex_add(sb->x, sum, with_table(sb, op->name, op_model_time(sb, op, backward), backward));
    }
    return sum;
}

Expr cost_part_compute_fwd(StageBuild *sb, const PartExprs *part) { return part_compute(sb, part, 0); }
Expr cost_part_compute_bwd(StageBuild *sb, const PartExprs *part) { return part_compute(sb, part, 1); }

Expr cost_part_attention_fwd(StageBuild *sb, const PartExprs *part, Expr *flops) {
    Expr sum = sb->zero;
    *flops = sb->zero;
    for (int i = 0; i < part->n_ops; i++) {
        const OpExprs *op = &part->op[i];
        if (op->cls != OPC_ATTENTION) continue;
        sum = ex_add(sb->x, sum, with_table(sb, op->name, op_model_time(sb, op, 0), 0));
        *flops = ex_add(sb->x, *flops, op->fwd_flops);
    }
    return sum;
}

Expr cost_part_flops(StageBuild *sb, const PartExprs *part, int backward) {
    Expr sum = sb->zero;
    for (int i = 0; i < part->n_ops; i++)
        sum = ex_add(sb->x, sum, backward ? part->op[i].bwd_flops : part->op[i].fwd_flops);
    return sum;
}

// [stage.N] lean (docs/lean-layers.md): the extra time of a lean block (not
// checkpointed) of a GELU model, forward (k = 0) and backward (k = 1). The
// GELU leaves the fc matmul's epilogue for a pass of its own: forward reads
// and writes act and writes the branch bits, (2e + 1/8) n bytes over n =
// b s F / tp elements; backward multiplies d_act by gelu'(gelu^-1(act)) after
// the plain product instead of in its epilogue, reading d_act, act and the
// bits and writing d_act, (3e + 1/8) n bytes, and inverts the GELU per
// element: at most LEAN_INVERSE_FLOPS (a safeguarded Newton iteration in
// double; about 8 steps of ~30 operations near the minimum, fewer elsewhere)
// at the fp32 rate. Each pass is max(memory, arithmetic) plus a launch. The
// norms' backward from the output reads y where it read x: the same bytes,
// no extra. SwiGLU models: backward recomputes act = silu(gate) up, reading
// fc (2n elements) and writing n: 3e n bytes plus a launch; forward: nothing
// extra (act goes to another buffer).
//
// A measured op table (mist-calibrate) replaces these prices where it lists the
// lean ops (optable.h): lean_gelu's forward (the pass with the branch bits) and
// backward (the inversion) for the GELU's; swiglu's forward for the SwiGLU's
// recompute (the same kernel on the same shape); and lean_ln1 / lean_ln2's
// backward (from the output) for the norms' backward, which a lean block runs
// in place of ln1's / ln2's: extra = T(lean_lnK) - T(lnK), both as the table
// (or the model) prices them. A table that does not list an op at all leaves
// the model's price (0 for the norms): an older table prices lean as before.
enum { LEAN_INVERSE_FLOPS = 240 };
static int table_lists(const StageBuild *sb, const char *op) {
    return optable_lists(sb->table, op, sb->cfg->model.seq_len);
}

// sum over the block's norms of T(lean_<norm>) - T(<norm>), backward; EXPR_NONE where the
// table lists no lean_<norm> (no term at all: the model without a table stays as it was)
static Expr lean_norms_extra(StageBuild *sb) {
    Expr sum = EXPR_NONE;
    const PartExprs *blk = &sb->me->block;
    for (int i = 0; i < blk->n_ops; i++) {
        const OpExprs *op = &blk->op[i];
        char lean[40];
        snprintf(lean, sizeof lean, "lean_%s", op->name);
        if ((strcmp(op->name, "ln1") && strcmp(op->name, "ln2")) || !table_lists(sb, lean)) continue;
        Expr plain = with_table(sb, op->name, op_model_time(sb, op, 1), 1);
        Expr d = ex_sub(sb->x, with_table(sb, lean, plain, 1), plain);
        sum = sum == EXPR_NONE ? d : ex_add(sb->x, sum, d);
    }
    return sum;
}

Expr cost_lean_extra(StageBuild *sb, int backward) {
    ExprCtx *x = sb->x;
    const ModelConfig *m = &sb->cfg->model;
    Expr n = ex_div(x, ex_mul(x, sb->s[SYM_B], ex_num(x, (double)m->seq_len * m->ffn_hidden)), sb->s[SYM_TP]);
    double e = sb->me->param_bytes;
    Expr launch = ex_num(x, sb->hw->launch_seconds), t;
    if (m->activation == ACT_SWIGLU) {
        if (!backward) return sb->zero;
        t = ex_add(x, memory_time(sb, ex_mul(x, n, ex_num(x, 3 * e))), launch);
        if (table_lists(sb, "swiglu")) t = with_table(sb, "swiglu", t, 0);  // the recompute is swiglu's forward
    } else {
        t = memory_time(sb, ex_mul(x, n, ex_num(x, (backward ? 3 : 2) * e + 0.125)));
        if (backward) {
            double rate = sb->hw->peak_flops[DT_FP32] * sb->hw->flops_efficiency;
            t = ex_max(x, t, ex_mul(x, n, ex_num(x, LEAN_INVERSE_FLOPS / (rate > 0 ? rate : 1e12))));
        }
        t = ex_add(x, t, launch);
        if (table_lists(sb, "lean_gelu")) t = with_table(sb, "lean_gelu", t, backward);
    }
    Expr norms = backward ? lean_norms_extra(sb) : EXPR_NONE;
    if (norms != EXPR_NONE) t = ex_add(x, t, norms);
    return ex_mul(x, sb->s[SYM_LEAN], t);
}

// The deferred Adam step of one block's shard: memory-bound. Per parameter it
// reads and writes the fp32 master, m and v (24 B), reads the grad and writes
// the working-precision weight: 24 + grad + param bytes (fp32 training: the
// master is the weight: 4+4 r/w + 8+8 m,v r/w + 4 grad = 28).
Expr cost_optimizer_step(StageBuild *sb, Expr params_stepped) {
    ExprCtx *x = sb->x;
    const ModelExprs *me = sb->me;
    double bytes_per_param = me->param_bytes == 4 ? 28.0 : 24.0 + me->grad_bytes + me->param_bytes;
    Expr bytes = ex_mul(x, params_stepped, ex_num(x, bytes_per_param));
    return ex_mul(x, cost_gt0(sb, params_stepped), ex_add(x, memory_time(sb, bytes), ex_num(x, sb->hw->launch_seconds)));
}

// ---- transfers

// Ring time with a symbolic group shape: factor * (bytes/k * (n-1)/n + beta),
// with (k, beta) looked up from the (nodes, gpus per node) cell by selects.
static Expr ring(StageBuild *sb, CollKind kind, Expr bytes, Expr nodes, Expr gpus) {
    ExprCtx *x = sb->x;
    Expr inv_k_row[PROFILE_SHAPES], beta_row[PROFILE_SHAPES];
    for (int n = 0; n < PROFILE_SHAPES; n++) {
        Expr inv_k[PROFILE_SHAPES], beta[PROFILE_SHAPES];
        for (int g = 0; g < PROFILE_SHAPES; g++) {
            inv_k[g] = ex_num(x, 1.0 / sb->hw->coll[n][g].k);
            beta[g] = ex_num(x, sb->hw->coll[n][g].beta);
        }
        inv_k_row[n] = cost_select_power_of_two(x, gpus, inv_k, PROFILE_SHAPES);
        beta_row[n] = cost_select_power_of_two(x, gpus, beta, PROFILE_SHAPES);
    }
    Expr inv_k = cost_select_power_of_two(x, nodes, inv_k_row, PROFILE_SHAPES);
    Expr beta = cost_select_power_of_two(x, nodes, beta_row, PROFILE_SHAPES);
    Expr n = ex_mul(x, nodes, gpus);
    Expr frac = ex_div(x, ex_sub(x, n, sb->one), n);  // (n-1)/n, 0 for a group of one
    Expr t = ex_add(x, ex_mul(x, ex_mul(x, bytes, inv_k), frac), ex_mul(x, beta, cost_ge(sb, n, ex_num(x, 2))));
    return ex_mul(x, ex_mul(x, ex_num(x, sb->hw->coll_factor[kind]), t), cost_gt0(sb, bytes));
}

Expr cost_group_collective(StageBuild *sb, CollKind kind, Expr bytes, Expr nodes, Expr gpus) {
    return ring(sb, kind, bytes, nodes, gpus);
}

// DP groups span nodes first: a stage of dp*tp ranks on M-GPU nodes occupies
// ceil(dp*tp/M) nodes; its DP group has min(dp, nodes) nodes and dp/that GPUs
// per node.
Expr cost_dp_collective(StageBuild *sb, CollKind kind, Expr bytes) {
    ExprCtx *x = sb->x;
    Expr M = ex_num(x, sb->cfg->cluster.gpus_per_node > 0 ? sb->cfg->cluster.gpus_per_node : 1);
    Expr stage_nodes = ex_ceil(x, ex_div(x, ex_mul(x, sb->s[SYM_DP], sb->s[SYM_TP]), M));
    Expr nodes = ex_min(x, sb->s[SYM_DP], stage_nodes);
    Expr gpus = ex_ceil(x, ex_div(x, sb->s[SYM_DP], nodes));
    return ring(sb, kind, bytes, nodes, gpus);
}

// A staged collective (runtime/comm_staged.c) copies its send buffer to the host
// when it starts and its result back when it completes: an all-gather sends its
// rank's block (bytes / dp) and receives the whole, a reduce-scatter the other
// way round, an all-reduce the whole both ways.
Expr cost_dp_collective_copies(StageBuild *sb, CollKind kind, Expr bytes) {
    ExprCtx *x = sb->x;
    Expr dp = sb->s[SYM_DP], block = ex_div(x, bytes, dp);
    Expr send = kind == COLL_ALL_GATHER ? block : bytes, recv = kind == COLL_REDUCE_SCATTER ? block : bytes;
    Expr t = ex_add(x, cost_d2h(sb, send), cost_h2d(sb, recv));
    return ex_mul(x, t, cost_gt0(sb, ex_sub(x, dp, sb->one)));
}

// TP stays inside a node while it fits: min(tp, M) GPUs on ceil(tp/M) nodes.
Expr cost_tp_collective(StageBuild *sb, CollKind kind, Expr bytes) {
    ExprCtx *x = sb->x;
    Expr M = ex_num(x, sb->cfg->cluster.gpus_per_node > 0 ? sb->cfg->cluster.gpus_per_node : 1);
    Expr gpus = ex_min(x, sb->s[SYM_TP], M);
    Expr nodes = ex_ceil(x, ex_div(x, sb->s[SYM_TP], M));
    return ring(sb, kind, bytes, nodes, gpus);
}

// Pipeline send to the neighbouring stage: bytes/k + beta with the cell of a
// two-member group across nodes when the stage fills whole nodes (its
// neighbour is then on another node), else inside a node.
Expr cost_p2p(StageBuild *sb, Expr bytes) {
    ExprCtx *x = sb->x;
    int M = sb->cfg->cluster.gpus_per_node > 0 ? sb->cfg->cluster.gpus_per_node : 1;
    LinkFit across = profile_coll_fit(sb->hw, 2, 1), inside = profile_coll_fit(sb->hw, 1, 2);
    Expr whole_nodes = cost_ge(sb, ex_mul(x, sb->s[SYM_DP], sb->s[SYM_TP]), ex_num(x, M));
    Expr t_across = ex_add(x, ex_mul(x, bytes, ex_num(x, 1.0 / across.k)), ex_num(x, across.beta));
    Expr t_inside = ex_add(x, ex_mul(x, bytes, ex_num(x, 1.0 / inside.k)), ex_num(x, inside.beta));
    return ex_select(x, whole_nodes, t_across, t_inside);
}

static Expr host_copy(StageBuild *sb, const LinkFit *f, Expr bytes) {
    ExprCtx *x = sb->x;
    Expr t = ex_add(x, ex_mul(x, bytes, ex_num(x, 1.0 / f->k)), ex_num(x, f->beta));
    return ex_mul(x, t, cost_gt0(sb, bytes));
}
Expr cost_h2d(StageBuild *sb, Expr bytes) { return host_copy(sb, &sb->hw->h2d, bytes); }
Expr cost_d2h(StageBuild *sb, Expr bytes) { return host_copy(sb, &sb->hw->d2h, bytes); }

// ---- hierarchical collectives (docs/paro.md "Hierarchical collectives")

// The levels of a hierarchical collective of S bytes over n nodes x g ranks, each
// priced as its own ring on its own shape:
//   all-reduce:     RS(S) on 1 x g, AR(S/g) on n x 1, AG(S) on 1 x g;
//   reduce-scatter: RS(S) on 1 x g, RS(S/g) on n x 1, one message of S/(n g);
//   all-gather:     one message of S/(n g), AG(S/g) on n x 1, AG(S) on 1 x g.
// Pipelined in K chunks (all-reduce), chunk j's inter level runs beside chunk
// j+1's and j-1's intra levels: with a = the intra time of one chunk (its RS and
// AG) and b = its inter time, T = a + b + (K-1) max(a, b) -- the first chunk's
// levels in turn, then one chunk per step of the slower level. K = 1 is the
// levels back to back.
double cost_hier_collective_seconds(const HwProfile *p, CollKind kind, double bytes, int nodes, int gpus,
                                    int overlap) {
    if (nodes < 2 || gpus < 2) return profile_collective_seconds(p, kind, bytes, nodes, gpus);
    double g = gpus;
    if (kind != COLL_ALL_REDUCE) {
        LinkFit across = profile_coll_fit(p, 2, 1);
        double msg = bytes / (nodes * g) / across.k + across.beta;
        return profile_collective_seconds(p, kind, bytes, 1, gpus) +
               profile_collective_seconds(p, kind, bytes / g, nodes, 1) + (bytes > 0 ? msg : 0.0);
    }
    int K = overlap ? cost_hier_chunks(bytes) : 1;
    double s = bytes / K;
    double a = profile_collective_seconds(p, COLL_REDUCE_SCATTER, s, 1, gpus) +
               profile_collective_seconds(p, COLL_ALL_GATHER, s, 1, gpus);
    double b = profile_collective_seconds(p, COLL_ALL_REDUCE, s / g, nodes, 1);
    return a + b + (K - 1) * (a > b ? a : b);
}

// cost_hier_collective_seconds with a symbolic shape (the DP group's, as in
// cost_dp_collective): each level is ring() on its own shape; K = the chunk rule
// clamp(floor(bytes / COST_HIER_CHUNK_BYTES), 1, COST_HIER_MAX_CHUNKS).
Expr cost_dp_collective_hier(StageBuild *sb, CollKind kind, Expr bytes, int overlap) {
    ExprCtx *x = sb->x;
    Expr M = ex_num(x, sb->cfg->cluster.gpus_per_node > 0 ? sb->cfg->cluster.gpus_per_node : 1);
    Expr stage_nodes = ex_ceil(x, ex_div(x, ex_mul(x, sb->s[SYM_DP], sb->s[SYM_TP]), M));
    Expr nodes = ex_min(x, sb->s[SYM_DP], stage_nodes);
    Expr gpus = ex_ceil(x, ex_div(x, sb->s[SYM_DP], nodes));
    Expr one = sb->one, two = ex_num(x, 2);
    Expr flat = ring(sb, kind, bytes, nodes, gpus), h;
    if (kind == COLL_ALL_REDUCE) {
        Expr K = one;
        if (overlap) {
            Expr k = ex_floor(x, ex_div(x, bytes, ex_num(x, COST_HIER_CHUNK_BYTES)));
            K = ex_min(x, ex_max(x, k, one), ex_num(x, COST_HIER_MAX_CHUNKS));
        }
        Expr s = ex_div(x, bytes, K);
        Expr a = ex_add(x, ring(sb, COLL_REDUCE_SCATTER, s, one, gpus), ring(sb, COLL_ALL_GATHER, s, one, gpus));
        Expr b = ring(sb, COLL_ALL_REDUCE, ex_div(x, s, gpus), nodes, one);
        h = ex_add(x, ex_add(x, a, b), ex_mul(x, ex_sub(x, K, one), ex_max(x, a, b)));
    } else {
        LinkFit across = profile_coll_fit(sb->hw, 2, 1);
        Expr block = ex_div(x, bytes, ex_mul(x, nodes, gpus));
        Expr msg = ex_mul(x, ex_add(x, ex_mul(x, block, ex_num(x, 1.0 / across.k)), ex_num(x, across.beta)),
                          cost_gt0(sb, bytes));
        h = ex_add(x, ex_add(x, ring(sb, kind, bytes, one, gpus), ring(sb, kind, ex_div(x, bytes, gpus), nodes, one)),
                   msg);
    }
    Expr two_levels = ex_mul(x, cost_ge(sb, nodes, two), cost_ge(sb, gpus, two));
    return ex_select(x, two_levels, h, flat);
}
