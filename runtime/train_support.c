// What this training runtime executes: the search's limits under [plan] mode = auto, and the
// checks a fixed plan and the environment get before anything starts (runtime/train.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "planner/search.h"
#include "runtime/grid.h"
#include "runtime/train.h"

void train_runtime_limits(SearchLimits *lim) {
    memset(lim, 0, sizeof *lim);
    lim->max_stages = 0;     // any: 1F1B pipeline (runtime/pipeline_run.c)
    lim->max_tp = 0;         // any: tensor parallelism (the config checks that tp divides heads, kv_heads, ffn)
    lim->max_tp_staged = 0;  // any, inside pipeline stages too
    lim->interleave_min_ranks = 3;  // interleaved 1F1B: 2 pipeline ranks cannot run it over NCCL (train_chunks.c)
}

// Keep in step with train_runtime_limits().
// Any mesh in any stage runs: tp > 1 inside pipeline stages too (the stages'
// meshes may differ, see docs/pipeline.md).
int train_check_supported(const MistConfig *cfg, const Grid *grid, char *err, size_t errlen) {
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
