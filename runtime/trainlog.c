// Training logs: stdout lines, per-iteration JSONL, and the end-of-run summary.
#define _POSIX_C_SOURCE 200809L
#include "runtime/trainlog.h"
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/fileutil.h"

struct TrainLog {
    int active;        // rank 0
    int64_t interval;  // stdout line every N iterations
    FILE *out;         // the Megatron-style lines (stdout unless set)
    FILE *jsonl;       // NULL = off
    char jsonl_path[MIST_PATH_MAX];
};

void trainlog_format_bytes(int64_t bytes, char *buf, size_t len) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (fabs(v) >= 1024.0 && u < 4) v /= 1024.0, u++;
    if (u == 0) snprintf(buf, len, "%lld B", (long long)bytes);
    else snprintf(buf, len, v < 10 ? "%.2f %s" : "%.1f %s", v, units[u]);
}

static void val_suffix(const IterStats *s, int json, char *buf, size_t len);

int trainlog_format_line(const IterStats *s, char *buf, size_t len) {
    char mem[32], val[64];
    trainlog_format_bytes(s->peak_device_bytes, mem, sizeof mem);
    val_suffix(s, 0, val, sizeof val);
    return snprintf(buf, len,
                    " iteration %8" PRId64 "/%8" PRId64 " | consumed tokens: %" PRId64
                    " | elapsed time per iteration (ms): %.1f | tokens/s: %.0f | TFLOP/s/device: %.3f"
                    " | MFU: %.2f%% | HFU: %.2f%% | learning rate: %.3E | lm loss: %.6E | grad norm: %.4g"
                    " | skipped: %" PRId64 " | nan/inf: %" PRId64 " | peak memory: %s%s",
                    s->iteration, s->steps, s->consumed_tokens, s->ms_per_iter, s->tokens_per_s,
                    s->tflops_per_device, 100.0 * s->mfu, 100.0 * s->hfu, s->lr, s->loss, s->grad_norm,
                    s->skipped, s->nonfinite, mem, val);
}

// " | val loss: X" / ", \"val_loss\": X" when a validation pass ran, else ""
static void val_suffix(const IterStats *s, int json, char *buf, size_t len) {
    buf[0] = '\0';
    if (!s->has_val) return;
    if (!json) { snprintf(buf, len, " | val loss: %.6E", s->val_loss); return; }
    char v[40];
    snprintf(v, sizeof v, isfinite(s->val_loss) ? "%.17g" : "null", s->val_loss);
    snprintf(buf, len, ", \"val_loss\": %s", v);
}

// a JSON number, or null for NaN/Inf (JSON has no spelling for them)
static int json_number(char *buf, size_t len, double v, int digits) {
    if (!isfinite(v)) return snprintf(buf, len, "null");
    return snprintf(buf, len, "%.*g", digits, v);
}

int trainlog_format_json(const IterStats *s, char *buf, size_t len) {
    char ms[40], tps[40], tf[40], mfu[40], hfu[40], lr[40], loss[40], gn[40], val[64];
    val_suffix(s, 1, val, sizeof val);
    json_number(ms, sizeof ms, s->ms_per_iter, 6);
    json_number(tps, sizeof tps, s->tokens_per_s, 8);
    json_number(tf, sizeof tf, s->tflops_per_device, 6);
    json_number(mfu, sizeof mfu, s->mfu, 6);
    json_number(hfu, sizeof hfu, s->hfu, 6);
    json_number(lr, sizeof lr, s->lr, 17);  // exact doubles: runs under different plans are compared on these
    json_number(loss, sizeof loss, s->loss, 17);
    json_number(gn, sizeof gn, s->grad_norm, 17);
    return snprintf(buf, len,
                    "{\"iteration\": %" PRId64 ", \"steps\": %" PRId64 ", \"consumed_tokens\": %" PRId64
                    ", \"loss\": %s, \"lr\": %s, \"grad_norm\": %s, \"ms_per_iter\": %s, \"tokens_per_second\": %s"
                    ", \"tflops_per_device\": %s, \"mfu\": %s, \"hfu\": %s, \"skipped\": %" PRId64
                    ", \"nonfinite\": %" PRId64 ", \"peak_device_bytes\": %" PRId64 "%s}",
                    s->iteration, s->steps, s->consumed_tokens, loss, lr, gn, ms, tps, tf, mfu, hfu, s->skipped,
                    s->nonfinite, s->peak_device_bytes, val);
}

