// Collectives of device memory on NCCL (comm_nccl.h).
//
// Every NCCL call goes on one stream of ours (ns) after an event recorded on
// the followed stream, then an event recorded on ns marks its end: a request
// is that event. NCCL enqueues and returns, so several collectives can be in
// flight while the GPU computes; wait() polls the event (and NCCL's
// asynchronous error state, and the clock) until it has passed.
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/comm_nccl.h"
#include "runtime/comm_wrap.h"

enum {
    ERR_NCCL_MIXED = -202,  // one buffer on the device, the other on the host
    ERR_NCCL_DTYPE = -203,  // a reduction NCCL (or this interface) does not define
    ERR_NCCL_POOL = -204,
    ERR_NCCL_GROUPS = -205,
    ERR_NCCL_OVERLAP = -206,
    ERR_NCCL_INIT = -207,  // the unique id could not be made on the group's rank 0
    ERR_NCCL_BASE = -300,  // ERR_NCCL_BASE - r: ncclResult_t r from a call
};

// The NCCL communicator of each group that has had a device collective. An
// entry stays where it is until its group is freed (in-flight requests point
// at it); a freed entry (g NULL) is reused.
typedef struct {
    const CommGroup *g;
    ncclComm_t comm;
    int rank, size;
} Link;
#define MAX_LINKS 256

// One operation in flight: the event on ns that marks its end.
typedef struct {
    int in_use;
    BackendEvent *done;
    const char *what;
    size_t count;
    MistDtype t;
    const Link *link;
} Slot;

// One wrapper: the backend it hands out, whose ctx points here.
typedef struct {
    CommWrap wrap;                     // the inner (MPI) backend (first: comm_wrap.h)
    CommBackend iface;                 // what comm_nccl_new returns
    Backend *be;                       // whose device memory NCCL moves
    BackendStream *follow, *ns;        // the followed stream, NCCL's stream
    BackendEvent *entered;             // recorded on `follow` before each call
    long long calls;
    int made;                          // communicators created
    double timeout;
    char context[128];
    ncclResult_t last_result;          // for error_string: the call that failed
    char last_detail[256];
    Link links[MAX_LINKS];
    int num_links;
    Slot slots[COMM_MAX_REQUESTS];
    int slots_used;  // slots [0, slots_used) have an event
    // device messages of the open p2p group (nccl_p2p_group): their end events are
    // recorded after ncclGroupEnd, which is when NCCL enqueues them
    int p2p_open;
    Slot *p2p_pending[COMM_MAX_REQUESTS];
    int p2p_num;
} Nccl;

static Nccl *nccl_of(const CommBackend *self) { return self->ctx; }

static int on_device(const Nccl *x, const void *p) {
    return p && x->be->is_device_memory && x->be->is_device_memory(x->be, p);
}
static int is_slot(const Nccl *x, const CommRequest *r) {
    return (const char *)r >= (const char *)x->slots && (const char *)r < (const char *)(x->slots + x->slots_used);
}
static cudaStream_t stream(const Nccl *x) { return (cudaStream_t)x->be->native_stream(x->be, x->ns); }

static int nccl_rc(Nccl *x, ncclResult_t r, ncclComm_t comm) {
    if (r == ncclSuccess) return 0;
    x->last_result = r;
    const char *detail = comm ? ncclGetLastError(comm) : NULL;
    snprintf(x->last_detail, sizeof x->last_detail, "%s", detail ? detail : "");
    return ERR_NCCL_BASE - (int)r;
}

