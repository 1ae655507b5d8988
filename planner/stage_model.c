// The stage model (planner/stage_model.h): the model's parts from models/ as
// symbolic expressions of a stage configuration (docs/design.md §4), a stage's
// times and memory assembled from them, compiled, and evaluated. The terms it
// is built from are in cost_terms.c, phases and stage times in schedule.c,
// memory in memory.c, the interference rule in overlap.c.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "models/model.h"
#include "models/ops.h"
#include "planner/cost_terms.h"
#include "expr/expr_node.h"

const char *const stage_sym_names[STAGE_SYMS] = {
#define STAGE_SYM_NAME(sym, name, value) name,
    STAGE_SYM_TABLE(STAGE_SYM_NAME, _)
#undef STAGE_SYM_NAME
};

const char *const stage_output_names[ST_OUTPUTS] = {
    "t_stable_seconds", "t_delta_seconds", "peak_bytes_fwd", "peak_bytes_bwd", "weights",     "grads",
    "optimizer",        "activations",     "buffers_fwd",    "buffers_bwd",    "transient_fwd", "transient_bwd",
    "logits",           "host_bytes",      "fwd_first_seconds", "fwd_other_seconds", "bwd_last_seconds",
    "bwd_other_seconds", "hw_flops_per_microbatch",
    "fwd_first_collectives_seconds", "fwd_first_h2d_seconds", "fwd_first_d2h_seconds",
    "fwd_other_collectives_seconds", "fwd_other_h2d_seconds", "fwd_other_d2h_seconds",
    "bwd_last_collectives_seconds", "bwd_last_h2d_seconds", "bwd_last_d2h_seconds",
    "bwd_other_collectives_seconds", "bwd_other_h2d_seconds", "bwd_other_d2h_seconds",
    "block_fwd_seconds", "block_bwd_seconds", "block_recompute_seconds",
    "pre_fwd_seconds", "pre_bwd_seconds", "post_fwd_seconds", "post_bwd_seconds",
    "block_recompute_attention_seconds", "block_lean_fwd_seconds", "block_lean_bwd_seconds"};

// ---- the model's parts as expressions

// Parameter elements per TP rank: split tensors are ceil-divided over tp.
static Expr part_params(ExprCtx *x, Expr tp, const ModelConfig *m, ModelPart part) {
    ParamSpec spec[64];
    int n = model_params(m, part, spec, 64);  // checked by model_exprs_build
    Expr sum = ex_num(x, 0);
    for (int i = 0; i < n; i++) {
        Expr rows = ex_num(x, (double)spec[i].rows), cols = ex_num(x, (double)spec[i].cols);
        Expr e;
        if (spec[i].tp_split == 1) e = ex_mul(x, ex_ceil(x, ex_div(x, rows, tp)), cols);
        else if (spec[i].tp_split == 2) e = ex_mul(x, rows, ex_ceil(x, ex_div(x, cols, tp)));
        else e = ex_mul(x, rows, cols);
        sum = ex_add(x, sum, e);
    }
    return sum;
}

// Activation bytes from the model's concrete description, made symbolic: bytes
// are affine in b (measured at b = 1, 2) and looked up per power-of-two tp.
// which: 0 saved (not checkpointed), 1 saved when checkpointed, 2 forward
// temporaries (not saved, not a gradient), 3 every temporary (incl. the
// backward's activation gradients, named d_*). A tp the model cannot split
// into (model_acts fails) gets an impossible 1e30 bytes: it never fits.
#define TP_LEVELS 7  // tp = 1 .. 64
static Expr part_act_bytes_sp(ExprCtx *x, Expr b, Expr tp, const ModelConfig *m, ModelPart part, int which,
                              int act_bytes, int sp) {
    double at1[TP_LEVELS], at2[TP_LEVELS];
    int valid[TP_LEVELS];
    for (int l = 0; l < TP_LEVELS; l++) {
        double bytes_at[2] = {0, 0};
        valid[l] = 1;
        for (int bb = 1; bb <= 2; bb++) {
            ActSpec acts[128];
            int n = model_acts_sp(m, part, bb, m->seq_len, 1 << l, sp, acts, 128);
            if (n < 0) valid[l] = 0;
            for (int i = 0; i < n; i++) {
                int grad = !strncmp(acts[i].name, "d_", 2);
                int keep = which == 0 ? acts[i].saved
                         : which == 1 ? acts[i].ckpt_saved
                         : which == 2 ? !acts[i].saved && !acts[i].ckpt_saved && !grad
                                      : !acts[i].saved && !acts[i].ckpt_saved;
                if (keep) bytes_at[bb - 1] += (double)acts[i].elems * (acts[i].f32 ? 4 : act_bytes);
            }
        }
        at1[l] = bytes_at[0], at2[l] = bytes_at[1];
    }
    return cost_bytes_by_tp(x, b, tp, at1, at2, valid, TP_LEVELS);
}

