// What the backend is told before a run (its attention kernels: attention_choice.h):
// the shapes whose buffers it keeps for the process (cuDNN's plans, the embedding backward's sort
// buffers), prepared before training so that the backend's reserved bytes are
// known up front and are a line of the predicted device memory:
//   predicted device = arena peak (mr_memory_predict) + backend reserved after preparing
// (docs/cuda-backend.md#device-memory).
#ifndef MIST_BACKEND_PREPARE_H
#define MIST_BACKEND_PREPARE_H

#include <stddef.h>
#include "kernels/backend.h"

// Prepares the ops of a stage at its shapes (Backend.prepare_op): attention at (B, T, NH,
// NKV, HS), and the embedding backward at B*T tokens when the stage has the embedding.
// note: why a preparation failed (the op then falls back at run time), "" when none did.
// Returns the backend's reserved device bytes after it; 0 on a backend whose device
// memory is host memory (the CPU: its arena is the whole of its device).
size_t backend_prepare_shapes(Backend *be, int B, int T, int NH, int NKV, int HS, int embedding, char *note,
                              size_t n);

// The backend's reserved device bytes now (0 where device memory is host memory).
size_t backend_reserved_device_bytes(Backend *be);

// The lines mist-train prints (without "mist: "): the prediction, arena + reserved =
// total; and the device's own count against it, where the device counts (device_peak.h):
//   measured = (free before the arenas - least free since) + reserved at that baseline
// (what the backend held before the baseline is invisible to the count, and known to the
// byte), with reserved_now > reserved said as growth after planning.
void backend_memory_predicted_line(int64_t arena, size_t reserved, char *out, size_t n);
void backend_memory_measured_line(int64_t device_count, size_t reserved, int64_t arena_predicted,
                                  size_t reserved_now, char *out, size_t n);

#endif
