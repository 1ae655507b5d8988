// Symbolic expressions: operators, construction-time simplification,
// hash-consing, printing, and batched program evaluation against scalar
// evaluation and against an unsimplified reference on random expressions.
// Random parts use a fresh seed each run (printed); MIST_TEST_SEED=N repeats one.
// The overlap node has its own program, tests/test_expr_overlap.c.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expr/expr.h"
#include "tests/tap.h"
#include "tests/seeded_rng.h"

#include "tests/expr_parse.h"

// ---- unsimplified reference: the same random expressions as plain trees

enum { R_NUM, R_SYM, R_ADD, R_SUB, R_MUL, R_DIV, R_MAX, R_MIN, R_CEIL, R_FLOOR, R_SELECT };
typedef struct {
    int op, a, b, c;  // operands index earlier pool entries
    double v;         // R_NUM value, R_SYM index
} RefNode;

// Gathering constants re-associates sums and products, which moves results
// by an ulp; ceil/floor of a value within rounding of an integer, or select
// on a condition within rounding of 0, turns that into a jump. Such values
// are "fragile" and excluded from the reference comparison (counted).
// Values built from constants and rounded values by +, -, *, max, min are
// exact in both orders (small dyadic numbers), so they are never fragile.
static int near_integer(double v) { return fabs(v - nearbyint(v)) <= 1e-9 * (1 + fabs(v)); }

static int ref_exact(const RefNode *r, const double *val, const unsigned char *exact) {
    switch (r->op) {
    case R_NUM:
    case R_CEIL:
    case R_FLOOR: return 1;
    case R_SYM:
    case R_DIV: return 0;
    case R_SELECT: return val[r->a] > 0 ? exact[r->b] : exact[r->c];
    case R_MAX: return val[r->a] > val[r->b] ? exact[r->a] : exact[r->b];  // the operand chosen
    case R_MIN: return val[r->a] < val[r->b] ? exact[r->a] : exact[r->b];
    default: return exact[r->a] && exact[r->b];
    }
}

static int ref_fragile(const RefNode *r, const double *val, const unsigned char *fragile,
                       const unsigned char *exact) {
    switch (r->op) {
    case R_NUM:
    case R_SYM: return 0;
    case R_CEIL:
    case R_FLOOR: return fragile[r->a] || (!exact[r->a] && near_integer(val[r->a]));
    case R_SELECT:
        return fragile[r->a] || (!exact[r->a] && fabs(val[r->a]) <= 1e-9 * (1 + fabs(val[r->b]))) ||
               (val[r->a] > 0 ? fragile[r->b] : fragile[r->c]);
    default: return fragile[r->a] || fragile[r->b];
    }
}

static double ref_apply(const RefNode *r, const double *val, const double *syms) {
    switch (r->op) {
    case R_NUM: return r->v;
    case R_SYM: return syms[(int)r->v];
    case R_ADD: return val[r->a] + val[r->b];
    case R_SUB: return val[r->a] - val[r->b];
    case R_MUL: return val[r->a] * val[r->b];
    case R_DIV: return val[r->a] / val[r->b];
    case R_MAX: return val[r->a] > val[r->b] ? val[r->a] : val[r->b];
    case R_MIN: return val[r->a] < val[r->b] ? val[r->a] : val[r->b];
    case R_CEIL: return ceil(val[r->a]);
    case R_FLOOR: return floor(val[r->a]);
    default: return val[r->a] > 0 ? val[r->b] : val[r->c];
    }
}

#define NSYM 6
#define POOL 160
typedef struct {
    Expr e[POOL];
    RefNode ref[POOL];
    int n;
} Pool;

static int push(Pool *pl, Expr e, RefNode r) {
    pl->e[pl->n] = e;
    pl->ref[pl->n] = r;
    return pl->n++;
}

// a random earlier entry, among the last `recent` ones (0: any); tame pools
// skip select conditions (the only subtractions there), which can be negative
static int pick(const Pool *pl, int tame, int recent) {
    for (;;) {
        int i = recent ? pl->n - 1 - rng_int(pl->n < recent ? pl->n : recent) : rng_int(pl->n);
        if (!tame || pl->ref[i].op != R_SUB) return i;
    }
}

