"""DistributedDataParallel's two flags that torch 2.13 cannot honour on fl.

With ``find_unused_parameters=True``, and in the first iteration of
``static_graph=True``, DDP's C++ reducer all-reduces its map of used
parameters, and on a PrivateUse1 device it stages that map in pinned host
memory.  The pinned allocator comes from the device's C++ hooks, which a
Python backend cannot provide (``torch._C._acc.PrivateUse1Hooks`` binds
three methods, not ``getPinnedMemoryAllocator``), so the first backward
failed with "You should register `PrivateUse1HooksInterface` ... and
implement `getPinnedMemoryAllocator`".

* ``static_graph=True`` is an optimisation with the same gradients: on fl
  DDP runs with ``static_graph=False``, said once with an IntegrationWarning.
* ``find_unused_parameters=True`` runs as ``False``, said with an
  IntegrationWarning (as accelerate's setting already does, see
  :mod:`flbridge.integrations.accelerate`).  That gives the same gradients
  when every parameter takes part in the loss.  When one does not, DDP's own
  error at the next forward would advise the very flag in use; flbridge's
  replaces it, naming the parameters that got no gradient and the two fixes.
"""
from __future__ import annotations

import functools
import inspect
import re
import warnings

from ..errors import IntegrationError, IntegrationWarning

WHY = ("torch 2.13's DDP reducer stages its used-parameter map in pinned host memory on a PrivateUse1 "
       "device, and a Python backend cannot register a pinned-memory allocator")


def _on_fl(module) -> bool:
    for p in module.parameters():
        return p.device.type == "fl"
    return False


def _reducer_names(ddp) -> list:
    """The reducer's parameters by name, in its order (DDP's _build_params_for_reducer:
    module by module, those that require grad and are not ignored, each once)."""
    ignored = getattr(ddp, "parameters_to_ignore", set())
    names, seen = [], set()
    for mname, module in ddp.module.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            full = f"{mname}.{pname}" if mname else pname
            if p.requires_grad and f"{mname}.{pname}" not in ignored and p not in seen:
                seen.add(p)
                names.append(full)
    return names


def _unused_names(ddp, message: str) -> list:
    """The parameters DDP's error says got no gradient ("Parameter indices
    which did not receive grad for rank 0: 2 3"), by name.  (Their .grad is
    no guide: zero_grad() has set every one to None by the next forward.)"""
    m = re.search(r"did not receive grad for rank \d+: ([\d ]+)", message)
    if m is None:
        return []
    names = _reducer_names(ddp)
    return [names[i] if i < len(names) else f"#{i}" for i in map(int, m.group(1).split())]


def install(ddp_module) -> None:
    """Wraps DistributedDataParallel.__init__ and forward (once)."""
    cls = ddp_module.DistributedDataParallel
    if getattr(cls.__init__, "_flbridge", False):
        return
    init, forward = cls.__init__, cls.forward

    signature = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self, module, *args, **kwargs):
        if _on_fl(module):
            bound = signature.bind(self, module, *args, **kwargs)
            given = bound.arguments
            if given.get("static_graph"):
                given["static_graph"] = False
                warnings.warn(f"flbridge: DistributedDataParallel(static_graph=True) runs as static_graph=False "
                              f"on fl (the same gradients; {WHY})", IntegrationWarning, stacklevel=2)
            if given.get("find_unused_parameters"):
                given["find_unused_parameters"] = False
                warnings.warn(f"flbridge: DistributedDataParallel(find_unused_parameters=True) runs as "
                              f"find_unused_parameters=False on fl ({WHY}). The gradients are the same when every "
                              f"parameter takes part in the loss; freeze any that does not "
                              f"(requires_grad_(False)).", IntegrationWarning, stacklevel=2)
                self._flbridge_unused_off = True
            return init(*bound.args, **bound.kwargs)
        return init(self, module, *args, **kwargs)

    @functools.wraps(forward)
    def forward_(self, *args, **kwargs):
        try:
            return forward(self, *args, **kwargs)
        except RuntimeError as e:
            if not getattr(self, "_flbridge_unused_off", False) or "finished reduction" not in str(e):
                raise
            missing = _unused_names(self, str(e))
            raise IntegrationError(
                f"flbridge: DistributedDataParallel on fl runs with find_unused_parameters=False ({WHY}), and the "
                f"last backward left parameters without a gradient: {', '.join(missing) or '(see the message below)'}. "
                f"Freeze them (requires_grad_(False)) or make them take part in the loss.",
                library="torch.nn.parallel.DistributedDataParallel", feature="find_unused_parameters") from e

    __init__._flbridge = True
    cls.__init__, cls.forward = __init__, forward_
