#!/bin/sh
# 1F1B pipeline parallelism on the CPU backend under mpirun: a matrix of plans
# with 2, 3 and 4 stages (even and uneven layers, different dp per stage,
# ZeRO / ckpt / offload on some stages, GPT and Llama, tied and untied
# embeddings), and of interleaved plans ([plan] virtual = 2 and 3), trains 20 steps with the same per-step and validation losses as
# the 1-rank run and ends with the same weights (bf16: close to them); every
# rank's measured arena peaks equal the prediction; checkpoints move between
# 1 and several stages bit-exactly; a rank killed with SIGKILL ends the
# pipeline job with a non-zero exit.
#
# Tolerances (fp32): losses within 1e-5 relative per step, final weights
# within 1e-5 in relative L2 over the whole model (the plans differ from the
# 1-rank run only in the fp32 summation order of gradients: per-stage dp sums,
# the tied embedding's two halves summed once at the end, the norm's sum of
# squares per stage); see tests/train_zero.sh for why weights are compared as
# a whole.
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib_train.sh"  # run, losses, loss_diff, weight_diff, peaks, last_ckpt
TRAIN="$MIST_BUILDDIR/mist-train"
GPT="$MIST_SRCDIR/examples/tiny.ini"
LLAMA="$MIST_SRCDIR/examples/tiny-llama.ini"
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-pp-test.XXXXXX")
trap 'rm -rf "$W"' EXIT
STEPS=20
L=4
COMMON="-o train.steps=$STEPS -o train.global_batch=8 -o train.lr=1e-3 -o train.warmup=5 -o log.interval=1000
 -o data.val_interval=0 -o checkpoint.keep=1 -o model.layers=$L -o model.seq_len=32"

# ---- 1. the matrix -----------------------------------------------------------
# name model tied G stages (layers/dp/tp/zero/ckpt/offload per stage); b = 8 / (dp * G).
# Validation (forward only through the stages) runs at steps 10 and 20 over 2G
# micro-batches of 8/G sequences: the same 16 sequences for every plan.
cat >"$W/matrix" <<'EOF'
gpt-ref      gpt   1 1 4/1/1/0/0/0
gpt-s2       gpt   1 2 2/1/1/0/0/0 2/1/1/0/0/0
gpt-s2-odd   gpt   1 4 3/1/1/0/0/0 1/1/1/0/0/0
gpt-s4       gpt   1 4 1/1/1/0/0/0 1/1/1/0/0/0 1/1/1/0/0/0 1/1/1/0/0/0
gpt-het      gpt   1 2 2/2/1/0/0/0 2/1/1/0/0/0
gpt-het3     gpt   1 2 1/1/1/0/0/0 2/2/1/2/1/0 1/4/1/3/0/0.5
gpt-zero     gpt   1 1 1/2/1/1/1/0 3/2/1/3/2/0.5
gpt-off      gpt   1 4 2/1/1/0/2/1 2/2/1/1/0/0.5
gpt-untied   gpt   0 1 4/1/1/0/0/0
gpt-untied2  gpt   0 2 1/2/1/2/0/0 3/1/1/0/1/0
llama-ref    llama 0 1 4/1/1/0/0/0
llama-s2     llama 0 2 3/2/1/3/1/0.5 1/1/1/0/0/0
llama-tied   llama 1 1 4/1/1/0/0/0
llama-tied3  llama 1 2 1/1/1/0/0/0 1/2/1/1/0/0 2/1/1/2/1/0.25
gpt-sel      gpt   1 2 2/1/1/0/1/0/0/sel 2/2/1/3/0/0.5/0/sel
gpt-sel-mix  gpt   1 4 3/1/1/1/1/0.5/0/sel 1/1/1/0/0/0
llama-sel    llama 0 2 1/1/1/0/0/0 3/2/1/2/1/1/0/sel
EOF
tap_diag "pipeline plan matrix, $STEPS steps, $L layers each: loss = max relative per-step loss difference to the" \
    "1-rank run (val: of the validation losses); weights = relative L2 difference of the final weights;" \
    "peaks: predicted == measured on every rank" \
    "$(printf '%-12s %5s %4s %2s %-47s | %7s %7s %7s | %s' name model tied G 'stages (layers/dp/tp/zero/ckpt/offload)' \
    loss val weights peaks)"
