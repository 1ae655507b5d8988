// Collectives and messages of device memory on NCCL (comm_nccl.h).
//
// Every NCCL call goes on one stream of ours (ns) after an event recorded on
// the followed stream, then an event recorded on ns marks its end: a request
// is that event (a message's, recorded when its group ends). NCCL enqueues and returns, so several collectives can be in
// flight while the GPU computes. Stream-ordered (comm_nccl_stream_ordered),
// completing one is the followed stream waiting on its event: the host never
// waits; the event is checked afterwards (NCCL's asynchronous errors, the
// timeout) at every later call. Otherwise wait() polls the event until it has
// passed. The communicators' lives are in runtime/comm_nccl_link.c.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm_nccl_impl.h"

static int on_device(const Nccl *x, const void *p) {
    return p && x->be->is_device_memory && x->be->is_device_memory(x->be, p);
}
static int is_slot(const Nccl *x, const CommRequest *r) {
    return (const char *)r >= (const char *)x->slots && (const char *)r < (const char *)(x->slots + x->slots_used);
}
static cudaStream_t stream(const Nccl *x) { return (cudaStream_t)x->be->native_stream(x->be, x->ns); }

// A group freed through this backend takes its communicator with it (a later
// group at the same address must not find it); no operation on it may be in flight.
static void nccl_group_free(const CommBackend *self, CommGroup *g) {
    Nccl *x = nccl_of(self);
    const CommBackend *inner = x->wrap.inner;
    for (int i = 0; g && i < x->num_links; i++)
        if (x->links[i].g == g) {
            x->be->stream_synchronize(x->be, x->ns);
            nccl_links_destroy(x, &x->links[i], 1);
        }
    inner->group_free(inner, g);
}

// NCCL's stream after the work queued so far on the followed stream (or on
// the whole device when none is set): the buffers hold what those kernels wrote.
static void enter(Nccl *x) {
    Backend *be = x->be;
    if (x->follow) {
        be->event_record(be, x->entered, x->follow);
        be->stream_wait_event(be, x->ns, x->entered);
    } else {
        be->synchronize(be);
    }
}

// ---- completion ----------------------------------------------------------------

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

// One look at an operation in flight: 1 when it has completed (its slot free
// again), 0 while it runs; *rc: NCCL's asynchronous error, if any (which frees
// it too). Past the timeout, counted from when it was enqueued, the job ends.
static int look(Nccl *x, Slot *s, int *rc) {
    *rc = 0;
    if (!x->be->event_query(x->be, s->done)) {
        if ((*rc = async_error(x, s)) == 0) {
            double waited = nccl_now() - s->since;
            if (x->timeout > 0 && waited > x->timeout) report_hang(x, s, waited);
            return 0;
        }
    }
    s->in_use = s->ordered = 0;
    return 1;
}

// The stream-ordered operations the host has not seen end: those that have,
// freed; the first asynchronous error, returned (0: none).
static int sweep(Nccl *x) {
    int first = 0, rc;
    for (int i = 0; i < x->slots_used; i++)
        if (x->slots[i].in_use && x->slots[i].ordered) {
            look(x, &x->slots[i], &rc);
            if (!first) first = rc;
        }
    return first;
}

// The host waits for one operation, polling its event (a peer's failure or a
// hang must be seen, which a blocking event wait would not).
static int host_wait(Nccl *x, Slot *s) {
    int rc;
    for (unsigned polls = 1;; polls++) {
        if (x->be->event_query(x->be, s->done)) break;
        // NCCL's error state and the clock every 256 polls: cheap enough between
        if (polls % 256 == 0 && look(x, s, &rc)) return rc;
    }
    s->in_use = s->ordered = 0;
    return 0;
}

static Slot *take(Nccl *x) {
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < x->slots_used; i++)
            if (!x->slots[i].in_use) return &x->slots[i];
        if (x->slots_used < COMM_MAX_REQUESTS) break;
        // every slot busy: the host waits for the stream-ordered ones (completed, they free theirs)
        if (pass == 0) comm_nccl_drain(&x->iface);
    }
    if (x->slots_used == COMM_MAX_REQUESTS) return NULL;
    Slot *s = &x->slots[x->slots_used];
    s->done = x->be->event_create(x->be);
    if (!s->done) return NULL;
    x->slots_used++;
    return s;
}

// Stream-ordered, the followed stream waits on the operation's end: what is
// queued on it afterwards reads the result, and the host goes on at once.
static int complete(Nccl *x, Slot *s) {
    if (x->stream_ordered && x->follow) {
        x->be->stream_wait_event(x->be, x->follow, s->done);
        s->ordered = 1;
        return sweep(x);
    }
    return host_wait(x, s);
}

