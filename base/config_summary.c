// The configuration as a readable summary (--dry-run) and the hardware profile
// a run prices plans with (config_load.h).
#include <stdio.h>
#include "base/config_load.h"
#include "base/plan_file.h"
#include "base/schema.h"

static const char *or_none(const char *s) { return s[0] ? s : "(none)"; }

void config_print_summary(const MistConfig *cfg, FILE *f) {
    const ModelConfig *m = &cfg->model;
    const TrainConfig *t = &cfg->train;
    static const char *const norms[] = {"layernorm", "rmsnorm"}, *const acts[] = {"gelu", "swiglu"},
                             *const pos[] = {"learned", "rotary", "none"},
                             *const sched[] = {"cosine", "linear", "constant"},
                             *const spaces[] = {"megatron-mist", "megatron", "zero", "ckpt", "offload", "full"};
    fprintf(f, "configuration: %s\n", cfg->source);
    fprintf(f, "  model      %s: layers %d, hidden %d, heads %d (kv %d), ffn %d, vocab %d, seq_len %d\n",
            config_family_name(m->family), m->layers, m->hidden, m->heads, m->kv_heads, m->ffn_hidden, m->vocab,
            m->seq_len);
    fprintf(f, "             norm %s, activation %s, position %s, bias %s, tied %s, parallel block %s\n",
            norms[m->norm], acts[m->activation], pos[m->position], m->bias ? "yes" : "no",
            m->tied_embeddings ? "yes" : "no", m->parallel_block ? "yes" : "no");
    fprintf(f, "  train      global_batch %lld, steps %lld, lr %g -> %g (%s, warmup %lld), weight_decay %g, "
            "grad_clip %g, seed %llu, precision %s\n", (long long)t->global_batch, (long long)t->steps, t->lr,
            t->min_lr, sched[t->schedule], (long long)t->warmup, t->weight_decay, t->grad_clip,
            (unsigned long long)t->seed, config_precision_name(t->precision));
    fprintf(f, "  data       train %s, val %s\n", or_none(cfg->data.train), or_none(cfg->data.val));
    char dev[32] = "profile's", host[32] = "unlimited";
    if (cfg->cluster.device_memory) snprintf(dev, sizeof dev, "%.3g GiB", cfg->cluster.device_memory / 1073741824.0);
    if (cfg->cluster.host_memory) snprintf(host, sizeof host, "%.3g GiB", cfg->cluster.host_memory / 1073741824.0);
    fprintf(f, "  cluster    %d node(s) x %d device(s), hardware %s, device memory %s, host memory %s\n",
            cfg->cluster.nodes, cfg->cluster.gpus_per_node, cfg->cluster.hardware, dev, host);
    if (cfg->init.from[0]) fprintf(f, "  init       from %s\n", cfg->init.from);
    fprintf(f, "  checkpoint dir %s, interval %lld, keep %d, resume %s\n", or_none(cfg->checkpoint.dir),
            (long long)cfg->checkpoint.interval, cfg->checkpoint.keep, cfg->checkpoint.resume ? "yes" : "no");
    fprintf(f, "  log        interval %lld, jsonl %s, summary %s\n", (long long)cfg->log.interval,
            or_none(cfg->log.jsonl), or_none(cfg->log.summary));
    const Plan *p = &cfg->plan.plan;
    if (cfg->plan.mode == PLAN_AUTO && !cfg->plan.file[0]) {
        fprintf(f, "  plan       auto (space %s)\n", spaces[cfg->plan.space]);
        return;
    }
    fprintf(f, "  plan       fixed%s%s: G %d, %d stage(s), %d ranks\n", cfg->plan.file[0] ? " from " : "",
            cfg->plan.file, p->G, p->num_stages, plan_world_size(p));
    if (plan_virtual(p) > 1)
        fprintf(f, "  interleaved: virtual %d, the stages are chunks on %d pipeline ranks (chunk c on rank c mod %d)\n",
                plan_virtual(p), plan_pipeline_size(p), plan_pipeline_size(p));
    plan_print_stages(p, f);
}

int config_profile(const MistConfig *cfg, HwProfile *out, char *err, size_t errlen) {
    if (cfg->cluster.measured_valid) {
        *out = cfg->cluster.measured;
        return 0;
    }
    return profile_load(out, cfg->cluster.hardware[0] ? cfg->cluster.hardware : "cpu", err, errlen);
}
