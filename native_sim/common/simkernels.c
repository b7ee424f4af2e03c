/*
 * simkernels.c: the arithmetic of the simulated chips.
 *
 * Inputs are read through their strides into dense float buffers, computed in
 * float (half and bfloat16 are "compute in float, store narrow", as the chips
 * claim), and written back through the output's strides with round-to-nearest-
 * even.  That keeps every kernel correct for any layout the descriptor can
 * express; layout *requirements* (NHWC, contiguity) are enforced by callers.
 */
#include "simkernels.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ iteration */

typedef void (*row_fn)(void *ctx, char *p, int64_t n, int64_t stride, int64_t lin);

/* Calls fn once per innermost row of v, in row-major order. */
static void for_rows(const sim_view *v, row_fn fn, void *ctx) {
    int64_t n = sim_numel(v);
    if (n == 0) return;
    if (v->ndim == 0) {
        fn(ctx, v->base, 1, 0, 0);
        return;
    }
    int nd = v->ndim;
    int64_t inner = v->shape[nd - 1], istride = v->strides[nd - 1];
    int64_t idx[SIM_MAX_DIMS] = {0};
    size_t es = sim_dtype_size(v->dtype);
    int64_t rows = n / inner;
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = 0;
        for (int d = 0; d < nd - 1; d++) off += idx[d] * v->strides[d];
        fn(ctx, v->base + off * (int64_t)es, inner, istride, r * inner);
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < v->shape[d]) break;
            idx[d] = 0;
        }
    }
}

static void gather_row(void *ctx, char *p, int64_t n, int64_t s, int64_t lin);
static void scatter_row(void *ctx, char *p, int64_t n, int64_t s, int64_t lin);

typedef struct {
    float *buf;
    sim_dtype dt;
} gs_ctx;

static void gather_row(void *vctx, char *p, int64_t n, int64_t s, int64_t lin) {
    gs_ctx *c = vctx;
    float *dst = c->buf + lin;
    switch (c->dt) {
        case SIM_F32: {
            const float *q = (const float *)p;
            if (s == 1) memcpy(dst, q, (size_t)n * 4);
            else for (int64_t i = 0; i < n; i++) dst[i] = q[i * s];
            break;
        }
        case SIM_F16: {
            const uint16_t *q = (const uint16_t *)p;
            for (int64_t i = 0; i < n; i++) dst[i] = sim_h2f(q[i * s]);
            break;
        }
        case SIM_BF16: {
            const uint16_t *q = (const uint16_t *)p;
            for (int64_t i = 0; i < n; i++) dst[i] = sim_bf2f(q[i * s]);
            break;
        }
        default: {
            size_t es = sim_dtype_size(c->dt);
            for (int64_t i = 0; i < n; i++) dst[i] = (float)sim_load(p + i * s * (int64_t)es, c->dt);
        }
    }
}

static void scatter_row(void *vctx, char *p, int64_t n, int64_t s, int64_t lin) {
    gs_ctx *c = vctx;
    const float *src = c->buf + lin;
    switch (c->dt) {
        case SIM_F32: {
            float *q = (float *)p;
            if (s == 1) memcpy(q, src, (size_t)n * 4);
            else for (int64_t i = 0; i < n; i++) q[i * s] = src[i];
            break;
        }
        case SIM_F16: {
            uint16_t *q = (uint16_t *)p;
            for (int64_t i = 0; i < n; i++) q[i * s] = sim_f2h(src[i]);
            break;
        }
        case SIM_BF16: {
            uint16_t *q = (uint16_t *)p;
            for (int64_t i = 0; i < n; i++) q[i * s] = sim_f2bf(src[i]);
            break;
        }
        default: {
            size_t es = sim_dtype_size(c->dt);
            for (int64_t i = 0; i < n; i++) sim_store(p + i * s * (int64_t)es, c->dt, src[i]);
        }
    }
}

float *sim_gather(const sim_view *v) {
    int64_t n = sim_numel(v);
    float *buf = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!buf) return NULL;
    gs_ctx c = {buf, v->dtype};
    for_rows(v, gather_row, &c);
    return buf;
}

void sim_scatter(const float *src, const sim_view *v) {
    gs_ctx c = {(float *)src, v->dtype};
    for_rows(v, scatter_row, &c);
}

/* Allocation failures inside a kernel are device OOM in spirit; the host has
 * plenty here, so they are treated as fatal bugs of the simulator itself. */
static float *gather_or_die(const sim_view *v) {
    float *b = sim_gather(v);
    if (!b) abort();
    return b;
}

static float *alloc_f(int64_t n) {
    float *b = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (!b) abort();
    return b;
}

/* --------------------------------------------------------------- checks */

