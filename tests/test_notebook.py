"""docs/notebooks/quickstart.ipynb runs in a real Jupyter kernel (nbclient,
kernel `python3`) and shows what it says: the devices, a tensor on a chip, a
chip as the default device, a wrapped model training like the CPU, the
route table, and device memory going back to zero."""
import ast
import re
from pathlib import Path

import pytest
import torch

import flbridge

# starting a kernel and running the notebook takes about 5 s of CPU
pytestmark = pytest.mark.slow

NOTEBOOK = Path(__file__).resolve().parent.parent / "docs" / "notebooks" / "quickstart.ipynb"


@pytest.fixture(scope="module")
def outputs():
    """{cell tag: the cell's stdout and result text}, after running the
    notebook from the repository root."""
    import nbclient
    import nbformat
    from jupyter_client.kernelspec import NoSuchKernel

    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=300,
                                     resources={"metadata": {"path": str(NOTEBOOK.parents[2])}})
    try:
        client.execute()
    except NoSuchKernel:
        pytest.fail("no Jupyter kernel named python3: run `python -m ipykernel install --user`")
    out = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        text = "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout")
        text += "".join(o["data"].get("text/plain", "") for o in cell.outputs if o.output_type == "execute_result")
        for tag in cell.metadata.get("tags", []):
            out[tag] = text
    return out


def test_the_notebook_lists_every_chip(flchips, outputs):
    lines = outputs["devices"].splitlines()
    assert lines == [f"fl:{i} {c.device_type} {torch.fl.get_device_name(i)}" for i, c in enumerate(flbridge.chips())]


def test_the_notebook_puts_a_tensor_on_a_chip_and_computes_there(flchips, outputs):
    x1 = flbridge.torch_device("xpu:x1")
    assert outputs["tensor"] == f"tensor([[ 1.,  3.,  5.],\n        [ 7.,  9., 11.]], device='{x1}')"


def test_the_notebook_context_makes_the_chip_the_default_device(flchips, outputs):
    dev = flbridge.torch_device("xpu:x1-v2")
    assert outputs["context"].split() == [str(dev)] * 3 + ["cpu"]


def test_the_notebook_trains_like_the_cpu(outputs):
    rows = [line.split() for line in outputs["train"].splitlines()[1:]]
    assert [int(r[0]) for r in rows] == list(range(8))
    cpu, chip = [float(r[1]) for r in rows], [float(r[2]) for r in rows]
    assert chip[-1] < 0.9 * chip[0]
    assert max(abs(a - b) for a, b in zip(cpu, chip)) < 1e-5


def test_the_notebook_shows_counters_and_routes(outputs):
    first, *routes = outputs["stats"].splitlines()
    counters = ast.literal_eval(first)
    assert set(counters) == {"native_ops", "fallback_ops", "h2d_bytes", "d2h_bytes"}
    assert counters["native_ops"] > 0 and counters["h2d_bytes"] > 0
    assert routes and any(re.match(r"aten::\S+\s+native\s+\d+\s+th1\w+", r) for r in routes)


def test_the_notebook_memory_goes_back_to_zero(outputs):
    before, after = outputs["memory"].splitlines()
    nums = [int(n) for n in re.findall(r"\d+", before)]
    assert len(nums) == 3 and 0 < nums[0] <= nums[1] and nums[0] <= nums[2]
    assert after == "after del + empty_cache: reserved 0"
