// Flat programs: several expression outputs compiled into one instruction
// list over a small register file, evaluated over candidates in blocks
// (contract in expr.h). This file compiles them and drives the evaluation;
// the block kernels, batched and scalar, are in expr_block.c.
//
// Each instruction is one loop over a block of EXPR_BLOCK candidates with a
// constant trip count and a destination that never aliases an operand, so
// the compiler turns it into straight SIMD code without a remainder loop (the
// last partial block is padded, and runs a half or a quarter of the lanes
// when that covers it). Symbols are read in place from the caller's
// columns; constants are folded into the instructions (x + k, k / x,
// c > 0 ? k1 : x, ...), and a value used once may be computed inside its
// user: a select whose condition is y + k tests y + k > 0 itself (one on
// p - q with computed branches tests p > q, the same answer), y * k + z,
// max(y * k, z * c) and (x + y) + z are one instruction each (each product
// and sum rounded on its own, as expr_eval does). An overlap window (ex_overlap) is one
// instruction over its 2 to 4 stream operands, whose loops pick the
// slowdown factors by selects (overlap_lanes). A chain of selects that picks
// a constant by level of one value (a size per tp level, a collective's line
// per group shape) is one instruction too (PI_STEPS), instead of one select
// and one subtraction per level. A register is reused as soon
// as the last instruction reading it has run, which keeps the block's
// working set in L1/L2 cache even for programs of thousands of instructions.
//
// Hoisting of batch-uniform work: a search evaluates batches in which many
// symbols take one value for a whole block of candidates (the mesh, the
// micro-batch size, the layer count...). Every instruction carries the set of
// symbols it depends on; per block, the evaluator finds the symbol columns
// whose values are all bitwise equal, and the instructions depending only on
// those run once, as scalars, instead of once per candidate. The rest runs as
// a variant of the program (built once per set of uniform symbols and cached
// in the program) in which the hoisted values act as constants: they are
// patched into the instructions' constant fields. The scalar and the batched
// forms of every instruction are the same C expression on the same operands
// (the overlap window: the same operations in the same order, see
// overlap_lanes), so results stay bitwise equal to expr_eval. Hoisted values are recomputed
// only when a uniform symbol's value changes from one block to the next. A
// variant is built (tens of microseconds for a long program) only for a set
// of uniform symbols that lasts more than one block; a block whose set is new
// and seen once (a search's blocks that straddle two groups of rows) runs the
// plain program.
#include "planner/expr.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/expr_node.h"
#include "planner/expr_program_internal.h"

#define EXPR_VARIANTS 32   // cached hoisting variants per program (sets of uniform symbols)
#define EXPR_MAX_HOIST 64  // symbols a program may read and still hoist (one bit each)



typedef enum { OUT_FROM_OPERAND, OUT_CONST, OUT_SCALAR } OutKind;
typedef struct {
    OutKind kind;
    int32_t operand;  // register or symbol (encoding as above); OUT_SCALAR: hoisted value slot
    double k;
} Output;


// Where a hoisted value goes in the variant's code: field 0 k, 1 k1, 2 k2;
// PATCH_PRODUCT: k = value * the instruction's k (y * k + z with y hoisted
// becomes z + constant); PATCH_BRANCH: a select whose condition is hoisted
// becomes a copy of the branch it picks (or a fill with a constant branch).
enum { PATCH_PRODUCT = 3, PATCH_BRANCH = 4 };
typedef struct {
    int32_t instr, field, slot;
} Patch;

// The program for one set of uniform symbols.
typedef struct {
    uint64_t mask;          // used-symbol positions that are uniform
    ScalarInstr *scalar;    // hoisted instructions, in program order
    int32_t *scalar_slot;   // the slot each writes
    uint64_t *scalar_deps;  // the uniform symbols each depends on
    int num_scalar;
    Instr *code;            // the per-candidate rest, constants patched per block
    int num_code, num_regs;
    Patch *patch;
    uint64_t *patch_deps;   // the uniform symbols each patched value depends on
    int num_patch;
    Output *outs;
} Variant;

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

static void die_oom(const char *what) {
    fprintf(stderr, "planner/expr_program.c: out of memory %s\n", what);
    abort();
}

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) die_oom("compiling an expression program");
    return p;
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) die_oom("compiling an expression program");
    return p;
}

