// cuDNN's graph backend API, loaded at run time (dlopen: the backend links no
// cuDNN library and runs without one), and a small builder of operation graphs
// that records the first failing call by name, with cuDNN's status and its
// own last error text, so that one log says why a graph was refused.
// Used by attention_cudnn.cu. Built only where the cuDNN headers are found
// (MIST_HAVE_CUDNN, below); elsewhere attention_cudnn.cu reports "not built".
#pragma once
#if !defined(MIST_NO_CUDNN) && defined(__has_include)
#if __has_include(<cudnn_graph.h>)
#define MIST_HAVE_CUDNN 1
#endif
#endif

#ifdef MIST_HAVE_CUDNN
#include <cudnn_graph.h>
#include <stddef.h>
#include <stdint.h>

// the entry points the graphs need, resolved with dlsym
struct CudnnApi {
    size_t (*GetVersion)(void);
    const char *(*GetErrorString)(cudnnStatus_t);
    void (*GetLastErrorString)(char *, size_t);  // cuDNN >= 9.0; NULL when absent
    cudnnStatus_t (*Create)(cudnnHandle_t *);
    cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t);
    cudnnStatus_t (*BackendCreateDescriptor)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
    cudnnStatus_t (*BackendDestroyDescriptor)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*BackendFinalize)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*BackendSetAttribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                         cudnnBackendAttributeType_t, int64_t, const void *);
    cudnnStatus_t (*BackendGetAttribute)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                                         cudnnBackendAttributeType_t, int64_t, int64_t *, void *);
    cudnnStatus_t (*BackendExecute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
};
extern CudnnApi cudnn_api;

// Loads libcudnn (MIST_CUDNN_LIB, else libcudnn.so.9 from the loader's search path),
// once; 0 on success, else -1 with the reason in why (the same answer every later call).
int cudnn_load_library(char *why, size_t n);
// the library, and the process's handle on the current device (created once)
int cudnn_load(cudnnHandle_t *handle, char *why, size_t n);
// "CUDNN_STATUS_...: cuDNN's last error text" for a failed call
void cudnn_status_text(cudnnStatus_t st, char *out, size_t n);

enum { CUDNN_GRAPH_MAX_DESCS = 160, CUDNN_GRAPH_MAX_OPS = 48 };

// One graph under construction: every descriptor it creates (destroyed together), its
// operations in order, and the first failure (later calls are skipped once one failed).
struct CudnnGraph {
    const char *name;  // "forward" / "backward": named in every failure
    cudnnBackendDescriptor_t descs[CUDNN_GRAPH_MAX_DESCS];
    int ndescs;
    cudnnBackendDescriptor_t ops[CUDNN_GRAPH_MAX_OPS];
    int nops;
    int64_t next_virtual_uid;
    int failed;
    char why[1024];
};

void cudnn_graph_init(CudnnGraph *g, const char *name);
void cudnn_graph_destroy(CudnnGraph *g);  // every descriptor but the execution plan's

// A 4-d tensor: uid > 0 names a caller tensor (device pointer, or a host scalar when
// by_value); uid 0 makes a virtual one (never stored) with the next virtual uid.
struct CudnnTensorSpec {
    cudnnDataType_t type;
    int64_t dim[4], stride[4];
    int64_t uid;
    bool by_value;
    bool reordered_f16x16;  // the backward's fp32 dQ accumulator
};
cudnnBackendDescriptor_t cudnn_tensor(CudnnGraph *g, const char *what, CudnnTensorSpec spec);

// y = mode(x[, b][, t]) elementwise in compute precision prec (axis: GEN_INDEX's dimension)
void cudnn_pointwise(CudnnGraph *g, const char *what, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                     cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                     cudnnBackendDescriptor_t y, int64_t axis);
void cudnn_matmul(CudnnGraph *g, const char *what, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                  cudnnBackendDescriptor_t c);
void cudnn_reduction(CudnnGraph *g, const char *what, cudnnReduceTensorOp_t op, cudnnBackendDescriptor_t x,
                     cudnnBackendDescriptor_t y);
void cudnn_reshape(CudnnGraph *g, const char *what, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y);

// The operations as one finalized operation graph (a descriptor of g), or NULL; handle
// may be NULL where cuDNN allows it (9.x since the handle attribute's deprecation)
cudnnBackendDescriptor_t cudnn_graph_finalize(CudnnGraph *g, cudnnHandle_t handle);
// The operation graph's execution plan: the heuristics' engine configurations (mode A,
// then the fallback list) tried in order until one finalizes. 0 with *plan (the caller
// destroys it) and its workspace size, else -1 with g->why saying what each refusal was.
int cudnn_graph_plan(CudnnGraph *g, cudnnHandle_t handle, cudnnBackendDescriptor_t *plan, int64_t *workspace);

// One execution: the variant pack (uids[i] -> ptrs[i]) built, run on stream st, destroyed.
int cudnn_execute(cudnnHandle_t handle, cudaStream_t st, cudnnBackendDescriptor_t plan, int n, const int64_t *uids,
                  void *const *ptrs, void *workspace, char *why, size_t why_n);
#endif
