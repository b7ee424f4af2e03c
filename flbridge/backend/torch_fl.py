"""`torch.fl`: the device module of the fl devices, with torch.cuda's names
and signatures (memory statistics, RNG state, streams and events, device
properties).  Registered by flbridge.backend.registration.register()."""
from __future__ import annotations

import types

import torch

from .. import graphs as _graphs
from ..devices import chip_for, current_device, lazy_init, set_current_index, set_device
from ..devices import table as devices
from ..routing import FlGenerator, counter_based, default_generator, seed_later
from . import streams as _streams


class _DeviceProperties:
    def __init__(self, chip):
        s = chip.spec
        self.name = f"{s.vendor} {s.chip_model}"
        self.device_type = s.device_type
        self.vendor = s.vendor
        self.chip_model = s.chip_model
        self.driver_version = s.driver_version
        info = chip.runtime.mem_info()
        self.total_memory = info[1] if info else (s.capabilities.memory_total_bytes or 0)
        self.memory_bandwidth_gbps = s.capabilities.bandwidth_gbps
        self.dtypes = tuple(s.capabilities.dtypes)
        self.features = tuple(s.capabilities.features)
        self.compute = dict(s.capabilities.compute)
        self.multi_processor_count = int(s.capabilities.compute.get("compute_units", 1) or 1)
        self.major, self.minor = 1, 0
        self.index = chip.index

    def __repr__(self):
        return (f"_FlDeviceProperties(name={self.name!r}, device_type={self.device_type!r}, "
                f"driver_version={self.driver_version!r}, total_memory={self.total_memory // (1 << 20)}MB, "
                f"dtypes={[str(d).replace('torch.', '') for d in self.dtypes]}, features={list(self.features)})")


class _DeviceContext:
    """torch.fl.device(i): makes fl:i the current fl device within the block."""

    def __init__(self, device):
        self.idx = chip_for(device).index if device is not None else None
        self.prev = None

    def __enter__(self):
        self.prev = current_device()
        if self.idx is not None:
            set_current_index(self.idx)
        return self

    def __exit__(self, *exc):
        set_current_index(self.prev)
        return False


def _chip(device):
    return chip_for(current_device() if device is None else device)


def _gen(device):
    return default_generator(_chip(device))


