// Flat programs: several expression outputs compiled into one instruction
// list over a small register file, evaluated over candidates in blocks
// (contract in expr.h).
//
// Each instruction is one loop over a block of EXPR_BLOCK candidates with a
// constant trip count and a destination that never aliases an operand, so
// the compiler turns it into straight SIMD code without a remainder loop (the
// last partial block is padded). Symbols are
// read in place from the caller's columns; constants are folded into the
// instructions (x + k, k / x, ...). A register is reused as soon as the last
// instruction reading it has run, which keeps the block's working set in
// L1/L2 cache even for programs of hundreds of instructions.
#include "planner/expr.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/expr_node.h"

#ifndef EXPR_BLOCK
#define EXPR_BLOCK 64  // candidates per block: 512 B per register; measured best of 64/128/256
#endif

typedef enum {
    PI_ADD, PI_SUB, PI_MUL, PI_DIV, PI_MAX, PI_MIN,   // d = a op b
    PI_ADD_K, PI_MUL_K, PI_DIV_K, PI_MAX_K, PI_MIN_K, // d = a op k
    PI_K_SUB, PI_K_DIV,                               // d = k op a
    PI_CEIL, PI_FLOOR, PI_SELECT,                     // d = f(a), a > 0 ? b : c
    PI_FILL,                                          // d = k
} ProgOp;

// Operand encoding: r >= 0 is register r, r < 0 is symbol column -r-1.
typedef struct {
    int32_t op;  // ProgOp
    int32_t dst; // register written (never one of the operand registers)
    int32_t a, b, c;
    double k;
} Instr;

typedef enum { OUT_FROM_OPERAND, OUT_CONST } OutKind;
typedef struct {
    OutKind kind;
    int32_t operand;  // register or symbol (encoding as above)
    double k;
} Output;

struct ExprProgram {
    Instr *code;
    int num_code;
    int num_regs;
    Output *outs;
    int num_outs;
    int num_syms;     // symbols of the context at compile time (columns indexable)
    int32_t *used_syms; // symbols the program reads, ascending
    int num_used_syms;
};

static void die_oom(const char *what) {
    fprintf(stderr, "planner/expr_program.c: out of memory %s\n", what);
    abort();
}

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) die_oom("compiling an expression program");
    return p;
}

// ---- compilation

typedef struct {
    int32_t *free_regs;  // stack of reusable registers
    int num_free;
    int num_regs;
} RegAlloc;

static int32_t reg_take(RegAlloc *ra) {
    return ra->num_free ? ra->free_regs[--ra->num_free] : ra->num_regs++;
}
static void reg_give(RegAlloc *ra, int32_t r) { ra->free_regs[ra->num_free++] = r; }

static int is_leaf(const ExprNode *n) { return n->op == EXPR_OP_NUM || n->op == EXPR_OP_SYM; }

// Instruction order: depth-first post-order from the outputs, visiting the
// operand that needs more registers first (Sethi-Ullman: a node needs
// max(need(a), need(b)), plus one when they are equal). Evaluating the hungry
// side first keeps fewer values alive than creation order does, so the
// register file of a block stays small enough for L1.
// Returns the needed non-leaf nodes, each once, operands before users.
static Expr *schedule(const ExprNode *nodes, Expr top, const Expr *outputs, int n_outputs,
                      const unsigned char *needed, int32_t *num_order) {
    size_t n = (size_t)top + 1;
    int32_t *need = xmalloc(n * sizeof *need);
    for (Expr i = 0; i <= top; i++) {
        const ExprNode *nd = &nodes[i];
        if (!needed[i] || is_leaf(nd)) {
            need[i] = 0;
            continue;
        }
        int32_t m = 0, ties = 0;
        Expr ops[3] = {nd->a, nd->b, nd->c};
        for (int j = 0; j < 3; j++) {
            if (ops[j] == EXPR_NONE) continue;
            if (need[ops[j]] > m) m = need[ops[j]], ties = 0;
            else if (need[ops[j]] == m && m > 0) ties = 1;
        }
        need[i] = m + (ties || m == 0);
    }
    Expr *order = xmalloc(n * sizeof *order);
    unsigned char *state = calloc(n, 1);  // 0 new, 1 operands pushed, 2 emitted
    Expr *stack = xmalloc((3 * n + 1) * sizeof *stack);
    if (!state) die_oom("scheduling an expression program");
    int32_t count = 0;
    for (int k = n_outputs - 1; k >= 0; k--) {  // outputs in their order
        size_t sp = 0;
        stack[sp++] = outputs[k];
        while (sp) {
            Expr e = stack[sp - 1];
            if (state[e] == 2 || is_leaf(&nodes[e])) {
                sp--;
                continue;
            }
            if (state[e] == 1) {
                sp--;
                state[e] = 2;
                order[count++] = e;
                continue;
            }
            state[e] = 1;
            Expr ops[3] = {nodes[e].a, nodes[e].b, nodes[e].c};
            // push the least hungry first so the hungriest is evaluated first
            for (int pass = 0; pass < 3; pass++) {
                int best = -1;
                for (int j = 0; j < 3; j++)
                    if (ops[j] != EXPR_NONE && (best < 0 || need[ops[j]] < need[ops[best]])) best = j;
                if (best < 0) break;
                if (state[ops[best]] == 0) stack[sp++] = ops[best];
                ops[best] = EXPR_NONE;
            }
        }
    }
    free(need);
    free(state);
    free(stack);
    *num_order = count;
    return order;
}

