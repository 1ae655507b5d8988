// Memory plan, memory prediction, and forward/backward of one micro-batch.
#include "runtime/model_runtime.h"
#include "runtime/pipeline_schedule.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/comm.h"

// ---------------------------------------------------------------- sizes
// Every activation size comes from models/model.h (model_acts), the same
// description the planner evaluates symbolically. Carving looks tensors up by
// name; the prediction below instead sums them by their saved / ckpt_saved
// flags, never looking at the arena, so a mismatch between the two shows up
// as predicted != measured.
typedef struct {
    size_t x_nc;        // the block input x (N,C): the one tensor a checkpointed block keeps
    size_t block_rest;  // one block's other saved tensors
    size_t scratch;     // projection outputs (transient)
    size_t grads_bufs;  // backward gradient buffers (transient)
    size_t post;        // lnf and its statistics
    size_t logits, losses;
} ActSizes;

static size_t spec_bytes(const ModelRuntime *r, const ActSpec *a) {
    return (size_t)a->elems * (a->f32 ? sizeof(float) : r->x);
}

// bytes of the tensor `name` of a part's list; 0 when the model does not have it
// (the layernorm mean under rmsnorm)
static size_t act_bytes(const ModelRuntime *r, const ActSpec *list, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(list[i].name, name)) return spec_bytes(r, &list[i]);
    return 0;
}

static ActSizes act_sizes(const ModelRuntime *r) {
    ActSizes s = {0};
    for (int i = 0; i < r->n_block_acts; i++) {
        const ActSpec *a = &r->block_acts[i];
        size_t bytes = spec_bytes(r, a);
        if (a->ckpt_saved) s.x_nc += bytes;
        else if (a->saved) s.block_rest += bytes;
        else if (!strcmp(a->name, "scratch")) s.scratch += bytes;
        else s.grads_bufs += bytes;
    }
    for (int i = 0; i < r->n_post_acts; i++) {
        const ActSpec *a = &r->post_acts[i];
        size_t bytes = spec_bytes(r, a);
        if (!strcmp(a->name, "logits")) s.logits += bytes;
        else if (!strcmp(a->name, "losses")) s.losses += bytes;
        else if (strcmp(a->name, "x") != 0) s.post += bytes;  // x is the last block's output, counted as x_nc
    }
    return s;
}

static int is_ckpt_block(const ModelRuntime *r, int l) { return l >= r->L - r->ckpt; }

// A block's saved tensors besides its input x, in BlockActs order.
enum { N_REST = 12 };
static const char *const REST_NAMES[N_REST] = {"ln1", "ln1_mean", "ln1_rstd", "qkv", "att", "lse",
                                               "mid", "ln2", "ln2_mean", "ln2_rstd", "fc", "act"};
static ArenaTensor *rest_tensor(BlockActs *a, int k) {
    ArenaTensor *ts[N_REST] = {&a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->qkv, &a->att, &a->lse,
                               &a->mid, &a->ln2, &a->ln2_mean, &a->ln2_rstd, &a->fc, &a->act};
    return ts[k];
}

// Activation offload (ao): which saved tensors of a non-checkpointed block
// wait on the host between its forward and its backward. Tensors are moved
// whole (a kernel needs each one contiguous in device memory): the largest
// first, while their sum stays within ao times the block's saved bytes
// (besides x, the block input, which stays). Bit k: REST_NAMES[k].
static unsigned act_offload_mask(const ModelRuntime *r, size_t *offloaded_bytes) {
    size_t bytes[N_REST], total = 0, sum = 0;
    for (int k = 0; k < N_REST; k++) total += bytes[k] = act_bytes(r, r->block_acts, r->n_block_acts, REST_NAMES[k]);
    double budget = r->ao * (double)total;
    unsigned mask = 0;
    for (;;) {
        int best = -1;
        for (int k = 0; k < N_REST; k++)
            if (!(mask >> k & 1) && bytes[k] > 0 && (double)(sum + bytes[k]) <= budget &&
                (best < 0 || bytes[k] > bytes[best]))
                best = k;
        if (best < 0) break;
        mask |= 1u << best;
        sum += bytes[best];
    }
    *offloaded_bytes = sum;
    return mask;
}

// tp > 1: the vocabulary-parallel cross-entropy's row max f32(N) and its
// [sum exp | target logit] f32(2N), reduced over the tp group between passes
static size_t ce_stats_bytes(const ModelRuntime *r) {
    return r->tp > 1 ? 3 * (size_t)r->B * r->T * sizeof(float) : 0;
}

// host X(N,C) buffers of the pipeline boundary: one receive and two sends
// (a send may still be in flight while the next one is filled) per neighbour
static size_t boundary_bytes(const ModelRuntime *r) { return (size_t)r->B * r->T * r->C * r->x; }
static size_t boundary_host_bytes(const ModelRuntime *r) {
    return (r->has_pre ? 0 : 3) * boundary_bytes(r) + (r->has_post ? 0 : 3) * boundary_bytes(r);
}

static size_t persistent_device_bytes(const ModelRuntime *r, const ActSizes *s) {
    size_t N = (size_t)r->B * r->T, states, host;
    // params, grads, master, m, v (each unit's resident part) and the staging
    // of sharded / offloaded units: runtime/zero.c
    zero_predict(r, &states, &host);
    // + grad-norm accumulator, cross-entropy statistics (tp), tokens (one set per slot), targets, losses
    return states + sizeof(float) + ce_stats_bytes(r) + ((size_t)r->K + 1) * N * sizeof(int32_t) + s->losses;
}

