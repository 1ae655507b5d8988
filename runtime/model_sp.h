// Sequence parallelism (Megatron, Korthikanti et al. 2022, section 4.2.2):
// the parts of a block outside its tensor-parallel matmuls (norms, residual
// adds) run on Ns = N/tp of the N = b*T rows on each tp rank, rows
// [t*Ns, (t+1)*Ns) on tp rank t. The collectives of a tensor-parallel region
// change from one all-reduce to an all-gather before it (the column-parallel
// matmul's input) and a reduce-scatter after it (the row-parallel matmul's
// partial sums), in backward the other way round; docs/tensor-parallel.md
// has the math, the bytes and the memory.
//
// What stays as without sp: the pipeline boundary tensors and the head. The
// last block writes its rows of the stage output x_out (N,C) and x_out is
// all-gathered in place, so the final norm, the LM head and a boundary send
// see the whole replicated tensor; in backward d_res is an (N,C) buffer whose
// own rows the blocks work on, all-gathered in place before the embedding's
// backward or the boundary send. The embedding's vocabulary-parallel partial
// sums are reduce-scattered straight into block 0's input.
#ifndef MIST_MODEL_SP_H
#define MIST_MODEL_SP_H
#include "runtime/model_runtime.h"

// Rows of the sequence-sharded tensors on this rank: N/tp under sp, else N.
static inline int mr_sp_rows(const ModelRuntime *r) { return r->sp ? r->B * r->T / r->tp : r->B * r->T; }
// This rank's rows of an (N,C) tensor in the storage dtype (the tensor itself without sp).
static inline void *mr_sp_own(const ModelRuntime *r, void *full) {
    return (char *)full + (r->sp ? (size_t)r->tp_rank * mr_sp_rows(r) * r->C * r->x : 0);
}

// own (Ns,C) -> full (N,C) over the tp group (own may be full's own rows: in place)
void mr_sp_gather(ModelRuntime *r, const void *own, void *full);
// full (N,C) partial sums -> own (Ns,C) summed over the tp group (own may be full's own rows)
void mr_sp_scatter(ModelRuntime *r, const void *full, void *own);

// Block l's forward up to the MLP activation, from its input rows xin (Ns,C).
void mr_sp_block_forward_to_act(ModelRuntime *r, int l, BlockActs *a, const void *xin);
// Its output rows xout (Ns,C) (scratch and ln_full are taken).
void mr_sp_block_forward_output(ModelRuntime *r, int l, BlockActs *a, const void *xin, void *xout);
// Backward of block l: the own rows of d_res hold dL/dx_{l+1} on entry,
// dL/dx_l on return; ln_full and the gradient buffers are taken.
void mr_sp_block_backward(ModelRuntime *r, int l, BlockActs *a, const void *xin);
// The first stage's embedding into block 0's input rows x0 (Ns,C) through the scratch.
void mr_sp_embedding_forward(ModelRuntime *r, int slot, void *x0);

#endif
