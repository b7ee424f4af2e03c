"""The floors the benchmarks measure flbridge against: pass-through
`__torch_dispatch__` wrapper subclasses that run every op on the CPU tensor
they wrap.  No routing, residency or checks: what they cost is the price of
leaving C++ for Python and wrapping each result, which any pure-Python
wrapper-subclass backend pays before doing anything of its own.

Only torch is imported here, so bench_checkouts.py can use it with any
checkout of flbridge.
"""
import torch


class Passthrough(torch.Tensor):
    """The flattest floor, for single ops (bench_overhead, bench_checkouts):
    one flat unwrap of the positional arguments, run, wrap; on fl:0 so it
    reports the device an fl tensor would."""

    @staticmethod
    def __new__(cls, elem):
        r = torch.Tensor._make_wrapper_subclass(cls, elem.shape, strides=elem.stride(), dtype=elem.dtype,
                                                device=torch.device("fl", 0))
        r.elem = elem
        return r

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        out = func(*[a.elem if type(a) is Passthrough else a for a in args], **(kwargs or {}))
        return Passthrough(out) if isinstance(out, torch.Tensor) else out


class Floor(torch.Tensor):
    """The floor for whole models (bench_models): also unwraps tensor lists
    and keyword arguments and keeps the storage offset, requires_grad and
    the CPU device, so modules, autograd and optimizers work through it."""

    @staticmethod
    def __new__(cls, elem):
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.shape, strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, device=elem.device, requires_grad=elem.requires_grad)
        r.elem = elem
        return r

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        a = [x.elem if type(x) is Floor else
             [y.elem if type(y) is Floor else y for y in x] if type(x) in (list, tuple) else x for x in args]
        out = func(*a, **{k: (v.elem if type(v) is Floor else v) for k, v in kwargs.items()}) if kwargs \
            else func(*a)
        t = type(out)
        if t is torch.Tensor:
            return Floor(out)
        if t in (tuple, list):
            return t(Floor(o) if type(o) is torch.Tensor else o for o in out)
        return out
