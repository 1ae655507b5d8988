#!/bin/sh
# benchmarks/bench_validate (a smoke test, not a target check): it prices every
# row of benchmarks/validate/rows.ini, writes well-formed JSON with one entry per
# row in the manifest's order, a summary consistent with the rows, and prints
# PASS or MISS; a manifest that is not what it allows exits 2 naming file:line,
# the row, the key and what is allowed.
. "$MIST_SRCDIR/tests/lib.sh"
BENCH="$MIST_BUILDDIR/benchmarks/bench_validate"
ROWS="$MIST_SRCDIR/benchmarks/validate/rows.ini"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$BENCH" --rows "$ROWS" --json "$tmp/v.json" >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] || tap_diag "rc $rc" "$(cat "$tmp/err")"
tap_ok $rc "bench_validate prices every row (rc $rc)"
grep -Eq '^mean \|error\| .*: (PASS|MISS)$' "$tmp/out"
tap_ok $? "the table ends with the summary line and PASS or MISS"

# well-formed JSON: jq, else python3; neither here: say so
if command -v jq >/dev/null 2>&1; then
    jq -e . "$tmp/v.json" >/dev/null 2>"$tmp/jqerr"; rc=$?
    [ $rc -eq 0 ] || tap_diag "$(cat "$tmp/jqerr")"
    tap_ok $rc "the JSON parses (jq)"
    json=jq
elif command -v python3 >/dev/null 2>&1; then
    python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$tmp/v.json"
    tap_ok $? "the JSON parses (python3)"
    json=python3
else
    tap_skip "neither jq nor python3 is installed to parse the JSON"
    json=
fi

# every row of the manifest, in its order, and only those
grep -E '^\[[^]]+\]' "$ROWS" | sed 's/^\[\(.*\)\].*/\1/' >"$tmp/want"
if [ "$json" = jq ]; then
    jq -r '.rows[].row' "$tmp/v.json" >"$tmp/got"
    cmp -s "$tmp/want" "$tmp/got"; rc=$?
    [ $rc -eq 0 ] || tap_diag "manifest rows vs JSON rows:" "$(diff "$tmp/want" "$tmp/got")"
    tap_ok $rc "the JSON holds every row of rows.ini ($(wc -l <"$tmp/want") rows), in order"
    # each row: positive finite times, the ratio and error agree with them, the fields the table needs
    bad=$(jq -r '.rows[] | select((.predicted_seconds > 0 and .published_seconds > 0 and .published > 0
            and .predicted > 0 and (.ratio - .predicted_seconds / .published_seconds | fabs) < 1e-5
            and (.error_pct - 100 * (.ratio - 1) | fabs) < 1e-3 and .gpus > 0
            and (.preset | length) > 0 and (.source | length) > 0 and (.differs | length) > 0
            and (.plan | length) > 0 and (.unit | IN("s/iter", "TFLOP/s/GPU", "tokens/s"))) | not) | .row' \
          "$tmp/v.json")
    [ -z "$bad" ] || tap_diag "rows with missing or inconsistent fields: $bad"
    [ -z "$bad" ]
    tap_ok $? "every row has its times, ratio = predicted / published, error, preset, source and differences"
    # the summary is the rows' mean and max |error|, and PASS only when the targets hold
    jq -e '(.rows | map(.error_pct | fabs)) as $e
           | (.summary.mean_abs_error_pct - ($e | add / length) | fabs) < 1e-3
             and (.summary.max_abs_error_pct - ($e | max) | fabs) < 1e-3
             and .summary.rows == ($e | length)
             and .summary.within_row_target == ($e | map(select(. <= 15)) | length)
             and .summary.pass == (($e | max) <= 15 and ($e | add / length) <= 8)' "$tmp/v.json" >/dev/null
    tap_ok $? "the summary's mean, max, count within 15% and PASS/MISS follow from the rows"
    pass=$(jq -r 'if .summary.pass then "PASS" else "MISS" end' "$tmp/v.json")
    tail -2 "$tmp/out" | grep -q ": $pass\$"
    tap_ok $? "the printed verdict is the JSON's ($pass)"
