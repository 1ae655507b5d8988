// Device and host memory of one stage, per rank (docs/design.md §5), in closed
// form. The arithmetic is the training runtime's, term for term: on the CPU
// backend the peaks below equal the arena high-water marks mist-train
// measures on every rank, for single stages at any tp and for every stage of
// a 1F1B pipeline (runtime/model_memory.c mr_memory_predict, runtime/zero.c
// zero_predict, runtime/pipeline_run.c; tests/plan_runtime_memory.sh checks
// it to the byte). Arenas count tensor sizes, not the 256-byte
// alignment padding between carved tensors (runtime/arena.h), so no rounding
// to the alignment appears here.
//
// ---- states: units, ZeRO shards, offload (runtime/zero.h)
// A unit is one part of the stage: pre (embedding), each block, post (final
// norm and head); count P = its parameters per TP rank. A pipeline stage has
// pre only if it is the first and post only if it is the last, except that
// the last stage of a tied-head model holds a copy of wte (not wpe) as its
// pre unit for the head. Under ZeRO >= 1 every
// unit is padded to a multiple of dp:
//   shard = ceil(P / d),  padded = d * shard,  d = dp if zero >= 1 else 1,
// so even an unsharded state (weights under ZeRO-1, 2) stores `padded`
// elements. Elements stored per state: n_W = shard if zero = 3 else padded,
// n_G = shard if zero >= 2 else padded, n_O = shard. An offload ratio f moves
// the last floor(f * n) elements of each unit to the host arena:
//   device = n - floor(f * n),  host = floor(f * n)   (per unit, per state).
// Bytes: W and G x bytes per element (x = 4 fp32, 2 bf16), optimizer state
// 4 bytes per array, 2 arrays (m, v) in fp32 training (the weights are the
// master) or 3 (fp32 master, m, v) in bf16.
//
// ---- buffers (persistent: taken once, live through the whole step)
// Staging of full units for compute, when weights are gathered or offloaded
// (W sharded, G or I, or wo > 0), and likewise for gradients (G sharded or go > 0):
//   x * (padded_pre + padded_post + 2 * padded_block)   each
// (a slot for the pre and post units, a double-buffered ring for blocks).
// Swap buffers: go > 0: x * max_u n_G (the accumulation view of a unit's
// stored gradient); oo > 0: 4 * k * max_u n_O (k = 2 or 3 optimizer arrays).
// I/O, carved on every stage whether or not it embeds or computes the loss:
// a 4-byte grad-norm accumulator, int32 token ids for each of the K = p + 1
// in-flight slots, int32 targets and fp32 per-token losses (N = b*s each):
//   4 + 4N (K + 1) + 4N,
// and at tp > 1 3N fp32 of vocabulary-parallel cross-entropy statistics.
// The pipeline boundary (runtime/pipeline_run.c): per neighbouring stage one
// receive and two send buffers (a send may still be in flight while the next
// one is filled) of the (b, s, h) residual stream or its gradient, in device
// memory (the comm backend moves them device to device): 3 x N h per neighbour.
//
// ---- activations of one micro-batch (bytes from models/model.h)
//   X  the block input x (the one tensor a checkpointed block keeps)
//   R  a block's other saved tensors (ln1 .. act)
//   S  the projection scratch, D the backward gradient buffers (d_*)
//   O  the share of R a non-checkpointed block keeps on the host between its
//      forward and backward: whole tensors, the largest first while their sum
//      stays <= ao * R (runtime/model_memory.c act_offload_mask); it comes
//      back into one device workspace of O bytes
//   H  the head (last stage): the last block's output, final norm + stats,
//      logits (losses are I/O above)
//   A  selective recompute (sel = 1; else A = 0): the part of R a block not
//      checkpointed does not keep, att and lse (models/model.h sel_recompute);
//      the block running holds them in one workspace of A bytes, forward and
//      backward (recomputed there from qkv); it offloads O's tensors less
//      att and lse (O shrinks by the part of A the scan took)
// The last c = min(ckpt, L) blocks are checkpointed. Between its forward and
// its backward one micro-batch keeps
//   M = L * X + (L - c) * (R - A - O).
// Forward peaks in the last block (live bytes only grow in forward): M plus
// its output x, the scratch, and its working tensors not counted in M: all of
// R when checkpointed (the recompute workspace), else the swap and selective
// workspaces O + A:
//   T_fwd = X + S + (c >= 1 ? R : O + A)
// then on the last stage the head: H; backward starts with the head and the
// gradient buffers, H + D, and peaks in its first block (the last one):
//   T_bwd = D + (c >= 1 ? R + S : O + A)
// (the last block's output is freed by then; later blocks hold less).
//
// ---- 1F1B: K = min(S - i, G) micro-batches in flight on stage i (p = K - 1)
// The stage runs w = min(S - i - 1, G) warm-up forwards, then (G - w) pairs
// of one forward and one backward, then w backwards. A forward ends holding
// its M more than it started with (a stage that is not the last copies its
// output x into a host send buffer and frees it) and peaks T_fwd above that
// end; a backward starts with its M, peaks T_bwd above it and ends M lower;
// the shared workspaces (recompute R, swap O, scratch, D) are taken and
// given back inside one pass. So between passes j micro-batches hold
// exactly j M, and
//   forward: runs with at most K - 1 sets saved (if G <= S - i - 1 every
//     forward is a warm-up one and the last has G - 1 = K - 1; otherwise
//     every steady forward has w = K - 1): peak (K - 1) M + M + T_fwd
//   backward: the first one starts with K sets: peak K M + T_bwd
// i.e. not K times a one-micro-batch peak: the transients count once.
// The last stage has K = 1, so its head H never meets a second set:
//   peak_fwd = states + buffers + K M + max(T_fwd, [post] H)
//   peak_bwd = states + buffers + K M + max(T_bwd, [post] (H + D))
// Host: offloaded states + K (L - c) O (each set's swapped-out tensors wait
// on the host until its backward) + token staging (ids, targets, losses: 4N
// each) + every DP rank's losses of a micro-batch (4 dp N).
//
// Outputs: weights, grads, optimizer (device parts of the states), buffers
// (both phases), activations = K M + [post] H, logits = H,
// transient_fwd = max(T_fwd, [post] H), transient_bwd = max(T_bwd, [post]
// (H + D)), so peak = states + buffers + (activations - logits) + transient.
// host = the host arena's peak (everything on it is live at the turn).
//
// Generality beyond what the runtime runs: tp > 1 inside a pipeline stage
// follows the same accounting (sizes per TP rank, the tp terms above on
// every stage) but has no runtime to compare with yet.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "models/model.h"
#include "planner/cost_terms.h"

