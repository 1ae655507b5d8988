// The plan search (planner/search.h):
//  1. its optimum equals an exhaustive enumeration of the same discrete space
//     (every stage count, layer split, per-stage mesh, G, ZeRO level, ckpt and
//     offload grid point, each stage evaluated with the scalar tree walk, the
//     product of all stage choices scored with the 1F1B formula) on small
//     instances at several memory capacities, including ones where nothing fits;
//  2. the model properties its prunings rely on hold on random configurations:
//     t and t + d nondecreasing and peak memory nonincreasing in ckpt and in each
//     offload ratio, peak memory nondecreasing in the in-flight count p;
//  3. every --space respects its restrictions, and a larger space never predicts
//     a slower best plan (full <= offload <= ckpt <= zero <= megatron);
//  4. the plan written by plan_write_ini loads (plan_file_load, plan_validate)
//     and plan_analyze predicts the search's iteration time;
//  5. limits (what the training runtime executes) are respected.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/paro.h"
#include "planner/analyze.h"
#include "planner/stage_model.h"
#include "planner/search.h"
#include "base/config_load.h"
#include "base/plan_file.h"
#include "tests/tap.h"

static const char *srcdir(void) {
    const char *d = getenv("MIST_SRCDIR");
    return d && *d ? d : ".";
}

static int load(MistConfig *cfg, const char *example, const char *const *ov, int nov) {
    char path[1024], err[1024];
    snprintf(path, sizeof path, "%s/examples/%s", srcdir(), example);
    if (config_load(cfg, path, ov, nov, 0, err, sizeof err) != 0) {
        diag("config: %s", err);
        return -1;
    }
    return 0;
}

// ---------------------------------------------------------------- exhaustive
typedef struct {
    double t, d, peak, host;
    StagePlan sp;
} Choice;

// every stage configuration of one (kind, l, G, p, devices), evaluated once and
// reused for every capacity
typedef struct {
    int kind, l, G, p, n, count;
    Choice *v;
} Evaluated;
static Evaluated cache[256];
static int ncache;

typedef struct {
    const MistConfig *cfg;
    StageModel model[4];  // general models per kind (has_pre | has_post << 1)
    int64_t capacity;
    int64_t host_capacity;  // per rank; 0 = not checked
    int N, gpn, max_stages, wg, oa;
    double best;
    Plan best_plan;
    long long plans;
} Exhaustive;

static int evaluate_stage(Exhaustive *e, int kind, int l, int G, int p, int n, Choice **out);

// by t, then d (ties kept in their order of evaluation by the index)
static int choice_cmp(const void *x, const void *y) {
    const Choice *a = x, *b = y;
    if (a->t != b->t) return a->t < b->t ? -1 : 1;
    if (a->d != b->d) return a->d < b->d ? -1 : 1;
    return 0;
}

static int list_stage(Exhaustive *e, int kind, int l, int G, int p, int n, Choice **out) {
    Evaluated *ev = NULL;
    for (int i = 0; i < ncache && !ev; i++)
        if (cache[i].kind == kind && cache[i].l == l && cache[i].G == G && cache[i].p == p && cache[i].n == n)
            ev = &cache[i];
    if (!ev) {
        ev = &cache[ncache++];
        ev->kind = kind, ev->l = l, ev->G = G, ev->p = p, ev->n = n;
        ev->count = evaluate_stage(e, kind, l, G, p, n, &ev->v);
    }
    Choice *v = malloc((size_t)(ev->count + 1) * sizeof *v);
    int cnt = 0;
    for (int i = 0; i < ev->count; i++)
        if ((int64_t)ceil(ev->v[i].peak) <= e->capacity &&
            (e->host_capacity <= 0 || (int64_t)ceil(ev->v[i].host) <= e->host_capacity))
            v[cnt++] = ev->v[i];
    // Only the (t, d) Pareto set can be in a fastest plan: the 1F1B total is nondecreasing in
    // every stage's t and d, so a choice another beats (or ties) in both is never needed. Stable
    // sort by t, then keep each choice whose d is below every kept one's.
    qsort(v, (size_t)cnt, sizeof *v, choice_cmp);
    int kept = 0;
    for (int i = 0; i < cnt; i++)
        if (!kept || v[i].d < v[kept - 1].d) v[kept++] = v[i];
    *out = v;
    return kept;
}

