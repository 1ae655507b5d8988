// The vocabulary-parallel ops against the whole-vocabulary ones: the
// vocabulary (odd size, so the last rank is short) is split over 1..4
// simulated tensor-parallel ranks, the reductions between passes are done
// here in rank order, and the result must match the fused cross-entropy and
// the plain embedding on fresh random inputs.
//
// Tolerances: losses and gradients relative to the tensor's scale <= 1e-6 in
// fp32 (the only difference is the fp32 rounding of the exp-sum between
// passes), <= 2e-2 with bf16 storage; the embedding sums exact zeros, so it
// must match bit for bit.
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "tests/kernel_ref.h"

enum { N = 13, V = 37, C = 8, T = 4 };

// rank r of tp: vocabulary rows [v0, v0 + Vt), ceil(V/tp) per rank
static void vocab_slice(int tp, int r, int *v0, int *Vt) {
    int per = (V + tp - 1) / tp;
    *v0 = r * per;
    *Vt = *v0 >= V ? 0 : (V - *v0 < per ? V - *v0 : per);
}

// fused op on the whole logits vs the three passes over tp slices; returns the
// largest relative error of losses and of the gradient, and whether every
// padding column came back 0
static void cross_entropy_split(MistDtype dt, int tp, double *loss_err, double *grad_err, int *pad_zero) {
    Backend *b = ref_backend(dt);
    float *z = ref_random((size_t)N * V, -4, 4);
    int32_t tg[N];
    for (int i = 0; i < N; i++) tg[i] = ref_randint(V);
    tg[3] = -1;  // ignored row
    float dloss = 1.0f / N;
    void *whole = ref_store(b, z, (size_t)N * V);
    float want_loss[N];
    b->crossentropy_forward_backward(b, NULL, want_loss, whole, tg, N, V, V, dloss);
    float *want_grad = ref_loaded(b, whole, (size_t)N * V);

    float rowmax[N], stats[2 * N], part[2 * N], loss[N], *grad = calloc((size_t)N * V, sizeof(float));
    void *slice[4];
    int v0[4], Vt[4], pad = 3;  // each slice has 3 padding columns, poisoned
    for (int r = 0; r < tp; r++) {
        vocab_slice(tp, r, &v0[r], &Vt[r]);
        int Vp = Vt[r] + pad;
        float *zs = malloc(sizeof(float) * N * Vp);
        for (int i = 0; i < N; i++)
            for (int v = 0; v < Vp; v++) zs[i * Vp + v] = v < Vt[r] ? z[i * V + v0[r] + v] : NAN;
        slice[r] = ref_store(b, zs, (size_t)N * Vp);
        free(zs);
    }
    for (int i = 0; i < N; i++) rowmax[i] = -INFINITY;
    for (int r = 0; r < tp; r++) {  // pass 1, then the MAX reduction
        float m[N];
        b->crossentropy_vocab_max(b, NULL, m, slice[r], N, Vt[r], Vt[r] + pad);
        for (int i = 0; i < N; i++) rowmax[i] = m[i] > rowmax[i] ? m[i] : rowmax[i];
    }
    for (int i = 0; i < 2 * N; i++) stats[i] = 0;
    for (int r = 0; r < tp; r++) {  // pass 2, then the SUM reduction in rank order
        b->crossentropy_vocab_stats(b, NULL, part, slice[r], rowmax, tg, v0[r], N, Vt[r], Vt[r] + pad);
        for (int i = 0; i < 2 * N; i++) stats[i] += part[i];
    }
    *pad_zero = 1;
    *loss_err = 0;
    for (int r = 0; r < tp; r++) {  // pass 3: every rank gets the same losses
        int Vp = Vt[r] + pad;
        b->crossentropy_vocab_finish(b, NULL, loss, slice[r], rowmax, stats, tg, v0[r], N, Vt[r], Vp, dloss);
        double e = ref_rel_err_f(loss, want_loss, N);
        *loss_err = e > *loss_err ? e : *loss_err;
        float *g = ref_loaded(b, slice[r], (size_t)N * Vp);
        for (int i = 0; i < N; i++)
            for (int v = 0; v < Vp; v++) {
                if (v < Vt[r]) grad[i * V + v0[r] + v] = g[i * Vp + v];
                else *pad_zero &= g[i * Vp + v] == 0.0f;
            }
        free(g);
        free(slice[r]);
    }
    *grad_err = ref_rel_err_f(grad, want_grad, (size_t)N * V);
    free(z), free(whole), free(want_grad), free(grad);
    b->destroy(b);
}

// embedding: the sum over ranks of the range forward (positions added on rank
// 0 only) equals the whole embedding; the ranks' dwte slices stacked equal the
// whole dwte
static int embedding_split(int tp) {
    Backend *b = ref_backend(MIST_F32);
    int B = N / T + 1;
    float *wte = ref_random((size_t)V * C, -1, 1), *wpe = ref_random((size_t)T * C, -1, 1);
    float *dout = ref_random((size_t)B * T * C, -1, 1);
    int32_t tok[64];
    for (int i = 0; i < B * T; i++) tok[i] = ref_randint(V);
    tok[1] = tok[5] = tok[6] = V - 1;  // repeated tokens, one of them the last rank's last row
    float *want = malloc(sizeof(float) * B * T * C), *sum = calloc((size_t)B * T * C, sizeof(float));
    float *part = malloc(sizeof(float) * B * T * C);
    b->embedding_forward(b, NULL, want, tok, wte, wpe, B, T, C);
    float *dwte_want = calloc((size_t)V * C, sizeof(float)), *dwte = calloc((size_t)V * C, sizeof(float));
    b->embedding_backward(b, NULL, dwte_want, NULL, dout, tok, B, T, C);
    for (int r = 0; r < tp; r++) {
        int v0, Vt;
        vocab_slice(tp, r, &v0, &Vt);
        b->embedding_forward_range(b, NULL, part, tok, wte + (size_t)v0 * C, r == 0 ? wpe : NULL, v0, Vt, B, T, C);
        for (int i = 0; i < B * T * C; i++) sum[i] += part[i];
        b->embedding_backward_range(b, NULL, dwte + (size_t)v0 * C, NULL, dout, tok, v0, Vt, B, T, C);
    }
    int same = !memcmp(sum, want, sizeof(float) * B * T * C) && !memcmp(dwte, dwte_want, sizeof(float) * V * C);
    free(wte), free(wpe), free(dout), free(want), free(sum), free(part), free(dwte_want), free(dwte);
    b->destroy(b);
    return same;
}

int main(void) {
    ref_seed_from_env_or_clock();
    for (int tp = 1; tp <= 4; tp++) {
        double le, ge;
        int pz;
        cross_entropy_split(MIST_F32, tp, &le, &ge, &pz);
        ok(le <= 1e-6 && ge <= 1e-6 && pz, "fp32 cross-entropy over %d vocabulary slice(s): losses %.1e, gradient %.1e, "
           "padding zeroed", tp, le, ge);
        cross_entropy_split(MIST_BF16, tp, &le, &ge, &pz);
        ok(le <= 2e-2 && ge <= 2e-2 && pz, "bf16 cross-entropy over %d slice(s): losses %.1e, gradient %.1e", tp, le, ge);
        ok(embedding_split(tp), "embedding over %d vocabulary slice(s): forward sum and dwte slices equal the whole", tp);
    }
    return tap_done();
}
