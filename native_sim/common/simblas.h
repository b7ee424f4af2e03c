/*
 * simblas: the simulators' dense matrix multiply (single-threaded, no
 * external BLAS).
 *
 *     C[b] = alpha * A[b] @ B[b] + beta * D[b]        for b in [0, batch)
 *
 * A is [M, K], B is [K, N], C and D are [M, N].  Every operand is a strided
 * view (`simblas_mat`), so transposed, sliced, broadcast (stride 0) and
 * batched operands need no copies from the caller: a transposed operand is
 * the same memory with rs and cs swapped.  For example nn.Linear's
 * y = x @ W.T + b with x [M, K], W [N, K] and b [N], all row-major float32:
 *
 *     simblas_mat A = {x, SIM_F32, K, 1, 0}, B = {W, SIM_F32, 1, K, 0};
 *     simblas_mat D = {b, SIM_F32, 0, 1, 0}, C = {y, SIM_F32, N, 1, 0};
 *     simblas_gemm(1, M, N, K, 1.0f, &A, &B, 1.0f, &D, &C);
 *
 * Arithmetic: float32.  float16 / bfloat16 (and any other sim_dtype) operands
 * are converted to float32 as they are packed; C is computed in float32 and
 * rounded once to its own dtype (round-to-nearest-even), with alpha applied
 * to the finished product and beta * D added after it, in that order.
 *
 * Aliasing: C may overlap A, B or D in any way (an in-place `C = A @ C`, or D
 * being C itself for a BLAS-style `beta * C` update); simblas detects the
 * overlap and computes through a temporary, so the result is always that of
 * reading every input before writing any output.
 *
 * Speed (AVX-512, one thread): about torch's MKL at 256-1024 and on
 * transformer shapes; docs/simulators.md has the figures.
 *
 * Thread safety: no global state; concurrent calls are fine.  Workspace is
 * malloc'd per call; allocation failure aborts (as everywhere in the
 * simulator kernels, a host OOM is a fatal simulator bug, not a device error).
 */
#ifndef FLSIM_SIMBLAS_H
#define FLSIM_SIMBLAS_H

#include "simcore.h"

/* One strided operand.  Strides are in elements and may be any sign, or 0
 * (broadcast).  `bs` is the distance between consecutive batch entries
 * (0 shares one matrix across the batch).  C's strides must not make two of
 * its elements share memory; inputs may. */
typedef struct {
    void *base;       /* element [0][0] of batch entry 0 */
    sim_dtype dtype;
    int64_t rs, cs;   /* row, column strides */
    int64_t bs;       /* batch stride */
} simblas_mat;

/* C = alpha * A @ B + beta * D over `batch` entries.  D may be NULL; it is not
 * read when beta == 0 (so NaN in D does not leak through, as in BLAS and
 * torch.addmm).  K == 0 gives C = beta * D (or zeros). */
SIM_HIDDEN void simblas_gemm(int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                             const simblas_mat *A, const simblas_mat *B, float beta,
                             const simblas_mat *D, const simblas_mat *C);

/* Writes rows [i0, i0+m) x columns [k0, k0+kc) of a computed A operand as
 * float32 into dst, row r at dst + r * ld: lets a caller feed A without
 * materializing it (convolution's im2col, a cache-sized block at a time).
 * Called with i0 increasing within each K block; k0 > 0 only when K is
 * split into blocks. */
typedef void (*simblas_rows_fn)(void *ctx, int64_t i0, int64_t m, int64_t k0, int64_t kc,
                                float *dst, int64_t ld);

/* simblas_gemm (batch 1) with A supplied by a_rows.  C must not overlap
 * whatever a_rows reads; B and D may overlap C as in simblas_gemm. */
SIM_HIDDEN void simblas_gemm_rows(int64_t M, int64_t N, int64_t K, float alpha,
                                  simblas_rows_fn a_rows, void *a_ctx, const simblas_mat *B,
                                  float beta, const simblas_mat *D, const simblas_mat *C);

/* dst[t] = src[t * stride] as float32 for t < n (src addresses element 0):
 * the conversion packing uses, for kernels that build their own operands. */
SIM_HIDDEN void simblas_to_f32(float *dst, const void *src, sim_dtype dtype, int64_t stride,
                               int64_t n);

/* Convenience for dense row-major float32 buffers: C[M,N] = A[M,K] @ B[K,N]. */
SIM_HIDDEN void simblas_sgemm_dense(int64_t M, int64_t N, int64_t K, const float *A,
                                    const float *B, float *C);

#endif
