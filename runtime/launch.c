// The launcher: MPI start-up, host and node-local rank, device pick.
#ifdef HAVE_CONFIG_H
#include <config.h>  // the build's config (HAVE_CUDA), not base/schema.h
#endif
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "runtime/launch.h"
#include "base/config_keys.h"
#ifdef HAVE_CUDA
#include "kernels/cuda/device_probe.h"
#endif

static Launch launch_;
static int launched_;
static char gpu_description_[192];  // "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB" when a GPU answered

const Launch *launch_info(void) { return launched_ ? &launch_ : NULL; }

// Ranks on one host share memory: MPI_Comm_split_type(SHARED) groups them,
// so the rank inside that group is the node-local rank whatever the launcher
// (mpirun, srun) exports.
// The group stays open in *node for the device comparison (MPI_COMM_NULL on error).
static int find_local_rank(Launch *L, MPI_Comm *node) {
    *node = MPI_COMM_NULL;
    int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, L->world_rank, MPI_INFO_NULL, node);
    if (rc != MPI_SUCCESS) return rc;
    MPI_Comm_rank(*node, &L->local_rank);
    MPI_Comm_size(*node, &L->local_size);
    return MPI_SUCCESS;
}

DeviceShare launch_device_share(const unsigned char (*ids)[16], int n, int me) {
    static const unsigned char none[16];
    DeviceShare d = {0, 0, 0};
    for (int r = 0; r < n; r++) {
        if (!memcmp(ids[r], none, 16)) continue;
        d.ranks++;
        int first = 1;  // the lowest rank driving this GPU counts it
        for (int q = 0; q < r && first; q++) first = memcmp(ids[q], ids[r], 16) != 0;
        d.gpus += first;
        if (r != me && !memcmp(ids[r], ids[me], 16)) d.shared = 1;
    }
    return d;
}

// Compares the GPUs of the host's ranks (launch_device_share): fills gpus_in_use, gpu_shared.
static void share_devices(Launch *L, MPI_Comm node) {
    unsigned char mine[16] = {0};
#ifdef HAVE_CUDA
    if (L->gpus_on_host > 0 && mist_cuda_device_uuid(atoi(L->device + strlen("cuda:")), mine) != 0) {
        // no UUID: fall back to the device number (right unless each rank sees other GPUs)
        memcpy(mine, "cuda-device-", 12);
        mine[12] = (unsigned char)(1 + atoi(L->device + strlen("cuda:")));
    }
#endif
    L->gpus_in_use = L->gpus_on_host > 0;
    L->gpu_shared = 0;
    if (node == MPI_COMM_NULL) return;  // one process per host, as find_local_rank's fallback says
    unsigned char (*ids)[16] = calloc((size_t)L->local_size, 16);
    if (ids && MPI_Allgather(mine, 16, MPI_BYTE, ids, 16, MPI_BYTE, node) == MPI_SUCCESS) {
        DeviceShare d = launch_device_share((const unsigned char(*)[16])ids, L->local_size, L->local_rank);
        L->gpus_in_use = d.gpus;
        L->gpu_shared = d.shared;
    }
    free(ids);
}

// MIST_CUDA_ATTENTION takes the values of [runtime] attention (base/config_keys.c): one list, so the
// override and the key can never disagree on what exists.
int launch_check_env(char *err, size_t errlen) {
    static const char *const device_names[] = {"cpu", NULL};
    int att_key = config_key_find("runtime", "attention");
    const struct {
        const char *name;
        const char *const *allowed;
        const char *hint;
    } vars[] = {
        {"MIST_DEVICE", device_names, "unset it to use a GPU when one answers, or set cpu to force the CPU backend"},
        {"MIST_CUDA_ATTENTION", att_key >= 0 ? config_keys[att_key].names : device_names,
         "unset it for [runtime] attention (default auto: wgmma on Hopper with an sm_90a build, else base)"},
    };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i].name);
        if (!v || !*v) continue;
        int ok = 0;
        char list[96] = "";
        for (int k = 0; vars[i].allowed[k]; k++) {
            ok |= strcmp(v, vars[i].allowed[k]) == 0;
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "", vars[i].allowed[k]);
        }
        if (!ok) {
            snprintf(err, errlen, "environment: %s='%.64s' is not allowed (allowed: %s, or unset); hint: %s",
                     vars[i].name, v, list, vars[i].hint);
            return 2;
        }
    }
    return 0;
}

