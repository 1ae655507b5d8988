// Parameter layout in the flat buffers (from models/model.h) and seeded init.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "models/model.h"
#include "planner/interleave.h"
#include "runtime/checkpoint.h"
#include "runtime/comm.h"
#include "runtime/model_runtime.h"
#include "runtime/pipeline_schedule.h"

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int64_t find(const ModelRuntime *r, const char *name) {
    for (int i = 0; i < r->num_tensors; i++)
        if (strcmp(r->tensors[i].name, name) == 0) return (int64_t)r->tensors[i].offset;
    return -1;
}

// What of a part a stage holds: nothing (an empty unit), every tensor, or
// only wte (the last stage's copy for its tied head).
enum { PART_NONE = 0, PART_ALL = 1, PART_WTE_COPY = 2 };

// Appends a part as one unit; gidx0 is the whole-model index of its first tensor.
static int add_part(ModelRuntime *r, const ModelConfig *m, ModelPart part, const char *prefix, int what, int gidx0,
                    char *err, size_t errlen) {
    ParamSpec spec[MR_MAX_TENSORS_PER_PART];
    int n = model_params(m, part, spec, MR_MAX_TENSORS_PER_PART);
    if (n > MR_MAX_TENSORS_PER_PART || r->num_tensors + n > MR_MAX_TENSORS) {
        snprintf(err, errlen, "model has too many parameter tensors (%d in one part; at most %d)", n,
                 MR_MAX_TENSORS_PER_PART);
        return 2;
    }
    for (int i = 0; i < n; i++) {
        if (what == PART_NONE || (what == PART_WTE_COPY && strcmp(spec[i].name, "wte") != 0)) continue;
        ParamTensor *t = &r->tensors[r->num_tensors++];
        t->gidx = gidx0 + i;
        t->tied_copy = what == PART_WTE_COPY;
        snprintf(t->name, sizeof t->name, "%.23s%.31s", prefix, spec[i].name);
        // this tp rank's shard (the whole tensor at tp = 1)
        int rc = tp_shard(m, &spec[i], r->tp, r->tp_rank, &t->shard, err, errlen);
        if (rc) return rc;
        t->spec = spec[i];
        t->rows = t->shard.rows;
        t->cols = t->shard.cols;
        t->count = (size_t)(t->rows * t->cols);
        t->goffset = r->Pglobal;
        r->Pglobal += (size_t)(spec[i].rows * spec[i].cols);
        t->offset = r->Pp;
        t->decay = spec[i].decay;
        t->residual_proj = !strcmp(spec[i].name, "attn_proj_w") || !strcmp(spec[i].name, "fc_proj_w");
        // norm weights start at 1 and every bias at 0 (a norm is then the identity scale)
        t->unit_init = !strncmp(spec[i].name, "ln", 2) && ends_with(spec[i].name, "_w");
        t->zero_init = ends_with(spec[i].name, "_b");
        r->P += t->count;
        r->Pp += t->count;
    }
    // the part is one unit; under sharding it is padded to dp equal shards
    MrUnit *U = &r->units[r->num_units];
    U->count = r->Pp - U->off;
    U->shard = r->zero >= 1 ? (U->count + (size_t)r->dp - 1) / (size_t)r->dp : U->count;
    U->padded = r->zero >= 1 ? U->shard * (size_t)r->dp : U->count;
    r->Pp = U->off + U->padded;
    r->num_units++;
    r->units[r->num_units].off = r->Pp;
    r->unit_first_tensor[r->num_units] = r->num_tensors;
    return 0;
}

void mr_set_pipeline(ModelRuntime *r, int stage, int stages, int first_layer, int num_layers, int G) {
    r->pipe = (MrPipeline){stage, stages, first_layer, num_layers, G, 0, 0};
}

void mr_set_interleaved(ModelRuntime *r, int P, int v) {
    r->pipe.P = P;
    r->pipe.v = v;
}

