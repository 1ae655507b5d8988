// CPU backend, part 1: memory, streams and events, the pointwise ops (GELU,
// SwiGLU, residual), cross-entropy, AdamW, the squared gradient norm, cast and
// scale. Fresh random inputs each run (the seed is printed).
//
// Tolerances (errors are max |got - want| relative to the tensor's max |want|):
//   fp32 forward vs the double reference      <= 1e-5
//   fp32 backward vs central differences      <= 1e-3 (fp32 gradients vs a double FD)
//   bf16 storage vs the fp32 run              <= 2e-2 (8-bit mantissa, ~4e-3 per rounding)
//   AdamW vs a double scalar reference         |err| <= 1e-6 + 1e-5 |want| per weight, 5 steps
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L  // nanosleep, getpid
#endif
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "tests/kernel_ref.h"
#include "kernels/cpu/cpu_ops.h"  // cpu_gemm_use_blas: the blocked GEMM packs panels in the workspace

static const double FWD_TOL = 1e-5, FD_TOL = 1e-3, BF16_TOL = 2e-2;

// ---------------------------------------------------------------- memory, order
static void test_memory_and_events(void) {
    char err[256] = "";
    ok(backend_cpu_create(MIST_F16, err, sizeof err) == NULL && strstr(err, "bf16") != NULL,
       "f16 storage is refused with a reason naming the allowed dtypes (%s)", err);
    Backend *b = ref_backend(MIST_F32);
    ok(strcmp(b->name, "cpu") == 0 && b->dtype == MIST_F32, "backend name cpu, dtype f32");
    int all = 1;
    for (int op = 0; op < OP_COUNT; op++) all &= b->supports_op(b, &(BackendOpShape){.op = (BackendOp)op}) != 0;
    ok(all, "supports_op is true for every op");
    ok(b->supports_op(b, &(BackendOpShape){.op = OP_ATTENTION, .NH = 12, .NKV = 4, .HS = 96}) &&
           !b->supports_op(b, &(BackendOpShape){.op = OP_ROTARY, .HS = 63}) &&
           !b->supports_op(b, &(BackendOpShape){.op = OP_ATTENTION, .NH = 12, .NKV = 5, .HS = 64}) &&
           !b->supports_op(b, &(BackendOpShape){.op = OP_COUNT}) && b->device_memory_is_host,
       "supports_op with shapes: attention at any head size, not where undefined (odd rotary head size, NKV not "
       "dividing NH); device memory is host memory");

    size_t n = 1000;
    float *dev = b->alloc_device(b, n * sizeof(float)), *pin = b->alloc_pinned(b, n * sizeof(float));
    float *host = ref_random(n, -1, 1), *back = calloc(n, sizeof(float));
    ok(dev && pin && (uintptr_t)dev % 64 == 0 && (uintptr_t)pin % 64 == 0,
       "alloc_device / alloc_pinned return 64-byte aligned memory");
    BackendStream *s = b->stream_create(b);
    b->copy_h2d(b, dev, host, n * sizeof(float), s);
    b->copy_d2d(b, pin, dev, n * sizeof(float), s);
    b->memset_device(b, dev, 0, n * sizeof(float), s);
    b->copy_d2h(b, back, pin, n * sizeof(float), s);
    b->stream_synchronize(b, s);
    int zero = 1;
    for (size_t i = 0; i < n; i++) zero &= dev[i] == 0.0f;
    ok(memcmp(back, host, n * sizeof(float)) == 0 && zero, "h2d, d2d, d2h round trip and memset");

    BackendEvent *e0 = b->event_create(b), *e1 = b->event_create(b);
    ok(b->event_elapsed_ms(b, e0, e1) == 0.0f, "elapsed time of unrecorded events is 0");
    b->event_record(b, e0, s);
    struct timespec nap = {0, 30 * 1000 * 1000};
    nanosleep(&nap, NULL);
    b->event_record(b, e1, s);
    b->stream_wait_event(b, NULL, e1);
    b->event_synchronize(b, e1);
    b->synchronize(b);
    float ms = b->event_elapsed_ms(b, e0, e1);
    ok(ms >= 29.0f && ms < 5000.0f, "event_elapsed_ms measures a 30 ms sleep: %.2f ms", ms);
    ok(b->reserved_bytes(b) == 0, "a fresh cpu backend holds no workspace outside the arenas yet");
    b->event_destroy(b, e0);
    b->event_destroy(b, e1);
    b->stream_destroy(b, s);
    b->free_device(b, dev);
    b->free_pinned(b, pin);
    free(host);
    free(back);
    b->destroy(b);
}

