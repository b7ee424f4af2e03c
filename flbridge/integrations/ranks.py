"""Which chip a process's local rank uses.

Launchers hand each process a local rank and libraries bind it to device
`local_rank`, as on CUDA.  The fl indexes of one process name different
chip types (with the shipped specs fl:0 is th1, fl:1 x1), and every rank of
a group must be on the same type, so the integrations number only the chips
of the current chip's type: local device i is the i-th of them, modulo
their count (ranks beyond it share a chip, as processes may share a GPU; the
simulators give each process its own).  Make another type current
(`torch.fl.set_device("xpu:x1")`) before the library binds ranks to use it.
"""
from __future__ import annotations

import torch

from ..devices import chip_at, current_device, lazy_init, usable_chips


def same_type_chips() -> list:
    """The usable chips of the current chip's type, in index order."""
    lazy_init()
    cur = chip_at(current_device())
    chips = usable_chips()
    if cur is None:
        return chips[:1]
    return [c for c in chips if c.device_type == cur.device_type]


def fl_index(local) -> int:
    """The fl index of local device `local` (an int or a digit string, such as
    os.environ["LOCAL_RANK"])."""
    chips = same_type_chips()
    return chips[int(local) % len(chips)].index


def local_index() -> int:
    """The current fl device's position among the chips of its type."""
    cur = current_device()
    for i, c in enumerate(same_type_chips()):
        if c.index == cur:
            return i
    return 0


def fl_usable() -> bool:
    """Whether an fl chip can be used (initializes flbridge, as the first CUDA query does)."""
    return torch.fl.is_available()
