// The training loop of one pipeline stage with data and tensor parallelism
// over its ranks (tp: runtime/model_runtime.c, docs/tensor-parallel.md): G
// micro-batches of b sequences per rank in 1F1B order between the stages
// (runtime/pipeline_run.c), gradients reduced over the stage's dp
// group (all-reduce, or reduce-scatter into shards under ZeRO >= 1; the
// per-unit schedule of gathers, swaps and deferred optimizer steps is in
// runtime/zero.c), global-norm clipping over every stage, AdamW, logs,
// validation, checkpoints (their arrays, resume and save: runtime/train_checkpoint.c).
//
// Loss scaling: every micro-batch's cross-entropy gradient is scaled by
// dloss = 1 / (b*T*G*dp), so after accumulating G micro-batches and summing
// over dp ranks the gradient is the mean over all tokens of the global batch,
// the same quantity for any (dp, G, b) with the same b*G*dp (b*dp, the
// micro-batch, is the same in every stage).
#include <config.h>  // the build's config (HAVE_CUDA), not base/schema.h
#include "runtime/train.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "runtime/attention_choice.h"
#include "runtime/backend_prepare.h"
#include "runtime/comm_hier.h"
#include "runtime/launch.h"
#include "runtime/train_guard.h"
#include "runtime/train_internal.h"
#include "planner/search.h"
#include "runtime/init_weights.h"
#include "runtime/train_sample.h"
#include "models/model.h"
#include "runtime/stop_signal.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Sum of per-token losses of one micro-batch over the dp group, added in the
// order of the global sample stream (rank r holds sequences r*b .. r*b+b-1 of
// the micro-batch), so the total is the same bits for any dp / G split.
static double micro_batch_loss_sum(Run *run, ModelRuntime *r) {
    Backend *be = r->be;
    size_t N = (size_t)r->B * r->T;
    float *h_losses = arena_ptr(&r->h_losses), *all = arena_ptr(&r->h_gather);
    be->copy_d2h(be, h_losses, arena_ptr(&r->t_losses), N * sizeof(float), r->stream);
    be->stream_synchronize(be, r->stream);
    if (r->dp > 1) commCheck(run->comm, run->comm->all_gather(run->comm, h_losses, all, N, MIST_F32, run->grid->dp));
    else memcpy(all, h_losses, N * sizeof(float));
    double sum = 0.0;
    for (size_t i = 0; i < (size_t)r->dp * N; i++) sum += all[i];
    return sum;
}

// micro-batch g of iteration it: tokens (first stage) into slot `slot`, targets (last stage)
static int load_batch(void *ctx, ModelRuntime *r, int64_t it, int g, int slot) {
    Run *run = ctx;
    Backend *be = r->be;
    size_t bytes = (size_t)r->B * r->T * sizeof(int32_t);
    int32_t *hi = arena_ptr(&r->h_inputs), *ht = arena_ptr(&r->h_targets);
    if (dataloader_next_batch(run->dl, it, g, hi, ht, run->err, run->errlen)) {
        fprintf(stderr, "mist-train: rank %d: [data] %s: %s\n", run->grid->world_rank, run->what, run->err);
        return -1;
    }
    if (r->has_pre) be->copy_h2d(be, mr_inputs(r, slot), hi, bytes, r->stream);
    if (r->has_post) be->copy_h2d(be, mr_targets(r), ht, bytes, r->stream);
    return 0;
}

