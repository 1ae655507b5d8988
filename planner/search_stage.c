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

// a (mesh, layer count, checkpoint count) of one stage kind
typedef struct {
    int mi, li;    // mesh index, the layer count's index in the range
    StagePlan sp;  // its layers, mesh, b and ckpt (the ZeRO level and offload ratios are set per row)
} Cell;

// What stage_candidates works on for one stage kind: the cells, every (mesh, layer count, ckpt
// option), in one batch (the engine evaluates in fixed-size chunks, so few large batches beat
// many small ones), and per ZeRO level what the offload passes learn about each cell.
typedef struct {
    Search *s;
    int kind, G;
    const int *plist;  // in-flight counts, ascending
    int np;
    CandList *out;     // out[li * np + k]: the candidates of layer count li that fit at plist[k]
    Cell *cells;
    int nc;
    int *k0;           // per cell: first in-flight index at which the ratios-zero candidate stops fitting
    int *cell_ok;      // (16 patterns, cells): some point of the pattern may fit and pass the bound
    double *tz;        // (cells, t | d) without offload
    ActiveRows act;    // the ao-only grid's points still to be evaluated
} StageSearch;

static int candidates_oom(Search *s) {
    snprintf(s->err, sizeof s->err, "out of memory collecting stage candidates");
    return -1;
}

// The stage plan of cell ce at ZeRO level z with offload grid steps q (NULL: no offload).
static StagePlan cell_plan(const StageSearch *ss, const Cell *ce, int z, const unsigned char *q) {
    StagePlan sp = ce->sp;
    sp.zero = z;
    if (q) stage_set_offload_steps(&sp, &ss->s->rules, q);
    return sp;
}

// Keep the candidate (ce, z, q) with time t, d among those of its layer count that fit at
// in-flight index k. 0 or -1.
static int cell_keep(StageSearch *ss, const Cell *ce, int z, const unsigned char *q, int k, double t, double d) {
    StagePlan sp = cell_plan(ss, ce, z, q);
    Cand c = cand_pack(&sp, ce->mi, &ss->s->rules, t, d);
    return cand_push(&ss->out[ce->li * ss->np + k], &c);
}

// One line of an offload pattern: fixed ckpt and ratios but one, which runs over its grid steps
// (oo when the pattern has it, else go, else wo). t and t + d are nondecreasing in it (P1) and so
// is the bound; memory is nonincreasing in it inside the pattern (P3): at each in-flight level
// only the least step that fits can be on the frontier, found by bisection; it never decreases
// from one level to the next (memory grows with p), so each level searches [previous, top].
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

// The lines of one offload pattern at one ZeRO level (grid_lines), step by step.
typedef struct {
    StageSearch *ss;
    int z, mask;
    int dim, top;         // the ratio the lines run along (0 wo, 1 go, 2 oo) and its last step
    StageModel *mm;
    size_t nl, n;         // lines created, lines still being settled (the first n of ln)
    Line *ln;
    LineInfo *info;       // per line id
    int *last_hi;         // per line id: scratch of settled_times
    size_t *last_row;
    Settled *st;
    size_t ns, cap_settled;
    double *td;           // (rows, t | d) of the time batch
    double *td1;          // (lines, t | d) at each line's least step, when the bound check timed it
    size_t *row_src, *todo;
} LineSearch;

static int lines_oom(LineSearch *ls) {
    snprintf(ls->ss->s->err, sizeof ls->ss->s->err, "out of memory searching offload lines");
    return -1;
}

// the batch row of line `info`'s point at step q_dim of its own ratio and in-flight count p
static void line_row(LineSearch *ls, size_t i, const LineInfo *info, int q_dim, int p) {
    unsigned char q[4] = {info->q[0], info->q[1], info->q[2], info->q[3]};
    q[ls->dim] = (unsigned char)q_dim;
    StagePlan sp = cell_plan(ls->ss, &ls->ss->cells[info->ci], ls->z, q);
    search_set_row(ls->ss->s, i, &sp, ls->ss->G, p);
}

