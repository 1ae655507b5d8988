// safetensors writer (streaming) and reader (header validation, converting reads).
#define _FILE_OFFSET_BITS 64
#define _XOPEN_SOURCE 700
#include "runtime/safetensors.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime/fileutil.h"

// A header larger than this is not a weights file (the safetensors library's own limit is 100 MB).
#define ST_HEADER_LIMIT (100u << 20)

int64_t st_numel(const StTensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

void st_shape_text(int ndim, const int64_t *shape, char *buf, size_t len) {
    size_t at = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && at < len; d++)
        at += (size_t)snprintf(buf + at, len - at, d ? ", %" PRId64 : "%" PRId64, shape[d]);
    if (at < len) snprintf(buf + at, len - at, "]");
}

// ---------------------------------------------------------------- writer

struct StWriter {
    FILE *f;
    char path[4096], tmp[4104];
    MistDtype *dtypes;
    int64_t *numel;
    int n, cur;
    int64_t done;  // elements of tensor `cur` written
    int failed;
};

static const char *st_dtype_label(MistDtype d) { return d == MIST_BF16 ? "BF16" : "F32"; }

StWriter *st_writer_open(const char *path, const StTensor *tensors, const MistDtype *dtypes, int n, char *err,
                         size_t errlen) {
    StWriter *w = calloc(1, sizeof *w);
    size_t cap = 256 + (size_t)n * (ST_NAME_MAX + 64 + 24 * ST_MAX_DIMS);
    char *json = malloc(cap);
    if (!w || !json || !(w->dtypes = malloc((size_t)n * sizeof *w->dtypes)) ||
        !(w->numel = malloc((size_t)n * sizeof *w->numel))) {
        snprintf(err, errlen, "out of host memory for the safetensors header of %d tensors", n);
        goto fail;
    }
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path);
    w->n = n;
    size_t at = (size_t)snprintf(json, cap, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        char shape[24 * ST_MAX_DIMS + 4];
        st_shape_text(tensors[i].ndim, tensors[i].shape, shape, sizeof shape);
        w->dtypes[i] = dtypes[i];
        w->numel[i] = st_numel(&tensors[i]);
        uint64_t bytes = (uint64_t)w->numel[i] * mist_dtype_size(dtypes[i]);
        at += (size_t)snprintf(json + at, cap - at, ",\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%" PRIu64
                               ",%" PRIu64 "]}", tensors[i].name, st_dtype_label(dtypes[i]), shape, offset,
                               offset + bytes);
        offset += bytes;
    }
    at += (size_t)snprintf(json + at, cap - at, "}");
    // pad with spaces so the data buffer starts 8-byte aligned (what the Rust reader recommends)
    while ((8 + at) % 8) json[at++] = ' ';
    if (mist_mkdir_parent(path, err, errlen) != 0) goto fail;
    w->f = fopen(w->tmp, "wb");
    if (!w->f) {
        snprintf(err, errlen, "cannot create '%s': %s (hint: check the directory is writable)", w->tmp, strerror(errno));
        goto fail;
    }
    uint64_t hlen = at;
    unsigned char le[8];
    for (int b = 0; b < 8; b++) le[b] = (unsigned char)(hlen >> (8 * b));
    if (fwrite(le, 1, 8, w->f) != 8 || fwrite(json, 1, at, w->f) != at) {
        snprintf(err, errlen, "cannot write '%s': %s (hint: is the disk full?)", w->tmp, strerror(errno));
        fclose(w->f);
        unlink(w->tmp);
        w->f = NULL;
        goto fail;
    }
    free(json);
    return w;
fail:
    free(json);
    if (w) free(w->dtypes), free(w->numel), free(w);
    return NULL;
}

int st_writer_append(StWriter *w, const float *data, size_t count) {
    enum { CHUNK = 4096 };
    uint16_t half[CHUNK];
    while (count > 0 && !w->failed) {
        if (w->cur >= w->n || w->done >= w->numel[w->cur]) {
            if (w->cur >= w->n) { w->failed = 1; break; }
            w->cur++, w->done = 0;
            continue;
        }
        size_t take = (size_t)(w->numel[w->cur] - w->done);
        if (take > count) take = count;
        if (w->dtypes[w->cur] == MIST_BF16) {
            if (take > CHUNK) take = CHUNK;
            for (size_t i = 0; i < take; i++) half[i] = mist_f32_to_bf16(data[i]);
            w->failed |= fwrite(half, 2, take, w->f) != take;
        } else {
            w->failed |= fwrite(data, 4, take, w->f) != take;
        }
        data += take, count -= take, w->done += (int64_t)take;
    }
    return w->failed ? -1 : 0;
}

