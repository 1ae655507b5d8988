// Inter-stage MILP: on hundreds of random small instances (seed printed;
// MIST_SEED=N repeats one) lp_solve's optimum equals brute-force enumeration, the
// returned assignment is valid and achieves the returned objective, infeasible
// instances are reported; S = 1 reduces to min G·t + d; a hand-computed total.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "planner/milp.h"
#include "tests/tap.h"

static uint64_t rng_state;
static double rnd(void) {  // splitmix64 -> [0, 1)
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}
static int rint_below(int n) { return (int)(rnd() * n); }

#define MAXS 4
#define MAXO 8
#define MAXP 4

typedef struct {
    MilpProblem p;
    MilpFrontier f[MAXS * MAXO];
    double t[MAXS * MAXO][MAXP], d[MAXS * MAXO][MAXP];
    int opts[MAXO];
} Instance;

// random instance: values either continuous or on a coarse grid (ties between
// assignments), some frontiers empty, sometimes an explicit list of layer counts
static void make_instance(Instance *in, double empty_rate, int allow_list) {
    memset(in, 0, sizeof *in);
    MilpProblem *p = &in->p;
    p->stages = 1 + rint_below(MAXS);
    p->layers = 1 + rint_below(8);
    if (rnd() < 0.7 && p->layers < p->stages) p->layers = p->stages + rint_below(9 - p->stages);
    p->microbatches = 1 + rint_below(8);
    int grid = rnd() < 0.3;
    if (allow_list && rnd() < 0.25) {  // explicit options: a random subset of 1..8
        int n = 0;
        for (int j = 1; j <= 8; ++j)
            if (rnd() < 0.5) in->opts[n++] = j;
        if (n == 0) in->opts[n++] = 1 + rint_below(8);
        p->noptions = n;
        p->option_layers = in->opts;
    } else {
        p->noptions = p->layers;
        p->option_layers = NULL;
    }
    for (int i = 0; i < p->stages; ++i)
        for (int o = 0; o < p->noptions; ++o) {
            int idx = i * p->noptions + o;
            int j = p->option_layers ? p->option_layers[o] : o + 1;
            int np = rnd() < empty_rate ? 0 : 1 + rint_below(MAXP);
            // time grows with the layer count; d is a delay that may exceed t
            for (int k = 0; k < np; ++k) {
                double tk = grid ? (double)(j + rint_below(4)) : j * (0.5 + rnd());
                double dk = grid ? (double)rint_below(12) : 4.0 * j * rnd();
                in->t[idx][k] = tk;
                in->d[idx][k] = dk;
            }
            in->f[idx] = (MilpFrontier){np, in->t[idx], in->d[idx]};
        }
    p->frontier = in->f;
    p->time_limit = 5.0;
}

// assignment valid (option/point in range, layers sum to L) and achieves objective
static int assignment_valid(const MilpProblem *p, const MilpSolution *s) {
    int total = 0;
    double t[MIST_MAX_STAGES], d[MIST_MAX_STAGES];
    for (int i = 0; i < p->stages; ++i) {
        if (s->option[i] < 0 || s->option[i] >= p->noptions) return 0;
        const MilpFrontier *f = &p->frontier[i * p->noptions + s->option[i]];
        if (s->point[i] < 0 || s->point[i] >= f->npoints) return 0;
        int j = p->option_layers ? p->option_layers[s->option[i]] : s->option[i] + 1;
        if (s->layers[i] != j) return 0;
        total += j;
        t[i] = f->t[s->point[i]];
        d[i] = f->d[s->point[i]];
    }
    if (total != p->layers) return 0;
    // the 1F1B total written out independently of milp_pipeline_time
    double tmax = 0, tsum = 0, dmax = 0, prefix = 0;
    for (int i = 0; i < p->stages; ++i) tmax = fmax(tmax, t[i]), tsum += t[i];
    for (int i = 0; i < p->stages; ++i) dmax = fmax(dmax, d[i] - prefix), prefix += t[i];
    double T = (p->microbatches - 1) * tmax + tsum + dmax;
    return fabs(T - s->objective) <= 1e-12 * fmax(1.0, fabs(T));
}