// The group's link, its communicator created on first use (collective over
// the group: every member is in the same collective call).
static int link_of(Nccl *x, const CommGroup *g, const Link **out) {
    const CommBackend *inner = x->wrap.inner;
    for (int i = 0; i < x->num_links; i++)
        if (x->links[i].g == g) {
            *out = &x->links[i];
            return 0;
        }
    int at = x->num_links;
    for (int i = 0; i < x->num_links && at == x->num_links; i++)
        if (!x->links[i].g) at = i;
    if (at == MAX_LINKS) return ERR_NCCL_GROUPS;
    Link l = {g, NULL, inner->group_rank(inner, g), inner->group_size(inner, g)};
    // the id and whether rank 0 could make it, so that a failure there fails
    // every member instead of leaving them waiting in init
    struct {
        ncclUniqueId id;
        int32_t ok;
    } boot;
    memset(&boot, 0, sizeof boot);
    if (l.rank == 0) boot.ok = nccl_rc(x, ncclGetUniqueId(&boot.id), NULL) == 0;
    int rc = inner->broadcast(inner, &boot, sizeof boot, MIST_U8, 0, (CommGroup *)g);
    if (rc) return rc;
    if (!boot.ok) return ERR_NCCL_INIT;
    // ncclCommInitRank waits for every member without a limit: meet in a barrier first,
    // whose wait runs into [cluster] comm_timeout with the hang report when one never comes
    char ctx[sizeof x->context + 64];
    snprintf(ctx, sizeof ctx, "%s%screating an NCCL communicator", x->context, x->context[0] ? ": " : "");
    inner->set_context(inner, ctx);
    CommRequest *met = NULL;
    rc = inner->ibarrier(inner, (CommGroup *)g, &met);
    if (!rc) rc = inner->wait(inner, met);
    inner->set_context(inner, x->context);
    if (rc) return rc;
    rc = nccl_rc(x, ncclCommInitRank(&l.comm, l.size, boot.id, l.rank), NULL);
    if (rc) return rc;
    x->made++;
    x->links[at] = l;
    if (at == x->num_links) x->num_links++;
    *out = &x->links[at];
    return 0;
}

// A group freed through this backend takes its communicator with it (a later
// group at the same address must not find it); no operation on it may be in flight.
static void nccl_group_free(const CommBackend *self, CommGroup *g) {
    Nccl *x = nccl_of(self);
    const CommBackend *inner = x->wrap.inner;
    for (int i = 0; g && i < x->num_links; i++)
        if (x->links[i].g == g) {
            x->be->stream_synchronize(x->be, x->ns);
            ncclCommDestroy(x->links[i].comm);
            x->links[i] = (Link){0};
        }
    inner->group_free(inner, g);
}

// NCCL's stream after the work queued so far on the followed stream (or on
// the whole device when none is set): the buffers hold what those kernels wrote.
static void enter(const Nccl *x) {
    Backend *be = x->be;
    if (x->follow) {
        be->event_record(be, x->entered, x->follow);
        be->stream_wait_event(be, x->ns, x->entered);
    } else {
        be->synchronize(be);
    }
}

static Slot *take(Nccl *x) {
    for (int i = 0; i < x->slots_used; i++)
        if (!x->slots[i].in_use) return &x->slots[i];
    if (x->slots_used == COMM_MAX_REQUESTS) return NULL;
    Slot *s = &x->slots[x->slots_used];
    s->done = x->be->event_create(x->be);
    if (!s->done) return NULL;
    x->slots_used++;
    return s;
}

// ---- completion ----------------------------------------------------------------

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// NCCL's asynchronous error on the slot's communicator (a peer failed, a
// network error): 0 while there is none
static int async_error(Nccl *x, const Slot *s) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(s->link->comm, &state);
    if (r != ncclSuccess) return nccl_rc(x, r, s->link->comm);
    if (state != ncclSuccess && state != ncclInProgress) return nccl_rc(x, state, s->link->comm);
    return 0;
}

