// Printing an expression as readable infix (expr_print, contract in
// expr.h): only the parentheses the tree needs, numbers in their shortest
// form that reads back as the same double.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expr/expr.h"
#include "expr/expr_node.h"

typedef struct {
    char *buf;
    size_t len, pos;  // pos counts every character, also those past the buffer
} Printer;

static void put(Printer *p, const char *s) {
    for (; *s; s++, p->pos++)
        if (p->len && p->pos + 1 < p->len) p->buf[p->pos] = *s;
}

// shortest decimal form that reads back as the same double
static void put_number(Printer *p, double v) {
    char tmp[40];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(tmp, sizeof tmp, "%.*g", digits, v);
        if (strtod(tmp, NULL) == v) break;
    }
    if (v < 0 || (v == 0 && signbit(v))) {
        put(p, "(");
        put(p, tmp);
        put(p, ")");
    } else {
        put(p, tmp);
    }
}

// precedence: 1 sums, 2 products, 3 atoms (numbers, symbols, calls)
static int precedence(const ExprNode *nodes, Expr e) {
    switch ((ExprOp)nodes[e].op) {
    case EXPR_OP_ADD:
    case EXPR_OP_SUB: return 1;
    case EXPR_OP_MUL:
    case EXPR_OP_DIV: return 2;
    default: return 3;
    }
}

static void print_node(ExprCtx *x, Printer *p, Expr e, int min_prec) {
    const ExprNode *nodes = expr_ctx_nodes(x), *n = &nodes[e];
    int prec = precedence(nodes, e);
    int paren = prec < min_prec;
    if (paren) put(p, "(");
    switch ((ExprOp)n->op) {
    case EXPR_OP_NUM: put_number(p, n->value); break;
    case EXPR_OP_SYM: put(p, expr_sym_name(x, n->a)); break;
    case EXPR_OP_ADD:
        print_node(x, p, n->a, 1);
        if (nodes[n->b].op == EXPR_OP_NUM && nodes[n->b].value < 0) {  // y + (-3) reads as y - 3
            put(p, " - ");
            put_number(p, -nodes[n->b].value);
        } else {
            put(p, " + ");
            print_node(x, p, n->b, 2);  // a + (b + c) keeps its parentheses (rounding order)
        }
        break;
    case EXPR_OP_SUB:
        print_node(x, p, n->a, 1);
        put(p, " - ");
        print_node(x, p, n->b, 2);  // a - (b + c) keeps its parentheses
        break;
    case EXPR_OP_MUL:
        print_node(x, p, n->a, 2);
        put(p, " * ");
        print_node(x, p, n->b, 3);
        break;
    case EXPR_OP_DIV:
        print_node(x, p, n->a, 2);
        put(p, " / ");
        print_node(x, p, n->b, 3);
        break;
    case EXPR_OP_MAX:
    case EXPR_OP_MIN:
        put(p, n->op == EXPR_OP_MAX ? "max(" : "min(");
        print_node(x, p, n->a, 1);
        put(p, ", ");
        print_node(x, p, n->b, 1);
        put(p, ")");
        break;
    case EXPR_OP_CEIL:
    case EXPR_OP_FLOOR:
        put(p, n->op == EXPR_OP_CEIL ? "ceil(" : "floor(");
        print_node(x, p, n->a, 1);
        put(p, ")");
        break;
    case EXPR_OP_SELECT:
        put(p, "select(");
        print_node(x, p, n->a, 1);
        put(p, ", ");
        print_node(x, p, n->b, 1);
        put(p, ", ");
        print_node(x, p, n->c, 1);
        put(p, ")");
        break;
    case EXPR_OP_OVERLAP: {
        // overlap#k(x, y, ...): the window rule under table k of the context
        char head[32];
        snprintf(head, sizeof head, "overlap#%d(", (int)n->value);
        put(p, head);
        Expr in[EXPR_OVERLAP_MAX] = {n->a, n->b, n->c, n->d};
        for (int i = 0; i < EXPR_OVERLAP_MAX && in[i] != EXPR_NONE; i++) {
            if (i) put(p, ", ");
            print_node(x, p, in[i], 1);
        }
        put(p, ")");
        break;
    }
    case EXPR_OP_COUNT: expr_die("corrupt node with op %d", (int)n->op);
    }
    if (paren) put(p, ")");
}

int expr_print(ExprCtx *x, Expr e, char *buf, size_t len) {
    expr_check_handle(x, e, "expr_print");
    Printer p = {buf, len, 0};
    print_node(x, &p, e, 1);
    if (len) buf[p.pos < len ? p.pos : len - 1] = '\0';
    return (int)p.pos;
}
