// The configuration loader without MPI: defaults, every key of the table
// parsed from a file, overrides after the file, family defaults, relative
// paths, plan files and their round trip, every shipped example, and every
// key documented in docs/config.md.
#define _POSIX_C_SOURCE 200809L  // popen, mkdtemp
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/config_keys.h"
#include "base/config_load.h"
#include "base/plan_file.h"
#include "tests/tap.h"

static char tmpdir[256];
static char err[2048];

// returns the path in a buffer per file name slot (callers keep two at once)
static const char *write_file(const char *name, const char *text) {
    static char paths[4][512];
    static int next;
    char *path = paths[next++ % 4];
    snprintf(path, 512, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(1); }
    fputs(text, f);
    fclose(f);
    return path;
}

static const char *BASE =
    "[model]\nlayers = 4\nhidden = 64\nheads = 4\nvocab = 256\nseq_len = 32\n"
    "[train]\nglobal_batch = 8\n"
    "[plan]\nmode = fixed\nG = 2\nstages = 2\n"
    "[stage.0]\nlayers = 1\ndp = 2\nb = 2\nzero = 1\n"
    "[stage.1]\nlayers = 3\ndp = 1\ntp = 2\nb = 4\nckpt = 2\nao = 0.5\n"
    "[data]\ntrain = shards/train_*.bin\n"
    "[checkpoint]\ndir = /abs/ckpt\n";

static void test_defaults(void) {
    MistConfig c;
    config_defaults(&c);
    ok(c.model.family == FAMILY_GPT && c.model.layers > 0 && c.train.precision == PREC_BF16 &&
           c.plan.mode == PLAN_AUTO && c.log.interval == 1 && c.checkpoint.keep >= 1,
       "defaults: gpt, bf16, auto plan, log every iteration");
}

static void test_base(void) {
    MistConfig c;
    const char *p = write_file("base.ini", BASE);
    int rc = config_load(&c, p, NULL, 0, 4, err, sizeof err);
    ok(rc == 0, "a two-stage plan on 4 ranks loads (%s)", rc ? err : "ok");
    const Plan *pl = &c.plan.plan;
    ok(pl->num_stages == 2 && pl->G == 2 && pl->stage[0].dp == 2 && pl->stage[0].zero == 1 &&
           pl->stage[1].tp == 2 && pl->stage[1].ckpt == 2 && pl->stage[1].ao == 0.5 && pl->stage[0].tp == 1,
       "stage values parsed, unset stage keys default (tp = 1)");
    ok(c.model.kv_heads == 4 && c.model.ffn_hidden == 256 && c.model.norm == NORM_LAYERNORM && c.model.bias &&
           c.model.tied_embeddings,
       "gpt family defaults: kv_heads = heads, ffn = 4h, layernorm, bias, tied");
    char want[512];
    snprintf(want, sizeof want, "%s/shards/train_*.bin", tmpdir);
    ok(!strcmp(c.data.train, want), "relative data path resolved against the INI's directory (%s)", c.data.train);
    ok(!strcmp(c.checkpoint.dir, "/abs/ckpt"), "absolute paths stay as they are");
    ok(config_load(&c, p, NULL, 0, 3, err, sizeof err) == 2 && strstr(err, "needs 4 ranks"),
       "the same plan on 3 ranks is refused");
    ok(config_load(&c, p, NULL, 0, 0, err, sizeof err) == 0, "world size 0 skips the rank count check");
}

