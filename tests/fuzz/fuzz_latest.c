// Fuzz harness: a checkpoint directory's `latest` file (runtime/checkpoint.c,
// ckpt_find_latest_err), the one line naming the newest checkpoint that a
// resume follows. The directory also holds step_00000002.ckpt (an empty file:
// only its name matters here).
#include "runtime/checkpoint.h"
#include "tests/fuzz/fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int made;
    if (!made) made = (fuzz_write("step_00000002.ckpt", "", 0), 1);
    fuzz_write("latest", data, size);
    char path[2048], err[2048];
    err[0] = '\0';
    int rc = ckpt_find_latest_err(fuzz_dir(), path, sizeof path, err, sizeof err);
    if (rc < 0 && !err[0]) abort();
    if (rc == 1 && (strncmp(path, fuzz_dir(), strlen(fuzz_dir())) != 0 || access(path, F_OK) != 0)) {
        fprintf(stderr, "`latest` led outside the checkpoint directory or to a missing file: %s\n", path);
        abort();
    }
    return 0;
}
