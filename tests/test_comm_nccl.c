// The NCCL comm backend (runtime/comm_nccl.c) under mpirun. Built twice:
// - tests/test_comm_nccl_fake, against the NCCL stand-in of tests/fake_nccl
//   (MPI on host memory), so the backend's own logic runs without GPUs, with
//   the CPU backend's device memory;
// - tests/test_comm_nccl_gpu (builds with NCCL), against NCCL itself on the
//   CUDA backend, one GPU per rank, every buffer in managed memory (the suite
//   writes and reads its buffers from the host); without a GPU it skips.
// The collective suite (tests/comm_suite.h) runs through it on the same groups
// as tests/test_comm.c (one NCCL communicator per group, made on first use),
// first synchronising the device before each collective, then following a
// stream; host buffers go to MPI, untouched by NCCL; mixed placements, device
// and f16 sums are refused with messages; device point-to-point
// messages in one group complete whatever order each rank starts them in (a
// message to itself too, refused alone; the group's misuses and a group
// without a communicator refused with messages); with the stand-in a
// failed ncclGetUniqueId fails the collective on every rank of the group
// (nobody waits) and release destroys every communicator; an operation that
// never completes (its end event never passes: a backend whose event_query
// always says "running") returns NCCL's asynchronous error when one is
// reported, and with `--hang` (tests/comm.sh) runs into the timeout: every
// rank reports it and the job ends with exit code 4.
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>  // sleep (--hang-init)

#include <nccl.h>
#include "runtime/comm_mpi.h"
#include "runtime/comm_nccl.h"
#include "runtime/launch.h"
#include "tests/comm_suite.h"
#include "tests/comm_hier_suite.h"

#ifndef MIST_FAKE_NCCL
#include <cuda_runtime_api.h>
// managed memory: NCCL reads and writes it as device memory, the suite from the host
static void *managed_alloc(Backend *b, size_t bytes) {
    void *p = NULL;
    return cudaMallocManaged(&p, bytes ? bytes : 1, cudaMemAttachGlobal) == cudaSuccess ? p : NULL;
}
static void managed_free(Backend *b, void *p) { cudaFree(p); }
static int managed_is_device(Backend *b, const void *p) {
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeManaged || a.type == cudaMemoryTypeDevice;
}
#endif

// The backend whose memory the collectives move, or NULL with the reason (GPU build: no GPU).
static Backend *device_backend(const Launch *L, char *err, size_t errlen) {
#ifdef MIST_FAKE_NCCL
    return backend_cpu_create(MIST_F32, err, errlen);
#else
    if (strncmp(L->device, "cuda:", 5) != 0) {
        snprintf(err, errlen, "no GPU for this rank (device %s)", L->device);
        return NULL;
    }
    if (L->gpu_shared) {
        snprintf(err, errlen, "%d ranks share %d GPUs on this host: NCCL needs one GPU per rank", L->local_size,
                 L->gpus_in_use);
        return NULL;
    }
    Backend *b = backend_cuda_create(MIST_BF16, atoi(L->device + 5), err, errlen);
    if (b) b->alloc_device = managed_alloc, b->free_device = managed_free, b->is_device_memory = managed_is_device;
    return b;
#endif
}

static int refused(int rc, const char *needle, const char *what) {
    char text[512] = "";
    if (rc) C->error_string(C, rc, text, sizeof text);
    int good = rc != 0 && strstr(text, needle) != NULL;
    check(good, "%s: %s", what, rc ? text : "not refused");
    return good;
}

#ifdef MIST_FAKE_NCCL
static int never_done(Backend *b, BackendEvent *e) { return 0; }

// --hang: a device all-reduce whose end never comes, a 1 s timeout: never returns (exit 4)
static int hang_mode(const CommBackend *mpi, CommGroup *world) {
    char err[512];
    dev_be = backend_cpu_create(MIST_F32, err, sizeof err);
    if (!dev_be) return 1;
    dev_be->event_query = never_done;
    C = comm_nccl_new(mpi, dev_be);
    C->set_timeout(C, 1.0);
    C->set_context(C, "hang test");
    float *d = buf_alloc(4 * sizeof(float));
    int rc = C->all_reduce(C, d, d, 4, MIST_F32, COMM_SUM, world);
    fprintf(stderr, "rank %d: the hung all_reduce returned %d instead of ending the job\n", me, rc);
    return 1;
}

