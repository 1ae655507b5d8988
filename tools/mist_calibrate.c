// mist-calibrate: measure this machine's op latencies for a model (GEMMs,
// attention, norms, ...; see runtime/calibrate.h) and write them as an op table for `mist-plan --op-table` (one
// process, no MPI launch needed).
//   mist-calibrate CONFIG.ini [--b LIST] [--tp LIST] [--iters N] [--out FILE] [-o section.key=value]...
// Exit codes: 0 ok, 1 runtime failure (no memory, cannot write), 2 usage or config error.
#include <config.h>  // PACKAGE_VERSION
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/calibrate.h"
#include "base/config_keys.h"
#include "base/config_load.h"
#include "runtime/fileutil.h"
#include "runtime/launch.h"

enum { MAX_LIST = 16, MAX_OVERRIDES = 256 };

static void usage(FILE *f) {
    fprintf(f,
            "usage: mist-calibrate CONFIG.ini [options]\n"
            "\n"
            "Times the model's ops (qkv attention attn_proj fc fc_proj lm_head ln1 ln2 lnf, and\n"
            "rotary swiglu where the model has them; at tp = 1 also embedding and crossentropy;\n"
            "and the kernels of [stage.N] lean blocks: lean_gelu (GELU models), lean_ln1, lean_ln2),\n"
            "forward and backward, on this machine's first GPU (or the CPU backend when there\n"
            "is none, or with MIST_DEVICE=cpu), at the model's seq_len, for every micro-batch\n"
            "b and tensor-parallel degree tp listed, and writes them as an op table that\n"
            "`mist-plan --op-table FILE` uses instead of the model for those ops.\n"
            "\n"
            "options:\n"
            "  --b LIST            micro-batch sizes, comma separated (default 1,2,4)\n"
            "  --tp LIST           tensor-parallel degrees (default 1); a tp rank's GEMMs are\n"
            "                      slices of the layer's, so one device measures them all\n"
            "  --iters N           timed calls per op and direction (default 10, after 2 warm-up)\n"
            "  --out FILE          the op table (default: standard output)\n"
            "  -o section.key=value override a config value (repeatable)\n"
            "  -h, --help          this text\n"
            "  -V, --version       print the version and exit\n"
            "\n"
            "exit status: 0 ok, 1 runtime failure, 2 configuration or usage error\n"
            "docs: docs/plan-analyze.md (Measured op table)\n");
}

// "1,2,4" -> {1, 2, 4}; returns the count, or -1 on a bad list
static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1 << 20 || n == max || (*end && *end != ',')) return -1;
        out[n++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return n;
}

typedef struct {
    const char *config_path, *out_path, *overrides[MAX_OVERRIDES];
    int bs[MAX_LIST], tps[MAX_LIST], nb, ntp, iters, n_overrides;
} CalibArgs;

// The command line into a; -1 to go on, else the exit code (0 after --help).
static int parse_args(int argc, char **argv, CalibArgs *a) {
    *a = (CalibArgs){.out_path = "-", .bs = {1, 2, 4}, .tps = {1}, .nb = 3, .ntp = 1, .iters = 10};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(o, "-V") || !strcmp(o, "--version")) {
            printf("mist-calibrate (mist) %s\n", PACKAGE_VERSION);
            return 0;
        }
        if (!strcmp(o, "--b") || !strcmp(o, "--tp") || !strcmp(o, "--iters") || !strcmp(o, "--out") ||
            !strcmp(o, "-o")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "mist-calibrate: %s needs a value (see --help)\n", o);
                return 2;
            }
            const char *v = argv[++i];
            int bad = 0;
            if (!strcmp(o, "--b")) bad = (a->nb = parse_list(v, a->bs, MAX_LIST)) < 1;
            else if (!strcmp(o, "--tp")) bad = (a->ntp = parse_list(v, a->tps, MAX_LIST)) < 1;
            else if (!strcmp(o, "--iters")) {
                char *end;
                long it = strtol(v, &end, 10);
                bad = end == v || *end || it < 1 || it > 1000000;
                a->iters = bad ? 0 : (int)it;
            }
            else if (!strcmp(o, "--out")) a->out_path = v;
            else if (a->n_overrides < MAX_OVERRIDES) a->overrides[a->n_overrides++] = v;
            else bad = 1;
            if (bad) {
                fprintf(stderr, "mist-calibrate: %s %s: allowed: %s (see --help)\n", o, v,
                        !strcmp(o, "--iters") ? "an integer 1..1000000"
                        : !strcmp(o, "-o")    ? "at most 256 overrides"
                                              : "integers >= 1, comma separated, at most 16");
                return 2;
            }
        } else if (o[0] == '-' && o[1]) {
            fprintf(stderr, "mist-calibrate: unknown option '%s' (see --help)\n", o);
            return 2;
        } else if (!a->config_path) {
            a->config_path = o;
        } else {
            fprintf(stderr, "mist-calibrate: unexpected argument '%s' (one CONFIG.ini)\n", o);
            return 2;
        }
    }
    if (!a->config_path) {
        usage(stderr);
        return 2;
    }
    return -1;
}

int main(int argc, char **argv) {
    static CalibArgs a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    char env_err[256];
    if (launch_check_env(env_err, sizeof env_err)) {
        fprintf(stderr, "mist-calibrate: %s\n", env_err);
        return 2;
    }
    static MistConfig cfg;
    char err[1024];
    if (config_load(&cfg, a.config_path, a.overrides, a.n_overrides, 0, err, sizeof err) != 0) {
        fprintf(stderr, "mist-calibrate: %s\n", err);
        return 2;
    }
    // every listed tp must shard the model as the runtime does (heads, kv heads, MLP columns)
    for (int i = 0; i < a.ntp; i++) {
        const ModelConfig *m = &cfg.model;
        if (!model_tp_shards(m, a.tps[i])) {
            fprintf(stderr, "mist-calibrate: --tp %d: must divide heads (%d), kv_heads (%d) and ffn_hidden (%d); "
                    "allowed: a common divisor of them. Hint: a TP rank holds heads/tp heads and ffn_hidden/tp "
                    "MLP columns\n", a.tps[i], m->heads, m->kv_heads, m->ffn_hidden);
            return 2;
        }
    }
    // the measurements take a while: a bad --out is reported before them
    int to_stdout = !strcmp(a.out_path, "-");
    if (!to_stdout && mist_output_check(a.out_path, err, sizeof err) != 0) {
        fprintf(stderr, "mist-calibrate: --out %s: %s\n", a.out_path, err);
        return 2;
    }
    // the attention kernels training will run: [runtime] attention, unless MIST_CUDA_ATTENTION
    // already says (the CUDA backend reads the variable at each call; the CPU ignores it)
    int att = config_key_find("runtime", "attention");
    setenv("MIST_CUDA_ATTENTION", config_keys[att].names[cfg.runtime.attention], 0);
    char device[160];
    int n = calibrate_run(&cfg.model, cfg.train.precision == PREC_BF16 ? MIST_BF16 : MIST_F32, a.bs, a.nb, a.tps,
                          a.ntp, a.iters, to_stdout ? NULL : a.out_path, device, sizeof device, err, sizeof err);
    if (n < 0) {
        fprintf(stderr, "mist-calibrate: %s\n", err);
        return 1;
    }
    if (!to_stdout)
        fprintf(stderr, "mist-calibrate: %d entries (the model's ops at %d b x %d tp) on %s -> %s\n", n, a.nb, a.ntp,
                device, a.out_path);
    return 0;
}
