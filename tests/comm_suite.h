// The collective suite shared by tests/test_comm.c (MPI and staged backends)
// and tests/test_comm_nccl.c (the NCCL backend): every collective, blocking
// and nonblocking (and in place where defined), for f32, bf16 and i32,
// against sums, maxima and copies computed locally from the same generator;
// determinism on random data, requests in flight completed by test(), error
// codes. C is the backend under test; with dev_be set, the buffers of the
// collectives are that backend's device memory. Rank 0 prints TAP; every
// check is agreed by all ranks.
#ifndef MIST_TESTS_COMM_SUITE_H
#define MIST_TESTS_COMM_SUITE_H
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/backend.h"
#include "runtime/comm.h"
#include "runtime/grid.h"
#include "runtime/launch.h"
#include "tests/tap_mpi.h"  // me, check

static const CommBackend *C;
// Buffers of the collective tests: host memory, or (the staged round) the CPU
// backend's "device" memory, which the staged comm backend copies through its
// bounce buffer (runtime/comm_staged.h). Zeroed, as calloc.
static Backend *dev_be;
static void *buf_alloc(size_t n) {
    void *p = dev_be ? dev_be->alloc_device(dev_be, n ? n : 1) : malloc(n ? n : 1);
    if (p) memset(p, 0, n ? n : 1);
    return p;
}
static void buf_free(void *p) {
    if (dev_be) dev_be->free_device(dev_be, p);
    else free(p);
}

// Small integers in [-3, 7]: every partial sum over <= 8 ranks is exact in
// bf16 (|x| < 256), so results are exact in every dtype and order.
static double val(int rank, size_t i) { return (double)(((rank + 1) * (int)(i % 7 + 1) + (int)(i % 3)) % 11) - 3; }

static void put(void *buf, MistDtype t, size_t i, double v) {
    if (t == MIST_F32) ((float *)buf)[i] = (float)v;
    else if (t == MIST_BF16) ((uint16_t *)buf)[i] = mist_f32_to_bf16((float)v);
    else ((int32_t *)buf)[i] = (int32_t)v;
}

static double get(const void *buf, MistDtype t, size_t i) {
    if (t == MIST_F32) return ((const float *)buf)[i];
    if (t == MIST_BF16) return mist_bf16_to_f32(((const uint16_t *)buf)[i]);
    return ((const int32_t *)buf)[i];
}

static double reduce_val(CommOp op, int n, size_t i) {
    double acc = val(0, i);
    for (int q = 1; q < n; q++) acc = op == COMM_SUM ? acc + val(q, i) : (val(q, i) > acc ? val(q, i) : acc);
    return acc;
}

// first mismatch to stderr; 1 when buf[i] == want(i) for all i < count
#define EXPECT_ALL(buf, t, count, want_expr, what)                                                              \
    do {                                                                                                        \
        for (size_t i = 0; i < (count); i++) {                                                                  \
            double want_ = (want_expr), got_ = get((buf), (t), i);                                              \
            if (got_ != want_) {                                                                                \
                fprintf(stderr, "rank %d: %s %s [%zu]: got %g want %g\n", me, what, mist_dtype_name(t), i, got_, \
                        want_);                                                                                 \
                good = 0;                                                                                       \
                break;                                                                                          \
            }                                                                                                   \
        }                                                                                                       \
    } while (0)

enum { BLOCKING, NONBLOCKING, IN_PLACE };
static const char *mode_name[] = {"blocking", "nonblocking", "in place"};

static int finish(int rc, CommRequest *req, int mode) {
    if (rc == 0 && mode == NONBLOCKING) rc = C->wait(C, req);
    if (rc) {
        char text[256];
        C->error_string(C, rc, text, sizeof text);
        fprintf(stderr, "rank %d: %s\n", me, text);
    }
    return rc == 0;
}

static int t_all_reduce(CommGroup *g, MistDtype t, CommOp op, size_t count, int mode) {
    int n = C->group_size(C, g), r = C->group_rank(C, g), good = 1;
    size_t sz = mist_dtype_size(t);
    char *send = buf_alloc(count * sz), *recv = mode == IN_PLACE ? send : buf_alloc(count * sz);
    for (size_t i = 0; i < count; i++) put(send, t, i, val(r, i));
    CommRequest *req = NULL;
    int rc = mode == NONBLOCKING ? C->iall_reduce(C, send, recv, count, t, op, g, &req)
                                 : C->all_reduce(C, send, recv, count, t, op, g);
    good = finish(rc, req, mode);
    EXPECT_ALL(recv, t, count, reduce_val(op, n, i), op == COMM_SUM ? "all_reduce sum" : "all_reduce max");
    if (recv != send) buf_free(recv);
    buf_free(send);
    return good;
}