// Random DAG of expressions. tame: values stay positive and away from
// divisions by zero, and constants keep products exact, so the simplified
// graph must match the unsimplified reference to rounding. wild: any signs,
// subtractions and divisions (only scalar vs batched is compared).
static void build_pool(ExprCtx *x, Pool *pl, int tame) {
    static const double tame_consts[] = {0, 0.5, 1, 2, 3, 1.5, 0.25, 4};
    static const double wild_consts[] = {0, 1, -1, 2, -0.5, 3.75, 1e6, -7};
    const char *names[NSYM] = {"b", "s", "h", "tp", "dp", "ckpt"};
    pl->n = 0;
    for (int i = 0; i < NSYM; i++) push(pl, ex_sym(x, names[i]), (RefNode){R_SYM, 0, 0, 0, i});
    for (int i = 0; i < 8; i++) {
        double v = tame ? tame_consts[i] : wild_consts[i];
        push(pl, ex_num(x, v), (RefNode){R_NUM, 0, 0, 0, v});
    }
    while (pl->n < POOL) {
        // prefer recent entries so trees get deep, but reuse old ones too (sharing)
        int a = pick(pl, tame, 24), b = rng_int(2) ? pick(pl, tame, 12) : pick(pl, tame, 0);
        int op = R_ADD + rng_int(9);
        if (tame && op == R_SUB) op = R_ADD;
        Expr ea = pl->e[a], eb = pl->e[b], e;
        RefNode r = {op, a, b, 0, 0};
        switch (op) {
        case R_ADD: e = ex_add(x, ea, eb); break;
        case R_SUB: e = ex_sub(x, ea, eb); break;
        case R_MUL: e = ex_mul(x, ea, eb); break;
        case R_DIV:
            if (tame) {  // a / (b + 1): b >= 0 keeps the divisor >= 1
                int one = 6 + 2;  // the constant 1 of tame_consts
                int bp1 = push(pl, ex_add(x, eb, pl->e[one]), (RefNode){R_ADD, b, one, 0, 0});
                if (pl->n >= POOL) return;
                r.b = bp1;
                e = ex_div(x, ea, pl->e[bp1]);
            } else {
                e = ex_div(x, ea, eb);
            }
            break;
        case R_MAX: e = ex_max(x, ea, eb); break;
        case R_MIN: e = ex_min(x, ea, eb); break;
        case R_CEIL: e = ex_ceil(x, ea); break;
        case R_FLOOR: e = ex_floor(x, ea); break;
        default: {  // select(a - t, b, c) with a threshold t unlikely to be hit exactly
            double t = 0.5 + 3 * rng_unit();
            int tn = push(pl, ex_num(x, t), (RefNode){R_NUM, 0, 0, 0, t});
            if (pl->n >= POOL) return;
            int cond = push(pl, ex_sub(x, ea, pl->e[tn]), (RefNode){R_SUB, a, tn, 0, 0});
            if (pl->n >= POOL) return;
            int c = pick(pl, tame, 0);
            r = (RefNode){R_SELECT, cond, b, c, 0};
            e = ex_select(x, pl->e[cond], eb, pl->e[c]);
        }
        }
        push(pl, e, r);
    }
}

// ---- the tests

static Expr X, Y, Z;

static void test_operators(ExprCtx *x) {
    double v[3] = {7.5, -2.25, 3.0};  // x, y, z
    double xv = v[0], yv = v[1];
    ok(expr_eval(x, ex_add(x, X, Y), v) == xv + yv, "add");
    ok(expr_eval(x, ex_sub(x, X, Y), v) == xv - yv, "sub");
    ok(expr_eval(x, ex_mul(x, X, Y), v) == xv * yv, "mul");
    ok(expr_eval(x, ex_div(x, X, Y), v) == xv / yv, "div");
    ok(expr_eval(x, ex_max(x, X, Y), v) == 7.5 && expr_eval(x, ex_max(x, Y, X), v) == 7.5, "max");
    ok(expr_eval(x, ex_min(x, X, Y), v) == -2.25 && expr_eval(x, ex_min(x, Y, X), v) == -2.25, "min");
    ok(expr_eval(x, ex_ceil(x, X), v) == 8.0 && expr_eval(x, ex_ceil(x, Y), v) == -2.0, "ceil rounds up, also negatives");
    ok(expr_eval(x, ex_floor(x, X), v) == 7.0 && expr_eval(x, ex_floor(x, Y), v) == -3.0, "floor rounds down, also negatives");
    ok(expr_eval(x, ex_select(x, X, Y, Z), v) == -2.25 && expr_eval(x, ex_select(x, Y, X, Z), v) == 3.0,
       "select picks a when cond > 0, else b");
    double w[3] = {0.0, 1.0, 2.0};
    ok(expr_eval(x, ex_select(x, X, Y, Z), w) == 2.0, "select with cond == 0 picks b");
    Expr terms[3] = {X, Y, Z};
    ok(expr_eval(x, ex_sum(x, terms, 3), v) == (xv + yv) + 3.0, "sum of three terms");
    ok(ex_sum(x, terms, 0) == ex_num(x, 0.0), "empty sum is 0");
    ok(expr_eval(x, ex_num(x, 2.5), v) == 2.5, "constant");
    ok(expr_eval(x, ex_div(x, ex_num(x, 1.0), ex_num(x, 3.0)), v) == 1.0 / 3.0, "folded division is IEEE division");
    ok(expr_eval(x, ex_ceil(x, ex_num(x, -0.5)), v) == 0.0 && expr_eval(x, ex_floor(x, ex_num(x, -0.5)), v) == -1.0,
       "folded ceil/floor");
}

