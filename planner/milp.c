// The inter-stage MILP (docs/design.md §7) on lp_solve's C API.
//
// Variables (all >= 0), for the (stage i, option o) pairs that can be part of some
// split of L (the others are left out, see layer_options_alive):
//   l[i][o]     binary-valued: stage i has option_layers[o] layers
//   z[i][o][k]  binary: and runs frontier point k
//   t_i, d_i, Tmax, Dmax  continuous
// Rows:
//   Σ_o l[i][o] = 1                      one layer count per stage
//   Σ_i Σ_o j_o·l[i][o] = L              all layers placed
//   Σ_k z[i][o][k] − l[i][o] = 0         one point for the chosen layer count
//   t_i − Σ t·z = 0,  d_i − Σ d·z = 0    the stage's point
//   Tmax − t_i >= 0                      Tmax >= max t
//   Dmax − d_i + Σ_{j<i} t_j >= 0        Dmax >= max(0, d_i − Σ_{j<i} t_j)
// Objective: min (G−1)·Tmax + Σ t_i + Dmax, the 1F1B total of milp.h.
// l is declared continuous: Σ_k z = l with binary z already makes it 0 or 1, and
// leaving it out of branching keeps the tree small.
#include "planner/milp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lpsolve/lp_lib.h>

static double milp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double milp_pipeline_time(int stages, int microbatches, const double *t, const double *d) {
    double tmax = 0.0, tsum = 0.0, dmax = 0.0;
    for (int i = 0; i < stages; ++i) {
        // d_i − Σ_{j<i} t_j: stage i's extra time not covered by the stages before it
        double exposed = d[i] - tsum;
        if (exposed > dmax) dmax = exposed;
        if (t[i] > tmax) tmax = t[i];
        tsum += t[i];
    }
    return (double)(microbatches - 1) * tmax + tsum + dmax;
}

int milp_problem_check(const MilpProblem *p, char *err, int errlen) {
    if (p->stages < 1 || p->stages > MIST_MAX_STAGES) {
        snprintf(err, (size_t)errlen, "milp: stages = %d, allowed 1..%d", p->stages, MIST_MAX_STAGES);
        return 0;
    }
    if (p->layers < 1) {
        snprintf(err, (size_t)errlen, "milp: layers = %d, allowed >= 1", p->layers);
        return 0;
    }
    if (p->microbatches < 1) {
        snprintf(err, (size_t)errlen, "milp: microbatches = %d, allowed >= 1", p->microbatches);
        return 0;
    }
    if (p->noptions < 1 || !p->frontier) {
        snprintf(err, (size_t)errlen, "milp: noptions = %d with frontier %s, need >= 1 and a frontier table",
                 p->noptions, p->frontier ? "set" : "NULL");
        return 0;
    }
    for (int o = 0; o < p->noptions; ++o) {
        int j = p->option_layers ? p->option_layers[o] : o + 1;
        if (j < 1) {
            snprintf(err, (size_t)errlen, "milp: option_layers[%d] = %d, allowed >= 1", o, j);
            return 0;
        }
    }
    for (int i = 0; i < p->stages * p->noptions; ++i) {
        const MilpFrontier *f = &p->frontier[i];
        if (f->npoints < 0 || (f->npoints > 0 && (!f->t || !f->d))) {
            snprintf(err, (size_t)errlen, "milp: frontier[stage %d][option %d] has npoints = %d and %s arrays",
                     i / p->noptions, i % p->noptions, f->npoints, (f->t && f->d) ? "its" : "missing");
            return 0;
        }
        for (int k = 0; k < f->npoints; ++k) {
            if (!isfinite(f->t[k]) || !isfinite(f->d[k]) || f->t[k] < 0) {
                snprintf(err, (size_t)errlen,
                         "milp: frontier[stage %d][option %d] point %d = (t %g, d %g); need finite, t >= 0",
                         i / p->noptions, i % p->noptions, k, f->t[k], f->d[k]);
                return 0;
            }
        }
    }
    return 1;
}

static int option_layers(const MilpProblem *p, int o) {
    return p->option_layers ? p->option_layers[o] : o + 1;
}

