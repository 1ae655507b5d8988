// Checkpoint reader: validates the whole file up front (header, index, every
// checksum), then serves slices of tensors with dtype conversion.
#define _FILE_OFFSET_BITS 64
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime/checkpoint.h"
#include "runtime/checkpoint_format.h"
#include "runtime/checksum.h"

#define OLDER_HINT "hint: restore the file from a copy, or delete it (and `latest`) to resume from an older checkpoint in the same directory"

struct CkptReader {
    int fd;
    char path[1024];
    CkptHeader h;
    CkptEntry *entries;  // (count), in file order
    int count;
};

void ckpt_reader_close(CkptReader *r) {
    if (!r) return;
    if (r->fd >= 0) close(r->fd);
    free(r->entries);
    free(r);
}

static int read_at(int fd, void *buf, size_t bytes, uint64_t offset) {
    size_t done = 0;
    while (done < bytes) {
        ssize_t n = pread(fd, (char *)buf + done, bytes - done, (off_t)(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        done += (size_t)n;
    }
    return 0;
}

static const char *dtype_label(uint32_t d) { return mist_dtype_name((MistDtype)d); }

// Check each entry is self-consistent and inside the data region.
static int check_entries(const CkptReader *r, char *err, size_t errlen) {
    for (int i = 0; i < r->count; i++) {
        const CkptEntry *e = &r->entries[i];
        if (memchr(e->name, '\0', CKPT_NAME_MAX) == NULL || e->kind > CKPT_KIND_BLOB || e->dtype > MIST_U8 ||
            e->ndim > CKPT_MAX_DIMS || e->offset < CKPT_HEADER_BYTES || e->offset > r->h.index_offset ||
            e->bytes > r->h.index_offset - e->offset) {
            snprintf(err, errlen, "checkpoint '%s': index entry %d is malformed (bad name, kind, dtype, rank or "
                     "range) although the index checksum matched; the file was not written by a compatible mist", r->path, i);
            return -1;
        }
        // dimensions >= 0 and a product that does not wrap around: (-2, -2) or (2^62, 4)
        // would otherwise pass for 4 or 0 elements
        uint64_t numel = 1, bytes = 0;
        int wraps = 0;
        for (uint32_t d = 0; d < e->ndim; d++)
            wraps |= e->shape[d] < 0 || __builtin_mul_overflow(numel, (uint64_t)e->shape[d], &numel);
        wraps |= __builtin_mul_overflow(numel, (uint64_t)mist_dtype_size((MistDtype)e->dtype), &bytes);
        if (e->kind == CKPT_KIND_TENSOR && (wraps || bytes != e->bytes)) {
            snprintf(err, errlen, "checkpoint '%s': tensor '%s' has %llu bytes, which does not match its shape and "
                     "dtype; the file was not written by a compatible mist", r->path, e->name, (unsigned long long)e->bytes);
            return -1;
        }
        for (int j = 0; j < i; j++)
            if (strcmp(r->entries[j].name, e->name) == 0) {
                snprintf(err, errlen, "checkpoint '%s': the name '%s' appears twice in the index", r->path, e->name);
                return -1;
            }
    }
    return 0;
}

// Stream the body once: every entry's CRC (naming the first bad tensor), then the body CRC.
static int check_data(const CkptReader *r, char *err, size_t errlen) {
    enum { CHUNK = 4 << 20 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf) { snprintf(err, errlen, "out of host memory"); return -1; }
    uint32_t body = 0;
    uint64_t pos = CKPT_HEADER_BYTES;
    int rc = 0;
    for (int i = 0; i <= r->count && rc == 0; i++) {
        // the region up to entry i (padding), then entry i; after the last entry, the rest (padding + index)
        uint64_t start = i < r->count ? r->entries[i].offset : r->h.file_bytes;
        if (start < pos) {
            snprintf(err, errlen, "checkpoint '%s': arrays overlap in the index; the file was not written by a compatible mist", r->path);
            rc = -1;
            break;
        }
        uint64_t end = i < r->count ? start + r->entries[i].bytes : start;
        uint32_t crc = 0;
        for (uint64_t p = pos; p < end && rc == 0;) {
            size_t n = end - p < CHUNK ? (size_t)(end - p) : CHUNK;
            if (read_at(r->fd, buf, n, p) != 0) {
                snprintf(err, errlen, "cannot read checkpoint '%s' at byte %llu: %s", r->path, (unsigned long long)p, strerror(errno));
                rc = -1;
                break;
            }
            body = crc32c_update(body, buf, n);
            if (p >= start) crc = crc32c_update(crc, buf, n);
            else if (p + n > start)  // the chunk straddles the padding/data boundary
                crc = crc32c_update(crc, buf + (start - p), (size_t)(p + n - start));
            p += n;
        }
        if (rc == 0 && i < r->count && crc != r->entries[i].crc) {
            const CkptEntry *e = &r->entries[i];
            snprintf(err, errlen, "checkpoint '%s' is corrupted: %s '%s' (%s, %llu bytes at offset %llu) fails its "
                     "CRC32C check (stored %08x, computed %08x); %s", r->path, e->kind == CKPT_KIND_BLOB ? "blob" : "tensor",
                     e->name, dtype_label(e->dtype), (unsigned long long)e->bytes, (unsigned long long)e->offset,
                     e->crc, crc, OLDER_HINT);
            rc = -1;
        }
        pos = end;
    }
    if (rc == 0 && body != r->h.body_crc) {
        snprintf(err, errlen, "checkpoint '%s' is corrupted outside the arrays (padding between them fails the file "
                 "CRC32C: stored %08x, computed %08x); %s", r->path, r->h.body_crc, body, OLDER_HINT);
        rc = -1;
    }
    free(buf);
    return rc;
}

CkptReader *ckpt_reader_open(const char *path, char *err, size_t errlen) {
    CkptReader *r = calloc(1, sizeof *r);
    if (!r) { snprintf(err, errlen, "out of host memory"); return NULL; }
    snprintf(r->path, sizeof r->path, "%s", path);
    r->fd = open(path, O_RDONLY);
    struct stat st;
    if (r->fd < 0 || fstat(r->fd, &st) != 0) {
        snprintf(err, errlen, "cannot open checkpoint '%s': %s (hint: check [checkpoint] dir and the `latest` file in it)",
                 path, strerror(errno));
        ckpt_reader_close(r);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {  // a directory reads as a 4096-byte "file" on most file systems
        snprintf(err, errlen, "checkpoint '%s' is %s, not a checkpoint file (hint: `latest` and the step_*.ckpt names "
                 "in [checkpoint] dir must be files; move the %s away)", path,
                 S_ISDIR(st.st_mode) ? "a directory" : "not a regular file", S_ISDIR(st.st_mode) ? "directory" : "entry");
        ckpt_reader_close(r);
        return NULL;
    }
    uint64_t size = (uint64_t)st.st_size;
    unsigned char hb[CKPT_HEADER_BYTES];
    if (size < CKPT_HEADER_BYTES || read_at(r->fd, hb, sizeof hb, 0) != 0) {
        snprintf(err, errlen, "checkpoint '%s' is truncated: %llu bytes, smaller than the %d-byte header; %s",
                 path, (unsigned long long)size, CKPT_HEADER_BYTES, OLDER_HINT);
        ckpt_reader_close(r);
        return NULL;
    }
    if (memcmp(hb, CKPT_MAGIC, 8) != 0) {
        snprintf(err, errlen, "'%s' is not a mist checkpoint: its first 8 bytes are not \"%s\" (hint: point [checkpoint] "
                 "dir at a directory written by mist-train; llm.c and PyTorch checkpoints are not read)", path, CKPT_MAGIC);
        ckpt_reader_close(r);
        return NULL;
    }
    ckpt_header_decode(hb, &r->h);
    uint32_t header_bytes;
    memcpy(&header_bytes, hb + 12, 4);
    if (r->h.version != CKPT_VERSION || header_bytes != CKPT_HEADER_BYTES) {
        snprintf(err, errlen, "checkpoint '%s' has format version %u (header %u bytes); this mist reads version %d "
                 "(hint: load it with the mist release that wrote it)", path, r->h.version, header_bytes, CKPT_VERSION);
        ckpt_reader_close(r);
        return NULL;
    }
    if (crc32c(hb, 60) != r->h.header_crc) {
        snprintf(err, errlen, "checkpoint '%s' is corrupted: its header fails the CRC32C check; %s", path, OLDER_HINT);
        ckpt_reader_close(r);
        return NULL;
    }
    if (size != r->h.file_bytes) {
        snprintf(err, errlen, "checkpoint '%s' is %s: the header says %llu bytes, the file has %llu; %s", path,
                 size < r->h.file_bytes ? "truncated (an interrupted copy or a full disk?)" : "longer than written",
                 (unsigned long long)r->h.file_bytes, (unsigned long long)size, OLDER_HINT);
        ckpt_reader_close(r);
        return NULL;
    }
    if (r->h.count > (1u << 24) || r->h.index_offset < CKPT_HEADER_BYTES ||
        r->h.index_offset + r->h.count * CKPT_ENTRY_BYTES != r->h.file_bytes) {
        snprintf(err, errlen, "checkpoint '%s': the header's index position does not match the file size; %s", path, OLDER_HINT);
        ckpt_reader_close(r);
        return NULL;
    }
    r->count = (int)r->h.count;
    size_t index_bytes = (size_t)r->count * CKPT_ENTRY_BYTES;
    unsigned char *index = malloc(index_bytes + 1);
    r->entries = calloc((size_t)r->count + 1, sizeof *r->entries);
    if (!index || !r->entries || read_at(r->fd, index, index_bytes, r->h.index_offset) != 0) {
        snprintf(err, errlen, "cannot read the index of checkpoint '%s': %s", path, index ? strerror(errno) : "out of host memory");
        free(index);
        ckpt_reader_close(r);
        return NULL;
    }
    if (crc32c(index, index_bytes) != r->h.index_crc) {
        snprintf(err, errlen, "checkpoint '%s' is corrupted: its index (the table of tensor names and offsets) fails "
                 "the CRC32C check; %s", path, OLDER_HINT);
        free(index);
        ckpt_reader_close(r);
        return NULL;
    }
    for (int i = 0; i < r->count; i++) ckpt_entry_decode(index + (size_t)i * CKPT_ENTRY_BYTES, &r->entries[i]);
    free(index);
    if (check_entries(r, err, errlen) != 0 || check_data(r, err, errlen) != 0) {
        ckpt_reader_close(r);
        return NULL;
    }
    return r;
}

int64_t ckpt_reader_step(const CkptReader *r) { return r->h.step; }
int ckpt_reader_count(const CkptReader *r) { return r->count; }
const char *ckpt_reader_name(const CkptReader *r, int i) { return i >= 0 && i < r->count ? r->entries[i].name : NULL; }

static const CkptEntry *find(const CkptReader *r, const char *name) {
    for (int i = 0; i < r->count; i++)
        if (strcmp(r->entries[i].name, name) == 0) return &r->entries[i];
    return NULL;
}

static void shape_text(int ndim, const int64_t *shape, char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, "(");
    for (int d = 0; d < ndim && n < len; d++) n += (size_t)snprintf(buf + n, len - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < len) snprintf(buf + n, len - n, ")");
}

static int missing(const CkptReader *r, const char *name, const char *what, char *err, size_t errlen) {
    snprintf(err, errlen, "checkpoint '%s' has no %s '%s' (it holds %d arrays%s%s%s) (hint: it was written for a "
             "different model or by a different mist version; check the [model] section matches the run that wrote it)",
             r->path, what, name, r->count, r->count ? ", the first is '" : "", r->count ? r->entries[0].name : "",
             r->count ? "'" : "");
    return -1;
}

int ckpt_tensor_info(const CkptReader *r, const char *name, MistDtype *dtype, int *ndim, int64_t *shape) {
    const CkptEntry *e = find(r, name);
    if (!e || e->kind != CKPT_KIND_TENSOR) return -1;
    if (dtype) *dtype = (MistDtype)e->dtype;
    if (ndim) *ndim = (int)e->ndim;
    if (shape) for (uint32_t d = 0; d < e->ndim; d++) shape[d] = e->shape[d];
    return 0;
}

int ckpt_reader_expect(const CkptReader *r, const char *name, int ndim, const int64_t *shape, char *err, size_t errlen) {
    const CkptEntry *e = find(r, name);
    if (!e || e->kind != CKPT_KIND_TENSOR) return missing(r, name, "tensor", err, errlen);
    int same = (int)e->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = e->shape[d] == shape[d];
    if (same) return 0;
    char stored[256], want[256];
    shape_text((int)e->ndim, e->shape, stored, sizeof stored);
    shape_text(ndim, shape, want, sizeof want);
    snprintf(err, errlen, "checkpoint '%s': tensor '%s' has shape %s but the model expects %s (hint: the checkpoint "
             "was written for a different model; resume with the same [model] section, e.g. layers/hidden/vocab)",
             r->path, name, stored, want);
    return -1;
}

// ---- dtype conversion ----

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) u = sign | 0x7f800000u | (man << 13);            // inf / nan
    else if (exp != 0) u = sign | ((exp + 112) << 23) | (man << 13);  // normal: rebias 15 -> 127
    else if (man == 0) u = sign;                                      // zero
    else {                                                            // subnormal: normalize
        int e = -1;
        do { e++; man <<= 1; } while (!(man & 0x400));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// round to nearest even, overflow to inf, gradual underflow
static uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00;         // nan
    if (a >= 0x477ff000u) return sign | 0x7c00;        // >= 65520 rounds to inf
    if (a >= 0x38800000u) {                             // normal half
        uint32_t r = a - 0x38000000u;                   // rebias 127 -> 15 (in place, exponent field)
        r += 0xfffu + ((r >> 13) & 1u);
        return sign | (uint16_t)(r >> 13);
    }
    if (a < 0x33000000u) return sign;                   // < 2^-25 rounds to zero
    uint32_t e = a >> 23, man = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;                           // 14..24: subnormal half = man >> (shift)
    uint32_t half = man >> shift, rest = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1u))) half++;
    return sign | (uint16_t)half;
}

