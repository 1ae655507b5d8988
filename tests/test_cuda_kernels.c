// CUDA backend vs the CPU backend: every op on fresh random inputs (the seed
// is printed) at several shapes, both backends storing bf16, so the only
// differences are summation order and where fp32 intermediates are rounded.
// Outputs that an op overwrites are poisoned with NaN (all-ones bytes) on the
// GPU before the call, so an element the kernel forgets to write fails.
// Without a GPU every point prints `ok N # SKIP no GPU: <reason>`.
//
// Tolerances: |got - want| <= atol + rtol |want| per element, with
//   rtol 2e-2 (bf16 keeps 8 mantissa bits: ~4e-3 per rounding, a few roundings
//   apart between the two backends) and atol = 2e-2 x max|want| for results
//   that are sums of many terms (GEMMs, attention, norms' weight gradients),
//   where a small element can carry the absolute error of the large ones.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "base/dtype.h"
#include "tests/cuda_check.h"
#include "tests/tap.h"

long cuda_matmul_epilogue_fallbacks(void);  // kernels/cuda/matmul.cu

// ---------------------------------------------------------------- checks
// (the attention checks are in tests/cuda_checks_attention.c, the helpers in tests/cuda_check.c)
static int check_embedding(const int *p) {
    int B = p[0], T = p[1], C = p[2], V = p[3], use_wpe = p[4];
    size_t N = (size_t)B * T;
    T16 wte = t16_random((size_t)V * C, -1, 1), wpe = t16_random((size_t)T * C, -1, 1), out = t16_out(N * C);
    int32_t *tok = malloc(N * 4);
    for (size_t i = 0; i < N; i++) tok[i] = (int32_t)(urand() * (V < 8 ? V : 8));  // repeats on purpose
    int32_t *dtok = gpu->alloc_device(gpu, N * 4);
    gpu->copy_h2d(gpu, dtok, tok, N * 4, NULL);
    cpu->embedding_forward(cpu, NULL, out.h, tok, wte.h, use_wpe ? wpe.h : NULL, B, T, C);
    gpu->embedding_forward(gpu, NULL, out.d, dtok, wte.d, use_wpe ? wpe.d : NULL, B, T, C);
    int r = check16("embedding out", &out, 0, 1e-6);
    T16 dout = t16_random(N * C, -1, 1);
    cpu->embedding_backward(cpu, NULL, wte.h, use_wpe ? wpe.h : NULL, dout.h, tok, B, T, C);
    gpu->embedding_backward(gpu, NULL, wte.d, use_wpe ? wpe.d : NULL, dout.d, dtok, B, T, C);
    r &= check16("embedding dwte", &wte, RTOL, ATOL_FRAC);
    if (use_wpe) r &= check16("embedding dwpe", &wpe, RTOL, ATOL_FRAC);
    t16_free(&wte); t16_free(&wpe); t16_free(&out); t16_free(&dout);
    free(tok); gpu->free_device(gpu, dtok);
    return r;
}

// the vocabulary-parallel forms: this rank holds wte rows [v0, v0 + Vt) of V;
// tokens anywhere in V (others contribute nothing)
static int check_embedding_range(const int *p) {
    int B = p[0], T = p[1], C = p[2], V = p[3], v0 = p[4], Vt = p[5];
    size_t N = (size_t)B * T;
    T16 wte = t16_random((size_t)Vt * C, -1, 1), wpe = t16_random((size_t)T * C, -1, 1), out = t16_out(N * C);
    int32_t *tok = malloc(N * 4);
    for (size_t i = 0; i < N; i++) tok[i] = (int32_t)(urand() * V);
    tok[0] = v0, tok[N - 1] = v0 + Vt - 1;  // both ends of the range, and repeats
    if (N > 2) tok[1] = v0;
    int32_t *dtok = gpu->alloc_device(gpu, N * 4);
    gpu->copy_h2d(gpu, dtok, tok, N * 4, NULL);
    cpu->embedding_forward_range(cpu, NULL, out.h, tok, wte.h, wpe.h, v0, Vt, B, T, C);
    gpu->embedding_forward_range(gpu, NULL, out.d, dtok, wte.d, wpe.d, v0, Vt, B, T, C);
    int r = check16("embedding range out", &out, 0, 1e-6);
    T16 dout = t16_random(N * C, -1, 1);
    cpu->embedding_backward_range(cpu, NULL, wte.h, wpe.h, dout.h, tok, v0, Vt, B, T, C);
    gpu->embedding_backward_range(gpu, NULL, wte.d, wpe.d, dout.d, dtok, v0, Vt, B, T, C);
    r &= check16("embedding range dwte", &wte, RTOL, ATOL_FRAC);
    r &= check16("embedding range dwpe", &wpe, RTOL, ATOL_FRAC);
    // no token of the range: dwte must stay as it is
    for (size_t i = 0; i < N; i++) tok[i] = v0 > 0 ? v0 - 1 : v0 + Vt;
    gpu->copy_h2d(gpu, dtok, tok, N * 4, NULL);
    cpu->embedding_backward_range(cpu, NULL, wte.h, NULL, dout.h, tok, v0, Vt, B, T, C);
    gpu->embedding_backward_range(gpu, NULL, wte.d, NULL, dout.d, dtok, v0, Vt, B, T, C);
    r &= check16("embedding range dwte, no token in range", &wte, 0, 1e-6);
    t16_free(&wte); t16_free(&wpe); t16_free(&out); t16_free(&dout);
    free(tok); gpu->free_device(gpu, dtok);
    return r;
}

