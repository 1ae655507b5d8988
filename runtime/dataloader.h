// Token data for training: a file or glob of llm.c shards (runtime/shard.h),
// viewed as one concatenated token stream and cut into samples.
//
// A sample is T+1 consecutive tokens (inputs = the first T, targets = the last
// T); sample i is tokens[i*T .. i*T+T] of the concatenated shards, so
// neighbouring samples share one token and num_samples = (ntok - 1) / T.
// Samples may span shard boundaries.
//
// Reads are addressed by a global sample counter k over an endless stream of
// epochs: k maps to epoch k / num_samples and position k % num_samples, which
// (with shuffle on) goes through a permutation keyed by (seed, epoch). The
// mapping is a pure function of k, so every rank computes the same one and a
// resumed run needs only k (no loader state in the checkpoint). The training
// loop reads global samples
//     first = iteration * global_batch + g * (b * dp) + r * b,   count = b
// for micro-step g on data-parallel rank r, so every plan sees the same global
// batch and resume is exact.
#ifndef MIST_DATALOADER_H
#define MIST_DATALOADER_H
#include <stddef.h>
#include <stdint.h>

typedef struct DataLoader DataLoader;

// pattern: a file or a glob (matches are sorted by name). Every shard header is
// validated (magic, version, size). vocab: the model's vocabulary; a token
// >= vocab is reported by dataloader_read. Returns 0, or -1 with err filled.
int dataloader_open(DataLoader **out, const char *pattern, int T, int vocab, int shuffle,
                    uint64_t seed, char *err, size_t errlen);
int64_t dataloader_num_samples(const DataLoader *dl);
int64_t dataloader_num_tokens(const DataLoader *dl);
int dataloader_num_shards(const DataLoader *dl);

// Fill inputs/targets, each (count, T) int32 row-major, with global samples
// [first, first+count). Returns 0, or -1 with err naming the file, the position
// and the value of a token >= vocab, or an I/O error.
int dataloader_read(DataLoader *dl, int64_t first, int count, int32_t *inputs, int32_t *targets,
                    char *err, size_t errlen);

// Which sample of the data (0..num_samples-1) global sample k reads.
int64_t dataloader_sample_of(const DataLoader *dl, int64_t k);

// Read every token once and check it is < vocab (reads the whole data set;
// mist-train runs it at start). 0 ok, -1 with err naming the shard, the token's
// index and byte offset.
int dataloader_scan(DataLoader *dl, char *err, size_t errlen);

// ---- the training order (what mist-train calls) ----
// The global sample index where micro-batch g of iteration `it` starts on DP
// rank r, with b sequences per micro-batch and global_batch = b * dp * G:
//     first = it * global_batch + g * (b * dp) + r * b
// Micro-batch g of all dp ranks together covers b*dp consecutive samples, so
// the union over ranks (and the loss averaged over them) is the same for any dp.
static inline int64_t dataloader_first_sample(int64_t it, int g, int64_t global_batch, int b, int dp, int r) {
    return it * global_batch + (int64_t)g * b * dp + (int64_t)r * b;
}

// Fix this rank's place in the order: b sequences per micro-batch, DP rank r
// of dp, global_batch sequences per iteration (a multiple of b*dp; G =
// global_batch / (b*dp) micro-batches). 0, or -1 with err naming the values.
int dataloader_set_rank(DataLoader *dl, int64_t global_batch, int b, int dp, int r, char *err, size_t errlen);
// Micro-batch g (0..G-1) of iteration `it` (0-based) for this rank: inputs and
// targets, each (b, T) int32. A pure function of (it, g): resuming at any
// iteration needs no loader state. 0, or -1 with err filled.
int dataloader_next_batch(DataLoader *dl, int64_t it, int g, int32_t *inputs, int32_t *targets, char *err, size_t errlen);
// Global samples consumed before iteration `it` (it * global_batch); stored in
// checkpoints as a cross-check of the resume position.
int64_t dataloader_position(const DataLoader *dl, int64_t it);
// Micro-batches per iteration G (after dataloader_set_rank; 0 before).
int dataloader_micro_batches(const DataLoader *dl);

void dataloader_close(DataLoader *dl);

// The permutation of [0, n) used for epoch shuffling: a 4-round Feistel network
// on the next even power of two >= n, keyed by (seed, epoch), with cycle walking
// to stay inside [0, n). O(1) memory for any data size; a bijection by construction.
int64_t dataloader_permute(int64_t i, int64_t n, uint64_t seed, int64_t epoch);

#endif
