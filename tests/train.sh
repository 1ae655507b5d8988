#!/bin/sh
# mist-train end to end on the CPU backend: the loss falls, every split of the
# same global batch (dp = 1, dp = 2, G = 2, checkpointed blocks) gives the same
# losses, resume is bit-exact, and the predicted memory peak is the measured one.
#
# Tolerance for dp / G splits: the per-token losses are summed in global sample
# order, so the first iteration's loss is bit-identical; later iterations differ
# only through the fp32 summation order of gradients (dp all-reduce, G
# accumulation), which stays below 1e-5 relative over a few steps.
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
TRAIN="$MIST_BUILDDIR/mist-train"
INI="$MIST_SRCDIR/examples/tiny.ini"
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-train-test.XXXXXX")
trap 'rm -rf "$W"' EXIT
# a short run of the tiny GPT with global batch 8 (b * dp * G)
SHORT="-o train.steps=8 -o train.global_batch=8 -o log.interval=1000 -o data.val_interval=0"

run() {  # run NP NAME ARGS...: log JSONL to $W/NAME.jsonl, summary to $W/NAME.json
    np=$1; name=$2; shift 2
    mist_mpirun -np "$np" "$TRAIN" "$INI" -o log.jsonl="$W/$name.jsonl" -o log.summary="$W/$name.json" "$@" \
        >"$W/$name.out" 2>&1
    rc=$?
    [ $rc -eq 0 ] || { tap_diag "$name exited $rc:"; tail -5 "$W/$name.out" | sed 's/^/#   /'; }
    return $rc
}
losses() { grep -o '"loss": [^,]*' "$1" | sed 's/"loss": //'; }
# same_losses A B TOL: same count of lines and |a-b| <= TOL*|a| line by line, every loss a number
same_losses() {
    losses "$1" >"$W/la"; losses "$2" >"$W/lb"
    [ -s "$W/la" ] && paste "$W/la" "$W/lb" | awk -v tol="$3" -v num_re="$num_re" '
        { n++; d = $1 - $2; if (d < 0) d = -d; a = $1 < 0 ? -$1 : $1
          if ($1 !~ num_re || $2 !~ num_re || d > tol * a) bad++ }
        END { exit (n == 0 || bad > 0) }'
}
peaks_agree() {  # every rank's predicted device/host peak equals the measured one
    python3 - "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
ok = all(r["predicted_device_peak_bytes"] == r["measured_device_peak_bytes"] and
         r["predicted_host_peak_bytes"] == r["measured_host_peak_bytes"] for r in d["ranks"])
sys.exit(0 if ok and d["ranks"] else 1)
EOF
}
device_peak() { grep -o '"measured_device_peak_bytes": [0-9]*' "$1" | head -1 | sed 's/.*: //'; }

# 1. one rank, 40 steps: the loss falls from ~ln(256) = 5.55 to below 3.5
run 1 learn -o train.steps=40 -o train.global_batch=8 -o log.interval=1000 -o stage.0.dp=1 -o stage.0.b=8 \
    -o data.val_interval=20
tap_ok $? "1-rank run completes"
first=$(losses "$W/learn.jsonl" | head -1); last=$(losses "$W/learn.jsonl" | tail -1)
tap_diag "1 rank, 40 steps: loss $first -> $last"
num_ok 'a > 5.0 && b < 3.5' a="$first" b="$last"
tap_ok $? "loss falls below 3.5 (first $first, last $last)"
grep -q '"val_loss"' "$W/learn.jsonl"
tap_ok $? "validation loss is logged"
peaks_agree "$W/learn.json"
tap_ok $? "predicted peak == measured peak (device and host) in the summary"

# 2. the same global batch split three ways
run 1 dp1 $SHORT -o stage.0.dp=1 -o stage.0.b=8
tap_ok $? "dp=1 b=8 runs"
run 2 dp2 $SHORT -o stage.0.dp=2 -o stage.0.b=4
tap_ok $? "dp=2 b=4 runs under mpirun -np 2"
run 1 g2 $SHORT -o stage.0.dp=1 -o stage.0.b=4 -o plan.G=2
tap_ok $? "dp=1 b=4 G=2 runs"
run 4 dp4 $SHORT -o stage.0.dp=4 -o stage.0.b=2
tap_ok $? "dp=4 b=2 runs under mpirun -np 4"
[ "$(losses "$W/dp1.jsonl" | head -1)" = "$(losses "$W/dp2.jsonl" | head -1)" ] &&
    [ "$(losses "$W/dp1.jsonl" | head -1)" = "$(losses "$W/g2.jsonl" | head -1)" ] &&
    [ "$(losses "$W/dp1.jsonl" | head -1)" = "$(losses "$W/dp4.jsonl" | head -1)" ]
