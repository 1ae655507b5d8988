#!/bin/sh
# Tensor parallelism (Megatron layout) on the training runtime, CPU backend
# under mpirun: a matrix of plans with tp = 2 and 4, alone and with dp (2x2,
# 2x4), ZeRO 1-3, activation checkpointing and offloading, GPT and Llama with
# tied and untied embeddings, parallel (Falcon-style) blocks, and a vocabulary
# that tp does not divide, trains
# 20 steps with the same per-step losses as the 1-rank run of the same model
# and ends with the same weights; every rank's measured arena peaks equal the
# prediction. Checkpoints stay whole tensors: one written at tp=2 resumes at
# tp=1 and one written at tp=1 at tp=4 (weights load bit-exactly, training
# continues within tolerance). tp = 2 in two pipeline stages trains like the
# 1-rank run too (the matrix of such plans: tests/train_tp_pp.sh).
#
# Tolerances (fp32): losses within 1e-5 relative per step; final weights
# ||w - w_1rank|| / ||w_1rank|| within 1e-5 (tp changes only the fp32
# summation order: partial sums over heads / MLP units / vocabulary are
# all-reduced; see tests/train_zero.sh for why weights are compared as a
# whole). bf16 rows are compared with the 1-rank bf16 run at 2e-2.
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib_train.sh"  # run, losses, loss_diff, weight_diff, peaks, last_ckpt
TRAIN="$MIST_BUILDDIR/mist-train"
GPT="$MIST_SRCDIR/examples/tiny.ini"
LLAMA="$MIST_SRCDIR/examples/tiny-llama.ini"
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-tp-test.XXXXXX")
trap 'rm -rf "$W"' EXIT
STEPS=20
COMMON="-o train.steps=$STEPS -o train.global_batch=8 -o train.lr=1e-3 -o train.warmup=5 -o log.interval=1000
 -o data.val_interval=0 -o checkpoint.keep=1"


