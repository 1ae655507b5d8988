// bench_train --timeline: one step with the runtime's own marks (see bench_timeline.h).
//
// The marks are backend events in the step's stream, so their times are the
// device's. The step is laid out as mist-train's measured trace lays out an
// iteration (docs/traces.md): a forward and a backward pass with the blocks and
// the pre / post parts nested in them, the bubble before the forward (tokens
// uploaded, gradients zeroed) and the grad norm to the end (norm, AdamW, the
// losses back to the host). On top of the trace, per phase:
//   GPU ms      the events' time of the phase (summed over its blocks),
//   host ms     the CPU clock between the enqueue of the phase's first and last
//               mark: the time the host spent issuing it (nothing in a pass
//               waits for the device), so host ms >= GPU ms marks a phase whose
//               kernels are launched slower than they run;
// and for the step: launch gaps = step time - the phases' sum, the device's
// time between marked regions (idle unless unmarked work ran there), and the
// host synchronisations in the step, counted by wrapping the Backend's
// stream_synchronize, event_synchronize, synchronize and copy_d2h while it runs
// (a copy to pageable host memory returns when it is done: it waits for the
// stream too). The gradient norm's read-back is one; the losses' copy and the
// step's final wait are others; so the last phase's host time includes the
// device's time to reach its end.
#include "benchmarks/gpu/bench_timeline.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "planner/trace.h"
#include "runtime/comm.h"
#include "runtime/fileutil.h"
#include "runtime/grid.h"
#include "runtime/trace_measure.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// ---- the Backend's ordering calls, wrapped while the step is recorded
enum { MAX_RECORDS = 1024 };
static struct {
    void (*stream_synchronize)(Backend *b, BackendStream *s);
    void (*event_synchronize)(Backend *b, BackendEvent *e);
    void (*synchronize)(Backend *b);
    void (*event_record)(Backend *b, BackendEvent *e, BackendStream *s);
    void (*copy_d2h)(Backend *b, void *dst, const void *src, size_t bytes, BackendStream *s);
    int stream_syncs, event_syncs, device_syncs, d2h_copies;
    int n;
    BackendEvent *ev[MAX_RECORDS];
    double host[MAX_RECORDS];  // the CPU clock when ev[i] was enqueued
    int nsync;
    const char *sync_call[MAX_RECORDS];   // each synchronisation in order: the call,
    BackendEvent *sync_after[MAX_RECORDS];  // and the last mark enqueued before it (where it came)
    double sync_host[MAX_RECORDS];          // and the CPU clock when it was called
} w;

static void synced(const char *call) {
    if (w.nsync < MAX_RECORDS && w.n > 0)
        w.sync_call[w.nsync] = call, w.sync_host[w.nsync] = now_s(), w.sync_after[w.nsync++] = w.ev[w.n - 1];
}

static void count_stream_sync(Backend *b, BackendStream *s) {
    w.stream_syncs++, synced("stream_synchronize"), w.stream_synchronize(b, s);
}
static void count_event_sync(Backend *b, BackendEvent *e) { w.event_syncs++, synced("event_synchronize"), w.event_synchronize(b, e); }
static void count_device_sync(Backend *b) { w.device_syncs++, synced("synchronize"), w.synchronize(b); }
static void count_d2h(Backend *b, void *dst, const void *src, size_t bytes, BackendStream *s) {
    w.d2h_copies++, synced("copy_d2h"), w.copy_d2h(b, dst, src, bytes, s);
}
static void clock_record(Backend *b, BackendEvent *e, BackendStream *s) {
    if (w.n < MAX_RECORDS) w.ev[w.n] = e, w.host[w.n++] = now_s();
    w.event_record(b, e, s);
}

