// Every configuration key of mist (see config_keys.h and docs/config.md).
#include <stdint.h>
#include <string.h>
#include "base/schema.h"
#include "base/config_keys.h"
#include "base/paro.h"
#include "base/profile.h"

#define MC(f) offsetof(MistConfig, f), sizeof(((MistConfig *)0)->f)
#define SP(f) offsetof(StagePlan, f), sizeof(((StagePlan *)0)->f)
#define BIG 9.0e15  // integers up to 2^53 stay exact in a double

static const char *const family_names[] = {"gpt", "llama", NULL};
static const char *const norm_names[] = {"layernorm", "rmsnorm", NULL};
static const char *const act_names[] = {"gelu", "swiglu", NULL};
static const char *const pos_names[] = {"learned", "rotary", "none", NULL};
static const char *const prec_names[] = {"bf16", "fp16", "fp32", NULL};
static const char *const sched_names[] = {"cosine", "linear", "constant", NULL};
static const char *const mode_names[] = {"auto", "fixed", NULL};
static const char *const recompute_names[] = {"none", "selective", NULL};
static const char *const collectives_names[] = {"flat", "hierarchical", NULL};
static const char *const attention_names[] = {"auto", "base", "wide", "wgmma", "cudnn", NULL};  // AttentionKernels
static const char *const space_names[] = {"megatron-mist", "megatron", "zero", "ckpt", "offload", "full", NULL};

