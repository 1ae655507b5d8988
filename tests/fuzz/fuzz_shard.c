// Fuzz harness: llm.c token shards (runtime/shard.c, runtime/dataloader.c),
// what [data] train and val name. An accepted shard is opened by the data
// loader as mist-train opens it (sequences of 8 tokens, a vocabulary of 256):
// its tokens are checked at start (a bad one is found exactly when one exists)
// and the first and last samples and a micro-batch of a 2-rank order are read.
#include "runtime/dataloader.h"
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
    enum { T = 8 };  // shuffled or not: bit 0 of header byte 12 (a reserved field the reader ignores)
    DataLoader *dl;
    if (dataloader_open(&dl, path, T, 256, data[12] & 1, 1234, err, sizeof err) != 0) {
        if (!err[0]) abort();
        return 0;
    }
    if ((dataloader_scan(dl, err, sizeof err) != 0) != (bad >= 0)) {
        fprintf(stderr, "the start-up token check and shard_find_bad_token disagree (first bad token: %lld)\n",
                (long long)bad);
        abort();
    }
    int64_t n = dataloader_num_samples(dl);
    int32_t in[2 * T], tg[2 * T];
    if (n > 0) {
        dataloader_read(dl, 0, 1, in, tg, err, sizeof err);
        dataloader_read(dl, n - 1, 1, in, tg, err, sizeof err);
        if (dataloader_set_rank(dl, 4, 2, 2, 1, err, sizeof err) == 0) dataloader_next_batch(dl, 1, 0, in, tg, err, sizeof err);
    }
    dataloader_close(dl);
    return 0;
}
