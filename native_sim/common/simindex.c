/*
 * simindex.c: the simulated chips' indexing, selection and shaping kernels
 * (gather / scatter, index_select / index_add, advanced indexing and
 * index_put, top-k, max / min along a dim, cumulative sums, isin, triangles,
 * constant padding, nearest upsampling, the gradient of a slice).
 *
 * They take the same strided views as every other kernel and move elements
 * of any dtype unchanged (byte copies); the ones that add (scatter_add,
 * index_add, index_put with accumulate, the upsampling gradient, cumsum)
 * compute floating dtypes in float (PyTorch's CPU kernels' order of
 * additions; float16/bfloat16 rounded after every addition, as PyTorch's
 * Half arithmetic does, except cumsum, which accumulates float32 in double
 * and the narrow dtypes in float, as PyTorch does), integers exactly in
 * int64, wrapping, and bool as "or".  Every index is range-checked before anything is
 * written (a bad one is a data error, SIM_E_DATA); an output that shares
 * memory with an input is computed as if every input were read first.
 */
#include "simkernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

/* ------------------------------------------------------------ elements */

static inline size_t esz(const sim_view *v) { return sim_dtype_size(v->dtype); }

/* element idx[0..nd) of v */
static inline char *elem(const sim_view *v, const int64_t *idx) {
    int64_t o = 0;
    for (int d = 0; d < v->ndim; d++) o += idx[d] * v->strides[d];
    return v->base + o * (int64_t)esz(v);
}


static inline int64_t load_i64(const char *p, sim_dtype dt) {
    switch (dt) {
        case SIM_I64: { int64_t v; memcpy(&v, p, 8); return v; }
        case SIM_I32: { int32_t v; memcpy(&v, p, 4); return v; }
        case SIM_I8: return *(const int8_t *)p;
        case SIM_U8: return *(const uint8_t *)p;
        case SIM_BOOL: return *(const uint8_t *)p != 0;
        default: return (int64_t)sim_load(p, dt);
    }
}

static inline void store_i64(char *p, sim_dtype dt, int64_t v) {
    switch (dt) {
        case SIM_I64: memcpy(p, &v, 8); break;
        case SIM_I32: { int32_t w = (int32_t)(uint32_t)(uint64_t)v; memcpy(p, &w, 4); break; }
        case SIM_I8: *(int8_t *)p = (int8_t)(uint8_t)(uint64_t)v; break;
        case SIM_U8: *(uint8_t *)p = (uint8_t)(uint64_t)v; break;
        case SIM_BOOL: *(uint8_t *)p = v != 0; break;
        default: sim_store(p, dt, (double)v);
    }
}

static inline int is_float(sim_dtype dt) { return simk_is_float(dt); }

/* dst += src in dst's dtype: floats computed in float and rounded to the
 * dtype, integers wrapping in int64 */
static inline void add_into(char *dst, sim_dtype dt, const char *src, sim_dtype sdt, double scale) {
    if (dt == SIM_BOOL) { /* bool + bool: true when either is (PyTorch's bool addition) */
        *(uint8_t *)dst = (uint8_t)(*(const uint8_t *)dst || (load_i64(src, sdt) != 0 && scale != 0));
    } else if (is_float(dt)) {
        float a = (float)sim_load(dst, dt), b = (float)sim_load(src, sdt);
        sim_store(dst, dt, (double)(a + (scale == 1.0 ? b : (float)scale * b)));
    } else {
        int64_t b = load_i64(src, sdt);
        int64_t s = scale == 1.0 ? 1 : (int64_t)scale;
        store_i64(dst, dt, (int64_t)((uint64_t)load_i64(dst, dt) + (uint64_t)s * (uint64_t)b));
    }
}

static sim_status need_index(const char *fn, const char *what, const sim_view *v) {
    if (v->dtype == SIM_I64 || v->dtype == SIM_I32) return SIM_OK;
    return sim_fail(SIM_E_UNSUPPORTED, fn, "%s must be int64 or int32, got %s", what, sim_dtype_name(v->dtype));
}

static sim_status norm_dim(const char *fn, int64_t *dim, int nd) {
    int n = nd ? nd : 1;
    if (*dim < -n || *dim >= n)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "dim %lld out of range for a %d-D tensor", (long long)*dim, nd);
    if (*dim < 0) *dim += n;
    return SIM_OK;
}

static sim_status same_dtype(const char *fn, const char *what, const sim_view *a, const sim_view *out) {
    if (a->dtype == out->dtype) return SIM_OK;
    return sim_fail(SIM_E_UNSUPPORTED, fn, "%s is %s but the output is %s (mixed dtypes)", what,
                    sim_dtype_name(a->dtype), sim_dtype_name(out->dtype));
}

static sim_status same_shape(const char *fn, const char *what, const sim_view *a, const sim_view *b) {
    if (sim_same_shape(a, b)) return SIM_OK;
    char s1[160], s2[160];
    sim_shape_str(a, s1, sizeof s1);
    sim_shape_str(b, s2, sizeof s2);
    return sim_fail(SIM_E_INVALID_VALUE, fn, "%s has shape %s, expected %s", what, s1, s2);
}

/* A 0-d view treated as 1-d of one element (PyTorch's dim 0 of a scalar). */
static sim_view at_least_1d(const sim_view *v) {
    sim_view r = *v;
    if (r.ndim == 0) {
        r.ndim = 1;
        r.shape[0] = 1;
        r.strides[0] = 1;
    }
    return r;
}

/* `in` read into a dense copy when it shares memory with `out` (*own to free). */
static sim_view apart(const sim_view *in, const sim_view *out, void **own) {
    *own = NULL;
    if (!in || !in->present || !simk_views_overlap(in, out)) return in ? *in : (sim_view){0};
    sim_view d = simk_dense_like(in, in->dtype, own);
    simk_copy_view(in, &d);
    return d;
}

