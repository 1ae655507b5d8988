#!/bin/sh
# Writes the GPU run's summary as JSON from what benchmarks/gpu/run.sh's steps
# left in OUTDIR so far (run after each step, so that a run cut short still
# has one): the device, driver and CUDA version, each step's status and time,
# and each target's measured value beside the target:
#   GPT-2 124M MFU (>= 0.50), GPT-3 1.3B MFU (>= 0.55) from bench_train's JSON
#   (OUTDIR/train_*.json, one object per case and line), attention forward
#   TFLOP/s at T=2048, HS=128 (>= 350; the fastest variant in OUTDIR/attention.log, bench_kernels),
#   predicted vs measured peak device memory (within 1%) and iteration time
#   (within 10%), per case; the vocabulary A/B (vocab_pad_ab: per attention variant
#   with both rows, GPT-2 124M padded to 50304 rows vs not padded, gpt2-124m-v50257:
#   both ms/iter and unpadded / padded); the timeline step's summary (timeline:
#   bench_train's "timeline_json" line in OUTDIR/timeline.log, as it is);
#   bench_train's objects follow as they are.
#   sh benchmarks/gpu/last_json.sh OUTDIR > last.json
# Only POSIX sh and awk: the GPU machine may have nothing else.
set -eu
out=$1
# shellcheck disable=SC2046
train=$(ls "$out"/train_*.json 2>/dev/null || true)
{
    cat "$out/env.txt" 2>/dev/null || true
    echo "@steps"
    cat "$out/steps.tsv" 2>/dev/null || true
    echo "@attention"
    grep -E "^attention_fwd" "$out/attention.log" 2>/dev/null | grep 'T=2048' | grep 'HS=128' || true
    echo "@train"
    # shellcheck disable=SC2086
    [ -z "$train" ] || grep -h '"model":' $train || true
    echo "@timeline"
    sed -n 's/^timeline_json //p' "$out/timeline.log" 2>/dev/null | tail -1
} | awk '
function str(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); return "\"" s "\"" }
# the value of "key": in a JSON object on one line (number, or string without quotes)
function field(line, key,    i, rest) {
    i = index(line, "\"" key "\":")
    if (!i) return ""
    rest = substr(line, i + length(key) + 3)
    sub(/^ */, "", rest)
    if (substr(rest, 1, 1) == "\"") { rest = substr(rest, 2); sub(/".*/, "", rest); return rest }
    sub(/[,}].*/, "", rest)
    return rest
}
function num(v) { return (v == "" || v == "nan" || v == "-nan") ? "null" : v }
BEGIN { part = "env" }
/^@steps$/ { part = "steps"; next }
/^@attention$/ { part = "attention"; next }
/^@train$/ { part = "train"; next }
/^@timeline$/ { part = "timeline"; next }
part == "timeline" { if ($0 ~ /^\{.*\}$/) timeline = $0; next }
part == "env" { i = index($0, "="); if (i) env[++nenv] = str(substr($0, 1, i - 1)) ": " str(substr($0, i + 1)); next }
part == "steps" {
    split($0, f, "\t")
    steps[++nsteps] = "{\"step\": " str(f[1]) ", \"exit\": " f[2] ", \"seconds\": " f[3] ", \"status\": " str(f[4]) "}"
    next
}
part == "attention" {
    # "attention_fwd_wgmma   B=4 T=2048 NH=16 NKV=16 HS=128   0.306 ms   224.6 TFLOP/s ..."
    for (k = 2; k <= NF; k++) if ($k == "TFLOP/s" && $(k - 1) + 0 > best) { best = $(k - 1) + 0; best_op = $1 }
    next
}
part == "train" {
    line = $0; sub(/^[ ,]*/, "", line); sub(/,$/, "", line)
    gsub(/: -?(nan|inf)/, ": null", line)  # printf writes these; JSON has no such numbers
    rows[++nrows] = line
    model = field(line, "model"); att = field(line, "attention"); mfu = field(line, "mfu")
    if ((model == "gpt2-124m" || model == "gpt3-1.3b") && mfu != "" && mfu + 0 > mfu_best[model] + 0) {
        mfu_best[model] = mfu; mfu_att[model] = att
    }
    # the vocabulary A/B: the last row of each (variant, padded or not)
    ms = field(line, "ms_per_iter")
    if (model == "gpt2-124m" && ms + 0 > 0) { if (!(att in padded)) atts[++natts] = att; padded[att] = ms }
    if (model == "gpt2-124m-v50257" && ms + 0 > 0) unpadded[att] = ms
    dev = field(line, "device_peak_bytes")
    mem[nrows] = "{\"model\": " str(model) ", \"attention\": " str(att) ", \"predicted_bytes\": " num(field(line, "peak_predicted_bytes")) \
        ", \"arena_bytes\": " num(field(line, "peak_measured_bytes")) ", \"device_bytes\": " num(dev) "}"
    tim[nrows] = "{\"model\": " str(model) ", \"attention\": " str(att) ", \"measured_ms\": " num(field(line, "ms_per_iter")) \
        ", \"predicted_ms\": " num(field(line, "predicted_ms")) ", \"predicted_ms_op_table\": " num(field(line, "predicted_ms_op_table")) "}"
    next
}
function target(name, value, goal, extra) {
    printf "    %s: {\"measured\": %s, \"target\": %s%s}", str(name), (value == "" ? "null" : value), goal, extra
}
function list(name, a, n,    i) {
    printf "  %s: [", str(name)
    for (i = 1; i <= n; i++) printf "%s\n    %s", (i > 1 ? "," : ""), a[i]
    printf "%s]", (n ? "\n  " : "")
}
END {
    printf "{\n"
    for (i = 1; i <= nenv; i++) printf "  %s,\n", env[i]
    list("steps", steps, nsteps); printf ",\n"
    printf "  \"targets\": {\n"
    target("gpt2_124m_mfu", mfu_best["gpt2-124m"], "0.50", ", \"attention\": " str(mfu_att["gpt2-124m"])); printf ",\n"
    target("gpt3_1.3b_mfu", mfu_best["gpt3-1.3b"], "0.55", ", \"attention\": " str(mfu_att["gpt3-1.3b"])); printf ",\n"
    target("attention_fwd_tflops_T2048_HS128", (best ? best : ""), "350", ", \"kernel\": " str(best_op)); printf "\n  },\n"
    printf "  \"peak_memory_predicted_vs_measured\": {\"tolerance\": 0.01, "; list("cases", mem, nrows); printf "},\n"
    printf "  \"iteration_time_predicted_vs_measured\": {\"tolerance\": 0.10, "; list("cases", tim, nrows); printf "},\n"
    for (i = 1; i <= natts; i++)
        if (atts[i] in unpadded)
            ab[++nab] = "{\"attention\": " str(atts[i]) ", \"padded_50304_ms\": " padded[atts[i]] ", \"unpadded_50257_ms\": " \
                unpadded[atts[i]] ", \"unpadded_over_padded\": " sprintf("%.4f", unpadded[atts[i]] / padded[atts[i]]) "}"
    list("vocab_pad_ab", ab, nab); printf ",\n"
    printf "  \"timeline\": %s,\n", (timeline == "" ? "null" : timeline)
    list("bench_train", rows, nrows); printf "\n}\n"
}'
