// The job's transfer lines, measured (profile_measure.h).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/comm_select.h"
#include "runtime/launch.h"
#include "runtime/profile_measure.h"
#include "runtime/fileutil.h"  // mist_ini_comment_name, mist_write_file_atomic

// the ranges profile files accept (base/profile.c: link_fit)
#define K_MIN 1e6   // bytes/s (0.001 GB/s)
#define K_MAX 1e15  // bytes/s (1e6 GB/s)
#define BETA_MAX 1.0

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void measure_fit_line(MeasuredLine *m) {
    int n = m->points;
    double a = 0, beta = 0;  // t = a x + beta
    if (n >= 2) {
        double mx = 0, mt = 0, sxx = 0, sxt = 0;
        for (int i = 0; i < n; i++) mx += m->x[i] / n, mt += m->t[i] / n;
        for (int i = 0; i < n; i++) sxx += (m->x[i] - mx) * (m->x[i] - mx), sxt += (m->x[i] - mx) * (m->t[i] - mt);
        a = sxx > 0 ? sxt / sxx : 0;
        beta = mt - a * mx;
    }
    if (n < 2 || beta < 0 || a <= 0) {
        // through the origin: a = sum(x t) / sum(x^2), the least-squares slope with beta = 0
        double sxt = 0, sxx = 0;
        for (int i = 0; i < n; i++) sxt += m->x[i] * m->t[i], sxx += m->x[i] * m->x[i];
        a = sxx > 0 ? sxt / sxx : 0, beta = 0;
    }
    double k = a > 0 ? 1 / a : K_MAX;
    k = k < K_MIN ? K_MIN : k > K_MAX ? K_MAX : k;
    beta = beta > BETA_MAX ? BETA_MAX : beta;
    m->fit = (LinkFit){k, beta};
    m->worst_residual = 0;
    for (int i = 0; i < n; i++) {
        double r = fabs(m->x[i] / k + beta - m->t[i]) / (m->t[i] > 0 ? m->t[i] : 1);
        if (r > m->worst_residual) m->worst_residual = r;
    }
}

// ---- where each rank is -------------------------------------------------------

typedef struct {
    int node, local;  // node index (order of first appearance), rank among that node's ranks
} Place;

// every rank's place, from the host names (or blocks of ranks_per_node); *nodes
// and *per_node: the node count and the fewest ranks on one
static int places(const CommBackend *mpi, CommGroup *world, int ranks_per_node, Place *out, int *nodes, int *per_node) {
    int n = mpi->group_size(mpi, world);
    const Launch *li = launch_info();
    char mine[64] = "";
    snprintf(mine, sizeof mine, "%s", li ? li->host : "localhost");
    char *hosts = calloc((size_t)n, 64);
    int *count = calloc((size_t)n, sizeof *count);
    if (!hosts || !count) {
        free(hosts), free(count);
        return -1;
    }
    int rc = mpi->all_gather(mpi, mine, hosts, 64, MIST_U8, world);
    *nodes = 0;
    for (int r = 0; !rc && r < n; r++) {
        int node = -1;
        if (ranks_per_node > 0) {
            node = r / ranks_per_node;
        } else {
            for (int q = 0; q < r && node < 0; q++)
                if (!strncmp(hosts + (size_t)q * 64, hosts + (size_t)r * 64, 64)) node = out[q].node;
            if (node < 0) node = *nodes;
        }
        if (node + 1 > *nodes) *nodes = node + 1;
        out[r] = (Place){node, count[node]++};
    }
    *per_node = n;
    for (int i = 0; i < *nodes; i++)
        if (count[i] < *per_node) *per_node = count[i];
    free(hosts), free(count);
    return rc;
}

// ---- timing -------------------------------------------------------------------

typedef enum { T_ALL_GATHER, T_REDUCE_SCATTER, T_ALL_REDUCE } Which;

