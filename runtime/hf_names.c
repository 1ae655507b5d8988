// mist tensor names -> Hugging Face GPT-2 / Llama names (runtime/hf_names.h).
#include "runtime/hf_names.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *mist;   // name within a block, or a whole-model name
    const char *gpt2;   // GPT-2 name (after "transformer.h.N." for block tensors)
    const char *llama;  // Llama name (after "model.layers.N.")
    int conv1d;         // GPT-2 stores it transposed
} HfName;

static const HfName BLOCK_NAMES[] = {
    {"ln1_w", "ln_1.weight", "input_layernorm.weight", 0},
    {"ln1_b", "ln_1.bias", "input_layernorm.bias", 0},
    {"qkv_w", "attn.c_attn.weight", NULL, 1},
    {"qkv_b", "attn.c_attn.bias", NULL, 0},
    {"attn_proj_w", "attn.c_proj.weight", "self_attn.o_proj.weight", 1},
    {"attn_proj_b", "attn.c_proj.bias", "self_attn.o_proj.bias", 0},
    {"ln2_w", "ln_2.weight", "post_attention_layernorm.weight", 0},
    {"ln2_b", "ln_2.bias", "post_attention_layernorm.bias", 0},
    {"fc_w", "mlp.c_fc.weight", NULL, 1},
    {"fc_b", "mlp.c_fc.bias", NULL, 0},
    {"fc_proj_w", "mlp.c_proj.weight", "mlp.down_proj.weight", 1},
    {"fc_proj_b", "mlp.c_proj.bias", "mlp.down_proj.bias", 0},
};

static const HfName MODEL_NAMES[] = {
    {"wte", "transformer.wte.weight", "model.embed_tokens.weight", 0},
    {"wpe", "transformer.wpe.weight", "model.embed_positions.weight", 0},
    {"lnf_w", "transformer.ln_f.weight", "model.norm.weight", 0},
    {"lnf_b", "transformer.ln_f.bias", "model.norm.bias", 0},
    {"lm_head_w", "lm_head.weight", "lm_head.weight", 0},
};

static void piece(HfPiece *p, const char *name, int64_t row0, int64_t rows, int64_t cols, int transpose) {
    snprintf(p->name, sizeof p->name, "%s", name);
    p->row0 = row0, p->rows = rows, p->transpose = transpose;
    p->ndim = cols == 1 ? 1 : 2;
    p->shape[0] = transpose ? cols : rows;
    p->shape[1] = transpose ? rows : cols;
}

// Llama splits the fused tensors: qkv rows [q (a*hd) | k (kv*hd) | v (kv*hd)],
// SwiGLU fc rows [gate (F) | up (F)].
static int llama_split(const ModelConfig *m, const char *prefix, const char *base, int bias, int64_t cols,
                       HfPiece *out) {
    const char *kind = bias ? "bias" : "weight";
    char name[ST_NAME_MAX];
    if (!strcmp(base, "qkv")) {
        int64_t hd = m->hidden / m->heads, q = (int64_t)m->heads * hd, kv = (int64_t)m->kv_heads * hd;
        const char *parts[3] = {"q_proj", "k_proj", "v_proj"};
        int64_t rows[3] = {q, kv, kv}, row0 = 0;
        for (int i = 0; i < 3; i++) {
            snprintf(name, sizeof name, "%sself_attn.%s.%s", prefix, parts[i], kind);
            piece(&out[i], name, row0, rows[i], cols, 0);
            row0 += rows[i];
        }
        return 3;
    }
    int64_t F = m->ffn_hidden;
    if (m->activation != ACT_SWIGLU) {
        snprintf(name, sizeof name, "%smlp.up_proj.%s", prefix, kind);
        piece(&out[0], name, 0, F, cols, 0);
        return 1;
    }
    snprintf(name, sizeof name, "%smlp.gate_proj.%s", prefix, kind);
    piece(&out[0], name, 0, F, cols, 0);
    snprintf(name, sizeof name, "%smlp.up_proj.%s", prefix, kind);
    piece(&out[1], name, F, F, cols, 0);
    return 2;
}

int hf_pieces(const ModelConfig *m, const char *name, int64_t rows, int64_t cols, HfPiece *out) {
    int llama = m->family == FAMILY_LLAMA;
    char full[ST_NAME_MAX];
    for (size_t i = 0; i < sizeof MODEL_NAMES / sizeof *MODEL_NAMES; i++)
        if (!strcmp(name, MODEL_NAMES[i].mist)) {
            piece(out, llama ? MODEL_NAMES[i].llama : MODEL_NAMES[i].gpt2, 0, rows, cols, 0);
            return 1;
        }
    int layer, used = 0;
    if (sscanf(name, "block.%d.%n", &layer, &used) != 1 || used == 0) return -1;
    const char *rest = name + used;
    for (size_t i = 0; i < sizeof BLOCK_NAMES / sizeof *BLOCK_NAMES; i++) {
        const HfName *h = &BLOCK_NAMES[i];
        if (strcmp(rest, h->mist)) continue;
        if (!llama) {
            snprintf(full, sizeof full, "transformer.h.%d.%s", layer, h->gpt2);
            piece(out, full, 0, rows, cols, h->conv1d && cols > 1);
            return 1;
        }
        char prefix[64];
        snprintf(prefix, sizeof prefix, "model.layers.%d.", layer);
        if (!h->llama) {
            char base[8];
            snprintf(base, sizeof base, "%s", !strncmp(rest, "qkv", 3) ? "qkv" : "fc");
            return llama_split(m, prefix, base, rest[strlen(rest) - 1] == 'b', cols, out);
        }
        snprintf(full, sizeof full, "%s%s", prefix, h->llama);
        piece(out, full, 0, rows, cols, 0);
        return 1;
    }
    return -1;
}

static void add(char *buf, size_t len, const char *what) {
    size_t at = strlen(buf);
    snprintf(buf + at, len - at, "%s%s", at ? ", " : "", what);
}

void hf_incompatible(const ModelConfig *m, char *buf, size_t len) {
    int gpt = m->family != FAMILY_LLAMA;
    char text[96];
    buf[0] = '\0';
    if (m->norm != (gpt ? NORM_LAYERNORM : NORM_RMSNORM)) add(buf, len, gpt ? "RMSNorm" : "LayerNorm");
    if (m->activation != (gpt ? ACT_GELU : ACT_SWIGLU)) add(buf, len, gpt ? "SwiGLU" : "GELU");
    if (m->position != (gpt ? POS_LEARNED : POS_ROTARY))
        add(buf, len, m->position == POS_NONE ? "no positions" : gpt ? "rotary positions" : "learned positions");
    if (gpt && !m->bias) add(buf, len, "no biases");
    if (m->parallel_block) add(buf, len, "a parallel block");
    if (gpt && m->kv_heads != m->heads) {
        snprintf(text, sizeof text, "kv_heads %d < heads %d", m->kv_heads, m->heads);
        add(buf, len, text);
    }
    if (gpt && !m->tied_embeddings) add(buf, len, "an untied head (set tie_word_embeddings false)");
}
