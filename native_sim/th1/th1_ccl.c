/*
 * th1_ccl.c: the simulated TH1 collectives, on the shared sim_ccl core.
 * NCCL-style argument order and result codes; float32 and bfloat16.
 */
#include "th1_ccl.h"

#include <stdlib.h>

#include "../common/sim_ccl.h"
#include "../common/simcore.h"

struct th1CclComm_st {
    sim_ccl_comm* impl;
};

static th1CclResult_t code(sim_ccl_status s) {
    sim_op_done(); /* ends the device timer of the collective */
    static const th1CclResult_t map[SIM_CCL_E_COUNT] = {
        [SIM_CCL_OK] = th1CclSuccess,
        [SIM_CCL_E_INVALID] = th1CclInvalidArgument,
        [SIM_CCL_E_UNSUPPORTED] = th1CclInvalidUsage,
        [SIM_CCL_E_TIMEOUT] = th1CclTimeout,
        [SIM_CCL_E_PEER] = th1CclRemoteError,
        [SIM_CCL_E_SYSTEM] = th1CclSystemError,
        [SIM_CCL_E_DEVICE] = th1CclHardwareError,
    };
    return (unsigned)s < SIM_CCL_E_COUNT ? map[s] : th1CclHardwareError;
}

static sim_ccl_status dtype_of(th1DataType_t d, sim_dtype* out, const char* fn) {
    switch (d) {
        case TH1_DATA_FLOAT: *out = SIM_F32; return SIM_CCL_OK;
        case TH1_DATA_BFLOAT16: *out = SIM_BF16; return SIM_CCL_OK;
        default: break;
    }
    sim_fail(SIM_E_UNSUPPORTED, fn, "th1 data type %d is not supported by TH1 collectives "
             "(TH1_DATA_FLOAT, TH1_DATA_BFLOAT16)", (int)d);
    return SIM_CCL_E_UNSUPPORTED;
}

static sim_ccl_status comm_of(th1CclComm_t comm, sim_ccl_comm** out, const char* fn) {
    if (!comm || !sim_ccl_valid(comm->impl)) {
        sim_fail(SIM_E_INVALID_VALUE, fn, "not a live TH1 communicator");
        return SIM_CCL_E_INVALID;
    }
    *out = comm->impl;
    return SIM_CCL_OK;
}

TH1API th1CclResult_t th1CclCommInitRank(th1CclComm_t* comm, int nRanks, const char* commId, int rank,
                                         int timeoutMs) {
    const char* fn = "th1CclCommInitRank";
    if (!comm) {
        sim_fail(SIM_E_INVALID_VALUE, fn, "comm is NULL");
        return th1CclInvalidArgument;
    }
    *comm = NULL;
    struct th1CclComm_st* c = calloc(1, sizeof *c);
    if (!c) {
        sim_fail(SIM_E_OOM, fn, "out of host memory");
        return th1CclSystemError;
    }
    sim_ccl_status st = sim_ccl_init(&c->impl, "th1", "TH1SIM", commId, nRanks, rank, timeoutMs, fn);
    if (st) {
        free(c);
        return code(st);
    }
    *comm = c;
    return th1CclSuccess;
}

TH1API th1CclResult_t th1CclCommDestroy(th1CclComm_t comm) {
    sim_ccl_comm* c;
    sim_ccl_status st = comm_of(comm, &c, "th1CclCommDestroy");
    if (st) return code(st);
    st = sim_ccl_destroy(c, "th1CclCommDestroy");
    free(comm);
    return code(st);
}

TH1API th1CclResult_t th1CclCommCount(th1CclComm_t comm, int* count) {
    sim_ccl_comm* c;
    sim_ccl_status st = comm_of(comm, &c, "th1CclCommCount");
    if (st) return code(st);
    if (!count) {
        sim_fail(SIM_E_INVALID_VALUE, "th1CclCommCount", "count is NULL");
        return th1CclInvalidArgument;
    }
    *count = sim_ccl_nranks(c);
    return th1CclSuccess;
}

TH1API const char* th1CclGetLastErrorString(void) { return sim_last_error(); }

TH1API th1CclResult_t th1CclAllReduce(th1DevPtr_t sendbuff, th1DevPtr_t recvbuff, size_t count,
                                      th1DataType_t datatype, th1CclRedOp_t op, th1CclComm_t comm) {
    const char* fn = "th1CclAllReduce";
    sim_ccl_comm* c;
    sim_dtype dt;
    sim_ccl_status st = comm_of(comm, &c, fn);
    if (!st) st = dtype_of(datatype, &dt, fn);
    if (!st && (unsigned)op > th1CclMin) {
        sim_fail(SIM_E_INVALID_VALUE, fn, "unknown reduction %d", (int)op);
        st = SIM_CCL_E_INVALID;
    }
    if (!st) st = sim_ccl_all_reduce(c, sendbuff, recvbuff, count, dt, (sim_ccl_op)op, fn);
    return code(st);
}

TH1API th1CclResult_t th1CclBroadcast(th1DevPtr_t sendbuff, th1DevPtr_t recvbuff, size_t count,
                                      th1DataType_t datatype, int root, th1CclComm_t comm) {
    const char* fn = "th1CclBroadcast";
    sim_ccl_comm* c;
    sim_dtype dt;
    sim_ccl_status st = comm_of(comm, &c, fn);
    if (!st) st = dtype_of(datatype, &dt, fn);
    if (!st) st = sim_ccl_broadcast(c, sendbuff, recvbuff, count, dt, root, fn);
    return code(st);
}

TH1API th1CclResult_t th1CclAllGather(th1DevPtr_t sendbuff, th1DevPtr_t recvbuff, size_t sendcount,
                                      th1DataType_t datatype, th1CclComm_t comm) {
    const char* fn = "th1CclAllGather";
    sim_ccl_comm* c;
    sim_dtype dt;
    sim_ccl_status st = comm_of(comm, &c, fn);
    if (!st) st = dtype_of(datatype, &dt, fn);
    if (!st) st = sim_ccl_all_gather(c, sendbuff, recvbuff, sendcount, dt, fn);
    return code(st);
}
