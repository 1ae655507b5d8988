#!/bin/sh
# shellcheck disable=SC2086 # $one, $frozen and $plan_b are option lists, split on purpose
# Weights out and in, and sampling (docs/weights.md):
# - a model trained on the shipped corpus (examples/tiny.ini, 300 steps) is
#   exported to safetensors; an independent reader (Python standard library,
#   tests/safetensors_check.py) validates the file and finds every value equal
#   to the checkpoint's under the documented GPT-2 / Llama mapping, and the
#   models as Hugging Face defines them give the next-token logits that
#   mist-sample --show-logits prints;
# - export -> [init] from -> export under another plan (2 stages, tp 2 in one)
#   is bit-exact, for safetensors and for llm.c GPT-2 files (fp32 and bf16);
# - sampling: the same seed twice gives the same text, its bytes come from the
#   corpus's alphabet, an llm.c tokenizer file decodes like the byte tokenizer;
# - [log] sample_interval under 2 pipeline stages prints the text one rank
#   prints from the same weights and seed;
# - bad input (truncated or malformed headers, dtypes mist cannot convert,
#   shape mismatches, a tokenizer of the wrong format) gets a clear error.
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
B="$MIST_BUILDDIR"
check="python3 $MIST_SRCDIR/tests/safetensors_check.py"
tiny="$MIST_SRCDIR/examples/tiny.ini"
W=$(mktemp -d /tmp/mist_weights_XXXXXX)
trap 'rm -rf "$W"' EXIT
if ! command -v python3 >/dev/null; then tap_skip "python3 (the independent reader) is not installed"; tap_end; exit; fi
# one rank, global batch 4: the 300 steps take seconds
one="-o stage.0.dp=1 -o stage.0.b=4 -o train.global_batch=4 -o data.val_interval=0"
# weights unchanged by a step: lr 0 (AdamW moves w by lr x (update + wd w) = 0)
frozen="-o train.steps=1 -o train.lr=0 -o train.min_lr=0 -o data.val_interval=0 -o train.global_batch=4"
# 2 stages, G 2, the first split over tp 2: 3 ranks
plan_b="-o plan.stages=2 -o plan.G=2 -o stage.0.layers=1 -o stage.0.dp=1 -o stage.0.tp=2 -o stage.0.b=2
        -o stage.1.layers=1 -o stage.1.dp=1 -o stage.1.tp=1 -o stage.1.b=2"

"$B/mist-train" "$tiny" $one -o checkpoint.dir="$W/a" -o log.sample_interval=150 >"$W/a.out" 2>&1
tap_ok $? "examples/tiny.ini trains 300 steps on one rank"
n=$(grep -a -c -A1 "^mist: sample at iteration [13][50]0:$" "$W/a.out")
[ "$(grep -a -A1 "^mist: sample at iteration 300:$" "$W/a.out" | tail -n 1 | wc -c)" -gt 20 ] && [ "$n" -eq 2 ]
tap_ok $? "[log] sample_interval = 150 prints a sample at iterations 150 and 300 ($n)"
tap_diag "$(grep -a -A1 "^mist: sample at iteration 300:$" "$W/a.out")"
"$B/mist-export" "$W/a" --safetensors "$W/a.safetensors" >"$W/e.out" 2>&1 &&
    "$B/mist-export" "$W/a" --safetensors "$W/a16.safetensors" --dtype bf16 >>"$W/e.out" 2>&1
tap_ok $? "mist-export writes fp32 and bf16 safetensors"
ck="$W/a/step_00000300.ckpt"
$check check "$W/a.safetensors" "$ck" >"$W/c.out" 2>&1 && $check check "$W/a16.safetensors" "$ck" >>"$W/c.out" 2>&1
tap_ok $? "the independent reader: header, offsets, dtypes, shapes; every value equals the checkpoint's (fp32, bf16)"
tap_diag "$(cat "$W/c.out")"
"$B/mist-sample" "$W/a" --prompt "The cat " --show-logits 20 >"$W/a.logits" 2>&1 &&
    $check logits "$W/a.safetensors" gpt "The cat " 4 4 "$W/a.logits" >"$W/al.out" 2>&1
tap_ok $? "GPT-2 as Hugging Face defines it (Conv1D layouts), run on the exported file: $(cat "$W/al.out")"

