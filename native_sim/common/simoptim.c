/*
 * simoptim.c: the training step's fused kernels: GradScaler's unscale and
 * scale update (PyTorch's _amp_foreach_non_finite_check_and_unscale_ and
 * _amp_update_scale_, with PyTorch's CPU arithmetic).
 */
#include "simkernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static sim_status one_element(const char *fn, const char *what, const sim_view *v, sim_dtype dt) {
    if (!v || !v->present) return sim_fail(SIM_E_INVALID_VALUE, fn, "%s is required", what);
    if (sim_numel(v) != 1 || v->dtype != dt)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "%s must be one %s element", what, sim_dtype_name(dt));
    return SIM_OK;
}

static inline char *first(const sim_view *v) { return v->base; } /* the single element: [0, ..., 0] */

sim_status simk_amp_update_scale(const char *fn, const char *kernel, const sim_view *scale,
                                 const sim_view *growth_tracker, const sim_view *found_inf, double growth_factor,
                                 double backoff_factor, int64_t growth_interval, const sim_view *out) {
    sim_status st;
    if ((st = one_element(fn, "the scale", scale, SIM_F32)) ||
        (st = one_element(fn, "growth_tracker", growth_tracker, SIM_I32)) ||
        (st = one_element(fn, "found_inf", found_inf, SIM_F32)) || (st = one_element(fn, "out", out, SIM_F32)))
        return st;
    if (growth_interval < 1)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "growth_interval must be >= 1, got %lld", (long long)growth_interval);
    if ((st = sim_launch(kernel, fn))) return st;
    float cur, inf;
    int32_t tracker;
    memcpy(&cur, first(scale), 4);
    memcpy(&inf, first(found_inf), 4);
    memcpy(&tracker, first(growth_tracker), 4);
    if (inf != 0.0f) { /* PyTorch's _amp_update_scale_cpu_ */
        cur = (float)(cur * backoff_factor);
        tracker = 0;
    } else {
        int32_t successful = tracker + 1;
        if (successful == growth_interval) {
            float grown = (float)(cur * growth_factor);
            if (isfinite(grown)) cur = grown;
            tracker = 0;
        } else {
            tracker = successful;
        }
    }
    memcpy(first(out), &cur, 4);
    memcpy(first(growth_tracker), &tracker, 4);
    return SIM_OK;
}

sim_status simk_amp_unscale(const char *fn, const char *kernel, const sim_view *grads, int n,
                            const sim_view *found_inf, const sim_view *inv_scale) {
    sim_status st;
    if ((st = one_element(fn, "found_inf", found_inf, SIM_F32)) ||
        (st = one_element(fn, "inv_scale", inv_scale, SIM_F32)))
        return st;
    for (int i = 0; i < n; i++)
        if (!simk_is_float(grads[i].dtype))
            return sim_fail(SIM_E_UNSUPPORTED, fn, "grads[%d] is %s (floating tensors only)", i,
                            sim_dtype_name(grads[i].dtype));
    if ((st = sim_launch(kernel, fn))) return st;
    float inv, found;
    memcpy(&inv, first(inv_scale), 4);
    memcpy(&found, first(found_inf), 4);
    for (int i = 0; i < n; i++) {
        const sim_view *g = &grads[i];
        int64_t idx[SIM_MAX_DIMS] = {0}, es = (int64_t)sim_dtype_size(g->dtype);
        if (sim_numel(g) == 0) continue;
        for (;;) {
            int64_t off = 0;
            for (int d = 0; d < g->ndim; d++) off += idx[d] * g->strides[d];
            char *p = g->base + off * es;
            float v = (float)sim_load(p, g->dtype);
            if (!isfinite(v)) found = 1.0f;
            if (inv != 1.0f) sim_store(p, g->dtype, (double)(v * inv));
            int d = g->ndim - 1;
            for (; d >= 0; d--) {
                if (++idx[d] < g->shape[d]) break;
                idx[d] = 0;
            }
            if (d < 0) break;
        }
    }
    memcpy(first(found_inf), &found, 4);
    return SIM_OK;
}
