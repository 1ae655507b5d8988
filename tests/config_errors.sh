#!/bin/sh
# Every kind of configuration error: mist-train --dry-run (one process, no
# launcher) must exit 2 and print one message naming the place (file:line or
# the -o override), the key, the bad value, what is allowed, and a hint.
. "$MIST_SRCDIR/tests/lib.sh"
TRAIN="$MIST_BUILDDIR/mist-train"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A valid one-rank base; each case edits it.
base() {
    cat <<'EOF'
[model]
family = gpt
layers = 4
hidden = 64
heads = 4
vocab = 256
seq_len = 32

[train]
global_batch = 8
steps = 3
precision = fp32

[plan]
mode = fixed
G = 2
stages = 1

[stage.0]
layers = 4
dp = 1
tp = 1
b = 4
EOF
}

DRY=--dry-run  # every case checks with --dry-run unless it needs a real start
# expect NAME FILE "pattern1" "pattern2" ... [-- override...]
expect() {
    name=$1; file=$2; shift 2
    pats=""
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do pats="$pats
$1"; shift; done
    [ "${1:-}" = "--" ] && shift
    out=$("$TRAIN" $DRY "$@" "$file" 2>&1 </dev/null); rc=$?
    good=0
    [ $rc -eq 2 ] || good=1
    printf '%s\n' "$pats" | while IFS= read -r p; do
        [ -z "$p" ] && continue
        printf '%s' "$out" | grep -qF -- "$p" || { echo "missing: $p"; exit 1; }
    done || good=1
    [ "$(printf '%s\n' "$out" | grep -c 'mist-train: ')" -eq 1 ] || good=1
    tap_ok $good "$name (exit $rc)"
    [ $good -eq 0 ] || tap_diag "$out"
}

# the config file must pass first, or every case below proves nothing
base > "$tmp/ok.ini"
"$TRAIN" --dry-run "$tmp/ok.ini" >/dev/null 2>&1 </dev/null
tap_ok $? "the base configuration is valid"

base | sed 's/^\[train\]/[trian]/' > "$tmp/f.ini"
expect "unknown section, with a suggestion" "$tmp/f.ini" "f.ini:9:" "unknown section [trian]" "did you mean 'train'" "allowed: [model]" "Hint:"

base | sed 's/^heads = 4/haeds = 4/' > "$tmp/f.ini"
expect "unknown key, with a suggestion" "$tmp/f.ini" "f.ini:5:" "unknown key 'haeds'" "did you mean 'heads'" "allowed in [model]" "Hint:"

base | sed 's/^heads = 4/zzzzzzzz = 4/' > "$tmp/f.ini"
out=$("$TRAIN" --dry-run "$tmp/f.ini" 2>&1 </dev/null)
! printf '%s' "$out" | grep -q 'did you mean'
tap_ok $? "a key far from every name gets no suggestion"

base | sed 's/^layers = 4/layers = four/' > "$tmp/f.ini"
expect "wrong type: integer" "$tmp/f.ini" "f.ini:3:" "[model] layers = four" "not an integer" "allowed:" "Hint:"

base | sed 's/^steps = 3/steps = 3\nlr = fast/' > "$tmp/f.ini"
expect "wrong type: number" "$tmp/f.ini" "f.ini:12:" "[train] lr = fast" "not a number" "Hint:"

base | sed 's/^steps = 3/steps = 3\nlr = 1e-400/' > "$tmp/f.ini"
expect "a number below a double's range is named as such, not 'not a number'" "$tmp/f.ini" "f.ini:12:" \
    "[train] lr = 1e-400: a number too small to represent" "allowed: [0, 10]" "Hint:"

expect "a b hint above b's maximum proposes dp or G instead" "$tmp/ok.ini" "global_batch = 1073741824" \
    "b would be 536870912, above its maximum 1048576; raise dp or G" -- -o train.global_batch=1073741824

base | tr '\n' '\r' > "$tmp/f.ini"
expect "CR-only line endings are named, not read as one long line" "$tmp/f.ini" "f.ini:1:" "carriage returns (CR)" \
    "allowed: LF or CRLF" "Hint:"

# the wrong file as a hardware profile: a short escaped excerpt, never the file's raw content
{ printf 'root:x:0:0:root:/root:/bin/bash\001\002\003'; head -c 100 /dev/zero | tr '\0' 'x'; printf '\n'; } > "$tmp/passwd"
expect "a hardware file of the wrong kind is shown as a short escaped excerpt" "$tmp/ok.ini" "unknown section" \
    'root = x:0:0:root:/root:/bin/bash\x01\x02\x03xx' "starts with a [profile] section" -- -o cluster.hardware="$tmp/passwd"
