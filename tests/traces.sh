#!/bin/sh
# Traces and the plan's picture (docs/traces.md):
#  - mist-plan --analyze --trace writes Chrome trace JSON: every stage runs G
#    forwards and G backwards in the runtime's 1F1B order, its compute row tiles
#    the iteration, which is the analysis's 1F1B total; offload and ZeRO plans
#    get side-stream events; a search writes them for the plan it found;
#  - --svg draws the plan; rsvg-convert renders it to a PNG that is large and
#    has many colours (a blank page has one);
#  - mist-train [log] trace on the CPU (2 stages, 2 ranks): the measured trace has
#    the predicted trace's event names, every rank's G forwards and backwards, and
#    each rank's events add up to its measured iteration time within 5% (rank 0's:
#    the log's ms_per_iter);
#  - per-block parts, predicted and measured: inside each forward / backward pass,
#    one after another, "block N forward" and "block N backward" for the stage's
#    blocks, "block N recompute" before a checkpointed block's backward, "pre" /
#    "post" parts on the first / last stage, with the same names in both traces;
#  - recompute = selective: "block N recompute attention" just before the backward
#    of each block not checkpointed, in both traces, with the stage model's time
#    in the predicted one, and the per-stage sums hold as above;
#  - interleaved 1F1B (virtual = 2, 2 pipeline ranks of 2 chunks): a row per pipeline rank, passes
#    named by their chunk ("stage 2 forward") in the interleaved order in both traces, the same
#    names, parts inside passes, sums within 5%; a predicted pass after a bubble starts when its
#    input arrives, model_iteration_seconds is --analyze's total; the picture renders;
#  - lean = 1: the predicted block parts include the lean block's extra passes; the measured trace;
#  - bad input: an unwritable --trace / --svg / [log] trace path, trace_iteration 0.
. "${MIST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
PLAN_BIN="$MIST_BUILDDIR/mist-plan"
TRAIN="$MIST_BUILDDIR/mist-train"
TINY="$MIST_SRCDIR/examples/tiny.ini"
W=$(mktemp -d "${TMPDIR:-/tmp}/mist-traces-test.XXXXXX")
trap 'rm -rf "$W"' EXIT
# a 2-stage pipeline of the tiny model, 4 micro-batches of 4 sequences, the second stage's block checkpointed
PP="-o plan.stages=2 -o plan.G=4 -o stage.0.layers=1 -o stage.0.dp=1 -o stage.0.b=4 -o stage.1.layers=1
 -o stage.1.dp=1 -o stage.1.b=4 -o stage.1.ckpt=1"

