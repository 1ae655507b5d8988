// The discrete search space (docs/design.md §3) and what each --space allows.
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
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "models/model.h"
#include "planner/search_internal.h"

static const char *const space_names[] = {"megatron-mist", "megatron", "zero", "ckpt", "offload", "full"};

const char *search_space_name(PlanSpace s) {
    return s >= SPACE_MEGATRON_MIST && s <= SPACE_FULL ? space_names[s] : "?";
}

int search_space_parse(const char *name, PlanSpace *out) {
    for (int i = 0; i <= SPACE_FULL; i++)
        if (!strcmp(name, space_names[i])) {
            *out = (PlanSpace)i;
            return 0;
        }
    return -1;
}

int space_code_ok(const Search *s, int z, int dp, int tp) {
    if (z < SHARD_ZERO_CODES) return 1;
    int gpn = s->cfg->cluster.gpus_per_node > 0 ? s->cfg->cluster.gpus_per_node : 1, g = gpn / tp;
    return g > 1 && g < dp && dp % g == 0;
}

void space_rules(SpaceRules *r, PlanSpace space, const SearchLimits *lim) {
    memset(r, 0, sizeof *r);
    if (space == SPACE_MEGATRON_MIST) {
        // Megatron-LM as the Mist paper's artifact ran it: every block recomputed, b in {1, 2, 4},
        // the distributed optimizer (ZeRO-1), no sequence parallelism, no interleaving
        r->zero_mask = 0x2;
        r->ckpt_all = 1;
        r->b_mask = 1 << 1 | 1 << 2 | 1 << 4;
        r->max_virtual = 1;
    } else {
        // full: every sharding code, PaRO's too; the spaces below it ZeRO's levels
        r->zero_mask = space >= SPACE_FULL ? (1 << SHARD_CODES) - 1 : space >= SPACE_ZERO ? 0xF : 0x3;
        r->ckpt_any = 1;  // Megatron-LM's uniform recompute_num_layers: any count, the same on every stage
        r->sel = r->sp = 1;
        r->sel_mixed = space == SPACE_FULL;
        r->lean = space == SPACE_FULL;  // Tempo's layers: not a Megatron-LM or DeepSpeed option
        r->max_virtual = SEARCH_MAX_VIRTUAL;
    }
    r->offload = space >= SPACE_OFFLOAD;
    r->uniform = space < SPACE_FULL;
    if (lim) {
        if (lim->zero_levels) r->zero_mask &= lim->zero_levels;
        if (lim->no_offload) r->offload = 0;
        if (lim->no_ckpt) r->no_ckpt = 1;
        r->interleave_min_ranks = lim->interleave_min_ranks;
        if (lim->no_lean) r->lean = 0;
        r->max_stages = lim->max_stages;
        r->max_tp = lim->max_tp;
        r->max_tp_staged = lim->max_tp_staged;
    }
    if (r->interleave_min_ranks < 2) r->interleave_min_ranks = 2;
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
        if (!model_tp_shards(m, tp)) continue;
        if (s->rules.max_tp > 0 && tp > s->rules.max_tp) continue;
        // n < N: the devices of one of several stages
        if (s->rules.max_tp_staged > 0 && n < s->N && tp > s->rules.max_tp_staged) continue;
        out[k++] = (Mesh){n / tp, tp};
    }
    return k;
}

