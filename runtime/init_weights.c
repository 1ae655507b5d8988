// Initial weights from a safetensors file or an llm.c GPT-2 checkpoint (runtime/init_weights.h).
#define _FILE_OFFSET_BITS 64
#define _XOPEN_SOURCE 700
#include "runtime/init_weights.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "runtime/hf_names.h"
#include "runtime/safetensors.h"
#include "runtime/zero.h"

// Appends one problem to err ("; "-separated); the count goes on regardless.
static void note(char *err, size_t errlen, int *problems, const char *fmt, const char *a, const char *b,
                 const char *c) {
    size_t at = strlen(err);
    if (at + 8 < errlen) {
        if (*problems) at += (size_t)snprintf(err + at, errlen - at, "; ");
        snprintf(err + at, errlen - at, fmt, a, b, c);
    }
    (*problems)++;
}

// The real rows of a tensor in a file: the vocabulary's V for wte and the head, else all.
static int64_t real_rows(const ModelRuntime *r, const ParamTensor *p) {
    return !strcmp(p->name, "wte") || !strcmp(p->name, "lm_head_w") ? r->V : p->spec.rows;
}

// The tensor of piece p in the file: its name, or (official GPT-2 files saved from
// GPT2Model) the name without "transformer.", or for an untied head the tied
// embedding when the file has no lm_head.weight.
static const StTensor *find_piece(const StReader *st, const HfPiece *p, const ModelConfig *m) {
    const StTensor *t = st_reader_find(st, p->name);
    if (!t && !strncmp(p->name, "transformer.", 12)) t = st_reader_find(st, p->name + 12);
    if (!t && !strcmp(p->name, "lm_head.weight")) {
        HfPiece wte;
        hf_pieces(m, "wte", p->rows, p->shape[1], &wte);
        t = find_piece(st, &wte, m);
    }
    return t;
}

static int read_piece(StReader *st, const StTensor *t, const HfPiece *p, int64_t cols, float *dst, char *err,
                      size_t errlen) {
    int64_t count = p->rows * cols;
    if (!p->transpose) return st_read_f32(st, t, 0, count, dst + p->row0 * cols, err, errlen);
    float *tmp = malloc((size_t)count * sizeof *tmp);
    if (!tmp) { snprintf(err, errlen, "out of host memory for '%s'", t->name); return -1; }
    int rc = st_read_f32(st, t, 0, count, tmp, err, errlen);
    // stored (cols, rows) -> mist (rows, cols)
    for (int64_t a = 0; !rc && a < p->rows; a++)
        for (int64_t c = 0; c < cols; c++) dst[(p->row0 + a) * cols + c] = tmp[c * p->rows + a];
    free(tmp);
    return rc;
}

static int read_safetensors(const ModelRuntime *r, const char *path, float *global, char *err, size_t errlen) {
    StReader *st = st_reader_open(path, err, errlen);
    if (!st) return -1;
    char list[3072] = "";
    int problems = 0, rc = 0;
    for (int k = 0; k < r->num_tensors && !rc; k++) {
        const ParamTensor *pt = &r->tensors[k];
        HfPiece pieces[HF_MAX_PIECES];
        int np = hf_pieces(&r->m, pt->name, real_rows(r, pt), pt->spec.cols, pieces);
        for (int i = 0; i < np && !rc; i++) {
            const StTensor *t = find_piece(st, &pieces[i], &r->m);
            char want[64], have[64];
            st_shape_text(pieces[i].ndim, pieces[i].shape, want, sizeof want);
            if (!t) {
                note(list, sizeof list, &problems, "'%s' is missing (mist '%s', shape %s)", pieces[i].name, pt->name,
                     want);
                continue;
            }
            st_shape_text(t->ndim, t->shape, have, sizeof have);
            // a position table for more positions than seq_len: its first seq_len rows
            int longer_wpe = !strcmp(pt->name, "wpe") && t->ndim == 2 && t->shape[0] >= pieces[i].shape[0] &&
                             t->shape[1] == pieces[i].shape[1];
            if (strcmp(want, have) && !longer_wpe) {
                note(list, sizeof list, &problems, "'%s' has shape %s, the model needs %s", t->name, have, want);
                continue;
            }
            if (!problems) rc = read_piece(st, t, &pieces[i], pt->spec.cols, global + pt->goffset, err, errlen);
        }
    }
    if (!rc && problems)
        snprintf(err, errlen, "'%s' does not fit the model: %d tensor(s): %s (hint: the [model] section must describe "
                 "the model the file holds; names and layouts are in docs/weights.md)", path, problems, list);
    st_reader_close(st);
    return rc || problems ? -1 : 0;
}

// llm.c's parameter arrays, in file order: per-layer ones stacked over L.
enum { LL_WTE, LL_WPE, LL_LN1W, LL_LN1B, LL_QKVW, LL_QKVB, LL_PROJW, LL_PROJB, LL_LN2W, LL_LN2B, LL_FCW, LL_FCB,
       LL_FCPROJW, LL_FCPROJB, LL_LNFW, LL_LNFB, LL_COUNT };
static const char *const LLMC_NAMES[LL_COUNT] = {"wte", "wpe", "ln1_w", "ln1_b", "qkv_w", "qkv_b", "attn_proj_w",
                                                 "attn_proj_b", "ln2_w", "ln2_b", "fc_w", "fc_b", "fc_proj_w",
                                                 "fc_proj_b", "lnf_w", "lnf_b"};

