// The hierarchical collectives (runtime/comm_hier.h) against the flat ones,
// through whichever backend C the including test runs (tests/comm_suite.h):
// the world split into nodes of g consecutive ranks (4 ranks as 2 x 2; 8 as
// 4 x 2 and 2 x 4), odd counts, f32 and bf16, in place and not, with and
// without the pipelined (overlap) all-reduce. Every result must be the same
// bits on every rank and equal the flat result within the reassociation
// bound:
//   f32:  |hier - flat| <= 2 (P-1) 2^-24 sum_r |x_r|   (two orders of P-1 adds)
//   bf16: |hier - flat| <= 2 (P-1) 2^-9 sum_r |x_r|  (each form rounds a partial
//         sum to bf16 at most P-1 times: once per level here, once per add on a
//         backend that adds in bf16, as the NCCL stand-in does)
// max and all-gather are exact.
#ifndef MIST_TESTS_COMM_HIER_SUITE_H
#define MIST_TESTS_COMM_HIER_SUITE_H
#include <stdint.h>
#include "runtime/comm_hier.h"
#include "tests/comm_suite.h"

// reals in [-1, 1] with many significant bits: sums reassociate visibly
static double hval(int rank, size_t i) {
    uint32_t h = (uint32_t)(rank + 1) * 2654435761u ^ (uint32_t)(i + 7) * 2246822519u;
    h ^= h >> 15, h *= 2654435761u, h ^= h >> 13;
    return (double)(h % 200001u) / 100000.0 - 1.0;
}
// the value a rank stores (bf16 rounds it)
static double hstored(MistDtype t, int rank, size_t i) {
    return t == MIST_BF16 ? mist_bf16_to_f32(mist_f32_to_bf16((float)hval(rank, i))) : (float)hval(rank, i);
}
static double habs_sum(MistDtype t, int n, size_t i) {
    double s = 0;
    for (int q = 0; q < n; q++) s += fabs(hstored(t, q, i));
    return s;
}

// 1 when the count elements of buf are the same bits on every rank of the world
static int same_everywhere(const void *buf, size_t bytes) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < bytes; i++) h = (h ^ ((const unsigned char *)buf)[i]) * 1099511628211ull;
    uint64_t lo = h, hi = h;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

// got[i] vs want[i] (element `first + i` of the whole buffer) within the bound
static int hclose(const void *got, const void *want, MistDtype t, CommOp op, int n, size_t first, size_t count,
                  const char *what) {
    double eps = op == COMM_MAX ? 0 : 2.0 * (n - 1) / (t == MIST_BF16 ? 512.0 : 16777216.0);
    for (size_t i = 0; i < count; i++) {
        double a = get(got, t, i), b = get(want, t, i), tol = eps * habs_sum(t, n, first + i);
        if (!(fabs(a - b) <= tol)) {
            fprintf(stderr, "rank %d: hier %s %s [%zu]: %.9g, flat %.9g (bound %.3g)\n", me, what, mist_dtype_name(t),
                    first + i, a, b, tol);
            return 0;
        }
    }
    return 1;
}

// all-reduce of count elements: in place or not, in `chunks` (comm_hier_all_reduce), against the flat one
static int h_all_reduce(CommHier *h, CommGroup *g, MistDtype t, CommOp op, size_t count, int in_place, int chunks) {
    int n = C->group_size(C, g), r = C->group_rank(C, g);
    size_t sz = mist_dtype_size(t);
    char *send = buf_alloc(count * sz), *flat = buf_alloc(count * sz);
    char *recv = in_place ? send : buf_alloc(count * sz);
    for (size_t i = 0; i < count; i++) put(send, t, i, hval(r, i));
    int rc = C->all_reduce(C, send, flat, count, t, op, g);
    if (!rc) rc = comm_hier_all_reduce(h, send, recv, count, t, op, chunks);
    int same = same_everywhere(recv, count * sz);  // collective: every rank calls it
    int good = rc == 0 && same && hclose(recv, flat, t, op, n, 0, count, "all_reduce");
    if (!in_place) buf_free(recv);
    buf_free(send), buf_free(flat);
    return good;
}