static void test_overrides(void) {
    MistConfig c;
    const char *p = write_file("base.ini", BASE);
    const char *ov[] = {"train.steps=42", "stage.1.b=4", "model.family=llama", "model.norm=layernorm",
                        "train.lr=1e-3", "data.val=rel/val.bin", "cluster.device_memory=24GiB"};
    int rc = config_load(&c, p, ov, 7, 4, err, sizeof err);
    ok(rc == 0, "overrides load (%s)", rc ? err : "ok");
    ok(c.train.steps == 42 && c.train.lr == 1e-3, "overrides set [train] values");
    ok(c.model.family == FAMILY_LLAMA && c.model.activation == ACT_SWIGLU && c.model.position == POS_ROTARY &&
           !c.model.bias && !c.model.tied_embeddings && c.model.norm == NORM_LAYERNORM,
       "llama family defaults apply, an explicit norm wins over them");
    ok(c.model.ffn_hidden == (8 * 64 / 3 + 255) / 256 * 256, "llama ffn_hidden = 8h/3 rounded up to 256 (%d)",
       c.model.ffn_hidden);
    ok(!strcmp(c.data.val, "rel/val.bin"), "a path from -o is relative to the working directory");
    ok(c.cluster.device_memory == 24LL * 1024 * 1024 * 1024, "24GiB = %lld bytes", (long long)c.cluster.device_memory);
    const char *plan_keys[] = {"plan.space=offload", "stage.0.wo=0.25", "stage.0.go=0.5", "stage.0.oo=0.75",
                               "stage.1.ckpt=3", "plan.mode=auto"};
    ok(config_load(&c, p, plan_keys, 6, 4, err, sizeof err) == 0 && c.plan.space == SPACE_OFFLOAD &&
           c.plan.mode == PLAN_AUTO && c.plan.plan.stage[0].wo == 0.25 && c.plan.plan.stage[0].go == 0.5 &&
           c.plan.plan.stage[0].oo == 0.75 && c.plan.plan.stage[1].ckpt == 3,
       "[plan] space/mode and the stage offload keys parse (%s)", err);
    const char *later[] = {"train.steps=1", "train.steps=2"};
    ok(config_load(&c, p, later, 2, 4, err, sizeof err) == 0 && c.train.steps == 2, "the last override wins");
    // train.steps=000...0007 (600 characters) is 7, or an error; cut at a buffer's end it would read as 0
    char longo[620];
    int n = snprintf(longo, sizeof longo, "train.steps=");
    memset(longo + n, '0', 600 - n);
    snprintf(longo + 600, sizeof longo - 600, "7");
    const char *too_long[] = {longo};
    ok(config_load(&c, p, too_long, 1, 4, err, sizeof err) == 2 && strstr(err, "-o train.steps=") &&
           strstr(err, "longer than"),
       "an override longer than the limit is refused, not cut short: %.120s", err);
}

static void test_every_key(void) {
    // each key set from a file to a non-default value and read back through the table
    int good = 1, n = 0;
    for (int i = 0; i < config_num_keys; i++) {
        const KeySpec *k = &config_keys[i];
        if (!strcmp(k->section, "stage") || !strcmp(k->section, "plan")) continue;
        char text[1024], value[64];
        switch (k->type) {
        case KEY_INT: snprintf(value, sizeof value, "%.0f", k->min + 1); break;
        case KEY_FLOAT: snprintf(value, sizeof value, "%.17g", k->min + (k->max - k->min) / 3); break;
        case KEY_BOOL: snprintf(value, sizeof value, "yes"); break;
        case KEY_ENUM: snprintf(value, sizeof value, "%s", k->names[1]); break;
        case KEY_BYTES: snprintf(value, sizeof value, "3MiB"); break;
        default: snprintf(value, sizeof value, "%s", strcmp(k->name, "hardware") ? "/x/y" : "gcp-a100-80g"); break;
        }
        // the model's shape is required: every file states it (but for the key under test)
        static const char *const shape[][2] = {
            {"layers", "4"}, {"hidden", "64"}, {"heads", "4"}, {"vocab", "256"}, {"seq_len", "32"}};
        int used = snprintf(text, sizeof text, "[model]\n");
        for (int j = 0; j < 5; j++)
            if (strcmp(k->section, "model") || strcmp(k->name, shape[j][0]))
                used += snprintf(text + used, sizeof text - (size_t)used, "%s = %s\n", shape[j][0], shape[j][1]);
        if (strcmp(k->section, "model")) used += snprintf(text + used, sizeof text - (size_t)used, "[%s]\n", k->section);
        snprintf(text + used, sizeof text - (size_t)used, "%s = %s\n", k->name, value);
        MistConfig c;
        const char *p = write_file("key.ini", text);
        if (config_load(&c, p, NULL, 0, 0, err, sizeof err)) {
            // a value can be valid alone and still break a cross-check: those keys must name themselves
            if (!strstr(err, k->name)) { diag("%s.%s = %s: %s", k->section, k->name, value, err); good = 0; }
            continue;
        }
        void *f = (char *)&c + k->offset;
        int same = 0;
        switch (k->type) {
        case KEY_INT: same = (k->size == 8 ? *(int64_t *)f : *(int *)f) == (long long)(k->min + 1); break;
        case KEY_FLOAT: same = *(double *)f == strtod(value, NULL); break;
        case KEY_BOOL: same = *(int *)f == 1; break;
        case KEY_ENUM: same = *(int *)f == 1; break;
        case KEY_BYTES: same = *(int64_t *)f == 3 << 20; break;
        default: same = !strcmp((char *)f, strcmp(k->name, "hardware") ? "/x/y" : "gcp-a100-80g"); break;
        }
        if (!same) { diag("%s.%s = %s not stored", k->section, k->name, value); good = 0; }
        n++;
    }
    ok(good && n > 30, "every non-plan key parses from a file into its field (%d keys)", n);
}