// Every line of the pattern in the cells where it may fit, one per setting of the other nonzero
// ratios, starting at the cell's first in-flight level that the ratios-zero point misses. 0 (no
// line: ls->nl = 0) or -1.
static int lines_create(LineSearch *ls) {
    StageSearch *ss = ls->ss;
    const SpaceRules *R = &ss->s->rules;
    int mask = ls->mask;
    // the line runs along oo when the pattern has it, else go, else wo (memory is nonincreasing
    // in each of them inside a pattern, P3; not in ao)
    ls->dim = mask & 4 ? 2 : mask & 2 ? 1 : 0;
    int steps[4] = {mask & 1 ? R->wg_steps : 0, mask & 2 ? R->wg_steps : 0, mask & 4 ? R->oa_steps : 0,
                    mask & 8 ? R->oa_steps : 0};
    ls->top = steps[ls->dim];
    steps[ls->dim] = 0;
    int per_cell = 1;
    for (int r = 0; r < 4; r++) per_cell *= steps[r] ? steps[r] : 1;
    size_t nl = 0;
    for (int ci = 0; ci < ss->nc; ci++) nl += ss->cell_ok[mask * ss->nc + ci] ? (size_t)per_cell : 0;
    if (!(ls->nl = nl)) return 0;
    if (!(ls->mm = stage_model_get(ss->s, ss->kind, ls->z, mask))) return -1;
    ls->ln = malloc(nl * sizeof *ls->ln);
    ls->info = malloc(nl * sizeof *ls->info);
    ls->last_hi = malloc(nl * sizeof *ls->last_hi);
    ls->last_row = malloc(nl * sizeof *ls->last_row);
    ls->cap_settled = nl;
    ls->st = malloc(ls->cap_settled * sizeof *ls->st);
    if (!ls->ln || !ls->info || !ls->last_hi || !ls->last_row || !ls->st ||
        search_reserve(ss->s, nl < LINE_CHUNK ? nl : LINE_CHUNK) != 0)
        return lines_oom(ls);
    size_t n = 0;
    for (int ci = 0; ci < ss->nc; ci++) {
        if (!ss->cell_ok[mask * ss->nc + ci]) continue;
        for (int w = steps[0] ? 1 : 0; w <= steps[0]; w++)
            for (int g = steps[1] ? 1 : 0; g <= steps[1]; g++)
                for (int o = steps[2] ? 1 : 0; o <= steps[2]; o++)
                    for (int a = steps[3] ? 1 : 0; a <= steps[3]; a++) {
                        ls->info[n] = (LineInfo){ci, {(unsigned char)w, (unsigned char)g, (unsigned char)o, (unsigned char)a}};
                        ls->last_hi[n] = -1;
                        ls->ln[n] = (Line){(int)n, ss->k0[ci], 1, ls->top, 0};
                        n++;
                    }
    }
    ls->n = n;
    return 0;
}

// A line's fastest point is its least step (P1): a line over the bound there is over it at every
// step and p (P4), so it is dropped before any memory query. The times of the kept lines' least
// steps are kept for the time batch (they do not depend on p). 0 or -1.
static int lines_bound(LineSearch *ls) {
    StageSearch *ss = ls->ss;
    Search *s = ss->s;
    if (isinf(s->incumbent)) return 0;
    if (!(ls->td1 = malloc(2 * ls->nl * sizeof *ls->td1))) return lines_oom(ls);
    size_t kept = 0;
    for (size_t c0 = 0; c0 < ls->n; c0 += LINE_CHUNK) {
        size_t cn = ls->n - c0 < LINE_CHUNK ? ls->n - c0 : LINE_CHUNK;
        for (size_t i = 0; i < cn; i++) line_row(ls, i, &ls->info[ls->ln[c0 + i].id], 1, ss->plist[ls->ln[c0 + i].k]);
        search_eval(s, ls->mm, cn, EVAL_TIME);
        for (size_t i = 0; i < cn; i++) {
            int id = ls->ln[c0 + i].id;
            double *td1 = &ls->td1[2 * id];
            td1[0] = s->outs[ST_T][i], td1[1] = s->outs[ST_D][i];
            if (search_bound_ok(s, ss->G, td1[0], td1[1], ss->cells[ls->info[id].ci].sp.layers))
                ls->ln[kept++] = ls->ln[c0 + i];
        }
    }
    ls->n = kept;
    return 0;
}

