// The block kernels of the flat programs (expr_compile.c compiles them):
// each instruction is one loop over EXPR_BLOCK candidates with a constant
// trip count, compiled per instruction set so that it runs as SIMD code; the
// overlap window is restructured so that it vectorises too (overlap_lanes).
// The hoisted scalar pass evaluates the same C expressions one value at a
// time, so both agree bitwise with expr_eval.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "expr/expr_program_internal.h"

// ---- evaluation of one block

#define B EXPR_BLOCK
#define LOOP2(expr_)                                                     \
    do {                                                                 \
        for (int j = 0; j < lanes; j++) d[j] = (expr_);                  \
    } while (0)

// Compiled once per instruction set where GCC supports function
// multi-versioning, so the loops use AVX2 (and vroundpd for ceil/floor) on
// machines that have it; at -O3 whatever the build's -O level, because GCC's
// -O2 cost model leaves these loops scalar. No FMA target, and no
// contraction even where the build's target has FMA: a*k+b rounded once
// would break bitwise agreement with expr_eval.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define EXPR_MULTIVERSION __attribute__((target_clones("avx2", "default"), optimize("O3", "fp-contract=off")))
#define EXPR_NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#elif defined(__GNUC__) && !defined(__clang__)
#define EXPR_MULTIVERSION __attribute__((optimize("O3", "fp-contract=off")))
#define EXPR_NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define EXPR_MULTIVERSION
#define EXPR_NO_CONTRACT
#endif

// a ? x : y with a all ones or all zeros, by bit masks: no operand can be
// sunk into a branch (a division under a condition could trap, so the
// compiler would keep the branch and not vectorise the loop)
static inline double mask_select(uint64_t a, double x, double y) {
    uint64_t xb, yb, ob;
    memcpy(&xb, &x, sizeof xb);
    memcpy(&yb, &y, sizeof yb);
    ob = (xb & a) | (yb & ~a);
    double o;
    memcpy(&o, &ob, sizeof o);
    return o;
}
static inline uint64_t mask_of(int cond) { return (uint64_t)0 - (uint64_t)cond; }

// The overlap window of n inputs over `lanes` candidates: expr_overlap_n
// restructured so that it vectorises, with the same value bitwise. Each
// round is one loop over the lanes; the factor of stream s and its
// reciprocal are picked from by_others / inv_by_others by a tree of selects
// on the other streams' busy flags (no gather); the factor is +inf for a
// stream busy alone, which makes its scaled work inf: with fewer than two
// busy streams w stays inf and becomes 0, and every stream keeps
// x - 0 * (1 / f) = x, as with expr_overlap_n's empty window.
// With all_busy (the table's promise, a constant here) the first round's
// set is every stream: its factors are constants, no picking.
static inline __attribute__((always_inline)) void overlap_lanes(const ExprOverlapTable *t, const int n, const int all_busy,
                                                                const int lanes, double *restrict d,
                                                                const double *const in[EXPR_OVERLAP_MAX]) {
    double x[EXPR_OVERLAP_MAX][B];  // (n, lanes) work left per stream between rounds; d: the total so far
#pragma GCC unroll 4
    for (int round = 0; round < n - 1; round++)
        for (int j = 0; j < lanes; j++) {
            double xs[EXPR_OVERLAP_MAX], f[EXPR_OVERLAP_MAX], r[EXPR_OVERLAP_MAX];
            uint64_t busy[EXPR_OVERLAP_MAX];
#pragma GCC unroll 4
            for (int s = 0; s < n; s++) {
                xs[s] = round ? x[s][j] : mask_select(mask_of(in[s][j] > EXPR_OVERLAP_EPS), in[s][j], 0.0);
                busy[s] = round == 0 && all_busy ? ~(uint64_t)0 : mask_of(xs[s] > EXPR_OVERLAP_EPS);
            }
#pragma GCC unroll 4
            for (int s = 0; s < n; s++) {
                if (round == 0 && all_busy) {
                    f[s] = t->by_others[s][(1 << (n - 1)) - 1];
                    r[s] = t->inv_by_others[s][(1 << (n - 1)) - 1];
                    continue;
                }
                double leaf[EXPR_OVERLAP_SUBSETS / 2], rleaf[EXPR_OVERLAP_SUBSETS / 2];
#pragma GCC unroll 8
                for (int k = 0; k < 1 << (n - 1); k++) leaf[k] = t->by_others[s][k], rleaf[k] = t->inv_by_others[s][k];
#pragma GCC unroll 4
                for (int m = 0, o = 0; o < n; o++) {
                    if (o == s) continue;
#pragma GCC unroll 8
                    for (int k = 0; k < 1 << (n - 2 - m); k++) {
                        leaf[k] = mask_select(busy[o], leaf[2 * k + 1], leaf[2 * k]);
                        rleaf[k] = mask_select(busy[o], rleaf[2 * k + 1], rleaf[2 * k]);
                    }
                    m++;
                }
                f[s] = leaf[0];
                r[s] = rleaf[0];
            }
            double w = INFINITY;
#pragma GCC unroll 4
            for (int s = 0; s < n; s++) w = mask_select(busy[s], expr_min2(w, xs[s] * f[s]), w);
            w = mask_select(mask_of(w < INFINITY), w, 0.0);
            double total = (round ? d[j] : 0.0) + w;
#pragma GCC unroll 4
            for (int s = 0; s < n; s++) {
                double rest = xs[s] - w * r[s];
                double left = mask_select(mask_of(xs[s] * f[s] - w > EXPR_OVERLAP_EPS), rest, 0.0);
                xs[s] = mask_select(busy[s], left, xs[s]);
                if (round < n - 2) x[s][j] = xs[s];
            }
            if (round == n - 2)  // the last round adds what is left
#pragma GCC unroll 4
                for (int s = 0; s < n; s++) total += xs[s];
            d[j] = total;
        }
}

