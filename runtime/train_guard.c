// Guards of a training run that need no training state: whether the node's
// memory holds the plan (CPU backend), how long a checkpoint may take, and the
// file a batch script reads to learn of a clean stop (runtime/train_guard.h).
#include "runtime/train_guard.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/fileutil.h"
#include "runtime/trainlog.h"

// The ranks of this job on this node, as the launcher says (Open MPI, MPICH,
// Slurm); 1 when none does.
static int64_t local_ranks(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        long long n = v ? atoll(v) : 0;  // SLURM's "4(x2)" form reads as its first count
        if (n > 0) return n;
    }
    return 1;
}

// On the CPU backend the "device" arena is host memory too: the node's ranks
// need local_ranks x (device + host peak) bytes. A plan that needs more than the
// kernel reports available would be ended by the OOM killer mid-run, with only
// the launcher's message; say it at start instead. 1 with err when short.
// MIST_HOST_MEMORY_CHECK=0 skips the check (swap, or memory freed later).
int host_memory_short(int64_t per_rank, char *err, size_t errlen) {
    const char *off = getenv("MIST_HOST_MEMORY_CHECK");
    if (off && !strcmp(off, "0")) return 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;  // not Linux: nothing to compare with
    char line[256];
    long long avail_kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &avail_kib) == 1) break;
    fclose(f);
    // MIST_FAULT_HOST_MEMORY_AVAILABLE=BYTES stands in for the node's figure (tests)
    const char *fake = getenv("MIST_FAULT_HOST_MEMORY_AVAILABLE");
    if (fake) avail_kib = atoll(fake) / 1024;
    if (avail_kib < 0) return 0;
    int64_t n = local_ranks(), need = n * per_rank, avail = (int64_t)avail_kib * 1024;
    if (need <= avail) return 0;
    char a[32], b[32], c[32];
    trainlog_format_bytes(per_rank, a, sizeof a);
    trainlog_format_bytes(need, b, sizeof b);
    trainlog_format_bytes(avail, c, sizeof c);
    snprintf(err, errlen, "the plan needs %s of host memory per rank (the CPU backend's device arena and its host "
             "arena), x %lld rank(s) on this node = %s, but the node has %s available (hint: fewer ranks per node, "
             "or a plan with less memory: zero, ckpt, a smaller b; MIST_HOST_MEMORY_CHECK=0 tries anyway)", a,
             (long long)n, b, c);
    return 1;
}

// The wait allowed while a checkpoint is gathered and written: comm_timeout
// plus the checkpoint's bytes (weights, m and v in fp32: 12 B per parameter)
// at CHECKPOINT_SLOW_BYTES_PER_S, a slow network file system's rate, so a
// checkpoint of 1.3B parameters (15.6 GB) adds 26 minutes. 0 stays 0 (never).
#define CHECKPOINT_SLOW_BYTES_PER_S 10e6
double checkpoint_timeout(double comm_timeout, int64_t params) {
    if (comm_timeout <= 0) return 0;
    return comm_timeout + 12.0 * (double)params / CHECKPOINT_SLOW_BYTES_PER_S;
}

// MIST_STOP_FILE=PATH: after a stop signal and its checkpoint, rank 0 writes the
// iteration it stopped at to PATH. A batch script cannot rely on the launcher's
// exit status to learn that the ranks stopped cleanly (mpirun signalled with
// SIGTERM returns 1 although every rank exits 5); a file it named itself, it can.
void write_stop_file(int64_t iteration) {
    const char *path = getenv("MIST_STOP_FILE");
    if (!path || !path[0]) return;
    char text[32], err[512];
    int n = snprintf(text, sizeof text, "%lld\n", (long long)iteration);
    if (mist_write_file_atomic(path, text, (size_t)n, err, sizeof err))
        fprintf(stderr, "mist-train: MIST_STOP_FILE: %s\n", err);
}

