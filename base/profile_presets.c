// Built-in hardware presets, named for the machine class they describe.
// Sources, per field, in the comments and in docs/hardware.md:
// - gcp-l4, gcp-a100-*: the fits published with the Mist artifact for the
//   Google Cloud clusters it measured (docs/design.md §4), whose bandwidths
//   are in GiB/s (2^30 bytes/s); converted to bytes/s here.
// - dgx-a100-80g, dgx-h100, dgx-h200: NVIDIA datasheet peaks and published
//   nccl-tests bus bandwidths (GB/s = 1e9 bytes/s) for 8-GPU NVSwitch nodes
//   joined by one InfiniBand NIC per GPU.
// - cpu: the MPI-emulated devices of the CPU backend on one host.
// The names used before (l4, a100-40g, a100-80g, h100-80g, h200) still load,
// with a one-line notice naming the preset that replaced them.
#include <stdio.h>
#include <string.h>
#include "base/launcher_rank.h"
#include "base/profile.h"

#define GiB 1073741824.0
#define GB 1e9
#define TFLOPS 1e12

const char *const profile_preset_names[] = {"gcp-l4",   "gcp-a100-40g", "gcp-a100-80g", "dgx-a100-80g",
                                            "dgx-h100", "dgx-h200",     "cpu",          NULL};

static void set_all_cells(HwProfile *p, LinkFit f) {
    for (int n = 0; n < PROFILE_SHAPES; n++)
        for (int g = 0; g < PROFILE_SHAPES; g++) p->coll[n][g] = f;
}

// cells [nodes index][gpus 1,2,4,8] from a row of 4 fits; larger GPU counts reuse the 8 cell
static void set_row(HwProfile *p, int node_index, const LinkFit row[4]) {
    for (int g = 0; g < PROFILE_SHAPES; g++) p->coll[node_index][g] = row[g < 4 ? g : 3];
}

// rows for more nodes than were fitted reuse the largest fitted row
static void extend_rows(HwProfile *p, int last_fitted) {
    for (int n = last_fitted + 1; n < PROFILE_SHAPES; n++)
        memcpy(p->coll[n], p->coll[last_fitted], sizeof p->coll[n]);
}

// Slowdowns from a per-pair penalty: stream s runs (1 + sum of pen[s][o]) times
// slower while the other streams o of the mask run too.
static void set_pairwise_slowdowns(HwProfile *p, const double pen[STREAM_COUNT][STREAM_COUNT]) {
    for (unsigned m = 0; m < STREAM_SUBSETS; m++)
        for (int s = 0; s < STREAM_COUNT; s++) {
            double f = 1.0;
            if (m & STREAM_MASK(s))
                for (int o = 0; o < STREAM_COUNT; o++)
                    if (o != s && (m & STREAM_MASK(o))) f += pen[s][o];
            p->slowdown[m][s] = f;
        }
}

// One shared engine: every stream of a k-way overlap runs k times slower, so
// the window algorithm returns the plain sum of the stream times.
static void set_serial_slowdowns(HwProfile *p) {
    for (unsigned m = 0; m < STREAM_SUBSETS; m++) {
        int k = __builtin_popcount(m);
        for (int s = 0; s < STREAM_COUNT; s++) p->slowdown[m][s] = (m & STREAM_MASK(s)) ? k : 1.0;
    }
}

static void set_slowdown(HwProfile *p, unsigned mask, double c, double n, double h, double d) {
    double v[4] = {c, n, h, d};
    for (int s = 0; s < STREAM_COUNT; s++) p->slowdown[mask][s] = (mask & STREAM_MASK(s)) ? v[s] : 1.0;
}

// GEMM time model (docs/design.md, "Compute time"): sms, the output tile,
// the fraction of peak a full wave reaches and each tile's fixed cost in K.
static void set_gemm(HwProfile *p, int sms, int tile_m, int tile_n, double efficiency, double k_overhead) {
    p->gemm_sms = sms;
    p->gemm_tile_m = tile_m;
    p->gemm_tile_n = tile_n;
    p->gemm_efficiency = efficiency;
    p->gemm_k_overhead = k_overhead;
}

// Attention curve: efficiency * s/(s + 667) * hd/(hd + 16); the two half
// points are fitted to our H200 attention kernel at (seq, head size) =
// (1024, 64), (2048, 128), (4096, 128) (benchmarks/gpu/bench_kernels_h200.json).
static void set_attention(HwProfile *p, double efficiency) {
    p->attention_efficiency = efficiency;
    p->attention_seq_half = 667;
    p->attention_head_half = 16;
}

