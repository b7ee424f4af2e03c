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
            if (!sim_next_index(idx, g->shape, g->ndim)) break;
        }
    }
    memcpy(first(found_inf), &found, 4);
    return SIM_OK;
}

/* ------------------------------------------------------ fused optimizers */

/* Every element of n same-shaped views, row by row: fn(ctx, pointers, strides, count). */
static int same_shapes(const sim_view *const *v, int n) {
    for (int k = 1; k < n; k++)
        if (v[k] && !sim_same_shape(v[0], v[k])) return 0;
    return 1;
}

static sim_status optim_checks(const char *fn, const char *what, int i, const sim_view *const *v, int n) {
    if (!same_shapes(v, n))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "tensor %d of the %s lists differ in shape", i, what);
    for (int k = 0; k < n; k++)
        if (v[k] && !simk_is_float(v[k]->dtype))
            return sim_fail(SIM_E_UNSUPPORTED, fn, "tensor %d of the lists is %s (floating tensors only)", i,
                            sim_dtype_name(v[k]->dtype));
    return SIM_OK;
}

/* grad_scale / found_inf: absent, or one float32 element */
static sim_status scale_inf(const char *fn, const sim_view *grad_scale, const sim_view *found_inf, float *gs,
                            int *skip) {
    sim_status st;
    *gs = 0.0f;
    *skip = 0;
    if (grad_scale && grad_scale->present) {
        if ((st = one_element(fn, "grad_scale", grad_scale, SIM_F32))) return st;
        memcpy(gs, first(grad_scale), 4);
    }
    if (found_inf && found_inf->present) {
        float f;
        if ((st = one_element(fn, "found_inf", found_inf, SIM_F32))) return st;
        memcpy(&f, first(found_inf), 4);
        *skip = f == 1.0f;   /* PyTorch's fused kernels skip the step on inf */
    }
    return SIM_OK;
}

/* Adam's per-element update, shared by the flat float32 loop and the strided
 * loop of any float dtype: the same operations in the same order. */
typedef struct {
    float step_size, bc2_sqrt, b1, b2, b2c, wd, lr, eps, gs;
    int maximize, decoupled;
} adam_consts;

static inline void adam_element(const adam_consts *c, float *param_, float *grad_, float *ea_, float *es_,
                                float *mx_) {
    float param = *param_, grad = *grad_;
    if (c->gs != 0.0f) {
        grad = grad / c->gs;
        *grad_ = grad;                /* the unscaled gradient is written back, as PyTorch does */
    }
    if (c->maximize) grad = -grad;
    if (c->wd != 0.0f) {
        if (c->decoupled) param = param - c->lr * c->wd * param;
        else grad = grad + param * c->wd;
    }
    float ea = *ea_, es = *es_;
    ea = ea + c->b1 * (grad - ea);
    es = c->b2 * es + c->b2c * grad * grad;
    float denom;
    if (mx_) {
        float mv = *mx_;
        mv = mv > es ? mv : es;
        *mx_ = mv;
        denom = sqrtf(mv) / c->bc2_sqrt + c->eps;
    } else {
        denom = sqrtf(es) / c->bc2_sqrt + c->eps;
    }
    *param_ = param - c->step_size * ea / denom;
    *ea_ = ea;
    *es_ = es;
}

/* distinct arrays (restrict), loop-invariant flags: the compiler unswitches
 * and vectorizes these loops (with -fno-math-errno, see native_sim/build.py) */
static void adam_flat(const adam_consts *cp, int64_t numel, float *restrict pp, float *restrict gp,
                      float *restrict mp, float *restrict sp, float *restrict xp) {
    const adam_consts c = *cp;
    if (xp) {
        for (int64_t j = 0; j < numel; j++) adam_element(&c, &pp[j], &gp[j], &mp[j], &sp[j], &xp[j]);
    } else {
        for (int64_t j = 0; j < numel; j++) adam_element(&c, &pp[j], &gp[j], &mp[j], &sp[j], NULL);
    }
}

