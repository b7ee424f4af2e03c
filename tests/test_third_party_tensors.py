"""Tensor idioms of third-party programs on fl, as on CUDA: storages
(data_ptr, printing, safetensors), every _foreach_ op the optimizers use,
channels_last convolutions, coverage reports of programs that mix devices,
and nested / quantized tensors (TransformerEncoder's fast path works, the
rest gets one clear error)."""
import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import flbridge
from flbridge.errors import NestedNotSupported, QuantizedNotSupported

aten = torch.ops.aten


# ------------------------------------------------------------- storages

def test_untyped_storage_of_an_fl_tensor_works_like_a_cuda_ones(x1):
    t = torch.arange(6.0).to(x1)
    v = t[2:]
    s = t.untyped_storage()
    assert s.data_ptr() == t.data_ptr() and v.untyped_storage().data_ptr() == s.data_ptr()
    assert v.data_ptr() - v.untyped_storage().data_ptr() == 2 * t.element_size()
    assert torch.empty(0, device=x1).untyped_storage().data_ptr() == 0
    assert s.nbytes() == 24 and s.device == x1
    assert bytes(s.cpu()) == bytes(torch.arange(6.0).untyped_storage())
    assert s.tolist() == torch.arange(6.0).untyped_storage().tolist()
    assert "of size 24" in repr(s) and "device=fl:1" in repr(s)
    typed = t.storage()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # TypedStorage is deprecated
        assert typed[3] == 3.0 and "3.0" in str(typed)
    c = s.clone()
    c.fill_(0)
    assert t[1].item() == 1.0 and c.tolist() == [0] * 24
    u = torch.tensor([], device=x1).set_(s, 1, (2,), (2,))   # a tensor over another's storage
    assert u.tolist() == [1.0, 3.0]
    u.mul_(10)
    assert t.tolist() == [0.0, 10.0, 2.0, 30.0, 4.0, 5.0]


def test_storages_made_on_fl_pickle_and_load_with_a_map_location_function(x1):
    """torch.UntypedStorage(n, device="fl:1"), cpu_storage.to(device="fl:1") and
    a map_location function had killed the process (SIGSEGV: PyTorch's C++
    constructor asked for an allocator a Python backend cannot register);
    pickling an fl storage recursed without end; a saved non-leaf lost
    requires_grad; DLPack export handed out a capsule of no data."""
    import io
    import pickle
    s = torch.UntypedStorage(8, device=x1)
    assert s.device == x1 and s.nbytes() == 8
    cpu = torch.arange(4, dtype=torch.float32)
    moved = cpu.untyped_storage().to(device=x1)
    assert moved.device == x1 and moved.cpu().tolist() == cpu.untyped_storage().tolist()
    buf = io.BytesIO()
    torch.save(cpu, buf)
    buf.seek(0)
    out = torch.load(buf, map_location=lambda st, loc: st.to(device=x1))
    assert out.device == x1 and out.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    back = pickle.loads(pickle.dumps(out.untyped_storage()))
    assert back.device == x1 and back.cpu().tolist() == out.untyped_storage().cpu().tolist()
    t = pickle.loads(pickle.dumps(out))
    assert t.device == x1 and t.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    y = out.requires_grad_() * 2                           # a non-leaf that requires grad
    buf = io.BytesIO()
    torch.save(y, buf)
    buf.seek(0)
    assert torch.load(buf).requires_grad                 # as on the CPU
    with pytest.raises(BufferError, match="DLPack"):
        torch.utils.dlpack.to_dlpack(out.detach())
    with pytest.raises(BufferError, match="DLPack"):
        torch.from_dlpack(out.detach())


