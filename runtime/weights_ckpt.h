// The weights of a mist checkpoint, for tools that use them outside training
// (mist-export, mist-sample): open a checkpoint file or directory and recover
// the model it was written for from its "state/model" line.
#ifndef MIST_WEIGHTS_CKPT_H
#define MIST_WEIGHTS_CKPT_H
#include <stddef.h>
#include "base/schema.h"
#include "runtime/checkpoint.h"

// PATH is a checkpoint file, or a checkpoint directory (its `latest`). The
// file opened is copied to `opened`. NULL with err on failure.
CkptReader *weights_ckpt_open(const char *path, char *opened, size_t openlen, char *err, size_t errlen);
// The model the checkpoint describes, with its family's defaults for what
// the description does not fix (rope_theta, norm_eps). 0, or -1 with err.
int weights_ckpt_model(CkptReader *r, const char *path, ModelConfig *m, char *err, size_t errlen);

#endif
