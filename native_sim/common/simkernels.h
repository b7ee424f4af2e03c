/*
 * Kernels of the simulated chips.  They take resolved views (see simcore.h).
 * Generic checks (shape agreement, dtype agreement) happen here and report
 * through sim_fail; chip-specific limits (which dtypes, which strides) are
 * checked by each chip's runtime before it calls in.
 */
#ifndef FLSIM_SIMKERNELS_H
#define FLSIM_SIMKERNELS_H

#include "simcore.h"

typedef enum {
    /* arithmetic: operands and result share one dtype */
    SIMK_ADD, SIMK_SUB, SIMK_MUL, SIMK_DIV, SIMK_POW, SIMK_MAXIMUM, SIMK_MINIMUM,
    /* comparisons: operands share one dtype, the result is bool */
    SIMK_EQ, SIMK_NE, SIMK_LT, SIMK_LE, SIMK_GT, SIMK_GE,
    /* bitwise (logical on bool): bool or integer operands and result */
    SIMK_BITAND, SIMK_BITOR, SIMK_BITXOR
} simk_binop;
typedef enum {
    SIMK_RELU, SIMK_GELU, SIMK_GELU_TANH, SIMK_SIGMOID, SIMK_TANH, SIMK_EXP, SIMK_NEG,
    SIMK_SQRT, SIMK_RSQRT, SIMK_LOG, SIMK_COS, SIMK_SIN, SIMK_ABS, SIMK_RECIPROCAL, SIMK_SILU,
    SIMK_BITNOT
} simk_unop;
/* gradient of a pointwise op: from the op's input x, or (the *_Y ones) from its output y */
typedef enum {
    SIMK_GRAD_GELU, SIMK_GRAD_GELU_TANH, SIMK_GRAD_THRESHOLD, SIMK_GRAD_SIGMOID_Y,
    SIMK_GRAD_TANH_Y
} simk_gradop;
/* logical ops: any dtypes in (nonzero is true, NaN too), bool out */
typedef enum { SIMK_LOGICAL_AND, SIMK_LOGICAL_OR, SIMK_LOGICAL_XOR, SIMK_LOGICAL_NOT } simk_logop;
/* softmax flags */
#define SIMK_SOFTMAX_LOG 1u     /* log-softmax */
#define SIMK_SOFTMAX_SAFE 2u    /* a row that is entirely -inf gives zeros, not NaN */
#define SIMK_SOFTMAX_GENERIC 4u /* the vendor's generic path: recomputes exp and divides */

/* Functions taking `kernel` validate, then count the launch under that name
 * (sim_launch, which may inject a fault), then compute. */

/* shape/dtype checks shared by the chips */
/* advances a row-major multi-index over shape[0..nd); 0 once past the end */
static inline int sim_next_index(int64_t *idx, const int64_t *shape, int nd) {
    for (int d = nd - 1; d >= 0; d--) {
        if (++idx[d] < shape[d]) return 1;
        idx[d] = 0;
    }
    return 0;
}

SIM_HIDDEN sim_status simk_check_same(const char *fn, const char *what, const sim_view *a,
                                      const sim_view *ref);
SIM_HIDDEN sim_status simk_check_dtype_in(const char *fn, const char *what, const sim_view *v,
                                          const sim_dtype *allowed, int n);

/* Elementwise.  Every tensor operand has the output's shape (broadcast inputs
 * come expanded with stride 0).  Floating dtypes compute in float and store
 * rounded once; integer dtypes compute exactly in int64 (wrapping like C
 * unsigned arithmetic) and bool as 0/1.  Operands may alias the output. */
SIM_HIDDEN sim_status simk_binary(const char *fn, const char *kernel, simk_binop op, const sim_view *a,
                                  const sim_view *b, double alpha, const sim_view *out);
SIM_HIDDEN sim_status simk_unary(const char *fn, const char *kernel, simk_unop op, const sim_view *a,
                                 const sim_view *out);
/* out = a ** exponent (floating dtypes; PyTorch's exact cases for 0.5, 2, 3, -0.5, -1, -2) */
SIM_HIDDEN sim_status simk_pow_scalar(const char *fn, const char *kernel, const sim_view *a,
                                      double exponent, const sim_view *out);
