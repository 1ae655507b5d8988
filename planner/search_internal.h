// Shared state of the plan search (search.c, search_combo.c, search_space.c,
// search_stage.c, search_cand.c, search_uniform.c).
// Not part of the public interface: see planner/search.h.
#ifndef MIST_SEARCH_INTERNAL_H
#define MIST_SEARCH_INTERNAL_H

#include "planner/milp.h"
#include "planner/stage_model.h"
#include "planner/search.h"

#define SEARCH_MAX_MESHES 16
// Devices (nodes x GPUs per node) a search accepts: 2^20, several times the largest clusters
// built. Checked on the 64-bit product (mist-plan takes each factor up to 10^6, so the product
// can overflow int); past it the walks over stage counts and tp up to the device count stop
// being instant.
#define SEARCH_MAX_DEVICES (1 << 20)
// model chunks per pipeline rank the uniform spaces try (interleaved 1F1B)
#define SEARCH_MAX_VIRTUAL 8
// offload grid (largest): weights and grads in quarters, optimizer state and activations in eighths
#define SEARCH_WG_STEPS 4
#define SEARCH_OA_STEPS 8
#define SEARCH_GRID_MAX ((SEARCH_WG_STEPS + 1) * (SEARCH_WG_STEPS + 1) * (SEARCH_OA_STEPS + 1) * (SEARCH_OA_STEPS + 1))

typedef struct {
    int dp, tp;
} Mesh;

// Stage kinds: which edge parts the stage holds. Index = has_pre | has_post << 1.
enum { KIND_MIDDLE = 0, KIND_FIRST = 1, KIND_LAST = 2, KIND_ONLY = 3, KINDS = 4 };

// One evaluated stage configuration that fits. Offload ratios are grid steps:
// wo = wo_q / SEARCH_WG_STEPS etc., so they print and compare exactly.
typedef struct {
    double t, d;
    int mesh;                  // index into the combo's mesh list
    short ckpt;
    signed char zero;
    signed char sel, sp, lean; // recompute = selective; sequence parallelism; memory-lean layers
    unsigned char wo_q, go_q, oo_q, ao_q;
} Cand;

typedef struct {
    Cand *v;
    int n, cap;
} CandList;

// A stage's recomputation and sequence-sharding choice (the knobs a space lets vary together
// with the ZeRO level and the offload ratios).
typedef struct {
    short ckpt;        // checkpointed blocks
    signed char sel;   // 1: the other blocks recompute their attention core (recompute = selective)
    signed char sp;    // 1: sequence parallelism (tp > 1 only)
    signed char lean;  // 1: memory-lean layers on the blocks not checkpointed (no activation offload then)
} StageOpt;
// at most (l + 1) ckpt counts x 2 x 2 x 2, l <= 4096
#define SEARCH_MAX_STAGE_OPTS (8 * 4097)

// What a space lets each stage choose (after the limits).
typedef struct {
    int zero_mask;       // bit z: sharding code z (base/paro.h; 0..3 = ZeRO 0..3, 4..9 PaRO's with I scopes)
    int ckpt_any;        // 1: ckpt 0..l; 0: {0, l} (all or nothing), unless no_ckpt
    int ckpt_all;        // 1: every block recomputes (ckpt = l; megatron-mist), unless no_ckpt
    int no_ckpt;         // 1: ckpt = 0 only
    int sel;             // 1: recompute = selective allowed
    int sel_mixed;       // 1: selective also beside checkpointed blocks (else only with ckpt = 0, as Megatron-LM)
    int sp;              // 1: sequence parallelism allowed on meshes with tp > 1
    int lean;            // 1: memory-lean layers allowed (docs/lean-layers.md)
    int b_mask;          // bit b: micro-batch size b allowed (b < 31); 0: any
    int max_virtual;     // model chunks per pipeline rank the uniform spaces may interleave (1: plain 1F1B)
    int interleave_min_ranks;  // pipeline ranks an interleaved plan needs at least (2, or the runtime's limit)
    int offload;         // 1: offload ratios on the grid
    int uniform;         // 1: every stage has L/S layers and the same mesh
    int max_stages, max_tp, max_tp_staged;
    int wg_steps, oa_steps;  // offload grid: wo, go in multiples of 1/wg_steps; oo, ao of 1/oa_steps
    // q / wg_steps and q / oa_steps (space_grid fills them): batch rows take them millions of times
    double ratio_wg[SEARCH_WG_STEPS + 1], ratio_oa[SEARCH_OA_STEPS + 1];
} SpaceRules;

