// The compiler of flat programs (contract in expr.h; evaluation in
// expr_program.c, block kernels in expr_block.c).
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
#include "expr/expr.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expr/expr_node.h"
#include "expr/expr_program_internal.h"

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

// The compiler's working state over the nodes up to the last output (n of them).
typedef struct {
    const ExprNode *nodes;        // the context's nodes, select chains by level rewritten (a copy)
    size_t n;
    int32_t *uses;                // how many instructions read node i (0 = not needed)
    unsigned char *needed;        // node i is computed for the outputs
    unsigned char *pinned;        // node i is an output: its register is never given back
    unsigned char *fused;         // node i is computed inside the instruction of its only reader
    unsigned char *fuse_kind;     // what node i absorbs: 1 y*k + z (product a), 2 z + y*k (product b),
                                  // 3 max(y*k, z*c), 4 (x + y) + z (sum a), 5 z + (x + y) (sum b)
    int32_t *reg_of;              // the register holding node i's value
    Expr *order;                  // the needed non-leaf nodes in evaluation order (schedule)
    int32_t num_order;
    RegAlloc ra;
    ExprProgram *p;
} Compiler;

// the highest output handle; a handle that is not a node of ctx aborts
static Expr check_outputs(ExprCtx *ctx, const Expr *outputs, int n_outputs) {
    size_t total = expr_ctx_num_nodes(ctx);
    Expr top = -1;
    for (int k = 0; k < n_outputs; k++) {
        if (outputs[k] < 0 || (size_t)outputs[k] >= total) {
            fprintf(stderr, "expr/expr_compile.c: expr_compile: output %d has handle %d, "
                            "not a node of this context (%zu nodes)\n", k, (int)outputs[k], total);
            abort();
        }
        if (outputs[k] > top) top = outputs[k];
    }
    return top;
}

// Select chains by level become one instruction each: their heads are
// rewritten in a copy of the nodes (returned), their tables go to *steps_out,
// then what is read is counted again.
static ExprNode *rewrite_step_chains(Compiler *c, const ExprNode *ctx_nodes, const Expr *outputs, int n_outputs,
                                     ExprStepTable **steps_out) {
    const size_t n = c->n;
    const Expr top = (Expr)n - 1;
    count_uses(ctx_nodes, top, outputs, n_outputs, c->needed, c->uses);
    ExprNode *nodes = xmalloc(n * sizeof *nodes);
    memcpy(nodes, ctx_nodes, n * sizeof *nodes);
    ExprStepTable *steps = xmalloc(n * sizeof *steps);
    int num_steps = 0;
    for (Expr i = 0; i <= top; i++) {
        Expr x, tail;
        if (!c->needed[i] || !steps_chain(ctx_nodes, c->uses, c->pinned, i, &steps[num_steps], &x, &tail)) continue;
        nodes[i] = (ExprNode){STEPS_OP, x, tail, EXPR_NONE, EXPR_NONE, (double)num_steps++};
    }
    ExprStepTable *fit = realloc(steps, (size_t)(num_steps ? num_steps : 1) * sizeof *steps);
    if (fit) steps = fit;  // (shrinking: keeping the larger block is fine too)
    memset(c->needed, 0, n);
    memset(c->uses, 0, n * sizeof *c->uses);
    count_uses(nodes, top, outputs, n_outputs, c->needed, c->uses);
    *steps_out = steps;
    return nodes;
}

// the symbols the program reads, and the context's overlap tables its windows index
static void program_symbols_and_tables(ExprProgram *p, ExprCtx *ctx, const ExprNode *nodes, const unsigned char *needed,
                                       Expr top) {
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
    size_t num_tables = 0;
    for (Expr i = 0; i <= top; i++)
        if (nodes[i].op == EXPR_OP_OVERLAP && (size_t)nodes[i].value + 1 > num_tables) num_tables = (size_t)nodes[i].value + 1;
    p->tables = xmalloc(num_tables * sizeof *p->tables);
    if (num_tables) memcpy(p->tables, expr_ctx_overlap_tables(ctx), num_tables * sizeof *p->tables);
}

