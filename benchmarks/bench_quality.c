// Quality sweep over the Mist paper's grid: GPT-3 and Llama at 1.3B, 2.7B,
// 7B, 13B, 22B on 2, 4, 8, 16, 32 GPUs (8 per node) with global batch 32, 64,
// 128, 256, 512; the L4 profile at seq 2048 and the A100-40GB profile at seq
// 4096. Per case the predicted iteration time of the best plan in each space
// (megatron-mist, megatron, zero, ckpt, offload, full) and the speedup of full
// over the two baselines (docs/plan-search.md, "The two baselines"):
//   megatron-mist  Megatron-LM as the Mist paper measured it (every block
//                  recomputed, b in {1, 2, 4}, ZeRO-1, no sp, no interleaving):
//                  Mist measured 1.28x on average, 1.73x at most, over it;
//   megatron       what a Megatron-LM user tunes today (sp, interleaving,
//                  selective or counted recompute, any micro-batch): a subset of
//                  full, so full never loses to it.
// Also per case the MFU of the three plans (model FLOPs, Megatron convention,
// over GPUs x peak x time) and what the full plan changes against megatron's.
//
// usage: bench_quality [--quick] [--json PATH]   (--quick: L4 only, up to 13B)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchmarks/bench_model_ini.h"
#include "planner/stage_model.h"
#include "planner/search_compare.h"

typedef struct {
    const char *hardware, *family, *shape;
    int gpus, seq, batch;
    double T[SPACE_FULL + 1];    // INFINITY: nothing fits
    double mfu[SPACE_FULL + 1];  // model FLOPs / (GPUs x peak x T)
    double seconds;              // search wall time, all spaces
    double over_mist, over_meg;  // megatron-mist / full, megatron / full (NAN when the baseline finds nothing)
    double efficiency;           // the profile's matmul efficiency
    char plan_meg[192], plan_full[192];
} Case;

// mean and extremes of the finite values v[i] (n of them); returns how many were finite
static int stats_of(const Case *c, int n, int which, double *mean, double *lo, double *hi) {
    int m = 0;
    double sum = 0;
    *lo = INFINITY, *hi = -INFINITY;
    for (int i = 0; i < n; i++) {
        double v = which ? c[i].over_meg : c[i].over_mist;
        if (isnan(v)) continue;
        sum += v, m++;
        *lo = fmin(*lo, v), *hi = fmax(*hi, v);
    }
    *mean = m ? sum / m : NAN;
    return m;
}

