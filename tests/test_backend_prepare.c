// What mist-train tells a backend before a run (runtime/attention_choice.h,
// runtime/backend_prepare.h), against a fake backend that records what it is
// asked: the attention choice (MIST_CUDA_ATTENTION over [runtime] attention, the
// errors of a refused choice, the note of a backend without one), the shapes
// prepared, the reserved bytes counted, and the memory lines' arithmetic
//   predicted = arena + reserved,  measured = device's count + reserved.
#define _POSIX_C_SOURCE 200809L  // setenv
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/attention_choice.h"
#include "runtime/backend_prepare.h"
#include "tests/tap.h"

static size_t fake_reserved;
static BackendOpShape asked[4];
static int n_asked, refuse;
static char last_name[32];

static size_t fake_reserved_bytes(Backend *b) { (void)b; return fake_reserved; }
static int fake_prepare(Backend *b, const BackendOpShape *s, char *why, size_t n) {
    (void)b;
    if (n_asked < 4) asked[n_asked++] = *s;
    if (refuse && s->op == OP_ATTENTION) {
        snprintf(why, n, "no engine for this graph");
        return -1;
    }
    fake_reserved += s->op == OP_ATTENTION ? (size_t)s->B * s->NH * s->T * s->HS * 4 : (size_t)s->B * s->T * 12;
    return 0;
}
// a backend with wgmma missing: auto resolves to base, wgmma is refused
static int fake_set(Backend *b, const char *name, char *said, size_t n) {
    (void)b;
    snprintf(last_name, sizeof last_name, "%s", name);
    if (!strcmp(name, "wgmma")) {
        snprintf(said, n, "wgmma needs a Hopper GPU");
        return -1;
    }
    snprintf(said, n, "%s", strcmp(name, "auto") ? name : "base (auto: no wgmma here)");
    return 0;
}

int main(void) {
    Backend be = {.name = "fake", .reserved_bytes = fake_reserved_bytes, .prepare_op = fake_prepare,
                  .set_attention = fake_set};
    MistConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.source, sizeof cfg.source, "x.ini");
    char said[1024], err[1024], note[1200], line[512];

    // ---- the choice
    unsetenv("MIST_CUDA_ATTENTION");
    cfg.runtime.attention = ATTENTION_AUTO;
    int rc = backend_choose_attention(&be, &cfg, said, sizeof said, err, sizeof err);
    ok(rc == 0 && !strcmp(last_name, "auto") && strstr(said, "attention kernels: base (auto: no wgmma here)") &&
           strstr(said, "[runtime] attention = auto"),
       "auto is given to the backend and its resolution said with the key: %s", said);
    cfg.runtime.attention = ATTENTION_CUDNN;
    setenv("MIST_CUDA_ATTENTION", "wide", 1);
    rc = backend_choose_attention(&be, &cfg, said, sizeof said, err, sizeof err);
    ok(rc == 0 && !strcmp(last_name, "wide") && strstr(said, "MIST_CUDA_ATTENTION=wide (over [runtime] attention)"),
       "MIST_CUDA_ATTENTION overrides the key: %s", said);
    unsetenv("MIST_CUDA_ATTENTION");
    cfg.runtime.attention = ATTENTION_WGMMA;
    rc = backend_choose_attention(&be, &cfg, said, sizeof said, err, sizeof err);
    ok(rc == 2 && strstr(err, "x.ini") && strstr(err, "[runtime] attention = wgmma") && strstr(err, "Hopper") &&
           strstr(err, "allowed here: auto, base, wide, cudnn"),
       "a choice the backend refuses exits 2 naming the file, key, reason and the others: %s", err);
    setenv("MIST_CUDA_ATTENTION", "wgmma", 1);
    rc = backend_choose_attention(&be, &cfg, said, sizeof said, err, sizeof err);
    ok(rc == 2 && strstr(err, "environment: MIST_CUDA_ATTENTION=wgmma") && !strstr(err, "x.ini"),
       "refused through the variable, the variable is named: %s", err);
    unsetenv("MIST_CUDA_ATTENTION");
    Backend cpu = {.name = "cpu", .device_memory_is_host = 1, .reserved_bytes = fake_reserved_bytes};
    cfg.runtime.attention = ATTENTION_CUDNN;
    rc = backend_choose_attention(&cpu, &cfg, said, sizeof said, err, sizeof err);
    ok(rc == 0 && strstr(said, "[runtime] attention = cudnn: not applicable to the cpu backend") &&
           strstr(said, "ignored"), "a backend without a choice: cudnn accepted and ignored with a note: %s", said);
    cfg.runtime.attention = ATTENTION_AUTO;
    rc = backend_choose_attention(&cpu, &cfg, said, sizeof said, err, sizeof err);
    ok(rc == 0 && said[0] == '\0', "... and auto says nothing there");

    // ---- the shapes prepared and the reserved bytes
    fake_reserved = 1000;
    size_t r = backend_prepare_shapes(&be, 2, 64, 4, 2, 32, 1, note, sizeof note);
    size_t want = 1000 + 2 * 4 * 64 * 32 * 4 + 2 * 64 * 12;
    ok(n_asked == 2 && asked[0].op == OP_ATTENTION && asked[0].B == 2 && asked[0].T == 64 && asked[0].NH == 4 &&
           asked[0].NKV == 2 && asked[0].HS == 32 && asked[1].op == OP_EMBEDDING && asked[1].B * asked[1].T == 128,
       "the attention at (B, T, NH, NKV, HS) and the embedding at B*T tokens are prepared");
    ok(r == want && note[0] == '\0', "the reserved bytes after preparing are returned (%zu, want %zu)", r, want);
    n_asked = 0;
    r = backend_prepare_shapes(&be, 2, 64, 4, 2, 32, 0, note, sizeof note);
    ok(n_asked == 1 && asked[0].op == OP_ATTENTION && r == want + 2 * 4 * 64 * 32 * 4,
       "a stage without the embedding prepares the attention only");
    refuse = 1;
    backend_prepare_shapes(&be, 1, 8, 2, 1, 64, 0, note, sizeof note);
    ok(strstr(note, "B=1 T=8 NH=2 NKV=1 HS=64") && strstr(note, "no engine for this graph"),
       "a refused preparation is said with its shape and reason: %s", note);
    refuse = 0;
    n_asked = 0;
    ok(backend_prepare_shapes(&cpu, 2, 64, 4, 2, 32, 1, note, sizeof note) == 0 && n_asked == 0,
       "a backend whose device memory is host memory: nothing prepared, 0 reserved device bytes");

    // ---- the lines: predicted = arena + reserved; measured = device's count + reserved before the baseline
    backend_memory_predicted_line(3000000, 1048576, line, sizeof line);
    ok(strstr(line, "+ backend reserved 1.0 MiB") && strstr(line, "(4048576 B)"), "predicted: %s", line);
    backend_memory_measured_line(2900000, 1048576, 3000000, 1048576, line, sizeof line);
    ok(strstr(line, "= 3.8 MiB (3948576 B), predicted 4048576 B: -2.47%") && !strstr(line, "grew"), "measured: %s",
       line);
    backend_memory_measured_line(2900000, 1048576, 3000000, 1048576 + 4096, line, sizeof line);
    ok(strstr(line, "grew by 4096 B after planning") != NULL, "growth after planning is said: %s", line);
    return tap_done();
}
