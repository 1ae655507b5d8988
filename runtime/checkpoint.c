// Checkpoint writer (atomic: .tmp, fsync, rename, fsync dir, then `latest`),
// pruning of old checkpoints, and finding the newest one.
#define _FILE_OFFSET_BITS 64
#define _POSIX_C_SOURCE 200809L
#include "runtime/checkpoint.h"
#include "base/excerpt.h"
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime/checkpoint_format.h"
#include "runtime/checksum.h"
#include "runtime/fileutil.h"

struct CkptWriter {
    FILE *f;
    char dir[1024], final[1100], tmp[1110], file_name[64];
    int64_t step;
    uint64_t pos;        // bytes written so far
    uint32_t body_crc;   // CRC32C of bytes [64, pos)
    CkptEntry *entries;  // (count)
    int count, cap;
    char error[1600];    // first error, sticky
};

static int fail(CkptWriter *w, const char *fmt, const char *a, const char *b) {
    if (!w->error[0]) snprintf(w->error, sizeof w->error, fmt, a, b);
    return -1;
}

// MIST_FAULT_DISK_BYTES=N: the file system holds N bytes of a checkpoint and then
// is full (tests: a full disk, without mounting a small one)
static int disk_full_at(int64_t pos, size_t bytes) {
    const char *v = getenv("MIST_FAULT_DISK_BYTES");
    if (!v || pos + (int64_t)bytes <= atoll(v)) return 0;
    errno = ENOSPC;
    return 1;
}

static int write_bytes(CkptWriter *w, const void *data, size_t bytes) {
    if (bytes && (disk_full_at(w->pos, bytes) || fwrite(data, 1, bytes, w->f) != bytes)) {
        // the bytes written before the failure: with the file size, what the disk was short of
        char what[160];
        snprintf(what, sizeof what, "%s after %lld bytes written, writing %zu more", strerror(errno),
                 (long long)w->pos, bytes);
        return fail(w, "cannot write checkpoint '%s': %s (hint: is the disk full? the previous checkpoint is kept)",
                    w->tmp, what);
    }
    w->body_crc = crc32c_update(w->body_crc, data, bytes);
    w->pos += bytes;
    return 0;
}

static int pad_to_alignment(CkptWriter *w) {
    static const unsigned char zeros[CKPT_ALIGN];
    size_t pad = (size_t)((CKPT_ALIGN - w->pos % CKPT_ALIGN) % CKPT_ALIGN);
    return write_bytes(w, zeros, pad);
}

CkptWriter *ckpt_writer_open(const char *dir, int64_t step, char *err, size_t errlen) {
    if (step < 0) {
        snprintf(err, errlen, "checkpoint step %lld must be >= 0", (long long)step);
        return NULL;
    }
    if (strlen(dir) == 0 || strlen(dir) >= 1024) {
        snprintf(err, errlen, "checkpoint directory '%s' is empty or too long (hint: set [checkpoint] dir)", dir);
        return NULL;
    }
    if (mist_mkdir_p(dir, err, errlen) != 0) return NULL;
    CkptWriter *w = calloc(1, sizeof *w);
    if (!w) { snprintf(err, errlen, "out of host memory"); return NULL; }
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    snprintf(w->file_name, sizeof w->file_name, "step_%08lld.ckpt", (long long)step);
    snprintf(w->final, sizeof w->final, "%s/%s", dir, w->file_name);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp", w->final);
    w->step = step;
    w->f = fopen(w->tmp, "wb");
    if (!w->f) {
        snprintf(err, errlen, "cannot create checkpoint '%s': %s (hint: check [checkpoint] dir is writable)", w->tmp, strerror(errno));
        free(w);
        return NULL;
    }
    setvbuf(w->f, NULL, _IOFBF, 1 << 20);
    unsigned char header[CKPT_HEADER_BYTES] = {0};  // placeholder; commit writes the real one
    if (fwrite(header, 1, sizeof header, w->f) != sizeof header) {
        snprintf(err, errlen, "cannot write checkpoint '%s': %s (hint: is the disk full?)", w->tmp, strerror(errno));
        ckpt_writer_abort(w);
        return NULL;
    }
    w->pos = CKPT_HEADER_BYTES;
    return w;
}

const char *ckpt_writer_error(const CkptWriter *w) { return w->error; }

