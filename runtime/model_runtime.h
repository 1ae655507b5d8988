// The model as the training loop runs it on one rank (one pipeline stage:
// its blocks [first, first + L), the embedding on the first stage, the final
// norm, head and loss on the last; this rank's tensor-parallel shard of it):
// where each parameter lives in the flat buffers, which activation tensors
// each block keeps, the memory plan that carves all of them from the arenas
// before step 0, and forward/backward written with backend ops only (so every
// backend runs the same code).
//
// Layout of the flat buffers (params, grads, master, m, v): the tensors of
// model_params() for PART_PRE, then the stage's blocks, then PART_POST; a
// part a stage does not run is an empty unit. With tied embeddings and
// several stages the last stage's pre unit holds a copy of wte (the head);
// its gradient is summed with the first stage's before the step. Each of
// these parts is a unit; under ZeRO >= 1 every unit is padded to a multiple of
// dp, and each state keeps per unit either the whole unit or this rank's
// shard, split between the device and host arenas (runtime/zero.h). Weights
// and gradients are reached through zero_w / zero_g, which know where each
// unit is held at the moment.
//
// Residual stream of block l (N = b*T rows, C = hidden):
//   x_l (N,C) -> ln1 = norm(x_l) -> qkv = ln1 Wqkv^T (+rotary) -> att = attention(qkv)
//   -> mid = x_l + att Wproj^T -> ln2 = norm(mid) -> fc = ln2 Wfc^T -> act = gelu(fc) | swiglu(fc)
//   -> x_{l+1} = mid + act Wfcproj^T
// Parallel (Falcon) block: fc = ln1 Wfc^T, no mid and no ln2,
//   x_{l+1} = x_l + att Wproj^T + act Wfcproj^T.
// A checkpointed block keeps only x_l; its other tensors are taken from one
// shared recompute workspace in backward. Under activation offload (ao > 0) a
// non-checkpointed block computes its largest saved tensors (up to ao of its
// saved bytes) in one shared device workspace, copies them to its own host
// buffers after its forward and back before its backward. Under selective
// recompute ([stage.N] recompute = selective) a non-checkpointed block keeps
// neither att nor lse: its forward writes them into one shared workspace,
// its backward recomputes them there from qkv (one attention forward).
//
// Pipeline (docs/pipeline.md): up to K = min(S - s, G) micro-batches have
// saved activations at once on stage s, so every block's own tensors and the
// stage's token inputs exist once per in-flight slot (micro-batch g uses slot
// g mod K; 1F1B keeps the in-flight ones a run of consecutive g).
#ifndef MIST_MODEL_RUNTIME_H
#define MIST_MODEL_RUNTIME_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/backend.h"
#include "models/model.h"
#include "runtime/activations.h"
#include "runtime/arena.h"
#include "base/schema.h"
#include "runtime/optimizer.h"
#include "runtime/tp_shard.h"
#include "runtime/zero.h"

struct CommBackend;
struct CommGroup;

#define MR_MAX_TENSORS_PER_PART 16
#define MR_MAX_TENSORS 4096

typedef struct {
    char name[64];        // "block.3.qkv_w" (the checkpoint name)
    int64_t rows, cols;   // cols = 1 for vectors
    size_t offset, count; // elements in the flat buffers
    int decay;
    int residual_proj;    // attn_proj_w / fc_proj_w: init std / sqrt(2L)
    int unit_init;        // norm weights: 1
    int zero_init;        // biases: 0
    // tensor parallelism: the global tensor (models/model.h) and which part of
    // it this rank holds (rows x cols above are the shard's shape)
    ParamSpec spec;
    TpShard shard;
    size_t goffset;       // element offset of the global tensor in a whole-model array (checkpoints)
    int gidx;             // index of the tensor in the whole model's order (seeds its init)
    int tied_copy;        // the last stage's copy of wte (tied head, S > 1): not saved, not in the norm
} ParamTensor;

// Which part of the model this rank's stage runs (mr_set_pipeline).
typedef struct {
    int stage, stages;            // 0 .. stages-1; stages = 0: not set, one stage with every block
    int first_layer, num_layers;  // the stage's blocks
    int G;                        // micro-batches per iteration
    int P, v;                     // interleaved ([plan] virtual = v > 1): stage is a chunk of P v on
                                  // pipeline rank stage mod P; v = 0 or 1: plain 1F1B (mr_set_interleaved)
} MrPipeline;

// Offsets (in elements) of one block's parameters; -1 when absent.
typedef struct {
    int64_t ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
} BlockParams;

