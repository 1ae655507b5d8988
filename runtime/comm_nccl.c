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
#include <string.h>
#include <time.h>

#include "runtime/comm_nccl.h"

enum {
    ERR_NCCL_P2P = -201,    // device point-to-point
    ERR_NCCL_MIXED = -202,  // one buffer on the device, the other on the host
    ERR_NCCL_DTYPE = -203,  // a reduction NCCL (or this interface) does not define
    ERR_NCCL_POOL = -204,
    ERR_NCCL_GROUPS = -205,
    ERR_NCCL_OVERLAP = -206,
    ERR_NCCL_INIT = -207,  // the unique id could not be made on the group's rank 0
    ERR_NCCL_BASE = -300,  // ERR_NCCL_BASE - r: ncclResult_t r from a call
};

static const CommBackend *inner;
static Backend *be;
static CommBackend wrapper;
static BackendStream *follow, *ns;  // the followed stream, NCCL's stream
static BackendEvent *entered;       // recorded on `follow` before each call
static long long calls;
static int made;                    // communicators created
static double timeout;
static char context[128];
static ncclResult_t last_result;    // for error_string: the call that failed
static char last_detail[256];

// The NCCL communicator of each group that has had a device collective. An
// entry stays where it is until its group is freed (in-flight requests point
// at it); a freed entry (g NULL) is reused.
typedef struct {
    const CommGroup *g;
    ncclComm_t comm;
    int rank, size;
} Link;
#define MAX_LINKS 256
static Link links[MAX_LINKS];
static int num_links;

// One operation in flight: the event on ns that marks its end.
typedef struct {
    int in_use;
    BackendEvent *done;
    const char *what;
    size_t count;
    MistDtype t;
    const Link *link;
} Slot;
static Slot slots[COMM_MAX_REQUESTS];
static int slots_used;  // slots [0, slots_used) have an event

static int on_device(const void *p) { return p && be->is_device_memory && be->is_device_memory(be, p); }
static int is_slot(const CommRequest *r) {
    return (const char *)r >= (const char *)slots && (const char *)r < (const char *)(slots + slots_used);
}
static cudaStream_t stream(void) { return (cudaStream_t)be->native_stream(be, ns); }

static int nccl_rc(ncclResult_t r, ncclComm_t comm) {
    if (r == ncclSuccess) return 0;
    last_result = r;
    const char *detail = comm ? ncclGetLastError(comm) : NULL;
    snprintf(last_detail, sizeof last_detail, "%s", detail ? detail : "");
    return ERR_NCCL_BASE - (int)r;
}

// The group's link, its communicator created on first use (collective over
// the group: every member is in the same collective call).
static int link_of(const CommGroup *g, const Link **out) {
    for (int i = 0; i < num_links; i++)
        if (links[i].g == g) {
            *out = &links[i];
            return 0;
        }
    int at = num_links;
    for (int i = 0; i < num_links && at == num_links; i++)
        if (!links[i].g) at = i;
    if (at == MAX_LINKS) return ERR_NCCL_GROUPS;
    Link l = {g, NULL, inner->group_rank(g), inner->group_size(g)};
    // the id and whether rank 0 could make it, so that a failure there fails
    // every member instead of leaving them waiting in init
    struct {
        ncclUniqueId id;
        int32_t ok;
    } boot;
    memset(&boot, 0, sizeof boot);
    if (l.rank == 0) boot.ok = nccl_rc(ncclGetUniqueId(&boot.id), NULL) == 0;
    int rc = inner->broadcast(&boot, sizeof boot, MIST_U8, 0, (CommGroup *)g);
    if (rc) return rc;
    if (!boot.ok) return ERR_NCCL_INIT;
    // ncclCommInitRank waits for every member without a limit: meet in a barrier first,
    // whose wait runs into [cluster] comm_timeout with the hang report when one never comes
    char ctx[sizeof context + 64];
    snprintf(ctx, sizeof ctx, "%s%screating an NCCL communicator", context, context[0] ? ": " : "");
    inner->set_context(ctx);
    CommRequest *met = NULL;
    rc = inner->ibarrier((CommGroup *)g, &met);
    if (!rc) rc = inner->wait(met);
    inner->set_context(context);
    if (rc) return rc;
    rc = nccl_rc(ncclCommInitRank(&l.comm, l.size, boot.id, l.rank), NULL);
    if (rc) return rc;
    made++;
    links[at] = l;
    if (at == num_links) num_links++;
    *out = &links[at];
    return 0;
}

// A group freed through this backend takes its communicator with it (a later
// group at the same address must not find it); no operation on it may be in flight.
static void nccl_group_free(CommGroup *g) {
    for (int i = 0; g && i < num_links; i++)
        if (links[i].g == g) {
            be->stream_synchronize(be, ns);
            ncclCommDestroy(links[i].comm);
            links[i] = (Link){0};
        }
    inner->group_free(g);
}

