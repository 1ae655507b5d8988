// Analyze a fixed plan with the stage cost model (see analyze.h).
#include <math.h>
#include <string.h>
#include "base/paro.h"
#include "models/model.h"
#include "models/model_flops.h"
#include "planner/analyze.h"
#include "planner/interleave.h"

int64_t host_capacity_per_rank(const MistConfig *cfg, const HwProfile *hw, int ranks_per_node) {
    int64_t node = cfg->cluster.host_memory > 0 ? cfg->cluster.host_memory : hw->host_memory_bytes;
    if (node <= 0) return 0;
    return node / (ranks_per_node > 0 ? ranks_per_node : 1);
}

// Interleaved: each pipeline rank holds its v chunks at once, every chunk with
// its own activation slots for the micro-batches it holds at its own peak
// (p + 1 of them, stage_p_interleaved) and its own buffers, so a rank's device
// peak is the sum over its chunks of max(peak fwd, peak bwd), its host bytes
// the sum of theirs; the rank fits when both sums do, and then each of its
// chunks is marked as the rank is.
static void analyze_ranks(PlanAnalysis *a) {
    int P = a->pipeline_ranks;
    a->all_fit = 1;
    a->first_bad = -1;
    for (int r = 0; r < P; r++) {
        int64_t dev = 0, host = 0;
        for (int c = r; c < a->num_stages; c += P) dev += a->stage[c].peak, host += a->stage[c].host;
        a->rank_peak[r] = dev, a->rank_host[r] = host;
        int64_t short_dev = dev > a->capacity ? dev - a->capacity : 0;
        int64_t short_host = a->host_capacity > 0 && host > a->host_capacity ? host - a->host_capacity : 0;
        for (int c = r; c < a->num_stages; c += P) {
            StageAnalysis *st = &a->stage[c];
            st->shortfall = short_dev, st->host_shortfall = short_host;
            st->fits = !short_dev && !short_host;
        }
        if ((short_dev || short_host) && a->all_fit) a->all_fit = 0, a->first_bad = r;
    }
}

