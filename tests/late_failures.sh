#!/bin/sh
# Failures that used to show only after training had started (and lost the
# work up to them) are found at start, before iteration 1, on every rank:
# a checkpoint directory that cannot be written, a token outside the
# vocabulary late in the data; and a log line that cannot be written (a full
# disk) ends the run with an error instead of being dropped in silence.
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
TRAIN="$MIST_BUILDDIR/mist-train"
TOK="$MIST_BUILDDIR/mist-tokenize"
GPT="$MIST_SRCDIR/examples/tiny.ini"
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-late-test.XXXXXX")
trap 'rm -rf "$W"' EXIT
COMMON="-o train.steps=3 -o train.global_batch=8 -o log.interval=1 -o data.val_interval=0 -o stage.0.dp=2
 -o stage.0.b=4 -o cluster.comm_timeout=20"

# run NAME ARGS...: 2 ranks; sets rc and dt (seconds)
run() {
    name=$1; shift
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    mist_mpirun --timeout 60 -np 2 "$TRAIN" "$GPT" $COMMON "$@" >"$W/$name.out" 2>&1
    rc=$?
    dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}

# 1. the checkpoint directory is a file
: >"$W/not-a-dir"
run ckfile -o checkpoint.dir="$W/not-a-dir"
tap_diag "checkpoint.dir is a file: rc $rc after $dt s: $(grep -m1 'checkpoint' "$W/ckfile.out")"
[ $rc -ne 0 ] && grep -q "\[checkpoint\] dir: '$W/not-a-dir' exists and is not a directory" "$W/ckfile.out" &&
    ! grep -q "iteration  *1/" "$W/ckfile.out" && num_ok 't < 20' t="$dt"
tap_ok $? "a checkpoint dir that is a file is an error at start, before iteration 1 (rc $rc, $dt s)"

# 2. a directory where files cannot be created (skipped as root: root writes anywhere)
mkdir "$W/ro" && chmod 555 "$W/ro"
if [ "$(id -u)" = 0 ]; then
    tap_skip "running as root, who can create files in a read-only (mode 555) directory"
else
    run ckro -o checkpoint.dir="$W/ro/ck"
    [ $rc -ne 0 ] && grep -q "\[checkpoint\] dir: " "$W/ckro.out" && ! grep -q "iteration  *1/" "$W/ckro.out"
    tap_ok $? "a checkpoint dir that cannot be created is an error at start (rc $rc)"
fi

# 3. a token outside the vocabulary at the end of the data (vocab 100: 'a' = 97 fits, 'z' = 122 does
# not); three steps read only the first 3 x 8 x 65 tokens, so only a scan at start can see it
awk 'BEGIN { for (i = 0; i < 200; i++) printf "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n"; print "z" }' \
    | tr '\n' 'a' >"$W/corpus.txt"
"$TOK" --val-fraction 0 "$W/corpus.txt" "$W/late" >/dev/null 2>&1
run badtok -o model.vocab=100 -o data.train="$W/late_train.bin"
tap_diag "token 122 at the end of the data, vocab 100: rc $rc after $dt s: $(grep -m1 'vocabulary' "$W/badtok.out")"
[ $rc -ne 0 ] && grep -q "late_train.bin': token 19400 (byte 39824) is 122, but the model vocabulary is 100" \
    "$W/badtok.out" && ! grep -q "iteration  *1/" "$W/badtok.out"
tap_ok $? "a token >= vocab late in the data is an error at start naming the shard, the token's index and byte (rc $rc)"
run goodtok -o model.vocab=123 -o data.train="$W/late_train.bin" -o train.steps=1
[ $rc -eq 0 ]
tap_ok $? "the same data with vocab 123 trains (rc $rc)"

# 4. a full disk under the JSONL log (/dev/full fails every write with ENOSPC)
if [ -w /dev/full ]; then
    run full -o log.jsonl=/dev/full
    tap_diag "log.jsonl = /dev/full: rc $rc: $(grep -m1 '/dev/full' "$W/full.out")"
    [ $rc -ne 0 ] && grep -q "cannot write iteration 1 to the log file '/dev/full' (\[log\] jsonl): No space left on device" \
        "$W/full.out"
    tap_ok $? "a JSONL line lost to a full disk ends the run non-zero with the file and the cause (rc $rc)"
else
    tap_skip "/dev/full is not writable here"
fi

# 5. a damaged `latest` (binary bytes) is shown as a short escaped excerpt, never echoed raw
mkdir "$W/ckbin" && printf 'step_\001\377\033[2J' >"$W/ckbin/latest"
run ckbin -o checkpoint.dir="$W/ckbin" -o checkpoint.resume=1
[ $rc -ne 0 ] && grep -q "latest' should name a checkpoint like step_00000100.ckpt but holds 'step_\\\\x01\\\\xff\\\\x1b\[2J'" "$W/ckbin.out" &&
    ! grep -q "$(printf '\033')" "$W/ckbin.out"
tap_ok $? "a binary 'latest' is named with an escaped excerpt of its content, no raw control bytes (rc $rc)"

# 6. resuming at or past [train] steps says there is nothing to train
"$TRAIN" "$GPT" -o train.steps=2 -o train.global_batch=4 -o stage.0.dp=1 -o data.val_interval=0 \
    -o checkpoint.dir="$W/ckdone" >/dev/null 2>&1 </dev/null
"$TRAIN" "$GPT" -o train.steps=2 -o train.global_batch=4 -o stage.0.dp=1 -o data.val_interval=0 \
    -o checkpoint.dir="$W/ckdone" -o checkpoint.resume=1 >"$W/done.out" 2>&1 </dev/null
rc=$?
[ $rc -eq 0 ] && grep -q "at or past \[train\] steps = 2: nothing to train" "$W/done.out"
tap_ok $? "resuming a finished run exits 0 and says there was nothing to train (rc $rc)"

# 7. an error every rank hits (the same missing file) is printed once, not once per rank
run nodata -o data.train="$W/missing.bin"
n=$(grep -c "cannot open token shard" "$W/nodata.out")
[ $rc -ne 0 ] && [ "$n" -eq 1 ] && grep -q "^mist-train: \[data\] train: cannot open token shard '$W/missing.bin'" "$W/nodata.out"
tap_ok $? "a data error on both ranks is printed once (rc $rc, printed $n times)"

# 8. the CPU backend's arenas are host memory: 2 ranks of this plan do not fit in 4 MiB available
export MIST_FAULT_HOST_MEMORY_AVAILABLE=4194304
run oom
unset MIST_FAULT_HOST_MEMORY_AVAILABLE
tap_diag "2 ranks in 4 MiB: rc $rc: $(grep -m1 'host memory per rank' "$W/oom.out")"
[ $rc -ne 0 ] && [ "$(grep -c 'host memory per rank' "$W/oom.out")" -eq 1 ] &&
    grep -q "x 2 rank(s) on this node = .* but the node has 4.00 MiB available" "$W/oom.out" && ! grep -q "iteration  *1/" "$W/oom.out"
tap_ok $? "a plan whose ranks need more host memory than the node has is refused at start, once (rc $rc)"
tap_end
