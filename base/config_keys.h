// The table of every configuration key: section, name, type, where it lives
// in MistConfig (or StagePlan for [stage.N]), its allowed range, and a hint.
// config_load.c parses and checks values with it; docs/config.md documents
// the same keys (tests/test_config.c checks that every key is documented).
#ifndef MIST_CONFIG_KEYS_H
#define MIST_CONFIG_KEYS_H

#include <stddef.h>

typedef enum {
    KEY_INT,    // integer in [min, max]
    KEY_FLOAT,  // real number in [min, max]
    KEY_BOOL,   // true/false, yes/no, on/off, 1/0
    KEY_ENUM,   // one of `names`, stored as its index (an enum)
    KEY_STRING, // free text (fits the field)
    KEY_PATH,   // a file or directory; relative to the INI file's directory
    KEY_BYTES,  // a size: 80GiB, 24GB, 512MiB, 1e9 (plain bytes)
} KeyType;

typedef struct {
    const char *section;        // "model", ..., "stage" for every [stage.N]
    const char *name;
    KeyType type;
    size_t offset, size;        // field in MistConfig (StagePlan for "stage")
    double min, max;            // KEY_INT / KEY_FLOAT / KEY_BYTES range
    const char *const *names;   // KEY_ENUM values, NULL-terminated
    const char *hint;           // what the key means, shown with errors
} KeySpec;

extern const KeySpec config_keys[];
extern const int config_num_keys;

// index of (section, name) in config_keys, or -1; section "stage" for [stage.N]
int config_key_find(const char *section, const char *name);

// 1 when row `key` sets the same field as an earlier row of its section: a
// shorthand ([stage.N] zero for shard) that files may use but that plan
// files, summaries and comparisons skip (the earlier row speaks for the field)
int config_key_is_shorthand(int key);

#endif
