// Uniform stages (the baseline spaces megatron .. offload): every stage holds
// L/S blocks on the same mesh with the same ZeRO level, checkpoint count and
// offload ratios, as Megatron-LM and DeepSpeed configure a whole run with one
// set of flags. A configuration is feasible when it fits on every stage (the
// first holds the embedding and the most in-flight micro-batches, the last
// the head and loss), and its time is the 1F1B total over the stages' t and d.
// No per-stage choice, so no frontier and no inter-stage solve.
//
// Prunings (docs/plan-search.md): a configuration whose ratios-zero variant
// fits is no slower than its offloading variants (P1: t and t + d of every
// stage are nondecreasing in each ratio, and so is the 1F1B total); the bound
// G*t + max(0, d) of any stage above the incumbent rules a configuration and
// its offloading variants out; an offload pattern whose least-memory point
// (P3) does not fit on the first kind is skipped.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "planner/interleave.h"
#include "planner/search_internal.h"

typedef struct {
    int ci, mask, g;  // checkpoint option, offload pattern, grid point
    double t[3], d[3];
} URow;

static int fits_row(const Search *s, size_t i) { return search_row_fits(s, i); }

// Every stage's plan: l blocks on mesh me, b, ZeRO level z, option o (ckpt, selective, sp), offload grid
// steps q (NULL: none).
static StagePlan uniform_plan(const Search *s, int l, const Mesh *me, int b, int z, const StageOpt *o,
                              const unsigned char *q) {
    StagePlan sp = {.layers = l, .dp = me->dp, .tp = me->tp, .b = b, .zero = z, .ckpt = o->ckpt, .sp = o->sp,
                    .recompute = o->sel ? RECOMPUTE_SELECTIVE : RECOMPUTE_NONE, .lean = o->lean};
    if (q) stage_set_offload_steps(&sp, &s->rules, q);
    return sp;
}

