// Timed events of one iteration and their Chrome trace-event JSON (see trace.h).
// Format: {"traceEvents": [...]} with complete events ("ph": "X", "ts" and "dur"
// in microseconds) and metadata events naming each process (a stage) and thread
// (a stream, or a rank of the stage in a measured trace).
#include "planner/trace.h"
#include <stdio.h>
#include <stdlib.h>

const char *const trace_kind_names[TRACE_KINDS] = {"forward", "backward", "bubble", "grad norm",
                                                   "collectives", "h2d", "d2h",
                                                   "block %d forward", "block %d backward", "block %d recompute",
                                                   "pre forward", "pre backward", "post forward", "post backward",
                                                   "block %d recompute attention"};
static const char *const track_names[TRACE_TRACKS] = {"compute", "collectives", "host->device", "device->host"};

void trace_event_name(const TraceEvent *e, char *dst, size_t len) {
    int k = e->kind;
    if (k == TRACE_BLOCK_FORWARD || k == TRACE_BLOCK_BACKWARD || k == TRACE_BLOCK_RECOMPUTE ||
        k == TRACE_BLOCK_RECOMPUTE_ATT)
        snprintf(dst, len, trace_kind_names[k], e->block);
    else if (e->chunk > 0 && (k == TRACE_FORWARD || k == TRACE_BACKWARD))  // which of the rank's chunks
        snprintf(dst, len, "stage %d %s", e->chunk - 1, trace_kind_names[k]);
    else
        snprintf(dst, len, "%s", trace_kind_names[k]);
}

int trace_add(Trace *t, TraceEvent e) {
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 256;
        TraceEvent *ev = realloc(t->ev, (size_t)cap * sizeof *ev);
        if (!ev) return -1;
        t->ev = ev, t->cap = cap;
    }
    t->ev[t->n++] = e;
    return 0;
}

void trace_free(Trace *t) {
    free(t->ev);
    t->ev = NULL;
    t->n = t->cap = 0;
}

double trace_compute_track_seconds(const Trace *t, int stage, int rank) {
    double sum = 0;
    for (int i = 0; i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        if (e->stage == stage && e->track == TRACE_TRACK_COMPUTE && e->kind < TRACE_TOP_KINDS && (rank < 0 || e->rank == rank))
            sum += e->dur;
    }
    return sum;
}

void trace_json_escape(char *dst, size_t len, const char *src) {
    size_t n = 0;
    for (; *src && n + 3 < len; src++) {
        if ((unsigned char)*src < 0x20) continue;
        if (*src == '"' || *src == '\\') dst[n++] = '\\';
        dst[n++] = *src;
    }
    if (len) dst[n < len ? n : len - 1] = 0;
}

// The thread id of an event: a predicted trace has one row per stream, a
// measured one a row per rank (compute only), so tids never collide.
static int thread_of(const TraceEvent *e) { return e->rank < 0 ? e->track : TRACE_TRACKS + e->rank; }

int trace_write_json(const Trace *t, const char *about, FILE *f) {
    int v = t->virtual_chunks > 1 ? t->virtual_chunks : 1, P = t->stages;
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"source\": \"%s\", \"stages\": %d, ", t->source, P * v);
    if (v > 1) fprintf(f, "\"virtual\": %d, \"pipeline_ranks\": %d, ", v, P);
    fprintf(f, "\"microbatches\": %d, \"iteration_seconds\": %.9g%s%s},\n\"traceEvents\": [\n", t->G,
            t->iteration_seconds, about ? ", " : "", about ? about : "");
    // names of the stages (interleaved: pipeline ranks, with the stages of their chunks) and rows, once
    // each, in order (sort indices keep stage 0 on top)
    for (int s = 0; s < P; s++) {
        fprintf(f, "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, \"args\": {\"name\": \"%s %d", s,
                v > 1 ? "pipeline rank" : "stage", s);
        for (int j = 0; v > 1 && j < v; j++) fprintf(f, "%s%d", j ? ", " : ": stages ", s + j * P);
        fprintf(f, "\"}},\n{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": %d, \"args\": {\"sort_index\": "
                   "%d}},\n", s, s);
    }
    unsigned char *named = calloc((size_t)t->stages * (TRACE_TRACKS + 1), 1);  // (stage, track) rows named
    for (int i = 0; i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        int tid = thread_of(e);
        if (e->rank < 0 && named && !named[e->stage * (TRACE_TRACKS + 1) + e->track]++)
            fprintf(f, "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"%s\"}},\n",
                    e->stage, tid, track_names[e->track]);
        if (e->rank >= 0 && (i == 0 || t->ev[i - 1].rank != e->rank))
            fprintf(f, "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"rank %d\"}},\n",
                    e->stage, tid, e->rank);
    }
    free(named);
    for (int i = 0; i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        char name[64];
        trace_event_name(e, name, sizeof name);
        fprintf(f, "{\"ph\": \"X\", \"name\": \"%s\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f", name,
                e->stage, thread_of(e), e->start * 1e6, e->dur * 1e6);
        if (e->microbatch >= 0) fprintf(f, ", \"args\": {\"microbatch\": %d}", e->microbatch);
        fprintf(f, "}%s\n", i + 1 < t->n ? "," : "");
    }
    fprintf(f, "]}\n");
    return ferror(f) ? -1 : 0;
}