sim_status simk_check_same(const char *fn, const char *what, const sim_view *a,
                           const sim_view *ref) {
    if (!sim_same_shape(a, ref)) {
        char s1[160], s2[160];
        sim_shape_str(a, s1, sizeof s1);
        sim_shape_str(ref, s2, sizeof s2);
        return sim_fail(SIM_E_INVALID_VALUE, fn,
                        "%s has shape %s but the output has shape %s (broadcast inputs must "
                        "be expanded with stride 0)", what, s1, s2);
    }
    if (a->dtype != ref->dtype)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "%s is %s but the output is %s (mixed dtypes)", what,
                        sim_dtype_name(a->dtype), sim_dtype_name(ref->dtype));
    return SIM_OK;
}

sim_status simk_check_dtype_in(const char *fn, const char *what, const sim_view *v,
                               const sim_dtype *allowed, int n) {
    for (int i = 0; i < n; i++)
        if (v->dtype == allowed[i]) return SIM_OK;
    return sim_fail(SIM_E_UNSUPPORTED, fn, "%s: dtype %s is not supported by this kernel", what,
                    sim_dtype_name(v->dtype));
}

/* ----------------------------------------------------------- elementwise */

void simk_binary(simk_binop op, const sim_view *a, const sim_view *b, double alpha,
                 const sim_view *out) {
    int64_t n = sim_numel(out);
    float *x = gather_or_die(a), *y = gather_or_die(b);
    float al = (float)alpha;
    switch (op) {
        case SIMK_ADD:
            if (al == 1.0f) for (int64_t i = 0; i < n; i++) x[i] = x[i] + y[i];
            else for (int64_t i = 0; i < n; i++) x[i] = x[i] + al * y[i];
            break;
        case SIMK_SUB:
            if (al == 1.0f) for (int64_t i = 0; i < n; i++) x[i] = x[i] - y[i];
            else for (int64_t i = 0; i < n; i++) x[i] = x[i] - al * y[i];
            break;
        case SIMK_MUL: for (int64_t i = 0; i < n; i++) x[i] = x[i] * y[i]; break;
        case SIMK_DIV: for (int64_t i = 0; i < n; i++) x[i] = x[i] / y[i]; break;
    }
    sim_scatter(x, out);
    free(x);
    free(y);
}

void simk_unary(simk_unop op, const sim_view *a, const sim_view *out) {
    int64_t n = sim_numel(out);
    float *x = gather_or_die(a);
    const float k0 = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        switch (op) {
            case SIMK_RELU: x[i] = v > 0.0f ? v : (v != v ? v : 0.0f); break;
            case SIMK_GELU: x[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); break;
            case SIMK_GELU_TANH:
                x[i] = 0.5f * v * (1.0f + tanhf(k0 * (v + 0.044715f * v * v * v)));
                break;
            case SIMK_SIGMOID: x[i] = 1.0f / (1.0f + expf(-v)); break;
            case SIMK_TANH: x[i] = tanhf(v); break;
            case SIMK_EXP: x[i] = expf(v); break;
            case SIMK_NEG: x[i] = -v; break;
            case SIMK_SQRT: x[i] = sqrtf(v); break;
            case SIMK_RSQRT: x[i] = 1.0f / sqrtf(v); break;
        }
    }
    sim_scatter(x, out);
    free(x);
}

void simk_fill(const sim_view *out, double value) {
    int64_t n = sim_numel(out);
    if (n == 0) return;
    size_t es = sim_dtype_size(out->dtype);
    char one[8];
    sim_store(one, out->dtype, value);
    int64_t idx[SIM_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0;
        for (int d = 0; d < out->ndim; d++) off += idx[d] * out->strides[d];
        memcpy(out->base + off * (int64_t)es, one, es);
        for (int d = out->ndim - 1; d >= 0; d--) {
            if (++idx[d] < out->shape[d]) break;
            idx[d] = 0;
        }
    }
}

/* ------------------------------------------------------------------ copy */

typedef struct {
    const sim_view *src;
    int64_t idx[SIM_MAX_DIMS]; /* running multi-index into src, row by row */
} copy_ctx;

sim_status simk_copy(const char *fn, const char *kernel, const sim_view *src, const sim_view *dst) {
    if (!sim_same_shape(src, dst)) {
        char s1[160], s2[160];
        sim_shape_str(src, s1, sizeof s1);
        sim_shape_str(dst, s2, sizeof s2);
        return sim_fail(SIM_E_INVALID_VALUE, fn, "source shape %s differs from destination %s", s1,
                        s2);
    }
    int64_t n = sim_numel(dst);
    if (n == 0) return SIM_OK;
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    size_t ses = sim_dtype_size(src->dtype), des = sim_dtype_size(dst->dtype);
    if (src->dtype == dst->dtype && sim_is_contiguous(src) && sim_is_contiguous(dst)) {
        memmove(dst->base, src->base, (size_t)n * des);
        return SIM_OK;
    }
    /* Element by element through double: exact for every integer the dtypes
     * hold below 2^53 and for all float formats; same-dtype copies are bytes. */
    int nd = dst->ndim;
    int64_t idx[SIM_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t so = 0, doff = 0;
        for (int d = 0; d < nd; d++) {
            so += idx[d] * src->strides[d];
            doff += idx[d] * dst->strides[d];
        }
        const char *sp = src->base + so * (int64_t)ses;
        char *dp = dst->base + doff * (int64_t)des;
        if (src->dtype == dst->dtype) memcpy(dp, sp, des);
        else if (src->dtype == SIM_I64 && dst->dtype != SIM_F32 && dst->dtype != SIM_F64 &&
                 dst->dtype != SIM_F16 && dst->dtype != SIM_BF16) {
            int64_t v;
            memcpy(&v, sp, 8);
            switch (dst->dtype) {
                case SIM_I32: { int32_t w = (int32_t)v; memcpy(dp, &w, 4); break; }
                case SIM_I8: *(int8_t *)dp = (int8_t)v; break;
                case SIM_U8: *(uint8_t *)dp = (uint8_t)v; break;
                case SIM_BOOL: *(uint8_t *)dp = v != 0; break;
                default: break;
            }
        } else {
            sim_store(dp, dst->dtype, sim_load(sp, src->dtype));
        }
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < dst->shape[d]) break;
            idx[d] = 0;
        }
    }
    return SIM_OK;
}

