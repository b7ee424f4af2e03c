/*
 * simkernels.c: the arithmetic of the simulated chips.
 *
 * Kernels read their operands in place through the views' strides, one row
 * (see sim_iter in simcore.h) and at most BLK elements at a time: a float32
 * run with unit stride is used where it lies, anything else (strided,
 * broadcast, float16/bfloat16, bool) is converted into a small float (or
 * int64) buffer on the stack first.  Everything is computed in float (half
 * and bfloat16 are "compute in float, store narrow", as the chips claim) and
 * written back through the output's strides with round-to-nearest-even.  The
 * operation is chosen once per block, never per element, so the loops
 * vectorize; exp, erf and tanh are evaluated in double with vector
 * instructions (correctly rounded to float but for rare near-ties).  That
 * keeps every kernel correct and fast for any layout the descriptor can
 * express; layout *requirements* (NHWC, contiguity) are enforced by callers.
 *
 * Aliasing: an input that shares memory with an output in any way other than
 * element for element (the same view: an in-place op) is copied aside first,
 * so results are always those of reading every input before writing.
 */
#if defined(__GNUC__) && !defined(__clang__)
/* Lets GCC turn a select after float arithmetic into a blend, so such loops
 * vectorize (floating-point exception flags are never read); it changes no
 * result. */
#pragma GCC optimize("no-trapping-math")
#endif
#include "simkernels.h"
#include "simblas.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE__)
#include <immintrin.h>
#endif

#define BLK 512 /* elements per block: a few such buffers stay in L1 */

static inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

/* Allocation failures inside a kernel are device OOM in spirit; the host has
 * plenty here, so they are treated as fatal bugs of the simulator itself. */
static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

static float *alloc_f(int64_t n) {
    float *b = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (!b) abort();
    return b;
}

static double *alloc_d(int64_t n) {
    double *b = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (!b) abort();
    return b;
}

/* exp, erf and tanh are computed in double and rounded once to float, with
 * AVX-512 or AVX2+FMA instructions where the compiler targets them (below),
 * else in plain C.  exp: 2^n * p(r), r = x - n ln2 (|r| <= ln2/2), p the
 * Taylor polynomial of degree 11 (relative error below 1e-14), so it is
 * correctly rounded but within 1e-14 of a rounding boundary; glibc's expf
 * (within 0.502 ulp) misrounds about one input in 12,000. */
#if defined(__AVX512F__) && defined(__AVX512VL__)
/* fused multiply-adds, ln2 in two parts, 8 lanes at a time */
#define VEXP_N 8
typedef __m512d vd;
typedef __m256 vf;
#define vd_set1 _mm512_set1_pd
#define vd_fma _mm512_fmadd_pd
#define vd_fnma _mm512_fnmadd_pd
#define vd_max _mm512_max_pd
#define vd_min _mm512_min_pd
#define vd_sub _mm512_sub_pd
#define vd_mul _mm512_mul_pd
#define vf_load _mm256_loadu_ps
#define vf_store _mm256_storeu_ps
static inline double vd_hsum(vd v) { return _mm512_reduce_add_pd(v); }
static inline vd vd_pow2(vd tm) { /* 2^n from the integer n in tm's low bits */
    return _mm512_castsi512_pd(
        _mm512_slli_epi64(_mm512_add_epi64(_mm512_castpd_si512(tm), _mm512_set1_epi64(1023)), 52));
}
static inline vd vf_widen(vf x) { return _mm512_cvtps_pd(x); }
static inline vf vd_narrow(vd x) { return _mm512_cvtpd_ps(x); }
static inline vf vf_nan_from(vf r, vf x) { /* NaN inputs give themselves, quieted */
    return _mm256_mask_add_ps(r, _mm256_cmp_ps_mask(x, x, _CMP_UNORD_Q), x, x);
}
#define vd_add _mm512_add_pd
#define vd_div _mm512_div_pd
static inline vd vd_abs(vd x) {
    return _mm512_castsi512_pd(_mm512_and_si512(_mm512_castpd_si512(x), _mm512_set1_epi64(INT64_MAX)));
}
static inline vd vd_copysign(vd mag, vd sgn) { /* mag >= 0 */
    return _mm512_castsi512_pd(_mm512_or_si512(_mm512_castpd_si512(mag),
        _mm512_and_si512(_mm512_castpd_si512(sgn), _mm512_set1_epi64(INT64_MIN))));
}
static inline vd vd_select_lt(vd a, vd b, vd x, vd y) { /* a < b ? x : y */
    return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a, b, _CMP_LT_OQ), y, x);
}
/* t-th coefficients of the 16 intervals, for each lane's interval k (0..15) */
typedef __m512i vk;
static inline vk vk_interval(vd a4) { /* floor(a4) for 0 <= a4, at most 15 */
    return _mm512_cvtepi32_epi64(_mm256_min_epi32(_mm512_cvttpd_epi32(a4), _mm256_set1_epi32(15)));
}
static inline vd vd_lookup16(const double *row, vk k) {
    return _mm512_permutex2var_pd(_mm512_loadu_pd(row), k, _mm512_loadu_pd(row + 8));
}
#elif defined(__AVX2__) && defined(__FMA__)
#define VEXP_N 4
typedef __m256d vd;
typedef __m128 vf;
#define vd_set1 _mm256_set1_pd
#define vd_fma _mm256_fmadd_pd
#define vd_fnma _mm256_fnmadd_pd
#define vd_max _mm256_max_pd
#define vd_min _mm256_min_pd
#define vd_sub _mm256_sub_pd
#define vd_mul _mm256_mul_pd
#define vf_load _mm_loadu_ps
static inline double vd_hsum(vd v) {
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}
#define vf_store _mm_storeu_ps
static inline vd vd_pow2(vd tm) {
    return _mm256_castsi256_pd(
        _mm256_slli_epi64(_mm256_add_epi64(_mm256_castpd_si256(tm), _mm256_set1_epi64x(1023)), 52));
}
static inline vd vf_widen(vf x) { return _mm256_cvtps_pd(x); }
static inline vf vd_narrow(vd x) { return _mm256_cvtpd_ps(x); }
static inline vf vf_nan_from(vf r, vf x) {
    return _mm_blendv_ps(r, _mm_add_ps(x, x), _mm_cmp_ps(x, x, _CMP_UNORD_Q));
}
#define vd_add _mm256_add_pd
#define vd_div _mm256_div_pd
static inline vd vd_abs(vd x) { return _mm256_andnot_pd(_mm256_set1_pd(-0.0), x); }
static inline vd vd_copysign(vd mag, vd sgn) {
    return _mm256_or_pd(mag, _mm256_and_pd(sgn, _mm256_set1_pd(-0.0)));
}
static inline vd vd_select_lt(vd a, vd b, vd x, vd y) {
    return _mm256_blendv_pd(y, x, _mm256_cmp_pd(a, b, _CMP_LT_OQ));
}
typedef __m128i vk;
static inline vk vk_interval(vd a4) { return _mm_min_epi32(_mm256_cvttpd_epi32(a4), _mm_set1_epi32(15)); }
static inline vd vd_lookup16(const double *row, vk k) { return _mm256_i32gather_pd(row, k, 8); }
#endif

/* softmax's exp: float arithmetic, FE_N lanes (AVX-512: 16, AVX2: 8), for
 * x <= 0 (a row less its maximum): 2^n * p(r) with r = x - n ln2 (ln2 in two
 * parts), p the Taylor polynomial of degree 7 (relative error 5e-9), within
 * one ulp of e^x; -inf and anything below -110 give 0.  Softmax rescales
 * and sums what it computes, so the correctly rounded exp above (whose
 * double arithmetic takes three times as long) would buy nothing there. */
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(VEXP_N)
#define FE_N 16
typedef __m512 fe;
#define fe_load _mm512_loadu_ps
#define fe_store _mm512_storeu_ps
#define fe_set1 _mm512_set1_ps
#define fe_fma _mm512_fmadd_ps
#define fe_fnma _mm512_fnmadd_ps
#define fe_sub _mm512_sub_ps
#define fe_mul _mm512_mul_ps
#define fe_max _mm512_max_ps
#define fe_lo(e) _mm512_castps512_ps256(e)
#define fe_hi(e) _mm512_extractf32x8_ps(e, 1)
static inline fe fe_gt_select(fe v, fe m) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, m, _CMP_GT_OQ), m, v); }
static inline fe fe_scale(fe p, fe n) { return _mm512_scalef_ps(p, n); } /* p * 2^n, exact into subnormals */
static inline float fe_hmax(fe v) { return _mm512_reduce_max_ps(v); } /* v holds no NaN */
static inline fe fe_nan_from(fe r, fe x) { return _mm512_mask_add_ps(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x, x); }
#elif defined(__AVX2__) && defined(__FMA__) && defined(VEXP_N)
#define FE_N 8
typedef __m256 fe;
#define fe_load _mm256_loadu_ps
#define fe_store _mm256_storeu_ps
#define fe_set1 _mm256_set1_ps
#define fe_fma _mm256_fmadd_ps
#define fe_fnma _mm256_fnmadd_ps
#define fe_sub _mm256_sub_ps
#define fe_mul _mm256_mul_ps
#define fe_max _mm256_max_ps
#define fe_lo(e) _mm256_castps256_ps128(e)
#define fe_hi(e) _mm256_extractf128_ps(e, 1)
static inline fe fe_gt_select(fe v, fe m) { return _mm256_blendv_ps(m, v, _mm256_cmp_ps(v, m, _CMP_GT_OQ)); }
static inline fe fe_scale(fe p, fe n) { /* in two steps, so that 2^n below FLT_MIN still scales */
    __m256i ni = _mm256_cvtps_epi32(n), h = _mm256_srai_epi32(ni, 1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h),
                                                                       _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}
static inline float fe_hmax(fe v) { /* v holds no NaN */
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_shuffle_ps(h, h, 1)));
}
static inline fe fe_nan_from(fe r, fe x) {
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    return _mm256_blendv_ps(r, _mm256_add_ps(x, x), nan);
}
#endif

#ifdef FE_N
static inline __attribute__((always_inline)) fe fe_exp_nonpos(fe x) {
    const fe shift = fe_set1(12582912.0f); /* 1.5 * 2^23: adding it rounds to an integer */
    fe xc = fe_max(x, fe_set1(-110.0f));   /* -inf and NaN: -110 (NaN is put back below) */
    fe n = fe_sub(fe_fma(xc, fe_set1(1.44269504088896341f), shift), shift);
    fe r = fe_fnma(n, fe_set1(0.693359375f), xc); /* ln2 = hi + lo, n * hi exact */
    r = fe_fnma(n, fe_set1(-2.12194440e-4f), r);
    fe p = fe_fma(r, fe_set1(1.0f / 5040), fe_set1(1.0f / 720));
    p = fe_fma(p, r, fe_set1(1.0f / 120));
    p = fe_fma(p, r, fe_set1(1.0f / 24));
    p = fe_fma(p, r, fe_set1(1.0f / 6));
    p = fe_fma(p, r, fe_set1(0.5f));
    p = fe_fma(p, r, fe_set1(1.0f));
    p = fe_fma(p, r, fe_set1(1.0f));
    return fe_nan_from(fe_scale(p, n), x);
}
#endif

#ifdef VEXP_N
/* e^x in double for x in [-110, 100] (the callers clamp) */
static inline __attribute__((always_inline)) vd vd_exp(vd x) {
    const vd shift = vd_set1(6755399441055744.0);
    vd tm = vd_fma(x, vd_set1(1.4426950408889634074), shift);
    vd n = vd_sub(tm, shift);
    vd r = vd_fnma(n, vd_set1(0.693145751953125), x); /* ln2 = hi + lo, n * hi exact */
    r = vd_fnma(n, vd_set1(1.42860682030941723212e-6), r);
    /* the Taylor polynomial by Estrin's scheme: a short dependency chain, for short rows */
    vd r2 = vd_mul(r, r), r4 = vd_mul(r2, r2), r8 = vd_mul(r4, r4);
    vd p01 = vd_fma(r, vd_set1(1.0), vd_set1(1.0)), p23 = vd_fma(r, vd_set1(1.0 / 6), vd_set1(1.0 / 2));
    vd p45 = vd_fma(r, vd_set1(1.0 / 120), vd_set1(1.0 / 24));
    vd p67 = vd_fma(r, vd_set1(1.0 / 5040), vd_set1(1.0 / 720));
    vd p89 = vd_fma(r, vd_set1(1.0 / 362880), vd_set1(1.0 / 40320));
    vd pab = vd_fma(r, vd_set1(1.0 / 39916800), vd_set1(1.0 / 3628800));
    vd p03 = vd_fma(r2, p23, p01), p47 = vd_fma(r2, p67, p45), p8b = vd_fma(r2, pab, p89);
    vd p = vd_fma(r8, p8b, vd_fma(r4, p47, p03));
    return vd_mul(p, vd_pow2(tm));
}

static inline __attribute__((always_inline)) vf vf_exp(vf xf) {
    vd x = vd_min(vd_max(vf_widen(xf), vd_set1(-110.0)), vd_set1(100.0)); /* NaN: fixed below */
    return vf_nan_from(vd_narrow(vd_exp(x)), xf);
}

/* erf in double: 16 intervals of width 1/4 over [0, 4), a polynomial of
 * degree 11 in t = |x| - centre on each (Chebyshev interpolation of erf,
 * computed in 120-bit arithmetic with mpmath, expanded in powers of t); the
 * first interval, centred on 0, is erf's own Taylor series, so small
 * arguments keep their relative accuracy.  Relative error below 1e-11;
 * from |x| = 4 on erf is +-1 in float. */
static const double ERF_CENTRE[16] = {0,     0.375, 0.625, 0.875, 1.125, 1.375, 1.625, 1.875,
                                      2.125, 2.375, 2.625, 2.875, 3.125, 3.375, 3.625, 3.875};
static const double ERF_C[12][16] = {
    {0.0, 0.4041169094348221, 0.6232408821884178, 0.7840750610598595,
     0.8883882317017074, 0.9481700727820901, 0.9784437332399832, 0.9919900576701196,
     0.9973459706405174, 0.9992170617821086, 0.9997946242638585, 0.9999521451602558,
     0.9999901032653745, 0.9999981847185722, 0.999999704859807, 0.9999999574860555},
    {1.1283791670955126, 0.9803528095459128, 0.7634995357606089, 0.5247450452901515,
     0.31827395850077383, 0.17035977368751962, 0.0804722590225158, 0.03354582842421967,
     0.012340820614336234, 0.004006477861673712, 0.0011478751258884035, 0.00029022828286730126,
     6.475868323690927e-05, 1.275174080466017e-05, 2.215920289500439e-06, 3.398223867616201e-07},
    {0.0, -0.36763230357988924, -0.4771872098503981, -0.4591519146288919,
     -0.358058203313604, -0.2342446888204518, -0.1307674209117833, -0.0628984282955471,
     -0.026224243805625082, -0.009515384921586871, -0.003013172205599543, -0.0008344063134162772,
     -0.00020237088522465603, -4.303712541502434e-05, -8.032711189173286e-06, -1.31681189345423e-06},
    {-0.37612638903183754, -0.23487619395908577, -0.05567184115345893, 0.09292360176692713,
     0.16245233297907968, 0.15793770685054437, 0.11484061963988808, 0.06744109255612361,
     0.03303740518228849, 0.013730533500074563, 0.004890426309305203, 0.0015025359986722234,
     0.00040001977977472726, 9.25829444280604e-05, 1.867373726273141e-05, 3.2884824022801602e-06},
    {0.0, 0.16658338764361524, 0.17645985365841987, 0.11239656244917724,
     0.027973297261625594, -0.030500610446397187, -0.04971886304391248, -0.0422598814214754,
     -0.0263608283199601, -0.013133213487579839, -0.005414293705782916, -0.0018817599563352477,
     -0.0005575738848130569, -0.00014188790907309064, -3.1168492990328645e-05, -5.932411035873287e-06},
    {0.11283791670955126, 0.04547535217344428, -0.02741340946842314, -0.0672158761930296,
     -0.06132368137215379, -0.030605973979115964, -0.0021349220601318965, 0.011462585424367969,
     0.012495484227728783, 0.008357394911326754, 0.00421788385899982, 0.0017132663526411695,
     0.0005769627972261685, 0.00016377680488422288, 3.95954884107781e-05, 8.211717429548664e-06},
    {0.0, -0.05010667049113661, -0.04134483733425286, -0.010367789930858143,
     0.015536810785968394, 0.022161219059029742, 0.014414757988608319, 0.004105168597910354,
     -0.001821429690604417, -0.003114094989011874, -0.0022468552819142414, -0.0011400984771380899,
     -0.00045232785168858856, -0.00014643064249700988, -3.955003238503344e-05, -9.042103421013323e-06},
    {-0.026866170645131252, -0.0054592472778933615, 0.013909751702321223, 0.01859553301023642,
     0.009606527115394697, -0.00141944047892951, -0.006184718964704661, -0.0049287346133811095,
     -0.0018695257892564275, 0.00012292455629208445, 0.0006803462433068676, 0.0005280614439784973,
     0.0002662629289247033, 0.00010171653916942372, 3.0996167540672856e-05, 7.5616746136466056e-06},
    {0.0, 0.011249997449160847, 0.006686498263653325, -0.0018456863941117136,
     -0.006029275555950063, -0.004259692245644022, -0.0005746502736888376, 0.001432024370154676,
     0.0013847056788580097, 0.0005954462886717547, 3.6452975998266936e-05, -0.00013362809009449315,
     -0.00011024002639202366, -5.310788375405e-05, -1.8342926478844623e-05, -4.089002594201631e-06},
    {0.005223977625442188, 0.00014956060366662962, -0.003615208330901755, -0.0032429594201764727,
     -0.00033380924851158936, 0.0016048795803213993, 0.001443275758417109, 0.00038665662050603233,
     -0.00027067194607233364, -0.0003128063513128607, -0.0001161987263245016, 2.0124631082391117e-05,
     4.130333185604002e-05, 5.453365475725824e-05, 4.6717136907312933e-05, 3.702168141814357e-05},
    {0.0, -0.002031834636614376, -0.0007439451294799352, 0.0008791942633168772,
     0.0010949468043271364, 0.00028588494580987034, -0.00040727553584973076, -0.00043269805030631377,
     -0.0001608953827529855, 1.5913376778844474e-05, 2.1503907348272306e-05, -2.3203050189547672e-05,
     -2.4925425287018604e-05, -5.333541787450161e-05, -5.377661630612566e-05, -5.234424985789087e-05},
    {-0.0008548327023450853, -0.0005453776074150251, 0.00021262739797075678, 2.9484393191385627e-05,
     -0.000860562398543881, -0.0010304348673052278, -0.0009626705466679607, -0.0005553012352127946,
     -0.0003959918703507744, -0.0006050352531213584, -0.000929001959185816, -0.0009444754166978686,
     -0.0004197669518403939, -0.0008483848238761772, -0.0009326780574116231, -0.0008594290605860439}
};

static inline __attribute__((always_inline)) vf vf_erf(vf xf) {
    vd x = vf_widen(xf), a = vd_min(vd_abs(x), vd_set1(4.0));
    vk k = vk_interval(vd_mul(a, vd_set1(4.0)));
    vd kd = vd_lookup16(ERF_CENTRE, k), t = vd_sub(a, kd);
    vd c[12];
    for (int i = 0; i < 12; i++) c[i] = vd_lookup16(ERF_C[i], k);
    vd t2 = vd_mul(t, t), t4 = vd_mul(t2, t2), t8 = vd_mul(t4, t4); /* Estrin's scheme */
    vd q0 = vd_fma(t2, vd_fma(t, c[3], c[2]), vd_fma(t, c[1], c[0]));
    vd q1 = vd_fma(t2, vd_fma(t, c[7], c[6]), vd_fma(t, c[5], c[4]));
    vd q2 = vd_fma(t2, vd_fma(t, c[11], c[10]), vd_fma(t, c[9], c[8]));
    vd p = vd_fma(t8, q2, vd_fma(t4, q1, q0));
    p = vd_select_lt(a, vd_set1(4.0), p, vd_set1(1.0));
    return vf_nan_from(vd_narrow(vd_copysign(p, x)), xf);
}

/* tanh in double from e^2|x|: (E - 1) / (E + 1), exact enough from |x| = 1e-4
 * up (E - 1 keeps 12 digits), below that x - x^3/3; 1 from |x| = 20 on. */
static inline __attribute__((always_inline)) vf vf_tanh(vf xf) {
    vd x = vf_widen(xf), a = vd_min(vd_abs(x), vd_set1(20.0));
    vd e = vd_exp(vd_add(a, a));
    vd big = vd_div(vd_sub(e, vd_set1(1.0)), vd_add(e, vd_set1(1.0)));
    vd small = vd_fnma(vd_mul(a, vd_mul(a, a)), vd_set1(1.0 / 3), a);
    return vf_nan_from(vd_narrow(vd_copysign(vd_select_lt(a, vd_set1(1e-4), small, big), x)), xf);
}

/* o[i] = F(x[i]) for one of the vector functions above (o may be x) */
#define VF_RUN(name, F)                                                                   \
    static void name(float *o, const float *x, int64_t n) {                               \
        int64_t i = 0;                                                                    \
        for (; i + 2 * VEXP_N <= n; i += 2 * VEXP_N) { /* two chains in flight */         \
            vf a = F(vf_load(x + i)), b = F(vf_load(x + i + VEXP_N));                     \
            vf_store(o + i, a);                                                           \
            vf_store(o + i + VEXP_N, b);                                                  \
        }                                                                                 \
        for (; i + VEXP_N <= n; i += VEXP_N) vf_store(o + i, F(vf_load(x + i)));          \
        if (i < n) { /* the tail through the same arithmetic */                           \
            float t[VEXP_N] = {0};                                                        \
            memcpy(t, x + i, (size_t)(n - i) * sizeof(float));                            \
            vf_store(t, F(vf_load(t)));                                                   \
            memcpy(o + i, t, (size_t)(n - i) * sizeof(float));                            \
        }                                                                                 \
    }
VF_RUN(exp_run, vf_exp)
VF_RUN(tanh_run, vf_tanh)
#if defined(__AVX512F__)
/* erf for GELU and its gradient: the piecewise polynomials above evaluated
 * in float, 16 lanes at a time, each lane's coefficients picked from a
 * 16-entry table in one register (vpermps): four times fewer instructions
 * than the double evaluation, within about one ulp of erf (GELU's formula
 * adds more rounding than that; PyTorch's own vectorized erf is a float
 * approximation too). */
static inline __m512 f16x_from_d(const double *p) { /* 16 doubles -> 16 floats */
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(_mm512_loadu_pd(p))),
                              _mm512_cvtpd_ps(_mm512_loadu_pd(p + 8)), 1);
}

