#!/usr/bin/env python3
"""An independent reader of mist-export's output, in Python's standard library only.

  safetensors_check.py check FILE.safetensors CHECKPOINT.ckpt
      Validates the safetensors file (8-byte header length, JSON header,
      dtypes, shapes, data offsets tiling the buffer), prints a SHA-256 of the
      data, then reads the mist checkpoint (docs/checkpoint-format.md) and
      checks every exported tensor equals the checkpoint's after the
      documented mapping (docs/weights.md): GPT-2 Conv1D weights transposed,
      Llama q/k/v and gate/up split from the fused rows; BF16 as the
      round-to-nearest-even of the fp32 value.
  safetensors_check.py logits FILE.safetensors FAMILY PROMPT HEADS KV_HEADS MIST_OUT
      Compares mist-sample --show-logits K output (MIST_OUT: "id logit" lines)
      with the next-token logits of the model as Hugging Face defines it.
  safetensors_check.py write-llmc FILE.safetensors OUT.bin VERSION
      Writes the GPT-2 tensors as an llm.c checkpoint (version 3 fp32, 5 bf16).
Exit status 1 with a message on any disagreement.
"""
import array, hashlib, json, math, struct, sys


def fail(msg):
    print("safetensors_check: " + msg, file=sys.stderr)
    sys.exit(1)