/* ------------------------------------------------------------------ GEMM */

/*
 * C[M,N] = A[M,K] @ B[K,N], all dense row-major floats.  A is packed into
 * MR-row panels and B into NR-column panels (zero padded), and an MRxNR
 * register-blocked micro-kernel (GCC vector extensions, 12 accumulators of 8
 * floats: AVX2/FMA when built with -march=native, SSE pairs otherwise) walks
 * K in cache-sized blocks.
 */
#define MR 6
#define NR 16
#define KC 256

typedef float v8f __attribute__((vector_size(32), aligned(4)));

static void micro_kernel(int64_t kc, const float *a, const float *b, float *c, int64_t ldc) {
    v8f acc[MR][2];
    memset(acc, 0, sizeof acc);
    for (int64_t k = 0; k < kc; k++) {
        v8f b0 = *(const v8f *)(b + k * NR), b1 = *(const v8f *)(b + k * NR + 8);
        const float *ak = a + k * MR;
        for (int r = 0; r < MR; r++) {
            v8f av = (v8f){0} + ak[r];
            acc[r][0] += av * b0;
            acc[r][1] += av * b1;
        }
    }
    for (int r = 0; r < MR; r++) {
        v8f *cr0 = (v8f *)(c + r * ldc), *cr1 = (v8f *)(c + r * ldc + 8);
        *cr0 += acc[r][0];
        *cr1 += acc[r][1];
    }
}

static void gemm_core(int64_t M, int64_t N, int64_t K, const float *A, const float *B, float *C) {
    int64_t Mp = (M + MR - 1) / MR * MR, Np = (N + NR - 1) / NR * NR;
    float *Ap = alloc_f(Mp * K);   /* [Mp/MR][K][MR] */
    float *Bp = alloc_f(K * Np);   /* [Np/NR][K][NR] */
    float *Cp = alloc_f(Mp * Np);
    for (int64_t ip = 0; ip < Mp / MR; ip++)
        for (int r = 0; r < MR && ip * MR + r < M; r++) {
            const float *arow = A + (ip * MR + r) * K;
            float *dst = Ap + ip * K * MR + r;
            for (int64_t k = 0; k < K; k++) dst[k * MR] = arow[k];
        }
    for (int64_t k = 0; k < K; k++) {
        const float *brow = B + k * N;
        for (int64_t jp = 0; jp < Np / NR; jp++) {
            int64_t w = N - jp * NR < NR ? N - jp * NR : NR;
            memcpy(Bp + jp * K * NR + k * NR, brow + jp * NR, (size_t)w * sizeof(float));
        }
    }
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
        int64_t kc = k0 + KC < K ? KC : K - k0;
        for (int64_t jp = 0; jp < Np / NR; jp++)
            for (int64_t ip = 0; ip < Mp / MR; ip++)
                micro_kernel(kc, Ap + ip * K * MR + k0 * MR, Bp + jp * K * NR + k0 * NR,
                             Cp + ip * MR * Np + jp * NR, Np);
    }
    for (int64_t i = 0; i < M; i++) memcpy(C + i * N, Cp + i * Np, (size_t)N * sizeof(float));
    free(Ap);
    free(Bp);
    free(Cp);
}

