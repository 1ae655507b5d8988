// Intra-stage search: the candidates of one stage kind and layer count,
// evaluated in batches with models specialised to a ZeRO level and offload
// pattern, filtered by device memory and by the incumbent's bound.
//
// Batch order: one batch holds every (mesh, layer count, ckpt) cell of a
// stage kind for one ZeRO level and offload pattern (the engine evaluates in
// fixed-size chunks, so a few large batches cost far less than many small
// ones); inside it, rows of one cell are adjacent and the in-flight count and
// the offload ratios vary innermost. G and the ZeRO level are constant.
//
// Pruning here (why it cannot lose the optimum: docs/plan-search.md):
//  - bound: the 1F1B total is at least G*t_i + max(0, d_i, sum of the other
//    stages' t) for every stage i, so a candidate above the incumbent by that
//    bound cannot be in a better plan;
//  - offload only where it is needed: with a (ZeRO, ckpt) that fits without
//    offload at in-flight count p, every offloading variant is no faster in t
//    and d (both nondecreasing in each ratio) and lands on or behind the
//    frontier, so the offload grid is evaluated only for the in-flight counts
//    where the ratios-zero candidate does not fit;
//  - within one offload pattern (which ratios are nonzero) memory is
//    nonincreasing in wo, go and oo, so their maximum with the best ao step
//    uses the least memory of the pattern: when none fits, the pattern is
//    skipped.
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
        for (int z = 0; z < 4; z++)
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

int search_bound_ok(const Search *s, int G, double t, double d, int l) {
    if (!(t >= 0) || isnan(d)) return 0;
    double rest = s->tau * (s->L - l);
    return G * t + fmax(fmax(0.0, d), rest) <= s->incumbent * (1 + 1e-12);
}

