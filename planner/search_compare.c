// What each feature buys: the best plan per space (search_compare.h).
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "base/paro.h"
#include "models/model_flops.h"
#include "planner/analyze.h"
#include "planner/stage_model.h"
#include "planner/search_compare.h"

// One row from a search's result: its time, plan (or the closest), MFU as --analyze reports it
// (model FLOPs over the devices' dense peak `rate`) and the search's wall time.
static void space_best_fill(SpaceBest *b, const SearchResult *r, double seconds, double flops, double rate) {
    b->found = r->found;
    b->iteration_seconds = r->found ? r->iteration_seconds : INFINITY;
    b->have_closest = !r->found && r->have_closest;
    if (r->found) b->plan = r->plan;
    else if (b->have_closest) b->plan = r->closest;
    b->closest_stage = r->closest_stage, b->shortfall = r->shortfall, b->closest_host = r->closest_host;
    b->seconds = seconds;
    b->mfu = r->found && rate > 0 ? flops / (rate * r->iteration_seconds) : 0;
}

int search_compare_spaces(const MistConfig *cfg, const HwProfile *hw, const OpTable *table, const SearchOptions *so,
                          PlanSpace upto, const SearchResult *known, double known_seconds, SpaceComparison *out,
                          char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->count = (int)upto + 1;
    // MFU as --analyze reports it: model FLOPs (Megatron convention) over the devices' dense peak
    double flops = model_flops_per_iteration(cfg);
    double rate = (double)so->nodes * so->gpus_per_node * hw->peak_flops[compute_dtype_of(cfg)];
    for (int sp = 0; sp <= (int)upto; sp++) {
        static SearchResult searched;  // large (two plans): not on the stack
        const SearchResult *r = known;
        double seconds = known_seconds;
        if (sp != (int)upto || !known) {
            SearchOptions o = *so;
            o.space = (PlanSpace)sp;
            o.progress = 0;
            SearchStats st;
            int rc = plan_search(cfg, hw, table, &o, &searched, &st, err, errlen);
            // a smaller space may have no layout where a larger one has (uniform stages need S | L):
            // its row says so; the searched space failing is the caller's error
            if (rc == 2 && sp == (int)upto) return 2;
            if (rc == 2) {
                out->space[sp].no_layout = 1;
                out->space[sp].iteration_seconds = INFINITY;
                out->space[sp].seconds = st.seconds;
                err[0] = '\0';
                continue;
            }
            r = &searched;
            seconds = st.seconds;
        }
        space_best_fill(&out->space[sp], r, seconds, flops, rate);
    }
    return 0;
}

int search_compare_seeds(const MistConfig *cfg, const HwProfile *hw, const OpTable *table, const SearchOptions *so,
                         SpaceComparison *out, char *err, size_t errlen) {
    out->have_without = 0;
    if (out->count != SPACE_FULL + 1) return 0;
    double flops = model_flops_per_iteration(cfg);
    double rate = (double)so->nodes * so->gpus_per_node * hw->peak_flops[compute_dtype_of(cfg)];
    for (int k = 0; k < WITHOUT_COUNT; k++) {
        static SearchResult searched;
        SearchOptions o = *so;
        o.space = SPACE_FULL;
        o.progress = 0;
        if (k == WITHOUT_PARO) o.limits.zero_levels = o.limits.zero_levels ? o.limits.zero_levels & 0xF : 0xF;
        else o.limits.no_lean = 1;
        SearchStats st;
        if (plan_search(cfg, hw, table, &o, &searched, &st, err, errlen) == 2) return 2;
        space_best_fill(&out->without[k], &searched, st.seconds, flops, rate);
    }
    out->have_without = 1;
    return 0;
}

double search_compare_speedup(const SpaceComparison *c, PlanSpace base, int i) {
    if ((int)base >= c->count || !c->space[base].found || !c->space[i].found) return NAN;
    return c->space[base].iteration_seconds / c->space[i].iteration_seconds;
}

// "lo" or "lo-hi" of an int field over the stages
static int range_text(char *buf, size_t len, const Plan *p, size_t offset) {
    int lo = 1 << 30, hi = -1;
    for (int i = 0; i < p->num_stages; i++) {
        int v = *(const int *)((const char *)&p->stage[i] + offset);
        if (v < lo) lo = v;
        if (v > hi) hi = v;
    }
    return lo == hi ? snprintf(buf, len, "%d", lo) : snprintf(buf, len, "%d-%d", lo, hi);
}