tap_ok $? "first-iteration loss is bit-identical for dp=1, dp=2, dp=4, G=2"
same_losses "$W/dp1.jsonl" "$W/dp2.jsonl" 1e-5
tap_ok $? "dp=1 and dp=2 losses agree to 1e-5 relative"
same_losses "$W/dp1.jsonl" "$W/g2.jsonl" 1e-5
tap_ok $? "dp=1 and G=2 losses agree to 1e-5 relative"
same_losses "$W/dp1.jsonl" "$W/dp4.jsonl" 1e-5
tap_ok $? "dp=1 and dp=4 losses agree to 1e-5 relative"
peaks_agree "$W/dp2.json"
tap_ok $? "predicted peak == measured peak on both ranks of dp=2"

# 3. activation checkpointing: same losses bit for bit, lower measured peak
run 1 ck $SHORT -o stage.0.dp=1 -o stage.0.b=8 -o stage.0.ckpt=2
tap_ok $? "ckpt=2 runs"
[ "$(losses "$W/dp1.jsonl")" = "$(losses "$W/ck.jsonl")" ]
tap_ok $? "ckpt=2 gives bit-identical losses"
p0=$(device_peak "$W/dp1.json"); p1=$(device_peak "$W/ck.json")
tap_diag "measured device peak: ckpt=0 $p0 B, ckpt=2 $p1 B"
[ -n "$p0" ] && [ -n "$p1" ] && [ "$p1" -lt "$p0" ]
tap_ok $? "ckpt=2 lowers the measured peak"
peaks_agree "$W/ck.json"
tap_ok $? "predicted peak == measured peak with ckpt=2"
# selective recompute: the attention forward again from the kept qkv, the same kernel on the same
# input, so bit-identical losses too; alone and beside a checkpointed block
run 1 sel $SHORT -o stage.0.dp=1 -o stage.0.b=8 -o stage.0.recompute=selective &&
    run 1 sel_ck $SHORT -o stage.0.dp=1 -o stage.0.b=8 -o stage.0.recompute=selective -o stage.0.ckpt=1 &&
    [ "$(losses "$W/dp1.jsonl")" = "$(losses "$W/sel.jsonl")" ] && [ "$(losses "$W/dp1.jsonl")" = "$(losses "$W/sel_ck.jsonl")" ]
tap_ok $? "recompute=selective (ckpt 0 and 1) gives bit-identical losses"
p2=$(device_peak "$W/sel.json")
tap_diag "measured device peak: none $p0 B, selective $p2 B"
[ -n "$p2" ] && [ "$p2" -lt "$p0" ] && peaks_agree "$W/sel.json" && peaks_agree "$W/sel_ck.json"
tap_ok $? "recompute=selective lowers the measured peak; predicted == measured (ckpt 0 and 1)"

# 4. resume: 8 steps straight vs 4 steps + resume (same schedule: steps = 8 both times)
run 1 full $SHORT -o stage.0.dp=1 -o stage.0.b=8 -o checkpoint.dir="$W/ck_full" -o checkpoint.interval=4 \
    -o checkpoint.keep=10
tap_ok $? "run with checkpoints every 4 steps"
mkdir -p "$W/ck_half" && cp "$W/ck_full/step_00000004.ckpt" "$W/ck_half/" &&
    echo step_00000004.ckpt >"$W/ck_half/latest" && head -4 "$W/full.jsonl" >"$W/half.jsonl"
run 1 half $SHORT -o stage.0.dp=1 -o stage.0.b=8 -o checkpoint.dir="$W/ck_half" -o checkpoint.interval=4 \
    -o checkpoint.keep=10 -o checkpoint.resume=1
