// CRC32C: hardware (x86-64 SSE4.2) or slicing-by-8 software; both give the same bits.
#include "runtime/checksum.h"
#include <string.h>

static uint32_t table[8][256];
static int table_ready;

static void build_tables(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int s = 1; s < 8; s++) table[s][i] = (table[s - 1][i] >> 8) ^ table[0][table[s - 1][i] & 0xff];
    table_ready = 1;
}

// crc here is the raw register (already inverted by the caller)
static uint32_t crc_software(uint32_t crc, const unsigned char *p, size_t n) {
    if (!table_ready) build_tables();
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= crc;  // little-endian byte order, like the hardware instruction
        crc = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^ table[4][lo >> 24] ^
              table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^ table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
    return crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
__attribute__((target("sse4.2"))) static uint32_t crc_hardware(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = _mm_crc32_u8(c32, *p++);
    return c32;
}
static int have_sse42(void) {
    static int cached = -1;
    if (cached < 0) cached = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    return cached;
}
#endif

uint32_t crc32c_update(uint32_t crc, const void *data, size_t bytes) {
    const unsigned char *p = data;
    uint32_t c = ~crc;
#if defined(__x86_64__) && defined(__GNUC__)
    if (have_sse42()) return ~crc_hardware(c, p, bytes);
#endif
    return ~crc_software(c, p, bytes);
}

uint32_t crc32c_software_update(uint32_t crc, const void *data, size_t bytes) {
    return ~crc_software(~crc, data, bytes);
}