int mr_layout(ModelRuntime *r, const ModelConfig *m, int B, int ckpt, int dp, char *err, size_t errlen) {
    const StagePlan sp = {.layers = m->layers, .dp = dp, .tp = 1, .b = B, .ckpt = ckpt};
    return mr_layout_sharded(r, m, &sp, 0, err, errlen);
}

static int layout(ModelRuntime *r, const ModelConfig *m, const StagePlan *sp, int dp_rank, int tp, int tp_rank,
                  char *err, size_t errlen);

int mr_layout_sharded(ModelRuntime *r, const ModelConfig *m, const StagePlan *sp, int dp_rank, char *err,
                      size_t errlen) {
    return layout(r, m, sp, dp_rank, 1, 0, err, errlen);
}

int mr_layout_tp(ModelRuntime *r, int tp, int tp_rank, char *err, size_t errlen) {
    ModelConfig m = r->m;
    // the stage's knobs as the layout kept them (layers: the pipeline's; tp: the argument)
    const StagePlan sp = {.layers = r->L, .dp = r->dp, .tp = tp, .b = r->B, .zero = r->zero, .ckpt = r->ckpt,
                          .shard_group = r->paro_g,
                          .wo = r->wo, .go = r->go, .oo = r->oo, .ao = r->ao,
                          .recompute = r->sel ? RECOMPUTE_SELECTIVE : RECOMPUTE_NONE, .lean = r->lean};
    int dp_rank = r->dp_rank;
    free(r->units);
    free(r->unit_first_tensor);
    free(r->blk);
    if (!model_tp_shards(&m, tp) || tp_rank < 0 || tp_rank >= tp) {
        int stage = r->pipe.stage;
        memset(r, 0, sizeof *r);
        snprintf(err, errlen, "[stage.%d] tp = %d (tp rank %d): must divide heads (%d), kv_heads (%d) and "
                 "ffn_hidden (%d). Hint: choose a common divisor", stage, tp, tp_rank, m.heads, m.kv_heads,
                 m.ffn_hidden);
        return 2;
    }
    return layout(r, &m, &sp, dp_rank, tp, tp_rank, err, errlen);
}

