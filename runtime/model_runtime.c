// Forward and backward of one micro-batch on a stage, written with backend
// ops only (the memory they run in: runtime/model_memory.c).
#include "runtime/model_runtime.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/comm.h"
#include "runtime/model_sp.h"
#include "runtime/trace_measure.h"

// ---------------------------------------------------------------- forward / backward

// Marks around a part of the pass for [log] trace: without a trace, one branch.
static void part_begin(ModelRuntime *r, int kind, int stage_block) {
    if (r->trace) trace_measure_part(r->trace, kind, stage_block < 0 ? -1 : r->pipe.first_layer + stage_block);
}
static void part_end(ModelRuntime *r) {
    if (r->trace) trace_measure_part_end(r->trace);
}
static void *ptr_or_null(const ArenaTensor *t) { return t->bytes ? arena_ptr(t) : NULL; }

// a live tensor of 0 bytes (the layernorm mean under rmsnorm) is passed as NULL
static void *take(ArenaTensor *t) {
    void *p = arena_take(t);
    return t->bytes ? p : NULL;
}

// a block's saved tensors (rows of use SAVED) whose bit is set in mask, taken / released
static void take_masked(BlockActs *a, unsigned mask) {
    for (int k = 0; k < MR_NUM_BLOCK_ACTS; k++)
        if (mr_acts[k].use == MR_USE_SAVED && mask >> k & 1) arena_take(mr_block_act(a, k));
}
static void release_masked(BlockActs *a, unsigned mask) {
    for (int k = 0; k < MR_NUM_BLOCK_ACTS; k++)
        if (mr_acts[k].use == MR_USE_SAVED && mask >> k & 1) arena_release(mr_block_act(a, k));
}
// all of them (the block input x stays as it is)
static void take_rest(BlockActs *a) { take_masked(a, ~0u); }
static void release_rest(BlockActs *a) { release_masked(a, ~0u); }

// The tensors of acts[i] (block i mod L of slot i / L, not checkpointed) it
// computes with: its own, the offloaded ones in the swap workspace, and under
// selective recompute att and lse in the selective workspace (a copy of the
// descriptors; liveness stays with the originals).
static BlockActs act_view(ModelRuntime *r, int i) {
    BlockActs v = r->acts[i];
    for (int k = 0; k < MR_NUM_BLOCK_ACTS; k++) {
        if (r->act_mask >> k & 1) *mr_block_act(&v, k) = *mr_block_act(&r->aws, k);
        if (!(mr_kept_mask(r) >> k & 1)) *mr_block_act(&v, k) = *mr_block_act(&r->sws, k);
    }
    return v;
}

// Selective recompute, before a block's backward: its attention core (att,
// lse) again from the kept qkv (after rotary, as forward read it), into the
// selective workspace that v points at. The same kernel on the same input:
// the backward reads the bits forward computed.
static void attention_recompute(ModelRuntime *r, BlockActs *v) {
    take_masked(&r->sws, MR_SELECTIVE_MASK);
    r->be->attention_forward(r->be, r->stream, arena_ptr(&v->att), arena_ptr(&v->lse), arena_ptr(&v->qkv), r->B,
                             r->T, r->NH, r->NKV, r->HS);
}

// after the forward of acts[i]: its offloaded tensors go to the host (d2h), the workspace is free
static void acts_swap_out(ModelRuntime *r, int i) {
    for (int k = 0; k < MR_NUM_BLOCK_ACTS; k++) {
        if (!(r->act_mask >> k & 1)) continue;
        ArenaTensor *dev = mr_block_act(&r->aws, k), *host = mr_block_act(&r->hacts[i], k);
        r->be->copy_d2h(r->be, arena_take(host), arena_ptr(dev), dev->bytes, r->stream);
        arena_release(dev);
    }
}

// before the backward of acts[i]: back into the workspace (h2d)
static void acts_swap_in(ModelRuntime *r, int i) {
    for (int k = 0; k < MR_NUM_BLOCK_ACTS; k++) {
        if (!(r->act_mask >> k & 1)) continue;
        ArenaTensor *dev = mr_block_act(&r->aws, k), *host = mr_block_act(&r->hacts[i], k);
        r->be->copy_h2d(r->be, arena_take(dev), arena_ptr(host), dev->bytes, r->stream);
        arena_release(host);
    }
}

