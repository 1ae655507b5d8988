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

# fused ops (gelu, attn_residual, pos_embedding) may be 0 both ways; others may not have a zero forward
fz=$(iteration "${H}gelu 4 64 1 0 0\nattn_residual 4 64 1 0 0\npos_embedding 4 64 1 0 0\n")
[ -n "$fz" ] && [ "$fz" != "$roof" ]
tap_ok $? "gelu, attn_residual and pos_embedding may be 0 (fused into fc, ln2, embedding): $roof s -> $fz s"
expect "a zero forward of residual is refused" "${H}residual 4 64 1 0 0\n" 'residual fwd_us = 0' '0 only for gelu, attn_residual and pos_embedding'

# a lean block's kernels (lean_gelu, lean_ln1, lean_ln2): the lean norms' forward (ln1's, ln2's) may be
# 0, nothing else of theirs; they price lean blocks only, so a plan without lean keeps its time
lz=$(iteration "${H}lean_gelu 4 64 1 20 80\nlean_ln1 4 64 1 0 50\nlean_ln2 4 64 1 0 50\n")
[ -n "$lz" ] && [ "$lz" = "$roof" ]
tap_ok $? "lean_gelu, lean_ln1 and lean_ln2 rows are read (the norms' forward at 0) and leave a plan without lean as it was ($roof s -> $lz s)"
expect "a zero forward of lean_gelu is refused" "${H}lean_gelu 4 64 1 0 80\n" 'lean_gelu fwd_us = 0' 'and for lean_ln1 and lean_ln2'
expect "a zero backward of lean_ln1 is refused" "${H}lean_ln1 4 64 1 0 0\n" 'lean_ln1 bwd_us = 0'

# micro-batch sizes between measured ones: linear in b (tiny runs b = 4): measured at 2 and 8
# gives at 4 the time of an entry at 4 with the interpolated value; beyond the largest, the
# line through the last two (and a warning); tp and s must match
exact=$(iteration "${H}qkv 4 64 1 2000 5000\n")
between=$(iteration "${H}qkv 2 64 1 1000 2000\nqkv 8 64 1 4000 11000\n")
[ -n "$exact" ] && [ "$exact" != "$roof" ] && [ "$between" = "$exact" ]
tap_ok $? "b between two measured sizes interpolates linearly (b 2, 8 -> 4: $between s = exact $exact s)"
beyond=$(iteration "${H}qkv 1 64 1 500 1250\nqkv 2 64 1 1000 2500\n")
exact4=$(iteration "${H}qkv 4 64 1 2000 5000\n")
[ -n "$beyond" ] && [ "$beyond" = "$exact4" ]
tap_ok $? "b beyond the largest measured extrapolates from the last two (b 1, 2 -> 4: $beyond s = $exact4 s)"
printf "${H}qkv 1 64 1 500 1250\nqkv 2 64 1 1000 2500\n" >"$tmp/x.optable"
"$PLAN" "$TINY" --analyze --json --hardware cpu --op-table "$tmp/x.optable" >"$tmp/x.json" 2>"$tmp/x.err"
grep -q 'warning: op table: qkv at b=4 s=64 tp=1 is beyond the largest measured b; extrapolated' "$tmp/x.err" &&
    grep -q '{"op": "qkv", "b": 4, "s": 64, "tp": 1, "rule": "extrapolated"}' "$tmp/x.json"
tap_ok $? "an extrapolation is a warning on stderr and a JSON fallbacks row with rule extrapolated"

# a fallback to the model: once per (op, shape) on stderr and in the JSON, though two stages share it
printf "${H}qkv 4 64 1 2000 5000\n" >"$tmp/f.optable"
"$PLAN" "$TINY" --analyze --json --hardware cpu --op-table "$tmp/f.optable" -o plan.stages=2 -o stage.0.layers=1 \
    -o stage.0.dp=2 -o stage.1.layers=1 -o stage.1.dp=2 -o stage.1.tp=1 -o stage.1.b=4 -o plan.G=2 >"$tmp/f.json" 2>"$tmp/f.err"
rc=$?
n_ln1=$(grep -c 'no entry for ln1 at b=4 s=64 tp=1' "$tmp/f.err")
[ $rc -eq 0 ] && [ "$n_ln1" -eq 1 ] && ! grep -q 'for qkv' "$tmp/f.err" &&
    grep -q '"fallbacks": \[.*{"op": "ln1", "b": 4, "s": 64, "tp": 1, "rule": "model"}' "$tmp/f.json" &&
    ! grep -q '"op": "qkv"' "$tmp/f.json"
tap_ok $? "a fallback is reported once per (op, shape) on stderr ($n_ln1 line for ln1 over 2 stages) and in JSON fallbacks, a measured op not (rc $rc)"
"$PLAN" "$TINY" --analyze --json --hardware cpu >"$tmp/n.json" 2>&1
grep -q '"fallbacks": \[\]' "$tmp/n.json"
tap_ok $? "without an op table the JSON fallbacks array is empty"

