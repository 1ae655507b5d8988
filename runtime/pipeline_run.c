// 1F1B driver of one pipeline stage (see pipeline_run.h).
#include "runtime/pipeline_run.h"
#include <math.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/comm.h"
#include "runtime/grid.h"
#include "runtime/model_runtime.h"
#include "runtime/pipeline_schedule.h"
#include "planner/interleave.h"
#include "runtime/trace_measure.h"

enum { TAG_ACT = 11, TAG_GRAD = 12, TAG_STATE = 13 };

// The world tag of a boundary message of chunk `c`: the chunks of one rank
// exchange with the same neighbouring ranks, so each round j = c / P of chunks
// has its own tags (j = 0: the plain pipeline's)
static int chunk_tag(const PipeRun *p, int base, int c) { return base + 4 * (c / p->P); }

static int chunk_links(PipeRun *p, PipeChunk *ch, char *err, size_t errlen) {
    int s = ch->stage, d = p->grid->dp_index, t = p->grid->tp_index;
    struct { PipeLink *link; int send, src, dst; } dirs[] = {
        {&ch->act_out, 1, s, s + 1}, {&ch->act_in, 0, s - 1, s},
        {&ch->grad_out, 1, s, s - 1}, {&ch->grad_in, 0, s + 1, s},
    };
    for (int k = 0; k < 4; k++) {
        PipeLink *l = dirs[k].link;
        if (dirs[k].src < 0 || dirs[k].dst < 0 || dirs[k].src >= p->S || dirs[k].dst >= p->S) continue;
        l->n = dirs[k].send ? reshard_sends(p->plan, dirs[k].src, dirs[k].dst, d, t, l->piece, PIPE_MAX_PIECES)
                            : reshard_recvs(p->plan, dirs[k].src, dirs[k].dst, d, t, l->piece, PIPE_MAX_PIECES);
        if (l->n < 0) {
            snprintf(err, errlen, "[stage.%d] -> [stage.%d]: the boundary cannot be re-sharded (b * dp must be the "
                     "same in every stage; at most %d pieces)", dirs[k].src, dirs[k].dst, PIPE_MAX_PIECES);
            return 2;
        }
    }
    return 0;
}

int pipe_init(PipeRun *p, ModelRuntime *const *chunks, const Grid *grid, const Plan *plan, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    p->r = chunks[0];
    p->grid = grid;
    p->plan = plan;
    p->comm = grid->comm;
    p->stage = grid->stage;
    p->S = plan->num_stages;
    p->G = plan->G;
    p->P = plan_pipeline_size(plan);
    p->v = plan_virtual(plan);
    int s = p->stage;
    for (int i = 0; i < p->P - 1; i++) p->last_root += plan->stage[i].dp * plan->stage[i].tp;
    for (int j = 0; j < p->v; j++) {
        p->chunk[j].r = chunks[j];
        p->chunk[j].stage = s + j * p->P;
        int rc = chunk_links(p, &p->chunk[j], err, errlen);
        if (rc) return rc;
    }
    if (p->S > 1 && p->r->m.tied_embeddings) {  // the embedding's rank and the head's
        int member = s == 0 || s == p->P - 1;
        CommGroup *g = NULL;
        commCheck(p->comm, p->comm->group_split(p->comm, grid->world, member, grid->world_rank, &g));
        if (member) p->tied = g;
        else p->other = g;
    }
    return 0;
}

void pipe_free(PipeRun *p) {
    if (p->tied) p->comm->group_free(p->comm, p->tied);
    if (p->other) p->comm->group_free(p->comm, p->other);
    p->tied = p->other = NULL;
}

// ---------------------------------------------------------------- messages
static size_t seq_elems(const PipeRun *p) { return (size_t)p->r->T * p->r->C; }