// the backward gradient buffers (rows of use GRAD), taken / released together
static void take_grads(ModelRuntime *r) {
    for (int k = MR_NUM_BLOCK_ACTS; k < MR_NUM_ACTS; k++)
        if (mr_acts[k].use == MR_USE_GRAD) arena_take(mr_stage_act(r, k));
}
static void release_grads(ModelRuntime *r) {
    for (int k = MR_NUM_BLOCK_ACTS; k < MR_NUM_ACTS; k++)
        if (mr_acts[k].use == MR_USE_GRAD) arena_release(mr_stage_act(r, k));
}

// weights and gradients are addressed by flat offset; zero.c knows which
// buffer holds each unit now (in place, or a gathered / swapped-in copy)
#define PARAM(off) zero_w(r, (off))
#define GRAD(off) zero_g(r, (off))

// ---- tensor parallelism (Megatron). A row-parallel projection (attn_proj,
// fc_proj, and the vocabulary-parallel embedding) leaves on each tp rank a
// partial sum over its share of the input features: out = sum_t in_t W_t^T,
// so it is all-reduced (sum) before the residual stream, which is then the
// same bits on every tp rank. A column-parallel layer (qkv, fc, LM head)
// sees the replicated input and computes its own output columns; its input
// gradient dL/din = sum_t dout_t W_t is the sum over tp ranks: all-reduced
// in backward. Everything between (norms, residuals) repeats on every rank
// with identical inputs, so gradients of replicated parameters come out
// identical without any communication.
static void tp_sum(ModelRuntime *r, void *buf, size_t count) {
    if (r->tp == 1) return;
    // the comm backend reads the finished tensor: NCCL, stream-ordered, enqueues the sum
    // after the stream's work and the stream waits for it; the others read it from the host
    if (!r->comm_stream_ordered) r->be->stream_synchronize(r->be, r->stream);
    commCheck(r->comm, r->comm->all_reduce(r->comm, buf, buf, count, r->be->dtype, COMM_SUM, r->tpg));
}

// the bias of a row-parallel layer is added once, by tp rank 0, before the sum
static const void *row_parallel_bias(ModelRuntime *r, int64_t off) { return r->tp_rank == 0 ? PARAM(off) : NULL; }

