// The NCCL comm backend's communicators: made, split, settled and destroyed
// (runtime/comm_nccl_impl.h).
//
// Every communicator is made non-blocking (config.blocking = 0): the call
// returns at once and ncclCommGetAsyncError says when it is ready, so the wait
// runs under [cluster] comm_timeout instead of NCCL's unbounded one, and ends
// the job with a report naming the group when a member never comes.
//
// NCCL's buffers: NCCL connects its peers lazily by default, allocating the
// connection buffers (up to hundreds of MiB per communicator on NVLink) at the
// first collective that needs each algorithm and protocol, after the arenas
// have taken the card. NCCL_RUNTIME_CONNECT=0 (NCCL >= 2.22) makes init connect
// everything, so comm_nccl_prepare sees the whole cost in the device's free
// bytes (comm_nccl_new sets it, before NCCL's first call reads its
// environment; a value the user set wins). A warm-up collective would not do: a one-element all-reduce connects
// only the protocol its size picks (LL), not the Simple protocol and the NVLS
// or tree buffers that the large gradient all-reduces use later.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/comm_nccl_impl.h"

int nccl_rc(Nccl *x, ncclResult_t r, ncclComm_t comm) {
    if (r == ncclSuccess) return 0;
    x->last_result = r;
    // NCCL keeps the text of the calling thread's last error (comm may be NULL)
    const char *detail = ncclGetLastError(comm);
    snprintf(x->last_detail, sizeof x->last_detail, "%s", detail ? detail : "");
    return ERR_NCCL_BASE - (int)r;
}

double nccl_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// the host's wait between two polls: 1 us doubling to 1 ms (a ready
// communicator is seen at once, a slow one costs no core)
static void backoff(long *ns) {
    struct timespec ts = {0, *ns};
    nanosleep(&ts, NULL);
    if (*ns < 1000000) *ns *= 2;
}

static ncclConfig_t nonblocking(void) {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    c.blocking = 0;
    return c;
}

// The job ends (exit 4, as a hung collective): `what` on a group of `size` ranks
// has not finished after `waited` seconds.
static void report_stuck(const Nccl *x, const char *what, int rank, int size, double waited) {
    char msg[768];
    snprintf(msg, sizeof msg,
             "%s%s%s, on a group of %d ranks (this rank is %d in it), has not finished after %.0f s. Another rank "
             "of the group has not joined it: one may have died, be stuck, or be elsewhere in the program. Hint: "
             "[cluster] comm_timeout = %g s; raise it if NCCL's setup or teardown can legitimately take longer, 0 turns the "
             "check off",
             x->context, x->context[0] ? ": " : "", what, size, rank, waited, x->timeout);
    x->wrap.inner->abort(x->wrap.inner, 4, msg);
}

// Waits until the non-blocking call that made (or finalises) comm has finished:
// 0, or NCCL's error with its text; past the timeout the job ends.
int nccl_settle(Nccl *x, ncclComm_t comm, const char *what, int rank, int size) {
    double t0 = nccl_now();
    long pause = 1000;
    for (;;) {
        ncclResult_t state = ncclSuccess, r = ncclCommGetAsyncError(comm, &state);
        if (r != ncclSuccess) return nccl_rc(x, r, comm);
        if (state != ncclInProgress) return nccl_rc(x, state, comm);
        double waited = nccl_now() - t0;
        if (x->timeout > 0 && waited > x->timeout) report_stuck(x, what, rank, size, waited);
        backoff(&pause);
    }
}

static int free_link(Nccl *x) {
    for (int i = 0; i < x->num_links; i++)
        if (!x->links[i].g) return i;
    return x->num_links < MAX_LINKS ? x->num_links : -1;
}

static void keep(Nccl *x, int at, Link l) {
    x->made++;
    x->links[at] = l;
    if (at == x->num_links) x->num_links++;
}

