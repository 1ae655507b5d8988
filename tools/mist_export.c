// mist-export CHECKPOINT --safetensors OUT [--dtype fp32|bf16]
//
// Writes the model weights of a mist checkpoint (a file, or a [checkpoint]
// dir: its latest) as a safetensors file with the names and layouts of
// Hugging Face's GPT-2 or Llama (runtime/hf_names.h, docs/weights.md).
// Checkpoints hold whole tensors whatever the plan that wrote them, so
// nothing is merged here; the export streams: at most 16 MB of a tensor is in
// memory at a time, or a whole GPT-2 Conv1D weight and its transpose.
#include <config.h>  // PACKAGE_VERSION
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/checkpoint.h"
#include "runtime/hf_names.h"
#include "runtime/safetensors.h"
#include "runtime/weights_ckpt.h"

static const char USAGE[] = "usage: mist-export CHECKPOINT --safetensors OUT [--dtype fp32|bf16]\n"
                            "  CHECKPOINT  a step_*.ckpt file, or a [checkpoint] dir (its latest)\n"
                            "  OUT         the safetensors file to write (Hugging Face GPT-2 / Llama names)\n"
                            "  --dtype     fp32 (default, exact) or bf16 (round to nearest even)\n"
                            "  -V, --version  print the version and exit\n"
                            "Names, layouts and the streaming are described in docs/weights.md.\n";

typedef struct {
    char mist[CKPT_NAME_MAX];  // "param/block.0.qkv_w"
    int64_t rows, cols;
    HfPiece piece;
} ExportItem;

// Every piece of every stored parameter, in file order. Returns the count, -1 with err.
static int list_items(CkptReader *r, const ModelConfig *m, ExportItem **out, char *err, size_t errlen) {
    int n = ckpt_reader_count(r), count = 0;
    ExportItem *items = calloc((size_t)n * HF_MAX_PIECES + 1, sizeof *items);
    if (!items) { snprintf(err, errlen, "out of host memory"); return -1; }
    for (int i = 0; i < n; i++) {
        const char *name = ckpt_reader_name(r, i);
        MistDtype dt;
        int ndim;
        int64_t shape[CKPT_MAX_DIMS];
        if (strncmp(name, "param/", 6) || ckpt_tensor_info(r, name, &dt, &ndim, shape)) continue;
        int64_t rows = shape[0], cols = ndim > 1 ? shape[1] : 1;
        HfPiece pieces[HF_MAX_PIECES];
        int np = hf_pieces(m, name + 6, rows, cols, pieces);
        if (np < 0) {
            snprintf(err, errlen, "tensor '%s' has no Hugging Face name (hint: this checkpoint was written by another "
                     "mist version)", name);
            free(items);
            return -1;
        }
        for (int k = 0; k < np; k++, count++) {
            snprintf(items[count].mist, sizeof items[count].mist, "%s", name);
            items[count].rows = rows, items[count].cols = cols, items[count].piece = pieces[k];
        }
    }
    *out = items;
    return count;
}

// Rows stream through a buffer of at most STREAM_ELEMS floats; a transposed
// (Conv1D) piece is read whole, since each of its output rows takes one
// element of every input row.
#define STREAM_ELEMS ((int64_t)4 << 20)

static int grow(float **buf, size_t *cap, size_t count) {
    if (count <= *cap) return 0;
    free(*buf);
    *cap = count;
    return (*buf = malloc(count * sizeof **buf)) ? 0 : -1;
}

static int write_items(CkptReader *r, StWriter *w, const ExportItem *items, int n, char *err, size_t errlen) {
    float *buf = NULL, *tbuf = NULL;
    size_t cap = 0, tcap = 0;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        const ExportItem *it = &items[i];
        const HfPiece *p = &it->piece;
        int64_t count = p->rows * it->cols, step = p->transpose ? count : STREAM_ELEMS;
        for (int64_t at = 0; at < count && !rc; at += step) {
            size_t take = (size_t)(count - at < step ? count - at : step);
            if (grow(&buf, &cap, take) || (p->transpose && grow(&tbuf, &tcap, take))) {
                snprintf(err, errlen, "out of host memory for tensor '%s'", it->mist);
                rc = -1;
                break;
            }
            rc = ckpt_read_tensor(r, it->mist, MIST_F32, p->row0 * it->cols + at, (int64_t)take, buf, err, errlen);
            if (rc) break;
            const float *data = buf;
            if (p->transpose) {  // (rows, cols) -> (cols, rows): out[c][a] = in[a][c]
                for (int64_t a = 0; a < p->rows; a++)
                    for (int64_t c = 0; c < it->cols; c++) tbuf[c * p->rows + a] = buf[a * it->cols + c];
                data = tbuf;
            }
            if (st_writer_append(w, data, take)) { snprintf(err, errlen, "write failed"); rc = -1; }
        }
    }
    free(buf), free(tbuf);
    return rc;
}

