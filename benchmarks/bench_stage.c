// Batched evaluation speed of the real stage model (planner/stage_model.h): every
// time and memory output of one pipeline stage of GPT-3 22B (h 6144, 48
// layers, 64 heads, ffn 24576, vocab 50304, seq 2048, bf16) on the gcp-l4
// profile, the general model and models specialised to a ZeRO / offload
// pattern (the search evaluates one program per pattern), on one thread.
//
// Two kinds of rows:
//   random  every symbol varies from candidate to candidate: L in 1..48,
//           b in {1,2,4,8}, dp in {1..32}, tp in {1..8}, ckpt in 0..L,
//           G in 1..256, p in 0..min(G,4)-1, each enabled offload ratio in
//           (0, 1]; one call over N candidates.
//   search  the batches a search evaluates: one call per (G, dp, tp, L, p),
//           each drawn at random, sweeping b in {1,2,4,8} x ckpt 0..L x the
//           enabled offload ratios on a grid: eighths {1/8, ..., 1} when the
//           pattern has one ratio, quarters {1/4, ..., 1} each when it has
//           more (ratios innermost, then ckpt, then b); calls until N
//           candidates, timed in total.
//           Only b, ckpt and the ratios vary inside a call, which the
//           evaluator's hoisting of batch-uniform work exploits.
// The general model's row runs candidates of the heaviest pattern (ZeRO-3,
// every ratio offloaded), whose ZeRO flags are then the same for all.
// Best of R runs. Checked on 1000 candidates per row: bitwise against the
// same model's tree walk (expr_eval, the evaluator's contract) and to 1e-12
// relative against the general model's tree walk (d: relative to |d| + |t|,
// as a difference of terms the size of t).
// For each specialised row also the two programs the search evaluates
// (stage_model_build_from with STAGE_BUILD_SPLIT): the times t, d alone and
// the memory peaks alone, each checked bitwise against the whole program on
// every candidate.
//
// usage: bench_stage [--candidates N] [--repeat R] [--json PATH]
//   defaults: N = 1000000, R = 3, PATH = benchmarks/bench_stage.json
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "planner/stage_model.h"
#include "base/profile.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void gpt3_22b(MistConfig *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->source, sizeof c->source, "bench_stage (gpt3-22b)");
    c->model = model_family_config(FAMILY_GPT, 48, 6144, 64, 50304, 2048);
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

static void put_config(double *cols[STAGE_SYMS], size_t i, const StageConfig *c) {
    double v[STAGE_SYMS];
    stage_sym_values(c, v);
    for (int s = 0; s < STAGE_SYMS; s++) cols[s][i] = v[s];
}

static StageConfig get_config(double *cols[STAGE_SYMS], size_t j, int zero) {
    StageConfig c = {{.layers = (int)cols[SYM_L][j], .b = (int)cols[SYM_B][j], .dp = (int)cols[SYM_DP][j],
                      .tp = (int)cols[SYM_TP][j], .zero = zero, .ckpt = (int)cols[SYM_CKPT][j], .wo = cols[SYM_WO][j],
                      .go = cols[SYM_GO][j], .oo = cols[SYM_OO][j], .ao = cols[SYM_AO][j]},
                     (int)cols[SYM_G][j], (int)cols[SYM_P][j]};
    return c;
}

// random candidates of pattern sp, every symbol varying: cols[s][i]
static void fill_random(const StagePattern *sp, size_t n, double *cols[STAGE_SYMS]) {
    for (size_t i = 0; i < n; i++) {
        StageConfig c = {0};
        c.plan.layers = 1 + (int)(frand() * 48);
        c.plan.b = 1 << (int)(frand() * 4);
        c.plan.dp = 1 << (int)(frand() * 6);
        c.plan.tp = 1 << (int)(frand() * 4);
        c.plan.zero = sp->zero;
        c.plan.ckpt = (int)(frand() * (c.plan.layers + 1));
        c.G = 1 + (int)(frand() * 256);
        c.p = (int)(frand() * (c.G < 4 ? c.G : 4));
        c.plan.wo = sp->wo ? 1 - frand() : 0;
        c.plan.go = sp->go ? 1 - frand() : 0;
        c.plan.oo = sp->oo ? 1 - frand() : 0;
        c.plan.ao = sp->ao ? 1 - frand() : 0;
        put_config(cols, i, &c);
    }
}

