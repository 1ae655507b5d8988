// The interleaved 1F1B order (planner/interleave.h) and its cost
// (pipeline_interleaved_seconds): every chunk-pass exactly once on the rank
// that holds the chunk, a timed simulation of the whole pipeline that
// completes (no rank waits forever) with Megatron's bubble (P - 1)/v, v = 1 the
// runtime's plain 1F1B order and the 1F1B cost, the in-flight counts.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/plan_file.h"
#include "planner/interleave.h"
#include "planner/stage_model.h"
#include "runtime/pipeline_schedule.h"
#include "tests/tap.h"

#define MAX_P 6
#define MAX_V 4
#define MAX_G 24
#define MAX_S (MAX_P * MAX_V)
#define MAX_N (2 * MAX_G * MAX_V)

// Each (chunk, micro-batch) of the rank's chunks forward once, backward once
// after its forward; nothing else.
static int order_complete(int P, int v, int G) {
    for (int r = 0; r < P; r++) {
        ChunkPass a[MAX_N];
        if (interleaved_order(r, P, v, G, a) != 2 * G * v) return 0;
        static int seen[MAX_S][MAX_G][2];
        memset(seen, 0, sizeof seen);
        for (int k = 0; k < 2 * G * v; k++) {
            const ChunkPass *p = &a[k];
            if (p->chunk < 0 || p->chunk >= P * v || p->chunk % P != r || p->microbatch < 0 || p->microbatch >= G)
                return 0;
            if (seen[p->chunk][p->microbatch][p->backward]++) return 0;
            if (p->backward && !seen[p->chunk][p->microbatch][0]) return 0;
        }
    }
    return 1;
}

// Every rank runs its order one pass at a time, each pass as soon as its
// inputs exist (forward of chunk c after forward c - 1 of the micro-batch;
// backward of c after its forward and backward c + 1); pass times f[c], b[c],
// messages free. Returns the makespan, or -1 when some rank waits forever.
static double simulate(int P, int v, int G, const double *f, const double *b) {
    int S = P * v, n = 2 * G * v, pos[MAX_P] = {0};
    static ChunkPass a[MAX_P][MAX_N];
    static double done[2][MAX_S][MAX_G];
    double clock[MAX_P] = {0}, end = 0;
    for (int i = 0; i < 2; i++)
        for (int c = 0; c < S; c++)
            for (int g = 0; g < G; g++) done[i][c][g] = -1;
    for (int r = 0; r < P; r++) interleaved_order(r, P, v, G, a[r]);
    for (int moved = 1; moved;) {
        moved = 0;
        for (int r = 0; r < P; r++)
            while (pos[r] < n) {
                const ChunkPass *p = &a[r][pos[r]];
                int c = p->chunk, g = p->microbatch;
                double ready = clock[r];
                if (!p->backward && c > 0) {
                    if (done[0][c - 1][g] < 0) break;
                    ready = fmax(ready, done[0][c - 1][g]);
                }
                if (p->backward) {
                    if (done[0][c][g] < 0 || (c < S - 1 && done[1][c + 1][g] < 0)) break;
                    if (c < S - 1) ready = fmax(ready, done[1][c + 1][g]);
                }
                clock[r] = done[p->backward][c][g] = ready + (p->backward ? b[c] : f[c]);
                end = fmax(end, clock[r]);
                pos[r]++, moved = 1;
            }
    }
    for (int r = 0; r < P; r++)
        if (pos[r] < n) return -1;
    return end;
}

// the most micro-batches chunk c ever holds (forward done, backward not), counted from the order
static int held_most(int c, int P, int v, int G) {
    ChunkPass a[MAX_N];
    int n = interleaved_order(c % P, P, v, G, a), held = 0, most = 0;
    for (int k = 0; k < n; k++)
        if (a[k].chunk == c) {
            held += a[k].backward ? -1 : 1;
            if (held > most) most = held;
        }
    return most;
}

