// The stage model (docs/design.md §4-§5): the time and memory of one pipeline
// stage as symbolic expressions of its configuration, compiled so the search
// can evaluate hundreds of thousands of candidates in one batched pass, or
// evaluated one configuration at a time (mist-plan --analyze).
//
//   stage_model.c  the model's parts from models/, assembly, evaluation
//   cost_terms.c   the terms it is built from (planner/cost_terms.h):
//                  per-op compute time, collective and host-copy times
//   overlap.c      the interference window rule (scalar and symbolic)
//   schedule.c     per-block phases, first/last micro-batch, stage t and d,
//                  the 1F1B pipeline total
//   memory.c       per-stage memory: states, buffers, activations, peaks
#ifndef MIST_STAGE_MODEL_H
#define MIST_STAGE_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "expr/expr.h"
#include "planner/optable.h"
#include "base/paro.h"
#include "base/profile.h"
#include "base/schema.h"

// ---- a stage's configuration as the model sees it: the stage's knobs (the
// carrier StagePlan, base/plan.h) and what the pipeline adds
typedef struct {
    StagePlan plan;  // layers, mesh, micro-batch, ZeRO, ckpt, offload ratios
    int G;           // micro-batches per iteration
    int p;           // extra micro-batches in flight, min(S - i - 1, G - 1)
} StageConfig;

// The symbols of a stage configuration, one row each: X(enum, name as
// registered in ExprCtx, its value for StageConfig *c). The enum, the names
// (stage_sym_names) and the values (stage_sym_values: scalar evaluation and
// the search's batch rows) all come from these rows, so a knob the model
// sees is a field in StagePlan and one row here.
#define STAGE_SYM_TABLE(X, c)                                                                             \
    X(SYM_B, "b", (c)->plan.b)            /* micro-batch size per DP rank */                              \
    X(SYM_DP, "dp", (c)->plan.dp)                                                                         \
    X(SYM_TP, "tp", (c)->plan.tp)                                                                         \
    X(SYM_WS, "ws", shard_code_scope((c)->plan.zero, STATE_W) == SCOPE_G) /* 1: weights sharded over dp (ZeRO-3) */ \
    X(SYM_GS, "gs", shard_code_scope((c)->plan.zero, STATE_G) == SCOPE_G) /* 1: grads sharded (ZeRO-2, 3) */  \
    X(SYM_OS, "os", shard_code_scope((c)->plan.zero, STATE_O) == SCOPE_G) /* 1: optimizer state sharded (1-3) */ \
    X(SYM_WI, "wi", shard_code_scope((c)->plan.zero, STATE_W) == SCOPE_I) /* 1: weights sharded in a group (PaRO) */ \
    X(SYM_GI, "gi", shard_code_scope((c)->plan.zero, STATE_G) == SCOPE_I) /* the same for grads */          \
    X(SYM_OI, "oi", shard_code_scope((c)->plan.zero, STATE_O) == SCOPE_I) /* and optimizer state */         \
    X(SYM_SG, "sg", (c)->plan.shard_group) /* g of the I scope; 0 = the dp ranks of one node */            \
    X(SYM_CKPT, "ckpt", (c)->plan.ckpt)   /* checkpointed blocks (the last ckpt of the stage) */          \
    X(SYM_SP, "sp", (c)->plan.sp)         /* 1: sequence parallelism over the tp group */                 \
    X(SYM_SEL, "sel", (c)->plan.recompute == RECOMPUTE_SELECTIVE) /* 1: attention core recomputed */  \
    X(SYM_LEAN, "lean", (c)->plan.lean)   /* 1: memory-lean layers (docs/lean-layers.md) */               \
    X(SYM_WO, "wo", (c)->plan.wo)         /* "wo", "go", "oo", "ao": offload ratios in [0, 1] */          \
    X(SYM_GO, "go", (c)->plan.go)                                                                         \
    X(SYM_OO, "oo", (c)->plan.oo)                                                                         \
    X(SYM_AO, "ao", (c)->plan.ao)                                                                         \
    X(SYM_G, "G", (c)->G)                 /* micro-batches per iteration */                               \
    X(SYM_P, "p", (c)->p)                 /* extra micro-batches in flight, min(S - i - 1, G - 1) */      \
    X(SYM_L, "L", (c)->plan.layers)       /* blocks in the stage */

typedef enum {
#define STAGE_SYM_ENUM(sym, name, value) sym,
    STAGE_SYM_TABLE(STAGE_SYM_ENUM, _)
#undef STAGE_SYM_ENUM
    STAGE_SYMS
} StageSym;

extern const char *const stage_sym_names[STAGE_SYMS];

// The value of every stage symbol for configuration c.
static inline void stage_sym_values(const StageConfig *c, double v[STAGE_SYMS]) {
#define STAGE_SYM_VALUE(sym, name, value) v[sym] = (double)(value);
    STAGE_SYM_TABLE(STAGE_SYM_VALUE, c)
#undef STAGE_SYM_VALUE
}

