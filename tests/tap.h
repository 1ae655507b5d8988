// Minimal TAP producer for C tests: plan, ok/is/near, diagnostics, exit status.
// Usage: tap_plan(n) (or tap_done() at the end for a trailing plan), then ok(cond, fmt...).
#ifndef MIST_TAP_H
#define MIST_TAP_H
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int tap_count_, tap_failed_;

static inline void tap_plan(int n) { printf("1..%d\n", n); fflush(stdout); }

static inline int tap_vok(int cond, const char *fmt, va_list ap) {
    ++tap_count_;
    if (!cond) ++tap_failed_;
    printf("%sok %d - ", cond ? "" : "not ", tap_count_);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    return cond;
}

static inline int ok(int cond, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = tap_vok(cond, fmt, ap);
    va_end(ap);
    return r;
}

static inline void diag(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("# ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
}

// whole-test skip: prints a TAP skip plan with the reason, exits 0
static inline void tap_skip_all(const char *reason) {
    printf("1..0 # SKIP %s\n", reason);
    fflush(stdout);
    exit(0);
}

// one skipped point, with the reason
static inline void tap_skip(const char *reason) {
    printf("ok %d # SKIP %s\n", ++tap_count_, reason);
    fflush(stdout);
}

// |got - want| <= atol + rtol*|want|
static inline int near(double got, double want, double atol, double rtol, const char *what) {
    double err = fabs(got - want);
    int good = err <= atol + rtol * fabs(want) && !isnan(got);
    if (!good) diag("%s: got %.9g want %.9g (err %.3g)", what, got, want, err);
    return good;
}

static inline int tap_done(void) {
    printf("1..%d\n", tap_count_);
    return tap_failed_ ? 1 : 0;
}
#endif
