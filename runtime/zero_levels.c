// The sharding scopes of the training state and the collectives between them
// (zero.h "Scopes"; docs/paro.md). One unit's positions 0..padded are cut in
// two levels: g intra-group pieces of is = padded / g (piece l: the I shard
// of local rank l), each cut into n = dp / g blocks of sh = padded / dp (block
// N of piece l: the G shard of the rank with local index l in group N). Rank
// r = N*g + l so owns G block l*n + N, which lies inside its own I piece l:
//   I shard: [l*is, (l+1)*is),   G shard: [l*is + N*sh, l*is + (N+1)*sh).
// Every move between scopes is then a collective of one level, in place:
//   G -> I: all-gather among the peers (inter: the n ranks of local index l)
//   I -> N: all-gather inside the group (intra: its g ranks)
//   N -> I: reduce-scatter inside the group, then all-reduce among the peers
//   N -> G: reduce-scatter inside the group, then among the peers
// The inter level moves 1/g of the unit per rank: the traffic that crosses
// the groups (nodes, by default) shrinks g-fold against the flat collectives.
// Without an I scope (codes 0..3, g = 1) the G shard is block r and the moves
// are the flat dp collectives (hierarchical across nodes with [cluster]
// collectives = hierarchical, runtime/comm_hier.h), as ZeRO always ran them.
#include <string.h>
#include "base/schema.h"
#include "runtime/comm.h"
#include "runtime/comm_hier.h"
#include "runtime/grid.h"
#include "runtime/model_runtime.h"

StagePlan zero_stage_plan(const Grid *grid, const MistConfig *cfg) {
    StagePlan sp = cfg->plan.plan.stage[grid->stage];
    sp.shard_group = shard_group_size(&sp, cfg->cluster.gpus_per_node > 0 ? cfg->cluster.gpus_per_node : 1);
    return sp;
}

int zero_scope_groups(const CommBackend *c, const Grid *grid, const MistConfig *cfg, CommGroup *out[4]) {
    const StagePlan sp = zero_stage_plan(grid, cfg);
    int g = sp.shard_group, i = grid->dp_index, rc = 0;
    for (int k = 0; k < 4; k++) out[k] = NULL;
    if (!shard_code_has_i(shard_code_effective(sp.zero, g, sp.dp))) return 0;
    for (int k = 0; k < 4 && !rc; k++) rc = c->group_split(c, grid->dp, k % 2 ? i % g : i / g, i, &out[k]);
    return rc;
}

void zero_scope_groups_free(const CommBackend *c, CommGroup *out[4]) {
    for (int k = 0; k < 4; k++) {
        if (out[k]) c->group_free(c, out[k]);
        out[k] = NULL;
    }
}

size_t zero_scope_len(const ModelRuntime *r, int u, int scope) {
    const MrUnit *U = &r->units[u];
    return scope == SCOPE_G ? U->shard : scope == SCOPE_I ? U->padded / (size_t)r->paro_g : U->padded;
}

size_t zero_scope_base(const ModelRuntime *r, int u, int scope) {
    const MrUnit *U = &r->units[u];
    size_t g = (size_t)r->paro_g, l = (size_t)r->dp_rank % g, N = (size_t)r->dp_rank / g, n = (size_t)r->dp / g;
    if (scope == SCOPE_N) return 0;
    if (scope == SCOPE_I) return l * (U->padded / g);
    return (l * n + N) * U->shard;  // g = 1: block dp_rank
}

// the collective of one step, on `p` = unit position `origin` of elements of `elem` bytes
static ZeroColl coll(CollKind k, struct CommGroup *grp, char *p, size_t origin, size_t elem, size_t send_pos,
                     size_t recv_pos, size_t count, MistDtype t) {
    return (ZeroColl){k, grp, p + (send_pos - origin) * elem, p + (recv_pos - origin) * elem, count, t};
}

int zero_gather_steps(const ModelRuntime *r, int u, int from, int to, char *p, size_t origin, size_t elem,
                      MistDtype t, ZeroColl out[2]) {
    if (from <= to || r->units[u].padded == 0) return 0;
    size_t sh = r->units[u].shard, is = zero_scope_len(r, u, SCOPE_I);
    size_t bI = zero_scope_base(r, u, SCOPE_I), bG = zero_scope_base(r, u, SCOPE_G);
    if (r->paro_g == 1) {  // no I level: G -> N over the dp group
        out[0] = coll(COLL_ALL_GATHER, r->dpg, p, origin, elem, bG, 0, sh, t);
        return 1;
    }
    int n = 0;  // (a step's group: paro_grp[level + 2 * its position in the chain])
    if (from == SCOPE_G) out[n++] = coll(COLL_ALL_GATHER, r->paro_grp[1], p, origin, elem, bG, bI, sh, t);
    if (to == SCOPE_N) out[n] = coll(COLL_ALL_GATHER, r->paro_grp[2 * n], p, origin, elem, bI, 0, is, t), n++;
    return n;
}

