// The outer search: every (stages S, micro-batches G, mesh set) combination
// of the space, best lower bound first; per combination the intra-stage
// frontiers (search_stage.c) and the inter-stage solve (milp.h).
//
// Bounds (docs/plan-search.md has the proofs):
//  - a combination's lower bound is G * t_min(ceil(L/S)): some stage holds at
//    least ceil(L/S) blocks, the 1F1B total is at least G * t of any stage,
//    and t_min(l) (no ckpt, no offload, memory ignored, best mesh and ZeRO
//    level) is below the t of every candidate with l or more blocks;
//    combinations are visited in increasing bound and the loop stops at the
//    first bound above the incumbent;
//  - layer counts: a stage of l blocks with G * t_min(l) above the incumbent
//    is never in a better plan, which caps l at l_hi; the others then hold at
//    most (S-1) * l_hi blocks, so l >= L - (S-1) * l_hi.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "models/model.h"
#include "planner/analyze.h"
#include "planner/milp.h"
#include "planner/pareto.h"
#include "planner/search_internal.h"

typedef struct {
    int S, G, nmesh;
    Mesh mesh[SEARCH_MAX_MESHES];
    double lb;
} Combo;

// A frontier of one (stage class, layer count): points sorted by t.
typedef struct {
    int n;
    double *t, *d;
    Cand *c;
} Front;

// The winning inter-stage problem, kept to confirm it with lp_solve.
typedef struct {
    MilpProblem p;
    MilpFrontier *f;
    int *opts;
    double *vals;
} SavedProblem;

void search_options_default(SearchOptions *o, const MistConfig *cfg) {
    memset(o, 0, sizeof *o);
    o->nodes = cfg->cluster.nodes > 0 ? cfg->cluster.nodes : 1;
    o->gpus_per_node = cfg->cluster.gpus_per_node > 0 ? cfg->cluster.gpus_per_node : 1;
    o->space = cfg->plan.space;
    o->confirm_lp = 1;
}


static int cmp_combo(const void *a, const void *b) {
    const Combo *x = a, *y = b;
    if (x->lb != y->lb) return x->lb < y->lb ? -1 : 1;
    if (x->S != y->S) return x->S - y->S;
    return x->G - y->G;
}

static void front_free(Front *f) {
    free(f->t), free(f->d), free(f->c);
    memset(f, 0, sizeof *f);
}

