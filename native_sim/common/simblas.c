/*
 * simblas.c: a cache-blocked float32 GEMM in portable C (see simblas.h).
 *
 * The structure is the usual one of fast BLAS libraries (Goto / BLIS): B is
 * packed a KC x NC block at a time into NR-column panels, A an MC x KC block
 * at a time into MR-row panels, and a register-blocked MR x NR micro-kernel
 * multiplies one A panel by one B panel with the whole C tile held in vector
 * registers.  The B panel of the micro-kernel stays in L1 while it sweeps the
 * A block, which stays in L2.  Packing is also where strides and narrow
 * dtypes are dealt with, so the micro-kernel only ever sees dense float32.
 *
 * The micro-kernel uses GCC/Clang vector extensions, sized for the target the
 * compiler was told about (-march=native picks AVX-512 or AVX2 here); a plain
 * C version keeps other compilers working.
 */
#include "simblas.h"

#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* Vector code is worthless without fused multiply-add, and ISO C modes
 * (-std=c11) turn contraction off in GCC. */
#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif

/* ----------------------------------------------------------- tile shape */

#if (defined(__GNUC__) || defined(__clang__)) && !defined(SIMBLAS_PLAIN_C)
#define SB_VECTOR 1
#if defined(__AVX512F__)
#define VL 16 /* floats per vector */
#ifndef MR
#define MR 14 /* 14 x 2 accumulators + 2 B vectors + 1 broadcast of 32 registers */
#endif
#elif defined(__AVX__)
#define VL 8
#define MR 6 /* 12 accumulators of 16 registers */
#else
#define VL 4
#define MR 6
#endif
typedef float vf __attribute__((vector_size(VL * sizeof(float)), aligned(sizeof(float))));
#else
#define SB_VECTOR 0
#define VL 4
#define MR 4
#endif
#ifndef NV
#define NV 2              /* vectors per tile row */
#endif
#define NR (NV * VL)      /* tile columns */

/* Blocking and paths, measured on the benchmarks (bench/bench_sim_gemm.py);
 * each can be overridden with -D when experimenting.
 *
 * KC x NR B micro-panel (48 KiB) streamed from L1/L2 while the MC x KC A
 * block (420 KiB) stays in L2, KC x NC B block in L2/L3.  KC = 384 beat 192
 * and 256 by 3-8% on 512-2000 squares (fewer passes over C). */
#ifndef KC
#define KC 384
#endif
#ifndef MC
#define MC (MR * 20)
#endif
#ifndef NC
#define NC 2048
#endif
/* The implicit GEMM (simblas_gemm_segs) packs nothing, so its K blocks only
 * bound the B panel it streams (KC_SEGS x NR floats, 80 KiB, in L2): a
 * convolution's K (9 x 64 for a 3x3 over 64 channels) then runs in one
 * block, each C tile finished in registers (7-10% faster than 2 blocks of
 * 288 on the 64-channel convolution benchmark). */
#ifndef KC_SEGS
#define KC_SEGS 640
#endif
/* Float32 A rows (unit column stride) are read in place instead of packed
 * when B is at most this wide: packing only pays for itself over many B
 * panels.  (Not for row strides that are multiples of 4 KiB, where MR rows
 * would share one L1 set, unless B is one panel and each row is read once.) */
#ifndef A_DIRECT_MAX_N
#define A_DIRECT_MAX_N (8 * NR)
#endif
/* Float32 B rows (unit column stride) at most this many floats apart are read
 * in place, unpacked: the panel is then nearly contiguous anyway.  (So are B
 * rows any distance apart when A has a single panel of rows: packing B
 * would cost more than the product.) */
#ifndef B_DIRECT_MAX_RS
#define B_DIRECT_MAX_RS (4 * NR)
#endif
/* Prefetch the C tile at the start of the micro-kernel: a C bigger than L2
 * would otherwise stall every tile store. */
#ifndef SB_PREFETCH_C
#define SB_PREFETCH_C 1
#endif
/* B this narrow, column-contiguous, against row-contiguous A: dot products
 * instead of tiles (a tile would waste most of its lanes). */
#define DOT_MAX_N 4
/* Outputs that cannot be accumulated in place (narrow dtype, strided) with
 * K > KC go through a float workspace of at most this many floats (M x nc),
 * which caps nc for a very tall C. */
#define CW_MAX ((int64_t)1 << 22)
#define ALIGN 64

/* --------------------------------------------------------- conversions */

/* dst[t * ds] = X[t * s] for t < n, converting to float; p addresses X[0]. */
static void gather(const char *p, sim_dtype dt, int64_t s, int64_t n, float *dst, int64_t ds) {
    switch (dt) {
        case SIM_F32: {
            const float *q = (const float *)p;
            if (s == 1 && ds == 1) memcpy(dst, q, (size_t)n * sizeof(float));
            else if (s == 1) for (int64_t t = 0; t < n; t++) dst[t * ds] = q[t];
            else if (ds == 1) for (int64_t t = 0; t < n; t++) dst[t] = q[t * s];
            else for (int64_t t = 0; t < n; t++) dst[t * ds] = q[t * s];
            break;
        }
        case SIM_F16: {
            const uint16_t *q = (const uint16_t *)p;
            for (int64_t t = 0; t < n; t++) dst[t * ds] = sim_h2f(q[t * s]);
            break;
        }
        case SIM_BF16: {
            const uint16_t *q = (const uint16_t *)p;
            for (int64_t t = 0; t < n; t++) dst[t * ds] = sim_bf2f(q[t * s]);
            break;
        }
        default: {
            int64_t step = s * (int64_t)sim_dtype_size(dt);
            for (int64_t t = 0; t < n; t++) dst[t * ds] = (float)sim_load(p + t * step, dt);
        }
    }
}

