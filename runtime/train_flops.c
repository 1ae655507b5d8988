// Per-iteration FLOPs of the running plan, for MFU and HFU in the log.
//
// MFU = model FLOPs / (seconds * ranks * peak), model FLOPs in Megatron's
// convention (models/model_flops.h: model_flops_per_iteration). HFU counts what the
// kernels execute instead: recomputed forwards of checkpointed blocks, and
// causal attention computing only half of the score matrix that Megatron's
// formula counts, so HFU can be below MFU when nothing is recomputed.
#include "runtime/train_flops.h"
#include <stdio.h>
#include <string.h>
#include "planner/analyze.h"
#include "models/model_flops.h"
#include "base/profile.h"
#include "base/config_load.h"

int train_flops_init(TrainFlops *f, const MistConfig *cfg, int world, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    f->world = world;
    f->model_flops = model_flops_per_iteration(cfg);
    f->hw_flops = f->model_flops;
    HwProfile hw;
    if (config_profile(cfg, &hw, err, errlen) != 0) return -1;
    static PlanAnalysis an;  // large: not on the stack
    if (plan_analyze(&an, cfg, &cfg->plan.plan, &hw, NULL, err, errlen) != 0) return -1;
    f->hw_flops = an.hw_flops;
    f->peak_flops = an.peak_flops;
    f->predicted_seconds = an.iteration_seconds;
    f->staged_collectives = hw.staged_collectives;
    snprintf(f->hardware, sizeof f->hardware, "%s", hw.name);
    f->capacity = an.capacity;
    if (!an.all_fit) {
        const StageAnalysis *s = &an.stage[an.first_bad];
        if (s->shortfall)
            snprintf(f->misfit, sizeof f->misfit, "stage %d needs %lld device bytes per rank, the profile has %lld",
                     an.first_bad, (long long)s->peak, (long long)an.capacity);
        else
            snprintf(f->misfit, sizeof f->misfit, "stage %d needs %lld host bytes per rank, its share of the node is %lld",
                     an.first_bad, (long long)s->host, (long long)an.host_capacity);
    }
    return 0;
}

void train_flops_rates(const TrainFlops *f, double seconds, double *tflops_per_device, double *mfu, double *hfu) {
    double per_device = seconds > 0 && f->world > 0 ? 1.0 / (seconds * f->world) : 0;
    *tflops_per_device = f->model_flops * per_device / 1e12;
    *mfu = f->peak_flops > 0 ? f->model_flops * per_device / f->peak_flops : 0;
    *hfu = f->peak_flops > 0 ? f->hw_flops * per_device / f->peak_flops : 0;
}