static int add_entry(CkptWriter *w, const char *name, uint32_t kind, MistDtype dtype, int ndim,
                     const int64_t *shape, const void *data, uint64_t bytes) {
    if (w->error[0]) return -1;
    if (!name || !name[0] || strlen(name) >= CKPT_NAME_MAX)
        return fail(w, "checkpoint array name '%s' is empty or longer than %s characters", name ? name : "(null)", "127");
    for (int i = 0; i < w->count; i++)
        if (strcmp(w->entries[i].name, name) == 0)
            return fail(w, "checkpoint array '%s' written twice into '%s' (names must be unique)", name, w->tmp);
    if (bytes > 0 && !data) return fail(w, "checkpoint array '%s': data pointer is NULL%s", name, "");
    if (w->count == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        CkptEntry *e = realloc(w->entries, (size_t)cap * sizeof *e);
        if (!e) return fail(w, "out of host memory writing checkpoint array '%s'%s", name, "");
        w->entries = e;
        w->cap = cap;
    }
    if (pad_to_alignment(w) != 0) return -1;
    CkptEntry *e = &w->entries[w->count];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->kind = kind;
    e->dtype = (uint32_t)dtype;
    e->ndim = (uint32_t)ndim;
    for (int d = 0; d < ndim; d++) e->shape[d] = shape[d];
    e->offset = w->pos;
    e->bytes = bytes;
    e->crc = crc32c(data, (size_t)bytes);
    if (write_bytes(w, data, (size_t)bytes) != 0) return -1;
    w->count++;
    return 0;
}

int ckpt_write_tensor(CkptWriter *w, const char *name, MistDtype dtype, int ndim,
                      const int64_t *shape, const void *data) {
    if (w->error[0]) return -1;
    if ((unsigned)dtype > MIST_U8) return fail(w, "checkpoint tensor '%s': unknown dtype%s", name, "");
    if (ndim < 0 || ndim > CKPT_MAX_DIMS) return fail(w, "checkpoint tensor '%s': ndim must be 0..8%s", name, "");
    uint64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return fail(w, "checkpoint tensor '%s': negative dimension in its shape%s", name, "");
        numel *= (uint64_t)shape[d];
    }
    return add_entry(w, name, CKPT_KIND_TENSOR, dtype, ndim, shape, data, numel * mist_dtype_size(dtype));
}

int ckpt_write_blob(CkptWriter *w, const char *name, const void *data, size_t bytes) {
    int64_t shape[1] = {(int64_t)bytes};
    return add_entry(w, name, CKPT_KIND_BLOB, MIST_U8, 1, shape, data, bytes);
}

void ckpt_writer_abort(CkptWriter *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    unlink(w->tmp);
    free(w->entries);
    free(w);
}

// "step_00000100.ckpt" -> 100; -1 for any other name
static int64_t step_of(const char *name) {
    if (strncmp(name, "step_", 5) != 0) return -1;
    const char *p = name + 5;
    int64_t step = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 18) step = step * 10 + (*p++ - '0'), digits++;
    return digits > 0 && strcmp(p, ".ckpt") == 0 ? step : -1;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int cmp_step(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

// Delete all but the newest `keep` step_*.ckpt (never `current`), and stale .ckpt.tmp files.
static void prune(const char *dir, int keep, int64_t current) {
    DIR *d = opendir(dir);
    if (!d) return;
    int64_t *steps = NULL;
    int n = 0, cap = 0;
    char path[1024 + 300];  // dir (< 1024) + "/" + a directory entry name (< 256)
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "step_", 5) == 0 && ends_with(de->d_name, ".ckpt.tmp")) {
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            unlink(path);  // left by a crashed writer; only one process writes this directory
            continue;
        }
        int64_t s = step_of(de->d_name);
        if (s < 0 || s == current) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *grown = realloc(steps, (size_t)cap * sizeof *grown);
            if (!grown) break;
            steps = grown;
        }
        steps[n++] = s;
    }
    closedir(d);
    if (keep > 0 && n > keep - 1) {
        qsort(steps, (size_t)n, sizeof *steps, cmp_step);
        for (int i = 0; i < n - (keep - 1); i++) {  // the current one counts as one of the `keep`
            snprintf(path, sizeof path, "%s/step_%08lld.ckpt", dir, (long long)steps[i]);
            unlink(path);
        }
    }
    free(steps);
}

