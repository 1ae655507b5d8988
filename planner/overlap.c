// The overlap (interference) rule of docs/design.md §4: how long a window takes in
// which compute (C), collectives (N), host->device (H2D) and device->host
// (D2H) work run at once, each slowed by the others.
//
// Window algorithm: let A be the set of streams with work left. While |A| >= 2,
// every stream s in A runs f[A][s] times slower, so the first to finish does
// so after w = min_{s in A} x_s * f[A][s]; advance all of A by w (each loses
// w * (1 / f[A][s]) of its work: the reciprocal is what the engine keeps, so
// the batched loops multiply instead of dividing), add w to the total, and
// repeat on the streams left. The last stream then runs alone. With f = 1 the result is max(x); with
// f[A][s] = |A| (one shared engine) it is sum(x).
//
// The scalar form below is the reference; the symbolic form is one node of
// the expression engine (ex_overlap, expr/expr.h) whose kernel runs the
// same operations in the same order, so the two agree bitwise.
#include <math.h>
#include "planner/cost_terms.h"

// A stream whose remaining work is below this counts as finished (the
// engine's threshold: the scalar and the symbolic rule agree on it).
#define OVERLAP_EPS EXPR_OVERLAP_EPS

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
                x[s] = x[s] * f - w > OVERLAP_EPS ? x[s] - w * (1.0 / f) : 0.0;
            }
    }
    for (int s = 0; s < STREAM_COUNT; s++) total += x[s];
    return total;
}

// One node of the expression engine (ex_overlap) runs the same rule per
// candidate, with the profile's factors copied into the context: the profile
// is fixed when a stage model is built.
Expr overlap_expr(ExprCtx *x, const HwProfile *p, const Expr in[STREAM_COUNT]) {
    _Static_assert(STREAM_COUNT <= EXPR_OVERLAP_MAX && STREAM_SUBSETS <= EXPR_OVERLAP_SUBSETS,
                   "the engine's overlap node covers every stream");
    double factor[EXPR_OVERLAP_SUBSETS][EXPR_OVERLAP_MAX];
    Expr streams[EXPR_OVERLAP_MAX];
    for (unsigned m = 0; m < EXPR_OVERLAP_SUBSETS; m++)
        for (int s = 0; s < EXPR_OVERLAP_MAX; s++)
            factor[m][s] = m < STREAM_SUBSETS && s < STREAM_COUNT ? p->slowdown[m][s] : 1.0;
    for (int s = 0; s < EXPR_OVERLAP_MAX; s++) streams[s] = s < STREAM_COUNT ? in[s] : EXPR_NONE;
    return ex_overlap(x, factor, streams);
}