def read_safetensors(path):
    data = open(path, "rb").read()
    if len(data) < 8:
        fail("%s: shorter than the 8-byte header length" % path)
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        fail("%s: header length %d exceeds the file" % (path, n))
    header = json.loads(data[8:8 + n].decode("utf-8"))
    buf = data[8 + n:]
    tensors, end = {}, 0
    items = sorted(((k, v) for k, v in header.items() if k != "__metadata__"), key=lambda kv: kv[1]["data_offsets"][0])
    for name, t in items:
        b, e = t["data_offsets"]
        size = {"F32": 4, "BF16": 2}.get(t["dtype"])
        if size is None:
            fail("%s: tensor %s has dtype %s (mist writes F32 or BF16)" % (path, name, t["dtype"]))
        if b != end:
            fail("%s: tensor %s starts at %d, the previous one ends at %d (a hole or an overlap)" % (path, name, b, end))
        if (e - b) != size * math.prod(t["shape"]):
            fail("%s: tensor %s: %d bytes for shape %s" % (path, name, e - b, t["shape"]))
        raw = buf[b:e]
        if t["dtype"] == "BF16":
            vals = array.array("f", struct.pack("<%dI" % (len(raw) // 2), *(h << 16 for h in array.array("H", raw))))
        else:
            vals = array.array("f", raw)
        tensors[name] = (t["dtype"], t["shape"], vals)
        end = e
    if end != len(buf):
        fail("%s: the tensors cover %d of the %d data bytes" % (path, end, len(buf)))
    return header, buf, tensors


def read_checkpoint(path):
    """The param/ tensors of a mist checkpoint as (shape, fp32 array)."""
    d = open(path, "rb").read()
    if d[:8] != b"MISTCKPT":
        fail("%s is not a mist checkpoint" % path)
    count, index = struct.unpack_from("<QQ", d, 24)
    out, model = {}, ""
    for i in range(count):
        e = index + 224 * i
        name = d[e:e + 128].split(b"\0")[0].decode()
        kind, dtype, ndim = struct.unpack_from("<III", d, e + 128)
        shape = struct.unpack_from("<%dq" % ndim, d, e + 144)
        off, size = struct.unpack_from("<QQ", d, e + 208)
        if name == "state/model":
            model = d[off:off + size].decode()
        if kind == 0 and dtype == 0 and name.startswith("param/"):
            out[name[6:]] = (list(shape), array.array("f", d[off:off + size]))
    return out, dict(w.split("=") for w in model.split())


def bf16_round(x):
    (u,) = struct.unpack("<I", struct.pack("<f", x))
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return struct.unpack("<f", struct.pack("<I", u & 0xFFFFFFFF))[0]


BLOCK = {"ln1_w": "ln_1.weight", "ln1_b": "ln_1.bias", "qkv_w": "attn.c_attn.weight", "qkv_b": "attn.c_attn.bias",
         "attn_proj_w": "attn.c_proj.weight", "attn_proj_b": "attn.c_proj.bias", "ln2_w": "ln_2.weight",
         "ln2_b": "ln_2.bias", "fc_w": "mlp.c_fc.weight", "fc_b": "mlp.c_fc.bias", "fc_proj_w": "mlp.c_proj.weight",
         "fc_proj_b": "mlp.c_proj.bias"}
LLAMA = {"ln1_w": "input_layernorm.weight", "attn_proj_w": "self_attn.o_proj.weight",
         "ln2_w": "post_attention_layernorm.weight", "fc_proj_w": "mlp.down_proj.weight"}
TOP = {"wte": ("transformer.wte.weight", "model.embed_tokens.weight"), "wpe": ("transformer.wpe.weight", None),
       "lnf_w": ("transformer.ln_f.weight", "model.norm.weight"), "lnf_b": ("transformer.ln_f.bias", None),
       "lm_head_w": ("lm_head.weight", "lm_head.weight")}


def pieces(name, shape, model):
    """[(hf name, first row, rows, transposed)] for one mist tensor (docs/weights.md)."""
    rows = shape[0]
    llama = model["family"] == "llama"
    if name in TOP:
        return [(TOP[name][1 if llama else 0], 0, rows, False)]
    _, layer, base = name.split(".", 2)
    if not llama:
        return [("transformer.h.%s.%s" % (layer, BLOCK[base]), 0, rows, len(shape) == 2 and base.endswith("_w")
                 and not base.startswith("ln"))]
    p = "model.layers.%s." % layer
    if base == "qkv_w":
        hd = int(model["hidden"]) // int(model["heads"])
        q, kv = int(model["heads"]) * hd, int(model["kv_heads"]) * hd
        return [(p + "self_attn.q_proj.weight", 0, q, False), (p + "self_attn.k_proj.weight", q, kv, False),
                (p + "self_attn.v_proj.weight", q + kv, kv, False)]
    if base == "fc_w":
        f = rows // 2
        return [(p + "mlp.gate_proj.weight", 0, f, False), (p + "mlp.up_proj.weight", f, f, False)]
    return [(p + LLAMA[base], 0, rows, False)]


def check(st_path, ckpt_path):
    header, buf, tensors = read_safetensors(st_path)
    params, model = read_checkpoint(ckpt_path)
    seen = set()
    for name, (shape, vals) in params.items():
        cols = shape[1] if len(shape) == 2 else 1
        for hf, r0, rows, transposed in pieces(name, shape, model):
            if hf not in tensors:
                fail("%s: %s (from %s) is missing" % (st_path, hf, name))
            dtype, hshape, got = tensors[hf]
            want_shape = ([cols, rows] if transposed else [rows, cols]) if len(shape) == 2 else [rows]
            if hshape != want_shape:
                fail("%s: %s has shape %s, expected %s" % (st_path, hf, hshape, want_shape))
            for r in range(rows):
                for c in range(cols):
                    v = vals[(r0 + r) * cols + c]
                    if dtype == "BF16":
                        v = bf16_round(v)
                    g = got[c * rows + r] if transposed else got[r * cols + c]
                    if struct.pack("<f", g) != struct.pack("<f", v):
                        fail("%s: %s[%d,%d] = %r, the checkpoint's %s gives %r" % (st_path, hf, r, c, g, name, v))
            seen.add(hf)
    extra = set(tensors) - seen
    if extra:
        fail("%s: tensors not in the checkpoint: %s" % (st_path, sorted(extra)))
    print("%d tensors, %d data bytes, sha256 %s: every value equals the checkpoint's"
          % (len(tensors), len(buf), hashlib.sha256(buf).hexdigest()))


# ---- the models as Hugging Face defines them, on plain lists ----
def mat(t):
    """a 2-D tensor as a list of rows"""
    _, shape, v = t
    return [v[i * shape[1]:(i + 1) * shape[1]] for i in range(shape[0])]


def linear_in_out(x, w, b=None):  # x @ W (+ b), W (in, out): Conv1D
    out = [0.0] * len(w[0])
    for xi, row in zip(x, w):
        for j, wij in enumerate(row):
            out[j] += xi * wij
    return [o + bj for o, bj in zip(out, b)] if b else out


def linear_out_in(x, w, b=None):  # x @ W^T (+ b), W (out, in): nn.Linear
    out = [sum(a * c for a, c in zip(x, row)) for row in w]
    return [o + bj for o, bj in zip(out, b)] if b else out


def layernorm(x, w, b, eps=1e-5):
    m = sum(x) / len(x)
    var = sum((a - m) ** 2 for a in x) / len(x)
    return [(a - m) / math.sqrt(var + eps) * wi + bi for a, wi, bi in zip(x, w, b)]


def rmsnorm(x, w, eps):
    r = 1 / math.sqrt(sum(a * a for a in x) / len(x) + eps)
    return [a * r * wi for a, wi in zip(x, w)]


def attention(qs, ks, vs, nh, nkv, hd):
    out = []
    for t, q in enumerate(qs):
        row = []
        for h in range(nh):
            g = h // (nh // nkv)
            qh = q[h * hd:(h + 1) * hd]
            s = [sum(a * b for a, b in zip(qh, ks[u][g * hd:(g + 1) * hd])) / math.sqrt(hd) for u in range(t + 1)]
            mx = max(s)
            e = [math.exp(a - mx) for a in s]
            z = sum(e)
            row += [sum(e[u] / z * vs[u][g * hd + i] for u in range(t + 1)) for i in range(hd)]
        out.append(row)
    return out


def rotate(x, t, nheads, hd, theta=10000.0):  # HF rotate_half: pairs (i, i + hd/2)
    y = list(x)
    for h in range(nheads):
        for i in range(hd // 2):
            a = t / theta ** (2 * i / hd)
            x1, x2 = x[h * hd + i], x[h * hd + i + hd // 2]
            y[h * hd + i] = x1 * math.cos(a) - x2 * math.sin(a)
            y[h * hd + i + hd // 2] = x2 * math.cos(a) + x1 * math.sin(a)
    return y


def gelu(x):
    return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def gpt2_logits(T, toks, nh):
    wte = mat(T["transformer.wte.weight"])
    xs = [[a + b for a, b in zip(wte[tok], mat(T["transformer.wpe.weight"])[t])] for t, tok in enumerate(toks)]
    C, l = len(wte[0]), 0
    while "transformer.h.%d.ln_1.weight" % l in T:
        g = lambda n: T["transformer.h.%d.%s" % (l, n)][2]
        m = lambda n: mat(T["transformer.h.%d.%s" % (l, n)])
        qkv = [linear_in_out(layernorm(x, g("ln_1.weight"), g("ln_1.bias")), m("attn.c_attn.weight"),
                             g("attn.c_attn.bias")) for x in xs]
        att = attention([r[:C] for r in qkv], [r[C:2 * C] for r in qkv], [r[2 * C:] for r in qkv], nh, nh, C // nh)
        xs = [[a + b for a, b in zip(x, linear_in_out(y, m("attn.c_proj.weight"), g("attn.c_proj.bias")))]
              for x, y in zip(xs, att)]
        for i, x in enumerate(xs):
            h = [gelu(v) for v in linear_in_out(layernorm(x, g("ln_2.weight"), g("ln_2.bias")), m("mlp.c_fc.weight"),
                                                g("mlp.c_fc.bias"))]
            xs[i] = [a + b for a, b in zip(x, linear_in_out(h, m("mlp.c_proj.weight"), g("mlp.c_proj.bias")))]
        l += 1
    last = layernorm(xs[-1], T["transformer.ln_f.weight"][2], T["transformer.ln_f.bias"][2])
    return linear_out_in(last, wte)


def llama_logits(T, toks, nh, nkv, eps=1e-6):
    emb = mat(T["model.embed_tokens.weight"])
    xs = [list(emb[tok]) for tok in toks]
    C, l = len(emb[0]), 0
    hd = C // nh
    while "model.layers.%d.input_layernorm.weight" % l in T:
        g = lambda n: T["model.layers.%d.%s" % (l, n)][2]
        m = lambda n: mat(T["model.layers.%d.%s" % (l, n)])
        ln = [rmsnorm(x, g("input_layernorm.weight"), eps) for x in xs]
        qs = [rotate(linear_out_in(x, m("self_attn.q_proj.weight")), t, nh, hd) for t, x in enumerate(ln)]
        ks = [rotate(linear_out_in(x, m("self_attn.k_proj.weight")), t, nkv, hd) for t, x in enumerate(ln)]
        vs = [linear_out_in(x, m("self_attn.v_proj.weight")) for x in ln]
        att = attention(qs, ks, vs, nh, nkv, hd)
        xs = [[a + b for a, b in zip(x, linear_out_in(y, m("self_attn.o_proj.weight")))] for x, y in zip(xs, att)]
        for i, x in enumerate(xs):
            h = rmsnorm(x, g("post_attention_layernorm.weight"), eps)
            gate, up = linear_out_in(h, m("mlp.gate_proj.weight")), linear_out_in(h, m("mlp.up_proj.weight"))
            act = [a / (1 + math.exp(-a)) * b for a, b in zip(gate, up)]
            xs[i] = [a + b for a, b in zip(x, linear_out_in(act, m("mlp.down_proj.weight")))]
        l += 1
    head = T.get("lm_head.weight", T["model.embed_tokens.weight"])
    return linear_out_in(rmsnorm(xs[-1], T["model.norm.weight"][2], eps), mat(head))


def compare_logits(st_path, family, prompt, heads, kv_heads, mist_out):
    """mist-sample --show-logits K output against the logits of the model as HF defines it"""
    _, _, T = read_safetensors(st_path)
    toks = list(prompt.encode())
    z = gpt2_logits(T, toks, heads) if family == "gpt" else llama_logits(T, toks, heads, kv_heads)
    rows = [line.split() for line in open(mist_out) if line.strip()]
    if not rows:
        fail("%s: no logits" % mist_out)
    worst = 0.0
    for tok, logit in rows:
        d = abs(z[int(tok)] - float(logit))
        worst = max(worst, d)
        if d > 1e-4 * max(1.0, abs(z[int(tok)])):
            fail("token %s: mist logit %s, the %s model's %.9g" % (tok, logit, family, z[int(tok)]))
    ranked = sorted(range(len(z)), key=lambda v: (-z[v], v))[:len(rows)]
    close = [int(t) for t, _ in rows] == ranked or all(abs(z[int(t)] - z[r]) < 1e-4
                                                         for (t, _), r in zip(rows, ranked))
    if not close:
        fail("mist's top %d tokens %s, the %s model's %s" % (len(rows), [r[0] for r in rows], family, ranked))
    print("top %d next tokens and their logits agree (largest difference %.2e)" % (len(rows), worst))


def write_llmc(st_path, out, version):
    _, _, T = read_safetensors(st_path)
    wte, wpe = T["transformer.wte.weight"], T["transformer.wpe.weight"]
    V, C = wte[1]
    L = 0
    while "transformer.h.%d.ln_1.weight" % L in T:
        L += 1
    nh = int(sys.argv[5]) if len(sys.argv) > 5 else 4
    Vp = (V // 128 + 1) * 128  # padded as llm.c pads (50257 -> 50304), at least one row more
    hdr = [20240326, version, wpe[1][0], V, L, nh, C, Vp] + [0] * 248
    def tr(name):  # Conv1D (in, out) back to llm.c's (out, in)
        _, (i, o), v = T[name]
        return [v[r * o + c] for c in range(o) for r in range(i)]
    arrays = [list(wte[2]) + [0.0] * ((Vp - V) * C), list(wpe[2])]
    for n, t in [("ln_1.weight", 0), ("ln_1.bias", 0), ("attn.c_attn.weight", 1), ("attn.c_attn.bias", 0),
                 ("attn.c_proj.weight", 1), ("attn.c_proj.bias", 0), ("ln_2.weight", 0), ("ln_2.bias", 0),
                 ("mlp.c_fc.weight", 1), ("mlp.c_fc.bias", 0), ("mlp.c_proj.weight", 1), ("mlp.c_proj.bias", 0)]:
        arrays.append([x for l in range(L) for x in (tr("transformer.h.%d.%s" % (l, n)) if t
                                                       else T["transformer.h.%d.%s" % (l, n)][2])])
    arrays += [list(T["transformer.ln_f.weight"][2]), list(T["transformer.ln_f.bias"][2])]
    with open(out, "wb") as f:
        f.write(struct.pack("<256i", *hdr))
        for a in arrays:
            if version == 5:
                f.write(array.array("H", (struct.unpack("<I", struct.pack("<f", bf16_round(x)))[0] >> 16
                                          for x in a)).tobytes())
            else:
                f.write(array.array("f", a).tobytes())


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "check":
        check(sys.argv[2], sys.argv[3])
    elif cmd == "logits":
        compare_logits(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), sys.argv[7])
    elif cmd == "write-llmc":
        write_llmc(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        fail("usage: see the docstring")