// alive[i*noptions + o] = 1 when stage i with option o has points and the other
// stages can make up the remaining L − j layers with options that have points:
// prefix[i][s] = stages 0..i−1 can hold exactly s layers, suffix[i][s] = stages
// i..S−1 can. Returns how many pairs are alive (0: infeasible).
static int layer_options_alive(const MilpProblem *p, unsigned char *alive) {
    int S = p->stages, L = p->layers, O = p->noptions;
    unsigned char *prefix = calloc((size_t)(S + 1) * (size_t)(L + 1), 1);  // (S+1, L+1)
    unsigned char *suffix = calloc((size_t)(S + 1) * (size_t)(L + 1), 1);  // (S+1, L+1)
    if (!prefix || !suffix) {
        free(prefix);
        free(suffix);
        return -1;
    }
#define PRE(i, s) prefix[(size_t)(i) * (size_t)(L + 1) + (size_t)(s)]
#define SUF(i, s) suffix[(size_t)(i) * (size_t)(L + 1) + (size_t)(s)]
    PRE(0, 0) = 1;
    for (int i = 0; i < S; ++i)
        for (int s = 0; s <= L; ++s)
            if (PRE(i, s))
                for (int o = 0; o < O; ++o) {
                    int j = option_layers(p, o);
                    if (p->frontier[i * O + o].npoints > 0 && s + j <= L) PRE(i + 1, s + j) = 1;
                }
    SUF(S, 0) = 1;
    for (int i = S - 1; i >= 0; --i)
        for (int s = 0; s <= L; ++s)
            if (SUF(i + 1, s))
                for (int o = 0; o < O; ++o) {
                    int j = option_layers(p, o);
                    if (p->frontier[i * O + o].npoints > 0 && s + j <= L) SUF(i, s + j) = 1;
                }
    int count = 0;
    for (int i = 0; i < S; ++i)
        for (int o = 0; o < O; ++o) {
            int j = option_layers(p, o), ok = 0;
            if (p->frontier[i * O + o].npoints > 0 && j <= L)
                for (int a = 0; a + j <= L && !ok; ++a) ok = PRE(i, a) && SUF(i + 1, L - a - j);
            alive[i * O + o] = (unsigned char)ok;
            count += ok;
        }
#undef PRE
#undef SUF
    free(prefix);
    free(suffix);
    return count;
}

typedef struct {
    double deadline;
} MilpAbort;

// lp_solve polls this during the search; nonzero stops it (sub-second time limits)
static int __WINAPI milp_abort_check(lprec *lp, void *handle) {
    (void)lp;
    return milp_now() > ((MilpAbort *)handle)->deadline;
}

// Fills the chosen assignment from per-stage (option, point) and recomputes T.
static void milp_finish(const MilpProblem *p, MilpSolution *sol) {
    for (int i = 0; i < p->stages; ++i) {
        const MilpFrontier *f = &p->frontier[i * p->noptions + sol->option[i]];
        sol->layers[i] = option_layers(p, sol->option[i]);
        sol->t[i] = f->t[sol->point[i]];
        sol->d[i] = f->d[sol->point[i]];
    }
    sol->objective = milp_pipeline_time(p->stages, p->microbatches, sol->t, sol->d);
}

static MilpStatus milp_fail(MilpSolution *sol, MilpStatus st, double t0, const char *msg) {
    sol->status = st;
    sol->objective = INFINITY;
    if (msg) snprintf(sol->error, sizeof sol->error, "%s", msg);
    sol->seconds = milp_now() - t0;
    return st;
}

// The model's columns (1-based, as lp_solve numbers them): per alive (i, o)
// l then its z's; then t_1..t_S, d_1..d_S, Tmax, Dmax.
typedef struct {
    int S, O;
    unsigned char *alive;  // (S, O) layer_options_alive
    int *lcol;             // (S, O) column of l[i][o], 1-based (0: not alive)
    int tcol, dcol, tmaxcol, dmaxcol, ncols;
    int maxrow;            // the longest row: the larger of S·O + 2 and one stage's points + 1
} MilpColumns;

