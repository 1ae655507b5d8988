#!/bin/sh
# Every input that once crashed a parser of user files (tests/fuzz/regressions/NAME/)
# and the committed seeds go through that parser's fuzz harness again, built
# with the normal compiler (and with ASan + UBSan under scripts/sanitize.sh):
# each must be read without a crash, a sanitizer report or a broken check of
# the harness (e.g. a plan written back that does not load), within 60 s.
# The shipped examples, and the files mist's programs write (a plan, a profile,
# a token shard, a checkpoint: tests/fuzz/write_seeds.sh), go through the
# harnesses of their formats too.
. "$MIST_SRCDIR/tests/lib.sh"
s=$MIST_SRCDIR
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sh "$s/tests/fuzz/write_seeds.sh" "$MIST_BUILDDIR" "$tmp/written" 2>"$tmp/seeds.log"
tap_ok $? "mist-plan, mist-profile, mist-tokenize and mist-train wrote the seeds of their formats"
[ -s "$tmp/seeds.log" ] && tap_diag "$(cat "$tmp/seeds.log")"
for h in config plan profile optable shard checkpoint latest; do
    bin="$MIST_BUILDDIR/tests/fuzz/fuzz_$h"
    if [ ! -x "$bin" ]; then tap_ok 1 "fuzz_$h is built (make check builds it)"; continue; fi
    set --
    for d in "$s/tests/fuzz/seeds/$h" "$s/tests/fuzz/regressions/$h" "$tmp/written/$h"; do [ -d "$d" ] && set -- "$@" "$d"; done
    case $h in
    config) set -- "$@" "$s"/examples/*.ini ;;
    optable) set -- "$@" "$s"/benchmarks/validate/mist-l4/*.optable ;;
    profile) set -- "$@" "$s"/benchmarks/validate/bloom/jean-zay-a100.ini ;;
    shard) set -- "$@" "$s"/examples/data/tiny_val.bin ;;
    esac
    files=$(find "$@" -type f ! -name '.*' | wc -l)
    out=$(timeout 60 "$bin" "$@" 2>&1)
    rc=$?
    replayed=$(printf '%s\n' "$out" | grep -c '^replayed ')
    [ "$rc" -eq 0 ] && [ "$replayed" -eq "$files" ] && [ "$files" -gt 0 ]
    tap_ok $? "fuzz_$h: $replayed of $files inputs read without a crash (exit $rc)"
    [ "$rc" -eq 0 ] || printf '%s\n' "$out" | grep -v '^replayed ' | tail -n 25 | sed 's/^/# /'
done
tap_end