static void erf_run(float *o, const float *x, int64_t n) {
    /* erf = c0 + c1 t + t^2 S(t): c0 and c1 as float pairs (hi + lo), added
     * so that the large parts round once, S's coefficients as floats */
    __m512 c[12], lo[2], centre = f16x_from_d(ERF_CENTRE);
    for (int i = 0; i < 12; i++) c[i] = f16x_from_d(ERF_C[i]);
    for (int i = 0; i < 2; i++) {
        double d[16];
        float hi[16];
        _mm512_storeu_ps(hi, c[i]);
        for (int j = 0; j < 16; j++) d[j] = ERF_C[i][j] - (double)hi[j];
        lo[i] = f16x_from_d(d);
    }
    const __m512 four = _mm512_set1_ps(4.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 live = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 xv = _mm512_maskz_loadu_ps(live, x + i);
        const __m512 a = _mm512_min_ps(_mm512_abs_ps(xv), four);
        const __m512i k = _mm512_min_epi32(_mm512_cvttps_epi32(_mm512_mul_ps(a, four)), _mm512_set1_epi32(15));
        const __m512 t = _mm512_sub_ps(a, _mm512_permutexvar_ps(k, centre)); /* exact */
        __m512 q[12];
        for (int j = 0; j < 12; j++) q[j] = _mm512_permutexvar_ps(k, c[j]);
        /* S(t) = q2 + q3 t + ... + q11 t^9 by Estrin's scheme */
        const __m512 t2 = _mm512_mul_ps(t, t), t4 = _mm512_mul_ps(t2, t2), t8 = _mm512_mul_ps(t4, t4);
        const __m512 s0 = _mm512_fmadd_ps(t2, _mm512_fmadd_ps(t, q[5], q[4]), _mm512_fmadd_ps(t, q[3], q[2]));
        const __m512 s1 = _mm512_fmadd_ps(t2, _mm512_fmadd_ps(t, q[9], q[8]), _mm512_fmadd_ps(t, q[7], q[6]));
        const __m512 S = _mm512_fmadd_ps(t8, _mm512_fmadd_ps(t, q[11], q[10]), _mm512_fmadd_ps(t4, s1, s0));
        const __m512 small = _mm512_fmadd_ps(t2, S, _mm512_fmadd_ps(t, _mm512_permutexvar_ps(k, lo[1]),
                                                                   _mm512_permutexvar_ps(k, lo[0])));
        __m512 p = _mm512_add_ps(q[0], _mm512_fmadd_ps(t, q[1], small));
        p = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, four, _CMP_LT_OQ), _mm512_set1_ps(1.0f), p);
        p = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(p), _mm512_and_si512(
            _mm512_castps_si512(xv), _mm512_set1_epi32((int)0x80000000u))));
        p = _mm512_mask_add_ps(p, _mm512_cmp_ps_mask(xv, xv, _CMP_UNORD_Q), xv, xv); /* NaN: itself, quieted */
        _mm512_mask_storeu_ps(o + i, live, p);
    }
}
#else
VF_RUN(erf_run, vf_erf)
#endif
#else
/* the exp above in plain C (GCC still vectorizes its loops) */
static inline float sk_expf(float xf) {
    double x = xf;
    x = x < -110.0 ? -110.0 : x; /* e^-110 is 0 in float, e^100 inf; keeps 2^n normal */
    x = x > 100.0 ? 100.0 : x;
    const double shift = 6755399441055744.0; /* 1.5 * 2^52: adding it rounds to an integer */
    double tm = x * 1.4426950408889634074 + shift;
    double n = tm - shift;
    uint64_t bits;
    memcpy(&bits, &tm, 8);
    bits = (bits + 1023u) << 52; /* n sits in the low bits: 2^n */
    double scale;
    memcpy(&scale, &bits, 8);
    double r = x - n * 0.69314718055994530942;
    double p = 1.0 + r * (1.0 + r * (1.0 / 2 + r * (1.0 / 6 + r * (1.0 / 24 + r * (1.0 / 120 +
               r * (1.0 / 720 + r * (1.0 / 5040 + r * (1.0 / 40320 + r * (1.0 / 362880 +
               r * (1.0 / 3628800 + r * (1.0 / 39916800)))))))))));
    float res = (float)(p * scale), quiet = xf + xf; /* unconditional: a select, not a branch */
    return xf != xf ? quiet : res;
}

static void exp_run(float *o, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) o[i] = sk_expf(x[i]);
}
static void erf_run(float *o, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) o[i] = erff(x[i]);
}
static void tanh_run(float *o, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) o[i] = tanhf(x[i]);
}
#endif

/* not inlined: GCC cannot see that callers fill t before it is read, and warns */
__attribute__((noinline)) static void exp_inplace(float *t, int64_t n) { exp_run(t, t, n); }
__attribute__((noinline)) static void erf_inplace(float *t, int64_t n) { erf_run(t, t, n); }
__attribute__((noinline)) static void tanh_inplace(float *t, int64_t n) { tanh_run(t, t, n); }

/* o[i] = sqrtf(a[i]) (o may be a).  GCC will not vectorize sqrtf while it
 * may set errno (even with no-math-errno per function); the square root is
 * correctly rounded in IEEE arithmetic, so the vector instruction gives
 * sqrtf's results exactly. */
static void sqrt_run(float *o, const float *a, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(o + i, _mm512_sqrt_ps(_mm512_loadu_ps(a + i)));
#elif defined(__AVX__)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, _mm256_sqrt_ps(_mm256_loadu_ps(a + i)));
#elif defined(__SSE__)
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(o + i, _mm_sqrt_ps(_mm_loadu_ps(a + i)));
#endif
    for (; i < n; i++) o[i] = sqrtf(a[i]);
}

/* float16 runs through the F16C conversion instructions, which round to
 * nearest even like sim_f2h; only NaN differs (they keep payload bits, the
 * simulator's conversions give PyTorch's canonical NaN), so a block holding
 * a NaN is redone element by element. */
static void h2f_run(float *restrict dst, const uint16_t *q, int64_t n) {
    int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
    for (; i + 8 <= n; i += 8) {
        __m256 f = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(q + i)));
        _mm256_storeu_ps(dst + i, f);
        if (_mm256_movemask_ps(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)))
            for (int k = 0; k < 8; k++) dst[i + k] = sim_h2f_inline(q[i + k]);
    }
#endif
    for (; i < n; i++) dst[i] = sim_h2f_inline(q[i]);
}

static void f2h_run(uint16_t *restrict q, const float *src, int64_t n) {
    int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
    for (; i + 8 <= n; i += 8) {
        __m256 f = _mm256_loadu_ps(src + i);
        _mm_storeu_si128((__m128i *)(q + i), _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        if (_mm256_movemask_ps(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)))
            for (int k = 0; k < 8; k++) q[i + k] = sim_f2h_inline(src[i + k]);
    }
#endif
    for (; i < n; i++) q[i] = sim_f2h_inline(src[i]);
}

/* ------------------------------------------------------ loads and stores */

/* dst[i] = element i (stride s elements) of dtype dt at p, as float */
static void cvt_to_f(float *restrict dst, const char *p, sim_dtype dt, int64_t s, int64_t n) {
    if (s == 0 && n > 1) { /* broadcast: one conversion */
        cvt_to_f(dst, p, dt, 1, 1);
        for (int64_t i = 1; i < n; i++) dst[i] = dst[0];
        return;
    }
    switch (dt) {
        case SIM_F32: {
            const float *q = (const float *)p;
            if (s == 1) memcpy(dst, q, (size_t)n * 4);
            else for (int64_t i = 0; i < n; i++) dst[i] = q[i * s];
            break;
        }
        case SIM_F16: {
            const uint16_t *q = (const uint16_t *)p;
            if (s == 1) h2f_run(dst, q, n);
            else for (int64_t i = 0; i < n; i++) dst[i] = sim_h2f_inline(q[i * s]);
            break;
        }
        case SIM_BF16: {
            const uint16_t *q = (const uint16_t *)p;
            if (s == 1) for (int64_t i = 0; i < n; i++) dst[i] = sim_bf2f_inline(q[i]);
            else for (int64_t i = 0; i < n; i++) dst[i] = sim_bf2f_inline(q[i * s]);
            break;
        }
        case SIM_BOOL: {
            const uint8_t *q = (const uint8_t *)p;
            for (int64_t i = 0; i < n; i++) dst[i] = q[i * s] ? 1.0f : 0.0f;
            break;
        }
        default: {
            int64_t es = (int64_t)sim_dtype_size(dt);
            for (int64_t i = 0; i < n; i++) dst[i] = (float)sim_load(p + i * s * es, dt);
        }
    }
}

/* A run as float: in place when it is dense float32, else converted into buf. */
static inline const float *ld_f(float *buf, const char *p, sim_dtype dt, int64_t s, int64_t n) {
    if (dt == SIM_F32 && s == 1) return (const float *)p;
    cvt_to_f(buf, p, dt, s, n);
    return buf;
}

/* element i (stride s) of dtype dt at p = src[i], rounded to nearest even */
static void cvt_from_f(char *p, sim_dtype dt, int64_t s, const float *restrict src, int64_t n) {
    switch (dt) {
        case SIM_F32: {
            float *q = (float *)p;
            if (s == 1) memcpy(q, src, (size_t)n * 4);
            else for (int64_t i = 0; i < n; i++) q[i * s] = src[i];
            break;
        }
        case SIM_F16: {
            uint16_t *q = (uint16_t *)p;
            if (s == 1) f2h_run(q, src, n);
            else for (int64_t i = 0; i < n; i++) q[i * s] = sim_f2h_inline(src[i]);
            break;
        }
        case SIM_BF16: {
            uint16_t *q = (uint16_t *)p;
            if (s == 1) for (int64_t i = 0; i < n; i++) q[i] = sim_f2bf_inline(src[i]);
            else for (int64_t i = 0; i < n; i++) q[i * s] = sim_f2bf_inline(src[i]);
            break;
        }
        case SIM_BOOL: {
            uint8_t *q = (uint8_t *)p;
            for (int64_t i = 0; i < n; i++) q[i * s] = src[i] != 0;
            break;
        }
        default: {
            int64_t es = (int64_t)sim_dtype_size(dt);
            for (int64_t i = 0; i < n; i++) sim_store(p + i * s * es, dt, src[i]);
        }
    }
}

/* Integers exactly (float dtypes never go here): int64, wrapping on store like C unsigned. */
static void cvt_to_i(int64_t *restrict dst, const char *p, sim_dtype dt, int64_t s, int64_t n) {
    switch (dt) {
        case SIM_I64: {
            const int64_t *q = (const int64_t *)p;
            if (s == 1) memcpy(dst, q, (size_t)n * 8);
            else for (int64_t i = 0; i < n; i++) dst[i] = q[i * s];
            break;
        }
        case SIM_I32: {
            const int32_t *q = (const int32_t *)p;
            for (int64_t i = 0; i < n; i++) dst[i] = q[i * s];
            break;
        }
        case SIM_I8: {
            const int8_t *q = (const int8_t *)p;
            for (int64_t i = 0; i < n; i++) dst[i] = q[i * s];
            break;
        }
        case SIM_U8: {
            const uint8_t *q = (const uint8_t *)p;
            for (int64_t i = 0; i < n; i++) dst[i] = q[i * s];
            break;
        }
        case SIM_BOOL: {
            const uint8_t *q = (const uint8_t *)p;
            for (int64_t i = 0; i < n; i++) dst[i] = q[i * s] != 0;
            break;
        }
        default:
            memset(dst, 0, (size_t)n * 8);
    }
}

static inline const int64_t *ld_i(int64_t *buf, const char *p, sim_dtype dt, int64_t s, int64_t n) {
    if (dt == SIM_I64 && s == 1) return (const int64_t *)p;
    cvt_to_i(buf, p, dt, s, n);
    return buf;
}

static void cvt_from_i(char *p, sim_dtype dt, int64_t s, const int64_t *restrict src, int64_t n) {
    switch (dt) {
        case SIM_I64: {
            int64_t *q = (int64_t *)p;
            if (s == 1) memcpy(q, src, (size_t)n * 8);
            else for (int64_t i = 0; i < n; i++) q[i * s] = src[i];
            break;
        }
        case SIM_I32: {
            int32_t *q = (int32_t *)p;
            for (int64_t i = 0; i < n; i++) q[i * s] = (int32_t)(uint32_t)(uint64_t)src[i];
            break;
        }
        case SIM_I8: {
            int8_t *q = (int8_t *)p;
            for (int64_t i = 0; i < n; i++) q[i * s] = (int8_t)(uint8_t)(uint64_t)src[i];
            break;
        }
        case SIM_U8: {
            uint8_t *q = (uint8_t *)p;
            for (int64_t i = 0; i < n; i++) q[i * s] = (uint8_t)(uint64_t)src[i];
            break;
        }
        case SIM_BOOL: {
            uint8_t *q = (uint8_t *)p;
            for (int64_t i = 0; i < n; i++) q[i * s] = src[i] != 0;
            break;
        }
        default:
            break;
    }
}

/* Between integer and floating dtypes, through double exactly as sim_load and
 * sim_store convert (int64 to float rounds twice, as it always has). */
static void cvt_to_d(double *restrict dst, const char *p, sim_dtype dt, int64_t s, int64_t n) {
    switch (dt) {
        case SIM_F64: {
            const double *q = (const double *)p;
            for (int64_t i = 0; i < n; i++) dst[i] = q[i * s];
            break;
        }
        case SIM_F32: case SIM_F16: case SIM_BF16: {
            float f[BLK];
            for (int64_t j = 0; j < n; j += BLK) {
                int64_t m = imin(BLK, n - j);
                cvt_to_f(f, p + j * s * (int64_t)sim_dtype_size(dt), dt, s, m);
                for (int64_t i = 0; i < m; i++) dst[j + i] = f[i];
            }
            break;
        }
        default: {
            int64_t v[BLK];
            for (int64_t j = 0; j < n; j += BLK) {
                int64_t m = imin(BLK, n - j);
                cvt_to_i(v, p + j * s * (int64_t)sim_dtype_size(dt), dt, s, m);
                for (int64_t i = 0; i < m; i++) dst[j + i] = (double)v[i];
            }
        }
    }
}

static void cvt_from_d(char *p, sim_dtype dt, int64_t s, const double *restrict src, int64_t n) {
    int64_t es = (int64_t)sim_dtype_size(dt);
    switch (dt) {
        case SIM_F64: {
            double *q = (double *)p;
            for (int64_t i = 0; i < n; i++) q[i * s] = src[i];
            break;
        }
        case SIM_F32: case SIM_F16: case SIM_BF16: {
            float f[BLK];
            for (int64_t j = 0; j < n; j += BLK) {
                int64_t m = imin(BLK, n - j);
                for (int64_t i = 0; i < m; i++) f[i] = (float)src[j + i];
                cvt_from_f(p + j * s * es, dt, s, f, m);
            }
            break;
        }
        case SIM_BOOL: {
            uint8_t *q = (uint8_t *)p;
            for (int64_t i = 0; i < n; i++) q[i * s] = src[i] != 0;
            break;
        }
        default: {
            int64_t v[BLK];
            for (int64_t j = 0; j < n; j += BLK) {
                int64_t m = imin(BLK, n - j);
                for (int64_t i = 0; i < m; i++) v[i] = (int64_t)src[j + i];
                cvt_from_i(p + j * s * es, dt, s, v, m);
            }
        }
    }
}

/* -------------------------------------------------------- whole views */

/* A dense row-major view of `like`'s shape over buf. */
static sim_view dense_over(void *buf, const sim_view *like, sim_dtype dt) {
    sim_view d = *like;
    d.base = buf;
    d.dtype = dt;
    d.present = 1;
    int64_t s = 1;
    for (int i = like->ndim - 1; i >= 0; i--) {
        d.strides[i] = s;
        s *= like->shape[i];
    }
    return d;
}

static void copy_any(const sim_view *src, const sim_view *dst);

/* the elements of v in row-major order */
static void gather_into(float *dst, const sim_view *v) {
    sim_view d = dense_over(dst, v, SIM_F32);
    copy_any(v, &d);
}

static void scatter_from(const float *src, const sim_view *v) {
    sim_view s = dense_over((void *)src, v, SIM_F32);
    copy_any(&s, v);
}

float *sim_gather(const sim_view *v) {
    int64_t n = sim_numel(v);
    float *buf = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!buf) return NULL;
    gather_into(buf, v);
    return buf;
}

void sim_scatter(const float *src, const sim_view *v) {
    scatter_from(src, v);
    sim_corrupt_output(v); /* debug mode only (X1SIM_CORRUPT / TH1SIM_CORRUPT) */
}

static float *gather_or_die(const sim_view *v) {
    float *b = sim_gather(v);
    if (!b) abort();
    return b;
}

static int64_t *gather_i_or_die(const sim_view *v) {
    int64_t *b = xmalloc((size_t)sim_numel(v) * sizeof(int64_t));
    if (v->dtype == SIM_I64) { /* bytes, through copy_any's tiled transposition if need be */
        sim_view d = dense_over(b, v, SIM_I64);
        copy_any(v, &d);
        return b;
    }
    int64_t *d = b;
    sim_iter it;
    if (sim_iter_views(&it, 1, &v))
        do {
            cvt_to_i(d, it.p[0], v->dtype, it.s[0], it.n);
            d += it.n;
        } while (sim_iter_next(&it));
    return b;
}

static void scatter_i(const int64_t *src, const sim_view *v) {
    sim_iter it;
    if (!sim_iter_views(&it, 1, &v)) return;
    do {
        cvt_from_i(it.p[0], v->dtype, it.s[0], src, it.n);
        src += it.n;
    } while (sim_iter_next(&it));
}

/* ------------------------------------------------------------ aliasing */

/* Bytes [lo, hi) a view can touch. */
static void view_span(const sim_view *v, intptr_t *lo, intptr_t *hi) {
    int64_t mn = 0, mx = 0;
    for (int d = 0; d < v->ndim; d++) {
        int64_t off = (v->shape[d] - 1) * v->strides[d];
        if (off < 0) mn += off;
        else mx += off;
    }
    int64_t es = (int64_t)sim_dtype_size(v->dtype);
    *lo = (intptr_t)v->base + (intptr_t)(mn * es);
    *hi = (intptr_t)v->base + (intptr_t)((mx + 1) * es);
}

static int views_overlap(const sim_view *a, const sim_view *b) {
    if (!a->present || !b->present || sim_numel(a) == 0 || sim_numel(b) == 0) return 0;
    intptr_t alo, ahi, blo, bhi;
    view_span(a, &alo, &ahi);
    view_span(b, &blo, &bhi);
    return alo < bhi && blo < ahi;
}

/* No two elements share memory (sufficient test: sorted by stride, each dim
 * steps past everything the smaller ones reach). */
static int view_injective(const sim_view *v) {
    int64_t st[SIM_MAX_DIMS], sh[SIM_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < v->ndim; d++) {
        if (v->shape[d] <= 1) continue;
        int i = n++;
        for (; i > 0 && st[i - 1] > v->strides[d]; i--) {
            st[i] = st[i - 1];
            sh[i] = sh[i - 1];
        }
        st[i] = v->strides[d];
        sh[i] = v->shape[d];
    }
    int64_t reach = 0;
    for (int i = 0; i < n; i++) {
        if (st[i] <= reach) return 0;
        reach += (sh[i] - 1) * st[i];
    }
    return 1;
}

static int same_view(const sim_view *a, const sim_view *b) {
    if (a->base != b->base || a->dtype != b->dtype || !sim_same_shape(a, b)) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] > 1 && a->strides[d] != b->strides[d]) return 0;
    return 1;
}

/* sim_iter_views over v[0]'s memory order: dims sorted by v[0]'s strides,
 * so that a permuted output is still written along its rows.  Only when no
 * two of v[0]'s elements share memory: then the order of the writes cannot
 * matter (an input is either v[0] itself, element for element, or does not
 * overlap it: see hold). */
static int iter_views_mem(sim_iter *it, int nop, const sim_view *const *v) {
    const sim_view *o = v[0];
    int nd = o->ndim, perm[SIM_MAX_DIMS], sorted = 1;
    for (int d = 0; d < nd; d++) {
        int i = d;
        for (; i > 0 && o->strides[perm[i - 1]] < o->strides[d]; i--) perm[i] = perm[i - 1];
        perm[i] = d;
        sorted &= i == d;
    }
    if (sorted || !view_injective(o)) return sim_iter_views(it, nop, v);
    int64_t shape[SIM_MAX_DIMS], st[SIM_ITER_MAX_OPS][SIM_MAX_DIMS], es[SIM_ITER_MAX_OPS];
    char *base[SIM_ITER_MAX_OPS];
    const int64_t *strides[SIM_ITER_MAX_OPS];
    for (int d = 0; d < nd; d++) shape[d] = o->shape[perm[d]];
    for (int k = 0; k < nop; k++) {
        for (int d = 0; d < nd; d++) st[k][d] = v[k]->strides[perm[d]];
        base[k] = v[k]->base;
        strides[k] = st[k];
        es[k] = (int64_t)sim_dtype_size(v[k]->dtype);
    }
    return sim_iter_init(it, nd, shape, nop, base, strides, es);
}

/* A dense row-major view of v's shape and dtype over fresh memory (*own). */
static sim_view dense_like(const sim_view *v, sim_dtype dt, void **own) {
    sim_view d = *v;
    d.dtype = dt;
    int64_t s = 1;
    for (int i = v->ndim - 1; i >= 0; i--) {
        d.strides[i] = s;
        s *= v->shape[i];
    }
    *own = xmalloc((size_t)s * sim_dtype_size(dt));
    d.base = *own;
    return d;
}

static void copy_view(const sim_view *src, const sim_view *dst);

/* An input as a kernel writing `outs` may read it: itself, unless it shares
 * memory with an output other than element for element; then a copy. */
typedef struct {
    sim_view v;
    void *own;
} held;

static const sim_view *hold(held *h, const sim_view *in, const sim_view *const *outs, int nout) {
    h->own = NULL;
    if (!in || !in->present) return in;
    int clash = 0;
    for (int k = 0; k < nout && !clash; k++)
        clash = views_overlap(in, outs[k]) && !(same_view(in, outs[k]) && view_injective(outs[k]));
    if (!clash) return in;
    h->v = dense_like(in, in->dtype, &h->own);
    copy_view(in, &h->v);
    return &h->v;
}

/* ------------------------------------------------- elementwise engines */

#define EW_MAX_IN 4

/* out = fn(ctx, inputs) in float, a block at a time: o and x[k] hold n
 * elements (o may be x[k] itself for an in-place op). */
typedef void (*ew_fn)(const void *ctx, float *o, const float *const *x, int64_t n);

static void ew_float(const sim_view *out, int nin, const sim_view *const *ins, ew_fn fn, const void *ctx) {
    held h[EW_MAX_IN];
    const sim_view *ops[EW_MAX_IN + 1] = {out};
    int64_t es[EW_MAX_IN + 1];
    for (int k = 0; k < nin; k++) ops[k + 1] = hold(&h[k], ins[k], &out, 1);
    for (int k = 0; k <= nin; k++) es[k] = (int64_t)sim_dtype_size(ops[k]->dtype);
    sim_iter it;
    if (iter_views_mem(&it, nin + 1, ops)) {
        float buf[EW_MAX_IN][BLK], obuf[BLK];
        const float *x[EW_MAX_IN];
        const int direct = out->dtype == SIM_F32 && it.s[0] == 1;
        do {
            for (int64_t j = 0; j < it.n; j += BLK) {
                int64_t m = imin(BLK, it.n - j);
                for (int k = 0; k < nin; k++)
                    x[k] = ld_f(buf[k], it.p[k + 1] + j * it.s[k + 1] * es[k + 1], ops[k + 1]->dtype,
                                it.s[k + 1], m);
                char *po = it.p[0] + j * it.s[0] * es[0];
                float *o = direct ? (float *)po : obuf;
                fn(ctx, o, x, m);
                if (!direct) cvt_from_f(po, out->dtype, it.s[0], obuf, m);
            }
        } while (sim_iter_next(&it));
    }
    for (int k = 0; k < nin; k++) free(h[k].own);
}

/* The same in int64 (exact; stores wrap). */
typedef void (*ew_ifn)(const void *ctx, int64_t *o, const int64_t *const *x, int64_t n);

