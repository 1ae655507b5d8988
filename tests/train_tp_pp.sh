#!/bin/sh
# Tensor parallelism inside pipeline stages on the CPU backend under mpirun: a
# matrix of plans with 2 and 3 stages whose meshes (dp x tp) may differ per
# stage (tp = 2 in every stage; dp 2 x tp 1 feeding dp 1 x tp 2 and back; a
# tp = 2 middle stage; tp = 2 and tp = 4 at the two ends of a tied embedding
# with a vocabulary that neither divides; interleaved plans of 2 chunks per
# rank with tp 2 and tp 4 chunks), ZeRO / ckpt / offload on some stages,
# sequence parallelism (a 7th field sp = 1) on some or all tp stages (interleaved: on
# a rank's second chunk only, which lays out its own sp),
# GPT and Llama, tied and untied embeddings, trains 20 steps with the
# same per-step and validation losses as the 1-rank run of the same model and
# ends with the same weights; every rank's measured arena peaks equal the
# prediction. Checkpoints stay whole tensors: one written under 2 stages of
# tp = 2 loads at 1 rank bit-exactly and one written at 1 rank loads under 2
# stages of tp = 2 bit-exactly (an lr = 0 step writes the loaded bits back),
# and training resumed with the normal lr follows the writer.
#
# Tolerances (fp32): losses within 1e-5 relative per step, final weights
# within 1e-5 in relative L2 over the whole model (the plans differ from the
# 1-rank run only in the fp32 summation order: tp partial sums, per-stage dp
# sums, the tied embedding's two halves summed once at the end, the norm's sum
# of squares per stage; see tests/train_zero.sh for why weights are compared
# as a whole).
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib_train.sh"  # run, losses, loss_diff, weight_diff, peaks, last_ckpt
TRAIN="$MIST_BUILDDIR/mist-train"
GPT="$MIST_SRCDIR/examples/tiny.ini"
LLAMA="$MIST_SRCDIR/examples/tiny-llama.ini"
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-tp-pp-test.XXXXXX")
trap 'rm -rf "$W"' EXIT
STEPS=20
L=4
COMMON="-o train.steps=$STEPS -o train.global_batch=8 -o train.lr=1e-3 -o train.warmup=5 -o log.interval=1000
 -o data.val_interval=0 -o checkpoint.keep=1 -o model.layers=$L -o model.seq_len=32"

