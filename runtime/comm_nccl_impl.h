// The NCCL comm backend's state, shared by its two halves: the operations and
// their completion (runtime/comm_nccl.c) and the communicators' lives
// (runtime/comm_nccl_link.c: creation, split, destruction). Private to them.
#ifndef MIST_COMM_NCCL_IMPL_H
#define MIST_COMM_NCCL_IMPL_H

#include <nccl.h>

#include "runtime/comm_nccl.h"
#include "runtime/comm_wrap.h"

enum {
    ERR_NCCL_SELF = -201,   // a device message to this rank itself outside a p2p group
    ERR_NCCL_MIXED = -202,  // one buffer on the device, the other on the host
    ERR_NCCL_DTYPE = -203,  // a reduction NCCL (or this interface) does not define
    ERR_NCCL_POOL = -204,
    ERR_NCCL_GROUPS = -205,
    ERR_NCCL_OVERLAP = -206,
    ERR_NCCL_INIT = -207,  // the unique id could not be made on the group's rank 0
    ERR_NCCL_NO_COMM = -208,     // a device message on a group without a communicator yet
    ERR_NCCL_GROUP_USAGE = -209, // p2p_group misused: nested, unmatched, or a collective / wait inside
    ERR_NCCL_BASE = -300,  // ERR_NCCL_BASE - r: ncclResult_t r from a call
};

// The NCCL communicator of each group that has had a device collective (or was
// prepared). An entry stays where it is until its group is freed (in-flight
// requests point at it); a freed entry (g NULL) is reused.
typedef struct {
    const CommGroup *g;
    ncclComm_t comm;
    int rank, size;
    int borrowed;  // comm is another link's (a group of the world's ranks in the world's order)
} Link;
#define MAX_LINKS 256

// One operation in flight: the event on ns that marks its end. `ordered`: the
// followed stream already waits on it (stream-ordered completion); the host
// only checks it later for NCCL's errors and the timeout, from `since`.
typedef struct {
    int in_use, ordered;
    BackendEvent *done;
    const char *what;
    size_t count;
    MistDtype t;
    const Link *link;
    double since;
} Slot;

// One wrapper: the backend it hands out, whose ctx points here.
typedef struct {
    CommWrap wrap;               // the inner (MPI) backend (first: comm_wrap.h)
    CommBackend iface;           // what comm_nccl_new returns
    Backend *be;                 // whose device memory NCCL moves
    BackendStream *follow, *ns;  // the followed stream, NCCL's stream
    BackendEvent *entered;       // recorded on `follow` before each call
    int stream_ordered;          // completion as an event the followed stream waits on
    long long calls;
    int made;                    // communicators created
    size_t device_bytes;         // device memory the communicators took (free bytes before - after)
    double timeout;
    char context[128];
    ncclResult_t last_result;    // for error_string: the call that failed
    char last_detail[256];
    Link links[MAX_LINKS];
    int num_links;
    Slot slots[COMM_MAX_REQUESTS];
    int slots_used;  // slots [0, slots_used) have an event
    // The open p2p group (runtime/comm.h's p2p_group): `open` between its begin
    // and end, `started` once its first device message has opened the NCCL
    // group; the messages' end events are recorded at ncclGroupEnd, which is
    // when NCCL enqueues them.
    int p2p_open, p2p_started;
    Slot *p2p_pending[COMM_MAX_REQUESTS];
    int p2p_num;
} Nccl;

static inline Nccl *nccl_of(const CommBackend *self) { return self->ctx; }

// 0 for ncclSuccess, else an error code whose text (error_string) carries
// NCCL's own last error message (ncclGetLastError)
int nccl_rc(Nccl *x, ncclResult_t r, ncclComm_t comm);
double nccl_now(void);
// Waits until a non-blocking call on comm (init, split, or a collective that
// said ncclInProgress) has finished: 0, or NCCL's error; past the timeout the
// job ends with a report naming `what`.
int nccl_settle(Nccl *x, ncclComm_t comm, const char *what, int rank, int size);
// g's link, its communicator created on first use (collective over g)
int nccl_link_of(Nccl *x, const CommGroup *g, const Link **out);
// g's link if its communicator exists already, else NULL (never collective)
const Link *nccl_link_find(const Nccl *x, const CommGroup *g);
// destroys the communicators of the links [first, first + n) that have one,
// together (finalised at once, so no order among them can deadlock), under the timeout
void nccl_links_destroy(Nccl *x, Link *first, int n);

#endif