const Link *nccl_link_find(const Nccl *x, const CommGroup *g) {
    for (int i = 0; i < x->num_links; i++)
        if (x->links[i].g == g) return &x->links[i];
    return NULL;
}

// A new communicator of g's members alone (collective over g): rank 0 of the
// group makes the unique id and sends it over the group's MPI communicator.
static int init_link(Nccl *x, const CommGroup *g, const Link **out) {
    const CommBackend *inner = x->wrap.inner;
    int at = free_link(x);
    if (at < 0) return ERR_NCCL_GROUPS;
    Link l = {g, NULL, inner->group_rank(inner, g), inner->group_size(inner, g), 0};
    // the id and whether rank 0 could make it, so that a failure there fails
    // every member instead of leaving them waiting in init
    struct {
        ncclUniqueId id;
        int32_t ok;
    } boot;
    memset(&boot, 0, sizeof boot);
    if (l.rank == 0) boot.ok = nccl_rc(x, ncclGetUniqueId(&boot.id), NULL) == 0;
    // non-blocking, so that a rank 0 that never comes runs into the timeout
    char ctx[sizeof x->context + 64];
    snprintf(ctx, sizeof ctx, "%s%screating an NCCL communicator", x->context, x->context[0] ? ": " : "");
    inner->set_context(inner, ctx);
    CommRequest *sent = NULL;
    int rc = inner->ibroadcast(inner, &boot, sizeof boot, MIST_U8, 0, (CommGroup *)g, &sent);
    if (!rc) rc = inner->wait(inner, sent);
    inner->set_context(inner, x->context);
    if (rc) return rc;
    if (!boot.ok) return ERR_NCCL_INIT;
    ncclConfig_t config = nonblocking();
    ncclResult_t r = ncclCommInitRankConfig(&l.comm, l.size, boot.id, l.rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) return nccl_rc(x, r, NULL);
    rc = nccl_settle(x, l.comm, "ncclCommInitRankConfig", l.rank, l.size);
    if (rc) {
        ncclCommAbort(l.comm);
        return rc;
    }
    keep(x, at, l);
    *out = &x->links[at];
    return 0;
}

int nccl_link_of(Nccl *x, const CommGroup *g, const Link **out) {
    if ((*out = nccl_link_find(x, g)) != NULL) return 0;
    return init_link(x, g, out);
}

// g's communicator split off the world's (collective over the world: every rank
// calls it for the same groups in the same order). Colour: the world rank of
// g's rank 0, the same for every member and different between groups. A group
// of every rank in the world's order (dp or tp alone) borrows the world's
// communicator instead (on every rank or none): another one would only cost
// NCCL's buffers again.
// g NULL: this rank takes part without a group of its own (NCCL_SPLIT_NOCOLOR).
static int split_link(Nccl *x, const Link *world, const CommGroup *g, CommGroup *world_group) {
    const CommBackend *inner = x->wrap.inner;
    int at = free_link(x);
    if (at < 0) return ERR_NCCL_GROUPS;
    Link l = {g, NULL, g ? inner->group_rank(inner, g) : 0, g ? inner->group_size(inner, g) : 0, 0};
    // (a one-rank world's groups split as any other: there are no peers to connect)
    int32_t same = g && l.size == world->size && l.rank == world->rank && l.size > 1;
    int rc = inner->all_reduce(inner, &same, &same, 1, MIST_I32, COMM_SUM, world_group);
    if (rc) return rc;
    ncclConfig_t config = nonblocking();
    if (!g) {
        ncclComm_t none = NULL;
        ncclResult_t r = ncclCommSplit(world->comm, NCCL_SPLIT_NOCOLOR, world->rank, &none, &config);
        if (r != ncclSuccess && r != ncclInProgress) return nccl_rc(x, r, world->comm);
        return nccl_settle(x, world->comm, "ncclCommSplit", world->rank, world->size);
    }
    if (same == world->size) {
        l.comm = world->comm, l.borrowed = 1;
        x->links[at] = l;
        if (at == x->num_links) x->num_links++;
        return 0;
    }
    int32_t colour = world->rank;
    rc = inner->broadcast(inner, &colour, 1, MIST_I32, 0, (CommGroup *)g);
    if (rc) return rc;
    // the split shares the world's buffers: every collective of this backend goes
    // on one stream, so the communicators never run at once anyway
    config.splitShare = 1;
    ncclResult_t r = ncclCommSplit(world->comm, (int)colour, l.rank, &l.comm, &config);
    if (r != ncclSuccess && r != ncclInProgress) return nccl_rc(x, r, world->comm);
    rc = nccl_settle(x, l.comm, "ncclCommSplit", l.rank, l.size);
    if (rc) {
        ncclCommAbort(l.comm);
        return rc;
    }
    keep(x, at, l);
    return 0;
}