static void ew_int(const sim_view *out, int nin, const sim_view *const *ins, ew_ifn fn, const void *ctx) {
    held h[EW_MAX_IN];
    const sim_view *ops[EW_MAX_IN + 1] = {out};
    int64_t es[EW_MAX_IN + 1];
    for (int k = 0; k < nin; k++) ops[k + 1] = hold(&h[k], ins[k], &out, 1);
    for (int k = 0; k <= nin; k++) es[k] = (int64_t)sim_dtype_size(ops[k]->dtype);
    sim_iter it;
    if (iter_views_mem(&it, nin + 1, ops)) {
        int64_t buf[EW_MAX_IN][BLK], obuf[BLK];
        const int64_t *x[EW_MAX_IN];
        const int direct = out->dtype == SIM_I64 && it.s[0] == 1;
        do {
            for (int64_t j = 0; j < it.n; j += BLK) {
                int64_t m = imin(BLK, it.n - j);
                for (int k = 0; k < nin; k++)
                    x[k] = ld_i(buf[k], it.p[k + 1] + j * it.s[k + 1] * es[k + 1], ops[k + 1]->dtype,
                                it.s[k + 1], m);
                char *po = it.p[0] + j * it.s[0] * es[0];
                int64_t *o = direct ? (int64_t *)po : obuf;
                fn(ctx, o, x, m);
                if (!direct) cvt_from_i(po, out->dtype, it.s[0], obuf, m);
            }
        } while (sim_iter_next(&it));
    }
    for (int k = 0; k < nin; k++) free(h[k].own);
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

int simk_is_float(sim_dtype dt) {
    return dt == SIM_F32 || dt == SIM_F16 || dt == SIM_BF16 || dt == SIM_F64;
}

int simk_is_integer(sim_dtype dt) {
    return dt == SIM_I8 || dt == SIM_U8 || dt == SIM_I32 || dt == SIM_I64;
}

/* Shape agreement only (dtype rules differ per op). */
static sim_status check_shape(const char *fn, const char *what, const sim_view *a, const sim_view *ref) {
    if (sim_same_shape(a, ref)) return SIM_OK;
    char s1[160], s2[160];
    sim_shape_str(a, s1, sizeof s1);
    sim_shape_str(ref, s2, sizeof s2);
    return sim_fail(SIM_E_INVALID_VALUE, fn,
                    "%s has shape %s but the output has shape %s (broadcast inputs must be expanded "
                    "with stride 0)", what, s1, s2);
}

static sim_status need_float_dt(const char *fn, const char *what, const sim_view *v) {
    if (simk_is_float(v->dtype)) return SIM_OK;
    return sim_fail(SIM_E_UNSUPPORTED, fn, "%s: dtype %s is not supported by this kernel (floating "
                    "point only)", what, sim_dtype_name(v->dtype));
}

/* a host scalar as an integer operand: saturating (an out-of-range double-to-
 * integer conversion is undefined in C), NaN as 0 */
static int64_t sat_i64(double v) {
    if (v != v) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}

/* wrapping int64 arithmetic (signed overflow is undefined in C) */
static inline int64_t wadd(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static inline int64_t wmul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

static inline float fmax_nan(float x, float y) { return (x != x || y != y) ? x + y : (x > y ? x : y); }
static inline float fmin_nan(float x, float y) { return (x != x || y != y) ? x + y : (x < y ? x : y); }

/* ------------------------------------------------------------ binary ops */

typedef struct {
    simk_binop op;
    float alpha;
    int64_t ialpha;
} bin_ctx;

static void bin_f(const void *vc, float *o, const float *const *x, int64_t n) {
    const bin_ctx *c = vc;
    const float *a = x[0], *b = x[1], al = c->alpha;
    switch (c->op) {
        case SIMK_ADD:
            if (al == 1.0f) for (int64_t i = 0; i < n; i++) o[i] = a[i] + b[i];
            else for (int64_t i = 0; i < n; i++) o[i] = a[i] + al * b[i];
            break;
        case SIMK_SUB:
            if (al == 1.0f) for (int64_t i = 0; i < n; i++) o[i] = a[i] - b[i];
            else for (int64_t i = 0; i < n; i++) o[i] = a[i] - al * b[i];
            break;
        case SIMK_MUL: for (int64_t i = 0; i < n; i++) o[i] = a[i] * b[i]; break;
        case SIMK_DIV: for (int64_t i = 0; i < n; i++) o[i] = a[i] / b[i]; break;
        case SIMK_POW: for (int64_t i = 0; i < n; i++) o[i] = powf(a[i], b[i]); break;
        case SIMK_MAXIMUM: for (int64_t i = 0; i < n; i++) o[i] = fmax_nan(a[i], b[i]); break;
        case SIMK_MINIMUM: for (int64_t i = 0; i < n; i++) o[i] = fmin_nan(a[i], b[i]); break;
        /* comparisons give 1 or 0, stored into the bool output */
        case SIMK_EQ: for (int64_t i = 0; i < n; i++) o[i] = a[i] == b[i] ? 1.0f : 0.0f; break;
        case SIMK_NE: for (int64_t i = 0; i < n; i++) o[i] = a[i] != b[i] ? 1.0f : 0.0f; break;
        case SIMK_LT: for (int64_t i = 0; i < n; i++) o[i] = a[i] < b[i] ? 1.0f : 0.0f; break;
        case SIMK_LE: for (int64_t i = 0; i < n; i++) o[i] = a[i] <= b[i] ? 1.0f : 0.0f; break;
        case SIMK_GT: for (int64_t i = 0; i < n; i++) o[i] = a[i] > b[i] ? 1.0f : 0.0f; break;
        case SIMK_GE: for (int64_t i = 0; i < n; i++) o[i] = a[i] >= b[i] ? 1.0f : 0.0f; break;
        default: break;
    }
}

static void bin_i(const void *vc, int64_t *o, const int64_t *const *x, int64_t n) {
    const bin_ctx *c = vc;
    const int64_t *a = x[0], *b = x[1], al = c->ialpha;
    switch (c->op) {
        case SIMK_ADD: for (int64_t i = 0; i < n; i++) o[i] = wadd(a[i], wmul(al, b[i])); break;
        case SIMK_SUB: for (int64_t i = 0; i < n; i++) o[i] = wadd(a[i], wmul(wmul(al, -1), b[i])); break;
        case SIMK_MUL: for (int64_t i = 0; i < n; i++) o[i] = wmul(a[i], b[i]); break;
        case SIMK_MAXIMUM: for (int64_t i = 0; i < n; i++) o[i] = a[i] > b[i] ? a[i] : b[i]; break;
        case SIMK_MINIMUM: for (int64_t i = 0; i < n; i++) o[i] = a[i] < b[i] ? a[i] : b[i]; break;
        case SIMK_BITAND: for (int64_t i = 0; i < n; i++) o[i] = a[i] & b[i]; break;
        case SIMK_BITOR: for (int64_t i = 0; i < n; i++) o[i] = a[i] | b[i]; break;
        case SIMK_BITXOR: for (int64_t i = 0; i < n; i++) o[i] = a[i] ^ b[i]; break;
        case SIMK_EQ: for (int64_t i = 0; i < n; i++) o[i] = a[i] == b[i]; break;
        case SIMK_NE: for (int64_t i = 0; i < n; i++) o[i] = a[i] != b[i]; break;
        case SIMK_LT: for (int64_t i = 0; i < n; i++) o[i] = a[i] < b[i]; break;
        case SIMK_LE: for (int64_t i = 0; i < n; i++) o[i] = a[i] <= b[i]; break;
        case SIMK_GT: for (int64_t i = 0; i < n; i++) o[i] = a[i] > b[i]; break;
        case SIMK_GE: for (int64_t i = 0; i < n; i++) o[i] = a[i] >= b[i]; break;
        default: break;
    }
}

sim_status simk_binary(const char *fn, const char *kernel, simk_binop op, const sim_view *a,
                       const sim_view *b, double alpha, const sim_view *out) {
    int compare = op >= SIMK_EQ && op <= SIMK_GE, bitwise = op >= SIMK_BITAND;
    sim_status st;
    if ((st = check_shape(fn, "self", a, out)) || (st = check_shape(fn, "other", b, out))) return st;
    if (a->dtype != b->dtype)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "operands are %s and %s (mixed dtypes)",
                        sim_dtype_name(a->dtype), sim_dtype_name(b->dtype));
    if (compare) {
        if (out->dtype != SIM_BOOL)
            return sim_fail(SIM_E_UNSUPPORTED, fn, "a comparison writes bool, the output is %s",
                            sim_dtype_name(out->dtype));
    } else if (a->dtype != out->dtype) {
        return sim_fail(SIM_E_UNSUPPORTED, fn, "operands are %s but the output is %s (mixed dtypes)",
                        sim_dtype_name(a->dtype), sim_dtype_name(out->dtype));
    }
    int fl = simk_is_float(a->dtype);
    if (bitwise && fl)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "bitwise ops take bool or integer tensors, not %s",
                        sim_dtype_name(a->dtype));
    if (!bitwise && !compare && !fl &&
        (a->dtype == SIM_BOOL || op == SIMK_DIV || op == SIMK_POW))
        return sim_fail(SIM_E_UNSUPPORTED, fn, "dtype %s is not supported by this kernel",
                        sim_dtype_name(a->dtype));
    if ((st = sim_launch(kernel, fn))) return st;
    bin_ctx c = {op, (float)alpha, sat_i64(alpha)};
    const sim_view *ins[2] = {a, b};
    if (fl) {
        ew_float(out, 2, ins, bin_f, &c);
        if (!compare) sim_corrupt_output(out);
    } else {
        ew_int(out, 2, ins, bin_i, &c);
    }
    return SIM_OK;
}

/* ------------------------------------------------ comparisons with a scalar */

typedef struct {
    simk_binop op;
    float f;       /* the scalar as the floating operand's dtype rounds it */
    int64_t i;     /* the scalar as an integer (integral scalars against integer tensors) */
} cmps_ctx;

#define CMP_LOOP(o, a, b, n, op)                                                          \
    switch (op) {                                                                         \
        case SIMK_EQ: for (int64_t k = 0; k < n; k++) o[k] = a[k] == b; break;            \
        case SIMK_NE: for (int64_t k = 0; k < n; k++) o[k] = a[k] != b; break;            \
        case SIMK_LT: for (int64_t k = 0; k < n; k++) o[k] = a[k] < b; break;             \
        case SIMK_LE: for (int64_t k = 0; k < n; k++) o[k] = a[k] <= b; break;            \
        case SIMK_GT: for (int64_t k = 0; k < n; k++) o[k] = a[k] > b; break;             \
        default: for (int64_t k = 0; k < n; k++) o[k] = a[k] >= b; break;                 \
    }

static void cmps_f(const void *vc, float *o, const float *const *x, int64_t n) {
    const cmps_ctx *c = vc;
    const float *a = x[0], b = c->f;
    CMP_LOOP(o, a, b, n, c->op)
}

static void cmps_i(const void *vc, int64_t *o, const int64_t *const *x, int64_t n) {
    const cmps_ctx *c = vc;
    const int64_t *a = x[0], b = c->i;
    CMP_LOOP(o, a, b, n, c->op)
}

sim_status simk_compare_scalar(const char *fn, const char *kernel, simk_binop op, const sim_view *a, double other,
                               const sim_view *out) {
    sim_status st;
    if (op < SIMK_EQ || op > SIMK_GE) return sim_fail(SIM_E_INVALID_VALUE, fn, "not a comparison");
    if ((st = check_shape(fn, "self", a, out))) return st;
    if (out->dtype != SIM_BOOL)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "a comparison writes bool, the output is %s", sim_dtype_name(out->dtype));
    if ((st = sim_launch(kernel, fn))) return st;
    /* PyTorch's promotion: a floating tensor compares in its own dtype (the
     * scalar rounded to it); an integer or bool tensor exactly against an
     * integral scalar, and in float32 against any other */
    cmps_ctx c = {op, 0.0f, 0};
    const int integral = other == other && fabs(other) < 9.2e18 && other == floor(other);
    if (simk_is_float(a->dtype) || !integral) {
        float f = (float)other;
        if (a->dtype == SIM_F16) f = sim_h2f(sim_f2h(f));
        else if (a->dtype == SIM_BF16) f = sim_bf2f(sim_f2bf(f));
        c.f = f;
        ew_float(out, 1, &a, cmps_f, &c);
    } else {
        c.i = (int64_t)other;
        ew_int(out, 1, &a, cmps_i, &c);
    }
    return SIM_OK;
}

/* ------------------------------------------------------------- logical */

static void logical_f(const void *vc, float *o, const float *const *x, int64_t n) {
    const float *a = x[0], *b = x[1];
    switch (*(const simk_logop *)vc) {
        case SIMK_LOGICAL_AND: for (int64_t k = 0; k < n; k++) o[k] = (a[k] != 0) & (b[k] != 0); break;
        case SIMK_LOGICAL_OR: for (int64_t k = 0; k < n; k++) o[k] = (a[k] != 0) | (b[k] != 0); break;
        case SIMK_LOGICAL_XOR: for (int64_t k = 0; k < n; k++) o[k] = (a[k] != 0) ^ (b[k] != 0); break;
        default: for (int64_t k = 0; k < n; k++) o[k] = a[k] == 0; break;
    }
}

sim_status simk_logical(const char *fn, const char *kernel, simk_logop op, const sim_view *a, const sim_view *b,
                        const sim_view *out) {
    sim_status st;
    const int unary = op == SIMK_LOGICAL_NOT;
    if ((st = check_shape(fn, "self", a, out)) || (!unary && (st = check_shape(fn, "other", b, out)))) return st;
    if (out->dtype != SIM_BOOL)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "logical ops write bool, the output is %s", sim_dtype_name(out->dtype));
    if ((st = sim_launch(kernel, fn))) return st;
    /* any dtype: an element is true when nonzero (NaN too); a nonzero
     * integer stays nonzero in float, so one float path serves all */
    const sim_view *ins[2] = {a, unary ? a : b};
    ew_float(out, 2, ins, logical_f, &op);
    return SIM_OK;
}

/* --------------------------------------------------------------- clamp */

typedef struct {
    int lo, hi;   /* which bounds are given */
} clamp_ctx;

static void clamp_f(const void *vc, float *o, const float *const *x, int64_t n) {
    const clamp_ctx *c = vc;
    const float *a = x[0], *lo = x[1], *hi = x[c->lo ? 2 : 1];
    for (int64_t k = 0; k < n; k++) { /* PyTorch's minimum(maximum(x, lo), hi): NaN anywhere gives NaN */
        float r = a[k];
        if (c->lo) r = fmax_nan(r, lo[k]);
        if (c->hi) r = fmin_nan(r, hi[k]);
        o[k] = r;
    }
}

static void clamp_i(const void *vc, int64_t *o, const int64_t *const *x, int64_t n) {
    const clamp_ctx *c = vc;
    const int64_t *a = x[0], *lo = x[1], *hi = x[c->lo ? 2 : 1];
    for (int64_t k = 0; k < n; k++) {
        int64_t r = a[k];
        if (c->lo && r < lo[k]) r = lo[k];
        if (c->hi && r > hi[k]) r = hi[k];
        o[k] = r;
    }
}

sim_status simk_clamp(const char *fn, const char *kernel, const sim_view *self, const sim_view *lo, const sim_view *hi,
                      const sim_view *out) {
    sim_status st;
    const int has_lo = lo && lo->present, has_hi = hi && hi->present;
    if (!has_lo && !has_hi) return sim_fail(SIM_E_INVALID_VALUE, fn, "at least one of min and max is required");
    if ((st = check_shape(fn, "self", self, out)) || (has_lo && (st = check_shape(fn, "min", lo, out))) ||
        (has_hi && (st = check_shape(fn, "max", hi, out))))
        return st;
    const sim_view *ins[3] = {self, NULL, NULL};
    int nin = 1;
    if (has_lo) ins[nin++] = lo;
    if (has_hi) ins[nin++] = hi;
    for (int k = 0; k < nin; k++)
        if (ins[k]->dtype != out->dtype)
            return sim_fail(SIM_E_UNSUPPORTED, fn, "%s is %s but the output is %s (mixed dtypes)",
                            k == 0 ? "self" : (k == 1 && has_lo) ? "min" : "max", sim_dtype_name(ins[k]->dtype),
                            sim_dtype_name(out->dtype));
    if (out->dtype == SIM_BOOL) return sim_fail(SIM_E_UNSUPPORTED, fn, "clamp takes no bool tensors");
    if ((st = sim_launch(kernel, fn))) return st;
    clamp_ctx c = {has_lo, has_hi};
    if (simk_is_float(out->dtype)) {
        ew_float(out, nin, ins, clamp_f, &c);
        sim_corrupt_output(out);
    } else {
        ew_int(out, nin, ins, clamp_i, &c);
    }
    return SIM_OK;
}

/* ------------------------------------------------------------- unary ops */

static void un_f(const void *vc, float *o, const float *const *x, int64_t n) {
    const float *a = x[0];
    float t[BLK]; /* n <= BLK */
    const float k0 = 0.7978845608028654f; /* sqrt(2/pi) */
    switch (*(const simk_unop *)vc) {
        case SIMK_RELU:
            for (int64_t i = 0; i < n; i++) {
                float v = a[i];
                o[i] = v > 0.0f ? v : (v != v ? v : 0.0f);
            }
            break;
        case SIMK_GELU:
            for (int64_t i = 0; i < n; i++) t[i] = a[i] * 0.70710678118654752f;
            erf_inplace(t, n);
            for (int64_t i = 0; i < n; i++) o[i] = 0.5f * a[i] * (1.0f + t[i]);
            break;
        case SIMK_GELU_TANH:
            for (int64_t i = 0; i < n; i++) t[i] = k0 * (a[i] + 0.044715f * a[i] * a[i] * a[i]);
            tanh_inplace(t, n);
            for (int64_t i = 0; i < n; i++) o[i] = 0.5f * a[i] * (1.0f + t[i]);
            break;
        case SIMK_SIGMOID:
            for (int64_t i = 0; i < n; i++) t[i] = -a[i];
            exp_inplace(t, n);
            for (int64_t i = 0; i < n; i++) o[i] = 1.0f / (1.0f + t[i]);
            break;
        case SIMK_TANH: tanh_run(o, a, n); break;
        case SIMK_EXP: exp_run(o, a, n); break;
        case SIMK_NEG: for (int64_t i = 0; i < n; i++) o[i] = -a[i]; break;
        case SIMK_SQRT: sqrt_run(o, a, n); break;
        case SIMK_RSQRT:
            sqrt_run(o, a, n);
            for (int64_t i = 0; i < n; i++) o[i] = 1.0f / o[i];
            break;
        case SIMK_LOG: for (int64_t i = 0; i < n; i++) o[i] = logf(a[i]); break;
        case SIMK_COS: for (int64_t i = 0; i < n; i++) o[i] = cosf(a[i]); break;
        case SIMK_SIN: for (int64_t i = 0; i < n; i++) o[i] = sinf(a[i]); break;
        case SIMK_ABS: for (int64_t i = 0; i < n; i++) o[i] = fabsf(a[i]); break;
        case SIMK_RECIPROCAL: for (int64_t i = 0; i < n; i++) o[i] = 1.0f / a[i]; break;
        case SIMK_SILU:
            for (int64_t i = 0; i < n; i++) t[i] = -a[i];
            exp_inplace(t, n);
            for (int64_t i = 0; i < n; i++) o[i] = a[i] / (1.0f + t[i]);
            break;
        default: for (int64_t i = 0; i < n; i++) o[i] = a[i]; break;
    }
}

static void un_i(const void *vc, int64_t *o, const int64_t *const *x, int64_t n) {
    const int64_t *a = x[0];
    switch (*(const simk_unop *)vc) {
        case SIMK_NEG: for (int64_t i = 0; i < n; i++) o[i] = wmul(a[i], -1); break;
        case SIMK_ABS: for (int64_t i = 0; i < n; i++) o[i] = a[i] < 0 ? wmul(a[i], -1) : a[i]; break;
        case SIMK_RELU: for (int64_t i = 0; i < n; i++) o[i] = a[i] > 0 ? a[i] : 0; break;
        default: for (int64_t i = 0; i < n; i++) o[i] = ~a[i]; break; /* bitwise not */
    }
}

static void not_b(const void *vc, int64_t *o, const int64_t *const *x, int64_t n) {
    (void)vc;
    for (int64_t i = 0; i < n; i++) o[i] = !x[0][i]; /* logical on bool */
}

sim_status simk_unary(const char *fn, const char *kernel, simk_unop op, const sim_view *a,
                      const sim_view *out) {
    sim_status st = simk_check_same(fn, "self", a, out);
    if (st) return st;
    int fl = simk_is_float(a->dtype), boolean = a->dtype == SIM_BOOL;
    int int_ok = op == SIMK_NEG || op == SIMK_ABS || op == SIMK_RELU;
    if (op == SIMK_BITNOT ? fl : (!fl && !(int_ok && !boolean)))
        return sim_fail(SIM_E_UNSUPPORTED, fn, "dtype %s is not supported by this kernel",
                        sim_dtype_name(a->dtype));
    if ((st = sim_launch(kernel, fn))) return st;
    if (fl) {
        ew_float(out, 1, &a, un_f, &op);
        sim_corrupt_output(out);
    } else {
        ew_int(out, 1, &a, boolean ? not_b : un_i, &op);
    }
    return SIM_OK;
}

static void pow_s(const void *vc, float *o, const float *const *x, int64_t n) {
    const double exponent = *(const double *)vc;
    const float *a = x[0], e = (float)exponent;
    /* PyTorch computes these exponents exactly this way (no pow call) */
    if (exponent == 2.0) for (int64_t i = 0; i < n; i++) o[i] = a[i] * a[i];
    else if (exponent == 3.0) for (int64_t i = 0; i < n; i++) o[i] = a[i] * a[i] * a[i];
    else if (exponent == 0.5) sqrt_run(o, a, n);
    else if (exponent == -0.5) {
        sqrt_run(o, a, n);
        for (int64_t i = 0; i < n; i++) o[i] = 1.0f / o[i];
    }
    else if (exponent == -1.0) for (int64_t i = 0; i < n; i++) o[i] = 1.0f / a[i];
    else if (exponent == -2.0) for (int64_t i = 0; i < n; i++) o[i] = 1.0f / (a[i] * a[i]);
    else for (int64_t i = 0; i < n; i++) o[i] = powf(a[i], e);
}

sim_status simk_pow_scalar(const char *fn, const char *kernel, const sim_view *a, double exponent,
                           const sim_view *out) {
    sim_status st;
    if ((st = simk_check_same(fn, "self", a, out)) || (st = need_float_dt(fn, "self", a))) return st;
    if ((st = sim_launch(kernel, fn))) return st;
    ew_float(out, 1, &a, pow_s, &exponent);
    sim_corrupt_output(out);
    return SIM_OK;
}

static void spow(const void *vc, float *o, const float *const *x, int64_t n) {
    const float b = *(const float *)vc, *e = x[0];
    if (b == 1.0f) for (int64_t i = 0; i < n; i++) o[i] = 1.0f;   /* PyTorch's shortcut, NaN exponents too */
    else for (int64_t i = 0; i < n; i++) o[i] = powf(b, e[i]);
}

sim_status simk_scalar_pow(const char *fn, const char *kernel, double base, const sim_view *exponent,
                           const sim_view *out) {
    sim_status st;
    if ((st = simk_check_same(fn, "exponent", exponent, out)) || (st = need_float_dt(fn, "exponent", exponent)))
        return st;
    if ((st = sim_launch(kernel, fn))) return st;
    float b = (float)base;   /* PyTorch rounds the base to the tensor's dtype first */
    if (out->dtype == SIM_F16) b = sim_h2f_inline(sim_f2h_inline(b));
    else if (out->dtype == SIM_BF16) b = sim_bf2f_inline(sim_f2bf_inline(b));
    ew_float(out, 1, &exponent, spow, &b);
    sim_corrupt_output(out);
    return SIM_OK;
}

static void div_s(const void *vc, float *o, const float *const *x, int64_t n) {
    const float d = *(const float *)vc, *a = x[0];
    for (int64_t i = 0; i < n; i++) o[i] = a[i] / d;
}

sim_status simk_div_scalar(const char *fn, const char *kernel, const sim_view *a, double divisor,
                           const sim_view *out) {
    sim_status st;
    if ((st = simk_check_same(fn, "self", a, out)) || (st = need_float_dt(fn, "self", a))) return st;
    if ((st = sim_launch(kernel, fn))) return st;
    float d = (float)divisor;
    ew_float(out, 1, &a, div_s, &d);
    sim_corrupt_output(out);
    return SIM_OK;
}

/* --------------------------------------------------- ternary and friends */

typedef struct {
    int div;
    float v;
} addc_ctx;

static void addc_f(const void *vc, float *o, const float *const *x, int64_t n) {
    const addc_ctx *c = vc;
    const float *s = x[0], *a = x[1], *b = x[2], v = c->v;
    /* PyTorch's order: value * t1 first, then by t2 */
    if (c->div) for (int64_t i = 0; i < n; i++) o[i] = s[i] + v * a[i] / b[i];
    else for (int64_t i = 0; i < n; i++) o[i] = s[i] + v * a[i] * b[i];
}

sim_status simk_addc(const char *fn, const char *kernel, int div, const sim_view *self,
                     const sim_view *t1, const sim_view *t2, double value, const sim_view *out) {
    sim_status st;
    if ((st = simk_check_same(fn, "self", self, out)) || (st = simk_check_same(fn, "tensor1", t1, out)) ||
        (st = simk_check_same(fn, "tensor2", t2, out)) || (st = need_float_dt(fn, "self", self)))
        return st;
    if ((st = sim_launch(kernel, fn))) return st;
    addc_ctx c = {div, (float)value};
    const sim_view *ins[3] = {self, t1, t2};
    ew_float(out, 3, ins, addc_f, &c);
    sim_corrupt_output(out);
    return SIM_OK;
}

static void lerp_f(const void *vc, float *o, const float *const *x, int64_t n) {
    const float w = *(const float *)vc, *s = x[0], *e = x[1];
    /* PyTorch's form: exact at both ends, one fused multiply-add */
    if (fabsf(w) < 0.5f) for (int64_t i = 0; i < n; i++) o[i] = fmaf(w, e[i] - s[i], s[i]);
    else for (int64_t i = 0; i < n; i++) o[i] = fmaf(w - 1.0f, e[i] - s[i], e[i]);
}

sim_status simk_lerp(const char *fn, const char *kernel, const sim_view *self, const sim_view *end,
                     double weight, const sim_view *out) {
    sim_status st;
    if ((st = simk_check_same(fn, "self", self, out)) || (st = simk_check_same(fn, "end", end, out)) ||
        (st = need_float_dt(fn, "self", self)))
        return st;
    if ((st = sim_launch(kernel, fn))) return st;
    float w = (float)weight;
    const sim_view *ins[2] = {self, end};
    ew_float(out, 2, ins, lerp_f, &w);
    sim_corrupt_output(out);
    return SIM_OK;
}

