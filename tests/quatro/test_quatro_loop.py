"""Task scoring, pass@k against brute force, sampler/log-prob consistency, resumable RLLoop."""

import itertools
import math

import numpy as np
import pytest
import torch

from icml26.core.lm import tiny_llama
from icml26.quatro.loop import (
    RLConfig,
    RLLoop,
    completion_logprobs,
    encode_prompts,
    sample_completions,
)
from icml26.quatro.task import pass_at_k, problems, score


@pytest.mark.parametrize("n,c,k", [(5, 2, 1), (5, 2, 3), (6, 0, 2), (6, 6, 4), (7, 3, 7)])
def test_pass_at_k_brute_force(n, c, k):
    outcomes = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    brute = np.mean([any(outcomes[i] for i in s) for s in subsets])
    assert math.isclose(pass_at_k(n, c, k), brute, rel_tol=1e-12)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_splits_disjoint_and_scoring():
    tr, te = problems("add2", "train"), problems("add2", "test")
    assert len(tr) + len(te) == 10_000 and not {p.prompt for p in tr} & {p.prompt for p in te}
    p = tr[0]
    assert score(p, p.answer) == 1.0 and score(p, p.answer + "0") == 0.0
    with pytest.raises(ValueError, match="unknown task 'mul'; known: add2, chain3"):
        problems("mul", "train")


def _model():
    torch.manual_seed(0)
    return tiny_llama(hidden=32, layers=1, heads=2, max_len=32, seed=0)


def test_sampler_mask_and_logprobs_consistent():
    model, tok = _model()
    ids, am = encode_prompts(tok, ["12+34=", "1+2+3="] * 4)
    gen = torch.Generator().manual_seed(0)
    toks, mask = sample_completions(model, ids, am, 4, 1.0, tok.eos_token_id, tok.pad_token_id, gen)
    assert toks.shape == mask.shape == (8, 4)
    for row, m in zip(toks.tolist(), mask.tolist(), strict=True):  # mask ends at the first EOS
        if tok.eos_token_id in row:
            e = row.index(tok.eos_token_id)
            assert m[: e + 1] == [1.0] * (e + 1) and sum(m) == e + 1
    # the cached sampler's distribution equals the full-recompute log-probs (same model)
    lp = completion_logprobs(model, ids, am, toks)
    assert torch.isfinite(lp[mask.bool()]).all()
    gen2 = torch.Generator().manual_seed(0)
    out = model(input_ids=ids, attention_mask=am).logits[:, -1].float()
    first = torch.multinomial(torch.softmax(out, -1), 1, generator=gen2).squeeze(1)
    assert torch.equal(first, toks[:, 0])
    assert torch.allclose(
        lp[:, 0], torch.log_softmax(out, -1).gather(1, first[:, None]).squeeze(1), atol=1e-5
    )


def test_resumed_run_equals_unbroken(tmp_path):
    cfg = RLConfig(steps=3, prompts=2, group_size=4, mu=2, lr=1e-3, eval_prompts=4, eval_samples=2)
    m1, tok = _model()
    h1 = RLLoop(m1, tok, cfg, "tr_dual").run()
    m2, _ = _model()
    ck = tmp_path / "ck.pt"
    RLLoop(m2, tok, cfg, "tr_dual", checkpoint_path=ck, metrics_path=tmp_path / "m.jsonl").run(
        steps=2
    )
    m3, _ = _model()
    loop = RLLoop(m3, tok, cfg, "tr_dual", checkpoint_path=ck, metrics_path=tmp_path / "m.jsonl")
    assert loop.step == 2
    h3 = loop.run()
    for a, b in zip(m1.state_dict().values(), m3.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert h1[-1] == h3[-1]
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 4  # eval@0 + 3 steps
    with pytest.raises(ValueError, match="another RLConfig"):
        RLLoop(_model()[0], tok, RLConfig(steps=9, prompts=2, group_size=4), checkpoint_path=ck)


def test_config_errors():
    with pytest.raises(ValueError, match="group_size"):
        RLConfig(group_size=1)
    with pytest.raises(ValueError, match="unknown task"):
        RLConfig(tasks=("nope",))
