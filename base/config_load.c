// Reading model.ini (see config_load.h). Parsing goes key by key through
// the table in config_keys.c; every value remembers where it came from
// (file line, or -o override) so that a later consistency check can point
// at the line of the key that is wrong, not just at the file.
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include "base/config_keys.h"
#include "base/config_load.h"
#include "base/config_loader.h"
#include "base/paro.h"
#include "base/plan_file.h"
#include "base/schema.h"

// ---------------------------------------------------------------- messages

// "path:LINE" or "-o section.key=value (command line)" or "path"
static void origin_text(const Loader *ld, int origin, char *out, size_t len) {
    if (origin > 0)
        snprintf(out, len, "%s:%d", ld->path, origin);
    else if (origin < 0)
        snprintf(out, len, "-o %s (command line)", ld->overrides[-origin - 1]);
    else
        snprintf(out, len, "%s", ld->path);
}

int loader_fail(Loader *ld, int origin, const char *fmt, ...) {
    if (ld->failed) return MIST_EXIT_CONFIG;  // the first error is the one reported
    char where[MIST_PATH_MAX + 64];
    origin_text(ld, origin, where, sizeof where);
    int n = snprintf(ld->err, ld->errlen, "%s: ", where);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < ld->errlen) vsnprintf(ld->err + n, ld->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    ld->failed = 1;
    return MIST_EXIT_CONFIG;
}

// Levenshtein distance, for "did you mean" (names are short)
static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 63 || lb > 63) return 99;
    int d[64][64];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int sub = d[i - 1][j - 1] + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    return d[la][lb];
}

static const char *const section_names[] = {"model", "train", "data", "cluster", "plan", "stage.N", "checkpoint",
                                            "log", "init", "runtime", NULL};

// " (did you mean 'x'?)" when a name is within edit distance 2 (or a third of its length)
static void suggest(const char *given, const char *const *candidates, int n, char *out, size_t len) {
    int best = 99;
    const char *pick = NULL;
    for (int i = 0; i < n; i++) {
        int d = edit_distance(given, candidates[i]);
        if (d < best) best = d, pick = candidates[i];
    }
    int limit = (int)strlen(given) / 3 > 2 ? (int)strlen(given) / 3 : 2;
    if (pick && best <= limit)
        snprintf(out, len, " (did you mean '%s'?)", pick);
    else
        out[0] = '\0';
}

static void list_keys(const char *section, char *out, size_t len) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < config_num_keys && used < len; i++)
        if (!strcmp(config_keys[i].section, section))
            used += (size_t)snprintf(out + used, len - used, "%s%s", used ? ", " : "", config_keys[i].name);
}

static void list_enum(const char *const *names, char *out, size_t len) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; names[i] && used < len; i++)
        used += (size_t)snprintf(out + used, len - used, "%s%s", i ? "|" : "", names[i]);
}

// ---------------------------------------------------------------- values

static int parse_int(const char *v, long long *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || errno) return -1;
    while (isspace((unsigned char)*end)) end++;
    if (*end) {  // 1e6 style integers are welcome when exact
        double d = strtod(v, &end);
        while (isspace((unsigned char)*end)) end++;
        if (*end || d != floor(d) || fabs(d) > 9.0e15) return -1;
        x = (long long)d;
    }
    *out = x;
    return 0;
}

static int parse_float(const char *v, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v) return -1;
    while (isspace((unsigned char)*end)) end++;
    if (*end || isnan(x)) return -1;
    // a number, but beyond what a double holds (1e-400 underflows, 1e400 overflows)
    if (errno == ERANGE || !isfinite(x)) return -2;
    *out = x;
    return 0;
}

static int parse_bool(const char *v, int *out) {
    static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(v, yes[i])) return *out = 1, 0;
        if (!strcasecmp(v, no[i])) return *out = 0, 0;
    }
    return -1;
}

