// ZeRO sharding and host offloading of the training state, per unit.
//
// A *unit* is the flat parameter range of one part of the stage: the
// embedding ("pre", unit 0), each block (units 1..L), the final norm and head
// ("post", unit L+1); a pipeline stage's pre / post unit is empty (never
// gathered or reduced) where the stage does not run that part, and the last
// stage's pre unit holds its copy of a tied wte. Every state (weights W,
// gradients G, fp32 master, Adam m and v) is stored unit after unit. When
// optimizer state is sharded (zero >= 1) each unit is padded to a multiple
// of dp:
//   padded = dp * shard,  shard = ceil(count / dp),
// and dp rank r owns unit positions [r*shard, (r+1)*shard) — so a reduce-
// scatter or all-gather of one unit works in place on equal blocks.
//
// Which states are sharded (shard elements per unit, else `padded`):
//   zero 1: optimizer (master, m, v);  zero 2: + G;  zero 3: + W.
// More generally each state has a scope (the stage's PaRO code, base/paro.h):
// N padded, I padded / g (inside a group of g dp ranks), G shard; the
// "Scopes" block below and runtime/zero_levels.c have the layout.
// Offload: of each unit's stored elements n, the last floor(f*n) live in the
// host arena (f = wo, go, oo for W, G, and master/m/v), the rest in the device
// arena. Compute never touches host memory: those parts are copied into
// device staging buffers around use (h2d in, d2h out).
//
// Device staging (taken for the whole run, sized once):
//   W staging when W is sharded (G or I) or wo > 0: one buffer for pre, one for post (the
//     tied head reads pre's weights at the far end of the stage), a ring of 2
//     for blocks (block i+1 is gathered while block i computes);
//   G staging when G is sharded or go > 0: the same four buffers for gradients;
//   gacc when go > 0: one unit's stored gradient (to add into it);
//   opt swap when oo > 0: one unit's step range of master/m/v.
//
// Schedule (docs/design.md §4): the optimizer step of a unit is deferred into the
// first forward micro-batch of the next iteration, just before the unit's
// weights are gathered; weights of unit u+1 are prefetched (step, swap-in,
// all-gather started) when unit u starts; a unit's gradient reduction
// (all-reduce, or reduce-scatter when sharded) starts when its backward ends
// and is completed after the next unit's backward, where its result is needed.
#ifndef MIST_ZERO_H
#define MIST_ZERO_H
#include <stddef.h>
#include <stdint.h>
#include "base/dtype.h"
#include "base/paro.h"
#include "base/profile.h"
#include "base/schema.h"
#include "runtime/arena.h"

struct ModelRuntime;
struct CommRequest;

typedef struct {
    size_t off;     // first element in the flat (padded) layout
    size_t count;   // parameters of the unit
    size_t padded;  // count rounded up to a multiple of dp when sharded (else count)
    size_t shard;   // padded / dp when sharded (else padded): the G scope's block
} MrUnit;

// ---- Scopes (base/paro.h SCOPE_N / I / G; runtime/zero_levels.c has the layout)
// Each state is stored whole (N), as the rank's piece of padded / g of the unit
// (I: sharded inside its group of g consecutive dp ranks) or as its block of
// padded / dp (G). ModelRuntime.scope[STATE_W / G / O] holds the stage's
// scopes, paro_g its g (1 without an I scope). Where the layout needs them,
// every unit is padded to a multiple of dp (g divides dp).
struct ModelRuntime;
size_t zero_scope_len(const struct ModelRuntime *r, int u, int scope);   // elements of unit u a scope stores
size_t zero_scope_base(const struct ModelRuntime *r, int u, int scope);  // the unit position of the first
struct CommGroup *zero_scope_group(const struct ModelRuntime *r, int scope);  // its replicas differ over: dp, intra, NULL

// One collective between scopes, in place: kind, group, buffers, elements (per rank for
// reduce-scatter and all-gather), dtype. send == NULL: none.
typedef struct {
    CollKind kind;
    struct CommGroup *grp;
    void *send, *recv;
    size_t count;
    MistDtype t;
} ZeroColl;
// The steps (0..2, into out) that gather unit u from scope `from` to the wider `to`
// (from > to) in the buffer p that holds unit position `origin` (origin <= the
// `to` scope's base) in elements of elem bytes of type t.
int zero_gather_steps(const struct ModelRuntime *r, int u, int from, int to, char *p, size_t origin, size_t elem,
                      MistDtype t, ZeroColl out[2]);
