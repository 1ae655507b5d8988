// ZeRO 0-3 and W/G/optimizer offloading over per-unit flat buffers (zero.h
// has the layout and the schedule).
//
// Collectives are the comm backend's nonblocking forms, waited on where their
// data is needed. MPI progresses a nonblocking collective only inside MPI
// calls; rather than a helper thread (which would need MPI_THREAD_MULTIPLE
// and a second copy of every request's state) the schedule polls the pending
// requests with test() at every unit boundary, which is where the CPU
// backend's compute returns control anyway.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/comm.h"
#include "runtime/comm_hier.h"
#include "runtime/model_runtime.h"

enum { GK_NONE = 0, GK_ACC_SHARD = 1, GK_SAVE = 2 };
enum { SLOT_PRE = 0, SLOT_POST = 1, SLOT_RING = 2 };

static int staged_w(const ModelRuntime *r) { return r->scope[STATE_W] != SCOPE_N || r->wo > 0; }
static int staged_g(const ModelRuntime *r) { return r->scope[STATE_G] != SCOPE_N || r->go > 0; }
static int use_comm(const ModelRuntime *r) { return r->dp > 1 && r->comm; }
static int slot_of(const ModelRuntime *r, int u) {
    return u == 0 ? SLOT_PRE : u == r->num_units - 1 ? SLOT_POST : SLOT_RING + u % 2;
}

void zero_state_elems(const ModelRuntime *r, int scope, double f, int u, size_t *n, size_t *h) {
    *n = zero_scope_len(r, u, scope);
    *h = (size_t)floor(f * (double)*n);
    if (*h > *n) *h = *n;
}

// The step range of unit u: unit positions [lo, lo+len) this rank updates.
// (the optimizer state's range, cut to the unit's parameters)
static void step_range(const ModelRuntime *r, int u, size_t *lo, size_t *len) {
    const MrUnit *U = &r->units[u];
    size_t n = zero_scope_len(r, u, r->scope[STATE_O]);
    *lo = zero_scope_base(r, u, r->scope[STATE_O]);
    *len = *lo >= U->count ? 0 : U->count - *lo < n ? U->count - *lo : n;
}

// where a unit's summed gradient is needed: its stored range when G is sharded, else
// (gradients whole, summed on the last micro-batch) only the optimizer's range
static int reduced_scope(const ModelRuntime *r) {
    return r->scope[STATE_G] != SCOPE_N ? r->scope[STATE_G] : r->scope[STATE_O];
}

// ---------------------------------------------------------------- sizes
typedef struct {
    size_t w_dev, w_host, g_dev, g_host, o_dev, o_host;  // elements (o: each of master/m/v)
    size_t max_block_padded, max_g_n, max_o_n;
} StateSizes;

static StateSizes state_sizes(const ModelRuntime *r) {
    StateSizes s = {0};
    for (int u = 0; u < r->num_units; u++) {
        size_t n, h;
        zero_state_elems(r, r->scope[STATE_W], r->wo, u, &n, &h);
        s.w_dev += n - h, s.w_host += h;
        zero_state_elems(r, r->scope[STATE_G], r->go, u, &n, &h);
        s.g_dev += n - h, s.g_host += h;
        if (n > s.max_g_n) s.max_g_n = n;
        zero_state_elems(r, r->scope[STATE_O], r->oo, u, &n, &h);
        s.o_dev += n - h, s.o_host += h;
        if (n > s.max_o_n) s.max_o_n = n;
        if (u > 0 && u < r->num_units - 1 && r->units[u].padded > s.max_block_padded)
            s.max_block_padded = r->units[u].padded;
    }
    return s;
}

// staging of one kind (W or G): pre, post, ring 0, ring 1 (elements)
static void staging_elems(const ModelRuntime *r, size_t out[4]) {
    const StateSizes s = state_sizes(r);
    out[SLOT_PRE] = r->units[0].padded;
    out[SLOT_POST] = r->units[r->num_units - 1].padded;
    out[SLOT_RING] = out[SLOT_RING + 1] = r->num_units > 2 ? s.max_block_padded : 0;
}

void zero_predict(const ModelRuntime *r, size_t *device_bytes, size_t *host_bytes) {
    StateSizes s = state_sizes(r);
    size_t x = r->x, master = r->be->dtype == MIST_F32 ? 0 : 1;  // fp32: W is the master
    size_t dev = (s.w_dev + s.g_dev) * x + (2 + master) * s.o_dev * sizeof(float);
    size_t host = (s.w_host + s.g_host) * x + (2 + master) * s.o_host * sizeof(float);
    size_t st[4];
    staging_elems(r, st);
    size_t staging = (st[0] + st[1] + st[2] + st[3]) * x;
    if (staged_w(r)) dev += staging;
    if (staged_g(r)) dev += staging;
    if (r->go > 0) dev += s.max_g_n * x;                                        // gacc
    if (r->oo > 0) dev += (2 + master) * s.max_o_n * sizeof(float);             // opt swap
    *device_bytes = dev;
    *host_bytes = host;
}

