// The 1F1B order of each stage and the activation transfers between stages of
// different meshes: checked by their invariants, by a timed simulation of the
// whole pipeline, and by matching every send to exactly one receive.
#include <stdlib.h>
#include <string.h>
#include "runtime/pipeline_reshard.h"
#include "runtime/pipeline_schedule.h"
#include "planner/trace_predict.h"
#include "tests/tap.h"

#define MAX_S 8
#define MAX_G 12

// Per-stage invariants: each micro-batch runs forward once and then backward
// once, both phases in micro-batch order, warm-up and in-flight counts as the
// header states.
static int schedule_invariants(int S, int G) {
    for (int s = 0; s < S; s++) {
        PipeAction a[2 * MAX_G];
        if (pipeline_1f1b(s, S, G, a) != 2 * G) return 0;
        int next_f = 0, next_b = 0, held = 0, most = 0, warm = -1;
        for (int k = 0; k < 2 * G; k++) {
            if (a[k].kind == PIPE_FORWARD) {
                if (a[k].microbatch != next_f++) return 0;
                held++;
            } else {
                if (warm < 0) warm = k;
                if (a[k].microbatch != next_b++ || a[k].microbatch >= next_f) return 0;
                held--;
            }
            if (held > most) most = held;
        }
        if (next_f != G || next_b != G || held != 0) return 0;
        // the warm-up forwards, then the steady state's first forward
        int lead = pipeline_warmup(s, S, G) + 1;
        if (warm != (lead < G ? lead : G)) return 0;
        if (most != pipeline_max_in_flight(s, S, G)) return 0;
        int expect = S - s < G ? S - s : G;
        if (most != expect) return 0;
    }
    return 1;
}

// Runs every stage's action list with durations tf[s], tb[s]: a forward waits
// for the same micro-batch's forward on the previous stage, a backward for its
// backward on the next stage (sends never block). Returns the makespan, or -1
// when some stage can never proceed (a deadlock).
static double simulate(int S, int G, const double *tf, const double *tb) {
    PipeAction act[MAX_S][2 * MAX_G];
    double end_f[MAX_S][MAX_G], end_b[MAX_S][MAX_G], clock[MAX_S] = {0};
    int pos[MAX_S] = {0};
    for (int s = 0; s < S; s++) pipeline_1f1b(s, S, G, act[s]);
    for (int done = 0; done < 2 * G * S;) {
        int progressed = 0;
        for (int s = 0; s < S; s++) {
            while (pos[s] < 2 * G) {
                PipeAction a = act[s][pos[s]];
                double ready;
                if (a.kind == PIPE_FORWARD) {
                    if (s > 0 && pos[s - 1] <= 0) break;
                    // the previous stage has finished this forward once its
                    // position is past it
                    int found = 0;
                    if (s > 0)
                        for (int k = 0; k < pos[s - 1]; k++)
                            if (act[s - 1][k].kind == PIPE_FORWARD && act[s - 1][k].microbatch == a.microbatch) found = 1;
                    if (s > 0 && !found) break;
                    ready = s > 0 ? end_f[s - 1][a.microbatch] : 0;
                    double start = clock[s] > ready ? clock[s] : ready;
                    clock[s] = end_f[s][a.microbatch] = start + tf[s];
                } else {
                    int found = 0;
                    if (s < S - 1)
                        for (int k = 0; k < pos[s + 1]; k++)
                            if (act[s + 1][k].kind == PIPE_BACKWARD && act[s + 1][k].microbatch == a.microbatch) found = 1;
                    if (s < S - 1 && !found) break;
                    ready = s < S - 1 ? end_b[s + 1][a.microbatch] : 0;
                    double start = clock[s] > ready ? clock[s] : ready;
                    clock[s] = end_b[s][a.microbatch] = start + tb[s];
                }
                pos[s]++, done++, progressed = 1;
            }
        }
        if (!progressed) return -1;
    }
    double t = 0;
    for (int s = 0; s < S; s++) t = clock[s] > t ? clock[s] : t;
    return t;
}

static int pieces_equal(const int *a, const int *b) { return !memcmp(a, b, 4 * sizeof(int)); }

static int cmp_piece(const void *x, const void *y) {
    const int *a = x, *b = y;
    for (int k = 0; k < 4; k++)
        if (a[k] != b[k]) return a[k] < b[k] ? -1 : 1;
    return 0;
}

