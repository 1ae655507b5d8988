// Tensor-parallel parameter shards: every element of every tensor lands on
// exactly the ranks it should (once when split, everywhere when replicated),
// extract/insert round-trip, the head and SwiGLU sections are cut as the
// layout says, and the column-/row-parallel pairs compute the unsplit layer:
// sum over ranks of f(x W1_t^T) W2_t^T = f(x W1^T) W2^T.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/tp_shard.h"
#include "tests/tap.h"

static void gpt(ModelConfig *m) {
    memset(m, 0, sizeof *m);
    m->family = FAMILY_GPT, m->layers = 2, m->hidden = 64, m->heads = 4, m->kv_heads = 4, m->ffn_hidden = 256;
    m->vocab = 257, m->seq_len = 32, m->norm = NORM_LAYERNORM, m->activation = ACT_GELU;
    m->position = POS_LEARNED, m->bias = 1, m->tied_embeddings = 1, m->norm_eps = 1e-5;
}

static void llama(ModelConfig *m) {
    memset(m, 0, sizeof *m);
    m->family = FAMILY_LLAMA, m->layers = 2, m->hidden = 64, m->heads = 8, m->kv_heads = 2, m->ffn_hidden = 176;
    m->vocab = 259, m->seq_len = 32, m->norm = NORM_RMSNORM, m->activation = ACT_SWIGLU;
    m->position = POS_ROTARY, m->bias = 0, m->tied_embeddings = 0, m->norm_eps = 1e-5;
}

// every tensor of every part: shards cover split tensors exactly once and
// replicated ones whole on every rank; extract then insert restores global
static int covers_exactly(const ModelConfig *m, int tp) {
    int good = 1;
    for (int part = PART_PRE; part <= PART_POST; part++) {
        ParamSpec ps[MODEL_MAX_PARAMS];
        int n = model_params(m, (ModelPart)part, ps, MODEL_MAX_PARAMS);
        for (int k = 0; k < n; k++) {
            size_t N = (size_t)(ps[k].rows * ps[k].cols);
            float *g = malloc(N * sizeof *g), *back = malloc(N * sizeof *back), *sh = malloc(N * sizeof *sh);
            int *hits = calloc(N, sizeof *hits);
            for (size_t i = 0; i < N; i++) g[i] = (float)i, back[i] = -1;
            int split = 0;
            for (int t = 0; t < tp; t++) {
                TpShard s;
                char err[256];
                if (tp_shard(m, &ps[k], tp, t, &s, err, sizeof err)) {
                    diag("%s", err);
                    good = 0;
                    continue;
                }
                split = s.split;
                memset(sh, 0xff, N * sizeof *sh);
                tp_shard_extract(&s, &ps[k], g, sh, sizeof *sh);
                tp_shard_insert(&s, &ps[k], sh, back, sizeof *sh);
                for (int64_t i = 0; i < s.rows * s.cols; i++) {
                    hits[(size_t)sh[i]]++;  // values are global indices
                    if (tp_shard_global_index(&s, &ps[k], i) != (int64_t)sh[i]) good = 0;
                }
            }
            for (size_t i = 0; i < N; i++) {
                if (back[i] != g[i] || hits[i] != (split ? 1 : tp)) {
                    diag("%s tp=%d: element %zu restored %g, held %d times", ps[k].name, tp, i, back[i], hits[i]);
                    good = 0;
                    break;
                }
            }
            free(g), free(back), free(sh), free(hits);
        }
    }
    return good;
}

static const ParamSpec *find(const ModelConfig *m, ModelPart part, const char *name, ParamSpec *buf) {
    int n = model_params(m, part, buf, MODEL_MAX_PARAMS);
    for (int k = 0; k < n; k++)
        if (!strcmp(buf[k].name, name)) return &buf[k];
    return NULL;
}

// global row index held at shard row r (rows split), via the values trick
static int64_t global_row(const ModelConfig *m, const ParamSpec *p, int tp, int t, int64_t r) {
    TpShard s;
    char err[256];
    if (tp_shard(m, p, tp, t, &s, err, sizeof err)) return -1;
    size_t N = (size_t)(p->rows * p->cols);
    float *g = malloc(N * sizeof *g), *sh = malloc(N * sizeof *sh);
    for (size_t i = 0; i < N; i++) g[i] = (float)i;
    tp_shard_extract(&s, p, g, sh, sizeof *g);
    int64_t row = (int64_t)sh[r * s.cols] / p->cols;
    free(g), free(sh);
    return row;
}

static double urand(void) { return rand() / (double)RAND_MAX - 0.5; }

