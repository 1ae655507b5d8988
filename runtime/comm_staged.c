// Collectives on device memory through a host bounce buffer (comm_staged.h).
//
// Ordering: a staged call first waits for the whole device (the buffer may
// have been written by a kernel on any stream), copies in, runs the inner
// call, copies out and waits again (the next kernel, on any stream, may read
// the result). On the CPU backend the waits and copies are plain memcpy.
#include <string.h>

#include "runtime/comm_staged.h"

enum { ERR_STAGED_P2P = -101, ERR_STAGED_NOMEM = -102 };

static const CommBackend *inner;
static Backend *be;
static char *bounce;
static size_t bounce_bytes;
static long long staged;
static CommBackend wrapper;

// Every staged nonblocking call has completed when it returns: they all hand
// back this one request, which wait and test recognise and release as a no-op.
static char done_token;
#define DONE ((CommRequest *)&done_token)

static int on_device(const void *p) { return p && be->is_device_memory && be->is_device_memory(be, p); }

static int grow(size_t bytes) {
    if (bytes <= bounce_bytes) return 0;
    size_t want = (bytes + (1u << 20) - 1) / (1u << 20) * (1u << 20);  // whole MiB: fewer regrowths
    if (bounce) be->free_pinned(be, bounce);
    bounce = be->alloc_pinned(be, want);
    bounce_bytes = bounce ? want : 0;
    return bounce ? 0 : ERR_STAGED_NOMEM;
}

// the bounce buffer's bytes from src (device or host) / to dst
static void fill(void *dst, const void *src, size_t n) {
    if (on_device(src)) be->copy_d2h(be, dst, src, n, NULL);
    else memmove(dst, src, n);
}
static void drain(void *dst, const void *src, size_t n) {
    if (on_device(dst)) be->copy_h2d(be, dst, src, n, NULL);
    else memmove(dst, src, n);
}

// starts a staged call: room for `bytes`, and every kernel that may have
// written the buffers has finished
static int begin(size_t bytes) {
    int rc = grow(bytes);
    if (rc) return rc;
    be->synchronize(be);
    staged++;
    return 0;
}

static int staged_all_reduce(const void *send, void *recv, size_t count, MistDtype t, CommOp op, CommGroup *g) {
    if (!on_device(send) && !on_device(recv)) return inner->all_reduce(send, recv, count, t, op, g);
    size_t bytes = count * mist_dtype_size(t);
    int rc = begin(bytes);
    if (rc) return rc;
    fill(bounce, send, bytes);
    be->synchronize(be);
    if ((rc = inner->all_reduce(bounce, bounce, count, t, op, g))) return rc;
    drain(recv, bounce, bytes);
    be->synchronize(be);
    return 0;
}

// send: size blocks of count; the reduced block of this rank goes to recv
static int staged_reduce_scatter(const void *send, void *recv, size_t count, MistDtype t, CommOp op, CommGroup *g) {
    if (!on_device(send) && !on_device(recv)) return inner->reduce_scatter(send, recv, count, t, op, g);
    size_t block = count * mist_dtype_size(t), mine = (size_t)inner->group_rank(g) * block;
    int rc = begin(block * (size_t)inner->group_size(g));
    if (rc) return rc;
    fill(bounce, send, block * (size_t)inner->group_size(g));
    be->synchronize(be);
    if ((rc = inner->reduce_scatter(bounce, bounce + mine, count, t, op, g))) return rc;  // in place
    drain(recv, bounce + mine, block);
    be->synchronize(be);
    return 0;
}

static int staged_all_gather(const void *send, void *recv, size_t count, MistDtype t, CommGroup *g) {
    if (!on_device(send) && !on_device(recv)) return inner->all_gather(send, recv, count, t, g);
    size_t block = count * mist_dtype_size(t), whole = block * (size_t)inner->group_size(g);
    size_t mine = (size_t)inner->group_rank(g) * block;
    int rc = begin(whole);
    if (rc) return rc;
    fill(bounce + mine, send, block);
    be->synchronize(be);
    if ((rc = inner->all_gather(bounce + mine, bounce, count, t, g))) return rc;  // in place
    drain(recv, bounce, whole);
    be->synchronize(be);
    return 0;
}

static int staged_broadcast(void *buf, size_t count, MistDtype t, int root, CommGroup *g) {
    if (!on_device(buf)) return inner->broadcast(buf, count, t, root, g);
    size_t bytes = count * mist_dtype_size(t);
    int rc = begin(bytes);
    if (rc) return rc;
    if (inner->group_rank(g) == root) fill(bounce, buf, bytes);
    be->synchronize(be);
    if ((rc = inner->broadcast(bounce, count, t, root, g))) return rc;
    drain(buf, bounce, bytes);
    be->synchronize(be);
    return 0;
}

// ---- nonblocking forms: staged ones complete now ------------------------------

static int staged_iall_reduce(const void *send, void *recv, size_t count, MistDtype t, CommOp op, CommGroup *g,
                              CommRequest **req) {
    if (!on_device(send) && !on_device(recv)) return inner->iall_reduce(send, recv, count, t, op, g, req);
    *req = NULL;
    int rc = staged_all_reduce(send, recv, count, t, op, g);
    if (!rc) *req = DONE;
    return rc;
}

static int staged_ireduce_scatter(const void *send, void *recv, size_t count, MistDtype t, CommOp op, CommGroup *g,
                                  CommRequest **req) {
    if (!on_device(send) && !on_device(recv)) return inner->ireduce_scatter(send, recv, count, t, op, g, req);
    *req = NULL;
    int rc = staged_reduce_scatter(send, recv, count, t, op, g);
    if (!rc) *req = DONE;
    return rc;
}

static int staged_iall_gather(const void *send, void *recv, size_t count, MistDtype t, CommGroup *g,
                              CommRequest **req) {
    if (!on_device(send) && !on_device(recv)) return inner->iall_gather(send, recv, count, t, g, req);
    *req = NULL;
    int rc = staged_all_gather(send, recv, count, t, g);
    if (!rc) *req = DONE;
    return rc;
}

static int staged_ibroadcast(void *buf, size_t count, MistDtype t, int root, CommGroup *g, CommRequest **req) {
    if (!on_device(buf)) return inner->ibroadcast(buf, count, t, root, g, req);
    *req = NULL;
    int rc = staged_broadcast(buf, count, t, root, g);
    if (!rc) *req = DONE;
    return rc;
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

static int staged_wait(CommRequest *req) { return req == DONE ? 0 : inner->wait(req); }
static int staged_test(CommRequest *req, int *done) {
    if (req != DONE) return inner->test(req, done);
    *done = 1;
    return 0;
}

static void staged_error_string(int code, char *buf, size_t len) {
    if (code == ERR_STAGED_P2P)
        snprintf(buf, len, "a point-to-point message of device memory: the staged comm backend (no NCCL) moves "
                           "device memory in collectives only; send a host buffer");
    else if (code == ERR_STAGED_NOMEM)
        snprintf(buf, len, "out of pinned host memory for the staging buffer (%zu bytes held)", bounce_bytes);
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

size_t comm_staged_host_bytes(void) { return bounce_bytes; }
long long comm_staged_calls(void) { return staged; }

void comm_staged_release(void) {
    if (bounce) be->free_pinned(be, bounce);
    bounce = NULL, bounce_bytes = 0;
}