static void report_hang(const Nccl *x, const Slot *s, double waited) {
    const CommBackend *inner = x->wrap.inner;
    char msg[768];
    snprintf(msg, sizeof msg,
             "%s%sNCCL %s of %zu %s elements, on a group of %d ranks (this rank is %d in it), has not completed after "
             "%.0f s. The other ranks of the group have not joined it: one may have died, be stuck, or be running a "
             "different operation (their own reports, if any, name theirs). Hint: [cluster] comm_timeout = %g s; "
             "raise it if one step can legitimately take longer, 0 turns the check off",
             x->context, x->context[0] ? ": " : "", s->what, s->count, mist_dtype_name(s->t), s->link->size,
             s->link->rank, waited, x->timeout);
    // No ncclCommAbort first: on a communicator whose peers are stuck it can block
    // itself, before the report is out. MPI's abort ends every rank, and with the
    // processes go their NCCL kernels.
    inner->abort(inner, 4, msg);
}

static int nccl_wait(const CommBackend *self, CommRequest *req) {
    Nccl *x = nccl_of(self);
    const CommBackend *inner = x->wrap.inner;
    if (!is_slot(x, req)) return inner->wait(inner, req);
    Slot *s = (Slot *)req;
    int rc = 0;
    double t0 = now_seconds();
    // the event is polled rather than waited on, so that a peer's failure
    // (async error) or a hang (timeout) is seen; the clock every 256 polls
    for (unsigned polls = 1; !x->be->event_query(x->be, s->done); polls++) {
        if (polls % 256) continue;
        if ((rc = async_error(x, s)) != 0) break;
        double waited = now_seconds() - t0;
        if (x->timeout > 0 && waited > x->timeout) report_hang(x, s, waited);
    }
    s->in_use = 0;
    return rc;
}

static int nccl_test(const CommBackend *self, CommRequest *req, int *done) {
    Nccl *x = nccl_of(self);
    const CommBackend *inner = x->wrap.inner;
    if (!is_slot(x, req)) return inner->test(inner, req, done);
    Slot *s = (Slot *)req;
    int rc = 0;
    *done = x->be->event_query(x->be, s->done);
    if (!*done && (rc = async_error(x, s)) != 0) *done = 1;
    if (*done) s->in_use = 0;
    return rc;
}

static void nccl_set_timeout(const CommBackend *self, double seconds) {
    Nccl *x = nccl_of(self);
    x->timeout = seconds > 0 ? seconds : 0;
    x->wrap.inner->set_timeout(x->wrap.inner, seconds);
}
static void nccl_set_context(const CommBackend *self, const char *c) {
    Nccl *x = nccl_of(self);
    snprintf(x->context, sizeof x->context, "%s", c ? c : "");
    x->wrap.inner->set_context(x->wrap.inner, c);
}

// ---- starting an operation ------------------------------------------------------

static int nccl_type(MistDtype t, ncclDataType_t *out) {
    switch (t) {
    case MIST_F32: *out = ncclFloat32; return 0;
    case MIST_BF16: *out = ncclBfloat16; return 0;
    case MIST_F16: *out = ncclFloat16; return 0;
    case MIST_I32: *out = ncclInt32; return 0;
    case MIST_U8: *out = ncclUint8; return 0;
    }
    return ERR_NCCL_DTYPE;
}
static int reduction_ok(MistDtype t) { return t != MIST_F16; }  // as the MPI backend
static ncclRedOp_t nccl_op(CommOp op) { return op == COMM_MAX ? ncclMax : ncclSum; }

static int overlap(const void *a, size_t na, const void *b, size_t nb) {
    const char *x = a, *y = b;
    return x < y + nb && y < x + na;
}

// Where the buffers of a call are: 1 device (NCCL), 0 host (the inner backend),
// or an error for a mix.
static int placement(const Nccl *x, const void *send, const void *recv, int *rc) {
    int ds = on_device(x, send), dr = on_device(x, recv);
    *rc = ds != dr ? ERR_NCCL_MIXED : 0;
    return ds && dr;
}

