"""Dynamo's guards on fl tensors, less the ones an XPUTensor makes redundant.

For every traceable-subclass input Dynamo guards the outer tensor (type,
dtype, device, sizes, strides, requires_grad), then the subclass's flatten
metadata and attribute list (two Python calls per tensor per call), then each
inner tensor as a tensor of its own.  For an XPUTensor all but the first are
implied by it: the one inner tensor is its stand-in (:mod:`flbridge.tensor.traceable`),
made from the XPUTensor's own geometry and dropped whenever that changes;
the metadata is always None and the attribute list always ``["_fl"]``.
Checked on every call, they cost about 10 guard nodes per fl tensor (a
2-layer encoder's guard tree: 827 nodes on fl, 550 on the CPU, 575 without
them), two of them Python calls; the optimizer step of a small GPT has 140
tensor inputs.

:func:`drop_redundant` is a guard filter (the ``guard_filter_fn`` protocol of
``torch.compile(options=...)``) that keeps every guard but those; it is
applied to frames with a traceable subclass among their inputs, after (and
together with) a filter the user passed.
"""
from __future__ import annotations

import functools

import torch

from ..tensor import XPUTensor

_ATTRS = ["_fl"]


def drop_redundant(entries) -> list:
    """For each GuardFilterEntry: keep it (True) unless an XPUTensor's outer guards imply it."""
    outer = {e.name for e in entries if e.has_value and type(e.value) is XPUTensor}
    if not outer:
        return [True] * len(entries)
    keep = []
    for e in entries:
        name = e.name
        if name.endswith("._fl") and name[:-4] in outer:
            v = e.value if e.has_value else None
            keep.append(not (type(v) is torch.Tensor and "_st" in v.__dict__))
        elif name in outer:
            keep.append(e.guard_type != "TENSOR_SUBCLASS_METADATA_MATCH")
        elif name.endswith(".__tensor_flatten__()[0]") and name[:-24] in outer:
            keep.append(not (e.guard_type == "EQUALS_MATCH" and e.has_value and e.value == _ATTRS))
        else:
            keep.append(True)
    return keep


def _with_user_filter(user):
    if user is None:
        return drop_redundant

    def both(entries):
        return [a and b for a, b in zip(user(entries), drop_redundant(entries))]
    return both


def _has_subclass_input(output_graph) -> bool:
    for g in getattr(output_graph, "guards", None) or ():
        if g.create_fn_name() == "TENSOR_SUBCLASS_METADATA_MATCH":
            return True
    return False


def install() -> None:
    """Dynamo's guard builder applies :func:`drop_redundant` to frames with
    subclass inputs (once per process; Dynamo must be imported)."""
    from torch._dynamo.guards import CheckFunctionManager
    init = CheckFunctionManager.__init__
    if getattr(init, "_flbridge", False):
        return

    @functools.wraps(init)
    def __init__(self, f_code, output_graph, cache_entries=None, guard_fail_fn=None, guard_filter_fn=None,
                 *args, **kwargs):
        if output_graph is not None and _has_subclass_input(output_graph):
            guard_filter_fn = _with_user_filter(guard_filter_fn)
        init(self, f_code, output_graph, cache_entries, guard_fail_fn, guard_filter_fn, *args, **kwargs)
    __init__._flbridge = True
    CheckFunctionManager.__init__ = __init__
