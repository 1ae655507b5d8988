// Token + position embedding. Backward is deterministic without atomics:
// rows are grouped by token id (a stable radix sort), each group is summed in fp32
// in row order and added to its dwte row once, by one thread. The sort arrays
// and per-thread accumulators live in the backend's workspace (cpu_ops.h).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu_ops.h"

// out X(B,T,C) = wte[token - v0] for tokens in [v0, v0 + Vt) (else 0) + wpe X(maxT,C)[t]
// (wpe may be NULL). The whole vocabulary is v0 = 0, Vt = INT32_MAX.
void cpu_embedding_forward_range(Backend *b, BackendStream *s, void *out, const int32_t *tokens, const void *wte,
                                 const void *wpe, int v0, int Vt, int B, int T, int C) {
    MistDtype dt = b->dtype;
    CPU_PRAGMA(omp parallel for schedule(static))
    for (long bt = 0; bt < (long)B * T; bt++) {
        int64_t local = (int64_t)tokens[bt] - v0;
        int here = local >= 0 && local < Vt;
        size_t row = here ? (size_t)local * C : 0, pos = (size_t)(bt % T) * C, o = (size_t)bt * C;
        for (int c = 0; c < C; c++) {
            float v = here ? cpu_ld(wte, dt, row + c) : 0.0f;
            if (wpe) v += cpu_ld(wpe, dt, pos + c);
            cpu_st(out, dt, o + c, v);
        }
    }
}

void cpu_embedding_forward(Backend *b, BackendStream *s, void *out, const int32_t *tokens,
                           const void *wte, const void *wpe, int B, int T, int C) {
    cpu_embedding_forward_range(b, s, out, tokens, wte, wpe, 0, INT32_MAX, B, T, C);
}

typedef struct { int32_t token; int32_t row; } TokenRow;

// Stable LSD radix sort of a (N) by token, 8 bits a pass, ping-ponging with
// tmp (N); returns whichever buffer holds the result. Rows come in row order,
// so stability leaves every group in row order. Not qsort: glibc's qsort
// mallocs its merge buffer, and nothing may allocate inside a step.
static TokenRow *sort_by_token(TokenRow *a, TokenRow *tmp, int N) {
    uint32_t max_token = 0;
    for (int i = 0; i < N; i++)
        if ((uint32_t)a[i].token > max_token) max_token = (uint32_t)a[i].token;
    for (int shift = 0; shift < 32 && (max_token >> shift) > 0; shift += 8) {
        size_t start[257] = {0};  // start[d] = first slot of digit d
        for (int i = 0; i < N; i++) start[(((uint32_t)a[i].token >> shift) & 255u) + 1]++;
        for (int d = 0; d < 256; d++) start[d + 1] += start[d];
        for (int i = 0; i < N; i++) tmp[start[((uint32_t)a[i].token >> shift) & 255u]++] = a[i];
        TokenRow *swap = a;
        a = tmp;
        tmp = swap;
    }
    return a;
}

// dwte X(Vt,C) += for the rows of tokens in [v0, v0 + Vt) (others are another
// rank's); dwpe X(maxT,C) += (may be NULL); dout X(B,T,C)
void cpu_embedding_backward_range(Backend *b, BackendStream *s, void *dwte, void *dwpe, const void *dout,
                                  const int32_t *tokens, int v0, int Vt, int B, int T, int C) {
    MistDtype dt = b->dtype;
    int N = B * T;
    if (dwpe) {
        // dwpe[t] += sum over b of dout[b,t], each position owned by one thread
        size_t acc_stride;
        char *acc_rows = cpu_scratch_per_thread(b, CPU_WS_THREAD, (size_t)C * sizeof(float), &acc_stride);
        CPU_PRAGMA(omp parallel)
        {
            float *acc = cpu_thread_part(acc_rows, acc_stride);  // (C)
            CPU_PRAGMA(omp for schedule(static))
            for (int t = 0; t < T; t++) {
                for (int c = 0; c < C; c++) acc[c] = 0.0f;
                for (int bb = 0; bb < B; bb++)
                    for (int c = 0; c < C; c++) acc[c] += cpu_ld(dout, dt, ((size_t)bb * T + t) * C + c);
                for (int c = 0; c < C; c++)
                    cpu_st(dwpe, dt, (size_t)t * C + c, cpu_ld(dwpe, dt, (size_t)t * C + c) + acc[c]);
            }
        }
    }
    if (!dwte) return;
    TokenRow *unsorted = cpu_scratch(b, CPU_WS_AUX0, (size_t)N * sizeof(TokenRow));  // (N)
    TokenRow *sort_tmp = cpu_scratch(b, CPU_WS_AUX1, (size_t)N * sizeof(TokenRow));  // (N)
    int *group_start = cpu_scratch(b, CPU_WS_AUX2, ((size_t)N + 1) * sizeof(int));  // (groups + 1)
    int n = 0;  // rows whose token is in this range, as local ids
    for (int i = 0; i < N; i++) {
        int64_t local = (int64_t)tokens[i] - v0;
        if (local >= 0 && local < Vt) unsorted[n++] = (TokenRow){(int32_t)local, i};
    }
    const TokenRow *order = sort_by_token(unsorted, sort_tmp, n);  // (n) by token, then row
    int groups = 0;
    for (int i = 0; i < n; i++)
        if (i == 0 || order[i].token != order[i - 1].token) group_start[groups++] = i;
    group_start[groups] = n;
    size_t acc_stride;
    char *acc_rows = cpu_scratch_per_thread(b, CPU_WS_THREAD, (size_t)C * sizeof(float), &acc_stride);
    CPU_PRAGMA(omp parallel)
    {
        float *acc = cpu_thread_part(acc_rows, acc_stride);  // (C)
        CPU_PRAGMA(omp for schedule(dynamic, 16))
        for (int g = 0; g < groups; g++) {
            for (int c = 0; c < C; c++) acc[c] = 0.0f;
            for (int i = group_start[g]; i < group_start[g + 1]; i++)
                for (int c = 0; c < C; c++) acc[c] += cpu_ld(dout, dt, (size_t)order[i].row * C + c);
            size_t w = (size_t)order[group_start[g]].token * C;
            for (int c = 0; c < C; c++) cpu_st(dwte, dt, w + c, cpu_ld(dwte, dt, w + c) + acc[c]);
        }
    }
}

void cpu_embedding_backward(Backend *b, BackendStream *s, void *dwte, void *dwpe, const void *dout,
                            const int32_t *tokens, int B, int T, int C) {
    cpu_embedding_backward_range(b, s, dwte, dwpe, dout, tokens, 0, INT32_MAX, B, T, C);
}
