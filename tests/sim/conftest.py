import os

import pytest

from .simhelp import Chip, load_private


def _init(chip, kind, capacity=0):
    # Tests here make invalid calls on purpose: strict mode (read at init)
    # is off for the private copy; test_strict_mode.py covers it in a subprocess.
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.endswith("SIM_STRICT")}
    try:
        st = chip.lib.x1_init(capacity) if kind == "x1" else chip.lib.th1Init(capacity)
    finally:
        os.environ.update(saved)
    assert st == chip.ok, chip.last_error()


def _shutdown(chip, kind):
    chip.free_all()
    (chip.lib.x1_shutdown if kind == "x1" else chip.lib.th1Shutdown)()


@pytest.fixture(scope="module")
def _x1v2_lib(tmp_path_factory):
    return load_private("libx1v2sim.so", "x1", tmp_path_factory.mktemp("x1v2"))


@pytest.fixture(scope="module")
def _x1r1_lib(tmp_path_factory):
    return load_private("libx1sim.so", "x1", tmp_path_factory.mktemp("x1r1"))


@pytest.fixture(scope="module")
def _th1_lib(tmp_path_factory):
    return load_private("libth1sim.so", "th1", tmp_path_factory.mktemp("th1"))


def _chip_fixture(lib, kind):
    chip = Chip(kind, *lib)
    _init(chip, kind)
    chip.reinit = lambda capacity=0: (_shutdown(chip, kind), _init(chip, kind, capacity))
    yield chip
    _shutdown(chip, kind)


@pytest.fixture
def x1(_x1v2_lib):
    """X1 revision 2 runtime (float32 and float16 convolution)."""
    yield from _chip_fixture(_x1v2_lib, "x1")


@pytest.fixture
def x1r1(_x1r1_lib):
    """X1 revision 1 runtime (float16-only convolution)."""
    yield from _chip_fixture(_x1r1_lib, "x1")


@pytest.fixture
def th1(_th1_lib):
    yield from _chip_fixture(_th1_lib, "th1")
