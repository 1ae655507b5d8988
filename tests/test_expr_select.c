// How selects compile (expr_compile.c): a chain of selects by level (a value
// picked per tp level or group shape: select(t0 - x, v0, select(t1 - x, v1,
// ... tail))) runs as one lookup instruction (PI_STEPS), and a select on a
// difference, select(p - q, a, b), as one test p > q (PI_SEL_GT). That they
// do compile so, and that the compiled value is expr_eval's bit for bit: for
// chains, thresholds in any order, ties, signed zeros, constant and computed
// tails, chains longer than one instruction holds, inner selects read
// elsewhere, inputs at, beside and beyond the thresholds (infinities, NaN);
// for differences, equal, signed-zero, infinite, NaN and subnormal operands;
// per candidate and hoisted.
// Random parts use a fresh seed each run (printed); MIST_TEST_SEED=N repeats one.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expr/expr.h"
#include "tests/tap.h"
#include "tests/seeded_rng.h"

enum { MAX_CHAIN = 12 };

typedef struct {
    int n;  // selects
    double t[MAX_CHAIN], v[MAX_CHAIN];
} Chain;

static double pick(const double *from, int n) { return from[rng_int(n)]; }

static const double special[] = {0.0, -0.0, 1.0, -1.0, 1.5, 3.0, 48.0, 0x1p-1074, -0x1p-1074, 1e300, -1e300, 0.1};

static void random_chain(Chain *c, int n) {
    c->n = n;
    int order = rng_int(4);  // ascending (as the builders write them), descending, random, with ties
    for (int i = 0; i < n; i++) {
        c->t[i] = rng_int(3) ? 100.0 * rng_unit() - 20.0 : pick(special, (int)(sizeof special / sizeof *special));
        c->v[i] = rng_int(4) ? 1e6 * rng_unit() : pick(special, (int)(sizeof special / sizeof *special));
        if (order == 3 && i > 0 && rng_int(2)) c->t[i] = c->t[i - 1];
    }
    for (int i = 1; i < n && order < 2; i++)  // insertion sort
        for (int j = i; j > 0 && (order == 0 ? c->t[j] < c->t[j - 1] : c->t[j] > c->t[j - 1]); j--) {
            double s = c->t[j];
            c->t[j] = c->t[j - 1];
            c->t[j - 1] = s;
        }
}

// the chain as a builder writes it: select(t - x, v, rest), innermost last;
// inner[i] receives the select that starts at position i
static Expr build_chain(ExprCtx *x, const Chain *c, Expr on, Expr tail, Expr *inner) {
    Expr e = tail;
    for (int i = c->n - 1; i >= 0; i--) {
        e = ex_select(x, ex_sub(x, ex_num(x, c->t[i]), on), ex_num(x, c->v[i]), e);
        if (inner) inner[i] = e;
    }
    return e;
}

// a value for x: random, a threshold, its neighbours, or a special value
static double random_input(const Chain *c) {
    switch (rng_int(8)) {
    case 0: return c->t[rng_int(c->n)];
    case 1: return nextafter(c->t[rng_int(c->n)], INFINITY);
    case 2: return nextafter(c->t[rng_int(c->n)], -INFINITY);
    case 3: {
        static const double edge[] = {INFINITY, -INFINITY, NAN, 0.0, -0.0, 0x1p-1074};
        return edge[rng_int(6)];
    }
    default: return 120.0 * rng_unit() - 30.0;
    }
}

