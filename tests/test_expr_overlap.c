// The overlap node (ex_overlap, the interference rule of docs/design.md §4):
// folding and hash-consing, scalar evaluation against the rule written out,
// and the compiled program (the batched window's loops) bitwise against
// expr_eval.
// Random inputs use a fresh seed each run (printed); MIST_TEST_SEED=N repeats one.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expr/expr.h"
#include "tests/tap.h"
#include "tests/seeded_rng.h"

// The window rule written out from its definition in expr.h, with the early
// exit of a round that has fewer than two busy streams: the reference.
static double overlap_reference(const double f[16][4], const double in[4]) {
    const double eps = EXPR_OVERLAP_EPS;
    double x[4], total = 0;
    for (int s = 0; s < 4; s++) x[s] = in[s] > eps ? in[s] : 0.0;
    for (;;) {
        int A = 0, members = 0;
        for (int s = 0; s < 4; s++)
            if (x[s] > eps) A |= 1 << s, members++;
        if (members < 2) break;
        double w = INFINITY;
        for (int s = 0; s < 4; s++)
            if ((A >> s) & 1) w = fmin(w, x[s] * f[A][s]);
        total += w;
        for (int s = 0; s < 4; s++)
            if ((A >> s) & 1) x[s] = x[s] * f[A][s] - w > eps ? x[s] - w * (1.0 / f[A][s]) : 0.0;
    }
    for (int s = 0; s < 4; s++) total += x[s];
    return total;
}

static void random_factors(double f[16][4]) {
    for (int A = 0; A < 16; A++)
        for (int s = 0; s < 4; s++) f[A][s] = 1.0 + 2.0 * rng_unit();
}

// a stream's work: often idle, at the threshold or tied with another
static double random_work(double other) {
    switch (rng_int(8)) {
    case 0: return 0.0;
    case 1: return 0.5 * EXPR_OVERLAP_EPS;
    case 2: return other;
    default: return rng_unit() * 1e-2;
    }
}

// What the tests share: the factor tables, the context with the four stream
// symbols, and the overlap nodes built from them.
typedef struct {
    double f[16][4], g[16][4];   // random factors; g differs from f for C with H2D only (set 5)
    ExprCtx *x;
    Expr s[4];                   // the streams c, n, h, d
    Expr pair_in[4], tri_in[4];  // (C, H2D), and (C, N, D2H), whose factors g does not change
    Expr pair, tri, quad;        // the overlaps of pair_in, tri_in and all four streams under f
} Overlaps;

// folding, hash-consing and printing
static void test_folding(Overlaps *o) {
    ExprCtx *x = o->x;
    Expr *s = o->s;
    // folding: constants, idle streams, one stream left
    double kv[4] = {3e-3, 1e-3, 0.0, 2e-3};
    Expr kin[4] = {ex_num(x, kv[0]), ex_num(x, kv[1]), ex_num(x, kv[2]), ex_num(x, kv[3])};
    Expr k = ex_overlap(x, o->f, kin);
    double kval = expr_eval(x, k, NULL);
    ok(same_double(kval, overlap_reference(o->f, kv)), "overlap of constants folds to the rule's value (%.17g)", kval);
    Expr idle[4] = {s[0], ex_num(x, 0.0), EXPR_NONE, ex_num(x, 0.5 * EXPR_OVERLAP_EPS)};
    Expr alone = ex_overlap(x, o->f, idle);
    char buf[256];
    expr_print(x, alone, buf, sizeof buf);
    double v1[4] = {2.5e-3, 0, 0, 0}, v0[4] = {0.5e-12, 0, 0, 0};
    ok(!strstr(buf, "overlap") && expr_eval(x, alone, v1) == 2.5e-3 && expr_eval(x, alone, v0) == 0.0,
       "one busy stream left: its own work (or 0 below the threshold), no overlap node: %s", buf);
    Expr *pair_in = o->pair_in, *tri_in = o->tri_in;
    o->pair = ex_overlap(x, o->f, pair_in);
    Expr tri_cnh[4] = {s[0], s[1], s[2], EXPR_NONE};
    ok(o->pair == ex_overlap(x, o->f, pair_in) && o->pair != ex_overlap(x, o->g, pair_in) &&
       ex_overlap(x, o->g, pair_in) == ex_overlap(x, o->g, pair_in) &&
       ex_overlap(x, o->g, tri_in) == ex_overlap(x, o->f, tri_in) &&
       ex_overlap(x, o->g, tri_cnh) != ex_overlap(x, o->f, tri_cnh),
       "overlap nodes are hash-consed by inputs and the factors of their streams");
    expr_print(x, o->pair, buf, sizeof buf);
    ok(strstr(buf, "overlap#") && strstr(buf, "c") && strstr(buf, "h") && !strstr(buf, ", n"),
       "printed with its table and only its streams: %s", buf);
}