static double gelu(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double silu(double x) { return x / (1 + exp(-x)); }

// The MLP (and the attention projection pair, as a linear map) computed whole
// and as the sum of its tp shards; returns the largest absolute difference.
static double mlp_split_error(const ModelConfig *m, int tp, const char *in_name, const char *out_name, int act) {
    ParamSpec b1[MODEL_MAX_PARAMS], b2[MODEL_MAX_PARAMS];
    const ParamSpec *w1 = find(m, PART_BLOCK, in_name, b1), *w2 = find(m, PART_BLOCK, out_name, b2);
    int64_t H = m->hidden, R = w1->rows, U = w2->cols;  // U = units entering w2
    double *W1 = malloc(sizeof(double) * R * H), *W2 = malloc(sizeof(double) * H * U), x[64];
    for (int64_t i = 0; i < R * H; i++) W1[i] = urand();
    for (int64_t i = 0; i < H * U; i++) W2[i] = urand();
    for (int i = 0; i < H; i++) x[i] = urand();
    // whole: y = x W1^T (R), a = act(y) (U), z = a W2^T (H)
    double *y = malloc(sizeof(double) * R), *a = malloc(sizeof(double) * U), z[64] = {0}, zs[64] = {0};
    for (int64_t r = 0; r < R; r++) {
        y[r] = 0;
        for (int64_t c = 0; c < H; c++) y[r] += x[c] * W1[r * H + c];
    }
    // act 0: identity on the q rows only (attention pair); 1: gelu; 2: silu(gate) * up
    for (int64_t u = 0; u < U; u++) a[u] = act == 1 ? gelu(y[u]) : act == 2 ? silu(y[u]) * y[U + u] : y[u];
    for (int64_t o = 0; o < H; o++)
        for (int64_t u = 0; u < U; u++) z[o] += a[u] * W2[o * U + u];
    for (int t = 0; t < tp; t++) {
        TpShard s1, s2;
        char err[256];
        tp_shard(m, w1, tp, t, &s1, err, sizeof err);
        tp_shard(m, w2, tp, t, &s2, err, sizeof err);
        double *W1t = malloc(sizeof(double) * s1.rows * H), *W2t = malloc(sizeof(double) * H * s2.cols);
        tp_shard_extract(&s1, w1, W1, W1t, sizeof(double));
        tp_shard_extract(&s2, w2, W2, W2t, sizeof(double));
        int64_t Ut = s2.cols;
        double *yt = malloc(sizeof(double) * s1.rows), *at = malloc(sizeof(double) * Ut);
        for (int64_t r = 0; r < s1.rows; r++) {
            yt[r] = 0;
            for (int64_t c = 0; c < H; c++) yt[r] += x[c] * W1t[r * H + c];
        }
        for (int64_t u = 0; u < Ut; u++) at[u] = act == 1 ? gelu(yt[u]) : act == 2 ? silu(yt[u]) * yt[Ut + u] : yt[u];
        for (int64_t o = 0; o < H; o++)
            for (int64_t u = 0; u < Ut; u++) zs[o] += at[u] * W2t[o * Ut + u];
        free(W1t), free(W2t), free(yt), free(at);
    }
    double worst = 0;
    for (int64_t o = 0; o < H; o++) worst = fmax(worst, fabs(z[o] - zs[o]));
    free(W1), free(W2), free(y), free(a);
    return worst;
}

int main(void) {
    ModelConfig g, l;
    gpt(&g);
    llama(&l);
    ok(covers_exactly(&g, 1) && covers_exactly(&g, 2) && covers_exactly(&g, 4),
       "GPT (V 257, tied, biases): tp 1, 2, 4 shards cover every tensor exactly; round trip restores it; global indices agree");
    ok(covers_exactly(&l, 1) && covers_exactly(&l, 2), "Llama (GQA 8/2, SwiGLU, V 259, untied): tp 1, 2 likewise");

    ParamSpec buf[MODEL_MAX_PARAMS];
    const ParamSpec *qkv = find(&l, PART_BLOCK, "qkv_w", buf);
    // hd = 8: q rows 0..63, k rows 64..79, v rows 80..95; rank 1 of 2 takes
    // q heads 4..7 (rows 32..63), kv head 1 (k rows 72..79, v rows 88..95)
    ok(global_row(&l, qkv, 2, 1, 0) == 32 && global_row(&l, qkv, 2, 1, 31) == 63 &&
           global_row(&l, qkv, 2, 1, 32) == 72 && global_row(&l, qkv, 2, 1, 40) == 88,
       "qkv_w: rank 1 of 2 holds q heads 4-7, then k head 1, then v head 1");
    const ParamSpec *fc = find(&l, PART_BLOCK, "fc_w", buf);
    ok(global_row(&l, fc, 2, 1, 0) == 88 && global_row(&l, fc, 2, 1, 88) == 176 + 88,
       "SwiGLU fc_w: rank 1 of 2 holds gate units 88-175 then the same up units");
    const ParamSpec *wte = find(&g, PART_PRE, "wte", buf);
    TpShard s;
    char err[256];
    ok(!tp_shard(&g, wte, 4, 3, &s, err, sizeof err) && s.first[0] == 195 && s.rows == 62,
       "vocabulary-parallel wte, V 257 over 4: the last rank holds rows 195-256");

    double e1 = mlp_split_error(&g, 4, "fc_w", "fc_proj_w", 1);
    double e2 = mlp_split_error(&l, 2, "fc_w", "fc_proj_w", 2);
    ok(e1 < 1e-12 && e2 < 1e-12, "MLP split over tp equals the whole layer (GELU tp 4: %.1e, SwiGLU tp 2: %.1e)", e1, e2);
    // attention pair: the q rows of qkv_w feed attn_proj's columns of the same heads
    ModelConfig mha = g;
    double e3 = mlp_split_error(&mha, 4, "qkv_w", "attn_proj_w", 0);
    ok(e3 < 1e-12, "q heads of qkv_w pair with attn_proj_w's columns over tp 4 (%.1e)", e3);

    ModelConfig bad = g;
    bad.heads = 4, bad.kv_heads = 4;
    const ParamSpec *q = find(&bad, PART_BLOCK, "qkv_w", buf);
    int rc = tp_shard(&bad, q, 3, 0, &s, err, sizeof err);
    ok(rc == 2 && strstr(err, "qkv_w") && strstr(err, "tp = 3"), "4 heads over tp 3 is refused, naming the tensor: %s", err);
    ok(tp_shard(&g, q, 2, 2, &s, err, sizeof err) == 2, "a tp rank outside the group is refused");
    return tap_done();
}
