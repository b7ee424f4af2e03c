"""What kind of op an overload is, for the dispatcher: does it need a
kernel (ROUTED), or is it metadata (views, aliases), an op with a handler of
its own (SPECIAL: device crossings, allocation, set_/resize_), a _foreach_
op, a CompositeImplicitAutograd op that only its own decomposition can
answer, or a torch.distributed collective (COLLECTIVE)?  Decided from the
schema and tags alone, once per overload."""
from __future__ import annotations

import torch

from ..specs import info, reaches_dispatch

aten = torch.ops.aten

ROUTED, VIEW, ALIAS, INPLACE_VIEW, FOREACH, COMPOSITE, SPECIAL, COLLECTIVE = range(8)

# torch.distributed's ops (c10d.allreduce_, _c10d_functional.all_reduce, ...)
COLLECTIVE_NAMESPACES = ("c10d", "_c10d_functional", "_c10d_functional_autograd")

# ops with a handler of their own (flbridge.routing.dispatch maps each name to it)
SPECIAL_OPS = {
    aten.copy_.default: "copy_",
    aten._to_copy.default: "to_copy",
    aten._local_scalar_dense.default: "item",
    aten.empty_like.default: "empty_like",
    aten.new_empty.default: "empty_like",
    aten.new_empty_strided.default: "empty_like",
    aten.zeros_like.default: "full_like",
    aten.ones_like.default: "full_like",
    aten.full_like.default: "full_like",
    aten.new_zeros.default: "new_fill",
    aten.new_ones.default: "new_fill",
    aten.new_full.default: "new_fill",
    aten.lift_fresh.default: "identity",
    aten.set_.source_Tensor: "set_",
    aten.set_.default: "set_",
    aten.set_.source_Storage: "set_",
    aten.set_.source_Storage_storage_offset: "set_",
    aten.resize_.default: "resize_",
    aten._fused_sdp_choice.default: "sdp_choice",
    # lazy conjugation/negation is a flag bit on the tensor, which fl tensors
    # do not carry: these "views" are computed (correct values; writes through
    # them do not reach the base)
    aten._conj.default: "conj",
    aten._neg_view.default: "neg_view",
    aten.record_stream.default: "nothing",
}
_ALIASES = {aten.detach.default, aten.alias.default}
_VIEWS = {aten._unsafe_view.default, aten._reshape_alias.default}

_KINDS: dict = {}


def kind(func) -> int:
    k = _KINDS.get(func)
    if k is None:
        k = _KINDS[func] = _classify(func)
    return k


def _classify(func) -> int:
    if func.namespace in COLLECTIVE_NAMESPACES:
        return COLLECTIVE
    if func in SPECIAL_OPS:
        return SPECIAL
    if func in _ALIASES:
        return ALIAS
    if func in _VIEWS:
        return VIEW
    if not reaches_dispatch(func):
        return COMPOSITE
    if func._schema.name.startswith("aten::_foreach_"):
        return FOREACH
    if torch.Tag.inplace_view in func.tags:
        return INPLACE_VIEW
    opi = info(func)
    if opi.is_view and not opi.is_mutating:
        return VIEW
    return ROUTED
