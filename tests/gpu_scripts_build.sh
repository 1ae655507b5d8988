#!/bin/sh
# The GPU scripts (benchmarks/gpu/run.sh and train.sh) build their programs
# with nvcc and gcc directly, from their own lists of sources, on machines
# that have a GPU but may lack MPI: a source file added to the project and
# missing from a list only shows there, at link time. This builds both with
# BUILD_ONLY=1 (compile and link, run nothing), so it fails here instead.
. "$MIST_SRCDIR/tests/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cuda=${MIST_CUDA_HOME:-/usr/local/cuda}
if [ ! -x "$cuda/bin/nvcc" ]; then
    echo "ok 1 # SKIP no nvcc at $cuda/bin/nvcc (configure --with-cuda=PATH)"
    echo "1..1"
    exit 0
fi
CUDA_HOME="$cuda" BUILD_ONLY=1 sh "$MIST_SRCDIR/benchmarks/gpu/run.sh" "$tmp/out" >"$tmp/log" 2>&1
rc=$?
missing=""
for prog in test_cuda_kernels bench_kernels bench_train; do
    [ -x "$tmp/out/$prog" ] || missing="$missing $prog"
done
[ $rc -eq 0 ] && [ -z "$missing" ]
tap_ok $? "benchmarks/gpu/run.sh BUILD_ONLY=1 builds test_cuda_kernels, bench_kernels and bench_train (rc $rc)"
[ $rc -eq 0 ] && [ -z "$missing" ] || tap_diag "missing:$missing" "$(tail -20 "$tmp/log")"
tap_end