void search_set_row(Search *s, size_t i, const Mesh *me, int b, int zero, int ckpt, double wo, double go, double oo,
                    double ao, int G, int p, int l) {
    double **c = s->cols;
    c[SYM_B][i] = b;
    c[SYM_DP][i] = me->dp;
    c[SYM_TP][i] = me->tp;
    c[SYM_WS][i] = zero >= 3;
    c[SYM_GS][i] = zero >= 2;
    c[SYM_OS][i] = zero >= 1;
    c[SYM_CKPT][i] = ckpt;
    c[SYM_WO][i] = wo;
    c[SYM_GO][i] = go;
    c[SYM_OO][i] = oo;
    c[SYM_AO][i] = ao;
    c[SYM_G][i] = G;
    c[SYM_P][i] = p;
    c[SYM_L][i] = l;
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

static int row_fits(const Search *s, size_t i) { return search_row_fits(s, i); }

// G*t + max(0, d, rest) <= incumbent: the candidate can still be part of a
// better plan (rest = tau * (L - l): a lower bound on the other stages' summed t)


int cand_push(CandList *c, const Cand *x) {
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 64;
        Cand *v = realloc(c->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        c->v = v, c->cap = cap;
    }
    c->v[c->n++] = *x;
    return 0;
}

void cand_free(CandList *c) {
    free(c->v);
    memset(c, 0, sizeof *c);
}

int stage_t_lower_bounds(Search *s, int kind, int lmin, int lmax, int G, const Mesh *meshes, int nmesh,
                         double *tmin) {
    int nl = lmax - lmin + 1;
    for (int l = lmin; l <= lmax; l++) tmin[l] = INFINITY;
    if (search_reserve(s, (size_t)nmesh * nl) != 0) return -1;
    for (int z = 0; z < 4; z++) {
        if (!(s->rules.zero_mask >> z & 1)) continue;
        StageModel *m = stage_model_get(s, kind, z, 0);
        if (!m) return -1;
        size_t n = 0;
        for (int mi = 0; mi < nmesh; mi++) {
            int64_t per = (int64_t)G * meshes[mi].dp;
            if (s->B % per) continue;
            for (int l = lmin; l <= lmax; l++)
                search_set_row(s, n++, &meshes[mi], (int)(s->B / per), z, 0, 0, 0, 0, 0, G, 0, l);
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

#define MAX_P 64
// rows per evaluation in grid_lines: a search thread's batch buffers stay ~17 MB (33 doubles a
// row) whatever the number of lines (Llama-70B on a node of 8: 629,120 lines of one pattern)
#define LINE_CHUNK 65536

// a grid point of a checkpoint option still to be evaluated at in-flight index k
typedef struct {
    int ci, g, k;
    int timed;    // t, d hold its time (it does not depend on p)
    double t, d;
} ActiveRow;

typedef struct {
    ActiveRow *v;
    size_t cap;
} ActiveRows;

static int active_reserve(ActiveRows *a, size_t n) {
    if (n <= a->cap) return 0;
    ActiveRow *v = realloc(a->v, n * sizeof *v);
    if (!v) return -1;
    a->v = v, a->cap = n;
    return 0;
}

// One line of an offload pattern: fixed ckpt and ratios but one, which runs over its grid steps
// (oo when the pattern has it, else go, else wo). t and t + d are nondecreasing in it (P1) and so
// is the bound; memory is nonincreasing in it inside the pattern (P3): at each in-flight level
// only the least step that fits can be on the frontier, found by bisection; it never decreases
// from one level to the next (memory grows with p), so each level searches [previous, top].
// a (mesh, layer count, checkpoint count) of one stage kind
typedef struct {
    int mi, b;            // mesh index, micro-batch size
    int l, li, ckpt;      // layer count, its index in the range, checkpointed blocks
} Cell;

typedef struct {
    int id;               // the line's index at creation (its cell and fixed steps: LineInfo)
    int k;                // in-flight level
    int lo, hi;           // the least fitting step at this level lies in [lo, hi]
    int state;            // 0: query lo; 1: query the top; 2: bisect [lo, hi)
} Line;

typedef struct {
    int ci;               // cell
    unsigned char q[4];   // grid steps of wo, go, oo, ao (the line's own ratio varies)
} LineInfo;

// the least fitting step hi of line id at in-flight level k, in the order found
typedef struct {
    int id, k, hi;
    size_t row;           // its row in the time batch
} Settled;

// the batch row of line `info`'s point at step q_dim of its own ratio and in-flight count p
static void line_row(Search *s, size_t i, const LineInfo *info, int dim, int q_dim, int z, const Mesh *meshes,
                     const Cell *cells, int G, int p) {
    const SpaceRules *R = &s->rules;
    unsigned char q[4] = {info->q[0], info->q[1], info->q[2], info->q[3]};
    q[dim] = (unsigned char)q_dim;
    const Cell *ce = &cells[info->ci];
    search_set_row(s, i, &meshes[ce->mi], ce->b, z, ce->ckpt, space_ratio_wg(R, q[0]), space_ratio_wg(R, q[1]),
                   space_ratio_oa(R, q[2]), space_ratio_oa(R, q[3]), G, p, ce->l);
}

// Memory alone decides where each line settles: first the least fitting step of every line at
// every in-flight level (memory queries only), then the times of those points in one batch
// (times do not depend on p, so a step settled at several levels is timed once), then the bound.
// The bound is nondecreasing along a line (P1) and a line's settled step never decreases with
// the level, so a line whose settled step is over the bound at one level is over it at every
// later one: applying the bound at the end keeps exactly the candidates that checking it while
// settling would keep, in the same order.
static int grid_lines(Search *s, int kind, int z, int mask, const Mesh *meshes, const Cell *cells, int nc, int G,
                      const int *k0, const int *cell_ok, const int *plist, int np, CandList *out) {
    const SpaceRules *R = &s->rules;
    // the line runs along oo when the pattern has it, else go, else wo (memory is nonincreasing
    // in each of them inside a pattern, P3; not in ao)
    int dim = mask & 4 ? 2 : mask & 2 ? 1 : 0;
    int steps[4] = {mask & 1 ? R->wg_steps : 0, mask & 2 ? R->wg_steps : 0, mask & 4 ? R->oa_steps : 0,
                    mask & 8 ? R->oa_steps : 0};
    int top = steps[dim];
    steps[dim] = 0;
    int per_cell = 1;
    for (int r = 0; r < 4; r++) per_cell *= steps[r] ? steps[r] : 1;
    size_t nl = 0;
    for (int ci = 0; ci < nc; ci++) nl += cell_ok[mask * nc + ci] ? (size_t)per_cell : 0;
    if (!nl) return 0;
    StageModel *mm = stage_model_get(s, kind, z, mask);
    if (!mm) return -1;
    double *td = NULL;     // (rows, t | d) of the time batch
    double *td1 = NULL;    // (lines, t | d) at each line's least step, when the bound check timed it
    size_t *row_src = NULL, *todo = NULL;
    Line *ln = malloc(nl * sizeof *ln);
    LineInfo *info = malloc(nl * sizeof *info);
    int *last_hi = malloc(nl * sizeof *last_hi);
    size_t *last_row = malloc(nl * sizeof *last_row);
    size_t ns = 0, cap_settled = nl;
    Settled *st = malloc(cap_settled * sizeof *st);
    if (!ln || !info || !last_hi || !last_row || !st || search_reserve(s, nl < LINE_CHUNK ? nl : LINE_CHUNK) != 0)
        goto oom;
    size_t n = 0;
    for (int ci = 0; ci < nc; ci++) {
        if (!cell_ok[mask * nc + ci]) continue;
        for (int w = steps[0] ? 1 : 0; w <= steps[0]; w++)
            for (int g = steps[1] ? 1 : 0; g <= steps[1]; g++)
                for (int o = steps[2] ? 1 : 0; o <= steps[2]; o++)
                    for (int a = steps[3] ? 1 : 0; a <= steps[3]; a++) {
                        info[n] = (LineInfo){ci, {(unsigned char)w, (unsigned char)g, (unsigned char)o, (unsigned char)a}};
                        last_hi[n] = -1;
                        ln[n] = (Line){(int)n, k0[ci], 1, top, 0};
                        n++;
                    }
    }
    if (!isinf(s->incumbent)) {
        // A line's fastest point is its least step (P1): a line over the bound there is over it
        // at every step and p (P4), so it is dropped before any memory query. The times of the
        // kept lines' least steps are kept for the time batch below (they do not depend on p).
        if (!(td1 = malloc(2 * nl * sizeof *td1))) goto oom;
        size_t kept = 0;
        for (size_t c0 = 0; c0 < n; c0 += LINE_CHUNK) {
            size_t cn = n - c0 < LINE_CHUNK ? n - c0 : LINE_CHUNK;
            for (size_t i = 0; i < cn; i++)
                line_row(s, i, &info[ln[c0 + i].id], dim, 1, z, meshes, cells, G, plist[ln[c0 + i].k]);
            search_eval(s, mm, cn, EVAL_TIME);
            for (size_t i = 0; i < cn; i++) {
                int id = ln[c0 + i].id;
                td1[2 * id] = s->outs[ST_T][i], td1[2 * id + 1] = s->outs[ST_D][i];
                if (search_bound_ok(s, G, td1[2 * id], td1[2 * id + 1], cells[info[id].ci].l)) ln[kept++] = ln[c0 + i];
            }
        }
        n = kept;
    }
    while (n) {
        // one memory query per line: its lowest candidate first (it settles the line when it fits),
        // then the top (nothing fits when it does not), then bisection; a chunk of lines at a time
        // (kept lines move down in order: the same order as in one batch)
        size_t kept = 0;
        for (size_t c0 = 0; c0 < n; c0 += LINE_CHUNK) {
            size_t cn = n - c0 < LINE_CHUNK ? n - c0 : LINE_CHUNK;
            for (size_t i = 0; i < cn; i++) {
                const Line *L = &ln[c0 + i];
                int q = L->state == 0 ? L->lo : L->state == 1 ? top : (L->lo + L->hi) / 2;
                line_row(s, i, &info[L->id], dim, q, z, meshes, cells, G, plist[L->k]);
            }
            search_eval(s, mm, cn, EVAL_PEAKS);
            for (size_t i = 0; i < cn; i++) {
                Line L = ln[c0 + i];
                int fit = search_row_fits_device(s, i), settled = 0;
                if (fit) s->stats->candidates_fit++;
                if (L.state == 0) {
                    if (fit) L.hi = L.lo, settled = 1;
                    else if (L.lo >= top) continue;
                    else L.lo++, L.state = 1;
                } else if (L.state == 1) {
                    if (!fit) continue;  // nothing on this line fits, here or at a larger p
                    L.hi = top, L.state = 2;
                    settled = L.lo >= L.hi;
                } else {
                    int q = (L.lo + L.hi) / 2;
                    if (fit) L.hi = q;
                    else L.lo = q + 1;
                    settled = L.lo >= L.hi;
                }
                if (settled) {
                    if (ns == cap_settled) {
                        Settled *grown = realloc(st, 2 * cap_settled * sizeof *st);
                        if (!grown) goto oom;
                        st = grown, cap_settled *= 2;
                    }
                    st[ns++] = (Settled){L.id, L.k, L.hi, 0};
                    if (++L.k >= np) continue;
                    L.lo = L.hi, L.hi = top, L.state = 0;  // memory grows with p: the next least step is no smaller
                }
                ln[kept++] = L;
            }
        }
        n = kept;
    }
    // The host at each settled step: device memory alone settled the lines, and the least step
    // that fits the device holds the least host memory of those that do (host bytes grow with the
    // line's ratio), so a settled point over the host budget leaves its line nothing at that level
    // (nor at a larger p: both memories grow with p).
    if (s->host_capacity > 0 && ns) {
        size_t kept = 0;
        for (size_t c0 = 0; c0 < ns; c0 += LINE_CHUNK) {
            size_t cn = ns - c0 < LINE_CHUNK ? ns - c0 : LINE_CHUNK;
            if (search_reserve(s, cn) != 0) goto oom;
            for (size_t i = 0; i < cn; i++)
                line_row(s, i, &info[st[c0 + i].id], dim, st[c0 + i].hi, z, meshes, cells, G, plist[st[c0 + i].k]);
            search_eval(s, mm, cn, EVAL_PEAKS);
            for (size_t i = 0; i < cn; i++)
                if (search_row_fits(s, i)) st[kept++] = st[c0 + i];
        }
        ns = kept;
    }
    // the times of the settled steps, each (line, step) once; rows in line order (lines are in
    // cell order), so a block of the batch mostly shares its cell's symbols, which the engine
    // hoists out of the per-candidate work. A line's steps are settled in nondecreasing order.
    for (size_t i = 0; i < nl; i++) last_row[i] = 0;  // first: the line's distinct steps
    for (size_t i = 0; i < ns; i++) {
        const Settled *e = &st[i];
        if (last_hi[e->id] != e->hi) last_hi[e->id] = e->hi, last_row[e->id]++;
    }
    size_t rows = 0;
    for (size_t i = 0; i < nl; i++) {  // then: the row of the line's first step
        size_t count = last_row[i];
        last_row[i] = rows, rows += count;
        last_hi[i] = -1;
    }
    td = malloc((2 * rows + 1) * sizeof *td);  // (rows, t | d)
    row_src = malloc((rows + 1) * sizeof *row_src);  // the settled entry that writes each row
    if (!td || !row_src) goto oom;
    for (size_t i = 0; i < ns; i++) {
        Settled *e = &st[i];
        int first = last_hi[e->id] != e->hi;
        if (last_hi[e->id] != -1 && first) last_row[e->id]++;  // the line's next step
        last_hi[e->id] = e->hi;
        e->row = last_row[e->id];
        if (first) row_src[e->row] = i;
    }
    // timed in chunks of rows; t, d kept per row for the pass below (in the settled order, as in
    // one batch); a least step already timed by the bound check above is not timed again (the
    // engine gives the same bits in any batch): todo lists the rows still to time.
    size_t nt = 0;
    if (!(todo = malloc((rows + 1) * sizeof *todo))) goto oom;
    for (size_t r = 0; r < rows; r++) {
        const Settled *e = &st[row_src[r]];
        if (td1 && e->hi == 1) td[2 * r] = td1[2 * e->id], td[2 * r + 1] = td1[2 * e->id + 1];
        else todo[nt++] = r;
    }
    for (size_t r0 = 0; r0 < nt; r0 += LINE_CHUNK) {
        size_t cn = nt - r0 < LINE_CHUNK ? nt - r0 : LINE_CHUNK;
        if (search_reserve(s, cn) != 0) goto oom;
        for (size_t i = 0; i < cn; i++) {
            const Settled *e = &st[row_src[todo[r0 + i]]];
            line_row(s, i, &info[e->id], dim, e->hi, z, meshes, cells, G, plist[e->k]);
        }
        search_eval(s, mm, cn, EVAL_TIME);
        for (size_t i = 0; i < cn; i++) td[2 * todo[r0 + i]] = s->outs[ST_T][i], td[2 * todo[r0 + i] + 1] = s->outs[ST_D][i];
    }
    for (size_t i = 0; i < ns; i++) {
        const Settled *e = &st[i];
        const LineInfo *li = &info[e->id];
        double t = td[2 * e->row], d = td[2 * e->row + 1];
        if (!search_bound_ok(s, G, t, d, cells[li->ci].l)) continue;
        unsigned char q[4] = {li->q[0], li->q[1], li->q[2], li->q[3]};
        q[dim] = (unsigned char)e->hi;
        Cand c = {t, d, cells[li->ci].mi, (short)cells[li->ci].ckpt, (signed char)z, q[0], q[1], q[2], q[3]};
        if (cand_push(&out[cells[li->ci].li * np + e->k], &c)) goto oom;
    }
    free(ln), free(info), free(last_hi), free(last_row), free(st), free(td), free(td1), free(row_src), free(todo);
    return 0;
oom:
    free(ln), free(info), free(last_hi), free(last_row), free(st), free(td), free(td1), free(row_src), free(todo);
    snprintf(s->err, sizeof s->err, "out of memory searching offload lines");
    return -1;
}

int stage_candidates(Search *s, int kind, int lo, int hi, int G, const Mesh *meshes, int nmesh, const int *plist,
                     int np, CandList *out) {
    const int *grid_n = s->grid_n;
    const SpaceRules *R = &s->rules;
    int copt[4097];
    if (np > MAX_P) np = MAX_P;
    size_t maxcells = 0;
    for (int l = lo; l <= hi; l++) maxcells += (size_t)nmesh * space_ckpt_options(&s->rules, l, copt);
    // cells: every (mesh, layer count, ckpt option); one batch holds all of them (the engine
    // evaluates in fixed-size chunks, so few large batches beat many small ones)
    int nc = 0;
    Cell *cells = malloc(maxcells * sizeof *cells);
    // first in-flight index at which the ratios-zero candidate stops fitting, per cell
    int *k0 = malloc(maxcells * sizeof *k0);
    ActiveRows act = {NULL, 0};
    int *cell_ok = malloc(16 * maxcells * sizeof *cell_ok);  // (16 patterns, cells): some point may fit
    double *tz = malloc((2 * maxcells + 1) * sizeof *tz);    // (cells, t | d) without offload
    if (!cells || !k0 || !cell_ok || !tz) goto oom;
    for (int l = lo; l <= hi; l++) {
        int ncopt = space_ckpt_options(&s->rules, l, copt);
        for (int mi = 0; mi < nmesh; mi++) {
            int64_t per = (int64_t)G * meshes[mi].dp;
            if (s->B % per) continue;
            for (int ci = 0; ci < ncopt; ci++) cells[nc++] = (Cell){mi, (int)(s->B / per), l, l - lo, copt[ci]};
        }
    }
    if (!nc) goto done;
    for (int z = 0; z < 4; z++) {
        if (!(s->rules.zero_mask >> z & 1)) continue;
        StageModel *m = stage_model_get(s, kind, z, 0);
        if (!m) goto fail;
        if (search_reserve(s, (size_t)nc * np) != 0) goto fail;
        // times once per cell (they do not depend on p), then memory at every in-flight count
        for (int x = 0; x < nc; x++)
            search_set_row(s, x, &meshes[cells[x].mi], cells[x].b, z, cells[x].ckpt, 0, 0, 0, 0, G, plist[0],
                           cells[x].l);
        search_eval(s, m, nc, EVAL_TIME);
        for (int x = 0; x < nc; x++) tz[2 * x] = s->outs[ST_T][x], tz[2 * x + 1] = s->outs[ST_D][x];
        size_t n = 0;
        for (int x = 0; x < nc; x++)
            for (int k = 0; k < np; k++)
                search_set_row(s, n++, &meshes[cells[x].mi], cells[x].b, z, cells[x].ckpt, 0, 0, 0, 0, G, plist[k],
                               cells[x].l);
        search_eval(s, m, n, EVAL_PEAKS);
        s->stats->candidates -= nc;  // the timed rows are among these
        int need_offload = 0;
        for (int x = 0; x < nc; x++) {
            size_t r0 = (size_t)x * np;
            double t0 = tz[2 * x], d0 = tz[2 * x + 1];
            int bound = search_bound_ok(s, G, t0, d0, cells[x].l);
            k0[x] = np;
            for (int k = 0; k < np; k++) {
                if (!row_fits(s, r0 + k)) {
                    k0[x] = k;  // fitting is monotone in p: none from here on fits
                    break;
                }
                s->stats->candidates_fit++;
                if (!bound) continue;
                Cand c = {t0, d0, cells[x].mi, (short)cells[x].ckpt, (signed char)z, 0, 0, 0, 0};
                if (cand_push(&out[cells[x].li * np + k], &c)) goto oom;
            }
            // offloading only slows t and d down: worth trying only where it must make room
            if (!bound) k0[x] = np;
            need_offload |= k0[x] < np;
        }
        if (!s->rules.offload || !need_offload) continue;
        // Per offload pattern (which ratios are nonzero), the least memory of the pattern: memory is
        // nonincreasing in wo, go and oo inside a pattern, so those sit at their maximum; ao is not
        // monotone (a larger ao frees saved activations but grows the prefetch buffer), so every ao
        // step is tried. When none of these fits, no point of the pattern does. (Across patterns memory
        // is not monotone either: a first nonzero wo or go adds gather ring buffers.)
        for (int mask = 1; mask < 16; mask++) {
            StageModel *mc = stage_model_get(s, kind, z, mask);
            if (!mc) goto fail;
            int na = mask & 8 ? R->oa_steps : 1;
            if (search_reserve(s, (size_t)nc * na) != 0) goto fail;
            n = 0;
            for (int x = 0; x < nc; x++)
                if (k0[x] < np)
                    for (int a = 1; a <= na; a++)
                        search_set_row(s, n++, &meshes[cells[x].mi], cells[x].b, z, cells[x].ckpt, mask & 1,
                                       (mask >> 1) & 1, (mask >> 2) & 1, mask & 8 ? space_ratio_oa(R, a) : 0, G,
                                       plist[k0[x]], cells[x].l);
            search_eval(s, mc, n, EVAL_PEAKS);
            n = 0;
            for (int x = 0; x < nc; x++) {
                int fits = 0;
                if (k0[x] < np)
                    for (int a = 1; a <= na; a++) fits |= search_row_fits_device(s, n++);  // host: more offload, more host
                cell_ok[mask * nc + x] = fits;
            }
            if (isinf(s->incumbent)) continue;
            // The pattern's fastest point in a cell has every nonzero ratio at its least step (P1:
            // t and t + d are nondecreasing in each ratio, and so is the bound): when that point is
            // over the bound, so is every point of the pattern in the cell, at every p (P4).
            n = 0;
            for (int x = 0; x < nc; x++)
                if (cell_ok[mask * nc + x])
                    search_set_row(s, n++, &meshes[cells[x].mi], cells[x].b, z, cells[x].ckpt,
                                   mask & 1 ? space_ratio_wg(R, 1) : 0, mask & 2 ? space_ratio_wg(R, 1) : 0,
                                   mask & 4 ? space_ratio_oa(R, 1) : 0, mask & 8 ? space_ratio_oa(R, 1) : 0, G,
                                   plist[k0[x]], cells[x].l);
            search_eval(s, mc, n, EVAL_TIME);
            n = 0;
            for (int x = 0; x < nc; x++)
                if (cell_ok[mask * nc + x]) {
                    cell_ok[mask * nc + x] = search_bound_ok(s, G, s->outs[ST_T][n], s->outs[ST_D][n], cells[x].l);
                    n++;
                }
        }
        // The grid, in increasing in-flight count: a point that does not fit at p fits at no larger
        // p (memory is nondecreasing in p), and one over the bound is over it at every p (t and d do
        // not depend on p), so only the survivors of one level are evaluated at the next.
        for (int mask = 1; mask < 16; mask++) {
            if (mask != 8) {  // a least-fitting search along oo, go or wo per line
                if (grid_lines(s, kind, z, mask, meshes, cells, nc, G, k0, cell_ok, plist, np, out) != 0)
                    goto fail;
                continue;
            }
            size_t rows = 0;
            for (int x = 0; x < nc; x++)
                if (cell_ok[mask * nc + x]) rows += (size_t)grid_n[mask];
            if (!rows) continue;
            StageModel *mm = stage_model_get(s, kind, z, mask);
            if (!mm) goto fail;
            if (search_reserve(s, rows) != 0 || active_reserve(&act, rows) != 0) goto fail;
            size_t na = 0;
            for (int x = 0; x < nc; x++)
                if (cell_ok[mask * nc + x])
                    for (int g = 0; g < grid_n[mask]; g++) act.v[na++] = (ActiveRow){x, g, k0[x], 0, 0, 0};
            while (na) {
                for (size_t i = 0; i < na; i++) {
                    const ActiveRow *ar = &act.v[i];
                    const Cell *ce = &cells[ar->ci];
                    const unsigned char *q = s->grid[mask][ar->g];
                    search_set_row(s, i, &meshes[ce->mi], ce->b, z, ce->ckpt, space_ratio_wg(R, q[0]),
                                   space_ratio_wg(R, q[1]), space_ratio_oa(R, q[2]), space_ratio_oa(R, q[3]), G,
                                   plist[ar->k], ce->l);
                }
                // memory of every point, then the times of those that fit and are not timed yet
                search_eval(s, mm, na, EVAL_PEAKS);
                size_t fit = 0, nt = 0;
                for (size_t i = 0; i < na; i++) {
                    if (!row_fits(s, i)) continue;
                    s->stats->candidates_fit++;
                    if (!act.v[i].timed) search_copy_row(s, nt++, i);
                    act.v[fit++] = act.v[i];
                }
                search_eval(s, mm, nt, EVAL_TIME);
                s->stats->candidates -= (long long)nt;  // rows already counted
                nt = 0;
                for (size_t i = 0; i < fit; i++)
                    if (!act.v[i].timed)
                        act.v[i].t = s->outs[ST_T][nt], act.v[i].d = s->outs[ST_D][nt], act.v[i].timed = 1, nt++;
                size_t kept = 0;
                for (size_t i = 0; i < fit; i++) {
                    ActiveRow ar = act.v[i];
                    if (!search_bound_ok(s, G, ar.t, ar.d, cells[ar.ci].l)) continue;
                    const unsigned char *q = s->grid[mask][ar.g];
                    Cand c = {ar.t, ar.d, cells[ar.ci].mi, (short)cells[ar.ci].ckpt, (signed char)z, q[0], q[1], q[2],
                              q[3]};
                    if (cand_push(&out[cells[ar.ci].li * np + ar.k], &c)) goto oom;
                    if (++ar.k < np) act.v[kept++] = ar;
                }
                na = kept;
            }
        }
    }
done:
    free(cells), free(k0), free(cell_ok), free(act.v), free(tz);
    return 0;
oom:
    snprintf(s->err, sizeof s->err, "out of memory collecting stage candidates");
fail:
    free(cells), free(k0), free(cell_ok), free(act.v), free(tz);
    return -1;
}