sim_status simk_gemm(const char *fn, const char *kernel, const sim_view *a, const sim_view *m, const sim_view *bias,
                     double beta, double alpha, const sim_view *out) {
    int nd = out->ndim;
    if ((nd != 2 && nd != 3) || a->ndim != nd || m->ndim != nd)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "operands must all be 2-D (mm) or 3-D (bmm); got "
                        "%d-D x %d-D -> %d-D", a->ndim, m->ndim, nd);
    int64_t B = nd == 3 ? out->shape[0] : 1;
    int64_t M = a->shape[nd - 2], K = a->shape[nd - 1], N = m->shape[nd - 1];
    if (m->shape[nd - 2] != K || out->shape[nd - 2] != M || out->shape[nd - 1] != N ||
        (nd == 3 && (a->shape[0] != B || m->shape[0] != B)))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "shape mismatch: [%lldx%lld] @ [%lldx%lld] -> "
                        "[%lldx%lld]", (long long)M, (long long)K, (long long)m->shape[nd - 2],
                        (long long)N, (long long)out->shape[nd - 2],
                        (long long)out->shape[nd - 1]);
    if (a->dtype != out->dtype || m->dtype != out->dtype)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "mixed dtypes %s @ %s -> %s", sim_dtype_name(a->dtype),
                        sim_dtype_name(m->dtype), sim_dtype_name(out->dtype));
    if (bias && bias->present) {
        sim_status st = simk_check_same(fn, "bias (expanded to the output)", bias, out);
        if (st) return st;
    }
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    float *A = gather_or_die(a), *Mt = gather_or_die(m);
    float *C = alloc_f(B * M * N);
    for (int64_t b = 0; b < B; b++)
        if (M && N && K) gemm_core(M, N, K, A + b * M * K, Mt + b * K * N, C + b * M * N);
    int64_t total = B * M * N;
    float al = (float)alpha, be = (float)beta;
    if (al != 1.0f)
        for (int64_t i = 0; i < total; i++) C[i] *= al;
    if (bias && bias->present && be != 0.0f) {
        float *Bi = gather_or_die(bias);
        for (int64_t i = 0; i < total; i++) C[i] += be * Bi[i];
        free(Bi);
    }
    sim_scatter(C, out);
    free(A);
    free(Mt);
    free(C);
    return SIM_OK;
}

sim_status simk_gemm_u8(const char *fn, const char *kernel, const sim_view *a, const sim_view *m,
                        const sim_view *out) {
    if (a->ndim != 2 || m->ndim != 2 || out->ndim != 2)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "operands must be 2-D");
    int64_t M = a->shape[0], K = a->shape[1], N = m->shape[1];
    if (m->shape[0] != K || out->shape[0] != M || out->shape[1] != N)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "shape mismatch: [%lldx%lld] @ [%lldx%lld] -> "
                        "[%lldx%lld]", (long long)M, (long long)K, (long long)m->shape[0],
                        (long long)N, (long long)out->shape[0], (long long)out->shape[1]);
    if (a->dtype != SIM_U8 || m->dtype != SIM_U8 || out->dtype != SIM_I32)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "takes uint8 x uint8 -> int32, got %s x %s -> %s",
                        sim_dtype_name(a->dtype), sim_dtype_name(m->dtype),
                        sim_dtype_name(out->dtype));
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    int32_t *acc = calloc((size_t)(M * N > 0 ? M * N : 1), sizeof(int32_t));
    if (!acc) abort();
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++) {
            int32_t av = (int32_t)*(const uint8_t *)(a->base + i * a->strides[0] + k * a->strides[1]) - 128;
            for (int64_t j = 0; j < N; j++) {
                int32_t bv =
                    (int32_t)*(const uint8_t *)(m->base + k * m->strides[0] + j * m->strides[1]) - 128;
                acc[i * N + j] += av * bv;
            }
        }
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            memcpy(out->base + (i * out->strides[0] + j * out->strides[1]) * 4, &acc[i * N + j], 4);
    free(acc);
    return SIM_OK;
}

void simk_s8_to_u8(const sim_view *src, const sim_view *dst) {
    int64_t n = sim_numel(dst);
    int nd = dst->ndim;
    int64_t idx[SIM_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t so = 0, doff = 0;
        for (int d = 0; d < nd; d++) {
            so += idx[d] * src->strides[d];
            doff += idx[d] * dst->strides[d];
        }
        *(uint8_t *)(dst->base + doff) = (uint8_t)((int)*(const int8_t *)(src->base + so) + 128);
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < dst->shape[d]) break;
            idx[d] = 0;
        }
    }
}

/* ------------------------------------------------------------- conv/pool */

int64_t simk_pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int ceil_mode) {
    int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
    int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
    if (ceil_mode && (o - 1) * s >= in + p) o--; /* last window must start inside */
    return o;
}

static sim_status check_out_shape4(const char *fn, const sim_view *out, int64_t n, int64_t h,
                                   int64_t w, int64_t c) {
    if (out->ndim != 4 || out->shape[0] != n || out->shape[1] != h || out->shape[2] != w ||
        out->shape[3] != c)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "output must be NHWC [%lld, %lld, %lld, %lld]",
                        (long long)n, (long long)h, (long long)w, (long long)c);
    return SIM_OK;
}