const KeySpec config_keys[] = {
    // [model]
    {"model", "family", KEY_ENUM, MC(model.family), 0, 0, family_names, "gpt (GPT-2/3) or llama; sets the defaults of the switches below"},
    {"model", "layers", KEY_INT, MC(model.layers), 1, 4096, NULL, "transformer blocks L"},
    {"model", "hidden", KEY_INT, MC(model.hidden), 1, 1 << 20, NULL, "model width h"},
    {"model", "heads", KEY_INT, MC(model.heads), 1, 4096, NULL, "attention (query) heads; must divide hidden"},
    {"model", "kv_heads", KEY_INT, MC(model.kv_heads), 1, 4096, NULL, "key/value heads (GQA); must divide heads; default = heads"},
    {"model", "ffn_hidden", KEY_INT, MC(model.ffn_hidden), 1, 1 << 22, NULL, "MLP inner width; default 4h (gpt) or 8h/3 rounded up to 256 (llama)"},
    {"model", "vocab", KEY_INT, MC(model.vocab), 2, 1 << 24, NULL, "vocabulary size (256 for byte-level data)"},
    {"model", "vocab_pad", KEY_INT, MC(model.vocab_pad), 1, 4096, NULL, "embedding and LM-head rows rounded up to a multiple of this (1 = none); padded logits never enter the loss"},
    {"model", "seq_len", KEY_INT, MC(model.seq_len), 1, 1 << 20, NULL, "sequence length s in tokens"},
    {"model", "norm", KEY_ENUM, MC(model.norm), 0, 0, norm_names, "layernorm (gpt) or rmsnorm (llama)"},
    {"model", "activation", KEY_ENUM, MC(model.activation), 0, 0, act_names, "gelu (tanh form, gpt) or swiglu (llama)"},
    {"model", "position", KEY_ENUM, MC(model.position), 0, 0, pos_names, "learned absolute positions (gpt), rotary (llama) or none"},
    {"model", "bias", KEY_BOOL, MC(model.bias), 0, 1, NULL, "linear layers and norms carry biases (gpt: true, llama: false)"},
    {"model", "tied_embeddings", KEY_BOOL, MC(model.tied_embeddings), 0, 1, NULL, "the LM head reuses the token embedding (gpt: true)"},
    {"model", "parallel_block", KEY_BOOL, MC(model.parallel_block), 0, 1, NULL, "Falcon-style block: attention and MLP read one normed input"},
    {"model", "rope_theta", KEY_FLOAT, MC(model.rope_theta), 1, 1e9, NULL, "rotary base frequency"},
    {"model", "norm_eps", KEY_FLOAT, MC(model.norm_eps), 1e-12, 1e-1, NULL, "epsilon inside the norms"},
    {"model", "init_std", KEY_FLOAT, MC(model.init_std), 0, 10, NULL, "std of the normal weight init (residual projections / sqrt(2L))"},
    // [train]
    {"train", "global_batch", KEY_INT, MC(train.global_batch), 1, 1 << 30, NULL, "sequences per iteration = b * dp * G in every stage"},
    {"train", "steps", KEY_INT, MC(train.steps), 0, 2147483646, NULL, "iterations to run"},
    {"train", "lr", KEY_FLOAT, MC(train.lr), 0, 10, NULL, "peak learning rate"},
    {"train", "min_lr", KEY_FLOAT, MC(train.min_lr), 0, 10, NULL, "learning rate at the end of the decay; <= lr"},
    {"train", "warmup", KEY_INT, MC(train.warmup), 0, BIG, NULL, "linear warmup iterations"},
    {"train", "schedule", KEY_ENUM, MC(train.schedule), 0, 0, sched_names, "decay after warmup: cosine, linear or constant"},
    {"train", "weight_decay", KEY_FLOAT, MC(train.weight_decay), 0, 10, NULL, "decoupled AdamW weight decay (matrices only)"},
    {"train", "beta1", KEY_FLOAT, MC(train.beta1), 0, 0.999999, NULL, "Adam beta1, in [0, 1)"},
    {"train", "beta2", KEY_FLOAT, MC(train.beta2), 0, 0.999999999, NULL, "Adam beta2, in [0, 1)"},
    {"train", "adam_eps", KEY_FLOAT, MC(train.adam_eps), 1e-30, 1, NULL, "Adam epsilon"},
    {"train", "grad_clip", KEY_FLOAT, MC(train.grad_clip), 0, 1e9, NULL, "clip the global gradient norm to this; 0 = off"},
    {"train", "seed", KEY_INT, MC(train.seed), 0, BIG, NULL, "seed of the weight init and data order"},
    {"train", "precision", KEY_ENUM, MC(train.precision), 0, 0, prec_names, "storage of weights, grads, activations (fp32 master + Adam state always)"},
    {"train", "max_nonfinite", KEY_INT, MC(train.max_nonfinite), 1, 1000000, NULL, "abort after this many consecutive NaN/Inf steps"},
    // [data]
    {"data", "train", KEY_PATH, MC(data.train), 0, 0, NULL, "token shard file or glob (llm.c format)"},
    {"data", "val", KEY_PATH, MC(data.val), 0, 0, NULL, "validation shard file or glob; empty = none"},
    {"data", "val_interval", KEY_INT, MC(data.val_interval), 0, BIG, NULL, "evaluate every N iterations; 0 = never"},
    {"data", "val_batches", KEY_INT, MC(data.val_batches), 1, 1000000, NULL, "global batches per evaluation: val_batches x global_batch sequences under any plan"},
    {"data", "shuffle", KEY_BOOL, MC(data.shuffle), 0, 1, NULL, "visit sequences in a seeded random order"},
    // [cluster]
    {"cluster", "nodes", KEY_INT, MC(cluster.nodes), 1, 100000, NULL, "nodes in the job"},
    {"cluster", "gpus_per_node", KEY_INT, MC(cluster.gpus_per_node), 1, 1024, NULL, "devices (ranks) per node"},
    {"cluster", "hardware", KEY_STRING, MC(cluster.hardware), 0, 0, NULL, "preset (" PROFILE_PRESETS_TEXT ") or a profile file"},
    {"cluster", "device_memory", KEY_BYTES, MC(cluster.device_memory), 0, 1e15, NULL, "bytes per device (e.g. 80GiB); 0 = the profile's capacity"},
    {"cluster", "host_memory", KEY_BYTES, MC(cluster.host_memory), 0, 1e16, NULL, "host bytes per node that its ranks share for offloading; 0 = the profile's"},
    {"cluster", "measure_transfers", KEY_BOOL, MC(cluster.measure_transfers), 0, 1, NULL, "mist-train measures this job's collectives and host copies at start and plans and predicts with them"},
    {"cluster", "collectives", KEY_ENUM, MC(cluster.collectives), 0, 0, collectives_names, "the data-parallel collectives: flat (one ring) or hierarchical (inside the nodes, then across them, pipelined) when the dp group spans nodes"},
    {"cluster", "comm_timeout", KEY_FLOAT, MC(cluster.comm_timeout), 0, 604800, NULL, "seconds a collective or message may wait before the job ends with a report (exit 4); 0 = never"},
    // [plan]
    {"plan", "mode", KEY_ENUM, MC(plan.mode), 0, 0, mode_names, "auto (the planner picks) or fixed ([stage.N] sections)"},
    {"plan", "space", KEY_ENUM, MC(plan.space), 0, 0, space_names, "search space of mode = auto"},
    {"plan", "file", KEY_PATH, MC(plan.file), 0, 0, NULL, "a plan file ([plan] + [stage.N]) to use instead of inline stages"},
    {"plan", "G", KEY_INT, MC(plan.plan.G), 1, 1 << 20, NULL, "micro-batches per iteration (gradient accumulation)"},
    {"plan", "stages", KEY_INT, MC(plan.plan.num_stages), 1, MIST_MAX_STAGES, NULL, "pipeline stages; one [stage.N] section each, N = 0.."},
    {"plan", "virtual", KEY_INT, MC(plan.plan.virtual_chunks), 1, MIST_MAX_STAGES, NULL, "model chunks per pipeline rank (interleaved 1F1B); 1 = plain 1F1B"},
    // [stage.N]
    {"stage", "layers", KEY_INT, SP(layers), 1, 4096, NULL, "consecutive transformer blocks of the stage"},
    {"stage", "dp", KEY_INT, SP(dp), 1, 1 << 20, NULL, "data-parallel degree"},
    {"stage", "tp", KEY_INT, SP(tp), 1, 1024, NULL, "tensor-parallel degree (inside a node)"},
    {"stage", "b", KEY_INT, SP(b), 1, 1 << 20, NULL, "micro-batch size per data-parallel rank"},
    {"stage", "shard", KEY_ENUM, SP(zero), 0, 0, shard_code_names, "scopes of W, G, O: N replicated, I sharded in a group of shard_group dp ranks, G over all dp (W <= G <= O; docs/paro.md)"},
    // a shorthand of shard (the same field, after it): read, never written (config_key_is_shorthand)
    {"stage", "zero", KEY_INT, SP(zero), 0, 3, NULL, "ZeRO level, shorthand of shard: 0 = NNN, 1 = NNG, 2 = NGG, 3 = GGG"},
    {"stage", "shard_group", KEY_INT, SP(shard_group), 0, 1 << 20, NULL, "dp ranks per group of shard's I scope (consecutive, dividing dp); 0 = those of one node, gpus_per_node / tp"},
    {"stage", "ckpt", KEY_INT, SP(ckpt), 0, 4096, NULL, "blocks (the last ones of the stage) that recompute activations"},
    {"stage", "sp", KEY_BOOL, SP(sp), 0, 1, NULL, "sequence parallelism: norms and residuals on T/tp rows of each tp rank"},
    {"stage", "recompute", KEY_ENUM, SP(recompute), 0, 0, recompute_names, "none, or selective: blocks not checkpointed recompute their attention core"},
    {"stage", "lean", KEY_BOOL, SP(lean), 0, 1, NULL, "memory-lean layers: GELU and norm backward from their outputs (docs/lean-layers.md)"},
    {"stage", "wo", KEY_FLOAT, SP(wo), 0, 1, NULL, "fraction of weights kept in host memory"},
    {"stage", "go", KEY_FLOAT, SP(go), 0, 1, NULL, "fraction of gradients kept in host memory"},
    {"stage", "oo", KEY_FLOAT, SP(oo), 0, 1, NULL, "fraction of optimizer state kept in host memory"},
    {"stage", "ao", KEY_FLOAT, SP(ao), 0, 1, NULL, "fraction of saved activations kept in host memory"},
    // [checkpoint]
    {"checkpoint", "dir", KEY_PATH, MC(checkpoint.dir), 0, 0, NULL, "directory of checkpoints; empty = none"},
    {"checkpoint", "interval", KEY_INT, MC(checkpoint.interval), 0, BIG, NULL, "save every N iterations; 0 = only at the end"},
    {"checkpoint", "keep", KEY_INT, MC(checkpoint.keep), 1, 1000000, NULL, "keep the newest N checkpoints"},
    {"checkpoint", "resume", KEY_BOOL, MC(checkpoint.resume), 0, 1, NULL, "resume from dir/latest when it exists"},
    // [init]
    {"init", "from", KEY_PATH, MC(init.from), 0, 0, NULL, "initial weights: a safetensors file (Hugging Face GPT-2/Llama names) or an llm.c GPT-2 checkpoint; empty = random"},
    // [log]
    {"log", "interval", KEY_INT, MC(log.interval), 1, BIG, NULL, "print a line every N iterations"},
    {"log", "jsonl", KEY_PATH, MC(log.jsonl), 0, 0, NULL, "one JSON object per iteration; empty = off"},
    {"log", "summary", KEY_PATH, MC(log.summary), 0, 0, NULL, "one JSON object at the end of the run; empty = off"},
    {"log", "trace", KEY_PATH, MC(log.trace), 0, 0, NULL, "Chrome trace of one measured iteration (docs/traces.md); empty = off"},
    {"log", "trace_iteration", KEY_INT, MC(log.trace_iteration), 1, BIG, NULL, "the iteration [log] trace records (1-based, as the log counts; clamped into the run)"},
    {"log", "sample_interval", KEY_INT, MC(log.sample_interval), 0, BIG, NULL, "print 64 tokens of generated text every N iterations (one pipeline stage); 0 = off"},
    // [runtime]
    {"runtime", "attention", KEY_ENUM, MC(runtime.attention), 0, 0, attention_names, "the CUDA attention kernels: auto (wgmma on Hopper with an sm_90a build, else base), base, wide, wgmma, or cudnn (faster, not deterministic); MIST_CUDA_ATTENTION overrides it"},
};
const int config_num_keys = (int)(sizeof config_keys / sizeof config_keys[0]);

int config_key_is_shorthand(int key) {
    const KeySpec *k = &config_keys[key];
    for (int i = 0; i < key; i++)
        if (!strcmp(config_keys[i].section, k->section) && config_keys[i].offset == k->offset) return 1;
    return 0;
}

int config_key_find(const char *section, const char *name) {
    for (int i = 0; i < config_num_keys; i++)
        if (!strcmp(config_keys[i].section, section) && !strcmp(config_keys[i].name, name)) return i;
    return -1;
}
