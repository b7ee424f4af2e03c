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

/* C = A @ B (accumulate: C += A @ B) with A read in place from float32
 * memory: row i of A is the concatenation of nseg runs, run s being
 * seg_len[s] consecutive floats at a + i * ars + seg_off[s] (the runs'
 * lengths add up to K, in the order of B's rows).  An implicit GEMM: a
 * convolution reads its windows out of a padded image this way, without an
 * im2col copy.  C is dense float32 rows (unit column stride, rows at least N
 * apart) not overlapping what A or B read. */
SIM_HIDDEN void simblas_gemm_segs(int64_t M, int64_t N, int64_t K, const float *a, int64_t ars, int nseg,
                                  const int64_t *seg_off, const int64_t *seg_len, const simblas_mat *B,
                                  int accumulate, const simblas_mat *C);

/* C[i][j] = sum_k (A[i][k] - 128) * (B[k][j] - 128), exact in int32: uint8
 * operands with zero point 128 (x1's int8 GEMM), strides in elements, C not
 * overlapping A or B.  AVX-512 VNNI where the compiler targets it. */
SIM_HIDDEN void simblas_gemm_u8(int64_t M, int64_t N, int64_t K, const uint8_t *a, int64_t ars, int64_t acs,
                                const uint8_t *b, int64_t brs, int64_t bcs, int32_t *c, int64_t crs,
                                int64_t ccs);

/* Convenience for dense row-major float32 buffers: C[M,N] = A[M,K] @ B[K,N]. */
SIM_HIDDEN void simblas_sgemm_dense(int64_t M, int64_t N, int64_t K, const float *A,
                                    const float *B, float *C);

#endif