tap_ok $? "resume from the step-4 checkpoint"
grep -q "resumed from" "$W/half.out"
tap_ok $? "the run says it resumed"
[ "$(losses "$W/full.jsonl")" = "$(losses "$W/half.jsonl")" ] && [ "$(losses "$W/half.jsonl" | wc -l)" -eq 8 ]
tap_ok $? "resumed losses are bit-identical to the straight run (8 lines)"
cmp -s "$W/ck_full/step_00000008.ckpt" "$W/ck_half/step_00000008.ckpt"
tap_ok $? "final checkpoints are byte-identical (weights, Adam state)"

# 5. Llama family (rmsnorm, rotary, swiglu, untied head) trains too
LLAMA="$MIST_SRCDIR/examples/tiny-llama.ini"
mist_mpirun -np 1 "$TRAIN" "$LLAMA" -o train.steps=20 -o train.global_batch=8 -o stage.0.dp=1 -o stage.0.b=8 \
    -o plan.G=1 -o log.interval=1000 -o data.val_interval=0 -o log.jsonl="$W/llama.jsonl" \
    -o log.summary="$W/llama.json" >"$W/llama.out" 2>&1
tap_ok $? "tiny Llama runs"
first=$(losses "$W/llama.jsonl" | head -1); last=$(losses "$W/llama.jsonl" | tail -1)
tap_diag "llama, 20 steps: loss $first -> $last"
num_ok 'a > 0 && b < a - 0.5' a="$first" b="$last"
tap_ok $? "llama loss falls by more than 0.5"
peaks_agree "$W/llama.json"
tap_ok $? "llama: predicted peak == measured peak"
mist_mpirun -np 1 "$TRAIN" "$LLAMA" -o train.steps=20 -o train.global_batch=8 -o stage.0.dp=1 -o stage.0.b=8 \
    -o plan.G=1 -o stage.0.ckpt=1 -o log.interval=1000 -o data.val_interval=0 -o log.jsonl="$W/llama_ck.jsonl" \
    >"$W/llama_ck.out" 2>&1 && [ "$(losses "$W/llama.jsonl")" = "$(losses "$W/llama_ck.jsonl")" ]
tap_ok $? "llama with ckpt=1 gives bit-identical losses"
mist_mpirun -np 1 "$TRAIN" "$LLAMA" -o train.steps=20 -o train.global_batch=8 -o stage.0.dp=1 -o stage.0.b=8 \
    -o plan.G=1 -o stage.0.recompute=selective -o log.interval=1000 -o data.val_interval=0 \
    -o log.jsonl="$W/llama_sel.jsonl" >"$W/llama_sel.out" 2>&1 &&
    [ "$(losses "$W/llama.jsonl")" = "$(losses "$W/llama_sel.jsonl")" ]
tap_ok $? "llama with recompute=selective (rotary, GQA attention recomputed) gives bit-identical losses"

# 6. non-finite steps are skipped, then the run stops
export MIST_FAULT_NAN_FROM=3
run 1 nan $SHORT -o stage.0.dp=1 -o stage.0.b=8 -o train.max_nonfinite=2 \
    -o log.interval=1
rc=$?
unset MIST_FAULT_NAN_FROM
[ $rc -eq 1 ] && grep -q "not finite" "$W/nan.out"
tap_ok $? "NaN loss: steps skipped with a warning, exit 1 after max_nonfinite consecutive (rc $rc)"
grep -q "skipped: 1" "$W/nan.out" && ! grep -q "iteration        4/" "$W/nan.out"
tap_ok $? "the first non-finite step is logged as skipped and no step runs after the abort"

# 6b. a NaN in the gradients (the loss stays finite): that step is skipped and counted, training goes on
export MIST_FAULT_NAN_GRAD=3
run 2 nangrad $SHORT -o stage.0.dp=2 -o stage.0.b=4 -o train.steps=6 -o log.interval=1 -o log.jsonl="$W/nangrad.jsonl"
rc=$?
unset MIST_FAULT_NAN_GRAD
last=$(tail -n 1 "$W/nangrad.jsonl" 2>/dev/null)
[ $rc -eq 0 ] && grep -q "iteration 3: loss [0-9.]*, grad norm nan not finite; step skipped (1 in a row" "$W/nangrad.out" &&
    printf '%s' "$last" | grep -q '"iteration": 6,.*"skipped": 1, "nonfinite": 1' &&
    printf '%s' "$last" | grep -q '"loss": [0-9]' && printf '%s' "$last" | grep -q '"grad_norm": [0-9]'