while read -r name model tied G stages; do
    ini=$GPT; [ "$model" = llama ] && ini=$LLAMA
    # shellcheck disable=SC2086
    args=$(stage_args "$G" $stages)
    np=$(echo "$args" | tail -1)
    # shellcheck disable=SC2046
    run "$ini" "$np" "$name" -o model.tied_embeddings="$tied" -o data.val_interval=10 -o data.val_batches=2 \
        $(echo "$args" | head -1)
    rc=$?
    ref=$model-ref; [ "$tied" = 0 ] && [ "$model" = gpt ] && ref=gpt-untied
    [ "$tied" = 1 ] && [ "$model" = llama ] && ref=llama-tied
    if [ "$name" = "$ref" ]; then ld=0; vd=0; wd=0; else
        ld=$(loss_diff "$W/$ref.jsonl" "$W/$name.jsonl")
        vd=$(KEY=val_loss loss_diff "$W/$ref.jsonl" "$W/$name.jsonl")
        wd=$(weight_diff "$(last_ckpt "$W/$ref.ck")" "$(last_ckpt "$W/$name.ck")")
    fi
    # shellcheck disable=SC2046
    set -- $(peaks "$W/$name.json")
    tap_diag "$(printf '%-12s %5s %4s %2s %-47s | %7s %7s %7s | %s of %s ranks' "$name" "$model" "$tied" "$G" \
        "$stages" "$ld" "$vd" "$wd" "$5" "$6")"
    [ $rc -eq 0 ] || tail -3 "$W/$name.out" | sed 's/^/#   /'
    [ $rc -eq 0 ] && [ "$5" = yes ] && [ "$6" = "$np" ] &&
        num_ok 'l <= 1e-5 && v <= 1e-5 && w <= 1e-5' l="$ld" v="$vd" w="$wd"
    tap_ok $? "$name: $np ranks, stages $stages, G=$G: losses, validation losses and weights within 1e-5 of 1 rank, \
peaks exact"
done <"$W/matrix"

# bf16: 2 stages of dp 2 (ZeRO 3, offload) and dp 1 against the 1-rank bf16 run
# at 2e-2 (bf16 gradient sums round once per addition, differently per plan)
# shellcheck disable=SC2046,SC2086
run "$GPT" 1 bf-ref -o train.precision=bf16 $(stage_args 2 4/1/1/0/0/0 | head -1)
# shellcheck disable=SC2046,SC2086
run "$GPT" 3 bf-s2 -o train.precision=bf16 $(stage_args 2 1/2/1/3/1/0.5 3/1/1/0/0/0 | head -1)
within bf-ref bf-s2 2e-2 $?
ok=$?
tap_diag "bf16, stages 1/2/1/3/1/0.5 3/1/1/0/0/0: loss $ld, weights $wd, peaks exact on every rank: $exact"
tap_ok $ok "bf16 over 2 stages (dp 2 zero 3 offload, dp 1): losses and weights within 2e-2 of 1 rank, peaks exact"

