// The rank's further model chunks under an interleaved plan ([plan] virtual =
// v > 1, docs/pipeline.md, "Interleaved 1F1B"): pipeline rank r runs chunks
// r, r + P, ..., r + (v - 1) P, each a stage of its own - its runtime (layout,
// arenas, ZeRO state, optimizer) and its checkpoint arrays. The training loop
// (runtime/train.c) keeps chunk 0 as its model and calls these for chunks
// 1 .. v-1 beside each step it takes on chunk 0; with v = 1 they do nothing.
// The chunks share chunk 0's stream (the passes run one at a time anyway, and
// NCCL follows one stream).
#ifndef MIST_TRAIN_CHUNKS_H
#define MIST_TRAIN_CHUNKS_H
#include <stddef.h>
#include <stdint.h>
#include "base/schema.h"
#include "runtime/checkpoint.h"
#include "runtime/grid.h"
#include "runtime/model_runtime.h"
#include "runtime/pipeline_run.h"

typedef struct {
    int v, P;                                  // chunks per rank, pipeline ranks
    ModelRuntime *r[PIPE_MAX_CHUNKS];          // r[0]: the loop's own model; r[1 .. v-1] owned here
    Grid grid[PIPE_MAX_CHUNKS];                // each chunk's stage, blocks and neighbours (grid_chunk)
    // checkpoint arrays of chunks 1 .. v-1 as train.c keeps chunk 0's: 3 x Pp and 3 x Pglobal floats
    float *host_state[PIPE_MAX_CHUNKS], *global_state[PIPE_MAX_CHUNKS];
    CkptTensor *ct[PIPE_MAX_CHUNKS];
} TrainChunks;

// Before chunk 0's layout (collective-free): v, P, r[0] = r0, and r0 marked as
// an interleaved chunk (mr_set_interleaved). Then chunks_layout lays out the
// others like chunk 0 (their [stage.N], this rank's dp and tp index). 0, or 2
// with err (a config error).
void chunks_begin(TrainChunks *c, ModelRuntime *r0, const Plan *plan);
// comm: the path of the pipeline's messages (with 2 pipeline ranks they need tags, which NCCL has not).
int chunks_layout(TrainChunks *c, const MistConfig *cfg, const Grid *grid, const struct CommBackend *comm, char *err,
                  size_t errlen);
// Their arenas (after chunk 0's), sharing chunk 0's stream; their predicted
// peaks added to *dev and *host (a rank's chunks hold their arenas together).
// 0, or 1 with err.
int chunks_plan_memory(TrainChunks *c, Backend *be, int64_t *dev, int64_t *host, char *err, size_t errlen);
// Communicators, initial weights (seeded per tensor: the same as any plan's),
// [init] from, the optimizer as chunk 0's (r[0]'s opt already set). 0, or 1 with err.
int chunks_init(TrainChunks *c, const MistConfig *cfg, char *err, size_t errlen);
// The checkpoint arrays; ct[j] is filled by the caller. 0, or 1 (out of memory).
int chunks_alloc_state(TrainChunks *c);
// Resume: every chunk reads its tensors of the checkpoint at path (the one
// chunk 0 loaded) and takes its tp, then dp shard. 0, or -1 with err.
int chunks_resume(TrainChunks *c, const char *path, const ModelConfig *m, char *err, size_t errlen);
// Checkpoint gather: each chunk's whole tensors on its dp 0 ranks
// (zero_collect, mr_tp_gather to tp rank 0), as gather_whole_state for chunk 0.
void chunks_gather(TrainChunks *c);
void chunks_flush(TrainChunks *c);
void chunks_clear_grads(TrainChunks *c);
void chunks_schedule_step(TrainChunks *c, float lr, float scale);
// arena peaks of chunks 1 .. v-1 together
int64_t chunks_device_peak(const TrainChunks *c);
int64_t chunks_host_peak(const TrainChunks *c);
void chunks_free(TrainChunks *c);

#endif
