// Fuzz harness: model.ini and -o overrides (base/config_load.c). The input is
// the INI text, optionally followed by a line "%%" and one override per line
// ("section.key=value", at most 16): config_load reads the file, then the
// overrides, then checks everything. An accepted configuration is printed as
// --dry-run prints it, and its hardware profile loaded. A [plan] file or
// [cluster] hardware path may name the input itself (model.ini, relative to its
// directory).
#include <string.h>
#include "base/config_load.h"
#include "base/profile.h"
#include "tests/fuzz/fuzz_file.h"

#define MAX_OVERRIDES 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char sep[] = "\n%%\n";
    const uint8_t *cut = NULL;
    for (size_t i = 0; i + 4 <= size && !cut; i++)
        if (!memcmp(data + i, sep, 4)) cut = data + i;
    size_t ini_bytes = cut ? (size_t)(cut - data) + 1 : size;  // the file keeps its last newline
    const char *path = fuzz_write("model.ini", data, ini_bytes);
    char *ov_text = NULL;
    const char *ov[MAX_OVERRIDES];
    int n_ov = 0;
    if (cut) {  // overrides arrive as C strings: a NUL byte ends one early, as on a command line
        size_t ov_bytes = size - (size_t)(cut - data) - 4;
        ov_text = malloc(ov_bytes + 1);
        memcpy(ov_text, cut + 4, ov_bytes);
        ov_text[ov_bytes] = '\0';
        for (char *line = ov_text; line && n_ov < MAX_OVERRIDES;) {
            char *nl = memchr(line, '\n', strlen(line));
            if (nl) *nl = '\0';
            ov[n_ov++] = line;
            line = nl ? nl + 1 : NULL;
        }
    }
    static MistConfig cfg;  // large (paths); the loader is single-threaded
    char err[2048];
    // world_size 4: the rank-count check runs too (tiny.ini's plan needs 4 ranks)
    if (config_load(&cfg, path, ov, n_ov, 4, err, sizeof err) == 0) {
        config_print_summary(&cfg, fuzz_null());
        static HwProfile profile;  // the profile the run prices plans with (a preset, or a file the INI names)
        if (config_profile(&cfg, &profile, err, sizeof err) != 0 && !err[0]) abort();
    } else if (!err[0]) {
        fprintf(stderr, "config_load failed without a message\n");
        abort();
    }
    free(ov_text);
    return 0;
}
