// Measured op latencies for the planner's op table (see calibrate.h).
#define _POSIX_C_SOURCE 200809L  // open_memstream
#ifdef HAVE_CONFIG_H
#include <config.h>  // the build's config (HAVE_CUDA), not base/schema.h; the GPU scripts build without it
#endif
#include "runtime/calibrate.h"
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/dtype.h"
#include "runtime/fileutil.h"

enum {  // index into op_names
    CAL_QKV, CAL_ATTENTION, CAL_ATTN_PROJ, CAL_FC, CAL_FC_PROJ, CAL_LM_HEAD,
    CAL_LN1, CAL_LN2, CAL_LNF, CAL_ROTARY, CAL_SWIGLU, CAL_EMBEDDING, CAL_CROSSENTROPY,
    CAL_LEAN_GELU, CAL_LEAN_LN1, CAL_LEAN_LN2,  // the kernels of a lean block ([stage.N] lean)
};
static const char *const op_names[CALIB_OPS] = {"qkv", "attention", "attn_proj", "fc", "fc_proj", "lm_head", "ln1",
                                                "ln2", "lnf", "rotary", "swiglu", "embedding", "crossentropy",
                                                "lean_gelu", "lean_ln1", "lean_ln2"};

// Whether the model has the op at this tp degree. The vocabulary-parallel
// embedding and cross-entropy (tp > 1) are not measured: the model's time stays.
static int op_applies(const ModelConfig *m, int op, int tp) {
    switch (op) {
    case CAL_LN2:
    case CAL_LEAN_LN2: return !m->parallel_block;
    case CAL_LEAN_GELU: return m->activation != ACT_SWIGLU;  // SwiGLU's lean recompute is swiglu's forward
    case CAL_ROTARY: return m->position == POS_ROTARY;
    case CAL_SWIGLU: return m->activation == ACT_SWIGLU;
    case CAL_EMBEDDING:
    case CAL_CROSSENTROPY: return tp == 1;
    default: return 1;
    }
}

static int ceil_div(int a, int b) { return (a + b - 1) / b; }
static int is_norm(int op) {
    return op == CAL_LN1 || op == CAL_LN2 || op == CAL_LNF || op == CAL_LEAN_LN1 || op == CAL_LEAN_LN2;
}
// The lean norms have no forward of their own (a lean block's is ln1's, ln2's): written as 0.
static int no_forward(int op) { return op == CAL_LEAN_LN1 || op == CAL_LEAN_LN2; }

// One op at one (b, tp): its shapes and device buffers.
typedef struct {
    Backend *be;
    int op;
    // GEMM: out X(N, ld) = inp X(N, in) @ w X(out, in)^T (+ bias, GELU)
    int N, in, out, ld, has_bias;
    int gelu;     // fc: the forward applies GELU and saves the pre-activation (pre: N x out)
    int gelu_in;  // fc_proj: its input was GELU(pre), and the backward's dinp carries gelu' (pre: N x in)
    // attention: qkv X(B, T, (NH + 2 NKV) HS) -> y X(B, T, NH HS)
    int B, T, NH, NKV, HS;
    // norms (C = in), swiglu (F = out), embedding and cross-entropy (V = out, Vs = ld)
    int kind, fused;  // NormOp; ln2 adds the residual stream first
    float eps, theta;
    void *x, *w, *bias, *y, *pre, *dy, *dx, *dw, *db, *res, *res_out, *wpe, *dwpe;
    float *lse, *mean, *rstd;
    int32_t *tokens;
    uint8_t *mask;  // lean_gelu: the branch bits, one per element
} OpRun;

