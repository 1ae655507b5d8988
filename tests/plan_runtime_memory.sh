#!/bin/sh
# The planner's memory model against the runtime's measurement: for a matrix
# of single-stage plans (GPT, Llama and parallel-block models, fp32 and bf16, 1 to 4 ranks incl. a dp
# that is not a power of two, tp 2 and 4 with and without sequence parallelism, ZeRO 0-3, checkpointing, every
# offload knob and their combinations) and one of 1F1B pipeline plans (2, 3
# and 4 stages, see the second matrix) mist-train runs 2 steps on the CPU
# backend and writes every rank's measured arena peaks and its stage to its
# summary file; mist-plan --analyze --json evaluates the same config and
# overrides (a third matrix: selective recompute against its formula). Per
# rank, against its own stage's prediction, exactly:
#   max(peak_bytes_fwd, peak_bytes_bwd) == measured_device_peak_bytes
#   memory.host_bytes                  == measured_host_peak_bytes
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
TRAIN="$MIST_BUILDDIR/mist-train"
PLAN="$MIST_BUILDDIR/mist-plan"
GPT="$MIST_SRCDIR/examples/tiny.ini"
LLAMA="$MIST_SRCDIR/examples/tiny-llama.ini"
FALCON="$MIST_SRCDIR/examples/tiny-falcon.ini"
# model column -> ini (the config) and extra (its overrides): gpt, llama, falcon
# (parallel blocks, one kv head), llama-par (Llama with parallel blocks and 2 kv
# heads, so that tp = 2 works)
set_model() {
    extra=
    case $1 in
        llama) ini=$LLAMA ;;
        falcon) ini=$FALCON ;;
        llama-par) ini=$LLAMA extra="-o model.parallel_block=1" ;;
        *) ini=$GPT ;;
    esac
}
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-planmem-test.XXXXXX")
trap 'rm -rf "$W"' EXIT