// A chain of PI_STEPS over the lanes, n thresholds (a constant at each call,
// so the chain unrolls and each lane's value stays in a register); tail:
// the operand b, or NULL for the constant v[n]
static inline __attribute__((always_inline)) void steps_lanes(const ExprStepTable *s, const int n, const int lanes,
                                                              double *restrict d, const double *restrict x,
                                                              const double *restrict tail) {
    double t[EXPR_STEPS_MAX], v[EXPR_STEPS_MAX + 1];
#pragma GCC unroll 8
    for (int q = 0; q < n; q++) t[q] = s->t[q];
#pragma GCC unroll 8
    for (int q = 0; q <= n; q++) v[q] = s->v[q];
    for (int j = 0; j < lanes; j++) {
        double r = tail ? tail[j] : v[n];
#pragma GCC unroll 8
        for (int q = n - 1; q >= 0; q--) r = mask_select(mask_of(x[j] < t[q]), v[q], r);
        d[j] = r;
    }
}

#define STEPS_CASES(tail_)                                                      \
    switch (in->steps->n) {                                                     \
    case 2: steps_lanes(in->steps, 2, lanes, d, a, tail_); break;               \
    case 3: steps_lanes(in->steps, 3, lanes, d, a, tail_); break;               \
    case 4: steps_lanes(in->steps, 4, lanes, d, a, tail_); break;               \
    case 5: steps_lanes(in->steps, 5, lanes, d, a, tail_); break;               \
    case 6: steps_lanes(in->steps, 6, lanes, d, a, tail_); break;               \
    default: steps_lanes(in->steps, EXPR_STEPS_MAX, lanes, d, a, tail_); break; \
    }
_Static_assert(EXPR_STEPS_MAX == 7, "STEPS_CASES covers 2 .. 7 thresholds");

// The loops' instruction set: run_lanes' AVX2 clone where the CPU has AVX2
// (target_clones picks it at load time), else the compiler's default target.
const char *expr_simd_name(void) {
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) return "avx2";
#endif
    return "baseline";
}

