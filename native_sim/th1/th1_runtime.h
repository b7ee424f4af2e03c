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
 *   - Compute kernels run float32 and bfloat16 (integer and bool where
 *     noted).  Matrix kernels require M, N and K to be multiples of
 *     TH1_MATMUL_ALIGN.
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

/* Kernels.  Unless noted, every tensor operand has the output's shape (stride 0
 * broadcasts) and dtype, and the compute dtypes are float32 and bfloat16
 * (computed in float, bfloat16 rounded once to nearest even). */

/* ---- elementwise arithmetic; Add, Sub, Mul, Maximum, Minimum also int32 and int64 (exact) */
TH1API th1Result_t th1Add(const th1TensorDesc_t* a, const th1TensorDesc_t* b, float alpha,
                          th1TensorDesc_t* c);
TH1API th1Result_t th1Sub(const th1TensorDesc_t* a, const th1TensorDesc_t* b, float alpha,
                          th1TensorDesc_t* c);
TH1API th1Result_t th1Mul(const th1TensorDesc_t* a, const th1TensorDesc_t* b, th1TensorDesc_t* c);
TH1API th1Result_t th1Div(const th1TensorDesc_t* a, const th1TensorDesc_t* b, th1TensorDesc_t* c);
/* c = a / b, b a scalar from the host (no device constant needed) */
TH1API th1Result_t th1DivScalar(const th1TensorDesc_t* a, double b, th1TensorDesc_t* c);
TH1API th1Result_t th1Pow(const th1TensorDesc_t* a, const th1TensorDesc_t* b, th1TensorDesc_t* c);
TH1API th1Result_t th1PowScalar(const th1TensorDesc_t* x, double exponent, th1TensorDesc_t* y);
/* y = base ** x, elementwise */
TH1API th1Result_t th1ScalarPow(double base, const th1TensorDesc_t* x, th1TensorDesc_t* y);
TH1API th1Result_t th1Maximum(const th1TensorDesc_t* a, const th1TensorDesc_t* b, th1TensorDesc_t* c);
TH1API th1Result_t th1Minimum(const th1TensorDesc_t* a, const th1TensorDesc_t* b, th1TensorDesc_t* c);

/* ---- comparisons: a and b of one dtype (float32, bfloat16, int32, int64, bool), c bool */
TH1API th1Result_t th1Equal(const th1TensorDesc_t* a, const th1TensorDesc_t* b, th1TensorDesc_t* c);
TH1API th1Result_t th1NotEqual(const th1TensorDesc_t* a, const th1TensorDesc_t* b, th1TensorDesc_t* c);
TH1API th1Result_t th1Less(const th1TensorDesc_t* a, const th1TensorDesc_t* b, th1TensorDesc_t* c);
TH1API th1Result_t th1LessEqual(const th1TensorDesc_t* a, const th1TensorDesc_t* b, th1TensorDesc_t* c);
TH1API th1Result_t th1Greater(const th1TensorDesc_t* a, const th1TensorDesc_t* b, th1TensorDesc_t* c);
TH1API th1Result_t th1GreaterEqual(const th1TensorDesc_t* a, const th1TensorDesc_t* b, th1TensorDesc_t* c);

/* ---- bitwise: bool (logical), int32, int64 */
TH1API th1Result_t th1BitwiseAnd(const th1TensorDesc_t* a, const th1TensorDesc_t* b, th1TensorDesc_t* c);
TH1API th1Result_t th1BitwiseOr(const th1TensorDesc_t* a, const th1TensorDesc_t* b, th1TensorDesc_t* c);
TH1API th1Result_t th1BitwiseXor(const th1TensorDesc_t* a, const th1TensorDesc_t* b, th1TensorDesc_t* c);
TH1API th1Result_t th1BitwiseNot(const th1TensorDesc_t* x, th1TensorDesc_t* y);

