// Activation transfers between stages of different meshes (see
// pipeline_reshard.h). Pure arithmetic on the plan: both sides compute the
// same pieces without talking.
#include "runtime/pipeline_reshard.h"

// the first world rank of stage s; with [plan] virtual, chunk s runs on the
// ranks of pipeline rank s mod P (the first P chunks lie consecutively)
static int stage_first_rank(const Plan *plan, int s) {
    int r = 0;
    for (int i = 0; i < s % plan_pipeline_size(plan); i++) r += plan->stage[i].dp * plan->stage[i].tp;
    return r;
}

static int check_pair(const Plan *plan, int src, int dst) {
    if (src < 0 || dst < 0 || src >= plan->num_stages || dst >= plan->num_stages) return -1;
    const StagePlan *a = &plan->stage[src], *b = &plan->stage[dst];
    return (int64_t)a->b * a->dp == (int64_t)b->b * b->dp ? 0 : -1;
}

// overlap of [a0, a1) and [b0, b1); 0 when empty
static int overlap(int a0, int a1, int b0, int b1, int *first) {
    int lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    *first = lo;
    return hi > lo ? hi - lo : 0;
}

int reshard_sends(const Plan *plan, int src, int dst, int dp_index, int tp_index, ReshardPiece *out, int max) {
    if (check_pair(plan, src, dst)) return -1;
    const StagePlan *s = &plan->stage[src], *d = &plan->stage[dst];
    int lo = dp_index * s->b, hi = lo + s->b, n = 0, base = stage_first_rank(plan, dst);
    // receivers whose range meets [lo, hi), in dp order (so pieces come in order of first)
    for (int rd = lo / d->b; rd < d->dp && rd * d->b < hi; rd++) {
        int first, count = overlap(lo, hi, rd * d->b, (rd + 1) * d->b, &first);
        if (!count) continue;
        // every receiver tp index t' with t' mod tp_src == tp_index takes this copy
        for (int rt = tp_index; rt < d->tp; rt += s->tp) {
            if (n == max) return -1;
            out[n++] = (ReshardPiece){base + rd * d->tp + rt, first, count, first - lo};
        }
    }
    return n;
}

int reshard_recvs(const Plan *plan, int src, int dst, int dp_index, int tp_index, ReshardPiece *out, int max) {
    if (check_pair(plan, src, dst)) return -1;
    const StagePlan *s = &plan->stage[src], *d = &plan->stage[dst];
    int lo = dp_index * d->b, hi = lo + d->b, n = 0, base = stage_first_rank(plan, src);
    int st = tp_index % s->tp;
    for (int sd = lo / s->b; sd < s->dp && sd * s->b < hi; sd++) {
        int first, count = overlap(lo, hi, sd * s->b, (sd + 1) * s->b, &first);
        if (!count) continue;
        if (n == max) return -1;
        out[n++] = (ReshardPiece){base + sd * s->tp + st, first, count, first - lo};
    }
    return n;
}
