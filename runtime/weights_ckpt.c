// Checkpoint -> model description (runtime/weights_ckpt.h).
#include "runtime/weights_ckpt.h"
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "base/config_load.h"

CkptReader *weights_ckpt_open(const char *path, char *opened, size_t openlen, char *err, size_t errlen) {
    struct stat sb;
    snprintf(opened, openlen, "%s", path);
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        int found = ckpt_find_latest_err(path, opened, openlen, err, errlen);
        if (found == 0)
            snprintf(err, errlen, "'%s' holds no checkpoint (no `latest`, no step_*.ckpt; hint: name a checkpoint "
                     "file or the [checkpoint] dir of a run that saved one)", path);
        if (found <= 0) return NULL;
    }
    return ckpt_reader_open(opened, err, errlen);
}

// "family=gpt layers=2 ..." becomes the overrides model.family=gpt, model.layers=2, ...
// applied to an empty configuration, so the family defaults and the checks
// of the configuration reader apply as they do to a model.ini.
int weights_ckpt_model(CkptReader *r, const char *path, ModelConfig *m, char *err, size_t errlen) {
    char text[1024], words[24][96];
    const char *ov[24];
    int64_t bytes = ckpt_blob_bytes(r, "state/model");
    if (bytes <= 0 || bytes >= (int64_t)sizeof text) {
        snprintf(err, errlen, "checkpoint '%s' has no model description (state/model); it was not written by "
                 "mist-train", path);
        return -1;
    }
    if (ckpt_read_blob(r, "state/model", text, (size_t)bytes, err, errlen)) return -1;
    text[bytes] = '\0';
    int n = 0;
    for (char *tok = strtok(text, " "); tok && n < 24; tok = strtok(NULL, " ")) {
        snprintf(words[n], sizeof words[n], "model.%s", tok);
        ov[n] = words[n];
        n++;
    }
    static MistConfig cfg;
    char why[1024];
    if (config_load(&cfg, "/dev/null", ov, n, 0, why, sizeof why)) {
        snprintf(err, errlen, "checkpoint '%s': its model description does not load: %.900s", path, why);
        return -1;
    }
    *m = cfg.model;
    return 0;
}