// "80GiB", "24 GB", "512MiB", "1e9", "0": decimal (kB, MB, GB, TB) and binary (KiB ... TiB) units
static int parse_bytes(const char *v, double *out) {
    char *end;
    double x = strtod(v, &end);
    if (end == v || !isfinite(x) || x < 0) return -1;
    while (isspace((unsigned char)*end)) end++;
    static const struct { const char *unit; double scale; } units[] = {
        {"", 1}, {"B", 1}, {"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcmp(end, units[i].unit)) {
            *out = floor(x * units[i].scale);
            return 0;
        }
    return -1;
}

static void store_int(void *field, size_t size, long long v) {
    if (size == sizeof(int64_t))
        *(int64_t *)field = v;
    else
        *(int *)field = (int)v;
}

static const char *type_name(KeyType t) {
    switch (t) {
    case KEY_INT: return "an integer";
    case KEY_FLOAT: return "a number";
    case KEY_BOOL: return "a boolean (true/false, yes/no, on/off, 1/0)";
    case KEY_ENUM: return "one of the names";
    case KEY_BYTES: return "a size (e.g. 80GiB, 24GB, 512MiB or plain bytes)";
    default: return "text";
    }
}

// "a/b/../c" stays as is; relative paths get the INI's directory in front
static int resolve_path(const Loader *ld, const char *value, int origin, char *out, size_t len) {
    int n;
    if (value[0] == '\0' || value[0] == '/' || origin < 0 || ld->dir[0] == '\0')
        n = snprintf(out, len, "%s", value);
    else
        n = snprintf(out, len, "%s/%s", ld->dir, value);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

static int is_hardware_preset(const char *v) { return profile_preset_exists(v); }

// "1..4096", or "0..2^53" for the keys without a practical limit
static const char *int_range(const KeySpec *k, char *out, size_t len) {
    if (k->max >= 9.0e15)
        snprintf(out, len, "%.0f..2^53", k->min);
    else
        snprintf(out, len, "%.0f..%.0f", k->min, k->max);
    return out;
}

// Parse `value` for key k into base (MistConfig or StagePlan). 0 or 2.
static int set_value(Loader *ld, const KeySpec *k, void *base, const char *section, const char *value, int origin) {
    void *field = (char *)base + k->offset;
    char allowed[256];
    switch (k->type) {
    case KEY_INT: {
        long long v;
        if (parse_int(value, &v))
            return loader_fail(ld, origin, "[%s] %s = %s: not an integer; allowed: integers in %s. Hint: %s",
                               section, k->name, value, int_range(k, allowed, sizeof allowed), k->hint);
        if (v < k->min || v > k->max)
            return loader_fail(ld, origin, "[%s] %s = %s: out of range; allowed: %s. Hint: %s", section, k->name,
                               value, int_range(k, allowed, sizeof allowed), k->hint);
        store_int(field, k->size, v);
        return 0;
    }
    case KEY_FLOAT: {
        double v;
        int prc = parse_float(value, &v);
        if (prc == -2)
            return loader_fail(ld, origin, "[%s] %s = %s: a number too %s to represent (a double holds magnitudes "
                               "from about 1e-308 to 1e308); allowed: [%g, %g]. Hint: %s", section, k->name, value,
                               fabs(strtod(value, NULL)) < 1 ? "small" : "large", k->min, k->max, k->hint);
        if (prc)
            return loader_fail(ld, origin, "[%s] %s = %s: not a number; allowed: numbers in [%g, %g]. Hint: %s",
                               section, k->name, value, k->min, k->max, k->hint);
        if (v < k->min || v > k->max)
            return loader_fail(ld, origin, "[%s] %s = %s: out of range; allowed: [%g, %g]. Hint: %s", section, k->name,
                               value, k->min, k->max, k->hint);
        *(double *)field = v;
        return 0;
    }
    case KEY_BYTES: {
        double v;
        if (parse_bytes(value, &v))
            return loader_fail(ld, origin, "[%s] %s = %s: not a size; allowed: %s. Hint: %s", section, k->name, value,
                               type_name(k->type), k->hint);
        if (v > k->max)
            return loader_fail(ld, origin, "[%s] %s = %s: out of range; allowed: 0..%g bytes. Hint: %s", section,
                               k->name, value, k->max, k->hint);
        *(int64_t *)field = (int64_t)v;
        return 0;
    }
    case KEY_BOOL: {
        int v;
        if (parse_bool(value, &v))
            return loader_fail(ld, origin,
                               "[%s] %s = %s: not a boolean; allowed: true|false (also yes|no, on|off, 1|0). "
                               "Hint: %s",
                               section, k->name, value, k->hint);
        *(int *)field = v;
        return 0;
    }
    case KEY_ENUM: {
        for (int i = 0; k->names[i]; i++)
            if (!strcasecmp(value, k->names[i])) {
                *(int *)field = i;
                return 0;
            }
        char did[96];
        int n = 0;
        while (k->names[n]) n++;
        suggest(value, k->names, n, did, sizeof did);
        list_enum(k->names, allowed, sizeof allowed);
        return loader_fail(ld, origin, "[%s] %s = %s: unknown value%s; allowed: %s. Hint: %s", section, k->name, value,
                           did, allowed, k->hint);
    }
    case KEY_STRING:
    case KEY_PATH: {
        char buf[MIST_PATH_MAX];
        // [cluster] hardware is a preset name or else a profile file (a path like the others)
        int as_path = k->type == KEY_PATH || (!strcmp(k->name, "hardware") && !is_hardware_preset(value));
        int bad = as_path ? resolve_path(ld, value, origin, buf, sizeof buf)
                                      : (snprintf(buf, sizeof buf, "%s", value) >= (int)sizeof buf ? -1 : 0);
        if (bad || strlen(buf) >= k->size)
            return loader_fail(ld, origin, "[%s] %s = %s: too long; allowed: up to %zu characters (with the INI's "
                               "directory in front for relative paths). Hint: use a shorter or absolute path",
                               section, k->name, value, k->size - 1);
        memcpy(field, buf, strlen(buf) + 1);
        return 0;
    }
    }
    return 0;
}

// "stage.3" -> 3; -1 when not a [stage.N] name, -2 when N is bad
static int stage_index(const char *section) {
    if (strncmp(section, "stage.", 6)) return -1;
    const char *p = section + 6;
    if (!*p) return -2;
    for (const char *q = p; *q; q++)
        if (!isdigit((unsigned char)*q)) return -2;
    long v = strtol(p, NULL, 10);
    return v >= MIST_MAX_STAGES ? -2 : (int)v;
}

int loader_stage_slot(int key) {  // position of a stage key among the stage keys
    int slot = 0;
    for (int i = 0; i < key; i++) slot += !strcmp(config_keys[i].section, "stage");
    return slot;
}

// [stage.N] key k just set the field from `before` to `after`: another row of the same field
// (zero, the shorthand of shard) set from the same source (both lines of files, or both
// overrides) must name the same point. An override replaces what a file said.
static int check_shorthand(Loader *ld, int st, int k, int before, int after, int origin) {
    for (int j = 0; j < config_num_keys; j++) {
        const KeySpec *o = &config_keys[j];
        if (j == k || strcmp(o->section, "stage") || o->offset != config_keys[k].offset) continue;
        int other = ld->stage_origin[st][loader_stage_slot(j)];
        if (!other || (other > 0) != (origin > 0) || before == after) continue;
        const KeySpec *sh = config_keys[k].type == KEY_ENUM ? &config_keys[k] : o;  // the shard row
        const char *z = sh == o ? config_keys[k].name : o->name;
        int zv = sh == o ? after : before, sv = sh == o ? before : after;
        return loader_fail(ld, origin,
                           "[stage.%d] %s = %d and %s = %s name different sharding (the other key at line %d); "
                           "allowed: one of the two, or both the same point (zero 0 = NNN, 1 = NNG, 2 = NGG, "
                           "3 = GGG). Hint: keep shard = %s and delete the zero line",
                           st, z, zv, sh->name, shard_code_names[sv], other > 0 ? other : 0, shard_code_names[sv]);
    }
    return 0;
}

// One (section, key, value) from the file or an override.
static int apply(Loader *ld, MistConfig *cfg, const char *section, const char *name, const char *value, int origin) {
    int st = stage_index(section);
    if (st == -2)
        return loader_fail(ld, origin, "[%s]: bad stage section name; allowed: [stage.0] .. [stage.%d]. Hint: number "
                           "stages from 0 in pipeline order", section, MIST_MAX_STAGES - 1);
    if (!section[0]) {  // a key above the first [section] header
        int k = -1;
        for (int i = 0; i < config_num_keys && k < 0; i++)
            if (!strcmp(config_keys[i].name, name)) k = i;
        char hint[96] = "put it under its section";
        if (k >= 0) snprintf(hint, sizeof hint, "'%s' belongs in [%s]", name, !strcmp(config_keys[k].section, "stage") ?
                             "stage.N" : config_keys[k].section);
        return loader_fail(ld, origin, "%s = %s comes before any [section]; allowed: keys inside [model], [train], ... "
                           "sections. Hint: %s", name, value, hint);
    }
    const char *table_section = st >= 0 ? "stage" : section;
    int known_section = 0;
    for (int i = 0; i < config_num_keys; i++) known_section |= !strcmp(config_keys[i].section, table_section);
    if (!known_section || !strcmp(section, "stage")) {
        char did[96];
        suggest(section, section_names, 10, did, sizeof did);
        return loader_fail(ld, origin, "unknown section [%s]%s; allowed: [model], [train], [data], [cluster], [plan], "
                           "[stage.N], [checkpoint], [log], [init], [runtime]. Hint: see docs/config.md", section, did);
    }
    int k = config_key_find(table_section, name);
    if (k < 0) {
        const char *names[64];
        int n = 0;
        for (int i = 0; i < config_num_keys && n < 64; i++)
            if (!strcmp(config_keys[i].section, table_section)) names[n++] = config_keys[i].name;
        char did[96], keys[512];
        suggest(name, names, n, did, sizeof did);
        list_keys(table_section, keys, sizeof keys);
        return loader_fail(ld, origin, "[%s] unknown key '%s'%s; allowed in [%s]: %s. Hint: see docs/config.md",
                           section, name, did, section, keys);
    }
    int *slot = st >= 0 ? &ld->stage_origin[st][loader_stage_slot(k)] : &ld->key_origin[k];
    if (origin > 0 && *slot > 0 && ld->indented)  // inih hands an indented line over as more of the value above
        return loader_fail(ld, origin, "an indented line continues the value of [%s] %s (line %d); allowed: one 'key = "
                           "value' per line. Hint: remove the indentation or join the lines", section, name, *slot);
    if (origin > 0 && *slot > 0)
        return loader_fail(ld, origin,
                           "[%s] %s is set twice (first at line %d); allowed: one value per key. Hint: delete "
                           "one of the two lines",
                           section, name, *slot);
    *slot = origin;
    const char *hash = strchr(value, '#');
    if (origin > 0 && hash && hash > value && isspace((unsigned char)hash[-1]))
        return loader_fail(ld, origin,
                           "[%s] %s = %s: a comment after a value; allowed: inline comments start with ';' "
                           "(a '#' comment only at the start of a line). Hint: write '%.*s ; ...'",
                           section, name, value, (int)(hash - value - 1), value);
    void *base = st >= 0 ? (void *)&cfg->plan.plan.stage[st] : (void *)cfg;
    if (st < 0) return set_value(ld, &config_keys[k], base, section, value, origin);
    int before = *(int *)((char *)base + config_keys[k].offset);
    if (set_value(ld, &config_keys[k], base, section, value, origin)) return 1;
    return check_shorthand(ld, st, k, before, *(int *)((char *)base + config_keys[k].offset), origin);
}

static int on_key_value(void *user, const char *section, const char *name, const char *value) {
    void **ctx = user;
    Loader *ld = ctx[0];
    MistConfig *cfg = ctx[1];
    if (!ld->failed) apply(ld, cfg, section, name, value, ld->line);
    return 1;
}

static int section_known(const char *section) {
    int st = stage_index(section);
    if (st == -2) return 0;
    const char *table = st >= 0 ? "stage" : section;
    if (!strcmp(section, "stage")) return 0;
    for (int i = 0; i < config_num_keys; i++)
        if (!strcmp(config_keys[i].section, table)) return 1;
    return 0;
}

// A "[name]" line: inih (as packaged) does not report sections without keys,
// so headers are checked here. Records where each [stage.N] starts.
static void on_section_header(Loader *ld, const char *line) {
    const char *open = strchr(line, '['), *close = open ? strchr(open, ']') : NULL;
    if (!close) {  // report it here: inih would only say so after parsing the rest under no section
        if (!ld->failed)
            loader_fail(ld, ld->line, "cannot parse this line: a section header needs its closing ']'; allowed: "
                        "'[section]', 'key = value', or a comment starting with ; or #. Hint: write [%.*s]",
                        (int)strcspn(open + 1, " \t\r\n;#"), open + 1);
        return;
    }
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(close - open - 1), open + 1);
    int st = stage_index(name);
    if (st >= 0 && !ld->stage_section_line[st]) ld->stage_section_line[st] = ld->line;
    if (!strcmp(name, "model") && !ld->model_section_line) ld->model_section_line = ld->line;
    if (!section_known(name) && !ld->failed) {
        if (st == -2) {
            loader_fail(ld, ld->line,
                        "[%s]: bad stage section name; allowed: [stage.0] .. [stage.%d]. Hint: number stages "
                        "from 0 in pipeline order",
                        name, MIST_MAX_STAGES - 1);
            return;
        }
        char did[96];
        suggest(name, section_names, 10, did, sizeof did);
        loader_fail(ld, ld->line,
                    "unknown section [%s]%s; allowed: [model], [train], [data], [cluster], [plan], [stage.N], "
                    "[checkpoint], [log], [init], [runtime]. Hint: see docs/config.md",
                    name, did);
    }
}

// inih's line reader, counting lines and catching lines longer than its buffer
static char *counting_reader(char *str, int num, void *stream) {
    Loader *ld = stream;
    // after a NUL byte the file is refused whatever follows: stop reading, or a file
    // that never ends (`[plan] file = /dev/zero`) is read forever
    if (ld->nul_line) return NULL;
    char *r = fgets(str, num, ld->file);
    if (!r) return NULL;
    size_t len = strlen(str);
    if (len == (size_t)num - 1 && str[len - 1] != '\n') {
        int c = fgetc(ld->file);  // the buffer is full: does the line go on?
        if (c != EOF && c != '\n') {
            if (!ld->long_line) ld->long_line = ld->line + 1, ld->max_line = num - 1;
            // drop the rest of the long line so it is not parsed as a line of its own
            while ((c = fgetc(ld->file)) != EOF && c != '\n') {}
        }
    }
    // fgets stops only at a newline, the buffer's end or EOF: a shorter line without
    // its newline, before EOF, held a NUL byte that strlen stopped at
    if (len < (size_t)num - 1 && (len == 0 || str[len - 1] != '\n') && !feof(ld->file) && !ld->nul_line)
        ld->nul_line = ld->line + 1;
    // a carriage return that does not end the line: CR-only (classic Mac) line
    // endings, which fgets reads as one long line
    char *cr = strchr(str, '\r');
    if (cr && cr[1] != '\n' && cr[1] != 0 && !ld->cr_line) ld->cr_line = ld->line + 1;
    ld->line++;
    const char *p = str;
    while (isspace((unsigned char)*p)) p++;
    ld->indented = p != str && *p && *p != ';' && *p != '#' && *p != '[';
    if (*p == '[') on_section_header(ld, p);
    return r;
}

// The family decides the switches the file did not set (base/model_family.c);
// an unset ffn_hidden follows the activation actually chosen.
static void apply_family_defaults(Loader *ld, MistConfig *cfg) {
    ModelConfig *m = &cfg->model;
    ModelConfig d = model_family_config(m->family, m->layers, m->hidden, m->heads, m->vocab, m->seq_len);
#define UNSET(name) (ld->key_origin[config_key_find("model", name)] == 0)
    if (UNSET("norm")) m->norm = d.norm;
    if (UNSET("activation")) m->activation = d.activation;
    if (UNSET("position")) m->position = d.position;
    if (UNSET("bias")) m->bias = d.bias;
    if (UNSET("tied_embeddings")) m->tied_embeddings = d.tied_embeddings;
    if (UNSET("kv_heads")) m->kv_heads = m->heads;
    if (UNSET("ffn_hidden")) m->ffn_hidden = model_default_ffn(m->activation, m->hidden);
    if (UNSET("norm_eps")) m->norm_eps = d.norm_eps;
#undef UNSET
}

// ---------------------------------------------------------------- validation

int loader_origin(const Loader *ld, const char *section, const char *name) {
    int k = config_key_find(section, name);
    return k >= 0 ? ld->key_origin[k] : 0;
}

int loader_stage_origin(const Loader *ld, int s, const char *name) {
    if (!ld) return 0;
    int k = config_key_find("stage", name);
    int o = ld->stage_origin[s][loader_stage_slot(k)];
    return o ? o : ld->stage_section_line[s];
}

static int check_model(Loader *ld, const ModelConfig *m) {
    if (m->hidden % m->heads)
        return loader_fail(ld, loader_origin(ld, "model", "heads"),
                           "[model] heads = %d: must divide hidden (%d); allowed: a "
                           "divisor of %d. Hint: head size = hidden / heads, usually 64 or 128",
                           m->heads, m->hidden, m->hidden);
    if (m->kv_heads > m->heads || m->heads % m->kv_heads)
        return loader_fail(ld, loader_origin(ld, "model", "kv_heads"),
                           "[model] kv_heads = %d: must divide heads (%d); allowed: "
                           "a divisor of %d. Hint: kv_heads = heads is multi-head attention, 1 is multi-query",
                           m->kv_heads, m->heads, m->heads);
    int hs = m->hidden / m->heads;
    if (m->position == POS_ROTARY && hs % 2)
        return loader_fail(
            ld, loader_origin(ld, "model", "heads"),
            "[model] heads = %d: rotary positions need an even head size, "
            "got hidden/heads = %d; allowed: heads giving an even head size. Hint: change heads or hidden",
            m->heads, hs);
    if (m->position == POS_LEARNED && m->seq_len > 1 << 17)
        return loader_fail(ld, loader_origin(ld, "model", "seq_len"),
                           "[model] seq_len = %d: learned positions need a table of "
                           "seq_len rows; allowed: up to 131072 with position = learned. Hint: use position = rotary",
                           m->seq_len);
    return 0;
}

static int check_train(Loader *ld, const TrainConfig *t) {
    if (t->min_lr > t->lr)
        return loader_fail(ld, loader_origin(ld, "train", "min_lr"),
                           "[train] min_lr = %g: larger than lr (%g); allowed: 0..lr. "
                           "Hint: the schedule decays from lr down to min_lr",
                           t->min_lr, t->lr);
    return 0;
}

// The model's shape has no sensible default: a file that forgets one of
// these would silently train some other model.
static int check_required(Loader *ld) {
    static const char *const required[] = {"layers", "hidden", "heads", "vocab", "seq_len"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!loader_origin(ld, "model", required[i])) {
            const KeySpec *k = &config_keys[config_key_find("model", required[i])];
            return loader_fail(ld, ld->model_section_line, "[model] %s is missing; allowed: an integer %.0f..%.0f "
                               "(required: layers, hidden, heads, vocab and seq_len give the model's shape). Hint: add "
                               "'%s = ...' to [model] (%s)", required[i], k->min, k->max, required[i], k->hint);
        }
    return 0;
}

// [cluster] hardware: a preset name, or else a profile file that must exist.
static int check_hardware(Loader *ld, const ClusterConfig *c) {
    if (is_hardware_preset(c->hardware)) return 0;
    struct stat st;
    if (stat(c->hardware, &st) == 0 && S_ISREG(st.st_mode)) return 0;
    const char *const *presets = profile_preset_names;
    int count = 0;
    while (presets[count]) count++;
    char did[96] = "";
    // "a100" means gcp-a100-40g, "h100" dgx-h100: a prefix of the name or of its part after the vendor
    for (int i = 0; presets[i] && !did[0]; i++) {
        const char *dash = strchr(presets[i], '-'), *machine = dash ? dash + 1 : presets[i];
        size_t len = strlen(c->hardware);
        if (c->hardware[0] && (!strncmp(presets[i], c->hardware, len) || !strncmp(machine, c->hardware, len)))
            snprintf(did, sizeof did, " (did you mean '%s'?)", presets[i]);
    }
    if (!did[0]) suggest(c->hardware, presets, count, did, sizeof did);
    if (!did[0]) {  // a path: name the file as resolved
        const char *base = strrchr(c->hardware, '/');
        suggest(base ? base + 1 : c->hardware, presets, count, did, sizeof did);
    }
    return loader_fail(
        ld, loader_origin(ld, "cluster", "hardware"),
        "[cluster] hardware = %s: not a preset and no such profile "
        "file%s; allowed: gcp-l4|gcp-a100-40g|gcp-a100-80g|dgx-a100-80g|dgx-h100|dgx-h200|cpu or a readable profile "
        "file (relative to the INI's directory). Hint: check the spelling or the path",
        c->hardware, did);
}

// [init] from: a readable file, named at its line now rather than after the plan is made.
static int check_init(Loader *ld, const InitConfig *c) {
    if (!c->from[0]) return 0;
    struct stat st;
    const char *why = NULL;
    FILE *f = NULL;
    if (stat(c->from, &st) != 0) why = strerror(errno);
    else if (!S_ISREG(st.st_mode)) why = "not a regular file";
    else if (!(f = fopen(c->from, "rb"))) why = strerror(errno);
    if (f) fclose(f);
    if (!why) return 0;
    return loader_fail(ld, loader_origin(ld, "init", "from"), "[init] from = %s: %s; allowed: a readable safetensors "
                       "file or llm.c GPT-2 checkpoint (relative to the INI's directory). Hint: check the path",
                       c->from, why);
}

// ---------------------------------------------------------------- loading

int loader_open(Loader *ld, const char *path) {
    ld->path = path;
    ld->file = fopen(path, "r");
    if (!ld->file)
        return loader_fail(ld, 0, "cannot open the configuration: %s. Hint: check the path (e.g. examples/tiny.ini)",
                           strerror(errno));
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(ld->file);
        ld->file = NULL;
        return loader_fail(ld, 0,
                           "cannot read the configuration: it is a directory. Hint: name the INI file inside it");
    }
    const char *slash = strrchr(path, '/');
    if (slash) snprintf(ld->dir, sizeof ld->dir, "%.*s", (int)(slash - path), path);
    if (slash == path) snprintf(ld->dir, sizeof ld->dir, "/");
    return 0;
}

