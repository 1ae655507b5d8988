// PaRO scopes in the stage model (docs/paro.md "Memory and traffic";
// runtime/zero_levels.c runs them). A state of scope I keeps 1/g of each unit
// per rank (g consecutive dp ranks share one copy), G keeps 1/dp, N all of it.
// The moves between scopes are collectives of one level each, priced as rings
// on their own group shape from the profile's per-shape fits:
//   intra: the g ranks of a group, g*tp consecutive ranks: ceil(g tp / M)
//          nodes of g / that ranks (M GPUs per node);
//   inter: the n = dp / g peers, one per group, spread over the groups'
//          nodes: min(n, ceil(D / nodes_intra)) nodes, D the dp group's nodes.
// For a unit of S bytes (whole) the I traffic is S over the intra ring and S/g
// over the inter ring, where the flat ring moves S over all dp ranks:
//   gather I -> N:  AG_intra(S)              G -> I: AG_inter(S / g)
//   reduce -> I:    RS_intra(S) + AR_inter(S / g)
//   reduce -> G:    RS_intra(S) + RS_inter(S / g)   (with an I scope in the code)
// Without an I scope (codes 0..3) every term is ZeRO's flat one, as before.
#include "planner/cost_terms.h"

// the intra and inter group shapes (nodes, GPUs per node)
static void shapes(StageBuild *sb, Expr *in_nodes, Expr *in_gpus, Expr *x_nodes, Expr *x_gpus) {
    ExprCtx *x = sb->x;
    if (!sb->paro_general) {  // a pattern's I scope: a group is one node's dp ranks, its peers one per node
        *in_nodes = sb->one, *in_gpus = sb->g;
        *x_nodes = ex_div(x, sb->s[SYM_DP], sb->g), *x_gpus = sb->one;
        return;
    }
    Expr M = ex_num(x, sb->cfg->cluster.gpus_per_node > 0 ? sb->cfg->cluster.gpus_per_node : 1);
    Expr dp = sb->s[SYM_DP], tp = sb->s[SYM_TP], g = sb->g;
    Expr dp_nodes = ex_min(x, dp, ex_ceil(x, ex_div(x, ex_mul(x, dp, tp), M)));
    *in_nodes = ex_min(x, g, ex_ceil(x, ex_div(x, ex_mul(x, g, tp), M)));
    *in_gpus = ex_ceil(x, ex_div(x, g, *in_nodes));
    Expr n = ex_div(x, dp, g);
    *x_nodes = ex_min(x, n, ex_ceil(x, ex_div(x, dp_nodes, *in_nodes)));
    *x_gpus = ex_ceil(x, ex_div(x, n, *x_nodes));
}

void cost_paro_scopes(StageBuild *sb, int general) {
    ExprCtx *x = sb->x;
    Expr one = sb->one, dp = sb->s[SYM_DP], tp = sb->s[SYM_TP];
    // g: shard_group, or the dp ranks of one node (gpus_per_node / tp, at least 1); at most
    // dp, and 1 where it does not divide dp (base/paro.h shard_group_size)
    int M = sb->cfg->cluster.gpus_per_node > 0 ? sb->cfg->cluster.gpus_per_node : 1;
    Expr node = ex_max(x, one, ex_floor(x, ex_div(x, ex_num(x, M), tp)));
    Expr sg = sb->s[SYM_SG];
    sb->paro_general = general;
    if (general) {
        Expr g = ex_min(x, ex_select(x, cost_ge(sb, sg, one), sg, node), dp);
        Expr divides = cost_ge(sb, ex_mul(x, g, ex_floor(x, ex_div(x, dp, g))), dp);  // g * floor(dp/g) = dp
        sb->g = ex_select(x, divides, g, one);
    } else {
        sb->g = node;
    }
    Expr *flag[3] = {&sb->wi, &sb->gi, &sb->oi};
    for (int k = 0; k < 3; k++) {
        Expr i = sb->s[SYM_WI + k];
        if (general) {
            // I over a group of every dp rank is G, over groups of one rank N
            Expr whole = cost_ge(sb, sb->g, dp), inside = ex_mul(x, cost_ge(sb, sb->g, ex_num(x, 2)),
                                                                   ex_sub(x, one, whole));
            sb->s[SYM_WS + k] = ex_max(x, sb->s[SYM_WS + k], ex_mul(x, i, whole));
            i = ex_mul(x, i, inside);
        }
        *flag[k] = i;
    }
    sb->has_i = ex_max(x, sb->wi, ex_max(x, sb->gi, sb->oi));
    Expr dp_minus_1 = ex_sub(x, dp, one), g_minus_1 = ex_sub(x, sb->g, one);
    Expr *div[3] = {&sb->wshard, &sb->gshard, &sb->oshard};
    for (int k = 0; k < 3; k++)
        *div[k] = ex_add(x, ex_add(x, one, ex_mul(x, sb->s[SYM_WS + k], dp_minus_1)), ex_mul(x, *flag[k], g_minus_1));
    // units are padded to dp equal blocks when any state is sharded (O is the widest scope)
    sb->pad = ex_add(x, one, ex_mul(x, ex_max(x, sb->s[SYM_OS], sb->oi), dp_minus_1));
}