// ---------------------------------------------------------------- GELU

static void test_gelu(void) {
    size_t n = 1001;
    Backend *b = ref_backend(MIST_F32);
    float *x = ref_random(n, -4, 4), *r = ref_random(n, -1, 1);
    float *out = malloc(n * 4), *dx = malloc(n * 4);
    double *xd = ref_to_double(x, n), *want = malloc(n * sizeof(double));
    b->gelu_forward(b, NULL, out, x, n);
    for (size_t i = 0; i < n; i++) want[i] = ref_gelu(xd[i]);
    double e = ref_rel_err(out, want, n, 1e-30);
    ok(e <= FWD_TOL, "gelu forward vs reference: rel err %.2e", e);
    for (size_t i = 0; i < n; i++) dx[i] = NAN;
    b->gelu_backward(b, NULL, dx, x, r, n);
    GeluCtx ctx = {xd, r, n};
    e = ref_fd_check(xd, n, dx, ref_gelu_loss, &ctx);
    ok(e <= FD_TOL, "gelu backward vs finite differences: rel err %.2e", e);
    // dinp may alias dout
    float *inplace = malloc(n * 4);
    memcpy(inplace, r, n * 4);
    b->gelu_backward(b, NULL, inplace, x, inplace, n);
    ok(memcmp(inplace, dx, n * 4) == 0, "gelu backward with dinp aliasing dout gives the same bits");

    Backend *h = ref_backend(MIST_BF16);
    ref_round_bf16(x, n);
    b->gelu_forward(b, NULL, out, x, n);
    void *xh = ref_store(h, x, n), *oh = ref_store(h, x, n);
    h->gelu_forward(h, NULL, oh, xh, n);
    float *o16 = ref_loaded(h, oh, n);
    e = ref_rel_err_f(o16, out, n);
    ok(e <= BF16_TOL, "gelu bf16 vs fp32: rel err %.2e", e);
    free(o16); free(xh); free(oh); free(inplace);
    free(x); free(r); free(out); free(dx); free(xd); free(want);
    h->destroy(h);
    b->destroy(b);
}

// ---------------------------------------------------------------- SwiGLU
typedef struct { double *x; const float *r; int N, F; } SwigluCtx;
static void swiglu_ref(double *out, const double *x, int N, int F) {
    for (int i = 0; i < N; i++)
        for (int f = 0; f < F; f++)
            out[(size_t)i * F + f] = ref_silu(x[(size_t)i * 2 * F + f]) * x[(size_t)i * 2 * F + F + f];
}
static double swiglu_loss(void *p) {
    SwigluCtx *c = p;
    double *out = malloc((size_t)c->N * c->F * sizeof(double));
    swiglu_ref(out, c->x, c->N, c->F);
    double s = ref_dot(out, c->r, (size_t)c->N * c->F);
    free(out);
    return s;
}

