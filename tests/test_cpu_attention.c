// CPU backend, part 3: causal grouped-query attention (forward and the backward
// that recomputes scores from the saved log-sum-exp) and rotary embeddings.
// Fresh random inputs each run (the seed is printed). Shapes cover
// NH/NKV = 1, 2, 4, T = 1, odd T and head sizes.
//
// Tolerances (max |got - want| relative to the tensor's max |want|):
//   fp32 forward (out, lse) vs the double reference     <= 1e-5
//   fp32 backward vs the double full-matrix gradient    <= 1e-5
//   fp32 backward vs central differences                <= 1e-3
//   bf16 storage vs the fp32 run                         <= 2e-2 (out), 4e-2 (dqkv)
#ifdef _OPENMP
#include <omp.h>
#endif
#include "tests/kernel_ref.h"

static const double FWD_TOL = 1e-5, BWD_TOL = 1e-5, FD_TOL = 1e-3, BF16_TOL = 2e-2;

typedef struct { int B, T, NH, NKV, HS; } Shape;

static size_t qkv_elems(Shape s) { return (size_t)s.B * s.T * (s.NH + 2 * s.NKV) * s.HS; }
static size_t out_elems(Shape s) { return (size_t)s.B * s.T * s.NH * s.HS; }

typedef struct { double *qkv; const float *r; Shape s; } AttnCtx;
static double attention_loss(void *p) {
    AttnCtx *c = p;
    size_t n = out_elems(c->s);
    double *out = malloc(n * sizeof(double));
    ref_attention(out, NULL, c->qkv, c->s.B, c->s.T, c->s.NH, c->s.NKV, c->s.HS);
    double v = ref_dot(out, c->r, n);
    free(out);
    return v;
}

static void test_attention(Shape s) {
    size_t nq = qkv_elems(s), no = out_elems(s), nl = (size_t)s.B * s.NH * s.T;
    Backend *b = ref_backend(MIST_F32);
    float *qkv = ref_random(nq, -1.5f, 1.5f), *r = ref_random(no, -1, 1);
    float *out = malloc(no * 4), *lse = malloc(nl * 4), *dqkv = malloc(nq * 4);
    double *qd = ref_to_double(qkv, nq), *want = malloc(no * sizeof(double)), *wlse = malloc(nl * sizeof(double));
    double *rd = ref_to_double(r, no), *wd = malloc(nq * sizeof(double));
    b->attention_forward(b, NULL, out, lse, qkv, s.B, s.T, s.NH, s.NKV, s.HS);
    ref_attention(want, wlse, qd, s.B, s.T, s.NH, s.NKV, s.HS);
    double eo = ref_rel_err(out, want, no, 1e-30), el = ref_rel_err(lse, wlse, nl, 1e-30);
    ok(eo <= FWD_TOL && el <= FWD_TOL, "attention forward B=%d T=%d NH=%d NKV=%d HS=%d: out %.2e, lse %.2e", s.B,
       s.T, s.NH, s.NKV, s.HS, eo, el);

    for (size_t i = 0; i < nq; i++) dqkv[i] = NAN;  // overwritten, never read
    b->attention_backward(b, NULL, dqkv, r, qkv, out, lse, s.B, s.T, s.NH, s.NKV, s.HS);
    ref_attention_backward(wd, rd, qd, s.B, s.T, s.NH, s.NKV, s.HS);
    double eb = ref_rel_err(dqkv, wd, nq, 1e-30);
    AttnCtx ctx = {qd, r, s};
    double ef = ref_fd_check(qd, nq, dqkv, attention_loss, &ctx);
    ok(eb <= BWD_TOL && ef <= FD_TOL,
       "attention backward (NH/NKV=%d): vs full-matrix gradient %.2e, vs finite differences %.2e", s.NH / s.NKV,
       eb, ef);
    free(qkv); free(r); free(out); free(lse); free(dqkv); free(qd); free(want); free(wlse); free(rd); free(wd);
    b->destroy(b);
}