static void wrap(Backend *be) {
    w.stream_synchronize = be->stream_synchronize, w.event_synchronize = be->event_synchronize;
    w.synchronize = be->synchronize, w.event_record = be->event_record, w.copy_d2h = be->copy_d2h;
    w.stream_syncs = w.event_syncs = w.device_syncs = w.d2h_copies = w.n = w.nsync = 0;
    be->stream_synchronize = count_stream_sync, be->event_synchronize = count_event_sync;
    be->synchronize = count_device_sync, be->event_record = clock_record, be->copy_d2h = count_d2h;
}
static void unwrap(Backend *be) {
    be->stream_synchronize = w.stream_synchronize, be->event_synchronize = w.event_synchronize;
    be->synchronize = w.synchronize, be->event_record = w.event_record, be->copy_d2h = w.copy_d2h;
}
// the CPU clock at the last enqueue of e (every mark is recorded once in the step)
static double host_at(const BackendEvent *e) {
    for (int i = w.n - 1; i >= 0; i--)
        if (w.ev[i] == e) return w.host[i];
    return 0;
}

// ---- one rank, one stage: trace_measure's barrier and gather have nobody to wait for
static int alone_barrier(const CommBackend *c, CommGroup *g) { return 0; }
static void alone_error(const CommBackend *c, int code, char *buf, size_t len) { snprintf(buf, len, "code %d", code); }
static void alone_abort(const CommBackend *c, int code, const char *message) {
    fprintf(stderr, "bench_train: timeline: %s\n", message);
    exit(code);
}
static const CommBackend alone = {.barrier = alone_barrier, .error_string = alone_error, .abort = alone_abort};

// ---- the summary
enum { PH_UPLOAD, PH_PRE_F, PH_BLOCK_F, PH_POST_F, PH_POST_B, PH_RECOMPUTE, PH_BLOCK_B, PH_PRE_B, PH_NORM, PH_ADAMW, PH_N };
static const char *const phase_names[PH_N] = {"upload + zero grads", "pre forward", "block forward", "post forward",
                                              "post backward", "block recompute", "block backward", "pre backward",
                                              "grad norm", "AdamW + losses to host"};
// waited: a synchronisation fell inside the phase, so its host time includes the device's backlog
typedef struct { int count, waited; double gpu_ms, host_ms; } Phase;

static int phase_of(int kind) {
    switch (kind) {
    case TRACE_PRE_FORWARD: return PH_PRE_F;
    case TRACE_BLOCK_FORWARD: return PH_BLOCK_F;
    case TRACE_POST_FORWARD: return PH_POST_F;
    case TRACE_POST_BACKWARD: return PH_POST_B;
    case TRACE_BLOCK_RECOMPUTE: return PH_RECOMPUTE;
    case TRACE_BLOCK_BACKWARD: return PH_BLOCK_B;
    case TRACE_PRE_BACKWARD: return PH_PRE_B;
    default: return -1;
    }
}

static void add(Phase *p, const TraceMeasure *m, BackendEvent *from, BackendEvent *to) {
    Backend *be = m->be;
    p->count++;
    p->gpu_ms += be->event_elapsed_ms(be, from, to);
    double h0 = host_at(from), h1 = host_at(to);
    p->host_ms += 1e3 * (h1 - h0);
    for (int i = 0; i < w.nsync; i++) p->waited |= w.sync_host[i] >= h0 && w.sync_host[i] <= h1;
}

// the phases from the marks: each nested part is a begin mark and its end mark right after
static void phases(const TraceMeasure *m, BackendEvent *adamw, Phase *ph) {
    memset(ph, 0, PH_N * sizeof *ph);
    int forward = -1;
    for (int i = 1; i < m->n; i++) {
        int k = m->what[i], p = phase_of(k);
        if (p >= 0 && i + 1 < m->n && m->what[i + 1] == TRACE_PART_END) add(&ph[p], m, m->ev[i], m->ev[i + 1]);
        if (k == TRACE_FORWARD && forward < 0) forward = i, add(&ph[PH_UPLOAD], m, m->ev[0], m->ev[i]);
        if (k == TRACE_GRAD_NORM) add(&ph[PH_NORM], m, m->ev[i], adamw), add(&ph[PH_ADAMW], m, adamw, m->ev[m->n - 1]);
    }
}

