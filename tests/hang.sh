#!/bin/sh
# A rank that stops taking part must not hang the job: MIST_FAULT_HANG=R:K
# makes world rank R sleep at iteration K; the other ranks' waits run into
# [cluster] comm_timeout and end the job with exit code 4 and a report naming
# the rank, the operation and the step. Once in a data-parallel group (the
# all-reduce / reduce-scatter of the gradients) and once across a pipeline
# boundary (the activation send/recv).
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
TRAIN="$MIST_BUILDDIR/mist-train"
GPT="$MIST_SRCDIR/examples/tiny.ini"
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-hang-test.XXXXXX")
trap 'rm -rf "$W"' EXIT
COMMON="-o train.steps=50 -o train.global_batch=8 -o log.interval=1 -o data.val_interval=0 -o cluster.comm_timeout=2"

# hang NAME NP RANK:STEP ARGS...: runs the job with that rank stopping; sets rc and dt (seconds)
hang() {
    name=$1; np=$2; fault=$3; shift 3
    t0=$(date +%s.%N)
    export MIST_FAULT_HANG="$fault"
    # shellcheck disable=SC2086
    mist_mpirun --timeout 60 -np "$np" "$TRAIN" "$GPT" $COMMON "$@" >"$W/$name.out" 2>&1
    rc=$?
    unset MIST_FAULT_HANG
    dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}

hang dp 2 1:3 -o stage.0.dp=2 -o stage.0.b=4 -o stage.0.zero=1
tap_diag "dp 2, rank 1 stops at step 3: mpirun exited $rc after $dt s; report:" \
    "$(grep -m1 'has not completed' "$W/dp.out" | cut -c1-300)"
[ $rc -eq 4 ] && grep -q "rank 0: step 3: .* has not completed after [0-9]* s" "$W/dp.out" &&
    num_ok 't < 30' t="$dt"
tap_ok $? "a data-parallel rank that stops at step 3 ends the job with exit 4 and a report of rank 0's wait at step 3 (rc $rc, $dt s)"
grep -q "rank 0: step 3: .*Not waiting in a timed-out operation: world rank(s) 1 of the group" "$W/dp.out"
tap_ok $? "the report names the rank that stopped (world rank 1)"
hang dp4 4 2:3 -o stage.0.dp=4 -o stage.0.b=2 -o stage.0.zero=1
tap_diag "dp 4, rank 2 stops at step 3: rc $rc; $(grep -m1 'Not waiting' "$W/dp4.out" | sed 's/.*\(Not waiting[^(]*\).*/\1/')"
[ $rc -eq 4 ] && grep -q "Not waiting in a timed-out operation: world rank(s) 2 of the group" "$W/dp4.out" &&
    ! grep -q "Not waiting in a timed-out operation: world rank(s) [0-9, ]*[013]" "$W/dp4.out"
tap_ok $? "of 4 data-parallel ranks, the report names exactly the one that stopped (world rank 2; rc $rc)"

hang pp 2 1:3 -o plan.stages=2 -o stage.0.layers=1 -o stage.0.dp=1 -o stage.0.b=4 -o plan.G=2 \
    -o stage.1.layers=1 -o stage.1.dp=1 -o stage.1.b=4
tap_diag "2 stages, rank 1 (stage 1) stops at step 3: mpirun exited $rc after $dt s; report:" \
    "$(grep -m1 'has not completed' "$W/pp.out" | cut -c1-300)"
[ $rc -eq 4 ] && grep -q "rank 0: step 3: .*\(send\|recv\) .* with rank 1 of the group" "$W/pp.out" &&
    num_ok 't < 30' t="$dt"
tap_ok $? "a pipeline rank that stops at step 3 ends the job with exit 4 and a report naming the send/recv with it (rc $rc, $dt s)"
grep -q "Not waiting in a timed-out operation: world rank(s) 1 of the group" "$W/pp.out"
tap_ok $? "the pipeline report names the stopped stage's rank (world rank 1)"

# a rank that stops inside a checkpoint (after step 3's gather started): the
# checkpoint phase keeps a time limit (comm_timeout plus the write at a slow
# disk's pace), so rank 0 does not wait in the gather forever
export MIST_FAULT_HANG_CHECKPOINT=1:3
hang ckpt 2 -1:0 -o stage.0.dp=2 -o stage.0.b=4 -o stage.0.zero=1 -o checkpoint.dir="$W/ck" -o checkpoint.interval=3
unset MIST_FAULT_HANG_CHECKPOINT
tap_diag "dp 2, rank 1 stops in the checkpoint of step 3: mpirun exited $rc after $dt s; report:" \
    "$(grep -m1 'has not completed' "$W/ckpt.out" | cut -c1-300)"
[ $rc -eq 4 ] && grep -q "rank 0: step 3: .* has not completed after [0-9]* s" "$W/ckpt.out" &&
    num_ok 't < 30' t="$dt"
tap_ok $? "a rank that stops during a checkpoint ends the job with exit 4, not a hang (rc $rc, $dt s)"

# the steps before the fault ran normally (the timeout does not fire on healthy waits)
grep -q "iteration        2/" "$W/dp.out" && grep -q "iteration        2/" "$W/pp.out"
tap_ok $? "steps 1 and 2 complete in both jobs before the fault"
tap_end