static void test_attention_bf16(Shape s) {
    size_t nq = qkv_elems(s), no = out_elems(s), nl = (size_t)s.B * s.NH * s.T;
    Backend *b = ref_backend(MIST_F32), *h = ref_backend(MIST_BF16);
    float *qkv = ref_random(nq, -1.5f, 1.5f), *r = ref_random(no, -1, 1);
    ref_round_bf16(qkv, nq);
    ref_round_bf16(r, no);
    float *out = malloc(no * 4), *lse = malloc(nl * 4), *dqkv = malloc(nq * 4), *lse16 = malloc(nl * 4);
    b->attention_forward(b, NULL, out, lse, qkv, s.B, s.T, s.NH, s.NKV, s.HS);
    b->attention_backward(b, NULL, dqkv, r, qkv, out, lse, s.B, s.T, s.NH, s.NKV, s.HS);
    void *qh = ref_store(h, qkv, nq), *rh = ref_store(h, r, no), *oh = ref_store(h, out, no);
    void *dh = ref_store(h, qkv, nq);
    h->attention_forward(h, NULL, oh, lse16, qh, s.B, s.T, s.NH, s.NKV, s.HS);
    h->attention_backward(h, NULL, dh, rh, qh, oh, lse16, s.B, s.T, s.NH, s.NKV, s.HS);
    float *o16 = ref_loaded(h, oh, no), *d16 = ref_loaded(h, dh, nq);
    double eo = ref_rel_err_f(o16, out, no), el = ref_rel_err_f(lse16, lse, nl), ed = ref_rel_err_f(d16, dqkv, nq);
    ok(eo <= BF16_TOL && el <= 1e-5 && ed <= 2 * BF16_TOL,
       "attention bf16 vs fp32 (same inputs): out %.2e, lse %.2e (fp32 math), dqkv %.2e", eo, el, ed);
    free(o16); free(d16); free(qh); free(rh); free(oh); free(dh);
    free(qkv); free(r); free(out); free(lse); free(dqkv); free(lse16);
    h->destroy(h);
    b->destroy(b);
}

static void attention_run(Backend *b, Shape s, const float *qkv, const float *r, float *out, float *lse,
                          float *dqkv) {
    b->attention_forward(b, NULL, out, lse, qkv, s.B, s.T, s.NH, s.NKV, s.HS);
    b->attention_backward(b, NULL, dqkv, r, qkv, out, lse, s.B, s.T, s.NH, s.NKV, s.HS);
}

static void test_attention_determinism(void) {
    Shape s = {2, 70, 4, 2, 16};
    size_t nq = qkv_elems(s), no = out_elems(s), nl = (size_t)s.B * s.NH * s.T;
    Backend *b = ref_backend(MIST_F32);
    float *qkv = ref_random(nq, -1.5f, 1.5f), *r = ref_random(no, -1, 1);
    float *out[2], *lse[2], *d[2];
    for (int k = 0; k < 2; k++) {
        out[k] = malloc(no * 4);
        lse[k] = malloc(nl * 4);
        d[k] = malloc(nq * 4);
    }
    attention_run(b, s, qkv, r, out[0], lse[0], d[0]);
    attention_run(b, s, qkv, r, out[1], lse[1], d[1]);
    ok(memcmp(out[0], out[1], no * 4) == 0 && memcmp(lse[0], lse[1], nl * 4) == 0 &&
       memcmp(d[0], d[1], nq * 4) == 0, "attention forward + backward: same bits twice");
#ifdef _OPENMP
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    attention_run(b, s, qkv, r, out[0], lse[0], d[0]);
    omp_set_num_threads(2);
    attention_run(b, s, qkv, r, out[1], lse[1], d[1]);
    omp_set_num_threads(saved);
    ok(memcmp(out[0], out[1], no * 4) == 0 && memcmp(lse[0], lse[1], nl * 4) == 0 &&
       memcmp(d[0], d[1], nq * 4) == 0, "attention forward + backward: same bits with 1 and 2 threads");
#else
    tap_skip("built without OpenMP: thread-count independence is trivial");
#endif
    for (int k = 0; k < 2; k++) {
        free(out[k]); free(lse[k]); free(d[k]);
    }
    free(qkv); free(r);
    b->destroy(b);
}

