// What the compiler (expr_compile.c), the evaluator (expr_program.c) and the
// block kernels (expr_block.c) of the flat programs share: the instruction
// set, the program's layout, and the two ways a block
// runs — the batched loops over EXPR_BLOCK candidates and the scalar pass over
// the hoisted instructions. Internal to planner/; expr.h is the contract.
#ifndef MIST_EXPR_PROGRAM_INTERNAL_H
#define MIST_EXPR_PROGRAM_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "expr/expr_node.h"

#ifndef EXPR_BLOCK
#define EXPR_BLOCK 64  // candidates per block: 512 B per register; measured best of 64/128/256
#endif

typedef enum {
    PI_ADD, PI_SUB, PI_MUL, PI_DIV, PI_MAX, PI_MIN,     // d = a op b
    PI_ADD_K, PI_SUB_K, PI_MUL_K, PI_DIV_K, PI_MAX_K,   // d = a op k
    PI_MIN_K,
    PI_K_SUB, PI_K_DIV, PI_K_MAX, PI_K_MIN,             // d = k op a
    PI_CEIL, PI_FLOOR,                                  // d = f(a)
    PI_SELECT, PI_SEL_KX, PI_SEL_XK, PI_SEL_KK,         // d = a + k > 0 ? (b | k1) : (c | k2)
    PI_FILL,                                            // d = k
    PI_MULADD_K, PI_MULADD_KK,                          // d = a * k + (b | k1), rounded twice (no FMA)
    PI_MAXMUL_KK,                                       // d = max(a * k, b * k1)
    PI_ADD3,                                            // d = (a + b) + c
    PI_SEL_GT,                                          // d = a > e ? b : c
    PI_MOV,                                             // d = a
    PI_OVERLAP2, PI_OVERLAP3, PI_OVERLAP4,              // d = window of a, b[, c[, e]] (expr_overlap_n)
    PI_STEPS, PI_STEPS_X,                               // d = a < t0 ? v0 : a < t1 ? v1 : ... : (v[n] | b)
    PI_COUNT
} ProgOp;

// A chain of selects on one value x against constant thresholds with
// constant branches, as the builder writes a pick by level (a size per tp
// level, a collective's line per group shape):
//   select(t0 - x, v0, select(t1 - x, v1, ... select(t[n-1] - x, v[n-1], tail)))
// For a finite t, t - x > 0 exactly when x < t (the difference of two
// doubles rounds to 0 only when they are equal, and keeps its sign; an
// infinite or NaN x gives the same answer both ways), so the chain is
//   r = tail; for q = n - 1 .. 0: r = x < t[q] ? v[q] : r
// in one instruction instead of n selects and their n subtractions. The tail
// is v[n] (PI_STEPS) or the operand b (PI_STEPS_X).
#define EXPR_STEPS_MAX 7  // thresholds per instruction: 8 values; a longer chain continues in its tail
typedef struct {
    int n;  // thresholds, 2..EXPR_STEPS_MAX
    double t[EXPR_STEPS_MAX];
    double v[EXPR_STEPS_MAX + 1];
} ExprStepTable;

// Operand encoding: r >= 0 is register r, r < 0 is symbol column -r-1.
typedef struct {
    int32_t op;  // ProgOp
    int32_t dst; // register written (never one of the operand registers)
    int32_t a, b, c, e;  // e: the fourth input of PI_OVERLAP4 only
    double k, k1, k2;  // constants: k of the _K forms and FILL, select: condition offset k, branches k1, k2
    const ExprOverlapTable *tbl;  // PI_OVERLAP*: its factors (owned by the program)
    const ExprStepTable *steps;   // PI_STEPS*: thresholds and values (owned by the program)
} Instr;

// A hoisted value: slot s < num_code is the result of instruction s, slot
// num_code + u the value of used symbol u.
typedef struct {
    int32_t op;
    int32_t a, b, c, e;  // slots (-1: unused)
    double k, k1, k2;
    const ExprOverlapTable *tbl;
    const ExprStepTable *steps;
} ScalarInstr;

// the semantics of a select instruction, shared by the batched loops, the
// hoisted scalar pass and the compiler's branch patches (expr_eval's)
static inline double op_select(double cond, double k, double x, double y) { return expr_select3(cond + k, x, y); }

