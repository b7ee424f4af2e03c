"""PyTorch Lightning on fl: `Trainer(accelerator="fl")`, and `"auto"` after
`import flbridge`.

Lightning's extension point is its accelerator registry: an `Accelerator`
subclass registered under a name is accepted as `accelerator=<name>`.
flbridge registers `FLAccelerator` as "fl" when Lightning's trainer is
imported (for `lightning.pytorch` and the standalone `pytorch_lightning`).
Three choices of Lightning's `_AcceleratorConnector` name device types
literally, so a registered accelerator alone still trains on the CPU; each
is wrapped to answer for fl and otherwise falls through to Lightning:

* `"auto"` (`_select_auto_accelerator`): tpu, mps, cuda, else cpu; fl where
  it would say cpu and an fl chip is usable.
* one device (`_choose_strategy`): `SingleDeviceStrategy(device="cpu")` for
  every accelerator but cuda and mps; fl's device instead.
* `"16-mixed"` / `"bf16-mixed"` (`_check_and_init_precision`): CUDA autocast
  (disabled with a warning on a machine without CUDA) for every accelerator
  but cpu and mps; fl's autocast and GradScaler instead, after checking the
  chip's spec has the dtype.

`strategy="ddp"`: Lightning takes a device's process group backend from
`torch.distributed.Backend.default_device_backend_map`, where registering
flccl for the fl device put it; `DDPStrategy.determine_ddp_device_ids`
gives fl's single-device modules no device ids (with ids, Lightning wraps
DDP's construction in a `torch.cuda.Stream`).  Each process trains on its
local rank's chip (flbridge/integrations/ranks.py).
"""
from __future__ import annotations

import functools
import importlib

import torch

from ..devices import chip_for
from ..errors import IntegrationError
from . import ranks

NAME = "fl"
_PRECISION_DTYPES = {"16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}


def _parse(devices) -> list:
    """Local device indexes for Lightning's `devices=` (a count, "auto"/-1, or a list of indexes)."""
    if isinstance(devices, str):
        devices = devices.strip()
        if devices == "auto" or devices == "-1":
            return list(range(len(ranks.same_type_chips())))
        if "," in devices:
            return [int(x) for x in devices.split(",") if x.strip()]
        devices = int(devices)
    if isinstance(devices, int):
        if devices == -1:
            return list(range(len(ranks.same_type_chips())))
        if devices < 1:
            raise IntegrationError(f"Trainer(accelerator='fl', devices={devices}): give a number of devices of at "
                                   f"least 1, 'auto' or a list of indexes", library="lightning", feature="devices")
        return list(range(devices))
    return [int(d) for d in devices]


def accelerator_class(base):
    """The fl Accelerator, a subclass of the package's `Accelerator` base."""

    class FLAccelerator(base):
        """Accelerator for flbridge's fl devices (chips of the current chip's type)."""

        def setup_device(self, device: torch.device) -> None:
            if device.type != NAME:
                raise IntegrationError(f"FLAccelerator got device {device}; it runs fl devices",
                                       library="lightning", feature="accelerator")
            torch.fl.set_device(device.index if device.index is not None else torch.fl.current_device())

        def get_device_stats(self, device) -> dict:
            return torch.fl.memory_stats(device)

        def teardown(self) -> None:
            pass

        @staticmethod
        def parse_devices(devices):
            return _parse(devices)

        @staticmethod
        def get_parallel_devices(devices) -> list:
            return [torch.device(NAME, ranks.fl_index(i)) for i in _parse(devices)]

        @staticmethod
        def auto_device_count() -> int:
            return len(ranks.same_type_chips())

        @staticmethod
        def is_available() -> bool:
            return ranks.fl_usable()

        @staticmethod
        def name() -> str:
            return NAME

        @classmethod
        def register_accelerators(cls, accelerator_registry) -> None:
            accelerator_registry.register(cls.name(), cls, description=cls.__name__)

    return FLAccelerator


def on_connector(connector_module) -> None:
    """Hook: <package>.trainer.connectors.accelerator_connector was imported."""
    pkg = connector_module.__name__.split(".trainer.")[0]          # lightning.pytorch | pytorch_lightning
    accelerators = importlib.import_module(f"{pkg}.accelerators")
    registry = accelerators.AcceleratorRegistry
    if NAME in registry:
        return
    fl_cls = accelerator_class(accelerators.Accelerator)
    fl_cls.register_accelerators(registry)
    accelerators.FLAccelerator = fl_cls
    Connector = connector_module._AcceleratorConnector
    orig_auto = connector_module._select_auto_accelerator
    orig_strategy = Connector._choose_strategy
    orig_precision = Connector._check_and_init_precision
    SingleDeviceStrategy = connector_module.SingleDeviceStrategy
    MixedPrecision = connector_module.MixedPrecision

    def is_fl(connector) -> bool:
        flag = connector._accelerator_flag
        return flag == NAME or isinstance(flag, fl_cls) or isinstance(getattr(connector, "accelerator", None), fl_cls)

    @functools.wraps(orig_auto)
    def _select_auto_accelerator():
        choice = orig_auto()
        return NAME if choice == "cpu" and ranks.fl_usable() else choice

    @functools.wraps(orig_strategy)
    def _choose_strategy(self):
        if is_fl(self) and self._num_nodes_flag <= 1 and len(self._parallel_devices) <= 1:
            return SingleDeviceStrategy(device=self._parallel_devices[0])
        return orig_strategy(self)

    @functools.wraps(orig_precision)
    def _check_and_init_precision(self):
        if (is_fl(self) and not isinstance(self._precision_plugin_flag, connector_module.Precision)
                and self._precision_flag in _PRECISION_DTYPES
                and not isinstance(self.strategy, (connector_module.DeepSpeedStrategy, connector_module.FSDPStrategy))):
            self._validate_precision_choice()
            _check_dtype(self._parallel_devices[0] if self._parallel_devices else torch.device(NAME),
                         self._precision_flag)
            return MixedPrecision(self._precision_flag, NAME)
        return orig_precision(self)

    DDPStrategy = importlib.import_module(f"{pkg}.strategies.ddp").DDPStrategy
    orig_ids = DDPStrategy.determine_ddp_device_ids

    @functools.wraps(orig_ids)
    def determine_ddp_device_ids(self):
        if self.root_device.type == NAME:
            return None   # a single-device module: DDP needs no ids (with ids Lightning makes a CUDA stream)
        return orig_ids(self)

    DDPStrategy.determine_ddp_device_ids = determine_ddp_device_ids
    connector_module._select_auto_accelerator = _select_auto_accelerator
    Connector._choose_strategy = _choose_strategy
    Connector._check_and_init_precision = _check_and_init_precision


def _check_dtype(device, precision: str) -> None:
    chip = chip_for(device)
    want = _PRECISION_DTYPES[precision]
    dtypes = chip.spec.capabilities.dtypes
    if want in dtypes:
        return
    other = [p for p, d in _PRECISION_DTYPES.items() if d in dtypes]
    fix = f"precision={other[0]!r}" if other else "precision='32-true'"
    raise IntegrationError(f"Trainer(precision={precision!r}) on {chip.device} ({chip.device_type}): the chip runs "
                           f"{', '.join(str(d).replace('torch.', '') for d in dtypes)}, not "
                           f"{str(want).replace('torch.', '')}. Use {fix} on this chip, or make a chip with that "
                           f"dtype current (torch.fl.set_device('xpu:<name>')) before creating the Trainer.",
                           library="lightning", feature=precision)
