// Predicted schedule of one iteration (see trace_predict.h).
//
// Per micro-batch durations of stage i come from its stage model: the blocks'
// forward is ST_FWD_FIRST for micro-batch 0 (it carries the deferred optimizer
// step) and ST_FWD_OTHER after, the backward ST_BWD_LAST for micro-batch G-1
// (it carries the gradient sync) and ST_BWD_OTHER before. The rest of the
// stage's time, the pre / post parts and the boundary copies and sends, is
// priced per micro-batch as e = t - (fwd_other + bwd_other) and once per
// iteration as e_d = d - (fwd_first + bwd_last - fwd_other - bwd_other); the
// model does not say which direction it belongs to, so it is split between
// forward and backward as the blocks' times are (share r = fwd / (fwd + bwd)),
// e_d going to the first forward and the last backward. A stage's passes then
// add up to G t + d, the model's total for the stage.
//
// The timeline: each pass starts when the stage's previous pass has ended and
// its input is there (forward g after the forward of g on the stage before,
// backward g after the backward of g on the stage after); pipeline sends are
// priced inside the passes. With equal stages this is the model's
// (G - 1) max t + sum t; with unequal ones it may be slightly different, and
// the trace records both.
//
// An interleaved plan ([plan] virtual = v > 1): the S = P v stages are chunks,
// chunk c on pipeline rank c mod P, which runs its chunks' passes in
// planner/interleave.c's order on one row (the trace's process is the rank, a
// pass names its chunk); a forward of chunk c waits for chunk c - 1's, a
// backward for chunk c + 1's, each lasting what its chunk's stage model gives.
// The trace ends where this placement does; the closed form that --analyze
// prints (pipeline_interleaved_seconds) is recorded beside it (docs/traces.md).
#include "planner/trace_predict.h"
#include <math.h>
#include <stdlib.h>
#include "planner/interleave.h"

int trace_1f1b_order(int stage, int S, int G, int *out) {
    ChunkPass *a = malloc((size_t)(G > 0 ? 2 * G : 1) * sizeof *a);
    int n = a ? interleaved_order(stage, S, 1, G, a) : -1;  // what place_passes runs for v = 1
    for (int k = 0; k < n; k++) out[k] = a[k].backward ? -1 - a[k].microbatch : a[k].microbatch;
    free(a);
    return n == 2 * G ? 0 : -1;
}

typedef struct {
    double fwd_first, fwd_other, bwd_last, bwd_other;  // the passes' durations, edge parts included
} StagePasses;

static StagePasses stage_passes(const StageAnalysis *s, int G) {
    const double *o = s->out;
    double ff = o[ST_FWD_FIRST], fo = o[ST_FWD_OTHER], bl = o[ST_BWD_LAST], bo = o[ST_BWD_OTHER];
    StagePasses p;
    if (G == 1) {  // one micro-batch is first and last: t holds everything
        double e = fmax(o[ST_T] - ff - bl, 0), r = ff + bl > 0 ? ff / (ff + bl) : 0.5;
        p.fwd_first = p.fwd_other = ff + r * e;
        p.bwd_last = p.bwd_other = bl + (1 - r) * e;
        return p;
    }
    double e = fmax(o[ST_T] - fo - bo, 0), ed = fmax(o[ST_D] - (ff + bl - fo - bo), 0);
    double r = fo + bo > 0 ? fo / (fo + bo) : 0.5;
    p.fwd_other = fo + r * e;
    p.bwd_other = bo + (1 - r) * e;
    p.fwd_first = ff + r * (e + ed);
    p.bwd_last = bl + (1 - r) * (e + ed);
    return p;
}

// The side streams' work under one pass, from its start (phase: 0 fwd first,
// 1 fwd other, 2 bwd last, 3 bwd other).
static int add_streams(Trace *t, const StageAnalysis *s, int stage, int chunk, int phase, int g, double start) {
    static const int kinds[STAGE_STREAMS] = {TRACE_COLLECTIVES, TRACE_H2D, TRACE_D2H};
    for (int k = 0; k < STAGE_STREAMS; k++) {
        double work = s->out[ST_STREAMS + STAGE_STREAMS * phase + k];
        if (work > 0 && trace_add(t, (TraceEvent){stage, -1, TRACE_TRACK_COLLECTIVES + k, kinds[k], g, start, work, -1, chunk}))
            return -1;
    }
    return 0;
}

// Where add_parts puts the next part.
typedef struct {
    Trace *t;
    int stage, chunk, g;  // the event's process and chunk (TraceEvent)
    double at, scale, gap;  // where the next part starts; how parts are stretched to the pass
} PartCursor;

static int put_part(PartCursor *c, int kind, double dur, int block) {
    if (dur <= 0) return 0;
    dur *= c->scale;
    int rc = trace_add(c->t, (TraceEvent){c->stage, -1, TRACE_TRACK_COMPUTE, kind, c->g, c->at, dur, block, c->chunk});
    c->at += dur + c->gap;
    return rc;
}

