// A parallel plan: how many micro-batches, and per pipeline stage which
// layers, which device mesh and which memory savers. The planner writes it,
// the config reader parses it ([plan] + [stage.N] sections), every rank
// receives it by MPI_Bcast as plain bytes (so: no pointers in here).
#ifndef MIST_PLAN_H
#define MIST_PLAN_H

#define MIST_MAX_STAGES 64
// [stage.N] keys a stage may have (config_keys.c has 10): room for the knobs to come
#define MIST_MAX_STAGE_KEYS 32

// The carrier of one stage's knobs: the config reader, plan files, the cost
// model (StageConfig, planner/stage_model.h), the search's rows and the runtime's
// layout all take a stage by this struct. A new per-stage knob is a field
// here plus a [stage.N] row in base/config_keys.c (which gives it its key,
// range, plan-file line and summary column) and, when the cost model sees
// it, a symbol row in planner/stage_model.h (docs/architecture.md has the recipe).
typedef struct {
    int layers;   // transformer blocks in this stage (consecutive)
    int dp;       // data-parallel degree of the stage's mesh
    int tp;       // tensor-parallel degree (innermost rank dimension, inside a node)
    int b;        // micro-batch size per DP rank
    int zero;     // the sharding code (base/paro.h): 0..3 = ZeRO 0..3 (0 none, 1 optimizer state, 2 + grads,
                  // 3 + weights sharded over dp), 4..9 the PaRO points with an intra-group (I) scope
    int shard_group;  // g of the I scope: consecutive dp ranks per group; 0 = the dp ranks of one node
    int ckpt;     // how many of the stage's blocks recompute activations in backward (the last ckpt)
    int sp;       // 1: sequence parallelism over the tp group (norms, residuals on T/tp rows; docs/tensor-parallel.md)
    int recompute;  // RECOMPUTE_SELECTIVE: the blocks not checkpointed recompute their attention core
    int lean;     // 1: memory-lean layers, GELU and norm backward from their outputs (docs/lean-layers.md)
    double wo, go, oo, ao;  // fraction of weights, grads, optimizer state, saved activations on the host
} StagePlan;

// [stage.N] recompute: what the blocks that are not checkpointed (ckpt) recompute
enum { RECOMPUTE_NONE = 0, RECOMPUTE_SELECTIVE = 1 };

typedef struct {
    int G;           // gradient-accumulation steps (micro-batches per iteration)
    int num_stages;  // pipeline stages (model chunks when virtual_chunks > 1)
    int virtual_chunks;  // [plan] virtual: model chunks per pipeline rank (interleaved 1F1B); 0 or 1 = plain 1F1B
    StagePlan stage[MIST_MAX_STAGES];
} Plan;

// model chunks per pipeline rank: 1 for plain 1F1B (a zero-initialised Plan included)
static inline int plan_virtual(const Plan *p) { return p->virtual_chunks > 1 ? p->virtual_chunks : 1; }

// the most ranks a plan may need (checked when a plan is loaded or validated, so
// that plan_world_size's int sum cannot overflow: 64 stages x dp 2^20 x tp 1024
// would)
#define MIST_MAX_RANKS (1 << 20)

// pipeline ranks P: the stages, or with virtual = v the chunks / v (chunk c runs on
// pipeline rank c mod P, so chunks c and c + P share their ranks)
static inline int plan_pipeline_size(const Plan *p) { return p->num_stages / plan_virtual(p); }

// ranks a plan needs: sum of dp*tp over the first P stages (chunks), each
// pipeline rank's mesh once (a validated plan: <= MIST_MAX_RANKS)
static inline int plan_world_size(const Plan *p) {
    int n = 0;
    for (int i = 0; i < plan_pipeline_size(p); i++) n += p->stage[i].dp * p->stage[i].tp;
    return n;
}

// first block index of stage s
static inline int plan_first_layer(const Plan *p, int s) {
    int l = 0;
    for (int i = 0; i < s; i++) l += p->stage[i].layers;
    return l;
}

#endif
