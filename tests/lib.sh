# TAP helpers for shell tests. Source it: . "$MIST_SRCDIR/tests/lib.sh"
: "${MIST_SRCDIR:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${MIST_BUILDDIR:=$MIST_SRCDIR}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
       OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
tap_n=0
tap_fail=0
tap_ok() {    # tap_ok CONDITION_STATUS "description"
    tap_n=$((tap_n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $tap_n - $2"; else echo "not ok $tap_n - $2"; tap_fail=$((tap_fail + 1)); fi
}
tap_skip() { tap_n=$((tap_n + 1)); echo "ok $tap_n # SKIP $1"; }  # tap_skip "why it cannot run here"
tap_diag() { printf '%s\n' "$@" | sed 's/^/# /'; }
tap_end() { echo "1..$tap_n"; [ "$tap_fail" -eq 0 ]; }
# mpirun with the flags the test machines need (root, oversubscription, no stdin)
mist_mpirun() { mpirun --oversubscribe "$@" </dev/null; }

# reap PID LIMIT: wait up to LIMIT seconds for the background job PID to end
# (kill -9 when it does not), then set rc (its exit status) and dt (seconds,
# one decimal, since the caller's t0=$(date +%s.%N))
reap() {
    i=0
    while kill -0 "$1" 2>/dev/null && [ $i -lt $(($2 * 10)) ]; do sleep 0.1; i=$((i + 1)); done
    kill -0 "$1" 2>/dev/null && kill -9 "$1"
    wait "$1"
    rc=$?
    dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}
