/*
 * sim_ccl: collectives between processes for the simulated chips (never
 * exported; each chip wraps it in its own CCL API, x1_ccl.h / th1_ccl.h).
 *
 * Every rank is a process with its own simulated device.  The ranks of one
 * communicator share a file-backed mapping in /dev/shm named by a
 * rendezvous key (one staging slot per rank plus a header with a barrier),
 * so a collective moves bytes from each rank's device memory through the
 * slots into every rank's device memory, the way a vendor CCL moves them
 * over the chip-to-chip links.
 *
 * Nothing blocks forever: every wait has a deadline (the communicator's
 * timeout), and a peer whose process is gone, or that reported a failure,
 * makes the others fail at once with a message naming it.  After any
 * failure the communicator is unusable (as NCCL's is after an abort).
 */
#ifndef FLSIM_SIM_CCL_H
#define FLSIM_SIM_CCL_H

#include <stddef.h>
#include <stdint.h>

#include "simcore.h"

#define SIM_CCL_MAX_RANKS 64
#define SIM_CCL_MAX_KEY 64

typedef enum {
    SIM_CCL_OK = 0,
    SIM_CCL_E_INVALID,      /* bad argument (strict mode aborts, like any invalid launch) */
    SIM_CCL_E_UNSUPPORTED,  /* dtype or reduction the collective does not run (strict aborts) */
    SIM_CCL_E_TIMEOUT,      /* a peer did not arrive within the communicator's timeout */
    SIM_CCL_E_PEER,         /* a peer process exited, or reported a failure */
    SIM_CCL_E_SYSTEM,       /* the shared mapping could not be set up */
    SIM_CCL_E_DEVICE,       /* device fault (injected with <PREFIX>_FAULTS=ccl_all_reduce:N) */
    SIM_CCL_E_COUNT
} sim_ccl_status;

typedef enum { SIM_CCL_SUM = 0, SIM_CCL_PROD, SIM_CCL_MAX, SIM_CCL_MIN, SIM_CCL_OP_COUNT } sim_ccl_op;

typedef struct sim_ccl_comm sim_ccl_comm;

/* Joins (or creates) the communicator `key` as `rank` of `nranks`; returns
 * when every rank has joined, or fails after timeout_ms.  `chip` names the
 * mapping (ranks of different chips never meet); `env_prefix` selects the
 * slot-size variable <prefix>_CCL_SLOT_BYTES (default 4 MiB per rank). */
SIM_HIDDEN sim_ccl_status sim_ccl_init(sim_ccl_comm **out, const char *chip, const char *env_prefix,
                                       const char *key, int nranks, int rank, int timeout_ms,
                                       const char *fn);
SIM_HIDDEN sim_ccl_status sim_ccl_destroy(sim_ccl_comm *c, const char *fn);
SIM_HIDDEN int sim_ccl_valid(const sim_ccl_comm *c);
SIM_HIDDEN int sim_ccl_rank(const sim_ccl_comm *c);
SIM_HIDDEN int sim_ccl_nranks(const sim_ccl_comm *c);

/* Device buffers are addresses of this process's simulated memory; send may
 * equal recv (in place).  count is in elements (per rank for all_gather). */
SIM_HIDDEN sim_ccl_status sim_ccl_all_reduce(sim_ccl_comm *c, uint64_t send, uint64_t recv,
                                             size_t count, sim_dtype dt, sim_ccl_op op,
                                             const char *fn);
SIM_HIDDEN sim_ccl_status sim_ccl_broadcast(sim_ccl_comm *c, uint64_t send, uint64_t recv,
                                            size_t count, sim_dtype dt, int root, const char *fn);
SIM_HIDDEN sim_ccl_status sim_ccl_all_gather(sim_ccl_comm *c, uint64_t send, uint64_t recv,
                                             size_t count, sim_dtype dt, const char *fn);

SIM_HIDDEN const char *sim_ccl_status_name(sim_ccl_status st);

#endif