static void test_swiglu(void) {
    int N = 7, F = 13;
    size_t nin = (size_t)N * 2 * F, nout = (size_t)N * F;
    Backend *b = ref_backend(MIST_F32);
    float *x = ref_random(nin, -3, 3), *r = ref_random(nout, -1, 1);
    float *out = malloc(nout * 4), *dx = malloc(nin * 4);
    double *xd = ref_to_double(x, nin), *want = malloc(nout * sizeof(double));
    b->swiglu_forward(b, NULL, out, x, N, F);
    swiglu_ref(want, xd, N, F);
    double e = ref_rel_err(out, want, nout, 1e-30);
    ok(e <= FWD_TOL, "swiglu forward vs reference (N=%d F=%d): rel err %.2e", N, F, e);
    for (size_t i = 0; i < nin; i++) dx[i] = NAN;  // overwrite semantics: old contents never read
    b->swiglu_backward(b, NULL, dx, r, x, N, F);
    SwigluCtx ctx = {xd, r, N, F};
    e = ref_fd_check(xd, nin, dx, swiglu_loss, &ctx);
    ok(e <= FD_TOL, "swiglu backward (gate and up) vs finite differences: rel err %.2e", e);

    Backend *h = ref_backend(MIST_BF16);
    ref_round_bf16(x, nin);
    b->swiglu_forward(b, NULL, out, x, N, F);
    void *xh = ref_store(h, x, nin), *oh = ref_store(h, out, nout);
    h->swiglu_forward(h, NULL, oh, xh, N, F);
    float *o16 = ref_loaded(h, oh, nout);
    e = ref_rel_err_f(o16, out, nout);
    ok(e <= BF16_TOL, "swiglu bf16 vs fp32: rel err %.2e", e);
    free(o16); free(xh); free(oh);
    free(x); free(r); free(out); free(dx); free(xd); free(want);
    h->destroy(h);
    b->destroy(b);
}

// ---------------------------------------------------------------- residual, cast, scale
static void test_residual_cast_scale(void) {
    size_t n = 777;
    Backend *b = ref_backend(MIST_F32), *h = ref_backend(MIST_BF16);
    float *a = ref_random(n, -2, 2), *c = ref_random(n, -2, 2), *out = malloc(n * 4);
    b->residual_forward(b, NULL, out, a, c, n);
    int exact = 1;
    for (size_t i = 0; i < n; i++) exact &= out[i] == a[i] + c[i];
    b->residual_forward(b, NULL, a, a, c, n);  // out aliasing a
    ok(exact && memcmp(a, out, n * 4) == 0, "residual out = a + c (exact in fp32, also in place)");

    uint16_t *half = malloc(n * 2);
    float *round = malloc(n * 4);
    b->cast(b, NULL, half, MIST_BF16, c, MIST_F32, n);
    b->cast(b, NULL, round, MIST_F32, half, MIST_BF16, n);
    int rne = 1, close = 1;
    for (size_t i = 0; i < n; i++) {
        // round to nearest: no other bf16 value lies closer to c[i]
        uint32_t u;
        memcpy(&u, &c[i], 4);
        float lo, hi;
        uint32_t t = u & 0xffff0000u, t2 = t + 0x10000u;
        memcpy(&lo, &t, 4);
        memcpy(&hi, &t2, 4);
        double best = fmin(fabs((double)lo - c[i]), fabs((double)hi - c[i]));
        rne &= fabs((double)round[i] - c[i]) <= best;
        close &= fabs((double)round[i] - c[i]) <= fabs(c[i]) * (1.0 / 256);
    }
    ok(rne && close, "cast f32 -> bf16 -> f32 rounds to the nearest bf16 (|err| <= 2^-8 |x|)");
    float *same = malloc(n * 4);
    b->cast(b, NULL, same, MIST_F32, c, MIST_F32, n);
    ok(memcmp(same, c, n * 4) == 0, "cast f32 -> f32 is a copy");

    b->scale(b, NULL, same, 0.37f, n);
    exact = 1;
    for (size_t i = 0; i < n; i++) exact &= same[i] == c[i] * 0.37f;
    ok(exact, "scale multiplies in place (fp32)");
    void *sh = ref_store(h, c, n);
    h->scale(h, NULL, sh, 0.5f, n);  // a power of two: exact in bf16 too
    float *sf = ref_loaded(h, sh, n);
    exact = 1;
    for (size_t i = 0; i < n; i++) exact &= sf[i] == round[i] * 0.5f;
    ok(exact, "scale by 0.5 on bf16 storage is exact");
    free(sf); free(sh); free(same); free(half); free(round);
    free(a); free(c); free(out);
    h->destroy(h);
    b->destroy(b);
}

