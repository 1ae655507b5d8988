#!/bin/sh
# Comm backend collectives at 1, 2, 3, 4 and 8 ranks: tests/test_comm.c (the
# MPI and staged backends) and tests/test_comm_nccl.c (the NCCL backend over
# the NCCL stand-in of tests/fake_nccl) check every operation on several group
# shapes.
. "$MIST_SRCDIR/tests/lib.sh"
for prog in test_comm test_comm_nccl_fake; do
    for np in 1 2 3 4 8; do
        out=$(timeout 120 sh -c "mpirun --oversubscribe -np $np '$MIST_BUILDDIR/tests/$prog' </dev/null" 2>&1)
        rc=$?
        points=$(printf '%s\n' "$out" | grep -c '^ok ')
        bad=$(printf '%s\n' "$out" | grep -c '^not ok ')
        [ "$rc" -eq 0 ] && [ "$bad" -eq 0 ] && [ "$points" -gt 5 ]
        tap_ok $? "$prog at $np ranks: $points checks passed, $bad failed (exit $rc)"
        [ "$rc" -eq 0 ] && [ "$bad" -eq 0 ] || tap_diag "$out"
    done
done
# hang_case MODE PATTERN NAME: test_comm_nccl_fake MODE at 2 ranks (1 s timeout) must end
# the job with exit code 4 within seconds, a rank's report matching PATTERN
hang_case() {
    t0=$(date +%s)
    out=$(timeout 60 sh -c "mpirun --oversubscribe -np 2 '$MIST_BUILDDIR/tests/test_comm_nccl_fake' $1 </dev/null" 2>&1)
    rc=$?
    dt=$(( $(date +%s) - t0 ))
    reports=$(printf '%s\n' "$out" | grep -c "$2")
    [ "$rc" -eq 4 ] && [ "$reports" -ge 1 ] && [ "$dt" -lt 30 ]
    tap_ok $? "$3: exit 4 in ${dt} s with the hang report ($reports rank(s) reported; rc $rc)"
    [ "$rc" -eq 4 ] || tap_diag "$out"
}
# a device collective that never completes on the NCCL path: every rank reports it, naming the
# operation and the context
hang_case --hang 'hang test: NCCL all_reduce of 4 f32 elements, on a group of 2 ranks .* has not completed after 1 s' \
    "NCCL path, a collective that never completes"
# a member that never reaches a communicator's creation: the non-blocking ncclCommInitRankConfig
# (or the unique id's broadcast before it) runs into the timeout on the rank that did
hang_case --hang-init 'init test: .*on a group of 2 ranks .* has not \(completed\|finished\) after 1 s' \
    "NCCL path, a member that never joins the communicator's creation"
# a destroy whose collective half (ncclCommFinalize) never finishes: the timeout ends the job
hang_case --hang-destroy 'destroy test: ncclCommFinalize (destroying the NCCL communicators), on a group of 2 ranks .* has not finished after 1 s' \
    "NCCL path, a communicator's destroy that never finishes"

# NCCL itself (builds with NCCL): runs where every rank has a GPU of its own, else skips saying why
if [ -x "$MIST_BUILDDIR/tests/test_comm_nccl_gpu" ]; then
    for np in 1 2; do
        out=$(timeout 300 sh -c "mpirun --oversubscribe -np $np '$MIST_BUILDDIR/tests/test_comm_nccl_gpu' </dev/null" 2>&1)
        rc=$?
        points=$(printf '%s\n' "$out" | grep -c '^ok [0-9]* - ')
        bad=$(printf '%s\n' "$out" | grep -c '^not ok ')
        skip=$(printf '%s\n' "$out" | sed -n 's/^ok [0-9]* # SKIP //p' | head -1)
        [ "$rc" -eq 0 ] && [ "$bad" -eq 0 ] && { [ -n "$skip" ] || [ "$points" -gt 100 ]; }
        if [ -n "$skip" ] && [ "$bad" -eq 0 ]; then tap_skip "test_comm_nccl_gpu at $np ranks: $skip"
        else tap_ok $? "test_comm_nccl_gpu at $np ranks: $points checks passed, $bad failed (exit $rc)"; fi
        [ "$rc" -eq 0 ] && [ "$bad" -eq 0 ] || tap_diag "$out"
    done
fi
tap_end
