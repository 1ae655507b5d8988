// Checkpoints: CRC32C, round trip with slices and dtype conversion, every
// error path (corrupt byte, truncation, bad magic/version, missing tensor,
// shape/dtype mismatch), keep/prune, that a crash or a failed write leaves no
// partial checkpoint and `latest` alone, and the training-state round trip.
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "models/model.h"
#include "runtime/checkpoint.h"
#include "runtime/checksum.h"
#include "tests/tap.h"

static char dir[256];

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void read_latest(const char *d, char *buf, size_t len) {
    char path[512];
    snprintf(path, sizeof path, "%s/latest", d);
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(buf, (int)len, f)) buf[0] = '\0';
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = '\0';
}

static void test_crc(void) {
    ok(crc32c("123456789", 9) == 0xE3069283u, "crc32c(\"123456789\") = 0xE3069283 (the published check value)");
    unsigned char buf[1001];
    for (int i = 0; i < 1001; i++) buf[i] = (unsigned char)(i * 31 + 7);
    uint32_t split = crc32c_update(crc32c(buf, 333), buf + 333, 668);
    ok(crc32c(buf, 1001) == crc32c_software_update(0, buf, 1001) && split == crc32c(buf, 1001),
       "hardware and table paths agree, and the CRC can be continued across pieces");
}

// data of the test checkpoint
static float w[3][4];        // (3, 4) f32
static uint16_t b16[5];      // (5) bf16
static int32_t ids[2][2][2]; // (2, 2, 2) i32
static float scalar = 3.5f;  // ()
static const char blob[] = "rng state 0123456789";

static int write_test_ckpt(const char *d, int64_t step, int keep, char *err, size_t len) {
    CkptWriter *cw = ckpt_writer_open(d, step, err, len);
    if (!cw) return -1;
    int64_t sw[2] = {3, 4}, sb[1] = {5}, si[3] = {2, 2, 2}, se[2] = {0, 7};
    ckpt_write_tensor(cw, "w", MIST_F32, 2, sw, w);
    ckpt_write_tensor(cw, "b", MIST_BF16, 1, sb, b16);
    ckpt_write_tensor(cw, "ids", MIST_I32, 3, si, ids);
    ckpt_write_tensor(cw, "scalar", MIST_F32, 0, NULL, &scalar);
    ckpt_write_tensor(cw, "empty", MIST_F32, 2, se, NULL);
    ckpt_write_blob(cw, "rng", blob, sizeof blob);
    return ckpt_writer_commit(cw, keep, err, len);
}

