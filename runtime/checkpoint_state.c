// The training state on top of the checkpoint container: fp32 master weights,
// Adam moments, counters, the data position, RNG bytes and the model identity.
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include "runtime/checkpoint.h"

void ckpt_model_describe(const ModelConfig *m, char *buf, size_t len) {
    static const char *families[] = {"gpt", "llama"}, *norms[] = {"layernorm", "rmsnorm"},
                      *acts[] = {"gelu", "swiglu"}, *positions[] = {"learned", "rotary", "none"};
    snprintf(buf, len,
             "family=%s layers=%d hidden=%d heads=%d kv_heads=%d ffn_hidden=%d vocab=%d seq_len=%d norm=%s "
             "activation=%s position=%s bias=%d tied_embeddings=%d parallel_block=%d",
             (unsigned)m->family < 2 ? families[m->family] : "?", m->layers, m->hidden, m->heads, m->kv_heads,
             m->ffn_hidden, m->vocab, m->seq_len, (unsigned)m->norm < 2 ? norms[m->norm] : "?",
             (unsigned)m->activation < 2 ? acts[m->activation] : "?",
             (unsigned)m->position < 3 ? positions[m->position] : "?", m->bias, m->tied_embeddings,
             m->parallel_block);
}

uint64_t ckpt_model_hash(const ModelConfig *m) {
    char text[512];
    ckpt_model_describe(m, text, sizeof text);
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64: h = (h ^ byte) * 0x100000001b3
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

// "param/" + name: the stored name of one of a tensor's three arrays
static int array_name(char *out, size_t len, const char *kind, const char *name) {
    return (size_t)snprintf(out, len, "%s/%s", kind, name) < len ? 0 : -1;
}

static const char *const KINDS[3] = {"param", "adam_m", "adam_v"};

static float *array_of(const CkptTensor *t, int k) { return k == 0 ? t->param : k == 1 ? t->adam_m : t->adam_v; }

int checkpoint_save(const char *dir, int keep, const ModelConfig *model, const CkptState *state,
                    const CkptTensor *tensors, int n, char *err, size_t errlen) {
    if (state->rng_bytes > CKPT_RNG_MAX) {
        snprintf(err, errlen, "checkpoint: RNG state of %zu bytes exceeds %d", state->rng_bytes, CKPT_RNG_MAX);
        return -1;
    }
    CkptWriter *w = ckpt_writer_open(dir, state->step, err, errlen);
    if (!w) return -1;
    char describe[512], name[CKPT_NAME_MAX];
    ckpt_model_describe(model, describe, sizeof describe);
    uint64_t hash = ckpt_model_hash(model);
    ckpt_write_blob(w, "state/model", describe, strlen(describe));
    ckpt_write_blob(w, "state/model_hash", &hash, 8);
    ckpt_write_blob(w, "state/step", &state->step, 8);
    ckpt_write_blob(w, "state/adam_t", &state->adam_t, 8);
    ckpt_write_blob(w, "state/data_position", &state->data_position, 8);
    ckpt_write_blob(w, "state/skipped", &state->skipped, 8);
    ckpt_write_blob(w, "state/nonfinite", &state->nonfinite, 8);
    ckpt_write_blob(w, "state/rng", state->rng, state->rng_bytes);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 3; k++) {
            const float *data = array_of(&tensors[i], k);
            if (!data) continue;
            if (array_name(name, sizeof name, KINDS[k], tensors[i].name) != 0) {
                snprintf(err, errlen, "checkpoint: tensor name '%s' is too long (at most %d characters)",
                         tensors[i].name, CKPT_NAME_MAX - 8);
                ckpt_writer_abort(w);
                return -1;
            }
            ckpt_write_tensor(w, name, MIST_F32, tensors[i].ndim, tensors[i].shape, data);
        }
    return ckpt_writer_commit(w, keep, err, errlen);  // reports the first write error, if any
}

static int read_i64(CkptReader *r, const char *name, void *out, char *err, size_t errlen) {
    return ckpt_read_blob(r, name, out, 8, err, errlen);
}

