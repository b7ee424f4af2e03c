"""Mixed precision on `fl`: PyTorch's own autocast and GradScaler, with the op
lists PyTorch uses on CUDA.

torch 2.13 registers no AutocastPrivateUse1 kernels, so inside
``torch.autocast("fl")`` every op would fail.  :func:`install` registers,
from Python, what ``aten/src/ATen/autocast_mode.cpp`` registers for CUDA:

* a fallthrough fallback on AutocastPrivateUse1, so ops that are not listed
  run unchanged (a Python *fallback* cannot be used: with a
  ``__torch_dispatch__`` argument it trips an internal assert in
  python_dispatch.cpp);
* one Python kernel per listed op, which casts the op's fl arguments per the
  op's policy and calls the op again with the autocast key excluded.  The
  kernels sit above autograd, so the casts are recorded: float32 weights
  get float32 gradients.

The lists are transcribed from ``torch/include/ATen/autocast_mode.h`` (the
``AT_FORALL_*`` macros) plus the lines autocast_mode.cpp adds for CUDA;
tests/test_amp.py checks them against that header and against the ops the
dispatcher holds AutocastCUDA kernels for, so they cannot drift.

Each chip's lower precision comes from its spec (``capabilities.amp_dtype``).
PyTorch keeps one autocast dtype per device type (not per index): flbridge
sets fl's default to the current device's chip's dtype whenever the current
device changes, and an op whose fl tensors live on a chip that lacks the
region's dtype raises :class:`AmpDtypeError`.  See docs/amp.md.
"""
from __future__ import annotations

import functools
import sys
import threading
import types
import weakref

import torch
from torch.utils.weak import WeakIdKeyDictionary

from .devices import CURRENT_DEVICE_HOOKS, chip_at, chip_for, current_device
from .errors import AmpDtypeError
from .specs import AMP_DTYPES, dtype_name
from .tensor import XPUTensor
from .tensor.traceable import TRACE

# ------------------------------------------------------------ the op lists
# Names are "op" (the default overload) or "op.overload", as the header's
# _(op) and _(op, overload) entries register them.

# AT_FORALL_LOWER_PRECISION_FP: run in the autocast dtype
LOWER_PRECISION_FP = (
    "_convolution.deprecated", "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d.input", "conv_transpose3d.input", "convolution", "prelu", "addmm", "addmv", "addr",
    "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul",
    "linalg_multi_dot", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell",
    "rnn_tanh_cell", "rnn_relu_cell", "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
)
# registered for CUDA by autocast_mode.cpp itself, next to the list above
CUDA_LOWER_PRECISION_FP = ("cudnn_convolution", "cudnn_convolution_transpose")
# AT_FORALL_FP32: run in float32
FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus", "layer_norm",
    "native_layer_norm", "rms_norm", "group_norm", "frobenius_norm.dim", "nuclear_norm", "nuclear_norm.dim",
    "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d", "_upsample_nearest_exact2d",
    "upsample_nearest3d", "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
    "_upsample_bilinear2d_aa", "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa",
)
# AT_FORALL_FP32_SET_OPT_DTYPE: output dtype float32 unless the call names one
FP32_SET_OPT_DTYPE = (
    "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum", "linalg_vector_norm",
    "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum", "sum.dim_IntList",
)
# AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE (fp32_append_dtype): the overload
# each redispatches to, with the output dtype appended
FP32_APPEND_DTYPE = {"norm.Scalar": "norm.ScalarOpt_dtype", "norm.ScalarOpt_dim": "norm.ScalarOpt_dim_dtype"}
# AT_FORALL_PROMOTE: run in the widest floating dtype among the arguments
PROMOTE = ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
           "tensordot", "scatter_add")
# autocast_mode.cpp: binary_cross_entropy_banned (PyTorch's message)
BANNED = {"binary_cross_entropy": (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
    "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
    "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
    "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
    "safe to autocast.")}


