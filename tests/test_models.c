// models/: exact parameter counts, Megatron FLOP and activation formulas,
// tensor-parallel sharding, GQA shapes, and the concrete API agreeing with the
// symbolic op list it is evaluated from.
#include <stdint.h>
#include <string.h>
#include "models/model.h"
#include "models/model_flops.h"
#include "models/ops.h"
#include "tests/tap.h"

static ModelConfig gpt(int L, int h, int a, int V, int s) { return model_family_config(FAMILY_GPT, L, h, a, V, s); }

static ModelConfig llama7b(void) { return model_family_config(FAMILY_LLAMA, 32, 4096, 32, 32000, 4096); }

// A part's op list evaluated at (b, s, tp, eb).
typedef struct {
    ExprCtx *cx;
    ModelOpList ops;
    PartCost c;
    double v[4];
} Sym;

static int sym_build(Sym *y, const ModelConfig *m, ModelPart part, double b, double s, double tp, double eb) {
    y->cx = expr_ctx_new();
    if (model_build(y->cx, m, part, &y->ops) != 0) return -1;
    model_part_cost(y->cx, &y->ops, &y->c);
    y->v[expr_sym_index(y->cx, "b")] = b;
    y->v[expr_sym_index(y->cx, "s")] = s;
    y->v[expr_sym_index(y->cx, "tp")] = tp;
    y->v[expr_sym_index(y->cx, "eb")] = eb;
    return 0;
}
static double ev(Sym *y, Expr e) { return expr_eval(y->cx, e, y->v); }
static void sym_free(Sym *y) { expr_ctx_free(y->cx); }

static int64_t part_params_concrete(const ModelConfig *m, ModelPart part) {
    ParamSpec spec[MODEL_MAX_PARAMS];
    int n = model_params(m, part, spec, MODEL_MAX_PARAMS);
    int64_t sum = 0;
    for (int i = 0; i < n; i++) sum += spec[i].rows * spec[i].cols;
    return n < 0 ? -1 : sum;
}

