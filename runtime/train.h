// Training entry point: everything after the config is validated and the
// process grid is built.
#ifndef MIST_TRAIN_H
#define MIST_TRAIN_H
#include "base/schema.h"

struct Grid;
struct SearchLimits;

// What this runtime executes, for the planner's search under [plan] mode = auto
// (today every plan: any stages, dp x tp per stage, ZeRO level, offload ratios
// and checkpointing; interleaving with at least 3 pipeline ranks).
// train_check_supported() enforces the same limits on a fixed plan and checks the
// environment; change both together (runtime/train_support.c).
void train_runtime_limits(struct SearchLimits *lim);
// 0, or an exit code (2: configuration) with the reason in err.
int train_check_supported(const MistConfig *cfg, const struct Grid *grid, char *err, size_t errlen);

// Exit code of a run stopped early by SIGUSR1 / SIGTERM after writing a
// checkpoint (runtime/stop_signal.h): a job script can requeue on it.
#define MIST_EXIT_STOPPED 5

// Runs cfg->train.steps iterations (or resumes) on this rank's part of the grid.
// Returns the process exit code: 0 on success, 2 on a config/plan error,
// MIST_EXIT_STOPPED after a stop signal, 1 otherwise.
// Collective: every rank of the grid calls it.
int mist_train_run(const MistConfig *cfg, const struct Grid *grid);

#endif