/* All of v's index values in row-major order, range-checked against size
 * (wrap: negative values count from the end, else they are errors). */
static sim_status read_indices(const char *fn, const sim_view *v, int64_t size, int wrap, int64_t **out) {
    int64_t n = sim_numel(v), *buf = xmalloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    int64_t idx[SIM_MAX_DIMS] = {0}, i = 0;
    if (n > 0)
        do {
            int64_t x = load_i64(elem(v, idx), v->dtype);
            if (wrap && x < 0) x += size;
            if (x < 0 || x >= size) {
                free(buf);
                return sim_fail(SIM_E_DATA, fn, "index %lld is out of range for a dim of size %lld",
                                (long long)load_i64(elem(v, idx), v->dtype), (long long)size);
            }
            buf[i++] = x;
        } while (sim_next_index(idx, v->shape, v->ndim));
    *out = buf;
    return SIM_OK;
}

/* ------------------------------------------------------- gather/scatter */

sim_status simk_gather(const char *fn, const char *kernel, const sim_view *self, int64_t dim, const sim_view *index,
                       const sim_view *out) {
    sim_status st;
    sim_view s = at_least_1d(self), ix = at_least_1d(index), o = at_least_1d(out);
    if ((st = norm_dim(fn, &dim, self->ndim)) || (st = need_index(fn, "index", index)) ||
        (st = same_dtype(fn, "self", self, out)) || (st = same_shape(fn, "out", &o, &ix)))
        return st;
    if (s.ndim != ix.ndim)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "index has %d dims, self %d (they must agree)", ix.ndim, s.ndim);
    for (int d = 0; d < s.ndim; d++)
        if (d != dim && ix.shape[d] > s.shape[d])
            return sim_fail(SIM_E_INVALID_VALUE, fn, "index is larger than self in dim %d", d);
    int64_t *iv;
    if ((st = read_indices(fn, &ix, s.shape[dim], 0, &iv))) return st;
    if ((st = sim_launch(kernel, fn))) {
        free(iv);
        return st;
    }
    void *own;
    sim_view src = apart(&s, &o, &own);
    int64_t idx[SIM_MAX_DIMS] = {0}, i = 0;
    size_t es = esz(&o);
    if (sim_numel(&o) > 0)
        do {
            int64_t keep = idx[dim];
            idx[dim] = iv[i++];
            const char *p = elem(&src, idx);
            idx[dim] = keep;
            memcpy(elem(&o, idx), p, es);
        } while (sim_next_index(idx, o.shape, o.ndim));
    free(own);
    free(iv);
    return SIM_OK;
}

sim_status simk_scatter(const char *fn, const char *kernel, const sim_view *self, int64_t dim, const sim_view *index,
                        const sim_view *src, int add, const sim_view *out) {
    sim_status st;
    sim_view s = at_least_1d(self), ix = at_least_1d(index), o = at_least_1d(out), sv = at_least_1d(src);
    if ((st = norm_dim(fn, &dim, self->ndim)) || (st = need_index(fn, "index", index)) ||
        (st = same_dtype(fn, "self", self, out)) || (st = same_shape(fn, "out", &o, &s)))
        return st;
    const int scalar = src->ndim == 0;   /* a 0-d src: one value for every index (scatter.value) */
    if (ix.ndim != s.ndim || (!scalar && sv.ndim != s.ndim))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "index, src and self must have the same number of dims");
    for (int d = 0; d < s.ndim; d++)
        if ((d != dim && ix.shape[d] > s.shape[d]) || (!scalar && ix.shape[d] > sv.shape[d]))
            return sim_fail(SIM_E_INVALID_VALUE, fn, "index is larger than self or src in dim %d", d);
    int64_t *iv;
    if ((st = read_indices(fn, &ix, s.shape[dim], 0, &iv))) return st;
    if ((st = sim_launch(kernel, fn))) {
        free(iv);
        return st;
    }
    void *own_s;
    sim_view srcv = apart(&sv, &o, &own_s);
    simk_copy_view(&s, &o);   /* out = self (a no-op in place) */
    int64_t idx[SIM_MAX_DIMS] = {0}, i = 0, zero[SIM_MAX_DIMS] = {0};
    size_t es = esz(&o);
    if (sim_numel(&ix) > 0)
        do {
            const char *p = elem(&srcv, scalar ? zero : idx);
            int64_t keep = idx[dim];
            idx[dim] = iv[i++];
            char *q = elem(&o, idx);
            idx[dim] = keep;
            if (add) add_into(q, o.dtype, p, srcv.dtype, 1.0);
            else if (srcv.dtype == o.dtype) memcpy(q, p, es);
            else sim_store(q, o.dtype, sim_load(p, srcv.dtype));
        } while (sim_next_index(idx, ix.shape, ix.ndim));
    free(own_s);
    free(iv);
    return SIM_OK;
}

/* ------------------------------------------------ index_select/index_add */

sim_status simk_index_select(const char *fn, const char *kernel, const sim_view *self, int64_t dim,
                             const sim_view *index, const sim_view *out) {
    sim_status st;
    sim_view s = at_least_1d(self), o = at_least_1d(out);
    if ((st = norm_dim(fn, &dim, self->ndim)) || (st = need_index(fn, "index", index)) ||
        (st = same_dtype(fn, "self", self, out)))
        return st;
    if (index->ndim > 1) return sim_fail(SIM_E_INVALID_VALUE, fn, "index must be 0-D or 1-D");
    int64_t n = sim_numel(index);
    if (o.ndim != s.ndim || o.shape[dim] != n)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "out must be self's shape with %lld in dim %lld", (long long)n,
                        (long long)dim);
    for (int d = 0; d < s.ndim; d++)
        if (d != dim && o.shape[d] != s.shape[d])
            return sim_fail(SIM_E_INVALID_VALUE, fn, "out must be self's shape with %lld in dim %lld", (long long)n,
                            (long long)dim);
    int64_t *iv;
    sim_view ix = at_least_1d(index);
    if ((st = read_indices(fn, &ix, s.shape[dim], 0, &iv))) return st;
    if ((st = sim_launch(kernel, fn))) {
        free(iv);
        return st;
    }
    void *own;
    sim_view src = apart(&s, &o, &own);
    int64_t es = (int64_t)esz(&o);
    for (int64_t i = 0; i < n; i++) { /* one slice per index */
        sim_view a = src, b = o;
        a.base += iv[i] * src.strides[dim] * es;
        b.base += i * o.strides[dim] * es;
        a.shape[dim] = b.shape[dim] = 1;
        simk_copy_view(&a, &b);
    }
    free(own);
    free(iv);
    return SIM_OK;
}

