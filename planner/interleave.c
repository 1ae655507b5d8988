// The interleaved 1F1B order and the in-flight counts (see interleave.h).
#include "planner/interleave.h"
#include <stdlib.h>

int interleaved_warmup(int rank, int P, int v, int G) {
    // v = 1: the later ranks need inputs before any backward can start
    // (plain 1F1B). v > 1 (Megatron): rank r must have forwarded through all
    // of its chunks for the first group of P micro-batches ((v - 1) P passes
    // before its last chunk starts), and the ranks after it need two passes
    // each to turn the first micro-batch around
    long w = v == 1 ? (long)P - rank - 1 : (long)(P - rank - 1) * 2 + (long)(v - 1) * P;
    long all = (long)G * v;
    return (int)(w < all ? w : all);
}

// the k-th forward (backward = 0) or backward pass of rank r
static ChunkPass pass_of(int k, int r, int P, int v, int backward) {
    int n = k % (P * v), j = n / P;
    ChunkPass a = {backward, (k / (P * v)) * P + n % P, (backward ? v - 1 - j : j) * P + r};
    return a;
}

int interleaved_order(int rank, int P, int v, int G, ChunkPass *out) {
    if (rank < 0 || rank >= P || v < 1 || G < 1 || (v > 1 && G % P)) return -1;
    int total = G * v, w = interleaved_warmup(rank, P, v, G), n = 0;
    if (v == 1) {  // plain 1F1B: micro-batch g is pass g of either kind
        for (int k = 0; k < w; k++) out[n++] = (ChunkPass){0, k, rank};
        int next_bwd = 0;
        for (int m = w; m < G; m++) {
            out[n++] = (ChunkPass){0, m, rank};
            out[n++] = (ChunkPass){1, next_bwd++, rank};
        }
        while (next_bwd < G) out[n++] = (ChunkPass){1, next_bwd++, rank};
        return n;
    }
    for (int k = 0; k < w; k++) out[n++] = pass_of(k, rank, P, v, 0);
    for (int i = 0; i < total - w; i++) {
        out[n++] = pass_of(w + i, rank, P, v, 0);
        out[n++] = pass_of(i, rank, P, v, 1);
    }
    for (int i = total - w; i < total; i++) out[n++] = pass_of(i, rank, P, v, 1);
    return n;
}

int stage_p_interleaved(int chunk, int P, int v, int G) {
    if (P < 1 || v < 1 || chunk < 0 || chunk >= P * v) return -1;
    int n = 2 * G * v;
    ChunkPass *a = malloc((size_t)(n > 0 ? n : 1) * sizeof *a);
    if (!a) return -1;
    int got = interleaved_order(chunk % P, P, v, G, a), held = 0, most = 0;
    for (int i = 0; i < got; i++) {
        if (a[i].chunk != chunk) continue;
        held += a[i].backward ? -1 : 1;
        if (held > most) most = held;
    }
    free(a);
    return got < 0 ? -1 : most - 1;
}
