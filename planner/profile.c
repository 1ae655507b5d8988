// Hardware profiles: preset lookup, the INI profile file reader and writer,
// and the transfer-time formulas every part of the cost model shares.
// File format: docs/plan-analyze.md ("Hardware profile files").
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "planner/profile.h"

#define GiB 1073741824.0

int profile_shape_index(int n) {
    int i = 0;
    while (n > 1 && i < PROFILE_SHAPES - 1) {
        n = (n + 1) / 2;
        i++;
    }
    return i;
}

LinkFit profile_coll_fit(const HwProfile *p, int nodes, int gpus) {
    return p->coll[profile_shape_index(nodes)][profile_shape_index(gpus)];
}

double profile_collective_seconds(const HwProfile *p, CollKind kind, double bytes, int nodes, int gpus) {
    int n = nodes * gpus;
    if (n <= 1 || bytes <= 0) return 0.0;
    LinkFit f = profile_coll_fit(p, nodes, gpus);
    return p->coll_factor[kind] * (bytes / f.k * (double)(n - 1) / n + f.beta);
}

double profile_host_copy_seconds(const LinkFit *f, double bytes) {
    return bytes > 0 ? bytes / f->k + f->beta : 0.0;
}

// ---- the INI reader ----

typedef struct {
    HwProfile *p;
    const char *path;
    char *err;
    size_t errlen;
    int failed;
    int keys_seen;  // `base` must come before any other key
} ProfileParse;

static const char *const stream_letters[STREAM_COUNT] = {"C", "N", "H2D", "D2H"};

// "C+N+D2H" -> mask; 0 on a bad name
static unsigned parse_stream_set(const char *name) {
    unsigned mask = 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", name);
    for (char *tok = strtok(buf, "+"); tok; tok = strtok(NULL, "+")) {
        int found = -1;
        for (int s = 0; s < STREAM_COUNT; s++)
            if (!strcasecmp(tok, stream_letters[s])) found = s;
        if (found < 0 || (mask & STREAM_MASK(found))) return 0;
        mask |= STREAM_MASK(found);
    }
    return mask;
}

// parse up to max numbers separated by spaces/commas; returns the count or -1
static int parse_numbers(const char *v, double *out, int max) {
    int n = 0;
    const char *s = v;
    while (*s) {
        while (*s == ' ' || *s == '\t' || *s == ',') s++;
        if (!*s) break;
        if (n == max) return -1;
        char *end;
        errno = 0;
        double x = strtod(s, &end);
        if (end == s || errno || !isfinite(x)) return -1;
        out[n++] = x;
        s = end;
    }
    return n;
}

static int fail(ProfileParse *pp, const char *section, const char *key, const char *value, const char *why) {
    if (!pp->failed)
        snprintf(pp->err, pp->errlen, "[%s] %s = %s: %s", section, key, value, why);
    pp->failed = 1;
    return 0;  // inih reports the line of the first failing handler call
}

static int one_positive(ProfileParse *pp, const char *sec, const char *key, const char *val, double scale, double *dst) {
    double x;
    if (parse_numbers(val, &x, 1) != 1 || !(x > 0))
        return fail(pp, sec, key, val, "expected one number > 0");
    *dst = x * scale;
    return 1;
}

static int fraction(ProfileParse *pp, const char *sec, const char *key, const char *val, double *dst) {
    double x;
    if (parse_numbers(val, &x, 1) != 1 || !(x > 0 && x <= 1))
        return fail(pp, sec, key, val, "expected a fraction in (0, 1]");
    *dst = x;
    return 1;
}

static int link_fit(ProfileParse *pp, const char *sec, const char *key, const char *val, LinkFit *dst) {
    double x[2];
    if (parse_numbers(val, x, 2) != 2 || !(x[0] > 0) || x[1] < 0)
        return fail(pp, sec, key, val, "expected 'K_GBps BETA_seconds' with K > 0, BETA >= 0 (e.g. '4.68 3e-4')");
    dst->k = x[0] * 1e9;
    dst->beta = x[1];
    return 1;
}

