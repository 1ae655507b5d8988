// One mist-train job on this rank, from the parsed command line on (MPI
// started): rank 0 reads and validates the config and every rank gets it as
// bytes (the other ranks never open the file), [cluster] measure_transfers,
// the plan ([plan] mode = auto: rank 0 searches it for the launched ranks),
// the process grid, then the dry run's tables or training.
// Errors every rank knows about end the job in an orderly way (rank 0 prints
// the message once, every rank returns the same exit code); errors only one
// rank sees abort the whole job, so no rank waits forever for a partner.
#ifndef MIST_TRAIN_JOB_H
#define MIST_TRAIN_JOB_H
#include "runtime/launch.h"

#define TRAIN_MAX_OVERRIDES 256

// mist-train's command line.
typedef struct {
    const char *config;                            // CONFIG.ini
    const char *overrides[TRAIN_MAX_OVERRIDES];    // "section.key=value"
    int n_overrides;
    int dry_run;
} TrainArgs;

// Collective over MPI_COMM_WORLD. Returns the job's exit code (0 done, 2 a
// configuration error, 3 no plan fits, ...: mist-train --help); rank 0 has
// printed the reason.
int train_job_run(const TrainArgs *a, const Launch *L);

#endif