// f * a for a 0/1 flag, as a select: a term priced 1e30 (a shape the profile lacks) times 0 stays 0
static Expr on(StageBuild *sb, Expr f, Expr a) { return ex_select(sb->x, f, a, sb->zero); }

ParoTraffic cost_paro_traffic(StageBuild *sb, Expr W_full, Expr G_full, Expr ag, Expr rs, Expr ar) {
    ExprCtx *x = sb->x;
    Expr one = sb->one, ws = sb->s[SYM_WS], gs = sb->s[SYM_GS], os = sb->s[SYM_OS];
    Expr wi = sb->wi, gi = sb->gi, oi = sb->oi, hi = sb->has_i, flat = ex_sub(x, one, hi);
    ParoTraffic t;
    // (in a model without I scopes these terms are multiplied by 0 and fold away)
    Expr in_n, in_g, x_n, x_g;
    shapes(sb, &in_n, &in_g, &x_n, &x_g);
    Expr Wg = ex_div(x, W_full, sb->g), Gg = ex_div(x, G_full, sb->g);
    Expr ag_in = cost_group_collective(sb, COLL_ALL_GATHER, W_full, in_n, in_g);
    Expr ag_x = cost_group_collective(sb, COLL_ALL_GATHER, Wg, x_n, x_g);
    Expr rs_in = cost_group_collective(sb, COLL_REDUCE_SCATTER, G_full, in_n, in_g);
    Expr rs_x = cost_group_collective(sb, COLL_REDUCE_SCATTER, Gg, x_n, x_g);
    Expr ar_x = cost_group_collective(sb, COLL_ALL_REDUCE, Gg, x_n, x_g);
    Expr to_i = ex_add(x, rs_in, ar_x), to_g_levels = ex_add(x, rs_in, rs_x);
    // before each use: from W's scope to whole
    t.gather_use = ex_add(x, on(sb, ws, ag), on(sb, wi, ag_in));
    // after the step: from O's scope to whole (a G block with I in the code: peers, then group)
    t.gather_first = ex_add(x, on(sb, ex_mul(x, os, flat), ag),
                            ex_add(x, on(sb, oi, ag_in), on(sb, ex_mul(x, os, hi), ex_add(x, ag_x, ag_in))));
    // each micro-batch, where G is sharded: into G's scope
    t.reduce_micro = ex_add(x, on(sb, ex_mul(x, gs, flat), rs),
                            ex_add(x, on(sb, gi, to_i), on(sb, ex_mul(x, gs, hi), to_g_levels)));
    // the last micro-batch, where G is whole: into O's scope (ZeRO-1's reduce-scatter, NNI's two levels)
    Expr whole_g = ex_sub(x, ex_sub(x, one, gs), gi);
    Expr to_o = ex_select(x, os, rs, ex_select(x, oi, to_i, ar));
    t.reduce_last = ex_add(x, t.reduce_micro, on(sb, whole_g, to_o));
    return t;
}