# check_trace FILE S G KIND [V]: the structure of a trace (V: [plan] virtual, S stages on S / V
# pipeline ranks, a rank's passes named "stage C forward" by their chunk C); prints "ok" or what is wrong
check_trace() {
    python3 - "$@" <<'PYEOF'
import json, re, sys
path, S, G, kind = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
V = int(sys.argv[5]) if len(sys.argv) > 5 else 1
P = S // V  # the processes: stages, or pipeline ranks
d = json.load(open(path))
o, ev = d["otherData"], [e for e in d["traceEvents"] if e["ph"] == "X"]
top = {"forward", "backward", "bubble", "grad norm", "collectives", "h2d", "d2h"}
def base(n):  # "stage 2 forward" -> "forward"
    m = re.fullmatch(r"stage (\d+) (forward|backward)", n)
    return m.group(2) if m else n
parts, ev = [e for e in ev if base(e["name"]) not in top], [e for e in ev if base(e["name"]) in top]
bad = []
if o["source"] != kind or o["stages"] != S or o["microbatches"] != G: bad.append("otherData %s" % o)
if V > 1 and (o.get("virtual"), o.get("pipeline_ranks")) != (V, P): bad.append("otherData %s" % o)
if any((e["name"] != base(e["name"])) != (V > 1) for e in ev if base(e["name"]) in ("forward", "backward")): bad.append("pass names %s" % sorted({e["name"] for e in ev}))
# compute rows: predicted tid 0 per stage; measured one row (tid 4 + rank) per rank
rows = {}
for e in ev:
    if kind == "predicted" and e["tid"] != 0: continue
    rows.setdefault((e["pid"], e["tid"]), []).append(e)
if len({p for p, _ in rows}) != P: bad.append("%d stages have a compute row" % len({p for p, _ in rows}))
for (pid, tid), es in sorted(rows.items()):
    es.sort(key=lambda e: e["ts"])
    for name in ("forward", "backward"):
        for full in [name] if V == 1 else ["stage %d %s" % (pid + j * P, name) for j in range(V)]:
            mbs = sorted({e["args"]["microbatch"] for e in es if e["name"] == full})
            if mbs != list(range(G)): bad.append("stage %d row %d: %s micro-batches %s" % (pid, tid, full, mbs))
    # the row tiles [0, its end]: no gap, no overlap (1 ns of rounding)
    at = 0.0
    for e in es:
        if abs(e["ts"] - at) > 2e-3: bad.append("stage %d row %d: event at %g, expected %g" % (pid, tid, e["ts"], at)); break
        at = e["ts"] + e["dur"]
    if kind == "predicted" and abs(at - 1e6 * o["iteration_seconds"]) > 1e-3 * at:
        bad.append("stage %d ends at %g us, the iteration at %g s" % (pid, at, o["iteration_seconds"]))
    if kind == "measured":
        host = 1e6 * o["rank_iteration_seconds"][tid - 4]
        if not (abs(at - host) <= 0.05 * host): bad.append("rank %d: events add up to %g us, its iteration %g us" % (tid - 4, at, host))
    # nested parts: each inside a pass of its micro-batch on the row, one after another;
    # every pass holds a part per block ("block N forward" / "block N backward", the same
    # blocks both ways), a checkpointed block's recompute before its backward
    for p in es:
        if base(p["name"]) not in ("forward", "backward"): continue
        g, end = p["args"]["microbatch"], p["ts"] + p["dur"]
        inner = sorted((e for e in parts if (e["pid"], e["tid"]) == (pid, tid) and e["args"]["microbatch"] == g
                        and p["ts"] - 2e-3 <= e["ts"] and e["ts"] + e["dur"] <= end + 2e-3), key=lambda e: e["ts"])
        p["inner"] = [e["name"] for e in inner]
        if any(b["ts"] < a["ts"] + a["dur"] - 2e-3 for a, b in zip(inner, inner[1:])):
            bad.append("stage %d row %d: parts of %s %d overlap" % (pid, tid, p["name"], g))
    for g in range(G):
        f = [n for p in es if base(p["name"]) == "forward" and p["args"]["microbatch"] == g for n in p["inner"]]
        b = [n for p in es if base(p["name"]) == "backward" and p["args"]["microbatch"] == g for n in p["inner"]]
        fb = sorted(n[:-8] for n in f if n.startswith("block ") and n.endswith(" forward"))
        bb = sorted(n[:-9] for n in b if n.startswith("block ") and n.endswith(" backward"))
        if not fb or fb != bb: bad.append("stage %d row %d micro-batch %d: blocks %s forward, %s backward" % (pid, tid, g, fb, bb))
        for n in b:
            if n.endswith(" recompute") and n[:-10] + " backward" not in b[b.index(n):]:
                bad.append("stage %d row %d: %s without its backward after it" % (pid, tid, n))
        # selective recompute: the attention core's forward again, just before its block's backward
        for k, n in enumerate(b):
            if n.endswith(" recompute attention") and b[k + 1:k + 2] != [n[:-20] + " backward"]:
                bad.append("stage %d row %d: %s not just before its block's backward (%s)" % (pid, tid, n, b[k + 1:k + 2]))
        if any(" recompute" in n for n in f): bad.append("stage %d row %d: a recompute in forward %d" % (pid, tid, g))
    placed = sum(len(p.get("inner", [])) for p in es)
    if placed != len([e for e in parts if (e["pid"], e["tid"]) == (pid, tid)]):
        bad.append("stage %d row %d: %d parts outside their pass" % (pid, tid, len([e for e in parts if (e["pid"], e["tid"]) == (pid, tid)]) - placed))
print("ok" if not bad else "; ".join(bad[:4]))
PYEOF
}
names() { python3 -c 'import json,sys; print(" ".join(sorted({e["name"] for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"})))' "$1"; }
# the names of the passes and streams (no "block N ..." and pre / post parts)
top_names() { python3 -c 'import json,sys; print(" ".join(sorted({e["name"] for e in json.load(open(sys.argv[1]))["traceEvents"]
    if e["ph"] == "X" and not e["name"].startswith(("block ", "pre ", "post "))})))' "$1"; }
