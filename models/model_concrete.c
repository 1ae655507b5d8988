// The concrete API of models/model.h: the op list of models/model_build.c
// evaluated with numbers, so the runtime sizes exactly what the planner models.
#include <stdio.h>
#include <string.h>
#include "models/ops.h"

// Builds one part in a fresh context; NULL when the config is not a model.
static ExprCtx *build(const ModelConfig *m, ModelPart part, ModelOpList *ops) {
    ExprCtx *cx = expr_ctx_new();
    if (!cx) return NULL;
    if (model_build(cx, m, part, ops) != 0) {
        expr_ctx_free(cx);
        return NULL;
    }
    return cx;
}

int model_params(const ModelConfig *m, ModelPart part, ParamSpec *out, int max) {
    ModelOpList ops;
    ExprCtx *cx = build(m, part, &ops);
    if (!cx) return -1;
    expr_ctx_free(cx);  // parameter shapes are numbers already
    int n = 0;
    for (int i = 0; i < ops.n_ops; i++) {
        for (int j = 0; j < ops.op[i].n_params; j++) {
            if (n >= max) {
                fprintf(stderr, "models/model_concrete.c: model_params: part %d has more than max=%d tensors\n",
                        (int)part, max);
                return -1;
            }
            out[n++] = ops.op[i].param[j];
        }
    }
    return n;
}

int64_t model_param_count(const ModelConfig *m) {
    ParamSpec spec[MODEL_MAX_PARAMS];
    int64_t total = 0;
    // the model's parameters: the padded vocabulary rows (always zero) are storage, not parameters
    ModelConfig real = *m;
    real.vocab_pad = 1;
    for (int part = PART_PRE; part <= PART_POST; part++) {
        int n = model_params(&real, (ModelPart)part, spec, MODEL_MAX_PARAMS);
        if (n < 0) return -1;
        int64_t sum = 0;
        for (int i = 0; i < n; i++) sum += spec[i].rows * spec[i].cols;
        total += part == PART_BLOCK ? sum * m->layers : sum;
    }
    return total;
}

int model_acts(const ModelConfig *m, ModelPart part, int64_t b, int64_t s, int tp, ActSpec *out, int max) {
    return model_acts_sp(m, part, b, s, tp, 0, out, max);
}

int model_acts_sp(const ModelConfig *m, ModelPart part, int64_t b, int64_t s, int tp, int sp, ActSpec *out, int max) {
    // sp needs tp >= 2 dividing b*s: -1 without a message (the planner asks at every
    // tp level, tp = 1 included; the plan checks tell the user)
    if (sp && (tp < 2 || (b * s) % tp)) return -1;
    if (b <= 0 || s <= 0 || tp <= 0) {
        fprintf(stderr, "models/model_concrete.c: model_acts: b=%lld s=%lld tp=%d must be positive\n", (long long)b,
                (long long)s, tp);
        return -1;
    }
    ModelOpList ops;
    ExprCtx *cx = build(m, part, &ops);
    if (!cx) return -1;
    double vals[4];
    vals[expr_sym_index(cx, "b")] = (double)b;
    vals[expr_sym_index(cx, "s")] = (double)s;
    vals[expr_sym_index(cx, "tp")] = (double)tp;
    vals[expr_sym_index(cx, "eb")] = 1;  // element counts do not depend on it
    int n = 0;
    for (int i = 0; i < ops.n_tensors; i++) {
        if (n >= max) {
            fprintf(stderr, "models/model_concrete.c: model_acts: part %d has more than max=%d tensors\n", (int)part,
                    max);
            n = -1;
            break;
        }
        const ModelTensor *t = &ops.tensor[i];
        ActSpec *a = &out[n++];
        memset(a, 0, sizeof *a);
        snprintf(a->name, sizeof a->name, "%s", t->name);
        a->elems = (int64_t)expr_eval(cx, sp ? t->elems_sp : t->elems, vals);
        a->seq = t->seq;
        a->f32 = t->f32;
        a->saved = t->saved;
        a->ckpt_saved = t->ckpt_saved;
        a->sel_recompute = t->sel_recompute;
    }
    expr_ctx_free(cx);
    return n;
}