// NCCL's stream after the work queued so far on the followed stream (or on
// the whole device when none is set): the buffers hold what those kernels wrote.
static void enter(void) {
    if (follow) {
        be->event_record(be, entered, follow);
        be->stream_wait_event(be, ns, entered);
    } else {
        be->synchronize(be);
    }
}

static Slot *take(void) {
    for (int i = 0; i < slots_used; i++)
        if (!slots[i].in_use) return &slots[i];
    if (slots_used == COMM_MAX_REQUESTS) return NULL;
    Slot *s = &slots[slots_used];
    s->done = be->event_create(be);
    if (!s->done) return NULL;
    slots_used++;
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
static int async_error(const Slot *s) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(s->link->comm, &state);
    if (r != ncclSuccess) return nccl_rc(r, s->link->comm);
    if (state != ncclSuccess && state != ncclInProgress) return nccl_rc(state, s->link->comm);
    return 0;
}

static void report_hang(const Slot *s, double waited) {
    char msg[768];
    snprintf(msg, sizeof msg,
             "%s%sNCCL %s of %zu %s elements, on a group of %d ranks (this rank is %d in it), has not completed after "
             "%.0f s. The other ranks of the group have not joined it: one may have died, be stuck, or be running a "
             "different operation (their own reports, if any, name theirs). Hint: [cluster] comm_timeout = %g s; "
             "raise it if one step can legitimately take longer, 0 turns the check off",
             context, context[0] ? ": " : "", s->what, s->count, mist_dtype_name(s->t), s->link->size, s->link->rank,
             waited, timeout);
    // No ncclCommAbort first: on a communicator whose peers are stuck it can block
    // itself, before the report is out. MPI's abort ends every rank, and with the
    // processes go their NCCL kernels.
    inner->abort(4, msg);
}

static int nccl_wait(CommRequest *req) {
    if (!is_slot(req)) return inner->wait(req);
    Slot *s = (Slot *)req;
    int rc = 0;
    double t0 = now_seconds();
    // the event is polled rather than waited on, so that a peer's failure
    // (async error) or a hang (timeout) is seen; the clock every 256 polls
    for (unsigned polls = 1; !be->event_query(be, s->done); polls++) {
        if (polls % 256) continue;
        if ((rc = async_error(s)) != 0) break;
        double waited = now_seconds() - t0;
        if (timeout > 0 && waited > timeout) report_hang(s, waited);
    }
    s->in_use = 0;
    return rc;
}

static int nccl_test(CommRequest *req, int *done) {
    if (!is_slot(req)) return inner->test(req, done);
    Slot *s = (Slot *)req;
    int rc = 0;
    *done = be->event_query(be, s->done);
    if (!*done && (rc = async_error(s)) != 0) *done = 1;
    if (*done) s->in_use = 0;
    return rc;
}

