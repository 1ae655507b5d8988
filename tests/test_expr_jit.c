// The stage programs as machine code (expr/expr_jit.c): the same
// bits as the block kernels and as expr_eval. Random expressions built to
// produce every instruction kind the machine code runs (each counted, and
// required), evaluated on special values (signed zeros, infinities, NaN,
// subnormals, +-1e300, halves around 2^52) and random ones, with the machine
// code, without it and by the tree walk; a program with more live values
// than vector registers (cut into several runs); hoisting variants (constants
// patched per block, fills, selects picked per block); short blocks.
// Both instruction sets (AVX-512, AVX2) where the CPU has them; the points of
// one it lacks print SKIP with the reason.
// Random parts use a fresh seed each run (printed); MIST_TEST_SEED=N repeats one.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expr/expr.h"
#include "expr/expr_program_internal.h"  // expr_jit_set_enabled, the program's code
#include "tests/tap.h"
#include "tests/seeded_rng.h"

enum { NSYM = 6, NOUT = 8 };

static const double special[] = {0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 0x1p52 + 0.5 + 0.5, 0x1p52 - 0.5, -0x1p52 + 0.5,
                                 0x1p-1074, -0x1p-1074, 1e300, -1e300, INFINITY, -INFINITY, NAN};
enum { NSPECIAL = sizeof special / sizeof special[0] };

static double value(void) {
    int r = rng_int(4);
    if (r == 0) return special[rng_int(NSPECIAL)];
    if (r == 1) return (double)(rng_int(17) - 8) * 0.5;  // ties for comparisons and ceil/floor
    return (rng_unit() - 0.5) * ldexp(1.0, rng_int(40) - 20);
}
static double konst(void) { return rng_int(3) ? (double)(rng_int(9) - 4) * 0.75 : value(); }

// a random expression of the shapes the compiler turns into each instruction kind
static Expr gen(ExprCtx *x, Expr *sym, int depth) {
    if (depth == 0 || rng_int(5) == 0) return rng_int(6) ? sym[rng_int(NSYM)] : ex_num(x, konst());
    Expr a = gen(x, sym, depth - 1), b = gen(x, sym, depth - 1);
    switch (rng_int(19)) {
    case 0: return ex_add(x, a, b);
    case 1: return ex_sub(x, a, b);
    case 2: return ex_mul(x, a, b);
    case 3: return ex_div(x, a, b);
    case 4: return ex_max(x, a, b);
    case 5: return ex_min(x, a, b);
    case 6: return ex_ceil(x, a);
    case 7: return ex_floor(x, a);
    case 8: return ex_select(x, a, b, gen(x, sym, depth - 1));
    case 9: return ex_select(x, a, ex_num(x, konst()), b);                    // constant branch
    case 10: return ex_select(x, a, b, ex_num(x, konst()));
    case 11: return ex_select(x, a, ex_num(x, konst()), ex_num(x, konst()));  // both constant
    case 12: return ex_add(x, ex_mul(x, a, ex_num(x, konst())), b);           // a * k + b
    case 13: return ex_max(x, ex_mul(x, a, ex_num(x, konst())), ex_mul(x, b, ex_num(x, konst())));
    case 14: return ex_add(x, ex_add(x, a, b), gen(x, sym, depth - 1));       // (a + b) + c
    case 15: return ex_select(x, ex_sub(x, a, b), gen(x, sym, depth - 1), gen(x, sym, depth - 1));
    case 16: {  // a pick by level: select(t0 - a, v0, select(t1 - a, v1, ... tail))
        int n = 2 + rng_int(5);
        Expr r = rng_int(2) ? b : ex_num(x, konst());
        for (int q = 0; q < n; q++) r = ex_select(x, ex_sub(x, ex_num(x, (double)(rng_int(9) - 2)), a), ex_num(x, konst()), r);
        return r;
    }
    case 17: return rng_int(2) ? ex_sub(x, ex_num(x, konst()), a) : ex_div(x, ex_num(x, konst()), a);  // k - a, k / a
    default: return rng_int(2) ? ex_max(x, ex_num(x, konst()), a) : ex_min(x, a, ex_num(x, konst()));
    }
}

// a context with the symbols s0 .. s5
static ExprCtx *new_ctx(Expr sym[NSYM]) {
    ExprCtx *x = expr_ctx_new();
    char name[8];
    for (int s = 0; s < NSYM; s++) snprintf(name, sizeof name, "s%d", s), sym[s] = ex_sym(x, name);
    return x;
}

