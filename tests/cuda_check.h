// What the CUDA backend's checks share (tests/test_cuda_kernels.c, tests/cuda_checks_attention.c):
// the two backends, the tolerances, random tensors held on the host (fed to the CPU backend) and
// the device, and the comparisons (tests/cuda_check.c).
#ifndef MIST_TESTS_CUDA_CHECK_H
#define MIST_TESTS_CUDA_CHECK_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/backend.h"
#include "kernels/cuda/attention_cudnn.h"

int cuda_attention_wgmma_available(void);  // kernels/cuda/attention_wgmma.cu (the checks link the CUDA backend)
void cuda_attention_wgmma_forward_overlap(int on);

extern Backend *gpu, *cpu;
static const double RTOL = 2e-2, ATOL_FRAC = 2e-2;  // see tests/test_cuda_kernels.c
extern uint64_t rng_state;                          // urand's state; main seeds it (the seed is printed)
extern char skip_reason[1200];                      // why a check returned CHECK_SKIPPED, where it says

double urand(void);  // uniform in [0, 1)

// a tensor held twice: host copy (fed to the CPU backend) and device copy
typedef struct { uint16_t *h; void *d; size_t n; } T16;
typedef struct { float *h; float *d; size_t n; } T32;
T16 t16_random(size_t n, double lo, double hi);
T16 t16_out(size_t n);  // an output the op overwrites: host zeros, device NaN
T32 t32_random(size_t n, double lo, double hi);
T32 t32_out(size_t n);
void t16_free(T16 *t);
void t32_free(T32 *t);

// device against the host reference: every element within atol_frac max|want| + rtol |want|
int check_values(const char *what, const float *got, const float *want, size_t n, double rtol, double atol_frac);
int check16(const char *what, T16 *t, double rtol, double atol_frac);
int check32(const char *what, T32 *t, double rtol, double atol_frac);
int same_bits(const void *d1, const void *d2, size_t bytes);

// a check: 1 passed, 0 failed, CHECK_SKIPPED where it cannot run on this build or GPU
typedef struct { const char *name; int (*fn)(const int *p); int p[6]; } Check;
enum { CHECK_SKIPPED = -1 };

// tests/cuda_checks_attention.c
int check_attention(const int *p);
int check_cudnn_plans(const int *p);
int check_attention_choice(const int *p);
int check_prepared_plans(const int *p);
#endif
