// Expression contexts: the hash-consed node arena, declared bounds and the
// simplifying constructors (contract in expr.h). Scalar evaluation is in
// expr_eval.c, printing in expr_print.c.
#include "expr/expr.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expr/expr_node.h"

struct ExprCtx {
    ExprNode *nodes;  // (num_nodes,) children before parents
    size_t num_nodes, cap_nodes;
    Expr *table;      // open-addressing hash of node contents -> handle, EXPR_NONE = empty
    size_t table_cap; // power of two, kept at most half full
    char **sym_names; // (num_syms,) owned copies
    Expr *sym_nodes;  // (num_syms,) node of each symbol
    int num_syms, cap_syms;
    int merge_like_terms; // ex_add merges like terms (expr_ctx_set_merge_like_terms)
    // (cap_nodes,) per node, from the declared symbol bounds: every value the
    // node takes is >= lo (-inf: unknown), and > 0 where pos is set
    double *lo;
    unsigned char *pos;
    ExprOverlapTable *tables;  // (num_tables,) of the overlap nodes, each once
    int num_tables, cap_tables;
};

void expr_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "expr: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

static void *xrealloc(void *p, size_t bytes) {
    void *q = realloc(p, bytes);
    if (!q) expr_die("out of memory growing the expression arena to %zu bytes", bytes);
    return q;
}

ExprCtx *expr_ctx_new(void) {
    ExprCtx *x = calloc(1, sizeof *x);
    if (!x) expr_die("out of memory allocating an expression context");
    x->table_cap = 1024;
    x->table = xrealloc(NULL, x->table_cap * sizeof *x->table);
    for (size_t i = 0; i < x->table_cap; i++) x->table[i] = EXPR_NONE;
    return x;
}

void expr_ctx_free(ExprCtx *x) {
    if (!x) return;
    for (int i = 0; i < x->num_syms; i++) free(x->sym_names[i]);
    free(x->sym_names);
    free(x->sym_nodes);
    free(x->nodes);
    free(x->table);
    free(x->lo);
    free(x->pos);
    free(x->tables);
    free(x);
}

ExprCtx *expr_ctx_clone(const ExprCtx *src) {
    ExprCtx *x = calloc(1, sizeof *x);
    if (!x) expr_die("out of memory cloning an expression context");
    *x = *src;
    x->nodes = xrealloc(NULL, (x->cap_nodes ? x->cap_nodes : 1) * sizeof *x->nodes);
    memcpy(x->nodes, src->nodes, src->num_nodes * sizeof *x->nodes);
    x->table = xrealloc(NULL, x->table_cap * sizeof *x->table);
    memcpy(x->table, src->table, x->table_cap * sizeof *x->table);
    x->lo = xrealloc(NULL, (x->cap_nodes ? x->cap_nodes : 1) * sizeof *x->lo);
    x->pos = xrealloc(NULL, x->cap_nodes ? x->cap_nodes : 1);
    if (src->num_nodes) {
        memcpy(x->lo, src->lo, src->num_nodes * sizeof *x->lo);
        memcpy(x->pos, src->pos, src->num_nodes);
    }
    x->sym_names = xrealloc(NULL, (x->cap_syms ? x->cap_syms : 1) * sizeof *x->sym_names);
    x->sym_nodes = xrealloc(NULL, (x->cap_syms ? x->cap_syms : 1) * sizeof *x->sym_nodes);
    for (int i = 0; i < src->num_syms; i++) {
        size_t len = strlen(src->sym_names[i]);
        x->sym_names[i] = xrealloc(NULL, len + 1);
        memcpy(x->sym_names[i], src->sym_names[i], len + 1);
        x->sym_nodes[i] = src->sym_nodes[i];
    }
    x->tables = xrealloc(NULL, (x->cap_tables ? x->cap_tables : 1) * sizeof *x->tables);
    if (src->num_tables) memcpy(x->tables, src->tables, src->num_tables * sizeof *x->tables);
    return x;
}

