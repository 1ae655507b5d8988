// Stage time (docs/design.md §4): the per-block overlap schedule with its first /
// last micro-batch phases, stage steady time t and extra d, and the 1F1B
// pipeline total.
//
// Per block and phase, four streams run under the block's compute C:
//
//   phase            N (GPU<->GPU)                   H2D                 D2H
//   fwd, first mb    AG(W) if opt sharded            O_in + G_in         O_out + W_out + A_out
//   fwd, other       AG(W) if ZeRO-3                 W_in                A_out
//   bwd, last mb     AG(W) if ZeRO-3 + (RS(G) if     W_in + G_in + A_in  G_out
//                    opt sharded else AR(G))
//   bwd, other       AG(W) if ZeRO-3 + RS(G) if      W_in + G_in + A_in  G_out
//                    grads sharded
//
// The first forward micro-batch also runs the block's deferred optimizer step
// on the compute stream. TP all-reduces are on the critical path (added
// outside the window). In a stage of L blocks, block j's compute hides the
// prefetch (N, H2D) for the next block and the eviction (D2H) of the previous
// one; what the edges cannot hide is exposed:
//   forward:  crit(0,N,H,0) + crit(C,N,H,0) + (L-2) crit(C,N,H,D) + crit(C,0,0,D) + crit(0,0,0,D)
//   backward: crit(0,Nw,H,0) + crit(C,Nw,H,0) + (L-2) crit(C,Nw+Ng,H,D) + crit(C,Ng,0,D) + crit(0,Ng,0,D)
// (Nw = weight gathers, Ng = grad sync; a stage of one block: crit(0,N,H,0) + C + crit(0,...,D)).
// Checkpointed blocks are the last ckpt of the stage: they save only their
// input (smaller A_out / A_in) and recompute the forward in backward.
// Selective recompute (sel = 1): every other block runs its attention core's
// forward once more before its backward (C_bwd + sel * C_att, the attention
// op's own cost term); it does not offload att and lse (A), which it does not
// keep: its copies are priced as ao (saved - A), the continuous form the
// copies take without selective (ao saved), the offloaded part of A as ao A.
#include <math.h>
#include "planner/cost_terms.h"

double pipeline_1f1b_seconds(int S, int G, const double *t, const double *d) {
    double tmax = 0, tsum = 0, extra = 0, before = 0;
    for (int i = 0; i < S; i++) {
        tmax = fmax(tmax, t[i]);
        tsum += t[i];
        // stage i's extra first/last micro-batch work hides behind the fill
        // time of the stages before it
        extra = fmax(extra, d[i] - before);
        before += t[i];
    }
    return (G - 1) * tmax + tsum + extra;
}

// Interleaved: each rank runs its v chunks for every micro-batch, so in the
// steady state the slowest rank sets the pace, T_max = max_r T_r per
// micro-batch. Filling and draining the pipeline goes through the other
// ranks one chunk at a time instead of one whole stage at a time: with
// uniform chunks the fill is (P - 1) chunk-passes of T_r / v, the bubble
// (P - 1) T_r / v (Narayanan et al. 2021, eq. in section 2.2.2), and in
// general (sum_r T_r - T_max) / v - for v = 1 1F1B's sum t - max t. A rank's
// first/last micro-batch extra is the sum of its chunks' (one rank runs them
// all: their optimizer steps, their gradient syncs) and hides behind the fill
// before the rank's first pass, B_r = sum_{q<r} T_q / v.
double pipeline_interleaved_seconds(int P, int v, int G, const double *t, const double *d) {
    if (v <= 1) return pipeline_1f1b_seconds(P, G, t, d);
    double tmax = 0, tsum = 0, extra = 0, before = 0;
    for (int r = 0; r < P; r++) {
        double Tr = 0, Dr = 0;
        for (int j = 0; j < v; j++) Tr += t[r + j * P], Dr += d[r + j * P];
        tmax = fmax(tmax, Tr);
        tsum += Tr;
        extra = fmax(extra, Dr - before);
        before += Tr / v;
    }
    return G * tmax + (tsum - tmax) / v + extra;
}