// The "iteration" value of a JSONL line, or -1 if it has none.
static int64_t line_iteration(const char *line) {
    const char *p = strstr(line, "\"iteration\":");
    return p ? strtoll(p + 12, NULL, 10) : -1;
}

// Rewrite PATH keeping only lines with iteration < first (and >= 0).
static int keep_lines_before(const char *path, int64_t first, char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? 0 : (snprintf(err, errlen, "cannot read '%s': %s", path, strerror(errno)), -1);
    char *kept = NULL, *line = NULL;
    size_t kept_len = 0, cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        int64_t it = line_iteration(line);
        if (it < 0 || it >= first || line[n - 1] != '\n') continue;  // also drops a half-written last line
        char *grown = realloc(kept, kept_len + (size_t)n + 1);
        if (!grown) break;
        kept = grown;
        memcpy(kept + kept_len, line, (size_t)n);
        kept_len += (size_t)n;
    }
    free(line);
    fclose(f);
    int rc = mist_write_file_atomic(path, kept ? kept : "", kept_len, err, errlen);
    free(kept);
    return rc;
}

static TrainLog *open_log(const LogConfig *cfg, int rank, int64_t first_iteration, char *err, size_t errlen) {
    TrainLog *t = calloc(1, sizeof *t);
    if (!t) { snprintf(err, errlen, "out of host memory"); return NULL; }
    t->active = rank == 0;
    t->interval = cfg->interval > 0 ? cfg->interval : 1;
    t->out = stdout;
    if (!t->active || !cfg->jsonl[0]) return t;
    snprintf(t->jsonl_path, sizeof t->jsonl_path, "%s", cfg->jsonl);
    if (mist_mkdir_parent(cfg->jsonl, err, errlen) != 0 ||
        (first_iteration > 0 && keep_lines_before(cfg->jsonl, first_iteration, err, errlen) != 0)) {
        free(t);
        return NULL;
    }
    t->jsonl = fopen(cfg->jsonl, first_iteration > 0 ? "a" : "w");
    if (!t->jsonl) {
        snprintf(err, errlen, "cannot open the log file '%s' ([log] jsonl): %s (hint: check the directory is writable)",
                 cfg->jsonl, strerror(errno));
        free(t);
        return NULL;
    }
    return t;
}

TrainLog *trainlog_open(const LogConfig *cfg, int rank, char *err, size_t errlen) {
    return open_log(cfg, rank, 0, err, errlen);
}

TrainLog *trainlog_open_resume(const LogConfig *cfg, int rank, int64_t first_iteration, char *err, size_t errlen) {
    return open_log(cfg, rank, first_iteration, err, errlen);
}

int trainlog_iteration(TrainLog *t, const IterStats *s, char *err, size_t errlen) {
    if (!t || !t->active) return 0;
    char buf[1024];
    if (s->iteration == 1 || s->iteration % t->interval == 0 || s->iteration == s->steps) {  // the first shows the starting loss
        trainlog_format_line(s, buf, sizeof buf);
        fprintf(t->out, "%s\n", buf);
        fflush(t->out);
    }
    if (t->jsonl) {
        trainlog_format_json(s, buf, sizeof buf);
        // a full disk shows at the write or, buffered, at the flush: either way
        // the line is lost, so the run must say so instead of going on
        // (a crash keeps every finished iteration: hence the flush per line)
        int len = (int)strlen(buf) + 1;
        errno = 0;
        if (fprintf(t->jsonl, "%s\n", buf) != len || fflush(t->jsonl) != 0) {
            snprintf(err, errlen, "cannot write iteration %" PRId64 " to the log file '%s' ([log] jsonl): %s "
                     "(hint: free space on its file system, or set [log] jsonl to another path)",
                     s->iteration, t->jsonl_path, errno ? strerror(errno) : "short write");
            return -1;
        }
    }
    return 0;
}