static int read_llmc(const ModelRuntime *r, const char *path, float *global, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    int32_t h[256];
    if (!f || fread(h, 4, 256, f) != 256) {
        snprintf(err, errlen, "'%s': cannot read the 1024-byte llm.c header: %s", path, f ? "the file is shorter" :
                 strerror(errno));
        if (f) fclose(f);
        return -1;
    }
    const ModelConfig *m = &r->m;
    int version = h[1], maxT = h[2], V = h[3], L = h[4], NH = h[5], C = h[6], Vp = version == 1 ? V : h[7];
    char list[2048] = "", a[64], b[64];
    int problems = 0;
    if (version != 1 && version != 3 && version != 5) {
        snprintf(err, errlen, "'%s': llm.c checkpoint version %d; allowed: 1, 3 (fp32), 5 (bf16) (hint: re-export it "
                 "with llm.c's train_gpt2.py)", path, version);
        fclose(f);
        return -1;
    }
    const char *keys[] = {"vocab", "layers", "heads", "hidden"};
    int file_v[] = {V, L, NH, C}, model_v[] = {m->vocab, m->layers, m->heads, m->hidden};
    for (int i = 0; i < 4; i++)
        if (file_v[i] != model_v[i]) {
            snprintf(a, sizeof a, "%d", file_v[i]), snprintf(b, sizeof b, "%d", model_v[i]);
            note(list, sizeof list, &problems, "[model] %s: the file has %s, the config %s", keys[i], a, b);
        }
    if (m->seq_len > maxT) {
        snprintf(a, sizeof a, "%d", maxT), snprintf(b, sizeof b, "%d", m->seq_len);
        note(list, sizeof list, &problems, "[model] seq_len: the file has positions for %s, the config needs %s%s", a, b, "");
    }
    if (m->family != FAMILY_GPT || !m->bias || !m->tied_embeddings || m->parallel_block || m->kv_heads != m->heads ||
        m->ffn_hidden != 4 * m->hidden)
        note(list, sizeof list, &problems, "[model]: llm.c files hold GPT-2 (family gpt, bias 1, tied_embeddings 1, "
             "kv_heads = heads, ffn_hidden = 4 x hidden, no parallel block)%s%s%s", "", "", "");
    if (problems) {
        snprintf(err, errlen, "'%s' (llm.c GPT-2) does not fit the model: %s", path, list);
        fclose(f);
        return -1;
    }
    // element offsets of the arrays; a layer's slice of a stacked array is at l * (its size / L)
    int64_t c = C, size[LL_COUNT] = {(int64_t)Vp * c, (int64_t)maxT * c, L * c, L * c, L * 3 * c * c, L * 3 * c,
                                     L * c * c, L * c, L * c, L * c, L * 4 * c * c, L * 4 * c, L * 4 * c * c, L * c,
                                     c, c};
    int64_t start[LL_COUNT], at = 0;
    for (int i = 0; i < LL_COUNT; i++) start[i] = at, at += size[i];
    size_t esize = version == 5 ? 2 : 4;
    int rc = 0;
    for (int k = 0; k < r->num_tensors && !rc; k++) {
        const ParamTensor *pt = &r->tensors[k];
        int layer = 0, used = 0, idx = -1;
        const char *base = pt->name;
        if (sscanf(pt->name, "block.%d.%n", &layer, &used) == 1 && used) base = pt->name + used;
        for (int i = 0; i < LL_COUNT; i++)
            if (!strcmp(base, LLMC_NAMES[i])) idx = i;
        int64_t count = real_rows(r, pt) * pt->spec.cols;  // wpe: the first seq_len of maxT rows
        int64_t elem = start[idx] + (idx >= LL_LN1W && idx <= LL_FCPROJB ? layer * (size[idx] / L) : 0);
        float *dst = global + pt->goffset;
        if (fseeko(f, (off_t)(1024 + elem * (int64_t)esize), SEEK_SET) != 0) rc = -1;
        if (esize == 4 && !rc) rc = fread(dst, 4, (size_t)count, f) != (size_t)count;
        for (int64_t i = 0; esize == 2 && !rc && i < count; i++) {
            uint16_t v;
            rc = fread(&v, 2, 1, f) != 1;
            dst[i] = mist_bf16_to_f32(v);
        }
        if (rc) snprintf(err, errlen, "'%s': cannot read llm.c tensor %s (block %d): the file is truncated (hint: "
                         "re-download it)", path, LLMC_NAMES[idx], layer);
    }
    fclose(f);
    return rc ? -1 : 0;
}

int init_weights_read(const ModelRuntime *r, const char *path, float *global, char *err, size_t errlen) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(err, errlen, "'%s' is a directory (hint: [init] from names a safetensors file or an llm.c GPT-2 "
                 "checkpoint file)", path);
        return -1;
    }
    FILE *f = fopen(path, "rb");
    int32_t magic = 0;
    if (!f) {
        snprintf(err, errlen, "cannot open '%s': %s (hint: [init] from names a safetensors file or an llm.c GPT-2 "
                 "checkpoint)", path, strerror(errno));
        return -1;
    }
    size_t got = fread(&magic, 4, 1, f);
    fclose(f);
    if (got == 1 && magic == LLMC_MODEL_MAGIC) return read_llmc(r, path, global, err, errlen);
    return read_safetensors(r, path, global, err, errlen);
}

int init_weights_apply(ModelRuntime *r, const char *path, char *err, size_t errlen) {
    float *global = calloc(r->Pglobal ? r->Pglobal : 1, sizeof *global);
    float *local = calloc(r->Pp ? r->Pp : 1, sizeof *local);
    int rc = -1;
    if (!global || !local)
        snprintf(err, errlen, "out of host memory for the initial weights (%zu + %zu floats)", r->Pglobal, r->Pp);
    else if (!init_weights_read(r, path, global, err, errlen)) {
        mr_tp_scatter(r, global, local, 1);
        zero_distribute(r, local, NULL, NULL);
        rc = 0;
    }
    free(global), free(local);
    return rc;
}