mist_mpirun -np 3 "$B/mist-train" "$tiny" $frozen $plan_b -o init.from="$W/a.safetensors" -o checkpoint.dir="$W/b" \
    -o log.sample_interval=1 >"$W/b.out" 2>&1 && "$B/mist-export" "$W/b" --safetensors "$W/b.safetensors" >/dev/null 2>&1 &&
    cmp "$W/a.safetensors" "$W/b.safetensors"
tap_ok $? "export -> [init] from -> export under another plan (2 stages, tp 2) is bit-exact"
# the same weights (lr 0) and seed on one rank: the 2-stage run's sample, gathered
# from its stages to rank 0, is the same text
"$B/mist-train" "$tiny" $frozen -o stage.0.dp=1 -o stage.0.b=4 -o init.from="$W/a.safetensors" \
    -o log.sample_interval=1 >"$W/one.out" 2>&1
s2=$(grep -a -A1 "^mist: sample at iteration 1:$" "$W/b.out" | tail -n +2)
s1=$(grep -a -A1 "^mist: sample at iteration 1:$" "$W/one.out" | tail -n +2)
[ "$(printf '%s' "$s2" | wc -c)" -gt 20 ] && [ "$s2" = "$s1" ]
tap_ok $? "with 2 pipeline stages [log] sample_interval samples the gathered model: the one-rank run's text"
tap_diag "2 stages: $s2"
tap_diag "1 rank:   $s1"
for v in 3 5; do
    $check write-llmc "$W/a.safetensors" "$W/gpt2_v$v.bin" $v 4 &&
        "$B/mist-train" "$tiny" $frozen -o stage.0.dp=1 -o stage.0.b=4 -o init.from="$W/gpt2_v$v.bin" \
            -o checkpoint.dir="$W/llmc$v" >"$W/llmc$v.out" 2>&1
    d=$([ $v = 3 ] && echo fp32 || echo bf16)
    "$B/mist-export" "$W/llmc$v" --safetensors "$W/llmc$v.safetensors" --dtype $d >/dev/null 2>&1 &&
        cmp "$W/llmc$v.safetensors" "$W/$([ $v = 3 ] && echo a || echo a16).safetensors"
    tap_ok $? "[init] from an llm.c GPT-2 checkpoint (version $v, $d, padded vocabulary) loads bit-exactly"
done

# a shorter seq_len takes the first rows of the position table: the same weights as the 64-position run
"$B/mist-train" "$tiny" $frozen -o stage.0.dp=1 -o stage.0.b=4 -o model.seq_len=16 -o init.from="$W/a.safetensors" \
    -o checkpoint.dir="$W/s16" >"$W/s16.out" 2>&1 &&
    "$B/mist-export" "$W/s16" --safetensors "$W/s16.safetensors" >/dev/null 2>&1 &&
    python3 - "$W/a.safetensors" "$W/s16.safetensors" <<'EOF'