// The slowest member's mean seconds per call over o->iters blocking calls on
// `bytes` in all (after o->warmup untimed ones); -1 on a comm error.
static double time_collective(const CommBackend *mpi, const CommBackend *comm, CommGroup *g, char *buf, size_t bytes,
                              MistDtype t, Which which, const MeasureOptions *o) {
    int size = mpi->group_size(mpi, g), rank = mpi->group_rank(mpi, g);
    size_t elt = mist_dtype_size(t), count = bytes / elt / (size_t)size;  // per rank's block
    char *mine = buf + (size_t)rank * count * elt;
    int rc = 0;
    double t0 = 0;
    for (int i = 0; !rc && i < o->warmup + o->iters; i++) {
        if (i == o->warmup) {
            rc = mpi->barrier(mpi, g);
            t0 = now_seconds();
        }
        if (rc) break;
        if (which == T_ALL_GATHER) rc = comm->all_gather(comm, mine, buf, count, t, g);
        else if (which == T_REDUCE_SCATTER) rc = comm->reduce_scatter(comm, buf, mine, count, t, COMM_SUM, g);
        else rc = comm->all_reduce(comm, buf, buf, count * (size_t)size, t, COMM_SUM, g);
    }
    float mean = rc ? -1.0f : (float)((now_seconds() - t0) / o->iters);
    if (mpi->all_reduce(mpi, &mean, &mean, 1, MIST_F32, COMM_MAX, g)) return -1;
    int bad = rc != 0;
    if (mpi->all_reduce(mpi, &bad, &bad, 1, MIST_I32, COMM_MAX, g) || bad) return -1;
    return mean;
}

// every rank copies `bytes` between pinned host memory and its device at once;
// the slowest rank's mean seconds per copy
static double time_copies(const CommBackend *mpi, CommGroup *world, Backend *be, BackendStream *st, char *host,
                          char *dev, size_t bytes, int to_device, const MeasureOptions *o) {
    double t0 = 0;
    for (int i = 0; i < o->warmup + o->iters; i++) {
        if (i == o->warmup) {
            be->stream_synchronize(be, st);
            mpi->barrier(mpi, world);
            t0 = now_seconds();
        }
        if (to_device) be->copy_h2d(be, dev, host, bytes, st);
        else be->copy_d2h(be, host, dev, bytes, st);
        be->stream_synchronize(be, st);
    }
    float mean = (float)((now_seconds() - t0) / o->iters);
    mpi->all_reduce(mpi, &mean, &mean, 1, MIST_F32, COMM_MAX, world);
    return mean;
}

// ---- the measurement ----------------------------------------------------------

