// Solve time of the inter-stage MILP on planner-sized instances: S = 4 and 8
// stages, L = 48 and 96 layers, 30-point frontiers for every (stage, layer count)
// that fits. Frontiers are synthetic but shaped like the planner's: time grows
// with the layer count, the delay term trades off against time along the
// frontier, and layer counts far above the even share do not fit. Prints a table
// and, with --json PATH, the same rows as a JSON array.
//
// usage: bench_milp [--quick] [--dp-only] [--cutoff] [--json PATH]   (lp = milp_solve, dp = milp_solve_dp;
// --cutoff gives milp_solve the DP's optimum as its cutoff)
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/milp.h"

#define NPOINTS 30

static uint64_t rng_state = 12345;
static double rnd(void) {  // splitmix64 -> [0, 1)
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

typedef struct {
    int S, L, G;
    double ms_mean, ms_max, objective, uniform, dp_ms_mean, dp_ms_max;
    long long nodes, labels;
    int agree;  // the DP's optimum equals lp_solve's (1e-9 relative)
    int optimal;
} Row;

// frontier k of (stage i, j layers): t = j·c_i·(1 + 0.8·u_k), d = c_i·j·(1.5 − u_k)
// + first/last-stage extras, u_k increasing in k so t rises as d falls
static void build(int S, int L, MilpFrontier *f, double *tv, double *dv) {
    int cap = (2 * L + S - 1) / S + 2;  // layer counts above ~2x the even share do not fit
    for (int i = 0; i < S; ++i) {
        double c = 0.9 + 0.2 * rnd() + (i == 0 || i == S - 1 ? 0.15 : 0.0);
        for (int j = 1; j <= L; ++j) {
            int idx = i * L + (j - 1);
            double *t = tv + (size_t)idx * NPOINTS, *d = dv + (size_t)idx * NPOINTS;
            if (j > cap) {
                f[idx] = (MilpFrontier){0, t, d};
                continue;
            }
            double u = 0;
            for (int k = 0; k < NPOINTS; ++k) {
                u += (1.0 + rnd()) / NPOINTS / 1.5;
                t[k] = j * c * (1.0 + 0.8 * u) * 1e-3;
                d[k] = (c * j * (1.5 - u) + (i == 0 ? 3.0 : 0.0)) * 1e-3;
            }
            f[idx] = (MilpFrontier){NPOINTS, t, d};
        }
    }
}

int main(int argc, char **argv) {
    const char *json = NULL;
    int quick = 0, skip_lp = 0, use_cutoff = 0;
    for (int a = 1; a < argc; ++a) {
        if (!strcmp(argv[a], "--quick")) quick = 1;
        else if (!strcmp(argv[a], "--dp-only")) skip_lp = 1;
        else if (!strcmp(argv[a], "--cutoff")) use_cutoff = 1;
        else if (!strcmp(argv[a], "--json") && a + 1 < argc) json = argv[++a];
        else {
            fprintf(stderr, "bench_milp: unknown argument '%s'; usage: bench_milp [--quick] [--dp-only] [--cutoff] [--json PATH]\n", argv[a]);
            return 2;
        }
    }
    int Ss[] = {2, 4, 8}, Ls[] = {48, 96}, Gs[] = {8, 64};
    int reps = quick ? 1 : 5;
    Row rows[16];
    int nrows = 0;
    printf("%3s %4s %4s %10s %10s %8s %10s %10s %8s %12s %12s %s\n", "S", "L", "G", "lp ms", "lp max", "nodes",
           "dp ms", "dp max", "labels", "objective", "even split", "status");
    for (size_t si = 0; si < sizeof Ss / sizeof *Ss; ++si)
        for (size_t li = 0; li < sizeof Ls / sizeof *Ls; ++li)
            for (size_t gi = 0; gi < sizeof Gs / sizeof *Gs; ++gi) {
                int S = Ss[si], L = Ls[li], G = Gs[gi];
                MilpFrontier *f = malloc((size_t)S * L * sizeof *f);
                double *tv = malloc((size_t)S * L * NPOINTS * sizeof *tv);  // (S, L, NPOINTS)
                double *dv = malloc((size_t)S * L * NPOINTS * sizeof *dv);  // (S, L, NPOINTS)
                if (!f || !tv || !dv) {
                    fprintf(stderr, "bench_milp: out of memory\n");
                    return 1;
                }
                Row r = {S, L, G, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1};
                for (int rep = 0; rep < reps; ++rep) {
                    build(S, L, f, tv, dv);
                    MilpProblem p = {S, L, G, L, NULL, f, quick ? 10.0 : 60.0, 0.0};
                    MilpSolution sol;
                    MilpSolution dps;
                    milp_solve_dp(&p, &dps);
                    if (!skip_lp) {
                        p.cutoff = use_cutoff ? dps.objective : 0.0;
                        milp_solve(&p, &sol);
                    }
                    r.dp_ms_mean += dps.seconds * 1e3 / reps;
                    r.dp_ms_max = fmax(r.dp_ms_max, dps.seconds * 1e3);
                    r.labels += dps.nodes;
                    if (skip_lp) sol = dps, sol.seconds = 0, sol.nodes = 0;
                    else if (sol.status == MILP_OPTIMAL &&
                             fabs(sol.objective - dps.objective) > 1e-9 * fabs(dps.objective))
                        r.agree = 0;
                    r.ms_mean += sol.seconds * 1e3 / reps;
                    r.ms_max = fmax(r.ms_max, sol.seconds * 1e3);
                    r.nodes += sol.nodes;
                    r.optimal &= sol.status == MILP_OPTIMAL;
                    r.objective = sol.objective;
                    // reference point: the even split with each stage's fastest point
                    double t[MIST_MAX_STAGES], d[MIST_MAX_STAGES];
                    for (int i = 0; i < S; ++i) {
                        int j = L / S + (i < L % S);
                        const MilpFrontier *fr = &f[i * L + j - 1];
                        double best = INFINITY;
                        for (int k = 0; k < fr->npoints; ++k) {
                            t[i] = fr->t[k], d[i] = fr->d[k];
                            // a single stage's best point in isolation: G·t + d
                            if (G * t[i] + d[i] < best) best = G * t[i] + d[i];
                        }
                        for (int k = 0; k < fr->npoints; ++k)
                            if (G * fr->t[k] + fr->d[k] == best) t[i] = fr->t[k], d[i] = fr->d[k];
                    }
                    r.uniform = milp_pipeline_time(S, G, t, d);
                }
                r.nodes /= reps;
                r.labels /= reps;
                rows[nrows++] = r;
                char lpms[16] = "-", lpmax[16] = "-", lpnodes[24] = "-";
                if (!skip_lp) {
                    snprintf(lpms, sizeof lpms, "%.3f", r.ms_mean);
                    snprintf(lpmax, sizeof lpmax, "%.3f", r.ms_max);
                    snprintf(lpnodes, sizeof lpnodes, "%lld", r.nodes);
                }
                printf("%3d %4d %4d %10s %10s %8s %10.3f %10.3f %8lld %12.6f %12.6f %s%s\n", S, L, G, lpms, lpmax,
                       lpnodes, r.dp_ms_mean, r.dp_ms_max, r.labels, r.objective, r.uniform,
                       skip_lp ? "dp only" : r.optimal ? "lp optimal" : "lp time limit",
                       r.agree ? "" : " DP DISAGREES");
                fflush(stdout);
                free(f);
                free(tv);
                free(dv);
            }
    if (json) {
        FILE *fp = fopen(json, "w");
        if (!fp) {
            fprintf(stderr, "bench_milp: cannot write --json file '%s'\n", json);
            return 1;
        }
        fprintf(fp, "[\n");
        for (int i = 0; i < nrows; ++i)
            fprintf(fp,
                    "  {\"lp_run\": %s, \"stages\": %d, \"layers\": %d, \"microbatches\": %d, \"points\": %d, \"ms_mean\": %.4f, "
                    "\"ms_max\": %.4f, \"nodes\": %lld, \"dp_ms_mean\": %.4f, \"dp_ms_max\": %.4f, \"dp_labels\": %lld, "
                    "\"objective\": %.9g, \"even_split\": %.9g, \"lp_optimal\": %s, \"dp_agrees\": %s}%s\n",
                    skip_lp ? "false" : "true", rows[i].S, rows[i].L, rows[i].G, NPOINTS, rows[i].ms_mean, rows[i].ms_max, rows[i].nodes,
                    rows[i].dp_ms_mean, rows[i].dp_ms_max, rows[i].labels, rows[i].objective, rows[i].uniform,
                    rows[i].optimal ? "true" : "false", rows[i].agree ? "true" : "false", i + 1 < nrows ? "," : "");
        fprintf(fp, "]\n");
        fclose(fp);
    }
    return 0;
}
