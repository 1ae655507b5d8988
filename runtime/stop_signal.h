// Graceful stop on a signal: SIGUSR1 (what Slurm's --signal=USR1@SECONDS and
// mpirun's forwarding deliver) or SIGTERM asks the trainer to finish the
// current iteration, write a checkpoint and exit, so a requeued job resumes
// where this one stopped instead of at the last periodic checkpoint.
#ifndef MIST_STOP_SIGNAL_H
#define MIST_STOP_SIGNAL_H

// Installs the handlers (call once, before training).
void stop_signal_install(void);
// The number of the first stop signal received, or 0.
int stop_signal_pending(void);

#endif