/* X[t * s] = src[t] for t < n, rounding once to X's dtype. */
static void scatter(char *p, sim_dtype dt, int64_t s, int64_t n, const float *src) {
    switch (dt) {
        case SIM_F32: {
            float *q = (float *)p;
            if (s == 1) memcpy(q, src, (size_t)n * sizeof(float));
            else for (int64_t t = 0; t < n; t++) q[t * s] = src[t];
            break;
        }
        case SIM_F16: {
            uint16_t *q = (uint16_t *)p;
            for (int64_t t = 0; t < n; t++) q[t * s] = sim_f2h(src[t]);
            break;
        }
        case SIM_BF16: {
            uint16_t *q = (uint16_t *)p;
            for (int64_t t = 0; t < n; t++) q[t * s] = sim_f2bf(src[t]);
            break;
        }
        default: {
            int64_t step = s * (int64_t)sim_dtype_size(dt);
            for (int64_t t = 0; t < n; t++) sim_store(p + t * step, dt, src[t]);
        }
    }
}

static void *xmalloc(size_t n) {
    n = (n + ALIGN - 1) / ALIGN * ALIGN;
    void *p = aligned_alloc(ALIGN, n ? n : ALIGN);
    if (!p) abort();
    return p;
}

/* --------------------------------------------------------------- views */

/* One batch entry of an operand. */
typedef struct {
    char *p;
    sim_dtype dt;
    int64_t rs, cs;
    int64_t es;
} mat2;

static mat2 entry(const simblas_mat *x, int64_t b) {
    mat2 m;
    m.dt = x->dtype;
    m.es = (int64_t)sim_dtype_size(x->dtype);
    m.p = (char *)x->base + b * x->bs * m.es;
    m.rs = x->rs;
    m.cs = x->cs;
    return m;
}

static inline char *at(const mat2 *x, int64_t i, int64_t j) {
    return x->p + (i * x->rs + j * x->cs) * x->es;
}

/* Bytes [lo, hi) an operand of batch x rows x cols can touch. */
static void span(const simblas_mat *x, int64_t batch, int64_t rows, int64_t cols, intptr_t *lo,
                 intptr_t *hi) {
    int64_t es = (int64_t)sim_dtype_size(x->dtype);
    int64_t ext[3] = {batch, rows, cols}, st[3] = {x->bs, x->rs, x->cs};
    int64_t mn = 0, mx = 0;
    for (int d = 0; d < 3; d++) {
        int64_t off = (ext[d] - 1) * st[d];
        if (off < 0) mn += off;
        else mx += off;
    }
    *lo = (intptr_t)x->base + (intptr_t)(mn * es);
    *hi = (intptr_t)x->base + (intptr_t)((mx + 1) * es);
}

static int overlaps(const simblas_mat *c, int64_t batch, int64_t M, int64_t N,
                    const simblas_mat *x, int64_t rows, int64_t cols) {
    intptr_t clo, chi, xlo, xhi;
    span(c, batch, M, N, &clo, &chi);
    span(x, batch, rows, cols, &xlo, &xhi);
    return clo < xhi && xlo < chi;
}

static int same_geometry(const simblas_mat *a, const simblas_mat *b) {
    return a->base == b->base && a->dtype == b->dtype && a->rs == b->rs && a->cs == b->cs &&
           a->bs == b->bs;
}

/* -------------------------------------------------------- micro-kernel */

/* A arrives either packed (panel layout a[k * MR + r]), as rows of a dense
 * float32 matrix read in place (a[r * ars + k]), or as rows read in place in
 * runs (A_SEGS: run s of the K block is slen[s] floats at a[r * ars +
 * soff[s]], the runs in K order); B as NR-wide rows bks apart. */
enum { A_PACKED, A_ROWS, A_SEGS };

typedef struct {
    int64_t kc;
    const float *a;
    int64_t ars;
    const float *b;
    int64_t bks;
    float *c;        /* the tile: rows ldc apart, columns contiguous */
    int64_t ldc;
    int n;           /* valid columns (<= NR); the rest are computed and dropped */
    int load;        /* 1: add the tile's current contents (a later K block) */
    float scale;     /* applied to the finished sum (alpha on the last K block) */
    int nseg;        /* A_SEGS: the runs of this K block */
    const int64_t *soff, *slen;
} ukr_args;

#if SB_VECTOR

static inline __attribute__((always_inline)) void ukr_body(const int m, const int nv,
                                                           const int layout, const ukr_args *p) {
    vf acc[MR][NV];
    for (int r = 0; r < m; r++)
        for (int v = 0; v < nv; v++) acc[r][v] = (vf){0};
    if (SB_PREFETCH_C)
        for (int r = 0; r < m; r++)
            for (int v = 0; v < nv; v++) __builtin_prefetch(p->c + r * p->ldc + v * VL, 1, 3);
    const float *a = p->a, *b = p->b;
    const int64_t ars = p->ars, bks = p->bks, kc = p->kc;
    if (layout == A_SEGS) {
        for (int s = 0; s < p->nseg; s++) {
            const float *as = a + p->soff[s];
            const int64_t len = p->slen[s];
            for (int64_t k = 0; k < len; k++) {
                vf bv[NV];
                for (int v = 0; v < nv; v++) bv[v] = *(const vf *)(b + v * VL);
                for (int r = 0; r < m; r++) {
                    const float av = as[r * ars];
                    for (int v = 0; v < nv; v++) acc[r][v] += av * bv[v];
                }
                as++;
                b += bks;
            }
        }
    } else {
        for (int64_t k = 0; k < kc; k++) {
            vf bv[NV];
            for (int v = 0; v < nv; v++) bv[v] = *(const vf *)(b + v * VL);
            for (int r = 0; r < m; r++) {
                const float av = layout == A_PACKED ? a[r] : a[r * ars];
                for (int v = 0; v < nv; v++) acc[r][v] += av * bv[v];
            }
            a += layout == A_PACKED ? MR : 1;
            b += bks;
        }
    }
    float *c = p->c;
    const int64_t ldc = p->ldc;
    const float s = p->scale;
    if (p->n == nv * VL) {
        for (int r = 0; r < m; r++)
            for (int v = 0; v < nv; v++) {
                vf *cp = (vf *)(c + r * ldc + v * VL);
                vf x = acc[r][v];
                if (p->load) x += *cp;
                *cp = x * s;
            }
    } else {
        for (int r = 0; r < m; r++) {
            float t[NV * VL];
            for (int v = 0; v < nv; v++) memcpy(t + v * VL, &acc[r][v], sizeof(vf));
            float *cr = c + r * ldc;
            const int n = p->n < nv * VL ? p->n : nv * VL;
            for (int j = 0; j < n; j++) cr[j] = ((p->load ? cr[j] : 0.0f) + t[j]) * s;
        }
    }
}