// ceil/floor (scalar and batched) bitwise equal to libm's, over magnitudes
// from 2^-10 to 2^60, half-integers, integers, signed zeros and infinities
static void test_rounding_exact(ExprCtx *x) {
    enum { M = 20000 };
    double *in = malloc(M * sizeof *in), *oc = malloc(M * sizeof *oc), *of = malloc(M * sizeof *of);
    const double special[] = {0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 1.0, -1.0, 0x1p52, -0x1p52,
                              0x1p52 - 0.5, -(0x1p52 - 0.5), 0x1p53 + 2, 1e300, -1e300, INFINITY, -INFINITY,
                              0.49999999999999994, -0.49999999999999994, 4503599627370495.5};
    int nspecial = (int)(sizeof special / sizeof special[0]);
    for (int i = 0; i < M; i++) {
        if (i < nspecial) in[i] = special[i];
        else if (i % 3 == 0) in[i] = (double)(rng_int(2001) - 1000) / 2;  // halves and integers
        else in[i] = (rng_unit() - 0.5) * ldexp(1.0, rng_int(71) - 10);
    }
    Expr outs[2] = {ex_ceil(x, X), ex_floor(x, X)};
    ExprProgram *p = expr_compile(x, outs, 2);
    const double *cols[3] = {in, in, in};
    double *outc[2] = {oc, of};
    expr_program_eval(p, cols, outc, M);
    int bad_batch = 0, bad_scalar = 0;
    for (int i = 0; i < M; i++) {
        bad_batch += !same_double(oc[i], ceil(in[i])) || !same_double(of[i], floor(in[i]));
        if (i < 3000) {
            double v[3] = {in[i], 0, 0};
            bad_scalar += !same_double(expr_eval(x, outs[0], v), ceil(in[i])) ||
                          !same_double(expr_eval(x, outs[1], v), floor(in[i]));
        }
    }
    ok(bad_batch == 0, "batched ceil/floor bitwise equal to libm on %d values (%d differ)", M, bad_batch);
    ok(bad_scalar == 0, "scalar ceil/floor bitwise equal to libm on 3000 values (%d differ)", bad_scalar);
    expr_program_free(p);
    free(in);
    free(oc);
    free(of);
}

