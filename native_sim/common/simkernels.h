/*
 * Kernels of the simulated chips.  They take resolved views (see simcore.h).
 * Generic checks (shape agreement, dtype agreement) happen here and report
 * through sim_fail; chip-specific limits (which dtypes, which strides) are
 * checked by each chip's runtime before it calls in.
 */
#ifndef FLSIM_SIMKERNELS_H
#define FLSIM_SIMKERNELS_H

#include "simcore.h"

typedef enum { SIMK_ADD, SIMK_SUB, SIMK_MUL, SIMK_DIV } simk_binop;
typedef enum {
    SIMK_RELU, SIMK_GELU, SIMK_GELU_TANH, SIMK_SIGMOID, SIMK_TANH, SIMK_EXP, SIMK_NEG,
    SIMK_SQRT, SIMK_RSQRT
} simk_unop;

/* Functions taking `kernel` validate, then count the launch under that name
 * (sim_launch, which may inject a fault), then compute. */

/* shape/dtype checks shared by the chips */
SIM_HIDDEN sim_status simk_check_same(const char *fn, const char *what, const sim_view *a,
                                      const sim_view *ref);
SIM_HIDDEN sim_status simk_check_dtype_in(const char *fn, const char *what, const sim_view *v,
                                          const sim_dtype *allowed, int n);

SIM_HIDDEN void simk_binary(simk_binop op, const sim_view *a, const sim_view *b, double alpha,
                            const sim_view *out);
SIM_HIDDEN void simk_unary(simk_unop op, const sim_view *a, const sim_view *out);

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
/* sum (or mean) over the dims flagged in `reduce` (a bitmask over in->ndim) */
SIM_HIDDEN sim_status simk_reduce(const char *fn, const char *kernel, const sim_view *in, uint32_t reduce, int mean,
                                  const sim_view *out);
/* slow: 0 fused, 1 the generic (slower) path, 2 "safe" (all -inf rows -> 0) */
SIM_HIDDEN sim_status simk_softmax(const char *fn, const char *kernel, const sim_view *in, int64_t dim, int log,
                                   int slow, const sim_view *out);
SIM_HIDDEN sim_status simk_embedding(const char *fn, const char *kernel, const sim_view *weight,
                                     const sim_view *indices, const sim_view *out);
SIM_HIDDEN sim_status simk_copy(const char *fn, const char *kernel, const sim_view *src, const sim_view *dst);
SIM_HIDDEN void simk_fill(const sim_view *out, double value);

#endif
