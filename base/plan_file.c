// Plan files (see plan_file.h): read with the loader of config_load.c
// (base/config_loader.h), checked against the model, written and printed.
// Every per-stage key is a [stage.N] row of config_keys.c: reading, range
// checks, writing and printing go over those rows, never over the fields by
// name.
#include <string.h>
#include "base/config_keys.h"
#include "base/config_load.h"
#include "base/config_loader.h"
#include "base/plan_file.h"

// ---------------------------------------------------------------- the [stage.N] rows

// a [stage.N] row that speaks for its field (not a shorthand such as zero for shard)
static int is_stage_key(const KeySpec *k) {
    return !strcmp(k->section, "stage") && !config_key_is_shorthand((int)(k - config_keys));
}

// The value of [stage.N] key k in st: KEY_FLOAT keys are doubles, the others ints.
static double stage_value(const StagePlan *st, const KeySpec *k) {
    const char *field = (const char *)st + k->offset;
    return k->type == KEY_FLOAT ? *(const double *)field : *(const int *)field;
}

// The largest value of int key k (an enum: its last name).
static double stage_int_max(const KeySpec *k) {
    if (k->type != KEY_ENUM) return k->max;
    int n = 0;
    while (k->names[n]) n++;
    return n - 1;
}

// A computed plan's ints (plan_validate): each at least its key's minimum, and at most its
// maximum where the range is a handful of levels (zero 0..3, a switch 0..1). The wider maxima
// (layers, dp, tp, b, ckpt: 1024 and up) bound what a plan file may say, not what a plan may
// need: a computed b = global_batch / (dp G) may pass 2^20, and plan_check bounds the rest (the
// layers' sum, the ranks dp*tp, ckpt <= layers).
enum { STAGE_LEVELS_MAX = 16 };
static int stage_int_bounded(const KeySpec *k) { return stage_int_max(k) - k->min < STAGE_LEVELS_MAX; }

static int stage_ints_ok(const StagePlan *st) {
    for (int i = 0; i < config_num_keys; i++) {
        const KeySpec *k = &config_keys[i];
        if (!is_stage_key(k) || k->type == KEY_FLOAT) continue;
        double v = stage_value(st, k);
        if (v < k->min || (stage_int_bounded(k) && v > stage_int_max(k))) return 0;
    }
    return 1;
}

// what int key k allows a computed plan: "0..3" or ">= 1"
static void stage_int_rule(const KeySpec *k, char *out, size_t len) {
    if (stage_int_bounded(k)) snprintf(out, len, "%g..%g", k->min, stage_int_max(k));
    else snprintf(out, len, ">= %g", k->min);
}

// "layers=4 dp=0 ..." and "layers, dp, tp, b >= 1, zero 0..3, ckpt >= 0": neighbours with the
// same rule share it
static void stage_ints_text(const StagePlan *st, char *values, size_t vlen, char *allowed, size_t alen) {
    size_t vu = 0, au = 0;
    char rule[64], next_rule[64] = "";
    values[0] = allowed[0] = '\0';
    for (int i = 0; i < config_num_keys; i++) {
        const KeySpec *k = &config_keys[i];
        if (!is_stage_key(k) || k->type == KEY_FLOAT) continue;
        if (vu < vlen)
            vu += (size_t)snprintf(values + vu, vlen - vu, "%s%s=%d", vu ? " " : "", k->name, (int)stage_value(st, k));
        stage_int_rule(k, rule, sizeof rule);
        next_rule[0] = '\0';  // the rule of the next int key, if any
        for (int j = i + 1; j < config_num_keys && !next_rule[0]; j++)
            if (is_stage_key(&config_keys[j]) && config_keys[j].type != KEY_FLOAT)
                stage_int_rule(&config_keys[j], next_rule, sizeof next_rule);
        if (au < alen)
            au += (size_t)snprintf(allowed + au, alen - au, "%s%s%s%s", au ? ", " : "", k->name,
                                   strcmp(rule, next_rule) ? " " : "", strcmp(rule, next_rule) ? rule : "");
    }
}

