"""``quantized::linear_dynamic`` (the op ``torch.ao.quantization.quantize_dynamic``
Linear modules call) on a chip, through its int8 GEMM.

PyTorch's CPU kernel (fbgemm, the x86/fbgemm engines), for float32 x and a
qint8 weight W_q with zero point 0 and scale s_w (per tensor or per output
channel):

1. min/max of x (0 included), then scale s and zero point z as
   ``torch._choose_qparams_per_tensor`` picks them (activations in [0, 127]
   with ``reduce_range``, the module's default, else [0, 255]);
2. x_q = clamp(nearbyint(fma(x, 1/s, z)), 0, q_max)  (float32, one rounding
   of x * (1/s) + z: measured, tests/test_int8.py);
3. raw = sum_k (x_q - z) * W_q  in int32 (exact: |raw| <= K * 255 * 128);
4. y = fma(float(raw), s * s_w, bias)  (one rounding), or float(raw) * (s * s_w).

Here every step is an ordinary op on the fl tensors, so each takes its own
route (native where the spec has the kernel): min/max by ``max.dim`` and
``min.dim`` (read back: 8 bytes, as the CPU kernel also needs them before
quantizing), the multiply, the rounding by adding and subtracting 1.5 * 2**23
(exact round-half-even in float32 for |v| < 2**22), clamp, the narrowing
copy, ``aten::_int_mm`` and ``addcmul``.

The zero-point adapter: ``_int_mm`` takes int8, so the activation goes as
a = x_q - 128 (in [-128, 127] whatever z is), and the GEMM gives
sum_k (x_q - 128) * W_q.  The correction to the CPU's raw is
(128 - z) * colsum(W_q), one int32 ``add`` with ``alpha``:

    sum_k (x_q - z) W_q[n, k] = sum_k (x_q - 128) W_q[n, k] + (128 - z) * sum_k W_q[n, k]

Every term is an integer below 2**31 in magnitude for K <= 65793
(K * 255 * 128 < 2**31), and int32 arithmetic wraps consistently beyond,
so raw is the CPU's for the same x_q.  Two steps differ, because the chip
has no fused multiply-add kernel: x * (1/s) is rounded before z is added
(an element within 2**-15 of a half-integer there may quantize one step
away; about 5 in a million for Gaussian inputs), and the bias is added after
rounding the product.  Without such ties and without a bias y is the CPU's
bit for bit; otherwise within the bound tests/test_int8.py derives.  A chip's GEMM that wants uint8 with zero
point 128 (x1) gets a + 128 = x_q through its ``dtype_quirks`` convert.

The weight of a module moved to fl is unpacked once and uploaded once per
chip (kept while the module's packed object lives);
the route's meta trace and ``flbridge.coverage``'s fake tensors get
stand-ins of its shapes and skip the min/max read.  A
weight with nonzero zero points, or x not float32, returns NotImplemented:
the route then runs the CPU kernel.
"""
from __future__ import annotations

import math
import weakref

import torch
from torch._subclasses.fake_tensor import is_fake
from torch.utils._python_dispatch import _disable_current_modes

aten = torch.ops.aten
_ROUND = 12582912.0          # 1.5 * 2**23: v + _ROUND - _ROUND rounds v half-to-even in float32
_WEIGHTS: dict = {}          # (key, device) -> (w_t int8 [K, N], colsum int32 [N], bias, s_w float32)
_HOST: dict = {}             # key -> (W_q int8 [N, K], colsum, bias, s_w) on the CPU, or None
_KEPT: set = set()           # keys of the packed weights of modules moved to fl


def _key(packed) -> int:
    """The packed weight's identity.  The dispatcher hands each call a new
    Python wrapper of the same C++ object (id() differs, hash() does not)."""
    return hash(packed)


def keep_on_device(packed) -> None:
    """Caches the weight of a module moved to fl (Module.to, backend/quantized.py)
    while `packed`, the module's own wrapper, lives; without it each call
    unpacks and uploads the weight again (right, but slow)."""
    key = _key(packed)
    if key not in _KEPT:
        _KEPT.add(key)
        weakref.finalize(packed, _forget, key)


def _forget(key) -> None:
    _KEPT.discard(key)
    _HOST.pop(key, None)
    for k in [k for k in _WEIGHTS if k[0] == key]:
        del _WEIGHTS[k]


def _no_data(t) -> bool:
    """A stand-in without values: the route's meta trace, or flbridge.coverage's fake tensors."""
    return t.device.type == "meta" or is_fake(t)


