#!/bin/sh
# Builds the CUDA backend, checks it against the CPU backend and times it, in
# one go, on a GPU machine that may lack MPI, inih and lp_solve: the objects
# are compiled with nvcc and gcc directly (no configure). Then runs the
# end-to-end training benchmark (benchmarks/gpu/train.sh: cpu/cuda loss
# tracking, GPT-2 124M and GPT-3 1.3B throughput, MFU and memory).
#   benchmarks/gpu/run.sh [OUTDIR]    (default OUTDIR: build-gpu/)
# Writes OUTDIR/wgmma_probe.log, OUTDIR/test.log, OUTDIR/sanitizer.log, OUTDIR/bench.log, OUTDIR/bench.json,
# OUTDIR/bench_train.log, OUTDIR/bench_train.json.
# A kept OUTDIR is rebuilt incrementally, and not at all when its programs were built from the
# same sources (benchmarks/gpu/fresh.sh): build here with BUILD_ONLY=1, carry OUTDIR to the GPU
# machine, and no device time goes to compiling.
# Env: CUDA_HOME (/usr/local/cuda), CUDA_ARCH (sm_90a: Hopper, with the wgmma kernels), SANITIZE=0 skips compute-sanitizer,
# TRAIN=0 skips the training benchmark, RANKS=0 skips benchmarks/gpu/ranks.sh (run when gpu-debs/ and a
# mist-train are in the tree), INIH_DIR (see train.sh), BUILD_ONLY=1 compiles
# and links everything (train.sh's programs too unless TRAIN=0) and runs nothing.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$top/build-gpu}
mkdir -p "$out/obj"
cuda=${CUDA_HOME:-/usr/local/cuda}
arch=${CUDA_ARCH:-sm_90a}
nvcc="$cuda/bin/nvcc"
cflags="-std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Wno-unused-parameter -I$top"

. "$top/benchmarks/gpu/fresh.sh"
if prebuilt "$out/run.sources.sha256" "$out/test_cuda_kernels" "$out/bench_kernels" "$out/wgmma_probe"; then
    echo "== build: the programs in $out were built from these sources ($arch): not rebuilt"
else
    echo "== build ($arch)"
    # a second call (OUTDIR kept) recompiles only what changed: device time is scarce
    fresh_arch "$out" "$arch"
    objs=""; pids=""
    for f in "$top"/kernels/cuda/*.cu; do
        build "$out/obj/cuda_$(basename "$f" .cu).o" "$f" "$nvcc" -arch="$arch" -O3 -std=c++17 -I"$top"
    done
    for f in "$top"/kernels/cpu/*.c; do
        # shellcheck disable=SC2086
        build "$out/obj/cpu_$(basename "$f" .c).o" "$f" gcc $cflags
    done
    wait_builds
    libs="-L$cuda/lib64 -Wl,-rpath,$cuda/lib64 -lcublasLt -lcudart_static -ldl -lpthread -lrt -lstdc++ -lm"
    gcc $cflags -o "$out/test_cuda_kernels" "$top/tests/test_cuda_kernels.c" $objs $libs
    gcc $cflags -o "$out/bench_kernels" "$top/benchmarks/gpu/bench_kernels.c" $objs $libs
    # the wgmma layout probe needs the architecture-specific sm_90a target
    "$nvcc" -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -I"$top" -o "$out/wgmma_probe" \
        "$top/benchmarks/gpu/wgmma_probe.cu" 2>"$out/wgmma_probe.build.log" ||
        { cat "$out/wgmma_probe.build.log" >&2; echo "$0: the wgmma probe did not compile" >&2; exit 1; }
    sources_hash >"$out/run.sources.sha256"
fi

if [ "${BUILD_ONLY:-0}" = 1 ]; then
    [ "${TRAIN:-1}" != 0 ] && FROM_RUN_SH=1 sh "$top/benchmarks/gpu/train.sh" "$out"
    exit 0
fi

status=0
# informational (the attention wgmma checks below are the pass/fail): which descriptor layouts this GPU reads as assumed
echo "== wgmma layout probe (benchmarks/gpu/wgmma_probe.cu)"
"$out/wgmma_probe" 2>&1 | tee "$out/wgmma_probe.log" || true

echo "== correctness vs the CPU backend"
"$out/test_cuda_kernels" 2>&1 | tee "$out/test.log" || status=1
if grep -q '^not ok' "$out/test.log"; then status=1; fi
# on a Hopper GPU with a build for sm_90a the wgmma checks must run, not skip
if [ "$arch" = sm_90a ] && nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | grep -q '^9\.' &&
    grep -q 'needs the wgmma kernels' "$out/test.log"; then
    echo "$0: a Hopper GPU, but the wgmma attention checks were skipped (see $out/test.log)" >&2
    status=1
fi

if [ "${SANITIZE:-1}" != 0 ] && [ -x "$cuda/bin/compute-sanitizer" ]; then
    echo "== compute-sanitizer (memcheck) on the correctness test"
    "$cuda/bin/compute-sanitizer" --tool memcheck --error-exitcode 9 "$out/test_cuda_kernels" >"$out/sanitizer.log" 2>&1 \
        && echo "memcheck: clean" || { echo "memcheck: errors (see $out/sanitizer.log)"; tail -30 "$out/sanitizer.log"; status=1; }
fi

echo "== timings"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader 2>/dev/null || true
"$out/bench_kernels" --json "$out/bench.json" 2>&1 | tee "$out/bench.log"

if [ "${TRAIN:-1}" != 0 ]; then
    echo "== end-to-end training (benchmarks/gpu/train.sh)"
    FROM_RUN_SH=1 sh "$top/benchmarks/gpu/train.sh" "$out" || status=1
fi

# several ranks sharing the GPU(s), when the Open MPI packages and a CUDA build of mist-train
# were carried here (benchmarks/gpu/ranks.sh; docs/cuda-backend.md)
if [ "${RANKS:-1}" != 0 ] && [ -d "$top/gpu-debs" ] && [ -x "$top/mist-train" ]; then
    echo "== several ranks (benchmarks/gpu/ranks.sh)"
    sh "$top/benchmarks/gpu/ranks.sh" run "$top/gpu-debs" "$out/ranks" "$top/mist-train" || status=1
fi
exit $status
