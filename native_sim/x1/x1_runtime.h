/*
 * x1_runtime.h -- SparkAI X1-Edge NPU user-mode runtime (simulated).
 *
 * Version 1.2.0.  All calls return an x1_status_t; on failure,
 * x1_get_last_error() describes the failure for the calling thread.
 *
 * Memory model: x1_malloc returns device addresses (x1_devptr_t) that are not
 * host pointers.  Move data with the x1_memcpy_* family, or make host memory
 * visible to the NPU without copying with x1_mem_map (zero-copy).
 *
 * Tensors are passed as x1_tensor_t descriptors: a device address, a shape and
 * strides counted in elements.  A stride of 0 broadcasts.  Kernels require all
 * tensor operands to have the output's shape and the same dtype unless noted.
 *
 * Environment:
 *   X1SIM_CAPACITY  device memory size (e.g. "64M"); overrides x1_init's argument
 *   X1SIM_STRICT    "1": an invalid launch aborts the process (like a driver crash)
 *   X1SIM_FAULTS    "kernel:N[+],...": the Nth call of kernel fails with X1_ERR_DEVICE
 */
#ifndef X1_RUNTIME_H
#define X1_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#if defined(__GNUC__)
#define X1_API __attribute__((visibility("default")))
#else
#define X1_API
#endif

#define X1_RUNTIME_VERSION_MAJOR 1
#define X1_RUNTIME_VERSION_MINOR 2
#define X1_MAX_DIMS 8
#define X1_KERNEL_NAME_LEN 32
#define X1_MAP_ALIGNMENT 64 /* x1_mem_map needs host memory aligned to this */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum x1_status {
    X1_SUCCESS = 0,
    X1_ERR_INVALID_VALUE = 1,
    X1_ERR_OUT_OF_MEMORY = 2,
    X1_ERR_UNSUPPORTED = 3,      /* configuration the NPU cannot execute */
    X1_ERR_DEVICE = 4,           /* hardware fault; the launch did not complete */
    X1_ERR_NOT_INITIALIZED = 5,
    X1_ERR_INVALID_ADDRESS = 6,
    X1_ERR_DATA = 7              /* data-dependent failure (e.g. index out of range) */
} x1_status_t;

typedef enum x1_dtype {
    X1_FLOAT32 = 0,
    X1_FLOAT16 = 1,
    X1_INT8 = 2,
    X1_UINT8 = 3,
    X1_INT32 = 4,
    X1_INT64 = 5,
    X1_BOOL = 6
} x1_dtype_t;

typedef uint64_t x1_devptr_t;

typedef struct x1_tensor {
    x1_devptr_t data;            /* address of element [0, ..., 0] */
    int32_t ndim;
    int32_t dtype;               /* x1_dtype_t */
    int64_t shape[X1_MAX_DIMS];
    int64_t strides[X1_MAX_DIMS]; /* in elements */
} x1_tensor_t;

typedef struct x1_counters {
    uint64_t h2d_bytes;
    uint64_t h2d_calls;          /* a batched copy counts as one call */
    uint64_t h2d_batch_calls;
    uint64_t d2h_bytes;
    uint64_t d2h_calls;
    uint64_t d2d_bytes;
    uint64_t d2d_calls;
    uint64_t mapped_bytes;       /* total ever mapped */
    uint64_t map_calls;
    uint64_t unmap_calls;
    uint64_t live_bytes;         /* device memory in use (256-byte granules) */
    uint64_t peak_bytes;
    uint64_t live_mapped_bytes;
    uint64_t alloc_calls;
    uint64_t free_calls;
    uint64_t kernel_launches;
} x1_counters_t;

typedef struct x1_kernel_counter {
    char name[X1_KERNEL_NAME_LEN];
    uint64_t launches;
} x1_kernel_counter_t;

/* ---- runtime ---- */
X1_API x1_status_t x1_init(uint64_t capacity_bytes); /* 0: X1SIM_CAPACITY or 4 GiB */
X1_API x1_status_t x1_shutdown(void);
X1_API const char *x1_get_last_error(void);
X1_API const char *x1_status_string(x1_status_t status);
X1_API x1_status_t x1_synchronize(void);

