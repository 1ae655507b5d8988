// Hardware profiles: presets carry the published numbers, the transfer
// formulas match hand computations, profile files round-trip, and file errors
// name the file, line and key: values out of their range, keys set twice,
// directories, CR-only line endings and lines too long for the INI reader.
// mist-profile's line fit recovers exact lines and stays inside the ranges
// profile files accept, and its measured lines land in the right cells.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/profile.h"
#include "runtime/profile_measure.h"
#include "tests/tap.h"

#define GiB 1073741824.0
#define GB 1e9

static char tmpdir[256];

static const char *write_file(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

// Presets: every field set, the published numbers, host memory per node.
static void test_presets(void) {
    HwProfile p;
    char err[512];
    for (int i = 0; profile_preset_names[i]; i++) {
        int rc = profile_load(&p, profile_preset_names[i], err, sizeof err);
        ok(rc == 0 && p.memory_bytes > 0 && p.peak_flops[DT_BF16] > 0 && p.mem_bandwidth > 0 && p.h2d.k > 0 &&
               p.coll[3][3].k > 0,
           "preset %s loads with every field set", profile_preset_names[i]);
    }
    ok(profile_load(&p, "no-such-gpu", err, sizeof err) != 0 && strstr(err, "no-such-gpu"), "unknown name is an error naming it");

    // published numbers (docs/design.md §4, §6)
    profile_preset(&p, "gcp-l4");
    ok(near(p.peak_flops[DT_BF16], 121e12, 0, 1e-12, "l4 peak"), "l4 dense bf16 peak is 121 TFLOP/s");
    ok(near(p.coll[0][3].k, 4.6832 * GiB, 0, 1e-12, "l4 1x8 k"), "l4 one node 8 GPUs: k = 4.6832 GiB/s");
    ok(near(p.slowdown[STREAM_MASK(STREAM_C) | STREAM_MASK(STREAM_N)][STREAM_C], 1.1676, 0, 1e-12, "C+N"),
       "l4: compute 16.8%% slower under NCCL");
    profile_preset(&p, "dgx-h100");
    ok(near(p.peak_flops[DT_BF16], 989e12, 0, 1e-12, "h100 peak") && near(p.mem_bandwidth, 3.35e12, 0, 1e-12, "hbm"),
       "h100: 989 TFLOP/s bf16, 3.35 TB/s");
    profile_preset(&p, "dgx-h200");
    ok(near(p.mem_bandwidth, 4.8e12, 0, 1e-12, "h200 hbm"), "h200: 4.8 TB/s");
    profile_preset(&p, "gcp-a100-40g");
    ok(near(p.coll[0][1].k, 139.04 * GiB, 0, 1e-12, "a100 1x2"), "a100: one node 2 GPUs k = 139.04 GiB/s");
    // host memory per node: the presets' 8-GPU nodes less 10%; the cpu preset does not check it
    const struct { const char *name; double gb; } host[] = {
        {"gcp-l4", 384}, {"gcp-a100-40g", 680}, {"gcp-a100-80g", 1360}, {"dgx-h100", 2048}, {"dgx-h200", 2048}, {"cpu", 0}};
    int host_ok = 1;
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) {
        profile_preset(&p, host[i].name);
        if (p.host_memory_bytes != (int64_t)(0.9 * host[i].gb * 1e9)) {
            diag("%s: host_memory_bytes %lld", host[i].name, (long long)p.host_memory_bytes);
            host_ok = 0;
        }
    }
    ok(host_ok, "host memory per node: 0.9 x 384 / 680 / 1360 / 2048 / 2048 GB, cpu not checked");
}

static int positive(double x) { return isfinite(x) && x > 0; }

// Every number of a preset positive and finite (betas and host memory may be 0).
static int all_fields_positive(const HwProfile *p) {
    int good = p->memory_bytes > 0 && p->host_memory_bytes >= 0 && positive(p->flops_efficiency) &&
               p->flops_efficiency <= 1 && positive(p->mem_bandwidth) && positive(p->bandwidth_efficiency) &&
               positive(p->launch_seconds) && p->gpus_per_node > 0 && positive(p->h2d.k) && positive(p->d2h.k) &&
               isfinite(p->h2d.beta) && p->h2d.beta >= 0 && isfinite(p->d2h.beta) && p->d2h.beta >= 0;
    for (int d = 0; d < DT_COUNT; d++) good = good && positive(p->peak_flops[d]);
    for (int c = 0; c < COLL_COUNT; c++) good = good && positive(p->coll_factor[c]);
    for (int n = 0; n < PROFILE_SHAPES; n++)
        for (int g = 0; g < PROFILE_SHAPES; g++)
            good = good && positive(p->coll[n][g].k) && isfinite(p->coll[n][g].beta) && p->coll[n][g].beta >= 0;
    for (unsigned m = 0; m < STREAM_SUBSETS; m++)
        for (int s = 0; s < STREAM_COUNT; s++) good = good && isfinite(p->slowdown[m][s]) && p->slowdown[m][s] >= 1;
    return good;
}

