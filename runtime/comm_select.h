// Which comm backend moves a compute backend's device memory: the MPI one
// (host memory: the CPU backend), NCCL (GPUs, one per rank, in builds with
// NCCL: runtime/comm_nccl.h) or the staged wrapper (GPUs otherwise, or
// MIST_COMM_STAGED=1: runtime/comm_staged.h). Host buffers go to MPI on every
// path. mist-train and mist-profile choose with it, so what mist-profile
// measures is what training uses.
#ifndef MIST_COMM_SELECT_H
#define MIST_COMM_SELECT_H

#include <stddef.h>
#include "kernels/backend.h"
#include "runtime/comm.h"

typedef enum { COMM_PATH_MPI = 0, COMM_PATH_NCCL = 1, COMM_PATH_STAGED = 2 } CommPath;

typedef struct {
    CommPath path;
    const CommBackend *comm;  // the backend to use
    char why[160];            // why not NCCL on a GPU, when that is so ("" otherwise)
    char detail[96];          // e.g. "NCCL 2.28.3"
    CommGroup *world;         // the job's (NCCL's sub-communicators are split off its)
} CommChoice;

// Collective over `world` (the whole job agrees: a collective runs on NCCL on
// all its ranks or on none): fills *out. Returns 0, or an error code of `mpi`.
int comm_select(const CommBackend *mpi, Backend *be, CommGroup *world, CommChoice *out);

// At start, before the device arenas are allocated: the groups that will carry
// collectives of device memory get their NCCL communicators now, split off the
// world's (collective over the world; every rank passes its groups in the same
// order, at most 8; groups of one rank need none), so that NCCL's buffers are
// taken first. A no-op off the NCCL path.
int comm_select_prepare(const CommChoice *c, CommGroup *const *groups, int n);
// The path in words: "NCCL 2.28.3", "staged through pinned host memory: <why>", "MPI on host memory".
void comm_select_describe(const CommChoice *c, char *buf, size_t len);
// Before the first collective of the model: the stream whose work a collective's
// buffers come from (NCCL orders its own stream after it). 1 when the path's
// collectives are stream-ordered after s (NCCL: enqueued after s's work, and s
// waits for their end): the caller needs no host synchronisation before one,
// nor after; 0 otherwise.
int comm_select_follow(const CommChoice *c, BackendStream *s);
// NCCL communicators this rank has made so far (0 on the other paths).
int comm_select_communicators(const CommChoice *c);
// Collectives that left MPI's hands (NCCL or staged) on this rank, and a line
// saying so, naming the rank ("" when none).
long long comm_select_device_calls(const CommChoice *c, int rank, char *line, size_t len);
// Frees what the path holds (NCCL communicators, bounce buffers) and its wrapper
// backend (c->comm is the MPI backend's or gone after); no operation in flight,
// groups still alive.
void comm_select_release(const CommChoice *c);

#endif