static void test_plan_file(void) {
    Plan plan;
    memset(&plan, 0, sizeof plan);
    plan.G = 4;
    plan.num_stages = 3;
    for (int s = 0; s < 3; s++)
        plan.stage[s] = (StagePlan){.layers = s + 1, .dp = 1 + s % 2, .tp = 1, .b = 1 + s, .zero = s, .ckpt = s,
                                    .wo = 0.125 * s, .go = 0.25, .oo = 1.0 / 3.0, .ao = 0.875};
    char path[512];
    snprintf(path, sizeof path, "%s/plan.ini", tmpdir);
    FILE *f = fopen(path, "w");
    plan_write_ini(&plan, f);
    fclose(f);
    Plan back;
    int rc = plan_file_load(&back, path, err, sizeof err);
    ok(rc == 0, "plan_write_ini output loads back (%s)", rc ? err : "ok");
    int same = back.G == plan.G && back.num_stages == plan.num_stages;
    for (int s = 0; s < 3; s++) same = same && stage_plan_equal(&back.stage[s], &plan.stage[s]);
    ok(same, "the round trip keeps every field bit for bit (1/3 included)");

    ModelConfig m;
    MistConfig c;
    config_defaults(&c);
    m = c.model;
    m.layers = 6;
    m.kv_heads = m.heads;
    m.ffn_hidden = 4 * m.hidden;
    ok(plan_validate(&back, &m, 4, 0, "p.ini", err, sizeof err) == 2 && strstr(err, "p.ini") &&
           strstr(err, "b * dp * G"),
       "plan_validate names the plan and the batch rule: %s", err);

    const char *p = write_file("main.ini",
                               "[model]\nlayers = 6\nhidden = 64\nheads = 4\nvocab = 256\nseq_len = 32\n[train]\nglobal_batch = 4\n"
                               "[plan]\nmode = fixed\nfile = plan2.ini\n");
    write_file("plan2.ini", "[plan]\nG = 2\nstages = 2\n[stage.0]\nlayers = 2\nb = 2\n[stage.1]\nlayers = 4\nb = 2\n");
    rc = config_load(&c, p, NULL, 0, 2, err, sizeof err);
    ok(rc == 0 && c.plan.plan.num_stages == 2 && c.plan.plan.stage[1].layers == 4,
       "[plan] file = plan2.ini (relative to the INI) supplies the stages (%s)", rc ? err : "ok");
    write_file("plan2.ini", "[plan]\nG = 2\nstages = 1\n[stage.0]\nlayers = 6\nb = 2\n[train]\nsteps = 1\n");
    ok(config_load(&c, p, NULL, 0, 0, err, sizeof err) == 2 && strstr(err, "plan2.ini:8"),
       "a plan file with other sections is refused at the line: %s", err);
    // [plan] keys a plan file cannot honour are refused, not ignored
    char mainp[512];  // write_file's paths are reused after four calls
    snprintf(mainp, sizeof mainp, "%s", p);
    p = mainp;
    write_file("plan2.ini", "[plan]\nG = 2\nstages = 1\nspace = megatron\n[stage.0]\nlayers = 6\nb = 2\n");
    ok(config_load(&c, p, NULL, 0, 0, err, sizeof err) == 2 && strstr(err, "plan2.ini:4") && strstr(err, "space"),
       "a plan file's [plan] space is refused at the line: %s", err);
    write_file("plan2.ini", "[plan]\nmode = auto\nG = 2\nstages = 1\n[stage.0]\nlayers = 6\nb = 2\n");
    ok(config_load(&c, p, NULL, 0, 0, err, sizeof err) == 2 && strstr(err, "plan2.ini:2") && strstr(err, "fixed"),
       "a plan file's mode = auto is refused at the line: %s", err);
    // the model checks run with the plan file's lines (tp must divide the 4 heads)
    write_file("plan2.ini", "[plan]\nmode = fixed\nG = 2\nstages = 1\n[stage.0]\nlayers = 6\nb = 2\ntp = 3\n");
    Plan chk;
    snprintf(path, sizeof path, "%s/plan2.ini", tmpdir);
    m.heads = m.kv_heads = 4, m.ffn_hidden = 4 * m.hidden;
    ok(plan_file_load_checked(&chk, path, &m, 4, 0, err, sizeof err) == 2 && strstr(err, "plan2.ini:8") &&
           strstr(err, "tp = 3"),
       "plan_file_load_checked names the plan file's line of a tp that does not divide heads: %s", err);
    // 2 stages x dp 2^20 x tp 1024: more ranks than an int sum holds
    write_file("plan2.ini", "[plan]\nG = 1\nstages = 2\n[stage.0]\nlayers = 3\nb = 1\ndp = 1048576\ntp = 1024\n"
                            "[stage.1]\nlayers = 3\nb = 1\ndp = 1048576\ntp = 1024\n");
    m.heads = m.kv_heads = 1024, m.ffn_hidden = 4096;
    ok(plan_file_load_checked(&chk, path, &m, 1048576, 0, err, sizeof err) == 2 && strstr(err, "2147483648 ranks"),
       "a plan needing 2^31 ranks is refused, counted without overflow: %s", err);
}