// where in the step a synchronisation came: the mark enqueued last before it
static void sync_place(const TraceMeasure *m, BackendEvent *adamw, BackendEvent *after, char *dst, size_t len) {
    snprintf(dst, len, "?");
    if (after == adamw) snprintf(dst, len, "in AdamW + losses to host");
    for (int i = 0; i < m->n; i++) {
        if (m->ev[i] != after) continue;
        int k = m->what[i], part = k == TRACE_PART_END && i > 0;
        TraceEvent e = {.kind = part ? m->what[i - 1] : k, .block = part ? m->block[i - 1] : m->block[i]};
        char name[64] = "";
        if (e.kind >= 0 && e.kind < TRACE_KINDS) trace_event_name(&e, name, sizeof name);
        if (part) snprintf(dst, len, "after %s", name);
        else if (k == TRACE_BUBBLE) snprintf(dst, len, i == 0 ? "at the start" : i == m->n - 1 ? "at the end" : "after a pass");
        else snprintf(dst, len, "in %s", name);
    }
}

static void summary(const TraceMeasure *m, BackendEvent *adamw, const char *path, const char *model, const char *attention) {
    Phase ph[PH_N];
    phases(m, adamw, ph);
    Backend *be = m->be;
    double step_ms = be->event_elapsed_ms(be, m->ev[0], m->ev[m->n - 1]), sum = 0;
    double host_ms = 1e3 * (host_at(m->ev[m->n - 1]) - host_at(m->ev[0]));
    int syncs = w.stream_syncs + w.event_syncs + w.device_syncs + w.d2h_copies;
    printf("\n== timeline %s (attention %s): one step, the Chrome trace in %s\n", model, attention, path);
    printf("    %-24s %6s %10s %14s\n", "phase", "count", "GPU ms", "host issue ms");
    for (int p = 0; p < PH_N; p++) {
        if (!ph[p].count) continue;
        sum += ph[p].gpu_ms;
        // on the cpu backend the host runs the ops as it issues them: the two columns are one clock
        // a phase that waited for the device has the backlog in its host time: no verdict from it
        int bound = !be->device_memory_is_host && !ph[p].waited && ph[p].host_ms >= ph[p].gpu_ms;
        printf("    %-24s %6d %10.3f %14.3f%s\n", phase_names[p], ph[p].count, ph[p].gpu_ms, ph[p].host_ms,
               bound ? "  (issue >= GPU: launch-bound)" : ph[p].waited ? "  (waits for the device)" : "");
    }
    printf("    step %.3f ms on the GPU, marked regions %.3f ms, launch gaps %.3f ms (%.1f%%); host issue %.3f ms "
           "up to the final wait; host synchronisations %d (stream %d, event %d, device %d, device-to-host copies %d; "
           "the final wait among them)\n", step_ms, sum, step_ms - sum, step_ms > 0 ? 100 * (step_ms - sum) / step_ms : 0.0,
           host_ms, syncs, w.stream_syncs, w.event_syncs, w.device_syncs, w.d2h_copies);
    for (int i = 0; i < w.nsync; i++) {
        char at[96];
        sync_place(m, adamw, w.sync_after[i], at, sizeof at);
        printf("%s%s %s%s", i ? "; " : "    where: ", w.sync_call[i], at, i + 1 == w.nsync ? "\n" : "");
    }
    char esc[1024];
    trace_json_escape(esc, sizeof esc, path);
    printf("timeline_json {\"model\": \"%s\", \"attention\": \"%s\", \"trace\": \"%s\", \"step_gpu_ms\": %.4f, "
           "\"regions_gpu_ms\": %.4f, \"launch_gaps_ms\": %.4f, \"host_issue_ms\": %.4f, \"host_syncs\": %d, "
           "\"stream_syncs\": %d, \"event_syncs\": %d, \"device_syncs\": %d, \"d2h_copies\": %d, \"phases\": [",
           model, attention, esc, step_ms, sum, step_ms - sum, host_ms, syncs, w.stream_syncs, w.event_syncs,
           w.device_syncs, w.d2h_copies);
    for (int p = 0, first = 1; p < PH_N; p++) {
        if (!ph[p].count) continue;
        printf("%s{\"phase\": \"%s\", \"count\": %d, \"gpu_ms\": %.4f, \"host_issue_ms\": %.4f}", first ? "" : ", ",
               phase_names[p], ph[p].count, ph[p].gpu_ms, ph[p].host_ms);
        first = 0;
    }
    printf("], \"syncs\": [");
    for (int i = 0; i < w.nsync; i++) {
        char at[96];
        sync_place(m, adamw, w.sync_after[i], at, sizeof at);
        printf("%s\"%s %s\"", i ? ", " : "", w.sync_call[i], at);
    }
    printf("]}\n");
}

