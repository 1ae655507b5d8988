// Arena accounting: carving is aligned, live/peak count tensor sizes only,
// and misuse is caught.
#include <stdint.h>
#include <string.h>
#include "kernels/backend.h"
#include "runtime/arena.h"
#include "tests/tap.h"

int main(void) {
    char err[256];
    Backend *be = backend_cpu_create(MIST_F32, err, sizeof err);
    if (!be) tap_skip_all(err);
    Arena a;
    arena_init(&a, "device", ARENA_DEVICE);
    ArenaTensor t1, t2, t3, empty;
    arena_carve(&a, &t1, 100, "t1");
    arena_carve(&a, &t2, 1000, "t2");
    arena_carve(&a, &empty, 0, "empty");
    arena_carve(&a, &t3, 4, "t3");
    ok(t1.offset == 0 && t2.offset % ARENA_ALIGN == 0 && t3.offset % ARENA_ALIGN == 0,
       "carved tensors start on %d-byte boundaries (%zu, %zu, %zu)", ARENA_ALIGN, t1.offset, t2.offset, t3.offset);
    ok(t2.offset >= t1.offset + 100 && t3.offset >= t2.offset + 1000, "carved tensors do not overlap");
    ok(a.tensor_bytes == 1104, "tensor bytes = sum of sizes (%zu)", a.tensor_bytes);
    ok(arena_reserved_bytes(&a) == t3.offset + 4 && arena_reserved_bytes(&a) > 1104,
       "reservation includes alignment padding (%zu)", arena_reserved_bytes(&a));
    ok(arena_reserve(&a, be, err, sizeof err) == 0, "reserve succeeds");
    ok(arena_live_bytes(&a) == 0 && arena_peak_bytes(&a) == 0, "nothing live before the first take");
    unsigned char *p1 = arena_take(&t1);
    unsigned char *p2 = arena_take(&t2);
    memset(p1, 1, 100);
    memset(p2, 2, 1000);
    ok(p2 - p1 == (ptrdiff_t)t2.offset, "take returns base + offset");
    ok(arena_live_bytes(&a) == 1100 && arena_peak_bytes(&a) == 1100, "live = peak = 1100 after two takes");
    arena_release(&t1);
    ok(arena_live_bytes(&a) == 1000 && arena_peak_bytes(&a) == 1100, "release lowers live, keeps the peak");
    arena_take(&t3);
    arena_take(&empty);
    ok(arena_live_bytes(&a) == 1004 && arena_peak_bytes(&a) == 1100, "peak is the high-water mark, not the sum");
    arena_take(&t1);
    ok(arena_peak_bytes(&a) == 1104, "peak rises when everything is live (%zu)", arena_peak_bytes(&a));
    arena_release(&t1);
    arena_reset_peak(&a);
    ok(arena_peak_bytes(&a) == 1004, "reset_peak sets the peak to the live bytes");
    ok(a.takes == 5, "take count (%lld)", (long long)a.takes);
    ok(p1[0] == 1 && p2[999] == 2, "contents survive take/release");
    arena_free(&a);
    Arena z;
    arena_init(&z, "host", ARENA_HOST);
    ok(arena_reserve(&z, be, err, sizeof err) == 0 && arena_reserved_bytes(&z) == 0, "an empty arena reserves nothing");
    arena_free(&z);
    be->destroy(be);
    return tap_done();
}
