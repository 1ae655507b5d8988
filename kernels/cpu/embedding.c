// Token + position embedding. Backward is deterministic without atomics:
// rows are grouped by token id (a stable sort), each group is summed in fp32
// in row order and added to its dwte row once, by one thread.
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu_ops.h"

// out X(B,T,C) = wte X(V,C)[tokens (B,T)] + wpe X(maxT,C)[t] (wpe may be NULL)
void cpu_embedding_forward(Backend *b, BackendStream *s, void *out, const int32_t *tokens,
                           const void *wte, const void *wpe, int B, int T, int C) {
    MistDtype dt = b->dtype;
    CPU_PRAGMA(omp parallel for schedule(static))
    for (long bt = 0; bt < (long)B * T; bt++) {
        size_t row = (size_t)tokens[bt] * C, pos = (size_t)(bt % T) * C, o = (size_t)bt * C;
        for (int c = 0; c < C; c++) {
            float v = cpu_ld(wte, dt, row + c);
            if (wpe) v += cpu_ld(wpe, dt, pos + c);
            cpu_st(out, dt, o + c, v);
        }
    }
}

typedef struct { int32_t token; int32_t row; } TokenRow;

// sort by token, then by row, so every group is visited in row order
static int token_row_cmp(const void *a, const void *b) {
    const TokenRow *x = a, *y = b;
    if (x->token != y->token) return x->token < y->token ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row);
}

// dwte X(V,C) += ; dwpe X(maxT,C) += (may be NULL); dout X(B,T,C)
void cpu_embedding_backward(Backend *b, BackendStream *s, void *dwte, void *dwpe, const void *dout,
                            const int32_t *tokens, int B, int T, int C) {
    MistDtype dt = b->dtype;
    int N = B * T;
    if (dwpe) {
        // dwpe[t] += sum over b of dout[b,t], each position owned by one thread
        CPU_PRAGMA(omp parallel)
        {
            float *acc = cpu_scratch((size_t)C * sizeof(float));  // (C)
            CPU_PRAGMA(omp for schedule(static))
            for (int t = 0; t < T; t++) {
                for (int c = 0; c < C; c++) acc[c] = 0.0f;
                for (int bb = 0; bb < B; bb++)
                    for (int c = 0; c < C; c++) acc[c] += cpu_ld(dout, dt, ((size_t)bb * T + t) * C + c);
                for (int c = 0; c < C; c++)
                    cpu_st(dwpe, dt, (size_t)t * C + c, cpu_ld(dwpe, dt, (size_t)t * C + c) + acc[c]);
            }
            free(acc);
        }
    }
    if (!dwte) return;
    TokenRow *order = cpu_scratch((size_t)N * sizeof(TokenRow));  // (N)
    int *group_start = cpu_scratch(((size_t)N + 1) * sizeof(int));  // (groups + 1)
    for (int i = 0; i < N; i++) order[i] = (TokenRow){tokens[i], i};
    qsort(order, N, sizeof(TokenRow), token_row_cmp);
    int groups = 0;
    for (int i = 0; i < N; i++)
        if (i == 0 || order[i].token != order[i - 1].token) group_start[groups++] = i;
    group_start[groups] = N;
    CPU_PRAGMA(omp parallel)
    {
        float *acc = cpu_scratch((size_t)C * sizeof(float));  // (C)
        CPU_PRAGMA(omp for schedule(dynamic, 16))
        for (int g = 0; g < groups; g++) {
            for (int c = 0; c < C; c++) acc[c] = 0.0f;
            for (int i = group_start[g]; i < group_start[g + 1]; i++)
                for (int c = 0; c < C; c++) acc[c] += cpu_ld(dout, dt, (size_t)order[i].row * C + c);
            size_t w = (size_t)order[group_start[g]].token * C;
            for (int c = 0; c < C; c++) cpu_st(dwte, dt, w + c, cpu_ld(dwte, dt, w + c) + acc[c]);
        }
        free(acc);
    }
    free(group_start);
    free(order);
}
