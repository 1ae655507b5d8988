// Checkpoints that do not depend on the parallel layout: every tensor is
// stored whole (global shape), so a run can resume under another plan (other
// dp/tp/pp sizes, other ZeRO sharding) by reading just the slices it owns.
//
// File layout (little-endian; docs/checkpoint-format.md has the byte-level table):
//   [header 64 B] [array 0, 64-byte aligned] [array 1] ... [index: one 224-byte entry per array]
//   header: magic "MISTCKPT", version, step, entry count, index offset, file size,
//           CRC32C of the index, CRC32C of everything after the header, CRC32C of the header
//   entry:  name, kind (tensor/blob), dtype, shape, offset, bytes, CRC32C of the bytes
// Together the header CRC and the body CRC cover every byte of the file.
//
// Writing is atomic: DIR/step_00000100.ckpt.tmp is written, fsynced, renamed to
// DIR/step_00000100.ckpt, the directory fsynced; then DIR/latest (one line, the
// file name of the newest checkpoint) is replaced the same way. A crash at any
// point leaves `latest` naming a complete checkpoint. Only one process (rank 0)
// writes a checkpoint directory.
#ifndef MIST_CHECKPOINT_H
#define MIST_CHECKPOINT_H
#include <stddef.h>
#include <stdint.h>
#include "base/dtype.h"
#include "base/schema.h"

#define CKPT_MAGIC "MISTCKPT"
#define CKPT_VERSION 1
#define CKPT_HEADER_BYTES 64
#define CKPT_ENTRY_BYTES 224
#define CKPT_NAME_MAX 128   // including the terminating NUL
#define CKPT_MAX_DIMS 8
#define CKPT_ALIGN 64

// ---- writing (rank 0) ----
typedef struct CkptWriter CkptWriter;
// Creates DIR (and parents) and DIR/step_%08d.ckpt.tmp. NULL with err filled on failure.
CkptWriter *ckpt_writer_open(const char *dir, int64_t step, char *err, size_t errlen);
// Append a whole global tensor (ndim 0..8, row-major) or an opaque blob (RNG
// state, loader position). 0 ok, -1 on error; errors are sticky: later writes
// do nothing and ckpt_writer_commit reports the first one.
int ckpt_write_tensor(CkptWriter *w, const char *name, MistDtype dtype, int ndim,
                      const int64_t *shape, const void *data);
int ckpt_write_blob(CkptWriter *w, const char *name, const void *data, size_t bytes);
const char *ckpt_writer_error(const CkptWriter *w);  // "" while no error
// Write the index and header, fsync, rename into place, update `latest`, then
// delete all but the newest `keep` checkpoints (keep <= 0 keeps all; the one
// just written is never deleted) and leftover *.ckpt.tmp files. Frees w.
int ckpt_writer_commit(CkptWriter *w, int keep, char *err, size_t errlen);
void ckpt_writer_abort(CkptWriter *w);  // remove the .tmp file, free w

// The checkpoint DIR/latest names (or, if `latest` is missing, the highest
// step_*.ckpt). 1 found (path filled), 0 none, -1 error (printed to stderr).
int ckpt_find_latest(const char *dir, char *path, size_t len);
// Same, with the error message returned instead of printed.
int ckpt_find_latest_err(const char *dir, char *path, size_t len, char *err, size_t errlen);

// ---- reading (any rank) ----
typedef struct CkptReader CkptReader;
// Validates the header, the index and every checksum (reads the file once).
// NULL with err filled: not a checkpoint, wrong version, truncated, corrupted
// (names the tensor whose checksum fails).
CkptReader *ckpt_reader_open(const char *path, char *err, size_t errlen);
int64_t ckpt_reader_step(const CkptReader *r);
int ckpt_reader_count(const CkptReader *r);             // arrays stored
const char *ckpt_reader_name(const CkptReader *r, int i);  // name of array i (write order)
// Stored dtype and shape of tensor NAME. 0 ok, -1 if it is missing or a blob.
int ckpt_tensor_info(const CkptReader *r, const char *name, MistDtype *dtype, int *ndim, int64_t *shape);
// 0 when tensor NAME exists with exactly this shape; -1 with err (missing, or
// the stored vs expected shape and a hint) otherwise.
int ckpt_reader_expect(const CkptReader *r, const char *name, int ndim, const int64_t *shape,
                       char *err, size_t errlen);
// Elements [offset, offset+count) of the flattened tensor, converted to dtype
// (f32/bf16/f16 convert among each other; i32 and u8 must match).
int ckpt_read_tensor(CkptReader *r, const char *name, MistDtype dtype, int64_t offset, int64_t count,
                     void *out, char *err, size_t errlen);