// search-shaped batches of pattern sp until at least n candidates; returns
// the candidate count, batch starts in starts[0..*num_batches] (the last
// entry = the count)
static size_t fill_search(const StagePattern *sp, size_t n, double *cols[STAGE_SYMS], size_t cap, size_t *starts,
                          int *num_batches) {
    size_t i = 0;
    int nb = 0;
    const int ratios = sp->wo + sp->go + sp->oo + sp->ao;
    const int steps = ratios == 1 ? 8 : 4, bits = ratios == 1 ? 3 : 2, grid = 1 << (bits * ratios);
    while (i < n) {
        StageConfig c = {0};
        c.plan.layers = 1 + (int)(frand() * 48);
        c.plan.dp = 1 << (int)(frand() * 6);
        c.plan.tp = 1 << (int)(frand() * 4);
        c.plan.zero = sp->zero;
        c.G = 1 + (int)(frand() * 256);
        c.p = (int)(frand() * (c.G < 4 ? c.G : 4));
        size_t size = (size_t)4 * (c.plan.layers + 1) * grid;
        if (i + size > cap) break;
        starts[nb++] = i;
        for (int bi = 0; bi < 4; bi++)
            for (int ck = 0; ck <= c.plan.layers; ck++)
                for (int g = 0; g < grid; g++) {
                    c.plan.b = 1 << bi;
                    c.plan.ckpt = ck;
                    // digit d of g (base steps) is the d-th enabled ratio's step
                    int d = 0;
                    double r[4] = {0, 0, 0, 0};
                    const int on[4] = {sp->wo, sp->go, sp->oo, sp->ao};
                    for (int q = 0; q < 4; q++)
                        if (on[q]) r[q] = (double)(((g >> (bits * d++)) & (steps - 1)) + 1) / steps;
                    c.plan.wo = r[0], c.plan.go = r[1], c.plan.oo = r[2], c.plan.ao = r[3];
                    put_config(cols, i++, &c);
                }
    }
    starts[nb] = i;
    *num_batches = nb;
    return i;
}

typedef struct {
    char pattern[32];
    const char *stage, *batches;
    int instructions, registers, calls;
    size_t candidates;
    double seconds, evals_per_s, ns_per_eval;
    int bitwise_mismatches, general_mismatches;
    int time_instructions, peak_instructions;  // the split programs (0: none, general row)
    double time_evals_per_s, peak_evals_per_s;
    double both_evals_per_s;  // 1 / (1/time + 1/peak): both split programs over the same candidates
    int split_mismatches;
} Row;

// best of repeat: seconds to evaluate the batches [starts[b], starts[b+1]) into outs (NULL: not wanted)
static double time_batches(const StageModel *m, double *cols[STAGE_SYMS], double *const outs[ST_OUTPUTS],
                           const size_t *starts, int nb, int repeat) {
    double best = INFINITY;
    for (int k = 0; k < repeat; k++) {
        double t0 = now_s();
        for (int b = 0; b < nb; b++) {
            const double *c[STAGE_SYMS];
            double *o[ST_OUTPUTS];
            for (int s = 0; s < STAGE_SYMS; s++) c[s] = cols[s] + starts[b];
            for (int q = 0; q < ST_OUTPUTS; q++) o[q] = outs[q] ? outs[q] + starts[b] : NULL;
            stage_eval_batch(m, c, o, starts[b + 1] - starts[b]);
        }
        double t = now_s() - t0;
        if (t < best) best = t;
    }
    return best;
}

// What every row shares: the model, the profile, the general models and the candidate buffers.
typedef struct {
    size_t n, cap;       // candidates per row; buffer length (search batches overshoot n by at most one)
    int repeat;
    MistConfig cfg;
    HwProfile hw;
    StageModelBase *base;
    StageModel general[2];                  // the general model of a middle and a last stage
    size_t *starts;                         // (cap + 1,) batch starts
    double *cols[STAGE_SYMS];               // (cap,) per stage symbol
    double *outs[ST_OUTPUTS];               // (cap,) per output
    double *split_outs[4];                  // (cap,) t, d, peak fwd, peak bwd of the split programs
} Bench;

// (pattern, stage kind): row 0 = the general model
static const StagePattern pats[] = {
    {0, 0, 0, 0, 0}, {1, 0, 0, 0, 0}, {2, 0, 0, 0, 0}, {3, 0, 0, 0, 0}, {3, 1, 0, 0, 0},
    {2, 0, 1, 1, 0}, {1, 0, 0, 0, 1}, {3, 1, 1, 1, 1}, {1, 0, 0, 0, 0}, {3, 1, 1, 1, 1},
};
enum { NPAT = sizeof pats / sizeof pats[0] };
// the last two patterns: a last stage (post part: final norm, LM head, loss)