// The nested events of a pass placed at [start, start + dur): forward: pre, blocks
// first to last, post; backward: post, blocks last to first (a checkpointed one,
// the last `ckpt` of the stage, recomputes its forward first; under selective
// recompute the others their attention core's forward), pre. Their times
// are the stage model's compute terms (ST_BLOCK_FWD ...); the rest of the pass
// (exposed transfers, the boundary copies) is spread evenly after each of them,
// and should the terms exceed the pass (the blocks cannot: the overlap rule
// never prices a phase below its compute; the pre / post parts can, as their
// time is split between the directions in the blocks' ratio) they are scaled to fit.
static int add_parts(Trace *t, const StageAnalysis *s, int stage, int chunk, int fwd, int g, double start, double dur) {
    const double *o = s->out;
    int L = s->sp.layers, ck = s->sp.ckpt < L ? s->sp.ckpt : L, first = s->first_layer;
    double edge0 = fwd ? o[ST_PRE_FWD] : o[ST_POST_BWD], edge1 = fwd ? o[ST_POST_FWD] : o[ST_PRE_BWD];
    double blk = fwd ? o[ST_BLOCK_FWD] : o[ST_BLOCK_BWD], re = fwd ? 0 : o[ST_BLOCK_RECOMPUTE];
    double ra = fwd ? 0 : o[ST_BLOCK_RECOMPUTE_ATT];  // 0 unless recompute = selective
    // a lean block (the stage's first L - ck, those not checkpointed) runs its extra passes inside
    // its forward and backward, as the runtime's block part includes them; 0 unless lean
    double lean = fmax(fwd ? o[ST_BLOCK_LEAN_FWD] : o[ST_BLOCK_LEAN_BWD], 0);
    double sum = fmax(edge0, 0) + fmax(edge1, 0) + L * fmax(blk, 0) + ck * fmax(re, 0) + (L - ck) * fmax(ra, 0) +
                 (L - ck) * (blk > 0 ? lean : 0);
    int n = (edge0 > 0) + (edge1 > 0) + L * (blk > 0) + ck * (re > 0) + (L - ck) * (ra > 0);
    if (!n) return 0;
    PartCursor c = {t, stage, chunk, g, start, sum > dur ? dur / sum : 1, sum < dur ? (dur - sum) / n : 0};
    int rc = put_part(&c, fwd ? TRACE_PRE_FORWARD : TRACE_POST_BACKWARD, edge0, -1);
    for (int k = 0; k < L && !rc; k++) {
        int l = fwd ? k : L - 1 - k;  // the stage's block
        if (!fwd && l >= L - ck) rc = put_part(&c, TRACE_BLOCK_RECOMPUTE, re, first + l);
        else if (!fwd) rc = put_part(&c, TRACE_BLOCK_RECOMPUTE_ATT, ra, first + l);
        double own = blk > 0 && l < L - ck ? blk + lean : blk;  // a block part only where blk has one (n)
        if (!rc) rc = put_part(&c, fwd ? TRACE_BLOCK_FORWARD : TRACE_BLOCK_BACKWARD, own, first + l);
    }
    return rc ? rc : put_part(&c, fwd ? TRACE_POST_FORWARD : TRACE_PRE_BACKWARD, edge1, -1);
}

// One pass of stage i that may start at `ready` (its input there) and *free_at (the
// stage done with its previous pass); *done: when its output is there for the
// neighbour. The first forward's extra work (the deferred optimizer step and the
// weight refresh) needs no input, so it runs as soon as the stage is free, behind
// the pipeline's fill; the last backward's (the gradient sync) comes after its
// output has left, behind the drain: where the model's 1F1B total hides them.
static int place_pass(Trace *t, const StageAnalysis *s, const StagePasses *sp, int stage, int chunk, int fwd, int g,
                      int phase, double ready, double *free_at, double *done) {
    int kind = fwd ? TRACE_FORWARD : TRACE_BACKWARD;
    double dur = (double[]){sp->fwd_first, sp->fwd_other, sp->bwd_last, sp->bwd_other}[phase];
    double first_extra = phase == 0 ? sp->fwd_first - sp->fwd_other : 0;
    double last_extra = phase == 2 ? sp->bwd_last - sp->bwd_other : 0;
    if (add_streams(t, s, stage, chunk, phase, g, fmax(*free_at, first_extra > 0 ? 0 : ready))) return -1;
    if (first_extra > 0) {  // the step's part of the first forward, then the forward proper
        if (trace_add(t, (TraceEvent){stage, -1, TRACE_TRACK_COMPUTE, kind, g, *free_at, first_extra, -1, chunk})) return -1;
        *free_at += first_extra;
        dur -= first_extra;
    }
    double start = fmax(ready, *free_at);
    if (trace_add(t, (TraceEvent){stage, -1, TRACE_TRACK_COMPUTE, kind, g, start, dur, -1, chunk})) return -1;
    if (add_parts(t, s, stage, chunk, fwd, g, start, dur)) return -1;
    *free_at = start + dur;
    *done = start + dur - fmax(last_extra, 0);
    return 0;
}

