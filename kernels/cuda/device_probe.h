// Asks the CUDA runtime which GPUs this process can see. Any error (no
// driver, no device, a too-old driver) counts as "no GPU": the caller then
// uses the CPU backend.
#ifndef MIST_DEVICE_PROBE_H
#define MIST_DEVICE_PROBE_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int count;              // usable GPUs (0 when none or on any error)
    char name[128];         // name of device 0
    size_t total_memory;    // bytes on device 0
    int cc_major, cc_minor; // compute capability of device 0
    char reason[160];       // why count == 0
} CudaProbe;

void mist_cuda_probe(CudaProbe *out);

// The 16-byte UUID of device `device` (what tells two processes whether they
// drive the same GPU: each numbers the devices it sees from 0, and a scheduler
// may show every rank a different one). 0, or -1 on any error.
int mist_cuda_device_uuid(int device, unsigned char uuid[16]);

#ifdef __cplusplus
}
#endif
#endif
