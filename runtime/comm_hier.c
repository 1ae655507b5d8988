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
// It moves count elements per rank: per node at most g*count, 1/(n-1) of the
// (n-1)/n * P*count the inter level moves (docs/paro.md prices it). All-gather runs the same steps backwards.
#include "runtime/comm_hier.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "planner/cost_terms.h"

#define HIER_TAG 0x4849  // "HI": the permutation's messages

// One hierarchical operation in flight: the list of its sub-operations (each
// a backend collective or the permutation's message pair, on one of the three
// groups), started strictly in list order -- every rank then issues the same
// sequence on each group, as the backends require -- each once the one it
// depends on has completed. test() and wait() move it along.
typedef enum { SUB_RS, SUB_AR, SUB_AG, SUB_P2P } SubKind;
typedef struct {
    SubKind kind;
    CommGroup *g;
    const void *send;
    void *recv;
    size_t count;
    int to, from;          // SUB_P2P: send `send` to rank `to`, receive `recv` from `from` (group ranks)
    int dep;               // the sub-operation that must complete before this one starts (-1: none)
    CommRequest *req[2];   // in flight
    int done;
} HierSub;

#define HIER_MAX_SUBS (3 * COST_HIER_MAX_CHUNKS + 1)
#define HIER_MAX_OPS 32  // operations in flight at once (beyond: a new one first finishes those in flight)

typedef struct {
    int used;
    MistDtype t;
    CommOp op;
    int n, next, ndone;  // sub-operations: in all, started, completed
    HierSub sub[HIER_MAX_SUBS];
} HierOp;

// Operations in flight start their sub-operations in one global order: all of
// an earlier operation's before any of a later one's. Progress depends on
// timing, which differs from rank to rank; the order then does not, so every
// group sees the same sequence of collectives on every rank.

struct CommHier {
    const CommBackend *c;
    CommGroup *group;         // the caller's (not owned)
    CommGroup *whole;         // a copy of it for the flat parts and the messages: the caller's own
                              // collectives on `group` keep their order whatever runs here
    CommGroup *intra, *inter;
    int size, rank;   // in group
    int n, g;         // nodes, ranks per node
    int node, local;  // this rank's N (its rank in inter) and l (its rank in intra)
    HierOp ops[HIER_MAX_OPS];
    int fifo[HIER_MAX_OPS], nfifo;  // operations in flight, oldest first (indices into ops)
};

int comm_hier_nodes(const CommHier *h) { return h->n; }
int comm_hier_per_node(const CommHier *h) { return h->g; }
int comm_hier_groups(const CommHier *h, CommGroup *flat, CommGroup **out) {
    out[0] = h ? h->intra : flat, out[1] = h ? h->inter : flat, out[2] = h ? h->whole : flat;
    return 3;
}