static void milp_columns_layout(const MilpProblem *p, MilpColumns *mc) {
    int S = mc->S, O = mc->O;
    int ncols = 0, maxrow = S * O + 2;
    for (int i = 0; i < S; ++i) {
        int stage_points = 0;
        for (int o = 0; o < O; ++o) {
            mc->lcol[i * O + o] = 0;
            if (!mc->alive[i * O + o]) continue;
            mc->lcol[i * O + o] = ncols + 1;
            int np = p->frontier[i * O + o].npoints;
            ncols += 1 + np;
            stage_points += np;
        }
        if (stage_points + 1 > maxrow) maxrow = stage_points + 1;
    }
    mc->tcol = ncols + 1, mc->dcol = ncols + 1 + S, mc->tmaxcol = ncols + 1 + 2 * S, mc->dmaxcol = mc->tmaxcol + 1;
    mc->ncols = mc->dmaxcol;
    mc->maxrow = maxrow;
}

// The objective and the rows of the header comment, in that order (val, col:
// room for maxrow + S entries). 0 when lp_solve rejects one.
static int milp_add_rows(lprec *lp, const MilpProblem *p, const MilpColumns *mc, double *val, int *col) {
    const int S = mc->S, O = mc->O, tcol = mc->tcol, dcol = mc->dcol;
    const unsigned char *alive = mc->alive;
    const int *lcol = mc->lcol;
    // objective (G−1)·Tmax + Σ t_i + Dmax
    int n = 0;
    for (int i = 0; i < S; ++i) col[n] = tcol + i, val[n++] = 1.0;
    col[n] = mc->tmaxcol, val[n++] = (double)(p->microbatches - 1);
    col[n] = mc->dmaxcol, val[n++] = 1.0;
    int ok = set_obj_fnex(lp, n, val, col);

    set_add_rowmode(lp, TRUE);
    for (int i = 0; i < S && ok; ++i) {  // Σ_o l[i][o] = 1
        n = 0;
        for (int o = 0; o < O; ++o)
            if (alive[i * O + o]) col[n] = lcol[i * O + o], val[n++] = 1.0;
        ok = add_constraintex(lp, n, val, col, EQ, 1.0);
    }
    if (ok) {  // Σ_i Σ_o j·l[i][o] = L
        n = 0;
        for (int i = 0; i < S; ++i)
            for (int o = 0; o < O; ++o)
                if (alive[i * O + o]) col[n] = lcol[i * O + o], val[n++] = (double)option_layers(p, o);
        ok = add_constraintex(lp, n, val, col, EQ, (double)p->layers);
    }
    for (int i = 0; i < S * O && ok; ++i) {  // Σ_k z − l = 0
        if (!alive[i]) continue;
        int np = p->frontier[i].npoints;
        n = 0;
        col[n] = lcol[i], val[n++] = -1.0;
        for (int k = 0; k < np; ++k) col[n] = lcol[i] + 1 + k, val[n++] = 1.0;
        ok = add_constraintex(lp, n, val, col, EQ, 0.0);
    }
    for (int pass = 0; pass < 2 && ok; ++pass) {  // t_i − Σ t·z = 0, then d_i − Σ d·z = 0
        for (int i = 0; i < S && ok; ++i) {
            n = 0;
            col[n] = (pass == 0 ? tcol : dcol) + i, val[n++] = 1.0;
            for (int o = 0; o < O; ++o) {
                if (!alive[i * O + o]) continue;
                const MilpFrontier *f = &p->frontier[i * O + o];
                const double *v = pass == 0 ? f->t : f->d;
                for (int k = 0; k < f->npoints; ++k)
                    if (v[k] != 0.0) col[n] = lcol[i * O + o] + 1 + k, val[n++] = -v[k];
            }
            ok = add_constraintex(lp, n, val, col, EQ, 0.0);
        }
    }
    for (int i = 0; i < S && ok; ++i) {  // Tmax − t_i >= 0
        col[0] = mc->tmaxcol, val[0] = 1.0;
        col[1] = tcol + i, val[1] = -1.0;
        ok = add_constraintex(lp, 2, val, col, GE, 0.0);
    }
    for (int i = 0; i < S && ok; ++i) {  // Dmax − d_i + Σ_{j<i} t_j >= 0
        n = 0;
        col[n] = mc->dmaxcol, val[n++] = 1.0;
        col[n] = dcol + i, val[n++] = -1.0;
        for (int j = 0; j < i; ++j) col[n] = tcol + j, val[n++] = 1.0;
        ok = add_constraintex(lp, n, val, col, GE, 0.0);
    }
    set_add_rowmode(lp, FALSE);
    return ok;
}

