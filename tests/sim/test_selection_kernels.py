"""The selection, indexing, reduction and GradScaler kernels of both chips,
driven through their C ABIs (x1's names and parameter order, th1's) and
checked against PyTorch on the CPU: strided and broadcast operands, every
dtype each takes, in-place and overlapping outputs, and the data errors
(an index out of range) that leave the output untouched."""
import pytest
import torch

from .test_kernel_paths import ok, out_view, view_desc

LOW = {"x1": torch.float16, "th1": torch.bfloat16}
ALL_INTS = (torch.int8, torch.uint8, torch.int32, torch.int64)


@pytest.fixture(params=["x1", "th1"])
def chip(request):
    return request.getfixturevalue(request.param)


def ints(chip, v):
    return chip.ffi.new("int64_t[]", list(v))


def err(chip, status, kind):
    codes = {"x1": {"data": "X1_ERR_DATA", "invalid": "X1_ERR_INVALID_VALUE", "unsupported": "X1_ERR_UNSUPPORTED"},
             "th1": {"data": "TH1_ERROR_DATA", "invalid": "TH1_ERROR_INVALID_ARGUMENT",
                     "unsupported": "TH1_ERROR_NOT_SUPPORTED"}}
    assert status == getattr(chip.lib, codes[chip.kind][kind]), (status, chip.last_error())


# ------------------------------------------------------- comparisons

def compare_scalar(chip, op, xd, value, od):
    if chip.kind == "x1":
        return getattr(chip.lib, f"x1_{op}_scalar")(xd, value, od)
    name = {"eq": "Equal", "ne": "NotEqual", "lt": "Less", "le": "LessEqual", "gt": "Greater", "ge": "GreaterEqual"}
    return getattr(chip.lib, f"th1{name[op]}Scalar")(xd, value, od)


@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_compare_scalar_follows_pytorch_promotion(chip, op):
    """Python ints exactly against integer tensors, Python floats in float32
    (2.5 against an int64 tensor), the scalar rounded to a half-precision
    tensor's dtype, NaN unequal to everything."""
    ref = getattr(torch, op)
    i = torch.tensor([[-3, 2, 3, 16777217, 2 ** 40, 0]], dtype=torch.int64)
    f = torch.tensor([0.1, 0.099975586, 2.5, float("nan"), float("inf"), -0.0])
    cases = [(i, 2), (i, 2.5), (i, 16777217), (i, float("inf")), (i.to(torch.int32), -3), (i.clamp(-128, 127).to(torch.int8), 3),
             (i.clamp(0, 255).to(torch.uint8), 2), (i > 2, 1), (i > 2, 0.5), (i > 2, 2), (f, 0.1), (f, float("nan")),
             (f, 0.0), (f.to(LOW[chip.kind]), 0.1), (f.to(LOW[chip.kind]), 2.5)]
    for x, s in cases:
        od, get = out_view(chip, x.shape, torch.bool, "strided")
        ok(chip, compare_scalar(chip, op, view_desc(chip, x)[1], s, od))
        assert torch.equal(get(), ref(x, s)), (x.dtype, s)


def test_compare_tensors_of_integers_and_bools(chip):
    a, b = torch.randint(-3, 3, (5, 7)), torch.randint(-3, 3, (7,))
    for x, y in ((a, b.expand(5, 7)), (a > 0, (b > 0).expand(5, 7))):
        fns = {"x1": "x1_lt", "th1": "th1Less"}
        od, get = out_view(chip, x.shape, torch.bool)
        yd = chip.desc(chip.upload(y[0].contiguous()), y.shape, (0, 1), y.dtype)
        ok(chip, getattr(chip.lib, fns[chip.kind])(chip.put(x)[1], yd, od))
        assert torch.equal(get(), x < y)


@pytest.mark.parametrize("op", ["and", "or", "xor", "not"])
def test_logical_ops_take_any_dtypes(chip, op):
    a = torch.tensor([0.0, -0.0, 2.5, float("nan"), 0.0, 1.0])
    b = torch.tensor([0, 3, 0, 0, -1, 1], dtype=torch.int64)
    want = {"and": torch.logical_and, "or": torch.logical_or, "xor": torch.logical_xor}.get(op)
    od, get = out_view(chip, a.shape, torch.bool)
    if op == "not":
        fn = chip.lib.x1_logical_not if chip.kind == "x1" else chip.lib.th1LogicalNot
        ok(chip, fn(chip.put(a)[1], od))
        assert torch.equal(get(), torch.logical_not(a))
        return
    ad, bd = chip.put(a)[1], chip.put(b)[1]
    if chip.kind == "x1":
        ok(chip, getattr(chip.lib, f"x1_logical_{op}")(ad, bd, od))
    else:
        ok(chip, chip.lib.th1Logical(ad, bd, getattr(chip.lib, f"TH1_LOGICAL_{op.upper()}"), od))
    assert torch.equal(get(), want(a, b))


