"""Decompositions flbridge supplies for ops PyTorch implements only with
device kernels (CUDA), so neither the CPU fallback nor torch._decomp can run
them.  Each is written with ordinary aten ops that take their own routes on
the chip (native where the spec has the kernel).

Also ops whose device-generic (CompositeExplicitAutograd) kernel places its
results as a device run must, which the CPU fallback cannot know: packing a
padded sequence keeps `batch_sizes` on the CPU.

And decompositions of ops that have CPU kernels but none in torch._decomp
(ADDED): the route tries them like PyTorch's own, when their parts run on
the chip.

The RNN cells: for any non-CPU device nn.LSTM / nn.GRU / LSTMCell / GRUCell
call the fused cell ops below (ATen's RNN.cpp); the formulas are those of
ATen's CUDA kernels (aten/src/ATen/native/cuda/RNN.cu), including the
workspace layouts their backward ops read.
"""
from __future__ import annotations

import torch

from .integer import INT8_MATMUL
from .qlinear import QUANTIZED_LINEAR

aten = torch.ops.aten


def _lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias
    if hidden_bias is not None:
        gates = gates + hidden_bias
    i, f, g, o = gates.chunk(4, 1)
    ig, fg, cg, og = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = fg * cx + ig * cg
    hy = og * cy.tanh()
    workspace = torch.cat((ig, fg, cg, og), 1)
    return hy, cy, workspace


def _lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    if grad_hy is None and grad_cy is None:
        z = torch.zeros_like(workspace)
        return z, torch.zeros_like(cx), (z.sum(0) if has_bias else None)
    ig, fg, cg, og = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    gcx = grad_cy if grad_cy is not None else torch.zeros_like(cy)
    if grad_hy is not None:
        gcx = gcx + grad_hy * og * (1 - tanh_cy * tanh_cy)
        gog = grad_hy * tanh_cy * og * (1 - og)
    else:
        gog = torch.zeros_like(og)
    gig = gcx * cg * ig * (1 - ig)
    gfg = gcx * cx * fg * (1 - fg)
    gcg = gcx * ig * (1 - cg * cg)
    grad_cx = gcx * fg
    grad_gates = torch.cat((gig, gfg, gcg, gog), 1)
    return grad_gates, grad_cx, (grad_gates.sum(0) if has_bias else None)


def _gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    if input_bias is not None:
        input_gates = input_gates + input_bias
    if hidden_bias is not None:
        hidden_gates = hidden_gates + hidden_bias
    ir, ii, in_ = input_gates.chunk(3, 1)
    hr, hi, hn = hidden_gates.chunk(3, 1)
    rg = (ir + hr).sigmoid()
    ig = (ii + hi).sigmoid()
    ng = (in_ + rg * hn).tanh()
    hy = ng + ig * (hx - ng)
    workspace = torch.cat((rg, ig, ng, hx, hn), 1)
    return hy, workspace


def _gru_cell_backward(grad_hy, workspace, has_bias):
    rg, ig, ng, hx, hn = workspace.chunk(5, 1)
    gig = grad_hy * (hx - ng) * (1 - ig) * ig
    ghx = grad_hy * ig
    gin = grad_hy * (1 - ig) * (1 - ng * ng)
    ghn = gin * rg
    grg = gin * hn * (1 - rg) * rg
    grad_input_gates = torch.cat((grg, gig, gin), 1)
    grad_hidden_gates = torch.cat((grg, gig, ghn), 1)
    if has_bias:
        return grad_input_gates, grad_hidden_gates, ghx, grad_input_gates.sum(0), grad_hidden_gates.sum(0)
    return grad_input_gates, grad_hidden_gates, ghx, None, None


def _device_generic(op):
    def run(*args, **kwargs):
        return op._op_dk(torch._C.DispatchKey.CompositeExplicitAutograd, *args, **kwargs)
    return run


DEVICE_ONLY = {
    aten._pack_padded_sequence.default: _device_generic(aten._pack_padded_sequence.default),
    aten._thnn_fused_lstm_cell.default: _lstm_cell,
    aten._thnn_fused_lstm_cell_backward_impl.default: _lstm_cell_backward,
    aten._thnn_fused_gru_cell.default: _gru_cell,
    aten._thnn_fused_gru_cell_backward.default: _gru_cell_backward,
}


def _weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim):
    """w = g * v / ||v|| (the norm over every dim but `dim`, shaped like g):
    the gradients of v and g (aten/src/ATen/native/WeightNorm.cpp's formulas)."""
    dims = [d for d in range(saved_v.dim()) if d != dim]
    grad_g = (grad_w * saved_v).sum(dims, keepdim=True) / saved_norms
    grad_v = (saved_g / saved_norms) * (grad_w - saved_v * (grad_g / saved_norms))
    return grad_v, grad_g


# ops with a CPU kernel but no torch._decomp decomposition
ADDED = {
    aten._weight_norm_interface_backward.default: _weight_norm_interface_backward,
    **INT8_MATMUL,      # int8 mm/addmm/bmm through the int8 GEMM (integer.py)
    **QUANTIZED_LINEAR,  # quantize_dynamic's Linear through the int8 GEMM (qlinear.py)
}

# random ops through the chip's random kernels, and the full max/min reductions
from .randomops import RANDOM  # noqa: E402
ADDED.update(RANDOM)