// --hang-init: rank 1 never reaches the communicator's creation that a device all-reduce
// starts on rank 0; a 1 s timeout ends the job (exit 4) instead of NCCL's unbounded init
static int hang_init_mode(const CommBackend *mpi, CommGroup *world) {
    char err[512];
    dev_be = backend_cpu_create(MIST_F32, err, sizeof err);
    if (!dev_be) return 1;
    C = comm_nccl_new(mpi, dev_be);
    C->set_timeout(C, 1.0);
    C->set_context(C, "init test");
    if (me != 0) {
        sleep(30);  // stuck elsewhere; the job must have ended long before
        return 1;
    }
    float *d = buf_alloc(4 * sizeof(float));
    int rc = C->all_reduce(C, d, d, 4, MIST_F32, COMM_SUM, world);
    fprintf(stderr, "rank %d: the all_reduce without its peer returned %d instead of ending the job\n", me, rc);
    return 1;
}

// --hang-destroy: NCCL's finalize never finishes (the stand-in's knob): a 1 s timeout ends
// the job (exit 4) instead of a destroy that waits forever
static int hang_destroy_mode(const CommBackend *mpi, CommGroup *world) {
    char err[512];
    dev_be = backend_cpu_create(MIST_F32, err, sizeof err);
    if (!dev_be) return 1;
    C = comm_nccl_new(mpi, dev_be);
    C->set_timeout(C, 1.0);
    C->set_context(C, "destroy test");
    float *d = buf_alloc(4 * sizeof(float));
    int rc = C->all_reduce(C, d, d, 4, MIST_F32, COMM_SUM, world);
    setenv("MIST_FAKE_NCCL_FAIL", "finalize", 1);
    comm_nccl_free(C);
    fprintf(stderr, "rank %d: the destroy returned (all_reduce %d) instead of ending the job\n", me, rc);
    return 1;
}
#endif

static int elsewhere;  // the stand-in's collectives through other wrappers than C

// of dp and tp, the groups of every rank in the world's order (at more than one rank): those
// borrow the world's NCCL communicator when prepared (the stand-in's runs prepare them)
static int world_like(const CommBackend *mpi, CommGroup *world, Grid *grid) {
#ifdef MIST_FAKE_NCCL
    int k = 0, n = mpi->group_size(mpi, world);
    CommGroup *g[2] = {grid->dp, grid->tp};
    for (int i = 0; i < 2; i++) {
        int same = n > 1 && mpi->group_size(mpi, g[i]) == n && mpi->group_rank(mpi, g[i]) == me, all = 0;
        MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        k += all;
    }
    return k;
#else
    return 0;
#endif
}

// every device collective ran on NCCL, one communicator per group; host buffers go to MPI
static void test_routing(const CommBackend *mpi, CommGroup *world, Grid *grid, int n) {
    // one communicator per group (borrowed ones aside), every device collective on NCCL
    long long before = comm_nccl_calls(C);
    int want = 4 - world_like(mpi, world, grid);
    check(comm_nccl_communicators(C) == want, "one NCCL communicator per group: %d made of %d (world, split, dp, tp)",
          comm_nccl_communicators(C), want);
#ifdef MIST_FAKE_NCCL
    check(fake_nccl_live_comms() == want && fake_nccl_collectives() - elsewhere == before && before > 100,
          "every device collective ran in NCCL: %lld calls, %ld in the stand-in, %d communicators alive", before,
          fake_nccl_collectives(), fake_nccl_live_comms());
#endif
    {
        int32_t h = me + 1;  // host memory: the MPI backend's
        int rc = C->all_reduce(C, &h, &h, 1, MIST_I32, COMM_SUM, world);
        check(rc == 0 && h == n * (n + 1) / 2 && comm_nccl_calls(C) == before,
              "a host buffer's all_reduce goes to MPI (sum %d, NCCL calls unchanged)", (int)h);
    }
    {
        // reduce_scatter with the result at the start of send (the MPI backend's other in-place form)
        int good = 1;
        size_t count = 5;
        float *buf = buf_alloc((size_t)n * count * sizeof(float));
        for (size_t i = 0; i < (size_t)n * count; i++) buf[i] = (float)val(me, i);
        good = C->reduce_scatter(C, buf, buf, count, MIST_F32, COMM_SUM, world) == 0;
        EXPECT_ALL(buf, MIST_F32, count, reduce_val(COMM_SUM, n, (size_t)me * count + i), "reduce_scatter at start");
        check(good, "reduce_scatter with recv == send: this rank's block at the start");
        buf_free(buf);
    }
}

