// Causal grouped-query attention as cuDNN's fused flash-attention graphs
// (attention_cudnn.h). The graphs are the patterns cuDNN's SDPA engines
// recognise, built from the backend API's primitive operations:
//   forward   S = Q K^T, S *= 1/sqrt(HS), S = (row >= col) ? S : lowest,
//             m = rowmax S, E = exp(S - m), z = rowsum E, lse = m + log z,
//             P = E / z (bf16), O = P V
//   backward  D = rowsum(dO * O), P = exp(S - lse) from the recomputed S,
//             dV = P^T dO, dP = dO V^T, dS = P (dP - D) / sqrt(HS),
//             dK = dS^T Q, dQ = dS K (summed in an fp32 accumulator)
// where with grouped-query attention (NKV < NH kv heads) dK and dV are the
// products per query head summed over each kv head's group. The engines take
// K (and in the backward V) transposed: {B, NKV, HS, T} views of the same
// memory, strides swapped. q, k, v, dq, dk, dv are strided views into qkv and
// dqkv (B, T, (NH + 2 NKV) HS); out and dout are (B, T, NH, HS); lse (B, NH, T).
// One plan per shape and direction, built at the shape's first call and kept
// for the process with its workspace (counted: cuda_attention_cudnn_reserved_bytes).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/cudnn_graph.cuh"

#ifndef MIST_HAVE_CUDNN
static const char *const not_built = "the backend was built without cuDNN's headers (cudnn_graph.h)";
extern "C" int cuda_attention_cudnn_forward(void *, void *, float *, const void *, int, int, int, int, int) {
    static int said;
    if (!said++)
        fprintf(stderr, "mist cuda backend: cuDNN attention unavailable: %s; the own kernels run\n", not_built);
    return -1;
}
extern "C" int cuda_attention_cudnn_backward(void *, void *, const void *, const void *, const void *, const float *,
                                             int, int, int, int, int) {
    return cuda_attention_cudnn_forward(NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0);
}
extern "C" int cuda_attention_cudnn_ready(int, int, int, int, int, char *why, size_t n) {
    snprintf(why, n, "%s", not_built);
    return -1;
}
extern "C" int cuda_attention_cudnn_describe(int, int, int, int, int, char *why, size_t n) {
    snprintf(why, n, "%s", not_built);
    return -1;
}
extern "C" size_t cuda_attention_cudnn_reserved_bytes(void) { return 0; }
extern "C" int cuda_attention_cudnn_available(char *why, size_t n) {
    snprintf(why, n, "%s", not_built);
    return 0;
}
extern "C" long cuda_attention_cudnn_runs(void) { return 0; }
#else

// the caller tensors' unique ids in both graphs (virtual tensors count from 1000)
enum { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV, UID_SCALE, UID_LOWEST, UID_ONE,
       UID_DQ_ACCUM };

struct Shape {
    int64_t B, T, NH, NKV, HS;
};

// One direction's plan for one shape: the graph's descriptors stay alive with it.
struct SdpaPlan {
    int state;  // 0 not built, 1 ready, -1 refused (why printed once)
    CudnnGraph graph;
    cudnnBackendDescriptor_t plan;
    void *workspace;
    int64_t workspace_bytes;
    float *dq_accum;  // backward only: (B, NH, T, HS) fp32, zeroed before each run
    size_t dq_accum_bytes;
};

struct SdpaEntry {
    Shape s;
    SdpaPlan fwd, bwd;
    SdpaEntry *next;
};

static SdpaEntry *entries;
static size_t reserved_bytes;
static long runs;