static void test_required_and_hardware(void) {
    MistConfig c;
    const char *p = write_file("noshape.ini", "[model]\nlayers = 4\nhidden = 64\nheads = 4\nvocab = 256\n");
    ok(config_load(&c, p, NULL, 0, 0, err, sizeof err) == 2 && strstr(err, "noshape.ini:1:") &&
           strstr(err, "seq_len is missing"),
       "a missing required [model] key is named at the [model] line: %s", err);
    const char *fix[] = {"model.seq_len=16"};
    ok(config_load(&c, p, fix, 1, 0, err, sizeof err) == 0 && c.model.seq_len == 16,
       "an override supplies a required key (%s)", err);

    write_file("myhw.ini", "[profile]\nbase = dgx-h100\n");
    p = write_file("hw.ini", "[model]\nlayers = 4\nhidden = 64\nheads = 4\nvocab = 256\nseq_len = 32\n"
                             "[cluster]\nhardware = myhw.ini\n");
    char want[512];
    snprintf(want, sizeof want, "%s/myhw.ini", tmpdir);
    int rc = config_load(&c, p, NULL, 0, 0, err, sizeof err);
    ok(rc == 0 && !strcmp(c.cluster.hardware, want), "a hardware profile file is resolved against the INI (%s)",
       rc ? err : c.cluster.hardware);
    const char *preset[] = {"cluster.hardware=gcp-a100-40g"};
    ok(config_load(&c, p, preset, 1, 0, err, sizeof err) == 0 && !strcmp(c.cluster.hardware, "gcp-a100-40g"),
       "a preset name stays a name");
    const char *old[] = {"cluster.hardware=a100-40g"};
    ok(config_load(&c, p, old, 1, 0, err, sizeof err) == 0 && !strcmp(c.cluster.hardware, "a100-40g"),
       "a preset's old name is still a preset");
    const char *typo[] = {"cluster.hardware=h100"};
    ok(config_load(&c, p, typo, 1, 0, err, sizeof err) == 2 && strstr(err, "did you mean 'dgx-h100'"),
       "a misspelt preset gets a suggestion: %s", err);
}