void comm_hier_free(CommHier *h) {
    if (!h) return;
    if (h->whole) h->c->group_free(h->c, h->whole);
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
    if (!rc) rc = c->group_split(c, group, 0, h->rank, &h->whole);
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

static HierSub *add(HierOp *q, SubKind kind, CommGroup *g, const void *send, void *recv, size_t count, int dep) {
    HierSub *s = &q->sub[q->n++];
    *s = (HierSub){.kind = kind, .g = g, .send = send, .recv = recv, .count = count, .dep = dep};
    return s;
}

// ---- the operations as lists of sub-operations

// All-reduce of count elements: the first g*pieces in `chunks` chunks, the
// last count mod g (fewer than g) flat on the whole group, first. Chunk j
// covers pieces [off_j, off_j + p_j) of each of the g local parts of the
// chunk: elements [g*off_j, g*(off_j+p_j)); its steps: intra reduce-scatter
// RS_j (send -> this rank's piece of recv; in place when send == recv), inter
// all-reduce AR_j of that piece, intra all-gather AG_j. List order RS_0, RS_1,
// AR_0, AG_0, RS_2, AR_1, AG_1, ...: RS_{j+1} runs on the node's links while
// AR_j runs on the network (HO-Ring).
static void build_all_reduce(CommHier *h, HierOp *q, const void *send, void *recv, size_t count, int chunks) {
    MistDtype t = q->t;
    size_t g = (size_t)h->g, l = (size_t)h->local, pieces = count / g, tail = count - g * pieces;
    if (tail) add(q, SUB_AR, h->whole, at(send, g * pieces, t), at(recv, g * pieces, t), tail, -1);
    if (pieces == 0) return;
    if (chunks == COMM_HIER_AUTO) chunks = cost_hier_chunks((double)(g * pieces * mist_dtype_size(t)));
    if (chunks < 1) chunks = 1;
    if (chunks > COST_HIER_MAX_CHUNKS) chunks = COST_HIER_MAX_CHUNKS;
    if ((size_t)chunks > pieces) chunks = (int)pieces;
    size_t off[COST_HIER_MAX_CHUNKS + 1];
    for (int j = 0; j <= chunks; j++) off[j] = pieces * (size_t)j / (size_t)chunks;
    int rs[COST_HIER_MAX_CHUNKS];
    for (int j = 0; j <= chunks; j++) {
        if (j < chunks) {
            size_t p = off[j + 1] - off[j], base = g * off[j];
            rs[j] = q->n;
            add(q, SUB_RS, h->intra, at(send, base, t), at(recv, base + l * p, t), p, -1);
        }
        if (j == 0) continue;
        int i = j - 1;
        size_t p = off[i + 1] - off[i], mine = g * off[i] + l * p;
        add(q, SUB_AR, h->inter, at(recv, mine, t), at(recv, mine, t), p, rs[i]);
        add(q, SUB_AG, h->intra, at(recv, mine, t), at(recv, g * off[i], t), p, q->n - 1);
    }
}

// The permutation between the levels: rank r holds block `have` (super-block
// order: s = l*n + N) at position s, and block `want` arrives from the rank
// that has it. fwd = 1 (reduce-scatter): send block s to rank s, receive block
// r from the rank whose super-block index is r. fwd = 0 (all-gather): send
// block r to that rank, receive block s from rank s. Returns the sub-operation
// (-1: this rank keeps its block, r == s).
static int add_permute(CommHier *h, HierOp *q, void *buf, size_t count, int fwd, int dep) {
    int r = h->rank, s = h->local * h->n + h->node;  // s: this rank's super-block index
    if (r == s) return dep;
    int other = (r % h->n) * h->g + r / h->n;  // the rank whose super-block index is r
    int out = fwd ? s : r, in = fwd ? r : s;   // block sent, block received (positions in buf)
    HierSub *m = add(q, SUB_P2P, h->whole, at(buf, (size_t)out * count, q->t), at(buf, (size_t)in * count, q->t),
                     count, dep);
    m->to = fwd ? s : other, m->from = fwd ? other : s;
    return q->n - 1;
}

// Reduce-scatter in place: intra RS of super-blocks, inter RS of this rank's, the message.
static void build_reduce_scatter(CommHier *h, HierOp *q, const void *send, void *recv, size_t count) {
    if (recv != at(send, (size_t)h->rank * count, q->t)) {  // not in place: no room for the levels
        add(q, SUB_RS, h->whole, send, recv, count, -1);
        return;
    }
    void *buf = (void *)send;
    size_t sb = (size_t)h->n * count;  // super-block
    char *mine = at(buf, (size_t)h->local * sb, q->t);
    add(q, SUB_RS, h->intra, buf, mine, sb, -1);
    add(q, SUB_RS, h->inter, mine, at(mine, (size_t)h->node * count, q->t), count, 0);
    add_permute(h, q, buf, count, 1, 1);
}

// All-gather in place: the message, inter AG of this rank's super-block, intra AG.
static void build_all_gather(CommHier *h, HierOp *q, const void *send, void *recv, size_t count) {
    if (send != at(recv, (size_t)h->rank * count, q->t)) {
        add(q, SUB_AG, h->whole, send, recv, count, -1);
        return;
    }
    size_t sb = (size_t)h->n * count;
    char *mine = at(recv, (size_t)h->local * sb, q->t);
    int dep = add_permute(h, q, recv, count, 0, -1);
    add(q, SUB_AG, h->inter, at(mine, (size_t)h->node * count, q->t), mine, count, dep);
    add(q, SUB_AG, h->intra, mine, recv, sb, q->n - 1);
}

// ---- progress

static int sub_start(CommHier *h, HierOp *q, HierSub *s) {
    const CommBackend *c = h->c;
    if (s->kind == SUB_RS) return c->ireduce_scatter(c, s->send, s->recv, s->count, q->t, q->op, s->g, &s->req[0]);
    if (s->kind == SUB_AR) return c->iall_reduce(c, s->send, s->recv, s->count, q->t, q->op, s->g, &s->req[0]);
    if (s->kind == SUB_AG) return c->iall_gather(c, s->send, s->recv, s->count, q->t, s->g, &s->req[0]);
    int rc = c->p2p_group ? c->p2p_group(c, 1) : 0;  // both messages start together (NCCL)
    if (!rc) rc = c->irecv(c, s->recv, s->count, q->t, s->from, HIER_TAG, s->g, &s->req[0]);
    if (!rc) rc = c->isend(c, s->send, s->count, q->t, s->to, HIER_TAG, s->g, &s->req[1]);
    if (c->p2p_group) {
        int rc2 = c->p2p_group(c, 0);
        if (!rc) rc = rc2;
    }
    return rc;
}

// Tests (block = 0) or waits (block = 1) the requests of a started sub-operation.
static int sub_poll(CommHier *h, HierOp *q, HierSub *s, int block) {
    const CommBackend *c = h->c;
    for (int i = 0; i < 2; i++) {
        if (!s->req[i]) continue;
        int done = 0, rc = block ? c->wait(c, s->req[i]) : c->test(c, s->req[i], &done);
        if (block || done || rc) s->req[i] = NULL;
        if (rc) return rc;
    }
    if (!s->req[0] && !s->req[1] && !s->done) s->done = 1, q->ndone++;
    return 0;
}

// One pass over the operations in flight, oldest first: each starts what it
// may (in list order, once its dependency has completed, and only when every
// older operation has started all of its own), then its running sub-operations
// are tested. *progressed: something started or completed.
static int pass(CommHier *h, int *progressed) {
    int rc = 0, older_started = 1;
    *progressed = 0;
    for (int f = 0; f < h->nfifo && !rc; f++) {
        HierOp *q = &h->ops[h->fifo[f]];
        while (older_started && q->next < q->n) {
            HierSub *s = &q->sub[q->next];
            if (s->dep >= 0 && !q->sub[s->dep].done) break;
            q->next++;
            *progressed = 1;
            if ((rc = sub_start(h, q, s))) return rc;
        }
        older_started = older_started && q->next == q->n;
        for (int i = 0; i < q->next && !rc; i++)
            if (!q->sub[i].done) {
                rc = sub_poll(h, q, &q->sub[i], 0);
                *progressed |= q->sub[i].done;
            }
    }
    return rc;
}

// The oldest started sub-operation not yet completed, waited on (every rank
// started it, or will: the order is global). 0 when none runs.
static int wait_oldest(CommHier *h) {
    for (int f = 0; f < h->nfifo; f++) {
        HierOp *q = &h->ops[h->fifo[f]];
        for (int i = 0; i < q->next; i++)
            if (!q->sub[i].done) return sub_poll(h, q, &q->sub[i], 1);
    }
    return 0;
}

static void release(CommHier *h, HierOp *q) {
    int k = (int)(q - h->ops), f = 0;
    while (f < h->nfifo && h->fifo[f] != k) f++;
    for (; f + 1 < h->nfifo; f++) h->fifo[f] = h->fifo[f + 1];
    if (h->nfifo > 0) h->nfifo--;
    q->used = 0;
}

// Moves everything along until q has completed (block = 1) or once (block = 0,
// repeating passes while they make progress). *finished = 1 when q has completed
// (it is then released) or failed (the caller ends the job).
static int advance(CommHier *h, HierOp *q, int block, int *finished) {
    int rc = 0, progressed = 1;
    while (!rc && q->ndone < q->n) {
        rc = pass(h, &progressed);
        if (rc || q->ndone == q->n) break;
        if (!progressed) {
            if (!block) break;
            rc = wait_oldest(h);
        }
    }
    *finished = rc || q->ndone == q->n;
    if (*finished) release(h, q);
    return rc;
}

static HierOp *owned(CommHier *h, CommRequest *req) {
    if (!h || (char *)req < (char *)h->ops || (char *)req >= (char *)(h->ops + HIER_MAX_OPS)) return NULL;
    return (HierOp *)req;
}

int comm_hier_wait(CommHier *h, const CommBackend *c, CommRequest *req) {
    HierOp *q = owned(h, req);
    int finished;
    return q ? advance(h, q, 1, &finished) : c->wait(c, req);
}

int comm_hier_test(CommHier *h, const CommBackend *c, CommRequest *req, int *done) {
    HierOp *q = owned(h, req);
    return q ? advance(h, q, 0, done) : c->test(c, req, done);
}

int comm_hier_istart(CommHier *h, CollKind k, const void *send, void *recv, size_t count, MistDtype t, CommOp op,
                     int chunks, CommRequest **req) {
    *req = NULL;
    int slot = -1, rc = 0;
    for (int i = 0; i < HIER_MAX_OPS && slot < 0; i++)
        if (!h->ops[i].used) slot = i;
    if (slot < 0) {  // every slot held: finish everything in flight first (their owners then find them done)
        for (int f = 0; f < h->nfifo && !rc; f++) {
            HierOp *o = &h->ops[h->fifo[f]];
            while (!rc && o->ndone < o->n) {
                int progressed;
                rc = pass(h, &progressed);
                if (!rc && !progressed) rc = wait_oldest(h);
            }
        }
        if (rc) return rc;
    }
    HierOp spare, *q = slot >= 0 ? &h->ops[slot] : &spare;
    q->used = 1, q->t = t, q->op = op, q->n = q->next = q->ndone = 0;
    if (k == COLL_ALL_REDUCE) build_all_reduce(h, q, send, recv, count, chunks);
    else if (k == COLL_REDUCE_SCATTER) build_reduce_scatter(h, q, send, recv, count);
    else build_all_gather(h, q, send, recv, count);
    if (slot < 0) {  // nothing else in flight is left to start: run it here
        for (int i = 0; i < q->n && !rc; i++) {
            rc = sub_start(h, q, &q->sub[i]);  // the list order has each dependency first
            if (!rc) rc = sub_poll(h, q, &q->sub[i], 1);
        }
        return rc;
    }
    h->fifo[h->nfifo++] = slot;
    int finished = 0;
    rc = advance(h, q, 0, &finished);
    if (!finished) *req = (CommRequest *)q;
    return rc;
}

static int blocking(CommHier *h, CollKind k, const void *send, void *recv, size_t count, MistDtype t, CommOp op,
                    int chunks) {
    CommRequest *req = NULL;
    int rc = comm_hier_istart(h, k, send, recv, count, t, op, chunks, &req);
    return rc || !req ? rc : comm_hier_wait(h, h->c, req);
}

int comm_hier_all_reduce(CommHier *h, const void *send, void *recv, size_t count, MistDtype t, CommOp op,
                         int chunks) {
    return blocking(h, COLL_ALL_REDUCE, send, recv, count, t, op, chunks);
}

int comm_hier_reduce_scatter(CommHier *h, const void *send, void *recv, size_t count, MistDtype t, CommOp op) {
    return blocking(h, COLL_REDUCE_SCATTER, send, recv, count, t, op, 1);
}

int comm_hier_all_gather(CommHier *h, const void *send, void *recv, size_t count, MistDtype t) {
    return blocking(h, COLL_ALL_GATHER, send, recv, count, t, COMM_SUM, 1);
}

int comm_hier_start(CommHier *h, const CommBackend *c, CollKind k, const void *send, void *recv, size_t count,
                    MistDtype t, CommGroup *group, CommRequest **req) {
    if (!h) {
        if (k == COLL_ALL_REDUCE) return c->iall_reduce(c, send, recv, count, t, COMM_SUM, group, req);
        if (k == COLL_REDUCE_SCATTER) return c->ireduce_scatter(c, send, recv, count, t, COMM_SUM, group, req);
        return c->iall_gather(c, send, recv, count, t, group, req);
    }
    return comm_hier_istart(h, k, send, recv, count, t, COMM_SUM, COMM_HIER_AUTO, req);
}