int loader_parse(Loader *ld, MistConfig *cfg) {
    void *ctx[2] = {ld, cfg};
    int rc = ini_parse_stream(counting_reader, ld, on_key_value, ctx);
    fclose(ld->file);
    ld->file = NULL;
    if (ld->nul_line) {  // the text after the NUL was lost: it, not what that caused, is the error
        ld->failed = 0;
        return loader_fail(ld, ld->nul_line, "a NUL byte in this line; allowed: text. Hint: the file may be binary or "
                           "damaged; save it as plain text");
    }
    if (ld->cr_line) {  // what the lines it merged caused is not the error: the line endings are
        ld->failed = 0;
        return loader_fail(ld, ld->cr_line, "carriage returns (CR) end the lines of this file; allowed: LF or CRLF "
                           "line endings. Hint: convert it, e.g. tr '\\r' '\\n' < FILE > FILE.ini");
    }
    if (ld->failed) return MIST_EXIT_CONFIG;
    if (ld->long_line)
        return loader_fail(ld, ld->long_line,
                           "line longer than %d characters; allowed: up to %d. Hint: shorten the value "
                           "(use a shorter path)",
                           ld->max_line, ld->max_line);
    if (rc > 0)
        return loader_fail(ld, rc, "cannot parse this line; allowed: '[section]', 'key = value', or a comment starting "
                           "with ; or #. Hint: check for a missing '=' or ']'");
    if (rc < 0) return loader_fail(ld, 0, "reading the configuration failed (out of memory or I/O error)");
    return 0;
}