static uint64_t next_random(uint64_t *state) {  // splitmix64
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// `elems` values uniform in [-sqrt 3, sqrt 3) (unit variance, like normalised
// activations: the CPU's tanh and exp take input-dependent paths, and a
// narrower range times faster than training does) in the backend's storage
// type, on the device
static void *device_random(Backend *be, size_t elems, uint64_t *state) {
    size_t x = mist_dtype_size(be->dtype), bytes = elems * x;
    void *d = be->alloc_device(be, bytes ? bytes : x);
    void *h = malloc(bytes ? bytes : x);
    if (!d || !h) {
        if (d) be->free_device(be, d);
        free(h);
        return NULL;
    }
    for (size_t i = 0; i < elems; i++) {
        float v = (float)(((double)(next_random(state) >> 11) * 0x1.0p-53 - 0.5) * 3.4641016151377544);
        if (be->dtype == MIST_BF16) ((uint16_t *)h)[i] = mist_f32_to_bf16(v);
        else ((float *)h)[i] = v;
    }
    be->copy_h2d(be, d, h, bytes, NULL);
    be->synchronize(be);
    free(h);
    return d;
}

// `n` token ids in [0, V) on the device
static int32_t *device_tokens(Backend *be, size_t n, int V, uint64_t *state) {
    int32_t *d = be->alloc_device(be, n * sizeof(int32_t)), *h = malloc(n * sizeof(int32_t));
    if (!d || !h) {
        if (d) be->free_device(be, d);
        free(h);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) h[i] = (int32_t)(next_random(state) % (uint64_t)V);
    be->copy_h2d(be, d, h, n * sizeof(int32_t), NULL);
    be->synchronize(be);
    free(h);
    return d;
}

static void op_free(OpRun *o) {
    void *all[] = {o->x, o->w, o->bias, o->y, o->pre, o->dy, o->dx, o->dw, o->db, o->res, o->res_out, o->wpe,
                   o->dwpe, o->lse, o->mean, o->rstd, o->tokens, o->mask};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i]) o->be->free_device(o->be, all[i]);
    memset(o, 0, sizeof *o);
}