// one instruction per chain of 2 .. 7 selects on a symbol, whatever its tail
static void test_one_instruction(void) {
    int bad = 0;
    for (int n = 1; n <= MAX_CHAIN; n++)
        for (int tail_kind = 0; tail_kind < 2; tail_kind++) {
            ExprCtx *x = expr_ctx_new();
            Expr on = ex_sym(x, "x"), y = ex_sym(x, "y");
            Chain c;
            random_chain(&c, n);
            Expr tail = tail_kind ? ex_mul(x, y, y) : ex_num(x, -7.0);
            Expr out = build_chain(x, &c, on, tail, NULL);
            ExprProgram *p = expr_compile(x, &out, 1);
            // tail y * y: one more instruction; a chain longer than 7 continues in a second one;
            // a single select stays a subtraction and a select
            int want = (n == 1 ? 2 : n <= 7 ? 1 : n - 7 == 1 ? 3 : 2) + tail_kind;
            int got = expr_program_num_instructions(p);
            if (got != want && bad++ < 5) diag("chain of %d selects, tail %d: %d instructions, expected %d", n, tail_kind, got, want);
            expr_program_free(p);
            expr_ctx_free(x);
        }
    ok(bad == 0, "a chain of 2 to 7 selects by level is one instruction; 8 to 12 two; one select stays two (%d differ)",
       bad);
}

// many chains in one program, compiled against expr_eval; returns how many values differ
static int test_values(void) {
    enum { CHAINS = 24, SYMS = 3 };
    ExprCtx *x = expr_ctx_new();
    Expr s[SYMS] = {ex_sym(x, "x"), ex_sym(x, "y"), ex_sym(x, "z")};
    Chain chains[CHAINS];
    Expr outs[CHAINS + 8];
    int nout = 0;
    for (int k = 0; k < CHAINS; k++) {
        Chain *c = &chains[k];
        random_chain(c, 1 + rng_int(MAX_CHAIN));
        // what the chain tests: a symbol, or a computed value (a register)
        Expr on = k % 3 == 2 ? ex_add(x, ex_mul(x, s[0], s[2]), ex_num(x, 0.5)) : s[k % 2];
        Expr tail;
        switch (rng_int(4)) {
        case 0: tail = ex_num(x, 1e6 * rng_unit()); break;
        case 1: tail = s[2]; break;
        case 2: tail = ex_add(x, s[1], ex_num(x, 2.0)); break;
        default: {  // another chain on another value: a table of two levels
            Chain t;
            random_chain(&t, 2 + rng_int(5));
            tail = build_chain(x, &t, s[2], ex_num(x, -1.0), NULL);
        }
        }
        Expr inner[MAX_CHAIN];
        outs[nout++] = build_chain(x, c, on, tail, inner);
        // an inner select that something else reads (an output here): the chain ends there
        if (k % 4 == 1 && c->n > 2 && nout < CHAINS + 8) outs[nout++] = inner[1 + rng_int(c->n - 1)];
    }
    ExprProgram *p = expr_compile(x, outs, nout);
    diag("%d outputs: %d instructions", nout, expr_program_num_instructions(p));

    const size_t n = 64 * 8 + 21;
    double *col[SYMS], *out[CHAINS + 8], row[SYMS];
    for (int i = 0; i < SYMS; i++) col[i] = malloc(n * sizeof(double));
    for (int o = 0; o < nout; o++) out[o] = malloc(n * sizeof(double));
    int mismatches = 0;
    for (int pass = 0; pass < 5; pass++) {
        // pass 1: x uniform per block; 2: y, z uniform; 3: all uniform; 4: a short tail of 9
        for (size_t j = 0; j < n; j++)
            for (int i = 0; i < SYMS; i++) {
                int uniform = (pass == 1 && i == 0) || (pass == 2 && i > 0) || pass == 3;
                col[i][j] = uniform && j % 64 ? col[i][j - 1] : random_input(&chains[rng_int(CHAINS)]);
            }
        size_t m = pass == 4 ? 9 : n;
        expr_program_eval(p, (const double *const *)col, out, m);
        for (size_t j = 0; j < m; j++) {
            for (int i = 0; i < SYMS; i++) row[i] = col[i][j];
            for (int o = 0; o < nout; o++) {
                double want = expr_eval(x, outs[o], row);
                if (!same_double(out[o][j], want) && mismatches++ < 5)
                    diag("pass %d out %d cand %zu (x %.17g y %.17g z %.17g): program %.17g, expr_eval %.17g", pass, o, j,
                         row[0], row[1], row[2], out[o][j], want);
            }
        }
    }
    expr_program_free(p);
    for (int i = 0; i < SYMS; i++) free(col[i]);
    for (int o = 0; o < nout; o++) free(out[o]);
    expr_ctx_free(x);
    return mismatches;
}