static void test_round_trip(void) {
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) w[i][j] = 0.1f * (float)(i * 4 + j) - 0.5f;
    for (int i = 0; i < 5; i++) b16[i] = mist_f32_to_bf16(1.25f * (float)i - 2.0f);
    for (int i = 0; i < 8; i++) ids[i / 4][(i / 2) % 2][i % 2] = 1000 * i - 3;
    char d[300], err[1024] = "", path[600];
    snprintf(d, sizeof d, "%s/rt/nested", dir);
    ok(write_test_ckpt(d, 10, 0, err, sizeof err) == 0, "write and commit a checkpoint into a new nested directory (%s)", err);
    char latest[128];
    read_latest(d, latest, sizeof latest);
    ok(strcmp(latest, "step_00000010.ckpt") == 0, "`latest` names step_00000010.ckpt");
    ok(ckpt_find_latest(d, path, sizeof path) == 1 && strstr(path, "step_00000010.ckpt"), "ckpt_find_latest finds it");
    CkptReader *r = ckpt_reader_open(path, err, sizeof err);
    ok(r != NULL, "reader opens and validates it (%s)", r ? "ok" : err);
    if (!r) return;
    ok(ckpt_reader_step(r) == 10 && ckpt_reader_count(r) == 6 && strcmp(ckpt_reader_name(r, 2), "ids") == 0,
       "step 10, 6 arrays, in write order");
    float wf[12], slice[4];
    ok(ckpt_read_tensor(r, "w", MIST_F32, 0, 12, wf, err, sizeof err) == 0 && memcmp(wf, w, sizeof w) == 0,
       "f32 tensor round-trips bit for bit");
    ok(ckpt_read_tensor(r, "w", MIST_F32, 5, 4, slice, err, sizeof err) == 0 && memcmp(slice, &w[1][1], 16) == 0,
       "a slice [5, 9) of the flat tensor");
    uint16_t wb[12];
    int conv = ckpt_read_tensor(r, "w", MIST_BF16, 0, 12, wb, err, sizeof err) == 0;
    for (int i = 0; conv && i < 12; i++) conv = wb[i] == mist_f32_to_bf16(wf[i]);
    ok(conv, "f32 stored, read as bf16: round-to-nearest-even of each value");
    float bf[5];
    conv = ckpt_read_tensor(r, "b", MIST_F32, 0, 5, bf, err, sizeof err) == 0;
    for (int i = 0; conv && i < 5; i++) conv = bf[i] == 1.25f * (float)i - 2.0f;
    ok(conv, "bf16 stored, read as f32: exact");
    int32_t iv[8];
    ok(ckpt_read_tensor(r, "ids", MIST_I32, 0, 8, iv, err, sizeof err) == 0 && memcmp(iv, ids, sizeof ids) == 0, "i32 tensor round-trips");
    ok(ckpt_read_tensor(r, "ids", MIST_F32, 0, 8, wf, err, sizeof err) != 0 && strstr(err, "i32") && strstr(err, "f32"),
       "i32 read as f32 is a dtype mismatch error");
    float s = 0;
    ok(ckpt_read_tensor(r, "scalar", MIST_F32, 0, 1, &s, err, sizeof err) == 0 && s == 3.5f, "0-d tensor");
    MistDtype dt;
    int nd;
    int64_t shape[8];
    ok(ckpt_tensor_info(r, "empty", &dt, &nd, shape) == 0 && nd == 2 && shape[0] == 0 && shape[1] == 7 && dt == MIST_F32,
       "empty tensor keeps its shape (0, 7)");
    char got[64];
    ok(ckpt_read_blob(r, "rng", got, sizeof blob, err, sizeof err) == 0 && memcmp(got, blob, sizeof blob) == 0 &&
       ckpt_blob_bytes(r, "rng") == (int64_t)sizeof blob, "blob round-trips");
    ok(ckpt_read_blob(r, "rng", got, 5, err, sizeof err) != 0 && strstr(err, "bytes"), "blob size mismatch is an error");
    ok(ckpt_read_tensor(r, "nope", MIST_F32, 0, 1, wf, err, sizeof err) != 0 && strstr(err, "no tensor 'nope'") && strstr(err, "hint"),
       "missing tensor: names it, with a hint");
    ok(ckpt_read_tensor(r, "w", MIST_F32, 10, 3, wf, err, sizeof err) != 0 && strstr(err, "[10, 13)") && strstr(err, "12 elements"),
       "slice past the end is an error naming the range and the size");
    int64_t want[2] = {4, 3}, right[2] = {3, 4};
    ok(ckpt_reader_expect(r, "w", 2, want, err, sizeof err) != 0 && strstr(err, "(3, 4)") && strstr(err, "(4, 3)") && strstr(err, "hint"),
       "shape mismatch: stored (3, 4) vs expected (4, 3), with a hint");
    diag("%s", err);
    ok(ckpt_reader_expect(r, "w", 2, right, err, sizeof err) == 0, "matching shape passes ckpt_reader_expect");
    ckpt_reader_close(r);
}