# ---- 1b. interleaved 1F1B ([plan] virtual = v: the stages are P*v chunks) --------
# 8 blocks; name model tied G v chunks (layers/dp/tp/zero/ckpt/offload, chunk c on the ranks of
# chunk c mod P): v = 2 and 3, P = 2 and 4, uneven chunks, dp 2 and dp 1 ranks, ZeRO 1-3, ckpt
# and offload on some chunks, tied and untied embeddings. Every rank's peaks (its chunks' arenas
# together) equal the runtime's prediction and the planner's per pipeline rank.
cat >"$W/vmatrix" <<'EOF'
gpt8-ref     gpt   1 2 1 8/1/1/0/0/0
gpt8-v2      gpt   1 2 2 2/1/1/0/0/0 2/1/1/0/0/0 2/1/1/0/0/0 2/1/1/0/0/0
gpt8-v2-odd  gpt   1 2 2 3/1/1/1/1/0 1/1/1/0/0/0 1/1/1/2/0/0 3/1/1/0/2/0.5
gpt8-v2-dp   gpt   1 2 2 2/2/1/1/0/0 2/1/1/0/1/0 2/2/1/3/1/0.5 2/1/1/2/0/0
gpt8-v3      gpt   1 2 3 2/1/1/0/0/0 1/1/1/1/0/0 1/1/1/0/1/0 2/1/1/0/0/0 1/1/1/2/0/0 1/1/1/0/0/0.25
gpt8-v2-p4   gpt   1 4 2 1/1/1/0/0/0 1/1/1/0/0/0 1/1/1/1/0/0 1/1/1/0/1/0 1/1/1/0/0/0 1/1/1/3/0/0 1/1/1/0/0/0 1/1/1/0/0/0
llama8-ref   llama 0 2 1 8/1/1/0/0/0
llama8-v2    llama 0 2 2 1/2/1/3/1/0 3/1/1/0/0/0.5 2/2/1/1/0/0 2/1/1/2/1/0
llama8-v3    llama 0 2 3 1/1/1/0/0/0 2/1/1/2/0/0 1/1/1/0/1/0 1/1/1/1/0/0 2/1/1/0/0/0 1/1/1/0/0/0
EOF
while read -r name model tied G v stages; do
    ini=$GPT; [ "$model" = llama ] && ini=$LLAMA
    # shellcheck disable=SC2086
    args=$(VIRTUAL=$v stage_args "$G" $stages)
    np=$(echo "$args" | tail -1)
    # shellcheck disable=SC2046
    run "$ini" "$np" "$name" -o model.layers=8 -o model.tied_embeddings="$tied" -o data.val_interval=10 \
        -o data.val_batches=2 $(echo "$args" | head -1)
    rc=$?
    ref=$model"8-ref"
    if [ "$name" = "$ref" ]; then ld=0; vd=0; wd=0; else
        ld=$(loss_diff "$W/$ref.jsonl" "$W/$name.jsonl")
        vd=$(KEY=val_loss loss_diff "$W/$ref.jsonl" "$W/$name.jsonl")
        wd=$(weight_diff "$(last_ckpt "$W/$ref.ck")" "$(last_ckpt "$W/$name.ck")")
    fi
    # shellcheck disable=SC2046
    set -- $(peaks "$W/$name.json")
    tap_diag "$(printf '%-12s %5s %4s %2s v%s %-47s | %7s %7s %7s | %s of %s ranks' "$name" "$model" "$tied" "$G" \
        "$v" "$stages" "$ld" "$vd" "$wd" "$5" "$6")"
    [ $rc -eq 0 ] || tail -3 "$W/$name.out" | sed 's/^/#   /'
    [ $rc -eq 0 ] && [ "$5" = yes ] && [ "$6" = "$np" ] &&
        num_ok 'l <= 1e-5 && v <= 1e-5 && w <= 1e-5' l="$ld" v="$vd" w="$wd"
    tap_ok $? "$name: $np ranks, virtual = $v, chunks $stages, G=$G: losses, validation losses and weights within \
1e-5 of 1 rank, peaks exact"
done <"$W/vmatrix"
# [log] trace of an interleaved run: every chunk's passes on its pipeline rank's row (tests/traces.sh
# checks the trace against the predicted one)
# shellcheck disable=SC2046,SC2086
run "$GPT" 2 v-trace -o model.layers=8 -o log.trace="$W/v.trace.json" \
    $(VIRTUAL=2 stage_args 2 2/1/1/0/0/0 2/1/1/0/0/0 2/1/1/0/0/0 2/1/1/0/0/0 | head -1)
rc=$?
n=$(grep -c '"name": "stage [0-3] backward"' "$W/v.trace.json" 2>/dev/null)
[ $rc -eq 0 ] && [ "$n" = 8 ]
tap_ok $? "virtual = 2 with [log] trace: the trace holds 4 chunks x 2 micro-batches of backward passes ($n; exit $rc)"