import json, struct, sys
def tensors(path):
    d = open(path, "rb").read()
    n = struct.unpack("<Q", d[:8])[0]
    h = json.loads(d[8:8 + n])
    return {k: (v["shape"], d[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__"}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
wpe = "transformer.wpe.weight"
ok = a.keys() == b.keys() and all(a[k] == b[k] for k in a if k != wpe)
ok = ok and b[wpe][0] == [16, a[wpe][0][1]] and a[wpe][1].startswith(b[wpe][1])
sys.exit(0 if ok else 1)
EOF
tap_ok $? "[init] from with seq_len 16 < the file's 64 positions takes the first 16 rows of wpe, every other tensor whole"

# Llama names: q/k/v and gate/up split from mist's fused rows, rotary as rotate_half
"$B/mist-train" "$MIST_SRCDIR/examples/tiny-llama.ini" $one -o train.steps=60 -o checkpoint.dir="$W/l" >"$W/l.out" 2>&1 &&
    "$B/mist-export" "$W/l" --safetensors "$W/l.safetensors" >/dev/null 2>&1 &&
    $check check "$W/l.safetensors" "$W/l/step_00000060.ckpt" >"$W/lc.out" 2>&1
tap_ok $? "Llama: exported, every value equals the checkpoint's ($(cat "$W/lc.out"))"
"$B/mist-sample" "$W/l" --prompt "The cat " --show-logits 20 >"$W/l.logits" 2>&1 &&
    $check logits "$W/l.safetensors" llama "The cat " 4 2 "$W/l.logits" >"$W/ll.out" 2>&1
tap_ok $? "Llama as Hugging Face defines it (GQA, rotate_half, SwiGLU), run on the exported file: $(cat "$W/ll.out")"
mist_mpirun -np 2 "$B/mist-train" "$MIST_SRCDIR/examples/tiny-llama.ini" $frozen -o stage.0.dp=1 -o stage.0.tp=2 \
    -o stage.0.b=4 -o init.from="$W/l.safetensors" -o checkpoint.dir="$W/l2" >"$W/l2.out" 2>&1 &&
    "$B/mist-export" "$W/l2" --safetensors "$W/l2.safetensors" >/dev/null 2>&1 && cmp "$W/l.safetensors" "$W/l2.safetensors"
tap_ok $? "Llama: export -> [init] from under tp 2 -> export is bit-exact"

# a GPT-family model GPT-2 cannot run (rotary, GQA, parallel block) keeps the names, with a note
"$B/mist-train" "$MIST_SRCDIR/examples/tiny-falcon.ini" $one -o train.steps=2 -o checkpoint.dir="$W/f" >"$W/f.out" 2>&1 &&
    "$B/mist-export" "$W/f" --safetensors "$W/f.safetensors" >"$W/fe.out" 2>&1 &&
    grep -q "note: this model has rotary positions, no biases, a parallel block, kv_heads 1 < heads 4" "$W/fe.out" &&
    $check check "$W/f.safetensors" "$W/f/step_00000002.ckpt" >/dev/null 2>&1
tap_ok $? "tiny-falcon exports with GPT-2 names and a note of what GPT-2 does not run"

# sampling
s1=$("$B/mist-sample" "$W/a" --prompt "The " --tokens 200 --seed 7 --top-k 40 2>&1)
s2=$("$B/mist-sample" "$W/a" --prompt "The " --tokens 200 --seed 7 --top-k 40 2>&1)
s3=$("$B/mist-sample" "$W/a" --prompt "The " --tokens 200 --seed 8 --top-k 40 2>&1)
[ -n "$s1" ] && [ "$s1" = "$s2" ] && [ "$s1" != "$s3" ]
tap_ok $? "the same seed twice gives the same 200 bytes, another seed other bytes"
short=$("$B/mist-sample" "$W/a" --prompt "The " --tokens 20 --seed 7 --top-k 40 2>&1)
case "$s1" in "$short"*) [ ${#short} -eq 24 ] ;; *) false ;; esac
tap_ok $? "a 20-token generation (forwards over 24 positions, not seq_len 64) is the start of the 200-token one"
printf '%s' "$s1" >"$W/s1.txt"
python3 -c '
import sys
alphabet = set(open(sys.argv[1], "rb").read()) | {10}
text = open(sys.argv[2], "rb").read()
bad = sorted(set(text) - alphabet)
print("%d bytes sampled, %d distinct, outside the corpus alphabet: %s" % (len(text), len(set(text)), bad))
sys.exit(1 if bad or len(text) < 200 else 0)' "$MIST_SRCDIR/examples/data/corpus.txt" "$W/s1.txt" >"$W/alpha.out" 2>&1
tap_ok $? "the trained model samples bytes of the corpus's alphabet ($(cat "$W/alpha.out"))"
tap_diag "sample: $(echo "$s1" | head -c 160 | tr '\n' ' ')"
# an llm.c tokenizer file whose 256 tokens are the bytes, end-of-text = newline (the byte tokenizer's start)
python3 -c '
import struct, sys
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256I", 20240328, 2, 256, 10, *([0] * 252)))
    for b in range(256): f.write(bytes([1, b]))' "$W/tok.bin"
t1=$("$B/mist-sample" "$W/a" --tokens 50 --seed 3 2>&1)
t2=$("$B/mist-sample" "$W/a" --tokens 50 --seed 3 --tokenizer "$W/tok.bin" 2>&1)
[ -n "$t1" ] && [ "$t1" = "$t2" ]
tap_ok $? "an llm.c tokenizer file (magic 20240328, version 2) decodes as the byte tokenizer"

# errors: each names the file and what is wrong
err() {  # err NAME PATTERN CMD...: exits 1, says PATTERN, no crash
    name=$1; pat=$2; shift 2
    "$@" >"$W/err.out" 2>&1
    rc=$?
    [ $rc -eq 1 ] && grep -q "$pat" "$W/err.out"
    tap_ok $? "$name (exit $rc): $(grep -m1 "$pat" "$W/err.out" | cut -c1-220)"
}
init() { "$B/mist-train" "$tiny" $frozen -o stage.0.dp=1 -o stage.0.b=4 -o init.from="$1"; }
head -c 5 "$W/a.safetensors" >"$W/short.safetensors"
err "truncated before the header length" "fewer than the 8-byte header length" init "$W/short.safetensors"
head -c 900 "$W/a.safetensors" >"$W/cut.safetensors"
err "truncated inside the header" "more than the file holds" init "$W/cut.safetensors"
python3 - "$W" <<'EOF'
import json, struct, sys
w = sys.argv[1]
data = open(w + "/a.safetensors", "rb").read()
n = struct.unpack("<Q", data[:8])[0]
hdr = data[8:8 + n]
open(w + "/bad_json.safetensors", "wb").write(data[:8] + hdr.replace(b'"shape"', b'"shape" [', 1) + data[8 + n:])
h = json.loads(hdr)
h["transformer.wte.weight"]["dtype"] = "I32"
h2 = json.dumps(h).encode()
h2 += b" " * (len(hdr) - len(h2))
open(w + "/i32.safetensors", "wb").write(struct.pack("<Q", len(h2)) + h2 + data[8 + n:])
EOF
err "malformed JSON header" "JSON header is malformed at byte" init "$W/bad_json.safetensors"
err "a dtype mist cannot convert" "dtype I32, which mist cannot convert" init "$W/i32.safetensors"
err "shape mismatches named key by key" "transformer.h.0.attn.c_attn.weight' has shape \[64, 192\], the model needs \[32, 96\]" \
    "$B/mist-train" "$tiny" $frozen -o stage.0.dp=1 -o stage.0.b=4 -o model.hidden=32 -o init.from="$W/a.safetensors"
err "a tokenizer file of the wrong format" "is not an llm.c GPT-2 tokenizer file: its magic number" \
    "$B/mist-sample" "$W/a" --tokenizer "$W/a.safetensors"
err "a prompt with a GPT-2 tokenizer file" "needs the byte tokenizer" "$B/mist-sample" "$W/a" --prompt x --tokenizer "$W/tok.bin"
"$B/mist-train" "$tiny" --dry-run -o init.from="$W/none.safetensors" >"$W/err.out" 2>&1
[ $? -eq 2 ] && grep -q "init.from=.*\[init\] from = .*none.safetensors: No such file" "$W/err.out"
tap_ok $? "a missing [init] from file is a configuration error naming the key (exit 2): $(tail -n 1 "$W/err.out" | cut -c1-160)"
"$B/mist-sample" "$W/a" --top-k -1 >"$W/err.out" 2>&1
[ $? -eq 2 ] && grep -q "allowed: a number 0" "$W/err.out"
tap_ok $? "a bad option value is a usage error naming what is allowed"

# interleaved 1F1B ([plan] virtual = 2: 4 chunks of one block on 2 ranks, ZeRO 0-3 per chunk): a
# 4-block model exported at one rank loads into every chunk and exports back bit-exactly (lr 0)
"$B/mist-train" "$tiny" -o model.layers=4 -o stage.0.layers=4 $one -o train.steps=5 -o checkpoint.dir="$W/v1" \
    >"$W/v1.out" 2>&1 && "$B/mist-export" "$W/v1" --safetensors "$W/v1.safetensors" >/dev/null 2>&1
rc=$?
chunks="-o model.layers=4 -o plan.stages=4 -o plan.virtual=2 -o plan.G=2"
for c in 0 1 2 3; do chunks="$chunks -o stage.$c.layers=1 -o stage.$c.dp=1 -o stage.$c.b=2 -o stage.$c.zero=$c"; done
# shellcheck disable=SC2086
[ $rc -eq 0 ] && mist_mpirun -np 2 "$B/mist-train" "$tiny" $frozen $chunks -o init.from="$W/v1.safetensors" \
    -o checkpoint.dir="$W/v2" >"$W/v2.out" 2>&1 && "$B/mist-export" "$W/v2" --safetensors "$W/v2.safetensors" \
    >/dev/null 2>&1 && cmp "$W/v1.safetensors" "$W/v2.safetensors"
tap_ok $? "export -> [init] from -> export under virtual = 2 (4 chunks on 2 ranks, ZeRO 0-3) is bit-exact"
tap_end
