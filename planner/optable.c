// Reader for measured per-op latency tables (format in optable.h).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "planner/optable.h"

static int add_entry(OpTable *t, const OpTimeEntry *e) {
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        OpTimeEntry *grown = realloc(t->entry, (size_t)cap * sizeof *grown);
        if (!grown) return -1;
        t->entry = grown;
        t->cap = cap;
    }
    t->entry[t->n++] = *e;
    return 0;
}

int optable_load(OpTable *t, const char *path, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open the op table: %s", path, strerror(errno));
        return -1;
    }
    char line[512];
    int lineno = 0, have_header = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char word[64];
        if (sscanf(line, "%63s", word) != 1) continue;  // blank or comment
        if (!have_header) {
            int version;
            if (sscanf(line, " mist-optable %d", &version) != 1 || version != 1) {
                snprintf(err, errlen, "%s:%d: expected the header 'mist-optable 1' (got '%s')", path, lineno, word);
                fclose(f);
                optable_free(t);
                return -1;
            }
            have_header = 1;
            continue;
        }
        OpTimeEntry e = {0};
        double fwd_us, bwd_us;
        char extra[8];
        int got = sscanf(line, "%31s %d %d %d %lf %lf %7s", e.op, &e.b, &e.s, &e.tp, &fwd_us, &bwd_us, extra);
        if (got != 6 || e.b < 1 || e.s < 1 || e.tp < 1 || fwd_us < 0 || bwd_us < 0) {
            snprintf(err, errlen, "%s:%d: expected 'OP B S TP FWD_US BWD_US' with B, S, TP >= 1 and times >= 0", path,
                     lineno);
            fclose(f);
            optable_free(t);
            return -1;
        }
        if (optable_find(t, e.op, e.b, e.s, e.tp)) {
            snprintf(err, errlen, "%s:%d: duplicate entry for op %s b=%d s=%d tp=%d", path, lineno, e.op, e.b, e.s, e.tp);
            fclose(f);
            optable_free(t);
            return -1;
        }
        e.fwd_seconds = fwd_us * 1e-6;
        e.bwd_seconds = bwd_us * 1e-6;
        if (add_entry(t, &e) != 0) {
            snprintf(err, errlen, "%s:%d: out of memory", path, lineno);
            fclose(f);
            optable_free(t);
            return -1;
        }
    }
    fclose(f);
    if (!have_header) {
        snprintf(err, errlen, "%s: empty op table (expected the header 'mist-optable 1')", path);
        return -1;
    }
    return 0;
}

void optable_free(OpTable *t) {
    free(t->entry);
    memset(t, 0, sizeof *t);
}

const OpTimeEntry *optable_find(const OpTable *t, const char *op, int b, int s, int tp) {
    if (!t) return NULL;
    for (int i = 0; i < t->n; i++) {
        const OpTimeEntry *e = &t->entry[i];
        if (e->b == b && e->s == s && e->tp == tp && !strcmp(e->op, op)) return e;
    }
    return NULL;
}