// The DGX presets (docs/hardware.md): positive, finite fields, the published
// bus bandwidths, and faster across nodes than every GCP cluster Mist measured,
// which is why they exist.
static void test_dgx_presets(void) {
    HwProfile p, dgx, gcp;
    char err[512];
    int fields_ok = 1;
    for (int i = 0; profile_preset_names[i]; i++) {
        int rc = profile_load(&p, profile_preset_names[i], err, sizeof err);
        if (rc != 0 || !all_fields_positive(&p) || strcmp(p.name, profile_preset_names[i]) != 0) {
            diag("%s: rc %d, fields or name wrong", profile_preset_names[i], rc);
            fields_ok = 0;
        }
    }
    ok(fields_ok, "every preset has positive, finite fields and its own name");

    profile_preset(&p, "dgx-a100-80g");
    ok(p.coll[0][3].k == 230 * GB && p.coll[1][3].k == 192 * GB && p.coll[1][0].k == 24 * GB &&
           p.h2d.k == 25 * GB && p.peak_flops[DT_BF16] == 312e12 && p.mem_bandwidth == 2039 * GB,
       "dgx-a100-80g: 230 GB/s in a node, 8 x 24 GB/s HDR across nodes, 25 GB/s PCIe Gen4");
    profile_preset(&p, "dgx-h100");
    ok(p.coll[0][3].k == 370 * GB && p.coll[1][3].k == 370 * GB && p.coll[2][1].k == 94 * GB &&
           p.h2d.k == 52.8 * GB && p.peak_flops[DT_BF16] == 989e12 && p.mem_bandwidth == 3350 * GB,
       "dgx-h100: 370 GB/s in a node, NDR 47 GB/s per GPU across nodes up to NVLink's 370, 52.8 GB/s PCIe Gen5");
    profile_preset(&p, "dgx-h200");
    ok(p.mem_bandwidth == 4800 * GB && p.memory_bytes == (int64_t)(140 * GiB) && p.coll[1][3].k == 370 * GB,
       "dgx-h200: 4.8 TB/s, 140 GiB, the DGX H100 fabric");

    const char *dgxs[] = {"dgx-a100-80g", "dgx-h100", "dgx-h200"};
    const char *gcps[] = {"gcp-l4", "gcp-a100-40g", "gcp-a100-80g"};
    int faster = 1;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            profile_preset(&dgx, dgxs[a]);
            profile_preset(&gcp, gcps[b]);
            for (int nodes = 2; nodes <= 128; nodes *= 2)
                for (int gpus = 1; gpus <= 8; gpus *= 2)
                    for (int c = 0; c < COLL_COUNT; c++) {
                        double td = profile_collective_seconds(&dgx, (CollKind)c, GiB, nodes, gpus);
                        double tg = profile_collective_seconds(&gcp, (CollKind)c, GiB, nodes, gpus);
                        if (!(td < tg)) {
                            diag("%s %dx%d: %g s, not faster than %s's %g s", dgxs[a], nodes, gpus, td, gcps[b], tg);
                            faster = 0;
                        }
                    }
        }
    ok(faster, "a 1 GiB collective across 2..128 nodes is faster on every DGX preset than on every GCP one");
}

