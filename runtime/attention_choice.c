// The run's attention kernels (attention_choice.h).
#include "runtime/attention_choice.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/config_keys.h"

int backend_choose_attention(Backend *be, const MistConfig *cfg, char *said, size_t saidlen, char *err,
                             size_t errlen) {
    said[0] = '\0';
    int key = config_key_find("runtime", "attention");
    const char *const *names = config_keys[key].names;  // auto, base, wide, wgmma, cudnn (AttentionKernels)
    const char *env = getenv("MIST_CUDA_ATTENTION"), *name = names[cfg->runtime.attention];
    char from[160];
    if (env && *env) {
        name = env;
        snprintf(from, sizeof from, "MIST_CUDA_ATTENTION=%.32s (over [runtime] attention)", env);
    } else {
        snprintf(from, sizeof from, "[runtime] attention = %s", name);
    }
    if (!be->set_attention) {  // one attention kernel: nothing to choose
        if (strcmp(name, "auto"))
            snprintf(said, saidlen, "%s: not applicable to the %s backend (it has one attention kernel); ignored",
                     from, be->name);
        return 0;
    }
    char what[768];
    if (be->set_attention(be, name, what, sizeof what) == 0) {
        snprintf(said, saidlen, "attention kernels: %s, from %s", what, from);
        return 0;
    }
    char allowed[96] = "";
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], name))
            snprintf(allowed + strlen(allowed), sizeof allowed - strlen(allowed), "%s%s", allowed[0] ? ", " : "",
                     names[i]);
    if (env && *env)
        snprintf(err, errlen, "environment: %s: %s; allowed here: %s. Hint: unset it, or set auto", from, what,
                 allowed);
    else
        snprintf(err, errlen, "%s: %s: %s; allowed here: %s. Hint: attention = auto picks the fastest that runs",
                 cfg->source, from, what, allowed);
    return 2;
}