size_t expr_ctx_num_nodes(const ExprCtx *x) { return x->num_nodes; }
void expr_ctx_set_merge_like_terms(ExprCtx *x, int on) { x->merge_like_terms = on != 0; }
const ExprNode *expr_ctx_nodes(const ExprCtx *x) { return x->nodes; }
const ExprOverlapTable *expr_ctx_overlap_tables(const ExprCtx *x) { return x->tables; }

// ---- hash-consing

static uint64_t mix64(uint64_t h) {  // splitmix64 finaliser
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    return h ^ (h >> 31);
}

static uint64_t node_hash(const ExprNode *n) {
    uint64_t bits;
    memcpy(&bits, &n->value, sizeof bits);
    // one multiply per field by distinct odd constants (independent, so they
    // overlap in the pipeline), then one finaliser: interning is most of a
    // stage model's build, and four chained finalisers were a tenth of a search
    uint64_t h = (uint64_t)n->op * 0x9e3779b97f4a7c15ULL + (uint64_t)(uint32_t)n->a * 0xc2b2ae3d27d4eb4fULL +
                 (uint64_t)(uint32_t)n->b * 0x165667b19e3779f9ULL + (uint64_t)(uint32_t)n->c * 0xd6e8feb86659fd93ULL +
                 (uint64_t)(uint32_t)n->d * 0xff51afd7ed558ccdULL + bits * 0xc4ceb9fe1a85ec53ULL;
    return mix64(h);
}

// bitwise comparison of the value: -0.0 and 0.0 stay distinct constants
static int node_equal(const ExprNode *p, const ExprNode *q) {
    return p->op == q->op && p->a == q->a && p->b == q->b && p->c == q->c && p->d == q->d &&
           memcmp(&p->value, &q->value, sizeof p->value) == 0;
}

static void table_grow(ExprCtx *x) {
    free(x->table);
    x->table_cap *= 2;
    x->table = xrealloc(NULL, x->table_cap * sizeof *x->table);
    for (size_t i = 0; i < x->table_cap; i++) x->table[i] = EXPR_NONE;
    size_t mask = x->table_cap - 1;
    for (size_t e = 0; e < x->num_nodes; e++) {
        size_t slot = node_hash(&x->nodes[e]) & mask;
        while (x->table[slot] != EXPR_NONE) slot = (slot + 1) & mask;
        x->table[slot] = (Expr)e;
    }
}

