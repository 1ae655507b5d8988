// Hierarchical collectives (comm_hier.h) from any backend's group_split and
// nonblocking operations. Layout names: P = n*g ranks, rank r = N*g + l (node
// N, local index l); a block is `count` elements (reduce-scatter / all-gather).
//
// Why reduce-scatter ends with a message: the flat form hands rank r block r.
// An intra-node reduce-scatter can only give local rank l a contiguous part
// of the buffer, and the blocks rank (N, l) needs summed across nodes next,
// {M*g + l : M < n}, lie g blocks apart. So the levels work on the buffer as g
// "super-blocks" of n blocks (super-block l = blocks l*n .. l*n+n-1): the
// intra reduce-scatter gives local rank l super-block l summed over its node,
// the inter reduce-scatter among peers gives node N's rank the total of block
// l*n + N, in place. That block belongs to rank l*n + N; one message (a
// permutation of the ranks, no rank sends or receives twice) takes it there.
// It moves count elements per rank, P/(g(n-1)) of what the inter level moves
// per node (docs/paro.md prices it). All-gather runs the same steps backwards.
#include "runtime/comm_hier.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "planner/cost_terms.h"

#define HIER_TAG 0x4849  // "HI": the permutation's messages

struct CommHier {
    const CommBackend *c;
    CommGroup *group, *intra, *inter;
    int size, rank;   // in group
    int n, g;         // nodes, ranks per node
    int node, local;  // this rank's N (its rank in inter) and l (its rank in intra)
};

int comm_hier_nodes(const CommHier *h) { return h->n; }
int comm_hier_per_node(const CommHier *h) { return h->g; }
int comm_hier_groups(const CommHier *h, CommGroup *flat, CommGroup **out) {
    out[0] = h ? h->intra : flat, out[1] = h ? h->inter : flat;
    return 2;
}

void comm_hier_free(CommHier *h) {
    if (!h) return;
    if (h->intra) h->c->group_free(h->c, h->intra);
    if (h->inter) h->c->group_free(h->c, h->inter);
    free(h);
}

int comm_hier_new(const CommBackend *c, CommGroup *group, int node, CommHier **out, char *why, size_t len) {
    *out = NULL;
    CommHier *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(why, len, "out of host memory");
        return 0;
    }
    h->c = c, h->group = group;
    h->size = c->group_size(c, group), h->rank = c->group_rank(c, group);
    int rc = c->group_split(c, group, node, h->rank, &h->intra);
    if (!rc) h->g = c->group_size(c, h->intra), h->local = c->group_rank(c, h->intra);
    if (!rc) rc = c->group_split(c, group, h->local, h->rank, &h->inter);
    if (rc) {
        comm_hier_free(h);
        return rc;
    }
    h->n = c->group_size(c, h->inter), h->node = c->group_rank(c, h->inter);
    // every rank must see the same shape: max of (g, -g, n, -n, misnumbered)
    int32_t v[5] = {h->g, -h->g, h->n, -h->n, h->rank != h->node * h->g + h->local};
    rc = c->all_reduce(c, v, v, 5, MIST_I32, COMM_MAX, group);
    if (rc) {
        comm_hier_free(h);
        return rc;
    }
    const char *no = NULL;
    if (v[0] != -v[1] || v[2] != -v[3]) no = "its nodes hold different numbers of its ranks";
    else if (v[4]) no = "its ranks are not numbered node by node";
    else if (h->n < 2) no = "it lies inside one node";
    else if (h->g < 2) no = "it has one rank per node";
    if (no) {
        snprintf(why, len, "the group of %d ranks stays flat: %s", h->size, no);
        comm_hier_free(h);
        return 0;
    }
    snprintf(why, len, "%d nodes x %d ranks", h->n, h->g);
    *out = h;
    return 0;
}

static char *at(const void *base, size_t elems, MistDtype t) {
    return (char *)base + elems * mist_dtype_size(t);
}

