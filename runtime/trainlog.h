// Training logs: a Megatron-style line on stdout every cfg->interval
// iterations, one JSON object per iteration in cfg->jsonl, and a summary JSON
// (per-rank predicted vs measured memory plus the last iteration) at the end.
// Only rank 0 writes; on other ranks every call is a no-op.
#ifndef MIST_TRAINLOG_H
#define MIST_TRAINLOG_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "base/schema.h"

typedef struct {
    int64_t iteration;          // 1-based iteration just finished
    int64_t steps;              // total iterations of the run
    int64_t consumed_tokens;    // tokens trained on so far (all ranks), including this iteration
    double ms_per_iter;         // wall time of this iteration
    double tokens_per_s;        // global tokens per second
    double tflops_per_device;   // model FLOPs per second per device, in TFLOP/s
    double mfu, hfu;            // fractions of the device peak (0.42 = 42%): model / hardware FLOPs
    double lr;
    double loss;                // mean lm loss of the iteration
    double grad_norm;           // global gradient norm before clipping
    int64_t skipped;            // iterations skipped so far (non-finite gradients)
    int64_t nonfinite;          // iterations with NaN/Inf loss or gradients so far
    int64_t peak_device_bytes;  // peak device memory of this rank (rank 0) so far
    int has_val;                // 1 when a validation pass ran after this iteration
    double val_loss;            // its mean loss (only read when has_val)
} IterStats;

typedef struct TrainLog TrainLog;

// Creates parent directories and truncates cfg->jsonl (when set). NULL with err on failure.
TrainLog *trainlog_open(const LogConfig *cfg, int rank, char *err, size_t errlen);
// For a resumed run: keeps the lines of cfg->jsonl with iteration < first_iteration
// and drops the rest (so the file reads as one uninterrupted run), then appends.
// first_iteration is the first (1-based) iteration the resumed run logs, i.e.
// the checkpoint's step + 1.
TrainLog *trainlog_open_resume(const LogConfig *cfg, int rank, int64_t first_iteration, char *err, size_t errlen);
// Prints the line (every interval) and appends the JSONL line; -1 with err when
// the JSONL line could not be written whole (a full disk, say).
int trainlog_iteration(TrainLog *t, const IterStats *s, char *err, size_t errlen);
// Where the lines go (stdout by default).
void trainlog_set_stream(TrainLog *t, FILE *out);
// Closes the log; -1 with err when the JSONL file could not be finished.
int trainlog_close(TrainLog *t, char *err, size_t errlen);

// The Megatron-style line for s (no trailing newline); returns its length.
int trainlog_format_line(const IterStats *s, char *buf, size_t len);
// The JSON object for s (one line, no trailing newline); NaN/Inf become null.
int trainlog_format_json(const IterStats *s, char *buf, size_t len);
// Bytes as a short human string: "512 B", "12.3 KiB", "1.50 GiB".
void trainlog_format_bytes(int64_t bytes, char *buf, size_t len);

typedef struct {
    int rank, stage;
    int64_t predicted_device_peak_bytes, measured_device_peak_bytes,  // measured: the arena's peak
            predicted_host_peak_bytes, measured_host_peak_bytes;
    // the device's own count (runtime/device_peak.h) when device_peak_from_device,
    // else (CPU backend) the arena's peak again
    int64_t device_peak_bytes;
    int device_peak_from_device;
    // device bytes the stage's first block took in its first forward and kept
    // (its saved tensors and its output, the next block's input): the measured
    // saved activations of one block (docs/tensor-parallel.md); 0 when not measured
    int64_t block_saved_bytes;
} RankMemory;

// The run's time per iteration against the planner's.
typedef struct {
    double predicted_seconds;        // the planner's iteration time; <= 0: none
    double measured_median_seconds;  // median wall time of the iterations timed; <= 0: none
    int iterations;                  // how many (the run's first is left out: it grows buffers)
    // rank 0's mean seconds per timed iteration in: its micro-batches' forward and
    // backward (device work and the collectives inside blocks included), waiting for
    // other stages' messages, the gradient norm; `other` is the rest of the iteration
    double mean_compute, mean_wait, mean_norm, mean_other;
} RunTiming;

// {"ranks": [{rank, stage, predicted/measured device/host peak bytes}...], "final": {IterStats},
//  "timing": {predicted_iteration_seconds, measured_median_iteration_seconds, iterations_timed,
//  measured_over_predicted, mean_seconds: {forward_backward, pipeline_wait, grad_norm, other}}} written atomically (tmp + rename); creates parent directories. last may
// be NULL ("final": null), timing too ("timing": null); unknown values are null.
int trainlog_write_summary(const char *path, const RankMemory *ranks, int n, const IterStats *last,
                           const RunTiming *timing, char *err, size_t errlen);

#endif