// ---------------------------------------------------------------- stores
static void store_shape(ModelRuntime *r, Store *s, ArenaTensor *dev, size_t elem, int scope, double f, int present) {
    int nu = r->num_units;
    s->dev = dev;
    s->elem = elem;
    s->n = calloc((size_t)nu, sizeof(size_t));
    s->h = calloc((size_t)nu, sizeof(size_t));
    s->base = calloc((size_t)nu, sizeof(size_t));
    s->dev_off = calloc((size_t)nu, sizeof(size_t));
    s->host_off = calloc((size_t)nu, sizeof(size_t));
    s->dev_elems = s->host_elems = 0;
    for (int u = 0; u < nu; u++) {
        size_t n = 0, h = 0;
        if (present) zero_state_elems(r, scope, f, u, &n, &h);
        s->n[u] = n, s->h[u] = h;
        s->base[u] = zero_scope_base(r, u, scope);
        s->dev_off[u] = s->dev_elems;
        s->host_off[u] = s->host_elems;
        s->dev_elems += n - h;
        s->host_elems += h;
    }
}

static void store_free(Store *s) {
    free(s->n), free(s->h), free(s->base), free(s->dev_off), free(s->host_off);
    memset(s, 0, sizeof *s);
}

static char *dev_at(const Store *s, int u, size_t i) {
    return (char *)arena_ptr(s->dev) + (s->dev_off[u] + i) * s->elem;
}
static char *host_at(const Store *s, int u, size_t j) {
    return (char *)arena_ptr(&s->host) + (s->host_off[u] + j) * s->elem;
}
static size_t dev_part(const Store *s, int u) { return s->n[u] - s->h[u]; }
static int on_dev(const Store *s, int u, size_t i, size_t n) { return i + n <= dev_part(s, u); }

// device buffer dst <- stored elements [i, i+n) of unit u (d2d + h2d)
static void store_load(ModelRuntime *r, const Store *s, int u, size_t i, size_t n, void *dst) {
    Backend *be = r->be;
    size_t d = dev_part(s, u), b = i + n;
    if (i < d && (char *)dst != dev_at(s, u, i))
        be->copy_d2d(be, dst, dev_at(s, u, i), ((b < d ? b : d) - i) * s->elem, r->stream);
    if (b > d) {
        size_t a = i > d ? i : d;
        be->copy_h2d(be, (char *)dst + (a - i) * s->elem, host_at(s, u, a - d), (b - a) * s->elem, r->stream);
    }
}

// stored elements [i, i+n) of unit u <- device buffer src (d2d + d2h)
static void store_save(ModelRuntime *r, const Store *s, int u, size_t i, size_t n, const void *src) {
    Backend *be = r->be;
    size_t d = dev_part(s, u), b = i + n;
    if (i < d && (const char *)src != dev_at(s, u, i))
        be->copy_d2d(be, dev_at(s, u, i), src, ((b < d ? b : d) - i) * s->elem, r->stream);
    if (b > d) {
        size_t a = i > d ? i : d;
        be->copy_d2h(be, host_at(s, u, a - d), (const char *)src + (a - i) * s->elem, (b - a) * s->elem, r->stream);
    }
}

// Device pointer to stored elements [i, i+n): in place when they all live on
// the device, else loaded into `swap`.
static void *store_view(ModelRuntime *r, const Store *s, int u, size_t i, size_t n, void *swap) {
    if (on_dev(s, u, i, n)) return dev_at(s, u, i);
    store_load(r, s, u, i, n, swap);
    return swap;
}
static void store_unview(ModelRuntime *r, const Store *s, int u, size_t i, size_t n, void *view) {
    if (view != (void *)dev_at(s, u, i) || !on_dev(s, u, i, n)) store_save(r, s, u, i, n, view);
}

