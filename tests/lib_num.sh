#!/bin/sh
# tests/lib.sh's num_ok, which every numeric check of the shell tests goes
# through: a value that is missing or not a number fails the check (awk alone
# reads it as 0, so "d <= tol" would pass on a run that printed nothing).
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"

num_ok 'd <= t' d=4e-6 t=1e-5 && num_ok 'a > b' a=-.5 b=-2 && num_ok 'x == 2000' x=+2E+3 &&
    ! num_ok 'd <= t' d=2e-5 t=1e-5
tap_ok $? "num_ok holds on numbers (4e-6 <= 1e-5, -.5 > -2, +2E+3 == 2000) and fails when the expression is false"

out=$(num_ok 'd <= t' d= t=1e-5)
[ $? -ne 0 ] && printf '%s' "$out" | grep -q "d = '' is not a number"
tap_ok $? "num_ok fails on an empty value, naming it (awk alone reads it as 0 <= 1e-5)"

bad=0
for v in null NaN nan inf -inf 1e 1.2.3 0x10 '1 2' "$(printf '1\n2')"; do
    num_ok 'd <= t || d > t' d="$v" t=1 >/dev/null && { bad=1; tap_diag "accepted '$v'"; }
done
tap_ok $bad "num_ok fails on values that are not one decimal number (null, NaN, inf, 1e, 0x10, two numbers)"
tap_end