static int check_norm(const int *p) {
    int N = p[0], C = p[1], kind = p[2], fused = p[3], has_bias = p[4];
    int ln = kind == NORM_OP_LAYERNORM;
    size_t n = (size_t)N * C;
    T16 inp = t16_random(n, -2, 2), res = t16_random(n, -1, 1), w = t16_random(C, 0.5, 1.5), bias = t16_random(C, -1, 1);
    T16 res_out = t16_out(n), out = t16_out(n);
    T32 mean = t32_out(N), rstd = t32_out(N);
    cpu->norm_forward(cpu, NULL, kind, fused ? res_out.h : NULL, out.h, ln ? mean.h : NULL, rstd.h, inp.h,
                      fused ? res.h : NULL, w.h, has_bias ? bias.h : NULL, N, C, 1e-5f);
    gpu->norm_forward(gpu, NULL, kind, fused ? res_out.d : NULL, out.d, ln ? mean.d : NULL, rstd.d, inp.d,
                      fused ? res.d : NULL, w.d, has_bias ? bias.d : NULL, N, C, 1e-5f);
    int r = check16("norm out", &out, RTOL, 1e-2);
    if (fused) r &= check16("norm res_out", &res_out, 0, 1e-6);
    if (ln) r &= check32("norm mean", &mean, 1e-4, 1e-4);
    r &= check32("norm rstd", &rstd, 1e-4, 1e-5);
    // backward: dinp, dw, dbias accumulate onto random values
    T16 dout = t16_random(n, -1, 1), dinp = t16_random(n, -1, 1), dw = t16_random(C, -1, 1), db = t16_random(C, -1, 1);
    const T16 *x = fused ? &res_out : &inp;
    cpu->norm_backward(cpu, NULL, kind, dinp.h, dw.h, has_bias ? db.h : NULL, dout.h, x->h, w.h,
                       ln ? mean.h : NULL, rstd.h, N, C);
    gpu->norm_backward(gpu, NULL, kind, dinp.d, dw.d, has_bias ? db.d : NULL, dout.d, x->d, w.d,
                       ln ? mean.d : NULL, rstd.d, N, C);
    r &= check16("norm dinp", &dinp, RTOL, ATOL_FRAC);
    r &= check16("norm dw", &dw, RTOL, ATOL_FRAC);
    if (has_bias) r &= check16("norm dbias", &db, RTOL, ATOL_FRAC);
    T16 *all[] = {&inp, &res, &w, &bias, &res_out, &out, &dout, &dinp, &dw, &db};
    for (int i = 0; i < 10; i++) t16_free(all[i]);
    t32_free(&mean); t32_free(&rstd);
    return r;
}

// [stage.N] lean: the GELU's forward with its branch mask and backward from the output, the
// norm's backward from the output. The backward gets the CPU's output and mask on both sides
// (uploaded), so both invert the same bits (near x* a 1-ulp difference in y moves x a lot).
static int check_lean(const int *p) {
    int N = p[0], C = p[1], kind = p[2], has_bias = p[3];
    size_t n = (size_t)N * C, mb = (n + 7) / 8;
    T16 a = t16_random(n, -4, 4), o = t16_out(n), dout = t16_random(n, -1, 1), d = t16_out(n);
    uint8_t *mh = malloc(mb), *mg = malloc(mb), *md = gpu->alloc_device(gpu, mb);
    cpu->gelu_forward_mask(cpu, NULL, o.h, mh, a.h, n);
    gpu->gelu_forward_mask(gpu, NULL, o.d, md, a.d, n);
    int r = check16("lean gelu forward", &o, RTOL, 1e-3);
    gpu->copy_d2h(gpu, mg, md, mb, NULL);
    gpu->synchronize(gpu);
    r &= memcmp(mh, mg, mb) == 0;
    gpu->copy_h2d(gpu, o.d, o.h, n * 2, NULL);
    cpu->gelu_backward_from_output(cpu, NULL, d.h, o.h, mh, dout.h, n);
    gpu->gelu_backward_from_output(gpu, NULL, d.d, o.d, md, dout.d, n);
    r &= check16("lean gelu backward from the output", &d, RTOL, 1e-3);
    // norm: forward on the CPU, its output and rstd uploaded; dinp, dw, dbias accumulate onto random values
    T16 x = t16_random(n, -2, 2), w = t16_random(C, 0.5, 1.5), bias = t16_random(C, -1, 1), y = t16_out(n);
    T16 dinp = t16_random(n, -1, 1), dw = t16_random(C, -1, 1), db = t16_random(C, -1, 1);
    T32 rstd = t32_out(N);
    cpu->norm_forward(cpu, NULL, kind, NULL, y.h, NULL, rstd.h, x.h, NULL, w.h, has_bias ? bias.h : NULL, N, C, 1e-5f);
    gpu->copy_h2d(gpu, y.d, y.h, n * 2, NULL);
    gpu->copy_h2d(gpu, rstd.d, rstd.h, (size_t)N * 4, NULL);
    cpu->norm_backward_from_output(cpu, NULL, kind, dinp.h, dw.h, has_bias ? db.h : NULL, dout.h, y.h, w.h,
                                   has_bias ? bias.h : NULL, rstd.h, N, C);
    gpu->norm_backward_from_output(gpu, NULL, kind, dinp.d, dw.d, has_bias ? db.d : NULL, dout.d, y.d, w.d,
                                   has_bias ? bias.d : NULL, rstd.d, N, C);
    r &= check16("lean norm dinp", &dinp, RTOL, ATOL_FRAC);
    r &= check16("lean norm dw", &dw, RTOL, ATOL_FRAC);
    if (has_bias) r &= check16("lean norm dbias", &db, RTOL, ATOL_FRAC);
    T16 *all[] = {&a, &o, &dout, &d, &x, &w, &bias, &y, &dinp, &dw, &db};
    for (int i = 0; i < 11; i++) t16_free(all[i]);
    t32_free(&rstd);
    free(mh); free(mg); gpu->free_device(gpu, md);
    return r;
}