// the parser's line limit: 199 characters load, 200 are refused at their line
static void test_line_limit(void) {
    static char text[1024];
    MistConfig c;
    for (int len = 199; len <= 200; len++) {
        int n = snprintf(text, sizeof text, "[model]\nlayers = 4\nhidden = 64\nheads = 4\nvocab = 256\nseq_len = 32\n;");
        memset(text + n, 'x', (size_t)len - 1);
        snprintf(text + n + len - 1, sizeof text - (size_t)(n + len - 1), "\n[train]\nsteps = 7\n");
        const char *p = write_file("long.ini", text);
        int rc = config_load(&c, p, NULL, 0, 0, err, sizeof err);
        if (len == 199)
            ok(rc == 0 && c.train.steps == 7, "a 199-character line is read, the next lines too (%s)", rc ? err : "ok");
        else
            ok(rc == 2 && strstr(err, "long.ini:7:") && strstr(err, "longer than 199"),
               "a 200-character line is refused at its line: %s", err);
    }
    // an indented line is inih's continuation of the value above: said so, not "set twice"
    const char *p = write_file("cont.ini", "[model]\nlayers = 4\nheads = 4\n   8\nhidden = 64\nvocab = 256\nseq_len = 32\n");
    ok(config_load(&c, p, NULL, 0, 0, err, sizeof err) == 2 && strstr(err, "cont.ini:4:") &&
           strstr(err, "indented line continues the value of [model] heads"),
       "an indented line is named as a continuation: %s", err);
    // a NUL byte hides the rest of its line from the parser: it is the error, not the key it hid
    static const char nul_text[] = "[model]\nlayers = 4\n\0heads = 4\nhidden = 64\nvocab = 256\nseq_len = 32\n";
    FILE *f = fopen(p, "w");
    fwrite(nul_text, 1, sizeof nul_text - 1, f);
    fclose(f);
    ok(config_load(&c, p, NULL, 0, 0, err, sizeof err) == 2 && strstr(err, "cont.ini:3:") && strstr(err, "NUL byte"),
       "a NUL byte is refused at its line: %s", err);
}