// 0, or 2 after printing the usage
static int parse_args(int argc, char **argv, size_t *n, int *repeat, const char **json_path) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--candidates") && i + 1 < argc) *n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) *repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) *json_path = argv[++i];
        else {
            fprintf(stderr, "bench_stage: unknown argument '%s'; usage: bench_stage [--candidates N] [--repeat R] "
                            "[--json PATH]\n", argv[i]);
            return 2;
        }
    }
    if (*n < 1 || *repeat < 1) {
        fprintf(stderr, "bench_stage: --candidates and --repeat must be >= 1\n");
        return 2;
    }
    return 0;
}

// the model, the profile, the buffers and the general models; 0 or 1 after a message
static int bench_setup(Bench *b) {
    gpt3_22b(&b->cfg);
    if (profile_preset(&b->hw, "gcp-l4") != 0) {
        fprintf(stderr, "bench_stage: no gcp-l4 profile preset\n");
        return 1;
    }
    // search batches overshoot n by at most one batch: 4 * 49 * 256 candidates
    b->cap = b->n + (size_t)4 * 49 * 256;
    size_t cap = b->cap;
    b->starts = malloc((cap + 1) * sizeof *b->starts);
    int alloc_ok = b->starts != NULL;
    for (int s = 0; s < STAGE_SYMS; s++) alloc_ok &= (b->cols[s] = malloc(cap * sizeof(double))) != NULL;
    for (int k = 0; k < ST_OUTPUTS; k++) alloc_ok &= (b->outs[k] = malloc(cap * sizeof(double))) != NULL;
    for (int q = 0; q < 4; q++) alloc_ok &= (b->split_outs[q] = malloc(cap * sizeof(double))) != NULL;
    if (!alloc_ok) {
        fprintf(stderr, "bench_stage: out of memory for %zu candidates\n", cap);
        return 1;
    }
    char err[512];
    b->base = stage_model_base_new(&b->cfg, err, sizeof err);
    if (!b->base) {
        fprintf(stderr, "bench_stage: %s\n", err);
        return 1;
    }
    for (int last = 0; last < 2; last++)
        if (stage_model_build(&b->general[last], &b->cfg, &b->hw, NULL, 0, last, err, sizeof err) != 0) {
            fprintf(stderr, "bench_stage: %s\n", err);
            return 1;
        }
    return 0;
}

static void bench_free(Bench *b) {
    for (int last = 0; last < 2; last++) stage_model_free(&b->general[last]);
    stage_model_base_free(b->base);
    for (int q = 0; q < 4; q++) free(b->split_outs[q]);
    for (int s = 0; s < STAGE_SYMS; s++) free(b->cols[s]);
    for (int k = 0; k < ST_OUTPUTS; k++) free(b->outs[k]);
    free(b->starts);
}

// the split programs: times alone, peaks alone, each bitwise equal to the whole program; 0 or 1
static int measure_split(Bench *b, Row *w, const StagePattern *sp, int last, size_t count, int nb) {
    char err[512];
    double **cols = b->cols, **outs = b->outs, **split_outs = b->split_outs;
    size_t *starts = b->starts;
    int repeat = b->repeat;
    StageModel split;
    if (stage_model_build_from(&split, b->base, &b->hw, NULL, 0, last, sp, STAGE_BUILD_SPLIT, err, sizeof err)) {
        fprintf(stderr, "bench_stage: %s\n", err);
        return 1;
    }
    double *time_outs[ST_OUTPUTS] = {0}, *peak_outs[ST_OUTPUTS] = {0};
    time_outs[ST_T] = split_outs[0], time_outs[ST_D] = split_outs[1];
    peak_outs[ST_PEAK_FWD] = split_outs[2], peak_outs[ST_PEAK_BWD] = split_outs[3];
    w->time_evals_per_s = count / time_batches(&split, cols, time_outs, starts, nb, repeat);
    w->peak_evals_per_s = count / time_batches(&split, cols, peak_outs, starts, nb, repeat);
    w->time_instructions = expr_program_num_instructions(split.prog_time);
    w->peak_instructions = expr_program_num_instructions(split.prog_peaks);
    const int which[4] = {ST_T, ST_D, ST_PEAK_FWD, ST_PEAK_BWD};
    for (int q = 0; q < 4; q++)
        for (size_t j = 0; j < count; j++)
            w->split_mismatches += memcmp(&split_outs[q][j], &outs[which[q]][j], sizeof(double)) != 0;
    stage_model_free(&split);
    return 0;
}

