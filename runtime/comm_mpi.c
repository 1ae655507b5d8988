// The MPI comm backend. Collectives map 1:1 onto MPI; bf16 has its own MPI
// datatype and reduction ops (sum in fp32, round to nearest even). MPI counts
// are ints, so contiguous operations are cut into chunks of 2^30 elements.
// Every group runs on its own duplicated communicator with MPI_ERRORS_RETURN,
// so failures come back as codes the caller can print.
#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/comm_mpi.h"

struct CommGroup {
    MPI_Comm comm;
    int rank, size;
};

// Chunks per nonblocking request: at most 8 * 2^30 elements in one call.
#define CHUNK_ELEMS ((size_t)1 << 30)
#define REQ_SLOTS 8

struct CommRequest {
    int in_use;
    int n;                    // MPI requests in r[]
    MPI_Request r[REQ_SLOTS];
    void *move_dst;           // in-place reduce-scatter: move the result
    const void *move_src;     // from the buffer start to this rank's block
    size_t move_bytes;        // once it completed (0 = nothing to move)
    // what it is, for the hang report (see mpi_wait)
    const char *what;         // "all_reduce", "send", ...
    size_t count;
    MistDtype dtype;
    int group_rank, group_size, peer;  // peer: the other rank of a send/recv, the root of a broadcast; -1 none
    MPI_Comm group_comm;      // its group's communicator (MPI_COMM_NULL: none), to name the ranks that are missing
};

// Our own error codes are negative, MPI's are >= 0.
enum {
    ERR_DTYPE_OP = -1,     // reduction not defined for this dtype
    ERR_POOL = -2,         // more than COMM_MAX_REQUESTS requests in flight
    ERR_TOO_LARGE = -3,    // count beyond what one call can move
    ERR_OVERLAP = -4,      // send and recv overlap in a way that is not "in place"
    ERR_NOMEM = -5,
};

// ---- datatypes and reduction ops ------------------------------------------
// MPI objects of the process (MPI is initialised once per process), made on
// first use and shared by everything that talks MPI.

static MPI_Datatype bf16_type = MPI_DATATYPE_NULL, f16_type = MPI_DATATYPE_NULL;
static MPI_Op bf16_sum_op = MPI_OP_NULL, bf16_max_op = MPI_OP_NULL;
static pthread_once_t types_once = PTHREAD_ONCE_INIT;

// inout[i] = bf16(f32(in[i]) + f32(inout[i])): one rounding per pairwise add.
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = mist_f32_to_bf16(mist_bf16_to_f32(a[i]) + mist_bf16_to_f32(b[i]));
}

// Max that propagates NaN whatever the order, so every rank agrees.
static void bf16_max(void *in, void *inout, int *len, MPI_Datatype *dt) {
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) {
        float x = mist_bf16_to_f32(a[i]), y = mist_bf16_to_f32(b[i]);
        if (x != x || y != y) b[i] = 0x7fc0;
        else if (x > y) b[i] = a[i];
    }
}

static void create_types(void) {
    MPI_Type_contiguous(1, MPI_UINT16_T, &bf16_type);
    MPI_Type_commit(&bf16_type);
    MPI_Type_contiguous(1, MPI_UINT16_T, &f16_type);
    MPI_Type_commit(&f16_type);
    MPI_Op_create(bf16_sum, 1, &bf16_sum_op);
    MPI_Op_create(bf16_max, 1, &bf16_max_op);
}

static MPI_Datatype mpi_type(MistDtype t) {
    pthread_once(&types_once, create_types);
    switch (t) {
    case MIST_F32: return MPI_FLOAT;
    case MIST_BF16: return bf16_type;
    case MIST_F16: return f16_type;
    case MIST_I32: return MPI_INT32_T;
    default: return MPI_UINT8_T;
    }
}

// The MPI op for (dtype, op), or MPI_OP_NULL when there is none (f16).
static MPI_Op mpi_op(MistDtype t, CommOp op) {
    pthread_once(&types_once, create_types);
    if (t == MIST_BF16) return op == COMM_MAX ? bf16_max_op : bf16_sum_op;
    if (t == MIST_F16) return MPI_OP_NULL;
    return op == COMM_MAX ? MPI_MAX : MPI_SUM;
}

