// The model description: one list of ops per part (embedding = PART_PRE, one
// transformer block = PART_BLOCK, final norm + LM head + loss = PART_POST)
// with symbolic shapes. The planner evaluates it symbolically (models/ops.h:
// model_build, model_part_cost); the runtime asks the concrete questions
// below, which evaluate that same op list with numbers, so the two can never
// disagree about a parameter or an activation.
//
// Families (base/schema.h ModelConfig):
//   GPT   LayerNorm (weight+bias), GELU-tanh MLP of width F, learned positions,
//         biases on every linear when bias=1, tied or untied LM head.
//   Llama RMSNorm (weight only), SwiGLU MLP (fc_w rows = [gate | up], 2F x h),
//         rotary positions, grouped-query attention (kv_heads), untied head.
//   parallel_block=1 (Falcon style): attention and MLP both read ln1's output,
//         x_out = x + attn_proj(att) + fc_proj(act); there is no ln2.
//
// Parameters, in storage order (linear weights are (out, in) row-major, as the
// backend's matmul computes out = in @ W^T):
//   PRE   wte (V x h), wpe (s x h, learned positions only)
//   BLOCK ln1_w, [ln1_b], qkv_w ((a+2kv)*hd x h), [qkv_b], attn_proj_w (h x a*hd),
//         [attn_proj_b], ln2_w, [ln2_b] (not in a parallel block), fc_w (F x h, or
//         2F x h for SwiGLU), [fc_b], fc_proj_w (h x F), [fc_proj_b]
//         linear biases when bias=1, norm biases with LayerNorm.
//   POST  lnf_w, [lnf_b], lm_head_w (V x h, untied only)
// GPT-2 small (h 768, 12 layers, V 50257, s 1024, tied, biases) = 124,439,808.
//
// Activations of one micro-batch (N = b*s rows, C = h, QKV = (a+2kv)*hd,
// FC = F for GELU, 2F for SwiGLU; sizes per tensor-parallel rank: the head and
// MLP dimensions divide by tp, the residual stream (N,C) is replicated):
//   BLOCK saved (kept from forward to backward):
//     x        X(N,C)      block input (the residual stream; the previous block's
//                          output, or the embedding output for block 0)
//     ln1      X(N,C)      ln1_mean f32(N) (LayerNorm only), ln1_rstd f32(N)
//     qkv      X(N,QKV/tp) after rotary (attention backward reads the rotated q,k)
//     att      X(N,a*hd/tp) attention output = attn_proj input
//     lse      f32(b,a/tp,s) log-sum-exp per score row (flash-style: no s x s kept)
//     mid      X(N,C)      x + attention projection (ln2 normalises it; not in a
//                          parallel block)
//     ln2      X(N,C)      ln2_mean f32(N) (LayerNorm), ln2_rstd f32(N) (not parallel)
//     fc       X(N,FC/tp)  MLP pre-activation (GELU: the matmul epilogue keeps it
//                          as pre_gelu; SwiGLU: the [gate | up] rows)
//     act      X(N,F/tp)   gelu(fc) or silu(gate)*up = fc_proj input
//   The block output x_out = mid + fc_proj(act) is the next part's `x`, so it is
//   counted there (and the projection outputs are written into `scratch`).
//   A checkpointed block keeps only `x` (ckpt_saved) and recomputes the rest in
//   backward from it.
//   Selective recompute ([stage.N] recompute = selective): a block that is not
//   checkpointed does not keep `att` and `lse` (sel_recompute) and recomputes
//   them in backward by one attention forward from the kept `qkv`.
//   BLOCK transient (saved = 0): one set shared by every block of a stage:
//     scratch X(N,C) projection outputs (forward and recompute)
//     d_res X(N,C) residual-stream gradient, d_ln X(N,C), d_att X(N,a*hd/tp),
//     d_qkv X(N,QKV/tp), d_act X(N,F/tp), d_fc X(N,FC/tp)      (backward)
//     d_ln_mlp X(N,C) (parallel block only): the MLP branch's dL/dln1, summed
//     with the attention branch's before their one all-reduce
//   Sequence parallelism (model_acts_sp, sp = 1): x, ln1, mid, ln2 and their
//   statistics are sequence-sharded (N/tp rows per rank: ActSpec.seq), and two
//   tensors exist only then: ln_full X(N,C) (the all-gathered norm output the
//   column-parallel matmuls read; forward scratch and backward workspace) and
//   d_norm X(k*C) (the norm parameters' partial gradients, summed over tp)
//   POST saved: x X(N,C) (the last block's output), lnf X(N,C), lnf_mean f32(N)
//     (LayerNorm), lnf_rstd f32(N), logits X(N,Vp/tp), losses f32(N). The
//     cross-entropy runs fused with its gradient and overwrites logits in place.
//     Vp = V: the backend's matmul writes N x OC contiguously (no output stride)
//     and wte has exactly V rows (exact parameter counts), so no padding.
//   PRE: none (token ids are input data, not activations; its output is block
//     0's `x`).
#ifndef MIST_MODEL_H
#define MIST_MODEL_H
#include <stdint.h>
#include "base/schema.h"