// reduce-scatter of count per rank (in place or not) against the flat one
static int h_reduce_scatter(CommHier *h, CommGroup *g, MistDtype t, size_t count, int in_place) {
    int n = C->group_size(C, g), r = C->group_rank(C, g);
    size_t sz = mist_dtype_size(t), all = (size_t)n * count;
    char *send = buf_alloc(all * sz), *copy = buf_alloc(all * sz), *flat = buf_alloc(count * sz);
    char *recv = in_place ? send + (size_t)r * count * sz : buf_alloc(count * sz);
    for (size_t i = 0; i < all; i++) put(send, t, i, hval(r, i)), put(copy, t, i, hval(r, i));
    int rc = C->reduce_scatter(C, copy, flat, count, t, COMM_SUM, g);
    if (!rc) rc = comm_hier_reduce_scatter(h, send, recv, count, t, COMM_SUM);
    int good = rc == 0 && hclose(recv, flat, t, COMM_SUM, n, (size_t)r * count, count, "reduce_scatter");
    // the blocks put back together must be one buffer on every rank (each block summed once)
    char *whole = buf_alloc(all * sz);
    int gathered = C->all_gather(C, recv, whole, count, t, g) == 0;
    int same = same_everywhere(whole, all * sz);  // collective: every rank calls it
    good = good && gathered && same;
    if (!in_place) buf_free(recv);
    buf_free(send), buf_free(copy), buf_free(flat), buf_free(whole);
    return good;
}

// all-gather (in place or not): exactly every rank's block in rank order
static int h_all_gather(CommHier *h, CommGroup *g, MistDtype t, size_t count, int in_place) {
    int n = C->group_size(C, g), r = C->group_rank(C, g), good = 1;
    size_t sz = mist_dtype_size(t);
    char *recv = buf_alloc((size_t)n * count * sz);
    char *send = in_place ? recv + (size_t)r * count * sz : buf_alloc(count * sz);
    for (size_t i = 0; i < count; i++) put(send, t, i, hval(r, i));
    int rc = comm_hier_all_gather(h, send, recv, count, t);
    good = rc == 0;
    EXPECT_ALL(recv, t, (size_t)n * count, hstored(t, (int)(i / count), i % count), "hier all_gather");
    if (!in_place) buf_free(send);
    buf_free(recv);
    return good;
}

// Three operations in flight at once, finished by comm_hier_test in an order that
// differs from rank to rank (odd ranks poll the newest first): the hierarchy starts
// sub-operations in one global order, so every group sees the same sequence on every
// rank. Then 40 all-reduces in flight (more than its 32 slots), waited newest first.
static int h_in_flight(CommHier *h, CommGroup *g, MistDtype t) {
    int n = C->group_size(C, g), r = C->group_rank(C, g), rc = 0;
    size_t sz = mist_dtype_size(t), count = 1001, all = (size_t)n * count;
    char *a = buf_alloc(count * sz), *aref = buf_alloc(count * sz), *b = buf_alloc(all * sz);
    char *bcopy = buf_alloc(all * sz), *bref = buf_alloc(count * sz), *cc = buf_alloc(all * sz);
    for (size_t i = 0; i < all; i++) put(b, t, i, hval(r, i)), put(bcopy, t, i, hval(r, i));
    for (size_t i = 0; i < count; i++) put(a, t, i, hval(r + 3, i)), put(cc, t, (size_t)r * count + i, hval(r, i));
    rc |= C->all_reduce(C, a, aref, count, t, COMM_SUM, g) | C->reduce_scatter(C, bcopy, bref, count, t, COMM_SUM, g);
    CommRequest *q[3] = {NULL, NULL, NULL};
    rc |= comm_hier_istart(h, COLL_ALL_REDUCE, a, a, count, t, COMM_SUM, 3, &q[0]);
    rc |= comm_hier_istart(h, COLL_REDUCE_SCATTER, b, b + (size_t)r * count * sz, count, t, COMM_SUM, 1, &q[1]);
    rc |= comm_hier_istart(h, COLL_ALL_GATHER, cc + (size_t)r * count * sz, cc, count, t, COMM_SUM, 1, &q[2]);
    for (long spin = 0; !rc && (q[0] || q[1] || q[2]) && spin < 100000000L; spin++)
        for (int k = 0; k < 3 && !rc; k++) {
            int i = r % 2 ? 2 - k : k, done = 0;
            if (q[i]) rc |= comm_hier_test(h, C, q[i], &done);
            if (done) q[i] = NULL;
        }
    int good = rc == 0 && !q[0] && !q[1] && !q[2];
    int same = same_everywhere(a, count * sz);  // collective: every rank calls it
    good = good && same && hclose(a, aref, t, COMM_SUM, n, 0, count, "in flight all_reduce") &&
           hclose(b + (size_t)r * count * sz, bref, t, COMM_SUM, n, (size_t)r * count, count, "in flight reduce_scatter");
    EXPECT_ALL(cc, t, all, hstored(t, (int)(i / count), i % count), "in flight all_gather");
    buf_free(a), buf_free(aref), buf_free(b), buf_free(bcopy), buf_free(bref), buf_free(cc);
    enum { MANY = 40, SMALL = 7 };
    char *m = buf_alloc(MANY * SMALL * sz), *mref = buf_alloc(MANY * SMALL * sz);
    CommRequest *mq[MANY];
    for (size_t i = 0; i < MANY * SMALL; i++) put(m, t, i, hval(r, i));
    rc = C->all_reduce(C, m, mref, MANY * SMALL, t, COMM_SUM, g);
    for (int k = 0; k < MANY; k++)
        rc |= comm_hier_istart(h, COLL_ALL_REDUCE, m + k * SMALL * sz, m + k * SMALL * sz, SMALL, t, COMM_SUM, 1, &mq[k]);
    for (int k = MANY - 1; k >= 0; k--)
        if (mq[k]) rc |= comm_hier_wait(h, C, mq[k]);
    good = good && rc == 0 && hclose(m, mref, t, COMM_SUM, n, 0, MANY * SMALL, "40 in flight");
    buf_free(m), buf_free(mref);
    return good;
}