# -------------------------------------------------------- reductions

@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
@pytest.mark.parametrize("dims", [[], [0], [1, 2], [-1]])
def test_integer_and_bool_sums_are_exact_int64(chip, dtype, dims):
    torch.manual_seed(len(dims))
    x = torch.randint(0, 200, (3, 5, 6)).to(dtype) if dtype != torch.int64 else \
        torch.randint(-2 ** 62, 2 ** 62, (3, 5, 6))
    x = x.transpose(0, 2)      # strided
    want = x.sum(dims) if dims else x.sum()
    od, get = out_view(chip, want.shape, torch.int64)
    dd = ints(chip, dims) if dims else chip.ffi.NULL
    fn = chip.lib.x1_sum if chip.kind == "x1" else chip.lib.th1ReduceSum
    ok(chip, fn(view_desc(chip, x)[1], dd, len(dims), False, od))
    assert torch.equal(get(), want)   # wrapping like PyTorch's int64 sums


@pytest.mark.parametrize("all_", [False, True])
def test_any_all_over_dims_and_one_dim(chip, all_):
    x = torch.tensor([[0.0, 0.0, float("nan")], [1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    u8 = torch.tensor([[0, 0, 3], [1, 1, 1]], dtype=torch.uint8)
    ref = torch.all if all_ else torch.any
    for t, dims, keep in ((x, [], False), (x, [1], True), (x, [0, 1], False), (u8, [0], False), (x > 0, [1], False)):
        want = ref(t) if not dims else ref(t, dim=tuple(dims), keepdim=keep)
        od, get = out_view(chip, want.shape, want.dtype)
        if chip.kind == "x1":
            fn = chip.lib.x1_all if all_ else chip.lib.x1_any
            ok(chip, fn(chip.put(t)[1], ints(chip, dims) if dims else chip.ffi.NULL, len(dims), keep, od))
        else:
            mode = chip.lib.TH1_REDUCE_ALL if all_ else chip.lib.TH1_REDUCE_ANY
            ok(chip, chip.lib.th1ReduceLogical(chip.put(t)[1], ints(chip, dims) if dims else chip.ffi.NULL, len(dims),
                                               keep, mode, od))
        assert torch.equal(get(), want), (t.dtype, dims)
    want = ref(x, 1)
    od, get = out_view(chip, want.shape, torch.bool)
    if chip.kind == "x1":
        ok(chip, (chip.lib.x1_all_dim if all_ else chip.lib.x1_any_dim)(chip.put(x)[1], 1, False, od))
    else:
        ok(chip, chip.lib.th1ReduceLogicalAxis(chip.put(x)[1], 1, 0, 1 if all_ else 0, od))
    assert torch.equal(get(), want)


def minmax(chip, is_min, xd, dim, keep, vd, idd):
    if chip.kind == "x1":
        if vd is None:
            return (chip.lib.x1_argmin if is_min else chip.lib.x1_argmax)(xd, dim, keep, idd)
        return (chip.lib.x1_min_dim if is_min else chip.lib.x1_max_dim)(xd, dim, keep, vd, idd)
    if vd is None:
        return chip.lib.th1ArgMinMax(xd, dim, keep, int(is_min), idd)
    return chip.lib.th1ReduceMinMax(xd, dim, keep, int(is_min), vd, idd)


@pytest.mark.parametrize("is_min", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, "low", torch.int64, torch.int32])
def test_max_min_along_a_dim_first_position_and_nan(chip, is_min, dtype):
    dtype = LOW[chip.kind] if dtype == "low" else dtype
    torch.manual_seed(3)
    x = torch.randint(-4, 4, (4, 6, 5)).to(dtype)   # many ties: the first position wins
    if dtype.is_floating_point:
        x[1, 2, 3] = float("nan")
    x = x.permute(2, 0, 1)
    for dim, keep in ((0, False), (2, True), (-1, False)):
        vals, idx = (torch.min if is_min else torch.max)(x, dim, keep)
        vd, gv = out_view(chip, vals.shape, dtype)
        idd, gi = out_view(chip, idx.shape, torch.int64, "strided")
        ok(chip, minmax(chip, is_min, view_desc(chip, x)[1], dim, keep, vd, idd))
        torch.testing.assert_close(gv(), vals, equal_nan=True)
        assert torch.equal(gi(), idx)
        idd, gi = out_view(chip, idx.shape, torch.int64)
        ok(chip, minmax(chip, is_min, view_desc(chip, x)[1], dim, keep, None, idd))
        assert torch.equal(gi(), (torch.argmin if is_min else torch.argmax)(x, dim, keep))


@pytest.mark.parametrize("largest", [True, False])
def test_topk_values_and_positions(chip, largest):
    torch.manual_seed(5)
    x = torch.randn(6, 9)
    x[2, 4] = float("nan")
    x[3] = 1.0                                # all ties: positions in order
    for k, dim in ((3, 1), (9, 1), (2, 0), (0, 1)):
        v, i = torch.topk(x, k, dim, largest)
        vd, gv = out_view(chip, v.shape)
        idd, gi = out_view(chip, i.shape, torch.int64)
        fn = chip.lib.x1_topk if chip.kind == "x1" else chip.lib.th1TopK
        ok(chip, fn(chip.put(x)[1], k, dim, largest, vd, idd))
        torch.testing.assert_close(gv(), v, equal_nan=True)
        assert torch.equal(x.gather(dim, gi()).isnan(), v.isnan())
        assert torch.equal(torch.nan_to_num(x.gather(dim, gi()), 9.0), torch.nan_to_num(v, 9.0))
    err(chip, fn(chip.put(x)[1], 10, 1, True, vd, idd), "invalid")


@pytest.mark.parametrize("dtype", [torch.float32, "low", torch.int64, torch.int32, torch.bool])
def test_cumsum_along_each_dim(chip, dtype):
    dtype = LOW[chip.kind] if dtype == "low" else dtype
    torch.manual_seed(6)
    x = (torch.randn(4, 70) * 3).to(dtype) if dtype.is_floating_point else torch.randint(-5, 5, (4, 70)).to(dtype)
    for dim in (0, 1, -1):
        want = torch.cumsum(x.t(), dim % 2)
        od, get = out_view(chip, want.shape, want.dtype)
        fn = chip.lib.x1_cumsum if chip.kind == "x1" else chip.lib.th1CumSum
        ok(chip, fn(view_desc(chip, x.t())[1], dim, od))
        if dtype.is_floating_point:
            torch.testing.assert_close(get().float(), want.float(), rtol=1e-6 if dtype == torch.float32 else 1e-2,
                                       atol=1e-5 if dtype == torch.float32 else 0.1)
        else:
            assert torch.equal(get(), want)


# --------------------------------------------------- pointwise with bounds

def clamp(chip, xd, lo, hi, od):
    fn = chip.lib.x1_clamp if chip.kind == "x1" else chip.lib.th1Clamp
    return fn(xd, lo, hi, od)


@pytest.mark.parametrize("dtype", [torch.float32, "low", torch.int64, torch.int32])
def test_clamp_with_either_bound_and_nan(chip, dtype):
    dtype = LOW[chip.kind] if dtype == "low" else dtype
    x = torch.tensor([-5, -1, 0, 1, 2, 7], dtype=torch.float32)
    if dtype.is_floating_point:
        x[3] = float("nan")
    x = x.to(dtype)
    lo, hi = torch.tensor([-1, 0, 0, 0, 3, 2]).to(dtype), torch.tensor([1]).to(dtype)
    hid = chip.desc(chip.upload(hi), (6,), (0,), dtype)
    for l_, h_, want in ((lo, None, torch.maximum(x, lo)), (None, hi, torch.clamp(x, max=hi)),
                         (lo, hi, torch.clamp(x, lo, hi.expand(6)))):
        od, get = out_view(chip, (6,), dtype)
        ok(chip, clamp(chip, chip.put(x)[1], chip.put(l_)[1] if l_ is not None else chip.ffi.NULL,
                       hid if h_ is not None else chip.ffi.NULL, od))
        torch.testing.assert_close(get(), want, equal_nan=True, rtol=0, atol=0)
    if dtype.is_floating_point:   # a NaN bound gives NaN
        nan = torch.full((6,), float("nan")).to(dtype)
        od, get = out_view(chip, (6,), dtype)
        ok(chip, clamp(chip, chip.put(x)[1], chip.put(nan)[1], chip.ffi.NULL, od))
        assert get().isnan().all()
    err(chip, clamp(chip, chip.put(x)[1], chip.ffi.NULL, chip.ffi.NULL, od), "invalid")


def test_isin_integers_floats_and_invert(chip):
    e = torch.tensor([[1, 5, -2], [7, 5, 0]])
    t = torch.tensor([5, 0, 9, 5])
    f = torch.tensor([0.5, float("nan"), 2.0])
    for el, te, inv in ((e, t, False), (e, t, True), (f, torch.tensor([2.0, float("nan")]), False), (e, t[:1], False)):
        od, get = out_view(chip, el.shape, torch.bool)
        fn = chip.lib.x1_isin if chip.kind == "x1" else chip.lib.th1IsIn
        ok(chip, fn(chip.put(el)[1], chip.put(te)[1], inv, od))
        assert torch.equal(get(), torch.isin(el, te, invert=inv))


# ------------------------------------------------------------ indexing

def k(chip, x1_name, th1_name):
    return getattr(chip.lib, x1_name if chip.kind == "x1" else th1_name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, "low"])
def test_gather_and_scatter_every_dim(chip, dtype):
    dtype = LOW[chip.kind] if dtype == "low" else dtype
    torch.manual_seed(7)
    x = (torch.randn(4, 5, 6) * 4).to(dtype)
    for dim in (0, 1, 2, -1):
        d = dim % 3
        idx = torch.randint(0, x.shape[d], (3, 4, 5))
        want = torch.gather(x, dim, idx)
        od, get = out_view(chip, want.shape, dtype, "strided")
        ok(chip, k(chip, "x1_gather", "th1Gather")(view_desc(chip, x)[1], dim, chip.put(idx)[1], od))
        assert torch.equal(get(), want)
        # scatter with unique positions along dim (repeated ones have no defined winner)
        shape = [3, 4, 5]
        shape[d] = x.shape[d]
        uidx = torch.rand(shape).argsort(dim=d)
        src = (torch.randn(shape) * 4).to(dtype)
        want = x.scatter(dim, uidx, src)
        od, get = out_view(chip, x.shape, dtype)
        if chip.kind == "x1":
            ok(chip, chip.lib.x1_scatter(chip.put(x)[1], dim, chip.put(uidx)[1], chip.put(src)[1], od))
        else:
            ok(chip, chip.lib.th1Scatter(chip.put(x)[1], dim, chip.put(uidx)[1], chip.put(src)[1], 0, od))
        assert torch.equal(get(), want)


def test_scatter_value_add_and_in_place(chip):
    x = torch.zeros(3, 5)
    idx = torch.tensor([[0, 1, 1, 1], [4, 4, 0, 2], [3, 3, 3, 3]])
    src = torch.arange(12.0).reshape(3, 4)
    addr, xd = chip.put(x)
    if chip.kind == "x1":
        ok(chip, chip.lib.x1_scatter_add(xd, 1, chip.put(idx)[1], chip.put(src)[1], xd))   # in place
    else:
        ok(chip, chip.lib.th1Scatter(xd, 1, chip.put(idx)[1], chip.put(src)[1], 1, xd))
    assert torch.equal(chip.get(addr, x.shape), x.scatter_add(1, idx, src))
    value = chip.put(torch.tensor(2.5))[1]        # scatter.value: one 0-d value for every index
    od, get = out_view(chip, x.shape)
    if chip.kind == "x1":
        ok(chip, chip.lib.x1_scatter(chip.put(x)[1], 1, chip.put(idx)[1], value, od))
    else:
        ok(chip, chip.lib.th1Scatter(chip.put(x)[1], 1, chip.put(idx)[1], value, 0, od))
    assert torch.equal(get(), x.scatter(1, idx, 2.5))


def test_index_out_of_range_is_a_data_error_and_writes_nothing(chip):
    x = torch.randn(3, 4)
    od, get = out_view(chip, (3, 2))
    before = get()
    bad = torch.tensor([[0, 4], [1, 1], [2, 3]])
    err(chip, k(chip, "x1_gather", "th1Gather")(chip.put(x)[1], 1, chip.put(bad)[1], od), "data")
    err(chip, k(chip, "x1_gather", "th1Gather")(chip.put(x)[1], 1, chip.put(-bad)[1], od), "data")
    torch.testing.assert_close(get(), before, equal_nan=True, rtol=0, atol=0)
    od2, get2 = out_view(chip, (2, 4))
    err(chip, k(chip, "x1_index_select", "th1IndexSelect")(chip.put(x)[1], 0, chip.put(torch.tensor([0, 3]))[1],
                                                          od2), "data")


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.int32, "low"])
def test_index_select_and_index_add(chip, dtype):
    dtype = LOW[chip.kind] if dtype == "low" else dtype
    torch.manual_seed(8)
    x = (torch.randn(5, 6) * 3).to(dtype)
    for dim, idx in ((0, torch.tensor([4, 0, 4, 2])), (1, torch.tensor([5, 5], dtype=torch.int32)), (0, torch.tensor(1))):
        want = torch.index_select(x, dim, idx)
        od, get = out_view(chip, want.shape, dtype)
        ok(chip, k(chip, "x1_index_select", "th1IndexSelect")(view_desc(chip, x.t().contiguous().t())[1], dim,
                                                              chip.put(idx)[1], od))
        assert torch.equal(get(), want)
        src = (torch.randn(want.shape) * 3).to(dtype)
        want = x.index_add(dim, idx, src, alpha=2)
        od, get = out_view(chip, x.shape, dtype)
        ok(chip, k(chip, "x1_index_add", "th1IndexAdd")(chip.put(x)[1], dim, chip.put(idx)[1], chip.put(src)[1], 2.0,
                                                        od))
        if dtype.is_floating_point:
            torch.testing.assert_close(get().float(), want.float(), rtol=1e-2 if dtype != torch.float32 else 0,
                                       atol=1e-2 if dtype != torch.float32 else 0)
        else:
            assert torch.equal(get(), want)