// Block l forward up to the MLP activation. Sequential block: the attention
// projection is summed over tp and added to the residual stream (mid), which
// ln2 normalises for the MLP. Parallel (Falcon) block: attention and MLP both
// read ln1, and both projections are left to the caller (block_forward_output);
// a recompute needs neither, since no saved tensor comes after them.
static void block_forward_to_act(ModelRuntime *r, int l, BlockActs *a, const void *xin) {
    Backend *be = r->be;
    BackendStream *st = r->stream;
    const BlockParams *bp = &r->blk[l];
    NormOp nk = r->m.norm == NORM_LAYERNORM ? NORM_OP_LAYERNORM : NORM_OP_RMSNORM;
    int N = r->B * r->T;
    float eps = (float)r->m.norm_eps;
    void *scratch = arena_ptr(&r->scratch);
    be->norm_forward(be, st, nk, NULL, arena_ptr(&a->ln1), ptr_or_null(&a->ln1_mean), arena_ptr(&a->ln1_rstd),
                     xin, NULL, PARAM(bp->ln1_w), PARAM(bp->ln1_b), N, r->C, eps);
    be->matmul_forward(be, st, arena_ptr(&a->qkv), NULL, arena_ptr(&a->ln1), PARAM(bp->qkv_w), PARAM(bp->qkv_b),
                       N, r->C, r->QKV);
    void *mid = r->lean_mid ? r->lean_mid : ptr_or_null(&a->mid);  // lean: the next block's x
    if (r->m.position == POS_ROTARY)
        be->rotary_forward(be, st, arena_ptr(&a->qkv), r->B, r->T, r->NH, r->NKV, r->HS, (float)r->m.rope_theta);
    be->attention_forward(be, st, arena_ptr(&a->att), arena_ptr(&a->lse), arena_ptr(&a->qkv), r->B, r->T, r->NH,
                          r->NKV, r->HS);
    const void *mlp_in = arena_ptr(&a->ln1);
    if (!r->m.parallel_block) {
        be->matmul_forward(be, st, scratch, NULL, arena_ptr(&a->att), PARAM(bp->proj_w),
                           row_parallel_bias(r, bp->proj_b), N, r->NH * r->HS, r->C);
        tp_sum(r, scratch, (size_t)N * r->C);
        // mid = x + attention projection, ln2 = norm(mid), fused
        be->norm_forward(be, st, nk, mid, arena_ptr(&a->ln2), ptr_or_null(&a->ln2_mean), arena_ptr(&a->ln2_rstd),
                         scratch, xin, PARAM(bp->ln2_w), PARAM(bp->ln2_b), N, r->C, eps);
        mlp_in = arena_ptr(&a->ln2);
    }
    if (r->m.activation != ACT_SWIGLU && ptr_or_null(&a->fc_mask)) {  // lean: act = gelu(fc) in place, fc not kept
        be->matmul_forward(be, st, arena_ptr(&a->act), NULL, mlp_in, PARAM(bp->fc_w), PARAM(bp->fc_b), N, r->C, r->F);
        be->gelu_forward_mask(be, st, arena_ptr(&a->act), arena_ptr(&a->fc_mask), arena_ptr(&a->act), (size_t)N * r->F);
    } else if (r->m.activation == ACT_SWIGLU) {  // lean: act into the d_act buffer, not kept
        be->matmul_forward(be, st, arena_ptr(&a->fc), NULL, mlp_in, PARAM(bp->fc_w), PARAM(bp->fc_b), N, r->C, r->FC);
        be->swiglu_forward(be, st, r->lean_act ? r->lean_act : arena_ptr(&a->act), arena_ptr(&a->fc), N, r->F);
    } else {  // fc keeps the pre-activation, act = gelu(fc) (fused epilogue)
        be->matmul_forward(be, st, arena_ptr(&a->act), arena_ptr(&a->fc), mlp_in, PARAM(bp->fc_w), PARAM(bp->fc_b),
                           N, r->C, r->F);
    }
}

// The block's output xout = x_{l+1} from its activations (scratch is taken).
// Sequential: xout = mid + sum_tp(act Wfcproj^T). Parallel: both row-parallel
// projections' partial sums are added first, so one all-reduce serves both:
// xout = x + sum_tp(att_t Wproj_t^T + act_t Wfcproj_t^T) (biases once, on tp
// rank 0), the one all-reduce the model description counts for the block.
static void block_forward_output(ModelRuntime *r, int l, BlockActs *a, const void *xin, void *xout) {
    Backend *be = r->be;
    BackendStream *st = r->stream;
    const BlockParams *bp = &r->blk[l];
    int N = r->B * r->T;
    size_t nc = (size_t)N * r->C;
    void *scratch = arena_ptr(&r->scratch);
    be->matmul_forward(be, st, scratch, NULL, r->lean_act ? r->lean_act : arena_ptr(&a->act), PARAM(bp->fcproj_w),
                       row_parallel_bias(r, bp->fcproj_b), N, r->F, r->C);
    if (!r->m.parallel_block) {
        tp_sum(r, scratch, nc);
        // lean: mid was written into xout itself (out aliasing a)
        be->residual_forward(be, st, xout, r->lean_mid ? xout : arena_ptr(&a->mid), scratch, nc);
        return;
    }
    be->matmul_forward(be, st, xout, NULL, arena_ptr(&a->att), PARAM(bp->proj_w), row_parallel_bias(r, bp->proj_b),
                       N, r->NH * r->HS, r->C);
    be->residual_forward(be, st, xout, xout, scratch, nc);
    tp_sum(r, xout, nc);
    be->residual_forward(be, st, xout, xout, xin, nc);
}

