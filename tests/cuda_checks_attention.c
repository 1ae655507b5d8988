// The CUDA backend's attention checks (tests/test_cuda_kernels.c runs them): every attention
// variant against the CPU backend, cuDNN's plans, [runtime] attention's choice, and the cuDNN
// memory prepared before a run.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/cuda_check.h"
#include "tests/tap.h"

static const char *const attention_variants[] = {"base", "wide", "wgmma", "cudnn"};
int check_attention(const int *p) {
    int B = p[0], T = p[1], NH = p[2], NKV = p[3], HS = p[4];
    if (p[5] == 2 && !cuda_attention_wgmma_available()) return CHECK_SKIPPED;
    long cudnn_runs = cuda_attention_cudnn_runs();
    int cudnn_ready = 0;
    if (p[5] == 3) {
        char why[1100];
        cudnn_ready = cuda_attention_cudnn_ready(B, T, NH, NKV, HS, why, sizeof why) == 1;
        if (!cudnn_ready) diag("cuDNN attention not used here (%s): checking the fallback to the default kernels", why);
    }
    if (p[5]) setenv("MIST_CUDA_ATTENTION", attention_variants[p[5]], 1);
    else unsetenv("MIST_CUDA_ATTENTION");
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * HS, nout = (size_t)B * T * NH * HS, nl = (size_t)B * NH * T;
    T16 qkv = t16_random(nqkv, -1.5, 1.5), out = t16_out(nout);
    T32 lse = t32_out(nl);
    cpu->attention_forward(cpu, NULL, out.h, lse.h, qkv.h, B, T, NH, NKV, HS);
    gpu->attention_forward(gpu, NULL, out.d, lse.d, qkv.d, B, T, NH, NKV, HS);
    int r = check16("attention out", &out, RTOL, ATOL_FRAC);
    r &= check32("attention lse", &lse, 1e-3, 1e-3);
    // backward from the CPU's out and lse on both sides
    gpu->copy_h2d(gpu, out.d, out.h, nout * 2, NULL);
    gpu->copy_h2d(gpu, lse.d, lse.h, nl * 4, NULL);
    T16 dout = t16_random(nout, -1, 1), dqkv = t16_out(nqkv);
    cpu->attention_backward(cpu, NULL, dqkv.h, dout.h, qkv.h, out.h, lse.h, B, T, NH, NKV, HS);
    gpu->attention_backward(gpu, NULL, dqkv.d, dout.d, qkv.d, out.d, lse.d, B, T, NH, NKV, HS);
    r &= check16("attention dqkv", &dqkv, RTOL, ATOL_FRAC);
    void *again = gpu->alloc_device(gpu, nqkv * 2);
    gpu->attention_backward(gpu, NULL, again, dout.d, qkv.d, out.d, lse.d, B, T, NH, NKV, HS);
    int det = same_bits(again, dqkv.d, nqkv * 2);
    if (!det) diag("attention backward is not bitwise reproducible");
    if (p[5] == 1) {  // the same sums in the same order as the default kernels: the same bits
        unsetenv("MIST_CUDA_ATTENTION");
        void *out2 = gpu->alloc_device(gpu, nout * 2), *lse2 = gpu->alloc_device(gpu, nl * 4);
        gpu->attention_forward(gpu, NULL, out2, lse2, qkv.d, B, T, NH, NKV, HS);
        gpu->attention_backward(gpu, NULL, again, dout.d, qkv.d, out.d, lse.d, B, T, NH, NKV, HS);
        // the wide forward's out and lse were overwritten by the CPU's: run it again
        setenv("MIST_CUDA_ATTENTION", "wide", 1);
        void *out1 = gpu->alloc_device(gpu, nout * 2), *lse1 = gpu->alloc_device(gpu, nl * 4);
        gpu->attention_forward(gpu, NULL, out1, lse1, qkv.d, B, T, NH, NKV, HS);
        int same = same_bits(out1, out2, nout * 2) && same_bits(lse1, lse2, nl * 4) && same_bits(again, dqkv.d, nqkv * 2);
        if (!same) diag("the wide kernels' results differ from the default kernels' bits");
        det &= same;
        void *tmp[] = {out1, lse1, out2, lse2};
        for (int i = 0; i < 4; i++) gpu->free_device(gpu, tmp[i]);
    }
    if (p[5] == 2) {  // the overlapped forward (the default) against the plain order: the same bits
        void *out1 = gpu->alloc_device(gpu, nout * 2), *lse1 = gpu->alloc_device(gpu, nl * 4);
        void *out0 = gpu->alloc_device(gpu, nout * 2), *lse0 = gpu->alloc_device(gpu, nl * 4);
        gpu->attention_forward(gpu, NULL, out1, lse1, qkv.d, B, T, NH, NKV, HS);
        cuda_attention_wgmma_forward_overlap(0);
        gpu->attention_forward(gpu, NULL, out0, lse0, qkv.d, B, T, NH, NKV, HS);
        cuda_attention_wgmma_forward_overlap(1);
        int same = same_bits(out1, out0, nout * 2) && same_bits(lse1, lse0, nl * 4);
        if (!same) diag("the overlapped wgmma forward's bits differ from the plain wgmma forward's");
        det &= same;
        void *tmp[] = {out1, lse1, out0, lse0};
        for (int i = 0; i < 4; i++) gpu->free_device(gpu, tmp[i]);
    }
    if (p[5] == 3) {
        long ran = cuda_attention_cudnn_runs() - cudnn_runs;  // forward, backward, backward again
        if (cudnn_ready && ran != 3) diag("cuDNN ran %ld of the 3 attention calls (the rest fell back)", ran);
        if (!det) diag("(expected of cuDNN's backward: not required)");
        det = !cudnn_ready || ran == 3;
    }
    gpu->free_device(gpu, again);
    t16_free(&qkv); t16_free(&out); t16_free(&dout); t16_free(&dqkv); t32_free(&lse);
    unsetenv("MIST_CUDA_ATTENTION");
    return r && det;
}

