// The process grid: rank layout of a plan, pipeline pairing, and the dp/tp
// groups.
//
// Layout. Stage s owns the world ranks [first(s), first(s) + dp_s*tp_s),
// first(s) = sum of dp*tp over earlier stages. Inside a stage
//   rank = first(s) + dp_index * tp_s + tp_index          (tp innermost)
// so a TP group is tp_s adjacent ranks (one node when tp_s <= GPUs per node)
// and a DP group strides by tp_s.
//
// Pipeline pairing. Every stage processes the whole global batch
// (b_s * dp_s * G sequences), split over its dp_s replicas, and every TP rank
// of a replica holds the full activations at a stage boundary. So the natural
// partner of (d, t) in a neighbouring stage with mesh dp' x tp' is
// (d mod dp', t mod tp'):
//   - equal meshes: the rank with the same (d, t), a one-to-one pairing;
//   - dp' < dp: several replicas feed one (their micro-batches all go there);
//   - dp' > dp or tp' > tp: some ranks of the wider stage have no partner
//     pointing at them and must get their data through their own dp/tp group.
// prev_rank/next_rank hold this partner; grid_peer_rank() gives it for any
// (d, t), for code that redistributes between unequal meshes.
#include <stdlib.h>
#include <string.h>
#include "runtime/comm.h"
#include "runtime/grid.h"
#include "runtime/launch.h"

int grid_check_plan(const Plan *plan, char *err, size_t errlen) {
    if (plan->num_stages < 1 || plan->num_stages > MIST_MAX_STAGES) {
        snprintf(err, errlen, "plan: %d pipeline stages is not allowed (1..%d). Hint: check num_stages in [plan]",
                 plan->num_stages, MIST_MAX_STAGES);
        return 2;
    }
    for (int s = 0; s < plan->num_stages; s++) {
        const StagePlan *st = &plan->stage[s];
        const char *key = st->dp < 1 ? "dp" : st->tp < 1 ? "tp" : st->layers < 1 ? "layers" : NULL;
        int value = st->dp < 1 ? st->dp : st->tp < 1 ? st->tp : st->layers;
        if (key) {
            snprintf(err, errlen, "plan: stage %d has %s = %d; allowed: %s >= 1. Hint: fix %s in [stage.%d]", s, key,
                     value, key, key, s);
            return 2;
        }
    }
    return 0;
}

// with [plan] virtual, chunk s runs on the ranks of pipeline rank s mod P
static int stage_first(const Plan *plan, int s) {
    int r = 0;
    for (int i = 0; i < s % plan_pipeline_size(plan); i++) r += plan->stage[i].dp * plan->stage[i].tp;
    return r;
}

int grid_peer_rank(const Plan *plan, int dp_index, int tp_index, int to) {
    if (to < 0 || to >= plan->num_stages) return -1;
    const StagePlan *st = &plan->stage[to];
    return stage_first(plan, to) + (dp_index % st->dp) * st->tp + tp_index % st->tp;
}

int grid_layout(Grid *g, const Plan *plan, int rank, char *err, size_t errlen) {
    int rc = grid_check_plan(plan, err, errlen);
    if (rc) return rc;
    int world = plan_world_size(plan);
    if (rank < 0 || rank >= world) {
        snprintf(err, errlen, "plan: rank %d is outside the plan's %d ranks", rank, world);
        return 2;
    }
    int s = 0, first = 0;  // (world <= the first P chunks' ranks: s stays below P)
    while (rank >= first + plan->stage[s].dp * plan->stage[s].tp) first += plan->stage[s].dp * plan->stage[s].tp, s++;
    const StagePlan *st = &plan->stage[s];
    int flat = rank - first;
    g->world_rank = rank;
    g->world_size = world;
    g->stage = s;
    g->num_stages = plan->num_stages;
    g->dp_size = st->dp;
    g->tp_size = st->tp;
    g->dp_index = flat / st->tp;
    g->tp_index = flat % st->tp;
    g->first_layer = plan_first_layer(plan, s);
    g->num_layers = st->layers;
    g->stage_first_rank = first;
    g->prev_rank = grid_peer_rank(plan, g->dp_index, g->tp_index, s - 1);
    g->next_rank = grid_peer_rank(plan, g->dp_index, g->tp_index, s + 1);
    return 0;
}

void grid_chunk(const Grid *g, const Plan *plan, int j, Grid *out) {
    *out = *g;
    int c = g->stage + j * plan_pipeline_size(plan);
    out->stage = c;
    out->first_layer = plan_first_layer(plan, c);
    out->num_layers = plan->stage[c].layers;
    out->prev_rank = grid_peer_rank(plan, g->dp_index, g->tp_index, c - 1);
    out->next_rank = grid_peer_rank(plan, g->dp_index, g->tp_index, c + 1);
}

// "stage 0: 2 dp x 2 tp, stage 1: 1 dp x 4 tp" (shortened for long plans)
static void describe_meshes(const Plan *plan, char *out, size_t len) {
    size_t used = 0;
    out[0] = '\0';
    for (int s = 0; s < plan->num_stages && used + 40 < len; s++)
        used += snprintf(out + used, len - used, "%sstage %d: %d dp x %d tp", s ? ", " : "", s, plan->stage[s].dp,
                         plan->stage[s].tp);
    if (used + 40 >= len) snprintf(out + used, len - used, ", ...");
}

static int comm_failed(Grid *g, const char *what, int code, char *err, size_t errlen) {
    char text[256];
    g->comm->error_string(g->comm, code, text, sizeof text);
    snprintf(err, errlen, "grid: creating the %s group failed: %s", what, text);
    grid_free(g);
    return 1;
}

