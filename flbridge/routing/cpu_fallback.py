"""The CPU fallback: run an op on host views of its arguments' bytes.

The algorithm of PyTorch's CPUFallback.cpp: arguments become views of their
host bytes (downloaded once if the device copy is newer); written arguments
are marked written on the host; results stay on the host side until a native
op needs them (no upload here); results that alias an argument share its
storage, so in-place ops, out= and views behave as on any device.  Random ops
draw from the chip's generator.
"""
from __future__ import annotations

import torch

from ..binding import launch
from . import rng
from ..errors import NestedNotSupported, QuantizedNotSupported
from ..specs import WRITE_ONLY
from ..tensor import (Storage, XPUTensor, covers_storage, host_address, host_bytes, host_view, new_tensor,
                      set_geometry)



def cpu_fallback(route, args, kwargs):
    """Runs the op on host copies (CPUFallback.cpp's algorithm): arguments
    become views of their host bytes; written arguments are marked written on
    the host; results stay on the host side until a native op needs them;
    results that alias an argument share its storage."""
    chip = route.chip
    opi = route.opi
    if launch.STATE.capture is not None:
        launch.STATE.capture.cpu_fallback(route, "no native route")
    mutated_names = route.mutated_names
    seen = _Seen(route)
    written = route.arg_written
    cargs = [_to_host(a, i < len(written) and written[i], seen) for i, a in enumerate(args)]
    ckwargs = {k: _to_host(v, k in mutated_names, seen) for k, v in kwargs.items()} if kwargs else {}
    fix = _CPU_ARG_DTYPES.get(route.func)
    if fix is not None:
        _match_dtypes(opi, cargs, ckwargs, *fix)
    if route.seeded:
        result = _run_seeded(route, cargs, ckwargs)
    else:
        result = route.func(*cargs, **ckwargs)
    # written arguments: host bytes are now the truth
    for i in opi.mutated:
        name = opi.args[i].name
        v = args[i] if i < len(args) else kwargs.get(name)
        targets = v if isinstance(v, (list, tuple)) else (v,)
        hosts = cargs[i] if i < len(args) else ckwargs.get(name)
        hosts = hosts if isinstance(hosts, (list, tuple)) else (hosts,)
        for t, h in zip(targets, hosts):
            if type(t) is XPUTensor:
                _after_host_write(t, h)
    _check_results(route, result)
    return _wrap_results(chip, result, seen.host_to_xpu, seen.storages)


def _check_results(route, result) -> None:
    """Results an fl tensor cannot hold get one clear error (fl tensors are dense, strided, unquantized)."""
    for r in (result if isinstance(result, (list, tuple)) else (result,)):
        if isinstance(r, torch.Tensor) and r.is_cpu:
            if r.is_nested:
                raise NestedNotSupported(f"{route.qualname} returned a nested tensor")
            if r.is_quantized:
                raise QuantizedNotSupported(f"{route.qualname} returned a quantized tensor")


# Backward ops whose CPU kernels want their saved statistics in the input's
# dtype, while the forward on the device (PyTorch's device semantics, as on
# CUDA) produced them in float32 for bfloat16/float16 inputs.
_CPU_ARG_DTYPES = {
    torch.ops.aten.native_layer_norm_backward.default: ("input", ("mean", "rstd")),
    torch.ops.aten.native_group_norm_backward.default: ("input", ("mean", "rstd")),
}


def _match_dtypes(opi, cargs, ckwargs, ref_name, names):
    def get(name):
        a = opi.by_name[name]
        return cargs[a.index] if a.index < len(cargs) else ckwargs.get(name)

    def put(name, v):
        a = opi.by_name[name]
        if a.index < len(cargs):
            cargs[a.index] = v
        else:
            ckwargs[name] = v

    ref = get(ref_name)
    for name in names:
        v = get(name)
        if isinstance(v, torch.Tensor) and isinstance(ref, torch.Tensor) and v.dtype != ref.dtype:
            put(name, v.to(ref.dtype))


class _Seen:
    """What one fallback call mapped: host view -> its fl tensor, host
    address -> Storage (so results aliasing an argument share its storage).
    A plain object rather than a closure's cells: no reference cycle keeps
    the arguments alive after the call."""
    __slots__ = ("route", "host_to_xpu", "storages")

    def __init__(self, route):
        self.route, self.host_to_xpu, self.storages = route, {}, {}