static void nccl_set_timeout(double seconds) {
    timeout = seconds > 0 ? seconds : 0;
    inner->set_timeout(seconds);
}
static void nccl_set_context(const char *c) {
    snprintf(context, sizeof context, "%s", c ? c : "");
    inner->set_context(c);
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
static int placement(const void *send, const void *recv, int *rc) {
    int ds = on_device(send), dr = on_device(recv);
    *rc = ds != dr ? ERR_NCCL_MIXED : 0;
    return ds && dr;
}

// The call has been enqueued on ns (rc: how that went): its end event, handed
// back as the request or waited on (req NULL: the blocking form).
static int started(int rc, const char *what, size_t count, MistDtype t, const Link *l, CommRequest **req) {
    if (req) *req = NULL;
    if (rc) return rc;
    Slot *s = take();
    if (!s) {
        // nothing to hand back: finish this one here (it is already enqueued)
        be->stream_synchronize(be, ns);
        return ERR_NCCL_POOL;
    }
    *s = (Slot){1, s->done, what, count, t, l};
    be->event_record(be, s->done, ns);
    calls++;
    if (req) {
        *req = (CommRequest *)s;
        return 0;
    }
    return nccl_wait((CommRequest *)s);
}

static int start_all_reduce(const void *send, void *recv, size_t count, MistDtype t, CommOp op, CommGroup *g,
                            CommRequest **req) {
    ncclDataType_t nt;
    if (!reduction_ok(t) || nccl_type(t, &nt)) return ERR_NCCL_DTYPE;
    size_t bytes = count * mist_dtype_size(t);
    if (send != recv && overlap(send, bytes, recv, bytes)) return ERR_NCCL_OVERLAP;
    const Link *l;
    int rc = link_of(g, &l);
    if (rc) return rc;
    enter();
    rc = nccl_rc(ncclAllReduce(send, recv, count, nt, nccl_op(op), l->comm, stream()), l->comm);
    return started(rc, "all_reduce", count, t, l, req);
}

// send: size blocks of count; this rank's reduced block to recv. NCCL is in
// place when recv is this rank's block of send; recv == send (the result at
// the start, which the MPI backend allows) runs in place, then moves it.
static int start_reduce_scatter(const void *send, void *recv, size_t count, MistDtype t, CommOp op, CommGroup *g,
                                CommRequest **req) {
    ncclDataType_t nt;
    if (!reduction_ok(t) || nccl_type(t, &nt)) return ERR_NCCL_DTYPE;
    const Link *l;
    int rc = link_of(g, &l);
    if (rc) return rc;
    size_t block = count * mist_dtype_size(t);
    char *mine = (char *)send + (size_t)l->rank * block;
    int at_start = recv == send && l->rank != 0;
    if (!at_start && recv != mine && overlap(send, block * (size_t)l->size, recv, block)) return ERR_NCCL_OVERLAP;
    void *dst = at_start ? mine : recv;
    enter();
    rc = nccl_rc(ncclReduceScatter(send, dst, count, nt, nccl_op(op), l->comm, stream()), l->comm);
    if (!rc && at_start && block) be->copy_d2d(be, recv, mine, block, ns);  // ordered after it on ns
    return started(rc, "reduce_scatter", count, t, l, req);
}

// send: count; recv: size blocks of count. In place when send is this rank's block of recv.
static int start_all_gather(const void *send, void *recv, size_t count, MistDtype t, CommGroup *g,
                            CommRequest **req) {
    ncclDataType_t nt;
    if (nccl_type(t, &nt)) return ERR_NCCL_DTYPE;
    const Link *l;
    int rc = link_of(g, &l);
    if (rc) return rc;
    size_t block = count * mist_dtype_size(t);
    char *mine = (char *)recv + (size_t)l->rank * block;
    if (send != mine && overlap(send, block, recv, block * (size_t)l->size)) return ERR_NCCL_OVERLAP;
    enter();
    rc = nccl_rc(ncclAllGather(send, recv, count, nt, l->comm, stream()), l->comm);
    return started(rc, "all_gather", count, t, l, req);
}

static int start_broadcast(void *buf, size_t count, MistDtype t, int root, CommGroup *g, CommRequest **req) {
    ncclDataType_t nt;
    if (nccl_type(t, &nt)) return ERR_NCCL_DTYPE;
    const Link *l;
    int rc = link_of(g, &l);
    if (rc) return rc;
    enter();
    rc = nccl_rc(ncclBroadcast(buf, buf, count, nt, root, l->comm, stream()), l->comm);
    return started(rc, "broadcast", count, t, l, req);
}

// ---- the interface: device buffers on NCCL, host buffers to the inner backend -----

static int nccl_iall_reduce(const void *send, void *recv, size_t count, MistDtype t, CommOp op, CommGroup *g,
                            CommRequest **req) {
    int rc;
    if (!placement(send, recv, &rc)) return rc ? rc : inner->iall_reduce(send, recv, count, t, op, g, req);
    return start_all_reduce(send, recv, count, t, op, g, req);
}
static int nccl_all_reduce(const void *send, void *recv, size_t count, MistDtype t, CommOp op, CommGroup *g) {
    int rc;
    if (!placement(send, recv, &rc)) return rc ? rc : inner->all_reduce(send, recv, count, t, op, g);
    return start_all_reduce(send, recv, count, t, op, g, NULL);
}
static int nccl_ireduce_scatter(const void *send, void *recv, size_t count, MistDtype t, CommOp op, CommGroup *g,
                                CommRequest **req) {
    int rc;
    if (!placement(send, recv, &rc)) return rc ? rc : inner->ireduce_scatter(send, recv, count, t, op, g, req);
    return start_reduce_scatter(send, recv, count, t, op, g, req);
}
static int nccl_reduce_scatter(const void *send, void *recv, size_t count, MistDtype t, CommOp op, CommGroup *g) {
    int rc;
    if (!placement(send, recv, &rc)) return rc ? rc : inner->reduce_scatter(send, recv, count, t, op, g);
    return start_reduce_scatter(send, recv, count, t, op, g, NULL);
}
static int nccl_iall_gather(const void *send, void *recv, size_t count, MistDtype t, CommGroup *g, CommRequest **req) {
    int rc;
    if (!placement(send, recv, &rc)) return rc ? rc : inner->iall_gather(send, recv, count, t, g, req);
    return start_all_gather(send, recv, count, t, g, req);
}
static int nccl_all_gather(const void *send, void *recv, size_t count, MistDtype t, CommGroup *g) {
    int rc;
    if (!placement(send, recv, &rc)) return rc ? rc : inner->all_gather(send, recv, count, t, g);
    return start_all_gather(send, recv, count, t, g, NULL);
}
static int nccl_ibroadcast(void *buf, size_t count, MistDtype t, int root, CommGroup *g, CommRequest **req) {
    if (!on_device(buf)) return inner->ibroadcast(buf, count, t, root, g, req);
    return start_broadcast(buf, count, t, root, g, req);
}
static int nccl_broadcast(void *buf, size_t count, MistDtype t, int root, CommGroup *g) {
    if (!on_device(buf)) return inner->broadcast(buf, count, t, root, g);
    return start_broadcast(buf, count, t, root, g, NULL);
}

// point to point: host buffers only (a device message would need both sides
// in one NCCL group call, which the interface's separate send / recv cannot say)
static int nccl_send(const void *buf, size_t count, MistDtype t, int peer, int tag, CommGroup *g) {
    return on_device(buf) ? ERR_NCCL_P2P : inner->send(buf, count, t, peer, tag, g);
}
static int nccl_recv(void *buf, size_t count, MistDtype t, int peer, int tag, CommGroup *g) {
    return on_device(buf) ? ERR_NCCL_P2P : inner->recv(buf, count, t, peer, tag, g);
}
static int nccl_isend(const void *buf, size_t count, MistDtype t, int peer, int tag, CommGroup *g, CommRequest **req) {
    if (on_device(buf)) {
        *req = NULL;
        return ERR_NCCL_P2P;
    }
    return inner->isend(buf, count, t, peer, tag, g, req);
}
static int nccl_irecv(void *buf, size_t count, MistDtype t, int peer, int tag, CommGroup *g, CommRequest **req) {
    if (on_device(buf)) {
        *req = NULL;
        return ERR_NCCL_P2P;
    }
    return inner->irecv(buf, count, t, peer, tag, g, req);
}

static void nccl_error_string(int code, char *buf, size_t len) {
    switch (code) {
    case ERR_NCCL_P2P:
        snprintf(buf, len, "a point-to-point message of device memory: the NCCL comm backend moves device memory in "
                           "collectives only; send a host buffer");
        return;
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
                 r == last_result && last_detail[0] ? ": " : "", r == last_result ? last_detail : "");
        return;
    }
    inner->error_string(code, buf, len);
}

