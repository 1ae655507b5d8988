// Human-readable dump of a part's op list (what the planner's explain output
// and debugging sessions show): one line per op and per tensor.
#include <stdio.h>
#include "models/ops.h"

static void field(FILE *f, ExprCtx *cx, const char *label, Expr e) {
    char buf[512];
    expr_print(cx, e, buf, sizeof buf);
    fprintf(f, "    %-12s %s\n", label, buf);
}

void model_ops_print(FILE *f, ExprCtx *cx, const ModelOpList *ops) {
    static const char *parts[] = {"pre", "block", "post"};
    fprintf(f, "part %s: %d ops, %d tensors\n", (unsigned)ops->part < 3 ? parts[ops->part] : "?", ops->n_ops,
            ops->n_tensors);
    for (int i = 0; i < ops->n_ops; i++) {
        const ModelOp *op = &ops->op[i];
        fprintf(f, "  op %-12s (%s)", op->name, model_op_kind_name(op->kind));
        for (int j = 0; j < op->n_params; j++)
            fprintf(f, " %s(%lld x %lld)", op->param[j].name, (long long)op->param[j].rows,
                    (long long)op->param[j].cols);
        fprintf(f, "\n");
        field(f, cx, "params", op->params);
        field(f, cx, "flops_fwd", op->flops_fwd);
        field(f, cx, "hw_flops_fwd", op->hw_flops_fwd);
        field(f, cx, "hw_flops_bwd", op->hw_flops_bwd);
        field(f, cx, "bytes_fwd", op->bytes_fwd);
        field(f, cx, "bytes_bwd", op->bytes_bwd);
        field(f, cx, "tp_comm_fwd", op->tp_comm_fwd);
        field(f, cx, "tp_comm_bwd", op->tp_comm_bwd);
        if (op->kind == MOP_MATMUL || op->kind == MOP_MATMUL_GELU) {  // the forward GEMM (m x n, inner k)
            field(f, cx, "gemm_m", op->gemm_m);
            field(f, cx, "gemm_n", op->gemm_n);
            field(f, cx, "gemm_k", op->gemm_k);
        }
    }
    for (int i = 0; i < ops->n_tensors; i++) {
        const ModelTensor *t = &ops->tensor[i];
        char buf[256];
        expr_print(cx, t->elems, buf, sizeof buf);
        fprintf(f, "  tensor %-10s %s %s%s%s%s%s elems %s\n", t->name, t->f32 ? "f32" : "X", t->saved ? " saved" : "",
                t->ckpt_saved ? " ckpt_saved" : "", t->scratch_fwd ? " scratch_fwd" : "",
                t->scratch_bwd ? " scratch_bwd" : "", t->sel_recompute ? " sel_recompute" : "", buf);
    }
}