static void test_simplification(ExprCtx *x) {
    Expr zero = ex_num(x, 0.0), one = ex_num(x, 1.0);
    ok(ex_add(x, ex_num(x, 2), ex_num(x, 3)) == ex_num(x, 5), "2 + 3 folds to 5");
    ok(ex_mul(x, ex_num(x, 2), ex_num(x, 3.5)) == ex_num(x, 7), "2 * 3.5 folds to 7");
    ok(ex_max(x, ex_num(x, 2), ex_num(x, 3)) == ex_num(x, 3) && ex_min(x, ex_num(x, 2), ex_num(x, 3)) == ex_num(x, 2),
       "max/min of constants fold");
    ok(ex_add(x, X, zero) == X && ex_add(x, zero, X) == X, "x + 0 = 0 + x = x");
    ok(ex_mul(x, X, one) == X && ex_mul(x, one, X) == X, "x * 1 = 1 * x = x");
    ok(ex_mul(x, X, zero) == zero && ex_mul(x, zero, X) == zero, "x * 0 = 0");
    ok(ex_sub(x, X, X) == zero, "x - x = 0");
    ok(ex_sub(x, X, zero) == X, "x - 0 = x");
    ok(ex_div(x, X, one) == X, "x / 1 = x");
    ok(ex_div(x, one, X) != X && ex_div(x, X, ex_num(x, 2)) != X, "x / 2 and 1 / x stay divisions");
    ok(ex_max(x, X, X) == X && ex_min(x, Y, Y) == Y, "max(x,x) = x, min(y,y) = y");
    ok(ex_mul(x, X, Y) == ex_mul(x, Y, X), "a*b and b*a are one node");
    ok(ex_add(x, X, Y) == ex_add(x, Y, X), "a+b and b+a are one node");
    ok(ex_max(x, X, Y) == ex_max(x, Y, X) && ex_min(x, X, Y) == ex_min(x, Y, X), "max/min operand order canonical");
    ok(ex_sub(x, X, Y) != ex_sub(x, Y, X), "x - y and y - x differ");
    Expr six_x = ex_mul(x, X, ex_num(x, 6));
    ok(ex_mul(x, ex_num(x, 2), ex_mul(x, ex_num(x, 3), X)) == six_x, "2*(3*x) = 6*x");
    ok(ex_mul(x, ex_mul(x, X, ex_num(x, 2)), ex_mul(x, Y, ex_num(x, 3))) ==
           ex_mul(x, ex_mul(x, X, Y), ex_num(x, 6)),
       "(2x)(3y) = (x*y)*6");
    ok(ex_add(x, ex_add(x, X, ex_num(x, 1)), ex_num(x, 2)) == ex_add(x, X, ex_num(x, 3)), "(x+1)+2 = x+3");
    ok(ex_add(x, ex_add(x, X, ex_num(x, 1)), Y) == ex_add(x, ex_add(x, X, Y), ex_num(x, 1)), "(x+1)+y = (x+y)+1");
    ok(ex_sub(x, X, ex_num(x, 3)) == ex_add(x, X, ex_num(x, -3)), "x - 3 = x + (-3)");
    ok(ex_sub(x, ex_add(x, X, ex_num(x, 3)), ex_num(x, 3)) == X, "(x+3)-3 = x");
    ok(ex_max(x, ex_max(x, X, ex_num(x, 2)), ex_num(x, 5)) == ex_max(x, X, ex_num(x, 5)), "max(max(x,2),5) = max(x,5)");
    ok(ex_max(x, ex_max(x, X, Y), X) == ex_max(x, X, Y), "max(max(x,y),x) = max(x,y)");
    ok(ex_ceil(x, ex_ceil(x, X)) == ex_ceil(x, X) && ex_floor(x, ex_ceil(x, X)) == ex_ceil(x, X),
       "rounding a rounded value is itself");
    ok(ex_select(x, one, X, Y) == X && ex_select(x, zero, X, Y) == Y && ex_select(x, ex_num(x, -1), X, Y) == Y,
       "select with a constant condition");
    ok(ex_select(x, Z, X, X) == X, "select with equal branches");
    Expr flag = ex_select(x, Z, one, zero), nflag = ex_select(x, Z, zero, ex_num(x, 2));
    ok(ex_select(x, flag, X, Y) == ex_select(x, Z, X, Y) && ex_select(x, nflag, X, Y) == ex_select(x, Z, Y, X),
       "a flag select(z, 1, 0) as a condition tests z itself (select(z, 0, 2): branches swapped)");
    int flags_ok = 1;
    const double zs[] = {-1, -0.0, 0.0, 1e-300, 2, NAN, -INFINITY};
    for (int i = 0; i < 7; i++) {
        double v[3] = {5, 7, zs[i]};
        double inner = zs[i] > 0 ? 0.0 : 2.0, want = inner > 0 ? 5 : 7;
        flags_ok &= expr_eval(x, ex_select(x, nflag, X, Y), v) == want;
    }
    ok(flags_ok, "the rewritten flag select picks the same branch for negative, zero, positive and NaN conditions");
    // like terms: opt-in (exact for integer values only)
    Expr two_x = ex_mul(x, X, ex_num(x, 2)), three_x = ex_mul(x, X, ex_num(x, 3));
    ok(ex_add(x, two_x, three_x) != ex_mul(x, X, ex_num(x, 5)), "like terms stay apart by default");
    expr_ctx_set_merge_like_terms(x, 1);
    ok(ex_add(x, two_x, three_x) == ex_mul(x, X, ex_num(x, 5)), "merging on: 2x + 3x = 5x");
    Expr xy = ex_mul(x, X, Y);
    Expr lhs = ex_add(x, ex_mul(x, ex_add(x, xy, ex_num(x, 1)), ex_num(x, 2)), ex_mul(x, xy, ex_num(x, 4)));
    ok(lhs == ex_add(x, ex_mul(x, xy, ex_num(x, 6)), ex_num(x, 2)), "merging on: (xy + 1)*2 + xy*4 = xy*6 + 2");
    Expr cancel = ex_add(x, ex_add(x, Y, two_x), ex_mul(x, X, ex_num(x, -2)));
    ok(cancel == Y, "merging on: y + 2x - 2x = y");
    double iv[3] = {12345, 678, 9};
    ok(expr_eval(x, lhs, iv) == (12345.0 * 678 + 1) * 2 + 12345.0 * 678 * 4, "merged integer sum is exact");
    expr_ctx_set_merge_like_terms(x, 0);
    ok(ex_num(x, 0.0) != ex_num(x, -0.0), "0 and -0 are distinct constants");
}

static void test_hash_consing(ExprCtx *x) {
    Expr s = ex_sym(x, "s"), h = ex_sym(x, "h");
    Expr e1 = ex_max(x, ex_div(x, ex_mul(x, ex_mul(x, s, h), ex_num(x, 24)), ex_num(x, 1e12)),
                     ex_ceil(x, ex_div(x, h, X)));
    size_t nodes = expr_ctx_num_nodes(x);
    Expr e2 = ex_max(x, ex_ceil(x, ex_div(x, h, X)),
                     ex_div(x, ex_mul(x, ex_num(x, 24), ex_mul(x, h, s)), ex_num(x, 1e12)));
    ok(e1 == e2, "the same expression built twice (operands swapped) is one node");
    ok(expr_ctx_num_nodes(x) == nodes, "building it again allocates no node (%zu)", nodes);
    ok(ex_sym(x, "s") == s && expr_sym_index(x, "s") == 3 && expr_sym_index(x, "h") == 4,
       "symbols numbered in creation order, same name same node");
    ok(expr_sym_index(x, "nope") == -1 && expr_num_syms(x) == 5 && !strcmp(expr_sym_name(x, 4), "h") &&
           expr_sym_name(x, 5) == NULL,
       "symbol lookup by name and index");
}