static int apply_overrides(Loader *ld, MistConfig *cfg, const char *const *ov, int n) {
    for (int i = 0; i < n; i++) {
        char buf[512];
        if (strlen(ov[i]) >= sizeof buf)  // never cut a value short: it could still parse, as another value
            return loader_fail(ld, -(i + 1), "longer than %d characters; allowed: up to %d. Hint: shorten the value",
                               (int)sizeof buf - 1, (int)sizeof buf - 1);
        snprintf(buf, sizeof buf, "%s", ov[i]);
        char *eq = strchr(buf, '=');
        char *dot = eq ? memchr(buf, '.', (size_t)(eq - buf)) : NULL;
        if (!eq || !dot) return loader_fail(ld, -(i + 1), "expected SECTION.KEY=VALUE. Hint: e.g. -o train.steps=10");
        // the section may itself contain a dot ([stage.N]): the key follows the last dot before '='
        char *last = dot;
        for (char *q = dot; q < eq; q++)
            if (*q == '.') last = q;
        *last = '\0';
        *eq = '\0';
        const char *section = buf, *key = last + 1, *value = eq + 1;
        while (isspace((unsigned char)*value)) value++;
        if (apply(ld, cfg, section, key, value, -(i + 1))) return MIST_EXIT_CONFIG;
    }
    return 0;
}