void plan_summary(const Plan *p, char *buf, size_t len) {
    // meshes: the distinct dp x tp of the stages, in stage order
    char mesh[96] = "";
    int distinct = 0;
    for (int i = 0; i < p->num_stages; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= p->stage[j].dp == p->stage[i].dp && p->stage[j].tp == p->stage[i].tp;
        if (seen) continue;
        size_t at = strlen(mesh);
        if (at + 24 >= sizeof mesh) break;
        snprintf(mesh + at, sizeof mesh - at, "%s%dx%d", distinct++ ? "," : "", p->stage[i].dp, p->stage[i].tp);
    }
    char b[24], zero[48];
    range_text(b, sizeof b, p, offsetof(StagePlan, b));
    range_text(zero, sizeof zero, p, offsetof(StagePlan, zero));
    // PaRO codes (base/paro.h) by their scopes, e.g. "shard NIG", or "ZeRO 1, shard IIG" when mixed
    int paro = 0;
    for (int i = 0; i < p->num_stages; i++) paro |= shard_code_has_i(p->stage[i].zero);
    if (paro) {
        size_t at = 0;
        zero[0] = '\0';
        for (int i = 0; i < p->num_stages && at + 8 < sizeof zero; i++) {
            int z = p->stage[i].zero, seen = 0;
            for (int j = 0; j < i; j++) seen |= p->stage[j].zero == z;
            if (seen) continue;
            at += (size_t)snprintf(zero + at, sizeof zero - at, "%s%s", at ? "," : "",
                                   z >= 0 && z < SHARD_CODES ? shard_code_names[z] : "?");
        }
    }
    // checkpointed blocks of all blocks; offloaded states: those with a non-zero ratio on some stage
    // selective: the blocks that recompute their attention core (those not checkpointed of a
    // recompute = selective stage); sp: stages with sequence parallelism
    int ckpt = 0, layers = 0, sel = 0, sp = 0, lean = 0, wo = 0, go = 0, oo = 0, ao = 0;
    for (int i = 0; i < p->num_stages; i++) {
        const StagePlan *s = &p->stage[i];
        ckpt += s->ckpt, layers += s->layers;
        if (s->recompute == RECOMPUTE_SELECTIVE) sel += s->layers - s->ckpt;
        sp += s->sp;
        if (s->lean) lean += s->layers - s->ckpt;  // the blocks that run the lean forms
        wo |= s->wo > 0, go |= s->go > 0, oo |= s->oo > 0, ao |= s->ao > 0;
    }
    char ck[112], off[32];
    if (ckpt == 0) snprintf(ck, sizeof ck, "no ckpt");
    else if (ckpt == layers) snprintf(ck, sizeof ck, "ckpt all");
    else snprintf(ck, sizeof ck, "ckpt %d/%d blocks", ckpt, layers);
    size_t at = strlen(ck);
    if (sel == layers) snprintf(ck + at, sizeof ck - at, ", selective");
    else if (sel) snprintf(ck + at, sizeof ck - at, ", selective %d/%d blocks", sel, layers);
    at = strlen(ck);
    if (lean) snprintf(ck + at, sizeof ck - at, ", lean %d/%d blocks", lean, layers);
    at = strlen(ck);
    if (sp == p->num_stages) snprintf(ck + at, sizeof ck - at, ", sp");
    else if (sp) snprintf(ck + at, sizeof ck - at, ", sp on %d/%d stages", sp, p->num_stages);
    if (!(wo | go | oo | ao)) snprintf(off, sizeof off, "no offload");
    else snprintf(off, sizeof off, "offload%s%s%s%s", wo ? " w" : "", go ? " g" : "", oo ? " o" : "", ao ? " a" : "");
    int v = plan_virtual(p);
    char stages[48];
    if (v > 1) snprintf(stages, sizeof stages, "%d stages x %d chunks", p->num_stages / v, v);
    else snprintf(stages, sizeof stages, "%d stage%s", p->num_stages, p->num_stages == 1 ? "" : "s");
    snprintf(buf, len, "%s, G %d, mesh %s, b %s, %s %s, %s, %s", stages, p->G, mesh, b, paro ? "shard" : "ZeRO", zero, ck,
             off);
}

// the speedup of a baseline (megatron-mist, megatron) over a row's time, "-" when either is missing
static void speedup_text(const SpaceComparison *c, PlanSpace base, const SpaceBest *b, char *buf, size_t len) {
    snprintf(buf, len, "-");
    if ((int)base < c->count && c->space[base].found && b->found)
        snprintf(buf, len, "%.3fx", c->space[base].iteration_seconds / b->iteration_seconds);
}

