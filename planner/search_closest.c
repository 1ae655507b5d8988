// The closest plan when nothing fits (search_internal.h): what a user needs to
// know to change the cluster, the batch or the space.
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "planner/search_internal.h"

// A stage of l blocks on mesh me at ZeRO level z with ckpt, sequence parallelism sp, each ratio of
// offload pattern mask at 1.
static StagePlan least_memory_stage(int l, const Mesh *me, int b, int z, int ckpt, int sp, int mask) {
    return (StagePlan){.layers = l, .dp = me->dp, .tp = me->tp, .b = b, .zero = z, .ckpt = ckpt, .sp = sp, .wo = mask & 1,
                       .go = (mask >> 1) & 1, .oo = (mask >> 2) & 1, .ao = (mask >> 3) & 1};
}

// Nothing fits: per (S, G, mesh), a balanced split with every stage at its
// least-memory choice (highest allowed ckpt; of every ZeRO level and offload
// pattern with its ratios at the maximum, the lowest peak); the plan whose
// worst stage misses by the least.
int search_closest_plan(Search *s, SearchResult *r) {
    r->have_closest = 0;
    int64_t best_short = INT64_MAX;
    for (int S = 1; S <= s->L && S <= MIST_MAX_STAGES; S++) {
        if (!space_stage_count_ok(s, S)) continue;
        Mesh meshes[SEARCH_MAX_MESHES];
        int nm = space_meshes(s, s->N / S, meshes, SEARCH_MAX_MESHES);
        for (int G = 1; G <= s->B; G++) {
            if (s->B % G) continue;
            for (int mi = 0; mi < nm; mi++) {
                int64_t per = (int64_t)G * meshes[mi].dp;
                if (s->B % per) continue;
                Plan pl;
                memset(&pl, 0, sizeof pl);
                pl.G = G;
                pl.num_stages = S;
                int64_t worst = INT64_MIN;
                int worst_stage = 0, worst_host = 0;
                for (int i = 0; i < S; i++) {
                    int l = s->L / S + (i >= S - s->L % S);  // the extra blocks go to the last stages (fewer in flight)
                    int ck = s->rules.no_ckpt ? 0 : l;
                    int seq = s->rules.sp && meshes[mi].tp > 1;  // saved activations at 1/tp
                    // the (ZeRO, offload corner) whose larger excess, of device or of host memory,
                    // is the least
                    int64_t stage_short = INT64_MAX;
                    int best_z = 0, best_mask = 0, best_host = 0;
                    for (int z = 0; z < SHARD_CODES; z++) {
                        if (!(s->rules.zero_mask >> z & 1) || !space_code_ok(s, z, meshes[mi].dp, meshes[mi].tp))
                            continue;
                        for (int mask = 0; mask < (s->rules.offload && z < SHARD_ZERO_CODES ? 16 : 1); mask++) {
                            StageModel *m = stage_model_get(s, stage_kind(i, S), z, mask);
                            if (!m || search_reserve(s, 1) != 0) return -1;
                            StagePlan sp = least_memory_stage(l, &meshes[mi], (int)(s->B / per), z, ck, seq, mask);
                            search_set_row(s, 0, &sp, G, stage_p(i, S, G));
                            search_eval(s, m, 1, EVAL_PEAKS);
                            int64_t dev = (int64_t)ceil(fmax(s->outs[ST_PEAK_FWD][0], s->outs[ST_PEAK_BWD][0])) -
                                          s->capacity;
                            int64_t host = s->host_capacity > 0 ? (int64_t)ceil(s->outs[ST_HOST][0]) - s->host_capacity
                                                                : INT64_MIN;
                            int64_t worse = dev >= host ? dev : host;
                            if (worse < stage_short) stage_short = worse, best_z = z, best_mask = mask, best_host = host > dev;
                        }
                    }
                    pl.stage[i] = least_memory_stage(l, &meshes[mi], (int)(s->B / per), best_z, ck, seq, best_mask);
                    if (stage_short > worst) worst = stage_short, worst_stage = i, worst_host = best_host;
                }
                if (worst < best_short) {
                    best_short = worst;
                    r->have_closest = 1;
                    r->closest = pl;
                    r->closest_stage = worst_stage;
                    r->shortfall = worst;
                    r->closest_host = worst_host;
                }
            }
        }
    }
    return 0;
}
