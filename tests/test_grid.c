// Process grid under mpirun (1, 2, 4, 8 ranks; tests/grid.sh runs them):
// for every plan that fits the job, each rank checks its stage/dp/tp indices,
// layers, group sizes, group members and pipeline neighbours against a table
// built here independently (by walking the stages in order), and rank 0
// checks the layout of every rank of every plan without MPI.
// Rank 0 prints TAP; every check is agreed on by all ranks first.
#include <mpi.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/comm_mpi.h"
#include "runtime/grid.h"
#include "runtime/launch.h"
#include "tests/tap_mpi.h"  // me, check


typedef struct {
    const char *name;
    int G, num_stages;
    int layers[8], dp[8], tp[8];
} PlanSpec;

static Plan make_plan(const PlanSpec *p) {
    Plan plan;
    memset(&plan, 0, sizeof plan);
    plan.G = p->G;
    plan.num_stages = p->num_stages;
    for (int s = 0; s < p->num_stages; s++) {
        plan.stage[s].layers = p->layers[s];
        plan.stage[s].dp = p->dp[s];
        plan.stage[s].tp = p->tp[s];
        plan.stage[s].b = 1;
    }
    return plan;
}

static const PlanSpec plans[] = {
    {"1 rank", 1, 1, {4}, {1}, {1}},
    {"dp2", 2, 1, {4}, {2}, {1}},
    {"tp2", 1, 1, {4}, {1}, {2}},
    {"2 stages of 1", 4, 2, {3, 1}, {1, 1}, {1, 1}},
    {"4 stages of 1", 4, 4, {1, 2, 2, 1}, {1, 1, 1, 1}, {1, 1, 1, 1}},
    {"dp4", 1, 1, {6}, {4}, {1}},
    {"dp2 tp2", 2, 1, {6}, {2}, {2}},
    {"2 stages dp2/dp2", 2, 2, {3, 3}, {2, 2}, {1, 1}},
    {"2 stages dp1tp2/dp2tp1", 2, 2, {2, 4}, {1, 2}, {2, 1}},
    {"3 stages dp2/dp1/dp1", 2, 3, {2, 2, 2}, {2, 1, 1}, {1, 1, 1}},
    {"stage0 dp2tp2, stage1 dp1tp4", 4, 2, {5, 7}, {2, 1}, {2, 4}},
    {"dp8", 1, 1, {2}, {8}, {1}},
    {"tp8", 1, 1, {2}, {1}, {8}},
    {"2 stages dp2tp2/dp2tp2", 2, 2, {4, 4}, {2, 2}, {2, 2}},
    {"3 stages dp3/dp1tp2/dp3", 3, 3, {1, 2, 3}, {3, 1, 3}, {1, 2, 1}},
    {"8 stages of 1", 8, 8, {1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 1}},
};
#define NPLANS ((int)(sizeof plans / sizeof plans[0]))

// The expected layout, by enumeration: stages in order, then dp, then tp.
typedef struct {
    int n;
    int stage[64], d[64], t[64], first_layer[64], layers[64];
} Table;

static void enumerate(const PlanSpec *p, Table *T) {
    int r = 0, layer = 0;
    for (int s = 0; s < p->num_stages; s++) {
        for (int d = 0; d < p->dp[s]; d++)
            for (int t = 0; t < p->tp[s]; t++, r++) {
                T->stage[r] = s;
                T->d[r] = d;
                T->t[r] = t;
                T->first_layer[r] = layer;
                T->layers[r] = p->layers[s];
            }
        layer += p->layers[s];
    }
    T->n = r;
}

// the rank of stage s at (d, t), or -1
static int find(const Table *T, int s, int d, int t) {
    for (int r = 0; r < T->n; r++)
        if (T->stage[r] == s && T->d[r] == d && T->t[r] == t) return r;
    return -1;
}

// Expected neighbour in stage `to`: (d mod dp_to, t mod tp_to), the documented pairing.
static int expected_peer(const PlanSpec *p, const Table *T, int r, int to) {
    if (to < 0 || to >= p->num_stages) return -1;
    return find(T, to, T->d[r] % p->dp[to], T->t[r] % p->tp[to]);
}