sim_status simk_conv2d_nhwc(const char *fn, const char *kernel, const sim_view *in, const sim_view *w,
                            const sim_view *bias, const int64_t *stride, const int64_t *padding,
                            const int64_t *dilation, int64_t groups, const sim_view *out) {
    if (in->ndim != 4 || w->ndim != 4)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "input and weight must be 4-D (NHWC, OHWI)");
    int64_t N = in->shape[0], H = in->shape[1], W = in->shape[2], C = in->shape[3];
    int64_t O = w->shape[0], KH = w->shape[1], KW = w->shape[2], Cg = w->shape[3];
    if (groups < 1 || C % groups || O % groups || Cg * groups != C)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "channels: input C=%lld, weight [O=%lld, I/g=%lld], "
                        "groups=%lld do not agree", (long long)C, (long long)O, (long long)Cg,
                        (long long)groups);
    int64_t OH = simk_pool_out(H, KH, stride[0], padding[0], dilation[0], 0);
    int64_t OW = simk_pool_out(W, KW, stride[1], padding[1], dilation[1], 0);
    if (OH <= 0 || OW <= 0)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "kernel larger than padded input");
    sim_status st = check_out_shape4(fn, out, N, OH, OW, O);
    if (st) return st;
    if (w->dtype != in->dtype || out->dtype != in->dtype ||
        (bias->present && bias->dtype != in->dtype))
        return sim_fail(SIM_E_UNSUPPORTED, fn, "mixed dtypes");
    if (bias->present && (bias->ndim != 1 || bias->shape[0] != O))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "bias must be [%lld]", (long long)O);
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    float *X = gather_or_die(in), *Wt = gather_or_die(w);
    float *Bi = bias->present ? gather_or_die(bias) : NULL;
    int64_t Og = O / groups, KK = KH * KW * Cg, P = OH * OW;
    float *col = alloc_f(P * KK), *wT = alloc_f(KK * Og), *res = alloc_f(P * Og);
    float *Y = alloc_f(N * P * O);
    for (int64_t g = 0; g < groups; g++) {
        /* weight of group g as [KK, Og]: row k = (kh, kw, ci) */
        for (int64_t o = 0; o < Og; o++)
            for (int64_t k = 0; k < KK; k++) wT[k * Og + o] = Wt[(g * Og + o) * KK + k];
        for (int64_t n = 0; n < N; n++) {
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    float *crow = col + (oh * OW + ow) * KK;
                    for (int64_t kh = 0; kh < KH; kh++) {
                        int64_t ih = oh * stride[0] - padding[0] + kh * dilation[0];
                        for (int64_t kw = 0; kw < KW; kw++) {
                            int64_t iw = ow * stride[1] - padding[1] + kw * dilation[1];
                            float *dst = crow + (kh * KW + kw) * Cg;
                            if (ih < 0 || ih >= H || iw < 0 || iw >= W) {
                                memset(dst, 0, (size_t)Cg * sizeof(float));
                            } else {
                                memcpy(dst, X + ((n * H + ih) * W + iw) * C + g * Cg,
                                       (size_t)Cg * sizeof(float));
                            }
                        }
                    }
                }
            gemm_core(P, Og, KK, col, wT, res);
            for (int64_t p = 0; p < P; p++)
                for (int64_t o = 0; o < Og; o++)
                    Y[(n * P + p) * O + g * Og + o] = res[p * Og + o] + (Bi ? Bi[g * Og + o] : 0.0f);
        }
    }
    sim_scatter(Y, out);
    free(X); free(Wt); free(Bi); free(col); free(wT); free(res); free(Y);
    return SIM_OK;
}

sim_status simk_max_pool2d_nhwc(const char *fn, const char *kernel, const sim_view *in, const int64_t *k,
                                const int64_t *stride, const int64_t *pad, const int64_t *dil,
                                const sim_view *out, const sim_view *indices) {
    if (in->ndim != 4) return sim_fail(SIM_E_INVALID_VALUE, fn, "input must be 4-D NHWC");
    int64_t N = in->shape[0], H = in->shape[1], W = in->shape[2], C = in->shape[3];
    int64_t OH = out->ndim == 4 ? out->shape[1] : -1, OW = out->ndim == 4 ? out->shape[2] : -1;
    sim_status st = check_out_shape4(fn, out, N, OH, OW, C);
    if (st) return st;
    if (indices->present) {
        st = check_out_shape4(fn, indices, N, OH, OW, C);
        if (st) return st;
        if (indices->dtype != SIM_I64)
            return sim_fail(SIM_E_UNSUPPORTED, fn, "indices must be int64");
    }
    if (out->dtype != in->dtype) return sim_fail(SIM_E_UNSUPPORTED, fn, "mixed dtypes");
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    float *X = gather_or_die(in);
    float *Y = alloc_f(N * OH * OW * C);
    int64_t *I = indices->present ? calloc((size_t)(N * OH * OW * C + 1), 8) : NULL;
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++)
                for (int64_t c = 0; c < C; c++) {
                    /* PyTorch's rule: start at the first in-bounds element,
                     * take anything larger, and let NaN win. */
                    float best = -INFINITY;
                    int64_t h0 = oh * stride[0] - pad[0], w0 = ow * stride[1] - pad[1];
                    int64_t fh = h0, fw = w0;
                    while (fh < 0) fh += dil[0];
                    while (fw < 0) fw += dil[1];
                    int64_t arg = fh * W + fw;
                    for (int64_t kh = 0; kh < k[0]; kh++) {
                        int64_t ih = h0 + kh * dil[0];
                        if (ih < 0 || ih >= H) continue;
                        for (int64_t kw = 0; kw < k[1]; kw++) {
                            int64_t iw = w0 + kw * dil[1];
                            if (iw < 0 || iw >= W) continue;
                            float v = X[((n * H + ih) * W + iw) * C + c];
                            if (v > best || isnan(v)) {
                                best = v;
                                arg = ih * W + iw;
                            }
                        }
                    }
                    int64_t o = ((n * OH + oh) * OW + ow) * C + c;
                    Y[o] = best;
                    if (I) I[o] = arg;
                }
    sim_scatter(Y, out);
    if (I) {
        int64_t o = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++)
                    for (int64_t c = 0; c < C; c++, o++)
                        memcpy(indices->base + (n * indices->strides[0] + oh * indices->strides[1] +
                                                ow * indices->strides[2] + c * indices->strides[3]) * 8,
                               &I[o], 8);
    }
    free(X); free(Y); free(I);
    return SIM_OK;
}

