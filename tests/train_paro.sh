#!/bin/sh
# PaRO sharding scopes ([stage.N] shard = XYZ, shard_group = g; docs/paro.md)
# on the data-parallel runtime, CPU backend under mpirun: every code on 4
# ranks in groups of 2, and NIG, IIG, NGG on 4 and 8 ranks with offload,
# gradient accumulation, Llama and a two-stage pipeline (tied embeddings
# summed across the stages), train 20 steps with the 1-rank run's losses and
# final weights (fp32: within 1e-5; only the order of the gradient sums
# differs); every rank's measured arena peaks equal the runtime's and the
# planner's prediction to the byte; a checkpoint written under IIG resumes
# under NIG in groups of 4, under ZeRO-1 at dp 2 and at 1 rank, and one
# written under ZeRO-3 resumes under IGG.
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib_train.sh"  # run, losses, loss_diff, weight_diff, peaks, last_ckpt
TRAIN="$MIST_BUILDDIR/mist-train"
GPT="$MIST_SRCDIR/examples/tiny.ini"
LLAMA="$MIST_SRCDIR/examples/tiny-llama.ini"
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-paro-test.XXXXXX")
trap 'rm -rf "$W"' EXIT
KEY=loss
COMMON="-o train.steps=20 -o train.global_batch=8 -o train.lr=1e-3 -o train.warmup=5 -o log.interval=1000
 -o data.val_interval=0 -o checkpoint.keep=1"

# ---- 1. the matrix: name model ranks shard g G offload(wo=go=oo=ao) stages
# (stages 2: the ranks split in two pipeline stages of one block each, each with the shard)
cat >"$W/matrix" <<'EOF'
gpt-ref    gpt   1 NNN 1 1 0   1
llama-ref  llama 1 NNN 1 1 0   1
gpt-NNI    gpt   4 NNI 2 1 0   1
gpt-NII    gpt   4 NII 2 1 0   1
gpt-NIG    gpt   4 NIG 2 1 0   1
gpt-III    gpt   4 III 2 1 0   1
gpt-IIG    gpt   4 IIG 2 1 0   1
gpt-IGG    gpt   4 IGG 2 1 0   1
gpt-NGG    gpt   4 NGG 2 1 0   1
gpt-NIG-G2 gpt   4 NIG 2 2 0.5 1
gpt-IIG-G2 gpt   4 IIG 2 2 0.5 1
gpt-NGG-of gpt   4 NGG 2 2 0.5 1
gpt8-NIG   gpt   8 NIG 2 1 0.5 1
gpt8-IIG   gpt   8 IIG 4 1 0   1
gpt8-IIG2  gpt   8 IIG 2 1 1   1
gpt8-NGG   gpt   8 NGG 2 1 0   1
gpt8-IGG   gpt   8 IGG 2 1 0.5 1
llama-NIG  llama 4 NIG 2 2 0.5 1
llama8-IIG llama 8 IIG 2 1 0   1
pp-NIG     gpt   8 NIG 2 2 0   2
pp-IIG     gpt   8 IIG 2 2 0.5 2
pp-NGG     gpt   8 NGG 2 2 0   2
EOF
tap_diag "$(printf '%-11s %5s %5s %5s %2s %2s %4s %2s | %7s %7s | %9s %9s %7s %7s %s' name model ranks shard g G off S \
    loss weights dev-pred dev-meas hst-pred hst-meas all-ranks)"
while read -r name model np shard g G off S; do
    ini=$GPT; [ "$model" = llama ] && ini=$LLAMA
    dp=$((np / S)); b=$((8 / (dp * G)))
    args="-o plan.G=$G -o plan.stages=$S"
    s=0
    while [ $s -lt "$S" ]; do
        args="$args -o stage.$s.layers=$((2 / S)) -o stage.$s.dp=$dp -o stage.$s.b=$b -o stage.$s.shard=$shard"
        args="$args -o stage.$s.shard_group=$g -o stage.$s.wo=$off -o stage.$s.go=$off -o stage.$s.oo=$off"
        args="$args -o stage.$s.ao=$off"
        s=$((s + 1))
    done
    # shellcheck disable=SC2086
    run "$ini" "$np" "$name" $args
    rc=$?
    ref=$model-ref
    if [ "$name" = "$ref" ]; then ld=0; wd=0; else
        ld=$(loss_diff "$W/$ref.jsonl" "$W/$name.jsonl")
        wd=$(weight_diff "$(last_ckpt "$W/$ref.ck")" "$(last_ckpt "$W/$name.ck")")
    fi
    set -- $(peaks "$W/$name.json")
    tap_diag "$(printf '%-11s %5s %5s %5s %2s %2s %4s %2s | %7s %7s | %9s %9s %7s %7s %s' "$name" "$model" "$np" \
        "$shard" "$g" "$G" "$off" "$S" "$ld" "$wd" "$1" "$2" "$3" "$4" "$5")"
    [ $rc -eq 0 ] || tail -3 "$W/$name.out" | sed 's/^/#   /'
    [ $rc -eq 0 ] && [ "$5" = yes ] && num_ok 'l <= 1e-5 && w <= 1e-5' l="$ld" w="$wd"
    tap_ok $? "$name: $np ranks, $S stage(s), shard=$shard shard_group=$g G=$G offload $off: losses and weights \
within 1e-5 of 1 rank, peaks exact (runtime and planner)"
done <"$W/matrix"

