// CPU backend, part 2: embedding, fused residual + LayerNorm / RMSNorm, matmul
// (+ bias, + GELU epilogue) and the GEMM underneath it (OpenBLAS and the
// blocked loop). Fresh random inputs each run (the seed is printed); odd
// shapes (C = 72, OC = 37, GEMM sizes that straddle every block edge).
//
// Tolerances (max |got - want| relative to the tensor's max |want|):
//   fp32 forward vs the double reference      <= 1e-5
//   fp32 backward vs central differences      <= 1e-3
//   bf16 storage vs the fp32 run              <= 2e-2 (norm backward: 5e-2, it subtracts means)
//   accumulating twice vs 2 x once            <= 1e-6
#ifdef HAVE_CONFIG_H
#include <config.h>  // HAVE_OPENBLAS
#endif
#ifdef _OPENMP
#include <omp.h>
#endif
#include "tests/kernel_ref.h"
#include "kernels/cpu/cpu_ops.h"
#ifdef HAVE_OPENBLAS
#include <cblas.h>  // openblas_set_num_threads
#endif

static const double FWD_TOL = 1e-5, FD_TOL = 1e-3, BF16_TOL = 2e-2, ACC_TOL = 1e-6;

// |got - k once| relative to max |k once|: did each call add the same amount again?
static double multiple_err(const float *got, const float *once, double k, size_t n) {
    double err = 0.0, scale = 1e-30;
    for (size_t i = 0; i < n; i++) {
        err = fmax(err, fabs((double)got[i] - k * once[i]));
        scale = fmax(scale, fabs(k * once[i]));
    }
    return err / scale;
}

static double doubled_err(const float *twice, const float *once, size_t n) {
    return multiple_err(twice, once, 2.0, n);
}

// ---------------------------------------------------------------- embedding
typedef struct { double *wte, *wpe; const int32_t *tok; const float *r; int B, T, C; } EmbCtx;
static void embedding_ref(double *out, const EmbCtx *c) {
    for (int i = 0; i < c->B * c->T; i++)
        for (int k = 0; k < c->C; k++)
            out[(size_t)i * c->C + k] = c->wte[(size_t)c->tok[i] * c->C + k] +
                                        (c->wpe ? c->wpe[(size_t)(i % c->T) * c->C + k] : 0.0);
}
static double embedding_loss(void *p) {
    EmbCtx *c = p;
    size_t n = (size_t)c->B * c->T * c->C;
    double *out = malloc(n * sizeof(double));
    embedding_ref(out, c);
    double s = ref_dot(out, c->r, n);
    free(out);
    return s;
}

