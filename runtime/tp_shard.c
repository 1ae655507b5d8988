// Tensor-parallel shards of parameters (see tp_shard.h).
#include <stdio.h>
#include <string.h>
#include "runtime/tp_shard.h"

static int is(const ParamSpec *p, const char *name) { return !strcmp(p->name, name); }

// Split each section of `sizes` (units of `unit` rows or columns) evenly: rank
// t takes units [t*n/tp, (t+1)*n/tp) of every section.
static int split_sections(TpShard *s, const int64_t *units, int nsec, int64_t unit, int tp, int t,
                          const ParamSpec *p, const char *what, char *err, size_t errlen) {
    int64_t base = 0, total = 0;
    for (int k = 0; k < nsec; k++) {
        if (units[k] % tp) {
            snprintf(err, errlen, "%s: %lld %s do not split over tp = %d. Hint: choose tp dividing %lld", p->name,
                     (long long)units[k], what, tp, (long long)units[k]);
            return 2;
        }
        int64_t per = units[k] / tp;
        s->first[k] = (base + t * per) * unit;
        s->count[k] = per * unit;
        total += s->count[k];
        base += units[k];
    }
    s->n = nsec;
    if (s->split == 1) s->rows = total, s->cols = p->cols;
    else s->rows = p->rows, s->cols = total;
    return 0;
}

int tp_shard(const ModelConfig *m, const ParamSpec *p, int tp, int t, TpShard *s, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    s->split = tp > 1 ? p->tp_split : 0;
    if (tp < 1 || t < 0 || t >= tp) {
        snprintf(err, errlen, "%s: tensor-parallel rank %d of %d does not exist", p->name, t, tp);
        return 2;
    }
    if (!s->split) {
        s->n = 1, s->first[0] = 0, s->count[0] = p->rows, s->rows = p->rows, s->cols = p->cols;
        return 0;
    }
    int64_t hd = m->hidden / m->heads, F = m->ffn_hidden;
    int swiglu = m->activation == ACT_SWIGLU;
    if (is(p, "wte") || is(p, "lm_head_w")) {  // vocabulary-parallel: V need not divide
        int64_t per = (p->rows + tp - 1) / tp, first = t * per;
        int64_t count = first >= p->rows ? 0 : (p->rows - first < per ? p->rows - first : per);
        s->n = 1, s->first[0] = first, s->count[0] = count, s->rows = count, s->cols = p->cols;
        return 0;
    }
    if (is(p, "qkv_w") || is(p, "qkv_b")) {
        int64_t heads[3] = {m->heads, m->kv_heads, m->kv_heads};
        return split_sections(s, heads, 3, hd, tp, t, p, "heads", err, errlen);
    }
    if ((is(p, "fc_w") || is(p, "fc_b")) && swiglu) {
        int64_t units[2] = {F, F};
        return split_sections(s, units, 2, 1, tp, t, p, "MLP units", err, errlen);
    }
    if (is(p, "attn_proj_w")) {
        int64_t heads = m->heads;
        return split_sections(s, &heads, 1, hd, tp, t, p, "heads", err, errlen);
    }
    int64_t n = s->split == 1 ? p->rows : p->cols;
    return split_sections(s, &n, 1, 1, tp, t, p, s->split == 1 ? "rows" : "columns", err, errlen);
}

// Copies the shard's ranges from src to dst: global -> shard when into_shard,
// else shard -> global.
static void copy_ranges(const TpShard *s, const ParamSpec *p, void *dst, const void *src, size_t elem, int into_shard) {
    char *d = dst;
    const char *c = src;
    // one run: `bytes` at global offset g and shard offset l
#define RUN(g, l, bytes) memcpy(d + (into_shard ? (l) : (g)), c + (into_shard ? (g) : (l)), (bytes))
    if (s->split == 2) {  // columns: per global row, the ranges side by side
        for (int64_t r = 0; r < p->rows; r++) {
            int64_t at = 0;
            for (int k = 0; k < s->n; k++) {
                RUN((size_t)(r * p->cols + s->first[k]) * elem, (size_t)(r * s->cols + at) * elem,
                    (size_t)s->count[k] * elem);
                at += s->count[k];
            }
        }
    } else {  // rows (or the whole tensor when replicated): whole row runs
        int64_t at = 0;
        for (int k = 0; k < s->n; k++) {
            RUN((size_t)(s->first[k] * p->cols) * elem, (size_t)(at * p->cols) * elem,
                (size_t)(s->count[k] * p->cols) * elem);
            at += s->count[k];
        }
    }
#undef RUN
}

void tp_shard_extract(const TpShard *s, const ParamSpec *p, const void *global, void *shard, size_t elem) {
    copy_ranges(s, p, shard, global, elem, 1);
}

void tp_shard_insert(const TpShard *s, const ParamSpec *p, const void *shard, void *global, size_t elem) {
    copy_ranges(s, p, global, shard, elem, 0);
}

int64_t tp_shard_global_index(const TpShard *s, const ParamSpec *p, int64_t i) {
    int64_t row = i / s->cols, col = i % s->cols;
    int64_t *local = s->split == 2 ? &col : &row;  // the split coordinate
    for (int k = 0; k < s->n; k++) {
        if (*local < s->count[k]) {
            *local += s->first[k];
            break;
        }
        *local -= s->count[k];
    }
    return row * p->cols + col;
}
