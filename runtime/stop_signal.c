// Graceful stop on a signal (see stop_signal.h). The handler only records the
// signal: everything else (agreeing on the step across ranks, writing the
// checkpoint) happens in the training loop, outside signal context.
#include "runtime/stop_signal.h"
#include <signal.h>
#include <string.h>

static volatile sig_atomic_t received;

static void on_stop(int sig) {
    if (!received) received = sig;
}

void stop_signal_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // interrupted reads and writes carry on
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    // a write past the file size limit (ulimit -f, a quota) would kill the rank
    // with SIGXFSZ and no word; ignored, the write fails with EFBIG and the
    // checkpoint or log that was being written reports it like a full disk
    signal(SIGXFSZ, SIG_IGN);
}

int stop_signal_pending(void) { return received; }