/* ---- memory ---- */
X1_API x1_status_t x1_malloc(x1_devptr_t *ptr, size_t nbytes);
X1_API x1_status_t x1_free(x1_devptr_t ptr);
X1_API x1_status_t x1_mem_get_info(uint64_t *free_bytes, uint64_t *total_bytes);
X1_API x1_status_t x1_memcpy_h2d(x1_devptr_t dst, const void *src, size_t nbytes);
X1_API x1_status_t x1_memcpy_d2h(void *dst, x1_devptr_t src, size_t nbytes);
X1_API x1_status_t x1_memcpy_d2d(x1_devptr_t dst, x1_devptr_t src, size_t nbytes);
/* count copies in one submission; all entries are checked before any byte moves */
X1_API x1_status_t x1_memcpy_h2d_batch(const x1_devptr_t *dst, const void *const *src,
                                       const size_t *nbytes, size_t count);
/* zero-copy: host memory becomes addressable by kernels, no bytes move */
X1_API x1_status_t x1_mem_map(const void *host_ptr, size_t nbytes, x1_devptr_t *ptr);
X1_API x1_status_t x1_mem_unmap(x1_devptr_t ptr);

/* ---- profiling / debug ---- */
X1_API x1_status_t x1_get_counters(x1_counters_t *counters);
X1_API x1_status_t x1_reset_counters(void);
X1_API x1_status_t x1_get_kernel_counters(x1_kernel_counter_t *counters, int32_t capacity,
                                          int32_t *count);
X1_API x1_status_t x1_debug_set_faults(const char *spec); /* same syntax as X1SIM_FAULTS */

/* ---- elementwise (float32, float16; add, sub, mul, maximum, minimum, neg and
 * abs also int32 and int64, exact) ---- */
X1_API x1_status_t x1_add(const x1_tensor_t *self, const x1_tensor_t *other, double alpha,
                          x1_tensor_t *out);
X1_API x1_status_t x1_sub(const x1_tensor_t *self, const x1_tensor_t *other, double alpha,
                          x1_tensor_t *out);
X1_API x1_status_t x1_mul(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out);
X1_API x1_status_t x1_div(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out);
/* out = self / other, other a scalar from the host (no device constant needed) */
X1_API x1_status_t x1_div_scalar(const x1_tensor_t *self, double other, x1_tensor_t *out);
X1_API x1_status_t x1_pow(const x1_tensor_t *self, const x1_tensor_t *exponent, x1_tensor_t *out);
X1_API x1_status_t x1_pow_scalar(const x1_tensor_t *self, double exponent, x1_tensor_t *out);
/* out = self ** exponent with a host scalar base, elementwise */
X1_API x1_status_t x1_scalar_pow(double self, const x1_tensor_t *exponent, x1_tensor_t *out);
X1_API x1_status_t x1_maximum(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out);
X1_API x1_status_t x1_minimum(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out);
X1_API x1_status_t x1_relu(const x1_tensor_t *self, x1_tensor_t *out);
/* approximate: "none" or "tanh" */
X1_API x1_status_t x1_gelu(const x1_tensor_t *self, const char *approximate, x1_tensor_t *out);
X1_API x1_status_t x1_silu(const x1_tensor_t *self, x1_tensor_t *out);
X1_API x1_status_t x1_sigmoid(const x1_tensor_t *self, x1_tensor_t *out);
X1_API x1_status_t x1_tanh(const x1_tensor_t *self, x1_tensor_t *out);
X1_API x1_status_t x1_exp(const x1_tensor_t *self, x1_tensor_t *out);
X1_API x1_status_t x1_log(const x1_tensor_t *self, x1_tensor_t *out);
X1_API x1_status_t x1_neg(const x1_tensor_t *self, x1_tensor_t *out);
X1_API x1_status_t x1_abs(const x1_tensor_t *self, x1_tensor_t *out);
X1_API x1_status_t x1_sqrt(const x1_tensor_t *self, x1_tensor_t *out);
X1_API x1_status_t x1_rsqrt(const x1_tensor_t *self, x1_tensor_t *out);
X1_API x1_status_t x1_reciprocal(const x1_tensor_t *self, x1_tensor_t *out);
X1_API x1_status_t x1_cos(const x1_tensor_t *self, x1_tensor_t *out);
X1_API x1_status_t x1_sin(const x1_tensor_t *self, x1_tensor_t *out);
/* out = self + value * tensor1 * tensor2 (addcmul) or self + value * tensor1 / tensor2 (addcdiv) */
X1_API x1_status_t x1_addcmul(const x1_tensor_t *self, const x1_tensor_t *tensor1,
                              const x1_tensor_t *tensor2, double value, x1_tensor_t *out);