static void where_f(const void *vc, float *o, const float *const *x, int64_t n) {
    (void)vc;
    const float *c = x[0], *a = x[1], *b = x[2];
    for (int64_t i = 0; i < n; i++) o[i] = c[i] != 0.0f ? a[i] : b[i];
}

static void where_i(const void *vc, int64_t *o, const int64_t *const *x, int64_t n) {
    (void)vc;
    const int64_t *c = x[0], *a = x[1], *b = x[2];
    for (int64_t i = 0; i < n; i++) o[i] = c[i] ? a[i] : b[i];
}

sim_status simk_where(const char *fn, const char *kernel, const sim_view *cond, const sim_view *a,
                      const sim_view *b, const sim_view *out) {
    sim_status st;
    if ((st = check_shape(fn, "condition", cond, out)) || (st = simk_check_same(fn, "self", a, out)) ||
        (st = simk_check_same(fn, "other", b, out)))
        return st;
    if (cond->dtype != SIM_BOOL)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "condition must be bool, got %s", sim_dtype_name(cond->dtype));
    if ((st = sim_launch(kernel, fn))) return st;
    const sim_view *ins[3] = {cond, a, b};
    if (simk_is_float(out->dtype)) {
        ew_float(out, 3, ins, where_f, NULL);
        sim_corrupt_output(out);
    } else {
        ew_int(out, 3, ins, where_i, NULL);
    }
    return SIM_OK;
}

static void mfill_f(const void *vc, float *o, const float *const *x, int64_t n) {
    const float v = *(const float *)vc, *s = x[0], *m = x[1];
    for (int64_t i = 0; i < n; i++) o[i] = m[i] != 0.0f ? v : s[i];
}

static void mfill_i(const void *vc, int64_t *o, const int64_t *const *x, int64_t n) {
    const int64_t v = *(const int64_t *)vc, *s = x[0], *m = x[1];
    for (int64_t i = 0; i < n; i++) o[i] = m[i] ? v : s[i];
}

sim_status simk_masked_fill(const char *fn, const char *kernel, const sim_view *self, const sim_view *mask,
                            double value, const sim_view *out) {
    sim_status st;
    if ((st = simk_check_same(fn, "self", self, out)) || (st = check_shape(fn, "mask", mask, out)))
        return st;
    if (mask->dtype != SIM_BOOL)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "mask must be bool, got %s", sim_dtype_name(mask->dtype));
    if ((st = sim_launch(kernel, fn))) return st;
    const sim_view *ins[2] = {self, mask};
    if (simk_is_float(out->dtype)) {
        float v = (float)value;
        ew_float(out, 2, ins, mfill_f, &v);
        sim_corrupt_output(out);
    } else {
        int64_t v = sat_i64(value);
        ew_int(out, 2, ins, mfill_i, &v);
    }
    return SIM_OK;
}

typedef struct {
    simk_gradop op;
    float th;
} grad_ctx;

static void grad_f(const void *vc, float *o, const float *const *x, int64_t n) {
    const grad_ctx *c = vc;
    const float *g = x[0], *v = x[1];
    const float kBeta = 0.7978845608028654f, kKappa = 0.044715f;    /* sqrt(2/pi) */
    const float kAlpha = 0.70710678118654752f, kPdf = 0.3989422804014327f; /* 1/sqrt(2), 1/sqrt(2pi) */
    switch (c->op) {
        case SIMK_GRAD_GELU: {
            float e[BLK], f[BLK]; /* n <= BLK */
            for (int64_t i = 0; i < n; i++) {
                e[i] = -0.5f * v[i] * v[i];
                f[i] = v[i] * kAlpha;
            }
            exp_inplace(e, n);
            erf_inplace(f, n);
            for (int64_t i = 0; i < n; i++) {
                float z = v[i];
                float cdf = 0.5f * (1.0f + f[i]);
                float pdf = e[i] * kPdf;
                o[i] = g[i] * (cdf + z * pdf);
            }
            break;
        }
        case SIMK_GRAD_GELU_TANH: {
            float th[BLK]; /* n <= BLK */
            for (int64_t i = 0; i < n; i++) {
                float z = v[i], z3 = z * z * z;
                th[i] = kBeta * (z + kKappa * z3);
            }
            tanh_inplace(th, n);
            for (int64_t i = 0; i < n; i++) {
                float z = v[i], z2 = z * z, t = th[i];
                float left = 0.5f * z, right = 1.0f + t;
                float dleft = 0.5f * right, dtanh = 1.0f - t * t;
                float dinner = kBeta * (1.0f + 3.0f * kKappa * z2);
                o[i] = g[i] * (dleft + left * dtanh * dinner);
            }
            break;
        }
        case SIMK_GRAD_THRESHOLD: {
            const float th = c->th;
            for (int64_t i = 0; i < n; i++) o[i] = v[i] <= th ? 0.0f : g[i];
            break;
        }
        case SIMK_GRAD_SIGMOID_Y: for (int64_t i = 0; i < n; i++) o[i] = g[i] * (1.0f - v[i]) * v[i]; break;
        default: for (int64_t i = 0; i < n; i++) o[i] = g[i] * (1.0f - v[i] * v[i]); break; /* tanh, from y */
    }
}

sim_status simk_pointwise_grad(const char *fn, const char *kernel, simk_gradop op, const sim_view *grad,
                               const sim_view *x, double param, const sim_view *out) {
    sim_status st;
    if ((st = simk_check_same(fn, "grad_output", grad, out)) || (st = simk_check_same(fn, "input", x, out)) ||
        (st = need_float_dt(fn, "grad_output", grad)))
        return st;
    if ((st = sim_launch(kernel, fn))) return st;
    grad_ctx c = {op, (float)param};
    const sim_view *ins[2] = {grad, x};
    ew_float(out, 2, ins, grad_f, &c);
    sim_corrupt_output(out);
    return SIM_OK;
}

typedef struct { float scale; } mask_scale_ctx;

static void mask_scale_f(const void *ctx, float *o, const float *const *x, int64_t n) {
    const float s = ((const mask_scale_ctx *)ctx)->scale;
    const float *g = x[0], *m = x[1];
    for (int64_t i = 0; i < n; i++) o[i] = g[i] * m[i] * s;   /* m is 0 or 1: g*m exact */
}

sim_status simk_mask_scale(const char *fn, const char *kernel, const sim_view *grad, const sim_view *mask,
                           double scale, const sim_view *out) {
    sim_status st;
    if ((st = simk_check_same(fn, "grad_output", grad, out)) || (st = need_float_dt(fn, "grad_output", grad)))
        return st;
    if (!sim_same_shape(mask, out)) {
        char s1[160], s2[160];
        sim_shape_str(mask, s1, sizeof s1);
        sim_shape_str(out, s2, sizeof s2);
        return sim_fail(SIM_E_INVALID_VALUE, fn, "mask has shape %s but the output has shape %s", s1, s2);
    }
    if (mask->dtype != SIM_BOOL)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "mask is %s, not bool", sim_dtype_name(mask->dtype));
    if ((st = sim_launch(kernel, fn))) return st;
    mask_scale_ctx c = {(float)scale};
    const sim_view *ins[2] = {grad, mask};
    ew_float(out, 2, ins, mask_scale_f, &c);
    sim_corrupt_output(out);
    return SIM_OK;
}

/* ------------------------------------------------------------ fill, copy */

/* n elements of es bytes, stride s, all set to the bytes at one */
static void fill_run(char *p, int64_t s, int64_t n, const char *one, size_t es) {
    switch (es) {
        case 1: {
            uint8_t v = (uint8_t)one[0];
            if (s == 1) memset(p, v, (size_t)n);
            else for (int64_t i = 0; i < n; i++) p[i * s] = (char)v;
            break;
        }
        case 2: {
            uint16_t v, *q = (uint16_t *)p;
            memcpy(&v, one, 2);
            for (int64_t i = 0; i < n; i++) q[i * s] = v;
            break;
        }
        case 4: {
            uint32_t v, *q = (uint32_t *)p;
            memcpy(&v, one, 4);
            for (int64_t i = 0; i < n; i++) q[i * s] = v;
            break;
        }
        default: {
            uint64_t v, *q = (uint64_t *)p;
            memcpy(&v, one, 8);
            for (int64_t i = 0; i < n; i++) q[i * s] = v;
        }
    }
}

void simk_fill(const sim_view *out, double value) {
    size_t es = sim_dtype_size(out->dtype);
    char one[8];
    sim_store(one, out->dtype, value);
    sim_iter it;
    if (!iter_views_mem(&it, 1, &out)) return;
    do fill_run(it.p[0], it.s[0], it.n, one, es);
    while (sim_iter_next(&it));
}

sim_status simk_copy(const char *fn, const char *kernel, const sim_view *src, const sim_view *dst) {
    if (!sim_same_shape(src, dst)) {
        char s1[160], s2[160];
        sim_shape_str(src, s1, sizeof s1);
        sim_shape_str(dst, s2, sizeof s2);
        return sim_fail(SIM_E_INVALID_VALUE, fn, "source shape %s differs from destination %s", s1,
                        s2);
    }
    if (sim_numel(dst) == 0) return SIM_OK;
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    copy_view(src, dst);
    return SIM_OK;
}

/* One row of a same-dtype copy: bytes. */
static void copy_run(char *d, int64_t ds, const char *s, int64_t ss, int64_t n, size_t es) {
    if (ds == 1 && ss == 1) {
        memmove(d, s, (size_t)n * es);
        return;
    }
    switch (es) {
        case 1: for (int64_t i = 0; i < n; i++) d[i * ds] = s[i * ss]; break;
        case 2: {
            uint16_t *q = (uint16_t *)d;
            const uint16_t *r = (const uint16_t *)s;
            for (int64_t i = 0; i < n; i++) q[i * ds] = r[i * ss];
            break;
        }
        case 4: {
            uint32_t *q = (uint32_t *)d;
            const uint32_t *r = (const uint32_t *)s;
            for (int64_t i = 0; i < n; i++) q[i * ds] = r[i * ss];
            break;
        }
        default: {
            uint64_t *q = (uint64_t *)d;
            const uint64_t *r = (const uint64_t *)s;
            for (int64_t i = 0; i < n; i++) q[i * ds] = r[i * ss];
        }
    }
}

/* A same-dtype copy of an A x B block, element (a, b) at d + a*da + b*db
 * from s + a*sa + b*sb (strides in elements): a transposition, done in
 * 32 x 32 tiles so that both sides stay in cache, each tile walked along
 * dst's unit-stride dim (db == 1, else da == 1).  (Both strides stay
 * variables: GCC's code for a literal unit stride here ran slower.) */
#define TILE_COPY(T)                                                                         \
    for (int64_t a0 = 0; a0 < A; a0 += 32)                                                   \
        for (int64_t b0 = 0; b0 < B; b0 += 32) {                                             \
            const int64_t a1 = imin(A, a0 + 32), b1 = imin(B, b0 + 32);                      \
            if (db == 1)                                                                     \
                for (int64_t a = a0; a < a1; a++) {                                          \
                    T *dr = (T *)d + a * da;                                                 \
                    const T *sr = (const T *)s + a * sa;                                     \
                    for (int64_t b = b0; b < b1; b++) dr[b * db] = sr[b * sb];               \
                }                                                                            \
            else                                                                             \
                for (int64_t b = b0; b < b1; b++) {                                          \
                    T *dc = (T *)d + b * db;                                                 \
                    const T *sc = (const T *)s + b * sb;                                     \
                    for (int64_t a = a0; a < a1; a++) dc[a * da] = sc[a * sa];               \
                }                                                                            \
        }

static void tile_copy(char *d, int64_t da, int64_t db, const char *s, int64_t sa, int64_t sb, int64_t A,
                      int64_t B, size_t es) {
    switch (es) {
        case 1: TILE_COPY(uint8_t) break;
        case 2: TILE_COPY(uint16_t) break;
        case 4: TILE_COPY(uint32_t) break;
        default: TILE_COPY(uint64_t) break;
    }
}

/* A same-dtype copy whose rows are contiguous on one side and strided on the
 * other, where the strided side is contiguous along another dim: walked as 2-D
 * tiles of (that dim, the row dim).  Returns 0 (nothing done) otherwise.  The
 * order of the writes changes, which only matters when dst's elements share
 * memory, so then it is not used. */
static int copy_transposed(const sim_view *src, const sim_view *dst, const sim_iter *it, size_t es) {
    const int nd = it->nd, L = nd - 1;
    if (nd < 2 || it->n < 8 || !view_injective(dst)) return 0;
    int64_t st[2][SIM_MAX_DIMS];
    for (int k = 0; k < 2; k++)
        for (int d = 0; d < nd; d++) st[k][d] = it->bstride[k][d] / (int64_t)es;
    /* the side whose rows are strided must have a unit-stride dim j */
    int strided = st[0][L] == 1 && st[1][L] != 1 && st[1][L] != 0 ? 1
                  : st[1][L] == 1 && st[0][L] != 1 && st[0][L] != 0 ? 0 : -1;
    if (strided < 0) return 0;
    int j = -1;
    for (int d = 0; d < L; d++)
        if (st[strided][d] == 1 && it->shape[d] >= 8) j = d;
    if (j < 0) return 0;
    /* the other dims, walked around the tiles */
    int64_t oshape[SIM_MAX_DIMS], ost[2][SIM_MAX_DIMS];
    int on = 0;
    for (int d = 0; d < L; d++) {
        if (d == j) continue;
        oshape[on] = it->shape[d];
        ost[0][on] = st[0][d];
        ost[1][on] = st[1][d];
        on++;
    }
    char *base[2] = {dst->base, src->base};
    const int64_t *strides[2] = {ost[0], ost[1]}, ess[2] = {(int64_t)es, (int64_t)es};
    sim_iter o;
    if (!sim_iter_init(&o, on, oshape, 2, base, strides, ess)) return 1;
    const int64_t A = it->shape[j], B = it->shape[L];
    do
        for (int64_t r = 0; r < o.n; r++)
            tile_copy(o.p[0] + r * o.s[0] * (int64_t)es, st[0][j], st[0][L],
                      o.p[1] + r * o.s[1] * (int64_t)es, st[1][j], st[1][L], A, B, es);
    while (sim_iter_next(&o));
    return 1;
}

/* dst = src (same shape), converting dtypes: between floating dtypes through
 * float (exact, one rounding), between integer ones exactly in int64,
 * across the two through double as sim_load / sim_store do; a same-dtype
 * copy moves bytes.  src must not overlap dst (see copy_view). */
static void copy_any(const sim_view *src, const sim_view *dst) {
    int64_t n = sim_numel(dst);
    if (n == 0) return;
    size_t ses = sim_dtype_size(src->dtype), des = sim_dtype_size(dst->dtype);
    if (src->dtype == dst->dtype && sim_is_contiguous(src) && sim_is_contiguous(dst)) {
        memmove(dst->base, src->base, (size_t)n * des);
        return;
    }
    int ff = simk_is_float(src->dtype) && simk_is_float(dst->dtype);
    int ii = !simk_is_float(src->dtype) && !simk_is_float(dst->dtype);
    const sim_view *ops[2] = {dst, src};
    sim_iter it;
    if (!iter_views_mem(&it, 2, ops)) return;
    if (src->dtype == dst->dtype && copy_transposed(src, dst, &it, des)) return;
    do {
        char *d = it.p[0];
        const char *s = it.p[1];
        if (src->dtype == dst->dtype) {
            copy_run(d, it.s[0], s, it.s[1], it.n, des);
            continue;
        }
        for (int64_t j = 0; j < it.n; j += BLK) {
            int64_t m = imin(BLK, it.n - j);
            char *dj = d + j * it.s[0] * (int64_t)des;
            const char *sj = s + j * it.s[1] * (int64_t)ses;
            if (ff) {
                float buf[BLK];
                cvt_from_f(dj, dst->dtype, it.s[0], ld_f(buf, sj, src->dtype, it.s[1], m), m);
            } else if (ii) {
                int64_t buf[BLK];
                cvt_from_i(dj, dst->dtype, it.s[0], ld_i(buf, sj, src->dtype, it.s[1], m), m);
            } else {
                double buf[BLK];
                cvt_to_d(buf, sj, src->dtype, it.s[1], m);
                cvt_from_d(dj, dst->dtype, it.s[0], buf, m);
            }
        }
    } while (sim_iter_next(&it));
}

/* copy_any for any src: one overlapping dst is read first. */
static void copy_view(const sim_view *src, const sim_view *dst) {
    if (sim_numel(dst) == 0) return;
    if (src->dtype == dst->dtype && sim_is_contiguous(src) && sim_is_contiguous(dst)) {
        memmove(dst->base, src->base, (size_t)sim_numel(dst) * sim_dtype_size(dst->dtype));
        return;
    }
    held h;
    src = hold(&h, src, &dst, 1);
    copy_any(src, dst);
    free(h.own);
}

/* the helpers the other kernel files share (simkernels.h) */
void simk_copy_view(const sim_view *src, const sim_view *dst) { copy_view(src, dst); }
int simk_views_overlap(const sim_view *a, const sim_view *b) { return views_overlap(a, b); }
sim_view simk_dense_like(const sim_view *v, sim_dtype dt, void **own) { return dense_like(v, dt, own); }

/* ------------------------------------------------------ row arithmetic */

/* Sums in double with eight running sums (lane k takes elements k, k+8, ...;
 * the tail goes to lanes 0, 1, ...; then ((0+1)+(2+3))+((4+5)+(6+7))), kept
 * in vector registers (two of four lanes) through GCC's vector extensions
 * where the compiler has them. */
#if defined(__GNUC__)
typedef double v4d __attribute__((vector_size(32)));
typedef float v4f_u __attribute__((vector_size(16), aligned(4), may_alias)); /* 4 floats anywhere */
#define ld4(p) __builtin_convertvector(*(const v4f_u *)(p), v4d)
typedef struct {
    v4d lo, hi;
} lanes8;
#define LANES_ZERO {{0, 0, 0, 0}, {0, 0, 0, 0}}
#define LANE(a, k) ((k) < 4 ? (a).lo[(k) & 3] : (a).hi[(k) & 3])
#define LANE_ADD(a, k, v) ((k) < 4 ? ((a).lo[(k) & 3] += (v)) : ((a).hi[(k) & 3] += (v)))
#else
typedef struct {
    double v[8];
} lanes8;
#define LANES_ZERO {{0}}
#define LANE(a, k) ((a).v[k])
#define LANE_ADD(a, k, v) ((a).v[k] += (v))
#endif
#define LANES_TOTAL(a) (((LANE(a, 0) + LANE(a, 1)) + (LANE(a, 2) + LANE(a, 3))) + \
                        ((LANE(a, 4) + LANE(a, 5)) + (LANE(a, 6) + LANE(a, 7))))

static inline double sum_d(const float *x, int64_t n) {
    lanes8 a = LANES_ZERO;
    int64_t i = 0;
#if defined(__GNUC__)
    for (; i + 8 <= n; i += 8) {
        a.lo += ld4(x + i);
        a.hi += ld4(x + i + 4);
    }
#endif
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) LANE_ADD(a, k, (double)x[i + k]);
    for (int k = 0; i < n; i++, k++) LANE_ADD(a, k, (double)x[i]);
    return LANES_TOTAL(a);
}

/* sum of x*y in double (each product exact) */
static inline double dot_d(const float *x, const float *y, int64_t n) {
    lanes8 a = LANES_ZERO;
    int64_t i = 0;
#if defined(__GNUC__)
    for (; i + 8 <= n; i += 8) {
        a.lo += ld4(x + i) * ld4(y + i);
        a.hi += ld4(x + i + 4) * ld4(y + i + 4);
    }
#endif
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) LANE_ADD(a, k, (double)x[i + k] * y[i + k]);
    for (int k = 0; i < n; i++, k++) LANE_ADD(a, k, (double)x[i] * y[i]);
    return LANES_TOTAL(a);
}

/* sum of (x - mu)^2 in double */
static inline double sqdev_d(const float *x, int64_t n, double mu) {
    lanes8 a = LANES_ZERO;
    int64_t i = 0;
#if defined(__GNUC__)
    for (; i + 8 <= n; i += 8) {
        v4d d0 = ld4(x + i) - mu, d1 = ld4(x + i + 4) - mu;
        a.lo += d0 * d0;
        a.hi += d1 * d1;
    }
#endif
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            double d = x[i + k] - mu;
            LANE_ADD(a, k, d * d);
        }
    for (int k = 0; i < n; i++, k++) {
        double d = x[i] - mu;
        LANE_ADD(a, k, d * d);
    }
    return LANES_TOTAL(a);
}

/* the largest of m and x[...] that is greater than it (NaN never is; the
 * order of the comparisons can only change the sign of a zero maximum) */
static inline float max_f(const float *x, int64_t n, float m) {
    int64_t i = 0;
#if defined(__GNUC__)
    typedef float v8f __attribute__((vector_size(32)));
    typedef int v8i __attribute__((vector_size(32)));
    typedef float v8f_un __attribute__((vector_size(32), aligned(4), may_alias));
    if (n >= 16) {
        v8f a = {m, m, m, m, m, m, m, m}, b = a;
        for (; i + 16 <= n; i += 16) {
            v8f u = *(const v8f_un *)(x + i), v = *(const v8f_un *)(x + i + 8);
            v8i ga = u > a, gb = v > b; /* all ones where greater */
            a = (v8f)(((v8i)u & ga) | ((v8i)a & ~ga));
            b = (v8f)(((v8i)v & gb) | ((v8i)b & ~gb));
        }
        /* lanes halved three times, then m: the same "greater than" rule */
        v8i g = b > a;
        a = (v8f)(((v8i)b & g) | ((v8i)a & ~g));
        b = __builtin_shufflevector(a, a, 4, 5, 6, 7, 0, 1, 2, 3);
        g = b > a;
        a = (v8f)(((v8i)b & g) | ((v8i)a & ~g));
        b = __builtin_shufflevector(a, a, 2, 3, 0, 1, 6, 7, 4, 5);
        g = b > a;
        a = (v8f)(((v8i)b & g) | ((v8i)a & ~g));
        m = a[1] > a[0] ? a[1] : a[0];
    }
#endif
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* A float sum the way PyTorch's vectorized reductions (vec::reduce_all, 16
 * lanes) add: fewer than 16 elements in order, else 16 running sums, the
 * tail into the first lanes, then lanes i and i^8, i^4, i^2, i^1 pairwise. */
static float sum_lanes_f(const float *v, int64_t n) {
    if (n < 16) {
        float s = n ? v[0] : 0.0f;
        for (int64_t i = 1; i < n; i++) s += v[i];
        return s;
    }
    float a[16], b[16];
    memcpy(a, v, sizeof a);
    int64_t d = 16;
    for (; d + 16 <= n; d += 16)
        for (int k = 0; k < 16; k++) a[k] += v[d + k];
    for (int k = 0; d + k < n; k++) a[k] += v[d + k];
    for (int w = 8; w >= 1; w >>= 1) {
        for (int k = 0; k < 16; k++) b[k] = a[k] + a[k ^ w];
        memcpy(a, b, sizeof a);
    }
    return a[0];
}

/* ---------------------------------------------------- views of rows */

/* v's first k dims */
static sim_view head_view(const sim_view *v, int k) {
    sim_view h = *v;
    h.ndim = k;
    return h;
}

/* v without dim */
static sim_view drop_dim(const sim_view *v, int dim) {
    sim_view r = *v;
    for (int d = dim; d + 1 < v->ndim; d++) {
        r.shape[d] = v->shape[d + 1];
        r.strides[d] = v->strides[d + 1];
    }
    r.ndim = v->ndim - 1;
    return r;
}

/* 1 (and the stride) if v's last k dims are one strided run of elements */
static int tail_run(const sim_view *v, int k, int64_t *stride) {
    int64_t st = 1, next = 0;
    int first = 1;
    for (int d = v->ndim - 1; d >= v->ndim - k; d--) {
        if (v->shape[d] == 1) continue;
        if (first) {
            st = v->strides[d];
            first = 0;
        } else if (v->strides[d] != next) {
            return 0;
        }
        next = v->strides[d] * v->shape[d];
    }
    *stride = st;
    return 1;
}

/* An operand walked as rows of its last k dims: the view itself when they
 * form one strided run, else a dense copy (an output is copied back by
 * rows_close). */
typedef struct {
    sim_view v;
    const sim_view *dst;
    void *own;
    int64_t rs; /* element stride along a row */
} rowed;

static void rows_open(rowed *r, const sim_view *v, int k, int output) {
    r->v = *v;
    r->dst = NULL;
    r->own = NULL;
    r->rs = 1;
    if (!v->present || tail_run(v, k, &r->rs)) return;
    r->v = dense_like(v, v->dtype, &r->own);
    r->rs = 1;
    if (output) r->dst = v;
    else copy_view(v, &r->v);
}

