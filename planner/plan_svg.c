// SVG picture of a plan (see plan_svg.h). Plain SVG 1.1: rectangles, lines and
// text with explicit colours, so any renderer (browsers, rsvg-convert) draws it alike.
#include "planner/plan_svg.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

enum {
    WIDTH = 1200, LEFT = 110, RIGHT = 20, TOP = 64,
    LANE = 18, STREAM_LANE = 5, ROW_GAP = 12,  // a stage row: the compute lane, then one thin lane per side stream
    BAR = 18, BAR_GAP = 10,
};
#define ROW (LANE + 3 * (STREAM_LANE + 1) + ROW_GAP)

static const char *const kind_colour[TRACE_TOP_KINDS] = {"#4e79a7", "#f28e2b", "#e3e3e3", "#444444",
                                                     "#59a14f", "#b07aa1", "#c9a800"};
// an interleaved rank's later chunks (round j = chunk div P, j odd) in lighter shades of the same
// colours, so that a row shows which passes belong to which of its chunks
static const char *const later_chunk_colour[2] = {"#9ec3e6", "#f9c38e"};

// The colour of a top-level event: a pass of round j of an interleaved plan (P pipeline ranks)
// takes the lighter shade when j is odd.
static const char *event_colour(const TraceEvent *e, int P) {
    int pass = e->kind == TRACE_FORWARD || e->kind == TRACE_BACKWARD;
    return pass && e->chunk > 0 && (e->chunk - 1) / P % 2 ? later_chunk_colour[e->kind] : kind_colour[e->kind];
}

// the memory classes of a stage's peak, in stacking order (planner/stage_model.h)
static const struct {
    int out;
    const char *name, *colour;
} memory_parts[] = {
    {ST_WEIGHTS, "weights", "#4e79a7"},         {ST_GRADS, "gradients", "#f28e2b"},
    {ST_OPTIMIZER, "optimizer state", "#59a14f"}, {ST_ACTIVATIONS, "activations", "#e15759"},
    {ST_BUFFERS_FWD, "buffers", "#76b7b2"},     {ST_TRANSIENT_FWD, "transient", "#bab0ac"},
};
#define MEMORY_PARTS (int)(sizeof memory_parts / sizeof memory_parts[0])

// bytes as "3.97 MiB" or "22.17 GiB"
static const char *bytes_text(double bytes, char *buf, size_t len) {
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) bytes /= 1024, u++;
    snprintf(buf, len, "%.2f %s", bytes, unit[u]);
    return buf;
}

// A segment's bytes at the stage's peak (planner/memory.c): peak = weights + grads + optimizer +
// buffers + (activations - logits) + transient, of the phase (forward or backward) whose peak is
// the larger. The head (logits) is inside the transient at the turn, so activations leave it out;
// so the bar's segments add up to the peak.
static double memory_part(const StageAnalysis *s, int k) {
    int o = memory_parts[k].out, bwd = s->out[ST_PEAK_BWD] >= s->out[ST_PEAK_FWD];
    if (o == ST_BUFFERS_FWD) return s->out[bwd ? ST_BUFFERS_BWD : ST_BUFFERS_FWD];
    if (o == ST_TRANSIENT_FWD) return s->out[bwd ? ST_TRANSIENT_BWD : ST_TRANSIENT_FWD];
    if (o == ST_ACTIVATIONS) return s->out[ST_ACTIVATIONS] - s->out[ST_LOGITS];
    return s->out[o];
}

// s as SVG text: the markup characters escaped (a title or a profile's name comes from the user)
static void xml_text(FILE *f, const char *s) {
    for (const char *c = s ? s : ""; *c; c++)
        fputs(*c == '<' ? "&lt;" : *c == '>' ? "&gt;" : *c == '&' ? "&amp;" : (char[]){*c, 0}, f);
}

