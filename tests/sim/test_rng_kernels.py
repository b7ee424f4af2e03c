"""The chips' counter-based random kernels (docs/simulators.md, "Random
numbers"): Philox4x32-10 keyed by the caller's seed, read from the caller's
offset; every value follows from the documented mapping, computed here
independently in Python, and the two vendors' ABIs give the same values."""
import math

import pytest
import torch

from .test_kernel_paths import ok, out_view

M32 = 0xFFFFFFFF


def philox(ctr, key):
    """Philox4x32-10 (Salmon et al., SC'11), written from the paper."""
    c, k = list(ctr), list(key)
    for r in range(10):
        if r:
            k = [(k[0] + 0x9E3779B9) & M32, (k[1] + 0xBB67AE85) & M32]
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k[0]) & M32, p1 & M32, ((p0 >> 32) ^ c[3] ^ k[1]) & M32, p0 & M32]
    return c


def words(seed, offset, n):
    """Words offset .. offset + n - 1 of the stream `seed`."""
    out = []
    for b in range(offset // 4, (offset + n + 3) // 4 + 1):
        out += philox([b & M32, b >> 32, 0, 0], [seed & M32, seed >> 32])
    start = offset % 4
    return out[start:start + n]


def unit(w):
    return (w >> 8) / 16777216.0


def test_philox_known_answers():
    """Random123's known-answer vectors for philox4x32-10."""
    assert philox([0, 0, 0, 0], [0, 0]) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert philox([M32] * 4, [M32, M32]) == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]
    assert philox([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0]) == \
        [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


@pytest.fixture(params=["x1", "th1"])
def chip(request):
    return request.getfixturevalue(request.param)


def rng(chip, kind, od, *args):
    names = {"uniform": ("x1_uniform", "th1RngUniform"), "normal": ("x1_normal", "th1RngNormal"),
             "bernoulli": ("x1_bernoulli", "th1RngBernoulli"), "random": ("x1_random", "th1RngRandom")}
    return getattr(chip.lib, names[kind][chip.kind == "th1"])(od, *args)


SEED = 0x1234_5678_9ABC_DEF0


def test_uniform_bernoulli_random_follow_the_mapping(chip):
    n = 37
    w = words(SEED, 8, 2 * n)
    od, get = out_view(chip, (n,))
    ok(chip, rng(chip, "uniform", od, -2.0, 3.0, SEED, 8))
    want = torch.tensor([unit(x) for x in w[:n]], dtype=torch.float32) * 5.0 + -2.0
    assert torch.equal(get(), want)
    od, get = out_view(chip, (n,), torch.bool)
    ok(chip, rng(chip, "bernoulli", od, 0.3, SEED, 8))
    assert get().tolist() == [unit(x) < 0.3 for x in w[:n]]
    od, get = out_view(chip, (n,), torch.int64)
    ok(chip, rng(chip, "random", od, -7, 1000, SEED, 8))
    assert get().tolist() == [-7 + x % 1007 for x in w[:n]]
    ok(chip, rng(chip, "random", od, -(2 ** 62), 2 ** 62, SEED, 8))   # wider than 2^32: two words each
    assert get().tolist() == [-(2 ** 62) + ((w[2 * i] << 32 | w[2 * i + 1]) % 2 ** 63) for i in range(n)]


def test_normal_is_box_muller_on_word_pairs(chip):
    n = 9                                    # odd: the last pair's second value is not kept
    w = words(SEED, 4, n + 1)
    want = []
    for k in range(0, n, 2):
        u1, u2 = ((w[k] >> 8) + 1) / 16777216.0, (w[k + 1] >> 8) / 16777216.0
        r, t = math.sqrt(-2 * math.log(u1)), 2 * math.pi * u2
        want += [0.5 + 2.0 * r * math.cos(t), 0.5 + 2.0 * r * math.sin(t)]
    od, get = out_view(chip, (n,))
    ok(chip, rng(chip, "normal", od, 0.5, 2.0, SEED, 4))
    torch.testing.assert_close(get(), torch.tensor(want[:n], dtype=torch.float32), rtol=0, atol=1e-6)


def test_offsets_advance_by_whole_blocks_and_continue_the_stream(chip):
    """Two calls, the second at offset + words(n), read the stream a single
    call of both sizes reads (when n fills whole blocks), and never overlap."""
    words_fn = chip.lib.x1_rng_words if chip.kind == "x1" else chip.lib.th1RngWords
    adv = chip.ffi.new("uint64_t *" if chip.kind == "x1" else "unsigned long long *")
    for n, w, want in ((0, 1, 0), (1, 1, 4), (4, 1, 4), (5, 1, 8), (5, 2, 12), (1000, 1, 1000)):
        ok(chip, words_fn(n, w, adv))
        assert adv[0] == want
    od, get = out_view(chip, (16,))
    ok(chip, rng(chip, "uniform", od, 0.0, 1.0, 7, 0))
    both = get()
    od, get = out_view(chip, (8,))
    ok(chip, rng(chip, "uniform", od, 0.0, 1.0, 7, 0))
    first = get()
    ok(chip, rng(chip, "uniform", od, 0.0, 1.0, 7, 8))
    assert torch.equal(torch.cat([first, get()]), both)


def test_elements_in_row_major_order_whatever_the_strides(chip):
    od, get = out_view(chip, (6, 5), layout="transposed")
    ok(chip, rng(chip, "uniform", od, 0.0, 1.0, 3, 0))
    dense, gd = out_view(chip, (6, 5))
    ok(chip, rng(chip, "uniform", dense, 0.0, 1.0, 3, 0))
    assert torch.equal(get(), gd())


def test_both_vendors_give_the_same_values(x1, th1):
    outs = []
    for c in (x1, th1):
        od, get = out_view(c, (4, 33))
        ok(c, rng(c, "normal", od, 0.0, 1.0, 99, 40))
        outs.append(get())
    assert torch.equal(outs[0], outs[1])


def test_distributions_have_their_moments(chip):
    n = 200_000
    od, get = out_view(chip, (n,))
    ok(chip, rng(chip, "normal", od, 1.0, 3.0, 11, 0))
    z = get().double()
    assert abs(z.mean() - 1.0) < 0.03 and abs(z.std() - 3.0) < 0.03
    ok(chip, rng(chip, "uniform", od, 2.0, 4.0, 11, 0))
    u = get()
    assert u.min() >= 2.0 and u.max() < 4.0 and abs(u.double().mean() - 3.0) < 0.01
    odb, getb = out_view(chip, (n,), torch.uint8)
    ok(chip, rng(chip, "bernoulli", odb, 0.25, 11, 0))
    assert abs(getb().double().mean() - 0.25) < 0.005


def dropout(chip, xd, p, train, seed, offset, od, md):
    if chip.kind == "x1":
        return chip.lib.x1_native_dropout(xd, p, train, seed, offset, od, md)
    return chip.lib.th1Dropout(xd, p, int(train), seed, offset, od, md)


@pytest.mark.parametrize("p", [0.0, 0.2, 1.0])
def test_native_dropout_output_and_mask(chip, p):
    x = torch.randn(7, 9)
    x[0, 0] = float("nan")
    od, get = out_view(chip, x.shape)
    md, getm = out_view(chip, x.shape, torch.bool)
    ok(chip, dropout(chip, chip.put(x)[1], p, True, SEED, 12, od, md))
    keep = torch.tensor([unit(w) < 1 - p for w in words(SEED, 12, x.numel())]).reshape(x.shape)
    assert torch.equal(getm(), keep)
    scale = 0.0 if p == 1 else 1.0 / (1 - p)
    torch.testing.assert_close(get(), x * keep * scale, equal_nan=True, rtol=0, atol=0)   # PyTorch's formula
    ok(chip, dropout(chip, chip.put(x)[1], p, False, SEED, 12, od, md))                   # evaluation
    assert getm().all() and torch.equal(get().nan_to_num(), x.nan_to_num())


def test_bad_generator_state_and_parameters_are_refused(chip):
    bad = chip.lib.X1_ERR_INVALID_VALUE if chip.kind == "x1" else chip.lib.TH1_ERROR_INVALID_ARGUMENT
    od, _ = out_view(chip, (4,))
    assert rng(chip, "uniform", od, 0.0, 1.0, 1, 6) == bad            # offset not a whole block
    assert rng(chip, "uniform", od, 1.0, 0.0, 1, 0) == bad            # from > to
    assert rng(chip, "bernoulli", od, 1.5, 1, 0) == bad
    assert rng(chip, "random", od, 3, 3, 1, 0) == bad                  # empty range
    assert rng(chip, "normal", od, 0.0, -1.0, 1, 0) == bad