// (Few cuDNN shapes: each builds two plans, and cuDNN may compile their kernels at run time.)
// Where cuDNN loads (library and handle), it must build both plans for a plain shape
// (multi-head, T a multiple of 64, HS 128): a refusal here is a fault of the graphs
// (the reason names the call and cuDNN's text). Without cuDNN, or without the NVRTC its
// engines compile their kernels with: skipped with the reason.
int check_cudnn_plans(const int *p) {
    char why[1100];
    int ready = cuda_attention_cudnn_ready(p[0], p[1], p[2], p[3], p[4], why, sizeof why);
    if (ready < 0 || (!ready && strstr(why, "NVRTC"))) {  // no cuDNN, or it cannot compile its engines here
        snprintf(skip_reason, sizeof skip_reason, "cuDNN attention plans: no cuDNN to run them: %s", why);
        return CHECK_SKIPPED;
    }
    if (!ready) diag("cuDNN refused: %s", why);
    else diag("cuDNN attention plans hold %zu bytes of device memory", cuda_attention_cudnn_reserved_bytes());
    return ready;
}

// [runtime] attention through the backend (Backend.set_attention): auto resolves to wgmma
// exactly where the wgmma kernels run, else base; wgmma is refused with a reason where they
// cannot run; an unknown name is refused. Leaves the backend at base for the other checks.
int check_attention_choice(const int *p) {
    (void)p;
    char said[800];
    int wgmma = cuda_attention_wgmma_available();
    int r = gpu->set_attention(gpu, "auto", said, sizeof said) == 0 && !strncmp(said, wgmma ? "wgmma" : "base", wgmma ? 5 : 4);
    if (!r) diag("auto: %s (wgmma available: %d)", said, wgmma);
    int w = gpu->set_attention(gpu, "wgmma", said, sizeof said);
    if ((w == 0) != wgmma || (w && !strstr(said, "sm_90a"))) r = 0, diag("wgmma: %d, %s", w, said);
    if (gpu->set_attention(gpu, "flash", said, sizeof said) != -1 || !strstr(said, "cudnn")) r = 0, diag("flash: %s", said);
    r &= gpu->set_attention(gpu, "base", said, sizeof said) == 0 && !strncmp(said, "base", 4);
    return r;
}