static void rows_close(rowed *r) {
    if (r->dst) copy_view(&r->v, r->dst);
    free(r->own);
}

/* ------------------------------------------------------------ reductions */

/* A reduction pass: fn sees each run of `in` (as float) with the index o,
 * into acc (or any array over the kept dims, row-major), of its first
 * element and the step between its elements' indices (0 when the run walks
 * reduced dims: all of it goes to o).  Runs follow `in`'s memory order, not
 * its logical one: the order in which a kept element's terms arrive changes,
 * which sums in double make immaterial. */
typedef void (*red_fn)(void *ctx, const float *x, int64_t n, int64_t o, int64_t step);

/* The iteration of reduce_walk: operand 0 is `in`, operand 1 the kept index
 * riding along in 1-byte steps through acc (kept doubles, so every such
 * address lies inside it). */
static int reduce_iter(sim_iter *it, const sim_view *in, uint32_t reduce, double *acc) {
    int nd = in->ndim, perm[SIM_MAX_DIMS];
    int64_t ost[SIM_MAX_DIMS], s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        ost[d] = (reduce & (1u << d)) ? 0 : s;
        if (!(reduce & (1u << d))) s *= in->shape[d];
    }
    for (int d = 0; d < nd; d++) { /* dims by decreasing stride, stable */
        int i = d;
        for (; i > 0 && in->strides[perm[i - 1]] < in->strides[d]; i--) perm[i] = perm[i - 1];
        perm[i] = d;
    }
    int64_t shape[SIM_MAX_DIMS], ist[SIM_MAX_DIMS], kst[SIM_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        shape[d] = in->shape[perm[d]];
        ist[d] = in->strides[perm[d]];
        kst[d] = ost[perm[d]];
    }
    char *base[2] = {in->base, (char *)acc};
    const int64_t *strides[2] = {ist, kst};
    int64_t es[2] = {(int64_t)sim_dtype_size(in->dtype), 1};
    return sim_iter_init(it, nd, shape, 2, base, strides, es);
}

static void reduce_walk(const sim_view *in, uint32_t reduce, double *acc, red_fn fn, void *ctx) {
    sim_iter it;
    if (!reduce_iter(&it, in, reduce, acc)) return;
    int64_t es = (int64_t)sim_dtype_size(in->dtype);
    float buf[BLK];
    do {
        int64_t o = it.p[1] - (char *)acc;
        for (int64_t j = 0; j < it.n; j += BLK) {
            int64_t m = imin(BLK, it.n - j);
            const float *x = ld_f(buf, it.p[0] + j * it.s[0] * es, in->dtype, it.s[0], m);
            fn(ctx, x, m, o + j * it.s[1], it.s[1]);
        }
    } while (sim_iter_next(&it));
}

static void red_sum(void *ctx, const float *x, int64_t n, int64_t o, int64_t step) {
    double *acc = ctx;
    if (step == 1) for (int64_t i = 0; i < n; i++) acc[o + i] += x[i];
    else if (step) for (int64_t i = 0; i < n; i++) acc[o + i * step] += x[i];
    else acc[o] += sum_d(x, n);
}

/* acc += the sums of `in` over the reduced dims.  Short runs along kept
 * elements (channels-last pixels summed over the image) that land on the
 * same acc run row after row go through four interleaved partial sums
 * first, so that one row's additions need not wait for the previous row's. */
static void sum_walk(const sim_view *in, uint32_t reduce, double *acc) {
    sim_iter it;
    if (!reduce_iter(&it, in, reduce, acc)) return;
    if (it.s[1] != 1 || it.n > 64 || it.nd < 2) {
        reduce_walk(in, reduce, acc, red_sum, acc);
        return;
    }
    const int64_t n = it.n;
    double part[4][64];
    float buf[64];
    int64_t at = -1, rows = 0;
    do {
        int64_t o = it.p[1] - (char *)acc;
        if (o != at) {
            for (int64_t i = 0; at >= 0 && i < n; i++)
                acc[at + i] += (part[0][i] + part[1][i]) + (part[2][i] + part[3][i]);
            for (int k = 0; k < 4; k++) memset(part[k], 0, (size_t)n * sizeof(double));
            at = o;
            rows = 0;
        }
        const float *x = ld_f(buf, it.p[0], in->dtype, it.s[0], n);
        double *pp = part[rows++ & 3];
        for (int64_t i = 0; i < n; i++) pp[i] += x[i];
    } while (sim_iter_next(&it));
    for (int64_t i = 0; i < n; i++) acc[at + i] += (part[0][i] + part[1][i]) + (part[2][i] + part[3][i]);
}

/* ------------------------------------------------------------------ GEMM */

/* The arithmetic lives in simblas.c (packed, register-blocked, vectorized,
 * strided operands read in place). */

/* The last two dims of a 2-D or 3-D view as a simblas operand. */
static simblas_mat blas_mat(const sim_view *v) {
    int nd = v->ndim;
    simblas_mat m = {v->base, v->dtype, v->strides[nd - 2], v->strides[nd - 1],
                     nd == 3 ? v->strides[0] : 0};
    return m;
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
    simblas_mat A = blas_mat(a), Mt = blas_mat(m), C = blas_mat(out), D;
    int has_bias = bias && bias->present;
    if (has_bias) D = blas_mat(bias);
    simblas_gemm(B, M, N, K, (float)alpha, &A, &Mt, (float)beta, has_bias ? &D : NULL, &C);
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
    /* an output sharing memory with an operand is computed aside, then copied */
    const int aside = views_overlap(out, a) || views_overlap(out, m);
    int32_t *c = aside ? xmalloc((size_t)(M * N > 0 ? M * N : 1) * sizeof(int32_t)) : (int32_t *)out->base;
    simblas_gemm_u8(M, N, K, (const uint8_t *)a->base, a->strides[0], a->strides[1], (const uint8_t *)m->base,
                    m->strides[0], m->strides[1], c, aside ? N : out->strides[0], aside ? 1 : out->strides[1]);
    if (aside) {
        sim_view t = dense_over(c, out, SIM_I32);
        copy_any(&t, out);
        free(c);
    }
    return SIM_OK;
}

void simk_s8_to_u8(const sim_view *src, const sim_view *dst) {
    const sim_view *ops[2] = {dst, src};
    sim_iter it;
    if (!sim_iter_views(&it, 2, ops)) return;
    do {
        uint8_t *d = (uint8_t *)it.p[0];
        const int8_t *s = (const int8_t *)it.p[1];
        for (int64_t i = 0; i < it.n; i++) d[i * it.s[0]] = (uint8_t)((int)s[i * it.s[1]] + 128);
    } while (sim_iter_next(&it));
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

/* Small float copies and clears as fixed 64-byte moves, which compile to
 * vector loads and stores instead of library calls. */
static inline void copy_f32(float *d, const float *s, int64_t n) {
    int64_t t = 0;
    for (; t + 16 <= n; t += 16) memcpy(d + t, s + t, 64);
    for (; t < n; t++) d[t] = s[t];
}

static inline void zero_f32(float *d, int64_t n) {
    int64_t t = 0;
    for (; t + 16 <= n; t += 16) memset(d + t, 0, 64);
    for (; t < n; t++) d[t] = 0.0f;
}

/* The convolution is an implicit GEMM (simblas_gemm_segs) over a float32
 * copy of one image at a time, zero-padded and split by stride phase: plane
 * (ph, pw) holds the padded pixels (sh * i + ph, sw * j + pw), so output
 * pixel (oh, ow) meets kernel cell (kh, kw) at pixel (oh + kh*dh / sh,
 * ow + kw*dw / sw) of plane (kh*dh % sh, kw*dw % sw): every cell is a fixed
 * offset from the output pixel's own place.  The GEMM's rows are the plane
 * pixels q = oh * Wq + ow (one pixel, C floats, apart), its K runs one per
 * kernel cell (merged where cells are contiguous: every kw of a kernel row
 * at stride 1 and dilation 1), B the weight as [KH*KW*Cg, O].  The rows
 * with ow >= OW are computed and dropped (Wq / OW - 1 of the work, 6% for a
 * 3x3 over 32 columns). */
typedef struct {
    int64_t sh, sw, Hq, Wq, plane; /* phases, plane rows and columns, floats per plane */
    int64_t rows;                  /* GEMM rows per image: (OH - 1) * Wq + OW */
    int64_t floats;                /* buffer size, with what the dropped rows read past the end */
} conv_planes;

/* Copies image n of `in` (any strides and dtype) into the zeroed planes. */
static void conv_fill_planes(float *buf, const conv_planes *cp, const sim_view *in, int64_t n,
                             const int64_t *padding) {
    const int64_t H = in->shape[1], W = in->shape[2], C = in->shape[3];
    const int64_t es = (int64_t)sim_dtype_size(in->dtype);
    for (int64_t ph = 0; ph < cp->sh; ph++)
        for (int64_t pw = 0; pw < cp->sw; pw++) {
            /* padded row sh*i + ph is input row sh*i + ph - pad: the first i at or past row 0 */
            int64_t i0 = padding[0] > ph ? (padding[0] - ph + cp->sh - 1) / cp->sh : 0;
            int64_t j0 = padding[1] > pw ? (padding[1] - pw + cp->sw - 1) / cp->sw : 0;
            int64_t ih0 = cp->sh * i0 + ph - padding[0], iw0 = cp->sw * j0 + pw - padding[1];
            if (ih0 >= H || iw0 >= W) continue;
            sim_view src = *in, dst;
            src.ndim = 3;
            src.shape[0] = (H - ih0 + cp->sh - 1) / cp->sh;
            src.shape[1] = (W - iw0 + cp->sw - 1) / cp->sw;
            src.shape[2] = C;
            src.strides[0] = in->strides[1] * cp->sh;
            src.strides[1] = in->strides[2] * cp->sw;
            src.strides[2] = in->strides[3];
            src.base = in->base + (n * in->strides[0] + ih0 * in->strides[1] + iw0 * in->strides[2]) * es;
            dst = src;
            dst.dtype = SIM_F32;
            dst.strides[0] = cp->Wq * C;
            dst.strides[1] = C;
            dst.strides[2] = 1;
            dst.base = (char *)(buf + (ph * cp->sw + pw) * cp->plane + (i0 * cp->Wq + j0) * C);
            copy_view(&src, &dst);
        }
}

/* A 3x3 convolution at stride 1 with a float16 or bfloat16 result goes
 * through Winograd's F(2x2, 3x3): each 2x2 block of output pixels is
 * A^T [(G g G^T) . (B^T d B)] A over the 4x4 input block d around it, which
 * makes the channel sums 16 matrix products per block instead of 36 (2.25x
 * fewer multiplications), run as one batched GEMM of [tiles, C] @ [C, O].
 * The transforms (additions, and halves of the weights) are computed in
 * float32; their rounding errors are of the order of float32's, a
 * thousandth of the one rounding to float16 (bfloat16) the result gets, so
 * the result is the direct convolution's but within a rounding of the
 * narrow dtype near ties. */
#define WINO_CHUNK 256 /* output blocks per GEMM: V and M of a chunk stay in L2 */

/* From this many input channels per group on, F(2x2, 3x3) (below); with
 * fewer, F(2, 3) along the rows (conv_winograd_rows), whose products have a
 * K three times as long.  Measured with 8 images of 32x32, as times of the
 * implicit GEMM's: F(2, 3) 0.80 at 16 -> 32 channels, 0.89 at 32 -> 64, 0.82
 * at 64 -> 64; F(2x2, 3x3) 1.0-1.1 at 16 -> 32 and 32 -> 64, 0.69 at 64 -> 64. */
#ifndef WINO_MIN_CG
#define WINO_MIN_CG 48
#endif

static int winograd_applies(const sim_view *w, const sim_view *out, const int64_t *stride, const int64_t *dilation,
                            int64_t OH, int64_t OW) {
    return (out->dtype == SIM_F16 || out->dtype == SIM_BF16) && w->shape[1] == 3 && w->shape[2] == 3 &&
           stride[0] == 1 && stride[1] == 1 && dilation[0] == 1 && dilation[1] == 1 && OH >= 2 && OW >= 2;
}

#define WV 16 /* channels per vector step of the transforms */

/* The input transform of one 4x4 block for n <= WV channels: d rows rs
 * floats apart, pixels cs apart; V's 16 entries vs apart.  Fixed-size
 * loops over the channels, which the compiler turns into vector code. */
static inline void wino_in(const float *d, int64_t rs, int64_t cs, float *v, int64_t vs, int64_t n) {
    float x[4][4][WV], u[4][4][WV];
    for (int r = 0; r < 4; r++)
        for (int q = 0; q < 4; q++) {
            memcpy(x[r][q], d + r * rs + q * cs, (size_t)n * sizeof(float));
        }
    for (int q = 0; q < 4; q++)
        for (int k = 0; k < WV; k++) { /* B^T d */
            u[0][q][k] = x[0][q][k] - x[2][q][k];
            u[1][q][k] = x[1][q][k] + x[2][q][k];
            u[2][q][k] = x[2][q][k] - x[1][q][k];
            u[3][q][k] = x[1][q][k] - x[3][q][k];
        }
    for (int r = 0; r < 4; r++) {
        float e[4][WV];
        for (int k = 0; k < WV; k++) { /* (B^T d) B */
            e[0][k] = u[r][0][k] - u[r][2][k];
            e[1][k] = u[r][1][k] + u[r][2][k];
            e[2][k] = u[r][2][k] - u[r][1][k];
            e[3][k] = u[r][1][k] - u[r][3][k];
        }
        for (int q = 0; q < 4; q++) memcpy(v + (r * 4 + q) * vs, e[q], (size_t)n * sizeof(float));
    }
}

/* The output transform for n <= WV output channels: M's 16 entries ms
 * apart; the 2x2 outputs rows ys, pixels cs apart; plus the bias. */
static inline void wino_out(const float *m, int64_t ms, const float *bias, float *y, int64_t ys, int64_t cs,
                            int64_t n) {
    float x[16][WV], p[2][4][WV], b[WV] = {0};
    for (int i = 0; i < 16; i++) memcpy(x[i], m + i * ms, (size_t)n * sizeof(float));
    if (bias) memcpy(b, bias, (size_t)n * sizeof(float));
    for (int q = 0; q < 4; q++)
        for (int k = 0; k < WV; k++) { /* A^T M */
            p[0][q][k] = x[q][k] + x[4 + q][k] + x[8 + q][k];
            p[1][q][k] = x[4 + q][k] - x[8 + q][k] - x[12 + q][k];
        }
    for (int r = 0; r < 2; r++) {
        float y0[WV], y1[WV];
        for (int k = 0; k < WV; k++) { /* (A^T M) A + bias */
            y0[k] = p[r][0][k] + p[r][1][k] + p[r][2][k] + b[k];
            y1[k] = p[r][1][k] - p[r][2][k] - p[r][3][k] + b[k];
        }
        memcpy(y + r * ys, y0, (size_t)n * sizeof(float));
        memcpy(y + r * ys + cs, y1, (size_t)n * sizeof(float));
    }
}

/* Image n of NHWC `in` into img, a zero-filled float32 buffer of rows x Wb
 * pixels (C channels each) with the image at (padding[0], padding[1]). */
static void load_padded_image(const sim_view *in, int64_t n, const int64_t *padding, int64_t rows, int64_t Wb,
                              float *img) {
    const int64_t H = in->shape[1], W = in->shape[2], C = in->shape[3];
    memset(img, 0, (size_t)(rows * Wb * C) * sizeof(float));
    sim_view src = *in, dst = *in;
    src.ndim = dst.ndim = 3;
    src.shape[0] = dst.shape[0] = H;
    src.shape[1] = dst.shape[1] = W;
    src.shape[2] = dst.shape[2] = C;
    src.strides[0] = in->strides[1], src.strides[1] = in->strides[2], src.strides[2] = in->strides[3];
    src.base = in->base + n * in->strides[0] * (int64_t)sim_dtype_size(in->dtype);
    dst.dtype = SIM_F32;
    dst.strides[0] = Wb * C, dst.strides[1] = C, dst.strides[2] = 1;
    dst.base = (char *)(img + (padding[0] * Wb + padding[1]) * C);
    copy_view(&src, &dst);
}

static void conv_winograd(const sim_view *in, const float *wd, const float *bf, const int64_t *padding,
                          int64_t groups, int64_t OH, int64_t OW, const sim_view *out) {
    const int64_t N = in->shape[0], C = in->shape[3];
    const int64_t O = out->shape[3], Og = O / groups, Cg = C / groups;
    const int64_t TH = (OH + 1) / 2, TW = (OW + 1) / 2, T = TH * TW;
    const int64_t Hb = 2 * TH + 2, Wb = 2 * TW + 2;   /* the padded image, every block inside */
    /* U[xi][c][o] = (G g G^T)[xi] for each group, computed in double */
    float *U = xmalloc((size_t)(16 * C * Og) * sizeof(float));   /* every entry written below */
    static const double G[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
    for (int64_t o = 0; o < O; o++) {
        const int64_t g = o / Og, oo = o % Og;
        for (int64_t c = 0; c < Cg; c++) {
            double gk[3][3], t[4][3];
            for (int a = 0; a < 3; a++)
                for (int b2 = 0; b2 < 3; b2++) gk[a][b2] = wd[((o * 3 + a) * 3 + b2) * Cg + c];
            for (int i = 0; i < 4; i++)
                for (int b2 = 0; b2 < 3; b2++) t[i][b2] = G[i][0] * gk[0][b2] + G[i][1] * gk[1][b2] + G[i][2] * gk[2][b2];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                    U[((int64_t)(i * 4 + j) * C + g * Cg + c) * Og + oo] =
                        (float)(t[i][0] * G[j][0] + t[i][1] * G[j][1] + t[i][2] * G[j][2]);
        }
    }
    /* (written before they are read: no need to clear them) */
    float *img = xmalloc((size_t)(Hb * Wb * C) * sizeof(float)), *V = xmalloc((size_t)(16 * WINO_CHUNK * C) * 4),
          *M = xmalloc((size_t)(16 * WINO_CHUNK * O) * 4);
    float *Y = xmalloc((size_t)(2 * TH * 2 * TW * O) * 4);   /* the image's outputs, then rounded once into out */
    const int64_t oes = (int64_t)sim_dtype_size(out->dtype);
    for (int64_t n = 0; n < N; n++) {
        load_padded_image(in, n, padding, Hb, Wb, img);
        for (int64_t t0 = 0; t0 < T; t0 += WINO_CHUNK) {
            const int64_t tc = T - t0 < WINO_CHUNK ? T - t0 : WINO_CHUNK;
            /* V[xi][t][c] = (B^T d B)[xi] for each block t of the chunk, WV channels at a time */
            for (int64_t t = 0; t < tc; t++) {
                const int64_t th = (t0 + t) / TW, tw = (t0 + t) % TW;
                const float *d0 = img + ((2 * th) * Wb + 2 * tw) * C;
                float *v0 = V + t * C;
                const int64_t step = (int64_t)WINO_CHUNK * C;
                int64_t c = 0;
                for (; c + WV <= C; c += WV) wino_in(d0 + c, Wb * C, C, v0 + c, step, WV);
                if (c < C) wino_in(d0 + c, Wb * C, C, v0 + c, step, C - c);
            }
            /* M[xi][t][o] = V[xi][t][:] @ U[xi][:][o], per group: one batched GEMM over xi */
            for (int64_t g = 0; g < groups; g++) {
                simblas_mat A = {V + g * Cg, SIM_F32, C, 1, WINO_CHUNK * C};
                simblas_mat B = {U + g * Cg * Og, SIM_F32, Og, 1, C * Og};
                simblas_mat Cm = {M + g * Og, SIM_F32, O, 1, WINO_CHUNK * O};
                simblas_gemm(16, tc, Og, Cg, 1.0f, &A, &B, 0.0f, NULL, &Cm);
            }
            /* Y block = A^T M A + bias, WV channels at a time */
            for (int64_t t = 0; t < tc; t++) {
                const int64_t th = (t0 + t) / TW, tw = (t0 + t) % TW;
                float *y0 = Y + ((2 * th) * (2 * TW) + 2 * tw) * O;
                const int64_t step = (int64_t)WINO_CHUNK * O;
                int64_t o = 0;
                for (; o + WV <= O; o += WV) wino_out(M + t * O + o, step, bf ? bf + o : NULL, y0 + o, 2 * TW * O, O, WV);
                if (o < O) wino_out(M + t * O + o, step, bf ? bf + o : NULL, y0 + o, 2 * TW * O, O, O - o);
            }
        }
        sim_view ys = *out, yd = *out;
        ys.base = (char *)Y;
        ys.dtype = SIM_F32;
        ys.shape[0] = yd.shape[0] = 1;
        ys.strides[0] = 0, ys.strides[1] = 2 * TW * O, ys.strides[2] = O, ys.strides[3] = 1;
        yd.base = out->base + n * out->strides[0] * oes;
        copy_view(&ys, &yd);
    }
    free(U);
    free(img);
    free(V);
    free(M);
    free(Y);
}

/* With fewer channels, Winograd's F(2, 3) along the width only: a pair of
 * output pixels (ow, ow+1) of one kernel row is A^T [(G g) . (B^T d)] over
 * the 4 input pixels of that row, 4 products instead of 6.  B^T d depends
 * only on the input row and the pair, so each padded input row is
 * transformed once, into 4 planes of [rows][pairs][C]; the channel sums are
 * then 4 implicit GEMMs (one per transformed position) whose K is the three
 * kernel rows' channels, read as three runs a plane row apart, and whose
 * rows are exactly the output pairs (no padding column among them). */
static void conv_winograd_rows(const sim_view *in, const float *wd, const float *bf, const int64_t *padding,
                               int64_t groups, int64_t OH, int64_t OW, const sim_view *out) {
    const int64_t N = in->shape[0], C = in->shape[3];
    const int64_t O = out->shape[3], Og = O / groups, Cg = C / groups;
    const int64_t J = (OW + 1) / 2, Hp = OH + 2, Wb = 2 * J + 2;   /* pairs per row, padded rows and columns */
    const int64_t plane = Hp * J * C, rows = OH * J;
    /* U[xi][kh * Cg + c][o] = (G g[kh])[xi] per group, in double */
    static const double G[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
    float *U = xmalloc((size_t)(4 * groups * 3 * Cg * Og) * sizeof(float));
    for (int64_t o = 0; o < O; o++) {
        const int64_t g = o / Og, oo = o % Og;
        for (int64_t kh = 0; kh < 3; kh++)
            for (int64_t c = 0; c < Cg; c++) {
                const float *gk = wd + ((o * 3 + kh) * 3) * Cg + c;
                for (int xi = 0; xi < 4; xi++)
                    U[(((xi * groups + g) * 3 + kh) * Cg + c) * Og + oo] =
                        (float)(G[xi][0] * gk[0] + G[xi][1] * gk[Cg] + G[xi][2] * gk[2 * Cg]);
            }
    }
    float *img = xmalloc((size_t)(Hp * Wb * C) * sizeof(float)), *T = xmalloc((size_t)(4 * plane) * sizeof(float));
    float *M = xmalloc((size_t)(4 * rows * O) * sizeof(float)), *Y = xmalloc((size_t)(OH * 2 * J * O) * sizeof(float));
    const int64_t soff[3] = {0, J * C, 2 * J * C}, slen[3] = {Cg, Cg, Cg};
    const int64_t oes = (int64_t)sim_dtype_size(out->dtype);
    for (int64_t n = 0; n < N; n++) {
        load_padded_image(in, n, padding, Hp, Wb, img);
        /* T[xi][r][j][c] = (B^T d)[xi], d the 4 pixels 2j .. 2j+3 of padded row r */
        for (int64_t r = 0; r < Hp; r++)
            for (int64_t j = 0; j < J; j++) {
                const float *d = img + (r * Wb + 2 * j) * C;
                float *t = T + (r * J + j) * C;
                for (int64_t c = 0; c < C; c++) {
                    const float d0 = d[c], d1 = d[C + c], d2 = d[2 * C + c], d3 = d[3 * C + c];
                    t[c] = d0 - d2;
                    t[plane + c] = d1 + d2;
                    t[2 * plane + c] = d2 - d1;
                    t[3 * plane + c] = d1 - d3;
                }
            }
        /* M[xi][(oh, j)][o] = sum over kh, c of T[xi][oh + kh][j][c] U[xi][kh, c][o] */
        for (int xi = 0; xi < 4; xi++)
            for (int64_t g = 0; g < groups; g++) {
                simblas_mat B = {U + ((xi * groups + g) * 3 * Cg) * Og, SIM_F32, Og, 1, 0};
                simblas_mat Cm = {M + xi * rows * O + g * Og, SIM_F32, O, 1, 0};
                simblas_gemm_segs(rows, Og, 3 * Cg, T + xi * plane + g * Cg, C, 3, soff, slen, &B, 0, &Cm);
            }
        /* y[2j] = m0 + m1 + m2, y[2j+1] = m1 - m2 - m3, plus the bias */
        const int64_t ms = rows * O;
        for (int64_t q = 0; q < rows; q++) {
            const float *m = M + q * O;
            float *y = Y + 2 * q * O;
            for (int64_t o = 0; o < O; o++) {
                const float b = bf ? bf[o] : 0.0f, m1 = m[ms + o], m2 = m[2 * ms + o];
                y[o] = m[o] + m1 + m2 + b;
                y[O + o] = m1 - m2 - m[3 * ms + o] + b;
            }
        }
        sim_view ys = *out, yd = *out;
        ys.base = (char *)Y;
        ys.dtype = SIM_F32;
        ys.shape[0] = yd.shape[0] = 1;
        ys.strides[0] = 0, ys.strides[1] = 2 * J * O, ys.strides[2] = O, ys.strides[3] = 1;
        yd.base = out->base + n * out->strides[0] * oes;
        copy_view(&ys, &yd);
    }
    free(U);
    free(img);
    free(T);
    free(M);
    free(Y);
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
    const int64_t Og = O / groups, KK = KH * KW * Cg;
    if (N * OH * OW == 0 || Og == 0) return SIM_OK;
    /* an output sharing memory with the input: the input is read from a copy
     * (the weight and bias are converted below, before anything is written) */
    held hin;
    const sim_view *outs[1] = {out};
    in = hold(&hin, in, outs, 1);
    /* the weight as float [KK][O] (B's rows in K order: kh, kw, ci), the bias as float */
    float *wt = alloc_f(KK * O), *bf = NULL, *wd = gather_or_die(w);
    for (int64_t o = 0; o < O; o++)
        for (int64_t k = 0; k < KK; k++) wt[k * O + o] = wd[o * KK + k];
    if (bias->present) bf = gather_or_die(bias);
    if (winograd_applies(w, out, stride, dilation, OH, OW)) {
        if (Cg >= WINO_MIN_CG) conv_winograd(in, wd, bf, padding, groups, OH, OW, out);
        else conv_winograd_rows(in, wd, bf, padding, groups, OH, OW, out);
        sim_corrupt_output(out); /* debug mode only (X1SIM_CORRUPT / TH1SIM_CORRUPT) */
        free(wt);
        free(wd);
        free(bf);
        free(hin.own);
        return SIM_OK;
    }
    free(wd);
    conv_planes cp;
    cp.sh = stride[0], cp.sw = stride[1];
    cp.Hq = (H + 2 * padding[0] + cp.sh - 1) / cp.sh;
    cp.Wq = (W + 2 * padding[1] + cp.sw - 1) / cp.sw;
    cp.plane = cp.Hq * cp.Wq * C;
    cp.rows = (OH - 1) * cp.Wq + OW;
    /* each group's K runs: one per kernel cell, merged where contiguous */
    int64_t *soff = xmalloc((size_t)(2 * KH * KW) * sizeof(int64_t)), *slen = soff + KH * KW;
    int nseg = 0;
    int64_t reach = 0;
    for (int64_t kh = 0; kh < KH; kh++)
        for (int64_t kw = 0; kw < KW; kw++) {
            const int64_t y = kh * dilation[0], x = kw * dilation[1];
            const int64_t off = ((y % cp.sh) * cp.sw + x % cp.sw) * cp.plane + ((y / cp.sh) * cp.Wq + x / cp.sw) * C;
            if (nseg > 0 && soff[nseg - 1] + slen[nseg - 1] == off) {
                slen[nseg - 1] += Cg;
            } else {
                soff[nseg] = off;
                slen[nseg++] = Cg;
            }
            if (off + C > reach) reach = off + C;
        }
    cp.floats = (cp.rows - 1) * C + reach;
    if (cp.floats < cp.sh * cp.sw * cp.plane) cp.floats = cp.sh * cp.sw * cp.plane;
    float *buf = alloc_f(cp.floats), *work = xmalloc((size_t)(cp.rows * Og) * sizeof(float));
    const int64_t oes = (int64_t)sim_dtype_size(out->dtype);
    for (int64_t n = 0; n < N; n++) {
        if (n) memset(buf, 0, (size_t)cp.floats * sizeof(float));
        conv_fill_planes(buf, &cp, in, n, padding);
        for (int64_t g = 0; g < groups; g++) {
            simblas_mat Bg = {wt + g * Og, SIM_F32, O, 1, 0};
            simblas_mat Cm = {work, SIM_F32, Og, 1, 0};
            if (bf) /* the sums start from the bias: no pass over the tiles to add it after */
                for (int64_t q = 0; q < cp.rows; q++) memcpy(work + q * Og, bf + g * Og, (size_t)Og * sizeof(float));
            simblas_gemm_segs(cp.rows, Og, KK, buf + g * Cg, C, nseg, soff, slen, &Bg, bf != NULL, &Cm);
            /* rows q = oh * Wq + ow with ow < OW into the output, rounded once */
            sim_view src = *out, dst = *out;
            src.base = (char *)work;
            src.dtype = SIM_F32;
            src.shape[0] = dst.shape[0] = 1;
            src.shape[3] = dst.shape[3] = Og;
            src.strides[0] = 0;
            src.strides[1] = cp.Wq * Og;
            src.strides[2] = Og;
            src.strides[3] = 1;
            dst.base = out->base + (n * out->strides[0] + g * Og * out->strides[3]) * oes;
            copy_view(&src, &dst);
        }
    }
    sim_corrupt_output(out); /* debug mode only (X1SIM_CORRUPT / TH1SIM_CORRUPT) */
    free(buf);
    free(work);
    free(soff);
    free(wt);
    free(bf);
    free(hin.own);
    return SIM_OK;
}

/* v's elements in row-major order as float: v's own memory when it is dense
 * float32, else a gathered copy (*own, to free). */
static const float *dense_f(const sim_view *v, float **own) {
    *own = NULL;
    if (v->dtype == SIM_F32 && sim_is_contiguous(v)) return (const float *)v->base;
    return *own = gather_or_die(v);
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
    float *own;
    const float *X = dense_f(in, &own);
    float *Y = alloc_f(N * OH * OW * C);
    int64_t *I = xmalloc((size_t)(N * OH * OW * C) * sizeof(int64_t));
    /* one output pixel at a time, all channels together: the window visited
     * in the same order for every channel as a per-channel loop would */
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                /* PyTorch's rule: start at the first in-bounds element,
                 * take anything larger, and let NaN win. */
                int64_t h0 = oh * stride[0] - pad[0], w0 = ow * stride[1] - pad[1];
                int64_t fh = h0, fw = w0;
                while (fh < 0) fh += dil[0];
                while (fw < 0) fw += dil[1];
                int64_t o = ((n * OH + oh) * OW + ow) * C;
                float *y = Y + o;
                int64_t *ix = I + o;
                for (int64_t c = 0; c < C; c++) {
                    y[c] = -INFINITY;
                    ix[c] = fh * W + fw;
                }
                for (int64_t kh = 0; kh < k[0]; kh++) {
                    int64_t ih = h0 + kh * dil[0];
                    if (ih < 0 || ih >= H) continue;
                    for (int64_t kw = 0; kw < k[1]; kw++) {
                        int64_t iw = w0 + kw * dil[1];
                        if (iw < 0 || iw >= W) continue;
                        const float *xr = X + ((n * H + ih) * W + iw) * C;
                        const int64_t arg = ih * W + iw;
                        for (int64_t c = 0; c < C; c++) {
                            float v = xr[c];
                            int take = v > y[c] || v != v;
                            y[c] = take ? v : y[c];
                            ix[c] = take ? arg : ix[c];
                        }
                    }
                }
            }
    sim_scatter(Y, out);
    if (indices->present) scatter_i(I, indices);
    free(own); free(Y); free(I);
    return SIM_OK;
}

/* PyTorch's average-pool window of output (oh, ow): rows [hs, he), columns
 * [ws, we) clipped to the input, and its divisor. */
static int64_t avg_window(int64_t oh, int64_t ow, const int64_t *k, const int64_t *stride, const int64_t *pad,
                          int64_t H, int64_t W, int count_include_pad, int64_t divisor_override, int64_t *hs,
                          int64_t *he, int64_t *ws, int64_t *we) {
    /* the pool size counts padding up to the padded edge, then the window is clipped */
    *hs = oh * stride[0] - pad[0];
    *ws = ow * stride[1] - pad[1];
    *he = *hs + k[0] < H + pad[0] ? *hs + k[0] : H + pad[0];
    *we = *ws + k[1] < W + pad[1] ? *ws + k[1] : W + pad[1];
    int64_t pool = (*he - *hs) * (*we - *ws);
    if (*hs < 0) *hs = 0;
    if (*ws < 0) *ws = 0;
    if (*he > H) *he = H;
    if (*we > W) *we = W;
    return divisor_override ? divisor_override : count_include_pad ? pool : (*he - *hs) * (*we - *ws);
}

/* s[c] = sum of channel c over rows [hs, he) and columns [ws, we) of image n
 * (NHWC), added in window order */
static void window_sum(float *s, const float *X, int64_t n, int64_t H, int64_t W, int64_t C, int64_t hs,
                       int64_t he, int64_t ws, int64_t we) {
    for (int64_t c = 0; c < C; c++) s[c] = 0.0f;
    for (int64_t ih = hs; ih < he; ih++)
        for (int64_t iw = ws; iw < we; iw++) {
            const float *xr = X + ((n * H + ih) * W + iw) * C;
            for (int64_t c = 0; c < C; c++) s[c] += xr[c];
        }
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
    float *own;
    const float *X = dense_f(in, &own);
    float *Y = alloc_f(N * OH * OW * C);
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t hs, he, ws, we;
                int64_t div = avg_window(oh, ow, k, stride, pad, H, W, count_include_pad, divisor_override,
                                         &hs, &he, &ws, &we);
                float *y = Y + ((n * OH + oh) * OW + ow) * C;
                window_sum(y, X, n, H, W, C, hs, he, ws, we);
                if (div) {
                    float d = (float)div;
                    for (int64_t c = 0; c < C; c++) y[c] = y[c] / d;
                } else {
                    for (int64_t c = 0; c < C; c++) y[c] = NAN;
                }
            }
    sim_scatter(Y, out);
    free(own);
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
    if (OH == 1 && OW == 1) {
        /* one window covering the plane: its mean, summed in double where
         * the window loop would add in float (PyTorch runs a mean here too) */
        double *acc = alloc_d(N * C);
        float *Y = alloc_f(N * C);
        sum_walk(in, 0x6u, acc); /* over H and W */
        for (int64_t i = 0; i < N * C; i++) Y[i] = (float)(acc[i] / (double)(H * W));
        sim_scatter(Y, out);
        free(acc);
        free(Y);
        return SIM_OK;
    }
    float *own;
    const float *X = dense_f(in, &own);
    float *Y = alloc_f(N * OH * OW * C);
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t hs = (oh * H) / OH, he = ((oh + 1) * H + OH - 1) / OH;
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t ws = (ow * W) / OW, we = ((ow + 1) * W + OW - 1) / OW;
                float *y = Y + ((n * OH + oh) * OW + ow) * C, area = (float)((he - hs) * (we - ws));
                window_sum(y, X, n, H, W, C, hs, he, ws, we);
                for (int64_t c = 0; c < C; c++) y[c] = y[c] / area;
            }
        }
    sim_scatter(Y, out);
    free(own);
    free(Y);
    return SIM_OK;
}