static int check_matmul(const int *p) {
    int N = p[0], C = p[1], OC = p[2], has_bias = p[3], gelu = p[4];
    T16 inp = t16_random((size_t)N * C, -1, 1), wt = t16_random((size_t)OC * C, -1, 1), bias = t16_random(OC, -1, 1);
    T16 out = t16_out((size_t)N * OC), pre = t16_out((size_t)N * OC);
    cpu->matmul_forward(cpu, NULL, out.h, gelu ? pre.h : NULL, inp.h, wt.h, has_bias ? bias.h : NULL, N, C, OC);
    gpu->matmul_forward(gpu, NULL, out.d, gelu ? pre.d : NULL, inp.d, wt.d, has_bias ? bias.d : NULL, N, C, OC);
    int r = check16("matmul out", &out, RTOL, ATOL_FRAC);
    if (gelu) r &= check16("matmul pre_gelu", &pre, RTOL, ATOL_FRAC);
    T16 dout = t16_random((size_t)N * OC, -1, 1), dinp = t16_out((size_t)N * C);
    T16 dw = t16_random((size_t)OC * C, -1, 1), db = t16_random(OC, -1, 1);
    // both sides use the CPU's pre-activation so dout *= gelu'(pre) sees the same input
    if (gelu) gpu->copy_h2d(gpu, pre.d, pre.h, pre.n * 2, NULL);
    cpu->matmul_backward(cpu, NULL, dinp.h, dw.h, has_bias ? db.h : NULL, dout.h, inp.h, wt.h, gelu ? pre.h : NULL, N, C, OC);
    gpu->matmul_backward(gpu, NULL, dinp.d, dw.d, has_bias ? db.d : NULL, dout.d, inp.d, wt.d, gelu ? pre.d : NULL, N, C, OC);
    if (gelu) r &= check16("matmul dout*gelu'", &dout, RTOL, 1e-3);
    r &= check16("matmul dinp", &dinp, RTOL, ATOL_FRAC);
    r &= check16("matmul dweight", &dw, RTOL, ATOL_FRAC);
    if (has_bias) r &= check16("matmul dbias", &db, RTOL, ATOL_FRAC);
    if (has_bias && !gelu) {  // the bias gradient's two-pass sum: the same bits on a second run
        T16 z1 = t16_random(OC, 0, 0), z2 = t16_random(OC, 0, 0);
        gpu->matmul_backward(gpu, NULL, NULL, NULL, z1.d, dout.d, inp.d, wt.d, NULL, N, C, OC);
        gpu->matmul_backward(gpu, NULL, NULL, NULL, z2.d, dout.d, inp.d, wt.d, NULL, N, C, OC);
        if (!same_bits(z1.d, z2.d, (size_t)OC * 2)) {
            diag("the bias gradient is not bitwise reproducible");
            r = 0;
        }
        t16_free(&z1); t16_free(&z2);
    }
    T16 *all[] = {&inp, &wt, &bias, &out, &pre, &dout, &dinp, &dw, &db};
    for (int i = 0; i < 9; i++) t16_free(all[i]);
    return r;
}

