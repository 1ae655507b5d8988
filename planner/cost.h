// The cost and memory model of one pipeline stage (DESIGN.md §4-§5), written
// as symbolic expressions of the stage's configuration so the search can
// evaluate hundreds of thousands of candidates in one batched pass.
//
//   cost.c      per-op compute time (roofline or measured table), collective
//               and host-copy transfer sizes and times, the stage symbols
//   overlap.c   the interference window rule (scalar and symbolic)
//   schedule.c  per-block phases, first/last micro-batch, stage t and d,
//               the 1F1B pipeline total
//   memory.c    per-stage memory: states, buffers, activations, peaks
#ifndef MIST_COST_H
#define MIST_COST_H

#include <stddef.h>
#include <stdint.h>
#include "models/model.h"
#include "expr/expr.h"
#include "planner/optable.h"
#include "core/profile.h"
#include "core/schema.h"

// ---- a stage's configuration as the model sees it: the stage's knobs (the
// carrier StagePlan, core/plan.h) and what the pipeline adds
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
    X(SYM_WS, "ws", (c)->plan.zero >= 3)  /* 1 when weights are sharded over dp (ZeRO-3) */               \
    X(SYM_GS, "gs", (c)->plan.zero >= 2)  /* 1 when grads are sharded (ZeRO-2, 3) */                      \
    X(SYM_OS, "os", (c)->plan.zero >= 1)  /* 1 when optimizer state is sharded (ZeRO-1, 2, 3) */          \
    X(SYM_CKPT, "ckpt", (c)->plan.ckpt)   /* checkpointed blocks (the last ckpt of the stage) */          \
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
    ST_OUTPUTS
} StageOutput;

extern const char *const stage_output_names[ST_OUTPUTS];

// Per-part symbolic quantities the model description provides: cost.c copies
// the op list of models/ops.h (model_build) with s and eb fixed for the
// config, and takes params and activations from models/model.h. Bytes and
// elements are per TP rank.
#define PART_MAX_OPS 48
typedef struct {
    char name[32];
    Expr fwd_flops, bwd_flops;  // FLOPs the kernels execute (ModelOp hw_flops_*)
    Expr fwd_bytes, bwd_bytes;  // bytes read + written
    int matmul;                   // runs at the matmul efficiency (else bandwidth-bound elementwise)
} OpExprs;

typedef struct {
    int n_ops;
    OpExprs op[PART_MAX_OPS];
    Expr params;          // parameter elements per TP rank
    Expr saved;           // bytes kept for backward (not checkpointed)
    Expr saved_ckpt;      // bytes kept when checkpointed (the block input)
    Expr transient_fwd;   // bytes of forward temporaries beyond the saved set
    Expr transient_bwd;   // bytes of backward temporaries (input/output grads, workspaces)
    Expr output;          // bytes of the part's output activation
    Expr tp_comm_fwd;     // bytes all-reduced over TP in forward (0 at tp = 1)
    Expr tp_comm_bwd;     // bytes all-reduced over TP in backward
} PartExprs;

// Activation bytes of a part at one tp level, per TP rank, in the classes the
// runtime sorts them into (memory.c): the block input X, the rest R kept for
// backward (and each of R's tensors, for the offload scan), scratch, gradient
// workspaces, logits and losses. They depend on the model, the sequence and
// the element size only, so they are tabulated once per configuration.
#define MEM_TP_LEVELS 7  // tp = 1, 2, 4, ..., 64; larger tp uses the last level
enum { AC_X, AC_REST, AC_SCRATCH, AC_GRADS, AC_LOGITS, AC_LOSSES, AC_OFFLOAD, AC_COUNT };
typedef struct {
    double at_b[2][AC_COUNT];  // bytes at b = 1 and b = 2 (AC_OFFLOAD unused here)
    int n_rest;
    double rest_b[2][MODEL_MAX_ACTS];  // each saved tensor of R, at b = 1 and 2
    int valid;                         // the model splits over this tp
} ActLevel;
void memory_act_levels(const ModelConfig *m, ModelPart part, int elt, ActLevel out[MEM_TP_LEVELS]);

// The model's symbolic parts for one configuration (cost.c).
typedef struct {
    PartExprs pre, block, post;
    ActLevel acts_block[MEM_TP_LEVELS], acts_post[MEM_TP_LEVELS];  // memory_act_levels
    int param_bytes;       // 2 (bf16/fp16) or 4 (fp32)
    int grad_bytes;        // bytes per gradient element
    int optimizer_bytes;   // 12 (fp32 master + m + v) or 8 (m + v, fp32 training)
    ComputeDtype compute;
} ModelExprs;

