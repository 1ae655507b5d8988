#!/bin/sh
# The attention kernels' choice in mist-train ([runtime] attention, MIST_CUDA_ATTENTION over
# it) and the predicted device memory's backend line, on the CPU backend: it has one attention
# kernel, so a choice other than auto is accepted and ignored with one note; its reserved
# device bytes are 0 (its device is the arena), so predicted total = the arena's prediction =
# the measured peak. A GPU run says what it runs instead (docs/cuda-backend.md).
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
TRAIN="$MIST_BUILDDIR/mist-train"
INI="$MIST_SRCDIR/examples/tiny.ini"
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-attention-test.XXXXXX")
trap 'rm -rf "$W"' EXIT
SHORT="-o train.steps=2 -o log.interval=1000 -o data.val_interval=0"
export MIST_DEVICE=cpu  # the CPU backend even where a GPU answers: the lines below are its
run() {  # run NAME ARGS...: 4 ranks of the tiny GPT, output in $W/NAME.out, exit status returned
    name=$1; shift
    # shellcheck disable=SC2086
    mist_mpirun -np 4 -x MIST_DEVICE -x MIST_CUDA_ATTENTION "$TRAIN" "$INI" $SHORT -o log.summary="$W/$name.json" \
        "$@" >"$W/$name.out" 2>&1
}
note='not applicable to the cpu backend (it has one attention kernel); ignored'

unset MIST_CUDA_ATTENTION
run auto; rc=$?
[ $rc -eq 0 ] && ! grep -q 'attention' "$W/auto.out"
tap_ok $? "the default (auto) trains on the CPU backend without a note (exit $rc)"
[ $rc -eq 0 ] || tap_diag "$(tail -5 "$W/auto.out")"

run cudnn -o runtime.attention=cudnn; rc=$?
n=$(grep -c "\[runtime\] attention = cudnn: $note" "$W/cudnn.out")
[ $rc -eq 0 ] && [ "$n" -eq 1 ]
tap_ok $? "[runtime] attention = cudnn: accepted, one note that the CPU backend ignores it (exit $rc, $n notes)"

MIST_CUDA_ATTENTION=cudnn run env -o runtime.attention=base; rc=$?
n=$(grep -c "MIST_CUDA_ATTENTION=cudnn (over \[runtime\] attention): $note" "$W/env.out")
[ $rc -eq 0 ] && [ "$n" -eq 1 ]
tap_ok $? "MIST_CUDA_ATTENTION=cudnn is accepted by mist-train and overrides the key, one note (exit $rc, $n notes)"
[ $rc -eq 0 ] || tap_diag "$(tail -5 "$W/env.out")"

run bad -o runtime.attention=flash; rc=$?
n=$(grep -c 'runtime.attention=flash.*\[runtime\] attention = flash.*allowed: auto|base|wide|wgmma|cudnn' "$W/bad.out")
[ $rc -eq 2 ] && [ "$n" -eq 1 ]
tap_ok $? "a bad value exits 2 with one message naming the key and the allowed values (exit $rc, $n)"

# predicted device memory = arena + backend reserved (0 here) = the arena's predicted peak = measured
line=$(grep 'predicted device memory on rank 0:' "$W/cudnn.out")
total=$(printf '%s' "$line" | sed -n 's/.* = [0-9.]* MiB (\([0-9]*\) B)$/\1/p')
arena=$(grep 'predicted peak per rank: device' "$W/cudnn.out" | sed -n 's/.*device [^(]*(\([0-9]*\) B).*/\1/p')
measured=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['ranks'][0]['measured_device_peak_bytes'])" \
    "$W/cudnn.json" 2>/dev/null)
printf '%s' "$line" | grep -q 'backend reserved 0.0 MiB' && [ -n "$total" ] && [ "$total" = "$arena" ] &&
    [ "$total" = "$measured" ]
tap_ok $? "the predicted device memory has the backend's line: arena + reserved 0 = $total B = measured $measured B"
[ -n "$total" ] || tap_diag "$line"
tap_end