static int handler(void *user, const char *sec, const char *key, const char *val) {
    ProfileParse *pp = user;
    HwProfile *p = pp->p;
    if (pp->failed) return 1;  // keep the first message
    if (!strcmp(sec, "profile") && !strcmp(key, "base")) {
        if (pp->keys_seen) return fail(pp, sec, key, val, "base must come before every other key (it resets the profile)");
        if (profile_preset(p, val) != 0) return fail(pp, sec, key, val, "unknown preset (allowed: l4, a100-40g, a100-80g, h100-80g, h200, cpu)");
        snprintf(p->name, sizeof p->name, "%s", pp->path);
        return 1;
    }
    pp->keys_seen++;
    if (!strcmp(sec, "profile")) {
        if (!strcmp(key, "name")) { snprintf(p->name, sizeof p->name, "%s", val); return 1; }
        if (!strcmp(key, "memory_gib")) {
            double x;
            if (!one_positive(pp, sec, key, val, GiB, &x)) return 0;
            if (x > 1e7 * GiB) return fail(pp, sec, key, val, "expected GiB of device memory, at most 1e7");
            p->memory_bytes = (int64_t)x;
            return 1;
        }
        if (!strcmp(key, "host_memory_gib")) {
            double x;
            if (parse_numbers(val, &x, 1) != 1 || !(x >= 0 && x <= 1e7))
                return fail(pp, sec, key, val, "expected GiB of host memory per node >= 0 and <= 1e7 (0 = not checked)");
            p->host_memory_bytes = (int64_t)(x * GiB);
            return 1;
        }
        if (!strcmp(key, "gpus_per_node")) {
            char *end;
            long n = strtol(val, &end, 10);
            if (*end || n < 1 || n > 1024) return fail(pp, sec, key, val, "expected an integer 1..1024");
            p->gpus_per_node = (int)n;
            return 1;
        }
        if (!strcmp(key, "launch_us")) return one_positive(pp, sec, key, val, 1e-6, &p->launch_seconds);
        return fail(pp, sec, key, val, "unknown key (allowed: base, name, memory_gib, host_memory_gib, gpus_per_node, launch_us)");
    }
    if (!strcmp(sec, "compute")) {
        if (!strcmp(key, "peak_tflops_bf16")) return one_positive(pp, sec, key, val, 1e12, &p->peak_flops[DT_BF16]);
        if (!strcmp(key, "peak_tflops_fp16")) return one_positive(pp, sec, key, val, 1e12, &p->peak_flops[DT_FP16]);
        if (!strcmp(key, "peak_tflops_fp32")) return one_positive(pp, sec, key, val, 1e12, &p->peak_flops[DT_FP32]);
        if (!strcmp(key, "flops_efficiency")) return fraction(pp, sec, key, val, &p->flops_efficiency);
        if (!strcmp(key, "memory_bandwidth_gbps")) return one_positive(pp, sec, key, val, 1e9, &p->mem_bandwidth);
        if (!strcmp(key, "bandwidth_efficiency")) return fraction(pp, sec, key, val, &p->bandwidth_efficiency);
        return fail(pp, sec, key, val, "unknown key (allowed: peak_tflops_bf16, peak_tflops_fp16, peak_tflops_fp32, "
                                       "flops_efficiency, memory_bandwidth_gbps, bandwidth_efficiency)");
    }
    if (!strcmp(sec, "collective")) {
        if (!strcmp(key, "all_gather_factor")) return one_positive(pp, sec, key, val, 1, &p->coll_factor[COLL_ALL_GATHER]);
        if (!strcmp(key, "reduce_scatter_factor")) return one_positive(pp, sec, key, val, 1, &p->coll_factor[COLL_REDUCE_SCATTER]);
        if (!strcmp(key, "all_reduce_factor")) return one_positive(pp, sec, key, val, 1, &p->coll_factor[COLL_ALL_REDUCE]);
        int nodes, gpus;
        char tail;
        if (sscanf(key, "%dx%d%c", &nodes, &gpus, &tail) == 2 && nodes >= 1 && gpus >= 1 &&
            !(nodes & (nodes - 1)) && !(gpus & (gpus - 1)) && nodes <= 128 && gpus <= 128)
            return link_fit(pp, sec, key, val, &p->coll[profile_shape_index(nodes)][profile_shape_index(gpus)]);
        return fail(pp, sec, key, val, "unknown key (allowed: all_gather_factor, reduce_scatter_factor, "
                                       "all_reduce_factor, NODESxGPUS with powers of two <= 128, e.g. 2x8)");
    }
    if (!strcmp(sec, "host")) {
        if (!strcmp(key, "h2d")) return link_fit(pp, sec, key, val, &p->h2d);
        if (!strcmp(key, "d2h")) return link_fit(pp, sec, key, val, &p->d2h);
        return fail(pp, sec, key, val, "unknown key (allowed: h2d, d2h)");
    }
    if (!strcmp(sec, "interference")) {
        unsigned mask = parse_stream_set(key);
        int members = __builtin_popcount(mask);
        if (!mask || members < 2)
            return fail(pp, sec, key, val, "unknown key (allowed: 2 to 4 distinct streams of C, N, H2D, D2H joined by '+', e.g. C+N)");
        double f[STREAM_COUNT];
        if (parse_numbers(val, f, STREAM_COUNT) != members)
            return fail(pp, sec, key, val, "expected one slowdown factor per stream, in the order C, N, H2D, D2H");
        for (int s = 0, i = 0; s < STREAM_COUNT; s++)
            if (mask & STREAM_MASK(s)) {
                if (!(f[i] >= 1.0)) return fail(pp, sec, key, val, "slowdown factors must be >= 1");
                p->slowdown[mask][s] = f[i++];
            }
        return 1;
    }
    return fail(pp, sec, key, val, "unknown section (allowed: profile, compute, collective, host, interference)");
}