sim_status simk_index_add(const char *fn, const char *kernel, const sim_view *self, int64_t dim, const sim_view *index,
                          const sim_view *source, double alpha, const sim_view *out) {
    sim_status st;
    sim_view s = at_least_1d(self), o = at_least_1d(out), sv = at_least_1d(source);
    if ((st = norm_dim(fn, &dim, self->ndim)) || (st = need_index(fn, "index", index)) ||
        (st = same_dtype(fn, "self", self, out)) || (st = same_dtype(fn, "source", source, out)) ||
        (st = same_shape(fn, "out", &o, &s)))
        return st;
    if (index->ndim > 1) return sim_fail(SIM_E_INVALID_VALUE, fn, "index must be 0-D or 1-D");
    int64_t n = sim_numel(index);
    if (sv.ndim != s.ndim || sv.shape[dim] != n)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "source must be self's shape with %lld in dim %lld", (long long)n,
                        (long long)dim);
    for (int d = 0; d < s.ndim; d++)
        if (d != dim && sv.shape[d] != s.shape[d])
            return sim_fail(SIM_E_INVALID_VALUE, fn, "source must be self's shape with %lld in dim %lld",
                            (long long)n, (long long)dim);
    int64_t *iv;
    sim_view ix = at_least_1d(index);
    if ((st = read_indices(fn, &ix, s.shape[dim], 0, &iv))) return st;
    if ((st = sim_launch(kernel, fn))) {
        free(iv);
        return st;
    }
    void *own;
    sim_view src = apart(&sv, &o, &own);
    simk_copy_view(&s, &o);
    /* index by index, as PyTorch's CPU kernel adds */
    int64_t idx[SIM_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        sim_view a = src, b = o;
        a.shape[dim] = b.shape[dim] = 1;
        memset(idx, 0, sizeof idx);
        idx[dim] = 0;
        a.base += i * src.strides[dim] * (int64_t)esz(&src);
        b.base += iv[i] * o.strides[dim] * (int64_t)esz(&o);
        if (sim_numel(&a) > 0)
            do add_into(elem(&b, idx), b.dtype, elem(&a, idx), a.dtype, alpha);
            while (sim_next_index(idx, a.shape, a.ndim));
    }
    free(own);
    free(iv);
    return SIM_OK;
}

/* ------------------------------------------------------ advanced indexing */

/* The broadcast shape of the index tensors into bshape / *bnd. */
static sim_status index_shape(const char *fn, const sim_view *idx, int n, int64_t *bshape, int *bnd) {
    int nd = 0;
    for (int k = 0; k < n; k++) nd = idx[k].ndim > nd ? idx[k].ndim : nd;
    for (int d = 0; d < nd; d++) bshape[d] = 1;
    for (int k = 0; k < n; k++)
        for (int d = 0; d < idx[k].ndim; d++) {
            int64_t s = idx[k].shape[d], *t = &bshape[nd - idx[k].ndim + d];
            if (s != 1 && *t != 1 && s != *t)
                return sim_fail(SIM_E_INVALID_VALUE, fn, "index tensors do not broadcast together");
            if (s != 1) *t = s;
        }
    *bnd = nd;
    return SIM_OK;
}

/* idx[k] broadcast to bshape (stride 0 where it has size 1 or no dim) */
static sim_view broadcast_to(const sim_view *v, const int64_t *bshape, int bnd) {
    sim_view r = *v;
    r.ndim = bnd;
    for (int d = 0; d < bnd; d++) {
        int sd = d - (bnd - v->ndim);
        r.shape[d] = bshape[d];
        r.strides[d] = sd >= 0 && v->shape[sd] != 1 ? v->strides[sd] : 0;
    }
    return r;
}

typedef struct {
    int n, bnd, nd;            /* index tensors (leading dims of self), broadcast dims, self's dims */
    int64_t bshape[SIM_MAX_DIMS];
    int64_t *pos;              /* per broadcast position, the n wrapped index values */
    int64_t count;             /* broadcast positions */
} adv_index;

/* Checks and reads the index tensors (int64/int32, one per leading dim of self). */
static sim_status adv_setup(const char *fn, const sim_view *self, const sim_view *idx, int n, adv_index *a) {
    sim_status st;
    if (n < 1 || n > self->ndim)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "%d index tensors for a %d-D tensor", n, self->ndim);
    for (int k = 0; k < n; k++)
        if ((st = need_index(fn, "indices", &idx[k]))) return st;
    a->n = n;
    a->nd = self->ndim;
    if ((st = index_shape(fn, idx, n, a->bshape, &a->bnd))) return st;
    if (a->bnd + self->ndim - n > SIM_MAX_DIMS)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "the result would have more than %d dims", SIM_MAX_DIMS);
    a->count = 1;
    for (int d = 0; d < a->bnd; d++) a->count *= a->bshape[d];
    a->pos = xmalloc((size_t)(a->count * n > 0 ? a->count * n : 1) * sizeof(int64_t));
    for (int k = 0; k < n; k++) {
        sim_view b = broadcast_to(&idx[k], a->bshape, a->bnd);
        int64_t bi[SIM_MAX_DIMS] = {0}, size = self->shape[k];
        for (int64_t i = 0; i < a->count; i++) {
            int64_t x = load_i64(elem(&b, bi), b.dtype), w = x < 0 ? x + size : x;
            if (w < 0 || w >= size) {
                free(a->pos);
                return sim_fail(SIM_E_DATA, fn, "index %lld is out of bounds for dim %d of size %lld", (long long)x,
                                k, (long long)size);
            }
            a->pos[i * n + k] = w;
            sim_next_index(bi, a->bshape, a->bnd);
        }
    }
    return SIM_OK;
}

