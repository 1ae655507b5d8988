// A measured per-op latency table: when the cost model finds an op of the
// model description here (same op name, sequence s, TP degree, and a
// micro-batch b measured or between two measured), it uses the measured
// forward/backward seconds instead of its own model.
//
// File format (text, one entry per line, '#' starts a comment):
//   mist-optable 1
//   # op          b     s     tp   fwd_us     bwd_us
//   qkv           1     2048  1    986        1937
// op is an op name of the cost model's op list (optable_op_names, listed in
// docs/plan-analyze.md, "Measured op table"), or a lean block's kernel
// (lean_gelu, lean_ln1, lean_ln2; older tables without them price lean blocks
// from the model); b, s, tp >= 1; times are microseconds per call, per TP rank,
// in (0, OPTABLE_MAX_US] (the backward of crossentropy and residual may be 0,
// both times of the ops our runtime fuses into a neighbour: gelu,
// attn_residual, pos_embedding, and the forward of lean_ln1 and lean_ln2, which
// is ln1's and ln2's). Lines end in LF or CRLF and are at most OPTABLE_MAX_LINE
// characters.
//
// Shapes between measured ones: at one (op, s, tp), linear in b between the
// two nearest measured b; beyond the largest, the line through the last two
// (a warning); below the smallest, or where only one b is measured, the
// model's time (a fallback, reported). A table with no entry at the model's
// seq_len is an error (optable_check_seq).
#ifndef MIST_OPTABLE_H
#define MIST_OPTABLE_H

#include <stddef.h>

#define OPTABLE_MAX_LINE 511  // characters per line, without the line ending
#define OPTABLE_MAX_US 1e10   // longest time of one call (about 2.8 hours; more is a unit mistake)

// The op names an entry may have, NULL-terminated: the model description's ops,
// and the kernels a lean block runs in their place (lean_gelu, lean_ln1, lean_ln2).
extern const char *const optable_op_names[];
extern const char *const optable_lean_op_names[];

typedef struct {
    char op[32];
    int b, s, tp;
    double fwd_seconds, bwd_seconds;
} OpTimeEntry;

typedef struct {
    int n, cap;
    OpTimeEntry *entry;  // (n)
    int strict;          // --strict-op-table: a shape the table does not cover is refused
} OpTable;

// The time a refused shape costs under strict (so that the search never picks
// it; mist-plan reports a plan that needs one as an error)
#define OPTABLE_REFUSED_SECONDS 1e6

// The measured times of one op at one (s, tp), by increasing b.
#define OPTABLE_CURVE_MAX 64
typedef struct {
    int tp, n;
    double b[OPTABLE_CURVE_MAX], fwd_seconds[OPTABLE_CURVE_MAX], bwd_seconds[OPTABLE_CURVE_MAX];
} OptableCurve;

// The next curve of op at sequence s: call with *from = 0 first; fills *c and
// returns 1 for each tp the table lists (in order of first appearance), 0 after the last.
int optable_curve(const OpTable *t, const char *op, int s, int *from, OptableCurve *c);

// 1 when the table has an entry for op at sequence s (any b, tp), else 0 (or t NULL).
int optable_lists(const OpTable *t, const char *op, int s);

// How a (op, b, s, tp) is priced (the rule above).
typedef enum { OPTABLE_EXACT, OPTABLE_INTERPOLATED, OPTABLE_EXTRAPOLATED, OPTABLE_MODEL } OptableRule;
OptableRule optable_rule(const OpTable *t, const char *op, int b, int s, int tp);
const char *optable_rule_name(OptableRule r);

// 0 when the table lists the sequence length seq (or is empty), else -1 with
// a message naming both lengths in err.
int optable_check_seq(const OpTable *t, const char *path, int seq, char *err, size_t errlen);

// Read a table; returns 0, or -1 with "file:line: message" in err.
int optable_load(OpTable *t, const char *path, char *err, size_t errlen);
void optable_free(OpTable *t);

// The entry for (op, b, s, tp), or NULL.
const OpTimeEntry *optable_find(const OpTable *t, const char *op, int b, int s, int tp);

#endif