typedef struct {
    Expr C;        // compute of the block (incl. recompute / optimizer step)
    Expr E;        // TP all-reduces, not overlappable
    Expr Nw, Ng;  // weight gathers, gradient sync
    Expr H, D;    // host->device, device->host bytes-times
} Phase;

static Expr crit(StageBuild *sb, Expr c, Expr n, Expr h, Expr d) {
    Expr streams[STREAM_COUNT] = {c, n, h, d};
    return overlap_expr(sb->x, sb->hw, streams);
}

static Expr sum2(ExprCtx *x, Expr a, Expr b) {
    if (a == EXPR_NONE) return b;
    if (b == EXPR_NONE) return a;
    return ex_add(x, a, b);
}

// cond > 0 ? a : b for each stream (EXPR_NONE: no work on that stream)
static Expr select_stream(ExprCtx *x, Expr cond, Expr a, Expr b) {
    if (a == EXPR_NONE && b == EXPR_NONE) return EXPR_NONE;
    Expr zero = ex_num(x, 0);
    return ex_select(x, cond, a == EXPR_NONE ? zero : a, b == EXPR_NONE ? zero : b);
}

static Phase select_phase(ExprCtx *x, Expr cond, const Phase *a, const Phase *b) {
    Phase p = {select_stream(x, cond, a->C, b->C), select_stream(x, cond, a->E, b->E),
               select_stream(x, cond, a->Nw, b->Nw), select_stream(x, cond, a->Ng, b->Ng),
               select_stream(x, cond, a->H, b->H), select_stream(x, cond, a->D, b->D)};
    return p;
}

// Time of one phase over the stage's L blocks. nc/ck: the phase for a normal
// and a checkpointed block. backward: blocks run last to first.
static Expr stage_phase(StageBuild *sb, const Phase *nc, const Phase *ck, int backward) {
    ExprCtx *x = sb->x;
    Expr L = sb->s[SYM_L], c = sb->s[SYM_CKPT];
    // the block that runs first / last in this phase is checkpointed when...
    Expr first_ck, last_ck;
    Expr edge_first_is_ck = cost_ge(sb, c, L);  // block 0 is checkpointed iff c >= L
    Expr edge_last_is_ck = cost_gt0(sb, c);     // block L-1 iff c >= 1
    first_ck = backward ? edge_last_is_ck : edge_first_is_ck;
    last_ck = backward ? edge_first_is_ck : edge_last_is_ck;
    // middle blocks: clip(c - 1, 0, L - 2) checkpointed, the rest normal
    Expr Lm2 = ex_max(x, ex_sub(x, L, ex_num(x, 2)), sb->zero);
    Expr mid_ck = ex_min(x, ex_max(x, ex_sub(x, c, sb->one), sb->zero), Lm2);
    Expr mid_nc = ex_sub(x, Lm2, mid_ck);

    // The edge blocks run once each, as a normal or a checkpointed block:
    // selecting the streams first and applying the overlap rule once gives
    // bitwise the value of selecting between the rule applied to both (the
    // rule is a function of its inputs), at half the cost. The middle blocks
    // need both variants.
    Phase fe = select_phase(x, first_ck, ck, nc), la = select_phase(x, last_ck, ck, nc);
    Expr mid[2];
    const Phase *ph[2] = {nc, ck};
    for (int k = 0; k < 2; k++) {
        const Phase *p = ph[k];
        mid[k] = backward ? crit(sb, p->C, sum2(x, p->Nw, p->Ng), p->H, p->D) : crit(sb, p->C, p->Nw, p->H, p->D);
    }
    Expr pre_t = crit(sb, EXPR_NONE, fe.Nw, fe.H, EXPR_NONE);
    Expr first_t = crit(sb, fe.C, fe.Nw, fe.H, EXPR_NONE);
    Expr last_t = backward ? crit(sb, la.C, la.Ng, EXPR_NONE, la.D) : crit(sb, la.C, EXPR_NONE, EXPR_NONE, la.D);
    Expr post_t = backward ? crit(sb, EXPR_NONE, la.Ng, EXPR_NONE, la.D) : crit(sb, EXPR_NONE, EXPR_NONE, EXPR_NONE, la.D);
    Expr many = ex_add(x, ex_add(x, pre_t, first_t), ex_add(x, last_t, post_t));
    many = ex_add(x, many, ex_add(x, ex_mul(x, mid_nc, mid[0]), ex_mul(x, mid_ck, mid[1])));
    Expr one_block = ex_add(x, pre_t, ex_add(x, fe.C, post_t));
    Expr t = ex_select(x, ex_sub(x, L, ex_num(x, 1.5)), many, one_block);
    // TP all-reduces of every block
    Expr n_ck = ex_min(x, c, L), n_nc = ex_sub(x, L, n_ck);
    Expr e = ex_add(x, ex_mul(x, n_nc, nc->E), ex_mul(x, n_ck, ck->E));
    return ex_add(x, t, e);
}