// the MLP projection's input gradient through the GELU (DGELU epilogue, or
// its fallback): the CPU rounds the product to bf16 before the GELU factor,
// the GPU's epilogue applies it to the fp32 product, hence the tolerance
static int check_matmul_dinp_gelu(const int *p) {
    int N = p[0], C = p[1], OC = p[2];
    T16 dout = t16_random((size_t)N * OC, -1, 1), wt = t16_random((size_t)OC * C, -1, 1);
    T16 pre = t16_random((size_t)N * C, -3, 3), dinp = t16_out((size_t)N * C);
    cpu->matmul_dinp_gelu(cpu, NULL, dinp.h, dout.h, wt.h, pre.h, N, C, OC);
    long fb = cuda_matmul_epilogue_fallbacks();
    gpu->matmul_dinp_gelu(gpu, NULL, dinp.d, dout.d, wt.d, pre.d, N, C, OC);
    diag("matmul_dinp_gelu N=%d C=%d OC=%d ran %s", N, C, OC,
         cuda_matmul_epilogue_fallbacks() > fb || C % 8 ? "unfused (the product, then the GELU's backward)"
                                                        : "fused (cuBLASLt's DGELU epilogue)");
    int r = check16("matmul_dinp_gelu", &dinp, RTOL, ATOL_FRAC);
    t16_free(&dout); t16_free(&wt); t16_free(&pre); t16_free(&dinp);
    return r;
}

// the LM head's strided products: out / dout rows ld >= OC apart. The
// columns OC..ld-1 hold the same random values on both sides and must
// come back untouched (the whole buffer is compared).
static int check_matmul_ld(const int *p) {
    int N = p[0], C = p[1], OC = p[2], ld = p[3];
    T16 inp = t16_random((size_t)N * C, -1, 1), wt = t16_random((size_t)OC * C, -1, 1);
    T16 out = t16_random((size_t)N * ld, -1, 1);
    cpu->matmul_forward_ld(cpu, NULL, out.h, inp.h, wt.h, N, C, OC, ld);
    gpu->matmul_forward_ld(gpu, NULL, out.d, inp.d, wt.d, N, C, OC, ld);
    int r = check16("matmul_ld out", &out, RTOL, ATOL_FRAC);
    T16 dout = t16_random((size_t)N * ld, -1, 1), dinp = t16_out((size_t)N * C), dw = t16_random((size_t)OC * C, -1, 1);
    cpu->matmul_backward_ld(cpu, NULL, dinp.h, dw.h, dout.h, inp.h, wt.h, N, C, OC, ld);
    gpu->matmul_backward_ld(gpu, NULL, dinp.d, dw.d, dout.d, inp.d, wt.d, N, C, OC, ld);
    r &= check16("matmul_ld dinp", &dinp, RTOL, ATOL_FRAC);
    r &= check16("matmul_ld dweight", &dw, RTOL, ATOL_FRAC);
    T16 *all[] = {&inp, &wt, &out, &dout, &dinp, &dw};
    for (int i = 0; i < 6; i++) t16_free(all[i]);
    return r;
}

// p[5]: 0 the default kernels; 1 the wide ones (MIST_CUDA_ATTENTION=wide: 128-query forward
// tiles, double-buffered dK/dV; the same bits as the default required); 2 the wgmma forward and
// backward (sm_90a builds on Hopper; their products are summed in the tensor cores' own
// order, so the CPU tolerance and run-to-run reproducibility apply, not the default's bits;
// the overlapped wgmma forward must give the plain one's bits); 3 cuDNN's SDPA graphs
// (MIST_CUDA_ATTENTION=cudnn: the CPU tolerance; its backward sums dQ with fp32 atomics,
// so run-to-run bits are not required), or where cuDNN is missing or refuses the shape the
// fallback to the default kernels, which must then be right all the same
static int check_rotary(const int *p) {
    int B = p[0], T = p[1], NH = p[2], NKV = p[3], HS = p[4];
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HS;
    T16 x = t16_random(n, -1, 1);
    cpu->rotary_forward(cpu, NULL, x.h, B, T, NH, NKV, HS, 10000.0f);
    gpu->rotary_forward(gpu, NULL, x.d, B, T, NH, NKV, HS, 10000.0f);
    int r = check16("rotary forward", &x, RTOL, 1e-2);
    gpu->copy_h2d(gpu, x.d, x.h, n * 2, NULL);
    cpu->rotary_backward(cpu, NULL, x.h, B, T, NH, NKV, HS, 10000.0f);
    gpu->rotary_backward(gpu, NULL, x.d, B, T, NH, NKV, HS, 10000.0f);
    r &= check16("rotary backward", &x, RTOL, 1e-2);
    t16_free(&x);
    return r;
}