out=$("$TRAIN" --dry-run -o cluster.hardware="$tmp/passwd" "$tmp/ok.ini" 2>&1 </dev/null)
! printf '%s' "$out" | grep -q 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'
tap_ok $? "the excerpt stops after 40 characters of the file"

base | sed 's/^family = gpt/family = gpt\nbias = maybe/' > "$tmp/f.ini"
expect "wrong type: boolean" "$tmp/f.ini" "f.ini:3:" "[model] bias = maybe" "true|false" "Hint:"

base | sed 's/^precision = fp32/precision = fp8/' > "$tmp/f.ini"
expect "enum value not allowed" "$tmp/f.ini" "f.ini:12:" "[train] precision = fp8" "allowed: bf16|fp16|fp32" "Hint:"

base | sed 's/^layers = 4/layers = 0/' > "$tmp/f.ini"
expect "out of range" "$tmp/f.ini" "f.ini:3:" "[model] layers = 0" "out of range" "allowed: 1..4096" "Hint:"

expect "override with a bad value names the override" "$tmp/ok.ini" "-o train.steps=-1 (command line)" "[train] steps = -1" "out of range" -- -o train.steps=-1

expect "override of an unknown key" "$tmp/ok.ini" "-o model.hiden=64 (command line)" "did you mean 'hidden'" -- -o model.hiden=64

base | sed 's/^heads = 4/heads = 6/' > "$tmp/f.ini"
expect "heads not dividing hidden" "$tmp/f.ini" "f.ini:5:" "heads = 6" "must divide hidden (64)" "Hint:"

base | sed 's/^heads = 4/heads = 4\nkv_heads = 3/' > "$tmp/f.ini"
expect "kv_heads not dividing heads" "$tmp/f.ini" "f.ini:6:" "kv_heads = 3" "must divide heads (4)" "Hint:"

base | sed 's/^tp = 1/tp = 8/' > "$tmp/f.ini"
expect "heads not divisible by tp" "$tmp/f.ini" "f.ini:22:" "[stage.0] tp = 8" "must divide heads (4)" "Hint:"

base | sed 's/^family = gpt/family = gpt\nffn_hidden = 250/; s/^tp = 1/tp = 4/; s/^b = 4/b = 4/' > "$tmp/f.ini"
expect "ffn_hidden not divisible by tp" "$tmp/f.ini" "[stage.0] tp = 4" "must divide ffn_hidden (250)" "Hint:" -- -o stage.0.dp=1

base | sed 's/^heads = 4/heads = 4\nkv_heads = 2/' > "$tmp/f.ini"
sed -i 's/^tp = 1/tp = 4/' "$tmp/f.ini"
expect "kv_heads not divisible by tp" "$tmp/f.ini" "f.ini:23:" "[stage.0] tp = 4" "must divide kv_heads (2)" "Hint:"

base | sed 's/^b = 4/b = 4\nsp = true/' > "$tmp/f.ini"
expect "sequence parallelism at tp = 1" "$tmp/f.ini" "f.ini:24:" "[stage.0] sp = 1 with tp = 1" "allowed: sp = 1 only with tp >= 2" "Hint:"

base | sed 's/^seq_len = 32/seq_len = 31/; s/^G = 2/G = 8/; s/^tp = 1/tp = 2/; s/^b = 4/b = 1\nsp = true/' > "$tmp/f.ini"
expect "sequence parallelism with tp not dividing b*seq_len" "$tmp/f.ini" "f.ini:24:" "[stage.0] sp = 1: b * seq_len = 1 * 31" "allowed: tp dividing b * seq_len" "Hint:"

base | sed 's/^b = 4/b = 4\nlean = true\nao = 0.5/' > "$tmp/f.ini"
expect "lean layers with activation offload" "$tmp/f.ini" "f.ini:24:" "[stage.0] lean = 1 with ao = 0.5" "allowed: lean = 1 only with ao = 0" "Hint:"

base | sed '/^seq_len = 32/d' > "$tmp/f.ini"
expect "a required [model] key missing" "$tmp/f.ini" "f.ini:1:" "[model] seq_len is missing" "allowed:" "Hint:"

base | sed '/^\[stage.0\]/,$ {/^layers = 4/d}' > "$tmp/f.ini"
expect "a stage without layers" "$tmp/f.ini" "f.ini:19:" "[stage.0] layers is missing" "allowed:" "Hint:"