def policies() -> dict:
    """{op name: policy} for every op CUDA's autocast registers."""
    out = {n: "lower_precision_fp" for n in (*LOWER_PRECISION_FP, *CUDA_LOWER_PRECISION_FP)}
    out.update({n: "fp32" for n in FP32})
    out.update({n: "fp32_set_opt_dtype" for n in FP32_SET_OPT_DTYPE})
    out.update({n: "fp32_append_dtype" for n in FP32_APPEND_DTYPE})
    out.update({n: "promote" for n in PROMOTE})
    out.update({n: "banned" for n in BANNED})
    return out


# ------------------------------------------------------------------ errors


_CHIP_DTYPES: dict = {}


def _check_chip(t, to: torch.dtype) -> None:
    # a tensor being traced by torch.compile has no chip of its own (its Storage is traceable.TRACE)
    chip = t._st.chip if type(t) is XPUTensor and t._st is not TRACE else chip_for(t.device)
    ok = _CHIP_DTYPES.get(chip)
    if ok is None:
        ok = _CHIP_DTYPES[chip] = frozenset(d for d in AMP_DTYPES if d in chip.spec.capabilities.dtypes)
    if to not in ok:
        raise AmpDtypeError(chip, to, AMP_DTYPES)


# -------------------------------------------------------------- the casts

_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
_F32 = torch.float32
_F64 = torch.float64
_LOWER = frozenset(AMP_DTYPES)


def _on_fl(t) -> bool:
    return type(t) is XPUTensor or t.device.type == "fl"


def _eligible(t) -> bool:
    """at::autocast::is_eligible for PrivateUse1: a floating fl tensor, not double."""
    return isinstance(t, torch.Tensor) and _on_fl(t) and t.is_floating_point() and t.dtype is not _F64


class _Cache(threading.local):
    """The weight-cast cache (C++ autocast keeps one per thread as well):
    leaf float32 tensors that require grad, cast to the region's dtype.

    An entry is used only while its weight is unchanged: same storage, same
    storage write count (which also counts writes through `.data` and other
    aliases) and same version counter.  A cast made under autograd refers
    back to its weight through its grad_fn, so holding it strongly here
    would keep every weight ever cast alive: the cache holds it weakly, and
    the graph nodes of the ops that used it hold it (in their metadata) for
    as long as that graph lives, through the backward pass, as C++'s region
    would.  A cast made without autograd refers to nothing; it is held
    until its weight changes or dies, or the cache is cleared."""

    def __init__(self):
        self.entries = WeakIdKeyDictionary()


_CACHE = _Cache()


def clear_autocast_cache() -> None:
    """Drops this thread's cached weight casts."""
    _CACHE.entries = WeakIdKeyDictionary()


def _cached_cast(t, to, keep: list):
    st = getattr(t, "_st", None)
    if st is None or st is TRACE:      # (traced by torch.compile: the graph holds the cast)
        return t.to(to)
    entries = _CACHE.entries
    e = entries.get(t)
    if e is not None:
        e_to, e_st, e_stver, e_ver, held = e
        if e_to is to and e_st() is st and e_stver == st.version and e_ver == t._version:
            c = held() if isinstance(held, weakref.ref) else held
            # a cast made without autograd cannot stand in where a gradient must flow
            if c is not None and (c.requires_grad or not torch.is_grad_enabled()):
                if c.requires_grad:
                    keep.append(c)
                return c
    c = t.to(to)
    if c.requires_grad:
        keep.append(c)
        held = weakref.ref(c)
    else:
        held = c
    entries[t] = (to, weakref.ref(st), st.version, t._version, held)
    return c


def _cast(a, to, lower, keep: list):
    """at::autocast::cached_cast: eligible tensors (also inside lists) cast to
    `to`; casts of leaf float32 weights to the region's dtype are cached, and
    the ones autograd tracks are added to `keep`."""
    if isinstance(a, torch.Tensor):
        if a.dtype is to or not _on_fl(a) or not a.is_floating_point() or a.dtype is _F64:
            return a
        if to in _LOWER:
            _check_chip(a, to)
        if (to is lower and a.dtype is _F32 and a.requires_grad and a.is_leaf and not a._is_view()
                and torch.is_autocast_cache_enabled()):
            return _cached_cast(a, to, keep)
        return a.to(to)
    if isinstance(a, (list, tuple)) and any(isinstance(b, torch.Tensor) for b in a):
        return [_cast(b, to, lower, keep) for b in a]
    return a