static int layout(ModelRuntime *r, const ModelConfig *m, const StagePlan *sp, int dp_rank, int tp, int tp_rank,
                  char *err, size_t errlen) {
    int B = sp->b, ckpt = sp->ckpt, dp = sp->dp, code = sp->zero, g = shard_group_size(sp, 0);
    int zero = dp >= 1 ? shard_code_effective(code, g, dp) : code;  // I scopes of a group of 1 or all dp: N, G
    double wo = sp->wo, go = sp->go, oo = sp->oo, ao = sp->ao;
    MrPipeline pipe = r->pipe;  // the one field set before the layout (kept by mr_layout_tp's relayout too)
    memset(r, 0, sizeof *r);
    if (pipe.stages < 1) pipe = (MrPipeline){0, 1, 0, m->layers, 1, 0, 0};
    r->pipe = pipe;
    r->has_pre = pipe.stage == 0;
    r->has_post = pipe.stage == pipe.stages - 1;
    r->tied_copy = r->has_post && !r->has_pre && m->tied_embeddings;
    r->K = pipeline_max_in_flight(pipe.stage, pipe.stages, pipe.G);  // 1 for a single stage
    // interleaved: the chunk's own most in flight (its micro-batches in flight are consecutive, as in 1F1B)
    if (pipe.v > 1) r->K = stage_p_interleaved(pipe.stage, pipe.P, pipe.v, pipe.G) + 1;
    r->tp = tp;
    r->tp_rank = tp_rank;
    r->zero = zero;
    r->paro_g = shard_code_has_i(zero) ? g : 1;
    for (int k = 0; k < 3; k++) r->scope[k] = shard_code_scope(zero, k);
    r->dp_rank = dp_rank;
    r->wo = wo, r->go = go, r->oo = oo, r->ao = ao;
    r->sel = sp->recompute == RECOMPUTE_SELECTIVE;
    r->lean = sp->lean;
    r->micro_last = 1;
    r->m = *m;
    r->B = B;
    r->T = m->seq_len;
    r->C = m->hidden;
    // this tp rank's heads and MLP units (tp divides them: mr_layout_tp)
    r->NH = m->heads / tp;
    r->NKV = m->kv_heads / tp;
    r->HS = m->hidden / m->heads;
    r->F = m->ffn_hidden / tp;
    r->FC = m->activation == ACT_SWIGLU ? 2 * r->F : r->F;
    r->QKV = (r->NH + 2 * r->NKV) * r->HS;
    r->V = m->vocab;
    r->Vp = model_vocab_padded(m);
    r->L = pipe.num_layers;
    r->ckpt = ckpt;
    r->dp = dp;
    if (r->HS * m->heads != r->C) {
        snprintf(err, errlen, "[model] hidden = %d is not a multiple of heads = %d", r->C, r->NH);
        return 2;
    }
    if (pipe.stage < 0 || pipe.stage >= pipe.stages || pipe.first_layer < 0 || pipe.num_layers < 1 ||
        pipe.first_layer + pipe.num_layers > m->layers || pipe.G < 1) {
        snprintf(err, errlen, "[stage.%d] of %d stages: blocks %d..%d, G = %d; allowed: blocks inside 0..%d, G >= 1",
                 pipe.stage, pipe.stages, pipe.first_layer, pipe.first_layer + pipe.num_layers - 1, pipe.G,
                 m->layers - 1);
        return 2;
    }
    if (ckpt < 0 || ckpt > r->L) {
        snprintf(err, errlen, "[stage.%d] ckpt = %d: allowed 0..%d (the stage's blocks)", pipe.stage, ckpt, r->L);
        return 2;
    }
    if (r->lean && ao > 0) {
        snprintf(err, errlen, "[stage.%d] lean = 1 with ao = %g: allowed: lean = 1 only with ao = 0. Hint: set ao = 0",
                 pipe.stage, ao);
        return 2;
    }
    if (code < 0 || code >= SHARD_CODES || dp_rank < 0 || dp_rank >= dp || !(wo >= 0 && wo <= 1) || !(go >= 0 && go <= 1) ||
        !(oo >= 0 && oo <= 1) || !(ao >= 0 && ao <= 1)) {
        snprintf(err, errlen, "[stage.%d] shard code %d, dp rank %d of %d, wo = %g, go = %g, oo = %g, ao = %g; allowed: "
                 "codes 0..%d (base/paro.h), offload fractions in [0, 1]", pipe.stage, code, dp_rank, dp, wo, go, oo, ao,
                 SHARD_CODES - 1);
        return 2;
    }
    r->units = calloc((size_t)r->L + 3, sizeof *r->units);
    r->unit_first_tensor = calloc((size_t)r->L + 3, sizeof *r->unit_first_tensor);
    // whole-model tensor indices: pre, block 0 .. layers-1, post
    ParamSpec probe[MR_MAX_TENSORS_PER_PART];
    int n_pre = model_params(m, PART_PRE, probe, MR_MAX_TENSORS_PER_PART);
    int n_blk = model_params(m, PART_BLOCK, probe, MR_MAX_TENSORS_PER_PART);
    int rc = add_part(r, m, PART_PRE, "", r->has_pre ? PART_ALL : r->tied_copy ? PART_WTE_COPY : PART_NONE, 0, err,
                      errlen);
    r->blk = calloc((size_t)r->L, sizeof *r->blk);
    for (int l = 0; l < r->L && !rc; l++) {
        char prefix[24];
        int gl = pipe.first_layer + l;
        snprintf(prefix, sizeof prefix, "block.%d.", gl);
        int first = r->num_tensors;
        rc = add_part(r, m, PART_BLOCK, prefix, PART_ALL, n_pre + gl * n_blk, err, errlen);
        if (rc) break;
        BlockParams *bp = &r->blk[l];
        int64_t *slots[] = {&bp->ln1_w, &bp->ln1_b, &bp->qkv_w, &bp->qkv_b, &bp->proj_w, &bp->proj_b,
                            &bp->ln2_w, &bp->ln2_b, &bp->fc_w, &bp->fc_b, &bp->fcproj_w, &bp->fcproj_b};
        const char *names[] = {"ln1_w", "ln1_b", "qkv_w", "qkv_b", "attn_proj_w", "attn_proj_b",
                               "ln2_w", "ln2_b", "fc_w", "fc_b", "fc_proj_w", "fc_proj_b"};
        for (int k = 0; k < 12; k++) {
            *slots[k] = -1;
            for (int i = first; i < r->num_tensors; i++)
                if (!strcmp(r->tensors[i].name + strlen(prefix), names[k])) *slots[k] = (int64_t)r->tensors[i].offset;
        }
        if (bp->ln1_w < 0 || bp->qkv_w < 0 || bp->proj_w < 0 || (bp->ln2_w < 0) != (m->parallel_block != 0) ||
            bp->fc_w < 0 || bp->fcproj_w < 0) {
            snprintf(err, errlen, "models/model.h block parameters lack one of ln1_w qkv_w attn_proj_w fc_w fc_proj_w, "
                     "or have ln2_w in a parallel block (or lack it in a sequential one)");
            rc = 2;
        }
    }
    if (!rc) rc = add_part(r, m, PART_POST, "", r->has_post ? PART_ALL : PART_NONE, n_pre + m->layers * n_blk, err,
                           errlen);
    if (rc) return rc;
    r->wte = find(r, "wte");
    r->wpe = find(r, "wpe");
    r->lnf_w = find(r, "lnf_w");
    r->lnf_b = find(r, "lnf_b");
    r->lm_head = m->tied_embeddings ? r->wte : find(r, "lm_head_w");
    if ((r->has_pre && r->wte < 0) || (r->has_post && (r->lnf_w < 0 || r->lm_head < 0))) {
        snprintf(err, errlen, "models/model.h pre/post parameters lack one of wte lnf_w lm_head_w");
        return 2;
    }
    // the vocabulary range of this rank's wte rows and LM head rows (the same
    // split); a stage holding neither (pipeline middle) keeps the whole range
    r->v0 = 0;
    r->Vt = r->Vp;
    for (int i = 0; i < r->num_tensors; i++)
        if (!strcmp(r->tensors[i].name, "wte") || !strcmp(r->tensors[i].name, "lm_head_w")) {
            r->v0 = (int)r->tensors[i].shard.first[0];
            r->Vt = (int)r->tensors[i].shard.count[0];
        }
    r->Vs = (r->Vt + 7) / 8 * 8;
    // the padded rows' logits are lnf . 0 = 0 and never reach the softmax: the
    // loss kernels see the real columns only, so dL/dlogits stays 0 there and
    // the padded rows of the head get zero gradient (and stay zero under AdamW)
    r->Vr = r->V - r->v0 < 0 ? 0 : r->V - r->v0 < r->Vt ? r->V - r->v0 : r->Vt;
    return 0;
}

