// NCCL's API over MPI on host memory (tests/fake_nccl/nccl.h), so that the
// NCCL comm backend's own logic (communicators per group, in-place forms,
// dtypes, requests, errors) runs under mpirun on machines without GPUs.
// What it cannot show: NCCL's streams and its real transports.
//
// A communicator is an MPI communicator of the ranks that called
// ncclCommInitRank(Config) with the same id: the id names its rank 0 (world
// rank and a serial number); the others send that rank their world ranks and
// get the member list back, and MPI_Comm_create_group (collective over the
// members only) makes it. Non-blocking (config.blocking = 0), those messages
// are posted and ncclCommGetAsyncError moves them on, saying ncclInProgress
// until the communicator is made, as NCCL does. ncclCommSplit is
// MPI_Comm_split of the parent. MIST_FAKE_NCCL_FAIL=unique_id makes
// ncclGetUniqueId fail, =async makes ncclCommGetAsyncError report a remote
// error, =init makes a non-blocking init fail in progress (with a text for
// ncclGetLastError), =finalize makes ncclCommFinalize never finish. Sends
// and receives: below, at ncclGroupEnd.
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "nccl.h"

struct ncclComm {
    MPI_Comm comm;
    int rank, size;
    // a non-blocking init in progress: its posted messages and what they fill
    int pending, tag, root_world;
    int *members, *pairs, mine[2];
    MPI_Request *reqs;
    int nreq;
    ncclResult_t failed;  // a non-blocking call's end, once it has one
    int stuck;            // MIST_FAKE_NCCL_FAIL=finalize
    int nonblocking;      // made with config.blocking = 0
    int enqueueing;       // a group ended with ncclInProgress: busy until ncclCommGetAsyncError has said so once
};

static long collectives;
static int live, splits, inits_in_progress, finalized, groups_in_progress;
static char last_error[256] = "";
long fake_nccl_collectives(void) { return collectives; }
int fake_nccl_live_comms(void) { return live; }
int fake_nccl_splits(void) { return splits; }
int fake_nccl_inits_in_progress(void) { return inits_in_progress; }
int fake_nccl_finalized(void) { return finalized; }
int fake_nccl_groups_in_progress(void) { return groups_in_progress; }

static int failing(const char *what) {
    const char *fail = getenv("MIST_FAKE_NCCL_FAIL");
    return fail && !strcmp(fail, what);
}

ncclResult_t ncclGetVersion(int *version) {
    *version = 0;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
    static const char *text[] = {"no error", "unhandled cuda error", "unhandled system error", "internal error",
                                 "invalid argument", "invalid usage", "remote process exited or there was a network error",
                                 "NCCL operation in progress"};
    return (unsigned)r < sizeof text / sizeof *text ? text[r] : "unknown result code";
}
const char *ncclGetLastError(ncclComm_t comm) { return last_error; }

typedef struct {
    int32_t root_world, serial;
} FakeId;

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    static int32_t serial;
    if (failing("unique_id")) {
        snprintf(last_error, sizeof last_error, "fake NCCL: no unique id (MIST_FAKE_NCCL_FAIL=unique_id)");
        return ncclSystemError;
    }
    FakeId f;
    MPI_Comm_rank(MPI_COMM_WORLD, &f.root_world);
    f.serial = ++serial;
    memset(id, 0, sizeof *id);
    memcpy(id->internal, &f, sizeof f);
    return ncclSuccess;
}

// the members' messages posted: rank 0 receives every other member's (group
// rank, world rank), the others send theirs and receive the member list
static void post(struct ncclComm *c) {
    int n = c->size;
    c->nreq = 0;
    if (c->rank == 0) {
        c->members[0] = c->root_world;
        for (int i = 1; i < n; i++)
            MPI_Irecv(c->pairs + 2 * (i - 1), 2, MPI_INT, MPI_ANY_SOURCE, c->tag, MPI_COMM_WORLD, &c->reqs[c->nreq++]);
    } else {
        MPI_Comm_rank(MPI_COMM_WORLD, &c->mine[1]);
        c->mine[0] = c->rank;
        MPI_Isend(c->mine, 2, MPI_INT, c->root_world, c->tag, MPI_COMM_WORLD, &c->reqs[c->nreq++]);
        MPI_Irecv(c->members, n, MPI_INT, c->root_world, c->tag, MPI_COMM_WORLD, &c->reqs[c->nreq++]);
    }
}

