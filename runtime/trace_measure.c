// Measured trace of one iteration (see trace_measure.h).
//
// The driver marks the stream where each pass begins and ends; the marks are
// backend events, so on a GPU they time the device's work and not the host's
// enqueueing. The events of a rank are rebuilt from the marks so that they tile
// the iteration: between the end of a pass and the start of the next the
// compute stream waited (a bubble); from the gradient norm's mark to the end,
// the norm and the step. Their durations therefore add up to the iteration as
// the backend's timer measured it, which the tests compare with the host
// clock's iteration time in the log.
#include "runtime/trace_measure.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/comm.h"
#include "runtime/fileutil.h"
#include "runtime/grid.h"

enum { TAG_TRACE = 21 };

// start, a begin and an end per pass (2 G v of them) and per nested part, the norm, the end
static int marks_needed(int G, int v, int parts) { return 4 * G * v + 2 * G * parts + 3; }

static int init_marks(TraceMeasure *m, Backend *be, BackendStream *s, int64_t iteration, int cap) {
    memset(m, 0, sizeof *m);
    m->be = be, m->stream = s, m->iteration = iteration;
    if (iteration < 0) return 0;
    m->cap = cap;
    m->ev = calloc((size_t)m->cap, sizeof *m->ev);
    m->what = calloc((size_t)m->cap, sizeof *m->what);
    m->microbatch = calloc((size_t)m->cap, sizeof *m->microbatch);
    m->block = calloc((size_t)m->cap, sizeof *m->block);
    m->chunk = calloc((size_t)m->cap, sizeof *m->chunk);
    if (!m->ev || !m->what || !m->microbatch || !m->block || !m->chunk) return -1;
    for (int i = 0; i < m->cap; i++)
        if (!(m->ev[i] = be->event_create(be))) return -1;
    return 0;
}

int trace_measure_init(TraceMeasure *m, Backend *be, BackendStream *s, int64_t iteration, int G, int parts) {
    return init_marks(m, be, s, iteration, marks_needed(G, 1, parts));
}

int trace_measure_setup(TraceMeasure *m, Backend *be, BackendStream *s, const LogConfig *log, int64_t start,
                        int64_t steps, int G, int v, int parts, int root, char *err, size_t errlen) {
    int64_t it = log->trace_iteration - 1;
    if (it < start) it = start;
    if (it > steps - 1) it = steps - 1;
    if (!log->trace[0] || it < start) return init_marks(m, be, s, -1, 0);
    if (root && mist_output_check(log->trace, err, errlen) != 0) return -1;
    if (init_marks(m, be, s, it, marks_needed(G, v, parts)) == 0) {
        m->path = log->trace, m->G = G, m->virtual_chunks = v;
        return 0;
    }
    snprintf(err, errlen, "out of memory for %d timer events", marks_needed(G, v, parts));
    return -1;
}

void trace_measure_finish(TraceMeasure *m, double host_seconds, const CommBackend *comm, const Grid *grid) {
    if (!m->recording) return;
    trace_measure_end(m, host_seconds);
    char err[1024];
    if (trace_measure_write(m, comm, grid, m->G, m->path, err, sizeof err) != 0) {
        fprintf(stderr, "mist-train: %s\n", err);
        comm->abort(comm, 1, "trace write error");
    }
}

void trace_measure_free(TraceMeasure *m) {
    for (int i = 0; m->ev && i < m->cap; i++)
        if (m->ev[i]) m->be->event_destroy(m->be, m->ev[i]);
    free(m->ev), free(m->what), free(m->microbatch), free(m->block), free(m->chunk);
    memset(m, 0, sizeof *m);
}

void trace_measure_pass(TraceMeasure *m, int what, int microbatch, int chunk) {
    if (!m || !m->recording || m->n >= m->cap) return;
    m->be->event_record(m->be, m->ev[m->n], m->stream);
    m->what[m->n] = what, m->microbatch[m->n] = microbatch, m->chunk[m->n] = chunk;
    m->n++;
}

void trace_measure_mark(TraceMeasure *m, int what, int microbatch) { trace_measure_pass(m, what, microbatch, -1); }

void trace_measure_part(TraceMeasure *m, int kind, int block) {
    if (!m->recording || m->n + 3 >= m->cap) return;  // room for its end, the norm and the iteration's end
    trace_measure_mark(m, kind, -1);
    m->block[m->n - 1] = block;
}

void trace_measure_part_end(TraceMeasure *m) {
    if (m->recording && m->n > 0 && m->what[m->n - 1] >= TRACE_TOP_KINDS) trace_measure_mark(m, TRACE_PART_END, -1);
}

int trace_measure_begin(TraceMeasure *m, int64_t it, const CommBackend *comm, const Grid *grid) {
    if (m->iteration < 0 || it != m->iteration) return 0;
    m->be->stream_synchronize(m->be, m->stream);
    commCheck(comm, comm->barrier(comm, grid->world));  // every rank's time 0 at the same moment
    m->recording = 1;
    m->n = 0;
    trace_measure_mark(m, TRACE_BUBBLE, -1);  // the start
    return 1;
}

void trace_measure_end(TraceMeasure *m, double host_seconds) {
    if (!m->recording) return;
    m->host_seconds = host_seconds;
    trace_measure_mark(m, TRACE_BUBBLE, -1);  // the end
    m->be->event_synchronize(m->be, m->ev[m->n - 1]);
    m->recording = 0;
}