X1_API x1_status_t x1_addcdiv(const x1_tensor_t *self, const x1_tensor_t *tensor1,
                              const x1_tensor_t *tensor2, double value, x1_tensor_t *out);
/* out = self + weight * (end - self) */
X1_API x1_status_t x1_lerp(const x1_tensor_t *self, const x1_tensor_t *end, double weight,
                           x1_tensor_t *out);

/* ---- comparisons: self and other of one dtype (float32, float16, int32, int64, bool), out bool */
X1_API x1_status_t x1_eq(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out);
X1_API x1_status_t x1_ne(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out);
X1_API x1_status_t x1_lt(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out);
X1_API x1_status_t x1_le(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out);
X1_API x1_status_t x1_gt(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out);
X1_API x1_status_t x1_ge(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out);

/* ---- bitwise: bool (logical), int8, uint8, int32, int64 */
X1_API x1_status_t x1_bitwise_and(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out);
X1_API x1_status_t x1_bitwise_or(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out);
X1_API x1_status_t x1_bitwise_xor(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out);
X1_API x1_status_t x1_bitwise_not(const x1_tensor_t *self, x1_tensor_t *out);

/* ---- selection: condition/mask bool; self, other, out of any one x1 dtype */
X1_API x1_status_t x1_where(const x1_tensor_t *condition, const x1_tensor_t *self,
                            const x1_tensor_t *other, x1_tensor_t *out);
X1_API x1_status_t x1_masked_fill(const x1_tensor_t *self, const x1_tensor_t *mask, double value,
                                  x1_tensor_t *out);

/* ---- activation gradients: out = grad_output * f'(self), or from the forward's output */
X1_API x1_status_t x1_gelu_backward(const x1_tensor_t *grad_output, const x1_tensor_t *self,
                                    const char *approximate, x1_tensor_t *out);
/* out = self <= threshold ? 0 : grad_output (ReLU's gradient with threshold 0) */
X1_API x1_status_t x1_threshold_backward(const x1_tensor_t *grad_output, const x1_tensor_t *self,
                                         double threshold, x1_tensor_t *out);
X1_API x1_status_t x1_sigmoid_backward(const x1_tensor_t *grad_output, const x1_tensor_t *output,
                                       x1_tensor_t *out);
/* out = grad_output * mask * scale (mask bool: dropout's gradient) */
X1_API x1_status_t x1_native_dropout_backward(const x1_tensor_t *grad_output, const x1_tensor_t *mask,
                                              double scale, x1_tensor_t *out);
X1_API x1_status_t x1_tanh_backward(const x1_tensor_t *grad_output, const x1_tensor_t *output,
                                    x1_tensor_t *out);

/* ---- matrix (float32, float16) ---- */
X1_API x1_status_t x1_mm(const x1_tensor_t *self, const x1_tensor_t *mat2, x1_tensor_t *out);
X1_API x1_status_t x1_bmm(const x1_tensor_t *self, const x1_tensor_t *mat2, x1_tensor_t *out);
/* out = beta * self + alpha * mat1 @ mat2; self expanded to out's shape */
X1_API x1_status_t x1_addmm(const x1_tensor_t *self, const x1_tensor_t *mat1,
                            const x1_tensor_t *mat2, double beta, double alpha, x1_tensor_t *out);
/* int8 GEMM: uint8 operands with zero point 128, int32 result:
 * out[i,j] = sum_k (self[i,k] - 128) * (mat2[k,j] - 128) */
X1_API x1_status_t x1_gemm_u8(const x1_tensor_t *self, const x1_tensor_t *mat2, x1_tensor_t *out);
/* int8 -> uint8 with zero point 128 (dst = src + 128), for x1_gemm_u8 operands */
X1_API x1_status_t x1_s8_to_u8(const x1_tensor_t *src, x1_tensor_t *dst);

