// Quality sweep over the Mist paper's grid: GPT-3 and Llama at 1.3B, 2.7B,
// 7B, 13B, 22B on 2, 4, 8, 16, 32 GPUs (8 per node) with global batch 32, 64,
// 128, 256, 512; the L4 profile at seq 2048 and the A100-40GB profile at seq
// 4096. Per case the predicted iteration time of the best plan in each space
// (megatron, zero, ckpt, offload, full) and the speedup of full over megatron;
// then the averages. Mist measured 1.28x over Megatron-LM on average.
// Also per case the MFU of the megatron and full plans (model FLOPs, Megatron
// convention, over GPUs x peak x time) next to the profile's matmul efficiency:
// a plan whose MFU is already near that efficiency leaves the cost model
// little to gain (efficiency / MFU of megatron bounds the speedup, roughly).
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
    double T[SPACE_FULL + 1];  // INFINITY: nothing fits
    double seconds;             // search wall time, all spaces
    double speedup;             // megatron / full (NAN when megatron finds nothing)
    double mfu_megatron, mfu_full, efficiency;  // model FLOPs / (GPUs x peak x T); the profile's matmul efficiency
    Plan best;
} Case;

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
    printf("predicted iteration time (s) of the best plan per space; speedup = megatron / full\n");
    printf("%-9s %-6s %-5s %5s %9s %9s %9s %9s %9s %8s %9s %14s  %s\n", "hardware", "model", "size", "GPUs",
           "megatron", "zero", "ckpt", "offload", "full", "speedup", "search s", "MFU meg/full", "full plan");
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
                    c->seconds += cmp.space[sp].seconds;
                }
                if (cmp.space[SPACE_FULL].found) c->best = cmp.space[SPACE_FULL].plan;
                c->speedup = isinf(c->T[0]) ? NAN : c->T[0] / c->T[SPACE_FULL];
                c->mfu_megatron = cmp.space[0].mfu, c->mfu_full = cmp.space[SPACE_FULL].mfu;
                c->efficiency = hw.flops_efficiency;
                char plan[64] = "-";
                if (!isinf(c->T[SPACE_FULL]))
                    snprintf(plan, sizeof plan, "S=%d G=%d %dx%d", c->best.num_stages, c->best.G, c->best.stage[0].dp,
                             c->best.stage[0].tp);
                printf("%-9s %-6s %-5s %5d %9.4g %9.4g %9.4g %9.4g %9.4g %7.3fx %9.3f %6.1f/%4.1f%%  %s\n", c->hardware,
                       c->family, c->shape, c->gpus, c->T[0], c->T[1], c->T[2], c->T[3], c->T[4], c->speedup,
                       c->seconds, 100 * c->mfu_megatron, 100 * c->mfu_full, plan);
                fflush(stdout);
            }
    }
    // averages over the cases where megatron finds a plan (the others need a saver megatron lacks)
    double sum[SPACE_FULL + 1] = {0}, logsum = 0;
    int m = 0, megatron_none = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(cases[i].speedup)) {
            megatron_none++;
            continue;
        }
        for (int sp = 0; sp <= SPACE_FULL; sp++) sum[sp] += cases[i].T[0] / cases[i].T[sp];
        logsum += log(cases[i].speedup);
        m++;
    }
    printf("\naverage speedup over megatron (%d cases; %d where megatron fits nothing are left out):\n", m,
           megatron_none);
    printf("  zero %.3fx, ckpt %.3fx, offload %.3fx, full %.3fx (geometric mean of full: %.3fx); Mist measured 1.28x\n",
           sum[1] / m, sum[2] / m, sum[3] / m, sum[4] / m, exp(logsum / m));
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
        if (isnan(c->speedup)) fprintf(f, "}, \"speedup_full_over_megatron\": null, ");
        else fprintf(f, "}, \"speedup_full_over_megatron\": %.6g, ", c->speedup);
        fprintf(f, "\"search_seconds\": %.6g, \"mfu_megatron\": %.4f, \"mfu_full\": %.4f, \"matmul_efficiency\": %.4f}",
                c->seconds, c->mfu_megatron, c->mfu_full, c->efficiency);
    }
    fprintf(f, "], \"average_speedup\": {\"zero\": %.6g, \"ckpt\": %.6g, \"offload\": %.6g, \"full\": %.6g, "
               "\"full_geometric\": %.6g}, \"cases_averaged\": %d, \"cases_megatron_fits_nothing\": %d}\n",
            sum[1] / m, sum[2] / m, sum[3] / m, sum[4] / m, exp(logsum / m), m, megatron_none);
    fclose(f);
    printf("wrote %s\n", json_path);
    return 0;
}