/* ---- unary; Neg and Abs also int32 and int64 */
TH1API th1Result_t th1Relu(const th1TensorDesc_t* x, th1TensorDesc_t* y);
/* mode: 0 exact (erf), 1 tanh approximation */
TH1API th1Result_t th1Gelu(const th1TensorDesc_t* x, int mode, th1TensorDesc_t* y);
TH1API th1Result_t th1Silu(const th1TensorDesc_t* x, th1TensorDesc_t* y);
TH1API th1Result_t th1Sigmoid(const th1TensorDesc_t* x, th1TensorDesc_t* y);
TH1API th1Result_t th1Tanh(const th1TensorDesc_t* x, th1TensorDesc_t* y);
TH1API th1Result_t th1Exp(const th1TensorDesc_t* x, th1TensorDesc_t* y);
TH1API th1Result_t th1Log(const th1TensorDesc_t* x, th1TensorDesc_t* y);
TH1API th1Result_t th1Sqrt(const th1TensorDesc_t* x, th1TensorDesc_t* y);
TH1API th1Result_t th1Rsqrt(const th1TensorDesc_t* x, th1TensorDesc_t* y);
TH1API th1Result_t th1Reciprocal(const th1TensorDesc_t* x, th1TensorDesc_t* y);
TH1API th1Result_t th1Cos(const th1TensorDesc_t* x, th1TensorDesc_t* y);
TH1API th1Result_t th1Sin(const th1TensorDesc_t* x, th1TensorDesc_t* y);
TH1API th1Result_t th1Neg(const th1TensorDesc_t* x, th1TensorDesc_t* y);
TH1API th1Result_t th1Abs(const th1TensorDesc_t* x, th1TensorDesc_t* y);

/* ---- pointwise with scalars (the optimizer's arithmetic) */
/* y = x + scale * a * b */
TH1API th1Result_t th1Addcmul(const th1TensorDesc_t* x, const th1TensorDesc_t* a, const th1TensorDesc_t* b,
                              double scale, th1TensorDesc_t* y);
/* y = x + scale * a / b */
TH1API th1Result_t th1Addcdiv(const th1TensorDesc_t* x, const th1TensorDesc_t* a, const th1TensorDesc_t* b,
                              double scale, th1TensorDesc_t* y);
/* y = x + weight * (end - x) */
TH1API th1Result_t th1Lerp(const th1TensorDesc_t* x, const th1TensorDesc_t* end, double weight,
                           th1TensorDesc_t* y);
/* c = cond ? a : b; cond bool, a, b, c of any one TH1 dtype */
TH1API th1Result_t th1Where(const th1TensorDesc_t* cond, const th1TensorDesc_t* a, const th1TensorDesc_t* b,
                            th1TensorDesc_t* c);
/* y = mask ? value : x; mask bool; x, y float32, bfloat16, int32, int64 or bool */
TH1API th1Result_t th1MaskedFill(const th1TensorDesc_t* x, const th1TensorDesc_t* mask, double value,
                                 th1TensorDesc_t* y);

/* ---- activation gradients: dx = dy * f'(x), or from the forward's output y */
TH1API th1Result_t th1GeluBackward(const th1TensorDesc_t* dy, const th1TensorDesc_t* x, int mode,
                                   th1TensorDesc_t* dx);
/* dx = x <= threshold ? 0 : dy (ReLU's gradient with threshold 0) */
TH1API th1Result_t th1ThresholdBackward(const th1TensorDesc_t* dy, const th1TensorDesc_t* x,
                                        double threshold, th1TensorDesc_t* dx);
TH1API th1Result_t th1SigmoidBackward(const th1TensorDesc_t* dy, const th1TensorDesc_t* y,
                                      th1TensorDesc_t* dx);
TH1API th1Result_t th1TanhBackward(const th1TensorDesc_t* dy, const th1TensorDesc_t* y, th1TensorDesc_t* dx);

/* ---- matrix unit */
/* c = a @ b for 2-D, or batched over the leading dim for 3-D */
TH1API th1Result_t th1Matmul(const th1TensorDesc_t* a, const th1TensorDesc_t* b, th1TensorDesc_t* c);
/* c = beta * bias + alpha * a @ b  (bias expanded to c's shape) */
TH1API th1Result_t th1Addmm(const th1TensorDesc_t* bias, const th1TensorDesc_t* a,
                            const th1TensorDesc_t* b, float beta, float alpha, th1TensorDesc_t* c);

