// Reader for measured per-op latency tables (format in optable.h).
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "planner/optable.h"

// The op names of models/model_build.c's three parts, the names the cost model
// looks an entry up by: an entry under any other name would never be used.
const char *const optable_op_names[] = {
    "embedding", "pos_embedding",                                                   // pre
    "ln1", "qkv", "rotary", "attention", "attn_proj", "attn_residual", "ln2", "fc", "gelu", "swiglu", "fc_proj",
    "residual",                                                                     // block
    "lnf", "lm_head", "crossentropy",                                               // post
    NULL};
// The kernels a lean block ([stage.N] lean) runs in place of the model's ops (cost_lean_extra).
const char *const optable_lean_op_names[] = {"lean_gelu", "lean_ln1", "lean_ln2", NULL};

// Ops our runtime runs inside a neighbour's kernel (models/ops.h): their time
// is in that op's entry, so a table of ours lists them at 0.
static int fused_op(const char *op) {
    return !strcmp(op, "gelu") || !strcmp(op, "attn_residual") || !strcmp(op, "pos_embedding");
}
// Ops whose backward may take no time: crossentropy's gradient is computed in
// its forward pass (mist-calibrate counts it all as forward), residuals have
// no backward kernel, and the fused ops.
static int zero_bwd_allowed(const char *op) {
    return !strcmp(op, "crossentropy") || !strcmp(op, "residual") || fused_op(op);
}
// Ops whose forward may take no time: the fused ones, and the lean norms, whose
// forward is the plain norm's (ln1's, ln2's entry; only their backward differs).
static int zero_fwd_allowed(const char *op) { return fused_op(op) || !strcmp(op, "lean_ln1") || !strcmp(op, "lean_ln2"); }

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