typedef struct ModelRuntime {
    ModelConfig m;         // the whole model (m.layers: every stage's blocks)
    MrPipeline pipe;       // kept by the layout (set before it)
    int has_pre, has_post; // embedding (first stage), final norm + head + loss (last stage)
    int tied_copy;         // the pre unit is the last stage's copy of wte
    int K;                 // in-flight micro-batch slots: min(S - s, G)
    Backend *be;
    BackendStream *stream;
    int comm_stream_ordered;  // the comm backend orders its collectives on `stream` (comm_select_follow)
    int B, T, C, NH, NKV, HS, F, FC, QKV, V, L;  // NH, NKV, F, FC, QKV: this tp rank's share; V global; L: the stage's blocks
    int Vp;  // rows of wte and the LM head: V rounded up to [model] vocab_pad (rows V..Vp-1 stay zero)
    // tensor parallelism (Megatron): tp ranks of one stage split every block
    // matrix (column-parallel qkv and fc by output rows, row-parallel
    // attn_proj and fc_proj by input columns) and the vocabulary of wte and
    // the LM head (rows [v0, v0 + Vt)); norms, wpe and the biases of
    // row-parallel layers are replicated. tp = 1: no tensor parallelism.
    int tp, tp_rank, v0, Vt;
    // sequence parallelism (runtime/model_sp.h): norms and residual adds on
    // this rank's Ns = N/tp rows; 0 = off (mr_layout_sp)
    int sp;
    size_t block_saved_measured;  // arena bytes block 0 kept after its first forward (0: not measured)
    int Vr;  // of the rank's Vt rows, the real ones (v0 + Vr <= V): the loss reads only these logits
    int Vs;  // row stride of the logits: Vt rounded up to 8 (16-byte aligned rows)
    size_t Pglobal;        // parameters of the whole model (every tp shard together)
    struct CommGroup *tpg; // the tp group (runtime/grid.h), used when tp > 1
    int ckpt;              // blocks L-ckpt .. L-1 recompute in backward
    size_t x;              // bytes per storage element
    // parameters
    ParamTensor tensors[MR_MAX_TENSORS];
    int num_tensors;
    size_t P;              // parameters
    size_t Pp;             // flat buffer length: P plus each unit's padding to a multiple of dp (zero >= 1)
    int64_t wte, wpe, lnf_w, lnf_b, lm_head;  // offsets, -1 when absent
    BlockParams *blk;      // (L)
    // bytes of each activation (runtime/activations.h, row k) as models/model.h lists it
    // for this micro-batch and tp rank; 0 when it does not
    size_t act_bytes[MR_NUM_ACTS];
    // arenas and tensors
    Arena dev, host;
    ArenaTensor t_params, t_grads, t_master, t_m, t_v, t_norm_acc;
    ArenaTensor t_ce_stats;  // tp > 1: f32(3N) vocab-parallel cross-entropy [rowmax | sum exp | target logit]
    ArenaTensor t_inputs, t_targets;               // device: i32(K,N), i32(N)
    ArenaTensor h_inputs, h_targets, h_losses, h_gather;  // host: i32(N) x2, f32(N), f32(dp*N)
    // the pipeline boundary, in device memory (the comm backend moves it device to device):
    ArenaTensor pipe_act_in, pipe_grad_in;         // X(N,C): boundary activation / gradient received
    ArenaTensor pipe_act_out[2], pipe_grad_out[2]; // X(N,C) x2: sent (a send may still be in flight)
    BlockActs *acts;       // (K, L) own tensors for non-checkpointed blocks, per slot
    BlockActs work;        // recompute workspace of checkpointed blocks
    double ao;             // activation offload fraction
    unsigned act_mask;     // saved tensors a non-checkpointed block offloads (bit k: row k of MR_BLOCK_ACTS)
    BlockActs aws;         // device workspace of the offloaded tensors (the others 0 bytes)
    BlockActs *hacts;      // (K, L) host copies of the offloaded tensors
    // [stage.N] recompute = selective: a block that is not checkpointed keeps
    // neither att nor lse (MR_SELECTIVE_MASK); its forward computes them in sws,
    // its backward recomputes them there from qkv (one attention forward)
    int sel;
    BlockActs sws;         // the selective workspace: att and lse (the others 0 bytes)
    // [stage.N] lean: the blocks not checkpointed run the norms' and the GELU's
    // backward from their outputs (MR_LEAN_DROP_MASK; docs/lean-layers.md).
    // lean_mid: during a lean block's forward, where mid is written (its next x);
    // lean_act: a SwiGLU model's act during a lean block's forward (the d_act buffer)
    int lean;
    void *lean_mid, *lean_act;
    // the stage's shared activations: x_out, scratch, lnf, ..., logits, the
    // backward gradient buffers d_*, and the per-token losses t_losses f32(N)
    MR_STAGE_ACTS(MR_ACT_FIELD)
    int dp;
    // ZeRO sharding and offloading (runtime/zero.h): units pre, block 0..L-1, post
    int zero, dp_rank;             // zero: the sharding code the stage runs (base/paro.h shard_code_effective)
    int scope[3], paro_g;          // scope of W, G, O (SCOPE_*); g of the I scope (1: none)
    struct CommGroup *paro_grp[4];  // I scope: intra, inter, and again for second levels (zero.h)
    ZeroColl *wnext, *gnext;       // (num_units) the second level of a gather / reduction in flight
    ZeroChain *chains;             // (2 num_units) chains whose second level waits, in start order
    int nchains;
    double wo, go, oo;
    int num_units;                 // L + 2
    MrUnit *units;                 // (num_units)
    int *unit_first_tensor;        // (num_units + 1): tensors of unit u are [first[u], first[u+1])
    Store sw, sg, smaster, sm, sv; // weights, grads, fp32 master (bf16 only), Adam m, v
    ArenaTensor wstage[4], gstage[4];  // staging: pre, post, block ring 0, 1 (0 bytes when unused)
    ArenaTensor gacc, oswap[3];    // swap-in of stored grads / master, m, v (0 bytes when unused)
    void **wbase, **gbase;         // (num_units) where each unit's full weights / grads are now
    struct CommRequest **wreq, **greq;  // (num_units) gathers / reductions in flight
    unsigned char *due, *need_gather, *save_after, *gkind, *gbegun;  // (num_units) schedule flags
    int slot_unit[4];              // unit whose weights a W staging buffer holds, -1 none
    int gpend[4], ngpend;          // units whose gradient reduction is in flight
    float step_lr, step_scale;     // the deferred optimizer step
    int64_t step_t;
    int micro_last;                // the current micro-batch is the iteration's last (gradient sync)
    const struct CommBackend *comm;  // NULL or dp == 1: no collectives
    struct CommGroup *dpg;
    struct CommHier *dph;          // the dp group's two levels ([cluster] collectives = hierarchical), NULL = flat
    struct TraceMeasure *trace;    // [log] trace: marks around each block and pre / post part, or NULL
    // optimizer over the flat buffers
    OptimTensor *opt_tensors;
    Optimizer opt;
} ModelRuntime;