static void test_print(ExprCtx *x) {
    char buf[256];
    Expr e = ex_add(x, ex_mul(x, ex_sub(x, X, Y), ex_num(x, 2)), ex_num(x, -1));
    expr_print(x, e, buf, sizeof buf);
    ok(!strcmp(buf, "(x - y) * 2 - 1"), "print keeps needed parentheses only: '%s'", buf);
    Expr ce = ex_ceil(x, ex_div(x, X, Z));  // older than the select: printed first
    expr_print(x, ex_max(x, ex_select(x, Y, X, ex_num(x, 0.5)), ce), buf, sizeof buf);
    ok(!strcmp(buf, "max(ceil(x / z), select(y, x, 0.5))"), "print calls: '%s'", buf);
    char small[6];
    int len = expr_print(x, e, small, sizeof small);
    ok(len == (int)strlen("(x - y) * 2 - 1") && !strcmp(small, "(x - "), "print truncates and returns the full length");
    int err;
    ok(parse(x, buf, &err) == ex_max(x, ex_ceil(x, ex_div(x, X, Z)), ex_select(x, Y, X, ex_num(x, 0.5))) && !err,
       "printed text parses back to the same node");
}

static void test_program_basics(ExprCtx *x) {
    Expr xy = ex_mul(x, X, Y);
    Expr outs[4] = {ex_add(x, xy, ex_num(x, 1)), ex_add(x, xy, ex_num(x, 2)), Z, ex_num(x, 4)};
    ExprProgram *p = expr_compile(x, outs, 4);
    ok(expr_program_num_instructions(p) == 3, "x*y shared by two outputs: 3 instructions (got %d)",
       expr_program_num_instructions(p));
    double xs[5] = {1, 2, 3, 4, 5}, ys[5] = {0.5, 0.5, 2, -1, 10}, zs[5] = {9, 8, 7, 6, 5};
    double o[4][5];
    const double *cols[3] = {xs, ys, zs};
    double *outc[4] = {o[0], o[1], o[2], o[3]};
    expr_program_eval(p, cols, outc, 5);
    int good = 1;
    for (int j = 0; j < 5; j++)
        good &= o[0][j] == xs[j] * ys[j] + 1 && o[1][j] == xs[j] * ys[j] + 2 && o[2][j] == zs[j] && o[3][j] == 4;
    ok(good, "program outputs: computed, a symbol, a constant (5 candidates, partial block)");
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 5; j++) o[k][j] = -12345.0;  // a value no output can take
    expr_program_eval(p, cols, outc, 0);
    int untouched = 1;
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 5; j++) untouched &= o[k][j] == -12345.0;
    ok(untouched, "zero candidates is a no-op");
    expr_program_free(p);

    // divisions by powers of two run as multiplies: still bitwise x / k
    enum { M = 4000 };
    static double in[M], q4[M], q3[M], qt[M];
    for (int i = 0; i < M; i++) in[i] = (rng_unit() - 0.5) * ldexp(1.0, rng_int(2100) - 1075);  // subnormals too
    Expr div_outs[3] = {ex_div(x, X, ex_num(x, 4)), ex_div(x, X, ex_num(x, 3)), ex_div(x, X, ex_num(x, 0x1p-1000))};
    p = expr_compile(x, div_outs, 3);
    const double *dcols[3] = {in, in, in};
    double *douts[3] = {q4, q3, qt};
    expr_program_eval(p, dcols, douts, M);
    int bad = 0;
    for (int i = 0; i < M; i++)
        bad += !same_double(q4[i], in[i] / 4) || !same_double(q3[i], in[i] / 3) ||
               !same_double(qt[i], in[i] / 0x1p-1000);
    ok(bad == 0, "x/4, x/3, x/2^-1000 batched bitwise equal to C division (%d differ)", bad);
    expr_program_free(p);
}

