// Model configurations of the Mist paper's grid (GPT-3 and Llama shapes at
// 1.3B .. 22B), written as INI text and loaded with config_load so that the
// family defaults (SwiGLU width, rotary positions, ...) are the real ones.
#ifndef MIST_BENCH_MODEL_INI_H
#define MIST_BENCH_MODEL_INI_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "base/config_load.h"

typedef struct {
    const char *name;
    int layers, hidden, heads;
} BenchShape;

// GPT-3 paper shapes (13B uses h 5120 so that 40 heads divide it)
static const BenchShape bench_shapes[] = {
    {"1.3B", 24, 2048, 16}, {"2.7B", 32, 2560, 32}, {"7B", 32, 4096, 32}, {"13B", 40, 5120, 40}, {"22B", 48, 6144, 64},
};

// Load family (gpt|llama) at shape with seq, global batch and hardware; 0 or -1.
static int bench_model_config(MistConfig *cfg, const char *family, const BenchShape *sh, int seq, int batch,
                              const char *hardware, int nodes, int gpn) {
    char path[] = "/tmp/mist-bench-model-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    FILE *f = fdopen(fd, "w");
    if (!f) return -1;
    fprintf(f, "[model]\nfamily = %s\nlayers = %d\nhidden = %d\nheads = %d\nvocab = %d\nseq_len = %d\n", family,
            sh->layers, sh->hidden, sh->heads, !strcmp(family, "llama") ? 32000 : 50304, seq);
    fprintf(f, "[train]\nglobal_batch = %d\nprecision = bf16\n", batch);
    fprintf(f, "[cluster]\nhardware = %s\nnodes = %d\ngpus_per_node = %d\n[plan]\nmode = auto\n", hardware, nodes, gpn);
    fclose(f);
    char err[1024];
    int rc = config_load(cfg, path, NULL, 0, 0, err, sizeof err);
    remove(path);
    if (rc) fprintf(stderr, "bench: %s\n", err);
    return rc ? -1 : 0;
}

#endif