const CommBackend *comm_nccl_backend(const CommBackend *in, Backend *b) {
    inner = in, be = b;
    if (!ns) ns = be->stream_create(be);
    if (!entered) entered = be->event_create(be);
    wrapper = *in;  // group creation, barriers, errors, abort: the inner backend's
    wrapper.name = "nccl";
    wrapper.group_free = nccl_group_free;
    wrapper.all_reduce = nccl_all_reduce;
    wrapper.reduce_scatter = nccl_reduce_scatter;
    wrapper.all_gather = nccl_all_gather;
    wrapper.broadcast = nccl_broadcast;
    wrapper.send = nccl_send;
    wrapper.recv = nccl_recv;
    wrapper.iall_reduce = nccl_iall_reduce;
    wrapper.ireduce_scatter = nccl_ireduce_scatter;
    wrapper.iall_gather = nccl_iall_gather;
    wrapper.ibroadcast = nccl_ibroadcast;
    wrapper.isend = nccl_isend;
    wrapper.irecv = nccl_irecv;
    wrapper.wait = nccl_wait;
    wrapper.test = nccl_test;
    wrapper.error_string = nccl_error_string;
    wrapper.set_timeout = nccl_set_timeout;
    wrapper.set_context = nccl_set_context;
    return &wrapper;
}

int comm_nccl_prepare(const CommGroup *g) {
    const Link *l;
    return link_of(g, &l);
}

void comm_nccl_follow(BackendStream *s) { follow = s; }
long long comm_nccl_calls(void) { return calls; }
int comm_nccl_communicators(void) { return made; }

const char *comm_nccl_version(void) {
    static char text[32];
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
    // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z since 2.9
    snprintf(text, sizeof text, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    return text;
}

void comm_nccl_release(void) {
    if (ns) be->stream_synchronize(be, ns);
    for (int i = 0; i < num_links; i++)
        if (links[i].g) ncclCommDestroy(links[i].comm);
    num_links = 0;
    for (int i = 0; i < slots_used; i++) be->event_destroy(be, slots[i].done);
    memset(slots, 0, sizeof slots);
    slots_used = 0;
    if (entered) be->event_destroy(be, entered);
    if (ns) be->stream_destroy(be, ns);
    entered = NULL, ns = NULL, follow = NULL;
}