def desc_list(chip, tensors):
    descs = [chip.put(t)[1] for t in tensors]
    return chip.ffi.new(f"{chip.desc_type}[]", descs), len(descs), descs


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_advanced_indexing_broadcasts_and_wraps(chip, dtype):
    torch.manual_seed(9)
    x = (torch.randn(4, 5, 3) * 3).to(dtype)
    cases = [(torch.tensor([3, -1, 0]),), (torch.tensor([[1], [2]]), torch.tensor([0, -1, 4])),
             (torch.tensor([0, 3]), torch.tensor([1, 1]), torch.tensor([2, 0]))]
    for ix in cases:
        want = x[ix]
        lst, n, keep = desc_list(chip, ix)
        od, get = out_view(chip, want.shape, dtype)
        ok(chip, k(chip, "x1_index", "th1Index")(view_desc(chip, x)[1], lst, n, od))
        assert torch.equal(get(), want)
        vals = (torch.randn(want.shape[-1:]) * 3).to(dtype)      # broadcast over the indexed rows
        for acc in ((False, True) if dtype != torch.bool else (False,)):
            want2 = x.index_put(ix, vals, accumulate=acc)
            od, get = out_view(chip, x.shape, dtype)
            ok(chip, k(chip, "x1_index_put", "th1IndexPut")(chip.put(x)[1], lst, n, chip.put(vals)[1], acc, od))
            # (repeated positions get equal values: the values broadcast over the index rows)
            if acc and dtype.is_floating_point:
                torch.testing.assert_close(get(), want2)
            else:
                assert torch.equal(get(), want2)
    lst, n, keep = desc_list(chip, (torch.tensor([4]),))
    od, get = out_view(chip, (1, 5, 3), dtype)
    err(chip, k(chip, "x1_index", "th1Index")(chip.put(x)[1], lst, n, od), "data")