@pytest.mark.slow   # a worker process: about 5 s
def test_a_dataloader_worker_batching_fl_tensors_says_what_to_do(x1):
    """Workers that return fl tensors: default_collate batches them into
    shared memory of the device, which had killed the worker (SIGSEGV)."""
    from torch.utils.data import DataLoader

    class D(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return torch.full((3,), float(i), device=x1)

    with pytest.raises(RuntimeError, match="Return CPU tensors from the Dataset"):
        list(DataLoader(D(), batch_size=2, num_workers=1, multiprocessing_context="fork", timeout=60))


def test_safetensors_saves_fl_tensors_and_finds_shared_ones(x1, tmp_path):
    st = pytest.importorskip("safetensors.torch")
    m = nn.Linear(3, 2).to(x1)
    st.save_file({"w": m.weight, "b": m.bias}, tmp_path / "a.safetensors")
    back = st.load_file(tmp_path / "a.safetensors")
    assert torch.equal(back["w"], m.weight.detach().cpu()) and torch.equal(back["b"], m.bias.detach().cpu())
    t = torch.arange(4.0).to(x1)
    with pytest.raises(RuntimeError, match="share memory"):      # tied tensors are found, as on CUDA
        st.save_file({"a": t, "b": t}, tmp_path / "b.safetensors")
    tied = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5, bias=False))
    tied[1].weight = tied[0].weight
    st.save_model(tied.to(x1), tmp_path / "c.safetensors")
    fresh = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5, bias=False))
    fresh[1].weight = fresh[0].weight
    st.load_model(fresh, tmp_path / "c.safetensors")
    assert torch.equal(fresh[0].weight, tied[0].weight.detach().cpu())


# ----------------------------------------------------------- _foreach_*

def _sample_args(schema, dev):
    args = []
    for a in schema.arguments:
        t = str(a.type)
        if a.kwarg_only and a.has_default_value():
            continue
        if t == "List[Tensor]":
            args.append([torch.tensor([0.5, 1.5, 2.5]).to(dev), torch.tensor([[0.25, 3.0], [1.0, 0.75]]).to(dev)])
        elif t == "Tensor":
            args.append(torch.tensor([0.5, 2.0]) if a.name == "scalars" else torch.tensor(0.5).to(dev))
        elif t in ("Scalar", "number"):
            args.append(0.5)
        elif t in ("List[Scalar]", "List[number]"):
            args.append([0.5, 2.0])
        elif a.has_default_value():
            args.append(a.default_value)
        else:
            return None
    return args


def test_every_foreach_op_the_cpu_runs_gives_the_same_result_on_fl(th1):
    """Each _foreach_* overload (Adam(amsgrad), Adamax, NAdam, ... use
    them on their default foreach path) against the CPU's: elementwise
    float32 ops on the same inputs, so to a few ulps."""
    names = sorted({n.split("::")[1].split(".")[0] for n in torch._C._dispatch_get_all_op_names()
                    if n.startswith("aten::_foreach_")})
    ran = 0
    for name in names:
        packet = getattr(aten, name)
        for ovl in packet.overloads():
            if "out" in ovl:
                continue
            op = getattr(packet, ovl)
            cpu_args, fl_args = _sample_args(op._schema, "cpu"), _sample_args(op._schema, th1)
            if cpu_args is None:
                continue
            try:
                want = op(*cpu_args)
            except RuntimeError:
                continue           # not a valid call on the CPU either (e.g. an integer-only op)
            got = op(*fl_args)
            want = want if want is not None else cpu_args[0]
            got = got if got is not None else fl_args[0]
            for w, g in zip(want, got):
                torch.testing.assert_close(g.cpu(), w, equal_nan=True, msg=lambda m: f"{op}: {m}")
            ran += 1
    assert ran > 120


@pytest.mark.parametrize("make", [lambda p: torch.optim.Adam(p, lr=0.01, amsgrad=True),
                                  lambda p: torch.optim.AdamW(p, lr=0.01, amsgrad=True),
                                  lambda p: torch.optim.Adamax(p, lr=0.01)],
                         ids=["Adam-amsgrad", "AdamW-amsgrad", "Adamax"])