/* out = base ** exponent, elementwise over the exponent tensor (floating dtypes; PyTorch's
 * pow(Scalar, Tensor), as in capturable Adam's bias corrections) */
SIM_HIDDEN sim_status simk_scalar_pow(const char *fn, const char *kernel, double base, const sim_view *exponent,
                                      const sim_view *out);
/* out = a / divisor (floating dtypes; a true division, as PyTorch's, not a reciprocal multiply) */
SIM_HIDDEN sim_status simk_div_scalar(const char *fn, const char *kernel, const sim_view *a, double divisor,
                                      const sim_view *out);
/* out = self + value * t1 * t2 (div = 0) or self + value * t1 / t2 (div = 1) */
SIM_HIDDEN sim_status simk_addc(const char *fn, const char *kernel, int div, const sim_view *self,
                                const sim_view *t1, const sim_view *t2, double value,
                                const sim_view *out);
/* out = self + weight * (end - self), PyTorch's two-sided formula */
SIM_HIDDEN sim_status simk_lerp(const char *fn, const char *kernel, const sim_view *self,
                                const sim_view *end, double weight, const sim_view *out);
/* out = cond ? a : b (cond bool, any dtype for a, b, out) */
SIM_HIDDEN sim_status simk_where(const char *fn, const char *kernel, const sim_view *cond,
                                 const sim_view *a, const sim_view *b, const sim_view *out);
/* out = mask ? value : self (mask bool) */
SIM_HIDDEN sim_status simk_masked_fill(const char *fn, const char *kernel, const sim_view *self,
                                       const sim_view *mask, double value, const sim_view *out);
/* out = grad * d op/dx, floating dtypes; `param` is the threshold of THRESHOLD */
SIM_HIDDEN sim_status simk_pointwise_grad(const char *fn, const char *kernel, simk_gradop op,
                                          const sim_view *grad, const sim_view *x, double param,
                                          const sim_view *out);
/* out = grad * mask * scale, mask bool (dropout's gradient): one rounding of
 * the float product, as PyTorch's grad * mask * scale */
SIM_HIDDEN sim_status simk_mask_scale(const char *fn, const char *kernel, const sim_view *grad,
                                      const sim_view *mask, double scale, const sim_view *out);
/* out[i] = start + i * step (1-D out; its length must be the count PyTorch's arange gives) */
SIM_HIDDEN sim_status simk_arange(const char *fn, const char *kernel, double start, double end,
                                  double step, const sim_view *out);
/* out = zeros with grad copied into out.select(dim, index) (select's gradient) */
SIM_HIDDEN sim_status simk_select_backward(const char *fn, const char *kernel, const sim_view *grad, int64_t dim,
                                           int64_t index, const sim_view *out);
/* concatenation along dim; 1-D empty inputs are skipped, as in PyTorch */
SIM_HIDDEN sim_status simk_cat(const char *fn, const char *kernel, const sim_view *inputs, int n,
                               int64_t dim, const sim_view *out);

/* out[b] = beta*bias + alpha * a[b] @ m[b]; 2-D or 3-D (batched); bias may be absent */
SIM_HIDDEN sim_status simk_gemm(const char *fn, const char *kernel, const sim_view *a, const sim_view *m,
                                const sim_view *bias, double beta, double alpha,
                                const sim_view *out);
SIM_HIDDEN sim_status simk_gemm_u8(const char *fn, const char *kernel, const sim_view *a, const sim_view *m,
                                   const sim_view *out);
SIM_HIDDEN void simk_s8_to_u8(const sim_view *src, const sim_view *dst);

/* NHWC input [N,H,W,C], OHWI weight [O,KH,KW,C/g], out [N,OH,OW,O] */
SIM_HIDDEN sim_status simk_conv2d_nhwc(const char *fn, const char *kernel, const sim_view *in, const sim_view *w,
                                       const sim_view *bias, const int64_t *stride,
                                       const int64_t *padding, const int64_t *dilation,
                                       int64_t groups, const sim_view *out);
