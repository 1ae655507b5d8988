// The search's stage models and its batch of rows (search_internal.h): a model
// per (stage kind, ZeRO level, offload pattern) built on first use, the batch
// columns, evaluation, the memory filters, the incumbent's bound and the
// lower bounds on a stage's time that order and prune the outer loop.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "planner/search_internal.h"

StageModel *stage_model_get(Search *s, int kind, int zero, int mask) {
    StageModel **slot = &s->models[kind][zero][mask];
    if (*slot) return *slot;
    StageModel *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(s->err, sizeof s->err, "out of memory building a stage model");
        return NULL;
    }
    StagePattern pat = {zero, mask & 1, (mask >> 1) & 1, (mask >> 2) & 1, (mask >> 3) & 1};
    double t0 = search_now();
    if (!s->base && !(s->base = stage_model_base_new(s->cfg, s->err, sizeof s->err))) {
        free(m);
        return NULL;
    }
    if (stage_model_build_from(m, s->base, s->hw, s->table, kind & 1, (kind >> 1) & 1, &pat, STAGE_BUILD_SPLIT,
                               s->err, sizeof s->err) != 0) {
        free(m);
        return NULL;
    }
    s->stats->models_built++;
    s->stats->model_seconds += search_now() - t0;
    *slot = m;
    return m;
}

void search_models_free(Search *s) {
    for (int k = 0; k < KINDS; k++)
        for (int z = 0; z < SHARD_CODES; z++)
            for (int m = 0; m < 16; m++)
                if (s->models[k][z][m]) {
                    stage_model_free(s->models[k][z][m]);
                    free(s->models[k][z][m]);
                    s->models[k][z][m] = NULL;
                }
    stage_model_base_free(s->base);
    s->base = NULL;
    for (int i = 0; i < STAGE_SYMS; i++) free(s->cols[i]), s->cols[i] = NULL;
    for (int i = 0; i < ST_OUTPUTS; i++) free(s->outs[i]), s->outs[i] = NULL;
    s->cap = 0;
}

int search_reserve(Search *s, size_t n) {
    if (n <= s->cap) return 0;
    size_t cap = s->cap ? s->cap : 1024;
    while (cap < n) cap *= 2;
    for (int i = 0; i < STAGE_SYMS; i++) {
        double *p = realloc(s->cols[i], cap * sizeof *p);
        if (!p) goto oom;
        s->cols[i] = p;
    }
    for (int k = 0; k < ST_OUTPUTS; k++) {
        if (k != ST_T && k != ST_D && k != ST_PEAK_FWD && k != ST_PEAK_BWD && k != ST_HOST) continue;
        double *p = realloc(s->outs[k], cap * sizeof *p);
        if (!p) goto oom;
        s->outs[k] = p;
    }
    s->cap = cap;
    return 0;
oom:
    snprintf(s->err, sizeof s->err, "out of memory for %zu batch columns", cap);
    return -1;
}

void search_eval(Search *s, StageModel *m, size_t n, int what) {
    if (!n) return;
    double *outs[ST_OUTPUTS] = {0};
    if (what & EVAL_TIME) outs[ST_T] = s->outs[ST_T], outs[ST_D] = s->outs[ST_D];
    if (what & EVAL_PEAKS) outs[ST_PEAK_FWD] = s->outs[ST_PEAK_FWD], outs[ST_PEAK_BWD] = s->outs[ST_PEAK_BWD];
    if ((what & EVAL_PEAKS) && s->host_capacity > 0) outs[ST_HOST] = s->outs[ST_HOST];
    double t0 = search_now();
    stage_eval_batch(m, (const double *const *)s->cols, outs, n);
    s->stats->eval_seconds += search_now() - t0;
    s->stats->candidates += (long long)n;
    if (what & EVAL_TIME) s->stats->time_evaluations += (long long)n;
    s->stats->classes++;
}

void search_copy_row(Search *s, size_t to, size_t from) {
    if (to == from) return;
    for (int k = 0; k < STAGE_SYMS; k++) s->cols[k][to] = s->cols[k][from];
}

// G*t + max(0, d, rest) <= incumbent: the candidate can still be part of a
// better plan (rest = tau * (L - l): a lower bound on the other stages' summed t)
int search_bound_ok(const Search *s, int G, double t, double d, int l) {
    if (!(t >= 0) || isnan(d)) return 0;
    double rest = s->tau * (s->L - l);
    return G * t + fmax(fmax(0.0, d), rest) <= s->incumbent * (1 + 1e-12);
}

int search_row_fits_device(const Search *s, size_t i) {
    double peak = fmax(s->outs[ST_PEAK_FWD][i], s->outs[ST_PEAK_BWD][i]);
    return (int64_t)ceil(peak) <= s->capacity;
}

// Host bytes grow with every offload ratio and with p, so where device
// memory alone is monotone in a direction, so is this predicate except along
// an offload line (device memory falls, host memory rises): grid_lines
// settles a line on device memory and checks the host at the settled step.
int search_row_fits(const Search *s, size_t i) {
    return search_row_fits_device(s, i) && (s->host_capacity <= 0 || (int64_t)ceil(s->outs[ST_HOST][i]) <= s->host_capacity);
}

int stage_t_lower_bounds(Search *s, int kind, int lmin, int lmax, int G, const Mesh *meshes, int nmesh,
                         double *tmin) {
    int nl = lmax - lmin + 1;
    for (int l = lmin; l <= lmax; l++) tmin[l] = INFINITY;
    if (search_reserve(s, (size_t)nmesh * nl) != 0) return -1;
    for (int z = 0; z < SHARD_CODES; z++) {
        if (!(s->rules.zero_mask >> z & 1)) continue;
        int some = 0;  // a mesh the code is searched on (else no model to build)
        for (int mi = 0; mi < nmesh && !some; mi++) some = space_code_ok(s, z, meshes[mi].dp, meshes[mi].tp);
        if (!some) continue;
        StageModel *m = stage_model_get(s, kind, z, 0);
        if (!m) return -1;
        size_t n = 0;
        for (int mi = 0; mi < nmesh; mi++) {
            int64_t per = (int64_t)G * meshes[mi].dp;
            if (s->B % per || !space_code_ok(s, z, meshes[mi].dp, meshes[mi].tp)) continue;
            for (int l = lmin; l <= lmax; l++) {
                StagePlan sp = {.layers = l, .dp = meshes[mi].dp, .tp = meshes[mi].tp, .b = (int)(s->B / per),
                                .zero = z};
                search_set_row(s, n++, &sp, G, 0);
            }
        }
        search_eval(s, m, n, EVAL_TIME);
        for (size_t i = 0; i < n; i++) {
            int l = lmin + (int)(i % (size_t)nl);
            tmin[l] = fmin(tmin[l], s->outs[ST_T][i]);
        }
    }
    return 0;
}

double stage_t_lower_bound(Search *s, int kind, int l, int G, const Mesh *meshes, int nmesh) {
    double tmin[4097];
    if (l < 1 || l > 4096) return -1;
    return stage_t_lower_bounds(s, kind, l, l, G, meshes, nmesh, tmin) != 0 ? -1 : tmin[l];
}