static void test_param_counts(void) {
    // the family defaults a configuration gets (docs/config.md)
    ModelConfig d = llama7b();
    ok(d.ffn_hidden == 11008 && model_default_ffn(ACT_SWIGLU, 5120) == 13824 && model_default_ffn(ACT_GELU, 768) == 3072,
       "default MLP widths: SwiGLU 4096 -> 11008, 5120 -> 13824; GELU 4h");
    ok(d.norm == NORM_RMSNORM && d.position == POS_ROTARY && !d.bias && !d.tied_embeddings && d.kv_heads == 32 &&
           d.norm_eps == 1e-6,
       "Llama family: RMSNorm, rotary, no biases, untied, kv_heads = heads, eps 1e-6");
    // GPT-2 small: per block 12h^2 (qkv 3h^2, proj h^2, fc 4h^2, fc_proj 4h^2) + 13h
    // (qkv_b 3h, proj_b h, fc_b 4h, fc_proj_b h, two layernorms 4h), wte Vh, wpe sh, lnf 2h
    ModelConfig m = gpt(12, 768, 12, 50257, 1024);
    int64_t h = 768, L = 12, V = 50257, s = 1024;
    int64_t want = L * (12 * h * h + 13 * h) + V * h + s * h + 2 * h;
    ok(want == 124439808, "GPT-2 small formula by hand = 124,439,808");
    ok(model_param_count(&m) == want, "GPT-2 small tied with biases: %lld", (long long)model_param_count(&m));
    m.tied_embeddings = 0;
    ok(model_param_count(&m) == want + V * h, "GPT-2 small untied adds the V x h head");

    // GPT-3 XL 1.3B: h 2048, 24 layers, 16 heads, s 2048
    ModelConfig g3 = gpt(24, 2048, 16, 50257, 2048);
    h = 2048, L = 24, s = 2048;
    int64_t want3 = L * (12 * h * h + 13 * h) + V * h + s * h + 2 * h;
    ok(model_param_count(&g3) == want3, "GPT-3 1.3B: %lld (want %lld)", (long long)model_param_count(&g3),
       (long long)want3);

    // Llama-7B: per block q,k,v,o 4h^2, SwiGLU 3hF, two RMSNorm weights 2h; embedding and
    // untied head 2Vh, final norm h
    ModelConfig l7 = llama7b();
    h = 4096;
    int64_t F = 11008;
    V = 32000;
    int64_t want7 = 32 * (4 * h * h + 3 * h * F + 2 * h) + 2 * V * h + h;
    ok(want7 == 6738415616LL, "Llama-7B formula by hand = 6,738,415,616");
    ok(model_param_count(&l7) == want7, "Llama-7B: %lld", (long long)model_param_count(&l7));

    // parallel (Falcon) block drops ln2
    ModelConfig p = gpt(12, 768, 12, 50257, 1024);
    p.parallel_block = 1;
    ok(model_param_count(&p) == 124439808 - 12 * 2 * 768, "parallel block: no ln2 (2h less per layer)");

    // Falcon-7B (examples/falcon-7b.ini): parallel blocks, 71 heads of 64, one kv head, no
    // biases, tied: per block one LayerNorm 2h, qkv (71 + 2) * 64 * h, dense h^2, MLP 2hF;
    // embedding Vh, final norm 2h
    ModelConfig f7 = gpt(32, 4544, 71, 65024, 2048);
    f7.kv_heads = 1, f7.ffn_hidden = 18176, f7.position = POS_ROTARY, f7.bias = 0, f7.parallel_block = 1;
    h = 4544, F = 18176, V = 65024;
    int64_t wantf = 32 * (2 * h + 73 * 64 * h + h * h + 2 * h * F) + V * h + 2 * h;
    ok(wantf == 6921720704LL, "Falcon-7B formula by hand = 6,921,720,704 (its published count)");
    ok(model_param_count(&f7) == wantf, "Falcon-7B: %lld", (long long)model_param_count(&f7));
}

static int names_are(const ModelConfig *m, ModelPart part, const char *const *want, int nwant) {
    ParamSpec spec[MODEL_MAX_PARAMS];
    int n = model_params(m, part, spec, MODEL_MAX_PARAMS);
    if (n != nwant) {
        diag("got %d tensors, want %d", n, nwant);
        return 0;
    }
    for (int i = 0; i < n; i++)
        if (strcmp(spec[i].name, want[i]) != 0) {
            diag("tensor %d: got %s want %s", i, spec[i].name, want[i]);
            return 0;
        }
    return 1;
}

