#!/bin/sh
# Writes the seeds that come from mist's own programs into SEEDS/NAME/, one
# folder per fuzz harness: a plan (mist-plan --out), a measured profile
# (mist-profile), a token shard (mist-tokenize) and a checkpoint with its
# `latest` (a 2-step mist-train run of a 1-layer GPT of width 8, the model
# tests/fuzz/fuzz_checkpoint.c loads). A program that fails is named on stderr
# and its seed left out; the exit status counts them.
#   sh tests/fuzz/write_seeds.sh BIN SEEDS     (BIN: the directory holding mist-train)
set -u
bin=$(cd "$1" && pwd) || exit 1
mkdir -p "$2" && seeds=$(cd "$2" && pwd) || exit 1
cd "$(dirname "$0")/../.." || exit 1
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
for h in plan profile shard checkpoint latest; do mkdir -p "$seeds/$h"; done
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
failed=0
fail() { echo "write_seeds: $1 failed: $(tail -n 3 "$2" | tr '\n' ' ')" >&2; failed=$((failed + 1)); }
"$bin/mist-plan" examples/tiny.ini --out "$seeds/plan/tiny-dp4.ini" >"$work/plan.log" 2>&1 || fail mist-plan "$work/plan.log"
timeout 60 mpirun --oversubscribe -np 2 "$bin/mist-profile" --sizes 1 --iters 1 --out "$seeds/profile/measured-cpu.ini" \
    >"$work/profile.log" 2>&1 </dev/null || fail mist-profile "$work/profile.log"
head -c 600 examples/data/corpus.txt >"$work/small.txt"  # a shard of a few hundred tokens
if "$bin/mist-tokenize" "$work/small.txt" "$work/small" >"$work/tokenize.log" 2>&1; then
    cp "$work"/small*.bin "$seeds/shard/"
else fail mist-tokenize "$work/tokenize.log"; fi
M="-o model.layers=1 -o model.hidden=8 -o model.heads=2 -o model.seq_len=8 -o train.global_batch=2 -o train.steps=2
   -o stage.0.layers=1 -o stage.0.dp=1 -o stage.0.b=2 -o data.val_interval=0 -o checkpoint.dir=$work/ck -o checkpoint.interval=2"
# shellcheck disable=SC2086
if timeout 120 mpirun -np 1 "$bin/mist-train" examples/tiny.ini $M >"$work/train.log" 2>&1 </dev/null; then
    cp "$work"/ck/step_*.ckpt "$seeds/checkpoint/" && cp "$work/ck/latest" "$seeds/latest/written"
else fail mist-train "$work/train.log"; fi
exit $failed
