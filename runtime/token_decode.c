// Token decoding: bytes, or an llm.c GPT-2 tokenizer file (runtime/token_decode.h).
#include "runtime/token_decode.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char BYTES[256];

int token_decoder_open(TokenDecoder *d, const char *path, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    d->eot = -1;
    if (!path) {
        for (int i = 0; i < 256; i++) BYTES[i] = (unsigned char)i;
        d->vocab = 256;
        return 0;
    }
    FILE *f = fopen(path, "rb");
    uint32_t h[256];
    if (!f) {
        snprintf(err, errlen, "cannot open tokenizer '%s': %s", path, strerror(errno));
        return -1;
    }
    const char *why = NULL;
    if (fread(h, 4, 256, f) != 256) why = "it is shorter than the 1024-byte header";
    else if (h[0] != GPT2_TOKENIZER_MAGIC) why = "its magic number is not 20240328";
    else if (h[1] != 1 && h[1] != 2) why = "its version is not 1 or 2";
    else if (h[2] == 0 || h[2] > (1u << 24)) why = "its vocabulary size is 0 or over 16M";
    if (why) {
        snprintf(err, errlen, "'%s' is not an llm.c GPT-2 tokenizer file: %s (hint: --tokenizer takes llm.c's "
                 "gpt2_tokenizer.bin; leave it out for the byte tokenizer)", path, why);
        fclose(f);
        return -1;
    }
    d->vocab = (int)h[2];
    d->eot = h[1] == 2 ? (int)h[3] : -1;
    d->piece = calloc((size_t)d->vocab, sizeof *d->piece);
    d->len = calloc((size_t)d->vocab, 1);
    for (int i = 0; i < d->vocab && d->piece && d->len; i++) {
        unsigned char n;
        if (fread(&n, 1, 1, f) != 1 || !(d->piece[i] = malloc(n ? n : 1)) || fread(d->piece[i], 1, n, f) != n) {
            snprintf(err, errlen, "tokenizer '%s' is truncated at token %d of %d (hint: re-download it)", path, i,
                     d->vocab);
            fclose(f);
            token_decoder_close(d);
            return -1;
        }
        d->len[i] = n;
    }
    fclose(f);
    if (!d->piece || !d->len) {
        snprintf(err, errlen, "out of host memory for tokenizer '%s'", path);
        token_decoder_close(d);
        return -1;
    }
    return 0;
}

const unsigned char *token_decoder_piece(const TokenDecoder *d, int id, size_t *len) {
    *len = 0;
    if (id < 0 || id >= d->vocab) return BYTES;
    if (!d->piece) {
        *len = 1;
        return &BYTES[id];
    }
    *len = d->len[id];
    return d->piece[id];
}

void token_decoder_close(TokenDecoder *d) {
    if (d->piece)
        for (int i = 0; i < d->vocab; i++) free(d->piece[i]);
    free(d->piece);
    free(d->len);
    memset(d, 0, sizeof *d);
}
