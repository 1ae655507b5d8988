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
#include "base/profile.h"
#include "base/excerpt.h"

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

#define PROFILE_MAX_KEYS 128  // distinct keys a file can set: 6 + 6 + 3 + 64 + 2 + 11 = 92, base included

typedef struct {
    HwProfile *p;
    const char *path;
    FILE *file;
    char *err;
    size_t errlen;
    int failed;
    int fail_line;  // the line of the first failing key
    int keys_seen;  // `base` must come before any other key
    int line;       // lines read so far: the line inih is handling
    int bad_line;   // the first line the reader refused (0: none), and why
    const char *bad_why;
    int max_line;   // inih's line limit in characters (without line ending and NUL)
    int indented;   // the line is indented text: inih hands it over as more of the value above
    // the keys set so far, by section and canonical name (2x8 = 02x8, C+N = n+c),
    // and where: a second value for a key is an error, not a silent override
    int n_set;
    struct { char section[16], key[24]; int line; } set[PROFILE_MAX_KEYS];
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
    if (!pp->failed) {
        // excerpts: the wrong file (hardware = /etc/passwd) must not be echoed
        char sx[MIST_EXCERPT_BUF], kx[MIST_EXCERPT_BUF], vx[MIST_EXCERPT_BUF];
        snprintf(pp->err, pp->errlen, "[%s] %s = %s: %s%s", mist_excerpt(section, sx, sizeof sx),
                 mist_excerpt(key, kx, sizeof kx), mist_excerpt(value, vx, sizeof vx), why,
                 section[0] ? "" : ". Hint: a hardware profile file starts with a [profile] section (docs/plan-analyze.md); "
                 "is this the right file?");
        pp->fail_line = pp->line;
    }
    pp->failed = 1;
    return 0;
}

// Every number has a range (docs/plan-analyze.md, "Hardware profile files"),
// closed below by a positive minimum where it divides: rates and bandwidths
// near 0, or values near the double range, would make the predicted times
// infinite or NaN, or too long to print.

// one number x with lo < x <= hi (lo_open) or lo <= x <= hi, stored as x * scale
static int number_in(ProfileParse *pp, const char *sec, const char *key, const char *val, double lo, int lo_open,
                     double hi, double scale, const char *why, double *dst) {
    double x;
    if (parse_numbers(val, &x, 1) != 1 || !(lo_open ? x > lo : x >= lo) || !(x <= hi))
        return fail(pp, sec, key, val, why);
    *dst = x * scale;
    return 1;
}

static int fraction(ProfileParse *pp, const char *sec, const char *key, const char *val, double *dst) {
    return number_in(pp, sec, key, val, 1e-3, 0, 1, 1, "expected a fraction in [0.001, 1] (e.g. 0.7)", dst);
}

static int peak_tflops(ProfileParse *pp, const char *sec, const char *key, const char *val, double *dst) {
    return number_in(pp, sec, key, val, 1e-6, 0, 1e6, 1e12, "expected TFLOP/s in [1e-6, 1e6] (e.g. 312)", dst);
}

static int coll_factor(ProfileParse *pp, const char *sec, const char *key, const char *val, double *dst) {
    return number_in(pp, sec, key, val, 0, 1, 100, 1, "expected a multiplier in (0, 100] (e.g. 2.1)", dst);
}

static int link_fit(ProfileParse *pp, const char *sec, const char *key, const char *val, LinkFit *dst) {
    double x[2];
    if (parse_numbers(val, x, 2) != 2 || !(x[0] >= 1e-3 && x[0] <= 1e6) || !(x[1] >= 0 && x[1] <= 1))
        return fail(pp, sec, key, val, "expected 'K_GBps BETA_seconds' with K in [0.001, 1e6] GB/s and BETA in "
                                       "[0, 1] s (e.g. '4.68 3e-4')");
    dst->k = x[0] * 1e9;
    dst->beta = x[1];
    return 1;
}