SIM_HIDDEN sim_status simk_max_pool2d_nhwc(const char *fn, const char *kernel, const sim_view *in, const int64_t *k,
                                           const int64_t *stride, const int64_t *pad,
                                           const int64_t *dil, const sim_view *out,
                                           const sim_view *indices);
SIM_HIDDEN sim_status simk_avg_pool2d_nhwc(const char *fn, const char *kernel, const sim_view *in, const int64_t *k,
                                           const int64_t *stride, const int64_t *pad,
                                           int count_include_pad, int64_t divisor_override,
                                           const sim_view *out);
SIM_HIDDEN sim_status simk_adaptive_avg_pool2d_nhwc(const char *fn, const char *kernel, const sim_view *in,
                                                    const sim_view *out);
/* Gradients of the NHWC convolution: dx [N,H,W,C], dw [O,KH,KW,C/g], db [O]; a
 * result whose view is absent (present == 0) is not computed. */
SIM_HIDDEN sim_status simk_conv2d_backward_nhwc(const char *fn, const char *kernel, const sim_view *dy,
                                                const sim_view *x, const sim_view *w,
                                                const int64_t *stride, const int64_t *padding,
                                                const int64_t *dilation, int64_t groups,
                                                const sim_view *dx, const sim_view *dw,
                                                const sim_view *db);
/* dx [N,H,W,C] from dy and the forward's indices (flat h*W+w per plane), both [N,OH,OW,C] */
SIM_HIDDEN sim_status simk_max_pool2d_backward_nhwc(const char *fn, const char *kernel, const sim_view *dy,
                                                    const sim_view *indices, const sim_view *dx);
SIM_HIDDEN sim_status simk_avg_pool2d_backward_nhwc(const char *fn, const char *kernel, const sim_view *dy,
                                                    const int64_t *k, const int64_t *stride,
                                                    const int64_t *pad, int count_include_pad,
                                                    int64_t divisor_override, const sim_view *dx);
SIM_HIDDEN sim_status simk_adaptive_avg_pool2d_backward_nhwc(const char *fn, const char *kernel,
                                                             const sim_view *dy, const sim_view *dx);
/* out shape of a pool along one dim, PyTorch's rule (ceil_mode included) */
SIM_HIDDEN int64_t simk_pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d,
                                 int ceil_mode);

SIM_HIDDEN sim_status simk_batch_norm_infer(const char *fn, const char *kernel, const sim_view *in, const sim_view *w,
                                            const sim_view *b, const sim_view *mean,
                                            const sim_view *var, double eps,
                                            const sim_view *out);
SIM_HIDDEN sim_status simk_layer_norm(const char *fn, const char *kernel, const sim_view *in, int64_t norm_ndim,
                                      const sim_view *w, const sim_view *b, double eps,
                                      const sim_view *out, const sim_view *mean,
                                      const sim_view *rstd);
/* The bitmask of the dims a reduction over `dims` (n == 0: every dim; negative
 * dims count from the end) removes from `in`, after checking out's shape
 * against keepdim. */
SIM_HIDDEN sim_status simk_reduce_dims(const char *fn, const sim_view *in, const int64_t *dims, int64_t n,
                                       int keepdim, const sim_view *out, uint32_t *mask);
/* sum (or mean) over the dims flagged in `reduce` (a bitmask over in->ndim) */
SIM_HIDDEN sim_status simk_reduce(const char *fn, const char *kernel, const sim_view *in, uint32_t reduce, int mean,
                                  const sim_view *out);
/* log(sum(exp(x))) over the flagged dims, shifted by the max (an infinite max counts as 0) */
SIM_HIDDEN sim_status simk_logsumexp(const char *fn, const char *kernel, const sim_view *in, uint32_t reduce,
                                     const sim_view *out);
/* variance (divided by count - correction) and mean over the flagged dims */
SIM_HIDDEN sim_status simk_var_mean(const char *fn, const char *kernel, const sim_view *in, uint32_t reduce,
                                    double correction, const sim_view *var, const sim_view *mean);
