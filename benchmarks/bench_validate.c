// Validation of the cost model against published training runs: each row of
// benchmarks/validate/rows.ini names a model.ini (model, batch, cluster and
// hardware preset), the plan the published run used, and the figure it
// measured (iteration time or throughput) with its citation. The row is priced
// exactly as `mist-plan CONFIG --analyze PLAN` prices it (plan_analyze), the
// published figure is turned into seconds per iteration by the convention of
// its source, and the table prints predicted / published time per row with the
// validation targets (every row within +-15%, mean |error| <= 8%) as PASS or
// MISS. Nothing is fitted to the rows: the numbers are the model's as it is.
//
// usage: bench_validate [--rows FILE] [--json FILE] [--row NAME]...
//   --rows  the manifest (default benchmarks/validate/rows.ini); its paths are
//           relative to its own directory
//   --row   only the named rows (repeatable)
// Exit status: 0 (whatever the targets say), 2 a manifest, config or plan error.
#include <ini.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config_load.h"
#include "base/plan_file.h"
#include "base/profile.h"
#include "planner/analyze.h"
#include "planner/optable.h"

#define MAX_ROWS 64
#define MAX_TEXT 1024
#define ROW_TARGET_PCT 15.0
#define MEAN_TARGET_PCT 8.0

// The units a published figure may be given in, and how each becomes seconds per iteration.
typedef enum { UNIT_SECONDS, UNIT_TFLOPS_PER_GPU, UNIT_TOKENS_PER_SECOND, UNIT_COUNT } Unit;
static const char *const unit_names[UNIT_COUNT] = {"s/iter", "TFLOP/s/GPU", "tokens/s"};

typedef struct {
    char name[128];
    char config[MAX_TEXT], plan[MAX_TEXT], op_table[MAX_TEXT];
    char source[MAX_TEXT], table[MAX_TEXT], differs[4 * MAX_TEXT];
    double published;
    Unit unit;
    int has_published, has_unit, line;
    // results
    char preset[320], model[160];
    int gpus, fits;
    double published_seconds, predicted_seconds, predicted;  // predicted: in the published unit
} Row;

typedef struct {
    const char *path;
    FILE *file;
    int line;       // lines read so far: the handler's line is this one
    int long_line;  // the first line longer than inih's buffer, 0 if none
    Row rows[MAX_ROWS];
    int n;
    char err[2 * MAX_TEXT];
} Manifest;

// The keys of a row; "differs" may be given on several lines (each adds a sentence).
static const char *const row_keys = "config, plan, op_table, published, unit, source, table, differs";

static int set_text(char *dst, size_t cap, const char *value, Manifest *m, int line, const char *key) {
    if (strlen(value) >= cap) {
        snprintf(m->err, sizeof m->err, "%s:%d: [%s] %s: longer than %zu characters", m->path, line,
                 m->rows[m->n - 1].name, key, cap - 1);
        return 0;
    }
    strcpy(dst, value);
    return 1;
}

// inih's line reader, counting lines (for file:line errors) and catching lines longer than its buffer
static char *counting_reader(char *str, int num, void *stream) {
    Manifest *m = stream;
    char *r = fgets(str, num, m->file);
    if (!r) return NULL;
    m->line++;
    size_t len = strlen(str);
    if (len == (size_t)num - 1 && str[len - 1] != '\n' && !m->long_line) m->long_line = m->line;
    return r;
}

