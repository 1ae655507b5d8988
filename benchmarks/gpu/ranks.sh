#!/bin/sh
# Several ranks on GPUs, on a GPU machine without MPI: mist-train (built with
# --with-cuda elsewhere and carried) runs under an Open MPI unpacked from
# Debian packages fetched beforehand on a machine with apt. Plans that need
# collectives of GPU memory (staged through host memory: docs/cuda-backend.md)
# and the vocabulary-parallel kernels train a small bf16 model; the ranks
# share the GPU(s). Each plan's per-step losses must track the same plan on
# the CPU backend within 0.05 (bf16 on both; bench_train's tolerance), and the
# GPU run must have staged collectives. A checkpoint resumed from its middle
# step must repeat the uninterrupted run's losses bit for bit.
#
#   sh benchmarks/gpu/ranks.sh fetch DEBDIR                 on a machine with apt-get: the packages
#   sh benchmarks/gpu/ranks.sh run DEBDIR OUTDIR [MIST_TRAIN]   on the GPU machine (default ./mist-train)
#
# Without a GPU both legs run on the CPU backend, the "GPU" one with
# MIST_COMM_STAGED=1 (the same staged path; the losses then agree exactly).
# Ranks sharing a GPU stage their collectives even in a build with NCCL
# (NCCL drives one GPU per rank), so this checks the staged path on GPUs.
# Writes OUTDIR/ranks.log and one OUTDIR/NAME.{gpu,cpu}.{jsonl,out} per plan.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
# Open MPI and what it and mist-train load beyond a base system (libc, libstdc++, libgomp, zlib)
PACKAGES="openmpi-bin openmpi-common libopenmpi3 libpmix2 libhwloc15 libhwloc-plugins libevent-core-2.1-7
 libevent-pthreads-2.1-7 libfabric1 libucx0 libpsm-infinipath1 libpsm2-2 libibverbs1 librdmacm1 libnl-3-200
 libnl-route-3-200 libmunge2 libnuma1 libpciaccess0 libxnvctrl0 ocl-icd-libopencl1 libxml2 libicu72 libinih1
 libcolamd2 libsuitesparseconfig5 libopenblas0-pthread libgfortran5 libquadmath0"

usage() { echo "usage: $0 fetch DEBDIR | run DEBDIR OUTDIR [MIST_TRAIN]" >&2; exit 2; }
[ $# -ge 2 ] || usage

if [ "$1" = fetch ]; then
    mkdir -p "$2"
    # shellcheck disable=SC2086
    (cd "$2" && apt-get download $PACKAGES)
    du -sh "$2"
    exit 0
fi
[ "$1" = run ] && [ $# -ge 3 ] || usage
debs=$(cd "$2" && pwd); out=$3; train=${4:-$top/mist-train}
mkdir -p "$out"; out=$(cd "$out" && pwd)
root=$out/mpi
rm -rf "$root"; mkdir -p "$root"
for d in "$debs"/*.deb; do
    if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$d" "$root"
    else (cd "$root" && ar p "$d" data.tar.xz | tar xJ); fi
done
lib=$root/usr/lib/x86_64-linux-gnu
export OPAL_PREFIX="$root/usr"
export LD_LIBRARY_PATH="$lib:$lib/openmpi/lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1
mpirun="$root/usr/bin/orterun"
if ldd "$train" | grep 'not found'; then
    echo "$0: $train cannot find the libraries above (build it here, or add their packages to PACKAGES;" \
        "libnccl: configure --without-nccl where the GPU machine's CUDA has no NCCL)" >&2
    exit 1
fi

say() { echo "$*" | tee -a "$out/ranks.log"; }
: >"$out/ranks.log"
gpu=0
nvidia-smi -L >/dev/null 2>&1 && gpu=1
[ $gpu = 1 ] || say "no GPU: both legs on the CPU backend, the GPU leg with MIST_COMM_STAGED=1"

# a small bf16 GPT whose head size (128 / 2 = 64) the CUDA attention supports
MODEL="-o model.hidden=128 -o model.heads=2 -o train.precision=bf16 -o train.global_batch=8 -o train.steps=10
 -o train.lr=1e-3 -o train.warmup=2 -o log.interval=1000 -o data.val_interval=0"
status=0
run_plan() {  # NAME RANKS OPTIONS...
    name=$1; np=$2; shift 2
    for leg in gpu cpu; do
        if [ $leg = cpu ]; then env="MIST_DEVICE=cpu"; elif [ $gpu = 1 ]; then env="MIST_LEG=gpu"; else env="MIST_COMM_STAGED=1"; fi
        # shellcheck disable=SC2086
        env $env "$mpirun" -np "$np" "$train" "$top/examples/tiny.ini" $MODEL -o log.jsonl="$out/$name.$leg.jsonl" "$@" \
            >"$out/$name.$leg.out" 2>&1 </dev/null || { say "$name: the $leg run failed:"; say "$(tail -5 "$out/$name.$leg.out")"; }
    done
    staged=$(sed -n 's/^mist: staged collectives on rank 0: \([0-9]*\),.*/\1/p' "$out/$name.gpu.out")
    # the GPU leg's time per iteration over steps 6..10 (the first ones grow the bounce buffer)
    ms=$(grep -o '"ms_per_iter": [^,}]*' "$out/$name.gpu.jsonl" 2>/dev/null | tail -5 |
        awk '{ s += $2; n++ } END { if (n) printf "%.1f", s / n; else printf "-" }')
    verdict=$(paste "$out/$name.gpu.jsonl" "$out/$name.cpu.jsonl" 2>/dev/null | awk -v staged="${staged:-0}" '
        { n++; split($0, h, "\t"); a = h[1]; b = h[2]
          sub(/.*"loss": /, "", a); sub(/[,}].*/, "", a); sub(/.*"loss": /, "", b); sub(/[,}].*/, "", b)
          d = a - b; if (d < 0) d = -d; if (d > m) m = d; last = a " / " b }
        END { ok = n == 10 && m <= 0.05 && staged > 0
              printf "%s  steps %d, max |loss gpu - cpu| %.4f, last %s, staged calls %d", ok ? "ok  " : "FAIL", n, m, last, staged }')
    say "$name ($np ranks): $verdict, $ms ms/iteration"
    case "$verdict" in ok*) ;; *) status=1 ;; esac
}
run_plan dp2          2 -o stage.0.dp=2 -o stage.0.b=4
run_plan tp2          2 -o stage.0.dp=1 -o stage.0.tp=2 -o stage.0.b=8
run_plan dp2-z3-off   2 -o stage.0.dp=2 -o stage.0.b=4 -o stage.0.zero=3 -o stage.0.ckpt=1 -o stage.0.wo=0.5 \
    -o stage.0.go=0.5 -o stage.0.oo=0.5 -o stage.0.ao=0.5