// starts the messages of one boundary tensor (b, T, C) in device buffer buf
static void link_start(PipeRun *p, PipeLink *l, int which, void *buf, int send, int tag) {
    size_t per_seq = seq_elems(p), x = p->r->x;
    MistDtype t = p->r->be->dtype;
    for (int i = 0; i < l->n; i++) {
        const ReshardPiece *pc = &l->piece[i];
        char *at = (char *)buf + (size_t)pc->local_offset * per_seq * x;
        size_t count = (size_t)pc->count * per_seq;
        if (send) commCheck(p->comm, p->comm->isend(p->comm, at, count, t, pc->peer, tag, p->grid->world, &l->req[which][i]));
        else commCheck(p->comm, p->comm->irecv(p->comm, at, count, t, pc->peer, tag, p->grid->world, &l->req[which][i]));
    }
}

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void link_wait(PipeRun *p, PipeLink *l, int which) {
    double t0 = seconds_now();
    for (int i = 0; i < l->n; i++)
        if (l->req[which][i]) {
            commCheck(p->comm, p->comm->wait(p->comm, l->req[which][i]));
            l->req[which][i] = NULL;
        }
    p->sec_wait += seconds_now() - t0;
}

static void link_wait_all(PipeRun *p, PipeLink *l) {
    link_wait(p, l, 0);
    link_wait(p, l, 1);
}

// ---------------------------------------------------------------- iterations
static void load_or_abort(PipeRun *p, ModelRuntime *r, const PipeData *d, int64_t it, int g, int slot) {
    if ((r->has_pre || r->has_post) && d->load(d->ctx, r, it, g, slot)) p->comm->abort(p->comm, 1, "data error");
}

// the loss sum lives on the last stage; every rank gets it (the skip decision
// for a non-finite loss must agree everywhere)
static double share_loss(PipeRun *p, double sum) {
    if (p->S > 1) commCheck(p->comm, p->comm->broadcast(p->comm, &sum, sizeof sum, MIST_U8, p->last_root, p->grid->world));
    return sum;
}

static PipeChunk *chunk_of(PipeRun *p, const ChunkPass *a) { return &p->chunk[a->chunk / p->P]; }

// The messages between two of the rank's passes, started together: the
// output of the pass just done (done; NULL before the first) and the input of
// the next one (next; NULL after the last), each through its chunk's links.
// On NCCL they form one group, so a send and a receive between the same two
// ranks cannot wait on each other's order (1F1B's steady state pairs them:
// this stage's activation goes to the next stage while that stage's gradient
// comes back); MPI starts them alone.
static void exchange(PipeRun *p, const ChunkPass *done, const ChunkPass *next) {
    const CommBackend *c = p->comm;
    if (c->p2p_group) commCheck(c, c->p2p_group(c, 1));
    if (done) {
        PipeChunk *ch = chunk_of(p, done);
        ModelRuntime *r = ch->r;
        int buf = done->microbatch % 2, first = ch->stage == 0, last = ch->stage == p->S - 1;
        if (!done->backward && !last)
            link_start(p, &ch->act_out, buf, arena_ptr(&r->pipe_act_out[buf]), 1, chunk_tag(p, TAG_ACT, ch->stage));
        if (done->backward && !first)  // to chunk stage - 1: the round of the receiver
            link_start(p, &ch->grad_out, buf, arena_ptr(&r->pipe_grad_out[buf]), 1,
                       chunk_tag(p, TAG_GRAD, ch->stage - 1));
    }
    if (next) {
        PipeChunk *ch = chunk_of(p, next);
        ModelRuntime *r = ch->r;
        int first = ch->stage == 0, last = ch->stage == p->S - 1;
        if (!next->backward && !first)
            link_start(p, &ch->act_in, 0, arena_ptr(&r->pipe_act_in), 0, chunk_tag(p, TAG_ACT, ch->stage - 1));
        if (next->backward && !last)
            link_start(p, &ch->grad_in, 0, arena_ptr(&r->pipe_grad_in), 0, chunk_tag(p, TAG_GRAD, ch->stage));
    }
    if (c->p2p_group) commCheck(c, c->p2p_group(c, 0));
}