// Waits every non-NULL request of q[0..k); the first error wins (all are waited).
static int wait_all(const CommBackend *c, CommRequest **q, int k) {
    int rc = 0;
    for (int i = 0; i < k; i++)
        if (q[i]) {
            int r = c->wait(c, q[i]);
            q[i] = NULL;
            if (!rc) rc = r;
        }
    return rc;
}

// All-reduce of g*pieces elements in `chunks` chunks. Chunk j covers pieces
// [off_j, off_j + p_j) of each of the g local parts of the chunk: elements
// [g*off_j, g*(off_j+p_j)). Its three steps: intra reduce-scatter (RS),
// inter all-reduce of this rank's piece (AR), intra all-gather (AG). The loop
// starts RS(j+1) before waiting AR(j), so the node's links carry the next
// chunk while the network carries this one; every rank issues the same
// sequence on each subgroup (RS0, RS1, AG0, RS2, AG1, ...), as the backends
// require.
static int pipelined_all_reduce(CommHier *h, const void *send, void *recv, size_t pieces, MistDtype t, CommOp op,
                                int chunks) {
    const CommBackend *c = h->c;
    CommRequest *rs[COST_HIER_MAX_CHUNKS] = {0}, *ag[COST_HIER_MAX_CHUNKS] = {0}, *ar = NULL;
    size_t off[COST_HIER_MAX_CHUNKS + 1], g = (size_t)h->g, l = (size_t)h->local;
    for (int j = 0; j <= chunks; j++) off[j] = pieces * (size_t)j / (size_t)chunks;
    int rc = 0;
    for (int j = 0; j <= chunks && !rc; j++) {
        if (j < chunks) {  // RS(j): send's chunk -> this rank's piece of recv's chunk (in place when send == recv)
            size_t p = off[j + 1] - off[j], base = g * off[j];
            rc = c->ireduce_scatter(c, at(send, base, t), at(recv, base + l * p, t), p, t, op, h->intra, &rs[j]);
        }
        if (j == 0 || rc) continue;
        int i = j - 1;  // chunk i: its RS is done once waited; AR, then AG
        size_t p = off[i + 1] - off[i], mine = g * off[i] + l * p;
        rc = c->wait(c, rs[i]);
        rs[i] = NULL;
        if (!rc) rc = c->iall_reduce(c, at(recv, mine, t), at(recv, mine, t), p, t, op, h->inter, &ar);
        if (!rc) rc = c->wait(c, ar);
        ar = NULL;
        if (!rc) rc = c->iall_gather(c, at(recv, mine, t), at(recv, g * off[i], t), p, t, h->intra, &ag[i]);
    }
    // the order above waits RS(j) only after RS(j+1) started: one chunk of lookahead
    int rc2 = wait_all(c, rs, chunks);
    int rc3 = wait_all(c, ag, chunks);
    return rc ? rc : rc2 ? rc2 : rc3;
}

int comm_hier_all_reduce(CommHier *h, const void *send, void *recv, size_t count, MistDtype t, CommOp op,
                         int overlap) {
    size_t g = (size_t)h->g, pieces = count / g, tail = count - g * pieces;
    int rc = 0;
    if (pieces > 0) {
        int chunks = overlap ? cost_hier_chunks((double)(g * pieces * mist_dtype_size(t))) : 1;
        if ((size_t)chunks > pieces) chunks = (int)pieces;
        rc = pipelined_all_reduce(h, send, recv, pieces, t, op, chunks);
    }
    // the last count mod g elements (fewer than g): flat, on the whole group
    if (!rc && tail)
        rc = h->c->all_reduce(h->c, at(send, g * pieces, t), at(recv, g * pieces, t), tail, t, op, h->group);
    return rc;
}

