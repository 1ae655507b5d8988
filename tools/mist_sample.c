// mist-sample CHECKPOINT [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--seed S]
//             [--tokenizer gpt2_tokenizer.bin]
//
// Generates text from a mist checkpoint on the CPU backend (runtime/sample.h)
// and prints it: the prompt, then the new tokens decoded with the byte
// tokenizer, or llm.c's GPT-2 tokenizer file when given.
#include <config.h>  // PACKAGE_VERSION
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/sample.h"
#include "runtime/token_decode.h"
#include "runtime/weights_ckpt.h"

static const char USAGE[] =
    "usage: mist-sample CHECKPOINT [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--seed S]\n"
    "                   [--tokenizer FILE]\n"
    "  CHECKPOINT     a step_*.ckpt file, or a [checkpoint] dir (its latest)\n"
    "  --prompt       text to continue (byte tokenizer only); default: a newline (bytes) or <|endoftext|>\n"
    "  --tokens       tokens to generate, 1..1000000 (default 64)\n"
    "  --temperature  0 (most likely token) .. 100 (default 1)\n"
    "  --top-k        draw among the K most likely tokens; 0 = all (default 0)\n"
    "  --seed         the random draw's seed (default 1); the same seed gives the same text\n"
    "  --tokenizer    llm.c's gpt2_tokenizer.bin to decode GPT-2 token ids; default: bytes\n"
    "  --show-logits K  print the K most likely next tokens after the prompt, 'id logit' per line, and exit\n"
    "  -V, --version  print the version and exit\n";

typedef struct {
    const char *ckpt, *prompt, *tokenizer;
    long long tokens, top_k, seed, show_logits;
    double temperature;
} Args;

static int number(const char *flag, const char *v, double lo, double hi, double *out) {
    char *end;
    *out = strtod(v, &end);
    if (end == v || *end || !(*out >= lo && *out <= hi)) {
        fprintf(stderr, "mist-sample: %s %s: allowed: a number %g .. %g\n%s", flag, v, lo, hi, USAGE);
        return -1;
    }
    return 0;
}

static int parse_args(int argc, char **argv, Args *a) {
    *a = (Args){.tokens = 64, .seed = 1, .temperature = 1.0};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        double v;
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) { fputs(USAGE, stdout); exit(0); }
        if (!strcmp(f, "-V") || !strcmp(f, "--version")) { printf("mist-sample (mist) %s\n", PACKAGE_VERSION); exit(0); }
        if (f[0] != '-') {
            if (a->ckpt) { fprintf(stderr, "mist-sample: unexpected argument '%s'\n%s", f, USAGE); return -1; }
            a->ckpt = f;
            continue;
        }
        if (i + 1 >= argc) { fprintf(stderr, "mist-sample: %s needs a value\n%s", f, USAGE); return -1; }
        const char *val = argv[++i];
        if (!strcmp(f, "--prompt")) a->prompt = val;
        else if (!strcmp(f, "--tokenizer")) a->tokenizer = val;
        else if (!strcmp(f, "--temperature")) { if (number(f, val, 0, 100, &a->temperature)) return -1; }
        else if (!strcmp(f, "--tokens")) { if (number(f, val, 1, 1e6, &v)) return -1; a->tokens = (long long)v; }
        else if (!strcmp(f, "--top-k")) { if (number(f, val, 0, 1 << 24, &v)) return -1; a->top_k = (long long)v; }
        else if (!strcmp(f, "--show-logits")) { if (number(f, val, 1, 1 << 24, &v)) return -1; a->show_logits = (long long)v; }
        else if (!strcmp(f, "--seed")) { if (number(f, val, 0, 9e15, &v)) return -1; a->seed = (long long)v; }
        else { fprintf(stderr, "mist-sample: unknown option '%s'\n%s", f, USAGE); return -1; }
    }
    if (!a->ckpt) { fprintf(stderr, "mist-sample: CHECKPOINT is missing\n%s", USAGE); return -1; }
    return 0;
}