/* ---- reductions over `axes` (numAxes 0: every axis); y keeps reduced axes as 1 if keepDims;
 * th1ReduceSum also reads int8/uint8/int32/int64/bool into an int64 y */
TH1API th1Result_t th1ReduceSum(const th1TensorDesc_t* x, const int64_t* axes, int numAxes, int keepDims,
                                th1TensorDesc_t* y);
TH1API th1Result_t th1ReduceMean(const th1TensorDesc_t* x, const int64_t* axes, int numAxes, int keepDims,
                                 th1TensorDesc_t* y);
/* log(sum(exp(x))) over axes, computed stably (shifted by the max) */
TH1API th1Result_t th1ReduceLogSumExp(const th1TensorDesc_t* x, const int64_t* axes, int numAxes, int keepDims,
                                      th1TensorDesc_t* y);
/* variance with `correction` (1: unbiased; divides by count - correction) and mean */
TH1API th1Result_t th1VarMean(const th1TensorDesc_t* x, const int64_t* axes, int numAxes, double correction,
                              int keepDims, th1TensorDesc_t* var, th1TensorDesc_t* mean);

/* ---- normalization */
/* normalizes over the last normDims dims; gamma, beta, mean, rstd may be NULL */
TH1API th1Result_t th1LayerNorm(const th1TensorDesc_t* x, int normDims, const th1TensorDesc_t* gamma,
                                const th1TensorDesc_t* beta, float epsilon, th1TensorDesc_t* y,
                                th1TensorDesc_t* mean, th1TensorDesc_t* rstd);
/* gradients of th1LayerNorm; gamma may be NULL (no affine), dx, dgamma, dbeta NULL when not wanted */
TH1API th1Result_t th1LayerNormBackward(const th1TensorDesc_t* dy, const th1TensorDesc_t* x, int normDims,
                                        const th1TensorDesc_t* mean, const th1TensorDesc_t* rstd,
                                        const th1TensorDesc_t* gamma, th1TensorDesc_t* dx,
                                        th1TensorDesc_t* dgamma, th1TensorDesc_t* dbeta);
/* inference batch norm over dim 1 of [N, C, ...]; gamma and beta may be NULL */
TH1API th1Result_t th1BatchNormInference(const th1TensorDesc_t* x, const th1TensorDesc_t* gamma,
                                         const th1TensorDesc_t* beta, const th1TensorDesc_t* runningMean,
                                         const th1TensorDesc_t* runningVar, double epsilon, th1TensorDesc_t* y);

/* ---- softmax along `axis`.  flags: TH1_SOFTMAX_SAFE makes a row that is
 * entirely -inf come out as zeros (attention with fully masked rows) instead
 * of NaN; TH1_SOFTMAX_LOG gives log-softmax. */
#define TH1_SOFTMAX_SAFE 1
#define TH1_SOFTMAX_LOG 2
TH1API th1Result_t th1Softmax(const th1TensorDesc_t* x, int axis, int flags, th1TensorDesc_t* y);
/* gradient from the forward's output y (flags: TH1_SOFTMAX_LOG for log-softmax) */
TH1API th1Result_t th1SoftmaxBackward(const th1TensorDesc_t* dy, const th1TensorDesc_t* y, int axis, int flags,
                                      th1TensorDesc_t* dx);

/* ---- loss: negative log likelihood of log-probabilities x [N, C] (or [C]),
 * target int64/int32 [N] (or []), weight [C] or NULL; reduction 0 none, 1 mean,
 * 2 sum; totalWeight 0-D.  A target outside [0, C) other than ignoreIndex is
 * TH1_ERROR_DATA. */
TH1API th1Result_t th1NllLossForward(const th1TensorDesc_t* x, const th1TensorDesc_t* target,
                                     const th1TensorDesc_t* weight, int reduction, int64_t ignoreIndex,
                                     th1TensorDesc_t* loss, th1TensorDesc_t* totalWeight);