// one group of device messages: every rank sends `out` to `to` and receives `in` from `from`
// (its send started first); 0 once both have completed
static int p2p_pair(float *out, int to, float *in, int from, int count, CommGroup *g) {
    CommRequest *rq[2] = {NULL, NULL};
    int rc = C->p2p_group(C, 1);
    rc |= C->isend(C, out, count, MIST_F32, to, 9, g, &rq[0]);
    rc |= C->irecv(C, in, count, MIST_F32, from, 9, g, &rq[1]);
    rc |= C->p2p_group(C, 0);
    if (!rc) rc = C->wait(C, rq[0]) | C->wait(C, rq[1]);
    return rc;
}

// Device point-to-point in one group: every rank sends to the next and receives from
// the previous one, each starting its send first. Without the group the sends would
// wait on each other (ncclSend waits for its receiver); in one they all complete.
// A rank's message to itself pairs with its receive in one group and is refused alone.
static void test_p2p(const CommBackend *mpi, CommGroup *world, int n) {
    float *out = buf_alloc(4 * sizeof(float)), *in = buf_alloc(4 * sizeof(float));
    for (int i = 0; i < 4; i++) out[i] = (float)(100 * me + i), in[i] = -1.0f;
    int next = (me + 1) % n, prev = (me + n - 1) % n;
#ifdef MIST_FAKE_NCCL
    int in_progress = fake_nccl_groups_in_progress();
#endif
    int rc = p2p_pair(out, next, in, prev, 4, world), good = !rc;
    for (int i = 0; i < 4; i++) good &= in[i] == (float)(100 * prev + i);
    check(good, "device point-to-point ring in one group: rank %d got %g .. %g from rank %d", me, in[0], in[3], prev);
#ifdef MIST_FAKE_NCCL
    // the stand-in's non-blocking communicators refuse every call until the group is settled
    check(fake_nccl_groups_in_progress() > in_progress && C->all_reduce(C, in, in, 4, MIST_F32, COMM_MAX, world) == 0,
          "a group's end that says ncclInProgress is settled before the communicator's next call");
#endif
    // alone (a group of its own each): rank 0 sends to 1 first, 1 receives first
    for (int i = 0; i < 4; i++) in[i] = -1.0f;
    rc = 0;
    if (n >= 2 && me == 0) rc = C->send(C, out, 4, MIST_F32, 1, 9, world);
    if (n >= 2 && me == 1) rc = C->recv(C, in, 4, MIST_F32, 0, 9, world);
    check(!rc && (me != 1 || in[3] == 3.0f), "blocking device send / recv between ranks 0 and 1 (rank %d: %g)", me,
          in[3]);
    // to itself: NCCL pairs the send with its receive inside one group only
    for (int i = 0; i < 4; i++) in[i] = -1.0f;
    rc = p2p_pair(out, me, in, me, 4, world);
    check(!rc && in[0] == out[0] && in[3] == out[3], "a device send to itself and its receive in one group: %g .. %g",
          in[0], in[3]);
    refused(C->send(C, out, 4, MIST_F32, me, 9, world), "itself", "a device send to itself alone refused");
    // the group's rules
    refused(C->p2p_group(C, 0), "p2p_group misused", "a p2p group ended without being opened refused");
    rc = C->p2p_group(C, 1);
    refused(C->p2p_group(C, 1), "p2p_group misused", "a p2p group inside another refused");
    refused(C->all_reduce(C, out, out, 4, MIST_F32, COMM_SUM, world), "p2p_group misused",
            "a collective inside an open p2p group refused");
    check(!rc && C->p2p_group(C, 0) == 0, "a p2p group without messages opens and ends");
    // a group whose communicator has not been made: one message cannot make it (collective over the group)
    CommGroup *fresh = NULL;
    commCheck(mpi, mpi->group_split(mpi, world, 0, me, &fresh));
    CommRequest *req = NULL;
    refused(C->isend(C, out, 4, MIST_F32, next, 9, fresh, &req), "no NCCL communicator",
            "a device message on a group without a communicator refused");
    check(req == NULL, "a refused isend hands back no request");
    C->group_free(C, fresh);
    buf_free(out), buf_free(in);
}