// expr_eval vs expr_program_eval on random programs; tame ones also vs the reference
static void test_random(uint64_t seed) {
    int mismatches = 0, ref_bad = 0, ref_checked = 0, ref_skipped = 0, checked = 0, roundtrip_bad = 0, printed = 0;
    size_t instr_total = 0;
    const size_t n = 3001;  // not a multiple of the block: exercises the padded tail
    double *sym[NSYM], *out[8], *row = malloc(NSYM * sizeof *row), refval[POOL];
    unsigned char fragile[POOL], exact[POOL];
    for (int i = 0; i < NSYM; i++) sym[i] = malloc(n * sizeof(double));
    for (int k = 0; k < 8; k++) out[k] = malloc(n * sizeof(double));
    for (int trial = 0; trial < 40; trial++) {
        int tame = trial % 2 == 0;
        ExprCtx *x = expr_ctx_new();
        Pool pl;
        build_pool(x, &pl, tame);
        int nout = 1 + rng_int(8), which[8];
        Expr outs[8];
        for (int k = 0; k < nout; k++) {
            which[k] = POOL - 1 - rng_int(POOL / 2);
            outs[k] = pl.e[which[k]];
        }
        ExprProgram *p = expr_compile(x, outs, nout);
        instr_total += (size_t)expr_program_num_instructions(p);
        for (int i = 0; i < NSYM; i++)
            for (size_t j = 0; j < n; j++) sym[i][j] = tame ? 0.5 + 3.5 * rng_unit() : 8 * rng_unit() - 4;
        expr_program_eval(p, (const double *const *)sym, out, n);
        for (size_t j = 0; j < n; j++) {
            for (int i = 0; i < NSYM; i++) row[i] = sym[i][j];
            if (tame)
                for (int q = 0; q < pl.n; q++) {
                    fragile[q] = (unsigned char)ref_fragile(&pl.ref[q], refval, fragile, exact);
                    exact[q] = (unsigned char)ref_exact(&pl.ref[q], refval, exact);
                    refval[q] = ref_apply(&pl.ref[q], refval, row);
                }
            for (int k = 0; k < nout; k++) {
                double want = expr_eval(x, outs[k], row);
                checked++;
                if (!same_double(out[k][j], want)) {
                    if (mismatches++ < 5)
                        diag("trial %d out %d cand %zu: program %.17g scalar %.17g", trial, k, j, out[k][j], want);
                }
                if (tame && fragile[which[k]]) ref_skipped++;
                if (tame && !fragile[which[k]]) {
                    double r = refval[which[k]];
                    ref_checked++;
                    if (!same_double(want, r) && !(fabs(want - r) <= 1e-12 + 1e-9 * fabs(r))) {
                        if (ref_bad++ < 5) diag("trial %d out %d cand %zu: simplified %.17g reference %.17g",
                                                trial, k, j, want, r);
                    }
                }
            }
        }
        // print round trip: parsing the text rebuilds the same node (tame
        // programs only: wild ones fold constants to inf and nan, which the
        // printed form does not read back)
        for (int k = 0; tame && k < nout; k++) {
            char buf[1 << 16];
            int len = expr_print(x, outs[k], buf, sizeof buf);
            if (len >= (int)sizeof buf) continue;  // too long for the check
            int err;
            Expr back = parse(x, buf, &err);
            printed++;
            if (err || back != outs[k]) {
                if (roundtrip_bad++ < 3) diag("round trip failed (err %d) for %.300s", err, buf);
            }
        }
        expr_program_free(p);
        expr_ctx_free(x);
    }
    ok(mismatches == 0, "program == scalar bitwise on %d values of 40 random programs (avg %zu instructions), seed %llu",
       checked, instr_total / 40, (unsigned long long)seed);
    ok(ref_bad == 0 && ref_checked > ref_skipped,
       "simplified == unsimplified reference to 1e-9 on tame programs (%d bad of %d; %d skipped as fragile)",
       ref_bad, ref_checked, ref_skipped);
    ok(printed > 0 && roundtrip_bad == 0, "print/parse round trip gives the same node (%d of %d bad)", roundtrip_bad,
       printed);
    for (int i = 0; i < NSYM; i++) free(sym[i]);
    for (int k = 0; k < 8; k++) free(out[k]);
    free(row);
}