static int nccl_wait(const CommBackend *self, CommRequest *req) {
    Nccl *x = nccl_of(self);
    const CommBackend *inner = x->wrap.inner;
    if (!is_slot(x, req)) return inner->wait(inner, req);
    if (x->p2p_open) return ERR_NCCL_GROUP_USAGE;  // its messages are not enqueued before the group's end
    return complete(x, (Slot *)req);
}

static int nccl_test(const CommBackend *self, CommRequest *req, int *done) {
    Nccl *x = nccl_of(self);
    const CommBackend *inner = x->wrap.inner;
    if (!is_slot(x, req)) return inner->test(inner, req, done);
    *done = 0;
    if (x->p2p_open) return ERR_NCCL_GROUP_USAGE;
    int rc;
    *done = look(x, (Slot *)req, &rc);
    return rc;
}

int comm_nccl_drain(const CommBackend *nccl) {
    Nccl *x = nccl_of(nccl);
    int first = 0;
    for (int i = 0; i < x->slots_used; i++)
        if (x->slots[i].in_use && x->slots[i].ordered) {
            int rc = host_wait(x, &x->slots[i]);
            if (!first) first = rc;
        }
    return first;
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

// A collective's result: on a non-blocking communicator NCCL may still be
// enqueueing it (ncclInProgress), and no other call may go to the
// communicator until it has finished (NCCL's rule), which is waited for here.
static int issued(Nccl *x, ncclResult_t r, const Link *l) {
    if (r == ncclInProgress) return nccl_settle(x, l->comm, "enqueueing an NCCL collective", l->rank, l->size);
    return nccl_rc(x, r, l->comm);
}

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
    *s = (Slot){1, 0, s->done, what, count, t, l, nccl_now()};
    x->be->event_record(x->be, s->done, x->ns);
    x->calls++;
    if (req) {
        *req = (CommRequest *)s;
        return 0;
    }
    return complete(x, s);
}

// g's link for a collective, which may not go inside an open p2p group: NCCL
// would launch it with the group's messages, and making a communicator there
// would wait on itself
static int collective_link(Nccl *x, const CommGroup *g, const Link **l) {
    return x->p2p_open ? ERR_NCCL_GROUP_USAGE : nccl_link_of(x, g, l);
}

static int start_all_reduce(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                            CommOp op, CommGroup *g, CommRequest **req) {
    Nccl *x = nccl_of(self);
    ncclDataType_t nt;
    if (!reduction_ok(t) || nccl_type(t, &nt)) return ERR_NCCL_DTYPE;
    size_t bytes = count * mist_dtype_size(t);
    if (send != recv && overlap(send, bytes, recv, bytes)) return ERR_NCCL_OVERLAP;
    const Link *l;
    int rc = collective_link(x, g, &l);
    if (rc) return rc;
    enter(x);
    rc = issued(x, ncclAllReduce(send, recv, count, nt, nccl_op(op), l->comm, stream(x)), l);
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
    int rc = collective_link(x, g, &l);
    if (rc) return rc;
    size_t block = count * mist_dtype_size(t);
    char *mine = (char *)send + (size_t)l->rank * block;
    int at_start = recv == send && l->rank != 0;
    if (!at_start && recv != mine && overlap(send, block * (size_t)l->size, recv, block)) return ERR_NCCL_OVERLAP;
    void *dst = at_start ? mine : recv;
    enter(x);
    rc = issued(x, ncclReduceScatter(send, dst, count, nt, nccl_op(op), l->comm, stream(x)), l);
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
    int rc = collective_link(x, g, &l);
    if (rc) return rc;
    size_t block = count * mist_dtype_size(t);
    char *mine = (char *)recv + (size_t)l->rank * block;
    if (send != mine && overlap(send, block, recv, block * (size_t)l->size)) return ERR_NCCL_OVERLAP;
    enter(x);
    rc = issued(x, ncclAllGather(send, recv, count, nt, l->comm, stream(x)), l);
    return started(self, rc, "all_gather", count, t, l, req);
}

