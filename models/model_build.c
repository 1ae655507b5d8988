// Builds the symbolic op list of a model part (the shapes and lists are
// documented in models/model.h and models/ops.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "models/ops.h"

// Shapes of one part as expressions, per tp rank.
typedef struct {
    ExprCtx *x;
    const ModelConfig *m;
    ModelOpList *o;
    Expr N;       // b*s rows
    Expr C;       // hidden (replicated residual stream)
    Expr a_tp;    // query heads per rank: ceil(a/tp)
    Expr kv_tp;   // kv heads per rank: ceil(kv/tp) (replicated when tp > kv)
    Expr hd;      // head size
    Expr qkv_tp;  // (a_tp + 2 kv_tp) * hd
    Expr att_tp;  // a_tp * hd
    Expr f_tp;    // ceil(F/tp)
    Expr fc_tp;   // F_tp (GELU) or 2 F_tp (SwiGLU)
    Expr v_tp;    // ceil(V/tp)
    Expr comm;    // 1 when tp > 1, else 0 (all-reduce happens at all)
} Shapes;

static Expr num(Shapes *z, double v) { return ex_num(z->x, v); }
static Expr add(Shapes *z, Expr a, Expr b) { return ex_add(z->x, a, b); }
static Expr mul(Shapes *z, Expr a, Expr b) { return ex_mul(z->x, a, b); }
static Expr mul3(Shapes *z, Expr a, Expr b, Expr c) { return mul(z, mul(z, a, b), c); }
static Expr scale(Shapes *z, double k, Expr a) { return mul(z, num(z, k), a); }
static Expr per_tp(Shapes *z, double n) { return ex_ceil(z->x, ex_div(z->x, num(z, n), z->o->tp)); }
// storage-dtype bytes of `elems`
static Expr xb(Shapes *z, Expr elems) { return mul(z, z->o->eb, elems); }
// fp32 bytes of `elems`
static Expr fb(Shapes *z, Expr elems) { return scale(z, 4, elems); }

static ModelOp *new_op(Shapes *z, const char *name, ModelOpKind kind) {
    ModelOpList *o = z->o;
    if (o->n_ops >= MODEL_MAX_OPS) {
        fprintf(stderr, "models/model_build.c: more than MODEL_MAX_OPS=%d ops in one part (adding %s)\n",
                MODEL_MAX_OPS, name);
        abort();
    }
    ModelOp *op = &o->op[o->n_ops++];
    memset(op, 0, sizeof *op);
    snprintf(op->name, sizeof op->name, "%s", name);
    op->kind = kind;
    Expr zero = num(z, 0);
    op->params = op->flops_fwd = op->flops_bwd = op->hw_flops_fwd = op->hw_flops_bwd = zero;
    op->bytes_fwd = op->bytes_bwd = op->tp_comm_fwd = op->tp_comm_bwd = zero;
    op->gemm_m = op->gemm_n = op->gemm_k = zero;
    return op;
}

