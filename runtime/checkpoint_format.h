// Internal to checkpoint.c / checkpoint_read.c: the on-disk header and index
// entry, and their (de)serialization. Fields are stored little-endian at fixed
// byte offsets (the host is assumed little-endian, as on x86-64 and aarch64).
#ifndef MIST_CHECKPOINT_FORMAT_H
#define MIST_CHECKPOINT_FORMAT_H
#include <stdint.h>
#include <string.h>
#include "runtime/checkpoint.h"

enum { CKPT_KIND_TENSOR = 0, CKPT_KIND_BLOB = 1 };

typedef struct {
    uint32_t version;
    int64_t step;
    uint64_t count;         // entries in the index
    uint64_t index_offset;  // where the index starts
    uint64_t file_bytes;    // total file size
    uint32_t index_crc;     // CRC32C of the index bytes
    uint32_t body_crc;      // CRC32C of bytes [64, file_bytes)
    uint32_t header_crc;    // CRC32C of header bytes [0, 60)
} CkptHeader;

typedef struct {
    char name[CKPT_NAME_MAX];
    uint32_t kind, dtype, ndim, crc;
    int64_t shape[CKPT_MAX_DIMS];
    uint64_t offset, bytes;
} CkptEntry;

//  header bytes: 0 magic[8] | 8 version u32 | 12 header_bytes u32 | 16 step i64 | 24 count u64 |
//  32 index_offset u64 | 40 file_bytes u64 | 48 index_crc u32 | 52 body_crc u32 | 56 reserved u32 |
//  60 header_crc u32
static inline void ckpt_header_encode(const CkptHeader *h, unsigned char *b) {
    uint32_t header_bytes = CKPT_HEADER_BYTES, reserved = 0;
    memset(b, 0, CKPT_HEADER_BYTES);
    memcpy(b + 0, CKPT_MAGIC, 8);
    memcpy(b + 8, &h->version, 4);
    memcpy(b + 12, &header_bytes, 4);
    memcpy(b + 16, &h->step, 8);
    memcpy(b + 24, &h->count, 8);
    memcpy(b + 32, &h->index_offset, 8);
    memcpy(b + 40, &h->file_bytes, 8);
    memcpy(b + 48, &h->index_crc, 4);
    memcpy(b + 52, &h->body_crc, 4);
    memcpy(b + 56, &reserved, 4);
    memcpy(b + 60, &h->header_crc, 4);
}

static inline void ckpt_header_decode(const unsigned char *b, CkptHeader *h) {
    memcpy(&h->version, b + 8, 4);
    memcpy(&h->step, b + 16, 8);
    memcpy(&h->count, b + 24, 8);
    memcpy(&h->index_offset, b + 32, 8);
    memcpy(&h->file_bytes, b + 40, 8);
    memcpy(&h->index_crc, b + 48, 4);
    memcpy(&h->body_crc, b + 52, 4);
    memcpy(&h->header_crc, b + 60, 4);
}

//  entry bytes: 0 name[128] (NUL-padded) | 128 kind u32 | 132 dtype u32 | 136 ndim u32 | 140 crc u32 |
//  144 shape i64[8] | 208 offset u64 | 216 bytes u64
static inline void ckpt_entry_encode(const CkptEntry *e, unsigned char *b) {
    memset(b, 0, CKPT_ENTRY_BYTES);
    memcpy(b, e->name, strnlen(e->name, CKPT_NAME_MAX - 1));
    memcpy(b + 128, &e->kind, 4);
    memcpy(b + 132, &e->dtype, 4);
    memcpy(b + 136, &e->ndim, 4);
    memcpy(b + 140, &e->crc, 4);
    memcpy(b + 144, e->shape, 8 * CKPT_MAX_DIMS);
    memcpy(b + 208, &e->offset, 8);
    memcpy(b + 216, &e->bytes, 8);
}

static inline void ckpt_entry_decode(const unsigned char *b, CkptEntry *e) {
    memcpy(e->name, b, CKPT_NAME_MAX);
    memcpy(&e->kind, b + 128, 4);
    memcpy(&e->dtype, b + 132, 4);
    memcpy(&e->ndim, b + 136, 4);
    memcpy(&e->crc, b + 140, 4);
    memcpy(e->shape, b + 144, 8 * CKPT_MAX_DIMS);
    memcpy(&e->offset, b + 208, 8);
    memcpy(&e->bytes, b + 216, 8);
}

#endif
