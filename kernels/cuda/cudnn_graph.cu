// cuDNN's graph backend API loaded with dlopen, and the graph builder of
// cudnn_graph.cuh: every call checked, the first failure kept with the call's
// attribute name, cuDNN's status name and its last error text.
#include "kernels/cuda/cudnn_graph.cuh"

#ifdef MIST_HAVE_CUDNN
#include <dlfcn.h>
#include <glob.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

CudnnApi cudnn_api;

void cudnn_status_text(cudnnStatus_t st, char *out, size_t n) {
    char last[400] = "";
    if (cudnn_api.GetLastErrorString) cudnn_api.GetLastErrorString(last, sizeof last);
    snprintf(out, n, "%s%s%s", cudnn_api.GetErrorString ? cudnn_api.GetErrorString(st) : "cuDNN error",
             last[0] ? ": " : "", last);
}

// cuDNN's fused attention engines compile their kernels with NVRTC, which cuDNN opens by
// name (libnvrtc.so.<its CUDA major>); the loader answers such a dlopen with a library of
// that name already loaded. So NVRTC found beside cuDNN is loaded first: in cuDNN's own
// directory (a CUDA toolkit's lib64) or, for pip's packages (nvidia/cudnn/lib), in
// nvidia/cuda_nvrtc/lib. Where neither has it, LD_LIBRARY_PATH must.
static void preload_nvrtc_beside(void *cudnn_lib) {
    struct link_map *map = NULL;
    if (dlinfo(cudnn_lib, RTLD_DI_LINKMAP, &map) != 0 || !map || !map->l_name) return;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", map->l_name);
    char *slash = strrchr(dir, '/');
    if (!slash) return;
    *slash = 0;
    static const char *const patterns[] = {"%s/libnvrtc.so.*", "%s/../../cuda_nvrtc/lib/libnvrtc.so.*",
                                           "%s/libnvrtc-builtins.so.*", "%s/../../cuda_nvrtc/lib/libnvrtc-builtins.so.*"};
    for (int i = 0; i < 4; i++) {
        char pattern[1200];
        snprintf(pattern, sizeof pattern, patterns[i], dir);
        glob_t found;
        if (glob(pattern, 0, NULL, &found) != 0) continue;
        for (size_t j = 0; j < found.gl_pathc; j++) dlopen(found.gl_pathv[j], RTLD_NOW | RTLD_GLOBAL);
        globfree(&found);
    }
}

static int load_library(char *why, size_t n) {
    const char *path = getenv("MIST_CUDNN_LIB");
    if (!path || !*path) path = "libcudnn.so.9";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, n, "dlopen(%s) failed: %s (hint: put cuDNN 9's lib directory on LD_LIBRARY_PATH, "
                         "or set MIST_CUDNN_LIB to the library's path)", path, dlerror());
        return -1;
    }
    // each symbol cast through void * (dlsym's type) to the pointer type of its field
#define CUDNN_SYM(field, name, required)                                                         \
    do {                                                                                         \
        void *sym = dlsym(lib, name);                                                            \
        if (!sym && required) {                                                                  \
            snprintf(why, n, "%s has no %s (a cuDNN older than 9?)", path, name);                \
            return -1;                                                                           \
        }                                                                                        \
        memcpy(&cudnn_api.field, &sym, sizeof sym);                                              \
    } while (0)
    CUDNN_SYM(GetVersion, "cudnnGetVersion", 1);
    CUDNN_SYM(GetErrorString, "cudnnGetErrorString", 1);
    CUDNN_SYM(GetLastErrorString, "cudnnGetLastErrorString", 0);
    CUDNN_SYM(Create, "cudnnCreate", 1);
    CUDNN_SYM(SetStream, "cudnnSetStream", 1);
    CUDNN_SYM(BackendCreateDescriptor, "cudnnBackendCreateDescriptor", 1);
    CUDNN_SYM(BackendDestroyDescriptor, "cudnnBackendDestroyDescriptor", 1);
    CUDNN_SYM(BackendFinalize, "cudnnBackendFinalize", 1);
    CUDNN_SYM(BackendSetAttribute, "cudnnBackendSetAttribute", 1);
    CUDNN_SYM(BackendGetAttribute, "cudnnBackendGetAttribute", 1);
    CUDNN_SYM(BackendExecute, "cudnnBackendExecute", 1);