// columns: per candidate, or uniform over blocks of 64 (hoisting) in some symbols
static void fill_columns(double *col[NSYM], size_t n, int uniform_mask) {
    for (int s = 0; s < NSYM; s++) {
        double v = value();
        for (size_t j = 0; j < n; j++) {
            if (!((uniform_mask >> s) & 1) || j % 64 == 0) v = value();
            col[s][j] = v;
        }
    }
}

// outputs of p (machine code or not) against expr_eval, per candidate; returns values that differ
static int compare(ExprCtx *x, const Expr *outs, int nout, const ExprProgram *p, double *col[NSYM], size_t n,
                   double *out[NOUT]) {
    expr_program_eval(p, (const double *const *)col, out, n);
    int bad = 0;
    for (size_t j = 0; j < n; j++) {
        double row[NSYM];
        for (int s = 0; s < NSYM; s++) row[s] = col[s][j];
        for (int k = 0; k < nout; k++) {
            double want = expr_eval(x, outs[k], row);
            if (!same_double(out[k][j], want) && bad++ < 5)
                diag("output %d candidate %zu: program %.17g expr_eval %.17g", k, j, out[k][j], want);
        }
    }
    return bad;
}

static const char *kind_name(int op) {
    static const char *names[PI_COUNT] = {
        [PI_ADD] = "add", [PI_SUB] = "sub", [PI_MUL] = "mul", [PI_DIV] = "div", [PI_MAX] = "max", [PI_MIN] = "min",
        [PI_ADD_K] = "add_k", [PI_SUB_K] = "sub_k", [PI_MUL_K] = "mul_k", [PI_DIV_K] = "div_k", [PI_MAX_K] = "max_k",
        [PI_MIN_K] = "min_k", [PI_K_SUB] = "k_sub", [PI_K_DIV] = "k_div", [PI_K_MAX] = "k_max", [PI_K_MIN] = "k_min",
        [PI_CEIL] = "ceil", [PI_FLOOR] = "floor", [PI_SELECT] = "select", [PI_SEL_KX] = "sel_kx",
        [PI_SEL_XK] = "sel_xk", [PI_SEL_KK] = "sel_kk", [PI_FILL] = "fill", [PI_MULADD_K] = "muladd_k",
        [PI_MULADD_KK] = "muladd_kk", [PI_MAXMUL_KK] = "maxmul_kk", [PI_ADD3] = "add3", [PI_SEL_GT] = "sel_gt",
        [PI_MOV] = "mov", [PI_OVERLAP2] = "overlap2", [PI_OVERLAP3] = "overlap3", [PI_OVERLAP4] = "overlap4",
        [PI_STEPS] = "steps", [PI_STEPS_X] = "steps_x"};
    return names[op] ? names[op] : "?";
}

static const size_t N = 64 * 24 + 29;  // whole blocks, then a tail of a half block (29 lanes run 32)
static double *col[NSYM], *out[NOUT], *ref[NOUT];

// whether machine code of isa gets built here (the CPU has it, the system maps code)
static int builds(int isa) {
    expr_jit_set_isa(isa);
    Expr sym[NSYM];
    ExprCtx *x = new_ctx(sym);
    Expr o = ex_ceil(x, ex_mul(x, sym[0], sym[1]));
    ExprProgram *p = expr_compile(x, &o, 1);
    fill_columns(col, 1, 0);
    compare(x, &o, 1, p, col, 1, out);
    int mapped = atomic_load(&p->jit.jit) != NULL;
    expr_program_free(p);
    expr_ctx_free(x);
    return mapped;
}

