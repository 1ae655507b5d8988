#!/bin/sh
# Collectives of device memory staged through host memory (runtime/comm_staged.h:
# how data and tensor parallelism run on GPUs without NCCL). MIST_COMM_STAGED=1
# stages the CPU backend's device arena the same way, so the path runs here:
# every plan of the matrix (dp, tp, ZeRO 0-3, offloading, checkpointing, bf16,
# pipeline stages with a tied embedding) trains twice, plain and staged, and
# the two runs must agree to the bit: the same losses at every step and the
# same final weights (a staged call runs the inner backend's same call on the
# same counts). The staged run must have staged collectives and keep its arena
# peaks equal to the prediction (the bounce buffer is outside the plan).
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib_train.sh"  # run, losses, weight_diff, peaks, comm_row
TRAIN="$MIST_BUILDDIR/mist-train"
GPT="$MIST_SRCDIR/examples/tiny.ini"
LLAMA="$MIST_SRCDIR/examples/tiny-llama.ini"
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-staged-test.XXXXXX")
trap 'rm -rf "$W"' EXIT
COMMON=$COMM_COMMON
comm_matrix >"$W/matrix"
while read -r c model prec G stages; do  # (not `name`: run() sets that)
    # shellcheck disable=SC2086
    comm_row "$model" "$prec" "$G" $stages
    # shellcheck disable=SC2086
    run "$ini" "$np" "$c" $plan
    rc1=$?
    # shellcheck disable=SC2086
    MIST_COMM_STAGED=1 run "$ini" "$np" "$c-staged" $plan
    rc2=$?
    losses "$W/$c.jsonl" >"$W/a"
    losses "$W/$c-staged.jsonl" >"$W/b"
    n=$(wc -l <"$W/a")
    same_losses=no
    [ "$n" -gt 0 ] && cmp -s "$W/a" "$W/b" && same_losses=yes
    wd=$(weight_diff "$(last_ckpt "$W/$c.ck")" "$(last_ckpt "$W/$c-staged.ck")" exact)
    calls=$(sed -n 's/^mist: staged collectives on rank 0: \([0-9]*\),.*/\1/p' "$W/$c-staged.out")
    pk=$(peaks "$W/$c-staged.json")
    ok=1
    [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$same_losses" = yes ] && [ "$wd" = 0 ] && [ "${calls:-0}" -gt 0 ] &&
        echo "$pk" | grep -q ' yes ' && ok=0
    tap_ok $ok "$c ($prec, G $G, stages $stages, $np ranks): staged = plain to the bit ($n losses: $same_losses, weights: $([ "$wd" = 0 ] && echo same || echo differ)), ${calls:-0} staged calls on rank 0, peaks: $pk"
    [ $ok -eq 0 ] || tap_diag "rc $rc1 / $rc2" "$(tail -5 "$W/$c.out")" "$(tail -5 "$W/$c-staged.out")" \
        "$(paste "$W/a" "$W/b" | head -5)"
done <"$W/matrix"

# a checkpoint written by a staged run resumes in a plain run at another plan and trains on
# exactly as the plain run of the first plan does (the files are the same bits)
run "$GPT" 1 resume -o train.steps=16 -o checkpoint.resume=1 -o stage.0.dp=1 -o stage.0.b=8 \
    -o checkpoint.dir="$W/gpt-z3-off-staged.ck"
rc=$?
run "$GPT" 1 resume-plain -o train.steps=16 -o checkpoint.resume=1 -o stage.0.dp=1 -o stage.0.b=8 \
    -o checkpoint.dir="$W/gpt-z3-off.ck"
rc2=$?
losses "$W/resume.jsonl" >"$W/a"
losses "$W/resume-plain.jsonl" >"$W/b"
[ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ -s "$W/a" ] && cmp -s "$W/a" "$W/b"
tap_ok $? "the staged run's checkpoint resumes at 1 rank like the plain one's: the same losses (rc $rc / $rc2)"

# a value other than 0 or 1 stops every rank at start with exit code 2, naming the allowed ones
MIST_COMM_STAGED=yes run "$GPT" 2 badenv -o stage.0.dp=2 -o stage.0.b=4
rc=$?
[ $rc -eq 2 ] && grep -q 'MIST_COMM_STAGED=yes: allowed: 0, 1' "$W/badenv.out"
tap_ok $? "MIST_COMM_STAGED=yes: exit 2 on every rank with the allowed values (rc $rc)"
tap_end