// The bytes of part_act_bytes_sp; the block's under sequence parallelism when
// the stage symbol sp is 1 (its own table: tp = 1 is not valid there)
static Expr part_act_bytes(ExprCtx *x, Expr b, Expr tp, const ModelConfig *m, ModelPart part, int which,
                           int act_bytes) {
    Expr plain = part_act_bytes_sp(x, b, tp, m, part, which, act_bytes, 0);
    if (part != PART_BLOCK) return plain;
    Expr with_sp = part_act_bytes_sp(x, b, tp, m, part, which, act_bytes, 1);
    return ex_select(x, ex_sym(x, "sp"), with_sp, plain);
}

// ---- the op list from models/: one description for planner and runtime

// models/model_build.c writes its expressions in symbols b, s, tp, eb; a stage
// fixes s (the model's seq_len) and eb (the storage precision), so the op
// list is built in a scratch context and copied node by node into the stage
// context with s and eb replaced by numbers and b, tp by the stage symbols.
// Handles of a context are topologically ordered (children first), so one
// pass over the scratch nodes maps every one; the stage context re-simplifies
// each node as it is rebuilt, folding the constant s and eb away.
static int transplant(ExprCtx *dst, ExprCtx *src, Expr b, Expr tp, double s, double eb, Expr *map, char *err,
                      size_t errlen) {
    size_t n = expr_ctx_num_nodes(src);
    for (size_t i = 0; i < n; i++) {
        const ExprNode nd = expr_ctx_nodes(src)[i];
        int leaf = nd.op == EXPR_OP_NUM || nd.op == EXPR_OP_SYM;  // a of a symbol is its index, not a handle
        Expr a = !leaf && nd.a >= 0 ? map[nd.a] : EXPR_NONE, bb = !leaf && nd.b >= 0 ? map[nd.b] : EXPR_NONE;
        Expr c = !leaf && nd.c >= 0 ? map[nd.c] : EXPR_NONE;
        switch ((ExprOp)nd.op) {
        case EXPR_OP_NUM: map[i] = ex_num(dst, nd.value); break;
        case EXPR_OP_SYM: {
            const char *name = expr_sym_name(src, nd.a);
            if (!strcmp(name, "b")) map[i] = b;
            else if (!strcmp(name, "tp")) map[i] = tp;
            else if (!strcmp(name, "s")) map[i] = ex_num(dst, s);
            else if (!strcmp(name, "eb")) map[i] = ex_num(dst, eb);
            else {
                snprintf(err, errlen, "planner/stage_model.c: the model's op list uses symbol '%s'; the stage model knows "
                         "b, s, tp, eb", name);
                return -1;
            }
            break;
        }
        case EXPR_OP_ADD: map[i] = ex_add(dst, a, bb); break;
        case EXPR_OP_SUB: map[i] = ex_sub(dst, a, bb); break;
        case EXPR_OP_MUL: map[i] = ex_mul(dst, a, bb); break;
        case EXPR_OP_DIV: map[i] = ex_div(dst, a, bb); break;
        case EXPR_OP_MAX: map[i] = ex_max(dst, a, bb); break;
        case EXPR_OP_MIN: map[i] = ex_min(dst, a, bb); break;
        case EXPR_OP_CEIL: map[i] = ex_ceil(dst, a); break;
        case EXPR_OP_FLOOR: map[i] = ex_floor(dst, a); break;
        case EXPR_OP_SELECT: map[i] = ex_select(dst, a, bb, c); break;
        default:
            snprintf(err, errlen, "planner/stage_model.c: unknown expression node op %d", nd.op);
            return -1;
        }
    }
    return 0;
}

// Matmuls run on the GEMM model, attention on its own curve; the rest (norms,
// residual adds, activations, lookups, the loss) are elementwise.
static OpClass op_class(ModelOpKind k) {
    return k == MOP_MATMUL || k == MOP_MATMUL_GELU ? OPC_GEMM : k == MOP_ATTENTION ? OPC_ATTENTION : OPC_MEMORY;
}