def _to_host(v, written, seen):
    if type(v) is XPUTensor:
        route = seen.route
        chip = route.chip
        st = v._st
        if st.chip is not chip:
            raise _device_mismatch(chip.device, v.device)
        if written and not st.host_valid and covers_storage(v) and route.func in WRITE_ONLY:
            if st.host is None:
                st.host = torch.empty(st.nbytes, dtype=torch.uint8, device="cpu")
                st.typed = None
            st.host_valid = True  # every byte is about to be overwritten
        h = host_view(v)
        seen.host_to_xpu[id(h)] = (h, v)
        if st.nbytes:
            seen.storages[host_address(v)] = st
        return h
    if isinstance(v, torch.Tensor):
        if v.device.type == "fl":  # an fl tensor that is not an XPUTensor
            if "_st" in v.__dict__:
                raise NotImplementedError(
                    f"flbridge: {seen.route.qualname} got torch.compile's stand-in of an fl tensor (a plain "
                    f"tensor with no data, flbridge.tensor.traceable): a torch.compile backend ran "
                    f"AOTAutograd's graph on it (backend='aot_eager' does). Use backend='fl', 'eager' or the "
                    f"default torch.compile on fl tensors")
            if v.layout != torch.strided:
                raise NotImplementedError(f"flbridge: {v.layout} tensors are not supported on fl devices "
                                          f"(only strided ones); keep them on the CPU")
            raise NotImplementedError(f"flbridge: {seen.route.qualname} got a plain {v.device} tensor that "
                                      f"flbridge did not make (no data behind it)")
        # PyTorch lets a 0-dim CPU tensor stand beside any device's tensors
        if v.device.type != "cpu" or (v.dim() > 0 and not seen.route.mixed_device_ok):
            raise _device_mismatch(seen.route.chip.device, v.device)
        return v
    if isinstance(v, (list, tuple)):
        return type(v)(_to_host(x, written, seen) for x in v)
    if isinstance(v, torch.device) and v.type == "fl":
        return torch.device("cpu")
    return v


def _device_mismatch(a, b):
    return RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                        f"{a} and {b}!")


def _run_seeded(route, cargs, ckwargs):
    """Random ops draw from the chip's generator, not the CPU's.  A
    counter-based chip's (seed, offset) seeds a CPU generator for the call
    and advances (flbridge.routing.rng), so host draws replay with the state;
    a CPU torch.Generator passed as generator= is used as given."""
    chip = route.chip
    opi = route.opi
    g = opi.by_name.get("generator")
    given = None
    if g is not None:
        given = cargs[g.index] if g.index < len(cargs) else ckwargs.get("generator")
    fl_gen = rng.default_generator(chip) if given is None else rng.lookup(given)
    if fl_gen is not None and type(fl_gen) is rng.FlGenerator:
        host = fl_gen.host_draw()                    # a CPU generator seeded for this call
    else:
        host = given if given is not None else chip.generator
    if g is not None:
        if g.index < len(cargs):
            cargs[g.index] = host
        else:
            ckwargs["generator"] = host
        return route.func(*cargs, **ckwargs)
    saved = torch.default_generator.get_state()
    torch.default_generator.set_state(torch.Generator.get_state(host))
    try:
        return route.func(*cargs, **ckwargs)
    finally:
        if host is chip.generator and type(host) is not rng.FlGenerator:
            host.set_state(torch.default_generator.get_state())
        torch.default_generator.set_state(saved)


def _after_host_write(t: XPUTensor, h: torch.Tensor) -> None:
    st = t._st
    if h.untyped_storage().data_ptr() == (st.host.untyped_storage().data_ptr() if st.host is not None else -1) \
            and st.nbytes == h.untyped_storage().nbytes():
        st.wrote_host()
        if tuple(h.shape) != tuple(t.shape) or h.stride() != t.stride() or h.storage_offset() != t.storage_offset():
            set_geometry(t, tuple(h.shape), h.stride(), h.storage_offset())
        return
    # the CPU kernel resized the tensor into new memory: the tensor's storage
    # grows in place (views of it see the new memory, as in PyTorch)
    us = h.untyped_storage()
    st.host = host_bytes(us)
    st.typed = None
    st.drop_device()
    st.nbytes = us.nbytes()
    st.host_valid = True
    set_geometry(t, tuple(h.shape), h.stride(), h.storage_offset())


def _wrap_results(chip, result, host_to_xpu, storages):
    if isinstance(result, torch.Tensor):
        hit = host_to_xpu.get(id(result))
        if hit is not None and hit[0] is result:
            return hit[1]  # an in-place / out= result: the argument itself
        if not result.is_cpu:
            return result
        if result.layout != torch.strided:
            raise NotImplementedError(f"flbridge: {result.layout} tensors are not supported on fl devices "
                                      f"(only strided ones); do this on the CPU (.cpu()) and move the "
                                      f"dense result back")
        if result._is_zerotensor():
            # an "efficient" zero tensor has no bytes: fl tensors are dense
            result = torch.zeros(result.shape, dtype=result.dtype, device="cpu")
        if result.is_conj() or result.is_neg():
            # a lazily conjugated/negated view: the bytes alone would lose the sign
            result = result.resolve_conj().resolve_neg()
        ptr = result.untyped_storage().data_ptr()
        st = storages.get(ptr) if ptr else None
        if st is None:
            # fresh bytes: adopt them (no copy); results sharing them share the storage
            st = Storage.adopt_host(chip, result)
            if ptr:
                storages[ptr] = st
        return new_tensor(chip, tuple(result.shape), result.stride(), result.dtype, storage=st,
                          offset=result.storage_offset())
    if isinstance(result, (list, tuple)):
        return type(result)(_wrap_results(chip, r, host_to_xpu, storages) for r in result)
    return result