// a sample: bitwise against this model's tree walk, 1e-12 against the general model's
static void check_sample(Bench *b, Row *w, const StageModel *m, const StagePattern *sp, int last, size_t count) {
    double **cols = b->cols, **outs = b->outs;
    size_t sample = count < 1000 ? count : 1000;
    for (size_t i = 0; i < sample; i++) {
        size_t j = i * (count / sample) + (size_t)(frand() * (count / sample));
        StageConfig c = get_config(cols, j, sp->zero);
        double own_o[ST_OUTPUTS], gen_o[ST_OUTPUTS];
        stage_eval_scalar(m, &c, own_o);
        stage_eval_scalar(&b->general[last], &c, gen_o);
        for (int k = 0; k < ST_OUTPUTS; k++) {
            if (memcmp(&own_o[k], &outs[k][j], sizeof(double)) != 0) w->bitwise_mismatches++;
            // d = (first fwd + last bwd) - (other fwd + other bwd): a difference of terms the
            // size of t, so its rounding is relative to t
            double scale = fabs(gen_o[k]) + (k == ST_D ? fabs(gen_o[ST_T]) : 0.0);
            if (!(fabs(gen_o[k] - outs[k][j]) <= 1e-12 * scale)) w->general_mismatches++;
        }
    }
}

// Row r: its model (general, or specialised to its pattern), its candidates
// (random or search-shaped), their best time, the split programs and the
// checks. 0 or 1 after a message.
static int run_row(Bench *b, Row *w, int r, int per_kind) {
    int search = r >= per_kind, pr = r % per_kind;
    int is_general = pr == 0;
    const StagePattern *sp = is_general ? &pats[NPAT - 1] : &pats[pr - 1];
    int last = pr >= NPAT - 1;  // the two final patterns run on the last stage
    w->stage = last ? "last" : "middle";
    w->batches = search ? "search" : "random";
    char err[512];
    StageModel own, *m = &own;
    if (is_general) {
        m = &b->general[0];
        snprintf(w->pattern, sizeof w->pattern, "general");
    } else {
        stage_pattern_name(sp, w->pattern, sizeof w->pattern);
        if (stage_model_build_pattern(&own, &b->cfg, &b->hw, NULL, 0, last, sp, err, sizeof err) != 0) {
            fprintf(stderr, "bench_stage: %s\n", err);
            return 1;
        }
    }
    int nb = 1;
    size_t count = b->n;
    if (search) count = fill_search(sp, b->n, b->cols, b->cap, b->starts, &nb);
    else fill_random(sp, b->n, b->cols), b->starts[0] = 0, b->starts[1] = b->n;
    double best = time_batches(m, b->cols, b->outs, b->starts, nb, b->repeat);
    if (!is_general && measure_split(b, w, sp, last, count, nb) != 0) return 1;
    check_sample(b, w, m, sp, last, count);
    w->instructions = expr_program_num_instructions(m->prog);
    w->registers = expr_program_num_registers(m->prog);
    w->calls = nb;
    w->candidates = count;
    w->seconds = best;
    w->evals_per_s = count / best;
    w->ns_per_eval = 1e9 * best / count;
    if (!is_general) stage_model_free(&own);
    return 0;
}

static void print_table(const Row *row, int rows, size_t n, int repeat) {
    // The search runs the two split programs over the same candidates: its rate for a whole
    // stage (times and memory) is 1 / (1/t,d + 1/peaks), the figure the 10 M/s target is about.
    int met = 0, specialised = 0;
    for (int r = 0; r < rows; r++)
        if (row[r].both_evals_per_s > 0) specialised++, met += row[r].both_evals_per_s >= 1e7;
    printf("stage model of GPT-3 22B (h 6144, 48 layers, seq 2048, bf16) on gcp-l4: %d outputs, >= %zu candidates per row, "
           "1 thread, best of %d, %s\n", ST_OUTPUTS, n, repeat, expr_simd_name());
    printf("%-16s %-7s %-7s %8s %12s %5s %16s %9s %9s %9s %8s %12s %8s %12s %14s %9s\n", "pattern", "stage", "batches",
           "calls", "instructions", "regs", "evals/s/core", "ns/eval", "!=bitwise", "!=general", "t,d ins",
           "t,d evals/s", "peak ins", "peak evals/s", "t,d+peak ev/s", "!=split");
    for (int r = 0; r < rows; r++)
        printf("%-16s %-7s %-7s %8d %12d %5d %16.4g %9.2f %9d %9d %8d %12.4g %8d %12.4g %14.4g %9d\n", row[r].pattern,
               row[r].stage, row[r].batches, row[r].calls, row[r].instructions, row[r].registers, row[r].evals_per_s,
               row[r].ns_per_eval, row[r].bitwise_mismatches, row[r].general_mismatches, row[r].time_instructions,
               row[r].time_evals_per_s, row[r].peak_instructions, row[r].peak_evals_per_s, row[r].both_evals_per_s,
               row[r].split_mismatches);
    printf("\ntarget >= 1e7 evaluations/s/core of a whole stage (t,d + peaks, as the search runs them): %d of %d "
           "specialised rows%s", met, specialised, met < specialised ? "; below it:" : "\n");
    for (int r = 0, first = 1; r < rows; r++)
        if (row[r].both_evals_per_s > 0 && row[r].both_evals_per_s < 1e7) {
            printf("%s %s (%s, %s) %.3g", first ? "" : ",", row[r].pattern, row[r].stage, row[r].batches,
                   row[r].both_evals_per_s);
            first = 0;
        }
    if (met < specialised) printf("\n");
}

