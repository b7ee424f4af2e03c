"""Imports flbridge and deepspeed in the order given on the command line
("before": flbridge first; "after"; "naive": deepspeed's CPU accelerator,
then fl's installed with set_accelerator() alone, as a user could) and
prints, as JSON, which accelerator DeepSpeed uses and every import-time
binding still pointing at another accelerator."""
import json
import os
import sys
import types

if sys.argv[1] == "before":
    import flbridge  # noqa: F401
    import deepspeed
elif sys.argv[1] == "after":
    import deepspeed
    import flbridge  # noqa: F401,F811
else:
    os.environ["DS_ACCELERATOR"] = "cpu"    # flbridge leaves DeepSpeed's choice alone
    import deepspeed  # noqa: F401
    import flbridge  # noqa: F401,F811
    from deepspeed.accelerator import set_accelerator

    from flbridge.integrations.deepspeed_accelerator import FL_Accelerator
    set_accelerator(FL_Accelerator())

import deepspeed.ops.op_builder as ob
import deepspeed.runtime.utils as ru
from deepspeed.accelerator import get_accelerator

from flbridge.errors import IntegrationError
from flbridge.integrations import deepspeed as fl_ds

acc = get_accelerator()
names = [k for k in vars(ob) if k.endswith("Builder") and k not in ("OpBuilder", "CUDAOpBuilder")]
stale = []
for mod_name, mod in list(sys.modules.items()):
    if mod is None or not mod_name.startswith("deepspeed") or mod_name.startswith("deepspeed.ops.op_builder."):
        continue
    for k, v in list(vars(mod).items()):
        if isinstance(v, types.MethodType) and isinstance(v.__self__, type(acc).__mro__[1]) and v.__self__ is not acc:
            stale.append(f"{mod_name}.{k}: bound to {type(v.__self__).__name__}")
        elif (k in names and isinstance(v, type) and v.__module__.startswith("deepspeed.ops.op_builder.cpu")
              and v is not acc.get_op_builder(k)):   # bound through the CPU accelerator at import
            stale.append(f"{mod_name}.{k}: {v.__module__}.{v.__name__}")
refusal = ""
if acc._name == "fl":
    try:
        ob.FusedLambBuilder().load()
    except (IntegrationError, ValueError) as e:   # ValueError: the CPU accelerator's own refusal
        refusal = str(e)
print(json.dumps({
    "accelerator": type(acc).__name__, "installed": fl_ds.STATE.installed, "rebound": len(fl_ds.STATE.rebound),
    "stale": stale, "fused_adam": type(ob.FusedAdamBuilder()).__module__,
    "memory_reserved_owner": type(ru.torch_memory_reserved.__self__).__name__,
    "shm_builder": repr(acc.create_op_builder("ShareMemCommBuilder")),
    "cpu_adam": ob.CPUAdamBuilder.__module__,
    "refusal": refusal, "device_name": acc.device_name(0), "backend": acc.communication_backend_name(),
    "bf16": acc.is_bf16_supported(), "fp16": acc.is_fp16_supported(), "fp64": acc.is_fp64_supported(),
}))
