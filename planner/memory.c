// Device memory of one stage, per rank (DESIGN.md §5), in closed form.
//
// States per block (P parameters per TP rank; B_w, B_g bytes per weight /
// grad element; B_o = 12 for fp32 master + Adam m, v, or 8 for fp32 training):
//   shard_w = ceil(P / ws) * B_w, ws = dp under ZeRO-3 else 1 (likewise grads
//   with gs = dp under ZeRO-2/3, optimizer with os = dp under ZeRO-1/2/3);
//   resident = ceil(shard * (1 - offload ratio)); the rest lives on the host.
// Pre and post parts follow the stage's ZeRO sharding and are never offloaded.
// Buffers: two full-size ring buffers of the largest part's weights when any
// weight is sharded or offloaded (and of grads likewise); during forward the
// deferred optimizer step of one block needs its whole optimizer shard on the
// device when oo > 0; during backward the offloaded share of the next block's
// saved activations comes back ahead of use; pipeline stages keep one receive
// and one send buffer of the (b, s, h) boundary activation.
// Activations: a normal block keeps `saved`, a checkpointed one `saved_ckpt`,
// each scaled by (1 - ao); a stage holds p in-flight micro-batches plus the
// current one. Peaks: states + buffers + saved activations of the other
// blocks + the executing block's working set (its full saved set, as saved or
// recomputed, plus temporaries), and on the last stage the LM head's logits
// and loss with every block's activations of the current micro-batch alive.
#include "planner/cost.h"

typedef struct {
    Expr shard, resident;
} Sharded;

static Sharded sharded(StageBuild *sb, Expr elems, Expr divisor, int bytes, Expr offload) {
    ExprCtx *x = sb->x;
    Sharded s;
    s.shard = cost_shard_bytes(sb, elems, divisor, bytes);
    s.resident = offload != EXPR_NONE ? ex_ceil(x, ex_mul(x, s.shard, ex_sub(x, sb->one, offload))) : s.shard;
    return s;
}