int comm_nccl_prepare(const CommBackend *nccl, CommGroup *world, CommGroup *const *groups, int n) {
    Nccl *x = nccl_of(nccl);
    Backend *be = x->be;
    size_t before = 0, after = 0;
    int known = be->device_free_bytes && be->device_free_bytes(be, &before) == 0;
    const Link *w;
    int rc = nccl_link_of(x, world, &w);
    int wi = (int)(w ? w - x->links : 0);
    for (int i = 0; !rc && i < n; i++) {
        // the world in a slot (the pipeline's messages go over it) is the link just made:
        // no split (it is the world on every rank or on none)
        if (groups[i] == world) continue;
        // every rank takes part in every split (links do not move): one with no group of its
        // own in this slot, or whose group has its communicator already, without a colour
        rc = split_link(x, &x->links[wi], groups[i] && !nccl_link_find(x, groups[i]) ? groups[i] : NULL, world);
    }
    if (known && be->device_free_bytes(be, &after) == 0 && before > after) x->device_bytes += before - after;
    return rc;
}

void nccl_links_destroy(Nccl *x, Link *first, int n) {
    // ncclCommFinalize is the collective half of a destroy (it flushes the
    // communicator's work with its peers); started on all at once and waited
    // on together, no rank's order can block another's; ncclCommDestroy then
    // frees locally. Every rank goes through its links in the same order: the
    // last made first, so that split communicators go before the world's they share.
    int failed = 0;
    for (int i = 0; i < n; i++)
        if (first[i].borrowed) first[i] = (Link){0};  // its owner destroys the communicator
    for (int i = n - 1; i >= 0; i--)
        if (first[i].g && first[i].comm) {
            ncclResult_t r = ncclCommFinalize(first[i].comm);
            failed |= r != ncclSuccess && r != ncclInProgress;
        }
    double t0 = nccl_now();
    long pause = 1000;
    for (int busy = 1; busy && !failed;) {
        busy = 0;
        for (int i = 0; i < n; i++) {
            ncclResult_t state = ncclSuccess;
            if (!first[i].g || !first[i].comm) continue;
            if (ncclCommGetAsyncError(first[i].comm, &state) != ncclSuccess) failed = 1;
            else if (state == ncclInProgress) busy = 1;
            else if (state != ncclSuccess) failed = 1;
        }
        double waited = nccl_now() - t0;
        if (busy && x->timeout > 0 && waited > x->timeout)
            report_stuck(x, "ncclCommFinalize (destroying the NCCL communicators)", first[0].rank, first[0].size,
                         waited);
        if (busy) backoff(&pause);
    }
    for (int i = n - 1; i >= 0; i--)
        if (first[i].g && first[i].comm) {
            // a failed finalize leaves peers that may never answer: abort does not wait for them
            if (failed) ncclCommAbort(first[i].comm);
            else ncclCommDestroy(first[i].comm);
        }
    for (int i = 0; i < n; i++) first[i] = (Link){0};
}