def _fmt(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


class FlModule(types.ModuleType):
    """torch.fl"""

    def __init__(self):
        super().__init__("torch.fl", "flbridge's fl devices (one per registered chip)")

    # ------------------------------------------------------------ devices

    @staticmethod
    def is_available() -> bool:
        lazy_init()
        return bool(devices.usable_chips())

    @staticmethod
    def is_initialized() -> bool:
        return devices.is_initialized()

    @property
    def _initialized(self) -> bool:
        # torch.utils.checkpoint saves and restores a device's RNG state only
        # when `getattr(torch.<device>, "_initialized", False)` (torch.cuda's
        # module global); without it a recomputed forward draws new dropout masks
        return devices.is_initialized()

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def _lazy_init() -> None:
        pass

    @staticmethod
    def init() -> None:
        lazy_init()

    @staticmethod
    def device_count() -> int:
        lazy_init()
        return devices.device_count()

    current_device = staticmethod(current_device)
    set_device = staticmethod(set_device)
    device = _DeviceContext

    @staticmethod
    def get_device_name(device=None) -> str:
        c = _chip(device)
        return f"{c.spec.vendor} {c.spec.chip_model}"

    @staticmethod
    def get_device_properties(device=None):
        return _DeviceProperties(_chip(device))

    @staticmethod
    def get_device_capability(device=None):
        return (1, 0)

    @staticmethod
    def synchronize(device=None) -> None:
        if device is None:
            for c in devices.chips():
                c.runtime.synchronize()
        else:
            _chip(device).runtime.synchronize()

    # ------------------------------------------------------------- memory

    @staticmethod
    def memory_allocated(device=None) -> int:
        return _chip(device).allocator.allocated

    @staticmethod
    def max_memory_allocated(device=None) -> int:
        return _chip(device).allocator.peak

    @staticmethod
    def memory_reserved(device=None) -> int:
        c = _chip(device)
        return c.allocator.allocated + c.allocator.cached

    @staticmethod
    def max_memory_reserved(device=None) -> int:
        return _chip(device).allocator.peak_reserved

    @staticmethod
    def reset_peak_memory_stats(device=None) -> None:
        _chip(device).allocator.reset_peak()

    reset_max_memory_allocated = reset_peak_memory_stats

    @staticmethod
    def reset_accumulated_memory_stats(device=None) -> None:
        """Zeroes the counters memory_stats() accumulates (device allocs and
        frees, OOM retries, OOMs)."""
        a = _chip(device).allocator
        a.retries = a.ooms = a.device_allocs = a.device_frees = 0
    reset_max_memory_cached = reset_peak_memory_stats

    @staticmethod
    def mem_get_info(device=None) -> tuple:
        """(free, total) bytes of the device, from the runtime when it can
        tell, else the spec's capacity minus what flbridge holds."""
        c = _chip(device)
        info = c.runtime.mem_info()
        if info is not None:
            return info
        total = c.spec.capabilities.memory_total_bytes or 0
        return max(total - c.allocator.allocated - c.allocator.cached, 0), total

    @staticmethod
    def memory_stats(device=None) -> dict:
        """torch.cuda.memory_stats' keys that a single caching allocator has."""
        a = _chip(device).allocator
        d = {}
        for pool in ("all", "large_pool", "small_pool"):
            d[f"allocated_bytes.{pool}.current"] = a.allocated if pool == "all" else 0
            d[f"allocated_bytes.{pool}.peak"] = a.peak if pool == "all" else 0
            d[f"reserved_bytes.{pool}.current"] = a.allocated + a.cached if pool == "all" else 0
            d[f"reserved_bytes.{pool}.peak"] = a.peak_reserved if pool == "all" else 0
        d["allocation.all.current"] = a.blocks
        d["num_alloc_retries"] = a.retries
        d["num_ooms"] = a.ooms
        d["num_device_alloc"] = a.device_allocs
        d["num_device_free"] = a.device_frees
        return d

    @staticmethod
    def memory_summary(device=None, abbreviated: bool = False) -> str:
        c = _chip(device)
        a = c.allocator
        free, total = FlModule.mem_get_info(c.index)
        rows = [("Allocated memory", a.allocated, a.peak), ("Reserved memory", a.allocated + a.cached,
                                                             a.peak_reserved),
                ("Cached (free blocks)", a.cached, None)]
        lines = [f"flbridge memory summary, fl:{c.index} ({c.device_type})", "-" * 60,
                 f"{'':24s} {'current':>14s} {'peak':>14s}"]
        for name, cur, peak in rows:
            lines.append(f"{name:24s} {_fmt(cur):>14s} {(_fmt(peak) if peak is not None else ''):>14s}")
        lines.append(f"{'Device free / total':24s} {_fmt(free):>14s} {_fmt(total):>14s}")
        if not abbreviated:
            lines.append(f"{'Live blocks':24s} {a.blocks:>14d}")
            lines.append(f"{'Device mallocs / frees':24s} {a.device_allocs:>14d} {a.device_frees:>14d}")
            lines.append(f"{'OOM retries / OOMs':24s} {a.retries:>14d} {a.ooms:>14d}")
        return "\n".join(lines)

    @staticmethod
    def empty_cache() -> None:
        for c in devices.chips():
            c.allocator.empty_cache()

    # ---------------------------------------------------------------- RNG
    # Each chip's generator (flbridge.routing.rng): a (seed, offset) like
    # CUDA's philox generator on a chip with counter-based random kernels,
    # else a CPU torch.Generator its random ops draw from on the host.
    # Seeding, states and forks behave as torch.cuda's.

    @staticmethod
    def manual_seed(seed: int) -> None:
        if devices.device_count():
            _gen(None).manual_seed(int(seed))
        else:                       # before the first use: applied at initialization, as torch.cuda does
            seed_later("current", seed)

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        if not devices.device_count():
            seed_later("all", seed)
        for c in devices.chips():
            default_generator(c).manual_seed(int(seed))

    @staticmethod
    def seed() -> None:
        if devices.device_count():
            _gen(None).seed()

    @staticmethod
    def seed_all() -> None:
        for c in devices.chips():
            default_generator(c).seed()

    @staticmethod
    def initial_seed() -> int:
        return _gen(None).initial_seed()

    @staticmethod
    def get_rng_state(device="fl") -> torch.Tensor:
        return _gen(device).get_state()

    @staticmethod
    def set_rng_state(new_state: torch.Tensor, device="fl") -> None:
        _gen(device).set_state(new_state)

    @staticmethod
    def get_rng_state_all() -> list:
        return [default_generator(c).get_state() for c in devices.chips()]

    @staticmethod
    def set_rng_state_all(states) -> None:
        for c, s in zip(devices.chips(), states):
            default_generator(c).set_state(s)

    @property
    def default_generators(self) -> tuple:
        return tuple(default_generator(c) for c in devices.chips())

    @staticmethod
    def Generator(device=None):  # noqa: N802 - torch.Generator's spelling
        """A generator for random ops on fl tensors (pass it as `generator=`).
        torch 2.13 gives a Python backend no hook for
        `torch.Generator(device="fl")`.  On a chip with counter-based random
        kernels this is an fl generator (a seed and an offset, drawn from by
        the chip's kernels); on another chip, whose random ops draw on the
        host, a CPU generator seeded like a new one."""
        c = _chip(device)
        if counter_based(c):
            return FlGenerator(_chip=c)
        return torch.Generator(device="cpu")

    # ----------------------------------------------------- graphs (replay)

    FLGraph = _graphs.FLGraph
    graph = _graphs.graph
    graph_pool_handle = staticmethod(_graphs.graph_pool_handle)
    make_graphed_callables = staticmethod(_graphs.make_graphed_callables)
    is_current_stream_capturing = staticmethod(_graphs.is_current_stream_capturing)
    GraphCaptureError = _graphs.GraphCaptureError

    # ------------------------------------------------------ streams, events

    Stream = _streams.Stream
    Event = _streams.Event
    current_stream = staticmethod(_streams.current_stream)
    default_stream = staticmethod(_streams.default_stream)
    set_stream = staticmethod(_streams.set_stream)
    stream = staticmethod(_streams.stream)


FL_MODULE = FlModule()