// One row of the table: `name`, its time, both speedups, MFU, search time and the plan.
static void print_row(const SpaceComparison *c, const char *name, const SpaceBest *b, FILE *f) {
    char plan[192];
    if (b->found || b->have_closest) plan_summary(&b->plan, plan, sizeof plan);
    if (!b->found) {
        if (b->no_layout)
            fprintf(f, "  %-13s %14s %13s %11s %6s %8.3fs  no layout in this space (--space %s says why)\n", name, "-",
                    "-", "-", "-", b->seconds, name);
        else if (b->have_closest)
            fprintf(f, "  %-13s %14s %13s %11s %6s %8.3fs  nothing fits; closest: %s, stage %d short by %.2f GiB of %s "
                    "memory\n", name, "-", "-", "-", "-", b->seconds, plan, b->closest_stage, b->shortfall / 1073741824.0,
                    b->closest_host ? "host" : "device");
        else
            fprintf(f, "  %-13s %14s %13s %11s %6s %8.3fs  nothing fits\n", name, "-", "-", "-", "-", b->seconds);
        return;
    }
    char sp[2][16], t[32];
    speedup_text(c, SPACE_MEGATRON_MIST, b, sp[0], sizeof sp[0]);
    speedup_text(c, SPACE_MEGATRON, b, sp[1], sizeof sp[1]);
    fprintf(f, "  %-13s %14s %13s %11s %5.1f%% %8.3fs  %s\n", name, analysis_seconds_text(b->iteration_seconds, t, sizeof t),
            sp[0], sp[1], 100 * b->mfu, b->seconds, plan);
}

static const char *const without_names[WITHOUT_COUNT] = {"full-no-paro", "full-no-lean"};

void search_compare_print_text(const SpaceComparison *c, FILE *f) {
    fprintf(f, "what each feature buys (best plan per space, same cluster and batch; speedup = that space's time / "
            "this one's):\n");
    fprintf(f, "  %-13s %14s %13s %11s %6s %9s  %s\n", "space", "iteration", "vs meg-mist", "vs megatron", "MFU",
            "search", "plan");
    for (int i = 0; i < c->count; i++) print_row(c, search_space_name((PlanSpace)i), &c->space[i], f);
    if (!c->have_without) return;
    fprintf(f, "the full space without one technique (what it buys: this time / full's):\n");
    for (int k = 0; k < WITHOUT_COUNT; k++) {
        const SpaceBest *b = &c->without[k], *full = &c->space[SPACE_FULL];
        print_row(c, without_names[k], b, f);
        if (b->found && full->found)
            fprintf(f, "  %-13s (full is %.4fx faster)\n", "", b->iteration_seconds / full->iteration_seconds);
    }
}

void search_compare_print_without_json(const SpaceComparison *c, FILE *f) {
    for (int k = 0; k < WITHOUT_COUNT && c->have_without; k++) {
        const SpaceBest *b = &c->without[k], *full = &c->space[SPACE_FULL];
        fprintf(f, "%s{\"space\": \"%s\", \"found\": %s", k ? ", " : "", without_names[k], b->found ? "true" : "false");
        if (b->found) fprintf(f, ", \"iteration_seconds\": %.17g, \"mfu\": %.17g", b->iteration_seconds, b->mfu);
        if (b->found && full->found) fprintf(f, ", \"full_speedup\": %.6g", b->iteration_seconds / full->iteration_seconds);
        fprintf(f, ", \"search_seconds\": %.6g}", b->seconds);
    }
}

void search_compare_print_json(const SpaceComparison *c, FILE *f) {
    for (int i = 0; i < c->count; i++) {
        const SpaceBest *b = &c->space[i];
        fprintf(f, "%s{\"space\": \"%s\", \"found\": %s", i ? ", " : "", search_space_name((PlanSpace)i),
                b->found ? "true" : "false");
        if (b->found) {
            fprintf(f, ", \"iteration_seconds\": %.17g, \"mfu\": %.17g", b->iteration_seconds, b->mfu);
            for (int k = 0; k < 2; k++) {
                double s = search_compare_speedup(c, k ? SPACE_MEGATRON : SPACE_MEGATRON_MIST, i);
                const char *key = k ? "speedup_over_megatron" : "speedup_over_megatron_mist";
                if (isnan(s)) fprintf(f, ", \"%s\": null", key);
                else fprintf(f, ", \"%s\": %.6g", key, s);
            }
        } else if (b->no_layout) {
            fprintf(f, ", \"no_layout\": true");
        } else if (b->have_closest) {
            fprintf(f, ", \"closest_stage\": %d, \"shortfall_bytes\": %lld, \"shortfall_memory\": \"%s\"",
                    b->closest_stage, (long long)b->shortfall, b->closest_host ? "host" : "device");
        }
        if (b->found || b->have_closest) {
            char plan[192];
            plan_summary(&b->plan, plan, sizeof plan);
            fprintf(f, ", \"stages\": %d, \"G\": %d, \"plan\": \"%s\"", b->plan.num_stages, b->plan.G, plan);
        }
        fprintf(f, ", \"search_seconds\": %.6g}", b->seconds);
    }
}
