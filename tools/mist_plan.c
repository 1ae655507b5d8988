// mist-plan: plan or analyze a training configuration offline, for any
// cluster size, without an MPI launch (it never calls MPI_Init).
//   mist-plan CONFIG.ini [--nodes N --gpus-per-node M] [--space NAME] [--out PLAN.ini] ...
//   mist-plan CONFIG.ini --analyze [PLAN.ini] [--hardware NAME|FILE] [--json]
//             [--trace FILE.json] [--svg FILE.svg]
//             [--op-table FILE [--strict-op-table]] [-o section.key=value]...
// Exit codes: 0 ok, 2 config/usage error, 3 no plan / the plan does not fit.
#define _POSIX_C_SOURCE 200809L  // open_memstream
#include <config.h>  // PACKAGE_VERSION
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "base/config_load.h"
#include "base/plan_file.h"
#include "base/profile.h"
#include "planner/optable.h"
#include "planner/plan_report.h"
#include "planner/plan_svg.h"
#include "planner/trace_predict.h"
#include "planner/search.h"
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
            "  --space NAME             megatron-mist | megatron | zero | ckpt | offload | full\n"
            "                           (default: [plan] space; docs/plan-search.md)\n"
            "  --out PLAN.ini           write the plan found ([plan] + [stage.N])\n"
            "  --compare                also search every smaller space (megatron-mist, megatron, zero,\n"
            "                           ckpt, offload) and print the best plan of each with its speedup\n"
            "                           over both Megatron-LM baselines: what each feature buys\n"
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
            "  --hardware NAME|FILE     hardware profile: gcp-l4, gcp-a100-40g, gcp-a100-80g (the clusters\n"
            "                           Mist measured), dgx-a100-80g, dgx-h100, dgx-h200, cpu (see\n"
            "                           docs/hardware.md), or a profile INI file (default: [cluster]\n"
            "                           hardware, else cpu)\n"
            "  --op-table FILE          measured per-op latencies overriding the model (docs/plan-analyze.md)\n"
            "  --strict-op-table        refuse a plan with a shape the op table neither lists nor interpolates\n"
            "  --trace FILE             write the plan's predicted iteration as a Chrome trace (JSON: open in\n"
            "                           Perfetto or chrome://tracing; docs/traces.md)\n"
            "  --svg FILE               draw the plan as SVG: the 1F1B timeline and each stage's memory\n"
            "  --json                   print one JSON object instead of the table (a search adds\n"
            "                           its statistics as \"search\")\n"
            "  -o section.key=value     override a config value (repeatable)\n"
            "  -h, --help               this text\n"
            "  -V, --version            print the version and exit\n"
            "\n"
            "exit status: 0 ok, 2 config or usage error (also: no layout of stages, dp and tp divides the\n"
            "cluster's devices and the global batch), 3 nothing fits (device memory, or the host memory\n"
            "each rank gets: [cluster] host_memory or the profile's host_memory_gib, over the node's ranks)\n"
            "docs: docs/plan-search.md, docs/plan-analyze.md\n");
}

typedef struct {
    const char *config_path, *plan_path, *hardware, *op_table, *out_path, *space_name, *trace_path, *svg_path;
    const char *overrides[MAX_OVERRIDES];
    int n_overrides, analyze, json, compare, nodes, gpn, frontier_max, threads, strict_table;
    PlanSpace space;
} PlanArgs;

