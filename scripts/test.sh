#!/bin/sh
# README command 2: set up, build, run the whole test suite, and print
# "N passed, N failed, N skipped" (counted over every TAP test point) as the
# last line. Skipped points verified nothing and are not counted as passed:
# SKIP (could not run here, e.g. the GPU checks without a GPU) and XFAIL (a
# TAP TODO: a known gap, expected to fail until it is closed).
set -u
cd "$(dirname "$0")/.."
sh scripts/build.sh || { echo "build failed"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
# results of an earlier run (a test since removed) must not be counted again
rm -f tests/*.trs tests/*.log test-suite.log
make -j"$(nproc)" check </dev/null
status=$?
for log in tests/*.log; do
    case "$log" in */test-suite.log) continue;; esac
    if grep -q '^not ok' "$log" 2>/dev/null || ! grep -q '^1\.\.' "$log"; then
        echo "---- $log"; tail -n 40 "$log"
    fi
done
# the checking build (scripts/sanitize.sh: ASan + UBSan): the unit tests again and a 4-rank
# training run with a resume; its test points count with the others. MIST_SANITIZE=0 skips it.
san=
san_status=0
if [ "${MIST_SANITIZE:-1}" != 0 ]; then
    san=${TMPDIR:-/tmp}/mist-sanitize
    sh scripts/sanitize.sh "$san" || san_status=1
fi
# the fuzz harnesses of the parsers of user files (make fuzz: clang + libFuzzer, tests/fuzz/): a
# short pass of each (FUZZ_SECONDS, default 5), one test point per harness; without clang one
# skipped point with the reason. MIST_FUZZ=0 skips it.
fuzz_log=
fuzz_status=0
if [ "${MIST_FUZZ:-1}" != 0 ]; then
    fuzz_log=${TMPDIR:-/tmp}/mist-fuzz.log
    make fuzz FUZZ_SECONDS="${FUZZ_SECONDS:-5}" >"$fuzz_log" 2>&1 </dev/null || fuzz_status=1
    grep '^ok \|^not ok\|^fuzz: skipped\|^# ' "$fuzz_log"
    [ "$fuzz_status" -eq 0 ] || { echo "---- $fuzz_log"; tail -n 30 "$fuzz_log"; }
fi
trs="tests/*.trs ${san:+$san/src/tests/*.trs}"
# shellcheck disable=SC2086
passed=$(cat $trs 2>/dev/null | grep -c '^:test-result: PASS')
# shellcheck disable=SC2086
failed=$(cat $trs 2>/dev/null | grep -c '^:test-result: \(FAIL\|XPASS\|ERROR\)')
# shellcheck disable=SC2086
skipped=$(cat $trs 2>/dev/null | grep -c '^:test-result: \(SKIP\|XFAIL\)')
# the sanitized training runs are one more point
if [ -n "$san" ]; then if [ "$san_status" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi; fi
if [ -n "$fuzz_log" ]; then
    fuzz_passed=$(grep -c '^ok ' "$fuzz_log")
    fuzz_failed=$(grep -c '^not ok' "$fuzz_log")
    # a failure before any harness ran (the fuzz build) is one failed point
    if [ "$fuzz_status" -ne 0 ] && [ "$fuzz_failed" -eq 0 ]; then fuzz_failed=1; fi
    passed=$((passed + fuzz_passed)) failed=$((failed + fuzz_failed))
    skipped=$((skipped + $(grep -c '^fuzz: skipped' "$fuzz_log")))
fi
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
status=$((status | san_status | fuzz_status))
echo "$passed passed, $failed failed, $skipped skipped"
[ "$status" -eq 0 ]
