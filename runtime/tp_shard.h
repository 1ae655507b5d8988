// Which part of a global parameter tensor a tensor-parallel rank holds
// (Megatron layout), and copies between the global tensor and that shard.
// Checkpoints store global tensors by name, so loading under any tp degree,
// and saving from one, goes through these copies.
//
// Column-parallel layers (ParamSpec.tp_split = 1) split output rows, row-
// parallel ones (tp_split = 2) split input columns, by whole heads or MLP
// units, so every rank computes complete heads:
//   qkv_w, qkv_b   rows [q: a*hd | k: kv*hd | v: kv*hd]; rank t holds the rows of
//                  q heads [t*a/tp, (t+1)*a/tp) and of kv heads [t*kv/tp, (t+1)*kv/tp)
//                  from each section, in the order q, k, v (needs tp | a and tp | kv)
//   fc_w, fc_b     GELU: rows [t*F/tp, (t+1)*F/tp); SwiGLU: rows [gate: F | up: F],
//                  the same F/tp units from each half, gate then up, so silu(gate)*up
//                  pairs stay on one rank
//   attn_proj_w    columns of the rank's q heads; fc_proj_w: columns of its MLP units
//   wte, lm_head_w vocabulary-parallel rows: ceil(V/tp) per rank, the last rank
//                  holds what is left (V need not divide)
// Everything else (norms, wpe, biases of row-parallel layers) is replicated.
#ifndef MIST_TP_SHARD_H
#define MIST_TP_SHARD_H

#include <stddef.h>
#include <stdint.h>
#include "models/model.h"

#define TP_SHARD_MAX_RANGES 3

typedef struct {
    int split;        // 0 replicated, 1 rows, 2 columns (ParamSpec.tp_split)
    int n;            // ranges of global rows (split 1) or columns (split 2), in shard order
    int64_t first[TP_SHARD_MAX_RANGES], count[TP_SHARD_MAX_RANGES];
    int64_t rows, cols;  // the shard's shape (cols = 1 for vectors)
} TpShard;

// The shard of parameter p (from model_params) on rank t of tp. 0, or 2 with
// err naming the tensor and the degree that does not divide it.
int tp_shard(const ModelConfig *m, const ParamSpec *p, int tp, int t, TpShard *out, char *err, size_t errlen);

// Index in the global tensor of element i of the shard (row-major in both):
// parameter init draws each element from its global index, so a model starts
// from the same weights under any tp.
int64_t tp_shard_global_index(const TpShard *s, const ParamSpec *p, int64_t i);

// global (p->rows x p->cols, row-major, elem bytes each) -> shard (rows x cols)
void tp_shard_extract(const TpShard *s, const ParamSpec *p, const void *global, void *shard, size_t elem);
// shard -> its place in global (the rest of global untouched)
void tp_shard_insert(const TpShard *s, const ParamSpec *p, const void *shard, void *global, size_t elem);

#endif
