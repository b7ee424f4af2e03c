"""``import flbridge.profiler`` and ``from flbridge.profiler import profile``.

The profiler lives in :mod:`flbridge.observe.profiler` and ``flbridge.profiler``
is loaded on first use (flbridge/__init__.py); this module makes the import
statement find that same module object rather than a second copy.
"""
import sys

from .observe import profiler as _profiler

sys.modules[__name__] = _profiler