/* Sum of channel c over rows [hs, he) and columns [ws, we) of image n (NHWC). */
static float window_sum(const float *X, int64_t n, int64_t H, int64_t W, int64_t C, int64_t c,
                        int64_t hs, int64_t he, int64_t ws, int64_t we) {
    float s = 0;
    for (int64_t ih = hs; ih < he; ih++)
        for (int64_t iw = ws; iw < we; iw++) s += X[((n * H + ih) * W + iw) * C + c];
    return s;
}

sim_status simk_avg_pool2d_nhwc(const char *fn, const char *kernel, const sim_view *in, const int64_t *k,
                                const int64_t *stride, const int64_t *pad, int count_include_pad,
                                int64_t divisor_override, const sim_view *out) {
    if (in->ndim != 4) return sim_fail(SIM_E_INVALID_VALUE, fn, "input must be 4-D NHWC");
    int64_t N = in->shape[0], H = in->shape[1], W = in->shape[2], C = in->shape[3];
    int64_t OH = out->ndim == 4 ? out->shape[1] : -1, OW = out->ndim == 4 ? out->shape[2] : -1;
    sim_status st = check_out_shape4(fn, out, N, OH, OW, C);
    if (st) return st;
    if (out->dtype != in->dtype) return sim_fail(SIM_E_UNSUPPORTED, fn, "mixed dtypes");
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    float *X = gather_or_die(in);
    float *Y = alloc_f(N * OH * OW * C);
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                /* PyTorch's window rule: the pool size counts padding up to the
                 * padded edge, then the window is clipped to the input. */
                int64_t hs = oh * stride[0] - pad[0], ws = ow * stride[1] - pad[1];
                int64_t he = hs + k[0] < H + pad[0] ? hs + k[0] : H + pad[0];
                int64_t we = ws + k[1] < W + pad[1] ? ws + k[1] : W + pad[1];
                int64_t pool = (he - hs) * (we - ws);
                if (hs < 0) hs = 0;
                if (ws < 0) ws = 0;
                if (he > H) he = H;
                if (we > W) we = W;
                int64_t div = divisor_override ? divisor_override
                              : count_include_pad ? pool : (he - hs) * (we - ws);
                for (int64_t c = 0; c < C; c++) {
                    float s = window_sum(X, n, H, W, C, c, hs, he, ws, we);
                    Y[((n * OH + oh) * OW + ow) * C + c] = div ? s / (float)div : NAN;
                }
            }
    sim_scatter(Y, out);
    free(X);
    free(Y);
    return SIM_OK;
}

sim_status simk_adaptive_avg_pool2d_nhwc(const char *fn, const char *kernel, const sim_view *in, const sim_view *out) {
    if (in->ndim != 4 || out->ndim != 4)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "input and output must be 4-D NHWC");
    int64_t N = in->shape[0], H = in->shape[1], W = in->shape[2], C = in->shape[3];
    int64_t OH = out->shape[1], OW = out->shape[2];
    sim_status st = check_out_shape4(fn, out, N, OH, OW, C);
    if (st) return st;
    if (out->dtype != in->dtype) return sim_fail(SIM_E_UNSUPPORTED, fn, "mixed dtypes");
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    float *X = gather_or_die(in);
    float *Y = alloc_f(N * OH * OW * C);
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t hs = (oh * H) / OH, he = ((oh + 1) * H + OH - 1) / OH;
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t ws = (ow * W) / OW, we = ((ow + 1) * W + OW - 1) / OW;
                for (int64_t c = 0; c < C; c++)
                    Y[((n * OH + oh) * OW + ow) * C + c] =
                        window_sum(X, n, H, W, C, c, hs, he, ws, we) / (float)((he - hs) * (we - ws));
            }
        }
    sim_scatter(Y, out);
    free(X);
    free(Y);
    return SIM_OK;
}

/* ------------------------------------------------------------ normalize */