int plan_analyze(PlanAnalysis *a, const MistConfig *cfg, const Plan *plan, const HwProfile *hw, const OpTable *table,
                 char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    const ModelConfig *m = &cfg->model;
    int S = plan->num_stages;
    if (S < 1 || S > MIST_MAX_STAGES) {
        snprintf(err, errlen, "plan: num_stages = %d (allowed: 1..%d)", S, MIST_MAX_STAGES);
        return -1;
    }
    if (plan->G < 1) {
        snprintf(err, errlen, "plan: G = %d (allowed: >= 1 micro-batches per iteration)", plan->G);
        return -1;
    }
    int layers = 0;
    for (int i = 0; i < S; i++) {
        const StagePlan *sp = &plan->stage[i];
        if (sp->layers < 1 || sp->dp < 1 || sp->tp < 1 || sp->b < 1 || sp->zero < 0 || sp->zero >= SHARD_CODES ||
            sp->ckpt < 0 || sp->ckpt > sp->layers) {
            snprintf(err, errlen,
                     "plan: [stage.%d] layers=%d dp=%d tp=%d b=%d zero=%d ckpt=%d (allowed: layers, dp, tp, b >= 1; "
                     "zero (the shard code) 0..9; ckpt 0..layers)",
                     i, sp->layers, sp->dp, sp->tp, sp->b, sp->zero, sp->ckpt);
            return -1;
        }
        double r[4] = {sp->wo, sp->go, sp->oo, sp->ao};
        for (int k = 0; k < 4; k++)
            if (!(r[k] >= 0 && r[k] <= 1)) {
                snprintf(err, errlen, "plan: [stage.%d] offload ratio %s = %g (allowed: 0..1)", i,
                         (const char *[]){"wo", "go", "oo", "ao"}[k], r[k]);
                return -1;
            }
        int64_t batch = (int64_t)sp->b * sp->dp * plan->G;
        if (batch != cfg->train.global_batch) {
            snprintf(err, errlen,
                     "plan: [stage.%d] b*dp*G = %d*%d*%d = %lld but [train] global_batch = %lld (hint: every stage "
                     "must process the whole batch)",
                     i, sp->b, sp->dp, plan->G, (long long)batch, (long long)cfg->train.global_batch);
            return -1;
        }
        layers += sp->layers;
    }
    if (layers != m->layers) {
        snprintf(err, errlen, "plan: the stages hold %d blocks but [model] layers = %d", layers, m->layers);
        return -1;
    }
    a->num_stages = S;
    a->G = plan->G;
    a->virtual_chunks = plan_virtual(plan);
    a->pipeline_ranks = plan_pipeline_size(plan);
    if (a->virtual_chunks > 1 && (S % a->virtual_chunks || a->pipeline_ranks < 2 || plan->G % a->pipeline_ranks)) {
        snprintf(err, errlen, "plan: virtual = %d with %d stages and G = %d (allowed: stages a multiple of virtual, "
                 "at least 2 pipeline ranks, G a multiple of stages / virtual)", a->virtual_chunks, S, plan->G);
        return -1;
    }
    a->world = plan_world_size(plan);
    a->params_total = model_param_count(m);
    a->capacity = cfg->cluster.device_memory > 0 ? cfg->cluster.device_memory : profile_capacity_bytes(hw);
    int gpn = cfg->cluster.gpus_per_node > 0 ? cfg->cluster.gpus_per_node : hw->gpus_per_node;
    a->ranks_per_node = gpn < a->world ? gpn : a->world;
    a->host_capacity = host_capacity_per_rank(cfg, hw, a->ranks_per_node);
    snprintf(a->hardware, sizeof a->hardware, "%s", hw->name);
    a->staged_collectives = hw->staged_collectives;

    // one stage model per (has_pre, has_post), built when first needed
    StageModel models[2][2];
    int built[2][2] = {{0, 0}, {0, 0}};
    double t[MIST_MAX_STAGES], d[MIST_MAX_STAGES];
    a->all_fit = 1;
    a->first_bad = -1;
    for (int i = 0; i < S; i++) {
        int has_pre = i == 0, has_post = i == S - 1;
        if (!built[has_pre][has_post]) {
            if (stage_model_build(&models[has_pre][has_post], cfg, hw, table, has_pre, has_post, err, errlen) != 0) {
                for (int u = 0; u < 2; u++)
                    for (int v = 0; v < 2; v++)
                        if (built[u][v]) stage_model_free(&models[u][v]);
                return -1;
            }
            built[has_pre][has_post] = 1;
        }
        StageAnalysis *st = &a->stage[i];
        st->sp = plan->stage[i];
        st->first_layer = plan_first_layer(plan, i);
        st->last_layer = st->first_layer + st->sp.layers - 1;
        st->p = S - i - 1 < plan->G - 1 ? S - i - 1 : plan->G - 1;
        if (plan_virtual(plan) > 1) st->p = stage_p_interleaved(i, plan_pipeline_size(plan), plan_virtual(plan), plan->G);
        StageConfig c = {st->sp, plan->G, st->p};
        stage_eval_scalar(&models[has_pre][has_post], &c, st->out);
        double peak = fmax(st->out[ST_PEAK_FWD], st->out[ST_PEAK_BWD]);
        st->peak = (int64_t)ceil(peak);
        st->shortfall = st->peak > a->capacity ? st->peak - a->capacity : 0;
        st->host = (int64_t)ceil(st->out[ST_HOST]);
        st->host_shortfall = a->host_capacity > 0 && st->host > a->host_capacity ? st->host - a->host_capacity : 0;
        st->fits = !st->shortfall && !st->host_shortfall;
        if (!st->fits && a->all_fit) {
            a->all_fit = 0;
            a->first_bad = i;
        }
        t[i] = st->out[ST_T];
        d[i] = st->out[ST_D];
        a->hw_flops += st->out[ST_HW_FLOPS] * plan->G * st->sp.dp * st->sp.tp;
    }
    for (int u = 0; u < 2; u++)
        for (int v = 0; v < 2; v++)
            if (built[u][v]) stage_model_free(&models[u][v]);
    a->iteration_seconds = pipeline_1f1b_seconds(S, plan->G, t, d);
    if (plan_virtual(plan) > 1) {
        a->iteration_seconds = pipeline_interleaved_seconds(a->pipeline_ranks, a->virtual_chunks, plan->G, t, d);
        analyze_ranks(a);
    }
    a->model_flops = model_flops_per_iteration(cfg);
    a->peak_flops = hw->peak_flops[compute_dtype_of(cfg)];
    double tokens = (double)cfg->train.global_batch * m->seq_len;
    if (a->iteration_seconds > 0) {
        a->tokens_per_second = tokens / a->iteration_seconds;
        a->mfu = a->model_flops / (a->iteration_seconds * a->world * a->peak_flops);
        a->hfu = a->hw_flops / (a->iteration_seconds * a->world * a->peak_flops);
    }
    optable_plan_misses(table, cfg, plan, &a->table_misses);
    return 0;
}