// Shapes of op `op` for a tp rank at micro-batch b, and its buffers; 0 or -1 (out of memory).
static int op_setup(OpRun *o, Backend *be, const ModelConfig *m, int op, int b, int tp, uint64_t *seed) {
    memset(o, 0, sizeof *o);
    o->be = be, o->op = op;
    int C = m->hidden, HS = m->hidden / m->heads;
    int NHt = ceil_div(m->heads, tp), NKVt = ceil_div(m->kv_heads, tp), Ft = ceil_div(m->ffn_hidden, tp);
    int qkv = (NHt + 2 * NKVt) * HS, swiglu = m->activation == ACT_SWIGLU;
    o->N = b * m->seq_len;
    o->B = b, o->T = m->seq_len, o->NH = NHt, o->NKV = NKVt, o->HS = HS;
    size_t N = (size_t)o->N;
    o->eps = (float)m->norm_eps, o->theta = (float)m->rope_theta;
    o->kind = m->norm == NORM_LAYERNORM ? NORM_OP_LAYERNORM : NORM_OP_RMSNORM;
    if (is_norm(op)) {  // the lean norms: the same buffers, the backward reads y instead of x
        int ln = o->kind == NORM_OP_LAYERNORM;
        o->in = C, o->fused = op == CAL_LN2 || op == CAL_LEAN_LN2, o->has_bias = m->bias;
        o->x = device_random(be, N * C, seed);
        o->y = device_random(be, N * C, seed);
        o->w = device_random(be, (size_t)C, seed);
        o->dy = device_random(be, N * C, seed);
        o->dx = device_random(be, N * C, seed);
        o->dw = device_random(be, (size_t)C, seed);
        if (o->has_bias) o->bias = device_random(be, (size_t)C, seed), o->db = device_random(be, (size_t)C, seed);
        if (o->fused) o->res = device_random(be, N * C, seed), o->res_out = device_random(be, N * C, seed);
        o->mean = ln ? be->alloc_device(be, N * sizeof(float)) : NULL;
        o->rstd = be->alloc_device(be, N * sizeof(float));
        return o->x && o->y && o->w && o->dy && o->dx && o->dw && (!o->has_bias || (o->bias && o->db)) &&
                       (!o->fused || (o->res && o->res_out)) && (!ln || o->mean) && o->rstd
                   ? 0
                   : -1;
    }
    if (op == CAL_ROTARY) {
        o->x = device_random(be, N * qkv, seed), o->dx = device_random(be, N * qkv, seed);
        return o->x && o->dx ? 0 : -1;
    }
    if (op == CAL_LEAN_GELU) {  // act = gelu(fc) with its bits, over the rank's N x F/tp elements
        size_t n = N * (size_t)Ft;
        o->out = Ft;
        o->x = device_random(be, n, seed), o->y = device_random(be, n, seed);  // fc: both branches of x*
        o->dy = device_random(be, n, seed), o->dx = device_random(be, n, seed);
        o->mask = be->alloc_device(be, (n + 7) / 8);
        return o->x && o->y && o->dy && o->dx && o->mask ? 0 : -1;
    }
    if (op == CAL_SWIGLU) {
        o->out = Ft;
        o->x = device_random(be, N * 2 * Ft, seed), o->y = device_random(be, N * Ft, seed);
        o->dy = device_random(be, N * Ft, seed), o->dx = device_random(be, N * 2 * Ft, seed);
        return o->x && o->y && o->dy && o->dx ? 0 : -1;
    }
    if (op == CAL_EMBEDDING) {
        int learned = m->position == POS_LEARNED;
        size_t rows = (size_t)model_vocab_padded(m);  // the table's padded rows; tokens stay below V
        o->in = C, o->out = m->vocab;
        o->tokens = device_tokens(be, N, m->vocab, seed);
        o->w = device_random(be, rows * C, seed), o->dw = device_random(be, rows * C, seed);
        if (learned) o->wpe = device_random(be, (size_t)m->seq_len * C, seed), o->dwpe = device_random(be, (size_t)m->seq_len * C, seed);
        o->y = device_random(be, N * C, seed), o->dy = device_random(be, N * C, seed);
        return o->tokens && o->w && o->dw && (!learned || (o->wpe && o->dwpe)) && o->y && o->dy ? 0 : -1;
    }
    if (op == CAL_CROSSENTROPY) {
        o->out = m->vocab, o->ld = (model_vocab_padded(m) + 7) / 8 * 8;  // the real columns of padded rows
        o->tokens = device_tokens(be, N, m->vocab, seed);
        o->x = device_random(be, N * o->ld, seed);  // logits, the gradient written in place
        o->lse = be->alloc_device(be, N * sizeof(float));  // losses
        return o->tokens && o->x && o->lse ? 0 : -1;
    }
    if (op == CAL_ATTENTION) {
        o->x = device_random(be, N * qkv, seed);                       // qkv (N, QKV)
        o->y = device_random(be, N * NHt * HS, seed);                  // out (N, NH HS)
        o->dy = device_random(be, N * NHt * HS, seed);                 // dout
        o->dx = device_random(be, N * qkv, seed);                      // dqkv
        o->lse = be->alloc_device(be, (size_t)b * NHt * m->seq_len * sizeof(float));  // (B, NH, T)
        return o->x && o->y && o->dy && o->dx && o->lse ? 0 : -1;
    }
    switch (op) {
    case CAL_QKV: o->in = C, o->out = qkv, o->has_bias = m->bias; break;
    case CAL_ATTN_PROJ: o->in = NHt * HS, o->out = C; break;
    case CAL_FC: o->in = C, o->out = swiglu ? 2 * Ft : Ft, o->has_bias = m->bias, o->gelu = !swiglu; break;
    case CAL_FC_PROJ: o->in = Ft, o->out = C, o->gelu_in = !swiglu; break;
    default: o->in = C, o->out = ceil_div(model_vocab_padded(m), tp); break;  // CAL_LM_HEAD over the padded rows
    }
    o->ld = op == CAL_LM_HEAD ? (o->out + 7) / 8 * 8 : o->out;  // the runtime's logits stride
    o->x = device_random(be, N * o->in, seed);
    o->w = device_random(be, (size_t)o->out * o->in, seed);
    o->y = device_random(be, N * o->ld, seed);
    o->dy = device_random(be, N * o->ld, seed);
    o->dx = device_random(be, N * o->in, seed);
    o->dw = device_random(be, (size_t)o->out * o->in, seed);
    if (o->has_bias) o->bias = device_random(be, (size_t)o->out, seed), o->db = device_random(be, (size_t)o->out, seed);
    if (o->gelu || o->gelu_in) o->pre = device_random(be, N * (o->gelu ? o->ld : o->in), seed);
    return o->x && o->w && o->y && o->dy && o->dx && o->dw && (!o->has_bias || (o->bias && o->db)) &&
                   (!(o->gelu || o->gelu_in) || o->pre)
               ? 0
               : -1;
}