int st_writer_close(StWriter *w, char *err, size_t errlen) {
    while (w->cur < w->n && w->done >= w->numel[w->cur]) w->cur++, w->done = 0;
    int rc = 0;
    if (w->failed) {
        snprintf(err, errlen, "cannot write '%s': %s (hint: is the disk full?)", w->tmp, strerror(errno));
        rc = -1;
    } else if (w->cur < w->n) {
        snprintf(err, errlen, "'%s': tensor %d of %d was not written in full (internal error)", w->tmp, w->cur, w->n);
        rc = -1;
    }
    if (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0) {
        if (!rc) snprintf(err, errlen, "cannot flush '%s': %s (hint: is the disk full?)", w->tmp, strerror(errno));
        rc = -1;
    }
    fclose(w->f);
    if (!rc && rename(w->tmp, w->path) != 0) {
        snprintf(err, errlen, "cannot rename '%s' to '%s': %s", w->tmp, w->path, strerror(errno));
        rc = -1;
    }
    if (rc) unlink(w->tmp);
    free(w->dtypes), free(w->numel), free(w);
    return rc;
}

// ---------------------------------------------------------------- reader

struct StReader {
    FILE *f;
    char path[1024];
    uint64_t data_start, data_bytes;
    StTensor *t;
    int n;
};

int st_reader_count(const StReader *r) { return r->n; }
const StTensor *st_reader_tensor(const StReader *r, int i) { return &r->t[i]; }

const StTensor *st_reader_find(const StReader *r, const char *name) {
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->t[i].name, name)) return &r->t[i];
    return NULL;
}

void st_reader_close(StReader *r) {
    if (!r) return;
    if (r->f) fclose(r->f);
    free(r->t);
    free(r);
}

// A cursor over the JSON header; errors name the byte position in the header.
typedef struct {
    const char *s;
    size_t at, len;
    const char *path;
    char *err;
    size_t errlen;
} Json;

static int json_fail(Json *j, const char *what) {
    snprintf(j->err, j->errlen, "'%s' is not a valid safetensors file: its JSON header is malformed at byte %zu of %zu "
             "(%s) (hint: the file is damaged or not safetensors; re-export or re-download it)", j->path, j->at,
             j->len, what);
    return -1;
}

static void json_ws(Json *j) {
    while (j->at < j->len && strchr(" \t\r\n", j->s[j->at])) j->at++;
}

static int json_char(Json *j, char c) {
    json_ws(j);
    if (j->at >= j->len || j->s[j->at] != c) {
        char what[32];
        snprintf(what, sizeof what, "expected '%c'", c);
        return json_fail(j, what);
    }
    j->at++;
    return 0;
}

static int json_peek(Json *j, char c) {
    json_ws(j);
    return j->at < j->len && j->s[j->at] == c;
}

// A string without escapes beyond \" and \\ (tensor names and dtypes have none) into out.
static int json_string(Json *j, char *out, size_t cap) {
    if (json_char(j, '"')) return -1;
    size_t n = 0;
    while (j->at < j->len && j->s[j->at] != '"') {
        char c = j->s[j->at++];
        if (c == '\\') {
            if (j->at >= j->len) break;
            c = j->s[j->at++];
        }
        if (n + 1 >= cap) return json_fail(j, "string too long");
        out[n++] = c;
    }
    if (j->at >= j->len) return json_fail(j, "unterminated string");
    j->at++;
    out[n] = '\0';
    return 0;
}

static int json_uint(Json *j, uint64_t *v) {
    json_ws(j);
    size_t start = j->at;
    uint64_t x = 0;
    while (j->at < j->len && j->s[j->at] >= '0' && j->s[j->at] <= '9') {
        if (x > (UINT64_MAX - 9) / 10) return json_fail(j, "number too large");
        x = x * 10 + (uint64_t)(j->s[j->at++] - '0');
    }
    if (j->at == start) return json_fail(j, "expected a non-negative integer");
    *v = x;
    return 0;
}

// [a, b, ...] of non-negative integers, at most max of them.
static int json_uint_array(Json *j, uint64_t *v, int max, int *n) {
    if (json_char(j, '[')) return -1;
    *n = 0;
    if (json_peek(j, ']')) return json_char(j, ']');
    do {
        if (*n >= max) return json_fail(j, "too many dimensions");
        if (json_uint(j, &v[(*n)++])) return -1;
    } while (json_peek(j, ',') && !json_char(j, ','));
    return json_char(j, ']');
}