// The call has been enqueued on ns (rc: how that went): its end event, handed
// back as the request or waited on (req NULL: the blocking form).
static int started(const CommBackend *self, int rc, const char *what, size_t count, MistDtype t, const Link *l,
                   CommRequest **req) {
    Nccl *x = nccl_of(self);
    if (req) *req = NULL;
    if (rc) return rc;
    Slot *s = take(x);
    if (!s) {
        // nothing to hand back: finish this one here (it is already enqueued)
        x->be->stream_synchronize(x->be, x->ns);
        return ERR_NCCL_POOL;
    }
    *s = (Slot){1, s->done, what, count, t, l};
    x->be->event_record(x->be, s->done, x->ns);
    x->calls++;
    if (req) {
        *req = (CommRequest *)s;
        return 0;
    }
    return nccl_wait(self, (CommRequest *)s);
}

static int start_all_reduce(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                            CommOp op, CommGroup *g, CommRequest **req) {
    Nccl *x = nccl_of(self);
    ncclDataType_t nt;
    if (!reduction_ok(t) || nccl_type(t, &nt)) return ERR_NCCL_DTYPE;
    size_t bytes = count * mist_dtype_size(t);
    if (send != recv && overlap(send, bytes, recv, bytes)) return ERR_NCCL_OVERLAP;
    const Link *l;
    int rc = link_of(x, g, &l);
    if (rc) return rc;
    enter(x);
    rc = nccl_rc(x, ncclAllReduce(send, recv, count, nt, nccl_op(op), l->comm, stream(x)), l->comm);
    return started(self, rc, "all_reduce", count, t, l, req);
}

// send: size blocks of count; this rank's reduced block to recv. NCCL is in
// place when recv is this rank's block of send; recv == send (the result at
// the start, which the MPI backend allows) runs in place, then moves it.
static int start_reduce_scatter(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                                CommOp op, CommGroup *g, CommRequest **req) {
    Nccl *x = nccl_of(self);
    ncclDataType_t nt;
    if (!reduction_ok(t) || nccl_type(t, &nt)) return ERR_NCCL_DTYPE;
    const Link *l;
    int rc = link_of(x, g, &l);
    if (rc) return rc;
    size_t block = count * mist_dtype_size(t);
    char *mine = (char *)send + (size_t)l->rank * block;
    int at_start = recv == send && l->rank != 0;
    if (!at_start && recv != mine && overlap(send, block * (size_t)l->size, recv, block)) return ERR_NCCL_OVERLAP;
    void *dst = at_start ? mine : recv;
    enter(x);
    rc = nccl_rc(x, ncclReduceScatter(send, dst, count, nt, nccl_op(op), l->comm, stream(x)), l->comm);
    if (!rc && at_start && block) x->be->copy_d2d(x->be, recv, mine, block, x->ns);  // ordered after it on ns
    return started(self, rc, "reduce_scatter", count, t, l, req);
}

// send: count; recv: size blocks of count. In place when send is this rank's block of recv.
static int start_all_gather(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                            CommGroup *g, CommRequest **req) {
    Nccl *x = nccl_of(self);
    ncclDataType_t nt;
    if (nccl_type(t, &nt)) return ERR_NCCL_DTYPE;
    const Link *l;
    int rc = link_of(x, g, &l);
    if (rc) return rc;
    size_t block = count * mist_dtype_size(t);
    char *mine = (char *)recv + (size_t)l->rank * block;
    if (send != mine && overlap(send, block, recv, block * (size_t)l->size)) return ERR_NCCL_OVERLAP;
    enter(x);
    rc = nccl_rc(x, ncclAllGather(send, recv, count, nt, l->comm, stream(x)), l->comm);
    return started(self, rc, "all_gather", count, t, l, req);
}

static int start_broadcast(const CommBackend *self, void *buf, size_t count, MistDtype t, int root, CommGroup *g,
                           CommRequest **req) {
    Nccl *x = nccl_of(self);
    ncclDataType_t nt;
    if (nccl_type(t, &nt)) return ERR_NCCL_DTYPE;
    const Link *l;
    int rc = link_of(x, g, &l);
    if (rc) return rc;
    enter(x);
    rc = nccl_rc(x, ncclBroadcast(buf, buf, count, nt, root, l->comm, stream(x)), l->comm);
    return started(self, rc, "broadcast", count, t, l, req);
}

