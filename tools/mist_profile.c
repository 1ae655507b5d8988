// mist-profile: measure the job's collectives and host copies and write them
// into a hardware profile file (runtime/profile_measure.h), for `mist-plan
// --hardware FILE` and `[cluster] hardware = FILE`. Run it under mpirun / srun
// with the ranks and nodes training will use.
//   mpirun -np N mist-profile [--hardware NAME|FILE] [--sizes LIST] [--iters N] [--ranks-per-node M] [--out FILE]
//                            [--json FILE]
// Exit codes: 0 ok, 1 runtime failure, 2 usage error.
#include <config.h>  // HAVE_CUDA
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "base/profile.h"
#include "runtime/comm_mpi.h"
#include "runtime/fileutil.h"
#include "runtime/launch.h"
#include "runtime/profile_measure.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: mpirun -np N mist-profile [options]\n"
            "\n"
            "Measures how fast this job's ranks move data and writes it into a hardware profile\n"
            "file that `mist-plan --hardware FILE` and `[cluster] hardware = FILE` read:\n"
            "  - collectives: an in-place all-gather on every group shape the job can form\n"
            "    (n nodes x g ranks per node, powers of two), at each size, fitted to the\n"
            "    planner's line t = B (N-1)/N / k + beta (B bytes in all, N = n g ranks);\n"
            "  - the reduce-scatter and all-reduce times over the all-gather's, on the\n"
            "    biggest shape at the biggest size;\n"
            "  - host<->device copies of pinned memory, every rank copying at once.\n"
            "Collectives run on the comm path training uses (NCCL, staged through host\n"
            "memory, or MPI on the CPU backend), so predictions then include it. The rest of\n"
            "the profile (compute, memory, interference) is the base profile's.\n"
            "\n"
            "options:\n"
            "  --hardware NAME|FILE  base profile (default: cpu on the CPU backend; required on GPUs:\n"
            "                        gcp-l4, gcp-a100-40g, gcp-a100-80g, dgx-a100-80g, dgx-h100,\n"
            "                        dgx-h200 or a profile file)\n"
            "  --sizes LIST          buffer sizes in MiB, comma separated, ascending (default 1,4,16,64)\n"
            "  --iters N             timed calls per size (default 10, after 2 warm-up calls)\n"
            "  --ranks-per-node M    ranks [iM, (i+1)M) form node i (default: ranks with the same host name)\n"
            "  --out FILE            the profile (default: standard output)\n"
            "  --json FILE           the measurements as JSON too: each shape's sizes, seconds and fit\n"
            "  -h, --help            this text\n"
            "  -V, --version         print the version and exit\n"
            "\n"
            "exit status: 0 ok, 1 runtime failure, 2 usage error\n"
            "docs: docs/plan-analyze.md (Measuring a profile)\n");
}

typedef struct {
    const char *base, *out, *json;
    MeasureOptions m;
} Args;

// "1,4,16" (MiB) -> bytes, ascending; 0 or a message in err
static int parse_sizes(const char *list, MeasureOptions *m, char *err, size_t errlen) {
    const char *s = list;
    m->num_sizes = 0;
    while (*s) {
        char *end;
        double v = strtod(s, &end);
        if (end == s || !(v >= 1.0 / 1024 && v <= 65536) || (*end && *end != ',') || m->num_sizes == MEASURE_MAX_SIZES ||
            (m->num_sizes && v * 1048576.0 <= (double)m->bytes[m->num_sizes - 1])) {
            snprintf(err, errlen, "--sizes %s: allowed: up to %d ascending sizes in MiB, each in [1/1024, 65536], comma "
                     "separated (e.g. 1,4,16,64)", list, MEASURE_MAX_SIZES);
            return -1;
        }
        m->bytes[m->num_sizes++] = (size_t)(v * 1048576.0);
        s = *end ? end + 1 : end;
    }
    if (!m->num_sizes) {
        snprintf(err, errlen, "--sizes: empty list; allowed: ascending sizes in MiB (e.g. 1,4,16,64)");
        return -1;
    }
    return 0;
}