static int start_broadcast(const CommBackend *self, void *buf, size_t count, MistDtype t, int root, CommGroup *g,
                           CommRequest **req) {
    Nccl *x = nccl_of(self);
    ncclDataType_t nt;
    if (nccl_type(t, &nt)) return ERR_NCCL_DTYPE;
    const Link *l;
    int rc = collective_link(x, g, &l);
    if (rc) return rc;
    enter(x);
    rc = issued(x, ncclBroadcast(buf, buf, count, nt, root, l->comm, stream(x)), l);
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

// ---- point to point ------------------------------------------------------------------
//
// Device messages run on ncclSend / ncclRecv (peer: the rank in the group).
// NCCL has no tags: messages between two ranks match in the order they start.
// A send's kernel waits for its receiver, so two ranks that each send first
// and then receive would wait on each other on one stream; inside one NCCL
// group (ncclGroupStart / End) the messages are launched together and cannot.
// The messages between p2p_group(1) and p2p_group(0) are one group (opened at
// the first of them: a group without device messages costs nothing); one
// started outside is a group of its own. Requests are slots as for the
// collectives: each message's end event is recorded on ns after
// ncclGroupEnd, when NCCL has enqueued the group, and completes as they do
// (stream-ordered or host-ordered).

// The open group's NCCL half: after the work queued so far on the followed
// stream (the messages read what it wrote)
static int group_start(Nccl *x) {
    enter(x);
    int rc = nccl_rc(x, ncclGroupStart(), NULL);
    x->p2p_started = rc == 0;
    return rc;
}

// ncclGroupEnd enqueues the group's messages. On non-blocking communicators it
// can say ncclInProgress: then each of the group's communicators must leave
// that state before another call goes to it (NCCL's rule), which is waited for
// under the timeout. The end events go on ns after the group either way, so
// that no request is left without one.
static int group_end(Nccl *x) {
    ncclResult_t r = ncclGroupEnd();
    int rc = r == ncclInProgress ? 0 : nccl_rc(x, r, NULL);
    for (int i = 0; r == ncclInProgress && !rc && i < x->p2p_num; i++) {
        const Link *l = x->p2p_pending[i]->link;
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= x->p2p_pending[j]->link == l;
        if (!seen) rc = nccl_settle(x, l->comm, "enqueueing a group of NCCL sends and receives", l->rank, l->size);
    }
    double now = nccl_now();
    for (int i = 0; i < x->p2p_num; i++) {
        x->p2p_pending[i]->since = now;
        x->be->event_record(x->be, x->p2p_pending[i]->done, x->ns);
        x->calls++;
    }
    x->p2p_num = 0;
    x->p2p_started = 0;
    return rc;
}

static int nccl_p2p_group(const CommBackend *self, int begin) {
    Nccl *x = nccl_of(self);
    if ((begin != 0) == x->p2p_open) return ERR_NCCL_GROUP_USAGE;  // nested, or an end without a begin
    x->p2p_open = begin != 0;
    return begin || !x->p2p_started ? 0 : group_end(x);
}

static int p2p_start(Nccl *x, int send, void *buf, size_t count, MistDtype t, int peer, CommGroup *g,
                     CommRequest **req) {
    ncclDataType_t nt;
    *req = NULL;
    if (nccl_type(t, &nt)) return ERR_NCCL_DTYPE;
    // only a communicator made before (comm_nccl_prepare, or a device collective on
    // g): making one is collective over all of g, and a message involves two of its
    // ranks; nor may one be made inside an open NCCL group
    const Link *l = nccl_link_find(x, g);
    if (!l) return ERR_NCCL_NO_COMM;
    int alone = !x->p2p_open;
    // alone, a message to this rank itself would wait for a receive that can only
    // start after it: NCCL pairs the two only inside one group
    if (alone && peer == l->rank) return ERR_NCCL_SELF;
    int rc = x->p2p_started ? 0 : group_start(x);
    Slot *s = rc ? NULL : take(x);
    if (!rc && !s) rc = ERR_NCCL_POOL;
    if (!rc) {
        // inside a group a call only records the message (ncclInProgress is no failure here: the end settles it)
        ncclResult_t r = send ? ncclSend(buf, count, nt, peer, l->comm, stream(x))
                              : ncclRecv(buf, count, nt, peer, l->comm, stream(x));
        rc = r == ncclInProgress ? 0 : nccl_rc(x, r, l->comm);
    }
    if (!rc) {
        *s = (Slot){.in_use = 1, .done = s->done, .what = send ? "send" : "recv", .count = count, .t = t, .link = l};
        x->p2p_pending[x->p2p_num++] = s;
        *req = (CommRequest *)s;
    }
    if (alone && x->p2p_started) {
        int end = group_end(x);
        rc = rc ? rc : end;
    }
    return rc;
}

static int nccl_isend(const CommBackend *self, const void *buf, size_t count, MistDtype t, int peer, int tag,
                      CommGroup *g, CommRequest **req) {
    const CommBackend *inner = comm_wrap_inner(self);
    if (on_device(nccl_of(self), buf)) return p2p_start(nccl_of(self), 1, (void *)buf, count, t, peer, g, req);
    return inner->isend(inner, buf, count, t, peer, tag, g, req);
}
static int nccl_irecv(const CommBackend *self, void *buf, size_t count, MistDtype t, int peer, int tag, CommGroup *g,
                      CommRequest **req) {
    const CommBackend *inner = comm_wrap_inner(self);
    if (on_device(nccl_of(self), buf)) return p2p_start(nccl_of(self), 0, buf, count, t, peer, g, req);
    return inner->irecv(inner, buf, count, t, peer, tag, g, req);
}
// blocking: a device message is a group of its own, completed as wait() would
static int blocking_p2p(const CommBackend *self, int send, void *buf, size_t count, MistDtype t, int peer,
                        CommGroup *g) {
    Nccl *x = nccl_of(self);
    CommRequest *req = NULL;
    if (x->p2p_open) return ERR_NCCL_GROUP_USAGE;
    int rc = p2p_start(x, send, buf, count, t, peer, g, &req);
    return rc ? rc : nccl_wait(self, req);
}
static int nccl_send(const CommBackend *self, const void *buf, size_t count, MistDtype t, int peer, int tag,
                     CommGroup *g) {
    const CommBackend *inner = comm_wrap_inner(self);
    if (!on_device(nccl_of(self), buf)) return inner->send(inner, buf, count, t, peer, tag, g);
    return blocking_p2p(self, 1, (void *)buf, count, t, peer, g);
}
static int nccl_recv(const CommBackend *self, void *buf, size_t count, MistDtype t, int peer, int tag, CommGroup *g) {
    const CommBackend *inner = comm_wrap_inner(self);
    if (!on_device(nccl_of(self), buf)) return inner->recv(inner, buf, count, t, peer, tag, g);
    return blocking_p2p(self, 0, buf, count, t, peer, g);
}

static void nccl_error_string(const CommBackend *self, int code, char *buf, size_t len) {
    const Nccl *x = nccl_of(self);
    switch (code) {
    case ERR_NCCL_SELF:
        snprintf(buf, len, "a device message to this rank itself outside a p2p group: NCCL pairs a send to self with "
                           "its receive only inside one group; start both between p2p_group(1) and p2p_group(0)");
        return;
    case ERR_NCCL_NO_COMM:
        snprintf(buf, len, "a device message on a group that has no NCCL communicator yet (making one is collective "
                           "over the whole group, a message has two of its ranks); make it first with "
                           "comm_nccl_prepare or a device collective on the group");
        return;
    case ERR_NCCL_GROUP_USAGE:
        snprintf(buf, len, "p2p_group misused: a group opened inside another, closed without being opened, or a "
                           "collective, a blocking message, wait() or test() on an NCCL request between "
                           "p2p_group(1) and p2p_group(0); end the group first");
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
                 r == x->last_result && x->last_detail[0] ? ": " : "", r == x->last_result ? x->last_detail : "");
        return;
    }
    x->wrap.inner->error_string(x->wrap.inner, code, buf, len);
}

const CommBackend *comm_nccl_new(const CommBackend *inner, Backend *be) {
    Nccl *x = calloc(1, sizeof *x);
    if (!x) return NULL;
    // NCCL connects every peer at init, not at the first collective that needs
    // each (runtime/comm_nccl_link.c says why); set before NCCL reads its environment
    setenv("NCCL_RUNTIME_CONNECT", "0", 0);
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

void comm_nccl_follow(const CommBackend *nccl, BackendStream *s) { nccl_of(nccl)->follow = s; }
void comm_nccl_stream_ordered(const CommBackend *nccl, int on) { nccl_of(nccl)->stream_ordered = on != 0; }
size_t comm_nccl_device_bytes(const CommBackend *nccl) { return nccl_of(nccl)->device_bytes; }
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
    comm_nccl_drain(nccl);  // NCCL's errors were the job's to see; none is left to report here
    if (x->ns) be->stream_synchronize(be, x->ns);
    nccl_links_destroy(x, x->links, x->num_links);
    for (int i = 0; i < x->slots_used; i++) be->event_destroy(be, x->slots[i].done);
    if (x->entered) be->event_destroy(be, x->entered);
    if (x->ns) be->stream_destroy(be, x->ns);
    free(x);
}
