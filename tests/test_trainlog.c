// Training logs: the Megatron-style line holds every field, the JSONL file is
// one valid JSON object per line with the documented keys (NaN as null), a
// resumed log drops the iterations that are run again, and the summary is one
// JSON object with the per-rank memory numbers.
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "runtime/trainlog.h"
#include "tests/tap.h"

static char dir[64];

// ---- a small strict JSON checker: validates one value and records the keys
// of the top-level object (or of objects at a chosen depth) ----
typedef struct {
    const char *p;
    int ok;
    int key_depth;     // depth whose keys are recorded (1 = the top-level object)
    char keys[64][48];
    int nkeys;
} Json;

static void ws(Json *j) { while (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r') j->p++; }
static void value(Json *j, int depth);

static void string(Json *j, char *out, size_t len) {
    size_t n = 0;
    if (*j->p != '"') { j->ok = 0; return; }
    j->p++;
    while (*j->p && *j->p != '"') {
        if (*j->p == '\\') j->p++;
        if (!*j->p) break;
        if (out && n + 1 < len) out[n++] = *j->p;
        j->p++;
    }
    if (*j->p != '"') { j->ok = 0; return; }
    j->p++;
    if (out) out[n] = '\0';
}

static void number(Json *j) {
    char *end;
    strtod(j->p, &end);
    if (end == j->p || !strchr("-0123456789", *j->p)) j->ok = 0;  // JSON numbers: no "nan", "inf", "+1"
    else j->p = end;
}

static void object(Json *j, int depth) {
    j->p++;  // '{'
    ws(j);
    if (*j->p == '}') { j->p++; return; }
    while (j->ok) {
        char key[48];
        ws(j);
        string(j, key, sizeof key);
        if (depth == j->key_depth && j->nkeys < 64) snprintf(j->keys[j->nkeys++], 48, "%s", key);
        ws(j);
        if (*j->p != ':') { j->ok = 0; return; }
        j->p++;
        value(j, depth);  // a member value sits inside this object (depth)
        ws(j);
        if (*j->p == ',') { j->p++; continue; }
        if (*j->p == '}') { j->p++; return; }
        j->ok = 0;
    }
}

static void array(Json *j, int depth) {
    j->p++;  // '['
    ws(j);
    if (*j->p == ']') { j->p++; return; }
    while (j->ok) {
        value(j, depth);  // array elements sit at the same object depth as the array
        ws(j);
        if (*j->p == ',') { j->p++; continue; }
        if (*j->p == ']') { j->p++; return; }
        j->ok = 0;
    }
}

static void value(Json *j, int depth) {
    ws(j);
    if (*j->p == '{') object(j, depth + 1);  // an object inside depth d has its keys at depth d+1
    else if (*j->p == '[') array(j, depth);
    else if (*j->p == '"') string(j, NULL, 0);
    else if (!strncmp(j->p, "null", 4) || !strncmp(j->p, "true", 4)) j->p += 4;
    else if (!strncmp(j->p, "false", 5)) j->p += 5;
    else number(j);
}

// Parse TEXT as exactly one JSON value; keys at key_depth go into j.
static int parse_json(const char *text, int key_depth, Json *j) {
    memset(j, 0, sizeof *j);
    j->p = text;
    j->ok = 1;
    j->key_depth = key_depth;
    value(j, 0);
    ws(j);
    return j->ok && *j->p == '\0';
}

static int has_key(const Json *j, const char *key) {
    for (int i = 0; i < j->nkeys; i++)
        if (strcmp(j->keys[i], key) == 0) return 1;
    return 0;
}

static int count_key(const Json *j, const char *key) {
    int n = 0;
    for (int i = 0; i < j->nkeys; i++) n += strcmp(j->keys[i], key) == 0;
    return n;
}

static IterStats stats(int64_t it) {
    IterStats s = {.iteration = it, .steps = 300, .consumed_tokens = it * 2048, .ms_per_iter = 12.5,
                   .tokens_per_s = 163840.0, .tflops_per_device = 0.125, .mfu = 0.0315, .hfu = 0.04,
                   .lr = 6e-4, .loss = 5.5 - 0.01 * (double)it, .grad_norm = 1.75, .skipped = 1, .nonfinite = 2,
                   .peak_device_bytes = 3 * 1024 * 1024};
    return s;
}

static void test_checker(void) {
    Json j;
    ok(parse_json("{\"a\": [1, {\"b\": null}], \"c\": \"x\"}", 1, &j) && j.nkeys == 2 &&
       !parse_json("{\"a\": nan}", 1, &j) && !parse_json("{\"a\": 1} {\"b\": 2}", 1, &j) &&
       !parse_json("{\"a\": 1,}", 1, &j), "the JSON checker accepts valid JSON and rejects NaN, two objects, a trailing comma");
}

static void test_line(void) {
    IterStats s = stats(42);
    char line[1024];
    trainlog_format_line(&s, line, sizeof line);
    diag("%s", line);
    ok(strstr(line, "iteration       42/     300") != NULL, "line: iteration i/N");
    ok(strstr(line, "consumed tokens: 86016") != NULL, "line: consumed tokens (42 * 2048)");
    ok(strstr(line, "elapsed time per iteration (ms): 12.5") != NULL, "line: ms per iteration");
    ok(strstr(line, "tokens/s: 163840") != NULL, "line: tokens per second");
    ok(strstr(line, "TFLOP/s/device: 0.125") != NULL, "line: TFLOP/s per device");
    ok(strstr(line, "MFU: 3.15%") != NULL, "line: MFU as a percentage");
    ok(strstr(line, "learning rate: 6.000E-04") != NULL, "line: learning rate");
    ok(strstr(line, "lm loss: 5.080000E+00") != NULL, "line: loss (5.5 - 0.42)");
    ok(strstr(line, "grad norm: 1.75") != NULL, "line: grad norm");
    ok(strstr(line, "skipped: 1") != NULL && strstr(line, "nan/inf: 2") != NULL, "line: skipped and NaN/Inf counts");
    ok(strstr(line, "peak memory: 3.00 MiB") != NULL, "line: peak memory in binary units");
    ok(strstr(line, "val loss") == NULL, "no validation pass: no val loss field");
    s.has_val = 1, s.val_loss = 4.25;
    trainlog_format_line(&s, line, sizeof line);
    char json[1024];
    trainlog_format_json(&s, json, sizeof json);
    ok(strstr(line, "| val loss: 4.250000E+00") && strstr(json, "\"val_loss\": 4.25}"),
       "after a validation pass the line and the JSON carry the val loss");
    char b[32];
    trainlog_format_bytes(512, b, sizeof b);
    int small = strcmp(b, "512 B") == 0;
    trainlog_format_bytes((int64_t)3 << 30, b, sizeof b);
    ok(small && strcmp(b, "3.00 GiB") == 0, "bytes: 512 B, 3.00 GiB");
}

static const char *ITER_KEYS[] = {"iteration", "loss", "lr", "grad_norm", "tokens_per_second", "ms_per_iter",
                                  "tflops_per_device", "mfu", "consumed_tokens", "skipped", "nonfinite",
                                  "peak_device_bytes"};

static int read_lines(const char *path, char lines[][1024], int max) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0;
    while (n < max && fgets(lines[n], 1024, f)) {
        lines[n][strcspn(lines[n], "\n")] = '\0';
        n++;
    }
    fclose(f);
    return n;
}

static void test_jsonl(void) {
    LogConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.interval = 2;
    snprintf(cfg.jsonl, sizeof cfg.jsonl, "%s/logs/run.jsonl", dir);
    char err[1024] = "", outpath[600];
    snprintf(outpath, sizeof outpath, "%s/stdout.txt", dir);
    FILE *out = fopen(outpath, "w");
    TrainLog *t = trainlog_open(&cfg, 0, err, sizeof err);
    ok(t != NULL, "open a JSONL log in a directory that does not exist yet (%s)", err);
    if (!t || !out) return;
    trainlog_set_stream(t, out);
    for (int64_t it = 1; it <= 5; it++) {
        IterStats s = stats(it);
        if (it == 3) s.loss = NAN, s.grad_norm = INFINITY;
        trainlog_iteration(t, &s, err, sizeof err);
    }
    trainlog_close(t, err, sizeof err);
    fclose(out);

    static char lines[16][1024];
    int n = read_lines(outpath, lines, 16);
    ok(n == 3 && strstr(lines[0], "iteration        1/") && strstr(lines[1], "iteration        2/") &&
           strstr(lines[2], "iteration        4/"),
       "interval 2: lines for the first iteration, then 2 and 4 only (got %d lines)", n);
    n = read_lines(cfg.jsonl, lines, 16);
    ok(n == 5, "JSONL: one line per iteration (5, got %d)", n);
    int valid = 1, keys = 1, order = 1;
    for (int i = 0; i < n; i++) {
        Json j;
        if (!parse_json(lines[i], 1, &j)) { valid = 0; diag("not one JSON object: %s", lines[i]); continue; }
        for (size_t k = 0; k < sizeof ITER_KEYS / sizeof *ITER_KEYS; k++)
            if (!has_key(&j, ITER_KEYS[k])) { keys = 0; diag("line %d lacks \"%s\"", i + 1, ITER_KEYS[k]); }
        char want[40];
        snprintf(want, sizeof want, "\"iteration\": %d,", i + 1);
        order &= strstr(lines[i], want) != NULL;
    }
    ok(valid, "every JSONL line parses as exactly one JSON object");
    ok(keys, "every object has iteration, loss, lr, grad_norm, tokens_per_second, ms_per_iter, tflops_per_device, mfu, ...");
    ok(order, "objects are in iteration order 1..5");
    ok(n >= 3 && strstr(lines[2], "\"loss\": null") && strstr(lines[2], "\"grad_norm\": null"),
       "NaN loss and Inf grad norm are written as null (JSON has no NaN)");
    ok(n >= 1 && strstr(lines[0], "\"loss\": 5.4900000000000002"), "loss is written with 17 significant digits (exact double)");

    // resume at iteration 4: lines 1..3 are kept, 4 and 5 are written again
    TrainLog *r = trainlog_open_resume(&cfg, 0, 4, err, sizeof err);
    ok(r != NULL, "reopen for a run resumed at iteration 4 (%s)", err);
    if (!r) return;
    FILE *sink = fopen("/dev/null", "w");
    trainlog_set_stream(r, sink);
    for (int64_t it = 4; it <= 6; it++) {
        IterStats s = stats(it);
        trainlog_iteration(r, &s, err, sizeof err);
    }
    trainlog_close(r, err, sizeof err);
    if (sink) fclose(sink);
    n = read_lines(cfg.jsonl, lines, 16);
    int seq = n == 6;
    for (int i = 0; seq && i < n; i++) {
        char want[40];
        snprintf(want, sizeof want, "\"iteration\": %d,", i + 1);
        seq = strstr(lines[i], want) != NULL;
    }
    ok(seq, "after resume the JSONL reads as one run: iterations 1..6, each once (got %d lines)", n);

    // other ranks write nothing
    LogConfig other = cfg;
    snprintf(other.jsonl, sizeof other.jsonl, "%s/logs/rank1.jsonl", dir);
    TrainLog *r1 = trainlog_open(&other, 1, err, sizeof err);
    IterStats s = stats(1);
    trainlog_iteration(r1, &s, err, sizeof err);
    trainlog_close(r1, err, sizeof err);
    FILE *f = fopen(other.jsonl, "r");
    ok(r1 != NULL && f == NULL, "rank 1: no file is created");
    if (f) fclose(f);
}

static void test_summary(void) {
    RankMemory ranks[2] = {
        {.rank = 0, .stage = 0, .predicted_device_peak_bytes = 1000000, .measured_device_peak_bytes = 999000,
         .predicted_host_peak_bytes = 500, .measured_host_peak_bytes = 400},
        {.rank = 1, .stage = 0, .predicted_device_peak_bytes = 1000001, .measured_device_peak_bytes = 998000,
         .predicted_host_peak_bytes = 501, .measured_host_peak_bytes = 401},
    };
    char path[600], err[1024] = "";
    snprintf(path, sizeof path, "%s/out/summary.json", dir);
    IterStats last = stats(300);
    RunTiming timing = {0.125, 0.25, 9};
    ok(trainlog_write_summary(path, ranks, 2, &last, &timing, err, sizeof err) == 0, "write the summary (%s)", err);
    FILE *f = fopen(path, "r");
    static char text[8192];
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = '\0';
    if (f) fclose(f);
    Json top, per_rank;
    ok(parse_json(text, 1, &top) && has_key(&top, "ranks") && has_key(&top, "final"),
       "the summary is one JSON object with \"ranks\" and \"final\"");
    static const char *keys[] = {"rank", "stage", "predicted_device_peak_bytes", "measured_device_peak_bytes",
                                 "predicted_host_peak_bytes", "measured_host_peak_bytes"};
    int all = parse_json(text, 2, &per_rank);  // depth 2: keys of each rank's object (and of "final")
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) all &= count_key(&per_rank, keys[k]) == 2;
    ok(all, "both ranks have rank, stage, predicted/measured device and host peak bytes");
    ok(strstr(text, "\"predicted_device_peak_bytes\": 1000001") && strstr(text, "\"measured_host_peak_bytes\": 401"),
       "rank 1's numbers are written as given");
    ok(has_key(&per_rank, "loss") && strstr(text, "\"iteration\": 300"), "\"final\" holds the last iteration's object");
    ok(has_key(&top, "timing") && strstr(text, "\"predicted_iteration_seconds\": 0.125") &&
           strstr(text, "\"measured_median_iteration_seconds\": 0.25") && strstr(text, "\"iterations_timed\": 9") &&
           strstr(text, "\"measured_over_predicted\": 2"),
       "\"timing\": predicted and measured median seconds, iterations timed, their ratio");
    timing = (RunTiming){0, 0.5, 3};
    ok(trainlog_write_summary(path, ranks, 2, &last, &timing, err, sizeof err) == 0 && (f = fopen(path, "r")) != NULL,
       "a summary without a prediction can be written");
    n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = '\0';
    if (f) fclose(f);
    ok(parse_json(text, 1, &top) && strstr(text, "\"predicted_iteration_seconds\": null") &&
           strstr(text, "\"measured_over_predicted\": null"),
       "... valid JSON, the prediction and the ratio null");
    ok(trainlog_write_summary(path, ranks, 0, NULL, NULL, err, sizeof err) == 0 && (f = fopen(path, "r")) != NULL,
       "a summary with no ranks and no iteration can be written");
    n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = '\0';
    if (f) fclose(f);
    ok(parse_json(text, 1, &top) && strstr(text, "\"final\": null") && strstr(text, "\"timing\": null"),
       "... and is valid JSON with \"final\": null and \"timing\": null");
}