static void test_param_layout(void) {
    ModelConfig g = gpt(2, 64, 4, 256, 64);
    const char *blk[] = {"ln1_w", "ln1_b", "qkv_w", "qkv_b", "attn_proj_w", "attn_proj_b",
                         "ln2_w", "ln2_b", "fc_w", "fc_b", "fc_proj_w", "fc_proj_b"};
    ok(names_are(&g, PART_BLOCK, blk, 12), "GPT block parameter order");
    const char *pre[] = {"wte", "wpe"}, *post_tied[] = {"lnf_w", "lnf_b"};
    ok(names_are(&g, PART_PRE, pre, 2), "GPT pre: wte, wpe");
    ok(names_are(&g, PART_POST, post_tied, 2), "GPT post tied: lnf_w, lnf_b");

    ModelConfig l = llama7b();
    l.kv_heads = 8;
    const char *lblk[] = {"ln1_w", "qkv_w", "attn_proj_w", "ln2_w", "fc_w", "fc_proj_w"};
    const char *lpre[] = {"wte"}, *lpost[] = {"lnf_w", "lm_head_w"};
    ok(names_are(&l, PART_BLOCK, lblk, 6), "Llama block parameter order");
    ok(names_are(&l, PART_PRE, lpre, 1) && names_are(&l, PART_POST, lpost, 2), "Llama pre/post");

    ParamSpec spec[MODEL_MAX_PARAMS];
    model_params(&l, PART_BLOCK, spec, MODEL_MAX_PARAMS);
    // GQA: 32 query heads + 2 x 8 kv heads of 128
    ok(spec[1].rows == (32 + 16) * 128 && spec[1].cols == 4096 && spec[1].tp_split == 1 && spec[1].decay,
       "Llama GQA qkv_w (6144 x 4096), column-parallel, decayed");
    ok(spec[2].rows == 4096 && spec[2].cols == 4096 && spec[2].tp_split == 2, "attn_proj_w row-parallel");
    ok(spec[4].rows == 2 * 11008 && spec[4].tp_split == 1, "SwiGLU fc_w = [gate | up] (2F x h)");
    ok(spec[5].rows == 4096 && spec[5].cols == 11008 && spec[5].tp_split == 2, "fc_proj_w (h x F)");
    ok(spec[0].cols == 1 && !spec[0].decay && spec[0].tp_split == 0, "norm weight: vector, no decay, replicated");

    ModelConfig bad = g;
    bad.heads = 5;
    ok(model_params(&bad, PART_BLOCK, spec, MODEL_MAX_PARAMS) < 0, "heads not dividing hidden is refused");
    bad = l;
    bad.kv_heads = 5;
    ok(model_param_count(&bad) < 0, "kv_heads not dividing heads is refused");
    ok(model_params(&g, PART_BLOCK, spec, 3) < 0, "too small an output array is refused");
}

static void test_flops(void) {
    // Megatron: 72*B*s*L*h^2*(1 + s/(6h) + V/(12 L h)) for a GPT with a 4h MLP
    ModelConfig g = gpt(24, 2048, 16, 50257, 2048);
    double B = 512, s = 2048, L = 24, h = 2048, V = 50257;
    double meg = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h));
    ok(near(model_flops_train(&g, B, 2048), meg, 0, 1e-12, "megatron"), "GPT-3 1.3B model FLOPs = Megatron formula");
    // HFU with full recompute: 96*B*s*L*h^2*(1 + s/(6h) + V/(16 L h))
    double hfu = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
    ok(near(model_flops_hardware(&g, B, 2048, 24), hfu, 0, 1e-12, "megatron hfu"),
       "full recompute = Megatron hardware-FLOPs formula");
    ok(near(model_flops_per_token(&g, 2048) * 2048, model_flops_train(&g, 1, 2048), 0, 1e-12, "per token"),
       "per-token FLOPs x s = FLOPs of one sequence");
    ok(model_flops_kernels(&g, B, 2048, 0) < model_flops_train(&g, B, 2048) * 1.01 &&
           model_flops_kernels(&g, B, 2048, 0) > model_flops_train(&g, B, 2048) * 0.9,
       "kernel FLOPs (causal attention ~half the scores, elementwise ops) near model FLOPs");

    // Llama with GQA, by hand per op: qkv 2N h (a+2kv)hd, proj 2N h^2, SwiGLU 3 matmuls 2N h F,
    // scores 4 b s^2 a hd, head 2N h V; backward 2x
    ModelConfig l = llama7b();
    l.kv_heads = 8;
    double lh = 4096, hd = 128, F = 11008, N = 4 * 4096.0, lV = 32000;
    double fwd = 32 * (2 * N * lh * (32 + 16) * hd + 2 * N * lh * lh + 3 * 2 * N * lh * F +
                       4 * 4 * 4096.0 * 4096.0 * 32 * hd) +
                 2 * N * lh * lV;
    ok(near(model_flops_train(&l, 4, 4096), 3 * fwd, 0, 1e-12, "llama"), "Llama GQA + SwiGLU FLOPs by op");
}

