// The MPI comm backend under mpirun (1, 2, 3, 4, 8 ranks; tests/comm.sh):
// the collective suite (tests/comm_suite.h) on the world group, an odd split
// (3 + the rest, in reverse key order) and the dp/tp groups of a grid; then
// the same through the staged backend with every buffer in device memory.
#include "runtime/comm_mpi.h"
#include "runtime/comm_staged.h"
#include "runtime/launch.h"
#include "tests/comm_suite.h"
#include "tests/comm_hier_suite.h"

int main(int argc, char **argv) {
    Launch L;
    if (launch_init(&argc, &argv, &L)) return 1;
    me = L.world_rank;
    int n = L.world_size;
    C = comm_mpi_backend();

    CommGroup *world = NULL, *odd = NULL;
    Grid grid;
    if (suite_groups(n, &world, &odd, &grid)) return 1;

    test_group("world", world);
    test_group("split 3+rest", odd);
    test_group("grid dp", grid.dp);
    test_group("grid tp", grid.tp);

    // a large buffer too (several internal segments)
    {
        size_t count = (size_t)1 << 18;
        check(t_all_reduce(world, MIST_F32, COMM_SUM, count, NONBLOCKING), "world: all_reduce f32 of 2^18 elements");
        check(t_reduce_scatter(world, MIST_BF16, COMM_SUM, count / 8, IN_PLACE), "world: reduce_scatter bf16 2^15/rank");
    }
    test_determinism(world, MIST_F32);
    test_determinism(world, MIST_BF16);
    test_determinism(odd, MIST_BF16);
    test_concurrent(world);
    test_concurrent(odd);
    test_errors(world);
    // the hierarchical collectives (4 ranks: 2 x 2; 8: 4 x 2 and 2 x 4)
    test_hier("world", world, 2);
    test_hier("world", world, 4);

    // The staged backend (collectives of device memory through a host bounce buffer) over
    // the same groups, every collective's buffers in the CPU backend's device memory: the
    // same results; send/recv (host buffers) pass through; device point-to-point goes through the host.
    char err[512];
    dev_be = backend_cpu_create(MIST_F32, err, sizeof err);
    check(dev_be != NULL, "CPU backend for the staged round: %s", dev_be ? "created" : err);
    if (!dev_be) return 1;
    C = comm_staged_new(comm_mpi_backend(), dev_be);
    if (!C) return 1;
    test_group("staged world", world);
    test_group("staged split 3+rest", odd);
    test_group("staged grid dp", grid.dp);
    test_group("staged grid tp", grid.tp);
    check(t_all_reduce(world, MIST_F32, COMM_SUM, (size_t)1 << 18, NONBLOCKING), "staged world: all_reduce f32 of 2^18");
    test_determinism(world, MIST_BF16);
    test_concurrent(world);  // three staged requests in flight at once, completed by test()
    test_concurrent(odd);
    test_hier("staged world", world, 2);
    test_hier("staged world", world, 4);
    long long calls = comm_staged_calls(C);
    check(calls > 0 && comm_staged_host_bytes(C) > 0, "staged round: %lld calls staged, bounce %zu B", calls,
          comm_staged_host_bytes(C));
    {
        // a ring of device-memory messages: each rank sends 4 floats of its rank to the next
        // one and receives the previous one's, through the bounce buffers
        int n = C->group_size(C, world), me = C->group_rank(C, world);
        float *out = dev_be->alloc_device(dev_be, 4 * sizeof(float)), *in = dev_be->alloc_device(dev_be, 4 * sizeof(float));
        float v[4] = {(float)me, (float)me + 0.5f, -(float)me, 7.0f}, got[4] = {0};
        dev_be->copy_h2d(dev_be, out, v, sizeof v, NULL);
        dev_be->memset_device(dev_be, in, 0, sizeof got, NULL);
        CommRequest *rq[2] = {NULL, NULL};
        int rr = C->irecv(C, in, 4, MIST_F32, (me + n - 1) % n, 9, world, &rq[0]);
        int rs = C->isend(C, out, 4, MIST_F32, (me + 1) % n, 9, world, &rq[1]);
        int rw = (rr || rs) ? 1 : C->wait(C, rq[1]) | C->wait(C, rq[0]);
        dev_be->copy_d2h(dev_be, got, in, sizeof got, NULL);
        dev_be->synchronize(dev_be);
        int prev = (me + n - 1) % n;
        check(!rr && !rs && !rw && got[0] == (float)prev && got[1] == (float)prev + 0.5f && got[2] == -(float)prev &&
                  got[3] == 7.0f,
              "staged: device point-to-point ring through host: rank %d got %g %g %g %g from rank %d", me, got[0],
              got[1], got[2], got[3], prev);
        dev_be->free_device(dev_be, out);
        dev_be->free_device(dev_be, in);
    }
    comm_staged_free(C);
    return suite_finish(comm_mpi_backend(), world, odd, &grid);
}
