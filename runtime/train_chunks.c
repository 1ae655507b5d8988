// The rank's further model chunks of an interleaved plan (see train_chunks.h).
#include "runtime/train_chunks.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/comm.h"
#include "runtime/init_weights.h"
#include "runtime/model_sp.h"
#include "runtime/zero.h"

void chunks_begin(TrainChunks *c, ModelRuntime *r0, const Plan *plan) {
    memset(c, 0, sizeof *c);
    c->v = plan_virtual(plan);
    c->P = plan_pipeline_size(plan);
    c->r[0] = r0;
    if (c->v > 1) mr_set_interleaved(r0, c->P, c->v);
}

int chunks_layout(TrainChunks *c, const MistConfig *cfg, const Grid *grid, const CommBackend *comm, char *err,
                  size_t errlen) {
    const Plan *plan = &cfg->plan.plan;
    c->grid[0] = *grid;
    // Between 2 pipeline ranks the activations (chunk r to r + 1) and the
    // gradients (chunk r + P back to r + P - 1) go the same way, and the two
    // ranks meet them in different orders: MPI matches each by its tag, NCCL
    // (p2p_group) in the order they are issued, which would mix them up. From 3
    // ranks on each direction carries one kind, in the same order at both ends.
    if (c->v > 1 && c->P == 2 && comm->p2p_group) {
        snprintf(err, errlen, "[plan] virtual = %d with stages = %d: 2 pipeline ranks exchanging device messages "
                 "through NCCL; allowed: at least 3 pipeline ranks (stages >= 3 * virtual) on this comm path. Hint: "
                 "3 or more pipeline ranks, or MIST_COMM_STAGED=1 (messages through MPI)", c->v, plan->num_stages);
        return 2;
    }
    for (int j = 1; j < c->v; j++) {
        Grid *g = &c->grid[j];
        grid_chunk(grid, plan, j, g);
        ModelRuntime *r = c->r[j] = calloc(1, sizeof *r);
        if (!r) {
            snprintf(err, errlen, "out of host memory for model chunk %d", g->stage);
            return 1;
        }
        mr_set_pipeline(r, g->stage, plan->num_stages, g->first_layer, g->num_layers, plan->G);
        mr_set_interleaved(r, c->P, c->v);
        const StagePlan sp = zero_stage_plan(g, cfg);  // shard_group resolved
        int rc = mr_layout_sharded(r, &cfg->model, &sp, g->dp_index, err, errlen);
        if (!rc && g->tp_size > 1) rc = mr_layout_tp(r, g->tp_size, g->tp_index, err, errlen);
        if (!rc) rc = mr_layout_sp(r, sp.sp, err, errlen);  // the chunk's own sp, as lay_out_stage does chunk 0's
        if (!rc && r->paro_g > 1 && r->paro_g != c->r[0]->paro_g) {  // I groups are the rank's (chunk 0's)
            snprintf(err, errlen, "[stage.%d] shard = %s in groups of %d dp ranks: the chunks of one pipeline rank "
                     "share its I scope's groups, and chunk [stage.%d] has %s; allowed: the same shard_group on "
                     "every chunk of the rank with an I scope, chunk 0 among them. Hint: give [stage.%d] an I scope "
                     "too, or this chunk a ZeRO level", g->stage, shard_code_names[r->zero], r->paro_g, grid->stage,
                     c->r[0]->paro_g > 1 ? "other groups" : "none", grid->stage);
            rc = 2;
        }
        if (rc) return rc;
    }
    return 0;
}

int chunks_plan_memory(TrainChunks *c, Backend *be, int64_t *dev, int64_t *host, char *err, size_t errlen) {
    ModelRuntime *r0 = c->r[0];
    for (int j = 1; j < c->v; j++) {
        ModelRuntime *r = c->r[j];
        if (mr_plan_memory(r, be, err, errlen)) return 1;
        be->stream_destroy(be, r->stream);  // chunk 0's serves them all
        r->stream = r0->stream;
        r->comm_stream_ordered = r0->comm_stream_ordered;
        int64_t d, h;
        mr_memory_predict(r, &d, &h);
        *dev += d, *host += h;
    }
    return 0;
}

