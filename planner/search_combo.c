// One combination (stages S, micro-batches G, mesh set) of the plan search
// (planner/search.c walks them): every stage kind's candidates
// (search_stage.c) and their Pareto frontiers per layer count and in-flight
// count, then the inter-stage solve over them (milp.h) for the best split of
// the L blocks; a uniform space's combination is one configuration for every
// stage (search_uniform.c).
//
// Layer counts (docs/plan-search.md has the proof): a stage of l blocks with
// G * t_min(l) above the incumbent is never in a better plan, which caps l at
// l_hi; the others then hold at most (S-1) * l_hi blocks, so
// l >= L - (S-1) * l_hi.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "planner/milp.h"
#include "planner/pareto.h"
#include "planner/search_internal.h"

// A frontier of one (stage class, layer count): points sorted by t.
typedef struct {
    int n;
    double *t, *d;
    Cand *c;
} Front;

static void front_free(Front *f) {
    free(f->t), free(f->d), free(f->c);
    memset(f, 0, sizeof *f);
}

void search_saved_free(SavedProblem *sp) {
    free(sp->f), free(sp->opts), free(sp->vals);
    memset(sp, 0, sizeof *sp);
}

// Pareto frontier of a candidate list (optionally a bounded sample of it).
static int front_build(Search *s, const CandList *in, Front *out) {
    memset(out, 0, sizeof *out);
    if (!in->n) return 0;
    double *t = malloc((size_t)in->n * sizeof *t), *d = malloc((size_t)in->n * sizeof *d);
    int *idx = malloc((size_t)in->n * sizeof *idx), *smp = malloc((size_t)in->n * sizeof *smp);
    if (!t || !d || !idx || !smp) goto oom;
    for (int i = 0; i < in->n; i++) t[i] = in->v[i].t, d[i] = in->v[i].d;
    int m = pareto_frontier(t, d, in->n, idx);
    if (m < 0) goto oom;
    if (s->opt->frontier_max >= 2 && m > s->opt->frontier_max) {
        m = pareto_sample(t, idx, m, s->opt->frontier_max, smp);
        memcpy(idx, smp, (size_t)m * sizeof *idx);
    }
    out->t = malloc((size_t)m * sizeof *out->t);
    out->d = malloc((size_t)m * sizeof *out->d);
    out->c = malloc((size_t)m * sizeof *out->c);
    if (!out->t || !out->d || !out->c) goto oom;
    for (int k = 0; k < m; k++) {
        out->t[k] = t[idx[k]], out->d[k] = d[idx[k]], out->c[k] = in->v[idx[k]];
    }
    out->n = m;
    s->stats->frontiers++;
    s->stats->frontier_points += m;
    if (m > s->stats->frontier_max_points) s->stats->frontier_max_points = m;
    free(t), free(d), free(idx), free(smp);
    return 0;
oom:
    free(t), free(d), free(idx), free(smp);
    front_free(out);
    snprintf(s->err, sizeof s->err, "out of memory building a frontier");
    return -1;
}

int search_kinds(int S, int *kinds) {
    if (S == 1) {
        kinds[0] = KIND_ONLY;
        return 1;
    }
    kinds[0] = KIND_FIRST, kinds[1] = KIND_LAST;
    if (S == 2) return 2;
    kinds[2] = KIND_MIDDLE;
    return 3;
}

// A uniform space's combination: one configuration for every stage (search_uniform.c). 0 or -1.
static int combo_search_uniform(Search *s, const Combo *c, Best *best) {
    StagePlan sp;
    double T = INFINITY;
    int rc = uniform_search(s, c->S, c->G, &c->mesh[0], &sp, &T), v = 1;
    if (rc < 0) return -1;
    // interleaved: the S pipeline ranks of the combination with v chunks each
    if (s->rules.max_virtual > 1) {
        StagePlan spv;
        int bv = 1, rv = uniform_search_virtual(s, c->S, c->G, &c->mesh[0], s->rules.max_virtual, &spv, &bv, &T);
        if (rv < 0) return -1;
        if (rv > 0) sp = spv, v = bv, rc = 1;
    }
    if (rc > 0 && T < s->incumbent) {
        s->incumbent = T;
        best->found = 1;
        best->T = T;
        best->plan.G = c->G;
        best->plan.num_stages = c->S * v;
        best->plan.virtual_chunks = v;
        for (int i = 0; i < c->S * v; i++) best->plan.stage[i] = sp;
        search_saved_free(&best->saved);  // nothing to confirm: no inter-stage problem
    }
    return 0;
}

// The in-flight counts the stages of each kind take, each once, ascending: plist[kind][0..np[kind]).
typedef struct {
    int p[KINDS][MIST_MAX_STAGES], n[KINDS];
} InFlight;