// Skips any value of the metadata object (strings only, per the format).
static int json_string_map(Json *j) {
    char scratch[4096];
    if (json_char(j, '{')) return -1;
    if (json_peek(j, '}')) return json_char(j, '}');
    do {
        if (json_string(j, scratch, sizeof scratch) || json_char(j, ':') || json_string(j, scratch, sizeof scratch))
            return -1;
    } while (json_peek(j, ',') && !json_char(j, ','));
    return json_char(j, '}');
}

static int json_tensor(Json *j, StTensor *t) {
    int seen = 0;
    if (json_char(j, '{')) return -1;
    do {
        char key[32];
        if (json_string(j, key, sizeof key) || json_char(j, ':')) return -1;
        if (!strcmp(key, "dtype")) {
            if (json_string(j, t->dtype, sizeof t->dtype)) return -1;
            seen |= 1;
        } else if (!strcmp(key, "shape")) {
            uint64_t dims[ST_MAX_DIMS];
            if (json_uint_array(j, dims, ST_MAX_DIMS, &t->ndim)) return -1;
            for (int d = 0; d < t->ndim; d++) {
                if (dims[d] > (uint64_t)1 << 40) return json_fail(j, "dimension too large");
                t->shape[d] = (int64_t)dims[d];
            }
            seen |= 2;
        } else if (!strcmp(key, "data_offsets")) {
            uint64_t off[2];
            int n;
            if (json_uint_array(j, off, 2, &n)) return -1;
            if (n != 2) return json_fail(j, "data_offsets needs two numbers");
            t->begin = off[0], t->end = off[1];
            seen |= 4;
        } else {
            return json_fail(j, "unknown key in a tensor entry (allowed: dtype, shape, data_offsets)");
        }
    } while (json_peek(j, ',') && !json_char(j, ','));
    if (seen != 7) return json_fail(j, "a tensor entry lacks dtype, shape or data_offsets");
    return json_char(j, '}');
}

static int st_dtype_size(const char *d) {
    if (!strcmp(d, "F32")) return 4;
    if (!strcmp(d, "BF16") || !strcmp(d, "F16")) return 2;
    return 0;
}

static int parse_header(StReader *r, Json *j) {
    int cap = 64;
    if (!(r->t = malloc((size_t)cap * sizeof *r->t))) return json_fail(j, "out of memory");
    if (json_char(j, '{')) return -1;
    if (json_peek(j, '}')) return json_char(j, '}');
    do {
        char name[ST_NAME_MAX];
        if (json_string(j, name, sizeof name) || json_char(j, ':')) return -1;
        if (!strcmp(name, "__metadata__")) {
            if (json_string_map(j)) return -1;
            continue;
        }
        if (r->n == cap) {
            StTensor *grown = realloc(r->t, (size_t)(cap *= 2) * sizeof *r->t);
            if (!grown) return json_fail(j, "out of memory");
            r->t = grown;
        }
        StTensor *t = &r->t[r->n];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "%s", name);
        if (json_tensor(j, t)) return -1;
        if (st_reader_find(r, name)) return json_fail(j, "a tensor name appears twice");
        r->n++;
    } while (json_peek(j, ',') && !json_char(j, ','));
    if (json_char(j, '}')) return -1;
    json_ws(j);
    return j->at == j->len ? 0 : json_fail(j, "text after the closing brace");
}

// Each tensor's byte range matches its shape and lies inside the data buffer.
static int check_ranges(const StReader *r, char *err, size_t errlen) {
    for (int i = 0; i < r->n; i++) {
        const StTensor *t = &r->t[i];
        int size = st_dtype_size(t->dtype);
        char shape[24 * ST_MAX_DIMS + 4];
        st_shape_text(t->ndim, t->shape, shape, sizeof shape);
        if (t->begin > t->end || t->end > r->data_bytes) {
            snprintf(err, errlen, "'%s': tensor '%s' has data_offsets [%" PRIu64 ", %" PRIu64 "] outside the %" PRIu64
                     "-byte data buffer (hint: the file is truncated or damaged)", r->path, t->name, t->begin, t->end,
                     r->data_bytes);
            return -1;
        }
        if (size && (uint64_t)st_numel(t) * (uint64_t)size != t->end - t->begin) {
            snprintf(err, errlen, "'%s': tensor '%s' (%s %s) has %" PRIu64 " bytes, its shape needs %" PRIu64
                     " (hint: the file is damaged)", r->path, t->name, t->dtype, shape, t->end - t->begin,
                     (uint64_t)st_numel(t) * (uint64_t)size);
            return -1;
        }
    }
    return 0;
}