# check_order FILE P V G: every pipeline rank's row runs its passes in the interleaved order
# (docs/pipeline.md: w_r warm-up forwards, then one forward and one backward, then the backwards;
# the k-th forward of rank r runs chunk (n div P) P + r on micro-batch (k div P V) P + n mod P,
# n = k mod P V), each pass once (the predicted first forward's step part and the forward proper
# are one pass); prints "ok" or the first row that differs
check_order() {
    python3 - "$@" <<'PYEOF'
import json, sys
path, P, V, G = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def order(r):
    def pas(k, bwd):
        n = k % (P * V); j = n // P
        return ("stage %d %s" % (((V - 1 - j) if bwd else j) * P + r, "backward" if bwd else "forward"), (k // (P * V)) * P + n % P)
    w = min((P - r - 1) * 2 + (V - 1) * P, G * V)
    out = [pas(k, 0) for k in range(w)]
    for i in range(G * V - w): out += [pas(w + i, 0), pas(i, 1)]
    return out + [pas(i, 1) for i in range(G * V - w, G * V)]
rows = {}
for e in sorted((e for e in json.load(open(path))["traceEvents"] if e["ph"] == "X" and e["name"].startswith("stage ")),
               key=lambda e: e["ts"]):
    row = rows.setdefault((e["pid"], e["tid"]), [])
    key = (e["name"], e["args"]["microbatch"])
    if not row or row[-1] != key: row.append(key)
bad = ["pipeline rank %d row %d: %s" % (pid, tid, row[:6]) for (pid, tid), row in sorted(rows.items()) if row != order(pid)]
print("ok" if rows and len({p for p, _ in rows}) == P and not bad else "; ".join(bad[:2]) or "no rows")
PYEOF
}

# ---- 1. predicted traces ---------------------------------------------------------
# shellcheck disable=SC2086
"$PLAN_BIN" "$TINY" --analyze $PP --trace "$W/pp.json" --svg "$W/pp.svg" --json >"$W/pp.out" 2>&1
rc=$?
res=$(check_trace "$W/pp.json" 2 4 predicted 2>&1)
[ $rc -eq 0 ] && [ "$res" = ok ]
tap_ok $? "--analyze --trace: 2 stages x 4 micro-batches, forward and backward each, rows tile the iteration ($res)"
model=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["iteration_seconds"])' "$W/pp.out" 2>/dev/null)
traced=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["otherData"]["iteration_seconds"])' "$W/pp.json" 2>/dev/null)
num_ok 'm > 0 && (t - m) / m < 1e-8 && (m - t) / m < 1e-8' m="$model" t="$traced"
tap_ok $? "the timeline's iteration is the analysis's 1F1B total ($traced s vs $model s)"

# a GPT-3 22B plan with ZeRO-3 and offload on 4 stages: the side streams appear
OFF="-o plan.G=64 -o stage.1.zero=3 -o stage.1.ao=0.5 -o stage.2.wo=0.5 -o stage.2.oo=1"
# shellcheck disable=SC2086
"$PLAN_BIN" "$MIST_SRCDIR/examples/gpt3-22b.ini" --analyze $OFF -o stage.0.b=4 -o stage.1.b=4 -o stage.2.b=4 \
    -o stage.3.b=4 --trace "$W/off.json" >"$W/off.out" 2>&1
rc=$?
res=$(check_trace "$W/off.json" 4 64 predicted 2>&1)
n=$(top_names "$W/off.json")
[ $rc -le 3 ] && [ "$res" = ok ] && [ "$n" = "backward bubble collectives d2h forward grad norm h2d" ]
tap_ok $? "GPT-3 22B with ZeRO-3 and offload: streams under compute (names: $n; $res)"

