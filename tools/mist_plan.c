// mist-plan: plan or analyze a training configuration offline, for any
// cluster size, without an MPI launch (it never calls MPI_Init).
//   mist-plan CONFIG.ini [--nodes N --gpus-per-node M] [--space NAME] [--out PLAN.ini] ...
//   mist-plan CONFIG.ini --analyze [PLAN.ini] [--hardware NAME|FILE] [--json]
//             [--op-table FILE] [-o section.key=value]...
// Exit codes: 0 ok, 2 config/usage error, 3 no plan / the plan does not fit.
#define _POSIX_C_SOURCE 200809L  // open_memstream
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "planner/analyze.h"
#include "planner/search.h"
#include "planner/search_compare.h"
#include "planner/optable.h"
#include "core/profile.h"
#include "core/config_load.h"
#include "core/plan_file.h"
#include "runtime/fileutil.h"
#include "runtime/launch.h"  // launch_check_env

#define MAX_OVERRIDES 256
// Search threads: each keeps its own copy of the search state, stage programs and batch buffers
// (~0.5 MB for the smallest model, ~175 MB for Llama-70B), and threads share out the combinations
// (57 for GPT-3 22B on 4 x 8), so past a few hundred they only cost memory and start-up (4096
// threads took 2.3 GB on tiny, 10^6 did not finish). The search starts at most one per combination.
#define MAX_THREADS 256

static void usage(FILE *f) {
    fprintf(f,
            "usage: mist-plan CONFIG.ini [search options] [options]\n"
            "       mist-plan CONFIG.ini --analyze [PLAN.ini] [options]\n"
            "\n"
            "Without --analyze: search the fastest plan that fits, print it with the search\n"
            "statistics, and (with --out) write it as a plan file for mist-train and --analyze.\n"
            "With --analyze: predict per-stage time and memory of a fixed plan, from PLAN.ini\n"
            "([plan] + [stage.N]) or the config's own [plan].\n"
            "\n"
            "search options:\n"
            "  --nodes N                nodes (default: [cluster] nodes; with --analyze too: the plan's\n"
            "                           ranks must equal N x M)\n"
            "  --gpus-per-node M        devices per node (default: [cluster] gpus_per_node; with --analyze\n"
            "                           too: the node shape the plan is priced on)\n"
            "  --space NAME             megatron | zero | ckpt | offload | full (default: [plan] space)\n"
            "  --out PLAN.ini           write the plan found ([plan] + [stage.N])\n"
            "  --compare                also search every smaller space (megatron, zero, ckpt, offload)\n"
            "                           and print the best plan of each: what each feature buys\n"
            "  --frontier-max K         keep at most K >= 2 points per Pareto frontier, both ends\n"
            "                           included (default: all; a sample can miss the optimum)\n"
            "  --threads T              search with T threads, 1..256 (default: OMP_NUM_THREADS, else\n"
            "                           the cores, at most 8; 1 with --frontier-max; no more are\n"
            "                           started than there are combinations); the plan found\n"
            "                           is the same with any T, unless --frontier-max samples\n"
            "                           the frontiers\n"
            "\n"
            "options:\n"
            "  --analyze [PLAN.ini]     analyze a fixed plan instead of searching\n"
            "  --hardware NAME|FILE     hardware profile: l4, a100-40g, a100-80g, h100-80g, h200, cpu,\n"
            "                           or a profile INI file (default: [cluster] hardware, else cpu)\n"
            "  --op-table FILE          measured per-op latencies overriding the roofline\n"
            "  --json                   print one JSON object instead of the table (a search adds\n"
            "                           its statistics as \"search\")\n"
            "  -o section.key=value     override a config value (repeatable)\n"
            "  -h, --help               this text\n"
            "\n"
            "exit status: 0 ok, 2 config or usage error (also: no layout of stages, dp and tp divides the\n"
            "cluster's devices and the global batch), 3 nothing fits (device memory, or the host memory\n"
            "each rank gets: [cluster] host_memory or the profile's host_memory_gib, over the node's ranks)\n"
            "docs: docs/plan-search.md, docs/plan-analyze.md\n");
}