// Backward of block l; d_res = dL/dx_{l+1} on entry, dL/dx_l on return.
// Sequential block: the MLP's input gradient goes through ln2 into d_res
// (now dL/dmid), then the attention's through ln1. Parallel block: both
// branches read d_res = dL/dx_{l+1} and feed ln1: the MLP's dL/dln1 lands in
// d_ln_mlp, the attention's in d_ln, and their sum takes one all-reduce and
// one norm backward (dL/dln1 = d_attn + d_mlp, summed over tp).
static void block_backward(ModelRuntime *r, int l, BlockActs *a, const void *xin) {
    Backend *be = r->be;
    BackendStream *st = r->stream;
    const BlockParams *bp = &r->blk[l];
    NormOp nk = r->m.norm == NORM_LAYERNORM ? NORM_OP_LAYERNORM : NORM_OP_RMSNORM;
    int N = r->B * r->T;
    size_t nc = (size_t)N * r->C;
    int par = r->m.parallel_block, lean = mr_is_lean_block(r, l);
    void *d_res = arena_ptr(&r->d_res), *d_ln = arena_ptr(&r->d_ln), *d_act = arena_ptr(&r->d_act);
    void *d_mlp_in = par ? arena_ptr(&r->d_ln_mlp) : d_ln;  // dL/d(the MLP's input)
    const void *mlp_in = par ? arena_ptr(&a->ln1) : arena_ptr(&a->ln2);
    // MLP projection: d_act = d_res Wfcproj
    if (r->m.activation != ACT_SWIGLU && ptr_or_null(&a->fc_mask)) {  // lean: gelu' from act and its branch bits
        be->matmul_backward(be, st, d_act, GRAD(bp->fcproj_w), GRAD(bp->fcproj_b), d_res, arena_ptr(&a->act),
                            PARAM(bp->fcproj_w), NULL, N, r->F, r->C);
        be->gelu_backward_from_output(be, st, d_act, arena_ptr(&a->act), arena_ptr(&a->fc_mask), d_act,
                                      (size_t)N * r->F);
        be->matmul_backward(be, st, d_mlp_in, GRAD(bp->fc_w), GRAD(bp->fc_b), d_act, mlp_in, PARAM(bp->fc_w), NULL, N,
                            r->C, r->F);
    } else if (r->m.activation == ACT_SWIGLU) {
        void *d_fc = arena_ptr(&r->d_fc);
        const void *act = arena_ptr(&a->act);
        if (lean) {  // act = silu(gate) up again from fc, into d_fc (free until the SwiGLU's backward)
            be->swiglu_forward(be, st, d_fc, arena_ptr(&a->fc), N, r->F);
            act = d_fc;
        }
        be->matmul_backward(be, st, d_act, GRAD(bp->fcproj_w), GRAD(bp->fcproj_b), d_res, act,
                            PARAM(bp->fcproj_w), NULL, N, r->F, r->C);
        be->swiglu_backward(be, st, d_fc, d_act, arena_ptr(&a->fc), N, r->F);
        be->matmul_backward(be, st, d_mlp_in, GRAD(bp->fc_w), GRAD(bp->fc_b), d_fc, mlp_in, PARAM(bp->fc_w), NULL, N,
                            r->C, r->FC);
    } else {  // d_act = (d_res Wfcproj) * gelu'(fc) = dL/dfc: the GELU's backward fused into the product
        be->matmul_backward(be, st, NULL, GRAD(bp->fcproj_w), GRAD(bp->fcproj_b), d_res, arena_ptr(&a->act),
                            PARAM(bp->fcproj_w), NULL, N, r->F, r->C);
        be->matmul_dinp_gelu(be, st, d_act, d_res, PARAM(bp->fcproj_w), arena_ptr(&a->fc), N, r->F, r->C);
        be->matmul_backward(be, st, d_mlp_in, GRAD(bp->fc_w), GRAD(bp->fc_b), d_act, mlp_in, PARAM(bp->fc_w), NULL, N,
                            r->C, r->F);
    }
    if (!par) {
        tp_sum(r, d_ln, nc);  // column-parallel fc: dL/dln2 summed over tp
        // d_res += norm backward: now dL/dmid (lean: from ln2, mid not kept)
        if (lean)
            be->norm_backward_from_output(be, st, nk, d_res, GRAD(bp->ln2_w), GRAD(bp->ln2_b), d_ln,
                                          arena_ptr(&a->ln2), PARAM(bp->ln2_w), PARAM(bp->ln2_b),
                                          arena_ptr(&a->ln2_rstd), N, r->C);
        else
            be->norm_backward(be, st, nk, d_res, GRAD(bp->ln2_w), GRAD(bp->ln2_b), d_ln, arena_ptr(&a->mid),
                              PARAM(bp->ln2_w), ptr_or_null(&a->ln2_mean), arena_ptr(&a->ln2_rstd), N, r->C);
    }
    void *d_att = arena_ptr(&r->d_att), *d_qkv = arena_ptr(&r->d_qkv);
    be->matmul_backward(be, st, d_att, GRAD(bp->proj_w), GRAD(bp->proj_b), d_res, arena_ptr(&a->att),
                        PARAM(bp->proj_w), NULL, N, r->NH * r->HS, r->C);
    be->attention_backward(be, st, d_qkv, d_att, arena_ptr(&a->qkv), arena_ptr(&a->att), arena_ptr(&a->lse), r->B,
                           r->T, r->NH, r->NKV, r->HS);
    if (r->m.position == POS_ROTARY)
        be->rotary_backward(be, st, d_qkv, r->B, r->T, r->NH, r->NKV, r->HS, (float)r->m.rope_theta);
    be->matmul_backward(be, st, d_ln, GRAD(bp->qkv_w), GRAD(bp->qkv_b), d_qkv, arena_ptr(&a->ln1), PARAM(bp->qkv_w),
                        NULL, N, r->C, r->QKV);
    if (par) be->residual_forward(be, st, d_ln, d_ln, d_mlp_in, nc);
    tp_sum(r, d_ln, nc);  // column-parallel qkv (and fc): dL/dln1 summed over tp
    // d_res += norm backward: now dL/dx_l (lean: from ln1)
    if (lean)
        be->norm_backward_from_output(be, st, nk, d_res, GRAD(bp->ln1_w), GRAD(bp->ln1_b), d_ln, arena_ptr(&a->ln1),
                                      PARAM(bp->ln1_w), PARAM(bp->ln1_b), arena_ptr(&a->ln1_rstd), N, r->C);
    else
        be->norm_backward(be, st, nk, d_res, GRAD(bp->ln1_w), GRAD(bp->ln1_b), d_ln, xin, PARAM(bp->ln1_w),
                          ptr_or_null(&a->ln1_mean), arena_ptr(&a->ln1_rstd), N, r->C);
}

