// Batched evaluation speed of a stage's time and memory expressions.
//
// Builds a realistic expression set for a pipeline stage of transformer
// blocks: per op max(flops / peak, bytes / bandwidth) for forward and
// backward, tensor-parallel all-reduces, data-parallel gradient and ZeRO
// weight collectives, host offload copies, and memory of weights, grads,
// optimizer state and saved activations under ZeRO, checkpointing and
// offloading. Compiles them into one program and evaluates it over N random
// candidates on one thread.
//
// usage: bench_expr [--candidates N] [--repeat R] [--json PATH] [--reciprocal]
//   defaults: N = 1000000, R = 3 (best of R), PATH = benchmarks/bench_expr.json
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "expr/expr.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static ExprCtx *X;
#define N(v) ex_num(X, (v))
#define ADD(a, b) ex_add(X, (a), (b))
#define SUB(a, b) ex_sub(X, (a), (b))
#define MUL(a, b) ex_mul(X, (a), (b))
#define DIV(a, b) ex_div(X, (a), (b))
#define MAX(a, b) ex_max(X, (a), (b))

// symbols of one stage candidate
static Expr b, s, h, tp, dp, layers, ckpt, z1, z2, z3, wo, go, oo, ao;

// hardware constants of a profile (A100-like), per second
static const double peak_flops = 312e12, hbm_bw = 1.6e12, nvlink_bw = 240e9, ib_bw = 25e9, pcie_bw = 24e9;

// --reciprocal: divide by hardware rates as multiplies by their reciprocals
// (a multiply costs a fraction of a divide; rounding differs by an ulp)
static int reciprocal;
static Expr per_rate(Expr amount, double rate) {
    return reciprocal ? MUL(amount, N(1.0 / rate)) : DIV(amount, N(rate));
}

// time of one op: max(compute, memory traffic); flops and bytes already per device
static Expr op_time(Expr flops, Expr bytes) { return MAX(per_rate(flops, peak_flops), per_rate(bytes, hbm_bw)); }

// ring all-reduce of `bytes` over n ranks: 2 (n-1)/n bytes / bw
static Expr allreduce(Expr bytes, Expr n, double bw) {
    return per_rate(MUL(MUL(bytes, N(2)), DIV(SUB(n, N(1)), n)), bw);
}

typedef struct {
    Expr fwd, bwd;        // compute time of one block, forward / backward
    Expr saved_bytes;     // activations kept for backward (no checkpointing)
} Block;