static void test_examples(void) {
    const char *src = getenv("MIST_SRCDIR");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls '%s'/examples/*.ini", src ? src : ".");
    FILE *ls = popen(cmd, "r");
    char path[512];
    int n = 0, good = 1;
    while (ls && fgets(path, sizeof path, ls)) {
        path[strcspn(path, "\n")] = '\0';
        MistConfig c;
        if (config_load(&c, path, NULL, 0, 0, err, sizeof err)) {
            diag("%s", err);
            good = 0;
        }
        n++;
    }
    if (ls) pclose(ls);
    ok(good && n >= 1, "every examples/*.ini loads (%d files)", n);
}

static void test_docs(void) {
    const char *src = getenv("MIST_SRCDIR");
    char path[512];
    snprintf(path, sizeof path, "%s/docs/config.md", src ? src : ".");
    FILE *f = fopen(path, "r");
    static char doc[1 << 17];
    size_t len = f ? fread(doc, 1, sizeof doc - 1, f) : 0;
    if (f) fclose(f);
    doc[len] = '\0';
    int missing = 0;
    for (int i = 0; i < config_num_keys; i++) {
        char needle[80];
        snprintf(needle, sizeof needle, "| `%s` |", config_keys[i].name);
        if (!strstr(doc, needle)) { diag("docs/config.md lacks %s.%s", config_keys[i].section, config_keys[i].name); missing++; }
    }
    ok(len > 0 && missing == 0, "docs/config.md documents every key (%d missing)", missing);
}

// [runtime] attention: auto by default, each name into its AttentionKernels value (the order
// the CUDA backend and MIST_CUDA_ATTENTION share), a bad value named with file, line, key and
// the allowed names, and [runtime] among the sections an unknown one is told about
static void test_runtime_attention(void) {
    MistConfig c;
    const char *p = write_file("base.ini", BASE);
    ok(config_load(&c, p, NULL, 0, 4, err, sizeof err) == 0 && c.runtime.attention == ATTENTION_AUTO,
       "[runtime] attention defaults to auto");
    static const char *const names[] = {"auto", "base", "wide", "wgmma", "cudnn"};
    static const int want[] = {ATTENTION_AUTO, ATTENTION_BASE, ATTENTION_WIDE, ATTENTION_WGMMA, ATTENTION_CUDNN};
    int parsed = 0;
    for (int i = 0; i < 5; i++) {
        char text[1024], ov[64];
        snprintf(text, sizeof text, "%s[runtime]\nattention = %s\n", BASE, names[i]);
        snprintf(ov, sizeof ov, "runtime.attention=%s", names[i]);
        const char *ovs[] = {ov};
        MistConfig d;
        parsed += config_load(&c, write_file("att.ini", text), NULL, 0, 4, err, sizeof err) == 0 &&
                  c.runtime.attention == want[i] && config_load(&d, p, ovs, 1, 4, err, sizeof err) == 0 &&
                  d.runtime.attention == want[i];
    }
    ok(parsed == 5, "each of auto, base, wide, wgmma, cudnn parses from a file and from -o (%d of 5)", parsed);
    char text[1024], line[32];
    snprintf(text, sizeof text, "%s[runtime]\nattention = flash\n", BASE);
    int n = 0;  // the bad line's number: BASE's lines + the header + 1
    for (const char *q = text; *q; q++) n += *q == '\n';
    snprintf(line, sizeof line, ":%d:", n);
    const char *bad = write_file("att_bad.ini", text);
    int rc = config_load(&c, bad, NULL, 0, 4, err, sizeof err);
    ok(rc == 2 && strstr(err, "att_bad.ini") && strstr(err, line) && strstr(err, "[runtime] attention") &&
           strstr(err, "flash") && strstr(err, "auto") && strstr(err, "cudnn") && strstr(err, "wgmma"),
       "a bad attention value names the file, line %d, the key, the value and the allowed names: %s", n, err);
    const char *ov_bad[] = {"runtime.attention=fast"};
    rc = config_load(&c, p, ov_bad, 1, 4, err, sizeof err);
    ok(rc == 2 && strstr(err, "runtime.attention=fast") && strstr(err, "cudnn"), "a bad -o value too: %s", err);
    snprintf(text, sizeof text, "%s[runtim]\nattention = base\n", BASE);
    rc = config_load(&c, write_file("att_sec.ini", text), NULL, 0, 4, err, sizeof err);
    ok(rc == 2 && strstr(err, "did you mean 'runtime'") && strstr(err, "[runtime]"),
       "a misspelt [runtime] is pointed at it: %s", err);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mist_test_config_XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    test_defaults();
    test_base();
    test_overrides();
    test_every_key();
    test_plan_file();
    test_required_and_hardware();
    test_line_limit();
    test_examples();
    test_docs();
    test_runtime_attention();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd)) diag("could not remove %s", tmpdir);
    return tap_done();
}