// Two-stage plan with meshes (dp0 x tp0) and (dp1 x tp1), micro-batch of B
// sequences. Checks, in both directions: receives tile each rank's b
// sequences in order and come from the ranks holding them; sends cover only
// the sender's own sequences; the (sender, receiver, first, count) lists of
// both sides are the same set.
static int reshard_consistent(int dp0, int tp0, int dp1, int tp1, int B) {
    Plan p;
    memset(&p, 0, sizeof p);
    p.G = 1, p.num_stages = 2;
    p.stage[0] = (StagePlan){.layers = 1, .dp = dp0, .tp = tp0, .b = B / dp0};
    p.stage[1] = (StagePlan){.layers = 1, .dp = dp1, .tp = tp1, .b = B / dp1};
    int world = dp0 * tp0 + dp1 * tp1, cap = 4 * world * (dp0 + dp1) + 16;
    int(*sent)[4] = malloc(sizeof *sent * cap), (*recvd)[4] = malloc(sizeof *recvd * cap);
    ReshardPiece pc[64];
    int good = 1;
    for (int dir = 0; dir < 2 && good; dir++) {
        int src = dir, dst = 1 - dir, ns = 0, nr = 0;
        const StagePlan *S = &p.stage[src], *D = &p.stage[dst];
        int src_base = src ? dp0 * tp0 : 0, dst_base = dst ? dp0 * tp0 : 0;
        for (int d = 0; d < S->dp; d++)
            for (int t = 0; t < S->tp; t++) {
                int n = reshard_sends(&p, src, dst, d, t, pc, 64);
                if (n < 0) good = 0;
                for (int k = 0; k < n && good; k++) {
                    if (pc[k].first < d * S->b || pc[k].first + pc[k].count > (d + 1) * S->b) good = 0;
                    if (pc[k].local_offset != pc[k].first - d * S->b) good = 0;
                    memcpy(sent[ns++], (int[4]){src_base + d * S->tp + t, pc[k].peer, pc[k].first, pc[k].count},
                           sizeof sent[0]);
                }
            }
        for (int d = 0; d < D->dp && good; d++)
            for (int t = 0; t < D->tp && good; t++) {
                int n = reshard_recvs(&p, src, dst, d, t, pc, 64), covered = 0;
                if (n < 0) good = 0;
                for (int k = 0; k < n && good; k++) {
                    if (pc[k].local_offset != covered || pc[k].first != d * D->b + covered) good = 0;
                    int sd = (pc[k].peer - src_base) / S->tp;  // the sender holds these sequences
                    if (pc[k].first < sd * S->b || pc[k].first + pc[k].count > (sd + 1) * S->b) good = 0;
                    covered += pc[k].count;
                    memcpy(recvd[nr++], (int[4]){pc[k].peer, dst_base + d * D->tp + t, pc[k].first, pc[k].count},
                           sizeof recvd[0]);
                }
                if (covered != D->b) good = 0;
            }
        if (!good || ns != nr) good = 0;
        if (good) {
            qsort(sent, ns, sizeof sent[0], cmp_piece);
            qsort(recvd, nr, sizeof recvd[0], cmp_piece);
            for (int k = 0; k < ns && good; k++) good = pieces_equal(sent[k], recvd[k]);
        }
    }
    free(sent);
    free(recvd);
    return good;
}

