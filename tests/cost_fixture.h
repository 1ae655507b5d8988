// The tiny model and stage configurations the cost model's tests build on
// (tests/test_cost.c: time terms and evaluation; tests/test_cost_memory.c:
// memory terms).
#ifndef MIST_TEST_COST_FIXTURE_H
#define MIST_TEST_COST_FIXTURE_H
#include <stdio.h>
#include <string.h>
#include "base/profile.h"
#include "models/model.h"
#include "planner/stage_model.h"
#include "tests/tap.h"

// a 4-block GPT, hidden 64, 4 heads, vocab 256, seq 32, on one node of 8
static inline void tiny_config(MistConfig *c, Precision prec) {
    memset(c, 0, sizeof *c);
    snprintf(c->source, sizeof c->source, "test");
    c->model = model_family_config(FAMILY_GPT, 4, 64, 4, 256, 32);
    c->train.global_batch = 8;
    c->train.precision = prec;
    c->cluster.nodes = 1;
    c->cluster.gpus_per_node = 8;
}

static inline StageConfig stage(int L, int b, int dp, int tp, int zero, int ckpt, int G, int p) {
    StageConfig s = {{.layers = L, .dp = dp, .tp = tp, .b = b, .zero = zero, .ckpt = ckpt}, G, p};
    return s;
}

// m built for a stage holding the pre / post parts: 1; or a failed check naming
// `what` and the error, and 0
static inline int cost_model_built(StageModel *m, const MistConfig *cfg, const HwProfile *hw, int has_pre,
                                   int has_post, const char *what) {
    char err[256];
    if (stage_model_build(m, cfg, hw, NULL, has_pre, has_post, err, sizeof err) == 0) return 1;
    ok(0, "%s model builds: %s", what, err);
    return 0;
}

// the tiny model in bf16 on the gcp-a100-80g preset, as every test takes them
static inline void cost_fixture(MistConfig *cfg, HwProfile *hw) {
    tiny_config(cfg, PREC_BF16);
    profile_preset(hw, "gcp-a100-80g");
}

#endif
