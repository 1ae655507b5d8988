#!/bin/sh
# The layers of the tree include only downward (docs/architecture.md):
#   base (0) < expr (1), kernels (1) < models (2) < planner (3) < runtime (4) < tools (5)
# A file may include its own folder and any folder of a lower rank; expr and
# kernels, side by side on the same floor, do not include each other. One
# upward or sideways include fails the test, naming the file, line and header.
. "$MIST_SRCDIR/tests/lib.sh"
rank() {
    case "$1" in
    base) echo 0;; expr|kernels) echo 1;; models) echo 2;; planner) echo 3;; runtime) echo 4;; tools) echo 5;;
    *) echo "";;
    esac
}
# scan ROOT: one line per include under ROOT that does not point downward
scan() {
    for dir in base expr kernels models planner runtime tools; do
        [ -d "$1/$dir" ] || continue
        own=$(rank "$dir")
        find "$1/$dir" -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' | sort | while IFS= read -r f; do
            # quoted includes name the folder first: "planner/stage_model.h"
            grep -n '^[ \t]*#[ \t]*include[ \t]*"[a-z_]*/' "$f" | while IFS= read -r line; do
                hdr=$(echo "$line" | sed 's/.*#[ \t]*include[ \t]*"\([^"]*\)".*/\1/')
                top=${hdr%%/*}
                r=$(rank "$top")
                [ -n "$r" ] && [ "$top" != "$dir" ] && [ "$r" -ge "$own" ] &&
                    echo "${f#$1/}:${line%%:*}: includes $hdr ($top is not below $dir)"
            done
        done
    done
}
files=$(cd "$MIST_SRCDIR" && find base expr kernels models planner runtime tools -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' | wc -l)
bad=$(scan "$MIST_SRCDIR")
[ -z "$bad" ] && [ "$files" -gt 100 ]
tap_ok $? "no upward or sideways include among the layers ($files files in base, expr, kernels, models, planner, runtime, tools)"
[ -z "$bad" ] || tap_diag "$bad"

# the scan itself finds what it should: a planted upward and a sideways include
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/base" "$tmp/expr" "$tmp/planner"
printf '#include <stdio.h>\n#include "planner/stage_model.h"\n' >"$tmp/base/x.h"
printf '#include "kernels/backend.h"\n#include "base/plan.h"\n' >"$tmp/expr/y.c"
printf '#include "models/model.h"\n#include "planner/stage_model.h"\n' >"$tmp/planner/z.c"
planted=$(scan "$tmp")
[ "$(echo "$planted" | grep -c .)" -eq 2 ] && echo "$planted" | grep -q '^base/x.h:2: includes planner/stage_model.h' &&
    echo "$planted" | grep -q '^expr/y.c:1: includes kernels/backend.h'
tap_ok $? "the scan flags base including planner/stage_model.h and expr including kernels/backend.h, and nothing else"
[ $? -eq 0 ] || tap_diag "$planted"
tap_end