static void test_embedding(void) {
    int B = 2, T = 5, C = 72, V = 11, maxT = 8;
    size_t n = (size_t)B * T * C;
    Backend *b = ref_backend(MIST_F32);
    float *wte = ref_random((size_t)V * C, -1, 1), *wpe = ref_random((size_t)maxT * C, -1, 1);
    float *r = ref_random(n, -1, 1), *out = malloc(n * 4);
    int32_t tok[16];
    for (int i = 0; i < B * T; i++) tok[i] = ref_randint(4);  // repeated ids exercise the grouping
    tok[B * T - 1] = V - 1;
    double *wted = ref_to_double(wte, (size_t)V * C), *wped = ref_to_double(wpe, (size_t)maxT * C);
    double *want = malloc(n * sizeof(double));
    EmbCtx ctx = {wted, wped, tok, r, B, T, C};
    b->embedding_forward(b, NULL, out, tok, wte, wpe, B, T, C);
    embedding_ref(want, &ctx);
    double e = ref_rel_err(out, want, n, 1e-30);
    ok(e <= FWD_TOL, "embedding forward wte[tok] + wpe[t] (B=%d T=%d C=%d): rel err %.2e", B, T, C, e);
    b->embedding_forward(b, NULL, out, tok, wte, NULL, B, T, C);
    ctx.wpe = NULL;
    embedding_ref(want, &ctx);
    ctx.wpe = wped;
    e = ref_rel_err(out, want, n, 1e-30);
    ok(e <= FWD_TOL, "embedding forward without wpe (rotary models): rel err %.2e", e);

    float *dwte = calloc((size_t)V * C, 4), *dwpe = calloc((size_t)maxT * C, 4);
    for (size_t i = (size_t)T * C; i < (size_t)maxT * C; i++) dwpe[i] = 7.0f;  // rows t >= T
    b->embedding_backward(b, NULL, dwte, dwpe, r, tok, B, T, C);
    double ew = ref_fd_check(wted, (size_t)V * C, dwte, embedding_loss, &ctx);
    double ep = ref_fd_check(wped, (size_t)T * C, dwpe, embedding_loss, &ctx);
    ok(ew <= FD_TOL && ep <= FD_TOL, "embedding backward vs finite differences: dwte %.2e, dwpe %.2e", ew, ep);
    int untouched = 1;
    for (size_t i = (size_t)T * C; i < (size_t)maxT * C; i++) untouched &= dwpe[i] == 7.0f;
    ok(untouched, "dwpe rows t >= T are left alone");
    float *once_te = malloc((size_t)V * C * 4), *once_pe = malloc((size_t)T * C * 4);
    memcpy(once_te, dwte, (size_t)V * C * 4);
    memcpy(once_pe, dwpe, (size_t)T * C * 4);
    b->embedding_backward(b, NULL, dwte, dwpe, r, tok, B, T, C);
    double a1 = doubled_err(dwte, once_te, (size_t)V * C), a2 = doubled_err(dwpe, once_pe, (size_t)T * C);
    ok(a1 <= ACC_TOL && a2 <= ACC_TOL, "embedding parameter gradients accumulate (+=): %.2e %.2e", a1, a2);

    Backend *h = ref_backend(MIST_BF16);
    ref_round_bf16(wte, (size_t)V * C);
    ref_round_bf16(wpe, (size_t)maxT * C);
    b->embedding_forward(b, NULL, out, tok, wte, wpe, B, T, C);
    void *te = ref_store(h, wte, (size_t)V * C), *pe = ref_store(h, wpe, (size_t)maxT * C);
    void *oh = ref_store(h, out, n);
    h->embedding_forward(h, NULL, oh, tok, te, pe, B, T, C);
    float *o16 = ref_loaded(h, oh, n);
    e = ref_rel_err_f(o16, out, n);
    ok(e <= BF16_TOL, "embedding bf16 vs fp32: rel err %.2e", e);
    free(o16); free(te); free(pe); free(oh); free(once_te); free(once_pe);
    free(wte); free(wpe); free(r); free(out); free(dwte); free(dwpe); free(wted); free(wped); free(want);
    h->destroy(h);
    b->destroy(b);
}

// ---------------------------------------------------------------- norms
typedef struct {
    NormOp kind; double *x, *res, *w, *bias; const float *r; int N, C; double eps;
} NormCtx;
static double norm_loss(void *p) {
    NormCtx *c = p;
    size_t n = (size_t)c->N * c->C;
    double *out = malloc(n * sizeof(double));
    ref_norm(c->kind, out, NULL, NULL, c->x, c->res, c->w, c->bias, c->N, c->C, c->eps);
    double s = ref_dot(out, c->r, n);
    free(out);
    return s;
}