# ---- 1. the matrix -----------------------------------------------------------
# name model variant G stages (layers/dp/tp/zero/ckpt/offload per stage); b = 8 / (dp * G).
# G = 2v2: G = 2 with [plan] virtual = 2 (the stages are 4 chunks on 2 pipeline ranks, chunk c on
# the ranks of chunk c mod 2: tp 2 and dp 2 ranks, tp 2 and tp 4 at a tied embedding's two ends).
# A row's reference is the 1-rank run of the same model variant (its -ref row):
# tied / untied embeddings, v258 = a vocabulary of 258, unpadded (tp = 2: 129 rows per
# rank; tp = 4: 65, 65, 65, 63). Validation (forward only through the stages)
# runs at steps 10 and 20 over 2G micro-batches of 8/G sequences: the same 16
# sequences for every plan.
cat >"$W/matrix" <<'EOF'
gpt-tied-ref     gpt   tied   1 4/1/1/0/0/0
gpt-tp2x2        gpt   tied   2 2/1/2/0/0/0 2/1/2/0/0/0
gpt-dp2-tp2      gpt   tied   2 2/2/1/0/0/0 2/1/2/0/0/0
gpt-tp2-dp2      gpt   tied   2 3/1/2/0/1/0 1/2/1/1/0/0
gpt-mid-tp2      gpt   tied   2 1/1/1/0/0/0 2/1/2/0/0/0 1/1/1/0/0/0
gpt-zero         gpt   tied   1 2/2/2/1/1/0 2/1/2/3/2/0.5
gpt-untied-ref   gpt   untied 1 4/1/1/0/0/0
gpt-untied-tp2   gpt   untied 2 1/1/2/2/0/0 3/2/1/0/1/0
gpt-untied-2x2   gpt   untied 1 2/2/2/3/1/0.5 2/1/2/0/0/0
gpt-v258-ref     gpt   v258   1 4/1/1/0/0/0
gpt-v258-tp2tp4  gpt   v258   2 1/1/2/0/0/0 3/1/4/2/1/0
llama-untied-ref llama untied 1 4/1/1/0/0/0
llama-tp2x2      llama untied 2 3/1/2/2/1/0.5 1/1/2/0/0/0
llama-tied-ref   llama tied   1 4/1/1/0/0/0
llama-tied-het   llama tied   2 1/2/1/0/0/0 3/1/2/1/2/0
gpt-sel-tp2x2    gpt   tied   2 2/1/2/0/1/0.5/0/sel 2/1/2/1/0/0/0/sel
llama-sel-tp2    llama untied 2 3/1/2/2/1/0/0/sel 1/1/2/0/0/0.5
gpt-sp-tp2x2     gpt   tied   2 2/1/2/0/0/0/1 2/1/2/0/0/0/1
gpt-sp-mid       gpt   tied   2 1/1/1/0/0/0 2/1/2/0/1/0/1 1/1/1/0/0/0
gpt-sp-one       gpt   tied   1 2/2/2/1/1/0/1 2/1/2/3/2/0.5/0
gpt-v258-sp      gpt   v258   2 1/1/2/0/0/0/1 3/1/4/2/1/0/1
llama-sp-tp2x2   llama untied 2 3/1/2/2/1/0.5/1 1/1/2/0/0/0/1
llama-sp-het     llama tied   2 1/2/1/0/0/0 3/1/2/1/2/0.5/1
gpt-v2-tp2       gpt   tied   2v2 1/1/2/0/0/0 1/2/1/1/0/0 1/1/2/0/1/0 1/2/1/0/0/0
gpt-v258-v2      gpt   v258   2v2 1/1/2/0/0/0 1/1/4/2/1/0 1/1/2/0/0/0 1/1/4/0/0/0
llama-v2-tp2     llama untied 2v2 1/1/2/2/1/0 1/1/2/0/0/0.5 1/1/2/1/0/0 1/1/2/0/1/0
llama-v2-sp-c2   llama untied 2v2 1/1/2/0/0/0/0 1/1/1/0/0/0 1/1/2/0/0/0/1 1/1/1/0/0/0
EOF
tap_diag "tp inside pipeline stages, $STEPS steps, $L layers each: loss = max relative per-step loss difference" \
    "to the 1-rank run (val: of the validation losses); weights = relative L2 difference of the final weights;" \
    "peaks: predicted == measured on every rank" \
    "$(printf '%-16s %5s %6s %2s %-38s | %7s %7s %7s | %s' name model var G 'stages (layers/dp/tp/zero/ckpt/off)' \
    loss val weights peaks)"
