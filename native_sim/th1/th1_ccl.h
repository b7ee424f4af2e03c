/*
 * th1_ccl.h - Tianhe TH1 collective communications (simulated)
 *
 * Copyright (c) the flbridge authors.  Simulated hardware for tests and demos.
 *
 * Ships inside the TH1 driver library, beside th1_runtime.h.  One rank per
 * process; collectives move data between the TH1 devices of the ranks
 * directly, device memory to device memory.
 *
 * Conventions
 *   - Every entry point returns th1CclResult_t; th1CclSuccess is 0.
 *   - th1CclGetLastErrorString() describes the last failure on the calling thread.
 *   - th1CclCommInitRank is called by every rank with the same commId (1-64
 *     characters of [A-Za-z0-9_-], distributed out of band) and returns when
 *     all nRanks ranks have joined, or fails after timeoutMs.
 *   - Calls on a communicator must be issued in the same order on every rank.
 *     A call fails with th1CclTimeout when the peers do not arrive within the
 *     timeout, and with th1CclRemoteError as soon as a peer exits or fails;
 *     the communicator must then be destroyed.
 *   - Buffers are device pointers to contiguous elements; sendbuff may equal
 *     recvbuff (in place).  Data types: TH1_DATA_FLOAT and TH1_DATA_BFLOAT16.
 *
 * Environment: TH1SIM_CCL_SLOT_BYTES (staging per rank, default 4 MiB),
 * TH1SIM_FAULTS ("ccl_all_reduce:N", ...).
 */

#ifndef TH1_CCL_H_
#define TH1_CCL_H_

#include <stddef.h>

#include "th1_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TH1_CCL_MAX_RANKS 64

typedef enum th1CclResult_enum {
    th1CclSuccess = 0,
    th1CclInvalidArgument = 201,
    th1CclInvalidUsage = 202,     /* data type or reduction the collectives do not support */
    th1CclSystemError = 203,
    th1CclTimeout = 204,
    th1CclRemoteError = 205,      /* a peer exited or failed */
    th1CclHardwareError = 206
} th1CclResult_t;

typedef enum th1CclRedOp_enum {
    th1CclSum = 0,
    th1CclProd = 1,
    th1CclMax = 2,
    th1CclMin = 3
} th1CclRedOp_t;

typedef struct th1CclComm_st* th1CclComm_t;

TH1API th1CclResult_t th1CclCommInitRank(th1CclComm_t* comm, int nRanks, const char* commId, int rank,
                                         int timeoutMs);
TH1API th1CclResult_t th1CclCommDestroy(th1CclComm_t comm);
TH1API th1CclResult_t th1CclCommCount(th1CclComm_t comm, int* count);
TH1API const char* th1CclGetLastErrorString(void);

TH1API th1CclResult_t th1CclAllReduce(th1DevPtr_t sendbuff, th1DevPtr_t recvbuff, size_t count,
                                      th1DataType_t datatype, th1CclRedOp_t op, th1CclComm_t comm);
TH1API th1CclResult_t th1CclBroadcast(th1DevPtr_t sendbuff, th1DevPtr_t recvbuff, size_t count,
                                      th1DataType_t datatype, int root, th1CclComm_t comm);
/* recvbuff holds nRanks * sendcount elements, rank r's at r * sendcount */
TH1API th1CclResult_t th1CclAllGather(th1DevPtr_t sendbuff, th1DevPtr_t recvbuff, size_t sendcount,
                                      th1DataType_t datatype, th1CclComm_t comm);

#ifdef __cplusplus
}
#endif

#endif  /* TH1_CCL_H_ */