// The rounds on the world split into nodes of g ranks (nothing unless the world is
// at least 2 nodes of g), then groups that must stay flat.
static void test_hier(const char *name, CommGroup *world, int g) {
    int n = C->group_size(C, world);
    if (n % g || n / g < 2) return;
    CommHier *h = NULL;
    char why[160];
    int rc = comm_hier_new(C, world, me / g, &h, why, sizeof why);
    check(rc == 0 && h && comm_hier_nodes(h) == n / g && comm_hier_per_node(h) == g, "%s hier %d x %d: %s", name,
          n / g, g, rc ? "split failed" : why);
    if (!h) return;
    static const size_t counts[] = {1, 7, 1001, 40003};
    for (int d = 0; d < 2; d++) {
        MistDtype t = d ? MIST_BF16 : MIST_F32;
        const char *tn = mist_dtype_name(t);
        int ar = 1, ov = 1, rs = 1, ag = 1;
        for (int k = 0; k < 4; k++) {
            size_t c = counts[k];
            // every rank runs every collective (no short cut on a failure: the others would wait)
            ar &= h_all_reduce(h, world, t, COMM_SUM, c, k % 2, 0) & h_all_reduce(h, world, t, COMM_SUM, c, 1, 0);
            ov &= h_all_reduce(h, world, t, COMM_SUM, c, 1, 3) & h_all_reduce(h, world, t, COMM_MAX, c, 0, 8);
            rs &= h_reduce_scatter(h, world, t, c, 1) & h_reduce_scatter(h, world, t, c, k == 1 ? 0 : 1);
            ag &= h_all_gather(h, world, t, c, 1) & h_all_gather(h, world, t, c, k == 1 ? 0 : 1);
        }
        check(ar, "%s hier %d x %d: all_reduce %s (counts 1, 7, 1001, 40003; in place and not) = flat, same bits "
              "everywhere", name, n / g, g, tn);
        check(ov, "%s hier %d x %d: pipelined all_reduce %s (sum in 3 chunks, max in 8) = flat", name, n / g, g, tn);
        if (t == MIST_F32)
            check(h_all_reduce(h, world, t, COMM_SUM, ((size_t)1 << 20) + 3, 1, COMM_HIER_AUTO) &
                      h_all_reduce(h, world, t, COMM_SUM, ((size_t)1 << 20) + 3, 0, 5),
                  "%s hier %d x %d: all_reduce of 2^20+3 f32, chunks as training takes them and in 5 = flat", name,
                  n / g, g);
        check(rs, "%s hier %d x %d: reduce_scatter %s = flat", name, n / g, g, tn);
        check(ag, "%s hier %d x %d: all_gather %s = flat", name, n / g, g, tn);
    }
    check(h_in_flight(h, world, MIST_F32) & h_in_flight(h, world, MIST_BF16),
          "%s hier %d x %d: all_reduce, reduce_scatter, all_gather in flight at once, polled in another order on odd "
          "ranks; 40 all_reduces in flight (32 slots) = flat", name, n / g, g);
    comm_hier_free(h);
    // one node, and nodes of unequal size: flat, saying why
    rc = comm_hier_new(C, world, 0, &h, why, sizeof why);
    check(rc == 0 && !h && strstr(why, "inside one node"), "%s: one node stays flat (%s)", name, why);
    comm_hier_free(h);
    rc = comm_hier_new(C, world, me == 0 ? 0 : 1 + me % 2, &h, why, sizeof why);
    check(rc == 0 && !h && strstr(why, "different numbers"), "%s: unequal nodes stay flat (%s)", name, why);
    comm_hier_free(h);
}

#endif
