#!/bin/sh
# [cluster] collectives = hierarchical (runtime/comm_hier.h, docs/paro.md) in
# training, CPU backend under mpirun, nodes simulated as gpus_per_node
# consecutive ranks: ZeRO 0-3 (with offloading), dp x tp and bf16 plans train 20
# steps with the 1-rank run's losses and final weights (fp32 within 1e-5: the
# hierarchy only reorders the gradient sums, node first; bf16 within 2e-2, as
# tests/train_zero.sh), ZeRO-2 on 4 ranks (2 nodes x 2) within 1e-5 of the
# flat run, arena peaks exact; a dp group that does not span nodes with equal
# ranks stays flat and says why; through the NCCL stand-in the hierarchical run
# equals the plain flat one, its subgroups' communicators made at start; staged
# through host memory it equals the plain hierarchical run to the bit; a
# checkpoint written hierarchically resumes flat at dp=2.
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib_train.sh"  # run, losses, loss_diff, within, peaks
TRAIN="$MIST_BUILDDIR/mist-train"
GPT="$MIST_SRCDIR/examples/tiny.ini"
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-hier-test.XXXXXX")
trap 'rm -rf "$W"' EXIT
KEY=loss
COMMON="-o train.steps=20 -o train.global_batch=8 -o train.lr=1e-3 -o train.warmup=5 -o log.interval=1000
 -o data.val_interval=0 -o checkpoint.keep=1"
HIER="-o cluster.collectives=hierarchical"

run "$GPT" 1 ref -o stage.0.dp=1 -o stage.0.b=8
tap_ok $? "1-rank reference run"
run "$GPT" 1 ref-bf -o stage.0.dp=1 -o stage.0.b=8 -o train.precision=bf16
tap_ok $? "1-rank bf16 reference run"

# name ranks gpus_per_node expected-form tolerance reference options...
cat >"$W/matrix" <<'EOF'
h-z0    4 2 hierarchical 1e-5 ref    -o stage.0.dp=4 -o stage.0.b=2 -o stage.0.zero=0
h-z1    4 2 hierarchical 1e-5 ref    -o stage.0.dp=4 -o stage.0.b=2 -o stage.0.zero=1 -o stage.0.ckpt=1
h-z2    4 2 hierarchical 1e-5 ref    -o stage.0.dp=4 -o stage.0.b=2 -o stage.0.zero=2
f-z2    4 2 flat         1e-5 ref    -o stage.0.dp=4 -o stage.0.b=2 -o stage.0.zero=2
h-z3off 4 2 hierarchical 1e-5 ref    -o stage.0.dp=4 -o stage.0.b=2 -o stage.0.zero=3 -o stage.0.wo=0.5 -o stage.0.go=0.5 -o stage.0.oo=0.5
h-go    4 2 hierarchical 1e-5 ref    -o stage.0.dp=4 -o stage.0.b=1 -o plan.G=2 -o stage.0.zero=1 -o stage.0.go=0.5
h-8     8 4 hierarchical 1e-5 ref    -o stage.0.dp=8 -o stage.0.b=1 -o stage.0.zero=2
h-tp    8 4 hierarchical 1e-5 ref    -o stage.0.dp=4 -o stage.0.tp=2 -o stage.0.b=2 -o stage.0.zero=1
h-tp1   4 2 flat         1e-5 ref    -o stage.0.dp=2 -o stage.0.tp=2 -o stage.0.b=4 -o stage.0.zero=2
h-bf16  4 2 hierarchical 2e-2 ref-bf -o stage.0.dp=4 -o stage.0.b=2 -o stage.0.zero=2 -o train.precision=bf16
EOF
while read -r c np gpn form tol ref opts; do
    extra=$HIER; [ "$c" = f-z2 ] && extra=""
    # shellcheck disable=SC2086
    run "$GPT" "$np" "$c" $extra -o cluster.gpus_per_node="$gpn" $opts
    rc=$?
    said=$(sed -n 's/^mist: data-parallel collectives \([a-z]*\): .*/\1/p' "$W/$c.out")
    [ -z "$extra" ] && said=flat  # the default says nothing
    within "$ref" "$c" "$tol" $rc && [ "$said" = "$form" ]
    tap_ok $? "$c ($np ranks, $gpn per node, $opts): $form ($(grep -o 'collectives [a-z]*: .*' "$W/$c.out" | head -1)), losses $ld and weights $wd within $tol of $ref, peaks exact: $exact"
    [ $rc -eq 0 ] || tap_diag "$(tail -5 "$W/$c.out")"
done <"$W/matrix"

