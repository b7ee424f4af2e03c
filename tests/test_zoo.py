"""Real models, unchanged, on every chip against the CPU: ResNet-18 and
MobileNetV3-Small as their papers define them (tests/zoo_models.py;
inference and a training step), a GPT with a tied embedding trained 20
steps, and an LSTM tagger.  Random weights; nothing is downloaded.

How close is close enough for the vision models: a chip sums in other
orders than the CPU (blocked GEMM, NHWC convolution, its own reductions), so
its results differ by rounding, and how far rounding can move a result
depends on the model: batch norm over a few values, or a ReLU whose input is
near zero, amplifies it.  So each quantity (logits, loss, every gradient,
every batch-norm statistic) is also computed on the CPU in float64, and the
chip's distance from that is held to the distance of the CPU in the chip's
dtype (float32, or float16 on x1), in the Frobenius norm:

    |chip - f64| <= K * |cpu - f64| + eps(dtype) * |f64|

Over three input batches the chip's error was at most 2.6x the CPU's
(float32 and float16 alike); K = 6 leaves room for other machines'
accumulation orders (the simulators are built with -march=native), while a
wrong kernel, a lost write or a wrong route gives errors orders of magnitude
above rounding.  The eps term covers quantities that are zero in exact
arithmetic (the bias of a batch norm followed by another one gets only
rounding noise as its gradient) or that the CPU happens to get exactly.
(Batch 4: with batch 2, resnet18's last batch norms see 8 values each and
the float32 CPU itself is 1.7% away from float64 on some gradients.)
"""
import copy
import functools
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import flbridge
from flbridge.demos.models import TinyGPT, token_batch
from tests.zoo_models import MODELS

pytestmark = pytest.mark.slow

CHIP_DTYPES = {"xpu:x1-v2": torch.float32, "xpu:x1": torch.float16, "xpu:th1": torch.float32}
VISION = ["resnet18", "mobilenet_v3_small"]
K = 6.0


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flbridge.FallbackWarning)
        yield


def _batch(dtype):
    g = torch.Generator().manual_seed(1)
    return torch.randn(4, 3, 64, 64, generator=g).to(dtype), torch.tensor([0, 3, 7, 9])


@functools.cache
def _pristine(name, dtype):
    """The model in `dtype`, never run: random weights (seed 0), batch-norm
    statistics from one calibration batch so inference sees realistic
    activations, and dropout off (a chip draws its own random numbers, so
    dropout masks differ from the CPU's by design, as on CUDA)."""
    torch.manual_seed(0)
    model = MODELS[name](num_classes=10)
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    with torch.no_grad():
        model.train()(torch.randn(8, 3, 64, 64, generator=torch.Generator().manual_seed(2)))
    return model.to(dtype)


def _fresh(name, dtype):
    return copy.deepcopy(_pristine(name, dtype))


def _to_f64(t):
    return t.detach().cpu().double()


def _infer(model, x):
    model.eval()
    with torch.no_grad():
        return {"logits": _to_f64(model(x))}


def _train_step(model, x, y):
    model.train()
    logits = model(x)
    loss = F.cross_entropy(logits if logits.dtype == torch.float64 else logits.float(), y)
    loss.backward()
    out = {"loss": _to_f64(loss)}
    out.update({f"grad of {n}": _to_f64(p.grad) for n, p in model.named_parameters()})
    out.update({f"buffer {n}": _to_f64(b) for n, b in model.named_buffers() if b.is_floating_point()})
    return out


@functools.cache
def _cpu_reference(name, dtype, what):
    """(CPU in `dtype`, CPU in float64) results, each from its own copy."""
    x, y = _batch(dtype)
    run = _infer if what == "infer" else functools.partial(_train_step, y=y)
    return run(_fresh(name, dtype), x), run(_fresh(name, dtype).double(), x.double())


def _assert_as_close_as_the_cpu(got, cpu, f64, dtype, where):
    eps = torch.finfo(dtype).eps
    assert got.keys() == cpu.keys()
    for key in cpu:
        err_chip = (got[key] - f64[key]).norm().item()
        err_cpu = (cpu[key] - f64[key]).norm().item()
        bound = K * err_cpu + eps * f64[key].norm().item()
        assert err_chip <= bound, (f"{where}: {key}: the chip is {err_chip:.3g} from the float64 result, "
                                   f"the CPU in {dtype} {err_cpu:.3g} (bound {bound:.3g})")


def _chip_params():
    return [pytest.param(n, c, id=f"{n}-{c}") for n in VISION for c in CHIP_DTYPES]