// ---- lower bounds from the declared symbol bounds
//
// Rounding to nearest is monotone, so the same operation applied to lower
// bounds of nonnegative operands gives a lower bound of the computed result:
// a >= la, b >= lb implies fl(a + b) >= fl(la + lb), and fl(a * b) >= fl(la *
// lb) when la, lb >= 0. Strict positivity survives a sum with a nonnegative
// term (fl(a + b) >= a when b >= 0) and a product of positive values (no
// underflow to 0: part of the contract, as finite values are).
static void node_bounds(const ExprCtx *x, const ExprNode *n, double *lo, unsigned char *pos) {
    const double unknown = -INFINITY;
    double la = n->a >= 0 && n->op != EXPR_OP_SYM && n->op != EXPR_OP_NUM ? x->lo[n->a] : unknown;
    double lb = n->b >= 0 ? x->lo[n->b] : unknown, lc = n->c >= 0 ? x->lo[n->c] : unknown;
    int pa = n->a >= 0 && n->op != EXPR_OP_SYM && n->op != EXPR_OP_NUM && x->pos[n->a];
    int pb = n->b >= 0 && x->pos[n->b], pc = n->c >= 0 && x->pos[n->c];
    *lo = unknown;
    *pos = 0;
    switch ((ExprOp)n->op) {
    case EXPR_OP_NUM: *lo = n->value, *pos = n->value > 0; return;
    case EXPR_OP_SYM: return;  // set by expr_sym_set_bounds
    case EXPR_OP_ADD:
        if (la > unknown && lb > unknown) *lo = la + lb;
        *pos = (pa && lb >= 0) || (pb && la >= 0);
        break;
    case EXPR_OP_MUL:
        if (la >= 0 && lb >= 0) *lo = la * lb, *pos = pa && pb;
        else if (n->b >= 0 && x->nodes[n->b].op == EXPR_OP_NUM && x->nodes[n->b].value > 0 && la > unknown)
            *lo = la * x->nodes[n->b].value, *pos = pa;  // times a positive constant: monotone
        break;
    case EXPR_OP_DIV:
        if (la >= 0 && pb) {
            *lo = x->nodes[n->b].op == EXPR_OP_NUM ? la / x->nodes[n->b].value : 0.0;
            *pos = pa;
        }
        break;
    case EXPR_OP_MAX: *lo = la > lb ? la : lb, *pos = pa || pb; break;
    case EXPR_OP_MIN: *lo = la < lb ? la : lb, *pos = pa && pb; break;
    case EXPR_OP_CEIL:
        if (la > unknown) *lo = ceil(la);
        if (pa && *lo < 1) *lo = 1;  // the ceiling of a positive value is at least 1
        break;
    case EXPR_OP_FLOOR:
        if (la > unknown) *lo = floor(la);
        break;
    case EXPR_OP_SELECT: *lo = lb < lc ? lb : lc, *pos = pb && pc; break;
    case EXPR_OP_OVERLAP: {
        // a sum of windows and rests, each >= 0; positive when a stream is
        // surely busy (its work > eps): it is either overlapped, and each
        // window is a positive x f, or runs alone and its rest is added
        Expr in[EXPR_OVERLAP_MAX] = {n->a, n->b, n->c, n->d};
        *lo = 0.0;
        for (int i = 0; i < EXPR_OVERLAP_MAX; i++)
            if (in[i] != EXPR_NONE && x->lo[in[i]] > EXPR_OVERLAP_EPS) *pos = 1;
        return;
    }
    default: break;
    }
    if (*lo > 0) *pos = 1;
}

// the handle of a node with these contents, created if new
static Expr intern(ExprCtx *x, ExprNode n) {
    size_t mask = x->table_cap - 1;
    size_t slot = node_hash(&n) & mask;
    while (x->table[slot] != EXPR_NONE) {
        if (node_equal(&x->nodes[x->table[slot]], &n)) return x->table[slot];
        slot = (slot + 1) & mask;
    }
    if (x->num_nodes >= (size_t)INT32_MAX) expr_die("more than 2^31 expression nodes");
    if (x->num_nodes == x->cap_nodes) {
        x->cap_nodes = x->cap_nodes ? 2 * x->cap_nodes : 256;
        x->nodes = xrealloc(x->nodes, x->cap_nodes * sizeof *x->nodes);
        x->lo = xrealloc(x->lo, x->cap_nodes * sizeof *x->lo);
        x->pos = xrealloc(x->pos, x->cap_nodes);
    }
    Expr e = (Expr)x->num_nodes++;
    x->nodes[e] = n;
    node_bounds(x, &n, &x->lo[e], &x->pos[e]);
    x->table[slot] = e;
    if (2 * x->num_nodes > x->table_cap) table_grow(x);
    return e;
}

static ExprNode make_node(ExprOp op, Expr a, Expr b, Expr c) {
    ExprNode n;
    memset(&n, 0, sizeof n);  // padding too: nodes are compared field by field, hashed by value bits
    n.op = op;
    n.a = a;
    n.b = b;
    n.c = c;
    n.d = EXPR_NONE;
    n.value = 0.0;
    return n;
}

void expr_check_handle(const ExprCtx *x, Expr e, const char *who) {
    if (e < 0 || (size_t)e >= x->num_nodes)
        expr_die("%s: operand handle %d is not a node of this context (it has %zu nodes); "
            "hint: an earlier constructor or lookup returned EXPR_NONE",
            who, (int)e, x->num_nodes);
}