static void legend_item(FILE *f, int x, int y, const char *colour, const char *name) {
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\" stroke=\"#666\" stroke-width=\"0.5\"/>"
               "<text x=\"%d\" y=\"%d\">%s</text>\n", x, y - 10, colour, x + 16, y, name);
}

static void draw_timeline(const Trace *t, double scale, FILE *f) {
    int lane_y[TRACE_TRACKS] = {0, LANE + 1, LANE + STREAM_LANE + 2, LANE + 2 * STREAM_LANE + 3};
    for (int i = 0; i < t->n; i++) {
        const TraceEvent *e = &t->ev[i];
        if ((e->kind == TRACE_GRAD_NORM && e->dur <= 0) || e->kind >= TRACE_TOP_KINDS) continue;  // passes only
        double x = LEFT + e->start * scale, w = fmax(e->dur * scale, 0.5);
        int y = TOP + e->stage * ROW + lane_y[e->track], h = e->track == TRACE_TRACK_COMPUTE ? LANE : STREAM_LANE;
        const char *fill = event_colour(e, t->stages), *ink = fill == kind_colour[e->kind] ? "#ffffff" : "#222222";
        fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"", x, y, w, h, fill);
        // a white edge between passes where there is room for one
        if (e->track == TRACE_TRACK_COMPUTE && e->kind != TRACE_BUBBLE && w >= 4)
            fprintf(f, " stroke=\"#ffffff\" stroke-width=\"0.5\"");
        if (e->track == TRACE_TRACK_COMPUTE && e->microbatch >= 0) {  // what it is, on hovering: "stage 2 forward 3"
            char name[64];
            trace_event_name(e, name, sizeof name);
            fprintf(f, "><title>%s %d</title></rect>\n", name, e->microbatch);
        } else {
            fprintf(f, "/>\n");
        }
        if (e->track == TRACE_TRACK_COMPUTE && e->microbatch >= 0 && w >= 14)  // room for the micro-batch number
            fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\" fill=\"%s\" font-size=\"10\">%d</text>\n",
                    x + w / 2, y + 13, ink, e->microbatch);
        if (e->track == TRACE_TRACK_COMPUTE && e->chunk > 0 && w >= 40)  // and for the chunk's stage
            fprintf(f, "<text x=\"%.2f\" y=\"%d\" fill=\"%s\" font-size=\"7\">s%d</text>\n", x + 2, y + 7, ink,
                    e->chunk - 1);
    }
}

// One bar per stage, or per pipeline rank of an interleaved plan (P of them): the rank holds its
// chunks r, r + P, ... at once, so its bar stacks each memory class summed over them, up to the
// rank's peak (PlanAnalysis.rank_peak, the sum of its chunks' peaks).
static void draw_memory(const PlanAnalysis *a, int P, int top, FILE *f) {
    int v = a->num_stages / P;
    double most = (double)a->capacity;
    for (int i = 0; i < a->num_stages; i++) most = fmax(most, (double)(v > 1 ? a->rank_peak[i % P] : a->stage[i].peak));
    double scale = most > 0 ? (WIDTH - LEFT - RIGHT - 150) / most : 0;
    char b1[32], b2[32];
    for (int i = 0; i < P; i++) {
        const StageAnalysis *s = &a->stage[i];
        int y = top + i * (BAR + BAR_GAP);
        double x = LEFT, cap_x = LEFT + (double)a->capacity * scale;
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s %d</text>\n", LEFT - 8, y + 13, v > 1 ? "rank" : "stage", i);
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"#f4f4f4\"/>\n", LEFT, y, cap_x - LEFT, BAR);
        for (int k = 0; k < MEMORY_PARTS; k++) {
            double bytes = 0;
            for (int c = i; c < a->num_stages; c += P) bytes += memory_part(&a->stage[c], k);
            double w = bytes * scale;
            if (w <= 0) continue;
            fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"><title>%s %s (%.0f B)"
                       "</title></rect>\n", x, y, w, BAR, memory_parts[k].colour, memory_parts[k].name,
                    bytes_text(bytes, b1, sizeof b1), bytes);
            x += w;
        }
        fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#d62728\" stroke-width=\"2\"/>\n", cap_x,
                y - 3, cap_x, y + BAR + 3);
        fprintf(f, "<text x=\"%.2f\" y=\"%d\">peak %s of %s%s</text>\n", fmax(x, cap_x) + 8, y + 13,
                bytes_text((double)(v > 1 ? a->rank_peak[i] : s->peak), b1, sizeof b1),
                bytes_text((double)a->capacity, b2, sizeof b2), s->fits ? "" : " (does not fit)");
    }
}