// The names used before still load, with one notice on stderr for the whole
// process naming the new preset, and the very same numbers (name included).
static void test_old_names(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/notice.txt", tmpdir);
    fflush(stderr);
    int saved = dup(2);
    FILE *capture = fopen(path, "w");
    if (saved < 0 || !capture) {
        ok(0, "cannot capture stderr");
        return;
    }
    dup2(fileno(capture), 2);
    const struct { const char *old, *now; } same[] = {
        {"l4", "gcp-l4"}, {"a100-40g", "gcp-a100-40g"}, {"a100-80g", "gcp-a100-80g"}};
    int identical = 1;
    char err[512];
    for (int i = 0; i < 3; i++) {
        HwProfile a, b;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        if (profile_load(&a, same[i].old, err, sizeof err) != 0 || profile_preset(&b, same[i].now) != 0 ||
            memcmp(&a, &b, sizeof a) != 0) {
            identical = 0;
            diag("%s differs from %s", same[i].old, same[i].now);
        }
    }
    HwProfile h, d;
    profile_preset(&h, "h100-80g");
    profile_preset(&d, "dgx-h100");
    int h100_is_dgx = !memcmp(&h, &d, sizeof h) && profile_preset(&h, "h200") == 0 && !strcmp(h.name, "dgx-h200");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fclose(capture);
    ok(identical, "l4, a100-40g, a100-80g load gcp-l4, gcp-a100-40g, gcp-a100-80g bit for bit");
    ok(h100_is_dgx, "h100-80g and h200 load dgx-h100 and dgx-h200");
    char text[512] = "";
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = 0;
    if (f) fclose(f);
    ok(!strcmp(text, "mist: hardware preset \"l4\" is now called \"gcp-l4\" (same numbers)\n"),
       "one notice per process, naming the new preset: %s", text);
}

// Transfer times by hand: ring collectives per group shape, host copies, and the
// cpu preset's serialised streams.
static void test_transfer_times(void) {
    HwProfile p;
    // shape index: log2 rounded up, clamped
    ok(profile_shape_index(1) == 0 && profile_shape_index(2) == 1 && profile_shape_index(3) == 2 &&
           profile_shape_index(8) == 3 && profile_shape_index(1000) == PROFILE_SHAPES - 1,
       "group shape index = ceil(log2 n), clamped");

    // ring collective by hand: L4, one node, 8 GPUs, 1 GiB all-reduce
    profile_preset(&p, "gcp-l4");
    double want = 2.1 * (1.0 / 4.6832 * 7.0 / 8.0 + 3e-4);
    ok(near(profile_collective_seconds(&p, COLL_ALL_REDUCE, GiB, 1, 8), want, 0, 1e-12, "all-reduce"),
       "all-reduce 1 GiB on 1x8 L4 = 2.1*(1/4.6832*7/8 + 3e-4) s");
    want = 1.1 * (0.5 / 0.9791 * 3.0 / 4.0 + 0.0076);
    ok(near(profile_collective_seconds(&p, COLL_REDUCE_SCATTER, GiB / 2, 2, 2), want, 0, 1e-12, "reduce-scatter"),
       "reduce-scatter 0.5 GiB on 2 nodes x 2 GPUs uses the (2, 2) cell");
    ok(profile_collective_seconds(&p, COLL_ALL_GATHER, GiB, 1, 1) == 0.0, "a group of one costs nothing");
    ok(near(profile_host_copy_seconds(&p.h2d, GiB), 1.0 / 5.7546 + 4e-4, 0, 1e-12, "h2d") &&
           profile_host_copy_seconds(&p.d2h, 0) == 0.0,
       "host copy = bytes/k + beta, 0 for no bytes");

    // cpu: overlapped streams serialise (slowdown = number of streams)
    profile_preset(&p, "cpu");
    ok(p.slowdown[15][STREAM_C] == 4 && p.slowdown[STREAM_MASK(STREAM_H2D) | STREAM_MASK(STREAM_D2H)][STREAM_D2H] == 2,
       "cpu preset serialises overlapped streams");
}

