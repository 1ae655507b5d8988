// Pareto frontier: compared with an O(n^2) definition-based reference on random
// sets (seed printed; MIST_SEED=N repeats one), plus duplicates, one point, all
// equal, NaN; the bounded sample keeps both ends and spreads evenly in t.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "planner/pareto.h"
#include "tests/tap.h"

static uint64_t rng_state;
static double rnd(void) {  // splitmix64 -> [0, 1)
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

// definition: i is kept when no j dominates it and no j < i is identical
static int reference_frontier(const double *t, const double *d, int n, int *out) {
    int count = 0;
    for (int i = 0; i < n; ++i) {
        if (isnan(t[i]) || isnan(d[i])) continue;
        int keep = 1;
        for (int j = 0; j < n && keep; ++j) {
            if (j == i || isnan(t[j]) || isnan(d[j])) continue;
            int weak = t[j] <= t[i] && d[j] <= d[i];
            int same = t[j] == t[i] && d[j] == d[i];
            if ((weak && !same) || (same && j < i)) keep = 0;
        }
        if (keep) out[count++] = i;
    }
    // sort by t (insertion sort; t values on a frontier are distinct)
    for (int a = 1; a < count; ++a)
        for (int b = a; b > 0 && t[out[b]] < t[out[b - 1]]; --b) {
            int tmp = out[b];
            out[b] = out[b - 1];
            out[b - 1] = tmp;
        }
    return count;
}

static int same_list(const int *a, int na, const int *b, int nb) {
    if (na != nb) return 0;
    for (int i = 0; i < na; ++i)
        if (a[i] != b[i]) return 0;
    return 1;
}

static int sorted_and_decreasing(const double *t, const double *d, const int *f, int m) {
    for (int i = 1; i < m; ++i)
        if (!(t[f[i]] > t[f[i - 1]] && d[f[i]] < d[f[i - 1]])) return 0;
    return 1;
}

#define NMAX 400

int main(void) {
    const char *env = getenv("MIST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    rng_state = seed;
    diag("seed %llu (rerun with MIST_SEED=%llu)", (unsigned long long)seed, (unsigned long long)seed);

    static double t[NMAX], d[NMAX];
    static int got[NMAX], want[NMAX], smp[NMAX];

    // random sets: continuous values, coarse grids (many ties and duplicates), and
    // anti-correlated clouds (large frontiers)
    int bad = 0, bad_order = 0, total_front = 0;
    for (int trial = 0; trial < 600 && !bad; ++trial) {
        int n = 1 + (int)(rnd() * (trial % 3 == 2 ? NMAX : 60));
        int kind = trial % 3;
        for (int i = 0; i < n; ++i) {
            if (kind == 0) {
                t[i] = rnd();
                d[i] = rnd();
            } else if (kind == 1) {
                t[i] = (double)(int)(rnd() * 6);
                d[i] = (double)(int)(rnd() * 6);
            } else {
                double x = rnd();
                t[i] = x + 0.05 * rnd();
                d[i] = 1.0 / (0.1 + x) + 0.3 * rnd();
            }
        }
        int m = pareto_frontier(t, d, n, got);
        int r = reference_frontier(t, d, n, want);
        total_front += r;
        if (!same_list(got, m, want, r)) {
            bad = 1;
            diag("trial %d (kind %d, n %d): frontier has %d points, reference %d", trial, kind, n, m, r);
        }
        if (!sorted_and_decreasing(t, d, got, m)) bad_order = 1;
    }
    ok(!bad, "600 random sets: frontier equals the O(n^2) reference (%d frontier points in all)", total_front);
    ok(!bad_order, "frontiers are sorted by t ascending with d strictly decreasing");

    // duplicates: the lowest index of identical points survives
    double td[] = {3, 1, 2, 1, 1, 3}, dd[] = {1, 5, 2, 5, 6, 1};
    int m = pareto_frontier(td, dd, 6, got);
    ok(m == 3 && got[0] == 1 && got[1] == 2 && got[2] == 0,
       "duplicates: (1,5)x2, (2,2), (3,1)x2 give indices 1, 2, 0 (got %d points)", m);

    double t1[] = {0.25}, d1[] = {7};
    m = pareto_frontier(t1, d1, 1, got);
    ok(m == 1 && got[0] == 0, "single point is its own frontier");

    double te[5] = {2, 2, 2, 2, 2}, de[5] = {4, 4, 4, 4, 4};
    m = pareto_frontier(te, de, 5, got);
    ok(m == 1 && got[0] == 0, "all-equal points: one survives, index 0 (got %d, first %d)", m, m > 0 ? got[0] : -1);

    double tn[] = {NAN, 1, 2}, dn[] = {0, 3, NAN};
    m = pareto_frontier(tn, dn, 3, got);
    ok(m == 1 && got[0] == 1, "points with NaN are skipped");
    ok(pareto_frontier(tn, dn, 0, got) == 0, "empty input gives an empty frontier");

    // equal d, different t: only the smaller t is non-dominated
    double tq[] = {2, 1, 3}, dq[] = {5, 5, 5};
    m = pareto_frontier(tq, dq, 3, got);
    ok(m == 1 && got[0] == 1, "equal d: the smallest t dominates the others");

    // bounded sample on a uniform frontier t = 0..30: K = 4 must pick t = 0, 10, 20, 30
    for (int i = 0; i < 31; ++i) t[i] = (double)i, d[i] = 100.0 - (double)i;
    m = pareto_frontier(t, d, 31, got);
    int k = pareto_sample(t, got, m, 4, smp);
    ok(k == 4 && t[smp[0]] == 0 && t[smp[1]] == 10 && t[smp[2]] == 20 && t[smp[3]] == 30,
       "sample of a uniform 31-point frontier with K=4 is t = 0, 10, 20, 30");
    k = pareto_sample(t, got, m, 31, smp);
    ok(k == 31 && same_list(smp, k, got, m), "K >= frontier size keeps all of it");
    ok(pareto_sample(t, got, m, 1, smp) == -1, "K = 1 with a larger frontier is refused (two ends need two slots)");

    // random frontiers: sample has min(m, K) distinct points in frontier order, both
    // ends, and every inner target t is within one frontier gap of its pick
    int sbad = 0;
    for (int trial = 0; trial < 300 && !sbad; ++trial) {
        int n = 2 + (int)(rnd() * (NMAX - 2));
        for (int i = 0; i < n; ++i) {
            double x = rnd();
            t[i] = x;
            d[i] = 1.0 / (0.1 + x) + 0.01 * rnd();
        }
        m = pareto_frontier(t, d, n, got);
        int K = 2 + (int)(rnd() * 30);
        k = pareto_sample(t, got, m, K, smp);
        int expect = m < K ? m : K;
        if (k != expect || smp[0] != got[0] || smp[k - 1] != got[m - 1]) {
            sbad = 1;
            diag("trial %d: m %d K %d -> %d points", trial, m, K, k);
            break;
        }
        int pos = -1;
        for (int s = 0; s < k && !sbad; ++s) {  // a subsequence of the frontier
            int q = pos + 1;
            while (q < m && got[q] != smp[s]) ++q;
            if (q == m) sbad = 1;
            pos = q;
        }
        if (sbad) diag("trial %d: sample is not an ordered subset of the frontier", trial);
        double maxgap = 0;
        for (int i = 1; i < m; ++i) maxgap = fmax(maxgap, t[got[i]] - t[got[i - 1]]);
        double t0 = t[got[0]], tl = t[got[m - 1]];
        if (m > K) {
            // where the frontier is denser than the grid, each pick is near its target
            double step = (tl - t0) / (K - 1);
            if (maxgap < step / 2)
                for (int s = 1; s < k - 1 && !sbad; ++s)
                    if (fabs(t[smp[s]] - (t0 + step * s)) > maxgap) {
                        sbad = 1;
                        diag("trial %d: pick %d at t %g, target %g, max gap %g", trial, s, t[smp[s]], t0 + step * s, maxgap);
                    }
        }
    }
    ok(!sbad, "300 random samples: min(m, K) points, both ends, ordered subset, picks within one gap of the even grid");
    return tap_done();
}
