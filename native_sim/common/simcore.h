/*
 * simcore: the machinery shared by the simulated chips (never exported).
 *
 * Each simulated runtime (x1, th1) is a separate shared library with its own
 * public header, names, descriptor struct and status codes.  Underneath, both
 * use this core: a device address space that the host cannot dereference, a
 * capacity-limited allocator, copy engines with counters, fault injection,
 * strict mode, and kernels over strided views.
 */
#ifndef FLSIM_SIMCORE_H
#define FLSIM_SIMCORE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SIM_HIDDEN __attribute__((visibility("hidden")))
#define SIM_MAX_DIMS 8

typedef enum {
    SIM_OK = 0,
    SIM_E_INVALID_VALUE,   /* bad argument (null pointer, shape mismatch, ...) */
    SIM_E_OOM,             /* allocation past capacity */
    SIM_E_UNSUPPORTED,     /* configuration the hardware cannot run */
    SIM_E_DEVICE,          /* device fault (injected) */
    SIM_E_NOT_INITIALIZED,
    SIM_E_BAD_ADDRESS,     /* device address outside any live allocation */
    SIM_E_DATA,            /* data-dependent failure (index out of range) */
    SIM_E_COUNT
} sim_status;

typedef enum {
    SIM_F32 = 0, SIM_F16, SIM_BF16, SIM_I8, SIM_U8, SIM_I32, SIM_I64, SIM_BOOL, SIM_F64,
    SIM_DTYPE_COUNT
} sim_dtype;

/* A tensor as the kernels see it: a resolved host pointer plus geometry. */
typedef struct {
    char *base;                 /* resolved pointer to element [0,...,0] */
    int ndim;
    int64_t shape[SIM_MAX_DIMS];
    int64_t strides[SIM_MAX_DIMS]; /* in elements; 0 = broadcast */
    sim_dtype dtype;
    int present;                /* 0 for an optional tensor that was not given */
} sim_view;

typedef struct {
    uint64_t h2d_bytes, h2d_calls, h2d_batch_calls;
    uint64_t d2h_bytes, d2h_calls;
    uint64_t d2d_bytes, d2d_calls;
    uint64_t mapped_bytes, map_calls, unmap_calls;
    uint64_t live_bytes, peak_bytes, live_mapped_bytes;
    uint64_t alloc_calls, free_calls;
    uint64_t kernel_launches;
} sim_counters;

#define SIM_KERNEL_NAME_LEN 32
#define SIM_MAX_KERNELS 192 /* distinct kernel names counted */

/* ---- device life cycle ---- */
SIM_HIDDEN void sim_configure(const char *chip, const char *env_prefix, uint64_t va_base,
                              uint64_t default_capacity);
SIM_HIDDEN sim_status sim_init(uint64_t capacity);
SIM_HIDDEN sim_status sim_shutdown(void);
SIM_HIDDEN int sim_is_initialized(void);
SIM_HIDDEN sim_status sim_require_init(const char *fn);

/* ---- errors ---- */
SIM_HIDDEN sim_status sim_fail(sim_status st, const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
SIM_HIDDEN const char *sim_last_error(void);
SIM_HIDDEN void sim_clear_error(void);
SIM_HIDDEN int sim_strict(void);

/* ---- memory ---- */
SIM_HIDDEN sim_status sim_malloc(uint64_t *out, uint64_t nbytes, const char *fn);
SIM_HIDDEN sim_status sim_free(uint64_t addr, const char *fn);
SIM_HIDDEN sim_status sim_map(const void *host, uint64_t nbytes, uint64_t *out, const char *fn);
SIM_HIDDEN sim_status sim_unmap(uint64_t addr, const char *fn);
SIM_HIDDEN sim_status sim_resolve(uint64_t addr, uint64_t nbytes, char **host, const char *fn,
                                  const char *what);
SIM_HIDDEN sim_status sim_h2d(uint64_t dst, const void *src, uint64_t n, const char *fn);
SIM_HIDDEN sim_status sim_d2h(void *dst, uint64_t src, uint64_t n, const char *fn);
SIM_HIDDEN sim_status sim_d2d(uint64_t dst, uint64_t src, uint64_t n, const char *fn);
SIM_HIDDEN sim_status sim_h2d_batch(const uint64_t *dst, const void *const *src, const size_t *n,
                                    size_t count, const char *fn);
SIM_HIDDEN void sim_mem_info(uint64_t *free_bytes, uint64_t *total_bytes);

/* ---- counters and faults ---- */
SIM_HIDDEN void sim_get_counters(sim_counters *out);
SIM_HIDDEN void sim_reset_counters(void);
SIM_HIDDEN int sim_kernel_counters(char (*names)[SIM_KERNEL_NAME_LEN], uint64_t *counts, int max);
SIM_HIDDEN uint64_t sim_kernel_count(const char *name);
/* Counts one launch of `kernel` and applies injected faults; call after validation. */
SIM_HIDDEN sim_status sim_launch(const char *kernel, const char *fn);
SIM_HIDDEN sim_status sim_set_faults(const char *spec);

/* ---- views ---- */
SIM_HIDDEN size_t sim_dtype_size(sim_dtype dt);
SIM_HIDDEN const char *sim_dtype_name(sim_dtype dt);
SIM_HIDDEN int64_t sim_numel(const sim_view *v);
SIM_HIDDEN int sim_is_contiguous(const sim_view *v);
SIM_HIDDEN int sim_same_shape(const sim_view *a, const sim_view *b);
SIM_HIDDEN void sim_shape_str(const sim_view *v, char *buf, size_t n);
/* Resolves a device address + geometry into a view, checking that every
 * element it can reach lies inside one live allocation. */
SIM_HIDDEN sim_status sim_make_view(sim_view *v, uint64_t addr, int ndim, const int64_t *shape,
                                    const int64_t *strides, sim_dtype dt, const char *fn,
                                    const char *what);

/* ---- element conversion ---- */
SIM_HIDDEN float sim_h2f(uint16_t h);
SIM_HIDDEN uint16_t sim_f2h(float f);
SIM_HIDDEN float sim_bf2f(uint16_t b);
SIM_HIDDEN uint16_t sim_f2bf(float f);
SIM_HIDDEN double sim_load(const char *p, sim_dtype dt);
SIM_HIDDEN void sim_store(char *p, sim_dtype dt, double v);

/* The same conversions inline and branch-free, so that loops over them
 * vectorize; bit-identical to the functions above for every input. */
static inline uint32_t sim_fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float sim_bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float sim_h2f_inline(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu, exp = em >> 10;
    uint32_t normal = (em << 13) + (112u << 23);  /* rebias 15 -> 127 */
    uint32_t special = (em << 13) + (224u << 23); /* inf / NaN keep their payload */
    uint32_t sub = sim_fbits((float)em * 5.9604644775390625e-8f); /* mantissa * 2^-24, exact */
    return sim_bitsf((exp == 0 ? sub : exp == 31 ? special : normal) | sign);
}
/* round to nearest even (F. Giesen's float_to_half_fast3_rtne, every case computed, one selected) */
static inline uint16_t sim_f2h_inline(float x) {
    const uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    uint32_t f = sim_fbits(x), sign = f & 0x80000000u;
    f ^= sign;
    uint32_t big = f > 0x7f800000u ? 0x7e00u : 0x7c00u; /* NaN, or inf / overflow */
    uint32_t tiny = sim_fbits(sim_bitsf(f) + sim_bitsf(denorm_magic)) - denorm_magic;
    uint32_t normal = (f + 0xc8000fffu + ((f >> 13) & 1u)) >> 13; /* rebias, round half to even */
    uint32_t o = f >= (143u << 23) ? big : f < (113u << 23) ? tiny : normal;
    return (uint16_t)(o | (sign >> 16));
}
static inline float sim_bf2f_inline(uint16_t b) { return sim_bitsf((uint32_t)b << 16); }
static inline uint16_t sim_f2bf_inline(float x) {
    uint32_t u = sim_fbits(x);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : r); /* quiet NaN */
}