/* flags: SIMK_SOFTMAX_* */
SIM_HIDDEN sim_status simk_softmax(const char *fn, const char *kernel, const sim_view *in, int64_t dim,
                                   unsigned flags, const sim_view *out);
/* gradient of softmax (log = 0) or log-softmax (log = 1) from the forward's output y */
SIM_HIDDEN sim_status simk_softmax_backward(const char *fn, const char *kernel, const sim_view *grad,
                                            const sim_view *y, int64_t dim, int log,
                                            const sim_view *out);
/* negative log likelihood of log-probabilities in [N, C] (or [C]); reduction
 * 0 none, 1 mean, 2 sum; weight may be absent.  Targets outside [0, C) other
 * than ignore_index are a data error. */
SIM_HIDDEN sim_status simk_nll_loss(const char *fn, const char *kernel, const sim_view *in,
                                    const sim_view *target, const sim_view *weight, int64_t reduction,
                                    int64_t ignore_index, const sim_view *out,
                                    const sim_view *total_weight);
SIM_HIDDEN sim_status simk_nll_loss_backward(const char *fn, const char *kernel, const sim_view *grad,
                                             const sim_view *in, const sim_view *target,
                                             const sim_view *weight, int64_t reduction,
                                             int64_t ignore_index, const sim_view *total_weight,
                                             const sim_view *out);
SIM_HIDDEN sim_status simk_embedding(const char *fn, const char *kernel, const sim_view *weight,
                                     const sim_view *indices, const sim_view *out);
/* out [num_weights, D] = rows of grad [..., D] summed by index (padding_idx < 0: none) */
SIM_HIDDEN sim_status simk_embedding_backward(const char *fn, const char *kernel, const sim_view *grad,
                                              const sim_view *indices, int64_t num_weights,
                                              int64_t padding_idx, int scale_grad_by_freq,
                                              const sim_view *out);
/* gradients of layer_norm over the last norm_ndim dims; dx, dw, db may be absent */
SIM_HIDDEN sim_status simk_layer_norm_backward(const char *fn, const char *kernel, const sim_view *dy,
                                               const sim_view *x, int64_t norm_ndim,
                                               const sim_view *mean, const sim_view *rstd,
                                               const sim_view *w, const sim_view *dx,
                                               const sim_view *dw, const sim_view *db);
SIM_HIDDEN sim_status simk_copy(const char *fn, const char *kernel, const sim_view *src, const sim_view *dst);
SIM_HIDDEN void simk_fill(const sim_view *out, double value);

/* comparisons of a tensor with a host scalar (op SIMK_EQ..SIMK_GE), PyTorch's
 * promotion: a floating tensor compares in its own dtype (the scalar rounded
 * to it); an integer or bool tensor exactly against an integral scalar and
 * in float32 against any other.  out bool. */
SIM_HIDDEN sim_status simk_compare_scalar(const char *fn, const char *kernel, simk_binop op, const sim_view *a,
                                          double other, const sim_view *out);
/* out = a op b (b unused for SIMK_LOGICAL_NOT); any dtypes, out bool */
SIM_HIDDEN sim_status simk_logical(const char *fn, const char *kernel, simk_logop op, const sim_view *a,
                                   const sim_view *b, const sim_view *out);
/* out = min(max(self, lo), hi), a bound absent (present == 0) when not given;
 * floats propagate NaN from any operand (PyTorch's clamp); one dtype, not bool */
SIM_HIDDEN sim_status simk_clamp(const char *fn, const char *kernel, const sim_view *self, const sim_view *lo,
                                 const sim_view *hi, const sim_view *out);
/* int64 sum of an integer or bool tensor over the flagged dims (wrapping) */
SIM_HIDDEN sim_status simk_reduce_int(const char *fn, const char *kernel, const sim_view *in, uint32_t reduce,
                                      const sim_view *out);
/* any (all = 0) / all over the flagged dims; out bool (uint8 for a uint8 input) */
SIM_HIDDEN sim_status simk_any_all(const char *fn, const char *kernel, const sim_view *in, uint32_t reduce, int all,
                                   const sim_view *out);

/* ---- indexing and shaping (simindex.c): any dtype moved unchanged; index
 * tensors int64 or int32, range-checked before anything is written (a bad
 * index is SIM_E_DATA); outputs may share memory with inputs. */