/* ---- convolution and pooling: NHWC only ----
 * input  [N, H, W, C] contiguous;  weight [O, KH, KW, C/groups] contiguous (OHWI)
 * out    [N, OH, OW, O] (any strides)
 * stride in {1,2,4}, padding in {0,1,2}, groups in {1,2,4}, dilation 1.
 * Revision 1 silicon runs float16 only; revision 2 adds float32. */
X1_API x1_status_t x1_conv2d(const x1_tensor_t *input, const x1_tensor_t *weight,
                             const x1_tensor_t *bias, const int64_t *stride,
                             const int64_t *padding, const int64_t *dilation, int64_t groups,
                             x1_tensor_t *out);
/* stride_len 0 means stride = kernel_size; indices may be NULL (flat h*W+w per plane) */
X1_API x1_status_t x1_max_pool2d(const x1_tensor_t *self, const int64_t *kernel_size,
                                 const int64_t *stride, int64_t stride_len,
                                 const int64_t *padding, const int64_t *dilation, bool ceil_mode,
                                 x1_tensor_t *out, x1_tensor_t *indices);
/* divisor_override 0 means none */
X1_API x1_status_t x1_avg_pool2d(const x1_tensor_t *self, const int64_t *kernel_size,
                                 const int64_t *stride, int64_t stride_len,
                                 const int64_t *padding, bool ceil_mode, bool count_include_pad,
                                 int64_t divisor_override, x1_tensor_t *out);
X1_API x1_status_t x1_adaptive_avg_pool2d(const x1_tensor_t *self, const int64_t *output_size,
                                          x1_tensor_t *out);

/* Gradients of x1_conv2d, same layouts and limits (grad_output, input and
 * weight contiguous NHWC / OHWI).  output_mask[3]: nonzero to compute
 * grad_input, grad_weight, grad_bias (one not asked for may be NULL). */
X1_API x1_status_t x1_conv2d_backward(const x1_tensor_t *grad_output, const x1_tensor_t *input,
                                      const x1_tensor_t *weight, const int64_t *stride,
                                      const int64_t *padding, const int64_t *dilation, int64_t groups,
                                      const int64_t *output_mask, x1_tensor_t *grad_input,
                                      x1_tensor_t *grad_weight, x1_tensor_t *grad_bias);
/* pooling gradients, NHWC: grad_output (and indices) contiguous, out [N, H, W, C] any strides */
X1_API x1_status_t x1_max_pool2d_backward(const x1_tensor_t *grad_output, const x1_tensor_t *indices,
                                          x1_tensor_t *out);
X1_API x1_status_t x1_avg_pool2d_backward(const x1_tensor_t *grad_output, const int64_t *kernel_size,
                                          const int64_t *stride, int64_t stride_len,
                                          const int64_t *padding, bool ceil_mode,
                                          bool count_include_pad, int64_t divisor_override,
                                          x1_tensor_t *out);
X1_API x1_status_t x1_adaptive_avg_pool2d_backward(const x1_tensor_t *grad_output, x1_tensor_t *out);

/* ---- normalization, reduction, misc ---- */
/* inference batch norm over dim 1 of [N, C, ...]; weight and bias may be NULL */
X1_API x1_status_t x1_batch_norm(const x1_tensor_t *input, const x1_tensor_t *weight,
                                 const x1_tensor_t *bias, const x1_tensor_t *running_mean,
                                 const x1_tensor_t *running_var, double eps, x1_tensor_t *out);
/* mean and rstd may be NULL */
X1_API x1_status_t x1_layer_norm(const x1_tensor_t *input, const int64_t *normalized_shape,
                                 int64_t normalized_shape_len, const x1_tensor_t *weight,
                                 const x1_tensor_t *bias, double eps, x1_tensor_t *out,
                                 x1_tensor_t *mean, x1_tensor_t *rstd);
/* dim_len 0 reduces every dim; x1_sum also takes int8, uint8, int32, int64
 * and bool into an int64 out */
X1_API x1_status_t x1_sum(const x1_tensor_t *self, const int64_t *dim, int64_t dim_len,
                          bool keepdim, x1_tensor_t *out);
X1_API x1_status_t x1_mean(const x1_tensor_t *self, const int64_t *dim, int64_t dim_len,
                           bool keepdim, x1_tensor_t *out);