static int t_reduce_scatter(CommGroup *g, MistDtype t, CommOp op, size_t count, int mode) {
    int n = C->group_size(C, g), r = C->group_rank(C, g), good = 1;
    size_t sz = mist_dtype_size(t);
    char *send = buf_alloc((size_t)n * count * sz);
    char *recv = mode == IN_PLACE ? send + (size_t)r * count * sz : buf_alloc(count * sz);
    for (size_t i = 0; i < (size_t)n * count; i++) put(send, t, i, val(r, i));
    CommRequest *req = NULL;
    int rc = mode == NONBLOCKING ? C->ireduce_scatter(C, send, recv, count, t, op, g, &req)
                                 : C->reduce_scatter(C, send, recv, count, t, op, g);
    good = finish(rc, req, mode);
    EXPECT_ALL(recv, t, count, reduce_val(op, n, (size_t)r * count + i), "reduce_scatter");
    if (mode != IN_PLACE) buf_free(recv);
    buf_free(send);
    return good;
}

static int t_all_gather(CommGroup *g, MistDtype t, size_t count, int mode) {
    int n = C->group_size(C, g), r = C->group_rank(C, g), good = 1;
    size_t sz = mist_dtype_size(t);
    char *recv = buf_alloc((size_t)n * count * sz);
    char *send = mode == IN_PLACE ? recv + (size_t)r * count * sz : buf_alloc(count * sz);
    for (size_t i = 0; i < count; i++) put(send, t, i, val(r, i));
    CommRequest *req = NULL;
    int rc = mode == NONBLOCKING ? C->iall_gather(C, send, recv, count, t, g, &req)
                                 : C->all_gather(C, send, recv, count, t, g);
    good = finish(rc, req, mode);
    EXPECT_ALL(recv, t, (size_t)n * count, val((int)(i / count), i % count), "all_gather");
    if (mode != IN_PLACE) buf_free(send);
    buf_free(recv);
    return good;
}

static int t_broadcast(CommGroup *g, MistDtype t, size_t count, int mode) {
    int n = C->group_size(C, g), r = C->group_rank(C, g), root = n - 1, good = 1;
    char *buf = buf_alloc(count * mist_dtype_size(t));
    for (size_t i = 0; i < count; i++) put(buf, t, i, val(r, i));
    CommRequest *req = NULL;
    int rc = mode == NONBLOCKING ? C->ibroadcast(C, buf, count, t, root, g, &req) : C->broadcast(C, buf, count, t, root, g);
    good = finish(rc, req, mode);
    EXPECT_ALL(buf, t, count, val(root, i), "broadcast");
    buf_free(buf);
    return good;
}

// Ring shift by one: blocking needs an order (rank 0 sends first, the others
// receive first); nonblocking posts both and waits.
static int t_send_recv(CommGroup *g, MistDtype t, size_t count, int mode) {
    int n = C->group_size(C, g), r = C->group_rank(C, g), good = 1, rc = 0;
    int to = (r + 1) % n, from = (r + n - 1) % n;
    size_t sz = mist_dtype_size(t);
    char *out = malloc(count * sz), *in = calloc(count, sz);
    for (size_t i = 0; i < count; i++) put(out, t, i, val(r, i));
    if (mode == NONBLOCKING || n == 1) {
        CommRequest *rq = NULL, *sq = NULL;
        rc = C->irecv(C, in, count, t, from, 7, g, &rq);
        if (!rc) rc = C->isend(C, out, count, t, to, 7, g, &sq);
        if (!rc) rc = C->wait(C, sq);
        if (!rc) rc = C->wait(C, rq);
    } else if (r == 0) {
        rc = C->send(C, out, count, t, to, 7, g);
        if (!rc) rc = C->recv(C, in, count, t, from, 7, g);
    } else {
        rc = C->recv(C, in, count, t, from, 7, g);
        if (!rc) rc = C->send(C, out, count, t, to, 7, g);
    }
    good = finish(rc, NULL, BLOCKING);
    EXPECT_ALL(in, t, count, val(from, i), "send/recv");
    free(out);
    free(in);
    return good;
}