/* ------------------------------------------------------ conv/pool backward */

sim_status simk_conv2d_backward_nhwc(const char *fn, const char *kernel, const sim_view *dy, const sim_view *x,
                                     const sim_view *w, const int64_t *stride, const int64_t *padding,
                                     const int64_t *dilation, int64_t groups, const sim_view *dx,
                                     const sim_view *dw, const sim_view *db) {
    if (dy->ndim != 4 || x->ndim != 4 || w->ndim != 4)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "grad_output, input and weight must be 4-D (NHWC, OHWI)");
    int64_t N = x->shape[0], H = x->shape[1], W = x->shape[2], C = x->shape[3];
    int64_t O = w->shape[0], KH = w->shape[1], KW = w->shape[2], Cg = w->shape[3];
    if (groups < 1 || C % groups || O % groups || Cg * groups != C)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "channels: input C=%lld, weight [O=%lld, I/g=%lld], "
                        "groups=%lld do not agree", (long long)C, (long long)O, (long long)Cg, (long long)groups);
    for (int i = 0; i < 2; i++)
        if (stride[i] < 1 || padding[i] < 0 || dilation[i] < 1)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "stride and dilation must be >= 1, padding >= 0");
    int64_t OH = simk_pool_out(H, KH, stride[0], padding[0], dilation[0], 0);
    int64_t OW = simk_pool_out(W, KW, stride[1], padding[1], dilation[1], 0);
    if (OH <= 0 || OW <= 0) return sim_fail(SIM_E_INVALID_VALUE, fn, "kernel larger than padded input");
    sim_status st;
    if ((st = check_out_shape4(fn, dy, N, OH, OW, O))) return st;
    if (dx->present && (st = check_out_shape4(fn, dx, N, H, W, C))) return st;
    if (dw->present && (st = check_out_shape4(fn, dw, O, KH, KW, Cg))) return st;
    if (db->present && (db->ndim != 1 || db->shape[0] != O))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "grad_bias must be [%lld]", (long long)O);
    const sim_view *all[6] = {dy, x, w, dx, dw, db};
    for (int i = 0; i < 6; i++)
        if (all[i]->present && all[i]->dtype != x->dtype) return sim_fail(SIM_E_UNSUPPORTED, fn, "mixed dtypes");
    if ((st = need_float_dt(fn, "input", x))) return st;
    if (!dx->present && !dw->present && !db->present)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "no gradient requested");
    if ((st = sim_launch(kernel, fn))) return st;
    int64_t Og = O / groups, KK = KH * KW * Cg, P = OH * OW;
    float *DY = gather_or_die(dy);
    if (db->present) {
        double *acc = calloc((size_t)O, sizeof(double));
        if (!acc) abort();
        for (int64_t i = 0; i < N * P; i++)
            for (int64_t o = 0; o < O; o++) acc[o] += DY[i * O + o];
        float *B = alloc_f(O);
        for (int64_t o = 0; o < O; o++) B[o] = (float)acc[o];
        sim_scatter(B, db);
        free(acc);
        free(B);
    }
    float *X = dw->present ? gather_or_die(x) : NULL, *Wt = dx->present ? gather_or_die(w) : NULL;
    float *DW = dw->present ? alloc_f(O * KK) : NULL, *DX = dx->present ? alloc_f(N * H * W * C) : NULL;
    float *col = alloc_f(P * KK);
    for (int64_t g = 0; g < groups; g++)
        for (int64_t n = 0; n < N; n++) {
            /* this image's gradient for group g as [P, Og] (row stride O) */
            simblas_mat dyg = {DY + n * P * O + g * Og, SIM_F32, O, 1, 0};
            if (DW) {
                for (int64_t oh = 0; oh < OH; oh++)
                    for (int64_t ow = 0; ow < OW; ow++) {
                        float *crow = col + (oh * OW + ow) * KK;
                        for (int64_t kh = 0; kh < KH; kh++) {
                            int64_t ih = oh * stride[0] - padding[0] + kh * dilation[0];
                            for (int64_t kw = 0; kw < KW; kw++) {
                                int64_t iw = ow * stride[1] - padding[1] + kw * dilation[1];
                                float *d = crow + (kh * KW + kw) * Cg;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) memset(d, 0, (size_t)Cg * sizeof(float));
                                else memcpy(d, X + ((n * H + ih) * W + iw) * C + g * Cg, (size_t)Cg * sizeof(float));
                            }
                        }
                    }
                /* dW_g[Og, KK] += dy_g^T @ col */
                simblas_mat a = {dyg.base, SIM_F32, 1, O, 0}, b = {col, SIM_F32, KK, 1, 0};
                simblas_mat c = {DW + g * Og * KK, SIM_F32, KK, 1, 0};
                simblas_gemm(1, Og, KK, P, 1.0f, &a, &b, 1.0f, &c, &c);
            }
            if (DX) {
                /* dcol[P, KK] = dy_g @ W_g, then added back where each column came from */
                simblas_mat b = {Wt + g * Og * KK, SIM_F32, KK, 1, 0}, c = {col, SIM_F32, KK, 1, 0};
                simblas_gemm(1, P, KK, Og, 1.0f, &dyg, &b, 0.0f, NULL, &c);
                for (int64_t oh = 0; oh < OH; oh++)
                    for (int64_t ow = 0; ow < OW; ow++) {
                        const float *crow = col + (oh * OW + ow) * KK;
                        for (int64_t kh = 0; kh < KH; kh++) {
                            int64_t ih = oh * stride[0] - padding[0] + kh * dilation[0];
                            if (ih < 0 || ih >= H) continue;
                            for (int64_t kw = 0; kw < KW; kw++) {
                                int64_t iw = ow * stride[1] - padding[1] + kw * dilation[1];
                                if (iw < 0 || iw >= W) continue;
                                float *d = DX + ((n * H + ih) * W + iw) * C + g * Cg;
                                const float *s = crow + (kh * KW + kw) * Cg;
                                for (int64_t ci = 0; ci < Cg; ci++) d[ci] += s[ci];
                            }
                        }
                    }
            }
        }
    if (DW) sim_scatter(DW, dw);
    if (DX) sim_scatter(DX, dx);
    free(DY); free(X); free(Wt); free(DW); free(DX); free(col);
    return SIM_OK;
}

/* dx's geometry against dy's: same N and C; returns H, W, OH, OW */
static sim_status pool_grad_shapes(const char *fn, const sim_view *dy, const sim_view *dx, int64_t *H,
                                   int64_t *W, int64_t *OH, int64_t *OW) {
    if (dy->ndim != 4 || dx->ndim != 4)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "grad_output and grad_input must be 4-D NHWC");
    if (dy->shape[0] != dx->shape[0] || dy->shape[3] != dx->shape[3])
        return sim_fail(SIM_E_INVALID_VALUE, fn, "grad_output and grad_input differ in N or C");
    if (dy->dtype != dx->dtype) return sim_fail(SIM_E_UNSUPPORTED, fn, "mixed dtypes");
    *H = dx->shape[1];
    *W = dx->shape[2];
    *OH = dy->shape[1];
    *OW = dy->shape[2];
    return need_float_dt(fn, "grad_output", dy);
}

sim_status simk_max_pool2d_backward_nhwc(const char *fn, const char *kernel, const sim_view *dy,
                                         const sim_view *indices, const sim_view *dx) {
    int64_t H = 0, W = 0, OH = 0, OW = 0;
    sim_status st;
    if ((st = pool_grad_shapes(fn, dy, dx, &H, &W, &OH, &OW))) return st;
    if (!sim_same_shape(indices, dy) || indices->dtype != SIM_I64)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "indices must be int64 shaped like grad_output");
    int64_t N = dx->shape[0], C = dx->shape[3], m = sim_numel(dy);
    int64_t *I = gather_i_or_die(indices);
    for (int64_t i = 0; i < m; i++)
        if (I[i] < 0 || I[i] >= H * W) {
            long long bad = (long long)I[i];
            free(I);
            return sim_fail(SIM_E_DATA, fn, "index %lld out of range [0, %lld)", bad, (long long)(H * W));
        }
    if ((st = sim_launch(kernel, fn))) {
        free(I);
        return st;
    }
    float *own, *R = alloc_f(N * H * W * C);
    const float *G = dense_f(dy, &own);
    for (int64_t n = 0, i = 0; n < N; n++)
        for (int64_t p = 0; p < OH * OW; p++)
            for (int64_t c = 0; c < C; c++, i++) R[(n * H * W + I[i]) * C + c] += G[i];
    sim_scatter(R, dx);
    free(I); free(own); free(R);
    return SIM_OK;
}

sim_status simk_avg_pool2d_backward_nhwc(const char *fn, const char *kernel, const sim_view *dy, const int64_t *k,
                                         const int64_t *stride, const int64_t *pad, int count_include_pad,
                                         int64_t divisor_override, const sim_view *dx) {
    int64_t H = 0, W = 0, OH = 0, OW = 0;
    sim_status st;
    if ((st = pool_grad_shapes(fn, dy, dx, &H, &W, &OH, &OW))) return st;
    if ((st = sim_launch(kernel, fn))) return st;
    int64_t N = dx->shape[0], C = dx->shape[3];
    float *own, *R = alloc_f(N * H * W * C), *g = alloc_f(C);
    const float *G = dense_f(dy, &own);
    /* each input element gathers its share from the windows covering it, in (oh, ow) order */
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t hs, he, ws, we;
                int64_t div = avg_window(oh, ow, k, stride, pad, H, W, count_include_pad, divisor_override,
                                         &hs, &he, &ws, &we);
                const float *gr = G + ((n * OH + oh) * OW + ow) * C;
                for (int64_t c = 0; c < C; c++) g[c] = gr[c] / (float)div;
                for (int64_t ih = hs; ih < he; ih++)
                    for (int64_t iw = ws; iw < we; iw++) {
                        float *r = R + ((n * H + ih) * W + iw) * C;
                        for (int64_t c = 0; c < C; c++) r[c] += g[c];
                    }
            }
    sim_scatter(R, dx);
    free(own);
    free(R);
    free(g);
    return SIM_OK;
}

static void share_f(const void *vc, float *o, const float *const *x, int64_t n) {
    const float area = *(const float *)vc, *g = x[0];
    for (int64_t i = 0; i < n; i++) o[i] = 0.0f + g[i] / area; /* as accumulated into zeros */
}

sim_status simk_adaptive_avg_pool2d_backward_nhwc(const char *fn, const char *kernel, const sim_view *dy,
                                                  const sim_view *dx) {
    int64_t H = 0, W = 0, OH = 0, OW = 0;
    sim_status st;
    if ((st = pool_grad_shapes(fn, dy, dx, &H, &W, &OH, &OW))) return st;
    if ((st = sim_launch(kernel, fn))) return st;
    int64_t N = dx->shape[0], C = dx->shape[3];
    if (OH == 1 && OW == 1) { /* every input element gets its plane's share */
        sim_view g1 = *dy;
        g1.shape[1] = H;
        g1.shape[2] = W;
        g1.strides[1] = g1.strides[2] = 0;
        const sim_view *gv = &g1;
        float area = (float)(H * W);
        ew_float(dx, 1, &gv, share_f, &area);
        sim_corrupt_output(dx);
        return SIM_OK;
    }
    float *own, *R = alloc_f(N * H * W * C), *g = alloc_f(C);
    const float *G = dense_f(dy, &own);
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t hs = (oh * H) / OH, he = ((oh + 1) * H + OH - 1) / OH;
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t ws = (ow * W) / OW, we = ((ow + 1) * W + OW - 1) / OW;
                float area = (float)((he - hs) * (we - ws));
                const float *gr = G + ((n * OH + oh) * OW + ow) * C;
                for (int64_t c = 0; c < C; c++) g[c] = gr[c] / area;
                for (int64_t ih = hs; ih < he; ih++)
                    for (int64_t iw = ws; iw < we; iw++) {
                        float *r = R + ((n * H + ih) * W + iw) * C;
                        for (int64_t c = 0; c < C; c++) r[c] += g[c];
                    }
            }
        }
    sim_scatter(R, dx);
    free(own);
    free(R);
    free(g);
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
    int64_t N = in->shape[0], inner = 1;
    for (int d = 2; d < in->ndim; d++) inner *= in->shape[d];
    float *X = gather_or_die(in);
    float *Wv = w->present ? gather_or_die(w) : NULL, *Bv = b->present ? gather_or_die(b) : NULL;
    float *Mv = gather_or_die(mean), *Vv = gather_or_die(var);
    for (int64_t c = 0; c < C; c++) Vv[c] = 1.0f / sqrtf(Vv[c] + (float)eps); /* now 1/std */
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            float *x = X + (n * C + c) * inner, m = Mv[c], inv = Vv[c];
            for (int64_t i = 0; i < inner; i++) x[i] = (x[i] - m) * inv;
            if (Wv) for (int64_t i = 0; i < inner; i++) x[i] *= Wv[c];
            if (Bv) for (int64_t i = 0; i < inner; i++) x[i] += Bv[c];
        }
    sim_scatter(X, out);
    free(X); free(Wv); free(Bv); free(Mv); free(Vv);
    return SIM_OK;
}