// ---------------------------------------------------------------- cross-entropy
typedef struct { double *z; const int32_t *tg; int N, V, Vp; double dloss; } CeCtx;
static double ce_loss(void *p) {
    CeCtx *c = p;
    double *l = malloc((size_t)c->N * sizeof(double)), s = 0.0;
    ref_crossentropy(l, c->z, c->tg, c->N, c->V, c->Vp);
    for (int i = 0; i < c->N; i++) s += c->dloss * l[i];
    free(l);
    return s;
}

static void test_crossentropy(void) {
    int N = 9, V = 19, Vp = 24;
    size_t n = (size_t)N * Vp;
    float dloss = 1.0f / N;
    Backend *b = ref_backend(MIST_F32);
    float *z = ref_random(n, -5, 5), *grad = malloc(n * 4), losses[16];
    int32_t tg[16];
    for (int i = 0; i < N; i++) tg[i] = ref_randint(V);
    tg[3] = -1;      // an ignored position
    tg[4] = V - 1;   // the last real column
    for (int i = 0; i < N; i++)
        for (int v = V; v < Vp; v++) z[(size_t)i * Vp + v] = 1e4f;  // padding must not count
    double *zd = ref_to_double(z, n), want[16];
    memcpy(grad, z, n * 4);
    b->crossentropy_forward_backward(b, NULL, losses, grad, tg, N, V, Vp, 0.0f);
    ok(memcmp(grad, z, n * 4) == 0, "dloss = 0 leaves the logits untouched");
    ref_crossentropy(want, zd, tg, N, V, Vp);
    double e = ref_rel_err(losses, want, N, 1e-30);
    ok(e <= FWD_TOL, "cross-entropy losses vs reference (V=%d, Vp=%d): rel err %.2e", V, Vp, e);
    ok(losses[3] == 0.0f, "target < 0: loss 0");

    b->crossentropy_forward_backward(b, NULL, losses, grad, tg, N, V, Vp, dloss);
    int pad_zero = 1, ignored_zero = 1;
    for (int i = 0; i < N; i++)
        for (int v = V; v < Vp; v++) pad_zero &= grad[(size_t)i * Vp + v] == 0.0f;
    for (int v = 0; v < Vp; v++) ignored_zero &= grad[(size_t)3 * Vp + v] == 0.0f;
    ok(pad_zero && ignored_zero, "gradient is 0 in padding columns and on ignored rows");
    CeCtx ctx = {zd, tg, N, V, Vp, dloss};
    // finite differences over the real columns only (padding values are huge on purpose)
    double err = 0.0, scale = 1e-6;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(grad[i]));
    for (int i = 0; i < N; i++)
        for (int v = 0; v < V; v += 3) {
            size_t k = (size_t)i * Vp + v;
            double saved = zd[k];
            zd[k] = saved + FD_STEP;
            double up = ce_loss(&ctx);
            zd[k] = saved - FD_STEP;
            double down = ce_loss(&ctx);
            zd[k] = saved;
            err = fmax(err, fabs(grad[k] - (up - down) / (2 * FD_STEP)));
        }
    ok(err / scale <= FD_TOL, "cross-entropy gradient vs finite differences: rel err %.2e", err / scale);

    Backend *h = ref_backend(MIST_BF16);
    ref_round_bf16(z, n);
    float l32[16], l16[16];
    memcpy(grad, z, n * 4);
    b->crossentropy_forward_backward(b, NULL, l32, grad, tg, N, V, Vp, dloss);
    void *zh = ref_store(h, z, n);
    h->crossentropy_forward_backward(h, NULL, l16, zh, tg, N, V, Vp, dloss);
    float *g16 = ref_loaded(h, zh, n);
    double el = ref_rel_err_f(l16, l32, N), eg = ref_rel_err_f(g16, grad, n);
    ok(el <= 1e-5 && eg <= BF16_TOL,
       "cross-entropy bf16 vs fp32 on the same logits: loss %.2e (fp32 math), grad %.2e", el, eg);
    free(g16); free(zh);
    free(z); free(grad); free(zd);
    h->destroy(h);
    b->destroy(b);
}