// The first real-valued knob of st outside its key's range (NaN included), or NULL.
static const KeySpec *stage_real_out_of_range(const StagePlan *st) {
    for (int i = 0; i < config_num_keys; i++) {
        const KeySpec *k = &config_keys[i];
        if (!is_stage_key(k) || k->type != KEY_FLOAT) continue;
        double v = stage_value(st, k);
        if (!(v >= k->min && v <= k->max)) return k;
    }
    return NULL;
}

int stage_plan_equal(const StagePlan *a, const StagePlan *b) {
    for (int i = 0; i < config_num_keys; i++) {
        const KeySpec *k = &config_keys[i];
        if (is_stage_key(k) && memcmp((const char *)a + k->offset, (const char *)b + k->offset, k->size)) return 0;
    }
    return 1;
}

// ---------------------------------------------------------------- checks

// [plan] virtual = v > 1 (interleaved 1F1B, docs/pipeline.md): the stages are
// P * v model chunks, chunk c on pipeline rank c mod P. The chunks of one rank
// share its ranks, so their meshes and micro-batches must agree; the order
// sends groups of P micro-batches through a rank's chunks, so G is a multiple
// of P; and a chunk's successor must be on another rank (P >= 2).
static int plan_check_virtual(Loader *ld, const Plan *p) {
    int v = plan_virtual(p), P = plan_pipeline_size(p);
    if (v == 1) return 0;
    int v_origin = ld ? loader_origin(ld, "plan", "virtual") : 0;
    if (p->num_stages % v)
        return loader_fail(ld, v_origin, "[plan] virtual = %d: stages = %d is not a multiple of it; allowed: stages = "
                           "P * virtual (one [stage.N] per model chunk, P pipeline ranks). Hint: set stages to %d or %d, "
                           "or virtual to a divisor of %d", v, p->num_stages, p->num_stages / v * v,
                           (p->num_stages / v + 1) * v, p->num_stages);
    if (P < 2)
        return loader_fail(ld, v_origin, "[plan] virtual = %d with stages = %d: one pipeline rank; allowed: virtual "
                           "> 1 only with stages >= 2 * virtual (at least 2 pipeline ranks). Hint: set virtual = 1",
                           v, p->num_stages);
    for (int c = P; c < p->num_stages; c++) {
        const StagePlan *a = &p->stage[c], *o = &p->stage[c % P];
        const char *key = a->dp != o->dp ? "dp" : a->tp != o->tp ? "tp" : a->b != o->b ? "b" : NULL;
        if (!key) continue;
        int mine = key[0] == 'd' ? a->dp : key[0] == 't' ? a->tp : a->b;
        int theirs = key[0] == 'd' ? o->dp : key[0] == 't' ? o->tp : o->b;
        return loader_fail(ld, loader_stage_origin(ld, c, key), "[stage.%d] %s = %d but [stage.%d] %s = %d: with "
                           "[plan] virtual = %d both chunks run on pipeline rank %d (chunk c on rank c mod %d); allowed: "
                           "the same dp, tp and b in the chunks of one rank. Hint: set [stage.%d] %s = %d",
                           c, key, mine, c % P, key, theirs, v, c % P, P, c, key, theirs);
    }
    if (p->G % P)
        return loader_fail(ld, ld ? loader_origin(ld, "plan", "G") : 0, "[plan] G = %d: the interleaved schedule "
                           "(virtual = %d) needs G a multiple of the %d pipeline ranks; allowed: G = %d, %d, ... Hint: "
                           "set G = %d (and b so that b * dp * G = global_batch), or virtual = 1",
                           p->G, v, P, P, 2 * P, (p->G / P + 1) * P);
    return 0;
}