// ---- the interface: device buffers on NCCL, host buffers to the inner backend -----

static int nccl_iall_reduce(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                            CommOp op, CommGroup *g, CommRequest **req) {
    const CommBackend *inner = comm_wrap_inner(self);
    int rc;
    if (!placement(nccl_of(self), send, recv, &rc))
        return rc ? rc : inner->iall_reduce(inner, send, recv, count, t, op, g, req);
    return start_all_reduce(self, send, recv, count, t, op, g, req);
}
static int nccl_all_reduce(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                           CommOp op, CommGroup *g) {
    const CommBackend *inner = comm_wrap_inner(self);
    int rc;
    if (!placement(nccl_of(self), send, recv, &rc))
        return rc ? rc : inner->all_reduce(inner, send, recv, count, t, op, g);
    return start_all_reduce(self, send, recv, count, t, op, g, NULL);
}
static int nccl_ireduce_scatter(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                                CommOp op, CommGroup *g, CommRequest **req) {
    const CommBackend *inner = comm_wrap_inner(self);
    int rc;
    if (!placement(nccl_of(self), send, recv, &rc))
        return rc ? rc : inner->ireduce_scatter(inner, send, recv, count, t, op, g, req);
    return start_reduce_scatter(self, send, recv, count, t, op, g, req);
}
static int nccl_reduce_scatter(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                               CommOp op, CommGroup *g) {
    const CommBackend *inner = comm_wrap_inner(self);
    int rc;
    if (!placement(nccl_of(self), send, recv, &rc))
        return rc ? rc : inner->reduce_scatter(inner, send, recv, count, t, op, g);
    return start_reduce_scatter(self, send, recv, count, t, op, g, NULL);
}
static int nccl_iall_gather(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                            CommGroup *g, CommRequest **req) {
    const CommBackend *inner = comm_wrap_inner(self);
    int rc;
    if (!placement(nccl_of(self), send, recv, &rc))
        return rc ? rc : inner->iall_gather(inner, send, recv, count, t, g, req);
    return start_all_gather(self, send, recv, count, t, g, req);
}
static int nccl_all_gather(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                           CommGroup *g) {
    const CommBackend *inner = comm_wrap_inner(self);
    int rc;
    if (!placement(nccl_of(self), send, recv, &rc)) return rc ? rc : inner->all_gather(inner, send, recv, count, t, g);
    return start_all_gather(self, send, recv, count, t, g, NULL);
}
static int nccl_ibroadcast(const CommBackend *self, void *buf, size_t count, MistDtype t, int root, CommGroup *g,
                           CommRequest **req) {
    const CommBackend *inner = comm_wrap_inner(self);
    if (!on_device(nccl_of(self), buf)) return inner->ibroadcast(inner, buf, count, t, root, g, req);
    return start_broadcast(self, buf, count, t, root, g, req);
}
static int nccl_broadcast(const CommBackend *self, void *buf, size_t count, MistDtype t, int root, CommGroup *g) {
    const CommBackend *inner = comm_wrap_inner(self);
    if (!on_device(nccl_of(self), buf)) return inner->broadcast(inner, buf, count, t, root, g);
    return start_broadcast(self, buf, count, t, root, g, NULL);
}

