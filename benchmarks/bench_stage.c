// Batched evaluation speed of the real stage model (planner/cost.h): every
// time and memory output of one pipeline stage of GPT-3 22B (h 6144, 48
// layers, 64 heads, ffn 24576, vocab 50304, seq 2048, bf16) on the l4
// profile, the general model and models specialised to a ZeRO / offload
// pattern (the search evaluates one program per pattern). Each row evaluates
// N random candidates of its pattern on one thread (best of R runs) and checks
// a sample against the general model's tree-walk evaluation.
//
// usage: bench_stage [--candidates N] [--repeat R] [--json PATH]
//   defaults: N = 1000000, R = 3, PATH = benchmarks/bench_stage.json
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "planner/cost.h"
#include "planner/profile.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void gpt3_22b(MistConfig *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->source, sizeof c->source, "bench_stage (gpt3-22b)");
    ModelConfig *m = &c->model;
    m->family = FAMILY_GPT;
    m->layers = 48;
    m->hidden = 6144;
    m->heads = 64;
    m->kv_heads = 64;
    m->ffn_hidden = 24576;
    m->vocab = 50304;
    m->seq_len = 2048;
    m->norm = NORM_LAYERNORM;
    m->activation = ACT_GELU;
    m->position = POS_LEARNED;
    m->bias = 1;
    m->tied_embeddings = 1;
    m->norm_eps = 1e-5;
    c->train.global_batch = 512;
    c->train.precision = PREC_BF16;
    c->cluster.nodes = 4;
    c->cluster.gpus_per_node = 8;
}

static unsigned long long rng_state = 88172645463325252ull;
static double frand(void) {  // xorshift64, uniform in [0, 1)
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (rng_state >> 11) * 0x1p-53;
}

// candidates of pattern sp: cols[s][i]
static void fill_candidates(const StagePattern *sp, size_t n, double *cols[STAGE_SYMS]) {
    for (size_t i = 0; i < n; i++) {
        StageConfig c;
        c.layers = 1 + (int)(frand() * 48);
        c.b = 1 << (int)(frand() * 4);
        c.dp = 1 << (int)(frand() * 6);
        c.tp = 1 << (int)(frand() * 4);
        c.zero = sp->zero;
        c.ckpt = (int)(frand() * (c.layers + 1));
        c.G = 1 + (int)(frand() * 256);
        c.p = (int)(frand() * (c.G < 4 ? c.G : 4));
        c.wo = sp->wo ? 1 - frand() : 0;
        c.go = sp->go ? 1 - frand() : 0;
        c.oo = sp->oo ? 1 - frand() : 0;
        c.ao = sp->ao ? 1 - frand() : 0;
        double v[STAGE_SYMS] = {c.b, c.dp, c.tp, c.zero >= 3, c.zero >= 2, c.zero >= 1, c.ckpt,
                                c.wo, c.go, c.oo, c.ao, c.G, c.p, c.layers};
        for (int s = 0; s < STAGE_SYMS; s++) cols[s][i] = v[s];
    }
}

typedef struct {
    char pattern[32];
    const char *stage;
    int instructions, registers;
    double seconds, evals_per_s, ns_per_eval;
    int mismatches;
} Row;