static int fail(char *err, size_t errlen, const char *path, int lineno, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail(char *err, size_t errlen, const char *path, int lineno, const char *fmt, ...) {
    int n = snprintf(err, errlen, "%s:%d: ", path, lineno);
    if (n >= 0 && (size_t)n < errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

enum { LINE_OK, LINE_EOF, LINE_LONG, LINE_CR, LINE_NUL };

// One line into buf without its LF or CRLF ending: LINE_OK, LINE_EOF, or why
// it cannot be taken as a line. Read a byte at a time so that a line too long
// for buf is reported instead of being split into two entries, and so that a
// lone CR (old Mac line endings: the whole file would read as one line) or a
// NUL byte (a binary file) is noticed.
static int read_line(FILE *f, char *buf, size_t max) {
    size_t n = 0;
    int c;
    while ((c = getc(f)) != EOF && c != '\n') {
        if (c == '\r') {
            int next = getc(f);
            if (next == '\n' || next == EOF) break;  // CRLF, or a CR ending the file
            return LINE_CR;
        }
        if (c == 0) return LINE_NUL;
        if (n == max) return LINE_LONG;
        buf[n++] = (char)c;
    }
    buf[n] = 0;
    return c == EOF && n == 0 ? LINE_EOF : LINE_OK;
}

// a whole token as an int in [1, INT_MAX]
static int parse_count(const char *s, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < 1 || v > INT_MAX) return -1;
    *out = (int)v;
    return 0;
}

static int parse_header(const char *path, int lineno, char *line, char *err, size_t errlen) {
    const char *sep = " \t\v\f";
    char *save, *magic = strtok_r(line, sep, &save), *version = strtok_r(NULL, sep, &save);
    char *extra = strtok_r(NULL, sep, &save);
    if (strcmp(magic, "mist-optable") || !version)
        return fail(err, errlen, path, lineno, "expected the header 'mist-optable 1' (got '%.64s%s%.64s'). Hint: the "
                    "first line that is not blank or a comment names the format; mist-calibrate writes it",
                    magic, version ? " " : "", version ? version : "");
    char *end;
    errno = 0;
    long v = strtol(version, &end, 10);
    if (end == version || *end || errno || v != 1)
        return fail(err, errlen, path, lineno, "op table version '%.64s' is not supported; allowed: 1. Hint: write "
                    "the table with this build's mist-calibrate", version);
    if (extra)
        return fail(err, errlen, path, lineno, "unexpected '%.64s' after the header 'mist-optable 1'; allowed: "
                    "nothing but a '#' comment. Hint: entries go on lines of their own", extra);
    return 0;
}

static int parse_entry(const char *path, int lineno, char *line, OpTimeEntry *e, char *err, size_t errlen) {
    const char *sep = " \t\v\f";
    char *field[7], *save;
    int n = 0;
    for (char *tok = strtok_r(line, sep, &save); tok && n < 7; tok = strtok_r(NULL, sep, &save)) field[n++] = tok;
    if (n != 6)
        return fail(err, errlen, path, lineno, "expected 6 fields 'OP B S TP FWD_US BWD_US', got %s%d; allowed: "
                    "one entry per line. Hint: '#' starts a comment", n == 7 ? "more than " : "", n == 7 ? 6 : n);
    int known = 0;
    char names[256] = "";
    const char *const *lists[2] = {optable_op_names, optable_lean_op_names};
    for (int l = 0; l < 2; l++)
        for (int i = 0; lists[l][i]; i++) {
            known |= !strcmp(field[0], lists[l][i]);
            size_t used = strlen(names);
            snprintf(names + used, sizeof names - used, "%s%s", used ? " " : "", lists[l][i]);
        }
    if (!known)
        return fail(err, errlen, path, lineno, "unknown op '%.64s'; allowed: %s. Hint: the op names of the model "
                    "description, and the lean_* kernels of lean blocks (docs/plan-analyze.md, 'Measured op table')", field[0], names);
    snprintf(e->op, sizeof e->op, "%s", field[0]);
    const char *count_name[3] = {"b", "s", "tp"};
    int *count[3] = {&e->b, &e->s, &e->tp};
    for (int i = 0; i < 3; i++)
        if (parse_count(field[1 + i], count[i]) != 0)
            return fail(err, errlen, path, lineno, "%s %s = %.64s: not an integer in range; allowed: integers 1..%d. "
                        "Hint: the micro-batch b, sequence length s and TP degree tp the time was measured at",
                        e->op, count_name[i], field[1 + i], INT_MAX);
    double us[2];
    for (int i = 0; i < 2; i++) {
        const char *name = i ? "bwd_us" : "fwd_us";
        char *end;
        errno = 0;
        us[i] = strtod(field[4 + i], &end);
        int zero_ok = i == 1 ? zero_bwd_allowed(e->op) : zero_fwd_allowed(e->op);
        // a finite, positive time: NaN, infinities and absurdly long calls
        // would turn the predicted iteration time and MFU into nonsense
        if (end == field[4 + i] || *end || errno || !isfinite(us[i]) || !(zero_ok ? us[i] >= 0 : us[i] > 0) ||
            us[i] > OPTABLE_MAX_US)
            return fail(err, errlen, path, lineno, "%s %s = %.64s: not a time in range; allowed: microseconds in "
                        "%s0, %g]%s. Hint: the mean time of one call, per TP rank", e->op, name, field[4 + i],
                        zero_ok ? "[" : "(", OPTABLE_MAX_US,
                        !zero_ok ? (i == 1 ? " (0 only for the backward of crossentropy, fused into its forward, "
                                             "of the residuals, and of gelu and pos_embedding)"
                                           : " (0 only for gelu, attn_residual and pos_embedding, which our "
                                             "runtime fuses into fc, ln2 and embedding, and for lean_ln1 and "
                                             "lean_ln2, whose forward is ln1's and ln2's)") : "");
    }
    e->fwd_seconds = us[0] * 1e-6;
    e->bwd_seconds = us[1] * 1e-6;
    return 0;
}

int optable_load(OpTable *t, const char *path, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open the op table: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s: is a directory; allowed: an op table file. Hint: name the file that mist-calibrate "
                 "--out wrote", path);
        fclose(f);
        return -1;
    }
    char line[OPTABLE_MAX_LINE + 1];
    int lineno = 0, have_header = 0, rc = 0, status;
    while (rc == 0 && (status = read_line(f, line, OPTABLE_MAX_LINE)) != LINE_EOF) {
        lineno++;
        if (status == LINE_LONG) {
            rc = fail(err, errlen, path, lineno, "line longer than %d characters; allowed: up to %d. Hint: one entry "
                      "per line, shorten the comment", OPTABLE_MAX_LINE, OPTABLE_MAX_LINE);
            break;
        }
        if (status == LINE_CR) {
            rc = fail(err, errlen, path, lineno, "carriage return inside a line (CR-only line endings?); allowed: "
                      "LF or CRLF line endings. Hint: convert with tr '\\r' '\\n'");
            break;
        }
        if (status == LINE_NUL) {
            rc = fail(err, errlen, path, lineno, "NUL byte; allowed: a text file. Hint: is this the op table "
                      "mist-calibrate wrote?");
            break;
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        if (!line[strspn(line, " \t\v\f")]) continue;  // blank or comment
        if (!have_header) {
            rc = parse_header(path, lineno, line, err, errlen);
            have_header = 1;
            continue;
        }
        OpTimeEntry e = {0};
        rc = parse_entry(path, lineno, line, &e, err, errlen);
        if (rc == 0 && optable_find(t, e.op, e.b, e.s, e.tp))
            rc = fail(err, errlen, path, lineno, "duplicate entry for op %s b=%d s=%d tp=%d; allowed: one entry "
                      "per (op, b, s, tp). Hint: delete one of the two lines", e.op, e.b, e.s, e.tp);
        if (rc == 0 && add_entry(t, &e) != 0) rc = fail(err, errlen, path, lineno, "out of memory");
    }
    if (rc == 0 && ferror(f)) {
        snprintf(err, errlen, "%s: cannot read the op table: %s", path, strerror(errno));
        rc = -1;
    }
    fclose(f);
    if (rc == 0 && !have_header) {
        snprintf(err, errlen, "%s: empty op table (expected the header 'mist-optable 1')", path);
        rc = -1;
    }
    if (rc != 0) optable_free(t);
    return rc;
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

int optable_curve(const OpTable *t, const char *op, int s, int *from, OptableCurve *c) {
    if (!t) return 0;
    for (int i = *from; i < t->n; i++) {
        const OpTimeEntry *e = &t->entry[i];
        if (e->s != s || strcmp(e->op, op)) continue;
        int seen = 0;  // this tp's curve was returned at an earlier entry
        for (int j = 0; j < i && !seen; j++)
            seen = t->entry[j].s == s && t->entry[j].tp == e->tp && !strcmp(t->entry[j].op, op);
        if (seen) continue;
        *from = i + 1;
        c->tp = e->tp;
        c->n = 0;
        for (int j = i; j < t->n && c->n < OPTABLE_CURVE_MAX; j++) {
            const OpTimeEntry *f = &t->entry[j];
            if (f->s != s || f->tp != e->tp || strcmp(f->op, op)) continue;
            int k = c->n++;  // insertion by b (no duplicates: optable_load refuses them)
            while (k > 0 && c->b[k - 1] > f->b) {
                c->b[k] = c->b[k - 1], c->fwd_seconds[k] = c->fwd_seconds[k - 1], c->bwd_seconds[k] = c->bwd_seconds[k - 1];
                k--;
            }
            c->b[k] = f->b, c->fwd_seconds[k] = f->fwd_seconds, c->bwd_seconds[k] = f->bwd_seconds;
        }
        return 1;
    }
    *from = t->n;
    return 0;
}

int optable_lists(const OpTable *t, const char *op, int s) {
    int from = 0;
    OptableCurve c;
    return optable_curve(t, op, s, &from, &c);
}

OptableRule optable_rule(const OpTable *t, const char *op, int b, int s, int tp) {
    OptableCurve c;
    for (int from = 0; optable_curve(t, op, s, &from, &c);) {
        if (c.tp != tp) continue;
        for (int k = 0; k < c.n; k++)
            if (c.b[k] == b) return OPTABLE_EXACT;
        if (c.n < 2 || b < c.b[0]) return OPTABLE_MODEL;
        return b > c.b[c.n - 1] ? OPTABLE_EXTRAPOLATED : OPTABLE_INTERPOLATED;
    }
    return OPTABLE_MODEL;
}

const char *optable_rule_name(OptableRule r) {
    static const char *names[] = {"measured", "interpolated", "extrapolated", "model"};
    return (unsigned)r <= OPTABLE_MODEL ? names[r] : "?";
}

int optable_check_seq(const OpTable *t, const char *path, int seq, char *err, size_t errlen) {
    if (!t || t->n == 0) return 0;
    for (int i = 0; i < t->n; i++)
        if (t->entry[i].s == seq) return 0;
    snprintf(err, errlen, "%s: the op table was measured at seq_len %d (line entries' s), the model has seq_len %d; "
             "allowed: a table with entries at s = %d. Hint: measure it at this length (mist-calibrate CONFIG), or "
             "plan with the config's [model] seq_len = %d", path, t->entry[0].s, seq, seq, t->entry[0].s);
    return -1;
}