// The --analyze JSON object with `, "search": {...}` (and `, "compare": [...]`)
// added before its closing brace.
static void print_json_with_search(const PlanAnalysis *an, const MistConfig *cfg, const SearchStats *st,
                                   const SearchOptions *so, const SearchResult *r, const SpaceComparison *cmp) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) {
        analysis_print_json(an, cfg, stdout);
        return;
    }
    analysis_print_json(an, cfg, m);
    fclose(m);
    while (len && (buf[len - 1] == '\n' || buf[len - 1] == '}')) {
        int brace = buf[len - 1] == '}';
        len--;
        if (brace) break;
    }
    fwrite(buf, 1, len, stdout);
    free(buf);
    printf(", \"search\": {");
    search_stats_print_json(st, so, stdout);
    printf(", \"found\": %s", r->found ? "true" : "false");
    if (!r->found && r->have_closest)
        printf(", \"closest_stage\": %d, \"shortfall_bytes\": %lld, \"shortfall_memory\": \"%s\"", r->closest_stage,
               (long long)r->shortfall, r->closest_host ? "host" : "device");
    if (r->states_bytes > 0)
        printf(", \"states_bytes\": %.0f, \"cluster_memory_bytes\": %.0f", r->states_bytes, r->cluster_bytes);
    printf("}");
    if (cmp) {  // --compare: the best plan of each space up to the searched one
        printf(", \"compare\": [");
        search_compare_print_json(cmp, stdout);
        printf("]");
    }
    printf("}\n");
}

// Write the plan atomically (a reader never sees half a file; /dev/null or a FIFO is
// written in place, not replaced).
static int write_plan_file(const Plan *plan, const SearchOptions *so, const char *hw_arg, const char *path) {
    char *text = NULL, err[512];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        fprintf(stderr, "mist-plan: --out %s: out of memory\n", path);
        return 2;
    }
    // The node shape and profile it was priced on (--analyze needs both to predict the same), in
    // lines that stay under the INI reader's 200 characters: no path of the plan file itself,
    // and a profile's only when it is short (mist_ini_comment_name).
    const char *hw = mist_ini_comment_name(hw_arg);
    fprintf(f, "; written by mist-plan: the fastest plan found for %d node(s) x %d GPU(s)\n", so->nodes,
            so->gpus_per_node);
    fprintf(f, "; hardware: %s\n", hw);
    fprintf(f, "; train: mist-train CONFIG -o plan.file=THIS_FILE; predict: mist-plan CONFIG --analyze THIS_FILE\n");
    fprintf(f, ";   --nodes %d --gpus-per-node %d --hardware %s\n", so->nodes, so->gpus_per_node, hw);
    plan_write_ini(plan, f);
    int rc = fclose(f) == 0 && text ? mist_write_file_atomic(path, text, len, err, sizeof err) : -1;
    if (rc) fprintf(stderr, "mist-plan: --out %s: writing the plan failed: %s\n", path, text ? err : "out of memory");
    free(text);
    return rc ? 2 : 0;
}