static int parse_int(const char *opt, const char *v, int lo, int hi, int *out, char *err, size_t errlen) {
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < lo || x > hi) {
        snprintf(err, errlen, "%s %s: allowed: an integer %d..%d", opt, v, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

// 0, 1 (help printed), or -1 with err
static int parse_args(int argc, char **argv, Args *a, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    a->out = "-";
    a->m.warmup = 2, a->m.iters = 10;
    parse_sizes("1,4,16,64", &a->m, err, errlen);
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) return 1;
        int known = !strcmp(o, "--hardware") || !strcmp(o, "--sizes") || !strcmp(o, "--iters") ||
                    !strcmp(o, "--ranks-per-node") || !strcmp(o, "--out") || !strcmp(o, "--json");
        if (!known) {
            snprintf(err, errlen, "unknown option '%s' (see --help)", o);
            return -1;
        }
        if (i + 1 >= argc) {
            snprintf(err, errlen, "%s needs a value (see --help)", o);
            return -1;
        }
        const char *v = argv[++i];
        if (!strcmp(o, "--hardware")) a->base = v;
        else if (!strcmp(o, "--out")) a->out = v;
        else if (!strcmp(o, "--json")) a->json = v;
        else if (!strcmp(o, "--sizes") && parse_sizes(v, &a->m, err, errlen)) return -1;
        else if (!strcmp(o, "--iters") && parse_int(o, v, 1, 100000, &a->m.iters, err, errlen)) return -1;
        else if (!strcmp(o, "--ranks-per-node") && parse_int(o, v, 1, 1 << 20, &a->m.ranks_per_node, err, errlen))
            return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    Args a;
    char err[1024];
    for (int i = 1; i < argc; i++)  // before anything starts (MPI, the device): a plain answer
        if (!strcmp(argv[i], "-V") || !strcmp(argv[i], "--version")) {
            printf("mist-profile (mist) %s\n", PACKAGE_VERSION);
            return 0;
        }
    if (launch_check_env(err, sizeof err)) {
        fprintf(stderr, "mist-profile: %s\n", err);
        return 2;
    }
    Launch L;
    if (launch_init(&argc, &argv, &L)) return 1;
    int root = L.world_rank == 0, on_gpu = !strncmp(L.device, "cuda:", 5);
    // every rank parses the same arguments: rank 0 speaks, all leave alike
    int prc = parse_args(argc, argv, &a, err, sizeof err);
    if (prc) {
        if (root && prc == 1) usage(stdout);
        if (root && prc < 0) fprintf(stderr, "mist-profile: %s\n", err);
        launch_finalize();
        return prc == 1 ? 0 : 2;
    }
    // what can be checked before measuring: every rank reaches the same verdict
    int rc = 0;
    HwProfile base;
    if (!a.base && on_gpu) {
        snprintf(err, sizeof err, "--hardware is required on GPUs (the measured lines go into it); allowed: gcp-l4, "
                 "gcp-a100-40g, gcp-a100-80g, dgx-a100-80g, dgx-h100, dgx-h200, or a profile file");
        rc = 2;
    }
    if (!a.base) a.base = "cpu";
    if (!rc && profile_load(&base, a.base, err, sizeof err)) rc = 2;
    if (!rc && root && strcmp(a.out, "-") && mist_output_check(a.out, err, sizeof err)) rc = 2;
    if (!rc && root && a.json && mist_output_check(a.json, err, sizeof err)) rc = 2;
    const CommBackend *mpi = comm_mpi_backend();
    CommGroup *world = NULL;
    commCheck(mpi, mpi->group_world(mpi, &world));
    int worst = rc;
    commCheck(mpi, mpi->all_reduce(mpi, &worst, &worst, 1, MIST_I32, COMM_MAX, world));
    if (worst) {
        if (rc && root) fprintf(stderr, "mist-profile: %s\n", err);
        mpi->group_free(mpi, world);
        launch_finalize();
        return worst;
    }
    ProfileMeasure m;
    char path[256];
    rc = profile_measure_job(mpi, world, L.device, &a.m, &m, path, sizeof path, err, sizeof err) ? 1 : 0;
    if (rc && root) fprintf(stderr, "mist-profile: %s\n", err);
    if (!rc && root)
        rc = profile_measure_write(&base, a.base, &m, &a.m, path, L.world_size, a.out, a.json, "mist-profile");
    commCheck(mpi, mpi->all_reduce(mpi, &rc, &rc, 1, MIST_I32, COMM_MAX, world));
    mpi->group_free(mpi, world);
    launch_finalize();
    return rc;
}