// ---- leaves

Expr ex_num(ExprCtx *x, double v) {
    ExprNode n = make_node(EXPR_OP_NUM, EXPR_NONE, EXPR_NONE, EXPR_NONE);
    n.value = v;
    return intern(x, n);
}

int expr_sym_index(ExprCtx *x, const char *name) {
    for (int i = 0; i < x->num_syms; i++)
        if (strcmp(x->sym_names[i], name) == 0) return i;
    return -1;
}

Expr ex_sym(ExprCtx *x, const char *name) {
    if (!name || !*name) expr_die("ex_sym: empty symbol name");
    int i = expr_sym_index(x, name);
    if (i >= 0) return x->sym_nodes[i];
    if (x->num_syms == x->cap_syms) {
        x->cap_syms = x->cap_syms ? 2 * x->cap_syms : 16;
        x->sym_names = xrealloc(x->sym_names, (size_t)x->cap_syms * sizeof *x->sym_names);
        x->sym_nodes = xrealloc(x->sym_nodes, (size_t)x->cap_syms * sizeof *x->sym_nodes);
    }
    size_t len = strlen(name);
    char *copy = xrealloc(NULL, len + 1);
    memcpy(copy, name, len + 1);
    i = x->num_syms++;
    x->sym_names[i] = copy;
    x->sym_nodes[i] = intern(x, make_node(EXPR_OP_SYM, i, EXPR_NONE, EXPR_NONE));
    return x->sym_nodes[i];
}

void expr_sym_set_bounds(ExprCtx *x, const char *name, double lo, int positive) {
    int i = expr_sym_index(x, name);
    if (i < 0) expr_die("expr_sym_set_bounds: no symbol '%s' in this context; hint: create it with ex_sym first", name);
    if (isnan(lo)) expr_die("expr_sym_set_bounds: symbol '%s': the lower bound is NaN", name);
    Expr e = x->sym_nodes[i];
    x->lo[e] = lo;
    x->pos[e] = positive || lo > 0;
}

double expr_lower_bound(const ExprCtx *x, Expr e, int *positive) {
    expr_check_handle(x, e, "expr_lower_bound");
    if (positive) *positive = x->pos[e];
    return x->lo[e];
}

int expr_num_syms(ExprCtx *x) { return x->num_syms; }

const char *expr_sym_name(ExprCtx *x, int i) {
    return i >= 0 && i < x->num_syms ? x->sym_names[i] : NULL;
}

// ---- simplifying constructors

static int is_num(const ExprCtx *x, Expr e) { return x->nodes[e].op == EXPR_OP_NUM; }
static double num_of(const ExprCtx *x, Expr e) { return x->nodes[e].value; }
static int is_num_value(const ExprCtx *x, Expr e, double v) {
    return is_num(x, e) && num_of(x, e) == v;
}
// e is op(y, constant): the constant sits on the right after canonical ordering
static int has_const_right(const ExprCtx *x, Expr e, ExprOp op) {
    return x->nodes[e].op == (int32_t)op && is_num(x, x->nodes[e].b);
}

// canonical operand order of a commutative op: a constant goes right,
// otherwise the older (smaller) handle goes left
static void order_operands(const ExprCtx *x, Expr *a, Expr *b) {
    int swap = is_num(x, *a) ? !is_num(x, *b) : (!is_num(x, *b) && *a > *b);
    if (swap) {
        Expr t = *a;
        *a = *b;
        *b = t;
    }
}

// ---- like terms of a sum

// A sum as coefficient * monomial terms: nested sums and sums scaled by a
// constant are opened, y * c contributes (y, c), constants add up.
#define SUM_MAX_TERMS 32
#define SUM_MAX_DEPTH 8
typedef struct {
    Expr mono;
    double coef;
} SumTerm;