/* The view of self at broadcast position i: self's trailing dims (after the indexed ones). */
static sim_view adv_slice(const sim_view *self, const adv_index *a, int64_t i) {
    sim_view r = *self;
    int64_t off = 0;
    for (int k = 0; k < a->n; k++) off += a->pos[i * a->n + k] * self->strides[k];
    r.base += off * (int64_t)esz(self);
    r.ndim = self->ndim - a->n;
    for (int d = 0; d < r.ndim; d++) {
        r.shape[d] = self->shape[a->n + d];
        r.strides[d] = self->strides[a->n + d];
    }
    return r;
}

/* The view of a [bshape..., trailing...] tensor at broadcast position i. */
static sim_view adv_row(const sim_view *v, const adv_index *a, int64_t i) {
    sim_view r = *v;
    int64_t bi[SIM_MAX_DIMS], rem = i, off = 0;
    for (int d = a->bnd - 1; d >= 0; d--) {
        bi[d] = rem % a->bshape[d];
        rem /= a->bshape[d];
    }
    for (int d = 0; d < a->bnd; d++) off += bi[d] * v->strides[d];
    r.base += off * (int64_t)esz(v);
    r.ndim = v->ndim - a->bnd;
    for (int d = 0; d < r.ndim; d++) {
        r.shape[d] = v->shape[a->bnd + d];
        r.strides[d] = v->strides[a->bnd + d];
    }
    return r;
}

sim_status simk_index(const char *fn, const char *kernel, const sim_view *self, const sim_view *indices, int n,
                      const sim_view *out) {
    sim_status st;
    adv_index a;
    if ((st = same_dtype(fn, "self", self, out)) || (st = adv_setup(fn, self, indices, n, &a))) return st;
    int ok = out->ndim == a.bnd + self->ndim - n;
    for (int d = 0; ok && d < out->ndim; d++)
        ok = out->shape[d] == (d < a.bnd ? a.bshape[d] : self->shape[n + d - a.bnd]);
    if (!ok) {
        free(a.pos);
        return sim_fail(SIM_E_INVALID_VALUE, fn, "out must be the indices' broadcast shape followed by self's "
                        "unindexed dims");
    }
    if ((st = sim_launch(kernel, fn))) {
        free(a.pos);
        return st;
    }
    void *own;
    sim_view src = apart(self, out, &own);
    for (int64_t i = 0; i < a.count; i++) {
        sim_view s = adv_slice(&src, &a, i), o = adv_row(out, &a, i);
        simk_copy_view(&s, &o);
    }
    free(own);
    free(a.pos);
    return SIM_OK;
}

sim_status simk_index_put(const char *fn, const char *kernel, const sim_view *self, const sim_view *indices, int n,
                          const sim_view *values, int accumulate, const sim_view *out) {
    sim_status st;
    adv_index a;
    if ((st = same_dtype(fn, "self", self, out)) || (st = same_shape(fn, "out", out, self))) return st;
    if ((st = adv_setup(fn, self, indices, n, &a))) return st;
    /* values broadcast to [bshape..., self's unindexed dims] */
    int vnd = a.bnd + self->ndim - n;
    int64_t vshape[SIM_MAX_DIMS];
    for (int d = 0; d < vnd; d++) vshape[d] = d < a.bnd ? a.bshape[d] : self->shape[n + d - a.bnd];
    int ok = values->ndim <= vnd;
    for (int d = 0; ok && d < values->ndim; d++) {
        int64_t s = values->shape[d], t = vshape[vnd - values->ndim + d];
        ok = s == 1 || s == t;
    }
    if (!ok) {
        free(a.pos);
        return sim_fail(SIM_E_INVALID_VALUE, fn, "values do not broadcast to the indexed shape");
    }
    if ((st = sim_launch(kernel, fn))) {
        free(a.pos);
        return st;
    }
    void *own;
    sim_view vals = apart(values, out, &own), vb = broadcast_to(&vals, vshape, vnd);
    simk_copy_view(self, out);
    for (int64_t i = 0; i < a.count; i++) { /* in order: the last write of a repeated index wins */
        sim_view o = adv_slice(out, &a, i), v = adv_row(&vb, &a, i);
        if (!accumulate) {
            simk_copy_view(&v, &o);
            continue;
        }
        int64_t idx[SIM_MAX_DIMS] = {0};
        if (sim_numel(&o) > 0)
            do add_into(elem(&o, idx), o.dtype, elem(&v, idx), v.dtype, 1.0);
            while (sim_next_index(idx, o.shape, o.ndim));
    }
    free(own);
    free(a.pos);
    return SIM_OK;
}

/* ------------------------------------------------------ sort-like */

typedef struct {
    double v;
    int64_t i;
    int nan;
} keyed;

/* NaN is the largest value (PyTorch's topk / max); ties by position */
static int cmp_desc(const void *pa, const void *pb) {
    const keyed *a = pa, *b = pb;
    if (a->nan != b->nan) return a->nan ? -1 : 1;
    if (!a->nan && a->v != b->v) return a->v > b->v ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}