int main(int argc, char **argv) {
    int quick = 0;
    const char *json_path = "benchmarks/bench_quality.json";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
        else {
            fprintf(stderr, "bench_quality: unknown argument '%s'; usage: bench_quality [--quick] [--json PATH]\n",
                    argv[i]);
            return 2;
        }
    }
    static const struct { const char *hw; int seq; } hws[] = {{"gcp-l4", 2048}, {"gcp-a100-40g", 4096}};
    static const char *families[] = {"gpt", "llama"};
    static const int gpus[] = {2, 4, 8, 16, 32}, batches[] = {32, 64, 128, 256, 512};
    static Case cases[40];
    int n = 0;
    printf("predicted iteration time (s) of the best plan per space; full/mm = megatron-mist / full, full/meg = "
           "megatron / full\n");
    printf("%-12s %-6s %-5s %4s %9s %9s %9s %9s %9s %9s %8s %8s %8s %17s\n", "hardware", "model", "size", "GPUs",
           "meg-mist", "megatron", "zero", "ckpt", "offload", "full", "full/mm", "full/meg", "search s",
           "MFU mm/meg/full");
    for (int h = 0; h < 2; h++) {
        if (quick && h) break;
        HwProfile hw;
        if (profile_preset(&hw, hws[h].hw) != 0) return 1;
        for (int fam = 0; fam < 2; fam++)
            for (int k = 0; k < 5; k++) {
                if (quick && k == 4) continue;
                Case *c = &cases[n++];
                c->hardware = hws[h].hw, c->family = families[fam], c->shape = bench_shapes[k].name;
                c->gpus = gpus[k], c->seq = hws[h].seq, c->batch = batches[k];
                int gpn = c->gpus < 8 ? c->gpus : 8, nodes = c->gpus / gpn;
                static MistConfig cfg;
                if (bench_model_config(&cfg, c->family, &bench_shapes[k], c->seq, c->batch, c->hardware, nodes, gpn))
                    return 1;
                SearchOptions so;
                search_options_default(&so, &cfg);
                so.confirm_lp = 0;
                static SpaceComparison cmp;
                char err[1024];
                if (search_compare_spaces(&cfg, &hw, NULL, &so, SPACE_FULL, NULL, 0, &cmp, err, sizeof err) != 0) {
                    fprintf(stderr, "bench_quality: %s %s on %d: %s\n", c->family, c->shape, c->gpus, err);
                    return 1;
                }
                c->seconds = 0;
                for (int sp = 0; sp <= SPACE_FULL; sp++) {
                    c->T[sp] = cmp.space[sp].iteration_seconds;
                    c->mfu[sp] = cmp.space[sp].mfu;
                    c->seconds += cmp.space[sp].seconds;
                }
                c->over_mist = search_compare_speedup(&cmp, SPACE_MEGATRON_MIST, SPACE_FULL);
                c->over_meg = search_compare_speedup(&cmp, SPACE_MEGATRON, SPACE_FULL);
                c->efficiency = hw.flops_efficiency;
                snprintf(c->plan_meg, sizeof c->plan_meg, "-");
                snprintf(c->plan_full, sizeof c->plan_full, "-");
                if (cmp.space[SPACE_MEGATRON].found) plan_summary(&cmp.space[SPACE_MEGATRON].plan, c->plan_meg, sizeof c->plan_meg);
                if (cmp.space[SPACE_FULL].found) plan_summary(&cmp.space[SPACE_FULL].plan, c->plan_full, sizeof c->plan_full);
                char hwcol[16];
                snprintf(hwcol, sizeof hwcol, "%s", c->hardware);
                printf("%-12s %-6s %-5s %4d", hwcol, c->family, c->shape, c->gpus);
                for (int sp = 0; sp <= SPACE_FULL; sp++) printf(" %9.4g", c->T[sp]);
                printf(" %7.3fx %7.3fx %8.3f %5.1f/%4.1f/%4.1f%%\n", c->over_mist, c->over_meg, c->seconds,
                       100 * c->mfu[SPACE_MEGATRON_MIST], 100 * c->mfu[SPACE_MEGATRON], 100 * c->mfu[SPACE_FULL]);
                printf("    megatron: %s\n    full:     %s\n", c->plan_meg, c->plan_full);
                fflush(stdout);
            }
    }
    // over the cases where the baseline finds a plan (the others need a saver it lacks)
    double mm_mean, mm_lo, mm_hi, mg_mean, mg_lo, mg_hi;
    int mm = stats_of(cases, n, 0, &mm_mean, &mm_lo, &mm_hi), mg = stats_of(cases, n, 1, &mg_mean, &mg_lo, &mg_hi);
    int mg_below = 0;
    for (int i = 0; i < n; i++) mg_below += !isnan(cases[i].over_meg) && cases[i].over_meg < 1 - 1e-12;
    printf("\nfull over megatron-mist (%d cases of %d; Mist measured 1.28x mean, 1.73x max): mean %.3fx, min %.3fx, "
           "max %.3fx\n", mm, n, mm_mean, mm_lo, mm_hi);
    printf("full over megatron      (%d cases of %d; a superset never loses): mean %.3fx, min %.3fx, max %.3fx, "
           "%d below 1.000x\n", mg, n, mg_mean, mg_lo, mg_hi, mg_below);
    FILE *f = fopen(json_path, "w");
    if (!f) {
        fprintf(stderr, "bench_quality: cannot write %s\n", json_path);
        return 1;
    }
    fprintf(f, "{\"benchmark\": \"bench_quality\", \"quick\": %s, \"cases\": [", quick ? "true" : "false");
    for (int i = 0; i < n; i++) {
        const Case *c = &cases[i];
        fprintf(f, "%s{\"hardware\": \"%s\", \"family\": \"%s\", \"size\": \"%s\", \"gpus\": %d, \"seq_len\": %d, "
                   "\"global_batch\": %d, \"iteration_seconds\": {",
                i ? ", " : "", c->hardware, c->family, c->shape, c->gpus, c->seq, c->batch);
        for (int sp = 0; sp <= SPACE_FULL; sp++) {
            if (isinf(c->T[sp])) fprintf(f, "%s\"%s\": null", sp ? ", " : "", search_space_name((PlanSpace)sp));
            else fprintf(f, "%s\"%s\": %.9g", sp ? ", " : "", search_space_name((PlanSpace)sp), c->T[sp]);
        }
        fprintf(f, "}, \"speedup_full_over_megatron_mist\": ");
        if (isnan(c->over_mist)) fprintf(f, "null");
        else fprintf(f, "%.6g", c->over_mist);
        fprintf(f, ", \"speedup_full_over_megatron\": ");
        if (isnan(c->over_meg)) fprintf(f, "null");
        else fprintf(f, "%.6g", c->over_meg);
        fprintf(f, ", \"search_seconds\": %.6g, \"mfu_megatron_mist\": %.4f, \"mfu_megatron\": %.4f, \"mfu_full\": %.4f, "
                   "\"matmul_efficiency\": %.4f, \"plan_megatron\": \"%s\", \"plan_full\": \"%s\"}",
                c->seconds, c->mfu[SPACE_MEGATRON_MIST], c->mfu[SPACE_MEGATRON], c->mfu[SPACE_FULL], c->efficiency,
                c->plan_meg, c->plan_full);
    }
    fprintf(f, "], \"full_over_megatron_mist\": {\"cases\": %d, \"mean\": %.6g, \"min\": %.6g, \"max\": %.6g}, "
               "\"full_over_megatron\": {\"cases\": %d, \"mean\": %.6g, \"min\": %.6g, \"max\": %.6g, \"below_one\": %d}}\n",
            mm, mm_mean, mm_lo, mm_hi, mg, mg_mean, mg_lo, mg_hi, mg_below);
    fclose(f);
    printf("wrote %s\n", json_path);
    return 0;
}
