// Token shards in the llm.c format, so data prepared for llm.c works as is:
//
//   header: 256 int32 (1024 bytes), little-endian
//     [0] magic 20240520   [1] version 1   [2] number of tokens ntok   [3..255] zero
//   body:   ntok uint16 tokens
//
// file size must be exactly 1024 + 2*ntok. All offsets here are 64-bit (off_t
// with _FILE_OFFSET_BITS=64), so shards larger than 2 GiB read fine; the only
// size limit is the int32 token count in the header (< 2^31 tokens per shard).
#ifndef MIST_SHARD_H
#define MIST_SHARD_H
#include <stddef.h>
#include <stdint.h>

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)
#define SHARD_MAX_TOKENS INT32_MAX

// Reads and validates PATH's header against the file size.
// 0 and *ntok filled on success; -1 with err naming the file, what was expected,
// what was found and a hint on a missing file, bad magic/version or wrong size.
int shard_read_header(const char *path, int64_t *ntok, char *err, size_t errlen);

// The first position in TOKENS[0..n) holding a value >= vocab, or -1 if none.
int64_t shard_find_bad_token(const uint16_t *tokens, int64_t n, int vocab);

// Streaming writer: open, append tokens, close (which fills in the header).
// Writes PATH.tmp and renames it over PATH on close, so an interrupted run
// never leaves a shard that looks complete.
typedef struct ShardWriter ShardWriter;
ShardWriter *shard_writer_open(const char *path, char *err, size_t errlen);
int shard_writer_append(ShardWriter *w, const uint16_t *tokens, int64_t n, char *err, size_t errlen);
int64_t shard_writer_count(const ShardWriter *w);
int shard_writer_close(ShardWriter *w, char *err, size_t errlen);  // frees w in every case
void shard_writer_abort(ShardWriter *w);                           // removes PATH.tmp, frees w

// Convenience: write a whole shard from memory.
int shard_write(const char *path, const uint16_t *tokens, int64_t n, char *err, size_t errlen);

#endif