static void inflight_lists(int S, int G, InFlight *f) {
    memset(f->n, 0, sizeof f->n);
    for (int i = 0; i < S; i++) {
        int k = stage_kind(i, S), p = stage_p(i, S, G), seen = 0;
        for (int j = 0; j < f->n[k]; j++) seen |= f->p[k][j] == p;
        if (!seen) f->p[k][f->n[k]++] = p;
    }
    for (int k = 0; k < KINDS; k++)  // ascending
        for (int a = 1; a < f->n[k]; a++)
            for (int b = a; b > 0 && f->p[k][b - 1] > f->p[k][b]; b--) {
                int tmp = f->p[k][b];
                f->p[k][b] = f->p[k][b - 1], f->p[k][b - 1] = tmp;
            }
}

// the index of stage i's in-flight count in its kind's list
static int inflight_index(const InFlight *f, int i, int S, int G) {
    int k = stage_kind(i, S), p = stage_p(i, S, G), pi = 0;
    while (f->p[k][pi] != p) pi++;
    return pi;
}

// The layer counts worth searching: lhi[kind] caps each kind's (t_min(l) grows with l: the cap is
// the last l with G * t_min(l) under the incumbent), *hi the largest cap, *lo what the other
// stages leave (L - (S - 1) * hi); *tau the least t per block over the kinds and layer counts the
// stages may take, so the other stages of a stage with l blocks sum to at least tau * (L - l).
// 1: some split fits under the bound; 0: none; -1: error.
static int layer_range(Search *s, const Combo *c, const int *kinds, int nk, int *lo, int *hi, int lhi[KINDS],
                       double *tau) {
    int S = c->S, G = c->G, L = s->L, top = 0;
    static _Thread_local double tmin[KINDS][4097];  // t_min(l) per kind (full space); one per search thread
    for (int q = 0; q < nk; q++) {
        if (stage_t_lower_bounds(s, kinds[q], 1, L - S + 1, G, c->mesh, c->nmesh, tmin[kinds[q]]) != 0) return -1;
        int cap = 0;
        for (int l = 1; l <= L - S + 1; l++)
            if (G * tmin[kinds[q]][l] <= s->incumbent * (1 + 1e-12)) cap = l;
        lhi[kinds[q]] = cap;
        if (cap > top) top = cap;
    }
    *hi = top;
    *lo = L - (S - 1) * top;
    if (*lo < 1) *lo = 1;
    if (*hi < *lo || (long)S * *hi < L) return 0;  // no split fits under the bound
    *tau = INFINITY;
    if (S > 1)
        for (int q = 0; q < nk; q++)
            for (int l = *lo; l <= lhi[kinds[q]]; l++) *tau = fmin(*tau, tmin[kinds[q]][l] / l);
    if (isinf(*tau)) *tau = 0;
    return 1;
}

// The frontiers of one combination: fronts[(kind * MIST_MAX_STAGES + in-flight index) * O + layer option]
typedef struct {
    int O, lo;         // layer options lo .. lo + O - 1
    Front *fronts;
} Fronts;

static Front *front_at(const Fronts *fr, int k, int pi, int o) {
    return &fr->fronts[((size_t)k * MIST_MAX_STAGES + pi) * fr->O + o];
}

// Every kind's candidates (search_stage.c) and their Pareto frontiers. 0 or -1.
static int combo_frontiers(Search *s, const Combo *c, const int *kinds, int nk, const int lhi[KINDS],
                           const InFlight *inf, CandList *lists, Fronts *fr) {
    for (int q = 0; q < nk; q++) {
        int k = kinds[q];
        if (lhi[k] < fr->lo) continue;
        int nl = lhi[k] - fr->lo + 1, np = inf->n[k];
        for (int j = 0; j < nl * np; j++) lists[j].n = 0;
        if (stage_candidates(s, k, fr->lo, lhi[k], c->G, c->mesh, c->nmesh, inf->p[k], np, lists) != 0) return -1;
        for (int li = 0; li < nl; li++)
            for (int pi = 0; pi < np; pi++)
                if (front_build(s, &lists[li * np + pi], front_at(fr, k, pi, li)) != 0) return -1;
    }
    return 0;
}