// The instructions over the first `lanes` candidates of a block (registers
// keep their stride B); inlined with a constant lane count, so each loop has
// a fixed trip count.
static inline __attribute__((always_inline)) void run_lanes(const Instr *code, int num_code, double *regs,
                                                            const double *const *syms, const int lanes) {
    for (int i = 0; i < num_code; i++) {
        const Instr *in = &code[i];
        double *restrict d = regs + (size_t)in->dst * B;
        const double *restrict a = in->a >= 0 ? regs + (size_t)in->a * B : syms[-in->a - 1];
        const double *restrict b = in->b >= 0 ? regs + (size_t)in->b * B : syms[-in->b - 1];
        const double *restrict c = in->c >= 0 ? regs + (size_t)in->c * B : syms[-in->c - 1];
        const double *restrict e = in->e >= 0 ? regs + (size_t)in->e * B : syms[-in->e - 1];
        const double k = in->k, k1 = in->k1, k2 = in->k2;
        switch ((ProgOp)in->op) {
        case PI_ADD: LOOP2(a[j] + b[j]); break;
        case PI_SUB: LOOP2(a[j] - b[j]); break;
        case PI_MUL: LOOP2(a[j] * b[j]); break;
        case PI_DIV: LOOP2(a[j] / b[j]); break;
        case PI_MAX: LOOP2(expr_max2(a[j], b[j])); break;
        case PI_MIN: LOOP2(expr_min2(a[j], b[j])); break;
        case PI_ADD_K: LOOP2(a[j] + k); break;
        case PI_SUB_K: LOOP2(a[j] - k); break;
        case PI_MUL_K: LOOP2(a[j] * k); break;
        case PI_DIV_K: LOOP2(a[j] / k); break;
        case PI_MAX_K: LOOP2(expr_max2(a[j], k)); break;
        case PI_MIN_K: LOOP2(expr_min2(a[j], k)); break;
        case PI_K_SUB: LOOP2(k - a[j]); break;
        case PI_K_DIV: LOOP2(k / a[j]); break;
        case PI_K_MAX: LOOP2(expr_max2(k, a[j])); break;
        case PI_K_MIN: LOOP2(expr_min2(k, a[j])); break;
        case PI_CEIL: LOOP2(expr_ceil1(a[j])); break;
        case PI_FLOOR: LOOP2(expr_floor1(a[j])); break;
        case PI_SELECT: LOOP2(op_select(a[j], k, b[j], c[j])); break;
        case PI_SEL_KX: LOOP2(op_select(a[j], k, k1, c[j])); break;
        case PI_SEL_XK: LOOP2(op_select(a[j], k, b[j], k2)); break;
        case PI_SEL_KK: LOOP2(op_select(a[j], k, k1, k2)); break;
        case PI_MULADD_K: LOOP2(a[j] * k + b[j]); break;
        case PI_MULADD_KK: LOOP2(a[j] * k + k1); break;
        case PI_MAXMUL_KK: LOOP2(expr_max2(a[j] * k, b[j] * k1)); break;
        case PI_ADD3: LOOP2((a[j] + b[j]) + c[j]); break;
        case PI_SEL_GT: LOOP2(mask_select(mask_of(a[j] > e[j]), b[j], c[j])); break;
        case PI_MOV: LOOP2(a[j]); break;
        case PI_FILL: LOOP2(k); break;
        case PI_OVERLAP2: {
            const double *const src[EXPR_OVERLAP_MAX] = {a, b, a, a};
            if (in->tbl->all_busy) overlap_lanes(in->tbl, 2, 1, lanes, d, src);
            else overlap_lanes(in->tbl, 2, 0, lanes, d, src);
            break;
        }
        case PI_OVERLAP3: {
            const double *const src[EXPR_OVERLAP_MAX] = {a, b, c, a};
            if (in->tbl->all_busy) overlap_lanes(in->tbl, 3, 1, lanes, d, src);
            else overlap_lanes(in->tbl, 3, 0, lanes, d, src);
            break;
        }
        case PI_OVERLAP4: {
            const double *const src[EXPR_OVERLAP_MAX] = {a, b, c, e};
            if (in->tbl->all_busy) overlap_lanes(in->tbl, 4, 1, lanes, d, src);
            else overlap_lanes(in->tbl, 4, 0, lanes, d, src);
            break;
        }
        case PI_STEPS: STEPS_CASES(NULL) break;
        case PI_STEPS_X: STEPS_CASES(b) break;
        case PI_COUNT: break;
        }
    }
}

