// CRC32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78), the
// checksum of iSCSI, ext4 and many storage formats; crc32c("123456789") = 0xE3069283.
// Uses the SSE4.2 crc32 instruction when the CPU has it, else slicing-by-8 tables.
#ifndef MIST_CHECKSUM_H
#define MIST_CHECKSUM_H
#include <stddef.h>
#include <stdint.h>

// Continue a CRC: crc32c_update(0, a) then crc32c_update(that, b) == crc32c of a||b.
uint32_t crc32c_update(uint32_t crc, const void *data, size_t bytes);
// The table-driven path only (tests check it agrees with the hardware path).
uint32_t crc32c_software_update(uint32_t crc, const void *data, size_t bytes);
static inline uint32_t crc32c(const void *data, size_t bytes) { return crc32c_update(0, data, bytes); }

#endif
