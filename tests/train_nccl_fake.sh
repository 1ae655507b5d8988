#!/bin/sh
# Training through the NCCL comm backend without GPUs: tests/mist-train-nccl-fake
# is mist-train whose collectives of the CPU backend's device arena go through
# runtime/comm_nccl.c over the NCCL stand-in of tests/fake_nccl (MPI on host
# memory). Every plan of the matrix (dp, tp, ZeRO 0-3, offloading,
# checkpointing, bf16, pipeline stages with a tied embedding) trains with it
# and with mist-train: the losses must agree (within 1e-5 relative: the
# stand-in's blocking MPI collectives may add in another order than the MPI
# backend's nonblocking ones; "exact" says when they are the same bits), the
# run must have gone through NCCL, every NCCL communicator rank 0 used must
# have been made at start (before the arenas), and its arena peaks must equal
# the prediction (NCCL's buffers are outside the plan).
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib_train.sh"  # run, loss_diff, peaks, comm_row
PLAIN="$MIST_BUILDDIR/mist-train"
NCCL="$MIST_BUILDDIR/tests/mist-train-nccl-fake"
GPT="$MIST_SRCDIR/examples/tiny.ini"
LLAMA="$MIST_SRCDIR/examples/tiny-llama.ini"
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-nccl-test.XXXXXX")
trap 'rm -rf "$W"' EXIT
export MIST_DEVICE=cpu
COMMON=$COMM_COMMON
comm_matrix >"$W/matrix"
while read -r c model prec G stages; do  # (not `name`: run() sets that)
    # shellcheck disable=SC2086
    comm_row "$model" "$prec" "$G" $stages
    TRAIN=$PLAIN
    # shellcheck disable=SC2086
    run "$ini" "$np" "$c" $plan
    rc1=$?
    TRAIN=$NCCL
    # shellcheck disable=SC2086
    run "$ini" "$np" "$c-nccl" $plan
    rc2=$?
    d=$(loss_diff "$W/$c.jsonl" "$W/$c-nccl.jsonl")
    exact=no
    losses "$W/$c.jsonl" >"$W/a"; losses "$W/$c-nccl.jsonl" >"$W/b"
    [ -s "$W/a" ] && cmp -s "$W/a" "$W/b" && exact=yes
    calls=$(sed -n 's/^mist: NCCL collectives on rank 0: \([0-9]*\),.*/\1/p' "$W/$c-nccl.out")
    # every communicator is made at start, before the arenas (none lazily in the first iteration)
    made=$(sed -n 's/^mist: NCCL communicators made before the arenas on rank 0: \([0-9]*\)$/\1/p' "$W/$c-nccl.out")
    used=$(sed -n 's/^mist: NCCL collectives on rank 0: .*, on \([0-9]*\) communicators$/\1/p' "$W/$c-nccl.out")
    pk=$(peaks "$W/$c-nccl.json")
    ok=1
    [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && num_ok 'd <= 1e-5' d="$d" && [ "${calls:-0}" -gt 0 ] &&
        echo "$pk" | grep -q ' yes ' && [ -n "$made" ] && [ "$made" = "$used" ] && ok=0
    tap_ok $ok "$c ($prec, G $G, stages $stages, $np ranks): through NCCL = plain (max relative loss difference $d, exact: $exact), ${calls:-0} NCCL collectives on rank 0 on ${used:-?} communicators (${made:-?} made before the arenas), peaks: $pk"
    [ $ok -eq 0 ] || tap_diag "rc $rc1 / $rc2" "$(tail -5 "$W/$c.out")" "$(tail -5 "$W/$c-nccl.out")"
done <"$W/matrix"

# interleaved 1F1B ([plan] virtual = 2): 4 pipeline ranks of 2 chunks, the boundaries' device
# messages through NCCL (ordered, untagged) as through MPI; with 2 pipeline ranks activations and
# gradients would share one ordered direction: refused with a clear message
# shellcheck disable=SC2046
set -- $(VIRTUAL=2 stage_args 4 1/1/1/0/0/0 1/1/1/1/0/0 1/1/1/0/1/0 1/1/1/0/0/0 1/1/1/2/0/0.5 1/1/1/0/0/0 \
    1/1/1/0/0/0 1/1/1/3/0/0 | head -1)
TRAIN=$PLAIN
run "$GPT" 4 vpp -o model.layers=8 "$@"
rc1=$?
TRAIN=$NCCL
run "$GPT" 4 vpp-nccl -o model.layers=8 "$@"
rc2=$?
d=$(loss_diff "$W/vpp.jsonl" "$W/vpp-nccl.jsonl")
pk=$(peaks "$W/vpp-nccl.json")
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && num_ok 'd <= 1e-5' d="$d" && echo "$pk" | grep -q ' yes ' &&
    grep -q NCCL "$W/vpp-nccl.out"
tap_ok $? "virtual = 2 on 4 pipeline ranks through NCCL = plain (max relative loss difference $d), peaks: $pk"
# shellcheck disable=SC2046
run "$GPT" 2 vpp2-nccl -o model.layers=4 $(VIRTUAL=2 stage_args 2 1/1/1/0/0/0 1/1/1/0/0/0 1/1/1/0/0/0 1/1/1/0/0/0 | head -1)
rc=$?
[ $rc -eq 2 ] && grep -q 'at least 3 pipeline ranks' "$W/vpp2-nccl.out"
tap_ok $? "virtual = 2 on 2 pipeline ranks through NCCL: refused, asking for 3 pipeline ranks (exit $rc)"

# MIST_COMM_STAGED=1 takes the staged path even where NCCL could run
TRAIN=$NCCL
MIST_COMM_STAGED=1 run "$GPT" 2 forced -o stage.0.dp=2 -o stage.0.b=4
rc=$?
[ $rc -eq 0 ] && grep -q '^mist: staged collectives on rank 0: [1-9]' "$W/forced.out" && ! grep -q 'NCCL' "$W/forced.out"
tap_ok $? "MIST_COMM_STAGED=1 stages instead of NCCL (rc $rc)"

# a profile that prices staged collectives, on a run whose collectives go through NCCL: a note
# says the prediction errs on the slow side (no note on the MPI path of the CPU backend)
printf '[profile]\nbase = cpu\n[collective]\nstaged = 1\n' >"$W/staged.ini"
run "$GPT" 2 note -o stage.0.dp=2 -o stage.0.b=4 -o cluster.hardware="$W/staged.ini"
rc=$?
TRAIN=$PLAIN
run "$GPT" 2 note-plain -o stage.0.dp=2 -o stage.0.b=4 -o cluster.hardware="$W/staged.ini"
rc2=$?
[ $rc -eq 0 ] && [ $rc2 -eq 0 ] && grep -q '^mist: note: hardware profile .* prices collectives staged through host memory' \
    "$W/note.out" && ! grep -q '^mist: note:' "$W/note-plain.out"
tap_ok $? "a staged = 1 profile on an NCCL run: a note that the prediction is pessimistic (none on the MPI path) (rc $rc / $rc2)"
tap_end