// One transformer block (GPT): the ops of the forward pass with their FLOPs
// and bytes, the backward pass as 2x FLOPs and 2x bytes per op.
static Block block_exprs(void) {
    Expr tokens = MUL(b, s);                    // b*s
    Expr bsh = MUL(tokens, h);                  // activation elements
    Expr bsh_tp = DIV(bsh, tp);
    Expr hh_tp = DIV(MUL(h, h), tp);
    Expr heads_tp = DIV(DIV(h, N(64)), tp);     // head dim 64
    const double e = 2;                          // bf16 bytes
    struct { Expr flops, bytes; } ops[16];
    int n = 0;
    // layernorm 1: read + write bsh, ~8 flops per element
    ops[n].flops = MUL(bsh, N(8)), ops[n++].bytes = MUL(bsh, N(2 * e));
    // qkv projection: (b s, h) x (h, 3h/tp)
    ops[n].flops = MUL(MUL(tokens, hh_tp), N(6)), ops[n++].bytes = ADD(MUL(bsh, N(e)), ADD(MUL(hh_tp, N(3 * e)), MUL(bsh_tp, N(3 * e))));
    // attention scores: per head (s, 64) x (64, s)
    Expr ss = MUL(MUL(s, s), MUL(b, heads_tp));
    ops[n].flops = MUL(ss, N(2 * 64)), ops[n++].bytes = ADD(MUL(bsh_tp, N(2 * e)), MUL(ss, N(e)));
    // softmax over scores
    ops[n].flops = MUL(ss, N(5)), ops[n++].bytes = MUL(ss, N(2 * e));
    // scores x values
    ops[n].flops = MUL(ss, N(2 * 64)), ops[n++].bytes = ADD(MUL(ss, N(e)), MUL(bsh_tp, N(2 * e)));
    // attention output projection (row-parallel)
    ops[n].flops = MUL(MUL(tokens, hh_tp), N(2)), ops[n++].bytes = ADD(MUL(bsh_tp, N(e)), ADD(MUL(hh_tp, N(e)), MUL(bsh, N(e))));
    // residual add
    ops[n].flops = bsh, ops[n++].bytes = MUL(bsh, N(3 * e));
    // layernorm 2
    ops[n].flops = MUL(bsh, N(8)), ops[n++].bytes = MUL(bsh, N(2 * e));
    // fc: (b s, h) x (h, 4h/tp)
    ops[n].flops = MUL(MUL(tokens, hh_tp), N(8)), ops[n++].bytes = ADD(MUL(bsh, N(e)), ADD(MUL(hh_tp, N(4 * e)), MUL(bsh_tp, N(4 * e))));
    // gelu
    ops[n].flops = MUL(bsh_tp, N(4 * 8)), ops[n++].bytes = MUL(bsh_tp, N(8 * e));
    // fc projection (row-parallel)
    ops[n].flops = MUL(MUL(tokens, hh_tp), N(8)), ops[n++].bytes = ADD(MUL(bsh_tp, N(4 * e)), ADD(MUL(hh_tp, N(4 * e)), MUL(bsh, N(e))));
    // residual add
    ops[n].flops = bsh, ops[n++].bytes = MUL(bsh, N(3 * e));
    Expr fwd[16], bwd[16];
    for (int i = 0; i < n; i++) {
        fwd[i] = op_time(ops[i].flops, ops[i].bytes);
        bwd[i] = op_time(MUL(ops[i].flops, N(2)), MUL(ops[i].bytes, N(2)));
    }
    Block blk;
    // two tensor-parallel all-reduces of the block output per pass, exposed
    Expr tp_comm = allreduce(MUL(bsh, N(e)), tp, nvlink_bw);
    blk.fwd = ADD(ex_sum(X, fwd, n), MUL(tp_comm, N(2)));
    blk.bwd = ADD(ex_sum(X, bwd, n), MUL(tp_comm, N(2)));
    // saved: inputs of the norms, qkv, scores (softmax), attention out, fc out, gelu out
    blk.saved_bytes = ADD(MUL(bsh, N(4 * e)), ADD(MUL(bsh_tp, N(9 * e)), MUL(ss, N(e))));
    return blk;
}

