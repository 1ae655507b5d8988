#!/bin/sh
# Bad input never crashes or hangs: the shipped examples, each mutated at
# random (a value replaced by a wrong one, a key deleted, a section or an
# unknown key inserted; a fixed seed, SEED=N for another set), go through
# mist-plan --analyze --json, mist-train --dry-run (half of them) and a
# mist-plan search (a third). Every run must end within 30 s with exit status 0, 2 or 3
# (no signal), and every exit 2 must name the configuration file on stderr.
# The same for hardware profile files and measured op tables.
. "$MIST_SRCDIR/tests/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$MIST_SRCDIR" "$MIST_BUILDDIR" "$tmp" "${SEED:-20261126}" >"$tmp/out" 2>&1 <<'PYEOF'
import glob, os, random, subprocess, sys
src, build, tmp, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rng = random.Random(seed)
examples = sorted(glob.glob(os.path.join(src, 'examples', '*.ini')))
values = ['0', '-1', '1', '3', '7', '1e308', 'nan', 'inf', '-inf', '', 'abc', '0.5', '-0.5', '1.5', '0x10', '3 4',
          '99999999999999999999', '4294967297', 'yes', 'llama', 'gpt', 'bf16', 'fp16', 'auto', 'fixed', 'megatron',
          ';', '=', 'x' * 150]
sections = ['[model]', '[train]', '[plan]', '[stage.0]', '[stage.1]', '[stage.9]', '[stage.-1]', '[cluster]', '[data]',
            '[log]', '[checkpoint]', '[', '[bogus]']
keys = ['stages', 'G', 'dp', 'tp', 'b', 'layers', 'zero', 'ckpt', 'wo', 'go', 'oo', 'ao', 'kv_heads', 'ffn_hidden',
        'heads', 'hidden', 'vocab', 'seq_len', 'global_batch', 'nodes', 'gpus_per_node', 'parallel_block',
        'tied_embeddings', 'mode', 'space', 'precision', 'steps', 'host_memory', 'bogus_key']
n, bad = 120, []
runs = {'mist-plan --analyze': 0, 'mist-train --dry-run': 0, 'mist-plan (search)': 0}
for i in range(n):
    ex = rng.choice(examples)
    lines = open(ex).read().split('\n')
    for _ in range(rng.randint(1, 3)):
        kv = [j for j, l in enumerate(lines) if '=' in l and not l.lstrip().startswith(';')]
        r = rng.random()
        if r < 0.55 and kv:
            j = rng.choice(kv)
            lines[j] = lines[j].split('=')[0] + '= ' + rng.choice(values)
        elif r < 0.7 and kv:
            del lines[rng.choice(kv)]
        elif r < 0.85:
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(sections))
        else:
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(keys) + ' = ' + rng.choice(values))
    path = os.path.join(tmp, 'fuzz%03d.ini' % i)
    open(path, 'w').write('\n'.join(lines))
    cmds = [('mist-plan --analyze', [os.path.join(build, 'mist-plan'), path, '--analyze', '--json'])]
    if i % 2 == 0:  # (an MPI start each: half of them)
        cmds.append(('mist-train --dry-run', [os.path.join(build, 'mist-train'), '--dry-run', path]))
    if i % 3 == 0:
        cmds.append(('mist-plan (search)', [os.path.join(build, 'mist-plan'), path, '--threads', '1']))
    for what, cmd in cmds:
        runs[what] += 1
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=tmp,
                               env=dict(os.environ, OMP_NUM_THREADS='1', OPENBLAS_NUM_THREADS='1'))
            rc, err = p.returncode, p.stderr
        except subprocess.TimeoutExpired:
            rc, err = 'timeout', ''
        if rc not in (0, 2, 3):
            bad.append('%s on %s (from %s): exit %s %s' % (what, path, os.path.basename(ex), rc, err[-300:]))
        elif rc == 2 and path not in err:
            bad.append('%s on %s: exit 2 without naming the file: %s' % (what, path, err[-300:]))
for what, count in runs.items():
    print('RUNS %s %d' % (what.replace(' ', '_'), count))