expect "an unknown hardware preset" "$tmp/ok.ini" "-o cluster.hardware=a100 (command line)" "hardware = a100" "did you mean 'gcp-a100-40g'" "allowed: gcp-l4|gcp-a100-40g" "Hint:" -- -o cluster.hardware=a100

expect "a directory instead of a file" "$tmp" "cannot read the configuration" "directory" "Hint:"

expect "an override of a stage beyond stages" "$tmp/ok.ini" "-o stage.3.b=2 (command line)" "[stage.3] is beyond [plan] stages = 1" "Hint:" -- -o stage.3.b=2

base | sed 's/^hidden = 64/hidden = 64 # width/' > "$tmp/f.ini"
expect "a '#' comment after a value" "$tmp/f.ini" "f.ini:4:" "[model] hidden = 64 # width" "inline comments start with ';'" "Hint:"

{ printf 'seq_len = 32\n'; base; } > "$tmp/f.ini"
expect "a key before any section" "$tmp/f.ini" "f.ini:1:" "seq_len = 32 comes before any [section]" "belongs in [model]"

expect "an override without a section" "$tmp/ok.ini" "steps=3" "SECTION.KEY=VALUE" -- -o steps=3

base | sed 's/^b = 4/b = 3/' > "$tmp/f.ini"
expect "b * dp * G != global_batch" "$tmp/f.ini" "f.ini:23:" "b * dp * G = 3 * 1 * 2 = 6" "global_batch = 8" "Hint: set b = 4"

base | sed '/^\[stage.0\]/,$ s/^layers = 4/layers = 3/' > "$tmp/f.ini"
expect "stage layers not summing to the model's" "$tmp/f.ini" "f.ini:20:" "add up to 3" "[model] layers = 4" "Hint:"

# (a one-process --dry-run previews any plan, so this one starts for real)
DRY=
expect "ranks in the plan != world size" "$tmp/ok.ini" "plan needs 4 ranks" "but the job has 1" "mpirun -np 4" -- -o stage.0.dp=4 -o stage.0.b=1
DRY=--dry-run

base | sed 's/^b = 4/b = 4\nao = 1.5/' > "$tmp/f.ini"
expect "offload ratio above 1" "$tmp/f.ini" "f.ini:24:" "[stage.0] ao = 1.5" "allowed: [0, 1]" "Hint:"

expect "offload ratio below 0" "$tmp/ok.ini" "[stage.0] wo = -0.25" "allowed: [0, 1]" -- -o stage.0.wo=-0.25

base | sed 's/^b = 4/b = 4\nckpt = 5/' > "$tmp/f.ini"
expect "ckpt above the stage's layers" "$tmp/f.ini" "f.ini:24:" "ckpt = 5" "allowed: 0..4" "Hint:"

base | sed 's/^stages = 1/stages = 2/' > "$tmp/f.ini"
expect "a stage section missing" "$tmp/f.ini" "f.ini:17:" "[stage.1] is missing" "Hint:"

{ base; printf '\n[stage.1]\nlayers = 1\n'; } > "$tmp/f.ini"
expect "a stage section beyond stages" "$tmp/f.ini" "f.ini:25:" "[stage.1] is beyond [plan] stages = 1" "Hint:"

# [plan] virtual = 2 (interleaved 1F1B): stages are 4 chunks of one block on 2 pipeline ranks
chunks() {
    base | sed 's/^stages = 1/stages = 4\nvirtual = 2/; /^\[stage.0\]/,$ s/^layers = 4/layers = 1/'
    for c in 1 2 3; do printf '\n[stage.%d]\nlayers = 1\ndp = 1\ntp = 1\nb = 4\n' "$c"; done
}
chunks > "$tmp/v.ini"
expect "virtual: stages not a multiple of it" "$tmp/v.ini" "-o plan.virtual=3" "[plan] virtual = 3: stages = 4 is not a multiple of it" "Hint:" -- -o plan.virtual=3
expect "virtual: one pipeline rank" "$tmp/v.ini" "-o plan.virtual=4" "one pipeline rank" "allowed: virtual > 1 only with stages >= 2 * virtual" "Hint: set virtual = 1" -- -o plan.virtual=4
expect "virtual: chunks of one rank with different dp" "$tmp/v.ini" "-o stage.2.dp=2" "[stage.2] dp = 2 but [stage.0] dp = 1" "both chunks run on pipeline rank 0" "Hint: set [stage.2] dp = 1" -- -o stage.2.dp=2 -o stage.2.b=2
chunks | sed '/^\[stage.3\]/,$ s/^tp = 1/tp = 2/' > "$tmp/f.ini"
expect "virtual: chunks of one rank with different tp" "$tmp/f.ini" "f.ini:41:" "[stage.3] tp = 2 but [stage.1] tp = 1" "allowed: the same dp, tp and b" "Hint: set [stage.3] tp = 1"
expect "virtual: G not a multiple of the pipeline ranks" "$tmp/v.ini" "-o plan.G=1" "[plan] G = 1: the interleaved schedule (virtual = 2) needs G a multiple of the 2 pipeline ranks" "Hint:" -- -o plan.G=1 -o stage.0.b=8 -o stage.1.b=8 -o stage.2.b=8 -o stage.3.b=8
out=$("$TRAIN" --dry-run "$tmp/v.ini" 2>&1 </dev/null); rc=$?
[ $rc -eq 0 ] && printf '%s' "$out" | grep -q "interleaved: virtual 2, the stages are chunks on 2 pipeline ranks" &&
    printf '%s' "$out" | grep -q "under mpirun -np 2"
