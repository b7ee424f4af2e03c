"""The op builder classes the fl accelerator hands DeepSpeed
(flbridge.integrations.deepspeed_ops says which name gets which).  Imported
when DeepSpeed first asks for a builder: the base class is DeepSpeed's."""
from __future__ import annotations

from deepspeed.ops.op_builder.builder import OpBuilder

from ..errors import IntegrationError
from .fused_adam import FUSED_ADAM


class FusedAdamBuilder(OpBuilder):
    """`FusedAdamBuilder().load()` on fl: flbridge's multi_tensor_adam (nothing to compile)."""
    BUILD_VAR = "DS_BUILD_FUSED_ADAM"
    NAME = "fused_adam"

    def __init__(self):
        super().__init__(name=self.NAME)

    def absolute_name(self):
        return "flbridge.integrations.fused_adam.FUSED_ADAM"

    def sources(self):
        return []

    def is_compatible(self, verbose=False):
        return True

    def load(self, verbose=False):
        return FUSED_ADAM


# -------------------------------------------------------------- refusals

class RefusedBuilder(OpBuilder):
    """A DeepSpeed kernel that cannot take fl tensors: loading it raises."""
    REFUSED = True
    NAME = "deepspeed_not_implemented"
    CLASS_NAME = ""
    AVOID = ""

    def __init__(self, name=None):
        super().__init__(name=self.NAME if name is None else name)

    def absolute_name(self):
        return f"deepspeed.ops.{self.NAME}_op"

    def sources(self):
        return []

    def is_compatible(self, verbose=False):
        return False

    def load(self, verbose=False):
        raise IntegrationError(
            f"DeepSpeed's {self.CLASS_NAME} ({self.NAME!r} op) has no fl version: it is a compiled CPU/CUDA kernel, "
            f"which would read an fl tensor's device memory as host memory. To train on fl, {self.AVOID}.",
            library="deepspeed", feature=self.CLASS_NAME)

    jit_load = load


def refused(class_name: str, op_name: str, avoid: str) -> type:
    """A RefusedBuilder subclass standing for DeepSpeed's `class_name`."""
    return type(class_name, (RefusedBuilder,), {"NAME": op_name, "CLASS_NAME": class_name, "AVOID": avoid,
                                                 "__module__": __name__})