static int cmp_asc(const void *pa, const void *pb) {
    const keyed *a = pa, *b = pb;
    if (a->nan != b->nan) return a->nan ? 1 : -1;
    if (!a->nan && a->v != b->v) return a->v < b->v ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

/* keyed values of an integer tensor compare exactly as int64 through their
 * double keys only below 2^53; above, the order of ties is by position */
static inline keyed key_of(const char *p, sim_dtype dt, int64_t i) {
    keyed k;
    k.i = i;
    if (is_float(dt)) {
        k.v = sim_load(p, dt);
        k.nan = k.v != k.v;
    } else {
        k.v = (double)load_i64(p, dt);
        k.nan = 0;
    }
    return k;
}

/* Iterates the rows along dim of v: calls fn(row view) for each. */
typedef void (*row_fn)(void *ctx, const sim_view *const *rows, int nrows);

static void each_row(const sim_view *const *vs, int nv, int64_t dim, row_fn fn, void *ctx) {
    const sim_view *v0 = vs[0];
    int nd = v0->ndim;
    int64_t shape[SIM_MAX_DIMS], idx[SIM_MAX_DIMS] = {0};
    int hd = 0;
    for (int d = 0; d < nd; d++)
        if (d != dim) shape[hd++] = v0->shape[d];
    for (int d = 0; d < hd; d++)
        if (shape[d] == 0) return;
    do {
        sim_view rows[4];
        const sim_view *rp[4];
        for (int k = 0; k < nv; k++) {
            rows[k] = *vs[k];
            int64_t off = 0;
            for (int d = 0, j = 0; d < nd; d++)
                if (d != dim) off += idx[j++] * vs[k]->strides[d];
            rows[k].base += off * (int64_t)esz(vs[k]);
            rows[k].ndim = 1;
            rows[k].shape[0] = nd ? vs[k]->shape[dim] : 1;
            rows[k].strides[0] = nd ? vs[k]->strides[dim] : 1;
            rp[k] = &rows[k];
        }
        fn(ctx, rp, nv);
    } while (sim_next_index(idx, shape, hd));
}

typedef struct {
    int64_t k;
    int largest;
    keyed *buf;
} topk_ctx;

/* the k largest (smallest) of a row, in order (also when PyTorch's sorted is
 * false: any order is then right), ties by position */
static void topk_row(void *vc, const sim_view *const *r, int nr) {
    (void)nr;
    topk_ctx *c = vc;
    const sim_view *x = r[0], *vals = r[1], *inds = r[2];
    int64_t D = x->shape[0], es = (int64_t)esz(x);
    for (int64_t j = 0; j < D; j++) c->buf[j] = key_of(x->base + j * x->strides[0] * es, x->dtype, j);
    qsort(c->buf, (size_t)D, sizeof(keyed), c->largest ? cmp_desc : cmp_asc);
    for (int64_t j = 0; j < c->k; j++) {
        int64_t src = c->buf[j].i;
        memcpy(vals->base + j * vals->strides[0] * es, x->base + src * x->strides[0] * es, (size_t)es);
        store_i64(inds->base + j * inds->strides[0] * (int64_t)esz(inds), inds->dtype, src);
    }
}

/* out's shape is in's with dim of size n */
static sim_status shape_along(const char *fn, const char *what, const sim_view *in, int64_t dim, int64_t n,
                              const sim_view *out) {
    int ok = out->ndim == in->ndim;
    for (int d = 0; ok && d < in->ndim; d++) ok = out->shape[d] == (d == dim ? n : in->shape[d]);
    if (in->ndim == 0) ok = out->ndim == 0 && n == 1;
    if (ok) return SIM_OK;
    return sim_fail(SIM_E_INVALID_VALUE, fn, "%s must be the input's shape with %lld in dim %lld", what,
                    (long long)n, (long long)dim);
}

sim_status simk_topk(const char *fn, const char *kernel, const sim_view *self, int64_t k, int64_t dim, int largest,
                     const sim_view *values, const sim_view *indices) {
    sim_status st;
    if ((st = norm_dim(fn, &dim, self->ndim)) || (st = same_dtype(fn, "self", self, values))) return st;
    if (indices->dtype != SIM_I64) return sim_fail(SIM_E_UNSUPPORTED, fn, "indices must be int64");
    int64_t D = self->ndim ? self->shape[dim] : 1;
    if (k < 0 || k > D)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "k=%lld is out of range for a dim of size %lld", (long long)k,
                        (long long)D);
    if (self->dtype == SIM_BOOL) return sim_fail(SIM_E_UNSUPPORTED, fn, "topk takes no bool tensors");
    if ((st = shape_along(fn, "values", self, dim, k, values)) || (st = shape_along(fn, "indices", self, dim, k, indices)))
        return st;
    if ((st = sim_launch(kernel, fn))) return st;
    void *own;
    sim_view in = apart(self, values, &own), in1 = at_least_1d(&in), v1 = at_least_1d(values),
             i1 = at_least_1d(indices);
    topk_ctx c = {k, largest, xmalloc((size_t)(D > 0 ? D : 1) * sizeof(keyed))};
    const sim_view *vs[3] = {&in1, &v1, &i1};
    if (k > 0) each_row(vs, 3, dim, topk_row, &c);
    free(c.buf);
    free(own);
    return SIM_OK;
}

typedef struct {
    int is_min;
} minmax_ctx;

/* the maximum (minimum) of a row and the position of its first occurrence;
 * a NaN is the extreme (the first NaN), as in PyTorch */
static void minmax_row(void *vc, const sim_view *const *r, int nr) {
    const minmax_ctx *c = vc;
    const sim_view *x = r[0], *inds = r[nr - 1];
    int64_t D = x->shape[0], es = (int64_t)esz(x), best = 0;
    keyed b = key_of(x->base, x->dtype, 0);
    for (int64_t j = 1; j < D && !b.nan; j++) {
        keyed e = key_of(x->base + j * x->strides[0] * es, x->dtype, j);
        if (e.nan || (c->is_min ? e.v < b.v : e.v > b.v)) b = e, best = j;
        else if (!is_float(x->dtype) && e.v == b.v) { /* above 2^53, the int64 values themselves */
            int64_t ev = load_i64(x->base + j * x->strides[0] * es, x->dtype),
                    bv = load_i64(x->base + best * x->strides[0] * es, x->dtype);
            if (c->is_min ? ev < bv : ev > bv) b = e, best = j;
        }
    }
    if (nr == 3) memcpy(r[1]->base, x->base + best * x->strides[0] * es, (size_t)es);
    store_i64(inds->base, inds->dtype, best);
}