# ---- 1. the matrix -----------------------------------------------------------
# variant: the model change of a row (its reference is the 1-rank run of the
# same variant): untied / tied embeddings, kv4 = 4 kv heads (Llama at tp=4),
# v258 = a vocabulary of 258 with vocab_pad = 1 (tp=4 shards of 65, 65, 65, 63 rows;
# the padded split: tests/train_vocab_pad.sh), par = parallel
# (Falcon-style) blocks: one all-reduce of both branches' partial sums each way
# name           model variant prec dp tp zero ckpt G wo  go  oo  ao   (b = 8 / (dp * G))
cat >"$W/matrix" <<'EOF'
gpt-ref          gpt   -      fp32 1 1 0 0 1 0    0    0    0
gpt-tp2          gpt   -      fp32 1 2 0 0 1 0    0    0    0
gpt-tp4          gpt   -      fp32 1 4 0 0 1 0    0    0    0
gpt-2x2          gpt   -      fp32 2 2 0 0 1 0    0    0    0
gpt-2x2-z1       gpt   -      fp32 2 2 1 1 2 0    0    0    0
gpt-2x2-z2       gpt   -      fp32 2 2 2 0 1 0    0.5  0    0
gpt-2x2-z3       gpt   -      fp32 2 2 3 2 1 0.5  0.5  0.5  0.5
gpt-2x4-z3       gpt   -      fp32 2 4 3 1 1 0    0    0    0
gpt-2x4-z1       gpt   -      fp32 2 4 1 0 1 1    0    1    1
gpt-tp2-off      gpt   -      fp32 1 2 0 1 2 1    1    1    1
gpt-untied-ref   gpt   untied fp32 1 1 0 0 1 0    0    0    0
gpt-untied-tp2   gpt   untied fp32 1 2 0 0 1 0    0    0    0
gpt-untied-2x2   gpt   untied fp32 2 2 3 1 1 0.5  0    0.5  0
gpt-v258-ref     gpt   v258   fp32 1 1 0 0 1 0    0    0    0
gpt-v258-tp4     gpt   v258   fp32 1 4 2 0 1 0    0    0    0
gpt-v258-2x4     gpt   v258   fp32 2 4 3 0 1 0    0    0    0
llama-ref        llama -      fp32 1 1 0 0 1 0    0    0    0
llama-tp2        llama -      fp32 1 2 0 0 1 0    0    0    0
llama-2x2-z2     llama -      fp32 2 2 2 1 1 0    0    0    0.5
llama-2x2-z3     llama -      fp32 2 2 3 0 2 0.5  0.5  0.5  0
llama-tied-ref   llama tied   fp32 1 1 0 0 1 0    0    0    0
llama-tied-2x2   llama tied   fp32 2 2 1 0 1 0    0    0    0
llama-kv4-ref    llama kv4    fp32 1 1 0 0 1 0    0    0    0
llama-kv4-tp4    llama kv4    fp32 1 4 0 0 1 0    0    0    0
llama-kv4-2x4    llama kv4    fp32 2 4 3 2 1 1    1    1    1
gpt-par-ref      gpt   par    fp32 1 1 0 0 1 0    0    0    0
gpt-par-tp2      gpt   par    fp32 1 2 0 0 1 0    0    0    0
gpt-par-2x2-z3   gpt   par    fp32 2 2 3 1 1 0.5  0.5  0.5  0.5
llama-par-ref    llama par    fp32 1 1 0 0 1 0    0    0    0
llama-par-2x2-z2 llama par    fp32 2 2 2 2 1 0    0    0    0.5
gpt-bf-ref       gpt   -      bf16 1 1 0 0 1 0    0    0    0
gpt-bf-2x2       gpt   -      bf16 2 2 3 1 1 0.5  0.5  0.5  0.5
gpt-tp2-sel      gpt   -      fp32 1 2 0 0 1 0    0    0    0
gpt-2x2-z3-sel   gpt   -      fp32 2 2 3 1 1 0.5  0.5  0.5  0.5
gpt-tp4-sel      gpt   -      fp32 1 4 1 1 2 0    0    0    1
llama-2x2-sel    llama -      fp32 2 2 2 1 1 0    0    0    0.5
llama-kv4-4-sel  llama kv4    fp32 1 4 0 0 1 0    0    0    0
gpt-par-tp2-sel  gpt   par    fp32 1 2 0 1 2 0    0    0    0.3
EOF
fmt='%-15s %5s %6s %4s %2s %2s %4s %4s %2s %4s %4s %4s %4s | %7s %7s | %9s %9s %7s %7s %s'
tap_diag "plan matrix, $STEPS steps each: loss = max relative difference of the per-step losses (and the" \
    "validation losses at steps 10 and 20) to the 1-rank run;" \
    "weights = relative L2 difference of the final weights; peaks = rank 0 predicted/measured arena bytes" \
    "$(printf "$fmt" name model var prec dp tp zero ckpt G wo go oo ao loss weights dev-pred dev-meas hst-pred \
    hst-meas all-ranks)"
# judge RC LABEL: one matrix row's verdict against its 1-rank reference run (the loop's
# variables: name model variant prec dp tp zero ckpt G wo go oo ao); the reference itself is 0 off
judge() {
    rc=$1 label=$2
    ref=$model-ref; tol=1e-5
    [ "$variant" != - ] && ref=$model-$variant-ref
    [ "$prec" = bf16 ] && { ref=gpt-bf-ref; tol=2e-2; }
    if [ "$name" = "$ref" ]; then ld=0; wd=0; else
        ld=$(loss_diff "$W/$ref.jsonl" "$W/$name.jsonl")
        wd=$(weight_diff "$(last_ckpt "$W/$ref.ck")" "$(last_ckpt "$W/$name.ck")")
    fi
    # shellcheck disable=SC2046
    set -- $(peaks "$W/$name.json")
    tap_diag "$(printf "$fmt" "$name" "$model" "$variant" "$prec" "$dp" "$tp" "$zero" "$ckpt" "$G" "$wo" "$go" \
        "$oo" "$ao" "$ld" "$wd" "$1" "$2" "$3" "$4" "$5")"
    [ "$rc" -eq 0 ] || tail -3 "$W/$name.out" | sed 's/^/#   /'
    [ "$rc" -eq 0 ] && [ "$5" = yes ] && num_ok 'l <= t && w <= t' l="$ld" w="$wd" t="$tol"
    tap_ok $? "$name: ${label}dp=$dp tp=$tp zero=$zero ckpt=$ckpt G=$G wo=$wo go=$go oo=$oo ao=$ao $model $variant $prec: \
losses and weights within $tol of 1 rank, peaks exact"
}
while read -r name model variant prec dp tp zero ckpt G wo go oo ao; do
    ini=$GPT; [ "$model" = llama ] && ini=$LLAMA
    case $variant in
        untied) var="-o model.tied_embeddings=0" ;;
        tied) var="-o model.tied_embeddings=1" ;;
        kv4) var="-o model.kv_heads=4" ;;
        v258) var="-o model.vocab=258 -o model.vocab_pad=1" ;;
        par) var="-o model.parallel_block=1" ;;
        *) var="" ;;
    esac
    case $name in *-sel) var="$var -o stage.0.recompute=selective" ;; esac  # selective recompute
    b=$((8 / (dp * G)))  # validation: G batches of b*dp, the same 8 sequences as the 1-rank run
    # shellcheck disable=SC2086
    run "$ini" $((dp * tp)) "$name" $var -o train.precision="$prec" -o stage.0.dp="$dp" -o stage.0.tp="$tp" \
        -o stage.0.b="$b" -o plan.G="$G" -o stage.0.zero="$zero" -o stage.0.ckpt="$ckpt" -o stage.0.wo="$wo" \
        -o stage.0.go="$go" -o stage.0.oo="$oo" -o stage.0.ao="$ao" -o data.val_interval=10 -o data.val_batches=1
    judge $? ""
