// Element-wise ops of the CUDA backend: GELU-tanh, SwiGLU, residual add,
// rotary, cast and scale. One thread per element (grid-stride for huge n);
// bf16 in, fp32 math, bf16 out with round-to-nearest-even (same bits as the
// CPU backend's conversion).
#include <math.h>
#include <stdint.h>
#include "kernels/cuda/cuda_common.cuh"

// The pointwise kernels below move two bf16 per thread (one 32-bit access) when
// every pointer is 4-byte aligned; an odd last element is done by thread 0.
static inline int aligned4(const void *a, const void *b, const void *c) {
    return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 3) == 0;
}

__global__ void gelu_forward_kernel(bf16 *out, const bf16 *inp, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        st(out, i, gelu_tanh(ld(inp, i)));
}
__global__ void gelu_forward_x2_kernel(bf16 *out, const bf16 *inp, size_t n) {
    size_t pairs = n / 2, i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < pairs) {
        float2 x = __bfloat1622float2(((const __nv_bfloat162 *)inp)[i]);
        ((__nv_bfloat162 *)out)[i] = __floats2bfloat162_rn(gelu_tanh(x.x), gelu_tanh(x.y));
    }
    if (i == 0 && (n & 1)) st(out, n - 1, gelu_tanh(ld(inp, n - 1)));
}

__global__ void gelu_backward_kernel(bf16 *dinp, const bf16 *inp, const bf16 *dout, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        st(dinp, i, ld(dout, i) * gelu_tanh_grad(ld(inp, i)));
}
__global__ void gelu_backward_x2_kernel(bf16 *dinp, const bf16 *inp, const bf16 *dout, size_t n) {
    size_t pairs = n / 2, i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < pairs) {
        float2 x = __bfloat1622float2(((const __nv_bfloat162 *)inp)[i]);
        float2 d = __bfloat1622float2(((const __nv_bfloat162 *)dout)[i]);
        ((__nv_bfloat162 *)dinp)[i] = __floats2bfloat162_rn(d.x * gelu_tanh_grad(x.x), d.y * gelu_tanh_grad(x.y));
    }
    if (i == 0 && (n & 1)) st(dinp, n - 1, ld(dout, n - 1) * gelu_tanh_grad(ld(inp, n - 1)));
}

// inp (N, 2F) rows [gate | up]; out (N, F) = silu(gate) * up
__global__ void swiglu_forward_kernel(bf16 *out, const bf16 *inp, int N, int F) {
    size_t n = (size_t)N * F;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / F, c = i % F;
        float g = ld(inp, r * 2 * F + c), u = ld(inp, r * 2 * F + F + c);
        st(out, i, g / (1.0f + expf(-g)) * u);
    }
}

// silu'(g) = sig(g) (1 + g (1 - sig(g)))
__global__ void swiglu_backward_kernel(bf16 *dinp, const bf16 *dout, const bf16 *inp, int N, int F) {
    size_t n = (size_t)N * F;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / F, c = i % F;
        float g = ld(inp, r * 2 * F + c), u = ld(inp, r * 2 * F + F + c), d = ld(dout, i);
        float sig = 1.0f / (1.0f + expf(-g));
        float dg = d * u * sig * (1.0f + g * (1.0f - sig));
        float du = d * g * sig;
        st(dinp, r * 2 * F + c, dg);
        st(dinp, r * 2 * F + F + c, du);
    }
}

__global__ void residual_kernel(bf16 *out, const bf16 *a, const bf16 *c, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        st(out, i, ld(a, i) + ld(c, i));
}
__global__ void residual_x2_kernel(bf16 *out, const bf16 *a, const bf16 *c, size_t n) {
    size_t pairs = n / 2, i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < pairs) {
        float2 x = __bfloat1622float2(((const __nv_bfloat162 *)a)[i]), y = __bfloat1622float2(((const __nv_bfloat162 *)c)[i]);
        ((__nv_bfloat162 *)out)[i] = __floats2bfloat162_rn(x.x + y.x, x.y + y.y);
    }
    if (i == 0 && (n & 1)) st(out, n - 1, ld(a, n - 1) + ld(c, n - 1));
}

// one thread per (token, pair i); loops over the q and k heads of the token.
// The angle t * theta^(-2i/HS) is formed in double like the CPU reference.
__global__ void rotary_kernel(bf16 *qkv, int B, int T, int NH, int NKV, int HS, float theta, float direction) {
    int half = HS / 2;
    size_t n = (size_t)B * T * half;
    size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (idx >= n) return;
    int i = idx % half;
    size_t bt = idx / half;
    int t = bt % T;
    double angle = t * pow((double)theta, -2.0 * i / HS);
    float c = (float)cos(angle), sn = direction * (float)sin(angle);
    size_t row = (size_t)(NH + 2 * NKV) * HS;
    for (int h = 0; h < NH + NKV; h++) {
        size_t p = bt * row + (size_t)h * HS + i;
        float x1 = ld(qkv, p), x2 = ld(qkv, p + half);
        st(qkv, p, x1 * c - x2 * sn);
        st(qkv, p + half, x1 * sn + x2 * c);
    }
}

__global__ void cast_f32_to_bf16(bf16 *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}
__global__ void cast_bf16_to_f32(float *dst, const bf16 *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}
__global__ void scale_kernel(bf16 *x, float alpha, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        st(x, i, ld(x, i) * alpha);
}

enum { EW_THREADS = 256 };