def test_optimizers_on_their_default_foreach_path_match_the_cpu(th1, make):
    torch.manual_seed(0)
    target = torch.randn(5, 3)
    p_cpu = torch.randn(5, 3, requires_grad=True)
    p_fl = p_cpu.detach().clone().to(th1).requires_grad_()
    opt_cpu, opt_fl = make([p_cpu]), make([p_fl])
    assert opt_fl.defaults["foreach"] is None                  # the default: foreach chosen for fl tensors
    for _ in range(4):
        for p, opt, t in ((p_cpu, opt_cpu, target), (p_fl, opt_fl, target.to(th1))):
            opt.zero_grad()
            ((p - t) ** 2 * torch.arange(1.0, 4.0).to(p.device)).sum().backward()
            opt.step()
    # elementwise float32 arithmetic only: equal up to rounding of the lr-sized steps
    torch.testing.assert_close(p_fl.detach().cpu(), p_cpu.detach(), rtol=1e-6, atol=1e-6)


# ------------------------------------------------------- coverage report

def test_coverage_of_a_loss_that_mixes_devices_says_so_in_one_line(flchips, capsys, tmp_path):
    from flbridge.cli import main
    from flbridge.observe.coverage import MixedDevicesError
    model = nn.Linear(4, 3)
    y = torch.randint(0, 3, (5,))
    with pytest.raises(MixedDevicesError, match=r"loss function mixes devices: .* fl:0 and cpu") as info:
        flbridge.coverage(model, (torch.randn(5, 4),), device="fl:0", loss_fn=lambda out: F.cross_entropy(out, y))
    assert "\n" not in str(info.value) and "Traceback" not in str(info.value)
    f = tmp_path / "mixed.py"
    f.write_text("import torch\n"
                 "import torch.nn.functional as F\n"
                 "def example():\n"
                 "    y = torch.randint(0, 3, (5,))       # the target stays on the CPU\n"
                 "    return torch.nn.Linear(4, 3), (torch.randn(5, 4),), lambda out: F.cross_entropy(out, y)\n")
    assert main(["coverage", str(f), "--device", "fl:0"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "mixes devices" in err and "Traceback" not in err


# ------------------------------------------------------ channels_last

def _cl(t):
    fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
    return t.is_contiguous(memory_format=fmt) and not t.is_contiguous()


# th1 computes in float32/bfloat16 (its spec's dtypes); x1's float16 NHWC kernel is the point there
@pytest.mark.parametrize("chip,dtype", [("xpu:th1", torch.float32), ("xpu:x1", torch.float32),
                                        ("xpu:x1", torch.float16), ("xpu:x1-v2", torch.float32),
                                        ("xpu:x1-v2", torch.float16)])
@pytest.mark.parametrize("operands", ["input", "weight", "both"])
def test_convolution_keeps_channels_last_like_the_cpu(flchips, chip, dtype, operands):
    """Native kernels (th1 fp32, x1 fp16 NHWC, x1-v2 both) and the CPU
    fallback (x1 fp32) alike: output and gradients laid out as the CPU lays them."""
    dev = flchips[chip].device
    torch.manual_seed(0)
    x = torch.randn(2, 4, 8, 8, dtype=dtype)
    w = torch.randn(6, 4, 3, 3, dtype=dtype) * 0.2
    if operands in ("input", "both"):
        x = x.contiguous(memory_format=torch.channels_last)
    if operands in ("weight", "both"):
        w = w.contiguous(memory_format=torch.channels_last)
    xf, wf = x.to(dev).requires_grad_(), w.to(dev).requires_grad_()
    xc, wc = x.float().requires_grad_(), w.float().requires_grad_()
    y = F.conv2d(xf, wf, padding=1)
    ref = F.conv2d(xc, wc, padding=1)
    assert _cl(y) and y.stride() == ref.stride()
    gi, gw = torch.autograd.grad(y.float().sum(), (xf, wf))
    rgi, rgw = torch.autograd.grad(ref.sum(), (xc, wc))
    assert gi.stride() == rgi.stride() and gw.stride() == rgw.stride()
    # float16: 36-term sums of products of values below 4 rounded to 11 bits
    tol = dict(rtol=2e-3, atol=2e-2) if dtype == torch.float16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y.float().cpu(), ref, **tol)
    torch.testing.assert_close(gi.float().cpu(), rgi, **tol)
    torch.testing.assert_close(gw.float().cpu(), rgw, **tol)


def test_a_channels_last_cnn_stays_channels_last(th1):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
    x = torch.randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    net_fl = copy.deepcopy(net).to(th1)
    ref = net(x)
    y = net_fl(x.to(th1))
    assert _cl(ref) and _cl(y) and y.stride() == ref.stride()
    # 72-term float32 sums, batch statistics over 128 values: a few ulps of values O(1)
    torch.testing.assert_close(y.cpu(), ref, rtol=1e-4, atol=1e-5)
    conv3 = nn.Conv3d(2, 3, 3, padding=1)
    x3 = torch.randn(1, 2, 4, 4, 4).contiguous(memory_format=torch.channels_last_3d)
    ref3 = conv3(x3)
    assert conv3.to(th1)(x3.to(th1)).stride() == ref3.stride()   # the CPU fallback keeps the CPU's layout


# ------------------------------------------------------ nested tensors

def test_transformer_encoder_fast_path_with_a_padding_mask_matches_the_cpu(anychip):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    enc = nn.TransformerEncoder(layer, 2).eval()
    x = torch.randn(3, 5, 16)
    pad = torch.tensor([[False] * 5, [False, False, False, True, True], [False, True, True, True, True]])
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)      # "nested tensors are in prototype stage"
        ref = enc(x, src_key_padding_mask=pad)
        enc.to(anychip)
        got = enc(x.to(anychip), src_key_padding_mask=pad.to(anychip))
    assert got.device == anychip and got.shape == ref.shape
    assert torch.equal(got[pad].cpu(), torch.zeros_like(ref[pad]))   # the fast path's zeros where it padded
    # two layers of 16-wide float32 attention and FFN: a few ulps of values O(1)
    torch.testing.assert_close(got.cpu(), ref, rtol=1e-4, atol=1e-5)