int timeline_step(ModelRuntime *r, Backend *be, const int32_t *in, const int32_t *tg, int N, float *losses,
                  const char *path, const char *model, const char *attention) {
    TraceMeasure tm;
    char err[1024] = "";
    if (mist_output_check(path, err, sizeof err) != 0) {
        fprintf(stderr, "bench_train: --timeline %s: %s\n", path, err);
        return 1;
    }
    // nested parts: every block's forward and backward, the recomputes, pre and post both ways (as mist-train)
    if (trace_measure_init(&tm, be, r->stream, 0, 1, 2 * r->L + r->ckpt + 4)) {
        fprintf(stderr, "bench_train: --timeline %s: out of memory for the timer events\n", path);
        trace_measure_free(&tm);
        return 1;
    }
    Grid grid;
    memset(&grid, 0, sizeof grid);
    grid.world_size = 1, grid.num_stages = 1, grid.comm = &alone;
    BackendEvent *adamw = be->event_create(be);
    wrap(be);
    trace_measure_begin(&tm, 0, &alone, &grid);  // waits for the steps before, then the start mark
    w.stream_syncs = w.event_syncs = w.device_syncs = w.d2h_copies = w.nsync = 0;
    double t0 = host_at(tm.ev[0]);
    be->copy_h2d(be, arena_ptr(&r->t_inputs), in, (size_t)N * 4, r->stream);
    be->copy_h2d(be, arena_ptr(&r->t_targets), tg, (size_t)N * 4, r->stream);
    be->memset_device(be, r->opt.grads, 0, r->P * r->x, r->stream);
    r->trace = &tm;
    trace_measure_mark(&tm, TRACE_FORWARD, 0);
    mr_forward(r, 0, 1.0f / (float)N, NULL, NULL);
    trace_measure_mark(&tm, TRACE_BUBBLE, 0);  // the pass ends
    trace_measure_mark(&tm, TRACE_BACKWARD, 0);
    mr_backward(r, 0, NULL, NULL);
    trace_measure_mark(&tm, TRACE_BUBBLE, 0);
    r->trace = NULL;
    trace_measure_mark(&tm, TRACE_GRAD_NORM, -1);
    double norm = optimizer_grad_norm(&r->opt);
    be->event_record(be, adamw, r->stream);
    optimizer_step(&r->opt, 1e-4f, optimizer_clip_scale(norm, 1.0));
    be->copy_d2h(be, losses, arena_ptr(&r->t_losses), (size_t)N * 4, r->stream);
    trace_measure_end(&tm, 0);  // the end mark, and the wait for it
    tm.host_seconds = now_s() - t0;
    unwrap(be);
    int rc = trace_measure_write(&tm, &alone, &grid, 1, path, err, sizeof err);
    if (rc) fprintf(stderr, "bench_train: --timeline: %s\n", err);
    else summary(&tm, adamw, path, model, attention);
    be->event_destroy(be, adamw);
    trace_measure_free(&tm);
    return rc != 0;
}