#else /* plain C: the compiler vectorizes what it can */

static inline void ukr_body(const int m, const int nv, const int layout, const ukr_args *p) {
    float acc[MR][NR];
    const int nc = nv * VL;
    for (int r = 0; r < m; r++)
        for (int j = 0; j < nc; j++) acc[r][j] = 0.0f;
    const float *a = p->a, *b = p->b;
    const int nseg = layout == A_SEGS ? p->nseg : 1;
    for (int s = 0; s < nseg; s++) {
        const int64_t len = layout == A_SEGS ? p->slen[s] : p->kc;
        if (layout == A_SEGS) a = p->a + p->soff[s];
        for (int64_t k = 0; k < len; k++) {
            for (int r = 0; r < m; r++) {
                const float av = layout == A_PACKED ? a[r] : a[r * p->ars];
                for (int j = 0; j < nc; j++) acc[r][j] += av * b[j];
            }
            a += layout == A_PACKED ? MR : 1;
            b += p->bks;
        }
    }
    const int n = p->n < nc ? p->n : nc;
    for (int r = 0; r < m; r++) {
        float *cr = p->c + r * p->ldc;
        for (int j = 0; j < n; j++) cr[j] = ((p->load ? cr[j] : 0.0f) + acc[r][j]) * p->scale;
    }
}

#endif

/* One specialization per tile height, so edge tiles cost what they compute. */
#define SB_C(mm, nv, l) case mm: ukr_body(mm, nv, l, p); break;
#define SB_CASES_1(nv, l) SB_C(1, nv, l)
#define SB_CASES_2(nv, l) SB_CASES_1(nv, l) SB_C(2, nv, l)
#define SB_CASES_3(nv, l) SB_CASES_2(nv, l) SB_C(3, nv, l)
#define SB_CASES_4(nv, l) SB_CASES_3(nv, l) SB_C(4, nv, l)
#define SB_CASES_5(nv, l) SB_CASES_4(nv, l) SB_C(5, nv, l)
#define SB_CASES_6(nv, l) SB_CASES_5(nv, l) SB_C(6, nv, l)
#define SB_CASES_7(nv, l) SB_CASES_6(nv, l) SB_C(7, nv, l)
#define SB_CASES_8(nv, l) SB_CASES_7(nv, l) SB_C(8, nv, l)
#define SB_CASES_9(nv, l) SB_CASES_8(nv, l) SB_C(9, nv, l)
#define SB_CASES_10(nv, l) SB_CASES_9(nv, l) SB_C(10, nv, l)
#define SB_CASES_11(nv, l) SB_CASES_10(nv, l) SB_C(11, nv, l)
#define SB_CASES_12(nv, l) SB_CASES_11(nv, l) SB_C(12, nv, l)
#define SB_CASES_13(nv, l) SB_CASES_12(nv, l) SB_C(13, nv, l)
#define SB_CASES_14(nv, l) SB_CASES_13(nv, l) SB_C(14, nv, l)
#define SB_CASES_15(nv, l) SB_CASES_14(nv, l) SB_C(15, nv, l)
#define SB_CASES_16(nv, l) SB_CASES_15(nv, l) SB_C(16, nv, l)
#define SB_CAT_(a, b) a##b
#define SB_CAT(a, b) SB_CAT_(a, b)
#define SB_CASES SB_CAT(SB_CASES_, MR)

#define SB_UKR(name, nv, l)                            \
    static void name(int m, const ukr_args *p) {       \
        switch (m) { SB_CASES(nv, l) default: break; } \
    }
SB_UKR(ukr_packed_1, 1, A_PACKED)
SB_UKR(ukr_packed_2, 2, A_PACKED)
SB_UKR(ukr_rows_1, 1, A_ROWS)
SB_UKR(ukr_rows_2, 2, A_ROWS)
SB_UKR(ukr_segs_1, 1, A_SEGS)
SB_UKR(ukr_segs_2, 2, A_SEGS)
#if NV > 2
SB_UKR(ukr_packed_3, 3, A_PACKED)
SB_UKR(ukr_packed_4, 4, A_PACKED)
SB_UKR(ukr_rows_3, 3, A_ROWS)
SB_UKR(ukr_rows_4, 4, A_ROWS)
SB_UKR(ukr_segs_3, 3, A_SEGS)
SB_UKR(ukr_segs_4, 4, A_SEGS)
#endif

typedef void (*ukr_fn)(int m, const ukr_args *p);