// host memory <-> stored elements (init, checkpoints)
static void store_write_host(ModelRuntime *r, const Store *s, int u, size_t i, size_t n, const void *src) {
    Backend *be = r->be;
    size_t d = dev_part(s, u), b = i + n;
    be->stream_synchronize(be, r->stream);
    if (i < d) be->copy_h2d(be, dev_at(s, u, i), src, ((b < d ? b : d) - i) * s->elem, r->stream);
    if (b > d) {
        size_t a = i > d ? i : d;
        memcpy(host_at(s, u, a - d), (const char *)src + (a - i) * s->elem, (b - a) * s->elem);
    }
    be->stream_synchronize(be, r->stream);
}
static void store_read_host(ModelRuntime *r, const Store *s, int u, size_t i, size_t n, void *dst) {
    Backend *be = r->be;
    size_t d = dev_part(s, u), b = i + n;
    be->stream_synchronize(be, r->stream);
    if (i < d) be->copy_d2h(be, dst, dev_at(s, u, i), ((b < d ? b : d) - i) * s->elem, r->stream);
    if (b > d) {
        size_t a = i > d ? i : d;
        memcpy((char *)dst + (a - i) * s->elem, host_at(s, u, a - d), (b - a) * s->elem);
    }
    be->stream_synchronize(be, r->stream);
}
static void store_zero(ModelRuntime *r, const Store *s, int u) {
    Backend *be = r->be;
    if (dev_part(s, u)) be->memset_device(be, dev_at(s, u, 0), 0, dev_part(s, u) * s->elem, r->stream);
    if (s->h[u]) {
        be->stream_synchronize(be, r->stream);  // no copy may still read the host part
        memset(host_at(s, u, 0), 0, s->h[u] * s->elem);
    }
}

// ---------------------------------------------------------------- plan
void zero_carve(ModelRuntime *r) {
    Arena *d = &r->dev, *h = &r->host;
    int nu = r->num_units, bf16 = r->be->dtype != MIST_F32;
    const int *sc = r->scope;
    store_shape(r, &r->sw, &r->t_params, r->x, sc[STATE_W], r->wo, 1);
    store_shape(r, &r->sg, &r->t_grads, r->x, sc[STATE_G], r->go, 1);
    store_shape(r, &r->smaster, &r->t_master, sizeof(float), sc[STATE_O], r->oo, bf16);
    store_shape(r, &r->sm, &r->t_m, sizeof(float), sc[STATE_O], r->oo, 1);
    store_shape(r, &r->sv, &r->t_v, sizeof(float), sc[STATE_O], r->oo, 1);
    arena_carve(d, &r->t_params, r->sw.dev_elems * r->x, "params");
    arena_carve(d, &r->t_grads, r->sg.dev_elems * r->x, "grads");
    arena_carve(d, &r->t_master, r->smaster.dev_elems * sizeof(float), "master");
    arena_carve(d, &r->t_m, r->sm.dev_elems * sizeof(float), "adam_m");
    arena_carve(d, &r->t_v, r->sv.dev_elems * sizeof(float), "adam_v");
    arena_carve(h, &r->sw.host, r->sw.host_elems * r->x, "host.params");
    arena_carve(h, &r->sg.host, r->sg.host_elems * r->x, "host.grads");
    arena_carve(h, &r->smaster.host, r->smaster.host_elems * sizeof(float), "host.master");
    arena_carve(h, &r->sm.host, r->sm.host_elems * sizeof(float), "host.adam_m");
    arena_carve(h, &r->sv.host, r->sv.host_elems * sizeof(float), "host.adam_v");
    size_t st[4];
    staging_elems(r, st);
    static const char *wn[4] = {"stage.w.pre", "stage.w.post", "stage.w.ring0", "stage.w.ring1"};
    static const char *gn[4] = {"stage.g.pre", "stage.g.post", "stage.g.ring0", "stage.g.ring1"};
    for (int k = 0; k < 4; k++) {
        arena_carve(d, &r->wstage[k], staged_w(r) ? st[k] * r->x : 0, wn[k]);
        arena_carve(d, &r->gstage[k], staged_g(r) ? st[k] * r->x : 0, gn[k]);
        r->slot_unit[k] = -1;
    }
    StateSizes s = state_sizes(r);
    arena_carve(d, &r->gacc, r->go > 0 ? s.max_g_n * r->x : 0, "swap.grads");
    static const char *on[3] = {"swap.master", "swap.adam_m", "swap.adam_v"};
    for (int k = 0; k < 3; k++)
        arena_carve(d, &r->oswap[k], r->oo > 0 && (k > 0 || bf16) ? s.max_o_n * sizeof(float) : 0, on[k]);
    r->wbase = calloc((size_t)nu, sizeof(void *));
    r->gbase = calloc((size_t)nu, sizeof(void *));
    r->wreq = calloc((size_t)nu, sizeof(CommRequest *));
    r->greq = calloc((size_t)nu, sizeof(CommRequest *));
    r->wnext = calloc((size_t)nu, sizeof(ZeroColl));
    r->gnext = calloc((size_t)nu, sizeof(ZeroColl));
    r->chains = calloc(2 * (size_t)nu, sizeof(ZeroChain));
    r->nchains = 0;
    r->due = calloc((size_t)nu, 1);
    r->need_gather = calloc((size_t)nu, 1);
    r->save_after = calloc((size_t)nu, 1);
    r->gkind = calloc((size_t)nu, 1);
    r->gbegun = calloc((size_t)nu, 1);
    r->ngpend = 0;
}