typedef struct Search {
    const MistConfig *cfg;  // = &cluster_cfg
    // the configuration with [cluster] nodes and gpus_per_node set to the searched cluster:
    // the cost model's collective group shapes and the mesh enumeration must agree
    MistConfig cluster_cfg;
    const HwProfile *hw;
    const OpTable *table;
    const SearchOptions *opt;
    SearchStats *stats;
    SpaceRules rules;
    int64_t capacity;
    int64_t host_capacity;  // per rank; 0 = not checked (then ST_HOST is not evaluated)
    int L;               // model blocks
    int64_t B;           // global batch
    int N;               // devices
    double incumbent;    // best plan time so far (INFINITY: none)
    int warm_steps;      // > 0: a warm-start pass on an offload grid of 1/warm_steps (a subset of the full grid)
    double tau;          // the other stages of a stage of l blocks sum to at least tau * (L - l) of t
    // compiled stage models, built when first needed: [kind][zero][offload mask wo|go<<1|oo<<2|ao<<3]
    StageModel *models[KINDS][SHARD_CODES][16];
    StageModelBase *base;  // the model's parts every stage model starts from, built with the first one
    // batch buffers: (cap,) per symbol and per output
    double *cols[STAGE_SYMS];
    double *outs[ST_OUTPUTS];
    size_t cap;
    // offload grid points per nonzero-ratio mask: (wo, go, oo, ao) steps, all nonzero in the mask
    unsigned char grid[16][SEARCH_GRID_MAX][4];
    int grid_n[16];
    double t_start, t_progress;  // for the progress line
    char err[512];
} Search;

// Stage i of S: its kind (which edge parts it holds) and its extra micro-batches in flight
// under 1F1B with G micro-batches, min(S - i - 1, G - 1).
static inline int stage_kind(int i, int S) { return (i == 0) | (i == S - 1) << 1; }
static inline int stage_p(int i, int S, int G) { return S - i - 1 < G - 1 ? S - i - 1 : G - 1; }

// ---- search_space.c
void space_rules(SpaceRules *r, PlanSpace space, const SearchLimits *lim);
// meshes of n devices: dp x tp = n, tp dividing gpus_per_node, heads, kv_heads, ffn; tp <= max_tp
int space_meshes(const Search *s, int n, Mesh *out, int max);
// whether S stages of N/S devices each can tile the cluster (node-aligned)
int space_stage_count_ok(const Search *s, int S);
// 1 when some layout (stage count, mesh, G) of the space exists for the cluster, memory aside;
// else 0 with why (the divisibility rules that fail, the dp sizes tried) and a hint in why
int space_any_layout(const Search *s, char *why, size_t len);
// the (ckpt, selective, sp) choices of a stage of l blocks on a mesh of tensor-parallel degree tp,
// ckpt ascending (at most SEARCH_MAX_STAGE_OPTS); returns the count
int space_stage_options(const SpaceRules *r, int l, int tp, StageOpt *out);
// whether the space allows micro-batch size b
static inline int space_b_ok(const SpaceRules *r, int64_t b) { return !r->b_mask || (b < 31 && (r->b_mask >> b & 1)); }
static inline double space_ratio_wg(const SpaceRules *r, int q) { return r->ratio_wg[q]; }
static inline double space_ratio_oa(const SpaceRules *r, int q) { return r->ratio_oa[q]; }
// fill s->grid and the rules' ratio tables for the rules' steps
void space_grid(Search *s);
double search_now(void);

// ---- search_stage.c
// Whether sharding code z is searched on a mesh of dp x tp: ZeRO's codes always; a code with
// an I scope only where its groups (gpus_per_node / tp dp ranks) lie strictly inside the dp
// group and tile it (1 < g < dp, g | dp): elsewhere I is N or G exactly, a ZeRO code's point.
int space_code_ok(const Search *s, int z, int dp, int tp);
// The compiled model of (kind, zero, offload mask), built on first use; NULL on failure (s->err).
StageModel *stage_model_get(Search *s, int kind, int zero, int mask);
// Make room for n batch columns.
int search_reserve(Search *s, size_t n);
// Evaluate n rows already written in s->cols with model m: what = EVAL_TIME
// (t, d), EVAL_PEAKS (the memory peaks) or both. The time program is ~95% of
// a model's work and does not depend on p, so the search asks for the peaks
// alone wherever only fitting matters and for times only where they are new.
enum { EVAL_TIME = 1, EVAL_PEAKS = 2, EVAL_BOTH = 3 };
// Row i of the last EVAL_PEAKS batch within device memory alone, and within
// device and host memory (the host check only where host_capacity is set).
int search_row_fits_device(const Search *s, size_t i);
int search_row_fits(const Search *s, size_t i);
void search_eval(Search *s, StageModel *m, size_t n, int what);
// copy row from to row to of the batch columns
void search_copy_row(Search *s, size_t to, size_t from);
// the bound G*t + max(0, d, tau * (L - l)) <= incumbent of a candidate with l blocks
int search_bound_ok(const Search *s, int G, double t, double d, int l);
// Fastest steady time over meshes and allowed ZeRO levels of a stage of l blocks
// with no checkpointing and no offload, memory ignored (a lower bound on t of
// every candidate of that l: t is nondecreasing in ckpt and offload ratios).
double stage_t_lower_bound(Search *s, int kind, int l, int G, const Mesh *meshes, int nmesh);
// The same for every l in lmin..lmax at once: tmin[l]. 0 or -1.
int stage_t_lower_bounds(Search *s, int kind, int lmin, int lmax, int G, const Mesh *meshes, int nmesh,
                         double *tmin);