// select(p - q, a, b) == expr_eval's on operands where p - q > 0 and p > q
// could part ways if either were computed differently: ties, signed zeros,
// infinities (inf - inf is NaN), NaN, neighbours and subnormal differences
static void test_difference(void) {
    ExprCtx *x = expr_ctx_new();
    Expr p = ex_sym(x, "p"), q = ex_sym(x, "q"), a = ex_sym(x, "a"), b = ex_sym(x, "b");
    Expr plain = ex_select(x, ex_sub(x, p, q), a, b);
    ExprProgram *one = expr_compile(x, &plain, 1);
    int count = expr_program_num_instructions(one);
    expr_program_free(one);
    // computed operands, a difference read twice (not fused), a constant branch (not fused)
    Expr pq = ex_mul(x, p, q), shared = ex_sub(x, q, p);
    Expr outs[5] = {plain, ex_select(x, ex_sub(x, pq, ex_add(x, q, a)), ex_add(x, a, b), b),
                    ex_select(x, shared, a, b), ex_add(x, shared, b), ex_select(x, ex_sub(x, p, a), ex_num(x, 3.0), q)};
    ExprProgram *prog = expr_compile(x, outs, 5);
    static const double values[] = {0.0, -0.0, 1.0, -1.0, 0x1p-1074, -0x1p-1074, 0x1p-1022, 1e308, -1e308,
                                    INFINITY, -INFINITY, NAN, 3.0, 0x1.0000000000001p+1, 2.0};
    const int nv = (int)(sizeof values / sizeof *values);
    const size_t n = 64 * 6 + 7;
    double *col[4], *out[5], row[4];
    for (int i = 0; i < 4; i++) col[i] = malloc(n * sizeof(double));
    for (int o = 0; o < 5; o++) out[o] = malloc(n * sizeof(double));
    int mismatches = 0;
    for (int pass = 0; pass < 4; pass++) {  // 1: p, q uniform per block; 2: a, b uniform; 3: all
        for (size_t j = 0; j < n; j++)
            for (int i = 0; i < 4; i++) {
                int uniform = (pass == 1 && i < 2) || (pass == 2 && i >= 2) || pass == 3;
                double v = rng_int(3) ? values[rng_int(nv)] : 4.0 * rng_unit() - 2.0;
                if (i == 1 && rng_int(3) == 0) v = col[0][j];  // a tie
                col[i][j] = uniform && j % 64 ? col[i][j - 1] : v;
            }
        expr_program_eval(prog, (const double *const *)col, out, n);
        for (size_t j = 0; j < n; j++) {
            for (int i = 0; i < 4; i++) row[i] = col[i][j];
            for (int o = 0; o < 5; o++)
                if (!same_double(out[o][j], expr_eval(x, outs[o], row)) && mismatches++ < 5)
                    diag("pass %d out %d: p %.17g q %.17g a %g b %g: program %.17g, expr_eval %.17g", pass, o, row[0],
                         row[1], row[2], row[3], out[o][j], expr_eval(x, outs[o], row));
        }
    }
    ok(count == 1 && mismatches == 0,
       "select(p - q, a, b) is one instruction (%d) and == expr_eval bitwise on ties, signed zeros, infinities, NaN, "
       "subnormals, computed operands, hoisted (%d differ)",
       count, mismatches);
    expr_program_free(prog);
    for (int i = 0; i < 4; i++) free(col[i]);
    for (int o = 0; o < 5; o++) free(out[o]);
    expr_ctx_free(x);
}

int main(void) {
    rng_seed();
    test_one_instruction();
    int rounds = 20, mismatches = 0;
    for (int round = 0; round < rounds; round++) mismatches += test_values();
    ok(mismatches == 0,
       "%d programs of 24 chains by level (any threshold order, ties, computed and chained tails, inner selects read "
       "elsewhere): compiled == expr_eval bitwise, per candidate, hoisted and in a short block (%d differ)",
       rounds, mismatches);
    test_difference();
    return tap_done();
}