// The live bytes of one micro-batch's forward and backward, step by step as
// mr_forward / mr_backward take and release them (device: live/peak; host:
// the offloaded activations, hlive/hpeak).
typedef struct {
    ActSizes s;
    size_t off;  // bytes of a non-checkpointed block that wait on the host
    size_t live, peak, hlive, hpeak;
} MemSim;

static void sim_grow(MemSim *m, size_t n) {
    m->live += n;
    if (m->live > m->peak) m->peak = m->live;
}

static void sim_forward(const ModelRuntime *r, MemSim *m) {
    const ActSizes *s = &m->s;
    sim_grow(m, s->x_nc);                       // x_0 (embedding, or the received activation)
    for (int l = 0; l < r->L; l++) {
        sim_grow(m, s->block_rest);             // own tensors (+ the swap workspace), or the recompute workspace
        sim_grow(m, s->x_nc);                   // x_{l+1}
        sim_grow(m, s->scratch);                // projection scratch
        m->live -= s->scratch;
        if (is_ckpt_block(r, l)) m->live -= s->block_rest;
        else {  // swapped out
            m->live -= m->off;
            m->hlive += m->off;
            if (m->hlive > m->hpeak) m->hpeak = m->hlive;
        }
    }
    if (r->has_post) sim_grow(m, s->post + s->logits);  // final norm, logits
    else m->live -= s->x_nc;                             // the output went to the host send buffer
}

static void sim_backward(const ModelRuntime *r, MemSim *m) {
    const ActSizes *s = &m->s;
    sim_grow(m, s->grads_bufs);                 // backward starts
    if (r->has_post) {
        m->live -= s->logits;
        m->live -= s->post + s->x_nc;           // lnf and the last block's output
    }
    for (int l = r->L - 1; l >= 0; l--) {
        if (is_ckpt_block(r, l)) {
            sim_grow(m, s->block_rest + s->scratch);  // recompute into the workspace (+ scratch)
            m->live -= s->scratch;
        } else {
            sim_grow(m, m->off);                // swapped in
            m->hlive -= m->off;
        }
        m->live -= s->block_rest + s->x_nc;     // the block's tensors and its input
    }
    m->live -= s->grads_bufs;
}

void mr_memory_predict(const ModelRuntime *r, int64_t *device_peak, int64_t *host_peak) {
    MemSim m = {.s = act_sizes(r)};
    act_offload_mask(r, &m.off);
    m.live = m.peak = persistent_device_bytes(r, &m.s);
    // the stage's micro-batches in 1F1B order (pipeline_schedule.h): up to K
    // forwards keep their activations before the matching backwards free them
    int G = r->pipe.G, n = 2 * G;
    PipeAction *order = malloc((size_t)n * sizeof *order);
    pipeline_1f1b(r->pipe.stage, r->pipe.stages, G, order);
    for (int i = 0; i < n; i++) {
        if (order[i].kind == PIPE_FORWARD) sim_forward(r, &m);
        else sim_backward(r, &m);
    }
    free(order);
    *device_peak = (int64_t)m.peak;
    size_t N = (size_t)r->B * r->T;
    // host: token staging, per-token losses, all ranks' losses of a micro-batch,
    // the boundary buffers, the offloaded parts of params, grads and optimizer
    // state, and the offloaded activations of every micro-batch in flight
    size_t states_dev, states_host;
    zero_predict(r, &states_dev, &states_host);
    *host_peak = (int64_t)(3 * N * sizeof(float) + (size_t)r->dp * N * sizeof(float) + boundary_host_bytes(r) +
                           states_host + m.hpeak);
}

// ---------------------------------------------------------------- plan
// the tensors of one block besides its input x: those of `keep` (bits of
// REST_NAMES) with their size, the others as 0-byte placeholders
static void carve_block(ModelRuntime *r, BlockActs *a, Arena *arena, unsigned keep) {
    static const char *const what[N_REST] = {"acts.ln1", "acts.ln1_mean", "acts.ln1_rstd", "acts.qkv", "acts.att",
                                             "acts.lse", "acts.mid", "acts.ln2", "acts.ln2_mean", "acts.ln2_rstd",
                                             "acts.fc", "acts.act"};
    for (int k = 0; k < N_REST; k++)
        arena_carve(arena, rest_tensor(a, k),
                    keep >> k & 1 ? act_bytes(r, r->block_acts, r->n_block_acts, REST_NAMES[k]) : 0, what[k]);
}