// Hoisting: per block of candidates the evaluator runs the instructions that
// depend only on symbols with one value in the whole block once. Columns
// here mix every shape: one value throughout, one value per 64-candidate
// block changing between blocks, runs of random lengths (uniform in some
// blocks, not in the next), one value in every other block, and values
// varying per candidate; then a batch whose block k has exactly the symbols
// of bit set k uniform, which visits all 64 sets (more than the evaluator
// caches) twice. Every value is compared bitwise with expr_eval.
static void test_hoisting(void) {
    int mismatches = 0, checked = 0;
    const size_t n = 64 * 64 + 37;  // 64 blocks of the evaluator and a partial tail
    double *sym[NSYM], *out[8], *row = malloc(NSYM * sizeof *row);
    for (int i = 0; i < NSYM; i++) sym[i] = malloc(n * sizeof(double));
    for (int k = 0; k < 8; k++) out[k] = malloc(n * sizeof(double));
    for (int trial = 0; trial < 40; trial++) {
        int tame = trial % 2 == 0;
        ExprCtx *x = expr_ctx_new();
        Pool pl;
        build_pool(x, &pl, tame);
        int nout = 1 + rng_int(8);
        Expr outs[8];
        for (int k = 0; k < nout; k++) outs[k] = pl.e[POOL - 1 - rng_int(POOL / 2)];
        ExprProgram *p = expr_compile(x, outs, nout);
        for (int pass = 0; pass < 3; pass++) {
            for (int i = 0; i < NSYM; i++) {
                int shape = pass == 2 ? 5 : rng_int(5);
                double v = 0;
                size_t run_end = 0;
                for (size_t j = 0; j < n; j++) {
                    int fresh;
                    switch (shape) {
                    case 0: fresh = j == 0; break;                                // one value
                    case 1: fresh = j % 64 == 0; break;                           // one per block
                    case 2: fresh = j >= run_end; if (fresh) run_end = j + 1 + rng_int(200); break;
                    case 3: fresh = (j / 64) % 2 == 1 || j % 64 == 0; break;      // uniform in even blocks
                    case 4: fresh = 1; break;                                     // per candidate
                    default: fresh = !((j / 64 >> i) & 1) || j % 64 == 0; break;  // block k: bit i of k
                    }
                    if (fresh) v = tame ? 0.5 + 3.5 * rng_unit() : 8 * rng_unit() - 4;
                    sym[i][j] = v;
                }
            }
            // pass 2 runs twice: the second time every uniform set is already seen
            for (int again = 0; again < (pass == 2 ? 2 : 1); again++) {
                expr_program_eval(p, (const double *const *)sym, out, n);
                for (size_t j = 0; j < n; j++) {
                    for (int i = 0; i < NSYM; i++) row[i] = sym[i][j];
                    for (int k = 0; k < nout; k++) {
                        double want = expr_eval(x, outs[k], row);
                        checked++;
                        if (!same_double(out[k][j], want) && mismatches++ < 5)
                            diag("hoisting trial %d pass %d out %d cand %zu: program %.17g scalar %.17g", trial, pass,
                                 k, j, out[k][j], want);
                    }
                }
            }
        }
        expr_program_free(p);
        expr_ctx_free(x);
    }
    ok(mismatches == 0, "program with hoisted uniform columns == scalar bitwise on %d values (%d differ)", checked,
       mismatches);
    for (int i = 0; i < NSYM; i++) free(sym[i]);
    for (int k = 0; k < 8; k++) free(out[k]);
    free(row);
}

// A clone continues exactly like its original: same handles for the same
// construction sequence, independent afterwards.
static void test_clone(void) {
    ExprCtx *a = expr_ctx_new();
    Expr xa = ex_sym(a, "x"), ya = ex_sym(a, "y");
    Expr base = ex_add(a, ex_mul(a, xa, ya), ex_num(a, 3));
    ExprCtx *b = expr_ctx_clone(a);
    int same = expr_ctx_num_nodes(a) == expr_ctx_num_nodes(b) && expr_num_syms(b) == 2 &&
               ex_sym(b, "y") == ya && expr_sym_index(b, "x") == 0;
    Expr ea = ex_max(a, ex_div(a, base, ya), ex_ceil(a, xa));
    Expr eb = ex_max(b, ex_div(b, base, ex_sym(b, "y")), ex_ceil(b, ex_sym(b, "x")));
    same &= ea == eb && expr_ctx_num_nodes(a) == expr_ctx_num_nodes(b);
    Expr only_b = ex_mul(b, eb, ex_sym(b, "z"));  // grows b only
    same &= expr_ctx_num_nodes(a) < expr_ctx_num_nodes(b) && expr_sym_index(a, "z") < 0;
    double va[2] = {2.5, 4}, vb[3] = {2.5, 4, 2};
    same &= expr_eval(a, ea, va) == expr_eval(b, eb, vb) && expr_eval(b, only_b, vb) == 2 * expr_eval(a, ea, va);
    expr_ctx_free(a);  // b lives on
    char buf[128];
    expr_print(b, only_b, buf, sizeof buf);
    same &= strstr(buf, "z") != NULL;
    expr_ctx_free(b);
    ok(same, "expr_ctx_clone: same handles for the same constructions, independent afterwards");
}

