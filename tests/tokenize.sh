#!/bin/sh
# mist-tokenize: re-tokenizing the shipped corpus reproduces the committed
# shards byte for byte, the shards follow the llm.c format (checked here with
# od, independently of the C code), and bad inputs give clear errors.
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
tok="$MIST_BUILDDIR/mist-tokenize"
data="$MIST_SRCDIR/examples/data"
work=$(mktemp -d /tmp/mist_tokenize_XXXXXX)
trap 'rm -rf "$work"' EXIT

"$tok" --help >"$work/help" 2>&1
tap_ok $? "--help exits 0"
grep -q "usage: mist-tokenize" "$work/help" && grep -q -- "--val-fraction" "$work/help"
tap_ok $? "--help shows the usage and --val-fraction"

"$tok" "$data/corpus.txt" "$work/tiny" >"$work/out" 2>&1
tap_ok $? "tokenizing examples/data/corpus.txt succeeds"
cmp "$work/tiny_train.bin" "$data/tiny_train.bin" && cmp "$work/tiny_val.bin" "$data/tiny_val.bin"
tap_ok $? "the result equals the committed tiny_train.bin and tiny_val.bin byte for byte"

# the format, read with od: int32 magic 20240520, version 1, token count; uint16 tokens = the bytes of the text
header=$(od -An -v -t d4 -N 12 "$data/tiny_train.bin" | tr -s ' ' | sed 's/^ //')
train_bytes=$(wc -c <"$data/tiny_train.bin")
val_bytes=$(wc -c <"$data/tiny_val.bin")
text_bytes=$(wc -c <"$data/corpus.txt")
ntrain=$(echo "$header" | cut -d' ' -f3)
[ "$(echo "$header" | cut -d' ' -f1-2)" = "20240520 1" ] && [ $((1024 + 2 * ntrain)) -eq "$train_bytes" ]
tap_ok $? "train shard header: magic 20240520, version 1, $ntrain tokens = (file size - 1024) / 2"
[ $((train_bytes - 1024 + val_bytes - 1024)) -eq $((2 * text_bytes)) ]
tap_ok $? "train + val hold one token per byte of the text ($text_bytes)"
first_tokens=$(tail -c +1025 "$data/tiny_train.bin" | od -An -v -t u2 -N 64 | tr -s ' \n' ' ')
first_bytes=$(od -An -v -t u1 -N 32 "$data/corpus.txt" | tr -s ' \n' ' ')
[ "$first_tokens" = "$first_bytes" ]
tap_ok $? "the first 32 tokens are the first 32 bytes of the text"
val_first=$(tail -c +1025 "$data/tiny_val.bin" | od -An -v -t u2 -N 64 | tr -s ' \n' ' ')
text_at=$(tail -c +$((ntrain + 1)) "$data/corpus.txt" | od -An -v -t u1 -N 32 | tr -s ' \n' ' ')
[ "$val_first" = "$text_at" ] && [ "$(tail -c +$((ntrain - 1)) "$data/corpus.txt" | head -c 2 | od -An -t u1 | tr -d ' ')" = "1010" ]
tap_ok $? "validation starts right after a blank line, where training ends"

# bad inputs: exit status 2 and a message naming the problem
expect_error() {  # expect_error DESCRIPTION PATTERN ARGS...
    desc=$1 pattern=$2
    shift 2
    "$tok" "$@" >"$work/err" 2>&1
    rc=$?
    [ $rc -eq 2 ] && grep -q "$pattern" "$work/err"
    tap_ok $? "$desc"
    [ $rc -eq 2 ] && grep -q "$pattern" "$work/err" || tap_diag "exit $rc: $(cat "$work/err")"
}
expect_error "a missing input file is named" "cannot open input '$work/nope.txt'" "$work/nope.txt" "$work/x"
: >"$work/empty.txt"
expect_error "an empty input is refused" "empty" "$work/empty.txt" "$work/x"
expect_error "--val-fraction 1.5 is out of range" "must be a number in \[0, 1)" --val-fraction 1.5 "$data/corpus.txt" "$work/x"
expect_error "--val-fraction without a value" "needs a value" "$data/corpus.txt" "$work/x" --val-fraction
expect_error "an unknown option is named" "unknown option '--frobnicate'" --frobnicate "$data/corpus.txt" "$work/x"
expect_error "a missing OUT_PREFIX prints the usage" "usage: mist-tokenize" "$data/corpus.txt"
expect_error "a directory as input is refused" "not a regular file" "$work" "$work/x"
: >"$work/afile"
"$tok" "$data/corpus.txt" "$work/afile/sub/x" >"$work/err" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "afile" "$work/err" && ! ls "$work" | grep -q "\.tmp$"
tap_ok $? "an output path through a file fails naming it, leaving no .tmp file"

# --val-fraction 0 writes only the training shard, with every byte
"$tok" --val-fraction 0 "$data/corpus.txt" "$work/all" >/dev/null 2>&1 &&
    [ "$(wc -c <"$work/all_train.bin")" -eq $((1024 + 2 * text_bytes)) ] && [ ! -e "$work/all_val.bin" ]
tap_ok $? "--val-fraction 0: one training shard holding the whole text, no validation shard"

# --shard-tokens splits a part into numbered shards whose bodies, concatenated, are the single shard's body
"$tok" --shard-tokens 100000 "$data/corpus.txt" "$work/split" >/dev/null 2>&1
rc=$?
for f in "$work"/split_train_*.bin; do tail -c +1025 "$f"; done >"$work/split_body"
tail -c +1025 "$data/tiny_train.bin" >"$work/one_body"
[ $rc -eq 0 ] && [ "$(ls "$work"/split_train_*.bin | wc -l)" -eq 3 ] && [ -e "$work/split_train_000.bin" ] &&
    cmp -s "$work/split_body" "$work/one_body" && cmp -s "$work/split_val.bin" "$data/tiny_val.bin"
tap_ok $? "--shard-tokens 100000: train_000..002 hold the same tokens as the single shard; val still fits in one"
# a missing output directory is created, and said so (once: not when it exists)
"$tok" "$data/corpus.txt" "$work/new/dir/tiny" >"$work/mk1" 2>&1; rc1=$?
"$tok" "$data/corpus.txt" "$work/new/dir/tiny" >"$work/mk2" 2>&1; rc2=$?
[ $rc1 -eq 0 ] && grep -q "created the directory '$work/new/dir' for the shards" "$work/mk1" &&
    [ $rc2 -eq 0 ] && ! grep -q "created the directory" "$work/mk2" && [ -s "$work/new/dir/tiny_train.bin" ]
tap_ok $? "a missing output directory is created and named; an existing one is not mentioned"
tap_end