// The tensors forward/backward cannot run without, with the sizes they need.
static int check_acts(const ModelRuntime *r, char *err, size_t errlen) {
    size_t N = (size_t)r->B * r->T, x = r->x;
    struct { const ActSpec *list; int n; const char *name; size_t want; } need[] = {
        {r->block_acts, r->n_block_acts, "x", N * r->C * x},
        {r->block_acts, r->n_block_acts, "ln1", N * r->C * x},
        {r->block_acts, r->n_block_acts, "ln1_rstd", N * sizeof(float)},
        {r->block_acts, r->n_block_acts, "qkv", N * r->QKV * x},
        {r->block_acts, r->n_block_acts, "att", N * r->NH * r->HS * x},
        {r->block_acts, r->n_block_acts, "lse", (size_t)r->B * r->NH * r->T * sizeof(float)},
        {r->block_acts, r->n_block_acts, "mid", r->m.parallel_block ? 0 : N * r->C * x},
        {r->block_acts, r->n_block_acts, "ln2", r->m.parallel_block ? 0 : N * r->C * x},
        {r->block_acts, r->n_block_acts, "d_ln_mlp", r->m.parallel_block ? N * r->C * x : 0},
        {r->block_acts, r->n_block_acts, "fc", N * r->FC * x},
        {r->block_acts, r->n_block_acts, "act", N * r->F * x},
        {r->block_acts, r->n_block_acts, "scratch", N * r->C * x},
        {r->block_acts, r->n_block_acts, "d_res", N * r->C * x},
        {r->block_acts, r->n_block_acts, "d_ln", N * r->C * x},
        {r->block_acts, r->n_block_acts, "d_att", N * r->NH * r->HS * x},
        {r->block_acts, r->n_block_acts, "d_qkv", N * r->QKV * x},
        {r->block_acts, r->n_block_acts, "d_act", N * r->F * x},
        {r->post_acts, r->n_post_acts, "x", N * r->C * x},
        {r->post_acts, r->n_post_acts, "lnf", N * r->C * x},
        {r->post_acts, r->n_post_acts, "lnf_rstd", N * sizeof(float)},
        {r->post_acts, r->n_post_acts, "logits", N * r->Vs * x},
        {r->post_acts, r->n_post_acts, "losses", N * sizeof(float)},
    };
    for (size_t i = 0; i < sizeof need / sizeof *need; i++) {
        if (need[i].list == r->post_acts && !r->has_post) continue;  // a stage without the head never writes them
        size_t got = act_bytes(r, need[i].list, need[i].n, need[i].name);
        if (got < need[i].want) {
            snprintf(err, errlen, "models/model.h: activation '%s' of the %s is %zu bytes; the runtime writes %zu "
                     "(b=%d, s=%d)", need[i].name, need[i].list == r->block_acts ? "block" : "post part", got,
                     need[i].want, r->B, r->T);
            return 1;
        }
    }
    return 0;
}

int mr_plan_memory(ModelRuntime *r, Backend *be, char *err, size_t errlen) {
    r->be = be;
    r->x = mist_dtype_size(be->dtype);
    r->stream = be->stream_create(be);
    arena_init(&r->dev, "device", ARENA_DEVICE);
    arena_init(&r->host, "host", ARENA_HOST);
    Arena *d = &r->dev, *h = &r->host;
    size_t N = (size_t)r->B * r->T;
    r->n_block_acts = model_acts(&r->m, PART_BLOCK, r->B, r->T, r->tp, r->block_acts, MODEL_MAX_ACTS);
    r->n_post_acts = model_acts(&r->m, PART_POST, r->B, r->T, r->tp, r->post_acts, MODEL_MAX_ACTS);
    if (r->n_block_acts < 0 || r->n_post_acts < 0) {
        snprintf(err, errlen, "models/model.h: model_acts failed for b=%d s=%d tp=%d", r->B, r->T, r->tp);
        return 1;
    }
    if (check_acts(r, err, errlen)) return 1;
    size_t off_bytes;
    r->act_mask = act_offload_mask(r, &off_bytes);
    const ActSpec *bl = r->block_acts, *po = r->post_acts;
    int nb = r->n_block_acts, np = r->n_post_acts;
    zero_carve(r);  // params, grads, master, m, v and their staging
    arena_carve(d, &r->t_norm_acc, sizeof(float), "grad_norm_acc");
    arena_carve(d, &r->t_ce_stats, ce_stats_bytes(r), "tp.ce_stats");
    arena_carve(d, &r->t_inputs, (size_t)r->K * N * sizeof(int32_t), "inputs");
    arena_carve(d, &r->t_targets, N * sizeof(int32_t), "targets");
    arena_carve(d, &r->t_losses, act_bytes(r, po, np, "losses"), "losses");
    int slots_x_blocks = r->K * r->L;
    r->acts = calloc((size_t)slots_x_blocks, sizeof *r->acts);
    for (int i = 0; i < slots_x_blocks; i++) {
        arena_carve(d, &r->acts[i].x, act_bytes(r, bl, nb, "x"), "acts.x");
        if (!is_ckpt_block(r, i % r->L)) carve_block(r, &r->acts[i], d, ~r->act_mask);
    }
    if (r->ckpt > 0) carve_block(r, &r->work, d, ~0u);  // shared by every checkpointed block
    // offloaded activations: one device workspace, a host copy per non-checkpointed block and slot
    carve_block(r, &r->aws, d, r->act_mask);
    r->hacts = calloc((size_t)slots_x_blocks, sizeof *r->hacts);
    for (int i = 0; i < slots_x_blocks; i++)
        carve_block(r, &r->hacts[i], h, is_ckpt_block(r, i % r->L) ? 0u : r->act_mask);
    arena_carve(d, &r->x_out, act_bytes(r, po, np, "x"), "acts.x_out");
    arena_carve(d, &r->scratch, act_bytes(r, bl, nb, "scratch"), "scratch");
    arena_carve(d, &r->lnf, act_bytes(r, po, np, "lnf"), "acts.lnf");
    arena_carve(d, &r->lnf_mean, act_bytes(r, po, np, "lnf_mean"), "acts.lnf_mean");
    arena_carve(d, &r->lnf_rstd, act_bytes(r, po, np, "lnf_rstd"), "acts.lnf_rstd");
    arena_carve(d, &r->logits, act_bytes(r, po, np, "logits"), "logits");
    arena_carve(d, &r->d_res, act_bytes(r, bl, nb, "d_res"), "grad.residual");
    arena_carve(d, &r->d_ln, act_bytes(r, bl, nb, "d_ln"), "grad.norm_out");
    arena_carve(d, &r->d_att, act_bytes(r, bl, nb, "d_att"), "grad.att");
    arena_carve(d, &r->d_qkv, act_bytes(r, bl, nb, "d_qkv"), "grad.qkv");
    arena_carve(d, &r->d_act, act_bytes(r, bl, nb, "d_act"), "grad.act");
    arena_carve(d, &r->d_fc, act_bytes(r, bl, nb, "d_fc"), "grad.fc");  // used by swiglu
    arena_carve(d, &r->d_ln_mlp, act_bytes(r, bl, nb, "d_ln_mlp"), "grad.norm_out_mlp");  // parallel block
    arena_carve(h, &r->h_inputs, N * sizeof(int32_t), "host.inputs");
    arena_carve(h, &r->h_targets, N * sizeof(int32_t), "host.targets");
    arena_carve(h, &r->h_losses, N * sizeof(float), "host.losses");
    arena_carve(h, &r->h_gather, (size_t)r->dp * N * sizeof(float), "host.losses_all_ranks");
    size_t in_b = r->has_pre ? 0 : boundary_bytes(r), out_b = r->has_post ? 0 : boundary_bytes(r);
    arena_carve(h, &r->h_fwd_recv, in_b, "host.pipe.act_in");
    arena_carve(h, &r->h_bwd_recv, out_b, "host.pipe.grad_in");
    for (int k = 0; k < 2; k++) {
        arena_carve(h, &r->h_fwd_send[k], out_b, "host.pipe.act_out");
        arena_carve(h, &r->h_bwd_send[k], in_b, "host.pipe.grad_out");
    }
    if (arena_reserve(d, be, err, errlen) || arena_reserve(h, be, err, errlen)) return 1;
    // optimizer view of the flat buffers
    r->opt_tensors = calloc((size_t)r->num_tensors, sizeof *r->opt_tensors);
    for (int i = 0; i < r->num_tensors; i++)
        r->opt_tensors[i] = (OptimTensor){r->tensors[i].offset, r->tensors[i].count, r->tensors[i].decay};
    return 0;
}

