// Guards of a training run that need no training state (runtime/train_guard.c).
#ifndef MIST_TRAIN_GUARD_H
#define MIST_TRAIN_GUARD_H
#include <stddef.h>
#include <stdint.h>

// 1 with err when this node's ranks (the launcher's local size) would need more
// than MemAvailable for per_rank bytes each (the CPU backend: device arena =
// host memory); 0 otherwise, or when it cannot tell. MIST_HOST_MEMORY_CHECK=0
// skips it; MIST_FAULT_HOST_MEMORY_AVAILABLE=BYTES stands in for the node (tests).
int host_memory_short(int64_t per_rank, char *err, size_t errlen);

// Seconds a wait may take while a checkpoint of `params` parameters is gathered
// and written: comm_timeout plus the write at a slow file system's pace; 0 stays 0.
double checkpoint_timeout(double comm_timeout, int64_t params);

// With MIST_STOP_FILE set: writes `iteration` there (atomically), after a stop
// signal's checkpoint, for the batch script that requeues the job.
void write_stop_file(int64_t iteration);

#endif
