// Flat ring against hierarchical collectives (runtime/comm_hier.h; docs/paro.md
// "Hierarchical collectives") on this machine's MPI ranks, simulated as
// nodes x ranks per node (2 x 2 and 4 x 2 by default: a node is g consecutive
// ranks). One table per algorithm (flat ring, hierarchical, hierarchical with
// overlap) and shape; a row per collective and size (f32, 1 .. 64 MiB, the
// whole buffer): the ring model's latency steps on the critical path, the bytes
// that cross a node boundary per rank and per node (the busiest of each),
// the measured time (best of R, slowest rank) and the time the presets gcp-l4,
// dgx-a100-80g and dgx-h100 predict (flat: profile_collective_seconds;
// hierarchical: cost_hier_collective_seconds). Simulated nodes on one machine
// share its memory, so the measured times carry no network saving: they check
// that the algorithms run and what their extra steps cost, the predictions
// say where the hierarchy wins.
//
// usage: mpirun -np 8 benchmarks/bench_collectives [--shapes 2x2,4x2] [--sizes 1,4,16,64]
//            [--repeat R] [--json PATH] [--quick]
//   defaults: sizes in MiB 1,4,16,64; R = 3; PATH = benchmarks/bench_collectives.json;
//   --quick: sizes 1 and 4, R = 1
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/profile.h"
#include "planner/cost_terms.h"
#include "runtime/comm_hier.h"
#include "runtime/comm_mpi.h"
#include "runtime/launch.h"

enum { ALG_FLAT, ALG_HIER, ALG_OVERLAP, ALG_COUNT };
static const char *const alg_name[] = {"flat ring", "hierarchical", "hierarchical with overlap"};
static const char *const alg_key[] = {"flat", "hierarchical", "overlap"};
static const char *const kind_name[] = {"all_gather", "reduce_scatter", "all_reduce"};
#define PRESETS 3
static const char *const preset[PRESETS] = {"gcp-l4", "dgx-a100-80g", "dgx-h100"};
#define MAX_SIZES 8

typedef struct {
    int n, g;  // nodes, ranks per node
} Shape;

typedef struct {
    Shape s;
    int alg;
    CollKind kind;
    double mib, steps, rank_bytes, node_bytes, measured, predicted[PRESETS];
} Row;

// The ring model's latency steps on the critical path. Flat: 2(P-1) for an
// all-reduce, P-1 otherwise. Hierarchical: each level's ring steps, plus the
// message of reduce-scatter / all-gather; pipelined in K chunks: the first
// chunk's levels, then K-1 more of the slower level.
static double steps(Shape s, int alg, CollKind k, double bytes) {
    int P = s.n * s.g, ar = k == COLL_ALL_REDUCE;
    if (alg == ALG_FLAT) return (ar ? 2.0 : 1.0) * (P - 1);
    if (!ar) return (s.g - 1) + (s.n - 1) + 1;
    double a = 2.0 * (s.g - 1), b = 2.0 * (s.n - 1);
    int K = alg == ALG_OVERLAP ? cost_hier_chunks(bytes) : 1;
    return a + b + (K - 1) * (a > b ? a : b);
}

// Bytes sent across a node boundary, busiest rank and busiest node. Flat ring in
// rank order: each node's last rank sends to the next node; it moves the ring's
// (P-1)/P S per pass (2 passes for an all-reduce), the rest of its node nothing.
// Hierarchical: every rank moves its 1/g piece over the inter ring, (n-1)/n of it
// per pass; reduce-scatter / all-gather add the message of S/P where the rank's
// partner (comm_hier.c permute) is on another node.
static void boundary(Shape s, int alg, CollKind k, double S, double *per_rank, double *per_node) {
    int P = s.n * s.g, passes = k == COLL_ALL_REDUCE ? 2 : 1;
    if (alg == ALG_FLAT) {
        *per_rank = *per_node = passes * S * (P - 1) / P;
        return;
    }
    double inter = passes * (S / s.g) * (s.n - 1) / s.n;
    *per_rank = inter, *per_node = inter * s.g;
    if (k == COLL_ALL_REDUCE) return;
    double busiest = 0;
    for (int N = 0; N < s.n; N++) {
        int crossing = 0;
        for (int l = 0; l < s.g; l++) {
            int r = N * s.g + l, to = l * s.n + N;
            if (to != r && to / s.g != N) crossing++;
        }
        if (crossing) *per_rank = inter + S / P;
        if (crossing > busiest) busiest = crossing;
    }
    *per_node = inter * s.g + busiest * S / P;
}