static int settled_add(LineSearch *ls, const Line *L) {
    if (ls->ns == ls->cap_settled) {
        Settled *grown = realloc(ls->st, 2 * ls->cap_settled * sizeof *ls->st);
        if (!grown) return lines_oom(ls);
        ls->st = grown, ls->cap_settled *= 2;
    }
    ls->st[ls->ns++] = (Settled){L->id, L->k, L->hi, 0};
    return 0;
}

// Where each line settles at each in-flight level, on device memory alone: one memory query per
// line and round, its lowest candidate first (it settles the line when it fits), then the top
// (nothing fits when it does not), then bisection; a chunk of lines at a time (kept lines move
// down in order: the same order as in one batch). 0 or -1.
static int lines_settle(LineSearch *ls) {
    StageSearch *ss = ls->ss;
    Search *s = ss->s;
    int top = ls->top;
    while (ls->n) {
        size_t kept = 0;
        for (size_t c0 = 0; c0 < ls->n; c0 += LINE_CHUNK) {
            size_t cn = ls->n - c0 < LINE_CHUNK ? ls->n - c0 : LINE_CHUNK;
            for (size_t i = 0; i < cn; i++) {
                const Line *L = &ls->ln[c0 + i];
                int q = L->state == 0 ? L->lo : L->state == 1 ? top : (L->lo + L->hi) / 2;
                line_row(ls, i, &ls->info[L->id], q, ss->plist[L->k]);
            }
            search_eval(s, ls->mm, cn, EVAL_PEAKS);
            for (size_t i = 0; i < cn; i++) {
                Line L = ls->ln[c0 + i];
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
                    if (settled_add(ls, &L)) return -1;
                    if (++L.k >= ss->np) continue;
                    L.lo = L.hi, L.hi = top, L.state = 0;  // memory grows with p: the next least step is no smaller
                }
                ls->ln[kept++] = L;
            }
        }
        ls->n = kept;
    }
    return 0;
}

// The host at each settled step: device memory alone settled the lines, and the least step
// that fits the device holds the least host memory of those that do (host bytes grow with the
// line's ratio), so a settled point over the host budget leaves its line nothing at that level
// (nor at a larger p: both memories grow with p). 0 or -1.
static int settled_host(LineSearch *ls) {
    Search *s = ls->ss->s;
    if (!(s->host_capacity > 0 && ls->ns)) return 0;
    size_t kept = 0;
    for (size_t c0 = 0; c0 < ls->ns; c0 += LINE_CHUNK) {
        size_t cn = ls->ns - c0 < LINE_CHUNK ? ls->ns - c0 : LINE_CHUNK;
        if (search_reserve(s, cn) != 0) return lines_oom(ls);
        for (size_t i = 0; i < cn; i++) {
            const Settled *e = &ls->st[c0 + i];
            line_row(ls, i, &ls->info[e->id], e->hi, ls->ss->plist[e->k]);
        }
        search_eval(s, ls->mm, cn, EVAL_PEAKS);
        for (size_t i = 0; i < cn; i++)
            if (search_row_fits(s, i)) ls->st[kept++] = ls->st[c0 + i];
    }
    ls->ns = kept;
    return 0;
}

