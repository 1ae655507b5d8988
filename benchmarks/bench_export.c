// Memory of a safetensors export: writes a mist checkpoint of a model (default
// GPT-3 1.3B, examples/gpt3-1.3b.ini) without training (every weight a pure
// function of its tensor and element index), runs mist-export on it as a
// child process, and reports the child's peak resident memory (getrusage
// ru_maxrss) against the model's and its largest tensor's bytes; then reads
// the export back and checks every element against the function (names and
// layouts through runtime/hf_names.h). A table, then one JSON object.
//
//   benchmarks/bench_export [--ini FILE] [--dir DIR] [--dtype fp32|bf16] [--json PATH] [--keep]
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include "base/config_load.h"
#include "models/model.h"
#include "runtime/checkpoint.h"
#include "runtime/hf_names.h"
#include "runtime/safetensors.h"

#define BENCH_MAX_TENSORS 4096

typedef struct {
    char name[64];
    int64_t rows, cols;
} Tensor;

// A value in [-1, 1) from (tensor, element): splitmix64 of the pair.
static float weight_value(int k, int64_t i) {
    uint64_t z = ((uint64_t)k << 40) + (uint64_t)i + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(int64_t)(z >> 41) / (float)(1 << 22) - 1.0f;
}

static double now_s(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec * 1e-6;
}

// The model's tensors in checkpoint order, with the stored (real vocabulary) rows.
static int list_tensors(const ModelConfig *m, Tensor *out, int max) {
    ParamSpec spec[MODEL_MAX_PARAMS];
    int n = 0;
    for (int part = PART_PRE; part <= PART_POST; part++)
        for (int l = 0; l < (part == PART_BLOCK ? m->layers : 1); l++) {
            int c = model_params(m, (ModelPart)part, spec, MODEL_MAX_PARAMS);
            for (int i = 0; i < c && n < max; i++, n++) {
                if (part == PART_BLOCK) snprintf(out[n].name, sizeof out[n].name, "block.%d.%.31s", l, spec[i].name);
                else snprintf(out[n].name, sizeof out[n].name, "%.31s", spec[i].name);
                int vocab = !strcmp(spec[i].name, "wte") || !strcmp(spec[i].name, "lm_head_w");
                out[n].rows = vocab ? m->vocab : spec[i].rows;
                out[n].cols = spec[i].cols;
            }
        }
    return n;
}

static int write_checkpoint(const char *dir, const ModelConfig *m, const Tensor *t, int n, char *err, size_t len) {
    int64_t most = 0;
    for (int k = 0; k < n; k++) most = t[k].rows * t[k].cols > most ? t[k].rows * t[k].cols : most;
    float *buf = malloc((size_t)most * sizeof *buf);
    CkptWriter *w = buf ? ckpt_writer_open(dir, 1, err, len) : NULL;
    if (!w) { free(buf); return -1; }
    char describe[512], name[CKPT_NAME_MAX];
    ckpt_model_describe(m, describe, sizeof describe);
    ckpt_write_blob(w, "state/model", describe, strlen(describe));
    for (int k = 0; k < n; k++) {
        int64_t count = t[k].rows * t[k].cols, shape[2] = {t[k].rows, t[k].cols};
        for (int64_t i = 0; i < count; i++) buf[i] = weight_value(k, i);
        snprintf(name, sizeof name, "param/%.63s", t[k].name);
        ckpt_write_tensor(w, name, MIST_F32, t[k].cols == 1 ? 1 : 2, shape, buf);
    }
    free(buf);
    return ckpt_writer_commit(w, 0, err, len);
}

