#!/bin/sh
# Makes, on a machine without a GPU, everything the GPU runbook needs, so that
# the GPU machine's time goes to measuring, and prints the one command to run
# there and the paths to copy along:
#   OUTDIR (build-gpu/)     the runbook's programs, built by run.sh BUILD_ONLY=1
#   gpu-debs/               Open MPI's Debian packages for the `ranks` step
#                           (benchmarks/gpu/ranks.sh fetch; needs apt-get and a network)
#   mist-train, tests/test_comm_nccl_gpu
#                           this tree's configured build (./configure found nvcc),
#                           for `ranks` (several ranks sharing the GPU, and NCCL itself)
#   sh benchmarks/gpu/prepare.sh [OUTDIR]
# Env: NO_FETCH=1 (no download: without gpu-debs/ the runbook skips `ranks`),
# BUDGET_S (run.sh's budget, 420 s: the printed time limit adds the build check and the
# copy of the logs), CARRY_LIMIT_MB (64: what one call may copy to the GPU machine).
# Exits non-zero when something the runbook needs could not be made, saying what.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
out=${1:-build-gpu}
budget=${BUDGET_S:-420}
status=0

echo "== 1. the runbook's programs ($out)"
# (no pipe into tail: the build's own status decides)
if ! BUILD_ONLY=1 sh benchmarks/gpu/run.sh "$out" >"$out.build.log" 2>&1; then
    tail -20 "$out.build.log" >&2
    echo "$0: the runbook's programs did not build (the whole log: $out.build.log)" >&2
    exit 1
fi
tail -3 "$out.build.log"
carry="$out"

echo "== 2. Open MPI for the ranks step (gpu-debs/)"
if [ -d gpu-debs ] && ls gpu-debs/*.deb >/dev/null 2>&1; then
    echo "gpu-debs/ holds $(ls gpu-debs/*.deb | wc -l) packages: kept"
elif [ "${NO_FETCH:-0}" = 1 ]; then
    echo "NO_FETCH=1: gpu-debs/ not fetched; the runbook skips its ranks step"
elif command -v apt-get >/dev/null && sh benchmarks/gpu/ranks.sh fetch gpu-debs >/dev/null 2>&1; then
    echo "gpu-debs/: $(ls gpu-debs/*.deb | wc -l) packages fetched"
else
    echo "$0: could not fetch gpu-debs/ (apt-get download failed; see sh benchmarks/gpu/ranks.sh fetch gpu-debs)" >&2
    status=1
fi
[ -d gpu-debs ] && ls gpu-debs/*.deb >/dev/null 2>&1 && carry="$carry gpu-debs"

echo "== 3. mist-train with the CUDA backend, and the NCCL collective suite"
if grep -q '^#define HAVE_CUDA 1' config.h 2>/dev/null; then
    make -s mist-train tests/test_comm_nccl_gpu >/dev/null
    carry="$carry mist-train"
    # the NCCL suite exists only in builds with NCCL
    [ -x tests/test_comm_nccl_gpu ] && carry="$carry tests/test_comm_nccl_gpu"
    echo "mist-train: $(ldd mist-train | grep -c -E 'libcublasLt|libnccl') CUDA libraries linked (cuBLASLt, NCCL)"
    # the wgmma attention kernels exist only in sm_90a code: elsewhere [runtime] attention = auto is base
    tree_arch=$(sed -n 's/^CUDA_ARCH = //p' Makefile 2>/dev/null)
    case "$tree_arch" in sm_90a*) ;; *) echo "note: this tree is built for ${tree_arch:-?}, so the ranks step's mist-train" \
        "runs the base attention kernels, not wgmma (./configure CUDA_ARCH=sm_90a && make mist-train for those)" ;; esac
else
    echo "$0: this tree is not configured with CUDA (./configure --with-cuda): no mist-train for the ranks step" >&2
    status=1
fi

echo "== 4. what the GPU machine gets"
kb=$(du -sk $carry | awk '{ s += $1 } END { print s }')
limit=${CARRY_LIMIT_MB:-64}
echo "carry: $carry ($((kb / 1024)) MiB of at most $limit)"
if [ "$kb" -gt $((limit * 1024)) ]; then
    echo "$0: the paths to copy are over $limit MiB" >&2
    status=1
fi
DRY_RUN=1 sh benchmarks/gpu/run.sh "$out" | grep -E '^[a-z0-9]+ +[0-9]+ s ' || true
echo "on the GPU machine, from the tree's root, with those paths copied alongside:"
echo "  sh benchmarks/gpu/run.sh $out        (time limit: $((budget + 60)) s)"
exit $status
