// Fuzz harness: hardware profile files (base/profile.c), as mist-profile
// writes them and [cluster] hardware / mist-plan --hardware read them. An
// accepted profile is priced (capacity, collectives, host copies) and written
// back; what profile_write_ini writes must load again.
#include "base/profile.h"
#include "tests/fuzz/fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write("profile.ini", data, size);
    static HwProfile p, again;
    char err[2048];
    if (profile_load(&p, path, err, sizeof err) != 0) {
        if (!err[0]) abort();
        return 0;
    }
    volatile double sink = (double)profile_capacity_bytes(&p);
    for (int nodes = 1; nodes <= 256; nodes *= 4)
        for (int gpus = 1; gpus <= 8; gpus *= 2)
            for (int k = 0; k < COLL_COUNT; k++) sink += profile_collective_seconds(&p, (CollKind)k, 1e9, nodes, gpus);
    sink += profile_host_copy_seconds(&p.h2d, 1e6) + profile_host_copy_seconds(&p.d2h, 1e6);
    (void)sink;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    profile_write_ini(&p, f);
    fclose(f);
    const char *copy = fuzz_write("profile_again.ini", text, len);
    free(text);
    if (profile_load(&again, copy, err, sizeof err) != 0) {
        fprintf(stderr, "a profile that loaded does not load after profile_write_ini: %s\n", err);
        abort();
    }
    return 0;
}