static double saved_bytes(const ModelConfig *m, int64_t b, int64_t s, int tp, int ckpt, double eb) {
    ActSpec a[MODEL_MAX_ACTS];
    int n = model_acts(m, PART_BLOCK, b, s, tp, a, MODEL_MAX_ACTS);
    double sum = 0;
    for (int i = 0; i < n; i++)
        if (ckpt ? a[i].ckpt_saved : a[i].saved) sum += (double)a[i].elems * (a[i].f32 ? 4 : eb);
    return n < 0 ? -1 : sum;
}

static void test_activations(void) {
    // Megatron (Korthikanti et al.) per layer, fp16: s*b*h*(34 + 5*a*s/h) bytes. Its terms:
    // attention 11sbh (ln1 out 2, q k v 6, proj input 2, dropout mask 1) + 5as^2b (scores,
    // softmax, dropout), MLP 19sbh (input 2, fc 8, gelu 8, dropout mask 1), norms' inputs 4sbh.
    // We keep no dropout masks and no s x s matrix (flash-style lse instead), so the
    // storage-dtype part must be 32sbh, plus f32 norm stats 2 x 2 x 4 bytes per row and
    // lse 4 bytes per (b, head, s).
    ModelConfig g = gpt(24, 2048, 16, 50257, 2048);
    double b = 2, s = 2048, h = 2048, a = 16;
    double megatron = s * b * h * (34 + 5 * a * s / h);
    double no_drop_no_scores = megatron - 2 * s * b * h - 5 * a * s * s * b;
    double ours = saved_bytes(&g, 2, 2048, 1, 0, 2);
    ok(near(ours - 16 * b * s - 4 * b * a * s, no_drop_no_scores, 0, 1e-12, "32sbh"),
       "saved block bytes = Megatron 34sbh+5as^2b without dropout masks and scores (+ f32 stats, lse)");
    // with tp (no sequence parallelism): s*b*h*(10 + 24/t + 5as/(ht)); without the 2 masks: 8 + 24/t
    for (int t = 2; t <= 8; t *= 2) {
        double want = s * b * h * (8 + 24.0 / t) + 16 * b * s + 4 * b * (a / t) * s;
        ok(near(saved_bytes(&g, 2, 2048, t, 0, 2), want, 0, 1e-12, "tp"), "saved bytes at tp=%d: sbh(8 + 24/t)", t);
    }
    ok(near(saved_bytes(&g, 2, 2048, 4, 1, 2), 2 * s * b * h, 0, 0, "ckpt"),
       "checkpointed block keeps only its input (2sbh, Megatron full recompute)");

    // Llama GQA shapes: qkv (N, (a+2kv)hd/tp), lse (b, a/tp, s), fc (N, 2F/tp)
    ModelConfig l = llama7b();
    l.kv_heads = 8;
    ActSpec acts[MODEL_MAX_ACTS];
    int n = model_acts(&l, PART_BLOCK, 1, 4096, 4, acts, MODEL_MAX_ACTS);
    int64_t qkv = -1, lse = -1, fc = -1, act = -1, mean = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(acts[i].name, "qkv")) qkv = acts[i].elems;
        if (!strcmp(acts[i].name, "lse")) lse = acts[i].f32 ? acts[i].elems : -2;
        if (!strcmp(acts[i].name, "fc")) fc = acts[i].elems;
        if (!strcmp(acts[i].name, "act")) act = acts[i].elems;
        if (strstr(acts[i].name, "mean")) mean = 1;
    }
    ok(qkv == 4096LL * (8 + 2 * 2) * 128, "Llama GQA tp=4: qkv (N, (8 + 2*2)*128)");
    ok(lse == 4096LL * 8, "lse f32(b, a/tp, s)");
    ok(fc == 4096LL * 2 * 2752 && act == 4096LL * 2752, "SwiGLU fc (N, 2F/tp), act (N, F/tp)");
    ok(!mean, "RMSNorm keeps no mean");

    // post: logits (N, V) storage dtype, losses f32(N)
    ModelConfig t = gpt(2, 64, 4, 256, 64);
    n = model_acts(&t, PART_POST, 3, 64, 1, acts, MODEL_MAX_ACTS);
    int64_t logits = -1, losses = -1;
    for (int i = 0; i < n; i++) {
        if (!strcmp(acts[i].name, "logits")) logits = acts[i].f32 ? -2 : acts[i].elems;
        if (!strcmp(acts[i].name, "losses")) losses = acts[i].f32 ? acts[i].elems : -2;
    }
    ok(logits == 3 * 64 * 256 && losses == 3 * 64, "post: logits X(N,V), losses f32(N)");
    ok(model_acts(&t, PART_BLOCK, 0, 64, 1, acts, MODEL_MAX_ACTS) < 0, "b = 0 is refused");
}