void mr_free(ModelRuntime *r) {
    if (r->be && r->stream) r->be->stream_destroy(r->be, r->stream);
    arena_free(&r->dev);
    arena_free(&r->host);
    zero_free(r);
    free(r->units);
    free(r->unit_first_tensor);
    r->units = NULL;
    r->unit_first_tensor = NULL;
    free(r->acts);
    free(r->hacts);
    r->hacts = NULL;
    free(r->blk);
    free(r->opt_tensors);
    r->acts = NULL;
    r->blk = NULL;
    r->opt_tensors = NULL;
}

// ---------------------------------------------------------------- forward / backward
static void *ptr_or_null(const ArenaTensor *t) { return t->bytes ? arena_ptr(t) : NULL; }

// a live tensor of 0 bytes (the layernorm mean under rmsnorm) is passed as NULL
static void *take(ArenaTensor *t) {
    void *p = arena_take(t);
    return t->bytes ? p : NULL;
}

static void take_rest(BlockActs *a) {
    for (int k = 0; k < N_REST; k++) take(rest_tensor(a, k));
}

static void release_rest(BlockActs *a) {
    for (int k = 0; k < N_REST; k++) arena_release(rest_tensor(a, k));
}

// The tensors of acts[i] (block i mod L of slot i / L) it computes with: its
// own, and the offloaded ones in the swap workspace (a copy of the
// descriptors; liveness stays with the originals).
static BlockActs act_view(ModelRuntime *r, int i) {
    BlockActs v = r->acts[i];
    for (int k = 0; k < N_REST; k++)
        if (r->act_mask >> k & 1) *rest_tensor(&v, k) = *rest_tensor(&r->aws, k);
    return v;
}

// after the forward of acts[i]: its offloaded tensors go to the host (d2h), the workspace is free
static void acts_swap_out(ModelRuntime *r, int l) {
    for (int k = 0; k < N_REST; k++) {
        if (!(r->act_mask >> k & 1)) continue;
        ArenaTensor *dev = rest_tensor(&r->aws, k), *host = rest_tensor(&r->hacts[l], k);
        r->be->copy_d2h(r->be, arena_take(host), arena_ptr(dev), dev->bytes, r->stream);
        arena_release(dev);
    }
}

// before the backward of acts[i]: back into the workspace (h2d)
static void acts_swap_in(ModelRuntime *r, int l) {
    for (int k = 0; k < N_REST; k++) {
        if (!(r->act_mask >> k & 1)) continue;
        ArenaTensor *dev = rest_tensor(&r->aws, k), *host = rest_tensor(&r->hacts[l], k);
        r->be->copy_h2d(r->be, arena_take(dev), arena_ptr(host), dev->bytes, r->stream);
        arena_release(host);
    }
}

static void take_masked(BlockActs *a, unsigned mask) {
    for (int k = 0; k < N_REST; k++)
        if (mask >> k & 1) arena_take(rest_tensor(a, k));
}
static void release_masked(BlockActs *a, unsigned mask) {
    for (int k = 0; k < N_REST; k++)
        if (mask >> k & 1) arena_release(rest_tensor(a, k));
}