/* log(sum(exp(self))) over dim, computed stably (shifted by the max) */
X1_API x1_status_t x1_logsumexp(const x1_tensor_t *self, const int64_t *dim, int64_t dim_len,
                                bool keepdim, x1_tensor_t *out);
/* variance (divided by count - correction) and mean over dim (dim_len 0: every dim) */
X1_API x1_status_t x1_var_mean(const x1_tensor_t *self, const int64_t *dim, int64_t dim_len,
                               double correction, bool keepdim, x1_tensor_t *var, x1_tensor_t *mean);
/* gradients of x1_layer_norm; output_mask[3]: nonzero to compute grad_input,
 * grad_weight, grad_bias (weight may be NULL when the last two are not asked for) */
X1_API x1_status_t x1_layer_norm_backward(const x1_tensor_t *grad_out, const x1_tensor_t *input,
                                          const int64_t *normalized_shape, int64_t normalized_shape_len,
                                          const x1_tensor_t *mean, const x1_tensor_t *rstd,
                                          const x1_tensor_t *weight, const int64_t *output_mask,
                                          x1_tensor_t *grad_input, x1_tensor_t *grad_weight,
                                          x1_tensor_t *grad_bias);
/* int64/int32 indices, range-checked (X1_ERR_DATA) */
X1_API x1_status_t x1_embedding(const x1_tensor_t *weight, const x1_tensor_t *indices,
                                x1_tensor_t *out);
/* out [num_weights, D] = rows of grad_output summed by index; padding_idx < 0: none */
X1_API x1_status_t x1_embedding_backward(const x1_tensor_t *grad_output, const x1_tensor_t *indices,
                                         int64_t num_weights, int64_t padding_idx,
                                         bool scale_grad_by_freq, x1_tensor_t *out);
/* negative log likelihood of log-probabilities self [N, C] (or [C]); target
 * int64/int32; weight may be NULL; reduction 0 none, 1 mean, 2 sum.  A target
 * outside [0, C) other than ignore_index is X1_ERR_DATA. */
X1_API x1_status_t x1_nll_loss_forward(const x1_tensor_t *self, const x1_tensor_t *target,
                                       const x1_tensor_t *weight, int64_t reduction,
                                       int64_t ignore_index, x1_tensor_t *output,
                                       x1_tensor_t *total_weight);
X1_API x1_status_t x1_nll_loss_backward(const x1_tensor_t *grad_output, const x1_tensor_t *self,
                                        const x1_tensor_t *target, const x1_tensor_t *weight,
                                        int64_t reduction, int64_t ignore_index,
                                        const x1_tensor_t *total_weight, x1_tensor_t *out);
/* strided copy with dtype conversion (all dtypes) */
X1_API x1_status_t x1_copy(const x1_tensor_t *src, x1_tensor_t *dst);
X1_API x1_status_t x1_fill(x1_tensor_t *self, double value);
/* out[i] = start + i * step; out 1-D with exactly ceil((end - start) / step)
 * elements, float32, float16, int32 or int64 */
X1_API x1_status_t x1_arange(double start, double end, double step, x1_tensor_t *out);
/* out = zeros with grad_output copied into out.select(dim, index) (select's gradient) */
X1_API x1_status_t x1_select_backward(const x1_tensor_t *grad_output, int64_t dim, int64_t index,
                                      x1_tensor_t *out);
/* out = tensors concatenated along dim (1-D empty tensors are skipped); one dtype */
X1_API x1_status_t x1_cat(const x1_tensor_t *const *tensors, int32_t tensors_len, int64_t dim,
                          x1_tensor_t *out);

/* ---- comparisons with a host scalar: self of any x1 dtype, out bool.  PyTorch's
 * promotion: a floating self compares in its own dtype (the scalar rounded to
 * it), an integer or bool self exactly against an integral scalar and in
 * float32 against any other. */