done <"$W/matrix"

# the tp=2 run sums partial results over its tp group: it must not be the 1-rank run's bits by accident
[ "$(losses "$W/gpt-ref.jsonl")" != "$(losses "$W/gpt-tp2.jsonl")" ] && grep -q "tp=2" "$W/gpt-tp2.out"
tap_ok $? "gpt-tp2 ran with tp=2 (its losses are not bit-identical to the 1-rank run)"

# ---- 1b. sequence parallelism ([stage.0] sp = 1) --------------------------------
# The same plans with norms and residual adds on N/tp rows of each tp rank
# (runtime/model_sp.h): all-gathers and reduce-scatters in place of the
# all-reduces, the norm gradients summed over tp. Against the 1-rank runs of
# section 1, same tolerances; predicted = measured peaks on every rank (the
# planner's too: peaks()).
cat >"$W/sp-matrix" <<'EOF'
gpt-sp2          gpt   -      fp32 1 2 0 0 1 0    0    0    0
gpt-sp4-ck       gpt   -      fp32 1 4 0 1 2 0    0    0    0
gpt-sp-2x2-z3    gpt   -      fp32 2 2 3 1 1 0.5  0.5  0.5  0.5
gpt-sp-2x2-off   gpt   -      fp32 2 2 1 0 1 1    0    1    1
gpt-untied-sp2   gpt   untied fp32 1 2 2 2 1 0    0    0    0
gpt-v258-sp4     gpt   v258   fp32 1 4 0 0 1 0    0    0    0.5
llama-sp2        llama -      fp32 1 2 0 0 1 0    0    0    0
llama-sp-2x2-z2  llama -      fp32 2 2 2 1 1 0    0    0    0.5
llama-kv4-sp4-z3 llama kv4    fp32 1 4 3 2 2 0.5  0.5  0.5  0.5
gpt-par-sp2-ck   gpt   par    fp32 1 2 0 1 1 0    0    0    0
llama-par-sp-2x2 llama par    fp32 2 2 2 0 1 0    0    0    0.5
gpt-bf-sp-2x2    gpt   -      bf16 2 2 3 1 1 0.5  0.5  0.5  0.5
EOF
while read -r name model variant prec dp tp zero ckpt G wo go oo ao; do
    ini=$GPT; [ "$model" = llama ] && ini=$LLAMA
    case $variant in
        untied) var="-o model.tied_embeddings=0" ;;
        kv4) var="-o model.kv_heads=4" ;;
        v258) var="-o model.vocab=258 -o model.vocab_pad=1" ;;
        par) var="-o model.parallel_block=1" ;;
        *) var="" ;;
    esac
    b=$((8 / (dp * G)))
    # shellcheck disable=SC2086
    run "$ini" $((dp * tp)) "$name" $var -o train.precision="$prec" -o stage.0.dp="$dp" -o stage.0.tp="$tp" \
        -o stage.0.sp=1 -o stage.0.b="$b" -o plan.G="$G" -o stage.0.zero="$zero" -o stage.0.ckpt="$ckpt" \
        -o stage.0.wo="$wo" -o stage.0.go="$go" -o stage.0.oo="$oo" -o stage.0.ao="$ao" -o data.val_interval=10 \
        -o data.val_batches=1
    judge $? "sp=1 "