ExprProgram *expr_compile(ExprCtx *ctx, const Expr *outputs, int n_outputs) {
    const ExprNode *nodes = expr_ctx_nodes(ctx);
    size_t total = expr_ctx_num_nodes(ctx);
    Expr top = -1;
    for (int k = 0; k < n_outputs; k++) {
        if (outputs[k] < 0 || (size_t)outputs[k] >= total) {
            fprintf(stderr, "planner/expr_program.c: expr_compile: output %d has handle %d, "
                            "not a node of this context (%zu nodes)\n", k, (int)outputs[k], total);
            abort();
        }
        if (outputs[k] > top) top = outputs[k];
    }
    size_t n = (size_t)(top + 1);
    // uses[i]: how many instructions read node i (0 = not needed); pinned: an output
    int32_t *uses = calloc(n ? n : 1, sizeof *uses);
    unsigned char *needed = calloc(n ? n : 1, 1), *pinned = calloc(n ? n : 1, 1);
    int32_t *reg_of = xmalloc(n * sizeof *reg_of);
    if (!uses || !needed || !pinned) die_oom("compiling an expression program");
    for (int k = 0; k < n_outputs; k++) needed[outputs[k]] = pinned[outputs[k]] = 1;
    for (Expr i = top; i >= 0; i--) {  // children have smaller handles
        if (!needed[i] || nodes[i].op == EXPR_OP_NUM || nodes[i].op == EXPR_OP_SYM) continue;
        Expr ops[3] = {nodes[i].a, nodes[i].b, nodes[i].c};
        for (int j = 0; j < 3; j++)
            if (ops[j] != EXPR_NONE) needed[ops[j]] = 1, uses[ops[j]]++;
    }

    ExprProgram *p = calloc(1, sizeof *p);
    if (!p) die_oom("compiling an expression program");
    p->num_syms = expr_num_syms(ctx);
    p->used_syms = xmalloc((size_t)p->num_syms * sizeof *p->used_syms);
    for (Expr i = 0; i <= top; i++)
        if (needed[i] && nodes[i].op == EXPR_OP_SYM) p->used_syms[p->num_used_syms++] = nodes[i].a;
    // sorted by symbol index: symbols are created in index order, so already ascending
    size_t cap = 2 * n + 4;  // each node gives at most 1 instruction + 2 fills
    p->code = xmalloc(cap * sizeof *p->code);
    RegAlloc ra = {xmalloc((cap + 1) * sizeof(int32_t)), 0, 0};
    int32_t num_order;
    Expr *order = schedule(nodes, top, outputs, n_outputs, needed, &num_order);

    for (int32_t oi = 0; oi < num_order; oi++) {
        Expr i = order[oi];
        const ExprNode *nd = &nodes[i];
        Expr src[3] = {nd->a, nd->b, nd->c};
        int nsrc = nd->op == EXPR_OP_SELECT ? 3 : (nd->op == EXPR_OP_CEIL || nd->op == EXPR_OP_FLOOR) ? 1 : 2;
        int32_t enc[3] = {0, 0, 0};
        int is_const[3] = {0, 0, 0};
        for (int j = 0; j < nsrc; j++) {
            const ExprNode *s = &nodes[src[j]];
            if (s->op == EXPR_OP_NUM) is_const[j] = 1;
            else enc[j] = s->op == EXPR_OP_SYM ? -s->a - 1 : reg_of[src[j]];
        }
        Instr in = {0, 0, enc[0], enc[1], enc[2], 0.0};
        int fill_needed[3] = {0, 0, 0};
        if (nsrc == 2 && (is_const[0] || is_const[1])) {
            // one constant operand (two are folded away by the builder)
            int kb = is_const[1];
            double kv = nodes[src[kb ? 1 : 0]].value;
            in.k = kv;
            in.a = kb ? enc[0] : enc[1];
            switch ((ExprOp)nd->op) {
            case EXPR_OP_ADD: in.op = PI_ADD_K; break;  // k + a == a + k exactly
            case EXPR_OP_MUL: in.op = PI_MUL_K; break;
            case EXPR_OP_MAX: in.op = PI_MAX_K; break;  // finite values: max is symmetric
            case EXPR_OP_MIN: in.op = PI_MIN_K; break;
            case EXPR_OP_SUB: in.op = kb ? PI_ADD_K : PI_K_SUB; if (kb) in.k = -kv; break;
            case EXPR_OP_DIV:
                in.op = kb ? PI_DIV_K : PI_K_DIV;
                // x / 2^n == x * 2^-n bitwise (both round the same exact value)
                // and a multiply is several times cheaper than a divide
                if (kb && kv != 0 && isfinite(kv) && isnormal(1.0 / kv)) {
                    int ex;
                    if (fabs(frexp(kv, &ex)) == 0.5) in.op = PI_MUL_K, in.k = 1.0 / kv;
                }
                break;
            default: abort();
            }
            if (!kb && (nd->op == EXPR_OP_MAX || nd->op == EXPR_OP_MIN)) {
                // keep the operand order of the scalar rule, which matters for signed zeros
                fill_needed[0] = 1;
                in.op = nd->op == EXPR_OP_MAX ? PI_MAX : PI_MIN;
                in.a = enc[0];
                in.b = enc[1];
            }
        } else {
            static const int32_t plain[EXPR_OP_COUNT] = {
                [EXPR_OP_ADD] = PI_ADD, [EXPR_OP_SUB] = PI_SUB, [EXPR_OP_MUL] = PI_MUL,
                [EXPR_OP_DIV] = PI_DIV, [EXPR_OP_MAX] = PI_MAX, [EXPR_OP_MIN] = PI_MIN,
                [EXPR_OP_CEIL] = PI_CEIL, [EXPR_OP_FLOOR] = PI_FLOOR, [EXPR_OP_SELECT] = PI_SELECT};
            in.op = plain[nd->op];
            for (int j = 0; j < nsrc; j++) fill_needed[j] = is_const[j];
        }
        // constants that no instruction variant absorbs go through a filled register
        int32_t fill_regs[3] = {-1, -1, -1};
        for (int j = 0; j < nsrc; j++) {
            if (!fill_needed[j]) continue;
            fill_regs[j] = reg_take(&ra);
            p->code[p->num_code++] = (Instr){PI_FILL, fill_regs[j], 0, 0, 0, nodes[src[j]].value};
            if (j == 0) in.a = fill_regs[j];
            if (j == 1) in.b = fill_regs[j];
            if (j == 2) in.c = fill_regs[j];
        }
        // the destination is taken before operands are released: it never aliases them
        in.dst = reg_take(&ra);
        reg_of[i] = in.dst;
        p->code[p->num_code++] = in;
        for (int j = 0; j < nsrc; j++) {
            if (fill_regs[j] >= 0) reg_give(&ra, fill_regs[j]);
            const ExprNode *s = &nodes[src[j]];
            if (s->op == EXPR_OP_NUM || s->op == EXPR_OP_SYM) continue;
            if (--uses[src[j]] == 0 && !pinned[src[j]]) reg_give(&ra, reg_of[src[j]]);
        }
    }
    p->num_regs = ra.num_regs;
    p->num_outs = n_outputs;
    p->outs = xmalloc((size_t)n_outputs * sizeof *p->outs);
    for (int k = 0; k < n_outputs; k++) {
        const ExprNode *o = &nodes[outputs[k]];
        if (o->op == EXPR_OP_NUM) p->outs[k] = (Output){OUT_CONST, 0, o->value};
        else if (o->op == EXPR_OP_SYM) p->outs[k] = (Output){OUT_FROM_OPERAND, -o->a - 1, 0.0};
        else p->outs[k] = (Output){OUT_FROM_OPERAND, reg_of[outputs[k]], 0.0};
    }
    free(ra.free_regs);
    free(order);
    free(uses);
    free(needed);
    free(pinned);
    free(reg_of);
    return p;
}

