// Collectives on device memory through host bounce buffers (comm_staged.h).
//
// Ordering: starting a staged call waits for the whole device (the buffer may
// have been written by a kernel on any stream), copies in and starts the
// inner call on the bounce buffer; completing it (wait, or test reporting
// done) copies the result out and waits again (the next kernel, on any
// stream, may read it). In between the GPU computes while the inner call
// moves along (MPI progresses it inside the runtime's test / wait calls).
// On the CPU backend the waits and copies are plain memcpy.
#include <stdlib.h>
#include <string.h>

#include "runtime/comm_staged.h"
#include "runtime/comm_wrap.h"

enum { ERR_STAGED_NOMEM = -102, ERR_STAGED_POOL = -103 };

// One staged operation in flight: its own pinned bounce buffer (kept and reused
// by later operations, grown when one needs more), the inner backend's request
// on it, and where its result goes when it completes. A staged request handed
// to the caller is a pointer to its slot; wait/test tell it from the inner
// backend's requests by address.
typedef struct {
    int in_use;
    CommRequest *inner;
    char *buf;
    size_t cap;
    void *dst;          // the result's destination (device or host); NULL: none (nothing to copy back)
    size_t off, bytes;  // ... from buf + off, this many bytes
} Slot;

// One wrapper: the backend it hands out, whose ctx points here.
typedef struct {
    CommWrap wrap;       // the inner backend (first: comm_wrap.h)
    CommBackend iface;   // what comm_staged_new returns
    Backend *be;         // whose memory is staged, and whose pinned memory stages it
    long long staged;    // calls staged so far
    Slot slots[COMM_MAX_REQUESTS];
    int slots_used;  // slots [0, slots_used) have been handed out at least once: the only ones scanned
} Staged;

static Staged *staged_of(const CommBackend *self) { return self->ctx; }

static int on_device(const Staged *x, const void *p) {
    Backend *be = x->be;
    return p && be->is_device_memory && be->is_device_memory(be, p);
}
static int is_slot(const Staged *x, const CommRequest *r) {
    return (const char *)r >= (const char *)x->slots && (const char *)r < (const char *)(x->slots + x->slots_used);
}

// a free slot whose buffer holds `bytes`: the smallest that does, else the
// largest free one (a never-used one when none is free) grown to it, in whole
// MiB (fewer regrowths; a 0-byte call gets one too); NULL with *rc set
static Slot *take(Staged *x, size_t bytes, int *rc) {
    Backend *be = x->be;
    Slot *fit = NULL, *big = NULL;
    for (int i = 0; i < x->slots_used; i++) {
        Slot *s = &x->slots[i];
        if (s->in_use) continue;
        if (s->cap >= bytes && (!fit || s->cap < fit->cap)) fit = s;
        if (!big || s->cap > big->cap) big = s;
    }
    if (!fit && !big) {
        if (x->slots_used == COMM_MAX_REQUESTS) {
            *rc = ERR_STAGED_POOL;
            return NULL;
        }
        big = &x->slots[x->slots_used++];
    }
    if (!fit) {
        size_t want = (bytes / (1u << 20) + 1) * (1u << 20);
        if (big->buf) be->free_pinned(be, big->buf);
        big->buf = be->alloc_pinned(be, want);
        big->cap = big->buf ? want : 0;
        if (!big->buf) {
            *rc = ERR_STAGED_NOMEM;
            return NULL;
        }
        fit = big;
    }
    fit->in_use = 1, fit->inner = NULL, fit->dst = NULL;
    return fit;
}

// `bytes` of src (device or host) into the slot's buffer at `at`, after every
// kernel that may have written src (on any stream) has finished
static void fill(const Staged *x, Slot *s, size_t at, const void *src, size_t bytes) {
    Backend *be = x->be;
    be->synchronize(be);
    if (on_device(x, src)) be->copy_d2h(be, s->buf + at, src, bytes, NULL);
    else memmove(s->buf + at, src, bytes);
    be->synchronize(be);
}

// the inner call on the slot's buffer has been started (rc = its status): hand
// back the slot, or release it on failure
static int started(Staged *x, Slot *s, int rc, void *dst, size_t off, size_t bytes, CommRequest **req) {
    if (rc) {
        s->in_use = 0;
        *req = NULL;
        return rc;
    }
    s->dst = dst, s->off = off, s->bytes = bytes;
    x->staged++;
    *req = (CommRequest *)s;
    return 0;
}

// the inner request has completed: the result to its destination (the next
// kernel, on any stream, may read it), the slot free again
static void finish(const Staged *x, Slot *s) {
    Backend *be = x->be;
    if (s->dst) {
        if (on_device(x, s->dst)) be->copy_h2d(be, s->dst, s->buf + s->off, s->bytes, NULL);
        else memmove(s->dst, s->buf + s->off, s->bytes);
        be->synchronize(be);
    }
    s->in_use = 0;
}