static int gather_terms(const ExprCtx *x, Expr e, double coef, SumTerm *t, int *n, double *k, int *nk, int depth) {
    const ExprNode *nd = &x->nodes[e];
    if (nd->op == EXPR_OP_NUM) {
        *k += coef * nd->value;
        (*nk)++;
        return 1;
    }
    if (depth < SUM_MAX_DEPTH && nd->op == EXPR_OP_ADD) {
        Expr l = nd->a, r = nd->b;
        return gather_terms(x, l, coef, t, n, k, nk, depth + 1) && gather_terms(x, r, coef, t, n, k, nk, depth + 1);
    }
    Expr mono = e;
    if (nd->op == EXPR_OP_MUL && x->nodes[nd->b].op == EXPR_OP_NUM) {
        double c = coef * x->nodes[nd->b].value;
        if (depth < SUM_MAX_DEPTH && x->nodes[nd->a].op == EXPR_OP_ADD)
            return gather_terms(x, nd->a, c, t, n, k, nk, depth + 1);
        mono = nd->a;
        coef = c;
    }
    if (*n == SUM_MAX_TERMS) return 0;
    t[(*n)++] = (SumTerm){mono, coef};
    return 1;
}

static Expr raw_add(ExprCtx *x, Expr a, Expr b) {
    if (a == EXPR_NONE) return b;
    order_operands(x, &a, &b);
    return intern(x, make_node(EXPR_OP_ADD, a, b, EXPR_NONE));
}

// a + b with like terms merged (2*y + 3*y = 5*y, (y + 1)*2 + y*4 = y*6 + 2),
// or EXPR_NONE when no two terms share a monomial and at most one constant
// appears (then the plain sum is as short). Merging re-associates, which is
// exact only when every value is an integer below 2^53: hence opt-in.
static Expr merge_like_terms(ExprCtx *x, Expr a, Expr b) {
    SumTerm t[SUM_MAX_TERMS];
    int n = 0, nk = 0;
    double k = 0;
    if (!gather_terms(x, a, 1.0, t, &n, &k, &nk, 0) || !gather_terms(x, b, 1.0, t, &n, &k, &nk, 0)) return EXPR_NONE;
    for (int i = 1; i < n; i++)  // insertion sort by monomial: a canonical order
        for (int j = i; j > 0 && t[j - 1].mono > t[j].mono; j--) {
            SumTerm tmp = t[j];
            t[j] = t[j - 1];
            t[j - 1] = tmp;
        }
    int m = 0, merged = 0;
    for (int i = 0; i < n; i++) {
        if (m > 0 && t[m - 1].mono == t[i].mono) {
            t[m - 1].coef += t[i].coef;
            merged++;
        } else {
            t[m++] = t[i];
        }
    }
    if (!merged && nk < 2) return EXPR_NONE;
    Expr sum = EXPR_NONE;
    for (int i = 0; i < m; i++) {
        if (t[i].coef == 0) continue;  // finite values: y * 0 = 0
        sum = raw_add(x, sum, t[i].coef == 1 ? t[i].mono : ex_mul(x, t[i].mono, ex_num(x, t[i].coef)));
    }
    if (sum == EXPR_NONE) return ex_num(x, k);
    return k != 0 ? raw_add(x, sum, ex_num(x, k)) : sum;
}

