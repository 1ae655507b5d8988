// What the seeds' techniques buy: per case, the best plan of the `full` space
// with PaRO sharding scopes (base/paro.h) and memory-lean layers
// (docs/lean-layers.md) against the same search without them (ZeRO 0-3 only,
// lean = 0), and which of the two the winning plan uses. Cases: the
// multi-node L4 cases of the Mist grid (13B on 2 nodes, 22B on 4, GPT and
// Llama) and the same shapes on the DGX A100 80GB and DGX H100 presets, plus
// 22B on 8 nodes of each, where data-parallel groups are most likely to span
// nodes.
//
// usage: bench_seeds [--json PATH]
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "base/paro.h"
#include "benchmarks/bench_model_ini.h"
#include "planner/search.h"
#include "planner/search_compare.h"

typedef struct {
    const char *hw, *family;
    int shape, nodes, seq, batch;
} SeedCase;

// the best full-space plan with (all = 1) or without the seeds; 0, 3 (nothing fits) or 2
static int best_full(const MistConfig *cfg, const HwProfile *hw, int all, SearchResult *r, double *seconds) {
    SearchOptions so;
    search_options_default(&so, cfg);
    so.confirm_lp = 0;
    so.space = SPACE_FULL;
    if (!all) so.limits.zero_levels = 0xF, so.limits.no_lean = 1;  // ZeRO 0..3, no lean layers
    SearchStats st;
    char err[1024];
    int rc = plan_search(cfg, hw, NULL, &so, r, &st, err, sizeof err);
    if (rc == 2) fprintf(stderr, "bench_seeds: %s\n", err);
    *seconds = st.seconds;
    return rc;
}

int main(int argc, char **argv) {
    const char *json_path = "benchmarks/bench_seeds.json";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
        else {
            fprintf(stderr, "bench_seeds: unknown argument '%s'; usage: bench_seeds [--json PATH]\n", argv[i]);
            return 2;
        }
    }
    static const SeedCase cases[] = {
        {"gcp-l4", "gpt", 3, 2, 2048, 256},       {"gcp-l4", "llama", 3, 2, 2048, 256},
        {"gcp-l4", "gpt", 4, 4, 2048, 512},       {"gcp-l4", "llama", 4, 4, 2048, 512},
        {"dgx-a100-80g", "gpt", 3, 2, 2048, 256}, {"dgx-a100-80g", "gpt", 4, 4, 2048, 512},
        {"dgx-a100-80g", "gpt", 4, 8, 2048, 1024}, {"dgx-h100", "gpt", 3, 2, 2048, 256},
        {"dgx-h100", "gpt", 4, 4, 2048, 512},     {"dgx-h100", "llama", 4, 8, 2048, 1024},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    static SearchResult with, without;
    double gain[N], sum = 0;
    int n = 0, uses_paro[N], uses_lean[N];
    char plan[N][192];
    printf("full with PaRO scopes and lean layers against full without them (ZeRO 0-3, lean = 0)\n");
    printf("%-13s %-6s %-5s %5s %11s %11s %7s %5s %5s  %s\n", "hardware", "model", "size", "GPUs", "without s",
           "with s", "gain", "PaRO", "lean", "plan with them");
    FILE *f = fopen(json_path, "w");
    if (!f) {
        fprintf(stderr, "bench_seeds: cannot write %s\n", json_path);
        return 1;
    }
    fprintf(f, "{\"benchmark\": \"bench_seeds\", \"cases\": [");
    for (int i = 0; i < N; i++) {
        const SeedCase *c = &cases[i];
        HwProfile hw;
        static MistConfig cfg;
        if (profile_preset(&hw, c->hw) != 0 ||
            bench_model_config(&cfg, c->family, &bench_shapes[c->shape], c->seq, c->batch, c->hw, c->nodes, 8))
            return 1;
        double s1, s2;
        int r1 = best_full(&cfg, &hw, 0, &without, &s1), r2 = best_full(&cfg, &hw, 1, &with, &s2);
        if (r1 == 2 || r2 == 2) return 1;
        double t0 = r1 == 0 ? without.iteration_seconds : INFINITY, t1 = r2 == 0 ? with.iteration_seconds : INFINITY;
        gain[i] = isfinite(t0) && isfinite(t1) ? t0 / t1 : NAN;
        uses_paro[i] = uses_lean[i] = 0;
        snprintf(plan[i], sizeof plan[i], "-");
        if (r2 == 0) {
            for (int s = 0; s < with.plan.num_stages; s++)
                uses_paro[i] |= shard_code_has_i(with.plan.stage[s].zero), uses_lean[i] |= with.plan.stage[s].lean;
            plan_summary(&with.plan, plan[i], sizeof plan[i]);
        }
        if (!isnan(gain[i])) sum += gain[i], n++;
        printf("%-13s %-6s %-5s %5d %11.4g %11.4g %6.3fx %5s %5s  %s\n", c->hw, c->family, bench_shapes[c->shape].name,
               8 * c->nodes, t0, t1, gain[i], uses_paro[i] ? "yes" : "no", uses_lean[i] ? "yes" : "no", plan[i]);
        fflush(stdout);
        fprintf(f, "%s{\"hardware\": \"%s\", \"family\": \"%s\", \"size\": \"%s\", \"gpus\": %d, \"global_batch\": %d, "
                   "\"without_seconds\": %.9g, \"with_seconds\": %.9g, \"gain\": %.6g, \"uses_paro\": %s, "
                   "\"uses_lean\": %s, \"plan\": \"%s\", \"search_seconds\": %.4g}",
                i ? ", " : "", c->hw, c->family, bench_shapes[c->shape].name, 8 * c->nodes, c->batch,
                isfinite(t0) ? t0 : -1, isfinite(t1) ? t1 : -1, isnan(gain[i]) ? 0 : gain[i],
                uses_paro[i] ? "true" : "false", uses_lean[i] ? "true" : "false", plan[i], s1 + s2);
    }
    double mean = n ? sum / n : NAN;
    printf("\nmean gain over %d cases: %.4fx (target >= 1.05x)\n", n, mean);
    fprintf(f, "], \"mean_gain\": %.6g, \"cases_compared\": %d}\n", n ? mean : 0, n);
    fclose(f);
    printf("wrote %s\n", json_path);
    return 0;
}
