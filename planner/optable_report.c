// The shapes of a plan a measured op table does not cover (optable_report.h).
#include "planner/optable_report.h"
#include <string.h>
#include "models/ops.h"

static void add_miss(OptableMisses *m, const char *op, int b, int s, int tp, OptableRule rule) {
    for (int i = 0; i < m->n; i++)
        if (m->miss[i].b == b && m->miss[i].s == s && m->miss[i].tp == tp && !strcmp(m->miss[i].op, op)) return;
    if (m->n == OPTABLE_MAX_MISSES) {
        m->more++;
        return;
    }
    OptableMiss *x = &m->miss[m->n++];
    snprintf(x->op, sizeof x->op, "%s", op);
    x->b = b, x->s = s, x->tp = tp, x->rule = rule;
}

void optable_plan_misses(const OpTable *t, const MistConfig *cfg, const Plan *plan, OptableMisses *out) {
    memset(out, 0, sizeof *out);
    if (!t) return;
    ModelConfig mc = cfg->model;
    if (mc.kv_heads <= 0) mc.kv_heads = mc.heads;  // unset: multi-head attention
    ExprCtx *x = expr_ctx_new();
    static ModelOpList part[3];  // pre, block, post (the op names only)
    const ModelPart ids[3] = {PART_PRE, PART_BLOCK, PART_POST};
    int ok = x != NULL;
    for (int p = 0; ok && p < 3; p++) ok = model_build(x, &mc, ids[p], &part[p]) == 0;
    for (int i = 0; ok && i < plan->num_stages; i++) {
        const StagePlan *sp = &plan->stage[i];
        int has[3] = {i == 0, sp->layers > 0, i == plan->num_stages - 1};
        for (int p = 0; p < 3; p++)
            for (int k = 0; has[p] && k < part[p].n_ops; k++) {
                const char *op = part[p].op[k].name;
                OptableRule r = optable_rule(t, op, sp->b, mc.seq_len, sp->tp);
                if (r == OPTABLE_MODEL || r == OPTABLE_EXTRAPOLATED) add_miss(out, op, sp->b, mc.seq_len, sp->tp, r);
            }
        // a lean stage's blocks that are not checkpointed run the lean kernels; those the
        // table lists at all price them (cost_lean_extra), so their gaps are misses too
        const char *lean[3] = {mc.activation == ACT_SWIGLU ? NULL : "lean_gelu", "lean_ln1",
                               mc.parallel_block ? NULL : "lean_ln2"};
        for (int k = 0; sp->lean && sp->layers > sp->ckpt && k < 3; k++) {
            if (!lean[k] || !optable_lists(t, lean[k], mc.seq_len)) continue;
            OptableRule r = optable_rule(t, lean[k], sp->b, mc.seq_len, sp->tp);
            if (r == OPTABLE_MODEL || r == OPTABLE_EXTRAPOLATED) add_miss(out, lean[k], sp->b, mc.seq_len, sp->tp, r);
        }
    }
    if (x) expr_ctx_free(x);
}

void optable_misses_print_text(const OptableMisses *m, FILE *f) {
    for (int i = 0; i < m->n; i++) {
        const OptableMiss *x = &m->miss[i];
        if (x->rule == OPTABLE_MODEL)
            fprintf(f, "mist-plan: op table: no entry for %s at b=%d s=%d tp=%d (nor two around it); the model's time "
                       "is used\n", x->op, x->b, x->s, x->tp);
        else
            fprintf(f, "mist-plan: warning: op table: %s at b=%d s=%d tp=%d is beyond the largest measured b; "
                       "extrapolated from the last two\n", x->op, x->b, x->s, x->tp);
    }
    if (m->more) fprintf(f, "mist-plan: op table: %d more shapes not covered\n", m->more);
}

void optable_misses_print_json(const OptableMisses *m, FILE *f) {
    fprintf(f, "[");
    for (int i = 0; i < m->n; i++)
        fprintf(f, "%s{\"op\": \"%s\", \"b\": %d, \"s\": %d, \"tp\": %d, \"rule\": \"%s\"}", i ? ", " : "",
                m->miss[i].op, m->miss[i].b, m->miss[i].s, m->miss[i].tp, optable_rule_name(m->miss[i].rule));
    fprintf(f, "]");
}