// ---------------------------------------------------------------- AdamW
static void test_adamw(MistDtype dt) {
    size_t n = 1003;
    int steps = 5;
    float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gscale = 0.7f;
    Backend *b = ref_backend(dt);
    float *w0 = ref_random(n, -1, 1);
    if (dt == MIST_BF16) ref_round_bf16(w0, n);
    float *master = malloc(n * 4), *m = calloc(n, 4), *v = calloc(n, 4);
    memcpy(master, w0, n * 4);
    void *param = ref_store(b, w0, n);
    double *rw = ref_to_double(w0, n), *rm = calloc(n, sizeof(double)), *rv = calloc(n, sizeof(double));
    for (int t = 1; t <= steps; t++) {
        float *g = ref_random(n, -2, 2);
        if (dt == MIST_BF16) ref_round_bf16(g, n);
        void *gs = ref_store(b, g, n);
        b->adamw_update(b, NULL, param, dt == MIST_BF16 ? master : NULL, gs, m, v, n, lr, b1, b2, eps,
                        wd, gscale, t);
        for (size_t i = 0; i < n; i++) {
            double gi = (double)g[i] * gscale;
            rm[i] = b1 * rm[i] + (1 - (double)b1) * gi;
            rv[i] = b2 * rv[i] + (1 - (double)b2) * gi * gi;
            double mh = rm[i] / (1 - pow(b1, t)), vh = rv[i] / (1 - pow(b2, t));
            rw[i] -= lr * (mh / (sqrt(vh) + eps) + wd * rw[i]);
        }
        free(gs);
        free(g);
    }
    float *pw = ref_loaded(b, param, n);
    const float *w = dt == MIST_BF16 ? master : pw;
    int good = 1, moments = 1, rounded = 1;
    for (size_t i = 0; i < n; i++) {
        good &= fabs(w[i] - rw[i]) <= 1e-6 + 1e-5 * fabs(rw[i]);
        moments &= fabs(m[i] - rm[i]) <= 1e-6 && fabs(v[i] - rv[i]) <= 1e-6;
        if (dt == MIST_BF16) rounded &= ((uint16_t *)param)[i] == mist_f32_to_bf16(master[i]);
    }
    ok(good && moments, "adamw %s: %d steps match a double scalar reference (weights, m, v)",
       mist_dtype_name(dt), steps);
    if (dt == MIST_BF16) ok(rounded, "adamw bf16: the parameter is the fp32 master rounded to bf16");
    free(pw); free(param); free(w0); free(master); free(m); free(v); free(rw); free(rm); free(rv);
    b->destroy(b);
}

// ---------------------------------------------------------------- norm squared
static void test_norm_squared(void) {
    size_t n = 100003;
    Backend *b = ref_backend(MIST_F32);
    float *g = ref_random(n, -1, 1);
    double want = 1.5;
    for (size_t i = 0; i < n; i++) want += (double)g[i] * g[i];
    float acc = 1.5f;
    b->norm_squared_accumulate(b, NULL, &acc, g, n);
    ok(fabs(acc - want) <= 1e-6 * want, "norm_squared_accumulate adds sum(g^2) to acc: %.6f vs %.6f",
       acc, want);
    Backend *h = ref_backend(MIST_BF16);
    ref_round_bf16(g, n);
    void *gh = ref_store(h, g, n);
    float acc32 = 0.0f, acc16 = 0.0f;
    b->norm_squared_accumulate(b, NULL, &acc32, g, n);
    h->norm_squared_accumulate(h, NULL, &acc16, gh, n);
    ok(acc16 == acc32, "bf16 and fp32 storage of the same values give the same norm");
    free(gh);
    free(g);
    h->destroy(h);
    b->destroy(b);
}