Expr ex_add(ExprCtx *x, Expr a, Expr b) {
    expr_check_handle(x, a, "ex_add");
    expr_check_handle(x, b, "ex_add");
    if (is_num(x, a) && is_num(x, b)) return ex_num(x, num_of(x, a) + num_of(x, b));
    order_operands(x, &a, &b);
    if (is_num_value(x, b, 0.0)) return a;  // x + 0 = x (x + -0 = x exactly; x + +0 differs only for x = -0)
    // gather constants upwards: (y + c1) + c2 = y + (c1 + c2); (y + c) + z = (y + z) + c
    if (is_num(x, b) && has_const_right(x, a, EXPR_OP_ADD)) {
        const ExprNode *an = &x->nodes[a];
        Expr y = an->a;
        return ex_add(x, y, ex_num(x, num_of(x, an->b) + num_of(x, b)));
    }
    if (!is_num(x, b)) {
        if (has_const_right(x, a, EXPR_OP_ADD)) {
            Expr y = x->nodes[a].a, c = x->nodes[a].b;
            return ex_add(x, ex_add(x, y, b), c);
        }
        if (has_const_right(x, b, EXPR_OP_ADD)) {
            Expr y = x->nodes[b].a, c = x->nodes[b].b;
            return ex_add(x, ex_add(x, a, y), c);
        }
    }
    Expr merged = x->merge_like_terms ? merge_like_terms(x, a, b) : EXPR_NONE;
    if (merged != EXPR_NONE) return merged;
    return intern(x, make_node(EXPR_OP_ADD, a, b, EXPR_NONE));
}

Expr ex_sub(ExprCtx *x, Expr a, Expr b) {
    expr_check_handle(x, a, "ex_sub");
    expr_check_handle(x, b, "ex_sub");
    if (is_num(x, a) && is_num(x, b)) return ex_num(x, num_of(x, a) - num_of(x, b));
    if (a == b) return ex_num(x, 0.0);                          // finite values: x - x = 0
    if (is_num(x, b)) return ex_add(x, a, ex_num(x, -num_of(x, b)));  // IEEE: x - c == x + (-c)
    return intern(x, make_node(EXPR_OP_SUB, a, b, EXPR_NONE));
}

Expr ex_mul(ExprCtx *x, Expr a, Expr b) {
    expr_check_handle(x, a, "ex_mul");
    expr_check_handle(x, b, "ex_mul");
    if (is_num(x, a) && is_num(x, b)) return ex_num(x, num_of(x, a) * num_of(x, b));
    order_operands(x, &a, &b);
    if (is_num_value(x, b, 1.0)) return a;
    if (is_num_value(x, b, 0.0)) return ex_num(x, 0.0);  // finite values: x * 0 = 0
    if (is_num(x, b) && has_const_right(x, a, EXPR_OP_MUL)) {  // (y * c1) * c2 = y * (c1 * c2)
        const ExprNode *an = &x->nodes[a];
        Expr y = an->a;
        return ex_mul(x, y, ex_num(x, num_of(x, an->b) * num_of(x, b)));
    }
    if (!is_num(x, b)) {  // (y * c) * z = (y * z) * c
        if (has_const_right(x, a, EXPR_OP_MUL)) {
            Expr y = x->nodes[a].a, c = x->nodes[a].b;
            return ex_mul(x, ex_mul(x, y, b), c);
        }
        if (has_const_right(x, b, EXPR_OP_MUL)) {
            Expr y = x->nodes[b].a, c = x->nodes[b].b;
            return ex_mul(x, ex_mul(x, a, y), c);
        }
    }
    return intern(x, make_node(EXPR_OP_MUL, a, b, EXPR_NONE));
}

Expr ex_div(ExprCtx *x, Expr a, Expr b) {
    expr_check_handle(x, a, "ex_div");
    expr_check_handle(x, b, "ex_div");
    if (is_num(x, a) && is_num(x, b)) return ex_num(x, num_of(x, a) / num_of(x, b));
    if (is_num_value(x, b, 1.0)) return a;
    if (is_num_value(x, a, 0.0)) return ex_num(x, 0.0);  // finite, nonzero divisors: 0 / x = 0
    return intern(x, make_node(EXPR_OP_DIV, a, b, EXPR_NONE));
}

