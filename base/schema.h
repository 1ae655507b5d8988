// The run configuration schema: everything model.ini (plus -o overrides) says.
// Rank 0 parses and validates it, then broadcasts the struct as plain bytes,
// so it holds no pointers: strings are fixed-size arrays.
#ifndef MIST_SCHEMA_H
#define MIST_SCHEMA_H

#include <stddef.h>
#include <stdint.h>
#include "base/plan.h"
#include "base/profile.h"

#define MIST_PATH_MAX 256
#define MIST_NAME_MAX 64

typedef enum { FAMILY_GPT = 0, FAMILY_LLAMA = 1 } ModelFamily;
typedef enum { NORM_LAYERNORM = 0, NORM_RMSNORM = 1 } NormKind;
typedef enum { ACT_GELU = 0, ACT_SWIGLU = 1 } ActKind;
typedef enum { POS_LEARNED = 0, POS_ROTARY = 1, POS_NONE = 2 } PosKind;
typedef enum { PREC_BF16 = 0, PREC_FP16 = 1, PREC_FP32 = 2 } Precision;
typedef enum { SCHED_COSINE = 0, SCHED_LINEAR = 1, SCHED_CONSTANT = 2 } LrSchedule;
typedef enum { PLAN_AUTO = 0, PLAN_FIXED = 1 } PlanMode;
// search spaces of mode = auto, each adding a feature to the previous one
typedef enum {
    SPACE_MEGATRON_MIST = 0, SPACE_MEGATRON = 1, SPACE_ZERO = 2, SPACE_CKPT = 3, SPACE_OFFLOAD = 4, SPACE_FULL = 5
} PlanSpace;

typedef struct {
    ModelFamily family;
    int layers;          // transformer blocks L
    int hidden;          // h (model width)
    int heads;           // query heads a
    int kv_heads;        // key/value heads (GQA); == heads for multi-head attention
    int ffn_hidden;      // MLP inner width (4h for GPT, ~8h/3 rounded for Llama SwiGLU)
    int vocab;           // V (real vocabulary)
    int vocab_pad;       // the embedding/LM-head rows are V rounded up to this multiple (1 or 0: none)
    int seq_len;         // s
    NormKind norm;
    ActKind activation;
    PosKind position;    // learned absolute positions (GPT) or rotary (Llama)
    int bias;            // linear layers and norms carry biases
    int tied_embeddings; // LM head shares the token embedding
    int parallel_block;  // Falcon-style: attention and MLP read the same normed input
    double rope_theta;   // rotary base
    double norm_eps;
    double init_std;     // weight init N(0, init_std), residual projections / sqrt(2L)
} ModelConfig;

typedef struct {
    int64_t global_batch;  // sequences per iteration = b * dp * G in every stage
    int64_t steps;         // iterations to run
    double lr, min_lr;
    int64_t warmup;        // linear warmup iterations
    LrSchedule schedule;
    double weight_decay;
    double beta1, beta2, adam_eps;
    double grad_clip;      // clip the global grad norm to this (0 = off)
    uint64_t seed;
    Precision precision;
    int max_nonfinite;     // abort after this many consecutive NaN/Inf steps
} TrainConfig;

typedef struct {
    char train[MIST_PATH_MAX];  // token shard(s): a file or a glob pattern (llm.c format)
    char val[MIST_PATH_MAX];    // optional validation shard(s)
    int64_t val_interval;       // evaluate every N iterations (0 = never)
    int64_t val_batches;        // micro-batches per evaluation
    int shuffle;
} DataConfig;

// [cluster] collectives: the data-parallel collectives as one ring (flat) or in two levels,
// inside the nodes and across them (hierarchical; docs/paro.md)
typedef enum { CLUSTER_COLL_FLAT = 0, CLUSTER_COLL_HIER = 1 } ClusterCollectives;

