import math

import pytest
import torch

from icml26.core.errors import UserError
from icml26.core.lm import tiny_llama
from icml26.corrsteer.mcqsteer import full_forward_logits
from icml26.corrsteer.sft import (
    SFTConfig,
    _lr_factor,
    finetune_letters,
    letter_logits,
    sft_schedule,
)


def test_schedule_follows_the_paper_recipe():
    # 400 items, one epoch: small-data cap 5e-6, warm-up max(100, 3%) = 100.
    assert sft_schedule(400, SFTConfig()) == (400, 100, 5e-6)
    # 4,000 items: no cap, warm-up 3% = 120.
    assert sft_schedule(4000, SFTConfig()) == (4000, 120, 1e-5)
    # 1,000 items x 4 epochs: 4,000 steps but n_train < 2,000, so the cap applies.
    assert sft_schedule(1000, SFTConfig(epochs=4)) == (4000, 120, 5e-6)
    total, warmup = 400, 100
    assert _lr_factor(0, total, warmup) == 0
    assert _lr_factor(50, total, warmup) == pytest.approx(0.5)
    assert _lr_factor(100, total, warmup) == pytest.approx(1.0)
    assert _lr_factor(250, total, warmup) == pytest.approx(0.5)  # cosine midpoint
    assert _lr_factor(400, total, warmup) == pytest.approx(0.0, abs=1e-12)
    assert _lr_factor(175, total, warmup) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.25)))
    with pytest.raises(UserError, match="epochs"):
        SFTConfig(epochs=0)


def test_finetune_raises_target_logprob_and_leaves_the_model_untouched():
    model, _ = tiny_llama(hidden=32, layers=2, heads=4, seed=0)
    g = torch.Generator().manual_seed(0)
    ids = [torch.randint(3, 250, (n,), generator=g) for n in (5, 7, 6, 9)]
    letters = [65, 66, 67]
    targets = [65, 67, 66, 65]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = SFTConfig(lr=0.05, small_data_lr_cap=0.05, epochs=10, compute_dtype=None)

    def mean_target_logprob(m):
        lp = torch.log_softmax(torch.stack([m(input_ids=x[None]).logits[0, -1] for x in ids]), -1)
        return float(lp[torch.arange(4), torch.tensor(targets)].mean())

    with torch.no_grad():
        base = mean_target_logprob(model)
    ft, stats = finetune_letters(model, ids, targets, cfg)
    with torch.no_grad():
        tuned = mean_target_logprob(ft)
    assert tuned > base + 1.0
    assert stats["steps"] == 40 and stats["loss_last10pct"] < stats["loss_first10pct"]
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    # letter_logits (no autocast) equals a plain full forward.
    got = letter_logits(ft, ids, letters, compute_dtype=None)
    for j, x in enumerate(ids):
        torch.testing.assert_close(got[j], full_forward_logits(ft, x, letters)[0], atol=1e-5, rtol=0)
    with pytest.raises(UserError, match="at least one"):
        finetune_letters(model, [], [], cfg)