// Profile files: a written profile reads back, a file overrides its base preset, and
// errors name the file, line and key.
static void test_profile_files(void) {
    HwProfile p;
    char err[512];
    // round trip through a profile file
    HwProfile a, b;
    profile_preset(&a, "gcp-l4");
    char path[600];
    snprintf(path, sizeof path, "%s/l4.ini", tmpdir);
    FILE *f = fopen(path, "w");
    profile_write_ini(&a, f);
    fclose(f);
    int rc = profile_load(&b, path, err, sizeof err);
    if (rc) diag("%s", err);
    int same = rc == 0 && llabs(a.memory_bytes - b.memory_bytes) < 4096;
    for (int n = 0; n < PROFILE_SHAPES && same; n++)
        for (int g = 0; g < PROFILE_SHAPES; g++)
            same &= fabs(a.coll[n][g].k - b.coll[n][g].k) <= 1e-6 * a.coll[n][g].k && a.coll[n][g].beta == b.coll[n][g].beta;
    for (unsigned m = 0; m < STREAM_SUBSETS && same; m++)
        for (int s = 0; s < STREAM_COUNT; s++) same &= fabs(a.slowdown[m][s] - b.slowdown[m][s]) < 1e-9;
    same &= llabs(a.host_memory_bytes - b.host_memory_bytes) < 4096 && a.host_memory_bytes > 0;
    ok(same && fabs(a.h2d.k - b.h2d.k) < 1e-6 * a.h2d.k, "a written profile reads back the same");
    ok(a.gemm_sms == 58 && b.gemm_sms == a.gemm_sms && b.gemm_tile_m == a.gemm_tile_m &&
           b.gemm_tile_n == a.gemm_tile_n && b.gemm_efficiency == a.gemm_efficiency &&
           b.gemm_k_overhead == a.gemm_k_overhead && b.attention_efficiency == a.attention_efficiency &&
           b.attention_seq_half == a.attention_seq_half && b.attention_head_half == a.attention_head_half &&
           b.usable_memory_fraction == a.usable_memory_fraction,
       "a written profile reads back the GEMM model, the attention curve and the usable fraction");
    f = fopen(path, "r");
    char head[256] = "";
    if (f && !fgets(head, sizeof head, f)) head[0] = 0;
    if (f) fclose(f);
    ok(strstr(head, "GB/s (1e9 bytes/s)") && strstr(head, "GiB (2^30 bytes)"),
       "a written profile states its units in its first line (%s)", head);

    // a file starting from a preset, overriding some fields
    const char *pf = write_file("mine.ini",
                                "[profile]\nbase = gcp-a100-80g\nmemory_gib = 70\nhost_memory_gib = 500\n[collective]\n2x8 = 25 1e-4\n"
                                "[interference]\nC+N = 1.3 1.05\n[host]\nh2d = 20 1e-5\n");
    rc = profile_load(&p, pf, err, sizeof err);
    if (rc) diag("%s", err);
    ok(rc == 0 && p.memory_bytes == (int64_t)(70 * GiB) && p.host_memory_bytes == (int64_t)(500 * GiB) &&
           near(p.coll[1][3].k, 25e9, 0, 1e-12, "2x8") &&
           p.slowdown[3][STREAM_C] == 1.3 && p.slowdown[3][STREAM_N] == 1.05 && p.h2d.k == 20e9 &&
           near(p.peak_flops[DT_BF16], 312e12, 0, 1e-12, "base peak"),
       "profile file overrides fields of its base preset");

    // errors name file, line and key
    pf = write_file("bad1.ini", "[profile]\nbase = dgx-h100\n\n[compute]\nflops_efficiency = 1.5\n");
    rc = profile_load(&p, pf, err, sizeof err);
    ok(rc != 0 && strstr(err, "bad1.ini:5:") && strstr(err, "flops_efficiency"), "bad value: file:line and key (%s)", err);
    pf = write_file("bad2.ini", "[profile]\nbase = gcp-l4\n[interference]\nC+X = 1 1\n");
    rc = profile_load(&p, pf, err, sizeof err);
    ok(rc != 0 && strstr(err, "bad2.ini:4:") && strstr(err, "C+X"), "unknown stream set is an error (%s)", err);
    pf = write_file("bad3.ini", "[profile]\nmemory_gib = 10\nbase = gcp-l4\n");
    rc = profile_load(&p, pf, err, sizeof err);
    ok(rc != 0 && strstr(err, ":3:") && strstr(err, "base"), "base after other keys is an error (%s)", err);
    pf = write_file("bad4.ini", "[profile]\nmemory_gib = 10\n");
    rc = profile_load(&p, pf, err, sizeof err);
    ok(rc != 0 && strstr(err, "peak_tflops_bf16"), "a file without base must give the peaks (%s)", err);
    pf = write_file("bad6.ini", "[profile]\nbase = gcp-l4\nhost_memory_gib = -4\n");
    rc = profile_load(&p, pf, err, sizeof err);
    ok(rc != 0 && strstr(err, "bad6.ini:3:") && strstr(err, "host_memory_gib") && strstr(err, ">= 0"),
       "a negative host_memory_gib is an error naming it (%s)", err);
    pf = write_file("bad7.ini", "[profile]\nbase = gcp-l4\nhost_memory_gib = 1e300\n");
    rc = profile_load(&p, pf, err, sizeof err);
    ok(rc != 0 && strstr(err, "bad7.ini:3:") && strstr(err, "host_memory_gib"),
       "a host_memory_gib too large for a byte count is an error (%s)", err);
    pf = write_file("bad5.ini", "[collective]\n3x8 = 10 0\n");
    rc = profile_load(&p, pf, err, sizeof err);
    ok(rc != 0 && strstr(err, ":2:") && strstr(err, "3x8"), "group shapes must be powers of two (%s)", err);
}