// Sequence parallelism (model_acts_sp): every saved tensor of a block is 1/tp
// of its tp = 1 size (Korthikanti et al.: sbh(34/t + 5as/(ht)) with sp, i.e.
// 32sbh/t here without dropout masks and scores), the checkpointed input too;
// the gathered norm output ln_full (N,h) and d_norm (k*h) exist only under sp.
static void test_sequence_parallel(void) {
    ModelConfig cfgs[3] = {gpt(24, 2048, 16, 50257, 2048), llama7b(), gpt(2, 64, 4, 256, 64)};
    cfgs[1].kv_heads = 8;
    cfgs[2].parallel_block = 1;
    int good = 1;
    for (int k = 0; k < 3; k++)
        for (int tp = 2; tp <= 8 && model_tp_shards(&cfgs[k], tp); tp *= 2) {
            ActSpec one[MODEL_MAX_ACTS], sp[MODEL_MAX_ACTS];
            int n1 = model_acts_sp(&cfgs[k], PART_BLOCK, 2, cfgs[k].seq_len, 1, 0, one, MODEL_MAX_ACTS);
            int n = model_acts_sp(&cfgs[k], PART_BLOCK, 2, cfgs[k].seq_len, tp, 1, sp, MODEL_MAX_ACTS);
            double saved1 = 0, saved = 0, ck1 = 0, ck = 0, full = -1, dnorm = -1;
            for (int i = 0; i < n1; i++) {
                double bytes = (double)one[i].elems * (one[i].f32 ? 4 : 2);
                saved1 += one[i].saved ? bytes : 0, ck1 += one[i].ckpt_saved ? bytes : 0;
            }
            for (int i = 0; i < n; i++) {
                double bytes = (double)sp[i].elems * (sp[i].f32 ? 4 : 2);
                saved += sp[i].saved ? bytes : 0, ck += sp[i].ckpt_saved ? bytes : 0;
                if (!strcmp(sp[i].name, "ln_full")) full = (double)sp[i].elems;
                if (!strcmp(sp[i].name, "d_norm")) dnorm = (double)sp[i].elems;
            }
            double N = 2.0 * cfgs[k].seq_len, h = cfgs[k].hidden;
            int norms = cfgs[k].parallel_block ? 1 : 2, per_norm = cfgs[k].norm == NORM_LAYERNORM ? 2 : 1;
            if (n != n1 || saved * tp != saved1 || ck * tp != ck1 || full != N * h || dnorm != norms * per_norm * h) {
                diag("config %d tp %d: saved %g x tp vs %g, ckpt %g x tp vs %g, ln_full %g, d_norm %g", k, tp, saved,
                     saved1, ck, ck1, full, dnorm);
                good = 0;
            }
        }
    ok(good, "sp: a block's saved and checkpointed bytes are 1/tp of tp = 1's (GPT, Llama GQA, parallel blocks, tp 2-8)");
    ActSpec a[MODEL_MAX_ACTS], z[MODEL_MAX_ACTS];
    ModelConfig g = gpt(2, 64, 4, 256, 64);
    int n = model_acts(&g, PART_BLOCK, 1, 64, 2, z, MODEL_MAX_ACTS);
    int zero = n > 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(z[i].name, "ln_full") || !strcmp(z[i].name, "d_norm")) zero &= z[i].elems == 0;
    ok(zero, "without sp, ln_full and d_norm are listed with 0 elements");
    ok(model_acts_sp(&g, PART_BLOCK, 1, 64, 1, 1, a, MODEL_MAX_ACTS) < 0 &&
           model_acts_sp(&g, PART_BLOCK, 1, 63, 2, 1, a, MODEL_MAX_ACTS) < 0,
       "sp is refused at tp = 1 and when tp does not divide b*s");
}

