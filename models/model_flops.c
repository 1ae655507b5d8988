// Whole-model FLOPs from the op list (models/model_flops.h).
#include "models/model_flops.h"
#include "models/ops.h"

// Per-part FLOPs at b = sequences, tp = 1: fwd/bwd model and kernel FLOPs.
typedef struct { double fwd, bwd, hw_fwd, hw_bwd; } PartFlops;

static int part_flops(const ModelConfig *m, ModelPart part, double sequences, int64_t s, PartFlops *out) {
    ExprCtx *cx = expr_ctx_new();
    ModelOpList ops;
    if (!cx || model_build(cx, m, part, &ops) != 0) {
        if (cx) expr_ctx_free(cx);
        return -1;
    }
    PartCost c;
    model_part_cost(cx, &ops, &c);
    double vals[4];
    vals[expr_sym_index(cx, "b")] = sequences;
    vals[expr_sym_index(cx, "s")] = (double)s;
    vals[expr_sym_index(cx, "tp")] = 1;
    vals[expr_sym_index(cx, "eb")] = 2;
    out->fwd = expr_eval(cx, c.flops_fwd, vals);
    out->bwd = expr_eval(cx, c.flops_bwd, vals);
    out->hw_fwd = expr_eval(cx, c.hw_flops_fwd, vals);
    out->hw_bwd = expr_eval(cx, c.hw_flops_bwd, vals);
    expr_ctx_free(cx);
    return 0;
}

// kernels = 0: model FLOPs; 1: kernel FLOPs. recompute forwards of ckpt_blocks blocks added.
static double total(const ModelConfig *m, double sequences, int64_t s, int ckpt_blocks, int kernels) {
    PartFlops p[3];
    for (int i = 0; i < 3; i++)
        if (part_flops(m, (ModelPart)i, sequences, s, &p[i]) != 0) return -1;
    double sum = 0;
    for (int i = 0; i < 3; i++) {
        double f = kernels ? p[i].hw_fwd + p[i].hw_bwd : p[i].fwd + p[i].bwd;
        sum += i == PART_BLOCK ? f * m->layers : f;
    }
    sum += (double)ckpt_blocks * (kernels ? p[PART_BLOCK].hw_fwd : p[PART_BLOCK].fwd);
    return sum;
}

double model_flops_train(const ModelConfig *m, double sequences, int64_t s) { return total(m, sequences, s, 0, 0); }

double model_flops_per_iteration(const MistConfig *cfg) {
    ModelConfig m = cfg->model;
    if (m.kv_heads <= 0) m.kv_heads = m.heads;  // unset: multi-head attention
    return model_flops_train(&m, (double)cfg->train.global_batch, m.seq_len);
}

double model_flops_per_token(const ModelConfig *m, int64_t s) {
    double f = total(m, 1, s, 0, 0);
    return f < 0 ? f : f / (double)s;
}

double model_flops_hardware(const ModelConfig *m, double sequences, int64_t s, int ckpt_blocks) {
    return total(m, sequences, s, ckpt_blocks, 0);
}

double model_flops_kernels(const ModelConfig *m, double sequences, int64_t s, int ckpt_blocks) {
    return total(m, sequences, s, ckpt_blocks, 1);
}