// The stage: `layers` blocks, the last `ckpt` of them recompute their
// forward in backward; gradients reduced over dp (ZeRO-2/3: reduce-scatter,
// half the bytes of an all-reduce), ZeRO-3 gathers weights in both passes;
// host offload ratios move that fraction over PCIe each step.
static int stage_exprs(Expr *out, const char **names) {
    Block blk = block_exprs();
    Expr params = DIV(MUL(MUL(h, h), N(12)), tp);  // block weights per device
    Expr pbytes = MUL(params, N(2));
    Expr recompute = MUL(ckpt, blk.fwd);
    Expr compute_fwd = MUL(layers, blk.fwd);
    Expr compute_bwd = ADD(MUL(layers, blk.bwd), recompute);
    Expr grad_sync = MUL(allreduce(pbytes, dp, ib_bw), SUB(N(1), MUL(z2, N(0.5))));
    Expr weight_gather = MUL(z3, per_rate(MUL(pbytes, DIV(SUB(dp, N(1)), dp)), ib_bw));
    Expr offload = per_rate(MUL(ADD(ADD(MUL(wo, pbytes), MUL(go, pbytes)), MUL(oo, MUL(params, N(12)))), N(2)), pcie_bw);
    Expr act_offload = per_rate(MUL(ao, MUL(blk.saved_bytes, N(2))), pcie_bw);
    // overlap-centric schedule: per layer, communication hides under compute
    Expr fwd_layer = MAX(blk.fwd, ADD(weight_gather, act_offload));
    Expr bwd_layer = MAX(ADD(blk.bwd, DIV(recompute, MAX(layers, N(1)))),
                         ADD(ADD(grad_sync, weight_gather), ADD(offload, act_offload)));
    Expr t_steady = MUL(layers, ADD(fwd_layer, bwd_layer));
    // memory, bytes per device
    Expr shard = DIV(N(1), dp);
    Expr w_mem = MUL(MUL(pbytes, layers), MUL(SUB(N(1), wo), ADD(SUB(N(1), z3), MUL(z3, shard))));
    Expr g_mem = MUL(MUL(pbytes, layers), MUL(SUB(N(1), go), ADD(SUB(N(1), z2), MUL(z2, shard))));
    Expr o_mem = MUL(MUL(MUL(params, N(12)), layers), MUL(SUB(N(1), oo), ADD(SUB(N(1), z1), MUL(z1, shard))));
    Expr act_full = MUL(blk.saved_bytes, SUB(layers, ckpt));
    Expr act_ckpt = MUL(MUL(MUL(b, s), MUL(h, N(2))), ckpt);
    Expr act_mem = MUL(ADD(act_full, act_ckpt), SUB(N(1), ao));
    Expr peak_fwd = ADD(ADD(w_mem, o_mem), ADD(act_mem, blk.saved_bytes));
    Expr peak_bwd = ADD(ADD(ADD(w_mem, g_mem), o_mem), ADD(act_mem, MUL(blk.saved_bytes, N(2))));
    int k = 0;
    names[k] = "t_fwd", out[k++] = ADD(compute_fwd, MUL(layers, weight_gather));
    names[k] = "t_bwd", out[k++] = compute_bwd;
    names[k] = "t_steady", out[k++] = t_steady;
    names[k] = "t_extra", out[k++] = SUB(ADD(compute_fwd, compute_bwd), t_steady);  // first/last micro-batch imbalance
    names[k] = "mem_peak_fwd", out[k++] = peak_fwd;
    names[k] = "mem_peak_bwd", out[k++] = MAX(peak_fwd, peak_bwd);
    return k;
}

static double pick(const double *choices, int n) { return choices[rand() % n]; }