static int evaluate_stage(Exhaustive *e, int kind, int l, int G, int p, int n, Choice **out) {
    const ModelConfig *m = &e->cfg->model;
    int64_t B = e->cfg->train.global_batch;
    int cap = 1024, cnt = 0;
    Choice *v = malloc((size_t)cap * sizeof *v);
    for (int tp = 1; tp <= n; tp++) {
        if (n % tp || e->gpn % tp || m->heads % tp || m->kv_heads % tp || m->ffn_hidden % tp) continue;
        int dp = n / tp;
        if (B % ((int64_t)G * dp)) continue;
        int b = (int)(B / ((int64_t)G * dp));
        // every knob of the full space: sharding codes (PaRO's I scopes where 1 < g < dp, without
        // offload, as the search tries them), ckpt, selective and lean (on the blocks not
        // checkpointed; lean without activation offload), sp (tp > 1), the offload grid
        StagePlan probe = {.layers = l, .dp = dp, .tp = tp};
        int grp = shard_group_size(&probe, e->gpn);
        for (int z = 0; z < SHARD_CODES; z++)
            for (int c = 0; c <= l; c++)
                for (int k = 0; k < 8; k++) {
                    int sel = k & 1, sp = k >> 1 & 1, lean = k >> 2 & 1;
                    if ((sel || lean) && c == l) continue;
                    if (sp && tp < 2) continue;
                    int paro = shard_code_has_i(z);
                    if (paro && !(grp > 1 && grp < dp)) continue;
                    for (int a = 0; a <= (paro ? 0 : e->wg); a++)
                        for (int g = 0; g <= (paro ? 0 : e->wg); g++)
                            for (int o = 0; o <= (paro ? 0 : e->oa); o++)
                                for (int q = 0; q <= (paro || lean ? 0 : e->oa); q++) {
                                    StageConfig sc = {{.layers = l, .dp = dp, .tp = tp, .b = b, .zero = z, .ckpt = c,
                                                       .sp = sp, .recompute = sel, .lean = lean,
                                                       .wo = (double)a / e->wg, .go = (double)g / e->wg,
                                                       .oo = (double)o / e->oa, .ao = (double)q / e->oa}, G, p};
                                    double out[ST_OUTPUTS];
                                    stage_eval_scalar(&e->model[kind], &sc, out);
                                    if (cnt == cap) v = realloc(v, (size_t)(cap *= 2) * sizeof *v);
                                    v[cnt++] = (Choice){out[ST_T], out[ST_D], fmax(out[ST_PEAK_FWD], out[ST_PEAK_BWD]),
                                                        out[ST_HOST], sc.plan};
                                }
                }
    }
    *out = v;
    return cnt;
}

static void product(Exhaustive *e, int S, int G, Choice **lists, const int *counts, int i, double *t, double *d,
                    int *pick) {
    if (i == S) {
        double T = pipeline_1f1b_seconds(S, G, t, d);
        e->plans++;
        if (T < e->best) {
            e->best = T;
            e->best_plan.G = G;
            e->best_plan.num_stages = S;
            for (int j = 0; j < S; j++) e->best_plan.stage[j] = lists[j][pick[j]].sp;
        }
        return;
    }
    for (int k = 0; k < counts[i]; k++) {
        t[i] = lists[i][k].t, d[i] = lists[i][k].d, pick[i] = k;
        product(e, S, G, lists, counts, i + 1, t, d, pick);
    }
}

static void splits(Exhaustive *e, int S, int G, int i, int left, int *l) {
    if (i == S - 1) {
        l[i] = left;
        Choice *lists[8];
        int counts[8];
        for (int j = 0; j < S; j++) {
            int kind = (j == 0) | (j == S - 1) << 1, p = S - j - 1 < G - 1 ? S - j - 1 : G - 1;
            counts[j] = list_stage(e, kind, l[j], G, p, e->N / S, &lists[j]);
        }
        double t[8], d[8];
        int pick[8];
        product(e, S, G, lists, counts, 0, t, d, pick);
        for (int j = 0; j < S; j++) free(lists[j]);
        return;
    }
    for (int x = 1; x <= left - (S - 1 - i); x++) {
        l[i] = x;
        splits(e, S, G, i + 1, left - x, l);
    }
}

