// Pareto frontier by one sort and one sweep: after sorting by (t, d, index) a point
// is non-dominated exactly when its d is below every d seen before it, because all
// earlier points have t no larger (and, at equal t, d no larger).
#include "planner/pareto.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    double t, d;
    int index;
} ParetoPoint;

static int pareto_point_cmp(const void *pa, const void *pb) {
    const ParetoPoint *a = pa, *b = pb;
    if (a->t != b->t) return a->t < b->t ? -1 : 1;
    if (a->d != b->d) return a->d < b->d ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

int pareto_frontier(const double *t, const double *d, int n, int *out) {
    if (n < 0) return -1;
    if (n == 0) return 0;
    ParetoPoint *pts = malloc((size_t)n * sizeof *pts);  // (n,) the non-NaN points
    if (!pts) return -1;
    int valid = 0;
    for (int i = 0; i < n; ++i) {
        if (isnan(t[i]) || isnan(d[i])) continue;
        pts[valid++] = (ParetoPoint){t[i], d[i], i};
    }
    qsort(pts, (size_t)valid, sizeof *pts, pareto_point_cmp);
    int count = 0;
    for (int i = 0; i < valid; ++i) {
        // strict: a later point with equal d has t no smaller, so it is dominated
        // (or identical to one already kept, which has the lower index)
        if (count == 0 || pts[i].d < d[out[count - 1]]) out[count++] = pts[i].index;
    }
    free(pts);
    return count;
}

int pareto_sample(const double *t, const int *front, int m, int k, int *out) {
    if (m <= k) {
        for (int i = 0; i < m; ++i) out[i] = front[i];
        return m < 0 ? 0 : m;
    }
    if (k < 2) return -1;
    double t0 = t[front[0]], t1 = t[front[m - 1]];
    out[0] = front[0];
    int prev = 0;  // position in front of the last pick
    for (int s = 1; s <= k - 2; ++s) {
        double target = t0 + (t1 - t0) * (double)s / (double)(k - 1);
        // pick after the previous one and leave room for the k-1-s picks still due
        // (the last of them is the end point itself)
        int lo = prev + 1, hi = m - 1 - (k - 1 - s);
        int best = lo;
        for (int p = lo; p <= hi; ++p) {
            if (t[front[p]] > target) {
                // the first point past the target or the one just before it
                best = (p > lo && target - t[front[p - 1]] <= t[front[p]] - target) ? p - 1 : p;
                break;
            }
            best = p;
        }
        out[s] = front[best];
        prev = best;
    }
    out[k - 1] = front[m - 1];
    return k;
}