// weights and gradients are addressed by flat offset; zero.c knows which
// buffer holds each unit now (in place, or a gathered / swapped-in copy)
#define PARAM(off) zero_w(r, (off))
#define GRAD(off) zero_g(r, (off))

// ---- tensor parallelism (Megatron). A row-parallel projection (attn_proj,
// fc_proj, and the vocabulary-parallel embedding) leaves on each tp rank a
// partial sum over its share of the input features: out = sum_t in_t W_t^T,
// so it is all-reduced (sum) before the residual stream, which is then the
// same bits on every tp rank. A column-parallel layer (qkv, fc, LM head)
// sees the replicated input and computes its own output columns; its input
// gradient dL/din = sum_t dout_t W_t is the sum over tp ranks: all-reduced
// in backward. Everything between (norms, residuals) repeats on every rank
// with identical inputs, so gradients of replicated parameters come out
// identical without any communication.
static void tp_sum(ModelRuntime *r, void *buf, size_t count) {
    if (r->tp == 1) return;
    r->be->stream_synchronize(r->be, r->stream);  // the comm backend reads the finished tensor
    commCheck(r->comm, r->comm->all_reduce(r->comm, buf, buf, count, r->be->dtype, COMM_SUM, r->tpg));
}

// the bias of a row-parallel layer is added once, by tp rank 0, before the sum
static const void *row_parallel_bias(ModelRuntime *r, int64_t off) { return r->tp_rank == 0 ? PARAM(off) : NULL; }

// Block l forward up to the MLP activation. Sequential block: the attention
// projection is summed over tp and added to the residual stream (mid), which
// ln2 normalises for the MLP. Parallel (Falcon) block: attention and MLP both
// read ln1, and both projections are left to the caller (block_forward_output);
// a recompute needs neither, since no saved tensor comes after them.
static void block_forward_to_act(ModelRuntime *r, int l, BlockActs *a, const void *xin) {
    Backend *be = r->be;
    BackendStream *st = r->stream;
    const BlockParams *bp = &r->blk[l];
    NormOp nk = r->m.norm == NORM_LAYERNORM ? NORM_OP_LAYERNORM : NORM_OP_RMSNORM;
    int N = r->B * r->T;
    float eps = (float)r->m.norm_eps;
    void *scratch = arena_ptr(&r->scratch);
    be->norm_forward(be, st, nk, NULL, arena_ptr(&a->ln1), ptr_or_null(&a->ln1_mean), arena_ptr(&a->ln1_rstd),
                     xin, NULL, PARAM(bp->ln1_w), PARAM(bp->ln1_b), N, r->C, eps);
    be->matmul_forward(be, st, arena_ptr(&a->qkv), NULL, arena_ptr(&a->ln1), PARAM(bp->qkv_w), PARAM(bp->qkv_b),
                       N, r->C, r->QKV);
    if (r->m.position == POS_ROTARY)
        be->rotary_forward(be, st, arena_ptr(&a->qkv), r->B, r->T, r->NH, r->NKV, r->HS, (float)r->m.rope_theta);
    be->attention_forward(be, st, arena_ptr(&a->att), arena_ptr(&a->lse), arena_ptr(&a->qkv), r->B, r->T, r->NH,
                          r->NKV, r->HS);
    const void *mlp_in = arena_ptr(&a->ln1);
    if (!r->m.parallel_block) {
        be->matmul_forward(be, st, scratch, NULL, arena_ptr(&a->att), PARAM(bp->proj_w),
                           row_parallel_bias(r, bp->proj_b), N, r->NH * r->HS, r->C);
        tp_sum(r, scratch, (size_t)N * r->C);
        // mid = x + attention projection, ln2 = norm(mid), fused
        be->norm_forward(be, st, nk, arena_ptr(&a->mid), arena_ptr(&a->ln2), ptr_or_null(&a->ln2_mean),
                         arena_ptr(&a->ln2_rstd), scratch, xin, PARAM(bp->ln2_w), PARAM(bp->ln2_b), N, r->C, eps);
        mlp_in = arena_ptr(&a->ln2);
    }
    if (r->m.activation == ACT_SWIGLU) {
        be->matmul_forward(be, st, arena_ptr(&a->fc), NULL, mlp_in, PARAM(bp->fc_w), PARAM(bp->fc_b), N, r->C, r->FC);
        be->swiglu_forward(be, st, arena_ptr(&a->act), arena_ptr(&a->fc), N, r->F);
    } else {  // fc keeps the pre-activation, act = gelu(fc) (fused epilogue)
        be->matmul_forward(be, st, arena_ptr(&a->act), arena_ptr(&a->fc), mlp_in, PARAM(bp->fc_w), PARAM(bp->fc_b),
                           N, r->C, r->F);
    }
}