// Bytes per parameter of the model states: weight, gradient and optimizer
// state (bf16/fp16 training: 2 + 2 + 12, the optimizer keeping an fp32
// master copy and Adam's m, v; fp32 training: 4 + 4 + 8).
void cost_state_bytes(Precision precision, int *param, int *grad, int *optimizer);

int model_exprs_build(ModelExprs *me, ExprCtx *x, const MistConfig *cfg, char *err, size_t errlen);

// A discrete pattern of stage configurations: the ZeRO level and which
// offload ratios are nonzero. The search evaluates one program per pattern, so
// a model specialised to a pattern has the ZeRO flags and the zero ratios as
// constants: absent streams (no weight gathers under ZeRO-0, no host copies
// without offload) and zero terms fold away when the model is built.
typedef struct {
    int zero;                // 0..3
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

// ---- building blocks, shared by schedule.c and memory.c

// Symbols and their common derived terms for one stage.
typedef struct {
    ExprCtx *x;
    const HwProfile *hw;
    const OpTable *table;
    const MistConfig *cfg;
    const ModelExprs *me;
    Expr s[STAGE_SYMS];
    Expr zero, one;
    Expr wshard, gshard, oshard;  // divisors: dp when that state is sharded, else 1
    int has_pre, has_post;
} StageBuild;

Expr cost_part_compute_fwd(StageBuild *sb, const PartExprs *part);  // s, roofline or table
Expr cost_part_compute_bwd(StageBuild *sb, const PartExprs *part);
Expr cost_part_flops(StageBuild *sb, const PartExprs *part, int backward);
// ring collective over the stage's DP group (DP spans nodes first) or TP group (inside a node)
Expr cost_dp_collective(StageBuild *sb, CollKind kind, Expr bytes);
// With staged collectives (HwProfile.staged_collectives): the device->host copy of what
// a DP collective of `bytes` (the whole buffer) sends and the host->device copy of what it
// receives; 0 for a group of one
Expr cost_dp_collective_copies(StageBuild *sb, CollKind kind, Expr bytes);
Expr cost_tp_collective(StageBuild *sb, CollKind kind, Expr bytes);
Expr cost_p2p(StageBuild *sb, Expr bytes);  // one pipeline send between neighbouring stages
Expr cost_h2d(StageBuild *sb, Expr bytes);
Expr cost_d2h(StageBuild *sb, Expr bytes);
Expr cost_optimizer_step(StageBuild *sb, Expr params_stepped);  // memory-bound Adam step
// ceil(elems / divisor) * bytes_per_elem
Expr cost_shard_bytes(StageBuild *sb, Expr elems, Expr divisor, int bytes_per_elem);
Expr cost_ge(StageBuild *sb, Expr a, Expr b);  // 1 if a >= b (integers) else 0
Expr cost_gt0(StageBuild *sb, Expr a);          // 1 if a > 0 else 0
// value_at[i] for sym = 2^i (i < n), the last for larger values: a chain of
// selects against constant thresholds, which a compiled program runs as one
// lookup instruction where the values are constants
Expr cost_select_power_of_two(ExprCtx *x, Expr sym, const Expr *value_at, int n);
// Bytes per power-of-two tp level (n levels), affine in b through (1, at1[l])
// and (2, at2[l]); 1e30 (never fits) where valid[l] is 0
Expr cost_bytes_by_tp(ExprCtx *x, Expr b, Expr tp, const double *at1, const double *at2, const int *valid, int n);

// schedule.c: fills ST_T, ST_D, ST_FWD_*, ST_BWD_*
void schedule_build(StageBuild *sb, Expr out[ST_OUTPUTS]);
// memory.c: fills the memory outputs
void memory_build(StageBuild *sb, Expr out[ST_OUTPUTS]);

// ---- scalar pieces with hand-checkable forms
// overlap window rule (overlap.c); x[s] = seconds of work on stream s
double overlap_seconds(const HwProfile *p, const double x[STREAM_COUNT]);
// the same rule symbolically; NULL = no work on that stream
Expr overlap_expr(ExprCtx *x, const HwProfile *p, const Expr streams[STREAM_COUNT]);
// 1F1B total over S stages: (G-1)*max t + sum t + max(0, max_i(d_i - sum_{j<i} t_j))
double pipeline_1f1b_seconds(int S, int G, const double *t, const double *d);

// ---- model FLOPs (Megatron convention, DESIGN.md §6): per iteration
double model_flops_per_iteration(const MistConfig *cfg);
// the dtype whose peak the matmuls run at: [train] precision's
ComputeDtype compute_dtype_of(const MistConfig *cfg);

#endif