// splitmix64: a counter-based generator, value = f(seed, tensor, index), so
// the init is the same for any rank count and any order of filling.
static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// the tensors with one row per vocabulary entry (padded to Vp rows)
static int is_vocab_tensor(const ParamTensor *t) { return !strcmp(t->name, "wte") || !strcmp(t->name, "lm_head_w"); }

float mr_init_value(const ModelRuntime *r, int k, size_t i, uint64_t seed) {
    const ParamTensor *t = &r->tensors[k];
    if (t->unit_init) return 1.0f;
    if (t->zero_init) return 0.0f;
    double std = r->m.init_std;
    if (t->residual_proj) std /= sqrt(2.0 * r->m.layers);
    // keyed by the whole-model index: every stage split draws the same values
    uint64_t bits = mix64(mix64(seed ^ mix64((uint64_t)t->gidx + 1)) + (uint64_t)i);
    // Box-Muller from two 32-bit uniforms in (0, 1]
    double u1 = ((double)(bits >> 32) + 1.0) / 4294967296.0;
    double u2 = ((double)(bits & 0xffffffffu) + 1.0) / 4294967296.0;
    double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    return (float)(std * z);
}

void mr_init_params(ModelRuntime *r, uint64_t seed) {
    Backend *be = r->be;
    // tensors that live for the whole run
    arena_take(&r->t_params);
    arena_take(&r->t_grads);
    arena_take(&r->t_master);
    arena_take(&r->t_m);
    arena_take(&r->t_v);
    float *acc = arena_take(&r->t_norm_acc);
    arena_take(&r->t_ce_stats);
    arena_take(&r->t_inputs);
    arena_take(&r->t_targets);
    arena_take(&r->t_losses);
    arena_take(&r->h_inputs);
    arena_take(&r->h_targets);
    arena_take(&r->h_losses);
    arena_take(&r->h_gather);
    arena_take(&r->pipe_act_in);
    arena_take(&r->pipe_grad_in);
    for (int k = 0; k < 2; k++) arena_take(&r->pipe_act_out[k]), arena_take(&r->pipe_grad_out[k]);
    zero_take(r);
    // the fp32 weights of the whole model are made on the host (padding 0);
    // every rank keeps its part (bf16 weights are rounded from them)
    float *w = calloc(r->Pp ? r->Pp : 1, sizeof(float));
    if (!w) {
        fprintf(stderr, "mist: out of host memory for the initial weights (%zu floats)\n", r->Pp);
        abort();
    }
    for (int k = 0; k < r->num_tensors; k++) {
        const ParamTensor *t = &r->tensors[k];
        // drawn by global index: the same model under any tp (and any vocab_pad:
        // the real rows keep their indices, the padded rows of wte/lm_head_w are 0)
        size_t real = is_vocab_tensor(t) ? (size_t)r->V * (size_t)t->spec.cols : SIZE_MAX;
        // each value is a pure function of (seed, tensor, global index), so threads draw the
        // same bits as one; ~50 ns a value (log, cos, sqrt) is a minute for 1.3B weights on one
        // core. Small tensors stay on one thread (a parallel region costs microseconds).
#pragma omp parallel for schedule(static) if (t->count >= ((size_t)1 << 20))
        for (size_t i = 0; i < t->count; i++) {
            size_t g = (size_t)tp_shard_global_index(&t->shard, &t->spec, (int64_t)i);
            w[t->offset + i] = g < real ? mr_init_value(r, k, g, seed) : 0.0f;
        }
    }
    zero_distribute(r, w, NULL, NULL);
    free(w);
    be->memset_device(be, acc, 0, sizeof(float), r->stream);
    be->stream_synchronize(be, r->stream);
}

