#!/bin/sh
# The Slurm examples under a real Slurm: a one-node cluster on localhost with 4 task
# slots (munged, slurmctld and slurmd of this test, in a temporary directory, on ports
# of their own), running
#   - examples/slurm/single-node.sbatch under srun --mpi=pmix, and
#     examples/slurm/multi-node.sbatch (sized to this node) under mpirun inside the
#     allocation: both finish, with the same losses;
#   - examples/slurm/plan.sbatch: a plan file that mist-train accepts;
#   - examples/slurm/sweep.sbatch as a job array, and sweep-table.sbatch after it: one
#     table with a row per space;
#   - examples/slurm/requeue.sbatch with a one-minute limit and SIGUSR1 20 s before it:
#     the ranks checkpoint and stop, the job requeues itself, resumes at the next
#     iteration and ends with the losses of an uninterrupted run.
# Debian's Slurm is installed when missing (root only); the test skips, saying why, only
# where Slurm cannot be installed or its daemons cannot start here.
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
EX="$MIST_SRCDIR/examples/slurm"
TINY="$MIST_SRCDIR/examples/tiny.ini"
t_test=$(date +%s)

skip_all() { tap_skip "$1"; tap_end; exit $?; }
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-slurm-test.XXXXXX")
chmod 755 "$W"  # munged wants the directories above its socket searchable by all
export SLURM_CONF="$W/slurm.conf"
cleanup() {
    # the jobs first (only where this test's slurmctld runs: without it squeue would wait for one)
    if [ -s "$W/slurmctld.pid" ] && kill -0 "$(cat "$W/slurmctld.pid")" 2>/dev/null; then
        ids=$(squeue -h -o %A 2>/dev/null)
        [ -n "$ids" ] && scancel $ids 2>/dev/null
        i=0
        while [ -n "$(squeue -h -o %A 2>/dev/null)" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    fi
    for f in slurmd slurmctld munged; do
        [ -s "$W/$f.pid" ] && kill "$(cat "$W/$f.pid")" 2>/dev/null
    done
    sleep 0.5
    rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# --- Slurm itself -----------------------------------------------------------------------
missing=
for p in slurmctld slurmd munged sbatch srun scontrol; do command -v $p >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
    [ "$(id -u)" -eq 0 ] || skip_all "Slurm is not installed (missing:$missing) and only root may install it"
    command -v apt-get >/dev/null 2>&1 || skip_all "Slurm is not installed (missing:$missing) and there is no apt-get"
    pkgs="slurmctld slurmd munge"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends $pkgs >"$W/apt.log" 2>&1 ||
        { apt-get update >>"$W/apt.log" 2>&1 &&
              apt-get install -y --no-install-recommends $pkgs >>"$W/apt.log" 2>&1; } ||
        skip_all "apt-get could not install $pkgs: $(tail -1 "$W/apt.log")"
    tap_diag "installed Debian's $pkgs in $(($(date +%s) - t_test)) s"
fi

# ports of this run: a test running beside another (or beside a site's Slurm) does not collide
port=$((20000 + $$ % 20000))
mkdir -p "$W/munge" "$W/state" "$W/spool" "$W/run" "$W/dev"
chmod 700 "$W/munge"
dd if=/dev/urandom of="$W/munge/key" bs=1024 count=1 2>/dev/null
chmod 400 "$W/munge/key"
# Four "GPUs" for the examples' --gpus-per-node: files, as a CPU machine has none (slurmd
# logs that they are no devices, and hands them out all the same)
for g in 0 1 2 3; do : >"$W/dev/gpu$g"; done
cat >"$SLURM_CONF" <<EOF
ClusterName=misttest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$W/munge/socket
CredType=cred/munge
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool
SlurmctldPidFile=$W/slurmctld.pid
SlurmdPidFile=$W/slurmd.pid
SlurmctldLogFile=$W/slurmctld.log
SlurmdLogFile=$W/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=600
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 CPUs=4 Gres=gpu:4 State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
printf 'AutoDetect=off\nName=gpu File=%s/dev/gpu[0-3]\n' "$W" >"$W/gres.conf"
# the examples start ranks with srun --mpi=pmix: Debian's Slurm has the plugin
mpi=$(srun --mpi=list 2>&1 | grep -ow pmix | head -1)
[ -n "$mpi" ] || tap_diag "this Slurm has no pmix plugin (srun --mpi=list): the srun launches will fail"

munged --force --key-file="$W/munge/key" --socket="$W/munge/socket" --pid-file="$W/munged.pid" \
    --log-file="$W/munged.log" --seed-file="$W/munge/seed" >"$W/munged.out" 2>&1 ||
    skip_all "munged cannot start here: $(tail -1 "$W/munged.out")"
slurmctld -f "$SLURM_CONF" >"$W/slurmctld.out" 2>&1
# slurmd registers once at its start (and again only a minute later): start it after slurmctld answers
i=0
while ! scontrol ping 2>/dev/null | grep -q 'is UP' && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
slurmd -N localhost -f "$SLURM_CONF" >"$W/slurmd.out" 2>&1
i=0
while ! sinfo -h -o %t 2>/dev/null | grep -q idle && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
if ! sinfo -h -o %t 2>/dev/null | grep -q idle; then
    tap_diag "slurmctld: $(tail -3 "$W/slurmctld.log" 2>/dev/null)" "slurmd: $(tail -3 "$W/slurmd.log" 2>/dev/null)"
    skip_all "slurmctld/slurmd cannot start here (node state: $(sinfo -h -o %t 2>&1 | head -1))"
fi
tap_diag "a one-node cluster (4 task slots, srun --mpi=$mpi) up after $(($(date +%s) - t_test)) s"

# Every job gets this environment (sbatch exports it): the built programs first on PATH,
# and the Open MPI settings of lib.sh (root, oversubscription)
export PATH="$MIST_BUILDDIR:$PATH"
# the CPU backend also on a GPU machine: the test's "GPUs" are stand-ins, and runs under
# different launchers must compute the same losses
export MIST_DEVICE=cpu
# The examples' sizes (8 GPUs per node, 8 CPUs per task) shrunk to this node
SIZE="--nodes=1 --ntasks-per-node=2 --gpus-per-node=2 --cpus-per-task=1"
COMMON="-o stage.0.dp=2 -o stage.0.b=8 -o log.interval=1 -o data.val_interval=0 -o checkpoint.interval=0"

# job_state JOBID: "STATE EXIT:SIGNAL RESTARTS" of a job (or of each task of an array, one a line)
job_state() {
    scontrol -o show job "$1" 2>/dev/null |
        sed -n 's/.* JobState=\([A-Z_]*\) .* Restarts=\([0-9]*\) .* ExitCode=\([0-9:]*\) .*/\1 \3 \2/p'
}
# wait_jobs LIMIT JOBID...: wait up to LIMIT seconds until no task of these jobs is pending or
# running. Slurm holds a requeued job for two minutes (Reason=BeginTime); the test lets it
# start at once, as a cluster would when the two minutes have passed.
wait_jobs() {
    _limit=$(($(date +%s) + $1))
    shift
    while [ "$(date +%s)" -lt $_limit ]; do
        _busy=0
        for _j in "$@"; do
            job_state "$_j" | grep -qE '^(PENDING|RUNNING|CONFIGURING|COMPLETING|REQUEUED|SUSPENDED)' && _busy=1
            if scontrol -o show job "$_j" 2>/dev/null | grep -q 'JobState=PENDING Reason=BeginTime'; then
                echo x >>"$W/held.$_j"
                # after 3 polls, once slurmd has no step of the run before left: Slurm revokes
                # a requeued job's credentials, with one-second resolution, and rejects a launch
                # that comes too soon after it ("task launch failed: Unspecified error")
                [ "$(wc -l <"$W/held.$_j")" -ge 3 ] && ! ls "$W/spool" | grep -q "_$_j\." &&
                    rm -f "$W/held.$_j" && scontrol update jobid="$_j" StartTime=now
            fi
        done
        [ $_busy -eq 0 ] && return 0
        sleep 1
    done
    return 1
}
# losses FILE: "iteration loss" per line of a jsonl log
losses() { sed -n 's/^{"iteration": *\([0-9]*\),.*"loss": *\([^,]*\),.*/\1 \2/p' "$1" 2>/dev/null; }
# submit NAME SBATCH_ARGS...: sbatch in $W with output NAME.out, prints the job id
submit() {
    _name=$1
    shift
    sbatch --parsable --chdir="$W" --output="$W/$_name.out" "$@" 2>"$W/$_name.sbatch.err" | cut -d';' -f1
}

# --- single node (srun), multi node script under mpirun, planning, sweep ---------------------
# shellcheck disable=SC2086
single=$(submit single $SIZE --time=5 "$EX/single-node.sbatch" "$TINY" $COMMON -o train.steps=20 -o log.jsonl="$W/single.jsonl")
# shellcheck disable=SC2086
multi=$(MIST_LAUNCHER=mpirun submit multi $SIZE --time=5 "$EX/multi-node.sbatch" "$TINY" $COMMON -o train.steps=20 \
    -o log.jsonl="$W/multi.jsonl")
plan=$(MIST_PLAN_OUT="$W/plan.ini" submit plan --cpus-per-task=1 "$EX/plan.sbatch" "$TINY" --nodes 1 --gpus-per-node 2)
# the sweep: one rank per task, each space trains its plan for 6 iterations
sweep=$(submit sweep --output="$W/sweep-%a.out" --nodes=1 --ntasks-per-node=1 --gpus-per-node=1 --cpus-per-task=1 \
    --time=5 "$EX/sweep.sbatch" "$TINY" -o train.steps=6 -o data.val_interval=0)
table=$(submit table --dependency=afterany:"$sweep" "$EX/sweep-table.sbatch" "sweep-$sweep")
tap_diag "submitted: single-node $single, multi-node (mpirun) $multi, plan $plan, sweep $sweep, its table $table"
t0=$(date +%s)
wait_jobs 150 "$single" "$multi" "$plan" "$sweep" "$table"
tap_diag "they ended after $(($(date +%s) - t0)) s"

st=$(job_state "$single")
[ "$st" = "COMPLETED 0:0 0" ] && [ "$(losses "$W/single.jsonl" | wc -l)" -eq 20 ]
tap_ok $? "single-node.sbatch under srun --mpi=$mpi: COMPLETED, exit 0, 20 iterations logged ($st)"
[ "$st" = "COMPLETED 0:0 0" ] || tap_diag "$(tail -5 "$W/single.out" "$W/single.sbatch.err" 2>/dev/null)"

st=$(job_state "$multi")
[ "$st" = "COMPLETED 0:0 0" ] && [ "$(losses "$W/multi.jsonl" | wc -l)" -eq 20 ] &&
    [ "$(losses "$W/multi.jsonl")" = "$(losses "$W/single.jsonl")" ]
tap_ok $? "multi-node.sbatch under mpirun inside the allocation: COMPLETED, the 20 losses of the srun run ($st)"
[ "$st" = "COMPLETED 0:0 0" ] || tap_diag "$(tail -5 "$W/multi.out" "$W/multi.sbatch.err" 2>/dev/null)"

st=$(job_state "$plan")
[ "$st" = "COMPLETED 0:0 0" ] && grep -q '^\[stage\.0\]' "$W/plan.ini" 2>/dev/null &&
    mist-train --dry-run "$TINY" -o plan.file="$W/plan.ini" >"$W/plan-check.out" 2>&1 </dev/null
tap_ok $? "plan.sbatch: COMPLETED, writes a plan file mist-train accepts ($st)"
[ "$st" = "COMPLETED 0:0 0" ] || tap_diag "$(tail -5 "$W/plan.out" "$W/plan.sbatch.err" 2>/dev/null)"

tasks=$(job_state "$sweep" | grep -c '^COMPLETED 0:0')
rows=$(awk 'NR > 1 && $4 ~ /^[0-9.]+$/ && $3 ~ /^[0-9.]+$/' "$W/sweep-$sweep/table.tsv" 2>/dev/null | wc -l)
st=$(job_state "$table")
[ "$tasks" -eq 5 ] && [ "$st" = "COMPLETED 0:0 0" ] && [ "$rows" -eq 5 ] &&
    [ "$(cut -f1 "$W/sweep-$sweep/table.tsv" | sort | tr '\n' ' ')" = "ckpt full megatron offload space zero " ]
tap_ok $? "sweep.sbatch as an array of 5 tasks ($tasks COMPLETED) and sweep-table.sbatch after it: one table, a row per space with predicted and measured times ($rows)"
tap_diag "$(cat "$W/table.out" 2>/dev/null)"

# --- the time limit: SIGUSR1, checkpoint, requeue, resume -----------------------------------
# Slurm checks time limits every 30 s and sends the signal at the first check that finds
# the limit less than the signal's lead plus 30 s away: with a one-minute limit and
# USR1@20, 10 to 40 s into each run. The run gets 45 s of work at the speed the single-node
# job measured (the median of its iterations), so the first run cannot finish before its
# signal; the later ones may be stopped again, each resuming from the one before.
ms=$(sed -n 's/.*"ms_per_iter": *\([0-9.]*\).*/\1/p' "$W/single.jsonl" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }')
steps=$(awk -v ms="${ms:-100}" 'BEGIN { s = int(45000 / ms); print s < 60 ? 60 : s }')
tap_diag "requeue run: $steps iterations (single-node: median ${ms:-?} ms per iteration)"
REQ="$COMMON -o train.steps=$steps -o checkpoint.dir=$W/ck"
# shellcheck disable=SC2086
requeue=$(submit requeue $SIZE --time=1 --signal=USR1@20 "$EX/requeue.sbatch" "$TINY" $REQ -o log.jsonl="$W/requeue.jsonl")
# the same run, uninterrupted, beside it
# shellcheck disable=SC2086
ref=$(submit ref $SIZE --time=10 "$EX/single-node.sbatch" "$TINY" $REQ -o checkpoint.dir="$W/ck-ref" -o log.jsonl="$W/ref.jsonl")
t0=$(date +%s)
wait_jobs 200 "$requeue" "$ref"
tap_diag "requeue job $requeue and reference $ref ended after $(($(date +%s) - t0)) s"

st=$(job_state "$requeue")
restarts=${st##* }
stops=$(grep -c '^mist: stopped after iteration [0-9]* (launcher exit [0-9]*); requeueing$' "$W/requeue.out")
tap_diag "$(grep -E 'stopping after|requeueing|resum' "$W/requeue.out" | head -8)"
[ "${st% *}" = "COMPLETED 0:0" ] && [ "$restarts" -ge 1 ] && [ "$stops" -eq "$restarts" ] &&
    [ "$(grep -c 'stopping after iteration' "$W/requeue.out")" -ge 1 ]
tap_ok $? "requeue.sbatch at its time limit: SIGUSR1, checkpoint, requeued $restarts time(s) ($stops clean stops), then COMPLETED ($st)"
[ "${st% *}" = "COMPLETED 0:0" ] || tap_diag "$(tail -8 "$W/requeue.out" 2>/dev/null)"

# every run resumes at the iteration after the last one logged: 1..steps, each once
its=$(losses "$W/requeue.jsonl" | cut -d' ' -f1 | tr '\n' ' ')
[ "$its" = "$(seq 1 "$steps" | tr '\n' ' ')" ]
tap_ok $? "the requeued runs resume where the last one stopped: iterations 1..$steps each logged once ($(echo "$its" | wc -w) lines)"
[ "$its" = "$(seq 1 "$steps" | tr '\n' ' ')" ] || tap_diag "$(grep -v '^ iteration' "$W/requeue.out" | tail -12)"
st=$(job_state "$ref")
[ "$st" = "COMPLETED 0:0 0" ] && [ "$(losses "$W/ref.jsonl" | wc -l)" -eq "$steps" ] &&
    [ "$(losses "$W/requeue.jsonl")" = "$(losses "$W/ref.jsonl")" ]
tap_ok $? "the requeued job's $steps losses equal an uninterrupted run's, bit for bit in the log (reference: $st)"
losses "$W/requeue.jsonl" >"$W/a.loss"
losses "$W/ref.jsonl" >"$W/b.loss"
tap_diag "$(diff "$W/a.loss" "$W/b.loss" | head -4)"

tap_diag "whole test: $(($(date +%s) - t_test)) s"
tap_end