// ---- the backend's state: its request pool and hang detection ---------------

typedef struct {
    struct CommRequest pool[COMM_MAX_REQUESTS];
    int pool_next;  // where the search for a free slot starts
    pthread_mutex_t pool_lock;
    double wait_timeout;     // seconds; 0 = wait forever
    char wait_context[128];  // e.g. "step 120"
} MpiContext;

static MpiContext *mpi_ctx(const CommBackend *self) { return self->ctx; }

// ---- request pool -----------------------------------------------------------

static CommRequest *req_take(const CommBackend *self, const char *what, size_t count, MistDtype t,
                             const CommGroup *g, int peer) {
    MpiContext *x = mpi_ctx(self);
    CommRequest *r = NULL;
    pthread_mutex_lock(&x->pool_lock);
    for (int k = 0; k < COMM_MAX_REQUESTS && !r; k++) {
        int i = (x->pool_next + k) % COMM_MAX_REQUESTS;
        if (!x->pool[i].in_use) {
            r = &x->pool[i];
            x->pool_next = (i + 1) % COMM_MAX_REQUESTS;
        }
    }
    if (r) {
        memset(r, 0, sizeof *r);
        r->in_use = 1;
        r->what = what, r->count = count, r->dtype = t, r->peer = peer;
        r->group_rank = g ? g->rank : -1, r->group_size = g ? g->size : 0;
        r->group_comm = g ? g->comm : MPI_COMM_NULL;
    }
    pthread_mutex_unlock(&x->pool_lock);
    return r;
}

static void req_release(const CommBackend *self, CommRequest *r) {
    MpiContext *x = mpi_ctx(self);
    pthread_mutex_lock(&x->pool_lock);
    r->in_use = 0;
    pthread_mutex_unlock(&x->pool_lock);
}

// Finishes a completed request: the deferred move, then back to the pool.
static void req_finish(const CommBackend *self, CommRequest *r) {
    if (r->move_bytes) memmove(r->move_dst, r->move_src, r->move_bytes);
    req_release(self, r);
}

// ---- hang detection -----------------------------------------------------------
// A wait that outlasts the timeout means the other ranks of the group are not
// taking part (one died, hangs, or runs a different operation): rather than
// wait forever, end the job and say which rank, which operation, on which
// group, and where in training (the context the trainer last set).

static void mpi_abort(const CommBackend *self, int exit_code, const char *message);

