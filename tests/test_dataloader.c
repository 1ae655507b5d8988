// Token shards and the data loader: header validation, sample windows across
// shard boundaries, epochs, the stateless shuffle, the per-rank training order
// (dp independence, exact resume), error messages, and 64-bit offsets (a
// sparse shard larger than 2 GiB).
#define _FILE_OFFSET_BITS 64
#define _XOPEN_SOURCE 700
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "runtime/dataloader.h"
#include "runtime/shard.h"
#include "tests/tap.h"

static char dir[256];

// the token at stream position p in the test data (below vocab 256)
static uint16_t token_at(int64_t p) { return (uint16_t)((p * 7 + 3) % 251); }

static void make_shard(const char *name, int64_t start, int64_t n) {
    uint16_t *t = malloc((size_t)(n ? n : 1) * 2);
    for (int64_t i = 0; i < n; i++) t[i] = token_at(start + i);
    char path[512], err[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (shard_write(path, t, n, err, sizeof err) != 0) diag("shard_write: %s", err);
    free(t);
}

static int open_dl(DataLoader **dl, const char *pattern, int T, int vocab, int shuffle, uint64_t seed, char *err, size_t len) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, pattern);
    return dataloader_open(dl, path, T, vocab, shuffle, seed, err, len);
}

// inputs/targets of sample `sample` must be the stream at sample*T (+1)
static int window_ok(const int32_t *in, const int32_t *tg, int64_t sample, int T) {
    for (int t = 0; t < T; t++)
        if (in[t] != token_at(sample * T + t) || tg[t] != token_at(sample * T + t + 1)) return 0;
    return 1;
}

static void test_windows(void) {
    // shards of 100, 0 and 57 tokens: 157 tokens, T = 8 -> 19 samples; sample 12 spans the boundary at 100
    make_shard("a_000.bin", 0, 100);
    make_shard("a_001.bin", 100, 0);
    make_shard("a_002.bin", 100, 57);
    DataLoader *dl;
    char err[1024] = "";
    int T = 8;
    ok(open_dl(&dl, "a_*.bin", T, 256, 0, 1, err, sizeof err) == 0, "open a glob of three shards (%s)", err);
    if (!dl) return;
    ok(dataloader_num_tokens(dl) == 157 && dataloader_num_shards(dl) == 3, "157 tokens in 3 shards");
    ok(dataloader_num_samples(dl) == (157 - 1) / 8, "num_samples = (ntok-1)/T = 19");
    int32_t in[4 * 8], tg[4 * 8];  // (count, T)
    ok(dataloader_read(dl, 11, 2, in, tg, err, sizeof err) == 0 && window_ok(in, tg, 11, T) && window_ok(in + T, tg + T, 12, T),
       "samples 11 and 12 (12 spans the shard boundary) are tokens[k*T .. k*T+T]");
    ok(dataloader_read(dl, 18, 3, in, tg, err, sizeof err) == 0 && window_ok(in, tg, 18, T) &&
       window_ok(in + T, tg + T, 0, T) && window_ok(in + 2 * T, tg + 2 * T, 1, T),
       "unshuffled: global sample 19 wraps to sample 0 of epoch 1");
    ok(dataloader_read(dl, -1, 1, in, tg, err, sizeof err) != 0, "negative first is rejected");
    dataloader_close(dl);

    // shuffle: each epoch is a permutation; epochs differ; seeds matter; reads match sample_of
    DataLoader *s1, *s2, *s3;
    open_dl(&s1, "a_*.bin", T, 256, 1, 42, err, sizeof err);
    open_dl(&s2, "a_*.bin", T, 256, 1, 42, err, sizeof err);
    open_dl(&s3, "a_*.bin", T, 256, 1, 43, err, sizeof err);
    int64_t n = dataloader_num_samples(s1);
    int perm_ok = 1, same_seed = 1, epochs_differ = 0, seeds_differ = 0, not_identity = 0;
    for (int e = 0; e < 3; e++) {
        int seen[19] = {0};
        for (int64_t i = 0; i < n; i++) {
            int64_t k = e * n + i, s = dataloader_sample_of(s1, k);
            if (s < 0 || s >= n || seen[s]++) perm_ok = 0;
            same_seed &= s == dataloader_sample_of(s2, k);
            seeds_differ |= s != dataloader_sample_of(s3, k);
            epochs_differ |= e > 0 && s != dataloader_sample_of(s1, i);
            not_identity |= s != i;
        }
    }
    ok(perm_ok, "shuffled: every epoch visits each sample exactly once");
    ok(same_seed && not_identity, "same seed -> same order on every loader (ranks agree), and it is not the identity");
    ok(epochs_differ && seeds_differ, "the order changes between epochs and between seeds");
    int reads_ok = 1;
    for (int64_t k = 0; k < 2 * n; k += 3) {
        dataloader_read(s1, k, 1, in, tg, err, sizeof err);
        reads_ok &= window_ok(in, tg, dataloader_sample_of(s1, k), T);
    }
    ok(reads_ok, "shuffled reads return the window of sample_of(k)");
    // resume: a fresh loader reading [first, first+count) in pieces gives the same batch as one read
    int32_t one[4 * 8], split[4 * 8], tg2[4 * 8];
    dataloader_read(s1, 25, 4, one, tg, err, sizeof err);
    dataloader_read(s2, 25, 1, split, tg2, err, sizeof err);
    dataloader_read(s2, 26, 3, split + T, tg2 + T, err, sizeof err);
    ok(memcmp(one, split, sizeof one) == 0 && memcmp(tg, tg2, sizeof tg) == 0,
       "a batch read at once equals the same samples read in pieces by another loader");
    dataloader_close(s1);
    dataloader_close(s2);
    dataloader_close(s3);
}