/* The kernel for a tile n columns wide, A laid out as `layout`. */
static ukr_fn pick_kernel(int layout, int n) {
    static const ukr_fn packed_k[] = {ukr_packed_1, ukr_packed_2,
#if NV > 2
                                      ukr_packed_3, ukr_packed_4
#endif
    };
    static const ukr_fn rows_k[] = {ukr_rows_1, ukr_rows_2,
#if NV > 2
                                    ukr_rows_3, ukr_rows_4
#endif
    };
    static const ukr_fn segs_k[] = {ukr_segs_1, ukr_segs_2,
#if NV > 2
                                    ukr_segs_3, ukr_segs_4
#endif
    };
    int nv = (n + VL - 1) / VL;
    return layout == A_PACKED ? packed_k[nv - 1] : layout == A_ROWS ? rows_k[nv - 1] : segs_k[nv - 1];
}

/* ------------------------------------------------------------- packing */

/* B[k0 : k0+kc, j0 : j0+nc] -> NR-column panels [nc/NR][kc][NR], zero padded. */
static void pack_b(const mat2 *B, int64_t k0, int64_t kc, int64_t j0, int64_t nc, float *dst) {
    for (int64_t jp = 0; jp < nc; jp += NR) {
        int64_t n = nc - jp < NR ? nc - jp : NR;
        float *d = dst + jp * kc;
        if (B->cs == 1 || llabs(B->cs) < llabs(B->rs)) {
            for (int64_t k = 0; k < kc; k++) gather(at(B, k0 + k, j0 + jp), B->dt, B->cs, n, d + k * NR, 1);
        } else if (B->dt == SIM_F32 && B->rs == 1) {
            /* column-major (a transposed weight): 16 x n blocks, so each
             * column is read a cache line at a time while its rows stay in L1 */
            const float *col0 = (const float *)at(B, k0, j0 + jp);
            const int64_t cs = B->cs;
            int64_t k = 0;
            for (; k + 16 <= kc; k += 16)
                for (int64_t j = 0; j < n; j++) {
                    const float *src = col0 + j * cs + k;
                    float *dd = d + k * NR + j;
                    for (int kk = 0; kk < 16; kk++) dd[kk * NR] = src[kk];
                }
            for (; k < kc; k++)
                for (int64_t j = 0; j < n; j++) d[k * NR + j] = col0[j * cs + k];
        } else {
            for (int64_t j = 0; j < n; j++) gather(at(B, k0, j0 + jp + j), B->dt, B->rs, kc, d + j, NR);
        }
        if (n < NR)
            for (int64_t k = 0; k < kc; k++) memset(d + k * NR + n, 0, (size_t)(NR - n) * sizeof(float));
    }
}

/* A[i0 : i0+mc, k0 : k0+kc] -> MR-row panels [mc/MR][kc][MR]; rows past mc
 * in the last panel are left unset (the kernel for that height skips them). */
static void pack_a(const mat2 *A, int64_t i0, int64_t mc, int64_t k0, int64_t kc, float *dst) {
    for (int64_t ip = 0; ip < mc; ip += MR) {
        int64_t m = mc - ip < MR ? mc - ip : MR;
        float *d = dst + ip * kc;
        if (A->cs == 1 || llabs(A->cs) < llabs(A->rs)) {
            for (int64_t r = 0; r < m; r++) gather(at(A, i0 + ip + r, k0), A->dt, A->cs, kc, d + r, MR);
        } else {
            for (int64_t k = 0; k < kc; k++) gather(at(A, i0 + ip, k0 + k), A->dt, A->rs, m, d + k * MR, 1);
        }
    }
}

/* ---------------------------------------------------------------- core */

/* Where the micro-kernel's A comes from. */
enum {
    A_SRC_PACK,    /* packed into MR-row panels (any dtype and strides) */
    A_SRC_DIRECT,  /* float32 rows read in place */
    A_SRC_SEGS     /* float32 rows read in place in runs (simblas_gemm_segs) */
};

typedef struct {
    int64_t M, N, K;
    float alpha, beta;
    int c_direct;          /* C is float32 with unit column stride: tiles accumulate in place */
    int a_src;
    int b_direct;          /* full B panels are read in place (float32 rows close together) */
    const float *sa;       /* A_SRC_SEGS: row i at sa + i * sars, runs soff/slen */
    int64_t sars;
    int nseg;
    const int64_t *soff, *slen;
    int64_t *boff, *blen;  /* the runs of the current K block (scratch, nseg entries) */
    int accumulate;        /* C's current contents are added to (simblas_gemm_segs) */
    int64_t kc_blk, nc_blk, mc_blk;
    float *ap, *bp, *cw;
} plan;

/* Tile [i0, i0+m) x [j0, j0+n) is final in t (rows ldt apart): add beta * D
 * and, unless C is the tile's own memory, round it into C. */
static void finish_tile(const plan *pl, const mat2 *D, const mat2 *C, int64_t i0, int64_t j0,
                        int64_t m, int64_t n, float *t, int64_t ldt) {
    float drow[NR];
    const float be = pl->beta;
    for (int64_t r = 0; r < m; r++) {
        float *tr = t + r * ldt;
        if (D && D->dt == SIM_F32 && D->cs == 1) {
            const float *dr = (const float *)at(D, i0 + r, j0);
            for (int64_t j = 0; j < n; j++) tr[j] += be * dr[j];
        } else if (D) {
            gather(at(D, i0 + r, j0), D->dt, D->cs, n, drow, 1);
            for (int64_t j = 0; j < n; j++) tr[j] += be * drow[j];
        }
        if (!pl->c_direct) scatter(at(C, i0 + r, j0), C->dt, C->cs, n, tr);
    }
}

/* The runs of K block [k0, k0 + kc) into pl->boff / pl->blen; returns how many. */
static int block_runs(const plan *pl, int64_t k0, int64_t kc) {
    int n = 0;
    int64_t k = 0;
    for (int s = 0; s < pl->nseg && k < k0 + kc; s++) {
        const int64_t lo = k > k0 ? k : k0, hi = k + pl->slen[s] < k0 + kc ? k + pl->slen[s] : k0 + kc;
        if (hi > lo) {
            pl->boff[n] = pl->soff[s] + (lo - k);
            pl->blen[n++] = hi - lo;
        }
        k += pl->slen[s];
    }
    return n;
}

