/*
 * x1_ccl.h -- SparkAI X1-Edge collective communication library (simulated).
 *
 * Version 1.0.0.  Ships beside x1_runtime.h and lives in the same library.
 * Collectives run between the X1 devices of several processes (one rank per
 * process) directly on device memory: no host staging.
 *
 * A communicator is created by every rank with the same rendezvous key (any
 * 1-64 characters of [A-Za-z0-9_-], unique per communicator: exchange it
 * out of band, e.g. through a key-value store).  Calls on one communicator
 * must be made in the same order on every rank, from one thread at a time.
 * Buffers are x1 device addresses of contiguous elements; send may equal
 * recv (in place; for all_gather, send may be this rank's block of recv).
 *
 * Nothing waits forever: a call fails with X1_CCL_ERR_TIMEOUT when the other
 * ranks do not arrive within timeout_ms, and with X1_CCL_ERR_PEER as soon as
 * a peer process exits or reports a failure.  After a failure the
 * communicator is unusable; destroy it.  x1_ccl_get_last_error() describes
 * the last failure on the calling thread.
 *
 * Collectives run float32 and float16.  Reductions: sum, prod, max, min.
 *
 * Environment:
 *   X1SIM_CCL_SLOT_BYTES  staging slot per rank in bytes (default 4 MiB; same on every rank)
 *   X1SIM_FAULTS          "ccl_all_reduce:N" etc.: the Nth call fails with X1_CCL_ERR_DEVICE
 */
#ifndef X1_CCL_H
#define X1_CCL_H

#include <stddef.h>
#include <stdint.h>

#include "x1_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define X1_CCL_VERSION_MAJOR 1
#define X1_CCL_VERSION_MINOR 0
#define X1_CCL_MAX_RANKS 64

typedef enum x1_ccl_status {
    X1_CCL_SUCCESS = 0,
    X1_CCL_ERR_INVALID_VALUE = 1,
    X1_CCL_ERR_UNSUPPORTED = 2,   /* dtype or reduction the collectives do not run */
    X1_CCL_ERR_TIMEOUT = 3,       /* the other ranks did not arrive in time */
    X1_CCL_ERR_PEER = 4,          /* a peer exited or failed */
    X1_CCL_ERR_SYSTEM = 5,        /* shared resources could not be set up */
    X1_CCL_ERR_DEVICE = 6         /* device fault; the collective did not complete */
} x1_ccl_status_t;

typedef enum x1_ccl_op {
    X1_CCL_SUM = 0,
    X1_CCL_PROD = 1,
    X1_CCL_MAX = 2,
    X1_CCL_MIN = 3
} x1_ccl_op_t;

typedef struct x1_ccl_comm *x1_ccl_comm_t;

X1_API x1_ccl_status_t x1_ccl_comm_init(x1_ccl_comm_t *comm, const char *unique_key, int32_t nranks,
                                        int32_t rank, int32_t timeout_ms);
X1_API x1_ccl_status_t x1_ccl_comm_destroy(x1_ccl_comm_t comm);
X1_API x1_ccl_status_t x1_ccl_comm_rank(x1_ccl_comm_t comm, int32_t *rank, int32_t *nranks);
X1_API const char *x1_ccl_get_last_error(void);

X1_API x1_ccl_status_t x1_ccl_all_reduce(x1_ccl_comm_t comm, x1_devptr_t send, x1_devptr_t recv,
                                         size_t count, x1_dtype_t dtype, x1_ccl_op_t op);
X1_API x1_ccl_status_t x1_ccl_broadcast(x1_ccl_comm_t comm, int32_t root, x1_devptr_t send,
                                        x1_devptr_t recv, size_t count, x1_dtype_t dtype);
/* recv holds nranks * count elements, rank r's block at r * count */
X1_API x1_ccl_status_t x1_ccl_all_gather(x1_ccl_comm_t comm, x1_devptr_t send, x1_devptr_t recv,
                                         size_t count, x1_dtype_t dtype);

#ifdef __cplusplus
}
#endif

#endif /* X1_CCL_H */