int profile_load(HwProfile *p, const char *name_or_path, char *err, size_t errlen) {
    if (profile_preset(p, name_or_path) == 0) return 0;
    struct stat st;
    if (stat(name_or_path, &st) != 0) {
        snprintf(err, errlen, "hardware profile '%s': not a preset (l4, a100-40g, a100-80g, h100-80g, h200, cpu) "
                              "and no such file", name_or_path);
        return -1;
    }
    // a file without `base` starts from the cpu preset's shape, with every
    // hardware number it must provide left at zero (checked below)
    memset(p, 0, sizeof *p);
    profile_preset(p, "cpu");
    snprintf(p->name, sizeof p->name, "%s", name_or_path);
    p->memory_bytes = 0;
    for (int d = 0; d < DT_COUNT; d++) p->peak_flops[d] = 0;
    p->mem_bandwidth = 0;
    ProfileParse pp = {p, name_or_path, err, errlen, 0, 0};
    char msg[512] = "";
    pp.err = msg;
    pp.errlen = sizeof msg;
    int line = ini_parse(name_or_path, handler, &pp);
    if (line < 0) {
        snprintf(err, errlen, "%s: cannot read the hardware profile", name_or_path);
        return -1;
    }
    if (line > 0) {
        snprintf(err, errlen, "%s:%d: %s", name_or_path, line, msg[0] ? msg : "syntax error (expected [section] or key = value)");
        return -1;
    }
    const char *missing = NULL;
    if (p->memory_bytes <= 0) missing = "[profile] memory_gib";
    else if (p->peak_flops[DT_BF16] <= 0) missing = "[compute] peak_tflops_bf16";
    else if (p->peak_flops[DT_FP32] <= 0) missing = "[compute] peak_tflops_fp32";
    else if (p->mem_bandwidth <= 0) missing = "[compute] memory_bandwidth_gbps";
    if (missing) {
        snprintf(err, errlen, "%s: missing key %s (or start from a preset with [profile] base = NAME)", name_or_path, missing);
        return -1;
    }
    if (p->peak_flops[DT_FP16] <= 0) p->peak_flops[DT_FP16] = p->peak_flops[DT_BF16];
    return 0;
}

void profile_write_ini(const HwProfile *p, FILE *f) {
    fprintf(f, "[profile]\nname = %s\nmemory_gib = %.6g\nhost_memory_gib = %.9g\ngpus_per_node = %d\nlaunch_us = %.6g\n\n",
            p->name, p->memory_bytes / GiB, p->host_memory_bytes / GiB, p->gpus_per_node, p->launch_seconds * 1e6);
    fprintf(f, "[compute]\npeak_tflops_bf16 = %.6g\npeak_tflops_fp16 = %.6g\npeak_tflops_fp32 = %.6g\n",
            p->peak_flops[DT_BF16] / 1e12, p->peak_flops[DT_FP16] / 1e12, p->peak_flops[DT_FP32] / 1e12);
    fprintf(f, "flops_efficiency = %.6g\nmemory_bandwidth_gbps = %.6g\nbandwidth_efficiency = %.6g\n\n",
            p->flops_efficiency, p->mem_bandwidth / 1e9, p->bandwidth_efficiency);
    fprintf(f, "[collective]\n; NODESxGPUS = k (GB/s bus bandwidth) beta (s)\n");
    fprintf(f, "all_gather_factor = %.6g\nreduce_scatter_factor = %.6g\nall_reduce_factor = %.6g\n",
            p->coll_factor[0], p->coll_factor[1], p->coll_factor[2]);
    for (int n = 0; n < PROFILE_SHAPES; n++)
        for (int g = 0; g < PROFILE_SHAPES; g++)
            fprintf(f, "%dx%d = %.9g %.6g\n", 1 << n, 1 << g, p->coll[n][g].k / 1e9, p->coll[n][g].beta);
    fprintf(f, "\n[host]\nh2d = %.9g %.6g\nd2h = %.9g %.6g\n\n", p->h2d.k / 1e9, p->h2d.beta, p->d2h.k / 1e9, p->d2h.beta);
    fprintf(f, "[interference]\n; slowdown of each member while exactly these streams overlap (order C, N, H2D, D2H)\n");
    for (unsigned m = 0; m < STREAM_SUBSETS; m++) {
        if (__builtin_popcount(m) < 2) continue;
        const char *sep = "";
        for (int s = 0; s < STREAM_COUNT; s++)
            if (m & STREAM_MASK(s)) { fprintf(f, "%s%s", sep, stream_letters[s]); sep = "+"; }
        fprintf(f, " =");
        for (int s = 0; s < STREAM_COUNT; s++)
            if (m & STREAM_MASK(s)) fprintf(f, " %.6g", p->slowdown[m][s]);
        fprintf(f, "\n");
    }
}