# ------------------------------------------------------------- shaping

@pytest.mark.parametrize("upper", [False, True])
def test_triangles_with_offsets_and_batches(chip, upper):
    x = torch.randn(2, 5, 7)
    for diag in (-6, -2, 0, 1, 3, 9):
        want = torch.triu(x, diag) if upper else torch.tril(x, diag)
        od, get = out_view(chip, x.shape, layout="strided")
        if chip.kind == "x1":
            ok(chip, (chip.lib.x1_triu if upper else chip.lib.x1_tril)(view_desc(chip, x)[1], diag, od))
        else:
            ok(chip, chip.lib.th1Triangle(view_desc(chip, x)[1], diag, int(upper), od))
        assert torch.equal(get(), want)


def test_constant_pad_grows_crops_and_fills(chip):
    x = torch.arange(24).reshape(2, 3, 4).to(torch.int64)
    for pad, value in (((1, 2), 0), ((0, 0, 2, 1), 7), ((-1, 1, 1, -2, 1, 0), -3), ((), 0)):
        want = torch.nn.functional.pad(x, pad, value=value)
        od, get = out_view(chip, want.shape, torch.int64)
        fn = chip.lib.x1_constant_pad_nd if chip.kind == "x1" else chip.lib.th1Pad
        ok(chip, fn(chip.put(x)[1], ints(chip, pad) if pad else chip.ffi.NULL, len(pad), float(value), od))
        assert torch.equal(get(), want)