@pytest.mark.parametrize("name,chip", _chip_params())
def test_vision_model_inference_matches_the_cpu(flchips, name, chip):
    dev, dtype = flbridge.torch_device(chip), CHIP_DTYPES[chip]
    flbridge.reset_stats(chip)
    model = _fresh(name, dtype).to(dev)
    x, _ = _batch(dtype)
    got = _infer(model, x.to(dev))
    _assert_as_close_as_the_cpu(got, *_cpu_reference(name, dtype, "infer"), dtype, f"{name} on {chip}")
    assert flbridge.stats(chip)["native_ops"] > 0


@pytest.mark.parametrize("name,chip", _chip_params())
def test_vision_model_training_step_matches_the_cpu(flchips, name, chip):
    dev, dtype = flbridge.torch_device(chip), CHIP_DTYPES[chip]
    model = _fresh(name, dtype).to(dev)
    x, y = _batch(dtype)
    got = _train_step(model, x.to(dev), y.to(dev))
    assert all(p.grad.device == dev for p in model.parameters())
    _assert_as_close_as_the_cpu(got, *_cpu_reference(name, dtype, "train"), dtype, f"{name} on {chip}")
    # the optimizer step on the chip: SGD with momentum, whose first step is p - lr * grad
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    before = [_to_f64(p) for p in model.parameters()]
    opt.step()
    for (n, p), p0 in zip(model.named_parameters(), before):
        expected = p0 - 0.1 * got[f"grad of {n}"]
        atol = 2 * torch.finfo(dtype).eps * (1 + p0.abs().max().item())     # one rounding of the result
        torch.testing.assert_close(_to_f64(p), expected, rtol=0, atol=atol,
                                   msg=lambda m, n=n: f"{name} on {chip}: SGD step of {n}: {m}")


# ------------------------------------------------ a GPT with a tied embedding

def _train_gpt(device, steps=20):
    model = TinyGPT(seed=0).to(device)
    assert model.tok.weight is model.head.weight
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x, y = (t.to(device) for t in token_batch(batch=4, seq=32, seed=0))
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert model.tok.weight is model.head.weight
    return losses, model


@functools.cache
def _gpt_on_cpu():
    losses, model = _train_gpt("cpu")
    return losses, model.state_dict()


@pytest.mark.parametrize("chip", sorted(CHIP_DTYPES))
def test_tied_gpt_trains_20_steps_like_the_cpu(flchips, chip):
    """float32 on every chip (x1 has float32 kernels too): the loss curve
    within 1e-5 of the CPU's at every step (measured: at most 2.4e-6), and
    the tied matrix ends where the CPU's does.  (Not every parameter: the
    key bias's gradient is zero in exact arithmetic, since softmax ignores a
    shift shared by all keys, and Adam scales its rounding noise up to full
    lr-sized steps on either side.)"""
    ref, ref_state = _gpt_on_cpu()
    got, model = _train_gpt(flbridge.torch_device(chip))
    assert ref[-1] < 0.6 * ref[0]                        # it learns
    assert max(abs(a - b) for a, b in zip(ref, got)) < 1e-5, list(zip(ref, got))
    torch.testing.assert_close(model.tok.weight.detach().cpu(), ref_state["tok.weight"], rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------- an LSTM tagger

class Tagger(nn.Module):
    """Token ids -> embedding -> bidirectional LSTM -> a tag per token."""

    def __init__(self, vocab=40, tags=6, dim=16, hidden=24):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden, tags)

    def forward(self, idx):
        h, _ = self.lstm(self.emb(idx))
        return self.out(h)


def _train_tagger(model, device, steps=6):
    g = torch.Generator().manual_seed(3)
    words = torch.randint(0, 40, (5, 9), generator=g)
    tags = words % 6                                      # a rule the tagger can learn
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        logits = model(words.to(device))
        loss = F.cross_entropy(logits.flatten(0, 1), tags.to(device).flatten())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("chip", sorted(CHIP_DTYPES))
def test_lstm_tagger_trains_like_the_cpu(flchips, chip):
    """float32: losses within 1e-5, parameters within 1e-5 + 1e-4 relative
    after six Adam steps (float32 rounding through 9 recurrent steps)."""
    torch.manual_seed(0)
    cpu = Tagger()
    fl = copy.deepcopy(cpu).to(flbridge.torch_device(chip))
    ref, got = _train_tagger(cpu, "cpu"), _train_tagger(fl, flbridge.torch_device(chip))
    assert ref[-1] < ref[0]
    assert max(abs(a - b) for a, b in zip(ref, got)) < 1e-5, list(zip(ref, got))
    for (n, a), b in zip(cpu.named_parameters(), fl.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-4, atol=1e-5, msg=lambda m, n=n: f"{n}: {m}")