int chunks_init(TrainChunks *c, const MistConfig *cfg, char *err, size_t errlen) {
    ModelRuntime *r0 = c->r[0];
    for (int j = 1; j < c->v; j++) {
        ModelRuntime *r = c->r[j];
        r->comm = r0->comm;
        r->dpg = r0->dpg;
        r->tpg = r0->tpg;
        for (int k = 0; k < 4; k++) r->paro_grp[k] = r0->paro_grp[k];  // (the same g: chunks_layout)
        mr_init_params(r, cfg->train.seed);
        if (cfg->init.from[0] && init_weights_apply(r, cfg->init.from, err, errlen) != 0) return 1;
        r->opt = r0->opt;  // the hyperparameters; this chunk's tensors and norm accumulator
        r->opt.stream = r->stream;
        r->opt.norm_acc = arena_ptr(&r->t_norm_acc);
        r->opt.tensors = r->opt_tensors;
        r->opt.num_tensors = r->num_tensors;
    }
    return 0;
}

int chunks_alloc_state(TrainChunks *c) {
    for (int j = 1; j < c->v; j++) {
        const ModelRuntime *r = c->r[j];
        if (!(c->host_state[j] = calloc(3 * r->Pp, sizeof(float))) ||
            !(c->global_state[j] = calloc(3 * r->Pglobal, sizeof(float))))
            return 1;
    }
    return 0;
}

int chunks_resume(TrainChunks *c, const char *path, const ModelConfig *m, char *err, size_t errlen) {
    for (int j = 1; j < c->v; j++) {
        ModelRuntime *r = c->r[j];
        CkptState st;
        if (checkpoint_load(path, m, &st, c->ct[j], r->num_tensors, err, errlen) != 0) return -1;
        float *h = c->host_state[j];
        mr_tp_scatter(r, c->global_state[j], h, 3);
        zero_distribute(r, h, h + r->Pp, h + 2 * r->Pp);
        r->opt.t = st.adam_t;
    }
    return 0;
}

void chunks_gather(TrainChunks *c) {
    for (int j = 1; j < c->v; j++) {
        ModelRuntime *r = c->r[j];
        float *h = c->host_state[j];
        zero_flush(r);
        zero_collect(r, h, h + r->Pp, h + 2 * r->Pp);
        if (c->grid[j].dp_index == 0) mr_tp_gather(r, h, c->global_state[j], 3);
    }
}

void chunks_flush(TrainChunks *c) {
    for (int j = 1; j < c->v; j++) zero_flush(c->r[j]);
}

void chunks_clear_grads(TrainChunks *c) {
    for (int j = 1; j < c->v; j++) zero_clear_grads(c->r[j]);
}

void chunks_schedule_step(TrainChunks *c, float lr, float scale) {
    for (int j = 1; j < c->v; j++) zero_schedule_step(c->r[j], lr, scale);
}

int64_t chunks_device_peak(const TrainChunks *c) {
    int64_t n = 0;
    for (int j = 1; j < c->v; j++) n += (int64_t)arena_peak_bytes(&c->r[j]->dev);
    return n;
}

int64_t chunks_host_peak(const TrainChunks *c) {
    int64_t n = 0;
    for (int j = 1; j < c->v; j++) n += (int64_t)arena_peak_bytes(&c->r[j]->host);
    return n;
}

void chunks_free(TrainChunks *c) {
    for (int j = 1; j < c->v; j++) {
        if (c->r[j]) {
            c->r[j]->stream = NULL;  // chunk 0's, freed with it
            mr_free(c->r[j]);
            free(c->r[j]);
        }
        free(c->host_state[j]);
        free(c->global_state[j]);
        free(c->ct[j]);
        c->r[j] = NULL, c->host_state[j] = c->global_state[j] = NULL, c->ct[j] = NULL;
    }
}
