// Exact inter-stage search without an LP: a label-setting dynamic program over the
// stages, last to first. Same optimum as milp_solve, typically far faster.
//
// Why it is exact: with P_i = Σ_{j<i} t_j and suffix sums R_i = Σ_{j>=i} t_j,
//   Σ_i t_i + max(0, max_i (d_i − P_i)) = max(R_0, max_i (d_i + R_i)),
// so the 1F1B total is T = (G−1)·Tmax + max(Σ, M) with, for the stages i..S−1
// placed so far, the label (Tmax, Σ = R_i, M = max_{j>=i} d_j + R_j). Prepending
// stage i−1 with point (t, d) gives (max(Tmax, t), Σ + t, max(M, d + t + Σ)),
// nondecreasing in every coordinate of the old label: a label that is no smaller
// in all three than another one with the same (stage, layers placed) can never
// lead to a better total and is dropped (Pareto dominance). Labels whose lower
// bound exceeds a feasible total found by a greedy first pass are dropped too.
#include "planner/milp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    double tmax, sum, m;  // over the stages placed so far (a suffix of the pipeline)
    int parent;           // index in the label set of the next stage, -1 at the end
    int option, point;    // this stage's choice
} Label;

typedef struct {
    Label *v;
    int n, cap;
} LabelSet;

static int dp_option_layers(const MilpProblem *p, int o) {
    return p->option_layers ? p->option_layers[o] : o + 1;
}

static int label_push(LabelSet *s, Label l) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        Label *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v) return 0;
        s->v = v, s->cap = cap;
    }
    s->v[s->n++] = l;
    return 1;
}

// Adds l unless an existing label dominates it; removes the labels it dominates.
static int label_insert(LabelSet *s, Label l) {
    for (int a = 0; a < s->n; ++a) {
        const Label *e = &s->v[a];
        if (e->tmax <= l.tmax && e->sum <= l.sum && e->m <= l.m) return 1;
    }
    for (int a = 0; a < s->n;) {
        const Label *e = &s->v[a];
        if (l.tmax <= e->tmax && l.sum <= e->sum && l.m <= e->m) s->v[a] = s->v[--s->n];
        else ++a;
    }
    return label_push(s, l);
}

// One backward pass. greedy: keep only the label with the smallest bound per
// (stage, layers) (a feasible total, used as the pruning bound of the exact pass).
// Returns the best total (INFINITY when infeasible) and the choice through sol;
// -1 on out of memory.
static double dp_pass(const MilpProblem *p, const double *minpre, const double *maxpre, LabelSet *sets, int greedy, double ub,
                      MilpSolution *sol) {
    int S = p->stages, L = p->layers, O = p->noptions;
    double G1 = (double)(p->microbatches - 1);
    size_t W = (size_t)L + 1;
    for (size_t a = 0; a < (size_t)(S + 1) * W; ++a) sets[a].n = 0;
    if (!label_push(&sets[(size_t)S * W], (Label){0.0, 0.0, 0.0, -1, -1, -1})) return -1;
    double slack = 1e-12 * fabs(ub) + 1e-300;
    for (int i = S - 1; i >= 0; --i) {
        for (int uprev = 0; uprev <= L; ++uprev) {
            const LabelSet *from = &sets[(size_t)(i + 1) * W + (size_t)uprev];
            for (int o = 0; o < O && from->n; ++o) {
                const MilpFrontier *f = &p->frontier[i * O + o];
                int u = uprev + dp_option_layers(p, o);
                if (f->npoints == 0 || u > L) continue;
                double rest = minpre[(size_t)i * W + (size_t)(L - u)];  // least Σ t of stages 0..i−1
                double rest_max = maxpre[(size_t)i * W + (size_t)(L - u)];  // least max t of stages 0..i−1
                if (isinf(rest)) continue;
                LabelSet *to = &sets[(size_t)i * W + (size_t)u];
                for (int k = 0; k < f->npoints; ++k)
                    for (int a = 0; a < from->n; ++a) {
                        const Label *e = &from->v[a];
                        Label l = {fmax(e->tmax, f->t[k]), e->sum + f->t[k], fmax(e->m, f->d[k] + f->t[k] + e->sum),
                                   a, o, k};
                        double bound = G1 * fmax(l.tmax, rest_max) + fmax(l.sum + rest, l.m);
                        if (bound > ub + slack) continue;
                        if (greedy) {
                            if (to->n == 0) {
                                if (!label_push(to, l)) return -1;
                            } else {
                                const Label *c = &to->v[0];
                                if (bound < G1 * fmax(c->tmax, rest_max) + fmax(c->sum + rest, c->m)) to->v[0] = l;
                            }
                        } else if (!label_insert(to, l)) {
                            return -1;
                        }
                    }
            }
        }
    }
    const LabelSet *fin = &sets[(size_t)L];  // stage 0, all L layers placed
    double best = INFINITY;
    int bi = -1;
    for (int a = 0; a < fin->n; ++a) {
        double T = G1 * fin->v[a].tmax + fmax(fin->v[a].sum, fin->v[a].m);
        if (T < best) best = T, bi = a;
    }
    if (bi >= 0) {
        int u = L, idx = bi;
        for (int i = 0; i < S; ++i) {
            const Label *l = &sets[(size_t)i * W + (size_t)u].v[idx];
            sol->option[i] = l->option;
            sol->point[i] = l->point;
            u -= dp_option_layers(p, l->option);
            idx = l->parent;
        }
    }
    return best;
}