// One part's ops, executed FLOPs (hw_flops: causal attention, elementwise
// arithmetic) and bytes, and its tensor-parallel all-reduce payloads.
// rows: the share of the N rows the part's norms and residual adds run on
// (1/tp under sequence parallelism, the block's; EXPR_NONE: all of them)
static void part_from_ops(PartExprs *p, ExprCtx *x, const ModelOpList *ol, const Expr *map, Expr rows) {
    p->tp_comm_fwd = p->tp_comm_bwd = ex_num(x, 0);
    for (int i = 0; i < ol->n_ops && p->n_ops < PART_MAX_OPS; i++) {
        const ModelOp *mo = &ol->op[i];
        OpExprs *o = &p->op[p->n_ops++];
        snprintf(o->name, sizeof o->name, "%s", mo->name);
        o->fwd_flops = map[mo->hw_flops_fwd];
        o->bwd_flops = map[mo->hw_flops_bwd];
        o->fwd_bytes = map[mo->bytes_fwd];
        o->bwd_bytes = map[mo->bytes_bwd];
        o->cls = op_class(mo->kind);
        o->gemm_m = map[mo->gemm_m], o->gemm_n = map[mo->gemm_n], o->gemm_k = map[mo->gemm_k];
        if (rows != EXPR_NONE && (mo->kind == MOP_NORM || mo->kind == MOP_RESIDUAL)) {
            o->fwd_flops = ex_mul(x, o->fwd_flops, rows), o->bwd_flops = ex_mul(x, o->bwd_flops, rows);
            o->fwd_bytes = ex_mul(x, o->fwd_bytes, rows), o->bwd_bytes = ex_mul(x, o->bwd_bytes, rows);
        }
        p->tp_comm_fwd = ex_add(x, p->tp_comm_fwd, map[mo->tp_comm_fwd]);
        p->tp_comm_bwd = ex_add(x, p->tp_comm_bwd, map[mo->tp_comm_bwd]);
    }
}

void cost_state_bytes(Precision precision, int *param, int *grad, int *optimizer) {
    int elt = precision == PREC_FP32 ? 4 : 2;
    *param = elt;
    *grad = elt;
    *optimizer = elt == 4 ? 8 : 12;
}