// Adds a parameter to op; its per-rank elements join op->params.
static void add_param(Shapes *z, ModelOp *op, const char *name, int64_t rows, int64_t cols, int tp_split, int decay) {
    ParamSpec *p = &op->param[op->n_params++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->rows = rows;
    p->cols = cols;
    p->tp_split = tp_split;
    p->decay = decay;
    Expr r = tp_split == 1 ? per_tp(z, (double)rows) : num(z, (double)rows);
    Expr c = tp_split == 2 ? per_tp(z, (double)cols) : num(z, (double)cols);
    op->params = add(z, op->params, mul(z, r, c));
}

static void add_tensor(Shapes *z, const char *name, Expr elems, int f32, int saved, int ckpt_saved, int scratch_fwd,
                       int scratch_bwd) {
    ModelOpList *o = z->o;
    if (o->n_tensors >= MODEL_MAX_ACTS) {
        fprintf(stderr, "models/model_build.c: more than MODEL_MAX_ACTS=%d tensors in one part (adding %s)\n",
                MODEL_MAX_ACTS, name);
        abort();
    }
    ModelTensor *t = &o->tensor[o->n_tensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->elems = elems;
    t->f32 = f32;
    t->saved = saved;
    t->ckpt_saved = ckpt_saved;
    t->scratch_fwd = scratch_fwd;
    t->scratch_bwd = scratch_bwd;
    t->elems_sp = elems;
}

// Sequence parallelism (models/model.h model_acts_sp): the last tensor added
// holds N/tp of its rows per rank (tp divides N = b*s: checked by the plan)
static void last_seq(Shapes *z) {
    ModelTensor *t = &z->o->tensor[z->o->n_tensors - 1];
    t->seq = 1;
    t->elems_sp = ex_div(z->x, t->elems, z->o->tp);
}
// a tensor only sequence parallelism has: 0 elements without it
static void add_sp_tensor(Shapes *z, const char *name, Expr elems_sp, int scratch_fwd, int scratch_bwd) {
    add_tensor(z, name, num(z, 0), 0, 0, 0, scratch_fwd, scratch_bwd);
    z->o->tensor[z->o->n_tensors - 1].elems_sp = elems_sp;
}

// all-reduce payload of one (N,C) storage tensor, 0 when tp = 1
static Expr allreduce_nc(Shapes *z) { return mul(z, z->comm, xb(z, mul(z, z->N, z->C))); }

// out (N,out) = inp (N,in) @ W^T [+ bias]. Forward 2*N*in*out FLOPs; backward
// dinp and dW, 2x. Bytes: forward reads inp, W, bias, writes out; backward
// reads dout, W, inp, dout again, writes dinp, read-modify-writes dW (and dbias).
static ModelOp *add_matmul(Shapes *z, const char *name, Expr in, Expr out, int has_bias) {
    ModelOp *op = new_op(z, name, MOP_MATMUL);
    Expr w = mul(z, in, out);
    Expr nin = mul(z, z->N, in), nout = mul(z, z->N, out);
    op->flops_fwd = op->hw_flops_fwd = scale(z, 2, mul(z, z->N, w));
    op->flops_bwd = op->hw_flops_bwd = scale(z, 4, mul(z, z->N, w));
    op->gemm_m = z->N, op->gemm_n = out, op->gemm_k = in;
    Expr fwd = add(z, add(z, nin, w), nout);
    Expr bwd = add(z, add(z, scale(z, 2, nout), w), add(z, scale(z, 2, nin), scale(z, 2, w)));
    if (has_bias) {
        fwd = add(z, fwd, out);
        bwd = add(z, bwd, add(z, nout, scale(z, 2, out)));
    }
    op->bytes_fwd = xb(z, fwd);
    op->bytes_bwd = xb(z, bwd);
    return op;
}

// tanh-GELU in fc's epilogue over its (N,out) output: forward writes the
// pre-activation too; backward (in fc_proj's dinp product) reads it and
// rewrites dout in place. About 10 FLOPs per element forward, 15 backward.
static void add_gelu(Shapes *z, Expr out) {
    ModelOp *op = new_op(z, "gelu", MOP_GELU);
    Expr nout = mul(z, z->N, out);
    op->bytes_fwd = xb(z, nout);
    op->bytes_bwd = xb(z, scale(z, 3, nout));
    op->hw_flops_fwd = scale(z, 10, nout);
    op->hw_flops_bwd = scale(z, 15, nout);
}

// LayerNorm / RMSNorm over (N,C): reads one (N,C) and writes one.
static ModelOp *add_norm(Shapes *z, const char *name, const char *w_name, const char *b_name) {
    const ModelConfig *m = z->m;
    int ln = m->norm == NORM_LAYERNORM;
    ModelOp *op = new_op(z, name, MOP_NORM);
    add_param(z, op, w_name, m->hidden, 1, 0, 0);
    if (ln) add_param(z, op, b_name, m->hidden, 1, 0, 0);
    Expr nc = mul(z, z->N, z->C);
    Expr stats = scale(z, ln ? 2 : 1, z->N);
    Expr wb = scale(z, ln ? 2 : 1, z->C);
    Expr fwd = add(z, scale(z, 2, nc), wb);
    // backward: read dout, inp, w, stats; read-modify-write dinp (+=) and dw, db
    Expr bwd = add(z, scale(z, 4, nc), scale(z, 3, wb));
    op->bytes_fwd = add(z, xb(z, fwd), fb(z, stats));
    op->bytes_bwd = add(z, xb(z, bwd), fb(z, stats));
    op->hw_flops_fwd = scale(z, ln ? 8 : 5, nc);
    op->hw_flops_bwd = scale(z, ln ? 12 : 8, nc);
    return op;
}

// mid = x + attention projection, which the runtime adds inside ln2's kernel:
// it reads one more (N,C) and writes one more (mid) than the plain norm
static void add_attn_residual(Shapes *z) {
    ModelOp *op = new_op(z, "attn_residual", MOP_RESIDUAL);
    Expr nc = mul(z, z->N, z->C);
    op->bytes_fwd = xb(z, scale(z, 2, nc));
    op->hw_flops_fwd = nc;
}

// x_out = x + branch output: read two (N,C), write one
static ModelOp *add_residual(Shapes *z, const char *name) {
    ModelOp *op = new_op(z, name, MOP_RESIDUAL);
    Expr nc = mul(z, z->N, z->C);
    op->bytes_fwd = xb(z, scale(z, 3, nc));
    op->hw_flops_fwd = nc;
    // backward: the residual-stream gradient passes through unchanged (the
    // branches read it as their dout and accumulate into it), no kernel
    return op;
}

static void build_pre(Shapes *z) {
    const ModelConfig *m = z->m;
    ModelOp *op = new_op(z, "embedding", MOP_EMBEDDING);
    add_param(z, op, "wte", model_vocab_padded(m), m->hidden, 1, 1);
    Expr nc = mul(z, z->N, z->C);
    // forward: gather the token rows, write (N,C); backward: read dout,
    // read-modify-write the gathered rows of dwte
    op->bytes_fwd = xb(z, scale(z, 2, nc));
    op->bytes_bwd = xb(z, scale(z, 3, nc));
    op->hw_flops_bwd = nc;
    // vocab-parallel: each rank holds V/tp rows and the (N,C) partial sums are all-reduced
    op->tp_comm_fwd = allreduce_nc(z);
    if (m->position == POS_LEARNED) {
        // the position rows, added in the same kernel: read them (forward);
        // read-modify-write dwpe's rows (backward)
        ModelOp *pos = new_op(z, "pos_embedding", MOP_EMBEDDING);
        add_param(z, pos, "wpe", m->seq_len, m->hidden, 0, 1);
        pos->bytes_fwd = xb(z, nc);
        pos->bytes_bwd = xb(z, scale(z, 2, nc));
        pos->hw_flops_fwd = nc;
        pos->hw_flops_bwd = nc;
    }
}

static void build_block(Shapes *z) {
    const ModelConfig *m = z->m;
    int bias = m->bias != 0, swiglu = m->activation == ACT_SWIGLU, parallel = m->parallel_block != 0;
    int ln = m->norm == NORM_LAYERNORM;
    int64_t h = m->hidden, a = m->heads, kv = m->kv_heads, hd = h / a, F = m->ffn_hidden;
    Expr N = z->N, C = z->C;

    add_norm(z, "ln1", "ln1_w", "ln1_b");

    ModelOp *qkv = add_matmul(z, "qkv", C, z->qkv_tp, bias);
    add_param(z, qkv, "qkv_w", (a + 2 * kv) * hd, h, 1, 1);
    if (bias) add_param(z, qkv, "qkv_b", (a + 2 * kv) * hd, 1, 1, 0);
    // per rank: whole heads, ceil(a/tp) query and ceil(kv/tp) kv heads (a kv head is
    // replicated when tp > kv); equals ceil(rows/tp)*cols whenever tp divides kv
    qkv->params = mul(z, z->qkv_tp, num(z, (double)(bias ? h + 1 : h)));
    qkv->tp_comm_bwd = allreduce_nc(z);  // d(ln1) partial sums (both branches' when parallel)

    if (m->position == POS_ROTARY) {
        ModelOp *rot = new_op(z, "rotary", MOP_ROTARY);
        Expr qk = mul3(z, N, add(z, z->a_tp, z->kv_tp), z->hd);
        rot->bytes_fwd = rot->bytes_bwd = xb(z, scale(z, 2, qk));  // in place: read + write q and k
        rot->hw_flops_fwd = rot->hw_flops_bwd = scale(z, 3, qk);
    }

    ModelOp *att = new_op(z, "attention", MOP_ATTENTION);
    {
        Expr s = z->o->s, b = z->o->b;
        Expr bah = mul3(z, b, z->a_tp, z->hd);
        att->flops_fwd = scale(z, 4, mul3(z, bah, s, s));
        att->flops_bwd = scale(z, 2, att->flops_fwd);
        att->hw_flops_fwd = scale(z, 2, mul3(z, bah, s, add(z, s, num(z, 1))));
        att->hw_flops_bwd = scale(z, 2.5, att->hw_flops_fwd);
        Expr lse = mul3(z, b, z->a_tp, s);
        Expr q = mul(z, N, z->qkv_tp), o = mul(z, N, z->att_tp);
        att->bytes_fwd = add(z, xb(z, add(z, q, o)), fb(z, lse));
        // backward reads dout, qkv, out, lse and writes dqkv
        att->bytes_bwd = add(z, xb(z, add(z, scale(z, 2, q), scale(z, 2, o))), fb(z, lse));
    }

    ModelOp *proj = add_matmul(z, "attn_proj", z->att_tp, C, 0);
    add_param(z, proj, "attn_proj_w", h, a * hd, 2, 1);
    if (bias) {
        // the row-parallel bias is added once, after the all-reduce: replicated
        add_param(z, proj, "attn_proj_b", h, 1, 0, 0);
        proj->bytes_fwd = add(z, proj->bytes_fwd, xb(z, C));
        proj->bytes_bwd = add(z, proj->bytes_bwd, xb(z, add(z, mul(z, N, C), scale(z, 2, C))));
    }
    if (!parallel) proj->tp_comm_fwd = allreduce_nc(z);

    if (!parallel) {
        add_attn_residual(z);
        add_norm(z, "ln2", "ln2_w", "ln2_b");
    }

    ModelOp *fc = add_matmul(z, "fc", C, z->fc_tp, bias);
    add_param(z, fc, "fc_w", swiglu ? 2 * F : F, h, 1, 1);
    if (bias) add_param(z, fc, "fc_b", swiglu ? 2 * F : F, 1, 1, 0);
    if (!parallel) fc->tp_comm_bwd = allreduce_nc(z);
    if (!swiglu) add_gelu(z, z->fc_tp);

    if (swiglu) {
        ModelOp *act = new_op(z, "swiglu", MOP_SWIGLU);
        Expr nf = mul(z, N, z->f_tp);
        act->bytes_fwd = xb(z, scale(z, 3, nf));
        act->bytes_bwd = xb(z, scale(z, 5, nf));
        act->hw_flops_fwd = scale(z, 6, nf);
        act->hw_flops_bwd = scale(z, 10, nf);
    }

    ModelOp *fcp = add_matmul(z, "fc_proj", z->f_tp, C, 0);
    add_param(z, fcp, "fc_proj_w", h, F, 2, 1);
    if (bias) {
        add_param(z, fcp, "fc_proj_b", h, 1, 0, 0);
        fcp->bytes_fwd = add(z, fcp->bytes_fwd, xb(z, C));
        fcp->bytes_bwd = add(z, fcp->bytes_bwd, xb(z, add(z, mul(z, N, C), scale(z, 2, C))));
    }
    fcp->tp_comm_fwd = allreduce_nc(z);  // parallel: one all-reduce of attn + mlp partial sums

    ModelOp *res = add_residual(z, "residual");
    if (parallel) {
        // the runtime adds the two projections' partial sums (before their one
        // all-reduce), then the block input: two passes of 3 NC; in backward the
        // branches' dL/dln1 are added before their all-reduce: one pass
        Expr nc = mul(z, N, C);
        res->bytes_fwd = xb(z, scale(z, 6, nc));
        res->hw_flops_fwd = scale(z, 2, nc);
        res->bytes_bwd = xb(z, scale(z, 3, nc));
        res->hw_flops_bwd = nc;
    }

    // activations (models/model.h lists them with their meaning)
    Expr nc = mul(z, N, C);
    add_tensor(z, "x", nc, 0, 1, 1, 0, 0), last_seq(z);
    add_tensor(z, "ln1", nc, 0, 1, 0, 0, 0), last_seq(z);
    if (ln) add_tensor(z, "ln1_mean", N, 1, 1, 0, 0, 0), last_seq(z);
    add_tensor(z, "ln1_rstd", N, 1, 1, 0, 0, 0), last_seq(z);
    add_tensor(z, "qkv", mul(z, N, z->qkv_tp), 0, 1, 0, 0, 0);
    add_tensor(z, "att", mul(z, N, z->att_tp), 0, 1, 0, 0, 0);
    add_tensor(z, "lse", mul3(z, z->o->b, z->a_tp, z->o->s), 1, 1, 0, 0, 0);
    // selective recompute: att and lse (the attention core's outputs) are the
    // ones a block not checkpointed recomputes from qkv by one attention forward
    z->o->tensor[z->o->n_tensors - 2].sel_recompute = z->o->tensor[z->o->n_tensors - 1].sel_recompute = 1;
    if (!parallel) {
        add_tensor(z, "mid", nc, 0, 1, 0, 0, 0), last_seq(z);
        add_tensor(z, "ln2", nc, 0, 1, 0, 0, 0), last_seq(z);
        if (ln) add_tensor(z, "ln2_mean", N, 1, 1, 0, 0, 0), last_seq(z);
        add_tensor(z, "ln2_rstd", N, 1, 1, 0, 0, 0), last_seq(z);
    }
    add_tensor(z, "fc", mul(z, N, z->fc_tp), 0, 1, 0, 0, 0);
    add_tensor(z, "act", mul(z, N, z->f_tp), 0, 1, 0, 0, 0);
    add_tensor(z, "scratch", nc, 0, 0, 0, 1, 1);
    add_tensor(z, "d_res", nc, 0, 0, 0, 0, 1);
    add_tensor(z, "d_ln", nc, 0, 0, 0, 0, 1);
    add_tensor(z, "d_att", mul(z, N, z->att_tp), 0, 0, 0, 0, 1);
    add_tensor(z, "d_qkv", mul(z, N, z->qkv_tp), 0, 0, 0, 0, 1);
    add_tensor(z, "d_act", mul(z, N, z->f_tp), 0, 0, 0, 0, 1);
    add_tensor(z, "d_fc", mul(z, N, z->fc_tp), 0, 0, 0, 0, 1);
    // parallel: the MLP branch's dL/dln1, added to the attention's before their one all-reduce
    if (parallel) add_tensor(z, "d_ln_mlp", nc, 0, 0, 0, 0, 1);
    // sequence parallelism: the all-gathered norm output (N,C) the column-parallel
    // matmuls read, in forward and again in backward (re-gathered, not kept),
    // and the norm parameters' partial gradients of the rank's rows, summed over tp
    add_sp_tensor(z, "ln_full", nc, 1, 1);
    add_sp_tensor(z, "d_norm", scale(z, (double)((ln ? 2 : 1) * (parallel ? 1 : 2)), C), 0, 1);
}

static void build_post(Shapes *z) {
    const ModelConfig *m = z->m;
    int ln = m->norm == NORM_LAYERNORM;
    Expr N = z->N, C = z->C;
    add_norm(z, "lnf", "lnf_w", "lnf_b");
    // the GEMM runs over the padded vocabulary (time, memory); model FLOPs
    // (MFU's numerator) count the real one: 2*N*C*V forward, 4*N*C*V backward
    ModelOp *head = add_matmul(z, "lm_head", C, z->v_tp, 0);
    Expr ncv = mul(z, mul(z, N, C), per_tp(z, m->vocab));
    head->flops_fwd = scale(z, 2, ncv);
    head->flops_bwd = scale(z, 4, ncv);
    // tied: the weight is wte (PRE), so it is not a parameter of this part
    if (!m->tied_embeddings) add_param(z, head, "lm_head_w", model_vocab_padded(m), m->hidden, 1, 1);
    head->tp_comm_bwd = allreduce_nc(z);

    ModelOp *ce = new_op(z, "crossentropy", MOP_CROSSENTROPY);
    Expr nv = mul(z, N, z->v_tp);
    // fused forward + gradient: read logits, write the gradient in place, write losses
    ce->bytes_fwd = add(z, xb(z, scale(z, 2, nv)), fb(z, N));
    ce->hw_flops_fwd = scale(z, 5, nv);
    // vocab-parallel softmax: all-reduce max, sum of exp and the target logit (f32(N) each)
    ce->tp_comm_fwd = mul(z, z->comm, fb(z, scale(z, 3, N)));

    Expr nc = mul(z, N, C);
    add_tensor(z, "x", nc, 0, 1, 1, 0, 0);
    add_tensor(z, "lnf", nc, 0, 1, 1, 0, 0);
    if (ln) add_tensor(z, "lnf_mean", N, 1, 1, 1, 0, 0);
    add_tensor(z, "lnf_rstd", N, 1, 1, 1, 0, 0);
    // logits rows are stored with a stride rounded up to 8 elements (16-byte
    // aligned rows for tensor-core GEMMs; kernels/backend.h matmul_forward_ld)
    Expr v_stride = scale(z, 8, ex_ceil(z->x, ex_div(z->x, z->v_tp, num(z, 8))));
    add_tensor(z, "logits", mul(z, N, v_stride), 0, 1, 1, 0, 0);
    add_tensor(z, "losses", N, 1, 1, 1, 0, 0);
}

int model_check(const ModelConfig *m, char *err, size_t errlen) {
    const char *why = NULL;
    if (m->hidden <= 0 || m->heads <= 0 || m->kv_heads <= 0 || m->ffn_hidden <= 0 || m->vocab <= 0 ||
        m->seq_len <= 0 || m->layers <= 0)
        why = "hidden, heads, kv_heads, ffn_hidden, vocab, seq_len and layers must be positive";
    else if (m->hidden % m->heads)
        why = "heads must divide hidden (head size = hidden / heads)";
    else if (m->heads % m->kv_heads)
        why = "kv_heads must divide heads (grouped-query attention)";
    if (why && err) {
        snprintf(err, errlen, "model: %s (hidden=%d heads=%d kv_heads=%d ffn_hidden=%d vocab=%d seq_len=%d layers=%d)",
                 why, m->hidden, m->heads, m->kv_heads, m->ffn_hidden, m->vocab, m->seq_len, m->layers);
    }
    return why ? -1 : 0;
}

int model_build(ExprCtx *cx, const ModelConfig *m, ModelPart part, ModelOpList *out) {
    char err[256];
    if (model_check(m, err, sizeof err) != 0) {
        fprintf(stderr, "models/model_build.c: %s\n", err);
        return -1;
    }
    memset(out, 0, sizeof *out);
    out->part = part;
    out->b = ex_sym(cx, "b");
    out->s = ex_sym(cx, "s");
    out->tp = ex_sym(cx, "tp");
    out->eb = ex_sym(cx, "eb");
    Shapes z = {.x = cx, .m = m, .o = out};
    z.N = ex_mul(cx, out->b, out->s);
    z.C = ex_num(cx, m->hidden);
    z.a_tp = per_tp(&z, m->heads);
    z.kv_tp = per_tp(&z, m->kv_heads);
    z.hd = ex_num(cx, m->hidden / m->heads);
    z.qkv_tp = mul(&z, add(&z, z.a_tp, scale(&z, 2, z.kv_tp)), z.hd);
    z.att_tp = mul(&z, z.a_tp, z.hd);
    z.f_tp = per_tp(&z, m->ffn_hidden);
    z.fc_tp = m->activation == ACT_SWIGLU ? scale(&z, 2, z.f_tp) : z.f_tp;
    z.v_tp = per_tp(&z, model_vocab_padded(m));  // the padded rows split over tp
    z.comm = ex_select(cx, ex_sub(cx, out->tp, ex_num(cx, 1)), ex_num(cx, 1), ex_num(cx, 0));
    switch (part) {
    case PART_PRE: build_pre(&z); break;
    case PART_BLOCK: build_block(&z); break;
    case PART_POST: build_post(&z); break;
    default:
        fprintf(stderr, "models/model_build.c: part %d is not PART_PRE, PART_BLOCK or PART_POST\n", (int)part);
        return -1;
    }
    return 0;
}
