#!/bin/sh
# benchmarks/gpu/last_json.sh (the GPU runbook's summary) on a made-up OUTDIR
# as the runbook's steps leave it: two gpt2 rows (cudnn, wgmma), the unpadded
# vocabulary's row for cudnn only, a GPT-3 JSON cut short by its timeout, the
# attention rows and the timeline step's log. The summary must parse, set the
# vocabulary A/B (both ms and their ratio) for the variant that has both rows
# only, carry the timeline's summary as it is, and still parse when those
# steps left nothing.
. "$MIST_SRCDIR/tests/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! command -v python3 >/dev/null 2>&1; then
    tap_skip "no python3 to parse the JSON"
    tap_end
    exit 0
fi
o=$tmp/out
mkdir -p "$o"
printf 'device=NVIDIA H200\ndriver=580.159.04\narch=sm_90a\n' >"$o/env.txt"
printf 'env\t0\t1\tok\ngpt2\t0\t52\tok\ngpt3\t124\t80\tcut at 80 s\nvocab\t0\t21\tok\n' >"$o/steps.tsv"
cat >"$o/attention.log" <<'EOF'
op                           shape                                      time          achieved vs peak
attention_fwd                B=4 T=2048 NH=16 NKV=16 HS=128         1.200 ms      57.3 TFLOP/s    5.8% of peak
attention_fwd_wgmma          B=4 T=2048 NH=16 NKV=16 HS=128         0.307 ms     223.9 TFLOP/s   22.6% of peak
attention_fwd_cudnn          B=4 T=2048 NH=16 NKV=16 HS=128         0.140 ms     491.3 TFLOP/s   49.7% of peak
attention_fwd_cudnn          B=2 T=4096 NH=32 NKV=8 HS=128          0.460 ms     598.4 TFLOP/s   60.5% of peak
EOF
row() {  # row ATTENTION MODEL ROWS MS MFU
    printf '  {"attention": "%s", "model": "%s", "B": 16, "seq": 1024, "vocab_rows": %s, "ms_per_iter": %s, "tokens_per_s": 1.0, "tflops": 1.0, "mfu": %s, "peak_measured_bytes": 100, "peak_predicted_bytes": 100, "device_peak_bytes": 101, "predicted_ms": 34.8696, "predicted_ms_op_table": nan, "plan_s": 0.010, "init_s": 5.200, "op_table_s": 0.000, "warmup_s": 0.300, "timed_s": 0.700, "case_s": 6.500}' "$@"
}
{ echo '{"device": "cuda:0", "results": ['; row cudnn gpt2-124m 50304 31.1296 0.4547; echo ,
  row wgmma gpt2-124m 50304 34.1397 0.4146; printf '\n]}\n'; } >"$o/train_gpt2.json"
{ echo '{"device": "cuda:0", "results": ['; row cudnn gpt2-124m-v50257 50257 32.8712 0.4300; printf '\n]}\n'; } >"$o/train_vocab.json"
echo '{"device": "cuda:0", "results": [' >"$o/train_gpt3.json"  # cut before its first case
tl='{"model": "gpt2-124m", "attention": "cudnn", "trace": "/x/timeline.json", "step_gpu_ms": 31.5000, "regions_gpu_ms": 29.2500, "launch_gaps_ms": 2.2500, "host_issue_ms": 12.1000, "host_syncs": 2, "phases": [{"phase": "block forward", "count": 12, "gpu_ms": 8.0000, "host_issue_ms": 3.0000}]}'
printf '== timeline gpt2-124m (attention cudnn): one step\n    step 31.500 ms on the GPU\ntimeline_json %s\n' "$tl" >"$o/timeline.log"

sh "$MIST_SRCDIR/benchmarks/gpu/last_json.sh" "$o" >"$tmp/last.json" 2>"$tmp/err"
rc=$?
python3 -m json.tool "$tmp/last.json" >/dev/null 2>"$tmp/perr"
tap_ok $(( rc | $? )) "last_json.sh on a full OUTDIR writes JSON that parses (rc $rc)"
[ -s "$tmp/perr" ] && tap_diag "$(cat "$tmp/perr" "$tmp/err")" "$(head -c 3000 "$tmp/last.json")"

# the expected A/B from the rows above, computed here
want_ratio=$(awk 'BEGIN { printf "%.4f", 32.8712 / 31.1296 }')
python3 - "$tmp/last.json" "$want_ratio" <<'EOF' >"$tmp/ab" 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
ab = d["vocab_pad_ab"]
assert len(ab) == 1, ab  # wgmma has no unpadded row
a = ab[0]
assert a["attention"] == "cudnn", a
assert a["padded_50304_ms"] == 31.1296 and a["unpadded_50257_ms"] == 32.8712, a
assert abs(a["unpadded_over_padded"] - float(sys.argv[2])) < 1e-4, a
print("ok")
EOF
grep -qx ok "$tmp/ab"
tap_ok $? "vocab_pad_ab: the cudnn variant's padded and unpadded ms/iter and their ratio ($want_ratio); none for wgmma"
grep -qx ok "$tmp/ab" || tap_diag "$(cat "$tmp/ab")"

python3 - "$tmp/last.json" "$tl" <<'EOF' >"$tmp/tl" 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
assert d["timeline"] == json.loads(sys.argv[2]), d["timeline"]
t = d["targets"]
assert t["gpt2_124m_mfu"]["measured"] == 0.4547 and t["gpt2_124m_mfu"]["attention"] == "cudnn", t
assert t["attention_fwd_tflops_T2048_HS128"]["measured"] == 491.3, t  # not the T=4096 row
assert [s["step"] for s in d["steps"]] == ["env", "gpt2", "gpt3", "vocab"], d["steps"]
assert len(d["bench_train"]) == 3 and d["bench_train"][0]["init_s"] == 5.2, d["bench_train"]
assert d["bench_train"][0]["predicted_ms_op_table"] is None
print("ok")
EOF
grep -qx ok "$tmp/tl"
tap_ok $? "the timeline's summary as bench_train printed it; targets, steps and the cases' time split as before"
grep -qx ok "$tmp/tl" || tap_diag "$(cat "$tmp/tl")"

# the steps that feed the A/B and the timeline did not run
rm -f "$o/train_vocab.json" "$o/timeline.log"
sh "$MIST_SRCDIR/benchmarks/gpu/last_json.sh" "$o" >"$tmp/last2.json" 2>&1
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["vocab_pad_ab"] == [] and d["timeline"] is None' \
    "$tmp/last2.json" 2>"$tmp/perr2"
tap_ok $? "without the vocab and timeline steps' files: vocab_pad_ab [] and timeline null, and it parses"
[ -s "$tmp/perr2" ] && tap_diag "$(cat "$tmp/perr2")" "$(head -c 2000 "$tmp/last2.json")"
tap_end
