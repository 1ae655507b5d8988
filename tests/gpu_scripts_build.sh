#!/bin/sh
# The GPU scripts (benchmarks/gpu/run.sh and train.sh) build their programs
# with nvcc and gcc directly, from their own lists of sources, on machines
# that have a GPU but may lack MPI: a source file added to the project and
# missing from a list only shows there, at link time. This builds both with
# BUILD_ONLY=1 (compile and link, run nothing), so it fails here instead.
# A copy of that build (files newer than their sources, as after carrying it
# to a GPU machine) is used as it is: device time does not go to compiling.
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
# nccl_check (the NCCL backend on NCCL itself, one rank) where NCCL's header is
progs="test_cuda_kernels bench_kernels bench_train"
rebuilt_lines=2
if [ -f "$cuda/include/nccl.h" ]; then progs="$progs nccl_check"; rebuilt_lines=3; fi
for prog in $progs; do
    [ -x "$tmp/out/$prog" ] || missing="$missing $prog"
done
[ $rc -eq 0 ] && [ -z "$missing" ]
tap_ok $? "benchmarks/gpu/run.sh BUILD_ONLY=1 builds $progs (rc $rc)"
[ $rc -eq 0 ] && [ -z "$missing" ] || tap_diag "missing:$missing" "$(tail -20 "$tmp/log")"

# the copy: every file newer than the sources, yet the hash of the sources decides
cp -r "$tmp/out" "$tmp/copy"
CUDA_HOME="$cuda" BUILD_ONLY=1 sh "$MIST_SRCDIR/benchmarks/gpu/run.sh" "$tmp/copy" >"$tmp/log2" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q 'not rebuilt' "$tmp/log2" && [ "$(grep -c 'not rebuilt' "$tmp/log2")" -eq "$rebuilt_lines" ] &&
    cmp -s "$tmp/out/bench_train" "$tmp/copy/bench_train" && cmp -s "$tmp/out/test_cuda_kernels" "$tmp/copy/test_cuda_kernels"
tap_ok $? "a copy of the build is used as it is: run.sh and train.sh say 'not rebuilt' ($rebuilt_lines times), the programs are unchanged (rc $rc)"
[ $rc -eq 0 ] || tap_diag "$(tail -20 "$tmp/log2")"

# the hash follows the sources' contents, not their times
mkdir -p "$tmp/top/kernels"
echo 'int a;' >"$tmp/top/kernels/a.c"
h1=$(top="$tmp/top" arch=sm_90a; . "$MIST_SRCDIR/benchmarks/gpu/fresh.sh"; sources_hash)
touch -d '2001-01-01' "$tmp/top/kernels/a.c"
h2=$(top="$tmp/top" arch=sm_90a; . "$MIST_SRCDIR/benchmarks/gpu/fresh.sh"; sources_hash)
echo 'int b;' >"$tmp/top/kernels/a.c"
h3=$(top="$tmp/top" arch=sm_90a; . "$MIST_SRCDIR/benchmarks/gpu/fresh.sh"; sources_hash)
h4=$(top="$tmp/top" arch=sm_90; . "$MIST_SRCDIR/benchmarks/gpu/fresh.sh"; sources_hash)
[ -n "$h1" ] && [ "$h1" = "$h2" ] && [ "$h2" != "$h3" ] && [ "$h3" != "$h4" ]
tap_ok $? "the sources' hash: the same after touch, another after an edit or for another CUDA_ARCH"
# the runbook's step list: every step named, in the order of value, with its limit
list=$(DRY_RUN=1 CUDA_HOME="$cuda" sh "$MIST_SRCDIR/benchmarks/gpu/run.sh" "$tmp/copy" 2>&1 | grep -E '^[a-z0-9]+ +[0-9]+ s ' | awk '{print $1}' | tr '\n' ' ')
case "$list" in "env kernels gpt2 gpt3 attention nccl tracking "*) true ;; *) false ;; esac
tap_ok $? "DRY_RUN=1 lists the steps by value: $list"
tap_end
