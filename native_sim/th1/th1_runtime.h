/*
 * th1_runtime.h - Tianhe TH1 training accelerator driver API (simulated)
 *
 * Copyright (c) the flbridge authors.  Simulated hardware for tests and demos.
 *
 * Conventions
 *   - Every entry point returns th1Result_t; TH1_SUCCESS is 0.
 *   - th1GetLastErrorString() describes the last failure on the calling thread.
 *   - Device memory (th1DevPtr_t) is not host-addressable.  TH1 has no
 *     host-memory mapping: all data moves through th1Memcpy*.
 *   - A tensor descriptor addresses element [0,...,0] at ptr + elemOffset
 *     elements; strides are in elements, 0 broadcasts.
 *   - Compute kernels run float32 and bfloat16.  Matrix kernels require
 *     M, N and K to be multiples of TH1_MATMUL_ALIGN.
 *
 * Environment: TH1SIM_CAPACITY, TH1SIM_STRICT, TH1SIM_FAULTS (see x1 docs;
 * the syntax is shared by all simulated devices).
 */

#ifndef TH1_RUNTIME_H_
#define TH1_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef TH1API
#  if defined(_WIN32)
#    define TH1API __declspec(dllexport)
#  else
#    define TH1API __attribute__((visibility("default")))
#  endif
#endif

#define TH1_MAX_DIMS 6
#define TH1_MATMUL_ALIGN 16
#define TH1_KERNEL_NAME_MAX 32

typedef enum th1Result_enum {
    TH1_SUCCESS = 0,
    TH1_ERROR_INVALID_ARGUMENT = 101,
    TH1_ERROR_OUT_OF_MEMORY = 102,
    TH1_ERROR_NOT_SUPPORTED = 103,
    TH1_ERROR_HARDWARE = 104,
    TH1_ERROR_NOT_INITIALIZED = 105,
    TH1_ERROR_ILLEGAL_ADDRESS = 106,
    TH1_ERROR_DATA = 107
} th1Result_t;

typedef enum th1DataType_enum {
    TH1_DATA_FLOAT = 10,
    TH1_DATA_BFLOAT16 = 11,
    TH1_DATA_INT32 = 12,
    TH1_DATA_INT64 = 13,
    TH1_DATA_BOOL = 14,
    TH1_DATA_INT8 = 15,
    TH1_DATA_UINT8 = 16
} th1DataType_t;

typedef unsigned long long th1DevPtr_t;

typedef struct th1TensorDesc_st {
    th1DataType_t dataType;
    int32_t nbDims;
    th1DevPtr_t ptr;
    int64_t elemOffset;
    int64_t dims[TH1_MAX_DIMS];
    int64_t strides[TH1_MAX_DIMS];
} th1TensorDesc_t;

typedef struct th1Stats_st {
    unsigned long long bytesHtoD;
    unsigned long long callsHtoD;
    unsigned long long batchCallsHtoD;
    unsigned long long bytesDtoH;
    unsigned long long callsDtoH;
    unsigned long long bytesDtoD;
    unsigned long long callsDtoD;
    unsigned long long memInUse;
    unsigned long long memPeak;
    unsigned long long allocCalls;
    unsigned long long freeCalls;
    unsigned long long kernelLaunches;
} th1Stats_t;

typedef struct th1KernelStat_st {
    char name[TH1_KERNEL_NAME_MAX];
    unsigned long long launches;
} th1KernelStat_t;

/* Driver */
TH1API th1Result_t th1Init(unsigned long long memBytes);
TH1API th1Result_t th1Shutdown(void);
TH1API const char* th1GetLastErrorString(void);
TH1API th1Result_t th1DeviceSynchronize(void);

/* Memory */
TH1API th1Result_t th1MemAlloc(th1DevPtr_t* devPtr, size_t byteSize);
TH1API th1Result_t th1MemFree(th1DevPtr_t devPtr);
TH1API th1Result_t th1MemGetInfo(size_t* freeBytes, size_t* totalBytes);
TH1API th1Result_t th1MemcpyHtoD(th1DevPtr_t dstDevice, const void* srcHost, size_t byteCount);
TH1API th1Result_t th1MemcpyDtoH(void* dstHost, th1DevPtr_t srcDevice, size_t byteCount);
TH1API th1Result_t th1MemcpyDtoD(th1DevPtr_t dstDevice, th1DevPtr_t srcDevice, size_t byteCount);
TH1API th1Result_t th1MemcpyHtoDBatch(const th1DevPtr_t* dstDevices, const void* const* srcHosts,
                                      const size_t* byteCounts, size_t numCopies);

/* Statistics and debugging */
TH1API th1Result_t th1GetStats(th1Stats_t* stats);
TH1API th1Result_t th1ResetStats(void);
TH1API th1Result_t th1GetKernelStats(th1KernelStat_t* stats, int maxStats, int* numStats);
TH1API th1Result_t th1DebugInjectFaults(const char* spec);

/* Kernels */
TH1API th1Result_t th1Add(const th1TensorDesc_t* a, const th1TensorDesc_t* b, float alpha,
                          th1TensorDesc_t* c);
TH1API th1Result_t th1Mul(const th1TensorDesc_t* a, const th1TensorDesc_t* b, th1TensorDesc_t* c);
TH1API th1Result_t th1Relu(const th1TensorDesc_t* x, th1TensorDesc_t* y);
/* mode: 0 exact (erf), 1 tanh approximation */
TH1API th1Result_t th1Gelu(const th1TensorDesc_t* x, int mode, th1TensorDesc_t* y);
/* c = a @ b for 2-D, or batched over the leading dim for 3-D */
TH1API th1Result_t th1Matmul(const th1TensorDesc_t* a, const th1TensorDesc_t* b, th1TensorDesc_t* c);
/* c = beta * bias + alpha * a @ b  (bias expanded to c's shape) */
TH1API th1Result_t th1Addmm(const th1TensorDesc_t* bias, const th1TensorDesc_t* a,
                            const th1TensorDesc_t* b, float beta, float alpha, th1TensorDesc_t* c);
/* normalizes over the last normDims dims; gamma, beta, mean, rstd may be NULL */
TH1API th1Result_t th1LayerNorm(const th1TensorDesc_t* x, int normDims, const th1TensorDesc_t* gamma,
                                const th1TensorDesc_t* beta, float epsilon, th1TensorDesc_t* y,
                                th1TensorDesc_t* mean, th1TensorDesc_t* rstd);
/* flags: TH1_SOFTMAX_SAFE makes a row that is entirely -inf come out as zeros
 * (attention with fully masked rows) instead of NaN */
#define TH1_SOFTMAX_SAFE 1
TH1API th1Result_t th1Softmax(const th1TensorDesc_t* x, int axis, int flags, th1TensorDesc_t* y);
TH1API th1Result_t th1Copy(const th1TensorDesc_t* src, th1TensorDesc_t* dst);
TH1API th1Result_t th1Fill(th1TensorDesc_t* dst, double value);

#ifdef __cplusplus
}
#endif

#endif  /* TH1_RUNTIME_H_ */