// ---------------------------------------------------------------- tensor layouts
static CudnnTensorSpec spec(cudnnDataType_t type, int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t s0,
                            int64_t s1, int64_t s2, int64_t s3, int64_t uid) {
    CudnnTensorSpec t = {type, {d0, d1, d2, d3}, {s0, s1, s2, s3}, uid, false, false};
    return t;
}
// q heads (uid Q or dQ) or k/v heads of qkv-shaped memory: {B, heads, T, HS}, token stride (NH + 2 NKV) HS
static CudnnTensorSpec qkv_view(const Shape &s, int64_t heads, int64_t uid) {
    int64_t row = (s.NH + 2 * s.NKV) * s.HS;
    return spec(CUDNN_DATA_BFLOAT16, s.B, heads, s.T, s.HS, s.T * row, s.HS, row, 1, uid);
}
// the same, transposed: {B, heads, HS, T} (the engines' K^T and V^T)
static CudnnTensorSpec qkv_view_t(const Shape &s, int64_t heads, int64_t uid) {
    CudnnTensorSpec t = qkv_view(s, heads, uid);
    t.dim[2] = s.HS, t.dim[3] = s.T;
    t.stride[2] = 1, t.stride[3] = (s.NH + 2 * s.NKV) * s.HS;
    return t;
}
// out / dout: {B, NH, T, HS} over (B, T, NH, HS)
static CudnnTensorSpec out_view(const Shape &s, int64_t uid) {
    return spec(CUDNN_DATA_BFLOAT16, s.B, s.NH, s.T, s.HS, s.T * s.NH * s.HS, s.HS, s.NH * s.HS, 1, uid);
}
static CudnnTensorSpec rows(const Shape &s, int64_t uid) {  // {B, NH, T, 1} fp32: lse and row statistics
    return spec(CUDNN_DATA_FLOAT, s.B, s.NH, s.T, 1, s.NH * s.T, s.T, 1, 1, uid);
}
static CudnnTensorSpec scores(const Shape &s, cudnnDataType_t type) {  // {B, NH, T, T} virtual
    return spec(type, s.B, s.NH, s.T, s.T, s.NH * s.T * s.T, s.T * s.T, s.T, 1, 0);
}
static CudnnTensorSpec scores_t(const Shape &s) {  // the transposed view of the scores (bf16, virtual)
    return spec(CUDNN_DATA_BFLOAT16, s.B, s.NH, s.T, s.T, s.NH * s.T * s.T, s.T * s.T, 1, s.T, 0);
}
static CudnnTensorSpec scalar(int64_t uid) {  // a host float passed by value in the variant pack
    CudnnTensorSpec t = spec(CUDNN_DATA_FLOAT, 1, 1, 1, 1, 1, 1, 1, 1, uid);
    t.by_value = true;
    return t;
}

// ---------------------------------------------------------------- the graphs
// y = mode(x[, b]) in fp32 into a new virtual tensor laid out as out
static cudnnBackendDescriptor_t pointwise_to(CudnnGraph *g, const char *what, CudnnTensorSpec out,
                                             cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                             cudnnBackendDescriptor_t b) {
    cudnnBackendDescriptor_t y = cudnn_tensor(g, what, out);
    cudnn_pointwise(g, what, mode, CUDNN_DATA_FLOAT, x, b, NULL, y, 0);
    return y;
}

// the caller tensors both graphs read (the forward writes o and lse, the backward reads them)
struct Common {
    cudnnBackendDescriptor_t q, kt, o, lse, scale, lowest;
};
static Common common_tensors(CudnnGraph *g, const Shape &s) {
    Common c;
    c.q = cudnn_tensor(g, "Q", qkv_view(s, s.NH, UID_Q));
    c.kt = cudnn_tensor(g, "K^T", qkv_view_t(s, s.NKV, UID_K));
    c.o = cudnn_tensor(g, "O", out_view(s, UID_O));
    c.lse = cudnn_tensor(g, "stats (lse)", rows(s, UID_STATS));
    c.scale = cudnn_tensor(g, "scale", scalar(UID_SCALE));
    c.lowest = cudnn_tensor(g, "mask value", scalar(UID_LOWEST));
    return c;
}

