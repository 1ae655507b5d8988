#!/bin/sh
# mist-plan --op-table: a table that is not exactly what the format allows
# (docs/plan-analyze.md, "Measured op table") exits 2 with one message naming
# file:line, the field and what is allowed, instead of being read as something
# else; LF, CRLF and crossentropy's zero backward are read.
. "$MIST_SRCDIR/tests/lib.sh"
PLAN="$MIST_BUILDDIR/mist-plan"
TINY="$MIST_SRCDIR/examples/tiny.ini"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect NAME TEXT PATTERN...: the table TEXT (printf format) exits 2, and its
# message matches every PATTERN (grep -E)
expect() {
    name=$1 text=$2
    shift 2
    # shellcheck disable=SC2059
    printf "$text" >"$tmp/t.optable"
    out=$("$PLAN" "$TINY" --analyze --hardware cpu --op-table "$tmp/t.optable" 2>&1); rc=$?
    good=0
    [ $rc -eq 2 ] || good=1
    for pat in "$@"; do printf '%s' "$out" | grep -Eq -- "$pat" || good=1; done
    [ $good -eq 0 ] || tap_diag "rc $rc: $out"
    tap_ok $good "$name"
}
# the predicted iteration seconds with the table TEXT, empty when it is refused
iteration() {
    # shellcheck disable=SC2059
    printf "$1" >"$tmp/t.optable"
    "$PLAN" "$TINY" --analyze --json --hardware cpu --op-table "$tmp/t.optable" 2>/dev/null |
        sed -n 's/.*"iteration_seconds": \([0-9.e+-]*\).*/\1/p'
}

H='mist-optable 1\n'
# times: finite, > 0, at most 1e10 us
expect "a NaN time is refused" "${H}qkv 4 64 1 nan nan\n" 't.optable:2: ' 'qkv fwd_us = nan' 'allowed: microseconds in \(0, 1e\+10\]'
expect "an infinite time is refused" "${H}qkv 4 64 1 1000 inf\n" 't.optable:2: ' 'bwd_us = inf'
expect "a negative time is refused" "${H}qkv 4 64 1 -5 1\n" 't.optable:2: ' 'fwd_us = -5'
expect "a zero forward is refused" "${H}fc 4 64 1 0 1\n" 't.optable:2: ' 'fc fwd_us = 0'
expect "a zero backward of a GEMM is refused, naming the ops where 0 is allowed" "${H}fc 4 64 1 1 0\n" \
    't.optable:2: ' 'fc bwd_us = 0' '0 only for the backward of crossentropy'
expect "a time above 1e10 us is refused" "${H}qkv 4 64 1 2e10 1\n" 't.optable:2: ' 'fwd_us = 2e10'
expect "a time with trailing characters is refused" "${H}qkv 4 64 1 10us 1\n" 'fwd_us = 10us'
# counts: whole integers 1..INT_MAX
expect "a fractional b is refused" "${H}qkv 4.5 64 1 1 1\n" 't.optable:2: ' 'qkv b = 4.5' 'allowed: integers 1\.\.2147483647'
expect "an s beyond int is refused" "${H}qkv 4 99999999999 1 1 1\n" 'qkv s = 99999999999'
expect "tp 0 is refused" "${H}qkv 4 64 0 1 1\n" 'qkv tp = 0'
# op names: those of the model description
expect "an unknown op name is refused with the allowed names" "${H}qvk 4 64 1 1 1\n" \
    't.optable:2: ' "unknown op 'qvk'" 'allowed: embedding pos_embedding ln1 qkv rotary attention attn_proj attn_residual ln2 fc gelu swiglu fc_proj residual lnf lm_head crossentropy'
expect "a seventh field is refused" "${H}qkv 4 64 1 1 1 1\n" 't.optable:2: ' 'expected 6 fields'
expect "a short entry is refused" "${H}qkv 4 64 1 1\n" 't.optable:2: ' 'expected 6 fields .*got 5'
expect "a duplicate entry is refused" "${H}qkv 4 64 1 1 1\n# again\nqkv 4 64 1 2 2\n" 't.optable:4: ' 'duplicate entry for op qkv'
# the header: exactly 'mist-optable 1'
expect "header with a word after the version is refused" "mist-optable 1 junk\nqkv 4 64 1 1 1\n" \
    't.optable:1: ' "unexpected 'junk' after the header"
expect "header version 1.5 is refused" "mist-optable 1.5\n" 't.optable:1: ' "version '1.5' is not supported; allowed: 1"
expect "header version 2^32 + 1 is refused" "mist-optable 4294967297\n" "version '4294967297' is not supported"
expect "a header without a version is refused" "# c\nmist-optable\n" 't.optable:2: ' "expected the header 'mist-optable 1'"
expect "a file without the header is refused" "qkv 4 64 1 1 1\n" 't.optable:1: ' "expected the header"
# lines: LF or CRLF, at most 511 characters
expect "CR-only line endings are refused, not read as one header line" "mist-optable 1\rqkv 4 64 1 1000 2000\r" \
    't.optable:1: ' 'carriage return inside a line' 'allowed: LF or CRLF'
pad=$(printf '%0489d' 0)  # 'qkv 4 64 1 1000 2000 #' is 22 characters: 22 + 489 = 511
expect "a line of 512 characters is refused, not split into two entries" "${H}qkv 4 64 1 1000 2000 #${pad}x\n" \
    't.optable:2: ' 'line longer than 511 characters; allowed: up to 511'

# a directory: fopen reads it as an empty file
out=$("$PLAN" "$TINY" --analyze --hardware cpu --op-table "$tmp" 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q "$tmp: is a directory"
tap_ok $? "a directory given as the op table exits 2 saying so"

# what is allowed is read, its entries used (the time differs from the roofline's):
# CRLF endings as LF, a 511-character line, a zero backward of crossentropy and residual
roof=$(iteration "${H}")
lf=$(iteration "${H}qkv 4 64 1 1000 2000\n")
crlf=$(iteration "mist-optable 1\r\nqkv 4 64 1 1000 2000\r\n")
[ -n "$roof" ] && [ -n "$lf" ] && [ "$lf" != "$roof" ] && [ "$lf" = "$crlf" ]
tap_ok $? "CRLF line endings read as LF (roofline $roof s, LF $lf s, CRLF $crlf s)"
at_limit=$(iteration "${H}qkv 4 64 1 1000 2000 #${pad}\n")
[ ${#pad} -eq 489 ] && [ "$at_limit" = "$lf" ]
tap_ok $? "a line of exactly 511 characters is read ($at_limit s)"
ce=$(iteration "${H}crossentropy 4 64 1 5 0\nresidual 4 64 1 5 0\n")
[ -n "$ce" ] && [ "$ce" != "$roof" ]
tap_ok $? "crossentropy and residual may have a zero backward ($roof s -> $ce s)"

tap_end
