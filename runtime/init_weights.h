// [init] from = FILE: the initial weights of a run, read from a safetensors
// file with Hugging Face GPT-2 / Llama names (runtime/hf_names.h), or from an
// llm.c GPT-2 checkpoint (gpt2_124M.bin: 256 int32 header, magic 20240326,
// version 3 fp32 or 5 bf16 with the padded vocabulary in header[7], version 1
// fp32 unpadded; then wte, wpe, and the per-layer tensors stacked over
// layers, in llm.c's order). Every rank reads the tensors of its stage whole
// and keeps its shard, as a checkpoint resume does, so any plan loads any file.
#ifndef MIST_INIT_WEIGHTS_H
#define MIST_INIT_WEIGHTS_H
#include <stddef.h>
#include "runtime/model_runtime.h"

#define LLMC_MODEL_MAGIC 20240326

// Fills `global` (r->Pglobal floats: the stage's whole tensors, tensor k at
// r->tensors[k].goffset; padded vocabulary rows left untouched) from PATH.
// Every missing tensor and shape mismatch is named in err, key by key.
// 0, or -1 with err.
int init_weights_read(const ModelRuntime *r, const char *path, float *global, char *err, size_t errlen);
// init_weights_read, then this rank's tp and dp shards into the weights
// (after mr_init_params; optimizer state stays zero). 0, or -1 with err.
int init_weights_apply(ModelRuntime *r, const char *path, char *err, size_t errlen);

#endif
