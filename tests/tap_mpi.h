// TAP under MPI: every rank runs the checks, rank 0 prints them, and a check
// passes only when it passed on every rank.
#ifndef MIST_TESTS_TAP_MPI_H
#define MIST_TESTS_TAP_MPI_H
#include <mpi.h>
#include <stdarg.h>
#include "tests/tap.h"

static int me;  // world rank (the test sets it after MPI_Init)

// ok() on rank 0 with the verdict of all ranks (a check fails if any rank fails it)
static void check(int good, const char *fmt, ...) {
    int all = 0;
    MPI_Allreduce(&good, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (me != 0) return;
    va_list ap;
    va_start(ap, fmt);
    tap_vok(all, fmt, ap);
    va_end(ap);
}

#endif