// Declared symbol bounds fold what they decide (and nothing else), and the
// derived bounds are sound on random expressions.
static void test_bounds(uint64_t seed) {
    ExprCtx *x = expr_ctx_new();
    Expr u = ex_sym(x, "u"), v = ex_sym(x, "v"), w = ex_sym(x, "w");
    expr_sym_set_bounds(x, "u", 1, 1);  // u >= 1
    expr_sym_set_bounds(x, "v", 0, 1);  // v > 0
    Expr one = ex_num(x, 1), zero = ex_num(x, 0);
    int good = ex_select(x, ex_sub(x, u, ex_num(x, 0.5)), v, w) == v;                  // u - 0.5 > 0
    good &= ex_select(x, ex_sub(x, u, ex_num(x, 2)), v, w) != v;                        // undecided
    good &= ex_select(x, w, v, u) != v;                                                  // w unbounded
    Expr bytes = ex_mul(x, ex_mul(x, u, v), ex_num(x, 2));                               // 2uv > 0
    Expr copy = ex_mul(x, ex_add(x, bytes, ex_num(x, 1e-5)), ex_select(x, bytes, one, zero));
    good &= copy == ex_add(x, bytes, ex_num(x, 1e-5));                                   // the flag is 1
    Expr busy = ex_select(x, ex_sub(x, copy, ex_num(x, 1e-12)), one, zero);             // > eps: busy
    good &= busy == one;
    good &= ex_max(x, u, ex_num(x, 0.5)) == u && ex_min(x, u, ex_num(x, 0.5)) == ex_num(x, 0.5);
    good &= ex_max(x, u, one) != u;  // u may equal 1: left to evaluation
    good &= ex_select(x, ex_sub(x, ex_ceil(x, v), ex_num(x, 0.5)), w, u) == w;          // ceil(v) >= 1
    int pos;
    double lo = expr_lower_bound(x, ex_add(x, ex_mul(x, u, ex_num(x, 3)), v), &pos);
    good &= lo == 3 && pos;
    ok(good, "declared bounds decide selects and max/min with constants; undecided ones stay");
    expr_ctx_free(x);

    // soundness: every pool expression over bounded symbols stays >= its lower bound (and > 0
    // where positive) at random values in range, the range's ends included
    int violations = 0, checked = 0, bounded = 0;
    for (int trial = 0; trial < 30; trial++) {
        rng_state = seed + 7919 * (uint64_t)trial;
        x = expr_ctx_new();
        const char *names[NSYM] = {"b", "s", "h", "tp", "dp", "ckpt"};
        double lows[NSYM];
        for (int i = 0; i < NSYM; i++) {
            ex_sym(x, names[i]);
            lows[i] = i % 3 == 0 ? 0.5 : i % 3 == 1 ? 1.0 : 0.0;  // 0: positive without a bound
            expr_sym_set_bounds(x, names[i], lows[i], 1);
        }
        Pool pl;
        build_pool(x, &pl, 1);
        for (int t = 0; t < 60; t++) {
            double row[NSYM];
            for (int i = 0; i < NSYM; i++)
                row[i] = t < 2 ? (lows[i] > 0 ? lows[i] : 1e-9 * (t + 1)) : lows[i] + (t % 2 ? 1e-9 : 4) * rng_unit();
            for (int q = 0; q < pl.n; q++) {
                int p2;
                double l2 = expr_lower_bound(x, pl.e[q], &p2), val = expr_eval(x, pl.e[q], row);
                if (isnan(val)) continue;
                checked++;
                bounded += l2 > -INFINITY;
                if ((val < l2 || (p2 && !(val > 0))) && violations++ < 5)
                    diag("bounds trial %d entry %d: value %.17g, bound %.17g, positive %d", trial, q, val, l2, p2);
            }
        }
        expr_ctx_free(x);
    }
    ok(violations == 0 && bounded > checked / 4,
       "derived lower bounds hold on %d random values (%d with a finite bound; %d violations)", checked, bounded,
       violations);
}

// an output column given as NULL is not written; the others are as usual
static void test_null_outputs(void) {
    ExprCtx *x = expr_ctx_new();
    Expr a = ex_sym(x, "a"), b = ex_sym(x, "b");
    Expr outs[2] = {ex_mul(x, a, b), ex_add(x, a, b)};
    ExprProgram *p = expr_compile(x, outs, 2);
    double ca[70], cb[70], o0[70];
    for (int j = 0; j < 70; j++) ca[j] = j, cb[j] = 0.5 * j;
    const double *cols[2] = {ca, cb};
    double *o[2] = {o0, NULL};
    expr_program_eval(p, cols, o, 70);
    int good = 1;
    for (int j = 0; j < 70; j++) good &= o0[j] == ca[j] * cb[j];
    ok(good, "a NULL output column is skipped, the others are written (70 candidates)");
    expr_program_free(p);
    expr_ctx_free(x);
}

int main(void) {
    uint64_t seed = rng_seed();

    ExprCtx *x = expr_ctx_new();
    X = ex_sym(x, "x");
    Y = ex_sym(x, "y");
    Z = ex_sym(x, "z");
    test_operators(x);
    test_rounding_exact(x);
    test_simplification(x);
    test_hash_consing(x);
    test_print(x);
    test_program_basics(x);
    expr_ctx_free(x);
    test_random(seed);
    test_hoisting();
    test_clone();
    test_bounds(seed);
    test_null_outputs();
    return tap_done();
}