static double loss_sum_cb(void *ctx, ModelRuntime *r) { return micro_batch_loss_sum(ctx, r); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// the median of v[0..n) (the mean of the middle two for even n); 0 for n = 0
static double median_seconds(const double *v, int n) {
    if (n <= 0) return 0;
    double *c = malloc((size_t)n * sizeof *c);
    if (!c) return 0;
    memcpy(c, v, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, cmp_double);
    double m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return m;
}

// [cluster] collectives = hierarchical: the dp group's collectives in two levels
// (runtime/comm_hier.h) where the group spans nodes of gpus_per_node consecutive
// ranks; flat otherwise. Collective over the dp group; rank 0 says which.
// Its three groups are then prepared with the others (start_backend).
static void dp_hierarchy(Training *t) {
    const MistConfig *cfg = t->cfg;
    t->dph = NULL;
    if (cfg->cluster.collectives != CLUSTER_COLL_HIER) return;
    int gpn = cfg->cluster.gpus_per_node > 0 ? cfg->cluster.gpus_per_node : 1;
    char why[160] = "";
    commCheck(t->comm, comm_hier_new(t->comm, t->grid->dp, t->rank / gpn, &t->dph, why, sizeof why));
    if (t->root) printf("mist: data-parallel collectives %s: %s\n", t->dph ? "hierarchical" : "flat", why);
}

// The backend of this rank's device and the path of its collectives; messages
// about both. 0, or the exit code.
static int start_backend(Training *t) {
    const MistConfig *cfg = t->cfg;
    const Grid *grid = t->grid;
    const CommBackend *comm = grid->comm;
    int rank = t->rank, root = t->root;
    char err[1024] = "";
    int rc = train_check_supported(cfg, grid, err, sizeof err);
    if (rc) {
        if (root) fprintf(stderr, "mist-train: %s: %s\n", cfg->source, err);
        return rc;
    }
    int dp = t->dp, tp = t->tp, S = t->S;
    MistDtype dtype = t->dtype;
    // the device the launcher picked for this rank: "cuda:N", or "cpu" (the
    // device is then emulated: its memory is the accounted arena)
    Backend *be = launch_backend(grid->device, dtype, err, sizeof err);
    if (!be) {
        fprintf(stderr, "mist-train: rank %d: cannot start the %s backend: %s\n", rank, grid->device, err);
        return 1;
    }
    t->be = be;
    int on_host = be->device_memory_is_host;
    t->on_host = on_host;
    // MPI reads host memory only: on a GPU, collectives of device buffers (ZeRO's
    // gradient and weight exchanges, the tp all-reduces) run on NCCL or through
    // host bounce buffers (runtime/comm_select.h), and so do the pipeline's
    // messages between device buffers (over the world group). The tied
    // embedding's sum is a host buffer either way.
    CommChoice *choice = &t->choice;
    commCheck(comm, comm_select(grid->comm, be, grid->world, choice));
    t->have_choice = 1;
    comm = t->comm = choice->comm;
    // NCCL's communicators of the dp and tp groups before the arenas: its buffers are not
    // in the plan, and an arena that no longer fits says so at start with its size. With
    // several stages the world's too, even where dp and tp are 1: the pipeline's device
    // messages go over it and need it made (comm_nccl.h), never inside their NCCL group.
    CommGroup *device_groups[10] = {grid->dp, grid->tp, grid->world};
    int ngroups = S > 1 ? 3 : 2;
    dp_hierarchy(t);  // [cluster] collectives = hierarchical: three more (the dp group's again where flat)
    if (cfg->cluster.collectives == CLUSTER_COLL_HIER)
        ngroups += comm_hier_groups(t->dph, grid->dp, device_groups + ngroups);
    commCheck(comm, zero_scope_groups(comm, grid, cfg, t->paro));
    for (int k = 0; k < 4 && t->paro[0]; k++) device_groups[ngroups++] = t->paro[k];  // an I scope's four
    size_t free_before = 0, free_after = 0;
    int known = be->device_free_bytes && be->device_free_bytes(be, &free_before) == 0;
    commCheck(comm, comm_select_prepare(choice, device_groups, ngroups));
    known = known && be->device_free_bytes(be, &free_after) == 0;
    if (root && known && choice->path == COMM_PATH_NCCL && free_before > free_after)
        printf("mist: NCCL's communicators took %.1f MiB of device memory on rank 0 (outside the plan's peak; "
               "[cluster] device_memory below the card's leaves them room)\n",
               (double)(free_before - free_after) / 1048576.0);
    if (root && choice->path == COMM_PATH_NCCL && comm_select_communicators(choice) > 0)
        printf("mist: NCCL communicators made before the arenas on rank 0: %d\n", comm_select_communicators(choice));
    int several = dp > 1 || tp > 1 || S > 1;
    if (root && choice->path == COMM_PATH_NCCL && (dp > 1 || tp > 1))
        printf("mist: collectives of device memory run on %s (its buffers are outside the measured device peak)\n",
               choice->detail);
    if (root && choice->path == COMM_PATH_STAGED && several)
        printf("mist: collectives of %s memory are staged through pinned host memory%s%s: each costs a copy each way, "
               "and starting one waits for the device\n", on_host ? "the CPU backend's device" : "GPU",
               choice->why[0] ? ": " : "", choice->why);
    // The CUDA attention kernels are built for head sizes 64 and 128 (their
    // tiles are compile-time): say so before training rather than abort in the
    // first forward. Same config on every rank, so all stop together.
    int head_size = cfg->model.hidden / cfg->model.heads;
    if (!be->supports_op(be, &(BackendOpShape){.op = OP_ATTENTION, .HS = head_size})) {
        if (root)
            fprintf(stderr, "mist-train: %s: [model] hidden / heads = %d / %d = %d: the CUDA backend's attention "
                    "supports head sizes 64 and 128; allowed: 64, 128. Hint: change heads, or MIST_DEVICE=cpu\n",
                    cfg->source, cfg->model.hidden, cfg->model.heads, head_size);
        return 1;
    }
    char said[1024];  // the attention kernels: [runtime] attention, or MIST_CUDA_ATTENTION over it
    if ((rc = backend_choose_attention(be, cfg, said, sizeof said, err, sizeof err)) != 0) {
        if (root) fprintf(stderr, "mist-train: %s\n", err);
        return rc;
    }
    if (root && said[0]) printf("mist: %s\n", said);
    return 0;
}

// The layout of this rank's stage: its parameters, their dp and tp shards.
// 0, or the exit code (the worst of every rank: all stop together).
static int lay_out_stage(Training *t) {
    const MistConfig *cfg = t->cfg;
    const Grid *grid = t->grid;
    const CommBackend *comm = t->comm;
    Backend *be = t->be;
    ModelRuntime *r = &t->model;
    const StagePlan resolved = zero_stage_plan(grid, cfg), *sp = &resolved;
    int G = t->G, tp = t->tp, S = t->S;
    char err[1024] = "";
    int rc;
    mr_set_pipeline(r, grid->stage, S, grid->first_layer, grid->num_layers, G);
    chunks_begin(&t->ch, r, &cfg->plan.plan);
    rc = mr_layout_sharded(r, &cfg->model, sp, grid->dp_index, err, sizeof err);
    if (!rc && tp > 1) rc = mr_layout_tp(r, tp, grid->tp_index, err, sizeof err);
    if (!rc) rc = mr_layout_sp(r, sp->sp, err, sizeof err);  // sequence parallelism (runtime/model_sp.h)
    if (!rc && tp > 1 && !be->supports_op(be, &(BackendOpShape){.op = OP_VOCAB_PARALLEL})) {
        snprintf(err, sizeof err, "[stage.%d] tp = %d: the %s backend has no vocabulary-parallel embedding and "
                 "cross-entropy kernels; allowed: tp = 1 on it. Hint: MIST_DEVICE=cpu, or a plan without tensor "
                 "parallelism", grid->stage, tp, be->name);
        rc = 2;
    }
    if (!rc) rc = chunks_layout(&t->ch, cfg, grid, comm, err, sizeof err);
    // A layout error can hit some stages only; the others would wait for them
    // at their first exchange. Every rank learns the worst verdict and all stop.
    int worst = rc;
    commCheck(comm, comm->all_reduce(comm, &worst, &worst, 1, MIST_I32, COMM_MAX, grid->world));
    if (worst && rc && grid->dp_index == 0 && grid->tp_index == 0)
        fprintf(stderr, "mist-train: %s: %s\n", cfg->source, err);
    return worst;
}

// (runtime/train_internal.h)
int train_failed_anywhere(Training *t, int failed, const char *where) {
    int count = failed ? 1 : 0;
    commCheck(t->comm, t->comm->all_reduce(t->comm, &count, &count, 1, MIST_I32, COMM_SUM, t->grid->world));
    if (failed && count == t->grid->world_size && t->root) fprintf(stderr, "mist-train: %s: %s\n", where, t->err);
    if (failed && count < t->grid->world_size) fprintf(stderr, "mist-train: rank %d: %s: %s\n", t->rank, where, t->err);
    return count > 0;
}

// Carves every tensor from the arenas and predicts their peaks. 0, or 1.
static int plan_memory(Training *t) {
    ModelRuntime *r = &t->model;
    char note[1200];  // the backend's buffers of the run's shapes, before the baseline: counted to the byte
    t->reserved_dev = backend_prepare_shapes(t->be, r->B, r->T, r->NH, r->NKV, r->HS, r->has_pre, note, sizeof note);
    if (note[0] && t->root) printf("mist: %s; allocated at its first call instead, outside the prediction\n", note);
    device_peak_start(&t->device_peak, t->be);  // before the arenas: they are the bulk of the run's memory
    if (mr_plan_memory(r, t->be, t->err, sizeof t->err)) {
        fprintf(stderr, "mist-train: rank %d: %s\n", t->rank, t->err);
        // the other stages may have planned theirs and would wait for this one at the first exchange
        if (t->S > 1) t->comm->abort(t->comm, 1, "memory plan failed");
        return 1;
    }
    // the model's kernels write what the collectives send (stream-ordered: tp_sum needs no host sync)
    r->comm_stream_ordered = comm_select_follow(&t->choice, r->stream);
    mr_memory_predict(r, &t->pred_dev, &t->pred_host);
    if (chunks_plan_memory(&t->ch, t->be, &t->pred_dev, &t->pred_host, t->err, sizeof t->err))
        t->comm->abort(t->comm, 1, "memory plan failed");
    device_peak_sample(&t->device_peak, t->be);
    int failed = t->on_host && host_memory_short(t->pred_dev + t->pred_host, t->err, sizeof t->err);
    return train_failed_anywhere(t, failed, "memory");
}

// Rank 0 prints the run's parameters, predicted peaks and iteration time, and
// how the hardware profile's prediction compares with the path this run takes.
static int report_predictions(Training *t) {
    const MistConfig *cfg = t->cfg;
    const ModelRuntime *r = &t->model;
    TrainFlops *flops = &t->flops;
    int root = t->root, dp = t->dp, tp = t->tp, S = t->S;
    if (root) {
        char a[32], b2[32];
        trainlog_format_bytes(t->pred_dev, a, sizeof a);
        trainlog_format_bytes(t->pred_host, b2, sizeof b2);
        printf("mist: %lld parameters, dtype %s, %d stage%s, stage 0: %zu parameters (%zu per tp rank), b=%d G=%d "
               "dp=%d tp=%d ckpt=%d zero=%d wo=%g go=%g oo=%g ao=%g\n", (long long)model_param_count(&cfg->model),
               mist_dtype_name(t->dtype), S, S > 1 ? "s" : "", r->Pglobal, r->P, r->B, t->G, dp, tp, r->ckpt,
               r->zero, r->wo, r->go, r->oo, r->ao);
        if (r->sp)
            printf("mist: stage 0: sequence parallelism sp=1: norms and residual adds on %d of %d rows per tp rank\n",
                   r->B * r->T / r->tp, r->B * r->T);
        printf("mist: predicted peak per rank: device %s (%lld B), host %s (%lld B)\n", a, (long long)t->pred_dev,
               b2, (long long)t->pred_host);
        char line[320];
        backend_memory_predicted_line(t->pred_dev, t->reserved_dev, line, sizeof line);
        printf("mist: %s\n", line);
    }
    // MFU / HFU of the log lines against the [cluster] hardware profile's peak
    if (train_flops_init(flops, cfg, t->grid->world_size, t->err, sizeof t->err) != 0) {
        if (root) printf("mist: MFU and HFU not reported: %s\n", t->err);
    } else if (root) {
        printf("mist: predicted iteration %.4g ms on hardware profile %s (peak %.4g FLOP/s per device; MFU and "
               "HFU below are against it)\n", 1e3 * flops->predicted_seconds, flops->hardware, flops->peak_flops);
        // the machine may have more than the profile says: warn, the allocations decide
        if (flops->misfit[0])
            printf("mist: warning: the plan does not fit hardware profile %s: %s (hint: mist-plan %s --analyze; "
                   "[cluster] device_memory and host_memory say what the machines have)\n", flops->hardware,
                   flops->misfit, cfg->source);
        else if (t->pred_dev + (int64_t)t->reserved_dev > flops->capacity)  // the planner counts the arenas only
            printf("mist: warning: with the backend's reserved bytes rank 0 needs %lld device bytes, hardware profile %s "
                   "has %lld (hint: lower [cluster] device_memory by them when planning)\n",
                   (long long)(t->pred_dev + (int64_t)t->reserved_dev), flops->hardware, (long long)flops->capacity);
        // the profile prices one comm path, the run takes another: say which way the prediction errs
        // (the CPU backend's staging is a check of the GPU path, not a run to predict)
        const CommChoice *choice = &t->choice;
        int device_collectives = dp > 1 || tp > 1;
        if (device_collectives && choice->path == COMM_PATH_STAGED && !t->on_host && !flops->staged_collectives)
            printf("mist: note: collectives are staged through host memory (%s) but hardware profile %s prices them "
                   "GPU to GPU: the prediction is optimistic (-o cluster.measure_transfers=1 measures this path)\n",
                   choice->why[0] ? choice->why : "MIST_COMM_STAGED=1", flops->hardware);
        if (device_collectives && choice->path == COMM_PATH_NCCL && flops->staged_collectives)
            printf("mist: note: hardware profile %s prices collectives staged through host memory ([collective] "
                   "staged = 1), this run's go GPU to GPU on NCCL: the prediction is pessimistic\n", flops->hardware);
    }
    if (root) fflush(stdout);
    return 0;
}

// Initial parameters, the pipeline's links, the optimizer, the checkpoint arrays. 0, or the exit code.
static int init_state(Training *t) {
    const MistConfig *cfg = t->cfg;
    const TrainConfig *tc = &cfg->train;
    ModelRuntime *r = &t->model;
    r->comm = t->comm;
    r->dpg = t->grid->dp;
    r->tpg = t->grid->tp;
    r->dph = t->dph;
    for (int k = 0; k < 4; k++) r->paro_grp[k] = t->paro[k];
    mr_init_params(r, tc->seed);
    int failed = cfg->init.from[0] && init_weights_apply(r, cfg->init.from, t->err, sizeof t->err) != 0;
    if (train_failed_anywhere(t, failed, "[init] from")) return 1;
    t->run = (Run){cfg, t->grid, t->comm, r, t->G, NULL, "train", t->err, sizeof t->err};
    if (pipe_init(&t->pipe, t->ch.r, t->grid, &cfg->plan.plan, t->err, sizeof t->err)) {
        if (t->root) fprintf(stderr, "mist-train: %s: %s\n", cfg->source, t->err);
        return 2;
    }
    t->pipe.comm = t->comm;  // its messages are device buffers: NCCL, staged through the host, or MPI (CPU)
    t->train_data = (PipeData){load_batch, loss_sum_cb, &t->run};
    // hyperparameters and step count of AdamW; runtime/zero.c steps each unit's shard
    r->opt = (Optimizer){.backend = t->be, .stream = r->stream, .norm_acc = arena_ptr(&r->t_norm_acc),
                         .tensors = r->opt_tensors, .num_tensors = r->num_tensors,
                         .beta1 = tc->beta1, .beta2 = tc->beta2, .eps = tc->adam_eps,
                         .weight_decay = tc->weight_decay};
    if (train_failed_anywhere(t, chunks_init(&t->ch, cfg, t->err, sizeof t->err) != 0, "[init] from")) return 1;
    return train_checkpoint_arrays(t);
}

// The training data and the validation data (when [data] val is set with an interval). 0, or 1.
static int open_data(Training *t) {
    const MistConfig *cfg = t->cfg;
    const TrainConfig *tc = &cfg->train;
    const ModelRuntime *r = &t->model;
    int dp = t->dp, dp_index = t->grid->dp_index;
    int failed = dataloader_open(&t->dl, cfg->data.train, r->T, r->V, cfg->data.shuffle, tc->seed, t->err,
                                 sizeof t->err) ||
                 dataloader_set_rank(t->dl, tc->global_batch, r->B, dp, dp_index, t->err, sizeof t->err);
    if (train_failed_anywhere(t, failed, "[data] train")) return 1;
    // rank 0 reads every token once now, so a token outside the vocabulary is an
    // error at start rather than at the iteration that first reads it
    failed = t->root && dataloader_scan(t->dl, t->err, sizeof t->err) != 0;
    if (train_failed_anywhere(t, failed, "[data] train")) return 1;
    // val_batches counts global batches, so every plan evaluates the same
    // val_batches x global_batch sequences: G micro-batches of b on each of the
    // dp ranks per global batch (b * dp * G = global_batch)
    int64_t val_micro = (cfg->data.val_batches > 0 ? cfg->data.val_batches : 1) * (int64_t)t->G;
    failed = val_micro > INT32_MAX;
    if (failed)
        snprintf(t->err, sizeof t->err, "%lld micro-batches per evaluation at G = %d, more than %d (hint: lower "
                 "val_batches)", (long long)val_micro, t->G, INT32_MAX);
    if (train_failed_anywhere(t, failed, "[data] val_batches")) return 1;
    t->val_batches = (int)val_micro;
    if (cfg->data.val[0] && cfg->data.val_interval > 0) {
        failed = dataloader_open(&t->vdl, cfg->data.val, r->T, r->V, 0, tc->seed, t->err, sizeof t->err) ||
                 dataloader_set_rank(t->vdl, (int64_t)r->B * dp * t->val_batches, r->B, dp, dp_index, t->err,
                                     sizeof t->err);
        if (train_failed_anywhere(t, failed, "[data] val")) return 1;
    }
    return 0;
}

// The log (a resumed one keeps its earlier lines) and [log] trace's timers. 0, or 1.
static int open_log(Training *t) {
    const MistConfig *cfg = t->cfg;
    ModelRuntime *r = &t->model;
    int rank = t->rank;
    t->log = t->start > 0 ? trainlog_open_resume(&cfg->log, rank, t->start + 1, t->err, sizeof t->err)
                          : trainlog_open(&cfg->log, rank, t->err, sizeof t->err);
    if (train_failed_anywhere(t, !t->log, "[log]")) return 1;
    t->pipe.trace = &t->trace;
    // nested parts per micro-batch, over the rank's chunks ([plan] virtual; else the one stage): every
    // block forward and backward, the recomputes (of checkpointed blocks, and of the attention core of
    // the others under selective recompute), pre and post both ways
    int v = t->ch.v > 1 ? t->ch.v : 1, parts = 0;
    for (int j = 0; j < v; j++) {
        const ModelRuntime *c = t->ch.r[j];
        parts += 2 * c->L + c->ckpt + (c->sel ? c->L : 0) + 4;
    }
    int failed = trace_measure_setup(&t->trace, t->be, r->stream, &cfg->log, t->start, cfg->train.steps, t->G, v,
                                     parts, t->root, t->err, sizeof t->err);
    int rc = train_failed_anywhere(t, failed, "[log] trace");
    for (int j = 0; j < v && !rc && t->trace.iteration >= 0; j++)  // else the model's marks cost one branch
        t->ch.r[j]->trace = &t->trace;  // the chunks share chunk 0's stream, which the marks time
    return rc;
}

// [log] sample_interval's sample after iteration it (collective): one stage
// gathers its weights itself; several are assembled on rank 0 as for a checkpoint.
static void print_sample(Training *t, int64_t it) {
    if (t->S == 1) {
        train_sample_print(&t->model, t->root, it + 1, t->cfg->train.seed);
        return;
    }
    train_gather_whole_state(t);
    if (t->root) train_sample_show(&t->full, t->whole, it + 1, t->cfg->train.seed);
}

// The iterations: forward and backward of the micro-batches, the gradient
// norm, the deferred optimizer step, logs, validation, checkpoints, stop
// signals. 0 (done, or t->stopped), or 1 after too many non-finite iterations.
static int train_loop(Training *t) {
    const MistConfig *cfg = t->cfg;
    const TrainConfig *tc = &cfg->train;
    const CommBackend *comm = t->comm;
    Backend *be = t->be;
    ModelRuntime *r = &t->model;
    int rank = t->rank, root = t->root, G = t->G, dp = t->dp;
    const char *ckdir = cfg->checkpoint.dir;
    int64_t skipped = t->st.skipped, nonfinite = t->st.nonfinite, consecutive = 0;
    float dloss = (float)(1.0 / ((double)r->B * r->T * G * dp));
    double tokens_per_iter = (double)tc->global_batch * r->T;
    // MIST_FAULT_NAN_FROM=k makes the loss of iteration k and later NaN, to test
    // the skip-and-abort path (set it on every rank: the decision must agree)
    const char *fault = getenv("MIST_FAULT_NAN_FROM");
    int64_t nan_from = fault ? atoll(fault) : 0;
    const char *fault_grad = getenv("MIST_FAULT_NAN_GRAD");
    int64_t nan_grad_at = fault_grad ? atoll(fault_grad) : 0;
    // MIST_FAULT_HANG=R:K makes world rank R stop taking part at iteration K
    // (it sleeps), to test that the others end the job after [cluster] comm_timeout
    int hang_rank = -1;
    long long hang_at = 0;
    const char *hang = getenv("MIST_FAULT_HANG");
    if (hang && sscanf(hang, "%d:%lld", &hang_rank, &hang_at) != 2) hang_rank = -1;
    comm->set_timeout(comm, cfg->cluster.comm_timeout);
    stop_signal_install();
    char context[64];
    for (int64_t it = t->start; it < tc->steps; it++) {
        trace_measure_begin(&t->trace, it, comm, t->grid);
        double t0 = now_s();
        snprintf(context, sizeof context, "step %lld", (long long)it + 1);
        comm->set_context(comm, context);
        if (rank == hang_rank && it + 1 == hang_at)
            for (;;) sleep(60);  // fault injection (tests): never returns; the job is ended by the others
        t->run.dl = t->dl;
        // MIST_FAULT_NAN_GRAD=k: iteration k's backward starts from a NaN loss
        // gradient, so every gradient is NaN while the loss stays finite (tests)
        float dl = nan_grad_at > 0 && it + 1 == nan_grad_at ? NAN : dloss;
        double loss_sum = pipe_train_iteration(&t->pipe, it, dl, &t->train_data);
        double loss = loss_sum / ((double)G * dp * r->B * r->T);
        if (nan_from > 0 && it + 1 >= nan_from) loss = NAN;  // fault injection (tests)
        be->stream_synchronize(be, r->stream);
        device_peak_sample(&t->device_peak, be);
        // gradients are summed over dp (dloss already divides by the global token
        // count); the norm covers every rank's shard of every stage
        double t_norm = now_s();
        trace_measure_mark(&t->trace, TRACE_GRAD_NORM, -1);
        double norm = pipe_grad_norm(&t->pipe);
        t_norm = now_s() - t_norm;
        double lr = lr_at(tc, it);
        if (!isfinite(loss) || !isfinite(norm)) {
            nonfinite++;
            skipped++;
            consecutive++;
            zero_clear_grads(r);
            chunks_clear_grads(&t->ch);
            if (root) fprintf(stderr, "mist-train: warning: iteration %lld: loss %g, grad norm %g not finite; "
                              "step skipped (%lld in a row, abort after %d)\n", (long long)it + 1, loss, norm,
                              (long long)consecutive, tc->max_nonfinite);
            if (consecutive >= tc->max_nonfinite) {
                if (root) fprintf(stderr, "mist-train: %lld consecutive non-finite iterations: stopping "
                                  "(hint: lower [train] lr or raise grad_clip)\n", (long long)consecutive);
                return 1;
            }
        } else {
            consecutive = 0;
            // deferred: each unit steps just before its first use in the next iteration
            zero_schedule_step(r, (float)lr, optimizer_clip_scale(norm, tc->grad_clip));
            chunks_schedule_step(&t->ch, (float)lr, optimizer_clip_scale(norm, tc->grad_clip));
        }
        be->stream_synchronize(be, r->stream);
        double dt = now_s() - t0;
        trace_measure_finish(&t->trace, dt, comm, t->grid);
        if (it > t->start) {
            t->timed[t->timed_n++ % TIMED_MAX] = dt;
            t->sum_total += dt, t->sum_compute += t->pipe.sec_compute, t->sum_wait += t->pipe.sec_wait;
            t->sum_norm += t_norm;
        }
        IterStats *stats = &t->stats;
        *stats = (IterStats){.iteration = it + 1, .steps = tc->steps,
                             .consumed_tokens = (int64_t)((double)(it + 1) * tokens_per_iter),
                             .ms_per_iter = 1e3 * dt, .tokens_per_s = tokens_per_iter / dt,
                             .lr = lr, .loss = loss, .grad_norm = norm, .skipped = skipped, .nonfinite = nonfinite,
                             .peak_device_bytes = (int64_t)arena_peak_bytes(&r->dev) + chunks_device_peak(&t->ch)};
        train_flops_rates(&t->flops, dt, &stats->tflops_per_device, &stats->mfu, &stats->hfu);
        t->have_stats = 1;
        if (t->vdl && ((it + 1) % cfg->data.val_interval == 0 || it + 1 == tc->steps)) {
            zero_flush(r);
            chunks_flush(&t->ch);
            t->run.dl = t->vdl, t->run.what = "val";
            snprintf(context, sizeof context, "step %lld (validation)", (long long)it + 1);
            comm->set_context(comm, context);
            stats->val_loss = pipe_eval(&t->pipe, t->val_batches, &t->train_data) /
                              ((double)t->val_batches * dp * r->B * r->T);
            t->run.dl = t->dl, t->run.what = "train";
            stats->has_val = 1;
        }
        if (trainlog_iteration(t->log, stats, t->err, sizeof t->err)) {
            fprintf(stderr, "mist-train: rank %d: %s\n", rank, t->err);
            comm->abort(comm, 1, "log write error");
        }
        if (cfg->log.sample_interval > 0 && (it + 1) % cfg->log.sample_interval == 0)
            print_sample(t, it);
        // A stop signal (SIGUSR1, SIGTERM) reaches the ranks at slightly
        // different times: every rank learns whether any got one, so all stop
        // after this same iteration, with a checkpoint of it.
        int stop = stop_signal_pending();
        commCheck(comm, comm->all_reduce(comm, &stop, &stop, 1, MIST_I32, COMM_MAX, t->grid->world));
        if (ckdir[0] && ((cfg->checkpoint.interval > 0 && (it + 1) % cfg->checkpoint.interval == 0) ||
                         it + 1 == tc->steps || stop)) {
            train_save_checkpoint(t, it, skipped, nonfinite);
            // a signal that came while the checkpoint was written: stop at it,
            // rather than train one more iteration and write a second one
            if (!stop) {
                stop = stop_signal_pending();
                commCheck(comm, comm->all_reduce(comm, &stop, &stop, 1, MIST_I32, COMM_MAX, t->grid->world));
            }
        }
        if (stop && it + 1 < tc->steps) {
            if (root)
                fprintf(stderr, "mist-train: signal %d: stopping after iteration %lld of %lld; %s\n", stop,
                        (long long)it + 1, (long long)tc->steps,
                        ckdir[0] ? "checkpoint written, resume with -o checkpoint.resume=1"
                                 : "no [checkpoint] dir, so nothing was saved");
            t->stopped = 1;
            if (root && ckdir[0]) write_stop_file(it + 1);
            break;
        }
    }
    return 0;
}

// The last step, then rank 0 reports the measured iteration time and every
// rank's measured peaks against the predicted ones (and writes the summary
// file). 0, or 1 when the summary cannot be written.
static int final_report(Training *t) {
    const MistConfig *cfg = t->cfg;
    const Grid *grid = t->grid;
    const CommBackend *comm = t->comm;
    ModelRuntime *r = &t->model;
    int root = t->root, rc = 0;
    zero_flush(r);  // the last iteration's step
    chunks_flush(&t->ch);
    int n = t->timed_n < TIMED_MAX ? (int)t->timed_n : TIMED_MAX;
    RunTiming timing = {t->flops.predicted_seconds > 0 ? t->flops.predicted_seconds : 0,
                        median_seconds(t->timed, n), n, 0, 0, 0, 0};
    if (t->timed_n > 0) {
        timing.mean_compute = t->sum_compute / t->timed_n, timing.mean_wait = t->sum_wait / t->timed_n;
        timing.mean_norm = t->sum_norm / t->timed_n;
        timing.mean_other = (t->sum_total - t->sum_compute - t->sum_wait - t->sum_norm) / t->timed_n;
    }
    if (root && timing.iterations > 0) {
        printf("mist: measured iteration: median %.4g ms over %d iterations (the run's first left out)",
               1e3 * timing.measured_median_seconds, timing.iterations);
        if (timing.predicted_seconds > 0)
            printf("; predicted %.4g ms on hardware profile %s: measured / predicted = %.3g",
                   1e3 * timing.predicted_seconds, t->flops.hardware,
                   timing.measured_median_seconds / timing.predicted_seconds);
        printf("\nmist: time per iteration on rank 0 (mean of those): forward and backward %.4g ms (the collectives "
               "inside blocks included), waiting for other stages %.4g ms, gradient norm %.4g ms, the rest %.4g ms\n",
               1e3 * timing.mean_compute, 1e3 * timing.mean_wait, 1e3 * timing.mean_norm, 1e3 * timing.mean_other);
    }
    // predicted vs measured peaks of every rank
    device_peak_sample(&t->device_peak, t->be);
    // a rank's chunks hold their arenas together (runtime/train_chunks.h)
    int64_t device_peak = device_peak_bytes(&t->device_peak);
    int64_t arena_dev = (int64_t)arena_peak_bytes(&r->dev) + chunks_device_peak(&t->ch);
    RankMemory mine = {t->rank, grid->stage, t->pred_dev, arena_dev, t->pred_host,
                       (int64_t)arena_peak_bytes(&r->host) + chunks_host_peak(&t->ch),
                       device_peak >= 0 ? device_peak : arena_dev,
                       device_peak >= 0, (int64_t)r->block_saved_measured};
    RankMemory *all = calloc((size_t)grid->world_size, sizeof *all);
    commCheck(comm, comm->all_gather(comm, &mine, all, sizeof mine, MIST_U8, grid->world));
    if (root) {
        char a[32], b2[32];
        trainlog_format_bytes(mine.measured_device_peak_bytes, a, sizeof a);
        trainlog_format_bytes(mine.measured_host_peak_bytes, b2, sizeof b2);
        printf("mist: measured peak on rank 0: device %s (%lld B, predicted %lld B), host %s (%lld B, "
               "predicted %lld B)\n", a, (long long)mine.measured_device_peak_bytes, (long long)t->pred_dev, b2,
               (long long)mine.measured_host_peak_bytes, (long long)t->pred_host);
        trainlog_format_bytes(mine.device_peak_bytes, a, sizeof a);
        if (mine.device_peak_from_device) {
            printf("mist: device peak on rank 0 as the device counts it (free memory before the arenas - least free "
                   "since): %s (%lld B; arena %lld B, predicted %lld B)\n", a, (long long)mine.device_peak_bytes,
                   (long long)arena_dev, (long long)t->pred_dev);
            char mem[400];  // with the backend's buffers from before that baseline: against the whole prediction
            backend_memory_measured_line(mine.device_peak_bytes, t->reserved_dev, t->pred_dev,
                                         backend_reserved_device_bytes(t->be), mem, sizeof mem);
            printf("mist: %s\n", mem);
        } else
            printf("mist: device peak on rank 0: %s (%lld B) is the arena's: the %s backend's device memory is host "
                   "memory, there is no device to ask\n", a, (long long)mine.device_peak_bytes, t->be->name);
        char line[256];
        if (comm_select_device_calls(&t->choice, t->rank, line, sizeof line) > 0) printf("mist: %s\n", line);
        if (cfg->log.summary[0] &&
            trainlog_write_summary(cfg->log.summary, all, grid->world_size, t->have_stats ? &t->stats : NULL,
                                   &timing, t->err, sizeof t->err)) {
            fprintf(stderr, "mist-train: [log] summary: %s\n", t->err);
            rc = 1;
        }
    }
    free(all);
    return rc;
}

// Releases whatever the steps took, in the reverse order of their taking.
// 1 when the log could not be finished (its last lines may be lost), else 0.
static int close_training(Training *t) {
    int rc = 0;
    if (t->log && trainlog_close(t->log, t->err, sizeof t->err)) {
        fprintf(stderr, "mist-train: rank %d: %s\n", t->rank, t->err);
        rc = 1;
    }
    if (t->dl) dataloader_close(t->dl);
    if (t->vdl) dataloader_close(t->vdl);
    train_checkpoint_free(t);
    pipe_free(&t->pipe);
    trace_measure_free(&t->trace);
    comm_hier_free(t->dph);  // its groups, before the comm path goes
    zero_scope_groups_free(t->comm, t->paro);
    t->dph = t->model.dph = NULL;
    if (t->have_choice) comm_select_release(&t->choice);  // before the stream NCCL follows goes
    chunks_free(&t->ch);
    mr_free(&t->model);
    if (t->be) t->be->destroy(t->be);
    return rc;
}

int mist_train_run(const MistConfig *cfg, const struct Grid *grid) {
    static Training t;  // large (two parameter tables): not on the stack
    memset(&t, 0, sizeof t);
    t.cfg = cfg;
    t.grid = grid;
    t.rank = grid->world_rank, t.root = t.rank == 0;
    t.G = cfg->plan.plan.G, t.dp = grid->dp_size, t.tp = grid->tp_size, t.S = cfg->plan.plan.num_stages;
    t.dtype = cfg->train.precision == PREC_BF16 ? MIST_BF16 : MIST_F32;
    static int (*const steps[])(Training *) = {start_backend, lay_out_stage, plan_memory, report_predictions,
                                               init_state, open_data, train_resume, open_log, train_loop,
                                               final_report};
    int rc = 0;
    for (size_t i = 0; i < sizeof steps / sizeof *steps && rc == 0; i++) rc = steps[i](&t);
    if (rc == 0 && t.stopped) rc = MIST_EXIT_STOPPED;
    if (close_training(&t) && (rc == 0 || rc == MIST_EXIT_STOPPED)) rc = 1;
    return rc;
}
