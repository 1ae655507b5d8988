# Helpers shared by the training equivalence tests (train_zero.sh, train_tp.sh,
# train_pp.sh). The caller sets W (work dir), TRAIN (mist-train) and COMMON
# (options every run gets).

# run INI NP NAME ARGS...: $W/NAME.{jsonl,json,out}, checkpoints in $W/NAME.ck/
# (a hang, e.g. in a pipeline exchange, ends after 120 s instead of blocking the suite)
run() {
    ini=$1; np=$2; name=$3; shift 3
    printf '%s\n' "$ini" "$@" >"$W/$name.args"  # for planned()
    # shellcheck disable=SC2086
    mist_mpirun --timeout 120 -np "$np" "$TRAIN" "$ini" $COMMON -o log.jsonl="$W/$name.jsonl" \
        -o log.summary="$W/$name.json" -o checkpoint.dir="$W/$name.ck" "$@" >"$W/$name.out" 2>&1
}

# the losses of a JSONL log in log order: training and validation, or only
# the key KEY when set (KEY=val_loss: validation)
losses() {
    if [ -n "${KEY:-}" ]; then grep -o "\"$KEY\": [^,}]*" "$1"; else grep -o '"\(val_\)\{0,1\}loss": [^,}]*' "$1"; fi |
        sed 's/.*": //'
}

# max relative difference of the losses of two logs (999 when the counts differ
# or a loss is not a number: null, a NaN's spelling in the log)
loss_diff() {
    losses "$1" >"$W/la"; losses "$2" >"$W/lb"
    paste "$W/la" "$W/lb" | awk -v n1="$(wc -l <"$W/la")" -v n2="$(wc -l <"$W/lb")" -v num_re="$num_re" '
        $1 !~ num_re || $2 !~ num_re { bad = 1; next }
        { d = $1 - $2; if (d < 0) d = -d; a = $1 < 0 ? -$1 : $1; r = d / a; if (r > m) m = r }
        END { if (n1 != n2 || n1 == 0 || bad) m = 999; printf "%.1e", m }'
}

