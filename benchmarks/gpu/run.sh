#!/bin/sh
# The GPU runbook: builds the CUDA backend's programs, then measures what
# matters most first, each step under its own timeout inside one time budget,
# on a GPU machine that may lack MPI, inih and lp_solve (the objects are
# compiled with nvcc and gcc directly, no configure).
#   benchmarks/gpu/run.sh [OUTDIR]    (default OUTDIR: build-gpu/)
# Build here with BUILD_ONLY=1 and carry OUTDIR to the GPU machine: a kept
# OUTDIR built from the same sources is not rebuilt (benchmarks/gpu/fresh.sh),
# so no device time goes to compiling.
# The steps, by value (the list at the end: one `step` line each; limits in seconds, adding up
# to BUDGET_S; DRY_RUN=1 prints them and their sum):
#   env        10  device, driver, CUDA; NCCL and cuDNN libraries found (PyTorch's pip wheels)
#   kernels    25  every CUDA kernel against the CPU backend (test_cuda_kernels; 11 s on an H200)
#   gpt2       80  GPT-2 124M training per attention variant of ATTENTION: ms/iter, MFU, peak memory,
#                  predicted vs measured time (with this GPU's op table: the only step that measures it)
#   gpt3       50  the same for GPT-3 1.3B, one variant: the faster in gpt2 (--quick, no op table; its
#                  host-side weight init, on every core, is most of it)
#   vocab      25  GPT-2 124M with the vocabulary not padded (gpt2-124m-v50257), the faster variant:
#                  last.json's vocab_pad_ab sets it beside gpt2's padded row
#   attention  30  attention kernels timed (bench_kernels --quick --only attention; T=2048, HS=128 of
#                  every variant first: own, wide, wgmma, cuDNN)
#   nccl       15  the NCCL comm backend on NCCL itself, one rank (nccl_check)
#   timeline   30  one GPT-2 step with the runtime's marks, the faster variant (bench_train --timeline:
#                  Chrome trace timeline.json; phases, launch gaps, host syncs)
#   sanitizer  40  compute-sanitizer memcheck on the newest kernels' checks (one cuDNN attention
#                  shape, lean, embedding: each cuDNN shape is a plan compile under memcheck)
#   tracking   20  cpu vs cuda loss tracking of small models with the deterministic kernels (base, and
#                  wgmma where it runs: bench_train checks checkpointed = plain bit for bit, which
#                  cuDNN's atomic dQ sums need not meet)
#   ranks      60  several ranks on the GPU (benchmarks/gpu/ranks.sh; only with gpu-debs/ and mist-train)
#   nsys       35  the timeline's step under nsys profile, its stats in the log (only where nsys is;
#                  last: a profiler that cannot start or is slow costs nothing before it)
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$top/build-gpu}
mkdir -p "$out/obj"
cuda=${CUDA_HOME:-/usr/local/cuda}
arch=${CUDA_ARCH:-sm_90a}
nvcc="$cuda/bin/nvcc"
cflags="-std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Wno-unused-parameter -I$top"

. "$top/benchmarks/gpu/fresh.sh"
# PyTorch's wheels bring NCCL and cuDNN to the GPU machine (no MPI there): their folders go on
# LD_LIBRARY_PATH first, so that the carried programs find them (and are not rebuilt for want of them)
libdirs=$(find /opt/torch/.venv \( -name 'libnccl.so*' -o -name 'libcudnn.so*' \) 2>/dev/null |
    sed 's|/[^/]*$||' | sort -u | tr '\n' ':')
export LD_LIBRARY_PATH="${libdirs}${LD_LIBRARY_PATH:-}"
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
    gcc $cflags -o "$out/test_cuda_kernels" "$top/tests/test_cuda_kernels.c" "$top/tests/cuda_check.c" \
        "$top/tests/cuda_checks_attention.c" $objs $libs
    gcc $cflags -o "$out/bench_kernels" "$top/benchmarks/gpu/bench_kernels.c" $objs $libs
    # the wgmma layout probe needs the architecture-specific sm_90a target
    "$nvcc" -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -I"$top" -o "$out/wgmma_probe" \
        "$top/benchmarks/gpu/wgmma_probe.cu" 2>"$out/wgmma_probe.build.log" ||
        { cat "$out/wgmma_probe.build.log" >&2; echo "$0: the wgmma probe did not compile" >&2; exit 1; }
    sources_hash >"$out/run.sources.sha256"
fi

# nccl_check: the NCCL backend on NCCL itself, built where nccl.h is (here); on the GPU machine
# it is carried, and runs with the NCCL library of PyTorch's wheel (see `libraries` below)
nccl_home=${NCCL_HOME:-$cuda}
nccl_srcs="$top/benchmarks/gpu/nccl_check.c $top/runtime/comm_nccl.c $top/runtime/comm_nccl_link.c $top/runtime/comm_wrap.c"
if [ "$(cat "$out/nccl.sources.sha256" 2>/dev/null)" = "$(sources_hash)" ] && [ -x "$out/nccl_check" ]; then
    echo "== build: nccl_check in $out was built from these sources: not rebuilt"