static void run_entry(const plan *pl, const mat2 *A, const mat2 *B, const mat2 *D, const mat2 *C) {
    const int64_t M = pl->M, N = pl->N, K = pl->K;
    const int layout = pl->a_src == A_SRC_PACK ? A_PACKED : pl->a_src == A_SRC_SEGS ? A_SEGS : A_ROWS;
    float tile[MR * NR];
    for (int64_t jc = 0; jc < N; jc += pl->nc_blk) {
        const int64_t nc = N - jc < pl->nc_blk ? N - jc : pl->nc_blk;
        /* with direct B only a last panel narrower than whole vectors is packed */
        const int64_t last_jr = (nc - 1) / NR * NR;
        const int b_tail_packed = pl->b_direct && (nc - last_jr) % VL != 0;
        for (int64_t pc = 0; pc < K; pc += pl->kc_blk) {
            const int64_t kc = K - pc < pl->kc_blk ? K - pc : pl->kc_blk;
            const int first = pc == 0, last = pc + kc == K;
            if (!pl->b_direct) pack_b(B, pc, kc, jc, nc, pl->bp);
            else if (b_tail_packed) pack_b(B, pc, kc, jc + last_jr, nc - last_jr, pl->bp);
            const int nseg = pl->a_src == A_SRC_SEGS ? block_runs(pl, pc, kc) : 0;
            for (int64_t ic = 0; ic < M; ic += pl->mc_blk) {
                const int64_t mc = M - ic < pl->mc_blk ? M - ic : pl->mc_blk;
                if (pl->a_src == A_SRC_PACK) pack_a(A, ic, mc, pc, kc, pl->ap);
                for (int64_t jr = 0; jr < nc; jr += NR) {
                    const int n = (int)(nc - jr < NR ? nc - jr : NR);
                    const ukr_fn kern = pick_kernel(layout, n);
                    ukr_args u;
                    u.kc = kc;
                    u.ars = pl->a_src == A_SRC_DIRECT ? A->rs : pl->a_src == A_SRC_SEGS ? pl->sars : kc;
                    u.nseg = nseg;
                    u.soff = pl->boff;
                    u.slen = pl->blen;
                    if (!pl->b_direct) {
                        u.b = pl->bp + jr * kc;
                        u.bks = NR;
                    } else if (jr == last_jr && b_tail_packed) {
                        u.b = pl->bp;
                        u.bks = NR;
                    } else {
                        u.b = (const float *)at(B, pc, jc + jr);
                        u.bks = B->rs;
                    }
                    u.n = n;
                    u.load = !first || pl->accumulate;
                    u.scale = last ? pl->alpha : 1.0f;
                    for (int64_t ir = 0; ir < mc; ir += MR) {
                        const int m = (int)(mc - ir < MR ? mc - ir : MR);
                        const int64_t i = ic + ir, j = jc + jr;
                        u.a = pl->a_src == A_SRC_DIRECT ? (const float *)at(A, i, pc)
                              : pl->a_src == A_SRC_SEGS ? pl->sa + i * pl->sars : pl->ap + ir * kc;
                        if (pl->c_direct) {
                            u.c = (float *)at(C, i, j);
                            u.ldc = C->rs;
                        } else if (pl->cw) {
                            u.c = pl->cw + i * pl->nc_blk + jr;
                            u.ldc = pl->nc_blk;
                        } else {
                            u.c = tile;
                            u.ldc = NR;
                        }
                        kern(m, &u);
                        if (last && (D || !pl->c_direct)) finish_tile(pl, D, C, i, j, m, n, u.c, u.ldc);
                    }
                }
            }
        }
    }
}

/* C[b] = t[b] + beta * D[b] for a dense float t (NULL: zeros). */
static void finish_all(int64_t batch, int64_t M, int64_t N, const float *t, float beta,
                       const simblas_mat *D, const simblas_mat *C) {
    float *row = xmalloc((size_t)N * sizeof(float));
    plan pl;
    memset(&pl, 0, sizeof pl);
    pl.beta = beta;
    for (int64_t b = 0; b < batch; b++) {
        mat2 c = entry(C, b), d;
        if (D) d = entry(D, b);
        for (int64_t i = 0; i < M; i++) {
            if (t) memcpy(row, t + (b * M + i) * N, (size_t)N * sizeof(float));
            else memset(row, 0, (size_t)N * sizeof(float));
            for (int64_t j = 0; j < N; j += NR) {
                int64_t n = N - j < NR ? N - j : NR;
                finish_tile(&pl, D ? &d : NULL, &c, i, j, 1, n, row + j, n);
            }
        }
    }
    free(row);
}

/* sum_k a[k] * b[k] over contiguous float32 */
static float dot_f32(const float *a, const float *b, int64_t K) {
    int64_t k = 0;
    float sum = 0.0f;
#if SB_VECTOR
    vf acc[4] = {{0}, {0}, {0}, {0}}; /* four chains hide the FMA latency */
    for (; k + 4 * VL <= K; k += 4 * VL)
        for (int v = 0; v < 4; v++)
            acc[v] += *(const vf *)(a + k + v * VL) * *(const vf *)(b + k + v * VL);
    for (; k + VL <= K; k += VL) acc[0] += *(const vf *)(a + k) * *(const vf *)(b + k);
    const vf total = acc[0] + acc[1] + acc[2] + acc[3];
    float lanes[VL];
    memcpy(lanes, &total, sizeof lanes);
    for (int l = 0; l < VL; l++) sum += lanes[l];
#endif
    for (; k < K; k++) sum += a[k] * b[k];
    return sum;
}

/* C for a B of a few columns with A's rows and B's columns both contiguous
 * float32 (matrix-vector products, and x @ W.T at batch 1 once transposed):
 * dot products along K, each A row read once with full vectors. */