run_plan dp2xtp2-z1   4 -o stage.0.dp=2 -o stage.0.tp=2 -o stage.0.b=4 -o stage.0.zero=1
run_plan pp2-tied     3 -o plan.stages=2 -o plan.G=2 -o stage.0.layers=1 -o stage.0.dp=2 -o stage.0.b=2 \
    -o stage.1.layers=1 -o stage.1.dp=1 -o stage.1.tp=1 -o stage.1.b=4

# a resume is bit-exact on GPUs too (no atomics in gradient paths): 10 steps saving at 5 and 10,
# then the step-5 checkpoint resumed to step 10 must log the same losses for steps 6..10
resume_check() {
    env MIST_LEG=gpu "$mpirun" -np 2 "$train" "$top/examples/tiny.ini" $MODEL -o stage.0.dp=2 -o stage.0.b=4 \
        -o stage.0.zero=1 -o checkpoint.dir="$out/resume.ck" -o checkpoint.interval=5 -o checkpoint.keep=2 \
        -o log.jsonl="$out/resume.full.jsonl" >"$out/resume.full.out" 2>&1 </dev/null || return 1
    [ -f "$out/resume.ck/step_00000005.ckpt" ] || return 1
    echo step_00000005.ckpt >"$out/resume.ck/latest"
    env MIST_LEG=gpu "$mpirun" -np 2 "$train" "$top/examples/tiny.ini" $MODEL -o stage.0.dp=2 -o stage.0.b=4 \
        -o stage.0.zero=1 -o checkpoint.dir="$out/resume.ck" -o checkpoint.resume=1 \
        -o log.jsonl="$out/resume.part.jsonl" >"$out/resume.part.out" 2>&1 </dev/null || return 1
    grep -o '"loss": [^,}]*' "$out/resume.full.jsonl" | tail -5 >"$out/resume.a"
    grep -o '"loss": [^,}]*' "$out/resume.part.jsonl" | tail -5 >"$out/resume.b"
    [ "$(wc -l <"$out/resume.b")" -eq 5 ] && cmp -s "$out/resume.a" "$out/resume.b"
}
# (the losses are steps 6..10 of both runs: the resumed one logs only those)
if resume_check; then say "resume dp2 (2 ranks): ok    steps 6..10 of the resumed run = the uninterrupted run, bit for bit"
else say "resume dp2 (2 ranks): FAIL  $(paste "$out/resume.a" "$out/resume.b" 2>/dev/null | tr '\n' ' ')"; status=1; fi

# NCCL itself, one rank per GPU (a build with NCCL has tests/test_comm_nccl_gpu: carry it along):
# the collective suite with every buffer in managed memory; it skips, saying why, without a GPU
nccl_test=$top/tests/test_comm_nccl_gpu
if [ -x "$nccl_test" ]; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    np=${gpus:-1}; [ "$np" -ge 1 ] || np=1
    rc=0
    "$mpirun" -np "$np" "$nccl_test" >"$out/nccl.out" 2>&1 </dev/null || rc=$?
    okn=$(grep -c '^ok [0-9]* - ' "$out/nccl.out" || true); bad=$(grep -c '^not ok' "$out/nccl.out" || true)
    skip=$(sed -n 's/^ok [0-9]* # SKIP //p' "$out/nccl.out" | head -1)
    if [ -n "$skip" ] && [ "$bad" -eq 0 ] && [ $rc -eq 0 ]; then say "nccl ($np ranks): SKIP  $skip"
    elif [ $rc -eq 0 ] && [ "$bad" -eq 0 ]; then say "nccl ($np ranks): ok    $okn checks of test_comm_nccl_gpu"
    else say "nccl ($np ranks): FAIL  $bad of $((okn + bad)) checks failed, exit $rc (see nccl.out)"; status=1; fi
fi
exit $status