int main(void) {
    // v = 1: the runtime's 1F1B order, pass for pass
    int same = 1;
    for (int P = 1; P <= MAX_P; P++)
        for (int G = 1; G <= MAX_G; G++)
            for (int r = 0; r < P; r++) {
                ChunkPass a[MAX_N];
                PipeAction run[2 * MAX_G];
                int n = interleaved_order(r, P, 1, G, a);
                same &= n == pipeline_1f1b(r, P, G, run);
                for (int k = 0; k < n && same; k++)
                    same &= a[k].chunk == r && a[k].backward == (run[k].kind == PIPE_BACKWARD) &&
                            a[k].microbatch == run[k].microbatch;
                same &= stage_p_interleaved(r, P, 1, G) == (P - r - 1 < G - 1 ? P - r - 1 : G - 1);
            }
    ok(same, "v = 1: the order is runtime/pipeline_schedule.c's 1F1B and p = min(P - c - 1, G - 1) (P 1..6, G 1..24)");

    int complete = 1, bubble = 1, cost = 1, warm = 1, checked = 0;
    double f[MAX_S], b[MAX_S], t[MAX_S], d[MAX_S] = {0};
    for (int P = 1; P <= MAX_P; P++)
        for (int v = 2; v <= MAX_V; v++)
            for (int G = P; G <= MAX_G; G += P) {
                int S = P * v;
                complete &= order_complete(P, v, G);
                for (int c = 0; c < S; c++) f[c] = 1.0, b[c] = 2.0, t[c] = 3.0;
                double T = simulate(P, v, G, f, b);
                // Megatron: a rank's micro-batch is v (f + b); the bubble (P - 1)/v of it
                double want = G * v * 3.0 + (P - 1) / (double)v * v * 3.0;
                bubble &= T >= 0 && fabs(T - want) < 1e-9;
                cost &= fabs(pipeline_interleaved_seconds(P, v, G, t, d) - want) < 1e-9;
                if (T < 0 || fabs(T - want) >= 1e-9) diag("P %d v %d G %d: simulated %g, formula %g", P, v, G, T, want);
                // the first backward on rank r comes right after its warm-up and one more forward
                for (int r = 0; r < P; r++) {
                    ChunkPass a[MAX_N];
                    interleaved_order(r, P, v, G, a);
                    int w = interleaved_warmup(r, P, v, G), first_b = 0;
                    while (!a[first_b].backward) first_b++;
                    int lead = (P - r - 1) * 2 + (v - 1) * P;
                    warm &= w == (lead < G * v ? lead : G * v) && first_b == (w < G * v ? w + 1 : G * v);
                }
                checked++;
            }
    ok(complete, "v 2..4: every chunk-pass once, on rank chunk mod P, backward after forward (%d shapes)", checked);
    ok(bubble, "v 2..4: the simulated pipeline completes in G v (f + b) + (P - 1)(f + b) (bubble (P - 1)/v)");
    ok(cost, "pipeline_interleaved_seconds of uniform chunks = the simulated iteration");
    ok(warm, "warm-up: min((P - r - 1) * 2 + (v - 1) * P, G v) forwards before the first backward");

    // uneven chunks: the simulation completes, the cost is the formula by hand
    double fu[6] = {1, 2, 1, 1, 3, 1}, bu[6], tu[6], du[6] = {0.5, 0.25, 4, 0, 1, 0};
    for (int c = 0; c < 6; c++) bu[c] = 2 * fu[c], tu[c] = 3 * fu[c];
    ok(simulate(3, 2, 6, fu, bu) > 0, "uneven chunks (P 3, v 2): the simulated pipeline completes");
    // T_r = (3 + 3, 6 + 9, 3 + 3) = (6, 15, 6); D_r = (0.5, 1.25, 4); B_r = (0, 3, 10.5)
    // 6 * 15 + (27 - 15) / 2 + max(0, 0.5, 1.25 - 3, 4 - 10.5) = 90 + 6 + 0.5
    ok(fabs(pipeline_interleaved_seconds(3, 2, 6, tu, du) - 96.5) < 1e-12, "interleaved cost by hand: P 3, v 2 -> 96.5");

    // v = 1 is the 1F1B cost bit for bit
    int equal = 1;
    srand(7);
    for (int trial = 0; trial < 500; trial++) {
        int P = 1 + rand() % 8, G = 1 + rand() % 16;
        for (int i = 0; i < P; i++) t[i] = rand() / (double)RAND_MAX, d[i] = rand() / (double)RAND_MAX - 0.3;
        double x = pipeline_interleaved_seconds(P, 1, G, t, d), y = pipeline_1f1b_seconds(P, G, t, d);
        equal &= memcmp(&x, &y, sizeof x) == 0;
    }
    ok(equal, "v = 1: pipeline_interleaved_seconds == pipeline_1f1b_seconds bitwise (500 random pipelines)");

    // in-flight: the count from the order, and two cases by hand
    int counts = 1;
    for (int P = 1; P <= MAX_P; P++)
        for (int v = 1; v <= MAX_V; v++)
            for (int G = P; G <= MAX_G; G += P)
                for (int c = 0; c < P * v; c++) counts &= stage_p_interleaved(c, P, v, G) == held_most(c, P, v, G) - 1;
    ok(counts, "stage_p_interleaved = the most micro-batches a chunk holds under the order, minus 1");
    // P 4, v 2, G 8: rank 0 forwards chunk 0 on micro-batches 0-3, chunk 4 on 0-3, then
    // chunk 0 on 4..7 before chunk 0's first backward: chunk 0 holds all 8
    int p42[8] = {7, 7, 6, 4, 3, 3, 2, 0}, hand = 1;
    for (int c = 0; c < 8; c++) hand &= stage_p_interleaved(c, 4, 2, 8) == p42[c];
    ok(hand, "P 4, v 2, G 8: p per chunk 7 7 6 4 3 3 2 0");
    ok(interleaved_order(0, 4, 2, 6, (ChunkPass[96]){{0}}) == -1 && stage_p_interleaved(0, 4, 2, 6) == -1,
       "G not a multiple of P (v > 1): refused");
    // plan files: virtual = v is written when v > 1 and read back; v = 1 writes no line
    Plan pl;
    memset(&pl, 0, sizeof pl);
    pl.G = 4, pl.num_stages = 6, pl.virtual_chunks = 3;
    for (int c = 0; c < 6; c++) pl.stage[c] = (StagePlan){.layers = 1 + c % 2, .dp = 2 - c % 2, .tp = 1, .b = 1};
    char path[] = "/tmp/mist-test-interleave-XXXXXX", err[512];
    int fd = mkstemp(path), round = 0, plain_line = 1;
    FILE *fp = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (fp) {
        plan_write_ini(&pl, fp);
        fclose(fp);
        Plan back;
        round = plan_file_load(&back, path, err, sizeof err) == 0 && back.virtual_chunks == 3 &&
                back.num_stages == 6 && plan_world_size(&back) == 3 && back.stage[5].layers == 2;
        if (!round) diag("%s", err);
        pl.virtual_chunks = 1;
        fp = fopen(path, "w");
        plan_write_ini(&pl, fp);
        fclose(fp);
        fp = fopen(path, "r");
        char line[256];
        while (fp && fgets(line, sizeof line, fp)) plain_line &= strncmp(line, "virtual", 7) != 0;
        if (fp) fclose(fp);
        remove(path);
    }
    ok(round && plain_line, "plan files: virtual = 3 round-trips (6 chunks, 3 ranks), v = 1 writes no line");
    return tap_done();
}