static void test_f16(void) {
    char d[300], err[1024], path[600];
    snprintf(d, sizeof d, "%s/f16", dir);
    // values exactly representable in f16: normal, max, min normal, a subnormal, zero, negatives
    float v[7] = {0.5f, -2.0f, 1024.0f, 65504.0f, 6.103515625e-05f, 5.9604644775390625e-08f, -0.0f};
    CkptWriter *cw = ckpt_writer_open(d, 1, err, sizeof err);
    int64_t n = 7;
    ckpt_write_tensor(cw, "v", MIST_F32, 1, &n, v);
    ckpt_writer_commit(cw, 0, err, sizeof err);
    ckpt_find_latest(d, path, sizeof path);
    CkptReader *r = ckpt_reader_open(path, err, sizeof err);
    uint16_t h[7];
    float back[7];
    int good = r && ckpt_read_tensor(r, "v", MIST_F16, 0, 7, h, err, sizeof err) == 0;
    ckpt_reader_close(r);
    // now store the f16 bits and read them back as f32
    cw = ckpt_writer_open(d, 2, err, sizeof err);
    ckpt_write_tensor(cw, "h", MIST_F16, 1, &n, h);
    ckpt_writer_commit(cw, 0, err, sizeof err);
    ckpt_find_latest(d, path, sizeof path);
    r = ckpt_reader_open(path, err, sizeof err);
    good = good && r && ckpt_read_tensor(r, "h", MIST_F32, 0, 7, back, err, sizeof err) == 0;
    for (int i = 0; good && i < 7; i++) good = memcmp(&back[i], &v[i], 4) == 0;
    ok(good && h[0] == 0x3800 && h[3] == 0x7bff && h[5] == 0x0001, "f32 <-> f16 conversion is exact on representable values");
    ckpt_reader_close(r);
}

// copy the round-trip checkpoint, damage it with `damage`, and return the reader's error
static int damaged_open(const char *label, void (*damage)(FILE *, long), char *err, size_t len) {
    char src[600], dst[600], cmd[1300];
    snprintf(src, sizeof src, "%s/rt/nested/step_00000010.ckpt", dir);
    snprintf(dst, sizeof dst, "%s/damaged_%s.ckpt", dir, label);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src, dst);
    if (system(cmd) != 0) return 0;
    FILE *f = fopen(dst, "r+b");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    damage(f, size);
    fclose(f);
    CkptReader *r = ckpt_reader_open(dst, err, len);
    ckpt_reader_close(r);
    diag("%s: %s", label, r ? "(opened)" : err);
    return r == NULL;
}

static void flip_at(FILE *f, long at) {
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x10, f);
}
// layout: header 64 | w 48 B at 64 | b 10 B at 128 | ids at 192 | ...
static void corrupt_b(FILE *f, long size) { (void)size; flip_at(f, 128 + 3); }
static void corrupt_padding(FILE *f, long size) { (void)size; flip_at(f, 128 + 20); }
static void corrupt_header(FILE *f, long size) { (void)size; flip_at(f, 20); }
static void corrupt_index(FILE *f, long size) { flip_at(f, size - 100); }
static void bad_magic(FILE *f, long size) { (void)size; fseek(f, 0, SEEK_SET); fputs("NOTACKPT", f); }
static void bad_version(FILE *f, long size) { (void)size; fseek(f, 8, SEEK_SET); fputc(9, f); }
static void truncate_one(FILE *f, long size) { fflush(f); if (ftruncate(fileno(f), size - 1) != 0) diag("ftruncate failed"); }

static void test_damage(void) {
    char err[1024];
    ok(damaged_open("tensor", corrupt_b, err, sizeof err) && strstr(err, "tensor 'b'") && strstr(err, "CRC32C") && strstr(err, "hint"),
       "a flipped byte inside tensor 'b': the error names 'b' and gives a hint");
    ok(damaged_open("padding", corrupt_padding, err, sizeof err) && strstr(err, "outside the arrays"),
       "a flipped byte in padding fails the whole-file checksum");
    ok(damaged_open("header", corrupt_header, err, sizeof err) && strstr(err, "header"), "a flipped byte in the header");
    ok(damaged_open("index", corrupt_index, err, sizeof err) && strstr(err, "index"), "a flipped byte in the index");
    ok(damaged_open("magic", bad_magic, err, sizeof err) && strstr(err, "not a mist checkpoint"), "wrong magic");
    ok(damaged_open("version", bad_version, err, sizeof err) && strstr(err, "version 9") && strstr(err, "reads version 1"),
       "wrong version names both versions");
    ok(damaged_open("truncated", truncate_one, err, sizeof err) && strstr(err, "truncated") && strstr(err, "hint"),
       "a file one byte short is reported as truncated, with a hint");
}

