// The process grid: where this rank sits in the plan (pipeline stage, data-
// and tensor-parallel index), which blocks it runs, its pipeline neighbours,
// and the communicators of the groups it belongs to.
//
// Rank layout (world ranks):
//   stages take consecutive rank ranges, in stage order;
//   inside stage s, rank = stage_first_rank(s) + dp_index * tp + tp_index
//   (tp innermost, so a TP group is a run of adjacent ranks, i.e. one node).
// Stages may use different meshes (dp x tp); see grid.c for how pipeline
// neighbours are paired then.
#ifndef MIST_GRID_H
#define MIST_GRID_H

#include <stddef.h>
#include <stdio.h>
#include "base/plan.h"

struct CommBackend;
struct CommGroup;

typedef struct Grid {
    int world_rank, world_size, local_rank, local_size;
    char host[64];
    int stage, num_stages;           // this rank's pipeline stage
    int dp_index, dp_size, tp_index, tp_size;
    int first_layer, num_layers;     // this stage's blocks
    int stage_first_rank;            // world rank of (dp 0, tp 0) of this stage
    int prev_rank, next_rank;        // pipeline neighbours (world ranks) or -1 at the ends
    const struct CommBackend *comm;  // the comm backend (MPI now, NCCL later)
    struct CommGroup *world, *dp, *tp;  // groups this rank belongs to
    char device[32];                 // "cpu" or "cuda:N"
} Grid;

// Pure layout, no communication: the stage/dp/tp indices and neighbours of
// world rank `rank` under `plan` (world_rank, world_size, stage, num_stages,
// dp/tp index and size, first_layer, num_layers, stage_first_rank,
// prev/next_rank; the rest untouched). Returns 0, or 2 with a message in err
// when the plan is malformed or `rank` is outside it.
int grid_layout(Grid *g, const Plan *plan, int rank, char *err, size_t errlen);

// Pipeline pairing between stages whose meshes may differ: the rank of stage
// `to` that a rank at (dp_index, tp_index) of a neighbouring stage exchanges
// activations with, i.e. (dp_index mod dp_to, tp_index mod tp_to) of stage
// `to`. -1 when `to` is not a stage of the plan. See grid.c for why.
int grid_peer_rank(const Plan *plan, int dp_index, int tp_index, int to);

// Interleaved plans ([plan] virtual = v > 1, docs/pipeline.md): a rank's grid
// describes its pipeline rank r = stage (< P) and chunk r; its chunk j (0 .. v-1)
// is chunk r + j P, on the same ranks and groups. out = g with that chunk's
// stage, blocks and pipeline neighbours (j = 0: g itself).
void grid_chunk(const Grid *g, const Plan *plan, int j, Grid *out);

// Checks a plan's shape (stage count, dp/tp/layers >= 1). 0, or 2 with a message.
int grid_check_plan(const Plan *plan, char *err, size_t errlen);

// Collective over every rank of the job; launch_init (launch.h) must have run.
// Fills the layout of this rank, host/local rank/device from the launch, and
// creates the world, dp and tp groups with `comm`. The plan must need exactly
// the job's rank count. Returns 0; 2 (config error) when the plan does not fit
// the job (same message on every rank); 1 when the comm backend failed.
int grid_build(Grid *g, const Plan *plan, const struct CommBackend *comm, char *err, size_t errlen);
void grid_free(Grid *g);

// Collective over the world group: rank 0 prints one row per rank
// (rank, host, local rank, device, stage, dp index, tp index, layers).
void grid_print_table(const Grid *g, FILE *f);
// The same table for every rank of `plan` computed without launching it (a
// single-process --dry-run of a multi-rank plan): host and local rank are
// unknown and printed as "-". 0, or 2 with a message for a malformed plan.
int grid_print_plan_table(const Plan *plan, FILE *f, char *err, size_t errlen);

#endif