static void common_defaults(HwProfile *p, const char *name) {
    memset(p, 0, sizeof *p);
    strncpy(p->name, name, sizeof p->name - 1);
    p->coll_factor[COLL_ALL_GATHER] = 1.0;      // Mist's multipliers over the all-gather fit
    p->coll_factor[COLL_REDUCE_SCATTER] = 1.1;
    p->coll_factor[COLL_ALL_REDUCE] = 2.1;
    p->bandwidth_efficiency = 0.8;
    p->usable_memory_fraction = 1.0;
    p->gpus_per_node = 8;
    for (unsigned m = 0; m < STREAM_SUBSETS; m++)
        for (int s = 0; s < STREAM_COUNT; s++) p->slowdown[m][s] = 1.0;
}

#define C_ STREAM_MASK(STREAM_C)
#define N_ STREAM_MASK(STREAM_N)
#define H_ STREAM_MASK(STREAM_H2D)
#define D_ STREAM_MASK(STREAM_D2H)

static void preset_l4(HwProfile *p) {
    common_defaults(p, "gcp-l4");
    p->memory_bytes = (int64_t)(22.488 * GiB);  // 24 GB card; Mist's usable capacity
    p->peak_flops[DT_BF16] = 121 * TFLOPS;      // datasheet dense tensor
    p->peak_flops[DT_FP16] = 121 * TFLOPS;
    p->peak_flops[DT_FP32] = 30.3 * TFLOPS;
    // Mist's op table: fc1 (2048x8192, b=1, s=2048) = 68.7 GFLOP in 1.267 ms
    // = 54 TFLOP/s, 45% of the bf16 peak (the L4 throttles its clock).
    p->flops_efficiency = 0.45;
    // The GEMM and attention curves fitted to the same table (docs/hardware.md):
    // 58 SMs, 128x128 tiles, 48.5% of peak per full wave, 160 elements of K per
    // tile of fixed cost: its 40 GEMM times (5 shapes x b = 1..8, forward and
    // backward) within +-6% but attn_proj at b = 1 (-15%); flash attention
    // (flash_attn_qkvpacked, fwd + bwd) 34 TFLOP/s at seq 2048, head size 128.
    set_gemm(p, 58, 128, 128, 0.485, 160);
    set_attention(p, 0.424);
    p->mem_bandwidth = 300 * GB;  // GDDR6
    p->launch_seconds = 5e-6;
    p->gpus_per_node = 8;
    p->host_memory_bytes = (int64_t)(0.9 * 384 * GB);  // 8 x L4 node (GCP g2-standard-96), 10% left to the OS
    // Mist's fits, k in GiB/s: one node 2/4/8 GPUs; 2 nodes; 4 nodes (PCIe, no NVLink).
    const LinkFit n1[4] = {{4.5 * GiB, 0}, {2.964 * GiB, 1e-4}, {4.1635 * GiB, 4e-4}, {4.6832 * GiB, 3e-4}};
    const LinkFit n2[4] = {{0.4895 * GiB, 0.0045}, {0.9791 * GiB, 0.0076}, {1.7183 * GiB, 0}, {3.3215 * GiB, 0.0013}};
    const LinkFit n4[4] = {{0.4609 * GiB, 0.0102}, {0.9195 * GiB, 0.0008}, {1.6759 * GiB, 0.0045}, {2.9659 * GiB, 0.003}};
    set_row(p, 0, n1);
    set_row(p, 1, n2);
    set_row(p, 2, n4);
    extend_rows(p, 2);
    p->h2d = (LinkFit){5.7546 * GiB, 4e-4};
    p->d2h = (LinkFit){6.1252 * GiB, 4e-4};
    // Mist's 28 interference factors for the L4 (fits at the bound 50 included).
    set_slowdown(p, C_ | N_, 1.1676, 1.0, 0, 0);  // compute 16.8% slower under NCCL
    set_slowdown(p, C_ | H_, 1.0152, 0, 1.0005, 0);
    set_slowdown(p, C_ | D_, 1.0179, 0, 0, 1.0022);
    set_slowdown(p, N_ | H_, 0, 1.0, 2.1383, 0);
    set_slowdown(p, N_ | D_, 0, 1.078, 0, 2.438);
    set_slowdown(p, H_ | D_, 0, 0, 2.4327, 1.0974);
    set_slowdown(p, C_ | N_ | H_, 2.087, 1.001, 2.393, 0);
    set_slowdown(p, C_ | N_ | D_, 2.415, 1.087, 0, 2.664);
    set_slowdown(p, C_ | H_ | D_, 1.938, 0, 3.265, 1.0);
    set_slowdown(p, N_ | H_ | D_, 0, 1.234, 50.0, 1.688);
    set_slowdown(p, C_ | N_ | H_ | D_, 18.94, 1.26, 50.0, 1.60);
}

