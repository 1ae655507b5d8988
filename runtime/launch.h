// The launcher: starts MPI, finds where this process runs (host, rank on the
// node) and which device it drives. One per process; everything after it
// (config, grid, comm) relies on it.
#ifndef MIST_LAUNCH_H
#define MIST_LAUNCH_H

#include <stddef.h>
#include "kernels/backend.h"

typedef struct {
    int world_rank, world_size;
    int local_rank, local_size;  // rank among the processes on this host, and their count
    char host[64];
    char device[32];             // "cpu" or "cuda:N"
    int gpus_on_host;            // usable GPUs this process sees (0 without CUDA)
    int gpus_in_use;             // different GPUs the ranks on this host drive (by UUID; 0 without CUDA)
    int gpu_shared;              // 1 when another rank on this host drives this rank's GPU too
    int thread_level;            // MPI thread support granted (MPI_THREAD_*)
} Launch;

// Collective over MPI_COMM_WORLD: MPI_Init_thread (asks for MPI_THREAD_MULTIPLE),
// errors returned instead of aborting, local rank via a shared-memory split,
// device pick: GPU (local_rank mod GPUs) when this build has CUDA and a GPU
// answers, else "cpu"; the CPU fallback is announced once for the whole job
// ("mist: no usable GPU (<reason>); using the CPU backend").
// MIST_DEVICE=cpu in the environment forces the CPU backend without a message.
// Returns 0, or 1 when MPI could not start (a message is on stderr).
int launch_init(int *argc, char ***argv, Launch *out);

// Which ranks of a host share a GPU, from the 16-byte UUID of the device each drives
// (ids[r] all zero: rank r has no GPU). Device numbers do not tell: a scheduler may show
// each rank one GPU of its own (Slurm --gpus-per-task=1), which every rank then calls
// device 0. gpus: different GPUs among the ids; ranks: ids that name a GPU; shared:
// whether rank `me`'s GPU is also another rank's.
typedef struct {
    int gpus, ranks, shared;
} DeviceShare;
DeviceShare launch_device_share(const unsigned char (*ids)[16], int n, int me);

// The environment variables that pick a backend or kernels, checked before
// any work: MIST_DEVICE (unset, or "cpu") and MIST_CUDA_ATTENTION (unset, or a value of
// [runtime] attention: auto, base, wide, wgmma, cudnn). Returns 0, or 2 with a message
// in err naming the variable, its value, the allowed ones and a hint. Needs no MPI.
int launch_check_env(char *err, size_t errlen);

// The launch of this process, or NULL before launch_init.
const Launch *launch_info(void);

// The compute backend of a device the launcher picked: "cuda:N" (in builds with
// CUDA) or "cpu", with storage dtype `dtype` (the CUDA backend stores bf16 only).
// NULL with the reason in err when it cannot start.
Backend *launch_backend(const char *device, MistDtype dtype, char *err, size_t errlen);

// MPI_Finalize (safe to call when MPI never started).
void launch_finalize(void);

// Ends the whole job from this rank with a message on stderr:
// "mist: rank R: <message>". Never returns; the other ranks do not hang.
void launch_abort(int exit_code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

#endif
