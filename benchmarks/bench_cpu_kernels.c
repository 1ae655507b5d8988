// Throughput of the CPU backend's heavy ops: matmul forward/backward (OpenBLAS
// and the blocked loop) and causal attention forward/backward, in fp32 and
// bf16 storage. Prints one aligned table and, with --json PATH, the same rows
// as a JSON array.
//
// FLOP counts (2 per multiply-add):
//   matmul  forward 2*N*C*OC, backward 4*N*C*OC (dinp and dweight)
//   attention forward 4*B*NH*T^2*HS, backward 8*B*NH*T^2*HS: the full T x T
//   score matrix (Megatron convention, docs/design.md §6), although the causal
//   kernel only does about half of it, and backward = 2 x forward.
//
// usage: bench_cpu_kernels [--quick] [--json PATH]   (threads: OMP_NUM_THREADS)
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"

enum { MAX_ROWS = 64 };
static const double MIN_SECONDS = 0.25;  // repeat each case at least this long

typedef struct {
    char op[24], dtype[8], path[12], shape[48];
    double ms, gflops;
} Row;

static Row rows[MAX_ROWS];
static int nrows;

static void *random_storage(Backend *b, size_t n, unsigned *seed) {
    size_t es = mist_dtype_size(b->dtype);
    void *p = b->alloc_device(b, n * es);
    if (!p) {
        fprintf(stderr, "bench_cpu_kernels: out of memory allocating %zu elements\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        float v = ((*seed >> 8) * (1.0f / 16777216.0f) - 0.5f) * 0.5f;
        cpu_st(p, b->dtype, i, v);
    }
    return p;
}

typedef void (*BenchFn)(Backend *b, void *ctx);

// average ms per call over enough calls to last MIN_SECONDS (after one warm-up)
static double time_ms(Backend *b, BenchFn fn, void *ctx) {
    BackendEvent *start = b->event_create(b), *end = b->event_create(b);
    fn(b, ctx);
    int calls = 0;
    double elapsed = 0.0;
    b->event_record(b, start, NULL);
    while (elapsed < MIN_SECONDS * 1e3) {
        fn(b, ctx);
        calls++;
        b->event_record(b, end, NULL);
        b->event_synchronize(b, end);
        elapsed = b->event_elapsed_ms(b, start, end);
    }
    b->event_destroy(b, start);
    b->event_destroy(b, end);
    return elapsed / calls;
}

static void add_row(const char *op, const Backend *b, const char *path, const char *shape, double ms,
                    double flops) {
    if (nrows == MAX_ROWS) return;
    Row *r = &rows[nrows++];
    snprintf(r->op, sizeof r->op, "%s", op);
    snprintf(r->dtype, sizeof r->dtype, "%s", mist_dtype_name(b->dtype));
    snprintf(r->path, sizeof r->path, "%s", path);
    snprintf(r->shape, sizeof r->shape, "%s", shape);
    r->ms = ms;
    r->gflops = flops / (ms * 1e-3) / 1e9;
    printf("%-20s %-5s %-9s %-28s %10.3f %10.2f\n", r->op, r->dtype, r->path, r->shape, r->ms, r->gflops);
    fflush(stdout);
}

// ---- matmul ----
typedef struct { void *out, *inp, *w, *bias, *dinp, *dw, *dbias, *dout; int N, C, OC; } MatmulCase;
static void matmul_fwd(Backend *b, void *p) {
    MatmulCase *m = p;
    b->matmul_forward(b, NULL, m->out, NULL, m->inp, m->w, m->bias, m->N, m->C, m->OC);
}
static void matmul_bwd(Backend *b, void *p) {
    MatmulCase *m = p;
    b->matmul_backward(b, NULL, m->dinp, m->dw, m->dbias, m->dout, m->inp, m->w, NULL, m->N, m->C, m->OC);
}

static void bench_matmul(Backend *b, int N, int C, int OC, int blas) {
    unsigned seed = 1;
    MatmulCase m = {random_storage(b, (size_t)N * OC, &seed), random_storage(b, (size_t)N * C, &seed),
                    random_storage(b, (size_t)OC * C, &seed), random_storage(b, OC, &seed),
                    random_storage(b, (size_t)N * C, &seed), random_storage(b, (size_t)OC * C, &seed),
                    random_storage(b, OC, &seed), random_storage(b, (size_t)N * OC, &seed), N, C, OC};
    int previous = cpu_gemm_use_blas(blas);
    const char *path = blas ? "openblas" : "blocked";
    char shape[48];
    snprintf(shape, sizeof shape, "N=%d C=%d OC=%d", N, C, OC);
    double flops = 2.0 * N * C * OC;
    add_row("matmul_forward", b, path, shape, time_ms(b, matmul_fwd, &m), flops);
    add_row("matmul_backward", b, path, shape, time_ms(b, matmul_bwd, &m), 2 * flops);
    cpu_gemm_use_blas(previous);
    void *bufs[] = {m.out, m.inp, m.w, m.bias, m.dinp, m.dw, m.dbias, m.dout};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) b->free_device(b, bufs[i]);
}

