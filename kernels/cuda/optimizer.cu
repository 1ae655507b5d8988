// AdamW and the deterministic squared gradient norm.
//
// AdamW (decoupled weight decay, bias-corrected), step t >= 1, g = grad * grad_scale:
//   m = b1 m + (1-b1) g,  v = b2 v + (1-b2) g^2,  w -= lr (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd w)
// w is the fp32 master (bf16 parameters), and the bf16 parameter is rewritten from it.
//
// Squared norm: a FIXED grid (independent of the device) writes one partial per
// block, then one block adds the partials in a fixed tree order, so the bits
// never change from run to run and no atomics are used.
#include <math.h>
#include "kernels/cuda/cuda_common.cuh"

__global__ void adamw_kernel(bf16 *param, float *master, const bf16 *grad, float *m, float *v, size_t n,
                             float lr, float beta1, float beta2, float eps, float wd, float grad_scale,
                             float correction1, float correction2) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float g = ld(grad, i) * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float w = master ? master[i] : ld(param, i);
        w -= lr * ((mi / correction1) / (sqrtf(vi / correction2) + eps) + wd * w);
        if (master) master[i] = w;
        st(param, i, w);
    }
}

enum { NSQ_BLOCKS = 1024, NSQ_THREADS = 256 };

__global__ void norm_sq_partial_kernel(double *partial, const bf16 *grad, size_t n) {
    __shared__ double sh[NSQ_THREADS];
    double sum = 0.0;
    for (size_t i = blockIdx.x * (size_t)NSQ_THREADS + threadIdx.x; i < n; i += (size_t)NSQ_BLOCKS * NSQ_THREADS) {
        double g = ld(grad, i);
        sum += g * g;
    }
    sh[threadIdx.x] = sum;
    __syncthreads();
    for (int o = NSQ_THREADS / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

__global__ void norm_sq_final_kernel(float *acc, const double *partial) {
    __shared__ double sh[NSQ_THREADS];
    double sum = 0.0;
    for (int i = threadIdx.x; i < NSQ_BLOCKS; i += NSQ_THREADS) sum += partial[i];
    sh[threadIdx.x] = sum;
    __syncthreads();
    for (int o = NSQ_THREADS / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) acc[0] = (float)((double)acc[0] + sh[0]);
}

extern "C" void cuda_adamw_update(Backend *b, BackendStream *s, void *param, float *master, const void *grad,
                                  float *m, float *v, size_t n, float lr, float beta1, float beta2,
                                  float eps, float weight_decay, float grad_scale, int t) {
    if (t < 1) {
        fprintf(stderr, "mist cuda backend: adamw step t = %d, but steps count from 1 "
                        "(bias correction divides by 1 - beta^t)\n", t);
        abort();
    }
    if (!n) return;
    float c1 = 1.0f - powf(beta1, (float)t), c2 = 1.0f - powf(beta2, (float)t);
    adamw_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream(s)>>>((bf16 *)param, master, (const bf16 *)grad, m, v, n,
                                                                 lr, beta1, beta2, eps, weight_decay, grad_scale, c1, c2);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_norm_squared_accumulate(Backend *b, BackendStream *s, float *acc, const void *grad, size_t n) {
    double *partial = (double *)cuda_scratch(b, NSQ_BLOCKS * sizeof(double), "norm_squared_accumulate");  // (NSQ_BLOCKS)
    norm_sq_partial_kernel<<<NSQ_BLOCKS, NSQ_THREADS, 0, cuda_stream(s)>>>(partial, (const bf16 *)grad, n);
    CUDA_CHECK_LAUNCH();
    norm_sq_final_kernel<<<1, NSQ_THREADS, 0, cuda_stream(s)>>>(acc, partial);
    CUDA_CHECK_LAUNCH();
}