static Expr minmax(ExprCtx *x, ExprOp op, Expr a, Expr b, const char *who) {
    expr_check_handle(x, a, who);
    expr_check_handle(x, b, who);
    double (*f)(double, double) = op == EXPR_OP_MAX ? expr_max2 : expr_min2;
    if (is_num(x, a) && is_num(x, b)) return ex_num(x, f(num_of(x, a), num_of(x, b)));
    if (a == b) return a;
    order_operands(x, &a, &b);
    // max is associative exactly: max(max(y, c1), c2) = max(y, max(c1, c2))
    if (is_num(x, b) && has_const_right(x, a, op)) {
        const ExprNode *an = &x->nodes[a];
        Expr y = an->a;
        return minmax(x, op, y, ex_num(x, f(num_of(x, an->b), num_of(x, b))), who);
    }
    // a bound decides it: max(y, c) = y when y > c always (no tie, so no signed-zero question)
    if (is_num(x, b) && x->lo[a] > num_of(x, b)) return op == EXPR_OP_MAX ? a : b;
    // max(max(y, z), y) = max(y, z)
    if (x->nodes[a].op == (int32_t)op && (x->nodes[a].a == b || x->nodes[a].b == b)) return a;
    if (x->nodes[b].op == (int32_t)op && (x->nodes[b].a == a || x->nodes[b].b == a)) return b;
    return intern(x, make_node(op, a, b, EXPR_NONE));
}

Expr ex_max(ExprCtx *x, Expr a, Expr b) { return minmax(x, EXPR_OP_MAX, a, b, "ex_max"); }
Expr ex_min(ExprCtx *x, Expr a, Expr b) { return minmax(x, EXPR_OP_MIN, a, b, "ex_min"); }

static Expr rounding(ExprCtx *x, ExprOp op, Expr a, const char *who) {
    expr_check_handle(x, a, who);
    if (is_num(x, a)) return ex_num(x, op == EXPR_OP_CEIL ? expr_ceil1(num_of(x, a)) : expr_floor1(num_of(x, a)));
    // a ceil or floor is already an integer: rounding it again changes nothing
    if (x->nodes[a].op == EXPR_OP_CEIL || x->nodes[a].op == EXPR_OP_FLOOR) return a;
    return intern(x, make_node(op, a, EXPR_NONE, EXPR_NONE));
}

Expr ex_ceil(ExprCtx *x, Expr a) { return rounding(x, EXPR_OP_CEIL, a, "ex_ceil"); }
Expr ex_floor(ExprCtx *x, Expr a) { return rounding(x, EXPR_OP_FLOOR, a, "ex_floor"); }

Expr ex_select(ExprCtx *x, Expr cond, Expr a, Expr b) {
    expr_check_handle(x, cond, "ex_select");
    expr_check_handle(x, a, "ex_select");
    expr_check_handle(x, b, "ex_select");
    if (is_num(x, cond)) return expr_select3(num_of(x, cond), 1.0, 0.0) > 0 ? a : b;
    if (a == b) return a;
    if (x->pos[cond]) return a;  // positive for every value the symbols may take
    // a condition that is itself a select between constants (a flag) tests
    // its own condition: select(select(y, k1, k2), a, b) picks a exactly
    // when y picks a positive k1, or y does not pick and k2 is positive (NaN
    // y picks k2 in both forms)
    const ExprNode *cn = &x->nodes[cond];
    if (cn->op == EXPR_OP_SELECT && is_num(x, cn->b) && is_num(x, cn->c)) {
        int pos1 = num_of(x, cn->b) > 0, pos2 = num_of(x, cn->c) > 0;
        if (pos1 == pos2) return pos1 ? a : b;
        return pos1 ? ex_select(x, cn->a, a, b) : ex_select(x, cn->a, b, a);
    }
    return intern(x, make_node(EXPR_OP_SELECT, cond, a, b));
}

// the index of a table equal to t (bitwise), added if new
static int overlap_table_index(ExprCtx *x, const ExprOverlapTable *t) {
    for (int i = 0; i < x->num_tables; i++)
        if (memcmp(&x->tables[i], t, sizeof *t) == 0) return i;
    if (x->num_tables == x->cap_tables) {
        x->cap_tables = x->cap_tables ? 2 * x->cap_tables : 4;
        x->tables = xrealloc(x->tables, (size_t)x->cap_tables * sizeof *x->tables);
    }
    x->tables[x->num_tables] = *t;
    return x->num_tables++;
}