void trainlog_set_stream(TrainLog *t, FILE *out) {
    if (t && out) t->out = out;
}

int trainlog_close(TrainLog *t, char *err, size_t errlen) {
    if (!t) return 0;
    int rc = 0;
    if (t->jsonl && fclose(t->jsonl) != 0) {
        snprintf(err, errlen, "could not finish writing the log file '%s' ([log] jsonl): %s", t->jsonl_path,
                 strerror(errno));
        rc = -1;
    }
    free(t);
    return rc;
}

// x with 17 significant digits, or null when it is not a positive finite number
static int json_positive(char *buf, size_t len, double x) {
    return x > 0 && isfinite(x) ? snprintf(buf, len, "%.17g", x) : snprintf(buf, len, "null");
}

int trainlog_write_summary(const char *path, const RankMemory *ranks, int n, const IterStats *last,
                           const RunTiming *timing, char *err, size_t errlen) {
    size_t cap = 256 + (size_t)(n > 0 ? n : 0) * 400 + 1024;
    char *buf = malloc(cap);
    if (!buf) { snprintf(err, errlen, "out of host memory"); return -1; }
    size_t len = (size_t)snprintf(buf, cap, "{\n  \"ranks\": [");
    for (int i = 0; i < n; i++) {
        const RankMemory *m = &ranks[i];
        len += (size_t)snprintf(buf + len, cap - len,
                                "%s\n    {\"rank\": %d, \"stage\": %d, \"predicted_device_peak_bytes\": %" PRId64
                                ", \"measured_device_peak_bytes\": %" PRId64 ", \"predicted_host_peak_bytes\": %" PRId64
                                ", \"measured_host_peak_bytes\": %" PRId64 ", \"device_peak_bytes\": %" PRId64
                                ", \"device_peak_source\": \"%s\", \"block_saved_bytes\": %" PRId64 "}",
                                i ? "," : "", m->rank, m->stage, m->predicted_device_peak_bytes,
                                m->measured_device_peak_bytes, m->predicted_host_peak_bytes, m->measured_host_peak_bytes,
                                m->device_peak_bytes, m->device_peak_from_device ? "device" : "arena",
                                m->block_saved_bytes);
    }
    len += (size_t)snprintf(buf + len, cap - len, "%s],\n  \"final\": ", n ? "\n  " : "");
    if (last) len += (size_t)trainlog_format_json(last, buf + len, cap - len);
    else len += (size_t)snprintf(buf + len, cap - len, "null");
    len += (size_t)snprintf(buf + len, cap - len, ",\n  \"timing\": ");
    if (timing) {
        double p = timing->predicted_seconds, m = timing->measured_median_seconds;
        len += (size_t)snprintf(buf + len, cap - len, "{\"predicted_iteration_seconds\": ");
        len += (size_t)json_positive(buf + len, cap - len, p);
        len += (size_t)snprintf(buf + len, cap - len, ", \"measured_median_iteration_seconds\": ");
        len += (size_t)json_positive(buf + len, cap - len, m);
        len += (size_t)snprintf(buf + len, cap - len, ", \"iterations_timed\": %d, \"measured_over_predicted\": ",
                                timing->iterations);
        len += (size_t)json_positive(buf + len, cap - len, p > 0 && m > 0 ? m / p : 0);
        len += (size_t)snprintf(buf + len, cap - len, ", \"mean_seconds\": ");
        if (timing->iterations > 0)
            len += (size_t)snprintf(buf + len, cap - len, "{\"forward_backward\": %.9g, \"pipeline_wait\": %.9g, "
                                    "\"grad_norm\": %.9g, \"other\": %.9g}", timing->mean_compute, timing->mean_wait,
                                    timing->mean_norm, timing->mean_other);
        else
            len += (size_t)snprintf(buf + len, cap - len, "null");
        len += (size_t)snprintf(buf + len, cap - len, "}");
    } else {
        len += (size_t)snprintf(buf + len, cap - len, "null");
    }
    len += (size_t)snprintf(buf + len, cap - len, "\n}\n");
    int rc = mist_write_file_atomic(path, buf, len, err, errlen);
    free(buf);
    return rc;
}