// The times of the settled steps, each (line, step) once; rows in line order (lines are in
// cell order), so a block of the batch mostly shares its cell's symbols, which the engine
// hoists out of the per-candidate work. A line's steps are settled in nondecreasing order.
// Timed in chunks of rows; t, d kept per row (in the settled order, as in one batch); a least
// step already timed by lines_bound is not timed again (the engine gives the same bits in any
// batch): todo lists the rows still to time. 0 or -1.
static int settled_times(LineSearch *ls) {
    Search *s = ls->ss->s;
    int *last_hi = ls->last_hi;
    size_t *last_row = ls->last_row;
    for (size_t i = 0; i < ls->nl; i++) last_row[i] = 0;  // first: the line's distinct steps
    for (size_t i = 0; i < ls->ns; i++) {
        const Settled *e = &ls->st[i];
        if (last_hi[e->id] != e->hi) last_hi[e->id] = e->hi, last_row[e->id]++;
    }
    size_t rows = 0;
    for (size_t i = 0; i < ls->nl; i++) {  // then: the row of the line's first step
        size_t count = last_row[i];
        last_row[i] = rows, rows += count;
        last_hi[i] = -1;
    }
    ls->td = malloc((2 * rows + 1) * sizeof *ls->td);          // (rows, t | d)
    ls->row_src = malloc((rows + 1) * sizeof *ls->row_src);    // the settled entry that writes each row
    ls->todo = malloc((rows + 1) * sizeof *ls->todo);
    if (!ls->td || !ls->row_src || !ls->todo) return lines_oom(ls);
    for (size_t i = 0; i < ls->ns; i++) {
        Settled *e = &ls->st[i];
        int first = last_hi[e->id] != e->hi;
        if (last_hi[e->id] != -1 && first) last_row[e->id]++;  // the line's next step
        last_hi[e->id] = e->hi;
        e->row = last_row[e->id];
        if (first) ls->row_src[e->row] = i;
    }
    size_t nt = 0;
    for (size_t r = 0; r < rows; r++) {
        const Settled *e = &ls->st[ls->row_src[r]];
        if (ls->td1 && e->hi == 1) ls->td[2 * r] = ls->td1[2 * e->id], ls->td[2 * r + 1] = ls->td1[2 * e->id + 1];
        else ls->todo[nt++] = r;
    }
    for (size_t r0 = 0; r0 < nt; r0 += LINE_CHUNK) {
        size_t cn = nt - r0 < LINE_CHUNK ? nt - r0 : LINE_CHUNK;
        if (search_reserve(s, cn) != 0) return lines_oom(ls);
        for (size_t i = 0; i < cn; i++) {
            const Settled *e = &ls->st[ls->row_src[ls->todo[r0 + i]]];
            line_row(ls, i, &ls->info[e->id], e->hi, ls->ss->plist[e->k]);
        }
        search_eval(s, ls->mm, cn, EVAL_TIME);
        for (size_t i = 0; i < cn; i++) {
            size_t r = ls->todo[r0 + i];
            ls->td[2 * r] = s->outs[ST_T][i], ls->td[2 * r + 1] = s->outs[ST_D][i];
        }
    }
    return 0;
}

// The settled points under the bound become candidates. 0 or -1.
static int settled_keep(LineSearch *ls) {
    StageSearch *ss = ls->ss;
    for (size_t i = 0; i < ls->ns; i++) {
        const Settled *e = &ls->st[i];
        const LineInfo *li = &ls->info[e->id];
        const Cell *ce = &ss->cells[li->ci];
        double t = ls->td[2 * e->row], d = ls->td[2 * e->row + 1];
        if (!search_bound_ok(ss->s, ss->G, t, d, ce->sp.layers)) continue;
        unsigned char q[4] = {li->q[0], li->q[1], li->q[2], li->q[3]};
        q[ls->dim] = (unsigned char)e->hi;
        if (cell_keep(ss, ce, ls->z, q, e->k, t, d)) return lines_oom(ls);
    }
    return 0;
}

// The candidates of offload pattern `mask` (any but ao alone) at ZeRO level z, line by line.
// Memory alone decides where each line settles: first the least fitting step of every line at
// every in-flight level (memory queries only), then the times of those points in one batch
// (times do not depend on p, so a step settled at several levels is timed once), then the bound.
// The bound is nondecreasing along a line (P1) and a line's settled step never decreases with
// the level, so a line whose settled step is over the bound at one level is over it at every
// later one: applying the bound at the end keeps exactly the candidates that checking it while
// settling would keep, in the same order.
static int grid_lines(StageSearch *ss, int z, int mask) {
    LineSearch ls;
    memset(&ls, 0, sizeof ls);
    ls.ss = ss, ls.z = z, ls.mask = mask;
    int rc = lines_create(&ls);
    if (!rc && ls.nl)
        rc = lines_bound(&ls) || lines_settle(&ls) || settled_host(&ls) || settled_times(&ls) || settled_keep(&ls)
                 ? -1 : 0;
    free(ls.ln), free(ls.info), free(ls.last_hi), free(ls.last_row), free(ls.st), free(ls.td), free(ls.td1);
    free(ls.row_src), free(ls.todo);
    return rc;
}