// The command line into a; -1 to go on, else the exit code (0 after --help).
static int parse_args(int argc, char **argv, PlanArgs *a) {
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(o, "-V") || !strcmp(o, "--version")) {
            printf("mist-plan (mist) %s\n", PACKAGE_VERSION);
            return 0;
        } else if (!strcmp(o, "--analyze")) {
            a->analyze = 1;
            if (i + 1 < argc && argv[i + 1][0] != '-') a->plan_path = argv[++i];
        } else if (!strcmp(o, "--json")) {
            a->json = 1;
        } else if (!strcmp(o, "--compare")) {
            a->compare = 1;
        } else if (!strcmp(o, "--strict-op-table")) {
            a->strict_table = 1;
        } else if (!strcmp(o, "--nodes") || !strcmp(o, "--gpus-per-node") || !strcmp(o, "--frontier-max") ||
                   !strcmp(o, "--threads")) {
            char *end = NULL;
            long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || !end || *end || v < 1 || v > 1000000) {
                fprintf(stderr, "mist-plan: %s needs a positive integer, got '%s' (see --help)\n", o,
                        i + 1 < argc ? argv[i + 1] : "");
                return 2;
            }
            if (!strcmp(o, "--threads") && v > MAX_THREADS) {
                fprintf(stderr, "mist-plan: --threads %ld: allowed: 1..%d (each thread holds its own copy of the "
                        "search's programs and buffers, up to ~175 MB); hint: leave it out for the cores, at most 8\n",
                        v, MAX_THREADS);
                return 2;
            }
            i++;
            if (!strcmp(o, "--nodes")) a->nodes = (int)v;
            else if (!strcmp(o, "--gpus-per-node")) a->gpn = (int)v;
            else if (!strcmp(o, "--threads")) a->threads = (int)v;
            else a->frontier_max = (int)v;
        } else if (!strcmp(o, "--space") || !strcmp(o, "--out") || !strcmp(o, "--trace") || !strcmp(o, "--svg")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "mist-plan: %s needs a value (see --help)\n", o);
                return 2;
            }
            if (!strcmp(o, "--space")) a->space_name = argv[++i];
            else if (!strcmp(o, "--trace")) a->trace_path = argv[++i];
            else if (!strcmp(o, "--svg")) a->svg_path = argv[++i];
            else a->out_path = argv[++i];
        } else if (!strcmp(o, "--hardware") || !strcmp(o, "--op-table") || !strcmp(o, "-o")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "mist-plan: %s needs a value (see --help)\n", o);
                return 2;
            }
            const char *v = argv[++i];
            if (!strcmp(o, "--hardware")) a->hardware = v;
            else if (!strcmp(o, "--op-table")) a->op_table = v;
            else if (a->n_overrides < MAX_OVERRIDES) a->overrides[a->n_overrides++] = v;
            else {
                fprintf(stderr, "mist-plan: more than %d -o overrides\n", MAX_OVERRIDES);
                return 2;
            }
        } else if (!strncmp(o, "--hardware=", 11)) {
            a->hardware = o + 11;
        } else if (o[0] == '-') {
            fprintf(stderr, "mist-plan: unknown option '%s' (see --help)\n", o);
            return 2;
        } else if (!a->config_path) {
            a->config_path = o;
        } else {
            fprintf(stderr, "mist-plan: unexpected argument '%s' (one CONFIG.ini; the plan file goes after --analyze)\n", o);
            return 2;
        }
    }
    if (!a->config_path) {
        usage(stderr);
        return 2;
    }
    a->space = SPACE_FULL;
    if (a->space_name && search_space_parse(a->space_name, &a->space) != 0) {
        fprintf(stderr, "mist-plan: --space %s: unknown space; allowed: megatron-mist, megatron, zero, ckpt, offload, full\n",
                a->space_name);
        return 2;
    }
    if (a->frontier_max == 1) {
        fprintf(stderr, "mist-plan: --frontier-max 1: a sample keeps both ends of a frontier; allowed: 2 or more\n");
        return 2;
    }
    if (a->analyze && (a->space_name || a->out_path || a->frontier_max || a->threads || a->compare)) {
        fprintf(stderr, "mist-plan: --space, --out, --frontier-max, --threads and --compare belong to a search; "
                        "--analyze evaluates a fixed plan (hint: drop --analyze to search)\n");
        return 2;
    }
    return -1;
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
    // no path of the plan file itself, and a profile's only when it is short (mist_ini_comment_name)
    plan_report_write_file(f, plan, so, mist_ini_comment_name(hw_arg));
    int rc = fclose(f) == 0 && text ? mist_write_file_atomic(path, text, len, err, sizeof err) : -1;
    if (rc) fprintf(stderr, "mist-plan: --out %s: writing the plan failed: %s\n", path, text ? err : "out of memory");
    free(text);
    return rc ? 2 : 0;
}

