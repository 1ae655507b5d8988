// The op list of one model part with symbolic shapes (docs/design.md §2, §4, §5).
//
// Symbols: "b" micro-batch, "s" sequence length, "tp" tensor-parallel degree,
// "eb" bytes per storage element (2 bf16/fp16, 4 fp32). The hyper-parameters
// (h, heads, kv_heads, ffn, V, layers) are numbers from ModelConfig, so the
// expressions fold down to a few terms. Every quantity is per micro-batch and
// per rank of a tp group.
//
// FLOPs. flops_* follow the Megatron model-FLOPs convention: 2 per
// multiply-add, matmuls and attention only, attention counting the full
// s x s score matrix (QK^T and PV: 4*b*s^2*a*hd forward), backward = 2x
// forward. hw_flops_* are what the kernels execute: a flash-style causal
// attention scores only the s(s+1)/2 pairs on or below the diagonal (forward
// 2*b*a*hd*s*(s+1)) and its backward runs five such products (QK^T
// recomputed, dV, dP, dQ, dK), 2.5x its forward; elementwise ops count a few
// FLOPs per element. The cost model's roofline should use hw_flops; MFU uses
// flops.
//
// Tensor parallelism (Megatron, no sequence parallelism): qkv and fc are
// column-parallel, attn_proj and fc_proj row-parallel; the residual stream is
// replicated. A sequential block all-reduces (N,C) after attn_proj and after
// fc_proj in forward, and after the qkv and fc input gradients in backward;
// a parallel (Falcon) block needs one of each. The embedding and LM head are
// vocab-parallel (the cross-entropy all-reduces three f32(N) vectors).
#ifndef MIST_MODEL_OPS_H
#define MIST_MODEL_OPS_H
#include <stdio.h>
#include "models/model.h"
#include "expr/expr.h"

typedef enum {
    MOP_EMBEDDING, MOP_NORM, MOP_MATMUL, MOP_MATMUL_GELU, MOP_ATTENTION, MOP_ROTARY,
    MOP_GELU, MOP_SWIGLU, MOP_RESIDUAL, MOP_CROSSENTROPY, MOP_KIND_COUNT
} ModelOpKind;

#define MODEL_OP_MAX_PARAMS 2
#define MODEL_MAX_OPS 16
// Ops whose kernel the runtime fuses into a neighbour's: gelu (fc's epilogue),
// attn_residual (ln2 adds it), pos_embedding (the embedding lookup adds it).
// They stay ops of their own so that a table measured on a runtime that runs
// them apart prices them; a table of ours lists them at 0 (mist-calibrate).

typedef struct {
    char name[32];
    ModelOpKind kind;
    ParamSpec param[MODEL_OP_MAX_PARAMS];  // full shapes, in storage order
    int n_params;
    Expr params;                      // parameter elements per rank
    Expr flops_fwd, flops_bwd;        // model FLOPs (Megatron convention)
    Expr hw_flops_fwd, hw_flops_bwd;  // FLOPs the kernels execute
    Expr bytes_fwd, bytes_bwd;        // bytes read + written by the kernels
    Expr tp_comm_fwd, tp_comm_bwd;    // all-reduce payload bytes (0 when tp = 1)
    // a matmul's forward GEMM, out (m x n) = inp (m x k) W^T, per rank: m = b*s
    // rows, n output and k input features (0 for other ops). Its backward runs
    // dinp (m x k, inner n) and dW (n x k, inner m), the planner's GEMM model
    // prices all three from these (docs/design.md, "Compute time")
    Expr gemm_m, gemm_n, gemm_k;
} ModelOp;

// An activation tensor of the part (the list in models/model.h).
typedef struct {
    char name[32];
    Expr elems;         // per rank
    int f32;            // else storage dtype
    int saved;          // kept for backward (no checkpointing)
    int ckpt_saved;     // kept for backward when the block is checkpointed
    int scratch_fwd;    // part of the forward working set (not saved)
    int scratch_bwd;    // part of the backward working set (not saved)
    int sel_recompute;  // [stage.N] recompute = selective: not kept, recomputed from qkv in backward
    // under sequence parallelism ([stage.N] sp = 1, tp > 1): the elements per
    // rank. A sequence-sharded tensor (the residual stream's rows outside the
    // tp matmuls: x, the norms' outputs and statistics, mid) holds N/tp of the
    // N = b*s rows; the tensors only sp needs (the gathered norm output, the
    // norm weights' partial gradients) are 0 in `elems`
    Expr elems_sp;
    int seq;            // sequence-sharded under sp
} ModelTensor;

typedef struct {
    ModelPart part;
    Expr b, s, tp, eb;  // the symbols
    int n_ops;
    ModelOp op[MODEL_MAX_OPS];
    int n_tensors;
    ModelTensor tensor[MODEL_MAX_ACTS];
} ModelOpList;

typedef struct {
    Expr params;                          // parameter elements per rank of a tp group
    Expr flops_fwd, flops_bwd;            // model FLOPs per micro-batch, per rank
    Expr hw_flops_fwd, hw_flops_bwd;      // executed FLOPs (flash-style causal attention)
    Expr bytes_fwd, bytes_bwd;            // bytes read + written by the kernels
    Expr saved, saved_ckpt;               // activation bytes kept for backward
    Expr transient_fwd, transient_bwd;    // working set beyond saved tensors (bytes)
    Expr tp_comm_bytes_fwd, tp_comm_bytes_bwd;  // tensor-parallel all-reduce payload
} PartCost;

// Checks the config (positive sizes, heads | hidden, kv_heads | heads);
// 0, or -1 with a reason in err.
int model_check(const ModelConfig *m, char *err, size_t errlen);
// Builds the op list of one part in cx (symbols b, s, tp, eb). 0, or -1 when
// model_check fails (the reason goes to stderr).
int model_build(ExprCtx *cx, const ModelConfig *m, ModelPart part, ModelOpList *out);
// Sums the op list into the part's costs (bytes use eb for storage tensors
// and 4 for f32 tensors).
void model_part_cost(ExprCtx *cx, const ModelOpList *ops, PartCost *out);
// Bytes of one tensor of the list.
Expr model_tensor_bytes(ExprCtx *cx, const ModelOpList *ops, const ModelTensor *t);

const char *model_op_kind_name(ModelOpKind k);
// One line per op (its expressions) and per tensor, for explain output and debugging.
void model_ops_print(FILE *f, ExprCtx *cx, const ModelOpList *ops);

#endif
