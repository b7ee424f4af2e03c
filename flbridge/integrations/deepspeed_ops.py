"""DeepSpeed's op builders, as the fl accelerator answers them.

A DeepSpeed op builder compiles C++/CUDA sources into a module whose
functions take tensors and read their memory through `data_ptr()`.  An fl
tensor's bytes live in the chip's memory (an opaque device handle), so no
such kernel may ever see one: the CPU accelerator's `fused_adam` segfaults
on fl parameters.  Every builder name therefore gets one of three answers:

* **FusedAdamBuilder**: flbridge's own `multi_tensor_adam` (fused_adam), the same update
  as DeepSpeed's kernel (csrc/adam/multi_tensor_adam.cu, both Adam modes,
  bias correction, float32 math for half-precision tensors) written with
  `torch._foreach_*` ops, which run on the chip through the router.  The
  config's `"optimizer": {"type": "Adam"}` works unchanged; nothing is built.
* **host-side optimizers and I/O** (CPUAdam, CPUAdagrad, CPULion, AsyncIO,
  PinMemory): the CPU accelerator's builders, as DeepSpeed's CUDA
  accelerator does: they run on CPU tensors (the offloaded optimizer state),
  whatever device the model is on.  They are compiled on first use.
* every other builder (deepspeed_builders.RefusedBuilder) refuses when
  DeepSpeed tries to load it, with an IntegrationError naming the config setting that avoids the kernel.
"""
from __future__ import annotations

import sys

HOST_BUILDERS = ("CPUAdamBuilder", "CPUAdagradBuilder", "CPULionBuilder", "AsyncIOBuilder", "PinMemoryBuilder")

_AVOID = {
    "FusedLambBuilder": 'use a torch optimizer: "optimizer": {"type": "AdamW", "params": {...}} in the config, or '
                        "deepspeed.initialize(optimizer=torch.optim.<Name>(...))",
    "FusedLionBuilder": "pass a torch optimizer: deepspeed.initialize(optimizer=torch.optim.<Name>(...)), or "
                        '"optimizer": {"type": "AdamW"} in the config',
    "TransformerBuilder": "build the layers from torch.nn (nn.TransformerEncoderLayer or the model's own) instead "
                          "of deepspeed.ops.transformer.DeepSpeedTransformerLayer",
    "StochasticTransformerBuilder": "build the layers from torch.nn instead of DeepSpeedTransformerLayer",
    "InferenceBuilder": "call deepspeed.init_inference(..., replace_with_kernel_inject=False)",
    "QuantizerBuilder": 'leave ZeRO++ quantization off: "zero_quantized_weights": false, '
                        '"zero_quantized_gradients": false in "zero_optimization"',
    "FPQuantizerBuilder": "leave FP quantization (fp_quantizer, FP8/FP6 weights) off",
    "RandomLTDBuilder": 'leave random-LTD off ("data_efficiency": {"data_routing": {"random_ltd": '
                        '{"enabled": false}}})',
    "DeepCompileBuilder": 'leave DeepCompile off ("compile": {"deepcompile": false})',
    "UtilsBuilder": 'leave the fast checkpoint writer off ("checkpoint": {"writer": null})',
}
_DEFAULT_AVOID = "leave the DeepSpeed feature that needs it off, or use its torch.nn / torch.optim equivalent"


_CACHE: dict = {}


def builder(class_name: str):
    """The builder class the fl accelerator gives for `class_name`."""
    cls = _CACHE.get(class_name)
    if cls is not None:
        return cls
    # imported here, not at the top: DeepSpeed asks while `deepspeed.ops` is being imported
    from . import deepspeed_builders as b
    if class_name == "FusedAdamBuilder":
        cls = b.FusedAdamBuilder
    elif class_name in HOST_BUILDERS:
        from deepspeed.ops.op_builder import cpu
        cls = getattr(cpu, class_name)
    else:
        cls = b.refused(class_name, _real_name(class_name), _AVOID.get(class_name, _DEFAULT_AVOID))
    _CACHE[class_name] = cls
    return cls


def _real_name(class_name: str) -> str:
    """The op's own NAME (e.g. "fused_lamb"), from DeepSpeed's builder module
    that defines `class_name` (imported by the time DeepSpeed asks for it)."""
    prefix = "deepspeed.ops.op_builder."
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not mod_name.startswith(prefix) or "." in mod_name[len(prefix):]:
            continue
        cls = vars(mod).get(class_name)
        if isinstance(cls, type) and getattr(cls, "NAME", None):
            return cls.NAME
    return class_name.removesuffix("Builder").lower()
