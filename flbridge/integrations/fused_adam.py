"""DeepSpeed's fused Adam step (csrc/adam/multi_tensor_adam.cu) in torch
ops: `FusedAdamBuilder().load()` on fl returns FUSED_ADAM.  The
`torch._foreach_*` ops run on the chip through the router, so no compiled
kernel ever sees an fl tensor."""
from __future__ import annotations

import types

import torch


def multi_tensor_adam(chunk_size, noop_flag, tensor_lists, lr, beta1, beta2, eps, step, mode, bias_correction,
                      weight_decay):
    """DeepSpeed's fused Adam step over [grads, params, exp_avgs, exp_avg_sqs]
    (mode 0: L2 regularization, 1: decoupled weight decay as AdamW), in
    float32 for lower-precision tensors as the CUDA kernel computes them."""
    g, p, m, v = tensor_lists
    if not p:
        return
    low = p[0].dtype != torch.float32
    if low:
        g, p32, m, v = ([t.float() for t in lst] for lst in (g, p, m, v))
        m_out, v_out = tensor_lists[2], tensor_lists[3]
    else:
        p32 = p
    bc1 = 1.0 - beta1 ** step if bias_correction else 1.0
    bc2 = 1.0 - beta2 ** step if bias_correction else 1.0
    with torch.no_grad():
        if mode == 0 and weight_decay != 0:
            g = torch._foreach_add(g, p32, alpha=weight_decay)
        torch._foreach_mul_(m, beta1)
        torch._foreach_add_(m, g, alpha=1 - beta1)
        torch._foreach_mul_(v, beta2)
        torch._foreach_addcmul_(v, g, g, value=1 - beta2)
        denom = torch._foreach_div(v, bc2)
        torch._foreach_sqrt_(denom)
        torch._foreach_add_(denom, eps)
        update = torch._foreach_div(m, bc1)
        torch._foreach_div_(update, denom)
        if mode == 1 and weight_decay != 0:
            torch._foreach_add_(update, p32, alpha=weight_decay)
        torch._foreach_add_(p32, update, alpha=-lr)
        if low:
            torch._foreach_copy_(p, p32)
            torch._foreach_copy_(m_out, m)
            torch._foreach_copy_(v_out, v)


FUSED_ADAM = types.SimpleNamespace(multi_tensor_adam=multi_tensor_adam)
