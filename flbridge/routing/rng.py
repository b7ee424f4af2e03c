"""The chips' random numbers: a counter-based generator state per chip,
owned by flbridge, as PyTorch's CUDA generator is (docs/device.md, "Random
numbers").

A chip whose spec names `runtime.rng_words` generates random numbers the
way a GPU does: its kernels keep no state and take the caller's `(seed,
offset)` (the C parameters an op entry names under `rng`).  Its generator
is an :class:`FlGenerator`: a seed, and an offset (in 32-bit words, a
multiple of 4) that every random call advances by what it consumes, so
`torch.fl.manual_seed`, `get_rng_state`/`set_rng_state` (16 bytes: seed and
offset, CUDA's layout), `fork_rng` and activation checkpointing replay a
sequence of calls exactly.  Random ops the chip has no kernel for run on
the host from a CPU generator seeded from the same state, and advance the
offset by one Philox block, so they replay too.  A graph capture records
each call's offset relative to the capture's start and re-points them at
every replay (flbridge.graphs), as CUDA graphs do with their philox offsets.

A chip without `rng_words` keeps a CPU `torch.Generator` (random ops run on
the host, from it).

`FlGenerator` is a `torch.Generator` (a CPU one underneath, used only for
those host draws), so it can be passed as `generator=`; the dispatcher hands
flbridge a new Python wrapper of the same C++ generator, so generators are
found again by their `_cdata`.
"""
from __future__ import annotations

import os
import threading
import weakref

import torch

from ..devices import chip_for, current_device

DEFAULT_SEED = 67280421310721       # torch's default seed (CPU and CUDA)
MASK64 = (1 << 64) - 1
HOST_DRAW_WORDS = 4                 # what a random op run on the host consumes: one Philox block