static void run_dot(const plan *pl, const mat2 *A, const mat2 *B, const mat2 *D, const mat2 *C) {
    plan fin = *pl;
    fin.c_direct = 0; /* rows go out through finish_tile's conversion */
    float t[DOT_MAX_N];
    for (int64_t i = 0; i < pl->M; i++) {
        const float *a = (const float *)at(A, i, 0);
        for (int64_t j = 0; j < pl->N; j++) t[j] = pl->alpha * dot_f32(a, (const float *)at(B, 0, j), pl->K);
        finish_tile(&fin, D, C, i, 0, 1, pl->N, t, pl->N);
    }
}

/* Runs the blocked product; A is `A` or, when A is NULL, the runs of pl->sa. */
static void core(plan *pl, int64_t batch, const simblas_mat *A, const simblas_mat *B,
                 const simblas_mat *D, const simblas_mat *C) {
    const int64_t M = pl->M, N = pl->N, K = pl->K;
    if (A && N <= DOT_MAX_N && A->dtype == SIM_F32 && A->cs == 1 && B->dtype == SIM_F32 && B->rs == 1) {
        for (int64_t b = 0; b < batch; b++) {
            mat2 a = entry(A, b), bb = entry(B, b), c = entry(C, b), d;
            if (D) d = entry(D, b);
            run_dot(pl, &a, &bb, D ? &d : NULL, &c);
        }
        return;
    }
    /* equal K blocks: K = 200 runs as 2 x 100, not 192 + 8 */
    const int64_t kc_max = A ? KC : KC_SEGS;
    int64_t nk = (K + kc_max - 1) / kc_max;
    pl->kc_blk = (K + nk - 1) / nk;
    pl->nc_blk = N < NC ? N : NC;
    pl->mc_blk = MC;
    if (!A) {
        pl->a_src = A_SRC_SEGS;
    } else if (A->dtype == SIM_F32 && A->cs == 1 &&
               (N <= NR || (N <= A_DIRECT_MAX_N && (llabs(A->rs) * 4) % 4096 != 0))) {
        pl->a_src = A_SRC_DIRECT;
    } else {
        pl->a_src = A_SRC_PACK;
    }
    pl->b_direct = B->dtype == SIM_F32 && B->cs == 1 && (llabs(B->rs) <= B_DIRECT_MAX_RS || M <= MR);
    if (!pl->c_direct && nk > 1) {
        int64_t cap = CW_MAX / M / NR * NR;
        if (cap < NR) cap = NR;
        if (pl->nc_blk > cap) pl->nc_blk = cap;
        pl->cw = xmalloc((size_t)(M * pl->nc_blk) * sizeof(float));
    }
    int64_t ncp = (pl->nc_blk + NR - 1) / NR * NR;
    int64_t mcp = M < pl->mc_blk ? (M + MR - 1) / MR * MR : pl->mc_blk;
    pl->bp = xmalloc((size_t)(pl->kc_blk * ncp) * sizeof(float));
    pl->ap = pl->a_src == A_SRC_DIRECT || pl->a_src == A_SRC_SEGS ? NULL
             : xmalloc((size_t)(pl->kc_blk * mcp) * sizeof(float));
    for (int64_t b = 0; b < batch; b++) {
        mat2 a, bb = entry(B, b), c = entry(C, b), d;
        if (A) a = entry(A, b);
        if (D) d = entry(D, b);
        run_entry(pl, A ? &a : NULL, &bb, D ? &d : NULL, &c);
    }
    free(pl->ap);
    free(pl->bp);
    free(pl->cw);
}

/* C written in place: float32, unit column stride, rows apart, and no D to
 * read after it is overwritten. */
static int c_writable_in_place(int64_t batch, int64_t M, int64_t N, const simblas_mat *D,
                               const simblas_mat *C) {
    return C->dtype == SIM_F32 && C->cs == 1 && (C->rs >= N || C->rs <= -N) &&
           !(D && overlaps(C, batch, M, N, D, M, N));
}

static void plan_init(plan *pl, int64_t M, int64_t N, int64_t K, float alpha, float beta) {
    memset(pl, 0, sizeof *pl);
    pl->M = M, pl->N = N, pl->K = K, pl->alpha = alpha, pl->beta = beta;
}

/* D overlapping C other than element for element is read into a dense copy
 * first; returns the copy to free (or NULL) and points *D at what to use. */
static float *detach_d(int64_t batch, int64_t M, int64_t N, const simblas_mat **D,
                       simblas_mat *dm, const simblas_mat *C) {
    if (!*D || !overlaps(C, batch, M, N, *D, M, N) || same_geometry(C, *D)) return NULL;
    float *copy = xmalloc((size_t)(batch * M * N) * sizeof(float));
    for (int64_t b = 0; b < batch; b++) {
        mat2 d = entry(*D, b);
        for (int64_t i = 0; i < M; i++) gather(at(&d, i, 0), d.dt, d.cs, N, copy + (b * M + i) * N, 1);
    }
    *dm = (simblas_mat){copy, SIM_F32, N, 1, M * N};
    *D = dm;
    return copy;
}

/* ----------------------------------------------------------------- API */

static simblas_mat transposed(const simblas_mat *x) {
    simblas_mat t = *x;
    t.rs = x->cs;
    t.cs = x->rs;
    return t;
}

