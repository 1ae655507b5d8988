// Pareto frontiers of (time, memory-like) candidate pairs, smaller is better in
// both coordinates; plus a bounded sample of a frontier that keeps its two ends.
#ifndef MIST_PARETO_H
#define MIST_PARETO_H

// Indices of the non-dominated points among (t[i], d[i]), i < n. Point a dominates
// b when t_a <= t_b and d_a <= d_b with one strict; of identical points the one with
// the lowest index is kept. Writes the indices to out (capacity n) sorted by t
// ascending, so d is strictly decreasing along them, and returns their count.
// Points with a NaN coordinate are never kept. O(n log n). Returns -1 when out of
// memory or given n < 0.
int pareto_frontier(const double *t, const double *d, int n, int *out);

// Bounded sample of a frontier: front[0..m) are frontier indices into t sorted by t
// ascending (as pareto_frontier returns them). Writes at most k of them to out, in
// the same order, always including front[0] and front[m-1]; the inner ones are the
// points nearest to k-2 evenly spaced t values between the two ends, so the sample
// covers the curve evenly in t. With m <= k all of front is copied. Returns the
// count written, or -1 when k < 2 and m > k (the two ends need two slots).
int pareto_sample(const double *t, const int *front, int m, int k, int *out);

#endif
