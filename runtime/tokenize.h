// Text -> llm.c token shards with the byte-level tokenizer (token = byte
// value, vocabulary 256): the training part is the first 1-F of the text, the
// validation part the rest, each cut into shards of at most shard_tokens
// (runtime/shard.h) named PREFIX_train.bin / PREFIX_val.bin, or
// PREFIX_train_000.bin, ... when a part takes several.
#ifndef MIST_TOKENIZE_H
#define MIST_TOKENIZE_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// Tokenizes `input` into shards of `prefix`, a line "wrote PATH: N tokens" on
// `out` per shard. The validation part starts at (1-F) of the text, moved
// forward past the next blank line (a paragraph). Returns 0 (*no_val: F > 0
// yet the text was too short for validation data), or 2 with err.
int tokenize_text_file(const char *input, const char *prefix, double val_fraction, int64_t shard_tokens, FILE *out,
                       int *no_val, char *err, size_t errlen);

#endif
