// Non-interleaved 1F1B (see pipeline_schedule.h).
#include "runtime/pipeline_schedule.h"

int pipeline_warmup(int stage, int stages, int G) {
    int w = stages - stage - 1;
    return w < G ? w : G;
}

int pipeline_max_in_flight(int stage, int stages, int G) {
    int n = stages - stage;
    return n < G ? n : G;
}

int pipeline_1f1b(int stage, int stages, int G, PipeAction *out) {
    if (stage < 0 || stage >= stages || G < 1) return -1;
    int warm = pipeline_warmup(stage, stages, G), n = 0, next_bwd = 0;
    for (int m = 0; m < warm; m++) out[n++] = (PipeAction){PIPE_FORWARD, m};
    // steady state: the forward of the next micro-batch, then the backward of
    // the oldest one in flight (its gradient arrives from the next stage
    // while this stage was busy with the forward)
    for (int m = warm; m < G; m++) {
        out[n++] = (PipeAction){PIPE_FORWARD, m};
        out[n++] = (PipeAction){PIPE_BACKWARD, next_bwd++};
    }
    while (next_bwd < G) out[n++] = (PipeAction){PIPE_BACKWARD, next_bwd++};
    return n;
}
