// The overlap (interference) rule of DESIGN.md §4: how long a window takes in
// which compute (C), collectives (N), host->device (H2D) and device->host
// (D2H) work run at once, each slowed by the others.
//
// Window algorithm: let A be the set of streams with work left. While |A| >= 2,
// every stream s in A runs f[A][s] times slower, so the first to finish does
// so after w = min_{s in A} x_s * f[A][s]; advance all of A by w (each loses
// w / f[A][s] of its work), add w to the total, and repeat on the streams
// left. The last stream then runs alone. With f = 1 the result is max(x); with
// f[A][s] = |A| (one shared engine) it is sum(x).
//
// The scalar and the symbolic form below compute the same thing; the symbolic
// one unrolls the at most three rounds with selects on "stream s still busy".
#include <math.h>
#include "planner/cost.h"
#include "planner/expr_node.h"

// A stream whose remaining work is below this counts as finished.
#define OVERLAP_EPS 1e-12

double overlap_seconds(const HwProfile *p, const double in[STREAM_COUNT]) {
    double x[STREAM_COUNT], total = 0;
    for (int s = 0; s < STREAM_COUNT; s++) x[s] = in[s] > OVERLAP_EPS ? in[s] : 0.0;
    for (int round = 0; round < STREAM_COUNT - 1; round++) {
        unsigned busy = 0;
        for (int s = 0; s < STREAM_COUNT; s++)
            if (x[s] > OVERLAP_EPS) busy |= STREAM_MASK(s);
        if (__builtin_popcount(busy) < 2) break;
        double w = INFINITY;
        for (int s = 0; s < STREAM_COUNT; s++)
            if (busy & STREAM_MASK(s)) w = fmin(w, x[s] * p->slowdown[busy][s]);
        total += w;
        for (int s = 0; s < STREAM_COUNT; s++)
            if (busy & STREAM_MASK(s)) {
                double f = p->slowdown[busy][s];
                // the stream(s) that set the window finish exactly
                x[s] = x[s] * f - w > OVERLAP_EPS ? x[s] - w / f : 0.0;
            }
    }
    for (int s = 0; s < STREAM_COUNT; s++) total += x[s];
    return total;
}

// 1 if e > OVERLAP_EPS else 0
static Expr busy_indicator(ExprCtx *x, Expr e) {
    return ex_select(x, ex_sub(x, e, ex_num(x, OVERLAP_EPS)), ex_num(x, 1), ex_num(x, 0));
}

// 1 when e is a constant no stream could count as work (<= OVERLAP_EPS): a
// stream folded to 0 at build time, e.g. weight gathers under ZeRO-0 or host
// copies of a specialised model without offload
static int constant_idle(ExprCtx *x, Expr e) {
    const ExprNode *n = &expr_ctx_nodes(x)[e];
    return n->op == EXPR_OP_NUM && n->value <= OVERLAP_EPS;
}

// f[A][s] for the busy set A grown by streams t.. (each may-busy one either
// in or out); 0 when fewer than two streams are busy
static Expr slowdown_tree(ExprCtx *x, const HwProfile *p, const Expr busy[STREAM_COUNT],
                          const int may_be_busy[STREAM_COUNT], int s, int t, unsigned A) {
    if (t == STREAM_COUNT) return ex_num(x, __builtin_popcount(A) >= 2 ? p->slowdown[A][s] : 0.0);
    if (t == s || !may_be_busy[t]) return slowdown_tree(x, p, busy, may_be_busy, s, t + 1, A);
    Expr in = slowdown_tree(x, p, busy, may_be_busy, s, t + 1, A | STREAM_MASK(t));
    Expr out = slowdown_tree(x, p, busy, may_be_busy, s, t + 1, A);
    return ex_select(x, busy[t], in, out);  // equal branches fold to one
}

Expr overlap_expr(ExprCtx *x, const HwProfile *p, const Expr in[STREAM_COUNT]) {
    Expr zero = ex_num(x, 0), one = ex_num(x, 1);
    Expr rem[STREAM_COUNT];
    int may_be_busy[STREAM_COUNT];  // idle streams drop out of the unrolled rounds
    for (int s = 0; s < STREAM_COUNT; s++) {
        // callers pass EXPR_NONE for a stream with no work; a constant 0 is the same
        may_be_busy[s] = in[s] != EXPR_NONE && !constant_idle(x, in[s]);
        rem[s] = may_be_busy[s] ? in[s] : zero;
        if (may_be_busy[s]) rem[s] = ex_select(x, ex_sub(x, rem[s], ex_num(x, OVERLAP_EPS)), rem[s], zero);
    }
    Expr total = zero;
    // every round with two or more busy streams finishes at least the one that
    // sets the window (its rem*f - w is exactly 0), so k streams that may be
    // busy need at most k - 1 rounds
    int candidates = 0;
    for (int s = 0; s < STREAM_COUNT; s++) candidates += may_be_busy[s];
    for (int round = 0; round < candidates - 1; round++) {
        Expr busy[STREAM_COUNT];
        for (int s = 0; s < STREAM_COUNT; s++) busy[s] = may_be_busy[s] ? busy_indicator(x, rem[s]) : zero;
        // slowdown of stream s under the exact busy set A: f[A][s] when s is
        // busy and |A| >= 2, else 0; a decision tree of selects on the other
        // streams' busy flags picks the constant
        Expr factor[STREAM_COUNT];
        for (int s = 0; s < STREAM_COUNT; s++)
            factor[s] = may_be_busy[s]
                      ? ex_select(x, busy[s], slowdown_tree(x, p, busy, may_be_busy, s, 0, STREAM_MASK(s)), zero)
                      : zero;
        // w = min over busy streams of rem*f (a stream not busy, or a lone
        // busy stream, has factor 0, so the min is 0: no window this round)
        Expr w = EXPR_NONE;
        for (int s = 0; s < STREAM_COUNT; s++) {
            if (!may_be_busy[s]) continue;
            Expr scaled = ex_select(x, busy[s], ex_mul(x, rem[s], factor[s]), ex_num(x, 1e300));
            w = w != EXPR_NONE ? ex_min(x, w, scaled) : scaled;
        }
        // when nothing is busy every term is the 1e300 sentinel: clamp to 0
        w = ex_select(x, ex_sub(x, ex_num(x, 1e299), w), w, zero);
        total = ex_add(x, total, w);
        for (int s = 0; s < STREAM_COUNT; s++) {
            if (!may_be_busy[s]) continue;
            Expr left = ex_sub(x, ex_mul(x, rem[s], factor[s]), w);
            Expr f_safe = ex_max(x, factor[s], one);
            // still busy after the window: lose w/f; set the window (and
            // overlapped): finished; not overlapped this round: unchanged
            rem[s] = ex_select(x, ex_mul(x, busy[s], ex_sub(x, left, ex_num(x, OVERLAP_EPS))),
                               ex_sub(x, rem[s], ex_div(x, w, f_safe)), ex_select(x, factor[s], zero, rem[s]));
        }
    }
    for (int s = 0; s < STREAM_COUNT; s++) total = ex_add(x, total, rem[s]);
    return total;
}