static void test_norm(NormOp kind, int fused, int with_bias) {
    int N = 7, C = 72;
    size_t n = (size_t)N * C;
    float eps = 1e-5f;
    const char *name = kind == NORM_OP_LAYERNORM ? "layernorm" : "rmsnorm";
    Backend *b = ref_backend(MIST_F32);
    float *x = ref_random(n, -2, 2), *res = fused ? ref_random(n, -2, 2) : NULL;
    float *w = ref_random(C, 0.5f, 1.5f), *bias = with_bias ? ref_random(C, -0.5f, 0.5f) : NULL;
    float *r = ref_random(n, -1, 1), *out = malloc(n * 4), *res_out = malloc(n * 4);
    float mean[16], rstd[16];
    double *xd = ref_to_double(x, n), *resd = ref_to_double(res, n), *wd = ref_to_double(w, C);
    double *bd = ref_to_double(bias, C), *want = malloc(n * sizeof(double)), wmean[16], wrstd[16];
    int is_ln = kind == NORM_OP_LAYERNORM;
    b->norm_forward(b, NULL, kind, fused ? res_out : NULL, out, is_ln ? mean : NULL, rstd, x, res, w, bias,
                    N, C, eps);
    ref_norm(kind, want, wmean, wrstd, xd, resd, wd, bd, N, C, eps);
    double e = ref_rel_err(out, want, n, 1e-30), es = ref_rel_err(rstd, wrstd, N, 1e-30);
    if (is_ln) es = fmax(es, ref_rel_err(mean, wmean, N, 1e-30));
    int sum_exact = 1;
    for (size_t i = 0; fused && i < n; i++) sum_exact &= res_out[i] == x[i] + res[i];
    ok(e <= FWD_TOL && es <= FWD_TOL && sum_exact,
       "%s forward (%s, %s bias, N=%d C=%d): out %.2e, stats %.2e%s", name, fused ? "fused residual" : "plain",
       with_bias ? "with" : "no", N, C, e, es, fused ? ", res_out = inp + res_in" : "");

    const float *normed = fused ? res_out : x;  // the tensor that was normalised
    float *dx = calloc(n, 4), *dw = calloc(C, 4), *db = calloc(C, 4);
    b->norm_backward(b, NULL, kind, dx, dw, with_bias ? db : NULL, r, normed, w, is_ln ? mean : NULL, rstd, N, C);
    NormCtx ctx = {kind, xd, resd, wd, bd, r, N, C, eps};
    double ex = ref_fd_check(xd, n, dx, norm_loss, &ctx);
    double ew = ref_fd_check(wd, C, dw, norm_loss, &ctx);
    double eb = with_bias ? ref_fd_check(bd, C, db, norm_loss, &ctx) : 0.0;
    ok(ex <= FD_TOL && ew <= FD_TOL && eb <= FD_TOL,
       "%s backward vs finite differences: dinp %.2e, dw %.2e, dbias %.2e", name, ex, ew, eb);
    if (fused) {
        // the residual stream's gradient reaches res_in exactly as it reaches inp
        double er = ref_fd_check(resd, n, dx, norm_loss, &ctx);
        ok(er <= FD_TOL, "%s fused: the same dinp is the gradient of res_in: rel err %.2e", name, er);
    }
    float *dx1 = malloc(n * 4), *dw1 = malloc(C * 4), *db1 = malloc(C * 4);
    memcpy(dx1, dx, n * 4);
    memcpy(dw1, dw, C * 4);
    memcpy(db1, db, C * 4);
    b->norm_backward(b, NULL, kind, dx, dw, with_bias ? db : NULL, r, normed, w, is_ln ? mean : NULL, rstd, N, C);
    double a = fmax(doubled_err(dx, dx1, n), doubled_err(dw, dw1, C));
    if (with_bias) a = fmax(a, doubled_err(db, db1, C));
    ok(a <= ACC_TOL, "%s backward accumulates into dinp, dw, dbias (+=): %.2e", name, a);

    // bf16 storage on the same (rounded) inputs
    Backend *h = ref_backend(MIST_BF16);
    ref_round_bf16(x, n);
    if (res) ref_round_bf16(res, n);
    ref_round_bf16(w, C);
    if (bias) ref_round_bf16(bias, C);
    ref_round_bf16(r, n);
    b->norm_forward(b, NULL, kind, fused ? res_out : NULL, out, is_ln ? mean : NULL, rstd, x, res, w, bias,
                    N, C, eps);
    void *xh = ref_store(h, x, n), *rh = ref_store(h, res, n), *wh = ref_store(h, w, C);
    void *bh = ref_store(h, bias, C), *oh = ref_store(h, out, n), *roh = ref_store(h, out, n);
    void *douth = ref_store(h, r, n);
    float mean16[16], rstd16[16];
    h->norm_forward(h, NULL, kind, fused ? roh : NULL, oh, is_ln ? mean16 : NULL, rstd16, xh, rh, wh, bh,
                    N, C, eps);
    float *o16 = ref_loaded(h, oh, n);
    double ef = ref_rel_err_f(o16, out, n);
    memset(dx, 0, n * 4);
    memset(dw, 0, C * 4);
    b->norm_backward(b, NULL, kind, dx, dw, NULL, r, fused ? res_out : x, w, is_ln ? mean : NULL, rstd, N, C);
    void *dxh = calloc(n, 2), *dwh = calloc(C, 2);  // bf16 zeros are all-zero bits
    h->norm_backward(h, NULL, kind, dxh, dwh, NULL, douth, fused ? roh : xh, wh, is_ln ? mean16 : NULL,
                     rstd16, N, C);
    float *dx16 = ref_loaded(h, dxh, n), *dw16 = ref_loaded(h, dwh, C);
    double ebx = ref_rel_err_f(dx16, dx, n), ebw = ref_rel_err_f(dw16, dw, C);
    ok(ef <= BF16_TOL && ebx <= 2.5 * BF16_TOL && ebw <= BF16_TOL,
       "%s bf16 vs fp32: out %.2e, dinp %.2e, dw %.2e", name, ef, ebx, ebw);
    free(o16); free(dx16); free(dw16);
    free(xh); free(rh); free(wh); free(bh); free(oh); free(roh); free(douth); free(dxh); free(dwh);
    free(dx1); free(dw1); free(db1); free(dx); free(dw); free(db);
    free(x); free(res); free(w); free(bias); free(r); free(out); free(res_out);
    free(xd); free(resd); free(wd); free(bd); free(want);
    h->destroy(h);
    b->destroy(b);
}