// ---- attention ----
typedef struct { void *qkv, *out, *dqkv, *dout; float *lse; int B, T, NH, NKV, HS; } AttnCase;
static void attn_fwd(Backend *b, void *p) {
    AttnCase *a = p;
    b->attention_forward(b, NULL, a->out, a->lse, a->qkv, a->B, a->T, a->NH, a->NKV, a->HS);
}
static void attn_bwd(Backend *b, void *p) {
    AttnCase *a = p;
    b->attention_backward(b, NULL, a->dqkv, a->dout, a->qkv, a->out, a->lse, a->B, a->T, a->NH, a->NKV, a->HS);
}

static void bench_attention(Backend *b, int B, int T, int NH, int NKV, int HS) {
    unsigned seed = 2;
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * HS, no = (size_t)B * T * NH * HS;
    AttnCase a = {random_storage(b, nq, &seed), random_storage(b, no, &seed), random_storage(b, nq, &seed),
                  random_storage(b, no, &seed), b->alloc_device(b, (size_t)B * NH * T * sizeof(float)),
                  B, T, NH, NKV, HS};
    char shape[48];
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d NKV=%d HS=%d", B, T, NH, NKV, HS);
    double flops = 4.0 * B * NH * (double)T * T * HS;
    attn_fwd(b, &a);  // lse and out for the backward
    add_row("attention_forward", b, "fused", shape, time_ms(b, attn_fwd, &a), flops);
    add_row("attention_backward", b, "fused", shape, time_ms(b, attn_bwd, &a), 2 * flops);
    b->free_device(b, a.qkv);
    b->free_device(b, a.out);
    b->free_device(b, a.dqkv);
    b->free_device(b, a.dout);
    b->free_device(b, a.lse);
}

static int write_json(const char *path, int threads) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "bench_cpu_kernels: cannot write --json %s\n", path);
        return 1;
    }
    fprintf(f, "[\n");
    for (int i = 0; i < nrows; i++)
        fprintf(f, "  {\"op\": \"%s\", \"dtype\": \"%s\", \"path\": \"%s\", \"shape\": \"%s\", \"threads\": %d, "
                   "\"ms\": %.4f, \"gflops\": %.3f}%s\n", rows[i].op, rows[i].dtype, rows[i].path, rows[i].shape,
                threads, rows[i].ms, rows[i].gflops, i + 1 < nrows ? "," : "");
    fprintf(f, "]\n");
    return fclose(f) != 0;
}

int main(int argc, char **argv) {
    const char *json = NULL;
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) json = argv[++i];
        else if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else {
            fprintf(stderr, "usage: %s [--quick] [--json PATH]\n  unknown argument '%s'\n", argv[0], argv[i]);
            return 2;
        }
    }
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
#ifdef HAVE_OPENBLAS
    int have_blas = 1;
#else
    int have_blas = 0;
#endif
    printf("# cpu backend kernels, %d OpenMP thread(s), OpenBLAS %s\n", threads, have_blas ? "yes" : "no");
    printf("%-20s %-5s %-9s %-28s %10s %10s\n", "op", "dtype", "path", "shape", "ms", "GFLOP/s");
    int N = quick ? 128 : 512, C = quick ? 256 : 768;
    for (int dt = 0; dt < 2; dt++) {
        char err[256];
        Backend *b = backend_cpu_create(dt ? MIST_BF16 : MIST_F32, err, sizeof err);
        if (!b) {
            fprintf(stderr, "bench_cpu_kernels: %s\n", err);
            return 1;
        }
        for (int blas = have_blas; blas >= 0; blas--) {
            bench_matmul(b, N, C, 3 * C, blas);
            bench_matmul(b, N, 4 * C, C, blas);
        }
        bench_attention(b, quick ? 2 : 4, quick ? 128 : 256, quick ? 4 : 12, quick ? 4 : 12, 64);
        bench_attention(b, quick ? 2 : 4, quick ? 128 : 256, quick ? 4 : 12, quick ? 1 : 4, 64);
        b->destroy(b);
    }
    return json ? write_json(json, threads) : 0;
}
