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
tap_end