// ---------------------------------------------------------------- determinism
static void run_reductions(Backend *b, const float *g, size_t n, float *acc, const float *z,
                           float *grad, float *losses, const int32_t *tg, int N, int V) {
    *acc = 0.0f;
    b->norm_squared_accumulate(b, NULL, acc, g, n);
    memcpy(grad, z, (size_t)N * V * 4);
    b->crossentropy_forward_backward(b, NULL, losses, grad, tg, N, V, V, 0.25f);
}

static void test_determinism(void) {
    size_t n = 1 << 20;
    int N = 64, V = 300;
    Backend *b = ref_backend(MIST_F32);
    float *g = ref_random(n, -1, 1), *z = ref_random((size_t)N * V, -3, 3);
    int32_t *tg = malloc(N * sizeof(int32_t));
    for (int i = 0; i < N; i++) tg[i] = ref_randint(V);
    float acc[2], *grad[2], *losses[2];
    for (int r = 0; r < 2; r++) {
        grad[r] = malloc((size_t)N * V * 4);
        losses[r] = malloc(N * 4);
    }
    run_reductions(b, g, n, &acc[0], z, grad[0], losses[0], tg, N, V);
    run_reductions(b, g, n, &acc[1], z, grad[1], losses[1], tg, N, V);
    ok(acc[0] == acc[1] && memcmp(grad[0], grad[1], (size_t)N * V * 4) == 0 &&
       memcmp(losses[0], losses[1], N * 4) == 0, "norm_sq and cross-entropy: same bits twice");
#ifdef _OPENMP
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    run_reductions(b, g, n, &acc[0], z, grad[0], losses[0], tg, N, V);
    omp_set_num_threads(2);
    run_reductions(b, g, n, &acc[1], z, grad[1], losses[1], tg, N, V);
    omp_set_num_threads(saved);
    ok(acc[0] == acc[1] && memcmp(grad[0], grad[1], (size_t)N * V * 4) == 0 &&
       memcmp(losses[0], losses[1], N * 4) == 0, "norm_sq and cross-entropy: same bits with 1 and 2 threads");
#else
    tap_skip("built without OpenMP: thread-count independence is trivial");
#endif
    for (int r = 0; r < 2; r++) {
        free(grad[r]);
        free(losses[r]);
    }
    free(g); free(z); free(tg);
    b->destroy(b);
}

// ---------------------------------------------------------------- workspace
// Nothing may be allocated inside a training step, so ops take their
// temporaries (fp32 copies of bf16 tensors, GEMM panels, sort arrays, per-thread
// rows) from a grow-only workspace owned by the backend. After one warm-up call
// of an op with a shape, a second call with that shape (or a smaller one) must
// not grow reserved_bytes, and must give the same bits: stale workspace
// contents must never leak into a result.
typedef struct {
    int B, T, C, OC, NH, NKV, HS, V;
    void *x, *w, *bias, *y, *pre, *dy, *dx, *dw;   // x (N,C), w (OC,C), bias (OC), y pre dy (N,OC), dx (N,C), dw (OC,C)
    void *qkv, *att, *datt, *dqkv;                 // qkv dqkv (N,(NH+2NKV)*HS), att datt (N,NH*HS)
    float *lse, *mean, *rstd, *acc;                // (B,NH,T), (N), (N), (1)
    int32_t *tok;                                  // (N) in [0, V)
    void *wte, *wpe, *emb, *dwte, *dwpe;           // (V,C), (T,C), (N,C), (V,C), (T,C)
} WsCase;

typedef struct { const void *p[3]; size_t bytes[3]; } WsResult;  // what one call produced

static void *ws_random(MistDtype dt, size_t n) {
    Backend tmp = {.dtype = dt};
    float *f = ref_random(n, -1, 1);
    void *p = ref_store(&tmp, f, n);
    free(f);
    return p;
}