int profile_measure(const CommBackend *mpi, const CommBackend *comm, CommGroup *world, Backend *be,
                    const MeasureOptions *o, ProfileMeasure *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    int n = mpi->group_size(mpi, world), me = mpi->group_rank(mpi, world);
    size_t biggest = o->bytes[o->num_sizes - 1];
    Place *where = calloc((size_t)n, sizeof *where);
    // buffers first, the same verdict everywhere: a rank that cannot allocate stops every rank
    char *dev = be->alloc_device(be, biggest), *dev2 = be->alloc_device(be, biggest);
    char *host = be->alloc_pinned(be, biggest);
    BackendStream *st = be->stream_create(be);
    int bad = !where || !dev || !dev2 || !host || !st;
    if (mpi->all_reduce(mpi, &bad, &bad, 1, MIST_I32, COMM_MAX, world) || bad) {
        snprintf(err, errlen, "cannot allocate the buffers in device and pinned host memory on some rank (hint: "
                 "smaller --sizes)");
        goto done;
    }
    be->memset_device(be, dev, 0, biggest, st);
    be->memset_device(be, dev2, 0, biggest, st);
    memset(host, 0, biggest);
    be->stream_synchronize(be, st);
    if (places(mpi, world, o->ranks_per_node, where, &out->nodes, &out->per_node)) {
        snprintf(err, errlen, "cannot exchange host names (MPI all_gather failed)");
        bad = 1;
        goto done;
    }
    // shapes up to the profile's table (128 nodes x 128 ranks: PROFILE_SHAPES cells each way; a
    // larger group uses the last cell); the multipliers on the last of them
    int nmax = out->nodes < 128 ? out->nodes : 128, gmax = out->per_node < 128 ? out->per_node : 128;
    for (int nn = 1; nn <= nmax; nn *= 2)
        for (int g = 1; g <= gmax; g *= 2) {
            if (nn * g == 1) continue;
            CommGroup *grp = NULL;
            int member = where[me].node < nn && where[me].local < g;
            if (mpi->group_split(mpi, world, member ? 0 : 1, me, &grp)) {
                snprintf(err, errlen, "cannot form the group of a shape (MPI split failed)");
                bad = 1;
                goto done;
            }
            MeasuredLine *line = &out->coll[out->num_shapes];
            int N = nn * g;
            for (int s = 0; member && s < o->num_sizes; s++) {
                size_t bytes = o->bytes[s] / (size_t)N * (size_t)N;  // whole blocks
                double t = time_collective(mpi, comm, grp, dev, bytes, MIST_U8, T_ALL_GATHER, o);
                if (t < 0) bad = 1;
                line->x[line->points] = (double)bytes * (N - 1) / N;
                line->t[line->points++] = t;
            }
            if (member) measure_fit_line(line);
            int b2 = bad;
            if (mpi->all_reduce(mpi, &b2, &b2, 1, MIST_I32, COMM_MAX, world) || b2) {
                comm->group_free(comm, grp);
                snprintf(err, errlen, "a collective failed while measuring (see the messages above)");
                bad = 1;
                goto done;
            }
            out->shape[out->num_shapes][0] = nn, out->shape[out->num_shapes][1] = g;
            out->num_shapes++;
            // the multipliers on the last (biggest) shape at the biggest size, in f32 (gradients' and weights' kind)
            if (nn * 2 > nmax && g * 2 > gmax && member) {
                size_t bytes = biggest / ((size_t)N * 4) * ((size_t)N * 4);
                double ag = time_collective(mpi, comm, grp, dev, bytes, MIST_F32, T_ALL_GATHER, o);
                double rs = time_collective(mpi, comm, grp, dev2, bytes, MIST_F32, T_REDUCE_SCATTER, o);
                double ar = time_collective(mpi, comm, grp, dev2, bytes, MIST_F32, T_ALL_REDUCE, o);
                if (ag > 0 && rs > 0 && ar > 0) {
                    out->have_factors = 1;
                    out->factor_rs = rs / ag, out->factor_ar = ar / ag;
                }
            }
            comm->group_free(comm, grp);  // the comm path's: NCCL's communicator of the group goes too
        }
    for (int s = 0; s < o->num_sizes; s++) {
        size_t bytes = o->bytes[s];
        out->h2d.x[s] = out->d2h.x[s] = (double)bytes;
        out->h2d.t[s] = time_copies(mpi, world, be, st, host, dev, bytes, 1, o);
        out->d2h.t[s] = time_copies(mpi, world, be, st, host, dev, bytes, 0, o);
    }
    out->h2d.points = out->d2h.points = o->num_sizes;
    measure_fit_line(&out->h2d);
    measure_fit_line(&out->d2h);
done:
    if (dev) be->free_device(be, dev);
    if (dev2) be->free_device(be, dev2);
    if (host) be->free_pinned(be, host);
    if (st) be->stream_destroy(be, st);
    free(where);
    return bad ? -1 : 0;
}

int profile_measure_job(const CommBackend *mpi, CommGroup *world, const char *device, const MeasureOptions *o,
                        ProfileMeasure *out, char *comm, size_t commlen, char *err, size_t errlen) {
    Backend *be = launch_backend(device, strncmp(device, "cuda:", 5) ? MIST_F32 : MIST_BF16, err, errlen);
    if (!be) launch_abort(1, "cannot start the %s backend to measure transfers: %s", device, err);
    CommChoice choice;
    commCheck(mpi, comm_select(mpi, be, world, &choice));
    int rc = profile_measure(mpi, choice.comm, world, be, o, out, err, errlen);
    out->staged = choice.path == COMM_PATH_STAGED;
    comm_select_describe(&choice, comm, commlen);
    comm_select_release(&choice);
    be->destroy(be);
    return rc;
}

