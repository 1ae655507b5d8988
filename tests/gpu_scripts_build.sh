#!/bin/sh
# The GPU scripts (benchmarks/gpu/run.sh and train.sh) build their programs
# with nvcc and gcc directly, from their own lists of sources, on machines
# that have a GPU but may lack MPI: a source file added to the project and
# missing from a list only shows there, at link time. This builds both with
# BUILD_ONLY=1 (compile and link, run nothing), so it fails here instead.
# A copy of that build (files newer than their sources, as after carrying it
# to a GPU machine) is used as it is: device time does not go to compiling.
# Then the runbook's plan (DRY_RUN=1: the steps by value, their limits within
# BUDGET_S), the programs' options, and bench_train --timeline for real on the
# cpu backend (a small GPT), whose trace and summary must be whole.
. "$MIST_SRCDIR/tests/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cuda=${MIST_CUDA_HOME:-/usr/local/cuda}
if [ ! -x "$cuda/bin/nvcc" ]; then
    echo "ok 1 # SKIP no nvcc at $cuda/bin/nvcc (configure --with-cuda=PATH)"
    echo "1..1"
    exit 0
fi
CUDA_HOME="$cuda" BUILD_ONLY=1 sh "$MIST_SRCDIR/benchmarks/gpu/run.sh" "$tmp/out" >"$tmp/log" 2>&1
rc=$?
missing=""
# nccl_check (the NCCL backend on NCCL itself, one rank) where NCCL's header is
progs="test_cuda_kernels bench_kernels bench_train"
rebuilt_lines=2
if [ -f "$cuda/include/nccl.h" ]; then progs="$progs nccl_check"; rebuilt_lines=3; fi
for prog in $progs; do
    [ -x "$tmp/out/$prog" ] || missing="$missing $prog"
done
[ $rc -eq 0 ] && [ -z "$missing" ]
tap_ok $? "benchmarks/gpu/run.sh BUILD_ONLY=1 builds $progs (rc $rc)"
[ $rc -eq 0 ] && [ -z "$missing" ] || tap_diag "missing:$missing" "$(tail -20 "$tmp/log")"

# the copy: every file newer than the sources, yet the hash of the sources decides
cp -r "$tmp/out" "$tmp/copy"
CUDA_HOME="$cuda" BUILD_ONLY=1 sh "$MIST_SRCDIR/benchmarks/gpu/run.sh" "$tmp/copy" >"$tmp/log2" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q 'not rebuilt' "$tmp/log2" && [ "$(grep -c 'not rebuilt' "$tmp/log2")" -eq "$rebuilt_lines" ] &&
    cmp -s "$tmp/out/bench_train" "$tmp/copy/bench_train" && cmp -s "$tmp/out/test_cuda_kernels" "$tmp/copy/test_cuda_kernels"
tap_ok $? "a copy of the build is used as it is: run.sh and train.sh say 'not rebuilt' ($rebuilt_lines times), the programs are unchanged (rc $rc)"
[ $rc -eq 0 ] || tap_diag "$(tail -20 "$tmp/log2")"