// The permutation between the levels: rank r holds block `have` (super-block
// order: have = l*n + N) at position `have`, and block `want` arrives from the
// rank that has it. fwd = 1 (reduce-scatter): send block l*n+N to rank l*n+N,
// receive block r. fwd = 0 (all-gather): send block r to the rank whose
// super-block index is r, receive block l*n+N from its owner.
static int permute(CommHier *h, void *buf, size_t count, MistDtype t, int fwd) {
    const CommBackend *c = h->c;
    int r = h->rank, s = h->local * h->n + h->node;  // s: this rank's super-block index
    if (r == s) return 0;
    int to_rs = s, from_rs = (r % h->n) * h->g + r / h->n;  // the rank whose super-block index is r
    int to = fwd ? to_rs : from_rs, from = fwd ? from_rs : to_rs;
    int out = fwd ? s : r, in = fwd ? r : s;  // block sent, block received (positions in buf)
    CommRequest *q[2] = {NULL, NULL};
    int rc = 0;
    if (c->p2p_group) rc = c->p2p_group(c, 1);
    if (!rc) rc = c->irecv(c, at(buf, (size_t)in * count, t), count, t, from, HIER_TAG, h->group, &q[0]);
    if (!rc) rc = c->isend(c, at(buf, (size_t)out * count, t), count, t, to, HIER_TAG, h->group, &q[1]);
    if (c->p2p_group) {
        int rc2 = c->p2p_group(c, 0);
        if (!rc) rc = rc2;
    }
    int rc3 = wait_all(c, q, 2);
    return rc ? rc : rc3;
}

int comm_hier_reduce_scatter(CommHier *h, const void *send, void *recv, size_t count, MistDtype t, CommOp op) {
    const CommBackend *c = h->c;
    if (recv != at(send, (size_t)h->rank * count, t))  // not in place: no room for the levels
        return c->reduce_scatter(c, send, recv, count, t, op, h->group);
    void *buf = (void *)send;
    size_t sb = (size_t)h->n * count;  // super-block
    void *mine = at(buf, (size_t)h->local * sb, t);
    int rc = c->reduce_scatter(c, buf, mine, sb, t, op, h->intra);
    if (!rc) rc = c->reduce_scatter(c, mine, at(mine, (size_t)h->node * count, t), count, t, op, h->inter);
    if (!rc) rc = permute(h, buf, count, t, 1);
    return rc;
}

int comm_hier_all_gather(CommHier *h, const void *send, void *recv, size_t count, MistDtype t) {
    const CommBackend *c = h->c;
    if (send != at(recv, (size_t)h->rank * count, t)) return c->all_gather(c, send, recv, count, t, h->group);
    size_t sb = (size_t)h->n * count;
    void *mine = at(recv, (size_t)h->local * sb, t);
    int rc = permute(h, recv, count, t, 0);
    if (!rc) rc = c->all_gather(c, at(mine, (size_t)h->node * count, t), mine, count, t, h->inter);
    if (!rc) rc = c->all_gather(c, mine, recv, sb, t, h->intra);
    return rc;
}

int comm_hier_start(CommHier *h, const CommBackend *c, CollKind k, const void *send, void *recv, size_t count,
                    MistDtype t, CommGroup *group, CommRequest **req) {
    if (!h) {
        if (k == COLL_ALL_REDUCE) return c->iall_reduce(c, send, recv, count, t, COMM_SUM, group, req);
        if (k == COLL_REDUCE_SCATTER) return c->ireduce_scatter(c, send, recv, count, t, COMM_SUM, group, req);
        return c->iall_gather(c, send, recv, count, t, group, req);
    }
    *req = NULL;
    if (k == COLL_ALL_REDUCE) return comm_hier_all_reduce(h, send, recv, count, t, COMM_SUM, 1);
    if (k == COLL_REDUCE_SCATTER) return comm_hier_reduce_scatter(h, send, recv, count, t, COMM_SUM);
    return comm_hier_all_gather(h, send, recv, count, t);
}
