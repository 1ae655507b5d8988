// The memory of one stage: its activations matched to models/model.h
// (runtime/activations.h), the memory plan that carves every tensor from the
// arenas, and the prediction of their peaks.
#include "runtime/model_runtime.h"
#include "runtime/pipeline_schedule.h"
#include "planner/interleave.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------- the activation table
#define BLOCK_ROW(field, part, name, label, use, shape, models) \
    {name, label, PART_##part, MR_USE_##use, MR_SHAPE_##shape, MR_MODELS_##models, offsetof(BlockActs, field)},
#define STAGE_ROW(field, part, name, label, use, shape, models) \
    {name, label, PART_##part, MR_USE_##use, MR_SHAPE_##shape, MR_MODELS_##models, offsetof(ModelRuntime, field)},
const MrAct mr_acts[MR_NUM_ACTS] = {MR_BLOCK_ACTS(BLOCK_ROW) MR_STAGE_ACTS(STAGE_ROW)};
#undef BLOCK_ROW
#undef STAGE_ROW

static size_t spec_bytes(const ModelRuntime *r, const ActSpec *a) {
    return (size_t)a->elems * (a->f32 ? sizeof(float) : r->x);
}

// the row of models/'s activation `name` of `part`, -1 when the runtime has none
static int act_row(ModelPart part, const char *name) {
    for (int k = 0; k < MR_NUM_ACTS; k++)
        if (mr_acts[k].part == part && !strcmp(mr_acts[k].name, name)) return k;
    return -1;
}

// models/model.h's saved / ckpt_saved flags of a block tensor, as the rows' uses imply
static int flags_agree(const ActSpec *a, MrActUse use) {
    return a->ckpt_saved == (use == MR_USE_INPUT) && a->saved == (use == MR_USE_INPUT || use == MR_USE_SAVED);
}

// The one place models/'s activations meet the runtime's rows: r->act_bytes
// from model_acts of the block and post parts. 0, or 1 with err (a tensor the
// runtime does not know, or one it keeps other than models/ says).
static int match_acts(ModelRuntime *r, char *err, size_t errlen) {
    static const ModelPart parts[2] = {PART_BLOCK, PART_POST};
    ActSpec list[2][MODEL_MAX_ACTS];
    int n[2];
    for (int p = 0; p < 2; p++)
        n[p] = model_acts_sp(&r->m, parts[p], r->B, r->T, r->tp, r->sp, list[p], MODEL_MAX_ACTS);
    if (n[0] < 0 || n[1] < 0) {
        snprintf(err, errlen, "models/model.h: model_acts failed for b=%d s=%d tp=%d", r->B, r->T, r->tp);
        return 1;
    }
    memset(r->act_bytes, 0, sizeof r->act_bytes);
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < n[p]; i++) {
            const ActSpec *a = &list[p][i];
            int k = act_row(parts[p], a->name);
            if (k < 0 || (parts[p] == PART_BLOCK && (!flags_agree(a, mr_acts[k].use) ||
                                                     a->sel_recompute != (int)(MR_SELECTIVE_MASK >> k & 1)))) {
                snprintf(err, errlen, "models/model.h: activation '%s' of the %s %s (runtime/activations.h)", a->name,
                         p ? "post part" : "block", k < 0 ? "is unknown to the runtime"
                                                          : "is saved for backward otherwise than the runtime keeps it");
                return 1;
            }
            r->act_bytes[k] = spec_bytes(r, a);
        }
    return 0;
}

// the bytes forward/backward write into row k for this model (0: it does not use it)
static size_t act_want(const ModelRuntime *r, int k) {
    const MrAct *a = &mr_acts[k];
    int ln = r->m.norm == NORM_LAYERNORM, seq = !r->m.parallel_block;
    int needed = a->models == MR_MODELS_ALL || (a->models == MR_MODELS_LAYERNORM && ln) ||
                 (a->models == MR_MODELS_SEQUENTIAL && seq) || (a->models == MR_MODELS_SEQ_LAYERNORM && seq && ln) ||
                 (a->models == MR_MODELS_PARALLEL && !seq) || (a->models == MR_MODELS_SP && r->sp) ||
                 (a->models == MR_MODELS_LEAN_GELU && r->lean && r->m.activation != ACT_SWIGLU);
    if (!needed) return 0;
    size_t N = (size_t)r->B * r->T, x = r->x;
    size_t Ns = r->sp ? N / (size_t)r->tp : N;  // rows of the sequence-sharded tensors
    size_t norm_params = (size_t)(ln ? 2 : 1) * (seq ? 2 : 1);
    switch (a->shape) {
    case MR_SHAPE_NC: return N * r->C * x;
    case MR_SHAPE_N_F32: return N * sizeof(float);
    case MR_SHAPE_N_QKV: return N * r->QKV * x;
    case MR_SHAPE_N_ATT: return N * r->NH * r->HS * x;
    case MR_SHAPE_LSE: return (size_t)r->B * r->NH * r->T * sizeof(float);
    case MR_SHAPE_N_FC: return N * r->FC * x;
    case MR_SHAPE_N_F: return N * r->F * x;
    case MR_SHAPE_LOGITS: return N * r->Vs * x;
    case MR_SHAPE_NC_SEQ: return Ns * r->C * x;
    case MR_SHAPE_N_F32_SEQ: return Ns * sizeof(float);
    case MR_SHAPE_NORM_GRADS: return norm_params * r->C * x;
    case MR_SHAPE_N_F_BITS: return (N * r->F + 7) / 8;
    }
    return 0;
}

// Every tensor forward/backward write is at least as big as they write. 0, or 1 with err.
static int check_acts(const ModelRuntime *r, char *err, size_t errlen) {
    for (int k = 0; k < MR_NUM_ACTS; k++) {
        if (mr_acts[k].part == PART_POST && !r->has_post) continue;  // a stage without the head never writes them
        size_t want = act_want(r, k), got = r->act_bytes[k];
        if (got < want) {
            snprintf(err, errlen, "models/model.h: activation '%s' of the %s is %zu bytes; the runtime writes %zu "
                     "(b=%d, s=%d)", mr_acts[k].name, mr_acts[k].part == PART_BLOCK ? "block" : "post part", got,
                     want, r->B, r->T);
            return 1;
        }
    }
    return 0;
}

// ---------------------------------------------------------------- sizes
// Every activation size comes from models/model.h (model_acts), the same
// description the planner evaluates symbolically; the prediction below sums
// them by the rows' uses, never looking at the arena, so a mismatch between
// it and what forward/backward take shows up as predicted != measured.
typedef struct {
    size_t x_nc;        // the block input x (N,C): the one tensor a checkpointed block keeps
    size_t block_rest;  // one block's other saved tensors
    size_t sel;         // of block_rest, the selective workspace's (att, lse) when r->sel, else 0
    size_t lean_drop;   // of block_rest, what a lean block does not keep (mr_lean_drop_mask), else 0
    size_t lean_only;   // of block_rest, what only a lean block keeps (fc_mask; 0 when not lean)
    size_t lean_act;    // lean SwiGLU: act, a forward transient of a lean block (in d_act), else 0
    size_t scratch;     // projection outputs (transient)
    size_t gather;      // sp: the gathered norm output (with scratch in forward, the grads in backward)
    size_t x_out;       // the stage's output (N,C): the last block's output, whole under sp too
    size_t grads_bufs;  // backward gradient buffers (transient)
    size_t post;        // lnf and its statistics
    size_t logits, losses;
} ActSizes;

static ActSizes act_sizes(const ModelRuntime *r) {
    ActSizes s = {0};
    for (int k = 0; k < MR_NUM_ACTS; k++) {
        size_t bytes = r->act_bytes[k];
        switch (mr_acts[k].use) {
        case MR_USE_INPUT: s.x_nc += bytes; break;
        case MR_USE_SAVED:
            s.block_rest += bytes;
            if (!(mr_kept_mask(r) >> k & 1)) s.sel += bytes;
            if (mr_lean_drop_mask(r) >> k & 1) s.lean_drop += bytes;
            if (MR_LEAN_ONLY_MASK >> k & 1) s.lean_only += bytes;
            if (k == MR_ACT_act && (mr_lean_drop_mask(r) >> k & 1)) s.lean_act = bytes;
            break;
        case MR_USE_SCRATCH: s.scratch += bytes; break;
        case MR_USE_GATHER: s.gather += bytes; break;
        case MR_USE_GRAD: s.grads_bufs += bytes; break;
        case MR_USE_OUTPUT: s.x_out += bytes; break;
        case MR_USE_HEAD: s.post += bytes; break;
        case MR_USE_LOGITS: s.logits += bytes; break;
        case MR_USE_LOSSES: s.losses += bytes; break;
        }
    }
    return s;
}

// Activation offload (ao): which saved tensors of a non-checkpointed block
// wait on the host between its forward and its backward. Tensors are moved
// whole (a kernel needs each one contiguous in device memory): the largest
// first, while their sum stays within ao times the block's saved bytes
// (besides x, the block input, which stays). Under selective recompute the
// block offloads the same tensors less the ones it does not keep (att, lse;
// mr_kept_mask): selective never keeps more on the device than without, and
// moves less when the scan took att. Bit k: row k.
static unsigned act_offload_mask(const ModelRuntime *r, size_t *offloaded_bytes) {
    size_t total = 0, sum = 0;
    for (int k = 0; k < MR_NUM_BLOCK_ACTS; k++)
        if (mr_acts[k].use == MR_USE_SAVED) total += r->act_bytes[k];
    double budget = r->ao * (double)total;
    unsigned mask = 0;
    for (;;) {
        int best = -1;
        for (int k = 0; k < MR_NUM_BLOCK_ACTS; k++) {
            size_t bytes = r->act_bytes[k];
            if (mr_acts[k].use == MR_USE_SAVED && !(mask >> k & 1) && bytes > 0 && (double)(sum + bytes) <= budget &&
                (best < 0 || bytes > r->act_bytes[best]))
                best = k;
        }
        if (best < 0) break;
        mask |= 1u << best;
        sum += r->act_bytes[best];
    }
    mask &= mr_kept_mask(r);  // selective recompute: att and lse are not kept, so not moved
    *offloaded_bytes = 0;
    for (int k = 0; k < MR_NUM_BLOCK_ACTS; k++)
        if (mask >> k & 1) *offloaded_bytes += r->act_bytes[k];
    return mask;
}

// tp > 1: the vocabulary-parallel cross-entropy's row max f32(N) and its
// [sum exp | target logit] f32(2N), reduced over the tp group between passes
static size_t ce_stats_bytes(const ModelRuntime *r) {
    return r->tp > 1 ? 3 * (size_t)r->B * r->T * sizeof(float) : 0;
}

// device X(N,C) buffers of the pipeline boundary: one receive and two sends
// (a send may still be in flight while the next one is filled) per neighbour
static size_t boundary_bytes(const ModelRuntime *r) { return (size_t)r->B * r->T * r->C * r->x; }
static size_t boundary_device_bytes(const ModelRuntime *r) {
    return (r->has_pre ? 0 : 3) * boundary_bytes(r) + (r->has_post ? 0 : 3) * boundary_bytes(r);
}

static size_t persistent_device_bytes(const ModelRuntime *r, const ActSizes *s) {
    size_t N = (size_t)r->B * r->T, states, host;
    // params, grads, master, m, v (each unit's resident part) and the staging
    // of sharded / offloaded units: runtime/zero.c
    zero_predict(r, &states, &host);
    // + grad-norm accumulator, cross-entropy statistics (tp), tokens (one set per slot), targets, losses,
    // the pipeline boundary's receive and send buffers
    return states + sizeof(float) + ce_stats_bytes(r) + ((size_t)r->K + 1) * N * sizeof(int32_t) + s->losses +
           boundary_device_bytes(r);
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

// one block's own saved tensors: a checkpointed block's workspace keeps no
// lean-only tensor, a lean block keeps all but mr_lean_drop_mask
static size_t block_rest(const ModelRuntime *r, const ActSizes *s, int l) {
    return mr_is_ckpt_block(r, l) ? s->block_rest - s->lean_only : s->block_rest - s->lean_drop;
}

static void sim_forward(const ModelRuntime *r, MemSim *m) {
    const ActSizes *s = &m->s;
    sim_grow(m, s->x_nc);                       // x_0 (embedding, or the received activation)
    if (r->sp && r->has_pre) {                  // sp: the embedding's partial sums in the scratch
        sim_grow(m, s->scratch);
        m->live -= s->scratch;
    }
    for (int l = 0; l < r->L; l++) {
        // own tensors (+ the swap workspace, + the selective workspace), or the recompute workspace
        sim_grow(m, block_rest(r, s, l));
        sim_grow(m, l + 1 < r->L ? s->x_nc : s->x_out);  // x_{l+1}
        // projection scratch (sp: and the gathered norm output; lean SwiGLU: act in d_act)
        size_t work = s->scratch + s->gather + (mr_is_lean_block(r, l) ? s->lean_act : 0);
        sim_grow(m, work);
        m->live -= work;
        if (mr_is_ckpt_block(r, l)) m->live -= block_rest(r, s, l);
        else {  // the selective workspace given back, the offloaded tensors swapped out
            m->live -= s->sel + m->off;
            m->hlive += m->off;
            if (m->hlive > m->hpeak) m->hpeak = m->hlive;
        }
    }
    if (r->has_post) sim_grow(m, s->post + s->logits);  // final norm, logits
    else m->live -= s->x_out;                            // the output went to a send buffer
}

static void sim_backward(const ModelRuntime *r, MemSim *m) {
    const ActSizes *s = &m->s;
    sim_grow(m, s->grads_bufs + s->gather);     // backward starts
    if (r->has_post) {
        m->live -= s->logits;
        m->live -= s->post + s->x_out;          // lnf and the last block's output
    }
    for (int l = r->L - 1; l >= 0; l--) {
        if (mr_is_ckpt_block(r, l)) {
            sim_grow(m, block_rest(r, s, l) + s->scratch);  // recompute into the workspace (+ scratch)
            m->live -= s->scratch;
        } else {
            sim_grow(m, m->off + s->sel);       // swapped in; att, lse recomputed (selective)
            m->hlive -= m->off;
        }
        m->live -= block_rest(r, s, l) + s->x_nc;  // the block's tensors and its input
    }
    m->live -= s->grads_bufs + s->gather;
}

// an interleaved chunk (mr_set_interleaved): its own passes, in the order of its pipeline rank
static void interleaved_memory(const ModelRuntime *r, MemSim *m) {
    const MrPipeline *p = &r->pipe;
    int n = 2 * p->G * p->v;
    ChunkPass *order = malloc((size_t)n * sizeof *order);
    n = interleaved_order(p->stage % p->P, p->P, p->v, p->G, order);
    for (int i = 0; i < n; i++) {
        if (order[i].chunk != p->stage) continue;
        if (order[i].backward) sim_backward(r, m);
        else sim_forward(r, m);
    }
    free(order);
}

void mr_memory_predict(const ModelRuntime *r, int64_t *device_peak, int64_t *host_peak) {
    MemSim m = {.s = act_sizes(r)};
    act_offload_mask(r, &m.off);
    m.live = m.peak = persistent_device_bytes(r, &m.s);
    // the stage's micro-batches in 1F1B order (pipeline_schedule.h): up to K
    // forwards keep their activations before the matching backwards free them
    int G = r->pipe.G, n = 2 * G;
    if (r->pipe.v > 1) {
        interleaved_memory(r, &m);
    } else {
        PipeAction *order = malloc((size_t)n * sizeof *order);
        pipeline_1f1b(r->pipe.stage, r->pipe.stages, G, order);
        for (int i = 0; i < n; i++) {
            if (order[i].kind == PIPE_FORWARD) sim_forward(r, &m);
            else sim_backward(r, &m);
        }
        free(order);
    }
    *device_peak = (int64_t)m.peak;
    size_t N = (size_t)r->B * r->T;
    // host: token staging, per-token losses, all ranks' losses of a micro-batch,
    // the offloaded parts of params, grads and optimizer state, and the
    // offloaded activations of every micro-batch in flight
    size_t states_dev, states_host;
    zero_predict(r, &states_dev, &states_host);
    *host_peak = (int64_t)(3 * N * sizeof(float) + (size_t)r->dp * N * sizeof(float) + states_host + m.hpeak);
}

// ---------------------------------------------------------------- plan
// one block's saved tensors: those of `keep` (bits: rows) with their size,
// the others as 0-byte placeholders
static void carve_block(ModelRuntime *r, BlockActs *a, Arena *arena, unsigned keep) {
    for (int k = 0; k < MR_NUM_BLOCK_ACTS; k++)
        if (mr_acts[k].use == MR_USE_SAVED)
            arena_carve(arena, mr_block_act(a, k), keep >> k & 1 ? r->act_bytes[k] : 0, mr_acts[k].label);
}

// the activations: every slot's blocks, the workspaces of checkpointed and
// offloaded blocks, the host copies of offloaded tensors, the shared buffers
static void carve_acts(ModelRuntime *r) {
    Arena *d = &r->dev, *h = &r->host;
    int slots_x_blocks = r->K * r->L;
    r->acts = calloc((size_t)slots_x_blocks, sizeof *r->acts);
    for (int i = 0; i < slots_x_blocks; i++) {
        arena_carve(d, &r->acts[i].x, r->act_bytes[MR_ACT_x], mr_acts[MR_ACT_x].label);
        if (!mr_is_ckpt_block(r, i % r->L))
            carve_block(r, &r->acts[i], d, ~r->act_mask & mr_kept_mask(r) & ~mr_lean_drop_mask(r));
    }
    // shared by every checkpointed block (which runs the plain forms: no lean-only tensor)
    if (r->ckpt > 0) carve_block(r, &r->work, d, ~(unsigned)MR_LEAN_ONLY_MASK);
    // selective recompute: att and lse of the block running, shared by the blocks not checkpointed
    carve_block(r, &r->sws, d, r->sel && r->ckpt < r->L ? (unsigned)MR_SELECTIVE_MASK : 0u);
    // offloaded activations: one device workspace, a host copy per non-checkpointed block and slot
    carve_block(r, &r->aws, d, r->act_mask);
    r->hacts = calloc((size_t)slots_x_blocks, sizeof *r->hacts);
    for (int i = 0; i < slots_x_blocks; i++)
        carve_block(r, &r->hacts[i], h, mr_is_ckpt_block(r, i % r->L) ? 0u : r->act_mask);
    for (int k = MR_NUM_BLOCK_ACTS; k < MR_NUM_ACTS; k++)
        if (mr_acts[k].use != MR_USE_LOSSES)  // carved with the run's tensors
            arena_carve(d, mr_stage_act(r, k), r->act_bytes[k], mr_acts[k].label);
}

int mr_plan_memory(ModelRuntime *r, Backend *be, char *err, size_t errlen) {
    r->be = be;
    r->x = mist_dtype_size(be->dtype);
    r->stream = be->stream_create(be);
    arena_init(&r->dev, "device", ARENA_DEVICE);
    arena_init(&r->host, "host", ARENA_HOST);
    Arena *d = &r->dev, *h = &r->host;
    size_t N = (size_t)r->B * r->T;
    if (match_acts(r, err, errlen)) return 1;
    r->act_bytes[MR_ACT_fc_mask] = act_want(r, MR_ACT_fc_mask);  // the lean GELU's bits: not a models/ tensor
    if (check_acts(r, err, errlen)) return 1;
    size_t off_bytes;
    r->act_mask = act_offload_mask(r, &off_bytes);
    zero_carve(r);  // params, grads, master, m, v and their staging
    arena_carve(d, &r->t_norm_acc, sizeof(float), "grad_norm_acc");
    arena_carve(d, &r->t_ce_stats, ce_stats_bytes(r), "tp.ce_stats");
    arena_carve(d, &r->t_inputs, (size_t)r->K * N * sizeof(int32_t), "inputs");
    arena_carve(d, &r->t_targets, N * sizeof(int32_t), "targets");
    arena_carve(d, &r->t_losses, r->act_bytes[MR_ACT_t_losses], mr_acts[MR_ACT_t_losses].label);
    carve_acts(r);
    arena_carve(h, &r->h_inputs, N * sizeof(int32_t), "host.inputs");
    arena_carve(h, &r->h_targets, N * sizeof(int32_t), "host.targets");
    arena_carve(h, &r->h_losses, N * sizeof(float), "host.losses");
    arena_carve(h, &r->h_gather, (size_t)r->dp * N * sizeof(float), "host.losses_all_ranks");
    size_t in_b = r->has_pre ? 0 : boundary_bytes(r), out_b = r->has_post ? 0 : boundary_bytes(r);
    arena_carve(d, &r->pipe_act_in, in_b, "pipe.act_in");
    arena_carve(d, &r->pipe_grad_in, out_b, "pipe.grad_in");
    for (int k = 0; k < 2; k++) {
        arena_carve(d, &r->pipe_act_out[k], out_b, "pipe.act_out");
        arena_carve(d, &r->pipe_grad_out[k], in_b, "pipe.grad_out");
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