sim_status simk_minmax_dim(const char *fn, const char *kernel, const sim_view *self, int64_t dim, int keepdim,
                           int is_min, const sim_view *values, const sim_view *indices) {
    sim_status st;
    if ((st = norm_dim(fn, &dim, self->ndim))) return st;
    if (values && values->present && (st = same_dtype(fn, "self", self, values))) return st;
    if (indices->dtype != SIM_I64) return sim_fail(SIM_E_UNSUPPORTED, fn, "indices must be int64");
    if (self->dtype == SIM_BOOL) return sim_fail(SIM_E_UNSUPPORTED, fn, "takes no bool tensors");
    int64_t D = self->ndim ? self->shape[dim] : 1;
    if (D == 0) return sim_fail(SIM_E_INVALID_VALUE, fn, "the reduced dim is empty (no maximum or minimum)");
    /* the output: self's shape without dim, or with 1 there (keepdim) */
    const sim_view *outs[2] = {values && values->present ? values : NULL, indices};
    for (int k = 0; k < 2; k++) {
        if (!outs[k]) continue;
        sim_view want = *self;
        if (keepdim || self->ndim == 0) {
            if (self->ndim) want.shape[dim] = 1;
        } else {
            for (int d = (int)dim; d + 1 < self->ndim; d++) want.shape[d] = self->shape[d + 1];
            want.ndim = self->ndim - 1;
        }
        if ((st = same_shape(fn, k ? "indices" : "values", outs[k], &want))) return st;
    }
    if ((st = sim_launch(kernel, fn))) return st;
    void *own = NULL;
    sim_view in = apart(self, outs[0] ? outs[0] : indices, &own), in1 = at_least_1d(&in);
    /* the outputs viewed with dim kept (size 1, stride 0) so rows line up */
    sim_view ov[2];
    for (int k = 0; k < 2; k++) {
        if (!outs[k]) continue;
        ov[k] = *outs[k];
        if (!keepdim && self->ndim) {
            for (int d = self->ndim - 1; d > dim; d--) {
                ov[k].shape[d] = ov[k].shape[d - 1];
                ov[k].strides[d] = ov[k].strides[d - 1];
            }
            ov[k].ndim = self->ndim;
        }
        ov[k] = at_least_1d(&ov[k]);
        ov[k].shape[dim] = D;   /* walked by each_row, one element per row */
        ov[k].strides[dim] = 0;
    }
    minmax_ctx c = {is_min};
    const sim_view *vs3[3] = {&in1, &ov[0], &ov[1]}, *vs2[2] = {&in1, &ov[1]};
    if (outs[0]) each_row(vs3, 3, dim, minmax_row, &c);
    else each_row(vs2, 2, dim, minmax_row, &c);
    free(own);
    return SIM_OK;
}

/* ------------------------------------------------------------- cumsum */

typedef struct {
    int dummy;
} cumsum_ctx;

static void cumsum_row(void *vc, const sim_view *const *r, int nr) {
    (void)vc;
    (void)nr;
    const sim_view *x = r[0], *o = r[1];
    int64_t D = x->shape[0], xe = (int64_t)esz(x), oe = (int64_t)esz(o);
    if (is_float(o->dtype)) {
        /* PyTorch accumulates float32 in double, float16 / bfloat16 in float */
        double acc = 0;
        float accf = 0;
        for (int64_t j = 0; j < D; j++) {
            double v = sim_load(x->base + j * x->strides[0] * xe, x->dtype);
            if (o->dtype == SIM_F32) {
                acc += v;
                sim_store(o->base + j * o->strides[0] * oe, o->dtype, (double)(float)acc);
            } else {
                accf += (float)v;
                sim_store(o->base + j * o->strides[0] * oe, o->dtype, (double)accf);
            }
        }
    } else {
        uint64_t acc = 0;
        for (int64_t j = 0; j < D; j++) {
            acc += (uint64_t)load_i64(x->base + j * x->strides[0] * xe, x->dtype);
            store_i64(o->base + j * o->strides[0] * oe, o->dtype, (int64_t)acc);
        }
    }
}

sim_status simk_cumsum(const char *fn, const char *kernel, const sim_view *self, int64_t dim, const sim_view *out) {
    sim_status st;
    if ((st = norm_dim(fn, &dim, self->ndim)) || (st = same_shape(fn, "out", out, self))) return st;
    if (is_float(self->dtype) ? out->dtype != self->dtype : out->dtype != SIM_I64)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "cumsum of %s gives %s, not %s", sim_dtype_name(self->dtype),
                        is_float(self->dtype) ? sim_dtype_name(self->dtype) : "int64", sim_dtype_name(out->dtype));
    if ((st = sim_launch(kernel, fn))) return st;
    void *own;
    sim_view in = apart(self, out, &own), in1 = at_least_1d(&in), o1 = at_least_1d(out);
    const sim_view *vs[2] = {&in1, &o1};
    cumsum_ctx c = {0};
    each_row(vs, 2, dim, cumsum_row, &c);
    free(own);
    return SIM_OK;
}