// inih handler: a new section starts a row; every key is checked against the row's keys.
static int on_key(void *user, const char *section, const char *key, const char *value) {
    Manifest *m = user;
    int line = m->line;
    if (m->long_line) {
        snprintf(m->err, sizeof m->err, "%s:%d: a line longer than %d characters (hint: split 'differs' over several "
                 "'differs =' lines)", m->path, m->long_line, INI_MAX_LINE - 2);
        return 0;
    }
    if (!section[0]) {
        snprintf(m->err, sizeof m->err, "%s:%d: '%s' before any [row-name] section (hint: each row starts with "
                 "its [name])", m->path, line, key);
        return 0;
    }
    if (m->n == 0 || strcmp(m->rows[m->n - 1].name, section) != 0) {
        for (int i = 0; i < m->n; i++)
            if (!strcmp(m->rows[i].name, section)) {
                snprintf(m->err, sizeof m->err, "%s:%d: [%s] appears twice (hint: one section per row, its keys together)",
                         m->path, line, section);
                return 0;
            }
        if (m->n == MAX_ROWS || strlen(section) >= sizeof m->rows[0].name) {
            snprintf(m->err, sizeof m->err, "%s:%d: [%s]: at most %d rows of names under %zu characters", m->path, line,
                     section, MAX_ROWS, sizeof m->rows[0].name);
            return 0;
        }
        Row *r = &m->rows[m->n++];
        memset(r, 0, sizeof *r);
        strcpy(r->name, section);
        r->line = line;
    }
    Row *r = &m->rows[m->n - 1];
    if (!strcmp(key, "config")) return set_text(r->config, sizeof r->config, value, m, line, key);
    if (!strcmp(key, "plan")) return set_text(r->plan, sizeof r->plan, value, m, line, key);
    if (!strcmp(key, "op_table")) return set_text(r->op_table, sizeof r->op_table, value, m, line, key);
    if (!strcmp(key, "source")) return set_text(r->source, sizeof r->source, value, m, line, key);
    if (!strcmp(key, "table")) return set_text(r->table, sizeof r->table, value, m, line, key);
    if (!strcmp(key, "differs")) {  // repeated: the sentences join with a space
        size_t used = strlen(r->differs);
        if (used + 1 + strlen(value) >= sizeof r->differs) {
            snprintf(m->err, sizeof m->err, "%s:%d: [%s] differs: more than %zu characters in all", m->path, line,
                     r->name, sizeof r->differs - 1);
            return 0;
        }
        if (used) strcat(r->differs, " ");
        strcat(r->differs, value);
        return 1;
    }
    if (!strcmp(key, "published")) {
        char *end = NULL;
        r->published = strtod(value, &end);
        if (!end || end == value || *end || !(r->published > 0) || !isfinite(r->published)) {
            snprintf(m->err, sizeof m->err, "%s:%d: [%s] published = %s: allowed: a number > 0 (the figure as published, "
                     "in the row's unit)", m->path, line, r->name, value);
            return 0;
        }
        r->has_published = 1;
        return 1;
    }
    if (!strcmp(key, "unit")) {
        for (int u = 0; u < UNIT_COUNT; u++)
            if (!strcmp(value, unit_names[u])) {
                r->unit = (Unit)u;
                r->has_unit = 1;
                return 1;
            }
        snprintf(m->err, sizeof m->err, "%s:%d: [%s] unit = %s: allowed: s/iter, TFLOP/s/GPU (Megatron's formula, "
                 "recompute counted), tokens/s", m->path, line, r->name, value);
        return 0;
    }
    snprintf(m->err, sizeof m->err, "%s:%d: [%s] unknown key '%s'; allowed: %s", m->path, line, section, key, row_keys);
    return 0;
}

// Read the manifest; 0, or -1 with m->err naming file:line, the row and the key.
static int manifest_load(Manifest *m, const char *path) {
    m->path = path;
    m->n = 0;
    m->err[0] = 0;
    m->line = m->long_line = 0;
    FILE *f = m->file = fopen(path, "r");
    if (!f) {
        snprintf(m->err, sizeof m->err, "%s: cannot open the manifest (hint: run from the source tree, or give --rows)",
                 path);
        return -1;
    }
    int rc = ini_parse_stream(counting_reader, m, on_key, m);
    fclose(f);
    if (rc == 0 && m->long_line) {
        snprintf(m->err, sizeof m->err, "%s:%d: a line longer than %d characters (hint: split 'differs' over several "
                 "'differs =' lines)", path, m->long_line, INI_MAX_LINE - 2);
        return -1;
    }
    if (rc != 0) {
        if (!m->err[0]) snprintf(m->err, sizeof m->err, "%s:%d: not an INI line (hint: [row-name] then key = value)", path, rc);
        return -1;
    }
    for (int i = 0; i < m->n; i++) {
        const Row *r = &m->rows[i];
        const char *missing = !r->config[0] ? "config" : !r->plan[0] ? "plan" : !r->has_published ? "published"
                              : !r->has_unit ? "unit" : !r->source[0] ? "source" : !r->table[0] ? "table"
                              : !r->differs[0] ? "differs" : NULL;
        if (missing) {
            snprintf(m->err, sizeof m->err, "%s:%d: [%s] has no '%s'; every row needs config, plan, published, unit, "
                     "source, table and differs (op_table is optional)", path, r->line, r->name, missing);
            return -1;
        }
    }
    if (m->n == 0) {
        snprintf(m->err, sizeof m->err, "%s: no rows (hint: one [row-name] section per published run)", path);
        return -1;
    }
    return 0;
}

// Megatron's FLOPs per iteration with full activation recomputation (Narayanan et al. 2021, eq. 3):
// F = 96 B s L h^2 (1 + s/(6h) + V/(16 L h)): 72 for forward + backward of the GEMMs and
// attention, 24 more for the recomputed forward. Their TFLOP/s per GPU is F / (GPUs x T); BLOOM's
// Megatron-DeepSpeed logs count the same way (4 passes with checkpointed activations).
static double megatron_flops(const ModelConfig *m, int64_t batch) {
    double B = (double)batch, s = m->seq_len, L = m->layers, h = m->hidden, V = m->vocab;
    return 96.0 * B * s * L * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * L * h));
}