X1_API x1_status_t x1_eq_scalar(const x1_tensor_t *self, double other, x1_tensor_t *out);
X1_API x1_status_t x1_ne_scalar(const x1_tensor_t *self, double other, x1_tensor_t *out);
X1_API x1_status_t x1_lt_scalar(const x1_tensor_t *self, double other, x1_tensor_t *out);
X1_API x1_status_t x1_le_scalar(const x1_tensor_t *self, double other, x1_tensor_t *out);
X1_API x1_status_t x1_gt_scalar(const x1_tensor_t *self, double other, x1_tensor_t *out);
X1_API x1_status_t x1_ge_scalar(const x1_tensor_t *self, double other, x1_tensor_t *out);

/* ---- logical: self and other of any x1 dtypes (nonzero, NaN too, is true), out bool */
X1_API x1_status_t x1_logical_and(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out);
X1_API x1_status_t x1_logical_or(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out);
X1_API x1_status_t x1_logical_xor(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out);
X1_API x1_status_t x1_logical_not(const x1_tensor_t *self, x1_tensor_t *out);

/* ---- reductions: any/all of any x1 dtype into bool (uint8 for uint8), over
 * dim (dim_len 0: every dim) or one dim; max/min along a dim with the first
 * position of the extreme (NaN is the extreme), int64 indices;
 * x1_sum of int8/uint8/int32/int64/bool into int64 (wrapping) */
X1_API x1_status_t x1_any(const x1_tensor_t *self, const int64_t *dim, int64_t dim_len, bool keepdim,
                          x1_tensor_t *out);
X1_API x1_status_t x1_all(const x1_tensor_t *self, const int64_t *dim, int64_t dim_len, bool keepdim,
                          x1_tensor_t *out);
X1_API x1_status_t x1_any_dim(const x1_tensor_t *self, int64_t dim, bool keepdim, x1_tensor_t *out);
X1_API x1_status_t x1_all_dim(const x1_tensor_t *self, int64_t dim, bool keepdim, x1_tensor_t *out);
X1_API x1_status_t x1_max_dim(const x1_tensor_t *self, int64_t dim, bool keepdim, x1_tensor_t *values,
                              x1_tensor_t *indices);
X1_API x1_status_t x1_min_dim(const x1_tensor_t *self, int64_t dim, bool keepdim, x1_tensor_t *values,
                              x1_tensor_t *indices);
X1_API x1_status_t x1_argmax(const x1_tensor_t *self, int64_t dim, bool keepdim, x1_tensor_t *out);
X1_API x1_status_t x1_argmin(const x1_tensor_t *self, int64_t dim, bool keepdim, x1_tensor_t *out);
/* the k largest (smallest) along dim, sorted, ties by position, NaN largest; int64 indices */
X1_API x1_status_t x1_topk(const x1_tensor_t *self, int64_t k, int64_t dim, bool largest, x1_tensor_t *values,
                           x1_tensor_t *indices);
/* running sums along dim: float32/float16 in their dtype, integers and bool into int64 */
X1_API x1_status_t x1_cumsum(const x1_tensor_t *self, int64_t dim, x1_tensor_t *out);

/* ---- pointwise with optional bounds: out = min(max(self, min), max); min and
 * max (expanded to out's shape) may be NULL, not both; float32, float16,
 * int32, int64; NaN in any operand gives NaN */
X1_API x1_status_t x1_clamp(const x1_tensor_t *self, const x1_tensor_t *min, const x1_tensor_t *max,
                            x1_tensor_t *out);
/* out[i] = elements[i] is among test_elements (!= invert); out bool */
X1_API x1_status_t x1_isin(const x1_tensor_t *elements, const x1_tensor_t *test_elements, bool invert,
                           x1_tensor_t *out);

/* ---- indexing: index tensors int64 or int32, range-checked before anything
 * is written (X1_ERR_DATA); data of any x1 dtype */
X1_API x1_status_t x1_gather(const x1_tensor_t *self, int64_t dim, const x1_tensor_t *index, x1_tensor_t *out);
/* out = self, then out[..index..] = src (a 0-d src: one value) or += src */
X1_API x1_status_t x1_scatter(const x1_tensor_t *self, int64_t dim, const x1_tensor_t *index,
                              const x1_tensor_t *src, x1_tensor_t *out);
X1_API x1_status_t x1_scatter_add(const x1_tensor_t *self, int64_t dim, const x1_tensor_t *index,
                                  const x1_tensor_t *src, x1_tensor_t *out);