// The shared plan checks. ld may be NULL (plan_validate): then messages start with `where`.
int plan_check(Loader *ld, const Plan *p, const ModelConfig *m, int64_t global_batch, int world_size) {
    int G_origin = ld ? loader_origin(ld, "plan", "G") : 0;
    for (int s = 0; s < p->num_stages; s++) {
        const StagePlan *st = &p->stage[s];
        if (m->heads % st->tp)
            return loader_fail(ld, loader_stage_origin(ld, s, "tp"),
                               "[stage.%d] tp = %d: must divide heads (%d); allowed: a "
                               "divisor of %d. Hint: each TP rank holds heads/tp heads",
                               s, st->tp, m->heads, m->heads);
        if (m->kv_heads % st->tp)
            return loader_fail(ld, loader_stage_origin(ld, s, "tp"),
                               "[stage.%d] tp = %d: must divide kv_heads (%d); allowed: a "
                               "divisor of %d. Hint: lower tp or raise kv_heads",
                               s, st->tp, m->kv_heads, m->kv_heads);
        if (m->ffn_hidden % st->tp)
            return loader_fail(ld, loader_stage_origin(ld, s, "tp"),
                               "[stage.%d] tp = %d: must divide ffn_hidden (%d); allowed: "
                               "a divisor of %d. Hint: each TP rank holds ffn_hidden/tp MLP columns",
                               s, st->tp, m->ffn_hidden, m->ffn_hidden);
        // vocab needs no check: a vocab-parallel embedding / LM head pads V up to a multiple of tp
        // sequence parallelism shards the b*seq_len rows over the tp group; at tp = 1 it
        // would do nothing, which a plan asking for it did not mean: refused
        if (st->sp && st->tp < 2)
            return loader_fail(ld, loader_stage_origin(ld, s, "sp"),
                               "[stage.%d] sp = 1 with tp = 1: sequence parallelism shards over the tp group; "
                               "allowed: sp = 1 only with tp >= 2. Hint: set sp = 0, or tp >= 2", s);
        if (st->sp && ((int64_t)st->b * m->seq_len) % st->tp)
            return loader_fail(ld, loader_stage_origin(ld, s, "sp"),
                               "[stage.%d] sp = 1: b * seq_len = %d * %d rows do not split over tp = %d; allowed: "
                               "tp dividing b * seq_len. Hint: each tp rank holds b*seq_len/tp rows", s, st->b,
                               m->seq_len, st->tp);
        // lean blocks keep other tensors than the activation offload's scan moves (docs/lean-layers.md)
        if (st->lean && st->ao > 0)
            return loader_fail(ld, loader_stage_origin(ld, s, "lean"),
                               "[stage.%d] lean = 1 with ao = %g: memory-lean layers do not combine with activation "
                               "offload; allowed: lean = 1 only with ao = 0. Hint: set ao = 0, or lean = 0", s, st->ao);
        if (st->ckpt > st->layers)
            return loader_fail(ld, loader_stage_origin(ld, s, "ckpt"),
                               "[stage.%d] ckpt = %d: more than the stage's %d layers; "
                               "allowed: 0..%d. Hint: ckpt counts the blocks that recompute",
                               s, st->ckpt, st->layers, st->layers);
        // the real-valued knobs are the offload ratios (their keys give the range; a real knob of
        // another kind would word its message from its key's hint)
        if (st->shard_group > 0 && st->dp % st->shard_group)
            return loader_fail(ld, loader_stage_origin(ld, s, "shard_group"),
                               "[stage.%d] shard_group = %d: must divide dp (%d); allowed: 0 (the dp ranks of one "
                               "node) or a divisor of %d. Hint: groups are consecutive dp ranks, e.g. shard_group = "
                               "gpus_per_node / tp", s, st->shard_group, st->dp, st->dp);
        const KeySpec *bad = stage_real_out_of_range(st);
        if (bad)
            return loader_fail(ld, loader_stage_origin(ld, s, bad->name), "[stage.%d] %s = %g: offload ratio out of "
                               "range; allowed: [%g, %g]. Hint: the fraction kept in host memory", s, bad->name,
                               stage_value(st, bad), bad->min, bad->max);
        int64_t per_iter = (int64_t)st->b * st->dp * p->G;
        if (per_iter != global_batch) {
            int64_t dpG = (int64_t)st->dp * p->G;
            char hint[160];
            int bk = config_key_find("stage", "b");
            double b_max = bk >= 0 ? config_keys[bk].max : 1e300;
            if (global_batch % dpG == 0 && (double)(global_batch / dpG) <= b_max)
                snprintf(hint, sizeof hint, "set b = %lld", (long long)(global_batch / dpG));
            else if (global_batch % dpG == 0)
                snprintf(hint, sizeof hint, "b would be %lld, above its maximum %.0f; raise dp or G so that "
                         "global_batch / (dp * G) <= %.0f", (long long)(global_batch / dpG), b_max, b_max);
            else
                snprintf(hint, sizeof hint, "dp * G = %lld does not divide global_batch; change dp or G so that it "
                         "does", (long long)dpG);
            return loader_fail(ld, loader_stage_origin(ld, s, "b"),
                               "[stage.%d] b * dp * G = %d * %d * %d = %lld, but [train] "
                               "global_batch = %lld; allowed: b * dp * G = global_batch in every stage. Hint: %s",
                               s, st->b, st->dp, p->G, (long long)per_iter, (long long)global_batch, hint);
        }
    }
    int sum = 0;
    for (int s = 0; s < p->num_stages; s++) sum += p->stage[s].layers;
    if (sum != m->layers)
        return loader_fail(
            ld, p->num_stages ? loader_stage_origin(ld, p->num_stages - 1, "layers") : G_origin,
            "[stage.%d] layers = %d: the stages' layers add up to %d, but [model] layers = %d; allowed: "
            "the [stage.N] layers must sum to the model's layers. Hint: adjust the layers of one stage by %d",
            p->num_stages - 1, p->num_stages ? p->stage[p->num_stages - 1].layers : 0, sum, m->layers, m->layers - sum);
    int vrc = plan_check_virtual(ld, p);
    if (vrc) return vrc;
    int64_t wide = 0;  // in 64 bits: the int sum of plan_world_size could overflow here
    for (int s = 0; s < plan_pipeline_size(p); s++) wide += (int64_t)p->stage[s].dp * p->stage[s].tp;
    if (wide > MIST_MAX_RANKS)
        return loader_fail(ld, ld ? loader_origin(ld, "plan", "stages") : 0,
                           "[plan] stages = %d: the plan needs %lld ranks (sum "
                           "of dp*tp); allowed: at most %d. Hint: lower dp or tp",
                           p->num_stages, (long long)wide, MIST_MAX_RANKS);
    int ranks = plan_world_size(p);
    if (world_size > 0 && ranks != world_size) {
        char meshes[256];
        size_t used = 0;
        meshes[0] = '\0';
        for (int s = 0; s < p->num_stages && used + 32 < sizeof meshes; s++)
            used += (size_t)snprintf(meshes + used, sizeof meshes - used, "%s%dx%d", s ? " + " : "", p->stage[s].dp,
                                     p->stage[s].tp);
        return loader_fail(
            ld, ld ? loader_origin(ld, "plan", "stages") : 0,
            "[plan] stages = %d: the plan needs %d ranks (dp x "
            "tp per stage: %s) but the job has %d; allowed: sum of dp*tp = the rank count. Hint: start it with "
            "mpirun -np %d, or change dp/tp",
            p->num_stages, ranks, meshes, world_size, ranks);
    }
    return 0;
}

