#!/bin/sh
# mist-plan --analyze: the table and the JSON object, exit 3 naming the stage
# that does not fit and its shortfall, exit 2 for usage, plan and profile
# errors, a two-stage plan file whose per-stage ranges and 1F1B total are
# consistent with the stage times it prints, and every shipped example's plan.
. "$MIST_SRCDIR/tests/lib.sh"
PLAN="$MIST_BUILDDIR/mist-plan"
TINY="$MIST_SRCDIR/examples/tiny.ini"
GPT="$MIST_SRCDIR/examples/gpt3-1.3b.ini"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

out=$("$PLAN" --help 2>&1); rc=$?
[ $rc -eq 0 ] && printf '%s' "$out" | grep -q -- '--analyze' && printf '%s' "$out" | grep -q -- '--json'
tap_ok $? "--help prints the usage and exits 0"

out=$("$PLAN" "$TINY" --analyze 2>&1); rc=$?
[ $rc -eq 0 ] && printf '%s' "$out" | grep -q '^iteration: ' && printf '%s' "$out" | grep -q 'MFU' &&
    printf '%s' "$out" | grep -Eq '^0 +0-1 +4x1 +4 .* yes$'
tap_ok $? "tiny example: one stage (layers 0-1, mesh 4x1, b 4) that fits, iteration time and MFU"

"$PLAN" "$TINY" --analyze --json >"$tmp/tiny.json" 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && [ "$(wc -l <"$tmp/tiny.json")" -eq 1 ]
tap_ok $? "--json prints one line"
missing=""
for key in params_total flops_per_iteration iteration_seconds stages layers dp tp b zero ckpt t_stable_seconds \
    t_delta_seconds peak_bytes_fwd peak_bytes_bwd memory weights grads optimizer activations buffers host_bytes; do
    grep -q "\"$key\": " "$tmp/tiny.json" || missing="$missing $key"
done
[ -z "$missing" ]
tap_ok $? "--json has every documented field (missing:${missing:- none})"
grep -Eq '"params_total": [0-9]+,' "$tmp/tiny.json" && grep -Eq '"peak_bytes_fwd": [0-9]+,' "$tmp/tiny.json" &&
    grep -Eq '"weights": [0-9]+,' "$tmp/tiny.json" && grep -Eq '"layers": \[0, 1\]' "$tmp/tiny.json"
tap_ok $? "bytes and parameter counts are integers, layers is [first, last]"
# peak >= weights + grads + optimizer + activations must hold for the fwd peak's parts
awk -v RS=',' -v num_re="$num_re" '/"peak_bytes_bwd"/{split($0,a,": "); peak=a[2]}
    /"weights"/{split($0,a,": "); s+=a[2]} /"grads"/{split($0,a,": "); s+=a[2]} /"optimizer"/{split($0,a,": "); s+=a[2]}
    END{exit !(peak ~ num_re && peak > s && s > 0)}' "$tmp/tiny.json"
tap_ok $? "the backward peak exceeds the states it contains"

# a plan that cannot fit: GPT-3 1.3B, 64 sequences per L4, no sharding
"$PLAN" "$GPT" --analyze --hardware gcp-l4 -o stage.0.b=64 -o plan.G=1 -o stage.0.zero=0 >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 3 ] && grep -Eq 'stage 0 .*does not fit.*short by [0-9]+ bytes' "$tmp/err"
tap_ok $? "a plan over the memory exits 3 naming the stage and the shortfall in bytes (rc=$rc)"
grep -q ' NO$' "$tmp/out"
tap_ok $? "the table marks the stage that does not fit"

# the same with ZeRO-3 over 8 ranks and full recompute fits on an 80 GB H100
"$PLAN" "$GPT" --analyze --hardware dgx-h100 -o stage.0.b=4 -o plan.G=16 -o stage.0.zero=3 -o stage.0.ckpt=24 >/dev/null 2>&1
tap_ok $? "GPT-3 1.3B with ZeRO-3 and recompute fits on dgx-h100"