// seconds per iteration <-> the row's unit (the conversion is its own inverse up to the value)
static double to_seconds(const Row *r, const MistConfig *cfg, double value) {
    switch (r->unit) {
    case UNIT_SECONDS: return value;
    case UNIT_TFLOPS_PER_GPU: return megatron_flops(&cfg->model, cfg->train.global_batch) / (r->gpus * value * 1e12);
    case UNIT_TOKENS_PER_SECOND: return (double)cfg->train.global_batch * cfg->model.seq_len / value;
    default: return NAN;
    }
}

// a path of the manifest, relative to its directory
static void manifest_path(char *out, size_t cap, const char *manifest, const char *rel) {
    const char *slash = strrchr(manifest, '/');
    if (rel[0] == '/' || !slash) snprintf(out, cap, "%s", rel);
    else snprintf(out, cap, "%.*s/%s", (int)(slash - manifest), manifest, rel);
}

// Price one row; 0, or -1 with err.
static int row_predict(Row *r, const char *manifest, char *err, size_t errlen) {
    static MistConfig cfg;
    static Plan plan;
    char path[2 * MAX_TEXT], e[1024];
    manifest_path(path, sizeof path, manifest, r->config);
    if (config_load(&cfg, path, NULL, 0, 0, e, sizeof e) != 0) {
        snprintf(err, errlen, "[%s] config: %s", r->name, e);
        return -1;
    }
    manifest_path(path, sizeof path, manifest, r->plan);
    if (plan_file_load_checked(&plan, path, &cfg.model, cfg.train.global_batch, 0, e, sizeof e) != 0) {
        snprintf(err, errlen, "[%s] plan: %s", r->name, e);
        return -1;
    }
    HwProfile hw;
    if (config_profile(&cfg, &hw, e, sizeof e) != 0) {
        snprintf(err, errlen, "[%s] hardware: %s", r->name, e);
        return -1;
    }
    OpTable table, *tablep = NULL;
    if (r->op_table[0]) {
        manifest_path(path, sizeof path, manifest, r->op_table);
        if (optable_load(&table, path, e, sizeof e) != 0) {
            snprintf(err, errlen, "[%s] op_table: %s", r->name, e);
            return -1;
        }
        tablep = &table;
    }
    static PlanAnalysis a;
    int rc = plan_analyze(&a, &cfg, &plan, &hw, tablep, e, sizeof e);
    if (tablep) optable_free(tablep);
    if (rc != 0) {
        snprintf(err, errlen, "[%s] %s", r->name, e);
        return -1;
    }
    snprintf(r->preset, sizeof r->preset, "%s", a.hardware[0] ? a.hardware : cfg.cluster.hardware);
    snprintf(r->model, sizeof r->model, "%s L%d h%d", config_family_name(cfg.model.family), cfg.model.layers,
             cfg.model.hidden);
    r->gpus = a.world;
    r->fits = a.all_fit;
    r->published_seconds = to_seconds(r, &cfg, r->published);
    r->predicted_seconds = a.iteration_seconds;
    r->predicted = to_seconds(r, &cfg, a.iteration_seconds);  // T -> unit is the same map as unit -> T
    return 0;
}

static double error_pct(const Row *r) { return 100.0 * (r->predicted_seconds / r->published_seconds - 1.0); }

// A string as a JSON value (quotes, backslashes and control characters escaped).
static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void print_table(const Row *rows, int n) {
    printf("predicted vs published iteration time; ratio = predicted / published seconds, error = ratio - 1\n");
    printf("%-28s %-18s %5s %-13s %11s %-11s %10s %10s %7s %8s\n", "row", "model", "GPUs", "preset", "published",
           "unit", "pub s/it", "pred s/it", "ratio", "error");
    for (int i = 0; i < n; i++) {
        const Row *r = &rows[i];
        double e = error_pct(r);
        printf("%-28s %-18s %5d %-13s %11.4g %-11s %10.4g %10.4g %7.3f %+7.1f%%%s%s\n", r->name, r->model, r->gpus,
               r->preset, r->published, unit_names[r->unit], r->published_seconds, r->predicted_seconds,
               r->predicted_seconds / r->published_seconds, e, fabs(e) <= ROW_TARGET_PCT ? "" : "  (beyond 15%)",
               r->fits ? "" : "  (does not fit)");
    }
}

