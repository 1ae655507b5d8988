// Element types shared by kernels, comm and checkpoints.
#ifndef MIST_DTYPE_H
#define MIST_DTYPE_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum { MIST_F32 = 0, MIST_BF16 = 1, MIST_F16 = 2, MIST_I32 = 3, MIST_U8 = 4 } MistDtype;

static inline size_t mist_dtype_size(MistDtype t) {
    switch (t) {
    case MIST_F32: case MIST_I32: return 4;
    case MIST_BF16: case MIST_F16: return 2;
    default: return 1;
    }
}

static inline const char *mist_dtype_name(MistDtype t) {
    static const char *names[] = {"f32", "bf16", "f16", "i32", "u8"};
    return (unsigned)t < 5 ? names[t] : "?";
}

// bf16 is the top half of an IEEE fp32. Rounding is round-to-nearest-even so
// that CPU and GPU agree bit for bit on conversions; NaN stays NaN.
static inline uint16_t mist_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float mist_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
