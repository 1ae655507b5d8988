// The NCCL comm backend (runtime/comm_nccl.c) against NCCL itself on one GPU,
// on a machine without MPI: the backend wraps a one-rank stand-in for the MPI
// backend (every group is this process alone), so its own code runs as in
// training: the world's communicator made non-blocking under the timeout, a
// group's split off it, every collective on device memory (in place and not,
// f32 and bf16, sum and max, blocking and not), a send and receive to itself
// in one NCCL group, completion host-ordered and stream-ordered (after queued
// work on a followed stream, read back through it), the refusals, NCCL's own
// error text, the device memory the
// communicators took, and the destroy. On one rank every reduction is the
// identity, so each result is known exactly.
//   nccl_check [--timeout SECONDS]     (benchmarks/gpu/run.sh runs it)
// Prints one "ok N - ..." / "not ok N - ..." line per check and a summary;
// exit 0 when every check passed, 1 otherwise; "SKIP ..." and exit 0 without a GPU.
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/dtype.h"
#include "kernels/backend.h"
#include "runtime/comm_nccl.h"

// ---- the one-rank stand-in for the MPI backend ----------------------------------

struct CommGroup {
    int id;
};
static CommGroup world_group = {0}, split_group = {1};

static int solo_rank(const CommBackend *self, const CommGroup *g) { return 0; }
static int solo_size(const CommBackend *self, const CommGroup *g) { return 1; }
static void solo_group_free(const CommBackend *self, CommGroup *g) {}
static int solo_broadcast(const CommBackend *self, void *buf, size_t count, MistDtype t, int root, CommGroup *g) {
    return 0;  // one rank: the root's data is already everywhere
}
static int solo_ibroadcast(const CommBackend *self, void *buf, size_t count, MistDtype t, int root, CommGroup *g,
                           CommRequest **req) {
    *req = NULL;
    return 0;
}
static int solo_wait(const CommBackend *self, CommRequest *req) { return 0; }
static int solo_test(const CommBackend *self, CommRequest *req, int *done) {
    *done = 1;
    return 0;
}
// host collectives of one rank (the backend agrees on split colours over the inner
// backend): the result is the input. Without them the split called through a NULL
// pointer: the segmentation fault of the first run on a GPU.
static int solo_all_reduce(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                           CommOp op, CommGroup *g) {
    if (send != recv) memmove(recv, send, count * mist_dtype_size(t));
    return 0;
}
static int solo_all_gather(const CommBackend *self, const void *send, void *recv, size_t count, MistDtype t,
                           CommGroup *g) {
    if (send != recv) memmove(recv, send, count * mist_dtype_size(t));
    return 0;
}
static void solo_error_string(const CommBackend *self, int code, char *buf, size_t len) {
    snprintf(buf, len, "one-rank stand-in: error %d", code);
}
static void solo_abort(const CommBackend *self, int code, const char *message) {
    fprintf(stderr, "nccl_check: the backend ended the run (exit %d): %s\n", code, message);
    exit(code);
}
static void solo_set_timeout(const CommBackend *self, double seconds) {}
static void solo_set_context(const CommBackend *self, const char *context) {}

static const CommBackend solo = {
    .name = "solo",
    .group_free = solo_group_free,
    .group_rank = solo_rank,
    .group_size = solo_size,
    .broadcast = solo_broadcast,
    .ibroadcast = solo_ibroadcast,
    .wait = solo_wait,
    .test = solo_test,
    .all_reduce = solo_all_reduce,
    .all_gather = solo_all_gather,
    .error_string = solo_error_string,
    .abort = solo_abort,
    .set_timeout = solo_set_timeout,
    .set_context = solo_set_context,
};

// ---- checks -----------------------------------------------------------------------