// The key's name as the slot it sets: the group shape of NODESxGPUS and the
// stream set of an interference key are spelled more than one way.
static void canonical_key(const char *sec, const char *key, char *out, size_t len) {
    int nodes, gpus;
    char tail;
    unsigned mask;
    if (!strcmp(sec, "collective") && sscanf(key, "%dx%d%c", &nodes, &gpus, &tail) == 2) {
        snprintf(out, len, "%dx%d", nodes, gpus);
    } else if (!strcmp(sec, "interference") && (mask = parse_stream_set(key)) != 0) {
        size_t n = 0;
        out[0] = 0;
        for (int s = 0; s < STREAM_COUNT; s++)
            if (mask & STREAM_MASK(s))
                n += (size_t)snprintf(out + n, len - n, "%s%s", n ? "+" : "", stream_letters[s]);
    } else {
        snprintf(out, len, "%s", key);
    }
}

// After a key was accepted: an error if it was set before, else remember it.
static int set_once(ProfileParse *pp, const char *sec, const char *key, const char *val) {
    char canon[sizeof pp->set[0].key];
    canonical_key(sec, key, canon, sizeof canon);
    for (int i = 0; i < pp->n_set; i++)
        if (!strcmp(pp->set[i].section, sec) && !strcmp(pp->set[i].key, canon)) {
            char why[160];
            if (pp->indented)
                snprintf(why, sizeof why, "an indented line continues the value of line %d; allowed: one 'key = "
                         "value' per line. Hint: remove the indentation", pp->set[i].line);
            else
                snprintf(why, sizeof why, "set twice (first at line %d); allowed: one value per key. Hint: delete "
                         "one of the two lines", pp->set[i].line);
            return fail(pp, sec, key, val, why);
        }
    if (pp->n_set < PROFILE_MAX_KEYS) {
        snprintf(pp->set[pp->n_set].section, sizeof pp->set[0].section, "%s", sec);
        snprintf(pp->set[pp->n_set].key, sizeof pp->set[0].key, "%s", canon);
        pp->set[pp->n_set++].line = pp->line;
    }
    return 1;
}

static int set_key(ProfileParse *pp, const char *sec, const char *key, const char *val);

static int handler(void *user, const char *sec, const char *key, const char *val) {
    ProfileParse *pp = user;
    if (pp->failed) return 1;  // keep the first message
    return set_key(pp, sec, key, val) && set_once(pp, sec, key, val);
}