X1_API x1_status_t x1_index_select(const x1_tensor_t *self, int64_t dim, const x1_tensor_t *index,
                                   x1_tensor_t *out);
/* out = self, then out.select(dim, index[i]) += alpha * source.select(dim, i) */
X1_API x1_status_t x1_index_add(const x1_tensor_t *self, int64_t dim, const x1_tensor_t *index,
                                const x1_tensor_t *source, double alpha, x1_tensor_t *out);
/* self[indices[0], ..., indices[n-1]]: index tensors on the leading dims,
 * broadcast together, negative values from the end */
X1_API x1_status_t x1_index(const x1_tensor_t *self, const x1_tensor_t *const *indices, int32_t indices_len,
                            x1_tensor_t *out);
/* out = self, then out[indices] = values (broadcast), or += with accumulate */
X1_API x1_status_t x1_index_put(const x1_tensor_t *self, const x1_tensor_t *const *indices, int32_t indices_len,
                                const x1_tensor_t *values, bool accumulate, x1_tensor_t *out);

/* ---- shaping: any x1 dtype */
/* the lower (tril) or upper (triu) triangle of the last two dims, from `diagonal` */
X1_API x1_status_t x1_tril(const x1_tensor_t *self, int64_t diagonal, x1_tensor_t *out);
X1_API x1_status_t x1_triu(const x1_tensor_t *self, int64_t diagonal, x1_tensor_t *out);
/* pad[2i], pad[2i+1] elements of `value` before / after dim ndim-1-i (negative: cropped) */
X1_API x1_status_t x1_constant_pad_nd(const x1_tensor_t *self, const int64_t *pad, int64_t pad_len, double value,
                                      x1_tensor_t *out);
/* nearest upsampling of [N, C, H, W] to out's size; scales_h / scales_w > 0 as
 * PyTorch's scale factors, 0 = from the sizes; and its gradient (float32, float16) */
X1_API x1_status_t x1_upsample_nearest2d(const x1_tensor_t *self, double scales_h, double scales_w,
                                         x1_tensor_t *out);
X1_API x1_status_t x1_upsample_nearest2d_backward(const x1_tensor_t *grad_output, double scales_h, double scales_w,
                                                  x1_tensor_t *out);
/* out = zeros with grad_output in out[start:end:step] along dim (slice's gradient) */
X1_API x1_status_t x1_slice_backward(const x1_tensor_t *grad_output, int64_t dim, int64_t start, int64_t end,
                                     int64_t step, x1_tensor_t *out);

/* ---- mixed precision (GradScaler): self (the scale) and found_inf float32
 * with one element, growth_tracker int32 with one element; out is self */
X1_API x1_status_t x1_amp_update_scale(const x1_tensor_t *self, x1_tensor_t *growth_tracker,
                                       const x1_tensor_t *found_inf, double scale_growth_factor,
                                       double scale_backoff_factor, int64_t growth_interval, x1_tensor_t *out);
/* every grads[i] *= inv_scale (float32, float16); found_inf (float32, one
 * element) set to 1 if any element of any of them is inf or NaN */
X1_API x1_status_t x1_amp_unscale(x1_tensor_t *const *grads, int32_t grads_len, x1_tensor_t *found_inf,
                                  const x1_tensor_t *inv_scale);

/* ---- fused optimizers: PyTorch's _fused_adam_ / _fused_adamw_
 * (decoupled_weight_decay) and _fused_sgd_ over params_len parameters, every
 * list written in place; max_exp_avg_sqs NULL without amsgrad,
 * momentum_buffers NULL without momentum; state_steps one float32 element
 * each (already incremented); grad_scale and found_inf NULL or one float32
 * element (the gradients are divided by grad_scale and written back;
 * found_inf == 1 skips the step).  float32 and float16 tensors. */
X1_API x1_status_t x1_fused_adam(x1_tensor_t *const *params, x1_tensor_t *const *grads, x1_tensor_t *const *exp_avgs,
                                 x1_tensor_t *const *exp_avg_sqs, x1_tensor_t *const *max_exp_avg_sqs,
                                 const x1_tensor_t *const *state_steps, int32_t params_len, double lr, double beta1,
                                 double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,
                                 bool decoupled_weight_decay, const x1_tensor_t *grad_scale,
                                 const x1_tensor_t *found_inf);
