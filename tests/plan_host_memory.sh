#!/bin/sh
# Host memory is a constraint of the plan: a node's host memory ([cluster]
# host_memory, else the profile's host_memory_gib) is shared by its ranks, and
# a stage whose host bytes per rank (offloaded states and activations, I/O and
# pipeline buffers) exceed that share does not fit. --analyze reports it
# (exit 3, "NO (host)", host_shortfall_bytes); the search only returns plans
# within it, and says so when the closest plan misses on the host.
. "$MIST_SRCDIR/tests/lib.sh"
PLAN="$MIST_BUILDDIR/mist-plan"
GPT22="$MIST_SRCDIR/examples/gpt3-22b.ini"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ON2="-o plan.mode=auto --nodes 1 --gpus-per-node 2 --hardware gcp-l4"

# the largest host_bytes over the stages of a --json answer
max_host() { grep -o '"host_bytes": [0-9]*' "$1" | cut -d' ' -f2 | sort -n | tail -1; }
field() { grep -o "\"$2\": [0-9]*" "$1" | head -1 | cut -d' ' -f2; }

# 1. without a host limit that binds (10000 GiB per node), GPT-3 22B on two L4s offloads more
#    than the L4 preset's node (384 GB, 10% left to the OS) can hold for two ranks
"$PLAN" "$GPT22" $ON2 -o cluster.host_memory=10000GiB --out "$tmp/free.ini" --json >"$tmp/free.json" 2>"$tmp/err"
rc=$?
free_host=$(max_host "$tmp/free.json")
budget=$(awk 'BEGIN{printf "%.0f", 0.9 * 384e9 / 2}')
[ $rc -eq 0 ] && [ -n "$free_host" ] && [ "$free_host" -gt "$budget" ]
tap_ok $? "22B on 2 L4 with 10000 GiB of host: the plan keeps $free_host host bytes per rank (> $budget)"
[ $rc -eq 0 ] || tap_diag "rc $rc" "$(cat "$tmp/err")"

# 2. the preset's host memory: every stage of the plan within the per-rank share
"$PLAN" "$GPT22" $ON2 --out "$tmp/l4.ini" --json >"$tmp/l4.json" 2>"$tmp/err"
rc=$?
cap=$(field "$tmp/l4.json" host_capacity_bytes)
l4_host=$(max_host "$tmp/l4.json")
[ $rc -eq 0 ] && [ "$cap" = "$budget" ] && [ -n "$l4_host" ] && [ "$l4_host" -le "$cap" ] &&
    grep -q '"fits": true' "$tmp/l4.json"
tap_ok $? "with the l4 preset's host memory: host_capacity_bytes $cap, the plan keeps $l4_host per rank"
[ $rc -eq 0 ] || tap_diag "rc $rc" "$(cat "$tmp/err")"

# 3. the first plan analyzed under the preset: the host does not fit, exit 3, named in the
#    table, the text and the JSON
"$PLAN" "$GPT22" --hardware gcp-l4 -o cluster.nodes=1 -o cluster.gpus_per_node=2 --analyze "$tmp/free.ini" >"$tmp/a.txt" 2>"$tmp/a.err"
rc=$?
[ $rc -eq 3 ] && grep -q 'NO (host)' "$tmp/a.txt" && grep -q 'does not fit the host' "$tmp/a.txt" &&
    grep -q 'does not fit the host: needs [0-9]* bytes per rank, has [0-9]*, short by [0-9]* bytes' "$tmp/a.err" &&
    grep -q 'hint:' "$tmp/a.err"
tap_ok $? "--analyze of that plan under the preset: exit 3, 'NO (host)' and the host shortfall"
[ $rc -eq 3 ] || tap_diag "rc $rc" "$(cat "$tmp/a.txt" "$tmp/a.err")"
"$PLAN" "$GPT22" --hardware gcp-l4 -o cluster.nodes=1 -o cluster.gpus_per_node=2 --analyze "$tmp/free.ini" --json >"$tmp/a.json" 2>/dev/null
short=$(field "$tmp/a.json" host_shortfall_bytes)
want=$((free_host - budget))
[ "$short" = "$want" ] && grep -q '"fits": false' "$tmp/a.json"
tap_ok $? "--json: host_shortfall_bytes = host bytes - share ($short = $free_host - $budget)"

# 4. the same plan with enough host memory for it fits again
"$PLAN" "$GPT22" --hardware gcp-l4 -o cluster.nodes=1 -o cluster.gpus_per_node=2 -o cluster.host_memory=10000GiB \
    --analyze "$tmp/free.ini" >/dev/null 2>&1
tap_ok $? "--analyze of it with 10000 GiB of host per node: fits (exit 0)"

# 5. a node with 8 GiB of host memory: no 22B plan fits on two L4s; the report names the host
"$PLAN" "$GPT22" $ON2 -o cluster.host_memory=8GiB >"$tmp/n.txt" 2>"$tmp/n.err"
rc=$?
[ $rc -eq 3 ] && grep -q 'and 4.00 GiB of host memory per rank' "$tmp/n.err" && grep -q 'no plan fits' "$tmp/n.err"
tap_ok $? "8 GiB of host per node: exit 3, the report states the host share (4.00 GiB per rank)"
[ $rc -eq 3 ] || tap_diag "rc $rc" "$(cat "$tmp/n.err")"

# 6. Llama-70B on one node of 8 L4s: its states alone (parameters x 16 bytes) exceed all device and
#    host memory together, so no plan can fit; the search is skipped (an instant answer), the
#    report gives both totals and still names the closest plan
L70="$MIST_SRCDIR/examples/llama-70b.ini"
"$PLAN" "$L70" -o plan.mode=auto --nodes 1 --gpus-per-node 8 --hardware gcp-l4 --json >"$tmp/s.json" 2>"$tmp/s.err"
rc=$?
params=$(field "$tmp/s.json" params_total)
states=$(field "$tmp/s.json" states_bytes)
memory=$(field "$tmp/s.json" cluster_memory_bytes)
dev=$(field "$tmp/s.json" capacity_bytes)
hostcap=$(field "$tmp/s.json" host_capacity_bytes)
searched=$(field "$tmp/s.json" combinations_searched)
[ $rc -eq 3 ] && [ -n "$params" ] && [ "$states" = "$((params * 16))" ] &&
    [ "$memory" = "$((8 * (dev + hostcap)))" ] && [ "$states" -gt "$memory" ] && [ "$searched" = 0 ] &&
    grep -q "no plan can fit: the model's states alone" "$tmp/s.err" && grep -q 'Closest:' "$tmp/s.err"
tap_ok $? "70B on 8 L4s: states $states B (params x 16) > $memory B of device + host memory: exit 3, search skipped"
[ $rc -eq 3 ] || tap_diag "rc $rc" "$(cat "$tmp/s.err")"

# 7. where the states do fit in device + host memory together, the search runs (22B on one L4:
#    349 GB of states, 370 GB of memory) and still finds nothing, without the states message
"$PLAN" "$GPT22" -o plan.mode=auto --nodes 1 --gpus-per-node 1 --hardware gcp-l4 --json >"$tmp/o.json" 2>"$tmp/o.err"
rc=$?
[ $rc -eq 3 ] && ! grep -q 'states_bytes' "$tmp/o.json" && ! grep -q 'no plan can fit' "$tmp/o.err" &&
    grep -q 'no plan fits' "$tmp/o.err"
tap_ok $? "22B on one L4: states within device + host memory, searched, nothing fits (exit 3)"
[ $rc -eq 3 ] || tap_diag "rc $rc" "$(cat "$tmp/o.err")"

tap_end