void memory_build(StageBuild *sb, Expr out[ST_OUTPUTS]) {
    ExprCtx *x = sb->x;
    const ModelExprs *me = sb->me;
    const PartExprs *blk = &me->block;
    Expr L = sb->s[SYM_L], p = sb->s[SYM_P];
    Expr c = ex_min(x, sb->s[SYM_CKPT], L);
    Expr ws = sb->s[SYM_WS], gs = sb->s[SYM_GS];
    Expr wo = sb->s[SYM_WO], go = sb->s[SYM_GO], oo = sb->s[SYM_OO], ao = sb->s[SYM_AO];
    Expr zero = sb->zero, one = sb->one;

    // ---- states
    Sharded W = sharded(sb, blk->params, sb->wshard, me->param_bytes, wo);
    Sharded G = sharded(sb, blk->params, sb->gshard, me->grad_bytes, go);
    Sharded O = sharded(sb, blk->params, sb->oshard, me->optimizer_bytes, oo);
    Expr weights = ex_mul(x, L, W.resident);
    Expr grads = ex_mul(x, L, G.resident);
    Expr optimizer = ex_mul(x, L, O.resident);
    Expr host = ex_mul(x, L, ex_add(x, ex_add(x, ex_sub(x, W.shard, W.resident), ex_sub(x, G.shard, G.resident)),
                                     ex_sub(x, O.shard, O.resident)));
    Expr W_full_max = ex_mul(x, blk->params, ex_num(x, me->param_bytes));
    Expr G_full_max = ex_mul(x, blk->params, ex_num(x, me->grad_bytes));
    const PartExprs *edges[2] = {sb->has_pre ? &me->pre : NULL, sb->has_post ? &me->post : NULL};
    for (int i = 0; i < 2; i++) {
        const PartExprs *e = edges[i];
        if (!e) continue;
        weights = ex_add(x, weights, sharded(sb, e->params, sb->wshard, me->param_bytes, EXPR_NONE).shard);
        grads = ex_add(x, grads, sharded(sb, e->params, sb->gshard, me->grad_bytes, EXPR_NONE).shard);
        optimizer = ex_add(x, optimizer, sharded(sb, e->params, sb->oshard, me->optimizer_bytes, EXPR_NONE).shard);
        // a sharded pre/post part is gathered into the ring buffers too
        W_full_max = ex_max(x, W_full_max, ex_mul(x, ws, ex_mul(x, e->params, ex_num(x, me->param_bytes))));
        G_full_max = ex_max(x, G_full_max, ex_mul(x, gs, ex_mul(x, e->params, ex_num(x, me->grad_bytes))));
    }
    Expr states = ex_add(x, weights, ex_add(x, grads, optimizer));

    // ---- buffers
    Expr need_wbuf = ex_max(x, ws, cost_gt0(sb, wo));
    Expr need_gbuf = ex_max(x, gs, cost_gt0(sb, go));
    Expr rings = ex_add(x, ex_mul(x, need_wbuf, ex_mul(x, ex_num(x, 2), W_full_max)),
                         ex_mul(x, need_gbuf, ex_mul(x, ex_num(x, 2), G_full_max)));
    Expr p2p = zero;
    if (!sb->has_pre) p2p = ex_add(x, p2p, blk->output);   // receive the previous stage's output
    if (!sb->has_post) p2p = ex_add(x, p2p, blk->output);  // send buffer for the input grad / output
    Expr opt_staging = ex_mul(x, cost_gt0(sb, oo), O.shard);
    // the offloaded share of the next block's saved activations coming back
    // (checkpointed type when the stage's blocks before the last are all checkpointed)
    Expr next_is_ck = cost_ge(sb, c, ex_sub(x, L, one));
    Expr act_prefetch = ex_ceil(x, ex_mul(x, ao, ex_select(x, next_is_ck, blk->saved_ckpt, blk->saved)));
    Expr buffers_fwd = ex_add(x, rings, ex_add(x, p2p, opt_staging));
    Expr buffers_bwd = ex_add(x, rings, ex_add(x, p2p, act_prefetch));

    // ---- activations
    Expr keep = ex_sub(x, one, ao);
    Expr S_nc = ex_ceil(x, ex_mul(x, blk->saved, keep));
    Expr S_ck = ex_ceil(x, ex_mul(x, blk->saved_ckpt, keep));
    Expr per_mb = ex_add(x, ex_mul(x, c, S_ck), ex_mul(x, ex_sub(x, L, c), S_nc));
    // current micro-batch without the executing block: all checkpointed ->
    // (L-1) S_ck, else c S_ck + (L-c-1) S_nc (the executing block is a normal one)
    Expr all_ck = cost_ge(sb, c, L);
    Expr cur = ex_select(x, all_ck, ex_mul(x, ex_sub(x, L, one), S_ck),
                          ex_add(x, ex_mul(x, c, S_ck), ex_mul(x, ex_sub(x, ex_sub(x, L, c), one), S_nc)));
    Expr inflight = ex_mul(x, p, per_mb);
    Expr edge_saved = zero;
    if (sb->has_pre) edge_saved = ex_add(x, edge_saved, ex_mul(x, ex_add(x, p, one), me->pre.saved));
    Expr activations = ex_add(x, ex_add(x, inflight, per_mb), edge_saved);
    host = ex_add(x, host, ex_mul(x, ex_add(x, p, one),
                                  ex_add(x, ex_mul(x, c, ex_sub(x, blk->saved_ckpt, S_ck)),
                                         ex_mul(x, ex_sub(x, L, c), ex_sub(x, blk->saved, S_nc)))));

    Expr transient_fwd = ex_add(x, blk->saved, blk->transient_fwd);
    Expr transient_bwd = ex_add(x, blk->saved, blk->transient_bwd);
    Expr others = ex_add(x, ex_add(x, inflight, cur), edge_saved);
    Expr peak_fwd = ex_add(x, ex_add(x, states, buffers_fwd), ex_add(x, others, transient_fwd));
    Expr peak_bwd = ex_add(x, ex_add(x, states, buffers_bwd), ex_add(x, others, transient_bwd));
    Expr logits = zero;
    if (sb->has_post) {
        const PartExprs *post = &me->post;
        Expr lf = ex_add(x, post->saved, post->transient_fwd), lb = ex_add(x, post->saved, post->transient_bwd);
        Expr base = ex_add(x, ex_add(x, states, inflight), ex_add(x, per_mb, edge_saved));
        peak_fwd = ex_max(x, peak_fwd, ex_add(x, ex_add(x, base, buffers_fwd), lf));
        peak_bwd = ex_max(x, peak_bwd, ex_add(x, ex_add(x, base, buffers_bwd), lb));
        activations = ex_add(x, activations, post->saved);
        logits = ex_max(x, lf, lb);
    }
    out[ST_PEAK_FWD] = peak_fwd;
    out[ST_PEAK_BWD] = peak_bwd;
    out[ST_WEIGHTS] = weights;
    out[ST_GRADS] = grads;
    out[ST_OPTIMIZER] = optimizer;
    out[ST_ACTIVATIONS] = activations;
    out[ST_BUFFERS_FWD] = buffers_fwd;
    out[ST_BUFFERS_BWD] = buffers_bwd;
    out[ST_TRANSIENT_FWD] = transient_fwd;
    out[ST_TRANSIENT_BWD] = transient_bwd;
    out[ST_LOGITS] = logits;
    out[ST_HOST] = host;
}
