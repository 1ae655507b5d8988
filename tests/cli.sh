#!/bin/sh
# mist-train's command line: --help, --version, usage errors, --dry-run of the
# tiny example under mpirun (summary + one grid row per rank, printed once),
# the CPU fallback notice, and job-wide exits: a plan that needs more ranks
# than the job has, and a config error, both end every rank with exit 2 in
# under 10 s and print the message once.
. "$MIST_SRCDIR/tests/lib.sh"
TRAIN="$MIST_BUILDDIR/mist-train"
TINY="$MIST_SRCDIR/examples/tiny.ini"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

out=$("$TRAIN" --help 2>&1); rc=$?
[ $rc -eq 0 ] && printf '%s' "$out" | grep -q 'Usage: mist-train' && printf '%s' "$out" | grep -q -- '--dry-run'
tap_ok $? "--help prints the usage and exits 0"

out=$("$TRAIN" --version 2>&1); rc=$?
[ $rc -eq 0 ] && printf '%s' "$out" | grep -q '^mist-train (mist) [0-9]'
tap_ok $? "--version prints the version and exits 0 ($out)"

out=$("$TRAIN" --frobnicate "$TINY" 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q "unknown option '--frobnicate'"
tap_ok $? "an unknown option exits 2 and names the option"

out=$("$TRAIN" 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q 'missing the CONFIG.ini'
tap_ok $? "no config file exits 2 with a hint"

# a broken hardware profile file is a configuration error for a fixed plan too (it prices the MFU)
printf '[profile]\nbase = gcp-l4\nmemory_gib = banana\n' >"$tmp/hw.ini"
out=$("$TRAIN" -n "$TINY" -o cluster.hardware="$tmp/hw.ini" 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q "hw.ini:3: \[profile\] memory_gib = banana"
tap_ok $? "a fixed plan with a broken [cluster] hardware file exits 2 naming its line (rc $rc)"

# a dry run with mode = auto plans but writes nothing (no DIR/plan.ini)
out=$("$TRAIN" -n "$TINY" -o plan.mode=auto -o checkpoint.dir="$tmp/ckd" 2>&1); rc=$?
[ $rc -eq 0 ] && [ ! -e "$tmp/ckd" ] && printf '%s' "$out" | grep -q "plan not saved (a dry run writes nothing)"
tap_ok $? "--dry-run with [plan] mode = auto writes no plan file (rc $rc)"

out=$("$TRAIN" -o trainsteps=3 "$TINY" 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q 'SECTION.KEY=VALUE'
tap_ok $? "a malformed -o exits 2 and shows the expected form"

# The dry run at 4 ranks: the summary once, a header, one row per rank.
out=$(timeout 60 sh -c "mpirun --oversubscribe -np 4 '$TRAIN' --dry-run '$TINY' </dev/null" 2>"$tmp/err"); rc=$?
[ $rc -eq 0 ]
tap_ok $? "--dry-run of examples/tiny.ini at 4 ranks exits 0 (exit $rc)"
[ $rc -eq 0 ] || tap_diag "$out" "$(cat "$tmp/err")"
rows=$(printf '%s\n' "$out" | grep -cE '^ +[0-3] +[^ ]+ +[0-3] +cpu')
[ "$rows" -eq 4 ]
tap_ok $? "the grid table has one row per rank ($rows rows)"
header=$(printf '%s\n' "$out" | grep -c '^ *rank  *host  *local  *device  *stage  *dp  *tp  *layers')
[ "$header" -eq 1 ]
tap_ok $? "the grid table header is printed once ($header)"
for r in 0 1 2 3; do
    printf '%s\n' "$out" | grep -qE "^ +$r +[^ ]+ +[0-9]+ +cpu +0 +$r +0 +0-"
    tap_ok $? "rank $r sits at stage 0, dp index $r, tp index 0"
done
notices=$(grep -c 'using the CPU backend' "$tmp/err")
[ "$notices" -eq 1 ]
tap_ok $? "the CPU fallback is announced once for the job ($notices)"

# MIST_DEVICE=cpu forces the CPU backend silently.
out=$(MIST_DEVICE=cpu timeout 60 sh -c "mpirun --oversubscribe -x MIST_DEVICE -np 4 '$TRAIN' --dry-run '$TINY' </dev/null" 2>&1); rc=$?
[ $rc -eq 0 ] && ! printf '%s' "$out" | grep -q 'using the CPU backend'
tap_ok $? "MIST_DEVICE=cpu picks the CPU backend without a notice"

# Environment variables with values mist does not know: exit 2 before any work, one message
# naming the variable, its value and the allowed ones.
for v in "MIST_DEVICE=gpu:allowed: cpu, or unset" "MIST_CUDA_ATTENTION=fast:allowed: auto, base, wide, wgmma, cudnn, or unset"; do
    var=${v%%=*}; rest=${v#*=}; val=${rest%%:*}; want=${rest#*:}
    start=$(date +%s)
    out=$(env "$var=$val" timeout 30 sh -c "mpirun --oversubscribe -x $var -np 2 '$TRAIN' --dry-run '$TINY' </dev/null" 2>&1); rc=$?
    took=$(( $(date +%s) - start ))
    n=$(printf '%s\n' "$out" | grep -c "$var='$val' is not allowed ($want)")
    [ $rc -eq 2 ] && [ "$n" -eq 1 ] && [ $took -lt 10 ]
    tap_ok $? "$var=$val under mpirun -np 2: exit 2 in ${took}s, message printed $n time(s)"
    [ $rc -eq 2 ] && [ "$n" -eq 1 ] || tap_diag "$out"
done
for att in wide cudnn auto; do
    out=$(MIST_CUDA_ATTENTION=$att timeout 60 sh -c "mpirun --oversubscribe -x MIST_CUDA_ATTENTION -np 4 '$TRAIN' --dry-run '$TINY' </dev/null" 2>&1); rc=$?
    [ $rc -eq 0 ]
    tap_ok $? "MIST_CUDA_ATTENTION=$att is accepted (exit $rc)"
    [ $rc -eq 0 ] || tap_diag "$out"
done

# A plan for 4 ranks started on 2: every rank exits 2, one message.
start=$(date +%s)
out=$(timeout 30 sh -c "mpirun --oversubscribe -np 2 '$TRAIN' --dry-run '$TINY' </dev/null" 2>&1); rc=$?
took=$(( $(date +%s) - start ))
n=$(printf '%s\n' "$out" | grep -c 'plan needs 4 ranks')
[ $rc -eq 2 ] && [ "$n" -eq 1 ] && [ $took -lt 10 ] && printf '%s' "$out" | grep -q 'mpirun -np 4'
tap_ok $? "a plan needing 4 ranks under mpirun -np 2 exits 2 in ${took}s, message printed $n time(s)"
[ $rc -eq 2 ] && [ "$n" -eq 1 ] || tap_diag "$out"

# A config error under mpirun -np 4: exit 2 within 10 s, message once.
sed 's/^heads *=.*/heads = 5/' "$TINY" > "$tmp/bad.ini"
cp -r "$MIST_SRCDIR/examples/data" "$tmp/data" 2>/dev/null
start=$(date +%s)
out=$(timeout 30 sh -c "mpirun --oversubscribe -np 4 '$TRAIN' --dry-run '$tmp/bad.ini' </dev/null" 2>&1); rc=$?
took=$(( $(date +%s) - start ))
n=$(printf '%s\n' "$out" | grep -c 'bad.ini:[0-9]*:.*heads')
[ $rc -eq 2 ] && [ "$n" -eq 1 ] && [ $took -lt 10 ]
tap_ok $? "a config error under mpirun -np 4 exits 2 in ${took}s (exit $rc), message printed $n time(s)"
[ $rc -eq 2 ] && [ "$n" -eq 1 ] || tap_diag "$out"

# The -o override reaches every rank: the summary shows it.
out=$(timeout 60 sh -c "mpirun --oversubscribe -np 4 '$TRAIN' --dry-run -o train.steps=7 '$TINY' </dev/null" 2>&1); rc=$?
[ $rc -eq 0 ] && printf '%s' "$out" | grep -qE 'steps[^0-9]*7([^0-9]|$)'
tap_ok $? "-o train.steps=7 shows in the dry-run summary"
# One process previews a 32-rank plan: 32 rows, stage 1 from rank 16 (2 stages of dp 4 x tp 4).
out=$("$TRAIN" --dry-run "$MIST_SRCDIR/examples/gpt3-13b.ini" 2>&1 </dev/null); rc=$?
rows=$(printf '%s\n' "$out" | grep -cE '^ +[0-9]+ +- +- +- ')
[ $rc -eq 0 ] && [ "$rows" -eq 32 ] && printf '%s\n' "$out" | grep -qE '^ +16 +- +- +- +1 +0 +0 +20-39$' \
    && printf '%s\n' "$out" | grep -qE '^ +5 +- +- +- +0 +1 +1 +0-19$'
tap_ok $? "a single-process dry run previews the 32-rank gpt3-13b plan ($rows rows, exit $rc)"
[ $rc -eq 0 ] || tap_diag "$out"

# The Slurm examples parse and ask for their arguments (tests/slurm.sh runs them under Slurm)
bad=
for SB in "$MIST_SRCDIR"/examples/slurm/*.sbatch; do
    out=$(bash "$SB" 2>&1 </dev/null); rc=$?
    bash -n "$SB" && [ $rc -ne 0 ] && printf '%s' "$out" | grep -q "usage: sbatch .*examples/slurm/${SB##*/}" || bad="$bad ${SB##*/}"
done
[ -z "$bad" ] && [ "$(ls "$MIST_SRCDIR"/examples/slurm/*.sbatch | wc -l)" -eq 6 ]
tap_ok $? "examples/slurm/*.sbatch: valid bash, a usage message without arguments (failing:${bad:- none})"
# The requeue job: 4 nodes x 8 ranks, USR1 two minutes early, requeue after a clean stop
SB="$MIST_SRCDIR/examples/slurm/requeue.sbatch"
grep -q '^#SBATCH --signal=USR1@120' "$SB" && grep -q 'MIST_STOP_FILE' "$SB" && grep -q 'srun .*--kill-on-bad-exit=1' "$SB" &&
    [ "$(sed -n 's/^#SBATCH --nodes=\([0-9]*\).*/\1/p' "$SB")" -eq 4 ] &&
    [ "$(sed -n 's/^#SBATCH --ntasks-per-node=\([0-9]*\).*/\1/p' "$SB")" -eq 8 ]
tap_ok $? "examples/slurm/requeue.sbatch: USR1 two minutes early, requeue after a clean stop, a dead rank ends the step"
tap_end
