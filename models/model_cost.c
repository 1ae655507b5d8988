// Sums a part's op list into its costs (models/ops.h PartCost).
#include "models/ops.h"

Expr model_tensor_bytes(ExprCtx *cx, const ModelOpList *ops, const ModelTensor *t) {
    return ex_mul(cx, t->f32 ? ex_num(cx, 4) : ops->eb, t->elems);
}

void model_part_cost(ExprCtx *cx, const ModelOpList *ops, PartCost *out) {
    Expr zero = ex_num(cx, 0);
    PartCost c = {zero, zero, zero, zero, zero, zero, zero, zero, zero, zero, zero, zero, zero};
    for (int i = 0; i < ops->n_ops; i++) {
        const ModelOp *op = &ops->op[i];
        c.params = ex_add(cx, c.params, op->params);
        c.flops_fwd = ex_add(cx, c.flops_fwd, op->flops_fwd);
        c.flops_bwd = ex_add(cx, c.flops_bwd, op->flops_bwd);
        c.hw_flops_fwd = ex_add(cx, c.hw_flops_fwd, op->hw_flops_fwd);
        c.hw_flops_bwd = ex_add(cx, c.hw_flops_bwd, op->hw_flops_bwd);
        c.bytes_fwd = ex_add(cx, c.bytes_fwd, op->bytes_fwd);
        c.bytes_bwd = ex_add(cx, c.bytes_bwd, op->bytes_bwd);
        c.tp_comm_bytes_fwd = ex_add(cx, c.tp_comm_bytes_fwd, op->tp_comm_fwd);
        c.tp_comm_bytes_bwd = ex_add(cx, c.tp_comm_bytes_bwd, op->tp_comm_bwd);
    }
    for (int i = 0; i < ops->n_tensors; i++) {
        const ModelTensor *t = &ops->tensor[i];
        Expr bytes = model_tensor_bytes(cx, ops, t);
        if (t->saved) c.saved = ex_add(cx, c.saved, bytes);
        if (t->ckpt_saved) c.saved_ckpt = ex_add(cx, c.saved_ckpt, bytes);
        if (t->scratch_fwd) c.transient_fwd = ex_add(cx, c.transient_fwd, bytes);
        if (t->scratch_bwd) c.transient_bwd = ex_add(cx, c.transient_bwd, bytes);
    }
    *out = c;
}

const char *model_op_kind_name(ModelOpKind k) {
    static const char *names[MOP_KIND_COUNT] = {"embedding", "norm", "matmul", "matmul_gelu", "attention",
                                                "rotary", "gelu", "swiglu", "residual", "crossentropy"};
    return (unsigned)k < MOP_KIND_COUNT ? names[k] : "unknown";
}
