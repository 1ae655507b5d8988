// What a search reports: its statistics (a text block or JSON fields) and,
// when no plan fits, the closest plan and by how much it misses.
#include <stdio.h>
#include "expr/expr.h"
#include "models/model.h"
#include "planner/search.h"

void search_stats_print_text(const SearchStats *s, const SearchOptions *o, FILE *f) {
    fprintf(f, "\nsearch: space %s, %d node(s) x %d GPU(s), %d thread(s) (%s), %.3f s wall\n",
            search_space_name(o->space), o->nodes, o->gpus_per_node, o->threads > 1 ? o->threads : 1, expr_simd_name(),
            s->seconds);
    fprintf(f, "  candidates evaluated %lld (%lld fit; %lld timed) in %lld batches, %.3f s evaluating, %lld stage "
               "models compiled in %.3f s\n",
            s->candidates, s->candidates_fit, s->time_evaluations, s->classes, s->eval_seconds, s->models_built,
            s->model_seconds);
    fprintf(f, "  combinations (stages, G, meshes) %lld, searched %lld, the rest bounded out\n", s->combos,
            s->combos_searched);
    fprintf(f, "  frontiers %lld, %lld points (mean %.1f, largest %d)\n", s->frontiers, s->frontier_points,
            s->frontiers ? (double)s->frontier_points / s->frontiers : 0.0, s->frontier_max_points);
    fprintf(f, "  inter-stage solves: %lld by the label-setting DP (%.3f ms)", s->dp_solves, 1e3 * s->dp_seconds);
    if (s->lp_solves)
        fprintf(f, ", %lld lp_solve MILP confirmation (%.3f ms): %s\n", s->lp_solves, 1e3 * s->lp_seconds,
                s->lp_agrees > 0 ? "same optimum" : "DISAGREES");
    else
        fprintf(f, "\n");
}

void search_stats_print_json(const SearchStats *s, const SearchOptions *o, FILE *f) {
    fprintf(f, "\"space\": \"%s\", \"nodes\": %d, \"gpus_per_node\": %d, \"threads\": %d, \"simd\": \"%s\", "
               "\"seconds\": %.6g, ",
            search_space_name(o->space), o->nodes, o->gpus_per_node, o->threads > 1 ? o->threads : 1, expr_simd_name(),
            s->seconds);
    fprintf(f, "\"candidates\": %lld, \"candidates_fit\": %lld, \"time_evaluations\": %lld, \"batches\": %lld, "
               "\"eval_seconds\": %.6g, ",
            s->candidates, s->candidates_fit, s->time_evaluations, s->classes, s->eval_seconds);
    fprintf(f, "\"models_built\": %lld, \"model_seconds\": %.6g, \"combinations\": %lld, "
               "\"combinations_searched\": %lld, ",
            s->models_built, s->model_seconds, s->combos, s->combos_searched);
    fprintf(f, "\"frontiers\": %lld, \"frontier_points\": %lld, \"frontier_max_points\": %d, ", s->frontiers,
            s->frontier_points, s->frontier_max_points);
    fprintf(f, "\"dp_solves\": %lld, \"dp_seconds\": %.6g, \"lp_solves\": %lld, \"lp_seconds\": %.6g, "
               "\"lp_agrees\": %s",
            s->dp_solves, s->dp_seconds, s->lp_solves, s->lp_seconds,
            s->lp_agrees < 0 ? "null" : s->lp_agrees ? "true" : "false");
}

void search_print_no_fit(const SearchResult *r, const MistConfig *cfg, FILE *f) {
    if (r->states_bytes > 0)
        fprintf(f, "no plan can fit: the model's states alone (%lld parameters x weight, gradient and optimizer "
                   "bytes) need %.2f GiB, more than all devices and hosts hold together (%.2f GiB: %d ranks x "
                   "(%.2f GiB device + %.2f GiB host)); the search was skipped.\n",
                (long long)model_param_count(&cfg->model), r->states_bytes / 1073741824.0,
                r->cluster_bytes / 1073741824.0, r->ranks,
                r->capacity / 1073741824.0, r->host_capacity / 1073741824.0);
    if (!r->have_closest) {
        fprintf(f, "no plan in the space fits in %lld bytes per device, and no layout could be evaluated\n",
                (long long)r->capacity);
        return;
    }
    const Plan *p = &r->closest;
    const StagePlan *w = &p->stage[r->closest_stage];
    char host[96] = "";
    if (r->host_capacity > 0) snprintf(host, sizeof host, " and %.2f GiB of host memory per rank", r->host_capacity / 1073741824.0);
    fprintf(f, "no plan fits in %.2f GiB per device%s. Closest: %d stage(s), G = %d, stage %d (%d layers, mesh %dx%d, "
               "b %d, zero %d, ckpt %d, offload %.2g/%.2g/%.2g/%.2g) is short by %lld bytes (%.2f GiB) of %s memory.\n",
            r->capacity / 1073741824.0, host, p->num_stages, p->G, r->closest_stage, w->layers, w->dp, w->tp, w->b,
            w->zero, w->ckpt, w->wo, w->go, w->oo, w->ao, (long long)r->shortfall, r->shortfall / 1073741824.0,
            r->closest_host ? "host" : "device");
    if (r->closest_host)
        fprintf(f, "hint: more nodes (sharded states spread over more ranks and hosts), nodes with "
                   "more host memory ([cluster] host_memory says what they have), a smaller global batch or sequence "
                   "(%d)\n", cfg->model.seq_len);
    else
        fprintf(f, "hint: more devices or nodes, a device with more memory, a smaller global batch or sequence "
                   "(%d)%s\n", cfg->model.seq_len, r->space == SPACE_FULL ? "" : ", or a larger space (--space full)");
    // the other memory can be short too: a plan whose device states spill to the
    // host must also fit there, and the closest plan is judged by one of the two
    if (r->states_bytes > 0 && r->host_capacity > 0)
        fprintf(f, "note: device and host memory together (%.2f GiB over %d ranks) are short of the states' %.2f GiB: "
                   "both are needed\n", r->cluster_bytes / 1073741824.0, r->ranks, r->states_bytes / 1073741824.0);
}
