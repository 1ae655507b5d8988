#!/bin/sh
# Process grid layouts and groups at 1, 2, 4 and 8 ranks (tests/test_grid.c
# checks every plan that fits the rank count).
. "$MIST_SRCDIR/tests/lib.sh"
for np in 1 2 4 8; do
    out=$(timeout 120 sh -c "mpirun --oversubscribe -np $np '$MIST_BUILDDIR/tests/test_grid' </dev/null" 2>&1)
    rc=$?
    points=$(printf '%s\n' "$out" | grep -c '^ok ')
    bad=$(printf '%s\n' "$out" | grep -c '^not ok ')
    [ "$rc" -eq 0 ] && [ "$bad" -eq 0 ] && [ "$points" -gt 5 ]
    tap_ok $? "test_grid at $np ranks: $points checks passed, $bad failed (exit $rc)"
    [ "$rc" -eq 0 ] && [ "$bad" -eq 0 ] || tap_diag "$out"
done
tap_end