int uniform_search(Search *s, int S, int G, const Mesh *me, StagePlan *best_sp, double *best_T) {
    const SpaceRules *R = &s->rules;
    int l = s->L / S, kinds[3], pk[3], nk;
    if (S == 1) kinds[0] = KIND_ONLY, pk[0] = 0, nk = 1;
    else {
        kinds[0] = KIND_FIRST, pk[0] = S - 1 < G - 1 ? S - 1 : G - 1;
        kinds[1] = KIND_LAST, pk[1] = 0;
        nk = 2;
        if (S > 2) kinds[2] = KIND_MIDDLE, pk[2] = S - 2 < G - 1 ? S - 2 : G - 1, nk = 3;
    }
    int64_t per = (int64_t)G * me->dp;
    if (s->B % per) return 0;
    if (!space_b_ok(R, s->B / per)) return 0;
    int b = (int)(s->B / per);
    StageOpt copt[SEARCH_MAX_STAGE_OPTS];  // 192 KiB
    int nc = space_stage_options(R, l, me->tp, copt);
    int kind_of_stage[MIST_MAX_STAGES];
    for (int i = 0; i < S; i++) kind_of_stage[i] = S == 1 ? 0 : i == 0 ? 0 : i == S - 1 ? 1 : 2;
    int found = 0;
    URow *rows = NULL;
    size_t cap = 0;
    double *tz = malloc((size_t)nc * 6 * sizeof *tz);  // (nc, 3 kinds, t|d)
    int *need = malloc((size_t)nc * sizeof *need);
    if (!tz || !need) goto oom;
    for (int z = 0; z < SHARD_CODES; z++) {
        if (!(R->zero_mask >> z & 1) || !space_code_ok(s, z, me->dp, me->tp)) continue;
        // ratios zero, every kind
        for (int ci = 0; ci < nc; ci++) need[ci] = 1;
        for (int k = 0; k < nk; k++) {
            StageModel *m = stage_model_get(s, kinds[k], z, 0);
            if (!m || search_reserve(s, (size_t)nc) != 0) goto fail;
            for (int ci = 0; ci < nc; ci++) {
                StagePlan sp = uniform_plan(s, l, me, b, z, &copt[ci], NULL);
                search_set_row(s, ci, &sp, G, pk[k]);
            }
            search_eval(s, m, (size_t)nc, EVAL_BOTH);
            for (int ci = 0; ci < nc; ci++) {
                tz[ci * 6 + k * 2] = s->outs[ST_T][ci];
                tz[ci * 6 + k * 2 + 1] = s->outs[ST_D][ci];
                if (fits_row(s, ci)) s->stats->candidates_fit++;
                else need[ci] = 2;  // needs offloading
                double t = s->outs[ST_T][ci], d = s->outs[ST_D][ci];
                if (!(G * t + fmax(0.0, d) <= s->incumbent * (1 + 1e-12))) need[ci] = 0;  // over the bound
            }
        }
        for (int ci = 0; ci < nc; ci++) {
            if (need[ci] != 1) continue;  // fits everywhere without offload
            double t[MIST_MAX_STAGES], d[MIST_MAX_STAGES];
            for (int i = 0; i < S; i++) t[i] = tz[ci * 6 + kind_of_stage[i] * 2], d[i] = tz[ci * 6 + kind_of_stage[i] * 2 + 1];
            double T = pipeline_1f1b_seconds(S, G, t, d);
            if (T < s->incumbent && T < *best_T) {
                *best_T = T;
                *best_sp = uniform_plan(s, l, me, b, z, &copt[ci], NULL);
                found = 1;
            }
        }
        if (!R->offload) continue;
        // offload grid for the checkpoint options that need it: kind by kind, survivors only
        for (int mask = 1; mask < 16; mask++) {
            size_t n = 0;
            for (int ci = 0; ci < nc; ci++)
                if (need[ci] == 2) n += (size_t)s->grid_n[mask];
            if (!n) continue;
            if (n > cap) {
                URow *r2 = realloc(rows, n * sizeof *rows);
                if (!r2) goto oom;
                rows = r2, cap = n;
            }
            n = 0;
            for (int ci = 0; ci < nc; ci++)
                if (need[ci] == 2)
                    for (int g = 0; g < s->grid_n[mask]; g++) rows[n++] = (URow){ci, mask, g, {0, 0, 0}, {0, 0, 0}};
            for (int k = 0; k < nk && n; k++) {
                StageModel *m = stage_model_get(s, kinds[k], z, mask);
                if (!m || search_reserve(s, n) != 0) goto fail;
                for (size_t i = 0; i < n; i++) {
                    StagePlan sp = uniform_plan(s, l, me, b, z, &copt[rows[i].ci], s->grid[mask][rows[i].g]);
                    search_set_row(s, i, &sp, G, pk[k]);
                }
                // memory first; the times only of the rows that fit (moved to the front)
                search_eval(s, m, n, EVAL_PEAKS);
                size_t fit = 0;
                for (size_t i = 0; i < n; i++) {
                    if (!fits_row(s, i)) continue;
                    s->stats->candidates_fit++;
                    search_copy_row(s, fit, i);
                    rows[fit++] = rows[i];
                }
                search_eval(s, m, fit, EVAL_TIME);
                s->stats->candidates -= (long long)fit;  // rows already counted
                size_t kept = 0;
                for (size_t i = 0; i < fit; i++) {
                    double t = s->outs[ST_T][i], d = s->outs[ST_D][i];
                    if (!(G * t + fmax(0.0, d) <= s->incumbent * (1 + 1e-12))) continue;
                    URow r = rows[i];
                    r.t[k] = t, r.d[k] = d;
                    rows[kept++] = r;
                }
                n = kept;
            }
            for (size_t i = 0; i < n; i++) {
                double t[MIST_MAX_STAGES], d[MIST_MAX_STAGES];
                for (int j = 0; j < S; j++) t[j] = rows[i].t[kind_of_stage[j]], d[j] = rows[i].d[kind_of_stage[j]];
                double T = pipeline_1f1b_seconds(S, G, t, d);
                if (T < s->incumbent && T < *best_T) {
                    *best_T = T;
                    *best_sp = uniform_plan(s, l, me, b, z, &copt[rows[i].ci], s->grid[mask][rows[i].g]);
                    found = 1;
                }
            }
        }
    }
    free(rows), free(tz), free(need);
    return found;
oom:
    snprintf(s->err, sizeof s->err, "out of memory in the uniform search");
fail:
    free(rows), free(tz), free(need);
    return -1;
}

// ---------------------------------------------------------------- interleaved 1F1B
// The v loop of the uniform spaces (docs/pipeline.md, "Interleaved 1F1B"): P
// pipeline ranks on mesh me, each holding v chunks of L / (P v) blocks, every
// chunk with one configuration (ZeRO level and ckpt count; offload ratios 0).
// Chunk c is of kind first / last / middle as a stage of P v would be, with
// p = stage_p_interleaved(c, P, v, G) more micro-batches in flight; a
// configuration fits when each rank's chunks fit together (the sum of their
// peaks and of their host bytes, planner/analyze.c's rule), and takes
// pipeline_interleaved_seconds over the chunks' t and d. Tried for v = 2 ..
// vmax where P >= 2, G is a multiple of P and P v divides L. Returns 1 when a
// configuration beats the incumbent and *best_T (then *best_sp is every
// chunk's plan, *best_v its v: the plan to write has G, stages = P * v,
// virtual = v and [stage.c] = *best_sp for every c), 0 when none does, -1 on
// error (s->err).