// moves a pending init on: once every message has arrived, the communicator is made
static void progress(struct ncclComm *c) {
    int done = 0;
    MPI_Testall(c->nreq, c->reqs, &done, MPI_STATUSES_IGNORE);
    if (!done) return;
    int n = c->size;
    if (c->rank == 0) {
        for (int i = 1; i < n; i++) c->members[c->pairs[2 * (i - 1)]] = c->pairs[2 * (i - 1) + 1];
        for (int i = 1; i < n; i++) MPI_Send(c->members, n, MPI_INT, c->members[i], c->tag, MPI_COMM_WORLD);
    }
    MPI_Group world, g;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, n, c->members, &g);
    int rc = MPI_Comm_create_group(MPI_COMM_WORLD, g, c->tag, &c->comm);
    MPI_Group_free(&g);
    MPI_Group_free(&world);
    c->pending = 0;
    c->failed = rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
    if (rc == MPI_SUCCESS) live++;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int n, ncclUniqueId id, int rank, ncclConfig_t *config) {
    FakeId f;
    memcpy(&f, id.internal, sizeof f);
    if (n < 1 || rank < 0 || rank >= n) return ncclInvalidArgument;
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    c->rank = rank, c->size = n, c->tag = 1000 + f.serial % 20000, c->root_world = f.root_world;
    c->members = malloc((size_t)n * sizeof *c->members);
    c->pairs = malloc((size_t)2 * (size_t)n * sizeof *c->pairs);
    c->reqs = malloc((size_t)(n + 1) * sizeof *c->reqs);
    if (!c->members || !c->pairs || !c->reqs) return ncclSystemError;
    *out = c;
    c->pending = 1;
    int blocking = !config || config->blocking;
    c->nonblocking = !blocking;
    if (!blocking && failing("init")) {
        c->pending = 0, c->failed = ncclSystemError;
        snprintf(last_error, sizeof last_error, "fake NCCL: init failed on purpose (MIST_FAKE_NCCL_FAIL=init)");
        inits_in_progress++;
        return ncclInProgress;
    }
    post(c);
    if (!blocking) {
        inits_in_progress++;
        return ncclInProgress;
    }
    while (c->pending) progress(c);
    return c->failed;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int n, ncclUniqueId id, int rank) {
    return ncclCommInitRankConfig(out, n, id, rank, NULL);
}

ncclResult_t ncclCommSplit(ncclComm_t parent, int color, int key, ncclComm_t *out, ncclConfig_t *config) {
    MPI_Comm sub;
    *out = NULL;
    if (MPI_Comm_split(parent->comm, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &sub) != MPI_SUCCESS)
        return ncclSystemError;
    if (sub == MPI_COMM_NULL) return ncclSuccess;
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    c->comm = sub;
    c->nonblocking = config && !config->blocking;
    MPI_Comm_rank(sub, &c->rank);
    MPI_Comm_size(sub, &c->size);
    *out = c;
    splits++;
    live++;
    return ncclSuccess;
}

// the collective half of a destroy: every member flushes (a barrier here)
ncclResult_t ncclCommFinalize(ncclComm_t c) {
    if (!c || c->pending) return ncclInvalidUsage;
    if (failing("finalize")) {
        c->stuck = 1;
        return ncclInProgress;
    }
    finalized++;
    return MPI_Barrier(c->comm) == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
    if (!c) return ncclInvalidArgument;
    if (!c->pending && c->failed == ncclSuccess) {
        MPI_Comm_free(&c->comm);
        live--;
    }
    free(c->members), free(c->pairs), free(c->reqs);
    free(c);
    return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t c) { return ncclCommDestroy(c); }
// A pending init is moved on; MIST_FAKE_NCCL_FAIL=async: every communicator reports a peer's failure
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *state) {
    if (c->pending) progress(c);
    int enqueueing = c->enqueueing;
    c->enqueueing = 0;  // a group's messages are enqueued once asked about
    if (c->pending || c->stuck || enqueueing) *state = ncclInProgress;
    else if (c->failed != ncclSuccess) *state = c->failed;
    else if (failing("async")) {
        snprintf(last_error, sizeof last_error, "fake NCCL: a peer failed (MIST_FAKE_NCCL_FAIL=async)");
        *state = ncclRemoteError;
    } else *state = ncclSuccess;
    return ncclSuccess;
}

// bf16: sum in fp32 rounded after every add, max of the values
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) b[i] = mist_f32_to_bf16(mist_bf16_to_f32(a[i]) + mist_bf16_to_f32(b[i]));
}
static void bf16_max(void *in, void *inout, int *len, MPI_Datatype *dt) {
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        if (mist_bf16_to_f32(a[i]) > mist_bf16_to_f32(b[i])) b[i] = a[i];
}

// what a call moves, in MPI's terms
typedef struct {
    MPI_Datatype dt;
    MPI_Op op;
    size_t size;  // bytes per element
} Kind;