tap_ok $? "virtual: a valid interleaved plan passes (2 ranks for 4 chunks; exit $rc)"

base | sed 's/^steps = 3/steps = 3\nsteps = 4/' > "$tmp/f.ini"
expect "a key set twice" "$tmp/f.ini" "f.ini:12:" "set twice (first at line 11)" "Hint:"

base | sed 's/^\[model\]/[model/' > "$tmp/f.ini"
expect "a line that does not parse" "$tmp/f.ini" "f.ini:1:" "cannot parse this line" "Hint:"

{ base; printf '[data]\ntrain = %0240d\n' 0; } > "$tmp/f.ini"
expect "a line longer than the parser's limit" "$tmp/f.ini" "f.ini:25:" "line longer than" "Hint:"

expect "a missing file" "$tmp/none.ini" "none.ini" "cannot open the configuration" "Hint:"

expect "min_lr above lr" "$tmp/ok.ini" "min_lr = 0.5" "larger than lr" -- -o train.lr=0.1 -o train.min_lr=0.5

expect "a bad size unit" "$tmp/ok.ini" "[cluster] device_memory = 80 parsecs" "not a size" -- -o "cluster.device_memory=80 parsecs"

base | sed 's/^mode = fixed/mode = fixd/' > "$tmp/f.ini"
expect "plan mode misspelt" "$tmp/f.ini" "f.ini:15:" "mode = fixd" "did you mean 'fixed'" "allowed: auto|fixed"

# Under mpirun -np 4: exit 2 within 10 s, the message once.
base | sed 's/^heads = 4/heads = 6/' > "$tmp/f.ini"
start=$(date +%s)
out=$(timeout 30 sh -c "mpirun --oversubscribe -np 4 '$TRAIN' '$tmp/f.ini' </dev/null" 2>&1); rc=$?
took=$(( $(date +%s) - start ))
n=$(printf '%s\n' "$out" | grep -c 'must divide hidden')
[ $rc -eq 2 ] && [ "$n" -eq 1 ] && [ $took -lt 10 ]
tap_ok $? "under mpirun -np 4 a config error exits 2 in ${took}s, printed $n time(s)"
# PaRO's sharding (docs/paro.md): zero is shard's shorthand; both in a stage must agree
base | sed 's/^b = 4/b = 4\nshard = NIG\nzero = 2/' > "$tmp/f.ini"
expect "zero and shard naming different sharding" "$tmp/f.ini" "f.ini:25:" "[stage.0] zero = 2 and shard = NIG" \
    "the other key at line 24" "allowed: one of the two" "1 = NNG, 2 = NGG" "Hint: keep shard = NIG"
base | sed 's/^b = 4/b = 4\nzero = 2\nshard = NGG/' > "$tmp/f.ini"
"$TRAIN" --dry-run "$tmp/f.ini" >/dev/null 2>&1 </dev/null
tap_ok $? "zero = 2 with shard = NGG (the same point) is accepted"
base | sed 's/^b = 4/b = 4\nshard = NGI/' > "$tmp/f.ini"
expect "a shard that is not an ordering W <= G <= O" "$tmp/f.ini" "f.ini:24:" "[stage.0] shard = NGI" \
    "allowed: NNN" "IGG" "Hint:"
expect "shard_group not dividing dp" "$tmp/ok.ini" "-o stage.0.shard_group=3" "[stage.0] shard_group = 3" \
    "must divide dp (4)" "allowed: 0" "Hint:" -- -o stage.0.dp=4 -o stage.0.b=1 -o stage.0.shard_group=3

tap_end