/* One row: out = (x - mean) * rstd (in double, rounded once) * w + b. */
static void layer_norm_row(const float *x, float *o, int64_t n, const float *W, const float *B, double eps,
                           float *mean, float *rstd) {
    double mu = sum_d(x, n) / (double)n;
    /* the statistics in double, the reciprocal std as PyTorch forms it (in
     * float, eps added in float): a constant row then saves PyTorch's rstd */
    float var = (float)(sqdev_d(x, n, mu) / (double)n);
    double rs = 1.0f / sqrtf(var + (float)eps);
    for (int64_t i = 0; i < n; i++) o[i] = (float)((x[i] - mu) * rs);
    if (W) for (int64_t i = 0; i < n; i++) o[i] *= W[i];
    if (B) for (int64_t i = 0; i < n; i++) o[i] += B[i];
    *mean = (float)mu;
    *rstd = (float)rs;
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
    float *Wv = w->present ? gather_or_die(w) : NULL, *Bv = b->present ? gather_or_die(b) : NULL;
    float *Mo = alloc_f(outer), *Ro = alloc_f(outer);
    const sim_view *outs[3] = {out, mean, rstd};
    held hx;
    const sim_view *x = hold(&hx, in, outs, 3);
    int k = (int)norm_ndim, hd = in->ndim - k;
    rowed rx, ro;
    rows_open(&rx, x, k, 0);
    rows_open(&ro, out, k, 1);
    sim_view xh = head_view(&rx.v, hd), oh = head_view(&ro.v, hd);
    const sim_view *ops[2] = {&oh, &xh};
    int64_t xes = (int64_t)sim_dtype_size(x->dtype), oes = (int64_t)sim_dtype_size(out->dtype), r = 0;
    const int direct = out->dtype == SIM_F32 && ro.rs == 1;
    float *xb = alloc_f(inner), *ob = alloc_f(inner);
    sim_iter it;
    if (inner > 0 && sim_iter_views(&it, 2, ops))
        do {
            for (int64_t j = 0; j < it.n; j++, r++) {
                char *po = it.p[0] + j * it.s[0] * oes;
                const float *xr = ld_f(xb, it.p[1] + j * it.s[1] * xes, x->dtype, rx.rs, inner);
                float *o = direct ? (float *)po : ob;
                layer_norm_row(xr, o, inner, Wv, Bv, eps, &Mo[r], &Ro[r]);
                if (!direct) cvt_from_f(po, out->dtype, ro.rs, ob, inner);
            }
        } while (sim_iter_next(&it));
    rows_close(&ro);
    rows_close(&rx);
    free(hx.own);
    sim_corrupt_output(out);
    if (mean->present) sim_scatter(Mo, mean);
    if (rstd->present) sim_scatter(Ro, rstd);
    free(Wv); free(Bv); free(Mo); free(Ro); free(xb); free(ob);
    return SIM_OK;
}

sim_status simk_reduce_dims(const char *fn, const sim_view *in, const int64_t *dims, int64_t n, int keepdim,
                            const sim_view *out, uint32_t *mask) {
    if (n < 0 || (n > 0 && !dims)) return sim_fail(SIM_E_INVALID_VALUE, fn, "bad dim list");
    uint32_t m = 0;
    const int nd1 = in->ndim ? in->ndim : 1; /* a 0-D input takes dim 0 and -1, as in PyTorch */
    for (int64_t i = 0; i < n; i++) {
        int64_t d = dims[i] < 0 ? dims[i] + nd1 : dims[i];
        if (d < 0 || d >= nd1)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "dim %lld out of range for %d-D input", (long long)dims[i],
                            in->ndim);
        if (m & (1u << d)) return sim_fail(SIM_E_INVALID_VALUE, fn, "dim %lld appears twice", (long long)dims[i]);
        m |= 1u << d;
    }
    if (n == 0) m = (1u << in->ndim) - 1u;
    int expect_nd = 0;
    for (int d = 0; d < in->ndim; d++)
        if (keepdim || !(m & (1u << d))) {
            int64_t want = (m & (1u << d)) ? 1 : in->shape[d];
            if (expect_nd >= out->ndim || out->shape[expect_nd] != want)
                return sim_fail(SIM_E_INVALID_VALUE, fn, "out shape does not match the reduction");
            expect_nd++;
        }
    if (expect_nd != out->ndim)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "out has %d dims, expected %d", out->ndim, expect_nd);
    *mask = m;
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
    double *acc = alloc_d(kept);
    sum_walk(in, reduce, acc);
    float *R = alloc_f(kept);
    for (int64_t i = 0; i < kept; i++)
        R[i] = (float)(mean ? (count ? acc[i] / (double)count : NAN) : acc[i]);
    sim_scatter(R, out);
    free(acc);
    free(R);
    return SIM_OK;
}

/* acc[kept] += the int64 values of `in` over the reduced dims (wrapping, as PyTorch's int64 sums) */
static void isum_walk(const sim_view *in, uint32_t reduce, int64_t *acc) {
    sim_iter it;
    if (!reduce_iter(&it, in, reduce, (double *)acc)) return; /* (only the kept index rides along) */
    int64_t es = (int64_t)sim_dtype_size(in->dtype), buf[BLK];
    do {
        int64_t o = it.p[1] - (char *)acc;
        for (int64_t j = 0; j < it.n; j += BLK) {
            int64_t m = imin(BLK, it.n - j);
            const int64_t *x = ld_i(buf, it.p[0] + j * it.s[0] * es, in->dtype, it.s[0], m);
            const int64_t step = it.s[1], at = o + j * step;
            for (int64_t i = 0; i < m; i++) acc[at + i * step] = (int64_t)((uint64_t)acc[at + i * step] + (uint64_t)x[i]);
        }
    } while (sim_iter_next(&it));
}

sim_status simk_reduce_int(const char *fn, const char *kernel, const sim_view *in, uint32_t reduce,
                           const sim_view *out) {
    int64_t kept = 1;
    for (int d = 0; d < in->ndim; d++)
        if (!(reduce & (1u << d))) kept *= in->shape[d];
    if (sim_numel(out) != kept)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "output has %lld elements, the reduction gives %lld",
                        (long long)sim_numel(out), (long long)kept);
    if (simk_is_float(in->dtype) || out->dtype != SIM_I64)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "an integer or bool sum reads integers and writes int64, got %s -> %s",
                        sim_dtype_name(in->dtype), sim_dtype_name(out->dtype));
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    int64_t *acc = calloc((size_t)(kept > 0 ? kept : 1), sizeof(int64_t));
    if (!acc) abort();
    isum_walk(in, reduce, acc);
    sim_view t = dense_over(acc, out, SIM_I64);
    copy_any(&t, out);
    free(acc);
    return SIM_OK;
}

/* counts of the elements that decide any (nonzero) or all (zero) */
static void red_count(void *ctx, const float *x, int64_t n, int64_t o, int64_t step) {
    double *acc = ((double **)ctx)[0];
    const int all = ((double **)ctx)[1] != NULL;
    for (int64_t i = 0; i < n; i++) acc[o + i * step] += all ? x[i] == 0 : x[i] != 0;
}

sim_status simk_any_all(const char *fn, const char *kernel, const sim_view *in, uint32_t reduce, int all,
                        const sim_view *out) {
    int64_t kept = 1;
    for (int d = 0; d < in->ndim; d++)
        if (!(reduce & (1u << d))) kept *= in->shape[d];
    if (sim_numel(out) != kept)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "output has %lld elements, the reduction gives %lld",
                        (long long)sim_numel(out), (long long)kept);
    if (out->dtype != SIM_BOOL && !(out->dtype == SIM_U8 && in->dtype == SIM_U8))
        return sim_fail(SIM_E_UNSUPPORTED, fn, "any/all write bool (uint8 for a uint8 input), not %s",
                        sim_dtype_name(out->dtype));
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    /* an element counts when nonzero (any) or zero (all), NaN being nonzero;
     * integers stay nonzero in float */
    double *acc = alloc_d(kept);
    double *ctx[2] = {acc, all ? acc : NULL};
    reduce_walk(in, reduce, acc, red_count, ctx);
    int64_t *r = xmalloc((size_t)(kept > 0 ? kept : 1) * sizeof(int64_t));
    for (int64_t i = 0; i < kept; i++) r[i] = all ? acc[i] == 0 : acc[i] != 0;
    scatter_i(r, out);
    free(r);
    free(acc);
    return SIM_OK;
}

/* The reduced dim's geometry: rows of D elements, `inner` apart, `outer` x `inner` of them. */
static sim_status softmax_geometry(const char *fn, const sim_view *in, int64_t *dim, int64_t *D,
                                   int64_t *outer, int64_t *inner) {
    int nd = in->ndim;
    if (nd == 0) *dim = 0;
    else if (*dim < 0) *dim += nd;
    if (nd > 0 && (*dim < 0 || *dim >= nd))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "dim out of range for %d-D input", nd);
    *D = nd ? in->shape[*dim] : 1;
    *inner = *outer = 1;
    for (int d = 0; d < nd; d++) {
        if (d < *dim) *outer *= in->shape[d];
        else if (d > *dim) *inner *= in->shape[d];
    }
    return SIM_OK;
}

#ifdef FE_N
/* exp(x[i] - mx) into o[i] (o NULL: not kept) for i < n, with softmax's
 * float exp, and their sum in double (element i in lane i % FE_N, then the
 * lanes pairwise): softmax's two passes over a row in one. */
static double exp_shift_sum(const float *x, float mx, float *o, int64_t n) {
    vd acc[2] = {vd_set1(0.0), vd_set1(0.0)};
    const fe shift = fe_set1(mx);
    int64_t i = 0;
    for (; i + FE_N <= n; i += FE_N) {
        fe e = fe_exp_nonpos(fe_sub(fe_load(x + i), shift));
        if (o) fe_store(o + i, e);
        acc[0] = vd_add(acc[0], vf_widen(fe_lo(e)));
        acc[1] = vd_add(acc[1], vf_widen(fe_hi(e)));
    }
    if (i < n) { /* the tail as a block padded with -inf, whose exp adds 0 */
        float t[FE_N];
        for (int k = 0; k < FE_N; k++) t[k] = -INFINITY;
        memcpy(t, x + i, (size_t)(n - i) * sizeof(float));
        fe e = fe_exp_nonpos(fe_sub(fe_load(t), shift));
        fe_store(t, e);
        acc[0] = vd_add(acc[0], vf_widen(fe_lo(e)));
        acc[1] = vd_add(acc[1], vf_widen(fe_hi(e)));
        if (o) memcpy(o + i, t, (size_t)(n - i) * sizeof(float));
    }
    return vd_hsum(vd_add(acc[0], acc[1]));
}
#else
static double exp_shift_sum(const float *x, float mx, float *o, int64_t n) {
    double sum = 0;
    float e[BLK];
    for (int64_t j = 0; j < n; j += BLK) {
        int64_t m = imin(BLK, n - j);
        for (int64_t i = 0; i < m; i++) e[i] = x[j + i] - mx;
        exp_inplace(e, m);
        if (o) memcpy(o + j, e, (size_t)m * sizeof(float));
        sum += sum_d(e, m);
    }
    return sum;
}
#endif

static void softmax_row(const float *x, float *o, int64_t D, unsigned flags) {
    float mx = max_f(x, D, -INFINITY);
    if ((flags & SIMK_SOFTMAX_SAFE) && mx == -INFINITY) { /* a fully masked row is all zeros */
        for (int64_t j = 0; j < D; j++) o[j] = 0.0f;
        return;
    }
    if (flags & SIMK_SOFTMAX_LOG) {
        float lse = logf((float)exp_shift_sum(x, mx, NULL, D));
        for (int64_t j = 0; j < D; j++) o[j] = x[j] - mx - lse;
        return;
    }
    double sum = exp_shift_sum(x, mx, o, D);
    if (flags & SIMK_SOFTMAX_GENERIC) {
        /* the vendor's generic path divides */
        float s = (float)sum;
        for (int64_t j = 0; j < D; j++) o[j] = o[j] / s;
    } else {
        float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j < D; j++) o[j] = o[j] * inv;
    }
}

#ifdef FE_N
/* softmax_row for SMR rows at once, D a multiple of FE_N: a short row is a
 * chain of dependent steps (max, exps, sum, division), which several
 * independent rows fill.  The same arithmetic in the same order as
 * softmax_row. */
#define SMR 4
static void softmax_rows4(const float *x, int64_t xs, float *o, int64_t os, int64_t D, unsigned flags) {
    fe mv[SMR];
    for (int r = 0; r < SMR; r++) mv[r] = fe_set1(-INFINITY);
    for (int64_t i = 0; i < D; i += FE_N)
        for (int r = 0; r < SMR; r++) mv[r] = fe_gt_select(fe_load(x + r * xs + i), mv[r]);
    float mx[SMR]; /* NaN is never greater, so never in mv: the maximum of the rest */
    for (int r = 0; r < SMR; r++) mx[r] = fe_hmax(mv[r]);
    vd acc[SMR][2];
    for (int r = 0; r < SMR; r++) acc[r][0] = acc[r][1] = vd_set1(0.0);
    const int keep = !(flags & SIMK_SOFTMAX_LOG);
    for (int64_t i = 0; i < D; i += FE_N)
        for (int r = 0; r < SMR; r++) {
            fe e = fe_exp_nonpos(fe_sub(fe_load(x + r * xs + i), fe_set1(mx[r])));
            if (keep) fe_store(o + r * os + i, e);
            acc[r][0] = vd_add(acc[r][0], vf_widen(fe_lo(e)));
            acc[r][1] = vd_add(acc[r][1], vf_widen(fe_hi(e)));
        }
    for (int r = 0; r < SMR; r++) {
        const float *xr = x + r * xs;
        float *or = o + r * os;
        if ((flags & SIMK_SOFTMAX_SAFE) && mx[r] == -INFINITY) {
            for (int64_t j = 0; j < D; j++) or[j] = 0.0f;
            continue;
        }
        const double sum = vd_hsum(vd_add(acc[r][0], acc[r][1]));
        if (flags & SIMK_SOFTMAX_LOG) {
            const float m = mx[r], lse = logf((float)sum);
            for (int64_t j = 0; j < D; j++) or[j] = xr[j] - m - lse;
        } else if (flags & SIMK_SOFTMAX_GENERIC) {
            const float sf = (float)sum;
            for (int64_t j = 0; j < D; j++) or[j] = or[j] / sf;
        } else {
            const fe inv = fe_set1((float)(1.0 / sum));
            for (int64_t j = 0; j < D; j += FE_N) fe_store(or + j, fe_mul(fe_load(or + j), inv));
        }
    }
}
#endif

/* softmax of rows of D contiguous floats (rows xs / os floats apart) */
static void softmax_rows(const float *x, int64_t xs, float *o, int64_t os, int64_t nrows, int64_t D,
                         unsigned flags) {
    int64_t r = 0;
#ifdef FE_N
    /* rows apart (or in place), so no row's output overwrites a row still to be read */
    if (D % FE_N == 0 && D <= 256 && llabs(os) >= D && (x == o ? xs == os : llabs(xs) >= D))
        for (; r + SMR <= nrows; r += SMR) softmax_rows4(x + r * xs, xs, o + r * os, os, D, flags);
#endif
    for (; r < nrows; r++) softmax_row(x + r * xs, o + r * os, D, flags);
}

/* Runs fn on every row along dim: the nin inputs' rows as float, out's row to write. */
typedef void (*dimrow_fn)(const void *ctx, const float *const *x, float *o, int64_t D);

static void along_dim(const sim_view *out, int nin, const sim_view *const *ins, int64_t dim, dimrow_fn fn,
                      const void *ctx) {
    held h[2];
    const sim_view *v[3] = {out};
    for (int k = 0; k < nin; k++) v[k + 1] = hold(&h[k], ins[k], &out, 1);
    int nd = out->ndim;
    int64_t D = nd ? out->shape[dim] : 1, rs[3], es[3];
    sim_view heads[3];
    const sim_view *ops[3];
    for (int k = 0; k <= nin; k++) {
        rs[k] = nd ? v[k]->strides[dim] : 0;
        es[k] = (int64_t)sim_dtype_size(v[k]->dtype);
        heads[k] = nd ? drop_dim(v[k], (int)dim) : *v[k];
        ops[k] = &heads[k];
    }
    float *buf = alloc_f((nin + 1) * D);
    const float *x[2];
    const int direct = out->dtype == SIM_F32 && rs[0] == 1;
    sim_iter it;
    if (D > 0 && sim_iter_views(&it, nin + 1, ops))
        do {
            for (int64_t j = 0; j < it.n; j++) {
                for (int k = 0; k < nin; k++)
                    x[k] = ld_f(buf + (k + 1) * D, it.p[k + 1] + j * it.s[k + 1] * es[k + 1], v[k + 1]->dtype,
                                rs[k + 1], D);
                char *po = it.p[0] + j * it.s[0] * es[0];
                float *o = direct ? (float *)po : buf;
                fn(ctx, x, o, D);
                if (!direct) cvt_from_f(po, out->dtype, rs[0], buf, D);
            }
        } while (sim_iter_next(&it));
    free(buf);
    for (int k = 0; k < nin; k++) free(h[k].own);
    sim_corrupt_output(out);
}

static void softmax_fn(const void *ctx, const float *const *x, float *o, int64_t D) {
    softmax_row(x[0], o, D, *(const unsigned *)ctx);
}

sim_status simk_softmax(const char *fn, const char *kernel, const sim_view *in, int64_t dim, unsigned flags,
                        const sim_view *out) {
    int64_t D, outer, inner;
    sim_status st;
    if ((st = softmax_geometry(fn, in, &dim, &D, &outer, &inner)) ||
        (st = simk_check_same(fn, "input", in, out)) || (st = need_float_dt(fn, "input", in)))
        return st;
    if ((st = sim_launch(kernel, fn))) return st;
    int nd = out->ndim;
    if (nd > 0 && in->dtype == SIM_F32 && out->dtype == SIM_F32 && in->strides[dim] == 1 && out->strides[dim] == 1) {
        /* float32 rows contiguous along dim: several rows at a time */
        held h;
        const sim_view *src = hold(&h, in, &out, 1);
        sim_view heads[2] = {drop_dim(out, (int)dim), drop_dim(src, (int)dim)};
        const sim_view *ops[2] = {&heads[0], &heads[1]};
        sim_iter it;
        if (D > 0 && sim_iter_views(&it, 2, ops))
            do softmax_rows((const float *)it.p[1], it.s[1], (float *)it.p[0], it.s[0], it.n, D, flags);
            while (sim_iter_next(&it));
        free(h.own);
        sim_corrupt_output(out);
        return SIM_OK;
    }
    along_dim(out, 1, &in, dim, softmax_fn, &flags);
    return SIM_OK;
}

static void softmax_bwd_fn(const void *ctx, const float *const *x, float *o, int64_t D) {
    const float *g = x[0], *y = x[1];
    if (*(const int *)ctx) { /* d log_softmax: g - exp(y) * sum(g) */
        float s = (float)sum_d(g, D), e[BLK];
        for (int64_t j = 0; j < D; j += BLK) {
            int64_t m = imin(BLK, D - j);
            exp_run(e, y + j, m);
            for (int64_t i = 0; i < m; i++) o[j + i] = g[j + i] - e[i] * s;
        }
    } else { /* d softmax: y * (g - sum(g * y)) */
        float s = (float)dot_d(g, y, D);
        for (int64_t j = 0; j < D; j++) o[j] = y[j] * (g[j] - s);
    }
}

#ifdef FE_N
/* softmax's gradient y * (g - sum(g * y)) for SMR rows of D floats (a
 * multiple of FE_N) at once, the dot products in double */
static void softmax_bwd_rows4(const float *g, int64_t gs, const float *y, int64_t ys, float *o, int64_t os,
                              int64_t D) {
    vd acc[SMR][2];
    for (int r = 0; r < SMR; r++) acc[r][0] = acc[r][1] = vd_set1(0.0);
    for (int64_t i = 0; i < D; i += FE_N)
        for (int r = 0; r < SMR; r++) {
            fe gv = fe_load(g + r * gs + i), yv = fe_load(y + r * ys + i);
            acc[r][0] = vd_fma(vf_widen(fe_lo(gv)), vf_widen(fe_lo(yv)), acc[r][0]);
            acc[r][1] = vd_fma(vf_widen(fe_hi(gv)), vf_widen(fe_hi(yv)), acc[r][1]);
        }
    for (int r = 0; r < SMR; r++) {
        const fe sr = fe_set1((float)vd_hsum(vd_add(acc[r][0], acc[r][1])));
        for (int64_t j = 0; j < D; j += FE_N)
            fe_store(o + r * os + j, fe_mul(fe_load(y + r * ys + j), fe_sub(fe_load(g + r * gs + j), sr)));
    }
}
#endif

sim_status simk_softmax_backward(const char *fn, const char *kernel, const sim_view *grad, const sim_view *y,
                                 int64_t dim, int log, const sim_view *out) {
    int64_t D, outer, inner;
    sim_status st;
    if ((st = softmax_geometry(fn, y, &dim, &D, &outer, &inner)) ||
        (st = simk_check_same(fn, "grad_output", grad, out)) || (st = simk_check_same(fn, "output", y, out)) ||
        (st = need_float_dt(fn, "output", y)))
        return st;
    if ((st = sim_launch(kernel, fn))) return st;
    const sim_view *ins[2] = {grad, y};
#ifdef FE_N
    int nd = out->ndim;
    if (!log && nd > 0 && D % FE_N == 0 && D <= 256 && grad->dtype == SIM_F32 && y->dtype == SIM_F32 &&
        out->dtype == SIM_F32 && grad->strides[dim] == 1 && y->strides[dim] == 1 && out->strides[dim] == 1) {
        /* float32 rows contiguous along dim: several rows at a time, row by row where rows overlap */
        held h[2];
        const sim_view *src[2] = {hold(&h[0], grad, &out, 1), hold(&h[1], y, &out, 1)};
        sim_view heads[3] = {drop_dim(out, (int)dim), drop_dim(src[0], (int)dim), drop_dim(src[1], (int)dim)};
        const sim_view *ops[3] = {&heads[0], &heads[1], &heads[2]};
        sim_iter it;
        if (sim_iter_views(&it, 3, ops))
            do {
                const float *gp = (const float *)it.p[1], *yp = (const float *)it.p[2];
                float *op = (float *)it.p[0];
                int64_t r = 0;
                if (llabs(it.s[0]) >= D && (gp == op ? it.s[1] == it.s[0] : llabs(it.s[1]) >= D) &&
                    (yp == op ? it.s[2] == it.s[0] : llabs(it.s[2]) >= D))
                    for (; r + SMR <= it.n; r += SMR)
                        softmax_bwd_rows4(gp + r * it.s[1], it.s[1], yp + r * it.s[2], it.s[2], op + r * it.s[0],
                                          it.s[0], D);
                for (; r < it.n; r++) {
                    const float *x[2] = {gp + r * it.s[1], yp + r * it.s[2]};
                    softmax_bwd_fn(&log, x, op + r * it.s[0], D);
                }
            } while (sim_iter_next(&it));
        free(h[0].own);
        free(h[1].own);
        sim_corrupt_output(out);
        return SIM_OK;
    }
#endif
    along_dim(out, 2, ins, dim, softmax_bwd_fn, &log);
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
    /* check every index before writing anything, then launch */
    int64_t n = sim_numel(indices), *idx = gather_i_or_die(indices);
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= V) {
            long long bad = (long long)idx[i];
            free(idx);
            return sim_fail(SIM_E_DATA, fn, "index %lld out of range [0, %lld)", bad, (long long)V);
        }
    sim_status lst = sim_launch(kernel, fn);
    if (lst) {
        free(idx);
        return lst;
    }
    held hw;
    const sim_view *wt = hold(&hw, weight, &out, 1);
    size_t es = sim_dtype_size(out->dtype);
    int64_t os = out->strides[out->ndim - 1];
    sim_view pos = head_view(out, out->ndim - 1); /* one output row per index */
    const sim_view *ops[1] = {&pos};
    sim_iter it;
    int64_t i = 0;
    if (D > 0 && sim_iter_views(&it, 1, ops))
        do {
            for (int64_t j = 0; j < it.n; j++, i++)
                copy_run(it.p[0] + j * it.s[0] * (int64_t)es, os,
                         wt->base + idx[i] * wt->strides[0] * (int64_t)es, wt->strides[1], D, es);
        } while (sim_iter_next(&it));
    free(hw.own);
    free(idx);
    return SIM_OK;
}

/* ---------------------------------------------------- training: reductions */

typedef struct {
    double *mean, *ss;
} var_ctx;