int checkpoint_load(const char *path, const ModelConfig *model, CkptState *state,
                    const CkptTensor *tensors, int n, char *err, size_t errlen) {
    CkptReader *r = ckpt_reader_open(path, err, errlen);  // validates every checksum
    if (!r) return -1;
    int rc = -1;
    char stored[512] = "", want[512], name[CKPT_NAME_MAX];
    uint64_t hash = 0;
    int64_t model_bytes = ckpt_blob_bytes(r, "state/model");
    if (model_bytes < 0 || model_bytes >= (int64_t)sizeof stored ||
        ckpt_read_blob(r, "state/model", stored, (size_t)model_bytes, err, errlen) != 0 ||
        read_i64(r, "state/model_hash", &hash, err, errlen) != 0) {
        if (model_bytes < 0 || model_bytes >= (int64_t)sizeof stored)
            snprintf(err, errlen, "checkpoint '%s' has no model description (state/model); it holds tensors only and "
                     "was not written by mist-train (hint: resume from a checkpoint written by mist-train)", path);
        goto done;
    }
    ckpt_model_describe(model, want, sizeof want);
    if (hash != ckpt_model_hash(model) || strcmp(stored, want) != 0) {
        snprintf(err, errlen, "checkpoint '%s' was written for a different model (checkpoint: %s; config: %s) "
                 "(hint: resume with the [model] section of the run that wrote it, or point [checkpoint] dir at a new "
                 "directory)", path, stored, want);
        goto done;
    }
    CkptState s;
    memset(&s, 0, sizeof s);
    int64_t rng_bytes = ckpt_blob_bytes(r, "state/rng");
    if (read_i64(r, "state/step", &s.step, err, errlen) != 0 || read_i64(r, "state/adam_t", &s.adam_t, err, errlen) != 0 ||
        read_i64(r, "state/data_position", &s.data_position, err, errlen) != 0 ||
        read_i64(r, "state/skipped", &s.skipped, err, errlen) != 0 ||
        read_i64(r, "state/nonfinite", &s.nonfinite, err, errlen) != 0)
        goto done;
    // The counters drive the resume (the iteration loop, the data position, Adam's bias
    // correction, an int step count): a damaged or foreign checkpoint is refused here,
    // not discovered as an overflow later. Every optimizer step, skipped step and
    // non-finite step is one of the `step` iterations done, and the header says which.
    int64_t header_step = ckpt_reader_step(r);
    if (s.step != header_step || s.step < 0 || s.step > CKPT_MAX_STEP || s.adam_t < 0 || s.adam_t > s.step ||
        s.skipped < 0 || s.skipped > s.step || s.nonfinite < 0 || s.nonfinite > s.step || s.data_position < 0) {
        snprintf(err, errlen, "checkpoint '%s': inconsistent training state (state/step %lld, header step %lld, "
                 "state/adam_t %lld, state/skipped %lld, state/nonfinite %lld, state/data_position %lld); allowed: "
                 "step = the header's step in 0..%lld, adam_t, skipped and nonfinite in 0..step, data_position >= 0 "
                 "(hint: resume from another checkpoint in the directory, or start a new run)", path,
                 (long long)s.step, (long long)header_step, (long long)s.adam_t, (long long)s.skipped,
                 (long long)s.nonfinite, (long long)s.data_position, (long long)CKPT_MAX_STEP);
        goto done;
    }
    if (rng_bytes < 0 || rng_bytes > CKPT_RNG_MAX) {
        snprintf(err, errlen, "checkpoint '%s': the RNG state (state/rng) is missing or larger than %d bytes", path,
                 CKPT_RNG_MAX);
        goto done;
    }
    if (ckpt_read_blob(r, "state/rng", s.rng, (size_t)rng_bytes, err, errlen) != 0) goto done;
    s.rng_bytes = (size_t)rng_bytes;
    s.model_hash = hash;
    for (int i = 0; i < n; i++) {
        int64_t numel = 1;
        for (int d = 0; d < tensors[i].ndim; d++) numel *= tensors[i].shape[d];
        for (int k = 0; k < 3; k++) {
            float *data = array_of(&tensors[i], k);
            if (!data) continue;
            if (array_name(name, sizeof name, KINDS[k], tensors[i].name) != 0) {
                snprintf(err, errlen, "checkpoint: tensor name '%s' is too long", tensors[i].name);
                goto done;
            }
            if (ckpt_reader_expect(r, name, tensors[i].ndim, tensors[i].shape, err, errlen) != 0 ||
                ckpt_read_tensor(r, name, MIST_F32, 0, numel, data, err, errlen) != 0)
                goto done;
        }
    }
    *state = s;
    rc = 0;
done:
    ckpt_reader_close(r);
    return rc;
}

int checkpoint_load_latest(const char *dir, const ModelConfig *model, CkptState *state,
                           const CkptTensor *tensors, int n, char *path, size_t pathlen, char *err, size_t errlen) {
    char found[2048];
    int rc = ckpt_find_latest_err(dir, found, sizeof found, err, errlen);
    if (rc <= 0) return rc;
    if (checkpoint_load(found, model, state, tensors, n, err, errlen) != 0) return -1;
    if (path && pathlen) snprintf(path, pathlen, "%s", found);
    return 1;
}
