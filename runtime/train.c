// The training loop of one pipeline stage with data and tensor parallelism
// over its ranks (tp: runtime/model_runtime.c, docs/tensor-parallel.md): G
// micro-batches of b sequences per rank in 1F1B order between the stages
// (runtime/pipeline_run.c), gradients reduced over the stage's dp
// group (all-reduce, or reduce-scatter into shards under ZeRO >= 1; the
// per-unit schedule of gathers, swaps and deferred optimizer steps is in
// runtime/zero.c), global-norm clipping over every stage, AdamW, logs,
// validation, checkpoints.
//
// Loss scaling: every micro-batch's cross-entropy gradient is scaled by
// dloss = 1 / (b*T*G*dp), so after accumulating G micro-batches and summing
// over dp ranks the gradient is the mean over all tokens of the global batch,
// the same quantity for any (dp, G, b) with the same b*G*dp (b*dp, the
// micro-batch, is the same in every stage).
#include <config.h>  // the build's config (HAVE_CUDA), not core/schema.h
#include "runtime/train.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "runtime/checkpoint.h"
#include "runtime/comm.h"
#include "runtime/comm_select.h"
#include "runtime/launch.h"
#include "runtime/dataloader.h"
#include "runtime/train_flops.h"
#include "planner/search.h"
#include "runtime/grid.h"
#include "runtime/model_runtime.h"
#include "runtime/pipeline_run.h"
#include "runtime/stop_signal.h"
#include "runtime/trainlog.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    const MistConfig *cfg;
    const Grid *grid;
    const CommBackend *comm;
    ModelRuntime *r;
    int G;
    DataLoader *dl;  // the loader PipeData.load reads (train or val)
    const char *what;  // its [data] key, for errors
    char *err;
    size_t errlen;
} Run;