static void mpi_set_timeout(const CommBackend *self, double seconds) {
    mpi_ctx(self)->wait_timeout = seconds > 0 ? seconds : 0;
}
static void mpi_set_context(const CommBackend *self, const char *context) {
    MpiContext *x = mpi_ctx(self);
    snprintf(x->wait_context, sizeof x->wait_context, "%s", context ? context : "");
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Which ranks of the group are not waiting: every rank whose wait timed out
// tells every other rank so (one int on MPI_COMM_WORLD under a tag nothing else
// uses: the groups run on duplicated communicators), then listens for the
// others' notes for HANG_GRACE seconds. Ranks of the group from which no note
// came are not in a timed-out operation: dead, stuck in computation, or in
// another operation. Writes them, as world ranks, into buf.
#define HANG_TAG 32001  // <= 32767, the least MPI_TAG_UB the standard allows
#define HANG_GRACE 1.5  // seconds; the ranks of one stuck step time out within it of each other

static void missing_ranks(const CommRequest *r, double grace, char *buf, size_t len) {
    buf[0] = 0;
    int me, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    char *waiting = calloc((size_t)n, 1);
    MPI_Request *sends = calloc((size_t)n, sizeof *sends);
    int *group_world = calloc((size_t)(r->group_size > 0 ? r->group_size : 1), sizeof *group_world);
    if (!waiting || !sends || !group_world || r->group_comm == MPI_COMM_NULL) goto out;
    waiting[me] = 1;
    for (int i = 0; i < n; i++)
        if (i != me) MPI_Isend(&me, 1, MPI_INT, i, HANG_TAG, MPI_COMM_WORLD, &sends[i]);
        else sends[i] = MPI_REQUEST_NULL;
    for (double t0 = now_seconds(); now_seconds() - t0 < grace;) {
        int flag = 0, from;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, HANG_TAG, MPI_COMM_WORLD, &flag, &st);
        if (!flag) { struct timespec nap = {0, 1000000}; nanosleep(&nap, NULL); continue; }
        MPI_Recv(&from, 1, MPI_INT, st.MPI_SOURCE, HANG_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (from >= 0 && from < n) waiting[from] = 1;
    }
    // the group's ranks in world numbering
    MPI_Group g, world;
    MPI_Comm_group(r->group_comm, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int *in_group = calloc((size_t)r->group_size, sizeof *in_group);
    if (in_group) {
        for (int i = 0; i < r->group_size; i++) in_group[i] = i;
        MPI_Group_translate_ranks(g, r->group_size, in_group, world, group_world);
        size_t o = 0;
        int listed = 0;
        for (int i = 0; i < r->group_size && o + 16 < len; i++) {
            int w = group_world[i];
            if (w == MPI_UNDEFINED || w < 0 || w >= n || waiting[w]) continue;
            o += (size_t)snprintf(buf + o, len - o, "%s%d", listed++ ? ", " : "", w);
        }
        free(in_group);
    }
    MPI_Group_free(&g);
    MPI_Group_free(&world);
out:
    free(waiting);
    free(sends);  // the notes may still be in flight: the job ends next
    free(group_world);
}

static void report_hang(const CommBackend *self, const CommRequest *r, double waited) {
    const MpiContext *x = mpi_ctx(self);
    char peer[48] = "", elems[64] = "", missing[256], who[320], msg[1280];
    if (r->peer >= 0) snprintf(peer, sizeof peer, " with rank %d of the group", r->peer);
    if (strcmp(r->what, "barrier"))  // a barrier moves no elements
        snprintf(elems, sizeof elems, " of %zu %s elements", r->count, mist_dtype_name(r->dtype));
    missing_ranks(r, x->wait_timeout < 2 * HANG_GRACE ? 0.5 * x->wait_timeout : HANG_GRACE, missing, sizeof missing);
    if (missing[0])
        snprintf(who, sizeof who, "Not waiting in a timed-out operation: world rank(s) %s of the group (they may have "
                 "died, be stuck in computation, or be running a different operation)", missing);
    else
        snprintf(who, sizeof who, "Every rank of the group is waiting in a timed-out operation: they may be running "
                 "different operations (their own reports name theirs)");
    snprintf(msg, sizeof msg,
             "%s%s%s%s%s, on a group of %d ranks (this rank is %d in it), has not completed after "
             "%.0f s. %s. Hint: [cluster] comm_timeout = %g s; "
             "raise it if one step can legitimately take longer, 0 turns the check off",
             x->wait_context, x->wait_context[0] ? ": " : "", r->what, elems, peer, r->group_size, r->group_rank,
             waited, who, x->wait_timeout);
    mpi_abort(self, 4, msg);
}

static int mpi_wait(const CommBackend *self, CommRequest *r) {
    double timeout = mpi_ctx(self)->wait_timeout;
    int rc;
    if (timeout <= 0) {
        rc = MPI_Waitall(r->n, r->r, MPI_STATUSES_IGNORE);
    } else {
        // MPI_Testall drives progress like MPI_Waitall does; the clock is read
        // every 256 polls (~microseconds) so the check costs nothing measurable
        double t0 = now_seconds();
        int flag = 0;
        for (unsigned polls = 1;; polls++) {
            rc = MPI_Testall(r->n, r->r, &flag, MPI_STATUSES_IGNORE);
            if (flag || rc != MPI_SUCCESS) break;
            if (polls % 256 == 0) {
                double waited = now_seconds() - t0;
                if (waited > timeout) report_hang(self, r, waited);
            }
        }
    }
    req_finish(self, r);
    return rc;
}

static int mpi_test(const CommBackend *self, CommRequest *r, int *done) {
    int flag = 0;
    int rc = MPI_Testall(r->n, r->r, &flag, MPI_STATUSES_IGNORE);
    *done = flag || rc != MPI_SUCCESS;
    if (*done) req_finish(self, r);
    return rc;
}

// Blocking calls are the nonblocking ones plus a wait: one code path to test.
static int wait_or_hand_back(const CommBackend *self, int rc, CommRequest *r, CommRequest **out) {
    if (rc != MPI_SUCCESS) {
        if (r) req_release(self, r);
        return rc;
    }
    if (out) {
        *out = r;
        return 0;
    }
    return mpi_wait(self, r);
}

static int chunks_fit(size_t count) { return (count + CHUNK_ELEMS - 1) / CHUNK_ELEMS <= REQ_SLOTS; }

// ---- groups -----------------------------------------------------------------

static CommGroup *group_wrap(MPI_Comm comm) {
    CommGroup *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->comm = comm;
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &g->rank);
    MPI_Comm_size(comm, &g->size);
    return g;
}

CommGroup *comm_mpi_group_from(MPI_Comm comm) {
    MPI_Comm dup;
    if (MPI_Comm_dup(comm, &dup) != MPI_SUCCESS) return NULL;
    CommGroup *g = group_wrap(dup);
    if (!g) MPI_Comm_free(&dup);
    return g;
}

MPI_Comm comm_mpi_group_comm(const CommGroup *g) { return g->comm; }

static int mpi_group_world(const CommBackend *self, CommGroup **out) {
    *out = comm_mpi_group_from(MPI_COMM_WORLD);
    return *out ? 0 : ERR_NOMEM;
}

static int mpi_group_split(const CommBackend *self, CommGroup *parent, int color, int key, CommGroup **out) {
    MPI_Comm c;
    *out = NULL;
    int rc = MPI_Comm_split(parent->comm, color, key, &c);
    if (rc != MPI_SUCCESS) return rc;
    *out = group_wrap(c);
    if (!*out) {
        MPI_Comm_free(&c);
        return ERR_NOMEM;
    }
    return 0;
}

static void mpi_group_free(const CommBackend *self, CommGroup *g) {
    if (!g) return;
    MPI_Comm_free(&g->comm);
    free(g);
}

static int mpi_group_rank(const CommBackend *self, const CommGroup *g) { return g->rank; }
static int mpi_group_size(const CommBackend *self, const CommGroup *g) { return g->size; }

// ---- collectives ------------------------------------------------------------

static int mpi_iall_reduce(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                           CommOp op, CommGroup *g, CommRequest **out) {
    MPI_Op mop = mpi_op(t, op);
    if (mop == MPI_OP_NULL) return ERR_DTYPE_OP;
    if (!chunks_fit(count)) return ERR_TOO_LARGE;
    CommRequest *r = req_take(self, "all_reduce", count, t, g, -1);
    if (!r) return ERR_POOL;
    size_t sz = mist_dtype_size(t);
    int rc = MPI_SUCCESS;
    for (size_t off = 0; off < count && rc == MPI_SUCCESS; off += CHUNK_ELEMS) {
        int n = (int)(count - off < CHUNK_ELEMS ? count - off : CHUNK_ELEMS);
        const void *s = send == recv ? MPI_IN_PLACE : (const char *)send + off * sz;
        rc = MPI_Iallreduce(s, (char *)recv + off * sz, n, mpi_type(t), mop, g->comm, &r->r[r->n++]);
    }
    return wait_or_hand_back(self, rc, r, out);
}

static int mpi_all_reduce(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t, CommOp op,
                          CommGroup *g) {
    return mpi_iall_reduce(self, send, recv, count, t, op, g, NULL);
}

// [a, a+na) and [b, b+nb) share a byte
static int overlap(const void *a, size_t na, const void *b, size_t nb) {
    const char *x = a, *y = b;
    return x < y + nb && y < x + na;
}

static int mpi_ireduce_scatter(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                               CommOp op, CommGroup *g, CommRequest **out) {
    MPI_Op mop = mpi_op(t, op);
    if (mop == MPI_OP_NULL) return ERR_DTYPE_OP;
    if (count > (size_t)INT32_MAX) return ERR_TOO_LARGE;
    size_t sz = mist_dtype_size(t), block = count * sz;
    char *mine = (char *)send + (size_t)g->rank * block;  // this rank's block of send
    int in_place = recv == send || recv == mine;
    if (!in_place && overlap(send, block * g->size, recv, block)) return ERR_OVERLAP;
    CommRequest *r = req_take(self, "reduce_scatter", count, t, g, -1);
    if (!r) return ERR_POOL;
    int rc;
    if (in_place) {
        // MPI_IN_PLACE leaves the result at the buffer start; move it to recv after.
        rc = MPI_Ireduce_scatter_block(MPI_IN_PLACE, (void *)send, (int)count, mpi_type(t), mop, g->comm, &r->r[r->n++]);
        if (recv != send) {
            r->move_dst = recv;
            r->move_src = send;
            r->move_bytes = block;
        }
    } else {
        rc = MPI_Ireduce_scatter_block(send, recv, (int)count, mpi_type(t), mop, g->comm, &r->r[r->n++]);
    }
    return wait_or_hand_back(self, rc, r, out);
}

static int mpi_reduce_scatter(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                              CommOp op, CommGroup *g) {
    return mpi_ireduce_scatter(self, send, recv, count, t, op, g, NULL);
}

static int mpi_iall_gather(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                           CommGroup *g, CommRequest **out) {
    if (count > (size_t)INT32_MAX) return ERR_TOO_LARGE;
    size_t block = count * mist_dtype_size(t);
    int in_place = send == (char *)recv + (size_t)g->rank * block;
    if (!in_place && overlap(send, block, recv, block * g->size)) return ERR_OVERLAP;
    CommRequest *r = req_take(self, "all_gather", count, t, g, -1);
    if (!r) return ERR_POOL;
    int rc = MPI_Iallgather(in_place ? MPI_IN_PLACE : send, (int)count, mpi_type(t), recv, (int)count, mpi_type(t),
                            g->comm, &r->r[r->n++]);
    return wait_or_hand_back(self, rc, r, out);
}

static int mpi_all_gather(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                          CommGroup *g) {
    return mpi_iall_gather(self, send, recv, count, t, g, NULL);
}

static int mpi_ibroadcast(const CommBackend *self, void *buf, size_t count, MistDtype t, int root, CommGroup *g,
                          CommRequest **out) {
    if (!chunks_fit(count)) return ERR_TOO_LARGE;
    CommRequest *r = req_take(self, "broadcast", count, t, g, root);
    if (!r) return ERR_POOL;
    size_t sz = mist_dtype_size(t);
    int rc = MPI_SUCCESS;
    for (size_t off = 0; off < count && rc == MPI_SUCCESS; off += CHUNK_ELEMS) {
        int n = (int)(count - off < CHUNK_ELEMS ? count - off : CHUNK_ELEMS);
        rc = MPI_Ibcast((char *)buf + off * sz, n, mpi_type(t), root, g->comm, &r->r[r->n++]);
    }
    return wait_or_hand_back(self, rc, r, out);
}

static int mpi_broadcast(const CommBackend *self, void *buf, size_t count, MistDtype t, int root, CommGroup *g) {
    return mpi_ibroadcast(self, buf, count, t, root, g, NULL);
}

// ---- point to point ---------------------------------------------------------

// One message to or from peer, in chunks of CHUNK_ELEMS (MPI counts are
// int). Chunks of one message arrive in order: MPI does not overtake on one
// (peer, tag, comm).
static int p2p_start(const CommBackend *self, int send, void *buf, size_t count, MistDtype t, int peer, int tag,
                     CommGroup *g, CommRequest **out) {
    if (!chunks_fit(count)) return ERR_TOO_LARGE;
    CommRequest *r = req_take(self, send ? "send" : "recv", count, t, g, peer);
    if (!r) return ERR_POOL;
    size_t sz = mist_dtype_size(t);
    int rc = MPI_SUCCESS;
    size_t off = 0;
    do {  // a zero-length message is still one message
        int n = (int)(count - off < CHUNK_ELEMS ? count - off : CHUNK_ELEMS);
        char *at = (char *)buf + off * sz;
        rc = send ? MPI_Isend(at, n, mpi_type(t), peer, tag, g->comm, &r->r[r->n++])
                  : MPI_Irecv(at, n, mpi_type(t), peer, tag, g->comm, &r->r[r->n++]);
        off += CHUNK_ELEMS;
    } while (off < count && rc == MPI_SUCCESS);
    return wait_or_hand_back(self, rc, r, out);
}

static int mpi_isend(const CommBackend *self, const void *buf, size_t count, MistDtype t, int peer, int tag,
                     CommGroup *g, CommRequest **out) {
    return p2p_start(self, 1, (void *)buf, count, t, peer, tag, g, out);
}

static int mpi_irecv(const CommBackend *self, void *buf, size_t count, MistDtype t, int peer, int tag, CommGroup *g,
                     CommRequest **out) {
    return p2p_start(self, 0, buf, count, t, peer, tag, g, out);
}

static int mpi_send(const CommBackend *self, const void *buf, size_t count, MistDtype t, int peer, int tag,
                    CommGroup *g) {
    return mpi_isend(self, buf, count, t, peer, tag, g, NULL);
}

static int mpi_recv(const CommBackend *self, void *buf, size_t count, MistDtype t, int peer, int tag, CommGroup *g) {
    return mpi_irecv(self, buf, count, t, peer, tag, g, NULL);
}

static int mpi_ibarrier(const CommBackend *self, CommGroup *g, CommRequest **out) {
    CommRequest *r = req_take(self, "barrier", 0, MIST_I32, g, -1);
    if (!r) return ERR_POOL;
    int rc = MPI_Ibarrier(g->comm, &r->r[r->n++]);
    return wait_or_hand_back(self, rc, r, out);
}

static int mpi_barrier(const CommBackend *self, CommGroup *g) { return MPI_Barrier(g->comm); }

// ---- errors -----------------------------------------------------------------

static void mpi_error_string(const CommBackend *self, int code, char *buf, size_t len) {
    const char *own = NULL;
    switch (code) {
    case 0: own = "success"; break;
    case ERR_DTYPE_OP: own = "this reduction is not available for the element type (f16 reductions are not supported; use f32 or bf16)"; break;
    case ERR_POOL: own = "too many nonblocking operations in flight (wait on some first)"; break;
    case ERR_TOO_LARGE: own = "count too large for one call (split the buffer into smaller buckets)"; break;
    case ERR_OVERLAP: own = "send and receive buffers overlap but the call is not in place"; break;
    case ERR_NOMEM: own = "out of host memory creating a group"; break;
    }
    if (own) {
        snprintf(buf, len, "%s", own);
        return;
    }
    char text[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(code, text, &n) != MPI_SUCCESS) snprintf(text, sizeof text, "unknown error");
    snprintf(buf, len, "MPI error %d: %s", code, text);
}

static void mpi_abort(const CommBackend *self, int exit_code, const char *message) {
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "mist: rank %d: %s\n", rank, message);
    fflush(stderr);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    exit(exit_code);  // MPI_Abort does not return; this keeps the contract if it did
}

