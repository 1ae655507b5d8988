// The safetensors container (Hugging Face): the format the GPT-2 and Llama
// loaders of `transformers` read.
//
//   [u64 N, little-endian] [N bytes of JSON header, space padded] [data buffer]
//   header: {"__metadata__": {"format": "pt"},
//            "NAME": {"dtype": "F32", "shape": [768, 2304], "data_offsets": [BEGIN, END]}, ...}
//   BEGIN/END are byte offsets into the data buffer (after the header); the
//   tensors tile the buffer in order, without holes or overlaps.
//
// The writer streams: the header is written first from the declared names,
// dtypes and shapes, then each tensor's elements are appended in order, so
// memory is bounded by whatever the caller holds (one tensor at a time).
// The reader validates the header up front and serves element ranges of a
// tensor converted to fp32 (F32, BF16, F16 are converted; other dtypes are an
// error naming the tensor and its dtype).
#ifndef MIST_SAFETENSORS_H
#define MIST_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>
#include "base/dtype.h"

#define ST_NAME_MAX 128
#define ST_MAX_DIMS 8

typedef struct {
    char name[ST_NAME_MAX];
    char dtype[12];        // as stored: "F32", "BF16", "F16", "I64", ...
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;   // byte range in the data buffer
} StTensor;

// ---- writing ----
typedef struct StWriter StWriter;
// Writes PATH.tmp with the header of these n tensors (dtype of each: MIST_F32
// or MIST_BF16; name, ndim, shape filled). NULL with err on failure.
StWriter *st_writer_open(const char *path, const StTensor *tensors, const MistDtype *dtypes, int n, char *err,
                         size_t errlen);
// Appends count fp32 elements (converted to the current tensor's dtype); the
// tensors are filled in declaration order. 0, or -1 (sticky; reported by close).
int st_writer_append(StWriter *w, const float *data, size_t count);
// Checks every declared element was written, fsyncs and renames PATH.tmp to
// PATH. Frees w. 0, or -1 with err (PATH.tmp removed).
int st_writer_close(StWriter *w, char *err, size_t errlen);

// ---- reading ----
typedef struct StReader StReader;
// Reads and validates the header: its length against the file, the JSON, each
// tensor's dtype, shape and offsets (inside the buffer, sizes matching).
StReader *st_reader_open(const char *path, char *err, size_t errlen);
int st_reader_count(const StReader *r);
const StTensor *st_reader_tensor(const StReader *r, int i);
const StTensor *st_reader_find(const StReader *r, const char *name);  // NULL if absent
// Elements [offset, offset + count) of the flattened tensor as fp32. 0, or -1
// with err (a dtype that does not convert, a read error).
int st_read_f32(StReader *r, const StTensor *t, int64_t offset, int64_t count, float *out, char *err,
                size_t errlen);
void st_reader_close(StReader *r);

int64_t st_numel(const StTensor *t);
// "[768, 2304]"
void st_shape_text(int ndim, const int64_t *shape, char *buf, size_t len);

#endif