// Sum of per-token losses of one micro-batch over the dp group, added in the
// order of the global sample stream (rank r holds sequences r*b .. r*b+b-1 of
// the micro-batch), so the total is the same bits for any dp / G split.
static double micro_batch_loss_sum(Run *run) {
    ModelRuntime *r = run->r;
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
static int load_batch(void *ctx, int64_t it, int g, int slot) {
    Run *run = ctx;
    ModelRuntime *r = run->r;
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

static double loss_sum_cb(void *ctx) { return micro_batch_loss_sum(ctx); }

// Every parameter tensor as a checkpoint entry over whole-model host arrays:
// fp32 weights (the master under bf16), Adam m, Adam v (3 x Pglobal floats,
// global shapes). Checkpoints hold whole tensors, so before a save the dp
// shards are gathered (zero_collect) and the tp shards put in place
// (mr_tp_gather); after a load each rank extracts its tp shard
// (mr_tp_scatter) and takes its dp part (zero_distribute): a checkpoint
// written under one plan resumes under any other.
static CkptTensor *ckpt_tensors(ModelRuntime *r, float *global) {
    CkptTensor *t = calloc((size_t)r->num_tensors, sizeof *t);
    float *w = global, *m = global + r->Pglobal, *v = global + 2 * r->Pglobal;
    for (int i = 0; i < r->num_tensors; i++) {
        const ParamTensor *p = &r->tensors[i];
        t[i].name = p->name;
        t[i].ndim = p->spec.cols == 1 ? 1 : 2;
        t[i].shape[0] = p->spec.rows;
        t[i].shape[1] = p->spec.cols;
        t[i].param = w + p->goffset;
        t[i].adam_m = m + p->goffset;
        t[i].adam_v = v + p->goffset;
    }
    return t;
}

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

void train_runtime_limits(SearchLimits *lim) {
    memset(lim, 0, sizeof *lim);
    lim->max_stages = 0;     // any: 1F1B pipeline (runtime/pipeline_run.c)
    lim->max_tp = 0;         // any: tensor parallelism (the config checks that tp divides heads, kv_heads, ffn)
    lim->max_tp_staged = 0;  // any, inside pipeline stages too
}

// Keep in step with train_runtime_limits().
// Any mesh in any stage runs: tp > 1 inside pipeline stages too (the stages'
// meshes may differ, see docs/pipeline.md).
static int check_supported(const MistConfig *cfg, const Grid *grid, char *err, size_t errlen) {
    if (cfg->train.precision == PREC_FP16) {
        snprintf(err, errlen, "[train] precision = fp16: not supported by the training runtime; allowed: fp32, bf16");
        return 2;
    }
    const char *staged = getenv("MIST_COMM_STAGED");
    if (staged && strcmp(staged, "0") != 0 && strcmp(staged, "1") != 0) {
        snprintf(err, errlen, "environment MIST_COMM_STAGED=%s: allowed: 0, 1 (1: move "
                 "collectives of device memory through pinned host memory instead of NCCL)", staged);
        return 2;
    }
    if (strcmp(grid->device, "cpu") != 0 && strncmp(grid->device, "cuda", 4) != 0) {
        snprintf(err, errlen, "unknown device '%s'", grid->device);
        return 1;
    }
    return 0;
}

int mist_train_run(const MistConfig *cfg, const struct Grid *grid) {
    const CommBackend *comm = grid->comm;
    int rank = grid->world_rank, root = rank == 0;
    char err[1024] = "";
    int rc = check_supported(cfg, grid, err, sizeof err);
    if (rc) {
        if (root) fprintf(stderr, "mist-train: %s: %s\n", cfg->source, err);
        return rc;
    }
    const StagePlan *sp = &cfg->plan.plan.stage[grid->stage];
    const TrainConfig *tc = &cfg->train;
    int G = cfg->plan.plan.G, dp = grid->dp_size, tp = grid->tp_size, S = cfg->plan.plan.num_stages;
    MistDtype dtype = tc->precision == PREC_BF16 ? MIST_BF16 : MIST_F32;
    // the device the launcher picked for this rank: "cuda:N", or "cpu" (the
    // device is then emulated: its memory is the accounted arena)
    Backend *be = launch_backend(grid->device, dtype, err, sizeof err);
    if (!be) {
        fprintf(stderr, "mist-train: rank %d: cannot start the %s backend: %s\n", rank, grid->device, err);
        return 1;
    }
    int on_host = be->device_memory_is_host;
    // MPI reads host memory only: on a GPU, collectives of device buffers (ZeRO's
    // gradient and weight exchanges, the tp all-reduces) run on NCCL or through
    // host bounce buffers (runtime/comm_select.h). The pipeline's messages and
    // the tied embedding's sum are host buffers either way.
    CommChoice choice;
    commCheck(comm, comm_select(grid->comm, be, grid->world, &choice));
    comm = choice.comm;
    // NCCL's communicators of the dp and tp groups before the arenas: its buffers are not
    // in the plan, and an arena that no longer fits says so at start with its size
    CommGroup *const device_groups[2] = {grid->dp, grid->tp};
    size_t free_before = 0, free_after = 0;
    int known = be->device_free_bytes && be->device_free_bytes(be, &free_before) == 0;
    commCheck(comm, comm_select_prepare(&choice, device_groups, 2));
    known = known && be->device_free_bytes(be, &free_after) == 0;
    if (root && known && choice.path == COMM_PATH_NCCL && free_before > free_after)
        printf("mist: NCCL's communicators took %.1f MiB of device memory on rank 0 (outside the plan's peak; "
               "[cluster] device_memory below the card's leaves them room)\n",
               (double)(free_before - free_after) / 1048576.0);
    if (root && choice.path == COMM_PATH_NCCL && comm_select_communicators(&choice) > 0)
        printf("mist: NCCL communicators made before the arenas on rank 0: %d\n", comm_select_communicators(&choice));
    int several = dp > 1 || tp > 1 || S > 1;
    if (root && choice.path == COMM_PATH_NCCL && (dp > 1 || tp > 1))
        printf("mist: collectives of device memory run on %s (its buffers are outside the measured device peak)\n",
               choice.detail);
    if (root && choice.path == COMM_PATH_STAGED && several)
        printf("mist: collectives of %s memory are staged through pinned host memory%s%s: each costs a copy each way, "
               "and starting one waits for the device\n", on_host ? "the CPU backend's device" : "GPU",
               choice.why[0] ? ": " : "", choice.why);
    // The CUDA attention kernels are built for head sizes 64 and 128 (their
    // tiles are compile-time): say so before training rather than abort in the
    // first forward. Same config on every rank, so all stop together.
    int head_size = cfg->model.hidden / cfg->model.heads;
    if (!be->supports_op(be, &(BackendOpShape){.op = OP_ATTENTION, .HS = head_size})) {
        if (root)
            fprintf(stderr, "mist-train: %s: [model] hidden / heads = %d / %d = %d: the CUDA backend's attention "
                    "supports head sizes 64 and 128; allowed: 64, 128. Hint: change heads, or MIST_DEVICE=cpu\n",
                    cfg->source, cfg->model.hidden, cfg->model.heads, head_size);
        be->destroy(be);
        return 1;
    }
    static ModelRuntime model;  // large (parameter table): not on the stack
    ModelRuntime *r = &model;
    mr_set_pipeline(r, grid->stage, S, grid->first_layer, grid->num_layers, G);
    rc = mr_layout_sharded(r, &cfg->model, sp, grid->dp_index, err, sizeof err);
    if (!rc && tp > 1) rc = mr_layout_tp(r, tp, grid->tp_index, err, sizeof err);
    if (!rc && tp > 1 && !be->supports_op(be, &(BackendOpShape){.op = OP_VOCAB_PARALLEL})) {
        snprintf(err, sizeof err, "[stage.%d] tp = %d: the %s backend has no vocabulary-parallel embedding and "
                 "cross-entropy kernels; allowed: tp = 1 on it. Hint: MIST_DEVICE=cpu, or a plan without tensor "
                 "parallelism", grid->stage, tp, be->name);
        rc = 2;
    }
    // A layout error can hit some stages only; the others would wait for them
    // at their first exchange. Every rank learns the worst verdict and all stop.
    int worst = rc;
    commCheck(comm, comm->all_reduce(comm, &worst, &worst, 1, MIST_I32, COMM_MAX, grid->world));
    if (worst) {
        if (rc && grid->dp_index == 0 && grid->tp_index == 0) fprintf(stderr, "mist-train: %s: %s\n", cfg->source, err);
        be->destroy(be);
        return worst;
    }
    if (mr_plan_memory(r, be, err, sizeof err)) {
        fprintf(stderr, "mist-train: rank %d: %s\n", rank, err);
        // the other stages may have planned theirs and would wait for this one at the first exchange
        if (S > 1) comm->abort(comm, 1, "memory plan failed");
        mr_free(r);
        be->destroy(be);
        return 1;
    }
    comm_select_follow(&choice, r->stream);  // the model's kernels write what the collectives send
    int64_t pred_dev, pred_host;
    mr_memory_predict(r, &pred_dev, &pred_host);
    if (root) {
        char a[32], b2[32];
        trainlog_format_bytes(pred_dev, a, sizeof a);
        trainlog_format_bytes(pred_host, b2, sizeof b2);
        printf("mist: %lld parameters, dtype %s, %d stage%s, stage 0: %zu parameters (%zu per tp rank), b=%d G=%d "
               "dp=%d tp=%d ckpt=%d zero=%d wo=%g go=%g oo=%g ao=%g\n", (long long)model_param_count(&cfg->model),
               mist_dtype_name(dtype), S, S > 1 ? "s" : "", r->Pglobal, r->P, r->B, G, dp, tp, r->ckpt, r->zero,
               r->wo, r->go, r->oo, r->ao);
        printf("mist: predicted peak per rank: device %s (%lld B), host %s (%lld B)\n", a, (long long)pred_dev, b2,
               (long long)pred_host);
    }
    // MFU / HFU of the log lines against the [cluster] hardware profile's peak
    TrainFlops flops;
    memset(&flops, 0, sizeof flops);
    if (train_flops_init(&flops, cfg, grid->world_size, err, sizeof err) != 0) {
        if (root) printf("mist: MFU and HFU not reported: %s\n", err);
    } else if (root) {
        printf("mist: predicted iteration %.4g ms on hardware profile %s (peak %.4g FLOP/s per device; MFU and "
               "HFU below are against it)\n", 1e3 * flops.predicted_seconds, flops.hardware, flops.peak_flops);
        // the machine may have more than the profile says: warn, the allocations decide
        if (flops.misfit[0])
            printf("mist: warning: the plan does not fit hardware profile %s: %s (hint: mist-plan %s --analyze; "
                   "[cluster] device_memory and host_memory say what the machines have)\n", flops.hardware,
                   flops.misfit, cfg->source);
        // the profile prices one comm path, the run takes another: say which way the prediction errs
        // (the CPU backend's staging is a check of the GPU path, not a run to predict)
        int device_collectives = dp > 1 || tp > 1;
        if (device_collectives && choice.path == COMM_PATH_STAGED && !on_host && !flops.staged_collectives)
            printf("mist: note: collectives are staged through host memory (%s) but hardware profile %s prices them "
                   "GPU to GPU: the prediction is optimistic (-o cluster.measure_transfers=1 measures this path)\n",
                   choice.why[0] ? choice.why : "MIST_COMM_STAGED=1", flops.hardware);
        if (device_collectives && choice.path == COMM_PATH_NCCL && flops.staged_collectives)
            printf("mist: note: hardware profile %s prices collectives staged through host memory ([collective] "
                   "staged = 1), this run's go GPU to GPU on NCCL: the prediction is pessimistic\n", flops.hardware);
    }
    if (root) fflush(stdout);
    r->comm = comm;
    r->dpg = grid->dp;
    r->tpg = grid->tp;
    mr_init_params(r, tc->seed);
    Run run = {cfg, grid, comm, r, G, NULL, "train", err, sizeof err};
    PipeRun pipe;
    if (pipe_init(&pipe, r, grid, &cfg->plan.plan, err, sizeof err)) {
        if (root) fprintf(stderr, "mist-train: %s: %s\n", cfg->source, err);
        mr_free(r);
        be->destroy(be);
        return 2;
    }
    pipe.comm = comm;  // staged or not: its messages are host buffers, which pass through
    PipeData train_data = {load_batch, loss_sum_cb, &run};
    // hyperparameters and step count of AdamW; runtime/zero.c steps each unit's shard
    r->opt = (Optimizer){.backend = be, .stream = r->stream, .norm_acc = arena_ptr(&r->t_norm_acc),
                         .tensors = r->opt_tensors, .num_tensors = r->num_tensors,
                         .beta1 = tc->beta1, .beta2 = tc->beta2, .eps = tc->adam_eps,
                         .weight_decay = tc->weight_decay};

    DataLoader *dl = NULL, *vdl = NULL;
    TrainLog *log = NULL;
    // checkpoints: this rank's fp32 weights, m, v (3 x Pp, padding 0), and the
    // whole model's (3 x Pglobal, global shapes) that the file holds
    float *host_state = NULL, *global_state = NULL;
    if (cfg->checkpoint.dir[0] && (!(host_state = calloc(3 * r->Pp, sizeof(float))) ||
                                   !(global_state = calloc(3 * r->Pglobal, sizeof(float))))) {
        fprintf(stderr, "mist-train: rank %d: out of host memory for the checkpoint arrays (3 x %zu + 3 x %zu "
                "floats)\n", rank, r->Pp, r->Pglobal);
        free(host_state);
        mr_free(r);
        be->destroy(be);
        return 1;
    }
    CkptTensor *ct = global_state ? ckpt_tensors(r, global_state) : NULL;
    // several stages: rank 0 assembles the whole model for a save in the layout
    // of one stage holding every block (pipe_gather_state), from each stage's
    // whole tensors (gathered over its dp and tp groups first)
    static ModelRuntime full;
    float *whole = NULL;
    CkptTensor *whole_ct = NULL;
    if (S > 1 && host_state && root) {
        mr_layout(&full, &cfg->model, 1, 0, 1, err, sizeof err);
        whole = calloc(3 * full.Pp, sizeof(float));
        if (!whole) {
            fprintf(stderr, "mist-train: rank 0: out of host memory for the checkpoint arrays (3 x %zu floats)\n",
                    full.Pp);
            comm->abort(comm, 1, "out of memory");
        }
        whole_ct = ckpt_tensors(&full, whole);
    }
    int exit_code = 0;
    if (dataloader_open(&dl, cfg->data.train, r->T, r->V, cfg->data.shuffle, tc->seed, err, sizeof err) ||
        dataloader_set_rank(dl, tc->global_batch, r->B, dp, grid->dp_index, err, sizeof err)) {
        fprintf(stderr, "mist-train: rank %d: [data] train: %s\n", rank, err);
        exit_code = 1;
        goto done;
    }
    int val_batches = cfg->data.val_batches > 0 ? (int)cfg->data.val_batches : 1;
    if (cfg->data.val[0] && cfg->data.val_interval > 0) {
        if (dataloader_open(&vdl, cfg->data.val, r->T, r->V, 0, tc->seed, err, sizeof err) ||
            dataloader_set_rank(vdl, (int64_t)r->B * dp * val_batches, r->B, dp, grid->dp_index, err, sizeof err)) {
            fprintf(stderr, "mist-train: rank %d: [data] val: %s\n", rank, err);
            exit_code = 1;
            goto done;
        }
    }

    // ---- resume ----
    CkptState st = {0};
    int64_t start = 0;
    const char *ckdir = cfg->checkpoint.dir;
    if (ckdir[0] && cfg->checkpoint.resume) {
        char path[1024];
        int found = checkpoint_load_latest(ckdir, &cfg->model, &st, ct, r->num_tensors, path, sizeof path, err,
                                           sizeof err);
        if (found < 0) {
            fprintf(stderr, "mist-train: rank %d: resume: %s\n", rank, err);
            exit_code = 1;
            goto done;
        }
        if (found == 1) {
            if (st.data_position != dataloader_position(dl, st.step)) {
                fprintf(stderr, "mist-train: rank %d: resume from %s: data position %lld does not match step %lld "
                        "x global_batch %lld (hint: resume with the global_batch the checkpoint was written with)\n",
                        rank, path, (long long)st.data_position, (long long)st.step, (long long)tc->global_batch);
                exit_code = 1;
                goto done;
            }
            // every rank takes its tp shard, then its dp shard (bf16 weights are re-rounded from the fp32 master)
            mr_tp_scatter(r, global_state, host_state, 3);
            zero_distribute(r, host_state, host_state + r->Pp, host_state + 2 * r->Pp);
            start = st.step;
            r->opt.t = st.adam_t;
            if (root) printf("mist: resumed from %s at iteration %lld\n", path, (long long)start);
        }
    }
    log = start > 0 ? trainlog_open_resume(&cfg->log, rank, start + 1, err, sizeof err)
                    : trainlog_open(&cfg->log, rank, err, sizeof err);
    if (!log) {
        fprintf(stderr, "mist-train: rank %d: [log]: %s\n", rank, err);
        exit_code = 1;
        goto done;
    }

    // ---- iterations ----
    int64_t skipped = st.skipped, nonfinite = st.nonfinite, consecutive = 0;
    float dloss = (float)(1.0 / ((double)r->B * r->T * G * dp));
    IterStats stats = {0};
    int have_stats = 0;
    // wall time of the last TIMED_MAX iterations but the run's first (which grows
    // buffers and warms caches): their median against the planner's prediction
    enum { TIMED_MAX = 4096 };
    static double timed[TIMED_MAX];
    int64_t timed_n = 0;
    double sum_total = 0, sum_compute = 0, sum_wait = 0, sum_norm = 0;  // over every timed iteration
    double tokens_per_iter = (double)tc->global_batch * r->T;
    // MIST_FAULT_NAN_FROM=k makes the loss of iteration k and later NaN, to test
    // the skip-and-abort path (set it on every rank: the decision must agree)
    const char *fault = getenv("MIST_FAULT_NAN_FROM");
    int64_t nan_from = fault ? atoll(fault) : 0;
    // MIST_FAULT_HANG=R:K makes world rank R stop taking part at iteration K
    // (it sleeps), to test that the others end the job after [cluster] comm_timeout
    int hang_rank = -1;
    long long hang_at = 0;
    const char *hang = getenv("MIST_FAULT_HANG");
    if (hang && sscanf(hang, "%d:%lld", &hang_rank, &hang_at) != 2) hang_rank = -1;
    comm->set_timeout(comm, cfg->cluster.comm_timeout);
    stop_signal_install();
    char context[64];
    for (int64_t it = start; it < tc->steps; it++) {
        double t0 = now_s();
        snprintf(context, sizeof context, "step %lld", (long long)it + 1);
        comm->set_context(comm, context);
        if (rank == hang_rank && it + 1 == hang_at)
            for (;;) sleep(60);  // fault injection (tests): never returns; the job is ended by the others
        run.dl = dl;
        double loss_sum = pipe_train_iteration(&pipe, it, dloss, &train_data);
        double loss = loss_sum / ((double)G * dp * r->B * r->T);
        if (nan_from > 0 && it + 1 >= nan_from) loss = NAN;  // fault injection (tests)
        be->stream_synchronize(be, r->stream);
        // gradients are summed over dp (dloss already divides by the global token
        // count); the norm covers every rank's shard of every stage
        double t_norm = now_s();
        double norm = pipe_grad_norm(&pipe);
        t_norm = now_s() - t_norm;
        double lr = lr_at(tc, it);
        if (!isfinite(loss) || !isfinite(norm)) {
            nonfinite++;
            skipped++;
            consecutive++;
            zero_clear_grads(r);
            if (root) fprintf(stderr, "mist-train: warning: iteration %lld: loss %g, grad norm %g not finite; "
                              "step skipped (%lld in a row, abort after %d)\n", (long long)it + 1, loss, norm,
                              (long long)consecutive, tc->max_nonfinite);
            if (consecutive >= tc->max_nonfinite) {
                if (root) fprintf(stderr, "mist-train: %lld consecutive non-finite iterations: stopping "
                                  "(hint: lower [train] lr or raise grad_clip)\n", (long long)consecutive);
                exit_code = 1;
                goto done;
            }
        } else {
            consecutive = 0;
            // deferred: each unit steps just before its first use in the next iteration
            zero_schedule_step(r, (float)lr, optimizer_clip_scale(norm, tc->grad_clip));
        }
        be->stream_synchronize(be, r->stream);
        double dt = now_s() - t0;
        if (it > start) {
            timed[timed_n++ % TIMED_MAX] = dt;
            sum_total += dt, sum_compute += pipe.sec_compute, sum_wait += pipe.sec_wait, sum_norm += t_norm;
        }
        stats = (IterStats){.iteration = it + 1, .steps = tc->steps,
                            .consumed_tokens = (int64_t)((double)(it + 1) * tokens_per_iter),
                            .ms_per_iter = 1e3 * dt, .tokens_per_s = tokens_per_iter / dt,
                            .lr = lr, .loss = loss, .grad_norm = norm, .skipped = skipped, .nonfinite = nonfinite,
                            .peak_device_bytes = (int64_t)arena_peak_bytes(&r->dev)};
        train_flops_rates(&flops, dt, &stats.tflops_per_device, &stats.mfu, &stats.hfu);
        have_stats = 1;
        if (vdl && ((it + 1) % cfg->data.val_interval == 0 || it + 1 == tc->steps)) {
            zero_flush(r);
            run.dl = vdl, run.what = "val";
            snprintf(context, sizeof context, "step %lld (validation)", (long long)it + 1);
            comm->set_context(comm, context);
            stats.val_loss = pipe_eval(&pipe, val_batches, &train_data) / ((double)val_batches * dp * r->B * r->T);
            run.dl = dl, run.what = "train";
            stats.has_val = 1;
        }
        trainlog_iteration(log, &stats);
        // A stop signal (SIGUSR1, SIGTERM) reaches the ranks at slightly
        // different times: every rank learns whether any got one, so all stop
        // after this same iteration, with a checkpoint of it.
        int stop = stop_signal_pending();
        commCheck(comm, comm->all_reduce(comm, &stop, &stop, 1, MIST_I32, COMM_MAX, grid->world));
        if (ckdir[0] && ((cfg->checkpoint.interval > 0 && (it + 1) % cfg->checkpoint.interval == 0) ||
                         it + 1 == tc->steps || stop)) {
            st.step = it + 1;
            st.adam_t = r->opt.t;
            st.data_position = dataloader_position(dl, it + 1);
            st.skipped = skipped;
            st.nonfinite = nonfinite;
            int crc = 0;
            // gathering the state and rank 0's write of a large model can
            // legitimately keep the others waiting longer than comm_timeout
            comm->set_timeout(comm, 0);
            zero_flush(r);
            zero_collect(r, host_state, host_state + r->Pp, host_state + 2 * r->Pp);
            // the stage's whole tensors on its (dp 0, tp 0) rank; with one stage that is world rank 0
            if (grid->dp_index == 0) mr_tp_gather(r, host_state, global_state, 3);
            if (S > 1) pipe_gather_state(&pipe, &full, global_state, whole);
            if (root) crc = checkpoint_save(ckdir, cfg->checkpoint.keep, &cfg->model, &st, S > 1 ? whole_ct : ct,
                                            S > 1 ? full.num_tensors : r->num_tensors, err, sizeof err);
            if (crc) {
                fprintf(stderr, "mist-train: checkpoint at iteration %lld: %s\n", (long long)it + 1, err);
                comm->abort(comm, 1, "checkpoint error");
            }
            commCheck(comm, comm->barrier(comm, grid->world));  // nobody reads `latest` before it exists
            comm->set_timeout(comm, cfg->cluster.comm_timeout);
        }
        if (stop && it + 1 < tc->steps) {
            if (root)
                fprintf(stderr, "mist-train: signal %d: stopping after iteration %lld of %lld; %s\n", stop,
                        (long long)it + 1, (long long)tc->steps,
                        ckdir[0] ? "checkpoint written, resume with -o checkpoint.resume=1"
                                 : "no [checkpoint] dir, so nothing was saved");
            exit_code = MIST_EXIT_STOPPED;
            break;
        }
    }

    zero_flush(r);  // the last iteration's step
    RunTiming timing = {flops.predicted_seconds > 0 ? flops.predicted_seconds : 0,
                        median_seconds(timed, timed_n < TIMED_MAX ? (int)timed_n : TIMED_MAX),
                        timed_n < TIMED_MAX ? (int)timed_n : TIMED_MAX, 0, 0, 0, 0};
    if (timed_n > 0) {
        timing.mean_compute = sum_compute / timed_n, timing.mean_wait = sum_wait / timed_n;
        timing.mean_norm = sum_norm / timed_n;
        timing.mean_other = (sum_total - sum_compute - sum_wait - sum_norm) / timed_n;
    }
    if (root && timing.iterations > 0) {
        printf("mist: measured iteration: median %.4g ms over %d iterations (the run's first left out)",
               1e3 * timing.measured_median_seconds, timing.iterations);
        if (timing.predicted_seconds > 0)
            printf("; predicted %.4g ms on hardware profile %s: measured / predicted = %.3g",
                   1e3 * timing.predicted_seconds, flops.hardware,
                   timing.measured_median_seconds / timing.predicted_seconds);
        printf("\nmist: time per iteration on rank 0 (mean of those): forward and backward %.4g ms (the collectives "
               "inside blocks included), waiting for other stages %.4g ms, gradient norm %.4g ms, the rest %.4g ms\n",
               1e3 * timing.mean_compute, 1e3 * timing.mean_wait, 1e3 * timing.mean_norm, 1e3 * timing.mean_other);
    }
    // ---- summary: predicted vs measured peaks of every rank ----
    {
        RankMemory mine = {rank, grid->stage, pred_dev, (int64_t)arena_peak_bytes(&r->dev), pred_host,
                           (int64_t)arena_peak_bytes(&r->host)};
        RankMemory *all = calloc((size_t)grid->world_size, sizeof *all);
        commCheck(comm, comm->all_gather(comm, &mine, all, sizeof mine, MIST_U8, grid->world));
        if (root) {
            char a[32], b2[32];
            trainlog_format_bytes(mine.measured_device_peak_bytes, a, sizeof a);
            trainlog_format_bytes(mine.measured_host_peak_bytes, b2, sizeof b2);
            printf("mist: measured peak on rank 0: device %s (%lld B, predicted %lld B), host %s (%lld B, "
                   "predicted %lld B)\n", a, (long long)mine.measured_device_peak_bytes, (long long)pred_dev, b2,
                   (long long)mine.measured_host_peak_bytes, (long long)pred_host);
            char line[256];
            if (comm_select_device_calls(&choice, rank, line, sizeof line) > 0) printf("mist: %s\n", line);
            if (cfg->log.summary[0] &&
                trainlog_write_summary(cfg->log.summary, all, grid->world_size, have_stats ? &stats : NULL,
                                       &timing, err, sizeof err)) {
                fprintf(stderr, "mist-train: [log] summary: %s\n", err);
                exit_code = 1;
            }
        }
        free(all);
    }

done:
    if (log) trainlog_close(log);
    if (dl) dataloader_close(dl);
    if (vdl) dataloader_close(vdl);
    free(ct);
    free(host_state);
    free(global_state);
    free(whole_ct);
    free(whole);
    if (whole) mr_free(&full);
    pipe_free(&pipe);
    comm_select_release(&choice);  // before the stream NCCL follows goes
    mr_free(r);
    be->destroy(be);
    return exit_code;
}