// The training order: for dp = 1, 2, 4 (same global batch), the sequences of all
// ranks' micro-batches of an iteration, taken together, are the same multiset,
// and they are exactly the samples [it*global_batch, (it+1)*global_batch).
static void test_rank_order(void) {
    DataLoader *dl[3];
    char err[1024] = "";
    const int T = 8, b_of[3] = {4, 2, 1}, dp_of[3] = {1, 2, 4};
    const int64_t global_batch = 8;  // b*dp = 4 -> G = 2 micro-batches at every dp
    int opened = 1;
    for (int c = 0; c < 3; c++) opened &= open_dl(&dl[c], "a_*.bin", T, 256, 1, 5, err, sizeof err) == 0;
    ok(opened, "three shuffled loaders open (%s)", err);
    if (!opened) return;
    int bad_rank = dataloader_set_rank(dl[0], 6, 4, 1, 0, err, sizeof err) != 0 && strstr(err, "multiple of b*dp");
    ok(bad_rank, "global_batch 6 with b*dp = 4 is rejected with the rule in the message");
    int64_t n = dataloader_num_samples(dl[0]);
    int same = 1, expected = 1, shaped = 1;
    for (int64_t it = 0; it < 6; it++) {  // 6 iterations of 8 samples wrap around the 19-sample data twice
        int64_t seen[3][8];               // per configuration: the sample index of each sequence read, sorted later
        for (int c = 0; c < 3; c++) {
            int count = 0;
            for (int r = 0; r < dp_of[c]; r++) {
                dataloader_set_rank(dl[c], global_batch, b_of[c], dp_of[c], r, err, sizeof err);
                shaped &= dataloader_micro_batches(dl[c]) == 2;
                for (int g = 0; g < 2; g++) {
                    int32_t in[4 * 8], tg[4 * 8];  // (b, T)
                    if (dataloader_next_batch(dl[c], it, g, in, tg, err, sizeof err) != 0) { same = 0; continue; }
                    for (int i = 0; i < b_of[c]; i++) {
                        // identify the sequence by its first token position: find the sample whose window matches
                        int64_t found = -1;
                        for (int64_t s = 0; s < n && found < 0; s++)
                            if (window_ok(in + i * T, tg + i * T, s, T)) found = s;
                        seen[c][count++] = found;
                    }
                }
            }
            for (int i = 1; i < 8; i++)  // insertion sort: the union does not depend on which rank read what
                for (int j = i; j > 0 && seen[c][j - 1] > seen[c][j]; j--) {
                    int64_t t = seen[c][j]; seen[c][j] = seen[c][j - 1]; seen[c][j - 1] = t;
                }
        }
        int64_t want[8];
        for (int k = 0; k < 8; k++) want[k] = dataloader_sample_of(dl[0], it * global_batch + k);
        for (int i = 1; i < 8; i++)
            for (int j = i; j > 0 && want[j - 1] > want[j]; j--) { int64_t t = want[j]; want[j] = want[j - 1]; want[j - 1] = t; }
        for (int k = 0; k < 8; k++) {
            same &= seen[0][k] == seen[1][k] && seen[0][k] == seen[2][k];
            expected &= seen[0][k] == want[k];
        }
    }
    ok(shaped, "G = global_batch / (b*dp) = 2 micro-batches at dp = 1, 2, 4");
    ok(same, "dp = 1, 2, 4: the union of the ranks' sequences of every iteration is identical");
    ok(expected, "... and it is the global samples [it*global_batch, (it+1)*global_batch) of the (shuffled) stream");
    // the rule itself, on one rank: rank 1 of dp 2, b 2, micro-batch 1 of iteration 3 starts at 3*8 + 1*4 + 1*2 = 30
    int32_t in[2 * 8], tg[2 * 8], ref_in[2 * 8], ref_tg[2 * 8];
    dataloader_set_rank(dl[1], global_batch, 2, 2, 1, err, sizeof err);
    int rule = dataloader_first_sample(3, 1, global_batch, 2, 2, 1) == 30 &&
               dataloader_next_batch(dl[1], 3, 1, in, tg, err, sizeof err) == 0 &&
               dataloader_read(dl[1], 30, 2, ref_in, ref_tg, err, sizeof err) == 0 &&
               memcmp(in, ref_in, sizeof in) == 0 && memcmp(tg, ref_tg, sizeof tg) == 0;
    ok(rule, "rank 1 of dp 2, b 2, micro-batch 1 of iteration 3 reads samples 30, 31");
    ok(dataloader_position(dl[1], 3) == 24, "position before iteration 3 is 3 * global_batch = 24");

    // exact resume: a fresh loader (as after a restart) gives iteration 4 the same batches as one that ran 0..4
    DataLoader *fresh;
    open_dl(&fresh, "a_*.bin", T, 256, 1, 5, err, sizeof err);
    dataloader_set_rank(fresh, global_batch, 2, 2, 1, err, sizeof err);
    int resumed = 1;
    for (int64_t it = 0; it < 5; it++)
        for (int g = 0; g < 2; g++) dataloader_next_batch(dl[1], it, g, ref_in, ref_tg, err, sizeof err);
    for (int g = 0; g < 2; g++) {
        dataloader_next_batch(dl[1], 4, g, ref_in, ref_tg, err, sizeof err);
        resumed &= dataloader_next_batch(fresh, 4, g, in, tg, err, sizeof err) == 0 &&
                   memcmp(in, ref_in, sizeof in) == 0 && memcmp(tg, ref_tg, sizeof tg) == 0;
    }
    ok(resumed, "resume: a new loader reads iteration 4 exactly as the loader that ran iterations 0..4");
    ok(dataloader_next_batch(fresh, 0, 2, in, tg, err, sizeof err) != 0 && strstr(err, "micro-batch 2"),
       "micro-batch index G is out of range");
    dataloader_close(fresh);
    for (int c = 0; c < 3; c++) dataloader_close(dl[c]);
}