// A blob of exactly `bytes` bytes (a size mismatch is an error).
int ckpt_read_blob(CkptReader *r, const char *name, void *out, size_t bytes, char *err, size_t errlen);
int64_t ckpt_blob_bytes(const CkptReader *r, const char *name);  // -1 if missing
void ckpt_reader_close(CkptReader *r);

// ---- the training state (what mist-train saves and resumes) ----
// Names in the file: "param/NAME", "adam_m/NAME", "adam_v/NAME" (f32, the full
// global shape) for every model tensor, and 8-byte blobs "state/step",
// "state/adam_t", "state/data_position", "state/skipped", "state/nonfinite",
// "state/model_hash", plus "state/model" (the text of ckpt_model_describe) and
// "state/rng" (the RNG state, opaque bytes). A reader under another plan reads
// just its slice of each tensor with ckpt_read_tensor(offset, count).
//
// Typical use in the training loop (Runtime I: rank 0 saves, every rank may load):
//   CkptTensor t[n] = {{.name = "wte", .ndim = 2, .shape = {V, h}, .param = w, .adam_m = m, .adam_v = v}, ...};
//   CkptState st = {0};
//   int found = checkpoint_load_latest(cfg->checkpoint.dir, &cfg->model, &st, t, n, path, sizeof path, err, sizeof err);
//   // found == 1: resume at iteration st.step; 0: start fresh; -1: print err, exit 1
//   ... after iteration it (0-based) when (it + 1) % interval == 0 or it + 1 == steps:
//   st.step = it + 1; st.data_position = dataloader_position(dl, it + 1); ...
//   if (rank == 0) checkpoint_save(cfg->checkpoint.dir, cfg->checkpoint.keep, &cfg->model, &st, t, n, err, sizeof err);

#define CKPT_RNG_MAX 256
// the most iterations a checkpoint may record (the optimizer counts its steps in an int)
#define CKPT_MAX_STEP ((int64_t)INT32_MAX - 1)

typedef struct CkptTensor {
    const char *name;              // global tensor name, e.g. "block.3.qkv_w" (at most 120 characters)
    int ndim;
    int64_t shape[CKPT_MAX_DIMS];  // full (unsharded) shape
    float *param;                  // (numel) fp32 master weights
    float *adam_m, *adam_v;        // (numel) Adam moments; NULL = not stored / not loaded
} CkptTensor;

typedef struct {
    int64_t step;           // iterations completed; the run resumes at iteration `step`
    int64_t adam_t;         // optimizer steps taken (bias correction); differs from step after skipped steps
    int64_t data_position;  // global samples consumed (dataloader_position(dl, step))
    int64_t skipped, nonfinite;  // counters of the log line
    uint64_t model_hash;    // ckpt_model_hash of the model that wrote it
    size_t rng_bytes;       // bytes of rng used (0..CKPT_RNG_MAX)
    unsigned char rng[CKPT_RNG_MAX];
} CkptState;

// One line naming every field that fixes tensor shapes ("family=gpt layers=2
// hidden=64 ..."), and its 64-bit FNV-1a hash. Training knobs (lr, batch) are
// not part of it: a run may resume with other ones.
void ckpt_model_describe(const ModelConfig *m, char *buf, size_t len);
uint64_t ckpt_model_hash(const ModelConfig *m);

// Rank 0: write state + tensors as DIR/step_<state->step>.ckpt atomically, point
// `latest` at it and keep the newest `keep` (<= 0: all). 0, or -1 with err;
// on failure no new checkpoint or .tmp file is left and `latest` is unchanged.
// `model` is described into "state/model" (state->model_hash is set from it).
int checkpoint_save(const char *dir, int keep, const ModelConfig *model, const CkptState *state,
                    const CkptTensor *tensors, int n, char *err, size_t errlen);
// Load PATH into state and the given tensors (each must be stored with exactly
// its shape; adam_m/adam_v are filled when non-NULL). Fails with a clear error
// on a model mismatch (both descriptions shown), a missing tensor, a corrupted
// or truncated file. 0, or -1 with err (the tensors may then be partly
// overwritten; state is only written on success).
int checkpoint_load(const char *path, const ModelConfig *model, CkptState *state,
                    const CkptTensor *tensors, int n, char *err, size_t errlen);
// checkpoint_load of the checkpoint `latest` in DIR names (see ckpt_find_latest).
// 1 loaded (path filled when non-NULL), 0 no checkpoint in DIR (nothing
// changed), -1 error.
int checkpoint_load_latest(const char *dir, const ModelConfig *model, CkptState *state,
                           const CkptTensor *tensors, int n, char *path, size_t pathlen, char *err, size_t errlen);

#endif
