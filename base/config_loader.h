// The INI loader that model.ini (config_load.c) and plan files (plan_file.c)
// share: it parses a file key by key through the table of config_keys.c and
// remembers where every value came from, so that a check run after parsing
// can name the line of the key that is wrong. Internal to base/.
#ifndef MIST_CONFIG_LOADER_H
#define MIST_CONFIG_LOADER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "base/schema.h"

// Where a value came from: > 0 a line of the file, < 0 override number
// -(i+1), 0 the default.
typedef struct {
    const char *path;                  // the file being read
    char dir[MIST_PATH_MAX];           // its directory, for relative paths
    const char *const *overrides;
    int key_origin[128];               // per config_keys index (non-stage keys)
    int stage_origin[MIST_MAX_STAGES][MIST_MAX_STAGE_KEYS];  // per [stage.N] key
    int stage_section_line[MIST_MAX_STAGES];  // line of the [stage.N] header, 0 = absent
    int model_section_line;            // line of the [model] header, 0 = absent
    int line;                          // line being parsed
    int long_line;                     // first line longer than inih's limit
    int max_line;                      // that limit in characters (without newline and NUL)
    int indented;                      // the line being parsed is indented text (inih continues the value above)
    int nul_line;                      // first line holding a NUL byte (the text after it would be lost)
    int cr_line;                       // first line with a carriage return inside it (CR-only line endings)
    FILE *file;
    char *err;
    size_t errlen;
    int failed;
} Loader;

// The first error, prefixed with where it came from ("path:LINE: ", "-o ... (command line): "
// or "path: "); later ones are dropped. Returns 2.
int loader_fail(Loader *ld, int origin, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// Where key (section, name) was set (0: not set); stage keys: loader_stage_origin.
int loader_origin(const Loader *ld, const char *section, const char *name);
// Where [stage.s] key name was set, else the line of the [stage.s] header (0: neither).
int loader_stage_origin(const Loader *ld, int s, const char *name);
// The position of config_keys[key] among the [stage.N] keys (its slot in stage_origin).
int loader_stage_slot(int key);
// Open path (ld->path, ld->dir) and parse it into cfg. 0 or 2.
int loader_open(Loader *ld, const char *path);
int loader_parse(Loader *ld, MistConfig *cfg);

// ---- plan_file.c: the plan checks that model.ini's inline [stage.N] sections share with plan files
// Every stage 0..stages-1 has its section (or an override); none beyond. 0 or 2.
int plan_check_stage_sections(Loader *ld, const Plan *p);
// The plan against the model, the batch and (world_size > 0) the rank count. 0 or 2.
int plan_check(Loader *ld, const Plan *p, const ModelConfig *m, int64_t global_batch, int world_size);

#endif