// The side streams' work of one phase over the stage's blocks, before the overlap rule:
// n_nc normal blocks and n_ck checkpointed ones each bring their phase's work.
static void stream_work(StageBuild *sb, const Phase *nc, const Phase *ck, Expr *out) {
    ExprCtx *x = sb->x;
    Expr L = sb->s[SYM_L], n_ck = ex_min(x, sb->s[SYM_CKPT], L), n_nc = ex_sub(x, L, n_ck);
    const Phase *ph[2] = {nc, ck};
    Expr n[2] = {n_nc, n_ck};
    for (int k = 0; k < 2; k++) {
        Expr w[STAGE_STREAMS] = {sum2(x, ph[k]->Nw, ph[k]->Ng), ph[k]->H, ph[k]->D};
        for (int s = 0; s < STAGE_STREAMS; s++)
            if (w[s] != EXPR_NONE) out[s] = sum2(x, out[s], ex_mul(x, n[k], w[s]));
    }
}

static Expr mul_flag(ExprCtx *x, Expr flag, Expr e) { return ex_mul(x, flag, e); }

// Time of the pre or post part: not overlapped with anything (its states are
// never offloaded); returns per-micro-batch steady time, adds its extra
// first/last micro-batch time to *extra.
static Expr edge_part_time(StageBuild *sb, const PartExprs *part, Expr *extra, Expr *flops) {
    ExprCtx *x = sb->x;
    const ModelExprs *me = sb->me;
    Expr ws = sb->s[SYM_WS], gs = sb->s[SYM_GS], os = sb->s[SYM_OS];
    Expr Wf = ex_mul(x, part->params, ex_num(x, me->param_bytes));
    Expr Gf = ex_mul(x, part->params, ex_num(x, me->grad_bytes));
    Expr ag = cost_dp_collective(sb, COLL_ALL_GATHER, Wf);
    Expr rs = cost_dp_collective(sb, COLL_REDUCE_SCATTER, Gf);
    Expr ar = cost_dp_collective(sb, COLL_ALL_REDUCE, Gf);
    Expr cf = cost_part_compute_fwd(sb, part), cb = cost_part_compute_bwd(sb, part);
    Expr e = ex_add(x, cost_tp_collective(sb, COLL_ALL_REDUCE, part->tp_comm_fwd),
                     cost_tp_collective(sb, COLL_ALL_REDUCE, part->tp_comm_bwd));
    ParoTraffic tr = cost_paro_traffic(sb, Wf, Gf, ag, rs, ar);  // ZeRO's terms for codes 0..3
    (void)ws, (void)gs, (void)os;
    Expr steady = ex_add(x, ex_add(x, cf, cb), ex_add(x, e, ex_add(x, tr.gather_use, tr.reduce_micro)));
    // first fwd: optimizer step of the shard + refresh gather when the
    // optimizer is sharded more widely than weights (ZeRO-1/2; PaRO's O > W);
    // last bwd: the grad sync not already done per micro-batch
    Expr step = cost_optimizer_step(sb, ex_ceil(x, ex_div(x, part->params, sb->oshard)));
    Expr refresh = ex_sub(x, tr.gather_first, tr.gather_use);
    Expr sync = ex_sub(x, tr.reduce_last, tr.reduce_micro);
    *extra = ex_add(x, *extra, ex_add(x, step, ex_add(x, refresh, sync)));
    *flops = ex_add(x, *flops, ex_add(x, cost_part_flops(sb, part, 0), cost_part_flops(sb, part, 1)));
    return steady;
}

