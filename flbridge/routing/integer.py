"""int8 matrix products through the chip's int8 GEMM (``aten::_int_mm``).

PyTorch's CPU runs ``mm``/``addmm``/``bmm``/``mv``/``dot`` on int8 tensors and returns
int8: the products summed with wrap-around, i.e. the exact integer result
modulo 256 (``torch.mm(a, b) == (a.long() @ b.long()).to(torch.int8)``).
``aten::_int_mm`` (int8 x int8 -> int32) is the exact sum modulo 2**32, so
narrowing it to int8 gives the same bits for any K, and so do int32
arithmetic for ``addmm``'s ``beta * self + alpha * (mat1 @ mat2)`` and the
narrowing after it (every step is a ring homomorphism onto Z/256).

Nothing here names a chip: each function is a decomposition the route
tries like PyTorch's own (decompositions.ADDED), taken only where the spec
makes every part native -- on a chip whose int8 GEMM is listed as
``aten::_int_mm`` (with ``dtype_quirks`` for a kernel that wants uint8 with
a zero point, docs/spec-format.md) and whose copy kernel narrows int32 to
int8.  Elsewhere they do not qualify and the op goes on down the chain.
Anything but int8 x int8 (and alpha/beta in int8's range) returns NotImplemented,
which calls no op and so never qualifies.
"""
from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import is_fake

aten = torch.ops.aten


def _int8(*ts) -> bool:
    return all(isinstance(t, torch.Tensor) and t.dtype == torch.int8 for t in ts)


def _int8_scalar(v):
    """alpha / beta as PyTorch's int8 kernels use them: truncated to an
    integer, which must fit int8 (else PyTorch raises "value cannot be
    converted to type int8_t without overflow": None, the CPU says it)."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float)) and -128 <= v <= 127:
        return int(v)
    return None


def _no_data(t) -> bool:
    return t.device.type == "meta" or is_fake(t)


def _cpu(op, *args, **kwargs):
    """PyTorch's CPU kernel on these values, the result on their device: for
    a call the route decided to decompose (the decision is per geometry and
    scalar type) whose scalar values this decomposition does not take, so
    PyTorch raises its own error."""
    dev = next(a.device for a in args if isinstance(a, torch.Tensor))
    return op(*[a.cpu() if isinstance(a, torch.Tensor) else a for a in args], **kwargs).to(dev)


def int8_mm(self, mat2):
    if not _int8(self, mat2) or self.dim() != 2 or mat2.dim() != 2:
        return NotImplemented
    return aten._int_mm(self, mat2).to(torch.int8)


def int8_addmm(self, mat1, mat2, *, beta=1, alpha=1):
    if not _int8(self, mat1, mat2) or mat1.dim() != 2 or mat2.dim() != 2:
        return NotImplemented
    b, a = _int8_scalar(beta), _int8_scalar(alpha)
    if b is None or a is None:
        return NotImplemented if _no_data(mat1) else _cpu(aten.addmm.default, self, mat1, mat2, beta=beta, alpha=alpha)
    beta, alpha = b, a
    acc = aten._int_mm(mat1, mat2)
    if alpha != 1:
        acc = acc * alpha
    if beta == 0:       # PyTorch ignores self when beta is 0
        return acc.to(torch.int8)
    bias = self.to(torch.int32)
    if beta != 1:
        bias = bias * beta
    return (acc + bias).to(torch.int8)


def int8_bmm(self, mat2):
    if not _int8(self, mat2) or self.dim() != 3 or mat2.dim() != 3 or self.shape[0] != mat2.shape[0] \
            or self.shape[0] == 0:
        return NotImplemented
    return torch.stack([aten._int_mm(self[i], mat2[i]) for i in range(self.shape[0])]).to(torch.int8)


def int8_mv(self, vec):
    if not _int8(self, vec) or self.dim() != 2 or vec.dim() != 1:
        return NotImplemented
    return aten._int_mm(self, vec.unsqueeze(1)).squeeze(1).to(torch.int8)


def int8_dot(self, tensor):
    if not _int8(self, tensor) or self.dim() != 1 or tensor.dim() != 1:
        return NotImplemented
    return aten._int_mm(self.unsqueeze(0), tensor.unsqueeze(1)).reshape(()).to(torch.int8)


INT8_MATMUL = {
    aten.mv.default: int8_mv,
    aten.dot.default: int8_dot,
    aten.mm.default: int8_mm,
    aten.addmm.default: int8_addmm,
    aten.bmm.default: int8_bmm,
}
