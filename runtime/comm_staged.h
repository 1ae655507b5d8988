// Collectives on GPU memory without NCCL: a comm backend that wraps another
// (MPI) and copies every buffer that lies in device memory through a host
// bounce buffer. MPI built without CUDA support reads host memory only; with
// this wrapper data and tensor parallelism run on GPUs anyway, at the cost of
// a device->host copy when a collective starts (after the device has finished
// the work queued before it) and a host->device copy when it completes. A
// nonblocking staged call returns once the inner call has started on its
// bounce buffer, so the collective runs beside the GPU's next kernels; its
// result lands when wait() (or test() reporting done) completes it.
//
// What is staged: a buffer for which the compute backend's is_device_memory()
// says so. Host buffers (scalars on the stack) go to the inner backend
// untouched. Each staged call runs the inner backend's same call, with the
// same counts, on the bounce buffer, so results are the bits the inner
// backend would give on host memory. Point-to-point messages of device memory
// (the pipeline's boundaries) are staged too: a send copies its buffer to the
// host when it starts, a receive copies the message to the device when it
// completes; each starts on its own (no p2p_group: MPI's nonblocking messages
// never wait on each other's order).
//
// Bounce buffers are pinned host memory from the compute backend, one per
// staged operation in flight, kept and reused: each grows to the largest
// operation it has carried (the first training step sees them all; later
// steps allocate nothing); comm_staged_host_bytes() says how much they hold.
// Each wrapper keeps its own bounce buffers and counts (its context).
#ifndef MIST_COMM_STAGED_H
#define MIST_COMM_STAGED_H

#include "kernels/backend.h"
#include "runtime/comm.h"

// A new wrapper around `inner` for memory of `be`; NULL when out of host memory.
const CommBackend *comm_staged_new(const CommBackend *inner, Backend *be);
// Pinned host bytes the wrapper's bounce buffers hold now.
size_t comm_staged_host_bytes(const CommBackend *staged);
// Calls the wrapper has staged so far (one or more buffers in device memory).
long long comm_staged_calls(const CommBackend *staged);
// Frees the bounce buffers (with the compute backend they came from) and the
// wrapper; no staged operation may be in flight. NULL: nothing to free.
void comm_staged_free(const CommBackend *staged);

#endif