// 0, or 1 when the file cannot be written
static int write_json(const char *json_path, const Row *row, int rows, size_t n, int repeat) {
    FILE *f = fopen(json_path, "w");
    if (!f) {
        fprintf(stderr, "bench_stage: cannot write %s\n", json_path);
        return 1;
    }
    fprintf(f, "{\n  \"benchmark\": \"bench_stage\",\n  \"model\": \"gpt3-22b\",\n  \"hardware\": \"gcp-l4\",\n"
               "  \"outputs\": %d,\n  \"min_candidates\": %zu,\n  \"threads\": 1,\n  \"repeat\": %d,\n  \"simd\": \"%s\",\n"
               "  \"rows\": [\n",
            ST_OUTPUTS, n, repeat, expr_simd_name());
    for (int r = 0; r < rows; r++)
        fprintf(f, "    {\"pattern\": \"%s\", \"stage\": \"%s\", \"batches\": \"%s\", \"calls\": %d, "
                   "\"candidates\": %zu, \"instructions\": %d, \"registers\": %d, \"seconds\": %.6f, "
                   "\"evals_per_second_per_core\": %.1f, \"ns_per_eval\": %.3f, \"bitwise_mismatches\": %d, "
                   "\"general_mismatches\": %d, \"time_instructions\": %d, \"time_evals_per_second_per_core\": %.1f, "
                   "\"peak_instructions\": %d, \"peak_evals_per_second_per_core\": %.1f, "
                   "\"time_and_peak_evals_per_second_per_core\": %.1f, \"split_mismatches\": %d}%s\n",
                row[r].pattern, row[r].stage, row[r].batches, row[r].calls, row[r].candidates, row[r].instructions,
                row[r].registers, row[r].seconds, row[r].evals_per_s, row[r].ns_per_eval, row[r].bitwise_mismatches,
                row[r].general_mismatches, row[r].time_instructions, row[r].time_evals_per_s,
                row[r].peak_instructions, row[r].peak_evals_per_s, row[r].both_evals_per_s, row[r].split_mismatches,
                r + 1 < rows ? "," : "");
    fprintf(f, "  ]\n}\n");
    fclose(f);
    printf("wrote %s\n", json_path);
    return 0;
}

int main(int argc, char **argv) {
    static Bench b;
    b.n = 1000000;
    b.repeat = 3;
    const char *json_path = "benchmarks/bench_stage.json";
    if (parse_args(argc, argv, &b.n, &b.repeat, &json_path) != 0) return 2;
    if (bench_setup(&b) != 0) return 1;
    const int per_kind = NPAT + 1, rows = 2 * per_kind;
    Row *row = calloc((size_t)rows, sizeof *row);
    if (!row) {
        fprintf(stderr, "bench_stage: out of memory for %zu candidates\n", b.cap);
        return 1;
    }
    int total_mismatches = 0;
    for (int r = 0; r < rows; r++) {
        Row *w = &row[r];
        if (run_row(&b, w, r, per_kind) != 0) return 1;
        total_mismatches += w->bitwise_mismatches + w->general_mismatches + w->split_mismatches;
        w->both_evals_per_s = w->time_evals_per_s > 0 && w->peak_evals_per_s > 0
                                  ? 1.0 / (1.0 / w->time_evals_per_s + 1.0 / w->peak_evals_per_s)
                                  : 0.0;
    }
    print_table(row, rows, b.n, b.repeat);
    if (write_json(json_path, row, rows, b.n, b.repeat) != 0) return 1;
    bench_free(&b);
    free(row);
    return total_mismatches ? 1 : 0;
}