// bytes as a short human figure
static const char *human(double bytes, char *buf, size_t len) {
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (fabs(bytes) >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, len, u ? "%.2f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}

const char *analysis_seconds_text(double s, char *buf, size_t len) {
    if (s >= 1) snprintf(buf, len, "%.3f s", s);
    else if (s >= 1e-3) snprintf(buf, len, "%.3f ms", s * 1e3);
    else snprintf(buf, len, "%.1f us", s * 1e6);
    return buf;
}

static const char *zero_name(int z) {
    static const char *names[] = {"0 (DP)", "1 (opt)", "2 (+grad)", "3 (+weight)"};
    if (z >= 0 && z <= 3) return names[z];
    return z < SHARD_CODES ? shard_code_names[z] : "?";  // PaRO's codes by their scopes (base/paro.h)
}

// Interleaved plans: what each pipeline rank holds together (analyze_ranks).
static void analysis_print_ranks(const PlanAnalysis *a, FILE *f) {
    char b1[32], b2[32], b3[32];
    int P = a->pipeline_ranks;
    fprintf(f, "\ninterleaved 1F1B: virtual = %d, %d pipeline ranks, chunk c (a stage above) on rank c mod %d; "
               "a rank's peak = the sum of its chunks' peaks:\n", a->virtual_chunks, P, P);
    for (int r = 0; r < P; r++) {
        char chunks[128];
        size_t at = 0;
        for (int c = r; c < a->num_stages && at + 8 < sizeof chunks; c += P)
            at += (size_t)snprintf(chunks + at, sizeof chunks - at, "%s%d", c == r ? "" : " ", c);
        const StageAnalysis *s = &a->stage[r];
        fprintf(f, "  rank %d: chunks %s, peak %s, host %s, fits %s\n", r, chunks,
                human((double)a->rank_peak[r], b1, sizeof b1), human((double)a->rank_host[r], b2, sizeof b2),
                s->fits ? "yes" : "NO");
        if (s->shortfall)
            fprintf(f, "  rank %d does not fit: peak %lld bytes > capacity %lld bytes, short by %lld bytes (%s)\n", r,
                    (long long)a->rank_peak[r], (long long)a->capacity, (long long)s->shortfall,
                    human((double)s->shortfall, b3, sizeof b3));
        if (s->host_shortfall)
            fprintf(f, "  rank %d does not fit the host: %lld bytes > %lld bytes per rank\n", r,
                    (long long)a->rank_host[r], (long long)a->host_capacity);
    }
}

void analysis_print_text(const PlanAnalysis *a, const MistConfig *cfg, FILE *f) {
    char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32], b7[32], b8[32];
    const ModelConfig *m = &cfg->model;
    char kv[32] = "";
    if (m->kv_heads != m->heads) snprintf(kv, sizeof kv, " (%d kv)", m->kv_heads);
    fprintf(f, "model: %d %sblocks, hidden %d, %d heads%s, ffn %d, seq %d, vocab %d, %lld parameters\n", m->layers,
            m->parallel_block ? "parallel " : "", m->hidden, m->heads, kv, m->ffn_hidden, m->seq_len, m->vocab,
            (long long)a->params_total);
    // the node shape the collectives and the host memory were priced on (tp inside a node)
    int nodes = (a->world + a->ranks_per_node - 1) / a->ranks_per_node;
    fprintf(f, "plan: %d stage(s), G = %d micro-batches, %d ranks (%d node(s) x %d), hardware %s%s, %s per device\n\n",
            a->num_stages, a->G, a->world, nodes, a->ranks_per_node, a->hardware,
            a->staged_collectives ? " (collectives staged through host memory)" : "",
            human((double)a->capacity, b1, sizeof b1));
    fprintf(f, "%-5s %-9s %-7s %3s %-11s %-5s %-23s %11s %11s %11s %11s %s\n", "stage", "layers", "mesh", "b", "zero",
            "ckpt", "offload w/g/o/a", "t", "d", "peak fwd", "peak bwd", "fits");
    for (int i = 0; i < a->num_stages; i++) {
        const StageAnalysis *s = &a->stage[i];
        char layers[24], mesh[24], off[40];
        snprintf(layers, sizeof layers, "%d-%d", s->first_layer, s->last_layer);
        snprintf(mesh, sizeof mesh, "%dx%d", s->sp.dp, s->sp.tp);
        snprintf(off, sizeof off, "%.2f/%.2f/%.2f/%.2f", s->sp.wo, s->sp.go, s->sp.oo, s->sp.ao);
        fprintf(f, "%-5d %-9s %-7s %3d %-11s %-5d %-23s %11s %11s %11s %11s %s\n", i, layers, mesh, s->sp.b,
                zero_name(s->sp.zero), s->sp.ckpt, off, analysis_seconds_text(s->out[ST_T], b1, sizeof b1),
                analysis_seconds_text(s->out[ST_D], b2, sizeof b2), human(s->out[ST_PEAK_FWD], b3, sizeof b3),
                human(s->out[ST_PEAK_BWD], b4, sizeof b4),
                s->fits ? "yes" : !s->host_shortfall ? "NO" : !s->shortfall ? "NO (host)" : "NO (+host)");
    }
    for (int i = 0; i < a->num_stages; i++) {  // selective recompute: which blocks run attention twice
        const StageAnalysis *s = &a->stage[i];
        int ck = s->sp.ckpt < s->sp.layers ? s->sp.ckpt : s->sp.layers;
        if (s->sp.recompute == RECOMPUTE_SELECTIVE)
            fprintf(f, "stage %d: recompute = selective: %d block(s) keep no att, lse and recompute them in backward\n",
                    i, s->sp.layers - ck);
        if (s->sp.lean)  // docs/lean-layers.md
            fprintf(f, "stage %d: lean = 1: %d block(s) run the GELU's and the norms' backward from their outputs\n", i,
                    s->sp.layers - ck);
    }
    fprintf(f, "\nmemory per rank (dp x tp mesh; dp = data-parallel, tp = tensor-parallel):\n");
    for (int i = 0; i < a->num_stages; i++) {
        const StageAnalysis *s = &a->stage[i];
        fprintf(f, "  stage %d: weights %s, grads %s, optimizer %s, activations %s, buffers fwd/bwd %s/%s, "
                   "transient fwd/bwd %s/%s",
                i, human(s->out[ST_WEIGHTS], b1, sizeof b1), human(s->out[ST_GRADS], b2, sizeof b2),
                human(s->out[ST_OPTIMIZER], b3, sizeof b3), human(s->out[ST_ACTIVATIONS], b4, sizeof b4),
                human(s->out[ST_BUFFERS_FWD], b5, sizeof b5), human(s->out[ST_BUFFERS_BWD], b6, sizeof b6),
                human(s->out[ST_TRANSIENT_FWD], b7, sizeof b7), human(s->out[ST_TRANSIENT_BWD], b8, sizeof b8));
        if (s->out[ST_LOGITS] > 0) fprintf(f, ", logits+loss %s", human(s->out[ST_LOGITS], b1, sizeof b1));
        fprintf(f, ", host %s\n", human(s->out[ST_HOST], b1, sizeof b1));
    }
    if (a->virtual_chunks > 1) analysis_print_ranks(a, f);
    fprintf(f, "\niteration: %s, %.0f tokens/s\n", analysis_seconds_text(a->iteration_seconds, b1, sizeof b1), a->tokens_per_second);
    // HFU counts what the kernels execute: recompute in, the causal half of the score matrix
    // only, so without checkpointing it is a little below MFU (Megatron's full s^2)
    fprintf(f, "model FLOPs per iteration: %.4g (MFU %.1f%%; HFU %.1f%%: executed FLOPs, recompute in, causal attention "
               "halved; of %.4g FLOP/s peak per device)\n",
            a->model_flops, 100 * a->mfu, 100 * a->hfu, a->peak_flops);
    for (int i = 0; i < (a->virtual_chunks > 1 ? 0 : a->num_stages); i++) {  // interleaved: per rank above
        const StageAnalysis *s = &a->stage[i];
        if (s->shortfall)
            fprintf(f, "stage %d does not fit: peak %lld bytes > capacity %lld bytes, short by %lld bytes (%s)\n", i,
                    (long long)s->peak, (long long)a->capacity, (long long)s->shortfall,
                    human((double)s->shortfall, b1, sizeof b1));
        if (s->host_shortfall)
            fprintf(f, "stage %d does not fit the host: %lld bytes per rank > %lld bytes (the node's host memory over its "
                       "%d ranks), short by %lld bytes (%s)\n",
                    i, (long long)s->host, (long long)a->host_capacity, a->ranks_per_node, (long long)s->host_shortfall,
                    human((double)s->host_shortfall, b1, sizeof b1));
    }
}

static long long bytes_int(double v) { return (long long)ceil(v); }

void analysis_print_json(const PlanAnalysis *a, const MistConfig *cfg, FILE *f) {
    fprintf(f, "{\"params_total\": %lld, \"flops_per_iteration\": %.17g, \"hw_flops_per_iteration\": %.17g, ",
            (long long)a->params_total, a->model_flops, a->hw_flops);
    fprintf(f, "\"iteration_seconds\": %.17g, \"tokens_per_second\": %.17g, \"mfu\": %.17g, \"hfu\": %.17g, ",
            a->iteration_seconds, a->tokens_per_second, a->mfu, a->hfu);
    fprintf(f, "\"peak_flops_per_device\": %.17g, \"hardware\": \"", a->peak_flops);
    for (const char *c = a->hardware; *c; c++) {
        if (*c == '"' || *c == '\\') fputc('\\', f);
        if ((unsigned char)*c >= 0x20) fputc(*c, f);
    }
    fprintf(f, "\", \"staged_collectives\": %s, \"capacity_bytes\": %lld, \"host_capacity_bytes\": %lld, "
               "\"world_size\": %d, \"ranks_per_node\": %d, \"G\": %d, \"global_batch\": %lld, ",
            a->staged_collectives ? "true" : "false", (long long)a->capacity, (long long)a->host_capacity, a->world,
            a->ranks_per_node, a->G, (long long)cfg->train.global_batch);
    fprintf(f, "\"fits\": %s, \"stages\": [", a->all_fit ? "true" : "false");
    for (int i = 0; i < a->num_stages; i++) {
        const StageAnalysis *s = &a->stage[i];
        const double *o = s->out;
        fprintf(f, "%s{\"layers\": [%d, %d], \"dp\": %d, \"tp\": %d, \"b\": %d, \"zero\": %d, \"ckpt\": %d, ",
                i ? ", " : "", s->first_layer, s->last_layer, s->sp.dp, s->sp.tp, s->sp.b, s->sp.zero, s->sp.ckpt);
        fprintf(f, "\"recompute\": \"%s\", ", s->sp.recompute == RECOMPUTE_SELECTIVE ? "selective" : "none");
        fprintf(f, "\"offload\": {\"wo\": %.17g, \"go\": %.17g, \"oo\": %.17g, \"ao\": %.17g}, \"p\": %d, ", s->sp.wo,
                s->sp.go, s->sp.oo, s->sp.ao, s->p);
        fprintf(f, "\"sp\": %d, ", s->sp.sp);  // sequence parallelism
        fprintf(f, "\"lean\": %d, ", s->sp.lean);  // memory-lean layers
        fprintf(f, "\"t_stable_seconds\": %.17g, \"t_delta_seconds\": %.17g, ", o[ST_T], o[ST_D]);
        fprintf(f, "\"fwd_first_seconds\": %.17g, \"fwd_other_seconds\": %.17g, \"bwd_last_seconds\": %.17g, "
                   "\"bwd_other_seconds\": %.17g, ",
                o[ST_FWD_FIRST], o[ST_FWD_OTHER], o[ST_BWD_LAST], o[ST_BWD_OTHER]);
        fprintf(f, "\"peak_bytes_fwd\": %lld, \"peak_bytes_bwd\": %lld, \"fits\": %s, \"shortfall_bytes\": %lld, "
                   "\"host_shortfall_bytes\": %lld, ",
                bytes_int(o[ST_PEAK_FWD]), bytes_int(o[ST_PEAK_BWD]), s->fits ? "true" : "false",
                (long long)s->shortfall, (long long)s->host_shortfall);
        fprintf(f, "\"memory\": {\"weights\": %lld, \"grads\": %lld, \"optimizer\": %lld, \"activations\": %lld, ",
                bytes_int(o[ST_WEIGHTS]), bytes_int(o[ST_GRADS]), bytes_int(o[ST_OPTIMIZER]),
                bytes_int(o[ST_ACTIVATIONS]));
        fprintf(f, "\"buffers\": %lld, \"buffers_fwd\": %lld, \"buffers_bwd\": %lld, \"transient_fwd\": %lld, "
                   "\"transient_bwd\": %lld, \"logits\": %lld, \"host_bytes\": %lld}}",
                bytes_int(fmax(o[ST_BUFFERS_FWD], o[ST_BUFFERS_BWD])), bytes_int(o[ST_BUFFERS_FWD]),
                bytes_int(o[ST_BUFFERS_BWD]), bytes_int(o[ST_TRANSIENT_FWD]), bytes_int(o[ST_TRANSIENT_BWD]),
                bytes_int(o[ST_LOGITS]), bytes_int(o[ST_HOST]));
    }
    fprintf(f, "]");
    if (a->virtual_chunks > 1) {  // interleaved: the stages are chunks; what each pipeline rank holds
        fprintf(f, ", \"virtual\": %d, \"pipeline_ranks\": [", a->virtual_chunks);
        for (int r = 0; r < a->pipeline_ranks; r++)
            fprintf(f, "%s{\"peak_bytes\": %lld, \"host_bytes\": %lld, \"fits\": %s}", r ? ", " : "",
                    (long long)a->rank_peak[r], (long long)a->rank_host[r], a->stage[r].fits ? "true" : "false");
        fprintf(f, "]");
    }
    fprintf(f, ", \"fallbacks\": ");  // the op table's uncovered shapes (optable_report.h)
    optable_misses_print_json(&a->table_misses, f);
    fprintf(f, "}\n");
}
