// Reference for the inter-stage MILP: try every layer split and every frontier
// point per stage and keep the smallest 1F1B total (ties: the first one found).
// Exponential; meant for the small instances the tests compare milp_solve with.
#include "planner/milp.h"

#include <math.h>
#include <string.h>
#include <time.h>

typedef struct {
    const MilpProblem *p;
    int option[MIST_MAX_STAGES], point[MIST_MAX_STAGES];
    double t[MIST_MAX_STAGES], d[MIST_MAX_STAGES];
    MilpSolution *best;
} BruteState;

static void brute_stage(BruteState *st, int i, int remaining) {
    const MilpProblem *p = st->p;
    if (i == p->stages) {
        if (remaining != 0) return;
        double T = milp_pipeline_time(p->stages, p->microbatches, st->t, st->d);
        if (st->best->status != MILP_OPTIMAL || T < st->best->objective) {
            st->best->status = MILP_OPTIMAL;
            st->best->objective = T;
            for (int s = 0; s < p->stages; ++s) {
                st->best->option[s] = st->option[s];
                st->best->point[s] = st->point[s];
                st->best->layers[s] = p->option_layers ? p->option_layers[st->option[s]] : st->option[s] + 1;
                st->best->t[s] = st->t[s];
                st->best->d[s] = st->d[s];
            }
        }
        return;
    }
    for (int o = 0; o < p->noptions; ++o) {
        int j = p->option_layers ? p->option_layers[o] : o + 1;
        if (j > remaining) continue;
        const MilpFrontier *f = &p->frontier[i * p->noptions + o];
        for (int k = 0; k < f->npoints; ++k) {
            st->option[i] = o;
            st->point[i] = k;
            st->t[i] = f->t[k];
            st->d[i] = f->d[k];
            brute_stage(st, i + 1, remaining - j);
        }
    }
}

MilpStatus milp_solve_bruteforce(const MilpProblem *p, MilpSolution *sol) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    memset(sol, 0, sizeof *sol);
    sol->objective = INFINITY;
    if (!milp_problem_check(p, sol->error, (int)sizeof sol->error)) {
        sol->status = MILP_ERROR;
        return sol->status;
    }
    sol->status = MILP_INFEASIBLE;
    BruteState st = {.p = p, .best = sol};
    brute_stage(&st, 0, p->layers);
    sol->lp_objective = sol->objective;
    clock_gettime(CLOCK_MONOTONIC, &b);
    sol->seconds = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    return sol->status;
}
