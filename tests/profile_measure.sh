#!/bin/sh
# mist-profile measures the job's collective lines per group shape and its
# host copies, and writes a profile that mist-plan reads: the table's fits are
# the file's lines, the shapes the job cannot form keep the base's, and the
# prediction moves with them; bad options stop every rank with exit 2.
. "$MIST_SRCDIR/tests/lib.sh"
PROF="$MIST_BUILDDIR/mist-profile"
PLAN="$MIST_BUILDDIR/mist-plan"
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-profile-test.XXXXXX")
trap 'rm -rf "$W"' EXIT
export MIST_DEVICE=cpu

# 4 ranks as 2 "nodes" of 2: shapes 1x2, 2x1 and 2x2
timeout 120 mpirun --oversubscribe -np 4 "$PROF" --sizes 0.25,1,4 --iters 3 --ranks-per-node 2 --out "$W/p.ini" \
    --json "$W/p.json" >"$W/p.out" 2>&1 </dev/null
rc=$?
tap_diag "$(cat "$W/p.out")"
shapes=$(awk '$1 ~ /^[0-9]+x[0-9]+$/ && NF == 8 { print $1 }' "$W/p.out" | tr '\n' ' ')
[ $rc -eq 0 ] && [ "$shapes" = "1x2 2x1 2x2 " ] && grep -q '^mist-profile: 4 ranks on 2 nodes (2 per node' "$W/p.out"
tap_ok $? "4 ranks as 2 nodes x 2: all-gather lines of shapes 1x2, 2x1, 2x2 (got '$shapes', rc $rc)"

# each measured shape's file line is the table's fit (k GB/s, beta us); an unmeasured one is the base's
same=0
for s in 1x2 2x1 2x2; do
    awk -v s="$s" -v tab="$W/p.out" -v num_re="$num_re" '
        BEGIN { while ((getline l < tab) > 0) { split(l, f, " "); if (f[1] == s) { k = f[6]; b = f[7] } } }
        $1 == s && $2 == "=" { ok = k ~ num_re && b ~ num_re && $3 ~ num_re && $4 ~ num_re &&
                                    k > 0 && ($3 - k) / k < 1e-3 && ($3 - k) / k > -1e-3 &&
                                    ($4 * 1e6 - b < 1e-3 * (b + 1)) && (b - $4 * 1e6 < 1e-3 * (b + 1)) }
        END { exit !ok }' "$W/p.ini" && same=$((same + 1))
done
[ "$same" -eq 3 ] && grep -q '^; written by mist-profile over base cpu, 2 node(s) x 2 rank(s)' "$W/p.ini"
tap_ok $? "the file's [collective] 1x2, 2x1, 2x2 lines are the table's fits ($same of 3); a header says what was measured"

# --json: the same measurements, the file's lines among them
python3 - "$W/p.json" "$W/p.ini" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
ini = {l.split()[0]: l.split()[2:4] for l in open(sys.argv[2]) if "x" in l.split(" ")[0] and " = " in l}
ok = j["ranks"] == 4 and j["nodes"] == 2 and len(j["bytes"]) == 3 and len(j["all_gather"]) == 3
for s in j["all_gather"]:
    k, b = ini["%dx%d" % (s["nodes"], s["gpus"])]
    ok &= len(s["seconds"]) == 3 and abs(float(k) * 1e9 / s["k_bytes_per_second"] - 1) < 1e-6
    ok &= abs(float(b) - s["beta_seconds"]) <= 1e-5 * s["beta_seconds"] + 1e-12  # %.6g in the file
ok &= j["reduce_scatter_factor"] is not None and j["h2d"]["k_bytes_per_second"] > 0
sys.exit(0 if ok else 1)
EOF
tap_ok $? "--json: 3 shapes x 3 sizes, their fits equal to the profile's lines, factors and host lines"

# the planner reads it, and a dp 4 plan's predicted time moves with the measured lines
t_base=$("$PLAN" "$MIST_SRCDIR/examples/tiny.ini" --analyze --json --hardware cpu -o stage.0.dp=4 -o plan.G=1 -o stage.0.b=4 2>/dev/null |
    sed -n 's/.*"iteration_seconds": \([0-9.e+-]*\).*/\1/p')