int main(int argc, char **argv) {
    size_t n = 1000000;
    int repeat = 3;
    const char *json_path = "benchmarks/bench_expr.json";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--candidates") && i + 1 < argc) n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
        else if (!strcmp(argv[i], "--reciprocal")) reciprocal = 1;
        else {
            fprintf(stderr, "bench_expr: unknown argument '%s'; usage: bench_expr [--candidates N] "
                            "[--repeat R] [--json PATH] [--reciprocal]\n", argv[i]);
            return 2;
        }
    }
    if (n == 0 || repeat < 1) {
        fprintf(stderr, "bench_expr: --candidates and --repeat must be positive\n");
        return 2;
    }

    X = expr_ctx_new();
    b = ex_sym(X, "b"), s = ex_sym(X, "s"), h = ex_sym(X, "h"), tp = ex_sym(X, "tp"), dp = ex_sym(X, "dp");
    layers = ex_sym(X, "layers"), ckpt = ex_sym(X, "ckpt");
    z1 = ex_sym(X, "z1"), z2 = ex_sym(X, "z2"), z3 = ex_sym(X, "z3");
    wo = ex_sym(X, "wo"), go = ex_sym(X, "go"), oo = ex_sym(X, "oo"), ao = ex_sym(X, "ao");
    Expr outs[8];
    const char *names[8];
    int nout = stage_exprs(outs, names);
    ExprProgram *prog = expr_compile(X, outs, nout);
    int nsym = expr_num_syms(X);

    // candidates: (nsym, n) columns
    double **cols = malloc((size_t)nsym * sizeof *cols);
    double **outc = malloc((size_t)nout * sizeof *outc);
    for (int i = 0; i < nsym; i++) cols[i] = malloc(n * sizeof(double));
    for (int k = 0; k < nout; k++) outc[k] = malloc(n * sizeof(double));
    srand(12345);
    static const double bs[] = {1, 2, 4, 8, 16}, degs[] = {1, 2, 4, 8}, ratios[] = {0, 0.25, 0.5, 0.75, 1};
    for (size_t j = 0; j < n; j++) {
        cols[0][j] = pick(bs, 5);
        cols[1][j] = 2048;
        cols[2][j] = 4096;
        cols[3][j] = pick(degs, 4);
        cols[4][j] = pick(degs, 4);
        cols[5][j] = 1 + rand() % 16;
        cols[6][j] = rand() % ((int)cols[5][j] + 1);
        int zero = rand() % 4;
        cols[7][j] = zero >= 1, cols[8][j] = zero >= 2, cols[9][j] = zero >= 3;
        for (int r = 10; r < 14; r++) cols[r][j] = pick(ratios, 5);
    }

    double best = 1e30;
    for (int r = 0; r < repeat; r++) {
        double t0 = now_s();
        expr_program_eval(prog, (const double *const *)cols, outc, n);
        double t = now_s() - t0;
        if (t < best) best = t;
    }
    // spot check against scalar evaluation
    int mismatches = 0;
    double *row = malloc((size_t)nsym * sizeof *row);
    for (size_t j = 0; j < n; j += n / 97 + 1) {
        for (int i = 0; i < nsym; i++) row[i] = cols[i][j];
        for (int k = 0; k < nout; k++)
            if (expr_eval(X, outs[k], row) != outc[k][j]) mismatches++;
    }

    int ninstr = expr_program_num_instructions(prog), nreg = expr_program_num_registers(prog);
    double evals_per_s = n / best, ns_per_eval = 1e9 * best / n;
    printf("bench_expr: one stage's time and memory expressions (%d outputs, %zu nodes, %d symbols, rates as %s), "
           "1 thread\n", nout, expr_ctx_num_nodes(X), nsym, reciprocal ? "reciprocal multiplies" : "divisions");
    printf("%-12s %-10s %-10s %-12s %-14s %-10s\n", "instructions", "registers", "candidates", "seconds", "evals/s/core",
           "ns/eval");
    printf("%-12d %-10d %-10zu %-12.4f %-14.3e %-10.2f\n", ninstr, nreg, n, best, evals_per_s, ns_per_eval);
    printf("spot check vs scalar evaluation: %d mismatches\n", mismatches);
    char buf[512];
    expr_print(X, outs[0], buf, sizeof buf);
    printf("%s = %.200s...\n", names[0], buf);

    FILE *f = fopen(json_path, "w");
    if (!f) {
        fprintf(stderr, "bench_expr: cannot write %s\n", json_path);
        return 1;
    }
    fprintf(f, "{\n  \"benchmark\": \"bench_expr\",\n  \"outputs\": %d,\n  \"nodes\": %zu,\n  \"symbols\": %d,\n"
               "  \"instructions\": %d,\n  \"registers\": %d,\n  \"candidates\": %zu,\n  \"threads\": 1,\n  \"rates_as\": \"%s\",\n"
               "  \"seconds\": %.6f,\n  \"evals_per_second_per_core\": %.1f,\n  \"ns_per_eval\": %.3f,\n"
               "  \"scalar_mismatches\": %d\n}\n",
            nout, expr_ctx_num_nodes(X), nsym, ninstr, nreg, n, reciprocal ? "reciprocal multiplies" : "divisions", best, evals_per_s, ns_per_eval, mismatches);
    fclose(f);
    printf("wrote %s\n", json_path);

    for (int i = 0; i < nsym; i++) free(cols[i]);
    for (int k = 0; k < nout; k++) free(outc[k]);
    free(cols);
    free(outc);
    free(row);
    expr_program_free(prog);
    expr_ctx_free(X);
    return mismatches ? 1 : 0;
}