// Planning's preparation (Backend.prepare_op) counts what the run then uses: with cudnn
// chosen, preparing a shape builds its two plans, and the backend's reserved bytes grow by
// exactly the plans' bytes (cuda_attention_cudnn_reserved_bytes: workspaces + the fp32 dQ
// accumulator, B NH T HS 4 bytes at least), the device's free memory falls by at least the
// accumulator (smaller allocations may land in pages the device already counts); preparing again adds nothing, and a forward and backward at that shape run on cuDNN
// without another byte. The embedding's sort buffers likewise (3 N int32 lists at least).
// Without cuDNN: skipped with the reason. Leaves the backend at base.
int check_prepared_plans(const int *p) {
    int B = p[0], T = p[1], NH = p[2], NKV = p[3], HS = p[4];
    char said[1100];
    if (!cuda_attention_cudnn_available(said, sizeof said)) {
        snprintf(skip_reason, sizeof skip_reason, "prepared cuDNN plans: no cuDNN: %s", said);
        return CHECK_SKIPPED;
    }
    unsetenv("MIST_CUDA_ATTENTION");  // the backend's own choice, not the override
    int r = gpu->set_attention(gpu, "cudnn", said, sizeof said) == 0 && !strncmp(said, "cudnn", 5);
    if (!r) diag("set_attention(cudnn): %s", said);
    size_t res0 = gpu->reserved_bytes(gpu), plans0 = cuda_attention_cudnn_reserved_bytes(), free0 = 0, free1 = 0;
    int known = gpu->device_free_bytes(gpu, &free0) == 0;
    BackendOpShape att = {.op = OP_ATTENTION, .B = B, .T = T, .NH = NH, .NKV = NKV, .HS = HS};
    char why[1100] = "";
    int prepared = gpu->prepare_op(gpu, &att, why, sizeof why) == 0;
    if (!prepared && strstr(why, "NVRTC")) {  // cuDNN cannot compile its engines here (check_cudnn_plans)
        snprintf(skip_reason, sizeof skip_reason, "prepared cuDNN plans: cuDNN cannot build them here: %s", why);
        gpu->set_attention(gpu, "base", said, sizeof said);
        return CHECK_SKIPPED;
    }
    if (!prepared) diag("cuDNN did not prepare the shape: %s", why);
    size_t res1 = gpu->reserved_bytes(gpu), plans = cuda_attention_cudnn_reserved_bytes() - plans0;
    known = known && gpu->device_free_bytes(gpu, &free1) == 0;
    size_t dq = (size_t)B * NH * T * HS * sizeof(float);
    r &= prepared && res1 - res0 == plans && plans >= dq && (!known || free0 - free1 >= dq);
    diag("prepared: reserved +%zu B, the plans %zu B (dQ accumulator %zu B), device free -%zu B", res1 - res0, plans,
         dq, known ? free0 - free1 : 0);
    r &= gpu->prepare_op(gpu, &att, why, sizeof why) == 0 && gpu->reserved_bytes(gpu) == res1;
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * HS * 2, nout = (size_t)B * T * NH * HS * 2, nl = (size_t)B * NH * T * 4;
    void *qkv = gpu->alloc_device(gpu, nqkv), *dqkv = gpu->alloc_device(gpu, nqkv), *out = gpu->alloc_device(gpu, nout),
         *dout = gpu->alloc_device(gpu, nout), *lse = gpu->alloc_device(gpu, nl);
    gpu->memset_device(gpu, qkv, 0, nqkv, NULL), gpu->memset_device(gpu, dout, 0, nout, NULL);
    long runs = cuda_attention_cudnn_runs();
    gpu->attention_forward(gpu, NULL, out, (float *)lse, qkv, B, T, NH, NKV, HS);
    gpu->attention_backward(gpu, NULL, dqkv, dout, qkv, out, (const float *)lse, B, T, NH, NKV, HS);
    gpu->synchronize(gpu);
    long ran = cuda_attention_cudnn_runs() - runs;
    r &= ran == 2 && gpu->reserved_bytes(gpu) == res1;
    if (ran != 2 || gpu->reserved_bytes(gpu) != res1)
        diag("cuDNN ran %ld of 2 calls; reserved %zu B after them, %zu B after preparing", ran, gpu->reserved_bytes(gpu), res1);
    void *bufs[] = {qkv, dqkv, out, dout, lse};
    for (int i = 0; i < 5; i++) gpu->free_device(gpu, bufs[i]);
    // the embedding backward of B T tokens (C = 64, V = 1000) after preparing it: no new byte
    BackendOpShape emb = {.op = OP_EMBEDDING, .B = B, .T = T};
    int C = 64, V = 1000;
    r &= gpu->prepare_op(gpu, &emb, why, sizeof why) == 0;
    size_t prepared_emb = gpu->reserved_bytes(gpu);
    void *tokens = gpu->alloc_device(gpu, (size_t)B * T * 4), *d = gpu->alloc_device(gpu, (size_t)B * T * C * 2),
         *dwte = gpu->alloc_device(gpu, (size_t)V * C * 2);
    gpu->memset_device(gpu, tokens, 0, (size_t)B * T * 4, NULL), gpu->memset_device(gpu, d, 0, (size_t)B * T * C * 2, NULL);
    gpu->memset_device(gpu, dwte, 0, (size_t)V * C * 2, NULL);
    gpu->embedding_backward(gpu, NULL, dwte, NULL, d, (const int32_t *)tokens, B, T, C);
    gpu->synchronize(gpu);
    if (gpu->reserved_bytes(gpu) != prepared_emb) r = 0, diag("the embedding backward grew the reserved bytes");
    void *ebufs[] = {tokens, d, dwte};
    for (int i = 0; i < 3; i++) gpu->free_device(gpu, ebufs[i]);
    r &= gpu->set_attention(gpu, "base", said, sizeof said) == 0;
    return r;
}
