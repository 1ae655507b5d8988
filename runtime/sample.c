// Sampling text from a checkpoint's model on the CPU backend (runtime/sample.h).
#include "runtime/sample.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/zero.h"

// The CPU runtime of the whole model at micro-batch 1 over `window` positions
// (<= seq_len: a learned position table keeps its first `window` rows, the
// only ones a forward that short reads). The weights come from `from` (the
// whole-model fp32 arrays of runtime src, tensors in the same order) or,
// when from is NULL, from ck.
static int sampler_build(Sampler *s, const ModelConfig *m, int window, const ModelRuntime *src, const float *from,
                         CkptReader *ck, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    ModelConfig short_m = *m;
    if (window > 0 && window < m->seq_len) short_m.seq_len = window;
    s->be = backend_cpu_create(MIST_F32, err, errlen);
    ModelRuntime *r = &s->r;
    if (!s->be || mr_layout(r, &short_m, 1, 0, 1, err, errlen) || mr_plan_memory(r, s->be, err, errlen)) return -1;
    mr_init_params(r, 0);
    float *global = calloc(r->Pglobal, sizeof *global), *local = calloc(r->Pp, sizeof *local);
    int rc = !global || !local;
    if (rc) snprintf(err, errlen, "out of host memory for %zu parameters", r->Pglobal);
    for (int k = 0; k < r->num_tensors && !rc; k++) {
        const ParamTensor *p = &r->tensors[k];
        // the real vocabulary rows (a checkpoint holds no others); a prefix of
        // wpe's rows; the padded vocabulary rows stay zero
        int64_t rows = !strcmp(p->name, "wte") || !strcmp(p->name, "lm_head_w") ? r->V : p->spec.rows;
        size_t count = (size_t)(rows * p->spec.cols);
        if (from) {
            memcpy(global + p->goffset, from + src->tensors[k].goffset, count * sizeof *global);
            continue;
        }
        char name[CKPT_NAME_MAX];
        snprintf(name, sizeof name, "param/%s", p->name);
        rc = ckpt_read_tensor(ck, name, MIST_F32, 0, (int64_t)count, global + p->goffset, err, errlen) != 0;
    }
    if (!rc) {
        mr_tp_scatter(r, global, local, 1);
        zero_distribute(r, local, NULL, NULL);
    }
    free(global), free(local);
    return rc ? -1 : 0;
}

int sampler_open(Sampler *s, const ModelConfig *m, int window, CkptReader *ck, char *err, size_t errlen) {
    return sampler_build(s, m, window, NULL, NULL, ck, err, errlen);
}

int sampler_open_weights(Sampler *s, const ModelRuntime *src, const float *global, int window, char *err,
                         size_t errlen) {
    return sampler_build(s, &src->m, window, src, global, NULL, err, errlen);
}

void sampler_close(Sampler *s) {
    mr_free(&s->r);
    if (s->be) s->be->destroy(s->be);
}

// xorshift* (Vigna): 64-bit state, the top 24 bits of the product as a float in [0, 1)
static float rng_uniform(uint64_t *state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (float)((*state * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f;
}

typedef struct {
    float logit;
    int id;
} Cand;

// descending logit, ties by id: a total order, so the draw does not depend on qsort's stability
static int by_logit(const void *a, const void *b) {
    const Cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

int sample_pick(const float *logits, int V, double temperature, int top_k, uint64_t *rng) {
    Cand *c = malloc((size_t)V * sizeof *c);
    if (!c) return 0;
    for (int v = 0; v < V; v++) c[v] = (Cand){logits[v], v};
    qsort(c, (size_t)V, sizeof *c, by_logit);
    int keep = top_k > 0 && top_k < V ? top_k : V, pick = c[0].id;
    if (temperature > 0) {
        // p_i = exp((z_i - z_max) / T) / sum_j exp((z_j - z_max) / T) over the kept tokens
        double sum = 0;
        for (int i = 0; i < keep; i++) sum += exp((c[i].logit - c[0].logit) / temperature);
        double u = rng_uniform(rng) * sum, cdf = 0;
        pick = c[keep - 1].id;
        for (int i = 0; i < keep; i++) {
            cdf += exp((c[i].logit - c[0].logit) / temperature);
            if (u < cdf) { pick = c[i].id; break; }
        }
    }
    free(c);
    return pick;
}

const float *sampler_logits(Sampler *s, const int32_t *tokens, int len) {
    ModelRuntime *r = &s->r;
    int T = r->T, first = len > T ? len - T : 0, count = len - first;  // the window: the last T tokens
    int32_t *in = mr_inputs(r, 0), *tg = mr_targets(r);
    memset(in, 0, (size_t)T * sizeof *in);
    memset(tg, 0, (size_t)T * sizeof *tg);
    memcpy(in, tokens + first, (size_t)count * sizeof *in);
    mr_forward(r, 0, 0.0f, NULL, NULL);
    s->be->stream_synchronize(s->be, r->stream);
    // the logits stay in the (released) CPU buffer: row count - 1, stride Vs
    return (const float *)arena_ptr(&r->logits) + (size_t)(count - 1) * (size_t)r->Vs;
}

void sampler_generate(Sampler *s, int32_t *tokens, int *len, int n, double temperature, int top_k, uint64_t seed) {
    uint64_t rng = seed ? seed : 0x9E3779B97F4A7C15ull;  // xorshift needs a non-zero state
    for (int step = 0; step < n; step++) {
        const float *logits = sampler_logits(s, tokens, *len);
        tokens[*len] = sample_pick(logits, s->r.V, temperature, top_k, &rng);
        (*len)++;
    }
}