// The prompt as token ids (bytes), or the tokenizer's start token. -1 with err.
static int prompt_tokens(const Args *a, const TokenDecoder *dec, int vocab, int32_t *out, char *err, size_t errlen) {
    if (a->prompt && dec->piece) {
        snprintf(err, errlen, "--prompt needs the byte tokenizer: a GPT-2 tokenizer file only decodes (it has no BPE "
                 "merges); hint: leave out --prompt to start from <|endoftext|>");
        return -1;
    }
    if (!a->prompt || !a->prompt[0]) {
        out[0] = dec->eot >= 0 ? dec->eot : '\n';
        if (out[0] >= vocab) { snprintf(err, errlen, "the start token %d is outside the model's vocabulary %d", out[0], vocab); return -1; }
        return 1;
    }
    int n = 0;
    for (const unsigned char *p = (const unsigned char *)a->prompt; *p; p++) {
        if (*p >= vocab) {
            snprintf(err, errlen, "--prompt byte %d is outside the model's vocabulary of %d tokens", *p, vocab);
            return -1;
        }
        out[n++] = *p;
    }
    return n;
}

// The k largest logits, largest first (ties: lower id first), as "id logit" lines.
static void show_logits(const float *z, int V, int k) {
    if (k > V) k = V;
    for (int i = 0, last = -1; i < k; i++) {
        int best = -1;
        for (int v = 0; v < V; v++) {
            int after_last = last < 0 || z[v] < z[last] || (z[v] == z[last] && v > last);
            if (after_last && (best < 0 || z[v] > z[best])) best = v;
        }
        printf("%d %.9g\n", best, z[best]);
        last = best;
    }
}

int main(int argc, char **argv) {
    Args a;
    if (parse_args(argc, argv, &a)) return 2;
    char err[2048], path[1024];
    ModelConfig m;
    TokenDecoder dec;
    Sampler s;
    memset(&s, 0, sizeof s);
    if (token_decoder_open(&dec, a.tokenizer, err, sizeof err)) {
        fprintf(stderr, "mist-sample: %s\n", err);
        return 1;
    }
    CkptReader *ck = weights_ckpt_open(a.ckpt, path, sizeof path, err, sizeof err);
    int32_t *tokens = NULL;
    int len = 0, rc = 1;
    // the forward covers the prompt and the new tokens (or seq_len, sliding, when they are more)
    long long window = (a.prompt && a.prompt[0] ? (long long)strlen(a.prompt) : 1) + a.tokens;
    if (!ck || weights_ckpt_model(ck, path, &m, err, sizeof err) ||
        sampler_open(&s, &m, window < m.seq_len ? (int)window : 0, ck, err, sizeof err))
        goto out;
    if (!(tokens = malloc(((a.prompt ? strlen(a.prompt) : 0) + 1 + (size_t)a.tokens) * sizeof *tokens))) {
        snprintf(err, sizeof err, "out of host memory");
        goto out;
    }
    if ((len = prompt_tokens(&a, &dec, m.vocab, tokens, err, sizeof err)) < 0) goto out;
    if (a.show_logits) {
        show_logits(sampler_logits(&s, tokens, len), m.vocab, (int)a.show_logits);
        rc = 0;
        goto out;
    }
    int start = len;
    sampler_generate(&s, tokens, &len, (int)a.tokens, a.temperature, (int)a.top_k, (uint64_t)a.seed);
    if (a.prompt) fputs(a.prompt, stdout);
    for (int i = start; i < len; i++) {
        size_t n;
        const unsigned char *piece = token_decoder_piece(&dec, tokens[i], &n);
        fwrite(piece, 1, n, stdout);
    }
    fputc('\n', stdout);
    rc = 0;
out:
    if (rc) fprintf(stderr, "mist-sample: %s\n", err);
    free(tokens);
    sampler_close(&s);
    ckpt_reader_close(ck);
    token_decoder_close(&dec);
    return rc;
}