# an I scope in groups of one rank is N, in one group of every dp rank G: the same bytes as those codes
for pair in "NIG 1 NNG" "IIG 4 GGG"; do
    set -- $pair
    run "$GPT" 4 "eq-$1-$2" -o stage.0.dp=4 -o stage.0.b=2 -o stage.0.shard="$1" -o stage.0.shard_group="$2"
    run "$GPT" 4 "eq-$3" -o stage.0.dp=4 -o stage.0.b=2 -o stage.0.shard="$3"
    a=$(peaks "$W/eq-$1-$2.json"); c=$(peaks "$W/eq-$3.json")
    [ "$a" = "$c" ] && [ "$(losses "$W/eq-$1-$2.jsonl")" = "$(losses "$W/eq-$3.jsonl")" ]
    tap_ok $? "shard = $1 with shard_group = $2 runs as $3: the same peaks ($a) and bit-identical losses"
done

# ---- 2. checkpoints stay whole: resumed under other plans
SPLIT="-o checkpoint.interval=10 -o checkpoint.keep=10"
run "$GPT" 4 rs-src $SPLIT -o stage.0.dp=4 -o stage.0.b=2 -o stage.0.shard=IIG -o stage.0.shard_group=2 \
    -o stage.0.wo=0.5 -o stage.0.oo=0.5
tap_ok $? "dp=4 shard=IIG (groups of 2, offloaded) writes checkpoints at steps 10 and 20"
resume_check() {  # SRC NAME NP ARGS...
    src=$1 name=$2 np=$3; shift 3
    mkdir -p "$W/$name.ck" && cp "$W/$src.ck/step_00000010.ckpt" "$W/$name.ck/" &&
        echo step_00000010.ckpt >"$W/$name.ck/latest" && head -10 "$W/$src.jsonl" >"$W/$name.jsonl"
    run "$GPT" "$np" "$name" $SPLIT -o checkpoint.resume=1 "$@"
    rc=$?
    grep -q "resumed from" "$W/$name.out" && [ $rc -eq 0 ] &&
        [ "$(losses "$W/$src.jsonl" | sed -n 11p)" = "$(losses "$W/$name.jsonl" | sed -n 11p)" ]
    tap_ok $? "$name: the step-10 checkpoint of $src resumes under $* with a bit-identical first loss"
    ld=$(loss_diff "$W/$src.jsonl" "$W/$name.jsonl")
    wd=$(weight_diff "$W/$src.ck/step_00000020.ckpt" "$W/$name.ck/step_00000020.ckpt")
    tap_diag "$name: losses 11..20 differ by $ld, final weights by $wd"
    num_ok 'l <= 1e-5 && w <= 1e-5' l="$ld" w="$wd"
    tap_ok $? "$name: losses and final weights within 1e-5 of $src"
}
resume_check rs-src rs-nig8 8 -o stage.0.dp=8 -o stage.0.b=1 -o stage.0.shard=NIG -o stage.0.shard_group=4
resume_check rs-src rs-z1 2 -o stage.0.dp=2 -o stage.0.b=4 -o stage.0.zero=1
resume_check rs-src rs-one 1 -o stage.0.dp=1 -o stage.0.b=8
resume_check rs-src rs-same 4 -o stage.0.dp=4 -o stage.0.b=2 -o stage.0.shard=IIG -o stage.0.shard_group=2 \
    -o stage.0.wo=0.5 -o stage.0.oo=0.5
cmp -s "$W/rs-src.ck/step_00000020.ckpt" "$W/rs-same.ck/step_00000020.ckpt"
tap_ok $? "resumed under the same IIG plan: the step-20 checkpoint is byte-identical"
run "$GPT" 4 z3-src $SPLIT -o stage.0.dp=4 -o stage.0.b=2 -o stage.0.zero=3
tap_ok $? "dp=4 zero=3 writes checkpoints"
resume_check z3-src z3-igg 4 -o stage.0.dp=4 -o stage.0.b=2 -o stage.0.shard=IGG -o stage.0.shard_group=2
tap_end