// Every stage 0..stages-1 needs its section; none beyond.
int plan_check_stage_sections(Loader *ld, const Plan *p) {
    for (int s = 0; s < MIST_MAX_STAGES; s++) {
        if (s < p->num_stages && !ld->stage_section_line[s]) {
            int has_override = 0;
            for (int k = 0; k < MIST_MAX_STAGE_KEYS; k++) has_override |= ld->stage_origin[s][k] != 0;
            if (!has_override)
                return loader_fail(
                    ld, loader_origin(ld, "plan", "stages"),
                    "[plan] stages = %d but [stage.%d] is missing; "
                    "allowed: one [stage.N] section for each N in 0..%d. Hint: add [stage.%d] with layers, dp, "
                    "tp, b",
                    p->num_stages, s, p->num_stages - 1, s);
        }
        if (s < p->num_stages && !ld->stage_origin[s][loader_stage_slot(config_key_find("stage", "layers"))])
            return loader_fail(
                ld, ld->stage_section_line[s] ? ld->stage_section_line[s] : loader_origin(ld, "plan", "stages"),
                "[stage.%d] layers is missing; allowed: an integer 1..4096 (required in every stage). Hint: "
                "the stages' layers must add up to [model] layers",
                s);
        for (int k = 0; s >= p->num_stages && k < MIST_MAX_STAGE_KEYS; k++)
            if (ld->stage_origin[s][k] < 0)
                return loader_fail(ld, ld->stage_origin[s][k], "[stage.%d] is beyond [plan] stages = %d; allowed: "
                                   "stage.0 .. stage.%d. Hint: also override plan.stages, or fix the stage number", s,
                                   p->num_stages, p->num_stages - 1);
        if (s >= p->num_stages && ld->stage_section_line[s])
            return loader_fail(ld, ld->stage_section_line[s],
                               "[stage.%d] is beyond [plan] stages = %d; allowed: [stage.0] "
                               ".. [stage.%d]. Hint: raise [plan] stages or delete the section",
                               s, p->num_stages, p->num_stages - 1);
    }
    return 0;
}

