// Fuzz harness: llm.c token shard headers (runtime/shard.c), what [data]
// train and val name. An accepted shard's tokens are scanned for ones outside
// the vocabulary, as the data loader does at start.
#include "runtime/shard.h"
#include "tests/fuzz/fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write("shard.bin", data, size);
    int64_t ntok = -1;
    char err[2048];
    if (shard_read_header(path, &ntok, err, sizeof err) != 0) {
        if (!err[0]) abort();
        return 0;
    }
    // the header's count agrees with the file: exactly ntok uint16 after the header
    if (ntok < 0 || (size_t)ntok * 2 + SHARD_HEADER_BYTES != size) abort();
    uint16_t *tokens = malloc((size_t)ntok * 2 + 1);
    memcpy(tokens, data + SHARD_HEADER_BYTES, (size_t)ntok * 2);
    int64_t bad = shard_find_bad_token(tokens, ntok, 256);
    if (bad >= ntok || (bad >= 0 && tokens[bad] < 256)) abort();
    free(tokens);
    return 0;
}