else
    tap_skip "jq is not installed: the row-by-row checks of the JSON need it"
fi

# --row picks rows; an unknown one is an error naming it
first=$(head -1 "$tmp/want")
"$BENCH" --rows "$ROWS" --json "$tmp/one.json" --row "$first" >"$tmp/out1" 2>&1; rc=$?
[ $rc -eq 0 ] && [ "$(grep -c '"row": ' "$tmp/one.json")" -eq 1 ] && grep -q "\"row\": \"$first\"" "$tmp/one.json"
tap_ok $? "--row $first prices that row only"
out=$("$BENCH" --rows "$ROWS" --json "$tmp/x.json" --row no/such-row 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q -- '--row no/such-row: no such row'
tap_ok $? "--row of an unknown row exits 2 naming it"

# expect NAME TEXT PATTERN...: the manifest TEXT (printf format; its paths point into the
# real validate folder) exits 2 and the message matches every PATTERN
cfg="$MIST_SRCDIR/benchmarks/validate/mist-l4/gpt-1.3b-2gpu.ini"
plan="$MIST_SRCDIR/benchmarks/validate/mist-l4/test-small-base.plan.ini"
good="config = $cfg\nplan = $plan\npublished = 11.3\nunit = s/iter\nsource = u\ntable = t\ndiffers = d\n"
expect() {
    name=$1 text=$2
    shift 2
    # shellcheck disable=SC2059
    printf "$text" >"$tmp/m.ini"
    out=$("$BENCH" --rows "$tmp/m.ini" --json "$tmp/m.json" 2>&1); rc=$?
    ok=0
    [ $rc -eq 2 ] || ok=1
    for pat in "$@"; do printf '%s' "$out" | grep -Eq -- "$pat" || ok=1; done
    [ $ok -eq 0 ] || tap_diag "rc $rc: $out"
    tap_ok $ok "$name"
}
printf "[r]\n$good" >"$tmp/ok.ini"
"$BENCH" --rows "$tmp/ok.ini" --json "$tmp/ok.json" >/dev/null 2>&1
tap_ok $? "a one-row manifest with absolute paths is priced (the checks below differ from it in one line)"
expect "an unknown key is refused with the allowed keys" "[r]\n${good}speed = 3\n" \
    'm\.ini:9: \[r\] unknown key .speed.' 'allowed: config, plan, op_table'
expect "a row without differs is refused" "[r]\nconfig = $cfg\nplan = $plan\npublished = 1\nunit = s/iter\nsource = u\ntable = t\n" \
    'm\.ini:2: \[r\] has no .differs.'
long=$(printf '%0250d' 0)
expect "a line too long for the INI reader is refused, with a hint" "[r]\n${good}differs = $long\n" \
    'm\.ini:9: a line longer than' "split 'differs'"
sed -i 's#unit = s/iter#unit = TFLOPS#' "$tmp/ok.ini"
out=$("$BENCH" --rows "$tmp/ok.ini" --json "$tmp/m.json" 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q 'ok.ini:5: \[r\] unit = TFLOPS: allowed: s/iter, TFLOP/s/GPU'
tap_ok $? "an unknown unit is refused with the allowed units"
expect "a published figure of 0 is refused" "[r]\nconfig = $cfg\nplan = $plan\npublished = 0\n" \
    'm\.ini:4: \[r\] published = 0: allowed: a number > 0'
expect "a row named twice is refused" "[r]\n${good}[s]\n${good}[r]\nunit = s/iter\n" 'm\.ini:18: \[r\] appears twice'
expect "a plan that does not match the config is refused naming the row" \
    "[r]\nconfig = $cfg\nplan = $MIST_SRCDIR/benchmarks/validate/mist-l4/gpt-2.7b-flash.plan.ini\npublished = 1\nunit = s/iter\nsource = u\ntable = t\ndiffers = d\n" \
    '\[r\] plan: '
expect "an empty manifest is refused" "; nothing\n" 'no rows'
expect "a key before any row is refused" "published = 3\n[r]\n${good}" "m\\.ini:1: 'published' before any \\[row-name\\]"
tap_end