// Runs mist-export; its peak RSS in bytes, or -1.
static int64_t run_export(const char *exe, const char *ckpt, const char *out, const char *dtype) {
    pid_t pid = fork();
    if (pid == 0) {
        execl(exe, exe, ckpt, "--safetensors", out, "--dtype", dtype, (char *)NULL);
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (pid < 0 || wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) return -1;
    return (int64_t)ru.ru_maxrss * 1024;
}

// Every element of the export equals the function, after the documented mapping. Mismatches counted.
static int64_t verify(const char *path, const ModelConfig *m, const Tensor *t, int n, int bf16, char *err,
                      size_t len) {
    StReader *r = st_reader_open(path, err, len);
    if (!r) return -1;
    int64_t bad = 0;
    float *buf = NULL;
    size_t cap = 0;
    for (int k = 0; k < n && bad >= 0; k++) {
        HfPiece p[HF_MAX_PIECES];
        int np = hf_pieces(m, t[k].name, t[k].rows, t[k].cols, p);
        for (int j = 0; j < np && bad >= 0; j++) {
            const StTensor *s = st_reader_find(r, p[j].name);
            size_t count = (size_t)(p[j].rows * t[k].cols);
            if (count > cap && !(buf = realloc(buf, (cap = count) * sizeof *buf))) bad = -1;
            if (!s || bad < 0 || st_read_f32(r, s, 0, (int64_t)count, buf, err, len)) { bad = -1; break; }
            for (int64_t a = 0; a < p[j].rows; a++)
                for (int64_t c = 0; c < t[k].cols; c++) {
                    float want = weight_value(k, (p[j].row0 + a) * t[k].cols + c);
                    if (bf16) want = mist_bf16_to_f32(mist_f32_to_bf16(want));
                    bad += buf[p[j].transpose ? c * p[j].rows + a : a * t[k].cols + c] != want;
                }
        }
    }
    free(buf);
    st_reader_close(r);
    return bad;
}

int main(int argc, char **argv) {
    const char *ini = "examples/gpt3-1.3b.ini", *dir = "/tmp/mist_bench_export", *dtype = "fp32", *json = NULL;
    int keep = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--keep")) keep = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--ini")) ini = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--dir")) dir = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--dtype")) dtype = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--json")) json = argv[++i];
        else { fprintf(stderr, "usage: bench_export [--ini FILE] [--dir DIR] [--dtype fp32|bf16] [--json PATH] [--keep]\n"); return 2; }
    }
    static MistConfig cfg;
    char err[2048], ckpt[1200], out[1200], exe[1200];
    if (config_load(&cfg, ini, NULL, 0, 0, err, sizeof err)) { fprintf(stderr, "bench_export: %s\n", err); return 2; }
    static Tensor t[BENCH_MAX_TENSORS];
    int n = list_tensors(&cfg.model, t, BENCH_MAX_TENSORS);
    int64_t params = 0, largest = 0;
    for (int k = 0; k < n; k++) {
        params += t[k].rows * t[k].cols;
        if (t[k].rows * t[k].cols > largest) largest = t[k].rows * t[k].cols;
    }
    snprintf(ckpt, sizeof ckpt, "%s/step_00000001.ckpt", dir);
    snprintf(out, sizeof out, "%s/model.safetensors", dir);
    const char *slash = strrchr(argv[0], '/');
    snprintf(exe, sizeof exe, "%.*s/../mist-export", slash ? (int)(slash - argv[0]) : 1, slash ? argv[0] : ".");
    double t0 = now_s();
    if (write_checkpoint(dir, &cfg.model, t, n, err, sizeof err)) { fprintf(stderr, "bench_export: %s\n", err); return 1; }
    double t1 = now_s();
    int64_t rss = run_export(exe, ckpt, out, dtype);
    double t2 = now_s();
    if (rss < 0) { fprintf(stderr, "bench_export: %s failed on %s\n", exe, ckpt); return 1; }
    int64_t bad = verify(out, &cfg.model, t, n, !strcmp(dtype, "bf16"), err, sizeof err);
    if (bad < 0) { fprintf(stderr, "bench_export: verify: %s\n", err); return 1; }
    double model_mb = params * 4 / 1e6, largest_mb = largest * 4 / 1e6, rss_mb = rss / 1e6;
    printf("%-34s %14s\n", "model", ini);
    printf("%-34s %14lld\n", "parameters", (long long)params);
    printf("%-34s %14.1f\n", "model fp32 MB", model_mb);
    printf("%-34s %14.1f\n", "largest tensor fp32 MB", largest_mb);
    printf("%-34s %14.1f\n", "mist-export peak RSS MB", rss_mb);
    printf("%-34s %14.3f\n", "peak RSS / model", rss_mb / model_mb);
    printf("%-34s %14.1f\n", "checkpoint write s", t1 - t0);
    printf("%-34s %14.1f\n", "export s", t2 - t1);
    printf("%-34s %14lld\n", "elements not matching", (long long)bad);
    char line[1024];
    snprintf(line, sizeof line, "{\"model\": \"%s\", \"dtype\": \"%s\", \"parameters\": %lld, \"model_fp32_bytes\": %lld, "
             "\"largest_tensor_fp32_bytes\": %lld, \"export_peak_rss_bytes\": %lld, \"export_seconds\": %.2f, "
             "\"mismatches\": %lld}\n", ini, dtype, (long long)params, (long long)params * 4, (long long)largest * 4,
             (long long)rss, t2 - t1, (long long)bad);
    fputs(line, stdout);
    FILE *f = json ? fopen(json, "w") : NULL;
    if (f) fputs(line, f), fclose(f);
    if (!keep) unlink(out), unlink(ckpt);
    return bad ? 1 : 0;
}