// scalar evaluation against the reference, 2, 3 and 4 streams
static void test_scalar_eval(Overlaps *o) {
    ExprCtx *x = o->x;
    o->tri = ex_overlap(x, o->f, o->tri_in), o->quad = ex_overlap(x, o->f, o->s);
    int bad = 0, trials = 20000;
    for (int t = 0; t < trials; t++) {
        double v[4];
        for (int i = 0; i < 4; i++) v[i] = random_work(i ? v[rng_int(i)] : 0.0);
        double vp[4] = {v[0], 0, v[2], 0}, vt[4] = {v[0], v[1], 0, v[3]};
        bad += !same_double(expr_eval(x, o->quad, v), overlap_reference(o->f, v));
        bad += !same_double(expr_eval(x, o->tri, v), overlap_reference(o->f, vt));
        bad += !same_double(expr_eval(x, o->pair, v), overlap_reference(o->f, vp));
    }
    ok(bad == 0, "expr_eval of overlap nodes == the rule written out, bitwise, %d windows x 3 (%d differ)", trials, bad);
}

// compiled: nested in other operations, a constant stream (a fill), hoisted
// inputs; every lane count of the evaluator
static void test_compiled(Overlaps *o) {
    ExprCtx *x = o->x;
    Expr *s = o->s;
    Expr mixed_in[4] = {ex_mul(x, s[0], ex_num(x, 2)), ex_num(x, 4e-3), ex_add(x, s[2], s[3]), s[1]};
    Expr outs[4] = {o->quad, ex_add(x, ex_overlap(x, o->g, mixed_in), s[0]), o->tri, o->pair};
    ExprProgram *p = expr_compile(x, outs, 4);
    const size_t n = 64 * 6 + 13;
    double *col[4], *out[4], row[4];
    for (int i = 0; i < 4; i++) col[i] = malloc(n * sizeof(double)), out[i] = malloc(n * sizeof(double));
    int mismatches = 0;
    for (int pass = 0; pass < 4; pass++) {
        for (size_t j = 0; j < n; j++)
            for (int i = 0; i < 4; i++) {
                // pass 1: c, n uniform per block; pass 2: all uniform per block; pass 3: a tail of 13
                int uniform = (pass == 1 && i < 2) || pass == 2;
                col[i][j] = uniform && j % 64 ? col[i][j - 1] : random_work(i ? col[rng_int(i)][j] : 0.0);
            }
        size_t m = pass == 3 ? 13 : n;
        expr_program_eval(p, (const double *const *)col, out, m);
        for (size_t j = 0; j < m; j++) {
            for (int i = 0; i < 4; i++) row[i] = col[i][j];
            for (int k = 0; k < 4; k++)
                if (!same_double(out[k][j], expr_eval(x, outs[k], row)) && mismatches++ < 5)
                    diag("overlap pass %d out %d cand %zu: program %.17g scalar %.17g", pass, k, j, out[k][j],
                         expr_eval(x, outs[k], row));
        }
    }
    ok(mismatches == 0, "compiled overlap == expr_eval bitwise (per candidate, hoisted, tail; %d differ)", mismatches);
    expr_program_free(p);
    for (int i = 0; i < 4; i++) free(col[i]), free(out[i]);
}

// clone keeps the tables; bounds: a surely busy stream makes the window positive
static void test_clone_and_bounds(Overlaps *o) {
    ExprCtx *x = o->x;
    ExprCtx *c = expr_ctx_clone(x);
    Expr cs[4] = {ex_sym(c, "c"), ex_sym(c, "n"), ex_sym(c, "h"), ex_sym(c, "d")};
    double v[4] = {3e-3, 1e-3, 2e-3, 4e-3};
    ok(ex_overlap(c, o->f, cs) == o->quad && same_double(expr_eval(c, o->quad, v), expr_eval(x, o->quad, v)),
       "a clone builds the same overlap node under the same handle, same value");
    expr_ctx_free(c);
    int positive = 0;
    expr_lower_bound(x, o->quad, &positive);
    expr_sym_set_bounds(x, "h", 1e-3, 1);
    Expr later = ex_overlap(x, o->g, o->s);
    int positive_later = 0;
    double lo = expr_lower_bound(x, later, &positive_later);
    ok(!positive && positive_later && lo >= 0, "bounds: a window with a surely busy stream is positive");
}