// All candidates of stage kind `kind` with lo..hi blocks for each in-flight
// count plist[0..np) (ascending), meshes[0..nmesh), that fit and pass the
// bound G*t + max(0, d, tau * (L - l)) <= incumbent;
// out[(l - lo) * np + k] receives those with l blocks that fit at plist[k].
int stage_candidates(Search *s, int kind, int lo, int hi, int G, const Mesh *meshes, int nmesh, const int *plist,
                     int np, CandList *out);
// Write row i of the batch columns: stage plan sp with G micro-batches and p more in flight
// (every stage symbol from its row in planner/stage_model.h). Inline: the search writes millions of
// rows, and inlined the copies of sp fold into the column stores.
static inline void search_set_row(Search *s, size_t i, const StagePlan *sp, int G, int p) {
    const StageConfig c = {*sp, G, p};
#define SEARCH_SYM_COLUMN(sym, name, value) s->cols[sym][i] = (double)(value);
    STAGE_SYM_TABLE(SEARCH_SYM_COLUMN, &c)
#undef SEARCH_SYM_COLUMN
}
void search_models_free(Search *s);

// ---- search_cand.c: a candidate (Cand) and the stage plan it stands for, converted only here
// The offload ratios of grid steps q (wo, go, oo, ao) on the rules' grid (inline: set per row).
static inline void stage_set_offload_steps(StagePlan *sp, const SpaceRules *R, const unsigned char q[4]) {
    sp->wo = space_ratio_wg(R, q[0]);
    sp->go = space_ratio_wg(R, q[1]);
    sp->oo = space_ratio_oa(R, q[2]);
    sp->ao = space_ratio_oa(R, q[3]);
}
// The candidate of stage plan sp on mesh index `mesh` of the combination's list, with time t, d
// (sp's offload ratios are steps of the rules' grid).
Cand cand_pack(const StagePlan *sp, int mesh, const SpaceRules *R, double t, double d);
// The stage plan of candidate c with `layers` blocks: its mesh from meshes, b = B / (G dp).
StagePlan cand_unpack(const Cand *c, const Mesh *meshes, const SpaceRules *R, int layers, int64_t B, int G);
int cand_push(CandList *c, const Cand *x);
void cand_free(CandList *c);

// ---- search_closest.c
// Nothing fits: the plan (balanced split, each stage at its least-memory choice) whose worst
// stage misses device memory by the least, in r->closest (r->have_closest). 0 or -1 (s->err).
int search_closest_plan(Search *s, SearchResult *r);
// ---- search_uniform.c
// Best configuration shared by all S stages of L/S blocks on mesh me (uniform spaces) that is
// faster than both the incumbent and *best_T: 1 (best_sp, best_T updated), 0 none, -1 error.
int uniform_search(Search *s, int S, int G, const Mesh *me, StagePlan *best_sp, double *best_T);
// The same with P pipeline ranks of v = 2 .. vmax chunks each (interleaved 1F1B, chunks of L / (P v)
// blocks): 1 (best_sp, *best_v, best_T updated), 0 none, -1 error. The plan: G, P v stages, virtual v.
int uniform_search_virtual(Search *s, int P, int G, const Mesh *me, int vmax, StagePlan *best_sp, int *best_v,
                           double *best_T);

// ---- search_combo.c: one combination of the outer search (search.c)
// (stages, micro-batches, meshes): a uniform space searches mesh[0] only; lb: its lower bound
typedef struct {
    int S, G, nmesh;
    Mesh mesh[SEARCH_MAX_MESHES];
    double lb;
} Combo;

// The winning inter-stage problem, kept to confirm it with lp_solve.
typedef struct {
    MilpProblem p;
    MilpFrontier *f;
    int *opts;
    double *vals;
} SavedProblem;

// The best plan so far and, for a non-uniform one, its inter-stage problem
typedef struct {
    int found;
    Plan plan;
    double T;
    SavedProblem saved;
} Best;
// The stage kinds of S stages: KIND_ONLY; or KIND_FIRST, KIND_LAST and (S > 2) KIND_MIDDLE. The count.
int search_kinds(int S, int *kinds);
void search_saved_free(SavedProblem *sp);
// Search one combination; improves *best and s->incumbent. 0 or -1 (s->err).
int combo_search(Search *s, const Combo *c, Best *best);

#endif
