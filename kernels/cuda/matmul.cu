// Every GEMM of the backend goes through cuBLASLt (bf16 in/out, fp32 compute).
// A plan (operation descriptor, three matrix layouts and the heuristic's best
// algorithm) is built once per distinct shape, epilogue and pointer alignment and cached, so a
// training step pays the heuristic query only on its first iteration.
//
// Row-major to column-major: a row-major (R, K) matrix is a column-major
// (K, R) one, so with out (N,OC) = inp (N,C) @ W(OC,C)^T:
//   forward  outT (OC,N)  = op_T(W_cm (C,OC)) @ inp_cm (C,N)         m=OC n=N  k=C
//   dinp     dinpT (C,N)  = W_cm (C,OC) @ dout_cm (OC,N)              m=C  n=N  k=OC
//   dweight  dWT (C,OC)  += inp_cm (C,N) @ op_T(dout_cm (OC,N))       m=C  n=OC k=N  (beta = 1)
// The forward bias (+ GELU with the pre-activation saved as aux) runs in the
// epilogue, and so does the GELU's backward in the MLP projection's dinp
// (DGELU, reading that aux). The bias gradient is a deterministic column sum (norm.cu), not the
// BGRAD epilogue, whose reduction order is not documented.
#include <cublasLt.h>
#include <string.h>
#include "kernels/cuda/cuda_common.cuh"

enum { PLAN_CACHE = 512 };  // distinct (shape, epilogue, pointer alignment) plans

typedef struct {
    int transa, transb, m, n, k, lda, ldb, ldc, epilogue, beta_one;
    int align_a, align_b, align_c;  // pointer alignments (bytes, <= 256) the algorithm was chosen for
    int align_bias, align_aux;      // the same for the epilogue's bias and aux pointers (0: none)
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} GemmPlan;

static GemmPlan plans[PLAN_CACHE];
static int plan_count;

#define LT_CHECK(call)                                                                          \
    do {                                                                                        \
        cublasStatus_t st_ = (call);                                                            \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                                     \
            fprintf(stderr, "mist cuda backend: %s failed at %s:%d (cublas status %d)\n", #call, \
                    __FILE__, __LINE__, (int)st_);                                              \
            abort();                                                                            \
        }                                                                                       \
    } while (0)

// The largest power of two (at most 256) dividing a pointer. cuBLASLt's
// heuristic assumes 256-byte aligned matrices unless told otherwise, and an
// algorithm picked under that assumption may not run on a pointer inside a
// tensor (a parameter at an odd offset of the flat buffer, the LM head's
// remainder columns), so the plan is chosen for the actual alignments.
static int pointer_alignment(const void *p) {
    size_t a = (size_t)p;
    int align = 256;
    while (align > 1 && a % (size_t)align) align /= 2;
    return align;
}

