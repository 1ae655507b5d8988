// The state one training run shares between its steps (runtime/train.c: the
// steps and the loop; runtime/train_checkpoint.c: the checkpoint arrays,
// resume and save). Private to those two files; mist_train_run
// (runtime/train.h) is the interface.
#ifndef MIST_TRAIN_INTERNAL_H
#define MIST_TRAIN_INTERNAL_H
#include <stddef.h>
#include <stdint.h>
#include "base/schema.h"
#include "runtime/checkpoint.h"
#include "runtime/comm.h"
#include "runtime/comm_select.h"
#include "runtime/dataloader.h"
#include "runtime/device_peak.h"
#include "runtime/grid.h"
#include "runtime/model_runtime.h"
#include "runtime/pipeline_run.h"
#include "runtime/trace_measure.h"
#include "runtime/train_chunks.h"
#include "runtime/train_flops.h"
#include "runtime/trainlog.h"

// What the data callbacks of the pipeline (PipeData) read.
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

// wall time of the last TIMED_MAX iterations but the run's first (which grows
// buffers and warms caches): their median against the planner's prediction
enum { TIMED_MAX = 4096 };

// One training run on this rank, from the backend's start to the final
// report: the state mist_train_run's steps share. close_training releases
// whatever of it exists, whichever step stopped.
typedef struct {
    const MistConfig *cfg;
    const Grid *grid;
    int rank, root;
    int G, dp, tp, S;
    MistDtype dtype;         // of the weights, activations and gradients
    char err[1024];
    Backend *be;             // NULL until started
    int on_host;             // the CPU backend (its device memory is the accounted arena)
    int have_choice;
    CommChoice choice;       // where collectives of device memory run (runtime/comm_select.h)
    const CommBackend *comm; // choice.comm
    struct CommHier *dph;    // the dp group's two levels ([cluster] collectives = hierarchical), or NULL
    CommGroup *paro[4];      // an I scope's groups of the dp group (zero_scope_groups); or NULL
    ModelRuntime model;      // this rank's part of the model, its memory and state
    TrainChunks ch;          // [plan] virtual: the rank's other model chunks (runtime/train_chunks.h)
    int64_t pred_dev, pred_host;  // predicted peaks of its arenas
    size_t reserved_dev;          // the backend's device bytes after preparing the run's shapes (backend_prepare.h)
    TrainFlops flops;        // MFU / HFU of the log lines, the predicted iteration time
    Run run;                 // what the data callbacks read
    PipeRun pipe;
    PipeData train_data;
    DataLoader *dl, *vdl;    // training and validation data (vdl: NULL without validation)
    int val_batches;
    TrainLog *log;
    TraceMeasure trace;      // [log] trace: the recorded iteration's timers
    // checkpoints: this rank's fp32 weights, m, v (3 x Pp, padding 0), and the
    // whole model's (3 x Pglobal, global shapes) that the file holds
    float *host_state, *global_state;
    CkptTensor *ct;
    // several stages: rank 0 assembles the whole model for a save in the layout
    // of one stage holding every block (pipe_gather_state), from each stage's
    // whole tensors (gathered over its dp and tp groups first)
    ModelRuntime full;
    float *whole;
    CkptTensor *whole_ct;
    CkptState st;            // the checkpoint resumed from, then the one written
    int64_t start;           // iterations done before this run (resumed)
    int stopped;             // a stop signal ended the loop early
    // the loop's statistics
    IterStats stats;
    int have_stats;
    double timed[TIMED_MAX];
    int64_t timed_n;
    double sum_total, sum_compute, sum_wait, sum_norm;  // over every timed iteration
    DevicePeak device_peak;  // the device's own count of the run's memory (runtime/device_peak.h)
} Training;

// runtime/train.c. Whether any rank failed (collective): 1 or 0. An error every
// rank hit (the same file, the same setting) is printed once, by rank 0; one
// that only some ranks hit (a shard unreadable on one node) by each of them,
// with its rank. Every rank then returns together: nobody waits for a rank that
// gave up.
int train_failed_anywhere(Training *t, int failed, const char *where);

// runtime/train_checkpoint.c.
// The checkpoint arrays (they also carry a sample's weights to rank 0 when the
// model spans several stages), after the layout. 0, or 1 (out of host memory).
int train_checkpoint_arrays(Training *t);
// Rank 0 probes [checkpoint] dir (an unusable one found at the first save
// would lose an interval of training); with [checkpoint] resume, the latest
// checkpoint's state, every rank its shards of it, t->start its iteration.
// 0, or 1 (collective).
int train_resume(Training *t);
// The whole model's fp32 weights, m and v on world rank 0 (collective): in
// global_state (one stage) or in whole, in full's layout (several stages).
void train_gather_whole_state(Training *t);
// The checkpoint of iteration it (1-based: it + 1 done): every stage's whole
// tensors to rank 0, which writes the file; collective.
void train_save_checkpoint(Training *t, int64_t it, int64_t skipped, int64_t nonfinite);
// Frees the checkpoint arrays (whichever exist).
void train_checkpoint_free(Training *t);

#endif