tap_ok $? "a NaN gradient at step 3 (finite loss): the step is skipped and counted, steps 4-6 train with finite losses (rc $rc)"

# 7. a plan that the profile says does not fit: a warning naming the stage and the bytes, and
#    the run goes on (the machine may have more than the profile says: the allocations decide)
run 1 misfit -o train.steps=1 -o train.global_batch=8 -o stage.0.dp=1 -o stage.0.b=8 \
    -o cluster.device_memory=1MiB -o data.val_interval=0
rc=$?
[ $rc -eq 0 ] &&
    grep -q 'warning: the plan does not fit hardware profile cpu: stage 0 needs [0-9]* device bytes per rank, the profile has 1048576' "$W/misfit.out"
tap_ok $? "a plan over the profile's device memory: a warning with the bytes, and the run completes (rc $rc)"

# 8. the run's time per iteration against the planner's: the median of the iterations but the
#    first, printed and in the summary, equal to the JSONL's ms_per_iter median (6 digits there)
run 2 timing $SHORT -o stage.0.dp=2 -o stage.0.b=4
rc=$?
python3 - "$W/timing.json" "$W/timing.jsonl" "$W/timing.out" <<'EOF'
import json, re, sys
t = json.load(open(sys.argv[1]))["timing"]
ms = sorted(json.loads(l)["ms_per_iter"] for l in open(sys.argv[2]).read().splitlines()[1:])
n = len(ms)
med = ms[n // 2] if n % 2 else 0.5 * (ms[n // 2 - 1] + ms[n // 2])
m = re.search(r"measured iteration: median ([0-9.e+-]+) ms over (\d+) iterations.*predicted ([0-9.e+-]+) ms.*"
              r"measured / predicted = ([0-9.e+-]+)", open(sys.argv[3]).read())
ok = (t["iterations_timed"] == 7 == n and abs(1e3 * t["measured_median_iteration_seconds"] - med) <= 2e-5 * med
      and t["predicted_iteration_seconds"] > 0
      and abs(t["measured_over_predicted"] - t["measured_median_iteration_seconds"] / t["predicted_iteration_seconds"]) < 1e-9
      and m is not None and int(m.group(2)) == 7
      and abs(float(m.group(1)) - 1e3 * t["measured_median_iteration_seconds"]) <= 1e-3 * med)
# rank 0's breakdown: its parts add up to the timed iterations' mean; one stage waits for no other
parts = t["mean_seconds"]
mean = sum(ms) / n
ok = ok and min(parts.values()) >= -1e-9 and parts["forward_backward"] > 0 and \
     abs(1e3 * sum(parts.values()) - mean) <= 2e-3 * mean and parts["pipeline_wait"] < 0.01 * mean / 1e3
print("# parts (ms): %s, mean of the iterations %.4g ms" % ({k: round(1e3 * v, 4) for k, v in parts.items()}, mean))
print("# median %.4g ms of %d, predicted %.4g ms" % (med, n, 1e3 * t["predicted_iteration_seconds"]))
sys.exit(0 if ok else 1)
EOF
tap_ok $? "the measured median iteration (7 of 8: the first left out) against the predicted one, printed and in the summary, with rank 0's breakdown adding up (rc $rc)"
# two stages: rank 0 (stage 0) waits for stage 1's gradients every micro-batch
run 2 timing-pp $SHORT -o plan.stages=2 -o plan.G=4 -o stage.0.layers=1 -o stage.0.dp=1 -o stage.0.b=2 \
    -o stage.1.layers=1 -o stage.1.dp=1 -o stage.1.b=2
rc=$?
wait_ms=$(python3 -c 'import json, sys; print(1e3 * json.load(open(sys.argv[1]))["timing"]["mean_seconds"]["pipeline_wait"])' \
    "$W/timing-pp.json" 2>/dev/null)
[ $rc -eq 0 ] && num_ok 'w > 0' w="${wait_ms:-0}" &&
    grep -q '^mist: time per iteration on rank 0 (mean of those): forward and backward' "$W/timing-pp.out"
tap_ok $? "two stages: rank 0's waits for the other stage are counted (${wait_ms:-?} ms per iteration) (rc $rc)"
tap_end