void zero_take(ModelRuntime *r) {
    for (int k = 0; k < 4; k++) {
        arena_take(&r->wstage[k]);
        arena_take(&r->gstage[k]);
    }
    arena_take(&r->gacc);
    for (int k = 0; k < 3; k++) arena_take(&r->oswap[k]);
    arena_take(&r->sw.host);
    arena_take(&r->sg.host);
    arena_take(&r->smaster.host);
    arena_take(&r->sm.host);
    arena_take(&r->sv.host);
}

void zero_free(ModelRuntime *r) {
    store_free(&r->sw), store_free(&r->sg), store_free(&r->smaster), store_free(&r->sm), store_free(&r->sv);
    free(r->wbase), free(r->gbase), free(r->wreq), free(r->greq), free(r->wnext), free(r->gnext);
    free(r->chains);
    r->wnext = r->gnext = NULL;
    r->chains = NULL;
    free(r->due), free(r->need_gather), free(r->save_after), free(r->gkind), free(r->gbegun);
    r->wbase = r->gbase = NULL;
    r->wreq = r->greq = NULL;
    r->due = r->need_gather = r->save_after = r->gkind = r->gbegun = NULL;
}

// ---------------------------------------------------------------- pointers
static int unit_of(const ModelRuntime *r, int64_t off) {
    int u = r->num_units - 1;
    while (u > 0 && (size_t)off < r->units[u].off) u--;
    return u;
}

void *zero_w(ModelRuntime *r, int64_t off) {
    if (off < 0) return NULL;
    int u = unit_of(r, off);
    return (char *)r->wbase[u] + ((size_t)off - r->units[u].off) * r->x;
}

void *zero_g(ModelRuntime *r, int64_t off) {
    if (off < 0) return NULL;
    int u = unit_of(r, off);
    return (char *)r->gbase[u] + ((size_t)off - r->units[u].off) * r->x;
}

static void wait_w(ModelRuntime *r, int u) { zero_chain_wait(r, &r->wreq[u], &r->wnext[u]); }
static void wait_g(ModelRuntime *r, int u) { zero_chain_wait(r, &r->greq[u], &r->gnext[u]); }

// lets MPI move pending collectives along (see the top of this file)
static void poll_requests(ModelRuntime *r) {
    if (!use_comm(r)) return;
    zero_chains_poll(r);  // second levels, in their chains' order (zero.h)
    for (int u = 0; u < r->num_units; u++) {
        int done = 0;
        if (r->wreq[u] && !r->wnext[u].send) {
            commCheck(r->comm, comm_hier_test(r->dph, r->comm, r->wreq[u], &done));
            if (done) r->wreq[u] = NULL;
        }
        if (r->greq[u] && !r->gnext[u].send) {
            commCheck(r->comm, comm_hier_test(r->dph, r->comm, r->greq[u], &done));
            if (done) r->greq[u] = NULL;
        }
    }
}

// ---------------------------------------------------------------- optimizer step of one unit
// tensor k of unit u cut to the step range [lo, lo + len), as unit positions [a, b); 0 when empty
static int tensor_cut(const ModelRuntime *r, int u, int k, size_t lo, size_t len, size_t *a, size_t *b) {
    const ParamTensor *t = &r->tensors[k];
    *a = t->offset - r->units[u].off, *b = *a + t->count;
    if (*a < lo) *a = lo;
    if (*b > lo + len) *b = lo + len;
    return *a < *b;
}

