// Sequence parallelism of a block's forward and backward (runtime/model_sp.h),
// with backend ops and the comm interface only, so every backend and comm
// path (MPI, NCCL, staged through host memory) runs the same code.
//
// Per sequential block, forward (rows: Ns = N/tp own, N all):
//   ln1 = norm(x)                 Ns rows (saved: x, ln1, its statistics)
//   ln_full = all_gather(ln1)     N rows
//   qkv, attention                N rows, the rank's heads (as without sp)
//   p = att Wproj_t^T             N rows, a partial sum over the rank's heads
//   mid = x + reduce_scatter(p)   Ns rows; ln2 = norm(mid), Ns rows (saved)
//   ln_full = all_gather(ln2); fc, act on N rows; q = act Wfcproj_t^T (partial)
//   x_out = mid + reduce_scatter(q)   Ns rows
// Backward mirrors it: the output gradient's rows are all-gathered before
// each row-parallel matmul's backward, the column-parallel matmul's input
// gradient (a partial sum over the rank's output features) is
// reduce-scattered into the norm's backward, and the norm output is
// all-gathered again for the weight gradient (not kept at N rows: that would
// cost (tp-1)/tp of an (N,C) tensor per norm and block, Megatron's choice).
// The norm parameters see only their rank's rows, so their gradients are
// partial sums: collected in d_norm and summed over tp once per block, then
// added to the gradient buffers (bit-identical on every tp rank).
#include "runtime/model_sp.h"
#include <stdio.h>
#include <string.h>
#include "runtime/comm.h"

#define PARAM(off) zero_w(r, (off))
#define GRAD(off) zero_g(r, (off))

static void *ptr_or_null(const ArenaTensor *t) { return t->bytes ? arena_ptr(t) : NULL; }

// a comm backend that is not stream-ordered reads the finished tensor from memory
static void comm_ready(ModelRuntime *r) {
    if (!r->comm_stream_ordered) r->be->stream_synchronize(r->be, r->stream);
}

void mr_sp_gather(ModelRuntime *r, const void *own, void *full) {
    comm_ready(r);
    size_t count = (size_t)mr_sp_rows(r) * r->C;
    commCheck(r->comm, r->comm->all_gather(r->comm, own, full, count, r->be->dtype, r->tpg));
}

void mr_sp_scatter(ModelRuntime *r, const void *full, void *own) {
    comm_ready(r);
    size_t count = (size_t)mr_sp_rows(r) * r->C;
    commCheck(r->comm, r->comm->reduce_scatter(r->comm, full, own, count, r->be->dtype, COMM_SUM, r->tpg));
}

static NormOp norm_kind(const ModelRuntime *r) {
    return r->m.norm == NORM_LAYERNORM ? NORM_OP_LAYERNORM : NORM_OP_RMSNORM;
}

// the bias of a row-parallel layer is added once, by tp rank 0, before the reduce-scatter
static const void *row_parallel_bias(ModelRuntime *r, int64_t off) { return r->tp_rank == 0 ? PARAM(off) : NULL; }

