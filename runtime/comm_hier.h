// Hierarchical collectives over a group whose ranks span several nodes
// (docs/paro.md "Hierarchical collectives"): built once above the comm
// interface (runtime/comm.h) from group_split and the nonblocking
// collectives and messages of any backend (MPI, NCCL, staged).
//
// The group's P = n * g ranks sit on n nodes of g ranks each, numbered node
// by node (group rank r = node * g + local). Two subgroups carry the levels:
// `intra` (the g ranks of this rank's node) and `inter` (the n ranks with this
// rank's local index, one per node: its peers).
//   all-reduce:      intra reduce-scatter, inter all-reduce of the 1/g piece,
//                    intra all-gather;
//   reduce-scatter:  intra reduce-scatter of g super-blocks (n blocks each),
//                    inter reduce-scatter of this rank's super-block, one
//                    message that hands the block to its owner;
//   all-gather:      the same backwards (message, inter, intra).
// With overlap (HO-Ring) the all-reduce pipelines its buffer in chunks: the
// inter-node all-reduce of chunk j runs while chunk j+1's intra-node
// reduce-scatter and chunk j-1's all-gather do (cost_hier_chunks picks the
// chunks; planner/cost_terms.h prices both forms).
//
// Results are bit-identical on every rank of the group and equal the flat
// collective's up to fp32 reassociation (the sum is taken node first); bf16
// adds in fp32 at each level and rounds once per level (twice in all), so it
// may differ from the flat result by one bf16 rounding of the node's sum.
// Reduce-scatter and all-gather are hierarchical in place only, other forms
// run flat (on the whole group).
//
// Nonblocking: an operation is a list of sub-operations (backend collectives
// and the message pair) started in list order, each once the one it needs has
// completed; comm_hier_test / comm_hier_wait move it along (as MPI moves its
// own nonblocking collectives only inside its calls, a caller that polls at
// its compute boundaries overlaps the levels with its compute).
#ifndef MIST_COMM_HIER_H
#define MIST_COMM_HIER_H

#include <stddef.h>
#include "base/profile.h"
#include "runtime/comm.h"

typedef struct CommHier CommHier;

// Collective over `group`: `node` is this rank's node (e.g. world rank /
// gpus_per_node). *out: the hierarchy, or NULL when the group does not have
// one to use (one node, one rank per node, nodes of unequal size, ranks not
// numbered node by node), with the reason in why. Returns 0, or the backend's
// error code.
int comm_hier_new(const CommBackend *c, CommGroup *group, int node, CommHier **out, char *why, size_t len);
void comm_hier_free(CommHier *h);
int comm_hier_nodes(const CommHier *h);     // n
int comm_hier_per_node(const CommHier *h);  // g
// Its three groups (intra, inter, and its copy of the whole group) into out[0..2],
// or `flat` three times when h is NULL, for the communicators made at start
// (comm_select_prepare); returns 3.
int comm_hier_groups(const CommHier *h, CommGroup *flat, CommGroup **out);

// The blocking collectives, with the arguments of the flat ones (runtime/comm.h)
// on h's group. chunks: the all-reduce's pipeline (HO-Ring): 0 or 1 = the levels
// back to back, COMM_HIER_AUTO = cost_hier_chunks(bytes) (what training and
// the price use), K > 1 = K chunks (at most COST_HIER_MAX_CHUNKS).
#define COMM_HIER_AUTO (-1)
int comm_hier_all_reduce(CommHier *h, const void *send, void *recv, size_t count, MistDtype t, CommOp op,
                         int chunks);
int comm_hier_reduce_scatter(CommHier *h, const void *send, void *recv, size_t count, MistDtype t, CommOp op);
int comm_hier_all_gather(CommHier *h, const void *send, void *recv, size_t count, MistDtype t);

// Starts the hierarchical collective of kind k (reduce-scatter, all-gather:
// count per rank; all-reduce: count in all, in `chunks`): *req to finish with
// comm_hier_wait / comm_hier_test, or NULL when it has already completed (at
// most 32 operations are in flight per hierarchy; more complete on start).
int comm_hier_istart(CommHier *h, CollKind k, const void *send, void *recv, size_t count, MistDtype t, CommOp op,
                     int chunks, CommRequest **req);
// wait / test of a request of h's (comm_hier_istart) or, for any other request
// (h may be NULL), of backend c: one pair of calls for both.
int comm_hier_wait(CommHier *h, const CommBackend *c, CommRequest *req);
int comm_hier_test(CommHier *h, const CommBackend *c, CommRequest *req, int *done);

// One entry for callers that pick per run: h == NULL starts the flat
// nonblocking collective of kind k on `group`, otherwise the hierarchical one
// (op COMM_SUM, chunks COMM_HIER_AUTO); *req (possibly NULL: done) to finish
// with comm_hier_wait / comm_hier_test.
int comm_hier_start(CommHier *h, const CommBackend *c, CollKind k, const void *send, void *recv, size_t count,
                    MistDtype t, CommGroup *group, CommRequest **req);

#endif