// One call of the op as the runtime makes it (backward: dinp and dweight, and
// the bias gradient and GELU derivative where the model has them).
static void op_call(OpRun *o, int backward) {
    Backend *be = o->be;
    if ((o->op == CAL_LEAN_LN1 || o->op == CAL_LEAN_LN2) && backward) {  // from the output y and rstd
        be->norm_backward_from_output(be, NULL, (NormOp)o->kind, o->dx, o->dw, o->db, o->dy, o->y, o->w, o->bias,
                                      o->rstd, o->N, o->in);
    } else if (is_norm(o->op)) {
        const void *normed = o->fused ? o->res_out : o->x;
        if (backward)
            be->norm_backward(be, NULL, (NormOp)o->kind, o->dx, o->dw, o->db, o->dy, normed, o->w, o->mean, o->rstd,
                              o->N, o->in);
        else
            be->norm_forward(be, NULL, (NormOp)o->kind, o->res_out, o->y, o->mean, o->rstd, o->x, o->res, o->w,
                             o->bias, o->N, o->in, o->eps);
    } else if (o->op == CAL_LEAN_GELU) {  // as a lean block: the bits in forward, the inversion in backward
        size_t n = (size_t)o->N * o->out;
        if (backward) be->gelu_backward_from_output(be, NULL, o->dx, o->y, o->mask, o->dy, n);
        else be->gelu_forward_mask(be, NULL, o->y, o->mask, o->x, n);
    } else if (o->op == CAL_ROTARY) {
        if (backward) be->rotary_backward(be, NULL, o->dx, o->B, o->T, o->NH, o->NKV, o->HS, o->theta);
        else be->rotary_forward(be, NULL, o->x, o->B, o->T, o->NH, o->NKV, o->HS, o->theta);
    } else if (o->op == CAL_SWIGLU) {
        if (backward) be->swiglu_backward(be, NULL, o->dx, o->dy, o->x, o->N, o->out);
        else be->swiglu_forward(be, NULL, o->y, o->x, o->N, o->out);
    } else if (o->op == CAL_EMBEDDING) {
        if (backward) be->embedding_backward(be, NULL, o->dw, o->dwpe, o->dy, o->tokens, o->B, o->T, o->in);
        else be->embedding_forward(be, NULL, o->y, o->tokens, o->w, o->wpe, o->B, o->T, o->in);
    } else if (o->op == CAL_CROSSENTROPY) {
        // forward and gradient are one fused pass (the cost model counts it as the forward)
        if (!backward) be->crossentropy_forward_backward(be, NULL, o->lse, o->x, o->tokens, o->N, o->out, o->ld, 1.0f / o->N);
    } else if (o->op == CAL_ATTENTION) {
        if (backward) be->attention_backward(be, NULL, o->dx, o->dy, o->x, o->y, o->lse, o->B, o->T, o->NH, o->NKV, o->HS);
        else be->attention_forward(be, NULL, o->y, o->lse, o->x, o->B, o->T, o->NH, o->NKV, o->HS);
    } else if (o->op == CAL_LM_HEAD) {
        if (backward) be->matmul_backward_ld(be, NULL, o->dx, o->dw, o->dy, o->x, o->w, o->N, o->in, o->out, o->ld);
        else be->matmul_forward_ld(be, NULL, o->y, o->x, o->w, o->N, o->in, o->out, o->ld);
    } else if (backward && o->gelu_in) {  // as block_backward: the GELU's backward rides on dinp
        be->matmul_backward(be, NULL, NULL, o->dw, o->db, o->dy, o->x, o->w, NULL, o->N, o->in, o->out);
        be->matmul_dinp_gelu(be, NULL, o->dx, o->dy, o->w, o->pre, o->N, o->in, o->out);
    } else if (backward) {
        be->matmul_backward(be, NULL, o->dx, o->dw, o->db, o->dy, o->x, o->w, NULL, o->N, o->in, o->out);
    } else {
        // only fc's forward has the GELU epilogue (fc_proj's pre is its input's, for the backward)
        be->matmul_forward(be, NULL, o->y, o->gelu ? o->pre : NULL, o->x, o->w, o->bias, o->N, o->in, o->out);
    }
}

// mean microseconds per call after warmup
static double time_us(OpRun *o, int backward, int warmup, int iters) {
    Backend *be = o->be;
    for (int i = 0; i < warmup; i++) op_call(o, backward);
    BackendEvent *a = be->event_create(be), *z = be->event_create(be);
    be->event_record(be, a, NULL);
    for (int i = 0; i < iters; i++) op_call(o, backward);
    be->event_record(be, z, NULL);
    be->event_synchronize(be, z);
    double us = 1e3 * be->event_elapsed_ms(be, a, z) / iters;
    be->event_destroy(be, a);
    be->event_destroy(be, z);
    return us;
}

int calibrate_ops(Backend *be, const ModelConfig *m, const int *bs, int nb, const int *tps, int ntp, int warmup,
                  int iters, CalibEntry *out, int max, char *err, size_t errlen) {
    if (m->heads <= 0 || m->hidden % m->heads || m->kv_heads <= 0 || iters < 1 || warmup < 0) {
        snprintf(err, errlen, "calibrate: bad shape or counts (hidden %d, heads %d, kv_heads %d, iters %d)", m->hidden,
                 m->heads, m->kv_heads, iters);
        return -1;
    }
    int n = 0;
    uint64_t seed = 12345;
    for (int i = 0; i < nb; i++)
        for (int j = 0; j < ntp; j++)
            for (int op = 0; op < CALIB_OPS; op++) {
                if (!op_applies(m, op, tps[j])) continue;
                if (n == max) {
                    snprintf(err, errlen, "calibrate: more than %d entries", max);
                    return -1;
                }
                OpRun o;
                if (op_setup(&o, be, m, op, bs[i], tps[j], &seed)) {
                    op_free(&o);
                    snprintf(err, errlen, "calibrate: out of device memory for %s at b=%d, tp=%d (hint: smaller "
                             "--b values)", op_names[op], bs[i], tps[j]);
                    return -1;
                }
                // the backward needs the forward's out and lse (attention), y, rstd and the bits (lean) once
                op_call(&o, 0);
                out[n] = (CalibEntry){op_names[op], bs[i], m->seq_len, tps[j],
                                      no_forward(op) ? 0.0 : time_us(&o, 0, warmup, iters), time_us(&o, 1, warmup, iters)};
                n++;
                op_free(&o);
            }
    return n;
}

