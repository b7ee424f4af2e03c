"""Compiles the simulated chip runtimes (plain C shared libraries) during
`pip install .` and `pip install -e .`.  Everything else is in pyproject.toml.

- editable install: the libraries go to native_sim/build/ in the checkout,
  where the shipped specs point;
- regular install/wheel: they go to flbridge/_bundled/ together with the
  specs and headers, in the same relative layout.
"""
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent


def _native_build():
    sys.path.insert(0, str(HERE / "native_sim"))
    try:
        import build as native_build
    finally:
        sys.path.pop(0)
    return native_build


class build_py_with_simulators(build_py):
    def run(self):
        super().run()
        native = _native_build()
        if getattr(self, "editable_mode", False):
            native.build(HERE / "native_sim" / "build")
            return
        bundle = Path(self.build_lib) / "flbridge" / "_bundled"
        native.build(bundle / "native_sim" / "build", force=True)
        (bundle / "device_specs").mkdir(parents=True, exist_ok=True)
        for spec in (HERE / "device_specs").glob("*.yaml"):
            shutil.copy2(spec, bundle / "device_specs" / spec.name)
        for header in (HERE / "native_sim").glob("*/*_runtime.h"):
            dst = bundle / "native_sim" / header.parent.name
            dst.mkdir(parents=True, exist_ok=True)
            shutil.copy2(header, dst / header.name)


class PlatformDistribution(Distribution):
    # The wheel carries compiled .so files: tag it for this platform.
    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": build_py_with_simulators}, distclass=PlatformDistribution)
