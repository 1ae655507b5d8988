// CPU backend, memory-lean layers ([stage.N] lean; kernels/cpu/lean.c): the
// GELU's inverse on both branches and near its minimum, its forward with the
// branch mask and backward from the output, and the norms' backward from
// their output, against the backward from the input, the double reference and
// finite differences. Fresh random inputs each run (the seed is printed).
#include <float.h>
#include "tests/kernel_ref.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/gelu_inverse.h"

static const double FD_TOL = 1e-3;

// The inverse: x -> y = fp32 gelu(x) -> x' on the branch x < x* names. The
// derivative at x' may be off by the rounding of y carried through the
// inverse: |dy| / |gelu'| * |gelu''| away from x*, sqrt(2 gelu''(x*) |dy|)
// near it (docs/lean-layers.md); both are bounded by `bound` below.
static void test_gelu_inverse(void) {
    const double g2 = 0.4304;  // gelu''(x*)
    double worst_far = 0.0, worst_near = 0.0, worst_x = 0.0;
    int n_left = 0, n_right = 0, bound_ok = 1;
    for (int k = 0; k <= 24000; k++) {
        float x = -12.0f + k * 0.001f;
        if (k % 1000 == 0) x += ref_uniform(-5e-4f, 5e-4f);  // a few off-grid points
        float y = cpu_gelu(x);
        int left = x < (float)GELU_TANH_XMIN;
        n_left += left, n_right += !left;
        float want = cpu_gelu_grad(x), got = cpu_gelu_grad_from_output(y, left);
        double dy = fmax(fabs(y) * FLT_EPSILON, FLT_MIN) + 2.0 * FLT_EPSILON * fabs(y);  // y's rounding (fp32 eval)
        double gp = fabs(want), far = gp > 1e-3 ? dy / gp * 0.8 : INFINITY;
        double bound = fmin(far, sqrt(2.0 * g2 * dy) + 2e-7 * fabs(x)) + 4e-7 + 2e-7 * fabs(want);
        double err = fabs((double)got - want);
        bound_ok &= err <= bound;
        if (fabs(x - GELU_TANH_XMIN) < 0.05) worst_near = fmax(worst_near, err);
        else worst_far = fmax(worst_far, err);
        double xr = gelu_tanh_inverse(y, left);
        if (gp > 0.05 && fabs(xr - x) > worst_x) worst_x = fabs(xr - x);
    }
    ok(n_left > 1000 && n_right > 1000 && bound_ok,
       "gelu'(gelu^-1(y)) on both branches (%d left, %d right of x*) within the stated bound: worst %.2e far from "
       "x*, %.2e within 0.05 of it",
       n_left, n_right, worst_far, worst_near);
    ok(worst_x <= 1e-6 * 12, "the recovered x where gelu' > 0.05: max |x' - x| %.2e", worst_x);
    // at the minimum itself, and just either side: both branches meet at x*
    double at_min = gelu_tanh_inverse(GELU_TANH_YMIN, 1), at_min_r = gelu_tanh_inverse(GELU_TANH_YMIN, 0);
    float ymin = cpu_gelu((float)GELU_TANH_XMIN);
    double l = gelu_tanh_inverse(ymin, 1), r = gelu_tanh_inverse(ymin, 0);
    ok(at_min == GELU_TANH_XMIN && at_min_r == GELU_TANH_XMIN && l <= GELU_TANH_XMIN && r >= GELU_TANH_XMIN &&
           fabs(l - GELU_TANH_XMIN) < 3e-4 && fabs(r - GELU_TANH_XMIN) < 3e-4,
       "at y_min both branches give x* (%.7f, %.7f); fp32 gelu(x*) = %.9g: left %.7f, right %.7f", at_min, at_min_r,
       ymin, l, r);
    // the left tail: fp32's y is 0 where tanhf saturates, and gelu' there is 0 in fp32 too
    ok(cpu_gelu(-6.0f) == 0.0f && cpu_gelu_grad(-6.0f) == 0.0f && cpu_gelu_grad_from_output(0.0f, 1) == 0.0f &&
           cpu_gelu_grad_from_output(0.0f, 0) == cpu_gelu_grad(0.0f),
       "y = 0: left branch gives gelu' = 0 (as fp32 at x = -6), right branch x = 0 (gelu'(0) = 0.5)");
}


