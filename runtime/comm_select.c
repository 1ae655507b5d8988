// The comm path of a job (comm_select.h).
#include <config.h>  // HAVE_NCCL
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm_select.h"
#include "runtime/comm_staged.h"
#include "runtime/launch.h"

// tests/mist-train-nccl-fake builds this file with MIST_COMM_SELECT_CPU_NCCL:
// the NCCL stand-in of tests/fake_nccl moves the CPU backend's "device" arena,
// so training runs through the NCCL backend on machines without GPUs.
#ifdef MIST_COMM_SELECT_CPU_NCCL
#ifndef HAVE_NCCL
#define HAVE_NCCL 1
#endif
#define NCCL_ON_CPU 1
#else
#define NCCL_ON_CPU 0
#endif

#ifdef HAVE_NCCL
#include "runtime/comm_nccl.h"
#endif

int comm_select(const CommBackend *mpi, Backend *be, CommGroup *world, CommChoice *out) {
    memset(out, 0, sizeof *out);
    out->path = COMM_PATH_MPI;
    out->comm = mpi;
    out->world = world;
    int on_host = be->device_memory_is_host;  // MPI reads it: no staging, no NCCL
    const char *force = getenv("MIST_COMM_STAGED");  // launch_check_env / train validate the value
    int force_staged = force && !strcmp(force, "1");
    int nccl = 0;
#ifdef HAVE_NCCL
    // NCCL drives one GPU per rank: a rank whose GPU another rank on its host
    // drives too (by UUID: launch.c) stages, and then the whole job does.
    const Launch *li = launch_info();
    int own_gpu = NCCL_ON_CPU || (!on_host && li && li->gpus_on_host > 0 && !li->gpu_shared);
    int votes = own_gpu && !force_staged, n = mpi->group_size(mpi, world);
    int rc = mpi->all_reduce(mpi, &votes, &votes, 1, MIST_I32, COMM_SUM, world);
    if (rc) return rc;
    nccl = votes == n;
    if (!nccl && !on_host && !force_staged)
        snprintf(out->why, sizeof out->why, "not every rank has a GPU of its own (NCCL needs one per rank)");
    if (nccl) {
        out->path = COMM_PATH_NCCL;
        out->comm = comm_nccl_new(mpi, be);
        if (!out->comm) mpi->abort(mpi, 1, "out of host memory for the NCCL comm backend");
        snprintf(out->detail, sizeof out->detail, "NCCL %s", comm_nccl_version());
    }
#else
    if (!on_host && !force_staged) snprintf(out->why, sizeof out->why, "this build has no NCCL");
#endif
    if (!nccl && (!on_host || force_staged)) {
        out->path = COMM_PATH_STAGED;
        out->comm = comm_staged_new(mpi, be);
        if (!out->comm) mpi->abort(mpi, 1, "out of host memory for the staged comm backend");
    }
    return 0;
}

int comm_select_prepare(const CommChoice *c, CommGroup *const *groups, int n) {
#ifdef HAVE_NCCL
    if (c->path != COMM_PATH_NCCL || n > 8) return 0;
    // a group of one rank needs no communicator; the slots stay (every rank takes part in
    // every split: pipeline stages can differ in dp and tp), and NCCL is set up where any
    // rank has a group of several
    CommGroup *several[8];
    int32_t any = 0;
    for (int i = 0; i < n; i++) {
        several[i] = c->comm->group_size(c->comm, groups[i]) > 1 ? groups[i] : NULL;
        any += several[i] != NULL;
    }
    int rc = c->comm->all_reduce(c->comm, &any, &any, 1, MIST_I32, COMM_SUM, c->world);
    if (rc || !any) return rc;
    return comm_nccl_prepare(c->comm, c->world, several, n);
#endif
    return 0;
}

void comm_select_describe(const CommChoice *c, char *buf, size_t len) {
    if (c->path == COMM_PATH_NCCL) snprintf(buf, len, "%s", c->detail);
    else if (c->path == COMM_PATH_STAGED)
        snprintf(buf, len, "staged through pinned host memory%s%s", c->why[0] ? ": " : "", c->why);
    else snprintf(buf, len, "MPI on host memory");
}

int comm_select_follow(const CommChoice *c, BackendStream *s) {
#ifdef HAVE_NCCL
    if (c->path == COMM_PATH_NCCL) {
        comm_nccl_follow(c->comm, s);
        comm_nccl_stream_ordered(c->comm, s != NULL);
        return s != NULL;
    }
#endif
    return 0;
}

int comm_select_communicators(const CommChoice *c) {
#ifdef HAVE_NCCL
    if (c->path == COMM_PATH_NCCL) return comm_nccl_communicators(c->comm);
#endif
    return 0;
}

long long comm_select_device_calls(const CommChoice *c, int rank, char *line, size_t len) {
    long long n = 0;
    if (len) line[0] = '\0';
#ifdef HAVE_NCCL
    if (c->path == COMM_PATH_NCCL && (n = comm_nccl_calls(c->comm)) > 0)
        snprintf(line, len, "NCCL collectives on rank %d: %lld, on %d communicators", rank, n,
                 comm_nccl_communicators(c->comm));
#endif
    if (c->path == COMM_PATH_STAGED && (n = comm_staged_calls(c->comm)) > 0)
        snprintf(line, len, "staged collectives on rank %d: %lld, through %zu B of pinned host memory (outside the "
                 "plan's host bytes)", rank, n, comm_staged_host_bytes(c->comm));
    return n;
}

void comm_select_release(const CommChoice *c) {
#ifdef HAVE_NCCL
    if (c->path == COMM_PATH_NCCL) comm_nccl_free(c->comm);
#endif
    if (c->path == COMM_PATH_STAGED) comm_staged_free(c->comm);
}