void simblas_gemm(int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                  const simblas_mat *A, const simblas_mat *B, float beta, const simblas_mat *D,
                  const simblas_mat *C) {
    if (batch <= 0 || M <= 0 || N <= 0) return;
    if (M < NR && N >= 4 * NR && B->cs != 1 && llabs(B->rs) == 1) {
        /* A few rows times a column-major B (x @ W.T, as nn.Linear does at
         * batch 1): packing B would cost more than the product.  C.T = B.T
         * @ A.T reads W's rows in place instead. */
        simblas_mat at = transposed(A), bt = transposed(B), ct = transposed(C), dt;
        if (D) dt = transposed(D);
        simblas_gemm(batch, N, M, K, alpha, &bt, &at, beta, D ? &dt : NULL, &ct);
        return;
    }
    if (beta == 0.0f) D = NULL;
    simblas_mat dm;
    float *dcopy = detach_d(batch, M, N, &D, &dm, C);
    plan pl;
    plan_init(&pl, M, N, K, alpha, beta);
    if (K <= 0 || overlaps(C, batch, M, N, A, M, K) || overlaps(C, batch, M, N, B, K, N)) {
        float *t = NULL;
        if (K > 0) {
            t = xmalloc((size_t)(batch * M * N) * sizeof(float));
            simblas_mat tm = {t, SIM_F32, N, 1, M * N};
            pl.beta = 0.0f;
            pl.c_direct = 1;
            core(&pl, batch, A, B, NULL, &tm);
        }
        finish_all(batch, M, N, t, beta, D, C);
        free(t);
    } else {
        pl.c_direct = c_writable_in_place(batch, M, N, D, C);
        core(&pl, batch, A, B, D, C);
    }
    free(dcopy);
}

void simblas_gemm_segs(int64_t M, int64_t N, int64_t K, const float *a, int64_t ars, int nseg,
                       const int64_t *seg_off, const int64_t *seg_len, const simblas_mat *B, int accumulate,
                       const simblas_mat *C) {
    if (M <= 0 || N <= 0 || K <= 0) return;
    plan pl;
    plan_init(&pl, M, N, K, 1.0f, 0.0f);
    pl.sa = a;
    pl.sars = ars;
    pl.nseg = nseg;
    pl.soff = seg_off;
    pl.slen = seg_len;
    pl.accumulate = accumulate;
    pl.boff = xmalloc((size_t)(nseg > 0 ? nseg : 1) * 2 * sizeof(int64_t));
    pl.blen = pl.boff + (nseg > 0 ? nseg : 1);
    pl.c_direct = 1;
    core(&pl, 1, NULL, B, NULL, C);
    free(pl.boff);
}

void simblas_sgemm_dense(int64_t M, int64_t N, int64_t K, const float *A, const float *B, float *C) {
    simblas_mat a = {(void *)A, SIM_F32, K, 1, 0}, b = {(void *)B, SIM_F32, N, 1, 0};
    simblas_mat c = {C, SIM_F32, N, 1, 0};
    simblas_gemm(1, M, N, K, 1.0f, &a, &b, 0.0f, NULL, &c);
}

/* ------------------------------------------------------------ uint8 GEMM */

/* The same blocking for 8-bit operands with an int32 result.  With zero
 * point 128 on both sides, (a - 128)(b - 128) = a * b' - 128 * b' where
 * b' = b - 128 is an int8, so the product is an unsigned-by-signed byte dot
 * product (AVX-512 VNNI's vpdpbusd: four byte products added into each int32
 * lane, exact) less 128 times B's column sums.  B is packed into
 * NRI-column panels of int8 in groups of four K steps ([k/4][j][4]), A into
 * MRI-row panels likewise ([k/4][r][4]), K zero-padded to a multiple of 4. */
#if defined(__AVX512F__) && defined(__AVX512VNNI__) && !defined(SIMBLAS_PLAIN_C)
#define U8_VNNI 1
#define MRI 14
#define NRI 32 /* two vectors of 16 int32 */
#else
#define U8_VNNI 0
#define MRI 4
#define NRI 16
#endif
#define KCI 1024 /* K block, a multiple of 4: A panel 14 KiB, B panel 32 KiB */
#define MCI (MRI * 20)
#define NCI 1024

static int32_t *xmalloc_i32(int64_t n) { return xmalloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t)); }

/* B[k0 : k0+kc, j0 : j0+nc] - 128 -> int8 panels [nc/NRI][kc4/4][NRI][4],
 * zero padded in both directions; colsum[j] = the block's column sums. */
static void pack_b_u8(const uint8_t *b, int64_t brs, int64_t bcs, int64_t k0, int64_t kc, int64_t kc4,
                      int64_t j0, int64_t nc, int8_t *dst, int32_t *colsum) {
    memset(dst, 0, (size_t)(((nc + NRI - 1) / NRI) * NRI * kc4));
    for (int64_t jp = 0; jp < nc; jp += NRI) {
        const int64_t n = nc - jp < NRI ? nc - jp : NRI;
        int8_t *d = dst + jp * kc4;
        int32_t sum[NRI] = {0};
        for (int64_t k = 0; k < kc; k++) {
            const uint8_t *row = b + (k0 + k) * brs + (j0 + jp) * bcs;
            int8_t *dk = d + (k / 4) * NRI * 4 + k % 4;
            if (bcs == 1)
                for (int64_t j = 0; j < n; j++) dk[j * 4] = (int8_t)(row[j] ^ 0x80);
            else
                for (int64_t j = 0; j < n; j++) dk[j * 4] = (int8_t)(row[j * bcs] ^ 0x80);
            for (int64_t j = 0; j < n; j++) sum[j] += dk[j * 4];
        }
        memcpy(colsum + jp, sum, (size_t)n * sizeof(int32_t));
    }
}