// a select's condition y + k read by nothing else is tested inside the
// select as y + k > 0: the same sum, one instruction less
static void fuse_select_conditions(Compiler *cp) {
    const ExprNode *nodes = cp->nodes;
    const int32_t *uses = cp->uses;
    const unsigned char *pinned = cp->pinned;
    for (int32_t oi = 0; oi < cp->num_order; oi++) {
        const ExprNode *nd = &nodes[cp->order[oi]];
        if (nd->op != EXPR_OP_SELECT) continue;
        Expr c = nd->a;
        if (nodes[c].op == EXPR_OP_ADD && nodes[nodes[c].b].op == EXPR_OP_NUM && nodes[nodes[c].a].op != EXPR_OP_NUM &&
            uses[c] == 1 && !pinned[c])
            cp->fused[c] = 1;
        // likewise p - q with both branches computed: p - q > 0 exactly when p > q
        // (a difference of doubles is 0 only for equal ones and keeps its sign;
        // infinities and NaN answer the same both ways), so the select tests p > q
        if (nodes[c].op == EXPR_OP_SUB && nodes[nodes[c].a].op != EXPR_OP_NUM && nodes[nodes[c].b].op != EXPR_OP_NUM &&
            nodes[nd->b].op != EXPR_OP_NUM && nodes[nd->c].op != EXPR_OP_NUM && uses[c] == 1 && !pinned[c])
            cp->fused[c] = 1;
    }
}

// a product y * k read only by a sum or a max goes into that instruction:
// y * k + z, y * k + c and max(y * k, z * c) (each product rounded on its
// own as in expr_eval: no fused multiply-add)
static void fuse_scaled_products(Compiler *c) {
    const ExprNode *nodes = c->nodes;
    const int32_t *uses = c->uses;
    const unsigned char *pinned = c->pinned;
    unsigned char *fused = c->fused, *fuse_kind = c->fuse_kind;
    #define SCALED(e) (nodes[e].op == EXPR_OP_MUL && nodes[nodes[e].b].op == EXPR_OP_NUM && \
                       nodes[nodes[e].a].op != EXPR_OP_NUM && uses[e] == 1 && !pinned[e] && !fused[e])
    for (int32_t oi = 0; oi < c->num_order; oi++) {
        Expr i = c->order[oi];
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
}

// a sum read only by another sum goes into it: (x + y) + z, one instruction
// (the same two roundings in the same order)
static void fuse_nested_sums(Compiler *c) {
    const ExprNode *nodes = c->nodes;
    const int32_t *uses = c->uses;
    const unsigned char *pinned = c->pinned;
    unsigned char *fused = c->fused, *fuse_kind = c->fuse_kind;
    #define PLAIN_SUM(e) (nodes[e].op == EXPR_OP_ADD && uses[e] == 1 && !pinned[e] && !fused[e] && !fuse_kind[e] && \
                          nodes[nodes[e].a].op != EXPR_OP_NUM && nodes[nodes[e].b].op != EXPR_OP_NUM)
    for (int32_t oi = 0; oi < c->num_order; oi++) {
        Expr i = c->order[oi];
        const ExprNode *nd = &nodes[i];
        if (fused[i] || fuse_kind[i] || nd->op != EXPR_OP_ADD || nd->a == nd->b) continue;
        if (nodes[nd->a].op == EXPR_OP_NUM || nodes[nd->b].op == EXPR_OP_NUM) continue;
        if (PLAIN_SUM(nd->a)) fused[nd->a] = 1, fuse_kind[i] = 4;
        else if (PLAIN_SUM(nd->b)) fused[nd->b] = 1, fuse_kind[i] = 5;
    }
    #undef PLAIN_SUM
}

// operand encoding of node e: its symbol column or its register
static int32_t operand_of(const Compiler *c, Expr e) {
    const ExprNode *sn = &c->nodes[e];
    return sn->op == EXPR_OP_SYM ? -sn->a - 1 : c->reg_of[e];
}

// node e has been read once more: its register goes back after its last reader
static void release(Compiler *c, Expr e) {
    const ExprNode *sn = &c->nodes[e];
    if (sn->op == EXPR_OP_NUM || sn->op == EXPR_OP_SYM) return;
    if (--c->uses[e] == 0 && !c->pinned[e]) reg_give(&c->ra, c->reg_of[e]);
}