// NVLink GPUs without a published interference fit: compute loses SMs to
// NCCL kernels (~10%), PCIe copies barely touch compute, H2D and D2H share
// the PCIe root complex a little. Estimates until measured.
static void nvlink_slowdowns(HwProfile *p) {
    const double pen[STREAM_COUNT][STREAM_COUNT] = {
        //  C     N     H2D   D2H   (penalty on the row stream from the column stream)
        {0.00, 0.10, 0.02, 0.02},
        {0.05, 0.00, 0.02, 0.02},
        {0.01, 0.05, 0.00, 0.10},
        {0.01, 0.05, 0.10, 0.00},
    };
    set_pairwise_slowdowns(p, pen);
}

static void preset_a100(HwProfile *p, const char *name, double mem_gib, double hbm, double host_gb) {
    common_defaults(p, name);
    p->memory_bytes = (int64_t)(mem_gib * GiB);
    p->host_memory_bytes = (int64_t)(0.9 * host_gb * GB);  // 10% left to the OS
    p->peak_flops[DT_BF16] = 312 * TFLOPS;  // datasheet dense tensor
    p->peak_flops[DT_FP16] = 312 * TFLOPS;
    p->peak_flops[DT_FP32] = 19.5 * TFLOPS;  // non-tensor fp32
    p->flops_efficiency = 0.7;
    p->mem_bandwidth = hbm;
    p->launch_seconds = 5e-6;
    // Mist's A100-SXM4-40GB fits, GiB/s; beta 0.1-0.4 ms intra-node as published,
    // 0.5 ms assumed across nodes (not in the published summary).
    const LinkFit n1[4] = {{139.04 * GiB, 1e-4}, {139.04 * GiB, 1e-4}, {192.62 * GiB, 2e-4}, {210.31 * GiB, 4e-4}};
    const LinkFit n2[4] = {{1.297 * GiB, 5e-4}, {2.605 * GiB, 5e-4}, {5.418 * GiB, 5e-4}, {10.703 * GiB, 5e-4}};
    const LinkFit n4[4] = {{1.253 * GiB, 5e-4}, {2.486 * GiB, 5e-4}, {5.300 * GiB, 5e-4}, {10.604 * GiB, 5e-4}};
    set_row(p, 0, n1);
    set_row(p, 1, n2);
    set_row(p, 2, n4);
    extend_rows(p, 2);
    p->h2d = (LinkFit){5.3645 * GiB, 4e-4};  // Mist's fit; beta taken from the L4 fit
    p->d2h = (LinkFit){5.8471 * GiB, 4e-4};
    nvlink_slowdowns(p);
}

// An 8-GPU NVSwitch node with one InfiniBand NIC per GPU (DGX A100, DGX H100,
// DGX H200). Every number is a datasheet peak or a published nccl-tests /
// nvbandwidth measurement, in GB/s = 1e9 bytes/s (docs/hardware.md cites each).
typedef struct {
    const char *name;
    double memory_gib;      // device memory as the driver reports it, GiB
    double bf16_tflops;     // datasheet dense tensor peak (fp16 the same)
    double fp32_tflops;     // datasheet non-tensor fp32
    double hbm_gbs;         // datasheet HBM bandwidth
    double nvlink_busbw;    // nccl-tests ring bus bandwidth inside the node, GB/s
    double nic_busbw;       // nccl-tests bus bandwidth one NIC carries across nodes, GB/s
    double pcie_gbs;        // pinned host<->device copy rate (PCIe), GB/s
    double launch_seconds;  // assumed per-kernel launch overhead
    int sms;                // streaming multiprocessors (datasheet)
    double gemm_efficiency; // fraction of peak of a full wave of 128x128 tiles
    double attention_efficiency;  // the attention curve's scale (set_attention)
} DgxNode;

