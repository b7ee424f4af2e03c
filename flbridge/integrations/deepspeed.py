"""DeepSpeed on fl: `import flbridge` makes fl DeepSpeed's accelerator.

DeepSpeed picks its accelerator from a fixed list (`DS_ACCELERATOR` accepts
only its built-in names) and binds it while `import deepspeed` runs: every
`deepspeed.ops.op_builder.<Name>Builder` name and the modules that import
them get the accelerator's builder classes, and `runtime/utils.py` keeps the
accelerator's `memory_reserved` functions.  `set_accelerator()` comes too
late for those.  So flbridge installs its accelerator (deepspeed_accelerator)
at the one moment that has no such bindings yet:

* **flbridge imported first**: an import hook (flbridge.integrations.hooks)
  runs right after `deepspeed.accelerator.real_accelerator` has executed,
  before anything asked it for an accelerator, and sets fl's.  DeepSpeed
  never makes its CPU accelerator; every import-time binding is fl's.
* **deepspeed imported first**: flbridge sets its accelerator, then rebinds
  what DeepSpeed's import bound to the old one: each builder name whose
  value is the old accelerator's builder, and each bound method of the old
  accelerator, in every loaded `deepspeed.*` module.  Two function defaults
  evaluated at DeepSpeed's import keep the old accelerator's values
  (`PartitionedTensor.from_meta(device=...)`, pipeline parallelism;
  `InferenceEngine.compile(backend=...)`): import flbridge first for those.

The choice follows `DS_ACCELERATOR`: unset or `fl`, fl is taken when a chip
is usable (`torch.fl.is_available()`); any other value is left to DeepSpeed.
"""
from __future__ import annotations

import os
import sys
import types

import torch

from ..errors import IntegrationError

MODULE = "deepspeed.accelerator.real_accelerator"
STATE = types.SimpleNamespace(installed=None, rebound=[])   # installed: "before" | "after" (deepspeed's import)


def on_import(real_accelerator) -> None:
    """The hook: `real_accelerator` has executed (or was already loaded)."""
    choice = os.environ.get("DS_ACCELERATOR")
    if choice not in (None, "", "fl"):
        return
    if not torch.fl.is_available():
        if choice == "fl":
            raise IntegrationError("DS_ACCELERATOR=fl, but no fl device is usable (flbridge found no working device "
                                   "spec; `flbridge doctor` says why)", library="deepspeed", feature="accelerator")
        return
    from .deepspeed_accelerator import FL_Accelerator
    old = real_accelerator.ds_accelerator
    if isinstance(old, FL_Accelerator):
        return
    new = FL_Accelerator()
    real_accelerator.set_accelerator(new)
    if old is None:
        STATE.installed = "before"
    else:
        STATE.installed = "after"
        STATE.rebound = rebind(old, new)


def rebind(old, new) -> list:
    """Points what `import deepspeed` bound to the `old` accelerator at `new`:
    op builder names and bound methods in every loaded deepspeed module.
    Returns the (module, name) pairs changed."""
    ops_pkg = sys.modules.get("deepspeed.ops.op_builder")
    bound = {}
    if ops_pkg is not None:
        bound = {k: v for k, v in vars(ops_pkg).items()
                 if k.endswith("Builder") and k not in ("OpBuilder", "CUDAOpBuilder") and isinstance(v, type)}
    changed = []
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not (mod_name == "deepspeed" or mod_name.startswith("deepspeed.")):
            continue
        if mod_name.startswith("deepspeed.ops.op_builder."):
            continue   # where builder classes are defined, per accelerator: not bindings
        d = vars(mod)
        for k, v in list(d.items()):
            if k in bound and v is bound[k]:
                d[k] = new.get_op_builder(k)
            elif isinstance(v, types.MethodType) and v.__self__ is old:
                d[k] = getattr(new, v.__func__.__name__)
            else:
                continue
            changed.append((mod_name, k))
    ops = sys.modules.get("deepspeed.ops")
    if ops is not None:
        vars(ops).pop("__compatible_ops__", None)   # probed with the old builders: probe again when asked
    return changed