# a search writes the trace and the picture of the plan it found
"$PLAN_BIN" "$TINY" -o plan.mode=auto --trace "$W/s.json" --svg "$W/s.svg" >"$W/s.out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ -s "$W/s.json" ] && grep -q '</svg>' "$W/s.svg" && [ "$(check_trace "$W/s.json" "$(
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["otherData"]["stages"])' "$W/s.json")" "$(
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["otherData"]["microbatches"])' "$W/s.json")" predicted)" = ok ]
tap_ok $? "a search writes --trace and --svg for the plan it found (exit $rc)"

# ---- 2. the picture, rendered ------------------------------------------------------
if command -v rsvg-convert >/dev/null 2>&1; then
    rsvg-convert "$W/pp.svg" -o "$W/pp.png" 2>"$W/rsvg.err"
    rc=$?
    # a tiny PNG reader: width, height and the distinct colours (8-bit RGB / RGBA)
    res=$(python3 - "$W/pp.png" <<'PYEOF'
import struct, sys, zlib
d = open(sys.argv[1], "rb").read()
assert d[:8] == b"\x89PNG\r\n\x1a\n"
pos, idat = 8, b""
while pos < len(d):
    n, kind = struct.unpack(">I4s", d[pos:pos + 8])
    body = d[pos + 8:pos + 8 + n]
    if kind == b"IHDR": w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
    if kind == b"IDAT": idat += body
    pos += 12 + n
assert depth == 8 and ctype in (2, 6), (depth, ctype)
bpp = 3 if ctype == 2 else 4
raw, stride, prev, colours, at = zlib.decompress(idat), w * bpp, bytearray(w * bpp), set(), 0
for y in range(h):
    f, line = raw[at], bytearray(raw[at + 1:at + 1 + stride]); at += 1 + stride
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0; b = prev[i]; c = prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    colours.update(bytes(line[i:i + bpp]) for i in range(0, stride, bpp))
    prev = line
print(w, h, len(colours))
PYEOF
)
    set -- $res
    [ $rc -eq 0 ] && num_ok 'w >= 800 && h >= 300 && c >= 8' w="${1:-x}" h="${2:-x}" c="${3:-x}"
    tap_ok $? "rsvg-convert renders --svg: ${1:-?} x ${2:-?} pixels, ${3:-?} distinct colours ($(head -c 200 "$W/rsvg.err"))"
    # the picture shows the stages, their memory and the capacity
    grep -q '>stage 1<' "$W/pp.svg" && grep -q 'optimizer state' "$W/pp.svg" && grep -q 'peak [0-9.]* [KMG]iB of [0-9.]* GiB' "$W/pp.svg"
    tap_ok $? "the picture names each stage and its memory against the capacity"
else
    tap_skip "rsvg-convert not installed (Debian: librsvg2-bin, scripts/install-deps.sh): the SVG is not rendered"
    tap_skip "rsvg-convert not installed: picture contents not checked"
fi
# each memory bar's segments (their exact bytes in the titles) add up to its stage's peak: the
# larger of the forward and backward peak, summed over a pipeline rank's chunks when interleaved
bars_vs_peaks() {  # SVG ANALYSIS_JSON PIPELINE_RANKS
    python3 - "$1" "$2" "$3" <<'PYEOF'
import json, re, sys
svg = open(sys.argv[1]).read(); P = int(sys.argv[3])
stages = json.load(open(sys.argv[2]))["stages"]
want = [0] * P
for i, s in enumerate(stages): want[i % P] += max(s["peak_bytes_fwd"], s["peak_bytes_bwd"])
bars = []
for name, b in re.findall(r"<title>(weights|gradients|optimizer state|activations|buffers|transient) [^<]*\((\d+) B\)</title>", svg):
    if name == "weights": bars.append(0)
    bars[-1] += int(b)
print("ok" if bars == want else "bars %s, peaks %s" % (bars, want))
PYEOF
}
res=$(bars_vs_peaks "$W/pp.svg" "$W/pp.out" 2 2>&1)
[ "$res" = ok ]
tap_ok $? "--svg: each stage's memory bar adds up to its peak, to the byte ($res)"

