"""forward_with_pre_hooks: hooks see every batch's inputs and are removed, even on failure."""

import pytest
import torch

from icml26.core.hooks import forward_with_pre_hooks
from icml26.core.lm import tiny_llama


def test_hooks_see_every_token_and_are_removed():
    model, _ = tiny_llama(hidden=32, layers=2, heads=2, seed=0)
    seen = []
    target = model.model.layers[1].mlp.down_proj
    batches = [torch.randint(0, 256, (2, 8)), torch.randint(0, 256, (1, 5))]
    n = forward_with_pre_hooks(model, batches, {target: lambda m, args: seen.append(args[0].shape)})
    assert n == 2 and [s[:2] for s in seen] == [(2, 8), (1, 5)]
    model(input_ids=batches[0])
    assert len(seen) == 2  # removed afterwards
    assert not target._forward_pre_hooks


def test_hooks_removed_when_forward_fails():
    model, _ = tiny_llama(hidden=32, layers=1, heads=2, seed=0)
    target = model.model.layers[0].self_attn.q_proj

    def boom(m, args):
        raise RuntimeError("hook failed")

    with pytest.raises(RuntimeError, match="hook failed"):
        forward_with_pre_hooks(model, [torch.zeros(1, 4, dtype=torch.long)], {target: boom})
    assert not target._forward_pre_hooks
