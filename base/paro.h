// PaRO sharding codes (docs/paro.md): per stage, the scope of each training
// state (weights W, gradients G, optimizer state O) is N (replicated on every
// dp rank), I (sharded inside a group of g consecutive dp ranks, replicated
// across the dp/g groups) or G (sharded over all dp ranks). A stage's scopes
// are one code, StagePlan.zero: codes 0..3 are exactly ZeRO 0..3 and 4..9
// the points with an I scope. Only the orderings scope(W) <= scope(G) <=
// scope(O) (N < I < G) are codes: a state is never sharded more narrowly than
// the states derived from it (the step of an O shard needs its G and W
// elements), which leaves C(3 + 2, 3) = 10 triples.
#ifndef MIST_PARO_H
#define MIST_PARO_H

#include "base/plan.h"

enum { SCOPE_N = 0, SCOPE_I = 1, SCOPE_G = 2 };
enum { STATE_W = 0, STATE_G = 1, STATE_O = 2 };
#define SHARD_CODES 10
#define SHARD_ZERO_CODES 4  // codes 0..3: ZeRO 0..3 (no I scope)

// The one table: code, letters W G O. Names, parsing, scopes all come from it.
#define SHARD_CODE_TABLE(X) \
    X(0, "NNN") X(1, "NNG") X(2, "NGG") X(3, "GGG") X(4, "NNI") X(5, "NII") X(6, "NIG") X(7, "III") X(8, "IIG") X(9, "IGG")

// "NNN", ..., NULL (the [stage.N] shard key's names, by code)
extern const char *const shard_code_names[SHARD_CODES + 1];

// The letter scope (SCOPE_*) of state (STATE_*) in code; SCOPE_N for a code out of range.
// (inline: the search evaluates it for every candidate row)
static inline int shard_code_scope(int code, int state) {
#define SHARD_LETTERS(c, s) s,
    static const char letters[SHARD_CODES][4] = {SHARD_CODE_TABLE(SHARD_LETTERS)};
#undef SHARD_LETTERS
    if (code < 0 || code >= SHARD_CODES || state < 0 || state > 2) return SCOPE_N;
    char c = letters[code][state];
    return c == 'G' ? SCOPE_G : c == 'I' ? SCOPE_I : SCOPE_N;
}
// 1 when the code has an I scope (codes >= SHARD_ZERO_CODES)
int shard_code_has_i(int code);
// The code of the scopes (w, g, o), or -1 when they are not an ordering of the table.
int shard_code_of(int w, int g, int o);

// g of a stage: shard_group, or 0 = the dp ranks of one node, gpus_per_node / tp
// (at least 1); at most dp, and 1 (an I scope is then N) where it does not divide
// dp: the groups tile the dp ranks. (The stage model computes the same rule.)
int shard_group_size(const StagePlan *sp, int gpus_per_node);
// The code a stage runs: its I scopes become G when the group holds every dp
// rank (g >= dp) and N when a group is one rank (g <= 1), where the two are the
// same layout; otherwise the code itself.
int shard_code_effective(int code, int g, int dp);

#endif
