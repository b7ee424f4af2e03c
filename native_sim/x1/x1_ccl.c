/*
 * x1_ccl.c: the simulated X1 collective library, on the shared sim_ccl core.
 * Maps the x1 ABI (status codes, dtype codes, argument order) and enforces
 * what X1 collectives accept (float32 and float16).
 */
#include "x1_ccl.h"

#include <stdio.h>
#include <stdlib.h>

#include "../common/sim_ccl.h"
#include "../common/simcore.h"

#ifndef X1_SIM_REVISION
#define X1_SIM_REVISION 1
#endif
#define X1_CCL_CHIP (X1_SIM_REVISION >= 2 ? "x1v2" : "x1")

struct x1_ccl_comm {
    sim_ccl_comm *impl;
};

static x1_ccl_status_t code(sim_ccl_status s) {
    sim_op_done(); /* ends the device timer of the collective */
    static const x1_ccl_status_t map[SIM_CCL_E_COUNT] = {
        [SIM_CCL_OK] = X1_CCL_SUCCESS,
        [SIM_CCL_E_INVALID] = X1_CCL_ERR_INVALID_VALUE,
        [SIM_CCL_E_UNSUPPORTED] = X1_CCL_ERR_UNSUPPORTED,
        [SIM_CCL_E_TIMEOUT] = X1_CCL_ERR_TIMEOUT,
        [SIM_CCL_E_PEER] = X1_CCL_ERR_PEER,
        [SIM_CCL_E_SYSTEM] = X1_CCL_ERR_SYSTEM,
        [SIM_CCL_E_DEVICE] = X1_CCL_ERR_DEVICE,
    };
    return (unsigned)s < SIM_CCL_E_COUNT ? map[s] : X1_CCL_ERR_DEVICE;
}

/* X1 collectives move float32 and float16 only. */
static sim_ccl_status dtype_of(x1_dtype_t d, sim_dtype *out, const char *fn) {
    switch (d) {
        case X1_FLOAT32: *out = SIM_F32; return SIM_CCL_OK;
        case X1_FLOAT16: *out = SIM_F16; return SIM_CCL_OK;
        default: break;
    }
    sim_fail(SIM_E_UNSUPPORTED, fn, "x1 dtype code %d is not supported by X1 collectives "
             "(float32, float16)", (int)d);
    return SIM_CCL_E_UNSUPPORTED;
}

static sim_ccl_status comm_of(x1_ccl_comm_t comm, sim_ccl_comm **out, const char *fn) {
    if (!comm || !sim_ccl_valid(comm->impl)) {
        sim_fail(SIM_E_INVALID_VALUE, fn, "not a live x1 communicator");
        return SIM_CCL_E_INVALID;
    }
    *out = comm->impl;
    return SIM_CCL_OK;
}

X1_API x1_ccl_status_t x1_ccl_comm_init(x1_ccl_comm_t *comm, const char *unique_key, int32_t nranks,
                                        int32_t rank, int32_t timeout_ms) {
    const char *fn = "x1_ccl_comm_init";
    if (!comm) {
        sim_fail(SIM_E_INVALID_VALUE, fn, "communicator output pointer is NULL");
        return X1_CCL_ERR_INVALID_VALUE;
    }
    *comm = NULL;
    struct x1_ccl_comm *c = calloc(1, sizeof *c);
    if (!c) {
        sim_fail(SIM_E_OOM, fn, "out of host memory");
        return X1_CCL_ERR_SYSTEM;
    }
    sim_ccl_status st = sim_ccl_init(&c->impl, X1_CCL_CHIP, "X1SIM", unique_key, nranks, rank,
                                     timeout_ms, fn);
    if (st) {
        free(c);
        return code(st);
    }
    *comm = c;
    return X1_CCL_SUCCESS;
}

X1_API x1_ccl_status_t x1_ccl_comm_destroy(x1_ccl_comm_t comm) {
    sim_ccl_comm *c;
    sim_ccl_status st = comm_of(comm, &c, "x1_ccl_comm_destroy");
    if (st) return code(st);
    st = sim_ccl_destroy(c, "x1_ccl_comm_destroy");
    free(comm);
    return code(st);
}

X1_API x1_ccl_status_t x1_ccl_comm_rank(x1_ccl_comm_t comm, int32_t *rank, int32_t *nranks) {
    sim_ccl_comm *c;
    sim_ccl_status st = comm_of(comm, &c, "x1_ccl_comm_rank");
    if (st) return code(st);
    if (rank) *rank = sim_ccl_rank(c);
    if (nranks) *nranks = sim_ccl_nranks(c);
    return X1_CCL_SUCCESS;
}

X1_API const char *x1_ccl_get_last_error(void) { return sim_last_error(); }

X1_API x1_ccl_status_t x1_ccl_all_reduce(x1_ccl_comm_t comm, x1_devptr_t send, x1_devptr_t recv,
                                         size_t count, x1_dtype_t dtype, x1_ccl_op_t op) {
    const char *fn = "x1_ccl_all_reduce";
    sim_ccl_comm *c;
    sim_dtype dt;
    sim_ccl_status st = comm_of(comm, &c, fn);
    if (!st) st = dtype_of(dtype, &dt, fn);
    if (!st && (unsigned)op > X1_CCL_MIN) {
        sim_fail(SIM_E_INVALID_VALUE, fn, "unknown reduction %d", (int)op);
        st = SIM_CCL_E_INVALID;
    }
    if (!st) st = sim_ccl_all_reduce(c, send, recv, count, dt, (sim_ccl_op)op, fn);
    return code(st);
}

X1_API x1_ccl_status_t x1_ccl_broadcast(x1_ccl_comm_t comm, int32_t root, x1_devptr_t send,
                                        x1_devptr_t recv, size_t count, x1_dtype_t dtype) {
    const char *fn = "x1_ccl_broadcast";
    sim_ccl_comm *c;
    sim_dtype dt;
    sim_ccl_status st = comm_of(comm, &c, fn);
    if (!st) st = dtype_of(dtype, &dt, fn);
    if (!st) st = sim_ccl_broadcast(c, send, recv, count, dt, root, fn);
    return code(st);
}

X1_API x1_ccl_status_t x1_ccl_all_gather(x1_ccl_comm_t comm, x1_devptr_t send, x1_devptr_t recv,
                                         size_t count, x1_dtype_t dtype) {
    const char *fn = "x1_ccl_all_gather";
    sim_ccl_comm *c;
    sim_dtype dt;
    sim_ccl_status st = comm_of(comm, &c, fn);
    if (!st) st = dtype_of(dtype, &dt, fn);
    if (!st) st = sim_ccl_all_gather(c, send, recv, count, dt, fn);
    return code(st);
}