int main(int argc, char **argv) {
    size_t n = 1000000;
    int repeat = 3;
    const char *json_path = "benchmarks/bench_stage.json";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--candidates") && i + 1 < argc) n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
        else {
            fprintf(stderr, "bench_stage: unknown argument '%s'; usage: bench_stage [--candidates N] [--repeat R] "
                            "[--json PATH]\n", argv[i]);
            return 2;
        }
    }
    if (n < 1 || repeat < 1) {
        fprintf(stderr, "bench_stage: --candidates and --repeat must be >= 1\n");
        return 2;
    }
    MistConfig cfg;
    gpt3_22b(&cfg);
    HwProfile hw;
    if (profile_preset(&hw, "l4") != 0) {
        fprintf(stderr, "bench_stage: no l4 profile preset\n");
        return 1;
    }

    // (pattern, stage kind): NULL pattern = the general model
    static const StagePattern pats[] = {
        {0, 0, 0, 0, 0}, {1, 0, 0, 0, 0}, {2, 0, 0, 0, 0}, {3, 0, 0, 0, 0}, {3, 1, 0, 0, 0},
        {2, 0, 1, 1, 0}, {1, 0, 0, 0, 1}, {3, 1, 1, 1, 1}, {1, 0, 0, 0, 0}, {3, 1, 1, 1, 1},
    };
    enum { NPAT = sizeof pats / sizeof pats[0] };
    // the last two rows: a last stage (post part: final norm, LM head, loss)
    const int rows = NPAT + 1;
    Row *row = calloc((size_t)rows, sizeof *row);
    double *cols[STAGE_SYMS], *outs[ST_OUTPUTS];
    for (int s = 0; s < STAGE_SYMS; s++) cols[s] = malloc(n * sizeof(double));
    for (int k = 0; k < ST_OUTPUTS; k++) outs[k] = malloc(n * sizeof(double));
    for (int s = 0; s < STAGE_SYMS; s++)
        if (!cols[s]) return 1;
    for (int k = 0; k < ST_OUTPUTS; k++)
        if (!outs[k]) return 1;

    StageModel general[2];
    char err[512];
    for (int last = 0; last < 2; last++)
        if (stage_model_build(&general[last], &cfg, &hw, NULL, 0, last, err, sizeof err) != 0) {
            fprintf(stderr, "bench_stage: %s\n", err);
            return 1;
        }

    int total_mismatches = 0;
    for (int r = 0; r < rows; r++) {
        Row *w = &row[r];
        int is_general = r == 0;
        const StagePattern *sp = is_general ? &pats[NPAT - 1] : &pats[r - 1];
        int last = r >= NPAT - 1;  // the two final patterns run on the last stage
        w->stage = last ? "last" : "middle";
        StageModel own, *m = &own;
        if (is_general) {
            m = &general[0];
            snprintf(w->pattern, sizeof w->pattern, "general");
        } else {
            stage_pattern_name(sp, w->pattern, sizeof w->pattern);
            if (stage_model_build_pattern(&own, &cfg, &hw, NULL, 0, last, sp, err, sizeof err) != 0) {
                fprintf(stderr, "bench_stage: %s\n", err);
                return 1;
            }
        }
        // the general row runs candidates of the heaviest pattern (everything offloaded, ZeRO-3)
        fill_candidates(sp, n, cols);
        double best = INFINITY;
        for (int k = 0; k < repeat; k++) {
            double t0 = now_s();
            stage_eval_batch(m, (const double *const *)cols, outs, n);
            double t = now_s() - t0;
            if (t < best) best = t;
        }
        // a sample against the general model's tree walk
        size_t sample = n < 1000 ? n : 1000;
        for (size_t i = 0; i < sample; i++) {
            size_t j = i * (n / sample);
            StageConfig c = {(int)cols[SYM_L][j], (int)cols[SYM_B][j], (int)cols[SYM_DP][j], (int)cols[SYM_TP][j],
                             sp->zero, (int)cols[SYM_CKPT][j], (int)cols[SYM_G][j], (int)cols[SYM_P][j],
                             cols[SYM_WO][j], cols[SYM_GO][j], cols[SYM_OO][j], cols[SYM_AO][j]};
            double o[ST_OUTPUTS];
            stage_eval_scalar(&general[last], &c, o);
            for (int k = 0; k < ST_OUTPUTS; k++)
                if (!(fabs(o[k] - outs[k][j]) <= 1e-12 * fabs(o[k]))) w->mismatches++;
        }
        total_mismatches += w->mismatches;
        w->instructions = expr_program_num_instructions(m->prog);
        w->registers = expr_program_num_registers(m->prog);
        w->seconds = best;
        w->evals_per_s = n / best;
        w->ns_per_eval = 1e9 * best / n;
        if (!is_general) stage_model_free(&own);
    }

    printf("stage model of GPT-3 22B (h 6144, 48 layers, seq 2048, bf16) on l4: %d outputs, %zu candidates per row, "
           "1 thread, best of %d\n", ST_OUTPUTS, n, repeat);
    printf("%-20s %-7s %12s %10s %16s %10s %11s\n", "pattern", "stage", "instructions", "registers", "evals/s/core",
           "ns/eval", "mismatches");
    for (int r = 0; r < rows; r++)
        printf("%-20s %-7s %12d %10d %16.4g %10.2f %11d\n", row[r].pattern, row[r].stage, row[r].instructions,
               row[r].registers, row[r].evals_per_s, row[r].ns_per_eval, row[r].mismatches);

    FILE *f = fopen(json_path, "w");
    if (!f) {
        fprintf(stderr, "bench_stage: cannot write %s\n", json_path);
        return 1;
    }
    fprintf(f, "{\n  \"benchmark\": \"bench_stage\",\n  \"model\": \"gpt3-22b\",\n  \"hardware\": \"l4\",\n"
               "  \"outputs\": %d,\n  \"candidates\": %zu,\n  \"threads\": 1,\n  \"repeat\": %d,\n  \"rows\": [\n",
            ST_OUTPUTS, n, repeat);
    for (int r = 0; r < rows; r++)
        fprintf(f, "    {\"pattern\": \"%s\", \"stage\": \"%s\", \"instructions\": %d, \"registers\": %d, "
                   "\"seconds\": %.6f, \"evals_per_second_per_core\": %.1f, \"ns_per_eval\": %.3f, "
                   "\"mismatches\": %d}%s\n",
                row[r].pattern, row[r].stage, row[r].instructions, row[r].registers, row[r].seconds,
                row[r].evals_per_s, row[r].ns_per_eval, row[r].mismatches, r + 1 < rows ? "," : "");
    fprintf(f, "  ]\n}\n");
    fclose(f);
    printf("wrote %s\n", json_path);

    for (int last = 0; last < 2; last++) stage_model_free(&general[last]);
    for (int s = 0; s < STAGE_SYMS; s++) free(cols[s]);
    for (int k = 0; k < ST_OUTPUTS; k++) free(outs[k]);
    free(row);
    return total_mismatches ? 1 : 0;
}
