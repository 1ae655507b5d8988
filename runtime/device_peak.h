// The device's own count of a run's peak memory, beside the arenas' bookkeeping.
//
// The arenas know what they carved; the device also holds what the libraries
// take outside them (cuBLASLt's workspace, the embedding backward's sort
// buffers, NCCL's buffers once it connects). The backend reports the device's
// free bytes (cudaMemGetInfo: every allocation of every process); sampled at
// phase boundaries (before the arenas are reserved, after them, after every
// iteration, at the end), the run's device peak is
//   peak = free before the arenas - the least free seen since.
// The arenas are reserved once and libraries keep what they allocate, so a
// sample after each iteration sees the high-water mark. Another process on the
// same device shows up in it too. The CPU backend has no device of its own
// (device_free_bytes says -1): its device memory is the arena, and that is the
// figure reported, named as such.
#ifndef MIST_DEVICE_PEAK_H
#define MIST_DEVICE_PEAK_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/backend.h"

typedef struct {
    int known;                // the backend reports its device's free bytes
    size_t base_free, min_free;
} DevicePeak;

// the baseline: the device's free bytes now (call before the arenas are reserved)
static inline void device_peak_start(DevicePeak *p, Backend *be) {
    size_t free = 0;
    p->known = be->device_free_bytes && be->device_free_bytes(be, &free) == 0;
    p->base_free = p->min_free = free;
}

// one sample at a phase boundary
static inline void device_peak_sample(DevicePeak *p, Backend *be) {
    size_t free = 0;
    if (p->known && be->device_free_bytes(be, &free) == 0 && free < p->min_free) p->min_free = free;
}

// bytes the run took on the device since the baseline at its fullest; -1 when the backend cannot tell
static inline int64_t device_peak_bytes(const DevicePeak *p) {
    return p->known ? (int64_t)(p->base_free - p->min_free) : -1;
}

#endif