static void test_permutation_sizes(void) {
    static const int64_t sizes[] = {1, 2, 3, 5, 17, 64, 1000, 4097};
    int good = 1;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        int64_t n = sizes[i];
        char *seen = calloc((size_t)n, 1);
        for (int64_t k = 0; k < n; k++) {
            int64_t p = dataloader_permute(k, n, 7, 3);
            if (p < 0 || p >= n || seen[p]++) good = 0;
        }
        free(seen);
    }
    ok(good, "dataloader_permute is a bijection of [0, n) for n = 1, 2, 3, 5, 17, 64, 1000, 4097");
}

static void write_raw(const char *name, const int32_t *header, const uint16_t *tokens, int64_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    fwrite(header, 4, SHARD_HEADER_INTS, f);
    if (n) fwrite(tokens, 2, (size_t)n, f);
    fclose(f);
}

static void test_errors(void) {
    DataLoader *dl = NULL;
    char err[1024];
    int32_t h[SHARD_HEADER_INTS] = {SHARD_MAGIC, SHARD_VERSION, 50};
    uint16_t t[50];
    for (int i = 0; i < 50; i++) t[i] = token_at(i);

    write_raw("truncated.bin", h, t, 49);  // header says 50 tokens, file holds 49
    ok(open_dl(&dl, "truncated.bin", 4, 256, 0, 0, err, sizeof err) != 0 && strstr(err, "truncated.bin") &&
       strstr(err, "1122") && strstr(err, "1124") && strstr(err, "truncated") && strstr(err, "mist-tokenize"),
       "truncated shard: names the file, actual (1122) and expected (1124) size, and a hint");
    diag("%s", err);

    int32_t bad[SHARD_HEADER_INTS] = {12345, SHARD_VERSION, 50};
    write_raw("badmagic.bin", bad, t, 50);
    ok(open_dl(&dl, "badmagic.bin", 4, 256, 0, 0, err, sizeof err) != 0 && strstr(err, "badmagic.bin") &&
       strstr(err, "12345") && strstr(err, "20240520"), "bad magic: names the file, the value found and the one expected");

    int32_t v2[SHARD_HEADER_INTS] = {SHARD_MAGIC, 2, 50};
    write_raw("v2.bin", v2, t, 50);
    ok(open_dl(&dl, "v2.bin", 4, 256, 0, 0, err, sizeof err) != 0 && strstr(err, "version 2"), "unknown version is rejected");

    t[37] = 300;
    write_raw("bigtoken.bin", h, t, 50);
    ok(open_dl(&dl, "bigtoken.bin", 4, 256, 0, 0, err, sizeof err) == 0, "a shard with a token >= vocab opens (tokens are checked when read)");
    int32_t in[4 * 12], tg[4 * 12];  // (count, T)
    ok(dl && dataloader_read(dl, 8, 2, in, tg, err, sizeof err) != 0 && strstr(err, "bigtoken.bin") &&
       strstr(err, "token 37") && strstr(err, "is 300") && strstr(err, "256"),
       "token >= vocab: names the file, the position (37) and the value (300)");
    diag("%s", err);
    ok(dl && dataloader_read(dl, 0, 2, in, tg, err, sizeof err) == 0, "samples without the bad token still read");
    ok(dl && dataloader_scan(dl, err, sizeof err) != 0 && strstr(err, "token 37"), "dataloader_scan finds it too");
    dataloader_close(dl);
    dl = NULL;

    ok(open_dl(&dl, "nothing_*.bin", 4, 256, 0, 0, err, sizeof err) != 0 && strstr(err, "no token shard matches") &&
       strstr(err, "nothing_*.bin"), "a pattern matching nothing is an error naming the pattern");
    ok(open_dl(&dl, "missing.bin", 4, 256, 0, 0, err, sizeof err) != 0 && strstr(err, "missing.bin") &&
       strstr(err, "No such file"), "a missing file: names it and says why");
    diag("%s", err);
    char empty[512];
    snprintf(empty, sizeof empty, "%s/empty.bin", dir);
    FILE *ef = fopen(empty, "wb");
    if (ef) fclose(ef);
    ok(open_dl(&dl, "empty.bin", 4, 256, 0, 0, err, sizeof err) != 0 && strstr(err, "empty.bin") && strstr(err, "0 bytes") &&
       strstr(err, "1024-byte header"), "an empty file: names it, its size and the header size");
    diag("%s", err);
    write_raw("zero.bin", (int32_t[SHARD_HEADER_INTS]){SHARD_MAGIC, SHARD_VERSION, 0}, t, 0);
    ok(open_dl(&dl, "zero.bin", 4, 256, 0, 0, err, sizeof err) != 0 && strstr(err, "fewer than one sample"),
       "a valid shard with 0 tokens has no sample to train on");
    write_raw("short.bin", (int32_t[SHARD_HEADER_INTS]){SHARD_MAGIC, SHARD_VERSION, 4}, t, 4);
    ok(open_dl(&dl, "short.bin", 4, 256, 0, 0, err, sizeof err) != 0 && strstr(err, "fewer than one sample"),
       "fewer than T+1 tokens is an error");
    ok(open_dl(&dl, "a_000.bin", 0, 256, 0, 0, err, sizeof err) != 0, "T = 0 is rejected");
}