// The steps that sum the full unit u in p (positions 0..padded, the runtime's dtype)
// over dp into scope `to`'s range of p.
int zero_reduce_steps(const struct ModelRuntime *r, int u, int to, char *p, ZeroColl out[2]);
// A chain of n steps: the first started into *req, the second kept in *next and
// started when the first completes (zero_chains_poll, or zero_chain_wait, which
// completes both). Every rank must start the collectives of one group in the
// same order, but a first level completes at different times on different
// ranks; so second levels run on groups of their own (paro_grp[2], [3]: intra,
// inter again) and start strictly in the order their chains started (a FIFO
// whose head alone advances), while first levels start in program order on
// paro_grp[0], [1]: each group sees the same sequence on every rank.
struct CommRequest;
typedef struct {
    struct CommRequest **req;
    ZeroColl *next;
} ZeroChain;
void zero_chain_start(struct ModelRuntime *r, const ZeroColl *steps, int n, struct CommRequest **req, ZeroColl *next);
void zero_chains_poll(struct ModelRuntime *r);  // at unit boundaries: starts the second levels due
void zero_chain_wait(struct ModelRuntime *r, struct CommRequest **req, ZeroColl *next);
// n steps one after the other, blocking and flat (host buffers)
void zero_chain_run(struct ModelRuntime *r, const ZeroColl *steps, int n);

// This rank's stage plan as the runtime lays it out: shard_group resolved by the
// cluster's gpus_per_node (base/paro.h shard_group_size, the planner's rule too).
struct Grid;
StagePlan zero_stage_plan(const struct Grid *grid, const MistConfig *cfg);
// Where that plan's code has an I scope (1 < g < dp): the dp group's subgroups,
// out[0] intra (the g consecutive dp ranks of this rank's group, by local index)
// and out[1] inter (the dp/g ranks of its local index, by group), out[2], out[3]
// the same again for second levels (zero_chain_start); else NULL.
// Collective over the dp group (before the comm path prepares its groups).
// 0, or the backend's error code.
struct CommBackend;
int zero_scope_groups(const struct CommBackend *c, const struct Grid *grid, const MistConfig *cfg,
                      struct CommGroup *out[4]);
void zero_scope_groups_free(const struct CommBackend *c, struct CommGroup *out[4]);

// One state split between the arenas, unit after unit.
typedef struct {
    ArenaTensor *dev;   // device part of every unit
    ArenaTensor host;   // host part of every unit
    size_t elem;        // bytes per element
    size_t *n, *h;      // per unit: stored elements, of which the last h on the host
    size_t *base;       // per unit: unit position of stored element 0 (r*shard when sharded)
    size_t *dev_off, *host_off;  // per unit, in elements
    size_t dev_elems, host_elems;
} Store;

// Elements unit u stores of a state (its scope, offload fraction f):
// *n in all, *h of them on the host. Pure arithmetic, shared with the prediction.
void zero_state_elems(const struct ModelRuntime *r, int scope, double f, int u, size_t *n, size_t *h);
// Persistent bytes of states and staging: device and host arena.
void zero_predict(const struct ModelRuntime *r, size_t *device_bytes, size_t *host_bytes);
// Carves stores and staging (mr_plan_memory), takes them for the run (mr_init_params).
void zero_carve(struct ModelRuntime *r);
void zero_take(struct ModelRuntime *r);
void zero_free(struct ModelRuntime *r);

// Pointer to the element at flat offset `off` in the buffer that holds its
// unit's full weights / gradients now (NULL for off < 0).
void *zero_w(struct ModelRuntime *r, int64_t off);
void *zero_g(struct ModelRuntime *r, int64_t off);

// Hooks of the forward / backward of one micro-batch (model_runtime.c).
void zero_fwd_begin(struct ModelRuntime *r, int u);
void zero_bwd_begin(struct ModelRuntime *r, int u);
void zero_bwd_end(struct ModelRuntime *r, int u);
void zero_bwd_finish(struct ModelRuntime *r);

// After the last micro-batch: global gradient norm (sum of squares over this
// rank's shards, all-reduced over dp when sharded).
double zero_grad_norm(struct ModelRuntime *r);
// Tied embeddings over several stages: the wte gradient (the first Vt*C
// elements of unit 0: this tp rank's vocabulary rows, reduced over dp) is
// summed over the group `tied` (the ranks of the first and the last stage,
// whose tp degrees may differ: the sum is taken over the whole (V, C) tensor,
// gathered over each stage's tp group); contribute = 0 adds zeros (one rank
// per stage contributes, so each stage's sum counts once). Every rank then
// holds the sum in its part of the gradient store. Collective over tied (and
// the dp and tp groups).
struct CommGroup;
void zero_sum_tied_grads(struct ModelRuntime *r, struct CommGroup *tied, int contribute);
// The step of every unit at (lr, grad_scale), deferred to the unit's next use.
void zero_schedule_step(struct ModelRuntime *r, float lr, float grad_scale);
// A skipped step: gradients back to zero.
void zero_clear_grads(struct ModelRuntime *r);
// Runs every deferred step and completes every gather (before validation,
// checkpoints, the end of the run).
void zero_flush(struct ModelRuntime *r);

// Whole-model fp32 state <-> the stores. Arrays are in the flat padded layout
// (r->Pp floats; padding zero). distribute: every rank takes its part (W is
// rounded from w under bf16; m, v NULL = zeros; G is zeroed). collect: every
// rank gets the full arrays (all-gather of the shards over dp).
void zero_distribute(struct ModelRuntime *r, const float *w, const float *m, const float *v);
void zero_collect(struct ModelRuntime *r, float *w, float *m, float *v);

#endif