# --strict-op-table refuses a plan with a shape the table lacks, naming it; a table covering
# every op of the plan (interpolated included) passes
out=$("$PLAN" "$TINY" --analyze --hardware cpu --op-table "$tmp/f.optable" --strict-op-table 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q -- '--strict-op-table: the op table does not cover' &&
    printf '%s' "$out" | grep -q 'ln1 b=4 s=64 tp=1 (missing)' && ! printf '%s' "$out" | grep -q 'qkv b=4'
tap_ok $? "--strict-op-table refuses a plan with unmeasured shapes, naming them (rc $rc)"
: >"$tmp/all.optable"
printf "${H}" >>"$tmp/all.optable"
for op in embedding pos_embedding ln1 qkv attention attn_proj attn_residual ln2 fc gelu fc_proj residual lnf lm_head crossentropy; do
    printf "%s 2 64 1 100 100\n%s 8 64 1 400 400\n" $op $op >>"$tmp/all.optable"
done
"$PLAN" "$TINY" --analyze --hardware cpu --op-table "$tmp/all.optable" --strict-op-table >/dev/null 2>"$tmp/all.err"
rc=$?
[ $rc -eq 0 ] && [ ! -s "$tmp/all.err" ]
tap_ok $? "--strict-op-table passes a plan whose every op is measured or interpolated, silently (rc $rc)"
# a table without lean rows (any older one) prices lean blocks by the model, not a gap; one that lists
# lean_gelu prices lean blocks by it, and under --strict-op-table a b it does not cover is a gap
"$PLAN" "$TINY" --analyze --hardware cpu --op-table "$tmp/all.optable" --strict-op-table -o stage.0.lean=1 >/dev/null 2>"$tmp/lean.err"
rc=$?
printf "lean_gelu 2 64 1 100 100\n" >>"$tmp/all.optable"
out=$("$PLAN" "$TINY" --analyze --hardware cpu --op-table "$tmp/all.optable" --strict-op-table -o stage.0.lean=1 2>&1); rc2=$?
[ $rc -eq 0 ] && [ ! -s "$tmp/lean.err" ] && [ $rc2 -eq 2 ] && printf '%s' "$out" | grep -q 'lean_gelu b=4 s=64 tp=1 (missing)'
tap_ok $? "--strict-op-table: lean blocks with a table without lean rows pass (rc $rc); with a lean_gelu row at another b, the gap is named (rc $rc2)"
out=$("$PLAN" "$TINY" -o plan.mode=auto --hardware cpu --op-table "$tmp/all.optable" --strict-op-table --json 2>&1)
rc=$?
b_found=$(printf '%s' "$out" | sed -n 's/.*"stages": \[{[^}]*"b": \([0-9]*\).*/\1/p')
[ $rc -eq 0 ] && [ -n "$b_found" ] && [ "$b_found" -ge 2 ] && [ "$b_found" -le 8 ]
tap_ok $? "a strict search keeps to the measured micro-batch range (b = $b_found in [2, 8], rc $rc)"
out=$("$PLAN" "$TINY" --analyze --hardware cpu --strict-op-table 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q 'needs --op-table'
tap_ok $? "--strict-op-table without --op-table exits 2 saying so"

# a table measured at another sequence length is an error naming both lengths
out=$("$PLAN" "$TINY" --analyze --hardware cpu --op-table "$(printf "${H}qkv 4 128 1 1 1\n" >"$tmp/s.optable"; echo "$tmp/s.optable")" 2>&1)
rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q 'measured at seq_len 128' && printf '%s' "$out" | grep -q 'the model has seq_len 64'
tap_ok $? "an op table at seq_len 128 for a model at 64 exits 2 naming both (rc $rc)"

# Mist's reference case (GPT-1.3B, 2 x L4, b 8, G 2, every block checkpointed) with Mist's own L4
# op table: within 5% of the 11.329 s the Mist artifact measured (docs/plan-analyze.md)
SB="$MIST_SRCDIR/benchmarks/validate/mist-l4"
t=$("$PLAN" "$SB/gpt-1.3b-2gpu.ini" --analyze "$SB/test-small-base.plan.ini" --json \
        --op-table "$SB/l4-gpt-1.3b-plain.optable" --strict-op-table 2>"$tmp/sb.err" |
    sed -n 's/.*"iteration_seconds": \([0-9.e+-]*\).*/\1/p')
awk -v t="$t" 'BEGIN { exit !(t != "" && t / 11.329 > 0.95 && t / 11.329 < 1.05) }'
tap_ok $? "Mist's small-base case with Mist's L4 table: $t s against 11.329 s measured (within 5%, no fallback)"

tap_end