sim_status simk_batch_norm_infer(const char *fn, const char *kernel, const sim_view *in, const sim_view *w,
                                 const sim_view *b, const sim_view *mean, const sim_view *var,
                                 double eps, const sim_view *out) {
    if (in->ndim < 2) return sim_fail(SIM_E_INVALID_VALUE, fn, "input must be [N, C, ...]");
    sim_status st = simk_check_same(fn, "input", in, out);
    if (st) return st;
    int64_t C = in->shape[1];
    const sim_view *per_ch[4] = {w, b, mean, var};
    const char *names[4] = {"weight", "bias", "running_mean", "running_var"};
    for (int i = 0; i < 4; i++) {
        if (!per_ch[i]->present) {
            if (i >= 2) return sim_fail(SIM_E_INVALID_VALUE, fn, "%s is required", names[i]);
            continue;
        }
        if (per_ch[i]->ndim != 1 || per_ch[i]->shape[0] != C)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "%s must be [%lld]", names[i], (long long)C);
    }
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    int64_t n = sim_numel(in), inner = 1;
    for (int d = 2; d < in->ndim; d++) inner *= in->shape[d];
    float *X = gather_or_die(in);
    float *Wv = w->present ? gather_or_die(w) : NULL, *Bv = b->present ? gather_or_die(b) : NULL;
    float *Mv = gather_or_die(mean), *Vv = gather_or_die(var);
    for (int64_t i = 0; i < n; i++) {
        int64_t c = (i / inner) % C;
        float inv = 1.0f / sqrtf(Vv[c] + (float)eps);
        float y = (X[i] - Mv[c]) * inv;
        if (Wv) y *= Wv[c];
        if (Bv) y += Bv[c];
        X[i] = y;
    }
    sim_scatter(X, out);
    free(X); free(Wv); free(Bv); free(Mv); free(Vv);
    return SIM_OK;
}

sim_status simk_layer_norm(const char *fn, const char *kernel, const sim_view *in, int64_t norm_ndim,
                           const sim_view *w, const sim_view *b, double eps, const sim_view *out,
                           const sim_view *mean, const sim_view *rstd) {
    if (norm_ndim < 1 || norm_ndim > in->ndim)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "normalized dims %lld out of range for %d-D input",
                        (long long)norm_ndim, in->ndim);
    sim_status st = simk_check_same(fn, "input", in, out);
    if (st) return st;
    int64_t inner = 1;
    for (int d = in->ndim - (int)norm_ndim; d < in->ndim; d++) inner *= in->shape[d];
    int64_t n = sim_numel(in), outer = inner ? n / inner : 0;
    const sim_view *aff[2] = {w, b};
    for (int i = 0; i < 2; i++)
        if (aff[i]->present && sim_numel(aff[i]) != inner)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "%s must have %lld elements",
                            i ? "bias" : "weight", (long long)inner);
    const sim_view *stats[2] = {mean, rstd};
    for (int i = 0; i < 2; i++)
        if (stats[i]->present && sim_numel(stats[i]) != outer)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "%s must have %lld elements",
                            i ? "rstd" : "mean", (long long)outer);
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    float *X = gather_or_die(in);
    float *Wv = w->present ? gather_or_die(w) : NULL, *Bv = b->present ? gather_or_die(b) : NULL;
    float *Mo = alloc_f(outer), *Ro = alloc_f(outer);
    for (int64_t r = 0; r < outer; r++) {
        float *x = X + r * inner;
        double s = 0, ss = 0;
        for (int64_t i = 0; i < inner; i++) s += x[i];
        double mu = s / (double)inner;
        for (int64_t i = 0; i < inner; i++) ss += (x[i] - mu) * (x[i] - mu);
        double rs = 1.0 / sqrt(ss / (double)inner + eps);
        for (int64_t i = 0; i < inner; i++) {
            float y = (float)((x[i] - mu) * rs);
            if (Wv) y *= Wv[i];
            if (Bv) y += Bv[i];
            x[i] = y;
        }
        Mo[r] = (float)mu;
        Ro[r] = (float)rs;
    }
    sim_scatter(X, out);
    if (mean->present) sim_scatter(Mo, mean);
    if (rstd->present) sim_scatter(Ro, rstd);
    free(X); free(Wv); free(Bv); free(Mo); free(Ro);
    return SIM_OK;
}

sim_status simk_reduce(const char *fn, const char *kernel, const sim_view *in, uint32_t reduce, int mean,
                       const sim_view *out) {
    int nd = in->ndim;
    int64_t kept = 1, count = 1;
    for (int d = 0; d < nd; d++) {
        if (reduce & (1u << d)) count *= in->shape[d];
        else kept *= in->shape[d];
    }
    if (sim_numel(out) != kept)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "output has %lld elements, the reduction gives %lld",
                        (long long)sim_numel(out), (long long)kept);
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    float *X = gather_or_die(in);
    double *acc = calloc((size_t)(kept ? kept : 1), sizeof(double));
    if (!acc) abort();
    /* output index = the input's multi-index with reduced dims dropped */
    int64_t ostride[SIM_MAX_DIMS], s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        ostride[d] = (reduce & (1u << d)) ? 0 : s;
        if (!(reduce & (1u << d))) s *= in->shape[d];
    }
    int64_t n = sim_numel(in), idx[SIM_MAX_DIMS] = {0}, o = 0;
    for (int64_t i = 0; i < n; i++) {
        acc[o] += X[i];
        for (int d = nd - 1; d >= 0; d--) {
            o += ostride[d];
            if (++idx[d] < in->shape[d]) break;
            o -= ostride[d] * idx[d];
            idx[d] = 0;
        }
    }
    float *R = alloc_f(kept);
    for (int64_t i = 0; i < kept; i++)
        R[i] = (float)(mean ? (count ? acc[i] / (double)count : NAN) : acc[i]);
    sim_scatter(R, out);
    free(X);
    free(acc);
    free(R);
    return SIM_OK;
}