// Row k (>= MR_NUM_BLOCK_ACTS) of runtime/activations.h: one of the stage's shared activations.
static inline ArenaTensor *mr_stage_act(ModelRuntime *r, int k) {
    return (ArenaTensor *)((char *)r + mr_acts[k].offset);
}

// The stage this runtime holds, for the next mr_layout* call (which keeps
// it): stage of stages, blocks [first_layer, first_layer + num_layers), G
// micro-batches per iteration. Without it (r zeroed) the layout holds the
// whole model.
void mr_set_pipeline(ModelRuntime *r, int stage, int stages, int first_layer, int num_layers, int G);

// After mr_set_pipeline, for an interleaved plan ([plan] virtual = v > 1,
// stages = P v): the stage is a model chunk, which holds up to
// stage_p_interleaved + 1 micro-batches at once (planner/interleave.h), and its
// memory is replayed over its passes in the interleaved order.
void mr_set_interleaved(ModelRuntime *r, int P, int v);

// Reads the parameter layout from models/model.h and checks what this runtime
// supports. 0, or 2 with err (config error). Unsharded, nothing offloaded.
int mr_layout(ModelRuntime *r, const ModelConfig *m, int B, int ckpt, int dp, char *err, size_t errlen);
// The same for dp rank `dp_rank` of stage plan sp: its micro-batch b, ckpt,
// dp, ZeRO level and offload fractions wo, go, oo, ao of weights, grads,
// optimizer state and saved activations. (sp's layers and tp are not read:
// the blocks come from mr_set_pipeline, tensor parallelism from mr_layout_tp.)
int mr_layout_sharded(ModelRuntime *r, const ModelConfig *m, const StagePlan *sp, int dp_rank, char *err,
                      size_t errlen);