static void test_group(const char *name, CommGroup *g) {
    static const MistDtype types[] = {MIST_F32, MIST_BF16, MIST_I32};
    const size_t count = 37;  // odd, not a multiple of anything
    for (int k = 0; k < 3; k++) {
        MistDtype t = types[k];
        const char *tn = mist_dtype_name(t);
        for (int mode = BLOCKING; mode <= IN_PLACE; mode++) {
            check(t_all_reduce(g, t, COMM_SUM, count, mode), "%s: all_reduce sum %s %s", name, tn, mode_name[mode]);
            check(t_all_reduce(g, t, COMM_MAX, count, mode), "%s: all_reduce max %s %s", name, tn, mode_name[mode]);
            check(t_reduce_scatter(g, t, COMM_SUM, count, mode), "%s: reduce_scatter sum %s %s", name, tn,
                  mode_name[mode]);
            check(t_all_gather(g, t, count, mode), "%s: all_gather %s %s", name, tn, mode_name[mode]);
        }
        check(t_reduce_scatter(g, t, COMM_MAX, count, BLOCKING), "%s: reduce_scatter max %s", name, tn);
        for (int mode = BLOCKING; mode <= NONBLOCKING; mode++) {
            check(t_broadcast(g, t, count, mode), "%s: broadcast %s %s", name, tn, mode_name[mode]);
            check(t_send_recv(g, t, count, mode), "%s: send/recv ring %s %s", name, tn, mode_name[mode]);
        }
    }
    CommRequest *req = NULL;
    int rc = C->barrier(C, g);
    if (!rc) rc = C->ibarrier(C, g, &req);
    if (!rc) rc = C->wait(C, req);
    check(rc == 0, "%s: barrier and ibarrier", name);
}

// Random fp data: every rank must hold the same bits, close to the fp64 sum.
static void test_determinism(CommGroup *g, MistDtype t) {
    int n = C->group_size(C, g), r = C->group_rank(C, g), good = 1;
    const size_t count = 4099;
    size_t sz = mist_dtype_size(t);
    char *buf = buf_alloc(count * sz), *all = buf_alloc((size_t)n * count * sz);
    double *want = calloc(count, sizeof *want), *absum = calloc(count, sizeof *absum);
    for (int q = 0; q < n; q++) {
        uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(q + 1);
        for (size_t i = 0; i < count; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            double v = ((double)(s >> 11) / 9007199254740992.0 - 0.5) * 3.0;
            v = t == MIST_BF16 ? mist_bf16_to_f32(mist_f32_to_bf16((float)v)) : (float)v;
            if (q == r) put(buf, t, i, v);
            want[i] += v;
            absum[i] += fabs(v);
        }
    }
    commCheck(C, C->all_reduce(C, buf, buf, count, t, COMM_SUM, g));
    // each pairwise add rounds once: error <= (n-1) * eps * sum|x|
    double eps = t == MIST_BF16 ? 1.0 / 256 : 1.0 / (1 << 23);
    for (size_t i = 0; i < count && good; i++)
        good = near(get(buf, t, i), want[i], n * eps * absum[i] + 1e-30, 0, "random all_reduce");
    commCheck(C, C->all_gather(C, buf, all, count * sz, MIST_U8, g));
    for (int q = 0; q < n; q++) good &= memcmp(all + (size_t)q * count * sz, buf, count * sz) == 0;
    check(good, "random %s all_reduce: identical bits on all %d ranks, within rounding of the exact sum",
          mist_dtype_name(t), n);
    buf_free(buf), buf_free(all), free(want), free(absum);
}