# the hash follows the sources' contents, not their times
mkdir -p "$tmp/top/kernels"
echo 'int a;' >"$tmp/top/kernels/a.c"
h1=$(top="$tmp/top" arch=sm_90a; . "$MIST_SRCDIR/benchmarks/gpu/fresh.sh"; sources_hash)
touch -d '2001-01-01' "$tmp/top/kernels/a.c"
h2=$(top="$tmp/top" arch=sm_90a; . "$MIST_SRCDIR/benchmarks/gpu/fresh.sh"; sources_hash)
echo 'int b;' >"$tmp/top/kernels/a.c"
h3=$(top="$tmp/top" arch=sm_90a; . "$MIST_SRCDIR/benchmarks/gpu/fresh.sh"; sources_hash)
h4=$(top="$tmp/top" arch=sm_90; . "$MIST_SRCDIR/benchmarks/gpu/fresh.sh"; sources_hash)
[ -n "$h1" ] && [ "$h1" = "$h2" ] && [ "$h2" != "$h3" ] && [ "$h3" != "$h4" ]
tap_ok $? "the sources' hash: the same after touch, another after an edit or for another CUDA_ARCH"
# the runbook's step list: every step named, in the order of value, with its limit, and the
# limits add up to no more than the budget (a step past it would only get what is left)
DRY_RUN=1 CUDA_HOME="$cuda" sh "$MIST_SRCDIR/benchmarks/gpu/run.sh" "$tmp/copy" >"$tmp/dry" 2>&1
rc=$?
list=$(grep -E '^[a-z0-9]+ +[0-9]+ s ' "$tmp/dry" | grep -v '^total ' | awk '{print $1}' | tr '\n' ' ')
[ $rc -eq 0 ] && [ "$list" = "env kernels gpt2 gpt3 vocab attention nccl timeline sanitizer tracking ranks nsys " ]
tap_ok $? "DRY_RUN=1 lists the steps by value: $list(rc $rc)"
sum=$(grep -E '^[a-z0-9]+ +[0-9]+ s ' "$tmp/dry" | grep -v '^total ' | awk '{ s += $2 } END { print s + 0 }')
total=$(sed -n 's/^total *\([0-9]*\) s  of BUDGET_S \([0-9]*\)$/\1 \2/p' "$tmp/dry")
num_ok 's <= 420 && s == t && b == 420' s="$sum" t="${total% *}" b="${total#* }"
tap_ok $? "DRY_RUN=1: the steps' limits add up to $sum s, within BUDGET_S (the total line: $total)"
[ -n "$total" ] || tap_diag "$(cat "$tmp/dry")"
BUDGET_S=300 DRY_RUN=1 CUDA_HOME="$cuda" sh "$MIST_SRCDIR/benchmarks/gpu/run.sh" "$tmp/copy" >"$tmp/dry2" 2>&1
grep -q "add up to $sum s, over BUDGET_S=300" "$tmp/dry2"
tap_ok $? "DRY_RUN=1 with BUDGET_S=300 says the limits ($sum s) are over it"
# the steps' commands run what they are for, with options the programs take (below)
grep -q -- "--only gpt2-124m-v50257" "$tmp/dry" && grep -q -- "--timeline '$tmp/copy/timeline.json'" "$tmp/dry" &&
    grep -q -- "--only attention" "$tmp/dry" && grep -q "test_cuda_kernels' 'attention cudnn B=1' lean embedding" "$tmp/dry" &&
    grep -q -- "--only tracking --attention base,wgmma" "$tmp/dry"
tap_ok $? "the vocab, timeline, attention, sanitizer and tracking steps run what they are for"

# bench_train's options: a GPU run where there is one, "SKIP no GPU" here; bad values are refused first
bt=$tmp/out/bench_train
"$bt" --only gpt2-124m-v50257 --no-op-table --quick --timeline "$tmp/t.json" >"$tmp/bt1" 2>&1
rc=$?
[ $rc -eq 0 ] && { grep -q '^SKIP no GPU' "$tmp/bt1" || grep -q '^gpt2-124m-v50257 ' "$tmp/bt1"; }
tap_ok $? "bench_train --only gpt2-124m-v50257 --no-op-table --quick --timeline: runs or says SKIP no GPU (rc $rc)"
[ $rc -eq 0 ] || tap_diag "$(tail -5 "$tmp/bt1")"
bad=0
for args in "--only gpt2-125m" "--only tracking --timeline $tmp/t.json" "--cpu" "--cpu --only tracking,tiny" "--attention fast"; do
    # shellcheck disable=SC2086
    "$bt" $args >"$tmp/bt2" 2>&1
    rc=$?
    { [ $rc -eq 2 ] && grep -q 'hint:\|allowed:' "$tmp/bt2"; } || { bad=1; tap_diag "bench_train $args: rc $rc: $(cat "$tmp/bt2")"; }
done
"$tmp/out/bench_kernels" --only attention,gemm >"$tmp/bk" 2>&1
rc=$?
{ [ $rc -eq 2 ] && grep -q "'gemm' is not a group (allowed: attention, matmul, memory" "$tmp/bk"; } ||
    { bad=1; tap_diag "bench_kernels: rc $rc: $(cat "$tmp/bk")"; }