void mr_sp_block_forward_to_act(ModelRuntime *r, int l, BlockActs *a, const void *xin) {
    Backend *be = r->be;
    BackendStream *st = r->stream;
    const BlockParams *bp = &r->blk[l];
    NormOp nk = norm_kind(r);
    int N = r->B * r->T, Ns = mr_sp_rows(r);
    float eps = (float)r->m.norm_eps;
    void *scratch = arena_ptr(&r->scratch), *full = arena_ptr(&r->ln_full);
    be->norm_forward(be, st, nk, NULL, arena_ptr(&a->ln1), ptr_or_null(&a->ln1_mean), arena_ptr(&a->ln1_rstd),
                     xin, NULL, PARAM(bp->ln1_w), PARAM(bp->ln1_b), Ns, r->C, eps);
    mr_sp_gather(r, arena_ptr(&a->ln1), full);
    be->matmul_forward(be, st, arena_ptr(&a->qkv), NULL, full, PARAM(bp->qkv_w), PARAM(bp->qkv_b), N, r->C, r->QKV);
    if (r->m.position == POS_ROTARY)
        be->rotary_forward(be, st, arena_ptr(&a->qkv), r->B, r->T, r->NH, r->NKV, r->HS, (float)r->m.rope_theta);
    be->attention_forward(be, st, arena_ptr(&a->att), arena_ptr(&a->lse), arena_ptr(&a->qkv), r->B, r->T, r->NH,
                          r->NKV, r->HS);
    if (!r->m.parallel_block) {
        be->matmul_forward(be, st, scratch, NULL, arena_ptr(&a->att), PARAM(bp->proj_w),
                           row_parallel_bias(r, bp->proj_b), N, r->NH * r->HS, r->C);
        void *own = mr_sp_own(r, scratch);
        mr_sp_scatter(r, scratch, own);
        // mid = x + attention projection, ln2 = norm(mid), fused, on the rank's rows (lean: mid in x_{l+1})
        void *mid = r->lean_mid ? r->lean_mid : arena_ptr(&a->mid);
        be->norm_forward(be, st, nk, mid, arena_ptr(&a->ln2), ptr_or_null(&a->ln2_mean), arena_ptr(&a->ln2_rstd), own,
                         xin, PARAM(bp->ln2_w), PARAM(bp->ln2_b), Ns, r->C, eps);
        mr_sp_gather(r, arena_ptr(&a->ln2), full);
    }
    if (r->m.activation != ACT_SWIGLU && ptr_or_null(&a->fc_mask)) {  // lean: act = gelu(fc) in place
        be->matmul_forward(be, st, arena_ptr(&a->act), NULL, full, PARAM(bp->fc_w), PARAM(bp->fc_b), N, r->C, r->F);
        be->gelu_forward_mask(be, st, arena_ptr(&a->act), arena_ptr(&a->fc_mask), arena_ptr(&a->act), (size_t)N * r->F);
    } else if (r->m.activation == ACT_SWIGLU) {  // lean: act into the d_act buffer, not kept
        be->matmul_forward(be, st, arena_ptr(&a->fc), NULL, full, PARAM(bp->fc_w), PARAM(bp->fc_b), N, r->C, r->FC);
        be->swiglu_forward(be, st, r->lean_act ? r->lean_act : arena_ptr(&a->act), arena_ptr(&a->fc), N, r->F);
    } else {
        be->matmul_forward(be, st, arena_ptr(&a->act), arena_ptr(&a->fc), full, PARAM(bp->fc_w), PARAM(bp->fc_b), N,
                           r->C, r->F);
    }
}

void mr_sp_block_forward_output(ModelRuntime *r, int l, BlockActs *a, const void *xin, void *xout) {
    Backend *be = r->be;
    BackendStream *st = r->stream;
    const BlockParams *bp = &r->blk[l];
    int N = r->B * r->T;
    size_t nsc = (size_t)mr_sp_rows(r) * r->C;
    void *scratch = arena_ptr(&r->scratch), *own = mr_sp_own(r, scratch);
    be->matmul_forward(be, st, scratch, NULL, r->lean_act ? r->lean_act : arena_ptr(&a->act), PARAM(bp->fcproj_w),
                       row_parallel_bias(r, bp->fcproj_b), N, r->F, r->C);
    if (!r->m.parallel_block) {
        mr_sp_scatter(r, scratch, own);
        be->residual_forward(be, st, xout, r->lean_mid ? xout : arena_ptr(&a->mid), own, nsc);
        return;
    }
    // parallel: both partial sums added (ln_full is free: qkv and fc have read it), one reduce-scatter
    void *full = arena_ptr(&r->ln_full);
    be->matmul_forward(be, st, full, NULL, arena_ptr(&a->att), PARAM(bp->proj_w), row_parallel_bias(r, bp->proj_b),
                       N, r->NH * r->HS, r->C);
    be->residual_forward(be, st, scratch, full, scratch, (size_t)N * r->C);
    mr_sp_scatter(r, scratch, own);
    be->residual_forward(be, st, xout, own, xin, nsc);
}

// ---- backward

// d_norm's slots: ln1_w, [ln1_b], ln2_w, [ln2_b] (the block's norm parameters in order)
typedef struct {
    int64_t off[4];  // parameter offsets
    void *slot[4];   // their partial gradients in d_norm (NULL: absent)
    int n;
} NormGrads;

static NormGrads norm_grads(ModelRuntime *r, const BlockParams *bp) {
    NormGrads g = {{0}, {0}, 0};
    const int64_t offs[4] = {bp->ln1_w, bp->ln1_b, bp->ln2_w, bp->ln2_b};
    char *base = arena_ptr(&r->d_norm);
    for (int k = 0; k < 4; k++) {
        if (offs[k] < 0) continue;
        g.off[k] = offs[k];
        g.slot[k] = base + (size_t)g.n++ * r->C * r->x;
    }
    return g;
}

// the block's norm-parameter gradients, summed over tp, into the gradient buffers
static void norm_grads_finish(ModelRuntime *r, const NormGrads *g) {
    comm_ready(r);
    commCheck(r->comm, r->comm->all_reduce(r->comm, arena_ptr(&r->d_norm), arena_ptr(&r->d_norm),
                                           (size_t)g->n * r->C, r->be->dtype, COMM_SUM, r->tpg));
    for (int k = 0; k < 4; k++)
        if (g->slot[k]) r->be->residual_forward(r->be, r->stream, GRAD(g->off[k]), GRAD(g->off[k]), g->slot[k], r->C);
}

