// Time to write the predicted trace and the SVG picture of a plan (mist-plan
// --analyze --trace --svg; docs/traces.md): the analysis (stage models built
// and evaluated), the timeline, the JSON and the SVG, each written to a file,
// for the shipped GPT-3 22B plan on 32 ranks (4 stages, G = 256) and the Llama
// 70B plan on 64 (8 stages, G = 512). Target: under 1 s for GPT-3 22B.
//
// usage: bench_trace [--repeat R] [--json PATH] [--out DIR]
//   defaults: R = 5 (best of R), PATH = benchmarks/bench_trace.json, DIR = /tmp
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "base/config_load.h"
#include "base/profile.h"
#include "planner/analyze.h"
#include "planner/plan_svg.h"
#include "planner/trace_predict.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    const char *name, *ini;
    double analyze, timeline, json, svg, total;  // seconds, best of R
    int events;
    long json_bytes, svg_bytes;
} Row;

static long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

// One run of the row's four phases; 0 or -1 (message printed).
static int run_once(Row *row, const char *srcdir, const char *outdir, int first) {
    static MistConfig cfg;
    static PlanAnalysis an;
    char path[1024], err[1024], json_path[1100], svg_path[1100];
    snprintf(path, sizeof path, "%s/%s", srcdir, row->ini);
    HwProfile hw;
    if (config_load(&cfg, path, NULL, 0, 0, err, sizeof err) || profile_load(&hw, cfg.cluster.hardware, err, sizeof err)) {
        fprintf(stderr, "bench_trace: %s\n", err);
        return -1;
    }
    snprintf(json_path, sizeof json_path, "%s/bench_trace_%s.json", outdir, row->name);
    snprintf(svg_path, sizeof svg_path, "%s/bench_trace_%s.svg", outdir, row->name);
    double t0 = now();
    if (plan_analyze(&an, &cfg, &cfg.plan.plan, &hw, NULL, err, sizeof err)) {
        fprintf(stderr, "bench_trace: %s: %s\n", path, err);
        return -1;
    }
    double t1 = now();
    Trace t = {0};
    if (trace_predict(&t, &an)) return -1;
    double t2 = now();
    FILE *f = fopen(json_path, "w");
    int bad = !f || trace_write_json(&t, NULL, f) || fclose(f);
    double t3 = now();
    f = fopen(svg_path, "w");
    bad |= !f || plan_svg_write(&an, &t, row->ini, f) || fclose(f);
    double t4 = now();
    if (bad) {
        fprintf(stderr, "bench_trace: writing %s or %s failed\n", json_path, svg_path);
        return -1;
    }
    double d[5] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0}, *best[5] = {&row->analyze, &row->timeline, &row->json, &row->svg, &row->total};
    for (int k = 0; k < 5; k++)
        if (first || d[k] < *best[k]) *best[k] = d[k];
    row->events = t.n;
    row->json_bytes = file_size(json_path), row->svg_bytes = file_size(svg_path);
    trace_free(&t);
    return 0;
}

int main(int argc, char **argv) {
    int repeat = 5;
    const char *json = "benchmarks/bench_trace.json", *outdir = "/tmp";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) outdir = argv[++i];
        else {
            fprintf(stderr, "usage: bench_trace [--repeat R] [--json PATH] [--out DIR]\n");
            return 2;
        }
    }
    if (repeat < 1) repeat = 1;
    const char *srcdir = getenv("MIST_SRCDIR") ? getenv("MIST_SRCDIR") : ".";
    Row rows[] = {{.name = "gpt3-22b", .ini = "examples/gpt3-22b.ini"}, {.name = "llama-70b", .ini = "examples/llama-70b.ini"}};
    int n = (int)(sizeof rows / sizeof rows[0]);
    for (int r = 0; r < n; r++)
        for (int k = 0; k < repeat; k++)
            if (run_once(&rows[r], srcdir, outdir, k == 0)) return 1;
    printf("%-10s %10s %10s %10s %10s %10s %8s %10s %10s\n", "plan", "analyze_ms", "timeline", "json_ms", "svg_ms",
           "total_ms", "events", "json_KiB", "svg_KiB");
    for (int r = 0; r < n; r++)
        printf("%-10s %10.2f %10.2f %10.2f %10.2f %10.2f %8d %10.0f %10.0f\n", rows[r].name, 1e3 * rows[r].analyze,
               1e3 * rows[r].timeline, 1e3 * rows[r].json, 1e3 * rows[r].svg, 1e3 * rows[r].total, rows[r].events,
               rows[r].json_bytes / 1024.0, rows[r].svg_bytes / 1024.0);
    FILE *f = fopen(json, "w");
    if (!f) {
        fprintf(stderr, "bench_trace: cannot write %s\n", json);
        return 1;
    }
    fprintf(f, "{\"repeat\": %d, \"target_seconds\": 1, \"rows\": [", repeat);
    for (int r = 0; r < n; r++)
        fprintf(f, "%s{\"plan\": \"%s\", \"analyze_s\": %.6g, \"timeline_s\": %.6g, \"json_s\": %.6g, \"svg_s\": %.6g, "
                   "\"total_s\": %.6g, \"events\": %d, \"json_bytes\": %ld, \"svg_bytes\": %ld}",
                r ? ", " : "", rows[r].name, rows[r].analyze, rows[r].timeline, rows[r].json, rows[r].svg, rows[r].total,
                rows[r].events, rows[r].json_bytes, rows[r].svg_bytes);
    fprintf(f, "]}\n");
    fclose(f);
    printf("GPT-3 22B on 32 ranks: trace and SVG written in %.3f s (target < 1 s: %s)\n", rows[0].total,
           rows[0].total < 1 ? "met" : "NOT met");
    return 0;
}