TH1API th1Result_t th1NllLossBackward(const th1TensorDesc_t* dLoss, const th1TensorDesc_t* x,
                                      const th1TensorDesc_t* target, const th1TensorDesc_t* weight,
                                      int reduction, int64_t ignoreIndex, const th1TensorDesc_t* totalWeight,
                                      th1TensorDesc_t* dx);

/* ---- embedding: y = table[indices] (int64/int32 indices, range-checked: TH1_ERROR_DATA) */
TH1API th1Result_t th1Embedding(const th1TensorDesc_t* table, const th1TensorDesc_t* indices,
                                th1TensorDesc_t* y);
/* dTable [numRows, D] = rows of dy summed by index; paddingIdx < 0: none; scaleByFreq divides
 * each row's sum by how often its index occurs */
TH1API th1Result_t th1EmbeddingBackward(const th1TensorDesc_t* dy, const th1TensorDesc_t* indices,
                                        int64_t numRows, int64_t paddingIdx, int scaleByFreq,
                                        th1TensorDesc_t* dTable);

/* ---- convolution, NCHW (weight OIHW), any stride, padding, dilation, groups */
TH1API th1Result_t th1ConvolutionForward(const th1TensorDesc_t* x, const th1TensorDesc_t* w,
                                         const th1TensorDesc_t* bias, const int64_t* stride,
                                         const int64_t* padding, const int64_t* dilation, int64_t groups,
                                         th1TensorDesc_t* y);
/* gradMask[3]: nonzero to compute dx, dw, db (a gradient not asked for may be NULL) */
TH1API th1Result_t th1ConvolutionBackward(const th1TensorDesc_t* dy, const th1TensorDesc_t* x,
                                          const th1TensorDesc_t* w, const int64_t* stride,
                                          const int64_t* padding, const int64_t* dilation, int64_t groups,
                                          const int64_t* gradMask, th1TensorDesc_t* dx, th1TensorDesc_t* dw,
                                          th1TensorDesc_t* db);

/* ---- pooling, NCHW.  numStride 0: stride = window.  indices (may be NULL)
 * hold h * W + w per plane, int64 */
TH1API th1Result_t th1MaxPool2d(const th1TensorDesc_t* x, const int64_t* window, const int64_t* stride,
                                int numStride, const int64_t* padding, const int64_t* dilation, int ceilMode,
                                th1TensorDesc_t* y, th1TensorDesc_t* indices);
TH1API th1Result_t th1MaxPool2dBackward(const th1TensorDesc_t* dy, const th1TensorDesc_t* indices,
                                        th1TensorDesc_t* dx);
/* divisorOverride 0: none */
TH1API th1Result_t th1AvgPool2d(const th1TensorDesc_t* x, const int64_t* window, const int64_t* stride,
                                int numStride, const int64_t* padding, int ceilMode, int countIncludePad,
                                int64_t divisorOverride, th1TensorDesc_t* y);
TH1API th1Result_t th1AvgPool2dBackward(const th1TensorDesc_t* dy, const int64_t* window,
                                        const int64_t* stride, int numStride, const int64_t* padding,
                                        int ceilMode, int countIncludePad, int64_t divisorOverride,
                                        th1TensorDesc_t* dx);
TH1API th1Result_t th1AdaptiveAvgPool2d(const th1TensorDesc_t* x, th1TensorDesc_t* y);
TH1API th1Result_t th1AdaptiveAvgPool2dBackward(const th1TensorDesc_t* dy, th1TensorDesc_t* dx);

/* ---- data movement */
TH1API th1Result_t th1Copy(const th1TensorDesc_t* src, th1TensorDesc_t* dst);
TH1API th1Result_t th1Fill(th1TensorDesc_t* dst, double value);
/* y[i] = start + i * step; y 1-D with exactly ceil((end - start) / step) elements,
 * float32, bfloat16, int32 or int64 */
TH1API th1Result_t th1Arange(double start, double end, double step, th1TensorDesc_t* y);
/* dx = zeros with dy copied into dx.select(axis, index): the gradient of selecting one slice */
TH1API th1Result_t th1SelectBackward(const th1TensorDesc_t* dy, int axis, int64_t index, th1TensorDesc_t* dx);
/* y = inputs concatenated along axis (1-D empty inputs are skipped); one dtype */
TH1API th1Result_t th1Cat(const th1TensorDesc_t* const* inputs, int numInputs, int axis, th1TensorDesc_t* y);

