// The preparation of a backend before a run and the memory lines it adds (backend_prepare.h).
#include "runtime/backend_prepare.h"
#include <stdio.h>

size_t backend_reserved_device_bytes(Backend *be) {
    return be->device_memory_is_host || !be->reserved_bytes ? 0 : be->reserved_bytes(be);
}

size_t backend_prepare_shapes(Backend *be, int B, int T, int NH, int NKV, int HS, int embedding, char *note,
                              size_t n) {
    note[0] = '\0';
    if (be->prepare_op) {
        char why[1100] = "";
        BackendOpShape att = {.op = OP_ATTENTION, .B = B, .T = T, .NH = NH, .NKV = NKV, .HS = HS};
        if (be->prepare_op(be, &att, why, sizeof why))
            snprintf(note, n, "attention at B=%d T=%d NH=%d NKV=%d HS=%d not prepared: %s", B, T, NH, NKV, HS, why);
        BackendOpShape emb = {.op = OP_EMBEDDING, .B = B, .T = T};
        if (embedding && be->prepare_op(be, &emb, why, sizeof why) && !note[0])
            snprintf(note, n, "embedding backward of %d tokens not prepared: %s", B * T, why);
    }
    return backend_reserved_device_bytes(be);
}

static double mib(int64_t bytes) { return (double)bytes / 1048576.0; }

void backend_memory_predicted_line(int64_t arena, size_t reserved, char *out, size_t n) {
    int64_t total = arena + (int64_t)reserved;
    snprintf(out, n, "predicted device memory on rank 0: arena peak %.1f MiB + backend reserved %.1f MiB (its fixed "
             "buffers and prepared plans) = %.1f MiB (%lld B)", mib(arena), mib((int64_t)reserved), mib(total),
             (long long)total);
}

void backend_memory_measured_line(int64_t device_count, size_t reserved, int64_t arena_predicted,
                                  size_t reserved_now, char *out, size_t n) {
    int64_t measured = device_count + (int64_t)reserved, predicted = arena_predicted + (int64_t)reserved;
    int len = snprintf(out, n, "device memory on rank 0: the device's count %lld B + backend reserved before it %zu B "
                       "= %.1f MiB (%lld B), predicted %lld B: %+.2f%%", (long long)device_count, reserved,
                       mib(measured), (long long)measured, (long long)predicted,
                       predicted > 0 ? 100.0 * (double)(measured - predicted) / (double)predicted : 0.0);
    if (reserved_now > reserved && len > 0 && (size_t)len < n)
        snprintf(out + len, n - (size_t)len, " (the backend's reserved bytes grew by %zu B after planning: a shape "
                 "prepared at its first call)", reserved_now - reserved);
}