for b in bad:
    print('BAD ' + b.replace('\n', ' | '))
PYEOF
nbad=$(grep -c '^BAD ' "$tmp/out")
total=$(awk '/^RUNS / { s += $3 } END { print s + 0 }' "$tmp/out")
[ "$total" -gt 200 ] && [ "$nbad" -eq 0 ]
tap_ok $? "$total runs on 120 mutated examples (seed ${SEED:-20261126}): every exit 0, 2 or 3 within 30 s, every exit 2 names the file ($nbad bad)"
[ "$nbad" -eq 0 ] && [ "$total" -gt 200 ] || tap_diag "$(head -c 4000 "$tmp/out")"

# The other two files mist-plan reads: hardware profiles (--hardware FILE, from the example in
# docs/plan-analyze.md) and measured op tables (--op-table FILE), mutated the same way
python3 - "$MIST_SRCDIR" "$MIST_BUILDDIR" "$tmp" "${SEED:-20261126}" >"$tmp/out2" 2>&1 <<'PYEOF'
import os, random, subprocess, sys
src, build, tmp, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rng = random.Random(seed + 1)
doc = open(os.path.join(src, 'docs', 'plan-analyze.md')).read()
profile = doc.split('## Hardware profile files')[1].split('```ini')[1].split('```')[0].strip('\n').split('\n')
optable = ['mist-optable 1', '# op b s tp fwd_us bwd_us', 'qkv 4 64 1 3774 7459', 'attention 4 64 1 100 200',
           'lm_head 4 64 1 10 20', 'crossentropy 4 64 1 5 0']
values = ['0', '-1', '1', 'nan', 'inf', '1e11', '1e308', 'abc', '', '1 2 3', '5 -1', '2147483648', '0x10', '1e-300',
          'a100-40g', 'bogus', 'qkv', 'residual', 'mist-optable 2', '#', '[compute]', '64x8 = 1 1', 'C+C = 1 1',
          'x' * 300]
runs, bad = 0, []
for kind, base, flag in (('profile', profile, '--hardware'), ('op table', optable, '--op-table')):
    for i in range(120):
        lines = list(base)
        for _ in range(rng.randint(1, 3)):
            r = rng.random()
            if r < 0.5 and lines:
                j = rng.randrange(len(lines))
                f = lines[j].split()
                if f:
                    f[rng.randrange(len(f))] = rng.choice(values)
                    lines[j] = ' '.join(f)
            elif r < 0.7 and len(lines) > 1:
                del lines[rng.randrange(len(lines))]
            else:
                lines.insert(rng.randrange(len(lines) + 1), ' '.join(rng.choice(values) for _ in range(rng.randint(1, 6))))
        path = os.path.join(tmp, '%s%03d.txt' % (kind.replace(' ', ''), i))
        open(path, 'w').write('\n'.join(lines) + '\n')
        cmd = [os.path.join(build, 'mist-plan'), os.path.join(src, 'examples', 'tiny.ini'), '--analyze', flag, path]
        runs += 1
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
            rc, err = p.returncode, p.stderr
        except subprocess.TimeoutExpired:
            rc, err = 'timeout', ''
        if rc not in (0, 2, 3):
            bad.append('%s %s: exit %s %s' % (kind, path, rc, err[-300:]))
        elif rc == 2 and path not in err:
            bad.append('%s %s: exit 2 without naming the file: %s' % (kind, path, err[-300:]))
print('RUNS %d' % runs)
for b in bad:
    print('BAD ' + b.replace('\n', ' | '))
PYEOF
nbad=$(grep -c '^BAD ' "$tmp/out2")
runs=$(sed -n 's/^RUNS //p' "$tmp/out2")
[ "${runs:-0}" -eq 240 ] && [ "$nbad" -eq 0 ]
tap_ok $? "${runs:-0} runs of mist-plan --analyze on 120 mutated profile files and 120 mutated op tables: every exit 0, 2 or 3, every exit 2 names the file ($nbad bad)"
[ "$nbad" -eq 0 ] && [ "${runs:-0}" -eq 240 ] || tap_diag "$(head -c 4000 "$tmp/out2")"
tap_end