/* out[..i..] = self[..index[..i..]..] along dim (out has index's shape) */
SIM_HIDDEN sim_status simk_gather(const char *fn, const char *kernel, const sim_view *self, int64_t dim,
                                  const sim_view *index, const sim_view *out);
/* out = self, then out[..index[i]..] = src[i] along dim (add: +=); a 0-d src is one value for all */
SIM_HIDDEN sim_status simk_scatter(const char *fn, const char *kernel, const sim_view *self, int64_t dim,
                                   const sim_view *index, const sim_view *src, int add, const sim_view *out);
SIM_HIDDEN sim_status simk_index_select(const char *fn, const char *kernel, const sim_view *self, int64_t dim,
                                        const sim_view *index, const sim_view *out);
/* out = self, then out.select(dim, index[i]) += alpha * source.select(dim, i) */
SIM_HIDDEN sim_status simk_index_add(const char *fn, const char *kernel, const sim_view *self, int64_t dim,
                                     const sim_view *index, const sim_view *source, double alpha,
                                     const sim_view *out);
/* advanced indexing by n index tensors on self's leading dims (broadcast
 * together; negative indices count from the end) */
SIM_HIDDEN sim_status simk_index(const char *fn, const char *kernel, const sim_view *self, const sim_view *indices,
                                 int n, const sim_view *out);
/* out = self, then out[indices] = values (accumulate: +=), values broadcast */
SIM_HIDDEN sim_status simk_index_put(const char *fn, const char *kernel, const sim_view *self,
                                     const sim_view *indices, int n, const sim_view *values, int accumulate,
                                     const sim_view *out);
/* the k largest (smallest) along dim, sorted, ties by position, NaN largest */
SIM_HIDDEN sim_status simk_topk(const char *fn, const char *kernel, const sim_view *self, int64_t k, int64_t dim,
                                int largest, const sim_view *values, const sim_view *indices);
/* max (min) along dim and the first position holding it (values may be absent: argmax) */
SIM_HIDDEN sim_status simk_minmax_dim(const char *fn, const char *kernel, const sim_view *self, int64_t dim,
                                      int keepdim, int is_min, const sim_view *values, const sim_view *indices);
/* cumulative sum along dim: floats in their dtype, integers and bool into int64 */
SIM_HIDDEN sim_status simk_cumsum(const char *fn, const char *kernel, const sim_view *self, int64_t dim,
                                  const sim_view *out);
/* out[i] = elements[i] is among test (!= invert); out bool */
SIM_HIDDEN sim_status simk_isin(const char *fn, const char *kernel, const sim_view *elements, const sim_view *test,
                                int invert, const sim_view *out);
/* tril (upper = 0) / triu of the last two dims */
SIM_HIDDEN sim_status simk_triangle(const char *fn, const char *kernel, const sim_view *self, int64_t diagonal,
                                    int upper, const sim_view *out);
/* PyTorch's constant_pad_nd: pad[2i], pad[2i+1] before / after dim ndim-1-i (negative crops) */
SIM_HIDDEN sim_status simk_constant_pad(const char *fn, const char *kernel, const sim_view *self, const int64_t *pad,
                                        int64_t npad, double value, const sim_view *out);
/* nearest upsampling of [N, C, H, W] to out's size (scales <= 0: from the sizes) and its gradient */
SIM_HIDDEN sim_status simk_upsample_nearest2d(const char *fn, const char *kernel, const sim_view *in, double scale_h,
                                              double scale_w, const sim_view *out);
SIM_HIDDEN sim_status simk_upsample_nearest2d_backward(const char *fn, const char *kernel, const sim_view *grad,
                                                       double scale_h, double scale_w, const sim_view *out);
/* out = zeros with grad in out[start:end:step] along dim (slice's gradient) */
SIM_HIDDEN sim_status simk_slice_backward(const char *fn, const char *kernel, const sim_view *grad, int64_t dim,
                                          int64_t start, int64_t end, int64_t step, const sim_view *out);