done <"$W/sp-matrix"
# sp changes what the ranks compute (partial norm gradients, other sums): not the tp run's bits by accident
[ "$(losses "$W/gpt-tp2.jsonl")" != "$(losses "$W/gpt-sp2.jsonl")" ] && grep -q "sp=1" "$W/gpt-sp2.out"
tap_ok $? "gpt-sp2 ran with sp=1 (its losses are not bit-identical to gpt-tp2's)"

# sp = 1 needs tp >= 2 (it would do nothing at tp = 1: refused, not ignored)
run "$GPT" 1 sp-tp1 -o stage.0.dp=1 -o stage.0.b=8 -o stage.0.sp=1
rc=$?
[ $rc -ne 0 ] && grep -q "sp = 1" "$W/sp-tp1.out" && grep -q "tp = 1" "$W/sp-tp1.out"
tap_ok $? "sp = 1 at tp = 1 is refused with a message naming sp and tp (exit $rc)"

# The saved activations of one block at tp = 8 (8 ranks, 8 heads): the
# runtime measures what block 0 keeps after its forward (its saved tensors
# and its output, the next block's input: block_saved_bytes in the summary),
# on every rank equal to docs/tensor-parallel.md's formula
#   sp = 1: (b s / tp) (4 e h + 4 n k + e (QKV + a hd + FC + F) + 4 a)
#   sp = 0: b s (4 e h + 4 n k) + (b s / tp) (e (QKV + a hd + FC + F) + 4 a)
# (QKV = (a + 2 kv) hd; n = 2 norms, k = 2 statistics each for LayerNorm, 1
# for RMSNorm; FC = F, or 2F with SwiGLU).
for sp in 1 0; do
    run "$GPT" 8 sp-tp8-$sp -o model.heads=8 -o stage.0.dp=1 -o stage.0.tp=8 -o stage.0.sp=$sp -o stage.0.b=8 \
        -o train.steps=2
    rc=$?
    meas=$(grep -o '"block_saved_bytes": [0-9]*' "$W/sp-tp8-$sp.json" | sed 's/.*: //' | sort -u)
    # tiny.ini: h = 64, a = kv = 8 (hd = 8), F = 4h = 256, GELU, LayerNorm, fp32 (e = 4), s = 64; b = 8
    e=4 h=64 a=8 kv=8 hd=8 F=256 FC=256 n=2 k=2 s=64 b=8 tp=8
    rest=$((e * ((a + 2 * kv) * hd + a * hd + FC + F) + 4 * a))
    if [ $sp = 1 ]; then want=$((b * s / tp * (4 * e * h + 4 * n * k + rest)))
    else want=$((b * s * (4 * e * h + 4 * n * k) + b * s / tp * rest)); fi
    # shellcheck disable=SC2046
    set -- $(peaks "$W/sp-tp8-$sp.json")
    tap_diag "tp = 8, sp = $sp: block 0 keeps $meas bytes on every rank; formula $want; peaks exact: $5"
    [ $rc -eq 0 ] && [ "$meas" = "$want" ] && [ "$5" = yes ]
    tap_ok $? "tp = 8, sp = $sp: a block's saved activation bytes measured on all 8 ranks = the documented formula"
done

