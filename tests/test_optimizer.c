// AdamW through the backend against a scalar double reference, gradient norm
// and clipping, and the learning-rate schedule.
#include <math.h>
#include <string.h>
#include "runtime/optimizer.h"
#include "tests/tap.h"

enum { N = 300, STEPS = 4 };

static void reference_adamw(double *w, double *m, double *v, const float *g, int n, int t, double lr, double b1,
                            double b2, double eps, double wd, double scale) {
    for (int i = 0; i < n; i++) {
        double gi = g[i] * scale;
        m[i] = b1 * m[i] + (1 - b1) * gi;
        v[i] = b2 * v[i] + (1 - b2) * gi * gi;
        double mh = m[i] / (1 - pow(b1, t)), vh = v[i] / (1 - pow(b2, t));
        w[i] -= lr * (mh / (sqrt(vh) + eps) + wd * w[i]);
    }
}

static void test_adamw(Backend *be) {
    static float params[N], grads[N], m[N], v[N], acc[1];
    static double rw[N], rm[N], rv[N];
    for (int i = 0; i < N; i++) {
        params[i] = (float)sin(0.1 * i);
        rw[i] = params[i];
    }
    OptimTensor ts[2] = {{0, 200, 1}, {200, 100, 0}};  // a matrix with decay, a vector without
    Optimizer o = {.backend = be, .params = params, .grads = grads, .m = m, .v = v, .norm_acc = acc,
                   .num_params = N, .tensors = ts, .num_tensors = 2, .beta1 = 0.9, .beta2 = 0.95,
                   .eps = 1e-8, .weight_decay = 0.1};
    double maxerr = 0, norm_err = 0;
    for (int t = 1; t <= STEPS; t++) {
        double want_sq = 0;
        for (int i = 0; i < N; i++) {
            grads[i] = (float)(cos(0.37 * i + t) * (t == 2 ? 50.0 : 1.0));  // step 2: large, gets clipped
            want_sq += (double)grads[i] * grads[i];
        }
        double norm = optimizer_grad_norm(&o);
        norm_err = fmax(norm_err, fabs(norm - sqrt(want_sq)) / sqrt(want_sq));
        float scale = optimizer_clip_scale(norm, 1.0);
        double lr = 1e-2;
        optimizer_step(&o, (float)lr, scale);
        reference_adamw(rw, rm, rv, grads, 200, t, lr, 0.9, 0.95, 1e-8, 0.1, scale);
        reference_adamw(rw + 200, rm + 200, rv + 200, grads + 200, 100, t, lr, 0.9, 0.95, 1e-8, 0.0, scale);
        for (int i = 0; i < N; i++) maxerr = fmax(maxerr, fabs(params[i] - rw[i]));
    }
    ok(norm_err < 1e-6, "grad norm matches sqrt(sum g^2) (rel err %.2g)", norm_err);
    ok(maxerr < 1e-5, "AdamW over %d steps matches the double reference (max abs err %.2g)", STEPS, maxerr);
    ok(o.t == STEPS, "step counter t = %lld", (long long)o.t);
    ok(optimizer_clip_scale(10.0, 1.0) == 0.1f && optimizer_clip_scale(0.5, 1.0) == 1.0f &&
           optimizer_clip_scale(10.0, 0.0) == 1.0f && optimizer_clip_scale(NAN, 1.0) == 1.0f,
       "clip scale: clip/norm above the threshold, 1 below it, when off, or for NaN");
}

static void test_lr(void) {
    TrainConfig tc = {.lr = 1e-3, .min_lr = 1e-4, .warmup = 10, .steps = 110, .schedule = SCHED_COSINE};
    ok(fabs(lr_at(&tc, 0) - 1e-4) < 1e-12 && fabs(lr_at(&tc, 9) - 1e-3) < 1e-12,
       "warmup: (it+1)/warmup * lr (%g at 0, %g at 9)", lr_at(&tc, 0), lr_at(&tc, 9));
    ok(fabs(lr_at(&tc, 10) - 1e-3) < 1e-12, "decay starts at lr");
    ok(fabs(lr_at(&tc, 109) - 1e-4) < 1e-12, "cosine reaches min_lr at the last iteration");
    double mid = lr_at(&tc, 59);
    double want_mid = 1e-4 + 0.5 * (1 + cos(M_PI * 49.0 / 99.0)) * 9e-4;
    ok(fabs(mid - want_mid) < 1e-12, "cosine midpoint %g == %g", mid, want_mid);
    int mono = 1;
    for (int it = 10; it < 109; it++) mono &= lr_at(&tc, it + 1) <= lr_at(&tc, it);
    ok(mono, "lr never rises after warmup");
    tc.schedule = SCHED_LINEAR;
    ok(fabs(lr_at(&tc, 59) - (1e-3 - 49.0 / 99.0 * 9e-4)) < 1e-12, "linear decay is linear");
    tc.schedule = SCHED_CONSTANT;
    ok(lr_at(&tc, 50) == 1e-3 && lr_at(&tc, 109) == 1e-3, "constant stays at lr after warmup");
}

int main(void) {
    char err[256];
    Backend *be = backend_cpu_create(MIST_F32, err, sizeof err);
    if (!be) tap_skip_all(err);
    test_adamw(be);
    test_lr();
    be->destroy(be);
    return tap_done();
}
