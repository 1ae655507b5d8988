// llm.c token shards: header validation and an atomic streaming writer.
#define _FILE_OFFSET_BITS 64
#define _POSIX_C_SOURCE 200809L
#include "runtime/shard.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime/fileutil.h"

#define RETOKENIZE_HINT "hint: re-create it with `mist-tokenize INPUT.txt PREFIX` (see docs/data.md)"

int shard_read_header(const char *path, int64_t *ntok, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open token shard '%s': %s (hint: check the [data] train/val path)", path, strerror(errno));
        return -1;
    }
    int32_t h[SHARD_HEADER_INTS];
    size_t got = fread(h, 1, sizeof h, f);
    struct stat st;
    int have_stat = fstat(fileno(f), &st) == 0;
    fclose(f);
    if (!have_stat) {
        snprintf(err, errlen, "cannot stat token shard '%s': %s", path, strerror(errno));
        return -1;
    }
    int64_t size = (int64_t)st.st_size;
    if (got < sizeof h) {
        snprintf(err, errlen, "token shard '%s' is %lld bytes, shorter than the %d-byte header; %s",
                 path, (long long)size, SHARD_HEADER_BYTES, RETOKENIZE_HINT);
        return -1;
    }
    if (h[0] != SHARD_MAGIC) {
        snprintf(err, errlen, "'%s' is not a token shard: magic is %d, expected %d (llm.c uint16 format); %s%s",
                 path, h[0], SHARD_MAGIC, h[0] == 20240801 ? "this is an llm.c uint32 (Llama-3) shard, which is not supported; " : "",
                 RETOKENIZE_HINT);
        return -1;
    }
    if (h[1] != SHARD_VERSION) {
        snprintf(err, errlen, "token shard '%s' has version %d, expected %d; %s", path, h[1], SHARD_VERSION, RETOKENIZE_HINT);
        return -1;
    }
    if (h[2] < 0) {
        snprintf(err, errlen, "token shard '%s' has a negative token count %d in its header; %s", path, h[2], RETOKENIZE_HINT);
        return -1;
    }
    int64_t expected = SHARD_HEADER_BYTES + 2 * (int64_t)h[2];
    if (size != expected) {
        snprintf(err, errlen, "token shard '%s' has %lld bytes but its header says %d tokens, i.e. %lld bytes (%s); %s",
                 path, (long long)size, h[2], (long long)expected,
                 size < expected ? "the file is truncated, e.g. an interrupted copy" : "the file has trailing bytes",
                 RETOKENIZE_HINT);
        return -1;
    }
    *ntok = h[2];
    return 0;
}

int64_t shard_find_bad_token(const uint16_t *tokens, int64_t n, int vocab) {
    for (int64_t i = 0; i < n; i++)
        if ((int)tokens[i] >= vocab) return i;
    return -1;
}

struct ShardWriter {
    FILE *f;
    char path[4096], tmp[4096 + 8];
    int64_t count;
};

ShardWriter *shard_writer_open(const char *path, char *err, size_t errlen) {
    if (strlen(path) >= 4096) {
        snprintf(err, errlen, "shard path too long: %.80s...", path);
        return NULL;
    }
    if (mist_mkdir_parent(path, err, errlen) != 0) return NULL;
    ShardWriter *w = calloc(1, sizeof *w);
    if (!w) { snprintf(err, errlen, "out of host memory"); return NULL; }
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path);
    w->f = fopen(w->tmp, "wb");
    if (!w->f) {
        snprintf(err, errlen, "cannot create '%s': %s (hint: check the output directory is writable)", w->tmp, strerror(errno));
        free(w);
        return NULL;
    }
    int32_t h[SHARD_HEADER_INTS] = {0};  // placeholder; close() writes the real header
    if (fwrite(h, sizeof h, 1, w->f) != 1) {
        snprintf(err, errlen, "cannot write '%s': %s (hint: is the disk full?)", w->tmp, strerror(errno));
        shard_writer_abort(w);
        return NULL;
    }
    return w;
}

int shard_writer_append(ShardWriter *w, const uint16_t *tokens, int64_t n, char *err, size_t errlen) {
    if (n < 0 || w->count + n > SHARD_MAX_TOKENS) {
        snprintf(err, errlen, "shard '%s' would hold %lld tokens, more than the format's limit of %d (hint: use smaller shards)",
                 w->path, (long long)(w->count + n), SHARD_MAX_TOKENS);
        return -1;
    }
    if (n > 0 && fwrite(tokens, 2, (size_t)n, w->f) != (size_t)n) {
        snprintf(err, errlen, "cannot write '%s': %s (hint: is the disk full?)", w->tmp, strerror(errno));
        return -1;
    }
    w->count += n;
    return 0;
}

int64_t shard_writer_count(const ShardWriter *w) { return w->count; }

void shard_writer_abort(ShardWriter *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    unlink(w->tmp);
    free(w);
}

int shard_writer_close(ShardWriter *w, char *err, size_t errlen) {
    int32_t h[SHARD_HEADER_INTS] = {0};
    h[0] = SHARD_MAGIC;
    h[1] = SHARD_VERSION;
    h[2] = (int32_t)w->count;
    if (fflush(w->f) != 0 || fseeko(w->f, 0, SEEK_SET) != 0 || fwrite(h, sizeof h, 1, w->f) != 1 ||
        fflush(w->f) != 0 || fsync(fileno(w->f)) != 0) {
        snprintf(err, errlen, "cannot finish '%s': %s (hint: is the disk full?)", w->tmp, strerror(errno));
        shard_writer_abort(w);
        return -1;
    }
    int rc = fclose(w->f);
    w->f = NULL;
    if (rc != 0 || rename(w->tmp, w->path) != 0) {
        snprintf(err, errlen, "cannot finish '%s': %s", w->path, strerror(errno));
        shard_writer_abort(w);
        return -1;
    }
    rc = mist_fsync_parent(w->path, err, errlen);
    free(w);
    return rc;
}

int shard_write(const char *path, const uint16_t *tokens, int64_t n, char *err, size_t errlen) {
    ShardWriter *w = shard_writer_open(path, err, errlen);
    if (!w) return -1;
    if (shard_writer_append(w, tokens, n, err, errlen) != 0) {
        shard_writer_abort(w);
        return -1;
    }
    return shard_writer_close(w, err, errlen);
}