// --trace and --svg: the plan's predicted iteration as a Chrome trace and as a picture,
// each written atomically. 0, or 2 (the plan does not analyze, or a write failed).
static int write_pictures(const MistConfig *cfg, const Plan *plan, const HwProfile *hw, const OpTable *table,
                          const PlanArgs *a) {
    if (!a->trace_path && !a->svg_path) return 0;
    static PlanAnalysis an;
    Trace t = {0};
    char err[1024];
    if (plan_analyze(&an, cfg, plan, hw, table, err, sizeof err) != 0) {
        fprintf(stderr, "mist-plan: %s\n", err);
        return 2;
    }
    int rc = trace_predict(&t, &an) ? 2 : 0;
    if (rc) fprintf(stderr, "mist-plan: out of memory building the trace\n");
    const char *paths[2] = {a->trace_path, a->svg_path};
    for (int k = 0; k < 2 && !rc; k++) {
        if (!paths[k]) continue;
        char *text = NULL, about[256], hw_name[128];
        trace_json_escape(hw_name, sizeof hw_name, hw->name);
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f) {
            fprintf(stderr, "mist-plan: %s: out of memory\n", paths[k]);
            return 2;
        }
        // the trace also says what the analysis's formula gives (the timeline places passes one by one)
        snprintf(about, sizeof about, "\"model_iteration_seconds\": %.9g, \"hardware\": \"%s\", \"world_size\": %d",
                 an.iteration_seconds, hw_name, an.world);
        int bad = k == 0 ? trace_write_json(&t, about, f) : plan_svg_write(&an, &t, a->config_path, f);
        bad |= fclose(f) != 0 || !text;
        if (!bad) bad = mist_write_file_atomic(paths[k], text, len, err, sizeof err) != 0;
        else snprintf(err, sizeof err, "out of memory");
        if (bad) {
            fprintf(stderr, "mist-plan: %s %s: writing failed: %s\n", k == 0 ? "--trace" : "--svg", paths[k], err);
            rc = 2;
        }
        free(text);
    }
    trace_free(&t);
    return rc;
}

// Search, print the plan in the --analyze format plus the statistics, write it.
// hw_name: the profile as named on the command line or in [cluster] (for the plan file's header)
static int search(const MistConfig *cfg, const HwProfile *hw, const char *hw_name, const OpTable *table,
                  const PlanArgs *a) {
    SearchOptions so;
    search_options_default(&so, cfg);
    if (a->nodes) so.nodes = a->nodes;
    if (a->gpn) so.gpus_per_node = a->gpn;
    if (a->space_name) so.space = a->space;
    so.frontier_max = a->frontier_max;
    so.progress = isatty(STDERR_FILENO);
#ifdef _OPENMP
    // OMP_NUM_THREADS, else the cores, at most 8 by default: each thread keeps its own batch
    // buffers and candidate lists (~175 MB for the largest examples)
    so.threads = a->threads ? a->threads : omp_get_max_threads() < 8 ? omp_get_max_threads() : 8;
    // a sampled frontier depends on what survived the threads' bounds: one thread unless asked
    if (a->frontier_max && !a->threads) so.threads = 1;
#else
    so.threads = 1;
#endif
    static Plan plan;
    int rc = plan_report_search(cfg, hw, table, &so, a->json, a->compare, &plan);
    if (rc) return rc;
    if (write_pictures(cfg, &plan, hw, table, a) != 0) return 2;
    if (a->out_path) {
        if (write_plan_file(&plan, &so, hw_name, a->out_path) != 0) return 2;
        if (!a->json) printf("plan written to %s\n", a->out_path);
    } else if (!a->json) {
        printf("(--out PLAN.ini saves this plan)\n");
    }
    return 0;
}