/* ---- comparisons with a host scalar: y = x <op> value, y bool, x of any TH1
 * type.  PyTorch's promotion: a floating x compares in its own type (value
 * rounded to it), an integer or bool x exactly against an integral value
 * and in float32 against any other. */
TH1API th1Result_t th1EqualScalar(const th1TensorDesc_t* x, double value, th1TensorDesc_t* y);
TH1API th1Result_t th1NotEqualScalar(const th1TensorDesc_t* x, double value, th1TensorDesc_t* y);
TH1API th1Result_t th1LessScalar(const th1TensorDesc_t* x, double value, th1TensorDesc_t* y);
TH1API th1Result_t th1LessEqualScalar(const th1TensorDesc_t* x, double value, th1TensorDesc_t* y);
TH1API th1Result_t th1GreaterScalar(const th1TensorDesc_t* x, double value, th1TensorDesc_t* y);
TH1API th1Result_t th1GreaterEqualScalar(const th1TensorDesc_t* x, double value, th1TensorDesc_t* y);

/* ---- logical: a, b of any TH1 types (nonzero, NaN too, is true), c bool */
#define TH1_LOGICAL_AND 0
#define TH1_LOGICAL_OR 1
#define TH1_LOGICAL_XOR 2
TH1API th1Result_t th1Logical(const th1TensorDesc_t* a, const th1TensorDesc_t* b, int op, th1TensorDesc_t* c);
TH1API th1Result_t th1LogicalNot(const th1TensorDesc_t* x, th1TensorDesc_t* y);

/* ---- reductions: any / all of any TH1 type into bool (uint8 for uint8) over
 * axes (numAxes 0: every axis) or one axis; max / min along an axis with the
 * first position of the extreme (NaN is the extreme), int64 indices;
 * th1ReduceSum also reads int8/uint8/int32/int64/bool into an int64 y */
#define TH1_REDUCE_ANY 0
#define TH1_REDUCE_ALL 1
TH1API th1Result_t th1ReduceLogical(const th1TensorDesc_t* x, const int64_t* axes, int numAxes, int keepDims,
                                    int mode, th1TensorDesc_t* y);
TH1API th1Result_t th1ReduceLogicalAxis(const th1TensorDesc_t* x, int axis, int keepDims, int mode,
                                        th1TensorDesc_t* y);
#define TH1_REDUCE_MAX 0
#define TH1_REDUCE_MIN 1
TH1API th1Result_t th1ReduceMinMax(const th1TensorDesc_t* x, int axis, int keepDims, int mode,
                                   th1TensorDesc_t* values, th1TensorDesc_t* indices);
TH1API th1Result_t th1ArgMinMax(const th1TensorDesc_t* x, int axis, int keepDims, int mode, th1TensorDesc_t* indices);
/* the k largest (smallest) along axis, sorted, ties by position, NaN largest */
TH1API th1Result_t th1TopK(const th1TensorDesc_t* x, int64_t k, int axis, int largest, th1TensorDesc_t* values,
                           th1TensorDesc_t* indices);
/* running sums along axis: float32/bfloat16 in their type, integers and bool into int64 */
TH1API th1Result_t th1CumSum(const th1TensorDesc_t* x, int axis, th1TensorDesc_t* y);

/* ---- y = min(max(x, lo), hi), lo / hi (expanded to y's shape) may be NULL,
 * not both; float32, bfloat16, int32, int64; NaN anywhere gives NaN */
TH1API th1Result_t th1Clamp(const th1TensorDesc_t* x, const th1TensorDesc_t* lo, const th1TensorDesc_t* hi,
                            th1TensorDesc_t* y);
/* y[i] = x[i] is among the elements of set (!= invert); y bool */
TH1API th1Result_t th1IsIn(const th1TensorDesc_t* x, const th1TensorDesc_t* set, int invert, th1TensorDesc_t* y);

/* ---- indexing: index tensors int64/int32, range-checked before anything is
 * written (TH1_ERROR_DATA); data of any TH1 type */