/* ----------------------------------------------------------------- isin */

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}
static int cmp_f64(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

sim_status simk_isin(const char *fn, const char *kernel, const sim_view *elements, const sim_view *test, int invert,
                     const sim_view *out) {
    sim_status st;
    if ((st = same_shape(fn, "out", out, elements))) return st;
    if (out->dtype != SIM_BOOL) return sim_fail(SIM_E_UNSUPPORTED, fn, "out must be bool");
    if (elements->dtype == SIM_BOOL || test->dtype == SIM_BOOL)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "isin takes no bool tensors");
    if ((st = sim_launch(kernel, fn))) return st;
    /* integers against integers exactly, anything else in double (both
     * promote to a floating dtype that holds them); NaN is in nothing */
    const int ints = !is_float(elements->dtype) && !is_float(test->dtype);
    int64_t m = sim_numel(test), n = sim_numel(elements);
    void *set = xmalloc((size_t)(m > 0 ? m : 1) * 8);
    int64_t idx[SIM_MAX_DIMS] = {0}, i = 0;
    if (m > 0)
        do {
            const char *p = elem(test, idx);
            if (ints) {
                ((int64_t *)set)[i++] = load_i64(p, test->dtype);
            } else {
                double v = sim_load(p, test->dtype);
                if (v == v) ((double *)set)[i++] = v;   /* NaN matches nothing: left out of the ordered set */
            }
        } while (sim_next_index(idx, test->shape, test->ndim));
    m = i;
    qsort(set, (size_t)m, 8, ints ? cmp_i64 : cmp_f64);
    uint8_t *res = xmalloc((size_t)(n > 0 ? n : 1));
    memset(idx, 0, sizeof idx);
    i = 0;
    if (n > 0)
        do {
            const char *p = elem(elements, idx);
            int found;
            if (ints) {
                int64_t v = load_i64(p, elements->dtype);
                found = bsearch(&v, set, (size_t)m, 8, cmp_i64) != NULL;
            } else {
                double v = sim_load(p, elements->dtype);
                found = v == v && bsearch(&v, set, (size_t)m, 8, cmp_f64) != NULL;
            }
            res[i++] = (uint8_t)(found != invert);
        } while (sim_next_index(idx, elements->shape, elements->ndim));
    memset(idx, 0, sizeof idx);
    i = 0;
    if (n > 0)
        do *(uint8_t *)elem(out, idx) = res[i++];
        while (sim_next_index(idx, out->shape, out->ndim));
    free(res);
    free(set);
    return SIM_OK;
}

/* ------------------------------------------------------------- shaping */

sim_status simk_triangle(const char *fn, const char *kernel, const sim_view *self, int64_t diagonal, int upper,
                         const sim_view *out) {
    sim_status st;
    if ((st = same_shape(fn, "out", out, self)) || (st = same_dtype(fn, "self", self, out))) return st;
    if (self->ndim < 2) return sim_fail(SIM_E_INVALID_VALUE, fn, "needs at least 2 dims, got %d", self->ndim);
    if ((st = sim_launch(kernel, fn))) return st;
    simk_copy_view(self, out);   /* then zero what lies on the other side of the diagonal */
    int nd = out->ndim;
    int64_t R = out->shape[nd - 2], C = out->shape[nd - 1], es = (int64_t)esz(out);
    int64_t idx[SIM_MAX_DIMS] = {0};
    if (sim_numel(out) == 0) return SIM_OK;
    do {
        for (int64_t r = 0; r < R; r++) {
            /* tril keeps c <= r + diagonal, triu keeps c >= r + diagonal */
            int64_t lo = upper ? 0 : r + diagonal + 1, hi = upper ? r + diagonal : C;
            if (lo < 0) lo = 0;
            if (hi > C) hi = C;
            idx[nd - 2] = r;
            for (int64_t c = lo; c < hi; c++) {
                idx[nd - 1] = c;
                memset(elem(out, idx), 0, (size_t)es);
            }
        }
        idx[nd - 2] = idx[nd - 1] = 0;
    } while (nd > 2 && sim_next_index(idx, out->shape, nd - 2));
    return SIM_OK;
}

sim_status simk_constant_pad(const char *fn, const char *kernel, const sim_view *self, const int64_t *pad, int64_t npad,
                             double value, const sim_view *out) {
    sim_status st;
    if (npad < 0 || npad % 2 || npad / 2 > self->ndim || (npad && !pad))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "pad has %lld values for a %d-D tensor (expected an even number, "
                        "at most twice the dims)", (long long)npad, self->ndim);
    if ((st = same_dtype(fn, "self", self, out))) return st;
    /* pad[2i], pad[2i+1]: before and after dim ndim-1-i (negative: cropped) */
    int nd = self->ndim;
    int64_t before[SIM_MAX_DIMS] = {0};
    for (int d = 0; d < nd; d++) {
        int i = nd - 1 - d;
        int64_t b = 2 * i < npad ? pad[2 * i] : 0, a = 2 * i + 1 < npad ? pad[2 * i + 1] : 0;
        before[d] = b;
        if (out->ndim != nd || out->shape[d] != self->shape[d] + b + a || self->shape[d] + b + a < 0)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "out's dim %d must be %lld", d, (long long)(self->shape[d] + b + a));
    }
    if ((st = sim_launch(kernel, fn))) return st;
    void *own;
    sim_view in = apart(self, out, &own);
    simk_fill(out, value);
    /* the part of the input that survives, copied into its place */
    sim_view s = in, o = *out;
    for (int d = 0; d < nd; d++) {
        int64_t lo = before[d] < 0 ? -before[d] : 0;                       /* first input element kept */
        int64_t olo = before[d] > 0 ? before[d] : 0;                       /* where it goes */
        int64_t n = in.shape[d] - lo;
        if (olo + n > out->shape[d]) n = out->shape[d] - olo;
        if (n < 0) n = 0;
        s.base += lo * in.strides[d] * (int64_t)esz(&in);
        o.base += olo * out->strides[d] * (int64_t)esz(out);
        s.shape[d] = o.shape[d] = n;
    }
    simk_copy_view(&s, &o);
    free(own);
    return SIM_OK;
}

/* PyTorch's nearest source index: floor(dst * scale) with scale = 1 / scales
 * when the caller gave one (> 0), else in / out, clamped to in - 1 */
