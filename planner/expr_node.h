// Node layout of an expression context, shared by the builder (expr.c) and
// the compiler/evaluator of flat programs (expr_program.c). Not a public API.
#ifndef MIST_EXPR_NODE_H
#define MIST_EXPR_NODE_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "planner/expr.h"

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
    EXPR_OP_COUNT
} ExprOp;

typedef struct {
    int32_t op;        // ExprOp
    Expr a, b, c;      // operands (EXPR_NONE where unused); children have smaller handles
    double value;      // EXPR_OP_NUM only
} ExprNode;

// the context's node array (handles index it); valid until the next constructor call
const ExprNode *expr_ctx_nodes(const ExprCtx *ctx);

// The scalar semantics of every operator. Builder folding, expr_eval and the
// batched loops all use exactly these expressions, so results agree bitwise.
static inline double expr_max2(double a, double b) { return a > b ? a : b; }
static inline double expr_min2(double a, double b) { return a < b ? a : b; }
static inline double expr_select3(double c, double a, double b) { return c > 0 ? a : b; }

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
