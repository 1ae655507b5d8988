#!/bin/sh
# The planner's memory model against the runtime's measurement: for a matrix
# of single-stage plans (GPT and Llama, fp32 and bf16, 1 to 4 ranks incl. a dp
# that is not a power of two, ZeRO 0-3, checkpointing, every offload knob and
# their combinations) mist-train runs 2 steps on the CPU backend and writes
# every rank's measured arena peaks to its summary file; mist-plan --analyze
# --json evaluates the same config and overrides. Per rank, exactly:
#   max(peak_bytes_fwd, peak_bytes_bwd) == measured_device_peak_bytes
#   memory.host_bytes                  == measured_host_peak_bytes
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
TRAIN="$MIST_BUILDDIR/mist-train"
PLAN="$MIST_BUILDDIR/mist-plan"
GPT="$MIST_SRCDIR/examples/tiny.ini"
LLAMA="$MIST_SRCDIR/examples/tiny-llama.ini"
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-planmem-test.XXXXXX")
trap 'rm -rf "$W"' EXIT

# name model prec dp zero ckpt G wo go oo ao layers global_batch [tp] (ranks = dp * tp,
# b = global_batch / (dp * G); tp defaults to 1)
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
    "$(printf '%-10s %5s %4s %2s %1s %1s %1s %4s %4s %4s %4s %1s | %9s %9s | %7s %7s | %s' name model prec np z c G \
    wo go oo ao L dev-plan dev-meas hst-plan hst-meas all-ranks)"
while read -r name model prec dp zero ckpt G wo go oo ao layers gb tp; do
    ini=$GPT; [ "$model" = llama ] && ini=$LLAMA
    tp=${tp:-1} np=$((dp * tp))
    b=$((gb / (dp * G)))
    set -- -o train.precision="$prec" -o train.global_batch="$gb" -o plan.G="$G" -o stage.0.dp="$dp" -o stage.0.tp="$tp" \
        -o stage.0.b="$b" -o stage.0.zero="$zero" -o stage.0.ckpt="$ckpt" -o stage.0.wo="$wo" -o stage.0.go="$go" \
        -o stage.0.oo="$oo" -o stage.0.ao="$ao" -o model.layers="$layers" -o stage.0.layers="$layers"
    mist_mpirun -np "$np" "$TRAIN" "$ini" "$@" -o train.steps=2 -o log.interval=1000 -o data.val_interval=0 \
        -o log.summary="$W/$name.json" -o log.jsonl="$W/$name.jsonl" >"$W/$name.out" 2>&1
    rc_train=$?
    "$PLAN" "$ini" --analyze --json --hardware cpu "$@" >"$W/$name.plan" 2>"$W/$name.plan.err"
    rc_plan=$?
    measured "$W/$name.json" >"$W/$name.ranks"
    set -- $(planned "$W/$name.plan")
    pdev=$1 phost=$2
    # every rank present, each equal to the plan
    agree=$(awk -v d="$pdev" -v h="$phost" -v n="$np" '
        { if ($2 != d || $3 != h) bad++; seen++ } END { print (seen == n && !bad) ? "yes" : "NO" }' "$W/$name.ranks")
    set -- $(head -1 "$W/$name.ranks")
    tap_diag "$(printf '%-10s %5s %4s %2s %1s %1s %1s %4s %4s %4s %4s %1s | %9s %9s | %7s %7s | %s' "$name" "$model" \
        "$prec" "$np" "$zero" "$ckpt" "$G" "$wo" "$go" "$oo" "$ao" "$layers" "$pdev" "${2:--}" "$phost" "${3:--}" \
        "$agree")"
    [ $rc_train -eq 0 ] || tail -3 "$W/$name.out" | sed 's/^/#   train: /'
    [ $rc_plan -eq 0 ] || tail -3 "$W/$name.plan.err" | sed 's/^/#   plan: /'
    [ $rc_train -eq 0 ] && [ $rc_plan -eq 0 ] && [ "$agree" = yes ]
    tap_ok $? "$name: $np ranks (dp $dp x tp $tp) zero=$zero ckpt=$ckpt G=$G wo=$wo go=$go oo=$oo ao=$ao L=$layers $prec: planned \
device peak and host bytes equal every rank's measured peaks"
done <"$W/matrix"
tap_end
