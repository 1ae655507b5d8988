// A measured per-op latency table: when the cost model finds an op of the
// model description here (same op name, micro-batch b, sequence s, TP degree),
// it uses the measured forward/backward seconds instead of the roofline.
//
// File format (text, one entry per line, '#' starts a comment):
//   mist-optable 1
//   # op          b     s     tp   fwd_us     bwd_us
//   qkv           1     2048  1    986        1937
// op is an op name of the cost model's op list (optable_op_names, listed in
// docs/plan-analyze.md, "Measured op table"); b, s, tp >= 1; times are
// microseconds per call, per TP rank, in (0, OPTABLE_MAX_US] (the backward of
// crossentropy and residual may be 0). Lines end in LF or CRLF and are at most
// OPTABLE_MAX_LINE characters.
#ifndef MIST_OPTABLE_H
#define MIST_OPTABLE_H

#include <stddef.h>

#define OPTABLE_MAX_LINE 511  // characters per line, without the line ending
#define OPTABLE_MAX_US 1e10   // longest time of one call (about 2.8 hours; more is a unit mistake)

// The op names an entry may have, NULL-terminated.
extern const char *const optable_op_names[];

typedef struct {
    char op[32];
    int b, s, tp;
    double fwd_seconds, bwd_seconds;
} OpTimeEntry;

typedef struct {
    int n, cap;
    OpTimeEntry *entry;  // (n)
} OpTable;

// Read a table; returns 0, or -1 with "file:line: message" in err.
int optable_load(OpTable *t, const char *path, char *err, size_t errlen);
void optable_free(OpTable *t);

// The entry for (op, b, s, tp), or NULL.
const OpTimeEntry *optable_find(const OpTable *t, const char *op, int b, int s, int tp);

#endif