// The chunks' rows of one (v, z): for each checkpoint option ci and chunk c,
// the t, d, device peak and host bytes of that chunk. 0 or -1.
static int virtual_rows(Search *s, int P, int v, int G, const Mesh *me, int b, int z, const StageOpt *copt, int nc,
                        double *t, double *d, double *peak, double *host) {
    int S = P * v, l = s->L / S;
    for (int kind = 0; kind < KINDS; kind++) {
        size_t n = 0;
        for (int c = 0; c < S; c++) n += stage_kind(c, S) == kind;
        if (!n) continue;
        StageModel *m = stage_model_get(s, kind, z, 0);
        if (!m || search_reserve(s, n * (size_t)nc) != 0) return -1;
        size_t i = 0;
        for (int ci = 0; ci < nc; ci++)
            for (int c = 0; c < S; c++) {
                if (stage_kind(c, S) != kind) continue;
                StagePlan sp = uniform_plan(s, l, me, b, z, &copt[ci], NULL);
                search_set_row(s, i++, &sp, G, stage_p_interleaved(c, P, v, G));
            }
        search_eval(s, m, i, EVAL_BOTH);
        i = 0;
        for (int ci = 0; ci < nc; ci++)
            for (int c = 0; c < S; c++) {
                if (stage_kind(c, S) != kind) continue;
                size_t at = (size_t)ci * S + c;
                t[at] = s->outs[ST_T][i], d[at] = s->outs[ST_D][i];
                peak[at] = ceil(fmax(s->outs[ST_PEAK_FWD][i], s->outs[ST_PEAK_BWD][i]));
                host[at] = ceil(s->outs[ST_HOST][i]);
                i++;
            }
    }
    return 0;
}

int uniform_search_virtual(Search *s, int P, int G, const Mesh *me, int vmax, StagePlan *best_sp, int *best_v,
                           double *best_T) {
    int64_t per = (int64_t)G * me->dp;
    if (P < s->rules.interleave_min_ranks || G % P || s->B % per || !space_b_ok(&s->rules, s->B / per)) return 0;
    int b = (int)(s->B / per), found = 0;
    for (int v = 2; v <= vmax && P * v <= MIST_MAX_STAGES; v++) {
        int S = P * v;
        if (s->L % S) continue;
        StageOpt copt[SEARCH_MAX_STAGE_OPTS];  // 192 KiB
        int nc = space_stage_options(&s->rules, s->L / S, me->tp, copt);
        size_t cells = (size_t)nc * S;
        double *buf = malloc(cells * 4 * sizeof *buf);
        if (!buf) {
            snprintf(s->err, sizeof s->err, "out of memory in the interleaved uniform search");
            return -1;
        }
        double *t = buf, *d = buf + cells, *peak = buf + 2 * cells, *host = buf + 3 * cells;
        for (int z = 0; z < 4; z++) {
            if (!(s->rules.zero_mask >> z & 1)) continue;
            if (virtual_rows(s, P, v, G, me, b, z, copt, nc, t, d, peak, host) != 0) {
                free(buf);
                return -1;
            }
            for (int ci = 0; ci < nc; ci++) {
                const double *tc = t + (size_t)ci * S, *dc = d + (size_t)ci * S;
                int fits = 1;
                for (int r = 0; r < P && fits; r++) {
                    double dev = 0, h = 0;
                    for (int c = r; c < S; c += P) dev += peak[(size_t)ci * S + c], h += host[(size_t)ci * S + c];
                    fits = dev <= (double)s->capacity && (s->host_capacity <= 0 || h <= (double)s->host_capacity);
                }
                if (!fits) continue;
                s->stats->candidates_fit++;
                double T = pipeline_interleaved_seconds(P, v, G, tc, dc);
                if (T < s->incumbent && T < *best_T) {
                    *best_T = T, *best_v = v;
                    *best_sp = uniform_plan(s, s->L / S, me, b, z, &copt[ci], NULL);
                    found = 1;
                }
            }
        }
        free(buf);
    }
    return found;
}