// The inter-stage problem kept for the lp_solve confirmation: a copy of its frontiers. 0 or -1.
static int saved_keep(Search *s, SavedProblem *sv, const MilpProblem *prob, const MilpFrontier *mf) {
    int S = prob->stages, O = prob->noptions;
    search_saved_free(sv);
    size_t total = 0;
    for (int j = 0; j < S * O; j++) total += (size_t)mf[j].npoints;
    sv->f = malloc((size_t)S * O * sizeof *sv->f);
    sv->opts = malloc((size_t)O * sizeof *sv->opts);
    sv->vals = malloc((2 * total + 1) * sizeof *sv->vals);
    if (!sv->f || !sv->opts || !sv->vals) {
        snprintf(s->err, sizeof s->err, "out of memory");
        return -1;
    }
    memcpy(sv->opts, prob->option_layers, (size_t)O * sizeof *sv->opts);
    double *v = sv->vals;
    for (int j = 0; j < S * O; j++) {
        int n = mf[j].npoints;
        if (n > 0) {  // an empty frontier has no arrays: memcpy from NULL is undefined even for 0 bytes
            memcpy(v, mf[j].t, (size_t)n * sizeof *v);
            memcpy(v + n, mf[j].d, (size_t)n * sizeof *v);
        }
        sv->f[j] = (MilpFrontier){n, v, v + n};
        v += 2 * n;
    }
    sv->p = *prob;
    sv->p.option_layers = sv->opts;
    sv->p.frontier = sv->f;
    return 0;
}

int combo_search(Search *s, const Combo *c, Best *best) {
    if (s->rules.uniform) return combo_search_uniform(s, c, best);
    int S = c->S, G = c->G;
    int kinds[3], nk = search_kinds(S, kinds);
    InFlight inf;
    inflight_lists(S, G, &inf);
    int lo, hi, lhi[KINDS] = {0};
    double tau;
    int some = layer_range(s, c, kinds, nk, &lo, &hi, lhi, &tau);
    if (some <= 0) return some;
    Fronts fr = {hi - lo + 1, lo, NULL};
    int O = fr.O;
    fr.fronts = calloc((size_t)KINDS * MIST_MAX_STAGES * O, sizeof *fr.fronts);
    // (layer counts, in-flight counts) candidate lists of one kind
    CandList *lists = calloc((size_t)O * MIST_MAX_STAGES, sizeof *lists);
    MilpFrontier *mf = calloc((size_t)S * O, sizeof *mf);
    int *opts = malloc((size_t)O * sizeof *opts);
    int rc = -1;
    if (!fr.fronts || !mf || !opts || !lists) {
        snprintf(s->err, sizeof s->err, "out of memory");
        goto done;
    }
    for (int o = 0; o < O; o++) opts[o] = lo + o;
    s->tau = tau;
    if (combo_frontiers(s, c, kinds, nk, lhi, &inf, lists, &fr) != 0) goto done;
    for (int i = 0; i < S; i++) {
        int k = stage_kind(i, S), pi = inflight_index(&inf, i, S, G);
        for (int o = 0; o < O; o++) {
            const Front *f = front_at(&fr, k, pi, o);
            mf[i * O + o] = (MilpFrontier){f->n, f->t, f->d};
        }
    }
    MilpProblem prob = {S, s->L, G, O, opts, mf, 0, 0};
    MilpSolution sol;
    double t0 = search_now();
    MilpStatus st = milp_solve_dp(&prob, &sol);
    s->stats->dp_seconds += search_now() - t0;
    s->stats->dp_solves++;
    if (st == MILP_ERROR) {
        snprintf(s->err, sizeof s->err, "inter-stage solve: %s", sol.error);
        goto done;
    }
    // ties replace a uniform-pass plan too, so that the inter-stage problem can be confirmed
    if (st == MILP_OPTIMAL && (sol.objective < s->incumbent || (!best->saved.f && sol.objective <= s->incumbent * (1 + 1e-12)))) {
        s->incumbent = sol.objective;
        best->found = 1;
        best->T = sol.objective;
        Plan *pl = &best->plan;
        memset(pl, 0, sizeof *pl);
        pl->G = G;
        pl->num_stages = S;
        for (int i = 0; i < S; i++) {
            const Front *f = front_at(&fr, stage_kind(i, S), inflight_index(&inf, i, S, G), sol.option[i]);
            pl->stage[i] = cand_unpack(&f->c[sol.point[i]], c->mesh, &s->rules, sol.layers[i], s->B, G);
        }
        if (saved_keep(s, &best->saved, &prob, mf) != 0) goto done;
    }
    rc = 0;
done:
    if (fr.fronts)
        for (size_t j = 0; j < (size_t)KINDS * MIST_MAX_STAGES * O; j++) front_free(&fr.fronts[j]);
    if (lists)
        for (size_t j = 0; j < (size_t)O * MIST_MAX_STAGES; j++) cand_free(&lists[j]);
    free(lists), free(fr.fronts), free(mf), free(opts);
    return rc;
}