// One boundary of a stage, per micro-batch, as runtime/pipeline_run.c runs it:
// the stage sends one (b, s, h) tensor across it and receives one (the
// activation one way, its gradient the other). A send starts after its pass
// and runs beside the stage's next work (NCCL on its own stream; MPI
// nonblocking); the receive is waited for before the pass that reads it, so
// it is on the critical path: latency + bytes / bandwidth of the link
// (cost_p2p: across nodes when the stage fills whole nodes). Each pass also
// copies the tensor once on the device (into its send buffer, or out of its
// receive buffer): 2 bytes of memory traffic per byte, two copies a boundary.
// A profile measured with collectives staged through host memory (no NCCL)
// prices the comm backend the runtime then takes (runtime/comm_staged.c):
// every message is copied to the host when it starts and back when it has
// arrived, both on the critical path; its fitted lines include those copies,
// so the message costs at least d2h + h2d.
static Expr boundary_seconds(StageBuild *sb, Expr bytes) {
    ExprCtx *x = sb->x;
    const HwProfile *hw = sb->hw;
    Expr message = cost_p2p(sb, bytes);
    if (hw->staged_collectives) message = ex_max(x, message, ex_add(x, cost_d2h(sb, bytes), cost_h2d(sb, bytes)));
    Expr copy = ex_add(x, ex_mul(x, bytes, ex_num(x, 2.0 / (hw->mem_bandwidth * hw->bandwidth_efficiency))),
                       ex_num(x, hw->launch_seconds));
    return ex_add(x, message, ex_mul(x, ex_num(x, 2), copy));
}

// ZeRO's dp collective of `bytes`: one ring, or under [cluster] collectives = hierarchical two
// levels where the dp group spans nodes (in place, the all-reduce pipelined in chunks, as
// runtime/comm_hier.c runs them)
static Expr dp_collective(StageBuild *sb, CollKind kind, Expr bytes) {
    if (sb->cfg->cluster.collectives == CLUSTER_COLL_HIER) return cost_dp_collective_hier(sb, kind, bytes, 1);
    return cost_dp_collective(sb, kind, bytes);
}

// A block's tensor-parallel collectives in forward (backward = 0) or backward. Under sequence
// parallelism (runtime/model_sp.c) each all-reduce of an (N,C) payload becomes an all-gather
// before the region and a reduce-scatter after it; backward also re-gathers the norm output for
// the weight gradient (one more all-gather per region) and sums the norm parameters' gradients.
static Expr tp_collectives(StageBuild *sb, int backward) {
    ExprCtx *x = sb->x;
    const ModelExprs *me = sb->me;
    Expr bytes = backward ? me->block.tp_comm_bwd : me->block.tp_comm_fwd;
    Expr plain = cost_tp_collective(sb, COLL_ALL_REDUCE, bytes);
    Expr rs = cost_tp_collective(sb, COLL_REDUCE_SCATTER, bytes), with_sp;
    if (backward)
        with_sp = ex_add(x, cost_tp_collective(sb, COLL_ALL_GATHER, ex_mul(x, ex_num(x, 2), bytes)),
                         ex_add(x, rs, cost_tp_collective(sb, COLL_ALL_REDUCE,
                                                          ex_num(x, me->sp_norm_grad_elems * me->grad_bytes))));
    else
        with_sp = ex_add(x, cost_tp_collective(sb, COLL_ALL_GATHER, bytes), rs);
    return ex_select(x, sb->s[SYM_SP], with_sp, plain);
}