# name model prec dp zero ckpt G wo go oo ao layers global_batch [tp [sp]] (ranks = dp * tp,
# b = global_batch / (dp * G); tp defaults to 1, sp (sequence parallelism) to 0; zero: 0-3, or a
# PaRO shard code in groups of the default shard_group, gpus_per_node / tp = 4 / tp dp ranks: at
# tp 2 and dp 4 groups of 2, at dp 3 a group of 4 that holds every dp rank, so I is G)
cat >"$W/matrix" <<'EOF'
gpt-ref    gpt   fp32 1 0 0 1 0    0    0    0    2 8
gpt-dp2    gpt   fp32 2 0 0 1 0    0    0    0    2 8
gpt-z1     gpt   fp32 2 1 0 1 0    0    0    0    2 8
gpt-z2     gpt   fp32 2 2 0 1 0    0    0    0    2 8
gpt-z3     gpt   fp32 2 3 0 1 0    0    0    0    2 8
gpt-z3dp3  gpt   fp32 3 3 0 1 0    0    0    0    2 6
gpt-z1dp3  gpt   fp32 3 1 1 1 0.3  0.3  0.3  0.3  2 6
gpt-ck1    gpt   fp32 1 0 1 2 0    0    0    0    4 8
gpt-ck4    gpt   fp32 1 0 4 1 0    0    0    0    4 8
gpt-wo     gpt   fp32 2 0 0 1 0.5  0    0    0    2 8
gpt-go     gpt   fp32 2 0 0 1 0    0.5  0    0    2 8
gpt-oo     gpt   fp32 2 0 0 1 0    0    0.5  0    2 8
gpt-ao     gpt   fp32 2 0 0 1 0    0    0    0.5  2 8
gpt-ao3    gpt   fp32 1 0 1 1 0    0    0    0.3  4 8
gpt-off1   gpt   fp32 1 0 0 2 1    1    1    1    2 8
gpt-mix    gpt   fp32 4 3 1 2 0.5  0.5  0.5  0.5  2 16
gpt-mix2   gpt   fp32 4 2 2 1 0.3  0.5  0    0.7  4 16
llama-ref  llama fp32 1 0 0 1 0    0    0    0    2 8
llama-z3   llama fp32 2 3 0 1 0    0    0    0    2 8
llama-mix  llama fp32 4 2 1 2 0.5  0    0.5  0.5  2 16
llama-off  llama fp32 2 1 0 1 0    1    0    0.25 2 8
gpt-bf     gpt   bf16 1 0 0 1 0    0    0    0    2 8
gpt-bf-mix gpt   bf16 4 3 1 2 0.5  0.5  0.5  0.5  2 16
gpt-bf-oo  gpt   bf16 2 1 0 1 0    0    1    0    2 8
llama-bf   llama bf16 2 2 1 1 0.3  0.3  0.3  0.3  2 8
gpt-tp2    gpt   fp32 1 0 0 1 0    0    0    0    2 8  2
gpt-tp4ck  gpt   fp32 1 1 1 2 0    0    0    0    2 8  4
gpt-tp2mix gpt   fp32 2 3 1 1 0.5  0.5  0.5  0.5  2 8  2
llama-tp2  llama fp32 1 2 0 1 0    0.5  0    0.5  2 8  2
gpt-bf-tp2 gpt   bf16 2 1 0 2 0    0    0.5  0    2 8  2
falcon-ref falcon fp32 1 0 0 1 0   0    0    0    2 8
falcon-mix falcon fp32 4 3 1 2 0.5 0.5  0.5  0.5  2 16
falcon-ao  falcon fp32 2 1 0 1 0   0    0    0.5  3 8
falcon-bf  falcon bf16 2 2 1 1 0.3 0.3  0.3  0.3  2 8
lpar-tp2   llama-par fp32 2 3 1 1 0.5 0.5 0.5 0.5 2 8  2
gpt-sp2    gpt   fp32 1 0 0 1 0    0    0    0    2 8  2 1
gpt-sp4ck  gpt   fp32 1 1 1 2 0    0    0    0    2 8  4 1
gpt-sp2mix gpt   fp32 2 3 1 1 0.5  0.5  0.5  0.5  2 8  2 1
llama-sp2  llama fp32 1 2 0 1 0    0.5  0    0.5  2 8  2 1
gpt-bf-sp2 gpt   bf16 2 1 0 2 0    0    0.5  0    2 8  2 1
lpar-sp2   llama-par fp32 2 3 1 1 0.5 0.5 0.5 0.5 2 8  2 1
paro-nig   gpt   fp32 4 NIG 1 2 0.5 0.5 0.5 0.5 2 16 2
paro-iig   llama fp32 4 IIG 0 1 0    0.5  0    0.3  2 16 2
paro-bf    gpt   bf16 4 IGG 1 1 0.3  0.3  0.3  0.3  2 16 2
paro-nnidp3 gpt  fp32 3 NNI 0 1 0    0    0.5  0    2 6
EOF

# per rank of the summary: "rank dev_meas host_meas", one line each
measured() {
    python3 - "$1" <<'EOF'
import json, sys
try:
    for r in json.load(open(sys.argv[1]))["ranks"]:
        print(r["rank"], r["measured_device_peak_bytes"], r["measured_host_peak_bytes"])
except Exception:
    pass
EOF
}
# the planner's "device host" of stage 0
planned() {
    python3 - "$1" <<'EOF'
import json, sys
try:
    s = json.load(open(sys.argv[1]))["stages"][0]
    print(max(s["peak_bytes_fwd"], s["peak_bytes_bwd"]), s["memory"]["host_bytes"])
except Exception:
    print("- -")
EOF
}

tap_diag "per plan: planner (mist-plan --analyze --json) and rank 0 measured (mist-train, 2 steps) peaks in bytes;" \
    "all-ranks: every rank's measured device and host peaks equal the planner's" \
    "$(printf '%-10s %5s %4s %2s %3s %1s %1s %4s %4s %4s %4s %1s | %9s %9s | %7s %7s | %s' name model prec np z c G \
    wo go oo ao L dev-plan dev-meas hst-plan hst-meas all-ranks)"