// A ring collective is bound by its slowest hop. Inside a node every GPU has
// its full NVLink share through NVSwitch, whatever the group size; a group
// spanning nodes with g GPUs per node crosses each node boundary through g
// NICs, so bus bandwidth = min(NVLink, g x one NIC). Latencies (beta) are
// assumed: small-message nccl-tests times are tens of microseconds in a node
// and about 0.1 ms across nodes.
static void preset_dgx(HwProfile *p, const DgxNode *d) {
    common_defaults(p, d->name);
    p->memory_bytes = (int64_t)(d->memory_gib * GiB);
    p->host_memory_bytes = (int64_t)(0.9 * 2048 * GB);  // DGX A100 640GB / H100 / H200: 2 TB, 10% left to the OS
    p->peak_flops[DT_BF16] = d->bf16_tflops * TFLOPS;
    p->peak_flops[DT_FP16] = d->bf16_tflops * TFLOPS;
    p->peak_flops[DT_FP32] = d->fp32_tflops * TFLOPS;
    p->flops_efficiency = 0.7;  // the fixed fraction before the GEMM model; unused while gemm_sms > 0
    // K overhead 416: fitted with the efficiency to our H200 GEMMs (docs/hardware.md)
    set_gemm(p, d->sms, 128, 128, d->gemm_efficiency, 416);
    set_attention(p, d->attention_efficiency);
    p->mem_bandwidth = d->hbm_gbs * GB;
    p->launch_seconds = d->launch_seconds;
    for (int n = 0; n < PROFILE_SHAPES; n++)
        for (int g = 0; g < PROFILE_SHAPES; g++) {
            int gpus = 1 << (g < 3 ? g : 3);  // 8 GPUs per node: larger shapes reuse the 8 cell
            double across = gpus * d->nic_busbw;
            double k = n == 0 || across > d->nvlink_busbw ? d->nvlink_busbw : across;
            p->coll[n][g] = (LinkFit){k * GB, n == 0 ? 3e-5 : 1e-4};
        }
    p->h2d = (LinkFit){d->pcie_gbs * GB, 2e-5};  // beta assumed (one copy-engine launch)
    p->d2h = (LinkFit){d->pcie_gbs * GB, 2e-5};
    nvlink_slowdowns(p);
}

// A100 SXM4 80GB: 312 TFLOP/s bf16 dense, 19.5 fp32, 2039 GB/s HBM2e; 80 GiB
// (81920 MiB). NVLink 3 via NVSwitch: 230 GB/s all-reduce bus bandwidth on 8
// GPUs (nccl-tests issue 175: 232.5 GB/s). 8x HDR 200 Gb/s: 192 GB/s bus
// bandwidth across two DGX A100 (nccl issue 812, NVIDIA) = 24 GB/s per NIC
// (nccl issue 1048: one HDR HCA reaches 24 GB/s). PCIe Gen4 x16: 25 GB/s
// pinned (nvbandwidth issue 42, A100-SXM4: 25.13 GB/s). 108 SMs; GEMMs at
// 85% of peak per full wave (assumed, a little under the H200 fit); attention
// at 55% of peak at seq 2048, head size 128 (FlashAttention-2, arXiv
// 2307.08691: 50-73% of A100 peak forward, fwd + bwd a little lower).
static const DgxNode dgx_a100_80g = {"dgx-a100-80g", 80, 312, 19.5, 2039, 230, 24, 25, 5e-6, 108, 0.85, 0.82};
// H100 SXM5 80GB: 989 TFLOP/s bf16 dense, 67 fp32, 3350 GB/s HBM3; 80 GiB as
// the h100-80g preset had it. NVLink 4 via NVSwitch: NCCL reaches 370 GB/s
// ring bus bandwidth of the 450 GB/s line rate (nccl-tests issue 212,
// NVIDIA). 8x NDR 400 Gb/s: 46-48 GB/s per NIC (nccl-tests issue 290,
// NVIDIA), 47 here. PCIe Gen5 x16: 52.8 GB/s device->host measured on H100
// (nvbandwidth issue 24); host->device assumed the same (55.4 GB/s both ways
// on one H200, measured with cudaMemcpyAsync of 256 MiB pinned). 132 SMs;
// GEMM efficiency 0.88 and attention 0.315 (21% of peak at seq 2048, head size
// 128, fwd + bwd) fitted to our kernels on the H200 (bench_kernels_h200.json).
static const DgxNode dgx_h100 = {"dgx-h100", 80, 989, 67, 3350, 370, 47, 52.8, 4e-6, 132, 0.88, 0.315};
// H200 SXM 141 GB HBM3e: 140 GiB (the driver reports 143771 MiB),
// 4800 GB/s; the same GH100 compute and the same NVLink 4 / NDR fabric as DGX H100.
static const DgxNode dgx_h200 = {"dgx-h200", 140, 989, 67, 4800, 370, 47, 52.8, 4e-6, 132, 0.88, 0.315};

