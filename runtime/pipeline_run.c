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
#include "runtime/trace_measure.h"

enum { TAG_ACT = 11, TAG_GRAD = 12, TAG_STATE = 13 };

int pipe_init(PipeRun *p, ModelRuntime *r, const Grid *grid, const Plan *plan, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    p->r = r;
    p->grid = grid;
    p->plan = plan;
    p->comm = grid->comm;
    p->stage = grid->stage;
    p->S = plan->num_stages;
    p->G = plan->G;
    int s = p->stage, d = grid->dp_index, t = grid->tp_index;
    for (int i = 0; i < p->S - 1; i++) p->last_root += plan->stage[i].dp * plan->stage[i].tp;
    struct { PipeLink *link; int send, src, dst; } dirs[] = {
        {&p->act_out, 1, s, s + 1}, {&p->act_in, 0, s - 1, s},
        {&p->grad_out, 1, s, s - 1}, {&p->grad_in, 0, s + 1, s},
    };
    for (int k = 0; k < 4; k++) {
        PipeLink *l = dirs[k].link;
        if (dirs[k].src < 0 || dirs[k].dst < 0 || dirs[k].src >= p->S || dirs[k].dst >= p->S) continue;
        l->n = dirs[k].send ? reshard_sends(plan, dirs[k].src, dirs[k].dst, d, t, l->piece, PIPE_MAX_PIECES)
                            : reshard_recvs(plan, dirs[k].src, dirs[k].dst, d, t, l->piece, PIPE_MAX_PIECES);
        if (l->n < 0) {
            snprintf(err, errlen, "[stage.%d] -> [stage.%d]: the boundary cannot be re-sharded (b * dp must be the "
                     "same in every stage; at most %d pieces)", dirs[k].src, dirs[k].dst, PIPE_MAX_PIECES);
            return 2;
        }
    }
    if (p->S > 1 && r->m.tied_embeddings) {
        int member = s == 0 || s == p->S - 1;
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
static void load_or_abort(PipeRun *p, const PipeData *d, int64_t it, int g, int slot) {
    if ((p->r->has_pre || p->r->has_post) && d->load(d->ctx, it, g, slot))
        p->comm->abort(p->comm, 1, "data error");
}

// the loss sum lives on the last stage; every rank gets it (the skip decision
// for a non-finite loss must agree everywhere)
static double share_loss(PipeRun *p, double sum) {
    if (p->S > 1) commCheck(p->comm, p->comm->broadcast(p->comm, &sum, sizeof sum, MIST_U8, p->last_root, p->grid->world));
    return sum;
}

// The messages between two of the stage's passes, started together: the
// output of the pass just done (done; NULL before the first) and the input of
// the next one (next; NULL after the last). On NCCL they form one group, so a
// send and a receive between the same two ranks cannot wait on each other's
// order (1F1B's steady state pairs them: this stage's activation goes to the
// next stage while that stage's gradient comes back); MPI starts them alone.
static void exchange(PipeRun *p, const PipeAction *done, const PipeAction *next) {
    ModelRuntime *r = p->r;
    const CommBackend *c = p->comm;
    int first = p->stage == 0, last = p->stage == p->S - 1;
    if (c->p2p_group) commCheck(c, c->p2p_group(c, 1));
    if (done) {
        int buf = done->microbatch % 2;
        if (done->kind == PIPE_FORWARD && !last)
            link_start(p, &p->act_out, buf, arena_ptr(&r->pipe_act_out[buf]), 1, TAG_ACT);
        if (done->kind == PIPE_BACKWARD && !first)
            link_start(p, &p->grad_out, buf, arena_ptr(&r->pipe_grad_out[buf]), 1, TAG_GRAD);
    }
    if (next && next->kind == PIPE_FORWARD && !first) link_start(p, &p->act_in, 0, arena_ptr(&r->pipe_act_in), 0, TAG_ACT);
    if (next && next->kind == PIPE_BACKWARD && !last)
        link_start(p, &p->grad_in, 0, arena_ptr(&r->pipe_grad_in), 0, TAG_GRAD);
    if (c->p2p_group) commCheck(c, c->p2p_group(c, 0));
}

// A pass's input has arrived in its receive buffer (posted after the previous
// pass, which had consumed the buffer's last contents), and the send buffer
// its output goes to is free again (its send two micro-batches ago completed).
double pipe_train_iteration(PipeRun *p, int64_t it, float dloss, const PipeData *d) {
    ModelRuntime *r = p->r;
    Backend *be = r->be;
    int G = p->G, first = p->stage == 0, last = p->stage == p->S - 1;
    void *act_in = arena_ptr(&r->pipe_act_in), *grad_in = arena_ptr(&r->pipe_grad_in);
    PipeAction *order = malloc((size_t)2 * G * sizeof *order);
    int n = pipeline_1f1b(p->stage, p->S, G, order);
    p->sec_compute = p->sec_wait = 0;
    exchange(p, NULL, &order[0]);
    double loss = 0.0;
    for (int i = 0; i < n; i++) {
        int g = order[i].microbatch, slot = g % r->K, buf = g % 2;
        double t0;
        if (order[i].kind == PIPE_FORWARD) {
            load_or_abort(p, d, it, g, slot);
            if (!first) link_wait(p, &p->act_in, 0);
            if (!last) link_wait(p, &p->act_out, buf);
            t0 = seconds_now();
            trace_measure_mark(p->trace, TRACE_FORWARD, g);
            mr_forward(r, slot, dloss, act_in, arena_ptr(&r->pipe_act_out[buf]));
            trace_measure_mark(p->trace, TRACE_BUBBLE, g);  // the pass ends
            be->stream_synchronize(be, r->stream);  // the output is in its send buffer, the input consumed
            p->sec_compute += seconds_now() - t0;
            if (last) loss += d->loss_sum(d->ctx);
        } else {
            r->micro_last = g == G - 1;  // gradients are reduced over dp after the last one
            if (!last) link_wait(p, &p->grad_in, 0);
            if (!first) link_wait(p, &p->grad_out, buf);
            t0 = seconds_now();
            trace_measure_mark(p->trace, TRACE_BACKWARD, g);
            mr_backward(r, slot, grad_in, arena_ptr(&r->pipe_grad_out[buf]));
            trace_measure_mark(p->trace, TRACE_BUBBLE, g);
            be->stream_synchronize(be, r->stream);
            p->sec_compute += seconds_now() - t0;
        }
        exchange(p, &order[i], i + 1 < n ? &order[i + 1] : NULL);
    }
    link_wait_all(p, &p->act_out);
    link_wait_all(p, &p->grad_out);
    free(order);
    return share_loss(p, loss);
}

double pipe_eval(PipeRun *p, int batches, const PipeData *d) {
    ModelRuntime *r = p->r;
    int first = p->stage == 0, last = p->stage == p->S - 1;
    PipeAction fwd[2];
    double loss = 0.0;
    // forward passes only, one after the other: receive, compute, send
    for (int g = 0; g < batches; g++) {
        fwd[g % 2] = (PipeAction){PIPE_FORWARD, g};
        load_or_abort(p, d, 0, g, 0);
        exchange(p, NULL, &fwd[g % 2]);
        if (!first) link_wait(p, &p->act_in, 0);
        mr_forward(r, 0, 0.0f, arena_ptr(&r->pipe_act_in), arena_ptr(&r->pipe_act_out[g % 2]));
        r->be->stream_synchronize(r->be, r->stream);
        exchange(p, &fwd[g % 2], NULL);
        if (!last) link_wait(p, &p->act_out, g % 2);
        else loss += d->loss_sum(d->ctx);
    }
    return share_loss(p, loss);
}

double pipe_grad_norm(PipeRun *p) {
    ModelRuntime *r = p->r;
    // Megatron's rule for a head tied across stages: both copies step with the
    // sum of their gradients, so they stay equal bit for bit
    if (p->tied) zero_sum_tied_grads(r, p->tied, p->grid->dp_index == 0 && p->grid->tp_index == 0);
    double norm = zero_grad_norm(r);  // this stage's, the same on its every rank
    if (p->S == 1) return norm;
    // ||g||^2 = sum over stages; one rank per stage adds its stage's part
    float sq = p->grid->dp_index == 0 && p->grid->tp_index == 0 ? (float)(norm * norm) : 0.0f;
    commCheck(p->comm, p->comm->all_reduce(p->comm, &sq, &sq, 1, MIST_F32, COMM_SUM, p->grid->world));
    return sqrt((double)sq);
}

void pipe_gather_state(PipeRun *p, const ModelRuntime *full, const float *stage_whole, float *whole) {
    const ModelRuntime *r = p->r;
    const Grid *g = p->grid;
    int root = g->world_rank == 0, sender = g->dp_index == 0 && g->tp_index == 0;
    // the stage's tensors (without the tied copy) are one contiguous range of
    // the whole model's flat layout: [unit of its first part, unit after its last)
    size_t total = 0;
    for (int k = 0; k < r->num_tensors; k++)
        if (!r->tensors[k].tied_copy) total += (size_t)(r->tensors[k].spec.rows * r->tensors[k].spec.cols);
    if (sender) {
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
            if (root) {
                size_t start = full->tensors[r->tensors[0].gidx].offset;
                memcpy(whole + (size_t)a * full->Pp + start, packed, total * sizeof(float));
            } else {
                commCheck(p->comm, p->comm->send(p->comm, packed, total, MIST_F32, 0, TAG_STATE, g->world));
            }
        }
        free(packed);
    }
    if (!root) return;
    // the other stages' first ranks, in stage order: stage s holds the units
    // [1 + its first block, 1 + its first block + its blocks) (with pre / post
    // at the ends), i.e. one contiguous range of the whole layout
    const Plan *plan = p->plan;
    int rank = 0;
    for (int s = 0; s < p->S; s++) {
        int first = plan_first_layer(plan, s), layers = plan->stage[s].layers;
        size_t start = s == 0 ? 0 : full->units[1 + first].off;
        size_t end = s == p->S - 1 ? full->Pp : full->units[1 + first + layers].off;
        if (s > 0)
            for (int a = 0; a < 3; a++)
                commCheck(p->comm, p->comm->recv(p->comm, whole + (size_t)a * full->Pp + start, end - start, MIST_F32, rank,
                                                 TAG_STATE, g->world));
        rank += plan->stage[s].dp * plan->stage[s].tp;
    }
}