int main(void) {
    const char *env = getenv("MIST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    rng_state = seed;
    diag("seed %llu (rerun with MIST_SEED=%llu)", (unsigned long long)seed, (unsigned long long)seed);

    // hand-computed: t = (1, 2), d = (3, 1), G = 4:
    // (G-1)·max t + Σ t + max(0, 3 − 0, 1 − 1) = 3·2 + 3 + 3 = 12
    double ht[] = {1, 2}, hd[] = {3, 1};
    ok(milp_pipeline_time(2, 4, ht, hd) == 12.0, "1F1B total of t=(1,2), d=(3,1), G=4 is 12");
    double hd0[] = {-1, 0.5};
    ok(milp_pipeline_time(2, 1, ht, hd0) == 3.0, "delay terms covered by earlier stages add nothing (G=1: 3)");

    static Instance in;
    int n = 0, n_inf = 0, mismatch = 0, invalid = 0, status_bad = 0, slow = 0;
    double worst = 0, max_ms = 0, sum_ms = 0;
    int dp_status_bad = 0, dp_mismatch = 0, dp_invalid = 0, cut_bad = 0;
    double dp_worst = 0;
    for (int trial = 0; trial < 600; ++trial) {
        make_instance(&in, trial % 4 == 3 ? 0.5 : 0.1, 1);
        MilpSolution a, b, c;
        milp_solve(&in.p, &a);
        milp_solve_bruteforce(&in.p, &b);
        milp_solve_dp(&in.p, &c);
        if (c.status != b.status) {
            if (!dp_status_bad++) diag("trial %d: dp status %d, brute force %d", trial, c.status, b.status);
        } else if (b.status == MILP_OPTIMAL) {
            double rel = fabs(c.objective - b.objective) / fmax(1.0, fabs(b.objective));
            dp_worst = fmax(dp_worst, rel);
            if (rel > 1e-9 && !dp_mismatch++)
                diag("trial %d: dp %.17g, brute force %.17g", trial, c.objective, b.objective);
            if (!assignment_valid(&in.p, &c) && !dp_invalid++) diag("trial %d: dp assignment invalid", trial);
        }
        ++n;
        sum_ms += a.seconds * 1e3;
        max_ms = fmax(max_ms, a.seconds * 1e3);
        if (b.status == MILP_INFEASIBLE) {
            ++n_inf;
            if (a.status != MILP_INFEASIBLE) {
                if (!status_bad++) diag("trial %d: brute force infeasible, milp status %d", trial, a.status);
            }
            continue;
        }
        if (a.status != MILP_OPTIMAL) {
            if (!status_bad++) diag("trial %d: milp status %d (%s), brute force %.17g", trial, a.status, a.error, b.objective);
            continue;
        }
        if (!assignment_valid(&in.p, &a)) {
            if (!invalid++) diag("trial %d: milp assignment invalid or does not achieve %.17g", trial, a.objective);
        }
        double rel = fabs(a.objective - b.objective) / fmax(1.0, fabs(b.objective));
        worst = fmax(worst, rel);
        if (rel > 1e-9) {
            if (!mismatch++)
                diag("trial %d (S %d L %d G %d): milp %.17g, brute force %.17g", trial, in.p.stages, in.p.layers,
                     in.p.microbatches, a.objective, b.objective);
        }
        if (a.seconds > 0.5) ++slow;
        // the cutoff path: capped at the optimum it must still find the optimum
        in.p.cutoff = b.objective;
        MilpSolution e;
        milp_solve(&in.p, &e);
        in.p.cutoff = 0;
        if (e.status != MILP_OPTIMAL || fabs(e.objective - b.objective) > 1e-9 * fmax(1.0, fabs(b.objective))) {
            if (!cut_bad++) diag("trial %d: with cutoff %.17g milp gives status %d, %.17g", trial, b.objective, e.status, e.objective);
        }
    }
    ok(status_bad == 0, "%d random instances (%d infeasible): milp status agrees with brute force", n, n_inf);
    ok(mismatch == 0, "milp optimum equals brute force within 1e-9 relative (worst %.3g)", worst);
    ok(invalid == 0, "milp assignments are valid splits of L and achieve the objective they report");
    ok(dp_status_bad == 0 && dp_mismatch == 0 && dp_invalid == 0,
       "label-setting DP: same status and optimum as brute force, valid assignments (worst %.3g)", dp_worst);
    ok(cut_bad == 0, "milp with cutoff = the optimum still returns the optimum");
    ok(n_inf > 0, "the random set exercised infeasible instances (%d)", n_inf);
    ok(slow == 0, "every small solve under 0.5 s (mean %.3f ms, max %.3f ms)", sum_ms / n, max_ms);

    // S = 1: all L layers on one stage, T = G·t + max(0, d); pick the minimum directly
    int s1bad = 0;
    for (int trial = 0; trial < 100; ++trial) {
        make_instance(&in, 0.0, 0);
        in.p.stages = 1;
        double best = INFINITY;
        const MilpFrontier *f = &in.f[in.p.layers - 1];
        for (int k = 0; k < f->npoints; ++k)
            best = fmin(best, in.p.microbatches * f->t[k] + fmax(0.0, f->d[k]));
        MilpSolution a;
        milp_solve(&in.p, &a);
        if (a.status != MILP_OPTIMAL || a.layers[0] != in.p.layers ||
            fabs(a.objective - best) > 1e-12 * fmax(1.0, best)) {
            if (!s1bad++) diag("S=1 trial %d: status %d objective %.17g, want %.17g", trial, a.status, a.objective, best);
        }
    }
    ok(s1bad == 0, "S = 1: optimum is min over points of G·t + max(0, d), with all L layers");

    // infeasible by construction: stage 1 has no points at all
    make_instance(&in, 0.0, 0);
    in.p.stages = 2;
    if (in.p.layers < 2) in.p.layers = 2, in.p.noptions = 2;
    for (int o = 0; o < in.p.noptions; ++o) in.f[in.p.noptions + o].npoints = 0;
    MilpSolution a;
    ok(milp_solve(&in.p, &a) == MILP_INFEASIBLE && isinf(a.objective), "a stage with only empty frontiers is infeasible");

    // infeasible by layer arithmetic: only even layer counts, odd L
    int even[] = {2, 4};
    in.p.stages = 2;
    in.p.layers = 5;
    in.p.noptions = 2;
    in.p.option_layers = even;
    for (int i = 0; i < 4; ++i) in.f[i] = (MilpFrontier){1, in.t[0], in.d[0]};
    in.t[0][0] = 1, in.d[0][0] = 1;
    ok(milp_solve(&in.p, &a) == MILP_INFEASIBLE, "layer counts {2, 4} cannot make L = 5: infeasible");
    in.p.layers = 6;
    ok(milp_solve(&in.p, &a) == MILP_OPTIMAL && a.layers[0] + a.layers[1] == 6, "the same with L = 6 is feasible");

    // bad input names the field
    in.p.stages = 0;
    ok(milp_solve(&in.p, &a) == MILP_ERROR && strstr(a.error, "stages") != NULL, "stages = 0 is an error naming the field: %s",
       a.error);
    return tap_done();
}
