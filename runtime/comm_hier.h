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
// The calls complete before they return (they wait on their own requests);
// reduce-scatter and all-gather are hierarchical in place only, other forms
// run flat.
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
// The two subgroups (intra, inter) into out[0..1], or `flat` twice when h is NULL,
// for the communicators made at start (comm_select_prepare); returns 2.
int comm_hier_groups(const CommHier *h, CommGroup *flat, CommGroup **out);

// The blocking collectives, with the arguments of the flat ones (runtime/comm.h)
// on h's group. overlap: pipeline the all-reduce in chunks (HO-Ring).
int comm_hier_all_reduce(CommHier *h, const void *send, void *recv, size_t count, MistDtype t, CommOp op,
                         int overlap);
int comm_hier_reduce_scatter(CommHier *h, const void *send, void *recv, size_t count, MistDtype t, CommOp op);
int comm_hier_all_gather(CommHier *h, const void *send, void *recv, size_t count, MistDtype t);

// One entry for callers that pick per run: h == NULL runs the flat nonblocking
// collective of kind k on `group` (*req to wait on); otherwise the
// hierarchical one (with overlap), complete on return (*req = NULL).
// reduce-scatter: count per rank, in place at send + rank*count; all-gather:
// count per rank; all-reduce: count in all (op COMM_SUM).
int comm_hier_start(CommHier *h, const CommBackend *c, CollKind k, const void *send, void *recv, size_t count,
                    MistDtype t, CommGroup *group, CommRequest **req);

#endif
