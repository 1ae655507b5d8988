#!/bin/sh
# `make install` puts where users look: the seven programs in bin/, a manual page
# per program (made from its --help by help2man) in share/man/man1/, the
# examples with their data in share/mist/examples/, the docs in
# share/doc/mist/; the installed programs run from there, and
# `make uninstall` removes every file again.
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-install-test.XXXXXX")
trap 'rm -rf "$W"' EXIT
D="$W/root"
PREFIX=/opt/mist-test
if ! command -v help2man >/dev/null 2>&1; then
    tap_skip "help2man is not installed (scripts/install-deps.sh installs it): no manual pages to install"
    tap_end; exit $?
fi
# MAKEFLAGS from `make check` (its jobserver) would be inherited: start clean
MAKEFLAGS= make -C "$MIST_BUILDDIR" install prefix="$PREFIX" DESTDIR="$D" >"$W/install.log" 2>&1
rc=$?
[ $rc -eq 0 ] || tap_diag "$(tail -20 "$W/install.log")"
tap_ok $rc "make install prefix=$PREFIX DESTDIR=... succeeds"

P="$D$PREFIX"
missing=
for p in mist-train mist-plan mist-profile mist-calibrate mist-tokenize mist-export mist-sample; do
    [ -x "$P/bin/$p" ] || missing="$missing bin/$p"
    m="$P/share/man/man1/$p.1"
    # a page with its NAME line, its options (each program documents -h and -V), and the version
    if ! grep -q '^\.SH NAME' "$m" 2>/dev/null || ! grep -q "^$p \\\\- [a-z]" "$m" ||
        ! grep -q 'version' "$m" || ! grep -q '"mist 0' "$m"; then missing="$missing man1/$p.1"; fi
done
tap_ok "$([ -z "$missing" ]; echo $?)" "the seven programs and their manual pages are installed (missing or empty:${missing:- none})"

[ -f "$P/share/mist/examples/tiny.ini" ] && [ -f "$P/share/mist/examples/slurm/requeue.sbatch" ] &&
    [ -f "$P/share/mist/examples/data/tiny_train.bin" ] && [ -f "$P/share/doc/mist/README.md" ] &&
    [ -f "$P/share/doc/mist/config.md" ]
tap_ok $? "the examples (with their data) and the docs are installed under share/"

# the installed program trains the installed example (its data path is relative to the config)
OPENBLAS_NUM_THREADS=1 "$P/bin/mist-train" "$P/share/mist/examples/tiny.ini" -o stage.0.dp=1 -o stage.0.b=16 \
    -o train.steps=2 -o data.val_interval=0 >"$W/train.out" 2>&1 </dev/null
rc=$?
[ $rc -eq 0 ] && grep -q "iteration        2/" "$W/train.out"
tap_ok $? "the installed mist-train trains the installed tiny example for 2 steps (rc $rc)"

MAKEFLAGS= make -C "$MIST_BUILDDIR" uninstall prefix="$PREFIX" DESTDIR="$D" >"$W/uninstall.log" 2>&1
left=$(find "$D" -type f | wc -l)
[ "$left" -eq 0 ]
tap_ok $? "make uninstall removes every installed file ($left left)"
tap_end