// ---------------------------------------------------------------- rotary
typedef struct { double *qkv; const float *r; Shape s; double theta; } RopeCtx;
static double rotary_loss(void *p) {
    RopeCtx *c = p;
    size_t n = qkv_elems(c->s);
    double *x = malloc(n * sizeof(double));
    memcpy(x, c->qkv, n * sizeof(double));
    ref_rotary(x, c->s.B, c->s.T, c->s.NH, c->s.NKV, c->s.HS, c->theta);
    double v = ref_dot(x, c->r, n);
    free(x);
    return v;
}

static void test_rotary(Shape s, float theta) {
    size_t n = qkv_elems(s);
    Backend *b = ref_backend(MIST_F32);
    float *qkv = ref_random(n, -1, 1), *x = malloc(n * 4), *r = ref_random(n, -1, 1), *g = malloc(n * 4);
    double *qd = ref_to_double(qkv, n), *want = malloc(n * sizeof(double));
    memcpy(x, qkv, n * 4);
    memcpy(want, qd, n * sizeof(double));
    b->rotary_forward(b, NULL, x, s.B, s.T, s.NH, s.NKV, s.HS, theta);
    ref_rotary(want, s.B, s.T, s.NH, s.NKV, s.HS, theta);
    double e = ref_rel_err(x, want, n, 1e-30);
    size_t row = (size_t)(s.NH + 2 * s.NKV) * s.HS, vbeg = (size_t)(s.NH + s.NKV) * s.HS;
    int v_same = 1, t0_same = 1;
    for (size_t bt = 0; bt < (size_t)s.B * s.T; bt++)
        for (size_t k = vbeg; k < row; k++) v_same &= x[bt * row + k] == qkv[bt * row + k];
    for (size_t k = 0; k < row; k++) t0_same &= x[k] == qkv[k];
    ok(e <= FWD_TOL && v_same && t0_same,
       "rotary forward (T=%d NH=%d NKV=%d HS=%d theta=%g): rel err %.2e; v heads and position 0 unchanged", s.T,
       s.NH, s.NKV, s.HS, theta, e);
    memcpy(g, r, n * 4);
    b->rotary_backward(b, NULL, g, s.B, s.T, s.NH, s.NKV, s.HS, theta);
    RopeCtx ctx = {qd, r, s, theta};
    double ef = ref_fd_check(qd, n, g, rotary_loss, &ctx);
    ok(ef <= FD_TOL, "rotary backward vs finite differences: rel err %.2e", ef);
    b->rotary_backward(b, NULL, x, s.B, s.T, s.NH, s.NKV, s.HS, theta);
    double* orig = ref_to_double(qkv, n);
    double ei = ref_rel_err(x, orig, n, 1e-30);
    ok(ei <= FWD_TOL, "rotary backward undoes forward (a rotation's transpose is its inverse): %.2e", ei);

    Backend *h = ref_backend(MIST_BF16);
    ref_round_bf16(qkv, n);
    memcpy(x, qkv, n * 4);
    b->rotary_forward(b, NULL, x, s.B, s.T, s.NH, s.NKV, s.HS, theta);
    void *xh = ref_store(h, qkv, n);
    h->rotary_forward(h, NULL, xh, s.B, s.T, s.NH, s.NKV, s.HS, theta);
    float *x16 = ref_loaded(h, xh, n);
    double e16 = ref_rel_err_f(x16, x, n);
    ok(e16 <= BF16_TOL, "rotary bf16 vs fp32: rel err %.2e", e16);
    free(x16); free(xh); free(orig);
    free(qkv); free(x); free(r); free(g); free(qd); free(want);
    h->destroy(h);
    b->destroy(b);
}

int main(void) {
    ref_seed_from_env_or_clock();
    const Shape shapes[] = {
        {2, 13, 4, 4, 8},   // multi-head (NH/NKV = 1)
        {2, 13, 4, 2, 8},   // GQA, 2 query heads per kv head
        {1, 17, 4, 1, 6},   // multi-query (NH/NKV = 4), odd T
        {3, 1, 2, 1, 4},    // T = 1: every row attends to itself only
        {1, 37, 6, 3, 12},  // T past any small tile, 3 kv heads
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) test_attention(shapes[i]);
    test_attention_bf16((Shape){2, 19, 4, 2, 16});
    test_attention_determinism();
    test_rotary((Shape){2, 7, 4, 2, 8}, 10000.0f);
    test_rotary((Shape){1, 33, 2, 1, 6}, 500000.0f);
    return tap_done();
}