int grid_build(Grid *g, const Plan *plan, const CommBackend *comm, char *err, size_t errlen) {
    memset(g, 0, sizeof *g);
    const Launch *L = launch_info();
    if (!L) {
        snprintf(err, errlen, "grid: launch_init() must run before grid_build()");
        return 1;
    }
    int rc = grid_check_plan(plan, err, errlen);
    if (rc) return rc;
    if (plan_world_size(plan) != L->world_size) {
        char meshes[512];
        describe_meshes(plan, meshes, sizeof meshes);
        snprintf(err, errlen,
                 "plan needs %d ranks (%s) but the job has %d. Hint: start it with mpirun -np %d, or change dp/tp of "
                 "the stages",
                 plan_world_size(plan), meshes, L->world_size, plan_world_size(plan));
        return 2;
    }
    rc = grid_layout(g, plan, L->world_rank, err, errlen);
    if (rc) return rc;
    g->local_rank = L->local_rank;
    g->local_size = L->local_size;
    snprintf(g->host, sizeof g->host, "%s", L->host);
    snprintf(g->device, sizeof g->device, "%s", L->device);
    g->comm = comm;

    if ((rc = comm->group_world(comm, &g->world))) return comm_failed(g, "world", rc, err, errlen);
    // Colors are world ranks, hence unique per group: a DP group is named by
    // its (dp 0, tp) rank, a TP group by its (dp, tp 0) rank.
    int dp_color = g->stage_first_rank + g->tp_index;
    int tp_color = g->stage_first_rank + g->dp_index * g->tp_size;
    if ((rc = comm->group_split(comm, g->world, dp_color, g->dp_index, &g->dp))) return comm_failed(g, "dp", rc, err, errlen);
    if ((rc = comm->group_split(comm, g->world, tp_color, g->tp_index, &g->tp))) return comm_failed(g, "tp", rc, err, errlen);
    return 0;
}

void grid_free(Grid *g) {
    if (g->comm) {
        g->comm->group_free(g->comm, g->tp);
        g->comm->group_free(g->comm, g->dp);
        g->comm->group_free(g->comm, g->world);
    }
    g->tp = g->dp = g->world = NULL;
}

// One row of the table, exchanged as plain bytes.
typedef struct {
    int rank, local_rank, stage, dp_index, tp_index, first_layer, num_layers;
    char host[64];
    char device[32];
} GridRow;

static void print_header(FILE *f, int host_width) {
    fprintf(f, "%5s  %-*s  %5s  %-8s  %5s  %4s  %4s  %s\n", "rank", host_width, "host", "local", "device", "stage", "dp",
            "tp", "layers");
}

// the blocks of pipeline rank s: "first-last", with [plan] virtual each chunk's, comma-separated
static void rank_layers(const Plan *plan, int s, char *out, size_t len) {
    size_t at = 0;
    out[0] = '\0';
    for (int c = s; c < plan->num_stages && at + 24 < len; c += plan_pipeline_size(plan)) {
        int first = plan_first_layer(plan, c);
        at += (size_t)snprintf(out + at, len - at, "%s%d-%d", c == s ? "" : ",", first, first + plan->stage[c].layers - 1);
    }
}

int grid_print_plan_table(const Plan *plan, FILE *f, char *err, size_t errlen) {
    int n = plan_world_size(plan), rc = grid_check_plan(plan, err, errlen);
    if (rc) return rc;
    fprintf(f, "process grid (not launched: the layout under mpirun -np %d): %d pipeline stage%s\n", n,
            plan->num_stages, plan->num_stages == 1 ? "" : "s");
    print_header(f, 4);
    for (int r = 0; r < n; r++) {
        Grid g;
        memset(&g, 0, sizeof g);
        if ((rc = grid_layout(&g, plan, r, err, errlen))) return rc;
        char layers[256];
        rank_layers(plan, g.stage, layers, sizeof layers);
        fprintf(f, "%5d  %-4s  %5s  %-8s  %5d  %4d  %4d  %s\n", r, "-", "-", "-", g.stage, g.dp_index, g.tp_index, layers);
    }
    return 0;
}

void grid_print_table(const Grid *g, FILE *f) {
    int n = g->world_size;
    GridRow mine, *rows = calloc((size_t)n, sizeof *rows);
    if (!rows) g->comm->abort(g->comm, 1, "grid: out of host memory for the grid table");
    memset(&mine, 0, sizeof mine);
    mine = (GridRow){g->world_rank, g->local_rank, g->stage, g->dp_index, g->tp_index, g->first_layer, g->num_layers,
                     "", ""};
    memcpy(mine.host, g->host, sizeof mine.host);
    memcpy(mine.device, g->device, sizeof mine.device);
    commCheck(g->comm, g->comm->all_gather(g->comm, &mine, rows, sizeof mine, MIST_U8, g->world));
    if (g->world_rank == 0) {
        int hw = 4, hosts = 0;
        for (int r = 0; r < n; r++) {
            int len = (int)strlen(rows[r].host);
            if (len > hw) hw = len;
            hosts += rows[r].local_rank == 0;
        }
        fprintf(f, "process grid: %d ranks on %d host%s, %d pipeline stage%s\n", n, hosts, hosts == 1 ? "" : "s",
                g->num_stages, g->num_stages == 1 ? "" : "s");
        print_header(f, hw);
        for (int r = 0; r < n; r++) {
            const GridRow *w = &rows[r];
            fprintf(f, "%5d  %-*s  %5d  %-8s  %5d  %4d  %4d  %d-%d\n", w->rank, hw, w->host, w->local_rank, w->device,
                    w->stage, w->dp_index, w->tp_index, w->first_layer, w->first_layer + w->num_layers - 1);
        }
        fflush(f);
    }
    free(rows);
}
