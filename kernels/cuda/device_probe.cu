// Device probe: the one place that decides whether a GPU is usable.
// cudaGetDeviceCount leaves its output unset when it fails, so the count is
// initialised first and any error is treated as zero devices.
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>
#include "kernels/cuda/device_probe.h"

extern "C" void mist_cuda_probe(CudaProbe *out) {
    memset(out, 0, sizeof *out);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(out->reason, sizeof out->reason, "%s", cudaGetErrorString(e));
        cudaGetLastError();  // clear the sticky-free error so later calls start clean
        return;
    }
    if (n <= 0) {
        snprintf(out->reason, sizeof out->reason, "no CUDA device visible");
        return;
    }
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
        snprintf(out->reason, sizeof out->reason, "cudaGetDeviceProperties failed");
        return;
    }
    out->count = n;
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->total_memory = p.totalGlobalMem;
    out->cc_major = p.major;
    out->cc_minor = p.minor;
}

extern "C" int mist_cuda_device_uuid(int device, unsigned char uuid[16]) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    memcpy(uuid, p.uuid.bytes, 16);
    return 0;
}
