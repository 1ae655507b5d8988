// Seeded random numbers for the expression tests (test_expr, test_expr_overlap):
// a fresh seed each run, printed; MIST_TEST_SEED=N repeats one.
#ifndef MIST_SEEDED_RNG_H
#define MIST_SEEDED_RNG_H
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/tap.h"

static uint64_t rng_state;
static uint64_t rng_next(void) {  // xorshift64*
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}
static double rng_unit(void) { return (double)(rng_next() >> 11) * 0x1.0p-53; }
static int rng_int(int n) { return (int)(rng_next() % (uint64_t)n); }

// seeds the generator from MIST_TEST_SEED or the clock, says which; returns the seed
static uint64_t rng_seed(void) {
    const char *env = getenv("MIST_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    if (seed == 0) seed = 1;
    rng_state = seed;
    diag("seed %llu (repeat with MIST_TEST_SEED=%llu)", (unsigned long long)seed, (unsigned long long)seed);
    return seed;
}

// bitwise equal, or both NaN
static int same_double(double a, double b) {
    return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b));
}

#endif
