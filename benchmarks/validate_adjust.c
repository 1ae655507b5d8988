// Stated runtime differences, priced (benchmarks/validate_adjust.h). Every term
// uses the row's hardware profile as the cost model does (docs/design.md,
// "Compute"): a kernel costs max(FLOPs / (peak * e), bytes / (bw * eff_bw)),
// e the GEMM model's full-wave efficiency (gemm_efficiency; flops_efficiency
// without the GEMM model); a collective is the profile's ring over the stage's
// data-parallel group (profile_collective_seconds). Nothing here is fitted to
// a row.
#include <math.h>
#include <string.h>
#include <stdio.h>

#include "benchmarks/validate_adjust.h"
#include "planner/stage_model.h"

const char *const adjust_names[ADJ_COUNT] = {"plain_attention", "attention_dropout", "grad_allreduce_after_backward",
                                             "fp32_grad_allreduce_after_backward", "grad_accumulation_add",
                                             "fp32_grad_accumulation_add"};

int adjust_parse(const char *name, char *allowed, size_t cap) {
    for (int k = 0; k < ADJ_COUNT; k++)
        if (!strcmp(name, adjust_names[k])) return k;
    size_t used = 0;
    allowed[0] = 0;
    for (int k = 0; k < ADJ_COUNT && used < cap; k++)
        used += (size_t)snprintf(allowed + used, cap - used, "%s%s", k ? ", " : "", adjust_names[k]);
    return -1;
}

typedef struct {
    double gemm_rate;   // FLOP/s of a full-wave GEMM
    double bw;          // bytes/s of a memory-bound kernel
    double elem;        // bytes per activation element
    double E;           // score elements per attention call per rank: b * ceil(a/tp) * s^2
    double bmm_flops;   // one s x s batched matmul (QK^T or PV, or one of their gradients): 2 b a_tp s^2 d
    double flash_fwd;   // our attention's forward time (the model's attention curve)
} AttentionShape;

static double kernel(double flops, double bytes, const AttentionShape *x) {
    return fmax(flops / x->gemm_rate, bytes / x->bw);
}

static AttentionShape attention_shape(const MistConfig *cfg, const HwProfile *hw, const StagePlan *sp) {
    const ModelConfig *m = &cfg->model;
    AttentionShape x;
    ComputeDtype dt = compute_dtype_of(cfg);
    double peak = hw->peak_flops[dt];
    x.gemm_rate = peak * (hw->gemm_sms > 0 ? hw->gemm_efficiency : hw->flops_efficiency);
    x.bw = hw->mem_bandwidth * hw->bandwidth_efficiency;
    x.elem = cfg->train.precision == PREC_FP32 ? 4 : 2;
    double s = m->seq_len, d = (double)m->hidden / m->heads;
    double a_tp = ceil((double)m->heads / sp->tp);
    x.E = sp->b * a_tp * s * s;
    x.bmm_flops = 2.0 * sp->b * a_tp * s * s * d;
    // the model's attention (planner/cost_terms.c, attention_efficiency): causal FLOPs
    // 2 b a_tp d s (s + 1) at peak * e_a(s, d); its reads and writes are O(s), not O(s^2)
    double e_a = hw->attention_efficiency > 0
                     ? hw->attention_efficiency * s / (s + hw->attention_seq_half) * d / (d + hw->attention_head_half)
                     : hw->flops_efficiency;
    x.flash_fwd = 2.0 * sp->b * a_tp * d * s * (s + 1) / (peak * e_a);
    return x;
}

// plain_attention: Megatron's (and the Mist artifact's unfused) attention. Forward: S = Q K^T
// writes the E scores, the fused scale-mask-softmax reads them and writes P, O = P V reads P;
// backward: dV = P^T dO reads P, dP = dO V^T writes dP, the softmax backward reads P and dP and
// writes dS, dQ = dS K and dK = dS^T Q read dS. Each matmul computes the whole s x s square
// (no causal skipping) and moves its scores: max(2 b a_tp s^2 d / gemm rate, elem E / bw); the
// softmax is memory-bound (2 elem E forward, 3 elem E backward). It replaces our attention
// (the model's causal flash-style time): the term is the difference, per call.
static void plain_attention(const AttentionShape *x, double *fwd, double *bwd) {
    double mm = kernel(x->bmm_flops, x->elem * x->E, x);
    double softmax_fwd = 2 * x->elem * x->E / x->bw, softmax_bwd = 3 * x->elem * x->E / x->bw;
    *fwd = 2 * mm + softmax_fwd - x->flash_fwd;
    *bwd = 4 * mm + softmax_bwd - 2.5 * x->flash_fwd;  // the model's backward: 2.5 x the forward FLOPs
}

// attention_dropout: dropout on P (Megatron: torch dropout after the fused softmax). Forward
// reads P, writes the dropped P and a one-byte mask; backward reads the gradient and the mask and
// writes the gradient: (2 elem + 1) E bytes each way, memory-bound.
static void attention_dropout(const AttentionShape *x, double *fwd, double *bwd) {
    *fwd = *bwd = (2 * x->elem + 1) * x->E / x->bw;
}