static int layout_matches(const PlanSpec *p, const Table *T, int r, const Grid *g) {
    int s = T->stage[r];
    int first = find(T, s, 0, 0);
    int good = g->world_rank == r && g->world_size == T->n && g->stage == s && g->num_stages == p->num_stages &&
               g->dp_index == T->d[r] && g->tp_index == T->t[r] && g->dp_size == p->dp[s] &&
               g->tp_size == p->tp[s] && g->first_layer == T->first_layer[r] && g->num_layers == T->layers[r] &&
               g->stage_first_rank == first && g->prev_rank == expected_peer(p, T, r, s - 1) &&
               g->next_rank == expected_peer(p, T, r, s + 1);
    if (!good)
        fprintf(stderr,
                "plan '%s' rank %d: got stage %d dp %d/%d tp %d/%d layers %d+%d first %d prev %d next %d; "
                "want stage %d dp %d tp %d layers %d+%d first %d prev %d next %d\n",
                p->name, r, g->stage, g->dp_index, g->dp_size, g->tp_index, g->tp_size, g->first_layer,
                g->num_layers, g->stage_first_rank, g->prev_rank, g->next_rank, s, T->d[r], T->t[r],
                T->first_layer[r], T->layers[r], first, expected_peer(p, T, r, s - 1), expected_peer(p, T, r, s + 1));
    return good;
}

// Members of a group (world ranks, in group order) must be exactly `want`.
static int members_match(const CommBackend *C, CommGroup *grp, const int *want, int nwant, const char *what) {
    int n = C->group_size(C, grp), got[64];
    if (n != nwant) {
        fprintf(stderr, "rank %d: %s group has %d ranks, want %d\n", me, what, n, nwant);
        return 0;
    }
    commCheck(C, C->all_gather(C, &me, got, 1, MIST_I32, grp));
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) {
            fprintf(stderr, "rank %d: %s group member %d is rank %d, want %d\n", me, what, i, got[i], want[i]);
            return 0;
        }
    return 1;
}

static void test_built_grid(const PlanSpec *p, const CommBackend *C) {
    Table T;
    enumerate(p, &T);
    Plan plan = make_plan(p);
    Grid g;
    char err[512];
    int rc = grid_build(&g, &plan, C, err, sizeof err);
    check(rc == 0, "%s: grid_build succeeds", p->name);
    if (rc) return;
    check(layout_matches(p, &T, me, &g), "%s: indices, layers and neighbours of every rank", p->name);

    // DP group: same stage and tp index, ordered by dp index; TP group: same stage and dp index.
    int s = T.stage[me], dp_members[64], tp_members[64];
    for (int d = 0; d < p->dp[s]; d++) dp_members[d] = find(&T, s, d, T.t[me]);
    for (int t = 0; t < p->tp[s]; t++) tp_members[t] = find(&T, s, T.d[me], t);
    check(C->group_rank(C, g.dp) == T.d[me] && C->group_rank(C, g.tp) == T.t[me] && C->group_rank(C, g.world) == me,
          "%s: group ranks are the dp/tp/world indices", p->name);
    check(members_match(C, g.dp, dp_members, p->dp[s], "dp"), "%s: dp group members", p->name);
    check(members_match(C, g.tp, tp_members, p->tp[s], "tp"), "%s: tp group members", p->name);

    // Equal neighbouring meshes pair one-to-one: my neighbour's neighbour is me.
    int next_symmetric = 1;
    if (g.next_rank >= 0 && p->dp[s] == p->dp[s + 1] && p->tp[s] == p->tp[s + 1])
        next_symmetric = expected_peer(p, &T, g.next_rank, s) == me;
    check(next_symmetric, "%s: equal meshes pair one-to-one", p->name);

    // The table: rank 0 writes it; a header, a title and one row per rank.
    FILE *tmp = me == 0 ? tmpfile() : NULL;
    grid_print_table(&g, me == 0 ? tmp : stdout);
    int rows = 0;
    if (me == 0) {
        char line[512];
        rewind(tmp);
        while (fgets(line, sizeof line, tmp)) rows++;
        fclose(tmp);
    }
    MPI_Bcast(&rows, 1, MPI_INT, 0, MPI_COMM_WORLD);
    check(rows == T.n + 2, "%s: grid table has one row per rank (%d lines)", p->name, rows);
    grid_free(&g);
}

// Whether the layouts of every rank of every plan match the enumeration
// (no communication: rank 0 computes it alone).
static int all_layouts_match(void) {
    int good = 1;
    char err[256];
    for (int i = 0; i < NPLANS; i++) {
        Table T;
        enumerate(&plans[i], &T);
        Plan plan = make_plan(&plans[i]);
        for (int r = 0; r < T.n; r++) {
            Grid g;
            memset(&g, 0, sizeof g);
            good &= grid_layout(&g, &plan, r, err, sizeof err) == 0 && layout_matches(&plans[i], &T, r, &g);
        }
        Grid g;
        good &= grid_layout(&g, &plan, T.n, err, sizeof err) == 2;  // one past the end
    }
    return good;
}

