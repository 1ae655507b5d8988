#!/bin/sh
# Random plans on the CPU backend under mpirun, a new sample on every run (the
# seed is printed; MIST_TEST_SEED=N repeats a sample, MIST_RANDOM_PLANS=K sets
# how many, default 6). Each plan draws a model (GPT with a tied or untied
# embedding and a vocabulary of 256 or 258, Llama with GQA, Llama with
# parallel blocks, Falcon-style with one kv head), 1-4 pipeline stages of 1-4
# layers, and per stage dp 1-4, tp 1, 2 or 4 where the heads allow (and then
# sequence parallelism on or off), ZeRO 0-3 or a PaRO sharding code (shard = one
# of the 10, shard_group 0 or a divisor of dp; ZeRO's only in interleaved plans),
# any number of checkpointed blocks and offload ratios in eighths and tenths,
# recompute none or selective, memory-lean layers ([stage.N] lean) on or off (on: ao = 0);
# G 1-6; fp32 or bf16; at most 8 ranks; every other plan with [cluster]
# collectives = hierarchical on nodes of 2 ranks. A third of the plans with several
# stages are interleaved ([plan] virtual = 2 or 3): each pipeline rank gets v
# chunks with the rank's dp and tp and their own layers, ZeRO, ckpt, offload, sp
# and recompute, and G a multiple of the ranks. Per plan, 6 steps:
#   - the per-step losses equal the 1-rank run's of the same model within 1e-5
#     relative in fp32 (the plans differ from it only in the summation order),
#     5e-3 in bf16 (partial sums rounded to bf16 too, and the gradients accumulated over
#     the micro-batches in bf16: see below);
#   - every rank's measured arena peaks (device and host) equal the runtime's
#     prediction and its stage's planned bytes (mist-plan --analyze), exactly;
#   - its step-3 checkpoint resumes at 1 rank with steps 4-6 within the same
#     tolerance of the plan's own (checkpoints hold whole tensors whatever the plan).
# Then a few random searches (below) whose plans mist-train must run. The fixed
# matrices of train_*.sh and plan_runtime_memory.sh cover each feature; this
# samples their combinations.
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib_train.sh"  # run, loss_diff, peaks
TRAIN="$MIST_BUILDDIR/mist-train"
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-random-plans.XXXXXX")
trap 'rm -rf "$W"' EXIT
SEED=${MIST_TEST_SEED:-$(( $(date +%s) % 1000000 ))}
N=${MIST_RANDOM_PLANS:-6}
COMMON="-o train.steps=6 -o train.lr=1e-3 -o train.warmup=2 -o log.interval=1 -o data.val_interval=0
 -o model.seq_len=32 -o checkpoint.keep=1"
tap_diag "seed $SEED ($N plans; MIST_TEST_SEED=$SEED repeats them)"

# one plan per line: name model precision tied vocab G virtual layers global_batch, then per
# stage (chunk) layers/dp/tp/zero/ckpt/wo/go/oo/ao/sp/recompute/shard_group/lean (zero: 0-3 or a shard code)
awk -v seed="$SEED" -v n="$N" 'BEGIN {
    srand(seed)
    split("gpt gpt llama llama-par falcon", models, " ")
    split("0 0 0 0.125 0.25 0.3 0.5 0.7 0.875 1", offs, " ")
    split("NNN NNG NGG GGG NNI NII NIG III IIG IGG", codes, " ")
    for (i = 0; i < n; i++) {
        m = models[1 + int(rand() * 5)]
        prec = rand() < 0.3 ? "bf16" : "fp32"
        tied = m == "gpt" ? int(rand() * 2) : 0
        vocab = m == "gpt" && rand() < 0.3 ? 258 : 256
        S = 1 + int(rand() * 4); G = 1 + int(rand() * 6)
        ranks = 0; lcm = 1; L = 0; spec = ""
        v = S > 1 && rand() < 0.33 ? 2 + int(rand() * 2) : 1
        if (v > 1) G = S * (1 + int(rand() * 2))  # interleaved: G a multiple of the pipeline ranks
        for (c = 0; c < S * v; c++) {
            s = c % S  # the pipeline rank of chunk c, whose mesh it takes
            lay = 1 + int(rand() * (v > 1 ? 2 : 4))
            if (c < S) {
                dp_[s] = 1 + int(rand() * 4); tp_[s] = 1
                # tp divides the heads (4) and the kv heads: 4 for GPT, 2 for Llama, 1 for Falcon-style
                if (rand() < 0.35) tp_[s] = m == "gpt" ? (rand() < 0.5 ? 2 : 4) : m == "falcon" ? 1 : 2
                if (ranks + dp_[s] * tp_[s] > 8 - (S - s - 1)) { dp_[s] = 1; tp_[s] = 1 }
                ranks += dp_[s] * tp_[s]
            }
            dp = dp_[s]; tp = tp_[s]; L += lay
            a = lcm; b = dp; while (b) { t = a % b; a = b; b = t }; lcm = lcm * dp / a
            z = v > 1 || rand() < 0.5 ? int(rand() * 4) : codes[1 + int(rand() * 10)]
            sg = rand() < 0.4 ? 0 : rand() < 0.5 ? dp : (dp % 2 ? 1 : 2)  # 0: the dp ranks of one node
            lean = rand() < 0.4  # memory-lean layers: they exclude activation offload (ao = 0)
            spec = spec sprintf(" %d/%d/%d/%s/%d/%s/%s/%s/%s", lay, dp, tp, z, int(rand() * (lay + 1)),
                                offs[1 + int(rand() * 10)], offs[1 + int(rand() * 10)], offs[1 + int(rand() * 10)],
                                lean ? 0 : offs[1 + int(rand() * 10)])
            spec = spec "/" (tp > 1 && rand() < 0.5 ? 1 : 0)  # sequence parallelism, where tp > 1
            spec = spec (rand() < 0.4 ? "/selective" : "/none") "/" sg "/" lean
        }
        printf "p%02d %s %s %d %d %d %d %d %d%s\n", i, m, prec, tied, vocab, G, v, L, lcm * G * (1 + int(rand() * 2)), spec
    }
}' >"$W/plans"
[ "$(wc -l <"$W/plans")" -eq "$N" ]
tap_ok $? "$N random plans drawn ($(awk '$7 > 1' "$W/plans" | wc -l) of them interleaved)"