static int check_pointwise(const int *p) {
    int N = p[0], F = p[1];
    size_t n = (size_t)N * F;
    T16 a = t16_random(n, -4, 4), c = t16_random(n, -1, 1), o = t16_out(n), d = t16_out(n);
    cpu->gelu_forward(cpu, NULL, o.h, a.h, n);
    gpu->gelu_forward(gpu, NULL, o.d, a.d, n);
    int r = check16("gelu forward", &o, RTOL, 1e-3);
    cpu->gelu_backward(cpu, NULL, d.h, a.h, c.h, n);
    gpu->gelu_backward(gpu, NULL, d.d, a.d, c.d, n);
    r &= check16("gelu backward", &d, RTOL, 1e-3);
    cpu->residual_forward(cpu, NULL, o.h, a.h, c.h, n);
    gpu->residual_forward(gpu, NULL, o.d, a.d, c.d, n);
    r &= check16("residual", &o, 0, 1e-6);
    T16 gu = t16_random(2 * n, -4, 4), so = t16_out(n), dgu = t16_out(2 * n);
    cpu->swiglu_forward(cpu, NULL, so.h, gu.h, N, F);
    gpu->swiglu_forward(gpu, NULL, so.d, gu.d, N, F);
    r &= check16("swiglu forward", &so, RTOL, 1e-3);
    cpu->swiglu_backward(cpu, NULL, dgu.h, c.h, gu.h, N, F);
    gpu->swiglu_backward(gpu, NULL, dgu.d, c.d, gu.d, N, F);
    r &= check16("swiglu backward", &dgu, RTOL, 1e-3);
    cpu->scale(cpu, NULL, a.h, 0.37f, n);
    gpu->scale(gpu, NULL, a.d, 0.37f, n);
    r &= check16("scale", &a, 0, 1e-6);
    T32 f = t32_random(n, -3, 3), back = t32_out(n);
    T16 h = t16_out(n);
    cpu->cast(cpu, NULL, h.h, MIST_BF16, f.h, MIST_F32, n);
    gpu->cast(gpu, NULL, h.d, MIST_BF16, f.d, MIST_F32, n);
    r &= check16("cast f32->bf16", &h, 0, 0);
    cpu->cast(cpu, NULL, back.h, MIST_F32, h.h, MIST_BF16, n);
    gpu->cast(gpu, NULL, back.d, MIST_F32, h.d, MIST_BF16, n);
    r &= check32("cast bf16->f32", &back, 0, 0);
    T16 *all[] = {&a, &c, &o, &d, &gu, &so, &dgu, &h};
    for (int i = 0; i < 8; i++) t16_free(all[i]);
    t32_free(&f); t32_free(&back);
    return r;
}

static int check_crossentropy(const int *p) {
    int N = p[0], V = p[1], Vp = p[2];
    T16 z = t16_random((size_t)N * Vp, -4, 4);
    T32 loss = t32_out(N);
    int32_t *tg = malloc(N * 4);
    for (int i = 0; i < N; i++) tg[i] = i % 7 == 3 ? -1 : (int32_t)(urand() * V);
    int32_t *dtg = gpu->alloc_device(gpu, N * 4);
    gpu->copy_h2d(gpu, dtg, tg, N * 4, NULL);
    cpu->crossentropy_forward_backward(cpu, NULL, loss.h, z.h, tg, N, V, Vp, 1.0f / N);
    gpu->crossentropy_forward_backward(gpu, NULL, loss.d, z.d, dtg, N, V, Vp, 1.0f / N);
    int r = check32("crossentropy loss", &loss, 1e-3, 1e-4);
    r &= check16("crossentropy dlogits", &z, RTOL, 1e-2);
    t16_free(&z); t32_free(&loss); free(tg); gpu->free_device(gpu, dtg);
    return r;
}

// the three passes of the vocabulary-parallel cross-entropy on one rank's columns
// [v0, v0 + Vt) of V (each backend feeding its own passes; the reductions between
// them are the runtime's): row maxima, then sums and target logits, then losses and
// the gradient written over the logits (padding columns Vt..Vp-1 zeroed)
static int check_crossentropy_vocab(const int *p) {
    int N = p[0], V = p[1], v0 = p[2], Vt = p[3], Vp = p[4];
    T16 z = t16_random((size_t)N * Vp, -4, 4);
    T32 mx = t32_out(N), stats = t32_out(2 * (size_t)N), loss = t32_out(N);
    int32_t *tg = malloc(N * 4);
    for (int i = 0; i < N; i++)
        tg[i] = i % 7 == 3 ? -1 : i % 3 == 0 ? v0 + (int32_t)(urand() * Vt) : (int32_t)(urand() * V);
    int32_t *dtg = gpu->alloc_device(gpu, N * 4);
    gpu->copy_h2d(gpu, dtg, tg, N * 4, NULL);
    cpu->crossentropy_vocab_max(cpu, NULL, mx.h, z.h, N, Vt, Vp);
    gpu->crossentropy_vocab_max(gpu, NULL, mx.d, z.d, N, Vt, Vp);
    int r = check32("vocab max", &mx, 0, 1e-7);
    cpu->crossentropy_vocab_stats(cpu, NULL, stats.h, z.h, mx.h, tg, v0, N, Vt, Vp);
    gpu->crossentropy_vocab_stats(gpu, NULL, stats.d, z.d, mx.d, dtg, v0, N, Vt, Vp);
    r &= check32("vocab stats", &stats, 1e-4, 1e-6);
    cpu->crossentropy_vocab_finish(cpu, NULL, loss.h, z.h, mx.h, stats.h, tg, v0, N, Vt, Vp, 1.0f / N);
    gpu->crossentropy_vocab_finish(gpu, NULL, loss.d, z.d, mx.d, stats.d, dtg, v0, N, Vt, Vp, 1.0f / N);
    r &= check32("vocab loss", &loss, 1e-3, 1e-4);
    r &= check16("vocab dlogits", &z, RTOL, 1e-2);
    t16_free(&z); t32_free(&mx); t32_free(&stats); t32_free(&loss); free(tg); gpu->free_device(gpu, dtg);
    return r;
}

