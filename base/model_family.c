// What a model family means when a configuration names only the shape: the
// switches, widths and constants that config_load fills in for the keys a
// file does not set (docs/config.md, "Family defaults"). Tests and benchmarks
// that build a ModelConfig in code start from here, so they describe the same
// models as the configuration files.
#include <string.h>
#include "base/schema.h"

int model_vocab_padded(const ModelConfig *m) {
    int pad = m->vocab_pad > 1 ? m->vocab_pad : 1;
    return (int)(((int64_t)m->vocab + pad - 1) / pad * pad);
}

int model_default_ffn(ActKind activation, int hidden) {
    // SwiGLU (Llama): 2/3 of 4h, 8h/3 rounded down, then up to a multiple of 256
    // (4096 -> 11008, 5120 -> 13824); GELU: 4h
    if (activation == ACT_SWIGLU) return (int)((8L * hidden / 3 + 255) / 256 * 256);
    return 4 * hidden;
}

ModelConfig model_family_config(ModelFamily family, int layers, int hidden, int heads, int vocab, int seq_len) {
    ModelConfig m;
    memset(&m, 0, sizeof m);
    int llama = family == FAMILY_LLAMA;
    m.family = family;
    m.layers = layers, m.hidden = hidden, m.heads = heads, m.kv_heads = heads, m.vocab = vocab, m.seq_len = seq_len;
    m.vocab_pad = MODEL_VOCAB_PAD_DEFAULT;
    m.norm = llama ? NORM_RMSNORM : NORM_LAYERNORM;
    m.activation = llama ? ACT_SWIGLU : ACT_GELU;
    m.position = llama ? POS_ROTARY : POS_LEARNED;
    m.bias = !llama;
    m.tied_embeddings = !llama;
    m.ffn_hidden = model_default_ffn(m.activation, hidden);
    m.rope_theta = 10000.0;
    m.norm_eps = llama ? 1e-6 : 1e-5;
    m.init_std = 0.02;
    return m;
}