// The bias and aux pointers are set on the descriptor before the heuristic
// query: cuBLASLt's heuristic takes the alignment of those epilogue buffers
// from the pointer values in the descriptor (cublasLt.h, BIAS_POINTER and
// EPILOGUE_AUX_POINTER), so a plan is chosen for, and keyed by, their
// alignments too, like A, B and C (a bias inside the flat parameter buffer
// is often only 16-byte aligned, and a gathered copy of it may differ).
static GemmPlan *plan_for(Backend *b, int transa, int transb, int m, int n, int k, int lda, int ldb, int ldc,
                          cublasLtEpilogue_t epilogue, int beta_one, const void *bias, const void *aux, int align_a,
                          int align_b, int align_c, int optional) {
    int align_bias = bias ? pointer_alignment(bias) : 0, align_aux = aux ? pointer_alignment(aux) : 0;
    for (int i = 0; i < plan_count; i++) {
        GemmPlan *p = &plans[i];
        if (p->transa == transa && p->transb == transb && p->m == m && p->n == n && p->k == k && p->lda == lda &&
            p->ldb == ldb && p->ldc == ldc && p->epilogue == (int)epilogue && p->beta_one == beta_one &&
            p->align_a == align_a && p->align_b == align_b && p->align_c == align_c &&
            p->align_bias == align_bias && p->align_aux == align_aux) {
            if (!p->desc && !optional) continue;  // a required product is never skipped: asked again below
            return p->desc ? p : NULL;            // NULL: a cached "no algorithm" for an optional plan
        }
    }
    if (plan_count == PLAN_CACHE) {
        fprintf(stderr, "mist cuda backend: more than %d distinct GEMM shapes; raise PLAN_CACHE in %s\n",
                PLAN_CACHE, __FILE__);
        abort();
    }
    CudaCtx *ctx = cuda_ctx(b);
    GemmPlan *p = &plans[plan_count];
    memset(p, 0, sizeof *p);
    p->transa = transa; p->transb = transb; p->m = m; p->n = n; p->k = k;
    p->lda = lda; p->ldb = ldb; p->ldc = ldc; p->epilogue = (int)epilogue; p->beta_one = beta_one;
    p->align_a = align_a; p->align_b = align_b; p->align_c = align_c;
    p->align_bias = align_bias; p->align_aux = align_aux;
    LT_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT && epilogue != CUBLASLT_EPILOGUE_DGELU) {
        cudaDataType_t bt = CUDA_R_16BF;
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
    if (bias) LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (aux) {
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
        int64_t ld = ldc;
        cudaDataType_t at = CUDA_R_16BF;
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at, sizeof at));
    }
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, transa ? k : m, transa ? m : k, lda));
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, transb ? n : k, transb ? k : n, ldb));
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_16BF, m, n, ldc));
    cublasLtMatmulPreference_t pref;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = ctx->lt_workspace_bytes;
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    uint32_t aa = (uint32_t)align_a, ab = (uint32_t)align_b, ac = (uint32_t)align_c;  // D is C (in place)
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa));
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab));
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof ac));
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof ac));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    // "no algorithm for this configuration" comes back as CUBLAS_STATUS_NOT_SUPPORTED
    // (cublasLt.h), not only as found == 0: an optional plan falls back on either
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)ctx->lt_handle, p->desc, p->a, p->b, p->c,
                                                       p->c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (hs != CUBLAS_STATUS_SUCCESS) found = 0;
    if (found == 0 && optional) {  // remembered, so the caller falls back without asking again
        cublasLtMatrixLayoutDestroy(p->a);
        cublasLtMatrixLayoutDestroy(p->b);
        cublasLtMatrixLayoutDestroy(p->c);
        cublasLtMatmulDescDestroy(p->desc);
        p->desc = NULL;
        plan_count++;
        return NULL;
    }
    if (found == 0) {
        fprintf(stderr, "mist cuda backend: cuBLASLt has no algorithm for GEMM m=%d n=%d k=%d (transa %d transb %d, "
                        "epilogue %d, alignments %d/%d/%d bytes; heuristic status %d)\n", m, n, k, transa, transb,
                (int)epilogue, align_a, align_b, align_c, (int)hs);
        abort();
    }
    p->algo = result.algo;
    plan_count++;
    return p;
}

// products whose fused epilogue (GELU_AUX, DGELU) had no algorithm and ran unfused:
// benchmarks say whether their "fused" rows timed the fused product
static long epilogue_fallbacks;
extern "C" long cuda_matmul_epilogue_fallbacks(void) { return epilogue_fallbacks; }

// Runs the product; returns 0 without running it when `optional` and cuBLASLt
// has no algorithm for this epilogue and shape (the caller then falls back).
static int gemm_with(Backend *b, cudaStream_t st, int transa, int transb, int m, int n, int k, const void *A,
                     int lda, const void *B, int ldb, void *C, int ldc, float beta, cublasLtEpilogue_t epilogue,
                     const void *bias, const void *aux, int optional) {
    CudaCtx *ctx = cuda_ctx(b);
    GemmPlan *p = plan_for(b, transa, transb, m, n, k, lda, ldb, ldc, epilogue, beta != 0.0f, bias, aux,
                           pointer_alignment(A), pointer_alignment(B), pointer_alignment(C), optional);
    if (!p) {
        epilogue_fallbacks++;
        return 0;
    }
    // pointers change from call to call (with the alignments the plan was chosen for)
    if (bias) LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (aux) LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    float alpha = 1.0f;
    LT_CHECK(cublasLtMatmul((cublasLtHandle_t)ctx->lt_handle, p->desc, &alpha, A, p->a, B, p->b, &beta, C, p->c, C,
                            p->c, &p->algo, ctx->lt_workspace, ctx->lt_workspace_bytes, st));
    return 1;
}