def _host_weights(packed):
    """W_q, its column sums, the bias and s_w (float32) on the CPU; None
    for a weight with nonzero zero points (the CPU kernel then runs)."""
    key = _key(packed)
    if key in _HOST:
        return _HOST[key]
    with _disable_current_modes():     # host work, not a part of the route (the tracer records parts)
        w, bias = torch.ops.quantized.linear_unpack(packed)
        hit = None
        if w.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
            if w.q_zero_point() == 0:
                hit = torch.tensor(w.q_scale(), dtype=torch.float32)
        elif w.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
            if not w.q_per_channel_zero_points().any():
                hit = w.q_per_channel_scales().to(torch.float32)
        if hit is not None:
            wq = w.int_repr()                               # int8 [N, K]
            hit = (wq, wq.sum(1, dtype=torch.int32), bias, hit)
    if key in _KEPT:
        _HOST[key] = hit
    return hit


def _device_weights(packed, X):
    """(W_q^T int8 [K, N], colsum int32 [N], bias, s_w) on X's device:
    uploaded once per kept weight and chip; stand-ins for a stand-in X."""
    key = (_key(packed), X.device)
    hit = _WEIGHTS.get(key)
    if hit is not None:
        return hit
    host = _host_weights(packed)
    if host is None:
        return None
    wq, colsum, bias, s_w = host
    if _no_data(X):       # tensors of the shapes, not kept (new_empty: allocation, not a part of the route)
        return (X.new_empty(wq.shape[::-1], dtype=torch.int8), X.new_empty(colsum.shape, dtype=torch.int32),
                None if bias is None else X.new_empty(bias.shape, dtype=bias.dtype), s_w)
    with _disable_current_modes():
        w_t = wq.t().contiguous()
    hit = (w_t.to(X.device), colsum.to(X.device), None if bias is None else bias.to(X.device), s_w)
    if key[0] in _KEPT:
        _WEIGHTS[key] = hit
    return hit


def _qparams(x, reduce_range):
    """(1/s, s, z) for x as the CPU's dynamic quantization picks them."""
    if _no_data(x):      # tracing: no data, the same ops
        return 1.0, 1.0, 0
    flat = x.reshape(-1)
    lo, hi = torch.cat([aten.min.dim(flat, 0, True)[0], aten.max.dim(flat, 0, True)[0]]).cpu().tolist()
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None       # inf / NaN: what the CPU kernel makes of them, it says itself
    s, z = torch._choose_qparams_per_tensor(torch.tensor([lo, hi], dtype=torch.float32), reduce_range)
    s32 = torch.tensor(s, dtype=torch.float32)
    return (1.0 / s32).item(), s32.item(), int(z)


def _multiplier(s, s_w, X):
    """s * s_w in float32, as the CPU kernel: a 0-dim CPU tensor, or per
    output channel a tensor on the device."""
    if s_w.dim() and _no_data(X):
        return X.new_empty(s_w.shape, dtype=torch.float32)
    with _disable_current_modes():
        mult = torch.tensor(s, dtype=torch.float32) * s_w
    return mult if mult.dim() == 0 else mult.to(X.device)


def _on_cpu(X, W_prepack, reduce_range):
    """The CPU kernel on X's values, the result back on X's device."""
    return torch.ops.quantized.linear_dynamic(X.cpu(), W_prepack, reduce_range).to(X.device)


def linear_dynamic(X, W_prepack, reduce_range=False):
    if not isinstance(X, torch.Tensor) or X.dtype != torch.float32 or X.dim() < 1 or X.numel() == 0:
        return NotImplemented
    weights = _device_weights(W_prepack, X)
    K = X.shape[-1]
    if weights is None or weights[0].shape[0] != K:
        # a weight this path does not take, or the wrong width (the CPU
        # kernel raises its own error): no op on the chip (the route then
        # runs the CPU kernel), or, decided already, the CPU kernel here
        return NotImplemented if _no_data(X) else _on_cpu(X, W_prepack, reduce_range)
    w_t, colsum, bias, s_w = weights
    x = X.reshape(-1, K)
    qp = _qparams(x, reduce_range)
    if qp is None:
        return _on_cpu(X, W_prepack, reduce_range)
    inv, s, z = qp
    q_max = 127 if reduce_range else 255
    v = x * inv
    v = (v + _ROUND) - _ROUND                           # round half to even
    a = torch.clamp(v + (z - 128), -128, q_max - 128).to(torch.int8)   # x_q - 128
    acc = aten._int_mm(a, w_t)                          # sum (x_q - 128) * W_q
    raw = torch.add(acc, colsum, alpha=128 - z)         # + (128 - z) * colsum(W_q): sum (x_q - z) * W_q
    mult = _multiplier(s, s_w, X)
    y = raw.to(torch.float32)
    y = torch.addcmul(bias, y, mult) if bias is not None else y * mult
    return y.reshape(*X.shape[:-1], w_t.shape[1])


QUANTIZED_LINEAR = {torch.ops.quantized.linear_dynamic.default: linear_dynamic}
