#!/bin/sh
# Builds the libFuzzer harnesses (tests/fuzz/fuzz_*.c) and their seed corpora.
#   sh tests/fuzz/build.sh [OUT] [BIN]
# OUT (default ./fuzz-build): OUT/fuzz_NAME, one program per parser of user files,
# OUT/seeds/NAME/ and OUT/NAME.dict (the words of the text formats). BIN (default: the directory holding mist-train, else OUT/..):
# the normal build's programs, used to write the seeds a user's files come from
# (a plan by mist-plan --out, a profile by mist-profile, a token shard by
# mist-tokenize, a checkpoint by a 2-step mist-train run); a seed whose program
# is missing is left out, with a note.
# The parser sources are compiled by clang with coverage instrumentation and
# ASan + UBSan (every UBSan report aborts: libFuzzer counts it as a crash).
# Exit 77 (skip) with the reason when clang or its libFuzzer runtime is missing.
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-fuzz-build}
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 1
bin=${2:-}
if [ -z "$bin" ]; then
    for d in "$out/.." "$(pwd)" "$src"; do [ -x "$d/mist-train" ] && { bin=$(cd "$d" && pwd); break; }; done
fi
CC=${FUZZ_CC:-}
if [ -z "$CC" ]; then
    for c in clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14; do command -v "$c" >/dev/null 2>&1 && { CC=$c; break; }; done
fi
if [ -z "$CC" ]; then echo "fuzz: skipped: no clang on PATH (install clang and libclang-rt-dev: scripts/install-deps.sh)"; exit 77; fi
probe="$out/probe"
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$probe.c"
if ! "$CC" -fsanitize=fuzzer,address,undefined "$probe.c" -o "$probe" >"$probe.log" 2>&1; then
    echo "fuzz: skipped: $CC cannot link -fsanitize=fuzzer ($(head -c 200 "$probe.log" | tr '\n' ' ')); install clang" \
        "and libclang-rt-dev (scripts/install-deps.sh)"
    rm -f "$probe" "$probe.c" "$probe.log"
    exit 77
fi
rm -f "$probe" "$probe.c" "$probe.log"

# the parsers and what they call; each harness links only what it uses from the archive
SOURCES="base/config_keys.c base/config_load.c base/config_defaults.c base/config_summary.c base/plan_file.c base/model_family.c base/paro.c
base/profile.c base/profile_presets.c base/launcher_rank.c base/excerpt.c planner/optable.c runtime/shard.c runtime/dataloader.c runtime/fileutil.c
runtime/checksum.c runtime/checkpoint.c runtime/checkpoint_read.c runtime/checkpoint_state.c"
HARNESSES="config plan profile optable shard checkpoint latest"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all"
CFLAGS="-g -O1 -fno-omit-frame-pointer $SAN -I$src -I$out ${FUZZ_CFLAGS:-}"
INIH_CFLAGS=$(pkg-config --cflags inih 2>/dev/null)
INIH_LIBS=$(pkg-config --libs inih 2>/dev/null || echo -linih)
mkdir -p "$out/obj"
objs=
for s in $SOURCES; do
    o="$out/obj/$(echo "$s" | tr / _ | sed 's/\.c$/.o/')"
    # rebuild when the source or any header of the tree changed since
    if [ ! -f "$o" ] || [ -n "$(find "$src/$s" "$src/base" "$src/runtime" "$src/planner" -newer "$o" -name '*.[ch]' 2>/dev/null | head -1)" ]; then
        # shellcheck disable=SC2086
        "$CC" $CFLAGS $INIH_CFLAGS -fsanitize=fuzzer-no-link -c "$src/$s" -o "$o" || { echo "fuzz: compiling $s failed"; exit 1; }
    fi
    objs="$objs $o"
done
rm -f "$out/libparsers.a"
# shellcheck disable=SC2086
ar cr "$out/libparsers.a" $objs || exit 1
for h in $HARNESSES; do
    # shellcheck disable=SC2086
    "$CC" $CFLAGS -fsanitize=fuzzer "$src/tests/fuzz/fuzz_$h.c" "$out/libparsers.a" $INIH_LIBS -lm -o "$out/fuzz_$h" ||
        { echo "fuzz: linking fuzz_$h failed"; exit 1; }
done

# ---- dictionaries: the words of each text format (section and key names, enum values), the
# string literals its parser compares with; libFuzzer inserts them into the inputs it mutates
dict() {  # dict NAME SOURCE...
    name=$1
    shift
    (cd "$src" && grep -oh '"[A-Za-z][A-Za-z0-9_.+-]\{1,40\}"' "$@") | sort -u >"$out/$name.dict"
}
dict config base/config_keys.c base/config_load.c base/plan_file.c base/profile_presets.c
dict plan base/config_keys.c base/plan_file.c
dict profile base/profile.c base/profile_presets.c
dict optable planner/optable.c

# ---- seed corpora: the committed text seeds, the examples, and files the programs write
seeds="$out/seeds"
rm -rf "$seeds"
for h in $HARNESSES; do
    mkdir -p "$seeds/$h"
    [ -d "$src/tests/fuzz/seeds/$h" ] && cp "$src/tests/fuzz/seeds/$h"/* "$seeds/$h"/ 2>/dev/null
done
for f in "$src"/examples/*.ini; do cp "$f" "$seeds/config/$(basename "$f")"; done
cp "$src"/benchmarks/validate/bloom/jean-zay-a100.ini "$seeds/profile/"
for f in "$src"/benchmarks/validate/mist-l4/*.optable; do cp "$f" "$seeds/optable/"; done
if [ -z "$bin" ]; then
    echo "fuzz: note: no mist-train found (build mist first): the seeds its programs write are left out"
else
    sh "$src/tests/fuzz/write_seeds.sh" "$bin" "$seeds" || echo "fuzz: note: some seeds are missing (above)"
fi
for h in $HARNESSES; do echo "fuzz: fuzz_$h: $(ls "$seeds/$h" | wc -l) seeds"; done