static void gemm(Backend *b, cudaStream_t st, int transa, int transb, int m, int n, int k, const void *A, int lda,
                 const void *B, int ldb, void *C, int ldc, float beta, cublasLtEpilogue_t epilogue,
                 const void *bias, void *aux) {
    gemm_with(b, st, transa, transb, m, n, k, A, lda, B, ldb, C, ldc, beta, epilogue, bias, aux, 0);
}

// each thread V consecutive elements (V = 8: 16-byte accesses); n is a multiple of V
template <int V>
__global__ void gelu_backward_inplace_kernel(bf16 *dout, const bf16 *pre, size_t n) {
    for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * V; i < n; i += (size_t)gridDim.x * blockDim.x * V) {
        float d[V], x[V];
        ldv<V>(d, dout + i), ldv<V>(x, pre + i);
        for (int k = 0; k < V; k++) d[k] *= gelu_tanh_grad(x[k]);
        stv<V>(dout + i, d);
    }
}

extern "C" void cuda_matmul_forward(Backend *b, BackendStream *s, void *out, void *pre_gelu, const void *inp,
                                    const void *weight, const void *bias, int N, int C, int OC) {
    cudaStream_t st = cuda_stream(s);
    cublasLtEpilogue_t ep = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (pre_gelu) {
        // The aux (pre_gelu, ld OC) must have a leading dimension divisible by 8
        // (cublasLt.h, EPILOGUE_AUX_LD). Otherwise, or where cuBLASLt has no
        // GELU_AUX algorithm, pre_gelu = the product (+ bias) and a separate
        // pass out = gelu(pre_gelu), which reads the bf16-rounded pre-activation
        // rather than the fp32 sum.
        cublasLtEpilogue_t gep = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        if (OC % 8 == 0 && gemm_with(b, st, 1, 0, OC, N, C, weight, C, inp, C, out, OC, 0.0f, gep, bias, pre_gelu, 1))
            return;
        gemm(b, st, 1, 0, OC, N, C, weight, C, inp, C, pre_gelu, OC, 0.0f, ep, bias, NULL);
        cuda_gelu_forward(b, s, out, pre_gelu, (size_t)N * OC);
        return;
    }
    gemm(b, st, 1, 0, OC, N, C, weight, C, inp, C, out, OC, 0.0f, ep, bias, NULL);
}

