// The activation tensors of one micro-batch as the runtime keeps them, written
// once. models/model.h (model_acts) says how many bytes each has for a model,
// micro-batch and tp degree; the rows below say where the runtime keeps each
// one and how it uses it. Every list the runtime needs comes from them: the
// fields of BlockActs and ModelRuntime, the tensors a checkpointed block
// recomputes and activation offload moves, the names in arena messages, the
// sizes forward/backward write (checked against models/ before anything is
// carved) and the categories the memory prediction sums. models/'s names are
// matched to the rows in one place (match_acts, runtime/model_memory.c).
//
// A row: X(field, part, name, label, use, shape, models)
//   field   the ArenaTensor holding it: in BlockActs (MR_BLOCK_ACTS, one set
//           per block and in-flight slot) or in ModelRuntime (MR_STAGE_ACTS,
//           one per stage)
//   part    BLOCK or POST: the part of the model whose model_acts lists it
//   name    its name there
//   label   its name in arena messages
//   use     how the runtime holds it (MrActUse)
//   shape   the bytes forward/backward write (MrActShape; N = b*T rows)
//   models  the models that need it (MrActModels; the others may list it
//           with fewer bytes, or not at all: it is then 0 bytes)
#ifndef MIST_ACTIVATIONS_H
#define MIST_ACTIVATIONS_H
#include <stddef.h>
#include "models/model.h"
#include "runtime/arena.h"

typedef enum {
    MR_USE_INPUT,    // the block input x: kept by every block, checkpointed or not
    MR_USE_SAVED,    // kept for backward unless the block is checkpointed (then
                     // recomputed into one shared workspace); activation offload moves these
    MR_USE_SCRATCH,  // forward transient of every block (projection outputs)
    MR_USE_GRAD,     // backward transient of every block
    MR_USE_GATHER,   // sequence parallelism: the all-gathered norm output, live with the
                     // scratch in forward and with the gradient buffers in backward
    MR_USE_OUTPUT,   // the last block's output (the size of a block input)
    MR_USE_HEAD,     // the final norm's output and statistics
    MR_USE_LOGITS,
    MR_USE_LOSSES,   // per-token losses: held for the whole run
} MrActUse;

typedef enum {
    MR_SHAPE_NC,      // X(N,C)
    MR_SHAPE_N_F32,   // f32(N)
    MR_SHAPE_N_QKV,   // X(N,QKV)
    MR_SHAPE_N_ATT,   // X(N,NH*HS)
    MR_SHAPE_LSE,     // f32(B,NH,T)
    MR_SHAPE_N_FC,    // X(N,FC): FC = F (gelu) or 2F (swiglu)
    MR_SHAPE_N_F,     // X(N,F)
    MR_SHAPE_LOGITS,  // X(N,Vs): rows of Vt padded to Vs
    MR_SHAPE_NC_SEQ,     // X(Ns,C): sequence-sharded, Ns = N/tp under sp, else N
    MR_SHAPE_N_F32_SEQ,  // f32(Ns)
    MR_SHAPE_NORM_GRADS, // X(k*C): a block's norm weights and biases (k of them)
    MR_SHAPE_N_F_BITS,   // u8(ceil(N*F/8)): one bit per element of X(N,F)
} MrActShape;

typedef enum {
    MR_MODELS_ALL,
    MR_MODELS_LAYERNORM,       // norm = layernorm (the mean; rmsnorm has none)
    MR_MODELS_SEQUENTIAL,      // sequential blocks (not parallel_block)
    MR_MODELS_SEQ_LAYERNORM,   // both
    MR_MODELS_PARALLEL,        // parallel (Falcon) blocks
    MR_MODELS_SP,              // sequence parallelism on (any model)
    MR_MODELS_LEAN_GELU,       // [stage.N] lean on a GELU model (not listed by models/: act_want sizes it)
} MrActModels;