// the call's element type and reduction (ncclSum where it reduces nothing) in
// MPI's terms, counted as one collective; -1 for what the backend never asks
static int begin(ncclDataType_t t, ncclRedOp_t op, Kind *k) {
    static MPI_Op sum16 = MPI_OP_NULL, max16 = MPI_OP_NULL;
    if (sum16 == MPI_OP_NULL) MPI_Op_create(bf16_sum, 1, &sum16), MPI_Op_create(bf16_max, 1, &max16);
    if (op != ncclSum && op != ncclMax) return -1;
    k->op = op == ncclMax ? MPI_MAX : MPI_SUM;
    switch (t) {
    case ncclFloat32: k->dt = MPI_FLOAT, k->size = 4; break;
    case ncclInt32: k->dt = MPI_INT32_T, k->size = 4; break;
    case ncclUint8: k->dt = MPI_UINT8_T, k->size = 1; break;
    case ncclBfloat16: k->dt = MPI_UINT16_T, k->size = 2, k->op = op == ncclMax ? max16 : sum16; break;
    default: return -1;
    }
    collectives++;
    return 0;
}

// a group of this communicator's ended with ncclInProgress and nobody has asked since (NCCL's rule)
static int busy(const struct ncclComm *c) {
    if (c->enqueueing)
        snprintf(last_error, sizeof last_error, "fake NCCL: a call on a communicator still enqueueing a group");
    return c->enqueueing;
}

static ncclResult_t result(int mpi_rc) { return mpi_rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError; }

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t c, cudaStream_t stream) {
    Kind k;
    if (busy(c)) return ncclInvalidUsage;
    if (begin(t, op, &k)) return ncclInvalidArgument;
    return result(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, k.dt, k.op, c->comm));
}

// NCCL's in-place form: recv is this rank's block of send
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t c, cudaStream_t stream) {
    Kind k;
    if (busy(c)) return ncclInvalidUsage;
    if (begin(t, op, &k)) return ncclInvalidArgument;
    void *tmp = malloc(count * k.size + 1);
    if (!tmp) return ncclSystemError;
    int rc = MPI_Reduce_scatter_block(send, tmp, (int)count, k.dt, k.op, c->comm);
    memcpy(recv, tmp, count * k.size);
    free(tmp);
    return result(rc);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t c,
                           cudaStream_t stream) {
    Kind k;
    if (busy(c)) return ncclInvalidUsage;
    if (begin(t, ncclSum, &k)) return ncclInvalidArgument;
    int in_place = (const char *)send == (char *)recv + (size_t)c->rank * count * k.size;
    return result(MPI_Allgather(in_place ? MPI_IN_PLACE : send, (int)count, k.dt, recv, (int)count, k.dt, c->comm));
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t stream) {
    Kind k;
    if (busy(c)) return ncclInvalidUsage;
    if (root < 0 || root >= c->size || begin(t, ncclSum, &k)) return ncclInvalidArgument;
    if (c->rank == root && send != recv) memmove(recv, send, count * k.size);
    return result(MPI_Bcast(recv, (int)count, k.dt, root, c->comm));
}

// Point to point: the sends and receives of a group start together as MPI
// nonblocking messages at ncclGroupEnd, which returns when all are done (the
// stand-in's stream is the calling thread); one outside a group is a group of
// its own. Between two ranks they match in the order they start, as in NCCL
// (a send to this rank itself pairs with its receive inside one group). As
// NCCL on non-blocking communicators, ncclGroupEnd then says ncclInProgress,
// and each of the group's communicators refuses every call (ncclInvalidUsage)
// until ncclCommGetAsyncError has been asked about it.
enum { FAKE_MAX_P2P = 4096 };
static struct {
    int open, n;
    MPI_Request req[FAKE_MAX_P2P];
    ncclComm_t comm[FAKE_MAX_P2P];
} group;

ncclResult_t ncclGroupStart(void) {
    group.open = 1;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    int rc = MPI_Waitall(group.n, group.req, MPI_STATUSES_IGNORE), in_progress = 0;
    for (int i = 0; i < group.n; i++)
        if (group.comm[i]->nonblocking) group.comm[i]->enqueueing = in_progress = 1;
    groups_in_progress += in_progress;
    group.open = 0, group.n = 0;
    return rc != MPI_SUCCESS ? ncclSystemError : in_progress ? ncclInProgress : ncclSuccess;
}

static ncclResult_t p2p(int send, void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c) {
    Kind k;
    if (busy(c)) return ncclInvalidUsage;
    if (peer < 0 || peer >= c->size || begin(t, ncclSum, &k) || group.n == FAKE_MAX_P2P) return ncclInvalidArgument;
    int alone = !group.open;
    group.comm[group.n] = c;
    MPI_Request *r = &group.req[group.n++];
    int rc = send ? MPI_Isend(buf, (int)count, k.dt, peer, 0, c->comm, r)
                  : MPI_Irecv(buf, (int)count, k.dt, peer, 0, c->comm, r);
    if (rc != MPI_SUCCESS) return ncclSystemError;
    return alone ? ncclGroupEnd() : ncclSuccess;
}

ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t stream) {
    return p2p(1, (void *)send, count, t, peer, c);
}
ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t stream) {
    return p2p(0, recv, count, t, peer, c);
}