static void unit_step(ModelRuntime *r, int u) {
    Backend *be = r->be;
    size_t lo, len;
    step_range(r, u, &lo, &len);
    int bf16 = be->dtype != MIST_F32;
    if (len > 0) {
        // stored index of unit position lo in each state
        size_t wi = lo - r->sw.base[u], gi = lo - r->sg.base[u], oi = lo - r->sm.base[u];
        void *wswap = staged_w(r) ? (char *)arena_ptr(&r->wstage[slot_of(r, u)]) + lo * r->x : NULL;
        if (staged_w(r)) r->slot_unit[slot_of(r, u)] = -1;  // its contents are about to change
        char *w = store_view(r, &r->sw, u, wi, len, wswap);
        const char *g = store_view(r, &r->sg, u, gi, len, arena_ptr(&r->gacc));
        float *ms = bf16 ? store_view(r, &r->smaster, u, oi, len, arena_ptr(&r->oswap[0])) : NULL;
        float *m = store_view(r, &r->sm, u, oi, len, arena_ptr(&r->oswap[1]));
        float *v = store_view(r, &r->sv, u, oi, len, arena_ptr(&r->oswap[2]));
        // every parameter tensor of the unit, cut to [lo, lo+len); adjacent tensors with the
        // same weight decay are one update (AdamW is elementwise: the same bits, fewer launches)
        int end = r->unit_first_tensor[u + 1];
        for (int k = r->unit_first_tensor[u]; k < end;) {
            size_t a, b, a2, b2;
            if (!tensor_cut(r, u, k, lo, len, &a, &b)) {
                k++;
                continue;
            }
            int decay = r->tensors[k].decay;
            for (k++; k < end && tensor_cut(r, u, k, lo, len, &a2, &b2) && a2 == b && r->tensors[k].decay == decay; k++)
                b = b2;
            size_t i = a - lo;
            float wd = decay ? (float)r->opt.weight_decay : 0.0f;
            be->adamw_update(be, r->stream, w + i * r->x, ms ? ms + i : NULL, g + i * r->x, m + i, v + i, b - a,
                             r->step_lr, (float)r->opt.beta1, (float)r->opt.beta2, (float)r->opt.eps, wd,
                             r->step_scale, (int)r->step_t);
        }
        store_unview(r, &r->sw, u, wi, len, w);
        if (ms) store_unview(r, &r->smaster, u, oi, len, ms);
        store_unview(r, &r->sm, u, oi, len, m);
        store_unview(r, &r->sv, u, oi, len, v);
    }
    store_zero(r, &r->sg, u);  // the next iteration accumulates from zero
    // weights stored wider than the step's range: the others' ranges come by gather
    if (r->scope[STATE_O] > r->scope[STATE_W] && use_comm(r)) r->need_gather[u] = 1;
    r->due[u] = 0;
}

// ---------------------------------------------------------------- weights
// Starts what unit u's weights need: its deferred step, the swap-in of the
// offloaded part, the all-gather of the shards. Nothing when already there.
static void prefetch(ModelRuntime *r, int u) {
    if (u < 0 || u >= r->num_units) return;
    if (r->due[u]) unit_step(r, u);
    const MrUnit *U = &r->units[u];
    if (U->padded == 0) {  // a part this pipeline stage does not hold
        r->need_gather[u] = 0;
        return;
    }
    int sw = r->scope[STATE_W], so = r->scope[STATE_O];
    size_t x = r->x, wb = r->sw.base[u], wl = r->sw.n[u];
    MistDtype t = r->be->dtype;
    ZeroColl st[2];
    if (!staged_w(r)) {
        if (r->need_gather[u])  // whole weights: every rank stepped its range; gather in place
            zero_chain_start(r, st, zero_gather_steps(r, u, so, SCOPE_N, dev_at(&r->sw, u, 0), 0, x, t, st),
                             &r->wreq[u], &r->wnext[u]);
        r->need_gather[u] = 0;
        return;
    }
    int slot = slot_of(r, u);
    if (r->slot_unit[slot] == u && !r->need_gather[u]) return;
    char *buf = arena_ptr(&r->wstage[slot]);
    if (sw != SCOPE_N) {  // sharded (I or G): stored range [wb, wb + wl) of the unit
        if (!use_comm(r)) store_load(r, &r->sw, u, 0, wl, buf);
        else {
            // the step's range is narrower than the store's (O = G, W = I): the peers' blocks
            // first, then the group's pieces; the store keeps the completed piece (save_after)
            int pre = r->need_gather[u] ? zero_gather_steps(r, u, so, sw, buf, 0, x, t, st) : 0;
            int n = pre + zero_gather_steps(r, u, sw, SCOPE_N, buf, 0, x, t, st + pre);
            if (!pre && on_dev(&r->sw, u, 0, wl)) st[0].send = dev_at(&r->sw, u, 0);  // straight from the store
            else {
                store_load(r, &r->sw, u, 0, wl, buf + wb * x);
                r->be->stream_synchronize(r->be, r->stream);
            }
            r->save_after[u] = pre > 0;
            zero_chain_start(r, st, n, &r->wreq[u], &r->wnext[u]);
        }
    } else {  // full weights, partly offloaded
        store_load(r, &r->sw, u, 0, U->padded, buf);
        if (r->need_gather[u]) {
            r->be->stream_synchronize(r->be, r->stream);
            zero_chain_start(r, st, zero_gather_steps(r, u, so, SCOPE_N, buf, 0, x, t, st), &r->wreq[u], &r->wnext[u]);
            r->save_after[u] = 1;  // the gathered ranges of the others go back to the store
        }
    }
    r->need_gather[u] = 0;
    r->slot_unit[slot] = u;
}

// Unit u's full weights are in place for compute.
static void ensure_weights(ModelRuntime *r, int u) {
    prefetch(r, u);
    wait_w(r, u);
    if (!staged_w(r)) {
        r->wbase[u] = dev_at(&r->sw, u, 0);
        return;
    }
    void *buf = arena_ptr(&r->wstage[slot_of(r, u)]);
    if (r->save_after[u]) store_save(r, &r->sw, u, 0, r->sw.n[u], (char *)buf + r->sw.base[u] * r->x);
    r->save_after[u] = 0;
    r->wbase[u] = buf;
}