/* A[i0 : i0+mc, k0 : k0+kc] -> panels [mc/MRI][kc4/4][MRI][4], zero padded. */
static void pack_a_u8(const uint8_t *a, int64_t ars, int64_t acs, int64_t i0, int64_t mc, int64_t k0,
                      int64_t kc, int64_t kc4, uint8_t *dst) {
    for (int64_t ip = 0; ip < mc; ip += MRI) {
        const int64_t m = mc - ip < MRI ? mc - ip : MRI;
        uint8_t *d = dst + ip * kc4;
        for (int64_t r = 0; r < MRI; r++) {
            const uint8_t *row = a + (i0 + ip + r) * ars + k0 * acs;
            uint8_t *dr = d + r * 4;
            int64_t k = 0;
            if (r < m && acs == 1)
                for (; k + 4 <= kc; k += 4) memcpy(dr + (k / 4) * MRI * 4, row + k, 4);
            for (; k < kc4; k++) dr[(k / 4) * MRI * 4 + k % 4] = r < m && k < kc ? row[k * acs] : 0;
        }
    }
}

/* tile[r][j] (rows NRI apart) = A panel rows . B panel columns over kc4 / 4 groups */
static void ukr_u8(const uint8_t *ap, const int8_t *bp, int64_t kg, int m, int32_t *tile) {
#if U8_VNNI
    __m512i acc[MRI][2];
    for (int r = 0; r < MRI; r++) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
    for (int64_t k = 0; k < kg; k++) {
        const __m512i b0 = _mm512_loadu_si512(bp), b1 = _mm512_loadu_si512(bp + 64);
        for (int r = 0; r < MRI; r++) {
            if (r < m) {
                int32_t a4;
                memcpy(&a4, ap + r * 4, 4);
                const __m512i av = _mm512_set1_epi32(a4);
                acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], av, b0);
                acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], av, b1);
            }
        }
        ap += MRI * 4;
        bp += NRI * 4;
    }
    for (int r = 0; r < m; r++) {
        _mm512_storeu_si512(tile + r * NRI, acc[r][0]);
        _mm512_storeu_si512(tile + r * NRI + 16, acc[r][1]);
    }
#else
    int32_t acc[MRI][NRI];
    memset(acc, 0, sizeof acc);
    for (int64_t k = 0; k < kg; k++) {
        for (int r = 0; r < m; r++)
            for (int j = 0; j < NRI; j++) {
                int32_t s = 0;
                for (int t = 0; t < 4; t++) s += (int32_t)ap[r * 4 + t] * (int32_t)bp[j * 4 + t];
                acc[r][j] += s;
            }
        ap += MRI * 4;
        bp += NRI * 4;
    }
    for (int r = 0; r < m; r++) memcpy(tile + r * NRI, acc[r], NRI * sizeof(int32_t));
#endif
}

/* One specialization per tile height (the loop over r unrolls). */
#define U8_C(mm) case mm: ukr_u8(ap, bp, kg, mm, tile); break;
static void ukr_u8_any(const uint8_t *ap, const int8_t *bp, int64_t kg, int m, int32_t *tile) {
    switch (m) {
        U8_C(1) U8_C(2) U8_C(3) U8_C(4)
#if MRI > 4
        U8_C(5) U8_C(6) U8_C(7) U8_C(8) U8_C(9) U8_C(10) U8_C(11) U8_C(12) U8_C(13) U8_C(14)
#endif
        default: break;
    }
}

void simblas_gemm_u8(int64_t M, int64_t N, int64_t K, const uint8_t *a, int64_t ars, int64_t acs,
                     const uint8_t *b, int64_t brs, int64_t bcs, int32_t *c, int64_t crs, int64_t ccs) {
    if (M <= 0 || N <= 0) return;
    const int64_t nk = (K + KCI - 1) / KCI, kcb = nk ? (K + nk - 1) / nk : 0;
    const int64_t kcb4 = (kcb + 3) / 4 * 4, ncb = N < NCI ? N : NCI;
    const int64_t ncp = (ncb + NRI - 1) / NRI * NRI, mcp = (M < MCI ? (M + MRI - 1) / MRI : MCI / MRI) * MRI;
    int8_t *bp = xmalloc((size_t)(kcb4 * ncp > 0 ? kcb4 * ncp : 1));
    uint8_t *ap = xmalloc((size_t)(kcb4 * mcp > 0 ? kcb4 * mcp : 1));
    int32_t *colsum = xmalloc_i32(ncp), tile[MRI * NRI];
    if (K <= 0)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) c[i * crs + j * ccs] = 0;
    for (int64_t jc = 0; jc < N; jc += ncb) {
        const int64_t nc = N - jc < ncb ? N - jc : ncb;
        for (int64_t pc = 0; pc < K; pc += kcb) {
            const int64_t kc = K - pc < kcb ? K - pc : kcb, kc4 = (kc + 3) / 4 * 4;
            pack_b_u8(b, brs, bcs, pc, kc, kc4, jc, nc, bp, colsum);
            for (int64_t ic = 0; ic < M; ic += MCI) {
                const int64_t mc = M - ic < MCI ? M - ic : MCI;
                pack_a_u8(a, ars, acs, ic, mc, pc, kc, kc4, ap);
                for (int64_t jr = 0; jr < nc; jr += NRI) {
                    const int64_t n = nc - jr < NRI ? nc - jr : NRI;
                    for (int64_t ir = 0; ir < mc; ir += MRI) {
                        const int m = (int)(mc - ir < MRI ? mc - ir : MRI);
                        ukr_u8_any(ap + ir * kc4, bp + jr * kc4, kc4 / 4, m, tile);
                        for (int r = 0; r < m; r++) {
                            int32_t *cr = c + (ic + ir + r) * crs + (jc + jr) * ccs;
                            const int32_t *t = tile + r * NRI;
                            const int32_t *cs = colsum + jr;
                            if (pc == 0)
                                for (int64_t j = 0; j < n; j++) cr[j * ccs] = t[j] - 128 * cs[j];
                            else
                                for (int64_t j = 0; j < n; j++) cr[j * ccs] += t[j] - 128 * cs[j];
                        }
                    }
                }
            }
        }
    }
    free(bp);
    free(ap);
    free(colsum);
}
