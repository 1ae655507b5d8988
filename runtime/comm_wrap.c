// Forwarding ops of a wrapping comm backend (comm_wrap.h): each calls the
// inner backend's same op, with the inner backend as its `self`.
#include "runtime/comm_wrap.h"

#define IN comm_wrap_inner(self)

static int fw_group_world(const CommBackend *self, CommGroup **out) { return IN->group_world(IN, out); }
static int fw_group_split(const CommBackend *self, CommGroup *parent, int color, int key, CommGroup **out) {
    return IN->group_split(IN, parent, color, key, out);
}
static void fw_group_free(const CommBackend *self, CommGroup *g) { IN->group_free(IN, g); }
static int fw_group_rank(const CommBackend *self, const CommGroup *g) { return IN->group_rank(IN, g); }
static int fw_group_size(const CommBackend *self, const CommGroup *g) { return IN->group_size(IN, g); }

static int fw_all_reduce(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t, CommOp op,
                         CommGroup *g) {
    return IN->all_reduce(IN, send, recv, count, t, op, g);
}
static int fw_reduce_scatter(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                             CommOp op, CommGroup *g) {
    return IN->reduce_scatter(IN, send, recv, count, t, op, g);
}
static int fw_all_gather(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                         CommGroup *g) {
    return IN->all_gather(IN, send, recv, count, t, g);
}
static int fw_broadcast(const CommBackend *self, void *buf, size_t count, MistDtype t, int root, CommGroup *g) {
    return IN->broadcast(IN, buf, count, t, root, g);
}
static int fw_send(const CommBackend *self, const void *buf, size_t count, MistDtype t, int peer, int tag,
                   CommGroup *g) {
    return IN->send(IN, buf, count, t, peer, tag, g);
}
static int fw_recv(const CommBackend *self, void *buf, size_t count, MistDtype t, int peer, int tag, CommGroup *g) {
    return IN->recv(IN, buf, count, t, peer, tag, g);
}
static int fw_barrier(const CommBackend *self, CommGroup *g) { return IN->barrier(IN, g); }

static int fw_iall_reduce(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t, CommOp op,
                          CommGroup *g, CommRequest **req) {
    return IN->iall_reduce(IN, send, recv, count, t, op, g, req);
}
static int fw_ireduce_scatter(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                              CommOp op, CommGroup *g, CommRequest **req) {
    return IN->ireduce_scatter(IN, send, recv, count, t, op, g, req);
}
static int fw_iall_gather(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                          CommGroup *g, CommRequest **req) {
    return IN->iall_gather(IN, send, recv, count, t, g, req);
}
static int fw_ibroadcast(const CommBackend *self, void *buf, size_t count, MistDtype t, int root, CommGroup *g,
                         CommRequest **req) {
    return IN->ibroadcast(IN, buf, count, t, root, g, req);
}
static int fw_isend(const CommBackend *self, const void *buf, size_t count, MistDtype t, int peer, int tag,
                    CommGroup *g, CommRequest **req) {
    return IN->isend(IN, buf, count, t, peer, tag, g, req);
}
static int fw_irecv(const CommBackend *self, void *buf, size_t count, MistDtype t, int peer, int tag, CommGroup *g,
                    CommRequest **req) {
    return IN->irecv(IN, buf, count, t, peer, tag, g, req);
}
static int fw_ibarrier(const CommBackend *self, CommGroup *g, CommRequest **req) { return IN->ibarrier(IN, g, req); }
static int fw_wait(const CommBackend *self, CommRequest *req) { return IN->wait(IN, req); }
static int fw_test(const CommBackend *self, CommRequest *req, int *done) { return IN->test(IN, req, done); }

static void fw_error_string(const CommBackend *self, int code, char *buf, size_t len) {
    IN->error_string(IN, code, buf, len);
}
static void fw_abort(const CommBackend *self, int exit_code, const char *message) { IN->abort(IN, exit_code, message); }
static void fw_set_timeout(const CommBackend *self, double seconds) { IN->set_timeout(IN, seconds); }
static void fw_set_context(const CommBackend *self, const char *context) { IN->set_context(IN, context); }

void comm_wrap_init(CommBackend *out, const char *name, const CommBackend *inner, CommWrap *ctx) {
    ctx->inner = inner;
    *out = (CommBackend){
        .name = name,
        .ctx = ctx,
        .group_world = fw_group_world,
        .group_split = fw_group_split,
        .group_free = fw_group_free,
        .group_rank = fw_group_rank,
        .group_size = fw_group_size,
        .all_reduce = fw_all_reduce,
        .reduce_scatter = fw_reduce_scatter,
        .all_gather = fw_all_gather,
        .broadcast = fw_broadcast,
        .send = fw_send,
        .recv = fw_recv,
        .barrier = fw_barrier,
        .iall_reduce = fw_iall_reduce,
        .ireduce_scatter = fw_ireduce_scatter,
        .iall_gather = fw_iall_gather,
        .ibroadcast = fw_ibroadcast,
        .isend = fw_isend,
        .irecv = fw_irecv,
        .ibarrier = fw_ibarrier,
        .wait = fw_wait,
        .test = fw_test,
        .error_string = fw_error_string,
        .abort = fw_abort,
        .set_timeout = fw_set_timeout,
        .set_context = fw_set_context,
    };
}