@pytest.mark.parametrize("size,scale", [((6, 8), None), ((7, 5), None), ((6, 9), (2.0, 3.0)), ((2, 2), None)])
def test_nearest_upsampling_and_its_gradient(chip, size, scale):
    torch.manual_seed(10)
    x = torch.randn(2, 3, 3, 4, requires_grad=True)
    y = torch.nn.functional.interpolate(x, size=None if scale else size, scale_factor=scale, mode="nearest")
    od, get = out_view(chip, y.shape)
    sh, sw = scale or (0.0, 0.0)
    ok(chip, k(chip, "x1_upsample_nearest2d", "th1UpsampleNearest2d")(chip.put(x.detach())[1], sh, sw, od))
    assert torch.equal(get(), y.detach())
    g = torch.randn(y.shape)
    y.backward(g)
    od, get = out_view(chip, x.shape)
    ok(chip, k(chip, "x1_upsample_nearest2d_backward", "th1UpsampleNearest2dBackward")(chip.put(g)[1], sh, sw, od))
    torch.testing.assert_close(get(), x.grad)


def test_slice_backward_bounds_and_steps(chip):
    for shape, dim, start, end, step in (((6, 5), 0, 1, 5, 2), ((6, 5), 1, -3, 2 ** 62, 1), ((6, 5), 0, 0, 0, 1),
                                         ((4, 9), -1, 2, -1, 3)):
        full = torch.zeros(shape)
        sl = [slice(None)] * 2
        sl[dim] = slice(start, end, step)
        g = torch.randn(full[tuple(sl)].shape)
        want = torch.ops.aten.slice_backward(g, list(shape), dim, start, end, step)
        od, get = out_view(chip, shape, layout="strided")
        fn = chip.lib.x1_slice_backward if chip.kind == "x1" else chip.lib.th1SliceBackward
        ok(chip, fn(chip.put(g)[1], dim, start, end, step, od))
        assert torch.equal(get(), want)