static int passed, failed;
static void check(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%sok %d - ", ok ? "" : "not ", passed + failed + 1);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    ok ? passed++ : failed++;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static Backend *be;
static const CommBackend *C;
static BackendStream *st;  // the stream the host's copies go on

static void put(void *d, const void *h, size_t bytes) {
    be->copy_h2d(be, d, h, bytes, st);
    be->stream_synchronize(be, st);
}
static void get(void *h, const void *d, size_t bytes) {
    be->synchronize(be);  // the NCCL stream's work too
    be->copy_d2h(be, h, d, bytes, st);
    be->stream_synchronize(be, st);
}

static void text_of(int rc, char *buf, size_t len) {
    buf[0] = '\0';
    if (rc) C->error_string(C, rc, buf, len);
}

// values exact in bf16 and f32: small integers
static float value(size_t i) { return (float)((int)(i % 97) - 48); }

// each collective on one rank: the result is the input (a block of it, or a copy)
static void check_collectives(size_t n) {
    float *h = malloc(n * sizeof *h), *back = malloc(n * sizeof *back);
    float *d = be->alloc_device(be, n * sizeof *d), *d2 = be->alloc_device(be, n * sizeof *d2);
    uint16_t *h16 = malloc(n * sizeof *h16), *b16 = malloc(n * sizeof *b16);
    uint16_t *d16 = be->alloc_device(be, n * sizeof *d16);
    if (!h || !back || !d || !d2 || !h16 || !b16 || !d16) {
        check(0, "buffers of %zu elements", n);
        return;
    }
    for (size_t i = 0; i < n; i++) h[i] = value(i), h16[i] = mist_f32_to_bf16(value(i));
    int rc;
    char text[512];
    struct {
        const char *name;
        CommGroup *g;
    } groups[2] = {{"world", &world_group}, {"split", &split_group}};
    for (int k = 0; k < 2; k++) {
        CommGroup *g = groups[k].g;
        put(d, h, n * sizeof *h);
        rc = C->all_reduce(C, d, d2, n, MIST_F32, COMM_SUM, g);
        get(back, d2, n * sizeof *back);
        text_of(rc, text, sizeof text);
        check(rc == 0 && !memcmp(back, h, n * sizeof *h), "%s: all_reduce f32 sum of %zu, out of place %s", groups[k].name, n, text);
        rc = C->all_reduce(C, d, d, n, MIST_F32, COMM_MAX, g);
        get(back, d, n * sizeof *back);
        text_of(rc, text, sizeof text);
        check(rc == 0 && !memcmp(back, h, n * sizeof *h), "%s: all_reduce f32 max, in place %s", groups[k].name, text);
        put(d16, h16, n * sizeof *h16);
        rc = C->all_reduce(C, d16, d16, n, MIST_BF16, COMM_SUM, g);
        get(b16, d16, n * sizeof *b16);
        text_of(rc, text, sizeof text);
        check(rc == 0 && !memcmp(b16, h16, n * sizeof *h16), "%s: all_reduce bf16 sum, in place %s", groups[k].name, text);
    }
    put(d, h, n * sizeof *h);
    rc = C->reduce_scatter(C, d, d2, n, MIST_F32, COMM_SUM, &world_group);
    get(back, d2, n * sizeof *back);
    check(rc == 0 && !memcmp(back, h, n * sizeof *h), "reduce_scatter f32 (one block of %zu)", n);
    rc = C->reduce_scatter(C, d16, d16, n, MIST_BF16, COMM_SUM, &split_group);
    get(b16, d16, n * sizeof *b16);
    check(rc == 0 && !memcmp(b16, h16, n * sizeof *h16), "reduce_scatter bf16 in place");
    rc = C->all_gather(C, d, d2, n, MIST_F32, &world_group);
    get(back, d2, n * sizeof *back);
    check(rc == 0 && !memcmp(back, h, n * sizeof *h), "all_gather f32");
    rc = C->broadcast(C, d2, n, MIST_F32, 0, &split_group);
    get(back, d2, n * sizeof *back);
    check(rc == 0 && !memcmp(back, h, n * sizeof *h), "broadcast f32 from root 0");
    // several in flight, then waited on (host-ordered)
    CommRequest *req[4] = {0};
    int good = 1;
    for (int i = 0; i < 4; i++) good &= C->iall_reduce(C, d, d, n, MIST_F32, COMM_SUM, &world_group, &req[i]) == 0;
    for (int i = 0; i < 4; i++) good &= req[i] && C->wait(C, req[i]) == 0;
    get(back, d, n * sizeof *back);
    check(good && !memcmp(back, h, n * sizeof *h), "four iall_reduce in flight, then waited on");
    // a device message to itself: NCCL pairs the send with its receive inside one group
    // (a device copy); alone the send would wait forever for a receive after it, so it is refused
    put(d, h, n * sizeof *h);
    be->memset_device(be, d2, 0, n * sizeof *d2, st);
    be->stream_synchronize(be, st);
    CommRequest *pair[2] = {0};
    rc = C->p2p_group(C, 1);
    if (!rc) rc = C->isend(C, d, n, MIST_F32, 0, 7, &world_group, &pair[0]);
    if (!rc) rc = C->irecv(C, d2, n, MIST_F32, 0, 7, &world_group, &pair[1]);
    int end = C->p2p_group(C, 0);
    rc = rc ? rc : end;
    for (int i = 0; !rc && i < 2; i++) rc = C->wait(C, pair[i]);
    get(back, d2, n * sizeof *back);
    text_of(rc, text, sizeof text);
    check(rc == 0 && !memcmp(back, h, n * sizeof *h), "device send and receive to itself in one group: %zu f32 "
          "arrive %s", n, text);
    // refusals and NCCL's own error text
    rc = C->send(C, d, n, MIST_F32, 0, 7, &world_group);
    text_of(rc, text, sizeof text);
    check(rc != 0 && strstr(text, "itself") != NULL, "device send to itself alone refused: %s", text);
    rc = C->broadcast(C, d, n, MIST_F32, 3, &world_group);  // root 3 of a group of one: NCCL refuses it
    text_of(rc, text, sizeof text);
    check(rc != 0 && strstr(text, "NCCL error") != NULL, "an invalid root: NCCL's result and its last error text: %s", text);
    be->free_device(be, d), be->free_device(be, d2), be->free_device(be, d16);
    free(h), free(back), free(h16), free(b16);
}

// Stream-ordered: the all-reduce goes after a queue of copies on the followed
// stream, the result is read back through that stream; the host does not wait
// per call (timed against host-ordered calls).
static void check_stream_ordered(size_t n) {
    BackendStream *s = be->stream_create(be);
    float *h = malloc(n * sizeof *h), *back = malloc(n * sizeof *back);
    float *d = be->alloc_device(be, n * sizeof *d), *src = be->alloc_device(be, n * sizeof *src);
    if (!s || !h || !back || !d || !src) {
        check(0, "stream-ordered buffers");
        return;
    }
    for (size_t i = 0; i < n; i++) h[i] = value(i + 7);
    be->copy_h2d(be, src, h, n * sizeof *h, s);
    be->memset_device(be, d, 0, n * sizeof *d, s);
    for (int i = 0; i < 50; i++) be->copy_d2d(be, d, src, n * sizeof *d, s);  // queued work the sum must follow
    comm_nccl_follow(C, s);
    comm_nccl_stream_ordered(C, 1);
    int rc = C->all_reduce(C, d, d, n, MIST_F32, COMM_SUM, &world_group);
    be->copy_d2h(be, back, d, n * sizeof *back, s);
    be->stream_synchronize(be, s);
    check(rc == 0 && !memcmp(back, h, n * sizeof *h), "stream-ordered all_reduce after 50 queued copies, read back on the followed stream");
    // host time per call: stream-ordered (no host wait) vs host-ordered (a wait per call)
    double times[2];
    for (int ordered = 1; ordered >= 0; ordered--) {
        comm_nccl_stream_ordered(C, ordered);
        be->stream_synchronize(be, s);
        double t0 = now();
        for (int i = 0; i < 200; i++) rc |= C->all_reduce(C, d, d, 1024, MIST_F32, COMM_SUM, &world_group);
        times[ordered] = (now() - t0) / 200 * 1e6;
        be->stream_synchronize(be, s);
    }
    check(rc == 0 && comm_nccl_drain(C) == 0, "200 small all_reduce each way, drained: host us per call stream-ordered %.1f, "
          "host-ordered %.1f", times[1], times[0]);
    comm_nccl_stream_ordered(C, 0);
    comm_nccl_follow(C, NULL);
    be->free_device(be, d), be->free_device(be, src);
    be->stream_destroy(be, s);
    free(h), free(back);
}

#ifdef NCCL_CHECK_CPU
#include <mpi.h>  // the stand-in runs on MPI
static int all_device_memory(Backend *b, const void *p) { return 1; }
#endif

int main(int argc, char **argv) {
    double timeout = 60;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--timeout") && i + 1 < argc) timeout = atof(argv[++i]);
        else { fprintf(stderr, "usage: %s [--timeout SECONDS]\n", argv[0]); return 2; }
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    char err[512];
#ifdef NCCL_CHECK_CPU
    MPI_Init(NULL, NULL);
    // tests/nccl_check_fake: the CPU backend, its memory taken for device memory, over the NCCL
    // stand-in (tests/fake_nccl): the program's own logic (its one-rank inner backend) checked
    // without a GPU
    be = backend_cpu_create(MIST_F32, err, sizeof err);
    if (be) be->is_device_memory = all_device_memory;
#else
    be = backend_cuda_create(MIST_BF16, 0, err, sizeof err);
#endif
    if (!be) {
        printf("SKIP no GPU: %s\n", err);
        return 0;
    }
    printf("# NCCL %s, one rank on cuda:0, timeout %g s\n", comm_nccl_version(), timeout);
    st = be->stream_create(be);
    C = comm_nccl_new(&solo, be);
    if (!C || !st) {
        printf("not ok 1 - the backend could not be made\n");
        return 1;
    }
    C->set_timeout(C, timeout);
    C->set_context(C, "nccl_check");
    double t0 = now();
    CommGroup *groups[1] = {&split_group};
    int rc = comm_nccl_prepare(C, &world_group, groups, 1);
    char text[512];
    text_of(rc, text, sizeof text);
    check(rc == 0 && comm_nccl_communicators(C) == 2,
          "prepare: the world's communicator (non-blocking init) and one split off it in %.2f s, taking %.1f MiB of "
          "device memory %s", now() - t0, (double)comm_nccl_device_bytes(C) / 1048576.0, text);
    if (rc == 0) {
        check_collectives((size_t)1 << 20);
        check_stream_ordered((size_t)1 << 22);
    }
    t0 = now();
    comm_nccl_free(C);
    // a destroy that never finishes ends the run (exit 4) from inside: here it has finished
    printf("# destroy: finalised and destroyed in %.2f s\n", now() - t0);
    be->stream_destroy(be, st);
    be->destroy(be);
    printf("1..%d\nnccl_check: %d passed, %d failed\n", passed + failed, passed, failed);
#ifdef NCCL_CHECK_CPU
    MPI_Finalize();
#endif
    return failed ? 1 : 0;
}
