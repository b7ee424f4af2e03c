/*
 * simrng.c: the simulated chips' random numbers, counter-based like a GPU's.
 *
 * The generator is Philox4x32-10 (Salmon et al., "Parallel random numbers:
 * as easy as 1, 2, 3", SC'11; the engine of PyTorch's CUDA generator): a
 * 64-bit key (the seed) and a 128-bit counter map to four 32-bit words.  The
 * chip keeps no state: every kernel is given the caller's (seed, offset),
 * reads the words of the stream `seed` from word `offset` on, and the caller
 * advances its offset by what the call consumed:
 *
 *     words(numel, w) = 4 * ceil(w * numel / 4)
 *
 * with w words per element (1 for everything but sim_rng_random over a range
 * wider than 2^32, which takes 2).  Word j of the stream is lane j % 4 of
 * Philox4x32-10(counter = {j / 4 low 32 bits, j / 4 high 32 bits, 0, 0},
 * key = {seed low 32 bits, seed high 32 bits}); element i of the output (in
 * row-major order of its shape, whatever its strides) takes words
 * offset + w * i ... offset + w * i + w - 1 (normal: elements 2k and 2k + 1
 * share words offset + 2k and offset + 2k + 1 through Box-Muller).  The same
 * (seed, offset) gives the same values on every chip and every build.
 */
#include "simkernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --------------------------------------------------------- the generator */

void sim_philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2], uint32_t out[4]) {
    uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    uint32_t k0 = key_in[0], k1 = key_in[1];
    for (int r = 0; r < 10; r++) {
        if (r) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

uint64_t sim_rng_words(int64_t numel, int words_per_element) {
    uint64_t w = (uint64_t)(numel > 0 ? numel : 0) * (uint64_t)words_per_element;
    return (w + 3) / 4 * 4;
}

/* Words [first, first + n) of the stream `seed`, into buf. */
static void stream(uint64_t seed, uint64_t first, uint64_t n, uint32_t *buf) {
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint64_t block = first / 4, done = 0;
    unsigned lane = (unsigned)(first % 4);
    while (done < n) {
        const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), 0, 0};
        uint32_t r[4];
        sim_philox4x32_10(ctr, key, r);
        for (; lane < 4 && done < n; lane++) buf[done++] = r[lane];
        lane = 0;
        block++;
    }
}

/* a uniform float in [0, 1) from a word: its top 24 bits, as PyTorch turns
 * 32 random bits into a float */
static inline float unit(uint32_t w) { return (float)(w >> 8) * (1.0f / 16777216.0f); }

/* --------------------------------------------------------------- kernels */

/* Element i of `out` (row-major order) receives value(i); `vals` are doubles
 * stored with sim_store's conversion (or int64 where exact integers matter). */
static void store_all(const sim_view *out, const double *vals, const int64_t *ivals) {
    int64_t idx[SIM_MAX_DIMS] = {0}, i = 0, es = (int64_t)sim_dtype_size(out->dtype);
    if (sim_numel(out) == 0) return;
    do {
        int64_t off = 0;
        for (int d = 0; d < out->ndim; d++) off += idx[d] * out->strides[d];
        char *p = out->base + off * es;
        if (ivals) {
            int64_t v = ivals[i++];
            switch (out->dtype) {
                case SIM_I64: memcpy(p, &v, 8); break;
                case SIM_I32: { int32_t w = (int32_t)v; memcpy(p, &w, 4); break; }
                case SIM_I8: *(int8_t *)p = (int8_t)v; break;
                case SIM_U8: *(uint8_t *)p = (uint8_t)v; break;
                case SIM_BOOL: *(uint8_t *)p = v != 0; break;
                default: sim_store(p, out->dtype, (double)v);
            }
        } else {
            sim_store(p, out->dtype, vals[i++]);
        }
        if (!sim_next_index(idx, out->shape, out->ndim)) break;
    } while (1);
}

static sim_status rng_check(const char *fn, const sim_view *out, uint64_t offset, int float_only) {
    if (offset % 4)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "offset %llu is not a multiple of 4 (offsets advance in whole "
                        "Philox blocks)", (unsigned long long)offset);
    if (float_only && !simk_is_float(out->dtype))
        return sim_fail(SIM_E_UNSUPPORTED, fn, "takes floating tensors, not %s", sim_dtype_name(out->dtype));
    return SIM_OK;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

sim_status sim_rng_uniform(const char *fn, const char *kernel, const sim_view *out, double from, double to,
                           uint64_t seed, uint64_t offset) {
    sim_status st;
    if ((st = rng_check(fn, out, offset, 1))) return st;
    if (!(from <= to)) return sim_fail(SIM_E_INVALID_VALUE, fn, "from=%g must not exceed to=%g", from, to);
    if ((st = sim_launch(kernel, fn))) return st;
    int64_t n = sim_numel(out);
    uint32_t *w = xmalloc((size_t)n * 4);
    double *v = xmalloc((size_t)n * 8);
    stream(seed, offset, (uint64_t)n, w);
    const float lo = (float)from, span = (float)(to - from);
    for (int64_t i = 0; i < n; i++) v[i] = (double)(unit(w[i]) * span + lo);
    store_all(out, v, NULL);
    sim_corrupt_output(out);
    free(w);
    free(v);
    return SIM_OK;
}

