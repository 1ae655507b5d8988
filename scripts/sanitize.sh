#!/bin/sh
# A checking build: a copy of the release tree (make distdir) configured with
# --enable-sanitizers (ASan + UBSan) and without CUDA, in DIR (default
# /tmp/mist-sanitize); runs every C unit test (tests/test_*) and one 4-rank
# training run (data + tensor + pipeline parallelism, ZeRO, a checkpoint and a
# resume) under it, and replays the fuzz harnesses' seeds and regressions (tests/fuzz_replay.sh). Any sanitizer report fails it.
#   sh scripts/sanitize.sh [DIR]        (after scripts/build.sh)
set -u
cd "$(dirname "$0")/.."
top=$(pwd)
dir=${1:-/tmp/mist-sanitize}
rm -rf "$dir" && mkdir -p "$dir" || exit 1
make -s distdir distdir="$dir/src" >/dev/null || { echo "sanitize: make distdir failed"; exit 1; }
cd "$dir/src" || exit 1
./configure -q --enable-sanitizers --without-cuda >"$dir/configure.log" 2>&1 ||
    { tail -20 "$dir/configure.log"; echo "sanitize: configure failed"; exit 1; }
make -j"$(nproc)" >"$dir/build.log" 2>&1 || { tail -30 "$dir/build.log"; echo "sanitize: build failed"; exit 1; }
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
# Open MPI refuses root unless told (CI machines run as root)
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# (the C unit tests that are tests of their own: test_grid, test_comm and the NCCL stand-in's run
# under mpirun from tests/*.sh, which are not unit tests, and have no log of their own)
units=$(sed -n 's/^TESTS += //p' Makefile.am | tr ' ' '\n' | grep '^tests/test_' | grep -v 'cuda\|nccl_gpu' | tr '\n' ' ')
# the fuzz harnesses' replay of their seeds and regressions, under the sanitizers too
units="$units tests/fuzz_replay.sh"
# shellcheck disable=SC2086
make -j"$(nproc)" check TESTS="$units" >"$dir/check.log" 2>&1
status=$?
# one multi-rank training run: 2 stages x (dp 1, tp 2) with ZeRO and a resume under another plan
W="$dir/train"
mkdir -p "$W"
C="-o train.steps=4 -o train.global_batch=8 -o data.val_interval=2 -o checkpoint.dir=$W/ck -o checkpoint.interval=2"
# shellcheck disable=SC2086
mpirun --oversubscribe -np 4 ./mist-train examples/tiny.ini $C -o plan.stages=2 -o plan.G=2 -o stage.0.layers=1 \
    -o stage.0.dp=1 -o stage.0.tp=2 -o stage.0.b=4 -o stage.0.zero=1 -o stage.1.layers=1 -o stage.1.dp=1 \
    -o stage.1.tp=2 -o stage.1.b=4 >"$W/a.out" 2>&1 </dev/null || status=1
# shellcheck disable=SC2086
mpirun --oversubscribe -np 2 ./mist-train examples/tiny.ini $C -o train.steps=6 -o checkpoint.resume=1 \
    -o stage.0.dp=2 -o stage.0.b=4 -o stage.0.zero=2 >"$W/b.out" 2>&1 </dev/null || status=1
if grep -l 'ERROR: AddressSanitizer\|runtime error:' "$W"/*.out tests/*.log 2>/dev/null; then status=1; fi
passed=$(cat tests/*.trs 2>/dev/null | grep -c '^:test-result: PASS')
failed=$(cat tests/*.trs 2>/dev/null | grep -c '^:test-result: \(FAIL\|XPASS\|ERROR\)')
echo "sanitize: unit tests $passed passed, $failed failed; iterations logged by the training runs:" \
    "$(grep -c 'iteration  *[0-9]*/' "$W/a.out") and $(grep -c 'iteration  *[0-9]*/' "$W/b.out") (resumed)"
if [ $status -ne 0 ]; then
    for f in "$W"/*.out tests/*.log; do grep -q 'ERROR: AddressSanitizer\|runtime error:\|^not ok' "$f" 2>/dev/null && { echo "---- $f"; grep -m5 -A12 'ERROR: AddressSanitizer\|runtime error:\|^not ok' "$f"; }; done
    for f in "$W/a.out" "$W/b.out"; do echo "---- $f"; tail -n 5 "$f"; done
fi
cd "$top" && exit $status
