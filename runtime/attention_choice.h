// The attention kernels of a run: [runtime] attention, or MIST_CUDA_ATTENTION over
// it, told to the backend before its first call (docs/cuda-backend.md#attention-kernels).
#ifndef MIST_ATTENTION_CHOICE_H
#define MIST_ATTENTION_CHOICE_H

#include <stddef.h>
#include "base/schema.h"
#include "kernels/backend.h"

// The run's attention kernels: MIST_CUDA_ATTENTION when set (launch_check_env checked
// its value), else [runtime] attention, given to the backend (Backend.set_attention).
// said: the line to print once, without "mist: " ("attention kernels: wgmma (auto: ...),
// from [runtime] attention = auto"); on a backend without a choice (the CPU) a note when
// one other than auto was asked for, else "". 0, or 2 with err naming where the choice
// came from (cfg->source and the key, or the variable), what is allowed here, a hint.
int backend_choose_attention(Backend *be, const MistConfig *cfg, char *said, size_t saidlen, char *err,
                             size_t errlen);

#endif