// Ranges: checked on the value as written, bounded so that every scaled value and
// every time computed from it stays finite and printable.
// usable_memory_fraction scales the planner's capacity; the GEMM model's keys
// are read, and refused with the key and the range when out of it
static void test_compute_shape_keys(void) {
    HwProfile p;
    char err[512];
    profile_preset(&p, "dgx-h100");
    ok(p.usable_memory_fraction == 1.0 && profile_capacity_bytes(&p) == p.memory_bytes,
       "a preset's usable fraction defaults to 1: capacity = memory");
    const char *pf = write_file("frac.ini", "[profile]\nbase = dgx-h100\nusable_memory_fraction = 0.9\n[compute]\n"
                                            "gemm_sms = 100\ngemm_tile = 64x128\ngemm_efficiency = 0.6\n"
                                            "gemm_k_overhead = 32\nattention_efficiency = 0.4\n");
    int rc = profile_load(&p, pf, err, sizeof err);
    if (rc) diag("%s", err);
    ok(rc == 0 && profile_capacity_bytes(&p) == (int64_t)(0.9 * (double)p.memory_bytes) && p.gemm_sms == 100 &&
           p.gemm_tile_m == 64 && p.gemm_tile_n == 128 && p.gemm_efficiency == 0.6 && p.gemm_k_overhead == 32 &&
           p.attention_efficiency == 0.4,
       "usable_memory_fraction 0.9 scales the capacity; gemm_* and attention_efficiency are read");
    const struct { const char *name, *text, *key, *range; } bad[] = {
        {"tile.ini", "[profile]\nbase = gcp-l4\n[compute]\ngemm_tile = 128\n", "gemm_tile", "MxN"},
        {"sms.ini", "[profile]\nbase = gcp-l4\n[compute]\ngemm_sms = 1.5\n", "gemm_sms", "0..1024"},
        {"frac0.ini", "[profile]\nbase = gcp-l4\nusable_memory_fraction = 0\n", "usable_memory_fraction", "[0.001, 1]"},
        {"att.ini", "[profile]\nbase = gcp-l4\n[compute]\nattention_efficiency = 2\n", "attention_efficiency", "[0, 1]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pf = write_file(bad[i].name, bad[i].text);
        rc = profile_load(&p, pf, err, sizeof err);
        ok(rc != 0 && strstr(err, bad[i].name) && strstr(err, bad[i].key) && strstr(err, bad[i].range),
           "%s out of range names the key and the range (%s)", bad[i].key, err);
    }
    pf = write_file("half.ini", "[profile]\nbase = cpu\n[compute]\ngemm_sms = 8\n");
    rc = profile_load(&p, pf, err, sizeof err);
    ok(rc != 0 && strstr(err, "gemm_tile") && strstr(err, "gemm_efficiency"),
       "gemm_sms without a tile and an efficiency is an error naming them (%s)", err);
}

static void test_value_ranges(void) {
    HwProfile p;
    char err[512];
    const char *pf;
    int rc;
    const struct { const char *name, *text, *at, *key, *range, *what; } out_of_range[] = {
        {"huge_peak.ini", "[profile]\nbase = gcp-l4\n[compute]\npeak_tflops_fp32 = 1e300\n", ":4:", "peak_tflops_fp32",
         "[1e-6, 1e6]", "a peak that would scale to infinite FLOP/s is an error naming the range"},
        {"tiny_bw.ini", "[profile]\nbase = gcp-l4\n[compute]\nmemory_bandwidth_gbps = 1e-300\n", ":4:",
         "memory_bandwidth_gbps", "[0.001, 1e6]", "a bandwidth whose reciprocal is infinite is an error"},
        {"tiny_mem.ini", "[profile]\nbase = gcp-l4\nmemory_gib = 1e-300\n", ":3:", "memory_gib = 1e-300", "[0.001, 1e7]",
         "a memory_gib that rounds to 0 bytes is out of range, not missing"},
        {"huge_launch.ini", "[profile]\nbase = gcp-l4\nlaunch_us = 4.4e30\n", ":3:", "launch_us", "(0, 1000]",
         "launch_us above 1000 is an error naming the range"},
        {"huge_beta.ini", "[profile]\nbase = gcp-l4\n[host]\nd2h = 5 1e30\n", ":4:", "d2h", "[0, 1] s",
         "a transfer latency above 1 s is an error naming the range"},
        {"huge_slow.ini", "[profile]\nbase = gcp-l4\n[interference]\nC+N = 1e300 1\n", ":4:", "C+N", "[1, 1000]",
         "a slowdown above 1000 is an error"},
    };
    for (size_t i = 0; i < sizeof out_of_range / sizeof out_of_range[0]; i++) {
        pf = write_file(out_of_range[i].name, out_of_range[i].text);
        rc = profile_load(&p, pf, err, sizeof err);
        char at[64];
        snprintf(at, sizeof at, "%s%s", out_of_range[i].name, out_of_range[i].at);
        ok(rc != 0 && strstr(err, at) && strstr(err, out_of_range[i].key) && strstr(err, out_of_range[i].range) &&
               !strstr(err, "missing"),
           "%s (%s)", out_of_range[i].what, err);
    }
    // every number at the edge of its range loads, and the times stay finite
    const char *edges[2] = {
        "[profile]\nmemory_gib = 0.001\nhost_memory_gib = 0.001\nlaunch_us = 1e-300\n[compute]\npeak_tflops_bf16 = 1e-6\n"
        "peak_tflops_fp32 = 1e-6\nflops_efficiency = 0.001\nmemory_bandwidth_gbps = 0.001\nbandwidth_efficiency = 0.001\n"
        "[collective]\nall_reduce_factor = 1e-300\n1x8 = 0.001 0\n[host]\nh2d = 0.001 0\n[interference]\nC+N = 1 1\n",
        "[profile]\nmemory_gib = 1e7\nhost_memory_gib = 1e7\nlaunch_us = 1000\n[compute]\npeak_tflops_bf16 = 1e6\n"
        "peak_tflops_fp32 = 1e6\nflops_efficiency = 1\nmemory_bandwidth_gbps = 1e6\nbandwidth_efficiency = 1\n"
        "[collective]\nall_reduce_factor = 100\n1x8 = 1e6 1\n[host]\nh2d = 1e6 1\n[interference]\nC+N = 1000 1000\n"};
    for (int i = 0; i < 2; i++) {
        pf = write_file("edge.ini", edges[i]);
        rc = profile_load(&p, pf, err, sizeof err);
        if (rc) diag("%s", err);
        double t = profile_collective_seconds(&p, COLL_ALL_REDUCE, 1e15, 1, 8) +
                   profile_host_copy_seconds(&p.h2d, 1e15) + 1e18 / (p.peak_flops[DT_BF16] * p.flops_efficiency) +
                   1e15 / (p.mem_bandwidth * p.bandwidth_efficiency);
        ok(rc == 0 && p.memory_bytes > 0 && p.host_memory_bytes > 0 && isfinite(t) && t > 0,
           "every number at its %s allowed value loads; a PB-sized step's times stay finite (%g s)",
           i ? "largest" : "smallest", t);
    }
}

// Keys set twice, continuation lines, and what the file is: a directory, its line
// endings, lines over inih's limit; the first problem in file order is reported.
static void test_keys_and_lines(void) {
    HwProfile p;
    char err[512];
    const char *pf;
    int rc;
    // a key set twice is an error naming both lines, however the key is spelled
    const struct { const char *name, *text, *line, *key; } twice[] = {
        {"twice_mem.ini", "[profile]\nbase = gcp-l4\nmemory_gib = 20\nmemory_gib = 30\n", ":4:", "memory_gib"},
        {"twice_base.ini", "[profile]\nbase = gcp-l4\nbase = dgx-h200\n", ":3:", "base"},
        {"twice_cell.ini", "[profile]\nbase = gcp-l4\n[collective]\n2x8 = 1 0\n\n02x8 = 2 0\n", ":6:", "02x8"},
        {"twice_set.ini", "[profile]\nbase = gcp-l4\n[interference]\nC+N = 1.1 1\n[host]\nh2d = 5 0\n[interference]\n"
                          "n+c = 1.2 1\n", ":8:", "n+c"},
    };
    const char *first[] = {"first at line 3", "first at line 2", "first at line 4", "first at line 4"};
    for (size_t i = 0; i < sizeof twice / sizeof twice[0]; i++) {
        pf = write_file(twice[i].name, twice[i].text);
        rc = profile_load(&p, pf, err, sizeof err);
        ok(rc != 0 && strstr(err, twice[i].name) && strstr(err, twice[i].line) && strstr(err, twice[i].key) &&
               strstr(err, "set twice") && strstr(err, first[i]),
           "%s set twice is an error (%s)", twice[i].key, err);
    }

    // an indented line is inih's continuation of the value above: named as such
    pf = write_file("indent.ini", "[profile]\nbase = gcp-l4\nmemory_gib = 20\n   30\n");
    rc = profile_load(&p, pf, err, sizeof err);
    ok(rc != 0 && strstr(err, "indent.ini:4:") && strstr(err, "indented line continues the value of line 3"),
       "an indented line is named as a continuation, not a key set twice (%s)", err);

    // what the file is: a directory, CR-only or CRLF line endings, lines over inih's limit
    rc = profile_load(&p, tmpdir, err, sizeof err);
    ok(rc != 0 && strstr(err, tmpdir) && strstr(err, "a directory") && !strstr(err, "missing"),
       "a directory is an error saying so, not a missing key (%s)", err);
    pf = write_file("cr.ini", "[profile]\rbase = gcp-l4\rmemory_gib = 5\r");
    rc = profile_load(&p, pf, err, sizeof err);
    ok(rc != 0 && strstr(err, "cr.ini:1:") && strstr(err, "carriage return"),
       "CR-only line endings are an error, not one line with every key after the first dropped (%s)", err);
    pf = write_file("crlf.ini", "[profile]\r\nbase = gcp-l4\r\nmemory_gib = 5\r\n[compute]\r\npeak_tflops_bf16 = 7\r\n");
    rc = profile_load(&p, pf, err, sizeof err);
    if (rc) diag("%s", err);
    ok(rc == 0 && p.memory_bytes == (int64_t)(5 * GiB) && p.peak_flops[DT_BF16] == 7e12, "CRLF line endings are read");
    char text[1024];
    snprintf(text, sizeof text, "[profile]\nbase = gcp-l4\nname = %0300d\nmemory_gib = 5\n", 0);
    pf = write_file("long.ini", text);
    rc = profile_load(&p, pf, err, sizeof err);
    ok(rc != 0 && strstr(err, "long.ini:3:") && strstr(err, "line longer than"),
       "a line longer than inih's buffer is an error, not split into two (%s)", err);
    // the first problem in file order is reported: a syntax error before a bad key
    pf = write_file("order.ini", "[profile]\nbase = gcp-l4\nno equals sign\nlaunch_us = 1e9\n");
    rc = profile_load(&p, pf, err, sizeof err);
    ok(rc != 0 && strstr(err, "order.ini:3:") && strstr(err, "syntax error"),
       "a syntax error is reported at its own line, before a later bad key (%s)", err);
}

// mist-profile's line fit, t = x / k + beta by least squares: it recovers exact
// lines and stays inside the ranges profile files accept.
static void test_line_fit(void) {
    MeasuredLine m = {.points = 4};
    for (int i = 0; i < 4; i++) m.x[i] = 1048576.0 * (1 << (2 * i)), m.t[i] = m.x[i] / 5e9 + 2e-5;
    measure_fit_line(&m);
    ok(fabs(m.fit.k / 5e9 - 1) < 1e-9 && fabs(m.fit.beta / 2e-5 - 1) < 1e-6 && m.worst_residual < 1e-9,
       "an exact line is recovered: k %.6g B/s, beta %.6g s, residual %.2g", m.fit.k, m.fit.beta, m.worst_residual);
    // a negative intercept (latency below the noise): the line through the origin
    m = (MeasuredLine){.points = 2, .x = {1e6, 2e6}, .t = {1e-4, 3e-4}};
    measure_fit_line(&m);
    ok(m.fit.beta == 0 && fabs(m.fit.k - 5e12 / 700) / m.fit.k < 1e-12,
       "a negative intercept gives the least-squares line through the origin: k = sum x^2 / sum x t = %.6g, "
       "beta 0", m.fit.k);
    // times that fall with size (noise): still a positive rate, beta 0
    m = (MeasuredLine){.points = 2, .x = {1e6, 4e6}, .t = {4e-3, 1e-3}};
    measure_fit_line(&m);
    ok(m.fit.k > 0 && m.fit.beta == 0 && m.worst_residual > 0.5,
       "times falling with size: a positive k (%.4g), beta 0, the residual says how bad (%.2f)", m.fit.k,
       m.worst_residual);
    // one point: through the origin; out-of-range rates clamp to the file format's
    m = (MeasuredLine){.points = 1, .x = {1e6}, .t = {1e-18}};
    measure_fit_line(&m);
    ok(m.fit.k == 1e15 && m.fit.beta == 0, "an impossibly fast point clamps k to 1e6 GB/s (%.4g)", m.fit.k);
    m = (MeasuredLine){.points = 2, .x = {1, 2}, .t = {5, 10}};
    measure_fit_line(&m);
    ok(m.fit.k == 1e6 && m.fit.beta <= 1, "an impossibly slow line clamps k to 0.001 GB/s and beta to <= 1 s");
}

// mist-profile's measured lines land in their shapes' cells, the rest of the
// profile stays, and the file a large job writes reads back.
static void test_measured_cells(void) {
    char err[512];
    HwProfile q;
    profile_preset(&q, "gcp-l4");
    LinkFit before = q.coll[profile_shape_index(4)][profile_shape_index(8)];
    ProfileMeasure pm = {.nodes = 2, .per_node = 2, .num_shapes = 2, .shape = {{1, 2}, {2, 2}}, .have_factors = 1,
                         .factor_rs = 1.2, .factor_ar = 2.3};
    pm.coll[0].fit = (LinkFit){3e9, 1e-4}, pm.coll[1].fit = (LinkFit){7e9, 2e-4};
    pm.h2d.fit = (LinkFit){11e9, 1e-5}, pm.d2h.fit = (LinkFit){13e9, 2e-5};
    profile_apply_measure(&q, &pm);
    LinkFit a = profile_coll_fit(&q, 1, 2), b = profile_coll_fit(&q, 2, 2), c = profile_coll_fit(&q, 4, 8);
    ok(a.k == 3e9 && b.k == 7e9 && b.beta == 2e-4 && c.k == before.k && c.beta == before.beta &&
           q.coll_factor[COLL_REDUCE_SCATTER] == 1.2 && q.coll_factor[COLL_ALL_REDUCE] == 2.3 && q.h2d.k == 11e9 &&
           q.d2h.beta == 2e-5,
       "measured lines land in their shapes' cells (1x2, 2x2), factors and host lines too; 4x8 keeps the preset's");

    // the file a 64-node x 8 job writes (27 shapes, a base named by a long path, the staged
    // comm path's description) reads back: no line over the reader's 200 characters
    ProfileMeasure big = {.nodes = 64, .per_node = 8, .have_factors = 1, .factor_rs = 1.1, .factor_ar = 2.1};
    for (int n = 1; n <= 64; n *= 2)
        for (int g = 1; g <= 8; g *= 2)
            if (n * g > 1) {
                big.shape[big.num_shapes][0] = n, big.shape[big.num_shapes][1] = g;
                big.coll[big.num_shapes++].fit = (LinkFit){(double)(n * 100 + g) * 1e6, 1e-5};
            }
    big.h2d.fit = (LinkFit){11e9, 1e-5}, big.d2h.fit = (LinkFit){13e9, 2e-5};
    char base[200], comm[200];
    memset(base, 'b', 150), base[150] = 0;
    snprintf(comm, sizeof comm, "staged through pinned host memory: not every rank has a GPU of its own (NCCL "
                                "needs one per rank), and more words than that");
    HwProfile w;
    profile_preset(&w, "gcp-l4");
    profile_apply_measure(&w, &big);
    size_t len = 0;
    char *text = profile_measure_ini(&w, &big, "mist-profile", base, comm, &len);
    char path[600];
    snprintf(path, sizeof path, "%s/measured64.ini", tmpdir);
    FILE *mf = fopen(path, "w");
    int wrote = text && mf && fwrite(text, 1, len, mf) == len;
    if (mf) fclose(mf);
    HwProfile back;
    int rc64 = wrote ? profile_load(&back, path, err, sizeof err) : -1;
    LinkFit x = rc64 == 0 ? profile_coll_fit(&back, 64, 8) : (LinkFit){0, 0};
    ok(rc64 == 0 && big.num_shapes == 27 && fabs(x.k / 6408e6 - 1) < 1e-6 && strstr(text, " 64x8"),
       "a 64 x 8 job's measured profile (27 shapes, a 150-character base path) reads back (%s)", rc64 ? err : "ok");
    free(text);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mist-test-profile-XXXXXX");
    if (!mkdtemp(tmpdir)) tap_skip_all("cannot make a temporary directory");
    test_presets();
    test_dgx_presets();
    test_old_names();
    test_transfer_times();
    test_profile_files();
    test_value_ranges();
    test_compute_shape_keys();
    test_keys_and_lines();
    test_line_fit();
    test_measured_cells();

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) diag("could not remove %s", tmpdir);
    return tap_done();
}