// One collective of `bytes` (f32) on the group: flat (h NULL) or hierarchical.
static int run_once(const CommBackend *c, CommGroup *grp, CommHier *h, int alg, CollKind k, float *buf,
                    size_t count) {
    int P = c->group_size(c, grp), r = c->group_rank(c, grp);
    size_t block = count / (size_t)P;
    if (k == COLL_ALL_REDUCE)
        return alg == ALG_FLAT ? c->all_reduce(c, buf, buf, count, MIST_F32, COMM_SUM, grp)
                               : comm_hier_all_reduce(h, buf, buf, count, MIST_F32, COMM_SUM,
                                                      alg == ALG_OVERLAP ? COMM_HIER_AUTO : 1);
    if (k == COLL_REDUCE_SCATTER)
        return alg == ALG_FLAT ? c->reduce_scatter(c, buf, buf + (size_t)r * block, block, MIST_F32, COMM_SUM, grp)
                               : comm_hier_reduce_scatter(h, buf, buf + (size_t)r * block, block, MIST_F32, COMM_SUM);
    return alg == ALG_FLAT ? c->all_gather(c, buf + (size_t)r * block, buf, block, MIST_F32, grp)
                           : comm_hier_all_gather(h, buf + (size_t)r * block, buf, block, MIST_F32);
}

// Best of `repeat` runs, each the slowest rank's time.
static double measure(const CommBackend *c, CommGroup *grp, CommHier *h, int alg, CollKind k, float *buf,
                      size_t count, int repeat) {
    MPI_Comm mc = comm_mpi_group_comm(grp);
    double best = 1e30;
    for (int i = 0; i < repeat; i++) {
        for (size_t j = 0; j < count; j++) buf[j] = 1.0f / (float)(1 + (j + (size_t)i) % 97);
        MPI_Barrier(mc);
        double t0 = MPI_Wtime();
        commCheck(c, run_once(c, grp, h, alg, k, buf, count));
        double dt = MPI_Wtime() - t0;
        MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, mc);
        if (dt < best) best = dt;
    }
    return best;
}

static void print_table(const Row *rows, int nrows, Shape s, int alg) {
    printf("\n%s, %d nodes x %d ranks per node (%d ranks)\n", alg_name[alg], s.n, s.g, s.n * s.g);
    printf("%-15s %8s %6s %14s %14s %12s", "collective", "MiB", "steps", "boundary/rank", "boundary/node",
           "measured ms");
    for (int p = 0; p < PRESETS; p++) printf(" %14s", preset[p]);
    printf("\n");
    for (int i = 0; i < nrows; i++) {
        const Row *w = &rows[i];
        if (w->s.n != s.n || w->s.g != s.g || w->alg != alg) continue;
        printf("%-15s %8.0f %6.0f %12.2f M %12.2f M %12.3f", kind_name[w->kind], w->mib, w->steps,
               w->rank_bytes / 1048576.0, w->node_bytes / 1048576.0, 1e3 * w->measured);
        for (int p = 0; p < PRESETS; p++) printf(" %11.3f ms", 1e3 * w->predicted[p]);
        printf("\n");
    }
}

