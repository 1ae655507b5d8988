// The MPI comm backend (CPU buffers; also the fallback when NCCL is absent).
#ifndef MIST_COMM_MPI_H
#define MIST_COMM_MPI_H

#include <mpi.h>
#include "runtime/comm.h"

// The backend (valid after MPI_Init; its datatypes and ops are created on first use).
const CommBackend *comm_mpi_backend(void);

// A group over a duplicate of `comm` (own context, errors returned instead of
// aborting). Free it with comm_mpi_backend()->group_free. NULL on failure.
CommGroup *comm_mpi_group_from(MPI_Comm comm);

// The communicator inside a group of this backend (for MPI-IO, NCCL bootstrap...).
MPI_Comm comm_mpi_group_comm(const CommGroup *g);

#endif