// ---------------------------------------------------------------- whole model <-> tp shards
// The packed shards of tp rank t: tensor after tensor, each shard row-major
// (no unit padding), array after array. Replicated tensors are sent too, and
// rank 0 checks that they are the same bits as its own.
static size_t packed_count(const ModelRuntime *r, int t) {
    size_t n = 0;
    char err[256];
    for (int k = 0; k < r->num_tensors; k++) {
        TpShard s;
        tp_shard(&r->m, &r->tensors[k].spec, r->tp, t, &s, err, sizeof err);  // valid: checked by the layout
        n += (size_t)(s.rows * s.cols);
    }
    return n;
}

void mr_tp_gather(ModelRuntime *r, const float *local, float *global, int n) {
    if (r->tp == 1) {
        for (int a = 0; a < n; a++)
            for (int k = 0; k < r->num_tensors; k++) {
                const ParamTensor *t = &r->tensors[k];
                memcpy(global + (size_t)a * r->Pglobal + t->goffset, local + (size_t)a * r->Pp + t->offset,
                       t->count * sizeof(float));
            }
        return;
    }
    const CommBackend *c = r->comm;
    // rank 0 of the group holds the replicated tensors and its own shards;
    // every other rank sends its packed shards, inserted where they belong
    if (r->tp_rank != 0) {
        size_t len = packed_count(r, r->tp_rank), at = 0;
        float *buf = malloc((len ? len : 1) * (size_t)n * sizeof(float));
        for (int a = 0; a < n; a++)
            for (int k = 0; k < r->num_tensors; k++) {
                const ParamTensor *t = &r->tensors[k];
                memcpy(buf + at, local + (size_t)a * r->Pp + t->offset, t->count * sizeof(float));
                at += t->count;
            }
        commCheck(c, c->send(c, buf, at, MIST_F32, 0, 41, r->tpg));
        free(buf);
        return;
    }
    for (int a = 0; a < n; a++)
        for (int k = 0; k < r->num_tensors; k++) {
            const ParamTensor *t = &r->tensors[k];
            tp_shard_insert(&t->shard, &t->spec, local + (size_t)a * r->Pp + t->offset,
                            global + (size_t)a * r->Pglobal + t->goffset, sizeof(float));
        }
    char err[256];
    for (int src = 1; src < r->tp; src++) {
        size_t len = packed_count(r, src) * (size_t)n, at = 0;
        float *buf = malloc((len ? len : 1) * sizeof(float));
        commCheck(c, c->recv(c, buf, len, MIST_F32, src, 41, r->tpg));
        for (int a = 0; a < n; a++)
            for (int k = 0; k < r->num_tensors; k++) {
                const ParamTensor *t = &r->tensors[k];
                TpShard s;
                tp_shard(&r->m, &t->spec, r->tp, src, &s, err, sizeof err);
                if (s.split) {
                    tp_shard_insert(&s, &t->spec, buf + at, global + (size_t)a * r->Pglobal + t->goffset,
                                    sizeof(float));
                } else if (memcmp(buf + at, local + (size_t)a * r->Pp + t->offset, t->count * sizeof(float))) {
                    // replicated tensors see the same bits on every tp rank (model_runtime.c): a
                    // difference means the ranks trained different models
                    char msg[256];
                    snprintf(msg, sizeof msg, "runtime/params.c: replicated tensor %s (%s) differs between tp "
                             "ranks 0 and %d", t->name, a == 0 ? "weights" : a == 1 ? "adam m" : "adam v", src);
                    c->abort(c, 1, msg);
                }
                at += (size_t)(s.rows * s.cols);
            }
        free(buf);
    }
}

