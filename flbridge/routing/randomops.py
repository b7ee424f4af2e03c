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

import torch

aten = torch.ops.aten


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


RANDOM = {
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