static double exhaustive(Exhaustive *e) {
    int L = e->cfg->model.layers;
    int64_t B = e->cfg->train.global_batch;
    e->best = INFINITY;
    for (int S = 1; S <= L && S <= e->max_stages; S++) {
        if (e->N % S) continue;
        int n = e->N / S;
        if (n % e->gpn && e->gpn % n) continue;
        for (int G = 1; G <= B; G++) {
            if (B % G) continue;
            int l[8];
            splits(e, S, G, 0, L, l);
        }
    }
    return e->best;
}

// two plans with the same stage count, G and stages (every field, bit for bit)
static int same_plan(const Plan *a, const Plan *b) {
    if (a->num_stages != b->num_stages || a->G != b->G) return 0;
    for (int i = 0; i < a->num_stages; i++)
        if (!stage_plan_equal(&a->stage[i], &b->stage[i])) return 0;
    return 1;
}

static void test_exhaustive(void) {
    static MistConfig cfg;
    const char *ov[] = {"plan.mode=auto", "model.layers=3", "train.global_batch=4"};
    if (load(&cfg, "tiny.ini", ov, 3)) {
        ok(0, "exhaustive: tiny.ini loads");
        return;
    }
    HwProfile hw;
    profile_preset(&hw, "gcp-l4");
    static Exhaustive e;
    memset(&e, 0, sizeof e);
    e.cfg = &cfg;
    char err[512];
    for (int k = 0; k < 4; k++)
        if (stage_model_build(&e.model[k], &cfg, &hw, NULL, k & 1, k >> 1, err, sizeof err)) {
            ok(0, "exhaustive: stage model builds: %s", err);
            return;
        }
    // the peak of the plainest plan (one stage, dp over everything, nothing saved) scales the capacities
    StageConfig plain = {{.layers = cfg.model.layers, .dp = 2, .tp = 1, .b = 2}, 1, 0};
    double out[ST_OUTPUTS];
    stage_eval_scalar(&e.model[3], &plain, out);
    double base = fmax(out[ST_PEAK_FWD], out[ST_PEAK_BWD]);
    // and the host bytes of the same plan with every ratio offloaded scale the host capacities
    // (0: the profile's, which does not bind here); the host cases need offloading and limit it
    StageConfig all_off = {{.layers = cfg.model.layers, .dp = 2, .tp = 1, .b = 2, .wo = 1, .go = 1, .oo = 1, .ao = 1},
                           1, 0};
    stage_eval_scalar(&e.model[3], &all_off, out);
    double hbase = out[ST_HOST];
    const struct { double dev, host; } fractions[] = {{4.0, 0}, {0.8, 0}, {0.55, 0}, {0.4, 0}, {0.05, 0},
                                                      {0.55, 0.5}, {0.4, 0.5}, {0.4, 0.25}, {0.4, 0.02}, {0.4, 0.00001}};
    const struct { int N, gpn, max_stages; } shapes[] = {{2, 2, 2}, {4, 2, 2}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        for (int i = 0; i < ncache; i++) free(cache[i].v);
        ncache = 0;
        // the enumeration's models for this cluster shape (its collective groups), as the search's
        cfg.cluster.nodes = shapes[si].N / shapes[si].gpn, cfg.cluster.gpus_per_node = shapes[si].gpn;
        for (int k = 0; k < 4; k++) {
            stage_model_free(&e.model[k]);
            if (stage_model_build(&e.model[k], &cfg, &hw, NULL, k & 1, k >> 1, err, sizeof err)) {
                ok(0, "exhaustive: stage model builds: %s", err);
                return;
            }
        }
        for (size_t fi = 0; fi < sizeof fractions / sizeof fractions[0]; fi++) {
            e.N = shapes[si].N, e.gpn = shapes[si].gpn, e.max_stages = shapes[si].max_stages;
            e.wg = 1, e.oa = 2;
            e.capacity = (int64_t)(base * fractions[fi].dev);
            // [cluster] host_memory is per node: gpn ranks share it
            cfg.cluster.host_memory = (int64_t)(hbase * fractions[fi].host) * e.gpn;
            e.host_capacity = host_capacity_per_rank(&cfg, &hw, e.gpn);  // host 0: the profile's
            e.plans = 0;
            double want = exhaustive(&e);
            SearchOptions so;
            search_options_default(&so, &cfg);
            so.nodes = e.N / e.gpn, so.gpus_per_node = e.gpn, so.space = SPACE_FULL;
            so.limits.max_stages = e.max_stages;
            so.capacity = e.capacity;
            so.offload_steps_wg = e.wg, so.offload_steps_oa = e.oa;
            static SearchResult r, r3;
            SearchStats st, st3;
            int rc = plan_search(&cfg, &hw, NULL, &so, &r, &st, err, sizeof err);
            // the same search with three threads: the same answer, bit for bit
            so.threads = 3;
            int rc3 = plan_search(&cfg, &hw, NULL, &so, &r3, &st3, err, sizeof err);
            int same = rc3 == rc && (rc == 0 ? same_plan(&r.plan, &r3.plan) &&
                                                   !memcmp(&r.iteration_seconds, &r3.iteration_seconds, sizeof(double))
                                             : same_plan(&r.closest, &r3.closest) && r.shortfall == r3.shortfall);
            ok(same, "exhaustive N=%d cap %.2fx host %gx: 3 threads find the same %s (rc %d / %d)", e.N,
               fractions[fi].dev, fractions[fi].host, rc == 0 ? "plan and time" : "closest plan", rc, rc3);
            if (isinf(want)) {
                // the closest plan misses on the host where only the host capacity is below the base plan's
                int host_short = fractions[fi].dev >= 0.4 && fractions[fi].host > 0;
                ok(rc == 3 && !r.found && r.have_closest && r.shortfall > 0 && r.closest_host == host_short,
                   "exhaustive N=%d cap %.2fx host %gx: nothing fits in %lld plans, search says 3 (rc %d, short %lld "
                   "of %s memory)", e.N, fractions[fi].dev, fractions[fi].host, e.plans, rc, (long long)r.shortfall,
                   r.closest_host ? "host" : "device");
                continue;
            }
            static PlanAnalysis an;
            static MistConfig c2;
            c2 = cfg;
            c2.cluster.device_memory = e.capacity;
            c2.cluster.nodes = e.N / e.gpn, c2.cluster.gpus_per_node = e.gpn;
            int arc = rc == 0 ? plan_analyze(&an, &c2, &r.plan, &hw, NULL, err, sizeof err) : -1;
            int good = rc == 0 && arc == 0 && an.all_fit && fabs(an.iteration_seconds - want) <= 1e-12 * want &&
                       fabs(r.iteration_seconds - want) <= 1e-12 * want;
            ok(good && r.host_capacity == e.host_capacity,
               "exhaustive N=%d cap %.2fx host %gx: search %.15g s (analyzed %.15g) == enumeration %.15g s over %lld "
               "plans", e.N, fractions[fi].dev, fractions[fi].host, r.iteration_seconds,
               arc == 0 ? an.iteration_seconds : NAN, want, e.plans);
            if (!good) diag("rc %d arc %d err %s", rc, arc, err);
        }
    }
    for (int i = 0; i < ncache; i++) free(cache[i].v);
    ncache = 0;
    for (int k = 0; k < 4; k++) stage_model_free(&e.model[k]);
}