// whether instruction op reads operand j (0: a, 1: b, 2: c, 3: e)
static int op_reads(int op, int j) {
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
        Expr ops[4] = {nd->a, nd->b, nd->c, nd->d};
        for (int j = 0; j < 4; j++) {
            if (ops[j] == EXPR_NONE) continue;
            if (need[ops[j]] > m) m = need[ops[j]], ties = 0;
            else if (need[ops[j]] == m && m > 0) ties = 1;
        }
        need[i] = m + (ties || m == 0);
    }
    Expr *order = xmalloc(n * sizeof *order);
    unsigned char *state = xcalloc(n, 1);  // 0 new, 1 operands pushed, 2 emitted
    Expr *stack = xmalloc((4 * n + 1) * sizeof *stack);
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
            Expr ops[4] = {nodes[e].a, nodes[e].b, nodes[e].c, nodes[e].d};
            // push the least hungry first so the hungriest is evaluated first
            for (int pass = 0; pass < 4; pass++) {
                int best = -1;
                for (int j = 0; j < 4; j++)
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

// the symbol dependencies of every instruction, by following registers to
// the instruction that last wrote them
static void compute_deps(ExprProgram *p) {
    p->deps = xcalloc((size_t)p->num_code, sizeof *p->deps);
    p->hoistable = p->num_used_syms <= EXPR_MAX_HOIST;
    if (!p->hoistable) return;
    int32_t *writer = xmalloc(((size_t)p->num_regs + 1) * sizeof *writer);
    for (int i = 0; i < p->num_code; i++) {
        const Instr *in = &p->code[i];
        int32_t ops[4] = {in->a, in->b, in->c, in->e};
        uint64_t d = 0;
        for (int j = 0; j < 4; j++) {
            if (!op_reads(in->op, j)) continue;
            int32_t o = ops[j];
            if (o >= 0) d |= p->deps[writer[o]];
            else d |= (uint64_t)1 << p->sym_pos[-o - 1];
        }
        p->deps[i] = d;
        writer[in->dst] = i;
    }
    free(writer);
}

// needed[i]: node i is computed for the outputs; uses[i]: how many nodes read it
static void count_uses(const ExprNode *nodes, Expr top, const Expr *outputs, int n_outputs, unsigned char *needed,
                       int32_t *uses) {
    for (int k = 0; k < n_outputs; k++) needed[outputs[k]] = 1;
    for (Expr i = top; i >= 0; i--) {  // children have smaller handles
        if (!needed[i] || nodes[i].op == EXPR_OP_NUM || nodes[i].op == EXPR_OP_SYM) continue;
        Expr ops[4] = {nodes[i].a, nodes[i].b, nodes[i].c, nodes[i].d};
        for (int j = 0; j < 4; j++)
            if (ops[j] != EXPR_NONE) needed[ops[j]] = 1, uses[ops[j]]++;
    }
}

// In the compiler's copy of the nodes, the head of a select chain by level
// (ExprStepTable) reads only its x (a) and a non-constant tail (b, else
// EXPR_NONE); value indexes the program's step tables.
#define STEPS_OP EXPR_OP_COUNT

// The chain of selects from head, as long as each tests t - x with a finite
// constant t and the same x, has a constant first branch, and (past the head)
// is read by nothing else: a node read elsewhere is computed anyway, so the
// chain ends there and takes it as its tail. 1 when at least two selects chain.
static int steps_chain(const ExprNode *nodes, const int32_t *uses, const unsigned char *pinned, Expr head,
                       ExprStepTable *st, Expr *x, Expr *tail) {
    Expr e = head;
    int n = 0;
    *x = EXPR_NONE;
    while (n < EXPR_STEPS_MAX && nodes[e].op == EXPR_OP_SELECT && (e == head || (uses[e] == 1 && !pinned[e]))) {
        const ExprNode *sel = &nodes[e], *cond = &nodes[sel->a];
        if (cond->op != EXPR_OP_SUB || nodes[cond->a].op != EXPR_OP_NUM || !isfinite(nodes[cond->a].value)) break;
        if (nodes[cond->b].op == EXPR_OP_NUM || (*x != EXPR_NONE && cond->b != *x)) break;
        if (nodes[sel->b].op != EXPR_OP_NUM) break;
        *x = cond->b;
        st->t[n] = nodes[cond->a].value;
        st->v[n++] = nodes[sel->b].value;
        e = sel->c;
    }
    if (n < 2) return 0;
    st->n = n;
    st->v[n] = nodes[e].op == EXPR_OP_NUM ? nodes[e].value : 0.0;
    *tail = nodes[e].op == EXPR_OP_NUM ? EXPR_NONE : e;
    return 1;
}

ExprProgram *expr_compile(ExprCtx *ctx, const Expr *outputs, int n_outputs) {
    const ExprNode *ctx_nodes = expr_ctx_nodes(ctx);
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
    int32_t *uses = xcalloc(n, sizeof *uses);
    unsigned char *needed = xcalloc(n, 1), *pinned = xcalloc(n, 1), *fused = xcalloc(n, 1);
    int32_t *reg_of = xmalloc((n ? n : 1) * sizeof *reg_of);
    for (int k = 0; k < n_outputs; k++) pinned[outputs[k]] = 1;
    // select chains by level become one instruction each: rewrite their heads
    // in a copy of the nodes, then count again what is read
    count_uses(ctx_nodes, top, outputs, n_outputs, needed, uses);
    ExprNode *nodes = xmalloc(n * sizeof *nodes);
    memcpy(nodes, ctx_nodes, n * sizeof *nodes);
    ExprStepTable *steps = xmalloc(n * sizeof *steps);
    int num_steps = 0;
    for (Expr i = 0; i <= top; i++) {
        Expr x, tail;
        if (!needed[i] || !steps_chain(ctx_nodes, uses, pinned, i, &steps[num_steps], &x, &tail)) continue;
        nodes[i] = (ExprNode){STEPS_OP, x, tail, EXPR_NONE, EXPR_NONE, (double)num_steps++};
    }
    ExprStepTable *fit = realloc(steps, (size_t)(num_steps ? num_steps : 1) * sizeof *steps);
    if (fit) steps = fit;  // (shrinking: keeping the larger block is fine too)
    memset(needed, 0, n);
    memset(uses, 0, n * sizeof *uses);
    count_uses(nodes, top, outputs, n_outputs, needed, uses);

    ExprProgram *p = xcalloc(1, sizeof *p);
    p->steps = steps;
    p->num_syms = expr_num_syms(ctx);
    p->used_syms = xmalloc((size_t)p->num_syms * sizeof *p->used_syms);
    p->sym_pos = xmalloc((size_t)p->num_syms * sizeof *p->sym_pos);
    for (int s = 0; s < p->num_syms; s++) p->sym_pos[s] = -1;
    for (Expr i = 0; i <= top; i++)
        if (needed[i] && nodes[i].op == EXPR_OP_SYM) {
            p->sym_pos[nodes[i].a] = p->num_used_syms;
            p->used_syms[p->num_used_syms++] = nodes[i].a;
        }
    // sorted by symbol index: symbols are created in index order, so already ascending
    size_t cap = 5 * n + 4;  // each node gives at most 1 instruction + 4 fills
    size_t num_tables = 0;
    for (Expr i = 0; i <= top; i++)
        if (nodes[i].op == EXPR_OP_OVERLAP && (size_t)nodes[i].value + 1 > num_tables) num_tables = (size_t)nodes[i].value + 1;
    p->tables = xmalloc(num_tables * sizeof *p->tables);
    if (num_tables) memcpy(p->tables, expr_ctx_overlap_tables(ctx), num_tables * sizeof *p->tables);
    p->code = xmalloc(cap * sizeof *p->code);
    RegAlloc ra = {xmalloc((cap + 1) * sizeof(int32_t)), 0, 0};
    int32_t num_order;
    Expr *order = schedule(nodes, top, outputs, n_outputs, needed, &num_order);

    // a select's condition y + k read by nothing else is tested inside the
    // select as y + k > 0: the same sum, one instruction less
    for (int32_t oi = 0; oi < num_order; oi++) {
        const ExprNode *nd = &nodes[order[oi]];
        if (nd->op != EXPR_OP_SELECT) continue;
        Expr c = nd->a;
        if (nodes[c].op == EXPR_OP_ADD && nodes[nodes[c].b].op == EXPR_OP_NUM && nodes[nodes[c].a].op != EXPR_OP_NUM &&
            uses[c] == 1 && !pinned[c])
            fused[c] = 1;
        // likewise p - q with both branches computed: p - q > 0 exactly when p > q
        // (a difference of doubles is 0 only for equal ones and keeps its sign;
        // infinities and NaN answer the same both ways), so the select tests p > q
        if (nodes[c].op == EXPR_OP_SUB && nodes[nodes[c].a].op != EXPR_OP_NUM && nodes[nodes[c].b].op != EXPR_OP_NUM &&
            nodes[nd->b].op != EXPR_OP_NUM && nodes[nd->c].op != EXPR_OP_NUM && uses[c] == 1 && !pinned[c])
            fused[c] = 1;
    }

    // a product y * k read only by a sum or a max goes into that instruction:
    // y * k + z, y * k + c and max(y * k, z * c) (each product rounded on its
    // own as in expr_eval: no fused multiply-add)
    #define SCALED(e) (nodes[e].op == EXPR_OP_MUL && nodes[nodes[e].b].op == EXPR_OP_NUM && \
                       nodes[nodes[e].a].op != EXPR_OP_NUM && uses[e] == 1 && !pinned[e] && !fused[e])
    unsigned char *fuse_kind = xcalloc(n, 1);  // 1: y*k + z (product a), 2: z + y*k (product b), 3: max
    for (int32_t oi = 0; oi < num_order; oi++) {
        Expr i = order[oi];
        const ExprNode *nd = &nodes[i];
        if (fused[i]) continue;  // a select's condition, computed inside the select
        if (nd->op == EXPR_OP_ADD && nd->a != nd->b) {
            if (SCALED(nd->a)) fused[nd->a] = 1, fuse_kind[i] = 1;
            else if (SCALED(nd->b) && nodes[nd->a].op != EXPR_OP_NUM) fused[nd->b] = 1, fuse_kind[i] = 2;
        } else if (nd->op == EXPR_OP_MAX && nd->a != nd->b && SCALED(nd->a) && SCALED(nd->b)) {
            fused[nd->a] = fused[nd->b] = 1, fuse_kind[i] = 3;
        }
    }
    #undef SCALED
    // a sum read only by another sum goes into it: (x + y) + z, one instruction
    // (the same two roundings in the same order)
    #define PLAIN_SUM(e) (nodes[e].op == EXPR_OP_ADD && uses[e] == 1 && !pinned[e] && !fused[e] && !fuse_kind[e] && \
                          nodes[nodes[e].a].op != EXPR_OP_NUM && nodes[nodes[e].b].op != EXPR_OP_NUM)
    for (int32_t oi = 0; oi < num_order; oi++) {
        Expr i = order[oi];
        const ExprNode *nd = &nodes[i];
        if (fused[i] || fuse_kind[i] || nd->op != EXPR_OP_ADD || nd->a == nd->b) continue;
        if (nodes[nd->a].op == EXPR_OP_NUM || nodes[nd->b].op == EXPR_OP_NUM) continue;
        if (PLAIN_SUM(nd->a)) fused[nd->a] = 1, fuse_kind[i] = 4;
        else if (PLAIN_SUM(nd->b)) fused[nd->b] = 1, fuse_kind[i] = 5;
    }
    #undef PLAIN_SUM

    for (int32_t oi = 0; oi < num_order; oi++) {
        Expr i = order[oi];
        if (fused[i]) continue;
        if (fuse_kind[i] >= 4) {  // (x + y) + z
            const ExprNode *nd = &nodes[i];
            Expr sum = fuse_kind[i] == 4 ? nd->a : nd->b, other = fuse_kind[i] == 4 ? nd->b : nd->a;
            Expr src[3] = {nodes[sum].a, nodes[sum].b, other};
            Instr in = {PI_ADD3, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, NULL, NULL};
            int32_t *fld[3] = {&in.a, &in.b, &in.c};
            for (int j = 0; j < 3; j++) {
                const ExprNode *sn = &nodes[src[j]];
                *fld[j] = sn->op == EXPR_OP_SYM ? -sn->a - 1 : reg_of[src[j]];
            }
            in.dst = reg_take(&ra);
            reg_of[i] = in.dst;
            p->code[p->num_code++] = in;
            for (int j = 0; j < 3; j++) {
                const ExprNode *sn = &nodes[src[j]];
                if (sn->op == EXPR_OP_SYM) continue;
                if (--uses[src[j]] == 0 && !pinned[src[j]]) reg_give(&ra, reg_of[src[j]]);
            }
            continue;
        }
        if (fuse_kind[i]) {
            const ExprNode *nd = &nodes[i];
            Expr prod = fuse_kind[i] == 2 ? nd->b : nd->a, other = fuse_kind[i] == 2 ? nd->a : nd->b;
            Expr src[2] = {nodes[prod].a, fuse_kind[i] == 3 ? nodes[other].a : other};
            Instr in = {PI_MULADD_K, 0, 0, 0, 0, 0, nodes[nodes[prod].b].value, 0.0, 0.0, NULL, NULL};
            int nsrc = 2;
            if (fuse_kind[i] == 3) in.op = PI_MAXMUL_KK, in.k1 = nodes[nodes[other].b].value;
            else if (nodes[other].op == EXPR_OP_NUM) in.op = PI_MULADD_KK, in.k1 = nodes[other].value, nsrc = 1;
            int32_t *fld[2] = {&in.a, &in.b};
            for (int j = 0; j < nsrc; j++) {
                const ExprNode *sn = &nodes[src[j]];
                *fld[j] = sn->op == EXPR_OP_SYM ? -sn->a - 1 : reg_of[src[j]];
            }
            in.dst = reg_take(&ra);
            reg_of[i] = in.dst;
            p->code[p->num_code++] = in;
            for (int j = 0; j < nsrc; j++) {
                const ExprNode *sn = &nodes[src[j]];
                if (sn->op == EXPR_OP_NUM || sn->op == EXPR_OP_SYM) continue;
                if (--uses[src[j]] == 0 && !pinned[src[j]]) reg_give(&ra, reg_of[src[j]]);
            }
            continue;
        }
        const ExprNode *nd = &nodes[i];
        Expr src[4] = {nd->a, nd->b, nd->c, nd->d};
        double cond_offset = 0.0;
        int sel_gt = nd->op == EXPR_OP_SELECT && fused[src[0]] && nodes[src[0]].op == EXPR_OP_SUB;
        if (sel_gt) {  // p - q > 0 as p > q: operands p, then the branches, q fourth
            src[3] = nodes[src[0]].b;
            src[0] = nodes[src[0]].a;
        } else if (nd->op == EXPR_OP_SELECT && fused[src[0]]) {
            cond_offset = nodes[nodes[src[0]].b].value;
            src[0] = nodes[src[0]].a;
        }
        const ExprOverlapTable *tbl = nd->op == EXPR_OP_OVERLAP ? &p->tables[(int)nd->value] : NULL;
        int nsrc = tbl ? tbl->n : nd->op == EXPR_OP_SELECT ? 3 : (nd->op == EXPR_OP_CEIL || nd->op == EXPR_OP_FLOOR) ? 1 : 2;
        if (nd->op == STEPS_OP) nsrc = nd->b == EXPR_NONE ? 1 : 2;
        if (sel_gt) nsrc = 4;
        int32_t enc[4] = {0, 0, 0, 0};
        int is_const[4] = {0, 0, 0, 0};
        for (int j = 0; j < nsrc; j++) {
            const ExprNode *s = &nodes[src[j]];
            if (s->op == EXPR_OP_NUM) is_const[j] = 1;
            else enc[j] = s->op == EXPR_OP_SYM ? -s->a - 1 : reg_of[src[j]];
        }
        Instr in = {0, 0, enc[0], enc[1], enc[2], enc[3], 0.0, 0.0, 0.0, tbl, NULL};
        int fill_needed[4] = {0, 0, 0, 0};
        if (sel_gt) {
            in.op = PI_SEL_GT;  // no operand is a constant (the fusion's condition)
        } else if (nd->op == STEPS_OP) {
            // x and a tail are never constants (steps_chain)
            in.op = nd->b == EXPR_NONE ? PI_STEPS : PI_STEPS_X;
            in.steps = &p->steps[(int)nd->value];
        } else if (tbl) {
            // constant inputs (rare: the builder drops idle ones) go through fills
            in.op = PI_OVERLAP2 + (tbl->n - 2);
            for (int j = 0; j < nsrc; j++) fill_needed[j] = is_const[j];
        } else if (nd->op == EXPR_OP_SELECT) {
            // the condition is never constant (the builder picks the branch)
            in.k = cond_offset;
            if (is_const[1]) in.k1 = nodes[src[1]].value;
            if (is_const[2]) in.k2 = nodes[src[2]].value;
            in.op = is_const[1] ? (is_const[2] ? PI_SEL_KK : PI_SEL_KX) : is_const[2] ? PI_SEL_XK : PI_SELECT;
            fill_needed[0] = is_const[0];
        } else if (nsrc == 2 && (is_const[0] || is_const[1])) {
            // one constant operand (two are folded away by the builder)
            int kb = is_const[1];
            double kv = nodes[src[kb ? 1 : 0]].value;
            in.k = kv;
            in.a = kb ? enc[0] : enc[1];
            switch ((ExprOp)nd->op) {
            case EXPR_OP_ADD: in.op = PI_ADD_K; break;  // k + a == a + k exactly
            case EXPR_OP_MUL: in.op = PI_MUL_K; break;
            case EXPR_OP_MAX: in.op = kb ? PI_MAX_K : PI_K_MAX; break;  // operand order kept: signed zeros
            case EXPR_OP_MIN: in.op = kb ? PI_MIN_K : PI_K_MIN; break;
            case EXPR_OP_SUB: in.op = kb ? PI_SUB_K : PI_K_SUB; break;
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
        } else {
            static const int32_t plain[EXPR_OP_COUNT] = {
                [EXPR_OP_ADD] = PI_ADD, [EXPR_OP_SUB] = PI_SUB, [EXPR_OP_MUL] = PI_MUL,
                [EXPR_OP_DIV] = PI_DIV, [EXPR_OP_MAX] = PI_MAX, [EXPR_OP_MIN] = PI_MIN,
                [EXPR_OP_CEIL] = PI_CEIL, [EXPR_OP_FLOOR] = PI_FLOOR};
            in.op = plain[nd->op];
            for (int j = 0; j < nsrc; j++) fill_needed[j] = is_const[j];
        }
        // constants that no instruction variant absorbs go through a filled register
        int32_t fill_regs[4] = {-1, -1, -1, -1};
        int32_t *fld[4] = {&in.a, &in.b, &in.c, &in.e};
        for (int j = 0; j < nsrc; j++) {
            if (!fill_needed[j]) continue;
            fill_regs[j] = reg_take(&ra);
            p->code[p->num_code++] = (Instr){PI_FILL, fill_regs[j], 0, 0, 0, 0, nodes[src[j]].value, 0.0, 0.0, NULL, NULL};
            *fld[j] = fill_regs[j];
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
    compute_deps(p);
    for (int v = 0; v < EXPR_VARIANTS; v++) atomic_init(&p->variants[v], NULL);
    free(ra.free_regs);
    free(order);
    free(uses);
    free(needed);
    free(pinned);
    free(fused);
    free(fuse_kind);
    free(reg_of);
    free(nodes);
    return p;
}

static void variant_free(Variant *v) {
    if (!v) return;
    free(v->scalar);
    free(v->scalar_slot);
    free(v->scalar_deps);
    free(v->patch_deps);
    free(v->code);
    free(v->patch);
    free(v->outs);
    free(v);
}

void expr_program_free(ExprProgram *p) {
    if (!p) return;
    for (int v = 0; v < EXPR_VARIANTS; v++) variant_free(atomic_load(&p->variants[v]));
    free(p->code);
    free(p->outs);
    free(p->used_syms);
    free(p->sym_pos);
    free(p->deps);
    free(p->tables);
    free(p->steps);
    free(p);
}

int expr_program_num_instructions(const ExprProgram *p) { return p->num_code; }
int expr_program_num_registers(const ExprProgram *p) { return p->num_regs; }
int expr_program_num_syms(const ExprProgram *p) { return p->num_syms; }

// ---- hoisting variants

// The instructions of p that depend only on the uniform symbols in mask
// become scalar instructions over value slots; the others are copied with
// hoisted operands turned into constants (patched per block) and registers
// allocated anew for the shorter program.
static Variant *variant_build(const ExprProgram *p, uint64_t mask) {
    const int nc = p->num_code;
    Variant *v = xcalloc(1, sizeof *v);
    v->mask = mask;
    v->scalar = xmalloc((size_t)nc * sizeof *v->scalar);
    v->scalar_slot = xmalloc((size_t)nc * sizeof *v->scalar_slot);
    v->code = xmalloc(((size_t)5 * nc + 1) * sizeof *v->code);  // each may need up to 4 fills
    v->patch = xmalloc(((size_t)4 * nc + 1) * sizeof *v->patch);
    v->outs = xmalloc((size_t)p->num_outs * sizeof *v->outs);

    // value ids: instruction i's result is value i; fills of hoisted values
    // in the variant get ids nc, nc + 1, ...
    int32_t *writer = xmalloc(((size_t)p->num_regs + 1) * sizeof *writer);
    unsigned char *hoisted = xcalloc((size_t)nc, 1);
    int32_t *val_of = xmalloc(((size_t)5 * nc + 1) * 4 * sizeof(int32_t));  // (variant instr, operand) -> value id
    int32_t *last_use = xmalloc(((size_t)5 * nc + 1) * sizeof *last_use);   // value id -> variant instr
    int32_t *def_val = xmalloc(((size_t)5 * nc + 1) * sizeof *def_val);    // variant instr -> value it writes
    int num_fills = 0;
    // slot of an operand that is hoisted, else -1
    #define SLOT_OF(o) ((o) >= 0 ? (hoisted[writer[o]] ? writer[o] : -1) \
                        : ((mask >> p->sym_pos[-(o) - 1]) & 1) ? nc + p->sym_pos[-(o) - 1] : -1)
    for (int i = 0; i < nc; i++) {
        const Instr *in = &p->code[i];
        int32_t ops[4] = {in->a, in->b, in->c, in->e}, slots[4] = {-1, -1, -1, -1};
        for (int j = 0; j < 4; j++)
            if (op_reads(in->op, j)) slots[j] = SLOT_OF(ops[j]);
        if ((p->deps[i] & ~mask) == 0) {  // every operand hoisted (or none): hoisted too
            hoisted[i] = 1;
            v->scalar[v->num_scalar] =
                (ScalarInstr){in->op, slots[0], slots[1], slots[2], slots[3], in->k, in->k1, in->k2, in->tbl, in->steps};
            v->scalar_slot[v->num_scalar++] = i;
            writer[in->dst] = i;
            continue;
        }
        Instr out = *in;
        int npatch = 0;
        Patch pt[4];
        // a binary op with one hoisted operand becomes its constant form (both
        // hoisted would have made the instruction hoisted)
        if (in->op <= PI_MIN && (slots[0] >= 0 || slots[1] >= 0)) {
            int kb = slots[1] >= 0;  // the constant is the right operand
            static const int32_t right[] = {PI_ADD_K, PI_SUB_K, PI_MUL_K, PI_DIV_K, PI_MAX_K, PI_MIN_K};
            static const int32_t left[] = {PI_ADD_K, PI_K_SUB, PI_MUL_K, PI_K_DIV, PI_K_MAX, PI_K_MIN};
            out.op = kb ? right[in->op] : left[in->op];  // k + a == a + k, k * a == a * k exactly
            out.a = kb ? in->a : in->b;
            pt[npatch++] = (Patch){0, 0, kb ? slots[1] : slots[0]};
            slots[0] = slots[1] = -1;
        }
        // y * k + z with z hoisted: y * k + constant; with y hoisted: z + (y * k)
        if (in->op == PI_MULADD_K && slots[1] >= 0 && slots[0] < 0) {
            out.op = PI_MULADD_KK;
            pt[npatch++] = (Patch){0, 1, slots[1]};
            slots[1] = -1;
        } else if (in->op == PI_MULADD_K && slots[0] >= 0 && slots[1] < 0) {
            out.op = PI_ADD_K;  // k stays the multiplier in the variant's code
            out.a = in->b;
            pt[npatch++] = (Patch){0, PATCH_PRODUCT, slots[0]};
            slots[0] = slots[1] = -1;
        }
        // a select's hoisted branch becomes a constant branch
        if (in->op == PI_SELECT || in->op == PI_SEL_KX || in->op == PI_SEL_XK) {
            int kb1 = !op_reads(in->op, 1) || slots[1] >= 0, kb2 = !op_reads(in->op, 2) || slots[2] >= 0;
            if (slots[1] >= 0) pt[npatch++] = (Patch){0, 1, slots[1]}, slots[1] = -1;
            if (slots[2] >= 0) pt[npatch++] = (Patch){0, 2, slots[2]}, slots[2] = -1;
            out.op = kb1 ? (kb2 ? PI_SEL_KK : PI_SEL_KX) : kb2 ? PI_SEL_XK : PI_SELECT;
            if (slots[0] >= 0) {  // the condition is hoisted: picked per block (after the branch patches)
                pt[npatch++] = (Patch){0, PATCH_BRANCH, slots[0]};
                slots[0] = -1;
            }
        }
        // a hoisted operand left (a select's condition, an overlap's input) goes through a fill
        int32_t *fld[4] = {&out.a, &out.b, &out.c, &out.e};
        int32_t opval[4] = {-1, -1, -1, -1};
        int branch_patched = npatch > 0 && pt[npatch - 1].field == PATCH_BRANCH;
        for (int j = 0; j < 4; j++) {
            if (!op_reads(out.op, j) || (j == 0 && branch_patched)) continue;
            if (slots[j] >= 0) {
                int fv = nc + num_fills++;
                int fi = v->num_code++;
                v->code[fi] = (Instr){PI_FILL, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, NULL, NULL};
                def_val[fi] = fv;
                for (int q = 0; q < 4; q++) val_of[4 * fi + q] = -1;
                v->patch[v->num_patch++] = (Patch){fi, 0, slots[j]};
                opval[j] = fv;
                *fld[j] = 0;
            } else if (*fld[j] >= 0) {
                opval[j] = writer[*fld[j]];
            }
        }
        int vi = v->num_code++;
        for (int q = 0; q < npatch; q++) pt[q].instr = vi, v->patch[v->num_patch++] = pt[q];
        v->code[vi] = out;
        def_val[vi] = i;
        for (int q = 0; q < 4; q++) val_of[4 * vi + q] = opval[q];
        writer[in->dst] = i;
    }
    #undef SLOT_OF
    v->scalar_deps = xmalloc(((size_t)v->num_scalar + 1) * sizeof *v->scalar_deps);
    for (int q = 0; q < v->num_scalar; q++) v->scalar_deps[q] = p->deps[v->scalar_slot[q]];
    v->patch_deps = xmalloc(((size_t)v->num_patch + 1) * sizeof *v->patch_deps);
    for (int q = 0; q < v->num_patch; q++) {
        int32_t slot = v->patch[q].slot;
        v->patch_deps[q] = slot < nc ? p->deps[slot] : (uint64_t)1 << (slot - nc);
        // a branch pick also redoes itself when a branch constant changes
        // (patches of one instruction are consecutive, the pick last)
        for (int r = q - 1; v->patch[q].field == PATCH_BRANCH && r >= 0 && v->patch[r].instr == v->patch[q].instr; r--)
            v->patch_deps[q] |= v->patch_deps[r];
    }

    // outputs: a value computed per candidate, hoisted, a symbol or a constant
    int nvals = nc + num_fills;
    unsigned char *pinned = xcalloc((size_t)nvals, 1);
    for (int k = 0; k < p->num_outs; k++) {
        Output o = p->outs[k];
        if (o.kind == OUT_FROM_OPERAND && o.operand >= 0) {
            int w = writer[o.operand];
            if (hoisted[w]) o = (Output){OUT_SCALAR, w, 0.0};
            else pinned[w] = 1, o.operand = w;  // value id, a register below
        }
        v->outs[k] = o;
    }
    // registers: linear scan over the variant's code, the destination taken
    // before the operands are released (never aliases them)
    for (int q = 0; q < nvals; q++) last_use[q] = -1;
    for (int vi = 0; vi < v->num_code; vi++)
        for (int q = 0; q < 4; q++)
            if (val_of[4 * vi + q] >= 0) last_use[val_of[4 * vi + q]] = vi;
    int32_t *reg_of = xmalloc(((size_t)nvals + 1) * sizeof *reg_of);
    RegAlloc ra = {xmalloc(((size_t)v->num_code + 1) * sizeof(int32_t)), 0, 0};
    for (int vi = 0; vi < v->num_code; vi++) {
        Instr *in = &v->code[vi];
        int32_t *fld[4] = {&in->a, &in->b, &in->c, &in->e};
        for (int q = 0; q < 4; q++)
            if (val_of[4 * vi + q] >= 0) *fld[q] = reg_of[val_of[4 * vi + q]];
        int d = def_val[vi];
        in->dst = reg_of[d] = reg_take(&ra);
        for (int q = 0; q < 4; q++) {
            int u = val_of[4 * vi + q];
            int dup = 0;  // an operand read twice is released once
            for (int r = 0; r < q; r++) dup |= val_of[4 * vi + r] == u;
            if (u >= 0 && !dup && last_use[u] == vi && !pinned[u]) reg_give(&ra, reg_of[u]);
        }
        if (last_use[d] < 0 && !pinned[d]) reg_give(&ra, in->dst);  // dead (cannot happen: kept for safety)
    }
    for (int k = 0; k < p->num_outs; k++)
        if (v->outs[k].kind == OUT_FROM_OPERAND && p->outs[k].kind == OUT_FROM_OPERAND && p->outs[k].operand >= 0)
            v->outs[k].operand = reg_of[v->outs[k].operand];
    v->num_regs = ra.num_regs;
    free(ra.free_regs);
    free(reg_of);
    free(pinned);
    free(writer);
    free(hoisted);
    free(val_of);
    free(last_use);
    free(def_val);
    return v;
}

// the cached variant for mask, built on first use; NULL when the cache is
// full (the caller builds a private one)
// (build 0: only a cached one, else NULL)
static Variant *variant_get(const ExprProgram *cp, uint64_t mask, int build) {
    ExprProgram *p = (ExprProgram *)cp;  // the cache is the only state evaluation changes
    for (int s = 0; s < EXPR_VARIANTS; s++) {
        Variant *v = atomic_load_explicit(&p->variants[s], memory_order_acquire);
        if (!v && !build) return NULL;
        if (!v) {
            Variant *mine = variant_build(cp, mask), *expected = NULL;
            if (atomic_compare_exchange_strong_explicit(&p->variants[s], &expected, mine, memory_order_acq_rel,
                                                        memory_order_acquire))
                return mine;
            variant_free(mine);  // another thread filled the slot: look at what it holds
            v = expected;
        }
        if (v->mask == mask) return v;
    }
    return NULL;
}

// ---- evaluation

#define B EXPR_BLOCK

// bit u set: used symbol u has one value (bitwise) in every lane of the block
static uint64_t uniform_mask(const ExprProgram *p, const double *const *syms) {
    uint64_t mask = 0;
    for (int u = 0; u < p->num_used_syms; u++) {
        const uint64_t *col = (const uint64_t *)syms[p->used_syms[u]];
        uint64_t first = col[0], diff = (col[1] ^ first) | (col[B - 1] ^ first);
        if (diff) continue;  // a swept column mostly differs at once: no scan
        for (int j = 2; j < B - 1; j++) diff |= col[j] ^ first;
        if (!diff) mask |= (uint64_t)1 << u;
    }
    return mask;
}

// the same for the m candidates from base of the caller's columns (a padded
// tail repeats its last candidate, which changes nothing)
static uint64_t uniform_mask_at(const ExprProgram *p, const double *const *sym_columns, size_t base, size_t m) {
    uint64_t mask = 0;
    for (int u = 0; u < p->num_used_syms; u++) {
        const uint64_t *col = (const uint64_t *)(sym_columns[p->used_syms[u]] + base);
        uint64_t first = col[0], diff = 0;
        for (size_t j = 1; j < m; j++) diff |= col[j] ^ first;
        if (!diff) mask |= (uint64_t)1 << u;
    }
    return mask;
}

static void write_outputs(const Output *outs, int num_outs, const double *regs, const double *const *syms,
                          const double *val, double *const *out_columns, size_t base, size_t m) {
    for (int k = 0; k < num_outs; k++) {
        if (!out_columns[k]) continue;  // not wanted
        double *out = out_columns[k] + base;
        const Output *o = &outs[k];
        if (o->kind == OUT_CONST || o->kind == OUT_SCALAR) {
            double value = o->kind == OUT_CONST ? o->k : val[o->operand];
            for (size_t j = 0; j < m; j++) out[j] = value;
        } else {
            const double *src = o->operand >= 0 ? regs + (size_t)o->operand * B : syms[-o->operand - 1];
            memcpy(out, src, m * sizeof(double));
        }
    }
}

void expr_program_eval(const ExprProgram *p, const double *const *sym_columns,
                       double *const *out_columns, size_t n) {
    // regs: (num_regs, B), grown for a variant that needs more;
    // tail_syms: (num_used_syms, B) padded copy of the last partial block;
    // val: hoisted values, (num_code + num_used_syms,);
    // work: the current variant's code with its hoisted constants patched in
    size_t reg_cap = (size_t)p->num_regs + 1, work_cap = 0;
    double *regs = aligned_alloc(64, reg_cap * B * sizeof(double));
    double *tail_syms = aligned_alloc(64, ((size_t)p->num_used_syms + 1) * B * sizeof(double));
    const double **syms = calloc((size_t)p->num_syms + 1, sizeof *syms);
    double *val = NULL, *prev_uniform = NULL;
    Instr *work = NULL;
    if (!regs || !tail_syms || !syms) die_oom("evaluating an expression program");
    const Variant *current = NULL;  // the variant whose values val and work hold
    uint64_t prev_mask = 0;         // the previous block's uniform set
    Variant *private_variant = NULL;
    for (size_t base = 0; base < n; base += B) {
        size_t m = n - base < B ? n - base : B;
        if (m == B) {
            for (int u = 0; u < p->num_used_syms; u++) {
                int s = p->used_syms[u];
                syms[s] = sym_columns[s] + base;
            }
        } else {
            // the loops always run B lanes: pad the tail with its last candidate
            // (any value is harmless; repeating one keeps uniform columns uniform)
            for (int u = 0; u < p->num_used_syms; u++) {
                int s = p->used_syms[u];
                double *col = tail_syms + (size_t)u * B;
                memcpy(col, sym_columns[s] + base, m * sizeof(double));
                for (size_t j = m; j < B; j++) col[j] = col[m - 1];
                syms[s] = col;
            }
        }
        uint64_t mask = p->hoistable ? uniform_mask(p, syms) : 0;
        const Variant *cached = !mask ? NULL : current && current->mask == mask ? current : variant_get(p, mask, 0);
        // a variant not built yet is built only for a uniform set that lasts: one that is also
        // the set of the block before or after (building costs far more than one block; a
        // search's blocks that straddle groups of rows have sets seen once)
        int lasting = mask && (cached || mask == prev_mask);
        if (mask && !lasting && base + B < n)
            lasting = uniform_mask_at(p, sym_columns, base + B, n - base - B < B ? n - base - B : B) == mask;
        prev_mask = mask;
        if (!lasting) {
            expr_run_block(p->code, p->num_code, regs, syms, m);
            write_outputs(p->outs, p->num_outs, regs, syms, val, out_columns, base, m);
            continue;
        }
        if (!val) {
            val = calloc((size_t)p->num_code + p->num_used_syms + 1, sizeof *val);
            prev_uniform = calloc((size_t)p->num_used_syms + 1, sizeof *prev_uniform);
            if (!val || !prev_uniform) die_oom("evaluating an expression program");
        }
        const Variant *v = cached ? cached : variant_get(p, mask, 1);
        if (!v) {  // cache full: a private variant for this call
            if (!private_variant || private_variant->mask != mask) {
                variant_free(private_variant);
                private_variant = variant_build(p, mask);
                current = NULL;  // a new variant, maybe at the old one's address
            }
            v = private_variant;
        }
        // hoisted values: all of them for a variant just switched to, else
        // those depending on a uniform symbol whose value changed
        uint64_t changed = 0;
        for (int u = 0; u < p->num_used_syms; u++)
            if (((mask >> u) & 1) && memcmp(&prev_uniform[u], syms[p->used_syms[u]], sizeof(double)) != 0) {
                changed |= (uint64_t)1 << u;
                prev_uniform[u] = val[p->num_code + u] = syms[p->used_syms[u]][0];
            }
        if (v != current) {
            if ((size_t)v->num_regs + 1 > reg_cap) {
                free(regs);
                reg_cap = (size_t)v->num_regs + 1;
                regs = aligned_alloc(64, reg_cap * B * sizeof(double));
                if (!regs) die_oom("evaluating an expression program");
            }
            if ((size_t)v->num_code + 1 > work_cap) {
                free(work);
                work_cap = (size_t)v->num_code + 1;
                work = malloc(work_cap * sizeof *work);
                if (!work) die_oom("evaluating an expression program");
            }
            for (int u = 0; u < p->num_used_syms; u++)
                if ((mask >> u) & 1) prev_uniform[u] = val[p->num_code + u] = syms[p->used_syms[u]][0];
            memcpy(work, v->code, (size_t)v->num_code * sizeof *work);
            changed = ~(uint64_t)0;
        }
        if (changed) {
            expr_run_scalar(v->scalar, v->scalar_slot, v->scalar_deps, v->num_scalar, val, changed);
            for (int q = 0; q < v->num_patch; q++) {
                if (!(v->patch_deps[q] & changed) && v->patch_deps[q]) continue;
                const Patch *pt = &v->patch[q];
                Instr *w = &work[pt->instr];
                const Instr *orig = &v->code[pt->instr];
                if (pt->field == 0) w->k = val[pt->slot];
                else if (pt->field == 1) w->k1 = val[pt->slot];
                else if (pt->field == 2) w->k2 = val[pt->slot];
                else if (pt->field == PATCH_PRODUCT) w->k = val[pt->slot] * orig->k;
                else {  // PATCH_BRANCH: the select's pick for this block
                    int first = op_select(val[pt->slot], orig->k, 1.0, 0.0) > 0;
                    int branch_is_reg = op_reads(orig->op, first ? 1 : 2);
                    w->op = branch_is_reg ? PI_MOV : PI_FILL;
                    w->a = first ? orig->b : orig->c;
                    w->k = first ? w->k1 : w->k2;
                }
            }
            current = v;
        }
        expr_run_block(work, v->num_code, regs, syms, m);
        write_outputs(v->outs, p->num_outs, regs, syms, val, out_columns, base, m);
    }
    variant_free(private_variant);
    free(regs);
    free(tail_syms);
    free(syms);
    free(val);
    free(prev_uniform);
    free(work);
}