# ---- 3. the measured trace of a CPU run -------------------------------------------
# shellcheck disable=SC2086
mist_mpirun --timeout 120 -np 2 "$TRAIN" "$TINY" -o train.steps=3 -o data.val_interval=0 -o log.interval=1000 $PP \
    -o log.trace="$W/m.json" -o log.trace_iteration=2 -o log.jsonl="$W/m.jsonl" >"$W/m.out" 2>&1
rc=$?
res=$(check_trace "$W/m.json" 2 4 measured 2>&1)
[ $rc -eq 0 ] && [ "$res" = ok ]
tap_ok $? "[log] trace: both ranks' 4 forwards and backwards tile their iteration, within 5% of its time ($res)"
[ $rc -eq 0 ] || tap_diag "$(tail -5 "$W/m.out")"
log_ms=$(sed -n 2p "$W/m.jsonl" | grep -o '"ms_per_iter": [^,}]*' | sed 's/.*: //')
rank0_ms=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sum(e["dur"] for e in d["traceEvents"] if e["ph"]=="X" and e["tid"]==4 and not e["name"].startswith(("block ", "pre ", "post ")))/1e3)' "$W/m.json" 2>/dev/null)
num_ok 'l > 0 && (r - l) / l <= 0.05 && (l - r) / l <= 0.05' l="$log_ms" r="$rank0_ms"
tap_ok $? "rank 0's events add up to the log's iteration 2 within 5% ($rank0_ms ms vs ms_per_iter $log_ms)"
pn=$(names "$W/pp.json"); mn=$(names "$W/m.json" 2>/dev/null)
[ -n "$mn" ] && [ "$pn" = "$mn" ]
tap_ok $? "the measured and predicted traces have the same event names ($mn | $pn)"
for part in "pre forward" "block 0 forward" "block 1 forward" "block 1 recompute" "block 0 backward" "post backward"; do
    case " $mn " in *" $part "*) ;; *) false ;; esac || break
done
tap_ok $? "both hold the per-block parts (\"$part\" last looked for): blocks 0 and 1, the checkpointed block's recompute, pre and post"

# ---- 3b. selective recompute: the attention core's forward again, in both traces -------
# stage 0's block runs its attention forward again before its backward; stage 1's is
# checkpointed, so it recomputes the whole block instead (and no attention part)
SEL="-o stage.0.recompute=selective -o stage.1.recompute=selective"
# shellcheck disable=SC2086
"$PLAN_BIN" "$TINY" --analyze $PP $SEL --trace "$W/sel.json" --json >"$W/sel.out" 2>&1
rc=$?
res=$(check_trace "$W/sel.json" 2 4 predicted 2>&1)
model=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["iteration_seconds"])' "$W/sel.out" 2>/dev/null)
traced=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["otherData"]["iteration_seconds"])' "$W/sel.json" 2>/dev/null)
[ $rc -eq 0 ] && [ "$res" = ok ] && num_ok 'm > 0 && (t - m) / m < 1e-8 && (m - t) / m < 1e-8' m="$model" t="$traced"
tap_ok $? "selective: the predicted trace's rows tile the iteration, the analysis's 1F1B total ($traced s vs $model s; $res)"
# the part's time is the stage model's: stage 0's blocks' backward (bwd_other_seconds, no
# side streams in this plan) grows under selective by its one block's attention forward,
# and each of the 4 parts lasts that; block 0's own backward part is the plain plan's
delta=$(python3 - "$W/pp.json" "$W/sel.json" "$W/pp.out" "$W/sel.out" <<'PYEOF'
import json, sys
def ev(p): return [e for e in json.load(open(p))["traceEvents"] if e["ph"] == "X" and e["pid"] == 0 and e["tid"] == 0]
plain, sel = ev(sys.argv[1]), ev(sys.argv[2])
grow = 1e6 * (json.load(open(sys.argv[4]))["stages"][0]["bwd_other_seconds"] - json.load(open(sys.argv[3]))["stages"][0]["bwd_other_seconds"])
att = [e["dur"] for e in sel if e["name"] == "block 0 recompute attention"]
back = lambda es: [e["dur"] for e in es if e["name"] == "block 0 backward"]
worst = max([abs(a - grow) for a in att] or [1]) if grow > 0 else 1  # us; the JSON holds whole ns
print(len(att), grow, worst, back(sel) == back(plain))
PYEOF
)
set -- $delta
num_ok 'n == 4 && a > 0 && r <= 1e-3' n="${1:-x}" a="${2:-x}" r="${3:-x}" && [ "${4:-}" = True ]
tap_ok $? "selective: 4 \"block 0 recompute attention\" parts, each the stage model's growth of the backward, ${2:-?} us (off by ${3:-?} us); block 0's backward part unchanged (${4:-?})"
# shellcheck disable=SC2086
mist_mpirun --timeout 120 -np 2 "$TRAIN" "$TINY" -o train.steps=3 -o data.val_interval=0 -o log.interval=1000 $PP $SEL \
    -o log.trace="$W/msel.json" -o log.trace_iteration=2 >"$W/msel.out" 2>&1