Expr ex_overlap(ExprCtx *x, const double factor[EXPR_OVERLAP_SUBSETS][EXPR_OVERLAP_MAX],
                const Expr in[EXPR_OVERLAP_MAX]) {
    // the streams that may be busy, in order; an idle constant never enters a busy set
    int stream[EXPR_OVERLAP_MAX], n = 0, all_const = 1;
    Expr kept[EXPR_OVERLAP_MAX] = {EXPR_NONE, EXPR_NONE, EXPR_NONE, EXPR_NONE};
    for (int s = 0; s < EXPR_OVERLAP_MAX; s++) {
        if (in[s] == EXPR_NONE) continue;
        expr_check_handle(x, in[s], "ex_overlap");
        if (is_num(x, in[s]) && !(num_of(x, in[s]) > EXPR_OVERLAP_EPS)) continue;
        all_const &= is_num(x, in[s]);
        stream[n] = s;
        kept[n++] = in[s];
    }
    if (n == 0) return ex_num(x, 0.0);
    if (n == 1) {  // alone: in > eps ? in : 0 (0 + in is in exactly)
        Expr e = kept[0];
        return ex_select(x, ex_sub(x, e, ex_num(x, EXPR_OVERLAP_EPS)), e, ex_num(x, 0.0));
    }
    ExprOverlapTable t;
    memset(&t, 0, sizeof t);  // padding too: tables are compared bitwise
    t.n = n;
    t.all_busy = 1;
    for (int i = 0; i < n; i++) t.all_busy &= x->lo[kept[i]] > EXPR_OVERLAP_EPS;
    for (int A = 0; A < EXPR_OVERLAP_SUBSETS; A++)
        for (int i = 0; i < EXPR_OVERLAP_MAX; i++) {
            t.f[A][i] = 1.0;
            if (A >= 1 << n || !((A >> i) & 1) || !(A & (A - 1))) continue;
            int global = 0;  // the same busy set in the caller's stream numbering
            for (int j = 0; j < n; j++)
                if ((A >> j) & 1) global |= 1 << stream[j];
            double f = factor[global][stream[i]];
            if (!(f > 0) || !isfinite(f))
                expr_die("ex_overlap: slowdown factor[%d][%d] = %g; allowed: finite and > 0", global, stream[i], f);
            t.f[A][i] = f;
        }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 1 << (n - 1); k++) {
            int A = 1 << i;
            for (int m = 0, o = 0; o < n; o++)
                if (o != i) A |= ((k >> m++) & 1) << o;
            t.by_others[i][k] = k ? t.f[A][i] : INFINITY;
            t.inv_by_others[i][k] = 1.0 / t.by_others[i][k];
        }
    for (int A = 0; A < EXPR_OVERLAP_SUBSETS; A++)
        for (int i = 0; i < EXPR_OVERLAP_MAX; i++) t.inv[A][i] = 1.0 / t.f[A][i];
    if (all_const) {
        double v[EXPR_OVERLAP_MAX] = {0, 0, 0, 0};
        for (int i = 0; i < n; i++) v[i] = num_of(x, kept[i]);
        return ex_num(x, expr_overlap_apply(&t, v));
    }
    ExprNode nd = make_node(EXPR_OP_OVERLAP, kept[0], kept[1], kept[2]);
    nd.d = kept[3];
    nd.value = overlap_table_index(x, &t);
    return intern(x, nd);
}

Expr ex_sum(ExprCtx *x, const Expr *terms, int n) {
    if (n <= 0) return ex_num(x, 0.0);
    Expr s = terms[0];
    expr_check_handle(x, s, "ex_sum");
    for (int i = 1; i < n; i++) s = ex_add(x, s, terms[i]);
    return s;
}