// ---- outputs of a stage model (all per rank of the stage)
typedef enum {
    ST_T,              // s: steady-state time per micro-batch (fwd + bwd)
    ST_D,              // s: extra time of the first fwd + last bwd micro-batch
    ST_PEAK_FWD,       // bytes: device memory peak during forward (memory.c has the math)
    ST_PEAK_BWD,       // bytes: device memory peak during backward
    ST_WEIGHTS,        // bytes: resident (device) weights of the stage's blocks, pre, post (+ tied wte copy)
    ST_GRADS,          // bytes: resident gradient buffers
    ST_OPTIMIZER,      // bytes: resident optimizer state (fp32 master + m + v, or m + v)
    ST_ACTIVATIONS,    // bytes: activations kept at the fwd->bwd turn ((p + 1) micro-batches; head on the last stage)
    ST_BUFFERS_FWD,    // bytes: persistent buffers: staging, swap buffers, token/loss I/O (p + 1 token slots)
    ST_BUFFERS_BWD,    // bytes: the same buffers (live through forward and backward)
    ST_TRANSIENT_FWD,  // bytes: at the forward peak, beyond the other outputs (last block's working set or head)
    ST_TRANSIENT_BWD,  // bytes: at the backward peak: gradient buffers + recompute or swap workspace, or head
    ST_LOGITS,         // bytes: head of the last stage: last block output, final norm, logits
    ST_HOST,           // bytes: host arena: offloaded states, activations, token/loss staging, pipeline boundary
    ST_FWD_FIRST,      // s: forward of the first micro-batch (incl. optimizer step)
    ST_FWD_OTHER,      // s: forward of another micro-batch
    ST_BWD_LAST,       // s: backward of the last micro-batch (incl. grad sync)
    ST_BWD_OTHER,      // s: backward of another micro-batch
    ST_HW_FLOPS,       // FLOPs per micro-batch per rank actually executed (recompute included)
    // s: the work of each side stream under the blocks' compute (the input of the overlap
    // rule, not its result), summed over the stage's blocks, per phase: ST_STREAMS +
    // STAGE_STREAMS * phase + stream, phase 0..3 = fwd first, fwd other, bwd last, bwd other,
    // stream 0..2 = collectives (weight gathers, gradient sync), host->device, device->host.
    // What a trace draws under compute (planner/trace_predict.h).
    ST_STREAMS,
    // s: one micro-batch's compute on the critical path (its TP all-reduces
    // included) of one block's forward, backward and recomputed forward, and of
    // the pre / post parts' forward and backward (0 where the stage has none):
    // the nested events of a trace's passes (planner/trace_predict.h)
    ST_BLOCK_FWD = ST_STREAMS + 4 * 3,
    ST_BLOCK_BWD,
    ST_BLOCK_RECOMPUTE,
    ST_PRE_FWD,
    ST_PRE_BWD,
    ST_POST_FWD,
    ST_POST_BWD,
    // s: the attention core's forward that a block not checkpointed runs again before
    // its backward under selective recompute (0 without it): a nested part of the
    // trace's backward passes, before the block's backward (ST_BLOCK_BWD leaves it out)
    ST_BLOCK_RECOMPUTE_ATT,
    // s: what a lean block ([stage.N] lean, not checkpointed: docs/lean-layers.md) adds to its
    // forward (the GELU's pass with the branch bits) and backward (the GELU's inversion, the
    // norms' backward from their outputs, SwiGLU's recompute), 0 without lean: part of the
    // trace's "block N forward" / "block N backward" (ST_BLOCK_FWD / _BWD leave it out)
    ST_BLOCK_LEAN_FWD,
    ST_BLOCK_LEAN_BWD,
    ST_OUTPUTS
} StageOutput;
enum { STAGE_PHASES = 4, STAGE_STREAMS = 3 };

extern const char *const stage_output_names[ST_OUTPUTS];

// A discrete pattern of stage configurations: the ZeRO level and which
// offload ratios are nonzero. The search evaluates one program per pattern, so
// a model specialised to a pattern has the ZeRO flags and the zero ratios as
// constants: absent streams (no weight gathers under ZeRO-0, no host copies
// without offload) and zero terms fold away when the model is built.
typedef struct {
    int zero;                // the sharding code 0..9 (base/paro.h; 0..3 = ZeRO 0..3)
    int wo, go, oo, ao;      // 1: that offload ratio may be nonzero; 0: it is 0
} StagePattern;

// The pattern a configuration belongs to.
StagePattern stage_pattern_of(const StageConfig *c);
// Whether c belongs to pattern p.
int stage_pattern_has(const StagePattern *p, const StageConfig *c);
// Short name, e.g. "z3 wo ao" or "z0" (buf of at least 24 bytes).
void stage_pattern_name(const StagePattern *p, char *buf, size_t len);