_BY_CDATA: "weakref.WeakValueDictionary[int, FlGenerator]" = weakref.WeakValueDictionary()


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def _seed_value(seed) -> int:
    """A seed as the 64-bit value the kernels take (negatives wrap, as
    torch.Generator.manual_seed's do)."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        try:
            seed = int(seed)
        except (TypeError, ValueError):
            raise TypeError(f"seed must be an integer, got {type(seed).__name__}") from None
    if not -(1 << 63) <= seed <= MASK64:
        raise RuntimeError(f"Overflow when unpacking long: seed {seed} is outside "
                           f"[-0x8000_0000_0000_0000, 0xffff_ffff_ffff_ffff]")
    return seed & MASK64


def _check_offset(offset) -> int:
    offset = int(offset)
    if offset < 0 or offset > MASK64 or offset % 4:
        raise RuntimeError(f"the offset of an fl generator is a word index: a multiple of 4 in "
                           f"[0, 2**64), got {offset}")
    return offset


class FlGenerator(torch.Generator):
    """torch.fl.Generator(device): a generator for random ops on a chip with
    counter-based random kernels: a seed and an offset, like CUDA's philox
    generator.  Pass it as `generator=` to random ops on that chip."""

    def __new__(cls, device=None, *, seed=None, _chip=None):
        return super().__new__(cls)      # a CPU generator underneath (the host draws)

    def __init__(self, device=None, *, seed=None, _chip=None):
        chip = _chip if _chip is not None else chip_for(current_device() if device is None else device)
        self._chip = chip
        self._seed = DEFAULT_SEED if seed is None else _seed_value(seed)
        self._offset = 0
        self._lock = threading.Lock()
        _BY_CDATA[self._cdata] = self

    # ---------------------------------------------- torch.Generator's API

    @property
    def device(self) -> torch.device:
        return self._chip.device

    def manual_seed(self, seed) -> "FlGenerator":
        s = _seed_value(seed)
        with self._lock:
            self._seed, self._offset = s, 0
        return self

    def seed(self) -> int:
        """A new non-deterministic seed (returned), offset 0."""
        s = int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self) -> torch.Tensor:
        """16 bytes: the seed and the offset, little-endian 64-bit integers
        (the layout of CUDA's philox generator state)."""
        with self._lock:
            raw = self._seed.to_bytes(8, "little") + self._offset.to_bytes(8, "little")
        return torch.tensor(list(raw), dtype=torch.uint8)

    def set_state(self, new_state) -> "FlGenerator":
        if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8 or new_state.numel() != 16:
            got = (f"a {new_state.dtype} tensor of {new_state.numel()} elements" if isinstance(new_state, torch.Tensor)
                   else type(new_state).__name__)
            raise RuntimeError(f"an fl generator's state is a torch.uint8 tensor of 16 bytes (seed and offset, "
                               f"from get_rng_state() on the same kind of chip), got {got}")
        raw = bytes(new_state.cpu().tolist())
        seed, offset = int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")
        offset = _check_offset(offset)
        with self._lock:
            self._seed, self._offset = seed, offset
        return self

    def get_offset(self) -> int:
        return self._offset

    def set_offset(self, offset) -> "FlGenerator":
        offset = _check_offset(offset)
        with self._lock:
            self._offset = offset
        return self

    def clone_state(self) -> "FlGenerator":
        g = FlGenerator(_chip=self._chip, seed=self._seed)
        g._offset = self._offset
        return g

    def graphsafe_get_state(self) -> "FlGenerator":
        return self.clone_state()

    def graphsafe_set_state(self, state) -> "FlGenerator":
        if not isinstance(state, FlGenerator):
            raise RuntimeError("graphsafe_set_state takes another fl generator's graphsafe_get_state()")
        with self._lock:
            self._seed, self._offset = state._seed, state._offset
        return self

    def __reduce__(self):
        return (_rebuild, (self._chip.index, self._seed, self._offset))

    def __repr__(self) -> str:
        return f"<torch.fl.Generator {self._chip.device} seed={self._seed} offset={self._offset}>"

    # ---------------------------------------------------------- flbridge's

    def take(self, words: int) -> tuple:
        """(seed, offset) for a call consuming `words`; advances the offset."""
        with self._lock:
            off = self._offset
            self._offset = (off + words) & MASK64
            return self._seed, off

    def give_back(self, offset: int, words: int) -> None:
        """Undoes take() after a call that failed (only if nothing drew since)."""
        with self._lock:
            if self._offset == (offset + words) & MASK64:
                self._offset = offset

    def host_draw(self) -> torch.Generator:
        """The CPU generator for one random op run on the host: seeded from
        (seed, offset), which then advances by HOST_DRAW_WORDS."""
        seed, off = self.take(HOST_DRAW_WORDS)
        torch.Generator.manual_seed(self, _splitmix64(_splitmix64(seed) ^ off) >> 1)
        return self


def _rebuild(index, seed, offset):
    g = FlGenerator(index, seed=seed)
    g._offset = offset
    return g


def counter_based(chip) -> bool:
    """Whether the chip's random kernels are counter-based (its spec names
    runtime.rng_words), so flbridge owns a (seed, offset) for it."""
    spec = getattr(chip, "spec", None) if getattr(chip, "available", False) else None
    return spec is not None and "rng_words" in spec.runtime.roles


# seeds asked for before the chips existed (torch.fl.manual_seed before the
# first use of a device), applied in order once they do: torch.cuda's _lazy_call
_PENDING: list = []


def seed_later(target, seed: int) -> None:
    """Remembers manual_seed (target "current") / manual_seed_all ("all")
    called before initialization."""
    _PENDING.append((target, _seed_value(seed)))


def _apply_pending() -> None:
    from ..devices import table
    pending = list(_PENDING)
    _PENDING.clear()
    chips = table.usable_chips()
    for target, seed in pending:
        for c in chips:
            if target == "all" or c.index == current_device():
                default_generator(c).manual_seed(seed)


def default_generator(chip):
    """The chip's generator: an FlGenerator for a counter-based chip (made
    from the CPU generator the chip started with, keeping its seed), else
    that CPU torch.Generator."""
    if _PENDING:
        _apply_pending()
    g = chip.generator
    if type(g) is FlGenerator or not counter_based(chip):
        return g
    fg = FlGenerator(_chip=chip, seed=g.initial_seed())
    chip.generator = fg
    return fg


def lookup(g):
    """The FlGenerator behind a generator object handed over by the
    dispatcher (a new wrapper of the same C++ generator), or None."""
    if g is None:
        return None
    if type(g) is FlGenerator:
        return g
    return _BY_CDATA.get(getattr(g, "_cdata", None))


def generator_key(g) -> tuple:
    """What a generator argument means for a routing decision: the chip of
    an fl generator, or a host one."""
    fg = lookup(g)
    return ("generator", fg._chip.index if fg is not None else "cpu")


def resolve(chip, g):
    """The FlGenerator a call on `chip` draws from: the chip's own for
    None, else the given fl generator (None if it is not one of this chip's)."""
    if g is None:
        fg = default_generator(chip)
        return fg if type(fg) is FlGenerator else None
    fg = lookup(g)
    return fg if fg is not None and fg._chip is chip else None


def rng_words(rt, numel: int, words_per_element: int) -> int:
    """What a call consumes for `numel` elements, as the runtime's
    rng_words role computes it (0 without calling it when nothing is drawn)."""
    if numel <= 0 or words_per_element <= 0:
        return 0
    fn = rt.__dict__.get("_rng_words")
    if fn is None:
        rf = rt.spec.runtime.roles["rng_words"]
        decl = rt.header.functions[rf.fn]
        order = rf.args or tuple(p.name for p in decl.params)
        out_type = decl.params[order.index("words")].ctype
        fn = rt.__dict__["_rng_words"] = (getattr(rt.lib, rf.fn), order, out_type, rf.fn)
    cfn, order, out_type, name = fn
    out = rt.ffi.new(out_type)
    vals = {"numel": int(numel), "words_per_element": int(words_per_element), "words": out}
    st = cfn(*(vals[n] for n in order))
    if st != rt.ok:
        raise rt.error(st, name)
    return int(out[0])
