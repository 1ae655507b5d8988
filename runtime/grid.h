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
#include "planner/plan.h"

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
// world rank `rank` under `plan` (fields world_rank, stage.., prev/next_rank,
// first_layer, num_layers, stage_first_rank). Returns 0, or -1 with a message
// in err when rank is outside the plan.
int grid_layout(Grid *g, const Plan *plan, int rank, char *err, size_t errlen);

// Pipeline neighbour of a rank with flat in-stage index `flat` (dp_index*tp +
// tp_index) in stage `from`, inside stage `to`: the world rank it exchanges
// activations with. -1 when `to` is outside the plan.
int grid_peer_rank(const Plan *plan, int from, int flat, int to);

// Collective over the backend's world group. Fills the layout for this rank,
// host/local rank/device from the launcher (launch.h), and creates the world,
// dp and tp groups. The plan must need exactly the world size.
// Returns 0, or 2 (= config error) with a message in err (same on every rank).
int grid_build(Grid *g, const Plan *plan, const struct CommBackend *comm, char *err, size_t errlen);
void grid_free(Grid *g);

// Collective over the world group: rank 0 prints one row per rank
// (rank, host, local rank, device, stage, dp index, tp index, layers).
void grid_print_table(const Grid *g, FILE *f);

#endif