static void saved_free(SavedProblem *sp) {
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

static int kinds_of(int S, int *kinds) {
    if (S == 1) {
        kinds[0] = KIND_ONLY;
        return 1;
    }
    kinds[0] = KIND_FIRST, kinds[1] = KIND_LAST;
    if (S == 2) return 2;
    kinds[2] = KIND_MIDDLE;
    return 3;
}

typedef struct {
    int found;
    Plan plan;
    double T;
    SavedProblem saved;
} Best;

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
        saved_free(&best->saved);  // nothing to confirm: no inter-stage problem
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
    saved_free(sv);
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

// Search one combination; improves *best and s->incumbent. 0 or -1 (s->err).
static int combo_search(Search *s, const Combo *c, Best *best) {
    if (s->rules.uniform) return combo_search_uniform(s, c, best);
    int S = c->S, G = c->G;
    int kinds[3], nk = kinds_of(S, kinds);
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

static void progress(Search *s, long long done, long long total, int final) {
    if (!s->opt->progress) return;
    double now = search_now();
    if (final) {
        if (s->t_progress > 0) fprintf(stderr, "\r\033[K");
        return;
    }
    if (now - s->t_start < 1.0 || now - s->t_progress < 0.2) return;
    s->t_progress = now;
    if (s->opt->threads > 1) {  // the threads count their candidates apart: combinations and the best so far
        if (isinf(s->incumbent))
            fprintf(stderr, "\rmist-plan: searching: %lld/%lld combinations taken, no plan fits yet\033[K", done, total);
        else
            fprintf(stderr, "\rmist-plan: searching: %lld/%lld combinations taken, best %.4g s\033[K", done, total,
                    s->incumbent);
        return;
    }
    if (isinf(s->incumbent))
        fprintf(stderr, "\rmist-plan: searching: %lld/%lld combinations, %lld candidates, no plan fits yet\033[K", done,
                total, s->stats->candidates);
    else
        fprintf(stderr, "\rmist-plan: searching: %lld/%lld combinations, %lld candidates, best %.4g s\033[K", done,
                total, s->stats->candidates, s->incumbent);
}

// One pass over a space; best and s->incumbent carry over between passes.
enum { WARM_OFFLOAD_STEPS = 2 };  // the offload warm start's grid: halves (divides 4 and 8)
static void rules_for(Search *s, PlanSpace space) {
    space_rules(&s->rules, space, &s->opt->limits);
    if (s->opt->offload_steps_wg > 0 && s->opt->offload_steps_wg <= SEARCH_WG_STEPS)
        s->rules.wg_steps = s->opt->offload_steps_wg;
    if (s->opt->offload_steps_oa > 0 && s->opt->offload_steps_oa <= SEARCH_OA_STEPS)
        s->rules.oa_steps = s->opt->offload_steps_oa;
    if (s->warm_steps > 0) {
        if (s->rules.wg_steps % s->warm_steps == 0) s->rules.wg_steps = s->warm_steps;
        if (s->rules.oa_steps % s->warm_steps == 0) s->rules.oa_steps = s->warm_steps;
    }
    space_grid(s);
}

#ifdef _OPENMP
static double best_time(const Best *b) { return b->found ? b->T : INFINITY; }

static void stats_add(SearchStats *to, const SearchStats *x) {
    to->candidates += x->candidates;
    to->candidates_fit += x->candidates_fit;
    to->time_evaluations += x->time_evaluations;
    to->classes += x->classes;
    to->frontiers += x->frontiers;
    to->frontier_points += x->frontier_points;
    if (x->frontier_max_points > to->frontier_max_points) to->frontier_max_points = x->frontier_max_points;
    to->dp_solves += x->dp_solves;
    to->dp_seconds += x->dp_seconds;
    to->models_built += x->models_built;
    to->model_seconds += x->model_seconds;
    to->eval_seconds += x->eval_seconds;
}

// The combinations of one pass (sorted by lower bound) searched by several threads, each with
// its own stage models and batch buffers, taking the next combination as it finishes one. A
// thread searches a combination against the best time found so far by any thread, raised by
// 1e-9, so that the combination's best plan is found whenever it is within that of the best
// (pruning only drops candidates whose bound exceeds it, and a combination's frontiers keep
// every point under it). Each combination's result is kept, and the results are merged in the
// sorted order with the rules of the one-thread loop: the same plan wins, whatever the timing.
// The statistics differ from one thread's (more is searched before the bound tightens).
typedef struct {
    Best b;
    int searched;
} ComboResult;

static int search_combos_parallel(Search *s, const Combo *combos, int ncombo, Best *best, int count_stats) {
    // a thread beyond one per combination would take none and only hold its copy of the state
    int nt = s->opt->threads < ncombo ? s->opt->threads : ncombo;
    ComboResult *res = calloc((size_t)ncombo, sizeof *res);
    Search **ts = calloc((size_t)nt, sizeof *ts);
    SearchStats *tst = calloc((size_t)nt, sizeof *tst);
    int rc = -1;
    if (!res || !ts || !tst) goto oom;
    for (int t = 0; t < nt; t++) {
        if (!(ts[t] = malloc(sizeof **ts))) goto oom;
        *ts[t] = *s;  // shares the read-only configuration, profile and op table
        memset(ts[t]->models, 0, sizeof ts[t]->models);
        ts[t]->base = NULL;
        for (int i = 0; i < STAGE_SYMS; i++) ts[t]->cols[i] = NULL;
        for (int i = 0; i < ST_OUTPUTS; i++) ts[t]->outs[i] = NULL;
        ts[t]->cap = 0;
        ts[t]->stats = &tst[t];
        ts[t]->err[0] = '\0';
    }
    double shared = s->incumbent;  // the best time found by any thread so far
    int next = 0, failed = 0;
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num();
        Search *me = ts[t];
        for (;;) {
            int j, stop;
            double inc;
#pragma omp atomic capture
            j = next++;
#pragma omp atomic read
            stop = failed;
#pragma omp atomic read
            inc = shared;
            if (stop || j >= ncombo || combos[j].lb > inc * (1 + 1e-12)) break;  // sorted: no later one wins
            me->incumbent = inc * (1 + 1e-9);
            res[j].searched = 1;
            if (combo_search(me, &combos[j], &res[j].b) != 0) {
#pragma omp critical(search_failure)
                if (!s->err[0]) memcpy(s->err, me->err, sizeof s->err);
#pragma omp atomic write
                failed = 1;
                break;
            }
            if (res[j].b.found) {
#pragma omp critical(search_incumbent)
                if (res[j].b.T < shared) shared = res[j].b.T;
            }
            if (t == 0) {
#pragma omp critical(search_incumbent)
                s->incumbent = shared;
                progress(s, j + 1, ncombo, 0);
            }
        }
    }
    if (failed) goto done;
    // the one-thread loop's rules, in its order
    for (int j = 0; j < ncombo; j++) {
        Best *r = &res[j].b;
        if (count_stats) s->stats->combos_searched += res[j].searched;
        if (!r->found) continue;
        int take = s->rules.uniform ? r->T < best_time(best)
                                    : r->T < best_time(best) || (!best->saved.f && r->T <= best_time(best) * (1 + 1e-12));
        if (!take) continue;
        saved_free(&best->saved);
        *best = *r;
        memset(r, 0, sizeof *r);  // its saved problem moved to best
    }
    if (best->found) s->incumbent = best->T;
    rc = 0;
    goto done;
oom:
    snprintf(s->err, sizeof s->err, "out of memory starting the search threads");
done:
    for (int t = 0; t < nt && ts; t++)
        if (ts[t]) {
            stats_add(s->stats, &tst[t]);
            search_models_free(ts[t]);
            free(ts[t]);
        }
    for (int j = 0; j < ncombo && res; j++) saved_free(&res[j].b.saved);
    free(res), free(ts), free(tst);
    return rc;
}
#endif

// The combinations' lower bounds are loose (G times the fastest stage: GPT-3 22B on 4x8 L4 has
// every bound within 83.6..88.7 s of a 101.9 s optimum), so their order barely predicts where
// the best plan lies. The warm start's plan (a plan of this space too) says better: its
// combination is searched first, so the bound is tight from the start (its lower bound is at
// most the warm plan's time, the incumbent, so it is never skipped; the rest keep their order,
// so "sorted: no later one wins" still holds for them). GPT-3 22B on 4x8 L4, full space: 6.07 M
// candidates in 0.61 s in bound order, 1.31 M in 0.25 s with its 8-stage combination first.
static void promote_best_combo(Combo *combos, int ncombo, const Best *best) {
    if (!best->found) return;
    const Plan *p = &best->plan;
    for (int j = 0; j < ncombo; j++) {
        const Combo *c = &combos[j];
        if (c->S != p->num_stages || c->G != p->G) continue;
        if (c->nmesh == 1 && (c->mesh[0].dp != p->stage[0].dp || c->mesh[0].tp != p->stage[0].tp)) continue;
        Combo first = combos[j];
        memmove(combos + 1, combos, (size_t)j * sizeof *combos);
        combos[0] = first;
        return;
    }
}

static int search_pass(Search *s, PlanSpace space, Best *best, int count_stats) {
    rules_for(s, space);
    int ncombo = 0, cap = 64;
    Combo *combos = malloc((size_t)cap * sizeof *combos);
    if (!combos) return -1;
    for (int S = 1; S <= s->L && S <= MIST_MAX_STAGES; S++) {
        if (!space_stage_count_ok(s, S)) continue;
        Mesh meshes[SEARCH_MAX_MESHES];
        int nm = space_meshes(s, s->N / S, meshes, SEARCH_MAX_MESHES);
        for (int G = 1; G <= s->B; G++) {
            if (s->B % G) continue;
            Combo c = {S, G, 0, {{0, 0}}, 0};
            for (int mi = 0; mi < nm; mi++) {
                if (s->B % ((int64_t)G * meshes[mi].dp)) continue;
                if (s->rules.uniform) {
                    Combo u = c;
                    u.nmesh = 1;
                    u.mesh[0] = meshes[mi];
                    if (ncombo == cap) {
                        Combo *n2 = realloc(combos, (size_t)(cap *= 2) * sizeof *combos);
                        if (!n2) goto oom;
                        combos = n2;
                    }
                    combos[ncombo++] = u;
                } else {
                    c.mesh[c.nmesh++] = meshes[mi];
                }
            }
            if (!s->rules.uniform && c.nmesh) {
                if (ncombo == cap) {
                    Combo *n2 = realloc(combos, (size_t)(cap *= 2) * sizeof *combos);
                    if (!n2) goto oom;
                    combos = n2;
                }
                combos[ncombo++] = c;
            }
        }
    }
    for (int j = 0; j < ncombo; j++) {
        Combo *c = &combos[j];
        int kinds[3], nk = kinds_of(c->S, kinds);
        int lstar = (s->L + c->S - 1) / c->S;
        double lb = INFINITY;
        for (int q = 0; q < nk; q++) {
            double t = stage_t_lower_bound(s, kinds[q], lstar, c->G, c->mesh, c->nmesh);
            if (t < 0) goto fail;
            lb = fmin(lb, t);
        }
        c->lb = c->G * lb;
    }
    qsort(combos, (size_t)ncombo, sizeof *combos, cmp_combo);
    promote_best_combo(combos, ncombo, best);
    if (count_stats) s->stats->combos = ncombo;
#ifdef _OPENMP
    if (s->opt->threads > 1 && ncombo > 1) {
        int rc = search_combos_parallel(s, combos, ncombo, best, count_stats);
        free(combos);
        return rc;
    }
#endif  // without OpenMP: one thread, whatever opt->threads says
    for (int j = 0; j < ncombo; j++) {
        if (combos[j].lb > s->incumbent * (1 + 1e-12)) break;  // sorted: none after it can win
        if (count_stats) s->stats->combos_searched++;
        if (combo_search(s, &combos[j], best) != 0) goto fail;
        progress(s, j + 1, ncombo, 0);
    }
    free(combos);
    return 0;
oom:
    snprintf(s->err, sizeof s->err, "out of memory listing combinations");
fail:
    free(combos);
    return -1;
}

int plan_search(const MistConfig *cfg, const HwProfile *hw, const OpTable *table, const SearchOptions *opt,
                SearchResult *result, SearchStats *stats, char *err, size_t errlen) {
    memset(result, 0, sizeof *result);
    memset(stats, 0, sizeof *stats);
    stats->lp_agrees = -1;
    static Search s;  // model cache: keep it off the stack
    memset(&s, 0, sizeof s);
    s.cluster_cfg = *cfg;
    s.cluster_cfg.cluster.nodes = opt->nodes, s.cluster_cfg.cluster.gpus_per_node = opt->gpus_per_node;
    cfg = s.cfg = &s.cluster_cfg;
    s.hw = hw, s.table = table, s.opt = opt, s.stats = stats;
    s.L = cfg->model.layers;
    s.B = cfg->train.global_batch;
    s.capacity = opt->capacity > 0 ? opt->capacity
                 : cfg->cluster.device_memory > 0 ? cfg->cluster.device_memory
                                                  : profile_capacity_bytes(hw);
    s.host_capacity = host_capacity_per_rank(cfg, hw, opt->gpus_per_node);
    s.incumbent = INFINITY;
    s.t_start = search_now();
    result->capacity = s.capacity;
    result->host_capacity = s.host_capacity;
    if (opt->nodes < 1 || opt->gpus_per_node < 1) {
        snprintf(err, errlen, "search: %d node(s) x %d GPU(s) per node; allowed: both >= 1", opt->nodes,
                 opt->gpus_per_node);
        return 2;
    }
    // the product in 64 bits: each factor may be up to 10^6 (mist-plan's options)
    int64_t devices = (int64_t)opt->nodes * opt->gpus_per_node;
    if (devices > SEARCH_MAX_DEVICES) {
        snprintf(err, errlen, "search: %d node(s) x %d GPU(s) per node = %lld devices; allowed: at most %d (2^20) "
                 "devices in all. Hint: check --nodes and --gpus-per-node (or [cluster] nodes and gpus_per_node)",
                 opt->nodes, opt->gpus_per_node, (long long)devices, SEARCH_MAX_DEVICES);
        return 2;
    }
    s.N = (int)devices;
    result->ranks = s.N;
    result->space = opt->space;
    if (s.B < 1 || s.L < 1) {
        snprintf(err, errlen, "search: global_batch %lld, layers %d; allowed: both >= 1", (long long)s.B, s.L);
        return 2;
    }
    // No layout at all (a divisibility rule, not memory, rules out every one) is a request that
    // cannot be searched: exit 2 with the rule that fails, not 3 with a shortfall there is none of.
    space_rules(&s.rules, opt->space, &opt->limits);
    char why[1024];
    if (!space_any_layout(&s, why, sizeof why)) {
        snprintf(err, errlen, "search: %s", why);
        return 2;
    }
    // Every plan keeps the model's states (weights, gradients, optimizer state) somewhere in the
    // cluster: at best sharded over all ranks without copies, each byte on a device or offloaded
    // to its host. When they alone exceed all device and host memory together, nothing in any
    // space fits: say so now (with the closest plan) instead of searching the whole space.
    if (s.host_capacity > 0) {
        int pb, gb, ob;
        cost_state_bytes(cfg->train.precision, &pb, &gb, &ob);
        double states = (double)model_param_count(&cfg->model) * (pb + gb + ob);
        double memory = (double)s.N * ((double)s.capacity + (double)s.host_capacity);
        if (states > memory) {
            result->states_bytes = states, result->cluster_bytes = memory;
            rules_for(&s, opt->space);
            int bad = search_closest_plan(&s, result) != 0;
            if (bad) snprintf(err, errlen, "search: %s", s.err);
            search_models_free(&s);
            stats->seconds = search_now() - s.t_start;
            return bad ? 2 : 3;
        }
    }
    Best best;
    memset(&best, 0, sizeof best);
    int rc = 0;
    // Warm start: a plan of a smaller space (uniform stages, no offload) is a
    // plan of the larger one; its time bounds the larger search from the start.
    if (opt->space >= SPACE_OFFLOAD && search_pass(&s, SPACE_CKPT, &best, 0) != 0) rc = -1;
    // When nothing fits without offload (the model's states need the hosts), the uniform offload
    // space on a grid of halves (0, 1/2, 1: points of the full grid) is the warm start: without
    // an incumbent the full space's first combinations are searched unbounded (Llama-70B on one
    // node of 8 A100s: 115 M candidates, 13.7 s; with this start 4.0 s, the same plan). Halves,
    // not the full grid: a warm pass on quarters and eighths costs more than it saves on small
    // clusters (GPT-3 22B on one A100: 0.13 s without a warm start, 0.51 s with the full grid,
    // 0.20 s with halves).
    if (!rc && !best.found && opt->space > SPACE_OFFLOAD) {
        s.warm_steps = WARM_OFFLOAD_STEPS;
        if (search_pass(&s, SPACE_OFFLOAD, &best, 0) != 0) rc = -1;
        s.warm_steps = 0;
    }
    if (!rc && search_pass(&s, opt->space, &best, 1) != 0) rc = -1;
    progress(&s, 0, 0, 1);
    if (rc) {
        snprintf(err, errlen, "search: %s", s.err);
        saved_free(&best.saved);
        search_models_free(&s);
        return 2;
    }
    if (best.found) {
        result->found = 1;
        result->plan = best.plan;
        result->iteration_seconds = best.T;
        if (opt->confirm_lp && best.saved.f) {
            MilpSolution sol;
            best.saved.p.cutoff = best.T * (1 + 1e-9);
            best.saved.p.time_limit = 10;
            double t0 = search_now();
            MilpStatus st = milp_solve(&best.saved.p, &sol);
            stats->lp_seconds += search_now() - t0;
            stats->lp_solves++;
            stats->lp_agrees = st == MILP_OPTIMAL && fabs(sol.objective - best.T) <= 1e-9 * best.T;
        }
    } else {
        rules_for(&s, opt->space);
        if (search_closest_plan(&s, result) != 0) {
            snprintf(err, errlen, "search: %s", s.err);
            saved_free(&best.saved);
            search_models_free(&s);
            return 2;
        }
    }
    saved_free(&best.saved);
    search_models_free(&s);
    stats->seconds = search_now() - s.t_start;
    return best.found ? 0 : 3;
}
