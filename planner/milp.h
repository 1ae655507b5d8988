// Inter-stage search: split L layers over S pipeline stages and pick one point of
// each stage's (t, d) Pareto frontier so that the 1F1B iteration time is minimal.
//
// For stage times t_i and "delay" terms d_i (stage i's time beyond its steady-state
// share, e.g. the first forward pass or optimizer step not hidden by the pipeline):
//   T = (G-1)·max_i t_i + Σ_i t_i + max(0, max_i (d_i − Σ_{j<i} t_j))
// Solved exactly as a MILP with lp_solve (binaries l[i][j]: stage i has layer count
// j; z[i][j][k]: and uses frontier point k) and, for tests, by brute force.
#ifndef MIST_MILP_H
#define MIST_MILP_H

#include "base/plan.h"  // MIST_MAX_STAGES

// One stage's frontier for one layer count: points (t[k], d[k]), k < npoints.
// npoints == 0 means that layer count does not fit on that stage.
typedef struct {
    int npoints;
    const double *t;  // (npoints,)
    const double *d;  // (npoints,)
} MilpFrontier;

typedef struct {
    int stages;        // S, 1..MIST_MAX_STAGES, in pipeline order
    int layers;        // L, total layers to place
    int microbatches;  // G >= 1
    int noptions;      // allowed layer counts per stage
    const int *option_layers;  // (noptions,) positive layer counts; NULL: 1..noptions
    // (stages, noptions) row-major: frontier[i*noptions + o] for stage i with
    // option_layers[o] layers (or o+1 when option_layers is NULL)
    const MilpFrontier *frontier;
    double time_limit;  // seconds for lp_solve, <= 0: 10 s
    // milp_solve only: a known upper bound on the optimum (e.g. milp_solve_dp's or a
    // feasible plan's total), <= 0: none. Points with G·t + max(0, d) above it are
    // left out and the objective row is capped at it, which shrinks the search.
    // A cutoff below the optimum makes the answer MILP_INFEASIBLE.
    double cutoff;
} MilpProblem;

typedef enum {
    MILP_OPTIMAL = 0,
    MILP_INFEASIBLE = 1,  // no split of L layers has a feasible point on every stage
    MILP_SUBOPTIMAL = 2,  // time limit hit with a feasible (not proven optimal) answer
    MILP_TIMEOUT = 3,     // time limit hit with nothing feasible found
    MILP_ERROR = 4,       // bad input or lp_solve failure (message in .error)
} MilpStatus;

typedef struct {
    MilpStatus status;
    double objective;              // T recomputed exactly from the chosen points
    int option[MIST_MAX_STAGES];   // chosen layer-count option per stage
    int layers[MIST_MAX_STAGES];   // its layer count
    int point[MIST_MAX_STAGES];    // chosen frontier point per stage
    double t[MIST_MAX_STAGES], d[MIST_MAX_STAGES];  // the chosen points' values
    double lp_objective;           // what lp_solve reported (for diagnostics)
    double seconds;                // wall time of the solve
    long long nodes;               // branch-and-bound nodes (0 for brute force)
    char error[160];
} MilpSolution;

// The 1F1B total T above for S stages with times t[] and delay terms d[].
double milp_pipeline_time(int stages, int microbatches, const double *t, const double *d);

// Exact optimum through lp_solve. Returns sol->status.
MilpStatus milp_solve(const MilpProblem *p, MilpSolution *sol);

// Same optimum without an LP: a label-setting dynamic program over the stages with
// Pareto dominance on (Tmax, Σ t, max delay) and bound pruning (milp_dp.c). nodes
// counts the labels kept. Ignores time_limit.
MilpStatus milp_solve_dp(const MilpProblem *p, MilpSolution *sol);

// Reference: enumerates every layer split and point choice (small instances only).
// Ties keep the first assignment in lexicographic (option, point) order.
MilpStatus milp_solve_bruteforce(const MilpProblem *p, MilpSolution *sol);

// Checks a problem's shape; on error writes a message naming the field to err.
int milp_problem_check(const MilpProblem *p, char *err, int errlen);

#endif