t_meas=$("$PLAN" "$MIST_SRCDIR/examples/tiny.ini" --analyze --json --hardware "$W/p.ini" -o stage.0.dp=4 -o plan.G=1 -o stage.0.b=4 2>"$W/plan.err" |
    sed -n 's/.*"iteration_seconds": \([0-9.e+-]*\).*/\1/p')
tap_diag "$(cat "$W/plan.err")"
[ -n "$t_base" ] && [ -n "$t_meas" ] && [ "$t_base" != "$t_meas" ]
tap_ok $? "mist-plan --hardware FILE reads the measured profile: dp 4 iteration $t_base s (cpu preset) -> $t_meas s"

# --out -: standard output is exactly the profile (the table goes to stderr), at one rank
timeout 60 mpirun --oversubscribe -np 1 "$PROF" --sizes 1,2 --iters 2 --out - >"$W/one.ini" 2>"$W/one.err" </dev/null
rc=$?
[ $rc -eq 0 ] && head -1 "$W/one.ini" | grep -q '^; written by mist-profile' && grep -q 'no collective measured' "$W/one.err" &&
    "$PLAN" "$MIST_SRCDIR/examples/tiny.ini" --analyze --hardware "$W/one.ini" >/dev/null 2>&1
tap_ok $? "one rank, --out -: the profile on stdout (loadable), the table on stderr with no collective (rc $rc)"

# bad options: exit 2 on every rank, with the allowed values
for bad in "--sizes 4,1" "--iters 0" "--hardware nope" "--ranks-per-node x" "--frobnicate 1"; do
    # shellcheck disable=SC2086
    timeout 60 mpirun --oversubscribe -np 2 "$PROF" $bad --out "$W/bad.ini" >"$W/bad.out" 2>&1 </dev/null
    rc=$?
    [ $rc -eq 2 ] && [ ! -e "$W/bad.ini" ] && [ "$(grep -c 'allowed\|see --help\|not a preset' "$W/bad.out")" -eq 1 ]
    tap_ok $? "mist-profile $bad: exit 2 on both ranks, one message with the allowed values, nothing written (rc $rc): $(head -1 "$W/bad.out")"
done
"$PROF" --help | grep -q '^usage: mpirun -np N mist-profile'
tap_ok $? "mist-profile --help prints the usage"

# lines measured through host memory (the staged path) say so, and the planner then puts each
# collective's copies on the critical path: slower dp plans, the same plan without dp
MIST_COMM_STAGED=1 timeout 60 mpirun --oversubscribe -np 2 "$PROF" --sizes 1,2 --iters 2 --out "$W/st.ini" \
    >"$W/st.out" 2>&1 </dev/null
rc=$?
[ $rc -eq 0 ] && grep -q '^staged = 1$' "$W/st.ini" && grep -q 'collectives: staged through pinned host memory' "$W/st.out" &&
    grep -q '^staged = 0$' "$W/p.ini"
tap_ok $? "MIST_COMM_STAGED=1: mist-profile measures the staged path and writes staged = 1 (MPI: staged = 0) (rc $rc)"
G13="$MIST_SRCDIR/examples/gpt3-1.3b.ini"
ONE="-o plan.stages=1 -o stage.0.layers=24 -o stage.0.tp=1 -o stage.0.ckpt=24 -o train.global_batch=64"
for staged in 0 1; do printf '[profile]\nbase = gcp-l4\n[collective]\nstaged = %s\n' $staged >"$W/l4-$staged.ini"; done
it() {  # it PROFILE OPTIONS...: the predicted iteration seconds
    pf=$1; shift
    # shellcheck disable=SC2086
    "$PLAN" "$G13" --analyze --json --hardware "$pf" $ONE "$@" 2>/dev/null | sed -n 's/.*"iteration_seconds": \([0-9.e+-]*\).*/\1/p'
}
z3_0=$(it "$W/l4-0.ini" -o stage.0.dp=8 -o stage.0.b=1 -o stage.0.zero=3 -o plan.G=8)
z3_1=$(it "$W/l4-1.ini" -o stage.0.dp=8 -o stage.0.b=1 -o stage.0.zero=3 -o plan.G=8)
one_0=$(it "$W/l4-0.ini" -o stage.0.dp=1 -o stage.0.b=1 -o plan.G=64 -o cluster.nodes=1 -o cluster.gpus_per_node=1)
one_1=$(it "$W/l4-1.ini" -o stage.0.dp=1 -o stage.0.b=1 -o plan.G=64 -o cluster.nodes=1 -o cluster.gpus_per_node=1)
flag=$("$PLAN" "$G13" --analyze --json --hardware "$W/l4-1.ini" 2>/dev/null | grep -o '"staged_collectives": [a-z]*')
[ -n "$z3_0" ] && [ -n "$one_0" ] && num_ok 'b > a' a="$z3_0" b="$z3_1" && [ "$one_0" = "$one_1" ] &&
    [ "$flag" = '"staged_collectives": true' ] &&
    "$PLAN" "$G13" --analyze --hardware "$W/l4-1.ini" 2>/dev/null | grep -q '^plan: .*(collectives staged through host memory)'

