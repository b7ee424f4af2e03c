"""Decompositions of random ops (and the full max/min reductions sampling
code uses) into the ops a chip's random kernels cover: `uniform_`,
`normal_`, `random_`, `bernoulli_` and the arithmetic around them.  They
join decompositions.ADDED, so the route takes one only when every part
runs on the chip; each part draws from the same generator (the chip's
counter-based one, flbridge.routing.rng), so seeds and states replay them.

The formulas are PyTorch's: `multinomial` without replacement (or one
sample) is ATen's Gumbel trick (aten/src/ATen/native/Distributions.cpp:
argmax / topk of p / q, q ~ Exp(1), with CUDA's transformation::exponential
numerics for q); with replacement it inverts the normalized cumulative
distribution as ATen's CPU kernel does; `bernoulli(p tensor)` is u < p.
"""
from __future__ import annotations

import threading

import torch

aten = torch.ops.aten
_NESTED = threading.local()


def _like(self, dtype, layout, device, pin_memory, memory_format):
    return torch.empty_like(self, dtype=dtype, layout=layout, device=device, pin_memory=pin_memory,
                            memory_format=torch.preserve_format if memory_format is None else memory_format)


def _rand_like(self, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _like(self, dtype, layout, device, pin_memory, memory_format).uniform_(0, 1)


def _randn_like(self, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _like(self, dtype, layout, device, pin_memory, memory_format).normal_(0, 1)


def _randint_like(self, high, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _like(self, dtype, layout, device, pin_memory, memory_format).random_(0, high)


def _randint_like_low(self, low, high, *, dtype=None, layout=None, device=None, pin_memory=None,
                      memory_format=None):
    return _like(self, dtype, layout, device, pin_memory, memory_format).random_(low, high)


def _bernoulli_p(self, p, *, generator=None):
    return torch.empty_like(self).bernoulli_(p, generator=generator)


def _bernoulli(self, *, generator=None):
    """Each element 1 with the probability it holds (ATen: u < p, u ~ U[0, 1))."""
    if not self.is_floating_point():
        raise RuntimeError(f"bernoulli: the probabilities must be floating point, got {self.dtype}")
    u = torch.empty_like(self).uniform_(0, 1, generator=generator)
    return (u < self).to(self.dtype)


_DIGITS = {torch.float64: 53, torch.float32: 24, torch.float16: 11, torch.bfloat16: 8}


def _random_(self, *, generator=None):
    """random_(): ATen's default range, [0, 2**digits] for a floating type
    (every integer it holds exactly), [0, max] for an integer type, written
    as the random_(from, to) the kernels take (int64's to is past 64 bits:
    left as None, its own route)."""
    if self.is_floating_point():
        to = (1 << _DIGITS[self.dtype]) + 1
    elif self.dtype == torch.bool:
        to = 2
    elif self.dtype == torch.int64:
        to = None
    else:
        to = torch.iinfo(self.dtype).max + 1
    return self.random_(0, to, generator=generator)


def _exponential_q(like, generator):
    """q ~ Exp(1) shaped like `like`, never 0 (CUDA's transformation::exponential)."""
    u = torch.empty_like(like).uniform_(0, 1, generator=generator)
    eps = torch.finfo(like.dtype).eps / 2
    return -torch.where(u >= 1 - eps, -eps, torch.log(u))


def _multinomial(self, num_samples, replacement=False, *, generator=None):
    if self.dim() not in (1, 2):
        raise RuntimeError(f"multinomial: prob_dist must be 1 or 2 dim, got {self.dim()}")
    if not self.is_floating_point():
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: {self.dtype}")
    if num_samples <= 0:
        raise RuntimeError("multinomial: cannot sample n_sample <= 0 samples")
    n_categories = self.shape[-1]
    if not replacement and num_samples > n_categories:
        raise RuntimeError("multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    # ATen's checks, read back as one bool (a single small transfer)
    bad = ((self >= 0).logical_not() | (self == float("inf"))).any()     # NaN fails self >= 0
    zero_rows = (self.sum(-1) == 0).any()
    if self.device.type != "meta":      # the route traces this on meta tensors: nothing to read there
        flags = torch.stack([bad, zero_rows]).cpu()
        if flags[0]:
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        if flags[1]:
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    if not replacement or num_samples == 1:
        scores = self / _exponential_q(self, generator)
        if num_samples == 1:
            return scores.argmax(-1, keepdim=True)
        return scores.topk(num_samples).indices
    # with replacement: the first category whose normalized cumulative
    # probability reaches v, v = 1 - u in (0, 1] (the last one is exactly 1)
    cdf = self.cumsum(-1)
    cdf = cdf / cdf[..., -1:]
    shape = (*self.shape[:-1], num_samples)
    like = self.narrow(-1, 0, 1).expand(shape)      # (empty_like: no factory op the chip must have)
    v = 1 - torch.empty_like(like, memory_format=torch.contiguous_format).uniform_(0, 1, generator=generator)
    return (cdf.unsqueeze(-2) < v.unsqueeze(-1)).sum(-1)


def _full_reduction(name, along):
    def run(self):
        if self.numel() == 0:
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                               f"Specify the reduction dim with the 'dim' argument.")
        return along(self.reshape(-1), 0).values
    run.__name__ = f"_{name}"
    return run


def _functional(inplace):
    """The functional form of an in-place random op, as AOTAutograd writes
    `x.normal_()` in a compiled graph (`normal_functional(x)`): the in-place
    op on a new tensor like x, so compiled code draws from the generator
    what eager code draws, through the same kernel."""
    def run(self, *args, generator=None):
        return inplace(torch.empty_like(self), *args, generator=generator)
    run.__name__ = f"_{inplace.__name__.split('.')[0]}functional"
    return run


RANDOM = {
    aten.normal_functional.default: _functional(aten.normal_.default),
    aten.uniform.default: _functional(aten.uniform_.default),
    aten.exponential.default: _functional(aten.exponential_.default),
    aten.log_normal.default: _functional(aten.log_normal_.default),
    aten.cauchy.default: _functional(aten.cauchy_.default),
    aten.geometric.default: _functional(aten.geometric_.default),
    aten.bernoulli.Tensor: _functional(aten.bernoulli_.Tensor),
    aten.rand_like.default: _rand_like,
    aten.randn_like.default: _randn_like,
    aten.randint_like.default: _randint_like,
    aten.randint_like.low_dtype: _randint_like_low,
    aten.bernoulli.p: _bernoulli_p,
    aten.bernoulli.default: _bernoulli,
    aten.random_.default: _random_,
    aten.multinomial.default: _multinomial,
    aten.max.default: _full_reduction("max", torch.max),
    aten.min.default: _full_reduction("min", torch.min),
}


def _index_with_nones(self, indices):
    """self[..., idx, ...]: index.Tensor with None entries (x[:, ids], as
    generate()'s logits processors write) as one index_select: the indexed
    dims are moved to the front and flattened, the index tensors combined
    into one linear index (negative ones wrapped as ATen does), and the
    result's dims put where ATen puts them (at the first indexed dim when
    the index tensors are adjacent, else in front).  Bool masks take their
    own route (their size depends on the data)."""
    if getattr(_NESTED, "index", False):
        # reached again from inside: the kernels refused the data (an index out
        # of range fails index_select, whose torch._refs form indexes): PyTorch's
        # own kernel on the host gives its answer (its IndexError)
        return aten.index.Tensor(self.cpu(), [None if t is None else t.cpu() for t in indices]).to(self.device)
    _NESTED.index = True
    try:
        return _index_on_the_chip(self, indices)
    finally:
        _NESTED.index = False


def _index_on_the_chip(self, indices):
    indices = list(indices)
    while indices and indices[-1] is None:
        indices.pop()
    pos = [i for i, t in enumerate(indices) if t is not None]
    if not pos or any(indices[i].dtype in (torch.bool, torch.uint8) for i in pos):
        raise NotImplementedError("index.Tensor without index tensors, or with a mask")
    sizes = [self.shape[i] for i in pos]
    lin = None
    for i, n in zip(pos, sizes):
        t = indices[i].to(device=self.device, dtype=torch.int64)    # a CPU index is uploaded, as CUDA's is
        t = t + (t < 0).to(torch.int64) * n
        lin = t if lin is None else lin * n + t
    rest = [self.shape[d] for d in range(self.dim()) if d not in pos]
    moved = self.movedim(pos, list(range(len(pos)))).reshape([-1] + rest)
    bshape = list(lin.shape)
    out = moved.index_select(0, lin.reshape(-1)).reshape(bshape + rest)
    adjacent = pos == list(range(pos[0], pos[0] + len(pos)))
    if not adjacent or pos[0] == 0:
        return out
    nb = len(bshape)
    return out.movedim(list(range(nb)), list(range(pos[0], pos[0] + nb)))


def _sort(self, dim=-1, descending=False):
    """sort through top-k of every element: the kernel orders ties by
    position (a stable sort) and NaN as the largest (ATen's sort order)."""
    if self.dim() == 0:
        return self.clone(), torch.zeros_like(self, dtype=torch.int64)
    return torch.topk(self, self.shape[dim], dim, largest=descending, sorted=True)


def _sort_stable(self, *, stable=None, dim=-1, descending=False):
    return _sort(self, dim, descending)


RANDOM.update({
    aten.index.Tensor: _index_with_nones,
    aten.sort.default: _sort,
    aten.sort.stable: _sort_stable,
})
