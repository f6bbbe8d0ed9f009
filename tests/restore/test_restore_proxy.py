"""The SmolLM2 text proxy's attention-mass measurement, on a tiny random Llama with SmolLM2's
head_dim (64) and RoPE base (1e5)."""

import numpy as np
import pytest
import torch

from icml26.restore.study.proxy import ARMS, arm_name, block_mass, scene_block


@pytest.fixture(scope="module")
def lm():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=300,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        rope_theta=1e5,
        max_position_embeddings=1024,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).double().eval()


def ids(n, seed):
    return torch.randint(3, 300, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_full_mass_equals_eager_attention_weights(lm):
    sys_ids, blk, q = ids(5, 0), ids(40, 1), ids(6, 2)
    got = block_mass(lm, sys_ids, blk, q, keep=8, arms=())["full"]
    lm.config._attn_implementation = "eager"
    try:
        with torch.no_grad():
            out = lm(input_ids=torch.tensor([sys_ids + blk + q]), output_attentions=True)
    finally:
        lm.config._attn_implementation = "sdpa"
    want = [float(a[0, :, -6:, 5:45].sum(-1).mean()) for a in out.attentions]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)  # the record's softmax is float32
    assert got.shape == (2,) and ((got > 0) & (got < 1)).all()


@pytest.mark.parametrize("positions", ["retained", "reindexed"])
def test_pruned_uncalibrated_mass_equals_eager_on_the_pruned_sequence(lm, positions):
    """prune/<positions>/nocalib == the plain model (eager attention weights) on the sequence
    with the pruned block tokens removed, at the same rotary positions."""
    from icml26.restore.reducers import DivPrune

    sys_ids, blk, q = ids(4, 3), ids(24, 4), ids(5, 5)
    got = block_mass(lm, sys_ids, blk, q, keep=6, arms=[(False, positions, False)])
    got = got[arm_name(False, positions, False)]
    feats = lm.get_input_embeddings()(torch.tensor(blk)).detach().float()
    kept = DivPrune().reduce(feats, 6, None).positions()
    seq = sys_ids + [blk[i] for i in kept.tolist()] + q
    rel = kept if positions == "retained" else torch.arange(6)
    q0 = 4 + (24 if positions == "retained" else 6)
    pos = torch.cat([torch.arange(4), 4 + rel, q0 + torch.arange(5)])[None]
    lm.config._attn_implementation = "eager"
    try:
        with torch.no_grad():
            out = lm(input_ids=torch.tensor([seq]), position_ids=pos, output_attentions=True)
    finally:
        lm.config._attn_implementation = "sdpa"
    want = [float(a[0, :, -5:, 4:10].sum(-1).mean()) for a in out.attentions]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)


def test_arms_and_reduced_mass_are_finite(lm):
    m = block_mass(lm, ids(4, 6), ids(64, 7), ids(5, 8), keep=8)
    assert set(m) == {"full"} | {arm_name(*a) for a in ARMS}
    assert all(np.isfinite(v).all() and ((v >= 0) & (v <= 1)).all() for v in m.values())
    with pytest.raises(ValueError, match="keep must be in \\[1, 63\\]; got 0"):
        block_mass(lm, ids(4, 6), ids(64, 7), ids(5, 8), keep=0)


def test_scene_block_is_exactly_n_tokens_and_deterministic():
    from icml26.core.lm import byte_tokenizer

    tok = byte_tokenizer()
    a, qa = scene_block(tok, n=100, seed=3)
    b, qb = scene_block(tok, n=100, seed=3)
    assert len(a) == 100 and a == b and qa == qb and len(qa) > 10
    assert scene_block(tok, n=100, seed=4)[0] != a