TH1API th1Result_t th1Gather(const th1TensorDesc_t* x, int axis, const th1TensorDesc_t* index, th1TensorDesc_t* y);
/* y = x, then y[..index..] = src (a 0-D src: one value) or += src (accumulate) */
TH1API th1Result_t th1Scatter(const th1TensorDesc_t* x, int axis, const th1TensorDesc_t* index,
                              const th1TensorDesc_t* src, int accumulate, th1TensorDesc_t* y);
TH1API th1Result_t th1IndexSelect(const th1TensorDesc_t* x, int axis, const th1TensorDesc_t* index,
                                  th1TensorDesc_t* y);
/* y = x, then y.select(axis, index[i]) += alpha * src.select(axis, i) */
TH1API th1Result_t th1IndexAdd(const th1TensorDesc_t* x, int axis, const th1TensorDesc_t* index,
                               const th1TensorDesc_t* src, double alpha, th1TensorDesc_t* y);
/* x[idx[0], ..., idx[numIdx-1]] on the leading axes, broadcast together, negative from the end */
TH1API th1Result_t th1Index(const th1TensorDesc_t* x, const th1TensorDesc_t* const* idx, int numIdx,
                            th1TensorDesc_t* y);
/* y = x, then y[idx] = values (broadcast), or += with accumulate */
TH1API th1Result_t th1IndexPut(const th1TensorDesc_t* x, const th1TensorDesc_t* const* idx, int numIdx,
                               const th1TensorDesc_t* values, int accumulate, th1TensorDesc_t* y);

/* ---- shaping: any TH1 type */
/* the lower (upper = 0) or upper triangle of the last two axes, from `diagonal` */
TH1API th1Result_t th1Triangle(const th1TensorDesc_t* x, int64_t diagonal, int upper, th1TensorDesc_t* y);
/* pads[2i], pads[2i+1] elements of `value` before / after axis nbDims-1-i (negative: cropped) */
TH1API th1Result_t th1Pad(const th1TensorDesc_t* x, const int64_t* pads, int numPads, double value,
                          th1TensorDesc_t* y);
/* nearest upsampling of NCHW x to y's size; scaleH / scaleW > 0 as PyTorch's
 * scale factors, 0 = from the sizes; and its gradient (float32, bfloat16) */
TH1API th1Result_t th1UpsampleNearest2d(const th1TensorDesc_t* x, double scaleH, double scaleW, th1TensorDesc_t* y);
TH1API th1Result_t th1UpsampleNearest2dBackward(const th1TensorDesc_t* dy, double scaleH, double scaleW,
                                                th1TensorDesc_t* dx);
/* dx = zeros with dy in dx[start:end:step] along axis */
TH1API th1Result_t th1SliceBackward(const th1TensorDesc_t* dy, int axis, int64_t start, int64_t end, int64_t step,
                                    th1TensorDesc_t* dx);

/* ---- mixed precision: scale, foundInf, newScale one float32 element each
 * (newScale may be scale), growthTracker one int32 */
TH1API th1Result_t th1AmpUpdateScale(const th1TensorDesc_t* scale, th1TensorDesc_t* growthTracker,
                                     const th1TensorDesc_t* foundInf, double growthFactor, double backoffFactor,
                                     int64_t growthInterval, th1TensorDesc_t* newScale);
/* grads[i] *= invScale (float32, bfloat16); foundInf = 1 if any element is inf or NaN */
TH1API th1Result_t th1AmpUnscale(th1TensorDesc_t* const* grads, int numGrads, th1TensorDesc_t* foundInf,
                                 const th1TensorDesc_t* invScale);

/* ---- fused optimizers (PyTorch's _fused_adam_, _fused_adamw_, _fused_sgd_) over
 * numTensors parameters, the lists written in place; maxExpAvgSqs only with
 * TH1_ADAM_AMSGRAD, momentumBuffers only with a momentum (else NULL); steps
 * one float32 element each (already incremented); gradScale, foundInf NULL
 * or one float32 element (gradients divided and written back; foundInf == 1
 * skips).  float32 and bfloat16. */