// what the NCCL path refuses: mixed host/device buffers, f16 sums, overlaps
static void test_refusals(CommGroup *world) {
    {
        float *d = buf_alloc(8 * sizeof(float)), h[8] = {0};
        uint16_t *d16 = buf_alloc(8 * sizeof(uint16_t));
        refused(C->all_reduce(C, h, d, 8, MIST_F32, COMM_SUM, world), "host memory", "host send, device recv refused");
        refused(C->all_reduce(C, d16, d16, 8, MIST_F16, COMM_SUM, world), "f16", "f16 sum of device memory refused");
        refused(C->all_gather(C, d + 1, d, 2, MIST_F32, world), "overlap", "overlapping buffers not in place refused");
        buf_free(d), buf_free(d16);
    }
}

static void test_group_free(const CommBackend *mpi, CommGroup *world, Grid *grid, int n) {
    {
        // a group freed through the backend takes its communicator along: the next group (often at
        // the same address) gets its own, or its sums would be the previous group's
        int made0 = comm_nccl_communicators(C), good = 1;
        for (int round = 0; round < 2; round++) {
            CommGroup *h = NULL;
            commCheck(mpi, mpi->group_split(mpi, world, round == 0 ? 0 : me % 2, me, &h));
            float *d = buf_alloc(sizeof(float));
            d[0] = (float)(me + 1);
            good &= C->all_reduce(C, d, d, 1, MIST_F32, COMM_SUM, h) == 0;
            float want = 0;
            for (int q = 0; q < n; q++)
                if (round == 0 || q % 2 == me % 2) want += (float)(q + 1);
            good &= d[0] == want;
            buf_free(d);
            C->group_free(C, h);
        }
        check(good && comm_nccl_communicators(C) == made0 + 2,
              "a freed group's communicator goes with it: the next group's sum is its own (%d made)",
              comm_nccl_communicators(C) - made0);
#ifdef MIST_FAKE_NCCL
        check(fake_nccl_live_comms() == 4 - world_like(mpi, world, grid), "... and is destroyed (%d alive: the suite's)",
              fake_nccl_live_comms());
#endif
    }
}

#ifdef MIST_FAKE_NCCL
static void test_async_error(CommGroup *world) {
    {
        // an operation still running when NCCL reports a peer's failure: the wait returns the error
        int (*query)(Backend *, BackendEvent *) = dev_be->event_query;
        dev_be->event_query = never_done;
        setenv("MIST_FAKE_NCCL_FAIL", "async", 1);
        float *d = buf_alloc(4 * sizeof(float));
        refused(C->all_reduce(C, d, d, 4, MIST_F32, COMM_SUM, world), "a peer failed (MIST_FAKE_NCCL_FAIL=async)",
                "an asynchronous NCCL error ends the wait with NCCL's text and ncclGetLastError's");
        unsetenv("MIST_FAKE_NCCL_FAIL");
        dev_be->event_query = query;
        buf_free(d);
    }
}

