// mist-train: the training runtime's entry point.
//
// Flow: parse the command line (before MPI starts, so --help/--version and
// usage errors work without a launcher) -> launch (MPI, local rank, device)
// -> the job (runtime/train_job.h: config shared by every rank, plan, process
// grid, dry run or training) -> finalize, exit with the job's code.
#ifdef HAVE_CONFIG_H
#include <config.h>  // the build's config (PACKAGE_VERSION), not base/schema.h
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/config_load.h"
#include "base/launcher_rank.h"
#include "runtime/launch.h"
#include "runtime/train_job.h"

#ifndef MIST_EXIT_CONFIG
#define MIST_EXIT_CONFIG 2
#endif
#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

static void print_usage(FILE *f) {
    fprintf(f,
            "Usage: mist-train [OPTIONS] CONFIG.ini\n"
            "\n"
            "Trains a GPT- or Llama-style transformer (sequential blocks, or parallel ones\n"
            "as in Falcon) as described by CONFIG.ini, with the parallel plan given there.\n"
            "Start one process per GPU (or per CPU rank) with mpirun or srun; rank 0 reads\n"
            "the configuration and shares it with the others.\n"
            "\n"
            "Options:\n"
            "  -o, --override SECTION.KEY=VALUE\n"
            "                   set one configuration value, overriding the file; repeatable.\n"
            "                   Also written -oSECTION.KEY=VALUE or --override=SECTION.KEY=VALUE\n"
            "  -n, --dry-run    check the configuration, build the process grid, print the\n"
            "                   configuration summary and one row per rank, then exit. Run\n"
            "                   as one process, it previews the layout of a plan of any size\n"
            "  -h, --help       print this help and exit\n"
            "  -V, --version    print the version and exit\n"
            "\n"
            "Environment:\n"
            "  MIST_DEVICE=cpu  use the CPU backend even when a GPU is present\n"
            "  MIST_COMM_STAGED=1\n"
            "                   move collectives of device memory through pinned host memory\n"
            "                   instead of NCCL (on the CPU backend: its device arena, a check of\n"
            "                   that path; docs/cuda-backend.md)\n"
            "  MIST_CUDA_ATTENTION=auto|base|wide|wgmma|cudnn\n"
            "                   attention kernels on a GPU, over [runtime] attention (default\n"
            "                   auto: wgmma on Hopper with an sm_90a build, else base); cudnn is\n"
            "                   the fastest, not deterministic (docs/cuda-backend.md)\n"
            "\n"
            "Exit status: 0 done, 1 runtime failure, 2 configuration or usage error,\n"
            "3 [plan] mode = auto found no plan that fits, 4 a collective or message waited\n"
            "longer than [cluster] comm_timeout (a rank stopped taking part), 5 stopped early\n"
            "by SIGUSR1 or SIGTERM after writing a checkpoint (Slurm: --signal=USR1@120).\n"
            "\n"
            "Examples:\n"
            "  mpirun -np 4 mist-train examples/tiny.ini\n"
            "  mpirun -np 4 mist-train --dry-run examples/tiny.ini\n"
            "  mpirun -np 8 mist-train -o train.steps=100 -o train.lr=3e-4 model.ini\n"
            "  srun --nodes=2 --ntasks-per-node=8 --gpus-per-node=8 mist-train model.ini\n");
}

static int usage_error(const char *fmt, const char *what) {
    if (launcher_rank() == 0) {
        fprintf(stderr, "mist-train: ");
        fprintf(stderr, fmt, what);
        fprintf(stderr, "\nTry 'mist-train --help' for the options.\n");
    }
    return MIST_EXIT_CONFIG;
}

// "section.key=value": a dot before the '=', something on each side.
static int add_override(TrainArgs *a, const char *text) {
    const char *eq = strchr(text, '=');
    const char *dot = strchr(text, '.');
    if (!eq || !dot || dot > eq || dot == text || dot + 1 == eq)
        return usage_error("-o expects SECTION.KEY=VALUE (e.g. -o train.steps=10), got '%s'", text);
    if (a->n_overrides == TRAIN_MAX_OVERRIDES) return usage_error("too many -o overrides (the limit is 256), at '%s'", text);
    a->overrides[a->n_overrides++] = text;
    return -1;
}

// Returns -1 to go on, or the exit code (0 after --help/--version).
static int parse_args(int argc, char **argv, TrainArgs *a) {
    memset(a, 0, sizeof *a);
    int options_done = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        int rc = -1;
        if (options_done || s[0] != '-' || s[1] == '\0') {
            if (a->config) return usage_error("one CONFIG.ini expected, got a second one: '%s'", s);
            a->config = s;
        } else if (!strcmp(s, "--")) {
            options_done = 1;
        } else if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            print_usage(stdout);
            return 0;
        } else if (!strcmp(s, "-V") || !strcmp(s, "--version")) {
            printf("mist-train (mist) %s\n", PACKAGE_VERSION);
            return 0;
        } else if (!strcmp(s, "-n") || !strcmp(s, "--dry-run")) {
            a->dry_run = 1;
        } else if (!strcmp(s, "-o") || !strcmp(s, "--override")) {
            if (i + 1 == argc) return usage_error("%s needs a SECTION.KEY=VALUE argument", s);
            rc = add_override(a, argv[++i]);
        } else if (!strncmp(s, "--override=", 11)) {
            rc = add_override(a, s + 11);
        } else if (!strncmp(s, "-o", 2)) {
            rc = add_override(a, s + 2);
        } else {
            return usage_error("unknown option '%s'", s);
        }
        if (rc >= 0) return rc;
    }
    if (!a->config) return usage_error("%s", "missing the CONFIG.ini argument (e.g. mist-train examples/tiny.ini)");
    return -1;
}

int main(int argc, char **argv) {
    static TrainArgs args;  // large-ish: keep it off the stack
    int rc = parse_args(argc, argv, &args);
    if (rc >= 0) return rc;

    char env_err[256];
    if (launch_check_env(env_err, sizeof env_err)) {  // before MPI: every rank exits, one says why
        if (launcher_rank() == 0) fprintf(stderr, "mist-train: %s\n", env_err);
        return MIST_EXIT_CONFIG;
    }
    Launch L;
    if (launch_init(&argc, &argv, &L)) return 1;
    rc = train_job_run(&args, &L);
    launch_finalize();
    return rc;
}