/* every given view float32, contiguous and apart from the others (the flat
 * loops read each array through its own restrict pointer); same shapes are
 * checked before */
static int all_f32_contiguous(const sim_view *p, const sim_view *g, const sim_view *m, const sim_view *s,
                              const sim_view *mx) {
    const sim_view *vs[5] = {p, g, m, s, mx};
    const int64_t nbytes = sim_numel(p) * 4;
    for (int k = 0; k < 5; k++) {
        if (!vs[k]) continue;
        if (vs[k]->dtype != SIM_F32 || !sim_is_contiguous(vs[k])) return 0;
        for (int j = 0; j < k; j++)
            if (vs[j] && vs[j]->base < vs[k]->base + nbytes && vs[k]->base < vs[j]->base + nbytes) return 0;
    }
    return 1;
}

sim_status simk_fused_adam(const char *fn, const char *kernel, const sim_view *params, const sim_view *grads,
                           const sim_view *exp_avgs, const sim_view *exp_avg_sqs, const sim_view *max_exp_avg_sqs,
                           const sim_view *steps, int n, double lr, double beta1, double beta2, double weight_decay,
                           double eps, int amsgrad, int maximize, int decoupled, const sim_view *grad_scale,
                           const sim_view *found_inf) {
    sim_status st;
    float gs;
    int skip;
    if ((st = scale_inf(fn, grad_scale, found_inf, &gs, &skip))) return st;
    for (int i = 0; i < n; i++) {
        const sim_view *v[5] = {&params[i], &grads[i], &exp_avgs[i], &exp_avg_sqs[i],
                                amsgrad ? &max_exp_avg_sqs[i] : NULL};
        if ((st = optim_checks(fn, "adam", i, v, 5)) || (st = one_element(fn, "state_steps[i]", &steps[i], SIM_F32)))
            return st;
    }
    if ((st = sim_launch(kernel, fn))) return st;
    if (skip) return SIM_OK;
    for (int i = 0; i < n; i++) {
        /* PyTorch's _fused_adam_ (CPU): the bias corrections in double, each element in float */
        float stepf;
        memcpy(&stepf, first(&steps[i]), 4);
        const double bc1 = 1 - pow(beta1, stepf), bc2 = 1 - pow(beta2, stepf);
        adam_consts c = {(float)(lr / bc1), (float)sqrt(bc2), (float)(1 - beta1), (float)beta2, (float)(1 - beta2),
                         (float)weight_decay, (float)lr, (float)eps, gs, maximize, decoupled};
        const sim_view *p = &params[i], *g = &grads[i], *m = &exp_avgs[i], *s = &exp_avg_sqs[i];
        const sim_view *mx = amsgrad ? &max_exp_avg_sqs[i] : NULL;
        const int64_t numel = sim_numel(p);
        if (numel == 0) continue;
        if (all_f32_contiguous(p, g, m, s, mx)) {
            /* the common case (float32 parameters and states): one pass over flat arrays */
            adam_flat(&c, numel, (float *)p->base, (float *)g->base, (float *)m->base, (float *)s->base,
                      mx ? (float *)mx->base : NULL);
            continue;
        }
        int64_t idx[SIM_MAX_DIMS] = {0};
        for (;;) {
            int64_t off[5] = {0};
            const sim_view *vs[5] = {p, g, m, s, mx};
            char *e[5] = {0};
            for (int k = 0; k < 5; k++) {
                if (!vs[k]) continue;
                for (int d = 0; d < p->ndim; d++) off[k] += idx[d] * vs[k]->strides[d];
                e[k] = vs[k]->base + off[k] * (int64_t)sim_dtype_size(vs[k]->dtype);
            }
            float param = (float)sim_load(e[0], p->dtype), grad = (float)sim_load(e[1], g->dtype);
            float ea = (float)sim_load(e[2], m->dtype), es = (float)sim_load(e[3], s->dtype);
            float mv = mx ? (float)sim_load(e[4], mx->dtype) : 0.0f;
            adam_element(&c, &param, &grad, &ea, &es, mx ? &mv : NULL);
            if (gs != 0.0f) sim_store(e[1], g->dtype, grad);   /* the unscaled gradient is written back, as PyTorch does */
            if (mx) sim_store(e[4], mx->dtype, mv);
            sim_store(e[0], p->dtype, param);
            sim_store(e[2], m->dtype, ea);
            sim_store(e[3], s->dtype, es);
            if (!sim_next_index(idx, p->shape, p->ndim)) break;
        }
    }
    return SIM_OK;
}