// Search, print the plan in the --analyze format plus the statistics, write it.
// hw_arg: the profile as named on the command line or in [cluster] (for the plan file's header)
static int search_and_report(const MistConfig *cfg, const HwProfile *hw, const char *hw_arg, const OpTable *table,
                             const SearchOptions *so, const char *out_path, int json, int compare) {
    static SearchResult r;
    SearchStats st;
    char err[1024];
    int rc = plan_search(cfg, hw, table, so, &r, &st, err, sizeof err);
    if (rc == 2) {
        fprintf(stderr, "mist-plan: %s: %s\n", cfg->source, err);
        return 2;
    }
    // --compare: the best plan of every smaller space too (the searched space's row is this result)
    static SpaceComparison cmp;
    if (compare && search_compare_spaces(cfg, hw, table, so, so->space, &r, st.seconds, &cmp, err, sizeof err) != 0) {
        fprintf(stderr, "mist-plan: %s: %s\n", cfg->source, err);
        return 2;
    }
    const Plan *shown = rc == 0 ? &r.plan : r.have_closest ? &r.closest : NULL;
    static PlanAnalysis an;
    static MistConfig c2;
    c2 = *cfg;
    c2.cluster.device_memory = r.capacity;
    c2.cluster.nodes = so->nodes, c2.cluster.gpus_per_node = so->gpus_per_node;  // the ranks sharing a node's host
    if (shown && plan_analyze(&an, &c2, shown, hw, table, err, sizeof err) != 0) {
        fprintf(stderr, "mist-plan: internal error: the search's plan does not analyze: %s\n", err);
        return 1;
    }
    if (shown) {
        if (json) print_json_with_search(&an, cfg, &st, so, &r, compare ? &cmp : NULL);
        else {
            if (rc != 0) printf("no plan fits; the closest plan:\n");
            analysis_print_text(&an, cfg, stdout);
            search_stats_print_text(&st, so, stdout);
        }
    } else if (!json) {
        search_stats_print_text(&st, so, stdout);
    }
    if (compare && !json) {
        printf("\n");
        search_compare_print_text(&cmp, stdout);
    }
    if (rc == 3) {
        fprintf(stderr, "mist-plan: %s: ", cfg->source);
        search_print_no_fit(&r, cfg, stderr);
        return 3;
    }
    if (out_path) {
        if (write_plan_file(&r.plan, so, hw_arg, out_path) != 0) return 2;
        if (!json) printf("plan written to %s\n", out_path);
    } else if (!json) {
        printf("(--out PLAN.ini saves this plan)\n");
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *config_path = NULL, *plan_path = NULL, *hardware = NULL, *op_table = NULL;
    const char *out_path = NULL, *space_name = NULL;
    const char *overrides[MAX_OVERRIDES];
    int n_overrides = 0, analyze = 0, json = 0, compare = 0, nodes = 0, gpn = 0, frontier_max = 0, threads = 0;
    char env_err[256];
    if (launch_check_env(env_err, sizeof env_err)) {  // the MIST_* variables, as mist-train checks them
        fprintf(stderr, "mist-plan: %s\n", env_err);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--analyze")) {
            analyze = 1;
            if (i + 1 < argc && argv[i + 1][0] != '-') plan_path = argv[++i];
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--compare")) {
            compare = 1;
        } else if (!strcmp(a, "--nodes") || !strcmp(a, "--gpus-per-node") || !strcmp(a, "--frontier-max") ||
                   !strcmp(a, "--threads")) {
            char *end = NULL;
            long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || !end || *end || v < 1 || v > 1000000) {
                fprintf(stderr, "mist-plan: %s needs a positive integer, got '%s' (see --help)\n", a,
                        i + 1 < argc ? argv[i + 1] : "");
                return 2;
            }
            if (!strcmp(a, "--threads") && v > MAX_THREADS) {
                fprintf(stderr, "mist-plan: --threads %ld: allowed: 1..%d (each thread holds its own copy of the "
                        "search's programs and buffers, up to ~175 MB); hint: leave it out for the cores, at most 8\n",
                        v, MAX_THREADS);
                return 2;
            }
            i++;
            if (!strcmp(a, "--nodes")) nodes = (int)v;
            else if (!strcmp(a, "--gpus-per-node")) gpn = (int)v;
            else if (!strcmp(a, "--threads")) threads = (int)v;
            else frontier_max = (int)v;
        } else if (!strcmp(a, "--space") || !strcmp(a, "--out")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "mist-plan: %s needs a value (see --help)\n", a);
                return 2;
            }
            if (!strcmp(a, "--space")) space_name = argv[++i];
            else out_path = argv[++i];
        } else if (!strcmp(a, "--hardware") || !strcmp(a, "--op-table") || !strcmp(a, "-o")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "mist-plan: %s needs a value (see --help)\n", a);
                return 2;
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--hardware")) hardware = v;
            else if (!strcmp(a, "--op-table")) op_table = v;
            else if (n_overrides < MAX_OVERRIDES) overrides[n_overrides++] = v;
            else {
                fprintf(stderr, "mist-plan: more than %d -o overrides\n", MAX_OVERRIDES);
                return 2;
            }
        } else if (!strncmp(a, "--hardware=", 11)) {
            hardware = a + 11;
        } else if (a[0] == '-') {
            fprintf(stderr, "mist-plan: unknown option '%s' (see --help)\n", a);
            return 2;
        } else if (!config_path) {
            config_path = a;
        } else {
            fprintf(stderr, "mist-plan: unexpected argument '%s' (one CONFIG.ini; the plan file goes after --analyze)\n", a);
            return 2;
        }
    }
    if (!config_path) {
        usage(stderr);
        return 2;
    }
    PlanSpace space = SPACE_FULL;
    if (space_name && search_space_parse(space_name, &space) != 0) {
        fprintf(stderr, "mist-plan: --space %s: unknown space; allowed: megatron, zero, ckpt, offload, full\n",
                space_name);
        return 2;
    }
    if (frontier_max == 1) {
        fprintf(stderr, "mist-plan: --frontier-max 1: a sample keeps both ends of a frontier; allowed: 2 or more\n");
        return 2;
    }
    if (analyze && (space_name || out_path || frontier_max || threads || compare)) {
        fprintf(stderr, "mist-plan: --space, --out, --frontier-max, --threads and --compare belong to a search; "
                        "--analyze evaluates a fixed plan (hint: drop --analyze to search)\n");
        return 2;
    }

    static MistConfig cfg;
    char err[1024];
    if (out_path && mist_output_check(out_path, err, sizeof err) != 0) {  // before the search, not after it
        fprintf(stderr, "mist-plan: --out %s: %s\n", out_path, err);
        return 2;
    }
    if (config_load(&cfg, config_path, overrides, n_overrides, 0, err, sizeof err) != 0) {
        fprintf(stderr, "mist-plan: %s\n", err);
        return 2;
    }
    // --analyze prices the plan on the node shape given here, as the search that wrote it did
    if (analyze && nodes) cfg.cluster.nodes = nodes;
    if (analyze && gpn) cfg.cluster.gpus_per_node = gpn;
    // the hardware profile (--hardware, else [cluster] hardware, else cpu) and the op table
    HwProfile hw;
    const char *hw_name = hardware ? hardware : cfg.cluster.hardware[0] ? cfg.cluster.hardware : "cpu";
    if (profile_load(&hw, hw_name, err, sizeof err) != 0) {
        fprintf(stderr, "mist-plan: %s\n", err);
        return 2;
    }
    OpTable table, *tablep = NULL;
    if (op_table) {
        if (optable_load(&table, op_table, err, sizeof err) != 0) {
            fprintf(stderr, "mist-plan: %s\n", err);
            return 2;
        }
        tablep = &table;
    }
    if (!analyze) {
        SearchOptions so;
        search_options_default(&so, &cfg);
        if (nodes) so.nodes = nodes;
        if (gpn) so.gpus_per_node = gpn;
        if (space_name) so.space = space;
        so.frontier_max = frontier_max;
        so.progress = isatty(STDERR_FILENO);
#ifdef _OPENMP
        // OMP_NUM_THREADS, else the cores, at most 8 by default: each thread keeps its own batch
        // buffers and candidate lists (~175 MB for the largest examples)
        so.threads = threads ? threads : omp_get_max_threads() < 8 ? omp_get_max_threads() : 8;
        // a sampled frontier depends on what survived the threads' bounds: one thread unless asked
        if (frontier_max && !threads) so.threads = 1;
#else
        so.threads = 1;
#endif
        int rc = search_and_report(&cfg, &hw, hw_name, tablep, &so, out_path, json, compare);
        if (tablep) optable_free(tablep);
        return rc;
    }
    static Plan plan;
    if (plan_path) {
        // checked against the model and batch as mist-train would check it (no rank count: analyze any size)
        if (plan_file_load_checked(&plan, plan_path, &cfg.model, cfg.train.global_batch, 0, err, sizeof err) != 0) {
            fprintf(stderr, "mist-plan: %s\n", err);
            return 2;
        }
    } else if (cfg.plan.mode == PLAN_FIXED || cfg.plan.file[0]) {
        plan = cfg.plan.plan;  // a [plan] file wins over mode = auto, as in mist-train
    } else {
        fprintf(stderr,
                "mist-plan: %s: [plan] mode = auto, but --analyze needs a fixed plan (hint: give a PLAN.ini after "
                "--analyze, or set [plan] mode = fixed with [stage.N] sections)\n",
                config_path);
        return 2;
    }

    if (nodes && gpn && plan_world_size(&plan) != nodes * gpn) {
        fprintf(stderr, "mist-plan: --analyze: the plan runs %d ranks, but --nodes %d x --gpus-per-node %d = %d devices "
                        "(hint: the node shape the plan was searched for, named in the plan file's first lines)\n",
                plan_world_size(&plan), nodes, gpn, nodes * gpn);
        if (tablep) optable_free(tablep);
        return 2;
    }
    static PlanAnalysis an;
    int rc = plan_analyze(&an, &cfg, &plan, &hw, tablep, err, sizeof err);
    if (tablep) optable_free(tablep);
    if (rc != 0) {
        fprintf(stderr, "mist-plan: %s\n", err);
        return 2;
    }
    if (json) analysis_print_json(&an, &cfg, stdout);
    else analysis_print_text(&an, &cfg, stdout);
    if (!an.all_fit) {
        for (int i = 0; i < an.num_stages; i++)
            if (an.stage[i].shortfall)
                fprintf(stderr, "mist-plan: stage %d (layers %d-%d) does not fit: needs %lld bytes, has %lld, short by %lld bytes\n",
                        i, an.stage[i].first_layer, an.stage[i].last_layer, (long long)an.stage[i].peak,
                        (long long)an.capacity, (long long)an.stage[i].shortfall);
            else if (an.stage[i].host_shortfall)
                fprintf(stderr, "mist-plan: stage %d (layers %d-%d) does not fit the host: needs %lld bytes per rank, "
                        "has %lld, short by %lld bytes (hint: less offloading, or [cluster] host_memory if the nodes "
                        "have more)\n", i, an.stage[i].first_layer, an.stage[i].last_layer, (long long)an.stage[i].host,
                        (long long)an.host_capacity, (long long)an.stage[i].host_shortfall);
        return 3;
    }
    return 0;
}
