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

// f[A][s] for the busy set A grown by streams t, t-1, .., 0 (each may-busy
// one either in or out); 0 when fewer than two streams are busy. A set of
// more than max_busy streams cannot occur in the round: such a branch is
// left out (the test on t would always pick the other side). The tree
// tests the host-copy streams first and compute last: in a search's batch
// the compute and collective streams usually depend only on symbols that
// are constant over the batch, so the subtrees under the host-copy tests
// are hoisted out of the per-candidate work as a whole.
static Expr slowdown_tree(ExprCtx *x, const HwProfile *p, const Expr busy[STREAM_COUNT],
                          const int may_be_busy[STREAM_COUNT], int max_busy, int s, int t, unsigned A) {
    if (t < 0) return ex_num(x, __builtin_popcount(A) >= 2 ? p->slowdown[A][s] : 0.0);
    Expr out = slowdown_tree(x, p, busy, may_be_busy, max_busy, s, t - 1, A);
    if (t == s || !may_be_busy[t] || __builtin_popcount(A) + 1 > max_busy) return out;
    Expr in = slowdown_tree(x, p, busy, may_be_busy, max_busy, s, t - 1, A | STREAM_MASK(t));
    return ex_select(x, busy[t], in, out);  // equal branches fold to one
}

// Two streams a < b that may be busy, rem = their work (0 if <= eps): the
// one round of the rule below written out. Both busy (min > eps): the window
// w = min(ra fa, rb fb) with the pair's constant factors, each keeps
// r - w/f if r f - w > eps, else finishes; total w + rest_a + rest_b. Else no
// window: ra + rb. The same operations in the same order as the general
// unrolling, so the same value bitwise, in 18 instead of 27 instructions.
static Expr overlap_pair(ExprCtx *x, const HwProfile *p, const Expr rem[STREAM_COUNT],
                         const int may_be_busy[STREAM_COUNT]) {
    int ab[2], k = 0;
    for (int s = 0; s < STREAM_COUNT; s++)
        if (may_be_busy[s]) ab[k++] = s;
    unsigned A = STREAM_MASK(ab[0]) | STREAM_MASK(ab[1]);
    Expr zero = ex_num(x, 0), eps = ex_num(x, OVERLAP_EPS);
    Expr scaled[2], rest[2];
    for (int i = 0; i < 2; i++) scaled[i] = ex_mul(x, rem[ab[i]], ex_num(x, p->slowdown[A][ab[i]]));
    Expr w = ex_min(x, scaled[0], scaled[1]);
    for (int i = 0; i < 2; i++) {
        Expr left = ex_sub(x, scaled[i], w);
        rest[i] = ex_select(x, ex_sub(x, left, eps),
                            ex_sub(x, rem[ab[i]], ex_div(x, w, ex_num(x, p->slowdown[A][ab[i]]))), zero);
    }
    Expr both = ex_add(x, ex_add(x, w, rest[0]), rest[1]);
    Expr alone = ex_add(x, rem[ab[0]], rem[ab[1]]);
    return ex_select(x, ex_sub(x, ex_min(x, rem[ab[0]], rem[ab[1]]), eps), both, alone);
}

Expr overlap_expr(ExprCtx *x, const HwProfile *p, const Expr in[STREAM_COUNT]) {
    Expr zero = ex_num(x, 0);
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
    if (candidates == 2) return overlap_pair(x, p, rem, may_be_busy);
    for (int round = 0; round < candidates - 1; round++) {
        // at most candidates - round streams are still busy (or just one)
        int max_busy = candidates - round;
        Expr busy[STREAM_COUNT];
        for (int s = 0; s < STREAM_COUNT; s++) busy[s] = may_be_busy[s] ? busy_indicator(x, rem[s]) : zero;
        // slowdown of stream s under the exact busy set A: f[A][s] when s is
        // busy and |A| >= 2, else 0; a decision tree of selects on the other
        // streams' busy flags picks the constant
        Expr factor[STREAM_COUNT];
        for (int s = 0; s < STREAM_COUNT; s++)
            factor[s] = may_be_busy[s]
                      ? ex_select(x, busy[s], slowdown_tree(x, p, busy, may_be_busy, max_busy, s, STREAM_COUNT - 1, STREAM_MASK(s)), zero)
                      : zero;
        // w = min over overlapped streams of rem*f (a stream not busy, or a
        // lone busy stream, has factor 0 and counts as the 1e300 sentinel;
        // with no stream overlapped the min is the sentinel and w is clamped
        // to 0: no window this round)
        Expr w = EXPR_NONE;
        for (int s = 0; s < STREAM_COUNT; s++) {
            if (!may_be_busy[s]) continue;
            Expr scaled = ex_select(x, factor[s], ex_mul(x, rem[s], factor[s]), ex_num(x, 1e300));
            w = w != EXPR_NONE ? ex_min(x, w, scaled) : scaled;
        }
        w = ex_select(x, ex_sub(x, ex_num(x, 1e299), w), w, zero);
        total = ex_add(x, total, w);
        for (int s = 0; s < STREAM_COUNT; s++) {
            if (!may_be_busy[s]) continue;
            // rem*f - w > eps: still busy after the window, lose w/f (factor
            // >= 1 there; elsewhere the quotient is not selected); overlapped
            // and not left (the stream that sets the window): finished; not
            // overlapped (factor 0: left = -w <= 0): unchanged
            Expr left = ex_sub(x, ex_mul(x, rem[s], factor[s]), w);
            rem[s] = ex_select(x, ex_sub(x, left, ex_num(x, OVERLAP_EPS)), ex_sub(x, rem[s], ex_div(x, w, factor[s])),
                               ex_select(x, factor[s], zero, rem[s]));
        }
    }
    for (int s = 0; s < STREAM_COUNT; s++) total = ex_add(x, total, rem[s]);
    return total;
}
