"""The chips of this process: the table of device slots and the current fl
device (table), one chip's spec, runtime, allocator and route cache (chip),
a slot whose spec failed (unavailable), per-chip counters (stats), and
torch.load straight onto a chip (checkpoint)."""
from . import checkpoint
from .chip import Chip
from .stats import ChipStats
from .table import (CURRENT_DEVICE_HOOKS, chip_at, chip_for, chips, current_device, device_count, install,
                    is_initialized, is_registered, lazy_init, mark_registered, set_current_index, set_device,
                    set_lazy_init, torch_device, usable_chips)
from .unavailable import UnavailableChip