// ---------------------------------------------------------------- properties
static unsigned long long rs = 0x9E3779B97F4A7C15ull;
static double frand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (rs >> 11) * 0x1p-53;
}

static void test_properties(void) {
    static MistConfig cfg;
    const char *pov[] = {"plan.mode=auto"};
    if (load(&cfg, "gpt3-1.3b.ini", pov, 1)) {
        ok(0, "properties: gpt3-1.3b.ini loads");
        return;
    }
    HwProfile hw;
    profile_preset(&hw, "gcp-l4");
    StageModel m[4];
    char err[512];
    for (int k = 0; k < 4; k++)
        if (stage_model_build(&m[k], &cfg, &hw, NULL, k & 1, k >> 1, err, sizeof err)) {
            ok(0, "properties: model builds: %s", err);
            return;
        }
    // the properties the prunings use (docs/plan-search.md), one random step at a time:
    // P1 at a fixed ckpt, t and t + d are nondecreasing in each offload ratio (also from 0);
    // P2 with no offload, t and t + d are nondecreasing in ckpt;
    // P3 inside an offload pattern (nonzero ratios stay nonzero), peak memory is nonincreasing in wo, go
    //    and oo (not in ao: the activation prefetch buffer grows with it);
    // P4 peak memory is nondecreasing in the in-flight count p, and t, d do not depend on it.
    int bad[4] = {0, 0, 0, 0}, steps[4] = {0, 0, 0, 0}, trials = 1200;
    const double tol = 1e-12;
    for (int it = 0; it < trials; it++) {
        StageConfig c = {0};
        c.plan.layers = 1 + (int)(frand() * 12);
        c.plan.b = 1 << (int)(frand() * 3);
        c.plan.dp = 1 << (int)(frand() * 4);
        c.plan.tp = 1 << (int)(frand() * 3);
        c.plan.zero = (int)(frand() * 4);
        c.plan.ckpt = (int)(frand() * (c.plan.layers + 1));
        c.G = 1 + (int)(frand() * 16);
        c.p = (int)(frand() * 4);
        if (c.p > c.G - 1) c.p = c.G - 1;
        c.plan.wo = (int)(frand() * 5) / 4.0, c.plan.go = (int)(frand() * 5) / 4.0;
        c.plan.oo = (int)(frand() * 9) / 8.0, c.plan.ao = (int)(frand() * 9) / 8.0;
        int kind = (int)(frand() * 4), prop = it % 4, r = (int)(frand() * 4);
        if (prop == 1) c.plan.wo = c.plan.go = c.plan.oo = c.plan.ao = 0;
        StageConfig u = c;
        double *ratio[4] = {&u.plan.wo, &u.plan.go, &u.plan.oo, &u.plan.ao}, step = r < 2 ? 0.25 : 0.125;
        if (prop == 0 || prop == 2) {
            if (prop == 2 && *ratio[r] == 0) *ratio[r] = step;  // stay inside the pattern
            if (prop == 2) c = u;
            if (*ratio[r] + step > 1) continue;
            *ratio[r] += step;
        } else if (prop == 1) {
            if (c.plan.ckpt == c.plan.layers) continue;
            u.plan.ckpt++;
        } else {
            if (c.p + 1 > c.G - 1) continue;
            u.p++;
        }
        double a[ST_OUTPUTS], b[ST_OUTPUTS];
        stage_eval_scalar(&m[kind], &c, a);
        stage_eval_scalar(&m[kind], &u, b);
        double pa = fmax(a[ST_PEAK_FWD], a[ST_PEAK_BWD]), pb = fmax(b[ST_PEAK_FWD], b[ST_PEAK_BWD]);
        int fail = 0;
        if (prop < 2) fail = b[ST_T] < a[ST_T] * (1 - tol) || b[ST_T] + b[ST_D] < (a[ST_T] + a[ST_D]) * (1 - tol);
        else if (prop == 2) {
            if (r == 3) continue;  // ao: no claim
            fail = pb > pa * (1 + tol) + 1;
        } else
            fail = pb < pa * (1 - tol) - 1 || b[ST_T] != a[ST_T] || b[ST_D] != a[ST_D];
        steps[prop]++;
        if (fail) {
            bad[prop]++;
            diag("P%d (l %d b %d %dx%d z%d c%d G%d p%d wo %g go %g oo %g ao %g kind %d): t %.9g -> %.9g, d %.6g -> "
                 "%.6g, peak %.0f -> %.0f", prop + 1, c.plan.layers, c.plan.b, c.plan.dp, c.plan.tp, c.plan.zero,
                 c.plan.ckpt, c.G, c.p, c.plan.wo, c.plan.go, c.plan.oo, c.plan.ao, kind, a[ST_T], b[ST_T], a[ST_D],
                 b[ST_D], pa, pb);
        }
    }
    ok(!bad[0], "P1: t and t + d nondecreasing in each offload ratio (%d of %d steps violate)", bad[0], steps[0]);
    ok(!bad[1], "P2: without offload, t and t + d nondecreasing in ckpt (%d of %d violate)", bad[1], steps[1]);
    ok(!bad[2], "P3: inside an offload pattern, peak memory nonincreasing in wo, go, oo (%d of %d violate)", bad[2],
       steps[2]);
    ok(!bad[3], "P4: peak memory nondecreasing in p, t and d independent of p (%d of %d violate)", bad[3], steps[3]);
    for (int k = 0; k < 4; k++) stage_model_free(&m[k]);
}