// This rank's marks as events tiling [0, end], the nested parts inside their passes;
// an interleaved rank's passes and their parts carry the pass's chunk (TraceEvent.chunk).
static int rank_events(const TraceMeasure *m, int stage, int rank, Trace *t) {
    int v = m->virtual_chunks;
    double cursor = 0, part_start = 0;
    int open = -1;  // the mark of the pass or norm in progress
    for (int i = 1; i < m->n; i++) {
        double at = 1e-3 * m->be->event_elapsed_ms(m->be, m->ev[0], m->ev[i]);
        if (at < cursor) at = cursor;  // timers of another stream never run backwards here
        if (m->what[i] >= TRACE_TOP_KINDS) {  // a part begins: the pass goes on
            part_start = at;
            continue;
        }
        if (m->what[i] == TRACE_PART_END) {  // follows its begin mark (trace_measure_part_end)
            TraceEvent e = {stage, rank, TRACE_TRACK_COMPUTE, m->what[i - 1], open >= 0 ? m->microbatch[open] : -1,
                            part_start, at - part_start, m->block[i - 1], open >= 0 && v > 1 ? m->chunk[open] + 1 : 0};
            if (trace_add(t, e)) return -1;
            continue;
        }
        int ends = m->what[i] == TRACE_BUBBLE || i == m->n - 1;
        int kind = open >= 0 ? m->what[open] : TRACE_BUBBLE, mb = open >= 0 ? m->microbatch[open] : -1;
        int chunk = open >= 0 && v > 1 && m->chunk[open] >= 0 ? m->chunk[open] + 1 : 0;
        if (at > cursor || (open >= 0 && ends))
            if (trace_add(t, (TraceEvent){stage, rank, TRACE_TRACK_COMPUTE, kind, mb, cursor, at - cursor, -1, chunk}))
                return -1;
        cursor = at;
        open = ends ? -1 : i;
    }
    return 0;
}

// The about members: the iteration, the backend, every rank's host-clock iteration.
static char *about_text(const TraceMeasure *m, const double *host, int world) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    fprintf(f, "\"iteration\": %lld, \"backend\": \"%s\", \"world_size\": %d, \"rank_iteration_seconds\": [",
            (long long)m->iteration + 1, m->be->name, world);
    for (int r = 0; r < world; r++) fprintf(f, "%s%.9g", r ? ", " : "", host[r]);
    fprintf(f, "]");
    return fclose(f) == 0 ? text : (free(text), NULL);
}

int trace_measure_write(TraceMeasure *m, const CommBackend *comm, const Grid *grid, int G, const char *path,
                        char *err, size_t errlen) {
    Trace t = {0};
    // an interleaved rank is its pipeline rank's process (grid: its first chunk's, stage r of P)
    t.virtual_chunks = m->virtual_chunks > 1 ? m->virtual_chunks : 1;
    t.stages = grid->num_stages / t.virtual_chunks, t.G = G, t.source = "measured";
    int rc = rank_events(m, grid->stage, grid->world_rank, &t), world = grid->world_size;
    int n = rc ? 0 : t.n;  // a rank out of memory sends nothing, and the others still meet
    if (grid->world_rank != 0) {
        commCheck(comm, comm->send(comm, &n, 1, MIST_I32, 0, TAG_TRACE, grid->world));
        commCheck(comm, comm->send(comm, &m->host_seconds, sizeof m->host_seconds, MIST_U8, 0, TAG_TRACE, grid->world));
        if (n) commCheck(comm, comm->send(comm, t.ev, (size_t)n * sizeof *t.ev, MIST_U8, 0, TAG_TRACE, grid->world));
        trace_free(&t);
        return 0;
    }
    double *host = calloc((size_t)world, sizeof *host);
    if (!host) comm->abort(comm, 1, "out of memory gathering the trace");
    host[0] = m->host_seconds;
    for (int r = 1; r < world; r++) {
        int k = 0;
        commCheck(comm, comm->recv(comm, &k, 1, MIST_I32, r, TAG_TRACE, grid->world));
        commCheck(comm, comm->recv(comm, &host[r], sizeof *host, MIST_U8, r, TAG_TRACE, grid->world));
        TraceEvent *in = k ? malloc((size_t)k * sizeof *in) : NULL;
        if (k && !in) comm->abort(comm, 1, "out of memory gathering the trace");
        if (k) commCheck(comm, comm->recv(comm, in, (size_t)k * sizeof *in, MIST_U8, r, TAG_TRACE, grid->world));
        for (int i = 0; i < k && !rc; i++) rc = trace_add(&t, in[i]);
        free(in);
    }
    for (int i = 0; i < t.n; i++)  // the slowest rank's iteration
        if (t.ev[i].start + t.ev[i].dur > t.iteration_seconds) t.iteration_seconds = t.ev[i].start + t.ev[i].dur;
    char *text = NULL, *about = rc ? NULL : about_text(m, host, world);
    size_t len = 0;
    FILE *f = about ? open_memstream(&text, &len) : NULL;
    if (f) rc = trace_write_json(&t, about, f);
    if (!f || fclose(f) != 0 || !text || rc) {
        snprintf(err, errlen, "[log] trace = %s: out of memory writing the trace", path);
        rc = -1;
    } else if (mist_write_file_atomic(path, text, len, err, errlen) != 0) {
        rc = -1;
    }
    free(text), free(about), free(host);
    trace_free(&t);
    return rc;
}