/* SGD's per-element update (PyTorch's _fused_sgd_, CPU), shared like adam_element */
typedef struct {
    float wd, mom, lr, damp, gs;
    int nesterov, maximize, is_first_step;
} sgd_consts;

static inline void sgd_element(const sgd_consts *c, float *param_, float *grad_, float *buf_) {
    float grad = *grad_;
    if (c->gs != 0.0f) {
        grad = grad / c->gs;
        *grad_ = grad;
    }
    if (c->maximize) grad = -grad;
    if (c->wd != 0.0f) grad = grad + c->wd * *param_;
    if (buf_) {
        float buf = c->is_first_step ? grad : c->mom * *buf_ + c->damp * grad;
        *buf_ = buf;
        grad = c->nesterov ? grad + c->mom * buf : buf;
    }
    *param_ = *param_ - c->lr * grad;
}

sim_status simk_fused_sgd(const char *fn, const char *kernel, const sim_view *params, const sim_view *grads,
                          const sim_view *bufs, int n, double weight_decay, double momentum, double lr,
                          double dampening, int nesterov, int maximize, int is_first_step,
                          const sim_view *grad_scale, const sim_view *found_inf) {
    sim_status st;
    float gs;
    int skip;
    if ((st = scale_inf(fn, grad_scale, found_inf, &gs, &skip))) return st;
    if (momentum != 0 && !bufs)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "momentum %g needs the momentum buffers", momentum);
    for (int i = 0; i < n; i++) {
        const sim_view *v[3] = {&params[i], &grads[i], momentum != 0 ? &bufs[i] : NULL};
        if ((st = optim_checks(fn, "sgd", i, v, 3))) return st;
    }
    if ((st = sim_launch(kernel, fn))) return st;
    if (skip) return SIM_OK;
    const sgd_consts c = {(float)weight_decay, (float)momentum, (float)lr, (float)(1 - dampening), gs, nesterov,
                          maximize, is_first_step};
    for (int i = 0; i < n; i++) {
        const sim_view *p = &params[i], *g = &grads[i], *b = momentum != 0 ? &bufs[i] : NULL;
        const int64_t numel = sim_numel(p);
        if (numel == 0) continue;
        if (all_f32_contiguous(p, g, b, NULL, NULL)) {
            float *pp = (float *)p->base, *gp = (float *)g->base, *bp = b ? (float *)b->base : NULL;
            for (int64_t j = 0; j < numel; j++) sgd_element(&c, &pp[j], &gp[j], bp ? &bp[j] : NULL);
            continue;
        }
        int64_t idx[SIM_MAX_DIMS] = {0};
        for (;;) {
            const sim_view *vs[3] = {p, g, b};
            char *e[3] = {0};
            for (int k = 0; k < 3; k++) {
                if (!vs[k]) continue;
                int64_t off = 0;
                for (int d = 0; d < p->ndim; d++) off += idx[d] * vs[k]->strides[d];
                e[k] = vs[k]->base + off * (int64_t)sim_dtype_size(vs[k]->dtype);
            }
            float param = (float)sim_load(e[0], p->dtype), grad = (float)sim_load(e[1], g->dtype);
            float buf = b ? (float)sim_load(e[2], b->dtype) : 0.0f;
            sgd_element(&c, &param, &grad, b ? &buf : NULL);
            if (gs != 0.0f) sim_store(e[1], g->dtype, grad);
            if (b) sim_store(e[2], b->dtype, buf);
            sim_store(e[0], p->dtype, param);
            if (!sim_next_index(idx, p->shape, p->ndim)) break;
        }
    }
    return SIM_OK;
}
