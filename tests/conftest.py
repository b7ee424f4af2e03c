"""Test session setup.

The simulators run in strict mode for the whole session: a call flbridge
sends that the chip cannot take aborts the test process, so a passing run
proves the router never sends one.  (Tests of the simulators themselves,
which make invalid calls on purpose, switch it off for their private copy.)
"""
import os
import sys

for _chip in ("X1SIM", "TH1SIM"):
    os.environ.setdefault(f"{_chip}_STRICT", "1")

from flbridge._paths import source_root  # noqa: E402

_root = source_root()
if _root is not None:
    # A checkout: make sure the simulators match their sources (incremental).
    sys.path.insert(0, str(_root / "native_sim"))
    import build as _native_build  # noqa: E402

    _native_build.build()
    sys.path.pop(0)