int32_t *mr_inputs(ModelRuntime *r, int slot) { return (int32_t *)arena_ptr(&r->t_inputs) + (size_t)slot * r->B * r->T; }
int32_t *mr_targets(ModelRuntime *r) { return arena_ptr(&r->t_targets); }

// the activations of block l in slot k
#define ACTS(k, l) ((k) * r->L + (l))

// evaluation (no backward follows): the blocks of slot `slot` drop what they kept for it
static void drop_blocks(ModelRuntime *r, int slot) {
    for (int l = r->L - 1; l >= 0; l--) {
        int i = ACTS(slot, l);
        if (!mr_is_ckpt_block(r, l)) {
            release_rest(&r->acts[i]);
            release_masked(&r->hacts[i], r->act_mask);
        }
        arena_release(&r->acts[i].x);
    }
}

void mr_forward(ModelRuntime *r, int slot, float dloss, const void *in, void *out) {
    Backend *be = r->be;
    BackendStream *st = r->stream;
    NormOp nk = r->m.norm == NORM_LAYERNORM ? NORM_OP_LAYERNORM : NORM_OP_RMSNORM;
    int N = r->B * r->T;
    size_t xbytes = (size_t)N * r->C * r->x;
    // unit u: 0 embedding (or the tied head's copy of wte), 1 + l block l, L + 1 final norm and head
    if (r->units[0].count) zero_fwd_begin(r, 0);
    void *x0 = take(&r->acts[ACTS(slot, 0)].x);
    if (r->has_pre) part_begin(r, TRACE_PRE_FORWARD, -1);
    if (!r->has_pre) {  // the previous stage's output (its receive buffer is posted again next); sp: its own rows
        be->copy_d2d(be, x0, mr_sp_own(r, (void *)in), r->act_bytes[MR_ACT_x], st);
    } else if (r->sp) {
        mr_sp_embedding_forward(r, slot, x0);
    } else if (r->tp == 1) {
        be->embedding_forward(be, st, x0, mr_inputs(r, slot), PARAM(r->wte), PARAM(r->wpe), r->B, r->T, r->C);
    } else {  // vocabulary-parallel: each rank adds the rows it holds (wpe once, on tp rank 0), summed over tp
        be->embedding_forward_range(be, st, x0, mr_inputs(r, slot), PARAM(r->wte),
                                    r->tp_rank == 0 ? PARAM(r->wpe) : NULL, r->v0, r->Vt, r->B, r->T, r->C);
        tp_sum(r, x0, (size_t)N * r->C);
    }
    if (r->has_pre) part_end(r);
    for (int l = 0; l < r->L; l++) {
        int i = ACTS(slot, l);
        int swapped = !mr_is_ckpt_block(r, l) && r->act_mask;  // part of its tensors wait on the host
        int sel = mr_is_sel_block(r, l);                       // att, lse in the selective workspace
        BlockActs *a = mr_is_ckpt_block(r, l) ? &r->work : &r->acts[i], view;
        size_t live_before = r->dev.live;
        take_rest(a);
        if (swapped || sel) {
            if (swapped) take_masked(&r->aws, r->act_mask);
            if (sel) take_masked(&r->sws, MR_SELECTIVE_MASK);
            view = act_view(r, i);
            a = &view;
        }
        ArenaTensor *next = l + 1 < r->L ? &r->acts[i + 1].x : &r->x_out;
        void *xnext = take(next);
        if (r->sp && next == &r->x_out) xnext = mr_sp_own(r, xnext);  // its rows of the (N,C) stage output
        take(&r->scratch);
        take(&r->ln_full);
        const void *xin = arena_ptr(&r->acts[i].x);
        // lean, sequential: mid goes straight into x_{l+1}, where the MLP's output is added
        r->lean_mid = mr_is_lean_block(r, l) && !r->m.parallel_block ? xnext : NULL;
        r->lean_act = mr_is_lean_block(r, l) && r->m.activation == ACT_SWIGLU ? take(&r->d_act) : NULL;
        zero_fwd_begin(r, 1 + l);
        part_begin(r, TRACE_BLOCK_FORWARD, l);
        if (r->sp) {
            mr_sp_block_forward_to_act(r, l, a, xin);
            mr_sp_block_forward_output(r, l, a, xin, xnext);
        } else {
            block_forward_to_act(r, l, a, xin);
            block_forward_output(r, l, a, xin, xnext);
        }
        part_end(r);
        if (r->lean_act) arena_release(&r->d_act);
        r->lean_mid = r->lean_act = NULL;
        arena_release(&r->ln_full);
        arena_release(&r->scratch);
        if (mr_is_ckpt_block(r, l)) release_rest(a);  // only x_l stays
        if (sel) release_masked(&r->sws, MR_SELECTIVE_MASK);  // recomputed in backward
        if (swapped) acts_swap_out(r, i);
        // measured saved activations of one block: what block 0 kept (+ x_1, the size of its own input)
        if (l == 0 && r->L > 1 && !r->block_saved_measured) r->block_saved_measured = r->dev.live - live_before;
    }
    if (r->sp) mr_sp_gather(r, mr_sp_own(r, arena_ptr(&r->x_out)), arena_ptr(&r->x_out));  // the whole output
    if (!r->has_post) {  // the output goes to the next stage, from a send buffer (x_out serves the next forward)
        be->copy_d2d(be, out, arena_ptr(&r->x_out), xbytes, st);
        be->stream_synchronize(be, st);
        arena_release(&r->x_out);
        if (dloss == 0.0f) drop_blocks(r, slot);  // evaluation: no backward follows
        return;
    }
    void *lnf = take(&r->lnf), *lnf_mean = take(&r->lnf_mean), *lnf_rstd = take(&r->lnf_rstd);
    void *logits = take(&r->logits);
    zero_fwd_begin(r, r->L + 1);
    part_begin(r, TRACE_POST_FORWARD, -1);
    be->norm_forward(be, st, nk, NULL, lnf, lnf_mean, lnf_rstd, arena_ptr(&r->x_out), NULL, PARAM(r->lnf_w),
                     PARAM(r->lnf_b), N, r->C, (float)r->m.norm_eps);
    be->matmul_forward_ld(be, st, logits, lnf, PARAM(r->lm_head), N, r->C, r->Vt, r->Vs);  // (N, Vt), stride Vs
    // losses (N); with dloss != 0 logits become dL/dlogits = dloss * (softmax - onehot).
    // Only the real vocabulary's columns enter (V, or this rank's Vr): the
    // padded columns hold 0 (zero weight rows) and so does their gradient.
    if (r->tp == 1) {
        be->crossentropy_forward_backward(be, st, arena_ptr(&r->t_losses), logits, mr_targets(r), N, r->V, r->Vs,
                                          dloss);
    } else {  // vocabulary-parallel: global row max, then global sum of exp and the target's logit
        float *rowmax = arena_ptr(&r->t_ce_stats), *stats = rowmax + N;
        be->crossentropy_vocab_max(be, st, rowmax, logits, N, r->Vr, r->Vs);
        be->stream_synchronize(be, st);
        commCheck(r->comm, r->comm->all_reduce(r->comm, rowmax, rowmax, (size_t)N, MIST_F32, COMM_MAX, r->tpg));
        be->crossentropy_vocab_stats(be, st, stats, logits, rowmax, mr_targets(r), r->v0, N, r->Vr, r->Vs);
        be->stream_synchronize(be, st);
        commCheck(r->comm, r->comm->all_reduce(r->comm, stats, stats, 2 * (size_t)N, MIST_F32, COMM_SUM, r->tpg));
        be->crossentropy_vocab_finish(be, st, arena_ptr(&r->t_losses), logits, rowmax, stats, mr_targets(r), r->v0,
                                      N, r->Vr, r->Vs, dloss);
    }
    part_end(r);
    if (dloss == 0.0f) {  // evaluation: drop every activation
        arena_release(&r->logits);
        arena_release(&r->lnf);
        arena_release(&r->lnf_mean);
        arena_release(&r->lnf_rstd);
        arena_release(&r->x_out);
        drop_blocks(r, slot);
    }
}