def _run_cast(op, args, kwargs, to, lower):
    """op on its arguments cast to `to`, with AutocastPrivateUse1 excluded
    (WrapFunction_::call in autocast_mode.h)."""
    keep: list = []
    with torch._C._ExcludeDispatchKeyGuard(_KEY):
        out = op(*[_cast(a, to, lower, keep) for a in args],
                 **{k: _cast(v, to, lower, keep) for k, v in kwargs.items()})
    if keep:
        node = next((o.grad_fn for o in (out if isinstance(out, (tuple, list)) else (out,))
                     if isinstance(o, torch.Tensor) and o.grad_fn is not None), None)
        if node is not None:  # the cached casts live as long as this graph
            node.metadata.setdefault("flbridge_autocast_casts", []).extend(keep)
    return out


def _tensors(args, kwargs):
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (b for b in a if isinstance(b, torch.Tensor))


# ---------------------------------------------------------------- kernels
# One factory per CastPolicy of autocast_mode.h.

def _lower_precision_fp(op):
    def kernel(*args, **kwargs):
        lower = torch.get_autocast_dtype("fl")
        return _run_cast(op, args, kwargs, lower, lower)
    return kernel


def _fp32(op):
    def kernel(*args, **kwargs):
        return _run_cast(op, args, kwargs, _F32, torch.get_autocast_dtype("fl"))
    return kernel