// One pass of the iteration: its input has arrived in its chunk's receive
// buffer (posted after the previous pass, which had consumed the buffer's last
// contents), and the send buffer its output goes to is free again (its send two
// micro-batches ago completed). Returns the loss sum it adds (last stage).
static double run_pass(PipeRun *p, const ChunkPass *a, int64_t it, float dloss, const PipeData *d) {
    PipeChunk *ch = chunk_of(p, a);
    ModelRuntime *r = ch->r;
    Backend *be = r->be;
    int g = a->microbatch, slot = g % r->K, buf = g % 2, first = ch->stage == 0, last = ch->stage == p->S - 1;
    double t0, loss = 0.0;
    if (!a->backward) {
        load_or_abort(p, r, d, it, g, slot);
        if (!first) link_wait(p, &ch->act_in, 0);
        if (!last) link_wait(p, &ch->act_out, buf);
        t0 = seconds_now();
        trace_measure_pass(p->trace, TRACE_FORWARD, g, ch->stage);
        mr_forward(r, slot, dloss, arena_ptr(&r->pipe_act_in), arena_ptr(&r->pipe_act_out[buf]));
        trace_measure_mark(p->trace, TRACE_BUBBLE, g);  // the pass ends
        be->stream_synchronize(be, r->stream);  // the output is in its send buffer, the input consumed
        p->sec_compute += seconds_now() - t0;
        if (last) loss = d->loss_sum(d->ctx, r);
    } else {
        r->micro_last = g == p->G - 1;  // gradients are reduced over dp after the last one
        if (!last) link_wait(p, &ch->grad_in, 0);
        if (!first) link_wait(p, &ch->grad_out, buf);
        t0 = seconds_now();
        trace_measure_pass(p->trace, TRACE_BACKWARD, g, ch->stage);
        mr_backward(r, slot, arena_ptr(&r->pipe_grad_in), arena_ptr(&r->pipe_grad_out[buf]));
        trace_measure_mark(p->trace, TRACE_BUBBLE, g);
        be->stream_synchronize(be, r->stream);
        p->sec_compute += seconds_now() - t0;
    }
    return loss;
}

double pipe_train_iteration(PipeRun *p, int64_t it, float dloss, const PipeData *d) {
    int n = 2 * p->G * p->v;
    ChunkPass *order = malloc((size_t)n * sizeof *order);
    // the plain 1F1B order for v = 1 (the same passes as pipeline_schedule.h's), else Megatron's interleaved one
    n = interleaved_order(p->stage, p->P, p->v, p->G, order);
    p->sec_compute = p->sec_wait = 0;
    exchange(p, NULL, &order[0]);
    double loss = 0.0;
    for (int i = 0; i < n; i++) {
        loss += run_pass(p, &order[i], it, dloss, d);
        exchange(p, &order[i], i + 1 < n ? &order[i + 1] : NULL);
    }
    for (int j = 0; j < p->v; j++) {
        link_wait_all(p, &p->chunk[j].act_out);
        link_wait_all(p, &p->chunk[j].grad_out);
    }
    free(order);
    return share_loss(p, loss);
}

double pipe_eval(PipeRun *p, int batches, const PipeData *d) {
    ChunkPass fwd[2];
    double loss = 0.0;
    // forward passes only, one after the other: receive, compute, send; with
    // [plan] virtual each micro-batch through the rank's chunks in turn
    for (int k = 0; k < batches * p->v; k++) {
        int g = k / p->v;
        PipeChunk *ch = &p->chunk[k % p->v];
        ModelRuntime *r = ch->r;
        int first = ch->stage == 0, last = ch->stage == p->S - 1;
        fwd[k % 2] = (ChunkPass){0, g, ch->stage};
        load_or_abort(p, r, d, 0, g, 0);
        exchange(p, NULL, &fwd[k % 2]);
        if (!first) link_wait(p, &ch->act_in, 0);
        mr_forward(r, 0, 0.0f, arena_ptr(&r->pipe_act_in), arena_ptr(&r->pipe_act_out[g % 2]));
        r->be->stream_synchronize(r->be, r->stream);
        exchange(p, &fwd[k % 2], NULL);
        if (!last) link_wait(p, &ch->act_out, g % 2);
        else loss += d->loss_sum(d->ctx, r);
    }
    return share_loss(p, loss);
}