static int staged_wait(const CommBackend *self, CommRequest *req) {
    Staged *x = staged_of(self);
    const CommBackend *inner = x->wrap.inner;
    if (!is_slot(x, req)) return inner->wait(inner, req);
    Slot *s = (Slot *)req;
    int rc = inner->wait(inner, s->inner);
    if (rc == 0) finish(x, s);
    else s->in_use = 0;
    return rc;
}

static int staged_test(const CommBackend *self, CommRequest *req, int *done) {
    Staged *x = staged_of(self);
    const CommBackend *inner = x->wrap.inner;
    if (!is_slot(x, req)) return inner->test(inner, req, done);
    Slot *s = (Slot *)req;
    int rc = inner->test(inner, s->inner, done);
    if (rc) s->in_use = 0, *done = 1;
    else if (*done) finish(x, s);
    return rc;
}

// ---- collectives: started on the slot's buffer, completed by wait / test ----------

static int staged_iall_reduce(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                              CommOp op, CommGroup *g, CommRequest **req) {
    Staged *x = staged_of(self);
    const CommBackend *inner = x->wrap.inner;
    if (!on_device(x, send) && !on_device(x, recv))
        return inner->iall_reduce(inner, send, recv, count, t, op, g, req);
    size_t bytes = count * mist_dtype_size(t);
    int rc = 0;
    Slot *s = take(x, bytes, &rc);
    if (!s) return rc;
    fill(x, s, 0, send, bytes);
    rc = inner->iall_reduce(inner, s->buf, s->buf, count, t, op, g, &s->inner);  // in place
    return started(x, s, rc, recv, 0, bytes, req);
}

// send: size blocks of count; the reduced block of this rank goes to recv
static int staged_ireduce_scatter(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                                  CommOp op, CommGroup *g, CommRequest **req) {
    Staged *x = staged_of(self);
    const CommBackend *inner = x->wrap.inner;
    if (!on_device(x, send) && !on_device(x, recv))
        return inner->ireduce_scatter(inner, send, recv, count, t, op, g, req);
    size_t block = count * mist_dtype_size(t), mine = (size_t)inner->group_rank(inner, g) * block;
    size_t whole = block * (size_t)inner->group_size(inner, g);
    int rc = 0;
    Slot *s = take(x, whole, &rc);
    if (!s) return rc;
    fill(x, s, 0, send, whole);
    rc = inner->ireduce_scatter(inner, s->buf, s->buf + mine, count, t, op, g, &s->inner);  // in place
    return started(x, s, rc, recv, mine, block, req);
}

static int staged_iall_gather(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                              CommGroup *g, CommRequest **req) {
    Staged *x = staged_of(self);
    const CommBackend *inner = x->wrap.inner;
    if (!on_device(x, send) && !on_device(x, recv))
        return inner->iall_gather(inner, send, recv, count, t, g, req);
    size_t block = count * mist_dtype_size(t), whole = block * (size_t)inner->group_size(inner, g);
    size_t mine = (size_t)inner->group_rank(inner, g) * block;
    int rc = 0;
    Slot *s = take(x, whole, &rc);
    if (!s) return rc;
    fill(x, s, mine, send, block);
    rc = inner->iall_gather(inner, s->buf + mine, s->buf, count, t, g, &s->inner);  // in place
    return started(x, s, rc, recv, 0, whole, req);
}

static int staged_ibroadcast(const CommBackend *self, void *buf, size_t count, MistDtype t, int root, CommGroup *g,
                             CommRequest **req) {
    Staged *x = staged_of(self);
    const CommBackend *inner = x->wrap.inner;
    if (!on_device(x, buf)) return inner->ibroadcast(inner, buf, count, t, root, g, req);
    size_t bytes = count * mist_dtype_size(t);
    int rc = 0;
    Slot *s = take(x, bytes, &rc);
    if (!s) return rc;
    if (inner->group_rank(inner, g) == root) fill(x, s, 0, buf, bytes);
    rc = inner->ibroadcast(inner, s->buf, count, t, root, g, &s->inner);
    return started(x, s, rc, buf, 0, bytes, req);
}

// the blocking forms: start, then wait
static int staged_all_reduce(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                             CommOp op, CommGroup *g) {
    CommRequest *req = NULL;
    int rc = staged_iall_reduce(self, send, recv, count, t, op, g, &req);
    return rc ? rc : staged_wait(self, req);
}
static int staged_reduce_scatter(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                                 CommOp op, CommGroup *g) {
    CommRequest *req = NULL;
    int rc = staged_ireduce_scatter(self, send, recv, count, t, op, g, &req);
    return rc ? rc : staged_wait(self, req);
}
static int staged_all_gather(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                             CommGroup *g) {
    CommRequest *req = NULL;
    int rc = staged_iall_gather(self, send, recv, count, t, g, &req);
    return rc ? rc : staged_wait(self, req);
}
static int staged_broadcast(const CommBackend *self, void *buf, size_t count, MistDtype t, int root, CommGroup *g) {
    CommRequest *req = NULL;
    int rc = staged_ibroadcast(self, buf, count, t, root, g, &req);
    return rc ? rc : staged_wait(self, req);
}