// The cells of layer counts lo..hi: every mesh that divides the batch, every (ckpt, selective, sp)
// option. 0 or -1.
static int cells_build(StageSearch *ss, int lo, int hi, const Mesh *meshes, int nmesh) {
    Search *s = ss->s;
    StageOpt opt[SEARCH_MAX_STAGE_OPTS];  // 192 KiB
    size_t maxcells = 0;
    for (int l = lo; l <= hi; l++)
        for (int mi = 0; mi < nmesh; mi++) maxcells += (size_t)space_stage_options(&s->rules, l, meshes[mi].tp, opt);
    ss->cells = malloc(maxcells * sizeof *ss->cells);
    ss->k0 = malloc(maxcells * sizeof *ss->k0);
    ss->cell_ok = malloc(16 * maxcells * sizeof *ss->cell_ok);
    ss->tz = malloc((2 * maxcells + 1) * sizeof *ss->tz);
    if (!ss->cells || !ss->k0 || !ss->cell_ok || !ss->tz) return candidates_oom(s);
    for (int l = lo; l <= hi; l++)
        for (int mi = 0; mi < nmesh; mi++) {
            int64_t per = (int64_t)ss->G * meshes[mi].dp;
            if (s->B % per || !space_b_ok(&s->rules, s->B / per)) continue;
            int nopt = space_stage_options(&s->rules, l, meshes[mi].tp, opt);
            for (int oi = 0; oi < nopt; oi++)
                ss->cells[ss->nc++] = (Cell){mi, l - lo, {.layers = l, .dp = meshes[mi].dp, .tp = meshes[mi].tp,
                                                          .b = (int)(s->B / per), .ckpt = opt[oi].ckpt,
                                                          .sp = opt[oi].sp, .recompute = opt[oi].sel,
                                                          .lean = opt[oi].lean}};
        }
    return 0;
}

// ZeRO level z without offload: the times once per cell (they do not depend on p), then memory
// at every in-flight count; fitting candidates under the bound are kept, and k0 marks where each
// cell stops fitting. *need_offload: some cell stops fitting under the bound. 0 or -1.
static int zero_ratio_pass(StageSearch *ss, int z, int *need_offload) {
    Search *s = ss->s;
    int nc = ss->nc, np = ss->np;
    StageModel *m = stage_model_get(s, ss->kind, z, 0);
    if (!m || search_reserve(s, (size_t)nc * np) != 0) return -1;
    for (int x = 0; x < nc; x++) {
        StagePlan sp = cell_plan(ss, &ss->cells[x], z, NULL);
        search_set_row(s, x, &sp, ss->G, ss->plist[0]);
    }
    search_eval(s, m, nc, EVAL_TIME);
    for (int x = 0; x < nc; x++) ss->tz[2 * x] = s->outs[ST_T][x], ss->tz[2 * x + 1] = s->outs[ST_D][x];
    size_t n = 0;
    for (int x = 0; x < nc; x++) {
        StagePlan sp = cell_plan(ss, &ss->cells[x], z, NULL);
        for (int k = 0; k < np; k++) search_set_row(s, n++, &sp, ss->G, ss->plist[k]);
    }
    search_eval(s, m, n, EVAL_PEAKS);
    s->stats->candidates -= nc;  // the timed rows are among these
    *need_offload = 0;
    for (int x = 0; x < nc; x++) {
        size_t r0 = (size_t)x * np;
        double t0 = ss->tz[2 * x], d0 = ss->tz[2 * x + 1];
        int bound = search_bound_ok(s, ss->G, t0, d0, ss->cells[x].sp.layers);
        ss->k0[x] = np;
        for (int k = 0; k < np; k++) {
            if (!search_row_fits(s, r0 + k)) {
                ss->k0[x] = k;  // fitting is monotone in p: none from here on fits
                break;
            }
            s->stats->candidates_fit++;
            if (bound && cell_keep(ss, &ss->cells[x], z, NULL, k, t0, d0)) return candidates_oom(s);
        }
        // offloading only slows t and d down: worth trying only where it must make room
        if (!bound) ss->k0[x] = np;
        *need_offload |= ss->k0[x] < np;
    }
    return 0;
}

