// A comm backend that wraps another (the staged one, comm_staged.c; the NCCL
// one, comm_nccl.c): it takes over the operations on device memory and hands
// the rest (groups, host buffers, errors it does not know) to the inner
// backend. Its context starts with a CommWrap naming the inner backend, so
// that one set of forwarding functions serves every wrapper.
#ifndef MIST_COMM_WRAP_H
#define MIST_COMM_WRAP_H

#include "runtime/comm.h"

typedef struct CommWrap {
    const CommBackend *inner;
} CommWrap;

// *out: a backend called `name` whose every op forwards to `inner` through the
// CommWrap at the start of `ctx` (which it points at); the wrapper then
// replaces the ops it handles itself.
void comm_wrap_init(CommBackend *out, const char *name, const CommBackend *inner, CommWrap *ctx);

// The backend a wrapper forwards to.
static inline const CommBackend *comm_wrap_inner(const CommBackend *self) {
    return ((const CommWrap *)self->ctx)->inner;
}

#endif