// Bounds and kinds of the columns, and with a cutoff the points and the row
// it rules out. 0 when lp_solve rejects one.
static int milp_set_bounds(lprec *lp, const MilpProblem *p, const MilpColumns *mc) {
    const int S = mc->S, O = mc->O;
    int ok = 1;
    // d_i may be negative (a stage that finishes early); the rest are >= 0 by default
    for (int i = 0; i < S && ok; ++i) ok = set_unbounded(lp, mc->dcol + i);
    for (int i = 0; i < S * O && ok; ++i) {
        if (!mc->alive[i]) continue;
        ok = set_upbo(lp, mc->lcol[i], 1.0);
        for (int k = 0; k < p->frontier[i].npoints && ok; ++k) {
            ok = set_binary(lp, mc->lcol[i] + 1 + k, TRUE);
            // T >= (G−1)·t_i + t_i + P_i + max(0, d_i − P_i) >= G·t_i + max(0, d_i):
            // a point above the cutoff by that bound cannot be in a better plan
            const MilpFrontier *f = &p->frontier[i];
            double lower = (double)p->microbatches * f->t[k] + fmax(0.0, f->d[k]);
            if (ok && p->cutoff > 0 && lower > p->cutoff * (1 + 1e-12)) ok = set_upbo(lp, mc->lcol[i] + 1 + k, 0.0);
        }
    }
    if (ok && p->cutoff > 0) {  // (G−1)·Tmax + Σ t_i + Dmax <= cutoff (with a little slack)
        int ccol[MIST_MAX_STAGES + 2];
        double cval[MIST_MAX_STAGES + 2];
        int cn = 0;
        for (int i = 0; i < S; ++i) ccol[cn] = mc->tcol + i, cval[cn++] = 1.0;
        ccol[cn] = mc->tmaxcol, cval[cn++] = (double)(p->microbatches - 1);
        ccol[cn] = mc->dmaxcol, cval[cn++] = 1.0;
        ok = add_constraintex(lp, cn, cval, ccol, LE, p->cutoff * (1 + 1e-9) + 1e-12);
    }
    return ok;
}

// The assignment lp_solve found: per stage the (o, k) with the largest z, kept
// when it places all L layers (then sol is filled). 1 when it does.
static int milp_read_assignment(lprec *lp, const MilpProblem *p, const MilpColumns *mc, MilpSolution *sol) {
    const int S = mc->S, O = mc->O;
    REAL *x = NULL;
    int have = get_ptr_variables(lp, &x) && x;
    for (int i = 0; i < S && have; ++i) {
        double best = 0.5;
        int bo = -1, bk = -1;
        for (int o = 0; o < O; ++o) {
            if (!mc->alive[i * O + o]) continue;
            for (int k = 0; k < p->frontier[i * O + o].npoints; ++k) {
                double v = x[mc->lcol[i * O + o] + k];  // x is 0-based: column c is x[c-1]
                if (v > best) best = v, bo = o, bk = k;
            }
        }
        if (bo < 0) have = 0;
        else sol->option[i] = bo, sol->point[i] = bk;
    }
    if (have) {
        int total = 0;
        for (int i = 0; i < S; ++i) total += option_layers(p, sol->option[i]);
        if (total != p->layers) have = 0;
    }
    if (have) {
        sol->lp_objective = get_working_objective(lp);
        milp_finish(p, sol);
    }
    return have;
}

// lp_solve's answer as a status (MILP_ERROR: an answer this code does not know)
static MilpStatus milp_status_of(int ret) {
    if (ret == OPTIMAL || ret == PRESOLVED) return MILP_OPTIMAL;
    if (ret == SUBOPTIMAL) return MILP_SUBOPTIMAL;
    if (ret == INFEASIBLE) return MILP_INFEASIBLE;
    if (ret == USERABORT || ret == TIMEOUT) return MILP_TIMEOUT;  // SUBOPTIMAL if one was found
    return MILP_ERROR;
}