#undef CUDNN_SYM
    preload_nvrtc_beside(lib);
    size_t version = cudnn_api.GetVersion();
    if (version < 90000) {
        snprintf(why, n, "%s is cuDNN %zu; the attention graphs need cuDNN >= 9.0", path, version);
        return -1;
    }
    return 0;
}

int cudnn_load_library(char *why, size_t n) {
    static int state;  // 0 not tried, 1 loaded, -1 failed
    static char reason[600];
    if (state == 0) state = load_library(reason, sizeof reason) == 0 ? 1 : -1;
    if (state > 0) return 0;
    snprintf(why, n, "%s", reason);
    return -1;
}

int cudnn_load(cudnnHandle_t *handle, char *why, size_t n) {
    static int state;  // 0 not tried, 1 created, -1 failed
    static cudnnHandle_t h;
    static char reason[700];
    if (state == 0) {
        state = -1;
        if (cudnn_load_library(reason, sizeof reason) == 0) {
            cudnnStatus_t st = cudnn_api.Create(&h);
            if (st == CUDNN_STATUS_SUCCESS) {
                state = 1;
            } else {
                char text[420];
                cudnn_status_text(st, text, sizeof text);
                snprintf(reason, sizeof reason, "cudnnCreate failed (cuDNN %zu): %s", cudnn_api.GetVersion(), text);
            }
        }
    }
    if (state < 0) {
        snprintf(why, n, "%s", reason);
        return -1;
    }
    *handle = h;
    return 0;
}

// ---------------------------------------------------------------- the builder
void cudnn_graph_init(CudnnGraph *g, const char *name) {
    memset(g, 0, sizeof *g);
    g->name = name;
    g->next_virtual_uid = 1000;
}

void cudnn_graph_destroy(CudnnGraph *g) {
    for (int i = 0; i < g->ndescs; i++) cudnn_api.BackendDestroyDescriptor(g->descs[i]);
    g->ndescs = g->nops = 0;
}

static void fail(CudnnGraph *g, const char *what, const char *call, cudnnStatus_t st) {
    if (g->failed) return;
    char text[420];
    cudnn_status_text(st, text, sizeof text);
    snprintf(g->why, sizeof g->why, "%s graph, %s: %s: %s", g->name, what, call, text);
    g->failed = 1;
}

static cudnnBackendDescriptor_t create(CudnnGraph *g, const char *what, cudnnBackendDescriptorType_t type,
                                       const char *type_name) {
    if (g->failed) return NULL;
    if (g->ndescs == CUDNN_GRAPH_MAX_DESCS) {
        snprintf(g->why, sizeof g->why, "%s graph, %s: more than %d descriptors (raise CUDNN_GRAPH_MAX_DESCS)",
                 g->name, what, CUDNN_GRAPH_MAX_DESCS);
        g->failed = 1;
        return NULL;
    }
    cudnnBackendDescriptor_t d = NULL;
    cudnnStatus_t st = cudnn_api.BackendCreateDescriptor(type, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        char call[160];
        snprintf(call, sizeof call, "cudnnBackendCreateDescriptor(%s)", type_name);
        fail(g, what, call, st);
        return NULL;
    }
    g->descs[g->ndescs++] = d;
    return d;
}
#define CREATE(g, what, type) create(g, what, type, #type)

static void set(CudnnGraph *g, const char *what, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t attr,
                const char *attr_name, cudnnBackendAttributeType_t type, int64_t count, const void *value) {
    if (g->failed || !d) return;
    cudnnStatus_t st = cudnn_api.BackendSetAttribute(d, attr, type, count, value);
    if (st != CUDNN_STATUS_SUCCESS) {
        char call[160];
        snprintf(call, sizeof call, "cudnnBackendSetAttribute(%s)", attr_name);
        fail(g, what, call, st);
    }
}
#define SET(g, what, d, attr, type, count, value) set(g, what, d, attr, #attr, type, count, value)

static void finalize(CudnnGraph *g, const char *what, cudnnBackendDescriptor_t d) {
    if (g->failed || !d) return;
    cudnnStatus_t st = cudnn_api.BackendFinalize(d);
    if (st != CUDNN_STATUS_SUCCESS) fail(g, what, "cudnnBackendFinalize", st);
}