typedef struct {
    int nodes;
    int gpus_per_node;
    char hardware[MIST_PATH_MAX];   // preset name (base/profile.h PROFILE_PRESETS_TEXT) or profile file
    int64_t device_memory;          // bytes per device; 0 = the profile's capacity
    int64_t host_memory;            // host bytes per node, shared by its ranks; 0 = the profile's (planner/analyze.h)
    double comm_timeout;            // seconds a collective or message may wait before the job ends; 0 = never
    int measure_transfers;          // mist-train measures the job's collectives and host copies at start
    int collectives;                // CLUSTER_COLL_FLAT or CLUSTER_COLL_HIER: the dp group's collectives (runtime/comm_hier.h)
    // Not a key: the profile with the lines mist-train measured (measure_transfers),
    // which the planner and the predictions then use instead of `hardware`'s.
    int measured_valid;
    HwProfile measured;
} ClusterConfig;

typedef struct {
    PlanMode mode;
    PlanSpace space;                // search space for mode=auto (megatron|zero|ckpt|offload|full)
    char file[MIST_PATH_MAX];       // optional plan file with [plan] + [stage.N]; overrides inline stages
    Plan plan;                      // the fixed plan (mode=fixed), or the one the planner chose
} PlanConfig;

typedef struct {
    char dir[MIST_PATH_MAX];  // empty = no checkpoints
    int64_t interval;         // every N iterations (0 = only at the end)
    int keep;                 // keep the newest N
    int resume;               // resume from dir/latest when it exists
} CheckpointConfig;

typedef struct {
    int64_t interval;               // print a line every N iterations
    char jsonl[MIST_PATH_MAX];      // one JSON object per iteration ("" = off)
    char summary[MIST_PATH_MAX];    // one JSON object at the end ("" = off)
    char trace[MIST_PATH_MAX];      // Chrome trace of one measured iteration ("" = off)
    int64_t trace_iteration;        // the iteration it records, 1-based
    int64_t sample_interval;        // print a sample of generated text every N iterations (0 = off)
} LogConfig;

typedef struct {
    char from[MIST_PATH_MAX];  // initial weights: a safetensors file or an llm.c GPT-2 checkpoint ("" = random init)
} InitConfig;

// [runtime] attention: the attention kernels of the CUDA backend (docs/cuda-backend.md#attention-kernels);
// the names are config_keys.c's, in this order. auto: wgmma where the build and the GPU have it, else base
typedef enum { ATTENTION_AUTO = 0, ATTENTION_BASE, ATTENTION_WIDE, ATTENTION_WGMMA, ATTENTION_CUDNN } AttentionKernels;

typedef struct {
    int attention;  // AttentionKernels; MIST_CUDA_ATTENTION overrides it
} RuntimeConfig;

typedef struct {
    char source[MIST_PATH_MAX];     // the file it came from (for messages)
    ModelConfig model;
    TrainConfig train;
    DataConfig data;
    ClusterConfig cluster;
    PlanConfig plan;
    CheckpointConfig checkpoint;
    LogConfig log;
    InitConfig init;
    RuntimeConfig runtime;
} MistConfig;


// The model a configuration with only [model] family, layers, hidden, heads,
// vocab and seq_len describes: the family's switches (GPT: LayerNorm, GELU,
// learned positions, biases, tied; Llama: RMSNorm, SwiGLU, rotary, untied),
// kv_heads = heads, ffn_hidden = model_default_ffn, rope_theta 10000, norm_eps
// 1e-5 (Llama 1e-6), init_std 0.02 (base/model_family.c).
ModelConfig model_family_config(ModelFamily family, int layers, int hidden, int heads, int vocab, int seq_len);
// The MLP width a configuration gets when it does not set ffn_hidden.
int model_default_ffn(ActKind activation, int hidden);

// [model] vocab_pad when unset: GPT-2's 50257 rows become 50304 = 393 * 128, so
// the LM-head GEMM's vocabulary dimension is a whole number of 128-wide tiles
// (an odd dimension sends cuBLASLt to align-1 kernels at a fraction of the speed)
#define MODEL_VOCAB_PAD_DEFAULT 128
// Rows of the token embedding and the LM head: V rounded up to vocab_pad. The
// rows V..Vp-1 stay zero: no token selects them and their logits are left out
// of the softmax, so they get zero gradient and the loss is that of V rows.
int model_vocab_padded(const ModelConfig *m);

#endif