// Where the hierarchy wins under each preset: flat / hierarchical predicted time.
static void print_wins(const Row *rows, int nrows) {
    printf("\npredicted speedup of the hierarchical form over the flat ring (flat / hierarchical; overlap in "
           "parentheses for all_reduce)\n");
    for (int i = 0; i < nrows; i++) {
        const Row *f = &rows[i];
        if (f->alg != ALG_FLAT) continue;
        const Row *hh = NULL, *ho = NULL;
        for (int j = 0; j < nrows; j++)
            if (rows[j].s.n == f->s.n && rows[j].s.g == f->s.g && rows[j].kind == f->kind && rows[j].mib == f->mib)
                hh = rows[j].alg == ALG_HIER ? &rows[j] : hh, ho = rows[j].alg == ALG_OVERLAP ? &rows[j] : ho;
        if (!hh) continue;
        printf("%d x %d %-15s %5.0f MiB:", f->s.n, f->s.g, kind_name[f->kind], f->mib);
        for (int p = 0; p < PRESETS; p++) {
            printf("  %s %.2fx", preset[p], f->predicted[p] / hh->predicted[p]);
            if (ho) printf(" (%.2fx)", f->predicted[p] / ho->predicted[p]);
        }
        printf("\n");
    }
}

static int write_json(const char *path, const Row *rows, int nrows, int repeat, int world) {
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    fprintf(f, "{\"bench\": \"collectives\", \"ranks\": %d, \"repeat\": %d, \"dtype\": \"f32\", \"rows\": [\n", world,
            repeat);
    for (int i = 0; i < nrows; i++) {
        const Row *w = &rows[i];
        fprintf(f,
                "  {\"nodes\": %d, \"per_node\": %d, \"algorithm\": \"%s\", \"collective\": \"%s\", \"mib\": %g, "
                "\"steps\": %g, \"boundary_bytes_per_rank\": %.0f, \"boundary_bytes_per_node\": %.0f, "
                "\"measured_s\": %.6g, \"predicted_s\": {",
                w->s.n, w->s.g, alg_key[w->alg], kind_name[w->kind], w->mib, w->steps, w->rank_bytes, w->node_bytes,
                w->measured);
        for (int p = 0; p < PRESETS; p++) fprintf(f, "%s\"%s\": %.6g", p ? ", " : "", preset[p], w->predicted[p]);
        fprintf(f, "}}%s\n", i + 1 < nrows ? "," : "");
    }
    fprintf(f, "]}\n");
    return fclose(f) != 0;
}

static int parse_list(const char *s, double *out, int max) {
    int n = 0;
    for (char *end; *s && n < max; s = *end ? end + 1 : end) {
        out[n] = strtod(s, &end);
        if (end == s || out[n] <= 0) return -1;
        n++;
    }
    return n;
}

// Every (shape, algorithm, collective, size) row of the run on the world's first n*g ranks.
static int bench_shape(const CommBackend *c, CommGroup *world, Shape s, const double *mib, int nsizes, int repeat,
                       Row *rows, int nrows) {
    int me = c->group_rank(c, world), P = s.n * s.g;
    CommGroup *grp = NULL;
    commCheck(c, c->group_split(c, world, me < P, me, &grp));
    HwProfile prof[PRESETS];
    for (int p = 0; p < PRESETS; p++) profile_preset(&prof[p], preset[p]);
    CommHier *h = NULL;
    char why[160];
    if (me < P) commCheck(c, comm_hier_new(c, grp, me / s.g, &h, why, sizeof why));
    for (int alg = 0; alg < ALG_COUNT; alg++)
        for (int k = COLL_ALL_REDUCE; k >= 0; k--) {
            if (alg == ALG_OVERLAP && k != COLL_ALL_REDUCE) continue;  // only the all-reduce is pipelined
            for (int i = 0; i < nsizes; i++) {
                size_t count = (size_t)(mib[i] * 1048576.0 / 4) / (size_t)P * (size_t)P;
                double S = 4.0 * (double)count;
                Row *w = &rows[nrows++];
                *w = (Row){.s = s, .alg = alg, .kind = (CollKind)k, .mib = mib[i]};
                w->steps = steps(s, alg, w->kind, S);
                boundary(s, alg, w->kind, S, &w->rank_bytes, &w->node_bytes);
                for (int p = 0; p < PRESETS; p++)
                    w->predicted[p] = alg == ALG_FLAT ? profile_collective_seconds(&prof[p], w->kind, S, s.n, s.g)
                                                      : cost_hier_collective_seconds(&prof[p], w->kind, S, s.n, s.g,
                                                                                     alg == ALG_OVERLAP);
                if (me < P) {
                    float *buf = malloc(count * sizeof(float));
                    if (!buf) c->abort(c, 1, "bench_collectives: out of memory");
                    w->measured = measure(c, grp, h, alg, w->kind, buf, count, repeat);
                    free(buf);
                }
            }
        }
    comm_hier_free(h);
    c->group_free(c, grp);
    return nrows;
}