// ---------------------------------------------------------------- GEMM
// C (M,N) = op(A) @ op(B) + beta C in double, op per the transpose flags
static void gemm_ref(double *C, int tA, int tB, int M, int N, int K, const float *A, const float *B,
                     double beta, const float *C0) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = beta * C0[(size_t)i * N + j];
            for (int k = 0; k < K; k++)
                s += (double)(tA ? A[(size_t)k * M + i] : A[(size_t)i * K + k]) *
                     (tB ? B[(size_t)j * K + k] : B[(size_t)k * N + j]);
            C[(size_t)i * N + j] = s;
        }
}

static void test_gemm(void) {
    int M = 70, N = 300, K = 260;  // past GEMM_MB = 64, GEMM_NB = 256, GEMM_KB = 256
    float *A = ref_random((size_t)M * K, -1, 1), *B = ref_random((size_t)K * N, -1, 1);
    float *C0 = ref_random((size_t)M * N, -1, 1), *C = malloc((size_t)M * N * 4);
    double *want = malloc((size_t)M * N * sizeof(double));
    double worst_blocked = 0.0, worst_blas = 0.0;
    Backend *b = ref_backend(MIST_F32);  // owns the blocked loop's packing panels
    for (int blas = 0; blas < 2; blas++) {
        int previous = cpu_gemm_use_blas(blas);
        for (int tA = 0; tA < 2; tA++)
            for (int tB = 0; tB < 2; tB++)
                for (int beta = 0; beta < 2; beta++) {
                    memcpy(C, C0, (size_t)M * N * 4);
                    cpu_gemm(b, tA, tB, M, N, K, A, tA ? M : K, B, tB ? K : N, (float)beta, C, N);
                    gemm_ref(want, tA, tB, M, N, K, A, B, beta, C0);
                    double e = ref_rel_err(C, want, (size_t)M * N, 1e-30);
                    if (blas) worst_blas = fmax(worst_blas, e);
                    else worst_blocked = fmax(worst_blocked, e);
                }
        cpu_gemm_use_blas(previous);
    }
    ok(worst_blocked <= FWD_TOL, "blocked GEMM, all transposes, beta 0/1 (M=%d N=%d K=%d): rel err %.2e", M, N,
       K, worst_blocked);
#ifdef HAVE_OPENBLAS
    ok(worst_blas <= FWD_TOL, "OpenBLAS GEMM through cpu_gemm, same cases: rel err %.2e", worst_blas);
#else
    tap_skip("built without OpenBLAS (cpu_gemm runs the blocked loop, checked above)");
#endif
    b->destroy(b);
    free(A); free(B); free(C0); free(C); free(want);
}