void zero_fwd_begin(ModelRuntime *r, int u) {
    poll_requests(r);
    ensure_weights(r, u);
    prefetch(r, u + 1);
}

// ---------------------------------------------------------------- gradients
static void begin_grads(ModelRuntime *r, int u) {
    if (r->gbegun[u]) return;
    r->gbegun[u] = 1;
    if (!staged_g(r)) {
        r->gbase[u] = dev_at(&r->sg, u, 0);
        return;
    }
    void *buf = arena_ptr(&r->gstage[slot_of(r, u)]);
    r->be->memset_device(r->be, buf, 0, r->units[u].padded * r->x, r->stream);
    r->gbase[u] = buf;
}

void zero_bwd_begin(ModelRuntime *r, int u) {
    poll_requests(r);
    ensure_weights(r, u);
    if (u > 0) prefetch(r, u - 1);
    begin_grads(r, u);
    // a tied head adds to the embedding's gradient (or, on the last of several
    // stages, to the gradient of its copy of wte)
    if (u == r->num_units - 1 && r->units[0].count) begin_grads(r, 0);
}

// stored gradient elements [i, i+n) of unit u += src (device)
static void grads_accumulate(ModelRuntime *r, int u, size_t i, size_t n, const void *src) {
    void *acc = store_view(r, &r->sg, u, i, n, arena_ptr(&r->gacc));
    r->be->residual_forward(r->be, r->stream, acc, acc, src, n);
    store_unview(r, &r->sg, u, i, n, acc);
}

// completes the reduction of unit u's gradient started by zero_bwd_end
static void finish_grads(ModelRuntime *r, int u) {
    wait_g(r, u);
    int rs = reduced_scope(r);
    size_t lo = zero_scope_base(r, u, rs), n = zero_scope_len(r, u, rs);
    char *buf = staged_g(r) ? arena_ptr(&r->gstage[slot_of(r, u)]) : NULL;
    if (r->gkind[u] == GK_ACC_SHARD) grads_accumulate(r, u, 0, n, buf + lo * r->x);
    else if (r->gkind[u] == GK_SAVE) store_save(r, &r->sg, u, lo - r->sg.base[u], n, buf + lo * r->x);
    r->gkind[u] = GK_NONE;
}

void zero_bwd_end(ModelRuntime *r, int u) {
    Backend *be = r->be;
    const MrUnit *U = &r->units[u];
    int comm = use_comm(r), last = r->micro_last;
    ZeroColl st[2];
    if (!staged_g(r)) {  // in place in the full gradient buffer: summed into the step's range
        char *g = dev_at(&r->sg, u, 0);
        if (last && comm) {
            be->stream_synchronize(be, r->stream);
            zero_chain_start(r, st, zero_reduce_steps(r, u, r->scope[STATE_O], g, st), &r->greq[u], &r->gnext[u]);
        }
        r->gkind[u] = GK_NONE;
    } else {
        char *buf = arena_ptr(&r->gstage[slot_of(r, u)]);
        if (r->scope[STATE_G] != SCOPE_N) {  // every micro-batch: reduce into the stored range, then add
            if (comm) {
                be->stream_synchronize(be, r->stream);
                zero_chain_start(r, st, zero_reduce_steps(r, u, r->scope[STATE_G], buf, st), &r->greq[u], &r->gnext[u]);
            }
            r->gkind[u] = GK_ACC_SHARD;
        } else if (!last) {  // whole gradients, offloaded: accumulate now, reduce on the last micro-batch
            grads_accumulate(r, u, 0, U->padded, buf);
            r->gkind[u] = GK_NONE;
        } else {
            void *acc = store_view(r, &r->sg, u, 0, U->padded, arena_ptr(&r->gacc));
            be->residual_forward(be, r->stream, buf, buf, acc, U->padded);
            if (comm) {
                be->stream_synchronize(be, r->stream);
                zero_chain_start(r, st, zero_reduce_steps(r, u, r->scope[STATE_O], buf, st), &r->greq[u], &r->gnext[u]);
            }
            r->gkind[u] = GK_SAVE;
        }
    }
    r->gbegun[u] = 0;
    // the previous unit's reduction ran under this unit's backward: complete it
    while (r->ngpend > 0) finish_grads(r, r->gpend[--r->ngpend]);
    r->gpend[r->ngpend++] = u;
}

void zero_bwd_finish(ModelRuntime *r) {
    while (r->ngpend > 0) finish_grads(r, r->gpend[--r->ngpend]);
    r->be->stream_synchronize(r->be, r->stream);
}