int main(int argc, char **argv) {
    const char *ckpt = NULL, *out = NULL, *dtype = "fp32";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { fputs(USAGE, stdout); return 0; }
        if (!strcmp(argv[i], "-V") || !strcmp(argv[i], "--version")) { printf("mist-export (mist) %s\n", PACKAGE_VERSION); return 0; }
        if ((!strcmp(argv[i], "--safetensors") || !strcmp(argv[i], "--dtype")) && i + 1 >= argc) {
            fprintf(stderr, "mist-export: %s needs a value\n%s", argv[i], USAGE);
            return 2;
        }
        if (!strcmp(argv[i], "--safetensors")) out = argv[++i];
        else if (!strcmp(argv[i], "--dtype")) dtype = argv[++i];
        else if (argv[i][0] == '-' || ckpt) {
            fprintf(stderr, "mist-export: unexpected argument '%s'\n%s", argv[i], USAGE);
            return 2;
        } else ckpt = argv[i];
    }
    if (!ckpt || !out) { fprintf(stderr, "mist-export: %s is missing\n%s", ckpt ? "--safetensors OUT" : "CHECKPOINT", USAGE); return 2; }
    if (strcmp(dtype, "fp32") && strcmp(dtype, "bf16")) {
        fprintf(stderr, "mist-export: --dtype %s: allowed: fp32, bf16\n", dtype);
        return 2;
    }
    MistDtype dt = !strcmp(dtype, "bf16") ? MIST_BF16 : MIST_F32;
    char err[2048], path[1024];
    ModelConfig m;
    CkptReader *r = weights_ckpt_open(ckpt, path, sizeof path, err, sizeof err);
    if (!r || weights_ckpt_model(r, path, &m, err, sizeof err)) {
        fprintf(stderr, "mist-export: %s\n", err);
        ckpt_reader_close(r);
        return 1;
    }
    ExportItem *items = NULL;
    int n = list_items(r, &m, &items, err, sizeof err);
    StTensor *decl = n > 0 ? calloc((size_t)n, sizeof *decl) : NULL;
    MistDtype *dts = n > 0 ? calloc((size_t)n, sizeof *dts) : NULL;
    StWriter *w = NULL;
    int rc = n <= 0;
    if (n == 0) snprintf(err, sizeof err, "checkpoint '%s' holds no parameters", path);
    if (!rc) {
        for (int i = 0; i < n; i++) {
            snprintf(decl[i].name, sizeof decl[i].name, "%s", items[i].piece.name);
            decl[i].ndim = items[i].piece.ndim;
            decl[i].shape[0] = items[i].piece.shape[0], decl[i].shape[1] = items[i].piece.shape[1];
            dts[i] = dt;
        }
        w = st_writer_open(out, decl, dts, n, err, sizeof err);
        rc = !w || write_items(r, w, items, n, err, sizeof err);
        if (w) {
            char cerr[1024];
            if (st_writer_close(w, cerr, sizeof cerr) && !rc) snprintf(err, sizeof err, "%s", cerr), rc = 1;
        }
    }
    if (rc) fprintf(stderr, "mist-export: %s\n", err);
    else {
        char odd[256];
        const char *cls = m.family == FAMILY_LLAMA ? "Llama" : "GPT-2";
        printf("mist-export: %s -> %s: %d tensors (%s, %s names)\n", path, out, n, dtype, cls);
        hf_incompatible(&m, odd, sizeof odd);
        if (odd[0])
            printf("mist-export: note: this model has %s, which Hugging Face's %s does not run; the file keeps its "
                   "names for mist ([init] from) and for code that knows these switches\n", odd, cls);
    }
    free(items), free(decl), free(dts);
    ckpt_reader_close(r);
    return rc ? 1 : 0;
}