// ---------------------------------------------------------------- matmul
typedef struct { double *inp, *w, *bias; const float *r; int N, C, OC, gelu; } MatmulCtx;
static double matmul_loss(void *p) {
    MatmulCtx *c = p;
    size_t n = (size_t)c->N * c->OC;
    double *out = malloc(n * sizeof(double));
    ref_matmul(out, c->inp, c->w, c->bias, c->N, c->C, c->OC, c->gelu);
    double s = ref_dot(out, c->r, n);
    free(out);
    return s;
}

static void test_matmul(int with_bias, int gelu) {
    int N = 9, C = 72, OC = 37;
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    Backend *b = ref_backend(MIST_F32);
    float *inp = ref_random(ni, -1, 1), *w = ref_random(nw, -0.3f, 0.3f);
    float *bias = with_bias ? ref_random(OC, -1, 1) : NULL, *r = ref_random(no, -1, 1);
    float *out = malloc(no * 4), *pre = gelu ? malloc(no * 4) : NULL;
    double *id = ref_to_double(inp, ni), *wdd = ref_to_double(w, nw), *bd = ref_to_double(bias, OC);
    double *want = malloc(no * sizeof(double)), *want_pre = malloc(no * sizeof(double));
    const char *what = gelu ? "matmul+gelu" : "matmul";
    b->matmul_forward(b, NULL, out, pre, inp, w, bias, N, C, OC);
    ref_matmul(want, id, wdd, bd, N, C, OC, gelu);
    ref_matmul(want_pre, id, wdd, bd, N, C, OC, 0);
    double e = ref_rel_err(out, want, no, 1e-30);
    if (gelu) e = fmax(e, ref_rel_err(pre, want_pre, no, 1e-30));
    ok(e <= FWD_TOL, "%s forward (%s bias, N=%d C=%d OC=%d): rel err %.2e", what, with_bias ? "with" : "no",
       N, C, OC, e);

    float *dinp = malloc(ni * 4), *dw = calloc(nw, 4), *db = calloc(OC, 4), *dout = malloc(no * 4);
    for (size_t i = 0; i < ni; i++) dinp[i] = NAN;  // overwritten, never read
    memcpy(dout, r, no * 4);
    b->matmul_backward(b, NULL, dinp, dw, with_bias ? db : NULL, dout, inp, w, pre, N, C, OC);
    MatmulCtx ctx = {id, wdd, bd, r, N, C, OC, gelu};
    double ex = ref_fd_check(id, ni, dinp, matmul_loss, &ctx);
    double ew = ref_fd_check(wdd, nw, dw, matmul_loss, &ctx);
    double eb = with_bias ? ref_fd_check(bd, OC, db, matmul_loss, &ctx) : 0.0;
    ok(ex <= FD_TOL && ew <= FD_TOL && eb <= FD_TOL,
       "%s backward vs finite differences: dinp %.2e, dweight %.2e, dbias %.2e", what, ex, ew, eb);
    if (gelu) {
        // dout became r * gelu'(pre): compare with a central difference of the reference GELU
        double err = 0.0, scale = 1e-30;
        for (size_t i = 0; i < no; i++) {
            double g = (ref_gelu(want_pre[i] + FD_STEP) - ref_gelu(want_pre[i] - FD_STEP)) / (2 * FD_STEP);
            err = fmax(err, fabs(dout[i] - r[i] * g));
            scale = fmax(scale, fabs(r[i] * g));
        }
        ok(err / scale <= FD_TOL, "matmul+gelu backward turns dout into the pre-activation gradient: %.2e",
           err / scale);
    }
    float *dinp1 = malloc(ni * 4), *dw1 = malloc(nw * 4), *db1 = malloc(OC * 4);
    memcpy(dinp1, dinp, ni * 4);
    memcpy(dw1, dw, nw * 4);
    memcpy(db1, db, OC * 4);
    memcpy(dout, r, no * 4);
    b->matmul_backward(b, NULL, dinp, dw, with_bias ? db : NULL, dout, inp, w, pre, N, C, OC);
    double a = doubled_err(dw, dw1, nw);
    if (with_bias) a = fmax(a, doubled_err(db, db1, OC));
    ok(a <= ACC_TOL && memcmp(dinp, dinp1, ni * 4) == 0,
       "%s backward: dweight/dbias accumulate (+=, %.2e), dinp is overwritten (same bits)", what, a);
    memcpy(dout, r, no * 4);
    b->matmul_backward(b, NULL, NULL, dw, NULL, dout, inp, w, pre, N, C, OC);
    a = multiple_err(dw, dw1, 3.0, nw);
    ok(a <= ACC_TOL, "%s backward with dinp = NULL, dbias = NULL: dweight gets a third share (%.2e)", what, a);

    Backend *h = ref_backend(MIST_BF16);
    ref_round_bf16(inp, ni);
    ref_round_bf16(w, nw);
    if (bias) ref_round_bf16(bias, OC);
    ref_round_bf16(r, no);
    b->matmul_forward(b, NULL, out, pre, inp, w, bias, N, C, OC);
    memcpy(dout, r, no * 4);
    memset(dw, 0, nw * 4);
    b->matmul_backward(b, NULL, dinp, dw, NULL, dout, inp, w, pre, N, C, OC);
    void *ih = ref_store(h, inp, ni), *wh = ref_store(h, w, nw), *bh = ref_store(h, bias, OC);
    void *oh = ref_store(h, out, no), *ph = gelu ? ref_store(h, out, no) : NULL, *douth = ref_store(h, r, no);
    void *dih = ref_store(h, inp, ni);
    float *zero_w = calloc(nw, 4);
    void *dwh = ref_store(h, zero_w, nw);
    h->matmul_forward(h, NULL, oh, ph, ih, wh, bh, N, C, OC);
    h->matmul_backward(h, NULL, dih, dwh, NULL, douth, ih, wh, ph, N, C, OC);
    float *o16 = ref_loaded(h, oh, no), *di16 = ref_loaded(h, dih, ni), *dw16 = ref_loaded(h, dwh, nw);
    double e1 = ref_rel_err_f(o16, out, no), e2 = ref_rel_err_f(di16, dinp, ni), e3 = ref_rel_err_f(dw16, dw, nw);
    ok(e1 <= BF16_TOL && e2 <= BF16_TOL && e3 <= BF16_TOL, "%s bf16 vs fp32: out %.2e, dinp %.2e, dweight %.2e",
       what, e1, e2, e3);
    free(o16); free(di16); free(dw16); free(zero_w);
    free(ih); free(wh); free(bh); free(oh); free(ph); free(douth); free(dih); free(dwh);
    free(dinp1); free(dw1); free(db1);
    free(inp); free(w); free(bias); free(r); free(out); free(pre); free(dinp); free(dw); free(db); free(dout);
    free(id); free(wdd); free(bd); free(want); free(want_pre);
    h->destroy(h);
    b->destroy(b);
}