// The models the search builds (from one shared base, split into a time and
// a memory program) give bitwise what a model built alone gives, on random
// configurations of each pattern and stage kind.
static void test_split_models(void) {
    static MistConfig cfg;
    const char *pov[] = {"plan.mode=auto"};
    if (load(&cfg, "gpt3-1.3b.ini", pov, 1)) {
        ok(0, "split models: gpt3-1.3b.ini loads");
        return;
    }
    HwProfile hw;
    profile_preset(&hw, "gcp-l4");
    char err[512];
    StageModelBase *base = stage_model_base_new(&cfg, err, sizeof err);
    if (!base) {
        ok(0, "split models: base builds: %s", err);
        return;
    }
    enum { N = 150 };
    static double col[STAGE_SYMS][N], whole[ST_OUTPUTS][N], part[4][N];
    int differ = 0, models = 0;
    for (int kind = 0; kind < 4; kind++)
        for (int z = 0; z < 4; z++)
            for (int mask = 0; mask < 16; mask += 1 + (kind + z) % 3) {
                StagePattern pat = {z, mask & 1, (mask >> 1) & 1, (mask >> 2) & 1, (mask >> 3) & 1};
                StageModel alone, split;
                if (stage_model_build_pattern(&alone, &cfg, &hw, NULL, kind & 1, kind >> 1, &pat, err, sizeof err) ||
                    stage_model_build_from(&split, base, &hw, NULL, kind & 1, kind >> 1, &pat, STAGE_BUILD_SPLIT, err,
                                           sizeof err)) {
                    ok(0, "split models: build: %s", err);
                    stage_model_base_free(base);
                    return;
                }
                for (int i = 0; i < N; i++) {
                    int l = 1 + (int)(frand() * 12), G = 1 + (int)(frand() * 16);
                    StageConfig c = {{.layers = l, .zero = z}, G, 0};
                    c.plan.b = 1 << (int)(frand() * 3);
                    c.plan.dp = 1 << (int)(frand() * 4);
                    c.plan.tp = 1 << (int)(frand() * 3);
                    c.plan.ckpt = (int)(frand() * (l + 1));
                    c.plan.wo = pat.wo ? (1 + (int)(frand() * 4)) / 4.0 : 0;
                    c.plan.go = pat.go ? (1 + (int)(frand() * 4)) / 4.0 : 0;
                    c.plan.oo = pat.oo ? (1 + (int)(frand() * 8)) / 8.0 : 0;
                    c.plan.ao = pat.ao ? (1 + (int)(frand() * 8)) / 8.0 : 0;
                    c.p = (int)(frand() * (G < 4 ? G : 4));
                    double v[STAGE_SYMS];
                    stage_sym_values(&c, v);
                    for (int q = 0; q < STAGE_SYMS; q++) col[q][i] = v[q];
                }
                const double *cols[STAGE_SYMS];
                double *outs[ST_OUTPUTS], *touts[ST_OUTPUTS] = {0}, *pouts[ST_OUTPUTS] = {0};
                for (int q = 0; q < STAGE_SYMS; q++) cols[q] = col[q];
                for (int k = 0; k < ST_OUTPUTS; k++) outs[k] = whole[k];
                touts[ST_T] = part[0], touts[ST_D] = part[1], pouts[ST_PEAK_FWD] = part[2], pouts[ST_PEAK_BWD] = part[3];
                stage_eval_batch(&alone, cols, outs, N);
                stage_eval_batch(&split, cols, touts, N);
                stage_eval_batch(&split, cols, pouts, N);
                const int which[4] = {ST_T, ST_D, ST_PEAK_FWD, ST_PEAK_BWD};
                for (int q = 0; q < 4; q++)
                    for (int i = 0; i < N; i++)
                        if (memcmp(&part[q][i], &whole[which[q]][i], sizeof(double)) && differ++ < 3)
                            diag("kind %d z%d mask %d row %d output %s: split %.17g alone %.17g", kind, z, mask, i,
                                 stage_output_names[which[q]], part[q][i], whole[which[q]][i]);
                models++;
                stage_model_free(&alone);
                stage_model_free(&split);
            }
    stage_model_base_free(base);
    ok(differ == 0, "search models (shared base, time and memory programs) == models built alone, bitwise (%d models, "
       "%d values differ)", models, differ);
}