while read -r name model variant G stages; do
    ini=$GPT; [ "$model" = llama ] && ini=$LLAMA
    case $variant in
        untied) var="-o model.tied_embeddings=0" ;;
        tied) var="-o model.tied_embeddings=1" ;;
        v258) var="-o model.tied_embeddings=1 -o model.vocab=258 -o model.vocab_pad=1" ;;
    esac
    v=1
    case $G in *v*) v=${G#*v} G=${G%v*} ;; esac
    # shellcheck disable=SC2086
    args=$(VIRTUAL=$v stage_args "$G" $stages)
    np=$(echo "$args" | tail -1)
    # shellcheck disable=SC2046,SC2086
    run "$ini" "$np" "$name" $var -o data.val_interval=10 -o data.val_batches=2 $(echo "$args" | head -1)
    rc=$?
    ref=$model-$variant-ref
    if [ "$name" = "$ref" ]; then ld=0; vd=0; wd=0; else
        ld=$(loss_diff "$W/$ref.jsonl" "$W/$name.jsonl")
        vd=$(KEY=val_loss loss_diff "$W/$ref.jsonl" "$W/$name.jsonl")
        wd=$(weight_diff "$(last_ckpt "$W/$ref.ck")" "$(last_ckpt "$W/$name.ck")")
    fi
    # shellcheck disable=SC2046
    set -- $(peaks "$W/$name.json")
    tap_diag "$(printf '%-16s %5s %6s %2s %-38s | %7s %7s %7s | %s of %s ranks' "$name" "$model" "$variant" "$G" \
        "$stages" "$ld" "$vd" "$wd" "$5" "$6")"
    [ $rc -eq 0 ] || tail -3 "$W/$name.out" | sed 's/^/#   /'
    [ $rc -eq 0 ] && [ "$5" = yes ] && [ "$6" = "$np" ] &&
        num_ok 'l <= 1e-5 && v <= 1e-5 && w <= 1e-5' l="$ld" v="$vd" w="$wd"
    tap_ok $? "$name: $np ranks, stages $stages, G=$G: losses, validation losses and weights within 1e-5 of 1 rank, \
peaks exact"
done <"$W/matrix"

# the tp = 2 stages sum partial results over their tp groups: not the 1-rank run's bits by accident
[ "$(losses "$W/gpt-tied-ref.jsonl")" != "$(losses "$W/gpt-tp2x2.jsonl")" ] && grep -q "tp=2" "$W/gpt-tp2x2.out"
tap_ok $? "gpt-tp2x2 ran with tp=2 (its losses are not bit-identical to the 1-rank run)"

# bf16: 2 stages (dp 2 x tp 2 with ZeRO 3 and offload; dp 1 x tp 2) against the
# 1-rank bf16 run at 2e-2 (bf16 sums round once per addition, differently per plan)
# shellcheck disable=SC2046,SC2086
run "$GPT" 1 bf-ref -o train.precision=bf16 $(stage_args 1 4/1/1/0/0/0 | head -1)
# shellcheck disable=SC2046,SC2086
run "$GPT" 6 bf-tppp -o train.precision=bf16 $(stage_args 1 2/2/2/3/1/0.5 2/1/2/0/0/0 | head -1)
within bf-ref bf-tppp 2e-2 $?
ok=$?
tap_diag "bf16, stages 2/2/2/3/1/0.5 2/1/2/0/0/0: loss $ld, weights $wd, peaks exact on every rank: $exact"
tap_ok $ok "bf16 over 2 stages of tp 2 (dp 2 zero 3 offload; dp 1): losses and weights within 2e-2 of 1 rank, peaks exact"

# ---- 2. checkpoints between 2 stages of tp = 2 and 1 rank -----------------------
# Written at step 10 by 2 stages (dp 2 x tp 2 with ZeRO 3, then dp 1 x tp 2)
# and by 1 rank; each resumed by the other shape. With lr = 0 one step leaves
# the weights as loaded, so the resumed run's step-11 checkpoint must have the
# bits of the one it loaded (1 rank: its own whole tensors; 2 stages: gathered
# over dp, tp and the stages); with the normal lr the resumed run follows the
# writer.
SPLIT="-o checkpoint.interval=10 -o checkpoint.keep=10"
TPPP=$(stage_args 1 2/2/2/3/0/0 2/1/2/0/1/0 | head -1)
ONE=$(stage_args 1 4/1/1/0/0/0 | head -1)
# shellcheck disable=SC2086
run "$GPT" 6 ck-tppp $SPLIT $TPPP
tap_ok $? "2 stages (dp 2 x tp 2 zero 3; dp 1 x tp 2 ckpt 1) write checkpoints at steps 10 and 20"
# shellcheck disable=SC2086
run "$GPT" 1 ck-one $SPLIT $ONE
tap_ok $? "1 rank writes checkpoints at steps 10 and 20"
for case in "ck-tppp one 1" "ck-one tppp 6"; do
    # shellcheck disable=SC2086
    set -- $case
    src=$1; dst=$2; np=$3
    plan=$ONE; [ "$dst" = tppp ] && plan=$TPPP
    for lr in zero normal; do
        name=$src-to-$dst-$lr
        mkdir -p "$W/$name.ck" && cp "$W/$src.ck/step_00000010.ckpt" "$W/$name.ck/" &&
            echo step_00000010.ckpt >"$W/$name.ck/latest" && head -10 "$W/$src.jsonl" >"$W/$name.jsonl"
        if [ $lr = zero ]; then
            # shellcheck disable=SC2086
            run "$GPT" "$np" "$name" $SPLIT -o checkpoint.resume=1 -o train.lr=0 -o train.min_lr=0 -o train.steps=11 \
                $plan
            rc=$?
            wd=$(weight_diff "$W/$src.ck/step_00000010.ckpt" "$W/$name.ck/step_00000011.ckpt" exact)
            grep -q "resumed from" "$W/$name.out" && [ $rc -eq 0 ] && [ "$wd" = 0 ]
            tap_ok $? "$name: the step-10 checkpoint of $src loads on $np rank(s) with every weight bit-exact"
        else
            # shellcheck disable=SC2086
            run "$GPT" "$np" "$name" $SPLIT -o checkpoint.resume=1 $plan
            rc=$?
            ld=$(loss_diff "$W/$src.jsonl" "$W/$name.jsonl")
            wd=$(weight_diff "$W/$src.ck/step_00000020.ckpt" "$W/$name.ck/step_00000020.ckpt")
            tap_diag "$name: losses 11..20 differ from $src by $ld, final weights by $wd"
            grep -q "resumed from" "$W/$name.out" && [ $rc -eq 0 ] &&
                num_ok 'l <= 1e-5 && w <= 1e-5' l="$ld" w="$wd"
            tap_ok $? "$name: resumed on $np rank(s): losses 11..20 and final weights within 1e-5 of $src"
        fi
    done
done
tap_end