# ------------------------------------------------------- GradScaler

@pytest.mark.parametrize("found", [0.0, 1.0])
@pytest.mark.parametrize("tracker", [0, 2])
def test_amp_update_scale_matches_pytorch(chip, found, tracker):
    scale, gt, fi = torch.tensor([1024.0]), torch.tensor([tracker], dtype=torch.int32), torch.tensor([found])
    want_scale, want_gt = scale.clone(), gt.clone()
    torch._amp_update_scale_(want_scale, want_gt, fi, 2.0, 0.5, 3)
    sa, sd = chip.put(scale)
    ga, gd = chip.put(gt)
    fn = chip.lib.x1_amp_update_scale if chip.kind == "x1" else chip.lib.th1AmpUpdateScale
    ok(chip, fn(sd, gd, chip.put(fi)[1], 2.0, 0.5, 3, sd))
    assert torch.equal(chip.get(sa, (1,)), want_scale) and torch.equal(chip.get(ga, (1,), torch.int32), want_gt)


def test_amp_unscale_finds_inf_and_nan(chip):
    grads = [torch.randn(5, 3), torch.randn(7), torch.tensor([1.0, float("inf")])]
    want = [g.clone() for g in grads]
    want_found = torch.zeros(1)
    torch._amp_foreach_non_finite_check_and_unscale_(want, want_found, torch.tensor([0.25]))
    puts = [chip.put(g) for g in grads]
    arr = chip.ffi.new(f"{chip.desc_type}[]", [d for _, d in puts])
    fa, fd = chip.put(torch.zeros(1))
    fn = chip.lib.x1_amp_unscale if chip.kind == "x1" else chip.lib.th1AmpUnscale
    ok(chip, fn(arr, 3, fd, chip.put(torch.tensor([0.25]))[1]))
    for (a, _), g, w in zip(puts, grads, want):
        assert torch.equal(chip.get(a, g.shape), w)
    assert torch.equal(chip.get(fa, (1,)), want_found)
