// Training entry point: everything after the config is validated and the
// process grid is built.
#ifndef MIST_TRAIN_H
#define MIST_TRAIN_H
#include "runtime/config.h"

struct Grid;

// Runs cfg->train.steps iterations (or resumes) on this rank's part of the grid.
// Returns the process exit code: 0 on success, 2 on a config/plan error, 1 otherwise.
// Collective: every rank of the grid calls it.
int mist_train_run(const MistConfig *cfg, const struct Grid *grid);

#endif
