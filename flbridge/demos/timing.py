"""How the demos time the CPU beside a chip."""
from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def one_torch_thread():
    """torch at one thread while a demo times the CPU beside a chip: the
    simulators run one, and on a busy machine torch's other threads wait for
    cores (a 9 ms CPU training step measured 130-830 ms at two threads beside
    other jobs)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