# an old preset name loads the same numbers: the same table, with one notice first naming the new preset
old_new() { "$PLAN" "$GPT" --analyze --hardware "$1" -o stage.0.b=4 -o plan.G=16 -o stage.0.zero=3; }
old_new l4 >"$tmp/old.out" 2>"$tmp/old.err"; rc_old=$?
old_new gcp-l4 >"$tmp/new.out" 2>"$tmp/new.err"; rc_new=$?
[ $rc_old -eq $rc_new ] && cmp -s "$tmp/old.out" "$tmp/new.out" && sed 1d "$tmp/old.err" | cmp -s - "$tmp/new.err" &&
    [ "$(head -n 1 "$tmp/old.err")" = 'mist: hardware preset "l4" is now called "gcp-l4" (same numbers)' ]
tap_ok $? "--hardware l4 predicts what gcp-l4 does, after one notice naming gcp-l4 (rc $rc_old)"

# a two-stage plan file: the stages' layer ranges, and the 1F1B total from the printed stage times
cat >"$tmp/two.ini" <<'EOF'
[plan]
G = 4
stages = 2
[stage.0]
layers = 1
dp = 2
tp = 1
b = 2
zero = 1
ckpt = 1
[stage.1]
layers = 1
dp = 2
tp = 1
b = 2
zero = 2
ao = 0.5
EOF
"$PLAN" "$TINY" --analyze "$tmp/two.ini" --json >"$tmp/two.json" 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && grep -q '"layers": \[0, 0\]' "$tmp/two.json" && grep -q '"layers": \[1, 1\]' "$tmp/two.json"
tap_ok $? "a two-stage plan file: stages hold layers 0-0 and 1-1 (rc=$rc $(cat "$tmp/err"))"
grep -o '"\(iteration_seconds\|t_stable_seconds\|t_delta_seconds\)": [0-9.e+-]*' "$tmp/two.json" | tr -d '":' |
    awk -v num_re="$num_re" '$2 !~ num_re {bad = 1}
    $1 == "iteration_seconds" {it = $2 + 0} $1 == "t_stable_seconds" {t[nt++] = $2 + 0}
    $1 == "t_delta_seconds" {d[nd++] = $2 + 0}
    END {G = 4; tm = t[0] > t[1] ? t[0] : t[1]; x = d[0]; if (d[1] - t[0] > x) x = d[1] - t[0]; if (x < 0) x = 0;
        want = (G - 1) * tm + t[0] + t[1] + x; r = it - want; if (r < 0) r = -r;
        exit !(!bad && nt == 2 && nd == 2 && it > 0 && r <= 1e-9 * want)}'
tap_ok $? "iteration_seconds = (G-1) max t + sum t + max(0, max_i(d_i - sum_{j<i} t_j))"