def test_nested_tensors_on_fl_raise_one_clear_error(x1):
    a, b = torch.randn(2, 4), torch.randn(3, 4)
    makers = {"jagged_on_fl": lambda: torch.nested.nested_tensor([a.to(x1), b.to(x1)], layout=torch.jagged),
              "jagged_device": lambda: torch.nested.nested_tensor([a, b], layout=torch.jagged, device=x1),
              "jagged_to": lambda: torch.nested.nested_tensor([a, b], layout=torch.jagged).to(x1),
              "strided_device": lambda: torch.nested.nested_tensor([a, b], device=x1).unbind(),   # at first use
              "strided_to": lambda: torch.nested.nested_tensor([a, b]).to(x1),
              "from_list": lambda: torch.nested.as_nested_tensor([a.to(x1), b.to(x1)])}
    for name, make in makers.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            with pytest.raises(NestedNotSupported, match="nested tensors are not supported on fl devices"):
                make()


# --------------------------------------------------- quantized tensors

def test_quantized_tensors_and_models_raise_one_clear_error_at_the_move(x1):
    q = torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)
    with pytest.raises(QuantizedNotSupported, match="not supported on fl devices"):
        q.to(x1)
    with pytest.raises(QuantizedNotSupported, match="returned a quantized tensor"):
        torch.quantize_per_tensor(torch.randn(4).to(x1), 0.1, 0, torch.qint8)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # float16 dynamic quantization (qint8 ones run on fl: tests/test_int8.py)
        qmodel = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.float16)
    for move in (lambda: qmodel.to(x1), lambda: qmodel.fl(x1.index), lambda: flbridge.wrap(qmodel, x1),
                 lambda: qmodel.to_empty(device=x1)):
        with pytest.raises(QuantizedNotSupported, match="'0' is quantized"):
            move()
    assert qmodel[0].weight().device.type == "cpu"          # nothing moved
    model.to(x1)                                            # the float model moves as usual
    assert model[0].weight.device == x1