void expr_program_free(ExprProgram *p) {
    if (!p) return;
    free(p->code);
    free(p->outs);
    free(p->used_syms);
    free(p);
}

int expr_program_num_instructions(const ExprProgram *p) { return p->num_code; }
int expr_program_num_registers(const ExprProgram *p) { return p->num_regs; }
int expr_program_num_syms(const ExprProgram *p) { return p->num_syms; }

// ---- evaluation of one block

#define B EXPR_BLOCK
#define LOOP2(expr_)                                                     \
    do {                                                                 \
        for (int j = 0; j < B; j++) d[j] = (expr_);                      \
    } while (0)

// Compiled once per instruction set where GCC supports function
// multi-versioning, so the loops use AVX2 (and vroundpd for ceil/floor) on
// machines that have it; at -O3 whatever the build's -O level, because GCC's
// -O2 cost model leaves these loops scalar. No FMA target: contracting
// a*b+c would break bitwise agreement with expr_eval.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define EXPR_MULTIVERSION __attribute__((target_clones("avx2", "default"), optimize("O3")))
#elif defined(__GNUC__) && !defined(__clang__)
#define EXPR_MULTIVERSION __attribute__((optimize("O3")))
#else
#define EXPR_MULTIVERSION
#endif

EXPR_MULTIVERSION
static void run_block(const Instr *code, int num_code, double *regs, const double *const *syms) {
    for (int i = 0; i < num_code; i++) {
        const Instr *in = &code[i];
        double *restrict d = regs + (size_t)in->dst * B;
        const double *restrict a = in->a >= 0 ? regs + (size_t)in->a * B : syms[-in->a - 1];
        const double *restrict b = in->b >= 0 ? regs + (size_t)in->b * B : syms[-in->b - 1];
        const double *restrict c = in->c >= 0 ? regs + (size_t)in->c * B : syms[-in->c - 1];
        const double k = in->k;
        switch ((ProgOp)in->op) {
        case PI_ADD: LOOP2(a[j] + b[j]); break;
        case PI_SUB: LOOP2(a[j] - b[j]); break;
        case PI_MUL: LOOP2(a[j] * b[j]); break;
        case PI_DIV: LOOP2(a[j] / b[j]); break;
        case PI_MAX: LOOP2(expr_max2(a[j], b[j])); break;
        case PI_MIN: LOOP2(expr_min2(a[j], b[j])); break;
        case PI_ADD_K: LOOP2(a[j] + k); break;
        case PI_MUL_K: LOOP2(a[j] * k); break;
        case PI_DIV_K: LOOP2(a[j] / k); break;
        case PI_MAX_K: LOOP2(expr_max2(a[j], k)); break;
        case PI_MIN_K: LOOP2(expr_min2(a[j], k)); break;
        case PI_K_SUB: LOOP2(k - a[j]); break;
        case PI_K_DIV: LOOP2(k / a[j]); break;
        case PI_CEIL: LOOP2(expr_ceil1(a[j])); break;
        case PI_FLOOR: LOOP2(expr_floor1(a[j])); break;
        case PI_SELECT: LOOP2(expr_select3(a[j], b[j], c[j])); break;
        case PI_FILL: LOOP2(k); break;
        }
    }
}