# ---- 2. checkpoints across tp degrees ------------------------------------------
# written at tp=2 (dp=2, zero=3) at step 10, resumed at tp=1 (1 rank); written
# at 1 rank at step 10, resumed at tp=4 (zero=1). With lr = 0 one step leaves
# the weights as loaded, so the resumed run's checkpoint must have the bits of
# the one it loaded; with the normal lr the resumed run follows the writer.
SPLIT="-o checkpoint.interval=10 -o checkpoint.keep=10"
run "$GPT" 4 ck-tp2 $SPLIT -o stage.0.dp=2 -o stage.0.tp=2 -o stage.0.b=4 -o stage.0.zero=3
tap_ok $? "dp=2 tp=2 zero=3 run writes checkpoints at steps 10 and 20"
run "$GPT" 1 ck-tp1 $SPLIT -o stage.0.dp=1 -o stage.0.b=8
tap_ok $? "1-rank run writes checkpoints at steps 10 and 20"
run "$GPT" 4 ck-sp4 $SPLIT -o stage.0.dp=1 -o stage.0.tp=4 -o stage.0.sp=1 -o stage.0.b=8
tap_ok $? "tp=4 sp=1 run writes checkpoints at steps 10 and 20"
for case in "ck-tp2 tp1 1 -o stage.0.dp=1 -o stage.0.b=8" \
    "ck-tp1 tp4 4 -o stage.0.dp=1 -o stage.0.tp=4 -o stage.0.b=8 -o stage.0.zero=1" \
    "ck-sp4 tp2 4 -o stage.0.dp=2 -o stage.0.tp=2 -o stage.0.b=4 -o stage.0.zero=3" \
    "ck-tp1 sp2 2 -o stage.0.dp=1 -o stage.0.tp=2 -o stage.0.sp=1 -o stage.0.b=8"; do
    set -- $case
    src=$1; dst=$2; np=$3; shift 3
    for lr in zero normal; do
        name=$src-to-$dst-$lr
        mkdir -p "$W/$name.ck" && cp "$W/$src.ck/step_00000010.ckpt" "$W/$name.ck/" &&
            echo step_00000010.ckpt >"$W/$name.ck/latest" && head -10 "$W/$src.jsonl" >"$W/$name.jsonl"
        if [ $lr = zero ]; then
            run "$GPT" "$np" "$name" $SPLIT -o checkpoint.resume=1 -o train.lr=0 -o train.min_lr=0 \
                -o train.steps=11 "$@"
            rc=$?
            wd=$(weight_diff "$W/$src.ck/step_00000010.ckpt" "$W/$name.ck/step_00000011.ckpt" exact)
            grep -q "resumed from" "$W/$name.out" && [ $rc -eq 0 ] && [ "$wd" = 0 ]
            tap_ok $? "$name: the step-10 checkpoint of $src loads under $* with every weight bit-exact"
        else
            run "$GPT" "$np" "$name" $SPLIT -o checkpoint.resume=1 "$@"
            rc=$?
            ld=$(loss_diff "$W/$src.jsonl" "$W/$name.jsonl")
            wd=$(weight_diff "$W/$src.ck/step_00000020.ckpt" "$W/$name.ck/step_00000020.ckpt")
            tap_diag "$name: losses 11..20 differ by $ld, final weights by $wd"
            grep -q "resumed from" "$W/$name.out" && [ $rc -eq 0 ] &&
                num_ok 'l <= 1e-5 && w <= 1e-5' l="$ld" w="$wd"
            tap_ok $? "$name: resumed under $*: losses 11..20 and final weights within 1e-5 of $src"
        fi
    done
done
# tensor and pipeline parallelism in one plan (tp = 2 in each of 2 stages of
# one block each) trains like the 1-rank run; tests/train_tp_pp.sh has the matrix
run "$GPT" 4 tp-pp -o plan.stages=2 -o stage.0.layers=1 -o stage.0.dp=1 -o stage.0.tp=2 -o stage.0.b=8 \
    -o stage.1.layers=1 -o stage.1.dp=1 -o stage.1.tp=2 -o stage.1.b=8 -o data.val_interval=10 -o data.val_batches=1
rc=$?
ld=$(loss_diff "$W/gpt-ref.jsonl" "$W/tp-pp.jsonl")
wd=$(weight_diff "$(last_ckpt "$W/gpt-ref.ck")" "$(last_ckpt "$W/tp-pp.ck")")
# shellcheck disable=SC2046
set -- $(peaks "$W/tp-pp.json")
tap_diag "tp = 2 in 2 stages: exit $rc, losses $ld, weights $wd, peaks exact on every rank: $5"
[ $rc -eq 0 ] && [ "$5" = yes ] && num_ok 'l <= 1e-5 && w <= 1e-5' l="$ld" w="$wd"
tap_ok $? "tp = 2 in each of 2 stages: losses and weights within 1e-5 of 1 rank, peaks exact"
tap_end