while read -r id model prec tied vocab G v layers gb stages; do
    case $model in
        llama) ini=$MIST_SRCDIR/examples/tiny-llama.ini extra= ;;
        llama-par) ini=$MIST_SRCDIR/examples/tiny-llama.ini extra="-o model.parallel_block=1" ;;
        falcon) ini=$MIST_SRCDIR/examples/tiny-falcon.ini extra= ;;
        *) ini=$MIST_SRCDIR/examples/tiny.ini extra= ;;
    esac
    model_args="$extra -o model.layers=$layers -o model.tied_embeddings=$tied -o model.vocab=$vocab -o train.global_batch=$gb
 -o train.precision=$prec"
    # fp32: the plans differ from 1 rank only in summation order. bf16 also rounds each partial
    # sum to bf16, and the gradient buffer (bf16, as the memory model prices it) sums the G
    # micro-batches with a rounding per add where the 1-rank run has one GEMM: on a 13-layer
    # Llama, 1 rank with G = 3 against G = 1 alone moves step 6's loss by 6.4e-4 relative. Over
    # 40 bf16 plans most moved by 1e-5..1.2e-4 and a 9-chunk plan of that Llama by 1.9e-3 (fp32:
    # 1.8e-7, so no plan error). A plan's own error shows in fp32; bf16 bounds the rounding.
    tol=1e-5
    [ "$prec" = bf16 ] && tol=5e-3
    # every other plan: the dp collectives in two levels over nodes of 2 ranks (docs/paro.md;
    # flat where a stage's dp group does not span such nodes)
    [ $(( (SEED + 1${id#p}) % 2 )) -eq 1 ] && model_args="$model_args -o cluster.collectives=hierarchical
 -o cluster.gpus_per_node=2"
    s=0 nr=0 plan_args=
    # shellcheck disable=SC2086
    set -- $stages
    P=$(($# / v))  # pipeline ranks: the ranks of the first P chunks
    for spec in $stages; do
        IFS=/ read -r lay dp tp zero ckpt wo go oo ao sp recomp sg lean <<EOF
$spec
EOF
        plan_args="$plan_args -o stage.$s.layers=$lay -o stage.$s.dp=$dp -o stage.$s.tp=$tp -o stage.$s.b=$((gb / (dp * G)))"
        case $zero in [0-3]) key=zero ;; *) key=shard ;; esac
        plan_args="$plan_args -o stage.$s.$key=$zero -o stage.$s.shard_group=$sg"
        plan_args="$plan_args -o stage.$s.ckpt=$ckpt -o stage.$s.wo=$wo -o stage.$s.go=$go"
        plan_args="$plan_args -o stage.$s.oo=$oo -o stage.$s.ao=$ao -o stage.$s.sp=$sp -o stage.$s.recompute=$recomp"
        plan_args="$plan_args -o stage.$s.lean=$lean"
        [ $s -lt $P ] && nr=$((nr + dp * tp))
        s=$((s + 1))
    done
    # (run, from lib_train.sh, sets ini, np and name: this loop uses other names)
    # shellcheck disable=SC2086
    run "$ini" 1 "$id.ref" $model_args -o plan.stages=1 -o plan.G=1 -o stage.0.layers="$layers" -o stage.0.dp=1 \
        -o stage.0.tp=1 -o stage.0.b="$gb"
    rc_ref=$?
    # shellcheck disable=SC2086
    run "$ini" "$nr" "$id" $model_args $plan_args -o plan.stages=$s -o plan.G="$G" -o plan.virtual="$v" \
        -o checkpoint.interval=3 -o checkpoint.keep=2
    rc=$?
    ld=$(loss_diff "$W/$id.ref.jsonl" "$W/$id.jsonl")
    # its step-3 checkpoint resumed at 1 rank: steps 4-6 as the plan trained them
    mkdir -p "$W/$id.res.ck" && cp "$W/$id.ck/step_00000003.ckpt" "$W/$id.res.ck/" 2>/dev/null &&
        echo step_00000003.ckpt >"$W/$id.res.ck/latest" && head -3 "$W/$id.jsonl" >"$W/$id.res.jsonl"
    # shellcheck disable=SC2086
    run "$ini" 1 "$id.res" $model_args -o plan.stages=1 -o plan.G=1 -o stage.0.layers="$layers" -o stage.0.dp=1 \
        -o stage.0.tp=1 -o stage.0.b="$gb" -o checkpoint.resume=1
    rc_res=$?
    rd=$(loss_diff "$W/$id.jsonl" "$W/$id.res.jsonl")
    set -- $(peaks "$W/$id.json")
    exact=$5 ranks=$6
    [ $rc -eq 0 ] || tail -3 "$W/$id.out" | sed 's/^/#   train: /'
    [ $rc_ref -eq 0 ] || tail -3 "$W/$id.ref.out" | sed 's/^/#   1 rank: /'
    [ $rc_res -eq 0 ] || tail -3 "$W/$id.res.out" | sed 's/^/#   resumed: /'
    coll=$(sed -n 's/^mist: data-parallel collectives \([a-z]*\): .*/\1/p' "$W/$id.out")  # rank 0's dp group
    [ $rc -eq 0 ] && [ $rc_ref -eq 0 ] && [ $rc_res -eq 0 ] && [ "$exact" = yes ] && [ "$ranks" -eq "$nr" ] &&
        num_ok 'd <= t && r <= t' d="$ld" r="$rd" t="$tol"
    tap_ok $? "$id: $model $prec tied=$tied vocab=$vocab G=$G gb=$gb, $s stage(s), virtual $v (layers/dp/tp/zero/ckpt/wo/go/oo/ao/sp/recompute/g/lean:$stages), \
$nr ranks, ${coll:-flat} dp collectives: losses within $ld of 1 rank, peaks exact: $exact, resumed at 1 rank from step 3 within $rd"
done <"$W/plans"

# Random searches (MIST_RANDOM_SEARCHES, default 3): mist-plan searches a random small cluster (1-2
# nodes of 1, 2 or 4 ranks), hardware profile, space and device memory; mist-train runs the plan
# file it writes (with [plan] mode = auto still set: the file wins, in mist-train and in
# --analyze alike), and every rank's peaks equal the planner's. Nothing fitting (exit 3) must say
# how close the nearest plan came.
K=${MIST_RANDOM_SEARCHES:-3}
awk -v seed="$SEED" -v n="$K" 'BEGIN {
    srand(seed + 7919)
    split("tiny tiny tiny-llama tiny-falcon", inis, " ")
    split("cpu gcp-l4 dgx-h100", hws, " ")
    split("megatron zero ckpt offload full", spaces, " ")
    split("0 0 3MiB 6MiB", mems, " ")
    for (i = 0; i < n; i++) {
        nodes = 1 + int(rand() * 2); gpn = 2 ^ int(rand() * 3)
        printf "s%02d %s %d %d %d %d %s %s %s\n", i, inis[1 + int(rand() * 4)], 1 + int(rand() * 6), nodes, gpn,
            nodes * gpn * (1 + int(rand() * 4)), hws[1 + int(rand() * 3)], spaces[1 + int(rand() * 5)],
            mems[1 + int(rand() * 4)]
    }
}' >"$W/searches"
while read -r id base layers nodes gpn gb hw space mem; do
    ini=$MIST_SRCDIR/examples/$base.ini
    args="-o model.layers=$layers -o train.global_batch=$gb -o cluster.device_memory=$mem -o plan.mode=auto"
    what="$id: $base L=$layers gb=$gb on $nodes x $gpn, $hw, space $space, device memory ${mem}"
    # shellcheck disable=SC2086
    "$MIST_BUILDDIR/mist-plan" "$ini" $args --nodes "$nodes" --gpus-per-node "$gpn" --hardware "$hw" --space "$space" \
        --out "$W/$id.plan.ini" >"$W/$id.search" 2>&1
    rc_s=$?
    if [ $rc_s -eq 3 ]; then
        grep -q 'short by' "$W/$id.search"
        tap_ok $? "$what: nothing fits (exit 3), and the message says by how much"
        continue
    fi
    # shellcheck disable=SC2086
    run "$ini" $((nodes * gpn)) "$id" $args -o plan.file="$W/$id.plan.ini"
    rc=$?
    set -- $(peaks "$W/$id.json")
    [ $rc -eq 0 ] || tail -3 "$W/$id.out" | sed 's/^/#   train: /'
    [ $rc_s -eq 0 ] && [ $rc -eq 0 ] && [ "$5" = yes ] && [ "$6" -eq $((nodes * gpn)) ]
    tap_ok $? "$what: mist-train runs the plan mist-plan wrote ($(grep -c '^\[stage' "$W/$id.plan.ini") stage(s)), \
peaks exact: $5 (search exit $rc_s, train exit $rc)"
done <"$W/searches"
tap_end