typedef enum { PART_PRE = 0, PART_BLOCK = 1, PART_POST = 2 } ModelPart;

typedef struct {
    char name[32];
    int64_t rows, cols;  // full (unsharded) shape; cols = 1 for vectors
    int tp_split;        // 0 replicated, 1 rows split over tp (column-parallel), 2 cols split (row-parallel);
                         // a rank holds ceil(rows/tp) rows (exact per head when tp divides kv_heads)
    int decay;           // weight decay applies (matrices)
} ParamSpec;

// parameter tensors of one part, in storage order; returns the count
// (-1 when out is too small for max, or the config is not a model: heads must
// divide hidden, kv_heads divide heads)
int model_params(const ModelConfig *m, ModelPart part, ParamSpec *out, int max);
// whole model, exact, over the real vocabulary (GPT-2 small tied: 124,439,808; the
// [model] vocab_pad rows that model_params stores are not counted)
int64_t model_param_count(const ModelConfig *m);

// 1 when tensor parallelism of degree tp can shard the model as the runtime does:
// each rank holds heads/tp query heads, kv_heads/tp kv heads, ffn_hidden/tp MLP columns
static inline int model_tp_shards(const ModelConfig *m, int tp) {
    return tp >= 1 && m->heads % tp == 0 && m->kv_heads % tp == 0 && m->ffn_hidden % tp == 0;
}

typedef struct {
    char name[32];
    int64_t elems;   // per tensor-parallel rank
    int f32;         // f32 (norm stats, lse, losses); else the storage dtype
    int saved;       // kept for backward when the block is not checkpointed
    int ckpt_saved;  // kept when it is checkpointed (the block input)
    int sel_recompute;  // saved, but under [stage.N] recompute = selective a block that is not
                        // checkpointed recomputes it in backward (att, lse: one attention forward)
    int seq;         // sequence-sharded under sequence parallelism (N/tp rows per rank)
} ActSpec;

// activation tensors of one block / pre / post for micro-batch b, sequence s,
// tp degree (see the list above); returns the count, -1 on error
int model_acts(const ModelConfig *m, ModelPart part, int64_t b, int64_t s, int tp, ActSpec *out, int max);
// The same under sequence parallelism when sp = 1 (tp > 1, tp dividing b*s):
// the sequence-sharded tensors hold N/tp rows, and two more are listed with
// their sizes (0 otherwise): ln_full X(N,C), the all-gathered norm output the
// column-parallel matmuls read (forward and backward), and d_norm X(k*C), the
// norm weights' (and biases') partial gradients summed over tp once per block
// (k = 1 or 2 norms times weight [+ bias]). sp = 0 is model_acts; -1 when
// sp = 1 and tp < 2 or tp does not divide b*s.
int model_acts_sp(const ModelConfig *m, ModelPart part, int64_t b, int64_t s, int tp, int sp, ActSpec *out, int max);

// Most tensors one part lists (sizes for callers' arrays).
#define MODEL_MAX_PARAMS 16
#define MODEL_MAX_ACTS 32

#endif