// A full disk: /dev/full accepts the open and fails every write with ENOSPC.
// The lost line must be reported, never dropped in silence.
static void test_jsonl_full_disk(void) {
    if (access("/dev/full", W_OK) != 0) {
        tap_skip("/dev/full is not writable here: the full-disk check needs it");
        return;
    }
    LogConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.interval = 1;
    snprintf(cfg.jsonl, sizeof cfg.jsonl, "/dev/full");
    char err[1024] = "";
    TrainLog *t = trainlog_open(&cfg, 0, err, sizeof err);
    ok(t != NULL, "open a JSONL log on /dev/full (%s)", err);
    if (!t) return;
    FILE *sink = fopen("/dev/null", "w");
    trainlog_set_stream(t, sink);
    IterStats s = stats(1);
    err[0] = 0;
    int rc = trainlog_iteration(t, &s, err, sizeof err);
    ok(rc == -1 && strstr(err, "/dev/full") && strstr(err, "iteration 1") && strstr(err, "No space left"),
       "a JSONL line that cannot be written is an error naming the file, the iteration and the cause (%s)", err);
    trainlog_close(t, err, sizeof err);
    if (sink) fclose(sink);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/mist_test_trainlog_XXXXXX");
    if (!mkdtemp(dir)) tap_skip_all("cannot create a temporary directory");
    test_checker();
    test_line();
    test_jsonl();
    test_jsonl_full_disk();
    test_summary();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) diag("could not remove %s", dir);
    return tap_done();
}
