// Memory arenas with accounting. An arena is one allocation made once, before
// step 0, and carved into tensors by offset (llm.c style: the layout is fixed,
// nothing is allocated while training). Two kinds, after the backend's split
// of *where memory lives*: device memory, and pinned host memory.
//
// Accounting is about what the run really holds, not what was reserved: a
// tensor counts as live from arena_take() until arena_release(). The arena
// keeps the live byte count and its high-water mark, which is the *measured*
// peak that the planner's prediction is checked against. Live bytes count the
// tensors' own sizes; the alignment padding between carved tensors is part of
// the reservation only (arena_reserved_bytes), so a prediction written as a
// sum of tensor sizes can agree with the measurement to the byte.
//
// Use:
//   Arena a; arena_init(&a, "device", ARENA_DEVICE);
//   ArenaTensor t; arena_carve(&a, &t, bytes, "acts.block0");   // plan: offsets only
//   arena_reserve(&a, backend, err, len);                        // one allocation
//   float *p = arena_take(&t); ... arena_release(&t);            // during the run
#ifndef MIST_ARENA_H
#define MIST_ARENA_H
#include <stddef.h>
#include <stdint.h>

struct Backend;

typedef enum { ARENA_DEVICE = 0, ARENA_HOST = 1 } ArenaKind;

#define ARENA_ALIGN 256  // every carved tensor starts on a 256-byte boundary (cuBLAS, vector loads)

typedef struct Arena {
    const char *name;         // "device" or "host", for messages
    ArenaKind kind;
    struct Backend *backend;  // owns the memory once reserved
    unsigned char *base;      // NULL until arena_reserve
    size_t carved;            // bytes laid out so far (with alignment padding)
    size_t tensor_bytes;      // sum of the carved tensors' own sizes
    size_t live, peak;        // bytes held now / at most so far (tensor sizes, no padding)
    int64_t takes;            // arena_take calls so far (tests, sanity)
} Arena;

typedef struct ArenaTensor {
    Arena *arena;
    size_t offset, bytes;
    const char *what;         // a name for messages ("acts.block3")
    int live;
} ArenaTensor;

void arena_init(Arena *a, const char *name, ArenaKind kind);
// Lay out a tensor of `bytes` bytes at the next aligned offset. Only before arena_reserve.
void arena_carve(Arena *a, ArenaTensor *t, size_t bytes, const char *what);
// One allocation of everything carved (device or pinned memory of `b`). 0, or -1 with err
// naming the arena and the size. A 0-byte arena reserves nothing and succeeds.
int arena_reserve(Arena *a, struct Backend *b, char *err, size_t errlen);
void arena_free(Arena *a);

// Mark t live and return its memory. Taking a live tensor, or one of an arena that is not
// reserved, is a programming error: it prints the tensor's name and aborts.
void *arena_take(ArenaTensor *t);
void arena_release(ArenaTensor *t);
// The memory of t whether or not it is live (for reading a tensor another phase holds).
void *arena_ptr(const ArenaTensor *t);

size_t arena_reserved_bytes(const Arena *a);
size_t arena_live_bytes(const Arena *a);
size_t arena_peak_bytes(const Arena *a);
// Forget the high-water mark (peak = live now): to measure one phase on its own.
void arena_reset_peak(Arena *a);

#endif