static int set_key(ProfileParse *pp, const char *sec, const char *key, const char *val) {
    HwProfile *p = pp->p;
    if (!strcmp(sec, "profile") && !strcmp(key, "base")) {
        if (pp->keys_seen) return fail(pp, sec, key, val, "base must come before every other key (it resets the profile)");
        if (profile_preset(p, val) != 0) return fail(pp, sec, key, val, "unknown preset (allowed: " PROFILE_PRESETS_TEXT ")");
        snprintf(p->name, sizeof p->name, "%s", pp->path);
        return 1;
    }
    pp->keys_seen++;
    if (!strcmp(sec, "profile")) {
        if (!strcmp(key, "name")) { snprintf(p->name, sizeof p->name, "%s", val); return 1; }
        // byte counts: at least about 1 MiB (a tinier value would round to 0
        // bytes, which reads as unset), at most 1e7 GiB (fits an int64_t)
        if (!strcmp(key, "memory_gib")) {
            double x = 0;  // set by number_in when it returns 1
            if (!number_in(pp, sec, key, val, 1e-3, 0, 1e7, GiB, "expected GiB of device memory in [0.001, 1e7] "
                           "(e.g. 80)", &x))
                return 0;
            p->memory_bytes = (int64_t)x;
            return 1;
        }
        if (!strcmp(key, "host_memory_gib")) {
            double x;
            if (parse_numbers(val, &x, 1) != 1 || !(x == 0 || (x >= 1e-3 && x <= 1e7)))
                return fail(pp, sec, key, val, "expected GiB of host memory per node >= 0: 0 = not checked, else "
                                               "in [0.001, 1e7] (e.g. 1800)");
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
        // added to every op: a launch overhead beyond 1 ms is no GPU's (and
        // would swamp any plan's predicted time)
        if (!strcmp(key, "launch_us"))
            return number_in(pp, sec, key, val, 0, 1, 1000, 1e-6, "expected microseconds of kernel launch overhead "
                             "in (0, 1000] (e.g. 5)", &p->launch_seconds);
        return fail(pp, sec, key, val, "unknown key (allowed: base, name, memory_gib, host_memory_gib, gpus_per_node, launch_us)");
    }
    if (!strcmp(sec, "compute")) {
        if (!strcmp(key, "peak_tflops_bf16")) return peak_tflops(pp, sec, key, val, &p->peak_flops[DT_BF16]);
        if (!strcmp(key, "peak_tflops_fp16")) return peak_tflops(pp, sec, key, val, &p->peak_flops[DT_FP16]);
        if (!strcmp(key, "peak_tflops_fp32")) return peak_tflops(pp, sec, key, val, &p->peak_flops[DT_FP32]);
        if (!strcmp(key, "flops_efficiency")) return fraction(pp, sec, key, val, &p->flops_efficiency);
        if (!strcmp(key, "memory_bandwidth_gbps"))
            return number_in(pp, sec, key, val, 1e-3, 0, 1e6, 1e9, "expected GB/s in [0.001, 1e6] (e.g. 2039)",
                             &p->mem_bandwidth);
        if (!strcmp(key, "bandwidth_efficiency")) return fraction(pp, sec, key, val, &p->bandwidth_efficiency);
        return fail(pp, sec, key, val, "unknown key (allowed: peak_tflops_bf16, peak_tflops_fp16, peak_tflops_fp32, "
                                       "flops_efficiency, memory_bandwidth_gbps, bandwidth_efficiency)");
    }
    if (!strcmp(sec, "collective")) {
        if (!strcmp(key, "all_gather_factor")) return coll_factor(pp, sec, key, val, &p->coll_factor[COLL_ALL_GATHER]);
        if (!strcmp(key, "reduce_scatter_factor")) return coll_factor(pp, sec, key, val, &p->coll_factor[COLL_REDUCE_SCATTER]);
        if (!strcmp(key, "all_reduce_factor")) return coll_factor(pp, sec, key, val, &p->coll_factor[COLL_ALL_REDUCE]);
        if (!strcmp(key, "staged")) {
            if (strcmp(val, "0") && strcmp(val, "1"))
                return fail(pp, sec, key, val, "expected 0 or 1 (1: collectives of device memory go through host "
                                               "memory, and the lines were measured that way)");
            p->staged_collectives = val[0] == '1';
            return 1;
        }
        int nodes, gpus;
        char tail;
        if (sscanf(key, "%dx%d%c", &nodes, &gpus, &tail) == 2 && nodes >= 1 && gpus >= 1 &&
            !(nodes & (nodes - 1)) && !(gpus & (gpus - 1)) && nodes <= 128 && gpus <= 128)
            return link_fit(pp, sec, key, val, &p->coll[profile_shape_index(nodes)][profile_shape_index(gpus)]);
        return fail(pp, sec, key, val, "unknown key (allowed: all_gather_factor, reduce_scatter_factor, "
                                       "all_reduce_factor, staged, NODESxGPUS with powers of two <= 128, e.g. 2x8)");
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
                if (!(f[i] >= 1.0 && f[i] <= 1000))
                    return fail(pp, sec, key, val, "slowdown factors must be in [1, 1000] (e.g. 1.17)");
                p->slowdown[mask][s] = f[i++];
            }
        return 1;
    }
    return fail(pp, sec, key, val, "unknown section (allowed: profile, compute, collective, host, interference)");
}