// S = Q K^T, scaled, then the causal mask: keys after the query get cuDNN's "lowest" (exp gives 0)
static cudnnBackendDescriptor_t masked_scores(CudnnGraph *g, const Shape &s, const Common &c) {
    const CudnnTensorSpec f32 = scores(s, CUDNN_DATA_FLOAT);  // the scores' virtual fp32 stages
    cudnnBackendDescriptor_t S = cudnn_tensor(g, "scores", f32);
    cudnn_matmul(g, "Q K^T", c.q, c.kt, S);
    cudnnBackendDescriptor_t scaled = pointwise_to(g, "S * scale", f32, CUDNN_POINTWISE_MUL, S, c.scale);
    cudnnBackendDescriptor_t row = cudnn_tensor(g, "row index", scores(s, CUDNN_DATA_INT32));
    cudnn_pointwise(g, "row index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, scaled, NULL, NULL, row, 2);
    cudnnBackendDescriptor_t col = cudnn_tensor(g, "column index", scores(s, CUDNN_DATA_INT32));
    cudnn_pointwise(g, "column index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, scaled, NULL, NULL, col, 3);
    cudnnBackendDescriptor_t keep = cudnn_tensor(g, "causal mask", scores(s, CUDNN_DATA_BOOLEAN));
    cudnn_pointwise(g, "row >= col", CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, 0);
    cudnnBackendDescriptor_t masked = cudnn_tensor(g, "masked scores", f32);
    cudnn_pointwise(g, "causal select", CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, scaled, c.lowest, keep,
                    masked, 0);
    return masked;
}

static void forward_graph(CudnnGraph *g, const Shape &s) {
    const CudnnTensorSpec f32 = scores(s, CUDNN_DATA_FLOAT);  // the scores' virtual fp32 stages
    Common c = common_tensors(g, s);
    cudnnBackendDescriptor_t v = cudnn_tensor(g, "V", qkv_view(s, s.NKV, UID_V));
    cudnnBackendDescriptor_t masked = masked_scores(g, s, c);
    // softmax with its log-sum-exp kept for the backward
    cudnnBackendDescriptor_t m = cudnn_tensor(g, "row max", rows(s, 0));
    cudnn_reduction(g, "row max", CUDNN_REDUCE_TENSOR_MAX, masked, m);
    cudnnBackendDescriptor_t centred = pointwise_to(g, "S - max", f32, CUDNN_POINTWISE_SUB, masked, m);
    cudnnBackendDescriptor_t e = pointwise_to(g, "exp", f32, CUDNN_POINTWISE_EXP, centred, NULL);
    cudnnBackendDescriptor_t z = cudnn_tensor(g, "row sum", rows(s, 0));
    cudnn_reduction(g, "row sum", CUDNN_REDUCE_TENSOR_ADD, e, z);
    cudnnBackendDescriptor_t logz = pointwise_to(g, "log sum", rows(s, 0), CUDNN_POINTWISE_LOG, z, NULL);
    cudnn_pointwise(g, "lse = max + log sum", CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, m, logz, NULL, c.lse, 0);
    cudnnBackendDescriptor_t p =  // bf16: the engines take P V's A operand in the inputs' type
        pointwise_to(g, "P = exp / sum", scores(s, CUDNN_DATA_BFLOAT16), CUDNN_POINTWISE_DIV, e, z);
    cudnn_matmul(g, "P V", p, v, c.o);
}

// out = a b, or with grouped-query attention (heads < NH) the per-query-head products
// summed over each kv head's group: the output's kv-head dimension is a reduction's
static void product_per_kv_head(CudnnGraph *g, const Shape &s, const char *what, cudnnBackendDescriptor_t a,
                                cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t out) {
    if (s.NH == s.NKV) {
        cudnn_matmul(g, what, a, b, out);
        return;
    }
    cudnnBackendDescriptor_t per_q_head = cudnn_tensor(
        g, what, spec(CUDNN_DATA_BFLOAT16, s.B, s.NH, s.T, s.HS, s.NH * s.T * s.HS, s.T * s.HS, s.HS, 1, 0));
    cudnn_matmul(g, what, a, b, per_q_head);
    cudnn_reduction(g, what, CUDNN_REDUCE_TENSOR_ADD, per_q_head, out);
}

static void backward_graph(CudnnGraph *g, const Shape &s) {
    const CudnnTensorSpec f32 = scores(s, CUDNN_DATA_FLOAT);  // the scores' virtual fp32 stages
    Common c = common_tensors(g, s);
    cudnnBackendDescriptor_t vt = cudnn_tensor(g, "V^T", qkv_view_t(s, s.NKV, UID_V));
    cudnnBackendDescriptor_t dO = cudnn_tensor(g, "dO", out_view(s, UID_DO));
    cudnnBackendDescriptor_t dq = cudnn_tensor(g, "dQ", qkv_view(s, s.NH, UID_DQ));
    cudnnBackendDescriptor_t dk = cudnn_tensor(g, "dK", qkv_view(s, s.NKV, UID_DK));
    cudnnBackendDescriptor_t dv = cudnn_tensor(g, "dV", qkv_view(s, s.NKV, UID_DV));
    CudnnTensorSpec acc = spec(CUDNN_DATA_FLOAT, s.B, s.NH, s.T, s.HS, s.NH * s.T * s.HS, s.T * s.HS, s.HS, 1,
                               UID_DQ_ACCUM);
    acc.reordered_f16x16 = true;  // the layout cuDNN's engines accumulate dQ in
    cudnnBackendDescriptor_t dq_acc = cudnn_tensor(g, "dQ accumulator", acc);
    cudnnBackendDescriptor_t one = cudnn_tensor(g, "one", scalar(UID_ONE));

    // D = rowsum(dO * O) (times 1: where the pattern has its dropout scale)
    CudnnTensorSpec prod = out_view(s, 0);
    prod.type = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t dOo = pointwise_to(g, "dO * O", prod, CUDNN_POINTWISE_MUL, dO, c.o);
    cudnnBackendDescriptor_t rowdot = cudnn_tensor(g, "rowsum(dO * O)", rows(s, 0));
    cudnn_reduction(g, "rowsum(dO * O)", CUDNN_REDUCE_TENSOR_ADD, dOo, rowdot);
    cudnnBackendDescriptor_t D = pointwise_to(g, "D", rows(s, 0), CUDNN_POINTWISE_MUL, rowdot, one);

    // P from the recomputed scores and the forward's lse; dV = P^T dO
    cudnnBackendDescriptor_t masked = masked_scores(g, s, c);
    cudnnBackendDescriptor_t centred = pointwise_to(g, "S - lse", f32, CUDNN_POINTWISE_SUB, masked, c.lse);
    cudnnBackendDescriptor_t p = pointwise_to(g, "P = exp(S - lse)", f32, CUDNN_POINTWISE_EXP, centred, NULL);
    cudnnBackendDescriptor_t pt = cudnn_tensor(g, "P^T", scores_t(s));
    cudnn_reshape(g, "P^T", p, pt);
    product_per_kv_head(g, s, "dV = P^T dO", pt, dO, dv);

    // dS = P (dP - D) scale; dK = dS^T Q; dQ = dS K
    cudnnBackendDescriptor_t dP = cudnn_tensor(g, "dP", f32);
    cudnn_matmul(g, "dP = dO V^T", dO, vt, dP);
    cudnnBackendDescriptor_t dP1 = pointwise_to(g, "dP * 1", f32, CUDNN_POINTWISE_MUL, dP, one);
    cudnnBackendDescriptor_t dPD = pointwise_to(g, "dP - D", f32, CUDNN_POINTWISE_SUB, dP1, D);
    cudnnBackendDescriptor_t dS0 = pointwise_to(g, "P (dP - D)", f32, CUDNN_POINTWISE_MUL, dPD, p);
    cudnnBackendDescriptor_t dS = pointwise_to(g, "dS = P (dP - D) scale", f32, CUDNN_POINTWISE_MUL, dS0, c.scale);
    cudnnBackendDescriptor_t dSt = cudnn_tensor(g, "dS^T", scores_t(s));
    cudnn_reshape(g, "dS^T", dS, dSt);
    product_per_kv_head(g, s, "dK = dS^T Q", dSt, c.q, dk);
    CudnnTensorSpec k_spec = qkv_view(s, s.NKV, 0);  // K itself: a reshape of K^T, virtual, so
    k_spec.type = CUDNN_DATA_FLOAT;                   // of the intermediate type as in cuDNN's own graphs
    cudnnBackendDescriptor_t k = cudnn_tensor(g, "K", k_spec);
    cudnn_reshape(g, "K from K^T", c.kt, k);
    cudnn_matmul(g, "dQ = dS K", dS, k, dq_acc);
    cudnn_pointwise(g, "dQ from its accumulator", CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, dq_acc, NULL, NULL, dq,
                    0);
}

// ---------------------------------------------------------------- plans per shape
static int build_plan(SdpaPlan *pl, const Shape &s, int backward, char *why, size_t n) {
    cudnnHandle_t handle;
    if (cudnn_load(&handle, why, n) != 0) return -1;
    cudnn_graph_init(&pl->graph, backward ? "backward" : "forward");
    if (backward) backward_graph(&pl->graph, s);
    else forward_graph(&pl->graph, s);
    if (pl->graph.failed || cudnn_graph_plan(&pl->graph, handle, &pl->plan, &pl->workspace_bytes) != 0) {
        snprintf(why, n, "%s", pl->graph.why);
        return -1;
    }
    if (pl->workspace_bytes > 0 && cudaMalloc(&pl->workspace, (size_t)pl->workspace_bytes) != cudaSuccess) {
        cudaGetLastError();
        snprintf(why, n, "cannot allocate the %s plan's %lld-byte workspace", pl->graph.name,
                 (long long)pl->workspace_bytes);
        return -1;
    }
    if (backward) {
        pl->dq_accum_bytes = (size_t)(s.B * s.NH * s.T * s.HS) * sizeof(float);
        if (cudaMalloc(&pl->dq_accum, pl->dq_accum_bytes) != cudaSuccess) {
            cudaGetLastError();
            cudaFree(pl->workspace);  // the plan is given up: its workspace too (never counted as reserved)
            pl->workspace = NULL;
            snprintf(why, n, "cannot allocate the backward's %zu-byte dQ accumulator", pl->dq_accum_bytes);
            return -1;
        }
    }
    reserved_bytes += (size_t)pl->workspace_bytes + pl->dq_accum_bytes;
    fprintf(stderr, "mist cuda backend: cuDNN %zu attention %s plan for B=%lld T=%lld NH=%lld NKV=%lld HS=%lld: "
                    "workspace %lld bytes%s\n", cudnn_api.GetVersion(), pl->graph.name, (long long)s.B,
            (long long)s.T, (long long)s.NH, (long long)s.NKV, (long long)s.HS, (long long)pl->workspace_bytes,
            backward ? " + the fp32 dQ accumulator" : "");
    return 0;
}

// the entry's plan for this direction, built at its first use; NULL (why printed once) when refused
static SdpaPlan *plan_for(int B, int T, int NH, int NKV, int HS, int backward, char *why, size_t n) {
    Shape s = {B, T, NH, NKV, HS};
    SdpaEntry *e = entries;
    while (e && memcmp(&e->s, &s, sizeof s)) e = e->next;
    if (!e) {
        e = (SdpaEntry *)calloc(1, sizeof *e);
        if (!e) {
            snprintf(why, n, "out of host memory");
            return NULL;
        }
        e->s = s;
        e->next = entries;
        entries = e;
    }
    SdpaPlan *pl = backward ? &e->bwd : &e->fwd;
    if (pl->state == 0) {
        pl->state = build_plan(pl, s, backward, why, n) == 0 ? 1 : -1;
        if (pl->state < 0) {
            fprintf(stderr, "mist cuda backend: cuDNN attention %s for B=%d T=%d NH=%d NKV=%d HS=%d unavailable, "
                            "the own kernels run: %s\n", backward ? "backward" : "forward", B, T, NH, NKV, HS, why);
            cudnn_graph_destroy(&pl->graph);
            snprintf(pl->graph.why, sizeof pl->graph.why, "%s", why);
        }
    }
    if (pl->state < 0) {
        snprintf(why, n, "%s", pl->graph.why);
        return NULL;
    }
    return pl;
}

// a plan whose execution failed is not tried again: the shape falls back from then on
static int run(SdpaPlan *pl, cudaStream_t st, int n, const int64_t *uids, void *const *ptrs) {
    char why[1100];
    cudnnHandle_t handle;
    if (cudnn_load(&handle, why, sizeof why) != 0 ||
        cudnn_execute(handle, st, pl->plan, n, uids, ptrs, pl->workspace, why, sizeof why) != 0) {
        fprintf(stderr, "mist cuda backend: cuDNN attention %s failed, the own kernels run instead (for this "
                        "shape from now on): %s\n", pl->graph.name, why);
        pl->state = -1;
        snprintf(pl->graph.why, sizeof pl->graph.why, "its execution failed: %.900s", why);
        return -1;
    }
    runs++;
    return 0;
}

extern "C" int cuda_attention_cudnn_forward(void *stream, void *out, float *lse, const void *qkv, int B, int T, int NH,
                                            int NKV, int HS) {
    char why[1100];
    if (!lse) return -1;  // the graph's statistics output is not optional
    SdpaPlan *pl = plan_for(B, T, NH, NKV, HS, 0, why, sizeof why);
    if (!pl) return -1;
    char *base = (char *)qkv;  // bf16: 2 bytes an element
    size_t k_off = (size_t)NH * HS * 2, v_off = (size_t)(NH + NKV) * HS * 2;
    float scale = 1.0f / sqrtf((float)HS), lowest = -3.402823466e38f;
    const int64_t uids[] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_LOWEST};
    void *const ptrs[] = {base, base + k_off, base + v_off, out, lse, &scale, &lowest};
    return run(pl, (cudaStream_t)stream, 7, uids, ptrs);
}

extern "C" int cuda_attention_cudnn_backward(void *stream, void *dqkv, const void *dout, const void *qkv,
                                             const void *out, const float *lse, int B, int T, int NH, int NKV,
                                             int HS) {
    char why[1100];
    SdpaPlan *pl = plan_for(B, T, NH, NKV, HS, 1, why, sizeof why);
    if (!pl) return -1;
    cudaStream_t st = (cudaStream_t)stream;
    if (cudaMemsetAsync(pl->dq_accum, 0, pl->dq_accum_bytes, st) != cudaSuccess) {
        fprintf(stderr, "mist cuda backend: cuDNN attention backward: zeroing the dQ accumulator failed: %s; "
                        "the own kernels run\n", cudaGetErrorString(cudaGetLastError()));
        return -1;
    }
    char *base = (char *)qkv, *dbase = (char *)dqkv;  // bf16: 2 bytes an element
    size_t k_off = (size_t)NH * HS * 2, v_off = (size_t)(NH + NKV) * HS * 2;
    float scale = 1.0f / sqrtf((float)HS), lowest = -3.402823466e38f, one = 1.0f;
    const int64_t uids[] = {UID_Q, UID_K, UID_V, UID_O, UID_DO, UID_STATS, UID_DQ, UID_DK, UID_DV,
                            UID_DQ_ACCUM, UID_SCALE, UID_LOWEST, UID_ONE};
    void *const ptrs[] = {base, base + k_off, base + v_off, (void *)out, (void *)dout,
                          (void *)lse, dbase, dbase + k_off, dbase + v_off, pl->dq_accum, &scale, &lowest, &one};
    return run(pl, st, 13, uids, ptrs);
}

extern "C" int cuda_attention_cudnn_ready(int B, int T, int NH, int NKV, int HS, char *why, size_t n) {
    cudnnHandle_t handle;
    if (cudnn_load(&handle, why, n) != 0) return -1;
    return plan_for(B, T, NH, NKV, HS, 0, why, n) && plan_for(B, T, NH, NKV, HS, 1, why, n);
}
// Both graphs' tensors and operations, finalized one by one, then the operation graph
// (no device needed: no plan), then destroyed (attention_cudnn.h). Lets a machine without a GPU check the
// graphs' construction.
extern "C" int cuda_attention_cudnn_describe(int B, int T, int NH, int NKV, int HS, char *why, size_t n) {
    if (cudnn_load_library(why, n) != 0) return -1;
    cudnnHandle_t handle = NULL;  // where there is a device: older cuDNN wants it for the graph
    char no_device[700];
    if (cudnn_load(&handle, no_device, sizeof no_device) != 0) handle = NULL;
    Shape s = {B, T, NH, NKV, HS};
    int ok = 1;
    for (int backward = 0; backward < 2 && ok; backward++) {
        CudnnGraph *g = (CudnnGraph *)malloc(sizeof *g);
        if (!g) {
            snprintf(why, n, "out of host memory");
            return 0;
        }
        cudnn_graph_init(g, backward ? "backward" : "forward");
        if (backward) backward_graph(g, s);
        else forward_graph(g, s);
        if (!g->failed) cudnn_graph_finalize(g, handle);
        if (g->failed) {
            snprintf(why, n, "%s", g->why);
            ok = 0;
        }
        cudnn_graph_destroy(g);
        free(g);
    }
    return ok;
}
extern "C" size_t cuda_attention_cudnn_reserved_bytes(void) { return reserved_bytes; }
extern "C" long cuda_attention_cudnn_runs(void) { return runs; }
extern "C" int cuda_attention_cudnn_available(char *why, size_t n) {
    cudnnHandle_t handle;
    return cudnn_load(&handle, why, n) == 0;
}
#endif