// The block's output xout = x_{l+1} from its activations (scratch is taken).
// Sequential: xout = mid + sum_tp(act Wfcproj^T). Parallel: both row-parallel
// projections' partial sums are added first, so one all-reduce serves both:
// xout = x + sum_tp(att_t Wproj_t^T + act_t Wfcproj_t^T) (biases once, on tp
// rank 0), the one all-reduce the model description counts for the block.
static void block_forward_output(ModelRuntime *r, int l, BlockActs *a, const void *xin, void *xout) {
    Backend *be = r->be;
    BackendStream *st = r->stream;
    const BlockParams *bp = &r->blk[l];
    int N = r->B * r->T;
    size_t nc = (size_t)N * r->C;
    void *scratch = arena_ptr(&r->scratch);
    be->matmul_forward(be, st, scratch, NULL, arena_ptr(&a->act), PARAM(bp->fcproj_w),
                       row_parallel_bias(r, bp->fcproj_b), N, r->F, r->C);
    if (!r->m.parallel_block) {
        tp_sum(r, scratch, nc);
        be->residual_forward(be, st, xout, arena_ptr(&a->mid), scratch, nc);
        return;
    }
    be->matmul_forward(be, st, xout, NULL, arena_ptr(&a->att), PARAM(bp->proj_w), row_parallel_bias(r, bp->proj_b),
                       N, r->NH * r->HS, r->C);
    be->residual_forward(be, st, xout, xout, scratch, nc);
    tp_sum(r, xout, nc);
    be->residual_forward(be, st, xout, xout, xin, nc);
}

// Backward of block l; d_res = dL/dx_{l+1} on entry, dL/dx_l on return.
// Sequential block: the MLP's input gradient goes through ln2 into d_res
// (now dL/dmid), then the attention's through ln1. Parallel block: both
// branches read d_res = dL/dx_{l+1} and feed ln1: the MLP's dL/dln1 lands in
// d_ln_mlp, the attention's in d_ln, and their sum takes one all-reduce and
// one norm backward (dL/dln1 = d_attn + d_mlp, summed over tp).
static void block_backward(ModelRuntime *r, int l, BlockActs *a, const void *xin) {
    Backend *be = r->be;
    BackendStream *st = r->stream;
    const BlockParams *bp = &r->blk[l];
    NormOp nk = r->m.norm == NORM_LAYERNORM ? NORM_OP_LAYERNORM : NORM_OP_RMSNORM;
    int N = r->B * r->T;
    size_t nc = (size_t)N * r->C;
    int par = r->m.parallel_block;
    void *d_res = arena_ptr(&r->d_res), *d_ln = arena_ptr(&r->d_ln), *d_act = arena_ptr(&r->d_act);
    void *d_mlp_in = par ? arena_ptr(&r->d_ln_mlp) : d_ln;  // dL/d(the MLP's input)
    const void *mlp_in = par ? arena_ptr(&a->ln1) : arena_ptr(&a->ln2);
    // MLP projection: d_act = d_res Wfcproj
    if (r->m.activation == ACT_SWIGLU) {
        void *d_fc = arena_ptr(&r->d_fc);
        be->matmul_backward(be, st, d_act, GRAD(bp->fcproj_w), GRAD(bp->fcproj_b), d_res, arena_ptr(&a->act),
                            PARAM(bp->fcproj_w), NULL, N, r->F, r->C);
        be->swiglu_backward(be, st, d_fc, d_act, arena_ptr(&a->fc), N, r->F);
        be->matmul_backward(be, st, d_mlp_in, GRAD(bp->fc_w), GRAD(bp->fc_b), d_fc, mlp_in, PARAM(bp->fc_w), NULL, N,
                            r->C, r->FC);
    } else {  // d_act = (d_res Wfcproj) * gelu'(fc) = dL/dfc: the GELU's backward fused into the product
        be->matmul_backward(be, st, NULL, GRAD(bp->fcproj_w), GRAD(bp->fcproj_b), d_res, arena_ptr(&a->act),
                            PARAM(bp->fcproj_w), NULL, N, r->F, r->C);
        be->matmul_dinp_gelu(be, st, d_act, d_res, PARAM(bp->fcproj_w), arena_ptr(&a->fc), N, r->F, r->C);
        be->matmul_backward(be, st, d_mlp_in, GRAD(bp->fc_w), GRAD(bp->fc_b), d_act, mlp_in, PARAM(bp->fc_w), NULL, N,
                            r->C, r->F);
    }
    if (!par) {
        tp_sum(r, d_ln, nc);  // column-parallel fc: dL/dln2 summed over tp
        // d_res += norm backward: now dL/dmid
        be->norm_backward(be, st, nk, d_res, GRAD(bp->ln2_w), GRAD(bp->ln2_b), d_ln, arena_ptr(&a->mid),
                          PARAM(bp->ln2_w), ptr_or_null(&a->ln2_mean), arena_ptr(&a->ln2_rstd), N, r->C);
    }
    void *d_att = arena_ptr(&r->d_att), *d_qkv = arena_ptr(&r->d_qkv);
    be->matmul_backward(be, st, d_att, GRAD(bp->proj_w), GRAD(bp->proj_b), d_res, arena_ptr(&a->att),
                        PARAM(bp->proj_w), NULL, N, r->NH * r->HS, r->C);
    be->attention_backward(be, st, d_qkv, d_att, arena_ptr(&a->qkv), arena_ptr(&a->att), arena_ptr(&a->lse), r->B,
                           r->T, r->NH, r->NKV, r->HS);
    if (r->m.position == POS_ROTARY)
        be->rotary_backward(be, st, d_qkv, r->B, r->T, r->NH, r->NKV, r->HS, (float)r->m.rope_theta);
    be->matmul_backward(be, st, d_ln, GRAD(bp->qkv_w), GRAD(bp->qkv_b), d_qkv, arena_ptr(&a->ln1), PARAM(bp->qkv_w),
                        NULL, N, r->C, r->QKV);
    if (par) be->residual_forward(be, st, d_ln, d_ln, d_mlp_in, nc);
    tp_sum(r, d_ln, nc);  // column-parallel qkv (and fc): dL/dln1 summed over tp
    // d_res += norm backward: now dL/dx_l
    be->norm_backward(be, st, nk, d_res, GRAD(bp->ln1_w), GRAD(bp->ln1_b), d_ln, xin, PARAM(bp->ln1_w),
                      ptr_or_null(&a->ln1_mean), arena_ptr(&a->ln1_rstd), N, r->C);
}