// Predict a fixed plan: PLAN.ini after --analyze, or the config's own [plan].
static int analyze(const MistConfig *cfg, const HwProfile *hw, const OpTable *table, const PlanArgs *a) {
    static Plan plan;
    char err[1024];
    if (a->plan_path) {
        // checked against the model and batch as mist-train would check it (no rank count: analyze any size)
        if (plan_file_load_checked(&plan, a->plan_path, &cfg->model, cfg->train.global_batch, 0, err, sizeof err) != 0) {
            fprintf(stderr, "mist-plan: %s\n", err);
            return 2;
        }
    } else if (cfg->plan.mode == PLAN_FIXED || cfg->plan.file[0]) {
        plan = cfg->plan.plan;  // a [plan] file wins over mode = auto, as in mist-train
    } else {
        fprintf(stderr,
                "mist-plan: %s: [plan] mode = auto, but --analyze needs a fixed plan (hint: give a PLAN.ini after "
                "--analyze, or set [plan] mode = fixed with [stage.N] sections)\n",
                a->config_path);
        return 2;
    }
    if (a->nodes && a->gpn && plan_world_size(&plan) != a->nodes * a->gpn) {
        fprintf(stderr, "mist-plan: --analyze: the plan runs %d ranks, but --nodes %d x --gpus-per-node %d = %d devices "
                        "(hint: the node shape the plan was searched for, named in the plan file's first lines)\n",
                plan_world_size(&plan), a->nodes, a->gpn, a->nodes * a->gpn);
        return 2;
    }
    int rc = plan_report_analysis(cfg, &plan, hw, table, a->json);
    if (rc == 2) return rc;  // a plan that does not fit is still drawn: the picture shows by how much
    return write_pictures(cfg, &plan, hw, table, a) ? 2 : rc;
}

int main(int argc, char **argv) {
    static PlanArgs a;
    char env_err[256];
    if (launch_check_env(env_err, sizeof env_err)) {  // the MIST_* variables, as mist-train checks them
        fprintf(stderr, "mist-plan: %s\n", env_err);
        return 2;
    }
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    static MistConfig cfg;
    char err[1024];
    const char *outputs[3][2] = {{"--out", a.out_path}, {"--trace", a.trace_path}, {"--svg", a.svg_path}};
    for (int k = 0; k < 3; k++)  // before the search, not after it
        if (outputs[k][1] && mist_output_check(outputs[k][1], err, sizeof err) != 0) {
            fprintf(stderr, "mist-plan: %s %s: %s\n", outputs[k][0], outputs[k][1], err);
            return 2;
        }
    if (config_load(&cfg, a.config_path, a.overrides, a.n_overrides, 0, err, sizeof err) != 0) {
        fprintf(stderr, "mist-plan: %s\n", err);
        return 2;
    }
    // --analyze prices the plan on the node shape given here, as the search that wrote it did
    if (a.analyze && a.nodes) cfg.cluster.nodes = a.nodes;
    if (a.analyze && a.gpn) cfg.cluster.gpus_per_node = a.gpn;
    // the hardware profile (--hardware, else [cluster] hardware, else cpu) and the op table
    HwProfile hw;
    const char *hw_name = a.hardware ? a.hardware : cfg.cluster.hardware[0] ? cfg.cluster.hardware : "cpu";
    if (profile_load(&hw, hw_name, err, sizeof err) != 0) {
        fprintf(stderr, "mist-plan: %s\n", err);
        return 2;
    }
    OpTable table, *tablep = NULL;
    if (a.op_table) {
        if (optable_load(&table, a.op_table, err, sizeof err) != 0) {
            fprintf(stderr, "mist-plan: %s\n", err);
            return 2;
        }
        tablep = &table;
        table.strict = a.strict_table;
        if (optable_check_seq(&table, a.op_table, cfg.model.seq_len, err, sizeof err) != 0) {
            fprintf(stderr, "mist-plan: %s\n", err);
            optable_free(&table);
            return 2;
        }
    } else if (a.strict_table) {
        fprintf(stderr, "mist-plan: --strict-op-table needs --op-table FILE (the table to hold the plan to)\n");
        return 2;
    }
    rc = a.analyze ? analyze(&cfg, &hw, tablep, &a) : search(&cfg, &hw, hw_name, tablep, &a);
    if (tablep) optable_free(tablep);
    return rc;
}