StReader *st_reader_open(const char *path, char *err, size_t errlen) {
    StReader *r = calloc(1, sizeof *r);
    char *json = NULL;
    if (!r) { snprintf(err, errlen, "out of host memory"); return NULL; }
    snprintf(r->path, sizeof r->path, "%s", path);
    struct stat sb;
    r->f = fopen(path, "rb");
    if (!r->f || fstat(fileno(r->f), &sb) != 0) {
        snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        goto fail;
    }
    uint64_t fsize = (uint64_t)sb.st_size, hlen = 0;
    unsigned char le[8];
    if (fsize < 8 || fread(le, 1, 8, r->f) != 8) {
        snprintf(err, errlen, "'%s' is not a safetensors file: it has %" PRIu64 " bytes, fewer than the 8-byte header "
                 "length (hint: the file is truncated)", path, fsize);
        goto fail;
    }
    for (int b = 0; b < 8; b++) hlen |= (uint64_t)le[b] << (8 * b);
    if (hlen > ST_HEADER_LIMIT || hlen > fsize - 8) {
        snprintf(err, errlen, "'%s' is not a valid safetensors file: its header length says %" PRIu64 " bytes, %s "
                 "(hint: the file is truncated, or not safetensors)", path, hlen,
                 hlen > fsize - 8 ? "more than the file holds" : "more than the 100 MB a header may have");
        goto fail;
    }
    if (!(json = malloc(hlen + 1)) || fread(json, 1, hlen, r->f) != hlen) {
        snprintf(err, errlen, "cannot read the header of '%s'", path);
        goto fail;
    }
    r->data_start = 8 + hlen;
    r->data_bytes = fsize - r->data_start;
    Json j = {json, 0, hlen, path, err, errlen};
    if (parse_header(r, &j) || check_ranges(r, err, errlen)) goto fail;
    free(json);
    return r;
fail:
    free(json);
    st_reader_close(r);
    return NULL;
}

// IEEE half to float: sign, 5-bit exponent (bias 15), 10-bit mantissa; subnormals scaled by 2^-24.
static float half_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023u, u;
    if (e == 31) u = sign | 0x7f800000u | (m << 13);
    else if (e == 0) {
        float f = (float)m * (1.0f / 16777216.0f);
        return sign ? -f : f;
    } else u = sign | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int st_read_f32(StReader *r, const StTensor *t, int64_t offset, int64_t count, float *out, char *err,
                size_t errlen) {
    int size = st_dtype_size(t->dtype);
    if (!size) {
        snprintf(err, errlen, "'%s': tensor '%s' has dtype %s, which mist cannot convert to its weights (allowed: F32, "
                 "BF16, F16; hint: convert the file, e.g. with torch: t.float())", r->path, t->name, t->dtype);
        return -1;
    }
    if (offset < 0 || count < 0 || offset + count > st_numel(t)) {
        snprintf(err, errlen, "'%s': elements [%" PRId64 ", %" PRId64 ") are outside tensor '%s'", r->path, offset,
                 offset + count, t->name);
        return -1;
    }
    if (fseeko(r->f, (off_t)(r->data_start + t->begin + (uint64_t)offset * (uint64_t)size), SEEK_SET) != 0) goto io;
    if (size == 4) {
        if (fread(out, 4, (size_t)count, r->f) != (size_t)count) goto io;
        return 0;
    }
    enum { CHUNK = 4096 };
    uint16_t half[CHUNK];
    int bf16 = !strcmp(t->dtype, "BF16");
    for (int64_t done = 0; done < count;) {
        size_t n = (size_t)(count - done < CHUNK ? count - done : CHUNK);
        if (fread(half, 2, n, r->f) != n) goto io;
        for (size_t i = 0; i < n; i++) out[done + (int64_t)i] = bf16 ? mist_bf16_to_f32(half[i]) : half_to_f32(half[i]);
        done += (int64_t)n;
    }
    return 0;
io:
    snprintf(err, errlen, "cannot read tensor '%s' from '%s': %s", t->name, r->path,
             ferror(r->f) ? strerror(errno) : "unexpected end of file");
    return -1;
}