X1_API x1_status_t x1_fused_sgd(x1_tensor_t *const *params, x1_tensor_t *const *grads,
                                x1_tensor_t *const *momentum_buffers, int32_t params_len, double weight_decay,
                                double momentum, double lr, double dampening, bool nesterov, bool maximize,
                                bool is_first_step, const x1_tensor_t *grad_scale, const x1_tensor_t *found_inf);

/* ---- random numbers: counter-based (Philox4x32-10, the engine of PyTorch's
 * CUDA generator).  The NPU keeps no generator state: each call is given the
 * caller's seed and offset, reads the words of the stream `seed` from word
 * `offset` (a multiple of 4) on, and consumes
 *     x1_rng_words(numel, w) = 4 * ceil(w * numel / 4)
 * words, w = 1 (2 for x1_random over a range wider than 2^32): the caller
 * adds that to its offset.  Element i (row-major order) takes words
 * offset + w*i ...; the same (seed, offset) gives the same values on every
 * chip of every vendor whose SDK follows this scheme (docs/simulators.md). */
X1_API x1_status_t x1_rng_words(int64_t numel, int32_t words_per_element, uint64_t *words);
/* self = uniform in [from, to) (float32, float16) */
X1_API x1_status_t x1_uniform(x1_tensor_t *self, double from, double to, uint64_t seed, uint64_t offset);
/* self = mean + std * N(0, 1) (Box-Muller on word pairs; float32, float16) */
X1_API x1_status_t x1_normal(x1_tensor_t *self, double mean, double std, uint64_t seed, uint64_t offset);
/* self = 1 with probability p, else 0 (any x1 dtype) */
X1_API x1_status_t x1_bernoulli(x1_tensor_t *self, double p, uint64_t seed, uint64_t offset);
/* self = integers uniform in [from, to) (any x1 dtype that holds them) */
X1_API x1_status_t x1_random(x1_tensor_t *self, int64_t from, int64_t to, uint64_t seed, uint64_t offset);
/* output = input * mask / (1 - p), mask (bool) true with probability 1 - p;
 * outside training output = input, mask all true and no word is read */
X1_API x1_status_t x1_native_dropout(const x1_tensor_t *input, double p, bool train, uint64_t seed,
                                     uint64_t offset, x1_tensor_t *output, x1_tensor_t *mask);

/* ---- softmax family ----
 * Generic softmax through the vector unit: slower than a fused kernel, but it
 * exists (the NPU has no dedicated softmax).  The safe variant gives zeros for
 * a row that is entirely -inf (attention with fully masked rows). */
X1_API x1_status_t custom_softmax_x1(const x1_tensor_t *self, int64_t dim, x1_tensor_t *out);
X1_API x1_status_t custom_safe_softmax_x1(const x1_tensor_t *self, int64_t dim, x1_tensor_t *out);
/* fused log-softmax (the classifier's loss) and the gradients from the forward's output */
X1_API x1_status_t x1_log_softmax(const x1_tensor_t *self, int64_t dim, x1_tensor_t *out);
X1_API x1_status_t x1_softmax_backward(const x1_tensor_t *grad_output, const x1_tensor_t *output,
                                       int64_t dim, x1_tensor_t *out);
X1_API x1_status_t x1_log_softmax_backward(const x1_tensor_t *grad_output, const x1_tensor_t *output,
                                           int64_t dim, x1_tensor_t *out);

/* ---- profiling: device time ----
 * The device time of the last kernel or copy the calling thread ran (from its
 * launch to the end of its call), and the total of every kernel and copy
 * since x1_init / x1_reset_counters, in nanoseconds. */
X1_API x1_status_t x1_get_last_kernel_ns(uint64_t *ns);
X1_API x1_status_t x1_get_kernel_ns_total(uint64_t *ns);
/* ---- debug: the named kernel (a name from x1_get_kernel_counters, "" = off)
 * adds 1 to the first element of its output; also X1SIM_CORRUPT=<kernel> at init */
X1_API x1_status_t x1_debug_set_corrupt(const char *kernel);
X1_API x1_status_t x1_debug_get_corruptions(uint64_t *count);

#ifdef __cplusplus
}
#endif

#endif /* X1_RUNTIME_H */