// A plan file's loader: its keys, stage sections and (m != NULL) the checks against the
// model, with each message at the file's line.
static int load_plan_file(Plan *plan, const char *path, const ModelConfig *m, int64_t global_batch, int world_size,
                          char *err, size_t errlen) {
    static Loader ld;
    static MistConfig tmp;
    memset(&ld, 0, sizeof ld);
    ld.err = err;
    ld.errlen = errlen;
    config_defaults(&tmp);
    if (loader_open(&ld, path) || loader_parse(&ld, &tmp)) return MIST_EXIT_CONFIG;
    for (int k = 0; k < config_num_keys; k++) {
        const KeySpec *ks = &config_keys[k];
        if (ld.key_origin[k] <= 0) continue;
        int plan_key = !strcmp(ks->section, "plan") && (!strcmp(ks->name, "G") || !strcmp(ks->name, "stages") ||
                                                        !strcmp(ks->name, "mode") || !strcmp(ks->name, "virtual"));
        if (!plan_key && strcmp(ks->section, "stage"))  // anything else would be silently ignored
            return loader_fail(&ld, ld.key_origin[k],
                               "[%s] %s: a plan file holds only [plan] G, stages, virtual (and mode = fixed) "
                               "and [stage.N]; allowed: those keys. Hint: move it to the main configuration",
                               ks->section, ks->name);
    }
    // plan_write_ini writes mode = fixed; without the line the mode keeps its default (auto), which is fine
    if (tmp.plan.mode != PLAN_FIXED && ld.key_origin[config_key_find("plan", "mode")] > 0)
        return loader_fail(&ld, loader_origin(&ld, "plan", "mode"), "[plan] mode = auto: a plan file is a fixed plan; "
                           "allowed: fixed (or no mode line). Hint: delete the line");
    if (plan_check_stage_sections(&ld, &tmp.plan.plan)) return MIST_EXIT_CONFIG;
    if (m && plan_check(&ld, &tmp.plan.plan, m, global_batch, world_size)) return MIST_EXIT_CONFIG;
    *plan = tmp.plan.plan;
    return 0;
}

int plan_file_load(Plan *plan, const char *path, char *err, size_t errlen) {
    return load_plan_file(plan, path, NULL, 0, 0, err, errlen);
}

int plan_file_load_checked(Plan *plan, const char *path, const ModelConfig *m, int64_t global_batch, int world_size,
                           char *err, size_t errlen) {
    return load_plan_file(plan, path, m, global_batch, world_size, err, errlen);
}