int config_load(MistConfig *cfg, const char *path, const char *const *overrides, int n_overrides, int world_size,
                char *err, size_t errlen) {
    static Loader ld;  // large; config loading is single-threaded
    memset(&ld, 0, sizeof ld);
    ld.err = err;
    ld.errlen = errlen;
    ld.overrides = overrides;
    if (errlen) err[0] = '\0';
    config_defaults(cfg);
    if (loader_open(&ld, path)) return MIST_EXIT_CONFIG;
    snprintf(cfg->source, sizeof cfg->source, "%s", path);
    if (loader_parse(&ld, cfg)) return MIST_EXIT_CONFIG;
    if (apply_overrides(&ld, cfg, overrides, n_overrides)) return MIST_EXIT_CONFIG;
    if (check_required(&ld) || check_hardware(&ld, &cfg->cluster) || check_init(&ld, &cfg->init))
        return MIST_EXIT_CONFIG;
    apply_family_defaults(&ld, cfg);
    if (check_model(&ld, &cfg->model) || check_train(&ld, &cfg->train)) return MIST_EXIT_CONFIG;
    if (cfg->plan.file[0]) {  // the stages come from a plan file, checked there (file:line in the message)
        char perr[1024];
        if (plan_file_load_checked(&cfg->plan.plan, cfg->plan.file, &cfg->model, cfg->train.global_batch, world_size,
                                   perr, sizeof perr))
            return loader_fail(&ld, loader_origin(&ld, "plan", "file"), "[plan] file = %s: %s", cfg->plan.file, perr);
        return 0;
    }
    if (cfg->plan.mode == PLAN_FIXED) {
        if (plan_check_stage_sections(&ld, &cfg->plan.plan)) return MIST_EXIT_CONFIG;
        if (plan_check(&ld, &cfg->plan.plan, &cfg->model, cfg->train.global_batch, world_size))
            return MIST_EXIT_CONFIG;
    }
    return 0;
}

const char *config_family_name(ModelFamily f) { return f == FAMILY_LLAMA ? "llama" : "gpt"; }

const char *config_precision_name(Precision p) { return p == PREC_BF16 ? "bf16" : p == PREC_FP16 ? "fp16" : "fp32"; }