static void write_json(FILE *f, const Row *rows, int n, double mean_abs, double max_abs, int within, int pass) {
    fprintf(f, "{\"benchmark\": \"bench_validate\", \"targets\": {\"row_abs_error_pct\": %g, \"mean_abs_error_pct\": %g}, "
               "\"rows\": [", ROW_TARGET_PCT, MEAN_TARGET_PCT);
    for (int i = 0; i < n; i++) {
        const Row *r = &rows[i];
        fprintf(f, "%s{\"row\": ", i ? ", " : "");
        json_string(f, r->name);
        fprintf(f, ", \"model\": ");
        json_string(f, r->model);
        fprintf(f, ", \"gpus\": %d, \"plan\": ", r->gpus);
        json_string(f, r->plan);
        fprintf(f, ", \"config\": ");
        json_string(f, r->config);
        fprintf(f, ", \"op_table\": ");
        if (r->op_table[0]) json_string(f, r->op_table);
        else fprintf(f, "null");
        fprintf(f, ", \"preset\": ");
        json_string(f, r->preset);
        fprintf(f, ", \"published\": %.9g, \"unit\": \"%s\", \"predicted\": %.9g, \"published_seconds\": %.9g, "
                   "\"predicted_seconds\": %.9g, \"ratio\": %.6f, \"error_pct\": %.4f, \"fits\": %s, \"source\": ",
                r->published, unit_names[r->unit], r->predicted, r->published_seconds, r->predicted_seconds,
                r->predicted_seconds / r->published_seconds, error_pct(r), r->fits ? "true" : "false");
        json_string(f, r->source);
        fprintf(f, ", \"table\": ");
        json_string(f, r->table);
        fprintf(f, ", \"differs\": ");
        json_string(f, r->differs);
        fputc('}', f);
    }
    fprintf(f, "], \"summary\": {\"rows\": %d, \"within_row_target\": %d, \"mean_abs_error_pct\": %.4f, "
               "\"max_abs_error_pct\": %.4f, \"pass\": %s}}\n", n, within, mean_abs, max_abs, pass ? "true" : "false");
}

int main(int argc, char **argv) {
    const char *rows_path = "benchmarks/validate/rows.ini", *json_path = "benchmarks/bench_validate.json";
    const char *only[MAX_ROWS];
    int n_only = 0;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "--rows") || !strcmp(argv[i], "--json") || !strcmp(argv[i], "--row")) && i + 1 < argc) {
            const char *v = argv[++i];
            if (!strcmp(argv[i - 1], "--rows")) rows_path = v;
            else if (!strcmp(argv[i - 1], "--json")) json_path = v;
            else if (n_only < MAX_ROWS) only[n_only++] = v;
        } else {
            fprintf(stderr, "bench_validate: unknown argument '%s'; usage: bench_validate [--rows FILE] [--json FILE] "
                    "[--row NAME]...\n", argv[i]);
            return 2;
        }
    }
    static Manifest m;
    if (manifest_load(&m, rows_path) != 0) {
        fprintf(stderr, "bench_validate: %s\n", m.err);
        return 2;
    }
    static Row rows[MAX_ROWS];
    int n = 0;
    for (int i = 0; i < m.n; i++) {
        int keep = n_only == 0;
        for (int k = 0; k < n_only; k++) keep |= !strcmp(only[k], m.rows[i].name);
        if (keep) rows[n++] = m.rows[i];
    }
    for (int k = 0; k < n_only; k++) {
        int found = 0;
        for (int i = 0; i < m.n; i++) found |= !strcmp(only[k], m.rows[i].name);
        if (!found) {
            fprintf(stderr, "bench_validate: --row %s: no such row in %s\n", only[k], rows_path);
            return 2;
        }
    }
    char err[4096];
    for (int i = 0; i < n; i++)
        if (row_predict(&rows[i], rows_path, err, sizeof err) != 0) {
            fprintf(stderr, "bench_validate: %s: %s\n", rows_path, err);
            return 2;
        }
    print_table(rows, n);
    double sum = 0, max_abs = 0;
    int within = 0;
    for (int i = 0; i < n; i++) {
        double e = fabs(error_pct(&rows[i]));
        sum += e;
        if (e > max_abs) max_abs = e;
        within += e <= ROW_TARGET_PCT;
    }
    double mean_abs = sum / n;
    int pass = within == n && mean_abs <= MEAN_TARGET_PCT;
    printf("\nmean |error| %.1f%% (target <= %.0f%%), max |error| %.1f%%, %d of %d rows within +-%.0f%%: %s\n", mean_abs,
           MEAN_TARGET_PCT, max_abs, within, n, ROW_TARGET_PCT, pass ? "PASS" : "MISS");
    FILE *f = fopen(json_path, "w");
    if (!f) {
        fprintf(stderr, "bench_validate: cannot write %s\n", json_path);
        return 2;
    }
    write_json(f, rows, n, mean_abs, max_abs, within, pass);
    if (fclose(f) != 0) {
        fprintf(stderr, "bench_validate: writing %s failed\n", json_path);
        return 2;
    }
    printf("wrote %s\n", json_path);
    return 0;
}