#define TH1_ADAM_AMSGRAD 1
#define TH1_ADAM_MAXIMIZE 2
#define TH1_ADAM_DECOUPLED 4 /* AdamW */
TH1API th1Result_t th1FusedAdam(th1TensorDesc_t* const* params, th1TensorDesc_t* const* grads,
                                th1TensorDesc_t* const* expAvgs, th1TensorDesc_t* const* expAvgSqs,
                                th1TensorDesc_t* const* maxExpAvgSqs, const th1TensorDesc_t* const* steps,
                                int numTensors, double lr, double beta1, double beta2, double weightDecay, double eps,
                                int flags, const th1TensorDesc_t* gradScale, const th1TensorDesc_t* foundInf);
#define TH1_SGD_NESTEROV 1
#define TH1_SGD_MAXIMIZE 2
#define TH1_SGD_FIRST_STEP 4
TH1API th1Result_t th1FusedSgd(th1TensorDesc_t* const* params, th1TensorDesc_t* const* grads,
                               th1TensorDesc_t* const* momentumBuffers, int numTensors, double weightDecay,
                               double momentum, double lr, double dampening, int flags,
                               const th1TensorDesc_t* gradScale, const th1TensorDesc_t* foundInf);

/* ---- random numbers: counter-based Philox4x32-10 (as PyTorch's CUDA generator).
 * No state on the device: each call reads the words of the stream `seed` from
 * word `offset` (a multiple of 4) and consumes th1RngWords(n, w) =
 * 4 * ceil(w * n / 4) words for n elements, w = 1 (2 for th1RngRandom over a
 * range wider than 2^32); the caller advances its offset by that.  Element i
 * (row-major order) takes words offset + w*i ... */
TH1API th1Result_t th1RngWords(int64_t numElements, int wordsPerElement, unsigned long long* words);
/* y = uniform in [low, high) (float32, bfloat16) */
TH1API th1Result_t th1RngUniform(th1TensorDesc_t* y, double low, double high, unsigned long long seed,
                                 unsigned long long offset);
/* y = mean + stddev * N(0, 1) (float32, bfloat16) */
TH1API th1Result_t th1RngNormal(th1TensorDesc_t* y, double mean, double stddev, unsigned long long seed,
                                unsigned long long offset);
/* y = 1 with probability prob, else 0 (any TH1 type) */
TH1API th1Result_t th1RngBernoulli(th1TensorDesc_t* y, double prob, unsigned long long seed,
                                   unsigned long long offset);
/* y = integers uniform in [low, high) */
TH1API th1Result_t th1RngRandom(th1TensorDesc_t* y, int64_t low, int64_t high, unsigned long long seed,
                                unsigned long long offset);
/* y = x * mask / (1 - prob), mask (bool) true with probability 1 - prob;
 * training 0: y = x, mask all true, no word read */
TH1API th1Result_t th1Dropout(const th1TensorDesc_t* x, double prob, int training, unsigned long long seed,
                              unsigned long long offset, th1TensorDesc_t* y, th1TensorDesc_t* mask);
/* dx = dy * mask * scale (mask bool: dropout's gradient, scale = 1 / (1 - prob)) */
TH1API th1Result_t th1DropoutBackward(const th1TensorDesc_t* dy, const th1TensorDesc_t* mask, double scale,
                                      th1TensorDesc_t* dx);

/* ---- profiling: device time of the calling thread's last kernel or copy (launch to
 * end of call), and of every kernel and copy since th1Init / th1ResetStats, in ns */
TH1API th1Result_t th1GetLastKernelTime(uint64_t* nanoseconds);
TH1API th1Result_t th1GetTotalKernelTime(uint64_t* nanoseconds);
/* ---- debug: the named kernel (a th1GetKernelStats name, "" = off) adds 1 to the
 * first element of its output; also TH1SIM_CORRUPT=<kernel> at init */
TH1API th1Result_t th1DebugCorruptKernel(const char* kernelName);
TH1API th1Result_t th1DebugGetCorruptions(uint64_t* count);

#ifdef __cplusplus
}
#endif

#endif  /* TH1_RUNTIME_H_ */