static inline int64_t nearest_src(int64_t dst, int64_t in, int64_t out, double scales) {
    float scale = scales > 0 ? (float)(1.0 / scales) : (float)in / (float)out;
    int64_t s = (int64_t)floorf((float)dst * scale);
    return s < in - 1 ? s : in - 1;
}

sim_status simk_upsample_nearest2d(const char *fn, const char *kernel, const sim_view *in, double scale_h,
                                   double scale_w, const sim_view *out) {
    sim_status st;
    if (in->ndim != 4 || out->ndim != 4)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "input and output must be 4-D [N, C, H, W]");
    if (out->shape[0] != in->shape[0] || out->shape[1] != in->shape[1] || out->shape[2] < 1 || out->shape[3] < 1 ||
        (in->shape[2] < 1 || in->shape[3] < 1))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "output must be [N, C, OH, OW] of the input's N and C, sizes >= 1");
    if ((st = same_dtype(fn, "input", in, out))) return st;
    if ((st = sim_launch(kernel, fn))) return st;
    void *own;
    sim_view x = apart(in, out, &own);
    int64_t H = in->shape[2], W = in->shape[3], OH = out->shape[2], OW = out->shape[3];
    int64_t *sw = xmalloc((size_t)OW * sizeof(int64_t));
    for (int64_t j = 0; j < OW; j++) sw[j] = nearest_src(j, W, OW, scale_w);
    size_t es = esz(out);
    int64_t idx[4] = {0}, sidx[4];
    if (sim_numel(out) > 0)
        for (idx[0] = 0; idx[0] < out->shape[0]; idx[0]++)
            for (idx[1] = 0; idx[1] < out->shape[1]; idx[1]++)
                for (idx[2] = 0; idx[2] < OH; idx[2]++) {
                    sidx[0] = idx[0], sidx[1] = idx[1], sidx[2] = nearest_src(idx[2], H, OH, scale_h);
                    for (idx[3] = 0; idx[3] < OW; idx[3]++) {
                        sidx[3] = sw[idx[3]];
                        memcpy(elem(out, idx), elem(&x, sidx), es);
                    }
                }
    free(sw);
    free(own);
    return SIM_OK;
}

sim_status simk_upsample_nearest2d_backward(const char *fn, const char *kernel, const sim_view *grad, double scale_h,
                                            double scale_w, const sim_view *out) {
    sim_status st;
    if (grad->ndim != 4 || out->ndim != 4)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "grad_output and the result must be 4-D [N, C, H, W]");
    if (out->shape[0] != grad->shape[0] || out->shape[1] != grad->shape[1] || out->shape[2] < 1 || out->shape[3] < 1)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "the result must be [N, C, H, W] of grad_output's N and C");
    if ((st = same_dtype(fn, "grad_output", grad, out))) return st;
    if (!is_float(out->dtype)) return sim_fail(SIM_E_UNSUPPORTED, fn, "takes floating tensors");
    if ((st = sim_launch(kernel, fn))) return st;
    void *own;
    sim_view g = apart(grad, out, &own);
    int64_t N = out->shape[0], C = out->shape[1], H = out->shape[2], W = out->shape[3];
    int64_t OH = grad->shape[2], OW = grad->shape[3];
    /* per input pixel, the sum of the gradients of the outputs that copied it, in float */
    float *acc = xmalloc((size_t)(H * W > 0 ? H * W : 1) * sizeof(float));
    int64_t *sw = xmalloc((size_t)(OW > 0 ? OW : 1) * sizeof(int64_t));
    for (int64_t j = 0; j < OW; j++) sw[j] = nearest_src(j, W, OW, scale_w);
    int64_t idx[4], gi[4];
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            memset(acc, 0, (size_t)(H * W) * sizeof(float));
            gi[0] = n, gi[1] = c;
            for (gi[2] = 0; gi[2] < OH; gi[2]++) {
                int64_t h = nearest_src(gi[2], H, OH, scale_h);
                for (gi[3] = 0; gi[3] < OW; gi[3]++) acc[h * W + sw[gi[3]]] += (float)sim_load(elem(&g, gi), g.dtype);
            }
            idx[0] = n, idx[1] = c;
            for (idx[2] = 0; idx[2] < H; idx[2]++)
                for (idx[3] = 0; idx[3] < W; idx[3]++)
                    sim_store(elem(out, idx), out->dtype, acc[idx[2] * W + idx[3]]);
        }
    free(sw);
    free(acc);
    free(own);
    return SIM_OK;
}

sim_status simk_slice_backward(const char *fn, const char *kernel, const sim_view *grad, int64_t dim, int64_t start,
                               int64_t end, int64_t step, const sim_view *out) {
    sim_status st;
    if ((st = norm_dim(fn, &dim, out->ndim)) || (st = same_dtype(fn, "grad_output", grad, out))) return st;
    if (out->ndim == 0) return sim_fail(SIM_E_INVALID_VALUE, fn, "the result must have at least one dim");
    if (step < 1) return sim_fail(SIM_E_INVALID_VALUE, fn, "step must be >= 1, got %lld", (long long)step);
    /* PyTorch's slice bounds: negative from the end, then clamped to [0, size] */
    int64_t size = out->shape[dim];
    if (start < 0) start += size;
    if (end < 0) end += size;
    start = start < 0 ? 0 : start > size ? size : start;
    end = end < start ? start : end > size ? size : end;
    sim_view slice = *out;
    slice.shape[dim] = (end - start + step - 1) / step;
    slice.strides[dim] = out->strides[dim] * step;
    slice.base += start * out->strides[dim] * (int64_t)esz(out);
    if ((st = same_shape(fn, "grad_output", grad, &slice))) return st;
    if ((st = sim_launch(kernel, fn))) return st;
    void *own;
    sim_view g = apart(grad, out, &own);
    simk_fill(out, 0.0);
    simk_copy_view(&g, &slice);
    free(own);
    return SIM_OK;
}