static void test_gelu_lean(void) {
    size_t n = 1003;  // not a multiple of 8: the last mask byte is partial
    Backend *b = ref_backend(MIST_F32);
    float *x = ref_random(n, -4, 4), *r = ref_random(n, -1, 1);
    for (size_t i = 0; i < 40; i++) x[i] = (float)GELU_TANH_XMIN + ref_uniform(-1e-3f, 1e-3f);  // near x*
    float *out = malloc(n * 4), *plain = malloc(n * 4), *dx = malloc(n * 4), *dx_in = malloc(n * 4);
    uint8_t *mask = malloc((n + 7) / 8);
    b->gelu_forward(b, NULL, plain, x, n);
    b->gelu_forward_mask(b, NULL, out, mask, x, n);
    int bits = 1;
    for (size_t i = 0; i < n; i++) bits &= (mask[i / 8] >> (i % 8) & 1) == (x[i] < (float)GELU_TANH_XMIN);
    ok(memcmp(out, plain, n * 4) == 0 && bits, "gelu_forward_mask: gelu_forward's bits, mask bit i = x[i] < x*");
    float *inplace = malloc(n * 4);
    memcpy(inplace, x, n * 4);
    b->gelu_forward_mask(b, NULL, inplace, mask, inplace, n);
    ok(memcmp(inplace, out, n * 4) == 0, "gelu_forward_mask in place (out aliasing inp) gives the same bits");

    b->gelu_backward(b, NULL, dx_in, x, r, n);
    b->gelu_backward_from_output(b, NULL, dx, out, mask, r, n);
    double e = ref_rel_err_f(dx, dx_in, n);
    ok(e <= 2e-4, "gelu backward from the output vs from the input: rel err %.2e (40 elements within 1e-3 of x*)", e);
    double *xd = ref_to_double(x, n);
    GeluCtx ctx = {xd, r, n};
    e = ref_fd_check(xd, n, dx, ref_gelu_loss, &ctx);
    ok(e <= FD_TOL, "gelu backward from the output vs finite differences: rel err %.2e", e);
    memcpy(inplace, r, n * 4);
    b->gelu_backward_from_output(b, NULL, inplace, out, mask, inplace, n);
    ok(memcmp(inplace, dx, n * 4) == 0, "gelu backward from the output with dinp aliasing dout: the same bits");
    free(x); free(r); free(out); free(plain); free(dx); free(dx_in); free(mask); free(inplace); free(xd);
    b->destroy(b);
}

typedef struct { NormOp kind; double *x, *w, *bias; const float *r; int N, C; double eps; } NormCtx;
static double norm_loss(void *p) {
    NormCtx *c = p;
    size_t n = (size_t)c->N * c->C;
    double *out = malloc(n * sizeof(double));
    ref_norm(c->kind, out, NULL, NULL, c->x, NULL, c->w, c->bias, c->N, c->C, c->eps);
    double s = ref_dot(out, c->r, n);
    free(out);
    return s;
}

static void test_norm_lean(NormOp kind, int with_bias) {
    int N = 9, C = 136, is_ln = kind == NORM_OP_LAYERNORM;  // C: two column blocks, the second partial
    size_t n = (size_t)N * C;
    float eps = 1e-5f;
    const char *name = is_ln ? "layernorm" : "rmsnorm";
    Backend *b = ref_backend(MIST_F32);
    float *x = ref_random(n, -2, 2), *r = ref_random(n, -1, 1), *out = malloc(n * 4);
    float *w = ref_random(C, 0.5f, 1.5f), *bias = with_bias ? ref_random(C, -0.5f, 0.5f) : NULL;
    for (int c = 0; c < C; c += 3) w[c] = -w[c];  // negative weights too
    float mean[16], rstd[16];
    b->norm_forward(b, NULL, kind, NULL, out, is_ln ? mean : NULL, rstd, x, NULL, w, bias, N, C, eps);
    float *dx = calloc(n, 4), *dw = calloc(C, 4), *db = calloc(C, 4);
    float *dx0 = calloc(n, 4), *dw0 = calloc(C, 4), *db0 = calloc(C, 4);
    b->norm_backward(b, NULL, kind, dx0, dw0, with_bias ? db0 : NULL, r, x, w, is_ln ? mean : NULL, rstd, N, C);
    b->norm_backward_from_output(b, NULL, kind, dx, dw, with_bias ? db : NULL, r, out, w, bias, rstd, N, C);
    double e = fmax(ref_rel_err_f(dx, dx0, n), ref_rel_err_f(dw, dw0, C));
    if (with_bias) e = fmax(e, ref_rel_err_f(db, db0, C));
    ok(e <= 1e-5, "%s (%s bias) backward from the output vs from the input: rel err %.2e", name,
       with_bias ? "with" : "no", e);
    double *xd = ref_to_double(x, n), *wd = ref_to_double(w, C), *bd = ref_to_double(bias, C);
    NormCtx ctx = {kind, xd, wd, bd, r, N, C, eps};
    double ex = ref_fd_check(xd, n, dx, norm_loss, &ctx), ew = ref_fd_check(wd, C, dw, norm_loss, &ctx);
    double eb = with_bias ? ref_fd_check(bd, C, db, norm_loss, &ctx) : 0.0;
    ok(ex <= FD_TOL && ew <= FD_TOL && eb <= FD_TOL,
       "%s backward from the output vs finite differences: dinp %.2e, dw %.2e, dbias %.2e", name, ex, ew, eb);
    // accumulates (+=) like norm_backward
    float *dx1 = malloc(n * 4);
    memcpy(dx1, dx, n * 4);
    b->norm_backward_from_output(b, NULL, kind, dx, NULL, NULL, r, out, w, bias, rstd, N, C);
    double acc = 0.0;
    for (size_t i = 0; i < n; i++) acc = fmax(acc, fabs(dx[i] - 2.0f * dx1[i]));
    ok(acc <= 1e-5, "%s backward from the output accumulates into dinp: %.2e", name, acc);
    free(x); free(r); free(out); free(w); free(bias); free(dx); free(dw); free(db); free(dx0); free(dw0);
    free(db0); free(dx1); free(xd); free(wd); free(bd);
    b->destroy(b);
}

int main(void) {
    ref_seed_from_env_or_clock();
    test_gelu_inverse();
    test_gelu_lean();
    test_norm_lean(NORM_OP_LAYERNORM, 1);
    test_norm_lean(NORM_OP_LAYERNORM, 0);
    test_norm_lean(NORM_OP_RMSNORM, 0);
    return tap_done();
}
