// Samples during training (runtime/train_sample.h).
#include "runtime/train_sample.h"
#include <stdio.h>
#include <stdlib.h>
#include "runtime/comm.h"
#include "runtime/sample.h"
#include "runtime/zero.h"

// The byte tokenizer's text with control bytes other than newline and tab shown as '?'.
static void print_bytes(const int32_t *tokens, int n) {
    for (int i = 0; i < n; i++) {
        int c = tokens[i];
        putchar(c == '\n' || c == '\t' || (c >= 32 && c < 127) || c >= 128 ? c : '?');
    }
}

void train_sample_show(const ModelRuntime *layout, const float *weights, int64_t iteration, uint64_t seed) {
    Sampler s;
    char err[1024];
    // start from end-of-text for GPT-2's vocabulary (as llm.c), else from a newline
    int V = layout->V;
    int32_t tokens[TRAIN_SAMPLE_TOKENS + 1] = {V == 50257 ? 50256 : V > '\n' ? '\n' : 0};
    int len = 1;
    if (sampler_open_weights(&s, layout, weights, TRAIN_SAMPLE_TOKENS + 1, err, sizeof err)) {
        printf("mist: sample at iteration %lld: not taken: %s\n", (long long)iteration, err);
    } else {
        sampler_generate(&s, tokens, &len, TRAIN_SAMPLE_TOKENS, 1.0, 0, seed + (uint64_t)iteration);
        printf("mist: sample at iteration %lld:%s", (long long)iteration, V <= 256 ? "\n" : "");
        if (V <= 256) print_bytes(tokens + 1, len - 1);
        for (int i = 1; V > 256 && i < len; i++) printf(" %d", tokens[i]);
        printf("\n");
        fflush(stdout);
    }
    sampler_close(&s);
}

void train_sample_print(ModelRuntime *r, int root, int64_t iteration, uint64_t seed) {
    zero_flush(r);
    float *local = calloc(3 * r->Pp, sizeof *local), *global = calloc(r->Pglobal, sizeof *global);
    if (!local || !global) {  // every rank still takes part in the collectives below
        fprintf(stderr, "mist-train: out of host memory for a sample (%zu floats); aborting\n", 3 * r->Pp + r->Pglobal);
        r->comm->abort(r->comm, 1, "out of memory");
    }
    zero_collect(r, local, local + r->Pp, local + 2 * r->Pp);
    mr_tp_gather(r, local, global, 1);
    if (root) train_sample_show(r, global, iteration, seed);
    free(local), free(global);
}