// the chain's scalar semantics (the batched loops compute the same selects)
static inline double expr_steps1(const ExprStepTable *s, double x, double tail) {
    double r = tail;
    for (int q = s->n - 1; q >= 0; q--) r = x < s->t[q] ? s->v[q] : r;
    return r;
}

// Run code over one block of m <= EXPR_BLOCK candidates: register r is
// regs[r * EXPR_BLOCK ...], symbol s is syms[s][0 .. EXPR_BLOCK) (the caller
// pads a short block); a short block runs a half or a quarter of the lanes.
void expr_run_block(const Instr *code, int num_code, double *regs, const double *const *syms, size_t m);
// The hoisted instructions that depend on a uniform symbol in `changed` (or
// on none): instruction i reads the slots of val its operands name and writes
// val[slot[i]]; deps[i] is the set of uniform symbols it depends on.
void expr_run_scalar(const ScalarInstr *scalar, const int32_t *slot, const uint64_t *deps, int n, double *val,
                     uint64_t changed);

// ---- what the compiler (expr_compile.c) and the evaluator (expr_program.c) share

#define EXPR_VARIANTS 32   // cached hoisting variants per program (sets of uniform symbols)
#define EXPR_MAX_HOIST 64  // symbols a program may read and still hoist (one bit each)

typedef enum { OUT_FROM_OPERAND, OUT_CONST, OUT_SCALAR } OutKind;
typedef struct {
    OutKind kind;
    int32_t operand;  // register or symbol (encoding as above); OUT_SCALAR: hoisted value slot
    double k;
} Output;

typedef struct Variant Variant;  // a hoisting variant (expr_program.c)

// A compiled program (expr_compile builds it; expr_program.c evaluates it)
struct ExprProgram {
    Instr *code;
    int num_code;
    int num_regs;
    Output *outs;
    int num_outs;
    int num_syms;       // symbols of the context at compile time (columns indexable)
    int32_t *used_syms; // symbols the program reads, ascending
    int num_used_syms;
    int32_t *sym_pos;   // (num_syms,) position in used_syms, -1 if unused
    uint64_t *deps;     // (num_code,) used-symbol positions each instruction depends on
    ExprOverlapTable *tables;  // the context's overlap tables at compile time (instructions point here)
    ExprStepTable *steps;      // the select chains' tables (PI_STEPS instructions point here)
    int hoistable;      // num_used_syms <= EXPR_MAX_HOIST
    _Atomic(Variant *) variants[EXPR_VARIANTS];  // built on demand, shared by concurrent evaluations
};

static inline void die_oom(const char *what) {
    fprintf(stderr, "planner: out of memory %s\n", what);
    abort();
}

static inline void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) die_oom("compiling an expression program");
    return p;
}

static inline void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) die_oom("compiling an expression program");
    return p;
}

// whether instruction op reads operand j (0: a, 1: b, 2: c, 3: e)
static inline int op_reads(int op, int j) {
    switch ((ProgOp)op) {
    case PI_OVERLAP2: return j < 2;
    case PI_OVERLAP3: return j < 3;
    case PI_OVERLAP4: case PI_SEL_GT: return 1;
    case PI_STEPS: return j == 0;
    case PI_STEPS_X: return j < 2;
    default: break;
    }
    if (j == 3) return 0;  // only an overlap of four reads e
    switch ((ProgOp)op) {
    case PI_ADD: case PI_SUB: case PI_MUL: case PI_DIV: case PI_MAX: case PI_MIN: return j < 2;
    case PI_SELECT: return 1;
    case PI_SEL_KX: return j != 1;
    case PI_SEL_XK: return j != 2;
    case PI_MULADD_K: case PI_MAXMUL_KK: return j < 2;
    case PI_ADD3: return j < 3;
    case PI_FILL: case PI_COUNT: return 0;
    default: return j == 0;
    }
}

// registers of a block: a stack of free ones, reused as soon as their last reader has run
typedef struct {
    int32_t *free_regs;  // stack of reusable registers
    int num_free;
    int num_regs;
} RegAlloc;

static inline int32_t reg_take(RegAlloc *ra) {
    return ra->num_free ? ra->free_regs[--ra->num_free] : ra->num_regs++;
}
static inline void reg_give(RegAlloc *ra, int32_t r) { ra->free_regs[ra->num_free++] = r; }

#endif