// MPI has one world per process, so the backend is one instance per process:
// its context is made once, here, and lives as long as the process.
static MpiContext mpi_context = {.pool_lock = PTHREAD_MUTEX_INITIALIZER};

static const CommBackend mpi_backend = {
    .name = "mpi",
    .ctx = &mpi_context,
    .group_world = mpi_group_world,
    .group_split = mpi_group_split,
    .group_free = mpi_group_free,
    .group_rank = mpi_group_rank,
    .group_size = mpi_group_size,
    .all_reduce = mpi_all_reduce,
    .reduce_scatter = mpi_reduce_scatter,
    .all_gather = mpi_all_gather,
    .broadcast = mpi_broadcast,
    .send = mpi_send,
    .recv = mpi_recv,
    .barrier = mpi_barrier,
    .iall_reduce = mpi_iall_reduce,
    .ireduce_scatter = mpi_ireduce_scatter,
    .iall_gather = mpi_iall_gather,
    .ibroadcast = mpi_ibroadcast,
    .isend = mpi_isend,
    .irecv = mpi_irecv,
    .ibarrier = mpi_ibarrier,
    .wait = mpi_wait,
    .test = mpi_test,
    .error_string = mpi_error_string,
    .abort = mpi_abort,
    .set_timeout = mpi_set_timeout,
    .set_context = mpi_set_context,
};

const CommBackend *comm_mpi_backend(void) { return &mpi_backend; }