// A sparse shard of 1.2e9 tokens (2.4 GB on paper, a few KB on disk): samples past 2 GiB read correctly.
static void test_large_offsets(void) {
    char path[512], err[1024];
    snprintf(path, sizeof path, "%s/huge.bin", dir);
    const int64_t ntok = 1200000000;
    int32_t h[SHARD_HEADER_INTS] = {SHARD_MAGIC, SHARD_VERSION, (int32_t)ntok};
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int made = fd >= 0 && write(fd, h, sizeof h) == (ssize_t)sizeof h && ftruncate(fd, SHARD_HEADER_BYTES + 2 * ntok) == 0;
    const int T = 16;
    int64_t sample = (ntok - 1) / T - 1;  // near the end: byte offset ~2.4e9 > 2^31
    uint16_t tail[T + 1];
    for (int i = 0; i <= T; i++) tail[i] = (uint16_t)(100 + i);
    made = made && pwrite(fd, tail, sizeof tail, (off_t)SHARD_HEADER_BYTES + 2 * (off_t)(sample * T)) == (ssize_t)sizeof tail;
    if (fd >= 0) close(fd);
    if (!made) {
        tap_skip("cannot create a sparse 2.4 GB file here");
        unlink(path);
        return;
    }
    DataLoader *dl;
    int32_t in[T], tg[T];
    int good = dataloader_open(&dl, path, T, 256, 0, 0, err, sizeof err) == 0 &&
               dataloader_read(dl, sample, 1, in, tg, err, sizeof err) == 0;
    for (int i = 0; good && i < T; i++) good = in[i] == 100 + i && tg[i] == 101 + i;
    ok(good, "a sample at byte offset %lld (> 2 GiB) reads correctly (%s)",
       (long long)(SHARD_HEADER_BYTES + 2 * sample * T), good ? "ok" : err);
    if (good) dataloader_close(dl);
    unlink(path);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/mist_test_dataloader_XXXXXX");
    if (!mkdtemp(dir)) tap_skip_all("cannot create a temporary directory");
    test_windows();
    test_rank_order();
    test_permutation_sizes();
    test_errors();
    test_large_offsets();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) diag("could not remove %s", dir);
    return tap_done();
}
