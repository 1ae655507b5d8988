// Hardware profile: everything the cost and memory model knows about a
// device type and its interconnect. Built-in presets (profile_presets.c) or an
// INI profile file (profile.c). All fields are SI: bytes, seconds, bytes/s,
// FLOP/s. The model never hard-codes a hardware number; it reads them here.
#ifndef MIST_PROFILE_H
#define MIST_PROFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// The four streams that can run at once on a device (docs/design.md §4):
// compute, GPU<->GPU collectives, host->device copies, device->host copies.
typedef enum { STREAM_C = 0, STREAM_N = 1, STREAM_H2D = 2, STREAM_D2H = 3, STREAM_COUNT = 4 } Stream;
#define STREAM_MASK(s) (1u << (s))
#define STREAM_SUBSETS 16  // indexed by a bit mask of streams

// Precision of the compute: index into peak_flops.
typedef enum { DT_BF16 = 0, DT_FP16 = 1, DT_FP32 = 2, DT_COUNT = 3 } ComputeDtype;

// Collective kinds and their cost multipliers over the fitted all-gather curve.
typedef enum { COLL_ALL_GATHER = 0, COLL_REDUCE_SCATTER = 1, COLL_ALL_REDUCE = 2, COLL_COUNT = 3 } CollKind;

// A fitted transfer line: t = bytes / k + beta (ring collectives scale bytes
// by (n-1)/n first).
typedef struct {
    double k;     // bytes/s
    double beta;  // s
} LinkFit;

// Group shapes are (nodes in the group, GPUs per node in the group), each a
// power of two 1..128; index = log2, larger values clamp to the last cell.
#define PROFILE_SHAPES 8

typedef struct {
    char name[64];            // preset name or file path
    int64_t memory_bytes;     // usable device memory per device
    // host memory per node that the ranks' host buffers (offloaded states and
    // activations, pinned staging) may take; 0 = not checked
    int64_t host_memory_bytes;
    double peak_flops[DT_COUNT];   // dense peak FLOP/s per compute dtype
    double flops_efficiency;       // achievable fraction of peak for large matmuls
    double mem_bandwidth;          // device memory bytes/s (HBM / GDDR)
    double bandwidth_efficiency;   // achievable fraction of mem_bandwidth for streaming ops
    double launch_seconds;         // per-kernel launch overhead added to every op
    // Shape-aware compute (docs/design.md "Compute time"; constants per preset in
    // docs/hardware.md). gemm_sms = 0: every matmul at flops_efficiency of peak
    // (the cpu preset, and a profile file that does not set the keys).
    int gemm_sms;                    // streaming multiprocessors a GEMM's output tiles spread over
    int gemm_tile_m, gemm_tile_n;    // output tile of the library's large-GEMM kernels (elements)
    double gemm_efficiency;          // fraction of peak one full wave of tiles reaches
    double gemm_k_overhead;          // each tile's fixed prologue/epilogue, as extra K (elements)
    // attention_efficiency = 0: attention at flops_efficiency like a matmul; else its own
    // curve: peak * eff * s / (s + seq_half) * hd / (hd + head_half)
    double attention_efficiency;
    double attention_seq_half;       // sequence length at which attention reaches half its efficiency
    double attention_head_half;      // head size at which it reaches half
    // the planner's device capacity = memory_bytes * usable_memory_fraction (1 unless set)
    double usable_memory_fraction;
    int gpus_per_node;             // devices per node the fits were made on (TP stays inside)
    LinkFit coll[PROFILE_SHAPES][PROFILE_SHAPES];  // [log2 nodes][log2 gpus per node] all-gather fit
    double coll_factor[COLL_COUNT];  // multipliers: all-gather 1.0, reduce-scatter 1.1, all-reduce 2.1
    // 1: collectives of device memory go through host memory (runtime/comm_staged.h),
    // and the coll lines were measured that way (mist-profile): each includes a
    // device->host copy of what is sent and a host->device copy of what is received,
    // which run on the critical path (the device waits), not beside compute
    int staged_collectives;
    LinkFit h2d, d2h;                // host->device and device->host copies (pinned)
    // slowdown[mask][s]: factor by which stream s runs slower while exactly
    // the streams in mask run (s in mask, |mask| >= 2). 1.0 = no interference;
    // |mask| for every member = the streams serialise (one shared engine).
    double slowdown[STREAM_SUBSETS][STREAM_COUNT];
} HwProfile;

// The presets (docs/hardware.md), as messages list them.
#define PROFILE_PRESETS_TEXT "gcp-l4, gcp-a100-40g, gcp-a100-80g, dgx-a100-80g, dgx-h100, dgx-h200, cpu"

// Fill *p from a preset name (PROFILE_PRESETS_TEXT); returns 0, or -1 for an
// unknown name. The names used before (l4, a100-40g, a100-80g, h100-80g, h200)
// load the preset that replaced them, with one notice on stderr per process.
int profile_preset(HwProfile *p, const char *name);

// Names of the presets, NULL-terminated (the current names only).
extern const char *const profile_preset_names[];

// 1 if name is a preset, current or old; the current name of an old one
// (else name itself). Neither prints anything.
int profile_preset_exists(const char *name);
const char *profile_preset_current_name(const char *name);

// Load a preset name or an INI profile file (see docs/plan-analyze.md). A file
// may start from a preset with `[profile] base = NAME` and override fields.
// Returns 0, or -1 with a message naming file/line/key in err.
int profile_load(HwProfile *p, const char *name_or_path, char *err, size_t errlen);

// The planner's device capacity: memory_bytes * usable_memory_fraction.
int64_t profile_capacity_bytes(const HwProfile *p);

// Index of a group size in the shape table: log2, clamped.
int profile_shape_index(int n);

// The fitted (k, beta) for a group of `nodes` nodes x `gpus` GPUs per node.
LinkFit profile_coll_fit(const HwProfile *p, int nodes, int gpus);

// Ring collective time for `bytes` (the full, unsharded buffer) over a group
// of nodes x gpus: factor * (bytes/k * (n-1)/n + beta); 0 for n = 1 or 0 bytes.
double profile_collective_seconds(const HwProfile *p, CollKind kind, double bytes, int nodes, int gpus);

// Host copy time: bytes/k + beta (0 for 0 bytes).
double profile_host_copy_seconds(const LinkFit *f, double bytes);

// Print the profile as an INI file that profile_load reads back.
void profile_write_ini(const HwProfile *p, FILE *file);

#endif