EXPR_MULTIVERSION
static void run_full(const Instr *code, int num_code, double *regs, const double *const *syms) {
    run_lanes(code, num_code, regs, syms, B);
}
EXPR_MULTIVERSION
static void run_half(const Instr *code, int num_code, double *regs, const double *const *syms) {
    run_lanes(code, num_code, regs, syms, B / 2);
}
EXPR_MULTIVERSION
static void run_quarter(const Instr *code, int num_code, double *regs, const double *const *syms) {
    run_lanes(code, num_code, regs, syms, B / 4);
}

// a block of m <= B candidates: a short last block runs a half or a quarter
// of the lanes (small batches are mostly such blocks)
void expr_run_block(const Instr *code, int num_code, double *regs, const double *const *syms, size_t m) {
    if (m <= B / 4) run_quarter(code, num_code, regs, syms);
    else if (m <= B / 2) run_half(code, num_code, regs, syms);
    else run_full(code, num_code, regs, syms);
}

// the hoisted instructions that depend on a uniform symbol in changed (the
// others keep their values in val, the slots)
EXPR_NO_CONTRACT void expr_run_scalar(const ScalarInstr *scalar, const int32_t *slot, const uint64_t *deps, int n,
                                      double *val, uint64_t changed) {
    for (int i = 0; i < n; i++) {
        if (!(deps[i] & changed) && deps[i]) continue;
        const ScalarInstr *in = &scalar[i];
        double a = in->a >= 0 ? val[in->a] : 0, b = in->b >= 0 ? val[in->b] : 0, c = in->c >= 0 ? val[in->c] : 0;
        double e = in->e >= 0 ? val[in->e] : 0;
        double k = in->k, k1 = in->k1, k2 = in->k2, r = 0;
        switch ((ProgOp)in->op) {
        case PI_ADD: r = a + b; break;
        case PI_SUB: r = a - b; break;
        case PI_MUL: r = a * b; break;
        case PI_DIV: r = a / b; break;
        case PI_MAX: r = expr_max2(a, b); break;
        case PI_MIN: r = expr_min2(a, b); break;
        case PI_ADD_K: r = a + k; break;
        case PI_SUB_K: r = a - k; break;
        case PI_MUL_K: r = a * k; break;
        case PI_DIV_K: r = a / k; break;
        case PI_MAX_K: r = expr_max2(a, k); break;
        case PI_MIN_K: r = expr_min2(a, k); break;
        case PI_K_SUB: r = k - a; break;
        case PI_K_DIV: r = k / a; break;
        case PI_K_MAX: r = expr_max2(k, a); break;
        case PI_K_MIN: r = expr_min2(k, a); break;
        case PI_CEIL: r = expr_ceil1(a); break;
        case PI_FLOOR: r = expr_floor1(a); break;
        case PI_SELECT: r = op_select(a, k, b, c); break;
        case PI_SEL_KX: r = op_select(a, k, k1, c); break;
        case PI_SEL_XK: r = op_select(a, k, b, k2); break;
        case PI_SEL_KK: r = op_select(a, k, k1, k2); break;
        case PI_MULADD_K: r = a * k + b; break;
        case PI_MULADD_KK: r = a * k + k1; break;
        case PI_MAXMUL_KK: r = expr_max2(a * k, b * k1); break;
        case PI_ADD3: r = (a + b) + c; break;
        case PI_SEL_GT: r = a > e ? b : c; break;
        case PI_MOV: r = a; break;
        case PI_FILL: r = k; break;
        case PI_OVERLAP2: r = expr_overlap_n(in->tbl, 2, (const double[EXPR_OVERLAP_MAX]){a, b, 0, 0}); break;
        case PI_OVERLAP3: r = expr_overlap_n(in->tbl, 3, (const double[EXPR_OVERLAP_MAX]){a, b, c, 0}); break;
        case PI_OVERLAP4: r = expr_overlap_n(in->tbl, 4, (const double[EXPR_OVERLAP_MAX]){a, b, c, e}); break;
        case PI_STEPS: r = expr_steps1(in->steps, a, in->steps->v[in->steps->n]); break;
        case PI_STEPS_X: r = expr_steps1(in->steps, a, b); break;
        case PI_COUNT: break;
        }
        val[slot[i]] = r;
    }
}
