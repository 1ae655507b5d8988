// A measured per-op latency table: when the cost model finds an op of the
// model description here (same op name, micro-batch b, sequence s, TP degree),
// it uses the measured forward/backward seconds instead of the roofline.
//
// File format (text, one entry per line, '#' starts a comment):
//   mist-optable 1
//   # op          b     s     tp   fwd_us     bwd_us
//   qkv           1     2048  1    986        1937
// op is an op name of the cost model's op list (listed in docs/plan-analyze.md,
// "Measured op table"); times are microseconds, per TP rank.
#ifndef MIST_OPTABLE_H
#define MIST_OPTABLE_H

#include <stddef.h>

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
