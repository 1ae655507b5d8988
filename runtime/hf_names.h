// Names and layouts of mist's tensors in Hugging Face checkpoints
// (docs/weights.md has the full table).
//
// A mist tensor (its checkpoint name and global shape, linear weights (out, in))
// maps to one or more pieces, each a block of its rows stored under one HF
// name:
//   GPT family -> GPT-2 (`transformers` GPT2LMHeadModel): transformer.wte.weight,
//     transformer.h.N.attn.c_attn.weight, ... The GPT-2 linears are Conv1D
//     modules, whose weight is (in, out): the piece is stored transposed.
//   Llama family -> LlamaForCausalLM: model.embed_tokens.weight,
//     model.layers.N.self_attn.{q,k,v}_proj.weight (mist's qkv_w rows
//     [q heads | k heads | v heads] split in three), mlp.{gate,up}_proj.weight
//     (the SwiGLU fc_w rows [gate | up] split in two), ... Linear weights stay
//     (out, in); mist's rotary embedding rotates half-split pairs (x_i,
//     x_{i+hd/2}), the convention of HF's rotate_half, so q and k need no
//     permutation.
#ifndef MIST_HF_NAMES_H
#define MIST_HF_NAMES_H
#include <stddef.h>
#include <stdint.h>
#include "base/schema.h"
#include "runtime/safetensors.h"

#define HF_MAX_PIECES 3

typedef struct {
    char name[ST_NAME_MAX];
    int64_t row0, rows;  // rows [row0, row0 + rows) of the mist tensor
    int transpose;       // stored (cols, rows): a GPT-2 Conv1D weight
    int ndim;            // stored shape
    int64_t shape[2];
} HfPiece;

// The pieces of mist tensor NAME of global shape rows x cols (cols = 1: a
// vector). Returns their count (1..HF_MAX_PIECES), or -1 for a name mist
// does not know.
int hf_pieces(const ModelConfig *m, const char *name, int64_t rows, int64_t cols, HfPiece *out);

// What keeps Hugging Face's class for the family (GPT2LMHeadModel, LlamaForCausalLM)
// from running model m as mist does ("rotary positions, kv_heads 1 < heads 4"), or
// "" when nothing does. Such a model still exports and imports under these names.
void hf_incompatible(const ModelConfig *m, char *buf, size_t len);

#endif