// ---------------------------------------------------------------- determinism
typedef struct { float *dinp, *dw, *db, *nx, *nw, *nb, *dwte; } LayerGrads;

// matmul (blocked GEMM), norm and embedding backward on fixed inputs
static void run_layers(Backend *b, LayerGrads *g, const float *inp, const float *w, const float *dout_in,
                       float *dout, int N, int C, int OC, const int32_t *tok, int V) {
    memset(g->dw, 0, (size_t)OC * C * 4);
    memset(g->db, 0, (size_t)OC * 4);
    memcpy(dout, dout_in, (size_t)N * OC * 4);
    b->matmul_backward(b, NULL, g->dinp, g->dw, g->db, dout, inp, w, NULL, N, C, OC);
    float *mean = malloc(N * 4), *rstd = malloc(N * 4), *out = malloc((size_t)N * C * 4);
    b->norm_forward(b, NULL, NORM_OP_LAYERNORM, NULL, out, mean, rstd, inp, NULL, g->nb, g->nb, N, C, 1e-5f);
    memset(g->nx, 0, (size_t)N * C * 4);
    memset(g->nw, 0, (size_t)C * 4);
    b->norm_backward(b, NULL, NORM_OP_LAYERNORM, g->nx, g->nw, NULL, out, inp, g->nb, mean, rstd, N, C);
    memset(g->dwte, 0, (size_t)V * C * 4);
    b->embedding_backward(b, NULL, g->dwte, NULL, inp, tok, 1, N, C);
    free(mean); free(rstd); free(out);
}