// The CPU backend: each MPI rank emulates a device in host memory; streams run
// in order, so overlapped transfers serialise (slowdown = number of streams).
static void preset_cpu(HwProfile *p) {
    common_defaults(p, "cpu");
    p->memory_bytes = (int64_t)(4 * GiB);
    p->host_memory_bytes = 0;  // "device" and host are the same memory: memory_bytes is the check
    p->peak_flops[DT_FP32] = 50e9;   // one core, AVX2 FMA, order of magnitude
    // bf16 / fp16 storage is converted to fp32 around each op, whose arithmetic is the
    // fp32 kernels': the same peak (a lower one put bf16 runs of the tiny examples
    // above 100% MFU: 11 GFLOP/s measured against 10)
    p->peak_flops[DT_BF16] = 50e9;
    p->peak_flops[DT_FP16] = 50e9;
    p->flops_efficiency = 0.5;
    p->mem_bandwidth = 10 * GB;
    p->launch_seconds = 1e-7;
    p->gpus_per_node = 64;
    set_all_cells(p, (LinkFit){1 * GB, 5e-5});     // across hosts
    const LinkFit shm[4] = {{2 * GB, 2e-5}, {2 * GB, 2e-5}, {2 * GB, 2e-5}, {2 * GB, 2e-5}};
    set_row(p, 0, shm);                              // MPI shared memory on one host
    p->h2d = (LinkFit){5 * GB, 1e-6};               // memcpy between two arenas
    p->d2h = (LinkFit){5 * GB, 1e-6};
    set_serial_slowdowns(p);
}

// Names used before the presets were named for their machines. `same` = the
// numbers did not change; h100-80g / h200 were datasheet estimates of the DGX
// H100 / H200 node and now take its published, measured numbers.
static const struct { const char *old, *now; int same; } renamed[] = {
    {"l4", "gcp-l4", 1},         {"a100-40g", "gcp-a100-40g", 1}, {"a100-80g", "gcp-a100-80g", 1},
    {"h100-80g", "dgx-h100", 0}, {"h200", "dgx-h200", 0},
};

const char *profile_preset_current_name(const char *name) {
    for (size_t i = 0; i < sizeof renamed / sizeof renamed[0]; i++)
        if (!strcmp(name, renamed[i].old)) return renamed[i].now;
    return name;
}

int profile_preset_exists(const char *name) {
    name = profile_preset_current_name(name);
    for (int i = 0; profile_preset_names[i]; i++)
        if (!strcmp(name, profile_preset_names[i])) return 1;
    return 0;
}

// One notice per process (rank 0 only) when an old name is used.
static void notice_renamed(const char *name) {
    static int told;
    for (size_t i = 0; i < sizeof renamed / sizeof renamed[0]; i++) {
        if (strcmp(name, renamed[i].old) != 0) continue;
        if (!told && launcher_rank() == 0)
            fprintf(stderr, "mist: hardware preset \"%s\" is now called \"%s\" (%s)\n", renamed[i].old, renamed[i].now,
                    renamed[i].same ? "same numbers" : "published DGX numbers, see docs/hardware.md");
        told = 1;
    }
}

int profile_preset(HwProfile *p, const char *name) {
    notice_renamed(name);
    name = profile_preset_current_name(name);
    if (!strcmp(name, "gcp-l4")) preset_l4(p);
    // host: 8-GPU nodes a2-highgpu-8g (680 GB) and a2-ultragpu-8g (1360 GB)
    else if (!strcmp(name, "gcp-a100-40g")) preset_a100(p, name, 40, 1555 * GB, 680);
    else if (!strcmp(name, "gcp-a100-80g")) preset_a100(p, name, 80, 2039 * GB, 1360);
    else if (!strcmp(name, "dgx-a100-80g")) preset_dgx(p, &dgx_a100_80g);
    else if (!strcmp(name, "dgx-h100")) preset_dgx(p, &dgx_h100);
    else if (!strcmp(name, "dgx-h200")) preset_dgx(p, &dgx_h200);
    else if (!strcmp(name, "cpu")) preset_cpu(p);
    else return -1;
    return 0;
}