// append in as node i's instruction; the destination is taken before the
// operands are released, so it never aliases them
static void emit(Compiler *c, Expr i, Instr in) {
    in.dst = reg_take(&c->ra);
    c->reg_of[i] = in.dst;
    c->p->code[c->p->num_code++] = in;
}

// (x + y) + z: node i with the sum it absorbed (fuse_kind 4 or 5)
static void emit_add3(Compiler *c, Expr i) {
    const ExprNode *nodes = c->nodes, *nd = &nodes[i];
    Expr sum = c->fuse_kind[i] == 4 ? nd->a : nd->b, other = c->fuse_kind[i] == 4 ? nd->b : nd->a;
    Expr src[3] = {nodes[sum].a, nodes[sum].b, other};
    Instr in = {PI_ADD3, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, NULL, NULL};
    int32_t *fld[3] = {&in.a, &in.b, &in.c};
    for (int j = 0; j < 3; j++) *fld[j] = operand_of(c, src[j]);
    emit(c, i, in);
    for (int j = 0; j < 3; j++) release(c, src[j]);
}

// y * k + z, y * k + c or max(y * k, z * c): node i with the products it absorbed (fuse_kind 1 to 3)
static void emit_scaled(Compiler *c, Expr i) {
    const ExprNode *nodes = c->nodes, *nd = &nodes[i];
    int kind = c->fuse_kind[i];
    Expr prod = kind == 2 ? nd->b : nd->a, other = kind == 2 ? nd->a : nd->b;
    Expr src[2] = {nodes[prod].a, kind == 3 ? nodes[other].a : other};
    Instr in = {PI_MULADD_K, 0, 0, 0, 0, 0, nodes[nodes[prod].b].value, 0.0, 0.0, NULL, NULL};
    int nsrc = 2;
    if (kind == 3) in.op = PI_MAXMUL_KK, in.k1 = nodes[nodes[other].b].value;
    else if (nodes[other].op == EXPR_OP_NUM) in.op = PI_MULADD_KK, in.k1 = nodes[other].value, nsrc = 1;
    int32_t *fld[2] = {&in.a, &in.b};
    for (int j = 0; j < nsrc; j++) *fld[j] = operand_of(c, src[j]);
    emit(c, i, in);
    for (int j = 0; j < nsrc; j++) release(c, src[j]);
}

// The instruction of a binary node with one constant operand (two are folded
// away by the builder): the constant goes into k.
static void pick_constant_form(Instr *in, const ExprNode *nd, const int is_const[4], const int32_t enc[4], double kv) {
    int kb = is_const[1];
    in->k = kv;
    in->a = kb ? enc[0] : enc[1];
    switch ((ExprOp)nd->op) {
    case EXPR_OP_ADD: in->op = PI_ADD_K; break;  // k + a == a + k exactly
    case EXPR_OP_MUL: in->op = PI_MUL_K; break;
    case EXPR_OP_MAX: in->op = kb ? PI_MAX_K : PI_K_MAX; break;  // operand order kept: signed zeros
    case EXPR_OP_MIN: in->op = kb ? PI_MIN_K : PI_K_MIN; break;
    case EXPR_OP_SUB: in->op = kb ? PI_SUB_K : PI_K_SUB; break;
    case EXPR_OP_DIV:
        in->op = kb ? PI_DIV_K : PI_K_DIV;
        // x / 2^n == x * 2^-n bitwise (both round the same exact value)
        // and a multiply is several times cheaper than a divide
        if (kb && kv != 0 && isfinite(kv) && isnormal(1.0 / kv)) {
            int ex;
            if (fabs(frexp(kv, &ex)) == 0.5) in->op = PI_MUL_K, in->k = 1.0 / kv;
        }
        break;
    default: abort();
    }
}