// the MLP's backward from the full output gradient dout (N,C) to its input
// gradient d_in (N,C, partial over tp); mlp_in: the gathered norm output
static void mlp_backward(ModelRuntime *r, const BlockParams *bp, BlockActs *a, void *dout, const void *mlp_in,
                         void *d_in) {
    Backend *be = r->be;
    BackendStream *st = r->stream;
    int N = r->B * r->T;
    void *d_act = arena_ptr(&r->d_act);
    if (r->m.activation != ACT_SWIGLU && ptr_or_null(&a->fc_mask)) {  // lean: gelu' from act and its branch bits
        be->matmul_backward(be, st, d_act, GRAD(bp->fcproj_w), GRAD(bp->fcproj_b), dout, arena_ptr(&a->act),
                            PARAM(bp->fcproj_w), NULL, N, r->F, r->C);
        be->gelu_backward_from_output(be, st, d_act, arena_ptr(&a->act), arena_ptr(&a->fc_mask), d_act,
                                      (size_t)N * r->F);
        be->matmul_backward(be, st, d_in, GRAD(bp->fc_w), GRAD(bp->fc_b), d_act, mlp_in, PARAM(bp->fc_w), NULL, N,
                            r->C, r->F);
    } else if (r->m.activation == ACT_SWIGLU) {
        void *d_fc = arena_ptr(&r->d_fc);
        const void *act = arena_ptr(&a->act);
        if (!a->act.bytes) {  // a lean block keeps no act: silu(gate) up again from fc, into d_fc
            be->swiglu_forward(be, st, d_fc, arena_ptr(&a->fc), N, r->F);
            act = d_fc;
        }
        be->matmul_backward(be, st, d_act, GRAD(bp->fcproj_w), GRAD(bp->fcproj_b), dout, act,
                            PARAM(bp->fcproj_w), NULL, N, r->F, r->C);
        be->swiglu_backward(be, st, d_fc, d_act, arena_ptr(&a->fc), N, r->F);
        be->matmul_backward(be, st, d_in, GRAD(bp->fc_w), GRAD(bp->fc_b), d_fc, mlp_in, PARAM(bp->fc_w), NULL, N,
                            r->C, r->FC);
    } else {
        be->matmul_backward(be, st, NULL, GRAD(bp->fcproj_w), GRAD(bp->fcproj_b), dout, arena_ptr(&a->act),
                            PARAM(bp->fcproj_w), NULL, N, r->F, r->C);
        be->matmul_dinp_gelu(be, st, d_act, dout, PARAM(bp->fcproj_w), arena_ptr(&a->fc), N, r->F, r->C);
        be->matmul_backward(be, st, d_in, GRAD(bp->fc_w), GRAD(bp->fc_b), d_act, mlp_in, PARAM(bp->fc_w), NULL, N,
                            r->C, r->F);
    }
}

// attention projection, attention and rotary backward from the full dout (N,C) into d_qkv
static void attention_backward(ModelRuntime *r, const BlockParams *bp, BlockActs *a, void *dout) {
    Backend *be = r->be;
    BackendStream *st = r->stream;
    int N = r->B * r->T;
    void *d_att = arena_ptr(&r->d_att), *d_qkv = arena_ptr(&r->d_qkv);
    be->matmul_backward(be, st, d_att, GRAD(bp->proj_w), GRAD(bp->proj_b), dout, arena_ptr(&a->att),
                        PARAM(bp->proj_w), NULL, N, r->NH * r->HS, r->C);
    be->attention_backward(be, st, d_qkv, d_att, arena_ptr(&a->qkv), arena_ptr(&a->att), arena_ptr(&a->lse), r->B,
                           r->T, r->NH, r->NKV, r->HS);
    if (r->m.position == POS_ROTARY)
        be->rotary_backward(be, st, d_qkv, r->B, r->T, r->NH, r->NKV, r->HS, (float)r->m.rope_theta);
}