static void test_bad_plans(const CommBackend *C, int world) {
    char err[512] = "";
    Grid g;
    Plan plan = make_plan(&(PlanSpec){"too big", 1, 1, {2}, {world + 1}, {1}});
    int rc = grid_build(&g, &plan, C, err, sizeof err);
    check(rc == 2 && strstr(err, "needs") && strstr(err, "-np"), "a plan for %d ranks on %d is a config error: %s",
          world + 1, world, err);
    plan = make_plan(&(PlanSpec){"zero tp", 1, 2, {2, 2}, {world, 1}, {1, 0}});
    rc = grid_check_plan(&plan, err, sizeof err);
    check(rc == 2 && strstr(err, "stage 1") && strstr(err, "tp"), "tp = 0 names the stage and key: %s", err);
    plan.num_stages = 0;
    check(grid_check_plan(&plan, err, sizeof err) == 2, "0 stages is rejected: %s", err);
}

// launch_device_share: which ranks of a host share a GPU, by the GPUs' UUIDs (the same
// answer on every rank: the checks are collective)
static void test_device_share(void) {
    unsigned char ids[8][16];
    memset(ids, 0, sizeof ids);
    for (int r = 0; r < 8; r++) ids[r][0] = 0xa0, ids[r][15] = (unsigned char)r;  // 8 GPUs of their own
    int shared = 0;
    DeviceShare d = {0, 0, 0};
    for (int me = 0; me < 8; me++) {
        d = launch_device_share((const unsigned char(*)[16])ids, 8, me);
        shared |= d.shared;
    }
    check(d.gpus == 8 && d.ranks == 8 && !shared, "device share: 8 ranks, 8 UUIDs: 8 GPUs, none shared (%d, %d)",
          d.gpus, d.ranks);
    for (int r = 0; r < 4; r++) ids[r][15] = (unsigned char)(r % 2);  // A B A B
    int all = 1;
    for (int me = 0; me < 4; me++) all &= launch_device_share((const unsigned char(*)[16])ids, 4, me).shared;
    d = launch_device_share((const unsigned char(*)[16])ids, 4, 0);
    check(d.gpus == 2 && d.ranks == 4 && all, "device share: A B A B: 2 GPUs, every rank shares (%d)", d.gpus);
    ids[2][15] = 0;  // A B A: only the two A ranks share
    DeviceShare a = launch_device_share((const unsigned char(*)[16])ids, 3, 2);
    DeviceShare b = launch_device_share((const unsigned char(*)[16])ids, 3, 1);
    check(a.shared && !b.shared && a.gpus == 2, "device share: A B A: rank 2 shares, rank 1 does not");
    memset(ids[0], 0, 16), memset(ids[2], 0, 16);  // none, A, none: CPU ranks share nothing
    DeviceShare c0 = launch_device_share((const unsigned char(*)[16])ids, 3, 0);
    DeviceShare c1 = launch_device_share((const unsigned char(*)[16])ids, 3, 1);
    check(!c0.shared && !c1.shared && c1.gpus == 1 && c1.ranks == 1,
          "device share: ranks without a GPU count neither as GPUs nor as sharing");
}

int main(int argc, char **argv) {
    Launch L;
    if (launch_init(&argc, &argv, &L)) return 1;
    me = L.world_rank;
    const CommBackend *C = comm_mpi_backend();
    check(L.local_rank >= 0 && L.local_rank < L.local_size && L.local_size <= L.world_size,
          "launch: local rank %d of %d", L.local_rank, L.local_size);
    check(strcmp(L.device, "cpu") == 0 || strncmp(L.device, "cuda:", 5) == 0, "launch: device '%s'", L.device);
    check(strcmp(L.device, "cpu") != 0 || (L.gpus_in_use == 0 && L.gpu_shared == 0),
          "launch: a CPU rank drives no GPU (%d in use, shared %d)", L.gpus_in_use, L.gpu_shared);
    test_device_share();
    // rank 0's verdict (check() takes the minimum over ranks; the others add none)
    check(me == 0 ? all_layouts_match() : 1, "grid_layout of every rank of %d plans matches the enumeration", NPLANS);
    int tested = 0;
    for (int i = 0; i < NPLANS; i++) {
        Table T;
        enumerate(&plans[i], &T);
        if (T.n != L.world_size) continue;
        test_built_grid(&plans[i], C);
        tested++;
    }
    check(tested > 0, "%d plans fit %d ranks", tested, L.world_size);
    test_bad_plans(C, L.world_size);
    int rc = me == 0 ? tap_done() : 0;
    launch_finalize();
    return rc;
}