static WsResult ws_matmul(Backend *b, WsCase *c) {
    int N = c->B * c->T;
    size_t es = mist_dtype_size(b->dtype);
    memset(c->dw, 0, (size_t)c->OC * c->C * es);  // dweight accumulates
    b->matmul_forward(b, NULL, c->y, c->pre, c->x, c->w, c->bias, N, c->C, c->OC);
    b->matmul_backward(b, NULL, c->dx, c->dw, NULL, c->dy, c->x, c->w, NULL, N, c->C, c->OC);
    return (WsResult){{c->y, c->dx, c->dw}, {(size_t)N * c->OC * es, (size_t)N * c->C * es, (size_t)c->OC * c->C * es}};
}

static WsResult ws_matmul_blocked(Backend *b, WsCase *c) {
    int previous = cpu_gemm_use_blas(0);
    WsResult r = ws_matmul(b, c);
    cpu_gemm_use_blas(previous);
    return r;
}

static WsResult ws_attention(Backend *b, WsCase *c) {
    size_t es = mist_dtype_size(b->dtype), N = (size_t)c->B * c->T;
    b->attention_forward(b, NULL, c->att, c->lse, c->qkv, c->B, c->T, c->NH, c->NKV, c->HS);
    b->attention_backward(b, NULL, c->dqkv, c->datt, c->qkv, c->att, c->lse, c->B, c->T, c->NH, c->NKV, c->HS);
    return (WsResult){{c->att, c->dqkv, c->lse},
                      {N * c->NH * c->HS * es, N * (c->NH + 2 * c->NKV) * c->HS * es,
                       (size_t)c->B * c->NH * c->T * sizeof(float)}};
}

static WsResult ws_norm(Backend *b, WsCase *c) {
    int N = c->B * c->T;
    size_t es = mist_dtype_size(b->dtype);
    memset(c->dx, 0, (size_t)N * c->C * es);  // dinp and dw accumulate
    memset(c->dw, 0, (size_t)c->C * es);
    // w, bias and dy are big enough to serve as the (C) norm weights and the (N,C) gradient
    b->norm_forward(b, NULL, NORM_OP_LAYERNORM, NULL, c->emb, c->mean, c->rstd, c->x, NULL, c->w, c->bias, N,
                    c->C, 1e-5f);
    b->norm_backward(b, NULL, NORM_OP_LAYERNORM, c->dx, c->dw, NULL, c->dy, c->x, c->w, c->mean, c->rstd, N, c->C);
    return (WsResult){{c->emb, c->dx, c->dw}, {(size_t)N * c->C * es, (size_t)N * c->C * es, (size_t)c->C * es}};
}

static WsResult ws_embedding(Backend *b, WsCase *c) {
    int N = c->B * c->T;
    size_t es = mist_dtype_size(b->dtype);
    memset(c->dwte, 0, (size_t)c->V * c->C * es);  // both accumulate
    memset(c->dwpe, 0, (size_t)c->T * c->C * es);
    b->embedding_forward(b, NULL, c->emb, c->tok, c->wte, c->wpe, c->B, c->T, c->C);
    b->embedding_backward(b, NULL, c->dwte, c->dwpe, c->dy, c->tok, c->B, c->T, c->C);
    return (WsResult){{c->emb, c->dwte, c->dwpe},
                      {(size_t)N * c->C * es, (size_t)c->V * c->C * es, (size_t)c->T * c->C * es}};
}

static WsResult ws_norm_squared(Backend *b, WsCase *c) {
    c->acc[0] = 0.0f;
    b->norm_squared_accumulate(b, NULL, c->acc, c->x, (size_t)c->B * c->T * c->C);
    return (WsResult){{c->acc}, {sizeof(float)}};
}

