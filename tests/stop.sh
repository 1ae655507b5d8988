#!/bin/sh
# Graceful stop: SIGUSR1 to mpirun (forwarded to every rank; what Slurm's
# --signal=USR1@SECONDS sends) makes all ranks finish the same iteration,
# write a checkpoint of it and exit 5; the job then resumes from it.
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
TRAIN="$MIST_BUILDDIR/mist-train"
GPT="$MIST_SRCDIR/examples/tiny.ini"
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-stop-test.XXXXXX")
trap 'rm -rf "$W"' EXIT
COMMON="-o train.global_batch=8 -o log.interval=1 -o data.val_interval=0 -o checkpoint.dir=$W/ck
 -o checkpoint.interval=0 -o checkpoint.keep=2 -o stage.0.dp=2 -o stage.0.b=4 -o stage.0.zero=1"

# shellcheck disable=SC2086
mpirun --oversubscribe -np 2 "$TRAIN" "$GPT" $COMMON -o train.steps=100000 -o log.jsonl="$W/a.jsonl" \
    >"$W/a.out" 2>&1 </dev/null &
mpid=$!
i=0
while [ "$( (wc -l <"$W/a.jsonl") 2>/dev/null || echo 0)" -lt 3 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
t0=$(date +%s.%N)
kill -USR1 "$mpid"
reap "$mpid" 30
step=$(sed -n 's/.*stopping after iteration \([0-9]*\) .*/\1/p' "$W/a.out" | head -1)
tap_diag "SIGUSR1 to mpirun: exit $rc after $dt s; $(grep -m1 'stopping after' "$W/a.out")"
[ $rc -eq 5 ] && [ -n "$step" ] && [ "$(cat "$W/ck/latest" 2>/dev/null)" = "$(printf 'step_%08d.ckpt' "$step")" ] &&
    num_ok 't < 20' t="$dt"
tap_ok $? "SIGUSR1: every rank stops after iteration ${step:-?}, writes its checkpoint and exits 5 (rc $rc, $dt s)"

# the stopped job resumes at the next iteration
# shellcheck disable=SC2086
mpirun --oversubscribe -np 2 "$TRAIN" "$GPT" $COMMON -o checkpoint.resume=1 -o train.steps=$((${step:-0} + 2)) \
    -o log.jsonl="$W/b.jsonl" >"$W/b.out" 2>&1 </dev/null
rc=$?
first=$(sed -n 's/.*"iteration": *\([0-9]*\).*/\1/p' "$W/b.jsonl" | head -1)
[ $rc -eq 0 ] && [ -n "$step" ] && [ "$first" = $((step + 1)) ]
tap_ok $? "the run resumes from that checkpoint at iteration $((${step:-0} + 1)) (rc $rc, first logged ${first:-none})"

# SIGUSR1 while a checkpoint is being written: the run stops at that checkpoint (it does not
# train one more iteration and write a second one)
rm -rf "$W/ck"
export MIST_FAULT_CHECKPOINT_PAUSE="$W/in-ckpt:2"
# shellcheck disable=SC2086
mpirun --oversubscribe -np 2 "$TRAIN" "$GPT" $COMMON -o train.steps=100000 -o checkpoint.interval=3 \
    >"$W/c.out" 2>&1 </dev/null &
mpid=$!
unset MIST_FAULT_CHECKPOINT_PAUSE
i=0
while [ ! -e "$W/in-ckpt" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
t0=$(date +%s.%N)
kill -USR1 "$mpid"
reap "$mpid" 30
tap_diag "SIGUSR1 during the checkpoint of iteration 3: exit $rc; $(grep -m1 'stopping after' "$W/c.out")"
[ $rc -eq 5 ] && grep -q "stopping after iteration 3 " "$W/c.out" && [ "$(cat "$W/ck/latest" 2>/dev/null)" = step_00000003.ckpt ] &&
    [ "$(ls "$W/ck" | grep -c '^step_.*ckpt$')" -eq 1 ]
tap_ok $? "SIGUSR1 during a checkpoint write stops the run at that checkpoint, iteration 3, with no second one (rc $rc)"

# examples/slurm/requeue.sbatch requeues after a clean stop even when the launcher reports 1: here
# `srun` is mpirun (2 ranks) and receives SIGTERM as a job cancelled at its limit would;
# `scontrol` records what it is asked
mkdir -p "$W/bin"
cat >"$W/bin/srun" <<EOS
#!/bin/sh
shift 2  # --mpi=pmix --kill-on-bad-exit=1
mpirun --oversubscribe -np 2 "\$@" </dev/null &
pid=\$!
i=0
while [ "\$( (wc -l <"$W/s.jsonl") 2>/dev/null || echo 0)" -lt 3 ] && [ \$i -lt 300 ]; do sleep 0.1; i=\$((i + 1)); done
kill -TERM \$pid
wait \$pid
rc=\$?
echo "\$rc" >"$W/launcher.rc"
exit \$rc
EOS
printf '#!/bin/sh\necho "$@" >>"%s/scontrol.log"\n' "$W" >"$W/bin/scontrol"
chmod +x "$W/bin/srun" "$W/bin/scontrol"
rm -rf "$W/ck"
# shellcheck disable=SC2086
(cd "$W" && PATH="$W/bin:$MIST_BUILDDIR:$PATH" SLURM_JOB_ID=77 bash "$MIST_SRCDIR/examples/slurm/requeue.sbatch" "$GPT" $COMMON \
    -o train.steps=100000 -o log.jsonl="$W/s.jsonl" >"$W/s.out" 2>&1)
tap_diag "sbatch script, launcher SIGTERM-ed: launcher exit $(cat "$W/launcher.rc" 2>/dev/null); $(grep -m1 'requeueing' "$W/s.out")"
grep -q "^requeue 77$" "$W/scontrol.log" 2>/dev/null && grep -q "mist: stopped after iteration [0-9]* (launcher exit" "$W/s.out" &&
    [ -s "$W/ck/latest" ] && [ ! -e "$W/mist-77.stopped" ]
tap_ok $? "examples/slurm/requeue.sbatch requeues the job after a clean stop whatever the launcher returns (launcher exit $(cat "$W/launcher.rc" 2>/dev/null))"
tap_end
