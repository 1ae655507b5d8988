// A small parser for the text expr_print writes (numbers, symbols, + - * /,
// parentheses, max/min/ceil/floor/select calls), for the print -> parse round
// trip of tests/test_expr.c: parse(x, text, &error) builds the expression in x.
#ifndef MIST_TESTS_EXPR_PARSE_H
#define MIST_TESTS_EXPR_PARSE_H
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include "expr/expr.h"

typedef struct {
    ExprCtx *x;
    const char *s;
    int error;
} Parser;

static void skip_space(Parser *p) {
    while (*p->s == ' ') p->s++;
}
static int accept(Parser *p, char c) {
    skip_space(p);
    if (*p->s == c) {
        p->s++;
        return 1;
    }
    return 0;
}
static Expr parse_sum(Parser *p);

static Expr parse_atom(Parser *p) {
    skip_space(p);
    if (accept(p, '(')) {
        Expr e;
        skip_space(p);
        if (*p->s == '-') {  // parenthesised negative number
            char *end;
            double v = strtod(p->s, &end);
            p->s = end;
            e = ex_num(p->x, v);
        } else {
            e = parse_sum(p);
        }
        if (!accept(p, ')')) p->error = 1;
        return e;
    }
    if ((*p->s >= '0' && *p->s <= '9') || *p->s == '.') {
        char *end;
        double v = strtod(p->s, &end);
        p->s = end;
        return ex_num(p->x, v);
    }
    char name[64];
    int n = 0;
    while ((*p->s == '_' || (*p->s >= 'a' && *p->s <= 'z') || (*p->s >= 'A' && *p->s <= 'Z') ||
            (*p->s >= '0' && *p->s <= '9')) && n < 63)
        name[n++] = *p->s++;
    name[n] = '\0';
    if (n == 0) {
        p->error = 1;
        return ex_num(p->x, 0.0);
    }
    if (accept(p, '(')) {
        Expr args[3];
        int nargs = 0;
        do args[nargs++] = parse_sum(p);
        while (nargs < 3 && accept(p, ','));
        if (!accept(p, ')')) p->error = 1;
        if (!strcmp(name, "max") && nargs == 2) return ex_max(p->x, args[0], args[1]);
        if (!strcmp(name, "min") && nargs == 2) return ex_min(p->x, args[0], args[1]);
        if (!strcmp(name, "ceil") && nargs == 1) return ex_ceil(p->x, args[0]);
        if (!strcmp(name, "floor") && nargs == 1) return ex_floor(p->x, args[0]);
        if (!strcmp(name, "select") && nargs == 3) return ex_select(p->x, args[0], args[1], args[2]);
        p->error = 1;
        return args[0];
    }
    return ex_sym(p->x, name);
}

static Expr parse_product(Parser *p) {
    Expr e = parse_atom(p);
    for (;;) {
        if (accept(p, '*')) e = ex_mul(p->x, e, parse_atom(p));
        else if (accept(p, '/')) e = ex_div(p->x, e, parse_atom(p));
        else return e;
    }
}

static Expr parse_sum(Parser *p) {
    Expr e = parse_product(p);
    for (;;) {
        if (accept(p, '+')) e = ex_add(p->x, e, parse_product(p));
        else if (accept(p, '-')) e = ex_sub(p->x, e, parse_product(p));
        else return e;
    }
}

static Expr parse(ExprCtx *x, const char *text, int *error) {
    Parser p = {x, text, 0};
    Expr e = parse_sum(&p);
    skip_space(&p);
    *error = p.error || *p.s != '\0';
    return e;
}

#endif