// One block's own tensors, in BlockActs order (bit k of the offload mask is row k).
#define MR_BLOCK_ACTS(X)                                                                  \
    X(x, BLOCK, "x", "acts.x", INPUT, NC_SEQ, ALL)                                        \
    X(ln1, BLOCK, "ln1", "acts.ln1", SAVED, NC_SEQ, ALL)                                  \
    X(ln1_mean, BLOCK, "ln1_mean", "acts.ln1_mean", SAVED, N_F32_SEQ, LAYERNORM)          \
    X(ln1_rstd, BLOCK, "ln1_rstd", "acts.ln1_rstd", SAVED, N_F32_SEQ, ALL)                \
    X(qkv, BLOCK, "qkv", "acts.qkv", SAVED, N_QKV, ALL)                /* after rotary */ \
    X(att, BLOCK, "att", "acts.att", SAVED, N_ATT, ALL)                                   \
    X(lse, BLOCK, "lse", "acts.lse", SAVED, LSE, ALL)                                     \
    X(mid, BLOCK, "mid", "acts.mid", SAVED, NC_SEQ, SEQUENTIAL)  /* residual after attention */ \
    X(ln2, BLOCK, "ln2", "acts.ln2", SAVED, NC_SEQ, SEQUENTIAL)                           \
    X(ln2_mean, BLOCK, "ln2_mean", "acts.ln2_mean", SAVED, N_F32_SEQ, SEQ_LAYERNORM)      \
    X(ln2_rstd, BLOCK, "ln2_rstd", "acts.ln2_rstd", SAVED, N_F32_SEQ, SEQUENTIAL)         \
    X(fc, BLOCK, "fc", "acts.fc", SAVED, N_FC, ALL)                    /* pre-activation */ \
    X(act, BLOCK, "act", "acts.act", SAVED, N_F, ALL)                                     \
    X(fc_mask, BLOCK, "fc_mask", "acts.fc_mask", SAVED, N_F_BITS, LEAN_GELU) /* lean: GELU branch bits */

// The stage's buffers shared by every block and slot, in the order a
// micro-batch first takes them (the order they are carved in).
#define MR_STAGE_ACTS(X)                                                                  \
    X(x_out, POST, "x", "acts.x_out", OUTPUT, NC, ALL)                                    \
    X(scratch, BLOCK, "scratch", "scratch", SCRATCH, NC, ALL)                             \
    X(ln_full, BLOCK, "ln_full", "sp.ln_full", GATHER, NC, SP)  /* sp: gathered norm output */ \
    X(lnf, POST, "lnf", "acts.lnf", HEAD, NC, ALL)                                        \
    X(lnf_mean, POST, "lnf_mean", "acts.lnf_mean", HEAD, N_F32, LAYERNORM)                \
    X(lnf_rstd, POST, "lnf_rstd", "acts.lnf_rstd", HEAD, N_F32, ALL)                      \
    X(logits, POST, "logits", "logits", LOGITS, LOGITS, ALL)                              \
    X(d_res, BLOCK, "d_res", "grad.residual", GRAD, NC, ALL)                              \
    X(d_ln, BLOCK, "d_ln", "grad.norm_out", GRAD, NC, ALL)                                \
    X(d_att, BLOCK, "d_att", "grad.att", GRAD, N_ATT, ALL)                                \
    X(d_qkv, BLOCK, "d_qkv", "grad.qkv", GRAD, N_QKV, ALL)                                \
    X(d_act, BLOCK, "d_act", "grad.act", GRAD, N_F, ALL)                                  \
    X(d_fc, BLOCK, "d_fc", "grad.fc", GRAD, N_FC, ALL)          /* swiglu's backward */   \
    /* a parallel block: the MLP branch's dL/dln1, added to the attention's */            \
    X(d_ln_mlp, BLOCK, "d_ln_mlp", "grad.norm_out_mlp", GRAD, NC, PARALLEL)               \
    /* sp: the norm parameters' gradients of the rank's rows, summed over tp */            \
    X(d_norm, BLOCK, "d_norm", "sp.grad.norm_params", GRAD, NORM_GRADS, SP)               \
    X(t_losses, POST, "losses", "losses", LOSSES, N_F32, ALL)