# usage and input errors exit 2
printf '[plan]\nmode = auto\n' >"$tmp/auto.ini"
sed '/^\[plan\]/,$d' "$TINY" | sed "s#data/tiny#$MIST_SRCDIR/examples/data/tiny#" >"$tmp/auto.ini"
printf '[plan]\nmode = auto\n' >>"$tmp/auto.ini"
out=$("$PLAN" "$tmp/auto.ini" --analyze 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q 'mode = auto'
tap_ok $? "mode = auto without a plan file exits 2 with a hint (rc=$rc)"
out=$("$PLAN" "$TINY" --analyze --hardware no-such-gpu 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q 'no-such-gpu'
tap_ok $? "an unknown hardware profile exits 2 and names it"
printf '[profile]\nbase = gcp-l4\n[compute]\nflops_efficiency = 2\n' >"$tmp/bad.ini"
out=$("$PLAN" "$TINY" --analyze --hardware "$tmp/bad.ini" 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q 'bad.ini:4: .*flops_efficiency'
tap_ok $? "a bad profile file exits 2 naming file, line and key"
out=$("$PLAN" "$TINY" --analyze -o stage.0.b=3 2>&1); rc=$?
[ $rc -eq 2 ]
tap_ok $? "a plan whose b*dp*G is not the global batch exits 2"
out=$("$PLAN" "$TINY" --frobnicate 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q "frobnicate"
tap_ok $? "an unknown option exits 2"

# a measured op table overrides the roofline: qkv at 1 ms fwd + 2 ms bwd in each of the
# 2 blocks makes t grow by 6 ms less the roofline time it replaces
printf 'mist-optable 1\n# op b s tp fwd_us bwd_us\nqkv 4 64 1 1000 2000\n' >"$tmp/ops.txt"
"$PLAN" "$TINY" --analyze --json --hardware cpu >"$tmp/a.json" 2>/dev/null
"$PLAN" "$TINY" --analyze --json --hardware cpu --op-table "$tmp/ops.txt" >"$tmp/b.json" 2>/dev/null
ta=$(grep -o '"t_stable_seconds": [0-9.e+-]*' "$tmp/a.json" | head -1 | sed 's/.*: //')
tb=$(grep -o '"t_stable_seconds": [0-9.e+-]*' "$tmp/b.json" | head -1 | sed 's/.*: //')
num_ok 'b > a + 0.003 && b < a + 0.006' a="$ta" b="$tb"
tap_ok $? "a measured op table entry replaces the roofline for that op ($ta s -> $tb s)"

# [plan] virtual (interleaved 1F1B): 8 chunks of 3 blocks on 4 pipeline ranks. Each rank's peak is the
# sum of its chunks' max(fwd, bwd) peaks, the iteration the interleaved formula over the chunks' t and d
# (docs/pipeline.md), the in-flight counts Megatron's order holds; virtual = 1 is the plain plan
chunks() {  # P v G
    printf '[plan]\nmode = fixed\nG = %d\nstages = %d\nvirtual = %d\n' "$3" $(($1 * $2)) "$2"
    c=0; while [ $c -lt $(($1 * $2)) ]; do
        printf '\n[stage.%d]\nlayers = %d\ndp = 2\ntp = 1\nb = %d\nzero = 1\nckpt = 1\n' $c $((24 / ($1 * $2))) $((256 / $3))
        c=$((c + 1))
    done
}
chunks 4 2 16 >"$tmp/v2.ini"; chunks 4 1 16 >"$tmp/v1.ini"; sed '/^virtual/d' "$tmp/v1.ini" >"$tmp/v0.ini"
"$PLAN" "$GPT" --analyze "$tmp/v2.ini" --json >"$tmp/v2.json" 2>"$tmp/v2.err"; rc=$?
python3 - "$tmp/v2.json" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
P, v, G, st = 4, a["virtual"], a["G"], a["stages"]
peak = [max(s["peak_bytes_fwd"], s["peak_bytes_bwd"]) for s in st]
ranks = a["pipeline_ranks"]
ok = v == 2 and len(st) == 8 and len(ranks) == 4
ok &= all(ranks[r]["peak_bytes"] == peak[r] + peak[r + P] for r in range(P))
t = [s["t_stable_seconds"] for s in st]; d = [s["t_delta_seconds"] for s in st]
T = [t[r] + t[r + P] for r in range(P)]; D = [d[r] + d[r + P] for r in range(P)]
extra, before = 0.0, 0.0
for r in range(P):
    extra = max(extra, D[r] - before); before += T[r] / v
want = G * max(T) + (sum(T) - max(T)) / v + extra
ok &= abs(a["iteration_seconds"] - want) <= 1e-12 * want
ok &= [s["p"] for s in st] == [7, 7, 6, 4, 3, 3, 2, 0]
print("# interleaved", a["iteration_seconds"], want, [s["p"] for s in st], [x["peak_bytes"] for x in ranks])
sys.exit(0 if ok else 1)
PY
tap_ok $? "virtual = 2: each rank's peak = the sum of its chunks', the interleaved iteration formula, p = 7 7 6 4 3 3 2 0"
"$PLAN" "$GPT" --analyze "$tmp/v1.ini" --json >"$tmp/v1.json" 2>/dev/null
"$PLAN" "$GPT" --analyze "$tmp/v0.ini" --json >"$tmp/v0.json" 2>/dev/null
t1=$(grep -o '"iteration_seconds": [0-9.e+-]*' "$tmp/v1.json"); t2=$(grep -o '"iteration_seconds": [0-9.e+-]*' "$tmp/v2.json")
cmp -s "$tmp/v1.json" "$tmp/v0.json" && [ -n "$t1" ] && ! grep -q '"virtual"' "$tmp/v1.json"
tap_ok $? "virtual = 1 is the plain 1F1B plan, byte for byte ($t1; virtual = 2: $t2)"
out=$("$PLAN" "$GPT" --analyze "$tmp/v2.ini" --trace "$tmp/v2.trace.json" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q '"virtual": 2, "pipeline_ranks": 4' "$tmp/v2.trace.json" &&
    grep -q "\"model_iteration_seconds\": $(echo "$t2" | sed 's/.*: //' | cut -c1-8)" "$tmp/v2.trace.json"
tap_ok $? "--trace of an interleaved plan: the trace of its 4 pipeline ranks, with the analysis's time (exit $rc)"

# every shipped example: its plan fits (exit 0), and the parameter counts published for
# the models (GPT-2 small, Llama 7B, Falcon-7B) are the ones the JSON reports
for ex in "$MIST_SRCDIR"/examples/*.ini; do
    name=$(basename "$ex" .ini)
    "$PLAN" "$ex" --analyze --json >"$tmp/ex.json" 2>"$tmp/ex.err"; rc=$?
    got=$(grep -o '"params_total": [0-9]*' "$tmp/ex.json" | sed 's/.*: //')
    case $name in
        gpt2-124m) want=124439808 ;;
        llama-7b) want=6738415616 ;;
        falcon-7b) want=6921720704 ;;
        *) want=$got ;;
    esac
    [ $rc -eq 0 ] && [ -n "$got" ] && [ "$got" = "$want" ]
    tap_ok $? "examples/$name.ini: its plan fits (exit $rc), $got parameters"
    [ $rc -eq 0 ] || sed 's/^/#   /' "$tmp/ex.err"
done

# the profile's usable_memory_fraction: the planner's capacity is memory x fraction
capacity() { sed -n 's/.*"capacity_bytes": \([0-9]*\).*/\1/p'; }
printf '[profile]\nbase = cpu\nusable_memory_fraction = 0.5\n' >"$tmp/half.ini"
full=$("$PLAN" "$TINY" --analyze --json --hardware cpu 2>/dev/null | capacity)
half=$("$PLAN" "$TINY" --analyze --json --hardware "$tmp/half.ini" 2>/dev/null | capacity)
[ -n "$full" ] && [ -n "$half" ] && [ "$half" -eq $((full / 2)) ]
tap_ok $? "usable_memory_fraction = 0.5 halves the planner's capacity ($full -> $half bytes)"

# a fixed plan with [stage.0] recompute = selective (GPT-2 small, one stage of 12 blocks on dgx-h100):
# less activation memory, more time (one attention forward more per block), said in the table and the JSON
field() { sed -n "s/.*\"stages\": \[{.*\"$1\": \([0-9.e+-]*\).*/\1/p"; }
G2="$MIST_SRCDIR/examples/gpt2-124m.ini"
sel_args="--hardware dgx-h100 -o plan.mode=fixed -o plan.stages=1 -o plan.G=8 -o stage.0.layers=12 -o stage.0.dp=8
 -o stage.0.tp=1 -o stage.0.b=8 -o stage.0.ckpt=0 -o train.global_batch=512"
# shellcheck disable=SC2086
"$PLAN" "$G2" --analyze --json $sel_args >"$tmp/none.json" 2>/dev/null
# shellcheck disable=SC2086
"$PLAN" "$G2" --analyze --json $sel_args -o stage.0.recompute=selective >"$tmp/sel.json" 2>/dev/null
# shellcheck disable=SC2086
"$PLAN" "$G2" --analyze $sel_args -o stage.0.recompute=selective >"$tmp/sel.txt" 2>/dev/null
a0=$(field activations <"$tmp/none.json") a1=$(field activations <"$tmp/sel.json")
t0=$(field t_stable_seconds <"$tmp/none.json") t1=$(field t_stable_seconds <"$tmp/sel.json")
tap_diag "GPT-2 small, 12 blocks, b 8 dp 8 on dgx-h100: activations $a0 -> $a1 bytes, t $t0 -> $t1 s with selective"
grep -q '"recompute": "selective"' "$tmp/sel.json" && grep -q '"recompute": "none"' "$tmp/none.json" &&
    grep -q 'stage 0: recompute = selective: 12 block' "$tmp/sel.txt" && num_ok 'a1 < a0 && t1 > t0' a0="$a0" a1="$a1" t0="$t0" t1="$t1"
tap_ok $? "recompute = selective: --analyze shows less activation memory ($a0 -> $a1 B) and more time ($t0 -> $t1 s)"

tap_end
