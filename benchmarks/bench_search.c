// Tuning time of the plan search: GPT-3 22B (48 layers, h 6144, 64 heads,
// seq 2048, global batch 512, bf16) on 4 nodes x 8 L4 GPUs, every space, one
// thread (best of R runs). Target: the full space in <= 1 s on one core
// (Mist reports minutes, Aceso ~200 s, Alpa over an hour). Prints one row per
// space with the statistics of the search and where its time went.
//
// usage: bench_search [--repeat R] [--json PATH]   (defaults: R = 3, benchmarks/bench_search.json)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchmarks/bench_model_ini.h"
#include "planner/search.h"

typedef struct {
    PlanSpace space;
    double best_seconds, iteration;
    SearchStats st;
    int stages, G;
} Row;

int main(int argc, char **argv) {
    int repeat = 3;
    const char *json_path = "benchmarks/bench_search.json";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
        else {
            fprintf(stderr, "bench_search: unknown argument '%s'; usage: bench_search [--repeat R] [--json PATH]\n",
                    argv[i]);
            return 2;
        }
    }
    if (repeat < 1) repeat = 1;
    static MistConfig cfg;
    if (bench_model_config(&cfg, "gpt", &bench_shapes[4], 2048, 512, "gcp-l4", 4, 8) != 0) return 1;
    HwProfile hw;
    if (profile_preset(&hw, "gcp-l4") != 0) return 1;
    Row rows[SPACE_FULL + 1];
    printf("plan search: GPT-3 22B, seq 2048, global batch 512, 4 x 8 L4 (%.2f GiB), 1 thread, best of %d\n",
           hw.memory_bytes / 1073741824.0, repeat);
    printf("%-9s %9s %12s %6s %5s %11s %9s %8s %9s %7s %9s %8s %9s %9s\n", "space", "wall s", "iteration s", "stages",
           "G", "candidates", "eval s", "models", "models s", "combos", "searched", "fronts", "points", "dp+lp ms");
    for (int sp = 0; sp <= SPACE_FULL; sp++) {
        Row *r = &rows[sp];
        memset(r, 0, sizeof *r);
        r->space = (PlanSpace)sp;
        r->best_seconds = INFINITY;
        for (int k = 0; k < repeat; k++) {
            SearchOptions so;
            search_options_default(&so, &cfg);
            so.space = (PlanSpace)sp;
            static SearchResult res;
            SearchStats st;
            char err[1024];
            int rc = plan_search(&cfg, &hw, NULL, &so, &res, &st, err, sizeof err);
            if (rc == 2) {
                fprintf(stderr, "bench_search: %s\n", err);
                return 1;
            }
            if (st.seconds < r->best_seconds) {
                r->best_seconds = st.seconds;
                r->st = st;
                r->iteration = rc == 0 ? res.iteration_seconds : INFINITY;
                r->stages = rc == 0 ? res.plan.num_stages : 0;
                r->G = rc == 0 ? res.plan.G : 0;
            }
        }
        const SearchStats *st = &r->st;
        printf("%-9s %9.3f %12.4f %6d %5d %11lld %9.3f %8lld %9.3f %7lld %9lld %8lld %9lld %9.2f\n",
               search_space_name(r->space), r->best_seconds, r->iteration, r->stages, r->G, st->candidates,
               st->eval_seconds, st->models_built, st->model_seconds, st->combos, st->combos_searched, st->frontiers,
               st->frontier_points, 1e3 * (st->dp_seconds + st->lp_seconds));
        fflush(stdout);
    }
    const Row *full = &rows[SPACE_FULL];
    printf("\nfull space: %.3f s (target <= 1 s: %s); of it %.3f s evaluating %lld candidates (%.3g/s), %.3f s "
           "compiling %lld stage models, %.3f s in the rest (frontiers, bounds, solves)\n",
           full->best_seconds, full->best_seconds <= 1.0 ? "met" : "NOT met", full->st.eval_seconds,
           full->st.candidates, full->st.candidates / fmax(full->st.eval_seconds, 1e-9), full->st.model_seconds,
           full->st.models_built, full->best_seconds - full->st.eval_seconds - full->st.model_seconds);
    FILE *f = fopen(json_path, "w");
    if (!f) {
        fprintf(stderr, "bench_search: cannot write %s\n", json_path);
        return 1;
    }
    fprintf(f, "{\"benchmark\": \"bench_search\", \"model\": \"gpt3-22b\", \"seq_len\": 2048, \"global_batch\": 512, "
               "\"nodes\": 4, \"gpus_per_node\": 8, \"hardware\": \"gcp-l4\", \"threads\": 1, \"repeat\": %d, "
               "\"target_seconds\": 1.0, \"rows\": [", repeat);
    for (int sp = 0; sp <= SPACE_FULL; sp++) {
        const Row *r = &rows[sp];
        fprintf(f, "%s{\"space\": \"%s\", \"wall_seconds\": %.6g, \"iteration_seconds\": %.9g, \"stages\": %d, "
                   "\"G\": %d, ", sp ? ", " : "", search_space_name(r->space), r->best_seconds, r->iteration,
                r->stages, r->G);
        fprintf(f, "\"search\": {");
        SearchOptions so;
        search_options_default(&so, &cfg);
        so.space = r->space;
        search_stats_print_json(&r->st, &so, f);
        fprintf(f, "}}");
    }
    fprintf(f, "]}\n");
    fclose(f);
    printf("wrote %s\n", json_path);
    return 0;
}