elif [ -f "$nccl_home/include/nccl.h" ]; then
    nlib=$(dirname "$(ls "$nccl_home"/lib*/libnccl.so* 2>/dev/null | head -1)")
    # shellcheck disable=SC2086
    gcc $cflags -I"$nccl_home/include" -I"$cuda/include" -o "$out/nccl_check" $nccl_srcs "$out"/obj/cuda_*.o \
        "$out"/obj/cpu_*.o -L"$nlib" -lnccl -L"$cuda/lib64" -Wl,-rpath,"$cuda/lib64" -lcublasLt -lcudart_static \
        -ldl -lpthread -lrt -lstdc++ -lm
    sources_hash >"$out/nccl.sources.sha256"
else
    echo "== build: no $nccl_home/include/nccl.h: nccl_check not built (NCCL_HOME=...)"
fi

if [ "${BUILD_ONLY:-0}" = 1 ]; then
    [ "${TRAIN:-1}" != 0 ] && FROM_RUN_SH=1 sh "$top/benchmarks/gpu/train.sh" "$out"
    exit 0
fi
[ -x "$out/bench_train" ] || FROM_RUN_SH=1 BUILD_ONLY=1 sh "$top/benchmarks/gpu/train.sh" "$out" || true

# ---- the runbook -----------------------------------------------------------------------
budget=${BUDGET_S:-420}
min_step=${MIN_STEP_S:-20}
attention=${ATTENTION:-cudnn,wgmma}
t_start=$(date +%s)
status=0
planned=0
[ "${DRY_RUN:-0}" = 1 ] || : >"$out/steps.tsv"
# a kept OUTDIR: the last run's results go (a step of this run that does not run leaves none)
[ "${DRY_RUN:-0}" = 1 ] || (cd "$out" && rm -f env.log kernels.log gpt2.log gpt3.log vocab.log attention.log nccl.log \
    timeline.log timeline.json timeline.nsys-rep timeline.sqlite sanitizer.log tracking.log ranks.log train_*.json \
    bench.json last.json)

# keep: what the steps left so far to $OUT (when set): last.json and steps.tsv, and every log
# and JSON in $OUT/gpu-logs.tgz (few files: the device tool brings back 8 at most)
keep() {
    [ -n "${OUT:-}" ] || return 0
    mkdir -p "$OUT"
    (cd "$out" && tar czf "$OUT/gpu-logs.tgz.part" -- *.log *.json steps.tsv env.txt 2>/dev/null) || true
    mv -f "$OUT/gpu-logs.tgz.part" "$OUT/gpu-logs.tgz" 2>/dev/null || true
    cp -f "$out/last.json" "$out/steps.tsv" "$OUT/" 2>/dev/null || true
}
# a JSON file cut short (its writer killed by the timeout) is closed, so that it parses
close_json() {
    [ -s "$1" ] || return 0
    tail -c 4 "$1" | grep -q ']}' || printf '\n]}\n' >>"$1"
}
# step NAME LIMIT COMMAND: runs COMMAND (sh -c) with its output in OUTDIR/NAME.log, for at
# most LIMIT seconds and what is left of the budget; records it, keeps its files
step() {
    name=$1 limit=$2 cmd=$3
    case " ${STEPS:-$name} " in *" $name "*) ;; *) return 0 ;; esac
    planned=$((planned + $2))
    left=$(( budget - ($(date +%s) - t_start) ))
    [ "$limit" -le "$left" ] || limit=$left
    if [ "${DRY_RUN:-0}" = 1 ]; then
        printf '%-10s %4s s  %s\n' "$name" "$2" "$cmd"
        return 0
    fi
    if [ "$left" -lt "$min_step" ] && [ "$left" -lt "$2" ]; then
        printf '%s\t0\t0\tskipped: %s s of the budget left\n' "$name" "$left" >>"$out/steps.tsv"
        echo "== $name: skipped ($left s of the budget left)"
        return 0
    fi
    echo "== $name (at most $limit s): $cmd"
    t0=$(date +%s)
    rc=0
    timeout -k 5 "$limit" sh -c "$cmd" >"$out/$name.log" 2>&1 || rc=$?
    dt=$(( $(date +%s) - t0 ))
    verdict=ok
    [ "$rc" = 0 ] || verdict="failed (exit $rc)"
    [ "$rc" != 124 ] && [ "$rc" != 137 ] || verdict="cut at $limit s"
    grep -q '^not ok' "$out/$name.log" && verdict="$verdict, checks failed"
    grep -q 'SKIP no GPU' "$out/$name.log" && verdict="$verdict, no GPU"
    [ "$verdict" = ok ] || status=1
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$dt" "$verdict" >>"$out/steps.tsv"
    tail -5 "$out/$name.log"
    echo "== $name: $verdict in $dt s"
    for j in "$out"/*.json; do close_json "$j"; done
    sh "$top/benchmarks/gpu/last_json.sh" "$out" >"$out/last.json" || true
    keep
}
# the attention variant of the gpt2 step's fastest GPT-2 124M row; the first of ATTENTION
# when there is none (the step did not run, or DRY_RUN)
faster() {
    f=$(awk -F'"' '/"model": "gpt2-124m"/ {
        a = ""; ms = ""
        for (i = 1; i < NF; i++) {
            if ($i == "attention") a = $(i + 2)
            if ($i == "ms_per_iter") { ms = $(i + 1); sub(/^: */, "", ms); sub(/,.*/, "", ms) }
        }
        if (a != "" && ms + 0 > 0 && (best == "" || ms + 0 < best + 0)) { best = ms; fa = a }
    } END { print fa }' "$out/train_gpt2.json" 2>/dev/null || true)
    echo "${f:-${attention%%,*}}"
}