// Per offload pattern (which ratios are nonzero), the least memory of the pattern: memory is
// nonincreasing in wo, go and oo inside a pattern, so those sit at their maximum; ao is not
// monotone (a larger ao frees saved activations but grows the prefetch buffer), so every ao
// step is tried. When none of these fits, no point of the pattern does. (Across patterns memory
// is not monotone either: a first nonzero wo or go adds gather ring buffers.) Then, with an
// incumbent, the pattern's fastest point in a cell has every nonzero ratio at its least step
// (P1: t and t + d are nondecreasing in each ratio, and so is the bound): when that point is
// over the bound, so is every point of the pattern in the cell, at every p (P4).
// cell_ok[mask * nc + x] says what is left. 0 or -1.
static int pattern_screen(StageSearch *ss, int z, int mask) {
    Search *s = ss->s;
    const SpaceRules *R = &s->rules;
    int nc = ss->nc, np = ss->np, *ok = &ss->cell_ok[mask * nc];
    StageModel *mc = stage_model_get(s, ss->kind, z, mask);
    if (!mc) return -1;
    int na = mask & 8 ? R->oa_steps : 1;
    if (search_reserve(s, (size_t)nc * na) != 0) return -1;
    size_t n = 0;
    for (int x = 0; x < nc; x++)
        for (int a = 1; ss->k0[x] < np && a <= na; a++) {
            const unsigned char q[4] = {mask & 1 ? R->wg_steps : 0, mask & 2 ? R->wg_steps : 0,
                                        mask & 4 ? R->oa_steps : 0, mask & 8 ? a : 0};
            StagePlan sp = cell_plan(ss, &ss->cells[x], z, q);
            search_set_row(s, n++, &sp, ss->G, ss->plist[ss->k0[x]]);
        }
    search_eval(s, mc, n, EVAL_PEAKS);
    n = 0;
    for (int x = 0; x < nc; x++) {
        int fits = 0;
        for (int a = 1; ss->k0[x] < np && a <= na; a++)
            fits |= search_row_fits_device(s, n++);  // host: more offload, more host
        ok[x] = fits && !(mask & 8 && ss->cells[x].sp.lean);  // lean layers run without activation offload
    }
    if (isinf(s->incumbent)) return 0;
    n = 0;
    const unsigned char least[4] = {mask & 1, (mask >> 1) & 1, (mask >> 2) & 1, (mask >> 3) & 1};
    for (int x = 0; x < nc; x++)
        if (ok[x]) {
            StagePlan sp = cell_plan(ss, &ss->cells[x], z, least);
            search_set_row(s, n++, &sp, ss->G, ss->plist[ss->k0[x]]);
        }
    search_eval(s, mc, n, EVAL_TIME);
    n = 0;
    for (int x = 0; x < nc; x++)
        if (ok[x]) {
            ok[x] = search_bound_ok(s, ss->G, s->outs[ST_T][n], s->outs[ST_D][n], ss->cells[x].sp.layers);
            n++;
        }
    return 0;
}