void schedule_build(StageBuild *sb, Expr out[ST_OUTPUTS]) {
    ExprCtx *x = sb->x;
    const ModelExprs *me = sb->me;
    const PartExprs *blk = &me->block;
    Expr ws = sb->s[SYM_WS], gs = sb->s[SYM_GS], os = sb->s[SYM_OS];
    Expr wo = sb->s[SYM_WO], go = sb->s[SYM_GO], oo = sb->s[SYM_OO], ao = sb->s[SYM_AO];

    // sizes per rank
    Expr P = blk->params;
    Expr W_full = ex_mul(x, P, ex_num(x, me->param_bytes));
    Expr G_full = ex_mul(x, P, ex_num(x, me->grad_bytes));
    Expr W_shard = cost_shard_bytes(sb, P, sb->wshard, me->param_bytes);
    Expr G_shard = cost_shard_bytes(sb, P, sb->gshard, me->grad_bytes);
    Expr O_shard = cost_shard_bytes(sb, P, sb->oshard, me->optimizer_bytes);

    // transfers (seconds)
    Expr AG_w = dp_collective(sb, COLL_ALL_GATHER, W_full);
    Expr RS_g = dp_collective(sb, COLL_REDUCE_SCATTER, G_full);
    Expr AR_g = dp_collective(sb, COLL_ALL_REDUCE, G_full);
    // Staged collectives: the device waits for each one's copies (the start drains the
    // queue, the result lands after it), so they leave the overlap window for the
    // critical path, with the TP all-reduces; the rest of the measured line (MPI on
    // host memory) stays beside compute.
    Expr AG_cp = EXPR_NONE, RS_cp = EXPR_NONE, AR_cp = EXPR_NONE;
    if (sb->hw->staged_collectives) {
        AG_cp = cost_dp_collective_copies(sb, COLL_ALL_GATHER, W_full);
        RS_cp = cost_dp_collective_copies(sb, COLL_REDUCE_SCATTER, G_full);
        AR_cp = cost_dp_collective_copies(sb, COLL_ALL_REDUCE, G_full);
        AG_w = ex_max(x, ex_sub(x, AG_w, AG_cp), sb->zero);
        RS_g = ex_max(x, ex_sub(x, RS_g, RS_cp), sb->zero);
        AR_g = ex_max(x, ex_sub(x, AR_g, AR_cp), sb->zero);
    }
    Expr W_in = cost_h2d(sb, ex_mul(x, W_shard, wo)), W_out = cost_d2h(sb, ex_mul(x, W_shard, wo));
    Expr G_in = cost_h2d(sb, ex_mul(x, G_shard, go)), G_out = cost_d2h(sb, ex_mul(x, G_shard, go));
    Expr O_in = cost_h2d(sb, ex_mul(x, O_shard, oo)), O_out = cost_d2h(sb, ex_mul(x, O_shard, oo));
    Expr A_in[2], A_out[2];
    // selective recompute: att and lse are not kept (memory.c's A, per rank), nor moved
    Expr sel = sb->s[SYM_SEL];
    Expr sel_bytes = ex_mul(x, sel, memory_sel_bytes(sb));
    // (floored at 0: at a tp the model cannot split into, the bytes are 1e30, never fitting)
    Expr saved[2] = {ex_max(x, ex_sub(x, blk->saved, sel_bytes), sb->zero), blk->saved_ckpt};
    for (int k = 0; k < 2; k++) {
        A_in[k] = cost_h2d(sb, ex_mul(x, saved[k], ao));
        A_out[k] = cost_d2h(sb, ex_mul(x, saved[k], ao));
    }

    // compute
    Expr Cf = cost_part_compute_fwd(sb, blk), Cb = cost_part_compute_bwd(sb, blk);
    Expr Ef = tp_collectives(sb, 0), Eb = tp_collectives(sb, 1);
    Expr step = cost_optimizer_step(sb, ex_ceil(x, ex_div(x, P, sb->oshard)));
    Expr att_flops, Ca = ex_mul(x, sel, cost_part_attention_fwd(sb, blk, &att_flops));  // selective recompute
    // lean: the blocks not checkpointed run the GELU in a pass of its own and invert it in backward
    Expr Lf = cost_lean_extra(sb, 0), Lb = cost_lean_extra(sb, 1);

    // the dp traffic of each phase by the scopes (planner/cost_paro.c; codes 0..3: ZeRO's flat terms)
    ParoTraffic tr = cost_paro_traffic(sb, W_full, G_full, AG_w, RS_g, AR_g);
    Phase fwd_first[2], fwd_other[2], bwd_last[2], bwd_other[2];
    for (int k = 0; k < 2; k++) {  // k = 0 normal, 1 checkpointed
        Expr Cfk = k ? Cf : ex_add(x, Cf, Lf);
        fwd_first[k] = (Phase){ex_add(x, Cfk, step), Ef, tr.gather_first, EXPR_NONE,
                               ex_add(x, O_in, G_in), ex_add(x, ex_add(x, O_out, W_out), A_out[k])};
        fwd_other[k] = (Phase){Cfk, Ef, tr.gather_use, EXPR_NONE, W_in, A_out[k]};
        Expr C = k ? ex_add(x, Cf, Cb) : ex_add(x, ex_add(x, Cb, Ca), Lb);
        Expr E = k ? ex_add(x, Ef, Eb) : Eb;
        Expr H = ex_add(x, ex_add(x, W_in, G_in), A_in[k]);
        bwd_last[k] = (Phase){C, E, tr.gather_use, tr.reduce_last, H, G_out};
        bwd_other[k] = (Phase){C, E, tr.gather_use, tr.reduce_micro, H, G_out};
        if (AG_cp != EXPR_NONE) {  // staged: each phase's copies with its unhidden extras
            fwd_first[k].E = ex_add(x, fwd_first[k].E, mul_flag(x, os, AG_cp));
            fwd_other[k].E = ex_add(x, fwd_other[k].E, mul_flag(x, ws, AG_cp));
            bwd_last[k].E = ex_add(x, bwd_last[k].E, ex_add(x, mul_flag(x, ws, AG_cp), ex_select(x, os, RS_cp, AR_cp)));
            bwd_other[k].E = ex_add(x, bwd_other[k].E, ex_add(x, mul_flag(x, ws, AG_cp), mul_flag(x, gs, RS_cp)));
        }
    }
    Expr t_fwd_first = stage_phase(sb, &fwd_first[0], &fwd_first[1], 0);
    Expr t_fwd_other = stage_phase(sb, &fwd_other[0], &fwd_other[1], 0);
    Expr t_bwd_last = stage_phase(sb, &bwd_last[0], &bwd_last[1], 1);
    Expr t_bwd_other = stage_phase(sb, &bwd_other[0], &bwd_other[1], 1);
    const Phase *phases[STAGE_PHASES] = {fwd_first, fwd_other, bwd_last, bwd_other};
    for (int ph = 0; ph < STAGE_PHASES; ph++)
        stream_work(sb, &phases[ph][0], &phases[ph][1], &out[ST_STREAMS + STAGE_STREAMS * ph]);

    // executed FLOPs per micro-batch: every block fwd + bwd, plus the
    // recomputed forward of the checkpointed ones
    Expr L = sb->s[SYM_L], n_ck = ex_min(x, sb->s[SYM_CKPT], L);
    Expr ff = cost_part_flops(sb, blk, 0), fb = cost_part_flops(sb, blk, 1);
    Expr flops = ex_add(x, ex_mul(x, L, ex_add(x, ff, fb)), ex_mul(x, n_ck, ff));
    // and the attention core again in the others under selective recompute
    flops = ex_add(x, flops, ex_mul(x, ex_mul(x, sel, ex_sub(x, L, n_ck)), att_flops));

    // pre / post parts, pipeline sends
    Expr edge_t = sb->zero, edge_d = sb->zero;
    if (sb->has_pre) edge_t = ex_add(x, edge_t, edge_part_time(sb, &me->pre, &edge_d, &flops));
    if (sb->has_post) edge_t = ex_add(x, edge_t, edge_part_time(sb, &me->post, &edge_d, &flops));
    // pipeline sends: per micro-batch and neighbouring stage (docs/pipeline.md)
    Expr side = boundary_seconds(sb, blk->output);  // the (b, s, h) residual stream per rank
    if (!sb->has_post) edge_t = ex_add(x, edge_t, side);  // send activations forward, receive their grads
    if (!sb->has_pre) edge_t = ex_add(x, edge_t, side);   // receive activations, send input grads backward

    // sequence parallelism: the stage's output and, in backward, its input gradient are
    // all-gathered from the ranks' rows (the head, the embedding and the pipeline boundary
    // see whole tensors); the embedding's partial sums are reduce-scattered, not all-reduced
    Expr sp_edge = ex_mul(x, ex_num(x, 2), cost_tp_collective(sb, COLL_ALL_GATHER, blk->output));
    if (sb->has_pre)
        sp_edge = ex_add(x, sp_edge, ex_sub(x, cost_tp_collective(sb, COLL_REDUCE_SCATTER, me->pre.tp_comm_fwd),
                                            cost_tp_collective(sb, COLL_ALL_REDUCE, me->pre.tp_comm_fwd)));
    edge_t = ex_add(x, edge_t, ex_select(x, sb->s[SYM_SP], sp_edge, sb->zero));
    Expr multi_t = ex_add(x, t_fwd_other, t_bwd_other);
    Expr multi_d = ex_sub(x, ex_add(x, t_fwd_first, t_bwd_last), multi_t);
    Expr several = ex_sub(x, sb->s[SYM_G], ex_num(x, 1.5));  // G >= 2
    // with one micro-batch it is both the first and the last: t holds all, d = 0
    out[ST_T] = ex_add(x, ex_select(x, several, multi_t, ex_add(x, t_fwd_first, t_bwd_last)), edge_t);
    out[ST_D] = ex_select(x, several, ex_add(x, multi_d, edge_d), sb->zero);
    out[ST_T] = ex_add(x, out[ST_T], ex_select(x, several, sb->zero, edge_d));
    out[ST_FWD_FIRST] = t_fwd_first;  // the stage's blocks only
    out[ST_FWD_OTHER] = t_fwd_other;
    out[ST_BWD_LAST] = t_bwd_last;
    out[ST_BWD_OTHER] = t_bwd_other;
    out[ST_HW_FLOPS] = flops;
    // the passes' nested parts: a checkpointed block recomputes its forward (Cf + Ef) before its backward
    out[ST_BLOCK_FWD] = out[ST_BLOCK_RECOMPUTE] = ex_add(x, Cf, Ef);
    out[ST_BLOCK_BWD] = ex_add(x, Cb, Eb);
    // and, under selective recompute, a block not checkpointed its attention core's forward (Ca = sel C_att)
    out[ST_BLOCK_RECOMPUTE_ATT] = Ca;
    // and a lean block not checkpointed its extra passes (Lf, Lb: sym lean times their price)
    out[ST_BLOCK_LEAN_FWD] = Lf;
    out[ST_BLOCK_LEAN_BWD] = Lb;
    const PartExprs *edge[2] = {sb->has_pre ? &me->pre : NULL, sb->has_post ? &me->post : NULL};
    for (int k = 0; k < 2; k++) {
        if (!edge[k]) continue;
        out[k ? ST_POST_FWD : ST_PRE_FWD] = ex_add(x, cost_part_compute_fwd(sb, edge[k]),
                                                   cost_tp_collective(sb, COLL_ALL_REDUCE, edge[k]->tp_comm_fwd));
        out[k ? ST_POST_BWD : ST_PRE_BWD] = ex_add(x, cost_part_compute_bwd(sb, edge[k]),
                                                   cost_tp_collective(sb, COLL_ALL_REDUCE, edge[k]->tp_comm_bwd));
    }
    // sp: the embedding reduce-scatters its partial sums instead of all-reducing them
    if (sb->has_pre)
        out[ST_PRE_FWD] = ex_select(x, sb->s[SYM_SP],
                                    ex_add(x, cost_part_compute_fwd(sb, &me->pre),
                                           cost_tp_collective(sb, COLL_REDUCE_SCATTER, me->pre.tp_comm_fwd)),
                                    out[ST_PRE_FWD]);
}