int32_t *mr_inputs(ModelRuntime *r, int slot) { return (int32_t *)arena_ptr(&r->t_inputs) + (size_t)slot * r->B * r->T; }
int32_t *mr_targets(ModelRuntime *r) { return arena_ptr(&r->t_targets); }

// the activations of block l in slot k
#define ACTS(k, l) ((k) * r->L + (l))

void mr_forward(ModelRuntime *r, int slot, float dloss, const void *in_host, void *out_host) {
    Backend *be = r->be;
    BackendStream *st = r->stream;
    NormOp nk = r->m.norm == NORM_LAYERNORM ? NORM_OP_LAYERNORM : NORM_OP_RMSNORM;
    int N = r->B * r->T;
    size_t xbytes = (size_t)N * r->C * r->x;
    // unit u: 0 embedding (or the tied head's copy of wte), 1 + l block l, L + 1 final norm and head
    if (r->units[0].count) zero_fwd_begin(r, 0);
    void *x0 = take(&r->acts[ACTS(slot, 0)].x);
    if (!r->has_pre) {
        be->copy_h2d(be, x0, in_host, xbytes, st);  // the previous stage's output
    } else if (r->tp == 1) {
        be->embedding_forward(be, st, x0, mr_inputs(r, slot), PARAM(r->wte), PARAM(r->wpe), r->B, r->T, r->C);
    } else {  // vocabulary-parallel: each rank adds the rows it holds (wpe once, on tp rank 0), summed over tp
        be->embedding_forward_range(be, st, x0, mr_inputs(r, slot), PARAM(r->wte),
                                    r->tp_rank == 0 ? PARAM(r->wpe) : NULL, r->v0, r->Vt, r->B, r->T, r->C);
        tp_sum(r, x0, (size_t)N * r->C);
    }
    for (int l = 0; l < r->L; l++) {
        int i = ACTS(slot, l);
        int swapped = !is_ckpt_block(r, l) && r->act_mask;  // part of its tensors wait on the host
        BlockActs *a = is_ckpt_block(r, l) ? &r->work : &r->acts[i], view;
        take_rest(a);
        if (swapped) {
            take_masked(&r->aws, r->act_mask);
            view = act_view(r, i);
            a = &view;
        }
        ArenaTensor *next = l + 1 < r->L ? &r->acts[i + 1].x : &r->x_out;
        void *xnext = take(next);
        take(&r->scratch);
        const void *xin = arena_ptr(&r->acts[i].x);
        zero_fwd_begin(r, 1 + l);
        block_forward_to_act(r, l, a, xin);
        block_forward_output(r, l, a, xin, xnext);
        arena_release(&r->scratch);
        if (is_ckpt_block(r, l)) release_rest(a);  // only x_l stays
        else if (swapped) acts_swap_out(r, i);
    }
    if (!r->has_post) {  // the output goes to the next stage
        be->copy_d2h(be, out_host, arena_ptr(&r->x_out), xbytes, st);
        be->stream_synchronize(be, st);
        arena_release(&r->x_out);
        if (dloss == 0.0f) {  // evaluation: no backward follows
            for (int l = r->L - 1; l >= 0; l--) {
                int i = ACTS(slot, l);
                if (!is_ckpt_block(r, l)) {
                    release_rest(&r->acts[i]);
                    release_masked(&r->hacts[i], r->act_mask);
                }
                arena_release(&r->acts[i].x);
            }
        }
        return;
    }
    void *lnf = take(&r->lnf), *lnf_mean = take(&r->lnf_mean), *lnf_rstd = take(&r->lnf_rstd);
    void *logits = take(&r->logits);
    zero_fwd_begin(r, r->L + 1);
    be->norm_forward(be, st, nk, NULL, lnf, lnf_mean, lnf_rstd, arena_ptr(&r->x_out), NULL, PARAM(r->lnf_w),
                     PARAM(r->lnf_b), N, r->C, (float)r->m.norm_eps);
    be->matmul_forward_ld(be, st, logits, lnf, PARAM(r->lm_head), N, r->C, r->Vt, r->Vs);  // (N, Vt), stride Vs
    // losses (N); with dloss != 0 logits become dL/dlogits = dloss * (softmax - onehot)
    if (r->tp == 1) {
        be->crossentropy_forward_backward(be, st, arena_ptr(&r->t_losses), logits, mr_targets(r), N, r->V, r->Vs,
                                          dloss);
    } else {  // vocabulary-parallel: global row max, then global sum of exp and the target's logit
        float *rowmax = arena_ptr(&r->t_ce_stats), *stats = rowmax + N;
        be->crossentropy_vocab_max(be, st, rowmax, logits, N, r->Vt, r->Vs);
        be->stream_synchronize(be, st);
        commCheck(r->comm, r->comm->all_reduce(r->comm, rowmax, rowmax, (size_t)N, MIST_F32, COMM_MAX, r->tpg));
        be->crossentropy_vocab_stats(be, st, stats, logits, rowmax, mr_targets(r), r->v0, N, r->Vt, r->Vs);
        be->stream_synchronize(be, st);
        commCheck(r->comm, r->comm->all_reduce(r->comm, stats, stats, 2 * (size_t)N, MIST_F32, COMM_SUM, r->tpg));
        be->crossentropy_vocab_finish(be, st, arena_ptr(&r->t_losses), logits, rowmax, stats, mr_targets(r), r->v0,
                                      N, r->Vt, r->Vs, dloss);
    }
    if (dloss == 0.0f) {  // evaluation: drop every activation
        arena_release(&r->logits);
        arena_release(&r->lnf);
        arena_release(&r->lnf_mean);
        arena_release(&r->lnf_rstd);
        arena_release(&r->x_out);
        for (int l = r->L - 1; l >= 0; l--) {
            int i = ACTS(slot, l);
            if (!is_ckpt_block(r, l)) {
                release_rest(&r->acts[i]);
                release_masked(&r->hacts[i], r->act_mask);
            }
            arena_release(&r->acts[i].x);
        }
    }
}