while read -r name model prec dp zero ckpt G wo go oo ao layers gb tp sp; do
    set_model "$model"
    tp=${tp:-1} np=$((dp * tp)) sp=${sp:-0}
    b=$((gb / (dp * G)))
    case $zero in [0-3]) zk=zero ;; *) zk=shard ;; esac
    set -- -o train.precision="$prec" -o train.global_batch="$gb" -o plan.G="$G" -o stage.0.dp="$dp" -o stage.0.tp="$tp" \
        -o stage.0.b="$b" -o stage.0.$zk="$zero" -o stage.0.ckpt="$ckpt" -o stage.0.wo="$wo" -o stage.0.go="$go" \
        -o stage.0.oo="$oo" -o stage.0.ao="$ao" -o model.layers="$layers" -o stage.0.layers="$layers" \
        -o stage.0.sp="$sp"
    # shellcheck disable=SC2086
    mist_mpirun -np "$np" "$TRAIN" "$ini" $extra "$@" -o train.steps=2 -o log.interval=1000 -o data.val_interval=0 \
        -o log.summary="$W/$name.json" -o log.jsonl="$W/$name.jsonl" >"$W/$name.out" 2>&1
    rc_train=$?
    # shellcheck disable=SC2086
    "$PLAN" "$ini" $extra --analyze --json --hardware cpu "$@" >"$W/$name.plan" 2>"$W/$name.plan.err"
    rc_plan=$?
    measured "$W/$name.json" >"$W/$name.ranks"
    set -- $(planned "$W/$name.plan")
    pdev=$1 phost=$2
    # every rank present, each equal to the plan
    agree=$(awk -v d="$pdev" -v h="$phost" -v n="$np" '
        { if ($2 != d || $3 != h) bad++; seen++ } END { print (seen == n && !bad) ? "yes" : "NO" }' "$W/$name.ranks")
    set -- $(head -1 "$W/$name.ranks")
    tap_diag "$(printf '%-10s %5s %4s %2s %3s %1s %1s %4s %4s %4s %4s %1s | %9s %9s | %7s %7s | %s' "$name" "$model" \
        "$prec" "$np" "$zero" "$ckpt" "$G" "$wo" "$go" "$oo" "$ao" "$layers" "$pdev" "${2:--}" "$phost" "${3:--}" \
        "$agree")"
    [ $rc_train -eq 0 ] || tail -3 "$W/$name.out" | sed 's/^/#   train: /'
    [ $rc_plan -eq 0 ] || tail -3 "$W/$name.plan.err" | sed 's/^/#   plan: /'
    [ $rc_train -eq 0 ] && [ $rc_plan -eq 0 ] && [ "$agree" = yes ]
    tap_ok $? "$name: $np ranks (dp $dp x tp $tp, sp $sp) zero=$zero ckpt=$ckpt G=$G wo=$wo go=$go oo=$oo ao=$ao L=$layers $prec: planned \
device peak and host bytes equal every rank's measured peaks"
done <"$W/matrix"

# Pipeline plans (1F1B): name model prec tied G layers global_batch, then one
# column per stage, layers/dp/zero/ckpt/wo/go/oo/ao (b = global_batch / (dp *
# G) in every stage; tp = 1). Stage s keeps up to K = min(S - s, G)
# micro-batches' activations (the planner's p = K - 1): the rows have K < G
# (a 2-stage G = 4, a 3-stage G = 4), K = G (G = 1, 2; the first stage of a
# 4-stage G = 4), uneven layers, dp differing between stages, ZeRO, ckpt and
# every offload knob on some stages, tied GPT (the last stage's wte copy),
# untied GPT, Llama, fp32 and bf16.
cat >"$W/pipeline" <<'EOF'
pp2-even     gpt   fp32 1 2 2 8  1/1/0/0/0/0/0/0         1/1/0/0/0/0/0/0
pp2-g1       gpt   fp32 1 1 3 8  2/2/1/0/0/0/0/0         1/1/0/1/0/0/0/0
pp2-g4       gpt   fp32 1 4 4 8  3/1/0/1/0/0/0/0.5       1/2/2/0/0/0/0/0
pp2-untied   gpt   fp32 0 2 3 8  1/2/3/0/0/0/0/0         2/1/0/1/0/0/0/0
pp3-g4       gpt   fp32 1 4 4 8  2/1/0/1/0/0/0/0         1/2/3/0/0/0/0/0     1/1/1/0/0.5/0.5/0.5/0
pp3-g2       gpt   fp32 1 2 3 8  1/1/2/0/0.3/0.3/0.3/0.3 1/2/0/1/0/0/0/0     1/1/0/0/0/0/0/0
pp3-g1       gpt   fp32 0 1 3 8  1/2/0/0/0/0/0/0.5       1/1/0/0/0/0/0/0     1/2/1/1/0/0/0/0
pp4-g4       gpt   fp32 1 4 4 8  1/1/0/0/0/0/0/0.3       1/1/0/1/0/0/0/0     1/2/2/0/0/0/0/0     1/1/0/0/0/0/0/0
pp4-g2       gpt   fp32 0 2 5 8  2/1/3/1/0.5/0.5/0.5/0   1/2/0/0/0/0/0/0.5   1/1/0/0/0/0/0/0     1/1/1/1/0/1/0/0
llama-pp2    llama fp32 0 2 3 8  2/1/0/0/0/0/0/0.5       1/2/1/1/0/0/0/0
llama-pp3    llama fp32 0 4 4 8  1/2/2/0/0/0/0/0         2/1/0/1/0/0.5/0/0.5 1/1/3/0/0.5/0/0.5/0
gpt-bf-pp2   gpt   bf16 1 2 3 8  1/1/0/1/0/0/0/0         2/2/3/0/0/0/1/0
gpt-bf-pp3   gpt   bf16 1 4 3 8  1/2/1/0/0/0/0/0.5       1/1/0/0/0/0/0/0     1/1/2/1/0.5/0.5/0.5/0
llama-bf-pp2 llama bf16 0 4 2 8  1/1/3/1/0/0/0/0         1/1/0/0/0/0/0/0.5
tppp2-tied   gpt   fp32 1 2 4 8  2/1/0/0/0/0/0/0/2       2/1/1/1/0/0/0/0/2
tppp2-het    gpt   fp32 1 2 4 8  2/2/1/0/0/0/0/0.5/1     2/1/2/1/0/0.5/0/0/2
tppp3-mid    gpt   fp32 0 4 4 8  1/1/0/0/0/0/0/0         2/1/3/0/0.5/0/0.5/0/2 1/1/0/1/0/0/0/0
llama-tppp2  llama fp32 0 2 4 8  3/1/2/1/0/0/0/0.5/2     1/1/0/0/0/0/0/0/2
falcon-pp2   falcon fp32 1 2 3 8 2/1/1/1/0/0/0/0.5       1/2/3/0/0.5/0.5/0.5/0
lpar-tppp2   llama-par fp32 0 2 4 8 1/1/0/1/0/0/0/0/2    3/1/2/0/0/0/0/0.5/2
EOF

# per rank of the summary: "rank stage dev_meas host_meas", one line each
measured_stage() {
    python3 - "$1" <<'EOF'
import json, sys
try:
    for r in json.load(open(sys.argv[1]))["ranks"]:
        print(r["rank"], r["stage"], r["measured_device_peak_bytes"], r["measured_host_peak_bytes"])
except Exception:
    pass
EOF
}
# the planner's "stage device host", one line per stage
planned_stages() {
    python3 - "$1" <<'EOF'
import json, sys
try:
    for i, s in enumerate(json.load(open(sys.argv[1]))["stages"]):
        print(i, max(s["peak_bytes_fwd"], s["peak_bytes_bwd"]), s["memory"]["host_bytes"])
except Exception:
    pass
EOF
}

tap_diag "pipeline plans, per stage: planned/measured device bytes, planned/measured host bytes (measured: the" \
    "stage's ranks when they agree, * when they differ); stage column = layers/dp/zero/ckpt/wo/go/oo/ao[/tp]"
while read -r name model prec tied G layers gb stages; do
    set_model "$model"
    set -- -o train.precision="$prec" -o train.global_batch="$gb" -o plan.G="$G" -o model.layers="$layers" \
        -o model.tied_embeddings="$tied"
    s=0 np=0 cols=
    for spec in $stages; do
        IFS=/ read -r lay dp zero ckpt wo go oo ao tp <<EOF
$spec
EOF
        tp=${tp:-1}
        set -- "$@" -o stage.$s.layers="$lay" -o stage.$s.dp="$dp" -o stage.$s.tp="$tp" -o stage.$s.b=$((gb / (dp * G))) \
            -o stage.$s.zero="$zero" -o stage.$s.ckpt="$ckpt" -o stage.$s.wo="$wo" -o stage.$s.go="$go" \
            -o stage.$s.oo="$oo" -o stage.$s.ao="$ao"
        s=$((s + 1)) np=$((np + dp * tp)) cols="$cols${cols:+ }$spec"
    done
    set -- "$@" -o plan.stages=$s
    # shellcheck disable=SC2086
    mist_mpirun -np "$np" "$TRAIN" "$ini" $extra "$@" -o train.steps=2 -o log.interval=1000 -o data.val_interval=0 \
        -o log.summary="$W/$name.json" -o log.jsonl="$W/$name.jsonl" >"$W/$name.out" 2>&1
    rc_train=$?
    # shellcheck disable=SC2086
    "$PLAN" "$ini" $extra --analyze --json --hardware cpu "$@" >"$W/$name.plan" 2>"$W/$name.plan.err"
    rc_plan=$?
    measured_stage "$W/$name.json" >"$W/$name.ranks"
    planned_stages "$W/$name.plan" >"$W/$name.stages"
    # every rank present and equal to its own stage's prediction; the last word is the verdict
    report=$(awk -v n="$np" -v S="$s" '
        FNR == NR { d[$1] = $2; h[$1] = $3; planned++; next }
        { seen++; st = $2
          if (!(st in d) || $3 != d[st] || $4 != h[st]) bad++
          if (!(st in md)) { md[st] = $3; mh[st] = $4 }
          else if (md[st] != $3 || mh[st] != $4) { md[st] = "*"; mh[st] = "*" } }
        END { for (i = 0; i < S; i++)
                  printf "s%d %s/%s %s/%s; ", i, d[i], (i in md) ? md[i] : "-", h[i], (i in mh) ? mh[i] : "-"
              print (seen == n && planned == S && !bad) ? "yes" : "NO" }' "$W/$name.stages" "$W/$name.ranks")
    tap_diag "$(printf '%-12s G=%s L=%s | %s' "$name" "$G" "$layers" "$report")"
    [ $rc_train -eq 0 ] || tail -3 "$W/$name.out" | sed 's/^/#   train: /'
    [ $rc_plan -eq 0 ] || tail -3 "$W/$name.plan.err" | sed 's/^/#   plan: /'
    [ $rc_train -eq 0 ] && [ $rc_plan -eq 0 ] && [ "${report##* }" = yes ]
    tap_ok $? "$name: $s stages ($cols), $np ranks, G=$G, $model $prec tied=$tied: every rank's measured \
device and host peaks equal its stage's planned bytes"
done <"$W/pipeline"

# Selective recompute ([stage.N] recompute = selective): each plan trains as
# it is and with recompute = selective. A block that is not checkpointed then
# keeps neither att X(N, a_t d) nor lse f32(b, a_t, s) (N = b s rows, a_t =
# a / tp heads of d = h / a on a rank, x bytes per element):
#   A = b s a_t d x + 4 b a_t s,
# and the block running holds them in one workspace. On one stage without
# offload the peak is the head's (H + D >= D + A: the head holds the last
# block's output X(N, h) and the logits), so every rank's measured device
# peak drops by exactly (L - c) A (c = ckpt), the host peak not at all, and
# the planner's bytes equal the selective run's measured ones. The tiny
# models: h 64, a 4, s 64.
# name model prec dp tp ckpt layers global_batch (b = global_batch / dp, G = 1)
cat >"$W/selective" <<'EOF'
sel-gpt      gpt       fp32 1 1 0 2 8
sel-gpt-ck   gpt       fp32 2 1 1 3 8
sel-gpt-tp   gpt       bf16 1 2 1 4 8
sel-llama-tp llama     fp32 2 2 0 2 8
sel-falcon   falcon    bf16 1 1 1 2 4
sel-lpar-tp  llama-par fp32 1 2 2 3 8
EOF
tap_diag "selective recompute: per rank, measured device peak without and with it, their difference and (L - c) A"
while read -r name model prec dp tp ckpt layers gb; do
    set_model "$model"
    np=$((dp * tp)) b=$((gb / dp))
    set -- -o train.precision="$prec" -o train.global_batch="$gb" -o stage.0.dp="$dp" -o stage.0.tp="$tp" \
        -o stage.0.b="$b" -o stage.0.ckpt="$ckpt" -o model.layers="$layers" -o stage.0.layers="$layers"
    for rc in none selective; do
        # shellcheck disable=SC2086
        mist_mpirun -np "$np" "$TRAIN" "$ini" $extra "$@" -o stage.0.recompute=$rc -o train.steps=2 -o log.interval=1000 \
            -o data.val_interval=0 -o log.summary="$W/$name.$rc.json" -o log.jsonl="$W/$name.$rc.jsonl" \
            >"$W/$name.$rc.out" 2>&1 || tail -3 "$W/$name.$rc.out" | sed 's/^/#   train: /'
        measured "$W/$name.$rc.json" >"$W/$name.$rc.ranks"
    done
    # shellcheck disable=SC2086
    "$PLAN" "$ini" $extra --analyze --json --hardware cpu "$@" -o stage.0.recompute=selective >"$W/$name.plan" \
        2>"$W/$name.plan.err" || tail -3 "$W/$name.plan.err" | sed 's/^/#   plan: /'
    x=4; [ "$prec" = bf16 ] && x=2
    A=$((b * 64 * (4 / tp) * 16 * x + 4 * b * (4 / tp) * 64))
    want=$(((layers - ckpt) * A))
    # shellcheck disable=SC2046
    report=$(join "$W/$name.none.ranks" "$W/$name.selective.ranks" | awk -v w="$want" -v n="$np" -v p="$(planned "$W/$name.plan")" '
        BEGIN { split(p, pl, " ") }
        { seen++; d = $2 - $4; if (d != w || $3 != $5 || $4 != pl[1] || $5 != pl[2]) bad++; s = s $2 "-" $4 "=" d " " }
        END { print s (seen == n && !bad ? "yes" : "NO") }')
    tap_diag "$(printf '%-12s np=%s tp=%s ckpt=%s L=%s %s: (L - c) A = %s; %s' "$name" "$np" "$tp" "$ckpt" "$layers" \
        "$prec" "$want" "$report")"
    [ "${report##* }" = yes ]
    tap_ok $? "$name: $np ranks (dp $dp x tp $tp) ckpt=$ckpt L=$layers $model $prec: selective recompute lowers every \
rank's measured device peak by (L - c) A = $want bytes, the planner's bytes equal the measured ones"
done <"$W/selective"
# Memory-lean layers ([stage.N] lean = 1; docs/lean-layers.md): each plan
# trains as it is and with lean = 1. A block that is not checkpointed then
# keeps Λ bytes less: its norm means (LayerNorm: 4 N per norm), mid (x N h,
# sequential blocks) and, GELU models, fc (x N F/tp) less the GELU's branch
# bits ceil(N F / (8 tp)), SwiGLU models act (x N F/tp); N = b s. Every rank's measured device peak drops
# by exactly (L - c) Λ, the host peak not at all, and the planner's bytes
# equal the lean run's measured ones. The tiny models: h 64, F 256, s 64;
# GPT: LayerNorm, GELU; Llama: RMSNorm, SwiGLU (Λ = x N h + x N F/tp); Falcon-style:
# parallel blocks, one LayerNorm, GELU (Λ = 4 N + x N F - N F / 8).
# name model prec dp tp ckpt layers global_batch (b = global_batch / dp, G = 1)
cat >"$W/lean" <<'EOF'
lean-gpt      gpt       fp32 1 1 0 2 8
lean-gpt-ck   gpt       fp32 2 1 1 3 8
lean-gpt-tp   gpt       bf16 1 2 1 4 8
lean-llama-tp llama     fp32 2 2 0 2 8
lean-falcon   falcon    bf16 1 1 1 2 4
EOF
tap_diag "lean layers: per rank, measured device peak without and with them, their difference and (L - c) Λ"
while read -r name model prec dp tp ckpt layers gb; do
    set_model "$model"
    np=$((dp * tp)) b=$((gb / dp))
    set -- -o train.precision="$prec" -o train.global_batch="$gb" -o stage.0.dp="$dp" -o stage.0.tp="$tp" \
        -o stage.0.b="$b" -o stage.0.ckpt="$ckpt" -o model.layers="$layers" -o stage.0.layers="$layers"
    for ln in 0 1; do
        # shellcheck disable=SC2086
        mist_mpirun -np "$np" "$TRAIN" "$ini" $extra "$@" -o stage.0.lean=$ln -o train.steps=2 -o log.interval=1000 \
            -o data.val_interval=0 -o log.summary="$W/$name.$ln.json" -o log.jsonl="$W/$name.$ln.jsonl" \
            >"$W/$name.$ln.out" 2>&1 || tail -3 "$W/$name.$ln.out" | sed 's/^/#   train: /'
        measured "$W/$name.$ln.json" >"$W/$name.$ln.ranks"
    done
    # shellcheck disable=SC2086
    "$PLAN" "$ini" $extra --analyze --json --hardware cpu "$@" -o stage.0.lean=1 >"$W/$name.plan" \
        2>"$W/$name.plan.err" || tail -3 "$W/$name.plan.err" | sed 's/^/#   plan: /'
    x=4; [ "$prec" = bf16 ] && x=2
    N=$((b * 64))
    case $model in
        gpt) lam=$((x * N * 256 / tp + x * N * 64 + 8 * N - (N * 256 / tp + 7) / 8)) ;;
        llama) lam=$((x * N * 64 + x * N * 256 / tp)) ;;
        falcon) lam=$((4 * N + x * N * 256 - (N * 256 + 7) / 8)) ;;
    esac
    want=$(((layers - ckpt) * lam))
    # shellcheck disable=SC2046
    report=$(join "$W/$name.0.ranks" "$W/$name.1.ranks" | awk -v w="$want" -v n="$np" -v p="$(planned "$W/$name.plan")" '
        BEGIN { split(p, pl, " ") }
        { seen++; d = $2 - $4; if (d != w || $3 != $5 || $4 != pl[1] || $5 != pl[2]) bad++; s = s $2 "-" $4 "=" d " " }
        END { print s (seen == n && !bad ? "yes" : "NO") }')
    tap_diag "$(printf '%-13s np=%s tp=%s ckpt=%s L=%s %s: (L - c) Λ = %s; %s' "$name" "$np" "$tp" "$ckpt" "$layers" \
        "$prec" "$want" "$report")"
    [ "${report##* }" = yes ]
    tap_ok $? "$name: $np ranks (dp $dp x tp $tp) ckpt=$ckpt L=$layers $model $prec: lean layers lower every rank's \
measured device peak by (L - c) Λ = $want bytes, the planner's bytes equal the measured ones"
done <"$W/lean"
tap_end