int ckpt_writer_commit(CkptWriter *w, int keep, char *err, size_t errlen) {
    if (!w->error[0] && pad_to_alignment(w) == 0) {
        CkptHeader h = {.version = CKPT_VERSION, .step = w->step, .count = (uint64_t)w->count, .index_offset = w->pos};
        size_t index_bytes = (size_t)w->count * CKPT_ENTRY_BYTES;
        unsigned char *index = calloc(1, index_bytes + 1);
        if (!index) fail(w, "out of host memory writing the index of '%s'%s", w->tmp, "");
        else {
            for (int i = 0; i < w->count; i++) ckpt_entry_encode(&w->entries[i], index + (size_t)i * CKPT_ENTRY_BYTES);
            h.index_crc = crc32c(index, index_bytes);
            write_bytes(w, index, index_bytes);
            free(index);
        }
        h.file_bytes = w->pos;
        h.body_crc = w->body_crc;
        unsigned char hb[CKPT_HEADER_BYTES];
        ckpt_header_encode(&h, hb);
        h.header_crc = crc32c(hb, 60);
        ckpt_header_encode(&h, hb);
        if (!w->error[0] && (fflush(w->f) != 0 || fseeko(w->f, 0, SEEK_SET) != 0 ||
                             fwrite(hb, 1, sizeof hb, w->f) != sizeof hb || fflush(w->f) != 0 || fsync(fileno(w->f)) != 0))
            fail(w, "cannot finish checkpoint '%s': %s (hint: is the disk full?)", w->tmp, strerror(errno));
    }
    if (w->f) {
        if (fclose(w->f) != 0) fail(w, "cannot close checkpoint '%s': %s", w->tmp, strerror(errno));
        w->f = NULL;
    }
    if (!w->error[0] && rename(w->tmp, w->final) != 0)
        fail(w, "cannot rename the checkpoint into place ('%s'): %s", w->final, strerror(errno));
    if (w->error[0]) {
        snprintf(err, errlen, "%s", w->error);
        ckpt_writer_abort(w);
        return -1;
    }
    // The checkpoint is complete and durable before `latest` points at it.
    char latest[1100], line[80];
    snprintf(latest, sizeof latest, "%s/latest", w->dir);
    snprintf(line, sizeof line, "%s\n", w->file_name);
    int rc = mist_fsync_parent(w->final, err, errlen);
    if (rc == 0) rc = mist_write_file_atomic(latest, line, strlen(line), err, errlen);
    if (rc == 0) prune(w->dir, keep, w->step);
    free(w->entries);
    free(w);
    return rc;
}

// ---- finding the newest checkpoint ----

int ckpt_find_latest_err(const char *dir, char *path, size_t len, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 0;
        snprintf(err, errlen, "cannot read checkpoint directory '%s': %s", dir, strerror(errno));
        return -1;
    }
    char latest[1100];
    if (strlen(dir) >= 1024) {
        closedir(d);
        snprintf(err, errlen, "checkpoint directory name too long (%zu characters, at most 1023)", strlen(dir));
        return -1;
    }
    snprintf(latest, sizeof latest, "%s/latest", dir);
    FILE *f = fopen(latest, "r");
    if (f) {
        char name[256] = {0};
        int got = fgets(name, sizeof name, f) != NULL;
        fclose(f);
        name[strcspn(name, "\r\n")] = '\0';
        if (!got || step_of(name) < 0) {
            closedir(d);
            char shown[MIST_EXCERPT_BUF];  // a damaged `latest` may hold binary bytes: never echo them raw
            snprintf(err, errlen, "'%s' should name a checkpoint like step_00000100.ckpt but holds '%s' (hint: fix it "
                     "or delete it to resume from the highest step_*.ckpt in the directory)", latest,
                     mist_excerpt(name, shown, sizeof shown));
            return -1;
        }
        closedir(d);
        struct stat st;
        if ((size_t)snprintf(path, len, "%s/%s", dir, name) >= len) {
            snprintf(err, errlen, "checkpoint path too long for the buffer: %s/%s", dir, name);
            return -1;
        }
        if (stat(path, &st) != 0) {
            snprintf(err, errlen, "'%s' names '%s', which does not exist (hint: restore it, or delete `latest` to "
                     "resume from the highest step_*.ckpt in the directory)", latest, name);
            return -1;
        }
        return 1;
    }
    // no `latest` (e.g. written by hand or a crash between rename and `latest`): the highest step wins
    int64_t best = -1;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int64_t s = step_of(de->d_name);
        if (s > best) best = s;
    }
    closedir(d);
    if (best < 0) return 0;
    if ((size_t)snprintf(path, len, "%s/step_%08lld.ckpt", dir, (long long)best) >= len) {
        snprintf(err, errlen, "checkpoint path too long for the buffer: %s", dir);
        return -1;
    }
    return 1;
}

int ckpt_find_latest(const char *dir, char *path, size_t len) {
    char err[1024];
    int rc = ckpt_find_latest_err(dir, path, len, err, sizeof err);
    if (rc < 0) fprintf(stderr, "mist: error: %s\n", err);
    return rc;
}