// ---------------------------------------------------------------- spaces
static int plan_respects(const Plan *p, PlanSpace sp, int L) {
    for (int i = 0; i < p->num_stages; i++) {
        const StagePlan *s = &p->stage[i];
        if (sp < SPACE_ZERO && s->zero > 1) return 0;
        // megatron-mist: Megatron-LM as Mist ran it (every block recomputed, ZeRO-1, b in {1, 2, 4})
        if (sp == SPACE_MEGATRON_MIST && (s->ckpt != s->layers || s->zero != 1 || s->sp || s->recompute ||
                                          (s->b != 1 && s->b != 2 && s->b != 4) || plan_virtual(p) != 1))
            return 0;
        // below full, selective recompute only without checkpointed blocks (Megatron-LM's exclusive choice)
        if (sp < SPACE_FULL && s->recompute == RECOMPUTE_SELECTIVE && s->ckpt) return 0;
        if (s->sp && s->tp < 2) return 0;
        if (sp < SPACE_OFFLOAD && (s->wo || s->go || s->oo || s->ao)) return 0;
        const StagePlan *f = &p->stage[0];
        if (sp < SPACE_FULL && (s->layers != L / p->num_stages || s->dp != f->dp || s->tp != f->tp ||
                                s->zero != f->zero || s->ckpt != f->ckpt || s->sp != f->sp ||
                                s->recompute != f->recompute || s->wo != f->wo || s->go != f->go ||
                                s->oo != f->oo || s->ao != f->ao))
            return 0;
        if (fmod(s->wo * 4, 1) || fmod(s->go * 4, 1) || fmod(s->oo * 8, 1) || fmod(s->ao * 8, 1)) return 0;
    }
    return 1;
}

