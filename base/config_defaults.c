// Every key's default (docs/config.md lists them): the configuration before the
// INI file and the -o overrides are read over it.
#include <stdio.h>
#include <string.h>
#include "base/config_load.h"
#include "base/schema.h"

void config_defaults(MistConfig *cfg) {
    memset(cfg, 0, sizeof *cfg);
    ModelConfig *m = &cfg->model;
    m->family = FAMILY_GPT;
    m->layers = 12;
    m->hidden = 768;
    m->heads = 12;
    m->vocab = 50257;
    m->vocab_pad = MODEL_VOCAB_PAD_DEFAULT;
    m->seq_len = 1024;
    m->norm = NORM_LAYERNORM;
    m->activation = ACT_GELU;
    m->position = POS_LEARNED;
    m->bias = 1;
    m->tied_embeddings = 1;
    m->rope_theta = 10000.0;
    m->norm_eps = 1e-5;
    m->init_std = 0.02;
    TrainConfig *t = &cfg->train;
    t->global_batch = 8;
    t->steps = 100;
    t->lr = 6e-4;
    t->min_lr = 6e-5;
    t->warmup = 10;
    t->schedule = SCHED_COSINE;
    t->weight_decay = 0.1;
    t->beta1 = 0.9;
    t->beta2 = 0.95;
    t->adam_eps = 1e-8;
    t->grad_clip = 1.0;
    t->seed = 1234;
    t->precision = PREC_BF16;
    t->max_nonfinite = 5;
    cfg->data.val_interval = 0;
    cfg->data.val_batches = 4;
    cfg->cluster.nodes = 1;
    cfg->cluster.gpus_per_node = 8;
    snprintf(cfg->cluster.hardware, sizeof cfg->cluster.hardware, "dgx-h100");
    cfg->cluster.comm_timeout = 600;  // PyTorch's NCCL default; a step that long is rare
    cfg->plan.mode = PLAN_AUTO;
    cfg->plan.space = SPACE_FULL;
    cfg->plan.plan.G = 1;
    cfg->plan.plan.num_stages = 1;
    cfg->plan.plan.virtual_chunks = 1;
    for (int s = 0; s < MIST_MAX_STAGES; s++) cfg->plan.plan.stage[s] = (StagePlan){.dp = 1, .tp = 1, .b = 1};
    cfg->checkpoint.interval = 0;
    cfg->checkpoint.keep = 3;
    cfg->checkpoint.resume = 1;
    cfg->log.interval = 1;
    cfg->log.trace_iteration = 2;  // the first iteration carries one-time costs
}