rc=$?
res=$(check_trace "$W/msel.json" 2 4 measured 2>&1)
[ $rc -eq 0 ] && [ "$res" = ok ]
tap_ok $? "selective: the measured trace's passes hold their parts, each rank's events within 5% of its iteration ($res)"
[ $rc -eq 0 ] || tap_diag "$(tail -5 "$W/msel.out")"
pn=$(names "$W/sel.json"); mn=$(names "$W/msel.json" 2>/dev/null)
case " $mn " in *" block 0 recompute attention "*) has=1 ;; *) has=0 ;; esac
case " $mn $pn " in *" block 1 recompute attention "*) has=0 ;; esac
[ -n "$mn" ] && [ "$pn" = "$mn" ] && [ $has -eq 1 ]
tap_ok $? "selective: the same names in both traces, \"block 0 recompute attention\" in both, none for the checkpointed block 1 ($mn)"

# ---- 3c. interleaved 1F1B: 2 pipeline ranks of 2 chunks ([plan] virtual = 2) ------------
# 4 blocks, one per chunk: chunks 0 and 2 on rank 0, 1 and 3 on rank 1; chunk 3 checkpointed
VPP="-o model.layers=4 -o plan.stages=4 -o plan.virtual=2 -o plan.G=4"
for c in 0 1 2 3; do VPP="$VPP -o stage.$c.layers=1 -o stage.$c.dp=1 -o stage.$c.b=4"; done
VPP="$VPP -o stage.3.ckpt=1"
# shellcheck disable=SC2086
"$PLAN_BIN" "$TINY" --analyze $VPP --trace "$W/v.json" --svg "$W/v.svg" --json >"$W/v.out" 2>&1
rc=$?
res=$(check_trace "$W/v.json" 4 4 predicted 2 2>&1); ord=$(check_order "$W/v.json" 2 2 4 2>&1)
[ $rc -eq 0 ] && [ "$res" = ok ] && [ "$ord" = ok ]
tap_ok $? "virtual = 2, predicted: a row per pipeline rank, each chunk's 4 forwards and backwards in the interleaved order, parts inside their passes, rows tile the iteration ($res; order $ord)"
# the timeline is the event-driven placement: a pass after a bubble starts when its input is
# there (chunk c - 1's forward, c + 1's backward of the micro-batch; the last backward's input
# leaves before its gradient sync, so those are not compared); the closed form
# (docs/pipeline.md, --analyze's time) is otherData's model_iteration_seconds
res=$(python3 - "$W/v.json" "$W/v.out" <<'PYEOF'
import json, re, sys
d = json.load(open(sys.argv[1])); o = d["otherData"]
ev = sorted((e for e in d["traceEvents"] if e["ph"] == "X" and e["tid"] == 0 and not e["name"].startswith(("block ", "pre ", "post "))), key=lambda e: e["ts"])
end = {}
for e in ev:
    m = re.fullmatch(r"stage (\d+) (forward|backward)", e["name"])
    if m: end[(int(m.group(1)), m.group(2), e["args"]["microbatch"])] = e["ts"] + e["dur"]
S, G, bad, waited = o["stages"], o["microbatches"], [], 0
for pid in {e["pid"] for e in ev}:
    row = [e for e in ev if e["pid"] == pid]
    for prev, e in zip(row, row[1:]):
        m = re.fullmatch(r"stage (\d+) (forward|backward)", e["name"])
        if prev["name"] != "bubble" or not m: continue
        c, kind, g = int(m.group(1)), m.group(2), e["args"]["microbatch"]
        dep = (c - 1, kind, g) if kind == "forward" else (c + 1, kind, g)
        if dep[0] < 0 or dep[0] >= S or (kind == "backward" and g == G - 1): continue
        waited += 1
        if abs(e["ts"] - end[dep]) > 2e-3: bad.append("%s %d at %g, its input at %g" % (e["name"], g, e["ts"], end[dep]))
model = json.load(open(sys.argv[2]))["iteration_seconds"]
rel = (o["iteration_seconds"] - model) / model
ok = not bad and waited > 0 and abs(o["model_iteration_seconds"] - model) <= 1e-8 * model and abs(rel) <= 0.01
print("ok" if ok else "bad", waited, "%.3g" % rel, "; ".join(bad[:2]))
PYEOF
)
set -- $res
[ "${1:-}" = ok ]
tap_ok $? "virtual = 2, predicted: each of ${2:-?} passes after a bubble starts when its input is there; model_iteration_seconds is --analyze's interleaved total, the placement ends ${3:-?} (relative) from it ($res)"
# shellcheck disable=SC2086
mist_mpirun --timeout 120 -np 2 "$TRAIN" "$TINY" -o train.steps=3 -o data.val_interval=0 -o log.interval=1000 $VPP \
    -o log.trace="$W/mv.json" -o log.trace_iteration=2 >"$W/mv.out" 2>&1
