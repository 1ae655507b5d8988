// The discrete search space (DESIGN.md §3) and what each --space allows.
//
//   megatron  DP x TP x PP with uniform stages: L/S blocks, one mesh and one
//             set of memory savers on every stage (one set of run flags);
//             ZeRO 0 or 1 (Megatron's distributed optimizer shards the
//             optimizer state only), checkpointing all or nothing, no offload
//   zero      + ZeRO 2 and 3
//   ckpt      + any number of checkpointed blocks per stage
//   offload   + offload ratios on the grid (weights and grads in quarters,
//             optimizer state and activations in eighths)
//   full      + imbalance-aware: every stage picks its own layer count, mesh,
//             ZeRO level, ckpt and offload ratios (per-stage frontiers and the
//             inter-stage solve)
#include <string.h>
#include <time.h>
#include "planner/search_internal.h"

static const char *const space_names[] = {"megatron", "zero", "ckpt", "offload", "full"};

const char *search_space_name(PlanSpace s) {
    return s >= SPACE_MEGATRON && s <= SPACE_FULL ? space_names[s] : "?";
}

int search_space_parse(const char *name, PlanSpace *out) {
    for (int i = 0; i <= SPACE_FULL; i++)
        if (!strcmp(name, space_names[i])) {
            *out = (PlanSpace)i;
            return 0;
        }
    return -1;
}

void space_rules(SpaceRules *r, PlanSpace space, const SearchLimits *lim) {
    memset(r, 0, sizeof *r);
    r->zero_mask = space >= SPACE_ZERO ? 0xF : 0x3;
    r->ckpt_any = space >= SPACE_CKPT;
    r->offload = space >= SPACE_OFFLOAD;
    r->uniform = space < SPACE_FULL;
    if (lim) {
        if (lim->zero_levels) r->zero_mask &= lim->zero_levels;
        if (lim->no_offload) r->offload = 0;
        if (lim->no_ckpt) r->no_ckpt = 1;
        r->max_stages = lim->max_stages;
        r->max_tp = lim->max_tp;
        r->max_tp_staged = lim->max_tp_staged;
    }
    r->wg_steps = SEARCH_WG_STEPS;
    r->oa_steps = SEARCH_OA_STEPS;
}

int space_stage_count_ok(const Search *s, int S) {
    if (S < 1 || S > s->L || S > MIST_MAX_STAGES || s->N % S) return 0;
    if (s->rules.max_stages > 0 && S > s->rules.max_stages) return 0;
    if (s->rules.uniform && s->L % S) return 0;
    int n = s->N / S, gpn = s->opt->gpus_per_node;
    // stages are contiguous rank ranges: a stage fills whole nodes or a node holds whole stages
    return n % gpn == 0 || gpn % n == 0;
}

int space_meshes(const Search *s, int n, Mesh *out, int max) {
    const ModelConfig *m = &s->cfg->model;
    int gpn = s->opt->gpus_per_node, k = 0;
    for (int tp = 1; tp <= n && k < max; tp++) {
        if (n % tp || gpn % tp) continue;  // TP stays inside a node
        if (m->heads % tp || m->kv_heads % tp || m->ffn_hidden % tp) continue;
        if (s->rules.max_tp > 0 && tp > s->rules.max_tp) continue;
        // n < N: the devices of one of several stages
        if (s->rules.max_tp_staged > 0 && n < s->N && tp > s->rules.max_tp_staged) continue;
        out[k++] = (Mesh){n / tp, tp};
    }
    return k;
}

int space_ckpt_options(const SpaceRules *r, int l, int *out) {
    if (r->no_ckpt) {
        out[0] = 0;
        return 1;
    }
    if (!r->ckpt_any) {
        out[0] = 0;
        out[1] = l;
        return 2;
    }
    for (int c = 0; c <= l; c++) out[c] = c;
    return l + 1;
}

void space_grid(Search *s) {
    for (int q = 0; q <= s->rules.wg_steps; q++) s->rules.ratio_wg[q] = (double)q / s->rules.wg_steps;
    for (int q = 0; q <= s->rules.oa_steps; q++) s->rules.ratio_oa[q] = (double)q / s->rules.oa_steps;
    for (int mask = 0; mask < 16; mask++) {
        int lim[4] = {mask & 1 ? s->rules.wg_steps : 0, mask & 2 ? s->rules.wg_steps : 0,
                      mask & 4 ? s->rules.oa_steps : 0, mask & 8 ? s->rules.oa_steps : 0};
        int n = 0;
        for (int a = lim[0] ? 1 : 0; a <= lim[0]; a++)
            for (int b = lim[1] ? 1 : 0; b <= lim[1]; b++)
                for (int c = lim[2] ? 1 : 0; c <= lim[2]; c++)
                    for (int d = lim[3] ? 1 : 0; d <= lim[3]; d++) {
                        unsigned char *q = s->grid[mask][n++];
                        q[0] = (unsigned char)a, q[1] = (unsigned char)b, q[2] = (unsigned char)c, q[3] = (unsigned char)d;
                    }
        s->grid_n[mask] = n;
    }
}

double search_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