static int check_optimizer(const int *p) {
    size_t n = (size_t)p[0];
    T32 master = t32_random(n, -1, 1), m = t32_random(n, -0.01, 0.01), v = t32_random(n, 0, 1e-4);
    T16 param = t16_out(n), grad = t16_random(n, -1, 1);
    int r = 1;
    for (int t = 1; t <= 3; t++) {
        cpu->adamw_update(cpu, NULL, param.h, master.h, grad.h, m.h, v.h, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
        gpu->adamw_update(gpu, NULL, param.d, master.d, grad.d, m.d, v.d, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
    }
    r &= check32("adamw master", &master, 1e-5, 1e-6);
    r &= check32("adamw m", &m, 1e-5, 1e-6);
    r &= check32("adamw v", &v, 1e-4, 1e-6);
    r &= check16("adamw param", &param, 1e-2, 1e-6);
    T32 acc = t32_random(1, 1, 2), acc2 = t32_out(1);
    gpu->copy_h2d(gpu, acc2.d, acc.h, 4, NULL);
    cpu->norm_squared_accumulate(cpu, NULL, acc.h, grad.h, n);
    gpu->norm_squared_accumulate(gpu, NULL, acc.d, grad.d, n);
    gpu->norm_squared_accumulate(gpu, NULL, acc2.d, grad.d, n);
    r &= check32("norm_squared", &acc, 1e-5, 0);
    int det = same_bits(acc.d, acc2.d, 4);
    if (!det) diag("norm_squared_accumulate is not bitwise reproducible");
    t32_free(&master); t32_free(&m); t32_free(&v); t16_free(&param); t16_free(&grad); t32_free(&acc); t32_free(&acc2);
    return r && det;
}

static const Check checks[] = {
    {"embedding forward/backward B=2 T=16 C=64 V=50 (wpe)", check_embedding, {2, 16, 64, 50, 1}},
    {"embedding forward/backward B=3 T=33 C=200 V=1000 (no wpe)", check_embedding, {3, 33, 200, 1000, 0}},
    {"embedding range B=2 T=16 C=64 V=100 rows 50..99", check_embedding_range, {2, 16, 64, 100, 50, 50}},
    {"embedding range B=3 T=33 C=200 V=1000 rows 0..332", check_embedding_range, {3, 33, 200, 1000, 0, 333}},
    {"layernorm fused residual, bias N=37 C=96", check_norm, {37, 96, NORM_OP_LAYERNORM, 1, 1}},
    {"layernorm N=512 C=768", check_norm, {512, 768, NORM_OP_LAYERNORM, 0, 1}},
    {"rmsnorm fused residual N=100 C=1000", check_norm, {100, 1000, NORM_OP_RMSNORM, 1, 0}},
    {"layernorm fused residual, bias N=20 C=100 (C % 8 != 0: scalar path)", check_norm, {20, 100, NORM_OP_LAYERNORM, 1, 1}},
    {"layernorm N=64 C=2048", check_norm, {64, 2048, NORM_OP_LAYERNORM, 0, 1}},
    {"layernorm, bias N=3000 C=768 (many row chunks)", check_norm, {3000, 768, NORM_OP_LAYERNORM, 0, 1}},
    {"rmsnorm N=2000 C=100 (many row chunks, scalar path)", check_norm, {2000, 100, NORM_OP_RMSNORM, 0, 0}},
    {"matmul bias N=64 C=128 OC=96", check_matmul, {64, 128, 96, 1, 0}},
    {"matmul no bias N=100 C=72 OC=40", check_matmul, {100, 72, 40, 0, 0}},
    {"matmul + gelu, bias N=256 C=256 OC=512", check_matmul, {256, 256, 512, 1, 1}},
    {"matmul + gelu, bias N=50 C=64 OC=100 (aux ld % 8 != 0: unfused)", check_matmul, {50, 64, 100, 1, 1}},
    {"matmul bias N=5000 C=64 OC=2304 (bias gradient over many row chunks)", check_matmul, {5000, 64, 2304, 1, 0}},
    {"matmul bias N=1000 C=64 OC=100 (bias gradient, scalar path)", check_matmul, {1000, 64, 100, 1, 0}},
    {"matmul_dinp_gelu N=64 C=512 OC=128", check_matmul_dinp_gelu, {64, 512, 128}},
    {"matmul_dinp_gelu N=100 C=3072 OC=768 (GPT-2's MLP projection)", check_matmul_dinp_gelu, {100, 3072, 768}},
    {"matmul_dinp_gelu N=37 C=200 OC=72", check_matmul_dinp_gelu, {37, 200, 72}},
    {"matmul_dinp_gelu N=37 C=100 OC=72 (aux ld % 8 != 0: unfused)", check_matmul_dinp_gelu, {37, 100, 72}},
    {"matmul_ld (LM head, odd vocab) N=96 C=64 OC=1001 ld=1008", check_matmul_ld, {96, 64, 1001, 1008}},
    {"matmul_ld N=33 C=128 OC=256 ld=256", check_matmul_ld, {33, 128, 256, 256}},
    {"attention B=2 T=100 NH=4 NKV=2 HS=64 (GQA, ragged T)", check_attention, {2, 100, 4, 2, 64, 0}},
    {"attention B=1 T=256 NH=2 NKV=2 HS=128", check_attention, {1, 256, 2, 2, 128, 0}},
    {"attention B=2 T=77 NH=4 NKV=1 HS=128 (MQA)", check_attention, {2, 77, 4, 1, 128, 0}},
    {"attention B=1 T=512 NH=2 NKV=2 HS=64", check_attention, {1, 512, 2, 2, 64, 0}},
    {"attention wide B=2 T=100 NH=4 NKV=2 HS=64 (GQA, ragged T)", check_attention, {2, 100, 4, 2, 64, 1}},
    {"attention wide B=1 T=256 NH=2 NKV=2 HS=128", check_attention, {1, 256, 2, 2, 128, 1}},
    {"attention wide B=2 T=77 NH=4 NKV=1 HS=128 (MQA)", check_attention, {2, 77, 4, 1, 128, 1}},
    {"attention wide B=1 T=512 NH=2 NKV=2 HS=64", check_attention, {1, 512, 2, 2, 64, 1}},
    {"attention wide B=1 T=130 NH=2 NKV=1 HS=128 (2 rows in the last tile)", check_attention, {1, 130, 2, 1, 128, 1}},
    {"attention wide B=3 T=1 NH=2 NKV=2 HS=64 (one token)", check_attention, {3, 1, 2, 2, 64, 1}},
    {"attention wide B=1 T=384 NH=4 NKV=2 HS=128", check_attention, {1, 384, 4, 2, 128, 1}},
    {"attention wgmma B=2 T=100 NH=4 NKV=2 HS=64 (GQA, ragged T)", check_attention, {2, 100, 4, 2, 64, 2}},
    {"attention wgmma B=1 T=256 NH=2 NKV=2 HS=128", check_attention, {1, 256, 2, 2, 128, 2}},
    {"attention wgmma B=2 T=77 NH=4 NKV=1 HS=128 (MQA)", check_attention, {2, 77, 4, 1, 128, 2}},
    {"attention wgmma B=3 T=1 NH=2 NKV=2 HS=64 (one token)", check_attention, {3, 1, 2, 2, 64, 2}},
    {"attention wgmma B=1 T=384 NH=4 NKV=2 HS=128", check_attention, {1, 384, 4, 2, 128, 2}},
    {"attention wgmma B=1 T=130 NH=2 NKV=1 HS=128 (2 rows in the last tile)", check_attention, {1, 130, 2, 1, 128, 2}},
    {"attention wgmma B=1 T=512 NH=2 NKV=2 HS=64", check_attention, {1, 512, 2, 2, 64, 2}},
    {"attention wgmma B=1 T=200 NH=2 NKV=1 HS=64 (4 key blocks, 8 rows in the last)", check_attention, {1, 200, 2, 1, 64, 2}},
    {"attention cudnn plans B=2 T=1024 NH=4 NKV=4 HS=128 (built where cuDNN loads)", check_cudnn_plans,
     {2, 1024, 4, 4, 128, 3}},
    {"attention cudnn B=1 T=256 NH=2 NKV=2 HS=128", check_attention, {1, 256, 2, 2, 128, 3}},
    {"attention choice: auto, wgmma, an unknown name (Backend.set_attention)", check_attention_choice, {0}},
    {"attention cudnn prepared B=4 T=1024 NH=8 NKV=2 HS=128: reserved = the plans' bytes, the run adds none",
     check_prepared_plans, {4, 1024, 8, 2, 128, 3}},
    {"attention cudnn B=2 T=100 NH=4 NKV=2 HS=64 (GQA, ragged T)", check_attention, {2, 100, 4, 2, 64, 3}},
    {"attention cudnn B=2 T=77 NH=4 NKV=1 HS=128 (MQA)", check_attention, {2, 77, 4, 1, 128, 3}},
    {"rotary B=2 T=50 NH=4 NKV=2 HS=64", check_rotary, {2, 50, 4, 2, 64}},
    {"rotary B=1 T=300 NH=2 NKV=1 HS=128", check_rotary, {1, 300, 2, 1, 128}},
    {"gelu, swiglu, residual, scale, cast N=33 F=97", check_pointwise, {33, 97}},
    {"gelu, swiglu, residual, scale, cast N=256 F=3072", check_pointwise, {256, 3072}},
    {"lean gelu, layernorm N=33 C=97", check_lean, {33, 97, NORM_OP_LAYERNORM, 1}},
    {"lean gelu, rmsnorm N=64 C=768", check_lean, {64, 768, NORM_OP_RMSNORM, 0}},
    {"crossentropy N=33 V=1000 Vp=1024", check_crossentropy, {33, 1000, 1024}},
    {"crossentropy N=8 V=50257 Vp=50304", check_crossentropy, {8, 50257, 50304}},
    {"crossentropy vocab-parallel N=33 V=1000 cols 500..999 Vp=504", check_crossentropy_vocab, {33, 1000, 500, 500, 504}},
    {"crossentropy vocab-parallel N=8 V=50257 cols 25128..50256 Vp=25136", check_crossentropy_vocab,
     {8, 50257, 25128, 25129, 25136}},
    {"adamw + norm_squared n=1000", check_optimizer, {1000}},
    {"adamw + norm_squared n=3000001", check_optimizer, {3000001}},
};

// 1 when no pattern was given or the check's name contains one of them
static int selected(const char *name, int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strstr(name, argv[i])) return 1;
    return argc < 2;
}

// test_cuda_kernels [PATTERN...]: with patterns, only the checks whose name contains one of
// them run (the others are reported as skipped): a quick re-check of some kernels on a GPU,
// or compute-sanitizer on the newest ones only (benchmarks/gpu/run.sh)
int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    int count = (int)(sizeof checks / sizeof checks[0]);
    char err[256] = "";
    tap_plan(count + 4);
    // no device needed: cuDNN checks each tensor and operation of both attention graphs as
    // it is finalized (shapes, strides, types); the plans (engines) need the GPU, below
    char why[1100];
    int described = cuda_attention_cudnn_describe(2, 100, 4, 2, 64, why, sizeof why);
    if (described == 1) described = cuda_attention_cudnn_describe(1, 2048, 16, 16, 128, why, sizeof why);
    if (described < 0) {
        char reason[1200];
        snprintf(reason, sizeof reason, "cuDNN attention graphs: no cuDNN: %s", why);
        tap_skip(reason);
    } else {
        if (!described) diag("%s", why);
        ok(described, "cuDNN accepts every descriptor and both operation graphs of the attention (GQA HS=64, MHA HS=128)");
    }
    gpu = backend_cuda_create(MIST_BF16, 0, err, sizeof err);
    if (!gpu) {
        for (int i = 0; i < count + 3; i++) {
            char reason[300];
            snprintf(reason, sizeof reason, "no GPU: %s", err);
            tap_skip(reason);
        }
        return tap_failed_ != 0;
    }
    char err2[256] = "";
    Backend *f32 = backend_cuda_create(MIST_F32, 0, err2, sizeof err2);
    ok(f32 == NULL && strstr(err2, "bf16") != NULL, "f32 storage is refused with a reason (%s)", err2);
    cpu = backend_cpu_create(MIST_BF16, err, sizeof err);
    if (!cpu) {
        printf("Bail out! backend_cpu_create(bf16): %s\n", err);
        return 1;
    }
    rng_state = (uint64_t)time(NULL) * 2654435761u + 1;
    diag("seed %llu", (unsigned long long)rng_state);
    int all_ops = 1;
    for (int op = 0; op < OP_COUNT; op++) all_ops &= gpu->supports_op(gpu, &(BackendOpShape){.op = (BackendOp)op});
    ok(all_ops && strcmp(gpu->name, "cuda") == 0, "cuda backend supports every op (the vocabulary-parallel ones too)");
    ok(gpu->supports_op(gpu, &(BackendOpShape){.op = OP_ATTENTION, .HS = 64}) &&
           gpu->supports_op(gpu, &(BackendOpShape){.op = OP_ATTENTION, .HS = 128}) &&
           !gpu->supports_op(gpu, &(BackendOpShape){.op = OP_ATTENTION, .HS = 96}) && !gpu->device_memory_is_host,
       "supports_op: attention at head sizes 64 and 128 only (its compile-time tiles); device memory is not host memory");
    int failed = 0;
    for (int i = 0; i < count; i++) {
        if (!selected(checks[i].name, argc, argv)) {
            char why[320];
            snprintf(why, sizeof why, "%s: not selected (pattern '%s'%s)", checks[i].name, only, argc > 2 ? " ..." : "");
            tap_skip(why);
            continue;
        }
        skip_reason[0] = 0;
        int r = checks[i].fn(checks[i].p);
        if (r == CHECK_SKIPPED) {
            char why[1600];
            const char *wgmma = "needs the wgmma kernels (a Hopper GPU and a backend built for sm_90a)";
            snprintf(why, sizeof why, "%s: %s", checks[i].name, skip_reason[0] ? skip_reason : wgmma);
            tap_skip(why);
        } else {
            failed |= !ok(r, "%s", checks[i].name);
        }
    }
    cpu->destroy(cpu);
    gpu->destroy(gpu);
    return failed || tap_failed_;
}
