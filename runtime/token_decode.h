// Token ids -> text for sampling: the byte tokenizer (token = byte value, the
// vocabulary of mist-tokenize), or an llm.c GPT-2 tokenizer file
// (gpt2_tokenizer.bin: 256 uint32 header, magic 20240328, version 1 or 2,
// vocabulary size, and with version 2 the end-of-text id; then per token one
// length byte and that many bytes). The file only decodes: GPT-2's BPE merges
// are not in it, so a prompt is text only with the byte tokenizer.
#ifndef MIST_TOKEN_DECODE_H
#define MIST_TOKEN_DECODE_H
#include <stddef.h>
#include <stdint.h>

#define GPT2_TOKENIZER_MAGIC 20240328

typedef struct {
    int vocab;          // tokens the table holds (256 for bytes)
    int eot;            // end-of-text id, -1 when none
    unsigned char **piece;  // (vocab) bytes of each token; NULL for the byte tokenizer
    unsigned char *len;     // (vocab)
} TokenDecoder;

// PATH NULL: the byte tokenizer. 0, or -1 with err (wrong magic or version, truncated).
int token_decoder_open(TokenDecoder *d, const char *path, char *err, size_t errlen);
// The bytes of token id (an id outside the table decodes to nothing: *len = 0).
const unsigned char *token_decoder_piece(const TokenDecoder *d, int id, size_t *len);
void token_decoder_close(TokenDecoder *d);

#endif