// Places every pass; fend[c][g] / bend[c][g]: when forward / backward g of stage (chunk) c ends.
// Pipeline rank r (a stage of a plain plan) runs its passes in interleaved_order's order (for
// v = 1 the 1F1B order of trace_1f1b_order), chunk c on rank c mod P; a forward of chunk c waits
// for chunk c - 1's of the same micro-batch, a backward for chunk c + 1's.
static int place_passes(Trace *t, const PlanAnalysis *a, double *fend, double *bend) {
    int S = a->num_stages, G = a->G, v = t->virtual_chunks > 1 ? t->virtual_chunks : 1, P = S / v, n = 2 * G * v;
    ChunkPass *order = malloc((size_t)P * n * sizeof *order);
    int *next = calloc((size_t)P, sizeof *next);
    double *free_at = calloc((size_t)P, sizeof *free_at);
    StagePasses *sp = malloc((size_t)S * sizeof *sp);
    int rc = order && next && free_at && sp ? 0 : -1;
    for (int r = 0; !rc && r < P; r++)
        if (interleaved_order(r, P, v, G, order + (size_t)r * n) != n) rc = -1;
    for (int c = 0; !rc && c < S; c++) sp[c] = stage_passes(&a->stage[c], G);
    // a pass whose input is not there yet waits; some rank always has a ready pass
    for (int placed = 0; !rc && placed < P * n;) {
        int progress = 0;
        for (int r = 0; r < P && !rc; r++) {
            while (next[r] < n) {
                const ChunkPass *k = &order[(size_t)r * n + next[r]];
                int c = k->chunk, fwd = !k->backward, g = k->microbatch;
                double ready = fwd ? (c > 0 ? fend[(size_t)(c - 1) * G + g] : 0) : (c < S - 1 ? bend[(size_t)(c + 1) * G + g] : 0);
                if (ready < 0) break;  // not placed yet
                int phase = fwd ? (g == 0 ? 0 : 1) : (g == G - 1 ? 2 : 3);
                if (place_pass(t, &a->stage[c], &sp[c], r, v > 1 ? c + 1 : 0, fwd, g, phase, ready, &free_at[r],
                               &(fwd ? fend : bend)[(size_t)c * G + g])) {
                    rc = -1;
                    break;
                }
                next[r]++, placed++, progress = 1;
            }
        }
        if (!progress) rc = -1;  // cannot happen with these orders (tests/test_interleave.c); never loop
    }
    free(order), free(next), free(free_at), free(sp);
    return rc;
}

// The gaps of each stage's compute row, as bubbles, and the unpriced grad-norm mark at the end.
static int add_bubbles(Trace *t, int S, double end) {
    int n = t->n;
    for (int i = 0; i < S; i++) {
        double at = 0;
        for (int k = 0; k < n; k++) {  // a stage's passes were added in its order
            const TraceEvent e = t->ev[k];
            if (e.stage != i || e.track != TRACE_TRACK_COMPUTE || e.kind >= TRACE_TOP_KINDS) continue;  // passes only
            if (e.start > at + 1e-12 && trace_add(t, (TraceEvent){i, -1, TRACE_TRACK_COMPUTE, TRACE_BUBBLE, -1, at, e.start - at, -1, 0}))
                return -1;
            at = e.start + e.dur;
        }
        if (end > at + 1e-12 && trace_add(t, (TraceEvent){i, -1, TRACE_TRACK_COMPUTE, TRACE_BUBBLE, -1, at, end - at, -1, 0}))
            return -1;
        // the model does not price the norm's one-number all-reduce: a mark of no length
        if (trace_add(t, (TraceEvent){i, -1, TRACE_TRACK_COMPUTE, TRACE_GRAD_NORM, -1, end, 0, -1, 0})) return -1;
    }
    return 0;
}

int trace_predict(Trace *t, const PlanAnalysis *a) {
    int S = a->num_stages, G = a->G, v = a->virtual_chunks > 1 ? a->virtual_chunks : 1;
    t->stages = S / v, t->G = G, t->source = "predicted", t->virtual_chunks = v;
    double *fend = malloc((size_t)S * G * sizeof *fend), *bend = malloc((size_t)S * G * sizeof *bend);
    int rc = fend && bend ? 0 : -1;
    for (size_t k = 0; !rc && k < (size_t)S * G; k++) fend[k] = bend[k] = -1;
    if (!rc) rc = place_passes(t, a, fend, bend);
    double end = 0;
    for (int k = 0; k < t->n; k++)
        if (t->ev[k].track == TRACE_TRACK_COMPUTE) end = fmax(end, t->ev[k].start + t->ev[k].dur);
    t->iteration_seconds = end;
    if (!rc) rc = add_bubbles(t, S / v, end);
    free(fend), free(bend);
    return rc;
}