static void add_op(CudnnGraph *g, const char *what, cudnnBackendDescriptor_t op) {
    finalize(g, what, op);
    if (g->failed) return;
    if (g->nops == CUDNN_GRAPH_MAX_OPS) {
        snprintf(g->why, sizeof g->why, "%s graph, %s: more than %d operations", g->name, what, CUDNN_GRAPH_MAX_OPS);
        g->failed = 1;
        return;
    }
    g->ops[g->nops++] = op;
}

cudnnBackendDescriptor_t cudnn_tensor(CudnnGraph *g, const char *what, CudnnTensorSpec spec) {
    cudnnBackendDescriptor_t t = CREATE(g, what, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    bool is_virtual = spec.uid == 0;
    int64_t uid = is_virtual ? g->next_virtual_uid++ : spec.uid, alignment = 16;
    SET(g, what, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &spec.type);
    SET(g, what, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, spec.dim);
    SET(g, what, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, spec.stride);
    SET(g, what, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    SET(g, what, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    SET(g, what, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (spec.by_value) SET(g, what, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &spec.by_value);
    if (spec.reordered_f16x16) {
        cudnnBackendTensorReordering_t mode = CUDNN_TENSOR_REORDERING_F16x16;
        SET(g, what, t, CUDNN_ATTR_TENSOR_REORDERING_MODE, CUDNN_TYPE_TENSOR_REORDERING_MODE, 1, &mode);
    }
    finalize(g, what, t);
    return g->failed ? NULL : t;
}

void cudnn_pointwise(CudnnGraph *g, const char *what, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                     cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                     cudnnBackendDescriptor_t y, int64_t axis) {
    cudnnBackendDescriptor_t pw = CREATE(g, what, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    SET(g, what, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    SET(g, what, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (mode == CUDNN_POINTWISE_GEN_INDEX) SET(g, what, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finalize(g, what, pw);
    cudnnBackendDescriptor_t op = CREATE(g, what, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    SET(g, what, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    SET(g, what, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) SET(g, what, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t) SET(g, what, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    SET(g, what, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    add_op(g, what, op);
}

void cudnn_matmul(CudnnGraph *g, const char *what, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                  cudnnBackendDescriptor_t c) {
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t mm = CREATE(g, what, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    SET(g, what, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    finalize(g, what, mm);
    cudnnBackendDescriptor_t op = CREATE(g, what, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    SET(g, what, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    SET(g, what, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    SET(g, what, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    SET(g, what, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
    add_op(g, what, op);
}

void cudnn_reduction(CudnnGraph *g, const char *what, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                     cudnnBackendDescriptor_t y) {
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t red = CREATE(g, what, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    SET(g, what, red, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    SET(g, what, red, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    finalize(g, what, red);
    cudnnBackendDescriptor_t op = CREATE(g, what, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    SET(g, what, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    SET(g, what, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    SET(g, what, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &red);
    add_op(g, what, op);
}

void cudnn_reshape(CudnnGraph *g, const char *what, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = CREATE(g, what, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    SET(g, what, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    SET(g, what, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    add_op(g, what, op);
}

// ---------------------------------------------------------------- plan and execution
enum { MAX_CONFIGS = 16 };

// The engine configurations heuristics mode `mode` proposes for the finalized graph
// (created as descriptors of g, so destroyed with it); their count, or -1.
static int engine_configs(CudnnGraph *g, cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode,
                          const char *mode_name, cudnnBackendDescriptor_t *cfgs) {
    char what[64];
    snprintf(what, sizeof what, "engine heuristics (%s)", mode_name);
    cudnnBackendDescriptor_t heur = CREATE(g, what, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    SET(g, what, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    SET(g, what, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    finalize(g, what, heur);
    for (int i = 0; i < MAX_CONFIGS; i++) cfgs[i] = CREATE(g, what, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (g->failed) return -1;
    int64_t count = 0;
    cudnnStatus_t st = cudnn_api.BackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, MAX_CONFIGS, &count, cfgs);
    if (st != CUDNN_STATUS_SUCCESS) {
        fail(g, what, "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINEHEUR_RESULTS)", st);
        return -1;
    }
    if (count == 0 && cudnn_api.GetLastErrorString) {  // why the engines were filtered out
        char last[400] = "";
        cudnn_api.GetLastErrorString(last, sizeof last);
        if (last[0]) snprintf(g->why, sizeof g->why, "%s proposed nothing: %s", what, last);
    }
    return (int)count;
}

cudnnBackendDescriptor_t cudnn_graph_finalize(CudnnGraph *g, cudnnHandle_t handle) {
    const char *what = "operation graph";
    cudnnBackendDescriptor_t graph = CREATE(g, what, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    SET(g, what, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops);
    if (handle) SET(g, what, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    finalize(g, what, graph);
    return g->failed ? NULL : graph;
}

int cudnn_graph_plan(CudnnGraph *g, cudnnHandle_t handle, cudnnBackendDescriptor_t *plan, int64_t *workspace) {
    cudnnBackendDescriptor_t graph = cudnn_graph_finalize(g, handle);
    if (!graph) return -1;
    static const cudnnBackendHeurMode_t modes[] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    static const char *const mode_names[] = {"mode A", "fallback"};
    char refusals[400] = "", empty[400] = "";
    size_t used = 0;
    int missing_prerequisite = 0;
    for (int m = 0; m < 2; m++) {
        cudnnBackendDescriptor_t cfgs[MAX_CONFIGS];
        int count = engine_configs(g, graph, modes[m], mode_names[m], cfgs);
        if (count < 0) return -1;
        if (count == 0 && !empty[0]) snprintf(empty, sizeof empty, "%.390s", g->why);
        if (strstr(g->why, "PREREQUISITE")) missing_prerequisite = 1;
        for (int i = 0; i < count; i++) {
            cudnnBackendDescriptor_t p = NULL;
            cudnnStatus_t st = cudnn_api.BackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p);
            if (st == CUDNN_STATUS_SUCCESS)
                st = cudnn_api.BackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
            if (st == CUDNN_STATUS_SUCCESS)
                st = cudnn_api.BackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
            if (st == CUDNN_STATUS_SUCCESS) st = cudnn_api.BackendFinalize(p);
            int64_t bytes = 0, got = 0;
            if (st == CUDNN_STATUS_SUCCESS)
                st = cudnn_api.BackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                                   &got, &bytes);
            if (st == CUDNN_STATUS_SUCCESS) {
                *plan = p;
                *workspace = bytes;
                return 0;
            }
            char text[300];
            cudnn_status_text(st, text, sizeof text);
            if (st == CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING) missing_prerequisite = 1;
            if (used < sizeof refusals)
                used += (size_t)snprintf(refusals + used, sizeof refusals - used, "%s%s config %d: %s",
                                         used ? "; " : "", mode_names[m], i, text);
            if (p) cudnn_api.BackendDestroyDescriptor(p);
        }
    }
    // cuDNN's fused attention engines compile their kernels at run time: they need the driver
    // library and NVRTC (libnvrtc.so.<the CUDA major cuDNN was built for>) where the loader finds them
    snprintf(g->why, sizeof g->why, "%s graph: no engine runs it (%.400s)%s", g->name,
             refusals[0] ? refusals : empty[0] ? empty : "the heuristics proposed no engine configuration",
             missing_prerequisite ? "; hint: put NVRTC's lib directory (the CUDA major of this cuDNN) on "
                                    "LD_LIBRARY_PATH" : "");
    g->failed = 1;
    return -1;
}

int cudnn_execute(cudnnHandle_t handle, cudaStream_t st, cudnnBackendDescriptor_t plan, int n, const int64_t *uids,
                  void *const *ptrs, void *workspace, char *why, size_t why_n) {
    CudnnGraph pack;
    cudnn_graph_init(&pack, "variant pack");
    const char *what = "execution";
    cudnnStatus_t rc = cudnn_api.SetStream(handle, st);
    if (rc != CUDNN_STATUS_SUCCESS) fail(&pack, what, "cudnnSetStream", rc);
    cudnnBackendDescriptor_t vp = CREATE(&pack, what, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    SET(&pack, what, vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    SET(&pack, what, vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    SET(&pack, what, vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    finalize(&pack, what, vp);
    if (!pack.failed) {
        rc = cudnn_api.BackendExecute(handle, plan, vp);
        if (rc != CUDNN_STATUS_SUCCESS) fail(&pack, what, "cudnnBackendExecute", rc);
    }
    int failed = pack.failed;
    if (failed) snprintf(why, why_n, "%s", pack.why);
    cudnn_graph_destroy(&pack);
    return failed ? -1 : 0;
}
#endif
