// Arenas: carve at plan time, reserve once, account live bytes while running.
#include "runtime/arena.h"
#include <stdio.h>
#include <stdlib.h>
#include "kernels/backend.h"

void arena_init(Arena *a, const char *name, ArenaKind kind) {
    *a = (Arena){.name = name, .kind = kind};
}

static void arena_bug(const char *what, const ArenaTensor *t) {
    fprintf(stderr, "mist: internal error: %s (tensor '%s', %zu bytes, arena '%s')\n", what,
            t->what ? t->what : "?", t->bytes, t->arena ? t->arena->name : "?");
    abort();
}

void arena_carve(Arena *a, ArenaTensor *t, size_t bytes, const char *what) {
    *t = (ArenaTensor){.arena = a, .bytes = bytes, .what = what};
    if (a->base) arena_bug("carving after the arena was reserved", t);
    size_t off = (a->carved + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    t->offset = off;
    a->carved = off + bytes;
    a->tensor_bytes += bytes;
}

int arena_reserve(Arena *a, Backend *b, char *err, size_t errlen) {
    a->backend = b;
    if (a->carved == 0) return 0;
    a->base = a->kind == ARENA_DEVICE ? b->alloc_device(b, a->carved) : b->alloc_pinned(b, a->carved);
    if (!a->base) {
        snprintf(err, errlen,
                 "cannot reserve the %s arena: %zu bytes (%.1f MiB) on backend '%s' "
                 "(hint: lower the micro-batch size b or the sequence length, or use more ranks)",
                 a->name, a->carved, a->carved / 1048576.0, b->name);
        return -1;
    }
    return 0;
}

void arena_free(Arena *a) {
    if (a->base && a->backend) {
        if (a->kind == ARENA_DEVICE) a->backend->free_device(a->backend, a->base);
        else a->backend->free_pinned(a->backend, a->base);
    }
    a->base = NULL;
}

void *arena_ptr(const ArenaTensor *t) {
    if (!t->arena || !t->arena->base) {
        if (t->bytes == 0) return NULL;
        arena_bug("using a tensor of an arena that is not reserved", t);
    }
    return t->arena->base + t->offset;
}

void *arena_take(ArenaTensor *t) {
    if (t->live) arena_bug("taking a tensor that is already live", t);
    void *p = arena_ptr(t);
    Arena *a = t->arena;
    t->live = 1;
    a->live += t->bytes;
    if (a->live > a->peak) a->peak = a->live;
    a->takes++;
    return p;
}

void arena_release(ArenaTensor *t) {
    if (!t->live) arena_bug("releasing a tensor that is not live", t);
    t->live = 0;
    t->arena->live -= t->bytes;
}

size_t arena_reserved_bytes(const Arena *a) { return a->carved; }
size_t arena_live_bytes(const Arena *a) { return a->live; }
size_t arena_peak_bytes(const Arena *a) { return a->peak; }
void arena_reset_peak(Arena *a) { a->peak = a->live; }