// inih's line reader: counts lines (for "first at line N") and refuses, by
// ending the parse, what inih would misread: a line longer than its buffer
// (split, the tail taken as a line of its own), a lone CR (old Mac line
// endings: the whole file is one line, every key after the first dropped),
// a NUL byte (not a text file). The line goes to inih without its ending.
static char *profile_reader(char *str, int num, void *stream) {
    ProfileParse *pp = stream;
    if (pp->bad_line || num < 2) return NULL;
    int n = 0, c;
    const char *why = NULL;
    while ((c = getc(pp->file)) != EOF && c != '\n') {
        if (c == '\r') {
            int next = getc(pp->file);
            if (next == '\n' || next == EOF) break;  // CRLF, or a CR ending the file
            why = "carriage return inside a line (CR-only line endings?); allowed: LF or CRLF line endings. Hint: "
                  "convert with tr '\\r' '\\n'";
        } else if (c == 0) {
            why = "NUL byte; allowed: a text file. Hint: is this a hardware profile?";
        } else if (n == num - 1) {
            pp->max_line = num - 1;  // profile_load's message names the limit
        } else {
            str[n++] = (char)c;
            continue;
        }
        pp->bad_line = pp->line + 1;
        pp->bad_why = why;  // NULL for a long line
        return NULL;
    }
    if (c == EOF && n == 0) return NULL;
    str[n] = 0;
    pp->line++;
    const char *t = str;
    while (*t == ' ' || *t == '\t') t++;
    pp->indented = t != str && *t && *t != ';' && *t != '#' && *t != '[';
    return str;
}

int profile_load(HwProfile *p, const char *name_or_path, char *err, size_t errlen) {
    if (profile_preset(p, name_or_path) == 0) return 0;
    struct stat st;
    if (stat(name_or_path, &st) != 0) {
        snprintf(err, errlen, "hardware profile '%s': not a preset (" PROFILE_PRESETS_TEXT ") "
                              "and no such file", name_or_path);
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "hardware profile '%s': a directory; allowed: a preset (" PROFILE_PRESETS_TEXT
                              ") or a profile file. Hint: name the INI file", name_or_path);
        return -1;
    }
    FILE *file = fopen(name_or_path, "r");
    if (!file) {
        snprintf(err, errlen, "%s: cannot read the hardware profile: %s", name_or_path, strerror(errno));
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
    char msg[512] = "";
    ProfileParse pp = {.p = p, .path = name_or_path, .file = file, .err = msg, .errlen = sizeof msg};
    int line = ini_parse_stream(profile_reader, &pp, handler, &pp);
    int read_error = ferror(file), read_errno = errno;
    fclose(file);
    // the first problem in file order: a syntax error inih found, a key, or a line the reader refused
    if (line > 0 && (!pp.failed || line < pp.fail_line) && (!pp.bad_line || line < pp.bad_line)) {
        snprintf(err, errlen, "%s:%d: syntax error (expected [section] or key = value)", name_or_path, line);
        return -1;
    }
    if (pp.failed) {
        snprintf(err, errlen, "%s:%d: %s", name_or_path, pp.fail_line, msg);
        return -1;
    }
    if (pp.bad_line) {
        if (pp.max_line)
            snprintf(err, errlen, "%s:%d: line longer than %d characters; allowed: up to %d. Hint: shorten the "
                     "comment or the name", name_or_path, pp.bad_line, pp.max_line, pp.max_line);
        else
            snprintf(err, errlen, "%s:%d: %s", name_or_path, pp.bad_line, pp.bad_why);
        return -1;
    }
    if (read_error || line < 0) {
        snprintf(err, errlen, "%s: cannot read the hardware profile: %s", name_or_path,
                 read_error ? strerror(read_errno) : "out of memory");
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
    fprintf(f, "staged = %d\n", p->staged_collectives);
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
