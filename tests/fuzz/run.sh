#!/bin/sh
# Runs the fuzz harnesses that tests/fuzz/build.sh built in OUT, one after the
# other, and prints one TAP point per harness with its executions, speed and
# coverage; fails when a harness crashes (any ASan or UBSan report, a leak, an
# abort of a harness's own check), times out on one input, or runs out of memory.
#   sh tests/fuzz/run.sh OUT [NAME...]     (default: every harness in OUT)
# FUZZ_SECONDS (default 10): how long each runs; FUZZ_RUNS=N: a fixed number of
# executions instead. FUZZ_TIMEOUT (default 10): seconds one input may take.
# The corpus grows in OUT/corpus/NAME (seeds from OUT/seeds/NAME, the words of
# the format from OUT/NAME.dict when there is one); what crashed
# is kept in OUT/crashes/ (replay: OUT/fuzz_NAME FILE; keep it as a regression
# in tests/fuzz/regressions/NAME/).
set -u
out=${1:?usage: run.sh OUT [NAME...]}
shift
names=$*
if [ -z "$names" ]; then
    for f in "$out"/fuzz_*; do [ -x "$f" ] && names="$names ${f##*/fuzz_}"; done
fi
[ -n "$names" ] || { echo "run.sh: no harness in $out (run tests/fuzz/build.sh first)"; exit 1; }
if [ -n "${FUZZ_RUNS:-}" ]; then bound="-runs=$FUZZ_RUNS"; else bound="-max_total_time=${FUZZ_SECONDS:-10}"; fi
mkdir -p "$out/crashes" "$out/logs"
set -- $names
echo "1..$#"
n=0 status=0
for h in $names; do
    n=$((n + 1))
    mkdir -p "$out/corpus/$h" "$out/seeds/$h"
    log="$out/logs/$h.log"
    start=$(date +%s)
    # -timeout: one input running longer is a hang; -rss_limit_mb: memory a parser may take
    dict=
    [ -f "$out/$h.dict" ] && dict="-dict=$out/$h.dict"
    # shellcheck disable=SC2086
    "$out/fuzz_$h" "$bound" $dict -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$out/crashes/$h-" "$out/corpus/$h" "$out/seeds/$h" >"$log" 2>&1 </dev/null
    rc=$?
    secs=$(($(date +%s) - start))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1)
    corp=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" | tail -1)
    if [ "$rc" -eq 0 ] && ! grep -q 'ERROR: \|runtime error:\|ALARM\|out-of-memory' "$log"; then
        echo "ok $n - fuzz_$h: ${execs:-?} executions in ${secs}s (${speed:-?} exec/s), $cov, $corp, 0 crashes"
    else
        status=1
        echo "not ok $n - fuzz_$h: exit $rc after ${execs:-?} executions; log $log"
        grep -m1 -A20 'ERROR: \|runtime error:\|ALARM\|out-of-memory' "$log" | sed 's/^/# /'
        ls "$out/crashes/$h-"* 2>/dev/null | sed 's/^/# kept: /'
    fi
done
exit $status
