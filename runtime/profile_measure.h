// Measuring a hardware profile's transfer lines on the machines of a job
// (mist-profile): the collective line (k, beta) of every group shape the job
// can form, the reduce-scatter and all-reduce multipliers, and the host <->
// device copy lines, each a least-squares fit over several sizes. The
// collectives go through the comm path training uses (runtime/comm_select.h:
// NCCL, staged or MPI), so the planner then predicts that path, staging
// included.
//
// A group shape is (n nodes, g ranks on each): the ranks of the first n nodes
// whose rank on their node is below g, as the runtime's dp groups span nodes.
// Its line is the planner's ring formula (base/profile.h):
//   t(all-gather of B bytes in all) = B (N - 1) / N / k + beta,   N = n g,
// fitted over the sizes, each timed as the slowest member's mean over the
// iterations of a blocking in-place all-gather (ZeRO's form).
#ifndef MIST_PROFILE_MEASURE_H
#define MIST_PROFILE_MEASURE_H

#include <stddef.h>
#include <stdio.h>
#include "kernels/backend.h"
#include "base/profile.h"
#include "runtime/comm.h"

#define MEASURE_MAX_SIZES 16

typedef struct {
    size_t bytes[MEASURE_MAX_SIZES];  // whole buffer sizes, ascending
    int num_sizes;
    int warmup, iters;
    int ranks_per_node;  // > 0: ranks [i M, (i+1) M) form node i; 0: by host name
} MeasureOptions;

// One fitted line over (x, t) points: t = x / k + beta.
typedef struct {
    int points;
    double x[MEASURE_MAX_SIZES], t[MEASURE_MAX_SIZES];  // bytes (ring-scaled for collectives), seconds
    LinkFit fit;
    double worst_residual;  // max |fit(x) - t| / t over the points
} MeasuredLine;

typedef struct {
    int nodes, per_node;  // the job's layout: nodes, and the fewest ranks any node has
    int num_shapes;
    int shape[PROFILE_SHAPES * PROFILE_SHAPES][2];         // (nodes, ranks per node) of each measured shape
    MeasuredLine coll[PROFILE_SHAPES * PROFILE_SHAPES];    // its all-gather line
    int have_factors;  // measured on the largest shape at the largest size, f32
    double factor_rs, factor_ar;  // reduce-scatter and all-reduce time over the all-gather's
    MeasuredLine h2d, d2h;  // pinned host <-> device, every rank copying at once
    int staged;             // the collectives went through host memory (runtime/comm_staged.h)
} ProfileMeasure;

// t = x / k + beta by least squares over n >= 1 points (x ascending, > 0).
// A line through the origin when the intercept would be negative, or with one
// point; k from the slowest point when the slope is not positive (noise).
// k and beta are clamped to what profile files accept (base/profile.c).
void measure_fit_line(MeasuredLine *m);

// Collective over `world` (every rank of the job): measures with `comm` (the
// job's comm path) on memory of `be`; `mpi` makes the groups and reduces the
// timings. Fills *out: the layout, shapes and copy lines on every rank, each
// shape's collective line and the multipliers on its members (world rank 0 is
// in every shape). Returns 0, or -1 with a message in err (the same verdict on
// every rank).
int profile_measure(const CommBackend *mpi, const CommBackend *comm, CommGroup *world, Backend *be,
                    const MeasureOptions *o, ProfileMeasure *out, char *err, size_t errlen);

// The whole measurement as mist-profile and mist-train run it, collective over
// `world`: the backend of this rank's `device` (the launcher's pick), the comm path
// training would take (runtime/comm_select.h), profile_measure, then both
// released. comm: the path in words. Returns 0, or -1 with err (every rank alike).
int profile_measure_job(const CommBackend *mpi, CommGroup *world, const char *device, const MeasureOptions *o,
                        ProfileMeasure *out, char *comm, size_t commlen, char *err, size_t errlen);

// The measured lines into *p (the shapes measured; the others keep p's values),
// and whether they were measured through host memory (when any collective was).
void profile_apply_measure(HwProfile *p, const ProfileMeasure *m);

// The profile as an INI file (profile_load reads it back): a comment saying
// who measured what over which base and comm path, then every field. A
// malloc'd text (its length in *len), or NULL when out of memory.
char *profile_measure_ini(const HwProfile *p, const ProfileMeasure *m, const char *who, const char *base,
                          const char *comm, size_t *len);

// The measurement as one JSON object: layout, comm path, sizes, per shape
// {nodes, gpus, seconds[], k_bytes_per_second, beta_seconds, worst_residual},
// the multipliers (null when not measured), h2d and d2h likewise. Malloc'd, or NULL.
char *profile_measure_json(const ProfileMeasure *m, const MeasureOptions *o, const char *comm, int world, size_t *len);

// The table of the measurement (on rank 0, whose lines are complete): each
// shape's times per size, its fit and worst residual, the host copies, the
// multipliers. who: the program ("mist-profile"); comm: the comm path in words.
void profile_measure_print(FILE *f, const char *who, const ProfileMeasure *m, const MeasureOptions *o, const char *comm,
                           int world);

// mist-profile's outputs (rank 0): the table (on stderr when the profile goes
// to standard output), the profile `base` (named base_name) with the measured
// lines as an INI file to out ("-": standard output), and with json set the
// measurement as JSON there. who: the program, for messages. Returns 0, or 1
// after a message on stderr.
int profile_measure_write(HwProfile *base, const char *base_name, const ProfileMeasure *m, const MeasureOptions *o,
                          const char *comm, int world, const char *out, const char *json, const char *who);

#endif
