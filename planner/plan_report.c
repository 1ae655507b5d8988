// mist-plan's reports of a search and of a fixed plan (planner/plan_report.h).
#define _POSIX_C_SOURCE 200809L  // open_memstream
#include "planner/plan_report.h"
#include <stdlib.h>
#include "base/plan_file.h"  // plan_write_ini
#include "planner/analyze.h"
#include "planner/search_compare.h"

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
        if (cmp->have_without) {  // the full space without PaRO's codes, without lean layers
            printf(", \"compare_without\": [");
            search_compare_print_without_json(cmp, stdout);
            printf("]");
        }
    }
    printf("}\n");
}

// The op table's uncovered shapes of the plan shown, once each on stderr;
// with --strict-op-table any of them refuses the plan: 2, else 0.
static int report_table_misses(const PlanAnalysis *an, const OpTable *table) {
    const OptableMisses *m = &an->table_misses;
    if (!table || !table->strict || m->n == 0) {
        optable_misses_print_text(m, stderr);
        return 0;
    }
    fprintf(stderr, "mist-plan: --strict-op-table: the op table does not cover %d shape%s of the plan:", m->n + m->more,
            m->n + m->more == 1 ? "" : "s");
    for (int i = 0; i < m->n; i++)
        fprintf(stderr, "%s %s b=%d s=%d tp=%d (%s)", i ? "," : "", m->miss[i].op, m->miss[i].b, m->miss[i].s,
                m->miss[i].tp, m->miss[i].rule == OPTABLE_MODEL ? "missing" : "beyond the largest measured b");
    fprintf(stderr, ". Hint: measure them (mist-calibrate --b and --tp), or drop --strict-op-table to price them "
                    "with the model\n");
    return 2;
}

int plan_report_search(const MistConfig *cfg, const HwProfile *hw, const OpTable *table, const SearchOptions *so,
                       int json, int compare, Plan *found) {
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
    if (compare && (search_compare_spaces(cfg, hw, table, so, so->space, &r, st.seconds, &cmp, err, sizeof err) != 0 ||
                    search_compare_seeds(cfg, hw, table, so, &cmp, err, sizeof err) != 0)) {
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
    if (shown && report_table_misses(&an, table) != 0) return 2;
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
    *found = r.plan;
    return 0;
}

int plan_report_analysis(const MistConfig *cfg, const Plan *plan, const HwProfile *hw, const OpTable *table, int json) {
    static PlanAnalysis an;
    char err[1024];
    if (plan_analyze(&an, cfg, plan, hw, table, err, sizeof err) != 0) {
        fprintf(stderr, "mist-plan: %s\n", err);
        return 2;
    }
    if (report_table_misses(&an, table) != 0) return 2;
    if (json) analysis_print_json(&an, cfg, stdout);
    else analysis_print_text(&an, cfg, stdout);
    if (an.all_fit) return 0;
    for (int r = 0; an.virtual_chunks > 1 && r < an.pipeline_ranks; r++)  // interleaved: a rank holds its chunks
        if (an.stage[r].shortfall || an.stage[r].host_shortfall)
            fprintf(stderr, "mist-plan: pipeline rank %d (chunks %d, %d, ...; virtual = %d) does not fit%s: its chunks "
                    "need %lld bytes together, has %lld, short by %lld bytes\n", r, r, r + an.pipeline_ranks,
                    an.virtual_chunks, an.stage[r].shortfall ? "" : " the host",
                    (long long)(an.stage[r].shortfall ? an.rank_peak[r] : an.rank_host[r]),
                    (long long)(an.stage[r].shortfall ? an.capacity : an.host_capacity),
                    (long long)(an.stage[r].shortfall ? an.stage[r].shortfall : an.stage[r].host_shortfall));
    for (int i = 0; an.virtual_chunks == 1 && i < an.num_stages; i++)
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

void plan_report_write_file(FILE *f, const Plan *plan, const SearchOptions *so, const char *hardware) {
    fprintf(f, "; written by mist-plan: the fastest plan found for %d node(s) x %d GPU(s)\n", so->nodes,
            so->gpus_per_node);
    fprintf(f, "; hardware: %s\n", hardware);
    fprintf(f, "; train: mist-train CONFIG -o plan.file=THIS_FILE; predict: mist-plan CONFIG --analyze THIS_FILE\n");
    fprintf(f, ";   --nodes %d --gpus-per-node %d --hardware %s\n", so->nodes, so->gpus_per_node, hardware);
    plan_write_ini(plan, f);
}