sim_status simk_softmax(const char *fn, const char *kernel, const sim_view *in, int64_t dim, int log, int slow,
                        const sim_view *out) {
    int nd = in->ndim;
    if (nd == 0) dim = 0;
    else if (dim < 0) dim += nd;
    if (nd > 0 && (dim < 0 || dim >= nd))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "dim out of range for %d-D input", nd);
    sim_status st = simk_check_same(fn, "input", in, out);
    if (st) return st;
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    int64_t D = nd ? in->shape[dim] : 1, inner = 1, outer = 1;
    for (int d = 0; d < nd; d++) {
        if (d < dim) outer *= in->shape[d];
        else if (d > dim) inner *= in->shape[d];
    }
    float *X = gather_or_die(in);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            float *x = X + o * D * inner + i;
            float mx = -INFINITY;
            for (int64_t j = 0; j < D; j++)
                if (x[j * inner] > mx) mx = x[j * inner];
            if (slow == 2 && mx == -INFINITY) { /* "safe": a fully masked row is all zeros */
                for (int64_t j = 0; j < D; j++) x[j * inner] = 0.0f;
                continue;
            }
            double sum = 0;
            for (int64_t j = 0; j < D; j++) sum += expf(x[j * inner] - mx);
            if (log) {
                float lse = (float)(mx + logf((float)sum));
                for (int64_t j = 0; j < D; j++) x[j * inner] -= lse;
            } else if (slow) {
                /* the vendor's generic path: recomputes exp and divides */
                for (int64_t j = 0; j < D; j++) x[j * inner] = expf(x[j * inner] - mx) / (float)sum;
            } else {
                float inv = (float)(1.0 / sum);
                for (int64_t j = 0; j < D; j++) x[j * inner] = expf(x[j * inner] - mx) * inv;
            }
        }
    sim_scatter(X, out);
    free(X);
    return SIM_OK;
}

sim_status simk_embedding(const char *fn, const char *kernel, const sim_view *weight, const sim_view *indices,
                          const sim_view *out) {
    if (weight->ndim != 2) return sim_fail(SIM_E_INVALID_VALUE, fn, "weight must be 2-D");
    if (indices->dtype != SIM_I64 && indices->dtype != SIM_I32)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "indices must be int32 or int64");
    int64_t V = weight->shape[0], D = weight->shape[1];
    if (out->ndim != indices->ndim + 1 || out->shape[out->ndim - 1] != D)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "output must be indices.shape + [%lld]", (long long)D);
    for (int d = 0; d < indices->ndim; d++)
        if (out->shape[d] != indices->shape[d])
            return sim_fail(SIM_E_INVALID_VALUE, fn, "output must be indices.shape + [%lld]",
                            (long long)D);
    if (out->dtype != weight->dtype) return sim_fail(SIM_E_UNSUPPORTED, fn, "mixed dtypes");
    int64_t n = sim_numel(indices), idx[SIM_MAX_DIMS] = {0};
    size_t es = sim_dtype_size(out->dtype), is = sim_dtype_size(indices->dtype);
    /* check every index before writing anything, then launch */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            sim_status lst = sim_launch(kernel, fn);
            if (lst) return lst;
        }
        memset(idx, 0, sizeof idx);
        for (int64_t i = 0; i < n; i++) {
            int64_t io = 0, oo = 0;
            for (int d = 0; d < indices->ndim; d++) {
                io += idx[d] * indices->strides[d];
                oo += idx[d] * out->strides[d];
            }
            int64_t row = (int64_t)sim_load(indices->base + io * (int64_t)is, indices->dtype);
            if (pass == 0 && (row < 0 || row >= V))
                return sim_fail(SIM_E_DATA, fn, "index %lld out of range [0, %lld)", (long long)row,
                                (long long)V);
            if (pass == 1)
                for (int64_t j = 0; j < D; j++)
                    memcpy(out->base + (oo + j * out->strides[out->ndim - 1]) * (int64_t)es,
                           weight->base + (row * weight->strides[0] + j * weight->strides[1]) * (int64_t)es,
                           es);
            for (int d = indices->ndim - 1; d >= 0; d--) {
                if (++idx[d] < indices->shape[d]) break;
                idx[d] = 0;
            }
        }
    }
    return SIM_OK;
}