// stream-ordered completion: the followed stream waits on the end event, the host never polls
static int queries, follow_waits;
static BackendStream *followed;
static int counted_query(Backend *b, BackendEvent *e) { return ++queries, 1; }
static void counted_wait(Backend *b, BackendStream *s, BackendEvent *e) { follow_waits += s == followed; }

static void test_stream_ordered(CommGroup *world, BackendStream *compute, int n) {
    int (*query)(Backend *, BackendEvent *) = dev_be->event_query;
    void (*wait_event)(Backend *, BackendStream *, BackendEvent *) = dev_be->stream_wait_event;
    dev_be->event_query = counted_query, dev_be->stream_wait_event = counted_wait, followed = compute;
    comm_nccl_follow(C, compute);
    comm_nccl_stream_ordered(C, 1);
    float *d = buf_alloc(4 * sizeof(float));
    for (int i = 0; i < 4; i++) d[i] = (float)(me + 1);
    queries = follow_waits = 0;
    int rc = C->all_reduce(C, d, d, 4, MIST_F32, COMM_SUM, world);
    int sweeps = queries;  // the host looks once at what it has not seen end (itself), never loops
    CommRequest *req = NULL;
    int rc2 = C->iall_reduce(C, d, d, 4, MIST_F32, COMM_SUM, world, &req);
    if (!rc2) rc2 = C->wait(C, req);
    check(rc == 0 && rc2 == 0 && follow_waits == 2 && sweeps <= 1 && d[0] == (float)(n * (n + 1) / 2 * n),
          "stream-ordered: a blocking all_reduce and a wait are the followed stream waiting on the end event (%d waits, "
          "%d event queries; sum %g)", follow_waits, sweeps, d[0]);
    // a group of messages completes the same way: the followed stream waits on each one's end
    {
        float *out = buf_alloc(4 * sizeof(float)), *in = buf_alloc(4 * sizeof(float));
        for (int i = 0; i < 4; i++) out[i] = (float)(me + i), in[i] = -1.0f;
        int prev = (me + n - 1) % n;
        follow_waits = 0;
        int rc3 = p2p_pair(out, (me + 1) % n, in, prev, 4, world);
        check(rc3 == 0 && follow_waits == 2 && in[3] == (float)(prev + 3),
              "stream-ordered: a send and a receive in one group are two waits of the followed stream (%d; got %g)",
              follow_waits, in[3]);
        buf_free(out), buf_free(in);
    }
    // an asynchronous NCCL error still comes back on a later completion, with NCCL's text
    dev_be->event_query = never_done;
    setenv("MIST_FAKE_NCCL_FAIL", "async", 1);
    refused(C->all_reduce(C, d, d, 4, MIST_F32, COMM_SUM, world), "a peer failed",
            "stream-ordered: NCCL's asynchronous error is returned by the host's check");
    unsetenv("MIST_FAKE_NCCL_FAIL");
    dev_be->event_query = query, dev_be->stream_wait_event = wait_event;
    check(comm_nccl_drain(C) == 0, "drain: nothing left in flight");
    comm_nccl_stream_ordered(C, 0);
    buf_free(d);
}

