#!/bin/sh
# End-to-end training on one GPU with no MPI, inih or lp_solve installed:
# compiles the runtime's model code, the cost model and both backends with
# nvcc/gcc directly and runs benchmarks/gpu/bench_train (tracking vs the CPU
# backend, then GPT-2 124M and GPT-3 1.3B throughput, MFU and memory).
#   benchmarks/gpu/train.sh [OUTDIR]    (default OUTDIR: build-gpu/)
# Env: CUDA_HOME (/usr/local/cuda), CUDA_ARCH (sm_90a), INIH_DIR (a folder with
# include/ini.h and lib/libinih.a when inih is not installed), QUICK=1,
# ATTENTION (the attention kernels to train with, in turn: default base,wide,wgmma;
# wgmma is skipped where the build or GPU lacks it),
# BUILD_ONLY=1 (compile and link, run nothing: tests/gpu_scripts_build.sh).
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$top/build-gpu}
mkdir -p "$out/obj-train"
cuda=${CUDA_HOME:-/usr/local/cuda}
arch=${CUDA_ARCH:-sm_90a}
# inih linked statically where its archive is installed, so that the program runs on a GPU
# machine without inih (built here, carried there)
inc=""; inih="-linih"
if [ -n "${INIH_DIR:-}" ]; then inc="-I$INIH_DIR/include"; inih="$INIH_DIR/lib/libinih.a"
elif [ -f "$(gcc -print-file-name=libinih.a)" ]; then inih=$(gcc -print-file-name=libinih.a); fi
cflags="-std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Wno-unused-parameter -I$top $inc"
. "$top/benchmarks/gpu/fresh.sh"
if prebuilt "$out/train.sources.sha256" "$out/bench_train"; then
    echo "== build: bench_train in $out was built from these sources ($arch): not rebuilt"
else
    fresh_arch "$out" "$arch"
    objs=""; pids=""
    for f in "$top"/kernels/cuda/*.cu; do
        # run.sh has just compiled the same files with the same flags into $out/obj
        o="$out/obj/cuda_$(basename "$f" .cu).o"
        if [ "${FROM_RUN_SH:-0}" = 1 ] && [ -f "$o" ]; then objs="$objs $o"
        else build "$out/obj-train/cuda_$(basename "$f" .cu).o" "$f" "$cuda/bin/nvcc" -arch="$arch" -O3 -std=c++17 -I"$top"; fi
    done
    for f in "$top"/kernels/cpu/*.c "$top"/models/*.c "$top"/expr/*.c "$top"/base/model_family.c "$top"/base/launcher_rank.c "$top"/base/excerpt.c \
             "$top"/base/profile.c "$top"/base/profile_presets.c "$top"/planner/optable.c "$top"/planner/optable_report.c "$top"/planner/stage_model.c \
             "$top"/planner/cost_terms.c "$top"/planner/memory.c "$top"/planner/overlap.c "$top"/planner/schedule.c "$top"/planner/analyze.c \
             "$top"/runtime/arena.c "$top"/runtime/optimizer.c "$top"/runtime/params.c "$top"/runtime/model_memory.c "$top"/runtime/model_runtime.c "$top"/runtime/model_sp.c "$top"/runtime/zero.c \
             "$top"/runtime/shard.c "$top"/runtime/fileutil.c "$top"/runtime/calibrate.c "$top"/runtime/tp_shard.c "$top"/runtime/pipeline_schedule.c \
             "$top"/runtime/trace_measure.c "$top"/planner/trace.c "$top"/planner/interleave.c "$top"/runtime/comm_hier.c \
             "$top"/runtime/zero_levels.c "$top"/base/paro.c "$top"/planner/cost_paro.c "$top"/runtime/backend_prepare.c; do
        # shellcheck disable=SC2086
        build "$out/obj-train/$(echo "${f#$top/}" | tr / _ | sed 's/\.c$/.o/')" "$f" gcc $cflags -fopenmp
    done
    wait_builds
    gcc $cflags -fopenmp -o "$out/bench_train" "$top/benchmarks/gpu/bench_train.c" "$top/benchmarks/gpu/bench_timeline.c" $objs $inih \
        -L"$cuda/lib64" -Wl,-rpath,"$cuda/lib64" -lcublasLt -lcudart_static -ldl -lpthread -lrt -lstdc++ -lm
    sources_hash >"$out/train.sources.sha256"
fi
[ "${BUILD_ONLY:-0}" = 1 ] && exit 0
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || true
# bench_train's exit status (not tee's) is the script's: nonzero when tracking or memory checks fail
rc=0
"$out/bench_train" ${QUICK:+--quick} --attention "${ATTENTION:-base,wide,wgmma}" --json "$out/bench_train.json" >"$out/bench_train.log" 2>&1 || rc=$?
cat "$out/bench_train.log"
exit $rc
