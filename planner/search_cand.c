// The search's packed candidates and the stage plans they stand for. A Cand
// keeps what varies inside one (stage kind, layer count) list, small so that
// millions fit: its mesh as an index into the combination's mesh list and its
// offload ratios as steps of the rules' grid (wo = wo_q / wg_steps, ..., so
// they print and compare exactly). Every conversion between a Cand and the
// carrier StagePlan is here: a knob the search chooses is one field in Cand
// and one line in each of cand_pack and cand_unpack.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "planner/search_internal.h"

// a ratio q / steps of the grid back to its step q (rounded: (1/3) * 3 may miss 1 by an ulp)
static unsigned char grid_step(double ratio, int steps) { return (unsigned char)lround(ratio * steps); }

Cand cand_pack(const StagePlan *sp, int mesh, const SpaceRules *R, double t, double d) {
    Cand c = {t, d, mesh, (short)sp->ckpt, (signed char)sp->zero, (signed char)(sp->recompute == RECOMPUTE_SELECTIVE),
              (signed char)sp->sp, (signed char)sp->lean, grid_step(sp->wo, R->wg_steps),
              grid_step(sp->go, R->wg_steps), grid_step(sp->oo, R->oa_steps), grid_step(sp->ao, R->oa_steps)};
    return c;
}

StagePlan cand_unpack(const Cand *c, const Mesh *meshes, const SpaceRules *R, int layers, int64_t B, int G) {
    const Mesh *me = &meshes[c->mesh];
    StagePlan sp = {.layers = layers, .dp = me->dp, .tp = me->tp, .b = (int)(B / ((int64_t)G * me->dp)),
                    .zero = c->zero, .ckpt = c->ckpt, .sp = c->sp, .lean = c->lean,
                    .recompute = c->sel ? RECOMPUTE_SELECTIVE : RECOMPUTE_NONE};
    const unsigned char q[4] = {c->wo_q, c->go_q, c->oo_q, c->ao_q};
    stage_set_offload_steps(&sp, R, q);
    return sp;
}

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