// Re-runs the layout of r (after mr_layout_sharded, before mr_plan_memory) for
// tensor-parallel rank tp_rank of tp: this rank's shard of every parameter,
// its heads / MLP units / vocabulary range. 0, or 2 with err.
int mr_layout_tp(ModelRuntime *r, int tp, int tp_rank, char *err, size_t errlen);
// Turns sequence parallelism on (sp = 1) for the layout of r (after
// mr_layout_tp, before mr_plan_memory): needs tp >= 2 and tp dividing b*T.
// 0, or 2 with err naming the stage and the values.
int mr_layout_sp(ModelRuntime *r, int sp, char *err, size_t errlen);
// Carves every tensor from the arenas (sized by model_acts) and reserves them
// once. 0, or 1 with err.
int mr_plan_memory(ModelRuntime *r, Backend *be, char *err, size_t errlen);
// Predicted peak bytes of the device and host arenas for one iteration (the
// stage's forwards and backwards in 1F1B order), from the model description
// alone (sizes of the same phases, no arena involved).
void mr_memory_predict(const ModelRuntime *r, int64_t *device_peak, int64_t *host_peak);
// Takes the tensors that live for the whole run (params, grads, optimizer
// state, staging, token buffers) and fills params from the seeded
// counter-based RNG (every rank its own shard).
void mr_init_params(ModelRuntime *r, uint64_t seed);
// Value of element i of tensor k at init (pure function, for tests).
float mr_init_value(const ModelRuntime *r, int k, size_t i, uint64_t seed);

// Whole-model fp32 arrays (Pglobal floats each, tensor k at tensors[k].goffset,
// global shape) <-> this rank's flat padded arrays (Pp floats each). gather is
// collective over the tp group: its rank 0 gets the whole model (the other
// ranks' `global` is untouched); `local` and `global` hold `n` arrays (w, m,
// v) one after the other. scatter is local: every rank extracts its shard.
void mr_tp_gather(ModelRuntime *r, const float *local, float *global, int n);
void mr_tp_scatter(const ModelRuntime *r, const float *global, float *local, int n);

// Device pointers to the token inputs of slot k (first stage) and the
// targets (last stage), each i32(b, T).
int32_t *mr_inputs(ModelRuntime *r, int slot);
int32_t *mr_targets(ModelRuntime *r);

// The forward of the micro-batch in slot `slot`: from the tokens of the slot
// (first stage) or the received boundary activation in (device X(N,C), other
// stages); the output goes to out (device X(N,C), all but the last stage)
// or through the fused cross-entropy with dloss into t_losses (last stage:
// per-token losses; logits become dL/dlogits). dloss = 0 is evaluation:
// every activation is dropped at the end, no backward follows.
void mr_forward(ModelRuntime *r, int slot, float dloss, const void *in, void *out);
// The backward of slot `slot`, accumulating into grads: from the loss (last
// stage) or the received output gradient dout (device X(N,C)); the input
// gradient goes to din (device X(N,C), all but the first stage). r->micro_last
// says whether gradients are synchronised over dp after it.
void mr_backward(ModelRuntime *r, int slot, const void *dout, void *din);
// One stage holding the whole model: tokens already in slot 0 / targets;
// mr_forward, then (dloss != 0) mr_backward.
void mr_forward_backward(ModelRuntime *r, float dloss);
void mr_free(ModelRuntime *r);

// Block l (of the stage's L) is checkpointed: it keeps only its input x and
// recomputes its other tensors in backward (the last ckpt blocks).
static inline int mr_is_ckpt_block(const ModelRuntime *r, int l) { return l >= r->L - r->ckpt; }

// Block l recomputes its attention core (att, lse) in backward: selective
// recompute, and not checkpointed (a checkpointed block recomputes everything).
static inline int mr_is_sel_block(const ModelRuntime *r, int l) { return r->sel && !mr_is_ckpt_block(r, l); }
// The saved rows (bits of MR_BLOCK_ACTS) a block that is not checkpointed keeps in its own tensors.
static inline unsigned mr_kept_mask(const ModelRuntime *r) { return r->sel ? ~(unsigned)MR_SELECTIVE_MASK : ~0u; }

// Block l runs the lean forms ([stage.N] lean, not checkpointed: a checkpointed block
// recomputes everything anyway and keeps only x).
static inline int mr_is_lean_block(const ModelRuntime *r, int l) { return r->lean && !mr_is_ckpt_block(r, l); }
// The saved rows a lean block does not keep (0 when the stage is not lean).
static inline unsigned mr_lean_drop_mask(const ModelRuntime *r) {
    if (!r->lean) return 0u;
    return (unsigned)MR_LEAN_DROP_MASK |
           (r->m.activation == ACT_SWIGLU ? (unsigned)MR_LEAN_SWIGLU_DROP_MASK : (unsigned)MR_LEAN_GELU_DROP_MASK);
}

// Every parameter tensor as a checkpoint entry over whole-model host arrays
// (fp32 weights, Adam m, Adam v: 3 x Pglobal floats at `global`); calloc'ed, the
// caller frees it (runtime/params.c has why checkpoints hold whole tensors).
struct CkptTensor;
struct CkptTensor *mr_checkpoint_tensors(ModelRuntime *r, float *global);

#endif
