// Fuzz harness: checkpoints (runtime/checkpoint_read.c, checkpoint_state.c):
// the header, the index of tensors and blobs, the tensors' bytes and the
// training state, as mist-train resumes from them.
//
// Every byte of a checkpoint is under a CRC32C, so a mutated file almost always
// stops at a checksum. To reach the code behind them, the harness first
// recomputes the checksums of the input as the writer would (each array's, the
// index's, the body's, the header's) unless bit 0 of header byte 56 (a reserved
// field the reader ignores) is set; that bit keeps the input's own checksums.
// An accepted file is read whole: every tensor through each dtype conversion,
// every blob, then checkpoint_load for the seed's model (a 1-layer GPT of
// width 8) with a tensor for each "param/" array it holds.
#include "runtime/checkpoint.h"
#include "runtime/checkpoint_format.h"
#include "runtime/checksum.h"
#include "tests/fuzz/fuzz_file.h"

#define MAX_ELEMS (1 << 16)  // a tensor larger than this is read in its first MAX_ELEMS elements

static uint64_t get_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

// The writer's checksums over buf (size bytes), wherever the header and index say they lie.
static void fix_checksums(uint8_t *buf, size_t size) {
    if (size < CKPT_HEADER_BYTES || (buf[56] & 1)) return;
    uint64_t count = get_u64(buf + 24), index_offset = get_u64(buf + 32);
    int index_inside = index_offset >= CKPT_HEADER_BYTES && index_offset <= size && count <= (size - index_offset) / CKPT_ENTRY_BYTES;
    if (index_inside) {
        for (uint64_t i = 0; i < count; i++) {
            uint8_t *e = buf + index_offset + i * CKPT_ENTRY_BYTES;
            uint64_t offset = get_u64(e + 208), bytes = get_u64(e + 216);
            if (offset <= size && bytes <= size - offset) put_u32(e + 140, crc32c(buf + offset, bytes));
        }
        put_u32(buf + 48, crc32c(buf + index_offset, count * CKPT_ENTRY_BYTES));
    }
    put_u32(buf + 52, crc32c(buf + CKPT_HEADER_BYTES, size - CKPT_HEADER_BYTES));
    put_u32(buf + 60, crc32c(buf, 60));
}

static void read_everything(CkptReader *r) {
    static float f32[MAX_ELEMS];
    static unsigned char raw[MAX_ELEMS * 4];
    char err[2048];
    for (int i = 0; i < ckpt_reader_count(r); i++) {
        const char *name = ckpt_reader_name(r, i);
        MistDtype dtype;
        int ndim;
        int64_t shape[CKPT_MAX_DIMS];
        if (ckpt_tensor_info(r, name, &dtype, &ndim, shape) == 0) {
            // what the reader promises of an accepted tensor: dimensions >= 0 whose product
            // (without wrap-around) is the element count its bytes hold
            uint64_t numel = 1, bytes;
            for (int d = 0; d < ndim; d++)
                if (shape[d] < 0 || __builtin_mul_overflow(numel, (uint64_t)shape[d], &numel)) {
                    fprintf(stderr, "tensor '%s' accepted with dimension %d = %lld\n", name, d, (long long)shape[d]);
                    abort();
                }
            if (__builtin_mul_overflow(numel, (uint64_t)mist_dtype_size(dtype), &bytes) || bytes > INT64_MAX) abort();
            if (ckpt_read_tensor(r, name, dtype, (int64_t)numel, 0, raw, err, sizeof err) != 0 ||
                ckpt_read_tensor(r, name, dtype, (int64_t)numel, 1, raw, err, sizeof err) == 0) {
                fprintf(stderr, "tensor '%s': its shape holds %llu elements, its bytes another count\n", name,
                        (unsigned long long)numel);
                abort();
            }
            ckpt_reader_expect(r, name, ndim, shape, err, sizeof err);
            // each conversion allocates a buffer of 64 Ki elements: the first 8 arrays go through every
            // dtype (a mutated index puts any dtype there), the others through their own
            static const MistDtype as[] = {MIST_F32, MIST_BF16, MIST_F16, MIST_I32, MIST_U8};
            size_t n_as = i < 8 ? sizeof as / sizeof as[0] : 0;
            ckpt_read_tensor(r, name, dtype, 0, 1, raw, err, sizeof err);
            for (size_t k = 0; k < n_as; k++) {
                ckpt_read_tensor(r, name, as[k], 0, MAX_ELEMS, raw, err, sizeof err);  // past the end: refused
                ckpt_read_tensor(r, name, as[k], 0, 1, raw, err, sizeof err);
            }
            ckpt_read_tensor(r, name, MIST_F32, 0, 0, f32, err, sizeof err);
        } else {
            int64_t bytes = ckpt_blob_bytes(r, name);
            if (bytes < 0) abort();  // neither a tensor nor a blob
            if (bytes <= (int64_t)sizeof raw) ckpt_read_blob(r, name, raw, (size_t)bytes, err, sizeof err);
            ckpt_read_blob(r, name, raw, 0, err, sizeof err);
        }
    }
}

// checkpoint_load as a resume calls it: one CkptTensor per "param/NAME" array of a sane size.
static void load_state(CkptReader *r, const char *path) {
    enum { MAX_TENSORS = 32 };
    static CkptTensor t[MAX_TENSORS];
    static float *mem[MAX_TENSORS][3];
    int n = 0;
    for (int i = 0; i < ckpt_reader_count(r) && n < MAX_TENSORS; i++) {
        const char *name = ckpt_reader_name(r, i);
        if (strncmp(name, "param/", 6) != 0) continue;
        CkptTensor *x = &t[n];
        memset(x, 0, sizeof *x);
        if (ckpt_tensor_info(r, name, NULL, &x->ndim, x->shape) != 0) continue;
        int64_t numel = 1;
        for (int d = 0; d < x->ndim && numel >= 0; d++)
            numel = x->shape[d] < 0 || x->shape[d] > MAX_ELEMS ? -1 : numel * x->shape[d];
        if (numel < 0 || numel > MAX_ELEMS) continue;
        x->name = name + 6;
        for (int k = 0; k < 3; k++) mem[n][k] = malloc((size_t)(numel ? numel : 1) * sizeof(float));
        x->param = mem[n][0], x->adam_m = mem[n][1], x->adam_v = mem[n][2];
        n++;
    }
    // the model of the seed checkpoint tests/fuzz/write_seeds.sh writes
    ModelConfig m = model_family_config(FAMILY_GPT, 1, 8, 2, 256, 8);
    CkptState st;
    char err[2048];
    if (checkpoint_load(path, &m, &st, t, n, err, sizeof err) == 0) {
        if (st.step < 0 || st.adam_t > st.step || st.rng_bytes > CKPT_RNG_MAX) abort();  // what load promises
    } else if (!err[0]) {
        abort();
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 3; k++) free(mem[i][k]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    fix_checksums(buf, size);
    const char *path = fuzz_write("step_00000001.ckpt", buf, size);
    free(buf);
    char err[2048];
    CkptReader *r = ckpt_reader_open(path, err, sizeof err);
    if (!r) {
        if (!err[0]) abort();
        return 0;
    }
    read_everything(r);
    load_state(r, path);
    ckpt_reader_close(r);
    return 0;
}