static void test_workspace(MistDtype dt) {
    // OC > 256 and C past one GEMM panel edge, so the blocked loop packs several panels
    WsCase c = {.B = 2, .T = 40, .C = 72, .OC = 300, .NH = 4, .NKV = 2, .HS = 16, .V = 50};
    size_t N = (size_t)c.B * c.T, row = (size_t)(c.NH + 2 * c.NKV) * c.HS;
    c.x = ws_random(dt, N * c.C); c.w = ws_random(dt, (size_t)c.OC * c.C); c.bias = ws_random(dt, c.OC);
    c.y = ws_random(dt, N * c.OC); c.pre = ws_random(dt, N * c.OC); c.dy = ws_random(dt, N * c.OC);
    c.dx = ws_random(dt, N * c.C); c.dw = ws_random(dt, (size_t)c.OC * c.C);
    c.qkv = ws_random(dt, N * row); c.dqkv = ws_random(dt, N * row);
    c.att = ws_random(dt, N * c.NH * c.HS); c.datt = ws_random(dt, N * c.NH * c.HS);
    c.lse = malloc((size_t)c.B * c.NH * c.T * sizeof(float));
    c.mean = malloc(N * sizeof(float)); c.rstd = malloc(N * sizeof(float)); c.acc = malloc(sizeof(float));
    c.tok = malloc(N * sizeof(int32_t));
    for (size_t i = 0; i < N; i++) c.tok[i] = ref_randint(c.V / 4);  // repeats: groups of several rows
    c.wte = ws_random(dt, (size_t)c.V * c.C); c.wpe = ws_random(dt, (size_t)c.T * c.C);
    c.emb = ws_random(dt, N * c.C); c.dwte = ws_random(dt, (size_t)c.V * c.C);
    c.dwpe = ws_random(dt, (size_t)c.T * c.C);

    static const struct { const char *name; WsResult (*run)(Backend *, WsCase *); } ops[] = {
        {"matmul", ws_matmul}, {"matmul (blocked GEMM)", ws_matmul_blocked}, {"attention", ws_attention}, {"norm", ws_norm},
        {"embedding", ws_embedding}, {"norm_squared", ws_norm_squared}};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        Backend *b = ref_backend(dt);  // fresh: the workspace holds only this op's needs
        WsResult first = ops[k].run(b, &c);
        void *snap[3] = {NULL, NULL, NULL};
        for (int i = 0; i < 3 && first.p[i]; i++) {
            snap[i] = malloc(first.bytes[i]);
            memcpy(snap[i], first.p[i], first.bytes[i]);
        }
        size_t warm = b->reserved_bytes(b);
        WsResult second = ops[k].run(b, &c);
        size_t again = b->reserved_bytes(b);
        int same = 1;
        for (int i = 0; i < 3 && first.p[i]; i++) same &= memcmp(snap[i], second.p[i], first.bytes[i]) == 0;
        c.B = 1;  // a smaller shape fits in what the larger one reserved
        ops[k].run(b, &c);
        c.B = 2;
        size_t smaller = b->reserved_bytes(b);
        ok(again == warm && smaller == warm && same,
           "%s %s: second call and a smaller shape keep the workspace at %zu B (then %zu, %zu) and the bits",
           mist_dtype_name(dt), ops[k].name, warm, again, smaller);
        if (dt == MIST_BF16 && (ops[k].run == ws_matmul || ops[k].run == ws_attention))
            ok(warm > 0, "bf16 %s widens its operands into the workspace (reserved_bytes %zu > 0)", ops[k].name,
               warm);
        if (ops[k].run == ws_matmul_blocked)
            ok(warm > 0, "%s %s holds its packing panels in the workspace (reserved_bytes %zu > 0)",
               mist_dtype_name(dt), ops[k].name, warm);
        for (int i = 0; i < 3; i++) free(snap[i]);
        b->destroy(b);
    }
    void *bufs[] = {c.x, c.w, c.bias, c.y, c.pre, c.dy, c.dx, c.dw, c.qkv, c.dqkv, c.att, c.datt, c.lse,
                    c.mean, c.rstd, c.acc, c.tok, c.wte, c.wpe, c.emb, c.dwte, c.dwpe};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}

int main(void) {
    ref_seed_from_env_or_clock();
    test_memory_and_events();
    test_gelu();
    test_swiglu();
    test_residual_cast_scale();
    test_crossentropy();
    test_adamw(MIST_F32);
    test_adamw(MIST_BF16);
    test_norm_squared();
    test_determinism();
    test_workspace(MIST_F32);
    test_workspace(MIST_BF16);
    return tap_done();
}
