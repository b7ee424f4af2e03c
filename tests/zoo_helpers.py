"""Importing torchvision's models on a CPU-only torch.

The torchvision 0.28 wheel this project tests with may be a CUDA build whose
C extension (`torchvision/_C.so`) cannot load without the CUDA libraries.
torchvision then still imports its Python parts, but its
`_meta_registrations.py` registers fake kernels for `torchvision::nms` and
`torchvision::qnms`, operators the missing extension would have defined, and
`import torchvision` fails with "operator torchvision::nms does not exist".
The models (resnet, mobilenet, ...) are pure Python and need none of the
extension's ops, so when the extension does not load we define the two
operator schemas ourselves (schemas only, no kernel: calling them still
fails, as it would without the extension) and the import goes through.
"""
from __future__ import annotations

import importlib.util
import pathlib
import sys

import torch

# Kept alive for the process: a torch.library.Library removes its
# definitions when it is garbage collected.
_schemas: torch.library.Library | None = None


def _extension_loads(package_dir: pathlib.Path) -> bool:
    # The same load torchvision/extension.py attempts (it swallows the error).
    for lib in package_dir.glob("_C*.so"):
        try:
            torch.ops.load_library(str(lib))
            return True
        except OSError:
            return False
    return False


def import_torchvision():
    """`import torchvision`, defining the schemas its fake registrations need
    when its C extension cannot load here."""
    global _schemas
    if "torchvision" in sys.modules:
        return sys.modules["torchvision"]
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        raise ImportError("torchvision is not installed: pip install -e '.[test]' (it is in the test extra)")
    if not _extension_loads(pathlib.Path(spec.origin).parent) and _schemas is None:
        _schemas = torch.library.Library("torchvision", "DEF")
        _schemas.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _schemas.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    import torchvision
    return torchvision