static void check_isa(int isa, const char *name, uint64_t seed) {
    // 1. random programs: machine code == kernels == expr_eval, every kind the machine code runs
    int bad_jit = 0, bad_plain = 0, programs = 0, without = 0;
    long covered_total = 0, instr_total = 0;
    int seen[PI_COUNT] = {0};
    for (int trial = 0; trial < 120; trial++) {
        Expr sym[NSYM];
        ExprCtx *x = new_ctx(sym);
        int nout = 1 + rng_int(NOUT);
        Expr outs[NOUT];
        for (int k = 0; k < nout; k++) outs[k] = gen(x, sym, 3 + rng_int(3));
        ExprProgram *pj = expr_compile(x, outs, nout), *pk = expr_compile(x, outs, nout);
        int uniform = trial % 3 == 0 ? 1 + rng_int((1 << NSYM) - 1) : 0;  // hoisting variants run instead
        fill_columns(col, N, uniform);
        expr_jit_set_isa(isa);
        bad_jit += compare(x, outs, nout, pj, col, N, out);
        expr_jit_set_isa(EXPR_SIMD_NONE);
        bad_plain += compare(x, outs, nout, pk, col, N, ref);
        expr_jit_set_isa(isa);
        without += atomic_load(&pk->jit.jit) != NULL;
        if (!uniform) {  // the program itself ran: its machine code
            int covered = 0;
            expr_jit_num_runs(atomic_load(&pj->jit.jit), &covered);
            covered_total += covered, instr_total += pj->num_code;
            for (int i = 0; i < pj->num_code; i++) seen[pj->code[i].op]++;
        }
        programs++;
        expr_program_free(pj);
        expr_program_free(pk);
        expr_ctx_free(x);
    }
    ok(bad_jit == 0 && bad_plain == 0 && without == 0,
       "%s: %d random programs (%ld instructions in those run without hoisting, %ld of them in machine code): "
       "machine code == expr_eval bitwise (%d differ), block kernels == expr_eval (%d differ), no machine code "
       "when off (%d had), seed %llu",
       name, programs, instr_total, covered_total, bad_jit, bad_plain, without, (unsigned long long)seed);
    ok(covered_total * 10 >= instr_total * 9, "%s: machine code covers at least 90%% of their instructions (%ld of %ld)",
       name, covered_total, instr_total);
    int missing = 0;
    char missing_names[512] = "";
    for (int op = 0; op < PI_COUNT; op++) {
        // windows: the block kernels'; fill, mov, k - a's siblings x - k, max(k, x), min(k, x): only
        // hoisting variants write them (a hoisted operand of a binary op), which part 3 runs
        if (op == PI_OVERLAP2 || op == PI_OVERLAP3 || op == PI_OVERLAP4 || op == PI_FILL || op == PI_MOV ||
            op == PI_SUB_K || op == PI_K_MAX || op == PI_K_MIN)
            continue;
        if (seen[op]) continue;
        missing++;
        strncat(missing_names, " ", sizeof missing_names - strlen(missing_names) - 1);
        strncat(missing_names, kind_name(op), sizeof missing_names - strlen(missing_names) - 1);
    }
    ok(missing == 0, "%s: every instruction kind the compiler writes, but the windows, appears in them (missing:%s)",
       name, missing ? missing_names : " none");

    // 2. more live values than vector registers: the machine code is cut into runs
    {
        Expr sym[NSYM];
        ExprCtx *x = new_ctx(sym);
        enum { W = 48 };
        Expr v[W], terms[W];
        for (int k = 0; k < W; k++)
            v[k] = ex_ceil(x, ex_mul(x, ex_add(x, sym[k % NSYM], ex_num(x, k + 1)), sym[(k + 1) % NSYM]));
        // every v[k] is read by terms[k] and by terms[W-1-k]: half of them stay live across the
        // others; selects among them (a mask and the scratch register in use while all are live)
        for (int k = 0; k < W; k++)
            terms[k] = k % 2 ? ex_max(x, v[k], ex_sub(x, v[W - 1 - k], ex_num(x, 0.25 * k)))
                             : ex_select(x, ex_sub(x, v[k], ex_num(x, 0.5 * k)), v[W - 1 - k], ex_floor(x, v[k]));
        Expr outs[NOUT];
        for (int k = 0; k < NOUT; k++) outs[k] = ex_sum(x, terms + k * (W / NOUT), W / NOUT);
        ExprProgram *p = expr_compile(x, outs, NOUT);
        fill_columns(col, N, 0);
        int bad = compare(x, outs, NOUT, p, col, N, out);
        int covered = 0, runs = expr_jit_num_runs(atomic_load(&p->jit.jit), &covered);
        ok(bad == 0 && covered == p->num_code && runs >= 2,
           "%s: %d instructions over %d registers: %d runs of machine code cover %d; == expr_eval bitwise "
           "(%d differ)", name, p->num_code, p->num_regs, runs, covered, bad);
        expr_program_free(p);
        expr_ctx_free(x);
    }

    // 3. hoisting: blocks where some symbols are uniform run variants (constants patched per block,
    // fills of hoisted values, selects whose branch is picked per block) under machine code
    {
        int bad = 0, checked = 0;
        for (int trial = 0; trial < 40; trial++) {
            Expr sym[NSYM];
            ExprCtx *x = new_ctx(sym);
            Expr outs[NOUT];
            for (int k = 0; k < NOUT; k++) outs[k] = gen(x, sym, 4);
            ExprProgram *p = expr_compile(x, outs, NOUT);
            for (int pass = 0; pass < 3; pass++) {
                fill_columns(col, N, 1 + rng_int((1 << NSYM) - 2));  // some uniform, some not
                bad += compare(x, outs, NOUT, p, col, N, out);
                checked++;
            }
            expr_program_free(p);
            expr_ctx_free(x);
        }
        ok(bad == 0, "%s: hoisting variants under machine code: %d batches of 40 programs with uniform blocks, "
                     "== expr_eval bitwise (%d differ)", name, checked, bad);
    }

    // 4. short batches: a quarter and a half block of lanes
    {
        Expr sym[NSYM];
        ExprCtx *x = new_ctx(sym);
        Expr outs[NOUT];
        for (int k = 0; k < NOUT; k++) outs[k] = gen(x, sym, 4);
        ExprProgram *p = expr_compile(x, outs, NOUT);
        int bad = 0;
        const size_t sizes[] = {1, 5, 16, 17, 31, 32, 33, 63, 64, 65};
        for (size_t q = 0; q < sizeof sizes / sizeof sizes[0]; q++) {
            fill_columns(col, sizes[q], 0);
            bad += compare(x, outs, NOUT, p, col, sizes[q], out);
        }
        ok(bad == 0, "%s: batches of 1, 5, 16, 17, 31, 32, 33, 63, 64, 65 candidates == expr_eval bitwise "
                     "(%d differ)", name, bad);
        expr_program_free(p);
        expr_ctx_free(x);
    }
}