/* ---- the training step (simoptim.c) */
/* GradScaler's update (PyTorch's _amp_update_scale_): scale, found_inf and out
 * one float32 element each (out may be scale), growth_tracker one int32 */
SIM_HIDDEN sim_status simk_amp_update_scale(const char *fn, const char *kernel, const sim_view *scale,
                                            const sim_view *growth_tracker, const sim_view *found_inf,
                                            double growth_factor, double backoff_factor, int64_t growth_interval,
                                            const sim_view *out);
/* grads[i] *= inv_scale in place; found_inf = 1 if any element is inf or NaN */
SIM_HIDDEN sim_status simk_amp_unscale(const char *fn, const char *kernel, const sim_view *grads, int n,
                                       const sim_view *found_inf, const sim_view *inv_scale);

/* ---- random numbers (simrng.c): Philox4x32-10, the caller's (seed, offset);
 * a call reads sim_rng_words(numel, w) words of the stream from `offset` (a
 * multiple of 4), w = 1 except sim_rng_random over more than 2^32 values (2) */
SIM_HIDDEN void sim_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
SIM_HIDDEN uint64_t sim_rng_words(int64_t numel, int words_per_element);
SIM_HIDDEN sim_status sim_rng_uniform(const char *fn, const char *kernel, const sim_view *out, double from,
                                      double to, uint64_t seed, uint64_t offset);
SIM_HIDDEN sim_status sim_rng_normal(const char *fn, const char *kernel, const sim_view *out, double mean,
                                     double std, uint64_t seed, uint64_t offset);
SIM_HIDDEN sim_status sim_rng_bernoulli(const char *fn, const char *kernel, const sim_view *out, double p,
                                        uint64_t seed, uint64_t offset);
SIM_HIDDEN sim_status sim_rng_random(const char *fn, const char *kernel, const sim_view *out, int64_t from,
                                     int64_t to, uint64_t seed, uint64_t offset);
SIM_HIDDEN sim_status sim_rng_dropout(const char *fn, const char *kernel, const sim_view *in, double p, int train,
                                      uint64_t seed, uint64_t offset, const sim_view *out, const sim_view *mask);

/* PyTorch's _fused_adam_ / _fused_adamw_ (decoupled) and _fused_sgd_ over n
 * parameters (lists of n views; max_exp_avg_sqs only with amsgrad, bufs only
 * with momentum): each element in float, the bias corrections in double; a
 * grad_scale divides the gradients (written back), found_inf == 1 skips. */
SIM_HIDDEN sim_status simk_fused_adam(const char *fn, const char *kernel, const sim_view *params, const sim_view *grads,
                                      const sim_view *exp_avgs, const sim_view *exp_avg_sqs,
                                      const sim_view *max_exp_avg_sqs, const sim_view *steps, int n, double lr,
                                      double beta1, double beta2, double weight_decay, double eps, int amsgrad,
                                      int maximize, int decoupled, const sim_view *grad_scale,
                                      const sim_view *found_inf);
SIM_HIDDEN sim_status simk_fused_sgd(const char *fn, const char *kernel, const sim_view *params, const sim_view *grads,
                                     const sim_view *bufs, int n, double weight_decay, double momentum, double lr,
                                     double dampening, int nesterov, int maximize, int is_first_step,
                                     const sim_view *grad_scale, const sim_view *found_inf);

/* helpers for the other kernel files */
SIM_HIDDEN void simk_copy_view(const sim_view *src, const sim_view *dst); /* with conversion; any overlap */
SIM_HIDDEN int simk_views_overlap(const sim_view *a, const sim_view *b);
SIM_HIDDEN sim_view simk_dense_like(const sim_view *v, sim_dtype dt, void **own); /* fresh row-major memory */

/* dtype classes */
SIM_HIDDEN int simk_is_float(sim_dtype dt);
SIM_HIDDEN int simk_is_integer(sim_dtype dt); /* int8/uint8/int32/int64 (not bool) */

/* A view of NCHW (or OIHW) memory as NHWC (OHWI): the same bytes, dims permuted. */
SIM_HIDDEN sim_view simk_nchw_as_nhwc(const sim_view *v);

#endif