void mr_backward(ModelRuntime *r, int slot, const void *dout, void *din) {
    Backend *be = r->be;
    BackendStream *st = r->stream;
    NormOp nk = r->m.norm == NORM_LAYERNORM ? NORM_OP_LAYERNORM : NORM_OP_RMSNORM;
    int N = r->B * r->T;
    size_t xbytes = (size_t)N * r->C * r->x;
    take_grads(r);
    take(&r->ln_full);
    void *d_res = arena_ptr(&r->d_res), *d_ln = arena_ptr(&r->d_ln);
    if (r->has_post) {
        void *lnf = arena_ptr(&r->lnf), *logits = arena_ptr(&r->logits);
        zero_bwd_begin(r, r->L + 1);
        part_begin(r, TRACE_POST_BACKWARD, -1);
        be->matmul_backward_ld(be, st, d_ln, GRAD(r->lm_head), logits, lnf, PARAM(r->lm_head), N, r->C, r->Vt, r->Vs);
        tp_sum(r, d_ln, (size_t)N * r->C);  // vocabulary-parallel head: dL/dlnf summed over tp
        arena_release(&r->logits);
        be->memset_device(be, d_res, 0, xbytes, st);
        be->norm_backward(be, st, nk, d_res, GRAD(r->lnf_w), GRAD(r->lnf_b), d_ln, arena_ptr(&r->x_out),
                          PARAM(r->lnf_w), ptr_or_null(&r->lnf_mean), arena_ptr(&r->lnf_rstd), N, r->C);
        part_end(r);
        zero_bwd_end(r, r->L + 1);
        arena_release(&r->lnf);
        arena_release(&r->lnf_mean);
        arena_release(&r->lnf_rstd);
        arena_release(&r->x_out);
    } else {
        be->copy_d2d(be, d_res, dout, xbytes, st);  // dL/d(output) from the next stage
    }
    for (int l = r->L - 1; l >= 0; l--) {
        int i = ACTS(slot, l);
        BlockActs *a = &r->acts[i], view = r->acts[i];
        const void *xin = arena_ptr(&r->acts[i].x);
        int swapped = !mr_is_ckpt_block(r, l) && r->act_mask, sel = mr_is_sel_block(r, l);
        zero_bwd_begin(r, 1 + l);
        if (mr_is_ckpt_block(r, l)) {  // recompute the block's tensors from its kept input
            a = &r->work;
            take_rest(a);
            take(&r->scratch);
            part_begin(r, TRACE_BLOCK_RECOMPUTE, l);
            if (r->sp) mr_sp_block_forward_to_act(r, l, a, xin);
            else block_forward_to_act(r, l, a, xin);
            part_end(r);
            arena_release(&r->scratch);
            view = *a;
        } else if (swapped || sel) {  // the offloaded tensors come back into the workspace
            if (swapped) acts_swap_in(r, i);
            view = act_view(r, i);
        }
        if (sel) {  // its own part, so that "block N backward" is the block's backward alone in both traces
            part_begin(r, TRACE_BLOCK_RECOMPUTE_ATT, l);
            attention_recompute(r, &view);
            part_end(r);
        }
        part_begin(r, TRACE_BLOCK_BACKWARD, l);
        if (r->sp) mr_sp_block_backward(r, l, &view, xin);
        else block_backward(r, l, &view, xin);
        part_end(r);
        zero_bwd_end(r, 1 + l);
        release_rest(a);
        if (swapped) release_masked(&r->aws, r->act_mask);
        if (sel) release_masked(&r->sws, MR_SELECTIVE_MASK);
        arena_release(&r->acts[i].x);
    }
    arena_release(&r->ln_full);
    if (r->sp) mr_sp_gather(r, mr_sp_own(r, d_res), d_res);  // dL/dx_0, all rows (embedding, boundary)
    if (r->units[0].count) {
        // the embedding's gradient, or (tied copy) the head's gradient of wte already in its buffer
        zero_bwd_begin(r, 0);
        if (r->has_pre) part_begin(r, TRACE_PRE_BACKWARD, -1);
        if (r->has_pre && r->tp == 1)
            be->embedding_backward(be, st, GRAD(r->wte), GRAD(r->wpe), d_res, mr_inputs(r, slot), r->B, r->T, r->C);
        else if (r->has_pre)  // d_res is replicated: every rank adds to its own rows and to the (replicated) wpe
            be->embedding_backward_range(be, st, GRAD(r->wte), GRAD(r->wpe), d_res, mr_inputs(r, slot), r->v0, r->Vt,
                                         r->B, r->T, r->C);
        if (r->has_pre) part_end(r);
        zero_bwd_end(r, 0);
    }
    if (!r->has_pre) {  // dL/d(input) to the previous stage, from a send buffer (d_res serves the next backward)
        be->copy_d2d(be, din, d_res, xbytes, st);
        be->stream_synchronize(be, st);
    }
    zero_bwd_finish(r);
    release_grads(r);
}

void mr_forward_backward(ModelRuntime *r, float dloss) {
    mr_forward(r, 0, dloss, NULL, NULL);
    if (dloss != 0.0f) mr_backward(r, 0, NULL, NULL);
}
