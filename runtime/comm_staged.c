// Collectives on device memory through host bounce buffers (comm_staged.h).
//
// Ordering: starting a staged call waits for the whole device (the buffer may
// have been written by a kernel on any stream), copies in and starts the
// inner call on the bounce buffer; completing it (wait, or test reporting
// done) copies the result out and waits again (the next kernel, on any
// stream, may read it). In between the GPU computes while the inner call
// moves along (MPI progresses it inside the runtime's test / wait calls).
// On the CPU backend the waits and copies are plain memcpy.
#include <string.h>

#include "runtime/comm_staged.h"

enum { ERR_STAGED_P2P = -101, ERR_STAGED_NOMEM = -102, ERR_STAGED_POOL = -103 };

static const CommBackend *inner;
static Backend *be;
static long long staged;
static CommBackend wrapper;

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
static Slot slots[COMM_MAX_REQUESTS];
static int slots_used;  // slots [0, slots_used) have been handed out at least once: the only ones scanned

static int on_device(const void *p) { return p && be->is_device_memory && be->is_device_memory(be, p); }
static int is_slot(const CommRequest *r) {
    return (const char *)r >= (const char *)slots && (const char *)r < (const char *)(slots + slots_used);
}

// a free slot whose buffer holds `bytes`: the smallest that does, else the
// largest free one (a never-used one when none is free) grown to it, in whole
// MiB (fewer regrowths; a 0-byte call gets one too); NULL with *rc set
static Slot *take(size_t bytes, int *rc) {
    Slot *fit = NULL, *big = NULL;
    for (int i = 0; i < slots_used; i++) {
        Slot *s = &slots[i];
        if (s->in_use) continue;
        if (s->cap >= bytes && (!fit || s->cap < fit->cap)) fit = s;
        if (!big || s->cap > big->cap) big = s;
    }
    if (!fit && !big) {
        if (slots_used == COMM_MAX_REQUESTS) {
            *rc = ERR_STAGED_POOL;
            return NULL;
        }
        big = &slots[slots_used++];
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
static void fill(Slot *s, size_t at, const void *src, size_t bytes) {
    be->synchronize(be);
    if (on_device(src)) be->copy_d2h(be, s->buf + at, src, bytes, NULL);
    else memmove(s->buf + at, src, bytes);
    be->synchronize(be);
}

// the inner call on the slot's buffer has been started (rc = its status): hand
// back the slot, or release it on failure
static int started(Slot *s, int rc, void *dst, size_t off, size_t bytes, CommRequest **req) {
    if (rc) {
        s->in_use = 0;
        *req = NULL;
        return rc;
    }
    s->dst = dst, s->off = off, s->bytes = bytes;
    staged++;
    *req = (CommRequest *)s;
    return 0;
}

// the inner request has completed: the result to its destination (the next
// kernel, on any stream, may read it), the slot free again
static void finish(Slot *s) {
    if (s->dst) {
        if (on_device(s->dst)) be->copy_h2d(be, s->dst, s->buf + s->off, s->bytes, NULL);
        else memmove(s->dst, s->buf + s->off, s->bytes);
        be->synchronize(be);
    }
    s->in_use = 0;
}

static int staged_wait(CommRequest *req) {
    if (!is_slot(req)) return inner->wait(req);
    Slot *s = (Slot *)req;
    int rc = inner->wait(s->inner);
    if (rc == 0) finish(s);
    else s->in_use = 0;
    return rc;
}

static int staged_test(CommRequest *req, int *done) {
    if (!is_slot(req)) return inner->test(req, done);
    Slot *s = (Slot *)req;
    int rc = inner->test(s->inner, done);
    if (rc) s->in_use = 0, *done = 1;
    else if (*done) finish(s);
    return rc;
}

// ---- collectives: started on the slot's buffer, completed by wait / test ----------

static int staged_iall_reduce(const void *send, void *recv, size_t count, MistDtype t, CommOp op, CommGroup *g,
                              CommRequest **req) {
    if (!on_device(send) && !on_device(recv)) return inner->iall_reduce(send, recv, count, t, op, g, req);
    size_t bytes = count * mist_dtype_size(t);
    int rc = 0;
    Slot *s = take(bytes, &rc);
    if (!s) return rc;
    fill(s, 0, send, bytes);
    return started(s, inner->iall_reduce(s->buf, s->buf, count, t, op, g, &s->inner), recv, 0, bytes, req);
}

// send: size blocks of count; the reduced block of this rank goes to recv
static int staged_ireduce_scatter(const void *send, void *recv, size_t count, MistDtype t, CommOp op, CommGroup *g,
                                  CommRequest **req) {
    if (!on_device(send) && !on_device(recv)) return inner->ireduce_scatter(send, recv, count, t, op, g, req);
    size_t block = count * mist_dtype_size(t), mine = (size_t)inner->group_rank(g) * block;
    size_t whole = block * (size_t)inner->group_size(g);
    int rc = 0;
    Slot *s = take(whole, &rc);
    if (!s) return rc;
    fill(s, 0, send, whole);
    rc = inner->ireduce_scatter(s->buf, s->buf + mine, count, t, op, g, &s->inner);  // in place
    return started(s, rc, recv, mine, block, req);
}

static int staged_iall_gather(const void *send, void *recv, size_t count, MistDtype t, CommGroup *g,
                              CommRequest **req) {
    if (!on_device(send) && !on_device(recv)) return inner->iall_gather(send, recv, count, t, g, req);
    size_t block = count * mist_dtype_size(t), whole = block * (size_t)inner->group_size(g);
    size_t mine = (size_t)inner->group_rank(g) * block;
    int rc = 0;
    Slot *s = take(whole, &rc);
    if (!s) return rc;
    fill(s, mine, send, block);
    rc = inner->iall_gather(s->buf + mine, s->buf, count, t, g, &s->inner);  // in place
    return started(s, rc, recv, 0, whole, req);
}

static int staged_ibroadcast(void *buf, size_t count, MistDtype t, int root, CommGroup *g, CommRequest **req) {
    if (!on_device(buf)) return inner->ibroadcast(buf, count, t, root, g, req);
    size_t bytes = count * mist_dtype_size(t);
    int rc = 0;
    Slot *s = take(bytes, &rc);
    if (!s) return rc;
    if (inner->group_rank(g) == root) fill(s, 0, buf, bytes);
    return started(s, inner->ibroadcast(s->buf, count, t, root, g, &s->inner), buf, 0, bytes, req);
}

// the blocking forms: start, then wait
static int staged_all_reduce(const void *send, void *recv, size_t count, MistDtype t, CommOp op, CommGroup *g) {
    CommRequest *req = NULL;
    int rc = staged_iall_reduce(send, recv, count, t, op, g, &req);
    return rc ? rc : staged_wait(req);
}
static int staged_reduce_scatter(const void *send, void *recv, size_t count, MistDtype t, CommOp op, CommGroup *g) {
    CommRequest *req = NULL;
    int rc = staged_ireduce_scatter(send, recv, count, t, op, g, &req);
    return rc ? rc : staged_wait(req);
}
static int staged_all_gather(const void *send, void *recv, size_t count, MistDtype t, CommGroup *g) {
    CommRequest *req = NULL;
    int rc = staged_iall_gather(send, recv, count, t, g, &req);
    return rc ? rc : staged_wait(req);
}
static int staged_broadcast(void *buf, size_t count, MistDtype t, int root, CommGroup *g) {
    CommRequest *req = NULL;
    int rc = staged_ibroadcast(buf, count, t, root, g, &req);
    return rc ? rc : staged_wait(req);
}

// ---- point to point: host buffers only ----------------------------------------

static int staged_send(const void *buf, size_t count, MistDtype t, int peer, int tag, CommGroup *g) {
    return on_device(buf) ? ERR_STAGED_P2P : inner->send(buf, count, t, peer, tag, g);
}
static int staged_recv(void *buf, size_t count, MistDtype t, int peer, int tag, CommGroup *g) {
    return on_device(buf) ? ERR_STAGED_P2P : inner->recv(buf, count, t, peer, tag, g);
}
static int staged_isend(const void *buf, size_t count, MistDtype t, int peer, int tag, CommGroup *g,
                        CommRequest **req) {
    if (on_device(buf)) {
        *req = NULL;
        return ERR_STAGED_P2P;
    }
    return inner->isend(buf, count, t, peer, tag, g, req);
}
static int staged_irecv(void *buf, size_t count, MistDtype t, int peer, int tag, CommGroup *g, CommRequest **req) {
    if (on_device(buf)) {
        *req = NULL;
        return ERR_STAGED_P2P;
    }
    return inner->irecv(buf, count, t, peer, tag, g, req);
}


static void staged_error_string(int code, char *buf, size_t len) {
    if (code == ERR_STAGED_P2P)
        snprintf(buf, len, "a point-to-point message of device memory: the staged comm backend (no NCCL) moves "
                           "device memory in collectives only; send a host buffer");
    else if (code == ERR_STAGED_NOMEM)
        snprintf(buf, len, "out of pinned host memory for a staging buffer (%zu bytes held)", comm_staged_host_bytes());
    else if (code == ERR_STAGED_POOL)
        snprintf(buf, len, "more than %d staged operations in flight (wait on some first)", COMM_MAX_REQUESTS);
    else inner->error_string(code, buf, len);
}

const CommBackend *comm_staged_backend(const CommBackend *in, Backend *b) {
    inner = in, be = b;
    wrapper = *in;  // groups, barriers, errors, abort and hang detection: the inner backend's
    wrapper.name = "staged";
    wrapper.all_reduce = staged_all_reduce;
    wrapper.reduce_scatter = staged_reduce_scatter;
    wrapper.all_gather = staged_all_gather;
    wrapper.broadcast = staged_broadcast;
    wrapper.send = staged_send;
    wrapper.recv = staged_recv;
    wrapper.iall_reduce = staged_iall_reduce;
    wrapper.ireduce_scatter = staged_ireduce_scatter;
    wrapper.iall_gather = staged_iall_gather;
    wrapper.ibroadcast = staged_ibroadcast;
    wrapper.isend = staged_isend;
    wrapper.irecv = staged_irecv;
    wrapper.wait = staged_wait;
    wrapper.test = staged_test;
    wrapper.error_string = staged_error_string;
    return &wrapper;
}

size_t comm_staged_host_bytes(void) {
    size_t total = 0;
    for (int i = 0; i < slots_used; i++) total += slots[i].cap;
    return total;
}
long long comm_staged_calls(void) { return staged; }

void comm_staged_release(void) {
    for (int i = 0; i < slots_used; i++) {
        if (slots[i].buf) be->free_pinned(be, slots[i].buf);
        slots[i] = (Slot){0};
    }
    slots_used = 0;
}