static int same_grads(const LayerGrads *a, const LayerGrads *b, int N, int C, int OC, int V) {
    return memcmp(a->dinp, b->dinp, (size_t)N * C * 4) == 0 && memcmp(a->dw, b->dw, (size_t)OC * C * 4) == 0 &&
           memcmp(a->db, b->db, (size_t)OC * 4) == 0 && memcmp(a->nx, b->nx, (size_t)N * C * 4) == 0 &&
           memcmp(a->nw, b->nw, (size_t)C * 4) == 0 && memcmp(a->dwte, b->dwte, (size_t)V * C * 4) == 0;
}

static void test_determinism(void) {
    int N = 150, C = 96, OC = 300, V = 40;
    Backend *b = ref_backend(MIST_F32);
    float *inp = ref_random((size_t)N * C, -1, 1), *w = ref_random((size_t)OC * C, -1, 1);
    float *dout_in = ref_random((size_t)N * OC, -1, 1), *dout = malloc((size_t)N * OC * 4);
    float *normw = ref_random(C, 0.5f, 1.5f);
    int32_t *tok = malloc(N * sizeof(int32_t));
    for (int i = 0; i < N; i++) tok[i] = ref_randint(V);
    LayerGrads g[2];
    for (int r = 0; r < 2; r++) {
        g[r].dinp = malloc((size_t)N * C * 4);
        g[r].dw = malloc((size_t)OC * C * 4);
        g[r].db = malloc((size_t)OC * 4);
        g[r].nx = malloc((size_t)N * C * 4);
        g[r].nw = malloc((size_t)C * 4);
        g[r].nb = normw;
        g[r].dwte = malloc((size_t)V * C * 4);
    }
    for (int blas = 0; blas < 2; blas++) {
#ifndef HAVE_OPENBLAS
        if (blas) break;
#endif
        const char *path = blas ? "OpenBLAS" : "blocked";
        int previous = cpu_gemm_use_blas(blas);
        run_layers(b, &g[0], inp, w, dout_in, dout, N, C, OC, tok, V);
        run_layers(b, &g[1], inp, w, dout_in, dout, N, C, OC, tok, V);
        ok(same_grads(&g[0], &g[1], N, C, OC, V), "matmul (%s), norm, embedding backward: same bits twice", path);
#ifdef _OPENMP
        int saved = omp_get_max_threads();
        omp_set_num_threads(1);
        run_layers(b, &g[0], inp, w, dout_in, dout, N, C, OC, tok, V);
        omp_set_num_threads(2);
#ifdef HAVE_OPENBLAS
        openblas_set_num_threads(2);  // the backend must not let OpenBLAS split a GEMM its own way
#endif
        run_layers(b, &g[1], inp, w, dout_in, dout, N, C, OC, tok, V);
        omp_set_num_threads(saved);
        ok(same_grads(&g[0], &g[1], N, C, OC, V),
           "matmul (%s), norm, embedding backward: same bits with 1 and 2 threads", path);
#else
        tap_skip("built without OpenMP: thread-count independence is trivial");
#endif
        cpu_gemm_use_blas(previous);
    }
    for (int r = 0; r < 2; r++) {
        free(g[r].dinp); free(g[r].dw); free(g[r].db); free(g[r].nx); free(g[r].nw); free(g[r].dwte);
    }
    free(inp); free(w); free(dout_in); free(dout); free(normw); free(tok);
    b->destroy(b);
}