// point to point: device buffers on ncclSend / ncclRecv (peer: the rank in the
// group; NCCL has no tags: messages between two ranks match in the order they
// start), host buffers to the inner backend. Messages started between
// p2p_group(1) and p2p_group(0) go into one NCCL group; one started alone is a
// group of its own.
static int nccl_p2p_group(const CommBackend *self, int begin) {
    Nccl *x = nccl_of(self);
    if (begin) {
        enter(x);  // the messages read what the followed stream wrote
        x->p2p_open = 1, x->p2p_num = 0;
        return nccl_rc(x, ncclGroupStart(), NULL);
    }
    x->p2p_open = 0;
    int rc = nccl_rc(x, ncclGroupEnd(), NULL);
    for (int i = 0; i < x->p2p_num; i++) {
        x->be->event_record(x->be, x->p2p_pending[i]->done, x->ns);
        x->calls++;
    }
    x->p2p_num = 0;
    return rc;
}

static int p2p_start(const CommBackend *self, int send, void *buf, size_t count, MistDtype t, int peer,
                     CommGroup *g, CommRequest **req) {
    Nccl *x = nccl_of(self);
    ncclDataType_t nt;
    *req = NULL;
    if (nccl_type(t, &nt)) return ERR_NCCL_DTYPE;
    const Link *l;
    // the group's communicator exists by now (the pipeline's world group is made at
    // start: runtime/train.c), so no communicator is created inside an open group
    int rc = link_of(x, g, &l), alone = !x->p2p_open;
    if (rc) return rc;
    if (alone && (rc = nccl_p2p_group(self, 1)) != 0) return rc;
    Slot *s = take(x);
    if (!s) rc = ERR_NCCL_POOL;
    else rc = nccl_rc(x, send ? ncclSend(buf, count, nt, peer, l->comm, stream(x))
                              : ncclRecv(buf, count, nt, peer, l->comm, stream(x)), l->comm);
    if (!rc) {
        *s = (Slot){1, s->done, send ? "send" : "recv", count, t, l};
        x->p2p_pending[x->p2p_num++] = s;
        *req = (CommRequest *)s;
    }
    if (alone) {
        int end = nccl_p2p_group(self, 0);
        rc = rc ? rc : end;
    }
    return rc;
}

static int nccl_isend(const CommBackend *self, const void *buf, size_t count, MistDtype t, int peer, int tag,
                      CommGroup *g, CommRequest **req) {
    const CommBackend *inner = comm_wrap_inner(self);
    if (on_device(nccl_of(self), buf)) return p2p_start(self, 1, (void *)buf, count, t, peer, g, req);
    return inner->isend(inner, buf, count, t, peer, tag, g, req);
}
static int nccl_irecv(const CommBackend *self, void *buf, size_t count, MistDtype t, int peer, int tag, CommGroup *g,
                      CommRequest **req) {
    const CommBackend *inner = comm_wrap_inner(self);
    if (on_device(nccl_of(self), buf)) return p2p_start(self, 0, buf, count, t, peer, g, req);
    return inner->irecv(inner, buf, count, t, peer, tag, g, req);
}
static int nccl_send(const CommBackend *self, const void *buf, size_t count, MistDtype t, int peer, int tag,
                     CommGroup *g) {
    CommRequest *req = NULL;
    int rc = nccl_isend(self, buf, count, t, peer, tag, g, &req);
    return rc ? rc : nccl_wait(self, req);
}
static int nccl_recv(const CommBackend *self, void *buf, size_t count, MistDtype t, int peer, int tag, CommGroup *g) {
    CommRequest *req = NULL;
    int rc = nccl_irecv(self, buf, count, t, peer, tag, g, &req);
    return rc ? rc : nccl_wait(self, req);
}