void mr_tp_scatter(const ModelRuntime *r, const float *global, float *local, int n) {
    for (int a = 0; a < n; a++)
        for (int k = 0; k < r->num_tensors; k++) {
            const ParamTensor *t = &r->tensors[k];
            tp_shard_extract(&t->shard, &t->spec, global + (size_t)a * r->Pglobal + t->goffset,
                             local + (size_t)a * r->Pp + t->offset, sizeof(float));
        }
}

// Every parameter tensor as a checkpoint entry over whole-model host arrays:
// fp32 weights (the master under bf16), Adam m, Adam v (3 x Pglobal floats,
// global shapes). Checkpoints hold whole tensors, so before a save the dp
// shards are gathered (zero_collect) and the tp shards put in place
// (mr_tp_gather); after a load each rank extracts its tp shard
// (mr_tp_scatter) and takes its dp part (zero_distribute): a checkpoint
// written under one plan resumes under any other.
CkptTensor *mr_checkpoint_tensors(ModelRuntime *r, float *global) {
    CkptTensor *t = calloc((size_t)r->num_tensors, sizeof *t);
    float *w = global, *m = global + r->Pglobal, *v = global + 2 * r->Pglobal;
    for (int i = 0; i < r->num_tensors; i++) {
        const ParamTensor *p = &r->tensors[i];
        t[i].name = p->name;
        t[i].ndim = p->spec.cols == 1 ? 1 : 2;
        t[i].shape[0] = p->spec.rows;
        t[i].shape[1] = p->spec.cols;
        // the padded vocabulary rows (all zero) are not stored: the file holds
        // the real V rows, the first V*C floats of the row-major tensor, so a
        // checkpoint written with any [model] vocab_pad loads under any other
        if (!strcmp(p->name, "wte") || !strcmp(p->name, "lm_head_w")) t[i].shape[0] = r->V;
        t[i].param = w + p->goffset;
        t[i].adam_m = m + p->goffset;
        t[i].adam_v = v + p->goffset;
    }
    return t;
}
