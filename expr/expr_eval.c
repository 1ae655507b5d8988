// Scalar evaluation of an expression (expr_eval, contract in expr.h): the
// nodes it reaches, each once, in handle order (children first), with the
// operators' scalar semantics of expr_node.h, the same the compiled
// programs run.
#include <stdlib.h>

#include "expr/expr.h"
#include "expr/expr_node.h"

// value of one node given the values of its operands
static double apply(const ExprNode *n, const double *val, const double *sym_values) {
    switch ((ExprOp)n->op) {
    case EXPR_OP_NUM: return n->value;
    case EXPR_OP_SYM: return sym_values[n->a];
    case EXPR_OP_ADD: return val[n->a] + val[n->b];
    case EXPR_OP_SUB: return val[n->a] - val[n->b];
    case EXPR_OP_MUL: return val[n->a] * val[n->b];
    case EXPR_OP_DIV: return val[n->a] / val[n->b];
    case EXPR_OP_MAX: return expr_max2(val[n->a], val[n->b]);
    case EXPR_OP_MIN: return expr_min2(val[n->a], val[n->b]);
    case EXPR_OP_CEIL: return expr_ceil1(val[n->a]);
    case EXPR_OP_FLOOR: return expr_floor1(val[n->a]);
    case EXPR_OP_SELECT: return expr_select3(val[n->a], val[n->b], val[n->c]);
    case EXPR_OP_OVERLAP: break;  // needs the context's table: overlap_value
    case EXPR_OP_COUNT: break;
    }
    expr_die("corrupt node with op %d", (int)n->op);
    return 0.0;
}

static double overlap_value(const ExprOverlapTable *tables, const ExprNode *n, const double *val) {
    Expr in[EXPR_OVERLAP_MAX] = {n->a, n->b, n->c, n->d};
    double v[EXPR_OVERLAP_MAX] = {0, 0, 0, 0};
    for (int i = 0; i < EXPR_OVERLAP_MAX; i++)
        if (in[i] != EXPR_NONE) v[i] = val[in[i]];
    return expr_overlap_apply(&tables[(int)n->value], v);
}

double expr_eval(ExprCtx *x, Expr e, const double *sym_values) {
    expr_check_handle(x, e, "expr_eval");
    const ExprNode *nodes = expr_ctx_nodes(x);
    const ExprOverlapTable *tables = expr_ctx_overlap_tables(x);
    // children have smaller handles: mark what e reaches walking down, then
    // evaluate the marked nodes walking up, each once (shared nodes too)
    size_t n = (size_t)e + 1;
    unsigned char *needed = calloc(n, 1);
    double *val = malloc(n * sizeof *val);
    if (!needed || !val) expr_die("out of memory evaluating an expression of %zu nodes", n);
    needed[e] = 1;
    for (Expr i = e; i >= 0; i--) {
        if (!needed[i]) continue;
        const ExprNode *nd = &nodes[i];
        if (nd->op == EXPR_OP_NUM || nd->op == EXPR_OP_SYM) continue;
        needed[nd->a] = 1;
        if (nd->b != EXPR_NONE) needed[nd->b] = 1;
        if (nd->c != EXPR_NONE) needed[nd->c] = 1;
        if (nd->d != EXPR_NONE) needed[nd->d] = 1;
    }
    for (Expr i = 0; i <= e; i++) {
        if (!needed[i]) continue;
        const ExprNode *nd = &nodes[i];
        val[i] = nd->op == EXPR_OP_OVERLAP ? overlap_value(tables, nd, val) : apply(nd, val, sym_values);
    }
    double r = val[e];
    free(needed);
    free(val);
    return r;
}
