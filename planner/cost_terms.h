// The terms a stage model is built from (planner/stage_model.h is the
// interface): the model's symbolic parts, the stage's symbols and their
// derived terms (StageBuild), per-op compute time, collective and host-copy
// times, the overlap rule, and the builders of the stage's times
// (schedule.c) and memory (memory.c). Internal to planner/: stage_model.c
// assembles a model from them.
#ifndef MIST_COST_TERMS_H
#define MIST_COST_TERMS_H

#include "models/model.h"
#include "planner/stage_model.h"

// Per-part symbolic quantities the model description provides: stage_model.c copies
// the op list of models/ops.h (model_build) with s and eb fixed for the
// config, and takes params and activations from models/model.h. Bytes and
// elements are per TP rank.
#define PART_MAX_OPS 48
// How an op's time is modelled (cost_terms.c, docs/design.md "Compute time")
typedef enum { OPC_MEMORY, OPC_GEMM, OPC_ATTENTION } OpClass;
typedef struct {
    char name[32];
    Expr fwd_flops, bwd_flops;  // FLOPs the kernels execute (ModelOp hw_flops_*)
    Expr fwd_bytes, bwd_bytes;  // bytes read + written
    OpClass cls;
    Expr gemm_m, gemm_n, gemm_k;  // OPC_GEMM: the forward GEMM (ModelOp gemm_*)
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
// AC_SEL: the part of R a block under selective recompute does not keep (att, lse)
// AC_GATHER: sequence parallelism's gathered norm output (runtime/model_sp.h), 0 without sp
// AC_LEAN: the part of R a lean block does not keep (ln1_mean, mid, ln2_mean, and fc of a
// GELU model or act of a SwiGLU one: memory_lean_drops; docs/lean-layers.md)
enum { AC_X, AC_REST, AC_SCRATCH, AC_GRADS, AC_LOGITS, AC_LOSSES, AC_SEL, AC_GATHER, AC_LEAN, AC_OFFLOAD, AC_COUNT };
// 1: a lean block ([stage.N] lean) does not keep this saved block tensor
int memory_lean_drops(const ModelConfig *m, const ActSpec *a);
typedef struct {
    double at_b[2][AC_COUNT];  // bytes at b = 1 and b = 2 (AC_OFFLOAD unused here)
    int n_rest;
    double rest_b[2][MODEL_MAX_ACTS];  // each saved tensor of R, at b = 1 and 2
    int rest_sel[MODEL_MAX_ACTS];      // 1: that tensor is in AC_SEL (selective recompute drops it)
    int valid;                         // the model splits over this tp
} ActLevel;
void memory_act_levels(const ModelConfig *m, ModelPart part, int elt, ActLevel out[MEM_TP_LEVELS]);
// The same under sequence parallelism (model_acts_sp with sp = 1; tp = 1 is not valid)
void memory_act_levels_sp(const ModelConfig *m, ModelPart part, int elt, ActLevel out[MEM_TP_LEVELS]);
// Sequence parallelism's change to a block's classes in closed form: class c
// under sp = its value without sp - (Q_c - Q_c / tp) + E_c, Q_c the class's
// sequence-sharded bytes (the same at every tp), E_c the bytes of the tensors
// only sp has; a few operations where selecting between two level tables per
// class would double the memory program. Checked against model_acts_sp at
// every tp level when derived (affine = 0: it does not hold, the tables are
// selected instead).
typedef struct {
    int affine;
    double shard_b[2][AC_COUNT], extra_b[2][AC_COUNT];  // Q_c and E_c at b = 1 and 2
    int valid[MEM_TP_LEVELS];                            // model_acts_sp splits at tp = 2^l
} SpTerms;
void memory_sp_terms(const ModelConfig *m, int elt, const ActLevel plain[MEM_TP_LEVELS],
                     const ActLevel with_sp[MEM_TP_LEVELS], SpTerms *out);

// The model's symbolic parts for one configuration (stage_model.c).
typedef struct {
    PartExprs pre, block, post;
    ActLevel acts_block[MEM_TP_LEVELS], acts_post[MEM_TP_LEVELS];  // memory_act_levels
    ActLevel acts_block_sp[MEM_TP_LEVELS];  // the block's under sequence parallelism (memory_act_levels_sp)
    SpTerms sp_terms;                       // and the same in closed form (memory_sp_terms)
    double sp_norm_grad_elems;  // sp: elements of a block's norm-parameter gradients summed over tp per micro-batch
    int param_bytes;       // 2 (bf16/fp16) or 4 (fp32)
    int grad_bytes;        // bytes per gradient element
    int optimizer_bytes;   // 12 (fp32 master + m + v) or 8 (m + v, fp32 training)
    ComputeDtype compute;
} ModelExprs;

// ---- building blocks (cost_terms.c), shared by schedule.c and memory.c

// Symbols and their common derived terms for one stage.
typedef struct {
    ExprCtx *x;
    const HwProfile *hw;
    const OpTable *table;
    const MistConfig *cfg;
    const ModelExprs *me;
    Expr s[STAGE_SYMS];
    Expr zero, one;
    Expr wshard, gshard, oshard;  // divisors: dp when that state is sharded, g when intra-group, else 1
    // PaRO (cost_paro.c): g of the I scope, 1 where a state's scope is I, any of them, the unit padding
    Expr g, wi, gi, oi, has_i, pad;
    int paro_general;  // 1: any g and shard_group (else a pattern: g the node's dp ranks, 1 < g < dp)
    int has_pre, has_post;
} StageBuild;

Expr cost_part_compute_fwd(StageBuild *sb, const PartExprs *part);  // s, the model or the table
Expr cost_part_compute_bwd(StageBuild *sb, const PartExprs *part);
Expr cost_part_flops(StageBuild *sb, const PartExprs *part, int backward);
// The forward of the part's attention core (its ops of class OPC_ATTENTION),
// priced as cost_part_compute_fwd prices them, and its executed FLOPs
// (*flops): what selective recompute runs again before a block's backward.
Expr cost_part_attention_fwd(StageBuild *sb, const PartExprs *part, Expr *flops);
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
// [stage.N] lean: a lean block's extra forward (backward = 0) or backward time; 0 unless lean
Expr cost_lean_extra(StageBuild *sb, int backward);
// ceil(elems / divisor) * bytes_per_elem
Expr cost_shard_bytes(StageBuild *sb, Expr elems, Expr divisor, int bytes_per_elem);
// ---- PaRO scopes (cost_paro.c; docs/paro.md "Memory and traffic")
// The ring collective of `bytes` over a group of nodes x gpus (the profile's per-shape fits)
Expr cost_group_collective(StageBuild *sb, CollKind kind, Expr bytes, Expr nodes, Expr gpus);
// Sets sb's g, wi, gi, oi, has_i, pad and the shard divisors from the symbols; general = 1
// (a model of every configuration): an I scope whose group holds one rank or every dp rank
// is priced as N or G, the layout the runtime then runs (base/paro.h shard_code_effective).
// general = 0 (a pattern's model): its I scopes hold the configurations the search gives it,
// shard_group = 0 on meshes where 1 < g < dp and g divides dp (space_code_ok): g = M / tp,
// one node per group, one peer per node.
void cost_paro_scopes(StageBuild *sb, int general);
// The dp traffic of a unit of W_full / G_full bytes (whole, per rank) in seconds: the gather
// before each use, the gather of the first forward (after the step), the reduction of each
// micro-batch and of the last one. ag, rs, ar: the flat dp collectives of those bytes.
typedef struct {
    Expr gather_use, gather_first, reduce_micro, reduce_last;
} ParoTraffic;
ParoTraffic cost_paro_traffic(StageBuild *sb, Expr W_full, Expr G_full, Expr ag, Expr rs, Expr ar);

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
// memory.c: bytes per TP rank of what selective recompute does not keep in a
// block (att, lse), as an expression of b and tp
Expr memory_sel_bytes(StageBuild *sb);
// memory.c: bytes per TP rank a lean block saves (Λ = drop - the GELU's branch bits), drop =
// the block's AC_LEAN class as an expression (act_classes), whether or not lean is set
Expr memory_lean_saved_bytes(StageBuild *sb, Expr drop);

// ---- the overlap window rule (overlap.c); x[s] = seconds of work on stream s
double overlap_seconds(const HwProfile *p, const double x[STREAM_COUNT]);
// the same rule symbolically; NULL = no work on that stream
Expr overlap_expr(ExprCtx *x, const HwProfile *p, const Expr streams[STREAM_COUNT]);


// ---- hierarchical collectives (docs/paro.md "Hierarchical collectives"; runtime/comm_hier.h)
// The HO-Ring pipeline's chunks for a buffer of `bytes`: one per 16 MiB, 1 .. COST_HIER_MAX_CHUNKS
// (the runtime chunks with this rule, so the price and the run agree). Each chunk pays
// every level's latency again, so chunks stay large (benchmarks/RESULTS.md).
#define COST_HIER_MAX_CHUNKS 8
#define COST_HIER_CHUNK_BYTES (16.0 * 1024 * 1024)
static inline int cost_hier_chunks(double bytes) {
    double k = bytes / COST_HIER_CHUNK_BYTES;
    return k < 1 ? 1 : k > COST_HIER_MAX_CHUNKS ? COST_HIER_MAX_CHUNKS : (int)k;
}
// Seconds of the hierarchical collective of `bytes` (the whole, unsharded buffer, as
// profile_collective_seconds takes it) over nodes x gpus ranks, from the fits of the
// intra-node shape (1 x gpus) and the inter-node shape (nodes x 1); reduce-scatter and
// all-gather add the one message between the levels (the (2 x 1) fit). overlap = 1:
// the all-reduce pipelined in cost_hier_chunks(bytes) chunks (HO-Ring); the others
// have no pipelined form and ignore it. 0 for a group of one or 0 bytes; a group
// inside one node or with one rank per node is the flat ring
// (profile_collective_seconds), as at run time.
double cost_hier_collective_seconds(const HwProfile *p, CollKind kind, double bytes, int nodes, int gpus,
                                    int overlap);
// The same as an expression of the stage's symbols, over the DP group's shape as
// cost_dp_collective takes it (min(dp, the stage's nodes) nodes x dp/that GPUs each):
// what the stage's DP collective costs under [cluster] collectives = hierarchical
// (the flat ring where that shape has one node or one GPU per node); schedule.c
// prices ZeRO's dp collectives with it under that setting.
Expr cost_dp_collective_hier(StageBuild *sb, CollKind kind, Expr bytes, int overlap);

#endif
