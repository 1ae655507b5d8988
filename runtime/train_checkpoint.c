// A training run's checkpoints (runtime/train.c's steps call these): the
// host arrays a checkpoint is assembled in, resuming from the latest one at
// start, and writing one after an iteration. Every rank holds its fp32
// weights, m and v (3 x Pp) and the stage's whole tensors (3 x Pglobal); with
// several stages rank 0 also holds the whole model in the layout of one stage
// (3 x full.Pp). The file stores global shapes, so a checkpoint resumes under
// another plan (docs/checkpoint-format.md).
#include "runtime/train_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "models/model.h"
#include "runtime/fileutil.h"
#include "runtime/train_guard.h"

int train_checkpoint_arrays(Training *t) {
    const MistConfig *cfg = t->cfg;
    ModelRuntime *r = &t->model;
    // the arrays also carry a sample's weights to rank 0 when the model spans several stages
    int gathers = cfg->checkpoint.dir[0] || (t->S > 1 && cfg->log.sample_interval > 0);
    if (gathers && (!(t->host_state = calloc(3 * r->Pp, sizeof(float))) ||
                    !(t->global_state = calloc(3 * r->Pglobal, sizeof(float))) || chunks_alloc_state(&t->ch))) {
        fprintf(stderr, "mist-train: rank %d: out of host memory for the checkpoint arrays (3 x %zu + 3 x %zu "
                "floats)\n", t->rank, r->Pp, r->Pglobal);
        return 1;
    }
    t->ct = t->global_state ? mr_checkpoint_tensors(r, t->global_state) : NULL;
    for (int j = 1; t->ct && j < t->ch.v; j++) t->ch.ct[j] = mr_checkpoint_tensors(t->ch.r[j], t->ch.global_state[j]);
    if (t->S > 1 && t->host_state && t->root) {
        mr_layout(&t->full, &cfg->model, 1, 0, 1, t->err, sizeof t->err);
        t->whole = calloc(3 * t->full.Pp, sizeof(float));
        if (!t->whole) {
            fprintf(stderr, "mist-train: rank 0: out of host memory for the checkpoint arrays (3 x %zu floats)\n",
                    t->full.Pp);
            t->comm->abort(t->comm, 1, "out of memory");
        }
        t->whole_ct = mr_checkpoint_tensors(&t->full, t->whole);
    }
    return 0;
}

int train_resume(Training *t) {
    const MistConfig *cfg = t->cfg;
    ModelRuntime *r = &t->model;
    CkptState *st = &t->st;
    const char *ckdir = cfg->checkpoint.dir;
    // an unusable checkpoint directory found at the first checkpoint would lose
    // an interval of training: rank 0 (the writer) probes it now
    int failed = t->root && ckdir[0] && mist_output_dir_check(ckdir, t->err, sizeof t->err) != 0;
    if (train_failed_anywhere(t, failed, "[checkpoint] dir")) return 1;
    if (ckdir[0] && cfg->checkpoint.resume) {
        char path[1024];
        int found = checkpoint_load_latest(ckdir, &cfg->model, st, t->ct, r->num_tensors, path, sizeof path, t->err,
                                           sizeof t->err);
        if (train_failed_anywhere(t, found < 0, "resume")) return 1;
        if (found == 1) {
            failed = st->data_position != dataloader_position(t->dl, st->step);
            if (failed)
                snprintf(t->err, sizeof t->err, "from %.700s: data position %lld does not match step %lld x global_batch "
                         "%lld (hint: resume with the global_batch the checkpoint was written with)", path,
                         (long long)st->data_position, (long long)st->step, (long long)cfg->train.global_batch);
            if (train_failed_anywhere(t, failed, "resume")) return 1;
            // every rank takes its tp shard, then its dp shard (bf16 weights are re-rounded from the fp32 master)
            mr_tp_scatter(r, t->global_state, t->host_state, 3);
            zero_distribute(r, t->host_state, t->host_state + r->Pp, t->host_state + 2 * r->Pp);
            failed = chunks_resume(&t->ch, path, &cfg->model, t->err, sizeof t->err) != 0;
            if (train_failed_anywhere(t, failed, "resume")) return 1;
            t->start = st->step;
            r->opt.t = st->adam_t;
            if (t->root) printf("mist: resumed from %s at iteration %lld\n", path, (long long)t->start);
            if (t->root && t->start >= cfg->train.steps)
                printf("mist: the checkpoint is at iteration %lld, at or past [train] steps = %lld: nothing to train "
                       "(hint: raise steps, e.g. -o train.steps=%lld, to train on)\n", (long long)t->start,
                       (long long)cfg->train.steps, (long long)t->start + cfg->train.steps);
        }
    }
    return 0;
}