// ---------------------------------------------------------------- step control
double zero_grad_norm(ModelRuntime *r) {
    Backend *be = r->be;
    float *acc = arena_ptr(&r->t_norm_acc), host = 0.0f;
    be->memset_device(be, acc, 0, sizeof(float), r->stream);
    if (r->tp > 1) {
        // ||g||^2 of the whole model = sum over tp ranks of their shards of the
        // split tensors + the replicated tensors once: tp rank 0 counts them
        // (their gradients are the same bits on every tp rank), the others skip
        for (int u = r->tied_copy ? 1 : 0; u < r->num_units; u++) {
            size_t lo, len;
            step_range(r, u, &lo, &len);
            for (int k = r->unit_first_tensor[u]; k < r->unit_first_tensor[u + 1] && len; k++) {
                const ParamTensor *t = &r->tensors[k];
                size_t a = t->offset - r->units[u].off, b = a + t->count;
                if (a < lo) a = lo;
                if (b > lo + len) b = lo + len;
                if (a >= b || (!t->shard.split && r->tp_rank != 0)) continue;
                const void *g = store_view(r, &r->sg, u, a - r->sg.base[u], b - a, arena_ptr(&r->gacc));
                be->norm_squared_accumulate(be, r->stream, acc, g, b - a);
            }
        }
    } else if (r->zero == 0 && r->sg.host_elems == 0 && !r->tied_copy) {  // one pass over the whole buffer
        be->norm_squared_accumulate(be, r->stream, acc, arena_ptr(&r->t_grads), r->sg.dev_elems);
    } else {
        // the last stage's copy of wte is counted once, on the first stage
        for (int u = r->tied_copy ? 1 : 0; u < r->num_units; u++) {
            size_t lo, len;
            step_range(r, u, &lo, &len);
            if (!len) continue;
            size_t gi = lo - r->sg.base[u];
            const void *g = store_view(r, &r->sg, u, gi, len, arena_ptr(&r->gacc));
            be->norm_squared_accumulate(be, r->stream, acc, g, len);
        }
    }
    be->copy_d2h(be, &host, acc, sizeof(float), r->stream);
    be->stream_synchronize(be, r->stream);
    // sharded gradients: every rank holds a disjoint part of the sum of squares
    // (I: each group holds every range once; its ranks' parts add up to the whole)
    struct CommGroup *part = zero_scope_group(r, r->scope[STATE_O]);
    if (part && use_comm(r)) commCheck(r->comm, r->comm->all_reduce(r->comm, &host, &host, 1, MIST_F32, COMM_SUM, part));
    if (r->tp > 1) commCheck(r->comm, r->comm->all_reduce(r->comm, &host, &host, 1, MIST_F32, COMM_SUM, r->tpg));
    return sqrt((double)host);
}

void zero_sum_tied_grads(ModelRuntime *r, struct CommGroup *tied, int contribute) {
    Backend *be = r->be;
    const MrUnit *U = &r->units[0];
    // wte opens unit 0 on both stages; this tp rank holds its vocabulary rows
    // [v0, v0 + Vt) of the whole (Vp, C), padded rows included
    size_t x = r->x, C = (size_t)r->C, count = (size_t)r->Vt * C, whole_n = (size_t)r->Vp * C;
    // the unit positions this rank holds reduced (its range of the reduced scope)
    int rs = reduced_scope(r);
    size_t lo = zero_scope_base(r, 0, rs), len = zero_scope_len(r, 0, rs);
    char *full = calloc(U->padded ? U->padded : 1, x);
    if (!full) r->comm->abort(r->comm, 1, "zero.c: out of host memory for the tied embedding gradient");
    store_read_host(r, &r->sg, 0, lo - r->sg.base[0], len, full + lo * x);
    if (rs != SCOPE_N && use_comm(r)) {  // the other ranges of this stage's dp group
        ZeroColl st[2];
        zero_chain_run(r, st, zero_gather_steps(r, 0, rs, SCOPE_N, full, 0, x, be->dtype, st));
    }
    // The two stages may split the vocabulary over different tp degrees, so
    // the sum is taken over the whole (Vp, C) gradient: the stage's tp shards
    // are gathered first. Shard t holds rows [t * ceil(Vp/tp), ...), so the
    // shards padded to ceil(Vp/tp) rows, in tp order, are the whole tensor.
    char *whole = full, *gathered = NULL;
    if (r->tp > 1) {
        size_t per = (size_t)((r->Vp + r->tp - 1) / r->tp) * C;
        char *mine = calloc(per ? per : 1, x);
        gathered = calloc(per * (size_t)r->tp + 1, x);
        if (!mine || !gathered) r->comm->abort(r->comm, 1, "zero.c: out of host memory for the tied embedding gradient");
        memcpy(mine, full, count * x);
        commCheck(r->comm, r->comm->all_gather(r->comm, mine, gathered, per, be->dtype, r->tpg));
        free(mine);
        whole = gathered;
    }
    // one rank per stage contributes (dp 0, tp 0), so each stage's gradient counts once
    if (!contribute) memset(whole, 0, whole_n * x);
    commCheck(r->comm, r->comm->all_reduce(r->comm, whole, whole, whole_n, be->dtype, COMM_SUM, tied));
    if (gathered) memcpy(full, gathered + (size_t)r->v0 * C * x, count * x);  // this rank's rows of the sum
    size_t end = lo + len < count ? lo + len : count;
    if (lo < end) store_write_host(r, &r->sg, 0, lo - r->sg.base[0], end - lo, full + lo * x);
    free(gathered);
    free(full);
}

