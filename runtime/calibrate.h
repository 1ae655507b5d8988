// Calibration: measured latencies of the model's ops on a backend (GEMMs,
// attention, norms, rotary, SwiGLU, and at tp = 1 the embedding and the
// cross-entropy; and the kernels a lean block runs instead: the GELU's forward
// with its branch bits and backward from its output, lean_gelu, and the norms'
// backward from their output, lean_ln1 and lean_ln2, whose forward is the plain
// norm's and is written as 0), written as the planner's op table (planner/optable.h) so that
// `mist-plan --op-table` predicts with this device's real kernel speeds
// instead of the cost model's estimates.
//
// A tensor-parallel rank of a Megatron layer runs the same kernels on a
// slice of the weights (qkv: ceil(heads/tp) query and ceil(kv/tp) kv heads;
// fc: ffn/tp columns; attn_proj, fc_proj: the matching input rows; lm_head:
// ceil(V/tp) rows), so every tp degree is measured on one device. The
// collectives of tp are not part of an op's time (the cost model adds them).
#ifndef MIST_CALIBRATE_H
#define MIST_CALIBRATE_H

#include <stddef.h>
#include "kernels/backend.h"
#include "models/model.h"

typedef struct {
    const char *op;  // planner op name (qkv attention attn_proj fc fc_proj lm_head ln1 ln2 lnf rotary
                     // swiglu embedding crossentropy, and lean_gelu lean_ln1 lean_ln2: a lean block's kernels)
    int b, s, tp;
    double fwd_us, bwd_us;  // per call, microseconds
} CalibEntry;

#define CALIB_OPS 16  // op kinds; a model has those of its architecture
#define CALIB_FUSED 3  // ops the runtime fuses into a measured one (calibrate_add_fused)

// Times each op of the model at every (b, tp) pair (s = the model's seq_len): `warmup`
// untimed calls, then the mean of `iters` timed ones, forward and backward
// separately. Writes up to `max` entries to out; returns how many, or -1
// with a message in err (out of device memory, bad shape).
int calibrate_ops(Backend *be, const ModelConfig *m, const int *bs, int nb, const int *tps, int ntp, int warmup,
                  int iters, CalibEntry *out, int max, char *err, size_t errlen);

// Appends, for each entry of e[0..n) whose kernel also runs a fused op (fc
// GELU's epilogue, ln2 the attention residual, embedding the position rows),
// that op's entry at 0 (its time is in the measured one); up to max entries,
// returns the new count.
int calibrate_add_fused(const ModelConfig *m, CalibEntry *e, int n, int max);

// Writes the entries as an op table ("mist-optable 1"), with a comment line
// naming the device, to path (atomically) or, path NULL, to standard output;
// returns 0 or -1 with err.
int calibrate_write(const char *path, const char *device, const CalibEntry *e, int n, char *err, size_t errlen);

// mist-calibrate's measurement: on this machine's first GPU (bf16), or on the
// CPU backend in cpu_dtype when there is none or with MIST_DEVICE=cpu, every op
// of the model at every (b, tp) pair (2 warm-up calls, then `iters`), written
// with calibrate_write to path (NULL: standard output). Returns the entries
// written, with where they were measured in device ("cuda:0", "the cpu backend
// (fp32)"), or -1 with err.
int calibrate_run(const ModelConfig *m, MistDtype cpu_dtype, const int *bs, int nb, const int *tps, int ntp, int iters,
                  const char *path, char *device, size_t devlen, char *err, size_t errlen);

#endif