// value_at[l] for tp = 2^l; larger tp uses the last level
static Expr select_tp(ExprCtx *x, Expr tp, const Expr *value_at) {
    return cost_select_power_of_two(x, tp, value_at, MEM_TP_LEVELS);
}

// ---- activation classes of a part, per TP rank, as the runtime sorts them
enum { MAX_REST = MODEL_MAX_ACTS };

static int act_class(ModelPart part, const ActSpec *a) {
    if (part == PART_POST) {
        if (!strcmp(a->name, "logits")) return AC_LOGITS;
        if (!strcmp(a->name, "losses")) return AC_LOSSES;
        if (!strcmp(a->name, "x")) return AC_X;
        return AC_REST;  // final norm output and statistics
    }
    if (a->ckpt_saved) return AC_X;
    if (a->saved) return AC_REST;
    if (!strcmp(a->name, "scratch")) return AC_SCRATCH;
    if (!strcmp(a->name, "ln_full")) return AC_GATHER;
    return AC_GRADS;
}

// runtime/activations.h MR_LEAN_DROP and MR_LEAN_{GELU,SWIGLU}_DROP_MASK, by models/'s names
int memory_lean_drops(const ModelConfig *m, const ActSpec *a) {
    if (!a->saved || a->ckpt_saved) return 0;
    if (!strcmp(a->name, "ln1_mean") || !strcmp(a->name, "mid") || !strcmp(a->name, "ln2_mean")) return 1;
    return !strcmp(a->name, m->activation == ACT_SWIGLU ? "act" : "fc");
}

static void act_level(const ModelConfig *m, ModelPart part, int tp, int sp, int elt, ActLevel *lv) {
    memset(lv, 0, sizeof *lv);
    lv->valid = 1;
    for (int bb = 0; bb < 2; bb++) {
        ActSpec acts[MODEL_MAX_ACTS];
        int n = model_acts_sp(m, part, bb + 1, m->seq_len, tp, sp, acts, MODEL_MAX_ACTS);
        if (n < 0) {
            lv->valid = 0;
            return;
        }
        int k = 0;
        for (int i = 0; i < n; i++) {
            double bytes = (double)acts[i].elems * (acts[i].f32 ? 4 : elt);
            int c = act_class(part, &acts[i]);
            lv->at_b[bb][c] += bytes;
            if (c == AC_REST && acts[i].sel_recompute) lv->at_b[bb][AC_SEL] += bytes;
            if (c == AC_REST && part == PART_BLOCK && memory_lean_drops(m, &acts[i])) lv->at_b[bb][AC_LEAN] += bytes;
            if (c == AC_REST && part == PART_BLOCK && k < MAX_REST) {
                lv->rest_sel[k] = acts[i].sel_recompute;
                lv->rest_b[bb][k++] = bytes;
            }
        }
        lv->n_rest = k;
    }
}

void memory_act_levels(const ModelConfig *model, ModelPart part, int elt, ActLevel out[MEM_TP_LEVELS]) {
    ModelConfig m = *model;
    if (m.kv_heads <= 0) m.kv_heads = m.heads;
    for (int l = 0; l < MEM_TP_LEVELS; l++) act_level(&m, part, 1 << l, 0, elt, &out[l]);
}