static float load_f32(MistDtype t, const unsigned char *p) {
    if (t == MIST_F32) { float f; memcpy(&f, p, 4); return f; }
    uint16_t h;
    memcpy(&h, p, 2);
    return t == MIST_BF16 ? mist_bf16_to_f32(h) : f16_to_f32(h);
}

static void store_f32(MistDtype t, float f, unsigned char *p) {
    if (t == MIST_F32) { memcpy(p, &f, 4); return; }
    uint16_t h = t == MIST_BF16 ? mist_f32_to_bf16(f) : f32_to_f16(f);
    memcpy(p, &h, 2);
}

static int is_float(uint32_t t) { return t == MIST_F32 || t == MIST_BF16 || t == MIST_F16; }

int ckpt_read_tensor(CkptReader *r, const char *name, MistDtype dtype, int64_t offset, int64_t count,
                     void *out, char *err, size_t errlen) {
    const CkptEntry *e = find(r, name);
    if (!e || e->kind != CKPT_KIND_TENSOR) return missing(r, name, "tensor", err, errlen);
    size_t src_size = mist_dtype_size((MistDtype)e->dtype), dst_size = mist_dtype_size(dtype);
    int64_t numel = (int64_t)(e->bytes / src_size);
    if (offset < 0 || count < 0 || offset > numel || count > numel - offset) {
        snprintf(err, errlen, "checkpoint '%s': slice [%lld, %lld) of tensor '%s' is outside its %lld elements "
                 "(hint: the model or plan expects a larger tensor; check the [model] section matches the checkpoint)",
                 r->path, (long long)offset, (long long)(offset + count), name, (long long)numel);
        return -1;
    }
    uint64_t at = e->offset + (uint64_t)offset * src_size;
    if ((uint32_t)dtype == e->dtype) {
        if (read_at(r->fd, out, (size_t)count * src_size, at) != 0) goto io_error;
        return 0;
    }
    if (!is_float(e->dtype) || !is_float((uint32_t)dtype)) {
        snprintf(err, errlen, "checkpoint '%s': tensor '%s' is stored as %s and cannot be read as %s (only f32, bf16 "
                 "and f16 convert into each other) (hint: the model expects a different tensor under this name)",
                 r->path, name, dtype_label(e->dtype), mist_dtype_name(dtype));
        return -1;
    }
    enum { CHUNK = 1 << 16 };  // elements converted per read
    unsigned char *buf = malloc(CHUNK * 4);
    if (!buf) { snprintf(err, errlen, "out of host memory"); return -1; }
    for (int64_t done = 0; done < count;) {
        int64_t n = count - done < CHUNK ? count - done : CHUNK;
        if (read_at(r->fd, buf, (size_t)n * src_size, at + (uint64_t)done * src_size) != 0) { free(buf); goto io_error; }
        unsigned char *dst = (unsigned char *)out + (size_t)done * dst_size;
        for (int64_t i = 0; i < n; i++)
            store_f32(dtype, load_f32((MistDtype)e->dtype, buf + (size_t)i * src_size), dst + (size_t)i * dst_size);
        done += n;
    }
    free(buf);
    return 0;
io_error:
    snprintf(err, errlen, "cannot read tensor '%s' from checkpoint '%s': %s (was the file changed after it was opened?)",
             name, r->path, strerror(errno));
    return -1;
}

int64_t ckpt_blob_bytes(const CkptReader *r, const char *name) {
    const CkptEntry *e = find(r, name);
    return e && e->kind == CKPT_KIND_BLOB ? (int64_t)e->bytes : -1;
}

int ckpt_read_blob(CkptReader *r, const char *name, void *out, size_t bytes, char *err, size_t errlen) {
    const CkptEntry *e = find(r, name);
    if (!e || e->kind != CKPT_KIND_BLOB) return missing(r, name, "blob", err, errlen);
    if (e->bytes != bytes) {
        snprintf(err, errlen, "checkpoint '%s': blob '%s' has %llu bytes, the reader expects %zu (hint: it was written "
                 "by a different mist version or configuration)", r->path, name, (unsigned long long)e->bytes, bytes);
        return -1;
    }
    if (read_at(r->fd, out, bytes, e->offset) != 0) {
        snprintf(err, errlen, "cannot read blob '%s' from checkpoint '%s': %s", name, r->path, strerror(errno));
        return -1;
    }
    return 0;
}