// ---- point to point: a device buffer goes through the slot's --------------------
// A send copies the message to the host when it starts (waiting for the device),
// a receive copies it to the device when it completes: the pipeline's price of a
// message on this backend (planner/schedule.c) holds both copies.

static int staged_p2p(const CommBackend *self, int send, void *buf, size_t count, MistDtype t, int peer, int tag,
                      CommGroup *g, CommRequest **req) {
    Staged *x = staged_of(self);
    const CommBackend *inner = x->wrap.inner;
    if (!on_device(x, buf))
        return send ? inner->isend(inner, buf, count, t, peer, tag, g, req)
                    : inner->irecv(inner, buf, count, t, peer, tag, g, req);
    size_t bytes = count * mist_dtype_size(t);
    int rc = 0;
    Slot *s = take(x, bytes, &rc);
    if (!s) return rc;
    if (send) fill(x, s, 0, buf, bytes);
    rc = send ? inner->isend(inner, s->buf, count, t, peer, tag, g, &s->inner)
              : inner->irecv(inner, s->buf, count, t, peer, tag, g, &s->inner);
    return started(x, s, rc, send ? NULL : buf, 0, send ? 0 : bytes, req);  // a receive lands in buf
}
static int staged_isend(const CommBackend *self, const void *buf, size_t count, MistDtype t, int peer, int tag,
                        CommGroup *g, CommRequest **req) {
    return staged_p2p(self, 1, (void *)buf, count, t, peer, tag, g, req);
}
static int staged_irecv(const CommBackend *self, void *buf, size_t count, MistDtype t, int peer, int tag,
                        CommGroup *g, CommRequest **req) {
    return staged_p2p(self, 0, buf, count, t, peer, tag, g, req);
}
static int staged_send(const CommBackend *self, const void *buf, size_t count, MistDtype t, int peer, int tag,
                       CommGroup *g) {
    CommRequest *req = NULL;
    int rc = staged_isend(self, buf, count, t, peer, tag, g, &req);
    return rc ? rc : staged_wait(self, req);
}
static int staged_recv(const CommBackend *self, void *buf, size_t count, MistDtype t, int peer, int tag,
                       CommGroup *g) {
    CommRequest *req = NULL;
    int rc = staged_irecv(self, buf, count, t, peer, tag, g, &req);
    return rc ? rc : staged_wait(self, req);
}

static void staged_error_string(const CommBackend *self, int code, char *buf, size_t len) {
    const CommBackend *inner = comm_wrap_inner(self);
    if (code == ERR_STAGED_NOMEM)
        snprintf(buf, len, "out of pinned host memory for a staging buffer (%zu bytes held)",
                 comm_staged_host_bytes(self));
    else if (code == ERR_STAGED_POOL)
        snprintf(buf, len, "more than %d staged operations in flight (wait on some first)", COMM_MAX_REQUESTS);
    else inner->error_string(inner, code, buf, len);
}

const CommBackend *comm_staged_new(const CommBackend *inner, Backend *be) {
    Staged *x = calloc(1, sizeof *x);
    if (!x) return NULL;
    x->be = be;
    CommBackend *w = &x->iface;
    // groups, barriers, errors, abort and hang detection: the inner backend's
    comm_wrap_init(w, "staged", inner, &x->wrap);
    w->all_reduce = staged_all_reduce;
    w->reduce_scatter = staged_reduce_scatter;
    w->all_gather = staged_all_gather;
    w->broadcast = staged_broadcast;
    w->send = staged_send;
    w->recv = staged_recv;
    w->iall_reduce = staged_iall_reduce;
    w->ireduce_scatter = staged_ireduce_scatter;
    w->iall_gather = staged_iall_gather;
    w->ibroadcast = staged_ibroadcast;
    w->isend = staged_isend;
    w->irecv = staged_irecv;
    w->wait = staged_wait;
    w->test = staged_test;
    w->error_string = staged_error_string;
    return w;
}

size_t comm_staged_host_bytes(const CommBackend *staged) {
    const Staged *x = staged_of(staged);
    size_t total = 0;
    for (int i = 0; i < x->slots_used; i++) total += x->slots[i].cap;
    return total;
}
long long comm_staged_calls(const CommBackend *staged) { return staged_of(staged)->staged; }

void comm_staged_free(const CommBackend *staged) {
    if (!staged) return;
    Staged *x = staged_of(staged);
    for (int i = 0; i < x->slots_used; i++)
        if (x->slots[i].buf) x->be->free_pinned(x->be, x->slots[i].buf);
    free(x);
}