rc=$?
res=$(check_trace "$W/mv.json" 4 4 measured 2 2>&1); ord=$(check_order "$W/mv.json" 2 2 4 2>&1)
[ $rc -eq 0 ] && [ "$res" = ok ] && [ "$ord" = ok ]
tap_ok $? "virtual = 2, measured: both ranks' chunks' passes in the interleaved order, parts inside them, each rank's events within 5% of its iteration ($res; order $ord)"
[ $rc -eq 0 ] || tap_diag "$(tail -5 "$W/mv.out")"
pn=$(names "$W/v.json"); mn=$(names "$W/mv.json" 2>/dev/null)
case " $mn " in *" block 3 recompute "*" stage 3 backward "*) has=1 ;; *) has=0 ;; esac
[ -n "$mn" ] && [ "$pn" = "$mn" ] && [ $has -eq 1 ]
tap_ok $? "virtual = 2: the same names in both traces, passes by chunk (\"stage 3 backward\") and the checkpointed block's recompute ($mn)"
if command -v rsvg-convert >/dev/null 2>&1; then
    rsvg-convert "$W/v.svg" -o "$W/v.png" 2>"$W/rsvg.err"
    rc=$?
    [ $rc -eq 0 ] && [ -s "$W/v.png" ] && grep -q '>rank 1<' "$W/v.svg" && grep -q '<title>stage 2 backward 3</title>' "$W/v.svg" &&
        grep -q 'interleaved 1F1B, 2 pipeline ranks of 2 chunks' "$W/v.svg"
    tap_ok $? "virtual = 2: rsvg-convert renders the picture, a row and a memory bar per pipeline rank, each pass titled by its chunk (exit $rc)"
else
    tap_skip "rsvg-convert not installed (Debian: librsvg2-bin): the interleaved picture is not rendered"
fi
res=$(bars_vs_peaks "$W/v.svg" "$W/v.out" 2 2>&1)
[ "$res" = ok ]
tap_ok $? "virtual = 2, --svg: each pipeline rank's memory bar adds up to the sum of its chunks' peaks ($res)"

