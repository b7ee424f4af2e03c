"""Hugging Face generate() on th1 stays on the chip (slow: imports
transformers): greedy decoding gives the CPU's tokens; sampling
(top-k / top-p, multinomial) draws from the chip's generator, so a seed
reproduces it; neither runs any op on the CPU, per token or otherwise."""
import pytest
import torch

import flbridge
from tests.conftest import routes

pytestmark = pytest.mark.slow

NEW = 8


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=32, bos_token_id=0,
                     eos_token_id=0, pad_token_id=0)
    torch.manual_seed(0)
    return GPT2LMHeadModel(cfg).eval()


IDS = torch.randint(1, 64, (2, 5), generator=torch.Generator().manual_seed(3))


def _generate(model, dev, **kw):
    with torch.no_grad():
        return model.generate(IDS.to(dev), attention_mask=torch.ones_like(IDS).to(dev), max_new_tokens=NEW,
                              min_new_tokens=NEW, **kw).cpu()


def _cpu_ops(dev):
    return {k: v for k, v in routes(dev).items() if k[1] == "cpu"}


def test_greedy_generate_gives_the_cpus_tokens_with_no_cpu_op(th1):
    model = _gpt2()
    ref = _generate(model, "cpu", do_sample=False)
    flm = model.to(th1)
    flbridge.reset_stats(th1)
    got = _generate(flm, th1, do_sample=False)
    assert torch.equal(got, ref)
    assert _cpu_ops(th1) == {}
    assert flbridge.stats(th1)["cpu_fallback_ops"] == 0


@pytest.mark.parametrize("kw", [dict(top_k=10), dict(top_p=0.9, temperature=0.7)], ids=["top_k", "top_p"])
def test_sampled_generate_stays_on_the_chip_and_a_seed_reproduces_it(th1, kw):
    model = _gpt2().to(th1)
    outs = []
    for seed in (5, 5, 6):
        torch.fl.manual_seed_all(seed)
        flbridge.reset_stats(th1)
        outs.append(_generate(model, th1, do_sample=True, **kw))
        assert _cpu_ops(th1) == {}
        r = routes(th1)
        assert r.get(("aten::multinomial.default", "decomposed")) == NEW   # one draw per token
    assert torch.equal(outs[0], outs[1])
    assert not torch.equal(outs[0], outs[2])
    assert outs[0].shape == (2, 5 + NEW) and bool((outs[0] >= 0).all() and (outs[0] < 64).all())
