// Collectives and messages of GPU memory through NCCL: a comm backend that
// wraps the MPI one. A collective or point-to-point message whose buffers lie
// in device memory (the compute backend's is_device_memory()) runs on NCCL,
// GPU to GPU over NVLink / PCIe / the network, without passing through host
// memory; host buffers (scalars on the stack, the tied embedding's sum) go to
// the inner MPI backend untouched, as do groups and barriers.
//
// Device messages (ncclSend / ncclRecv; peer is the rank in the group, and
// messages between two ranks match in the order they start, whatever their
// tags) need the group's communicator made before (comm_nccl_prepare, or a
// device collective on the group): one message involves two ranks, and making
// a communicator is collective over all of them. Those started between
// p2p_group(1) and p2p_group(0) (runtime/comm.h) are one NCCL group, so a send
// and a receive between the same two ranks cannot wait on each other; one
// started alone is a group of its own. A message to this rank itself is
// allowed inside a group (NCCL pairs it with its receive there, a device
// copy) and refused alone, where it would wait forever for its receive.
//
// Groups are the inner backend's (free them through this backend, which
// destroys their communicators): the first device collective on a group
// creates its NCCL communicator (rank 0 of the group makes the unique id and
// broadcasts it over the group's MPI communicator; every member is inside the
// same collective call, so they all create it together).
//
// Ordering: a collective (or a group of messages; each message completes as
// a collective does) runs on NCCL's own stream after the work already
// queued on the followed stream (comm_nccl_follow; the whole device is
// synchronised while none is set), so the GPU keeps computing while it moves.
// Completion (wait(), or the end of a blocking call):
// - host-ordered (the default): it returns once the collective has completed
//   (test() says whether it has), so afterwards any stream, and the host, may
//   use the buffers;
// - stream-ordered (comm_nccl_stream_ordered, with a followed stream): the
//   followed stream waits on the collective's end event and the call returns
//   at once; work queued on that stream afterwards sees the result, the host
//   after synchronising that stream (or comm_nccl_drain). The host checks such
//   collectives at every later completion (NCCL's asynchronous errors, the
//   timeout counted from the enqueue).
// A collective past the timeout (set_timeout) or an asynchronous NCCL error
// ends the job with a report naming the operation, like the MPI backend's.
//
// Communicators are made non-blocking (ncclCommInitRankConfig, waited on under
// the timeout); those of the groups given to comm_nccl_prepare are split off
// the world's (ncclCommSplit), with NCCL connecting everything at init
// (NCCL_RUNTIME_CONNECT=0), so its buffers are taken before the arenas. Every
// NCCL error's text carries NCCL's own (ncclGetLastError).
//
// Results: reductions are NCCL's: bit-identical on every rank of the group and
// run to run on the same machines, but the order of the additions is NCCL's
// (ring or tree), so sums can differ from the MPI backend's in the last bits.
// bf16 sums are added in fp32 and rounded at every step (as MPI's bf16 sum).
// f16 reductions are refused, as by the MPI backend.
//
// Each wrapper keeps its own communicators, stream, events and counts (its
// context): made by comm_nccl_new, destroyed by comm_nccl_free.
#ifndef MIST_COMM_NCCL_H
#define MIST_COMM_NCCL_H

#include "kernels/backend.h"
#include "runtime/comm.h"

// A new wrapper around `inner` (the MPI backend) for memory of `be`; NULL when
// out of host memory.
const CommBackend *comm_nccl_new(const CommBackend *inner, Backend *be);
// The stream whose queued work a collective's buffers come from (the model
// runtime's); NULL: synchronise the whole device before each collective.
void comm_nccl_follow(const CommBackend *nccl, BackendStream *s);
// Creates the world's NCCL communicator and splits one for each of groups[0, n)
// off it now rather than at their first device collective (collective over
// world: every rank passes the same number of slots, in the same order, each
// its own group or NULL where it has none of more than one rank; a slot that
// is the world itself is the world's communicator, not split): at start, so that NCCL takes its device memory (counted in
// comm_nccl_device_bytes) before the arenas take theirs. 0, or an error code
// of the backend.
int comm_nccl_prepare(const CommBackend *nccl, CommGroup *world, CommGroup *const *groups, int n);
// Completion as the followed stream waiting on each collective's end (1) or
// the host waiting for it (0, the default); see Ordering above.
void comm_nccl_stream_ordered(const CommBackend *nccl, int on);
// The host waits for every stream-ordered collective still in flight (under
// the timeout): 0, or the first NCCL error among them.
int comm_nccl_drain(const CommBackend *nccl);
// Device bytes NCCL's communicators took in comm_nccl_prepare (the device's
// free bytes before minus after; 0 where the backend cannot tell).
size_t comm_nccl_device_bytes(const CommBackend *nccl);
// Collectives that ran on NCCL through this wrapper so far.
long long comm_nccl_calls(const CommBackend *nccl);
// NCCL communicators this wrapper has created so far.
int comm_nccl_communicators(const CommBackend *nccl);
// NCCL's version as text ("2.28.3"), or why it cannot say.
const char *comm_nccl_version(void);
// Destroys the wrapper's NCCL communicators (finalised together, then
// destroyed in the same order on every rank, under the timeout), stream and
// events, and the wrapper. Call it before the groups are freed.
// NULL: nothing to free.
void comm_nccl_free(const CommBackend *nccl);

#endif