static void test_tensor_parallel(void) {
    ModelConfig g = gpt(24, 2048, 16, 50257, 2048);
    double h = 2048;
    Sym y1, y4;
    sym_build(&y1, &g, PART_BLOCK, 2, 2048, 1, 2);
    sym_build(&y4, &g, PART_BLOCK, 2, 2048, 4, 2);
    // split: qkv_w 3h^2 + qkv_b 3h + proj_w h^2 + fc_w 4h^2 + fc_b 4h + fc_proj_w 4h^2;
    // replicated: ln1, ln2 (4h) and the row-parallel biases (2h)
    ok(near(ev(&y4, y4.c.params), (12 * h * h + 7 * h) / 4 + 6 * h, 0, 0, "tp params"),
       "block params per rank at tp=4: (12h^2 + 7h)/4 + 6h");
    ok(near(ev(&y4, y4.c.flops_fwd), ev(&y1, y1.c.flops_fwd) / 4, 0, 1e-12, "tp fwd") &&
           near(ev(&y4, y4.c.flops_bwd), ev(&y1, y1.c.flops_bwd) / 4, 0, 1e-12, "tp bwd"),
       "block model FLOPs per rank divide by tp");
    double nc = 2 * 2048 * h * 2;
    ok(ev(&y1, y1.c.tp_comm_bytes_fwd) == 0 && ev(&y1, y1.c.tp_comm_bytes_bwd) == 0, "no all-reduce at tp=1");
    ok(near(ev(&y4, y4.c.tp_comm_bytes_fwd), 2 * nc, 0, 0, "comm") &&
           near(ev(&y4, y4.c.tp_comm_bytes_bwd), 2 * nc, 0, 0, "comm"),
       "Megatron TP: two (N,C) all-reduces forward, two backward");
    sym_free(&y1);
    sym_free(&y4);

    // GQA with tp > kv_heads: each rank keeps whole heads, 32/16 query heads and one
    // (replicated) kv head of 8: qkv rows (2 + 2*1)*128 per rank
    ModelConfig l = llama7b();
    l.kv_heads = 8;
    Sym y16;
    sym_build(&y16, &l, PART_BLOCK, 1, 4096, 16, 2);
    ok(near(ev(&y16, y16.ops.op[1].params), (2 + 2 * 1) * 128.0 * 4096, 0, 0, "gqa tp16"),
       "GQA tp=16 > kv_heads=8: qkv_w per rank (2 + 2*1)*128 x 4096");
    sym_free(&y16);

    g.parallel_block = 1;
    sym_build(&y4, &g, PART_BLOCK, 2, 2048, 4, 2);
    ok(near(ev(&y4, y4.c.tp_comm_bytes_fwd), nc, 0, 0, "comm") &&
           near(ev(&y4, y4.c.tp_comm_bytes_bwd), nc, 0, 0, "comm"),
       "parallel block: one all-reduce each way");
    sym_free(&y4);
}