/* ---- element loops ----
 * sim_iter walks several views of one shape row by row: size-1 dims are
 * dropped and neighbouring dims that are contiguous in every view merged, so
 * dense views are one long row; the multi-index arithmetic happens once per
 * row, incrementally (no division per element).  Rows come in row-major
 * order of the shape.  Use:
 *
 *     sim_iter it;
 *     if (sim_iter_views(&it, 2, (const sim_view *[]){out, in}))
 *         do { ... it.p[k] (row start), it.s[k] (element stride), it.n ... }
 *         while (sim_iter_next(&it));
 */
#define SIM_ITER_MAX_OPS 6
typedef struct {
    int nop, nd;                                   /* operands, collapsed dims (>= 1) */
    int64_t n;                                     /* row length */
    char *p[SIM_ITER_MAX_OPS];                     /* start of the current row */
    int64_t s[SIM_ITER_MAX_OPS];                   /* stride along the row, in elements */
    int64_t shape[SIM_MAX_DIMS];
    int64_t bstride[SIM_ITER_MAX_OPS][SIM_MAX_DIMS]; /* in bytes */
    int64_t idx[SIM_MAX_DIMS];
} sim_iter;

/* Operand k: base[k], strides[k] (elements of es[k] bytes) over `shape`.
 * Returns 0 if the shape is empty (no row to visit). */
SIM_HIDDEN int sim_iter_init(sim_iter *it, int ndim, const int64_t *shape, int nop, char *const *base,
                             const int64_t *const *strides, const int64_t *es);
/* The views share v[0]'s shape. */
SIM_HIDDEN int sim_iter_views(sim_iter *it, int nop, const sim_view *const *v);

static inline int sim_iter_next(sim_iter *it) {
    for (int d = it->nd - 2; d >= 0; d--) {
        if (++it->idx[d] < it->shape[d]) {
            for (int k = 0; k < it->nop; k++) it->p[k] += it->bstride[k][d];
            return 1;
        }
        it->idx[d] = 0;
        for (int k = 0; k < it->nop; k++) it->p[k] -= it->bstride[k][d] * (it->shape[d] - 1);
    }
    return 0;
}

/* Dense float copies of views (row-major in the view's own shape) and back. */
SIM_HIDDEN float *sim_gather(const sim_view *v); /* malloc'd; NULL on OOM */
SIM_HIDDEN void sim_scatter(const float *src, const sim_view *v);

/* ---- device timer: a kernel or copy, from its launch to the end of its runtime call ---- */
SIM_HIDDEN void sim_op_done(void);           /* each runtime's status conversion calls it on return */
SIM_HIDDEN uint64_t sim_last_op_ns(void);    /* the calling thread's last kernel or copy */
SIM_HIDDEN uint64_t sim_device_ns_total(void); /* every kernel and copy since init/reset */

/* ---- debug: perturb one kernel's output (autocompare tests) ---- */
SIM_HIDDEN sim_status sim_set_corrupt(const char *kernel); /* "" or NULL: off */
/* Adds 1 to the first element of v if the running launch is of the corrupt kernel (once per launch). */
SIM_HIDDEN void sim_corrupt_output(const sim_view *v);
SIM_HIDDEN uint64_t sim_corruptions(void);

#endif