static int model_exprs_build(ModelExprs *me, ExprCtx *x, const MistConfig *cfg, char *err, size_t errlen) {
    ModelConfig mc = cfg->model;
    const ModelConfig *m = &mc;
    memset(me, 0, sizeof *me);
    if (errlen > 0) err[0] = '\0';
    if (m->layers < 1 || m->hidden < 1 || m->heads < 1 || m->seq_len < 1 || m->vocab < 1 || m->ffn_hidden < 1) {
        snprintf(err, errlen, "%s: [model] needs layers, hidden, heads, ffn_hidden, vocab, seq_len >= 1", cfg->source);
        return -1;
    }
    if (mc.kv_heads <= 0) mc.kv_heads = mc.heads;  // unset: multi-head attention
    ParamSpec check[64];
    char why[256];
    if (model_params(m, PART_BLOCK, check, 64) < 0 || model_check(m, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s: [model] hidden = %d, heads = %d, kv_heads = %d is not a model (heads must divide "
                 "hidden, kv_heads divide heads)", cfg->source, m->hidden, m->heads, m->kv_heads);
        return -1;
    }
    cost_state_bytes(cfg->train.precision, &me->param_bytes, &me->grad_bytes, &me->optimizer_bytes);
    int elt = me->param_bytes;
    me->compute = compute_dtype_of(cfg);
    memory_act_levels(m, PART_BLOCK, elt, me->acts_block);
    memory_act_levels(m, PART_POST, elt, me->acts_post);
    memory_act_levels_sp(m, PART_BLOCK, elt, me->acts_block_sp);
    memory_sp_terms(m, elt, me->acts_block, me->acts_block_sp, &me->sp_terms);
    me->sp_norm_grad_elems = (double)((m->norm == NORM_LAYERNORM ? 2 : 1) * (m->parallel_block ? 1 : 2)) * m->hidden;

    Expr b = ex_sym(x, "b"), tp = ex_sym(x, "tp");
    // every quantity of the model description is an integer count (elements,
    // bytes, FLOPs of integer b and tp, far below 2^53): merging like terms
    // of its sums is exact and shortens the per-op roofline inputs
    expr_ctx_set_merge_like_terms(x, 1);
    Expr th = ex_mul(x, ex_mul(x, b, ex_num(x, m->seq_len)), ex_num(x, m->hidden));  // (b, s, h) elements

    // ---- the op lists of models/ (compute time and TP all-reduces)
    PartExprs *parts[3] = {&me->pre, &me->block, &me->post};
    ModelPart ids[3] = {PART_PRE, PART_BLOCK, PART_POST};
    ExprCtx *mx = expr_ctx_new();
    ModelOpList *ol = malloc(3 * sizeof *ol);
    Expr *map = NULL;
    int rc = mx && ol ? 0 : -1;
    for (int i = 0; rc == 0 && i < 3; i++)
        if (model_build(mx, m, ids[i], &ol[i]) != 0) {
            snprintf(err, errlen, "%s: [model] the model description rejects this model", cfg->source);
            rc = -1;
        }
    if (rc == 0) {
        map = malloc(expr_ctx_num_nodes(mx) * sizeof *map);
        rc = map ? transplant(x, mx, b, tp, m->seq_len, elt, map, err, errlen) : -1;
    }
    // sequence parallelism: the block's norms and residual adds on N/tp rows, 1 / (1 + sp (tp - 1))
    Expr one = ex_num(x, 1);
    Expr sp_rows = ex_div(x, one, ex_add(x, one, ex_mul(x, ex_sym(x, "sp"), ex_sub(x, tp, one))));
    for (int i = 0; rc == 0 && i < 3; i++)
        part_from_ops(parts[i], x, &ol[i], map, ids[i] == PART_BLOCK ? sp_rows : EXPR_NONE);
    free(map);
    free(ol);
    if (mx) expr_ctx_free(mx);
    if (rc != 0) {
        expr_ctx_set_merge_like_terms(x, 0);
        if (!err[0]) snprintf(err, errlen, "out of memory building the model's op list");
        return -1;
    }

    // ---- parameters and activations from the model description
    for (int i = 0; i < 3; i++) {
        PartExprs *p = parts[i];
        p->params = part_params(x, tp, m, ids[i]);
        p->saved = part_act_bytes(x, b, tp, m, ids[i], 0, elt);
        p->saved_ckpt = part_act_bytes(x, b, tp, m, ids[i], 1, elt);
        // forward: the part's scratch; backward: scratch and the activation grads
        p->transient_fwd = part_act_bytes(x, b, tp, m, ids[i], 2, elt);
        p->transient_bwd = part_act_bytes(x, b, tp, m, ids[i], 3, elt);
        p->output = ex_mul(x, ex_num(x, elt), th);
    }
    expr_ctx_set_merge_like_terms(x, 0);  // times and ratios follow: not integers
    return 0;
}

// ---- stage model assembly and evaluation

StagePattern stage_pattern_of(const StageConfig *c) {
    StagePattern p = {c->plan.zero, c->plan.wo != 0, c->plan.go != 0, c->plan.oo != 0, c->plan.ao != 0};
    return p;
}

int stage_pattern_has(const StagePattern *p, const StageConfig *c) {
    StagePattern q = stage_pattern_of(c);
    return p->zero == q.zero && p->wo == q.wo && p->go == q.go && p->oo == q.oo && p->ao == q.ao;
}

void stage_pattern_name(const StagePattern *p, char *buf, size_t len) {
    char z[16];
    if (p->zero < SHARD_ZERO_CODES) snprintf(z, sizeof z, "z%d", p->zero);
    else snprintf(z, sizeof z, "%s", shard_code_names[p->zero]);
    snprintf(buf, len, "%s%s%s%s%s", z, p->wo ? " wo" : "", p->go ? " go" : "", p->oo ? " oo" : "",
             p->ao ? " ao" : "");
}

int stage_model_build(StageModel *sm, const MistConfig *cfg, const HwProfile *hw, const OpTable *table, int has_pre,
                      int has_post, char *err, size_t errlen) {
    return stage_model_build_pattern(sm, cfg, hw, table, has_pre, has_post, NULL, err, errlen);
}

// The stage symbols (in StageSym order) and the model's parts, built once:
// model_exprs_build is most of the cost of building a stage model (the model
// description is evaluated at many (b, tp) points), and every stage model of a
// configuration starts from the same nodes. A stage model clones the context,
// which gives the same handles, so what it builds on top is exactly what a
// build from scratch would give (the pattern's constants, created later here,
// are numbers: they take no part in the handle order of operands).
struct StageModelBase {
    ExprCtx *ctx;
    ModelExprs me;
    const MistConfig *cfg;
};

StageModelBase *stage_model_base_new(const MistConfig *cfg, char *err, size_t errlen) {
    StageModelBase *base = calloc(1, sizeof *base);
    if (!base || !(base->ctx = expr_ctx_new())) {
        free(base);
        snprintf(err, errlen, "out of memory building the stage model");
        return NULL;
    }
    // the values a stage configuration's symbols take: counts at least 1,
    // ckpt and p at least 0, flags and ratios in [0, 1] (a pattern's nonzero
    // ratios are declared positive in stage_model_build_from); branches that
    // no configuration takes fold away (e.g. a host copy that always runs)
    for (int i = 0; i < STAGE_SYMS; i++) {
        ex_sym(base->ctx, stage_sym_names[i]);
        int count = i == SYM_B || i == SYM_DP || i == SYM_TP || i == SYM_G || i == SYM_L;
        expr_sym_set_bounds(base->ctx, stage_sym_names[i], count ? 1.0 : 0.0, count);
    }
    if (model_exprs_build(&base->me, base->ctx, cfg, err, errlen) != 0) {
        stage_model_base_free(base);
        return NULL;
    }
    base->cfg = cfg;
    return base;
}

void stage_model_base_free(StageModelBase *base) {
    if (!base) return;
    if (base->ctx) expr_ctx_free(base->ctx);
    free(base);
}

int stage_model_build_pattern(StageModel *sm, const MistConfig *cfg, const HwProfile *hw, const OpTable *table,
                              int has_pre, int has_post, const StagePattern *pattern, char *err, size_t errlen) {
    memset(sm, 0, sizeof *sm);
    StageModelBase *base = stage_model_base_new(cfg, err, errlen);
    if (!base) return -1;
    int rc = stage_model_build_from(sm, base, hw, table, has_pre, has_post, pattern, 0, err, errlen);
    stage_model_base_free(base);
    return rc;
}

int stage_model_build_from(StageModel *sm, const StageModelBase *base, const HwProfile *hw, const OpTable *table,
                           int has_pre, int has_post, const StagePattern *pattern, unsigned flags, char *err,
                           size_t errlen) {
    memset(sm, 0, sizeof *sm);
    sm->ctx = expr_ctx_clone(base->ctx);
    StageBuild sb = {0};
    sb.x = sm->ctx;
    for (int i = 0; i < STAGE_SYMS; i++) {
        sb.s[i] = ex_sym(sm->ctx, stage_sym_names[i]);
        sm->sym[i] = expr_sym_index(sm->ctx, stage_sym_names[i]);
    }
    if (pattern) {
        // the pattern's discrete choices become constants (the symbols stay
        // registered, so evaluation takes the same columns and ignores them)
        sm->specialised = 1;
        sm->pattern = *pattern;
        // (a code with I scopes is searched only where its groups are inside the dp group:
        // 1 < g < dp, so its letters are the layout the runtime runs)
        for (int k = 0; k < 3; k++) {
            sb.s[SYM_WS + k] = ex_num(sm->ctx, shard_code_scope(pattern->zero, k) == SCOPE_G);
            sb.s[SYM_WI + k] = ex_num(sm->ctx, shard_code_scope(pattern->zero, k) == SCOPE_I);
        }
        const int on[4] = {pattern->wo, pattern->go, pattern->oo, pattern->ao};
        for (int r = 0; r < 4; r++) {
            if (!on[r]) sb.s[SYM_WO + r] = ex_num(sm->ctx, 0);
            else expr_sym_set_bounds(sm->ctx, stage_sym_names[SYM_WO + r], 0.0, 1);  // nonzero in the pattern
        }
    }
    sb.hw = hw;
    sb.table = table;
    sb.cfg = base->cfg;
    sb.me = &base->me;
    sb.zero = ex_num(sm->ctx, 0);
    sb.one = ex_num(sm->ctx, 1);
    cost_paro_scopes(&sb, !pattern);  // the shard divisors, g and the I flags (planner/cost_paro.c)
    sb.has_pre = sm->has_pre = has_pre;
    sb.has_post = sm->has_post = has_post;
    for (int k = 0; k < ST_OUTPUTS; k++) sm->out[k] = EXPR_NONE;
    schedule_build(&sb, sm->out);
    memory_build(&sb, sm->out);
    for (int k = 0; k < ST_OUTPUTS; k++)
        if (sm->out[k] == EXPR_NONE) sm->out[k] = sb.zero;
    if (flags & STAGE_BUILD_SPLIT) {
        // the memory program: both peaks and the host bytes (the search's fit test)
        Expr time[2] = {sm->out[ST_T], sm->out[ST_D]};
        Expr peaks[3] = {sm->out[ST_PEAK_FWD], sm->out[ST_PEAK_BWD], sm->out[ST_HOST]};
        sm->prog_time = expr_compile(sm->ctx, time, 2);
        sm->prog_peaks = expr_compile(sm->ctx, peaks, 3);
    } else {
        sm->prog = expr_compile(sm->ctx, sm->out, ST_OUTPUTS);
    }
    if (!sm->prog && (!sm->prog_time || !sm->prog_peaks)) {
        snprintf(err, errlen, "could not compile the stage model");
        stage_model_free(sm);
        return -1;
    }
    return 0;
}

void stage_model_free(StageModel *sm) {
    if (sm->prog) expr_program_free(sm->prog);
    if (sm->prog_time) expr_program_free(sm->prog_time);
    if (sm->prog_peaks) expr_program_free(sm->prog_peaks);
    if (sm->ctx) expr_ctx_free(sm->ctx);
    memset(sm, 0, sizeof *sm);
}

void stage_eval_scalar(const StageModel *sm, const StageConfig *c, double out[ST_OUTPUTS]) {
    double v[STAGE_SYMS];
    stage_sym_values(c, v);
    int n = expr_num_syms(sm->ctx);
    double *values = calloc((size_t)n, sizeof *values);
    for (int i = 0; i < STAGE_SYMS; i++) values[sm->sym[i]] = v[i];
    for (int k = 0; k < ST_OUTPUTS; k++) out[k] = expr_eval(sm->ctx, sm->out[k], values);
    free(values);
}

void stage_eval_batch(const StageModel *sm, const double *const cols[STAGE_SYMS], double *const out[ST_OUTPUTS],
                      size_t n) {
    // the context holds exactly the stage symbols; the columns go in its order
    int nsym = expr_num_syms(sm->ctx);
    const double *sym_on_stack[STAGE_SYMS] = {0};
    const double **sym_cols = nsym <= STAGE_SYMS ? sym_on_stack : calloc((size_t)nsym, sizeof *sym_cols);
    if (!sym_cols) {
        fprintf(stderr, "planner/stage_model.c: out of memory evaluating %zu candidates\n", n);
        abort();
    }
    for (int i = 0; i < STAGE_SYMS; i++) sym_cols[sm->sym[i]] = cols[i];
    if (sm->prog) {
        expr_program_eval(sm->prog, sym_cols, out, n);  // unwanted outputs (NULL) are not written
    } else {
        for (int k = 0; k < ST_OUTPUTS; k++)
            if (out[k] && k != ST_T && k != ST_D && k != ST_PEAK_FWD && k != ST_PEAK_BWD && k != ST_HOST) {
                fprintf(stderr, "planner/stage_model.c: stage_eval_batch: output '%s' asked of a model built with "
                        "STAGE_BUILD_SPLIT (it computes t, d and the peaks); hint: build it with flags 0\n",
                        stage_output_names[k]);
                abort();
            }
        double *time[2] = {out[ST_T], out[ST_D]}, *peaks[3] = {out[ST_PEAK_FWD], out[ST_PEAK_BWD], out[ST_HOST]};
        if (time[0] || time[1]) expr_program_eval(sm->prog_time, sym_cols, time, n);
        if (peaks[0] || peaks[1] || peaks[2]) expr_program_eval(sm->prog_peaks, sym_cols, peaks, n);
    }
    if (sym_cols != sym_on_stack) free(sym_cols);
}

ComputeDtype compute_dtype_of(const MistConfig *cfg) {
    return cfg->train.precision == PREC_FP32 ? DT_FP32 : cfg->train.precision == PREC_FP16 ? DT_FP16 : DT_BF16;
}