void memory_act_levels_sp(const ModelConfig *model, ModelPart part, int elt, ActLevel out[MEM_TP_LEVELS]) {
    ModelConfig m = *model;
    if (m.kv_heads <= 0) m.kv_heads = m.heads;
    for (int l = 0; l < MEM_TP_LEVELS; l++) act_level(&m, part, 1 << l, 1, elt, &out[l]);
}

void memory_sp_terms(const ModelConfig *model, int elt, const ActLevel plain[MEM_TP_LEVELS],
                     const ActLevel with_sp[MEM_TP_LEVELS], SpTerms *t) {
    ModelConfig m = *model;
    if (m.kv_heads <= 0) m.kv_heads = m.heads;
    memset(t, 0, sizeof *t);
    // at tp = 2 with and without sp, tensor by tensor: a sequence-sharded tensor's
    // whole size is the same at every tp (Q); the others differ only if sp adds them (E)
    for (int bb = 0; bb < 2; bb++) {
        ActSpec a0[MODEL_MAX_ACTS], a1[MODEL_MAX_ACTS];
        int n0 = model_acts_sp(&m, PART_BLOCK, bb + 1, m.seq_len, 2, 0, a0, MODEL_MAX_ACTS);
        int n1 = model_acts_sp(&m, PART_BLOCK, bb + 1, m.seq_len, 2, 1, a1, MODEL_MAX_ACTS);
        if (n0 < 0 || n1 != n0) return;
        for (int i = 0; i < n0; i++) {
            double b0 = (double)a0[i].elems * (a0[i].f32 ? 4 : elt), b1 = (double)a1[i].elems * (a1[i].f32 ? 4 : elt);
            int c = act_class(PART_BLOCK, &a1[i]);
            if (a0[i].seq) t->shard_b[bb][c] += b0;
            else t->extra_b[bb][c] += b1 - b0;
            if (c == AC_REST && memory_lean_drops(&m, &a1[i])) {  // the lean class's share, alike
                if (a0[i].seq) t->shard_b[bb][AC_LEAN] += b0;
                else t->extra_b[bb][AC_LEAN] += b1 - b0;
            }
        }
    }
    for (int l = 0; l < MEM_TP_LEVELS; l++) {
        double tp = (double)(1 << l);
        t->valid[l] = with_sp[l].valid;
        if (!with_sp[l].valid || !plain[l].valid) continue;
        for (int bb = 0; bb < 2; bb++)
            for (int c = 0; c < AC_OFFLOAD; c++) {
                double q = t->shard_b[bb][c];
                if (plain[l].at_b[bb][c] - (q - q / tp) + t->extra_b[bb][c] != with_sp[l].at_b[bb][c]) return;
            }
    }
    t->affine = 1;
}

// O: scan R's tensors largest first, taking each whose addition keeps the
// sum <= ao * R. Every size is b times a constant, so the choice depends on
// ao only and is made on the b = 1 sizes. *kept_off: the same choice less the
// tensors selective recompute does not keep (AC_SEL: att, lse), what a block
// under selective recompute offloads (runtime/model_memory.c act_offload_mask).
//
// One scan serves every tp level: slot i holds the i-th largest tensor of the
// level that tp selects (its size and bytes picked by select_tp, constants
// only, which the search's batches hoist since tp is uniform there), so a
// stage's program runs the scan once per candidate instead of once per level.
// A level with fewer tensors pads with size 0: taking it adds +0 to both sums
// (taken <= budget always), so each level's result is its own scan's, bitwise.
// R's tensors of each level largest first, as sizes at b = 1 and affine in b
// (bytes through (1, s1), (2, s2): as cost_bytes_by_tp); levels not valid stay empty
typedef struct {
    double size[MEM_TP_LEVELS][MAX_REST], icpt[MEM_TP_LEVELS][MAX_REST], slope[MEM_TP_LEVELS][MAX_REST];
    double keep[MEM_TP_LEVELS][MAX_REST];  // 1: a block under selective recompute keeps it (not att, lse)
    double rest[MEM_TP_LEVELS];  // R at b = 1 (the budget's base)
    int slots;
} RestSlots;

