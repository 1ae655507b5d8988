// The outer search: every (stages S, micro-batches G, mesh set) combination
// of the space, best lower bound first, each searched by search_combo.c
// (its intra-stage frontiers and the inter-stage solve); warm-start passes,
// threads, and the lp_solve confirmation of the winner.
//
// Bound (docs/plan-search.md has the proof): a combination's lower bound is
// G * t_min(ceil(L/S)): some stage holds at least ceil(L/S) blocks, the 1F1B
// total is at least G * t of any stage, and t_min(l) (no ckpt, no offload,
// memory ignored, best mesh and ZeRO level) is below the t of every candidate
// with l or more blocks; combinations are visited in increasing bound and
// the loop stops at the first bound above the incumbent.
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
#include "planner/search_internal.h"

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
        search_saved_free(&best->saved);
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
    for (int j = 0; j < ncombo && res; j++) search_saved_free(&res[j].b.saved);
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
        int kinds[3], nk = search_kinds(c->S, kinds);
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
        search_saved_free(&best.saved);
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
            search_saved_free(&best.saved);
            search_models_free(&s);
            return 2;
        }
    }
    search_saved_free(&best.saved);
    search_models_free(&s);
    stats->seconds = search_now() - s.t_start;
    return best.found ? 0 : 3;
}
