"""Result memory formats PyTorch's meta kernels leave out.

A native kernel's results are allocated with the strides of PyTorch's meta
kernel for the op.  For convolution the meta kernel always answers
contiguous ("meta tensors have no device info", _meta_registrations.py),
while the CPU and CUDA kernels give channels_last results when the input or
the weight is channels_last (mkldnn_conv_use_channels_last /
cudnn_conv_suggest_memory_format), forward and backward alike.  These rules
restore that, so a channels_last network stays channels_last on a chip as
it does on the CPU, whichever route an op takes.
"""
from __future__ import annotations

import torch
from torch._prims_common import suggest_memory_format

aten = torch.ops.aten
_CL = {4: torch.channels_last, 5: torch.channels_last_3d}


def _conv_format(inp, weight):
    """CPU/CUDA's convolution memory format for these operands, or None
    (contiguous)."""
    if not isinstance(inp, torch.Tensor) or inp.dim() not in _CL:
        return None
    cl = _CL[inp.dim()]
    if suggest_memory_format(inp) == cl or (isinstance(weight, torch.Tensor) and suggest_memory_format(weight) == cl):
        return cl
    return None


def _restride(r, fmt):
    if isinstance(r, torch.Tensor) and r.dim() == (4 if fmt is torch.channels_last else 5):
        return torch.empty(tuple(r.shape), dtype=r.dtype, device="meta", memory_format=fmt)
    return r


def _convolution(args, kwargs, res):
    fmt = _conv_format(args[0], args[1])
    return res if fmt is None else _restride(res, fmt)


def _convolution_backward(args, kwargs, res):
    fmt = _conv_format(args[1], args[2])       # (grad_output, input, weight, ...)
    if fmt is None:
        return res
    gi, gw, gb = res
    return _restride(gi, fmt), _restride(gw, fmt), gb


RULES = {aten.convolution.default: _convolution, aten._convolution.default: _convolution,
         aten.convolution_backward.default: _convolution_backward}
