#!/bin/sh
# Validation is a property of the model, not of the plan: [data] val_batches
# counts global batches, so a plan with G micro-batches of b evaluates the
# same val_batches x global_batch sequences as one with a single micro-batch
# of G*b, and a resume under another plan continues the same val curve.
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib_train.sh"
TRAIN="$MIST_BUILDDIR/mist-train"
GPT="$MIST_SRCDIR/examples/tiny.ini"
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-val-test.XXXXXX")
trap 'rm -rf "$W"' EXIT
COMMON="-o train.steps=4 -o train.global_batch=8 -o log.interval=1000 -o data.val_interval=2 -o data.val_batches=2
 -o checkpoint.keep=1"
KEY=val_loss

run "$GPT" 1 g1 -o stage.0.dp=1 -o stage.0.b=8 -o plan.G=1
run "$GPT" 1 g4 -o stage.0.dp=1 -o stage.0.b=2 -o plan.G=4
run "$GPT" 2 dp2g2 -o stage.0.dp=2 -o stage.0.b=2 -o plan.G=2
n=$(losses "$W/g1.jsonl" | wc -l)
d4=$(loss_diff "$W/g1.jsonl" "$W/g4.jsonl")
d22=$(loss_diff "$W/g1.jsonl" "$W/dp2g2.jsonl")
tap_diag "val losses (G=1 b=8 | G=4 b=2 | dp 2 G=2 b=2):" "$(paste "$W/la" "$W/lb")" "max relative differences: $d4, $d22"
[ "$n" -eq 2 ] && num_ok 'a < 1e-5 && b < 1e-5' a="$d4" b="$d22"
tap_ok $? "2 evaluations of 2 global batches give the same val loss with G = 1, 4 and dp 2 x G 2 (rel. diff $d4, $d22)"
tap_end