void train_gather_whole_state(Training *t) {
    ModelRuntime *r = &t->model;
    zero_flush(r);
    zero_collect(r, t->host_state, t->host_state + r->Pp, t->host_state + 2 * r->Pp);
    // the stage's whole tensors on its (dp 0, tp 0) rank; with one stage that is world rank 0
    if (t->grid->dp_index == 0) mr_tp_gather(r, t->host_state, t->global_state, 3);
    chunks_gather(&t->ch);
    t->ch.global_state[0] = t->global_state;  // every chunk's whole tensors, in chunk order
    if (t->S > 1) pipe_gather_state(&t->pipe, &t->full, t->ch.global_state, t->whole);
}

void train_save_checkpoint(Training *t, int64_t it, int64_t skipped, int64_t nonfinite) {
    const MistConfig *cfg = t->cfg;
    const Grid *grid = t->grid;
    const CommBackend *comm = t->comm;
    ModelRuntime *r = &t->model;
    CkptState *st = &t->st;
    st->step = it + 1;
    st->adam_t = r->opt.t;
    st->data_position = dataloader_position(t->dl, it + 1);
    st->skipped = skipped;
    st->nonfinite = nonfinite;
    int crc = 0;
    // gathering the state and rank 0's write of a large model can legitimately
    // keep the others waiting longer than comm_timeout, but a rank that stopped
    // must still end the job: allow the write at a slow file system's pace
    comm->set_timeout(comm, checkpoint_timeout(cfg->cluster.comm_timeout, model_param_count(&cfg->model)));
    // MIST_FAULT_HANG_CHECKPOINT=R:K makes world rank R stop in the checkpoint of
    // iteration K (tests: the others must still end the job, not wait forever)
    int hang_rank = -1;
    long long hang_at = 0;
    const char *hang = getenv("MIST_FAULT_HANG_CHECKPOINT");
    if (hang && sscanf(hang, "%d:%lld", &hang_rank, &hang_at) == 2 && t->rank == hang_rank && it + 1 == hang_at)
        for (;;) sleep(60);
    train_gather_whole_state(t);
    // MIST_FAULT_CHECKPOINT_PAUSE=FILE:SECONDS: rank 0 creates FILE and sleeps
    // before writing (tests: a stop signal sent while a checkpoint is written)
    const char *pause = getenv("MIST_FAULT_CHECKPOINT_PAUSE");
    const char *colon = pause ? strrchr(pause, ':') : NULL;
    if (t->root && colon) {
        char marker[1024];
        snprintf(marker, sizeof marker, "%.*s", (int)(colon - pause), pause);
        FILE *mf = fopen(marker, "w");
        if (mf) fclose(mf);
        sleep((unsigned)atoi(colon + 1));
    }
    if (t->root)
        crc = checkpoint_save(cfg->checkpoint.dir, cfg->checkpoint.keep, &cfg->model, st, t->S > 1 ? t->whole_ct : t->ct,
                              t->S > 1 ? t->full.num_tensors : r->num_tensors, t->err, sizeof t->err);
    if (crc) {
        fprintf(stderr, "mist-train: checkpoint at iteration %lld: %s\n", (long long)it + 1, t->err);
        comm->abort(comm, 1, "checkpoint error");
    }
    commCheck(comm, comm->barrier(comm, grid->world));  // nobody reads `latest` before it exists
    comm->set_timeout(comm, cfg->cluster.comm_timeout);
}

void train_checkpoint_free(Training *t) {
    free(t->ct);
    free(t->host_state);
    free(t->global_state);
    if (t->whole) mr_free(&t->full);
    free(t->whole_ct);
    free(t->whole);
}
