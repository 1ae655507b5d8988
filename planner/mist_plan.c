// mist-plan: plan or analyze a training configuration offline, for any
// cluster size, without an MPI launch (it never calls MPI_Init).
//   mist-plan CONFIG.ini --analyze [PLAN.ini] [--hardware NAME|FILE] [--json]
//             [--op-table FILE] [-o section.key=value]...
// Exit codes: 0 ok, 2 config/usage error, 3 the plan does not fit.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "planner/analyze.h"
#include "planner/optable.h"
#include "planner/profile.h"
#include "runtime/config_load.h"

#define MAX_OVERRIDES 256

static void usage(FILE *f) {
    fprintf(f,
            "usage: mist-plan CONFIG.ini --analyze [PLAN.ini] [options]\n"
            "\n"
            "Predict per-stage time and memory of a fixed plan with the cost model.\n"
            "The plan comes from PLAN.ini ([plan] + [stage.N]) or the config's own [plan].\n"
            "\n"
            "options:\n"
            "  --analyze [PLAN.ini]     analyze a fixed plan (required for now)\n"
            "  --hardware NAME|FILE     hardware profile: l4, a100-40g, a100-80g, h100-80g, h200, cpu,\n"
            "                           or a profile INI file (default: [cluster] hardware, else cpu)\n"
            "  --op-table FILE          measured per-op latencies overriding the roofline\n"
            "  --json                   print one JSON object instead of the table\n"
            "  -o section.key=value     override a config value (repeatable)\n"
            "  -h, --help               this text\n"
            "\n"
            "exit status: 0 ok, 2 config or usage error, 3 a stage does not fit in device memory\n"
            "docs: docs/plan-analyze.md\n");
}

int main(int argc, char **argv) {
    const char *config_path = NULL, *plan_path = NULL, *hardware = NULL, *op_table = NULL;
    const char *overrides[MAX_OVERRIDES];
    int n_overrides = 0, analyze = 0, json = 0;
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
    if (!analyze) {
        fprintf(stderr, "mist-plan: only --analyze is available so far: give a fixed plan to analyze (see --help)\n");
        return 2;
    }

    static MistConfig cfg;
    char err[1024];
    if (config_load(&cfg, config_path, overrides, n_overrides, 0, err, sizeof err) != 0) {
        fprintf(stderr, "mist-plan: %s\n", err);
        return 2;
    }
    static Plan plan;
    if (plan_path) {
        if (plan_file_load(&plan, plan_path, err, sizeof err) != 0) {
            fprintf(stderr, "mist-plan: %s\n", err);
            return 2;
        }
    } else if (cfg.plan.mode == PLAN_FIXED) {
        plan = cfg.plan.plan;
    } else {
        fprintf(stderr,
                "mist-plan: %s: [plan] mode = auto, but --analyze needs a fixed plan (hint: give a PLAN.ini after "
                "--analyze, or set [plan] mode = fixed with [stage.N] sections)\n",
                config_path);
        return 2;
    }

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
            if (!an.stage[i].fits)
                fprintf(stderr, "mist-plan: stage %d (layers %d-%d) does not fit: needs %lld bytes, has %lld, short by %lld bytes\n",
                        i, an.stage[i].first_layer, an.stage[i].last_layer, (long long)an.stage[i].peak,
                        (long long)an.capacity, (long long)an.stage[i].shortfall);
        return 3;
    }
    return 0;
}