// Node i as one instruction of its own kind (a select, a window, a chain by
// level, an operation with or without a constant operand); constants that no
// instruction form absorbs go through filled registers first.
static void emit_node(Compiler *c, Expr i) {
    const ExprNode *nodes = c->nodes, *nd = &nodes[i];
    const unsigned char *fused = c->fused;
    ExprProgram *p = c->p;
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
        if (nodes[src[j]].op == EXPR_OP_NUM) is_const[j] = 1;
        else enc[j] = operand_of(c, src[j]);
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
        pick_constant_form(&in, nd, is_const, enc, nodes[src[is_const[1] ? 1 : 0]].value);
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
        fill_regs[j] = reg_take(&c->ra);
        p->code[p->num_code++] = (Instr){PI_FILL, fill_regs[j], 0, 0, 0, 0, nodes[src[j]].value, 0.0, 0.0, NULL, NULL};
        *fld[j] = fill_regs[j];
    }
    emit(c, i, in);
    for (int j = 0; j < nsrc; j++) {
        if (fill_regs[j] >= 0) reg_give(&c->ra, fill_regs[j]);
        release(c, src[j]);
    }
}

// where each output is read from: a register, a symbol column or a constant
static void program_outputs(ExprProgram *p, const Compiler *c, const Expr *outputs, int n_outputs) {
    p->num_outs = n_outputs;
    p->outs = xmalloc((size_t)n_outputs * sizeof *p->outs);
    for (int k = 0; k < n_outputs; k++) {
        const ExprNode *o = &c->nodes[outputs[k]];
        if (o->op == EXPR_OP_NUM) p->outs[k] = (Output){OUT_CONST, 0, o->value};
        else if (o->op == EXPR_OP_SYM) p->outs[k] = (Output){OUT_FROM_OPERAND, -o->a - 1, 0.0};
        else p->outs[k] = (Output){OUT_FROM_OPERAND, c->reg_of[outputs[k]], 0.0};
    }
}

ExprProgram *expr_compile(ExprCtx *ctx, const Expr *outputs, int n_outputs) {
    const Expr top = check_outputs(ctx, outputs, n_outputs);
    const size_t n = (size_t)(top + 1);
    Compiler c = {0};
    c.n = n;
    c.uses = xcalloc(n, sizeof *c.uses);
    c.needed = xcalloc(n, 1), c.pinned = xcalloc(n, 1), c.fused = xcalloc(n, 1);
    c.reg_of = xmalloc((n ? n : 1) * sizeof *c.reg_of);
    for (int k = 0; k < n_outputs; k++) c.pinned[outputs[k]] = 1;
    ExprStepTable *steps;
    ExprNode *nodes = rewrite_step_chains(&c, expr_ctx_nodes(ctx), outputs, n_outputs, &steps);
    c.nodes = nodes;

    ExprProgram *p = c.p = xcalloc(1, sizeof *p);
    p->steps = steps;
    program_symbols_and_tables(p, ctx, nodes, c.needed, top);
    size_t cap = 5 * n + 4;  // each node gives at most 1 instruction + 4 fills
    p->code = xmalloc(cap * sizeof *p->code);
    c.ra = (RegAlloc){xmalloc((cap + 1) * sizeof(int32_t)), 0, 0};
    c.order = schedule(nodes, top, outputs, n_outputs, c.needed, &c.num_order);

    c.fuse_kind = xcalloc(n, 1);
    fuse_select_conditions(&c);
    fuse_scaled_products(&c);
    fuse_nested_sums(&c);
    for (int32_t oi = 0; oi < c.num_order; oi++) {
        Expr i = c.order[oi];
        if (c.fused[i]) continue;
        if (c.fuse_kind[i] >= 4) emit_add3(&c, i);
        else if (c.fuse_kind[i]) emit_scaled(&c, i);
        else emit_node(&c, i);
    }
    p->num_regs = c.ra.num_regs;
    program_outputs(p, &c, outputs, n_outputs);
    compute_deps(p);
    for (int v = 0; v < EXPR_VARIANTS; v++) atomic_init(&p->variants[v], NULL);
    free(c.ra.free_regs);
    free(c.order);
    free(c.uses);
    free(c.needed);
    free(c.pinned);
    free(c.fused);
    free(c.fuse_kind);
    free(c.reg_of);
    free(nodes);
    return p;
}