sim_status sim_rng_normal(const char *fn, const char *kernel, const sim_view *out, double mean, double std,
                          uint64_t seed, uint64_t offset) {
    sim_status st;
    if ((st = rng_check(fn, out, offset, 1))) return st;
    if (!(std >= 0)) return sim_fail(SIM_E_INVALID_VALUE, fn, "std=%g must be >= 0", std);
    if ((st = sim_launch(kernel, fn))) return st;
    int64_t n = sim_numel(out), pairs = (n + 1) / 2;
    uint32_t *w = xmalloc((size_t)pairs * 8);
    double *v = xmalloc((size_t)pairs * 16);
    stream(seed, offset, (uint64_t)pairs * 2, w);
    for (int64_t k = 0; k < pairs; k++) { /* Box-Muller in double: u1 in (0, 1], so the log is finite */
        double u1 = ((double)(w[2 * k] >> 8) + 1.0) / 16777216.0, u2 = (double)(w[2 * k + 1] >> 8) / 16777216.0;
        double r = sqrt(-2.0 * log(u1)), t = 6.283185307179586 * u2;
        v[2 * k] = mean + std * (r * cos(t));
        v[2 * k + 1] = mean + std * (r * sin(t));
    }
    store_all(out, v, NULL);
    sim_corrupt_output(out);
    free(w);
    free(v);
    return SIM_OK;
}

sim_status sim_rng_bernoulli(const char *fn, const char *kernel, const sim_view *out, double p, uint64_t seed,
                             uint64_t offset) {
    sim_status st;
    if ((st = rng_check(fn, out, offset, 0))) return st;
    if (!(p >= 0 && p <= 1)) return sim_fail(SIM_E_INVALID_VALUE, fn, "p=%g is not in [0, 1]", p);
    if ((st = sim_launch(kernel, fn))) return st;
    int64_t n = sim_numel(out);
    uint32_t *w = xmalloc((size_t)n * 4);
    int64_t *v = xmalloc((size_t)n * 8);
    stream(seed, offset, (uint64_t)n, w);
    for (int64_t i = 0; i < n; i++) v[i] = (double)unit(w[i]) < p;
    store_all(out, NULL, v);
    free(w);
    free(v);
    return SIM_OK;
}

sim_status sim_rng_random(const char *fn, const char *kernel, const sim_view *out, int64_t from, int64_t to,
                          uint64_t seed, uint64_t offset) {
    sim_status st;
    if ((st = rng_check(fn, out, offset, 0))) return st;
    if (from >= to)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "from=%lld must be less than to=%lld", (long long)from,
                        (long long)to);
    if (out->dtype == SIM_BOOL && (from < 0 || to > 2))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "a bool tensor takes [from, to) within [0, 2)");
    if ((st = sim_launch(kernel, fn))) return st;
    /* x = from + word % range, as PyTorch's random_from_to; two words (high,
     * low) per element when the range needs more than 32 bits */
    const uint64_t range = (uint64_t)to - (uint64_t)from;
    const int wide = range > 0xFFFFFFFFull;
    int64_t n = sim_numel(out);
    uint32_t *w = xmalloc((size_t)n * (wide ? 8 : 4));
    int64_t *v = xmalloc((size_t)n * 8);
    stream(seed, offset, (uint64_t)n * (wide ? 2 : 1), w);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = wide ? ((uint64_t)w[2 * i] << 32 | w[2 * i + 1]) : w[i];
        v[i] = (int64_t)((uint64_t)from + r % range);
    }
    store_all(out, NULL, v);
    free(w);
    free(v);
    return SIM_OK;
}

sim_status sim_rng_dropout(const char *fn, const char *kernel, const sim_view *in, double p, int train,
                           uint64_t seed, uint64_t offset, const sim_view *out, const sim_view *mask) {
    sim_status st;
    if ((st = rng_check(fn, out, offset, 1))) return st;
    if (!sim_same_shape(in, out) || !sim_same_shape(in, mask))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "input, output and mask must have one shape");
    if (in->dtype != out->dtype)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "input is %s but the output is %s (mixed dtypes)",
                        sim_dtype_name(in->dtype), sim_dtype_name(out->dtype));
    if (mask->dtype != SIM_BOOL) return sim_fail(SIM_E_UNSUPPORTED, fn, "mask must be bool");
    if (!(p >= 0 && p <= 1)) return sim_fail(SIM_E_INVALID_VALUE, fn, "p=%g is not in [0, 1]", p);
    if ((st = sim_launch(kernel, fn))) return st;
    int64_t n = sim_numel(out);
    /* PyTorch's native_dropout: an element is kept with probability 1 - p
     * (word < 1 - p), out = input * keep * 1 / (1 - p) (0 when p is 1);
     * outside training out = input and every element is kept */
    int64_t *keep = xmalloc((size_t)n * 8);
    double *x = xmalloc((size_t)n * 8);
    sim_view xd;
    void *own;
    xd = simk_dense_like(in, SIM_F32, &own);
    simk_copy_view(in, &xd);
    const float *xf = (const float *)xd.base;
    if (train) {
        uint32_t *w = xmalloc((size_t)n * 4);
        stream(seed, offset, (uint64_t)n, w);
        const double q = 1.0 - p;
        const float scale = q == 0 ? 0.0f : (float)(1.0 / q);
        for (int64_t i = 0; i < n; i++) {
            keep[i] = (double)unit(w[i]) < q;
            x[i] = (double)((xf[i] * (float)keep[i]) * scale);
        }
        free(w);
    } else {
        for (int64_t i = 0; i < n; i++) {
            keep[i] = 1;
            x[i] = xf[i];
        }
    }
    store_all(out, x, NULL);
    store_all(mask, NULL, keep);
    sim_corrupt_output(out);
    free(own);
    free(keep);
    free(x);
    return SIM_OK;
}
