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

# Numbers in checks. awk reads an empty or non-numeric value as 0, so a check
# such as awk -v d="$diff" 'BEGIN { exit !(d <= 1e-5) }' passes when $diff is
# missing (a run that crashed printed nothing). num_ok checks its values first.
# num_re: a decimal number, optionally signed, with an optional exponent (no
# nan, no inf); awk programs that read numbers from files match fields with it.
num_re='^[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$'
# num_ok EXPR NAME=VALUE...: succeeds when every VALUE is a number and the awk
# expression EXPR over the NAMEs holds, e.g. num_ok 'd <= t' d="$diff" t=1e-5;
# a value that is not a number fails it with a diagnostic naming it.
num_ok() {
    _num_expr=$1
    shift
    _num_n=$#
    for _num_kv in "$@"; do
        case $_num_kv in
        *=*) ;;
        *) tap_diag "num_ok: '$_num_kv' is not NAME=VALUE"; return 2 ;;
        esac
        _num_v=${_num_kv#*=}
        case $_num_v in *'
'*) _num_v=x ;; esac  # one line: grep would accept a number on any of several
        if ! printf '%s\n' "$_num_v" | grep -Eqx -- "$num_re"; then
            tap_diag "num_ok: ${_num_kv%%=*} = '${_num_kv#*=}' is not a number (checking $_num_expr)"
            return 1
        fi
        set -- "$@" -v "$_num_kv"
    done
    shift "$_num_n"
    awk "$@" "BEGIN { exit !($_num_expr) }"
}
