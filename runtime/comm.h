// The comm backend: collectives and point-to-point messages over groups of
// ranks, as an interface struct of function pointers plus the instance's
// context, so that an NCCL backend can replace the MPI one (comm_mpi.c)
// without touching its callers.
//
// Conventions shared by every backend:
// - counts are elements of `dtype`, ranks are ranks inside the group;
// - every call returns 0 on success or a backend error code; error_string()
//   turns a code into text (use commCheck() for errors you cannot handle);
// - reductions give bit-identical results on every rank of the group, and
//   bf16 reductions add in fp32 and round to nearest even (mist_f32_to_bf16);
// - a nonblocking form (i...) starts the operation and hands back a request;
//   the buffers must stay untouched until wait() (or test() reporting done)
//   has completed it. wait/test release the request. Requests come from a
//   fixed pool (COMM_MAX_REQUESTS in flight), nothing is allocated per call.
#ifndef MIST_COMM_H
#define MIST_COMM_H

#include <stddef.h>
#include <stdio.h>
#include "base/dtype.h"

typedef struct CommBackend CommBackend;
typedef struct CommGroup CommGroup;      // opaque: a set of ranks with its own context
typedef struct CommRequest CommRequest;  // opaque: one operation in flight

typedef enum { COMM_SUM = 0, COMM_MAX = 1 } CommOp;

#define COMM_MAX_REQUESTS 1024

struct CommBackend {
    const char *name;  // "mpi", "nccl", "staged"
    void *ctx;         // the instance's own state (request pools, timeouts, communicators...)

    // Every op takes the backend it was reached through first (`self`), and
    // finds its state in self->ctx: c->all_reduce(c, c, ...). Two instances (a
    // staged wrapper per compute backend, say) share nothing.

    // ---- groups ----
    // A new group holding every rank of the job (the caller frees it).
    int (*group_world)(const CommBackend *self, CommGroup **out);
    // Collective over `parent`: ranks passing the same color form a group,
    // ordered by key (ties by parent rank). Every rank gets its own group.
    int (*group_split)(const CommBackend *self, CommGroup *parent, int color, int key, CommGroup **out);
    void (*group_free)(const CommBackend *self, CommGroup *g);
    int (*group_rank)(const CommBackend *self, const CommGroup *g);
    int (*group_size)(const CommBackend *self, const CommGroup *g);

    // ---- blocking collectives ----
    // recv[i] = op over ranks of send[i], i < count. send == recv: in place.
    int (*all_reduce)(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype dtype,
                      CommOp op, CommGroup *g);
    // send: (size * count) elements, block r for rank r; recv: (count): the
    // reduced block of this rank. In place when recv == send + rank*count.
    int (*reduce_scatter)(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype dtype,
                          CommOp op, CommGroup *g);
    // send: (count); recv: (size * count), block r from rank r.
    // In place when send == recv + rank*count.
    int (*all_gather)(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype dtype,
                      CommGroup *g);
    // buf: (count), root's contents end up on every rank.
    int (*broadcast)(const CommBackend *self, void *buf, size_t count, MistDtype dtype, int root, CommGroup *g);
    int (*send)(const CommBackend *self, const void *buf, size_t count, MistDtype dtype, int peer, int tag,
                CommGroup *g);
    int (*recv)(const CommBackend *self, void *buf, size_t count, MistDtype dtype, int peer, int tag, CommGroup *g);
    int (*barrier)(const CommBackend *self, CommGroup *g);

    // ---- nonblocking forms: same arguments, plus the request to wait on ----
    int (*iall_reduce)(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype dtype,
                       CommOp op, CommGroup *g, CommRequest **req);
    int (*ireduce_scatter)(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype dtype,
                           CommOp op, CommGroup *g, CommRequest **req);
    int (*iall_gather)(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype dtype,
                       CommGroup *g, CommRequest **req);
    int (*ibroadcast)(const CommBackend *self, void *buf, size_t count, MistDtype dtype, int root, CommGroup *g,
                      CommRequest **req);
    int (*isend)(const CommBackend *self, const void *buf, size_t count, MistDtype dtype, int peer, int tag,
                 CommGroup *g, CommRequest **req);
    int (*irecv)(const CommBackend *self, void *buf, size_t count, MistDtype dtype, int peer, int tag, CommGroup *g,
                 CommRequest **req);
    int (*ibarrier)(const CommBackend *self, CommGroup *g, CommRequest **req);
    // Optional (NULL: every message starts on its own, as on MPI): the isend / irecv calls
    // between p2p_group(self, 1) and p2p_group(self, 0) start together, as one NCCL group,
    // so that messages whose peers start them in another order cannot wait on each other.
    // No other call and no wait may come between the two.
    int (*p2p_group)(const CommBackend *self, int begin);
    int (*wait)(const CommBackend *self, CommRequest *req);             // completes and releases req
    int (*test)(const CommBackend *self, CommRequest *req, int *done);  // *done = 1: completed and released

    // ---- errors ----
    void (*error_string)(const CommBackend *self, int code, char *buf, size_t len);
    // Ends the whole job from any rank (other ranks do not hang); never returns.
    void (*abort)(const CommBackend *self, int exit_code, const char *message);
    // ---- hang detection ----
    // A blocking call or wait() that has not completed after `seconds` (0: never, the
    // default) ends the job (exit code 4) with a report naming this rank, the operation,
    // its size, the group, and the context last set (e.g. "step 120"), instead of hanging.
    void (*set_timeout)(const CommBackend *self, double seconds);
    void (*set_context)(const CommBackend *self, const char *context);
};

// commCheck(backend, call): aborts the job with file, line, the call and
// the backend's error text when call returns non-zero.
static inline void comm_check_(const CommBackend *c, int code, const char *what, const char *file, int line) {
    if (code == 0) return;
    char text[256], msg[512];
    c->error_string(c, code, text, sizeof text);
    snprintf(msg, sizeof msg, "%s:%d: %s failed: %s", file, line, what, text);
    c->abort(c, 1, msg);
}
#define commCheck(comm, call) comm_check_((comm), (call), #call, __FILE__, __LINE__)

#endif