// d X(n) *= gelu'(pre X(n)) in place
static void gelu_backward_inplace(cudaStream_t st, void *d, const void *pre, size_t n) {
    if (n % 8 == 0 && cuda_rows_vec8(8, d, pre, 0, 0, 0))
        gelu_backward_inplace_kernel<8><<<cuda_blocks(n / 8, 256), 256, 0, st>>>((bf16 *)d, (const bf16 *)pre, n);
    else
        gelu_backward_inplace_kernel<1><<<cuda_blocks(n, 256), 256, 0, st>>>((bf16 *)d, (const bf16 *)pre, n);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_matmul_backward(Backend *b, BackendStream *s, void *dinp, void *dweight, void *dbias,
                                     void *dout, const void *inp, const void *weight, const void *pre_gelu,
                                     int N, int C, int OC) {
    cudaStream_t st = cuda_stream(s);
    if (pre_gelu) gelu_backward_inplace(st, dout, pre_gelu, (size_t)N * OC);
    if (dinp) gemm(b, st, 0, 0, C, N, OC, weight, C, dout, OC, dinp, C, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
    if (dweight) gemm(b, st, 0, 1, C, OC, N, inp, C, dout, OC, dweight, C, 1.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
    if (dbias) cuda_column_sum_accumulate(b, st, (bf16 *)dbias, (const bf16 *)dout, N, OC);
}

// dinpT (C,N) = W_cm (C,OC) @ dout_cm (OC,N) with the DGELU epilogue: each
// fp32 result times gelu'(aux), aux = pre_gelu laid out like dinp (ld C), then
// rounded once to bf16. This saves the separate in-place pass (read dinp and
// pre_gelu, write dinp: 6 N C bytes; GPT-3 1.3B at 16k tokens: 0.8 GB per
// layer). Where cuBLASLt offers no DGELU algorithm for the shape, or the aux
// ld C is not divisible by 8 as DGELU requires (cublasLt.h, EPILOGUE_AUX_LD),
// the plain product and that pass run instead.
extern "C" void cuda_matmul_dinp_gelu(Backend *b, BackendStream *s, void *dinp, const void *dout, const void *weight,
                                      const void *pre_gelu, int N, int C, int OC) {
    cudaStream_t st = cuda_stream(s);
    if (N <= 0 || C <= 0) return;
    if (C % 8 == 0 &&
        gemm_with(b, st, 0, 0, C, N, OC, weight, C, dout, OC, dinp, C, 0.0f, CUBLASLT_EPILOGUE_DGELU, NULL, pre_gelu, 1))
        return;
    gemm(b, st, 0, 0, C, N, OC, weight, C, dout, OC, dinp, C, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
    gelu_backward_inplace(st, dinp, pre_gelu, (size_t)N * C);
}

// The LM head's products with logits rows ld apart. With an odd vocabulary
// (GPT-2: 50257) cuBLASLt still falls back to align-1 kernels when the GEMM's
// m (forward) or k (dinp) is the vocabulary itself, even with 16-byte aligned
// rows (measured on an H100: 16.4 and 11.5 ms of a 60 ms GPT-2 step), so
// those two products run as the first OC8 = OC - OC % 8 vocabulary rows (fast
// kernels) plus the remaining < 8 rows. The dinp remainder is added onto the
// bf16 result of the main part (one extra bf16 rounding). The dweight product
// (n = OC) already gets aligned kernels.
extern "C" void cuda_matmul_forward_ld(Backend *b, BackendStream *s, void *out, const void *inp, const void *weight,
                                       int N, int C, int OC, int ld) {
    cudaStream_t st = cuda_stream(s);
    int oc8 = OC - OC % 8, rem = OC % 8;
    const bf16 *w = (const bf16 *)weight;
    if (oc8) gemm(b, st, 1, 0, oc8, N, C, w, C, inp, C, out, ld, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
    if (rem)
        gemm(b, st, 1, 0, rem, N, C, w + (size_t)oc8 * C, C, inp, C, (bf16 *)out + oc8, ld, 0.0f,
             CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
}

extern "C" void cuda_matmul_backward_ld(Backend *b, BackendStream *s, void *dinp, void *dweight, const void *dout,
                                        const void *inp, const void *weight, int N, int C, int OC, int ld) {
    cudaStream_t st = cuda_stream(s);
    int oc8 = OC - OC % 8, rem = OC % 8;
    const bf16 *w = (const bf16 *)weight, *d = (const bf16 *)dout;
    if (dinp && oc8) gemm(b, st, 0, 0, C, N, oc8, w, C, d, ld, dinp, C, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
    if (dinp && rem)
        gemm(b, st, 0, 0, C, N, rem, w + (size_t)oc8 * C, C, d + oc8, ld, dinp, C, oc8 ? 1.0f : 0.0f,
             CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
    if (dweight) gemm(b, st, 0, 1, C, OC, N, inp, C, dout, ld, dweight, C, 1.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
}

extern "C" int cuda_matmul_init(Backend *b, char *err, size_t errlen) {
    CudaCtx *ctx = cuda_ctx(b);
    cublasLtHandle_t h;
    cublasStatus_t st = cublasLtCreate(&h);
    if (st != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cublasLtCreate failed (status %d)", (int)st);
        return -1;
    }
    ctx->lt_handle = h;
    return 0;
}

extern "C" void cuda_matmul_destroy(Backend *b) {
    for (int i = 0; i < plan_count; i++) {
        if (!plans[i].desc) continue;  // an optional plan without an algorithm
        cublasLtMatrixLayoutDestroy(plans[i].a);
        cublasLtMatrixLayoutDestroy(plans[i].b);
        cublasLtMatrixLayoutDestroy(plans[i].c);
        cublasLtMatmulDescDestroy(plans[i].desc);
    }
    plan_count = 0;
    if (cuda_ctx(b)->lt_handle) cublasLtDestroy((cublasLtHandle_t)cuda_ctx(b)->lt_handle);
}
