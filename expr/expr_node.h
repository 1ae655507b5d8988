// Node layout of an expression context, shared by the builder (expr.c), its
// scalar evaluation and printing (expr_eval.c, expr_print.c), the compiler of
// flat programs (expr_compile.c) and their block kernels (expr_block.c). Not
// a public API.
#ifndef MIST_EXPR_NODE_H
#define MIST_EXPR_NODE_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "expr/expr.h"

typedef enum {
    EXPR_OP_NUM = 0,  // constant: value
    EXPR_OP_SYM,      // symbol: a = symbol index
    EXPR_OP_ADD,
    EXPR_OP_SUB,
    EXPR_OP_MUL,
    EXPR_OP_DIV,
    EXPR_OP_MAX,
    EXPR_OP_MIN,
    EXPR_OP_CEIL,
    EXPR_OP_FLOOR,
    EXPR_OP_SELECT,   // a > 0 ? b : c
    EXPR_OP_OVERLAP,  // the window of streams a, b[, c[, d]] under overlap table (int)value
    EXPR_OP_COUNT
} ExprOp;

typedef struct {
    int32_t op;        // ExprOp
    Expr a, b, c, d;   // operands (EXPR_NONE where unused); children have smaller handles
    double value;      // EXPR_OP_NUM: the constant; EXPR_OP_OVERLAP: the table's index in the context
} ExprNode;

// the context's node array (handles index it); valid until the next constructor call
const ExprNode *expr_ctx_nodes(const ExprCtx *ctx);

// The slowdown factors of one overlap node, over its own n inputs (the
// streams that may be busy, in the caller's stream order): f[A][i] for the
// busy set A (bit i: input i), 1.0 where i is not in A or |A| < 2 (never
// used, but finite so that masked lanes compute nothing odd).
typedef struct {
    int n;  // 2..EXPR_OVERLAP_MAX inputs
    // 1 when every input is > EXPR_OVERLAP_EPS for every value the symbols
    // may take (expr_sym_set_bounds): the first round's busy set is all of
    // them, so the batched loops use its factors without picking them
    int all_busy;
    double f[EXPR_OVERLAP_SUBSETS][EXPR_OVERLAP_MAX];
    // 1.0 / f: a stream's work advances by w * inv rather than w / f (one
    // division per factor at build time instead of one per round and lane;
    // the rule is defined with the product, so every form agrees bitwise)
    double inv[EXPR_OVERLAP_SUBSETS][EXPR_OVERLAP_MAX];
    // the same factors as the batched loops pick them: by_others[i][k] is
    // f[A][i] for A = {i} and the other inputs in k (bit m: the m-th input
    // other than i), +inf for k = 0 (input i alone: its scaled work is inf,
    // so no window); inv_by_others = 1.0 / by_others (0 for k = 0).
    double by_others[EXPR_OVERLAP_MAX][EXPR_OVERLAP_SUBSETS / 2];
    double inv_by_others[EXPR_OVERLAP_MAX][EXPR_OVERLAP_SUBSETS / 2];
} ExprOverlapTable;

// the context's overlap tables (a node's value indexes them); valid until the next constructor call
const ExprOverlapTable *expr_ctx_overlap_tables(const ExprCtx *ctx);

// Abort with "expr: " and the message (a caller's mistake, a corrupt node,
// out of memory); expr_check_handle does so unless e is a node of ctx.
__attribute__((noreturn, format(printf, 1, 2))) void expr_die(const char *fmt, ...);
void expr_check_handle(const ExprCtx *ctx, Expr e, const char *who);

// The scalar semantics of every operator. Builder folding, expr_eval and the
// batched loops all use exactly these expressions, so results agree bitwise.
static inline double expr_max2(double a, double b) { return a > b ? a : b; }
static inline double expr_min2(double a, double b) { return a < b ? a : b; }
static inline double expr_select3(double c, double a, double b) { return c > 0 ? a : b; }

