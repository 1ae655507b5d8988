#!/bin/sh
# mist-calibrate writes an op table that mist-plan --op-table reads: every op
# at every requested (b, tp), positive times, and a prediction that uses them.
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
CAL="$MIST_BUILDDIR/mist-calibrate"
PLAN="$MIST_BUILDDIR/mist-plan"
GPT="$MIST_SRCDIR/examples/tiny.ini"
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-calibrate-test.XXXXXX")
trap 'rm -rf "$W"' EXIT
export MIST_DEVICE=cpu

"$CAL" "$GPT" --b 1,2 --tp 1,2 --iters 2 --out "$W/t.optable" 2>"$W/cal.err"
rc=$?
tap_diag "$(cat "$W/cal.err")"
# the tiny GPT's ops: qkv attention attn_proj fc fc_proj lm_head ln1 ln2 lnf at every (b, tp),
# embedding and crossentropy at tp = 1: 2 x (9 + 2) + 2 x 9 = 40 lines "op b s tp fwd bwd", with s =
# the model's seq_len, fwd > 0 and bwd > 0 (crossentropy's bwd is 0: one fused pass); and the ops
# the runtime fuses into them at 0 0: gelu with fc and attn_residual with ln2 at every (b, tp),
# pos_embedding with embedding at tp = 1: 4 + 4 + 2 = 10 more; and a lean block's kernels at every
# (b, tp): lean_gelu (forward with the branch bits, backward from the output) with both times > 0,
# 4 more entries, and lean_ln1, lean_ln2 (backward from the output; their forward is ln1's, ln2's,
# written as 0): 8 rows
entries=$(awk -v num_re="$num_re" '!/^#/ && NF == 6 && $3 == 64 && $5 ~ num_re && $6 ~ num_re && $5 > 0 &&
    ($6 > 0 || ($1 == "crossentropy" && $6 == 0))' \
    "$W/t.optable" | wc -l)
fused=$(awk '!/^#/ && NF == 6 && $5 == 0 && $6 == 0 && ($1 == "gelu" || $1 == "attn_residual" ||
    ($1 == "pos_embedding" && $4 == 1))' "$W/t.optable" | wc -l)
lean_gelu=$(awk -v num_re="$num_re" '!/^#/ && $1 == "lean_gelu" && $3 == 64 && $6 ~ num_re && $5 > 0 && $6 > 0' "$W/t.optable" | wc -l)
lean_norms=$(awk -v num_re="$num_re" '!/^#/ && ($1 == "lean_ln1" || $1 == "lean_ln2") && $3 == 64 && $6 ~ num_re &&
    $5 == 0 && $6 > 0' "$W/t.optable" | wc -l)
combos=$(awk '!/^#/ && NF == 6 { print $1, $2, $4 }' "$W/t.optable" | sort -u | wc -l)
tp2_vocab=$(awk '!/^#/ && $4 == 2 && ($1 == "embedding" || $1 == "crossentropy")' "$W/t.optable" | wc -l)
[ $rc -eq 0 ] && [ "$(head -1 "$W/t.optable")" = "mist-optable 1" ] && [ "$entries" -eq 44 ] && [ "$fused" -eq 10 ] &&
    [ "$lean_gelu" -eq 4 ] && [ "$lean_norms" -eq 8 ] && [ "$combos" -eq 62 ] && [ "$tp2_vocab" -eq 0 ]
tap_ok $? "mist-calibrate: the tiny GPT's 44 entries at b 1,2 and tp 1,2 (no vocabulary-parallel ones; 4 of lean_gelu), positive times, 10 fused ops at 0, 8 lean norms' backwards (rc $rc, $entries + $fused + $lean_norms; lean_gelu $lean_gelu)"

# the planner reads the table; with it the predicted iteration time is the measured one's, not the roofline's
STAGE="-o stage.0.b=2 -o plan.G=8 -o stage.0.dp=1"  # 16 sequences = b 2 x dp 1 x G 8
# shellcheck disable=SC2086
roof=$("$PLAN" "$GPT" --analyze --json --hardware cpu $STAGE | sed -n 's/.*"iteration_seconds": \([0-9.e+-]*\).*/\1/p')
# shellcheck disable=SC2086
meas=$("$PLAN" "$GPT" --analyze --json --hardware cpu --op-table "$W/t.optable" $STAGE |
    sed -n 's/.*"iteration_seconds": \([0-9.e+-]*\).*/\1/p')
tap_diag "predicted iteration at b=2: roofline $roof s, with the measured op table $meas s"
num_ok 'b > 0 && a != b' a="$roof" b="$meas"
tap_ok $? "mist-plan --analyze --op-table uses the calibrated times (roofline $roof s -> $meas s)"

# lean blocks priced from the table's lean rows. it ITER TABLE [options]: the predicted iteration
it() {
    t=$1
    shift
    # shellcheck disable=SC2086
    "$PLAN" "$GPT" --analyze --json --hardware cpu --op-table "$t" $STAGE "$@" | sed -n 's/.*"iteration_seconds": \([0-9.e+-]*\).*/\1/p'
}
grep -v '^lean_' "$W/t.optable" >"$W/old.optable"  # the table as it was before the lean rows
# deliberately slow lean rows: 0.1 s more for lean_gelu's forward and for each lean backward
awk '$1 !~ /^lean_/ { print; next }
    { printf "%s %s %s %s %.3f %.3f\n", $1, $2, $3, $4, $5 + ($1 == "lean_gelu" ? 1e5 : 0), $6 + 1e5 }' \
    "$W/t.optable" >"$W/slow.optable"
lean_old=$(it "$W/old.optable" -o stage.0.lean=1); lean_meas=$(it "$W/t.optable" -o stage.0.lean=1)
lean_slow=$(it "$W/slow.optable" -o stage.0.lean=1)
plain_old=$(it "$W/old.optable"); plain_slow=$(it "$W/slow.optable")
tap_diag "lean at b=2: without lean rows $lean_old s, measured rows $lean_meas s, slow rows $lean_slow s; plain $plain_old s / $plain_slow s"
# every micro-batch (G 8) runs both blocks (L 2) lean: 4 x 0.1 s more each, 6.4 s in all
num_ok 'o > 0 && m > 0 && m != o && s > m && s > o && (s - m - 6.4) / 6.4 < 1e-6 && (m + 6.4 - s) / 6.4 < 1e-6' \
    o="$lean_old" m="$lean_meas" s="$lean_slow"
tap_ok $? "lean blocks are priced from the lean rows: slow rows cost G L 0.4 s = 6.4 s more than the measured ones ($lean_meas s -> $lean_slow s; without lean rows $lean_old s)"
[ -n "$plain_old" ] && [ "$plain_old" = "$plain_slow" ]
tap_ok $? "a plan without lean is priced the same with or without the lean rows ($plain_old s, $plain_slow s)"

# an MLP narrower than the hidden size (ffn 32 < 64, as ffn/tp is at tp 8 of a 4h MLP): the
# projection's input is narrower than its output; every buffer must be sized for its own op
"$CAL" "$GPT" -o model.ffn_hidden=32 --b 1 --tp 1,2 --iters 1 --out "$W/t8.optable" 2>"$W/cal8.err"
rc=$?
tap_diag "$(cat "$W/cal8.err")"
n8=$(awk -v num_re="$num_re" '!/^#/ && NF == 6 && $5 ~ num_re && $5 > 0' "$W/t8.optable" 2>/dev/null | wc -l)
[ $rc -eq 0 ] && [ "$n8" -eq 22 ]
tap_ok $? "mist-calibrate with ffn_hidden < hidden: the 22 entries (lean_gelu's included) at tp 1, 2 with positive times (rc $rc)"

# a tp the runtime cannot shard the model with (4 heads) is refused before measuring
"$CAL" "$GPT" --b 1 --tp 8 --iters 1 --out "$W/t9.optable" >/dev/null 2>"$W/cal9.err"
rc=$?
[ $rc -eq 2 ] && grep -q -- "--tp 8: must divide heads (4)" "$W/cal9.err" && [ ! -e "$W/t9.optable" ]
tap_ok $? "mist-calibrate --tp 8 on a 4-head model exits 2 naming the rule (rc $rc)"
# an unwritable --out is reported before the measurements
"$CAL" "$GPT" --b 1 --iters 1 --out "$W" >/dev/null 2>"$W/cal10.err"
rc=$?
[ $rc -eq 2 ] && grep -q "is a directory" "$W/cal10.err"
tap_ok $? "mist-calibrate --out DIR exits 2 at once: $(head -c 160 "$W/cal10.err") (rc $rc)"
# --iters is parsed whole: 1e3 is not 1
"$CAL" "$GPT" --iters 1e3 >/dev/null 2>"$W/cal11.err"
rc=$?
[ $rc -eq 2 ] && grep -q -- "--iters 1e3: allowed: an integer 1..1000000" "$W/cal11.err"
tap_ok $? "mist-calibrate --iters 1e3 exits 2 (rc $rc)"

# parallel (Falcon-style) blocks have no ln2 (nor attn_residual): the table lists the other ops, GELU
# at 0 (fused into fc), and the planner reads it
FALCON="$MIST_SRCDIR/examples/tiny-falcon.ini"
"$CAL" "$FALCON" --b 4 --iters 1 --out "$W/f.optable" 2>"$W/calf.err"
rc=$?
ops=$(awk '!/^#/ && NF == 6 { print $1 }' "$W/f.optable" | sort | tr '\n' ' ')
"$PLAN" "$FALCON" --analyze --json --hardware cpu --op-table "$W/f.optable" >"$W/f.plan" 2>"$W/f.plan.err"
rcp=$?
[ $rc -eq 0 ] && [ $rcp -eq 0 ] &&
    [ "$ops" = "attention attn_proj crossentropy embedding fc fc_proj gelu lean_gelu lean_ln1 lm_head ln1 lnf qkv rotary " ]
tap_ok $? "tiny-falcon (parallel blocks, rotary): every op but ln2 and lean_ln2 timed, the planner reads the table (rc $rc, $rcp; $ops)"

# SwiGLU (tiny-llama): no lean_gelu (a lean SwiGLU block recomputes act = swiglu's forward
# instead), lean_ln1 and lean_ln2; swiglu's forward prices that recompute: 0.1 s more on it costs
# a plain plan G L 0.1 s = 1.6 s (its forwards) and a lean one twice that (the recomputes too)
LLAMA="$MIST_SRCDIR/examples/tiny-llama.ini"
"$CAL" "$LLAMA" --b 1,2 --iters 1 --out "$W/l.optable" 2>"$W/call.err"
rc=$?
ops=$(awk '!/^#/ && NF == 6 && $1 ~ /^(lean_|swiglu)/ { print $1 }' "$W/l.optable" | sort -u | tr '\n' ' ')
awk '$1 != "swiglu" { print; next } { printf "%s %s %s %s %.3f %s\n", $1, $2, $3, $4, $5 + 1e5, $6 }' "$W/l.optable" >"$W/ls.optable"
GPT="$LLAMA"
p0=$(it "$W/l.optable"); p1=$(it "$W/ls.optable"); l0=$(it "$W/l.optable" -o stage.0.lean=1); l1=$(it "$W/ls.optable" -o stage.0.lean=1)
GPT="$MIST_SRCDIR/examples/tiny.ini"
[ $rc -eq 0 ] && [ "$ops" = "lean_ln1 lean_ln2 swiglu " ] &&
    num_ok 'p0 > 0 && l0 > 0 && (p1 - p0 - 1.6) / 1.6 < 1e-6 && (p0 + 1.6 - p1) / 1.6 < 1e-6 && (l1 - l0 - 3.2) / 3.2 < 1e-6 && (l0 + 3.2 - l1) / 3.2 < 1e-6' \
        p0="$p0" p1="$p1" l0="$l0" l1="$l1"
tap_ok $? "tiny-llama: lean rows $ops; a slower swiglu forward costs the plain plan $p0 -> $p1 s, the lean one $l0 -> $l1 s (its recompute)"

# usage errors exit 2 with a message naming the option
"$CAL" "$GPT" --b 0 >/dev/null 2>"$W/bad.err"
rc=$?
[ $rc -eq 2 ] && grep -q -- "--b 0: allowed: integers >= 1" "$W/bad.err"
tap_ok $? "a bad --b list exits 2 naming the option and what is allowed (rc $rc)"
"$CAL" "$W/missing.ini" >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ]
tap_ok $? "a missing config exits 2 (rc $rc)"
tap_end