static void test_spaces(const char *example, const char *hwname, int nodes, int gpn, double cap_gib,
                        const char *const *ov, int nov) {
    static MistConfig cfg;
    if (load(&cfg, example, ov, nov)) {
        ok(0, "spaces: %s loads", example);
        return;
    }
    HwProfile hw;
    profile_preset(&hw, hwname);
    double T[SPACE_FULL + 1];
    int rcs[SPACE_FULL + 1], respects = 1, files_ok = 1;
    char err[1024];
    for (int sp = 0; sp <= SPACE_FULL; sp++) {
        SearchOptions so;
        search_options_default(&so, &cfg);
        so.nodes = nodes, so.gpus_per_node = gpn, so.space = (PlanSpace)sp;
        so.capacity = (int64_t)(cap_gib * 1073741824.0);
        static SearchResult r;
        SearchStats st;
        rcs[sp] = plan_search(&cfg, &hw, NULL, &so, &r, &st, err, sizeof err);
        T[sp] = rcs[sp] == 0 ? r.iteration_seconds : INFINITY;
        if (rcs[sp] == 2) diag("%s: %s", search_space_name((PlanSpace)sp), err);
        if (rcs[sp] != 0) continue;
        respects &= plan_respects(&r.plan, (PlanSpace)sp, cfg.model.layers);
        // the plan file round trip, and the analysis agrees with the search
        char path[] = "/tmp/mist-test-search-XXXXXX";
        int fd = mkstemp(path);
        FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (!f) {
            files_ok = 0;
            continue;
        }
        plan_write_ini(&r.plan, f);
        fclose(f);
        static Plan back;
        static PlanAnalysis an;
        static MistConfig c2;
        c2 = cfg;
        c2.cluster.device_memory = so.capacity;
        int lrc = plan_file_load(&back, path, err, sizeof err);
        int vrc = lrc ? -1 : plan_validate(&back, &cfg.model, cfg.train.global_batch, nodes * gpn, path, err, sizeof err);
        int arc = vrc ? -1 : plan_analyze(&an, &c2, &back, &hw, NULL, err, sizeof err);
        remove(path);
        if (lrc || vrc || arc || !an.all_fit || fabs(an.iteration_seconds - T[sp]) > 1e-9 * T[sp]) {
            files_ok = 0;
            diag("%s: round trip: load %d validate %d analyze %d fits %d T %.15g vs %.15g: %s",
                 search_space_name((PlanSpace)sp), lrc, vrc, arc, an.all_fit, an.iteration_seconds, T[sp], err);
        }
    }
    diag("%s on %dx%d %s, %.1f GiB: megatron-mist %.6g, megatron %.6g, zero %.6g, ckpt %.6g, offload %.6g, full %.6g s",
         example, nodes, gpn, hwname, cap_gib, T[0], T[1], T[2], T[3], T[4], T[5]);
    int ordered = 1;
    for (int sp = 1; sp <= SPACE_FULL; sp++) ordered &= T[sp] <= T[sp - 1] * (1 + 1e-12);
    ok(rcs[SPACE_FULL] == 0, "%s %dx%d: the full space finds a plan", example, nodes, gpn);
    ok(ordered, "%s %dx%d: full <= offload <= ckpt <= zero <= megatron <= megatron-mist", example, nodes, gpn);
    ok(respects, "%s %dx%d: every space's plan respects its restrictions", example, nodes, gpn);
    ok(files_ok, "%s %dx%d: plan files load, validate and analyze to the search's time", example, nodes, gpn);
}