// The ao-only pattern point by point, in increasing in-flight count: a point that does not fit
// at p fits at no larger p (memory is nondecreasing in p), and one over the bound is over it at
// every p (t and d do not depend on p), so only the survivors of one level are evaluated at the
// next. 0 or -1.
static int grid_ao(StageSearch *ss, int z) {
    enum { MASK = 8 };
    Search *s = ss->s;
    int nc = ss->nc, np = ss->np;
    ActiveRow *act;
    size_t rows = 0;
    for (int x = 0; x < nc; x++)
        if (ss->cell_ok[MASK * nc + x]) rows += (size_t)s->grid_n[MASK];
    if (!rows) return 0;
    StageModel *mm = stage_model_get(s, ss->kind, z, MASK);
    if (!mm) return -1;
    if (search_reserve(s, rows) != 0 || active_reserve(&ss->act, rows) != 0) return -1;
    act = ss->act.v;
    size_t na = 0;
    for (int x = 0; x < nc; x++)
        if (ss->cell_ok[MASK * nc + x])
            for (int g = 0; g < s->grid_n[MASK]; g++) act[na++] = (ActiveRow){x, g, ss->k0[x], 0, 0, 0};
    while (na) {
        for (size_t i = 0; i < na; i++) {
            StagePlan sp = cell_plan(ss, &ss->cells[act[i].ci], z, s->grid[MASK][act[i].g]);
            search_set_row(s, i, &sp, ss->G, ss->plist[act[i].k]);
        }
        // memory of every point, then the times of those that fit and are not timed yet
        search_eval(s, mm, na, EVAL_PEAKS);
        size_t fit = 0, nt = 0;
        for (size_t i = 0; i < na; i++) {
            if (!search_row_fits(s, i)) continue;
            s->stats->candidates_fit++;
            if (!act[i].timed) search_copy_row(s, nt++, i);
            act[fit++] = act[i];
        }
        search_eval(s, mm, nt, EVAL_TIME);
        s->stats->candidates -= (long long)nt;  // rows already counted
        nt = 0;
        for (size_t i = 0; i < fit; i++)
            if (!act[i].timed) act[i].t = s->outs[ST_T][nt], act[i].d = s->outs[ST_D][nt], act[i].timed = 1, nt++;
        size_t kept = 0;
        for (size_t i = 0; i < fit; i++) {
            ActiveRow ar = act[i];
            const Cell *ce = &ss->cells[ar.ci];
            if (!search_bound_ok(s, ss->G, ar.t, ar.d, ce->sp.layers)) continue;
            if (cell_keep(ss, ce, z, s->grid[MASK][ar.g], ar.k, ar.t, ar.d)) return candidates_oom(s);
            if (++ar.k < np) act[kept++] = ar;
        }
        na = kept;
    }
    return 0;
}

int stage_candidates(Search *s, int kind, int lo, int hi, int G, const Mesh *meshes, int nmesh, const int *plist,
                     int np, CandList *out) {
    StageSearch ss;
    memset(&ss, 0, sizeof ss);
    ss.s = s, ss.kind = kind, ss.G = G, ss.plist = plist, ss.np = np > MAX_P ? MAX_P : np, ss.out = out;
    int rc = cells_build(&ss, lo, hi, meshes, nmesh);
    Cell *all = ss.cells;
    int nall = ss.nc;
    Cell *some = nall ? malloc((size_t)nall * sizeof *some) : NULL;  // a code's cells (space_code_ok)
    if (nall && !some) rc = candidates_oom(s);
    for (int z = 0; z < SHARD_CODES && !rc && nall; z++) {
        if (!(s->rules.zero_mask >> z & 1)) continue;
        ss.cells = all, ss.nc = nall;
        if (z >= SHARD_ZERO_CODES) {
            ss.nc = 0;
            for (int x = 0; x < nall; x++)
                if (space_code_ok(s, z, all[x].sp.dp, all[x].sp.tp)) some[ss.nc++] = all[x];
            ss.cells = some;
            if (!ss.nc) continue;
        }
        int need_offload;
        rc = zero_ratio_pass(&ss, z, &need_offload);
        // PaRO's codes without offload: an I scope keeps g-fold the state of G to save traffic; a
        // stage short of memory gets it back from G scopes first (ZeRO's codes, which offload)
        if (rc || !s->rules.offload || !need_offload || z >= SHARD_ZERO_CODES) continue;
        for (int mask = 1; mask < 16 && !rc; mask++) rc = pattern_screen(&ss, z, mask);
        // then the grid of each pattern: a least-fitting search along oo, go or wo per line, or
        // point by point for ao alone
        for (int mask = 1; mask < 16 && !rc; mask++) rc = mask == 8 ? grid_ao(&ss, z) : grid_lines(&ss, z, mask);
    }
    free(all), free(some), free(ss.k0), free(ss.cell_ok), free(ss.act.v), free(ss.tz);
    return rc;
}