# the brief's pair: ZeRO-2 on 2 nodes x 2, hierarchical against flat
d=$(loss_diff "$W/f-z2.jsonl" "$W/h-z2.jsonl")
num_ok 'd <= 1e-5' d="$d"
tap_ok $? "ZeRO-2, 4 ranks as 2 nodes x 2: hierarchical losses within 1e-5 of flat (max relative difference $d)"

# through the NCCL stand-in: the same run, its subgroups' communicators made before the arenas
NCCL="$MIST_BUILDDIR/tests/mist-train-nccl-fake"
TRAIN=$NCCL
# shellcheck disable=SC2086
MIST_DEVICE=cpu run "$GPT" 4 h-nccl $HIER -o cluster.gpus_per_node=2 -o stage.0.dp=4 -o stage.0.b=2 -o stage.0.zero=2
rc=$?
TRAIN="$MIST_BUILDDIR/mist-train"
d=$(loss_diff "$W/f-z2.jsonl" "$W/h-nccl.jsonl")
calls=$(sed -n 's/^mist: NCCL collectives on rank 0: \([0-9]*\),.*/\1/p' "$W/h-nccl.out")
made=$(sed -n 's/^mist: NCCL communicators made before the arenas on rank 0: \([0-9]*\)$/\1/p' "$W/h-nccl.out")
used=$(sed -n 's/^mist: NCCL collectives on rank 0: .*, on \([0-9]*\) communicators$/\1/p' "$W/h-nccl.out")
[ $rc -eq 0 ] && num_ok 'd <= 1e-5' d="$d" && [ "${calls:-0}" -gt 0 ] && [ -n "$made" ] && [ "$made" = "$used" ] &&
    grep -q "collectives hierarchical: 2 nodes x 2 ranks" "$W/h-nccl.out"
tap_ok $? "through the NCCL stand-in: hierarchical ZeRO-2 = plain flat (losses $d), ${calls:-0} NCCL collectives on ${used:-?} communicators (${made:-?} made at start)"
[ $rc -eq 0 ] || tap_diag "$(tail -5 "$W/h-nccl.out")"

# staged through host memory (runtime/comm_staged.h): the hierarchical run's losses to the bit
# (a staged call runs the inner backend's same call on the same counts), with staged calls
# shellcheck disable=SC2086
MIST_COMM_STAGED=1 run "$GPT" 4 h-staged $HIER -o cluster.gpus_per_node=2 -o stage.0.dp=4 -o stage.0.b=2 -o stage.0.zero=2
rc=$?
calls=$(sed -n 's/^mist: staged collectives on rank 0: \([0-9]*\),.*/\1/p' "$W/h-staged.out")
losses "$W/h-z2.jsonl" >"$W/a"; losses "$W/h-staged.jsonl" >"$W/b"
[ $rc -eq 0 ] && [ -s "$W/a" ] && cmp -s "$W/a" "$W/b" && [ "${calls:-0}" -gt 0 ] &&
    grep -q "collectives hierarchical: 2 nodes x 2 ranks" "$W/h-staged.out"
tap_ok $? "staged through host memory: hierarchical ZeRO-2 = the plain hierarchical run to the bit, ${calls:-0} staged calls on rank 0"
[ $rc -eq 0 ] || tap_diag "$(tail -5 "$W/h-staged.out")"

# a checkpoint written hierarchically at dp=4 zero=2 resumes flat at dp=2 zero=1
SPLIT="-o checkpoint.interval=10 -o checkpoint.keep=10"
# shellcheck disable=SC2086
run "$GPT" 4 rs-src $SPLIT $HIER -o cluster.gpus_per_node=2 -o stage.0.dp=4 -o stage.0.b=2 -o stage.0.zero=2
tap_ok $? "hierarchical dp=4 zero=2 run writes checkpoints at steps 10 and 20"
mkdir -p "$W/rs-dp2.ck" && cp "$W/rs-src.ck/step_00000010.ckpt" "$W/rs-dp2.ck/" &&
    echo step_00000010.ckpt >"$W/rs-dp2.ck/latest" && head -10 "$W/rs-src.jsonl" >"$W/rs-dp2.jsonl"
# shellcheck disable=SC2086
run "$GPT" 2 rs-dp2 $SPLIT -o checkpoint.resume=1 -o stage.0.dp=2 -o stage.0.b=4 -o stage.0.zero=1
rc=$?
ld=$(loss_diff "$W/rs-src.jsonl" "$W/rs-dp2.jsonl")
[ $rc -eq 0 ] && grep -q "resumed from" "$W/rs-dp2.out" && num_ok 'l <= 1e-5' l="$ld"
tap_ok $? "the step-10 checkpoint of the hierarchical run resumes flat at dp=2 zero=1: losses 11..20 within 1e-5 ($ld)"
tap_end