void mr_backward(ModelRuntime *r, int slot, const void *dout_host, void *din_host) {
    Backend *be = r->be;
    BackendStream *st = r->stream;
    NormOp nk = r->m.norm == NORM_LAYERNORM ? NORM_OP_LAYERNORM : NORM_OP_RMSNORM;
    int N = r->B * r->T;
    size_t xbytes = (size_t)N * r->C * r->x;
    void *d_res = take(&r->d_res), *d_ln = take(&r->d_ln);
    take(&r->d_att);
    take(&r->d_qkv);
    take(&r->d_act);
    take(&r->d_fc);
    take(&r->d_ln_mlp);
    if (r->has_post) {
        void *lnf = arena_ptr(&r->lnf), *logits = arena_ptr(&r->logits);
        zero_bwd_begin(r, r->L + 1);
        be->matmul_backward_ld(be, st, d_ln, GRAD(r->lm_head), logits, lnf, PARAM(r->lm_head), N, r->C, r->Vt, r->Vs);
        tp_sum(r, d_ln, (size_t)N * r->C);  // vocabulary-parallel head: dL/dlnf summed over tp
        arena_release(&r->logits);
        be->memset_device(be, d_res, 0, xbytes, st);
        be->norm_backward(be, st, nk, d_res, GRAD(r->lnf_w), GRAD(r->lnf_b), d_ln, arena_ptr(&r->x_out),
                          PARAM(r->lnf_w), ptr_or_null(&r->lnf_mean), arena_ptr(&r->lnf_rstd), N, r->C);
        zero_bwd_end(r, r->L + 1);
        arena_release(&r->lnf);
        arena_release(&r->lnf_mean);
        arena_release(&r->lnf_rstd);
        arena_release(&r->x_out);
    } else {
        be->copy_h2d(be, d_res, dout_host, xbytes, st);  // dL/d(output) from the next stage
    }
    for (int l = r->L - 1; l >= 0; l--) {
        int i = ACTS(slot, l);
        BlockActs *a = &r->acts[i], view = r->acts[i];
        const void *xin = arena_ptr(&r->acts[i].x);
        int swapped = !is_ckpt_block(r, l) && r->act_mask;
        zero_bwd_begin(r, 1 + l);
        if (is_ckpt_block(r, l)) {  // recompute the block's tensors from its kept input
            a = &r->work;
            take_rest(a);
            take(&r->scratch);
            block_forward_to_act(r, l, a, xin);
            arena_release(&r->scratch);
            view = *a;
        } else if (swapped) {  // the offloaded tensors come back into the workspace
            acts_swap_in(r, i);
            view = act_view(r, i);
        }
        block_backward(r, l, &view, xin);
        zero_bwd_end(r, 1 + l);
        release_rest(a);
        if (swapped) release_masked(&r->aws, r->act_mask);
        arena_release(&r->acts[i].x);
    }
    if (r->units[0].count) {
        // the embedding's gradient, or (tied copy) the head's gradient of wte already in its buffer
        zero_bwd_begin(r, 0);
        if (r->has_pre && r->tp == 1)
            be->embedding_backward(be, st, GRAD(r->wte), GRAD(r->wpe), d_res, mr_inputs(r, slot), r->B, r->T, r->C);
        else if (r->has_pre)  // d_res is replicated: every rank adds to its own rows and to the (replicated) wpe
            be->embedding_backward_range(be, st, GRAD(r->wte), GRAD(r->wpe), d_res, mr_inputs(r, slot), r->v0, r->Vt,
                                         r->B, r->T, r->C);
        zero_bwd_end(r, 0);
    }
    if (!r->has_pre) {  // dL/d(input) to the previous stage
        be->copy_d2h(be, din_host, d_res, xbytes, st);
        be->stream_synchronize(be, st);
    }
    zero_bwd_finish(r);
    arena_release(&r->d_res);
    arena_release(&r->d_ln);
    arena_release(&r->d_att);
    arena_release(&r->d_qkv);
    arena_release(&r->d_act);
    arena_release(&r->d_fc);
    arena_release(&r->d_ln_mlp);
}

void mr_forward_backward(ModelRuntime *r, float dloss) {
    mr_forward(r, 0, dloss, NULL, NULL);
    if (dloss != 0.0f) mr_backward(r, 0, NULL, NULL);
}