int main(void) {
    int all = 1;
    for (int S = 1; S <= MAX_S; S++)
        for (int G = 1; G <= MAX_G; G++) all &= schedule_invariants(S, G);
    ok(all, "1F1B: every micro-batch forward then backward, in order; warm-up and in-flight counts (S 1..8, G 1..12)");

    // the predicted trace (planner/) places passes in the order the runtime runs them
    int same_order = 1;
    for (int S = 1; S <= MAX_S; S++)
        for (int G = 1; G <= MAX_G; G++)
            for (int s = 0; s < S; s++) {
                PipeAction run[2 * MAX_G];
                int traced[2 * MAX_G];
                pipeline_1f1b(s, S, G, run);
                trace_1f1b_order(s, S, G, traced);
                for (int k = 0; k < 2 * G; k++)
                    if (traced[k] != (run[k].kind == PIPE_FORWARD ? run[k].microbatch : -1 - run[k].microbatch)) {
                        if (same_order) diag("S=%d G=%d stage %d: action %d differs", S, G, s, k);
                        same_order = 0;
                    }
            }
    ok(same_order, "the predicted trace's 1F1B order is the runtime's (S 1..8, G 1..12)");

    PipeAction a[8];
    ok(pipeline_1f1b(2, 2, 4, a) == -1 && pipeline_1f1b(0, 2, 0, a) == -1, "stage outside the pipeline or G < 1 is refused");

    // uniform stages: (G + S - 1) (tf + tb), the planner's (G - 1) max t + sum t
    int exact = 1, deadlock = 0;
    for (int S = 1; S <= MAX_S; S++)
        for (int G = 1; G <= MAX_G; G++) {
            double tf[MAX_S], tb[MAX_S];
            for (int s = 0; s < S; s++) tf[s] = 1, tb[s] = 2;
            double t = simulate(S, G, tf, tb);
            if (t < 0) deadlock = 1;
            else if (t != (G + S - 1) * 3.0) exact = 0, diag("S=%d G=%d: %g, expected %g", S, G, t, (G + S - 1) * 3.0);
        }
    ok(!deadlock, "the stages' orders compose without deadlock");
    ok(exact, "uniform stages take (G + S - 1)(tf + tb)");

    // uneven stages: stage k cannot finish before micro-batch 0 has reached it
    // (forwards of stages < k), it has run all G of its own, and the last
    // gradient has gone back through stages < k: T >= max_k (G t_k + sum_{j<k} t_j)
    srand(7);
    int bounded = 1, over = 0;
    double worst = 0;
    for (int trial = 0; trial < 200; trial++) {
        int S = 1 + rand() % MAX_S, G = 1 + rand() % MAX_G;
        double tf[MAX_S], tb[MAX_S], lower = 0, before = 0, tmax = 0, sum = 0;
        for (int s = 0; s < S; s++) {
            tf[s] = 1 + rand() % 4, tb[s] = 2 * tf[s];
            double t = tf[s] + tb[s];
            lower = G * t + before > lower ? G * t + before : lower;
            before += t, tmax = t > tmax ? t : tmax, sum += t;
        }
        double t = simulate(S, G, tf, tb);
        if (t < 0 || t < lower - 1e-9) bounded = 0;
        double planner = (G - 1) * tmax + sum;  // the cost model's 1F1B estimate
        if (t > planner * (1 + 1e-12)) over = 1;
        if (t > 0 && t / planner - 1 < worst) worst = t / planner - 1;
    }
    ok(bounded, "uneven stages complete and respect the per-stage lower bound (200 random pipelines)");
    ok(!over, "the cost model's 1F1B total (G - 1) max t + sum t never underestimates the simulated pipeline");
    diag("largest overestimate: the simulated pipeline is %.1f%% faster", -100 * worst);

    int consistent = 1, cases = 0;
    const int sizes[] = {1, 2, 3, 4, 6, 8};
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++)
            for (int ti = 0; ti < 4; ti++)
                for (int tj = 0; tj < 4; tj++) {
                    int dp0 = sizes[i], dp1 = sizes[j], tp0 = sizes[ti], tp1 = sizes[tj];
                    int g = dp0, h = dp1;
                    while (h) { int r = g % h; g = h, h = r; }
                    int B = dp0 / g * dp1;  // lcm: both stages get whole sequences
                    for (int k = 1; k <= 2; k++, cases++) consistent &= reshard_consistent(dp0, tp0, dp1, tp1, B * k);
                }
    ok(consistent, "reshard: %d mesh pairs, both directions: receives tile b, sends match receives", cases);

    Plan p;
    memset(&p, 0, sizeof p);
    p.num_stages = 2;
    p.stage[0] = (StagePlan){.layers = 1, .dp = 2, .tp = 1, .b = 4};
    p.stage[1] = (StagePlan){.layers = 1, .dp = 1, .tp = 2, .b = 8};
    ReshardPiece pc[8];
    int n = reshard_recvs(&p, 0, 1, 0, 1, pc, 8);
    ok(n == 2 && pc[0].peer == 0 && pc[1].peer == 1 && pc[1].first == 4 && pc[1].local_offset == 4,
       "dp 2 -> dp 1: the receiver takes sequences 0-3 from rank 0 and 4-7 from rank 1");
    n = reshard_sends(&p, 0, 1, 1, 0, pc, 8);
    ok(n == 2 && pc[0].peer == 2 && pc[1].peer == 3 && pc[0].first == 4 && pc[0].count == 4,
       "tp 1 -> tp 2: the single sender copy goes to both receiving TP ranks");
    p.stage[1].b = 6;
    ok(reshard_sends(&p, 0, 1, 0, 0, pc, 8) == -1 && reshard_recvs(&p, 0, 1, 0, 0, pc, 8) == -1,
       "stages with different micro-batches (b * dp 8 vs 6) are refused");
    return tap_done();
}