int main(void) {
    uint64_t seed = rng_seed();
    for (int s = 0; s < NSYM; s++) col[s] = malloc(N * sizeof(double));
    for (int k = 0; k < NOUT; k++) out[k] = malloc(N * sizeof(double)), ref[k] = malloc(N * sizeof(double));
    const int defaults = expr_jit_set_isa(-1);
    expr_jit_set_after(0);  // machine code from the first block (part 5: the default count)
    const struct {
        int isa;
        const char *name, *cpu;
    } sets[] = {{EXPR_SIMD_AVX512, "AVX-512", "avx512f"}, {EXPR_SIMD_AVX2, "AVX2", "avx2"}};
    int any = 0;
    for (int q = 0; q < 2; q++) {
        int has = 0;
#if defined(__x86_64__) && defined(__GNUC__)
        __builtin_cpu_init();
        has = q == 0 ? __builtin_cpu_supports("avx512f") : __builtin_cpu_supports("avx2");
#endif
        char why[160];
        if (!has) snprintf(why, sizeof why, "%s: not on this CPU (the block kernels run those programs)", sets[q].name);
        else if (!builds(sets[q].isa)) snprintf(why, sizeof why, "%s: this system refuses executable pages", sets[q].name);
        else {
            check_isa(sets[q].isa, sets[q].name, seed);
            any = 1;
            continue;
        }
        tap_skip(why);
    }

    // 5. the default: machine code once a program has run EXPR_JIT_AFTER blocks, in the middle of a batch
    expr_jit_set_isa(-1);
    expr_jit_set_after(EXPR_JIT_AFTER);
    if (!any || !defaults) {
        tap_skip(!any ? "no machine code here: nothing to switch to" : "MIST_NO_JIT=1: no machine code by default");
    } else {
        Expr sym[NSYM];
        ExprCtx *x = new_ctx(sym);
        Expr outs[NOUT];
        for (int k = 0; k < NOUT; k++) outs[k] = gen(x, sym, 4);
        ExprProgram *p = expr_compile(x, outs, NOUT);
        const size_t few = 64 * (EXPR_JIT_AFTER / 2);
        double *wide[NSYM];
        for (int s = 0; s < NSYM; s++) wide[s] = malloc(few * sizeof(double));
        fill_columns(wide, few, 0);
        double *wide_out[NOUT];
        for (int k = 0; k < NOUT; k++) wide_out[k] = malloc(few * sizeof(double));
        int bad = compare(x, outs, NOUT, p, wide, few, wide_out);
        int before = atomic_load(&p->jit.jit) != NULL;
        fill_columns(col, N, 0);  // 25 blocks more: the threshold is crossed in this batch
        bad += compare(x, outs, NOUT, p, col, N, out);
        int after = atomic_load(&p->jit.jit) != NULL;
        ok(bad == 0 && !before && after,
           "machine code is built after %d blocks, not before (%s after %zu blocks, %s after %zu), "
           "== expr_eval bitwise on both sides (%d differ)", EXPR_JIT_AFTER, before ? "built" : "none", few / 64,
           after ? "built" : "none", (few + N) / 64, bad);
        for (int s = 0; s < NSYM; s++) free(wide[s]);
        for (int k = 0; k < NOUT; k++) free(wide_out[k]);
        expr_program_free(p);
        expr_ctx_free(x);
    }
    for (int s = 0; s < NSYM; s++) free(col[s]);
    for (int k = 0; k < NOUT; k++) free(out[k]), free(ref[k]);
    return tap_done();
}
