"""FLBRIDGE_LOG: setting the variable is enough to see its lines on stderr,
and a program that configured logging itself sees each line once."""
import contextlib
import io
import logging

import pytest
import torch

import flbridge
from flbridge import config


@contextlib.contextmanager
def root_handlers(*handlers):
    """The root logger with exactly these handlers (none: logging never configured)."""
    root = logging.getLogger()
    saved = root.handlers[:]
    for h in saved:
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    try:
        yield
    finally:
        for h in handlers:
            root.removeHandler(h)
        for h in saved:
            root.addHandler(h)


@pytest.fixture
def log_env(monkeypatch):
    def set_(value):
        monkeypatch.setenv("FLBRIDGE_LOG", value)
        monkeypatch.setenv("FLBRIDGE_FORCE_FALLBACK", r"aten::mul\.Tensor")
        config.reload()
        for c in flbridge.chips():
            c.routes.clear()
    yield set_
    monkeypatch.delenv("FLBRIDGE_LOG", raising=False)
    monkeypatch.delenv("FLBRIDGE_FORCE_FALLBACK", raising=False)
    config.reload()
    for c in flbridge.chips():
        c.routes.clear()


def _ops(dev):
    a = torch.randn(4).to(dev)
    a + a            # native
    a * a            # forced to the CPU


def test_the_variable_alone_prints_lines_on_stderr(x1, log_env, capsys):
    log_env("dispatch,fallback")
    with root_handlers():
        _ops(x1)
    err = capsys.readouterr().err
    assert "flbridge: dispatch aten::add.Tensor on xpu:x1: native x1_add\n" in err
    assert "flbridge: fallback aten::mul.Tensor on xpu:x1: forced to the CPU by FLBRIDGE_FORCE_FALLBACK" in err


def test_configured_logging_gets_each_line_once(x1, log_env, capsys):
    log_env("fallback")
    buf = io.StringIO()
    h = logging.StreamHandler(buf)
    with root_handlers(h):
        _ops(x1)
    assert buf.getvalue().count("fallback aten::mul.Tensor on xpu:x1") == 1
    assert "dispatch" not in buf.getvalue()                     # topics not asked for stay silent
    assert "flbridge:" not in capsys.readouterr().err


def test_without_the_variable_nothing_is_printed(x1, log_env, capsys):
    log_env("")
    with root_handlers():
        _ops(x1)
    assert "flbridge: " not in capsys.readouterr().err
    assert not any(isinstance(h, config._StderrHandler) for h in logging.getLogger("flbridge").handlers)