int zero_reduce_steps(const ModelRuntime *r, int u, int to, char *p, ZeroColl out[2]) {
    const MrUnit *U = &r->units[u];
    size_t x = r->x, is = zero_scope_len(r, u, SCOPE_I);
    size_t bI = zero_scope_base(r, u, SCOPE_I), bG = zero_scope_base(r, u, SCOPE_G);
    MistDtype t = r->be->dtype;
    if (U->padded == 0) return 0;
    if (to == SCOPE_N) {
        out[0] = coll(COLL_ALL_REDUCE, r->dpg, p, 0, x, 0, 0, U->padded, t);
        return 1;
    }
    if (r->paro_g == 1) {
        out[0] = coll(COLL_REDUCE_SCATTER, r->dpg, p, 0, x, 0, bG, U->shard, t);
        return 1;
    }
    out[0] = coll(COLL_REDUCE_SCATTER, r->paro_grp[0], p, 0, x, 0, bI, is, t);
    if (to == SCOPE_I) out[1] = coll(COLL_ALL_REDUCE, r->paro_grp[3], p, 0, x, bI, bI, is, t);
    else out[1] = coll(COLL_REDUCE_SCATTER, r->paro_grp[3], p, 0, x, bI, bG, U->shard, t);
    return 2;
}

// starts one step: the dp group's through comm_hier_start (flat, or two-level across nodes);
// every request is tested and waited through comm_hier_test / _wait, which serve both kinds
static void coll_start(ModelRuntime *r, const ZeroColl *c, CommRequest **req) {
    const CommBackend *m = r->comm;
    *req = NULL;
    if (c->grp == r->dpg) {
        commCheck(m, comm_hier_start(r->dph, m, c->kind, c->send, c->recv, c->count, c->t, r->dpg, req));
        return;
    }
    if (c->kind == COLL_ALL_GATHER) commCheck(m, m->iall_gather(m, c->send, c->recv, c->count, c->t, c->grp, req));
    else if (c->kind == COLL_REDUCE_SCATTER)
        commCheck(m, m->ireduce_scatter(m, c->send, c->recv, c->count, c->t, COMM_SUM, c->grp, req));
    else commCheck(m, m->iall_reduce(m, c->send, c->recv, c->count, c->t, COMM_SUM, c->grp, req));
}

void zero_chain_start(ModelRuntime *r, const ZeroColl *steps, int n, CommRequest **req, ZeroColl *next) {
    next->send = NULL;
    if (n < 1) return;
    coll_start(r, &steps[0], req);
    if (n < 2) return;
    *next = steps[1];
    r->chains[r->nchains++] = (ZeroChain){req, next};
}

// the FIFO's head: its first level done (wait = 1: waited for), its second started; 0 when
// the first is still running (wait = 0)
static int chain_advance(ModelRuntime *r, int wait) {
    ZeroChain *h = &r->chains[0];
    if (*h->req) {
        int done = 1;
        if (wait) commCheck(r->comm, comm_hier_wait(r->dph, r->comm, *h->req));
        else commCheck(r->comm, comm_hier_test(r->dph, r->comm, *h->req, &done));
        if (!done) return 0;
        *h->req = NULL;
    }
    ZeroColl c = *h->next;
    h->next->send = NULL;
    coll_start(r, &c, h->req);
    memmove(r->chains, r->chains + 1, (size_t)--r->nchains * sizeof *r->chains);
    return 1;
}

void zero_chains_poll(ModelRuntime *r) {
    while (r->nchains > 0 && chain_advance(r, 0)) {
    }
}

void zero_chain_wait(ModelRuntime *r, CommRequest **req, ZeroColl *next) {
    if (next->send) {  // its second level first: every chain before it starts its own (in order)
        int at = 0;
        while (at < r->nchains && r->chains[at].req != req) at++;
        for (int k = 0; k <= at && r->nchains > 0; k++) chain_advance(r, 1);
    }
    if (*req) commCheck(r->comm, comm_hier_wait(r->dph, r->comm, *req));
    *req = NULL;
}

void zero_chain_run(ModelRuntime *r, const ZeroColl *steps, int n) {
    const CommBackend *m = r->comm;
    for (int i = 0; i < n; i++) {  // blocking, flat: host buffers (checkpoints, the tied sum)
        const ZeroColl *c = &steps[i];
        if (c->kind == COLL_ALL_GATHER) commCheck(m, m->all_gather(m, c->send, c->recv, c->count, c->t, c->grp));
        else if (c->kind == COLL_REDUCE_SCATTER)
            commCheck(m, m->reduce_scatter(m, c->send, c->recv, c->count, c->t, COMM_SUM, c->grp));
        else commCheck(m, m->all_reduce(m, c->send, c->recv, c->count, c->t, COMM_SUM, c->grp));
    }
}

struct CommGroup *zero_scope_group(const ModelRuntime *r, int scope) {
    return scope == SCOPE_G ? r->dpg : scope == SCOPE_I ? r->paro_grp[0] : NULL;
}