extern "C" void cuda_gelu_forward(Backend *b, BackendStream *s, void *out, const void *inp, size_t n) {
    if (!n) return;
    if (aligned4(out, inp, inp))
        gelu_forward_x2_kernel<<<cuda_blocks(n / 2 + 1, EW_THREADS), EW_THREADS, 0, cuda_stream(s)>>>((bf16 *)out, (const bf16 *)inp, n);
    else
        gelu_forward_kernel<<<cuda_blocks(n, EW_THREADS), EW_THREADS, 0, cuda_stream(s)>>>((bf16 *)out, (const bf16 *)inp, n);
    CUDA_CHECK_LAUNCH();
}
extern "C" void cuda_gelu_backward(Backend *b, BackendStream *s, void *dinp, const void *inp, const void *dout, size_t n) {
    if (!n) return;
    if (aligned4(dinp, inp, dout))
        gelu_backward_x2_kernel<<<cuda_blocks(n / 2 + 1, EW_THREADS), EW_THREADS, 0, cuda_stream(s)>>>((bf16 *)dinp, (const bf16 *)inp, (const bf16 *)dout, n);
    else
        gelu_backward_kernel<<<cuda_blocks(n, EW_THREADS), EW_THREADS, 0, cuda_stream(s)>>>((bf16 *)dinp, (const bf16 *)inp, (const bf16 *)dout, n);
    CUDA_CHECK_LAUNCH();
}
extern "C" void cuda_swiglu_forward(Backend *b, BackendStream *s, void *out, const void *inp, int N, int F) {
    size_t n = (size_t)N * F;
    if (!n) return;
    swiglu_forward_kernel<<<cuda_blocks(n, EW_THREADS), EW_THREADS, 0, cuda_stream(s)>>>((bf16 *)out, (const bf16 *)inp, N, F);
    CUDA_CHECK_LAUNCH();
}
extern "C" void cuda_swiglu_backward(Backend *b, BackendStream *s, void *dinp, const void *dout, const void *inp, int N, int F) {
    size_t n = (size_t)N * F;
    if (!n) return;
    swiglu_backward_kernel<<<cuda_blocks(n, EW_THREADS), EW_THREADS, 0, cuda_stream(s)>>>((bf16 *)dinp, (const bf16 *)dout, (const bf16 *)inp, N, F);
    CUDA_CHECK_LAUNCH();
}
extern "C" void cuda_residual_forward(Backend *b, BackendStream *s, void *out, const void *a, const void *c, size_t n) {
    if (!n) return;
    if (aligned4(out, a, c))
        residual_x2_kernel<<<cuda_blocks(n / 2 + 1, EW_THREADS), EW_THREADS, 0, cuda_stream(s)>>>((bf16 *)out, (const bf16 *)a, (const bf16 *)c, n);
    else
        residual_kernel<<<cuda_blocks(n, EW_THREADS), EW_THREADS, 0, cuda_stream(s)>>>((bf16 *)out, (const bf16 *)a, (const bf16 *)c, n);
    CUDA_CHECK_LAUNCH();
}

static void rotary_launch(BackendStream *s, void *qkv, int B, int T, int NH, int NKV, int HS, float theta, float dir) {
    if (HS % 2) {
        fprintf(stderr, "mist cuda backend: rotary needs an even head size (half-split pairs), got HS=%d\n", HS);
        abort();
    }
    size_t n = (size_t)B * T * (HS / 2);
    if (!n) return;
    rotary_kernel<<<cuda_blocks(n, EW_THREADS), EW_THREADS, 0, cuda_stream(s)>>>((bf16 *)qkv, B, T, NH, NKV, HS, theta, dir);
    CUDA_CHECK_LAUNCH();
}
extern "C" void cuda_rotary_forward(Backend *b, BackendStream *s, void *qkv, int B, int T, int NH, int NKV, int HS, float theta) {
    rotary_launch(s, qkv, B, T, NH, NKV, HS, theta, 1.0f);
}
extern "C" void cuda_rotary_backward(Backend *b, BackendStream *s, void *dqkv, int B, int T, int NH, int NKV, int HS, float theta) {
    rotary_launch(s, dqkv, B, T, NH, NKV, HS, theta, -1.0f);
}

extern "C" void cuda_cast(Backend *b, BackendStream *s, void *dst, MistDtype dst_t, const void *src, MistDtype src_t, size_t n) {
    if (!n) return;
    cudaStream_t st = cuda_stream(s);
    if (dst_t == src_t) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, n * mist_dtype_size(src_t), cudaMemcpyDeviceToDevice, st));
    } else if (dst_t == MIST_BF16 && src_t == MIST_F32) {
        cast_f32_to_bf16<<<cuda_blocks(n, EW_THREADS), EW_THREADS, 0, st>>>((bf16 *)dst, (const float *)src, n);
        CUDA_CHECK_LAUNCH();
    } else if (dst_t == MIST_F32 && src_t == MIST_BF16) {
        cast_bf16_to_f32<<<cuda_blocks(n, EW_THREADS), EW_THREADS, 0, st>>>((float *)dst, (const bf16 *)src, n);
        CUDA_CHECK_LAUNCH();
    } else {
        fprintf(stderr, "mist cuda backend: cast from %s to %s is not supported (allowed: f32 <-> bf16, same type)\n",
                mist_dtype_name(src_t), mist_dtype_name(dst_t));
        abort();
    }
}

extern "C" void cuda_scale(Backend *b, BackendStream *s, void *x, float alpha, size_t n) {
    if (!n) return;
    scale_kernel<<<cuda_blocks(n, EW_THREADS), EW_THREADS, 0, cuda_stream(s)>>>((bf16 *)x, alpha, n);
    CUDA_CHECK_LAUNCH();
}