// communicators: made non-blocking, split off the world's (a group of all the world's ranks in its
// order borrows the world's); init errors carry NCCL's own text
static void test_setup(const CommBackend *mpi, CommGroup *world, Grid *grid) {
    int before = fake_nccl_inits_in_progress();
    CommGroup *groups[2] = {grid->dp, grid->tp};
    int rc = comm_nccl_prepare(C, world, groups, 2), splits = 2 - world_like(mpi, world, grid);
    check(rc == 0 && fake_nccl_splits() == splits && comm_nccl_communicators(C) == 1 + splits &&
          fake_nccl_inits_in_progress() > before,
          "prepare: the world's communicator made non-blocking, dp's and tp's split off it or borrowing it (%d splits "
          "of %d expected, %d made)", fake_nccl_splits(), splits, comm_nccl_communicators(C));
    // ranks without a group in a slot (rank 0 here) take part in its split all the same
    {
        const CommBackend *c3 = comm_nccl_new(mpi, dev_be);
        CommGroup *rest = NULL;
        commCheck(mpi, mpi->group_split(mpi, world, me == 0, me, &rest));
        int n = mpi->group_size(mpi, world), mine = me != 0 && n > 2;  // a group of several ranks
        CommGroup *slots[1] = {mine ? rest : NULL};
        int splits0 = fake_nccl_splits();
        rc = comm_nccl_prepare(c3, world, slots, 1);
        float *d = buf_alloc(sizeof(float));
        d[0] = 1;
        int rc2 = mine ? c3->all_reduce(c3, d, d, 1, MIST_F32, COMM_SUM, rest) : 0;
        elsewhere += mine;
        float want = mine ? (float)(n - 1) : 1;
        check(rc == 0 && rc2 == 0 && d[0] == want && comm_nccl_communicators(c3) == 1 + mine &&
                  fake_nccl_splits() - splits0 == mine,
              "prepare with a rank that has no group in a slot: it splits without a colour, the others' sum is "
              "theirs (%g)", d[0]);
        buf_free(d);
        comm_nccl_free(c3);
        mpi->group_free(mpi, rest);
    }
    // the world in a slot (the pipeline's messages go over it): made, not split; messages then run on it
    {
        const CommBackend *c4 = comm_nccl_new(mpi, dev_be);
        CommGroup *slots[1] = {world};
        int splits0 = fake_nccl_splits(), n = mpi->group_size(mpi, world);
        rc = comm_nccl_prepare(c4, world, slots, 1);
        float *out = buf_alloc(sizeof(float)), *in = buf_alloc(sizeof(float));
        out[0] = (float)me, in[0] = -1;
        CommRequest *rq[2] = {NULL, NULL};
        int rc2 = c4->p2p_group(c4, 1);
        rc2 |= c4->isend(c4, out, 1, MIST_F32, (me + 1) % n, 9, world, &rq[0]);
        rc2 |= c4->irecv(c4, in, 1, MIST_F32, (me + n - 1) % n, 9, world, &rq[1]);
        rc2 |= c4->p2p_group(c4, 0);
        if (!rc2) rc2 = c4->wait(c4, rq[0]) | c4->wait(c4, rq[1]);
        check(rc == 0 && rc2 == 0 && fake_nccl_splits() == splits0 && comm_nccl_communicators(c4) == 1 &&
                  in[0] == (float)((me + n - 1) % n),
              "prepare with the world in a slot: one communicator, no split, a ring of messages on it (got %g)",
              in[0]);
        elsewhere += 2;  // the stand-in counts each message
        buf_free(out), buf_free(in);
        comm_nccl_free(c4);
    }
    // a non-blocking init that fails: NCCL's result and its ncclGetLastError text
    const CommBackend *c2 = comm_nccl_new(mpi, dev_be);
    const CommBackend *keep = C;
    C = c2;
    setenv("MIST_FAKE_NCCL_FAIL", "init", 1);
    float *d = buf_alloc(4 * sizeof(float));
    refused(C->all_reduce(C, d, d, 4, MIST_F32, COMM_SUM, world), "init failed on purpose",
            "a failed non-blocking init: the error names NCCL's result and its last error text");
    unsetenv("MIST_FAKE_NCCL_FAIL");
    buf_free(d);
    comm_nccl_free(C);
    C = keep;
}

#endif

int main(int argc, char **argv) {
    Launch L;
    if (launch_init(&argc, &argv, &L)) return 1;
    me = L.world_rank;
    int n = L.world_size;
    const CommBackend *mpi = comm_mpi_backend();
    C = mpi;
    CommGroup *world = NULL, *odd = NULL;
    Grid grid;
    if (suite_groups(n, &world, &odd, &grid)) return 1;
#ifdef MIST_FAKE_NCCL
    if (argc > 1 && !strcmp(argv[1], "--hang")) return hang_mode(mpi, world);
    if (argc > 1 && !strcmp(argv[1], "--hang-init")) return hang_init_mode(mpi, world);
    if (argc > 1 && !strcmp(argv[1], "--hang-destroy")) return hang_destroy_mode(mpi, world);
#endif

    char err[512];
    dev_be = device_backend(&L, err, sizeof err);
    int have = dev_be != NULL, all = 0;
    MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
        if (me == 0) {
            tap_skip(have ? "another rank has no GPU of its own" : err);
            tap_done();
        }
        launch_finalize();
        return 0;
    }
    C = comm_nccl_new(mpi, dev_be);
    check(!strcmp(C->name, "nccl"), "the wrapper calls itself nccl");