// Several requests in flight at once, completed by polling test().
static void test_concurrent(CommGroup *g) {
    int n = C->group_size(C, g), r = C->group_rank(C, g), good = 1;
    enum { K = 64 };
    float *a = buf_alloc(K * sizeof(float)), *b = buf_alloc(K * sizeof(float));
    float *gathered = buf_alloc(8 * K * sizeof(float));
    int32_t *c = buf_alloc(K * sizeof(int32_t));
    for (int i = 0; i < K; i++) a[i] = (float)val(r, i), b[i] = (float)val(r, i), c[i] = (int32_t)val(r, i);
    CommRequest *req[3];
    int rc = C->iall_reduce(C, a, a, K, MIST_F32, COMM_SUM, g, &req[0]);
    if (!rc) rc = C->iall_gather(C, b, gathered, K, MIST_F32, g, &req[1]);
    if (!rc) rc = C->ibroadcast(C, c, K, MIST_I32, 0, g, &req[2]);
    int done[3] = {0, 0, 0}, left = 3;
    for (long spins = 0; !rc && left && spins < 100000000L; spins++)
        for (int k = 0; k < 3; k++)
            if (!done[k] && !rc) {
                rc = C->test(C, req[k], &done[k]);
                left -= done[k];
            }
    good = rc == 0 && left == 0;
    if (good) {
        for (int i = 0; i < K; i++)
            good &= a[i] == (float)reduce_val(COMM_SUM, n, i) && c[i] == (int32_t)val(0, i);
        for (int i = 0; i < n * K; i++) good &= gathered[i] == (float)val(i / K, i % K);
    }
    check(good, "three requests in flight, completed with test()");
    buf_free(a), buf_free(b), buf_free(gathered), buf_free(c);
}

static void test_errors(CommGroup *g) {
    uint16_t h[4] = {0};
    char text[256] = "";
    int rc = C->all_reduce(C, h, h, 4, MIST_F16, COMM_SUM, g);
    C->error_string(C, rc, text, sizeof text);
    check(rc != 0 && strstr(text, "f16"), "f16 reduction is refused with a message: %s", text);
    // Blocks of 2 start at even offsets, so send = recv + 1 is nobody's block:
    // every rank refuses before communicating (nobody waits for a partner).
    float buf[2 * 8 + 2];
    rc = C->all_gather(C, buf + 1, buf, 2, MIST_F32, g);
    check(rc != 0, "overlapping buffers that are not in place are refused");
    C->error_string(C, 123456, text, sizeof text);
    check(text[0] != '\0', "error_string for an unknown code: %s", text);
}

// A plan whose dp/tp groups have interesting shapes for n ranks.
static Plan plan_for(int n) {
    Plan p;
    memset(&p, 0, sizeof p);
    p.G = 1;
    p.num_stages = 1;
    p.stage[0] = (StagePlan){.layers = 2, .dp = n, .tp = 1, .b = 1};
    if (n == 4) p.stage[0].dp = 2, p.stage[0].tp = 2;
    if (n == 3) {  // stage 0: 1 rank, stage 1: dp 2
        p.num_stages = 2;
        p.stage[0].dp = 1;
        p.stage[1] = (StagePlan){.layers = 2, .dp = 2, .tp = 1, .b = 1};
    }
    if (n == 8) {  // stage 0: dp2 tp2, stage 1: dp1 tp4
        p.num_stages = 2;
        p.stage[0].dp = 2, p.stage[0].tp = 2;
        p.stage[1] = (StagePlan){.layers = 2, .dp = 1, .tp = 4, .b = 1};
    }
    return p;
}


// The groups every round runs on, from the MPI backend C: the world, a split
// into the first 3 ranks and the rest (ordered by descending world rank), and
// the dp/tp groups of a grid for plan_for(n). Returns 0, or 1 (reported).
static int suite_groups(int n, CommGroup **world, CommGroup **odd, Grid *grid) {
    commCheck(C, C->group_world(C, world));
    commCheck(C, C->group_split(C, *world, me < 3 ? 0 : 1, -me, odd));
    int odd_size = me < 3 ? (n < 3 ? n : 3) : n - 3;
    int odd_rank = me < 3 ? odd_size - 1 - me : n - 1 - me;
    check(C->group_size(C, *world) == n && C->group_rank(C, *world) == me, "world group: rank %d of %d", me, n);
    check(C->group_size(C, *odd) == odd_size && C->group_rank(C, *odd) == odd_rank, "split: sizes and key order");
    Plan plan = plan_for(n);
    char err[512];
    int rc = grid_build(grid, &plan, C, err, sizeof err);
    check(rc == 0, "grid for %d ranks: %s", n, rc ? err : "built");
    return rc != 0;
}

// Frees the device backend and suite_groups' groups (with the MPI backend), ends MPI;
// the exit status: rank 0's TAP verdict.
static int suite_finish(const CommBackend *mpi, CommGroup *world, CommGroup *odd, Grid *grid) {
    if (dev_be) dev_be->destroy(dev_be);
    dev_be = NULL;
    C = mpi;
    grid_free(grid);
    C->group_free(C, odd);
    C->group_free(C, world);
    int rc = me == 0 ? tap_done() : 0;
    launch_finalize();
    return rc;
}
#endif