// grad_allreduce_after_backward: the stage's gradient buffer (the row's gradient bytes) all-reduced
// over its data-parallel group after the last backward, in one call that overlaps nothing
// (Megatron 2021's local DDP). The model already puts the exposed tail of its overlapped sync
// into the last backward (bwd_last - bwd_other); the term is the rest of the whole all-reduce.
// fp32_grad_allreduce_after_backward: the same with 4-byte gradients (DeepSpeed's bf16 optimizer
// accumulates and reduces fp32 gradients, in its pipeline engine after the last backward).
static double grad_allreduce_after_backward(const StageAnalysis *st, const MistConfig *cfg, const HwProfile *hw,
                                            int fp32) {
    const StagePlan *sp = &st->sp;
    if (sp->dp < 2) return 0;
    double grad_elem = cfg->train.precision == PREC_FP32 ? 4 : 2;
    // the whole stage's gradients per tp rank (ZeRO-2/3 keep a 1/dp shard of them)
    double bytes = st->out[ST_GRADS] * (sp->zero >= 2 ? sp->dp : 1) * (fp32 ? 4 / grad_elem : 1);
    int M = cfg->cluster.gpus_per_node > 0 ? cfg->cluster.gpus_per_node : 1;
    int stage_nodes = (sp->dp * sp->tp + M - 1) / M;
    int nodes = sp->dp < stage_nodes ? sp->dp : stage_nodes;  // DP groups span nodes first (cost_dp_collective)
    int gpus = (sp->dp + nodes - 1) / nodes;
    double whole = profile_collective_seconds(hw, COLL_ALL_REDUCE, bytes, nodes, gpus);
    double exposed = fmax(0, st->out[ST_BWD_LAST] - st->out[ST_BWD_OTHER]);
    return fmax(0, whole - exposed);
}

// grad_accumulation_add: PyTorch accumulates a parameter's gradient over micro-batches with an
// elementwise add into .grad (the first micro-batch's gradient is kept as it is), Megatron's DDP
// likewise into its main_grad buffer: per micro-batch after the first, read both and write one,
// 3 x the stage's gradient bytes, memory-bound; (G - 1) / G of it per micro-batch on average (the
// Mist artifact's own analyzer prices its grad-acc add the same way, and its L4 table's add of
// 50.3M fp16 elements in 1.249 ms is 242 GB/s, the L4 profile's 300 GB/s x 0.8). Ours needs no
// add: the weight-gradient GEMM accumulates into the gradient buffer.
// fp32_grad_accumulation_add: DeepSpeed's bf16 optimizer after every micro-batch's backward runs
// hp_grad.add_(lp.grad.to(float32)): the copy reads e and writes 4 bytes, the add reads 4 + 4 and
// writes 4, per parameter, every micro-batch (the fp32 gradients start at zero): (e + 16) / e x
// the stage's gradient bytes.
static double grad_accumulation_add(const StageAnalysis *st, const MistConfig *cfg, const HwProfile *hw, int G,
                                    int fp32) {
    double e = cfg->train.precision == PREC_FP32 ? 4 : 2, bw = hw->mem_bandwidth * hw->bandwidth_efficiency;
    if (fp32) return (e + 16) / e * st->out[ST_GRADS] / bw;
    return G > 1 ? (G - 1.0) / G * 3 * st->out[ST_GRADS] / bw : 0;
}

// The iteration with the adjustments of mask: per stage, per-call terms times the calls of one
// micro-batch (every block once forward and once backward, a checkpointed block's forward once
// more) go into the steady time t; the all-reduce into the edge time d.
static double iteration_with(const PlanAnalysis *a, const MistConfig *cfg, const HwProfile *hw, unsigned mask) {
    double t[MIST_MAX_STAGES], d[MIST_MAX_STAGES];
    for (int i = 0; i < a->num_stages; i++) {
        const StageAnalysis *st = &a->stage[i];
        t[i] = st->out[ST_T];
        d[i] = st->out[ST_D];
        AttentionShape x = attention_shape(cfg, hw, &st->sp);
        double fwd = 0, bwd = 0, f, b;
        if (mask & 1u << ADJ_PLAIN_ATTENTION) plain_attention(&x, &f, &b), fwd += f, bwd += b;
        if (mask & 1u << ADJ_ATTENTION_DROPOUT) attention_dropout(&x, &f, &b), fwd += f, bwd += b;
        t[i] += st->sp.layers * (fwd + bwd) + st->sp.ckpt * fwd;
        if (mask & 1u << ADJ_GRAD_ACCUMULATION_ADD) t[i] += grad_accumulation_add(st, cfg, hw, a->G, 0);
        if (mask & 1u << ADJ_FP32_GRAD_ACCUMULATION_ADD) t[i] += grad_accumulation_add(st, cfg, hw, a->G, 1);
        if (mask & 1u << ADJ_GRAD_ALLREDUCE_AFTER_BW) d[i] += grad_allreduce_after_backward(st, cfg, hw, 0);
        if (mask & 1u << ADJ_FP32_GRAD_ALLREDUCE_AFTER_BW) d[i] += grad_allreduce_after_backward(st, cfg, hw, 1);
    }
    return pipeline_1f1b_seconds(a->num_stages, a->G, t, d);
}

double adjust_iteration(const PlanAnalysis *a, const MistConfig *cfg, const HwProfile *hw, unsigned mask,
                        double each[ADJ_COUNT]) {
    double raw = iteration_with(a, cfg, hw, 0);
    for (int k = 0; k < ADJ_COUNT; k++)
        each[k] = mask & 1u << k ? iteration_with(a, cfg, hw, 1u << k) - raw : 0;
    return a->iteration_seconds + iteration_with(a, cfg, hw, mask) - raw;
}