static void size_label(size_t bytes, char *buf, size_t len) {
    double mib = (double)bytes / 1048576.0;
    if (mib >= 1) snprintf(buf, len, "%g MiB", mib);
    else snprintf(buf, len, "%g KiB", (double)bytes / 1024.0);
}

static void print_line(FILE *f, const char *label, int N, const MeasuredLine *l) {
    fprintf(f, "%-8s %4d ", label, N);
    for (int s = 0; s < l->points; s++) fprintf(f, " %11.4g", l->t[s] * 1e3);
    fprintf(f, "   %10.4g %10.4g %8.1f%%\n", l->fit.k / 1e9, l->fit.beta * 1e6, 100 * l->worst_residual);
}

void profile_measure_print(FILE *f, const char *who, const ProfileMeasure *m, const MeasureOptions *o, const char *comm,
                           int world) {
    fprintf(f, "%s: %d rank%s on %d node%s (%d per node, %s); collectives: %s\n", who, world, world == 1 ? "" : "s",
            m->nodes, m->nodes == 1 ? "" : "s", m->per_node, o->ranks_per_node ? "--ranks-per-node" : "by host name",
            comm);
    fprintf(f, "mean ms per call (slowest rank), %d timed after %d warm-up; fit t = B (N-1)/N / k + beta\n", o->iters,
            o->warmup);
    fprintf(f, "%-8s %4s ", "shape", "N");
    for (int s = 0; s < o->num_sizes; s++) {
        char lab[32];
        size_label(o->bytes[s], lab, sizeof lab);
        fprintf(f, " %11s", lab);
    }
    fprintf(f, "   %10s %10s %9s\n", "k GB/s", "beta us", "residual");
    for (int i = 0; i < m->num_shapes; i++) {
        char lab[32];
        snprintf(lab, sizeof lab, "%dx%d", m->shape[i][0], m->shape[i][1]);
        print_line(f, lab, m->shape[i][0] * m->shape[i][1], &m->coll[i]);
    }
    if (!m->num_shapes) fprintf(f, "(no collective measured: one rank forms no group of two)\n");
    print_line(f, "h2d", world, &m->h2d);
    print_line(f, "d2h", world, &m->d2h);
    if (m->have_factors)
        fprintf(f, "reduce-scatter / all-reduce time over all-gather's (biggest shape, %g MiB, f32): %.3f / %.3f\n",
                (double)o->bytes[o->num_sizes - 1] / 1048576.0, m->factor_rs, m->factor_ar);
}

char *profile_measure_ini(const HwProfile *p, const ProfileMeasure *m, const char *who, const char *base,
                          const char *comm, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) return NULL;
    // Comment lines stay under the INI reader's 200 characters (base/profile.c refuses longer
    // ones): a long base path is not named, and the measured shapes wrap (a 64-node job has 27).
    fprintf(f, "; written by %s over base %s, %d node(s) x %d rank(s)\n", who, mist_ini_comment_name(base), m->nodes,
            m->per_node);
    fprintf(f, "; collectives on %.180s\n", comm);
    fprintf(f, "; measured: [host] h2d, d2h%s; [collective]", m->have_factors ? ", reduce_scatter_factor, all_reduce_factor" : "");
    for (int i = 0; i < m->num_shapes; i++)
        fprintf(f, "%s%dx%d", i && i % 16 == 0 ? "\n;   " : " ", m->shape[i][0], m->shape[i][1]);
    fprintf(f, "\n; every other value is the base's\n");
    profile_write_ini(p, f);
    fclose(f);
    return buf;
}

static void json_line(FILE *f, const MeasuredLine *l) {
    fprintf(f, "\"seconds\": [");
    for (int s = 0; s < l->points; s++) fprintf(f, "%s%.9g", s ? ", " : "", l->t[s]);
    fprintf(f, "], \"k_bytes_per_second\": %.9g, \"beta_seconds\": %.9g, \"worst_residual\": %.6g", l->fit.k,
            l->fit.beta, l->worst_residual);
}