// Picks this rank's device; writes the reason when it falls back to the CPU.
static void pick_device(Launch *L, char *why, size_t whylen) {
    snprintf(L->device, sizeof L->device, "cpu");
    L->gpus_on_host = 0;
    const char *force = getenv("MIST_DEVICE");
    if (force && strcmp(force, "cpu") == 0) {
        why[0] = '\0';  // asked for: nothing to announce
        return;
    }
#ifdef HAVE_CUDA
    CudaProbe probe;
    mist_cuda_probe(&probe);
    if (probe.count > 0) {
        L->gpus_on_host = probe.count;
        snprintf(L->device, sizeof L->device, "cuda:%d", L->local_rank % probe.count);
        snprintf(gpu_description_, sizeof gpu_description_, "%s, sm_%d%d, %.1f GiB", probe.name, probe.cc_major,
                 probe.cc_minor, probe.total_memory / 1073741824.0);
        why[0] = '\0';
        return;
    }
    snprintf(why, whylen, "%s", probe.reason[0] ? probe.reason : "no CUDA device found");
#else
    snprintf(why, whylen, "this build has no CUDA backend");
#endif
}

int launch_init(int *argc, char ***argv, Launch *out) {
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "mist: MPI failed to start. Hint: launch with mpirun or srun, and check the MPI installation\n");
        return 1;
    }
    // Errors come back as codes (turned into messages) instead of killing the job silently.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    Launch *L = &launch_;
    memset(L, 0, sizeof *L);
    L->thread_level = provided;
    MPI_Comm_rank(MPI_COMM_WORLD, &L->world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &L->world_size);
    int len = 0;
    char name[MPI_MAX_PROCESSOR_NAME];
    MPI_Get_processor_name(name, &len);
    snprintf(L->host, sizeof L->host, "%.63s", name);  // long FQDNs are cut
    MPI_Comm node;
    if (find_local_rank(L, &node) != MPI_SUCCESS) {
        L->local_rank = 0;  // cannot tell: behave as one process per host
        L->local_size = 1;
        node = MPI_COMM_NULL;
    }

#ifdef _OPENMP
    // Ranks on one host share its cores. Unless OMP_NUM_THREADS says otherwise,
    // give each rank cores / ranks-on-host threads (at least 1): one thread per
    // core in every rank oversubscribes the host local_size times over, and
    // spinning OpenMP threads then slow the job down by an order of magnitude.
    if (!getenv("OMP_NUM_THREADS")) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        long per_rank = cores > 0 ? cores / L->local_size : 1;
        omp_set_num_threads(per_rank < 1 ? 1 : (int)per_rank);
    }
#endif
    char why[192];
    pick_device(L, why, sizeof why);
    share_devices(L, node);
    if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
    // Announce the CPU fallback once for the job: the lowest rank that fell back speaks.
    int fell_back = why[0] != '\0';
    int mine = fell_back ? L->world_rank : L->world_size, first = L->world_size;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (fell_back && first == L->world_rank) {
        if (L->world_size > 1 && L->world_rank > 0)
            fprintf(stderr, "mist: no usable GPU on %s (%s); using the CPU backend\n", L->host, why);
        else
            fprintf(stderr, "mist: no usable GPU (%s); using the CPU backend\n", why);
        fflush(stderr);
    }
    // Say which GPUs drive the job, once per host.
    if (L->gpus_on_host > 0 && L->local_rank == 0) {
        // the attention kernels are said at the backend's start (runtime/attention_choice.h)
        fprintf(stderr, "mist: %d GPU%s on %s (%s); using the CUDA backend\n", L->gpus_in_use,
                L->gpus_in_use == 1 ? "" : "s", L->host, gpu_description_);
        fflush(stderr);
    }
    // Oversubscribed GPUs work (ranks share a device) but are slower: say so once per host.
    if (L->gpus_on_host > 0 && L->local_size > L->gpus_in_use && L->local_rank == 0) {
        fprintf(stderr, "mist: %d ranks share %d GPU%s on %s\n", L->local_size, L->gpus_in_use,
                L->gpus_in_use == 1 ? "" : "s", L->host);
        fflush(stderr);
    }
    launched_ = 1;
    if (out) *out = *L;
    return 0;
}

void launch_finalize(void) {
    int started = 0, finished = 0;
    MPI_Initialized(&started);
    MPI_Finalized(&finished);
    fflush(stdout);
    fflush(stderr);
    if (started && !finished) MPI_Finalize();
}

void launch_abort(int exit_code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int rank = launched_ ? launch_.world_rank : -1;
    fprintf(stderr, "mist: rank %d: %s\n", rank, msg);
    fflush(stderr);
    fflush(stdout);
    int started = 0;
    MPI_Initialized(&started);
    if (started) MPI_Abort(MPI_COMM_WORLD, exit_code);
    exit(exit_code);
}

Backend *launch_backend(const char *device, MistDtype dtype, char *err, size_t errlen) {
#ifdef HAVE_CUDA
    if (!strncmp(device, "cuda:", 5)) return backend_cuda_create(dtype, atoi(device + 5), err, errlen);
#endif
    return backend_cpu_create(dtype, err, errlen);
}