# ---- 2. checkpoints move between pipeline shapes ------------------------------
# Written by 2 stages at step 10, resumed at 1 rank and by 3 stages; written by
# 1 rank, resumed by 2 stages. A bit-exact load gives a bit-identical first
# resumed loss when every stage keeps b and G (the CPU matmul's rounding of a
# row depends on how many rows it multiplies); the shapes differ in stages,
# layers per stage, ZeRO, ckpt and offload. A plan with different dp per stage
# resumed under itself writes a byte-identical step-20 checkpoint.
SPLIT="-o checkpoint.interval=10 -o checkpoint.keep=10"
# shellcheck disable=SC2046,SC2086
run "$GPT" 2 ck-s2 $SPLIT $(stage_args 2 2/1/1/1/0/0 2/1/1/0/1/0 | head -1)
tap_ok $? "2 stages (zero 1; ckpt 1) write checkpoints at steps 10 and 20"
# shellcheck disable=SC2046,SC2086
run "$GPT" 1 ck-one $SPLIT $(stage_args 2 4/1/1/0/0/0 | head -1)
tap_ok $? "1 rank writes checkpoints at steps 10 and 20"
# shellcheck disable=SC2046,SC2086
run "$GPT" 3 ck-het $SPLIT $(stage_args 2 2/2/1/1/0/0 2/1/1/0/1/0 | head -1)
tap_ok $? "2 stages of dp 2 and dp 1 write checkpoints at steps 10 and 20"
resume() {  # resume NAME SRC NP ARGS...
    name=$1; src=$2; np=$3; shift 3
    mkdir -p "$W/$name.ck" && cp "$W/$src.ck/step_00000010.ckpt" "$W/$name.ck/" &&
        echo step_00000010.ckpt >"$W/$name.ck/latest" && head -10 "$W/$src.jsonl" >"$W/$name.jsonl"
    # shellcheck disable=SC2086
    run "$GPT" "$np" "$name" $SPLIT -o checkpoint.resume=1 "$@"
    rc=$?
    grep -q "resumed from" "$W/$name.out" && [ $rc -eq 0 ]
    tap_ok $? "$name: the step-10 checkpoint of $src resumes on $np ranks"
    [ "$(losses "$W/$src.jsonl" | sed -n 11p)" = "$(losses "$W/$name.jsonl" | sed -n 11p)" ]
    tap_ok $? "$name: the first resumed loss is bit-identical to $src's (the weights loaded bit-exactly)"
    ld=$(loss_diff "$W/$src.jsonl" "$W/$name.jsonl")
    wd=$(weight_diff "$W/$src.ck/step_00000020.ckpt" "$W/$name.ck/step_00000020.ckpt")
    tap_diag "$name: losses 11..20 differ from $src by $ld, final weights by $wd"
    num_ok 'l <= 1e-5 && w <= 1e-5' l="$ld" w="$wd"
    tap_ok $? "$name: losses and final weights within 1e-5 of $src"
}
# shellcheck disable=SC2046,SC2086
resume ck-s2-to-one ck-s2 1 $(stage_args 2 4/1/1/0/0/0 | head -1)
# shellcheck disable=SC2046,SC2086
resume ck-s2-to-s3 ck-s2 3 $(stage_args 2 1/1/1/3/0/0.5 2/1/1/0/0/0 1/1/1/2/1/0 | head -1)
# shellcheck disable=SC2046,SC2086
resume ck-one-to-s2 ck-one 2 $(stage_args 2 3/1/1/2/0/0 1/1/1/0/0/0.5 | head -1)
# selective recompute on both stages: the weights and the optimizer state do not depend on it
# shellcheck disable=SC2046,SC2086
resume ck-s2-to-sel ck-s2 2 $(stage_args 2 3/1/1/0/0/0/0/sel 1/1/1/1/0/0.5/0/sel | head -1)
# shellcheck disable=SC2046,SC2086
resume ck-het-same ck-het 3 $(stage_args 2 2/2/1/1/0/0 2/1/1/0/1/0 | head -1)
cmp -s "$W/ck-het.ck/step_00000020.ckpt" "$W/ck-het-same.ck/step_00000020.ckpt"
tap_ok $? "resumed under the same plan of dp 2 and dp 1 stages: the step-20 checkpoint is byte-identical"
# interleaved: written by 2 ranks of 2 chunks each, resumed at 1 rank and by 2 plain stages;
# written by 1 rank and by 2 plain stages, resumed interleaved
# shellcheck disable=SC2046,SC2086
run "$GPT" 2 ck-v2 $SPLIT $(VIRTUAL=2 stage_args 2 1/1/1/1/0/0 1/1/1/0/1/0 1/1/1/2/0/0 1/1/1/0/0/0.5 | head -1)
tap_ok $? "virtual = 2 (4 chunks on 2 ranks) writes checkpoints at steps 10 and 20"
# shellcheck disable=SC2046,SC2086
resume ck-v2-to-one ck-v2 1 $(stage_args 2 4/1/1/0/0/0 | head -1)
# shellcheck disable=SC2046,SC2086
resume ck-v2-to-s2 ck-v2 2 $(stage_args 2 3/1/1/0/1/0 1/1/1/3/0/0 | head -1)
# shellcheck disable=SC2046,SC2086
resume ck-one-to-v2 ck-one 2 $(VIRTUAL=2 stage_args 2 1/1/1/0/0/0 1/1/1/3/0/0 1/1/1/0/1/0 1/1/1/0/0/0 | head -1)
# shellcheck disable=SC2046,SC2086
resume ck-s2-to-v2 ck-s2 2 $(VIRTUAL=2 stage_args 2 1/1/1/2/0/0.5 1/1/1/0/0/0 1/1/1/1/0/0 1/1/1/0/1/0 | head -1)

# ---- 3. a rank killed with SIGKILL ends the pipeline job ----------------------
export OMPI_MCA_rmaps_base_oversubscribe=1
# shellcheck disable=SC2046,SC2086
mpirun --oversubscribe -np 3 "$TRAIN" "$GPT" $COMMON -o train.steps=100000 -o log.jsonl="$W/kill.jsonl" \
    $(stage_args 2 2/2/1/0/0/0 2/1/1/0/0/0 | head -1) >"$W/kill.out" 2>&1 </dev/null &
mpid=$!
i=0
while [ "$( (wc -l <"$W/kill.jsonl") 2>/dev/null || echo 0)" -lt 3 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
kill_rank "$mpid" last  # the last rank (stage 1) dies
tap_diag "killed rank pid ${victim:-none} of a 2-stage job; mpirun exited $rc after ${dt} s"
[ -n "$victim" ] && [ $rc -ne 0 ] && num_ok 't < 10' t="$dt"
tap_ok $? "kill -9 of one pipeline rank ends mpirun with a non-zero exit within 10 s (rc $rc, ${dt} s)"
tap_end