// matmul_dinp_gelu: (dout @ W) * gelu'(pre), the MLP projection's input
// gradient carried through the GELU. Against a double reference with a
// central difference of the GELU, and bitwise against its definition in two
// ops (matmul_backward's dinp, then gelu_backward on it) in fp32 and bf16:
// the runtime swapped those two ops for this one, and CPU training must not
// change by a bit.
static void test_matmul_dinp_gelu(void) {
    int N = 9, C = 24, OC = 10;
    size_t nd = (size_t)N * OC, ni = (size_t)N * C, nw = (size_t)OC * C;
    float *dout = ref_random(nd, -1, 1), *w = ref_random(nw, -0.5f, 0.5f), *pre = ref_random(ni, -3, 3);
    float *got = malloc(ni * 4);
    Backend *b = ref_backend(MIST_F32);
    for (size_t i = 0; i < ni; i++) got[i] = NAN;
    b->matmul_dinp_gelu(b, NULL, got, dout, w, pre, N, C, OC);
    double err = 0.0, scale = 1e-30;
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) {
            double acc = 0.0, x = pre[(size_t)i * C + c];
            for (int o = 0; o < OC; o++) acc += (double)dout[(size_t)i * OC + o] * w[(size_t)o * C + c];
            double want = acc * (ref_gelu(x + FD_STEP) - ref_gelu(x - FD_STEP)) / (2 * FD_STEP);
            err = fmax(err, fabs(got[(size_t)i * C + c] - want));
            scale = fmax(scale, fabs(want));
        }
    ok(err / scale <= FD_TOL, "matmul_dinp_gelu (N=%d C=%d OC=%d) = (dout W) gelu'(pre): rel err %.2e", N, C, OC,
       err / scale);
    for (int bf = 0; bf < 2; bf++) {
        Backend *h = bf ? ref_backend(MIST_BF16) : b;
        void *dh = ref_store(h, dout, nd), *wh = ref_store(h, w, nw), *ph = ref_store(h, pre, ni);
        void *fused = ref_store(h, pre, ni), *twostep = ref_store(h, pre, ni);
        h->matmul_dinp_gelu(h, NULL, fused, dh, wh, ph, N, C, OC);
        h->matmul_backward(h, NULL, twostep, NULL, NULL, dh, NULL, wh, NULL, N, C, OC);
        h->gelu_backward(h, NULL, twostep, ph, twostep, ni);
        ok(memcmp(fused, twostep, ni * mist_dtype_size(h->dtype)) == 0,
           "matmul_dinp_gelu %s: the same bits as matmul_backward's dinp then gelu_backward", bf ? "bf16" : "fp32");
        free(dh); free(wh); free(ph); free(fused); free(twostep);
    }
    free(dout); free(w); free(pre); free(got);
}

int main(void) {
    ref_seed_from_env_or_clock();
    test_embedding();
    for (int kind = 0; kind < 2; kind++)
        for (int fused = 0; fused < 2; fused++) test_norm((NormOp)kind, fused, kind == NORM_OP_LAYERNORM && fused);
    test_norm(NORM_OP_LAYERNORM, 0, 1);
    test_gemm();
    test_matmul(1, 0);
    test_matmul(0, 0);
    test_matmul(1, 1);
    test_matmul_dinp_gelu();
    int previous = cpu_gemm_use_blas(0);
    diag("matmul again through the blocked GEMM");
    test_matmul(1, 1);
    cpu_gemm_use_blas(previous);
    test_determinism();
    return tap_done();
}
