// mist-tokenize: text -> llm.c token shards with the byte-level tokenizer
// (token = byte value, vocabulary 256; runtime/tokenize.h). Splits the text
// into a training part (the first 1-F) and a validation part (the rest),
// each cut into shards.
#include <config.h>  // PACKAGE_VERSION
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "runtime/shard.h"  // SHARD_MAX_TOKENS
#include "runtime/tokenize.h"

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
            "  -V, --version      print the version and exit\n"
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

int main(int argc, char **argv) {
    double val_fraction = 0.1;
    long long shard_tokens = 100000000;
    const char *input = NULL, *prefix = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "-V") || !strcmp(a, "--version")) { printf("mist-tokenize (mist) %s\n", PACKAGE_VERSION); return 0; }
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
    char err[1024];
    int no_val;
    // the shards' directory is created when missing: say so, a typo in it would otherwise go unseen
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", prefix);
    char *slash = strrchr(dir, '/');
    struct stat st;
    int created = slash && slash != dir && (*slash = 0, stat(dir, &st) != 0);
    if (tokenize_text_file(input, prefix, val_fraction, shard_tokens, stdout, &no_val, err, sizeof err) != 0)
        return die("%s%s", err, "");
    if (created) fprintf(stderr, "mist-tokenize: created the directory '%s' for the shards\n", dir);
    if (no_val)
        fprintf(stderr, "mist-tokenize: warning: no validation data written (the text is too short for the fraction)\n");
    return 0;
}
