// The PaRO sharding codes from SHARD_CODE_TABLE (base/paro.h).
#include <stddef.h>
#include "base/paro.h"

#define NAME(c, s) s,
const char *const shard_code_names[SHARD_CODES + 1] = {SHARD_CODE_TABLE(NAME) NULL};
#undef NAME

int shard_code_has_i(int code) {
    for (int s = 0; s < 3; s++)
        if (shard_code_scope(code, s) == SCOPE_I) return 1;
    return 0;
}

int shard_code_of(int w, int g, int o) {
    for (int c = 0; c < SHARD_CODES; c++)
        if (shard_code_scope(c, STATE_W) == w && shard_code_scope(c, STATE_G) == g && shard_code_scope(c, STATE_O) == o)
            return c;
    return -1;
}

int shard_group_size(const StagePlan *sp, int gpus_per_node) {
    int g = sp->shard_group;
    if (g <= 0) {
        int tp = sp->tp > 0 ? sp->tp : 1;
        g = gpus_per_node / tp;
    }
    if (g < 1) g = 1;
    if (sp->dp < 1) return 1;
    return g >= sp->dp ? sp->dp : sp->dp % g ? 1 : g;
}

int shard_code_effective(int code, int g, int dp) {
    if (!shard_code_has_i(code) || (g > 1 && g < dp)) return code;
    int to = g >= dp ? SCOPE_G : SCOPE_N, s[3];
    for (int k = 0; k < 3; k++) {
        s[k] = shard_code_scope(code, k);
        if (s[k] == SCOPE_I) s[k] = to;
    }
    return shard_code_of(s[0], s[1], s[2]);
}