def _fp32_set_opt_dtype(op):
    i = [a.name for a in op._schema.arguments].index("dtype")

    def kernel(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(_KEY):
            # an ineligible first argument keeps the call as it is: forcing a
            # dtype could change implicit promotion (autocast_mode.h)
            if args and _eligible(args[0]):
                if len(args) > i:
                    if args[i] is None:
                        args = (*args[:i], _F32, *args[i + 1:])
                elif kwargs.get("dtype") is None:
                    kwargs = {**kwargs, "dtype": _F32}
            return op(*args, **kwargs)
    return kernel


def _fp32_append_dtype(op, target):
    schema = op._schema.arguments
    names = [a.name for a in schema]
    defaults = {a.name: a.default_value for a in schema if a.has_default_value()}

    def kernel(*args, **kwargs):
        bound = {**defaults, **dict(zip(names, args)), **kwargs}
        x = bound["self"]
        with torch._C._ExcludeDispatchKeyGuard(_KEY):
            return target(**bound, dtype=_F32 if _eligible(x) else x.dtype)
    return kernel


def _promote(op):
    def kernel(*args, **kwargs):
        lower = torch.get_autocast_dtype("fl")
        to = lower
        for t in _tensors(args, kwargs):  # at::autocast::prioritize
            if not _on_fl(t) or not t.is_floating_point() or t.dtype is _F64:
                continue
            if to is _F32 or t.dtype is _F32:
                to = _F32
            elif t.dtype is not lower:
                raise RuntimeError(f"Unexpected floating ScalarType in at::autocast::prioritize: "
                                   f"{op.name()} got a {dtype_name(t.dtype)} fl tensor inside an autocast "
                                   f"region of dtype {dtype_name(lower)}")
        return _run_cast(op, args, kwargs, to, lower)
    return kernel


def _banned(op):
    message = BANNED[op._schema.name.split("::", 1)[1]]

    def kernel(*args, **kwargs):
        raise RuntimeError(message)
    return kernel


def _overload(name: str):
    """torch.ops.aten.<op>.<overload>, or None if this torch lacks it."""
    base, _, overload = name.partition(".")
    try:
        return getattr(getattr(torch.ops.aten, base), overload or "default")
    except (AttributeError, RuntimeError):
        return None


def _kernel(name: str, policy: str, op):
    if policy == "fp32_append_dtype":
        return _fp32_append_dtype(op, _overload(FP32_APPEND_DTYPE[name]))
    return {"lower_precision_fp": _lower_precision_fp, "fp32": _fp32, "fp32_set_opt_dtype": _fp32_set_opt_dtype,
            "promote": _promote, "banned": _banned}[policy](op)


# ------------------------------------------------- the fl default dtype

def _follow_current_chip(index: int) -> None:
    """PyTorch keeps one autocast dtype per device type: fl's default is the
    current chip's (torch.autocast("fl") without dtype reads it).  Inside an
    enabled region the region's dtype stays."""
    chip = chip_at(index)
    if torch.is_autocast_enabled("fl") or chip is None:
        return
    dt = chip.spec.capabilities.amp_dtype
    if dt is not None:
        torch.set_autocast_dtype("fl", dt)


def get_amp_supported_dtype() -> list:
    """The dtypes torch.autocast("fl") accepts.  Whether a chip runs one is
    checked per op against its spec (AmpDtypeError): a dtype missing here
    would make PyTorch disable autocast with a warning instead.  float32 is
    accepted as on CUDA (nanoGPT's --dtype=float32): the listed ops then run
    in float32."""
    return [*AMP_DTYPES, torch.float32]


def is_bf16_supported(device=None) -> bool:
    """Whether autocast can use bfloat16 on the chip (default: the current one)."""
    return torch.bfloat16 in chip_for(current_device() if device is None else device).spec.capabilities.dtypes


# ------------------------------------------------------------- torch.fl.amp

class autocast(torch.amp.autocast):  # named like torch.cuda.amp.autocast
    """torch.fl.amp.autocast(enabled=True, dtype=None, cache_enabled=True):
    torch.autocast("fl", ...) whose dtype defaults to the current chip's
    capabilities.amp_dtype, checked when the region is made, and whose
    weight-cast cache is dropped when the outermost region exits."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype | None = None, cache_enabled: bool = True):
        chip = chip_for(current_device())
        if enabled:
            if dtype is None:
                dtype = chip.spec.capabilities.amp_dtype
                if dtype is None:
                    raise AmpDtypeError(chip, torch.float16, AMP_DTYPES)
            if dtype in _LOWER and dtype not in chip.spec.capabilities.dtypes:
                raise AmpDtypeError(chip, dtype, AMP_DTYPES)
        super().__init__("fl", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    def __exit__(self, *exc):
        out = super().__exit__(*exc)
        if not torch.is_autocast_enabled("fl"):
            clear_autocast_cache()
        return out


class GradScaler(torch.amp.GradScaler):
    """torch.fl.amp.GradScaler(...): torch.amp.GradScaler("fl", ...)."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True):
        super().__init__("fl", init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
                         growth_interval=growth_interval, enabled=enabled)


AMP_MODULE = types.ModuleType("torch.fl.amp", "Mixed precision on fl devices (like torch.cuda.amp)")
AMP_MODULE.autocast = autocast
AMP_MODULE.GradScaler = GradScaler
AMP_MODULE.custom_fwd = functools.partial(torch.amp.custom_fwd, device_type="fl")
AMP_MODULE.custom_bwd = functools.partial(torch.amp.custom_bwd, device_type="fl")
AMP_MODULE.clear_autocast_cache = clear_autocast_cache

# ----------------------------------------------------------------- install

_LIBS: list = []


def install(fl_module) -> None:
    """Registers the autocast kernels (once per process) and adds the AMP
    functions to the torch.fl module."""
    if not _LIBS:
        fallthrough = torch.library.Library("_", "IMPL")
        fallthrough.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
        lib = torch.library.Library("aten", "IMPL")
        for name, policy in policies().items():
            op = _overload(name)
            if op is not None:  # an op of the list this torch build lacks
                lib.impl(name, _kernel(name, policy, op), "AutocastPrivateUse1")
        _LIBS.extend((fallthrough, lib))
        CURRENT_DEVICE_HOOKS.append(_follow_current_chip)
    fl_module.get_amp_supported_dtype = get_amp_supported_dtype
    fl_module.is_bf16_supported = is_bf16_supported
    fl_module.amp = AMP_MODULE
    sys.modules["torch.fl.amp"] = AMP_MODULE