#ifdef MIST_FAKE_NCCL
    test_setup(mpi, world, &grid);
#endif

    // every collective with the device synchronised before it (no stream followed)
    test_group("nccl world", world);
    test_group("nccl split 3+rest", odd);
    // ... and in order after a followed stream's work
    BackendStream *compute = dev_be->stream_create(dev_be);
    comm_nccl_follow(C, compute);
    test_group("nccl grid dp", grid.dp);
    test_group("nccl grid tp", grid.tp);
    check(t_all_reduce(world, MIST_F32, COMM_SUM, (size_t)1 << 18, NONBLOCKING), "nccl world: all_reduce f32 of 2^18");
    check(t_reduce_scatter(world, MIST_BF16, COMM_SUM, (size_t)1 << 15, IN_PLACE), "nccl world: reduce_scatter bf16 2^15/rank");
    test_determinism(world, MIST_F32);
    test_determinism(world, MIST_BF16);
    test_concurrent(world);
    test_concurrent(odd);
    {  // the hierarchical collectives over the NCCL path, on an instance of their own (the
       // communicators of their subgroups are not counted with the suite's below)
        const CommBackend *suite = C;
#ifdef MIST_FAKE_NCCL
        long stand_in = fake_nccl_collectives();
#endif
        C = comm_nccl_new(mpi, dev_be);
        test_hier("nccl world", world, 2);
        test_hier("nccl world", world, 4);
        comm_nccl_free(C);
        C = suite;
#ifdef MIST_FAKE_NCCL
        elsewhere += (int)(fake_nccl_collectives() - stand_in);
#endif
    }
    test_errors(world);  // host buffers: the MPI backend's refusals pass through

    test_routing(mpi, world, &grid, n);
    test_refusals(world);
    test_p2p(mpi, world, n);
    test_group_free(mpi, world, &grid, n);
#ifdef MIST_FAKE_NCCL
    test_async_error(world);
    test_stream_ordered(world, compute, n);
#endif
    comm_nccl_follow(C, NULL);
#ifdef MIST_FAKE_NCCL
    int finalized = fake_nccl_finalized();
#endif
    comm_nccl_free(C);
    C = mpi;
#ifdef MIST_FAKE_NCCL
    check(fake_nccl_live_comms() == 0 && fake_nccl_finalized() - finalized == 4 - world_like(mpi, world, &grid),
          "release finalises, then destroys, every communicator (%d finalised, %d alive)",
          fake_nccl_finalized() - finalized, fake_nccl_live_comms());

    // rank 0 of a new group cannot make the unique id: every member's first
    // device collective on it fails, none waits for the others
    {
        C = comm_nccl_new(mpi, dev_be);
        CommGroup *pair = NULL;
        commCheck(mpi, mpi->group_split(mpi, world, me / 2, me, &pair));
        setenv("MIST_FAKE_NCCL_FAIL", "unique_id", 1);
        float *d = buf_alloc(4 * sizeof(float));
        refused(C->all_reduce(C, d, d, 4, MIST_F32, COMM_SUM, pair), "ncclGetUniqueId", "a failed unique id fails every member");
        unsetenv("MIST_FAKE_NCCL_FAIL");
        buf_free(d);
        comm_nccl_free(C);
        C = mpi;
        mpi->group_free(mpi, pair);
    }
#endif
    char version[64];
    snprintf(version, sizeof version, "%s", comm_nccl_version());
    check(strcmp(version, "unknown") != 0, "version text: %s", version);
    dev_be->stream_destroy(dev_be, compute);
    return suite_finish(mpi, world, odd, &grid);
}