static void red_sqdev(void *vc, const float *x, int64_t n, int64_t o, int64_t step) {
    var_ctx *c = vc;
    if (step) {
        for (int64_t i = 0; i < n; i++) {
            double dv = x[i] - c->mean[o + i * step];
            c->ss[o + i * step] += dv * dv;
        }
    } else {
        c->ss[o] += sqdev_d(x, n, c->mean[o]);
    }
}

sim_status simk_var_mean(const char *fn, const char *kernel, const sim_view *in, uint32_t reduce,
                         double correction, const sim_view *var, const sim_view *mean) {
    int nd = in->ndim;
    int64_t kept = 1, count = 1;
    for (int d = 0; d < nd; d++) {
        if (reduce & (1u << d)) count *= in->shape[d];
        else kept *= in->shape[d];
    }
    sim_status st;
    if ((st = need_float_dt(fn, "self", in))) return st;
    const sim_view *outs[2] = {var, mean};
    for (int i = 0; i < 2; i++) {
        if (sim_numel(outs[i]) != kept)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "%s has %lld elements, the reduction gives %lld",
                            i ? "mean" : "var", (long long)sim_numel(outs[i]), (long long)kept);
        if (outs[i]->dtype != in->dtype)
            return sim_fail(SIM_E_UNSUPPORTED, fn, "%s is %s but the input is %s (mixed dtypes)",
                            i ? "mean" : "var", sim_dtype_name(outs[i]->dtype), sim_dtype_name(in->dtype));
    }
    if ((st = sim_launch(kernel, fn))) return st;
    /* two passes (mean, then squared deviations), both in double */
    var_ctx c = {alloc_d(kept), alloc_d(kept)};
    sum_walk(in, reduce, c.mean);
    for (int64_t k = 0; k < kept; k++) c.mean[k] = count ? c.mean[k] / (double)count : NAN;
    reduce_walk(in, reduce, c.ss, red_sqdev, &c);
    float *V = alloc_f(kept), *M = alloc_f(kept);
    double dof = (double)count - correction;
    for (int64_t k = 0; k < kept; k++) {
        M[k] = (float)c.mean[k];
        V[k] = (float)(dof > 0 ? c.ss[k] / dof : (c.ss[k] > 0 ? INFINITY : NAN));
    }
    sim_scatter(V, var);
    sim_scatter(M, mean);
    free(c.mean); free(c.ss); free(V); free(M);
    return SIM_OK;
}

typedef struct {
    float *mx;
    double *sum;
} lse_ctx;

static void red_max(void *vc, const float *x, int64_t n, int64_t o, int64_t step) {
    float *mx = ((lse_ctx *)vc)->mx;
    if (step)
        for (int64_t i = 0; i < n; i++) mx[o + i * step] = x[i] > mx[o + i * step] ? x[i] : mx[o + i * step];
    else mx[o] = max_f(x, n, mx[o]);
}

static void red_sumexp(void *vc, const float *x, int64_t n, int64_t o, int64_t step) {
    lse_ctx *c = vc;
    float e[BLK]; /* n <= BLK */
    if (step) {
        for (int64_t i = 0; i < n; i++) e[i] = x[i] - c->mx[o + i * step];
        exp_inplace(e, n);
        for (int64_t i = 0; i < n; i++) c->sum[o + i * step] += e[i];
    } else {
        float m = c->mx[o];
        for (int64_t i = 0; i < n; i++) e[i] = x[i] - m;
        exp_inplace(e, n);
        c->sum[o] += sum_d(e, n);
    }
}

sim_status simk_logsumexp(const char *fn, const char *kernel, const sim_view *in, uint32_t reduce,
                          const sim_view *out) {
    int nd = in->ndim;
    int64_t kept = 1;
    for (int d = 0; d < nd; d++)
        if (!(reduce & (1u << d))) kept *= in->shape[d];
    sim_status st;
    if ((st = need_float_dt(fn, "self", in))) return st;
    if (sim_numel(out) != kept)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "output has %lld elements, the reduction gives %lld",
                        (long long)sim_numel(out), (long long)kept);
    if (out->dtype != in->dtype)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "out is %s but the input is %s (mixed dtypes)",
                        sim_dtype_name(out->dtype), sim_dtype_name(in->dtype));
    if ((st = sim_launch(kernel, fn))) return st;
    lse_ctx c = {alloc_f(kept), alloc_d(kept)};
    for (int64_t k = 0; k < kept; k++) c.mx[k] = -INFINITY;
    reduce_walk(in, reduce, c.sum, red_max, &c);
    /* PyTorch's shift: an infinite max counts as 0, so all -inf gives -inf */
    for (int64_t k = 0; k < kept; k++)
        if (isinf(c.mx[k])) c.mx[k] = 0.0f;
    reduce_walk(in, reduce, c.sum, red_sumexp, &c);
    for (int64_t k = 0; k < kept; k++) c.mx[k] = logf((float)c.sum[k]) + c.mx[k];
    sim_scatter(c.mx, out);
    free(c.mx); free(c.sum);
    return SIM_OK;
}

/* ---------------------------------------------------------- training: loss */

/* [N, C] (or [C]) log-probabilities with [N] (or []) targets: N, C and the target row stride */
static sim_status nll_shapes(const char *fn, const sim_view *in, const sim_view *target, const sim_view *weight,
                             int64_t *N, int64_t *C) {
    if (in->ndim != 1 && in->ndim != 2)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "input must be [N, C] or [C], got %d-D", in->ndim);
    *N = in->ndim == 2 ? in->shape[0] : 1;
    *C = in->shape[in->ndim - 1];
    if (target->ndim != in->ndim - 1 || (in->ndim == 2 && target->shape[0] != *N))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "target must be [%lld] for a %d-D input",
                        (long long)*N, in->ndim);
    if (target->dtype != SIM_I64 && target->dtype != SIM_I32)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "target must be int64 or int32, got %s",
                        sim_dtype_name(target->dtype));
    if (weight->present && (weight->ndim != 1 || weight->shape[0] != *C || weight->dtype != in->dtype))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "weight must be [%lld] of the input's dtype", (long long)*C);
    return need_float_dt(fn, "input", in);
}

/* Targets, checked: a target outside [0, C) that is not ignore_index is a data error. */
static sim_status nll_targets(const char *fn, const sim_view *target, int64_t N, int64_t C,
                              int64_t ignore_index, int64_t **out) {
    int64_t *t = gather_i_or_die(target);
    for (int64_t n = 0; n < N; n++)
        if (t[n] != ignore_index && (t[n] < 0 || t[n] >= C)) {
            long long bad = (long long)t[n];
            free(t);
            return sim_fail(SIM_E_DATA, fn, "target %lld is out of bounds [0, %lld)", bad, (long long)C);
        }
    *out = t;
    return SIM_OK;
}

sim_status simk_nll_loss(const char *fn, const char *kernel, const sim_view *in, const sim_view *target,
                         const sim_view *weight, int64_t reduction, int64_t ignore_index, const sim_view *out,
                         const sim_view *total_weight) {
    int64_t N = 0, C = 0;
    sim_status st;
    if ((st = nll_shapes(fn, in, target, weight, &N, &C))) return st;
    if (reduction < 0 || reduction > 2)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "reduction=%lld (0 none, 1 mean, 2 sum)", (long long)reduction);
    int64_t want = reduction == 0 ? sim_numel(target) : 1;
    if (sim_numel(out) != want || (reduction == 0 ? out->ndim != target->ndim : out->ndim != 0))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "output must be %s", reduction == 0 ? "shaped like target" : "0-D");
    if (total_weight->ndim != 0 || out->dtype != in->dtype || total_weight->dtype != in->dtype)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "output and total_weight must be of the input's dtype, "
                        "total_weight 0-D");
    int64_t *t = NULL;
    if ((st = nll_targets(fn, target, N, C, ignore_index, &t))) return st;
    if ((st = sim_launch(kernel, fn))) {
        free(t);
        return st;
    }
    float *X = gather_or_die(in), *W = weight->present ? gather_or_die(weight) : NULL;
    float *L = alloc_f(N);
    double sum = 0, wsum = 0;
    for (int64_t n = 0; n < N; n++) {
        if (t[n] == ignore_index) continue;
        float w = W ? W[t[n]] : 1.0f;
        L[n] = -X[n * C + t[n]] * w;
        sum += L[n];
        wsum += w;
    }
    float tw = reduction == 0 ? 0.0f : (float)wsum;
    if (reduction == 0) sim_scatter(L, out);
    else {
        float r = (float)(reduction == 1 ? sum / wsum : sum); /* mean over no weight: 0/0 = NaN */
        sim_scatter(&r, out);
    }
    sim_scatter(&tw, total_weight);
    free(t); free(X); free(W); free(L);
    return SIM_OK;
}

sim_status simk_nll_loss_backward(const char *fn, const char *kernel, const sim_view *grad, const sim_view *in,
                                  const sim_view *target, const sim_view *weight, int64_t reduction,
                                  int64_t ignore_index, const sim_view *total_weight, const sim_view *out) {
    int64_t N = 0, C = 0;
    sim_status st;
    if ((st = nll_shapes(fn, in, target, weight, &N, &C)) || (st = simk_check_same(fn, "self", in, out)))
        return st;
    if (reduction < 0 || reduction > 2)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "reduction=%lld (0 none, 1 mean, 2 sum)", (long long)reduction);
    int64_t want = reduction == 0 ? sim_numel(target) : 1;
    if (sim_numel(grad) != want || grad->dtype != in->dtype)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "grad_output must have %lld element(s) of the input's dtype",
                        (long long)want);
    if (sim_numel(total_weight) != 1 || total_weight->dtype != in->dtype)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "total_weight must be one element of the input's dtype");
    int64_t *t = NULL;
    if ((st = nll_targets(fn, target, N, C, ignore_index, &t))) return st;
    if ((st = sim_launch(kernel, fn))) {
        free(t);
        return st;
    }
    float *G = gather_or_die(grad), *W = weight->present ? gather_or_die(weight) : NULL;
    float *TW = gather_or_die(total_weight);
    float *R = alloc_f(N * C);
    for (int64_t n = 0; n < N; n++) {
        if (t[n] == ignore_index) continue;
        float g = reduction == 0 ? G[n] : G[0];
        float v = -(W ? W[t[n]] : 1.0f) * g;
        R[n * C + t[n]] = reduction == 1 ? v / TW[0] : v;
    }
    sim_scatter(R, out);
    free(t); free(G); free(W); free(TW); free(R);
    return SIM_OK;
}

/* ----------------------------------------------------- training: embedding */

sim_status simk_embedding_backward(const char *fn, const char *kernel, const sim_view *grad,
                                   const sim_view *indices, int64_t num_weights, int64_t padding_idx,
                                   int scale_grad_by_freq, const sim_view *out) {
    if (indices->dtype != SIM_I64 && indices->dtype != SIM_I32)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "indices must be int32 or int64");
    if (out->ndim != 2 || out->shape[0] != num_weights || num_weights < 0)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "output must be [num_weights=%lld, D]", (long long)num_weights);
    int64_t D = out->shape[1], n = sim_numel(indices);
    if (grad->ndim != indices->ndim + 1 || grad->shape[grad->ndim - 1] != D)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "grad_output must be indices.shape + [%lld]", (long long)D);
    for (int d = 0; d < indices->ndim; d++)
        if (grad->shape[d] != indices->shape[d])
            return sim_fail(SIM_E_INVALID_VALUE, fn, "grad_output must be indices.shape + [%lld]", (long long)D);
    sim_status st;
    if ((st = need_float_dt(fn, "grad_output", grad))) return st;
    if (grad->dtype != out->dtype) return sim_fail(SIM_E_UNSUPPORTED, fn, "mixed dtypes");
    int64_t *idx = gather_i_or_die(indices);
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= num_weights) {
            long long bad = (long long)idx[i];
            free(idx);
            return sim_fail(SIM_E_DATA, fn, "index %lld out of range [0, %lld)", bad, (long long)num_weights);
        }
    if ((st = sim_launch(kernel, fn))) {
        free(idx);
        return st;
    }
    float *R = alloc_f(num_weights * D), *gb = alloc_f(D);
    int64_t *freq = NULL;
    if (scale_grad_by_freq) {
        freq = calloc((size_t)(num_weights ? num_weights : 1), sizeof(int64_t));
        if (!freq) abort();
        for (int64_t i = 0; i < n; i++) freq[idx[i]]++;
    }
    /* rows summed in index order, like PyTorch's index_add */
    int64_t gs = grad->strides[grad->ndim - 1], es = (int64_t)sim_dtype_size(grad->dtype), i = 0;
    sim_view pos = head_view(grad, grad->ndim - 1); /* one grad row per index */
    const sim_view *ops[1] = {&pos};
    sim_iter it;
    if (D > 0 && sim_iter_views(&it, 1, ops))
        do {
            for (int64_t j = 0; j < it.n; j++, i++) {
                int64_t r = idx[i];
                if (r == padding_idx) continue;
                const float *src = ld_f(gb, it.p[0] + j * it.s[0] * es, grad->dtype, gs, D);
                float *dst = R + r * D;
                if (freq) {
                    float sc = 1.0f / (float)freq[r];
                    for (int64_t k = 0; k < D; k++) dst[k] += src[k] * sc;
                } else {
                    for (int64_t k = 0; k < D; k++) dst[k] += src[k];
                }
            }
        } while (sim_iter_next(&it));
    sim_scatter(R, out);
    free(idx); free(R); free(gb); free(freq);
    return SIM_OK;
}

/* ---------------------------------------------------- training: layer norm */

sim_status simk_layer_norm_backward(const char *fn, const char *kernel, const sim_view *dy, const sim_view *x,
                                    int64_t norm_ndim, const sim_view *mean, const sim_view *rstd,
                                    const sim_view *w, const sim_view *dx, const sim_view *dw,
                                    const sim_view *db) {
    if (norm_ndim < 1 || norm_ndim > x->ndim)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "normalized dims %lld out of range for %d-D input",
                        (long long)norm_ndim, x->ndim);
    sim_status st;
    if ((st = simk_check_same(fn, "grad_out", dy, x)) || (st = need_float_dt(fn, "input", x))) return st;
    if (dx->present && (st = simk_check_same(fn, "grad_input", dx, x))) return st;
    int64_t inner = 1;
    for (int d = x->ndim - (int)norm_ndim; d < x->ndim; d++) inner *= x->shape[d];
    int64_t n = sim_numel(x), outer = inner ? n / inner : 0;
    if (sim_numel(mean) != outer || sim_numel(rstd) != outer)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "mean and rstd must have %lld elements", (long long)outer);
    const sim_view *per[3] = {w, dw, db};
    const char *names[3] = {"weight", "grad_weight", "grad_bias"};
    for (int i = 0; i < 3; i++)
        if (per[i]->present && (sim_numel(per[i]) != inner || per[i]->dtype != x->dtype))
            return sim_fail(SIM_E_INVALID_VALUE, fn, "%s must have %lld elements of the input's dtype",
                            names[i], (long long)inner);
    if (!dx->present && !dw->present && !db->present)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "no gradient requested");
    if ((st = sim_launch(kernel, fn))) return st;
    float *Mu = gather_or_die(mean), *Rs = gather_or_die(rstd);
    float *Wv = w->present ? gather_or_die(w) : NULL;
    float *gw = alloc_f(inner), *gb = alloc_f(inner);
    float *buf = alloc_f(5 * inner), *gbuf = buf, *xbuf = buf + inner, *obuf = buf + 2 * inner;
    float *p1 = buf + 3 * inner, *p2 = buf + 4 * inner;
    const sim_view *outs[3] = {dx, dw, db};
    held hdy, hx;
    const sim_view *g = hold(&hdy, dy, outs, 3), *xv = hold(&hx, x, outs, 3);
    int k = (int)norm_ndim, hd = x->ndim - k;
    rowed rg, rx, ro;
    rows_open(&rg, g, k, 0);
    rows_open(&rx, xv, k, 0);
    rows_open(&ro, dx, k, 1);
    sim_view heads[3] = {head_view(&rg.v, hd), head_view(&rx.v, hd), head_view(&ro.v, hd)};
    const sim_view *ops[3] = {&heads[0], &heads[1], &heads[2]};
    int64_t es[3] = {(int64_t)sim_dtype_size(g->dtype), (int64_t)sim_dtype_size(xv->dtype),
                     (int64_t)sim_dtype_size(dx->dtype)};
    const int direct = dx->present && dx->dtype == SIM_F32 && ro.rs == 1;
    /* PyTorch's formula, in float and in its order of operations, with the
     * multiply-adds its compiler fuses (checked bit for bit against torch's
     * CPU kernel) and its row sums added as its vectorized reductions add:
     * with a single normalized element (or a constant row) rstd is huge and
     * the result is rounding noise, which then matches PyTorch's own noise. */
    float scale = 1.0f / (float)inner;
    int64_t r = 0;
    sim_iter it;
    if (inner > 0 && sim_iter_views(&it, dx->present ? 3 : 2, ops))
        do {
            for (int64_t j = 0; j < it.n; j++, r++) {
                const float *gr = ld_f(gbuf, it.p[0] + j * it.s[0] * es[0], g->dtype, rg.rs, inner);
                const float *xr = ld_f(xbuf, it.p[1] + j * it.s[1] * es[1], xv->dtype, rx.rs, inner);
                float mu = Mu[r], a = Rs[r], am = -a * mu;
                /* a fused multiply-add, as PyTorch's compiled loop */
                for (int64_t i = 0; i < inner; i++) gw[i] += gr[i] * fmaf(a, xr[i], am);
                for (int64_t i = 0; i < inner; i++) gb[i] += gr[i];
                if (!dx->present) continue;
                if (Wv) {
                    for (int64_t i = 0; i < inner; i++) p1[i] = gr[i] * xr[i] * Wv[i];
                    for (int64_t i = 0; i < inner; i++) p2[i] = gr[i] * Wv[i];
                } else {
                    for (int64_t i = 0; i < inner; i++) p1[i] = gr[i] * xr[i];
                }
                float ds = sum_lanes_f(p1, inner), dsum = sum_lanes_f(Wv ? p2 : gr, inner);
                float b = fmaf(dsum, mu, -ds) * a * a * a * scale;
                float c = fmaf(-b, mu, -(dsum * a * scale));
                /* dx = a * dy * gamma + b * x + c */
                char *po = it.p[2] + j * it.s[2] * es[2];
                float *o = direct ? (float *)po : obuf;
                if (Wv) for (int64_t i = 0; i < inner; i++) o[i] = fmaf(b, xr[i], a * gr[i] * Wv[i]) + c;
                else for (int64_t i = 0; i < inner; i++) o[i] = fmaf(b, xr[i], a * gr[i]) + c;
                if (!direct) cvt_from_f(po, dx->dtype, ro.rs, obuf, inner);
            }
        } while (sim_iter_next(&it));
    rows_close(&ro);
    rows_close(&rx);
    rows_close(&rg);
    free(hdy.own);
    free(hx.own);
    if (dx->present) sim_corrupt_output(dx);
    if (dw->present) sim_scatter(gw, dw);
    if (db->present) sim_scatter(gb, db);
    free(Mu); free(Rs); free(Wv); free(gw); free(gb); free(buf);
    return SIM_OK;
}

/* ---------------------------------------------------------- data movement */

sim_status simk_arange(const char *fn, const char *kernel, double start, double end, double step,
                       const sim_view *out) {
    if (step == 0 || step != step || start != start || end != end)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "step must be nonzero and start, end, step finite");
    if ((step > 0 && end < start) || (step < 0 && end > start))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "upper bound and step are inconsistent with each other");
    double count = ceil((end - start) / step);
    if (out->ndim != 1 || (double)out->shape[0] != count)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "output must be 1-D with %.0f elements", count);
    if (out->dtype == SIM_BOOL) return sim_fail(SIM_E_UNSUPPORTED, fn, "dtype bool is not supported");
    sim_status st = sim_launch(kernel, fn);
    if (st) return st;
    int64_t n = out->shape[0], es = (int64_t)sim_dtype_size(out->dtype);
    if (simk_is_float(out->dtype)) {
        /* PyTorch accumulates in double for floating outputs */
        for (int64_t i = 0; i < n; i++)
            sim_store(out->base + i * out->strides[0] * es, out->dtype, start + (double)i * step);
    } else {
        int64_t s0 = sat_i64(start), st1 = sat_i64(step);
        for (int64_t i = 0; i < n; i++) {
            int64_t v = wadd(s0, wmul(i, st1));
            cvt_from_i(out->base + i * out->strides[0] * es, out->dtype, 1, &v, 1);
        }
    }
    return SIM_OK;
}

sim_status simk_select_backward(const char *fn, const char *kernel, const sim_view *grad, int64_t dim,
                                int64_t index, const sim_view *out) {
    int nd = out->ndim;
    if (nd < 1 || grad->ndim != nd - 1)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "grad_output is %d-D, the output %d-D (expected one more)",
                        grad->ndim, nd);
    if (dim < 0) dim += nd;
    if (dim < 0 || dim >= nd) return sim_fail(SIM_E_INVALID_VALUE, fn, "dim out of range for %d-D output", nd);
    int64_t size = out->shape[dim];
    if (index < -size || index >= size)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "index %lld out of range for size %lld", (long long)index,
                        (long long)size);
    if (index < 0) index += size;
    sim_view slice;
    memset(&slice, 0, sizeof slice);
    slice.ndim = nd - 1;
    slice.dtype = out->dtype;
    slice.present = 1;
    for (int d = 0, j = 0; d < nd; d++)
        if (d != dim) {
            slice.shape[j] = out->shape[d];
            slice.strides[j++] = out->strides[d];
        }
    slice.base = out->base + index * out->strides[dim] * (int64_t)sim_dtype_size(out->dtype);
    sim_status st;
    if ((st = check_shape(fn, "grad_output", grad, &slice))) return st;
    if (grad->dtype != out->dtype)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "grad_output is %s but the output is %s (mixed dtypes)",
                        sim_dtype_name(grad->dtype), sim_dtype_name(out->dtype));
    if ((st = sim_launch(kernel, fn))) return st;
    simk_fill(out, 0.0);
    copy_view(grad, &slice);
    return SIM_OK;
}

sim_status simk_cat(const char *fn, const char *kernel, const sim_view *inputs, int n, int64_t dim,
                    const sim_view *out) {
    if (n < 1) return sim_fail(SIM_E_INVALID_VALUE, fn, "needs at least one input");
    int nd = out->ndim;
    if (nd == 0) return sim_fail(SIM_E_INVALID_VALUE, fn, "cannot concatenate 0-D tensors");
    if (dim < 0) dim += nd;
    if (dim < 0 || dim >= nd)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "dim out of range for %d-D tensors", nd);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const sim_view *v = &inputs[i];
        if (v->ndim == 1 && v->shape[0] == 0) continue; /* PyTorch's legacy rule: skipped */
        if (v->ndim != nd)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "input %d is %d-D, the output %d-D", i, v->ndim, nd);
        if (v->dtype != out->dtype)
            return sim_fail(SIM_E_UNSUPPORTED, fn, "input %d is %s but the output is %s (mixed dtypes)", i,
                            sim_dtype_name(v->dtype), sim_dtype_name(out->dtype));
        for (int d = 0; d < nd; d++)
            if (d != dim && v->shape[d] != out->shape[d])
                return sim_fail(SIM_E_INVALID_VALUE, fn, "input %d has size %lld in dim %d, the output %lld",
                                i, (long long)v->shape[d], d, (long long)out->shape[d]);
        total += v->shape[dim];
    }
    if (total != out->shape[dim])
        return sim_fail(SIM_E_INVALID_VALUE, fn, "inputs add up to %lld along dim %lld, the output has %lld",
                        (long long)total, (long long)dim, (long long)out->shape[dim]);
    sim_status st = sim_launch(kernel, fn);
    if (st) return st;
    /* each input is copied into its slice of the output (the output's view
     * narrowed along dim); an input overlapping the output is read first */
    int64_t off = 0, es = (int64_t)sim_dtype_size(out->dtype);
    for (int i = 0; i < n; i++) {
        const sim_view *v = &inputs[i];
        if (v->ndim == 1 && v->shape[0] == 0) continue;
        sim_view slice = *out;
        slice.shape[dim] = v->shape[dim];
        slice.base = out->base + off * out->strides[dim] * es;
        copy_view(v, &slice);
        off += v->shape[dim];
    }
    return SIM_OK;
}

sim_view simk_nchw_as_nhwc(const sim_view *v) {
    sim_view r = *v;
    if (v->ndim == 4) {
        static const int perm[4] = {0, 2, 3, 1};
        for (int i = 0; i < 4; i++) {
            r.shape[i] = v->shape[perm[i]];
            r.strides[i] = v->strides[perm[i]];
        }
    }
    return r;
}