// every stream surely busy: the batched loops take the first round's set as known
static void test_busy_by_bounds(Overlaps *o) {
    ExprCtx *x = o->x;
    const char *names[4] = {"c", "n", "h", "d"};
    for (int i = 0; i < 4; i++) expr_sym_set_bounds(x, names[i], 1e-6, 1);
    Expr busy_outs[2] = {ex_overlap(x, o->f, o->s), ex_overlap(x, o->g, o->tri_in)};
    ExprProgram *p = expr_compile(x, busy_outs, 2);
    const size_t nb = 64 * 3 + 5;
    double *col[4], *out[2], row[4];
    for (int i = 0; i < 4; i++) {
        col[i] = malloc(nb * sizeof(double));
        for (size_t j = 0; j < nb; j++) col[i][j] = rng_int(4) && i ? col[rng_int(i)][j] : 1e-6 + rng_unit() * 1e-2;
    }
    for (int k = 0; k < 2; k++) out[k] = malloc(nb * sizeof(double));
    int mismatches = 0;
    expr_program_eval(p, (const double *const *)col, out, nb);
    for (size_t j = 0; j < nb; j++) {
        for (int i = 0; i < 4; i++) row[i] = col[i][j];
        double vt[4] = {row[0], row[1], 0, row[3]};
        mismatches += !same_double(out[0][j], overlap_reference(o->f, row)) +
                      !same_double(out[1][j], overlap_reference(o->g, vt));
    }
    ok(mismatches == 0, "streams busy by their bounds: compiled == the rule written out, bitwise (%d differ)",
       mismatches);
    expr_program_free(p);
    for (int i = 0; i < 4; i++) free(col[i]);
    for (int k = 0; k < 2; k++) free(out[k]);
}

// the rule's boundary: a stream left with exactly EXPR_OVERLAP_EPS of work after a window is
// dropped (x f - w > eps is false). Unit factors for the pair make y = x, and these two doubles
// differ by exactly 1e-12, so w = a and b's leftover is exactly eps: the window is a, not a + eps.
static void test_eps_boundary(const Overlaps *o) {
    double u[16][4];
    memcpy(u, o->f, sizeof u);
    u[3][0] = u[3][1] = 1.0;
    const double a = 1.6981213134355754e-12, b = 2.6981213134355754e-12;
    ExprCtx *e = expr_ctx_new();
    Expr es[2] = {ex_sym(e, "a"), ex_sym(e, "b")};
    Expr pair_in[4] = {es[0], es[1], EXPR_NONE, EXPR_NONE}, swap_in[4] = {es[1], es[0], EXPR_NONE, EXPR_NONE};
    Expr eo[2] = {ex_overlap(e, u, pair_in), ex_overlap(e, u, swap_in)};
    ExprProgram *ep = expr_compile(e, eo, 2);
    enum { NE = 64 * 2 + 3 };
    static double ca[NE], cb[NE], o0[NE], o1[NE];
    // the pair in even candidates, random work in odd ones (no column is uniform: the batched loops run)
    for (int j = 0; j < NE; j++) ca[j] = j % 2 ? random_work(0.0) : a, cb[j] = j % 2 ? random_work(ca[j]) : b;
    const double *ecols[2] = {ca, cb};
    double *eouts[2] = {o0, o1};
    int wrong = 0;
    double rowv[2] = {a, b};
    wrong += !same_double(expr_eval(e, eo[0], rowv), a);
    expr_program_eval(ep, ecols, eouts, NE);
    for (int j = 0; j < NE; j++) {
        double rj[2] = {ca[j], cb[j]};
        double w0 = j % 2 ? expr_eval(e, eo[0], rj) : a, w1 = j % 2 ? expr_eval(e, eo[1], rj) : a;
        wrong += !same_double(o0[j], w0) + !same_double(o1[j], w1);
    }
    ok(b - a == EXPR_OVERLAP_EPS && wrong == 0,
       "a leftover of exactly EXPR_OVERLAP_EPS is dropped: window(%.17g, %.17g) = %.17g, per candidate "
       "among random ones, compiled and scalar (%d wrong)", a, b, a, wrong);
    expr_program_free(ep);
    expr_ctx_free(e);
}

int main(void) {
    rng_seed();
    static Overlaps o;
    random_factors(o.f);
    memcpy(o.g, o.f, sizeof o.g);
    o.g[5][0] *= 1.5;  // streams 0 and 2 together: the pair
    o.x = expr_ctx_new();
    const char *names[4] = {"c", "n", "h", "d"};
    for (int i = 0; i < 4; i++) o.s[i] = ex_sym(o.x, names[i]);
    Expr pair_in[4] = {o.s[0], EXPR_NONE, o.s[2], ex_num(o.x, 0.0)};
    Expr tri_in[4] = {o.s[0], o.s[1], EXPR_NONE, o.s[3]};  // C, N, D2H: g's change (C with H2D) is not theirs
    memcpy(o.pair_in, pair_in, sizeof pair_in);
    memcpy(o.tri_in, tri_in, sizeof tri_in);
    test_folding(&o);
    test_scalar_eval(&o);
    test_compiled(&o);
    test_clone_and_bounds(&o);
    test_busy_by_bounds(&o);
    test_eps_boundary(&o);
    expr_ctx_free(o.x);
    return tap_done();
}