// The window rule of expr.h's ex_overlap over n inputs (n a constant at
// every call site, so the loops unroll). Written without branches: a round
// with fewer than two busy streams gets an empty window (w = 0, nothing
// changes), which is what stopping there gives, and per stream the update
// is a select. So the batched loops vectorise it (the factor lookup is a
// gather) and the value is the same bitwise as the scalar rule with its
// early exits (overlap_seconds in planner/overlap.c): the same operations
// on the same values in the same order; the added terms are exact zeros.
// Every round with two or more busy streams finishes the one that sets the
// window (its x f - w is exactly 0), so n - 1 rounds are enough.
static inline __attribute__((always_inline)) double expr_overlap_n(const ExprOverlapTable *t, const int n,
                                                                   const double in[EXPR_OVERLAP_MAX]) {
    double x[EXPR_OVERLAP_MAX], total = 0.0;
#pragma GCC unroll 4
    for (int s = 0; s < n; s++) x[s] = in[s] > EXPR_OVERLAP_EPS ? in[s] : 0.0;
#pragma GCC unroll 4
    for (int round = 0; round < n - 1; round++) {
        int busy = 0;
#pragma GCC unroll 4
        for (int s = 0; s < n; s++) busy |= (x[s] > EXPR_OVERLAP_EPS) << s;
        int several = (busy & (busy - 1)) != 0;
        double w = INFINITY;
#pragma GCC unroll 4
        for (int s = 0; s < n; s++) {
            double scaled = x[s] * t->f[busy][s];
            w = (busy >> s) & 1 ? expr_min2(w, scaled) : w;
        }
        w = several ? w : 0.0;
        total += w;
#pragma GCC unroll 4
        for (int s = 0; s < n; s++) {
            // computed unconditionally, then selected: a division under a
            // condition could trap, so the compiler would keep a branch
            double f = t->f[busy][s], rest = x[s] - w * t->inv[busy][s];
            double left = x[s] * f - w > EXPR_OVERLAP_EPS ? rest : 0.0;
            x[s] = several & (busy >> s) ? left : x[s];
        }
    }
#pragma GCC unroll 4
    for (int s = 0; s < n; s++) total += x[s];
    return total;
}

// the window over the n inputs of t (any n up to the maximum)
static inline double expr_overlap_apply(const ExprOverlapTable *t, const double in[EXPR_OVERLAP_MAX]) {
    switch (t->n) {
    case 2: return expr_overlap_n(t, 2, in);
    case 3: return expr_overlap_n(t, 3, in);
    default: return expr_overlap_n(t, 4, in);
    }
}

// ceil and floor, bitwise equal to C's, written so that loops over them
// vectorise (GCC vectorises libm's ceil only when the whole file targets
// SSE4.1). For |x| < 2^52, (x + 2^52) - 2^52 is x rounded to the nearest
// integer (doubles in [2^52, 2^53) are spaced 1 apart; default rounding
// mode), then one step moves it up (ceil) or down (floor); the result takes
// the sign of x, as ceil(-0.5) = -0 does. |x| >= 2^52 (already integers),
// inf and NaN give x, picked by a bit mask: a conditional expression there
// would be turned into a branch, which stops vectorisation. Needs IEEE
// arithmetic: no -ffast-math.
static inline double expr_keep_large_(double x, double r) {
    uint64_t xb, rb, ob;
    memcpy(&xb, &x, sizeof xb);
    memcpy(&rb, &r, sizeof rb);
    uint64_t take_x = (uint64_t)0 - (uint64_t)!(fabs(x) < 0x1p52);  // all ones where |x| >= 2^52
    ob = (xb & take_x) | (rb & ~take_x);
    double o;
    memcpy(&o, &ob, sizeof o);
    return o;
}
static inline double expr_ceil1(double x) {
    double shift = copysign(0x1p52, x);
    double r = (x + shift) - shift;
    r += r < x ? 1.0 : 0.0;  // a select between constants: no branch
    return expr_keep_large_(x, copysign(r, x));
}
static inline double expr_floor1(double x) {
    double shift = copysign(0x1p52, x);
    double r = (x + shift) - shift;
    r += r > x ? -1.0 : 0.0;
    return expr_keep_large_(x, copysign(r, x));
}
#endif
