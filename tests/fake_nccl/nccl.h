// A stand-in for NCCL's header, for tests without GPUs: the part of NCCL's
// API that runtime/comm_nccl.c uses, with the same names, types and values.
// tests/fake_nccl/nccl_fake.c implements it over MPI on host memory (the CPU
// backend's "device" arena), synchronously: each call has completed when it
// returns (the sends and receives of a group when ncclGroupEnd returns). Built into tests/test_comm_nccl_fake only; never into mist-train.
#ifndef MIST_FAKE_NCCL_H
#define MIST_FAKE_NCCL_H
#include <stddef.h>

#define MIST_FAKE_NCCL 1
typedef struct CUstream_st *cudaStream_t;
typedef struct ncclComm *ncclComm_t;
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;

typedef enum {
    ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
    ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7, ncclNumResults = 8
} ncclResult_t;
typedef enum {
    ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5,
    ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9
} ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
// the fields of NCCL's config that the backend sets (blocking: 0 makes init,
// split and finalize return ncclInProgress until ncclCommGetAsyncError says otherwise)
typedef struct { int blocking, splitShare; } ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER {1, 0}
#define NCCL_SPLIT_NOCOLOR -1

ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *state);
const char *ncclGetErrorString(ncclResult_t result);
const char *ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t t, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

// test knobs: calls into the fake so far (collectives), communicators alive,
// communicators made by split, non-blocking inits that returned ncclInProgress,
// finalized before their destroy, groups of sends and receives whose ncclGroupEnd
// said ncclInProgress (non-blocking communicators)
long fake_nccl_collectives(void);
int fake_nccl_live_comms(void);
int fake_nccl_splits(void);
int fake_nccl_inits_in_progress(void);
int fake_nccl_finalized(void);
int fake_nccl_groups_in_progress(void);
#endif