static void nccl_error_string(const CommBackend *self, int code, char *buf, size_t len) {
    const Nccl *x = nccl_of(self);
    switch (code) {
    case ERR_NCCL_MIXED:
        snprintf(buf, len, "one buffer in device memory and the other in host memory: NCCL needs both on the device");
        return;
    case ERR_NCCL_DTYPE:
        snprintf(buf, len, "this reduction is not available for the element type (f16 reductions are not supported; "
                           "use f32 or bf16)");
        return;
    case ERR_NCCL_POOL:
        snprintf(buf, len, "more than %d NCCL operations in flight (wait on some first)", COMM_MAX_REQUESTS);
        return;
    case ERR_NCCL_GROUPS:
        snprintf(buf, len, "more than %d groups with device collectives (NCCL communicators)", MAX_LINKS);
        return;
    case ERR_NCCL_OVERLAP:
        snprintf(buf, len, "send and receive buffers overlap but the call is not in place");
        return;
    case ERR_NCCL_INIT:
        snprintf(buf, len, "ncclGetUniqueId failed on rank 0 of the group, so no NCCL communicator could be made for "
                           "it (see that rank's NCCL messages; NCCL_DEBUG=WARN prints them)");
        return;
    }
    if (code < ERR_NCCL_BASE && code > ERR_NCCL_BASE - 64) {
        ncclResult_t r = (ncclResult_t)(ERR_NCCL_BASE - code);
        snprintf(buf, len, "NCCL error %d: %s%s%s. Hint: NCCL_DEBUG=WARN says more; NCCL needs one GPU per rank "
                 "(MIST_COMM_STAGED=1 moves collectives through host memory instead)", (int)r, ncclGetErrorString(r),
                 r == x->last_result && x->last_detail[0] ? ": " : "", r == x->last_result ? x->last_detail : "");
        return;
    }
    x->wrap.inner->error_string(x->wrap.inner, code, buf, len);
}

const CommBackend *comm_nccl_new(const CommBackend *inner, Backend *be) {
    Nccl *x = calloc(1, sizeof *x);
    if (!x) return NULL;
    x->be = be;
    x->ns = be->stream_create(be);
    x->entered = be->event_create(be);
    CommBackend *w = &x->iface;
    // group creation, barriers, errors, abort: the inner backend's
    comm_wrap_init(w, "nccl", inner, &x->wrap);
    w->group_free = nccl_group_free;
    w->all_reduce = nccl_all_reduce;
    w->reduce_scatter = nccl_reduce_scatter;
    w->all_gather = nccl_all_gather;
    w->broadcast = nccl_broadcast;
    w->send = nccl_send;
    w->recv = nccl_recv;
    w->iall_reduce = nccl_iall_reduce;
    w->ireduce_scatter = nccl_ireduce_scatter;
    w->iall_gather = nccl_iall_gather;
    w->ibroadcast = nccl_ibroadcast;
    w->isend = nccl_isend;
    w->p2p_group = nccl_p2p_group;
    w->irecv = nccl_irecv;
    w->wait = nccl_wait;
    w->test = nccl_test;
    w->error_string = nccl_error_string;
    w->set_timeout = nccl_set_timeout;
    w->set_context = nccl_set_context;
    return w;
}

int comm_nccl_prepare(const CommBackend *nccl, const CommGroup *g) {
    const Link *l;
    return link_of(nccl_of(nccl), g, &l);
}

void comm_nccl_follow(const CommBackend *nccl, BackendStream *s) { nccl_of(nccl)->follow = s; }
long long comm_nccl_calls(const CommBackend *nccl) { return nccl_of(nccl)->calls; }
int comm_nccl_communicators(const CommBackend *nccl) { return nccl_of(nccl)->made; }

const char *comm_nccl_version(void) {
    static char text[32];
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
    // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z since 2.9
    snprintf(text, sizeof text, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    return text;
}

void comm_nccl_free(const CommBackend *nccl) {
    if (!nccl) return;
    Nccl *x = nccl_of(nccl);
    Backend *be = x->be;
    if (x->ns) be->stream_synchronize(be, x->ns);
    for (int i = 0; i < x->num_links; i++)
        if (x->links[i].g) ncclCommDestroy(x->links[i].comm);
    for (int i = 0; i < x->slots_used; i++) be->event_destroy(be, x->slots[i].done);
    if (x->entered) be->event_destroy(be, x->entered);
    if (x->ns) be->stream_destroy(be, x->ns);
    free(x);
}