[ $bad -eq 0 ]
tap_ok $? "bench_train and bench_kernels refuse a bad --only or --attention, --timeline without a case, --cpu without --only tiny, naming what is allowed"

# --timeline for real on the cpu backend (a small GPT): the Chrome trace with the runtime's
# marks, the summary and its JSON line, the case's time split, and last_json.sh's view of it
OMP_NUM_THREADS=2 "$bt" --cpu --only tiny --quick --no-op-table --timeline "$tmp/tl.json" --json "$tmp/tiny.json" >"$tmp/tl.log" 2>&1
rc=$?
if command -v python3 >/dev/null 2>&1; then
    python3 - "$tmp/tl.json" "$tmp/tl.log" "$tmp/tiny.json" <<'EOF' >"$tmp/tlcheck" 2>&1
import json, sys
trace = json.load(open(sys.argv[1]))
names = [e["name"] for e in trace["traceEvents"] if e["ph"] == "X"]
for n in ["forward", "backward", "grad norm", "pre forward", "block 0 forward", "block 1 forward", "post forward",
          "post backward", "block 1 backward", "block 0 backward", "pre backward"]:
    assert n in names, (n, names)
assert trace["otherData"]["backend"] == "cpu"
line = [l for l in open(sys.argv[2]) if l.startswith("timeline_json ")]
assert len(line) == 1, line
s = json.loads(line[0][len("timeline_json "):])
ph = {p["phase"]: p for p in s["phases"]}
assert ph["block forward"]["count"] == 2 and ph["block backward"]["count"] == 2, ph
# the phases lie within the step; the norm's read-back and the final wait are host synchronisations
assert 0 < s["regions_gpu_ms"] <= s["step_gpu_ms"] * 1.001 and s["host_syncs"] >= 2, s
assert abs(s["step_gpu_ms"] - s["regions_gpu_ms"] - s["launch_gaps_ms"]) < 1e-3, s
assert abs(sum(p["gpu_ms"] for p in s["phases"]) - s["regions_gpu_ms"]) < 1e-2, s
# each synchronisation placed in the step: the norm's read-back in grad norm, the final wait at the end
assert len(s["syncs"]) == s["host_syncs"] and "stream_synchronize in grad norm" in s["syncs"], s["syncs"]
assert s["syncs"][-1] == "event_synchronize at the end", s["syncs"]
assert any(l.startswith("    time (s): plan ") and "weight init" in l and "op table (off)" in l for l in open(sys.argv[2]))
r = json.load(open(sys.argv[3]))["results"][0]
assert r["model"] == "tiny" and r["op_table_s"] == 0 and r["case_s"] >= r["timed_s"] > 0 and r["vocab_rows"] == 256, r
print("ok")
EOF
    [ $rc -eq 0 ] && grep -qx ok "$tmp/tlcheck"
    tap_ok $? "bench_train --cpu --only tiny --timeline: the trace has every pass, block and pre / post part; the summary's phases add up (rc $rc)"
    grep -qx ok "$tmp/tlcheck" || tap_diag "$(cat "$tmp/tlcheck")" "$(tail -20 "$tmp/tl.log")"
    mkdir -p "$tmp/lj"
    cp "$tmp/tl.log" "$tmp/lj/timeline.log"
    sh "$MIST_SRCDIR/benchmarks/gpu/last_json.sh" "$tmp/lj" >"$tmp/lj.json" 2>&1
    python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["timeline"]["model"] == "tiny" and d["timeline"]["host_syncs"] >= 2' \
        "$tmp/lj.json" 2>"$tmp/ljerr"
    tap_ok $? "last_json.sh carries that timeline summary"
    [ -s "$tmp/ljerr" ] && tap_diag "$(cat "$tmp/ljerr")"
else
    tap_skip "no python3 to parse the timeline's JSON"
    tap_skip "no python3 to parse last_json.sh's output"
fi
tap_end
