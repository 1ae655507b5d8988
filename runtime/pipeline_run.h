// The 1F1B driver of one pipeline stage (docs/pipeline.md): runs an
// iteration's G micro-batches in the order of pipeline_schedule.h, moves the
// boundary activations forward and their gradients backward between the
// ranks of neighbouring stages (re-sharded over the batch dimension by
// pipeline_reshard.h when the stages' dp differ; each receiving tp rank reads
// one tp copy of the sender), sums the tied embedding's gradient between the
// first and the last stage (whose tp may differ), takes the gradient norm
// over every stage, and gathers the whole model for a checkpoint.
//
// Point-to-point messages go device buffer to device buffer over the world
// group, through the job's comm backend (NCCL, staged through the host, or
// MPI on the CPU backend), nonblocking: after each pass the driver starts its
// output's sends and the next pass's receives together (one NCCL group), a
// pass waits for its input just before it runs, and a send buffer (one of
// two) is reused only after its previous send completed.
#ifndef MIST_PIPELINE_RUN_H
#define MIST_PIPELINE_RUN_H
#include <stddef.h>
#include <stdint.h>
#include "base/plan.h"
#include "runtime/pipeline_reshard.h"

struct ModelRuntime;
struct Grid;
struct CommBackend;
struct CommGroup;
struct CommRequest;
struct TraceMeasure;

#define PIPE_MAX_PIECES 256  // ranks of a neighbouring stage one rank exchanges with

// One direction of one boundary: the pieces of a micro-batch's (b, T, C)
// tensor and the requests of the messages in flight.
typedef struct {
    ReshardPiece piece[PIPE_MAX_PIECES];
    int n;
    struct CommRequest *req[2][PIPE_MAX_PIECES];  // per buffer (sends use two, receives one)
} PipeLink;

// Interleaved plans ([plan] virtual = v > 1, docs/pipeline.md): a rank runs v
// model chunks, r + j P for j = 0 .. v-1, each with its own runtime and links.
#define PIPE_MAX_CHUNKS (MIST_MAX_STAGES / 2)

// One chunk (stage) of this rank: its runtime and its boundaries.
typedef struct {
    struct ModelRuntime *r;
    int stage;                 // its [stage.N]: chunk r + j P
    PipeLink act_out, act_in;  // forward: to stage + 1, from stage - 1
    PipeLink grad_out, grad_in;  // backward: to stage - 1, from stage + 1
} PipeChunk;

typedef struct {
    struct ModelRuntime *r;    // chunk 0's runtime (the rank's only one without [plan] virtual)
    const struct Grid *grid;
    const Plan *plan;          // the run's plan (outlives the driver)
    const struct CommBackend *comm;
    int stage, S, G;           // stage: the rank's pipeline rank (= its first chunk); S: stages (chunks)
    int P, v;                  // pipeline ranks, chunks per rank (1 without [plan] virtual)
    int last_root;             // world rank of dp 0, tp 0 of the last stage (it holds the losses)
    PipeChunk chunk[PIPE_MAX_CHUNKS];  // v of them
    struct CommGroup *tied;    // ranks of the first and the last stage (tied embeddings, S > 1), else NULL
    struct CommGroup *other;   // the split's group of the remaining ranks (unused)
    // seconds of the last pipe_train_iteration: its micro-batches' forward and backward
    // (the device's work included: each ends with a stream synchronisation; the
    // collectives inside blocks too), and waiting for other stages' messages
    double sec_compute, sec_wait;
    struct TraceMeasure *trace;  // marks where each pass begins and ends ([log] trace), or NULL
} PipeRun;

// What the driver needs from the training loop.
typedef struct {
    // Loads micro-batch g of iteration it: tokens into mr_inputs(r, slot)
    // (first stage) and targets into mr_targets(r) (last stage); r is the
    // stage's runtime (the chunk's). 0 or -1.
    int (*load)(void *ctx, struct ModelRuntime *r, int64_t it, int g, int slot);
    // Last stage, after a forward: the sum of the micro-batch's per-token
    // losses of r over the stage's dp group (collective over it; every tp rank
    // holds the same losses and computes the same sum).
    double (*loss_sum)(void *ctx, struct ModelRuntime *r);
    void *ctx;
} PipeData;

// Collective over the world: the pieces of every boundary and the tied group.
// chunks[j]: the runtime of the rank's chunk j (one without [plan] virtual).
// 0, or 2 with err (a plan the reshard rules reject).
int pipe_init(PipeRun *p, struct ModelRuntime *const *chunks, const struct Grid *grid, const Plan *plan, char *err,
              size_t errlen);
void pipe_free(PipeRun *p);

// One training iteration (every forward and backward of its G micro-batches,
// gradients accumulated with dloss). Returns the sum of every token's loss,
// the same value on every rank.
double pipe_train_iteration(PipeRun *p, int64_t it, float dloss, const PipeData *d);
// Forward only over `batches` micro-batches (iteration 0 of the loader);
// the loss sum on every rank.
double pipe_eval(PipeRun *p, int batches, const PipeData *d);
// After an iteration: the tied embedding's gradients summed between the first
// and the last stage, then the global L2 norm of the gradient over every
// stage (each parameter counted once), the same on every rank.
double pipe_grad_norm(PipeRun *p);

// Checkpoint gather (collective over the world): world rank 0 gets the whole
// model's fp32 weights, Adam m and v, in the layout of `full` (a one-stage,
// unsharded layout of the model: 3 x full->Pp floats in `whole`, w then m
// then v) from the rank at dp 0, tp 0 of every stage, whose stage_whole[j]
// holds its chunk j's whole tensors (3 x r->Pglobal: zero_collect over dp,
// then mr_tp_gather over tp). whole is used on rank 0 only.
void pipe_gather_state(PipeRun *p, const struct ModelRuntime *full, float *const *stage_whole, float *whole);

#endif
