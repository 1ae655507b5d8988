// Byte-level tokenization of a text file into token shards (runtime/tokenize.h).
#define _FILE_OFFSET_BITS 64
#define _POSIX_C_SOURCE 200809L
#include "runtime/tokenize.h"
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include "runtime/shard.h"

// Byte position where validation starts: (1-F)*size, moved past the next "\n\n".
static int64_t find_split(FILE *f, int64_t size, double val_fraction) {
    if (val_fraction <= 0) return size;
    int64_t cut = (int64_t)((double)size * (1.0 - val_fraction));
    if (cut <= 0) return 0;
    if (fseeko(f, (off_t)(cut - 1), SEEK_SET) != 0) return cut;
    int prev = fgetc(f), c;
    int64_t pos = cut;
    while ((c = fgetc(f)) != EOF) {
        pos++;
        if (prev == '\n' && c == '\n') return pos;  // val starts right after the blank line
        prev = c;
    }
    return cut;  // no blank line after the cut: cut exactly
}

// Tokens [begin, end) of the input into shards PREFIX_PART.bin or PREFIX_PART_NNN.bin. 0, or 2 with err.
static int write_part(FILE *f, int64_t begin, int64_t end, const char *prefix, const char *part, int64_t shard_tokens,
                      FILE *out, char *err, size_t errlen) {
    int64_t total = end - begin;
    int64_t nshards = (total + shard_tokens - 1) / shard_tokens;
    enum { CHUNK = 1 << 20 };
    static unsigned char bytes[CHUNK];
    static uint16_t tokens[CHUNK];
    char path[4200];
    if (fseeko(f, (off_t)begin, SEEK_SET) != 0) {
        snprintf(err, errlen, "cannot seek in the input: %s", strerror(errno));
        return 2;
    }
    for (int64_t s = 0; s < nshards; s++) {
        if (nshards == 1) snprintf(path, sizeof path, "%s_%s.bin", prefix, part);
        else snprintf(path, sizeof path, "%s_%s_%03lld.bin", prefix, part, (long long)s);
        ShardWriter *w = shard_writer_open(path, err, errlen);
        if (!w) return 2;
        int64_t left = total - s * shard_tokens < shard_tokens ? total - s * shard_tokens : shard_tokens;
        while (left > 0) {
            size_t want = left < CHUNK ? (size_t)left : CHUNK;
            size_t got = fread(bytes, 1, want, f);
            if (got != want) {
                shard_writer_abort(w);
                snprintf(err, errlen, "the input became shorter while reading it (%s)",
                         ferror(f) ? strerror(errno) : "end of file");
                return 2;
            }
            for (size_t i = 0; i < got; i++) tokens[i] = bytes[i];  // byte-level: token = byte value
            if (shard_writer_append(w, tokens, (int64_t)got, err, errlen) != 0) {
                shard_writer_abort(w);
                return 2;
            }
            left -= (int64_t)got;
        }
        long long count = (long long)shard_writer_count(w);
        if (shard_writer_close(w, err, errlen) != 0) return 2;
        fprintf(out, "wrote %s: %lld tokens\n", path, count);
    }
    return 0;
}

int tokenize_text_file(const char *input, const char *prefix, double val_fraction, int64_t shard_tokens, FILE *out,
                       int *no_val, char *err, size_t errlen) {
    *no_val = 0;
    FILE *f = fopen(input, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open input '%s': %s", input, strerror(errno));
        return 2;
    }
    struct stat st;
    int64_t size = 0, split = 0;
    int rc = 2;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode))
        snprintf(err, errlen, "input '%s' is not a regular file", input);
    else if ((size = (int64_t)st.st_size) < 2)
        snprintf(err, errlen, "input '%s' is empty or a single byte; there is nothing to train on", input);
    else if ((split = find_split(f, size, val_fraction)) < 2)
        snprintf(err, errlen, "--val-fraction leaves no training text in '%s' (hint: use a smaller fraction)", input);
    else
        rc = write_part(f, 0, split, prefix, "train", shard_tokens, out, err, errlen);
    if (rc == 0 && split < size) rc = write_part(f, split, size, prefix, "val", shard_tokens, out, err, errlen);
    else if (rc == 0 && val_fraction > 0) *no_val = 1;
    fclose(f);
    return rc;
}