char *profile_measure_json(const ProfileMeasure *m, const MeasureOptions *o, const char *comm, int world, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) return NULL;
    fprintf(f, "{\"ranks\": %d, \"nodes\": %d, \"ranks_per_node\": %d, \"collectives\": \"", world, m->nodes,
            m->per_node);
    for (const char *c = comm; *c; c++) fprintf(f, *c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
    fprintf(f, "\", \"warmup\": %d, \"iters\": %d, \"bytes\": [", o->warmup, o->iters);
    for (int s = 0; s < o->num_sizes; s++) fprintf(f, "%s%zu", s ? ", " : "", o->bytes[s]);
    fprintf(f, "],\n \"all_gather\": [");
    for (int i = 0; i < m->num_shapes; i++) {
        fprintf(f, "%s\n  {\"nodes\": %d, \"gpus\": %d, ", i ? "," : "", m->shape[i][0], m->shape[i][1]);
        json_line(f, &m->coll[i]);
        fprintf(f, "}");
    }
    fprintf(f, "],\n \"reduce_scatter_factor\": ");
    if (m->have_factors) fprintf(f, "%.6g, \"all_reduce_factor\": %.6g", m->factor_rs, m->factor_ar);
    else fprintf(f, "null, \"all_reduce_factor\": null");
    fprintf(f, ",\n \"h2d\": {");
    json_line(f, &m->h2d);
    fprintf(f, "},\n \"d2h\": {");
    json_line(f, &m->d2h);
    fprintf(f, "}}\n");
    fclose(f);
    return buf;
}

void profile_apply_measure(HwProfile *p, const ProfileMeasure *m) {
    for (int i = 0; i < m->num_shapes; i++)
        p->coll[profile_shape_index(m->shape[i][0])][profile_shape_index(m->shape[i][1])] = m->coll[i].fit;
    if (m->have_factors) {
        // relative to all-gather = 1, clamped to the file format's (0, 100]
        double rs = m->factor_rs, ar = m->factor_ar;
        p->coll_factor[COLL_ALL_GATHER] = 1.0;
        p->coll_factor[COLL_REDUCE_SCATTER] = rs < 0.01 ? 0.01 : rs > 100 ? 100 : rs;
        p->coll_factor[COLL_ALL_REDUCE] = ar < 0.01 ? 0.01 : ar > 100 ? 100 : ar;
    }
    p->h2d = m->h2d.fit;
    p->d2h = m->d2h.fit;
    // lines measured through host memory include its copies: the model then puts them on the
    // critical path (planner/schedule.c)
    if (m->num_shapes > 0) p->staged_collectives = m->staged;
}

int profile_measure_write(HwProfile *base, const char *base_name, const ProfileMeasure *m, const MeasureOptions *o,
                          const char *comm, int world, const char *out, const char *json, const char *who) {
    char err[1024];
    int rc = 0, to_stdout = !strcmp(out, "-");
    profile_measure_print(to_stdout ? stderr : stdout, who, m, o, comm, world);
    profile_apply_measure(base, m);
    snprintf(base->name, sizeof base->name, "%s measured", base_name);
    size_t len = 0;
    char *text = profile_measure_ini(base, m, who, base_name, comm, &len);
    if (!text) {
        fprintf(stderr, "%s: out of host memory\n", who);
        rc = 1;
    } else if (to_stdout) {
        fwrite(text, 1, len, stdout);
    } else if (mist_write_file_atomic(out, text, len, err, sizeof err)) {
        fprintf(stderr, "%s: --out %s: %s\n", who, out, err);
        rc = 1;
    } else {
        printf("%s: wrote %s (base %s; shapes not measured keep the base's lines)\n", who, out, base_name);
    }
    free(text);
    text = json ? profile_measure_json(m, o, comm, world, &len) : NULL;
    if (json && (!text || mist_write_file_atomic(json, text, len, err, sizeof err))) {
        fprintf(stderr, "%s: --json %s: %s\n", who, json, text ? err : "out of host memory");
        rc = 1;
    }
    free(text);
    fflush(stdout);
    return rc;
}