int main(int argc, char **argv) {
    Launch L;
    if (launch_init(&argc, &argv, &L)) return 1;
    const char *shapes = "2x2,4x2", *sizes = "1,4,16,64", *json = "benchmarks/bench_collectives.json";
    int repeat = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--shapes") && i + 1 < argc) shapes = argv[++i];
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) sizes = argv[++i];
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else if (!strcmp(argv[i], "--quick")) sizes = "1,4", repeat = 1;
        else {
            if (L.world_rank == 0)
                fprintf(stderr, "usage: mpirun -np 8 %s [--shapes 2x2,4x2] [--sizes 1,4,16,64] [--repeat R] "
                        "[--json PATH] [--quick]\n", argv[0]);
            launch_finalize();
            return 2;
        }
    }
    double mib[MAX_SIZES];
    int nsizes = parse_list(sizes, mib, MAX_SIZES);
    Shape shape[8];
    int nshapes = 0;
    for (const char *s = shapes; *s && nshapes < 8;) {
        int n, g, used;
        if (sscanf(s, "%dx%d%n", &n, &g, &used) != 2 || n < 2 || g < 2 || n * g > L.world_size) {
            if (L.world_rank == 0)
                fprintf(stderr, "bench_collectives: --shapes %s: want NxG with N, G >= 2 and N*G <= %d ranks\n",
                        shapes, L.world_size);
            launch_finalize();
            return 2;
        }
        shape[nshapes++] = (Shape){n, g};
        s += used;
        if (*s == ',') s++;
    }
    if (nsizes <= 0 || repeat < 1) {
        if (L.world_rank == 0) fprintf(stderr, "bench_collectives: --sizes wants MiB > 0, --repeat >= 1\n");
        launch_finalize();
        return 2;
    }
    const CommBackend *c = comm_mpi_backend();
    CommGroup *world = NULL;
    commCheck(c, c->group_world(c, &world));
    Row *rows = calloc((size_t)nshapes * ALG_COUNT * 3 * MAX_SIZES, sizeof(Row));
    int nrows = 0;
    for (int i = 0; i < nshapes; i++) nrows = bench_shape(c, world, shape[i], mib, nsizes, repeat, rows, nrows);
    int rc = 0;
    if (L.world_rank == 0) {
        printf("bench_collectives: %d MPI ranks, f32, best of %d (the slowest rank's time); nodes are simulated: "
               "measured times share one machine's memory and show no network saving\n", L.world_size, repeat);
        for (int i = 0; i < nshapes; i++)
            for (int alg = 0; alg < ALG_COUNT; alg++) print_table(rows, nrows, shape[i], alg);
        print_wins(rows, nrows);
        rc = write_json(json, rows, nrows, repeat, L.world_size);
        if (rc) fprintf(stderr, "bench_collectives: writing %s failed\n", json);
        else printf("\nwrote %s\n", json);
    }
    free(rows);
    c->group_free(c, world);
    launch_finalize();
    return rc;
}