MilpStatus milp_solve_dp(const MilpProblem *p, MilpSolution *sol) {
    struct timespec ta, tb;
    clock_gettime(CLOCK_MONOTONIC, &ta);
    memset(sol, 0, sizeof *sol);
    sol->objective = INFINITY;
    if (!milp_problem_check(p, sol->error, (int)sizeof sol->error)) return sol->status = MILP_ERROR;
    int S = p->stages, L = p->layers, O = p->noptions;
    size_t W = (size_t)L + 1;
    // minpre[i][s]: least Σ of per-(stage, layer count) fastest t over stages 0..i−1
    // holding s layers in all; INFINITY when they cannot hold exactly s
    double *minpre = malloc((size_t)(S + 1) * W * sizeof *minpre);  // (S+1, L+1)
    // maxpre[i][s]: the same for the largest fastest-t among those stages (the least
    // Tmax they can contribute); both are lower bounds for the stages still to place
    double *maxpre = malloc((size_t)(S + 1) * W * sizeof *maxpre);  // (S+1, L+1)
    LabelSet *sets = calloc((size_t)(S + 1) * W, sizeof *sets);     // (S+1, L+1)
    MilpStatus st = MILP_ERROR;
    if (!minpre || !maxpre || !sets) {
        snprintf(sol->error, sizeof sol->error, "milp_dp: out of memory");
        goto done;
    }
    for (size_t a = 0; a < (size_t)(S + 1) * W; ++a) minpre[a] = maxpre[a] = INFINITY;
    minpre[0] = maxpre[0] = 0.0;
    for (int i = 0; i < S; ++i)
        for (int s = 0; s <= L; ++s) {
            double base = minpre[(size_t)i * W + (size_t)s];
            if (isinf(base)) continue;
            for (int o = 0; o < O; ++o) {
                const MilpFrontier *f = &p->frontier[i * O + o];
                int j = dp_option_layers(p, o);
                if (f->npoints == 0 || s + j > L) continue;
                double tmin = INFINITY;
                for (int k = 0; k < f->npoints; ++k) tmin = fmin(tmin, f->t[k]);
                double *cell = &minpre[(size_t)(i + 1) * W + (size_t)(s + j)];
                *cell = fmin(*cell, base + tmin);
                double *mcell = &maxpre[(size_t)(i + 1) * W + (size_t)(s + j)];
                *mcell = fmin(*mcell, fmax(maxpre[(size_t)i * W + (size_t)s], tmin));
            }
        }
    double ub = dp_pass(p, minpre, maxpre, sets, 1, INFINITY, sol);
    if (ub < 0) {
        snprintf(sol->error, sizeof sol->error, "milp_dp: out of memory");
        goto done;
    }
    if (isinf(ub)) {
        st = MILP_INFEASIBLE;
        goto done;
    }
    double best = dp_pass(p, minpre, maxpre, sets, 0, ub, sol);
    if (best < 0) {
        snprintf(sol->error, sizeof sol->error, "milp_dp: out of memory");
        goto done;
    }
    if (isinf(best)) {  // cannot happen (the greedy answer survives its own bound); fail loudly
        snprintf(sol->error, sizeof sol->error, "milp_dp: exact pass lost the greedy solution (bound %.17g)", ub);
        goto done;
    }
    for (int i = 0; i < S; ++i) {
        const MilpFrontier *f = &p->frontier[i * O + sol->option[i]];
        sol->layers[i] = dp_option_layers(p, sol->option[i]);
        sol->t[i] = f->t[sol->point[i]];
        sol->d[i] = f->d[sol->point[i]];
    }
    sol->objective = milp_pipeline_time(S, p->microbatches, sol->t, sol->d);
    sol->lp_objective = best;
    for (size_t a = 0; a < (size_t)(S + 1) * W; ++a) sol->nodes += sets[a].n;  // labels kept
    st = MILP_OPTIMAL;
done:
    if (sets)
        for (size_t a = 0; a < (size_t)(S + 1) * W; ++a) free(sets[a].v);
    free(sets);
    free(minpre);
    free(maxpre);
    if (st != MILP_OPTIMAL) sol->objective = INFINITY;
    clock_gettime(CLOCK_MONOTONIC, &tb);
    sol->seconds = (double)(tb.tv_sec - ta.tv_sec) + 1e-9 * (double)(tb.tv_nsec - ta.tv_nsec);
    return sol->status = st;
}