static void test_limits(void) {
    static MistConfig cfg;
    if (load(&cfg, "tiny.ini", NULL, 0)) {
        ok(0, "limits: tiny.ini loads");
        return;
    }
    HwProfile hw;
    profile_preset(&hw, "cpu");
    SearchOptions so;
    search_options_default(&so, &cfg);
    so.nodes = 1, so.gpus_per_node = 4;
    so.limits = (SearchLimits){.max_stages = 1, .max_tp = 1, .max_tp_staged = 1, .zero_levels = 1};  // one stage, tp 1, ZeRO 0
    static SearchResult r;
    SearchStats st;
    char err[512];
    int rc = plan_search(&cfg, &hw, NULL, &so, &r, &st, err, sizeof err);
    const StagePlan *s = &r.plan.stage[0];
    ok(rc == 0 && r.plan.num_stages == 1 && s->tp == 1 && s->zero == 0 && s->dp == 4 && !s->wo && !s->go && !s->oo &&
           !s->ao,
       "runtime limits: one stage, tp 1, ZeRO 0, no offload (rc %d: %d stage(s), %dx%d, zero %d)", rc,
       r.plan.num_stages, s->dp, s->tp, s->zero);
    ok(st.lp_agrees == 1, "lp_solve confirms the label-setting DP's optimum");
}

int main(void) {
    test_exhaustive();
    test_properties();
    test_split_models();
    {
        const char *ov[] = {"plan.mode=auto", "model.layers=4", "train.global_batch=8"};
        test_spaces("tiny.ini", "gcp-l4", 1, 4, 0.0008, ov, 3);
    }
    {
        const char *ov[] = {"plan.mode=auto", "train.global_batch=64", "model.seq_len=2048"};
        test_spaces("gpt3-1.3b.ini", "gcp-l4", 1, 4, 0, ov, 3);
    }
    {
        // the full space holds every uniform plan: a case where a pruning once lost one
        const char *ov[] = {"plan.mode=auto", "train.global_batch=128", "model.seq_len=4096"};
        test_spaces("gpt3-6.7b.ini", "gcp-a100-40g", 1, 8, 0, ov, 3);
    }
    test_limits();
    return tap_done();
}