static void test_prune_and_crash(void) {
    char d[300], err[1024], path[600], latest[128];
    snprintf(d, sizeof d, "%s/prune", dir);
    int good = 1;
    for (int s = 1; s <= 5; s++) good &= write_test_ckpt(d, s * 100, 2, err, sizeof err) == 0;
    char p3[600], p4[600], p5[600];
    snprintf(p3, sizeof p3, "%s/step_00000300.ckpt", d);
    snprintf(p4, sizeof p4, "%s/step_00000400.ckpt", d);
    snprintf(p5, sizeof p5, "%s/step_00000500.ckpt", d);
    read_latest(d, latest, sizeof latest);
    ok(good && !exists(p3) && exists(p4) && exists(p5) && strcmp(latest, "step_00000500.ckpt") == 0,
       "keep = 2 after five commits: steps 400 and 500 remain, latest = 500");

    // a writer killed mid-write (the child exits without commit or abort)
    pid_t pid = fork();
    if (pid == 0) {
        CkptWriter *cw = ckpt_writer_open(d, 600, err, sizeof err);
        int64_t sw[2] = {3, 4};
        if (cw) ckpt_write_tensor(cw, "w", MIST_F32, 2, sw, w);
        if (cw) fflush(NULL);
        _exit(cw ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s/step_00000600.ckpt.tmp", d);
    read_latest(d, latest, sizeof latest);
    ok(WIFEXITED(status) && WEXITSTATUS(status) == 0 && exists(tmp) && strcmp(latest, "step_00000500.ckpt") == 0 &&
       ckpt_find_latest(d, path, sizeof path) == 1 && strstr(path, "step_00000500.ckpt"),
       "a crash mid-write leaves a .tmp behind and `latest` still names step 500");
    CkptReader *r = ckpt_reader_open(tmp, err, sizeof err);
    ok(r == NULL, "the half-written .tmp does not validate");
    ckpt_reader_close(r);
    ok(write_test_ckpt(d, 600, 2, err, sizeof err) == 0 && !exists(tmp) && !exists(p4) &&
       ckpt_find_latest(d, path, sizeof path) == 1 && strstr(path, "step_00000600.ckpt"),
       "the next commit replaces it, prunes step 400 and moves latest to 600");

    // a writer that errors (duplicate name) commits nothing
    CkptWriter *cw = ckpt_writer_open(d, 700, err, sizeof err);
    int64_t one = 1;
    ckpt_write_tensor(cw, "x", MIST_F32, 1, &one, &scalar);
    ckpt_write_tensor(cw, "x", MIST_F32, 1, &one, &scalar);
    ok(ckpt_writer_commit(cw, 2, err, sizeof err) != 0 && strstr(err, "'x' written twice"), "a duplicate name fails the commit");
    read_latest(d, latest, sizeof latest);
    ok(strcmp(latest, "step_00000600.ckpt") == 0, "... and `latest` is unchanged");

    // find_latest without `latest`, with a dangling `latest`, without a directory
    char lp[600];
    snprintf(lp, sizeof lp, "%s/latest", d);
    unlink(lp);
    ok(ckpt_find_latest(d, path, sizeof path) == 1 && strstr(path, "step_00000600.ckpt"), "no `latest`: the highest step wins");
    FILE *f = fopen(lp, "w");
    fputs("step_00000999.ckpt\n", f);
    fclose(f);
    ok(ckpt_find_latest_err(d, path, sizeof path, err, sizeof err) == -1 && strstr(err, "does not exist"),
       "`latest` naming a missing file is an error");
    snprintf(path, sizeof path, "%s/does/not/exist", dir);
    ok(ckpt_find_latest(path, lp, sizeof lp) == 0, "no directory: no checkpoint");
}

// A tiny model's training state: two tensors with params and Adam moments.
static ModelConfig tiny_model(void) { return model_family_config(FAMILY_GPT, 2, 8, 2, 256, 16); }

static float wte[256 * 8], wte_m[256 * 8], wte_v[256 * 8], ln[8], ln_m[8], ln_v[8];

static void fill_state(CkptTensor t[2], CkptState *st, unsigned seed) {
    unsigned x = seed;
    float *arrays[6] = {wte, wte_m, wte_v, ln, ln_m, ln_v};
    int sizes[6] = {256 * 8, 256 * 8, 256 * 8, 8, 8, 8};
    for (int a = 0; a < 6; a++)
        for (int i = 0; i < sizes[a]; i++) {
            x = x * 1664525u + 1013904223u;  // LCG: arbitrary bit patterns, including tiny and negative values
            uint32_t bits = (x >> 1) ^ (x << 7);
            if ((bits & 0x7f800000u) == 0x7f800000u) bits ^= 0x40000000u;  // no NaN/Inf
            memcpy(&arrays[a][i], &bits, 4);
        }
    t[0] = (CkptTensor){.name = "wte", .ndim = 2, .shape = {256, 8}, .param = wte, .adam_m = wte_m, .adam_v = wte_v};
    t[1] = (CkptTensor){.name = "block.0.ln1_w", .ndim = 1, .shape = {8}, .param = ln, .adam_m = ln_m, .adam_v = ln_v};
    memset(st, 0, sizeof *st);
    st->step = 40, st->adam_t = 38, st->data_position = 40 * 16, st->skipped = 2, st->nonfinite = 2;
    st->rng_bytes = 32;
    for (int i = 0; i < 32; i++) st->rng[i] = (unsigned char)(seed + 7 * i);
}

static void test_state(void) {
    char d[300], err[2048] = "", path[600];
    snprintf(d, sizeof d, "%s/state", dir);
    ModelConfig m = tiny_model();
    CkptTensor t[2];
    CkptState st, back;
    fill_state(t, &st, 11);
    static float saved[6][256 * 8];
    memcpy(saved[0], wte, sizeof wte), memcpy(saved[1], wte_m, sizeof wte), memcpy(saved[2], wte_v, sizeof wte);
    memcpy(saved[3], ln, sizeof ln), memcpy(saved[4], ln_m, sizeof ln), memcpy(saved[5], ln_v, sizeof ln);
    ok(checkpoint_load_latest(d, &m, &back, t, 2, path, sizeof path, err, sizeof err) == 0,
       "checkpoint_load_latest on a directory that does not exist yet: 0 (start fresh)");
    ok(checkpoint_save(d, 3, &m, &st, t, 2, err, sizeof err) == 0, "checkpoint_save at step 40 (%s)", err);
    fill_state(t, &back, 99);  // overwrite everything with other values
    memset(&back, 0, sizeof back);
    int loaded = checkpoint_load_latest(d, &m, &back, t, 2, path, sizeof path, err, sizeof err);
    ok(loaded == 1 && strstr(path, "step_00000040.ckpt"), "checkpoint_load_latest finds and loads step 40 (%s)", loaded == 1 ? path : err);
    ok(memcmp(wte, saved[0], sizeof wte) == 0 && memcmp(wte_m, saved[1], sizeof wte) == 0 &&
       memcmp(wte_v, saved[2], sizeof wte) == 0 && memcmp(ln, saved[3], sizeof ln) == 0 &&
       memcmp(ln_m, saved[4], sizeof ln) == 0 && memcmp(ln_v, saved[5], sizeof ln) == 0,
       "params and Adam m/v come back bit for bit");
    ok(back.step == 40 && back.adam_t == 38 && back.data_position == 640 && back.skipped == 2 && back.nonfinite == 2 &&
       back.rng_bytes == 32 && memcmp(back.rng, st.rng, 32) == 0 && back.model_hash == ckpt_model_hash(&m),
       "step, adam_t, data position, counters, RNG state and model hash come back");

    ModelConfig other = m;
    other.hidden = 16;
    ok(ckpt_model_hash(&other) != ckpt_model_hash(&m), "the model hash changes with the hidden size");
    ok(checkpoint_load(path, &other, &back, t, 2, err, sizeof err) != 0 && strstr(err, "different model") &&
       strstr(err, "hidden=8") && strstr(err, "hidden=16"), "a model mismatch shows the stored and configured shapes");
    diag("%s", err);
    // counters that no run could have written (valid checksums): refused with what was read
    char bad_dir[400], bad_path[700];
    snprintf(bad_dir, sizeof bad_dir, "%s/state_bad", dir);
    const int64_t bad[3][3] = {{41, 0, 0}, {-1, 0, 0}, {38, 41, 0}};  // adam_t, skipped, nonfinite at step 40
    for (int i = 0; i < 3; i++) {
        CkptState odd = st;
        odd.adam_t = bad[i][0], odd.skipped = bad[i][1], odd.nonfinite = bad[i][2];
        int saved_ok = checkpoint_save(bad_dir, 3, &m, &odd, t, 2, err, sizeof err) == 0;
        snprintf(bad_path, sizeof bad_path, "%s/step_00000040.ckpt", bad_dir);
        ok(saved_ok && checkpoint_load(bad_path, &m, &back, t, 2, err, sizeof err) != 0 &&
               strstr(err, "inconsistent training state") && strstr(err, "step_00000040.ckpt"),
           "a checkpoint with adam_t %lld, skipped %lld, nonfinite %lld at step 40 is refused: %.160s",
           (long long)bad[i][0], (long long)bad[i][1], (long long)bad[i][2], err);
    }
    CkptTensor wrong = t[1];
    wrong.name = "block.0.ln2_w";
    ok(checkpoint_load(path, &m, &back, &wrong, 1, err, sizeof err) != 0 && strstr(err, "param/block.0.ln2_w"),
       "a tensor the checkpoint lacks is named in the error");

    // one flipped bit inside param/wte: loading names the tensor and the file
    CkptReader *r = ckpt_reader_open(path, err, sizeof err);
    int64_t at = -1;
    for (int i = 0; r && i < ckpt_reader_count(r); i++)
        if (strcmp(ckpt_reader_name(r, i), "param/wte") == 0) at = i;
    ckpt_reader_close(r);
    char copy[700], cmd[4000];
    snprintf(copy, sizeof copy, "%s/state_copy", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s/' && cp '%s/latest' '%s/'", copy, path, copy, d, copy);
    int corrupted = at >= 0 && system(cmd) == 0;
    char victim[800];
    snprintf(victim, sizeof victim, "%s/step_00000040.ckpt", copy);
    FILE *f = corrupted ? fopen(victim, "r+b") : NULL;
    if (f) {
        // find param/wte's bytes by content: wte[0] and wte[100] 400 bytes apart, in the first 64 KiB
        static unsigned char file[1 << 16];
        size_t got = fread(file, 1, sizeof file, f);
        long pos = -1;
        for (size_t i = 0; i + 4 <= got && pos < 0; i++)
            if (memcmp(file + i, &saved[0][100], 4) == 0 && i >= 400 && memcmp(file + i - 400, &saved[0][0], 4) == 0)
                pos = (long)i;
        if (pos >= 0) {
            fseek(f, pos, SEEK_SET);
            fputc(file[pos] ^ 0x01, f);
        }
        corrupted = pos >= 0;
        fclose(f);
    }
    ok(corrupted && checkpoint_load_latest(copy, &m, &back, t, 2, NULL, 0, err, sizeof err) == -1 &&
       strstr(err, "tensor 'param/wte'") && strstr(err, "step_00000040.ckpt") && strstr(err, "corrupted"),
       "one flipped bit in param/wte: the load fails naming the tensor and the file");
    diag("%s", err);

    // a write that fails half-way (file size limit -> EFBIG) leaves no partial checkpoint and `latest` alone
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit lim = {4096, 4096};
        setrlimit(RLIMIT_FSIZE, &lim);
        CkptState later = st;
        later.step = 50;
        char e[2048];
        int rc = checkpoint_save(d, 3, &m, &later, t, 2, e, sizeof e);
        printf("# failed save: %s\n", rc ? e : "(succeeded)");
        fflush(stdout);
        _exit(rc != 0 ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    char p50[600], tmp50[600], latest[128];
    snprintf(p50, sizeof p50, "%s/step_00000050.ckpt", d);
    snprintf(tmp50, sizeof tmp50, "%s/step_00000050.ckpt.tmp", d);
    read_latest(d, latest, sizeof latest);
    ok(WIFEXITED(status) && WEXITSTATUS(status) == 0 && !exists(p50) && !exists(tmp50) &&
       strcmp(latest, "step_00000040.ckpt") == 0,
       "a save that fails mid-write (file size limit) reports it, leaves neither step 50 nor its .tmp, latest = 40");
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/mist_test_checkpoint_XXXXXX");
    if (!mkdtemp(dir)) tap_skip_all("cannot create a temporary directory");
    test_crc();
    test_round_trip();
    test_f16();
    test_damage();
    test_prune_and_crash();
    test_state();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) diag("could not remove %s", dir);
    return tap_done();
}
