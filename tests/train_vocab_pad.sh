#!/bin/sh
# The padded vocabulary ([model] vocab_pad, docs/config.md) on the training
# runtime, CPU backend: a vocabulary of 258 padded to 384 rows (vocab_pad =
# 128) trains 20 steps with the losses and final weights of the unpadded run
# (vocab_pad = 1) within 1e-6 (fp32; only the GEMMs' summation blocking
# differs), tied and untied, with weight decay on (the padded rows must stay
# zero under AdamW). At tp = 4 the padded rows split 96 per rank, so the last
# rank holds only padding (no column of the loss): losses and weights within
# 1e-5 of the 1-rank unpadded run (tp changes the fp32 summation order, as in
# tests/train_tp.sh). Every run's measured arena peaks equal the prediction.
# Checkpoints store the real 258 rows: a padded run's checkpoint resumes
# unpadded and an unpadded one padded (at tp = 4), every weight bit-exact.
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib_train.sh"  # run, losses, loss_diff, weight_diff, peaks, last_ckpt
TRAIN="$MIST_BUILDDIR/mist-train"
GPT="$MIST_SRCDIR/examples/tiny.ini"
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-vocab-pad-test.XXXXXX")
trap 'rm -rf "$W"' EXIT
V=258
COMMON="-o train.steps=20 -o train.global_batch=8 -o train.lr=1e-3 -o train.warmup=5 -o train.weight_decay=0.1
 -o log.interval=1000 -o data.val_interval=10 -o data.val_batches=1 -o checkpoint.interval=10 -o checkpoint.keep=10
 -o model.vocab=$V -o stage.0.dp=1 -o stage.0.b=8"

# stage 0's parameter count as mist-train stores it (padded rows included) of run NAME
stored_params() { sed -n 's/.*stage 0: \([0-9]*\) parameters.*/\1/p' "$W/$1.out"; }
model_params() { sed -n 's/^mist: \([0-9]*\) parameters.*/\1/p' "$W/$1.out"; }

# name           pad tp zero tied ref          tolerance
cat >"$W/matrix" <<'EOF'
ref              1   1  0    1    -            0
pad128           128 1  0    1    ref          1e-6
pad64            64  1  0    1    ref          1e-6
untied-ref       1   1  0    0    -            0
untied-pad128    128 1  0    0    untied-ref   1e-6
pad128-tp4       128 4  2    1    ref          1e-5
untied-pad128-tp4 128 4 0    0    untied-ref   1e-5
EOF
while read -r name pad tp zero tied ref tol; do
    run "$GPT" "$tp" "$name" -o model.vocab_pad="$pad" -o stage.0.tp="$tp" -o stage.0.zero="$zero" \
        -o model.tied_embeddings="$tied"
    rc=$?
    set -- $(peaks "$W/$name.json")
    if [ "$ref" = - ]; then
        tap_diag "$name: exit $rc, peaks predicted = measured: $5"
        [ $rc -eq 0 ] && [ "$5" = yes ]
        tap_ok $? "$name: vocab_pad=$pad trains, peaks exact"
        continue
    fi
    ld=$(loss_diff "$W/$ref.jsonl" "$W/$name.jsonl")
    wd=$(weight_diff "$(last_ckpt "$W/$ref.ck")" "$(last_ckpt "$W/$name.ck")")
    tap_diag "$name (vocab_pad=$pad tp=$tp zero=$zero tied=$tied): exit $rc, losses $ld, weights $wd vs $ref," \
        "peaks $1/$2 exact: $5"
    [ $rc -eq 0 ] || tail -3 "$W/$name.out" | sed 's/^/#   /'
    [ $rc -eq 0 ] && [ "$5" = yes ] && num_ok 'l <= t && w <= t' l="$ld" w="$wd" t="$tol"
    tap_ok $? "$name: vocab_pad=$pad tp=$tp tied=$tied: losses and weights within $tol of $ref, peaks exact"
done <"$W/matrix"

# the padding is real: the runtime stores ceil(V/128)*128 - V more rows of C
# (wte only, tied), while the reported model keeps the real vocabulary
C=$(sed -n 's/^hidden *= *//p' "$GPT")
extra=$(( (V + 127) / 128 * 128 - V ))
[ "$(stored_params pad128)" = "$(( $(stored_params ref) + extra * C ))" ] &&
    [ "$(model_params pad128)" = "$(model_params ref)" ] && [ -n "$(model_params ref)" ]
tap_ok $? "vocab_pad=128 stores $extra padded rows of $C more ($(stored_params ref) -> $(stored_params pad128)), \
the model count stays $(model_params ref)"

# checkpoints hold the real rows: written padded, resumed unpadded, and the other
# way round at tp = 4; with lr = 0 the resumed run's step-11 weights are the loaded ones
for case in "pad128 1 -o model.vocab_pad=1" "ref 4 -o model.vocab_pad=128 -o stage.0.tp=4"; do
    set -- $case
    src=$1; np=$2; shift 2
    name=$src-resumed
    mkdir -p "$W/$name.ck" && cp "$W/$src.ck/step_00000010.ckpt" "$W/$name.ck/" &&
        echo step_00000010.ckpt >"$W/$name.ck/latest"
    run "$GPT" "$np" "$name" -o checkpoint.resume=1 -o train.lr=0 -o train.min_lr=0 -o train.steps=11 "$@"
    rc=$?
    wd=$(weight_diff "$W/$src.ck/step_00000010.ckpt" "$W/$name.ck/step_00000011.ckpt" exact)
    [ $rc -eq 0 ] || tail -3 "$W/$name.out" | sed 's/^/#   /'
    grep -q "resumed from" "$W/$name.out" && [ $rc -eq 0 ] && [ "$wd" = 0 ]
    tap_ok $? "the step-10 checkpoint of $src resumes under $* with every weight bit-exact"
done
tap_end