double pipe_grad_norm(PipeRun *p) {
    // Megatron's rule for a head tied across stages: both copies step with the
    // sum of their gradients, so they stay equal bit for bit (the embedding is
    // on the rank's first chunk, the head on its last)
    if (p->tied)
        zero_sum_tied_grads(p->stage == 0 ? p->chunk[0].r : p->chunk[p->v - 1].r, p->tied,
                            p->grid->dp_index == 0 && p->grid->tp_index == 0);
    double norm = zero_grad_norm(p->r);  // this stage's, the same on its every rank
    if (p->S == 1) return norm;
    // ||g||^2 = sum over stages; one rank per stage adds its stage's part (its chunks' together)
    double part = norm * norm;
    for (int j = 1; j < p->v; j++) {
        double c = zero_grad_norm(p->chunk[j].r);
        part += c * c;
    }
    float sq = p->grid->dp_index == 0 && p->grid->tp_index == 0 ? (float)part : 0.0f;
    commCheck(p->comm, p->comm->all_reduce(p->comm, &sq, &sq, 1, MIST_F32, COMM_SUM, p->grid->world));
    return sqrt((double)sq);
}

// The sender's part of pipe_gather_state: one chunk's tensors (without the tied
// copy), one contiguous range of the whole model's flat layout: [unit of its
// first part, unit after its last); rank 0 copies its own into place.
static void send_chunk_state(PipeRun *p, const ModelRuntime *r, const ModelRuntime *full, const float *stage_whole,
                             float *whole) {
    size_t total = 0;
    for (int k = 0; k < r->num_tensors; k++)
        if (!r->tensors[k].tied_copy) total += (size_t)(r->tensors[k].spec.rows * r->tensors[k].spec.cols);
    float *packed = malloc((total ? total : 1) * sizeof(float));
    for (int a = 0; a < 3; a++) {
        const float *src = stage_whole + (size_t)a * r->Pglobal;
        size_t at = 0;
        for (int k = 0; k < r->num_tensors; k++) {
            const ParamTensor *t = &r->tensors[k];
            if (t->tied_copy) continue;
            size_t n = (size_t)(t->spec.rows * t->spec.cols);  // the whole tensor (every tp shard)
            memcpy(packed + at, src + t->goffset, n * sizeof(float));
            at += n;
        }
        if (p->grid->world_rank == 0) {
            size_t start = full->tensors[r->tensors[0].gidx].offset;
            memcpy(whole + (size_t)a * full->Pp + start, packed, total * sizeof(float));
        } else {
            commCheck(p->comm, p->comm->send(p->comm, packed, total, MIST_F32, 0, TAG_STATE, p->grid->world));
        }
    }
    free(packed);
}

void pipe_gather_state(PipeRun *p, const ModelRuntime *full, float *const *stage_whole, float *whole) {
    const Grid *g = p->grid;
    if (g->dp_index == 0 && g->tp_index == 0)
        for (int j = 0; j < p->v; j++) send_chunk_state(p, p->chunk[j].r, full, stage_whole[j], whole);
    if (g->world_rank != 0) return;
    // the other stages' first ranks, in stage order: stage s holds the units
    // [1 + its first block, 1 + its first block + its blocks) (with pre / post
    // at the ends), i.e. one contiguous range of the whole layout; a rank
    // sends its chunks in stage order, so each sender's messages arrive in order
    const Plan *plan = p->plan;
    for (int s = 0; s < p->S; s++) {
        int first = plan_first_layer(plan, s), layers = plan->stage[s].layers, rank = 0;
        for (int i = 0; i < s % p->P; i++) rank += plan->stage[i].dp * plan->stage[i].tp;
        size_t start = s == 0 ? 0 : full->units[1 + first].off;
        size_t end = s == p->S - 1 ? full->Pp : full->units[1 + first + layers].off;
        if (rank != 0)
            for (int a = 0; a < 3; a++)
                commCheck(p->comm, p->comm->recv(p->comm, whole + (size_t)a * full->Pp + start, end - start, MIST_F32, rank,
                                                 TAG_STATE, g->world));
    }
}