# ---- 3d. lean blocks: their extra passes inside the predicted block parts --------------
# stage 0's block is lean (not checkpointed): its forward and backward parts grow by the stage
# model's lean terms, i.e. by what its pass grows (fwd_other / bwd_other_seconds; no side streams
# here), as the measured block parts include the runtime's lean kernels
# shellcheck disable=SC2086
"$PLAN_BIN" "$TINY" --analyze $PP -o stage.0.lean=1 --trace "$W/lean.json" --json >"$W/lean.out" 2>&1
rc=$?
res=$(check_trace "$W/lean.json" 2 4 predicted 2>&1)
delta=$(python3 - "$W/pp.json" "$W/lean.json" "$W/pp.out" "$W/lean.out" <<'PYEOF'
import json, sys
def ev(p): return [e for e in json.load(open(p))["traceEvents"] if e["ph"] == "X" and e["pid"] == 0 and e["tid"] == 0]
def st(p, k): return json.load(open(p))["stages"][0][k]
worst, grew = 0.0, []
for name, key in (("block 0 forward", "fwd_other_seconds"), ("block 0 backward", "bwd_other_seconds")):
    grow = 1e6 * (st(sys.argv[4], key) - st(sys.argv[3], key))
    plain = [e["dur"] for e in ev(sys.argv[1]) if e["name"] == name and e["args"]["microbatch"] not in (0, 3)]
    lean = [e["dur"] for e in ev(sys.argv[2]) if e["name"] == name and e["args"]["microbatch"] not in (0, 3)]
    grew.append("%.4g" % grow)
    worst = max([worst] + [abs(l - p - grow) for p, l in zip(plain, lean)] if grow > 0 and len(plain) == len(lean) == 2 else [1])
print(worst, " ".join(grew))
PYEOF
)
set -- $delta
[ $rc -eq 0 ] && [ "$res" = ok ] && num_ok 'r <= 1e-3' r="${1:-x}"
tap_ok $? "lean: block 0's forward and backward parts grow by the stage model's lean terms (${2:-?} and ${3:-?} us, off by ${1:-?} us; $res)"
# shellcheck disable=SC2086
mist_mpirun --timeout 120 -np 2 "$TRAIN" "$TINY" -o train.steps=3 -o data.val_interval=0 -o log.interval=1000 $PP \
    -o stage.0.lean=1 -o log.trace="$W/mlean.json" -o log.trace_iteration=2 >"$W/mlean.out" 2>&1
rc=$?
res=$(check_trace "$W/mlean.json" 2 4 measured 2>&1)
pn=$(names "$W/lean.json"); mn=$(names "$W/mlean.json" 2>/dev/null)
[ $rc -eq 0 ] && [ "$res" = ok ] && [ "$pn" = "$mn" ]
tap_ok $? "lean: the measured trace's passes hold their parts, each rank's events within 5% of its iteration, the predicted trace's names ($res)"
[ $rc -eq 0 ] || tap_diag "$(tail -5 "$W/mlean.out")"

# ---- 4. bad input ------------------------------------------------------------------
for opt in --trace --svg; do
    "$PLAN_BIN" "$TINY" --analyze "$opt" "$W" >"$W/bad.out" 2>&1
    rc=$?
    [ $rc -eq 2 ] && grep -q "mist-plan: $opt $W: .* is a directory" "$W/bad.out"
    tap_ok $? "$opt naming a directory: exit 2 naming the option and path (exit $rc: $(head -c 200 "$W/bad.out"))"
done
"$PLAN_BIN" "$TINY" --analyze --trace >"$W/bad.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q -- "--trace needs a value" "$W/bad.out"
tap_ok $? "--trace without a file: exit 2 (exit $rc)"
mist_mpirun --timeout 60 -np 1 "$TRAIN" "$TINY" -o train.steps=2 -o plan.G=1 -o stage.0.dp=1 -o stage.0.b=16 \
    -o log.trace="$W" -o log.jsonl="$W/bad.jsonl" >"$W/bad.out" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "\[log\] trace: .*$W.* is a directory" "$W/bad.out" && [ ! -s "$W/bad.jsonl" ]
tap_ok $? "[log] trace naming a directory: the run stops before training, naming the key and path (exit $rc: $(grep -m1 "trace" "$W/bad.out"))"
"$PLAN_BIN" "$TINY" --analyze -o log.trace_iteration=0 >"$W/bad.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "trace_iteration" "$W/bad.out"
tap_ok $? "[log] trace_iteration = 0: exit 2 naming the key (exit $rc: $(head -c 200 "$W/bad.out"))"
tap_end
