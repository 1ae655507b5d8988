// The helpers of the CUDA backend's checks (tests/cuda_check.h): random bf16 and fp32 tensors held
// on the host and the device, outputs poisoned with NaN, device results compared with the CPU's.
#include "tests/cuda_check.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/dtype.h"
#include "tests/tap.h"

Backend *gpu, *cpu;
uint64_t rng_state;
char skip_reason[1200];

// ---------------------------------------------------------------- helpers
double urand(void) {  // xorshift64*, uniform in [0, 1)
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

T16 t16_random(size_t n, double lo, double hi) {
    T16 t = {malloc(n * 2 + 2), gpu->alloc_device(gpu, n * 2 + 2), n};
    for (size_t i = 0; i < n; i++) t.h[i] = mist_f32_to_bf16((float)(lo + (hi - lo) * urand()));
    gpu->copy_h2d(gpu, t.d, t.h, n * 2, NULL);
    return t;
}
// an output the op overwrites: host zeros, device NaN
T16 t16_out(size_t n) {
    T16 t = {calloc(n + 1, 2), gpu->alloc_device(gpu, n * 2 + 2), n};
    gpu->memset_device(gpu, t.d, 0xff, n * 2, NULL);
    return t;
}
T32 t32_random(size_t n, double lo, double hi) {
    T32 t = {malloc(n * 4 + 4), gpu->alloc_device(gpu, n * 4 + 4), n};
    for (size_t i = 0; i < n; i++) t.h[i] = (float)(lo + (hi - lo) * urand());
    gpu->copy_h2d(gpu, t.d, t.h, n * 4, NULL);
    return t;
}
T32 t32_out(size_t n) {
    T32 t = {calloc(n + 1, 4), gpu->alloc_device(gpu, n * 4 + 4), n};
    gpu->memset_device(gpu, t.d, 0xff, n * 4, NULL);
    return t;
}
void t16_free(T16 *t) { free(t->h); gpu->free_device(gpu, t->d); }
void t32_free(T32 *t) { free(t->h); gpu->free_device(gpu, t->d); }

// compare device against host reference: every element within tolerance
int check_values(const char *what, const float *got, const float *want, size_t n, double rtol, double atol_frac) {
    double maxw = 0.0;
    for (size_t i = 0; i < n; i++) maxw = fmax(maxw, fabs(want[i]));
    double atol = atol_frac * maxw + 1e-6, worst = 0.0;
    size_t bad = 0, first = n;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]);
        if (!(err <= atol + rtol * fabs(want[i]))) {
            if (first == n) first = i;
            bad++;
        }
        if (err > worst || isnan(err)) worst = isnan(err) ? INFINITY : err;
    }
    if (bad)
        diag("%s: %zu of %zu elements off; first [%zu] got %.6g want %.6g (max |want| %.3g, max err %.3g)", what, bad,
             n, first, got[first], want[first], maxw, worst);
    return bad == 0;
}
int check16(const char *what, T16 *t, double rtol, double atol_frac) {
    uint16_t *g = malloc(t->n * 2 + 2);
    gpu->copy_d2h(gpu, g, t->d, t->n * 2, NULL);
    gpu->synchronize(gpu);
    float *gf = malloc(t->n * 4 + 4), *wf = malloc(t->n * 4 + 4);
    for (size_t i = 0; i < t->n; i++) { gf[i] = mist_bf16_to_f32(g[i]); wf[i] = mist_bf16_to_f32(t->h[i]); }
    int r = check_values(what, gf, wf, t->n, rtol, atol_frac);
    free(g); free(gf); free(wf);
    return r;
}
int check32(const char *what, T32 *t, double rtol, double atol_frac) {
    float *g = malloc(t->n * 4 + 4);
    gpu->copy_d2h(gpu, g, t->d, t->n * 4, NULL);
    gpu->synchronize(gpu);
    int r = check_values(what, g, t->h, t->n, rtol, atol_frac);
    free(g);
    return r;
}
int same_bits(const void *d1, const void *d2, size_t bytes) {
    void *a = malloc(bytes), *c = malloc(bytes);
    gpu->copy_d2h(gpu, a, d1, bytes, NULL);
    gpu->copy_d2h(gpu, c, d2, bytes, NULL);
    gpu->synchronize(gpu);
    int r = memcmp(a, c, bytes) == 0;
    free(a); free(c);
    return r;
}