// The concrete API is the symbolic op list evaluated: params, acts and their bytes agree.
static void test_concrete_matches_symbolic(void) {
    ModelConfig cfgs[3] = {gpt(4, 128, 4, 256, 64), llama7b(), gpt(4, 96, 6, 1000, 128)};
    cfgs[1].kv_heads = 8;
    cfgs[2].parallel_block = 1;
    cfgs[2].tied_embeddings = 0;
    for (int k = 0; k < 3; k++) {
        int good = 1;
        for (int part = PART_PRE; part <= PART_POST; part++) {
            for (int tp = 1; tp <= 4; tp *= 2) {
                // ParamSpec's row split ceil(rows/tp) is per-head exact only when tp divides kv_heads
                if (cfgs[k].kv_heads % tp) continue;
                Sym y;
                sym_build(&y, &cfgs[k], (ModelPart)part, 3, 64, tp, 2);
                ParamSpec spec[MODEL_MAX_PARAMS];
                int np = model_params(&cfgs[k], (ModelPart)part, spec, MODEL_MAX_PARAMS);
                double per_rank = 0;
                for (int i = 0; i < np; i++) {
                    double r = (double)spec[i].rows, c = (double)spec[i].cols;
                    if (spec[i].tp_split == 1) r = ceil(r / tp);
                    if (spec[i].tp_split == 2) c = ceil(c / tp);
                    per_rank += r * c;
                }
                if (per_rank != ev(&y, y.c.params)) {
                    diag("config %d part %d tp %d: params %g vs %g", k, part, tp, per_rank, ev(&y, y.c.params));
                    good = 0;
                }
                ActSpec acts[MODEL_MAX_ACTS];
                int na = model_acts(&cfgs[k], (ModelPart)part, 3, 64, tp, acts, MODEL_MAX_ACTS);
                double saved = 0, ck = 0;
                for (int i = 0; i < na; i++) {
                    double bytes = (double)acts[i].elems * (acts[i].f32 ? 4 : 2);
                    if (acts[i].saved) saved += bytes;
                    if (acts[i].ckpt_saved) ck += bytes;
                }
                if (na != y.ops.n_tensors || saved != ev(&y, y.c.saved) || ck != ev(&y, y.c.saved_ckpt)) {
                    diag("config %d part %d tp %d: acts %d/%d saved %g vs %g", k, part, tp, na, y.ops.n_tensors,
                         saved, ev(&y, y.c.saved));
                    good = 0;
                }
                sym_free(&y);
            }
        }
        ok(good, "config %d: model_params / model_acts = the op list evaluated (tp 1, 2, 4 dividing kv_heads)", k);
        if (k == 0) {
            int64_t sum = part_params_concrete(&cfgs[k], PART_PRE) + 4 * part_params_concrete(&cfgs[k], PART_BLOCK) +
                          part_params_concrete(&cfgs[k], PART_POST);
            ok(sum == model_param_count(&cfgs[k]), "model_param_count = pre + L*block + post");
        }
    }
}