# whole-model relative L2 difference of the fp32 weights of two checkpoints
# (format: docs/checkpoint-format.md); "exact" as a third argument: 0 when
# every weight has the same bits and the shapes agree, else 999
weight_diff() {
    python3 - "$1" "$2" "${3:-}" <<'PYEOF'
import math, struct, sys
def read(path):
    d = open(path, 'rb').read()
    n, idx = struct.unpack_from('<QQ', d, 24)
    out = {}
    for i in range(n):
        e = idx + 224 * i
        name = d[e:e + 128].split(b'\0')[0].decode()
        kind, dtype = struct.unpack_from('<II', d, e + 128)
        off, size = struct.unpack_from('<QQ', d, e + 208)
        if kind == 0 and dtype == 0 and name.startswith('param/'):
            out[name] = d[off:off + size]
    return out
try:
    a, b = read(sys.argv[1]), read(sys.argv[2])
    if sys.argv[3] == 'exact':
        print('0' if a.keys() == b.keys() and all(a[k] == b[k] for k in a) else '999')
        sys.exit(0)
    f = lambda x: struct.unpack('<%df' % (len(x) // 4), x)
    num = sum((p - q) ** 2 for k in a for p, q in zip(f(a[k]), f(b[k])))
    den = sum(p * p for k in a for p in f(a[k]))
    same = a.keys() == b.keys() and all(len(a[k]) == len(b[k]) for k in a)
    print('%.1e' % math.sqrt(num / den) if same and den > 0 else '999')
except Exception:
    print('999')
PYEOF
}

# planned NAME: the planner's analysis (mist-plan --analyze --json) of the
# configuration and options run NAME trained with
planned() {
    (
        args=$W/$1.args
        set --
        while IFS= read -r a; do set -- "$@" "$a"; done <"$args"
        ini=$1; shift
        # shellcheck disable=SC2086
        "$MIST_BUILDDIR/mist-plan" "$ini" --analyze --json --hardware cpu $COMMON "$@"
    )
}

# rank 0's "pred_dev meas_dev pred_host meas_host" peak bytes from the summary
# $W/NAME.json of run NAME, then "yes" when on every rank the runtime's
# predicted peaks equal the measured ones and, per stage, the planner's peaks
# (device: max of the forward and backward peaks; host bytes) equal the
# largest measured ones of the stage's ranks (ranks differ when a vocabulary
# does not split evenly over tp; the planner sizes the largest), and the rank
# count
peaks() {
    planned "$(basename "$1" .json)" >"${1%.json}.plan" 2>/dev/null
    python3 - "$1" "${1%.json}.plan" <<'PYEOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))["ranks"]
    a = json.load(open(sys.argv[2]))
    plan = [(max(s["peak_bytes_fwd"], s["peak_bytes_bwd"]), s["memory"]["host_bytes"]) for s in a["stages"]]
    if "pipeline_ranks" in a:  # interleaved: a rank's chunks together, per pipeline rank (the ranks' "stage")
        plan = [(r["peak_bytes"], r["host_bytes"]) for r in a["pipeline_ranks"]]
    worst = {}
    for r in d:
        w = worst.get(r["stage"], (0, 0))
        worst[r["stage"]] = (max(w[0], r["measured_device_peak_bytes"]), max(w[1], r["measured_host_peak_bytes"]))
    ok = all(r["predicted_device_peak_bytes"] == r["measured_device_peak_bytes"] and
             r["predicted_host_peak_bytes"] == r["measured_host_peak_bytes"] for r in d) and len(d) > 0 and \
        all(plan[s] == w for s, w in worst.items())
    r = d[0]
    print(r["predicted_device_peak_bytes"], r["measured_device_peak_bytes"], r["predicted_host_peak_bytes"],
          r["measured_host_peak_bytes"], "yes" if ok else "NO", len(d))
except Exception:
    print("- - - - NO 0")
PYEOF
}

# stage_args G SPEC...: the -o options of a pipeline plan with one
# "layers/dp/tp/zero/ckpt/offload[/sp[/sel[/lean]]]" SPEC per stage (zero: 0-3 or a shard code;
# offload: wo = go = oo = ao; sp: sequence parallelism, 0 when left out; sel: recompute = selective;
# lean: [stage.N] lean = 1; b = 8 / (dp G)) on one line, then the rank count on the next
stage_args() {
    G=$1; shift
    v=${VIRTUAL:-1}; P=$(($# / v))  # VIRTUAL=v: the specs are P*v chunks, chunk c on the ranks of chunk c mod P
    s=0; np=0
    for spec in "$@"; do
        IFS=/ read -r lay dp tp zero ckpt off sp sel lean <<EOF
$spec
EOF
        [ "$sel" = sel ] && printf ' -o stage.%d.recompute=selective' $s
        [ "$lean" = lean ] && printf ' -o stage.%d.lean=1' $s
        zk=zero; case $zero in [0-3]) ;; *) zk=shard ;; esac  # a PaRO code (docs/paro.md) by its scopes
        printf ' -o stage.%d.layers=%s -o stage.%d.dp=%s -o stage.%d.b=%s -o stage.%d.tp=%s -o stage.%d.%s=%s' \
            $s "$lay" $s "$dp" $s $((8 / (dp * G))) $s "$tp" $s "$zk" "$zero"
        printf ' -o stage.%d.ckpt=%s -o stage.%d.wo=%s -o stage.%d.go=%s -o stage.%d.oo=%s -o stage.%d.ao=%s' \
            $s "$ckpt" $s "$off" $s "$off" $s "$off" $s "$off"
        printf ' -o stage.%d.sp=%s' $s "${sp:-0}"
        [ $s -lt $P ] && np=$((np + dp * tp))
        s=$((s + 1))
    done
    [ "$v" -gt 1 ] && printf ' -o plan.virtual=%d' "$v"
    printf ' -o plan.stages=%d -o plan.G=%d\n%d\n' $s "$G" $np
}

# kill_rank MPID first|last: kill -9 the first or the last mist-train child of
# the mpirun MPID, then wait at most 20 s for mpirun to end (and stop it after
# that, so a hang fails the test instead of blocking the suite). Sets victim
# (the pid, empty when none was found), rc (mpirun's exit status) and dt
# (seconds from the kill to mpirun's end).
kill_rank() {
    victim=$(ps -o pid=,comm= --ppid "$1" |
        awk -v w="$2" '$2 == "mist-train" { p = $1; if (w == "first") { print p; exit } } END { if (w == "last") print p }')
    t0=$(date +%s.%N)
    [ -n "$victim" ] && kill -9 "$victim"
    reap "$1" 20
}

# within REF NAME TOL RC: compares run NAME with run REF; sets ld and wd (loss
# and weight differences) and exact (the peaks verdict of NAME, yes or NO), and
# succeeds when RC (NAME's exit status) is 0, the peaks are exact and both
# differences are at most TOL
within() {
    ld=$(loss_diff "$W/$1.jsonl" "$W/$2.jsonl")
    wd=$(weight_diff "$(last_ckpt "$W/$1.ck")" "$(last_ckpt "$W/$2.ck")")
    exact=$(peaks "$W/$2.json" | awk '{ print $5 }')
    [ "$4" -eq 0 ] && [ "$exact" = yes ] && num_ok 'l <= t && w <= t' l="$ld" w="$wd" t="$3"
}

# the newest checkpoint file of a checkpoint directory
last_ckpt() { echo "$1/$(cat "$1/latest" 2>/dev/null)"; }

# The plans a comm path is checked on (train_staged.sh, train_nccl_fake.sh): dp, tp, ZeRO 0-3,
# offloading, checkpointing, bf16, pipeline stages with a tied embedding, sequence
# parallelism (all-gathers and reduce-scatters over tp). One line per plan:
# name model precision G stages (layers/dp/tp/zero/ckpt/offload each, for stage_args).
# COMM_COMMON: the options every run of them gets.
COMM_COMMON="-o train.steps=12 -o train.global_batch=8 -o train.lr=1e-3 -o train.warmup=3 -o log.interval=1000
 -o data.val_interval=6 -o data.val_batches=2 -o checkpoint.keep=1"
# comm_row MODEL PREC G STAGES...: one row of comm_matrix as the runs need it: sets ini
# (GPT or LLAMA), np (ranks) and plan (the -o options of its precision and stages).
comm_row() {
    ini=$GPT; [ "$1" = llama ] && ini=$LLAMA
    _prec=$2; shift 2
    _args=$(stage_args "$@")
    np=$(echo "$_args" | tail -1)
    plan="-o train.precision=$_prec $(echo "$_args" | head -1)"
}
comm_matrix() {
    cat <<'EOF'
gpt-dp4      gpt   fp32 1 2/4/1/0/0/0
gpt-z3-off   gpt   fp32 2 2/2/1/3/1/0.5
gpt-z2-bf16  gpt   bf16 1 2/2/1/2/0/0.25
gpt-z1-tp2   gpt   fp32 1 2/2/2/1/1/0
llama-tp2    llama fp32 1 2/1/2/0/0/0
llama-2x2    llama bf16 2 2/2/2/3/2/0.5
gpt-pp-tied  gpt   fp32 2 1/2/1/1/0/0 1/1/2/2/1/0.5
llama-pp-g4  llama fp32 4 1/1/2/0/0/0 1/2/1/1/1/0
gpt-sp-tp2   gpt   fp32 1 2/2/2/1/1/0/1
llama-sp-2x2 llama bf16 2 2/2/2/3/2/0.5/1
gpt-pp-sp    gpt   fp32 2 1/1/2/0/0/0/1 1/1/2/2/1/0.5/1
gpt-paro-nig gpt   fp32 2 2/4/2/NIG/1/0.5
EOF
}