// Build the model on lp, solve it and read the answer into sol. Returns the
// status; on MILP_ERROR msg (msglen bytes) says why.
static MilpStatus milp_build_and_solve(lprec *lp, const MilpProblem *p, const MilpColumns *mc, MilpSolution *sol,
                                       double t0, char *msg, size_t msglen) {
    double *val = malloc((size_t)(mc->maxrow + mc->S) * sizeof *val);  // one row's coefficients
    int *col = malloc((size_t)(mc->maxrow + mc->S) * sizeof *col);
    if (!val || !col) {
        free(val);
        free(col);
        snprintf(msg, msglen, "milp: lp_solve could not allocate the model");
        return MILP_ERROR;
    }
    set_verbose(lp, 1);  // CRITICAL only
    set_minim(lp);
    int ok = milp_add_rows(lp, p, mc, val, col) && milp_set_bounds(lp, p, mc);
    free(val);
    free(col);
    if (!ok) {
        snprintf(msg, msglen, "milp: lp_solve rejected a row or bound while building the model");
        return MILP_ERROR;
    }

    // Exactness: integrality to 1e-9 and (almost) no optimality gap, so the
    // branch and bound proves the optimum instead of stopping within 1e-9
    // relative; the objective is recomputed from the chosen points afterwards.
    set_epsint(lp, 1e-9);
    set_mip_gap(lp, TRUE, 1e-13);
    set_mip_gap(lp, FALSE, 1e-13);
    double limit = p->time_limit > 0 ? p->time_limit : 10.0;
    MilpAbort abort_at = {t0 + limit};
    put_abortfunc(lp, milp_abort_check, &abort_at);
    set_timeout(lp, (long)ceil(limit) + 1);

    int ret = solve(lp);
    sol->nodes = (long long)get_total_nodes(lp);
    MilpStatus st = milp_status_of(ret);
    if (st == MILP_ERROR) {
        snprintf(msg, msglen, "milp: lp_solve solve() returned %d", ret);
        return MILP_ERROR;
    }
    if (st == MILP_OPTIMAL || st == MILP_SUBOPTIMAL || st == MILP_TIMEOUT) {
        if (milp_read_assignment(lp, p, mc, sol)) {
            if (st == MILP_TIMEOUT) st = MILP_SUBOPTIMAL;
        } else if (st != MILP_TIMEOUT) {
            snprintf(msg, msglen, "milp: lp_solve returned no integral assignment");
            return MILP_ERROR;
        }
    }
    return st;
}

MilpStatus milp_solve(const MilpProblem *p, MilpSolution *sol) {
    double t0 = milp_now();
    memset(sol, 0, sizeof *sol);
    if (!milp_problem_check(p, sol->error, (int)sizeof sol->error)) return milp_fail(sol, MILP_ERROR, t0, NULL);
    MilpColumns mc = {p->stages, p->noptions, NULL, NULL, 0, 0, 0, 0, 0, 0};
    mc.alive = malloc((size_t)mc.S * (size_t)mc.O);
    mc.lcol = malloc((size_t)mc.S * (size_t)mc.O * sizeof *mc.lcol);
    if (!mc.alive || !mc.lcol) {
        free(mc.alive);
        free(mc.lcol);
        return milp_fail(sol, MILP_ERROR, t0, "milp: out of memory");
    }
    int nalive = layer_options_alive(p, mc.alive);
    if (nalive <= 0) {
        free(mc.alive);
        free(mc.lcol);
        return milp_fail(sol, nalive < 0 ? MILP_ERROR : MILP_INFEASIBLE, t0,
                         nalive < 0 ? "milp: out of memory" : NULL);
    }
    milp_columns_layout(p, &mc);
    lprec *lp = make_lp(0, mc.ncols);
    char msg[128] = "milp: lp_solve could not allocate the model";
    MilpStatus st = lp ? milp_build_and_solve(lp, p, &mc, sol, t0, msg, sizeof msg) : MILP_ERROR;
    if (lp) delete_lp(lp);
    free(mc.alive);
    free(mc.lcol);
    if (st == MILP_ERROR) return milp_fail(sol, MILP_ERROR, t0, msg);
    if (st == MILP_INFEASIBLE || st == MILP_TIMEOUT) return milp_fail(sol, st, t0, NULL);
    sol->status = st;
    sol->seconds = milp_now() - t0;
    return st;
}