// Sequential: MLP (d_res gathered), ln2 on the own rows, attention (d_res =
// dL/dmid gathered again), ln1. Parallel: both branches read the one gathered
// dL/dx_{l+1}; their ln1 input gradients are added and reduce-scattered once.
void mr_sp_block_backward(ModelRuntime *r, int l, BlockActs *a, const void *xin) {
    Backend *be = r->be;
    BackendStream *st = r->stream;
    const BlockParams *bp = &r->blk[l];
    NormOp nk = norm_kind(r);
    int N = r->B * r->T, Ns = mr_sp_rows(r), lean = mr_is_lean_block(r, l);
    void *d_res = arena_ptr(&r->d_res), *d_ln = arena_ptr(&r->d_ln), *full = arena_ptr(&r->ln_full);
    void *d_own = mr_sp_own(r, d_res), *d_ln_own = mr_sp_own(r, d_ln);
    NormGrads g = norm_grads(r, bp);
    be->memset_device(be, arena_ptr(&r->d_norm), 0, r->d_norm.bytes, st);
    mr_sp_gather(r, d_own, d_res);  // dL/dx_{l+1}, all rows
    if (!r->m.parallel_block) {
        mr_sp_gather(r, arena_ptr(&a->ln2), full);
        mlp_backward(r, bp, a, d_res, full, d_ln);
        mr_sp_scatter(r, d_ln, d_ln_own);  // column-parallel fc: dL/dln2 summed over tp, own rows
        if (lean)  // from ln2 (mid not kept)
            be->norm_backward_from_output(be, st, nk, d_own, g.slot[2], g.slot[3], d_ln_own, arena_ptr(&a->ln2),
                                          PARAM(bp->ln2_w), PARAM(bp->ln2_b), arena_ptr(&a->ln2_rstd), Ns, r->C);
        else
            be->norm_backward(be, st, nk, d_own, g.slot[2], g.slot[3], d_ln_own, arena_ptr(&a->mid),
                              PARAM(bp->ln2_w), ptr_or_null(&a->ln2_mean), arena_ptr(&a->ln2_rstd), Ns, r->C);
        mr_sp_gather(r, d_own, d_res);  // dL/dmid, all rows
        attention_backward(r, bp, a, d_res);
        mr_sp_gather(r, arena_ptr(&a->ln1), full);
    } else {
        void *d_mlp = arena_ptr(&r->d_ln_mlp);
        attention_backward(r, bp, a, d_res);  // reads dout before the MLP's
        mr_sp_gather(r, arena_ptr(&a->ln1), full);
        mlp_backward(r, bp, a, d_res, full, d_mlp);
    }
    be->matmul_backward(be, st, d_ln, GRAD(bp->qkv_w), GRAD(bp->qkv_b), arena_ptr(&r->d_qkv), full, PARAM(bp->qkv_w),
                        NULL, N, r->C, r->QKV);
    if (r->m.parallel_block) be->residual_forward(be, st, d_ln, d_ln, arena_ptr(&r->d_ln_mlp), (size_t)N * r->C);
    mr_sp_scatter(r, d_ln, d_ln_own);  // dL/dln1 summed over tp, own rows
    if (lean)  // from ln1's own rows (the block input not read)
        be->norm_backward_from_output(be, st, nk, d_own, g.slot[0], g.slot[1], d_ln_own, arena_ptr(&a->ln1),
                                      PARAM(bp->ln1_w), PARAM(bp->ln1_b), arena_ptr(&a->ln1_rstd), Ns, r->C);
    else
        be->norm_backward(be, st, nk, d_own, g.slot[0], g.slot[1], d_ln_own, xin, PARAM(bp->ln1_w),
                          ptr_or_null(&a->ln1_mean), arena_ptr(&a->ln1_rstd), Ns, r->C);
    norm_grads_finish(r, &g);
}

void mr_sp_embedding_forward(ModelRuntime *r, int slot, void *x0) {
    Backend *be = r->be;
    void *scratch = arena_take(&r->scratch);
    // vocabulary-parallel partial sums of all rows (wpe once, on tp rank 0), reduce-scattered to the own rows
    be->embedding_forward_range(be, r->stream, scratch, mr_inputs(r, slot), PARAM(r->wte),
                                r->tp_rank == 0 ? PARAM(r->wpe) : NULL, r->v0, r->Vt, r->B, r->T, r->C);
    mr_sp_scatter(r, scratch, x0);
    arena_release(&r->scratch);
}

int mr_layout_sp(ModelRuntime *r, int sp, char *err, size_t errlen) {
    if (!sp) return 0;
    int N = r->B * r->T;
    if (r->tp < 2 || N % r->tp) {
        snprintf(err, errlen, "[stage.%d] sp = 1 with tp = %d, b*seq_len = %d*%d = %d; allowed: tp >= 2 dividing "
                 "b*seq_len (each tp rank holds N/tp rows). Hint: sp = 0, or raise tp / change b", r->pipe.stage,
                 r->tp, r->B, r->T, N);
        return 2;
    }
    r->sp = 1;
    return 0;
}