void expr_program_eval(const ExprProgram *p, const double *const *sym_columns,
                       double *const *out_columns, size_t n) {
    // regs: (num_regs, B); tail_syms: (num_syms, B) padded copy of the last partial block
    double *regs = aligned_alloc(64, ((size_t)p->num_regs + 1) * B * sizeof(double));
    double *tail_syms = aligned_alloc(64, ((size_t)p->num_used_syms + 1) * B * sizeof(double));
    const double **syms = calloc((size_t)p->num_syms + 1, sizeof *syms);
    if (!regs || !tail_syms || !syms) die_oom("evaluating an expression program");
    for (size_t base = 0; base < n; base += B) {
        size_t m = n - base < B ? n - base : B;
        if (m == B) {
            for (int u = 0; u < p->num_used_syms; u++) {
                int s = p->used_syms[u];
                syms[s] = sym_columns[s] + base;
            }
        } else {
            // the loops always run B lanes: pad the tail with 1.0 (harmless in every op)
            for (int u = 0; u < p->num_used_syms; u++) {
                int s = p->used_syms[u];
                double *col = tail_syms + (size_t)u * B;
                memcpy(col, sym_columns[s] + base, m * sizeof(double));
                for (size_t j = m; j < B; j++) col[j] = 1.0;
                syms[s] = col;
            }
        }
        run_block(p->code, p->num_code, regs, syms);
        for (int k = 0; k < p->num_outs; k++) {
            double *out = out_columns[k] + base;
            const Output *o = &p->outs[k];
            if (o->kind == OUT_CONST) {
                for (size_t j = 0; j < m; j++) out[j] = o->k;
            } else {
                const double *src = o->operand >= 0 ? regs + (size_t)o->operand * B : syms[-o->operand - 1];
                memcpy(out, src, m * sizeof(double));
            }
        }
    }
    free(regs);
    free(tail_syms);
    free(syms);
}
