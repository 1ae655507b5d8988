// mist-tokenize: text -> llm.c token shards with the byte-level tokenizer
// (token = byte value, vocabulary 256). Splits the text into a training part
// (the first 1-F) and a validation part (the rest), each cut into shards.
#define _FILE_OFFSET_BITS 64
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "runtime/shard.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: mist-tokenize [--val-fraction F] [--shard-tokens N] INPUT.txt OUT_PREFIX\n"
            "\n"
            "Tokenizes INPUT.txt byte by byte (token = byte value, vocab 256) into token shards in the\n"
            "llm.c format (a 1024-byte header, then uint16 tokens) that mist-train reads.\n"
            "\n"
            "  --val-fraction F   the last F of the text becomes validation data (default 0.1; 0 = none).\n"
            "                     The cut moves forward to the next blank line, so validation starts\n"
            "                     at a paragraph.\n"
            "  --shard-tokens N   at most N tokens per shard file (default 100000000, at most 2147483647)\n"
            "  -h, --help         show this help\n"
            "\n"
            "Output: OUT_PREFIX_train.bin and OUT_PREFIX_val.bin when a part fits in one shard, else\n"
            "OUT_PREFIX_train_000.bin, OUT_PREFIX_train_001.bin, ... (likewise for val). The glob\n"
            "'OUT_PREFIX_train*.bin' matches either; use it as [data] train in the config.\n"
            "\n"
            "example: mist-tokenize examples/data/corpus.txt examples/data/tiny\n");
}

static int die(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "mist-tokenize: error: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    return 2;
}

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

// Tokens [begin, end) of the input into shards PREFIX_PART.bin or PREFIX_PART_NNN.bin.
static int write_part(FILE *f, int64_t begin, int64_t end, const char *prefix, const char *part, int64_t shard_tokens) {
    int64_t total = end - begin;
    int64_t nshards = (total + shard_tokens - 1) / shard_tokens;
    enum { CHUNK = 1 << 20 };
    static unsigned char bytes[CHUNK];
    static uint16_t tokens[CHUNK];
    char err[1024], path[4200];
    if (fseeko(f, (off_t)begin, SEEK_SET) != 0) return die("cannot seek in the input: %s%s", strerror(errno), "");
    for (int64_t s = 0; s < nshards; s++) {
        if (nshards == 1) snprintf(path, sizeof path, "%s_%s.bin", prefix, part);
        else snprintf(path, sizeof path, "%s_%s_%03lld.bin", prefix, part, (long long)s);
        ShardWriter *w = shard_writer_open(path, err, sizeof err);
        if (!w) return die("%s%s", err, "");
        int64_t left = total - s * shard_tokens < shard_tokens ? total - s * shard_tokens : shard_tokens;
        while (left > 0) {
            size_t want = left < CHUNK ? (size_t)left : CHUNK;
            size_t got = fread(bytes, 1, want, f);
            if (got != want) {
                shard_writer_abort(w);
                return die("the input became shorter while reading it (%s)%s", ferror(f) ? strerror(errno) : "end of file", "");
            }
            for (size_t i = 0; i < got; i++) tokens[i] = bytes[i];  // byte-level: token = byte value
            if (shard_writer_append(w, tokens, (int64_t)got, err, sizeof err) != 0) {
                shard_writer_abort(w);
                return die("%s%s", err, "");
            }
            left -= (int64_t)got;
        }
        long long count = (long long)shard_writer_count(w);
        if (shard_writer_close(w, err, sizeof err) != 0) return die("%s%s", err, "");
        printf("wrote %s: %lld tokens\n", path, count);
    }
    return 0;
}

int main(int argc, char **argv) {
    double val_fraction = 0.1;
    long long shard_tokens = 100000000;
    const char *input = NULL, *prefix = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--val-fraction") || !strcmp(a, "--shard-tokens")) {
            if (i + 1 >= argc) return die("%s needs a value (see --help)%s", a, "");
            char *end;
            errno = 0;
            if (!strcmp(a, "--val-fraction")) {
                val_fraction = strtod(argv[++i], &end);
                if (*end || errno || !(val_fraction >= 0 && val_fraction < 1))
                    return die("--val-fraction '%s' must be a number in [0, 1), e.g. 0.1%s", argv[i], "");
            } else {
                shard_tokens = strtoll(argv[++i], &end, 10);
                if (*end || errno || shard_tokens < 1 || shard_tokens > SHARD_MAX_TOKENS)
                    return die("--shard-tokens '%s' must be an integer in 1..2147483647 (the format stores the "
                               "count as int32)%s", argv[i], "");
            }
        } else if (a[0] == '-' && a[1]) {
            return die("unknown option '%s' (see --help)%s", a, "");
        } else if (!input) input = a;
        else if (!prefix) prefix = a;
        else return die("unexpected argument '%s': give INPUT.txt and OUT_PREFIX only (see --help)%s", a, "");
    }
    if (!input || !prefix) {
        usage(stderr);
        return 2;
    }
    FILE *f = fopen(input, "rb");
    if (!f) return die("cannot open input '%s': %s", input, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return die("input '%s' is not a regular file%s", input, "");
    }
    int64_t size = (int64_t)st.st_size;
    if (size < 2) {
        fclose(f);
        return die("input '%s' is empty or a single byte; there is nothing to train on%s", input, "");
    }
    int64_t split = find_split(f, size, val_fraction);
    if (split < 2) {
        fclose(f);
        return die("--val-fraction leaves no training text in '%s' (hint: use a smaller fraction)%s", input, "");
    }
    int rc = write_part(f, 0, split, prefix, "train", shard_tokens);
    if (rc == 0 && split < size) rc = write_part(f, split, size, prefix, "val", shard_tokens);
    else if (rc == 0 && val_fraction > 0)
        fprintf(stderr, "mist-tokenize: warning: no validation data written (the text is too short for the fraction)\n");
    fclose(f);
    return rc;
}