int calibrate_write(const char *path, const char *device, const CalibEntry *e, int n, char *err, size_t errlen) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);  // the whole table, then one atomic write
    if (!f) {
        snprintf(err, errlen, "%s: out of memory for the op table", path);
        return -1;
    }
    fprintf(f, "mist-optable 1\n# measured by mist-calibrate on %s; times per call, per tp rank\n", device);
    fprintf(f, "# %-10s %4s %6s %4s %12s %12s\n", "op", "b", "s", "tp", "fwd_us", "bwd_us");
    for (int i = 0; i < n; i++)
        fprintf(f, "%-12s %4d %6d %4d %12.3f %12.3f\n", e[i].op, e[i].b, e[i].s, e[i].tp, e[i].fwd_us, e[i].bwd_us);
    int rc = -1;
    if (fclose(f) != 0 || !text)
        snprintf(err, errlen, "%s: out of memory for the op table", path ? path : "stdout");
    else if (!path)
        rc = fwrite(text, 1, len, stdout) == len && fflush(stdout) == 0 ? 0 : -1;
    else
        rc = mist_write_file_atomic(path, text, len, err, errlen);
    if (rc && !path && text) snprintf(err, errlen, "stdout: write failed: %s", strerror(errno));
    free(text);
    return rc;
}

// The ops the runtime runs inside a measured neighbour (models/ops.h) are
// listed at 0: the planner would otherwise add its own estimate on top of the
// neighbour's time and report a fallback.
int calibrate_add_fused(const ModelConfig *m, CalibEntry *e, int n, int max) {
    int measured = n;
    for (int i = 0; i < measured; i++) {
        const char *fused = NULL;
        if (!strcmp(e[i].op, "fc") && m->activation != ACT_SWIGLU) fused = "gelu";
        else if (!strcmp(e[i].op, "ln2")) fused = "attn_residual";
        else if (!strcmp(e[i].op, "embedding") && m->position == POS_LEARNED) fused = "pos_embedding";
        if (!fused || n == max) continue;
        e[n] = e[i];
        e[n].op = fused;
        e[n].fwd_us = e[n].bwd_us = 0;
        n++;
    }
    return n;
}

int calibrate_run(const ModelConfig *m, MistDtype cpu_dtype, const int *bs, int nb, const int *tps, int ntp, int iters,
                  const char *path, char *device, size_t devlen, char *err, size_t errlen) {
    Backend *be = NULL;
    snprintf(device, devlen, "cpu");
#ifdef HAVE_CUDA
    const char *force = getenv("MIST_DEVICE");  // "cpu": time the CPU backend on a GPU machine
    if (!force || strcmp(force, "cpu")) {
        be = backend_cuda_create(MIST_BF16, 0, err, errlen);
        if (be) snprintf(device, devlen, "cuda:0");
    }
#endif
    if (!be) {
        char why[1024];
        be = backend_cpu_create(cpu_dtype, why, sizeof why);
        if (!be) {
            snprintf(err, errlen, "cannot start the cpu backend: %s", why);
            return -1;
        }
        snprintf(device, devlen, "the cpu backend (%s)", cpu_dtype == MIST_BF16 ? "bf16" : "fp32");
    }
    int max = nb * ntp * (CALIB_OPS + CALIB_FUSED);
    CalibEntry *e = calloc((size_t)max, sizeof *e);
    int n = e ? calibrate_ops(be, m, bs, nb, tps, ntp, 2, iters, e, max, err, errlen) : -1;
    if (!e) snprintf(err, errlen, "out of host memory");
    if (n >= 0) n = calibrate_add_fused(m, e, n, max);
    if (n >= 0 && calibrate_write(path, device, e, n, err, errlen) != 0) n = -1;
    free(e);
    be->destroy(be);
    return n;
}
