// The process's rank as the MPI launcher (mpirun, srun) set it in the
// environment, readable before MPI starts: so that one process of a job prints
// a usage error or a notice. 0 when not started by a launcher.
#ifndef MIST_LAUNCHER_RANK_H
#define MIST_LAUNCHER_RANK_H

int launcher_rank(void);

#endif
