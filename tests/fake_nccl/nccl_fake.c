// NCCL's API over MPI on host memory (tests/fake_nccl/nccl.h), so that the
// NCCL comm backend's own logic (communicators per group, in-place forms,
// dtypes, requests, errors) runs under mpirun on machines without GPUs.
// What it cannot show: NCCL's streams and its real transports.
//
// A communicator is an MPI communicator of the ranks that called
// ncclCommInitRank with the same id: the id names its rank 0 (world rank and
// a serial number); the others send that rank their world ranks and get the
// member list back, and MPI_Comm_create_group (collective over the members
// only) makes it. MIST_FAKE_NCCL_FAIL=unique_id makes ncclGetUniqueId fail,
// =async makes ncclCommGetAsyncError report a remote error.
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "nccl.h"

struct ncclComm {
    MPI_Comm comm;
    int rank, size;
};

static long collectives;
static int live;
long fake_nccl_collectives(void) { return collectives; }
int fake_nccl_live_comms(void) { return live; }

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
const char *ncclGetLastError(ncclComm_t comm) { return "(fake NCCL)"; }

typedef struct {
    int32_t root_world, serial;
} FakeId;

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    static int32_t serial;
    const char *fail = getenv("MIST_FAKE_NCCL_FAIL");
    if (fail && !strcmp(fail, "unique_id")) return ncclSystemError;
    FakeId f;
    MPI_Comm_rank(MPI_COMM_WORLD, &f.root_world);
    f.serial = ++serial;
    memset(id, 0, sizeof *id);
    memcpy(id->internal, &f, sizeof f);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int n, ncclUniqueId id, int rank) {
    FakeId f;
    memcpy(&f, id.internal, sizeof f);
    if (n < 1 || rank < 0 || rank >= n) return ncclInvalidArgument;
    int tag = 1000 + f.serial % 20000, me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    int *members = malloc((size_t)n * sizeof *members);
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!members || !c) return ncclSystemError;
    if (rank == 0) {
        members[0] = me;
        for (int i = 1; i < n; i++) {
            int pair[2];
            MPI_Recv(pair, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            members[pair[0]] = pair[1];
        }
        for (int i = 1; i < n; i++) MPI_Send(members, n, MPI_INT, members[i], tag, MPI_COMM_WORLD);
    } else {
        int pair[2] = {rank, me};
        MPI_Send(pair, 2, MPI_INT, f.root_world, tag, MPI_COMM_WORLD);
        MPI_Recv(members, n, MPI_INT, f.root_world, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Group world, g;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, n, members, &g);
    int rc = MPI_Comm_create_group(MPI_COMM_WORLD, g, tag, &c->comm);
    MPI_Group_free(&g);
    MPI_Group_free(&world);
    free(members);
    if (rc != MPI_SUCCESS) {
        free(c);
        return ncclSystemError;
    }
    c->rank = rank, c->size = n;
    *out = c;
    live++;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
    if (!c) return ncclInvalidArgument;
    MPI_Comm_free(&c->comm);
    free(c);
    live--;
    return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t c) { return ncclCommDestroy(c); }
// MIST_FAKE_NCCL_FAIL=async: every communicator reports a peer's failure
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *state) {
    const char *fail = getenv("MIST_FAKE_NCCL_FAIL");
    *state = fail && !strcmp(fail, "async") ? ncclRemoteError : ncclSuccess;
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

static ncclResult_t result(int mpi_rc) { return mpi_rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError; }

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t c, cudaStream_t stream) {
    Kind k;
    if (begin(t, op, &k)) return ncclInvalidArgument;
    return result(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, k.dt, k.op, c->comm));
}

// NCCL's in-place form: recv is this rank's block of send
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t c, cudaStream_t stream) {
    Kind k;
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
    if (begin(t, ncclSum, &k)) return ncclInvalidArgument;
    int in_place = (const char *)send == (char *)recv + (size_t)c->rank * count * k.size;
    return result(MPI_Allgather(in_place ? MPI_IN_PLACE : send, (int)count, k.dt, recv, (int)count, k.dt, c->comm));
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t stream) {
    Kind k;
    if (root < 0 || root >= c->size || begin(t, ncclSum, &k)) return ncclInvalidArgument;
    if (c->rank == root && send != recv) memmove(recv, send, count * k.size);
    return result(MPI_Bcast(recv, (int)count, k.dt, root, c->comm));
}

// Point to point: the sends and receives of a group start together as MPI
// nonblocking messages at ncclGroupEnd, which returns when all are done (the
// stand-in's stream is the calling thread); one outside a group is a group of
// its own. Between two ranks they match in the order they start, as in NCCL.
enum { FAKE_MAX_P2P = 4096 };
static struct {
    int open, n;
    MPI_Request req[FAKE_MAX_P2P];
} group;

ncclResult_t ncclGroupStart(void) {
    group.open = 1;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    int rc = MPI_Waitall(group.n, group.req, MPI_STATUSES_IGNORE);
    group.open = 0, group.n = 0;
    return result(rc);
}

static ncclResult_t p2p(int send, void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c) {
    Kind k;
    if (peer < 0 || peer >= c->size || begin(t, ncclSum, &k) || group.n == FAKE_MAX_P2P) return ncclInvalidArgument;
    int alone = !group.open;
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