// Row indices MR_ACT_<field>, the block's rows first (MR_NUM_BLOCK_ACTS of them).
#define MR_ACT_ROW(field, ...) MR_ACT_##field,
#define MR_ACT_ONE(field, ...) +1
enum { MR_BLOCK_ACTS(MR_ACT_ROW) MR_STAGE_ACTS(MR_ACT_ROW) MR_NUM_ACTS };
enum { MR_NUM_BLOCK_ACTS = 0 MR_BLOCK_ACTS(MR_ACT_ONE) };
#undef MR_ACT_ROW
#undef MR_ACT_ONE

// ArenaTensor <field>; for each row of a list (inside a struct).
#define MR_ACT_FIELD(field, ...) ArenaTensor field;

// [stage.N] recompute = selective: the saved rows a block that is not
// checkpointed does not keep. The attention core's outputs att and lse are
// recomputed from the kept qkv by one attention forward in backward, into one
// shared workspace per stage (ModelRuntime.sws), before the output
// projection's backward reads att. models/model.h marks the same tensors
// (ActSpec.sel_recompute); match_acts (runtime/model_memory.c) checks they agree.
#define MR_SELECTIVE_ACTS(X) X(att) X(lse)
#define MR_SEL_BIT(field) | 1u << MR_ACT_##field
enum { MR_SELECTIVE_MASK = 0u MR_SELECTIVE_ACTS(MR_SEL_BIT) };
#undef MR_SEL_BIT

// [stage.N] lean (docs/lean-layers.md): the saved rows a lean block (not
// checkpointed) does not keep. Its norms' backward reads their outputs ln1,
// ln2 (kept for the matmuls anyway) and rstd, so neither the means nor mid
// (ln2's input; forward writes it into the next block's input x, where the
// MLP's output is then added) are kept; a GELU model's backward reads act =
// gelu(fc) and the branch bits fc_mask instead of fc. A SwiGLU model's act =
// silu(gate) up is a function of the kept fc: forward writes it into the
// stage's d_act buffer (free in forward) and backward recomputes it into d_fc
// before d_fc receives the SwiGLU's gradient. A block that is not lean
// (lean = 0, or checkpointed) keeps no fc_mask.
#define MR_LEAN_DROP(X) X(ln1_mean) X(mid) X(ln2_mean)
#define MR_LEAN_BIT(field) | 1u << MR_ACT_##field
enum { MR_LEAN_DROP_MASK = 0u MR_LEAN_DROP(MR_LEAN_BIT), MR_LEAN_GELU_DROP_MASK = 1u << MR_ACT_fc,
       MR_LEAN_SWIGLU_DROP_MASK = 1u << MR_ACT_act, MR_LEAN_ONLY_MASK = 1u << MR_ACT_fc_mask };
#undef MR_LEAN_BIT

// One block's activations (what forward writes and backward reads).
typedef struct {
    MR_BLOCK_ACTS(MR_ACT_FIELD)
} BlockActs;

typedef struct {
    const char *name, *label;
    ModelPart part;  // PART_BLOCK or PART_POST
    MrActUse use;
    MrActShape shape;
    MrActModels models;
    size_t offset;   // of the ArenaTensor in BlockActs (rows < MR_NUM_BLOCK_ACTS) or ModelRuntime
} MrAct;

extern const MrAct mr_acts[MR_NUM_ACTS];

// Row k (< MR_NUM_BLOCK_ACTS) of a block's activations.
static inline ArenaTensor *mr_block_act(BlockActs *a, int k) {
    return (ArenaTensor *)((char *)a + mr_acts[k].offset);
}

#endif