static void test_bytes_and_transients(void) {
    ModelConfig g = gpt(2, 64, 4, 256, 64);
    Sym y;
    sym_build(&y, &g, PART_BLOCK, 2, 64, 1, 4);
    int all_positive = 1;
    for (int i = 0; i < y.ops.n_ops; i++) {
        const ModelOp *op = &y.ops.op[i];
        if (!(ev(&y, op->bytes_fwd) > 0)) all_positive = 0;
        if (op->kind != MOP_RESIDUAL && !(ev(&y, op->bytes_bwd) > 0)) all_positive = 0;
    }
    ok(all_positive, "every op moves bytes (residual backward is free)");
    double N = 128, C = 64;
    // matmul qkv forward: read inp (N,C), W (3C,C), bias, write (N,3C); 4 bytes each
    ok(near(ev(&y, y.ops.op[1].bytes_fwd), 4 * (N * C + 3 * C * C + 3 * C + 3 * N * C), 0, 0, "qkv bytes"),
       "qkv matmul forward bytes");
    // transient forward: scratch (N,C); backward: scratch, d_res, d_ln, d_att (N,C) each,
    // d_qkv (N,3C), d_act and d_fc (N,4C)
    ok(near(ev(&y, y.c.transient_fwd), 4 * N * C, 0, 0, "tf"), "forward working set = scratch (N,C)");
    ok(near(ev(&y, y.c.transient_bwd), 4 * N * C * (4 + 3 + 8), 0, 0, "tb"), "backward working set");
    // the dump names every op of the list
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    model_ops_print(mem, y.cx, &y.ops);
    fclose(mem);
    int named = text != NULL;
    for (int i = 0; named && i < y.ops.n_ops; i++) named = strstr(text, y.ops.op[i].name) != NULL;
    ok(named && strstr(text, "matmul") && strstr(text, "gelu") && strstr(text, "gemm_k") && strstr(text, "lse"),
       "model_ops_print lists ops, kinds, GEMM shapes and tensors");
    free(text);
    sym_free(&y);
    // every matmul's GEMM (m x n, inner k) is its forward FLOPs, 2 m n k, with m = b*s rows,
    // at tp 1 and 2 (n or k split per rank), in the block and the head
    int gemms = 0, consistent = 1;
    for (int tp = 1; tp <= 2; tp++)
        for (int part = PART_BLOCK; part <= PART_POST; part++) {
            Sym z;
            sym_build(&z, &g, (ModelPart)part, 2, 64, tp, 4);
            for (int i = 0; i < z.ops.n_ops; i++) {
                const ModelOp *op = &z.ops.op[i];
                if (op->kind != MOP_MATMUL) continue;
                gemms++;
                double m = ev(&z, op->gemm_m), n = ev(&z, op->gemm_n), k = ev(&z, op->gemm_k);
                if (m != 128 || !(n > 0 && k > 0) || !near(2 * m * n * k, ev(&z, op->hw_flops_fwd), 0, 1e-12, op->name))
                    consistent = 0;
            }
            sym_free(&z);
        }
    ok(gemms == 10 && consistent, "each of the %d matmuls (block and head, tp 1 and 2) has m = b*s and 2mnk = its FLOPs",
       gemms);
}

// [model] vocab_pad: wte holds the padded rows and the LM head's GEMM runs over them
// (kernel FLOPs: 2 forward + 4 backward per multiply-add of the padded rows),
// while the parameter count and the model FLOPs (MFU) keep the real vocabulary
static void test_vocab_pad(void) {
    ModelConfig padded = gpt(12, 768, 12, 50257, 1024), plain = padded;
    plain.vocab_pad = 1;
    int Vp = (50257 + 127) / 128 * 128;
    ParamSpec spec[MODEL_MAX_PARAMS];
    int n = model_params(&padded, PART_PRE, spec, MODEL_MAX_PARAMS);
    ok(n > 0 && !strcmp(spec[0].name, "wte") && spec[0].rows == Vp && model_vocab_padded(&padded) == Vp,
       "GPT-2 by default: wte holds %d rows (50257 rounded up to 128)", n > 0 ? (int)spec[0].rows : -1);
    n = model_params(&plain, PART_PRE, spec, MODEL_MAX_PARAMS);
    ok(n > 0 && spec[0].rows == 50257, "vocab_pad = 1: wte holds the 50257 rows");
    ok(model_param_count(&padded) == model_param_count(&plain) && model_param_count(&plain) == 124439808,
       "the parameter count is the real vocabulary's under any vocab_pad");
    double B = 8, s = 1024;
    ok(model_flops_train(&padded, B, 1024) == model_flops_train(&plain, B, 1024),
       "model FLOPs (MFU) count the real vocabulary");
    double extra = model_flops_kernels(&padded, B, 1024, 0) - model_flops_kernels(&plain, B, 1024, 0);
    double gemm = 6 * B * s * 768 * (Vp - 50257);
    ok(extra >= gemm && extra < gemm * 1.01, "kernel FLOPs add the padded rows' LM-head GEMMs: %g (GEMMs %g)", extra,
       gemm);
}

int main(void) {
    test_param_counts();
    test_vocab_pad();
    test_param_layout();
    test_flops();
    test_activations();
    test_tensor_parallel();
    test_sequence_parallel();
    test_concrete_matches_symbolic();
    test_bytes_and_transients();
    return tap_done();
}