tap_ok $? "staged = 1 on gcp-l4: GPT-3 1.3B dp 8 ZeRO-3 $z3_0 s -> $z3_1 s (copies on the critical path); dp 1 the same ($one_0 s); --analyze says so (text and JSON)"
printf '[profile]\nbase = gcp-l4\n[collective]\nstaged = 2\n' >"$W/bad-staged.ini"
"$PLAN" "$MIST_SRCDIR/examples/tiny.ini" --analyze --hardware "$W/bad-staged.ini" >/dev/null 2>"$W/bad-staged.err"
rc=$?
[ $rc -eq 2 ] && grep -q 'bad-staged.ini:4: \[collective\] staged = 2: expected 0 or 1' "$W/bad-staged.err"
tap_ok $? "[collective] staged = 2: exit 2 naming the file, line and the allowed values (rc $rc)"

# mist-train measures the same at start ([cluster] measure_transfers), plans with it (mode = auto),
# saves it next to the checkpoints, and predicts with it: the saved plan under the saved profile
# gives the printed prediction
TRAIN="$MIST_BUILDDIR/mist-train"
timeout 120 mpirun --oversubscribe -np 4 "$TRAIN" "$MIST_SRCDIR/examples/tiny.ini" -o plan.mode=auto \
    -o cluster.measure_transfers=1 -o train.steps=2 -o log.interval=1000 -o data.val_interval=0 \
    -o checkpoint.dir="$W/ck" >"$W/train.out" 2>&1 </dev/null
rc=$?
tap_diag "$(grep -v '^ iteration' "$W/train.out" | head -12)"
pred=$(sed -n 's/^mist: predicted iteration \([0-9.e+-]*\) ms on hardware profile cpu measured.*/\1/p' "$W/train.out")
again=$("$PLAN" "$MIST_SRCDIR/examples/tiny.ini" --analyze --json --hardware "$W/ck/profile.ini" -o plan.file="$W/ck/plan.ini" 2>/dev/null |
    sed -n 's/.*"iteration_seconds": \([0-9.e+-]*\).*/\1/p')
[ $rc -eq 0 ] && grep -q '^mist-train: \[cluster\] measure_transfers: 4 ranks on 1 node' "$W/train.out" &&
    grep -q '^1x4 ' "$W/train.out" && grep -q "^measured profile saved to $W/ck/profile.ini" "$W/train.out" &&
    num_ok 'a - 1e3 * b <= 5e-4 * a && 1e3 * b - a <= 5e-4 * a' a="$pred" b="$again"
tap_ok $? "mist-train -o cluster.measure_transfers=1: measured at start, planned and predicted with it ($pred ms), saved: the saved plan under the saved profile gives it again (${again:-?} s) (rc $rc)"
timeout 60 mpirun --oversubscribe -np 2 "$TRAIN" "$MIST_SRCDIR/examples/tiny.ini" -o plan.mode=auto \
    -o cluster.measure_transfers=1 --dry-run >"$W/dry.out" 2>&1 </dev/null
rc=$?
[ $rc -eq 0 ] && ! grep -q 'measure_transfers:' "$W/dry.out"
tap_ok $? "a dry run does not measure (rc $rc)"
tap_end