static void rest_slots(const ActLevel lv[MEM_TP_LEVELS], RestSlots *r) {
    memset(r, 0, sizeof *r);
    for (int l = 0; l < MEM_TP_LEVELS; l++) {
        if (!lv[l].valid) continue;
        r->rest[l] = lv[l].at_b[0][AC_REST];
        int order[MAX_REST], n = 0;
        for (int i = 0; i < lv[l].n_rest; i++)
            if (lv[l].rest_b[0][i] > 0) order[n++] = i;
        for (int i = 1; i < n; i++)  // insertion sort, largest first (stable)
            for (int j = i; j > 0 && lv[l].rest_b[0][order[j]] > lv[l].rest_b[0][order[j - 1]]; j--) {
                int t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
        for (int i = 0; i < n; i++) {
            double s1 = lv[l].rest_b[0][order[i]], s2 = lv[l].rest_b[1][order[i]];
            r->size[l][i] = s1;
            r->keep[l][i] = !lv[l].rest_sel[order[i]];
            r->slope[l][i] = s2 - s1;
            r->icpt[l][i] = s1 - r->slope[l][i];
        }
        if (n > r->slots) r->slots = n;
    }
}

// the value at this candidate's level of a per-level table, plain or (sp = 1) sequence-parallel
static Expr pick_level(ExprCtx *x, Expr tp, Expr sp, const double *plain, const double *with_sp) {
    Expr p[MEM_TP_LEVELS], q[MEM_TP_LEVELS];
    for (int l = 0; l < MEM_TP_LEVELS; l++) p[l] = ex_num(x, plain[l]), q[l] = ex_num(x, with_sp ? with_sp[l] : 0);
    Expr e = select_tp(x, tp, p);
    return with_sp ? ex_select(x, sp, select_tp(x, tp, q), e) : e;
}

// The scan over the levels lv, or (lv_sp not NULL) over lv or lv_sp as the
// stage symbol sp says: one scan whose slot sizes are picked per candidate.
// Returns O; *kept_off: the same choice less what selective recompute does not keep.
static Expr offload_bytes_sp(ExprCtx *x, Expr b, Expr tp, Expr ao, const ActLevel lv[MEM_TP_LEVELS], Expr sp,
                             const ActLevel *lv_sp, Expr *kept_off) {
    RestSlots r[2];  // plain, sp
    rest_slots(lv, &r[0]);
    if (lv_sp) rest_slots(lv_sp, &r[1]);
    int slots = r[0].slots > r[1].slots || !lv_sp ? r[0].slots : r[1].slots, all_valid = 1;
    for (int l = 0; l < MEM_TP_LEVELS; l++) all_valid &= lv[l].valid;
    // Every tensor of the shipped models is b times its b = 1 size (intercept 0,
    // slope = size): then O = b * taken, one product instead of a second sum
    // carried through the scan. Both are exact (integer bytes far below 2^53),
    // so the two forms give the same bits; a model with an intercept keeps the sum.
    int proportional = 1;
    for (int k = 0; k < (lv_sp ? 2 : 1); k++)
        for (int l = 0; l < MEM_TP_LEVELS; l++)
            for (int i = 0; i < slots; i++)
                proportional &= r[k].icpt[l][i] == 0 && r[k].slope[l][i] == r[k].size[l][i];
    const RestSlots *q = lv_sp ? &r[1] : NULL;
    Expr budget = ex_mul(x, ao, pick_level(x, tp, sp, r[0].rest, q ? q->rest : NULL));
    Expr taken = ex_num(x, 0), off = ex_num(x, 0), taken_k = ex_num(x, 0), off_k = ex_num(x, 0);
    for (int i = 0; i < slots; i++) {
        double s[2][MEM_TP_LEVELS], a[2][MEM_TP_LEVELS], k[2][MEM_TP_LEVELS];
        double sk[2][MEM_TP_LEVELS], ak[2][MEM_TP_LEVELS], kk[2][MEM_TP_LEVELS];
        for (int v = 0; v < 2; v++)
            for (int l = 0; l < MEM_TP_LEVELS; l++) {
                s[v][l] = r[v].size[l][i], a[v][l] = r[v].icpt[l][i], k[v][l] = r[v].slope[l][i];
                sk[v][l] = r[v].keep[l][i] * s[v][l], ak[v][l] = r[v].keep[l][i] * a[v][l];
                kk[v][l] = r[v].keep[l][i] * k[v][l];
            }
        Expr si = pick_level(x, tp, sp, s[0], q ? s[1] : NULL);
        Expr with = ex_add(x, taken, si);
        Expr over = ex_sub(x, with, budget);  // > 0: the tensor does not fit, skip it
        // one select per slot: equal to taken + take * si for take in {0, 1}
        // (taken + 0 * si = taken, taken + 1 * si = with), bitwise
        if (!proportional) {
            off = ex_select(x, over, off,
                            ex_add(x, off, ex_add(x, pick_level(x, tp, sp, a[0], q ? a[1] : NULL),
                                                  ex_mul(x, pick_level(x, tp, sp, k[0], q ? k[1] : NULL), b))));
            off_k = ex_select(x, over, off_k,
                              ex_add(x, off_k, ex_add(x, pick_level(x, tp, sp, ak[0], q ? ak[1] : NULL),
                                                      ex_mul(x, pick_level(x, tp, sp, kk[0], q ? kk[1] : NULL), b))));
        }
        taken = ex_select(x, over, taken, with);
        taken_k = ex_select(x, over, taken_k, ex_add(x, taken_k, pick_level(x, tp, sp, sk[0], q ? sk[1] : NULL)));
    }
    if (proportional) off = ex_mul(x, b, taken), off_k = ex_mul(x, b, taken_k);
    *kept_off = off_k;
    if (all_valid) return off;
    // a tp the model cannot split into: impossible bytes, as for the other classes
    Expr per_level[MEM_TP_LEVELS], per_level_k[MEM_TP_LEVELS];
    for (int l = 0; l < MEM_TP_LEVELS; l++) {
        per_level[l] = lv[l].valid ? off : ex_num(x, 1e30);
        per_level_k[l] = lv[l].valid ? off_k : ex_num(x, 1e30);
    }
    *kept_off = select_tp(x, tp, per_level_k);
    return select_tp(x, tp, per_level);
}

static Expr offload_bytes(ExprCtx *x, Expr b, Expr tp, Expr ao, const ActLevel lv[MEM_TP_LEVELS], Expr *kept_off) {
    return offload_bytes_sp(x, b, tp, ao, lv, EXPR_NONE, NULL, kept_off);
}

// every class of a part (AC_OFFLOAD, the last: O, blocks only) as expressions
// of b, tp, ao from the levels lv
static void act_classes_of(StageBuild *sb, ModelPart part, const ActLevel *lv, Expr out[AC_COUNT]) {
    ExprCtx *x = sb->x;
    Expr b = sb->s[SYM_B], tp = sb->s[SYM_TP];
    double at1[MEM_TP_LEVELS], at2[MEM_TP_LEVELS];
    int valid[MEM_TP_LEVELS];
    for (int c = 0; c < AC_OFFLOAD; c++) {
        for (int l = 0; l < MEM_TP_LEVELS; l++)
            at1[l] = lv[l].at_b[0][c], at2[l] = lv[l].at_b[1][c], valid[l] = lv[l].valid;
        out[c] = cost_bytes_by_tp(x, b, tp, at1, at2, valid, MEM_TP_LEVELS);
    }
    if (part != PART_BLOCK) {
        out[AC_OFFLOAD] = sb->zero;
        return;
    }
    // selective recompute (sel = 1) offloads the same choice less att and lse, which it does not keep
    Expr kept_off, off = offload_bytes(x, b, tp, sb->s[SYM_AO], lv, &kept_off);
    out[AC_OFFLOAD] = ex_select(x, sb->s[SYM_SEL], kept_off, off);
}

// A of a block (att, lse: what selective recompute does not keep), bytes per
// TP rank as an expression of b and tp, whether or not sel is set
Expr memory_sel_bytes(StageBuild *sb) {
    const ActLevel *lv = sb->me->acts_block;
    double at1[MEM_TP_LEVELS], at2[MEM_TP_LEVELS];
    int valid[MEM_TP_LEVELS];
    for (int l = 0; l < MEM_TP_LEVELS; l++)
        at1[l] = lv[l].at_b[0][AC_SEL], at2[l] = lv[l].at_b[1][AC_SEL], valid[l] = lv[l].valid;
    return cost_bytes_by_tp(sb->x, sb->s[SYM_B], sb->s[SYM_TP], at1, at2, valid, MEM_TP_LEVELS);
}

// What a lean block ([stage.N] lean, not checkpointed) saves against a plain
// one, bytes per TP rank as an expression of b, tp and sp, whether or not lean
// is set: the tensors it does not keep (AC_LEAN: ln1_mean, mid, ln2_mean, and a
// GELU model's fc, a SwiGLU model's act) less the GELU's branch bits it keeps
// instead, ceil(b s F / tp / 8) bytes (runtime/activations.h fc_mask).
Expr memory_lean_saved_bytes(StageBuild *sb, Expr drop) {
    ExprCtx *x = sb->x;
    const ModelConfig *m = &sb->cfg->model;
    if (m->activation == ACT_SWIGLU) return drop;
    Expr bits = ex_mul(x, sb->s[SYM_B], ex_num(x, (double)m->seq_len * m->ffn_hidden));
    Expr mask = ex_ceil(x, ex_div(x, bits, ex_mul(x, ex_num(x, 8), sb->s[SYM_TP])));
    return ex_sub(x, drop, mask);
}

// a + k b from the values at b = 1 and 2 (k b when a = 0)
static Expr affine_b(ExprCtx *x, Expr b, double at1, double at2) {
    double slope = at2 - at1, intercept = at1 - slope;
    Expr kb = ex_mul(x, ex_num(x, slope), b);
    return intercept == 0 ? kb : ex_add(x, ex_num(x, intercept), kb);
}

// A part's classes; the block's under sequence parallelism (symbol sp = 1):
// sequence-sharded X and part of R at 1/tp, the gathered norm output G, the
// norm-gradient buffer in D (docs/tensor-parallel.md), in closed form
// (SpTerms) or, where that does not hold, from the sp levels themselves
static void act_classes(StageBuild *sb, ModelPart part, Expr out[AC_COUNT]) {
    const ModelExprs *me = sb->me;
    act_classes_of(sb, part, part == PART_BLOCK ? me->acts_block : me->acts_post, out);
    if (part != PART_BLOCK) return;
    ExprCtx *x = sb->x;
    Expr sp = sb->s[SYM_SP], b = sb->s[SYM_B], tp = sb->s[SYM_TP];
    Expr with_sp[AC_COUNT];
    if (!me->sp_terms.affine) {
        act_classes_of(sb, part, me->acts_block_sp, with_sp);
        for (int c = 0; c < AC_COUNT; c++) out[c] = ex_select(x, sp, with_sp[c], out[c]);
        return;
    }
    // the offload scan takes whole tensors, whose sizes sp changes: its own scan,
    // unless the pattern offloads no activations (ao is the constant 0: both are 0)
    if (sb->s[SYM_AO] != sb->zero) {
        Expr kept_off, off = offload_bytes_sp(x, b, tp, sb->s[SYM_AO], me->acts_block, sp, me->acts_block_sp, &kept_off);
        out[AC_OFFLOAD] = ex_select(x, sb->s[SYM_SEL], kept_off, off);
    }
    const SpTerms *t = &me->sp_terms;
    for (int c = 0; c < AC_OFFLOAD; c++) {
        if (t->shard_b[0][c] != 0 || t->shard_b[1][c] != 0) {
            Expr q = affine_b(x, b, t->shard_b[0][c], t->shard_b[1][c]);
            out[c] = ex_sub(x, out[c], ex_mul(x, sp, ex_sub(x, q, ex_div(x, q, tp))));
        }
        if (t->extra_b[0][c] != 0 || t->extra_b[1][c] != 0)
            out[c] = ex_add(x, out[c], ex_mul(x, sp, affine_b(x, b, t->extra_b[0][c], t->extra_b[1][c])));
    }
    // where sp cannot split the rows (tp = 1, tp not dividing b*s): bytes that never fit
    Expr bad[MEM_TP_LEVELS];
    for (int l = 0; l < MEM_TP_LEVELS; l++) bad[l] = ex_num(x, t->valid[l] ? 0 : 1e30);
    out[AC_X] = ex_add(x, out[AC_X], ex_mul(x, sp, select_tp(x, tp, bad)));
}

// ---- states of one unit
typedef struct {
    Expr padded;          // elements of the unit in the flat layout
    Expr n_w, n_g, n_o;   // elements stored per state on this rank
} Unit;

static Unit unit_of(StageBuild *sb, Expr count) {
    ExprCtx *x = sb->x;
    Unit u;
    Expr shard = ex_ceil(x, ex_div(x, count, sb->pad));
    u.padded = ex_mul(x, shard, sb->pad);
    // an I scope keeps padded / g (g divides dp: whole elements)
    Expr piece = ex_div(x, u.padded, sb->g);
    u.n_w = ex_select(x, sb->s[SYM_WS], shard, ex_select(x, sb->wi, piece, u.padded));
    u.n_g = ex_select(x, sb->s[SYM_GS], shard, ex_select(x, sb->gi, piece, u.padded));
    u.n_o = ex_select(x, sb->s[SYM_OS], shard, ex_select(x, sb->oi, piece, u.padded));
    return u;
}

// wte's elements per TP rank (rows split over tp: vocabulary-parallel)
static Expr wte_params(StageBuild *sb) {
    ExprCtx *x = sb->x;
    ParamSpec spec[MODEL_MAX_PARAMS];
    int n = model_params(&sb->cfg->model, PART_PRE, spec, MODEL_MAX_PARAMS);
    for (int i = 0; i < n; i++) {
        if (strcmp(spec[i].name, "wte") != 0) continue;
        Expr rows = ex_num(x, (double)spec[i].rows), cols = ex_num(x, (double)spec[i].cols), tp = sb->s[SYM_TP];
        if (spec[i].tp_split == 1) return ex_mul(x, ex_ceil(x, ex_div(x, rows, tp)), cols);
        if (spec[i].tp_split == 2) return ex_mul(x, rows, ex_ceil(x, ex_div(x, cols, tp)));
        return ex_mul(x, rows, cols);
    }
    return sb->zero;
}

// elements of n that an offload ratio f moves to the host: floor(f * n)
static Expr host_part(StageBuild *sb, Expr n, Expr f) { return ex_floor(sb->x, ex_mul(sb->x, f, n)); }

typedef struct {
    Expr w, g, o;  // device elements
    Expr hw, hg, ho;  // host elements
} StateElems;

static void add_unit(StageBuild *sb, StateElems *t, const Unit *u, Expr times) {
    ExprCtx *x = sb->x;
    Expr hw = host_part(sb, u->n_w, sb->s[SYM_WO]), hg = host_part(sb, u->n_g, sb->s[SYM_GO]);
    Expr ho = host_part(sb, u->n_o, sb->s[SYM_OO]);
    t->w = ex_add(x, t->w, ex_mul(x, times, ex_sub(x, u->n_w, hw)));
    t->g = ex_add(x, t->g, ex_mul(x, times, ex_sub(x, u->n_g, hg)));
    t->o = ex_add(x, t->o, ex_mul(x, times, ex_sub(x, u->n_o, ho)));
    t->hw = ex_add(x, t->hw, ex_mul(x, times, hw));
    t->hg = ex_add(x, t->hg, ex_mul(x, times, hg));
    t->ho = ex_add(x, t->ho, ex_mul(x, times, ho));
}

void memory_build(StageBuild *sb, Expr out[ST_OUTPUTS]) {
    ExprCtx *x = sb->x;
    const ModelExprs *me = sb->me;
    Expr L = sb->s[SYM_L], p = sb->s[SYM_P], b = sb->s[SYM_B], dp = sb->s[SYM_DP];
    Expr c = ex_min(x, sb->s[SYM_CKPT], L);
    Expr zero = sb->zero, one = sb->one;
    Expr xb = ex_num(x, me->param_bytes);      // bytes per weight / gradient element
    Expr ob = ex_num(x, me->optimizer_bytes);  // bytes per parameter of optimizer state (all arrays)

    // ---- states
    Unit blk = unit_of(sb, me->block.params), pre = {0}, post = {0};
    StateElems se = {zero, zero, zero, zero, zero, zero};
    add_unit(sb, &se, &blk, L);
    Expr max_g = blk.n_g, max_o = blk.n_o;
    Expr staging = ex_mul(x, ex_num(x, 2), blk.padded);  // the block ring
    if (sb->has_pre) {
        pre = unit_of(sb, me->pre.params);
        add_unit(sb, &se, &pre, one);
        max_g = ex_max(x, max_g, pre.n_g), max_o = ex_max(x, max_o, pre.n_o);
        staging = ex_add(x, staging, pre.padded);
    } else if (sb->has_post && sb->cfg->model.tied_embeddings) {
        // the last stage's copy of wte for its tied head: its pre unit
        pre = unit_of(sb, wte_params(sb));
        add_unit(sb, &se, &pre, one);
        max_g = ex_max(x, max_g, pre.n_g), max_o = ex_max(x, max_o, pre.n_o);
        staging = ex_add(x, staging, pre.padded);
    }
    if (sb->has_post) {
        post = unit_of(sb, me->post.params);
        add_unit(sb, &se, &post, one);
        max_g = ex_max(x, max_g, post.n_g), max_o = ex_max(x, max_o, post.n_o);
        staging = ex_add(x, staging, post.padded);
    }
    Expr weights = ex_mul(x, xb, se.w), grads = ex_mul(x, xb, se.g), optimizer = ex_mul(x, ob, se.o);
    Expr states = ex_add(x, weights, ex_add(x, grads, optimizer));
    Expr host_states = ex_add(x, ex_mul(x, xb, ex_add(x, se.hw, se.hg)), ex_mul(x, ob, se.ho));

    // ---- buffers
    Expr staged_w = ex_max(x, ex_max(x, sb->s[SYM_WS], sb->wi), cost_gt0(sb, sb->s[SYM_WO]));
    Expr staged_g = ex_max(x, ex_max(x, sb->s[SYM_GS], sb->gi), cost_gt0(sb, sb->s[SYM_GO]));
    Expr buffers = ex_mul(x, ex_add(x, staged_w, staged_g), ex_mul(x, xb, staging));
    buffers = ex_add(x, buffers, ex_mul(x, cost_gt0(sb, sb->s[SYM_GO]), ex_mul(x, xb, max_g)));
    buffers = ex_add(x, buffers, ex_mul(x, cost_gt0(sb, sb->s[SYM_OO]), ex_mul(x, ob, max_o)));
    Expr tokens = ex_mul(x, ex_num(x, 4.0 * sb->cfg->model.seq_len), b);  // 4N: one int32 / fp32 per token
    // I/O, the same on every stage (the runtime carves it whether or not the
    // stage embeds or computes the loss): the grad-norm accumulator, token ids
    // for each of the p + 1 slots, targets, per-token losses; at tp > 1 the
    // vocabulary-parallel cross-entropy's row max, sum of exps and target
    // logit per token (3N fp32)
    Expr ac_post[AC_COUNT];
    act_classes(sb, PART_POST, ac_post);
    Expr io = ex_add(x, ex_num(x, 4), ex_mul(x, ex_add(x, p, ex_num(x, 2)), tokens));
    io = ex_add(x, io, ac_post[AC_LOSSES]);
    io = ex_add(x, io, ex_mul(x, cost_gt0(sb, ex_sub(x, sb->s[SYM_TP], one)), ex_mul(x, ex_num(x, 3), tokens)));
    // the pipeline boundary: the (b, s, h) activation or its gradient, one
    // receive and two send buffers per neighbouring stage, in device memory
    Expr boundary = ex_mul(x, ex_num(x, (double)me->param_bytes * sb->cfg->model.seq_len * sb->cfg->model.hidden), b);
    int neighbours = !sb->has_pre + !sb->has_post;
    io = ex_add(x, io, ex_mul(x, ex_num(x, 3.0 * neighbours), boundary));
    buffers = ex_add(x, buffers, io);
    // host: token ids, targets, losses, every DP rank's losses of a micro-batch
    Expr host_io = ex_mul(x, ex_add(x, ex_num(x, 3), dp), tokens);

    // ---- activations
    Expr ac[AC_COUNT];
    act_classes(sb, PART_BLOCK, ac);
    Expr X = ac[AC_X], R = ac[AC_REST], S = ac[AC_SCRATCH], D = ac[AC_GRADS], O = ac[AC_OFFLOAD];
    // selective recompute: a block not checkpointed keeps R - A, and the one
    // running holds A (att, lse) in the selective workspace
    Expr A = ex_mul(x, sb->s[SYM_SEL], ac[AC_SEL]);
    Expr Gx = ac[AC_GATHER];  // sp: the gathered norm output, 0 without
    Expr normal = ex_sub(x, L, c);  // blocks that keep R - A - O (- Λ when lean)
    // lean: a block not checkpointed keeps Λ less (memory_lean_saved_bytes; lean excludes ao > 0)
    Expr Lam = ex_mul(x, sb->s[SYM_LEAN], memory_lean_saved_bytes(sb, ac[AC_LEAN]));
    Expr M = ex_add(x, ex_mul(x, L, X), ex_mul(x, normal, ex_sub(x, ex_sub(x, ex_sub(x, R, A), O), Lam)));
    Expr last_ck = cost_gt0(sb, c);  // the last block is checkpointed
    Expr OA = ex_add(x, O, A);       // the swap and selective workspaces
    // lean SwiGLU: act X(N, F/tp) is a forward transient of a lean block (the d_act buffer)
    Expr lean_act = sb->zero;
    if (sb->cfg->model.activation == ACT_SWIGLU)
        lean_act = ex_mul(x, sb->s[SYM_LEAN],
                          ex_div(x, ex_mul(x, b, ex_num(x, (double)me->param_bytes * sb->cfg->model.seq_len *
                                                               sb->cfg->model.ffn_hidden)), sb->s[SYM_TP]));
    Expr T_fwd = ex_add(x, ex_add(x, X, S), ex_select(x, last_ck, R, ex_add(x, OA, lean_act)));
    Expr T_bwd = ex_add(x, D, ex_select(x, last_ck, ex_add(x, R, S), OA));
    // sp: the gathered norm output lives with the scratch in forward and with D in
    // backward; the last block's output is the whole (N,C) stage output (the post
    // part's x) where the other blocks' are their N/tp rows
    Expr sp_fwd = ex_add(x, Gx, ex_sub(x, ac_post[AC_X], X));
    T_fwd = ex_add(x, T_fwd, ex_select(x, sb->s[SYM_SP], sp_fwd, zero));
    T_bwd = ex_add(x, T_bwd, Gx);
    Expr kept = ex_mul(x, ex_add(x, p, one), M);  // this and the in-flight micro-batches
    Expr head = zero, work_fwd = T_fwd, work_bwd = T_bwd;
    if (sb->has_post) {
        head = ex_add(x, ac_post[AC_X], ex_add(x, ac_post[AC_REST], ac_post[AC_LOGITS]));
        work_fwd = ex_max(x, T_fwd, head);
        work_bwd = ex_max(x, T_bwd, ex_add(x, head, ex_add(x, D, Gx)));
    }
    Expr base = ex_add(x, ex_add(x, states, buffers), kept);
    Expr host_acts = ex_mul(x, ex_add(x, p, one), ex_mul(x, normal, O));

    // identities: peak_fwd = weights + grads + optimizer + buffers + (activations - logits) + transient_fwd,
    // likewise backward
    out[ST_PEAK_FWD] = ex_add(x, base, work_fwd);
    out[ST_PEAK_BWD] = ex_add(x, base, work_bwd);
    out[ST_WEIGHTS] = weights;
    out[ST_GRADS] = grads;
    out[ST_OPTIMIZER] = optimizer;
    out[ST_ACTIVATIONS] = ex_add(x, kept, head);  // at the turn the head is alive too
    out[ST_BUFFERS_FWD] = buffers;
    out[ST_BUFFERS_BWD] = buffers;
    out[ST_TRANSIENT_FWD] = work_fwd;
    out[ST_TRANSIENT_BWD] = work_bwd;
    out[ST_LOGITS] = head;
    out[ST_HOST] = ex_add(x, host_states, ex_add(x, host_io, host_acts));
}