// Appends to a message buffer, keeping what fits.
static void msg_add(char *buf, size_t len, const char *fmt, ...) {
    size_t used = strlen(buf);
    if (used + 1 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}

int space_any_layout(const Search *s, char *why, size_t len) {
    // A layout is a stage count S, a mesh of N/S devices and a G with G * dp dividing the global
    // batch; G = 1 is one as soon as dp divides it. Checked with the functions the search lists
    // its combinations with, so the two cannot disagree.
    for (int S = 1; S <= s->L && S <= MIST_MAX_STAGES; S++) {
        if (!space_stage_count_ok(s, S)) continue;
        Mesh m[SEARCH_MAX_MESHES];
        int nm = space_meshes(s, s->N / S, m, SEARCH_MAX_MESHES);
        for (int i = 0; i < nm; i++)
            if (s->B % m[i].dp == 0) return 1;
    }
    // None: one stage of tp 1 (dp = N) is always a mesh, so the global batch is never a multiple
    // of any dp the layouts allow; say which dp were tried and which rules kept the smaller ones
    // (more stages, larger tp) out, the first case of each.
    const ModelConfig *m = &s->cfg->model;
    const SpaceRules *r = &s->rules;
    int N = s->N, gpn = s->opt->gpus_per_node;
    why[0] = '\0';
    msg_add(why, len, "no layout of %d layers exists on %d node(s) x %d GPU(s) = %d device(s) in space %s, whatever "
            "the memory: global_batch %lld must be a multiple of the data-parallel size dp = devices / (stages x tp), "
            "and no allowed layout gives one (tried:", s->L, s->opt->nodes, gpn, N,
            search_space_name(s->opt->space), (long long)s->B);
    int tried = 0;
    for (int S = 1; S <= s->L && S <= MIST_MAX_STAGES; S++) {
        if (!space_stage_count_ok(s, S)) continue;
        Mesh ms[SEARCH_MAX_MESHES];
        int nm = space_meshes(s, N / S, ms, SEARCH_MAX_MESHES);
        for (int i = 0; i < nm; i++, tried++)
            if (tried < 4) msg_add(why, len, "%s dp %d with %d stage(s) x tp %d", tried ? "," : "", ms[i].dp, S, ms[i].tp);
    }
    if (tried > 4) msg_add(why, len, ", %d more", tried - 4);
    msg_add(why, len, ")");
    // the rules that ruled out more stages or a larger tp (each once, at its smallest value)
    int stage_rule[6] = {0}, tp_rule[6] = {0}, n_rules = 0;
    for (int S = 2; S <= N; S++) {
        if (N % S) continue;  // not a whole number of devices per stage: no dp at all
        int n = N / S, k = S > s->L ? 0 : S > MIST_MAX_STAGES ? 1 : r->max_stages > 0 && S > r->max_stages ? 2
                        : r->uniform && s->L % S ? 3 : !(n % gpn == 0 || gpn % n == 0) ? 4 : -1;
        if (k < 0 || stage_rule[k]) continue;
        stage_rule[k] = S;
        static const char *const what[] = {"more than the %d layers", "more than %d stages", "over the limit of %d stages",
                                           "does not divide the %d layers, as the uniform spaces need",
                                           "neither fills whole nodes of %d nor fits in one"};
        int arg[] = {s->L, MIST_MAX_STAGES, r->max_stages, s->L, gpn};
        msg_add(why, len, "%s%d stages (", n_rules++ ? "; " : "; ruled out: ", S);
        msg_add(why, len, what[k], arg[k]);
        msg_add(why, len, ")");
    }
    for (int S = 1; S <= s->L && S <= MIST_MAX_STAGES; S++) {
        if (!space_stage_count_ok(s, S)) continue;
        int n = N / S;
        for (int tp = 2; tp <= n; tp++) {
            if (n % tp) continue;
            int k = gpn % tp ? 0 : m->heads % tp ? 1 : m->kv_heads % tp ? 2 : m->ffn_hidden % tp ? 3
                    : r->max_tp > 0 && tp > r->max_tp ? 4 : r->max_tp_staged > 0 && n < N && tp > r->max_tp_staged ? 5 : -1;
            if (k < 0 || tp_rule[k]) continue;
            tp_rule[k] = tp;
            static const char *const what[] = {"does not divide the %d GPUs per node: tp stays inside a node",
                                               "does not divide the %d heads", "does not divide the %d kv_heads",
                                               "does not divide ffn_hidden %d", "over the limit of tp %d",
                                               "over the limit of tp %d with several stages"};
            int arg[] = {gpn, m->heads, m->kv_heads, m->ffn_hidden, r->max_tp, r->max_tp_staged};
            msg_add(why, len, "%stp %d (", n_rules++ ? "; " : "; ruled out: ", tp);
            msg_add(why, len, what[k], arg[k]);
            msg_add(why, len, ")");
        }
    }
    // Any device count that divides the global batch has a layout (one stage, tp 1), and so does
    // this one with a global batch that is a multiple of it: name the nearest such counts.
    int below = 1, above = 0;  // 1 divides every batch
    for (int d = N - 1; d > 1 && below == 1; d--)
        if (s->B % d == 0) below = d;
    for (int64_t d = N + 1; d <= s->B && d <= SEARCH_MAX_DEVICES && !above; d++)
        if (s->B % d == 0) above = (int)d;
    msg_add(why, len, ". Hint: a device count (nodes x GPUs per node) that divides global_batch %lld, e.g. %d",
            (long long)s->B, below);
    if (above) msg_add(why, len, " or %d", above);
    msg_add(why, len, ", or a global_batch that is a multiple of %d", N);
    return 0;
}

int space_stage_options(const SpaceRules *r, int l, int tp, StageOpt *out) {
    int n = 0, sps = r->sp && tp > 1 ? 2 : 1;
    for (int c = 0; c <= l; c++) {
        if (r->no_ckpt ? c > 0 : r->ckpt_all ? c < l : !r->ckpt_any && c > 0 && c < l) continue;
        // selective recompute changes only the blocks that are not checkpointed
        int sels = r->sel && c < l && (c == 0 || r->sel_mixed) ? 2 : 1;
        int leans = r->lean && c < l ? 2 : 1;  // lean changes only the blocks not checkpointed
        for (int sel = 0; sel < sels; sel++)
            for (int sp = 0; sp < sps; sp++)
                for (int lean = 0; lean < leans; lean++)
                    out[n++] = (StageOpt){(short)c, (signed char)sel, (signed char)sp, (signed char)lean};
    }
    return n;
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