// ---- a compiled stage model
typedef struct {
    ExprCtx *ctx;             // owned
    ExprProgram *prog;        // every output, compiled (NULL in a model built with STAGE_BUILD_SPLIT)
    ExprProgram *prog_time;   // STAGE_BUILD_SPLIT: ST_T and ST_D only
    ExprProgram *prog_peaks;  // STAGE_BUILD_SPLIT: ST_PEAK_FWD, ST_PEAK_BWD and ST_HOST only
    Expr out[ST_OUTPUTS];
    int sym[STAGE_SYMS];      // symbol index in ctx of each stage symbol
    int has_pre, has_post;    // first / last stage of the pipeline
    int specialised;          // built for `pattern` only (else for every configuration)
    StagePattern pattern;
} StageModel;

// Build the model of a stage (has_pre: holds the embedding; has_post: holds the
// final norm, LM head and loss). table may be NULL. Returns 0 or -1 with err.
int stage_model_build(StageModel *m, const MistConfig *cfg, const HwProfile *hw, const OpTable *table, int has_pre,
                      int has_post, char *err, size_t errlen);
// The same model specialised to one pattern (pattern NULL: general). Its
// results equal the general model's for configurations of that pattern (up
// to re-association of constants, ~1e-15 relative; d, a difference of terms
// the size of t, to ~1e-15 of t); for others they are meaningless (a
// pattern's nonzero ratios are assumed positive, and branches that only a
// zero ratio takes are folded away).
int stage_model_build_pattern(StageModel *m, const MistConfig *cfg, const HwProfile *hw, const OpTable *table,
                              int has_pre, int has_post, const StagePattern *pattern, char *err, size_t errlen);
void stage_model_free(StageModel *m);
// What every stage model of one configuration shares (the model's symbolic
// parts), built once: building many models (the search builds one per stage
// kind, ZeRO level and offload pattern) from a base skips most of the work,
// with results bitwise equal to stage_model_build_pattern's. cfg must outlive
// the base; models built from it do not need it.
typedef struct StageModelBase StageModelBase;
StageModelBase *stage_model_base_new(const MistConfig *cfg, char *err, size_t errlen);  // NULL on error
void stage_model_base_free(StageModelBase *base);
// flags: 0 compiles every output into one program; STAGE_BUILD_SPLIT compiles
// only what the search reads, as two programs: the times (t, d: ~95% of the
// work, the overlap rule) and the memory peaks (~5%), so a search that only
// asks whether a candidate fits evaluates the peaks alone. Such a model's
// stage_eval_batch computes ST_T, ST_D, ST_PEAK_FWD and ST_PEAK_BWD only
// (asking for another output aborts); stage_eval_scalar computes all.
enum { STAGE_BUILD_SPLIT = 1 };
int stage_model_build_from(StageModel *m, const StageModelBase *base, const HwProfile *hw, const OpTable *table,
                           int has_pre, int has_post, const StagePattern *pattern, unsigned flags, char *err,
                           size_t errlen);

// Evaluate every output for one configuration (tree walk, no program).
void stage_eval_scalar(const StageModel *m, const StageConfig *c, double out[ST_OUTPUTS]);

// Evaluate the compiled program over n candidates: cols[s] = n values of stage
// symbol s; out[k] = n values of output k (NULL: not wanted; a split model
// runs only the programs whose outputs are wanted).
void stage_eval_batch(const StageModel *m, const double *const cols[STAGE_SYMS], double *const out[ST_OUTPUTS], size_t n);

// 1F1B total over S stages: (G-1)*max t + sum t + max(0, max_i(d_i - sum_{j<i} t_j))
// (schedule.c)
double pipeline_1f1b_seconds(int S, int G, const double *t, const double *d);
// Interleaved 1F1B ([plan] virtual = v > 1; planner/interleave.h) over S = P v
// chunks on P ranks, t and d per chunk (S entries each), T_r = sum of the t of
// rank r's chunks r, r + P, ..., D_r of their d, B_r = sum_{q<r} T_q / v:
//   G max_r T_r + (sum_r T_r - max_r T_r) / v + max(0, max_r (D_r - B_r))
// (docs/pipeline.md derives it); v = 1 is pipeline_1f1b_seconds. (schedule.c)
double pipeline_interleaved_seconds(int P, int v, int G, const double *t, const double *d);

// Bytes per parameter of the model states: weight, gradient and optimizer
// state (bf16/fp16 training: 2 + 2 + 12, the optimizer keeping an fp32
// master copy and Adam's m, v; fp32 training: 4 + 4 + 8).
void cost_state_bytes(Precision precision, int *param, int *grad, int *optimizer);

// the dtype whose peak the matmuls run at: [train] precision's
ComputeDtype compute_dtype_of(const MistConfig *cfg);

#endif