{
    echo "device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
    echo "driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
    echo "cuda_driver_api=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)"
    echo "cuda_build=$("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p' | head -1)"
    echo "arch=$arch"
    echo "library_dirs=$libdirs"
    echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
} >"$out/env.txt"

bt="'$out/bench_train'"
step env 10 "cat '$out/env.txt'; nvidia-smi; find /opt/torch/.venv \\( -name 'libnccl.so*' -o -name 'libcudnn*.so*' \\) 2>/dev/null; ldd '$out/nccl_check' 2>/dev/null | grep -i nccl"
step kernels 25 "'$out/test_cuda_kernels'"
step gpt2 80 "$bt --only gpt2-124m --attention $attention --json '$out/train_gpt2.json'"
fast=$(faster)
step gpt3 50 "$bt --only gpt3-1.3b --quick --no-op-table --attention $fast --json '$out/train_gpt3.json'"
step vocab 25 "$bt --only gpt2-124m-v50257 --no-op-table --attention $fast --json '$out/train_vocab.json'"
step attention 30 "'$out/bench_kernels' --quick --only attention --json '$out/bench.json'"
step nccl 15 "'$out/nccl_check' --timeout 10"
# one GPT-2 step with the runtime's marks (bench_train --timeline)
step timeline 30 "$bt --only gpt2-124m --quick --no-op-table --attention $fast --timeline '$out/timeline.json'"
# memcheck is slow: the kernels added since the last sanitizer run only (test_cuda_kernels' patterns)
if [ -x "$cuda/bin/compute-sanitizer" ] || [ "${DRY_RUN:-0}" = 1 ]; then
    step sanitizer 40 "'$cuda/bin/compute-sanitizer' --tool memcheck --error-exitcode 9 '$out/test_cuda_kernels' 'attention cudnn B=1' lean embedding"
else
    echo "== sanitizer: no $cuda/bin/compute-sanitizer"
fi
step tracking 20 "$bt --only tracking --attention base,wgmma"
if { [ -d "$top/gpu-debs" ] && [ -x "$top/mist-train" ]; } || [ "${DRY_RUN:-0}" = 1 ]; then
    step ranks 60 "sh '$top/benchmarks/gpu/ranks.sh' run '$top/gpu-debs' '$out/ranks' '$top/mist-train'"
fi
# the same GPT-2 step under nsys, where it is found: kernel-by-kernel times and the API calls
nsys=$(command -v nsys 2>/dev/null || true)
[ -n "$nsys" ] || [ ! -x "$cuda/bin/nsys" ] || nsys="$cuda/bin/nsys"
if [ -n "$nsys" ] || [ "${DRY_RUN:-0}" = 1 ]; then
    step nsys 35 "'${nsys:-nsys}' profile --trace=cuda --sample=none --cpuctxsw=none --stats=true --force-overwrite=true \
-o '$out/timeline' $bt --only gpt2-124m --quick --no-op-table --attention $fast"
else
    echo "== nsys: not found"
fi

if [ "${DRY_RUN:-0}" = 1 ]; then
    printf '%-10s %4s s  of BUDGET_S %s\n' total "$planned" "$budget"
    [ "$planned" -le "$budget" ] ||
        echo "$0: the steps' limits add up to $planned s, over BUDGET_S=$budget: the last ones get what is left"
    exit 0
fi
echo "== summary ($(( $(date +%s) - t_start )) s of $budget)"
column -t -s "$(printf '\t')" "$out/steps.tsv" 2>/dev/null || cat "$out/steps.tsv"
# the tree's copy (to commit) only from a run that had a GPU
[ -z "$(sed -n 's/^device=//p' "$out/env.txt")" ] || cp -f "$out/last.json" "$top/benchmarks/gpu/last.json" 2>/dev/null || true
keep
exit $status