void zero_schedule_step(ModelRuntime *r, float lr, float grad_scale) {
    r->opt.t++;
    r->step_t = r->opt.t;
    r->step_lr = lr;
    r->step_scale = grad_scale;
    for (int u = 0; u < r->num_units; u++) r->due[u] = 1;
}

void zero_clear_grads(ModelRuntime *r) {
    for (int u = 0; u < r->num_units; u++) store_zero(r, &r->sg, u);
}

void zero_flush(ModelRuntime *r) {
    // one unit at a time: units two apart share a staging buffer
    for (int u = 0; u < r->num_units; u++) ensure_weights(r, u);
    r->be->stream_synchronize(r->be, r->stream);
}

// ---------------------------------------------------------------- whole state <-> stores
void zero_distribute(ModelRuntime *r, const float *w, const float *m, const float *v) {
    Backend *be = r->be;
    int bf16 = be->dtype != MIST_F32;
    size_t maxn = 0;
    for (int u = 0; u < r->num_units; u++)
        if (r->units[u].padded > maxn) maxn = r->units[u].padded;
    float *zeros = calloc(maxn ? maxn : 1, sizeof(float));
    uint16_t *half = bf16 ? malloc((maxn ? maxn : 1) * sizeof(uint16_t)) : NULL;
    for (int u = 0; u < r->num_units; u++) {
        size_t off = r->units[u].off;
        const Store *os[3] = {&r->smaster, &r->sm, &r->sv};
        const float *src[3] = {w + off, m ? m + off : zeros, v ? v + off : zeros};
        // weights in storage dtype (bf16: rounded from the fp32 master, as the cast op does)
        size_t n = r->sw.n[u], b = r->sw.base[u];
        const void *wsrc = w + off + b;
        if (bf16) {
            for (size_t i = 0; i < n; i++) half[i] = mist_f32_to_bf16(w[off + b + i]);
            wsrc = half;
        }
        store_write_host(r, &r->sw, u, 0, n, wsrc);
        for (int k = 0; k < 3; k++)
            if (os[k]->n[u]) store_write_host(r, os[k], u, 0, os[k]->n[u], src[k] + os[k]->base[u]);
        store_zero(r, &r->sg, u);
        r->due[u] = r->need_gather[u] = r->save_after[u] = 0;
    }
    for (int k = 0; k < 4; k++) r->slot_unit[k] = -1;
    be->stream_synchronize(be, r->stream);
    free(zeros);
    free(half);
}

void zero_collect(ModelRuntime *r, float *w, float *m, float *v) {
    int bf16 = r->be->dtype != MIST_F32;
    size_t maxs = 0;
    for (int u = 0; u < r->num_units; u++)
        if (r->units[u].padded > maxs) maxs = r->units[u].padded;
    float *tmp = malloc((maxs ? maxs : 1) * sizeof(float));
    for (int u = 0; u < r->num_units; u++) {
        const MrUnit *U = &r->units[u];
        const Store *os[3] = {bf16 ? &r->smaster : &r->sw, &r->sm, &r->sv};
        float *dst[3] = {w + U->off, m + U->off, v + U->off};
        for (int k = 0; k < 3; k++) {
            const Store *s = os[k];
            if (s->n[u] == U->padded) {  // not sharded: every rank has it whole
                store_read_host(r, s, u, 0, U->padded, dst[k]);
                continue;
            }
            // its range in place in the whole unit, the others' gathered around it
            int sc = k == 0 && !bf16 ? r->scope[STATE_W] : r->scope[STATE_O];
            ZeroColl st[2];
            store_read_host(r, s, u, 0, s->n[u], tmp + s->base[u]);
            zero_chain_run(r, st, zero_gather_steps(r, u, sc, SCOPE_N, (char *)tmp, 0, sizeof(float), MIST_F32, st));
            memcpy(dst[k], tmp, U->padded * sizeof(float));
        }
    }
    free(tmp);
}