int plan_validate(const Plan *plan, const ModelConfig *m, int64_t global_batch, int world_size, const char *where,
                  char *err, size_t errlen) {
    static Loader ld;
    memset(&ld, 0, sizeof ld);
    ld.err = err;
    ld.errlen = errlen;
    ld.path = where ? where : "plan";
    if (plan->num_stages < 1 || plan->num_stages > MIST_MAX_STAGES)
        return loader_fail(&ld, 0, "stages = %d; allowed: 1..%d. Hint: set [plan] stages", plan->num_stages,
                           MIST_MAX_STAGES);
    for (int s = 0; s < plan->num_stages; s++)
        if (!stage_ints_ok(&plan->stage[s])) {
            char values[256], allowed[256];
            stage_ints_text(&plan->stage[s], values, sizeof values, allowed, sizeof allowed);
            return loader_fail(&ld, 0, "[stage.%d] %s; allowed: %s. Hint: fix [stage.%d]", s, values, allowed, s);
        }
    return plan_check(&ld, plan, m, global_batch, world_size);
}

// ---------------------------------------------------------------- writing and printing

void plan_write_ini(const Plan *plan, FILE *f) {
    fprintf(f, "[plan]\nmode = fixed\nG = %d\nstages = %d\n", plan->G, plan->num_stages);
    if (plan_virtual(plan) > 1) fprintf(f, "virtual = %d\n", plan_virtual(plan));  // interleaved: stages are chunks
    for (int s = 0; s < plan->num_stages; s++) {
        fprintf(f, "\n[stage.%d]\n", s);
        for (int i = 0; i < config_num_keys; i++) {
            const KeySpec *k = &config_keys[i];
            if (!is_stage_key(k)) continue;
            double v = stage_value(&plan->stage[s], k);
            if (k->type == KEY_FLOAT) fprintf(f, "%s = %.17g\n", k->name, v);  // 17 digits: read back exactly
            else if (k->type == KEY_ENUM) fprintf(f, "%s = %s\n", k->name, k->names[(int)v]);
            else if (k->type == KEY_BOOL) fprintf(f, "%s = %s\n", k->name, v ? "true" : "false");
            else fprintf(f, "%s = %d\n", k->name, (int)v);
        }
    }
}

// A [stage.N] key's column, right-aligned under its name: ints at least 4 wide and two spaces
// apart, reals %5.3g with one space between neighbouring reals (the offload ratios read as one
// group). prev: the key of the column before (NULL: the stage number's).
static int column_width(const KeySpec *k) {
    int width = (int)strlen(k->name), least = k->type == KEY_FLOAT ? 5 : 4;
    return width < least ? least : width;
}

static const char *column_gap(const KeySpec *k, const KeySpec *prev) {
    return k->type == KEY_FLOAT && prev && prev->type == KEY_FLOAT ? " " : "  ";
}

void plan_print_stages(const Plan *p, FILE *f) {
    const KeySpec *prev = NULL;
    fprintf(f, "    %5s", "stage");
    for (int i = 0; i < config_num_keys; i++) {
        const KeySpec *k = &config_keys[i];
        if (!is_stage_key(k)) continue;
        fprintf(f, "%s%*s", column_gap(k, prev), column_width(k), k->name);
        prev = k;
    }
    fprintf(f, "\n");
    for (int s = 0; s < p->num_stages; s++) {
        fprintf(f, "    %5d", s);
        prev = NULL;
        for (int i = 0; i < config_num_keys; i++) {
            const KeySpec *k = &config_keys[i];
            if (!is_stage_key(k)) continue;
            double v = stage_value(&p->stage[s], k);
            fprintf(f, "%s", column_gap(k, prev));
            if (k->type == KEY_FLOAT) fprintf(f, "%*.3g", column_width(k), v);
            else if (k->type == KEY_ENUM) fprintf(f, "%*s", column_width(k), k->names[(int)v]);
            else fprintf(f, "%*d", column_width(k), (int)v);
            prev = k;
        }
        fprintf(f, "\n");
    }
}