int plan_svg_write(const PlanAnalysis *a, const Trace *t, const char *title, FILE *f) {
    int S = a->num_stages, P = t->stages;  // the rows: stages, or an interleaved plan's pipeline ranks
    int timeline_h = P * ROW, mem_top = TOP + timeline_h + 70, height = mem_top + P * (BAR + BAR_GAP) + 50;
    double span = t->iteration_seconds > 0 ? t->iteration_seconds : 1;
    double scale = (WIDTH - LEFT - RIGHT) / span;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\" fill=\"#222\">\n"
               "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n",
            WIDTH, height, WIDTH, height, WIDTH, height);
    fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\">", LEFT);
    xml_text(f, title);
    fprintf(f, "</text>\n<text x=\"%d\" y=\"40\">%d stage(s), G = %d micro-batches, %d ranks, ", LEFT, S, a->G, a->world);
    xml_text(f, a->hardware);
    if (S > P)
        fprintf(f, ": iteration %.4g s predicted (interleaved 1F1B, %d pipeline ranks of %d chunks), %.1f%% MFU</text>\n",
                a->iteration_seconds, P, S / P, 100 * a->mfu);
    else
        fprintf(f, ": iteration %.4g s predicted (1F1B), %.1f%% MFU</text>\n", a->iteration_seconds, 100 * a->mfu);
    int lx = LEFT;
    for (int k = 0; k < TRACE_TOP_KINDS; k++) {
        if (k == TRACE_GRAD_NORM) continue;
        legend_item(f, lx, 58, kind_colour[k], trace_kind_names[k]);
        lx += 30 + 8 * (int)strlen(trace_kind_names[k]);
    }
    if (S > P) {  // the lighter shade: the rank's odd rounds of chunks (chunks P .. 2P - 1, 3P ..)
        legend_item(f, lx, 58, later_chunk_colour[0], "");
        legend_item(f, lx + 14, 58, later_chunk_colour[1], "a rank's later chunks");
    }
    for (int i = 0; i < P; i++)
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s %d</text>\n", LEFT - 8, TOP + i * ROW + 13,
                S > P ? "rank" : "stage", i);
    draw_timeline(t, scale, f);
    // the time axis: ten ticks
    int axis_y = TOP + timeline_h + 4;
    for (int k = 0; k <= 10; k++) {
        double x = LEFT + k * (WIDTH - LEFT - RIGHT) / 10.0;
        fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#888\"/><text x=\"%.2f\" y=\"%d\" "
                   "text-anchor=\"middle\" font-size=\"10\">%.3g s</text>\n",
                x, axis_y, x, axis_y + 5, x, axis_y + 17, span * k / 10);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">device memory per rank (red: capacity)</text>\n", LEFT,
            mem_top - 30);
    lx = LEFT;
    for (int k = 0; k < MEMORY_PARTS; k++) {
        legend_item(f, lx, mem_top - 8, memory_parts[k].colour, memory_parts[k].name);
        lx += 30 + 8 * (int)strlen(memory_parts[k].name);
    }
    draw_memory(a, P, mem_top, f);
    fprintf(f, "</svg>\n");
    return ferror(f) ? -1 : 0;
}
